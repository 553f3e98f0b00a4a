"""The `Program` builder: registers by name, lines and labels, structure (warp roles, branches,
loops over counters, rings), declarations (buffers with layouts, pipes, tensor maps, parameters),
and the printed text (`kernel`, `coloured`, `text`).

A program is written one instruction a statement (`p.emit(alu.iadd3(k, k, 1))`) plus structured
helpers (`p.loop`, `p.role`, `end.stage()`). The rest lives in modules of their own, each readable
alone:

- `warpy.isa.index`: program indices (`Counter`, `Ring`, `Lane`, `Uniform`) and affine coordinates;
- `warpy.isa.buffers`: buffers and the operands they make (`Tile`, `Barrier`, `TmemRef`), tensor
  maps, parameters;
- `warpy.isa.derive`: the values of buffers at coordinates, derived from their layouts and placed
  where each index changes (`p.derive`: `into`, `value_reg`, `emit_at`...);
- `warpy.isa.pipes`: pipes and their two ends, mbarrier initialisation and waits;
- `warpy.isa.descriptors`: shared-memory descriptor words of a buffer's tiles;
- `warpy.isa.units`: one module a hardware unit (`tma_load`, `hgmma`, `utchmma`...), functions
  taking the Program first.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Iterator, Optional, Union

import attrs

from warpy.errors import WarpyError
from warpy.isa.buffers import (
    Barrier,
    BarrierArray,
    Buffer,
    MapTable,
    BufLayout,
    GlobalBuffer,
    Param,
    Ref,
    SmemBuffer,
    TensorMap,
    Tile,
    TileRing,
    TmemBuffer,
    TmemRef,
    check_ident,
    round_up,
)
from warpy.isa.derive import Derivation, Scope, Slot
from warpy.isa.families import alu, control, sync, validate
from warpy.isa.index import Coord, Counter, Index, Ix, Lane, Ring, Uniform, as_ix
from warpy.isa.instr import Comment, Instr, Label, Line
from warpy.isa.operands import PT, RZ, UPT, LabelRef, P, R, RVec, UP, UR, URVec, check_name
from warpy.isa.pipes import ConsumerEnd, Pipe, PipeBarriers, ProducerEnd
from warpy.isa.text import Header, Kernel, ParamDecl, RegDecl, TmapDecl
from warpy.layout import Layout, SwizzledLayout
from warpy.layout.dtype import DTYPES, dtype_bytes
from warpy.layout.inttuple import product
from warpy.layout.tma import TmaBox
from warpy.target import Target, target as target_of

# Names a program's author reaches for with `Program` (defined in the modules above).
__all__ = [
    "Barrier", "BarrierArray", "Buffer", "BufLayout", "MapTable", "ConsumerEnd", "Coord", "Counter", "GlobalBuffer", "Index",
    "Ix", "Lane", "Param", "Pipe", "ProducerEnd", "Program", "Ref", "Ring", "SmemBuffer", "TensorMap", "Tile",
    "TileRing", "TmemBuffer", "TmemRef", "Uniform", "as_ix",
]


class Program:
    """One kernel being built: its launch shape, registers, lines (with the derivation's slots among
    them), labels and declarations. `derive` owns the derived values (`warpy.isa.derive`)."""

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
        self._tmap_names: set[str] = set()
        self.params: list[Param] = []
        self.smem_top = 0
        self.labels: set[str] = set()
        self._label_n = itertools.count(1)
        prologue = Slot()
        self.lines.append(prologue)
        self.derive = Derivation(self, prologue)
        self.barriers_initialised = False  # set by warpy.isa.pipes.init_barriers

    # -- registers -------------------------------------------------------------------------
    def _declare(self, name: str, kind: str, width: int = 1) -> None:
        check_name(name)
        if name in self._tmap_names:
            raise WarpyError(f"register {name}: a tensor map has that name (tmap[{name}] would name the map)")
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
        base = round_up(self.smem_top, align)
        self.smem_top = base + size
        return base

    def smem(self, name: str, layout: BufLayout, elem: str) -> SmemBuffer:
        ebytes = dtype_bytes(elem) if elem in DTYPES else 1
        inner = layout.layout if isinstance(layout, SwizzledLayout) else layout
        size = round_up(inner.cosize() - 1 + ebytes, 16)
        b = SmemBuffer(name, self._place(size, 1024 if isinstance(layout, SwizzledLayout) else 16), size, layout, elem)
        self.buffers.append(b)
        return b

    def smem_ring(self, name: str, depth: int, tile: BufLayout, elem: str) -> TileRing:
        b = TileRing(name, 0, depth, tile, elem)
        b.base = self._place(b.size, 1024)
        self.buffers.append(b)
        return b

    def _add_barriers(self, b: BarrierArray) -> None:
        if self.barriers_initialised:
            raise WarpyError(f"barrier array {b.name} is declared after init_barriers(); declare every barrier and pipe first")
        b.base = self._place(b.size, 8)
        self.buffers.append(b)

    def barriers(self, name: str, n: int, count: int = 1) -> BarrierArray:
        """An array of n mbarriers, each completing a phase after `count` arrivals."""
        b = BarrierArray(name, 0, (n,), count)
        self._add_barriers(b)
        return b

    def pipe(self, name: str, depth: int, fills: int = 1, frees: int = 1) -> Pipe:
        """A ring of `depth` stages and their full/empty barriers (`warpy.isa.pipes`)."""
        bars = PipeBarriers(f"{name}_bars", depth, fills, frees)
        self._add_barriers(bars)
        return Pipe(self, name, bars)

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

    def tmap(self, name: str, box: TmaBox, over: Optional[str] = None, offset: int = 0) -> TensorMap:
        """A tensor map parameter. `over`: a parameter (pointer or map) declared before, whose
        memory this map views too, `offset` bytes in (the host binds it to that memory; the checker
        aliases them)."""
        return self._tmap(name, box, over, offset, None, None)

    def _tmap(self, name: str, box: TmaBox, over: Optional[str], offset: int, table: Optional[str],
              slot: Optional[int]) -> TensorMap:
        check_ident(name, "tensor map")
        if name in self.regs or name in self._tmap_names:
            raise WarpyError(f"tensor map {name}: the name is taken (a register or another map)")
        if over is not None and over not in {t.name for t in self.tmaps} | {q.name for q in self.params}:
            raise WarpyError(f"tensor map {name}: {over} is no .param or .tmap declared before it")
        if offset and over is None:
            raise WarpyError(f"tensor map {name}: offset= is into the memory of over=, which is not given")
        t = TensorMap(name, box, over, table, slot, offset)
        self.tmaps.append(t)
        self._tmap_names.add(name)
        return t

    def map_table(self, param: str) -> MapTable:
        """A table of tensor maps in global memory behind the u64 parameter `param` (declared here):
        `table.add(name, box, over=..., offset=...)` declares its next slot (`.tmap NAME
        table=PARAM slot=K ...`), which is no kernel parameter; instructions reach a slot through
        its descriptor's address (`warpy.isa.units.tma.table_entry`, `tmap[desc]`)."""
        q = self.param(param, "u64")
        table = MapTable(lambda name, box, over, offset: self._tmap(name, box, over, offset, param,
                                                                   sum(1 for t in self.tmaps if t.table == param)), q)
        return table

    def param(self, name: str, type_: str = "u64") -> Param:
        check_ident(name, "parameter")
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

    # -- emission --------------------------------------------------------------------------
    def emit(self, i: Instr, mark: Optional[str] = None) -> Instr:
        i = self.arch_form(i)
        if mark is not None:
            i = i.marked(mark)
        validate(i)
        self.lines.append(i)
        return i

    def arch_form(self, i: Instr) -> Instr:
        """The instruction as this target prints it (every line goes through here)."""
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

    def elect(self, name: str = "leader") -> P:
        """A predicate true in one lane of the warp."""
        p_ = self.p(name)
        self.emit(sync.elect(p_))
        return p_

    # -- structure -------------------------------------------------------------------------
    def _slot(self) -> Slot:
        s = Slot()
        self.lines.append(s)
        return s

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
        with self.derive.scope(Scope("role", self._slot(), role=name)):
            yield
        self.emit(control.exit_())
        self.label(nxt)

    def warp_index(self) -> R:
        """The warp's index in the CTA (computed once, in the program's prologue)."""
        if "warp" not in self.regs:
            tid = self.r("tid")
            warp = self.r("warp")
            top = self.derive.prologue
            top.lines.append(self.arch_form(alu.s2r(tid, "SR_TID.X")))
            top.lines.append(self.arch_form(alu.shf_r(warp, tid, 5)))
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
        pre = self._slot()
        head = self.fresh_label(f"LOOP_{name}")
        self.label(head)
        top = self._slot()
        step = Slot()  # placed after the body
        with self.derive.scope(Scope("loop", top, pre, step, index=k)):
            yield k
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
        """One iteration of a ring: its derived values at the top, the advance at the end."""
        with self.derive.scope(Scope("ring", self._slot(), index=ring)):
            yield
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
            kernel=self.name, sm=self.sm, threads=self.threads, dynsmem=round_up(smem_end, 1024) if smem_end else 0,
            grid=self.grid, cluster=self.cluster, mbarriers=nbar, maxnreg=self.maxnreg,
            tmaps=tuple(TmapDecl(t.name, t.box, t.over, t.table, t.slot, t.offset) for t in self.tmaps),
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
