"""MMA and copy atoms: TV layouts are bijections (or declared broadcasts) and agree with the PTX ISA's
fragment figures, written out here as formulas."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from warpy.layout.atoms import (
    ldmatrix_fragment,
    ldmatrix_row_addresses,
    tcgen05_ld_32x32b,
    tmem_accumulator,
    tmem_ld_coords,
    tmem_lane_col,
    tmem_warp_lanes,
    umma_ss,
    wgmma,
    wgmma_acc_layout,
)
from warpy.layout.core import Layout, LayoutError

PROFILE = settings(deadline=None, max_examples=40)


def values(lay: Layout) -> list[int]:
    return [lay(i) for i in range(lay.size())]


def is_bijection(lay: Layout, n: int) -> bool:
    return sorted(values(lay)) == list(range(n))


@pytest.mark.parametrize("n", range(8, 257, 8))
def test_wgmma_accumulator_is_the_ptx_figure(n):
    c = wgmma_acc_layout(n)
    assert is_bijection(c, 64 * n)
    for t in range(128):
        warp, lane = divmod(t, 32)
        for v in range(n // 2):
            row = 16 * warp + 8 * ((v // 2) % 2) + lane // 4
            col = 8 * (v // 4) + 2 * (lane % 4) + v % 2
            assert c((t, v)) == row + 64 * col


def test_wgmma_register_a_is_the_ptx_figure():
    atom = wgmma(64, "bf16", a_from_registers=True)
    assert is_bijection(atom.a, 64 * 16)
    for t in range(128):
        warp, lane = divmod(t, 32)
        for v in range(8):  # a0..a7: pairs along K, then +8 rows, then +8 K
            row = 16 * warp + 8 * ((v // 2) % 2) + lane // 4
            k = 8 * (v // 4) + 2 * (lane % 4) + v % 2
            assert atom.a((t, v)) == row + 64 * k


def test_wgmma_shared_operands_are_broadcast():
    atom = wgmma(128, "fp16")
    assert (atom.m, atom.n, atom.k, atom.threads) == (64, 128, 16, 128)
    assert atom.a.stride[0] == 0 and atom.b.stride[0] == 0
    assert is_bijection(Layout(atom.a.shape[1], atom.a.stride[1]), 64 * 16)
    assert wgmma(64, "tf32").k == 8 and wgmma(64, "e4m3").k == 32


@given(st.sampled_from([1, 2]), st.data())
@settings(deadline=None, max_examples=20)
def test_umma_atoms_are_bijections(cta_group, data):
    m = data.draw(st.sampled_from([64, 128] if cta_group == 1 else [128, 256]))
    step = 8 if cta_group == 1 else 16
    n = step * data.draw(st.integers(1, 256 // step))
    atom = umma_ss(m, n, "bf16", cta_group=cta_group)
    assert atom.threads == cta_group and atom.k == 16
    assert is_bijection(atom.a, m * 16) and is_bijection(atom.b, n * 16) and is_bijection(atom.c, m * n)
    if cta_group == 2:  # CTA 1 holds the upper half of M
        assert atom.c((1, 0)) == m // 2
        assert atom.name == "SM100_MMA_F16BF16_2x1SM_SS"


def test_umma_refuses_illegal_shapes():
    for m, n, g in ((256, 64, 1), (128, 12, 1), (64, 64, 2), (128, 24, 2), (128, 272, 1)):
        with pytest.raises(LayoutError):
            umma_ss(m, n, cta_group=g)


@pytest.mark.parametrize("m,n,g", [(128, 256, 1), (64, 256, 1), (256, 256, 2), (128, 256, 2), (128, 8, 1), (64, 32, 1)])
def test_tmem_accumulator_is_injective_into_tmem(m, n, g):
    acc = tmem_accumulator(m, n, g)
    rows = m // g
    cells = {acc((r, c)) for r in range(rows) for c in range(n)}
    assert len(cells) == rows * n
    for a in cells:
        lane, col = tmem_lane_col(a)
        assert 0 <= lane < 128 and 0 <= col < 512
    if (m, g) in ((128, 1), (256, 2)):
        assert all(tmem_lane_col(acc((r, c))) == (r, c) for r in range(rows) for c in range(0, n, 7))


@pytest.mark.parametrize("warp", range(8))
def test_tcgen05_ld_32x32b_reaches_the_warps_lanes(warp):
    frag, base = tcgen05_ld_32x32b(16, warp, column=32)
    lanes = tmem_warp_lanes(warp)
    assert lanes == range(32 * (warp % 4), 32 * (warp % 4) + 32)
    for t in range(32):
        for v in range(16):
            assert tmem_lane_col(base + frag((t, v))) == (lanes.start + t, 32 + v)
    coords = tmem_ld_coords(128, 64, 16, warp, column=32)
    assert coords[5][3] == (32 * (warp % 4) + 5, 35)


def test_tcgen05_ld_m64_upper_half_lanes_are_not_accumulator():
    coords = tmem_ld_coords(64, 64, 4, warp=2)
    assert coords[3] == [(35, 0), (35, 1), (35, 2), (35, 3)]
    assert all(c is None for t in range(16, 32) for c in coords[t])


def test_tcgen05_ld_refuses():
    with pytest.raises(LayoutError):
        tcgen05_ld_32x32b(3)
    with pytest.raises(LayoutError):
        tcgen05_ld_32x32b(128, column=400)


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_fragment_is_the_ptx_figure(num, trans):
    f = ldmatrix_fragment(num, trans)
    assert is_bijection(f, 64 * num)
    for t in range(32):
        for v in range(2 * num):
            mat, j = divmod(v, 2)
            row, col = t // 4, 2 * (t % 4) + j
            if trans:
                row, col = col, row
            assert f((t, v)) == row + 8 * col + 64 * mat
    addrs = ldmatrix_row_addresses(num)
    assert addrs[:8 * num] == [(t % 8, t // 8) for t in range(8 * num)]
    assert all(a is None for a in addrs[8 * num:])
