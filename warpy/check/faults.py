"""Known bugs injected into a program's text, to show each is caught by the check it should be."""
from __future__ import annotations

from typing import Optional

from warpy.isa.text import Kernel

FAULTS = ("drop-arrive", "early-free", "wrong-tx", "box-off-by-one", "no-proxy-fence", "global-before-wait",
          "read-before-commit", "tmem-overlap")


def inject(kind: str, named: Kernel, coloured: Optional[Kernel]) -> tuple[Kernel, Optional[Kernel], str]:
    return named, coloured, ""
