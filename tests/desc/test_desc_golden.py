"""Literal values: the issue's worked examples and values derived by hand from CUTLASS's canonical
layouts (cute/atom/mma_traits_sm90_gmma.hpp, cute/arch/mma_sm100_desc.hpp) and the PTX ISA."""

import pytest

from warpy.layout.core import Layout, LayoutError
from warpy.layout.desc import (
    decode_gmma_desc,
    decode_umma_desc,
    decode_umma_idesc,
    gmma_smem_desc,
    smem_descs,
    tma_box,
    tma_multicast_slices,
    umma_idesc,
    umma_smem_desc,
)
from warpy.layout.smem import smem_ring, smem_tile


def test_issue_worked_example_fp16_128x64_k_sw128():
    t = smem_tile(128, 64, "fp16", "K", 128)
    assert gmma_smem_desc(t) == 0x4000004000010000
    assert umma_smem_desc(t) == 0x4000404000010000
    # high word 0x40004040 = SBO 1024>>4, the fixed 0b001 at bit 46, layout mode 2 (128B) at bit 61
    assert umma_smem_desc(t) >> 32 == 0x40004040


def test_k_steps_advance_the_start_address_by_32_bytes():
    t = smem_tile(128, 64, "bf16", "K", 128)
    assert smem_descs(t, 0x400, "sm100") == [0x4000404000010040 + 2 * j for j in range(4)]
    assert t.k_step_offsets(16) == [0, 32, 64, 96]


def test_stage_is_a_coordinate_of_the_ring():
    ring = smem_ring(smem_tile(128, 64, "bf16", "K", 128), depth=4)
    assert ring.stage_bytes == 16384
    assert ring(0, 0, 3) == 3 * 16384
    assert umma_smem_desc(ring.stage(2)) == 0x4000404000010000 + (2 * 16384 >> 4)
    assert ring.layout.shape[-1] == 4 and ring.layout.stride[-1] == 16384


def test_k_major_interleave_lbo_is_the_k_chunk_stride():
    # ((8,m),(T,2)):((1T,SBO),(1,LBO)) tiled M-first: SBO = 128 B (next 8 rows), LBO = 64*16 B (next K chunk)
    t = smem_tile(64, 16, "fp16", "K", 0)
    assert gmma_smem_desc(t) == (128 >> 4) << 32 | (1024 >> 4) << 16
    f = decode_umma_desc(umma_smem_desc(t))
    assert (f.lbo, f.sbo, f.swizzle, f.version) == (1024, 128, 0, 1)


def test_mn_major_sw128_fields():
    # ((8,n),(8,k)):((1,LBO),(8,SBO)) in 16-byte units, K tiled first: SBO = 1024 B (next 8 K-rows),
    # LBO = 64 K-rows * 128 B = 8192 B (next 64-element MN column)
    t = smem_tile(128, 64, "bf16", "MN", 128)
    f = decode_gmma_desc(gmma_smem_desc(t))
    assert (f.lbo, f.sbo, f.swizzle) == (8192, 1024, 128)
    assert gmma_smem_desc(t) == 1 << 62 | (1024 >> 4) << 32 | (8192 >> 4) << 16


def test_swizzle_mode_codes():
    for span, g, u in ((128, 1, 2), (64, 2, 4), (32, 3, 6), (0, 0, 0)):
        t = smem_tile(64, 64, "bf16", "K", span)
        assert gmma_smem_desc(t) >> 62 == g
        assert umma_smem_desc(t) >> 61 == u


def test_umma_idesc_values():
    assert umma_idesc("f16", "f16", "f32", 128, 256) == 0x08400010
    assert umma_idesc("bf16", "bf16", "f32", 128, 128) == 0x08200490
    assert umma_idesc("bf16", "bf16", "f32", 256, 256, cta_group=2) == 0x10400490
    assert umma_idesc("f16", "f16", "f16", 64, 8) == 0x04020000
    assert umma_idesc("tf32", "tf32", "f32", 128, 64, "MN", "MN") == 0x08118910
    assert umma_idesc("e4m3", "e5m2", "f32", 128, 256) == 0x08400410
    f = decode_umma_idesc(0x08400010)
    assert (f.a, f.b, f.d, f.m, f.n, f.a_major) == ("fp16", "fp16", "fp32", 128, 256, "K")


@pytest.mark.parametrize(
    "args,kw,why",
    [
        (("bf16", "bf16", "f16", 128, 128), {}, "f32 only"),
        (("f16", "bf16", "f32", 128, 128), {}, "kind::f16"),
        (("tf32", "tf32", "f16", 128, 128), {}, "f32 only"),
        (("f16", "f16", "f32", 256, 128), {}, "M = 64 or 128"),
        (("f16", "f16", "f32", 128, 12), {}, "steps of 8"),
        (("f16", "f16", "f32", 128, 264), {}, "steps of 8"),
        (("f16", "f16", "f32", 64, 128), {"cta_group": 2}, "M = 128 or 256"),
        (("f16", "f16", "f32", 256, 24), {"cta_group": 2}, "steps of 16"),
        (("f16", "f16", "f32", 128, 128, "MN"), {"a_from_tmem": True}, "K-major"),
        (("f16", "e4m3", "f32", 128, 128), {}, "different kinds"),
        (("fp32", "fp32", "f32", 128, 128), {}, "no kind"),
    ],
)
def test_umma_idesc_refuses(args, kw, why):
    with pytest.raises(LayoutError, match=why):
        umma_idesc(*args, **kw)


def test_tma_box_bf16_k128_splits_3d():
    g = Layout((4096, 8192), (8192, 1))  # M x K, K contiguous
    t = smem_tile(128, 128, "bf16", "K", 128)  # rows of 256 bytes > the 128-byte span
    box = tma_box(g, t)
    assert box.dims == (64, 4096, 128)
    assert box.strides == (16384, 128)
    assert box.box == (64, 128, 2)
    assert box.swizzle == 128 and box.box_bytes == 128 * 128 * 2


def test_tma_box_plain_2d_and_batch():
    t = smem_tile(128, 64, "fp16", "K", 128)
    box = tma_box(Layout((512, 256, 3), (256, 1, 512 * 256)), t)
    assert (box.dims, box.strides, box.box) == ((256, 512, 3), (512, 262144), (64, 128, 1))


def test_tma_multicast_slices_the_outer_box_dim():
    g = Layout((4096, 4096), (4096, 1))
    t = smem_tile(128, 64, "bf16", "K", 128)
    assert tma_box(g, t, multicast=2).box == (64, 64)
    s = tma_multicast_slices(g, t, 4)
    assert [x.smem_offset for x in s] == [0, 4096, 8192, 12288]
    assert [x.coord_offset for x in s] == [(0, 0), (0, 32), (0, 64), (0, 96)]
    with pytest.raises(LayoutError, match="swizzle repeat"):
        tma_multicast_slices(g, smem_tile(16, 64, "bf16", "K", 128), 4)


def test_tma_box_mn_major_split():
    g = Layout((4096, 1024), (1, 4096))  # M x K, M contiguous
    t = smem_tile(128, 64, "bf16", "MN", 128)
    box = tma_box(g, t)
    assert (box.dims, box.strides, box.box) == ((64, 1024, 64), (8192, 128), (64, 64, 2))


def test_refusals_say_why():
    from warpy.layout.smem import SmemTile, swizzle_for_span
    from warpy.layout.swizzle import SwizzledLayout

    t64 = smem_tile(64, 64, "bf16", "K", 64)
    wrong_atom = SmemTile(64, 64, "bf16", "K", 128, SwizzledLayout(swizzle_for_span(128), t64.layout.layout, 0))
    with pytest.raises(LayoutError, match="wrong swizzle atom"):
        umma_smem_desc(wrong_atom)
    with pytest.raises(LayoutError, match="misaligned base"):
        gmma_smem_desc(smem_tile(64, 64, "bf16", "K", 128), addr=0x480)
    with pytest.raises(LayoutError, match="16-byte aligned"):
        umma_smem_desc(smem_tile(64, 64, "bf16", "K", 0), addr=0x408)
    padded = Layout(((8, 8), (8, 2)), ((16, 136), (2, 1088)))  # 8-row groups 136 bytes apart
    t = SmemTile(64, 16, "bf16", "K", 0, SwizzledLayout(swizzle_for_span(0), padded, 0))
    with pytest.raises(LayoutError, match="not a multiple of 16"):
        umma_smem_desc(t)
    with pytest.raises(LayoutError, match="only K-major"):
        gmma_smem_desc(smem_tile(64, 64, "tf32", "MN", 128))
    with pytest.raises(LayoutError, match="not a multiple of 64"):
        smem_tile(128, 32, "bf16", "K", 128)


def test_tma_box_of_a_tile_larger_than_the_tensor_reads_past_its_edge() -> None:
    """A ragged GEMM's A of 1 x 4096 (or K = 72) still gets the 128 x 64 box: TMA fills what lies
    outside the tensor; the dims and strides are the real tensor's."""
    from warpy.layout import Layout
    from warpy.layout.desc import tma_box
    from warpy.layout.smem import smem_tile

    t = smem_tile(128, 64, "bf16", "K", 128)
    one_row = tma_box(Layout((1, 4096), (4096, 1)), t)
    assert (one_row.dims, one_row.strides, one_row.box) == ((4096, 1), (8192,), (64, 128))
    short_k = tma_box(Layout((4097, 72), (72, 1)), t)
    assert (short_k.dims, short_k.strides, short_k.box) == ((72, 4097), (144,), (64, 128))
    assert tma_box(Layout((4096, 4096), (4096, 1)), t).box == one_row.box
