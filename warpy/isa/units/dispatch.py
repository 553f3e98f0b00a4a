"""Dispatch on an opcode word: `dispatch(p, op, cases)` jumps to `cases[op]` in one step of the
GPU's.

The text is a chain, one `ISETP.EQ.U32.AND hit, PT, op, k, PT` and `@hit BRA CASE_k` a case, and a
last `BRA` for the final case (and any op past the table): ordinary branches, which the checker and
the isa's interpreter follow as they are. ptxas turns such a chain (four cases or more) into an
indexed branch through a jump table in constant bank 2: `LDC R, c[0x2][R]` then `BRX R` (it peels
case 0 off first and clamps the index), so one dispatch costs a handful of instructions and one
indirect jump whatever the number of cases. docs/toolchain.md has the measurement against an
explicit `brx.idx` and a binary compare tree, and why the chain is kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from warpy.errors import WarpyError
from warpy.isa.families import alu, control
from warpy.isa.operands import R

if TYPE_CHECKING:
    from warpy.isa.program import Program


def dispatch(p: Program, op: R, cases: Sequence[str], *, name: str = "dispatch") -> None:
    """Branch to label cases[op] (op an unsigned index in a general register); an op of len(cases)
    or more goes to the last case. The labels are the program's to place."""
    if len(cases) < 2:
        raise WarpyError(f"dispatch needs two cases or more, not {len(cases)}")
    if len(set(cases)) != len(cases):
        raise WarpyError(f"dispatch: the cases {', '.join(cases)} name a label twice")
    hit = p.p(f"{name}_hit")
    for k, label in enumerate(cases[:-1]):
        p.emit(alu.isetp("EQ", hit, op, k))
        p.emit(control.bra(label).guarded(hit))
    p.emit(control.bra(cases[-1]))


__all__ = ["dispatch"]
