"""warpy.check: the host checker. Runs a kernel's SASS text on the CPU (every warp of the first and
last clusters of its launch) and checks derived operands, the colouring, barrier protocol,
happens-before, proxy fences, dependent launch and declared memory; `docs/checker.md` says how.

`check_kernel(named, coloured)` returns a `Report`; `check_gemm(problem)` builds the GEMM a shape
gets and checks it; `warpy.check.faults` injects known bugs.
"""

from __future__ import annotations

from warpy.check.report import Report, check_gemm, check_kernel

__all__ = ["Report", "check_gemm", "check_kernel"]
