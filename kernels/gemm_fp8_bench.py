"""`warpy bench gemm --dtype e4m3` (or e5m2): warpy.gemm of 8-bit floats against torch._scaled_mm
(cuBLASLt's FP8 GEMM), in the interleaved rounds the 16-bit bench uses (kernels/gemm_bench.py).

Both sides multiply the same fp8 tensors with the same fp32 scales (one value a tensor) into the same
output type (bf16 unless --out-dtype says otherwise). torch._scaled_mm takes B column-major (the K x N
view `b.t()` of the N x K row-major B warpy reads) and is timed twice: as torch calls it by default
(use_fast_accum=False: cuBLASLt adds the tensor core's partial sums into a second fp32 accumulator)
and with use_fast_accum=True (one accumulator in the tensor core, as warpy's QGMMA program); the
row's cuBLAS time is the faster of the two.

The check: C against the fp32 product of the decoded inputs, element by element, within C's rounding
plus twice the largest error cuBLASLt's own (default) result makes there: Hopper's fp8 MMAs keep fewer
bits than fp32 while they add (so no fp32-exact bound holds for random inputs of large K); warpy must
be no worse than cuBLASLt. tests/gpu/test_gemm_fp8_gpu.py checks exact values (small integers, where
every partial sum is exact) against the output's rounding alone.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any, Optional

from warpy.bench import Progress, cell as _num, gpu_reason, interleaved, l2_bytes, rotation
from warpy.errors import NoGPU, WarpyError
from warpy.target import dtype_bytes

from .gemm_bench import BenchRow, _configured_launcher, bench_summary, bench_table, operand_bytes, shape_text
from .gemm_fp8 import FP8_DTYPES


def _torch_types(torch: Any, dtype: str, odt: str) -> tuple[Any, Any]:
    fp8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[dtype]
    out = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[odt]
    return fp8, out


def scaled_mm(torch: Any, todt: Any, fast: bool) -> Callable[[Any, Any, Any, Any, Any], None]:
    """C = scale_a · scale_b · A·Bᵀ through torch._scaled_mm (B passed as the column-major K x N view)."""
    fn = getattr(torch, "_scaled_mm", None)
    if fn is None:
        raise WarpyError(f"torch {torch.__version__} has no torch._scaled_mm (cuBLASLt FP8): the fp8 bench needs "
                         "torch 2.1 or later")

    def run(a: Any, b: Any, sa: Any, sb: Any, c: Any) -> None:
        r = fn(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=todt, use_fast_accum=fast)
        c.copy_(r[0] if isinstance(r, tuple) else r)  # (torch < 2.4 returned (C, amax))

    return run


def fp8_check(torch: Any, a: Any, b: Any, sa: Any, sb: Any, c: Any, ref_c: Any) -> str:
    """warpy's C against the fp32 product of the decoded inputs, every element within C's rounding
    (half a step of C's type at the reference) plus twice the largest error of cuBLASLt's C (`ref_c`):
    "ok" or "FAIL (...)" naming the largest errors."""
    ref = (a.float() @ b.float().t()) * sa.float() * sb.float()
    step = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}[c.dtype]
    half = ref.abs() * step  # (half a step is at most |ref| · 2^-(mantissa bits), at least a quarter of that)
    theirs = float((ref_c.float() - ref).abs().max().item())
    err = (c.float() - ref).abs()
    bad = int((err > half + 2.0 * theirs).sum().item())
    worst = float(err.max().item())
    if not torch.isfinite(c.float()).all():
        return "FAIL (non-finite elements)"
    return "ok" if bad == 0 else f"FAIL ({bad} elements; max |Δ| {worst:.3g}, cuBLASLt's {theirs:.3g})"


def bench_fp8(shapes: Sequence[tuple[int, int, int]], dtype: str = "e4m3", out_dtype: Optional[str] = None,
              iters: int = 50, echo: Callable[[str], None] = print, config: Optional[str] = None) -> list[BenchRow]:
    """warpy.gemm of 8-bit floats against torch._scaled_mm, interleaved, per shape (module docstring).
    With `config`, warpy's side launches that configuration's plan on the same tensors and scales."""
    import warpy
    from warpy import runtime as rt
    from warpy.bench import cuda_torch
    from warpy.runtime.driver import cuda

    if dtype not in FP8_DTYPES:
        raise WarpyError(f"bench_fp8 takes an 8-bit float type ({', '.join(FP8_DTYPES)}), not {dtype}")
    why = gpu_reason("sm_90a")
    if why is not None:
        raise NoGPU(f"warpy bench needs an sm_90 GPU: {why.rstrip('.')}")
    torch = cuda_torch("warpy bench --dtype e4m3 compares with torch._scaled_mm")
    odt = out_dtype or "bf16"
    tdt, todt = _torch_types(torch, dtype, odt)
    dev = torch.device("cuda", 0)
    stream_handle = int(torch.cuda.current_stream(dev).cuda_stream)
    cu_stream = cuda().CUstream(stream_handle)
    slow, fast = scaled_mm(torch, todt, False), scaled_mm(torch, todt, True)
    l2 = l2_bytes()
    rows: list[BenchRow] = []
    echo(f"{rt.device().name}: {dtype} inputs, {odt} output, fp32 scales one a tensor (cuBLASLt: torch._scaled_mm, "
         f"the faster of use_fast_accum False / True); median of {iters} calls x 4 interleaved rounds each")
    progress = Progress()
    for shape in shapes:
        M, N, K = shape
        progress(f"{shape_text(shape)}: planning")
        try:
            sets = rotation(operand_bytes(shape, 1, dtype_bytes(odt)), l2)
            g = torch.Generator(device=dev).manual_seed(0)
            A = [torch.randn((M, K), device=dev, generator=g).to(tdt) for _ in range(sets)]
            B = [torch.randn((N, K), device=dev, generator=g).to(tdt) for _ in range(sets)]
            SA = torch.tensor([0.75], device=dev, dtype=torch.float32)
            SB = torch.tensor([1.25], device=dev, dtype=torch.float32)
            Cw = [torch.empty((M, N), device=dev, dtype=todt) for _ in range(sets)]
            Cc = [torch.empty((M, N), device=dev, dtype=todt) for _ in range(sets)]

            if config:
                run_w = _configured_launcher(shape, dtype, odt, config, A, B, Cw, stream_handle, scales=(SA, SB))
            else:
                def run_w(i: int) -> None:
                    j = i % sets
                    warpy.gemm(A[j], B[j], out=Cw[j], scale_a=SA, scale_b=SB)

            def run_slow(i: int) -> None:
                j = i % sets
                slow(A[j], B[j], SA, SB, Cc[j])

            def run_fast(i: int) -> None:
                j = i % sets
                fast(A[j], B[j], SA, SB, Cc[j])

            run_w(0)  # plan + load before timing
            progress(f"{shape_text(shape)}: timing")
            w_us, c_us = interleaved(run_w, {"scaled_mm": run_slow, "scaled_mm_fast": run_fast}, cu_stream, iters)
            run_slow(0)
            torch.cuda.synchronize()
            check = fp8_check(torch, A[0], B[0], SA, SB, Cw[0], Cc[0])
            row = BenchRow(shape, w_us, min(c_us.values()), check)
            print(f"{shape_text(shape)}: warpy {_num(w_us, '.1f')} µs, _scaled_mm {_num(c_us['scaled_mm'], '.1f')} µs "
                  f"(fast accumulation {_num(c_us['scaled_mm_fast'], '.1f')} µs), {check}", file=sys.stderr, flush=True)
            del A, B, Cw, Cc
            torch.cuda.empty_cache()
        except (WarpyError, RuntimeError) as e:
            row = BenchRow(shape, None, None, f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
            print(f"{shape_text(shape)}: {row.check}", file=sys.stderr, flush=True)
        progress.done()
        rows.append(row)
    echo(bench_table(rows).rstrip("\n"))
    summary = bench_summary(rows)
    if summary:
        echo(summary)
    return rows


__all__ = ["bench_fp8", "fp8_check", "scaled_mm"]
