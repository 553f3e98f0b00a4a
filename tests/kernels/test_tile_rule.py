"""The sm_90a tile rule (`kernels/gemm.py: choose`) over thousands of shapes, not a dozen: every
shape from 1 row to 64k, K from 8 to 64k, both input types and every output type gets the
configuration its documentation promises:

- the tile and the stream-K choice are the cheapest under the rule's own cost model (no candidate
  tile, with or without stream-K, is predicted faster), and the model's whole-tile cost is the
  busiest SM's waves times its k blocks;
- stream-K's split is the one `sm90_split` gives (0 for whole tiles);
- the ring is the deepest that fits shared memory (3 to 8 stages);
- 16-bit C with 16-byte-aligned rows goes out through shared memory and TMA stores, nothing else;
- the L2 promotion is 256 bytes where a K row is a multiple of 32 bytes, else 128.
The literal tiles of a few shapes are pinned in test_gemm_sm90.py."""

from __future__ import annotations

import math
from typing import Iterator

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.kernels.gemm import MAX_STAGES, TILE_EFFICIENCY, GemmProblem, choose, sm90_cost, sm90_split


@pytest.fixture(autouse=True, scope="module")
def _the_hand_fitted_model() -> Iterator[None]:
    """These are the promises of the hand-fitted model (TILE_EFFICIENCY): the rule without the sweep's
    table (kernels/gemm_sweep.py), which a shape the table measured, or its derived efficiencies, override."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WARPY_GEMM_TABLE", "none")
        yield
from warpy.kernels.gemm_sm90 import smem_bytes
from warpy.target import SM90A


@st.composite
def problems(draw: st.DrawFn) -> GemmProblem:
    def extent() -> int:
        return draw(st.one_of(st.integers(1, 300), st.integers(300, 1 << 16), st.sampled_from([1, 64, 127, 128, 129, 4096])))

    k = 8 * draw(st.one_of(st.integers(1, 64), st.integers(64, 1 << 13)))
    return GemmProblem(extent(), extent(), k, draw(st.sampled_from(["bf16", "fp16"])),
                       draw(st.sampled_from(["fp32", "bf16", "fp16"])))


@settings(max_examples=400, deadline=None)
@given(problems())
def test_the_rule_keeps_its_promises(prob: GemmProblem) -> None:
    cfg = choose(prob)
    tile = (cfg.bm, cfg.bn)
    assert tile in TILE_EFFICIENCY and cfg.consumers == cfg.bm // 64
    chosen = sm90_cost(prob, cfg.bm, cfg.bn, cfg.stream_k)
    assert math.isfinite(chosen)
    for (bm, bn) in TILE_EFFICIENCY:
        for sk in (False, True):
            assert sm90_cost(prob, bm, bn, sk) >= chosen, (prob, tile, cfg.stream_k, (bm, bn, sk))
    # the model's whole-tile cost: waves of the busiest SM x its k blocks x the tile's relative time
    tiles = -(-prob.M // cfg.bm) * -(-prob.N // cfg.bn)
    whole = -(-tiles // SM90A.sms) * -(-prob.K // 64) * cfg.bm * cfg.bn / (128 * 256) / TILE_EFFICIENCY[tile]
    assert math.isclose(sm90_cost(prob, cfg.bm, cfg.bn, False), whole)
    assert cfg.split == (sm90_split(prob, cfg.bm, cfg.bn) if cfg.stream_k else 0)
    if cfg.stream_k and not cfg.split:  # even shares only where no block of A or B is shared by tiles
        assert min(-(-prob.M // cfg.bm), -(-prob.N // cfg.bn)) == 1
    assert 3 <= cfg.stages <= MAX_STAGES and smem_bytes(cfg) <= SM90A.max_dynamic_smem
    assert cfg.stages == MAX_STAGES or smem_bytes(attrs.evolve(cfg, stages=cfg.stages + 1)) > SM90A.max_dynamic_smem
    assert cfg.staged_epilogue == (prob.out_dtype != "fp32" and prob.N * 2 % 16 == 0)
    assert cfg.l2_promotion == (256 if prob.K * 2 % 32 == 0 else 128)


@settings(max_examples=200, deadline=None)
@given(problems())
def test_stream_k_only_where_whole_tiles_leave_sms_idle(prob: GemmProblem) -> None:
    """Stream-K is chosen only when whole tiles cannot fill one wave of 132 SMs (a partial last
    wave or fewer tiles than SMs): where the tiles make exact full waves it never pays."""
    cfg = choose(prob)
    if not cfg.stream_k:
        return
    tiles = -(-prob.M // cfg.bm) * -(-prob.N // cfg.bn)
    assert tiles % SM90A.sms != 0


def test_even_shares_only_where_no_block_is_shared() -> None:
    """Stream-K's even shares start CTAs at unrelated k: where tiles share blocks of A or B the
    blocks come from DRAM again (200 x 3584 x 18944 in 64 x 128 tiles ran 1.74x the fastest on the
    H200), so the model prices them only for one row or one column of tiles."""
    from warpy.kernels.gemm import even_shares_fit

    p = GemmProblem(200, 3584, 18944)
    assert not even_shares_fit(p, 64, 128) and sm90_cost(p, 64, 128, True) == math.inf
    assert math.isfinite(sm90_cost(p, 128, 224, True))  # 32 tiles: split 4 ways at the same k blocks instead
    decode = GemmProblem(1, 10240, 8192)  # swapped: 160 tiles of the weight's rows, one column of M
    assert even_shares_fit(decode, 64, 16, swap=True) and math.isfinite(sm90_cost(decode, 64, 16, True, swap=True, eff=0.5))
    assert even_shares_fit(GemmProblem(96, 5120, 5120), 128, 64) and not even_shares_fit(GemmProblem(96, 5120, 5120), 64, 64)
