"""The GEMM's 8-bit float inputs: what an fp8 problem may be, its scales, and the scale step of the
sm_90a program.

    C = scale_a[row] · scale_b[col] · (A·Bᵀ), A and B e4m3 or e5m2 (each its own), fp32 accumulation

- A and B are K-major (fp8 wgmma reads 8-bit operands K-major only: QGMMA has no transpose), 16-byte
  rows (K a multiple of 16);
- `scale_a` is "" (none: 1), "tensor" (one fp32 value, parameter `scale_a`, 1 element) or "row" (M fp32
  values, one a row of A and C); `scale_b` is "", "tensor" or "col" (N values, one a row of B, a column
  of C) — torch._scaled_mm's per-tensor and row-wise scales;
- the scales multiply the fp32 accumulators once the MMAs (and stream-K's partial sums) are done,
  before the fused epilogue (alpha, bias, ...) and C's one rounding: s = scale_a · scale_b (one fp32
  rounding where both are given), then acc · s.

The tile: one stage holds BK = 128 bytes of K for A and B (one 128-byte swizzle row, as the 16-bit
program's 64 elements), so BK = 128 // 1 = 128 fp8 elements, four QGMMA k32 steps; 128 x 256 x 128
tiles hold the same bytes a stage as the bf16 program's 128 x 256 x 64 and run the same ring depth.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np

from warpy.errors import WarpyError
from warpy.isa.families import alu
from warpy.isa.families.typed import F32
from warpy.isa.operands import P, R, RVec
from warpy.layout import Layout

from .gemm_epilogue import emit_load, fragment_origin

if TYPE_CHECKING:
    from warpy.isa.buffers import Param
    from warpy.isa.program import Program

    from .gemm import GemmProblem

FP8_DTYPES = ("e4m3", "e5m2")
# Above this K the sm_90a program promotes (Sm90Config.promote): each k block's products are summed by
# the tensor core from zero into a second set of registers and added into the fp32 accumulator with
# FADD. The tensor core's fp8 adder keeps fewer bits than fp32, so its error grows with K: on the H200
# (2026-12-01) without promotion 4096^3 and 8192 x 28672 x 8192 met the bench's check (C within its
# rounding plus twice cuBLASLt's largest error) but 8192^3 did not (29 elements off by up to 3.94,
# cuBLASLt's own largest 1.05). The second set of registers costs BN / 2 a thread: BN at most 192
# (256 spills), the rule's tiles limited so.
PROMOTE_ABOVE_K = 4096
PROMOTE_MAX_BN = 192
SCALES_A = ("", "tensor", "row")
SCALES_B = ("", "tensor", "col")
SCALE_PARAMS = ("scale_a", "scale_b")  # the pointer parameters, by name


def is_fp8(dtype: str) -> bool:
    return dtype in FP8_DTYPES


def scale_kind(value: object, which: str) -> str:
    """The canonical scale kind of `scale_a` / `scale_b` ("", "tensor", "row" / "col"), refused in one line."""
    allowed = SCALES_A if which == "scale_a" else SCALES_B
    v = {"none": "", "1": "", "per_tensor": "tensor", "rows": "row", "cols": "col", "per_row": "row",
         "per_col": "col"}.get(str(value).lower(), str(value).lower()) if value is not None else ""
    if v not in allowed:
        raise WarpyError(f"{which}={value!r}: a scale is none, 'tensor' (one value) or "
                         f"'{allowed[2]}' (one a {'row of A' if which == 'scale_a' else 'row of B (column of C)'})")
    return v


def scale_a_kind(value: object) -> str:
    return scale_kind(value, "scale_a")


def scale_b_kind(value: object) -> str:
    return scale_kind(value, "scale_b")


def check(problem: GemmProblem) -> None:
    """Refuse in one line what an fp8 problem cannot be (called by GemmProblem for every problem)."""
    a8, b8 = is_fp8(problem.dtype), is_fp8(problem.b_type)
    if (problem.scale_a or problem.scale_b) and not a8:
        raise WarpyError(f"scales multiply 8-bit float products; {problem.dtype} inputs take none")
    if problem.b_type != problem.dtype and not (a8 and b8):
        raise WarpyError(f"A is {problem.dtype} and B is {problem.b_type}: only 8-bit float inputs may differ "
                         f"(e4m3 and e5m2)")
    if not a8:
        return
    if problem.arch == "sm_100a" and (problem.scale_a or problem.scale_b):
        raise WarpyError("scales of 8-bit float inputs are applied by the sm_90a program; the sm_100a one "
                         "(UTCQMMA, kind::f8f6f4) multiplies unscaled so far")
    if problem.arch not in ("sm_90a", "sm_100a"):
        raise WarpyError(f"8-bit float inputs run on sm_90a (QGMMA) and sm_100a (UTCQMMA), not {problem.arch}")
    if "MN" in (problem.a_major, problem.b_major):
        raise WarpyError("8-bit float operands are read K-major only (fp8 wgmma has no transpose): "
                         "pass A as M x K and B as N x K, K contiguous")
    if problem.batch > 1:
        raise WarpyError("a batch of 8-bit float GEMMs in one launch is not written yet")


def promotes(problem: GemmProblem) -> bool:
    """Whether the rule promotes a problem's k blocks into fp32 (8-bit floats, K above PROMOTE_ABOVE_K)."""
    return is_fp8(problem.dtype) and problem.K > PROMOTE_ABOVE_K


def params(problem: GemmProblem) -> tuple[str, ...]:
    """The scale pointer parameters a problem's program takes, in order."""
    return tuple(n for n, kind in zip(SCALE_PARAMS, (problem.scale_a, problem.scale_b)) if kind)


def scale_elems(problem: GemmProblem, name: str) -> int:
    """Values a scale vector holds: 1 (tensor), M (row) or N (col)."""
    kind = problem.scale_a if name == "scale_a" else problem.scale_b
    return {"tensor": 1, "row": problem.M, "col": problem.N}[kind]


def tag(problem: GemmProblem) -> str:
    """The kernel name's part for B's type (where it differs) and the scales ("" for none)."""
    t = f"_b{problem.b_type}" if problem.b_type != problem.dtype else ""
    for name, kind in zip(("sa", "sb"), (problem.scale_a, problem.scale_b)):
        if kind:
            t += f"_{name}{kind[0]}"
    return t


def declare(p: Program, problem: GemmProblem) -> dict[str, Param]:
    """The scale parameters (fp32 vectors in global memory, `scale_a_in` / `scale_b_in` for the checker)."""
    out: dict[str, Param] = {}
    for name in params(problem):
        out[name] = p.param(name, "u64")
        p.global_buffer(f"{name}_in", Layout(scale_elems(problem, name), 4), "fp32", name)
    return out


def emit_scales(p: Program, problem: GemmProblem, scales: dict[str, Param], c: int, bm: int, bn: int, acc: RVec,
                m_blk: R, n_blk: R, rows: Optional[int] = None) -> None:
    """acc · scale_a[row] · scale_b[col] on an sm_90a accumulator of consumer warpgroup `c` (the 64-row
    block at row `rows` of the tile: `fragment_origin`): value
    4j + 2h + i is row `row` + 8h, column `col` + 8j + i (the wgmma fragment). Loads are guarded by C's
    edges on ragged problems (a scale past them reads 0; its element is not stored)."""
    M, N = problem.M, problem.N
    md, t, tmp, row, col = fragment_origin(p, "sc", c, bm, bn, m_blk, n_blk, rows)
    ragged = bool(M % bm or N % bn)
    even = N % 2 == 0

    def pointer(name: str, index: Optional[R]) -> RVec:
        v = p.rvec(f"sc_{name}_ptr", 2)
        p.emit(alu.ldc(v, scales[name].cbank()))
        if index is not None:
            p.emit(alu.imad_wide(v, index, 4, v))
        return v

    sa: list[Optional[F32]] = [None, None]
    if problem.scale_a == "tensor":
        v = F32.of(p.r("sc_a"))
        emit_load(p, md, pointer("scale_a", None), 0, "fp32", (v,), (None,), False)
        sa = [v, v]
    elif problem.scale_a == "row":
        ptr = pointer("scale_a", row)
        for h in range(2):
            ok: Optional[P] = None
            if ragged:
                ok = p.p(f"sc_row_ok{h}")
                p.emit(alu.isetp("LT", ok, row, M - 8 * h))
            sa[h] = F32.of(p.r(f"sc_a{h}"))
            emit_load(p, md, ptr, 8 * h * 4, "fp32", (sa[h],), (ok,), False)  # type: ignore[arg-type]
    sb_tensor: Optional[F32] = None
    ptr_b: Optional[RVec] = None
    if problem.scale_b == "tensor":
        sb_tensor = F32.of(p.r("sc_b"))
        emit_load(p, md, pointer("scale_b", None), 0, "fp32", (sb_tensor,), (None,), False)
    elif problem.scale_b == "col":
        ptr_b = pointer("scale_b", col)
    if sb_tensor is not None and problem.scale_a == "tensor":  # both per tensor: one product for every element
        assert sa[0] is not None
        s = F32.of(p.r("sc_s"))
        p.emit(alu.fmul(s, sa[0], sb_tensor))
        sa, sb_tensor = [s, s], None
    prod = F32.of(p.r("sc_prod"))
    for j in range(bn // 8):
        if ragged and N - 8 * j <= 0:
            break
        sb: tuple[Optional[F32], Optional[F32]] = (sb_tensor, sb_tensor)
        if ptr_b is not None:
            b0, b1 = F32.of(p.r("sc_b0")), F32.of(p.r("sc_b1"))
            g0: Optional[P] = None
            g1: Optional[P] = None
            if ragged:
                g0 = p.p("sc_col_ok0")
                p.emit(alu.isetp("LT", g0, col, N - 8 * j))
                g1 = g0
                if not even:
                    g1 = p.p("sc_col_ok1")
                    p.emit(alu.isetp("LT", g1, col, N - 8 * j - 1))
            emit_load(p, md, ptr_b, 8 * j * 4, "fp32", (b0, b1), (g0, g1), even)
            sb = (b0, b1)
        for h in range(2):
            if ragged and M <= 8 * h:
                continue
            for i in range(2):
                x = F32.of(acc[4 * j + 2 * h + i])
                a_s, b_s = sa[h], sb[i]
                if a_s is not None and b_s is not None:
                    p.emit(alu.fmul(prod, a_s, b_s))
                    p.emit(alu.fmul(x, x, prod))
                elif a_s is not None or b_s is not None:
                    only = a_s if a_s is not None else b_s
                    assert only is not None
                    p.emit(alu.fmul(x, x, only))


def scale_values(rng: np.random.Generator, n: int) -> np.ndarray:
    """A scale vector the checker's inputs hold: powers of two from 1/8 to 8 (every product with the
    small-integer sums exact in fp32, so C's values are compared exactly, and a scale read for the
    wrong row or column differs)."""
    return np.exp2(rng.integers(-3, 4, size=n)).astype(np.float32)


def apply_reference(ref: np.ndarray, problem: GemmProblem, gmem: dict[str, np.ndarray]) -> np.ndarray:
    """The exact product `ref` (M x N, float64) times the scales the run's memory holds."""
    for name in params(problem):
        n = scale_elems(problem, name)
        s = np.asarray(gmem[name][: 4 * n]).view(np.float32).astype(np.float64)
        kind = problem.scale_a if name == "scale_a" else problem.scale_b
        if kind == "tensor":
            ref = ref * s[0]
        elif kind == "row":
            ref = ref * s[:, None]
        else:
            ref = ref * s[None, :]
    return ref


__all__ = ["PROMOTE_ABOVE_K", "PROMOTE_MAX_BN", "promotes", "FP8_DTYPES", "SCALES_A", "SCALES_B", "SCALE_PARAMS", "is_fp8", "scale_kind", "scale_a_kind",
           "scale_b_kind", "check", "params",
           "scale_elems", "tag", "declare", "emit_scales", "scale_values", "apply_reference"]
