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
splitting its keys over the warps, and again when the partials body moved onto the tensor cores
(wgmma key blocks; every program holds every body's code), and a case with the decode projections
writing their heads themselves (the decoder's rule since then, with `fresh`: the roped gemm's path;
every other program unchanged) was added. About 3 s a
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
    ("ew-small", None, ""): ("081eab8414e8d4b6cd17775f", "7a6f465caecf96eef0cf12f4"),
    ("ew-chain", None, ""): ("0c61c9e90267f5ea241d4b5f", "9991fa50be5957c7bea3bdd2"),
    ("gemm-small", None, ""): ("304969576a1559ddb10bfe9a", "1fa6b077911221a966d56e1b"),
    ("gemm-epi", None, ""): ("60144553a46ece40caf7938d", "b849ad6dea178ad8fea8c6a6"),
    ("acts", None, ""): ("de281a4068503e3720b5cb2e", "2a4797e37ac3b4bfd4a2a60f"),
    ("mlp-small", None, ""): ("f8e977786a06d2fd417b5463", "baf80f920ca30a049e51fafc"),
    ("mlp-small", 1, ""): ("d42825c4ecad32f9d1efdff8", "d2cd38dcb102698a56c81957"),
    ("llama-small", None, ""): ("b57e0d2cf735b84807c0fce9", "94356304c3e7cc10991a77c0"),
    ("llama-small", 1, ""): ("3411b28c3ec79dca629b10ef", "3db869ada2fb658cfa04de32"),
    ("llama-small", 16, ""): ("de9651f7eeb3bc80d5c8b6ed", "4acab6c98598d1cebedab998"),
    ("mlp-small", None, "fault=no-release"): ("7d47e84240d522bd6d08adf8", "10bfc4fe34d989f92c7987e0"),
    ("gemm-small", None, "fault=early-page-free"): ("6b78d0637685aa9643bea52d", "3f15eb68070e6f12a0ca9ab0"),
    ("ew-chain", None, "fault=wrong-epoch"): ("3e6da4352cef97200bdf4205", "00c0b805f7a9581f45e62fe6"),
    ("ew-small", None, "fault=drop-arrive"): ("7ef4c736f6e5b449dcf140f3", "437dbdf15c5a970741ca717e"),
    ("mlp-small", None, "fence=once"): ("7e8ce64006b99c1c075a16e6", "b663e32e529ab78264cf1e36"),
    ("mlp3", 1, ""): ("816f76540df497d55fcd8531", "1bb48804138c79a12ca02593"),
    ("llama-small", 1, "prefetch=1"): ("e0ce49b0136eada30863c714", "62cd5cd8d67a63fad015496b"),
    ("llama-small", 1, "glu=0"): ("51a0e7384ff8404e10ea455a", "ab0d1d64356ab306f46e39cf"),
    ("mlp-small", None, "backoff=1024"): ("1248aa088ff57a3c54b9b073", "4d53bd0b594927dd73fc4981"),
    ("llama-small", 1, "norm=0"): ("4b0239d2edcefaf88ba10d58", "a3359d9c69b1bc4ddebc638c"),
    ("decoder-small", None, ""): ("e9f75dc1d97c5bc236d35d13", "90428f8969bfe335887fcad5"),
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
