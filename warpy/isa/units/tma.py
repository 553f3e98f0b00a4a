"""The TMA unit: bulk tensor copies between a tensor map's box in global memory and a
shared-memory tile (`tma_load`, `tma_store`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence, Union

from warpy.errors import WarpyError
from warpy.isa.buffers import Barrier, TensorMap, Tile, TileRing
from warpy.isa.families import alu, tma
from warpy.isa.index import Coord, Counter, as_ix
from warpy.isa.operands import P, R, UP, UR, Mem

if TYPE_CHECKING:
    from warpy.isa.program import Program

TmaCoord = Union[int, R, UR, Coord]


def tma_load(p: Program, dst: Tile, tmap: TensorMap, coords: Sequence[TmaCoord], bar: Barrier,
             mask: Optional[UR] = None, two_cta: bool = False, guard: Union[P, UP, None] = None,
             bar_rank: Optional[UR] = None) -> None:
    """Copy the box of `tmap` at `coords` (innermost first) into `dst`, completing on `bar`
    (in the CTA of cluster rank `bar_rank`, e.g. the pair's leader, when given: mapa)."""
    if not isinstance(dst, Tile):
        raise WarpyError(f"tma_load's destination must be a shared-memory tile, not {type(dst).__name__}")
    if not isinstance(bar, Barrier):
        raise WarpyError(f"tma_load's barrier must be a Barrier, not {type(bar).__name__} {bar.buffer.name}")
    rank = tmap.box.rank
    if len(coords) != rank:
        raise WarpyError(f"tensor map {tmap.name} has rank {rank}, got {len(coords)} coordinates")
    _check_box(dst, tmap)
    args = p.urvec(f"tma_{tmap.name}", 2 + rank)
    p.derive.into(args[0], "addr", dst)
    p.derive.into(args[1], "addr", bar)
    if bar_rank is not None:
        p.emit(alu.mapa(args[1], bar_rank, args[1]))
    for n, c in enumerate(coords):
        _coord_into(p, args[2 + n], c)
    p.emit(tma.tma_load(Mem(args), tmap.name, mask, two_cta).guarded(guard))


def tma_store(p: Program, src: Tile, tmap: TensorMap, coords: Sequence[TmaCoord], reduce_add: bool = False) -> None:
    """Copy the tile `src` to the box of `tmap` at `coords` (or add it there: reduce_add)."""
    _check_box(src, tmap)
    rank = tmap.box.rank
    args = p.urvec(f"tmas_{tmap.name}", 1 + rank)
    p.derive.into(args[0], "addr", src)
    for n, c in enumerate(coords):
        _coord_into(p, args[1 + n], c)
    p.emit(tma.tma_reduce_add(Mem(args), tmap.name) if reduce_add else tma.tma_store(Mem(args), tmap.name))


def _check_box(tile: Tile, tmap: TensorMap) -> None:
    """The box must fit the tile's buffer (a ring: one stage) and be swizzled as it is."""
    buf = tile.buffer
    span = buf.swizzle_span()
    if tmap.box.swizzle != span:
        raise WarpyError(f"tensor map {tmap.name} swizzles {tmap.box.swizzle} bytes, buffer {buf.name} {span}")
    room = buf.stage_bytes if isinstance(buf, TileRing) else buf.size
    if tmap.box.box_bytes > room:
        raise WarpyError(f"tensor map {tmap.name}'s box is {tmap.box.box_bytes} bytes, more than {buf.name}'s {room}")


def _coord_into(p: Program, dst: UR, c: TmaCoord) -> None:
    """dst = a box coordinate: a register's value, or an affine mix of loop counters computed here."""
    if isinstance(c, UR):
        p.emit(alu.umov(dst, c))
    elif isinstance(c, R):
        p.emit(alu.r2ur(dst, c))
    else:
        ix = as_ix(c)
        if not ix.terms:
            p.emit(alu.umov(dst, ix.const))
            return
        tmp = p.r("crd")
        first = True
        for k, i in ix.terms:
            if not isinstance(i, Counter):
                raise WarpyError(f"a TMA coordinate is affine in loop counters, not in {type(i).__name__} {i.name}")
            p.emit(alu.imad(tmp, i.reg, k, ix.const if first else tmp))
            first = False
        p.emit(alu.r2ur(dst, tmp))
