"""The checker's model of what HGMMA reads from an MN-major (`.tnspA`/`.tnspB`) descriptor: at every
element of every K-step it is the address the layout algebra puts the tile's element at
(`warpy.layout.smem`), through the encoder's word (`warpy.layout.desc.smem_descs`); a K-major read of
the same word is not."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.check.families.wgmma import gmma_rows, gmma_tile
from warpy.layout.desc import mma_k_elems, smem_descs
from warpy.layout.smem import repeat_bytes, smem_tile


def _layout_bytes(tile, addr: int, k0: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    e, kk = tile.elem_bytes, mma_k_elems(tile.dtype)
    return np.array([[tile.layout.swizzle(addr + tile.linear(r, k0 + kb // e)) + kb % e for kb in range(kk * e)]
                     for r in range(tile.rows)], dtype=np.int64)


@settings(deadline=None, max_examples=40)
@given(st.sampled_from(["bf16", "fp16"]), st.sampled_from([0, 32, 64, 128]), st.integers(1, 4), st.integers(1, 4),
       st.integers(0, 8))
def test_mn_major_reads_are_the_layouts(dtype: str, swizzle: int, mn_spans: int, k_groups: int, place: int) -> None:
    se = (swizzle or 16) // 2
    tile = smem_tile(se * mn_spans, 16 * k_groups, dtype, "MN", swizzle)
    addr = repeat_bytes(swizzle) * place
    for j, desc in enumerate(smem_descs(tile, addr, "sm90")):
        lo, hi = desc & 0xFFFFFFFF, desc >> 32
        want = _layout_bytes(tile, addr, 16 * j)
        assert np.array_equal(gmma_tile(lo, hi, tile.rows, 32, True, 2), want)
        if tile.rows > 8:  # a K-major reading of the word is another tile
            assert not np.array_equal(gmma_rows(lo, hi, tile.rows, 32), want)


def test_golden_128b_swizzle() -> None:
    """64 x 16 bf16, 128-byte swizzle at 0: element (r, k) at k*128 + 2r, its 16-byte
    chunk XORed with the K-row mod 8."""
    tile = smem_tile(64, 16, "bf16", "MN", 128)
    desc = smem_descs(tile, 0, "sm90")[0]
    got = gmma_tile(desc & 0xFFFFFFFF, desc >> 32, 64, 32, True, 2)
    assert got[0, :4].tolist() == [0, 1, 128 + 16, 129 + 16]  # K-row 1: 16-byte chunk 0 -> 1
    assert got[1, 2:4].tolist() == [130 + 16, 131 + 16]
    assert got[0, 2 * 9] == 9 * 128 + 16  # K-row 9: phase 1 of the repeat again
    assert got[63, 2 * 15 + 1] == (15 * 128 + 127) ^ (7 << 4)
