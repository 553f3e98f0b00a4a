"""warpy.check: the host checker. Runs a kernel's SASS text on the CPU (every warp of the first and
last clusters of its launch) and checks derived operands, the colouring, barrier protocol,
happens-before, proxy fences, dependent launch and declared memory; `docs/checker.md` says how.

`check_kernel(named, coloured)` returns a `Report`; `check_program(program, expect=...)` checks a
built program, with a kernel family's `Expectation` of its data (`warpy.check.expect`) for
`--values`; `warpy.check.faults` injects known bugs. The checker knows no kernel family. Its machine
(`warpy.check.machine`) is a facade over parts with one concern each (docs/checker.md, "How it is built").
"""

from __future__ import annotations

from warpy.check.report import Report, check_kernel, check_program

__all__ = ["Report", "check_kernel", "check_program"]
