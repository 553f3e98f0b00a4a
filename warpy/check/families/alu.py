"""Integer/ALU, compare, predicate and conversion instructions: the checker runs the value rules
of `warpy.isa.semantics`, the one definition it shares with the isa's interpreter. A value rule is a
handler that never blocks (the machine is its environment, the warp its register file)."""

from __future__ import annotations

from warpy.check.semantics import SEMANTICS
from warpy.isa.semantics import VALUES

for _rec, _rule in VALUES.items():
    SEMANTICS.add(_rec, _rule)
