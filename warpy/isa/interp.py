"""A small scalar interpreter of the integer/ALU part of the text: one thread, one register file.

Enough to test that register colouring changes no value and that every derived operand equals its
buffer's layout at the coordinates, through loops and rings. It is not the host checker
(`warpy.check` runs every lane of every warp with the barrier, TMA and tensor-core models); here
instructions outside the ALU/control subset do nothing, except that a wait's predicate is true.
"""

from __future__ import annotations

from typing import Callable, Optional, Union

from warpy.errors import WarpyError
from warpy.isa.families import defs_uses
from warpy.isa.instr import Instr, Label, Line, Note
from warpy.isa.operands import CBank, Imm, Mem, Operand, P, R, RVec, SReg, Sym, UP, UR, URVec, elem_name
from warpy.isa.text import Kernel

M32 = 0xFFFFFFFF


def lut3(lut: int, a: int, b: int, c: int, bits: int = 32) -> int:
    """LOP3 semantics: bit i of the result is bit (a_i<<2 | b_i<<1 | c_i) of lut."""
    mask = (1 << bits) - 1
    out = 0
    for i in range(8):
        if lut >> i & 1:
            out |= (a if i & 4 else ~a) & (b if i & 2 else ~b) & (c if i & 1 else ~c)
    return out & mask


class Machine:
    def __init__(self, sym: Optional[dict[str, int]] = None, sreg: Optional[dict[str, int]] = None,
                 cbank: Optional[dict[Union[int, str], int]] = None) -> None:
        self.v: dict[str, int] = {}
        self.sym = sym or {"dsmem": 0x400}
        self.sreg = sreg or {}
        self.cbank = cbank or {}

    # registers
    def get(self, op: Operand) -> int:
        if isinstance(op, Imm):
            return op.value & M32
        if isinstance(op, Sym):
            return self.sym[op.name]
        if isinstance(op, SReg):
            return self.sreg.get(op.name, 0)
        if isinstance(op, CBank):
            return self.cbank.get(op.offset, 0)
        if isinstance(op, (R, UR)):
            if op.name in ("RZ", "URZ"):
                x = 0
            else:
                x = self.v.get(op.name, 0)
            if op.inv:
                x = ~x & M32
            if op.neg:
                x = -x & M32
            return x
        if isinstance(op, (P, UP)):
            x = 1 if op.name in ("PT", "UPT") else self.v.get(op.name, 0)
            return x ^ 1 if op.neg else x
        if isinstance(op, (RVec, URVec)):
            return self.v.get(op.name, 0)
        raise WarpyError(f"the interpreter cannot read {op}")

    def get64(self, op: Operand) -> int:
        if isinstance(op, (RVec, URVec)):
            return self.v.get(elem_name(op.name, 0), 0) | self.v.get(elem_name(op.name, 1), 0) << 32
        return self.get(op)

    def set(self, op: Operand, x: int) -> None:
        if isinstance(op, (R, UR)) and op.name in ("RZ", "URZ"):
            return
        if isinstance(op, (P, UP)) and op.name in ("PT", "UPT"):
            return
        if isinstance(op, (R, UR, RVec, URVec)):
            self.v[op.name if isinstance(op, (R, UR)) else elem_name(op.name, 0)] = x & M32
        elif isinstance(op, (P, UP)):
            self.v[op.name] = 1 if x else 0
        else:
            raise WarpyError(f"the interpreter cannot write {op}")

    def set64(self, op: Operand, x: int) -> None:
        assert isinstance(op, (RVec, URVec))
        self.v[elem_name(op.name, 0)] = x & M32
        self.v[elem_name(op.name, 1)] = (x >> 32) & M32

    def address(self, m: Mem) -> int:
        x = m.offset
        if m.base is not None:
            x += self.get(m.base) if not isinstance(m.base, (RVec, URVec)) else self.get(m.base)
        if m.ubase is not None:
            x += self.get(m.ubase)
        return x & M32

    # one instruction
    def step(self, i: Instr) -> None:
        if i.guard is not None and not self.get(i.guard):
            return
        g, o = self.get, i.ops
        n = i.name
        if n in ("IADD3", "UIADD3"):
            self.set(o[0], g(o[-3]) + g(o[-2]) + g(o[-1]))
        elif n in ("IMAD", "UIMAD"):
            if "WIDE" in i.mods:
                self.set64(o[0], g(o[1]) * g(o[2]) + self.get64(o[3]))
            elif "HI" in i.mods:  # the high word of the 64-bit product (unsigned: .U32)
                self.set(o[0], ((g(o[1]) * g(o[2])) >> 32) + g(o[3]))
            else:
                self.set(o[0], g(o[1]) * g(o[2]) + g(o[3]))
        elif n in ("LEA", "ULEA"):
            self.set(o[0], (g(o[1]) << g(o[3])) + g(o[2]))
        elif n in ("LOP3", "ULOP3"):
            if len(o) == 7:
                r = lut3(g(o[5]), g(o[2]), g(o[3]), g(o[4]))
                self.set(o[0], r != 0)
                self.set(o[1], r)
            else:
                self.set(o[0], lut3(g(o[4]), g(o[1]), g(o[2]), g(o[3])))
        elif n in ("SHF", "USHF"):
            s = g(o[2]) & 31
            if "L" in i.mods:
                self.set(o[0], g(o[1]) << s)
            else:
                self.set(o[0], g(o[3]) >> s)
        elif n in ("MOV", "UMOV", "R2UR", "S2R", "S2UR"):
            self.set(o[0], g(o[1]))
        elif n in ("SEL", "USEL"):
            self.set(o[0], g(o[1]) if g(o[3]) else g(o[2]))
        elif n in ("ISETP", "UISETP"):
            x, y = g(o[2]), g(o[3])
            if "U32" not in i.mods:
                x = x - (1 << 32) if x >> 31 else x
                y = y - (1 << 32) if y >> 31 else y
            t = {"EQ": x == y, "NE": x != y, "LT": x < y, "LE": x <= y, "GT": x > y, "GE": x >= y}[i.mods[0]]
            z = bool(g(o[4]))
            logic = i.mods[-1]
            self.set(o[0], (t and z) if logic == "AND" else (t or z) if logic == "OR" else (t != z))
        elif n in ("PLOP3", "UPLOP3"):
            self.set(o[0], lut3(g(o[5]), g(o[2]), g(o[3]), g(o[4]), bits=1))
        elif n in ("LDC", "ULDC", "LDCU"):
            if "64" in i.mods:
                self.set64(o[0], self.cbank.get(o[1].offset, 0))  # type: ignore[union-attr]
            else:
                self.set(o[0], g(o[1]))
        elif n == "SYNCS" and "PHASECHK" in i.mods:
            self.set(o[0], 1)
        elif n == "USETMAXREG" and len(o) == 2:
            self.set(o[0], 1)
        elif n == "ELECT":
            self.set(o[0], 1)
            self.set(o[1], 0)


def note_value(m: Machine, i: Instr, note: Note, before: dict[str, int]) -> int:
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
        on_step: Optional[Callable[[int, Instr, Machine, dict[str, int]], None]] = None,
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
        if x.name == "EXIT" and taken:
            return m
        if x.name == "BRA":
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
