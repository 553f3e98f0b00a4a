"""Control flow. Branches and exits are run by the interpreter's loop itself (they split and
merge a warp's lane groups); their handlers here are never reached."""

from __future__ import annotations

from typing import Any


def _nothing(m: Any, w: Any, c: Any, lanes: Any) -> None:
    return None


SEMANTICS = {"BRA": _nothing, "EXIT": _nothing, "NOP": _nothing, "WARPSYNC": _nothing}
