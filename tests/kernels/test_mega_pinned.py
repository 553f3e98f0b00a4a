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
the loader's copies take a third shift, in every program's gemm code). About 3 s a
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
    ("ew-small", None, ""): ("95983a503b6f842fceec3d91", "56a3f9fb46e8c8f6b940d345"),
    ("ew-chain", None, ""): ("00db13a3d45c224b044a8342", "51a456b73df68d7fa0fe1016"),
    ("gemm-small", None, ""): ("27adde90c82b78adc4f6e603", "c56d3cacf19276f34f8095b2"),
    ("gemm-epi", None, ""): ("bb8524b69946c0c4cf425acf", "e7ae5fb7ebb10bad06c7cb41"),
    ("acts", None, ""): ("d0b34bd67915cfba21376883", "273331ef5dc713c02b1361c2"),
    ("mlp-small", None, ""): ("3d50e98eb36eb48baaf60173", "b700f19777ee76dab775e0b4"),
    ("mlp-small", 1, ""): ("209709d28b057c3c7459122a", "15e6b6a501480b6a3ed6f113"),
    ("llama-small", None, ""): ("9fbff6b1b0abde424de7a456", "de914244ec40db7891fa17ef"),
    ("llama-small", 1, ""): ("14d874c965a673add5fcfc8a", "6037f04d3e5b42e0bbfb75dd"),
    ("llama-small", 16, ""): ("1d8202a296d925eb435ff606", "1bbfb35c66299caf449e025e"),
    ("mlp-small", None, "fault=no-release"): ("f59659785bb94eba7e496ad9", "2e0ef241b6871ea982056dfe"),
    ("gemm-small", None, "fault=early-page-free"): ("bc6cc2f45d60b28627b51265", "7801d2c8384c9459aa9c2241"),
    ("ew-chain", None, "fault=wrong-epoch"): ("0f504be54da1e77f765ed7e8", "b2502363cfb66052bad36beb"),
    ("ew-small", None, "fault=drop-arrive"): ("ced611fbdea83c7802520eb6", "52cd1ec73087a45112a673ae"),
    ("mlp-small", None, "fence=once"): ("09074a349175ce887bbbc28c", "63a404a0efb259d9e6365b44"),
    ("mlp3", 1, ""): ("605ca7a1e7991e5f17f38323", "9e7b72e1315fb984b5c639ae"),
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
