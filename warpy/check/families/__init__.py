"""Checker semantics, one module per opcode family of `warpy.isa.families` (same module names).
Each module registers its handlers against the isa's records (`@semantics(isa.LDS, ...)`, see
`warpy.check.semantics`); importing this package imports them all, so `SEMANTICS` then holds every
handler."""

from __future__ import annotations

from warpy.check.families import alu, clc, control, memory, sync, tcgen05, tma, wgmma
from warpy.check.semantics import SEMANTICS, CheckHandler

MODULES = (alu, control, memory, sync, tma, wgmma, tcgen05, clc)

__all__ = ["MODULES", "SEMANTICS", "CheckHandler"]
