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
took 32 chunks at once (kernels/mega_attention.py; every program holds every body's code). About 3 s a
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
    ("ew-small", None, ""): ("1b61bf8269d7cf1f7dc3f1c7", "fae2e70085b81728706b3a83"),
    ("ew-chain", None, ""): ("b912b9c6c17903db99853de5", "9bc78d0c61bc570082872086"),
    ("gemm-small", None, ""): ("0ecb09dfdc809e6a856166d8", "8b5ce42bc88b67ed4ea98dfc"),
    ("gemm-epi", None, ""): ("c755d34979c33135212aac57", "8d67ebdbeb8ed901a031d682"),
    ("acts", None, ""): ("c7f4e71ceed6d6eecc22f0e4", "dfae782a73fc2c4d45db1ac7"),
    ("mlp-small", None, ""): ("29a9e5a7f80b7de7d1e4441b", "aee1c5171ea6141d86a5fbef"),
    ("mlp-small", 1, ""): ("71f99204780cd775c8335b99", "0708f03da67b845cd687ac2d"),
    ("llama-small", None, ""): ("372459c91221debf02edf809", "321f6ae2ad6ae141e059e693"),
    ("llama-small", 1, ""): ("accf8373514b9fe3e9a9dbf2", "871efd3c2add9535dbd39fd9"),
    ("llama-small", 16, ""): ("42760d2b9599d64c07482942", "48301ae0b7b43ddb875ceee7"),
    ("mlp-small", None, "fault=no-release"): ("af05a0a9d111842a6918de38", "ed9c43aa7e6114fe3cace987"),
    ("gemm-small", None, "fault=early-page-free"): ("6244d85c246f67bdad49db8a", "d6d36452354fd7b7598ef29e"),
    ("ew-chain", None, "fault=wrong-epoch"): ("60780e5dcc28a706d588a287", "fa429483c62c2c9ad79ae4c1"),
    ("ew-small", None, "fault=drop-arrive"): ("9d85d0fc9cb3a7fc0bf16ae2", "eb6abaf05ff0eab0eaba12fc"),
    ("mlp-small", None, "fence=once"): ("5230adeb5f8e882e3dfbc493", "9e826be5b01ace0dcce58870"),
    ("mlp3", 1, ""): ("133627fd0e27309e790bded7", "caa867d8f3f57631954a55f1"),
    ("llama-small", 1, "prefetch=1"): ("e39678a54c2b35b905aba754", "f5d555019690389487900d6a"),
    ("llama-small", 1, "glu=0"): ("efe2f382e44a5e3488b63633", "20e13c1cfaf2e6d36b56494b"),
    ("mlp-small", None, "backoff=1024"): ("d6dda4ce939b6155d083e6f1", "7bd3606ff8ee2a8cf2a235f6"),
    ("llama-small", 1, "norm=0"): ("173b9fc168645e396d49986b", "a2a45e5359ffa43add96ab4a"),
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
