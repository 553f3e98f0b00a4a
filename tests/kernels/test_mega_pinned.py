"""The sm_90a megakernel programs' SASS text pinned by hash (as tests/kernels/test_pinned_text.py
does for the GEMMs): a refactor of the interpreter (kernels/mega_sm90.py, its shared code in
kernels/mega_common.py, the bodies) that changes one byte of what an example graph's program
prints fails here, naming the program. When a change is meant to alter the programs, update the
hashes in the same commit and say why in its message. (sha256 of the named and of the coloured
text, first 24 hex digits.)

The hashes were taken before kernels/mega_sm90.py moved onto kernels/mega_common.py. About 3 s a
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
    ("ew-small", None, ""): ("344b16834dd9c758ba108486", "cffafc06f59182bec333130b"),
    ("ew-chain", None, ""): ("9fcfe916600b8090887a87ef", "df01b8fff3ee640e97079bdf"),
    ("gemm-small", None, ""): ("e1fbac0a2e3ab9ba440cab20", "ef210de40018a45a8898e81b"),
    ("gemm-epi", None, ""): ("6296c1aced92ac99a59ca641", "2fee887d18653d656b416065"),
    ("acts", None, ""): ("bfe40d8ada1d082857395352", "36945c1d798ff8a1952d3b81"),
    ("mlp-small", None, ""): ("dbfb72ea71798248096a74ef", "59bd5871efff896c038d40c4"),
    ("mlp-small", 1, ""): ("1fc8dc1afc0c65f6dba4656f", "61e52f1a5bf5622b6abd8eb1"),
    ("llama-small", None, ""): ("2710f425debd2c7199c32643", "08839b3c3b59413579a3d25b"),
    ("llama-small", 1, ""): ("454f425f053d0b8b3b5e9243", "88dd669de936ef37dd26ca19"),
    ("llama-small", 16, ""): ("5681cbf2ac0c311b8ba8585d", "c40f34d27f1e1b1a8e0557f7"),
    ("mlp-small", None, "fault=no-release"): ("f3de5bbb9bdb489cac4d9caf", "101600bbe97a7bb017c161dd"),
    ("gemm-small", None, "fault=early-page-free"): ("32262a2e8115bf6c2f3a6df8", "e8b89d009e780e73d7e5cc88"),
    ("ew-chain", None, "fault=wrong-epoch"): ("6ed24e033b78481ee8bb2c18", "8da7f3322ab178f8c5ec9698"),
    ("ew-small", None, "fault=drop-arrive"): ("9f2879f6a384f026578f73d1", "9973884645a2faf86074158a"),
    ("mlp-small", None, "fence=once"): ("2a6d9e687faae88fcbcd9768", "cfd1a99409fd0f0b254a40a2"),
    ("mlp3", 1, ""): ("cf66587209f57b699b5d9ca2", "82ae5ece53aa0fb05ca1383a"),
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
