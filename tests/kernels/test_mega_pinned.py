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
before its counter waits (`Attention.load_early`), and again when a chunk of one key block stopped
splitting its keys over the warps. About 3 s a
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
    ("ew-small", None, ""): ("19e6f8455d1df70d3360b665", "d3cd3bff0ec167f88643a0b3"),
    ("ew-chain", None, ""): ("1354d5c08d152095d7fcfcb0", "2d448aa22f0c7fa08da4d86a"),
    ("gemm-small", None, ""): ("bbb868bdaae556a66ef73f35", "63ec40aade2da605c01962c1"),
    ("gemm-epi", None, ""): ("ca9699de13bdd5a62464cecf", "46e3c863097dc7329212fd71"),
    ("acts", None, ""): ("bffd54afb4533f91fbc68a93", "e68bf2bf66aeaa0ebe5d5697"),
    ("mlp-small", None, ""): ("9cb2664d26fdcdf487a39b4a", "94b34e3b239ae25dc46fb825"),
    ("mlp-small", 1, ""): ("d321d844f21e375cf465e740", "b16fd02cf55932045d3b0408"),
    ("llama-small", None, ""): ("1f3c8204ee4e325d97f580c6", "5a769caf04f366dcd6696fe5"),
    ("llama-small", 1, ""): ("816e757e871983fc2bc8f4fa", "fc3d159003d77aab5e51dae0"),
    ("llama-small", 16, ""): ("537a2120c6d3a05a4645bfc6", "ffb9067c483eeb24e568f672"),
    ("mlp-small", None, "fault=no-release"): ("1617ee928b456ef934b2e2d5", "859f3a98facfaf87ce3dd666"),
    ("gemm-small", None, "fault=early-page-free"): ("8360ab6004c04b38cb226f86", "9322ea842d796ebfa1558a8c"),
    ("ew-chain", None, "fault=wrong-epoch"): ("2154009b3b96779f6beab622", "7997a7344685a852810d90b1"),
    ("ew-small", None, "fault=drop-arrive"): ("021667ef99da9f0bed1b670f", "c40737efc8a9e17140442751"),
    ("mlp-small", None, "fence=once"): ("7087887e4566d92bee39788a", "50b3a4c373c1cb42648a7971"),
    ("mlp3", 1, ""): ("b21ae14499e5691e402d830c", "98c4de40b3b5e9a2ffde1a6f"),
    ("llama-small", 1, "prefetch=1"): ("5093f96da32c097533341e45", "c6f2435ee856f8fb67ae3e56"),
    ("llama-small", 1, "glu=0"): ("ba0fa89af918614b28ef3a5f", "ec4a67186235bc4cec92d71e"),
    ("mlp-small", None, "backoff=1024"): ("59addfbba9e69a60eef0c37f", "c671bf3c5bb661046632740b"),
    ("llama-small", 1, "norm=0"): ("c4e28976dd4aa2a1cb34c978", "09be14c1dd93517d57653a39"),
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
