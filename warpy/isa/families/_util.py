"""Shared helpers of the family modules' builders."""

from __future__ import annotations

from typing import Union

from warpy.isa.instr import Instr
from warpy.isa.operands import Imm, Operand

OpLike = Union[Operand, int]


def ins(name: str, mods: tuple[str, ...] | str, *ops: OpLike) -> Instr:
    """An instruction with ints turned into immediates, checked against its family record."""
    from warpy.isa.families import validate

    if isinstance(mods, str):
        mods = tuple(m for m in mods.split(".") if m)
    words = name.split(".")
    name, mods = words[0], tuple(words[1:]) + tuple(mods)
    conv = tuple(Imm(o) if isinstance(o, int) and not isinstance(o, bool) else o for o in ops)
    i = Instr(name, mods, conv)  # type: ignore[arg-type]
    validate(i)
    return i
