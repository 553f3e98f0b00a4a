"""The sm_90a megakernel programs' SASS text pinned by hash (as tests/kernels/test_pinned_text.py
does for the GEMMs): a refactor of the interpreter (kernels/mega_sm90.py, its shared code in
kernels/mega_common.py, the bodies) that changes one byte of what an example graph's program
prints fails here, naming the program. When a change is meant to alter the programs, update the
hashes in the same commit and say why in its message. (sha256 of the named and of the coloured
text, first 24 hex digits.)

The hashes were taken before kernels/mega_sm90.py moved onto kernels/mega_common.py (which changed
no program's text), then taken again when the loader began copying a gemm's early operand (the
weight) before its load-stage waits (every program: the loader's early step), and again when the
controller took mega_common's fetch (the fetch's size and the slot's arming now follow the queue
address's computation inside the loop: the same instructions, reordered), and again for the programs
with decode tiles when a gemm's A box shrank to A's rows rounded up to 8 (`gemm_a_rows`: more K
boxes a stage; the other programs' text unchanged), and again for every program when the gemm's
copies learned chunked maps (a stage's K boxes in one copy an operand where K is whole K boxes:
the loader's copies take a third shift, in every program's gemm code), and again when the decode
attention bodies joined the table (every program holds every body's code). About 3 s a
program: six in the default run, every one with WARPY_SLOW=1."""

from __future__ import annotations

import hashlib
import os
from typing import Optional

import pytest

from warpy.kernels import mega

SLOW = os.environ.get("WARPY_SLOW") == "1"

#: (graph, tokens, config) -> (named, coloured)
CASES: dict[tuple[str, Optional[int], str], tuple[str, str]] = {
    ("ew-small", None, ""): ("e3ad27e9b391df0e92147ced", "e3ca9f82d0403259ce75ffd1"),
    ("ew-chain", None, ""): ("1d30a67138afbf23ed124b21", "e416d89a67a75c4bad9acc2e"),
    ("gemm-small", None, ""): ("eb870e076bfb91fc9693e969", "d82869a5c3c36d1160afd9da"),
    ("gemm-epi", None, ""): ("acc30448537c8b6cc587dc48", "639c4880c3ff17f01284ab13"),
    ("acts", None, ""): ("5b73492b98cebc045ceed28d", "c0baae056fe03c9af868e0c6"),
    ("mlp-small", None, ""): ("435901baea0a10f34165fe7b", "1263bf6a0cd7e8db9f54a3b4"),
    ("mlp-small", 1, ""): ("92c90f6b7a6d3854742644e3", "61f4e1ce57d2f8ff6c3c18aa"),
    ("llama-small", None, ""): ("42b3dc18c0a85c80036f9ba3", "277cc407e1df0473f7e5b2b4"),
    ("llama-small", 1, ""): ("71ef0ec0dd3d54f2525466f4", "bd93a366f823c6dd31ce0be6"),
    ("llama-small", 16, ""): ("9d598ad0d8eb347cc576daba", "619709b00ad51119486522cb"),
    ("mlp-small", None, "fault=no-release"): ("f958ce3051af231be20d0006", "f9d262e6a20f12bdc7be97b6"),
    ("gemm-small", None, "fault=early-page-free"): ("1c4cc6e609f4f024b61db455", "af5449388c351f0976b8782b"),
    ("ew-chain", None, "fault=wrong-epoch"): ("b3141712db88b349d78bcb3a", "c65948e70b590ce07b0008af"),
    ("ew-small", None, "fault=drop-arrive"): ("b702d017755c79b882e3ba59", "9e3e2c2557ea2bf62d62a4fa"),
    ("mlp-small", None, "fence=once"): ("2a9bf9999b026b154a3d9d5d", "f0e4cc4602c1f5596052652a"),
    ("mlp3", 1, ""): ("4f08e9367d00a83698038dd7", "6c090afe3b0022b5176f8912"),
}

#: the default run's (every body, 64-row and decode tiles; ~18 s): the rest with WARPY_SLOW=1
FAST = [("ew-chain", None, ""), ("gemm-epi", None, ""), ("acts", None, ""), ("mlp-small", 1, ""),
        ("llama-small", None, ""), ("llama-small", 16, "")]


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _id(key: tuple[str, Optional[int], str]) -> str:
    g, t, c = key
    return g + (f" T={t}" if t else "") + (f" {c}" if c else "")


@pytest.mark.parametrize("key", [pytest.param(k, id=_id(k), marks=() if k in FAST else
                                              pytest.mark.skipif(not SLOW, reason="WARPY_SLOW=1")) for k in CASES])
def test_megakernel_text_is_unchanged(key: tuple[str, Optional[int], str]) -> None:
    graph, tokens, config = key
    problem = mega.MegaProblem(graph, tokens)
    prog = mega.build(problem, mega.configure(problem, config) if config else None)
    assert (_h(str(prog.kernel())), _h(str(prog.coloured()))) == CASES[key], _id(key)
