"""The sm_90a gemm's short A boxes for decode tiles (`warpy.mega.tiling.gemm_a_rows`): every stage
still holds the 64 rows wgmma reads from its last A box's start, pages are never overfilled, and the
encoded instructions carry what the body derives its addresses from."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.mega.tiling import (GEMM_K_STEP, GEMM_MAX_K_BOXES, GEMM_N_CHOICES, PAGE_BYTES, gemm_a_rows,
                               gemm_k_boxes)

ROW = GEMM_K_STEP * 2  # a swizzled row of bf16 K


@settings(max_examples=300)
@given(tm=st.sampled_from((64, 128)), tn=st.sampled_from(GEMM_N_CHOICES["wgmma"]), rows=st.integers(1, 4096))
def test_a_rows_keep_the_stage_invariants(tm: int, tn: int, rows: int) -> None:
    ar = gemm_a_rows(tm, tn, rows)
    kb = gemm_k_boxes(tm, tn, a_rows=ar)
    assert ar % 8 == 0 and 8 <= ar <= tm
    assert ar >= min(rows, tm)  # every real row of A is in the box
    assert ar == tm or tm == 64  # only 64-row tiles (both warpgroups read the same 64 rows) shrink
    assert 1 <= kb <= GEMM_MAX_K_BOXES
    assert kb * (ar + tn) * ROW <= PAGE_BYTES  # a stage is one page
    # wgmma reads 64 rows from the last A box's start: inside what the stage's copies wrote
    last = (kb - 1) * ar * ROW
    assert last + 64 * ROW <= kb * (ar + tn) * ROW
    if ar == tm:
        assert kb == gemm_k_boxes(tm, tn)


def test_golden_decode_boxes() -> None:
    # (tile_m, tile_n, rows of A) -> (A box rows, K boxes a stage)
    cases = {(64, 16, 1): (8, 10), (64, 16, 16): (16, 8), (64, 64, 1): (8, 3), (64, 64, 16): (16, 3),
             (64, 128, 1): (8, 1), (64, 32, 9): (16, 5), (64, 16, 64): (64, 3), (64, 16, 100): (64, 3),
             (128, 16, 1): (128, 1), (128, 128, 5000): (128, 1)}
    for (tm, tn, rows), want in cases.items():
        ar = gemm_a_rows(tm, tn, rows)
        assert (ar, gemm_k_boxes(tm, tn, a_rows=ar)) == want, (tm, tn, rows)


def test_encoded_decode_instructions_carry_the_short_box() -> None:
    from warpy.kernels import mega
    from warpy.mega.fields import unpack

    pl = mega.plan(mega.MegaProblem("mlp3", 1, units=0), mega.MegaConfig())
    assert pl.launch.gemm_tiles == ((64, 16, 8),)
    f = unpack([int(x) for x in pl.per_unit[0, 0]])
    # K = 1024 is whole K boxes: one copy moves the stage's 10 boxes of 8 rows (`_k_chunk`)
    assert f["op1.box_16"] * 16 == 10 * 8 * ROW and f["k_boxes"] == 10 and f["k_step"] == 10 * GEMM_K_STEP
    assert f["k_stages"] == -(-1024 // (GEMM_K_STEP * 10))
    # 1024 rows: the tile's own boxes
    pl = mega.plan(mega.MegaProblem("mlp3", 1024, units=0), mega.MegaConfig())
    assert all(t[2] == t[0] for t in pl.launch.gemm_tiles)


def test_a_stage_is_one_copy_an_operand_where_k_is_whole_boxes() -> None:
    """Chunked maps (`warpy.mega.encode._k_chunk`): (K within a box, rows, K boxes[, layer]), the box's
    third extent the stage's K boxes, and the instruction's k_step the K one copy moves."""
    from warpy.kernels import mega
    from warpy.mega.fields import unpack

    pl = mega.plan(mega.MegaProblem("llama-mlp", 1, units=0), mega.MegaConfig())
    gemm_maps = [m.tma for m in pl.encoded.maps if m.tma.swizzle]
    assert gemm_maps
    for t in gemm_maps:
        assert t.dims[0] == GEMM_K_STEP and t.box[0] == GEMM_K_STEP
        assert t.strides[1] == ROW  # the third dimension steps K by one box
        assert t.dims[2] * GEMM_K_STEP in (2048, 8192) and t.box[2] in (3, 10)
    for row in pl.per_unit[:4, 0]:
        f = unpack([int(x) for x in row])
        if f["opcode"] == 1 and f["tile_m"]:  # a gemm instruction
            assert f["k_step"] == GEMM_K_STEP * f["k_boxes"]
            assert f["op2.box_16"] * 16 == f["k_boxes"] * f["tile_n"] * ROW


def test_k_not_whole_boxes_keeps_a_copy_a_box() -> None:
    from warpy.kernels import mega

    pl = mega.plan(mega.MegaProblem("gemm-small"), mega.MegaConfig())  # K = 72
    assert all(m.tma.box[0] == GEMM_K_STEP and len(m.tma.box) <= 3 and m.tma.box[1] != 1
               for m in pl.encoded.maps if m.tma.swizzle)
    from warpy.mega.fields import unpack
    ks = {unpack([int(x) for x in r])["k_step"] for r in pl.per_unit.reshape(-1, pl.per_unit.shape[-1])}
    assert GEMM_K_STEP in ks and all(k in (0, GEMM_K_STEP) for k in ks)


def test_a_store_through_rows_off_16_bytes_is_refused() -> None:
    """A TMA store clips a row only at 16 bytes (`warpy.layout.tma.store_clips_exactly`): an output
    whose rows are 66 bytes is refused in one line rather than written past its end."""
    import pytest

    from warpy.errors import WarpyError
    from warpy.mega.encode import encode
    from warpy.mega.graph import Graph
    from warpy.mega.schedule import build

    g = Graph("ragged")
    x = g.input("x", (1, 40))
    g.output(g.relu(x[:, 0:33], name="y"))
    with pytest.raises(WarpyError, match="rows of 66 bytes, not a whole number of 16") as e:
        encode(build(g, "sm_90a", "static", units=2))
    assert "\n" not in str(e.value)


def test_show_prints_the_encoded_stage_of_every_gemm() -> None:
    """`warpy mega show`'s decode text for each gemm node is what the node's instructions carry: the
    fused gate/up gemm's stage holds a gate and an up box per K box, so 1 K box where the plain 64x64
    tile holds 3 (show once printed the plain tile's 3 for it)."""
    import re

    from warpy.kernels import mega
    from warpy.mega.cli import describe
    from warpy.mega.fields import unpack

    problem = mega.MegaProblem("llama-mlp", 1, units=0)
    pl = mega.plan(problem, mega.configure(problem, None))
    shown = {}
    for ln in describe(pl.schedule):
        m = re.match(r"\s*(\d+) gemm.*decode: A boxes of (\d+) rows, (\d+) K box(?:es)? a stage", ln)
        if m:
            shown[int(m.group(1))] = (int(m.group(2)), int(m.group(3)))
    encoded = {}
    for q in range(pl.per_unit.shape[1]):
        for row in pl.per_unit[:, q]:
            f = unpack([int(x) for x in row])
            if f["opcode"] == 1 and f["tile_m"]:
                encoded.setdefault(f["node"], set()).add((f["glu"], f["k_boxes"]))
    assert shown and set(shown) == set(encoded)
    for node, (_, kb) in shown.items():
        assert {k for _, k in encoded[node]} == {kb}, node
    assert {kb for _, kb in shown.values()} == {1, 10}  # glu 64x64: 1; down 64x16: 10


def test_narrow_decode_tiles_split_k_between_the_warpgroups() -> None:
    """`k_split`: a 64-row plain gemm tile whose stage holds an even number of K boxes has each
    warpgroup take half the K boxes at the tile's full N (half as many wgmmas, twice as wide), so the
    decode 64x16 tile's program issues wgmmas of N = 16 and none of N = 8; the fused gate/up tile and
    odd stages keep the column split."""
    from warpy.kernels import mega
    from warpy.kernels.mega_gemm import k_split

    assert [k_split(*c) for c in ((64, 16, 10, False), (64, 32, 6, False), (64, 16, 3, False), (128, 16, 2, False),
                                  (64, 64, 1, True), (64, 64, 2, True))] == ["boxes", "boxes", None, None, None, None]
    problem = mega.MegaProblem("mlp3", 1)
    text = str(mega.build(problem, mega.configure(problem, None)).kernel())
    assert "HGMMA.64x16x16" in text and "HGMMA.64x8x16" not in text
    problem = mega.MegaProblem("mlp-small", None)  # 64-row A boxes: 3 K boxes a stage, the columns split
    text = str(mega.build(problem, mega.configure(problem, None)).kernel())
    assert "HGMMA.64x8x16" in text and "HGMMA.64x16x16" not in text
