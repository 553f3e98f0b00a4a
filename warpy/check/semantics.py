"""The checker's semantics registry: what each opcode does to the machine, by opcode record.

A handler is called as `handler(machine, warp, compiled, lanes)` (lanes: None for every lane of the
warp's current group, else a bool vector of the lanes taking part). It returns `BLOCK` when the warp
must wait (its pc stays), None to go on. Family modules under `warpy.check.families` register
theirs with `@semantics(record, ...)`; the integer/ALU meanings are `warpy.isa.semantics`'s value
rules, shared with the isa's interpreter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Protocol

import numpy as np

from warpy.isa.registry import Registry

if TYPE_CHECKING:
    from warpy.check.code import Compiled
    from warpy.check.machine import Machine
    from warpy.check.state import Warp

BLOCK = -1  # a handler's answer when the warp must wait (blocked on a barrier, a flag)


class CheckHandler(Protocol):
    def __call__(self, m: Machine, w: Warp, c: Compiled, lanes: Optional[np.ndarray], /) -> Optional[int]: ...


#: every opcode's checker semantics (filled by the family modules as they are imported)
SEMANTICS: Registry[CheckHandler] = Registry("checker semantics")
semantics = SEMANTICS.register

__all__ = ["BLOCK", "CheckHandler", "SEMANTICS", "semantics"]
