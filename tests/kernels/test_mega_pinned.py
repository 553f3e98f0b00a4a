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
gemms fused (`glu=1`: its own program; the others' text unchanged) was added. About 3 s a
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
    ("ew-small", None, ""): ("94ea35bf5002df06a375cb66", "04fed88bbe87a7ea4d68d2f1"),
    ("ew-chain", None, ""): ("4b01215245b87ff8758a9bf9", "5da239298ada0337f0da22f4"),
    ("gemm-small", None, ""): ("250d08577efc3a9f8f22c5dd", "ca50322f4827abee2d5fb2c8"),
    ("gemm-epi", None, ""): ("7d38117cafba71273176131f", "5fa2605240bd8d271d98fddc"),
    ("acts", None, ""): ("82feed1ccf8b9e8099004b60", "d3b98885ece2fd3932889125"),
    ("mlp-small", None, ""): ("9b3a1748c0467279c25e563d", "02325b790463fd4add44abbf"),
    ("mlp-small", 1, ""): ("ae5a4bc5deaed9511c68afd6", "55f9dac18c514f8aa62937c5"),
    ("llama-small", None, ""): ("d32df704c03bcf672009a874", "568eb307d3336e16d528d09d"),
    ("llama-small", 1, ""): ("c4892f94946b014632d72e73", "2c43673a555775e1f7e51ea9"),
    ("llama-small", 16, ""): ("1241635da3584ab6c303aed3", "bbeb6712b5c0442537e7eaa8"),
    ("mlp-small", None, "fault=no-release"): ("ffccc73951d4aa9a5097cc62", "47e001c910bf7f6c9baefb69"),
    ("gemm-small", None, "fault=early-page-free"): ("2a08772293a58b458d6a2eda", "326e3a27a8f28513fdba3d7c"),
    ("ew-chain", None, "fault=wrong-epoch"): ("72f7f5eddcadf36e4b9e0aef", "1a319d1b50093700f83b8a44"),
    ("ew-small", None, "fault=drop-arrive"): ("3c9f45e9738ae850dec39058", "dc6edea44d8fe4871e60c100"),
    ("mlp-small", None, "fence=once"): ("41547281d619bc4d4cfb44c1", "8e9201b30cfbbfd8753b2001"),
    ("mlp3", 1, ""): ("11f095bceda60a474f591ecb", "410f4ad08337b596090811fd"),
    ("llama-small", 1, "prefetch=1"): ("315fa265e5abf616032c231e", "ccf4cb72f7612f0ef54f5c8b"),
    ("llama-small", 1, "glu=1"): ("4c6150c3ce1a3d395fd508f3", "f400e215d8595f3d4832d7e4"),
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
