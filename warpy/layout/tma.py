"""The parameters of a TMA tensor map: everything `cuTensorMapEncodeTiled` needs, as pure data.

`warpy.layout.desc.tma_box` derives one from a global layout and a shared-memory tile; the SASS
text carries it as a `.tmap` header line; `warpy.runtime` encodes it. All three use this record.
"""

from __future__ import annotations

import attrs

from warpy.layout.core import LayoutError
from warpy.layout.dtype import canonical, dtype_bytes

SWIZZLES = (0, 32, 64, 128)
INTERLEAVES = (0, 16, 32)
L2_PROMOTIONS = (0, 64, 128, 256)
OOB_FILLS = ("zero", "nan")


def store_clips_exactly(row_bytes: int) -> bool:
    """Whether a TMA store (or reduce-add) through a map whose innermost extent is `row_bytes`
    bytes writes nothing past it. The engine clips a store's box at the tensor's edges, but along
    the innermost dimension only to 16 bytes: a box reaching the end of a row that is not a whole
    number of 16 bytes writes the row's last 16 bytes whole, into the bytes after it. Seen on the
    H200 (2026-12-01): the sm_90a GEMM's TMA stores into a bf16 C of 33 columns, a slice of rows 80
    bytes apart, left 903 = 129 rows x 7 elements wrong or changed, as many as the gap columns 33..39
    hold. Not asked of loads: warpy's GEMM operands' rows are whole 16 bytes."""
    return row_bytes % 16 == 0


@attrs.frozen
class TmaBox:
    """A tiled tensor map. Dimension 0 is the innermost (contiguous) one, as in the driver API.

    dims: global extents in elements; strides: byte strides of dims 1..rank-1; box: the box each
    copy moves (per CTA, after multicast slicing); elem_strides: traversal strides; swizzle and
    l2_promotion in bytes (0 = none); interleave 0/16/32 (0 = none); oob_fill "zero" or "nan".
    """

    dtype: str = attrs.field(converter=canonical)
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: int = 0
    elem_strides: tuple[int, ...] = ()
    interleave: int = 0
    oob_fill: str = "zero"
    l2_promotion: int = 0

    def __attrs_post_init__(self) -> None:
        esz = dtype_bytes(self.dtype)
        r = len(self.dims)
        if not 1 <= r <= 5:
            raise LayoutError(f"a tensor map has rank 1..5, not {r}")
        if len(self.strides) != r - 1:
            raise LayoutError(f"a rank-{r} tensor map needs {r - 1} byte strides, got {len(self.strides)}")
        if len(self.box) != r:
            raise LayoutError(f"a rank-{r} tensor map needs {r} box extents, got {len(self.box)}")
        if self.elem_strides and len(self.elem_strides) != r:
            raise LayoutError(f"a rank-{r} tensor map needs {r} element strides, got {len(self.elem_strides)}")
        for d in self.dims:
            if not 1 <= d <= 1 << 32:
                raise LayoutError(f"global extent {d} is outside 1..2^32")
        for s in self.strides:
            if s % 16 or not 0 < s < 1 << 40:
                raise LayoutError(f"global stride {s} bytes is not a positive multiple of 16 below 2^40")
        for b in self.box:
            if not 1 <= b <= 256:
                raise LayoutError(f"box extent {b} is outside 1..256")
        for e in self.elem_strides:
            if not 1 <= e <= 8:
                raise LayoutError(f"element stride {e} is outside 1..8")
        if self.swizzle not in SWIZZLES:
            raise LayoutError(f"swizzle {self.swizzle} is not one of {SWIZZLES} bytes")
        if self.interleave not in INTERLEAVES:
            raise LayoutError(f"interleave {self.interleave} is not one of {INTERLEAVES}")
        if self.oob_fill not in OOB_FILLS:
            raise LayoutError(f"OOB fill {self.oob_fill!r} is not one of {OOB_FILLS}")
        if self.l2_promotion not in L2_PROMOTIONS:
            raise LayoutError(f"L2 promotion {self.l2_promotion} is not one of {L2_PROMOTIONS} bytes")
        inner = self.box[0] * esz
        if self.interleave == 0 and inner % 16:
            raise LayoutError(f"the inner box extent is {inner} bytes, not a multiple of 16")
        if self.swizzle and self.interleave == 0 and inner > self.swizzle:
            raise LayoutError(
                f"the inner box extent is {inner} bytes, more than the {self.swizzle}-byte swizzle span"
            )

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def elem_bytes(self) -> int:
        return dtype_bytes(self.dtype)

    @property
    def stores_exactly(self) -> bool:
        """Whether a store through this map writes only the tensor's elements (`store_clips_exactly`)."""
        return store_clips_exactly(self.dims[0] * self.elem_bytes)

    @property
    def box_bytes(self) -> int:
        """Bytes one copy of the box moves into shared memory (the expect_tx count)."""
        n = self.elem_bytes
        for b in self.box:
            n *= b
        return n

    @property
    def element_strides(self) -> tuple[int, ...]:
        return self.elem_strides or (1,) * self.rank
