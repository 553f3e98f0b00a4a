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
query rows a warp (kernels/mega_attention.py; every program holds every body's code), and again when
its key blocks were numbered across a chunk's boxes (every program), and again for
the llama cases when the rule (`kernels.mega.choose`) turned SwiGLU's fusion on for sm_90a (their
default is now the fused program, the old `glu=1` hash; the unfused one is pinned as `glu=0`, the
old default's hash; every other program unchanged), and again for every program when the rule
capped the counter polls' back-off at 128 ns (`kernels.mega.backoff_default`; `backoff=1024` is
the earlier text, pinned on mlp-small with the earlier hash), and again for the llama cases when
the rule fused each decode rmsnorm into the gemms after it (`kernels.mega.norm_default`: the gemm's
norm path; `norm=0` is the earlier text, pinned at T = 1 with the earlier hash), and again for the
programs with a 64-row plain gemm tile whose stage holds an even number of K boxes when its two
warpgroups split each stage's K boxes rather than its columns (`kernels.mega_gemm.k_split`: the
decode tiles; mlp-small's 64-row A boxes hold 3 K boxes a stage, its text unchanged), and again for every program when the attention combine's lanes
took 32 chunks at once (kernels/mega_attention.py; every program holds every body's code), and again
for every program when the partials body copied the K and V of a chunk nothing in the launch writes
before its counter waits (`Attention.load_early`). About 3 s a
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
    ("ew-small", None, ""): ("e54e8b74f77e7aef37b246ed", "667698c9cd94806a00658a0f"),
    ("ew-chain", None, ""): ("7b4acebe1dee1f505820d4e1", "f612fc1d27401dc25a057cbe"),
    ("gemm-small", None, ""): ("e237fa92688bae5a80f8e66c", "d038cac616aab68afc23bd8b"),
    ("gemm-epi", None, ""): ("f97ac7106bcd9d3ff8cb8e1f", "37882ec44b6f0a85591dc458"),
    ("acts", None, ""): ("f1ea29408c3fd8446b6d4f2e", "83040fd068500162ccc07a86"),
    ("mlp-small", None, ""): ("5a17444262055f70c22942ca", "f6d287b691e8bb973bbc529c"),
    ("mlp-small", 1, ""): ("3b92a2c05aa76a996b0b4516", "1e97d7c459e3c4d742b7a7cf"),
    ("llama-small", None, ""): ("a77bf5910f4a4e4efef6aaae", "5c81fe8c4c4822a021f4ffc4"),
    ("llama-small", 1, ""): ("be58f6bd913fbe115569acc5", "e1ecc4de0efe343ac035e157"),
    ("llama-small", 16, ""): ("4dc0bd067849cf21d81b52d6", "b888ed95a78f54b570215ea9"),
    ("mlp-small", None, "fault=no-release"): ("e45f4dae5fdcc2e8a9bb9072", "c240ec4f48950c64144fb890"),
    ("gemm-small", None, "fault=early-page-free"): ("bc72259fbfa52586c3ee5259", "fbd48eb6da278986cb03dfa0"),
    ("ew-chain", None, "fault=wrong-epoch"): ("3c9ff57c3a7b6b90ae4c36d8", "2fc23456b090840024b870bf"),
    ("ew-small", None, "fault=drop-arrive"): ("c50243b422c9838d88d0c43f", "ecf9645daa765e5219873552"),
    ("mlp-small", None, "fence=once"): ("ebd335a5ca1df665d3075475", "44cd6c228f22912701e0646e"),
    ("mlp3", 1, ""): ("970197063922bf4f612dda5a", "f70e4cc500b8a0cd95e388d4"),
    ("llama-small", 1, "prefetch=1"): ("d6b720b8648553c48e44970a", "8c3c7c579245fc70678d3368"),
    ("llama-small", 1, "glu=0"): ("abb8a4cb5b2c8265e0b625f3", "94f1b788185adb95809c94e0"),
    ("mlp-small", None, "backoff=1024"): ("a3359767d6275b16f8458213", "b2297c17f7fab9dca99daf6c"),
    ("llama-small", 1, "norm=0"): ("270e060d5e2556fd6cbf4776", "b7db853e5dc54634bdea120b"),
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
