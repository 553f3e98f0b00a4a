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
boxes a stage; the other programs' text unchanged). About 3 s a
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
    ("ew-small", None, ""): ("182cb5915ec838655c2e14c2", "a43189a05552cca5ef591b0d"),
    ("ew-chain", None, ""): ("0dc89ed7d786b56376206694", "4c9726f8c1f2bcc01978939a"),
    ("gemm-small", None, ""): ("0327213956afa41c1d4d6882", "0deb4518c6c64f8fd0581c37"),
    ("gemm-epi", None, ""): ("1e54179b2111550ec9b5982f", "ea8e96a99c576f5eb22dcaf2"),
    ("acts", None, ""): ("a30c19e6738f9dd5d7a1dc2e", "95d843baa98ec665f671591f"),
    ("mlp-small", None, ""): ("d361a2cddcc01b98656a165d", "bc09087f7ac6ca12bce3e094"),
    ("mlp-small", 1, ""): ("c52e0d14a2658923648ea71a", "79532e393e9124d4147c7229"),
    ("llama-small", None, ""): ("1218ab763b738425ff9c9388", "fbf231a9673fb9d98d2ec6e8"),
    ("llama-small", 1, ""): ("7cd911a3a392d86d87ecc731", "795ec5a9af1e91b8f6bacdd3"),
    ("llama-small", 16, ""): ("99434629276c25d02b6756df", "ed18ea5a51d0c26c394c5cf6"),
    ("mlp-small", None, "fault=no-release"): ("5f4cf5cf0d46bfb478d05299", "53b670aa80fb3967ab36cca0"),
    ("gemm-small", None, "fault=early-page-free"): ("0a94d0d1804d6ed59e315ab0", "63a34b15762a122c50d56efa"),
    ("ew-chain", None, "fault=wrong-epoch"): ("9e1c6b82271e421901e2815c", "b65226b6a56792da9edb6a79"),
    ("ew-small", None, "fault=drop-arrive"): ("59db3647d0fd68f36d657327", "3a85123946f73dc9aea49a06"),
    ("mlp-small", None, "fence=once"): ("c170dc59378ce882b5cf2f33", "f9b13ddb9f655ca47ca96a9e"),
    ("mlp3", 1, ""): ("3fdf340d214c31768d884c1d", "d859ef4fd6401900f18b3d6b"),
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
