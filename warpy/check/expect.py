"""What a kernel family tells the checker about its data: the seam between `warpy.check`, which
knows no kernel family, and the families under `warpy.kernels`.

With `--values` the checker computes the data a kernel moves and multiplies (copies, MMAs,
epilogues). It needs to know what the inputs hold and what the outputs should hold; a family hands
it an `Expectation`:

- `initial(source, box, nbytes, rng)`: the initial bytes of global memory behind a tensor map or
  pointer parameter (`box`: the map's `TmaBox`, None for a pointer), or None for zeros;
- `compare(run)`: after the run, the verdict on what the simulated CTAs wrote (`run` is the
  checker's machine, seen as `RunData`: `gmem` / `gwritten` / `greduced` hold each source's bytes,
  which of them were written, and which hold partial sums added by CTAs outside the simulated
  clusters; `h` is the kernel's header);
- optionally `outside_share(source, offset, want, ctas)`: what the CTAs other than `ctas` (linear
  ids: the simulated ones) add to the flag word at `offset` of `source` by the time a waiter's loop
  may exit on the value `want`, or None where the family does not know. Without it the rest of the
  grid raises a flag straight to `want` (`warpy.check.flags`).
"""

from __future__ import annotations

from typing import Optional, Protocol

import attrs
import numpy as np

from warpy.isa.text import Header
from warpy.layout.tma import TmaBox


@attrs.define
class Verdict:
    """How the outputs compare: elements compared, how many differ, how many hold partial sums not
    compared, one line per problem, and arrays worth keeping (`warpy check --dump` saves them)."""

    checked: int
    wrong: int
    partial: int = 0
    messages: list[str] = attrs.field(factory=list)
    data: dict[str, np.ndarray] = attrs.field(factory=dict)
    #: elements a simulated CTA wrote but not compared: computed from data the rest of the grid
    #: writes where the family cannot model it (a megakernel's buffers that hold several tensors)
    unmodelled: int = 0


class RunData(Protocol):
    """What a run leaves for `Expectation.compare`: the kernel's header and, per global source, its
    bytes, which of them a simulated CTA wrote, and which hold partial sums."""

    @property
    def h(self) -> Header: ...

    @property
    def gmem(self) -> dict[str, np.ndarray]: ...

    @property
    def gwritten(self) -> dict[str, np.ndarray]: ...

    @property
    def greduced(self) -> dict[str, np.ndarray]: ...


class Expectation(Protocol):
    def initial(self, source: str, box: Optional[TmaBox], nbytes: int, rng: np.random.Generator) -> Optional[np.ndarray]:
        ...

    def compare(self, run: RunData) -> Verdict:
        ...


__all__ = ["Expectation", "RunData", "Verdict"]
