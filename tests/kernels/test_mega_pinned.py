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
decode tiles; mlp-small's 64-row A boxes hold 3 K boxes a stage, its text unchanged). About 3 s a
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
    ("ew-small", None, ""): ("dfa1363110f0245de830df6f", "d3f2137adbea446861f782e7"),
    ("ew-chain", None, ""): ("09fb4f3dc3f973f7fe517c68", "651777029b856415227ea0d0"),
    ("gemm-small", None, ""): ("8a025c2a00fe55a0c4d2f310", "ffd5d224f9dee9c06ade9da5"),
    ("gemm-epi", None, ""): ("6f4b202eed80630e1f07f0b4", "6dc28e28f4845a935fb955b4"),
    ("acts", None, ""): ("dab9847d4baaeceb8a491d18", "2a85d5ec269908b30bb09c56"),
    ("mlp-small", None, ""): ("348a1a5070ebb8663c73f312", "a1f6f4e3e3839cf146d4efe6"),
    ("mlp-small", 1, ""): ("9c310a4457b45dba0b56aeff", "8857dafaf035e3430d4994c4"),
    ("llama-small", None, ""): ("42a220bb5c47b3e1255df0c7", "8a8c8102b8cbee96c0417ac0"),
    ("llama-small", 1, ""): ("0bcb2c079c11d96d64cdc91a", "49b566a5e52c112b7d6a0a42"),
    ("llama-small", 16, ""): ("d8b0afac8755550ace611ad1", "808da6dd8b7a22bb30e2ccc1"),
    ("mlp-small", None, "fault=no-release"): ("d2422a0980fb3266a6beb0c3", "6b5da481b05d53b1419c429e"),
    ("gemm-small", None, "fault=early-page-free"): ("f8a3f6cb594cdb39c8d60e29", "e3e56c1bb6a400a9cc769b7d"),
    ("ew-chain", None, "fault=wrong-epoch"): ("0ed40baaa4c5e92ac79481d4", "157ac525ae43d6875e30fac9"),
    ("ew-small", None, "fault=drop-arrive"): ("04f299d9d1c9ae7f22a8e44b", "021a4055fb0f88c36d703f1b"),
    ("mlp-small", None, "fence=once"): ("ff6cdc5242af8afcea3a6ddd", "c8e589cf011f055a4eacbd61"),
    ("mlp3", 1, ""): ("790d1c4f9754ca1553a2852a", "f1ac13101378d1f29fb942a3"),
    ("llama-small", 1, "prefetch=1"): ("c71f3afd1ab8163598089806", "2c6592101cc1b9a21fb990c7"),
    ("llama-small", 1, "glu=0"): ("0a3e8afc4e54002c4b6cc516", "9801fc47b8b306171b610691"),
    ("mlp-small", None, "backoff=1024"): ("9bc2d349f2d8b5d3e0366738", "59d8c65de4de30d3fcaf6a92"),
    ("llama-small", 1, "norm=0"): ("fa2e98086e116c5096946d25", "d5a9b174f728424a05541e19"),
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
