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
attention bodies joined the table (every program holds every body's code), and again when every
thread that reads an instruction slot arrived on its empty barrier (each arrival releases only its
own thread's reads: compute-sanitizer racecheck) and the timeline stopped stamping noops (every
program; a case with the weights prefetched into L2 added), and a case with SwiGLU's gate and up
gemms fused (`glu=1`: its own program; the others' text unchanged) was added, and again for every
program when the decode-attention partials body split a tile's keys over the consumer warps, four
query rows a warp (kernels/mega_attention.py; every program holds every body's code), and again for
the llama cases when the rule (`kernels.mega.choose`) turned SwiGLU's fusion on for sm_90a (their
default is now the fused program, the old `glu=1` hash; the unfused one is pinned as `glu=0`, the
old default's hash; every other program unchanged). About 3 s a
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
    ("ew-small", None, ""): ("73ab8ef936574bea808cadd6", "05fd9097cd0b542cf7649194"),
    ("ew-chain", None, ""): ("70a48150c68175e42b8e4dea", "88b373aa3901cd878a7b48af"),
    ("gemm-small", None, ""): ("782ebf86ce6d78b1507b0924", "bbce4896aa1560ec02e62fac"),
    ("gemm-epi", None, ""): ("83de021f2f2f1aa1a94148d5", "6096077131730691a062f161"),
    ("acts", None, ""): ("c14a02f7df71035696374f04", "131aa1eef9d1be9350cb51f3"),
    ("mlp-small", None, ""): ("4741b5326f741a73f856e85e", "43fa29430671060fdebea2d8"),
    ("mlp-small", 1, ""): ("a76d243f81291bf7a00660df", "81b66ba25b6f8e142f0eb2b7"),
    ("llama-small", None, ""): ("de1f30a3d4e393b7afd49c20", "0c983042bc929185f25880dc"),
    ("llama-small", 1, ""): ("7685063d0dc0b15e805915b0", "ac54bf8f156badef91d97324"),
    ("llama-small", 16, ""): ("23e443db158139f54bcbdb04", "b148db5e426becf25210df6a"),
    ("mlp-small", None, "fault=no-release"): ("0cb30023115fbafe9d91fba7", "e10bfe7d53ec3c09ed82bf3e"),
    ("gemm-small", None, "fault=early-page-free"): ("4ff027159978a3454beac3fa", "3563f23279894699f21b45ab"),
    ("ew-chain", None, "fault=wrong-epoch"): ("81e42f647790cef9bed127d9", "93f0ff139ff93e4d1729262c"),
    ("ew-small", None, "fault=drop-arrive"): ("9c936a5ec1f39b6c095cbe6f", "22ff1f255d95bba772e38f07"),
    ("mlp-small", None, "fence=once"): ("fe90c1aa9cd7e4caa5166b3c", "35f7c7aa20f8f5253c1f37cc"),
    ("mlp3", 1, ""): ("d7e553e07428a60d0ad0b54e", "b8dd36fa36c6a1420c7122ba"),
    ("llama-small", 1, "prefetch=1"): ("a6c9b2a00f078eb3e8db48c8", "8cc23e7886c6a212c56795b7"),
    ("llama-small", 1, "glu=0"): ("988e89cc2741fc10c05c24ab", "6694cc2b2a02375ce755a801"),
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
