"""MN-major GEMM operands read in place on sm_100a (issue 19): A stored K x M (`a=km`) and/or B stored
K x N (`b=kn`) land M / N innermost in 64-row TMA boxes, described by MN-major UMMA descriptors, and
the instruction descriptor's A/B major bits say so (SwapAB: the MMA's A is the Bᵀ tile, so its
a_major is B's layout and its b_major A's). Every combination checked with values on every CTA on
ragged shapes; programs whose major bits are wrong caught; the rule's configurations adapted (A's
rows a CTA whole boxes: bm 128 or 256; one pair a cluster where B is MN-major); what is refused,
refused in one line; K-major programs unchanged (tests/kernels/test_pinned_text.py). Not run on a
GPU: no B200 (docs/blackwell.md). The wider configurations run with WARPY_SLOW=1."""

from __future__ import annotations

import os
import re

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.check.report import CheckOptions, check_kernel, options
from warpy.errors import WarpyError
from warpy.isa.text import parse
from warpy.kernels import gemm as G
from warpy.kernels.gemm_sm100 import Sm100Config, check_config, choose_sm100, for_majors
from warpy.layout.desc import decode_umma_idesc

COMBOS = [["a=km"], ["b=kn"], ["a=km", "b=kn"]]
SLOW = pytest.mark.skipif(os.environ.get("WARPY_SLOW") != "1", reason="WARPY_SLOW=1")


def _idesc(text: str) -> int:
    found = set(re.findall(r"UMOV zero_idesc\.1, (0x[0-9a-f]+)", text))
    assert len(found) == 1, found
    return int(found.pop(), 16)


@pytest.mark.parametrize("words", COMBOS, ids=lambda w: "+".join(w))
@pytest.mark.parametrize("M,N,K,out,config", [
    (200, 136, 72, "bf16", None),  # ragged M, N and K: the boxes' out-of-bounds fill
    pytest.param(256, 320, 512, "fp32", "bm=256,cta_rows=256,stages=4,accs=1", marks=SLOW),  # two stacked MMAs
    pytest.param(320, 192, 256, "fp16", "tma_store=true,bm=128,cta_rows=128,stages=4", marks=SLOW),
])
def test_every_layout_combination_exact(words: list[str], M: int, N: int, K: int, out: str,
                                        config: str | None) -> None:
    prob = G.FAMILY.problem([M, N, K] + words, arch="sm_100a", out_dtype=out)
    prog = G.build(prob, G.configure(prob, config) if config else None)
    text = str(prog.kernel())
    f = decode_umma_idesc(_idesc(text))
    assert (f.a_major, f.b_major) == ("MN" if "b=kn" in words else "K", "MN" if "a=km" in words else "K")
    assert ("_akm" in prog.name) == ("a=km" in words) and ("_bkn" in prog.name) == ("b=kn" in words)
    with options(CheckOptions(all_ctas=True)):
        rep = check_kernel(prog.kernel(), None, values=True, expect=G.FAMILY.expectation(prob))
    assert rep.ok, rep.messages()
    assert rep.values_checked == M * N and rep.values_wrong == 0


@pytest.mark.parametrize("bit,what", [(15, "sbt"), (16, "sa")])
def test_a_wrong_major_bit_is_caught(bit: int, what: str) -> None:
    """The instruction descriptor's A (Bᵀ tile) or B (A tile) major bit cleared: the tensor core reads
    the MN-major tile as K-major; without values the checker finds an operand tile read where nothing
    landed and boxes of different K multiplied, with values most of C wrong."""
    prob = G.GemmProblem(192, 256, 128, out_dtype="bf16", arch="sm_100a", a_major="MN", b_major="MN")
    text = str(G.build(prob).kernel())
    v = _idesc(text)
    bad = parse(text.replace(f"UMOV zero_idesc.1, {v:#x}", f"UMOV zero_idesc.1, {v ^ (1 << bit):#x}"))
    rep = check_kernel(bad, None, values=True, expect=G.FAMILY.expectation(prob))
    msgs = "\n".join(rep.messages(20))
    assert f"{what}[" in msgs and "nothing has written it" in msgs
    assert "the boxes the copy engine landed there disagree" in msgs
    assert re.search(r"values: \d+ of 24576 elements of C differ from numpy", msgs)


def test_a_k_major_program_fails_the_mn_major_expectation() -> None:
    dense = G.GemmProblem(128, 128, 64, out_dtype="fp32", arch="sm_100a")
    mn = attrs.evolve(dense, a_major="MN", b_major="MN")
    rep = check_kernel(G.build(dense).kernel(), None, values=True, expect=G.FAMILY.expectation(mn))
    assert rep.values_wrong > 0


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 8192), st.integers(1, 8192), st.integers(8, 16384), st.sampled_from(["fp32", "bf16"]),
       st.sampled_from([("MN", "K"), ("K", "MN"), ("MN", "MN")]))
def test_the_rule_adapts_every_configuration(M: int, N: int, K: int, out: str, majors: tuple[str, str]) -> None:
    """Whatever the table picks, the configuration for MN-major operands is valid and reads them: A's
    rows a CTA whole 64-row boxes, one pair a cluster for an MN-major B; K-major problems keep theirs."""
    cfg = for_majors(choose_sm100(M, N, K, out_dtype=out), *majors)
    check_config(cfg)
    if majors[0] == "MN":
        assert (cfg.bm // 2) % 64 == 0
    if majors[1] == "MN":
        assert cfg.pairs == 1
    base = choose_sm100(M, N, K, out_dtype=out)
    assert for_majors(base, "K", "K") == base


@pytest.mark.parametrize("kw,config,message", [
    ({"a_major": "MN"}, Sm100Config(bm=64, cta_rows=128, stages=4, tma_store=False),
     r"^A is MN-major: each CTA's 32 rows of A \(bm/2\) must be whole 64-row boxes \(bm 128 or 256\)$"),
    ({"b_major": "MN"}, Sm100Config(bm=128, cta_rows=128, stages=4, pairs=2, tma_store=False),
     r"^B is MN-major: its tile is not multicast in slices \(pairs=1\)$"),
])
def test_refusals(kw: dict[str, str], config: Sm100Config, message: str) -> None:
    prob = G.GemmProblem(256, 256, 64, arch="sm_100a", **kw)  # type: ignore[arg-type]
    with pytest.raises(WarpyError, match=message):
        G.build(prob, config)
    with pytest.raises(WarpyError, match=r"^A is MN-major: its rows of 100 bf16 elements are 200 bytes"):
        G.GemmProblem(100, 64, 64, arch="sm_100a", a_major="MN")
