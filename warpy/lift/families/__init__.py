"""Lift rules, one module per opcode family of `warpy.isa.families` (same module names). Each
module registers its rules against the isa's records (`@rule(isa.IADD3, ...)`); importing this
package imports them all, so `LIFT_RULES` then holds every rule."""

from __future__ import annotations

from warpy.lift.families import alu, clc, control, memory, sync, tcgen05, tma, wgmma
from warpy.lift.families._ctx import LIFT_RULES, LiftContext, LiftRule, Rule

MODULES = (alu, control, memory, sync, tma, wgmma, tcgen05, clc)

__all__ = ["LIFT_RULES", "MODULES", "LiftContext", "LiftRule", "Rule"]
