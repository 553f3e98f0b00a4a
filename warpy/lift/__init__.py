"""warpy.lift: SASS text → PTX (one rule module per opcode family), the ptxas driver and cubin cache
(`warpy.lift.ptxas`), and the disassembly cross-check (`warpy.lift.disasm`).

`lift(text_or_kernel)` returns PTX; `build(kernel, target)` lifts, assembles and checks."""

from __future__ import annotations

from typing import Any

__all__ = ["lift", "build", "expected_opcodes", "cta_group"]


def __getattr__(name: str) -> Any:
    # lazy: `import warpy.lift.ptxas` must not pull in warpy.isa
    if name in __all__:
        from warpy.lift import lifter as _m

        return getattr(_m, name)
    raise AttributeError(f"module 'warpy.lift' has no attribute {name!r}")
