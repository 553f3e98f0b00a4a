"""A small interpreter of the text: one thread, one register file, no memory.

Enough to test that register colouring changes no value and that every derived operand equals its
buffer's layout at the coordinates, through loops and rings. It is not the host checker
(`warpy.check` runs every lane of every warp with the barrier, TMA and tensor-core models), but it
computes the ALU exactly as the checker does: both run the value rules of `warpy.isa.semantics` on
`warpy.isa.values` readers and writers.

What it does with the rest is decided by the record's semantic class, never by silence:
`INTERP_PASSES` classes write their predicate true (a wait has waited, `setmaxnreg` was granted,
`ELECT` picked this thread); `INTERP_ZEROES` classes (loads from memory the interpreter does not
have) write 0 to their destinations; `INTERP_NOTHING` classes write no register. An instruction of
any other class is refused, naming it.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

from warpy.errors import WarpyError
from warpy.isa import values as L
from warpy.isa.families import SEM_CLASSES, defs_uses, record
from warpy.isa.instr import Instr, Label, Line, Note
from warpy.isa.operands import Mem, Operand, P, RVec, UP, URVec, elem_name
from warpy.isa.semantics import VALUES
from warpy.isa.text import Kernel

M32 = 0xFFFFFFFF

#: classes whose predicate destination the interpreter sets true
INTERP_PASSES = frozenset({"barrier-wait", "setmaxnreg", "elect"})
#: classes that load from memory the interpreter does not model: their destinations read 0
INTERP_ZEROES = frozenset({"load-shared", "load-global", "load-matrix", "tmem-load", "clc-query", "atomic-global"})
#: classes that write no register the interpreter tracks (memory, barriers, fences, copies, MMAs...)
INTERP_NOTHING = frozenset(SEM_CLASSES) - INTERP_PASSES - INTERP_ZEROES - {
    "branch", "exit",  # run() moves the pc
    "alu", "compare", "predicate", "special-reg", "const-load", "vote",  # value rules (warpy.isa.semantics)
}


def lut3(lut: int, a: int, b: int, c: int, bits: int = 32) -> int:
    """LOP3 semantics: bit i of the result is bit (a_i<<2 | b_i<<1 | c_i) of lut."""
    mask = (1 << bits) - 1
    out = 0
    for i in range(8):
        if lut >> i & 1:
            out |= (a if i & 4 else ~a) & (b if i & 2 else ~b) & (c if i & 1 else ~c)
    return out & mask


class _Compiled:
    """One instruction's readers and writers over the interpreter's registers."""

    def __init__(self, m: "Machine", i: Instr) -> None:
        self.instr = i
        self.rec = record(i)
        self.get: list[Any] = [m._reader_or_none(op) for op in i.ops]
        self.put: list[Any] = [m._writer_or_none(op) for op in i.ops]
        self.extra: dict[Any, Any] = {}


class Machine:
    """One thread: registers `v` (name -> value; predicates bool), what special registers
    (`sreg`), constant-bank words (`cbank`, by offset or parameter name) and symbols (`sym`) read."""

    def __init__(self, sym: Optional[dict[str, int]] = None, sreg: Optional[dict[str, int]] = None,
                 cbank: Optional[dict[Union[int, str], int]] = None) -> None:
        self.v: dict[str, Any] = {}
        self.sym = sym or {"dsmem": 0x400}
        self.sreg = sreg or {}
        self.cbank = cbank or {}
        self._code: dict[int, _Compiled] = {}

    # the warp and environment the value rules see
    @property
    def regs(self) -> dict[str, Any]:
        return self.v

    @property
    def params(self) -> dict[str, int]:
        return {k: v for k, v in self.cbank.items() if isinstance(k, str)}

    def _read(self, op: Operand) -> L.Reader:
        if isinstance(op, Mem):
            return L.mem_addr(op, self._read)
        return L.reader(op, lambda _w, name: self.sreg.get(name, 0), lambda off: self.cbank.get(off, 0),
                        lambda name: self.sym[name])

    def _reader_or_none(self, op: Operand) -> Optional[L.Reader]:
        try:
            return self._read(op)
        except (WarpyError, KeyError):
            return None

    def _writer_or_none(self, op: Operand) -> Any:
        try:
            return L.writer(op)
        except WarpyError:
            return None

    # registers
    def get(self, op: Operand) -> int:
        """The value of an operand (a predicate as 0/1; a vector: its first register)."""
        v = self._read(op)(self)
        return int(v) & M32

    def get64(self, op: Operand) -> int:
        if isinstance(op, (RVec, URVec)):
            return int(self.v.get(elem_name(op.name, 0), 0)) | int(self.v.get(elem_name(op.name, 1), 0)) << 32
        return self.get(op)

    def set(self, op: Operand, x: int) -> None:
        if isinstance(op, (P, UP)):
            L.writer(op)(self, bool(x), None)
        else:
            L.writer(op)(self, x & M32, None)

    def address(self, m: Mem) -> int:
        return int(self._read(m)(self)) & M32

    # one instruction
    def step(self, i: Instr) -> None:
        c = self._code.get(id(i))
        if c is None or c.instr is not i:
            c = self._code[id(i)] = _Compiled(self, i)
        if i.guard is not None and not self.get(i.guard):
            return
        rule = VALUES.get(c.rec)
        if rule is not None:
            rule(self, self, c, None)
            return
        sem = c.rec.sem
        defs, _ = defs_uses(i)
        if sem in INTERP_PASSES:
            for k, d in enumerate(defs):
                self.set(d, 1 if k == 0 else 0)
        elif sem in INTERP_ZEROES:
            for d in defs:
                if isinstance(d, (RVec, URVec)):
                    for k in range(d.width or 1):
                        self.v[elem_name(d.name, k)] = 0
                else:
                    L.writer(d)(self, 0, None)
        elif sem not in INTERP_NOTHING:
            raise WarpyError(f"the interpreter has no meaning for {i.mnemonic} (class {sem})")


def note_value(m: Machine, i: Instr, note: Note, before: dict[str, Any]) -> int:
    """The value a note speaks of: a written register after the line, an address, or a read value."""
    op = i.ops[note.operand]
    if isinstance(op, Mem):
        saved = m.v
        m.v = before
        try:
            return m.address(op)
        finally:
            m.v = saved
    d, _ = defs_uses(i)
    if any(x is op for x in d):
        return m.get(op)
    saved = m.v
    m.v = before
    try:
        return m.get(op)
    finally:
        m.v = saved


def run(lines: Union[Kernel, list[Line]], machine: Optional[Machine] = None, max_steps: int = 100_000,
        on_step: Optional[Callable[[int, Instr, Machine, dict[str, Any]], None]] = None,
        start: int = 0) -> Machine:
    """Run from line `start` until EXIT, the end, or max_steps (then raise)."""
    ls = list(lines.lines) if isinstance(lines, Kernel) else list(lines)
    m = machine or Machine()
    labels = {x.name: n for n, x in enumerate(ls) if isinstance(x, Label)}
    pc = start
    steps = 0
    while pc < len(ls):
        x = ls[pc]
        steps += 1
        if steps > max_steps:
            raise WarpyError(f"the interpreter ran {max_steps} steps without reaching EXIT")
        if not isinstance(x, Instr):
            pc += 1
            continue
        before = dict(m.v)
        taken = x.guard is None or bool(m.get(x.guard))
        sem = record(x).sem
        if sem == "exit" and taken:
            return m
        if sem == "branch":
            cond = taken
            for op in x.ops:
                if isinstance(op, UP):
                    cond = cond and bool(m.get(op))
            tgt = x.ops[-1]
            pc = labels[tgt.name] if cond else pc + 1  # type: ignore[union-attr]
            if on_step:
                on_step(pc, x, m, before)
            continue
        m.step(x)
        if on_step:
            on_step(pc, x, m, before)
        pc += 1
    return m


__all__ = ["Machine", "run", "note_value", "lut3", "INTERP_PASSES", "INTERP_ZEROES", "INTERP_NOTHING"]
