"""The TMA plan's and decider's refusals word for word, and a sub-tile at an offset (mutmut's
survivors in warpy/layout/desc.py's `_global_modes`, `_tma_plan` and `check_tma_box`; docs/testing.md
lists the run). Each refusal is a case the decider must tell apart: the message names what is wrong."""

from __future__ import annotations

import attrs
import pytest

from warpy.layout.core import Layout, LayoutError
from warpy.layout.desc import TmaSlice, check_tma_box, tma_box, tma_multicast_slices
from warpy.layout.smem import smem_tile

G = Layout((256, 64), (64, 1))  # bf16 rows of 128 bytes, K contiguous
T = smem_tile(128, 64, "bf16", "K", 128)


def _refused(call: object) -> str:
    with pytest.raises(LayoutError) as e:
        call()  # type: ignore[operator]
    return str(e.value)


def test_the_plan_needs_flat_modes_and_a_contiguous_major() -> None:
    assert _refused(lambda: tma_box(Layout(64, 1), T)) == "global layout 64:1 needs at least the modes (rows, cols)"
    assert _refused(lambda: tma_box(Layout(((16, 16), 64), ((64, 1024), 1)), T)) == (
        "global layout ((16,16),64):((64,1024),1): mode (16,16):(64,1024) is nested; give one extent per mode"
    )
    assert _refused(lambda: tma_box(Layout((256, 64), (1, 256)), T)) == (
        "a K-major tile needs the global K (mode 1) contiguous (stride 1); (256,64):(1,256) has stride 256"
    )
    mn = smem_tile(64, 128, "bf16", "MN", 128)
    assert _refused(lambda: tma_box(Layout((256, 128), (128, 1)), mn)) == (
        "a MN-major tile needs the global MN (mode 0) contiguous (stride 1); (256,128):(128,1) has stride 128"
    )


def test_a_sub_tile_at_an_offset_is_copied_where_its_layout_puts_it() -> None:
    # rows 64..127 of T: offset 64 rows of 128 bytes; the decider compares against the layout minus it
    sub = T.sub_tile(64, 64, 0, 64)
    assert sub.offset == 8192
    check_tma_box(tma_box(G, sub), G, sub)
    # a K sub-tile keeps the parent's 128-byte rows: a box of 64-byte rows packs row 1 at 0x40
    ks = T.sub_tile(0, 128, 32, 32)
    assert _refused(lambda: tma_box(G, ks)) == (
        "the TMA box writes tile element (row 1, k 0) to 0x40 but the tile's layout has it at 0x90"
    )


def test_the_decider_counts_each_element_once() -> None:
    box = tma_box(G, T)
    # half the rows: 64 x 64 of the 128 x 64 elements
    assert _refused(lambda: check_tma_box(attrs.evolve(box, box=(64, 64)), G, T)) == (
        "the boxes copy 4096 of the tile's 8192 elements"
    )
    # rows 64 bytes apart: the second box row starts at row 0's element 32 again
    assert _refused(lambda: check_tma_box(attrs.evolve(box, strides=(64,)), G, T)) == (
        "tile element (row 0, k 32) is copied twice"
    )


def test_the_plans_box_fields_and_limits() -> None:
    # five dimensions (rows, cols and three batch modes) is TMA's limit; every field as planned
    g5 = Layout((256, 64, 2, 3, 4), (64, 1, 16384, 32768, 98304))
    b2 = tma_box(G, T, oob_fill="nan", l2_promotion=128)
    assert (b2.elem_strides, b2.interleave, b2.oob_fill, b2.l2_promotion) == ((1, 1), 0, "nan", 128)
    b5 = tma_box(g5, T)
    assert b5.dims == (64, 256, 2, 3, 4) and b5.strides == (128, 32768, 65536, 196608)
    assert b5.box == (64, 128, 1, 1, 1) and b5.elem_strides == (1, 1, 1, 1, 1)
    g6 = Layout((256, 64, 2, 3, 4, 5), (64, 1, 16384, 32768, 98304, 393216))
    assert _refused(lambda: tma_box(g6, T)) == "the tensor map would have rank 6; TMA allows at most 5"
    assert _refused(lambda: tma_box(G, T, multicast=0)) == "multicast over 0 CTAs"


def test_a_split_box_and_its_refusal() -> None:
    # rows of 256 bytes, twice the 128-byte span: the box is split 3-D, (64 elements, rows, 2 spans)
    wide = smem_tile(64, 128, "bf16", "K", 128)
    box = tma_box(Layout((256, 128), (128, 1)), wide)
    assert box.dims == (64, 256, 2) and all(type(d) is int for d in box.dims)
    assert box.strides == (256, 128) and box.box == (64, 64, 2)
    assert _refused(lambda: tma_box(Layout((256, 160), (160, 1)), wide)) == (
        "the tile's rows are 256 bytes, wider than the 128-byte span, so the box is split 3-D; that needs the "
        "global contiguous extent (160) to be a multiple of 64"
    )


def test_multicast_slices() -> None:
    assert tma_multicast_slices(G, T, 2) == (TmaSlice(0, 0, (0, 0)), TmaSlice(1, 8192, (0, 64)))
    # 8 rows of 128 bytes are one 1024-byte swizzle repeat: two slices of 4 rows would break it
    eight = smem_tile(8, 64, "bf16", "K", 128)
    assert _refused(lambda: tma_box(G, eight, multicast=2)) == (
        "each CTA's slice is 512 bytes, not a multiple of the 1024-byte swizzle repeat"
    )


def test_tiles_larger_than_the_tensor() -> None:
    # planned on a padded tensor (rows padded to 16 bytes), then the real tensor's dims and strides
    fp8 = smem_tile(64, 64, "e4m3", "K", 64)
    box = tma_box(Layout((32, 20), (32, 1)), fp8)
    assert (box.dims, box.strides, box.box) == ((20, 32), (32,), (64, 64))
    # two batch modes: the padded batch strides are products of the padded extents
    box = tma_box(Layout((32, 40, 2, 3), (64, 1, 2048, 4096)), T)
    assert (box.dims, box.strides, box.box) == ((40, 32, 2, 3), (128, 4096, 8192), (64, 128, 1, 1))
