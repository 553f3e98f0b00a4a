"""The sweep's table and what the tile rule makes of it (kernels/gemm_sweep.py): the JSON round trip
and its refusals, efficiencies derived from measured times, the exact-shape lookup, the leave-one-out
report, the configurations a shape gets, and the whole sweep driven by a timer that is not a GPU."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional, Sequence

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from warpy.errors import WarpyError
from warpy.target import SM90A
from warpy.kernels import gemm_sweep as S
from warpy.kernels.gemm import GemmProblem, TILE_EFFICIENCY, model_choose, model_config, sm90_cost
from warpy.kernels.gemm import choose as choose_any
from warpy.kernels.gemm_epilogue import parse_words
from warpy.kernels.gemm_sm90 import Sm90Config, Sm90Gemm


def choose(p: GemmProblem) -> Sm90Config:
    cfg = choose_any(p)
    assert isinstance(cfg, Sm90Config)
    return cfg


def _row(shape: tuple[int, int, int], times: dict[Sm90Config, float], cublas: float = 100.0,
         out: str = "bf16") -> S.SweepRow:
    return S.SweepRow(shape, "bf16", out, cublas, tuple(S.Measured(c, us, "ok") for c, us in times.items()))


def _model_time(shape: tuple[int, int, int], cfg: Sm90Config, eff: float, unit: float = 0.7) -> float:
    """A measured time exactly as the model predicts it, at efficiency `eff` and `unit` µs a unit."""
    p = GemmProblem(*shape, out_dtype="bf16")
    return S.LAUNCH_US + S.work_units(p, cfg) * unit / eff


def _cfg(shape: tuple[int, int, int], bm: int, bn: int, sk: bool = False, swap: bool = False) -> Sm90Config:
    return model_config(GemmProblem(*shape, out_dtype="bf16"), bm, bn, sk, swap)


def test_the_committed_table_parses_and_the_rule_runs_its_fastest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WARPY_GEMM_TABLE", raising=False)  # (tests/kernels/conftest.py sets none)
    t = S.read_table(S.TABLE_PATH)
    assert S.current_table() == t
    for row in t.rows:  # every measured configuration builds for its shape; the rule picks the fastest
        p = GemmProblem(*row.shape, dtype=row.dtype, out_dtype=row.out_dtype)
        for m in row.measured:
            Sm90Gemm(p, m.config)
        if row.best is not None:
            assert choose(p) == row.best.config
    if not t.rows:  # not yet filled on the H200: the rule is the hand-fitted model
        p = GemmProblem(4096, 4096, 4096, out_dtype="bf16")
        assert choose(p) == model_choose(p, {})


def test_a_table_round_trips_through_json_and_bad_ones_are_refused(tmp_path: Path) -> None:
    shape = (1000, 2000, 512)
    t = S.SweepTable((_row(shape, {_cfg(shape, 128, 256): 30.5, _cfg(shape, 192, 192): 29.0,
                                   attrs.evolve(_cfg(shape, 128, 256), cluster_m=2): 31.0}),), "H200", "2026-12-02", "x")
    f = tmp_path / "t.json"
    S.write_table(t, f)
    assert S.read_table(f) == t
    data = json.loads(f.read_text())
    assert data["rows"][0]["measured"][1]["config"] == {"bn": 192, "consumers": 3, "stages": 3,
                                                        "staged_epilogue": True}
    data["version"] = 7
    f.write_text(json.dumps(data))
    with pytest.raises(WarpyError, match="version 7"):
        S.read_table(f)
    data["version"] = 1
    data["rows"][0]["measured"][0]["config"]["tile"] = 3
    f.write_text(json.dumps(data))
    with pytest.raises(WarpyError, match="fields Sm90Config does not: tile"):
        S.read_table(f)
    f.write_text("{")
    with pytest.raises(WarpyError, match="is not JSON"):
        S.read_table(f)
    f.write_text('{"version": 1, "rows": [{"shape": [1, 2]}]}')
    with pytest.raises(WarpyError, match="not a GEMM sweep table|not M, N, K"):
        S.read_table(f)


@settings(max_examples=30, deadline=None)
@given(st.floats(0.3, 1.2), st.floats(0.3, 1.2), st.floats(0.4, 1.0),
       st.sampled_from([(4096, 4096, 4096), (2048, 6144, 1024), (8192, 1024, 2048)]))
def test_efficiencies_are_derived_from_the_measured_times(e192: float, e128: float, unit: float,
                                                          shape: tuple[int, int, int]) -> None:
    """Times made exactly by the model (a launch's fixed cost plus units x µs-a-unit / efficiency)
    give their efficiencies back, relative to 128 x 256 whole tiles, whatever µs a unit is."""
    other = (2048, 2048, 2048)
    rows = []
    for sh in (shape, other):
        times = {_cfg(sh, 128, 256): _model_time(sh, _cfg(sh, 128, 256), 1.0, unit),
                 _cfg(sh, 192, 192): _model_time(sh, _cfg(sh, 192, 192), e192, unit),
                 _cfg(sh, 128, 128): _model_time(sh, _cfg(sh, 128, 128), e128, unit),
                 # not the model's configuration of its kind: a lookup's, never an efficiency's
                 attrs.evolve(_cfg(sh, 128, 128), group=4): 1.0}
        rows.append(_row(sh, times))
    eff = S.efficiencies(S.SweepTable(tuple(rows)))
    assert set(eff) == {((128, 256, False), "wide"), ((192, 192, False), "wide"), ((128, 128, False), "wide")}
    assert eff[(128, 256, False), "wide"] == pytest.approx(1.0)
    assert eff[(192, 192, False), "wide"] == pytest.approx(e192)
    assert eff[(128, 128, False), "wide"] == pytest.approx(e128)


def test_the_rule_looks_a_measured_shape_up_and_models_the_others(tmp_path: Path, monkeypatch: Any) -> None:
    shape = (3000, 5000, 1024)
    fast = attrs.evolve(_cfg(shape, 192, 192), cluster_m=2, group=4)
    rows = [_row(shape, {_cfg(shape, 128, 256): 90.0, fast: 70.0})]
    for sh in ((4096, 4096, 4096), (6144, 6144, 2048)):  # 192 x 192 measured 25% faster than 128 x 256 there
        rows.append(_row(sh, {_cfg(sh, 128, 256): _model_time(sh, _cfg(sh, 128, 256), 1.0),
                              _cfg(sh, 192, 192): _model_time(sh, _cfg(sh, 192, 192), 1.25)}))
    f = tmp_path / "t.json"
    S.write_table(S.SweepTable(tuple(rows)), f)
    monkeypatch.setenv("WARPY_GEMM_TABLE", str(f))
    assert choose(GemmProblem(*shape, out_dtype="bf16")) == fast
    # the same shape with a fused epilogue, or another output type, is not what was measured
    assert choose(GemmProblem(*shape, out_dtype="bf16", epilogue=parse_words(["bias=n"]))).cluster_m == 1
    assert choose(GemmProblem(*shape, out_dtype="fp32")) != fast
    # an unmeasured shape: the model, with 192 x 192's efficiency derived from the table
    other = GemmProblem(8192, 8192, 8192, out_dtype="bf16")
    got = choose(other)
    assert (got.bm, got.bn) == (192, 192) and got.cluster_m == 1
    # 8-bit floats keep the hand-fitted model (the sweep times 16-bit inputs)
    fp8 = GemmProblem(8192, 8192, 8192, "e4m3", "bf16")
    assert choose(fp8).bm == 128 and choose(fp8) == model_choose(fp8, {})
    monkeypatch.setenv("WARPY_GEMM_TABLE", "none")
    assert (choose(other).bm, choose(other).bn) == (128, 256)


def test_a_failed_check_is_never_the_fastest() -> None:
    shape = (1024, 1024, 1024)
    a, b = _cfg(shape, 128, 64), _cfg(shape, 128, 128)
    row = S.SweepRow(shape, "bf16", "bf16", 9.0, (S.Measured(a, 5.0, "FAIL (3 elements)"), S.Measured(b, 8.0, "ok"),
                                                  S.Measured(a, -1.0, "error: WarpyError: x")))
    assert row.best == S.Measured(b, 8.0, "ok")
    assert row.time_of(a) is None


def test_the_report_leaves_each_shape_out_of_its_own_pick() -> None:
    """Three shapes whose times follow the model at 192 x 192's efficiency 1.2: each shape's pick,
    modelled from the other two, is 192 x 192, the fastest there; a fourth shape where a cluster
    configuration (no kind of its own in the model) is fastest shows the miss."""
    rows = []
    shapes = [(4096, 4096, 4096), (6144, 6144, 2048), (6144, 6144, 6144)]
    for sh in shapes:
        rows.append(_row(sh, {_cfg(sh, 128, 256): _model_time(sh, _cfg(sh, 128, 256), 1.0),
                              _cfg(sh, 192, 192): _model_time(sh, _cfg(sh, 192, 192), 1.2)}))
    sh = (8192, 8192, 4096)
    c192 = _cfg(sh, 192, 192)
    t192 = _model_time(sh, c192, 1.2)
    rows.append(_row(sh, {c192: t192, attrs.evolve(c192, cluster_m=2): t192 / 1.1}))
    vs = S.verdicts(S.SweepTable(tuple(rows)))
    assert [(v.pick.bm, v.pick.bn) for v in vs] == [(192, 192)] * 4
    assert [None if v.miss is None else round(v.miss, 6) for v in vs] == [0, 0, 0, 0.1]
    text, summary = S.report(S.SweepTable(tuple(rows)))
    assert summary["within"] == 3 and summary["shapes"] == 4 and summary["worst_miss"] == pytest.approx(0.1)
    assert "pick within 3% of the fastest at 3 of 4 shapes (75%); picks not measured: 0" in text and "+10.0%" in text
    # a pick the sweep did not time is counted apart, not as a hit
    sh = (1024, 1024, 65536)  # 36 tiles of 192 x 192 on 132 SMs: the model splits K (stream-K's split)
    rows.append(_row(sh, {_cfg(sh, 192, 192): _model_time(sh, _cfg(sh, 192, 192), 1.2)}))
    text, summary = S.report(S.SweepTable(tuple(rows)))
    assert S.verdicts(S.SweepTable(tuple(rows)))[-1].pick.split > 1
    assert summary["within"] == 3 and summary["pick_measured"] == 4 and "picks not measured: 1" in text


@pytest.mark.parametrize("shape", [(1, 8192, 8192), (16, 4096, 4096), (128, 8192, 8192), (256, 3072, 2048),
                                   (3000, 3000, 3000), (8192, 28672, 8192)])
def test_each_shape_gets_the_rules_pick_first_and_the_new_kinds(shape: tuple[int, int, int]) -> None:
    p = GemmProblem(*shape, out_dtype="bf16")
    cands = S.candidates(p, per_shape=10)
    assert cands[0] == choose(p) and len(cands) == len(set(cands)) <= 10
    for c in cands:
        Sm90Gemm(p, c)  # every one builds for the shape (constructed; refusals would raise)
    kinds = {S.kind(c) for c in cands}
    if shape[0] <= S.SKINNY_M:  # A and B swapped, BN the narrowest holding M, and the best of them in clusters
        assert (64, 16, True) in kinds and (128, 16, True) in kinds
        assert any(c.swap_ab and c.cluster_m == 2 and not c.stream_k for c in cands)
    elif shape[0] <= S.NARROW_M:  # one or two 128-row tiles of M: no 192-row tiles; 64-row tiles; clusters no
        # taller than M's blocks, among them of 64-row tiles (cluster_shapes)
        assert all(c.bm < 192 and not c.swap_ab and c.cluster_m < 2 * -(-shape[0] // c.bm) for c in cands)
        assert any(c.bm == 64 for c in cands) and any(c.bm == 128 for c in cands)
        assert any(c.bm == 64 and c.cluster_size > 1 for c in cands)
    else:
        assert (192, 192, False) in kinds and (192, 128, False) in kinds
        assert any(c.bm == c.bn == 192 and c.cluster_m == 2 for c in cands)  # "coopB": 192 x 192 in 2x1 clusters
        assert any(c.bm == c.bn == 192 and c.cluster_n == 2 for c in cands)  # and in 1x2 (A multicast)
    if shape == (3000, 3000, 3000):  # rows 6000 bytes apart: each L2 promotion
        assert {c.l2_promotion for c in cands} >= {0, 64, 128, 256}
    if shape == (8192, 28672, 8192):  # the rule's pick in 2x1 clusters
        assert attrs.evolve(cands[0], cluster_m=2) in cands


@settings(max_examples=25, deadline=None)
@given(m=st.integers(S.SKINNY_M + 1, S.NARROW_M), n=st.integers(64, 32768).map(lambda x: 8 * (x // 8)),
       k=st.integers(8, 4096).map(lambda x: 8 * x))
def test_a_narrow_shape_times_64_row_tiles_of_every_width(m: int, n: int, k: int) -> None:
    """Where the known kinds leave a wave ragged, a 64-row tile of some width fills it (the H200's
    broad sweep, 2026-12-03): a tuned narrow shape times every width of NARROW_BNS, and 192-row
    tiles exactly where M fills them no worse than 128-row ones."""
    from warpy.kernels.gemm import model_config
    from warpy.kernels.gemm_tune import TUNE_CANDIDATES

    p = GemmProblem(m, n, k, out_dtype="bf16")
    cands = S.candidates(p, per_shape=TUNE_CANDIDATES)
    whole = {c.bn for c in cands if c.bm == 64 and c.cluster_size == 1 and not c.stream_k and c.cluster_k == 1}
    assert whole >= set(S.NARROW_BNS), (p, whole)
    assert model_config(p, 64, 64, False) in cands  # (as the model configures it: the deepest ring)
    fills = -(-m // 192) * 192 <= -(-m // 128) * 128
    assert any(c.bm == 192 for c in cands) == fills, (m, fills)


@settings(max_examples=25, deadline=None)
@given(m=st.integers(S.SKINNY_M + 1, S.NARROW_M), n=st.integers(64, 32768).map(lambda x: 8 * (x // 8)),
       k=st.integers(8, 4096).map(lambda x: 8 * x))
def test_a_narrow_m_that_64_row_tiles_do_not_fill_times_swapped_tiles_fitted_to_it(m: int, n: int, k: int) -> None:
    """A tuned narrow shape whose M is not a multiple of 64 times A and B swapped with BN holding M
    in one or two blocks of at most 7 padded rows each (cuBLAS's own kind there); M a multiple of 64
    times no swapped tile."""
    from warpy.kernels.gemm_tune import TUNE_CANDIDATES

    p = GemmProblem(m, n, k, out_dtype="bf16")
    cands = S.candidates(p, per_shape=TUNE_CANDIDATES)
    swapped = [c for c in cands if c.swap_ab]
    if m % 64 == 0:
        assert not swapped
        return
    fitted = S.fitted_swaps(p)
    assert 1 <= len([c for c in swapped if not c.staged_epilogue]) <= S.FITTED_SWAPS, (p, swapped)
    for c in swapped:
        blocks = -(-m // c.bn)
        assert blocks in (1, 2) and c.bn % 8 == 0 and blocks * c.bn - m < 8 * blocks, (m, c)
        # each one fitted, or the staged twin of one (C^T through STSM.MT88 and TMA stores)
        assert c in fitted or any(S.staged_twin(p, f) == c for f in fitted), c


@settings(max_examples=20, deadline=None)
@given(m=st.integers(S.NARROW_M + 1, 2048), n=st.integers(64, 16384).map(lambda x: 8 * (x // 8)),
       k=st.integers(8, 1024).map(lambda x: 8 * x))
def test_a_wide_m_that_128_row_tiles_pad_times_staged_swapped_tiles_fitted_to_it(m: int, n: int, k: int) -> None:
    """A wide M that 128-row tiles pad by more than PADDING_SWAP of its rows (777: 896, 15%) times A
    and B swapped with BN cutting M into at most WIDE_SWAP_BLOCKS blocks of at most 7 padded rows,
    in 128- or 256-row whole tiles (cuBLAS's 256 x 88 at 777 x 3584 x 3584), C^T staged; others none."""
    from warpy.kernels.gemm_tune import TUNE_CANDIDATES

    p = GemmProblem(m, n, k, out_dtype="bf16")
    cands = S.candidates(p, per_shape=TUNE_CANDIDATES)
    swapped = [c for c in cands if c.swap_ab]
    assert S.padded_rows(m) == (-(-m // 128) * 128 - m > S.PADDING_SWAP * m)
    if not S.padded_rows(m):
        assert not swapped
        return
    assert 1 <= len(swapped) <= S.FITTED_SWAPS, (p, swapped)
    for c in swapped:
        blocks = -(-m // c.bn)
        assert 2 <= blocks <= S.WIDE_SWAP_BLOCKS and blocks * c.bn - m < 8 * blocks, (m, c)
        assert c.bm in (128, 256) and c.wg_rows == c.bm // 2 and c.staged_epilogue and not c.stream_k, c
        assert c in S.fitted_swaps(p)


def test_padded_rows_and_staged_twins_golden() -> None:
    assert [m for m in (257, 320, 384, 600, 777, 1000, 1500, 3000) if S.padded_rows(m)] == [257, 320, 600, 777]
    p = GemmProblem(200, 3584, 3584, out_dtype="bf16")
    reg = Sm90Config(bn=104, consumers=1, stages=10, swap_ab=True)
    assert S.staged_twin(p, reg) == attrs.evolve(reg, staged_epilogue=True, stages=10)
    assert S.staged_twin(p, attrs.evolve(reg, swap_ab=False)) is None
    assert S.staged_twin(GemmProblem(16, 4096, 4096, out_dtype="bf16"), attrs.evolve(reg, bn=16)) is None  # skinny
    wide = S.fitted_swaps(GemmProblem(777, 3584, 3584, out_dtype="bf16"))
    assert {(c.bm, c.bn) for c in wide[:4]} == {(128, 88), (256, 88), (128, 200), (128, 104)}


def test_fitted_bns_golden() -> None:
    assert S.fitted_bns(200) == [104, 200]
    assert S.fitted_bns(96) == [48, 96]
    assert S.fitted_bns(777, range(4, 9)) == [104, 112, 136, 160, 200]
    assert S.fitted_bns(20) == [16, 24]  # (10 rows round to 16: the MMA's least BN here)
    assert S.fitted_bns(600) == []  # past 256 in one or two blocks


@given(rows=st.integers(1, 20000), cols=st.integers(8, 40000), consumers=st.integers(1, 3))
def test_wave_bns_are_the_narrowest_widths_that_fill_whole_waves(rows: int, cols: int, consumers: int) -> None:
    """Each width `wave_bns` gives is whole 8-column groups in 64..top, and the narrowest of them whose
    tiles fit some whole number of waves (1 to 8) of the SMs: 8 columns narrower needs more tiles than
    that many waves hold."""
    bm, top, sms = 64 * consumers, 192 if consumers == 3 else 256, SM90A.sms
    mt = -(-rows // bm)
    for bn in S.wave_bns(rows, cols, bm, top):
        assert bn % 8 == 0 and 64 <= bn <= top
        assert any(mt * -(-cols // bn) <= w * sms < mt * -(-cols // (bn - 8)) for w in range(1, 9)), (bn, mt)


def test_wave_bns_golden() -> None:
    # 256 x 22016: two 128-row blocks, 168 columns make 132 blocks of N, 264 tiles, two waves (cuBLAS's 168)
    assert S.wave_bns(256, 22016, 128) == [72, 88, 112, 168]
    assert S.wave_bns(777, 3584, 128) == [64, 104, 200]  # 7 blocks of M: 18 of 200 columns, 126 tiles
    assert S.wave_bns(8192, 28672, 128) == []  # 64 blocks of M: no width up to 256 fills a whole wave


def test_a_shape_whose_waves_the_known_widths_leave_ragged_times_fitted_tiles() -> None:
    """256 x 22016 x 4096: 128 x 192 tiles make 230 (1.74 waves); the tuned candidates hold the model's
    first fitted tiles, 128 x 168 (staged: 64 + 64 + 32 + 8 columns) first."""
    from warpy.kernels.gemm_tune import TUNE_CANDIDATES

    p = GemmProblem(256, 22016, 4096, out_dtype="bf16")
    fitted = S.fitted_tiles(p)
    assert (fitted[0].bm, fitted[0].bn, fitted[0].staged_epilogue) == (128, 168, True)
    assert all(c.bn not in S.NARROW_BNS + S.WIDE_BNS and not c.stream_k and c.cluster_size == 1 for c in fitted)
    cands = S.candidates(p, per_shape=TUNE_CANDIDATES)
    assert all(c in cands for c in fitted[:S.FITTED_TILES])


@given(m=st.integers(1, 512), n=st.integers(256, 32768), k=st.integers(8, 2048).map(lambda x: 8 * x),
       tile=st.sampled_from([(64, 64, False), (64, 128, False), (128, 128, False), (64, 16, True), (64, 64, True)]))
def test_the_clusters_a_sweep_times_fit_and_load_the_fewest_rows(m: int, n: int, k: int,
                                                                 tile: tuple[int, int, bool]) -> None:
    from warpy.kernels.gemm import cluster_waves, model_config

    p = GemmProblem(m, n, k, out_dtype="bf16")
    bm, bn, swap = tile
    cfg = model_config(p, bm, bn, False, swap)
    shapes = S.cluster_shapes(p, cfg, 3)
    rows, cols = (n, m) if swap else (m, n)
    loads = [bm / cn + bn / cm for cm, cn in shapes]
    assert loads == sorted(loads) and len(set(shapes)) == len(shapes)
    for cm, cn in shapes:
        assert 2 <= cm * cn <= 8 and cm < 2 * -(-rows // bm) and cn < 2 * -(-cols // bn)
        assert cluster_waves(p, bm, bn, swap, (cm, cn)) <= cluster_waves(p, bm, bn, swap, (1, 1))
        Sm90Gemm(p, attrs.evolve(cfg, cluster_m=cm, cluster_n=cn))  # builds


def test_the_model_ranks_swapped_tiles_by_n_and_m() -> None:
    p = GemmProblem(1, 8192, 8192)
    # 128 tiles of 64 rows of N by 16 of M: one wave; the same work unswapped is 64 x 16 of M's side
    assert sm90_cost(p, 64, 16, False, swap=True, eff=1.0) == 128 * 1 * 64 * 16 / (128 * 256)
    assert sm90_cost(p, 64, 128, False) == 64 * 128 / (128 * 256) / TILE_EFFICIENCY[64, 128] * 128


def _sweep_with_a_timer(tmp_path: Path, workers: int) -> None:
    """The whole sweep but the GPU: candidates, the builds (each program built, lifted and
    assembled by the pool), the table written after each shape and read back, and a second pass:
    where the model's pick at a shape (fitted on the other shapes) has no good time there (here the
    first run of each shape's first configuration fails its check), the sweep times it again."""
    out = tmp_path / "sweep.json"
    shapes = [(4096, 4096, 4096), (2048, 2048, 16384)]
    calls: list[tuple[tuple[int, int, int], int]] = []

    def timer(p: Any, cfgs: Sequence[Sm90Config], entries: Sequence[Any]) -> tuple[Optional[float], list[S.Measured]]:
        shape = (p.M, p.N, p.K)
        first = len(calls) < len(shapes)
        if first and calls:  # the table holds the shapes before this one
            assert [r.shape for r in S.read_table(out).rows] == [s for s, _ in calls]
        calls.append((shape, len(cfgs)))
        for c, e in zip(cfgs, entries):
            assert not isinstance(e, BaseException), e
            describe, sass, ptx = e
            assert describe == c.describe() and ".entry" in ptx and sass.startswith(".kernel")
        return 50.0, [S.Measured(c, _model_time(shape, c, 1.0), "FAIL (1 element)" if first and i == 0 else "ok")
                      for i, c in enumerate(cfgs)]

    table = S.run_sweep(shapes, str(out), per_shape=2, timer=timer, workers=workers, echo=lambda _l: None,
                        command="test", gpu="none")
    assert S.read_table(out) == table and [r.shape for r in table.rows] == shapes
    assert calls[:2] == [(shapes[0], 2), (shapes[1], 2)] and len(calls) > 2 and all(n >= 1 for _, n in calls[2:])
    assert all(v.pick_us is not None and (v.near is None or v.near_us is not None) for v in S.verdicts(table))
    assert dict(table.strategy) == S.strategy(table) and S.read_table(out).strategy == table.strategy
    assert S.report(table)[1]["pick_measured"] == 2


def test_a_sweep_driven_by_another_timer(tmp_path: Path) -> None:
    _sweep_with_a_timer(tmp_path, workers=0)


@pytest.mark.skipif(os.environ.get("WARPY_SLOW") != "1", reason="WARPY_SLOW=1 (spawns a build process: ~10 s)")
def test_a_sweep_builds_in_other_processes(tmp_path: Path) -> None:
    _sweep_with_a_timer(tmp_path, workers=1)


def test_the_cli_reads_a_table_without_a_gpu_and_refuses_mixed_options(tmp_path: Path) -> None:
    from warpy.cli import app

    shapes = [(4096, 4096, 4096), (6144, 6144, 2048)]
    rows = [_row(sh, {_cfg(sh, 128, 256): _model_time(sh, _cfg(sh, 128, 256), 1.0)}) for sh in shapes]
    f = tmp_path / "t.json"
    S.write_table(S.SweepTable(tuple(rows)), f)
    r = CliRunner().invoke(app, ["bench", "gemm", "--sweep-report", str(f)])
    assert r.exit_code == 0, r.output
    assert "pick within 3% of the fastest at 2 of 2 shapes (100%)" in r.output
    for args, why in ((["--out", str(f)], "add --sweep"), (["--sweep", "--host-overhead"], "--sweep and --sweep-report take"),
                      (["--sweep", "--dtype", "e4m3", "1024"], "16-bit inputs"),
                      (["--sweep-report", str(f), "1024"], "takes no shapes")):
        r = CliRunner().invoke(app, ["bench", "gemm", *args])  # (warpy's main turns a WarpyError into exit 2)
        assert isinstance(r.exception, WarpyError) and why in str(r.exception), (args, r.output)


def test_the_nearest_shape_wins_where_the_model_cannot_say_what_was_fastest(tmp_path: Path, monkeypatch: Any) -> None:
    """2x1 clusters are no kind of the model's: where they were fastest at every shape, carrying the
    nearest shape's configuration beats the model with each shape left out, the sweep's strategy
    becomes "nearest", and an unmeasured shape runs the nearest one's clusters (its own split, ring)."""
    shapes = [(4096, 4096, 4096), (8192, 8192, 4096), (6144, 6144, 6144), (4096, 8192, 2048)]
    rows = []
    for sh in shapes:
        base = _cfg(sh, 128, 256)
        rows.append(_row(sh, {base: _model_time(sh, base, 1.0), attrs.evolve(base, cluster_m=2):
                              _model_time(sh, base, 1.0) / 1.08}))
    table = S.SweepTable(tuple(rows))
    vs = S.verdicts(table)
    assert all(v.miss == pytest.approx(0.08) for v in vs) and all(v.near_miss == 0 for v in vs)
    assert S.strategy(table) == {"wide": "nearest"} and S.report(table)[1]["strategy"] == {"wide": "nearest"}
    assert S.report(table)[1]["rule_within"] == len(shapes)  # the rule's strategy carries: every pick the fastest
    f = tmp_path / "t.json"
    S.write_table(attrs.evolve(table, strategy="nearest"), f)
    monkeypatch.setenv("WARPY_GEMM_TABLE", str(f))
    got = choose(GemmProblem(5000, 7000, 3072, out_dtype="bf16"))  # nearest: 4096 x 8192 x 2048
    assert got.cluster_m == 2 and (got.bm, got.bn) == (128, 256) and got.l2_promotion == 256
    # not a plain problem: the model's (no clusters)
    assert choose(GemmProblem(5000, 7000, 3072, out_dtype="bf16", epilogue=parse_words(["bias=n"]))).cluster_m == 1
    data = json.loads(f.read_text())
    data["strategy"] = "guess"
    f.write_text(json.dumps(data))
    with pytest.raises(WarpyError, match="strategy 'guess'"):
        S.read_table(f)
    # regime by regime: the narrow regime's own strategy, the model's where the table says nothing
    data["strategy"] = {"narrow": "nearest"}
    f.write_text(json.dumps(data))
    t = S.read_table(f)
    assert [t.strategy_for(r) for r in S.REGIMES] == ["model", "nearest", "model"]
    assert choose(GemmProblem(5000, 7000, 3072, out_dtype="bf16")).cluster_m == 1  # wide: the model's now
    data["strategy"] = {"tall": "model"}
    f.write_text(json.dumps(data))
    with pytest.raises(WarpyError, match="strategy for 'tall'"):
        S.read_table(f)


def test_a_carried_configuration_is_configured_for_its_new_shape() -> None:
    src = GemmProblem(16, 4096, 4096, out_dtype="bf16")
    swapped = attrs.evolve(model_config(src, 64, 16, True, True), group=4)
    assert swapped.split == 2  # 64 tiles of 64 rows of N: K split 2 ways
    dst = GemmProblem(8, 8192, 8192, out_dtype="bf16")
    got = S.carry(swapped, dst)
    assert got is not None and got.swap_ab and got.group == 4 and got.split == 0 and got.stream_k  # 128 tiles
    # rows not 32-byte aligned keep the rule's promotion; a tile that cannot build there is no carry
    assert S.carry(_cfg((4096, 4096, 4096), 128, 256), GemmProblem(3000, 3000, 3000)) == \
        model_config(GemmProblem(3000, 3000, 3000), 128, 256, False)
    assert S.carry(attrs.evolve(swapped, bn=16), GemmProblem(16, 4096, 4096, epilogue=parse_words(["bias=n"]))) is None
    # from M = 16 to M = 32 a swapped BN of 16 (the narrowest holding 16) becomes 32 (the narrowest holding 32),
    # and one step wider stays one step wider; M = 1 keeps the narrowest, 16
    m32 = GemmProblem(32, 8192, 4096, out_dtype="bf16")
    assert [getattr(S.carry(attrs.evolve(swapped, bn=b), m32, 16), "bn", None) for b in (16, 32)] == [32, 48]
    assert getattr(S.carry(attrs.evolve(swapped, bn=64), GemmProblem(1, 8192, 4096), 64), "bn", None) == 16
    assert getattr(S.carry(attrs.evolve(swapped, bn=16), m32), "bn", None) == 16  # no source M: BN as measured


def test_a_sweep_of_a_few_shapes_adds_to_the_table_at_out(tmp_path: Path) -> None:
    """`--sweep SHAPE... --out FILE` over an existing table: the rows of shapes it does not measure
    are kept (and not timed again), the swept shape's row is replaced; a table of another GPU is
    refused in one line."""
    out = tmp_path / "sweep.json"
    kept = [_row(sh, {_cfg(sh, 128, 256): _model_time(sh, _cfg(sh, 128, 256), 1.0)})
            for sh in ((4096, 4096, 4096), (8192, 8192, 2048))]
    stale = _row((6144, 6144, 2048), {_cfg((6144, 6144, 2048), 128, 256): 999.0})
    S.write_table(S.SweepTable(tuple(kept) + (stale,), gpu="none", date="2026-01-02", command="first"), out)
    timed: list[tuple[int, int, int]] = []

    def timer(p: Any, cfgs: Sequence[Sm90Config], entries: Sequence[Any]) -> tuple[Optional[float], list[S.Measured]]:
        timed.append((p.M, p.N, p.K))
        return 50.0, [S.Measured(c, _model_time((p.M, p.N, p.K), c, 1.0), "ok") for c in cfgs]

    table = S.run_sweep([(6144, 6144, 2048)], str(out), per_shape=2, timer=timer, workers=0, echo=lambda _l: None,
                        command="test", gpu="none")
    assert set(timed) == {(6144, 6144, 2048)}
    assert [r.shape for r in table.rows] == [(4096, 4096, 4096), (8192, 8192, 2048), (6144, 6144, 2048)]
    assert table.rows[:2] == tuple(kept) and S.read_table(out) == table
    assert all(m.us != 999.0 for m in table.rows[2].measured)
    assert table.command == "first ; test" and table.date.startswith("2026-01-02, ")  # both sweeps rebuild it
    with pytest.raises(WarpyError, match="holds a sweep of none, not NVIDIA H100"):
        S.run_sweep([(6144, 6144, 2048)], str(out), per_shape=1, timer=timer, workers=0, echo=lambda _l: None,
                    gpu="NVIDIA H100")


def test_layer_shapes_are_a_models_linear_layers_at_each_token_count() -> None:
    """`warpy bench gemm --layers HIDDEN:MLP:QKV --tokens M,...`: QKV, output, gate+up (fused while
    twice the MLP width is at most 28672), down, at each M; each shape once; bad input in one line."""
    from warpy.cli import app
    from warpy.kernels.gemm_bench import layer_shapes

    assert layer_shapes("4096:14336:6144", "1,128") == [
        (1, 6144, 4096), (1, 4096, 4096), (1, 28672, 4096), (1, 4096, 14336),
        (128, 6144, 4096), (128, 4096, 4096), (128, 28672, 4096), (128, 4096, 14336)]
    # a 70B-class MLP: gate and up apart (2 x 28672 is past 28672); two models sharing a layer: once
    assert layer_shapes("8192:28672:10240", "16") == [(16, 10240, 8192), (16, 8192, 8192), (16, 28672, 8192),
                                                      (16, 8192, 28672)]
    assert len(layer_shapes("4096:14336:6144,4096:11008:12288", "1")) == 7  # (the 4096 x 4096 output once)
    assert [m for m, _, _ in layer_shapes("2048:8192:3072")][::4] == list(S.LAYER_TOKENS)
    # the sweep's own Llama rows are these layers
    assert set(layer_shapes("4096:14336:6144")) <= set(S.default_shapes())
    for args, why in ((["--layers", "4096:14336"], "is not HIDDEN:MLP:QKV"),
                      (["--layers", "4096:14336:6144", "--tokens", "1,x"], "is not a list of row counts"),
                      (["--tokens", "1"], "add --layers")):
        r = CliRunner().invoke(app, ["bench", "gemm", *args])
        assert isinstance(r.exception, WarpyError) and why in str(r.exception), (args, r.output)


@pytest.mark.parametrize("shapes, twin", [
    ([(128, 3072, 3072), (128, 4096, 4096), (128, 2048, 8192), (256, 3072, 2048)], dict(cluster_m=2, cluster_n=4)),
    ([(16, 4096, 4096), (1, 4096, 4096), (64, 2048, 2048), (16, 2048, 8192)], dict(cluster_k=2)),
], ids=["narrow-multicast", "skinny-k-split"])
def test_clusters_are_kinds_of_their_own_where_the_sweep_times_them(shapes: list[tuple[int, int, int]],
                                                                    twin: dict[str, int]) -> None:
    """Outside the wide regime a configuration in multicast clusters, or split along K in clusters, is a
    kind of the model's with an efficiency of its own, priced as it is fitted (`work_units` and
    `sm90_cost` agree): where every shape's times are the model's predictions (the plain kind at
    efficiency 1, whole tiles and stream-K; the clustered kind at 1.25), the model (each shape left
    out) picks the fastest at every shape, the clustered kind at some."""
    from warpy.kernels.gemm import model_config

    rows = []
    for sh in shapes:
        p = GemmProblem(*sh, out_dtype="bf16")
        swap = sh[0] <= S.SKINNY_M
        base = model_config(p, 64, 64, False, swap)
        fast = model_config(p, 64, 64, False, swap, "cluster_k" in twin,
                            (twin.get("cluster_m", 1), twin.get("cluster_n", 1)))
        assert S.kind(fast) != S.kind(base) and len(S.kind(fast)) > 3
        times = {base: _model_time(sh, base, 1.0), fast: _model_time(sh, fast, 1.25)}
        if sm90_cost(p, 64, 64, True, swap=swap, eff=1.0) < float("inf"):
            sk = model_config(p, 64, 64, True, swap)
            times[sk] = _model_time(sh, sk, 1.0)
        rows.append(_row(sh, times))
    table = S.SweepTable(tuple(rows))
    vs = S.verdicts(table)
    for v in vs:
        assert v.pick_us is not None and v.pick_us == pytest.approx(v.best.us), v
    assert any(len(S.kind(v.pick)) > 3 for v in vs)
    eff = S.efficiencies(table)
    plain = {e for (k, _), e in eff.items() if len(k) == 3}
    assert len(plain) == 1 and all(e == pytest.approx(1.25 * min(plain)) for (k, _), e in eff.items() if len(k) > 3)


@settings(max_examples=50, deadline=None)
@given(bm=st.sampled_from([64, 128, 192, 256]), bn=st.integers(2, 32).map(lambda x: 8 * x))
def test_interpolated_efficiency_below_the_narrowest_kind_falls_with_the_width(bm: int, bn: int) -> None:
    """Below the narrowest width measured at its rows a narrower tile feeds fewer products a loaded
    byte, so it is priced lower, continuously down from the measured kind; at a measured kind the
    value is the hand-fitted one."""
    rows = bm if bm in (64, 128) else 128
    narrowest = min(n for b, n in TILE_EFFICIENCY if b == rows)
    e = S.interpolated_efficiency(bm, bn)
    assert 0 < e <= 1
    if bn < narrowest:
        assert e < S.interpolated_efficiency(bm, bn + 8)
    if (rows, bn) in TILE_EFFICIENCY:
        assert e == pytest.approx(TILE_EFFICIENCY[rows, bn])


def test_interpolated_efficiency_golden() -> None:
    got = [round(S.interpolated_efficiency(bm, bn), 4) for bm, bn in ((128, 32), (64, 32), (128, 64), (128, 200),
                                                                     (256, 88), (192, 168))]
    assert got == [0.45, 0.36, 0.75, 0.965, 0.8063, 0.9325]


def test_a_sweep_of_some_regimes_times_only_their_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--sweep --regimes narrow,wide`: the default shapes above M = 64 and nothing else (what the
    committed table's last sweep ran); bad lists and --regimes without --sweep in one line."""
    from warpy.cli import app

    swept: list[list[tuple[int, int, int]]] = []

    def run_sweep(shapes: Sequence[tuple[int, int, int]], *_a: Any, **_k: Any) -> S.SweepTable:
        swept.append(list(shapes))
        return S.SweepTable()

    monkeypatch.setattr(S, "run_sweep", run_sweep)
    r = CliRunner().invoke(app, ["bench", "gemm", "--sweep", "--regimes", "narrow,wide"])
    assert r.exit_code == 0, r.output
    assert swept == [[s for s in S.default_shapes() if s[0] > S.SKINNY_M]] and len(swept[0]) == 65
    r = CliRunner().invoke(app, ["bench", "gemm", "--sweep", "--regimes", "skinny", "1x4096x4096", "4096"])
    assert swept[-1] == [(1, 4096, 4096)]
    for args, why in ((["--sweep", "--regimes", "tall"], "a list of skinny, narrow, wide"),
                      (["--regimes", "wide"], "add --sweep"),
                      (["--sweep", "--regimes", "skinny", "4096"], "none of the shapes")):
        r = CliRunner().invoke(app, ["bench", "gemm", *args])
        assert isinstance(r.exception, WarpyError) and why in str(r.exception), (args, r.output)
