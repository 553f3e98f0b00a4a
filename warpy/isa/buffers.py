"""Buffers, the operands they make, tensor maps and parameters.

A buffer is declared memory with a layout (coordinates -> bytes from its base). An operand that is
a buffer at coordinates (`Tile`, `Barrier`, `TmemRef`) never carries a hand-written address: the
derivation (`warpy.isa.derive`) computes it from the layout. The declarations themselves (placing
buffers in shared memory, the header's `.buffer`, `.tmap` and `.param` lines) are the Program's.
"""

from __future__ import annotations

import re
from typing import Callable, Optional, Sequence, Union

import attrs

from warpy.errors import WarpyError
from warpy.isa.index import Coord, Ix, as_ix
from warpy.isa.instr import Note
from warpy.isa.operands import CBank
from warpy.isa.text import BufferDecl
from warpy.layout import Layout, LayoutError, SwizzledLayout
from warpy.layout.inttuple import product
from warpy.layout.smem import span_of_swizzle
from warpy.layout.tma import TmaBox

BufLayout = Union[Layout, SwizzledLayout]


class Buffer:
    """A declared buffer: name, space, base, size, layout (coordinates -> bytes from base)."""

    space = "smem"

    def __init__(self, name: str, base: int, size: int, layout: BufLayout, elem: Optional[str], source: Optional[str] = None) -> None:
        self.name = name
        self.base = base
        self.size = size
        self.layout = layout
        self.elem = elem
        self.source = source

    def linear(self) -> Layout:
        """The layout without its swizzle."""
        return self.layout.layout if isinstance(self.layout, SwizzledLayout) else self.layout

    def rank(self) -> int:
        return self.linear().rank()

    def shape(self) -> tuple[int, ...]:
        sh = self.linear().shape
        return tuple(product(s) for s in sh) if isinstance(sh, tuple) else (sh,)

    def swizzle_span(self) -> int:
        """The bytes a row of the buffer's tensor-core swizzle spans (0: not swizzled)."""
        if not isinstance(self.layout, SwizzledLayout):
            return 0
        sw = self.layout.swizzle
        try:
            return span_of_swizzle(sw)
        except LayoutError:
            raise WarpyError(f"swizzle {sw} is not a tensor-core swizzle (Sw<B,4,3>)") from None

    def decl(self) -> BufferDecl:
        return BufferDecl(self.name, self.space, self.base, self.size, self.layout, self.elem, self.source)

    def offset(self, coords: Sequence[int]) -> int:
        if len(coords) != self.rank():
            raise WarpyError(f"{self.name} has {self.rank()} coordinates, not {len(coords)}")
        for c, e in zip(coords, self.shape()):
            if not 0 <= c < e:
                raise WarpyError(f"coordinate {c} of {self.name} is outside 0..{e - 1}")
        return int(self.layout(*coords) if len(coords) > 1 else self.layout(coords[0]))

    def _coords(self, coords: Sequence[Coord]) -> tuple[Ix, ...]:
        if len(coords) != self.rank():
            raise WarpyError(f"{self.name} takes {self.rank()} coordinates, got {len(coords)}")
        return tuple(as_ix(c) for c in coords)

    def origin(self) -> "Ref":
        """The buffer at coordinates all zero."""
        return Ref(self, tuple(Ix(0) for _ in range(self.rank())))


@attrs.frozen
class Ref:
    buffer: Buffer = attrs.field(eq=False)
    coords: tuple[Ix, ...]

    def note(self, form: str = "addr", operand: int = 0) -> Note:
        return Note(self.buffer.name, tuple(c.affine() for c in self.coords), form, operand)


@attrs.frozen
class Tile(Ref):
    """An operand tile: a shared-memory buffer at coordinates (its origin)."""


@attrs.frozen
class Barrier(Ref):
    """An mbarrier: a barrier array at coordinates."""


@attrs.frozen
class TmemRef(Ref):
    """Tensor memory at coordinates (an accumulator's origin)."""


class SmemBuffer(Buffer):
    space = "smem"

    def at(self, *coords: Coord) -> Tile:
        return Tile(self, self._coords(coords))


class TileRing(SmemBuffer):
    """A ring of `depth` operand tiles: coordinates (stage, row, k)."""

    def __init__(self, name: str, base: int, depth: int, tile: BufLayout, elem: str) -> None:
        inner = tile.layout if isinstance(tile, SwizzledLayout) else tile
        stage_bytes = round_up(inner.cosize(), 1024)
        sh = inner.shape if isinstance(inner.shape, tuple) else (inner.shape,)
        st = inner.stride if isinstance(inner.stride, tuple) else (inner.stride,)
        ring = Layout((depth,) + sh, (stage_bytes,) + st)
        layout: BufLayout = SwizzledLayout(tile.swizzle, ring) if isinstance(tile, SwizzledLayout) else ring
        super().__init__(name, base, depth * stage_bytes, layout, elem)
        self.depth = depth
        self.stage_bytes = stage_bytes


class BarrierArray(Buffer):
    """An array of mbarriers (8 bytes each), each completing a phase after `count` arrivals."""

    space = "smem"

    def __init__(self, name: str, base: int, shape: tuple[int, ...], count: int) -> None:
        n = 1
        for s in shape:
            n *= s
        strides = []
        acc = 8
        for s in shape:
            strides.append(acc)
            acc *= s
        lay = Layout(shape if len(shape) > 1 else shape[0], tuple(strides) if len(shape) > 1 else strides[0])
        super().__init__(name, base, 8 * n, lay, "mbarrier")
        self.count = count
        self.n = n

    def count_at(self, crd: tuple[int, ...]) -> int:
        """The arrivals that complete a phase of the barrier at `crd`."""
        return self.count

    def at(self, *coords: Coord) -> Barrier:
        return Barrier(self, self._coords(coords))


class TmemBuffer(Buffer):
    space = "tmem"

    def at(self, *coords: Coord) -> TmemRef:
        return TmemRef(self, self._coords(coords))


class GlobalBuffer(Buffer):
    space = "global"


@attrs.frozen
class TensorMap:
    """A tensor map: a kernel parameter, or slot `slot` of the table of maps behind the u64
    parameter `table` (`MapTable`). `over`: another parameter whose memory it views too, `offset`
    bytes in."""

    name: str
    box: TmaBox
    over: Optional[str] = None  # another parameter whose memory this map views too
    table: Optional[str] = None
    slot: Optional[int] = None
    offset: int = 0


class MapTable:
    """A table of tensor maps in global memory behind the u64 parameter `param` (slot k at
    param + 128 k, each 64-byte aligned): the host encodes every slot's map and uploads the table
    (`warpy.runtime.bind`); an instruction names a slot's descriptor by its address in a uniform
    register pair (`tmap[desc]`). Declared by `Program.map_table`; `add` declares the next slot."""

    STRIDE = 128

    def __init__(self, add: "Callable[[str, TmaBox, Optional[str], int], TensorMap]", param: Param) -> None:
        self._add = add
        self.param = param
        self.slots: list[TensorMap] = []

    def add(self, name: str, box: TmaBox, over: Optional[str] = None, offset: int = 0) -> TensorMap:
        t = self._add(name, box, over, offset)
        self.slots.append(t)
        return t


@attrs.frozen
class Param:
    name: str
    type: str
    scratch: bool = False  # host-owned zero-initialised memory (Program.scratch)

    def cbank(self) -> CBank:
        return CBank(0, self.name)


def check_ident(name: str, what: str) -> None:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise WarpyError(f"{what} name {name!r} is not an identifier")


def round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a
