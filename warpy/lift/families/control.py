"""Lift rules of the control family: branches, exit, warp convergence, no-op."""

from __future__ import annotations

from warpy.isa.instr import Instr
from warpy.isa.operands import LabelRef, UP
from warpy.lift.families._ctx import LiftContext, Rule, ident


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


def _exit(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    c.emit("exit")


def _nop(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    c.lines.append("    // NOP")


def _warpsync(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    c.emit("bar.warp.sync 0xffffffff")


RULES: dict[str, Rule] = {"BRA": _bra, "EXIT": _exit, "NOP": _nop, "WARPSYNC": _warpsync}
