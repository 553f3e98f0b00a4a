"""Measuring kernels on a GPU, for any family: per-call GPU time, tables, progress, the static
report of a plan (registers, shared memory, spills, the main loop's size).

Timing (docs/performance.md, "How we measure"): per-call GPU time from CUDA events around each
call, the median of many calls after warm-up; a spin kernel occupies the GPU while a batch is
enqueued, so the events time the kernels back to back and not the host's launch latency; callers
rotate input sets larger than the L2 (`rotation`) so small problems do not run from it.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, Optional

from warpy.errors import WarpyError


# ---------------------------------------------------------------------------------------------
# Tables and progress on stderr


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool] | None = None) -> str:
    """A plain-text table: columns as wide as their widest cell, numbers right-aligned."""
    right = list(right) if right is not None else [False] + [True] * (len(headers) - 1)
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows]) + "\n"


class Progress:
    """`step(msg)` starts a step; if it is still the current step after `after` seconds, `msg...`
    goes to stderr: on a terminal over the previous one on a single line (cleared by `done()`),
    elsewhere a line each, a message repeated back to back printed once. `done()` ends the last step."""

    def __init__(self, after: float = 1.0, stream: Any = None) -> None:
        self.after = after
        self.stream = stream if stream is not None else sys.stderr
        self._timer: Optional[threading.Timer] = None
        self._lock = threading.Lock()
        self._last: Optional[str] = None
        self._open = False  # a terminal line is showing

    def _tty(self) -> bool:
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())

    def step(self, msg: str) -> None:
        self.done()
        t = threading.Timer(self.after, self._show, args=(msg,))
        t.daemon = True
        with self._lock:
            self._timer = t
        t.start()

    def _show(self, msg: str) -> None:
        with self._lock:
            if self._timer is None or msg == self._last:
                return
            self._last = msg
            if self._tty():
                import shutil

                width = shutil.get_terminal_size((100, 20)).columns - 1
                self.stream.write("\r" + f"{msg}..."[:width] + "\x1b[K")
                self._open = True
            else:
                self.stream.write(f"{msg}...\n")
            self.stream.flush()

    def done(self) -> None:
        with self._lock:
            t, self._timer = self._timer, None
            if self._open:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
                self._open = False
        if t is not None:
            t.cancel()

    __call__ = step


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


def rotation(bytes_per_set: int, l2: int, cap: int = 32) -> int:
    """How many input/output sets to cycle through so that one call's operands are out of the L2 by
    the time they come round again (their bytes over three L2s), at most `cap`."""
    return max(1, min(cap, math.ceil(3 * l2 / max(bytes_per_set, 1))))


def time_sets(plan: Any, sets: Sequence[Sequence[Any]], params_of: Callable[[Sequence[Any], Any], Any],
              iters: int) -> float:
    """Median per-call GPU time (µs) of `plan` launched on each of `sets` (device buffers) in turn,
    on warpy's stream: `params_of(set, scratch)` binds a set's parameters with the launcher's
    scratch memory for that stream. The buffers and the scratch are freed after."""
    import statistics

    from warpy.runtime.bind import FastLaunch
    from warpy.runtime.launcher import default_stream

    n = len(sets)
    fast = FastLaunch(kernel_of(plan), plan.header)  # owns the kernel's scratch memory for this timing
    stream = default_stream()
    handle = int(stream)
    try:
        scratch = fast.scratch.get(handle)  # the set every launch below (all on `stream`) binds
        params = [params_of(s, scratch) for s in sets]
        samples = gpu_times_us(lambda i: fast(i % n, lambda _s: params[i % n], handle), stream, iters)
    finally:
        for s in sets:
            for buf in s:
                buf.free()
        fast.scratch.free()
    return statistics.median(samples)


def interleaved(ours: Callable[[int], None], theirs: dict[str, Callable[[int], None]], stream: Any,
                iters: int) -> tuple[float, dict[str, float]]:
    """Median per-call GPU times (µs) of `ours` and of each of `theirs`, measured in interleaved
    rounds (ours, theirs, theirs, ours, twice; `iters` calls a round) on `stream`, so that clocks and
    temperature drift alike for both sides."""
    import statistics

    mine: list[float] = []
    other: dict[str, list[float]] = {name: [] for name in theirs}
    for side in ("ours", "theirs", "theirs", "ours") * 2:
        if side == "ours":
            mine += gpu_times_us(ours, stream, iters)
        else:
            for name, fn in theirs.items():
                other[name] += gpu_times_us(fn, stream, iters)
    return statistics.median(mine), {name: statistics.median(v) for name, v in other.items()}


def cuda_torch(compares: str) -> Any:
    """torch, with a CUDA GPU it sees; else one line: `compares` (what needs it) and the fix."""
    try:
        import torch  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise WarpyError(f"{compares}, which is not installed: pip install -e '.[bench]' (torch with CUDA)") from None
    if not torch.cuda.is_available():
        from warpy.errors import NoGPU

        raise NoGPU("torch sees no CUDA GPU")
    return torch


def cell(x: Optional[float], fmt: str) -> str:
    """A table's cell: x formatted, or a dash where there is no value."""
    return "—" if x is None else format(x, fmt)


# ---------------------------------------------------------------------------------------------
# Plans: where they run, what they emit, what they use


class CheckFailed(WarpyError):
    """A job ran and gave wrong results (the CLI exits 1: a failed check, not a usage error);
    `result`: what was found up to then (for `--json`)."""

    exit_status = 1

    def __init__(self, message: str, result: Optional[dict[str, Any]] = None) -> None:
        super().__init__(message)
        self.result = result


def check_emit_args(emit: Optional[str], output: Optional[str], iters: int) -> None:
    """A job's `--emit`, `-o` and `--iters`, refused in one line before any work."""
    if emit is not None and emit not in ("sass", "ptx", "cubin"):
        raise WarpyError(f"--emit {emit!r} is not one of sass, ptx, cubin")
    if emit == "cubin" and output is None:
        raise WarpyError("--emit cubin needs -o PATH")
    if output is not None and emit is None:
        raise WarpyError("-o PATH goes with --emit sass|ptx|cubin")
    if iters < 1:
        raise WarpyError(f"--iters {iters} must be at least 1")


def report_echo(emit: Optional[str], output: Optional[str], echo: Callable[[str], None]) -> Callable[[str], None]:
    """Where a job's report goes: `echo`, or stderr when stdout carries the emitted text."""
    if emit in ("sass", "ptx") and output is None:
        def to_stderr(line: str) -> None:
            print(line, file=sys.stderr, flush=True)

        return to_stderr
    return echo


def report_plan(plan: Any, result: dict[str, Any], echo: Callable[[str], None], artifact: Callable[[str], None],
                emit: Optional[str], output: Optional[str], progress: Progress) -> None:
    """What a job reports of its plan, every family alike: the program, the kernel's resources and
    geometry (registers, shared memory, spills; grid, threads, cluster), ptxas's warnings, the
    disassembly check (or why it was skipped), the emitted artifact (the text itself to `artifact`,
    or a line saying where it was written); `result` gains what was found, and `ran=False` until
    the job runs the plan."""
    from warpy.lift.disasm import find_disassembler

    h = plan.header
    echo(f"program: {plan.describe}")
    r = plan.cubin.resource(h.kernel)
    result.update(program=plan.describe, kernel=h.kernel, registers=r.registers,
                  shared_bytes=h.dynsmem + r.shared_bytes, spill_bytes=r.spill_stores + r.spill_loads,
                  grid=list(h.grid), threads=h.threads, cluster=list(h.cluster),
                  ptxas_warnings=[w.line() for w in plan.cubin.warnings])
    echo(f"kernel {h.kernel}: {r.registers} registers, {h.dynsmem + r.shared_bytes} bytes shared memory, "
         f"{r.spill_stores + r.spill_loads} spill bytes; grid {'x'.join(map(str, h.grid))}, "
         f"{h.threads} threads, cluster {'x'.join(map(str, h.cluster))}")
    for w in plan.cubin.warnings:
        echo(w.line())
    try:
        find_disassembler()
    except WarpyError:
        echo("disassembly check skipped: no nvdisasm or cuobjdump found")
        result["disassembly"] = None
    else:
        progress("checking the disassembly")
        line = disassembly_line(plan)
        echo(line)
        result["disassembly"] = line
        progress.done()
    if emit is not None:
        if output is None:  # the text itself ends in a newline; echo adds one
            artifact(emit_artifact(plan, emit, output).rstrip("\n"))
        else:
            echo(emit_artifact(plan, emit, output))
        result["emitted"] = {"what": emit, "to": output}
    result.update(ran=False, check=None, time_us=None, tflops=None)


def run_checked_and_timed(result: dict[str, Any], arch: str, why_not: Optional[str], echo: Callable[[str], None],
                          progress: Progress, check: Callable[[], tuple[int, str]], against: str, what: str,
                          time: Callable[[], float], iters: int, flops: float) -> dict[str, Any]:
    """A job's run branch: where no GPU runs `arch` (`why_not`, `gpu_reason`'s line) it says so;
    else `check()` (wrong elements, a line; compared `against` what) and, when nothing is wrong,
    `time()` (median µs of `iters` calls) with the TFLOP/s of `flops`. `result` gains what was
    found and is returned; wrong results raise `CheckFailed` naming `what`."""
    if why_not is not None:
        echo(f"not run: no {arch.rstrip('a')} GPU here ({why_not.rstrip('.')}); built and assembled only")
        result["not_run"] = why_not
        return result
    progress("running")
    n_bad, msg = check()
    progress.done()
    echo(f"check against {against}: {msg}")
    result.update(ran=True, check=msg, wrong_elements=n_bad)
    if n_bad:
        raise CheckFailed(f"{what} gave wrong results ({n_bad} elements)", result)
    progress("timing")
    us = time()
    progress.done()
    tf = flops / (us * 1e-6) / 1e12
    echo(f"time: {us:.1f} µs (median of {iters} calls), {tf:.1f} TFLOP/s")
    result.update(time_us=us, tflops=tf, iters=iters)
    return result


def gpu_reason(arch: str) -> Optional[str]:
    """None when a GPU that runs `arch` cubins is here; else why not (one line)."""
    try:
        from warpy import runtime as rt

        dev = rt.device()
    except WarpyError as e:
        return str(e)
    if not dev.can_run(arch):
        return f"the GPU ({dev.name}) is {dev.sm}, not {arch.rstrip('a')}"
    return None


_kernels: dict[int, Any] = {}


def kernel_of(plan: Any) -> Any:
    from warpy import runtime as rt

    k = _kernels.get(id(plan))
    if k is None:
        k = _kernels[id(plan)] = (plan, rt.load(plan.cubin).kernel(plan.header.kernel))
    return k[1]


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


def emit_artifact(plan: Any, emit: str, output: Optional[str]) -> str:
    """A plan's SASS (coloured), PTX or cubin: the text itself (output None), or written to `output`
    (a one-line account returned)."""
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


def static_row(plan: Any) -> list[str]:
    """A plan's resources: registers, shared memory bytes, spill bytes, main-loop instructions, the
    disassembly check, ptxas's warnings that matter, the program's summary."""
    from warpy.isa.text import parse
    from warpy.lift.disasm import MMA_OPCODES, check_opcodes, disassemble, loop_instruction_count
    from warpy.lift.lifter import expected_opcodes

    h = plan.header
    r = plan.cubin.resource(h.kernel)
    want = expected_opcodes(parse(plan.sass), plan.problem.arch)
    chk = check_opcodes(want, plan.cubin, h.kernel, fail=False)
    loop = loop_instruction_count(disassemble(plan.cubin).kernel(h.kernel), holding=MMA_OPCODES)
    warn = ",".join(sorted({w.code or w.kind for w in plan.cubin.warnings if w.kind != "other"}))
    return [str(r.registers), str(h.dynsmem + r.shared_bytes), str(r.spill_stores + r.spill_loads), str(loop),
            "ok" if chk.ok else "missing " + " ".join(chk.missing), warn or "-", plan.describe]


STATIC_HEADERS = ["registers", "smem bytes", "spill bytes", "loop instrs", "opcodes", "ptxas warnings", "program"]


def static_row_of(name: str, build: Callable[[], Any]) -> list[str]:
    """`[name] + static_row(build())`, or, where the plan cannot be built, its error as one line."""
    try:
        return [name] + static_row(build())
    except WarpyError as e:
        return [name, "", "", "", "", "", "", f"not built: {e}"]


def static_table(rows: Sequence[Sequence[str]]) -> str:
    """The resources a shape (`static_row_of`'s rows), then each shape's program (or why it was not
    built) on its own line below the table, so that no column is as wide as a program's description."""
    headers = ["shape"] + STATIC_HEADERS[:-1]
    table = format_table(headers, [r[:-1] for r in rows], [False, True, True, True, True, False, False])
    width = max(len(r[0]) for r in rows) if rows else 0
    return table + "\n" + "".join(f"{r[0]:<{width}}  {r[-1]}\n" for r in rows)


__all__ = [
    "Progress", "format_table", "gpu_reason", "gpu_times_us", "kernel_of", "l2_bytes", "rotation", "spin",
    "disassembly_line", "emit_artifact", "static_row", "STATIC_HEADERS", "CheckFailed", "cell", "check_emit_args",
    "cuda_torch", "interleaved", "report_echo", "report_plan", "run_checked_and_timed", "static_row_of", "static_table", "time_sets",
]
