"""The `Program` builder: registers by name, labels, loops over counters and rings, warp roles,
buffers with layouts, pipes, and the addresses derived from them.

A program is written one instruction a statement (`p.emit(alu.iadd3(k, k, 1))`) plus structured
helpers (`p.loop`, `p.role`, `end.stage()`, `p.wait`, `p.tma_load`, `p.hgmma`, `p.utchmma`). An
operand that is a buffer at coordinates (`Tile`, `Barrier`, `TmemRef`) never carries a hand-written
address: the program derives it from the buffer's layout, as DESIGN.md says:

- a value of fixed indices is set once, at the top of the role (or program) that uses it;
- a value affine in a loop counter is an induction: set before the loop, stepped at its end;
- a value of a ring position is one multiply-add at the top of the ring's iteration, ahead of the wait.

Derived lines are marked `+` and noted with what they hold (`// addr sa[stage, 0, 0]`); loop and
ring bookkeeping is marked `~`.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Callable, Iterator, Optional, Sequence, Union

import attrs

from warpy.errors import WarpyError
from warpy.isa.families import alu, control, sync, tcgen05, tma, validate, wgmma
from warpy.isa.instr import Affine, Comment, Instr, Label, Line, Note
from warpy.isa.operands import (
    PT,
    RZ,
    UPT,
    CBank,
    LabelRef,
    Mem,
    P,
    R,
    RVec,
    Sym,
    UP,
    UR,
    URVec,
    check_name,
)
from warpy.isa.text import BufferDecl, Header, Kernel, ParamDecl, RegDecl, TmapDecl
from warpy.layout import Layout, SwizzledLayout
from warpy.layout.desc import SmemDescFields, encode_smem_desc
from warpy.layout.dtype import dtype_bytes
from warpy.layout.tma import TmaBox
from warpy.target import Target, target as target_of

# ----------------------------------------------------------------------------------------
# indices and coordinates


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

    def __init__(self, name: str, extent: int, reg: R) -> None:
        self.name = name
        self.extent = extent
        self.reg = reg

    def reg_name(self) -> str:
        return self.reg.name


class Uniform(Index):
    """A per-CTA (warp-uniform) index: a uniform register the program computed (a CTA's rank in its
    cluster, a slice number), 0..extent-1. Values affine in it are one UIMAD at the point of use."""

    def __init__(self, name: str, extent: int, reg: UR) -> None:
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


# ----------------------------------------------------------------------------------------
# buffers and the operands they make

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

    def rank(self) -> int:
        lay = self.layout.layout if isinstance(self.layout, SwizzledLayout) else self.layout
        return lay.rank()

    def shape(self) -> tuple[int, ...]:
        lay = self.layout.layout if isinstance(self.layout, SwizzledLayout) else self.layout
        from warpy.layout.inttuple import product

        sh = lay.shape
        return tuple(product(s) for s in sh) if isinstance(sh, tuple) else (sh,)

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
        stage_bytes = _round_up(inner.cosize(), 1024)
        sh = inner.shape if isinstance(inner.shape, tuple) else (inner.shape,)
        st = inner.stride if isinstance(inner.stride, tuple) else (inner.stride,)
        ring = Layout((depth,) + sh, (stage_bytes,) + st)
        layout: BufLayout = SwizzledLayout(tile.swizzle, ring) if isinstance(tile, SwizzledLayout) else ring
        super().__init__(name, base, depth * stage_bytes, layout, elem)
        self.depth = depth
        self.stage_bytes = stage_bytes


class BarrierArray(Buffer):
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
    name: str
    box: TmaBox
    over: Optional[str] = None  # another parameter whose memory this map views too


@attrs.frozen
class Param:
    name: str
    type: str
    scratch: bool = False  # host-owned zero-initialised memory (Program.scratch)

    def cbank(self) -> CBank:
        return CBank(0, self.name)


def _check_ident(name: str, what: str) -> None:
    import re

    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise WarpyError(f"{what} name {name!r} is not an identifier")


def _round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


# ----------------------------------------------------------------------------------------
# descriptors: the fields come from the buffer's layout, the bit layout from warpy.layout.desc


def _swizzle_of(layout: BufLayout) -> int:
    if isinstance(layout, SwizzledLayout):
        sw = layout.swizzle
        if sw.bits == 0:
            return 0
        if (sw.base, sw.shift) != (4, 3):
            raise WarpyError(f"swizzle {sw} is not a tensor-core swizzle (Sw<B,4,3>)")
        return {1: 32, 2: 64, 3: 128}[sw.bits]
    return 0


def desc_hi(buf: Buffer, arch: str) -> int:
    """The high word of the smem descriptor of a K-major tile of `buf` (coordinates end in row, k).

    SBO is the distance between rows 0 and 8 (one 8-row group) in the unswizzled layout."""
    lay = buf.layout.layout if isinstance(buf.layout, SwizzledLayout) else buf.layout
    r = lay.rank()
    if r < 2:
        raise WarpyError(f"{buf.name}: a descriptor needs a (row, k) tile")
    rows = buf.shape()[r - 2]
    if rows < 8 or rows % 8:
        raise WarpyError(f"{buf.name}: a descriptor's tile has whole 8-row groups, not {rows} rows")
    zero = [0] * r
    eight = [0] * (r - 2) + [8, 0]
    sbo = int(lay(tuple(eight))) - int(lay(tuple(zero)))
    span = _swizzle_of(buf.layout)
    one = [0] * (r - 2) + [1, 0]
    if span and int(lay(tuple(one))) - int(lay(tuple(zero))) != span:
        raise WarpyError(f"{buf.name}: rows are not {span}-byte swizzle rows of a K-major tile")
    if sbo <= 0 or sbo % 16:
        raise WarpyError(f"{buf.name}: 8-row groups {sbo} bytes apart cannot be a descriptor's SBO")
    # the high word of warpy.layout.desc's encoding (the one place the bit layout lives)
    fields = SmemDescFields(target_of(arch).desc, start=0, lbo=LBO_FIELD << 4, sbo=sbo, swizzle=span)
    return encode_smem_desc(fields) >> 32


LBO_FIELD = 1  # LBO = 16 bytes: unused by swizzled K-major tiles, conventionally 1


# ----------------------------------------------------------------------------------------
# scopes and slots


class Slot:
    """A place in the line list where derived lines are inserted later."""

    def __init__(self) -> None:
        self.lines: list[Instr] = []


class Scope:
    def __init__(self, kind: str, top: Slot, pre: Optional[Slot] = None, step: Optional[Slot] = None,
                 index: Optional[Index] = None, role: str = "") -> None:
        self.kind = kind
        self.top = top
        self.pre = pre
        self.step = step
        self.index = index
        self.role = role
        self.memo: dict[object, UR] = {}


# ----------------------------------------------------------------------------------------
# pipes


class Pipe:
    """A ring of `depth` stages, each with a full and an empty mbarrier (one buffer, `[0, s]` full,
    `[1, s]` empty). `fills`: arrivals that fill a stage; `frees`: arrivals that free one."""

    def __init__(self, prog: "Program", name: str, depth: int, fills: int, frees: int) -> None:
        self.prog = prog
        self.name = name
        self.depth = depth
        self.bars = prog._barrier_buffer(f"{name}_bars", (2, depth), count=0)
        self.fills = fills
        self.frees = frees

    def producer(self, name: str = "") -> "ProducerEnd":
        return ProducerEnd(self, self.prog.ring(name or f"{self.name}_p", self.depth, parity=1))

    def consumer(self, name: str = "") -> "ConsumerEnd":
        return ConsumerEnd(self, self.prog.ring(name or f"{self.name}_c", self.depth, parity=0))


class _End:
    def __init__(self, pipe: Pipe, ring: Ring) -> None:
        self.pipe = pipe
        self.ring = ring
        self._probe: Optional[P] = None

    def _waited_bar(self) -> Barrier:
        raise NotImplementedError

    @property
    def full(self) -> Barrier:
        return self.pipe.bars.at(0, self.ring)

    @property
    def empty(self) -> Barrier:
        return self.pipe.bars.at(1, self.ring)

    def slot(self, ring_buffer: TileRing, *coords: Coord) -> Tile:
        """The tile of `ring_buffer` at this end's stage (and the given row, k)."""
        rest = tuple(coords) if coords else (0,) * (ring_buffer.rank() - 1)
        return ring_buffer.at(self.ring, *rest)

    @contextlib.contextmanager
    def stage(self, probe: Optional[P] = None, probe_when: Optional[P] = None) -> Iterator[None]:
        """One stage of the ring: derived values at the top, the ring advanced at the end.

        probe: ask a stage ahead (the seed's "asking a stage ahead"): after the advance, test the
        next stage's barrier into `probe` (where `probe_when` holds), and let this end's next wait
        skip its loop when the probe saw the phase complete. `probe` must start false
        (`alu.pset(probe, False)` before the loop)."""
        prog = self.pipe.prog
        self._probe = probe
        try:
            with prog.ring_iteration(self.ring):
                yield
        finally:
            self._probe = None
        if probe is not None:
            bar = self._waited_bar()
            reg, off = prog.value_here("addr", bar)
            prog.emit(sync.try_wait(probe, Mem(reg, offset=off), self.ring.parity).noted(bar.note("addr", 1))
                      .guarded(probe_when))


class ProducerEnd(_End):
    """The producer's end: it can only wait for a stage to be empty and fill it."""

    def _waited_bar(self) -> Barrier:
        return self.empty

    def wait_empty(self, sleep: Optional[int] = None) -> None:
        self.pipe.prog.wait(self.empty, self.ring.parity, sleep, ready=self._probe)

    def arrive_full(self, leader: P, tx_bytes: int = 0) -> None:
        """One arrival on the stage's full barrier (by the leader lane), expecting tx_bytes."""
        p = self.pipe.prog
        if tx_bytes:
            txr = p.r("tx_bytes")
            p.emit(alu.mov(txr, tx_bytes))
            p.emit_at(self.full, lambda m: sync.arrive_expect_tx(m, txr), guard=leader)
        else:
            p.emit_at(self.full, lambda m: sync.arrive(m), guard=leader)


class ConsumerEnd(_End):
    """The consumer's end: it can only wait for a stage to be full and free it."""

    def _waited_bar(self) -> Barrier:
        return self.full

    def wait_full(self, sleep: Optional[int] = None) -> None:
        self.pipe.prog.wait(self.full, self.ring.parity, sleep, ready=self._probe)

    def free(self, leader: Optional[P] = None) -> None:
        """One arrival on the stage's empty barrier (this CTA's)."""
        self.pipe.prog.emit_at(self.empty, lambda m: sync.arrive(m), guard=leader)

    def free_remote(self, rank: UR, leader: Optional[P] = None) -> None:
        """One arrival on the empty barrier of the CTA of cluster rank `rank` (mapa + remote arrive)."""
        p = self.pipe.prog
        reg = p.ur("remote_bar")
        base, off = p.value_reg("addr", self.empty)
        p.emit(alu.uiadd3(reg, base, off).noted(self.empty.note()), mark="+")
        p.emit(alu.mapa(reg, rank, reg))
        p.emit(sync.arrive_remote(Mem(reg)).guarded(leader))

    def free_commit(self, mask: Optional[UR] = None, two_cta: bool = False, guard: Optional[UP] = None) -> None:
        """Free the stage when the tensor core has finished the MMAs issued so far (UTCBAR)."""
        self.pipe.prog.emit_at(self.empty, lambda m: tcgen05.utcbar(m, mask, two_cta), guard=guard)


# ----------------------------------------------------------------------------------------
# the program


class Program:
    def __init__(self, name: str, sm: str, threads: int, grid: tuple[int, int, int] = (1, 1, 1),
                 cluster: tuple[int, int, int] = (1, 1, 1), maxnreg: Optional[int] = None) -> None:
        self.target: Target = target_of(sm)
        self.name = name
        self.sm = self.target.name
        self.threads = threads
        self.grid = grid
        self.cluster = cluster
        self.maxnreg = maxnreg
        self.lines: list[Union[Line, Slot]] = []
        self.regs: dict[str, RegDecl] = {}
        self.buffers: list[Buffer] = []
        self.tmaps: list[TensorMap] = []
        self.params: list[Param] = []
        self.smem_top = 0
        self.labels: set[str] = set()
        self._label_n = itertools.count(1)
        top = Slot()
        self.lines.append(top)
        self.scopes: list[Scope] = [Scope("program", top)]
        self._smem: Optional[UR] = None
        self.tmem_base: Optional[UR] = None
        self._hi_set: dict[tuple[str, str, int], int] = {}
        self._hi_first: set[tuple[str, str, int]] = set()
        self._pipes: list[Pipe] = []
        self._barriers_initialised = False

    # -- registers -------------------------------------------------------------------------
    def _declare(self, name: str, kind: str, width: int = 1) -> None:
        check_name(name)
        d = self.regs.get(name)
        if d is not None:
            if (d.kind, d.width) != (kind, width):
                raise WarpyError(f"register {name} is already a {d.kind}[{d.width}], not a {kind}[{width}]")
            return
        self.regs[name] = RegDecl(name, kind, width)

    def r(self, name: str) -> R:
        self._declare(name, "R")
        return R(name)

    def ur(self, name: str) -> UR:
        self._declare(name, "UR")
        return UR(name)

    def p(self, name: str) -> P:
        self._declare(name, "P")
        return P(name)

    def up(self, name: str) -> UP:
        self._declare(name, "UP")
        return UP(name)

    def rvec(self, name: str, width: int) -> RVec:
        self._declare(name, "R", width)
        return RVec(name, width)

    def urvec(self, name: str, width: int) -> URVec:
        self._declare(name, "UR", width)
        return URVec(name, width)

    # -- declarations ----------------------------------------------------------------------
    def _place(self, size: int, align: int) -> int:
        base = _round_up(self.smem_top, align)
        self.smem_top = base + size
        return base

    def smem(self, name: str, layout: BufLayout, elem: str) -> SmemBuffer:
        from warpy.layout.dtype import DTYPES

        ebytes = dtype_bytes(elem) if elem in DTYPES else 1
        inner = layout.layout if isinstance(layout, SwizzledLayout) else layout
        size = _round_up(inner.cosize() - 1 + ebytes, 16)
        b = SmemBuffer(name, self._place(size, 1024 if isinstance(layout, SwizzledLayout) else 16), size, layout, elem)
        self.buffers.append(b)
        return b

    def smem_ring(self, name: str, depth: int, tile: BufLayout, elem: str) -> TileRing:
        b = TileRing(name, 0, depth, tile, elem)
        b.base = self._place(b.size, 1024)
        self.buffers.append(b)
        return b

    def _barrier_buffer(self, name: str, shape: tuple[int, ...], count: int) -> BarrierArray:
        if self._barriers_initialised:
            raise WarpyError(f"barrier array {name} is declared after init_barriers(); declare every barrier and pipe first")
        b = BarrierArray(name, 0, shape, count)
        b.base = self._place(b.size, 8)
        self.buffers.append(b)
        return b

    def barriers(self, name: str, n: int, count: int = 1) -> BarrierArray:
        """An array of n mbarriers, each completing a phase after `count` arrivals."""
        return self._barrier_buffer(name, (n,), count)

    def smem_words(self, name: str, n: int, elem: str = "u32") -> SmemBuffer:
        size = {"u32": 4, "b128": 16}[elem]
        b = SmemBuffer(name, self._place(n * size, 16), n * size, Layout(n, size), elem)
        self.buffers.append(b)
        return b

    def tmem(self, name: str, layout: Layout, cols: int, elem: str = "fp32", base: int = 0) -> TmemBuffer:
        b = TmemBuffer(name, base, cols, layout, elem)
        self.buffers.append(b)
        return b

    def global_buffer(self, name: str, layout: Layout, elem: str, source: str) -> GlobalBuffer:
        """A global buffer behind a `.param` pointer or a `.tmap` (declared so that the checker knows
        its extent; global addresses are the program's own arithmetic, not derived)."""
        if source not in {t.name for t in self.tmaps} | {q.name for q in self.params}:
            raise WarpyError(f"global buffer {name}: {source} is no .param or .tmap of this program")
        b = GlobalBuffer(name, 0, layout.cosize() - 1 + dtype_bytes(elem), layout, elem, source)
        self.buffers.append(b)
        return b

    def tmap(self, name: str, box: TmaBox, over: Optional[str] = None) -> TensorMap:
        """A tensor map parameter. `over`: a parameter (pointer or map) declared before, whose
        memory this map views too (the host binds it to that memory; the checker aliases them)."""
        _check_ident(name, "tensor map")
        if over is not None and over not in {t.name for t in self.tmaps} | {q.name for q in self.params}:
            raise WarpyError(f"tensor map {name}: {over} is no .param or .tmap declared before it")
        t = TensorMap(name, box, over)
        self.tmaps.append(t)
        return t

    def param(self, name: str, type_: str = "u64") -> Param:
        _check_ident(name, "parameter")
        p_ = Param(name, type_)
        self.params.append(p_)
        return p_

    def scratch(self, param: str, buffer: str, layout: Layout, elem: str) -> tuple[Param, GlobalBuffer]:
        """A scratch pointer `param` (`.param NAME u64 scratch`) and the global buffer `buffer`
        behind it (`layout`: coordinates -> bytes, of `elem`).

        Scratch is device memory the host owns: it allocates it once per loaded kernel and per CUDA
        stream the kernel is launched on, zero-filled at allocation, and never clears it again. So a
        program using it must leave it as it found it (a flag reset to zero by its consumer) or keep
        its own epochs in it (a launch counter it compares against). Its size is the extent of the
        buffers declared behind the parameter (`Header.scratch_params`); declare more buffers behind
        it with `global_buffer(..., source=param)`. Launches on one stream run one after another, so
        two launches never use it at once (launches on two streams get two copies); a kernel launched
        with programmatic dependent launch touches it only after its `griddepcontrol.wait`."""
        p_ = self.param(param, "u64")
        self.params[-1] = p_ = attrs.evolve(p_, scratch=True)
        return p_, self.global_buffer(buffer, layout, elem, param)

    def pipe(self, name: str, depth: int, fills: int = 1, frees: int = 1) -> Pipe:
        pp = Pipe(self, name, depth, fills, frees)
        self._pipes.append(pp)
        return pp

    # -- emission --------------------------------------------------------------------------
    def emit(self, i: Instr, mark: Optional[str] = None) -> Instr:
        i = self._arch_form(i)
        if mark is not None:
            i = i.marked(mark)
        validate(i)
        self.lines.append(i)
        return i

    def _arch_form(self, i: Instr) -> Instr:
        # sm_100a prints the carry-out predicates of IADD3/UIADD3; sm_90a does not.
        if i.name in ("IADD3", "UIADD3") and not i.mods:
            t = PT if i.name == "IADD3" else UPT
            if self.target.iadd3_carry_outs and len(i.ops) == 4:
                return attrs.evolve(i, ops=(i.ops[0], t, t) + i.ops[1:])
            if not self.target.iadd3_carry_outs and len(i.ops) == 6:
                return attrs.evolve(i, ops=(i.ops[0],) + i.ops[3:])
        if i.name in ("ULDC", "LDCU"):
            return attrs.evolve(i, name=self.target.const_load)
        return i

    def comment(self, text: str) -> None:
        self.lines.append(Comment(text))

    def fresh_label(self, prefix: str) -> str:
        while True:
            name = f"{prefix}_{next(self._label_n)}"
            if name not in self.labels:
                return name

    def label(self, name: str) -> None:
        if name in self.labels:
            raise WarpyError(f"label {name} is defined twice")
        self.labels.add(name)
        self.lines.append(Label(name))

    # -- structure -------------------------------------------------------------------------
    @property
    def scope(self) -> Scope:
        return self.scopes[-1]

    def _role_scope(self) -> Scope:
        for s in reversed(self.scopes):
            if s.kind in ("role", "program"):
                return s
        return self.scopes[0]

    @contextlib.contextmanager
    def when(self, pred: Union[P, UP]) -> Iterator[None]:
        """A region run only where `pred` holds (a branch around it)."""
        skip = self.fresh_label("SKIP")
        if isinstance(pred, UP):
            self.emit(control.bra_u(~pred, skip))  # a uniform predicate: nvdisasm's BRA.U !UP0, L
        else:
            self.emit(control.bra(skip).guarded(~pred))
        yield
        self.label(skip)

    @contextlib.contextmanager
    def role(self, name: str, warps: range) -> Iterator[None]:
        """Warps `warps` (indices in the CTA) run the body, then exit; the others skip it."""
        warp = self.warp_index()
        inr = self.p("in_role")
        nxt = self.fresh_label(f"NOT_{name.upper()}")
        self.comment(f"role {name}: warps {warps.start}..{warps.stop - 1}")
        self.emit(alu.isetp("GE", inr, warp, warps.start))
        self.emit(alu.isetp("LT", inr, warp, warps.stop, c=inr))
        self.emit(control.bra(nxt).guarded(~inr))
        top = Slot()
        self.lines.append(top)
        self.scopes.append(Scope("role", top, role=name))
        try:
            yield
        finally:
            self.scopes.pop()
        self.emit(control.exit_())
        self.label(nxt)

    def warp_index(self) -> R:
        """The warp's index in the CTA (computed once, in the program's prologue)."""
        if "warp" not in self.regs:
            tid = self.r("tid")
            warp = self.r("warp")
            top = self.scopes[0].top
            top.lines.append(self._arch_form(alu.s2r(tid, "SR_TID.X")))
            top.lines.append(self._arch_form(alu.shf_r(warp, tid, 5)))
        return R("warp")

    @contextlib.contextmanager
    def loop(self, name: str, count: Union[int, R], max_count: int = 256) -> Iterator[Counter]:
        """`for name in range(count)` (count >= 1; an int or a general register holding it): the
        counter is a general register. With a register count, derived values are checked affine for
        counter values below max_count."""
        if isinstance(count, int) and count < 1:
            raise WarpyError(f"loop {name}: count {count} must be at least 1")
        if not isinstance(count, (int, R)):
            raise WarpyError(f"loop {name}: count must be an int or a general register, not {count!r}")
        k = Counter(name, count if isinstance(count, int) else max_count, self.r(name))
        self.emit(alu.mov(k.reg, 0), mark="~")
        pre = Slot()
        self.lines.append(pre)
        head = self.fresh_label(f"LOOP_{name}")
        self.label(head)
        top = Slot()
        self.lines.append(top)
        step = Slot()
        self.scopes.append(Scope("loop", top, pre, step, index=k))
        try:
            yield k
        finally:
            self.scopes.pop()
        self.lines.append(step)
        more = self.p(f"more_{name}")
        self.emit(alu.iadd3(k.reg, k.reg, 1), mark="~")
        self.emit(alu.isetp("LT", more, k.reg, count), mark="~")
        self.emit(control.bra(head).guarded(more), mark="~")

    def ring(self, name: str, depth: int, parity: int = 0) -> Ring:
        """A ring position (stage 0, the given parity), initialised here."""
        rg = Ring(name, depth, self.ur(f"{name}_stage"), self.r(f"{name}_parity"))
        self.emit(alu.umov(rg.stage, 0), mark="~")
        self.emit(alu.mov(rg.parity, parity << 31), mark="~")
        return rg

    @contextlib.contextmanager
    def ring_iteration(self, ring: Ring) -> Iterator[None]:
        top = Slot()
        self.lines.append(top)
        self.scopes.append(Scope("ring", top, index=ring))
        try:
            yield
        finally:
            self.scopes.pop()
        self.advance(ring)

    def advance(self, ring: Ring) -> None:
        """Step a ring: the stage wraps at depth, the parity flips when it does."""
        if not isinstance(ring, Ring):
            raise WarpyError(f"advance takes a ring, not {type(ring).__name__} {getattr(ring, 'name', ring)}")
        if ring.depth == 1:
            self.emit(alu.lop3(ring.parity, ring.parity, 0x80000000, RZ, 0x3C), mark="~")
            return
        stays = self.up(f"{ring.name}_stays")
        stays_p = self.p(f"{ring.name}_stays_p")
        self.emit(alu.uisetp("NE", stays, ring.stage, ring.depth - 1), mark="~")
        self.emit(alu.uiadd3(ring.stage, ring.stage, 1).guarded(stays), mark="~")
        self.emit(alu.uiadd3(ring.stage, ring.stage, -(ring.depth - 1)).guarded(~stays), mark="~")
        self.emit(alu.plop3_mov(stays_p, stays), mark="~")
        self.emit(alu.lop3(ring.parity, ring.parity, 0x80000000, RZ, 0x3C).guarded(~stays_p), mark="~")

    # -- derived values ----------------------------------------------------------------------
    def smem_base(self) -> UR:
        """The shared-memory address of the dynamic shared memory (set in the program's prologue)."""
        if self._smem is None:
            self._smem = self.ur("smem")
            self.scopes[0].top.lines.append(self._arch_form(alu.umov(self._smem, Sym("dsmem"))).marked("+"))
        return self._smem

    def _visible(self, index: Index) -> Scope:
        for s in reversed(self.scopes):
            if s.index is index:
                return s
        raise WarpyError(f"index {index.name} is used outside its loop or ring")

    def _find_memo(self, key: object) -> Optional[UR]:
        for s in reversed(self.scopes):
            if key in s.memo:
                return s.memo[key]
        return None

    def _decompose(self, form: str, ref: Ref) -> tuple[int, dict[int, tuple[Index, int]]]:
        """value(ref) - value(origin) = c0 + sum(coef * index), checked for every index value."""
        buf = ref.buffer
        idxs: dict[int, Index] = {}
        for c in ref.coords:
            for i in c.indices():
                idxs[id(i)] = i

        def val(env: dict[int, int]) -> int:
            off = buf.offset([c.eval(env) for c in ref.coords])
            if form.startswith(("gdesc", "udesc")):
                if off % 16:
                    raise WarpyError(f"{buf.name}: a descriptor start {off:#x} is not 16-byte aligned")
                lin = buf.layout.layout(tuple(c.eval(env) for c in ref.coords)) if isinstance(buf.layout, SwizzledLayout) else off
                if lin != off:
                    raise WarpyError(f"{ref.note(form)}: the tile's origin is not a swizzle-atom row; no descriptor can start there")
                return off >> 4
            return off

        zero = {k: 0 for k in idxs}
        v0 = val(zero)
        coefs: dict[int, tuple[Index, int]] = {}
        for k, i in idxs.items():
            if i.extent > 1:
                coefs[k] = (i, val({**zero, k: 1}) - v0)
            else:
                coefs[k] = (i, 0)
        keys = list(idxs)
        extents = [idxs[k].extent for k in keys]
        total = 1
        for e in extents:
            total *= e
        if total <= 4096:
            combos: Iterator[tuple[int, ...]] = itertools.product(*[range(e) for e in extents])
        else:
            combos = iter([tuple(v if j == i else 0 for j in range(len(keys))) for i in range(len(keys)) for v in range(extents[i])])
        for combo in combos:
            env = dict(zip(keys, combo))
            want = v0 + sum(coefs[k][1] * env[k] for k in keys)
            if val(env) != want:
                raise WarpyError(
                    f"{ref.note(form)} is not affine in {', '.join(i.name for i in idxs.values())} "
                    f"(at {dict((idxs[k].name, v) for k, v in env.items())}); its address cannot be derived by multiply-adds"
                )
        return v0, coefs

    def _buffer_base(self, form: str, buf: Buffer) -> UR:
        """A register holding form(buffer origin), set once at the top of the role."""
        key = ("base", form, buf.name)
        found = self._find_memo(key)
        if found is not None:
            return found
        scope = self._role_scope()
        origin = Ref(buf, tuple(Ix(0) for _ in range(buf.rank())))
        lines: list[Instr] = []
        if buf.space == "tmem":
            if self.tmem_base is None:
                raise WarpyError(f"{buf.name} is in tensor memory: set Program.tmem_base to the allocation's register first")
            if buf.base == 0:
                reg = self.tmem_base
            else:
                reg = self.ur(f"{buf.name}_base")
                lines.append(alu.uiadd3(reg, self.tmem_base, buf.base).noted(origin.note()))
        elif form == "addr":
            smem = self.smem_base()
            reg = self.ur(f"{buf.name}_base")
            lines.append(alu.uiadd3(reg, smem, buf.base).noted(origin.note()))
        else:
            addr = self._buffer_base("addr", buf)
            reg = self.ur(f"{buf.name}_{form.split('.')[0]}")
            lines.append(alu.ushf_r(reg, addr, 4))
            lines.append(alu.uiadd3(reg, reg, LBO_FIELD << 16).noted(origin.note(form)))
        for ln in lines:
            scope.top.lines.append(self._arch_form(ln).marked("+"))
        scope.memo[key] = reg
        return reg

    def lane(self, name: str, reg: R, extent: int) -> Lane:
        """A per-thread coordinate held in `reg` (values 0..extent-1)."""
        if not isinstance(reg, R):
            raise WarpyError(f"lane index {name}: a per-thread value is a general register, not {reg}")
        return Lane(name, extent, reg)

    def uniform(self, name: str, reg: UR, extent: int) -> Uniform:
        """A per-CTA coordinate held in the uniform register `reg` (values 0..extent-1)."""
        if not isinstance(reg, UR):
            raise WarpyError(f"uniform index {name}: a per-CTA value is a uniform register, not {reg}")
        return Uniform(name, extent, reg)

    def lane_value(self, form: str, ref: Ref) -> tuple[Union[R, UR], int]:
        """A register (general when ref has per-thread coordinates) and an immediate whose sum is
        form(ref): the uniform part as value_reg places it, then one IMAD per lane index here."""
        c0, coefs = self._decompose(form, ref)
        lanes = [(i, c) for i, c in coefs.values() if c and isinstance(i, Lane)]
        reg, off = self.value_reg(form, ref, allow_lanes=True)
        if not lanes:
            return reg, off
        dst = self.r(f"{ref.buffer.name}@{'_'.join(i.name for i, _ in lanes)}")
        src: Union[R, UR] = reg
        done = [(i, c) for i, c in coefs.values() if c]
        for n, (lane, c) in enumerate(lanes):
            ln = alu.imad(dst, lane.reg, c, src)
            if n == len(lanes) - 1:
                note = self._exact_note(form, ref, done)
                if note is not None:
                    ln = ln.noted(note)
            self.emit(ln, mark="+")
            src = dst
        return dst, off

    def value_reg(self, form: str, ref: Ref, allow_lanes: bool = False) -> tuple[UR, int]:
        """A uniform register and an immediate whose sum is form(ref), placed as DESIGN.md says
        (per-thread coordinates excluded: allow_lanes says the caller adds them)."""
        c0, coefs = self._decompose(form, ref)
        if not allow_lanes and any(c and isinstance(i, Lane) for i, c in coefs.values()):
            raise WarpyError(f"{ref.note(form)} depends on a per-thread coordinate; it cannot be a uniform value")
        reg = self._buffer_base(form, ref.buffer)
        active = [(i, c) for i, c in coefs.values() if c]
        counters = [(i, c) for i, c in active if isinstance(i, Counter)]
        rings = [(i, c) for i, c in active if isinstance(i, Ring)]
        buf = ref.buffer
        suffix = "" if form == "addr" else "_" + form.split(".")[0]
        done: list[tuple[Index, int]] = []
        # inductions: set before the loop, stepped at its end
        for i, c in counters:
            done.append((i, c))
            key = ("ind", form, buf.name, tuple((id(j), k) for j, k in done))
            found = self._find_memo(key)
            if found is not None:
                reg = found
                continue
            sc = self._visible(i)
            assert sc.pre is not None and sc.step is not None
            new = self.ur(f"{buf.name}{suffix}@{i.name}")
            note = self._exact_note(form, ref, done)
            sc.pre.lines.append(self._arch_form(alu.uiadd3(new, reg, 0)).marked("+"))
            sc.step.lines.append(self._arch_form(alu.uiadd3(new, new, c)).marked("+"))
            if note is not None:
                sc.pre.lines[-1] = sc.pre.lines[-1].noted(note)
            sc.memo[key] = new
            reg = new
        # ring positions: one multiply-add at the top of the iteration
        for ri, c in rings:
            done.append((ri, c))
            key = ("ring", form, buf.name, tuple((id(j), k) for j, k in done))
            found = self._find_memo(key)
            if found is not None:
                reg = found
                continue
            sc = self._visible(ri)
            assert isinstance(ri, Ring)
            new = self.ur(f"{buf.name}{suffix}@{ri.name}")
            ln = alu.uimad(new, ri.stage, c, reg)
            note = self._exact_note(form, ref, done)
            if note is not None:
                ln = ln.noted(note)
            sc.top.lines.append(self._arch_form(ln).marked("+"))
            sc.memo[key] = new
            reg = new
        # per-CTA uniform indices: one multiply-add here, at the point of use
        for ui, c in [(i, c) for i, c in active if isinstance(i, Uniform)]:
            assert isinstance(ui, Uniform)
            done.append((ui, c))
            new = self.ur(f"{buf.name}{suffix}@{ui.name}")
            ln = alu.uimad(new, ui.reg, c, reg)
            note = self._exact_note(form, ref, done)
            self.emit(ln.noted(note) if note is not None else ln, mark="+")
            reg = new
        return reg, c0

    def _exact_note(self, form: str, ref: Ref, done: list[tuple[Index, int]]) -> Optional[Note]:
        """The note of a partial value (origin + the index terms so far), if it is the buffer at
        coordinates: the ref's coordinates keeping only those indices' terms."""
        ids = {id(i) for i, _ in done}
        coords = tuple(Ix(0, tuple((k, i) for k, i in c.terms if id(i) in ids)) for c in ref.coords)
        part = Ref(ref.buffer, coords)
        try:
            c0, coefs = self._decompose(form, part)
        except WarpyError:
            return None
        want = {k: c for k, (_, c) in coefs.items() if c}
        have = {id(i): c for i, c in done if c}
        if c0 != 0 or want != have:
            return None
        return part.note(form)

    def emit_swizzled_at(self, ref: Ref, make: Callable[[Mem], Instr], guard: Union[P, UP, None] = None) -> Instr:
        """Emit an instruction whose memory operand is a swizzled buffer at per-thread coordinates
        (see `swizzled_lane_addr`), noted with the buffer at those coordinates."""
        i = make(self.swizzled_lane_addr(ref))
        k = next(n for n, o in enumerate(i.ops) if isinstance(o, Mem))
        return self.emit(i.noted(ref.note("addr", k)).guarded(guard))

    def swizzled_lane_addr(self, ref: Ref) -> Mem:
        """The address of a swizzled shared-memory buffer at per-thread coordinates (lanes and
        counters), where no multiply-add can express it: the swizzle XORs address bits with other
        address bits of the same thread. The buffer's layout decides both parts: its unswizzled
        layout gives the linear offset (affine in the indices, one IMAD each), its swizzle
        `Sw<B,M,S>` the three ALU lines `t = lin >> S; t &= mask << M; off = lin ^ t`. Exact because
        the buffer's base is a multiple of the swizzle's period (so the swizzle sees the offset's
        bits alone). Marked `+`, noted with the buffer at the coordinates."""
        buf = ref.buffer
        lay = buf.layout
        if not isinstance(lay, SwizzledLayout) or lay.offset:
            raise WarpyError(f"{buf.name}: swizzled_lane_addr needs a swizzled buffer (use lane_value)")
        sw = lay.swizzle
        period = 1 << (sw.bits + sw.base + max(sw.shift, 0))
        if buf.base % period or sw.shift <= 0:
            raise WarpyError(f"{buf.name}: base {buf.base:#x} is not a multiple of the swizzle period {period}")
        inner = lay.layout
        idxs: dict[int, Index] = {}
        for c in ref.coords:
            for i in c.indices():
                if not isinstance(i, (Lane, Counter)):
                    raise WarpyError(f"{buf.name}: per-thread swizzled addresses take lanes and counters, not {i.name}")
                idxs[id(i)] = i

        def lin(env: dict[int, int]) -> int:
            return int(inner(tuple(c.eval(env) for c in ref.coords)))

        zero = {k: 0 for k in idxs}
        c0 = lin(zero)
        coefs = {k: lin({**zero, k: 1}) - c0 for k in idxs}
        for k, i in idxs.items():  # affine in each index over its whole range (the layout is strided)
            for v in range(i.extent):
                if lin({**zero, k: v}) != c0 + coefs[k] * v:
                    raise WarpyError(f"{ref.note()}: the unswizzled offset is not affine in {i.name}")
        off = self.r(f"{buf.name}@lin")
        tmp = self.r(f"{buf.name}@swz")
        src: Union[R, int] = c0
        first = True
        for k, i in idxs.items():
            if coefs[k]:
                assert isinstance(i, (Lane, Counter))
                self.emit(alu.imad(off, i.reg, coefs[k], src if not first else c0), mark="+")
                src, first = off, False
        if first:
            self.emit(alu.mov(off, c0), mark="+")
        self.emit(alu.shf_r(tmp, off, sw.shift), mark="+")
        self.emit(alu.lop3(tmp, tmp, ((1 << sw.bits) - 1) << sw.base, RZ, 0xC0), mark="+")
        self.emit(alu.lop3(off, off, tmp, RZ, 0x3C), mark="+")
        return Mem(off, self._buffer_base("addr", buf), 0)

    def emit_at(self, ref: Ref, make: Callable[[Mem], Instr], guard: Union[P, UP, None] = None) -> Instr:
        """Emit an instruction whose memory operand is ref's address (derived), noted."""
        reg, off = self.lane_value("addr", ref)
        i = make(Mem(reg, offset=off))
        k = next(n for n, o in enumerate(i.ops) if isinstance(o, Mem))
        i = i.noted(ref.note("addr", k)).guarded(guard)
        return self.emit(i)

    def derive_into(self, dst: UR, form: str, ref: Ref) -> None:
        """dst = form(ref): one `+` line at the point of use (the rest is hoisted)."""
        reg, off = self.value_reg(form, ref)
        self.emit(alu.uiadd3(dst, reg, off).noted(ref.note(form)), mark="+")

    # -- sync ---------------------------------------------------------------------------------
    def elect(self, name: str = "leader") -> P:
        p_ = self.p(name)
        self.emit(sync.elect(p_))
        return p_

    def wait(self, bar: Barrier, parity: R, sleep: Optional[int] = None, ready: Optional[P] = None) -> None:
        """Wait until the phase of `parity` (bit 31) of `bar` has completed (a try-wait loop);
        `ready`: a predicate already saying so (a probe), which skips the loop."""
        if not isinstance(bar, Barrier):
            raise WarpyError(f"wait takes a barrier, not {type(bar).__name__} {bar.buffer.name}")
        if not isinstance(parity, R):
            raise WarpyError(f"wait's parity must be a general register, not {parity}")
        waited = self.p("waited")
        reg, off = self.value_reg("addr", bar)
        landed = self.fresh_label("READY") if ready is not None else None
        if ready is not None and landed is not None:
            self.emit(control.bra(landed).guarded(ready))
        top = self.fresh_label("WAIT")
        self.label(top)
        self.emit(sync.try_wait(waited, Mem(reg, offset=off), parity).noted(bar.note("addr", 1)))
        if sleep:
            self.emit(sync.nanosleep(sleep, syncs=True).guarded(~waited), mark="~")
        self.emit(control.bra(top).guarded(~waited), mark="~")
        if landed is not None:
            self.label(landed)

    def value_here(self, form: str, ref: Ref) -> tuple[UR, int]:
        """Like value_reg, but every ring term is one multiply-add here, at the point of use (for a
        ring position outside its iteration: the next stage, after the advance)."""
        c0, coefs = self._decompose(form, ref)
        reg = self._buffer_base(form, ref.buffer)
        suffix = "" if form == "addr" else "_" + form.split(".")[0]
        done: list[tuple[Index, int]] = []
        for i, c in coefs.values():
            if not c:
                continue
            if not isinstance(i, Ring):
                raise WarpyError(f"{ref.note(form)}: only ring positions can be derived outside their scope")
            done.append((i, c))
            new = self.ur(f"{ref.buffer.name}{suffix}@{i.name}_here")
            ln = alu.uimad(new, i.stage, c, reg)
            note = self._exact_note(form, ref, done)
            self.emit(ln.noted(note) if note is not None else ln, mark="+")
            reg = new
        return reg, c0

    def init_barriers(self, cluster_sync: bool = False) -> None:
        """One lane of warp 0 initialises every mbarrier, fences the inits, then the CTA (or the
        cluster) synchronises. Call in the prologue, before any role."""
        self._barriers_initialised = True
        warp = self.warp_index()
        w0 = self.p("is_warp0")
        done = self.fresh_label("INIT_DONE")
        self.emit(alu.isetp("EQ", w0, warp, 0))
        self.emit(control.bra(done).guarded(~w0))
        leader = self.elect("init_leader")
        self.emit(control.bra(done).guarded(~leader))
        init = self.urvec("mbar_init", 2)
        last = None
        for b in self.buffers:
            if not isinstance(b, BarrierArray):
                continue
            counts = self._barrier_counts(b)
            from warpy.layout.inttuple import idx2crd

            for n in range(b.n):
                crd = idx2crd(n, b.layout.shape)
                crd_t: tuple[int, ...] = tuple(int(x) for x in crd) if isinstance(crd, tuple) else (crd,)  # type: ignore[arg-type]
                cnt = counts(crd_t)
                if cnt != last:
                    t = (1 << 20) - cnt
                    self.emit(alu.umov(init[0], (t << 1) & 0xFFFFFFFF))
                    self.emit(alu.umov(init[1], (t << 11) & 0xFFFFFFFF))
                    last = cnt
                self.emit_at(b.at(*crd_t), lambda m: sync.mbar_init(m, init))
        self.emit(sync.fence_mbarrier_init())
        self.label(done)
        if cluster_sync:
            self.emit(sync.cluster_arrive())
            self.emit(sync.cluster_wait())
        else:
            self.emit(sync.bar_sync(0))

    def _barrier_counts(self, b: BarrierArray) -> Callable[[tuple[int, ...]], int]:
        for pp in self._pipes:
            if pp.bars is b:
                return lambda crd: pp.fills if crd[0] == 0 else pp.frees
        return lambda crd: b.count

    # -- memory and tensor-core helpers ---------------------------------------------------------
    def tma_load(self, dst: Tile, tmap: TensorMap, coords: Sequence[Union[int, R, UR, Coord]], bar: Barrier,
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
        self._check_box(dst, tmap)
        args = self.urvec(f"tma_{tmap.name}", 2 + rank)
        self.derive_into(args[0], "addr", dst)
        self.derive_into(args[1], "addr", bar)
        if bar_rank is not None:
            self.emit(alu.mapa(args[1], bar_rank, args[1]))
        for n, c in enumerate(coords):
            self._coord_into(args[2 + n], c)
        self.emit(tma.tma_load(Mem(args), tmap.name, mask, two_cta).guarded(guard))

    def _check_box(self, tile: Tile, tmap: TensorMap) -> None:
        """The box must fit the tile's buffer (a ring: one stage) and be swizzled as it is."""
        buf = tile.buffer
        span = _swizzle_of(buf.layout)
        if tmap.box.swizzle != span:
            raise WarpyError(f"tensor map {tmap.name} swizzles {tmap.box.swizzle} bytes, buffer {buf.name} {span}")
        room = buf.stage_bytes if isinstance(buf, TileRing) else buf.size
        if tmap.box.box_bytes > room:
            raise WarpyError(f"tensor map {tmap.name}'s box is {tmap.box.box_bytes} bytes, more than {buf.name}'s {room}")

    def tma_store(self, src: Tile, tmap: TensorMap, coords: Sequence[Union[int, R, UR, Coord]], reduce_add: bool = False) -> None:
        """Copy the tile `src` to the box of `tmap` at `coords` (or add it there: reduce_add)."""
        self._check_box(src, tmap)
        rank = tmap.box.rank
        args = self.urvec(f"tmas_{tmap.name}", 1 + rank)
        self.derive_into(args[0], "addr", src)
        for n, c in enumerate(coords):
            self._coord_into(args[1 + n], c)
        self.emit(tma.tma_reduce_add(Mem(args), tmap.name) if reduce_add else tma.tma_store(Mem(args), tmap.name))

    def _coord_into(self, dst: UR, c: Union[int, R, UR, Coord]) -> None:
        if isinstance(c, UR):
            self.emit(alu.umov(dst, c))
        elif isinstance(c, R):
            self.emit(alu.r2ur(dst, c))
        else:
            ix = as_ix(c)
            if not ix.terms:
                self.emit(alu.umov(dst, ix.const))
                return
            tmp = self.r("crd")
            first = True
            for k, i in ix.terms:
                if not isinstance(i, Counter):
                    raise WarpyError(f"a TMA coordinate is affine in loop counters, not in {type(i).__name__} {i.name}")
                self.emit(alu.imad(tmp, i.reg, k, ix.const if first else tmp))
                first = False
            self.emit(alu.r2ur(dst, tmp))

    def _hi(self, vec: URVec, elem: int, buf: Buffer, form: str) -> None:
        """Set a descriptor's high word once per role (again only if the buffer changes)."""
        hi = desc_hi(buf, self.sm)
        key = (self._role_scope().role, vec.name, elem)
        if self._hi_set.get(key) == hi:
            return
        self._hi_set[key] = hi
        origin = Ref(buf, tuple(Ix(0) for _ in range(buf.rank())))
        ln = alu.umov(vec[elem], hi).noted(origin.note(form)).marked("+")
        if key in self._hi_first:
            self.emit(ln, mark="+")
        else:
            self._hi_first.add(key)
            self._role_scope().top.lines.append(ln)

    def hgmma(self, acc: RVec, a: Tile, b: Tile, n: int, accumulate: Union[UP, bool], end: bool = False) -> None:
        """acc (+)= A * B for one 64 x n x K step (K = 32 bytes of the operands' type: 16 for bf16/fp16),
        both operands from shared memory; the type modifier comes from the buffers' elem."""
        if self.sm != "sm_90a":
            raise WarpyError("HGMMA is an sm_90a instruction")
        if a.buffer.elem != b.buffer.elem or a.buffer.elem not in wgmma.AB_TYPES:
            raise WarpyError(f"HGMMA operands {a.buffer.name} ({a.buffer.elem}) and {b.buffer.name} ({b.buffer.elem}) "
                             f"must share one of the types {', '.join(wgmma.AB_TYPES)}")
        ab, kstep = wgmma.AB_TYPES[a.buffer.elem or ""]
        descs = self.urvec("gmma_desc", 4)
        self._hi(descs, 1, a.buffer, "gdesc.hi")
        self._hi(descs, 3, b.buffer, "gdesc.hi")
        self.derive_into(descs[0], "gdesc.lo", a)
        self.derive_into(descs[2], "gdesc.lo", b)
        self.emit(wgmma.hgmma(n, acc, descs, accumulate, end, ab=ab, k=kstep))

    def utchmma(self, a: Tile, b: Tile, acc: TmemRef, idesc: int, accumulate: Union[UP, bool],
                two_cta: bool = False, guard: Union[P, UP, None] = None) -> None:
        """D (+)= A * B for one K step of the tensor core (sm_100a)."""
        if self.sm != "sm_100a":
            raise WarpyError("UTCHMMA is an sm_100a instruction")
        if not isinstance(acc, TmemRef):
            raise WarpyError(f"utchmma's accumulator must be tensor memory, not {type(acc).__name__}")
        ad = self.urvec("umma_a", 2)
        bd = self.urvec("umma_b", 2)
        zi = self.urvec("zero_idesc", 2)
        self._hi(ad, 1, a.buffer, "udesc.hi")
        self._hi(bd, 1, b.buffer, "udesc.hi")
        key = (self._role_scope().role, "zero_idesc", idesc)
        if key not in self._hi_first:
            self._hi_first.add(key)
            self._role_scope().top.lines.append(alu.umov(zi[0], 0))
            self._role_scope().top.lines.append(alu.umov(zi[1], idesc))
        self.derive_into(ad[0], "udesc.lo", a)
        self.derive_into(bd[0], "udesc.lo", b)
        treg, toff = self.value_reg("addr", acc)
        if toff:
            t = self.ur("acc_col")
            self.emit(alu.uiadd3(t, treg, toff).noted(acc.note()), mark="+")
            treg = t
        acc_p = accumulate if isinstance(accumulate, UP) else (UPT if accumulate else ~UPT)
        self.emit(tcgen05.utchmma(ad, bd, treg, zi, acc_p, two_cta).guarded(guard))

    # -- output -------------------------------------------------------------------------------
    def _flat(self) -> list[Line]:
        out: list[Line] = []
        for x in self.lines:
            if isinstance(x, Slot):
                out.extend(x.lines)
            else:
                out.append(x)
        return out

    def header(self, with_regs: bool = True) -> Header:
        nbar = sum(b.n for b in self.buffers if isinstance(b, BarrierArray))
        smem_end = max([b.base + b.size for b in self.buffers if b.space == "smem"], default=0)
        used = self._used_regs() if with_regs else set()
        return Header(
            kernel=self.name, sm=self.sm, threads=self.threads, dynsmem=_round_up(smem_end, 1024) if smem_end else 0,
            grid=self.grid, cluster=self.cluster, mbarriers=nbar, maxnreg=self.maxnreg,
            tmaps=tuple(TmapDecl(t.name, t.box, t.over) for t in self.tmaps),
            params=tuple(ParamDecl(p_.name, p_.type, p_.scratch) for p_ in self.params),
            buffers=tuple(b.decl() for b in self.buffers),
            regs=tuple(d for d in self.regs.values() if d.name in used) if with_regs else (),
        )

    def _used_regs(self) -> set[str]:
        used: set[str] = set()
        for x in self._flat():
            if isinstance(x, Instr):
                for r_ in x.regs():
                    used.add(r_.name.split(".", 1)[0])
                for n in x.notes:
                    used.update(nm.split(".", 1)[0] for nm in n.names())
        return used

    def kernel(self) -> Kernel:
        """The named form (what `warpy expand` prints)."""
        lines = self._flat()
        for x in lines:
            if isinstance(x, Instr):
                for op in x.ops:
                    if isinstance(op, LabelRef) and op.name not in self.labels:
                        raise WarpyError(f"{x.mnemonic} branches to {op.name}, a label the program never places")
        k = Kernel(self.header(), tuple(lines))
        from warpy.isa.colour import check_defined

        check_defined(list(k.lines), {d.name: d for d in k.header.regs})
        return k

    def coloured(self) -> Kernel:
        """The coloured form: registers assigned by liveness (raises naming the point of pressure)."""
        from warpy.isa.colour import colour

        return colour(self.kernel())

    def text(self) -> str:
        return str(self.kernel())


