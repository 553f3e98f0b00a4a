"""The sm_100a megakernel's decode path (skinny M: A of fewer than 64 rows, T <= 16 tokens) on the CPU;
nothing of it has run on a B200. The stage rule (`warpy.mega.tiling.gemm_pair_a_rows` /
`gemm_pair_k_boxes`: a CTA's A box A's rows rounded up to 8, its B box its half of the tile's weight
rows, as many K boxes a stage as fit a page), the instructions that encode it (chunked copies where K
is whole K boxes), the body's refusals of any other geometry, the checker with values on the chunked
path, and the path's seeded faults. docs/megakernel.md ("The decode path on sm_100a") says why this
path and not swap-AB. The sm_100a interpreter's other tests (tests/kernels/test_mega_sm100.py) run the
decode path too: gemm2, llama1 and the Llama-MLP stack's ptxas case are decode graphs."""

from __future__ import annotations

import os
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from warpy.kernels import mega
from warpy.kernels.mega_sm100_gemm import Gemm
from warpy.mega.encode import decode
from warpy.mega.tiling import (GEMM_K_STEP, GEMM_MAX_K_BOXES, PAGE_BYTES, cdiv, gemm_a_rows, gemm_k_boxes,
                               gemm_pair_a_rows, gemm_pair_k_boxes, gemm_stage)

SLOW = bool(os.environ.get("WARPY_SLOW"))
slow = pytest.mark.skipif(not SLOW, reason="slow: set WARPY_SLOW=1")
GRAPHS = os.path.join(os.path.dirname(__file__), "graphs")
ROW = GEMM_K_STEP * 2  # a swizzled row of K: 128 bytes


@given(st.sampled_from([128, 256]), st.integers(1, 16).map(lambda k: 16 * k), st.integers(1, 300))
def test_the_pair_stage_rule(tm: int, tn: int, rows: int) -> None:
    """A CTA's A box is its share of the tile's rows (tile_m / 2), or for a 128-row tile over fewer
    than 64 rows those rows rounded up to 8, where the stage then reaches the 64 rows the pair MMA
    reads from the last A box's start; a stage holds one K box of a full-height tile, else as many
    (A box, half-B box) pairs as fit a page, at most GEMM_MAX_K_BOXES."""
    ar, kb = gemm_stage("tcgen05", tm, tn, rows)
    assert (ar, kb) == (gemm_pair_a_rows(tm, tn, rows), gemm_pair_k_boxes(tm, tn, ar))
    half, bn = tm // 2, tn // 2
    if ar == half:
        assert kb == 1
        short = max(8, 8 * cdiv(rows, 8))
        assert tm == 256 or short >= half or short + gemm_pair_k_boxes(tm, tn, short) * bn < half
        return
    assert tm == 128 and rows < half and ar % 8 == 0 and rows <= ar < rows + 8 and ar >= 8
    assert ar + kb * bn >= half  # the MMA's 64 rows from box kb-1's start are the stage's own
    assert 1 <= kb <= GEMM_MAX_K_BOXES and kb * (ar + bn) * ROW <= PAGE_BYTES
    assert kb == GEMM_MAX_K_BOXES or (kb + 1) * (ar + bn) * ROW > PAGE_BYTES  # the page is used


def test_the_pair_stage_rule_golden() -> None:
    """Llama-3.2-1B's decode tiles (the tile rule's 128x128 gate/up and 128x32 down tiles) at T = 1 and
    16, a 128x16 tile, and tiles the rule leaves whole; sm_90a's rule through the same entry."""
    assert [gemm_stage("tcgen05", 128, tn, t) for tn in (128, 32, 16) for t in (1, 16)] == \
        [(8, 3), (16, 3), (8, 10), (16, 8), (8, 12), (16, 10)]
    assert gemm_stage("tcgen05", 128, 64, 64) == (64, 1) and gemm_stage("tcgen05", 256, 128, 1) == (128, 1)
    assert gemm_stage("tcgen05", 128, 128, 57) == (64, 1)  # 64 rows + 2 x 64 of B: still whole
    for tm, tn, t in ((64, 16, 1), (64, 64, 16), (128, 128, 5)):
        ar = gemm_a_rows(tm, tn, t)
        assert gemm_stage("wgmma", tm, tn, t) == (ar, gemm_k_boxes(tm, tn, a_rows=ar))


CASES = [("llama-small", 1), ("llama-small", 16), (os.path.join(GRAPHS, "mlp_chunked.py"), None),
         (os.path.join(GRAPHS, "gemm_split.py"), None), (os.path.join(GRAPHS, "gemm2.py"), None)]


@pytest.mark.parametrize("graph,tokens", CASES)
def test_decode_instructions_encode_the_stage(graph: str, tokens: Any) -> None:
    """Every gemm instruction of a decode graph on sm_100a carries the rule's stage: A's box ar rows,
    B's tile_n / 2 (times the stage's K boxes where one chunked copy moves them: K whole K boxes),
    k_boxes, k_step (a box or the stage's), k_stages; the body takes it, and refuses in one line a
    stage of another geometry; the launch has a code path per (tile_m, tile_n, ar)."""
    pl = mega.plan(mega.MegaProblem(graph, tokens, arch="sm_100a"), mega.MegaConfig())
    body = Gemm()
    prog = pl.schedule.program
    seen = set()
    for ins, f in zip(pl.schedule.instrs, decode(pl.encoded.words)):
        if f["opcode"] != 1:
            continue
        node = prog.nodes[ins.node]
        rows, k = node.operands[0].view.shape
        tm, tn = f["tile_m"], f["tile_n"]
        ar, kb = gemm_stage("tcgen05", tm, tn, rows)
        assert ar < tm // 2  # every gemm of these graphs is a decode one
        chunk = kb if k % GEMM_K_STEP == 0 and k // GEMM_K_STEP >= kb else 1
        assert (f["k_boxes"], f["k_step"], f["k_stages"]) == (kb, GEMM_K_STEP * chunk, cdiv(k, GEMM_K_STEP * kb))
        assert (f["op1.box_16"] * 16, f["op2.box_16"] * 16) == (ar * ROW * chunk, tn // 2 * ROW * chunk)
        assert f["op1.rank"] == pl.encoded.maps[f["op1.tmap"]].tma.rank
        assert body.refuse(f) is None, body.refuse(f)
        seen.add((tm, tn, ar))
        for bad in (dict(k_boxes=kb - 1), dict(k_stages=f["k_stages"] + 1), {"op1.box_16": f["op1.box_16"] * 2},
                    {"op2.box_16": f["op2.box_16"] * 2}, dict(k_step=GEMM_K_STEP * (kb + 1))):
            why = body.refuse(dict(f, **bad))
            assert why and "\n" not in why, bad
    assert set(pl.launch.gemm_tiles) == seen and seen


def test_the_chunked_path_is_clean_with_values() -> None:
    """K of 768 (12 K boxes, a stage's): one copy of A's 12 boxes and one of B's (3-D maps), every CTA
    of both clusters clean, the values within the gemm tolerance of the reference."""
    pr = mega.MegaProblem(os.path.join(GRAPHS, "mlp_chunked.py"), arch="sm_100a")
    (f,) = {(x["k_step"], x["k_boxes"], x["op1.rank"]) for x in decode(mega.plan(pr, mega.MegaConfig()).encoded.words)
            if x["opcode"] == 1}
    assert f == (768, 12, 3)
    rep = mega.check_launch(pr, coloured=False)
    assert rep.ok, rep.text()
    assert rep.values_checked == 5 * 48 and rep.values_wrong == 0


@slow
@pytest.mark.parametrize("graph,tokens,mode", [("llama-small", 1, "static"), ("llama-small", 16, "dynamic"),
                                               ("mlp-small", 1, "dynamic"), (os.path.join(GRAPHS, "gemm_split.py"),
                                                                             None, "static")])
def test_decode_graphs_are_clean_with_values(graph: str, tokens: Any, mode: str) -> None:
    """The decode graphs of the acceptance (T = 1 and 16), static queues and cluster launch control,
    and two A-row paths of one tile shape: every CTA clean, every value within the tolerance (about a
    minute or two each)."""
    rep = mega.check_launch(mega.MegaProblem(graph, tokens, arch="sm_100a"), mega.MegaConfig(mode=mode),
                            coloured=False)
    assert rep.ok, rep.text()
    assert rep.values_checked > 0 and rep.values_wrong == 0


GEMM2 = mega.MegaProblem(os.path.join(GRAPHS, "gemm2.py"), arch="sm_100a")


@pytest.mark.parametrize("fault,kind,what", [
    # a stage's expected bytes one box pair's while it copies k_boxes pairs (K of 72: a copy a box):
    # the stage completes before its copies land, the MMAs read what nothing orders
    ("decode-tx", "order", "pages: UTCHMMA.2CTA, warp 3 reads it and UTMALDG.2D.2CTA, warp 1 writes it, and nothing "
                           "orders the two"),
    # B's box j read right after A's box j: the MMA multiplies x's K with other rows' K
    ("decode-b-offset", "data", "UTCHMMA.2CTA multiplies m1 at K byte 0 with m1 at K byte 128"),
])
def test_decode_faults_are_caught(fault: str, kind: str, what: str) -> None:
    rep = mega.check_launch(GEMM2, mega.MegaConfig(fault=fault), coloured=False, values=False)
    msgs = list(rep.problems.msgs[kind])
    assert any(what in m and re.search(r"\[found by SM [02] \(CTA 0 of cluster [01]\), the (loader|launcher), at "
                                       r"instruction \d+ \(its \d+(st|nd|rd|th): node 0 gemm", m) for m in msgs), rep.text()
