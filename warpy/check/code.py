"""The kernel's code, ready to run: each instruction compiled once into a `Compiled` (its opcode
record and checker semantics, one reader and one writer per operand, the registers it touches, what
the colouring check records of it) and the loops the machine recognises: a barrier wait
(`SYNCS.PHASECHK` then its `@!p BRA` back) and a loop that waits on global memory, by what it means
(`warpy.check.flags.find_waits`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, NoReturn, Optional, Union

import numpy as np

from warpy.errors import WarpyError
from warpy.memo import new_cache, remembered
from warpy.isa import values as L
from warpy.isa.families import defs_uses, form_of, lookup, record
from warpy.isa.families.wgmma import A_REGS, WGMMA_KEYS
from warpy.isa.families.base import Opcode
from warpy.isa.instr import Instr, Label, Note
from warpy.isa.operands import GMem, Desc, Imm, LabelRef, Mem, Operand, P, R, RVec, SReg, TmapRef, UP, UR, URVec, elem_name
from warpy.isa.text import Header, Kernel
from warpy.isa.values import Val
from warpy.check.families import SEMANTICS
from warpy.check.flags import WaitLoop, find_waits
from warpy.check.places import DSMEM
from warpy.check.rules import ALIGNED_KEYS, WARPGROUP_KEYS
from warpy.check.state import Lanes, Traced, Warp

if TYPE_CHECKING:
    from warpy.check.semantics import CheckHandler

Reader = Callable[[Warp], Val]  # an operand's value in a warp's lanes
Writer = Callable[[Warp, Val, Lanes], None]  # store a value into an operand's register, in the lanes given
Span = Union[tuple[str, int, int], tuple[()]]  # the registers a vector destination spans: (base, lo, hi)


class Compiled:
    """One instruction, ready to run: its record, handler, operand readers/writers and notes."""

    __slots__ = ("pc", "instr", "rec", "sem", "mnem", "handler", "guard", "guard_uses", "get", "put", "notes", "note_modes",
                 "note_names",
                 "regids", "wait_loop", "trace", "target", "cond", "span", "extra", "uses", "defs", "loop",
                 "collective", "mma_touch")

    def __init__(self, pc: int, instr: Instr, rec: Opcode, handler: CheckHandler) -> None:
        self.pc = pc
        self.instr = instr
        self.rec = rec
        self.sem = rec.sem
        self.mnem = instr.mnemonic
        self.handler = handler
        self.guard: Optional[Reader] = None
        self.guard_uses: frozenset[str] = frozenset()  # the guard predicate, when it is a register
        self.get: list[Reader] = []
        self.put: list[Writer] = []
        self.notes: tuple[Note, ...] = instr.notes
        self.note_modes: list[bool] = []  # per note: the operand is a register the line writes (read after it)
        self.note_names: tuple[str, ...] = ()  # the registers the notes' coordinates read
        self.regids: list[tuple[str, int]] = []  # the registers it reads and writes, as (base, element)
        self.wait_loop = False  # a barrier wait whose loop branches back: a wait that fails blocks the warp
        self.trace: Optional[Callable[[Warp, Lanes], Traced]] = None
        # the registers it reads (before it runs) and writes, by the names a warp's register file uses
        # (an HGMMA's accumulator input is read only when it accumulates: its handler asks)
        self.uses: frozenset[str] = frozenset()
        self.defs: tuple[str, ...] = ()
        self.loop: Optional[WaitLoop] = None  # a wait loop this line polls for or branches back in
        self.collective = 0  # 1: warp-aligned, 2: warpgroup-collective (`warpy.check.rules`)
        self.mma_touch: tuple[str, ...] = ()  # registers a wgmma also accesses, which this (other) line touches
        self.target = -1  # a branch: the pc it goes to
        self.cond: Optional[Reader] = None  # a branch: its uniform predicate operand
        self.span: Optional[Span] = None  # an asynchronous destination's registers, once computed
        self.extra: dict[object, object] = {}  # the value rules' own caches (`warpy.isa.semantics`)


class Code:
    """The compiled instructions (`instrs[pc]`) and labels; `read(op)` makes an operand's reader
    (special registers from the launch, constant-bank words from `params`)."""

    def __init__(self, kernel: Kernel, params: dict[str, int]) -> None:
        self.h: Header = kernel.header
        self.params = params
        instrs: list[Instr] = []
        labels: dict[str, int] = {}
        for x in kernel.lines:
            if isinstance(x, Label):
                labels[x.name] = len(instrs)
            elif isinstance(x, Instr):
                instrs.append(x)
        self.labels = labels
        self.instrs: list[Compiled] = []
        # an operand's reader and writer depend on the operand alone (and this Code's parameters):
        # made once per distinct operand of the kernel, not per use
        getters: dict[object, Reader] = {}
        putters: dict[object, Writer] = {}
        statics: list[_Static] = []
        for pc, i in enumerate(instrs):
            st = _static(i, pc)
            statics.append(st)
            c = Compiled(pc, i, st.rec, st.handler)
            c.guard = None if i.guard is None else self.read(i.guard)
            c.guard_uses = st.guard_uses
            c.get = [self._cached(getters, op, self._reader_or_refusal) for op in i.ops]
            c.put = [self._cached(putters, op, self._writer_or_refusal) for op in i.ops]
            c.regids = st.regids
            c.defs = st.defs
            c.uses = st.uses
            if i.notes:  # (by identity: this line's operand objects, not those of an equal line decoded first)
                d = [i.ops[k] for k in st.def_at]
                for note in i.notes:
                    op = i.ops[note.operand]
                    c.note_modes.append(any(x is op for x in d) and not isinstance(op, Mem))
            c.note_names = st.note_names
            c.trace = st.trace
            c.collective = st.collective
            self.instrs.append(c)
        code = self.instrs
        mma_regs: set[str] = set()
        for c in code:
            if c.rec.key in WGMMA_KEYS:
                mma_regs.update(_names(c.instr.ops[0]))
                mma_regs.update(_rs_a(c.instr))
        if mma_regs:
            for c in code:
                if c.rec.key not in WGMMA_KEYS:
                    c.mma_touch = tuple(sorted(statics[c.pc].touched & mma_regs))
        self.uses_pdl = any(c.sem == "dependent-wait" for c in code)
        self.uses_clc = any(c.sem == "clc-try-cancel" for c in code)
        for c in code:
            if c.sem == "barrier-wait":
                done = c.instr.ops[0]
                nxt = c.pc + 1
                while nxt < len(code) and code[nxt].sem == "sleep":
                    nxt += 1
                if nxt < len(code):
                    b = code[nxt].instr
                    if code[nxt].sem == "branch" and b.guard is not None and isinstance(done, P) and b.guard.name == done.name \
                            and b.guard.neg and labels.get(_label(b), 1 << 30) <= c.pc:
                        c.wait_loop = True
        for c in code:
            if c.sem == "branch":
                c.target = labels[_label(c.instr)]
                c.cond = self.read(c.instr.ops[0]) if len(c.instr.ops) == 2 else None
        find_waits(code)

    def stored_maps(self) -> Optional[set[str]]:
        """The tensor maps TMA stores name (None: one names its map through a register, any may be)."""
        out: set[str] = set()
        for c in self.instrs:
            if c.sem in ("tma-store", "tma-reduce"):
                op = c.instr.ops[1]
                if not isinstance(op, TmapRef) or op.reg is not None:
                    return None
                out.add(op.name)
        return out

    def read(self, op: Operand) -> Reader:
        if isinstance(op, Mem):
            return L.mem_addr(op, self.read)
        return L.reader(op, self._sreg, self._cbank, self._sym)

    @staticmethod
    def _cached(cache: dict[object, Any], op: Operand, make: Callable[[Operand], Any]) -> Any:
        # (an immediate's key holds its value's type: Imm(True) == Imm(1), and each reads as itself)
        key: object = (op, op.value.__class__) if op.__class__ is Imm else op
        try:
            hit = cache.get(key)
        except TypeError:  # (an operand that cannot be hashed: made each time)
            return make(op)
        if hit is None:
            hit = cache[key] = make(op)
        return hit

    def _reader_or_refusal(self, op: Operand) -> Reader:
        try:
            return self.read(op)
        except WarpyError as e:
            return _refusal(str(e))

    def _writer_or_refusal(self, op: Operand) -> Writer:
        try:
            return L.writer(op)
        except WarpyError as e:
            return _refusal(str(e))

    def _sreg(self, w: Warp, name: str) -> Val:
        cta = w.cta
        if name in ("SR_TID.Y", "SR_TID.Z"):
            return 0  # a block is one-dimensional (`.threads` is its x extent)
        if name in ("SR_CLOCKLO", "SR_GLOBALTIMERLO"):
            return w.clock_reads()  # a time: it only grows
        if name == "SR_TID.X":
            return L.LANE_IDS + np.uint64(32 * w.wid)
        if name == "SR_LANEID":
            return L.LANE_IDS.copy()
        if name.startswith("SR_CTAID."):
            return cta.ctaid["XYZ".index(name[-1])]
        if name.startswith("SR_NCTAID."):
            return self.h.grid["XYZ".index(name[-1])]
        if name == "SR_NTID.X":
            return self.h.threads
        if name == "SR_CgaCtaId":
            return cta.rank
        if name.startswith("SR_CLUSTERID."):
            cl = self.h.cluster
            return cta.ctaid["XYZ".index(name[-1])] // cl["XYZ".index(name[-1])]
        raise WarpyError(f"the checker does not model {name}")

    def _cbank(self, off: Union[int, str]) -> int:
        if isinstance(off, str):
            if off not in self.params:
                raise WarpyError(f"c[0x0][{off}] names no .param")
            return self.params[off]
        return 0  # the memory descriptor (0x208 / 0x358) and other words: 0

    def _sym(self, name: str) -> int:
        if name == "dsmem":
            return DSMEM
        raise WarpyError(f"unknown symbol `({name})")


class _Static:
    """What `Code` makes of one instruction that depends on the instruction alone: its record and
    handler, the registers its guard, reads and writes name, its tracer, whether it is collective.
    Kept by the instruction's value (`_STATIC`): a kernel's text repeats instructions, and the
    checks of one program (or of programs built the same way) decode the same ones again."""

    __slots__ = ("rec", "handler", "guard_uses", "regids", "defs", "uses", "touched", "def_at", "note_names", "trace",
                 "collective")

    def __init__(self, i: Instr, pc: int) -> None:
        rec, _ = lookup(i.name, i.mods)
        handler = SEMANTICS.get(rec)
        if handler is None:
            raise WarpyError(f"the checker has no semantics for {rec.key}")
        self.rec = rec
        self.handler: CheckHandler = handler
        self.guard_uses: frozenset[str] = frozenset()
        if i.guard is not None and i.guard.name not in CONSTANT_REGS:
            self.guard_uses = frozenset({i.guard.name})
        d, u = defs_uses(i)
        ids: list[tuple[str, int]] = []
        for op in u + d:
            if isinstance(op, (R, RVec)):
                ids.extend(L.reg_ids(op))
            elif isinstance(op, Mem):
                for r in op.regs():
                    if isinstance(r, (R, RVec)):
                        ids.extend(L.reg_ids(r))
        self.regids = ids  # (never changed: every Compiled of an equal instruction holds this list)
        self.defs = tuple(n for op in d for n in _names(op))
        uses = {n for op in u for n in _names(op)}
        if rec.key in WGMMA_KEYS:  # its accumulator input is read only when it accumulates (its handler asks)
            uses -= set(_names(i.ops[0]))
            uses |= set(_rs_a(i))
        self.uses = frozenset(uses)
        self.touched = self.uses | set(self.defs)
        # where the written operands are (the positions `defs_uses` takes them from)
        _, form = form_of(i)
        self.def_at = tuple(k for k, (op, arg) in enumerate(zip(i.ops, form))
                            if isinstance(op, (R, UR, P, UP, RVec, URVec)) and "d" in arg.role)
        self.note_names = tuple(sorted({n for note in i.notes for n in note.names()}))
        for op in i.ops:
            if isinstance(op, SReg) and op.name not in KNOWN_SREGS:
                raise WarpyError(f"line {pc + 1} ({i.mnemonic}): the checker does not model {op.name}")
        self.trace = _tracer(i)
        key = rec.key
        self.collective = 2 if key in WARPGROUP_KEYS else 1 if (key in ALIGNED_KEYS or key.startswith(
            ("BAR.", "UCGABAR"))) else 0


#: `_Static` by instruction (equal instructions decode alike; an instruction that is refused is
#: never kept, so its error names the line each time), at most `_STATIC_MAX` of them
_STATIC: dict[Instr, _Static] = new_cache()
_STATIC_MAX = 200_000


def _static(i: Instr, pc: int) -> _Static:
    return remembered(_STATIC, i, lambda: _Static(i, pc), _STATIC_MAX)


def _label(i: Instr) -> str:
    """The label a branch names (its last operand)."""
    t = i.ops[-1]
    if not isinstance(t, LabelRef):
        raise WarpyError(f"{i.mnemonic} names no label")
    return t.name


def _refusal(why: str) -> Callable[..., NoReturn]:
    """What an operand that is not a register value reads and writes as: a semantics that uses it
    is wrong, and says so."""
    def refuse(*_: object) -> NoReturn:
        raise WarpyError(why)
    return refuse


KNOWN_SREGS = frozenset({
    "SR_TID.X", "SR_TID.Y", "SR_TID.Z", "SR_LANEID", "SR_CTAID.X", "SR_CTAID.Y", "SR_CTAID.Z", "SR_NCTAID.X",
    "SR_NCTAID.Y", "SR_NCTAID.Z", "SR_NTID.X", "SR_CgaCtaId", "SR_CLUSTERID.X", "SR_CLUSTERID.Y", "SR_CLUSTERID.Z",
    "SR_CLOCKLO", "SR_GLOBALTIMERLO"})
CONSTANT_REGS = frozenset({"RZ", "URZ", "PT", "UPT"})


def _rs_a(i: Instr) -> list[str]:
    """The A registers of an HGMMA's RS form (all A_REGS of them: the operand names the first), or none."""
    if isinstance(i.ops[1], Desc):
        return []
    first = _names(i.ops[1])[0]
    return [first] + [elem_name(first, k) for k in range(1, A_REGS)]


def _names(op: Operand) -> list[str]:
    """The register names an operand reads or writes (the registers inside an address or a descriptor
    too), as a warp's register file keys them; the constant registers are none."""
    regs: list[Operand]
    if isinstance(op, Mem):
        regs = list(op.regs())
    elif isinstance(op, GMem):
        regs = [op.desc, op.addr]
    elif isinstance(op, Desc):
        regs = [op.reg]
    elif isinstance(op, TmapRef):
        regs = [op.reg] if op.reg is not None else []
    else:
        regs = [op]
    out: list[str] = []
    for r in regs:
        if isinstance(r, (R, UR, P, UP)):
            if r.name not in CONSTANT_REGS:
                out.append(r.name)
        elif isinstance(r, (RVec, URVec)):
            out.extend(elem_name(r.name, k) for k in range(max(r.width, 1)))
    return out


def _tracer(i: Instr) -> Optional[Callable[[Warp, Lanes], Traced]]:
    """What the colouring check compares besides derived operands: the global addresses a line
    touches (in the lanes that run it) and the argument tuples of the copy engine (the program's own
    arithmetic)."""
    for op in i.ops:
        if isinstance(op, GMem):
            lo, hi, off = elem_name(op.addr.name, 0), elem_name(op.addr.name, 1), op.offset

            def gaddr(w: Warp, lanes: Lanes, lo: str = lo, hi: str = hi, off: int = off) -> Traced:
                a, b = w.regs.get(lo, 0), w.regs.get(hi, 0)
                if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
                    v = np.broadcast_to(np.asarray(a, dtype=np.uint64) | (np.asarray(b, dtype=np.uint64) << np.uint64(32)),
                                        (32,))
                    if lanes is not None:
                        v = v[lanes]  # an inactive lane's register may hold anything (the colouring reuses it)
                    if v.size and (v == v.flat[0]).all():  # one address in every lane: as a uniform value reads
                        return int(v.flat[0]) + off
                    return hash(v.tobytes()) + off
                return (a | (b << 32)) + off
            return gaddr
    sem = record(i).sem
    if sem in ("tma-load", "tma-store", "tma-reduce") and isinstance(i.ops[0], Mem) and i.ops[0].base is not None:
        base = i.ops[0].base.name
        dims = next((int(x[:-1]) for x in i.mods if x.endswith("D") and x[:-1].isdigit()), 1)
        n = dims + (2 if sem == "tma-load" else 1)  # (dst, bar, coords) or (src, coords)

        def args(w: Warp, lanes: Lanes, base: str = base, n: int = n) -> Traced:
            return tuple(L.first(w.regs.get(elem_name(base, k), 0)) for k in range(n))
        return args
    return None
