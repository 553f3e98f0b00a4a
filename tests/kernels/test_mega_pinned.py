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
    ("ew-small", None, ""): ("d72cb3ced9dc87c9bac48f5d", "010d4e64bf5fd84470dff623"),
    ("ew-chain", None, ""): ("5e5c8dde15bdd05780f4be68", "536e7abac7ad4a210d8410f5"),
    ("gemm-small", None, ""): ("34ce367d073665672d6b7d27", "a756c6b6e47c89c005459614"),
    ("gemm-epi", None, ""): ("6ddc145c108121544be2730d", "f18894476c3fb18c06d19336"),
    ("acts", None, ""): ("d45917756a79255b204c754b", "48c44d6271224d0a460aa373"),
    ("mlp-small", None, ""): ("9bc2d349f2d8b5d3e0366738", "59d8c65de4de30d3fcaf6a92"),
    ("mlp-small", 1, ""): ("24cd118fd8b5500e48a00682", "87a2409f268c74f8352ea130"),
    ("llama-small", None, ""): ("59c13213f5ad432b98c9812a", "3489e86ecef060fec2d205bb"),
    ("llama-small", 1, ""): ("58dbaad8a7be30d9c8d29064", "7d3315d8457138b4a97a6af1"),
    ("llama-small", 16, ""): ("a45e72998eb96c707bf0fc89", "0887d8b5f69a4d3428112166"),
    ("mlp-small", None, "fault=no-release"): ("6d6632a4334ce5b913adbde0", "8ed36ba8bbf96938bc77117f"),
    ("gemm-small", None, "fault=early-page-free"): ("7c74afb20c445d10e81d8827", "c36be481ad4c2df746ca6208"),
    ("ew-chain", None, "fault=wrong-epoch"): ("8689df797d1f8955049b8790", "c5872998060438202eac48e6"),
    ("ew-small", None, "fault=drop-arrive"): ("927b256571bc942113a60865", "cab65ddfefa5c0715607c892"),
    ("mlp-small", None, "fence=once"): ("cfb78d004463261dd9a3776f", "a1c0d925e2b9539840910bc3"),
    ("mlp3", 1, ""): ("d0109561d750b09395591e31", "bdc3f01e31169adda18532e5"),
    ("llama-small", 1, "prefetch=1"): ("30f16ae8b93ded671daabb43", "6fab0f96768d63417fd65138"),
    ("llama-small", 1, "glu=0"): ("6c4d84b54957380c53ba0c99", "41cd8af9e6b9b19809593012"),
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
