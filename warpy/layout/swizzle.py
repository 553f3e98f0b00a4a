"""Swizzles: CuTe's Swizzle<B,M,S> as a function on offsets, and swizzled physical layouts."""

from __future__ import annotations

import attrs

from warpy.layout.core import Layout, LayoutError


@attrs.frozen
class Swizzle:
    """`x ^ ((x & (mask << (M + S))) >> S)` with `mask = (1 << B) - 1` (CuTe's Swizzle<B,M,S>)."""

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

    def __call__(self, x: int) -> int:
        if self.bits == 0:
            return x
        mask = ((1 << self.bits) - 1) << (self.base + max(0, self.shift))
        y = x & mask
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
    def shape(self):  # type: ignore[no-untyped-def]
        return self.layout.shape

    def __call__(self, *crd):  # type: ignore[no-untyped-def]
        return self.swizzle(self.offset + self.layout(*crd))

    def size(self) -> int:
        return self.layout.size()

    def cosize(self) -> int:
        return self.layout.cosize()

    def __str__(self) -> str:
        off = f"+{self.offset}" if self.offset else ""
        return f"{self.swizzle} o {off}{self.layout}"
