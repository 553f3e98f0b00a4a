"""Integer/ALU, compare, predicate and conversion instructions: the checker runs the value rules
of `warpy.isa.semantics`, the one definition it shares with the isa's interpreter. A value rule is a
handler that never blocks (the machine is its environment, the warp its register file).

A shuffle is a value rule too, but the checker first checks what the interpreter cannot see: the
lanes that execute it are its member mask (PTX's `shfl.sync` needs every member there and no other
lane), and every lane it reads from an in-range source takes part (a read of a lane that does not
is undefined on the GPU)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from warpy.check.semantics import SEMANTICS, semantics
from warpy.check.state import Lanes, Warp
from warpy.isa.families import alu as isa
from warpy.isa.semantics import VALUES, shfl_lanes, shfl_members

if TYPE_CHECKING:
    from warpy.check.code import Compiled
    from warpy.check.machine import Machine


def _mask(lanes: Lanes) -> int:
    act = np.ones(32, dtype=bool) if lanes is None else np.asarray(lanes, dtype=bool)
    return int(np.packbits(act, bitorder="little").view("<u4")[0])


@semantics(isa.SHFL)
def _shfl(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    members = shfl_members(c)
    running = _mask(lanes)
    who = f"{w.cta.name} warp {w.wid}: {c.mnem}"
    if running != members:
        m.problems.add("protocol", f"{who} runs on lanes {running:#010x}, its member mask is {members:#010x} "
                                   f"(every member, and only they, must execute it together)")
    src, ok = shfl_lanes(c.instr.mods[0], c.get[3](w), c.get[4](w))
    for lane in range(32):
        if running >> lane & 1 and ok[lane] and not (running & members) >> int(src[lane]) & 1:
            m.problems.add("protocol", f"{who}: lane {lane} reads lane {int(src[lane])}, which does not take part "
                                       f"(its value is undefined)")
            break
    VALUES[isa.SHFL](m, w, c, lanes)


for _rec, _rule in VALUES.items():
    if _rec not in SEMANTICS:
        SEMANTICS.add(_rec, _rule)
