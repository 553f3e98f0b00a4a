"""The megakernel's host side: an operator graph becomes tile instructions in per-unit queues, with
counters derived from access regions, a static validator and a numpy reference VM.

    from warpy.mega import Graph, build, validate, encode, vm
    g = Graph("mlp"); ...; g.output(y)
    s = build(g, "sm_90a")          # lower, tile, order, place, buffers, counters
    assert validate(s).ok           # cannot hang, cannot race
    words = encode(s).words         # (instructions, 64) uint32
    out = vm.run(s, g.random_inputs())

`compile(fn)` is the torch front-end (torch optional). Nothing here imports torch at import time,
and nothing here imports the GEMM kernels. `docs/megakernel.md` describes the design.
"""

from __future__ import annotations

from typing import Any, Callable

from warpy.mega import vm
from warpy.mega.encode import decode, encode
from warpy.mega.graph import Graph, Value
from warpy.mega.lower import lower
from warpy.mega.schedule import Schedule, build
from warpy.mega.validate import validate


def compile(fn: Callable[..., Any], arch: str = "sm_90a", mode: str = "static") -> Any:
    """A `torch.compile` backend running `fn` as one megakernel schedule (see warpy.mega.torch_frontend)."""
    from warpy.mega.torch_frontend import compile as _compile

    return _compile(fn, arch, mode)


__all__ = ["Graph", "Value", "Schedule", "build", "lower", "validate", "encode", "decode", "vm", "compile"]
