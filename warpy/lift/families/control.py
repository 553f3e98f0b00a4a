"""Lift rules of the control family: branches, exit, warp convergence, no-op."""

from __future__ import annotations

from warpy.isa.instr import Instr
from warpy.isa.operands import Imm, LabelRef, UP
from warpy.lift.families._ctx import LiftContext, Rule, ident
from warpy.isa.families import control as isa
from warpy.lift.families._ctx import rule


@rule(isa.BRA)
def _bra(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    # `BRA.U !UP0, L` carries its predicate as an operand; the driver applies an `@` guard.
    target = i.ops[-1]
    assert isinstance(target, LabelRef)
    if len(i.ops) == 2:
        p = i.ops[0]
        assert isinstance(p, UP)
        if c.is_false(p):
            return
        if not c.is_true(p):
            c.emit(f"@{c.pred_neg(p)} bra {ident(target.name)}")
            return
    c.emit(f"bra {ident(target.name)}")


@rule(isa.EXIT)
def _exit(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    c.emit("exit")


@rule(isa.NOP)
def _nop(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    c.lines.append("    // NOP")


@rule(isa.WARPSYNC)
def _warpsync(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    c.emit("bar.warp.sync 0xffffffff")


@rule(isa.USETMAXREG)
def _setmaxnreg(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    n = i.ops[-1]
    assert isinstance(n, Imm)
    if "DEALLOC" in rest:
        c.emit(f"setmaxnreg.dec.sync.aligned.u32 {n.value}")
        return
    c.emit(f"setmaxnreg.inc.sync.aligned.u32 {n.value}")
    if len(i.ops) == 2:  # setmaxnreg.inc returns once the registers are granted
        c.emit(f"mov.pred {c.pred_dst(i.ops[0])}, 1")
