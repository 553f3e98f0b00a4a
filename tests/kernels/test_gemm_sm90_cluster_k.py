"""A tile's k blocks split over the CTAs of a cluster (`cluster_k`), without a GPU: the CTAs trade
partial sums through shared memory (a bulk copy of each other rank's share into its receive
buffer), the checker runs whole clusters with values and finds C equal to numpy, removing any step
of the protocol (the proxy fence, the warpgroups' barrier, the wait for the copies, the wait that
keeps a CTA's shared memory until its copies have landed) is reported, the shares partition the
accumulator, and what the program cannot run is refused in one line. GPU runs:
tests/gpu/test_gemm_wide_gpu.py."""

from __future__ import annotations

import re

import attrs
import pytest
from hypothesis import given, settings, strategies as st

from warpy.check.report import check_kernel
from warpy.errors import WarpyError
from warpy.isa.text import parse
from warpy.kernels.gemm import FAMILY as GEMM, GemmProblem, configure
from warpy.kernels.gemm_sm90 import Sm90Config, Sm90Gemm, exchange_bytes, exchange_shares, smem_bytes
from warpy.lift.lifter import build as assemble
from warpy.target import SM90A


def _check(M: int, N: int, K: int, out: str, cfg: Sm90Config, text: str | None = None):  # type: ignore[no-untyped-def]
    prob = GemmProblem(M, N, K, out_dtype=out)
    prog = Sm90Gemm(prob, cfg).build()
    named = parse(text) if text is not None else prog.kernel()
    col = None if text is not None else prog.coloured()
    return check_kernel(named, col, values=True, expect=GEMM.expectation(prob)), prog


@pytest.mark.parametrize("M,N,K,out,kw", [
    (128, 256, 512, "bf16", dict(bn=128, consumers=1, cluster_k=4)),             # even shares
    (200, 300, 1000, "bf16", dict(bn=128, consumers=1, cluster_k=3)),            # ragged, shares 5, 5, 6
    (130, 200, 640, "fp32", dict(bn=64, consumers=2, cluster_k=3)),              # shares across warpgroups
    (64, 384, 1024, "fp16", dict(bn=64, consumers=2, cluster_k=2, swap_ab=True)),  # C^T, 128 weight rows a tile
    (8, 300, 512, "bf16", dict(bn=16, consumers=2, cluster_k=4, swap_ab=True)),  # decode: one unit a rank
])
def test_the_cluster_sums_equal_numpy(M: int, N: int, K: int, out: str, kw: dict[str, object]) -> None:
    cfg = Sm90Config(stages=4, **kw)  # type: ignore[arg-type]
    rep, prog = _check(M, N, K, out, cfg)
    assert rep.ok, rep.messages()
    assert rep.values_checked > 0 and rep.values_wrong == 0 and rep.values_partial == 0
    s = cfg.cluster_k
    assert prog.cluster == (s, 1, 1)
    g = Sm90Gemm(GemmProblem(M, N, K, out_dtype=out), cfg)
    assert prog.grid == (g.tiles * s, 1, 1)


# each step of the exchange, and the line that removing it leaves out
STEPS = {
    "proxy fence": r"FENCE\.VIEW\.ASYNC\.S",
    "warpgroups' barrier": r"BAR\.SYNC\.DEFER_BLOCKING 0x4",
    "wait for the copies": None,  # the first try-wait loop on x_recv_full
    "wait before exit": None,     # the try-wait loop on x_sent
}


def _without(text: str, step: str) -> str:
    pat = STEPS[step]
    if pat is not None:
        out, n = re.subn(r"\n[^\n]*" + pat + r"[^\n]*\n", "\n", text, count=1)
        assert n == 1, step
        return out
    # the loop: WAIT_n: / SYNCS.PHASECHK ... [bar...] / @!waited BRA WAIT_n; the copies' wait of the first
    # consumer warpgroup, or every warpgroup's wait before exit (one of them keeps the CTA alive)
    bar, count = ("x_recv_full", 1) if step == "wait for the copies" else ("x_sent", 0)
    out, n = re.subn(r"\nWAIT_\d+:\n[^\n]*PHASECHK[^\n]*" + bar + r"[^\n]*\n[^\n]*BRA WAIT_\d+[^\n]*\n", "\n", text,
                     count=count)
    assert n >= 1, step
    return out


@pytest.mark.parametrize("step", sorted(STEPS))
def test_every_step_of_the_exchange_is_needed(step: str) -> None:
    cfg = Sm90Config(bn=64, consumers=2, stages=4, cluster_k=2)
    text = str(Sm90Gemm(GemmProblem(128, 128, 512, "bf16", "fp32"), cfg).build().kernel())
    rep, _ = _check(128, 128, 512, "fp32", cfg, _without(text, step))
    assert not rep.ok, step


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3), st.integers(2, 32).map(lambda x: 8 * x), st.integers(2, 8))
def test_the_shares_partition_the_accumulator(consumers: int, bn: int, s: int) -> None:
    cfg = Sm90Config(bn=bn, consumers=consumers, cluster_k=s)
    units = consumers * bn // 8
    shares = exchange_shares(cfg)
    assert len(shares) == s and shares[0][0] == 0 and shares[-1][1] == units
    assert all(a[1] == b[0] for a, b in zip(shares, shares[1:]))  # contiguous, in rank order
    sizes = [hi - lo for lo, hi in shares]
    assert max(sizes) - min(sizes) <= 1 and (min(sizes) >= 1 or s > units)
    # send buffer of every unit, a receive slot of the largest share for every rank, 2 KiB a unit
    assert exchange_bytes(cfg) == (units + s * max(sizes)) * 2048 + 16
    assert smem_bytes(cfg) == smem_bytes(Sm90Config(bn=bn, consumers=consumers)) + exchange_bytes(cfg)


def test_configure_gives_the_deepest_ring_that_fits_beside_the_exchange() -> None:
    prob = GemmProblem(128, 2048, 2048, out_dtype="bf16")
    cfg = configure(prob, "bn=128,consumers=1,cluster_k=4")
    assert isinstance(cfg, Sm90Config)
    assert not cfg.stream_k and not cfg.split and not cfg.staged_epilogue
    assert smem_bytes(cfg) <= SM90A.max_dynamic_smem
    deeper = attrs.evolve(cfg, stages=cfg.stages + 1)
    assert smem_bytes(deeper) > SM90A.max_dynamic_smem or cfg.stages == 8
    kernel = Sm90Gemm(prob, cfg).build().kernel()
    cubin = assemble(kernel, "sm_90a")
    res = cubin.resource(kernel.header.kernel)
    assert res.spill_stores == 0 and res.spill_loads == 0


@pytest.mark.parametrize("kw,words", [
    (dict(cluster_k=9), "2 to 8"),
    (dict(cluster_k=2, stream_k=True), "stream-K"),
    (dict(cluster_k=2, cluster_m=2), "multicast clusters"),
    (dict(cluster_k=2, staged_epilogue=True), "staged epilogue"),
    (dict(cluster_k=8, bn=16, consumers=1, swap_ab=True), "shares"),
])
def test_cluster_k_refusals(kw: dict[str, object], words: str) -> None:
    with pytest.raises(WarpyError, match=words):
        Sm90Gemm(GemmProblem(16, 512, 1024, "bf16", "bf16"), Sm90Config(**{"bn": 64, "consumers": 1, **kw}))  # type: ignore[arg-type]


def test_more_ctas_than_k_blocks_is_refused() -> None:
    with pytest.raises(WarpyError, match="k blocks"):
        Sm90Gemm(GemmProblem(128, 128, 128, "bf16", "fp32"), Sm90Config(bn=64, consumers=1, cluster_k=4))
