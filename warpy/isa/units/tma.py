"""The TMA unit: bulk tensor copies between a tensor map's box in global memory and a
shared-memory tile (`tma_load`, `tma_store`), through a map named at build time or, for a table of
maps in global memory (`Program.map_table`), through the descriptor a run-time index picks
(`table_entry`, then `tma_load_at` / `tma_store_at`)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Optional, Sequence, Union

from warpy.errors import WarpyError
from warpy.memo import forgettable
from warpy.isa.buffers import Barrier, MapTable, TensorMap, Tile, TileRing
from warpy.isa.families import alu, tma
from warpy.isa.families._util import ins
from warpy.isa.index import Coord, Counter, as_ix
from warpy.isa.operands import P, R, UP, UR, Mem, URVec
from warpy.layout import desc as _desc
from warpy.layout.core import Layout
from warpy.layout.desc import TmaSlice
from warpy.layout.smem import SmemTile
from warpy.layout.tma import TmaBox

if TYPE_CHECKING:
    from warpy.isa.program import Program

TmaCoord = Union[int, R, UR, Coord]


@functools.lru_cache(maxsize=256)
def tma_box(global_layout: Layout, smem_tile: SmemTile, multicast: int = 1, oob_fill: str = "zero",
            l2_promotion: int = 0) -> TmaBox:
    """`warpy.layout.desc.tma_box` (the tensor map of one tile's box, proven by its decider, which
    walks every byte of the box), remembered by its arguments (frozen values, as is the answer; a
    refusal is raised each time): the programs of a process build the same maps again."""
    return _desc.tma_box(global_layout, smem_tile, multicast, oob_fill, l2_promotion)


forgettable(tma_box.cache_clear)


@functools.lru_cache(maxsize=64)
def tma_multicast_slices(global_layout: Layout, smem_tile: SmemTile, multicast: int) -> tuple[TmaSlice, ...]:
    """`warpy.layout.desc.tma_multicast_slices`, remembered likewise."""
    return _desc.tma_multicast_slices(global_layout, smem_tile, multicast)


forgettable(tma_multicast_slices.cache_clear)


@functools.lru_cache(maxsize=64)
def tma_uneven_slices(global_layout: Layout, smem_tile: SmemTile, multicast: int,
                      l2_promotion: int = 0) -> tuple[TmaBox, TmaBox, tuple[TmaSlice, ...]]:
    """`warpy.layout.desc.tma_uneven_slices` (the boxes of a multicast cut into unequal slices of
    whole swizzle atoms), remembered likewise."""
    return _desc.tma_uneven_slices(global_layout, smem_tile, multicast, l2_promotion=l2_promotion)


forgettable(tma_uneven_slices.cache_clear)


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
    """Copy the tile `src` to the box of `tmap` at `coords` (or add it there: reduce_add). Refused
    for a map whose rows are not whole 16 bytes: the engine would write past their ends
    (`warpy.layout.tma.store_clips_exactly`)."""
    _check_box(src, tmap)
    if not tmap.box.stores_exactly:
        raise WarpyError(f"tensor map {tmap.name}: rows of {tmap.box.dims[0]} {tmap.box.dtype} are "
                         f"{tmap.box.dims[0] * tmap.box.elem_bytes} bytes, not a whole number of 16; a TMA store "
                         "writes a row's last 16 bytes whole, past its end (store such rows from the registers)")
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


# -- maps from a table in global memory ------------------------------------------------------------


def table_entry(p: Program, table: MapTable, index: Union[R, UR, int], dst: URVec) -> URVec:
    """dst (a uniform pair) = the address of the descriptor in slot `index` of `table`: the table's
    address (its parameter) + 128 x index. `index` is the same in every lane (an instruction word)."""
    if dst.width != 2:
        raise WarpyError(f"a descriptor's address is a uniform pair, not {dst.name}[{dst.width}]")
    base = p.urvec(f"{table.param.name}_addr", 2)
    p.emit(alu.uldc(base, table.param.cbank(), p.sm))
    if isinstance(index, int):
        idx = p.ur(f"{dst.name}_slot")
        p.emit(alu.umov(idx, index))
    elif isinstance(index, R):
        idx = p.ur(f"{dst.name}_slot")
        p.emit(alu.r2ur(idx, index))
    else:
        idx = index
    p.emit(ins(alu.UIMAD, "WIDE.U32", dst, idx, MapTable.STRIDE, base))
    return dst


def tma_load_at(p: Program, dst: Tile, desc: URVec, rank: int, coords: Sequence[TmaCoord], bar: Barrier,
                guard: Union[P, UP, None] = None, name: str = "tma", two_cta: bool = False,
                bar_rank: Optional[UR] = None) -> None:
    """Copy the box of the map whose descriptor is at `desc` (`table_entry`), of `rank` dimensions,
    at `coords` (innermost first) into `dst`, completing on `bar`. The box is the table slot's, known
    at run time only: the caller arms `bar` with its bytes and makes room for it at `dst`.
    `two_cta` / `bar_rank`: as `tma_load`'s (a CTA pair's copy completing on the barrier of the CTA
    of cluster rank `bar_rank`, mapa)."""
    if not isinstance(dst, Tile):
        raise WarpyError(f"tma_load_at's destination must be a shared-memory tile, not {type(dst).__name__}")
    if len(coords) != rank or not 1 <= rank <= 5:
        raise WarpyError(f"a rank-{rank} copy takes {rank} coordinates, got {len(coords)}")
    args = p.urvec(f"{name}_args{rank}", 2 + rank)
    p.derive.into(args[0], "addr", dst)
    p.derive.into(args[1], "addr", bar)
    if bar_rank is not None:
        p.emit(alu.mapa(args[1], bar_rank, args[1]))
    for n, c in enumerate(coords):
        _coord_into(p, args[2 + n], c)
    p.emit(tma.tma_load(Mem(args), desc, two_cta=two_cta).guarded(guard))


def tma_store_at(p: Program, src: Tile, desc: URVec, rank: int, coords: Sequence[TmaCoord],
                 guard: Union[P, UP, None] = None, name: str = "tmas") -> None:
    """Copy `src` to the box of the map whose descriptor is at `desc`, of `rank` dimensions, at
    `coords` (the engine clips the box at the tensor's edges)."""
    if len(coords) != rank or not 1 <= rank <= 5:
        raise WarpyError(f"a rank-{rank} copy takes {rank} coordinates, got {len(coords)}")
    args = p.urvec(f"{name}_args{rank}", 1 + rank)
    p.derive.into(args[0], "addr", src)
    for n, c in enumerate(coords):
        _coord_into(p, args[1 + n], c)
    p.emit(tma.tma_store(Mem(args), desc).guarded(guard))
