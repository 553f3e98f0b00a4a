"""Lift rules, one module per opcode family, keyed like `warpy.isa.families` (module name = family,
rule key = the isa record's key). `RULES` merges them; tests/lift asserts every record has one."""

from __future__ import annotations

from warpy.lift.families import alu, blackwell, clc, control, hopper, memory, sync, tma
from warpy.lift.families._ctx import LiftContext, Rule
from warpy.lift.families.blackwell import WARP_COLLECTIVE

MODULES = (alu, control, memory, sync, tma, hopper, blackwell, clc)
FAMILIES: dict[str, dict[str, Rule]] = {m.__name__.rsplit(".", 1)[1]: m.RULES for m in MODULES}
RULES: dict[str, Rule] = {k: r for fam in FAMILIES.values() for k, r in fam.items()}

__all__ = ["FAMILIES", "RULES", "MODULES", "LiftContext", "Rule", "WARP_COLLECTIVE"]
