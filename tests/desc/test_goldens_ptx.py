"""Descriptor goldens read off the PTX ISA's bit tables, each word derived by hand in its comment.

Shared-memory matrix descriptor (PTX ISA: wgmma "Matrix Descriptor Format"; tcgen05 "Shared Memory
Descriptor"): bits 0-13 start address >> 4, 16-29 leading-dimension byte offset (LBO) >> 4, 32-45
stride-dimension byte offset (SBO) >> 4, 49-51 base offset; sm_90 wgmma: swizzle in bits 62-63
(0 none, 1 128B, 2 64B, 3 32B); sm_100 tcgen05: bits 46-48 the fixed 0b001, swizzle in bits 61-63
(0 none, 2 128B, 4 64B, 6 32B).

Canonical layouts (PTX ISA, in 16-byte units with T = 16 / element bytes, W = swizzle bytes / 16):
  K-major,  no swizzle : ((8,m),(T,2k)) : ((1T,SBO),(1,LBO))      LBO: next 16-byte K chunk
  K-major,  swizzled   : ((8,m),(T,2k)) : ((WT,SBO),(1,T))        LBO unused (CUTLASS writes 1)
  MN-major, no swizzle : ((T,1,m),(8,k)) : ((1,T,SBO),(1T,LBO))   SBO: next T-element MN chunk,
                                                                  LBO: next 8 K-rows
  MN-major, swizzled   : ((T,W,m),(8,k)) : ((1,T,LBO),(WT,SBO))   LBO: next swizzle-wide MN column,
                                                                  SBO: next 8 K-rows

tcgen05 instruction descriptor (kind::f16 / tf32 / f8f6f4): 0-1 sparsity selector, 2 sparsity,
3 saturate, 4-5 D format (0 f16, 1 f32), 7-9 A format, 10-12 B format (f16 0 / bf16 1, tf32 2,
e4m3 0 / e5m2 1), 13 negate A, 14 negate B, 15 transpose A (1 = MN-major), 16 transpose B,
17-22 N >> 3, 24-28 M >> 4.
"""

from __future__ import annotations

import pytest

from warpy.layout.core import Layout
from warpy.layout.desc import (
    decode_gmma_desc,
    decode_umma_desc,
    decode_umma_idesc,
    gmma_smem_desc,
    umma_idesc,
    umma_smem_desc,
)
from warpy.layout.smem import SmemTile, smem_tile, swizzle_for_span
from warpy.layout.swizzle import SwizzledLayout

V1 = 1 << 46  # tcgen05's fixed 0b001 at bits 46-48


# --- shared-memory descriptors, K-major, every swizzle ----------------------------------------------
# bf16 128 x 64 K-major. Swizzled: a row is one swizzle span (W*16 bytes), 8 rows a group, so
# SBO = 8 * span; LBO is unused and holds 1 (16 bytes). Placed at 0x2400 (a multiple of every
# repeat: 1024, 512, 256), start field 0x240.
K_MAJOR = [
    # swizzle, sm90 word, sm100 word
    (128, 1 << 62 | 64 << 32 | 1 << 16 | 0x240, 2 << 61 | V1 | 64 << 32 | 1 << 16 | 0x240),
    (64, 2 << 62 | 32 << 32 | 1 << 16 | 0x240, 4 << 61 | V1 | 32 << 32 | 1 << 16 | 0x240),
    (32, 3 << 62 | 16 << 32 | 1 << 16 | 0x240, 6 << 61 | V1 | 16 << 32 | 1 << 16 | 0x240),
]


@pytest.mark.parametrize("swizzle,sm90,sm100", K_MAJOR)
def test_k_major_swizzled(swizzle: int, sm90: int, sm100: int) -> None:
    t = smem_tile(128, 64 if swizzle != 32 else 32, "bf16", "K", swizzle)
    assert gmma_smem_desc(t, 0x2400) == sm90
    assert umma_smem_desc(t, 0x2400) == sm100


def test_literal_words_of_the_k_major_table() -> None:
    assert [hex(w) for _, w, _ in K_MAJOR] == ["0x4000004000010240", "0x8000002000010240", "0xc000001000010240"]
    assert [hex(w) for _, _, w in K_MAJOR] == ["0x4000404000010240", "0x8000402000010240", "0xc000401000010240"]


def test_k_major_no_swizzle_lbo_is_the_k_chunk_stride() -> None:
    # bf16 128 x 64, core matrices (8 rows x 16 bytes = 128 B) tiled M first: the next 8 rows are
    # 128 B on (SBO = 128 -> 8), the next 16-byte K chunk 16 groups * 128 B = 2048 B on (LBO -> 0x80)
    t = smem_tile(128, 64, "bf16", "K", 0)
    assert gmma_smem_desc(t) == 0x0000000800800000
    assert umma_smem_desc(t) == 0x0000400800800000


def test_k_major_no_swizzle_hand_made_layout_with_k_chunks_first() -> None:
    # the other tiling of the same core matrices: K chunks adjacent (LBO = 128 B -> 8), 8-row
    # groups after all 8 chunks of a row group (SBO = 8 * 128 = 1024 B -> 64). bf16 64 rows x 64 K.
    lay = Layout(((8, 8), (8, 8)), ((16, 1024), (2, 128)))
    t = SmemTile(64, 64, "bf16", "K", 0, SwizzledLayout(swizzle_for_span(0), lay, 0))
    assert gmma_smem_desc(t) == 64 << 32 | 8 << 16 == 0x0000004000080000
    assert umma_smem_desc(t) == 0x0000404000080000


# --- shared-memory descriptors, MN-major, every swizzle ---------------------------------------------
# bf16, MN x K = 128 x 64 (128B) or 64 x 64 (64B, 32B): a K-row holds one swizzle span of MN
# (64, 32 or 16 elements); 8 K-rows a group, so SBO = 8 * span; the next span-wide MN column lies
# after all 64 K-rows: LBO = 64 * span.
MN_MAJOR = [
    (128, 128, 1 << 62 | 64 << 32 | 512 << 16, 2 << 61 | V1 | 64 << 32 | 512 << 16),  # SBO 1024, LBO 8192
    (64, 64, 2 << 62 | 32 << 32 | 256 << 16, 4 << 61 | V1 | 32 << 32 | 256 << 16),  # SBO 512, LBO 4096
    (32, 64, 3 << 62 | 16 << 32 | 128 << 16, 6 << 61 | V1 | 16 << 32 | 128 << 16),  # SBO 256, LBO 2048
]


@pytest.mark.parametrize("swizzle,rows,sm90,sm100", MN_MAJOR)
def test_mn_major_swizzled(swizzle: int, rows: int, sm90: int, sm100: int) -> None:
    t = smem_tile(rows, 64, "bf16", "MN", swizzle)
    assert gmma_smem_desc(t) == sm90
    assert umma_smem_desc(t) == sm100
    f = decode_gmma_desc(sm90)
    assert (f.lbo, f.sbo) == (64 * swizzle, 8 * swizzle)  # LBO along MN, SBO along K


def test_literal_words_of_the_mn_major_table() -> None:
    assert [hex(w) for *_, w, _ in MN_MAJOR] == ["0x4000004002000000", "0x8000002001000000", "0xc000001000800000"]


def test_mn_major_no_swizzle_lbo_is_the_k_stride_and_sbo_the_mn_stride() -> None:
    # bf16 MN 64 x K 32: T = 8 elements a 16-byte chunk along MN; core matrices of 8 K-rows x 16 B.
    # smem_tile puts the 4 K-groups 128 B apart (LBO = 128 -> 8) and the 8 MN chunks 512 B apart
    # (SBO = 512 -> 32): PTX's ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO)).
    t = smem_tile(64, 32, "bf16", "MN", 0)
    assert gmma_smem_desc(t) == 32 << 32 | 8 << 16 == 0x0000002000080000
    assert umma_smem_desc(t) == 0x0000402000080000
    # the transposed placement (MN chunks adjacent, 128 B apart; K-groups 1024 B apart) swaps the
    # two fields: LBO = 1024 -> 64, SBO = 128 -> 8
    lay = Layout(((8, 8), (8, 4)), ((2, 128), (16, 1024)))
    t2 = SmemTile(64, 32, "bf16", "MN", 0, SwizzledLayout(swizzle_for_span(0), lay, 0))
    assert gmma_smem_desc(t2) == 8 << 32 | 64 << 16 == 0x0000000800400000
    f = decode_umma_desc(umma_smem_desc(t2, 0x1000))
    assert (f.start, f.lbo, f.sbo, f.swizzle, f.version) == (0x1000, 1024, 128, 0, 1)


def test_mn_major_fp8_on_sm100_only() -> None:
    # e4m3 MN 128 x K 32 no swizzle: T = 16 elements a chunk; 8 MN chunks 512 B apart (SBO -> 32),
    # 4 K-groups 128 B apart (LBO -> 8). wgmma transposes 16-bit types only.
    t = smem_tile(128, 32, "e4m3", "MN", 0)
    assert umma_smem_desc(t) == V1 | 32 << 32 | 8 << 16 == 0x0000402000080000


def test_tf32_k_major_sw128_same_geometry_as_bf16() -> None:
    # 128 rows x 32 tf32 = 128 B a row: identical bytes, identical word
    assert gmma_smem_desc(smem_tile(128, 32, "tf32", "K", 128)) == 0x4000004000010000


# --- instruction descriptors: mixed majors -------------------------------------------------------------
IDESC = [
    # bf16 x bf16 -> f32, M 128, N 256: D 1<<4, A 1<<7, B 1<<10, N 32<<17, M 8<<24
    (("bf16", "bf16", "f32", 128, 256, "K", "MN"), 0x08000000 | 0x400000 | 1 << 16 | 0x490, 0x08410490),
    (("bf16", "bf16", "f32", 128, 256, "MN", "K"), 0x08000000 | 0x400000 | 1 << 15 | 0x490, 0x08408490),
    # f16 x f16 -> f32, M 64, N 128: M 4<<24, N 16<<17
    (("f16", "f16", "f32", 64, 128, "MN", "K"), 0x04000000 | 0x200000 | 1 << 15 | 0x10, 0x04208010),
    (("f16", "f16", "f32", 64, 128, "K", "MN"), 0x04000000 | 0x200000 | 1 << 16 | 0x10, 0x04210010),
    # tf32: A 2<<7, B 2<<10, M 128 N 64 (8<<17)
    (("tf32", "tf32", "f32", 128, 64, "MN", "K"), 0x08000000 | 0x100000 | 1 << 15 | 0x910, 0x08108910),
    (("tf32", "tf32", "f32", 128, 64, "K", "MN"), 0x08000000 | 0x100000 | 1 << 16 | 0x910, 0x08110910),
    # e4m3 x e5m2 (kind::f8f6f4): A 0, B 1<<10
    (("e4m3", "e5m2", "f32", 128, 256, "K", "MN"), 0x08000000 | 0x400000 | 1 << 16 | 0x410, 0x08410410),
    (("e5m2", "e4m3", "f32", 128, 256, "MN", "K"), 0x08000000 | 0x400000 | 1 << 15 | 0x090, 0x08408090),
]


@pytest.mark.parametrize("args,derived,word", IDESC)
def test_idesc_mixed_majors(args: tuple, derived: int, word: int) -> None:  # type: ignore[type-arg]
    assert derived == word
    assert umma_idesc(*args) == word
    f = decode_umma_idesc(word, {"tf32": "tf32", "e4m3": "f8f6f4", "e5m2": "f8f6f4"}.get(args[0], "f16"))
    assert (f.a_major, f.b_major) == args[5:7]


def test_idesc_negate_bits_and_cta_pair() -> None:
    base = umma_idesc("f16", "f16", "f32", 128, 128)
    assert base == 0x08200010
    assert umma_idesc("f16", "f16", "f32", 128, 128, negate_a=True) == base | 1 << 13
    assert umma_idesc("f16", "f16", "f32", 128, 128, negate_b=True) == base | 1 << 14
    # cta_group::2 M 256: M >> 4 = 16 at bit 24; the pair is not in the descriptor
    assert umma_idesc("f16", "f16", "f32", 256, 128, cta_group=2) == 0x10200010
    f = decode_umma_idesc(base | 1 << 13 | 1 << 14)
    assert (f.negate_a, f.negate_b) == (True, True)
