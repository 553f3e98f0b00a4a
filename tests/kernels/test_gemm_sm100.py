"""The Blackwell GEMM (kernels/gemm_sm100.py) without a B200: representative programs build, lift,
assemble for sm_100a without spills, and their disassembly shows the instructions the program is
made of (the pair MMA, the multicast commit, the pair TMA, tensor-memory loads, ...); the rule
reproduces the reference table of B200 configurations; the tile order visits every tile once."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.kernels.gemm_sm100 import Sm100Config, Sm100Gemm, choose_sm100, smem_bytes
from warpy.kernels.gemm import GemmProblem, build, choose
from warpy.errors import WarpyError
from warpy.lift.disasm import check_opcodes, disassemble
from warpy.lift.lifter import expected_opcodes, lift
from warpy.lift.ptxas import FAILING_KINDS, assemble

ALWAYS = ["UTCHMMA.2CTA", "UTCBAR.2CTA.MULTICAST", "UTMALDG.2D.2CTA", "LDTM.x32",
          "UTCATOMSWS.2CTA.FIND_AND_SET.ALIGN", "SYNCS.PHASECHK.TRANS64.TRYWAIT"]


def assemble_checked(problem: GemmProblem, cfg: Sm100Config | None = None, extra: tuple[str, ...] = ()) -> tuple[Any, Any]:
    kern = build(problem, cfg).kernel()
    cub = assemble(lift(kern, "sm_100a"), "sm_100a", allow=FAILING_KINDS)
    r = cub.resource(kern.header.kernel)
    assert r.spill_stores == 0 and r.spill_loads == 0, (r.spill_stores, r.spill_loads)
    assert not [w for w in cub.warnings if w.kind != "other"], cub.warnings
    assert kern.header.dynsmem <= 232448
    check_opcodes(expected_opcodes(kern, "sm_100a") + ALWAYS + list(extra), cub, kern.header.kernel)
    return kern, cub


@pytest.mark.parametrize("shape,out,extra", [
    ((2048, 2048, 2048), "fp32", ()),                 # 2 accumulators, fixed grid, groups of 16
    ((1024, 1024, 1024), "fp32", ()),                 # M = 128 pair MMAs, ring 13, asking ahead
    ((3072, 1280, 2048), "fp32", ("UGETNEXTWORKID.BROADCAST", "UTMALDG.2D.MULTICAST.2CTA", "ACQBULK", "PREEXIT")),
    ((1024, 1024, 65536), "fp32", ("UTMAREDG.2D.ADD", "REDG.E.ADD.STRONG.GPU", "LDG.E.STRONG.GPU")),  # split-K
    ((2048, 2048, 16384), "fp32", ("UTMAREDG.2D.ADD", "REDG.E.ADD.STRONG.GPU", "LDG.E.STRONG.GPU")),  # stream-K
])
def test_table_shapes_assemble(shape: tuple[int, int, int], out: str, extra: tuple[str, ...]) -> None:
    assemble_checked(GemmProblem(*shape, dtype="fp16", out_dtype=out, arch="sm_100a"), extra=extra)


def test_ragged_multicast_fp16_out() -> None:
    # 2 x 2 clusters (Bᵀ multicast to the other pair), ragged in M, N and K, fp16 stores
    cfg = Sm100Config(bm=128, cta_rows=128, stages=6, accs=2, pairs=2)
    kern, _ = assemble_checked(GemmProblem(127, 8191, 136, dtype="bf16", out_dtype="fp16", arch="sm_100a"), cfg,
                               ("UTMALDG.2D.MULTICAST.2CTA",))
    assert kern.header.cluster == (4, 1, 1)


TABLE: dict[tuple[int, int, int], dict[str, Any]] = {
    (1024, 1024, 1024): dict(bm=128, cta_rows=64, stages=13, accs=1, ask_ahead=True, persistent=False, tma_store=False),
    (1536, 1536, 1536): dict(bm=128, cta_rows=128, stages=6, accs=1, pdl="last_load", persistent=False, tma_store=False),
    (2048, 2048, 2048): dict(bm=128, cta_rows=128, stages=8, accs=2, group=16, persistent=True),
    (3072, 1280, 2048): dict(bm=128, cta_rows=128, stages=8, accs=2, pairs=4, clc=True, pdl="last_load"),
    (4096, 4096, 1024): dict(bm=256, cta_rows=128, stages=5, accs=2, pdl="last_load"),
    (4096, 4096, 4096): dict(bm=192, cta_rows=128, stages=7, accs=2, clc=True),
    (8192, 2048, 4096): dict(bm=192, cta_rows=128, stages=7, accs=2, clc=True),
    (8192, 8192, 8192): dict(bm=256, cta_rows=256, stages=4, clc=True, ask_ahead=True, serpentine=True),
    (16384, 16384, 16384): dict(bm=256, cta_rows=256, stages=4, clc=True, ask_ahead=True, serpentine=True),
    (2048, 2048, 16384): dict(bm=256, cta_rows=128, stages=6, accs=2, ask_ahead=True, stream_k=True),
    (1024, 1024, 65536): dict(bm=256, cta_rows=256, stages=4, ask_ahead=True, split=9),
}


@pytest.mark.parametrize("shape", list(TABLE))
def test_rule_reproduces_the_b200_reference_table(shape: tuple[int, int, int]) -> None:
    cfg = choose(GemmProblem(*shape, dtype="fp16", arch="sm_100a"))
    assert isinstance(cfg, Sm100Config)
    for key, want in TABLE[shape].items():
        assert getattr(cfg, key) == want, (shape, key, getattr(cfg, key), want)
    assert smem_bytes(cfg) <= 232448


@pytest.mark.parametrize("shape", [(1, 4096, 4096), (4097, 129, 72), (1000, 1000, 1000), (127, 8191, 136),
                                   (5, 7, 8), (300000, 16, 64)])
def test_rule_is_buildable_elsewhere(shape: tuple[int, int, int]) -> None:
    cfg = choose_sm100(*shape)
    Sm100Gemm(GemmProblem(*shape, "bf16", "fp32", arch="sm_100a"), cfg)  # the configuration is checked on construction
    assert isinstance(cfg, Sm100Config) and smem_bytes(cfg) <= 232448
    assert cfg.bm % 16 == 0 and 16 <= cfg.bm <= 256 and cfg.cta_rows in (64, 128, 256)


def test_bad_configs_are_refused() -> None:
    with pytest.raises(WarpyError, match="cta_rows"):
        Sm100Gemm(GemmProblem(256, 256, 256, "bf16", "fp32", arch="sm_100a"), Sm100Config(cta_rows=96))
    with pytest.raises(WarpyError, match="tensor-memory columns"):
        Sm100Gemm(GemmProblem(256, 256, 256, "bf16", "fp32", arch="sm_100a"), Sm100Config(bm=256, cta_rows=256, accs=2))
    with pytest.raises(WarpyError, match="shared memory"):
        Sm100Gemm(GemmProblem(256, 256, 256, "bf16", "fp32", arch="sm_100a"), Sm100Config(bm=256, cta_rows=256, accs=1, stages=8))


def _div(g: Sm100Gemm, x: int, d: int, x_max: int) -> int:
    from warpy.kernels.schedule import Magic

    if d == 1:
        return x
    mg = Magic.find(d, max(x_max, g.tiles))
    return (x * mg.mul) >> (32 + mg.shift)


def _pieces(g: Sm100Gemm, cid: int) -> list[tuple[int, int, int, bool]]:
    """(tile, k_lo, k_cnt, owner) of cluster cid, as the program's work loop computes them."""
    if g.cfg.split > 1:
        s = _div(g, cid, g.tiles, g.clusters)
        t = cid - s * g.tiles
        lo = _div(g, s * g.kt, g.cfg.split, g.cfg.split * g.kt)
        hi = _div(g, s * g.kt + g.kt, g.cfg.split, g.cfg.split * g.kt)
        return [(t, lo, hi - lo, s == 0)]
    G, W = g.clusters, g.work
    lo = _div(g, cid * W, G, G * W)
    cur = _div(g, cid * W + W, G, G * W)
    out = []
    while True:
        t = _div(g, cur - 1, g.kt, W)
        seg_lo = max(t * g.kt, lo)
        out.append((t, seg_lo - t * g.kt, cur - seg_lo, seg_lo == t * g.kt))
        cur = seg_lo
        if not cur > lo:
            return out


@pytest.mark.parametrize("shape", [(2048, 2048, 16384), (1024, 1024, 65536), (1000, 1000, 16000), (64, 64, 65536),
                                   (3000, 500, 20000)])
def test_split_and_stream_k_cover_every_k_block_once(shape: tuple[int, int, int]) -> None:
    """Every (tile, k block) is computed by exactly one cluster; every tile has exactly one owner
    (who zeroes it), and in stream-K each cluster meets its owned tiles before the tile it adds to."""
    cfg = choose_sm100(*shape)
    assert cfg.split > 1 or cfg.stream_k
    g = Sm100Gemm(GemmProblem(*shape, "bf16", "fp32", arch="sm_100a"), cfg)
    seen: dict[tuple[int, int], int] = {}
    owners: dict[int, int] = {}
    for cid in range(g.clusters):
        pieces = _pieces(g, cid)
        owned = [p[3] for p in pieces]
        assert owned == sorted(owned, reverse=True), (cid, pieces)  # owners first: no owner waits
        for t, lo, cnt, own in pieces:
            assert cnt >= 1
            owners[t] = owners.get(t, 0) + int(own)
            for k in range(lo, lo + cnt):
                seen[(t, k)] = seen.get((t, k), 0) + 1
    assert seen == {(t, k): 1 for t in range(g.tiles) for k in range(g.kt)}
    assert owners == {t: 1 for t in range(g.tiles)}


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 20000), st.integers(1, 20000), st.integers(1, 12000).map(lambda k: 8 * k),
       st.sampled_from(["fp32", "bf16", "fp16"]))
def test_any_shape_gets_a_program_that_builds(m: int, n: int, k: int, out: str) -> None:
    """choose() gives every valid shape a configuration that builds: whole clusters, a grid that
    fits the B200's 148 SMs when it is persistent, shared memory within the opt-in limit."""
    prob = GemmProblem(m, n, k, dtype="bf16", out_dtype=out, arch="sm_100a")
    cfg = choose(prob)
    assert isinstance(cfg, Sm100Config)
    kern = build(prob, cfg).kernel()
    h = kern.header
    assert h.grid[0] % h.cluster[0] == 0 and h.cluster[0] == 2 * cfg.pairs
    if cfg.persistent and not cfg.clc:
        assert h.grid[0] <= 148
    assert h.dynsmem <= 232448
