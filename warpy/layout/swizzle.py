"""Swizzles: CuTe's Swizzle<B,M,S> as a function on offsets, swizzled physical layouts, and the
three shared-memory swizzle atoms (32, 64 and 128 bytes) of TMA, GMMA and UMMA.
"""

from __future__ import annotations

import attrs

from warpy.layout.core import Layout, LayoutError
from warpy.layout.inttuple import IntTuple


@attrs.frozen
class Swizzle:
    """`x ^ ((x & (mask << (M + S))) >> S)` with `mask = (1 << B) - 1` (CuTe's Swizzle<B,M,S>).

    B bits of the offset, taken S bits above bit M, are XORed into bits M.. (S < 0 moves them
    the other way). With |S| >= B the two bit ranges do not overlap, so a swizzle is an involution.
    """

    bits: int
    base: int
    shift: int

    def __attrs_post_init__(self) -> None:
        if self.bits < 0 or self.base < 0:
            raise LayoutError(f"Swizzle({self.bits},{self.base},{self.shift}): B and M must be >= 0")
        if abs(self.shift) < self.bits:
            raise LayoutError(
                f"Swizzle({self.bits},{self.base},{self.shift}): |S| must be >= B so the masks do not overlap"
            )

    @property
    def source_mask(self) -> int:
        """The bits that are read (and XORed, shifted by S, into `target_mask`)."""
        return ((1 << self.bits) - 1) << (self.base + max(0, self.shift))

    @property
    def target_mask(self) -> int:
        return ((1 << self.bits) - 1) << (self.base - min(0, self.shift))

    def __call__(self, x: int) -> int:
        if self.bits == 0:
            return x
        y = x & self.source_mask
        return x ^ (y >> self.shift if self.shift >= 0 else y << -self.shift)

    def __str__(self) -> str:
        return f"Sw<{self.bits},{self.base},{self.shift}>"


@attrs.frozen
class SwizzledLayout:
    """A physical layout followed by a swizzle of its offsets: `swizzle(offset + layout(c))`.

    `offset` is the base the swizzle sees (an address), so that a sub-tile of a swizzled tile stays
    exactly the parent's function restricted to its coordinates.
    """

    swizzle: Swizzle
    layout: Layout
    offset: int = 0

    @property
    def shape(self) -> IntTuple:
        return self.layout.shape

    def __call__(self, *crd: IntTuple) -> int:
        return self.swizzle(self.offset + self.layout(*crd))

    def size(self) -> int:
        return self.layout.size()

    def cosize(self) -> int:
        return self.layout.cosize()

    def rank(self) -> int:
        return self.layout.rank()

    def values(self) -> list[int]:
        return [self(i) for i in range(self.size())]

    def __str__(self) -> str:
        off = f"+{self.offset}" if self.offset else ""
        return f"{self.swizzle} o {off}{self.layout}"


# --- the shared-memory swizzle atoms -------------------------------------------------------
#
# On byte addresses the hardware swizzles 16-byte chunks (M = 4) within a W-byte row by the row
# index modulo 8 (S = 3): W = 32, 64, 128 bytes for B = 1, 2, 3. One atom is 8 rows of W bytes.

SW32 = Swizzle(1, 4, 3)
SW64 = Swizzle(2, 4, 3)
SW128 = Swizzle(3, 4, 3)

#: K-major atoms in bytes: (row, byte) -> swizzled byte offset; 8 rows of 32/64/128 bytes.
SW32_ATOM = SwizzledLayout(SW32, Layout((8, 32), (32, 1)))
SW64_ATOM = SwizzledLayout(SW64, Layout((8, 64), (64, 1)))
SW128_ATOM = SwizzledLayout(SW128, Layout((8, 128), (128, 1)))

SWIZZLE_ATOMS: dict[int, SwizzledLayout] = {32: SW32_ATOM, 64: SW64_ATOM, 128: SW128_ATOM}

_SWIZZLE_BITS = {32: 1, 64: 2, 128: 3}
_ELEMENT_BYTES = (1, 2, 4, 8, 16)


def _check_swizzle_args(span_bytes: int, elem_bytes: int) -> None:
    if span_bytes not in _SWIZZLE_BITS:
        raise LayoutError(f"swizzle span {span_bytes} is not one of 32, 64, 128 bytes")
    if elem_bytes not in _ELEMENT_BYTES:
        raise LayoutError(f"element size {elem_bytes} bytes is not one of {_ELEMENT_BYTES}")


def swizzle_bytes(span_bytes: int) -> Swizzle:
    """The swizzle of a span on byte addresses (Sw<1,4,3>, Sw<2,4,3>, Sw<3,4,3>)."""
    _check_swizzle_args(span_bytes, 1)
    return Swizzle(_SWIZZLE_BITS[span_bytes], 4, 3)


def swizzle_elements(span_bytes: int, elem_bytes: int) -> Swizzle:
    """The same swizzle on element offsets: `elem_bytes * sw_e(e) == sw_bytes(elem_bytes * e)`."""
    _check_swizzle_args(span_bytes, elem_bytes)
    return Swizzle(_SWIZZLE_BITS[span_bytes], 4 - (elem_bytes.bit_length() - 1), 3)


def swizzle_atom(span_bytes: int, elem_bytes: int = 1, major: str = "K") -> SwizzledLayout:
    """One swizzle atom in elements of `elem_bytes` bytes.

    K-major: (8 rows, W/elem_bytes elements) with the elements contiguous; MN-major: the transpose
    arrangement (W/elem_bytes contiguous MN elements, 8 K rows W bytes apart), as CUTLASS's
    `Layout_{K,MN}_SW{32,64,128}_Atom`.
    """
    _check_swizzle_args(span_bytes, elem_bytes)
    width = span_bytes // elem_bytes
    if width < 1:
        raise LayoutError(f"a {elem_bytes}-byte element is wider than the {span_bytes}-byte swizzle span")
    sw = swizzle_elements(span_bytes, elem_bytes)
    if major == "K":
        return SwizzledLayout(sw, Layout((8, width), (width, 1)))
    if major == "MN":
        return SwizzledLayout(sw, Layout((width, 8), (1, width)))
    raise LayoutError(f"major must be 'K' or 'MN', not {major!r}")


__all__ = [
    "SW128",
    "SW128_ATOM",
    "SW32",
    "SW32_ATOM",
    "SW64",
    "SW64_ATOM",
    "SWIZZLE_ATOMS",
    "Swizzle",
    "SwizzledLayout",
    "swizzle_atom",
    "swizzle_bytes",
    "swizzle_elements",
]
