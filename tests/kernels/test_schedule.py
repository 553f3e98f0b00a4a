"""The GEMMs' tile schedule: the instructions `TileOrder.emit` writes, run by the ALU interpreter for
every tile number, give exactly the model `TileOrder.tile_of`, and the model visits every tile once."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.errors import WarpyError
from warpy.isa.families import alu, control
from warpy.isa.interp import Machine, run
from warpy.isa.program import Program
from warpy.kernels.schedule import Magic, StreamK, TileOrder


def _emitted(order: TileOrder) -> list[tuple[int, int]]:
    p = Program("sched", "sm_90a", threads=32)
    t = p.r("t")
    p.emit(alu.s2r(t, "SR_CTAID.X"))  # the tile number, set per run below
    m_blk, n_blk = order.emit(p, t)
    lines = p.kernel().lines
    out = []
    for tile in range(order.tiles):
        m = run(lines, Machine(sreg={"SR_CTAID.X": tile}))
        out.append((m.v[m_blk.name], m.v[n_blk.name]))
    return out


@pytest.mark.parametrize("mt,nt,group,serp", [
    (32, 16, 8, False), (33, 2, 8, False), (8, 12, 8, True), (13, 5, 4, True), (3, 7, 8, False), (1, 9, 8, True),
])
def test_emitted_order_is_the_model_and_a_bijection(mt: int, nt: int, group: int, serp: bool) -> None:
    order = TileOrder(mt, nt, group, serp)
    model = [order.tile_of(t) for t in range(order.tiles)]
    assert _emitted(order) == model
    assert sorted(model) == [(i, j) for i in range(mt) for j in range(nt)]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(1, 40), st.integers(1, 16), st.booleans())
def test_the_model_visits_every_tile_once(mt: int, nt: int, group: int, serp: bool) -> None:
    order = TileOrder(mt, nt, group, serp)
    assert sorted(order.tile_of(t) for t in range(order.tiles)) == [(i, j) for i in range(mt) for j in range(nt)]


@pytest.mark.parametrize("d", [2, 3, 7, 8, 10, 16, 33, 128, 132, 255, 1000])
def test_division_by_a_constant_is_exact_over_the_whole_range(d: int) -> None:
    x_max = 1 << 17
    mg = Magic.find(d, x_max)
    assert all(mg(x) == x // d for x in range(x_max + 1))


def test_division_by_one_needs_no_magic() -> None:
    with pytest.raises(WarpyError):
        Magic.find(1, 10)


def _emitted_segments(sk: StreamK, g: int) -> tuple[list[tuple[int, int, int]], list[int]]:
    """Run the emitted walk for worker g: each segment's registers, and first_worker of its tile."""
    p = Program("sk", "sm_90a", threads=32)
    w = p.r("worker")
    p.emit(alu.s2r(w, "SR_CTAID.X"))
    with sk.emit(p, w) as seg:
        q = sk.emit_first_worker(p, p.r("first"), seg.t)
        mark = p.emit(alu.mov(p.r("mark"), 0))
    p.emit(control.exit_())
    segs: list[tuple[int, int, int]] = []
    firsts: list[int] = []

    def on_step(pc: int, i: object, m: Machine, before: dict[str, int]) -> None:
        if i is mark:
            segs.append((m.v[seg.t.name], m.v[seg.k_lo.name], m.v[seg.k_cnt.name]))
            firsts.append(m.v[q.name])

    run(p.kernel().lines, Machine(sreg={"SR_CTAID.X": g}), on_step=on_step)
    return segs, firsts


@pytest.mark.parametrize("tiles,kt,G", [(32, 1024, 132), (72, 24, 132), (64, 16, 132), (5, 7, 3), (1, 9, 9), (12, 1, 12)])
def test_emitted_stream_k_walk_is_the_model(tiles: int, kt: int, G: int) -> None:
    sk = StreamK(tiles, kt, G)
    for g in sorted({0, 1, G // 2, G - 1}):
        segs, firsts = _emitted_segments(sk, g)
        assert segs == sk.segments(g)
        assert firsts == [sk.first_worker(t) for t, _, _ in segs]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 80), st.integers(1, 300), st.integers(1, 140))
def test_stream_k_covers_every_iteration_once_with_one_finisher_a_tile(tiles: int, kt: int, G: int) -> None:
    if tiles * kt < G:
        with pytest.raises(WarpyError):
            StreamK(tiles, kt, G)
        return
    sk = StreamK(tiles, kt, G)
    seen: list[tuple[int, int]] = []
    for g in range(G):
        segs = sk.segments(g)
        assert segs, "every worker has work"
        for n, (t, lo, cnt) in enumerate(segs):
            assert cnt >= 1 and 0 <= lo and lo + cnt <= kt and cnt <= sk.max_segment()
            seen += [(t, k) for k in range(lo, lo + cnt)]
            if lo + cnt < kt:  # a contribution: only the first segment a worker walks
                assert n == 0
            else:
                assert sk.finisher(t) == g
            if lo == 0:
                assert sk.first_worker(t) == g
    assert sorted(seen) == [(t, k) for t in range(tiles) for k in range(kt)]
    for t in range(tiles):
        assert 0 <= sk.finisher(t) - sk.first_worker(t) <= sk.max_contributors()
