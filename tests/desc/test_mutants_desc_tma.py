"""The TMA plan's and decider's refusals word for word, and a sub-tile at an offset (mutmut's
survivors in warpy/layout/desc.py's `_global_modes`, `_tma_plan` and `check_tma_box`; docs/testing.md
lists the run). Each refusal is a case the decider must tell apart: the message names what is wrong."""

from __future__ import annotations

import attrs
import pytest

from warpy.layout.core import Layout, LayoutError
from warpy.layout.desc import check_tma_box, tma_box
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
