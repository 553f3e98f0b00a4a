"""The GEMM family's command-line jobs: `warpy gemm M N K` (build, check, run, time one GEMM) and
`warpy bench gemm` (warpy against cuBLAS, interleaved; host overhead; the static report).

Timing is `warpy.bench`'s (per-call GPU time from CUDA events, median of many calls after warm-up);
here both sides are measured the same way in one process, interleaved (warpy, cuBLAS, cuBLAS,
warpy, twice), and small shapes rotate several input sets so the L2 does not hold them across calls.
"""

from __future__ import annotations

import math
import statistics
import re
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Optional

import attrs
import numpy as np

from warpy import plan
from warpy.bench import (CheckFailed, Progress, cell as _num, check_emit_args, cuda_torch, format_table, gpu_reason,
                         gpu_times_us, interleaved, kernel_of, l2_bytes, report_echo, report_plan, rotation,
                         run_checked_and_timed, spin, static_row_of, static_table, time_sets)
from warpy.errors import NoGPU, WarpyError
from warpy.numeric import compare_exact, from_bits, small_ints, to_bits
from warpy.plan import Plan
from warpy.target import dtype_bytes, target

from .gemm import FAMILY, GemmProblem, bind, input_type, output_type
from .gemm_tune import ensure_tuned


DEFAULT_SHAPES: tuple[tuple[int, int, int], ...] = (
    (1024, 1024, 1024), (1536, 1536, 1536), (2048, 2048, 2048), (3072, 1280, 2048), (4096, 4096, 1024),
    (4096, 4096, 4096), (8192, 2048, 4096), (8192, 8192, 8192), (16384, 16384, 16384),
    (2048, 2048, 16384), (1024, 1024, 65536),
)
HOST_OVERHEAD_SHAPES: tuple[tuple[int, int, int], ...] = ((256, 256, 256), (4096, 4096, 4096))



def parse_shape(text: str) -> tuple[int, int, int]:
    """`MxNxK` (also `M,N,K`) or `N` (a cube); one-line WarpyError otherwise."""
    parts = re.split(r"[x×,]", text.strip().lower())
    if len(parts) not in (1, 3) or not all(re.fullmatch(r"[0-9]+", p) for p in parts):
        raise WarpyError(f"shape {text!r} is not MxNxK or N (e.g. 4096x4096x1024 or 2048)")
    dims = tuple(int(p) for p in parts)
    if any(d < 1 for d in dims):
        raise WarpyError(f"shape {text!r} has a zero extent")
    return (dims[0], dims[0], dims[0]) if len(dims) == 1 else (dims[0], dims[1], dims[2])


def layer_shapes(layers: str, tokens: Optional[str] = None) -> list[tuple[int, int, int]]:
    """`--layers HIDDEN:MLP:QKV[,...]` at `--tokens M[,M...]` (default `gemm_sweep.LAYER_TOKENS`): each
    model's Llama-style linear layers (`gemm_sweep.llama_layers`) at each M, each shape once, in
    order; one-line WarpyError for anything else."""
    from .gemm_sweep import LAYER_TOKENS, llama_layers

    models = []
    for spec in layers.split(","):
        parts = spec.strip().split(":")
        if len(parts) != 3 or not all(re.fullmatch(r"[0-9]+", p) and int(p) > 0 for p in parts):
            raise WarpyError(f"--layers {spec!r} is not HIDDEN:MLP:QKV (e.g. 4096:14336:6144, a Llama-3-8B's)")
        models.append(tuple(int(p) for p in parts))
    ms: tuple[int, ...] = LAYER_TOKENS
    if tokens is not None:
        if not all(re.fullmatch(r"[0-9]+", t.strip()) and int(t) > 0 for t in tokens.split(",")):
            raise WarpyError(f"--tokens {tokens!r} is not a list of row counts (e.g. 1,128,4096)")
        ms = tuple(int(t) for t in tokens.split(","))
    seen: dict[tuple[int, int, int], None] = {}
    for h, i, qkv in models:
        for m in ms:
            for n, k in llama_layers(h, i, qkv):
                seen.setdefault((m, n, k), None)
    return list(seen)


def shape_text(shape: tuple[int, int, int]) -> str:
    M, N, K = shape
    return f"{M}³" if M == N == K else f"{M}x{N}x{K}"


def tflops(shape: tuple[int, int, int], us: float) -> float:
    M, N, K = shape
    return 2.0 * M * N * K / (us * 1e-6) / 1e12


@attrs.frozen
class BenchRow:
    """One shape's result: median per-call GPU times (µs; None when that side did not run), the
    correctness check's verdict ("ok", "FAIL ...", or an error's line) and the configuration warpy
    ran (its fields apart from the defaults, `gemm_sweep.config_text`; "" where none is known)."""

    shape: tuple[int, int, int]
    warpy_us: Optional[float]
    cublas_us: Optional[float]
    check: str
    config: str = ""

    @property
    def ratio(self) -> Optional[float]:
        """cuBLAS time / warpy time: above 1 means warpy is faster."""
        if self.warpy_us is None or self.cublas_us is None or self.warpy_us <= 0:
            return None
        return self.cublas_us / self.warpy_us


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



def bench_summary(rows: Sequence[BenchRow], floor: float = 0.97) -> Optional[str]:
    """One line over the rows that ran: the geometric mean of the ratios (cuBLAS / warpy), the lowest
    and its shape, and how many lie below `floor` (issue 18's line); None for fewer than two rows."""
    ran = [r for r in rows if r.ratio is not None]
    if len(ran) < 2:
        return None
    ratios = [r.ratio for r in ran if r.ratio is not None]
    low = min(ran, key=lambda r: r.ratio or 0.0)
    geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    below = sum(x < floor for x in ratios)
    return (f"{len(ran)} shapes: geometric mean ratio {geo:.3f}, lowest {low.ratio:.3f} ({shape_text(low.shape)}), "
            f"{below} below {floor:g}")


def _size(n: int) -> str:
    for unit, scale in (("TB", 10 ** 12), ("GB", 10 ** 9), ("MB", 10 ** 6)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def refuse_unless_it_fits(M: int, N: int, K: int, dtype: str, out_dtype: str, arch: str) -> None:
    """Refuse, in one line naming the bytes, a GEMM whose A, B and C cannot fit together in the
    memory of the target's reference GPU (`Target.gpu_memory`): nothing is built for it."""
    t = target(arch)
    need = operand_bytes((M, N, K), dtype_bytes(input_type(dtype)), dtype_bytes(output_type(out_dtype)))
    if need > t.gpu_memory:
        raise WarpyError(f"{M}x{N}x{K}: A, B and C ({dtype} in, {output_type(out_dtype)} out) need {need} bytes "
                         f"({_size(need)}), more than the {t.gpu}'s {t.gpu_memory} bytes ({_size(t.gpu_memory)}, "
                         f"{t.name}): give smaller sizes")


def writable(path: str, flag: str) -> None:
    """Refuse, before any work, an output path whose folder does not exist (or is not a folder)."""
    import os

    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise WarpyError(f"{flag} {path}: the folder {folder} does not exist (create it first, or write elsewhere)")
    if os.path.isdir(path):
        raise WarpyError(f"{flag} {path} is a folder; give a file name")


def plan_for(problem: GemmProblem, config: Optional[str] = None, **kw: Any) -> Plan:
    """The GEMM plan of the rule's configuration, or of it with `config`'s fields set by hand."""
    return plan.plan_for(FAMILY, problem, config, **kw)



def gemm_job(M: int, N: int, K: int, arch: str = "sm_90a", dtype: str = "bf16", out_dtype: str = "fp32",
             emit: Optional[str] = None, output: Optional[str] = None, run: bool = True, iters: int = 100,
             echo: Callable[[str], None] = print, config: Optional[str] = None) -> dict[str, Any]:
    """Pick, build, lift, assemble (resources), check the disassembly, optionally emit an artifact;
    on a GPU of the target: run on small integers, compare exactly with numpy, time. Returns what it
    found (`warpy gemm --json` prints it); wrong results raise `CheckFailed` after it is printed."""
    check_emit_args(emit, output, iters)
    if output is not None:
        writable(output, "-o")
    odt = output_type(out_dtype)
    problem = GemmProblem(M, N, K, dtype=dtype, out_dtype=odt, arch=arch)
    refuse_unless_it_fits(M, N, K, problem.dtype, odt, problem.arch)
    if config:
        FAMILY.configure(problem, config)  # a bad field or value: refused before anything is built
    result: dict[str, Any] = {"problem": {"M": M, "N": N, "K": K, "dtype": problem.dtype, "out_dtype": odt,
                                          "arch": problem.arch}}
    artifact, echo = echo, report_echo(emit, output, echo)  # stdout may carry the artifact, the report stderr
    progress = Progress()
    try:
        if run and not config:
            ensure_tuned(problem)  # on an sm_90 GPU, a shape the table has not measured (kernels/gemm_tune.py)
        progress("planning")
        plan = plan_for(problem, config, progress=progress, keep_program=emit == "sass")
        progress.done()
        report_plan(plan, result, echo, artifact, emit, output, progress)
        if not run:
            return result
        return run_checked_and_timed(result, arch, gpu_reason(arch), echo, progress,
                                     lambda: run_check(plan, problem.M, problem.N, problem.K, problem.dtype, odt),
                                     "numpy (inputs in [-3, 3])", f"GEMM {M}x{N}x{K}", lambda: time_plan(plan, iters),
                                     iters, 2.0 * M * N * K)
    finally:
        progress.done()



def run_check(plan: Plan, M: int, N: int, K: int, dtype: str, out_dtype: str, seed: int = 20261129) -> tuple[int, str]:
    """Run the plan once on inputs in [-3, 3] and compare with the float64 product."""
    from warpy import runtime as rt
    from warpy.runtime.bind import alloc_scratch, free_scratch, run_header

    rng = np.random.default_rng(seed)
    a = small_ints(rng, (M, K))
    b = small_ints(rng, (N, K))
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    da, db = rt.to_device(to_bits(a, dtype)), rt.to_device(to_bits(b, dtype))
    dc = rt.alloc(M * N * dtype_bytes(out_dtype))
    dc.fill(0xFF)  # NaN everywhere: an element the kernel never writes cannot pass
    scratch = alloc_scratch(plan.header)  # zeroed on warpy's stream, which run_header launches on
    try:
        k = kernel_of(plan)
        params = bind(plan.header, da, db, dc, M, N, K, scratch=scratch)
        run_header(k, plan.header, params, timeout=30)
        raw = dc.download({"fp32": np.float32, "fp16": np.float16, "bf16": np.uint16}[out_dtype], (M, N))
    finally:
        for buf in (da, db, dc):
            buf.free()
        free_scratch(scratch)
    return compare_exact(from_bits(raw, out_dtype).astype(np.float64), ref, out_dtype)



def time_plan(plan: Plan, iters: int = 100) -> float:
    """Median per-call GPU time (µs) of the plan on random-normal inputs, rotating input sets."""
    from warpy import runtime as rt

    p = plan.problem
    M, N, K = p.M, p.N, p.K
    out_elem = dtype_bytes(p.out_dtype)
    sets = rotation(operand_bytes((M, N, K), 2, out_elem), l2_bytes())
    rng = np.random.default_rng(1)
    bufs = []
    for _ in range(sets):
        a = rt.to_device(to_bits(rng.standard_normal((M, K), dtype=np.float32), p.dtype))
        b = rt.to_device(to_bits(rng.standard_normal((N, K), dtype=np.float32), p.dtype))
        bufs.append((a, b, rt.alloc(M * N * out_elem)))
    return time_sets(plan, bufs, lambda s, scratch: bind(plan.header, s[0], s[1], s[2], M, N, K, scratch=scratch),
                     iters)



# ---------------------------------------------------------------------------------------------
# warpy bench gemm


def _torch() -> Any:
    return cuda_torch("warpy bench compares with cuBLAS through torch")


def bench_gemm(shapes: Sequence[tuple[int, int, int]], dtype: str = "bf16", out_dtype: Optional[str] = None,
               iters: int = 50, echo: Callable[[str], None] = print, config: Optional[str] = None) -> list[BenchRow]:
    """warpy.gemm against torch.mm (cuBLAS), interleaved, per shape; prints each row as it lands. 8-bit
    float inputs (e4m3, e5m2) go against torch._scaled_mm (kernels/gemm_fp8_bench.py).
    With `config` (fields of the rule's configuration set by hand), warpy's side launches that
    plan on the same tensors instead of warpy.gemm's."""
    import warpy
    from warpy import runtime as rt

    if dtype in ("e4m3", "e5m2"):  # 8-bit floats: against torch._scaled_mm (kernels/gemm_fp8_bench.py)
        from .gemm_fp8_bench import bench_fp8

        return bench_fp8(shapes, dtype, out_dtype, iters, echo=echo, config=config)
    why = gpu_reason("sm_90a")
    if why is not None:
        raise NoGPU(f"warpy bench needs an sm_90 GPU: {why.rstrip('.')}; without one, `warpy bench gemm --static` builds, "
                    "assembles and reports each shape's resources")
    torch = _torch()
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    odt = output_type(out_dtype) if out_dtype else dtype
    todt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[odt]
    dev = torch.device("cuda", 0)
    stream_handle = int(torch.cuda.current_stream(dev).cuda_stream)
    from warpy.runtime.driver import cuda

    cu_stream = cuda().CUstream(stream_handle)
    l2 = l2_bytes()
    rows: list[BenchRow] = []
    echo(f"{rt.device().name}: {dtype} inputs, {odt} output (cuBLAS: torch.mm, {'bf16/fp16' if odt != 'fp32' else 'fp32 via out_dtype where torch has it'}); "
         f"median of {iters} calls x 4 interleaved rounds each")
    progress = Progress()
    for shape in shapes:
        M, N, K = shape
        progress(f"{shape_text(shape)}: planning")
        try:
            sets = rotation(operand_bytes(shape, 2, dtype_bytes(odt)), l2)
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
            w_us, c_us = interleaved(run_w, {"cublas": run_c}, cu_stream, iters)
            check = _bench_check(torch, A[0], B[0], Cw[0], K)
            row = BenchRow(shape, w_us, c_us["cublas"], check, _ran(shape, dtype, odt, config))
            del A, B, Cw, Cc
            torch.cuda.empty_cache()
        except WarpyError as e:
            row = BenchRow(shape, None, None, f"error: {e}")
        progress.done()
        rows.append(row)
        print(f"{shape_text(shape)}: warpy {_num(row.warpy_us, '.1f')} µs, cuBLAS {_num(row.cublas_us, '.1f')} µs, "
              f"{row.check}" + (f" ({row.config})" if row.config else ""), file=sys.stderr, flush=True)
    echo(bench_table(rows).rstrip("\n"))
    summary = bench_summary(rows)
    if summary:
        echo(summary)
    return rows


def _configured_launcher(shape: tuple[int, int, int], dtype: str, odt: str, config: str, A: list[Any], B: list[Any],
                         C: list[Any], stream: int, scales: Optional[tuple[Any, Any]] = None) -> Callable[[int], None]:
    """Launches of `config`'s plan on the i-th (mod len) torch tensors, on `stream`. `scales`: 8-bit
    float inputs' (scale_a, scale_b) tensors of one value each (per tensor), bound to every launch."""
    from warpy.runtime.bind import DeviceSpan, FastLaunch

    def span(t: Any) -> DeviceSpan:
        return DeviceSpan(t.data_ptr(), t.numel() * t.element_size())

    M, N, K = shape
    fp8: dict[str, Any] = {} if scales is None else {"b_dtype": dtype, "scale_a": "tensor", "scale_b": "tensor"}
    aux: dict[str, Any] = {} if scales is None else {"scale_a": span(scales[0]), "scale_b": span(scales[1])}
    problem = GemmProblem(M, N, K, dtype=dtype, out_dtype=odt, arch="sm_90a", **fp8)
    if not config:
        ensure_tuned(problem)  # what warpy.gemm runs: a shape the table has not measured is tuned first
    plan = plan_for(problem, config)
    fast = FastLaunch(kernel_of(plan), plan.header)

    def run(i: int) -> None:
        j = i % len(A)
        fast(j, lambda scratch: bind(plan.header, span(A[j]), span(B[j]), span(C[j]), M, N, K, scratch=scratch, **aux),
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


def have_matplotlib() -> None:
    """Refuse `--png` before the benchmark runs when matplotlib is missing (one line, with the fix)."""
    try:
        import matplotlib  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        raise WarpyError("--png draws with matplotlib, which is not installed: pip install -e '.[plot]'") from None


def write_png(rows: Sequence[BenchRow], path: str) -> str:
    """A bar chart of cuBLAS time / warpy time per shape (matplotlib): bars start at 1.0 (as fast as
    cuBLAS), the axis is centred on it, and each bar carries its ratio; a one-line note if
    matplotlib is unavailable."""
    try:
        import matplotlib  # type: ignore[import-not-found,unused-ignore]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return f"no chart: matplotlib is not installed (wanted {path}): pip install -e '.[plot]'"
    names = [shape_text(r.shape) for r in rows]
    ratios = [r.ratio for r in rows]
    reach = max([abs(x - 1.0) for x in ratios if x is not None] + [0.02]) * 1.3
    fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(rows)), 4.0))
    for i, x in enumerate(ratios):
        if x is None:
            ax.text(i, 1.0, "—", ha="center", va="center")
            continue
        ax.bar(i, x - 1.0, bottom=1.0, color="tab:green" if x >= 1 else "tab:orange")
        ax.text(i, x, f"{x:.3f}", ha="center", va="bottom" if x >= 1 else "top", fontsize=8)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=45, ha="right")
    ax.set_ylim(1.0 - reach, 1.0 + reach)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylabel("cuBLAS time / warpy time")
    ax.set_title("warpy GEMM vs cuBLAS (above 1: warpy faster)")
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
    """Host cost per call of warpy.gemm (out given / allocated) and warpy.mm next to torch.mm's, per shape:
    back-to-back enqueue time per call (GPU kept busy by a spin), and the median of (call + wait)
    minus the kernel's GPU time."""
    import warpy

    why = gpu_reason("sm_90a")
    if why is not None:
        raise NoGPU(f"warpy bench --host-overhead needs an sm_90 GPU: {why.rstrip('.')}; without one, `warpy bench gemm "
                    "--static` reports each shape's resources")
    torch = _torch()
    from warpy.runtime.driver import cuda

    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    odt = output_type(out_dtype) if out_dtype else dtype
    todt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[odt]
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
            (f"warpy.mm(a, b.t(), out=c) {shape_text(shape)}", lambda: warpy.mm(a, b.t(), out=c)),
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


def check_bench_args(shapes: Sequence[tuple[int, int, int]], arch: str, dtype: str, out_dtype: str,
                     config: Optional[str] = None) -> None:
    """Everything `warpy bench gemm` can refuse before any work, in one line: the target, the
    types, a shape that cannot fit in the target GPU's memory, and `config`'s fields and values."""
    target(arch)
    input_type(dtype)
    output_type(out_dtype)
    for M, N, K in shapes:
        refuse_unless_it_fits(M, N, K, dtype, out_dtype, arch)
    if config and shapes:
        M, N, K = shapes[0]
        FAMILY.configure(GemmProblem(M, N, K, dtype=dtype, out_dtype=out_dtype, arch=arch), config)


def static_rows(shapes: Sequence[tuple[int, int, int]], arch: str, dtype: str = "bf16",
                out_dtype: str = "fp32", progress: Optional[Progress] = None,
                config: Optional[str] = None) -> list[list[str]]:
    """Per shape: build + assemble + disassembly check (`warpy.bench.static_row`). The arguments
    are checked first (`check_bench_args`: a bad target, type or configuration is one error, not a
    row a shape); a shape that still cannot be built gets its error as one line in its row."""
    check_bench_args(shapes, arch, dtype, out_dtype, config)
    odt = output_type(out_dtype)
    say = progress or (lambda _m: None)
    rows = []
    for shape in shapes:
        M, N, K = shape
        name = shape_text(shape)
        say(f"{name}: building for {arch}")
        rows.append(static_row_of(name, lambda: plan_for(GemmProblem(M, N, K, dtype=dtype, out_dtype=odt, arch=arch),
                                                         config, progress=lambda msg: say(f"{name}: {msg}"))))
    return rows


def static_json(rows: Sequence[Sequence[str]]) -> list[dict[str, Any]]:
    """The static rows as records (`warpy bench gemm --static --json`)."""
    out = []
    for r in rows:
        built = not r[-1].startswith("not built: ")
        rec: dict[str, Any] = {"shape": r[0], "built": built}
        if built:
            rec.update(registers=int(r[1]), smem_bytes=int(r[2]), spill_bytes=int(r[3]), loop_instructions=int(r[4]),
                       opcodes=r[5], ptxas_warnings=[] if r[6] == "-" else r[6].split(","), program=r[7])
        else:
            rec["error"] = r[-1][len("not built: "):]
        out.append(rec)
    return out


def bench_json(rows: Sequence[BenchRow]) -> list[dict[str, Any]]:
    """The timed rows as records (`warpy bench gemm --json`)."""
    return [{"shape": list(r.shape), "warpy_us": r.warpy_us, "cublas_us": r.cublas_us, "ratio": r.ratio,
             "warpy_tflops": None if r.warpy_us is None else tflops(r.shape, r.warpy_us),
             "cublas_tflops": None if r.cublas_us is None else tflops(r.shape, r.cublas_us), "check": r.check,
             "config": r.config}
            for r in rows]


def _ran(shape: tuple[int, int, int], dtype: str, out_dtype: str, config: Optional[str]) -> str:
    """The configuration warpy ran at `shape` (after its first call, which tuned it where it tunes):
    the rule's, with `config`'s fields set by hand, as `gemm_sweep.config_text` spells it."""
    from .gemm import configure
    from .gemm_sm90 import Sm90Config
    from .gemm_sweep import config_text

    cfg = configure(GemmProblem(*shape, dtype=dtype, out_dtype=out_dtype), config)
    return config_text(cfg) if isinstance(cfg, Sm90Config) else ""


def operand_bytes(shape: tuple[int, int, int], elem: int, out_elem: int) -> int:
    """Bytes of one set of A, B and C."""
    M, N, K = shape
    return (M * K + N * K) * elem + M * N * out_elem


__all__ = [
    "DEFAULT_SHAPES", "HOST_OVERHEAD_SHAPES", "BenchRow", "CheckFailed", "OverheadRow", "bench_gemm", "bench_json",
    "bench_summary", "bench_table", "check_bench_args", "gemm_job", "have_matplotlib", "host_overhead", "overhead_table", "parse_shape",
    "plan_for", "refuse_unless_it_fits", "run_check", "shape_text", "static_json", "static_rows", "static_table",
    "time_plan", "tflops", "writable", "write_png",
]


# ---------------------------------------------------------------------------------------------
# `warpy bench gemm --layout` and `--epilogue`: operand layouts against A·Bᵀ, and a fused epilogue
# against the GEMM followed by torch's epilogue

LAYOUT_SHAPES: tuple[tuple[int, int, int], ...] = ((4096, 4096, 4096), (8192, 8192, 8192))


@attrs.frozen
class VariantRow:
    """One timed variant of a shape: what ran, its median GPU µs per call (None: refused or failed),
    the baseline it is compared with, and a note (the refusal, or the check's verdict)."""

    shape: tuple[int, int, int]
    what: str
    us: Optional[float]
    baseline_us: Optional[float]
    note: str

    @property
    def ratio(self) -> Optional[float]:
        """baseline time / this time: above 1 means this variant is faster."""
        if self.us is None or self.baseline_us is None or self.us <= 0:
            return None
        return self.baseline_us / self.us


def variant_table(rows: Sequence[VariantRow], baseline: str) -> str:
    head = ["shape", "variant", "µs", f"{baseline} µs", "ratio", "note"]
    body = [[shape_text(r.shape), r.what, _num(r.us, ".1f"), _num(r.baseline_us, ".1f"), _num(r.ratio, ".3f"),
             r.note] for r in rows]
    return format_table(head, body)


def _timed(fn: Callable[[int], None], cu_stream: Any, iters: int) -> float:
    samples: list[float] = []
    for _ in range(2):
        samples += gpu_times_us(fn, cu_stream, iters)
    return statistics.median(samples)


def bench_layouts(shapes: Sequence[tuple[int, int, int]], dtype: str = "bf16", out_dtype: Optional[str] = None,
                  iters: int = 50, echo: Callable[[str], None] = print) -> list[VariantRow]:
    """Each operand layout a torch user holds, timed against warpy.gemm's A·Bᵀ (A M×K, B N×K, both
    K-major) interleaved on the same shape: warpy.mm with B = w.t() (K×N, K contiguous: the same
    program, read in place) and the MN-major layouts (B K×N row-major, A K×M; read in place by the
    sm_90a program's transposed HGMMAs), cuBLAS's time for each beside; a refusal is the row's note."""
    import warpy

    why = gpu_reason("sm_90a")
    if why is not None:
        raise NoGPU(f"warpy bench needs an sm_90 GPU: {why.rstrip('.')}")
    torch = _torch()
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    odt = output_type(out_dtype) if out_dtype else dtype
    todt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[odt]
    dev = torch.device("cuda", 0)
    from warpy.runtime.driver import cuda

    cu_stream = cuda().CUstream(int(torch.cuda.current_stream(dev).cuda_stream))
    rows: list[VariantRow] = []
    for shape in shapes:
        M, N, K = shape
        g = torch.Generator(device=dev).manual_seed(0)
        a = torch.randn((M, K), device=dev, dtype=tdt, generator=g)
        w = torch.randn((N, K), device=dev, dtype=tdt, generator=g)
        a_km = a.t().contiguous().t()  # M×K with M contiguous
        w_kn = w.t().contiguous()  # K×N row-major
        c = torch.empty((M, N), device=dev, dtype=todt)
        base = _timed(lambda i: warpy.gemm(a, w, out=c), cu_stream, iters)
        rows.append(VariantRow(shape, "gemm(a, b): A·Bᵀ, both K-major", base, base, "baseline"))
        variants: list[tuple[str, Callable[[int], None], Callable[[int], None]]] = [
            ("mm(a, w.t()): B K×N, K contiguous", lambda i: warpy.mm(a, w.t(), out=c),
             lambda i: torch.mm(a, w.t(), out=c) if todt == tdt else None),
            ("mm(a, b): B K×N row-major (MN-major)", lambda i: warpy.mm(a, w_kn, out=c),
             lambda i: torch.mm(a, w_kn, out=c) if todt == tdt else None),
            ("mm(a, b): A M×K, M contiguous (MN-major)", lambda i: warpy.mm(a_km, w.t(), out=c),
             lambda i: torch.mm(a_km, w.t(), out=c) if todt == tdt else None),
        ]
        for what, run_w, run_c in variants:
            try:
                run_w(0)
                us: Optional[float] = _timed(run_w, cu_stream, iters)
                note = "ok"
            except WarpyError as e:
                us, note = None, f"refused: {e}"
            cub = _timed(run_c, cu_stream, iters) if todt == tdt else None
            if cub is not None:
                note += f" (cuBLAS {cub:.1f} µs)"
            rows.append(VariantRow(shape, what, us, base, note))
        del a, w, a_km, w_kn, c
        torch.cuda.empty_cache()
    echo(variant_table(rows, "A·Bᵀ").rstrip("\n"))
    return rows


def bench_epilogue(shapes: Sequence[tuple[int, int, int]], spec: str, dtype: str = "bf16",
                   out_dtype: Optional[str] = None, iters: int = 50,
                   echo: Callable[[str], None] = print) -> list[VariantRow]:
    """A fused epilogue (`spec`: the words of `warpy check gemm`, comma-separated: e.g.
    "bias=n,act=gelu_erf") timed against the same GEMM without it followed by torch's epilogue
    (the unfused way), and against torch (cuBLAS and torch's elementwise kernels)."""
    import warpy

    from .gemm_epilogue import parse_words

    ep = parse_words([w for w in spec.replace(" ", ",").split(",") if w])
    why = gpu_reason("sm_90a")
    if why is not None:
        raise NoGPU(f"warpy bench needs an sm_90 GPU: {why.rstrip('.')}")
    torch = _torch()
    F = torch.nn.functional
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    odt = output_type(out_dtype) if out_dtype else dtype
    todt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[odt]
    dev = torch.device("cuda", 0)
    from warpy.runtime.driver import cuda

    cu_stream = cuda().CUstream(int(torch.cuda.current_stream(dev).cuda_stream))
    torch_act = {"": lambda x: x, "relu": F.relu, "silu": F.silu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
                 "gelu_erf": F.gelu}[ep.act]
    rows: list[VariantRow] = []
    for shape in shapes:
        M, N, K = shape
        g = torch.Generator(device=dev).manual_seed(0)
        a = torch.randn((M, K), device=dev, dtype=tdt, generator=g)
        w = torch.randn((N, K), device=dev, dtype=tdt, generator=g) / K ** 0.5
        c = torch.empty((M, N), device=dev, dtype=todt)
        kw: dict[str, Any] = {}
        bias = torch.randn((N if ep.bias == "n" else M,), device=dev, dtype=todt, generator=g) if ep.bias else None
        c_in = torch.randn((M, N), device=dev, dtype=todt, generator=g) if ep.beta else None
        res = torch.randn((M, N), device=dev, dtype=todt, generator=g) if ep.residual else None
        if bias is not None:
            kw["bias" if ep.bias == "n" else "row_bias"] = bias
        if c_in is not None:
            kw.update(beta=ep.beta, c_in=c_in)
        if res is not None:
            kw["residual"] = res
        if ep.alpha != 1.0:
            kw["alpha"] = ep.alpha
        if ep.act:
            kw["activation"] = ep.act

        def epilogue_torch(t: Any) -> Any:
            if ep.alpha != 1.0:
                t = t * ep.alpha
            if c_in is not None:
                t = t + ep.beta * c_in
            if bias is not None:
                t = t + (bias[None, :] if ep.bias == "n" else bias[:, None])
            t = torch_act(t)
            return t + res if res is not None else t

        def fused(i: int) -> None:
            warpy.mm(a, w.t(), out=c, **kw)

        def unfused(i: int) -> None:
            epilogue_torch(warpy.mm(a, w.t(), out=c))

        def torch_only(i: int) -> None:
            epilogue_torch(torch.mm(a, w.t()).to(todt))

        unfused(0)
        ref = epilogue_torch((a.float() @ w.float().t()).to(todt).float())
        fused(0)
        err = float((c.float() - ref).abs().max().item())
        scale = float(ref.abs().max().item()) or 1.0
        note = "ok" if err <= 2.0 ** -6 * scale else f"FAIL: max |error| {err:.3g} of {scale:.3g}"
        t_unf = _timed(unfused, cu_stream, iters)
        t_f = _timed(fused, cu_stream, iters)
        t_t = _timed(torch_only, cu_stream, iters)
        rows.append(VariantRow(shape, f"fused: {ep}", t_f, t_unf, note))
        rows.append(VariantRow(shape, "warpy GEMM + torch epilogue", t_unf, t_unf, "baseline"))
        rows.append(VariantRow(shape, "torch (cuBLAS + torch epilogue)", t_t, t_unf, ""))
        del a, w, c
        torch.cuda.empty_cache()
    echo(variant_table(rows, "unfused").rstrip("\n"))
    return rows
