"""Tests written to kill the tile group's mutants in the cost model with the sweep's derived
efficiencies (`kernels/gemm.py`: `tile_work`, `model_efficiencies`, `streams`, `model_choose`,
`model_config`): which kinds of tile the model may pick for a problem (A and B swapped only for a
plain skinny 16-bit problem; the measured regime's kinds replacing the hand-fitted ones), literal picks
worked out by hand from the documented model, and the pick as the cheapest allowed candidate over
drawn problems and tables."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.kernels.gemm import (TILE_EFFICIENCY, GemmProblem, model_choose, model_config, model_efficiencies,
                                sm90_cost, sm90_split, streams, tile_work)
from warpy.kernels.gemm_epilogue import Epilogue

HAND = {(bm, bn, False): e for (bm, bn), e in TILE_EFFICIENCY.items()}
# a table's derived efficiencies: ((BM, BN, swapped), regime) -> efficiency (0: not measurable)
DERIVED = {((64, 16, True), "skinny"): 0.5, ((128, 64, False), "skinny"): 0.6, ((64, 128, False), "skinny"): 0.0,
           ((128, 64, False), "narrow"): 0.7, ((64, 128, False), "narrow"): 0.65,
           ((128, 128, False), "wide"): 0.9, ((128, 256, False), "wide"): 0.95}
SKINNY = {(64, 16, True): 0.5, (128, 64, False): 0.6}
SKINNY_UNSWAPPED = {(128, 64, False): 0.6}
NARROW = {(128, 64, False): 0.7, (64, 128, False): 0.65}
WIDE = {(128, 128, False): 0.9, (128, 256, False): 0.95}


def test_tile_work_literal() -> None:
    assert [tile_work(128, 256, False, False), tile_work(64, 128, False, False), tile_work(128, 64, True, False)] == \
        [1.0, 0.25, 0.25]
    # streaming: the weight's rows a k block (B's BN; BM with A and B swapped) over 256
    assert [tile_work(64, 16, True, True), tile_work(64, 16, False, True), tile_work(128, 192, False, True)] == \
        [0.25, 0.0625, 0.75]


@pytest.mark.parametrize("p,effs", [
    (GemmProblem(32, 4096, 4096), SKINNY),
    (GemmProblem(64, 4096, 4096, "fp16", "fp16"), SKINNY),                 # M = 64 is still skinny
    (GemmProblem(65, 4096, 4096), NARROW),                                 # 64 < M <= 256: narrow, fitted apart
    (GemmProblem(256, 4096, 4096), NARROW),
    (GemmProblem(257, 4096, 4096), WIDE),
    (GemmProblem(32, 4096, 4096, batch=2), SKINNY_UNSWAPPED),
    (GemmProblem(32, 4096, 4096, a_major="MN"), SKINNY_UNSWAPPED),
    (GemmProblem(32, 4096, 4096, b_major="MN"), SKINNY_UNSWAPPED),
    (GemmProblem(32, 4096, 4096, epilogue=Epilogue(act="relu")), SKINNY_UNSWAPPED),
    (GemmProblem(32, 4096, 4096, "e4m3", "bf16"), HAND),                    # 8-bit floats: the hand fit
    (GemmProblem(128, 4096, 4096, "e5m2", "bf16"), HAND),
])
def test_the_kinds_the_model_may_pick(p: GemmProblem, effs: dict[tuple[int, int, bool], float]) -> None:
    assert model_efficiencies(p, DERIVED) == effs


def test_an_unmeasured_regime_keeps_the_hand_fit() -> None:
    wide_only = {k: e for k, e in DERIVED.items() if k[1] == "wide"}
    skinny_only = {k: e for k, e in DERIVED.items() if k[1] == "skinny"}
    assert model_efficiencies(GemmProblem(32, 4096, 4096), wide_only) == HAND
    assert model_efficiencies(GemmProblem(512, 4096, 4096), skinny_only) == HAND
    assert model_efficiencies(GemmProblem(128, 4096, 4096), wide_only) == HAND   # the wide fit is not the narrow one
    assert model_efficiencies(GemmProblem(256, 4096, 4096), {}) == HAND
    # a regime whose every kind measured 0 is no measurement
    assert model_efficiencies(GemmProblem(32, 4096, 4096), {((64, 128, False), "skinny"): 0.0}) == HAND


def test_which_problems_stream() -> None:
    wide_only = {k: e for k, e in DERIVED.items() if k[1] == "wide"}
    skinny_only = {k: e for k, e in DERIVED.items() if k[1] == "skinny"}
    assert streams(GemmProblem(32, 4096, 4096), DERIVED) and streams(GemmProblem(64, 4096, 4096, "fp16"), skinny_only)
    assert not streams(GemmProblem(65, 4096, 4096), DERIVED) and not streams(GemmProblem(300, 4096, 4096), DERIVED)
    assert not streams(GemmProblem(32, 4096, 4096), wide_only) and not streams(GemmProblem(32, 4096, 4096), {})
    assert not streams(GemmProblem(32, 4096, 4096, "e4m3", "bf16"), DERIVED)


def test_literal_picks_worked_by_hand() -> None:
    """1 x 8192 x 8192 bf16, 128 k blocks, streamed: 128 x 64 tiles are 128 (one wave) of 64 / 256 / 0.6
    a k block: 53.3; 64 x 16 swapped tiles (N by 64, M by 16) are 128 of 64 / 256 / 0.5: 64 (stream-K
    costs more for either: 125 k blocks a CTA + 16); at 0.7 the swapped tile costs 45.7 and wins."""
    p = GemmProblem(1, 8192, 8192)
    plain = model_choose(p, {((64, 16, True), "skinny"): 0.5, ((128, 64, False), "skinny"): 0.6})
    assert (plain.bm, plain.bn, plain.swap_ab, plain.stream_k, plain.split) == (128, 64, False, False, 0)
    swapped = model_choose(p, {((64, 16, True), "skinny"): 0.7, ((128, 64, False), "skinny"): 0.6})
    assert (swapped.bm, swapped.bn, swapped.swap_ab, swapped.stream_k) == (64, 16, True, False)
    # 16 stages of 64 x 16 + 16 x 64 (8 KiB and 2 KiB: MAX_STAGES); 9 of 128 x 64 + 64 x 64 (24 KiB: 216 of 227 KiB)
    assert swapped.stages == 16 and plain.stages == 9
    assert model_config(GemmProblem(64, 8192, 8192), 64, 128, False, swap=True).stages == 9  # past 8, short of 16
    assert not swapped.staged_epilogue and plain.staged_epilogue is False  # fp32 C: from the registers
    # a batch of the same is never swapped (and never stream-K)
    batched = model_choose(GemmProblem(1, 8192, 8192, batch=2), {((64, 16, True), "skinny"): 0.7,
                                                                  ((128, 64, False), "skinny"): 0.6})
    assert (batched.bn, batched.swap_ab, batched.stream_k) == (64, False, False)


def test_model_config_literal() -> None:
    p = GemmProblem(256, 256, 512, "bf16", "bf16")
    c = model_config(p, 128, 128, False)
    assert (c.bm, c.bn, c.consumers, c.split, c.stream_k, c.bk, c.group, c.staged_epilogue, c.l2_promotion,
            c.promote, c.swap_ab) == (128, 128, 2, 0, False, 64, 8, True, 256, False, False)
    assert 3 <= c.stages <= 8
    assert not model_config(p, 128, 128, False, swap=True).staged_epilogue       # C^T leaves through the registers
    assert model_config(p, 128, 128, False, swap=True).swap_ab
    assert not model_config(attrs.evolve(p, out_dtype="fp32"), 128, 128, False).staged_epilogue
    assert model_config(attrs.evolve(p, out_dtype="fp16", dtype="fp16"), 128, 128, False).staged_epilogue
    assert not model_config(GemmProblem(256, 33, 512, "bf16", "bf16"), 128, 64, False).staged_epilogue  # 66-byte rows
    assert not model_config(GemmProblem(256, 36, 512, "bf16", "bf16", ldc=40), 128, 64, False).staged_epilogue
    assert model_config(GemmProblem(256, 40, 512, "bf16", "bf16", ldc=48), 128, 64, False).staged_epilogue
    assert model_config(GemmProblem(256, 256, 3016), 128, 128, False).l2_promotion == 128   # 6032-byte rows
    assert model_config(GemmProblem(256, 256, 3008), 128, 128, False).l2_promotion == 256
    # 8-bit rows: 3024 bytes (an odd multiple of 16) where 16-bit rows of 3024 are 6048 (a multiple of 32)
    assert model_config(GemmProblem(256, 256, 3024, "e4m3", "bf16"), 128, 128, False).l2_promotion == 128
    assert model_config(GemmProblem(256, 256, 3024), 128, 128, False).l2_promotion == 256
    sk = model_config(GemmProblem(128, 128, 65536), 128, 64, True)
    assert (sk.stream_k, sk.split) == (True, sm90_split(GemmProblem(128, 128, 65536), 128, 64)) == (True, 66)
    f8 = model_config(GemmProblem(256, 256, 8192, "e4m3", "bf16"), 128, 128, False)
    assert (f8.bk, f8.promote) == (128, True)


@st.composite
def _cases(draw: st.DrawFn) -> tuple[GemmProblem, dict[tuple[tuple[int, int, bool], str], float]]:
    m = draw(st.one_of(st.integers(1, 64), st.integers(65, 256), st.integers(257, 4096)))
    n = 8 * draw(st.integers(1, 2048))
    k = 16 * draw(st.integers(1, 1024))
    options: list[dict[str, Any]] = [{}, {"batch": 2}, {"b_major": "MN"}, {"dtype": "e4m3", "out_dtype": "bf16"}, {}]
    kw = draw(st.sampled_from(options))
    p = GemmProblem(m, n, k, **kw)
    kinds = [(64, 16, True), (64, 32, True), (128, 64, False), (64, 128, False), (128, 128, False), (128, 256, False),
             (128, 192, False)]
    derived = {(kind, reg): draw(st.sampled_from([0.0, 0.3, 0.6, 0.9]))
               for kind in kinds for reg in ("skinny", "narrow", "wide") if draw(st.booleans())}
    return p, derived


@settings(max_examples=60, deadline=None)
@given(_cases())
def test_the_pick_is_the_cheapest_allowed_candidate(case: tuple[GemmProblem, dict[tuple[tuple[int, int, bool], str],
                                                                                  float]]) -> None:
    """No allowed kind, whole tiles or stream-K, is predicted cheaper than the pick; the pick keeps
    the problem's limits: an MN-major B's tiles whole 64-column boxes, a batch whole tiles, A and B
    swapped only where allowed."""
    p, derived = case
    cfg = model_choose(p, derived)
    effs = model_efficiencies(p, derived)
    kind = (cfg.bm, cfg.bn, cfg.swap_ab)
    assert kind in effs
    s = streams(p, derived)

    def cost(k: tuple[int, int, bool], sk: bool) -> float:
        return sm90_cost(p, k[0], k[1], sk, swap=k[2], eff=effs[k], streaming=s)

    chosen = cost(kind, cfg.stream_k)
    allowed = [k for k in effs if (p.b_major == "K" or k[1] % 64 == 0) and (not cfg.promote or k[1] <= 192)]
    assert all(cost(k, sk) >= chosen for k in allowed for sk in ((False, True) if p.batch == 1 else (False,)))
    if p.b_major == "MN":
        assert cfg.bn % 64 == 0
    if p.batch > 1:
        assert not cfg.stream_k
    assert cfg == model_config(p, cfg.bm, cfg.bn, cfg.stream_k, cfg.swap_ab)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 4096), st.integers(1, 4096), st.integers(1, 2048), st.sampled_from(sorted(TILE_EFFICIENCY)),
       st.booleans())
def test_a_swapped_problem_costs_what_its_transpose_costs(m: int, n: int, k8: int, tile: tuple[int, int],
                                                          sk: bool) -> None:
    """A and B swapped, C^T = B A^T: tiles of N by BM and M by BN, the work of the transposed problem
    (N x M) unswapped, whole tiles or stream-K (the compute-bound model; streaming prices the weight)."""
    p, t = GemmProblem(m, 8 * n, 8 * k8), GemmProblem(8 * n, m, 8 * k8)
    bm, bn = tile
    assert sm90_cost(p, bm, bn, sk, swap=True) == sm90_cost(t, bm, bn, sk)
    assert sm90_split(p, bm, bn, True) == sm90_split(t, bm, bn)


def test_a_swapped_ragged_problem_is_not_its_unswapped_self() -> None:
    """320 x 2112 x 65536 in 128 x 192 tiles: 33 unswapped (split 4), 34 swapped (split 3): stream-K's
    share a CTA is 256 or 342 k blocks."""
    p = GemmProblem(320, 2112, 65536)
    assert (sm90_split(p, 128, 192), sm90_split(p, 128, 192, True)) == (4, 3)
    per = 128 * 192 / (128 * 256) / TILE_EFFICIENCY[128, 192]
    assert sm90_cost(p, 128, 192, True) == pytest.approx((256 + 16) * per / 0.95)
    assert sm90_cost(p, 128, 192, True, swap=True) == pytest.approx((342 + 16) * per / 0.95)


def test_a_promoted_8_bit_problem_keeps_its_tiles_at_most_192_wide() -> None:
    """8192^3: 16-bit inputs take 128 x 256 tiles; e4m3 with K above 4096 promotes each k block into a
    second fp32 accumulator, so BN <= 192 (PROMOTE_MAX_BN), and 192 itself is allowed."""
    assert model_choose(GemmProblem(8192, 8192, 8192, "bf16", "bf16"), {}).bn == 256
    f8 = model_choose(GemmProblem(8192, 8192, 8192, "e4m3", "bf16"), {})
    assert (f8.bm, f8.bn, f8.promote) == (128, 192, True)
    assert model_choose(GemmProblem(8192, 8192, 4096, "e4m3", "bf16"), {}).promote is False
