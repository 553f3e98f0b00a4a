"""The sm_90a megakernel programs' SASS text pinned by hash (as tests/kernels/test_pinned_text.py
does for the GEMMs): a refactor of the interpreter (kernels/mega_sm90.py, its shared code in
kernels/mega_common.py, the bodies) that changes one byte of what an example graph's program
prints fails here, naming the program. When a change is meant to alter the programs, update the
hashes in the same commit and say why in its message. (sha256 of the named and of the coloured
text, first 24 hex digits.)

The hashes were taken before kernels/mega_sm90.py moved onto kernels/mega_common.py (which changed
no program's text), then taken again when the loader began copying a gemm's early operand (the
weight) before its load-stage waits (every program: the loader's early step). About 3 s a
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
    ("ew-small", None, ""): ("6d9015554f48be14646b20cc", "8601d4bb98702fa178c0ddeb"),
    ("ew-chain", None, ""): ("b16adfbecc9c92ea70e6e36a", "b9eaa47d2aaa598dbbdbc882"),
    ("gemm-small", None, ""): ("ed94f3a65c1cd579e6cddce4", "853fc1e768dd11c0cafdee22"),
    ("gemm-epi", None, ""): ("45bff4b53e3a7f43cf3b9d0e", "6f69201e3910c0096c810be9"),
    ("acts", None, ""): ("1e56959154dcf99fa6d7b3ec", "4d2ab873ac898467e0331a10"),
    ("mlp-small", None, ""): ("37f5491ed4d0fc5e4a965b9b", "3d2720de6f5fac72f1ee1ceb"),
    ("mlp-small", 1, ""): ("b75c30f860897b46ab9fd1a1", "46e85a2cc6e0355b84926f70"),
    ("llama-small", None, ""): ("45dc565904d66fbc4f1616a2", "b525cb3a3cbc22892df05411"),
    ("llama-small", 1, ""): ("50bcaa76eccbecf36439192a", "4d4da747f31539336deec9e2"),
    ("llama-small", 16, ""): ("9378207f0b9a6fcfc075cfd7", "4ad8e88f1ea116d118782f5a"),
    ("mlp-small", None, "fault=no-release"): ("c4becf433c92c66b9f4b0a03", "3253216357ea8d5a5e8f16c0"),
    ("gemm-small", None, "fault=early-page-free"): ("1dabf59f39eeba8ad3fa8c19", "4c4720ded486c710b137b01a"),
    ("ew-chain", None, "fault=wrong-epoch"): ("a6ace01f93ca23a984ce2e4c", "028bc7cc6b1825d36245071c"),
    ("ew-small", None, "fault=drop-arrive"): ("69545f2414078e334f758db1", "8fda14ec040ba4960992979f"),
    ("mlp-small", None, "fence=once"): ("0f4d3b5434b42448e2ca7e9a", "3ee57006fee5dd709d35d2f3"),
    ("mlp3", 1, ""): ("ec9aa82f7c64316b489c1287", "49a583430de9dcde609e44cd"),
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
