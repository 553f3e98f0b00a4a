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
from warpy.isa.families import alu, control
from warpy.isa.families._util import ins
from warpy.isa.operands import RZ, R
from warpy.isa.program import Program


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for positive b."""
    return -(-a // b)


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


def _probe_points(d: int, x_max: int) -> range | tuple[int, ...]:
    # hi(x * mul) >> shift == x // d exactly when (x mod d) + x e / 2^(32+shift) < d, where
    # e = mul d - 2^(32+shift) >= 0. Within a run of x where x mod d climbs by one a step, the left
    # side only grows, so over 0..x_max its maxima sit at the end of each run: x_max itself and the
    # largest x <= x_max with x mod d = d - 1. Checking those two is exact, in constant time (the
    # largest multiple of d is checked too, as the earlier sampled check did); a small range is
    # checked in full all the same.
    if x_max < 1 << 16:
        return range(x_max + 1)
    last_full = x_max - (x_max + 1) % d
    return tuple(x for x in (x_max - x_max % d, last_full, x_max) if x >= 0)


def divide(p: Program, q: R, x: R, d: int, x_max: int) -> R:
    """Emit q = x // d for 0 <= x <= x_max (a multiply-high by a checked magic number)."""
    if d == 1:
        p.emit(alu.mov(q, x))
        return q
    mg = Magic.find(d, x_max)
    p.emit(ins(alu.IMAD, "HI.U32", q, x, mg.mul, RZ))
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


@attrs.frozen
class Segment:
    """One piece of a worker's stream-K work: tile `t`, its k blocks [k_lo, k_lo + k_cnt)."""

    t: R
    k_lo: R
    k_cnt: R


@attrs.frozen
class StreamK:
    """Stream-K: the W = tiles x kt iterations (the k blocks of every tile, tile by tile) are split
    evenly over `workers`: worker g takes [g W / G, (g + 1) W / G) (at least one each: W >= G).
    A worker walks its range from the last tile to the first, a segment a tile, so that:

    - a tile's last k block lies in its **finisher**, the worker that writes the tile; the others
      holding part of it (its **contributors**: workers first_worker(t) .. finisher - 1) leave
      partial sums for it;
    - a worker contributes at most once, with the first segment it walks (the others end at a
      tile's end), and finishes with the last, so contributors are done early and a finisher waits
      as late as it can.
    """

    tiles: int
    kt: int
    workers: int

    def __attrs_post_init__(self) -> None:
        if self.workers < 1 or self.tiles < 1 or self.kt < 1:
            raise WarpyError(f"stream-K over {self.tiles} tiles of {self.kt} k blocks and {self.workers} workers")
        if self.work < self.workers:
            raise WarpyError(f"stream-K: {self.work} iterations cannot keep {self.workers} workers busy")

    @property
    def work(self) -> int:
        return self.tiles * self.kt

    def range_of(self, g: int) -> tuple[int, int]:
        return g * self.work // self.workers, (g + 1) * self.work // self.workers

    def segments(self, g: int) -> list[tuple[int, int, int]]:
        """The model: worker g's (tile, k_lo, k_cnt), in the order it walks them."""
        lo, cur = self.range_of(g)
        out = []
        while cur > lo:
            t = (cur - 1) // self.kt
            seg_lo = max(lo, t * self.kt)
            out.append((t, seg_lo - t * self.kt, cur - seg_lo))
            cur = seg_lo
        return out

    def first_worker(self, t: int) -> int:
        """The worker holding tile t's first iteration t kt: the largest g with g W / G <= t kt."""
        return ((t * self.kt + 1) * self.workers - 1) // self.work

    def finisher(self, t: int) -> int:
        return (((t + 1) * self.kt) * self.workers - 1) // self.work

    def max_segment(self) -> int:
        """The most k blocks one segment can have."""
        return min(self.kt, -(-self.work // self.workers))

    def max_contributors(self) -> int:
        return max(self.finisher(t) - self.first_worker(t) for t in range(self.tiles))

    @contextlib.contextmanager
    def emit(self, p: Program, worker: R) -> Iterator[Segment]:
        """Emit the walk for the worker in `worker`: the body runs once a segment."""
        G, W = self.workers, self.work
        tmp, lo, cur = p.r("sk_tmp"), p.r("it_lo"), p.r("it_cur")
        p.emit(alu.imad(tmp, worker, W, RZ))
        divide(p, lo, tmp, G, G * W)
        p.emit(alu.iadd3(tmp, tmp, W))
        divide(p, cur, tmp, G, G * W)
        top = p.fresh_label("SEGMENT")
        p.label(top)
        t, k_lo, k_cnt = p.r("t"), p.r("k_lo"), p.r("k_cnt")
        last, tbase, seg_lo = p.r("it_last"), p.r("tile_k0"), p.r("seg_lo")
        p.emit(alu.iadd3(last, cur, (1 << 32) - 1))
        divide(p, t, last, self.kt, W)
        p.emit(alu.imad(tbase, t, self.kt, RZ))
        below = p.p("tile_starts_below")
        p.emit(alu.isetp("LT", below, tbase, lo))
        p.emit(alu.sel(seg_lo, lo, tbase, below))
        p.emit(alu.imad(k_lo, tbase, (1 << 32) - 1, seg_lo))
        p.emit(alu.imad(k_cnt, seg_lo, (1 << 32) - 1, cur))
        yield Segment(t, k_lo, k_cnt)
        more = p.p("more_segments")
        p.emit(alu.mov(cur, seg_lo))
        p.emit(alu.isetp("GT", more, cur, lo))
        p.emit(control.bra(top).guarded(more))

    def emit_first_worker(self, p: Program, q: R, t: R) -> R:
        """q = first_worker(t) for the tile number in t."""
        G, W = self.workers, self.work
        x = p.r("sk_first_x")
        p.emit(alu.imad(x, t, self.kt * G, G - 1))  # (t kt + 1) G - 1
        return divide(p, q, x, W, self.tiles * self.kt * G + G)
