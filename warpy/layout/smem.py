"""Shared-memory operand tiles for the tensor cores: swizzled physical layouts in bytes.

A tile is an MN x K operand slab (A: M x K, B: N x K) in coordinates `(row, k)` where `row` runs
over M (or N) and `k` over K. Its layout maps `(row, k)` to a **byte address** in shared memory:
`swizzle(offset + linear(row, k))`. Bytes, not elements, because every consumer (GMMA/UMMA
descriptors, TMA boxes, swizzles) speaks bytes; `element_layout` gives the element view.

The arrangement is the canonical GMMA/UMMA one (CUTLASS `Layout_{K,MN}_{INTER,SW32,SW64,SW128}_Atom`
tiled over the tile), with one convention fixed here: the tile's contiguous extent (K for K-major,
MN for MN-major) is cut into *columns* as wide as the swizzle span (16 bytes without swizzle), and
each column is a full stack of swizzle atoms over the other extent. That is `tile_to_shape` with
the strided mode tiled first, which is what CUTLASS's SM90/SM100 mainloops build, and it is
exactly the order in which one TMA box (split 3-D where needed) writes shared memory.

- K-major, swizzle W bytes: atom 8 rows x W bytes, rows W apart; 8-row groups 8W apart;
  columns `rows*W` apart.
- K-major, no swizzle ("interleave"): core matrix 8 rows x 16 bytes (128 contiguous bytes);
  8-row groups 128 apart; 16-byte K chunks `rows*16` apart.
- MN-major, swizzle W: atom W bytes of MN x 8 K-rows, K-rows W apart; 8-row K groups 8W apart;
  MN columns `cols*W` apart.
- MN-major, no swizzle: core matrix 16 bytes of MN x 8 K-rows; K-rows 16 apart (so 8-row K groups
  128 apart); 16-byte MN chunks `cols*16` apart.
"""

from __future__ import annotations

from typing import Literal

import attrs

from warpy.layout.core import Layout, LayoutError
from warpy.layout.swizzle import Swizzle, SwizzledLayout
from warpy.layout.dtype import dtype as dtype_of
from warpy.layout.dtype import names

Major = Literal["K", "MN"]

SWIZZLE_SPANS = (0, 32, 64, 128)

#: Bytes of one core-matrix row (the 16-byte unit every descriptor field is counted in).
CORE_ROW_BYTES = 16
#: Rows of one core matrix / swizzle atom along the strided extent.
CORE_ROWS = 8


def canonical_dtype(spelling: str) -> str:
    """The canonical name of a tensor-core operand type (`warpy.layout.dtype`), refusing others."""
    d = dtype_of(spelling)
    if not d.operand:
        raise LayoutError(f"element type {spelling!r} is not a tensor-core operand type ({', '.join(names('operand'))})")
    return d.name


def element_bytes(spelling: str) -> int:
    return dtype_of(canonical_dtype(spelling)).bytes


def swizzle_for_span(span: int) -> Swizzle:
    """The byte-address swizzle of a span: 128B = Sw<3,4,3>, 64B = Sw<2,4,3>, 32B = Sw<1,4,3>, none = Sw<0,4,3>."""
    if span not in SWIZZLE_SPANS:
        raise LayoutError(f"swizzle {span} is not one of {SWIZZLE_SPANS} bytes")
    bits = {0: 0, 32: 1, 64: 2, 128: 3}[span]
    return Swizzle(bits, 4, 3)


def span_of_swizzle(sw: Swizzle) -> int:
    """Inverse of `swizzle_for_span`; refuses any swizzle that is not a GMMA/UMMA/TMA atom."""
    if sw.bits == 0:
        return 0
    if sw.base != 4 or sw.shift != 3 or not 1 <= sw.bits <= 3:
        raise LayoutError(
            f"swizzle {sw} is not a tensor-core swizzle atom (Sw<1,4,3>, Sw<2,4,3>, Sw<3,4,3> on byte addresses)"
        )
    return 16 << sw.bits


def repeat_bytes(span: int) -> int:
    """Bytes after which a swizzle pattern repeats (8 rows of the span); 128 (one core matrix) without swizzle."""
    return CORE_ROWS * (span if span else CORE_ROW_BYTES)


def _check_major(major: str) -> Major:
    if major == "K":
        return "K"
    if major == "MN":
        return "MN"
    raise LayoutError(f"major {major!r} is not 'K' or 'MN'")


@attrs.frozen
class SmemTile:
    """An operand tile: `layout(row, k)` is the byte address (relative to the stage base) of element (row, k).

    rows: the MN extent; cols: the K extent; swizzle: span in bytes (0 = none).
    `layout.offset` is non-zero for sub-tiles (K-steps, stages) carved out of a larger tile.
    """

    rows: int
    cols: int
    dtype: str
    major: Major
    swizzle: int
    layout: SwizzledLayout

    @property
    def elem_bytes(self) -> int:
        return element_bytes(self.dtype)

    @property
    def span_bytes(self) -> int:
        """Width in bytes of one column of atoms along the contiguous extent."""
        return self.swizzle if self.swizzle else CORE_ROW_BYTES

    @property
    def span_elems(self) -> int:
        return self.span_bytes // self.elem_bytes

    @property
    def size_bytes(self) -> int:
        return self.rows * self.cols * self.elem_bytes

    @property
    def offset(self) -> int:
        return self.layout.offset

    def __call__(self, row: int, k: int) -> int:
        if not (0 <= row < self.rows and 0 <= k < self.cols):
            raise LayoutError(f"({row}, {k}) is outside the {self.rows}x{self.cols} tile")
        return int(self.layout((row, k)))

    def linear(self, row: int, k: int) -> int:
        """The address before the swizzle (offset + linear layout)."""
        return self.layout.offset + self.layout.layout((row, k))

    def linear_tables(self) -> tuple[list[int], list[int]]:
        """`linear(row, k) == rows[row] + ks[k]`: a layout is a sum over its modes, so two short
        tables evaluate it everywhere (the deciders visit every coordinate)."""
        lay = self.layout.layout
        rows = [self.layout.offset + lay[0](r) for r in range(self.rows)]
        ks = [lay[1](k) for k in range(self.cols)]
        return rows, ks

    def element_layout(self) -> Layout:
        """The unswizzled linear part in elements (every byte stride divided by the element size)."""
        lay = self.layout.layout
        e = self.elem_bytes

        def div(t: object) -> object:
            if isinstance(t, int):
                if t % e:
                    raise LayoutError(f"byte stride {t} is not a whole number of {e}-byte elements")
                return t // e
            assert isinstance(t, tuple)
            return tuple(div(x) for x in t)

        return Layout(lay.shape, div(lay.stride))  # type: ignore[arg-type]

    def sub_tile(self, row0: int, rows: int, k0: int, cols: int) -> "SmemTile":
        """The rows [row0, row0+rows) x [k0, k0+cols) of this tile, as a tile with the parent's function.

        The sub-tile keeps the parent's linear strides; its offset is `linear(row0, k0)`, read off the
        layout. Only whole atoms along the strided extent and whole 16-byte units along the contiguous
        one may be carved out, so the result is again a canonical tile at an offset.
        """
        if rows < 1 or cols < 1 or row0 < 0 or k0 < 0 or row0 + rows > self.rows or k0 + cols > self.cols:
            raise LayoutError(
                f"sub-tile rows [{row0},{row0 + rows}) x k [{k0},{k0 + cols}) is outside the {self.rows}x{self.cols} tile"
            )
        strided0, strided_n, contig0, contig_n = (row0, rows, k0, cols) if self.major == "K" else (k0, cols, row0, rows)
        t = CORE_ROW_BYTES // self.elem_bytes
        if strided0 % CORE_ROWS or strided_n % CORE_ROWS:
            raise LayoutError(f"a sub-tile must start and end on 8-row atom boundaries, not [{strided0},{strided0 + strided_n})")
        if contig0 % t or contig_n % t:
            raise LayoutError(f"a sub-tile must start and end on 16-byte boundaries of the contiguous extent, not [{contig0},{contig0 + contig_n})")
        se = self.span_elems
        within_one_column = contig0 % se + contig_n <= se
        whole_columns = contig0 % se == 0 and contig_n % se == 0
        if not (within_one_column or whole_columns):
            raise LayoutError(
                f"contiguous range [{contig0},{contig0 + contig_n}) covers part of a {self.span_bytes}-byte column"
                " and spills into the next"
            )
        off = self.linear(row0, k0)
        sub = _restrict(self.layout.layout, self.major, rows, cols, self.span_elems)
        return SmemTile(rows, cols, self.dtype, self.major, self.swizzle, SwizzledLayout(self.layout.swizzle, sub, off))

    def k_steps(self, k_per_mma: int) -> list["SmemTile"]:
        """The K-steps of one MMA each: sub-tiles of `k_per_mma` K-columns, offsets read off the layout."""
        if k_per_mma < 1 or self.cols % k_per_mma:
            raise LayoutError(f"K extent {self.cols} is not a multiple of the MMA's K = {k_per_mma}")
        return [self.sub_tile(0, self.rows, j * k_per_mma, k_per_mma) for j in range(self.cols // k_per_mma)]

    def k_step_offsets(self, k_per_mma: int) -> list[int]:
        """Byte offsets of the K-steps from the tile's start (what gets added to a descriptor's address)."""
        return [s.offset - self.offset for s in self.k_steps(k_per_mma)]


def _tile_linear(major: Major, rows: int, cols: int, e: int, swizzle: int) -> Layout:
    """The linear (pre-swizzle) byte layout of a canonical rows x cols tile.

    One line of an atom is `span` bytes (the swizzle span, 16 without swizzle) in both majors; 8
    lines make an atom; atoms stack along the strided extent; columns of atoms follow.
    """
    span = swizzle if swizzle else CORE_ROW_BYTES
    se = span // e  # elements per line
    if major == "K":
        return Layout(
            ((CORE_ROWS, rows // CORE_ROWS), (se, cols // se)),
            ((span, CORE_ROWS * span), (e, rows * span)),
        )
    return Layout(
        ((se, rows // se), (CORE_ROWS, cols // CORE_ROWS)),
        ((e, cols * span), (span, CORE_ROWS * span)),
    )


def _restrict(parent: Layout, major: Major, rows: int, cols: int, se: int) -> Layout:
    """The parent's linear layout over a smaller rows x cols box (same strides, fewer repetitions)."""
    assert isinstance(parent.stride, tuple)
    (s_a, s_b) = parent.stride
    assert isinstance(s_a, tuple) and isinstance(s_b, tuple)
    if major == "K":
        nse = min(se, cols)
        return Layout(((CORE_ROWS, rows // CORE_ROWS), (nse, cols // nse)), (s_a, s_b))
    nse = min(se, rows)
    return Layout(((nse, rows // nse), (CORE_ROWS, cols // CORE_ROWS)), (s_a, s_b))


def smem_tile(rows: int, cols: int, dtype: str, major: str = "K", swizzle: int = 128) -> SmemTile:
    """The canonical swizzled byte layout of a rows (MN) x cols (K) operand tile at offset 0.

    Raises LayoutError when the extents are not whole atoms: the strided extent must be a multiple
    of 8, the contiguous extent a multiple of the swizzle span in elements (16 bytes without swizzle).
    """
    d = canonical_dtype(dtype)
    e = element_bytes(d)
    mj = _check_major(major)
    sw = swizzle_for_span(swizzle)
    if rows < 1 or cols < 1:
        raise LayoutError(f"tile extents must be positive, not {rows}x{cols}")
    span = swizzle if swizzle else CORE_ROW_BYTES
    se = span // e
    strided, contig = (rows, cols) if mj == "K" else (cols, rows)
    sname, cname = ("rows (MN)", "cols (K)") if mj == "K" else ("cols (K)", "rows (MN)")
    if strided % CORE_ROWS:
        raise LayoutError(f"{mj}-major tile: {sname} = {strided} is not a multiple of {CORE_ROWS}")
    if contig % se:
        what = f"the {swizzle}-byte swizzle span" if swizzle else "16 bytes"
        raise LayoutError(f"{mj}-major {d} tile: {cname} = {contig} is not a multiple of {se} elements ({what})")
    lin = _tile_linear(mj, rows, cols, e, swizzle)
    return SmemTile(rows, cols, d, mj, swizzle, SwizzledLayout(sw, lin, 0))


@attrs.frozen
class SmemRing:
    """`depth` stages of one tile shape, `stage_bytes` apart: `ring(row, k, stage)` is a byte address."""

    tile: SmemTile
    depth: int
    stage_bytes: int

    def __call__(self, row: int, k: int, stage: int) -> int:
        return self.stage(stage)(row, k)

    def stage(self, s: int) -> SmemTile:
        if not 0 <= s < self.depth:
            raise LayoutError(f"stage {s} is outside a ring of depth {self.depth}")
        t = self.tile
        lay = SwizzledLayout(t.layout.swizzle, t.layout.layout, t.layout.offset + s * self.stage_bytes)
        return SmemTile(t.rows, t.cols, t.dtype, t.major, t.swizzle, lay)

    @property
    def layout(self) -> Layout:
        """The linear part with the stage as a third mode (pre-swizzle; the swizzle is the tile's)."""
        lin = self.tile.layout.layout
        assert isinstance(lin.shape, tuple) and isinstance(lin.stride, tuple)
        return Layout(lin.shape + (self.depth,), lin.stride + (self.stage_bytes,))

    @property
    def size_bytes(self) -> int:
        return self.depth * self.stage_bytes


def smem_ring(tile: SmemTile, depth: int, align: int = 1024) -> SmemRing:
    """A ring of `depth` stages; each stage starts on an `align`-byte boundary (at least the swizzle repeat)."""
    if depth < 1:
        raise LayoutError(f"a ring needs depth >= 1, not {depth}")
    rep = repeat_bytes(tile.swizzle)
    if align % rep:
        raise LayoutError(f"stage alignment {align} is not a multiple of the swizzle repeat ({rep} bytes)")
    stage = -(-tile.size_bytes // align) * align
    return SmemRing(tile, depth, stage)


__all__ = [
    "SmemTile",
    "SmemRing",
    "smem_tile",
    "smem_ring",
    "swizzle_for_span",
    "span_of_swizzle",
    "repeat_bytes",
    "element_bytes",
    "canonical_dtype",
]
