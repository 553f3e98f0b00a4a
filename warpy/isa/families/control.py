"""Control flow: branches, exit, warp convergence, no-op; and `USETMAXREG`, the warpgroup's register
budget (`setmaxnreg`, on both targets)."""

from __future__ import annotations

from warpy.isa.families._util import ins
from warpy.isa.families.base import Opcode, a
from warpy.isa.instr import Instr
from warpy.isa.operands import UP, LabelRef

F = "control"

BRA = Opcode("BRA", F, "branch", ((a("target", "label"),), (a("p", "UP"), a("target", "label"))),
    mods=(r"U", r"ANY|DIV"), ptx="bra / @p bra",
    doc="jump; guarded by a predicate it is a conditional branch; `BRA.U !UP0, L` tests a uniform predicate")
EXIT = Opcode("EXIT", F, "exit", ((),), ptx="exit / ret", doc="the thread leaves")
NOP = Opcode("NOP", F, "nop", ((),), ptx="(none)", doc="nothing")
WARPSYNC = Opcode("WARPSYNC", F, "warp-sync", ((),), mods=(r"!ALL",), ptx="bar.warp.sync 0xffffffff",
    doc="reconverge the warp")

USETMAXREG = Opcode("USETMAXREG", F, "setmaxnreg", ((a("n", "I"),), (a("ok", "UP", "d"), a("n", "I"))),
    mods=(r"!DEALLOC|TRY_ALLOC", r"!CTAPOOL"), archs=frozenset({"sm_90a", "sm_100a"}),
    ptx="setmaxnreg.dec/.inc.sync.aligned.u32 n",
    doc="the warpgroup gives registers back down to n (DEALLOC) or asks for n (TRY_ALLOC; ok: granted)")

OPCODES: list[Opcode] = [
    BRA, EXIT, NOP, WARPSYNC, USETMAXREG,
]


def bra(target: str) -> Instr:
    return ins(BRA, "", LabelRef(target))


def bra_u(p: UP, target: str) -> Instr:
    """Branch when the uniform predicate p holds: `BRA.U p, target` (`BRA.U !UP0, L`)."""
    return ins(BRA, "U", p, LabelRef(target))


def exit_() -> Instr:
    return ins(EXIT, "")


def nop() -> Instr:
    return ins(NOP, "")


def warpsync_all() -> Instr:
    return ins(WARPSYNC, "ALL")


def setmaxnreg_dealloc(n: int) -> Instr:
    return ins(USETMAXREG, "DEALLOC.CTAPOOL", n)


def setmaxnreg_try_alloc(ok: UP, n: int) -> Instr:
    return ins(USETMAXREG, "TRY_ALLOC.CTAPOOL", ok, n)
