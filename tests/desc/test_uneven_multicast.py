"""A multicast box cut into unequal slices of whole swizzle atoms (`warpy.layout.desc.multicast_rows`,
`tma_uneven_slices`): every CTA's slice but the last is ceil(atoms / ways) atoms, the last the rest; each
lands where the whole tile's layout puts its rows (the decider), golden values, and the refusals."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from warpy.layout import Layout, LayoutError
from warpy.layout.desc import multicast_rows, tma_uneven_slices
from warpy.layout.smem import smem_tile


@settings(max_examples=200, deadline=None)
@given(atoms=st.integers(1, 32), ways=st.sampled_from([1, 2, 4, 8]))
def test_slices_cover_the_rows_in_whole_atoms_the_last_no_longer(atoms: int, ways: int) -> None:
    rows = 8 * atoms
    per, last = multicast_rows(rows, ways)
    if (per, last) == (0, 0):  # the last would get none: ways - 1 slices of ceil(atoms / ways) cover them
        assert (ways - 1) * -(-atoms // ways) >= atoms
        return
    assert (ways - 1) * per + last == rows and per % 8 == 0 and last % 8 == 0 and 8 <= last <= per
    assert per == 8 * -(-atoms // ways)
    assert (per == last) == (atoms % ways == 0)
    assert multicast_rows(rows + 4, ways) == (0, 0)  # not whole atoms


def test_multicast_rows_golden() -> None:
    assert [multicast_rows(r, w) for r, w in ((88, 2), (104, 4), (104, 2), (128, 2), (40, 4), (256, 8), (8, 1))] == [
        (48, 40), (32, 8), (56, 48), (64, 64), (0, 0), (32, 32), (8, 8)]


@pytest.mark.parametrize("rows, ways, main, last", [(88, 2, 48, 40), (104, 4, 32, 8), (200, 2, 104, 96)])
def test_uneven_slices_land_where_the_tile_puts_their_rows(rows: int, ways: int, main: int, last: int) -> None:
    tile = smem_tile(rows, 64, "bf16", "K", 128)
    glob = Layout((777, 3584), (3584, 1))
    box, tail, slices = tma_uneven_slices(glob, tile, ways)
    assert box.box == (64, main) and tail.box == (64, last) and box.swizzle == tail.swizzle == 128
    assert [(s.cta, s.smem_offset, s.coord_offset) for s in slices] == [
        (j, j * main * 128, (0, j * main)) for j in range(ways)]
    assert all(int(tile.layout((s.coord_offset[1], 0))) == s.smem_offset for s in slices)


def test_uneven_slices_refuse_what_they_cannot_cut() -> None:
    glob = Layout((777, 3584), (3584, 1))
    with pytest.raises(LayoutError, match="do not cut into 4 slices"):
        tma_uneven_slices(glob, smem_tile(40, 64, "bf16", "K", 128), 4)
    with pytest.raises(LayoutError, match="K-major"):
        tma_uneven_slices(Layout((3584, 777), (1, 3584)), smem_tile(128, 64, "bf16", "MN", 128), 2)
