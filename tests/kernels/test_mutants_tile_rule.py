"""Tests written to kill the tile group's mutants in `configure` (`kernels/gemm.py`): the rule's
stream-K split kept where the tile set by hand can take it and given again where it cannot (literal
splits worked by hand from `sm90_split`'s documented grid), clusters and A-B swaps with and without
the fields they imply, the ring made deepest unless `stages` is given. The hand-fitted model only
(the sweep's table off), so the rule's picks are the documented model's."""

from __future__ import annotations

from typing import Any, Iterator

import attrs
import pytest

from warpy.kernels.gemm import GemmProblem, choose, configure, deepest_ring
from warpy.kernels.gemm_sm90 import Sm90Config, smem_bytes
from warpy.kernels.gemm_sm100 import Sm100Config
from warpy.target import SM90A


@pytest.fixture(autouse=True)
def _the_hand_fitted_model(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("WARPY_GEMM_TABLE", "none")
    yield


def _sm90(p: GemmProblem, overrides: Any = None) -> Sm90Config:
    """The rule's sm_90a configuration, with `overrides` set by hand where given."""
    cfg = choose(p) if overrides is None else configure(p, overrides)
    assert isinstance(cfg, Sm90Config)
    return cfg


def _deepest(cfg: Any) -> bool:
    most = 16 if cfg.swap_ab else 8
    return smem_bytes(cfg) <= SM90A.max_dynamic_smem and (
        cfg.stages == most or smem_bytes(attrs.evolve(cfg, stages=cfg.stages + 1)) > SM90A.max_dynamic_smem)


def test_the_rule_s_split_kept_or_given_again_for_the_tile_set_by_hand() -> None:
    """1024 x 1024 x 65536: the rule's 128 x 256 tiles are 32, split 4 ways (128 CTAs). 128 x 64 tiles
    are 128: 4 ways would be 512 CTAs, and at 128 tiles (more than half the SMs) stream-K shares
    evenly (split 0); 64 x 256 tiles are 64: split 132 // 64 = 2. A split given by hand stays."""
    p = GemmProblem(1024, 1024, 65536, out_dtype="bf16")
    rule = _sm90(p)
    assert isinstance(rule, Sm90Config)
    assert (rule.bm, rule.bn, rule.stream_k, rule.split) == (128, 256, True, 4)
    narrow = _sm90(p, {"bn": 64})
    assert (narrow.bm, narrow.bn, narrow.stream_k, narrow.split) == (128, 64, True, 0)
    short = _sm90(p, {"consumers": 1})
    assert (short.bm, short.bn, short.split) == (64, 256, 2)
    assert _sm90(p, {"bn": 64, "split": 3}).split == 3
    assert all(_deepest(c) for c in (narrow, short))
    # 256 x 256 x 65536: the rule's 8 tiles of 128 x 64 split 16 ways; 2 tiles of 128 x 256 keep 16
    # (32 CTAs: the rule's split fits), 16 tiles of 64 x 64 take 132 // 16 = 8
    q = GemmProblem(256, 256, 65536, out_dtype="bf16")
    assert (_sm90(q).bn, _sm90(q).split) == (64, 16)
    assert (_sm90(q, {"bn": 256}).split, _sm90(q, {"consumers": 1}).split) == (16, 8)


def test_clusters_and_swaps_with_and_without_what_they_imply() -> None:
    p = GemmProblem(1024, 1024, 65536, out_dtype="bf16")
    both = _sm90(p, {"cluster_m": 2, "stream_k": True})
    assert (both.cluster_m, both.stream_k, both.split) == (2, True, 4)      # stream-K asked for: kept
    one = _sm90(p, {"cluster_m": 1})
    assert (one.cluster_m, one.stream_k, one.split) == (1, True, 4)          # no cluster: the rule's schedule
    two = _sm90(p, {"cluster_m": 2})
    assert (two.cluster_m, two.stream_k, two.split) == (2, False, 0)
    swapped = _sm90(p, {"swap_ab": True})
    assert swapped.swap_ab and not swapped.staged_epilogue                    # C^T leaves through the registers
    kept = _sm90(p, {"swap_ab": True, "staged_epilogue": True})
    assert kept.swap_ab and kept.staged_epilogue
    unswapped = _sm90(p, {"swap_ab": False})
    assert not unswapped.swap_ab and unswapped.staged_epilogue


def test_stages_given_are_kept_and_otherwise_the_ring_is_deepest() -> None:
    p = GemmProblem(1024, 1024, 65536, out_dtype="bf16")
    assert _sm90(p, {"stages": 3}).stages == 3
    assert _sm90(p, {"bn": 64, "stages": 3}).stages == 3
    wide = _sm90(p, {"bn": 64})
    assert wide.stages == deepest_ring(attrs.evolve(wide, stages=3)).stages == 8


def test_sm100_overrides_are_the_fields_only() -> None:
    p = GemmProblem(4096, 4096, 4096, "bf16", "bf16", arch="sm_100a")
    cfg = configure(p, {"stages": 4})
    assert isinstance(cfg, Sm100Config) and cfg == attrs.evolve(choose(p), stages=4)


def test_sm100_fused_epilogue_takes_whole_tiles_where_the_table_splits() -> None:
    """The B200 table splits 256 x 256 x 65536 fp32 74 ways (its long-K rule) and runs 1024 x 1024 x 4096
    by stream-K; a fused epilogue takes whole tiles stored from the registers at both."""
    from warpy.kernels.gemm_epilogue import Epilogue

    for shape, plain in (((256, 256, 65536), (74, False, True)), ((1024, 1024, 4096), (1, True, True))):
        c = choose(GemmProblem(*shape, arch="sm_100a"))
        f = choose(GemmProblem(*shape, arch="sm_100a", epilogue=Epilogue(act="relu")))
        assert isinstance(c, Sm100Config) and isinstance(f, Sm100Config)
        assert (c.split, c.stream_k, c.tma_store) == plain
        assert (f.split, f.stream_k, f.tma_store) == (1, False, False)


def test_build_takes_the_configuration_given_else_the_rule_s() -> None:
    from warpy.errors import WarpyError
    from warpy.kernels.gemm import build

    p = GemmProblem(256, 256, 512)
    for stages in (3, 5):
        cfg = _sm90(p, {"stages": stages})
        k = build(p, cfg).kernel()
        assert k.header.dynsmem == smem_bytes(cfg) and k.header.kernel.endswith(f"_s{stages}_g8")
    assert build(p).kernel().header.kernel == build(p, choose(p)).kernel().header.kernel
    with pytest.raises(WarpyError) as e:
        build(p, choose(GemmProblem(256, 256, 512, arch="sm_100a")))
    assert str(e.value) == "an sm_100a configuration cannot build for sm_90a"
    b200 = GemmProblem(256, 256, 512, arch="sm_100a")
    cfg100 = configure(b200, {"stages": 3})
    k100 = build(b200, cfg100).kernel()
    assert k100.header.sm == "sm_100a" and k100.header.kernel.startswith("gemm_sm100")
    assert k100.header.kernel != build(b200).kernel().header.kernel  # the stages given, not the rule's


def test_a_swapped_tile_set_by_hand_counts_its_tiles_swapped() -> None:
    """A and B swapped: tiles of N by BM and M by BN. 320 x 2112 x 65536: the rule's 128 x 192 tiles are
    3 x 11 = 33, split 4 ways (132 CTAs); swapped they are cdiv(2112, 128) x cdiv(320, 192) = 17 x 2 = 34,
    4 ways would be 136 CTAs: split again, 132 // 34 = 3. 192 x 640 x 65536: the rule's 64 x 192 tiles
    are 12, split 11 ways; swapped 64 x 128 tiles are 10 x 2 = 20: 132 // 20 = 6 (unswapped, 15: 8)."""
    p = GemmProblem(320, 2112, 65536, out_dtype="bf16")
    assert (_sm90(p).bm, _sm90(p).bn, _sm90(p).split) == (128, 192, 4)
    assert _sm90(p, {"swap_ab": True}).split == 3
    q = GemmProblem(192, 640, 65536, out_dtype="bf16")
    assert (_sm90(q).bm, _sm90(q).bn, _sm90(q).split) == (64, 192, 11)
    assert _sm90(q, {"swap_ab": True, "bn": 128}).split == 6
    assert _sm90(q, {"bn": 128}).split == 8


def test_a_split_equal_to_the_k_blocks_is_kept() -> None:
    """128 x 128 x 8448: 132 k blocks of 64; the rule's two 128 x 64 tiles split 66 ways. With k blocks
    of 128 (66 of them) and one 128 x 128 tile, 66 ways is one k block a CTA: kept (not given again,
    which would be 132 ways, more than the k blocks)."""
    p = GemmProblem(128, 128, 8448)
    assert (_sm90(p).bn, _sm90(p).split) == (64, 66)
    assert _sm90(p, {"bk": 128, "bn": 128}).split == 66
