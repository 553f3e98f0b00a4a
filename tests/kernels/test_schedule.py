"""The GEMMs' tile schedule: the instructions `TileOrder.emit` writes, run by the ALU interpreter for
every tile number, give exactly the model `TileOrder.tile_of`, and the model visits every tile once."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.errors import WarpyError
from warpy.isa.families import alu
from warpy.isa.interp import Machine, run
from warpy.isa.program import Program
from warpy.kernels.schedule import Magic, TileOrder


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
