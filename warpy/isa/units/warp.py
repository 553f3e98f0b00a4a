"""Warp-level reductions through shuffles: `warp_reduce` emits the butterfly, log2(width) steps of
`SHFL.BFLY` then the combining instruction, after which every lane of each group of `width` lanes
holds the group's reduction (the 5-step butterfly for a whole warp). Float sums are added in the
butterfly's order (lane ^ 16 first), the same on every lane, so every lane's result has the same
bits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

from warpy.errors import WarpyError
from warpy.isa.families import alu
from warpy.isa.families.typed import F32, S32, U32, need
from warpy.isa.operands import R, UR

if TYPE_CHECKING:
    from warpy.isa.program import Program

FLOAT_OPS = ("sum", "max", "min")
INT_OPS = ("sum", "max", "min")


def butterfly_masks(width: int) -> list[int]:
    """The lane masks of the butterfly over groups of `width` lanes (width/2 down to 1)."""
    if width not in (2, 4, 8, 16, 32):
        raise WarpyError(f"a warp reduction runs over 2, 4, 8, 16 or 32 lanes, not {width}")
    out = []
    m = width // 2
    while m:
        out.append(m)
        m //= 2
    return out


def warp_reduce(p: Program, x: Union[F32, S32, U32], op: str, *, width: int = 32,
                members: int = alu.FULL_WARP, tmp: str = "xchg") -> None:
    """x = op over the `width` lanes of x's group (every lane gets it): op is "sum", "max" or "min";
    x is an F32 (FADD / FMNMX) or an integer (IADD3 / VIMNMX, signed for S32). `members`: the
    lanes that run it (all their partners must be among them; see `alu.shfl`)."""
    need("warp_reduce", "x", x, F32, S32, U32)
    if op not in FLOAT_OPS:
        raise WarpyError(f"warp_reduce: op {op!r} is not one of {', '.join(FLOAT_OPS)}")
    t: R = type(x).of(p.r(tmp))
    for m in butterfly_masks(width):
        p.emit(alu.shfl_bfly(t, x, m, members=members))
        if isinstance(x, F32):
            assert isinstance(t, F32)
            p.emit(alu.fadd(x, x, t) if op == "sum" else alu.fmax(x, x, t) if op == "max" else alu.fmin(x, x, t))
        elif op == "sum":
            p.emit(alu.iadd3(x, x, t))
        else:
            build = alu.imax if op == "max" else alu.imin
            p.emit(build(x, x, t, unsigned=isinstance(x, U32), arch=p.sm))


def warp_sum(p: Program, x: F32, **kw: object) -> None:
    """x = the sum over the warp (5 butterfly steps)."""
    warp_reduce(p, x, "sum", **kw)  # type: ignore[arg-type]


def warp_max(p: Program, x: F32, **kw: object) -> None:
    """x = the maximum over the warp (5 butterfly steps)."""
    warp_reduce(p, x, "max", **kw)  # type: ignore[arg-type]


def warp_count(p: Program, d: UR, x: Union[S32, U32]) -> None:
    """d = the sum of the integer x over the lanes taking part, into a uniform register (REDUX.SUM:
    one instruction where the butterfly takes ten)."""
    need("warp_count", "x", x, S32, U32)
    p.emit(alu.redux("SUM", d, x))


__all__ = ["warp_reduce", "warp_sum", "warp_max", "warp_count", "butterfly_masks"]
