"""Tile schedules shared by the GEMM programs: division by constants with checked magic numbers, and
the grouped (optionally serpentine) order in which a persistent grid walks the output tiles.

Each is written twice on purpose, once as the instructions a program emits and once as the Python
model (`tile_of`) that tests and tools use; tests run the emitted instructions through
`warpy.isa.interp` and compare them with the model for every tile number.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import attrs

from warpy.errors import WarpyError
from warpy.isa.families import alu
from warpy.isa.families._util import ins
from warpy.isa.operands import RZ, R
from warpy.isa.program import Program


@attrs.frozen
class Magic:
    """x // d as hi(x * mul) >> shift, exact for 0 <= x <= x_max (checked, not assumed)."""

    d: int
    mul: int
    shift: int

    @staticmethod
    def find(d: int, x_max: int) -> "Magic":
        if d < 2:
            raise WarpyError(f"division by {d} needs no magic number (d >= 2)")
        for shift in range(0, 32):
            mul = -(-(1 << (32 + shift)) // d)
            if mul >= 1 << 32:
                break
            if all((x * mul) >> (32 + shift) == x // d for x in _probe_points(d, x_max)):
                return Magic(d, mul, shift)
        raise WarpyError(f"no 32-bit multiplier divides every x <= {x_max} by {d}")

    def __call__(self, x: int) -> int:
        return (x * self.mul) >> (32 + self.shift)


def _probe_points(d: int, x_max: int) -> range | list[int]:
    # The error of hi(x * mul) grows with x and matters only where floor(x / d) changes: check
    # every x when the range is small, else both sides of every multiple of d.
    if x_max < 1 << 16:
        return range(x_max + 1)
    pts: list[int] = []
    for q in range(x_max // d + 1):
        pts.extend((q * d, q * d + d - 1))
    return [x for x in pts if x <= x_max]


def divide(p: Program, q: R, x: R, d: int, x_max: int) -> R:
    """Emit q = x // d for 0 <= x <= x_max (a multiply-high by a checked magic number)."""
    if d == 1:
        p.emit(alu.mov(q, x))
        return q
    mg = Magic.find(d, x_max)
    p.emit(ins("IMAD", "HI.U32", q, x, mg.mul, RZ))
    if mg.shift:
        p.emit(alu.shf_r(q, q, mg.shift))
    return q


@attrs.frozen
class TileOrder:
    """`group` M-blocks share a sweep over N (a wave of CTAs reuses A and B through the L2); with
    `serpentine`, alternate N-columns of a group run their M-blocks upwards. The last, shorter
    group (mt % group blocks) is walked the same way without serpentine."""

    mt: int
    nt: int
    group: int
    serpentine: bool = False

    @property
    def tiles(self) -> int:
        return self.mt * self.nt

    def _split(self) -> tuple[int, int, int]:
        gm = min(self.group, self.mt)
        full_groups = self.mt // gm
        return gm, full_groups, full_groups * gm * self.nt

    def tile_of(self, t: int) -> tuple[int, int]:
        """(m_blk, n_blk) of tile number t: the model the emitted code must agree with."""
        gm, full_groups, t_full = self._split()
        if t < t_full:
            g, w = divmod(t, gm * self.nt)
            n, m = divmod(w, gm)
            if self.serpentine and n % 2:
                m = gm - 1 - m
            return g * gm + m, n
        n, m = divmod(t - t_full, self.mt % gm)
        return full_groups * gm + m, n

    def emit(self, p: Program, t: R, x_max: int | None = None) -> tuple[R, R]:
        """Emit (m_blk, n_blk) = tile_of(t) for 0 <= t <= x_max (default: the tile count)."""
        x_max = self.tiles if x_max is None else x_max
        gm, full_groups, t_full = self._split()
        m_blk, n_blk = p.r("m_blk"), p.r("n_blk")
        if t_full:
            g = divide(p, p.r("grp"), t, gm * self.nt, x_max)
            w = p.r("in_grp")
            p.emit(alu.imad(w, g, (1 << 32) - gm * self.nt, t))
            nq = divide(p, n_blk, w, gm, x_max)
            p.emit(alu.imad(m_blk, nq, (1 << 32) - gm, w))  # w % gm
            if self.serpentine:
                odd, flip = p.p("odd_column"), p.r("flipped")
                p.emit(alu.lop3_p(odd, n_blk, 1, RZ, 0xC0))
                p.emit(alu.imad(flip, m_blk, (1 << 32) - 1, gm - 1))  # gm - 1 - m
                p.emit(alu.sel(m_blk, flip, m_blk, odd))
            p.emit(alu.imad(m_blk, g, gm, m_blk))
        tail = self.mt % gm
        if tail:
            tw, tm, tn = p.r("tail_w"), p.r("tail_m"), p.r("tail_n")
            p.emit(alu.iadd3(tw, t, (1 << 32) - t_full if t_full else 0))
            divide(p, tn, tw, tail, x_max)
            p.emit(alu.imad(tm, tn, (1 << 32) - tail, tw))
            p.emit(alu.iadd3(tm, tm, full_groups * gm))
            if t_full:
                in_tail = p.p("in_tail")
                p.emit(alu.isetp("GE", in_tail, t, t_full))
                p.emit(alu.sel(m_blk, tm, m_blk, in_tail))
                p.emit(alu.sel(n_blk, tn, n_blk, in_tail))
            else:
                p.emit(alu.mov(m_blk, tm))
                p.emit(alu.mov(n_blk, tn))
        return m_blk, n_blk


@contextlib.contextmanager
def strided_tiles(p: Program, worker: R, workers: int, tiles: int) -> Iterator[R]:
    """`for t in range(worker, tiles, workers)` (a persistent grid walking tiles by stride): a loop
    of tiles // workers iterations, one more for the first tiles % workers workers; yields t."""
    count = p.r("tile_count")
    base, extra = divmod(tiles, workers)
    if extra:
        more = p.p("has_extra_tile")
        p.emit(alu.isetp("LT", more, worker, extra))
        p.emit(alu.sel(count, base + 1, base, more))
    else:
        p.emit(alu.mov(count, base))
    with p.loop("tile", count, max_count=-(-tiles // workers)) as tile:
        t = p.r("t")
        p.emit(alu.imad(t, tile.reg, workers, worker))
        yield t
