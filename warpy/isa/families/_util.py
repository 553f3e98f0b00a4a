"""Shared helpers of the family modules' builders."""

from __future__ import annotations

from typing import Union

from warpy.errors import WarpyError
from warpy.isa.families.base import Opcode
from warpy.isa.instr import Instr
from warpy.isa.operands import Imm, Operand

OpLike = Union[Operand, int]


def ins(rec: Opcode, mods: tuple[str, ...] | str, *ops: OpLike) -> Instr:
    """An instruction of record `rec`: its mnemonic is the record's first key word and `mods` (which
    carry the key's further words, in the order the text prints them), ints become immediates; it is
    checked against the record (and must be an instruction of that record)."""
    from warpy.isa.families import validate

    if isinstance(mods, str):
        mods = tuple(m for m in mods.split(".") if m)
    conv = tuple(Imm(o) if isinstance(o, int) and not isinstance(o, bool) else o for o in ops)
    i = Instr(rec.key_words[0], mods, conv)  # type: ignore[arg-type]
    got = validate(i)
    if got is not rec:
        raise WarpyError(f"{i.mnemonic} is an instruction of {got.key}, not of {rec.key}")
    return i
