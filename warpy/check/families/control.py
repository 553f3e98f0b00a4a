"""Control flow. Branches and exits are run by the scheduler's loop itself (they split and merge a
warp's lane groups, `warpy.check.schedule`); their handlers here are never reached."""

from __future__ import annotations

from typing import TYPE_CHECKING

from warpy.isa.families import control as isa
from warpy.check.semantics import semantics
from warpy.check.state import Lanes, Warp

if TYPE_CHECKING:
    from warpy.check.code import Compiled
    from warpy.check.machine import Machine


@semantics(isa.BRA, isa.EXIT, isa.NOP, isa.WARPSYNC)
def _nothing(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    return None


@semantics(isa.USETMAXREG)
def _setmaxnreg(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    if len(c.get) == 2:
        c.put[0](w, True, lanes)
