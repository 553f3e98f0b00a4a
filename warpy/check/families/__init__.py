"""Checker semantics, one module per opcode family, keyed like `warpy.isa.families.ALL`.

Each module's `SEMANTICS` maps an opcode key to a handler `(machine, warp, compiled, lanes)`
(lanes: None for every lane of the warp's current group, else a bool vector). A handler returns
`machine.BLOCK` when the warp must wait (its pc stays), anything else to go on.
"""

from __future__ import annotations

from typing import Any, Callable

from warpy.check.families import alu, blackwell, clc, control, hopper, memory, sync, tma

MODULES = (alu, control, memory, sync, tma, hopper, blackwell, clc)
SEMANTICS: dict[str, Callable[..., Any]] = {}
for _m in MODULES:
    for _k, _h in _m.SEMANTICS.items():
        if _k in SEMANTICS:
            raise RuntimeError(f"checker semantics for {_k} defined twice")
        SEMANTICS[_k] = _h

__all__ = ["MODULES", "SEMANTICS"]
