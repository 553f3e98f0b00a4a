"""Control flow. Branches and exits are run by the interpreter's loop itself (they split and
merge a warp's lane groups); their handlers here are never reached."""

from __future__ import annotations

from typing import Any
from warpy.isa.families import control as isa
from warpy.check.semantics import semantics


@semantics(isa.BRA, isa.EXIT, isa.NOP, isa.WARPSYNC)
def _nothing(m: Any, w: Any, c: Any, lanes: Any) -> None:
    return None


@semantics(isa.USETMAXREG)
def _setmaxnreg(m: Any, w: Any, c: Any, lanes: Any) -> None:
    if len(c.get) == 2:
        c.put[0](w, True, lanes)
