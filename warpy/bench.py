"""`warpy gemm M N K` (build, check, run, time one GEMM) and `warpy bench gemm` (warpy against cuBLAS).

Timing follows REFERENCE.md "Measuring on a GPU": per-call GPU time from CUDA events around each
call, the median of many calls after warm-up, both sides measured the same way in one process,
interleaved (warpy, cuBLAS, cuBLAS, warpy, twice); small shapes rotate several input sets so the L2
does not hold them across calls; a spin kernel occupies the GPU while a batch is enqueued, so the
events time the kernels back to back and not the host's launch latency.
"""

from __future__ import annotations

import math
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Optional

import attrs
import numpy as np

from warpy.errors import NoGPU, WarpyError

DEFAULT_SHAPES: tuple[tuple[int, int, int], ...] = (
    (1024, 1024, 1024), (1536, 1536, 1536), (2048, 2048, 2048), (3072, 1280, 2048), (4096, 4096, 1024),
    (4096, 4096, 4096), (8192, 2048, 4096), (8192, 8192, 8192), (16384, 16384, 16384),
    (2048, 2048, 16384), (1024, 1024, 65536),
)
HOST_OVERHEAD_SHAPES: tuple[tuple[int, int, int], ...] = ((256, 256, 256), (4096, 4096, 4096))


# ---------------------------------------------------------------------------------------------
# Shapes and tables (pure)


def parse_shape(text: str) -> tuple[int, int, int]:
    """`MxNxK` (also `M,N,K`) or `N` (a cube); one-line WarpyError otherwise."""
    parts = re.split(r"[x×,]", text.strip().lower())
    if len(parts) not in (1, 3) or not all(re.fullmatch(r"[0-9]+", p) for p in parts):
        raise WarpyError(f"shape {text!r} is not MxNxK or N (e.g. 4096x4096x1024 or 2048)")
    dims = tuple(int(p) for p in parts)
    if any(d < 1 for d in dims):
        raise WarpyError(f"shape {text!r} has a zero extent")
    return (dims[0], dims[0], dims[0]) if len(dims) == 1 else (dims[0], dims[1], dims[2])


def shape_text(shape: tuple[int, int, int]) -> str:
    M, N, K = shape
    return f"{M}³" if M == N == K else f"{M}x{N}x{K}"


def tflops(shape: tuple[int, int, int], us: float) -> float:
    M, N, K = shape
    return 2.0 * M * N * K / (us * 1e-6) / 1e12


@attrs.frozen
class BenchRow:
    """One shape's result: median per-call GPU times (µs; None when that side did not run), and
    the correctness check's verdict ("ok", "FAIL ...", or an error's line)."""

    shape: tuple[int, int, int]
    warpy_us: Optional[float]
    cublas_us: Optional[float]
    check: str

    @property
    def ratio(self) -> Optional[float]:
        """cuBLAS time / warpy time: above 1 means warpy is faster."""
        if self.warpy_us is None or self.cublas_us is None or self.warpy_us <= 0:
            return None
        return self.cublas_us / self.warpy_us


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool] | None = None) -> str:
    """A plain-text table: columns as wide as their widest cell, numbers right-aligned."""
    right = list(right) if right is not None else [False] + [True] * (len(headers) - 1)
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows]) + "\n"


def _num(x: Optional[float], fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def bench_table(rows: Sequence[BenchRow]) -> str:
    """shape | warpy µs | cuBLAS µs | warpy TFLOP/s | cuBLAS TFLOP/s | ratio (cuBLAS/warpy) | check."""
    body = []
    for r in rows:
        body.append([
            shape_text(r.shape),
            _num(r.warpy_us, ".1f"), _num(r.cublas_us, ".1f"),
            _num(None if r.warpy_us is None else tflops(r.shape, r.warpy_us), ".0f"),
            _num(None if r.cublas_us is None else tflops(r.shape, r.cublas_us), ".0f"),
            _num(r.ratio, ".3f"),
            r.check,
        ])
    headers = ["shape", "warpy µs", "cuBLAS µs", "warpy TFLOP/s", "cuBLAS TFLOP/s", "ratio", "check"]
    return format_table(headers, body, [False, True, True, True, True, True, False])


# ---------------------------------------------------------------------------------------------
# Progress on stderr, for steps that take over a second


class Progress:
    """`step(msg)` starts a step; if it is still the current step after `after` seconds, `msg...`
    goes to stderr. `done()` ends the last step."""

    def __init__(self, after: float = 1.0, stream: Any = None) -> None:
        self.after = after
        self.stream = stream if stream is not None else sys.stderr
        self._timer: Optional[threading.Timer] = None
        self._lock = threading.Lock()

    def step(self, msg: str) -> None:
        self.done()
        t = threading.Timer(self.after, self._show, args=(msg,))
        t.daemon = True
        with self._lock:
            self._timer = t
        t.start()

    def _show(self, msg: str) -> None:
        with self._lock:
            if self._timer is None:
                return
        print(f"{msg}...", file=self.stream, flush=True)

    def done(self) -> None:
        with self._lock:
            t, self._timer = self._timer, None
        if t is not None:
            t.cancel()

    __call__ = step


# ---------------------------------------------------------------------------------------------
# Exact checks on small integers


def small_ints(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    return rng.integers(-3, 4, size=shape).astype(np.float32)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 → bf16 bit patterns (uint16), rounding to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def to_bits(x: np.ndarray, dtype: str) -> np.ndarray:
    """An f32 array in the device representation of `dtype` (bf16: uint16 bits)."""
    if dtype == "bf16":
        return bf16_bits(x)
    if dtype == "fp16":
        return x.astype(np.float16)
    return x.astype(np.float32)


def from_bits(raw: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bf16":
        return bf16_to_f32(raw.view(np.uint16)).astype(np.float64)
    return raw.astype(np.float64)


def output_spacing(ref: np.ndarray, dtype: str) -> np.ndarray:
    """The gap between neighbouring values of `dtype` at each |ref| (0 for f32: exact)."""
    if dtype == "f32":
        return np.zeros_like(ref)
    mant = {"bf16": 7, "fp16": 10}[dtype]
    a = np.abs(ref)
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    if dtype == "fp16":
        e = np.maximum(e, -14.0)
    return np.where(a > 0, np.exp2(e - mant), 0.0)


def compare_exact(got: np.ndarray, ref: np.ndarray, out_dtype: str) -> tuple[int, str]:
    """(mismatches, a one-line account) of C against the float64 reference: f32 exact; bf16/fp16
    within half a step of the output type (one rounding of the exact sum)."""
    tol = output_spacing(ref, out_dtype) / 2
    bad = ~(np.abs(got - ref) <= tol)  # NaN (an element never written: the buffer starts as NaN) is wrong
    n = int(bad.sum())
    if not n:
        return 0, f"exact ({got.size} elements{'' if out_dtype == 'f32' else ', within the output rounding'})"
    idx = np.argwhere(bad)[:3]
    first = "; ".join(f"C[{i},{j}]={got[i, j]:g} want {ref[i, j]:g}" for i, j in idx)
    return n, f"{n} of {got.size} elements wrong: {first}"


# ---------------------------------------------------------------------------------------------
# GPU timing


_SPIN_PTX = """.version 8.0
.target {arch}
.address_size 64
.visible .entry warpy_spin(.param .u64 cycles)
{{
    .reg .u64 %t0, %t1, %n, %d;
    .reg .pred %p;
    ld.param.u64 %n, [cycles];
    mov.u64 %t0, %clock64;
SPIN:
    mov.u64 %t1, %clock64;
    sub.u64 %d, %t1, %t0;
    setp.lt.u64 %p, %d, %n;
    @%p bra SPIN;
    ret;
}}
"""

_spin_kernel: dict[str, Any] = {}


def spin(stream: Any, microseconds: float) -> None:
    """Occupy the GPU for about `microseconds` (a one-thread clock spin at ~2 GHz), so work enqueued
    behind it runs back to back."""
    from warpy import runtime as rt
    from warpy.lift.ptxas import assemble

    k = _spin_kernel.get("k")
    if k is None:
        arch = rt.device().sm + "a"
        k = _spin_kernel["k"] = rt.load(assemble(_SPIN_PTX.format(arch=arch), arch)).kernel("warpy_spin")
    rt.launch(k, 1, 1, 0, [rt.u64(int(microseconds * 2000))], stream=stream)


def gpu_times_us(enqueue: Callable[[int], None], stream: Any, iters: int, warmup: int = 3,
                 timeout: float = 120.0) -> list[float]:
    """Per-call GPU times (µs) of `enqueue(i)` for i in 0..iters-1, each between two CUDA events on
    `stream`, enqueued behind a spin so they run back to back."""
    from warpy.runtime.driver import check, cuda
    from warpy.runtime.launcher import synchronize

    d = cuda()
    for i in range(warmup):
        enqueue(i)
    synchronize(stream, timeout)
    events = [(check(d.cuEventCreate(0), "cuEventCreate"), check(d.cuEventCreate(0), "cuEventCreate"))
              for _ in range(iters)]
    try:
        spin(stream, min(200_000.0, 100.0 * iters + 2000.0))  # longer than enqueueing the batch takes
        for i, (start, end) in enumerate(events):
            check(d.cuEventRecord(start, stream), "cuEventRecord")
            enqueue(i)
            check(d.cuEventRecord(end, stream), "cuEventRecord")
        synchronize(stream, timeout)
        return [1000.0 * float(check(d.cuEventElapsedTime(s, e), "cuEventElapsedTime")) for s, e in events]
    finally:
        for s, e in events:
            d.cuEventDestroy(s)
            d.cuEventDestroy(e)


def l2_bytes() -> int:
    from warpy import runtime as rt
    from warpy.runtime.driver import check, cuda

    d = cuda()
    dev = rt.device()
    return int(check(d.cuDeviceGetAttribute(d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev.handle),
                     "cuDeviceGetAttribute L2"))


def rotation(shape: tuple[int, int, int], elem: int, out_elem: int, l2: int, cap: int = 32) -> int:
    """How many input/output sets to cycle through so that one call's operands are out of the L2
    by the time they come round again (their bytes over three L2s), at most `cap`."""
    M, N, K = shape
    per_set = (M * K + N * K) * elem + M * N * out_elem
    return max(1, min(cap, math.ceil(3 * l2 / per_set)))


# ---------------------------------------------------------------------------------------------
# warpy gemm M N K


def _gpu_reason(arch: str) -> Optional[str]:
    """None when a GPU that runs `arch` cubins is here; else why not (one line)."""
    try:
        from warpy import runtime as rt

        dev = rt.device()
    except WarpyError as e:
        return str(e)
    if not dev.can_run(arch):
        return f"the GPU ({dev.name}) is {dev.sm}, not {arch.rstrip('a')}"
    return None


def plan_for(problem: Any, config: Optional[str] = None, **kw: Any) -> Any:
    """`make_plan` of the rule's configuration, or of it with `config`'s fields set by hand
    (`kernels.programs.configure`, text `key=value,...`)."""
    from warpy.matmul import make_plan, programs

    return make_plan(problem, config=programs().configure(problem, config) if config else None, **kw)


def gemm_job(M: int, N: int, K: int, arch: str = "sm_90a", dtype: str = "bf16", out_dtype: str = "f32",
             emit: Optional[str] = None, output: Optional[str] = None, run: bool = True, iters: int = 100,
             echo: Callable[[str], None] = print, config: Optional[str] = None) -> None:
    """Pick, build, lift, assemble (resources), check the disassembly, optionally emit an artifact;
    on a GPU of the target: run on small integers, compare exactly with numpy, time."""
    from warpy.lift.disasm import find_disassembler
    from warpy.matmul import dtype_name, programs

    if emit is not None and emit not in ("sass", "ptx", "cubin"):
        raise WarpyError(f"--emit {emit!r} is not one of sass, ptx, cubin")
    if emit == "cubin" and output is None:
        raise WarpyError("--emit cubin needs -o PATH")
    if output is not None and emit is None:
        raise WarpyError("-o PATH goes with --emit sass|ptx|cubin")
    odt = dtype_name(out_dtype)
    artifact = echo
    if emit in ("sass", "ptx") and output is None:  # stdout carries the artifact; the report goes to stderr
        def echo(line: str) -> None:
            print(line, file=sys.stderr, flush=True)
    progress = Progress()
    try:
        problem = programs().GemmProblem(M, N, K, dtype=dtype, out_dtype=odt, arch=arch)
        progress("planning")
        plan = plan_for(problem, config, progress=progress, keep_program=emit == "sass")
        progress.done()
        h = plan.header
        echo(f"program: {plan.describe}")
        r = plan.cubin.resource(h.kernel)
        echo(f"kernel {h.kernel}: {r.registers} registers, {h.dynsmem + r.shared_bytes} bytes shared memory, "
             f"{r.spill_stores + r.spill_loads} spill bytes; grid {'x'.join(map(str, h.grid))}, "
             f"{h.threads} threads, cluster {'x'.join(map(str, h.cluster))}")
        for w in plan.cubin.warnings:
            echo(w.line())
        try:
            find_disassembler()
        except WarpyError:
            echo("disassembly check skipped: no nvdisasm or cuobjdump found")
        else:
            progress("checking the disassembly")
            echo(disassembly_line(plan))
            progress.done()
        if emit is not None:
            (artifact if output is None else echo)(_emit(plan, emit, output))
        if not run:
            return
        why = _gpu_reason(arch)
        if why is not None:
            echo(f"not run: no {arch.rstrip('a')} GPU here ({why}); built and assembled only")
            return
        progress("running")
        n_bad, msg = run_check(plan, problem.M, problem.N, problem.K, problem.dtype, odt)
        progress.done()
        echo(f"check against numpy (inputs in [-3, 3]): {msg}")
        if n_bad:
            raise WarpyError(f"GEMM {M}x{N}x{K} gave wrong results ({n_bad} elements)")
        progress("timing")
        us = time_plan(plan, iters)
        progress.done()
        echo(f"time: {us:.1f} µs (median of {iters} calls), {tflops((M, N, K), us):.1f} TFLOP/s")
    finally:
        progress.done()


def disassembly_line(plan: Any) -> str:
    """`disassembly: N opcodes as written; main loop L instructions` (or what is missing)."""
    from warpy.isa.text import parse
    from warpy.lift.disasm import MMA_OPCODES, check_opcodes, disassemble, loop_instruction_count
    from warpy.lift.lifter import expected_opcodes

    kernel = parse(plan.sass)
    want = expected_opcodes(kernel, plan.problem.arch)
    chk = check_opcodes(want, plan.cubin, plan.header.kernel, fail=False)
    loop = loop_instruction_count(disassemble(plan.cubin).kernel(plan.header.kernel), holding=MMA_OPCODES)
    head = (f"disassembly check passed ({len(want)} opcodes as written)" if chk.ok
            else f"disassembly check FAILED: missing {', '.join(chk.missing)}")
    return f"{head}; main loop {loop} instructions"


def _emit(plan: Any, emit: str, output: Optional[str]) -> str:
    from pathlib import Path

    if emit == "sass":
        prog = plan.program
        if prog is not None:
            text = str(prog.coloured())
        else:
            from warpy.isa.colour import colour
            from warpy.isa.text import parse

            text = str(colour(parse(plan.sass)))
        data: bytes | str = text
    elif emit == "ptx":
        data = plan.ptx
    else:
        data = plan.cubin.data
    if output is None:
        return data if isinstance(data, str) else ""
    try:
        if isinstance(data, bytes):
            Path(output).write_bytes(data)
        else:
            Path(output).write_text(data)
    except OSError as e:
        raise WarpyError(f"cannot write {output}: {e.strerror or e}") from None
    return f"wrote {output} ({emit}, {len(data)} {'bytes' if isinstance(data, bytes) else 'characters'})"


def run_check(plan: Any, M: int, N: int, K: int, dtype: str, out_dtype: str, seed: int = 20261129) -> tuple[int, str]:
    """Run the plan once on inputs in [-3, 3] and compare with the float64 product."""
    from warpy import runtime as rt
    from warpy.matmul import bind_gemm
    from warpy.runtime.bind import alloc_scratch, free_scratch, run_header

    rng = np.random.default_rng(seed)
    a = small_ints(rng, (M, K))
    b = small_ints(rng, (N, K))
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    da, db = rt.to_device(to_bits(a, dtype)), rt.to_device(to_bits(b, dtype))
    out_elem = 4 if out_dtype == "f32" else 2
    dc = rt.alloc(M * N * out_elem)
    dc.fill(0xFF)  # NaN everywhere: an element the kernel never writes cannot pass
    scratch = alloc_scratch(plan.header)  # zeroed on warpy's stream, which run_header launches on
    try:
        k = _kernel_of(plan)
        params = bind_gemm(plan.header, da, db, dc, M, N, K, scratch=scratch)
        run_header(k, plan.header, params, timeout=30)
        raw = dc.download({"f32": np.float32, "fp16": np.float16, "bf16": np.uint16}[out_dtype], (M, N))
    finally:
        for buf in (da, db, dc):
            buf.free()
        free_scratch(scratch)
    return compare_exact(from_bits(raw, out_dtype), ref, out_dtype)


_kernels: dict[int, Any] = {}


def _kernel_of(plan: Any) -> Any:
    from warpy import runtime as rt

    k = _kernels.get(id(plan))
    if k is None:
        k = _kernels[id(plan)] = (plan, rt.load(plan.cubin).kernel(plan.header.kernel))
    return k[1]


def time_plan(plan: Any, iters: int = 100) -> float:
    """Median per-call GPU time (µs) of the plan on random-normal inputs, rotating input sets."""
    from warpy import runtime as rt
    from warpy.matmul import bind_gemm
    from warpy.runtime.bind import FastLaunch
    from warpy.runtime.launcher import default_stream

    p = plan.problem
    M, N, K = p.M, p.N, p.K
    out_elem = 4 if p.out_dtype in ("f32", "fp32") else 2
    sets = rotation((M, N, K), 2, out_elem, l2_bytes())
    rng = np.random.default_rng(1)
    bufs = []
    for _ in range(sets):
        a = rt.to_device(to_bits(rng.standard_normal((M, K), dtype=np.float32), p.dtype))
        b = rt.to_device(to_bits(rng.standard_normal((N, K), dtype=np.float32), p.dtype))
        bufs.append((a, b, rt.alloc(M * N * out_elem)))
    k = _kernel_of(plan)
    fast = FastLaunch(k, plan.header)  # owns the kernel's scratch memory for this timing
    stream = default_stream()
    handle = int(stream)
    scratch = fast.scratch.get(handle)  # the set every launch below (all on `stream`) binds
    params = [bind_gemm(plan.header, a, b, c, M, N, K, scratch=scratch) for a, b, c in bufs]
    try:
        samples = gpu_times_us(lambda i: fast(i % sets, lambda _s: params[i % sets], handle), stream, iters)
    finally:
        for trio in bufs:
            for buf in trio:
                buf.free()
        fast.scratch.free()
    return statistics.median(samples)


# ---------------------------------------------------------------------------------------------
# warpy bench gemm


def _torch() -> Any:
    try:
        import torch  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise WarpyError("warpy bench compares with cuBLAS through torch: install torch (with CUDA)") from None
    if not torch.cuda.is_available():
        raise NoGPU("torch sees no CUDA GPU")
    return torch


def bench_gemm(shapes: Sequence[tuple[int, int, int]], dtype: str = "bf16", out_dtype: Optional[str] = None,
               iters: int = 50, echo: Callable[[str], None] = print, config: Optional[str] = None) -> list[BenchRow]:
    """warpy.gemm against torch.mm (cuBLAS), interleaved, per shape; prints each row as it lands.
    With `config` (fields of the rule's configuration set by hand), warpy's side launches that
    plan on the same tensors instead of warpy.gemm's."""
    import warpy
    from warpy import runtime as rt
    from warpy.matmul import dtype_name

    why = _gpu_reason("sm_90a")
    if why is not None:
        raise NoGPU(f"warpy bench needs an sm_90 GPU: {why}")
    torch = _torch()
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    odt = dtype_name(out_dtype) if out_dtype else dtype
    todt = {"f32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[odt]
    dev = torch.device("cuda", 0)
    stream_handle = int(torch.cuda.current_stream(dev).cuda_stream)
    from warpy.runtime.driver import cuda

    cu_stream = cuda().CUstream(stream_handle)
    l2 = l2_bytes()
    rows: list[BenchRow] = []
    echo(f"{rt.device().name}: {dtype} inputs, {odt} output (cuBLAS: torch.mm, {'bf16/fp16' if odt != 'f32' else 'f32 via out_dtype where torch has it'}); "
         f"median of {iters} calls x 4 interleaved rounds each")
    progress = Progress()
    for shape in shapes:
        M, N, K = shape
        progress(f"{shape_text(shape)}: planning")
        try:
            sets = rotation(shape, 2, 4 if odt == "f32" else 2, l2)
            g = torch.Generator(device=dev).manual_seed(0)
            A = [torch.randn((M, K), device=dev, dtype=tdt, generator=g) for _ in range(sets)]
            B = [torch.randn((N, K), device=dev, dtype=tdt, generator=g) for _ in range(sets)]
            Cw = [torch.empty((M, N), device=dev, dtype=todt) for _ in range(sets)]
            Cc = [torch.empty((M, N), device=dev, dtype=todt) for _ in range(sets)]
            cublas = _cublas_call(torch, todt)
            if config:
                run_w = _configured_launcher(shape, dtype, odt, config, A, B, Cw, stream_handle)
            else:
                def run_w(i: int) -> None:
                    j = i % sets
                    warpy.gemm(A[j], B[j], out=Cw[j])
            run_w(0)  # plan + load before timing

            def run_c(i: int) -> None:
                j = i % sets
                cublas(A[j], B[j], Cc[j])

            progress(f"{shape_text(shape)}: timing")
            w_samples: list[float] = []
            c_samples: list[float] = []
            for side in ("w", "c", "c", "w") * 2:
                fn, acc = (run_w, w_samples) if side == "w" else (run_c, c_samples)
                acc += gpu_times_us(fn, cu_stream, iters)
            check = _bench_check(torch, A[0], B[0], Cw[0], K)
            row = BenchRow(shape, statistics.median(w_samples), statistics.median(c_samples), check)
            del A, B, Cw, Cc
            torch.cuda.empty_cache()
        except WarpyError as e:
            row = BenchRow(shape, None, None, f"error: {e}")
        progress.done()
        rows.append(row)
        print(f"{shape_text(shape)}: warpy {_num(row.warpy_us, '.1f')} µs, cuBLAS {_num(row.cublas_us, '.1f')} µs, "
              f"{row.check}", file=sys.stderr, flush=True)
    echo(bench_table(rows).rstrip("\n"))
    return rows


def _configured_launcher(shape: tuple[int, int, int], dtype: str, odt: str, config: str, A: list[Any], B: list[Any],
                         C: list[Any], stream: int) -> Callable[[int], None]:
    """Launches of `config`'s plan on the i-th (mod len) torch tensors, on `stream`."""
    from warpy.matmul import bind_gemm, programs
    from warpy.runtime.bind import DeviceSpan, FastLaunch

    M, N, K = shape
    plan = plan_for(programs().GemmProblem(M, N, K, dtype=dtype, out_dtype=odt, arch="sm_90a"), config)
    fast = FastLaunch(_kernel_of(plan), plan.header)

    def span(t: Any) -> DeviceSpan:
        return DeviceSpan(t.data_ptr(), t.numel() * t.element_size())

    def run(i: int) -> None:
        j = i % len(A)
        fast(j, lambda scratch: bind_gemm(plan.header, span(A[j]), span(B[j]), span(C[j]), M, N, K, scratch=scratch),
             stream)

    return run


def _cublas_call(torch: Any, todt: Any) -> Callable[[Any, Any, Any], None]:
    """torch.mm(a, b.t()) into c: the input type directly; f32 output through out_dtype where this
    torch has it, else through the input type (noted as such)."""

    def same(a: Any, b: Any, c: Any) -> None:
        torch.mm(a, b.t(), out=c)

    if todt != torch.float32:
        return same
    try:
        probe = torch.zeros((16, 16), device="cuda", dtype=torch.bfloat16)
        torch.mm(probe, probe.t(), out_dtype=torch.float32)
    except (TypeError, RuntimeError):
        def via_input_type(a: Any, b: Any, c: Any) -> None:
            c.copy_(torch.mm(a, b.t()))

        return via_input_type

    def f32_out(a: Any, b: Any, c: Any) -> None:
        c.copy_(torch.mm(a, b.t(), out_dtype=torch.float32))

    return f32_out


def _bench_check(torch: Any, a: Any, b: Any, c: Any, K: int) -> str:
    """warpy's C against an fp32 product on the GPU: within bf16-scale tolerance (one rounding of the
    output plus accumulation-order differences on sums of size ~sqrt(K))."""
    ref = torch.mm(a.float(), b.float().t())
    err = (c.float() - ref).abs()
    tol = 2.0 ** -7 * ref.abs() + 2.0 ** -9 * math.sqrt(K)
    bad = int((err > tol).sum().item())
    worst = float(err.max().item())
    return "ok" if bad == 0 else f"FAIL ({bad} elements; max |Δ| {worst:.3g})"


def write_png(rows: Sequence[BenchRow], path: str) -> str:
    """A bar chart of cuBLAS time / warpy time per shape (matplotlib); a one-line note if unavailable."""
    try:
        import matplotlib  # type: ignore[import-not-found,unused-ignore]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return f"no chart: matplotlib is not installed (wanted {path})"
    names = [shape_text(r.shape) for r in rows]
    ratios = [r.ratio or 0.0 for r in rows]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(rows)), 4.0))
    ax.bar(names, ratios, color=["tab:green" if x >= 1 else "tab:orange" for x in ratios])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylabel("cuBLAS time / warpy time")
    ax.set_title("warpy GEMM vs cuBLAS (above 1: warpy faster)")
    ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as e:
        raise WarpyError(f"cannot write {path}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
    return f"wrote {path}"


# ---------------------------------------------------------------------------------------------
# Host overhead


@attrs.frozen
class OverheadRow:
    what: str
    enqueue_us: float  # host time per call, calls back to back with the GPU busy
    sync_us: float  # wall time of call + stream synchronize, median
    gpu_us: float  # the kernel's GPU time, median

    @property
    def overhead_us(self) -> float:
        return self.sync_us - self.gpu_us


def overhead_table(rows: Sequence[OverheadRow]) -> str:
    body = [[r.what, f"{r.enqueue_us:.1f}", f"{r.gpu_us:.1f}", f"{r.sync_us:.1f}", f"{r.overhead_us:.1f}"]
            for r in rows]
    return format_table(["call", "host µs/call", "GPU µs", "call+sync µs", "call+sync − GPU µs"], body)


def host_overhead(shapes: Sequence[tuple[int, int, int]], dtype: str = "bf16", out_dtype: Optional[str] = None,
                  calls: int = 200, echo: Callable[[str], None] = print) -> list[OverheadRow]:
    """Host cost per call of warpy.gemm (out given / allocated) next to torch.mm's, per shape:
    back-to-back enqueue time per call (GPU kept busy by a spin), and the median of (call + wait)
    minus the kernel's GPU time."""
    import warpy
    from warpy.matmul import dtype_name

    why = _gpu_reason("sm_90a")
    if why is not None:
        raise NoGPU(f"warpy bench --host-overhead needs an sm_90 GPU: {why}")
    torch = _torch()
    from warpy.runtime.driver import cuda

    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    odt = dtype_name(out_dtype) if out_dtype else dtype
    todt = {"f32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[odt]
    dev = torch.device("cuda", 0)
    stream = torch.cuda.current_stream(dev)
    cu_stream = cuda().CUstream(int(stream.cuda_stream))
    rows: list[OverheadRow] = []
    for shape in shapes:
        M, N, K = shape
        a = torch.randn((M, K), device=dev, dtype=tdt)
        b = torch.randn((N, K), device=dev, dtype=tdt)
        c = torch.empty((M, N), device=dev, dtype=todt)
        c_same = torch.empty((M, N), device=dev, dtype=tdt)
        t0 = time.perf_counter()
        warpy.gemm(a, b, out=c)
        stream.synchronize()
        echo(f"{shape_text(shape)}: first warpy.gemm call in this process {1e3 * (time.perf_counter() - t0):.1f} ms "
             "(plan from the disk cache or built, cubin loaded)")
        cases: list[tuple[str, Callable[[], Any]]] = [
            (f"warpy.gemm(a, b, out=c) {shape_text(shape)}", lambda: warpy.gemm(a, b, out=c)),
            (f"warpy.gemm(a, b) {shape_text(shape)}", lambda: warpy.gemm(a, b, out_dtype=odt)),
            (f"torch.mm(a, b.t(), out=c) {shape_text(shape)}", lambda: torch.mm(a, b.t(), out=c_same)),
            (f"torch.mm(a, b.t()) {shape_text(shape)}", lambda: torch.mm(a, b.t())),
        ]
        for what, fn in cases:
            for _ in range(10):
                fn()
            stream.synchronize()
            gpu = statistics.median(gpu_times_us(lambda _i: fn(), cu_stream, 50))
            spin(cu_stream, 20_000.0 + 100.0 * calls)
            t = time.perf_counter()
            for _ in range(calls):
                fn()
            enqueue = (time.perf_counter() - t) / calls * 1e6
            stream.synchronize()
            walls = []
            for _ in range(50):
                t = time.perf_counter()
                fn()
                stream.synchronize()
                walls.append((time.perf_counter() - t) * 1e6)
            rows.append(OverheadRow(what, enqueue, statistics.median(walls), gpu))
        del a, b, c, c_same
    echo(overhead_table(rows).rstrip("\n"))
    return rows


# ---------------------------------------------------------------------------------------------
# warpy bench gemm --static (no GPU)


def static_rows(shapes: Sequence[tuple[int, int, int]], arch: str, dtype: str = "bf16",
                out_dtype: Optional[str] = None, progress: Optional[Progress] = None,
                config: Optional[str] = None) -> list[list[str]]:
    """Per shape: build + assemble + disassembly check; registers, shared memory, spills, main-loop
    instructions, the program chosen. A shape that cannot be built gets its error as one line."""
    from warpy.lift.disasm import MMA_OPCODES, check_opcodes, disassemble, loop_instruction_count
    from warpy.lift.lifter import expected_opcodes
    from warpy.matmul import dtype_name, programs

    from warpy.isa.text import parse

    odt = dtype_name(out_dtype) if out_dtype else dtype
    say = progress or (lambda _m: None)
    rows = []
    for shape in shapes:
        M, N, K = shape
        say(f"{shape_text(shape)}: building for {arch}")
        try:
            problem = programs().GemmProblem(M, N, K, dtype=dtype, out_dtype=odt, arch=arch)
            plan = plan_for(problem, config, progress=say)
            h = plan.header
            r = plan.cubin.resource(h.kernel)
            want = expected_opcodes(parse(plan.sass), arch)
            chk = check_opcodes(want, plan.cubin, h.kernel, fail=False)
            loop = loop_instruction_count(disassemble(plan.cubin).kernel(h.kernel), holding=MMA_OPCODES)
            warn = ",".join(sorted({w.code or w.kind for w in plan.cubin.warnings if w.kind != "other"}))
            rows.append([shape_text(shape), str(r.registers), str(h.dynsmem + r.shared_bytes),
                         str(r.spill_stores + r.spill_loads), str(loop),
                         "ok" if chk.ok else "missing " + " ".join(chk.missing), warn or "-", plan.describe])
        except WarpyError as e:
            rows.append([shape_text(shape), "", "", "", "", "", "", f"not built: {e}"])
    return rows


def static_table(rows: Sequence[Sequence[str]]) -> str:
    headers = ["shape", "registers", "smem bytes", "spill bytes", "loop instrs", "opcodes", "ptxas warnings", "program"]
    return format_table(headers, rows, [False, True, True, True, True, False, False, False])


__all__ = [
    "DEFAULT_SHAPES", "BenchRow", "OverheadRow", "Progress", "bench_gemm", "bench_table", "compare_exact",
    "format_table", "gemm_job", "host_overhead", "overhead_table", "parse_shape", "rotation", "shape_text",
    "static_rows", "static_table", "write_png",
]
