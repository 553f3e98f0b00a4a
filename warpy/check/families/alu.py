"""Integer/ALU, compare, predicate and conversion instructions: the checker runs the value rules
of `warpy.isa.semantics`, the one definition it shares with the isa's interpreter."""

from __future__ import annotations

from warpy.check.semantics import SEMANTICS
from warpy.isa.semantics import VALUES

SEMANTICS.include(VALUES)  # type: ignore[arg-type]  # a value rule is a handler that never blocks
