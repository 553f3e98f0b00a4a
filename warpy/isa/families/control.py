"""Control flow: branches, exit, warp convergence, no-op."""

from __future__ import annotations

from warpy.isa.families._util import ins
from warpy.isa.families.base import Opcode, a
from warpy.isa.instr import Instr
from warpy.isa.operands import UP, LabelRef

F = "control"

OPCODES: list[Opcode] = [
    Opcode("BRA", F, "branch", ((a("target", "label"),), (a("p", "UP"), a("target", "label"))),
           mods=(r"U", r"ANY|DIV"), ptx="bra / @p bra",
           doc="jump; guarded by a predicate it is a conditional branch; `BRA.U !UP0, L` tests a uniform predicate"),
    Opcode("EXIT", F, "exit", ((),), ptx="exit / ret", doc="the thread leaves"),
    Opcode("NOP", F, "nop", ((),), ptx="(none)", doc="nothing"),
    Opcode("WARPSYNC", F, "warp-sync", ((),), mods=(r"!ALL",), ptx="bar.warp.sync 0xffffffff",
           doc="reconverge the warp"),
]


def bra(target: str) -> Instr:
    return ins("BRA", "", LabelRef(target))


def bra_u(p: UP, target: str) -> Instr:
    """Branch when the uniform predicate p holds: `BRA.U p, target` (`BRA.U !UP0, L`)."""
    return ins("BRA", "U", p, LabelRef(target))


def exit_() -> Instr:
    return ins("EXIT", "")


def nop() -> Instr:
    return ins("NOP", "")


def warpsync_all() -> Instr:
    return ins("WARPSYNC", "ALL")
