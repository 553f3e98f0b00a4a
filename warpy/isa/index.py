"""Program indices and the affine coordinates built from them.

An index is a value a register holds at run time, known to lie in 0..extent-1: a loop counter, a
ring position, a per-thread value (`Lane`) or a per-CTA one (`Uniform`). A buffer's coordinate is
an affine mix of indices (`Ix`: const + sum(coef * index)); the derivation (`warpy.isa.derive`)
checks that the buffer's layout is affine in them too and turns the mix into multiply-adds placed
where each index changes.
"""

from __future__ import annotations

from typing import Union

import attrs

from warpy.errors import WarpyError
from warpy.isa.instr import Affine
from warpy.isa.operands import R, UR


class Index:
    """A program index: its value is a register's, from 0 to extent-1."""

    name: str
    extent: int

    def reg_name(self) -> str:
        raise NotImplementedError

    def __mul__(self, c: int) -> "Ix":
        return Ix(0, ((c, self),))

    __rmul__ = __mul__

    def __add__(self, o: "Coord") -> "Ix":
        return as_ix(self) + o

    __radd__ = __add__


class Counter(Index):
    """A loop counter (a general register counting 0, 1, ... count-1)."""

    def __init__(self, name: str, count: int, reg: R) -> None:
        self.name = name
        self.extent = count
        self.reg = reg

    def reg_name(self) -> str:
        return self.reg.name


class Ring(Index):
    """A ring position: the stage (a uniform register, 0..depth-1, wrapping) and the parity of the
    pass (bit 31 of a general register, flipping at each wrap, as the mbarrier wait reads it)."""

    def __init__(self, name: str, depth: int, stage: UR, parity: R) -> None:
        self.name = name
        self.extent = depth
        self.depth = depth
        self.stage = stage
        self.parity = parity

    def reg_name(self) -> str:
        return self.stage.name


class Lane(Index):
    """A per-thread index: a general register the program computed (a thread's row of a fragment,
    `tid % 128`...), 0..extent-1. Values affine in it are one IMAD at the point of use."""

    def __init__(self, name: str, reg: R, extent: int) -> None:
        if not isinstance(reg, R):
            raise WarpyError(f"lane index {name}: a per-thread value is a general register, not {reg}")
        self.name = name
        self.extent = extent
        self.reg = reg

    def reg_name(self) -> str:
        return self.reg.name


class Uniform(Index):
    """A per-CTA (warp-uniform) index: a uniform register the program computed (a CTA's rank in its
    cluster, a slice number), 0..extent-1. Values affine in it are one UIMAD at the point of use."""

    def __init__(self, name: str, reg: UR, extent: int) -> None:
        if not isinstance(reg, UR):
            raise WarpyError(f"uniform index {name}: a per-CTA value is a uniform register, not {reg}")
        self.name = name
        self.extent = extent
        self.reg = reg

    def reg_name(self) -> str:
        return self.reg.name


@attrs.frozen
class Ix:
    """An affine coordinate: const + sum(coef * index)."""

    const: int = 0
    terms: tuple[tuple[int, Index], ...] = ()

    def __add__(self, o: "Coord") -> "Ix":
        oi = as_ix(o)
        return Ix(self.const + oi.const, self.terms + oi.terms)

    __radd__ = __add__

    def __mul__(self, c: int) -> "Ix":
        return Ix(self.const * c, tuple((k * c, i) for k, i in self.terms))

    def indices(self) -> list[Index]:
        return [i for _, i in self.terms]

    def eval(self, env: dict[int, int]) -> int:
        return self.const + sum(k * env[id(i)] for k, i in self.terms)

    def affine(self) -> Affine:
        merged: dict[str, int] = {}
        for k, i in self.terms:
            merged[i.reg_name()] = merged.get(i.reg_name(), 0) + k
        return Affine(self.const, tuple((k, n) for n, k in merged.items() if k))

    def without_const(self) -> "Ix":
        return Ix(0, self.terms)


Coord = Union[int, Index, Ix]


def as_ix(c: Coord) -> Ix:
    if isinstance(c, Ix):
        return c
    if isinstance(c, Index):
        return Ix(0, ((1, c),))
    if isinstance(c, int) and not isinstance(c, bool):
        return Ix(c)
    raise WarpyError(f"a coordinate is an int, a loop counter, a ring or an affine mix of them, not {c!r}")
