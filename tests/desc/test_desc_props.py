"""Properties over every legal (dtype, major, swizzle, tile size, address): encode -> decode round
trips and K-steps move the start only; every illegal
variant of a tile, address or descriptor is refused by the decider."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from warpy.layout.core import Layout, LayoutError
from warpy.layout.desc import (
    check_smem_desc,
    decode_gmma_desc,
    decode_umma_desc,
    encode_smem_desc,
    gmma_smem_desc,
    mma_k_elems,
    smem_descs,
    tma_box,
    tma_multicast_slices,
    umma_smem_desc,
)
from warpy.layout.smem import SmemTile, repeat_bytes, smem_tile
from warpy.layout.swizzle import Swizzle, SwizzledLayout

DTYPES = ["fp16", "bf16", "fp32", "tf32", "e4m3", "e5m2"]
EB = {"fp16": 2, "bf16": 2, "fp32": 4, "tf32": 4, "e4m3": 1, "e5m2": 1}
PROFILE = settings(deadline=None, max_examples=60)


@st.composite
def legal_tiles(draw, arch=None):
    dtype = draw(st.sampled_from(DTYPES))
    major = draw(st.sampled_from(["K", "MN"]))
    if arch == "sm90" and EB[dtype] != 2:
        major = "K"
    swizzle = draw(st.sampled_from([0, 32, 64, 128]))
    e = EB[dtype]
    se = (swizzle or 16) // e
    kk = 32 // e
    if major == "K":
        rows = 8 * draw(st.integers(1, 32))
        cols = max(se, kk) * draw(st.integers(1, 3))
    else:
        rows = se * draw(st.integers(1, 4))
        cols = max(8, kk) * draw(st.integers(1, 4))
    addr = repeat_bytes(swizzle) * draw(st.integers(0, 64))
    return smem_tile(rows, cols, dtype, major, swizzle), addr


@PROFILE
@given(legal_tiles(), st.sampled_from(["sm90", "sm100"]))
def test_encode_decode_round_trip_and_k_steps(case, arch):
    """decode(encode) is the identity on the word, and every K-step's word differs from the first
    only by the layout's K-step offset in the start field. (The image against the layout at every
    coordinate is the encoder's own decider: repeating it here would prove nothing; the literal
    words are in test_goldens_ptx.py.)"""
    tile, addr = case
    if arch == "sm90" and tile.major == "MN" and tile.elem_bytes != 2:
        with pytest.raises(LayoutError, match="K-major"):
            gmma_smem_desc(tile, addr)
        return
    desc = (gmma_smem_desc if arch == "sm90" else umma_smem_desc)(tile, addr)
    fields = (decode_gmma_desc if arch == "sm90" else decode_umma_desc)(desc)
    assert encode_smem_desc(fields) == desc
    assert fields.start == addr + tile.linear(0, 0) and fields.swizzle == tile.swizzle
    steps = smem_descs(tile, addr, arch)
    offsets = tile.k_step_offsets(mma_k_elems(tile.dtype))
    assert [d - desc for d in steps] == [off >> 4 for off in offsets]


def _restride(tile: SmemTile, which: tuple[int, int], delta: int = 0, factor: int = 1) -> SmemTile:
    lin = tile.layout.layout
    strides = [list(m) for m in lin.stride]
    strides[which[0]][which[1]] = strides[which[0]][which[1]] * factor + delta
    new = Layout(lin.shape, tuple(tuple(m) for m in strides))
    return SmemTile(tile.rows, tile.cols, tile.dtype, tile.major, tile.swizzle, SwizzledLayout(tile.layout.swizzle, new, 0))


def _illegal_variants(tile: SmemTile):
    """(description, tile) pairs, each a layout no descriptor can express (within the MMA's footprint)."""
    kk = mma_k_elems(tile.dtype)
    e = tile.elem_bytes
    if tile.major == "K":
        yield "row stride padded", _restride(tile, (0, 0), delta=16)
        yield "element stride doubled", _restride(tile, (1, 0), factor=2)
        if tile.rows > 8:
            yield "8-row group stride not a multiple of 16", _restride(tile, (0, 1), delta=8)
            yield "8-row groups overlap", _restride(tile, (0, 1), factor=0)
    else:
        yield "K-row stride padded", _restride(tile, (1, 0), delta=16)
        yield "element stride doubled", _restride(tile, (0, 0), factor=2)
        if kk > 8:
            yield "K-group stride not a multiple of 16", _restride(tile, (1, 1), delta=8)
        if tile.rows > tile.span_elems:
            yield "MN columns overlap", _restride(tile, (0, 1), factor=0)
    for other in (0, 32, 64, 128):
        if other != tile.swizzle:
            from warpy.layout.smem import swizzle_for_span

            wrong = SwizzledLayout(swizzle_for_span(other), tile.layout.layout, 0)
            yield f"swizzle atom {other} on a {tile.swizzle}-byte layout", SmemTile(
                tile.rows, tile.cols, tile.dtype, tile.major, other, wrong
            )
    yield "not a tensor-core swizzle", SmemTile(
        tile.rows, tile.cols, tile.dtype, tile.major, tile.swizzle,
        SwizzledLayout(Swizzle(3, 3, 3), tile.layout.layout, 0),
    )
    del e


@PROFILE
@given(legal_tiles(), st.sampled_from(["sm90", "sm100"]))
def test_illegal_tiles_are_refused(case, arch):
    tile, addr = case
    if arch == "sm90" and tile.major == "MN" and tile.elem_bytes != 2:
        return
    enc = gmma_smem_desc if arch == "sm90" else umma_smem_desc
    for why, bad in _illegal_variants(tile):
        with pytest.raises(LayoutError):
            enc(bad, addr)
            pytest.fail(f"accepted: {why}")


@PROFILE
@given(legal_tiles(), st.sampled_from(["sm90", "sm100"]), st.data())
def test_misaligned_addresses_are_refused(case, arch, data):
    tile, addr = case
    if arch == "sm90" and tile.major == "MN" and tile.elem_bytes != 2:
        return
    enc = gmma_smem_desc if arch == "sm90" else umma_smem_desc
    with pytest.raises(LayoutError, match="16-byte aligned"):
        enc(tile, addr + data.draw(st.integers(1, 15)))
    if tile.swizzle:
        rows_in = data.draw(st.integers(1, (1 << tile.layout.swizzle.bits) - 1))
        with pytest.raises(LayoutError, match="misaligned base"):
            enc(tile, addr + 128 * rows_in)


def _used_field_mutations(tile: SmemTile):
    """Descriptor bit changes in fields the tile's footprint depends on."""
    kk = mma_k_elems(tile.dtype)
    t = 16 // tile.elem_bytes
    yield "start", 1
    if tile.major == "K":
        if tile.rows > 8:
            yield "sbo", 1 << 32
        if not tile.swizzle:
            yield "lbo", 1 << 16
    elif tile.swizzle:
        if kk > 8:
            yield "sbo", 1 << 32
        if tile.rows > tile.span_elems:
            yield "lbo", 1 << 16
    else:
        if kk > 8:
            yield "lbo", 1 << 16
        if tile.rows > t:
            yield "sbo", 1 << 32


@PROFILE
@given(legal_tiles(), st.sampled_from(["sm90", "sm100"]))
def test_decider_refuses_mutated_descriptors(case, arch):
    tile, addr = case
    if arch == "sm90" and tile.major == "MN" and tile.elem_bytes != 2:
        return
    desc = (gmma_smem_desc if arch == "sm90" else umma_smem_desc)(tile, addr)
    check_smem_desc(desc, tile, addr, arch)
    for field, unit in _used_field_mutations(tile):
        with pytest.raises(LayoutError):
            check_smem_desc(desc + unit, tile, addr, arch)
            pytest.fail(f"accepted a descriptor with {field} + 16 bytes")
    mode_bit = 62 if arch == "sm90" else 61
    for code in range(4 if arch == "sm90" else 8):
        other = desc & ~(0b111 << mode_bit) & (1 << 64) - 1 | code << mode_bit
        if other != desc:
            with pytest.raises(LayoutError):
                check_smem_desc(other, tile, addr, arch)


@PROFILE
@given(legal_tiles(), st.integers(0, 2), st.sampled_from([1, 2, 4]), st.integers(1, 3), st.integers(0, 5),
       st.integers(0, 3))
def test_tma_box_writes_the_tile(case, batch, multicast, grow, pad, batch_pad):
    """Tensors with padded (non-compact) row and batch strides: a pitch of `pad` extra 16-byte units."""
    tile, _ = case
    e = tile.elem_bytes
    rows, cols = tile.rows * grow, tile.cols * grow
    extra = pad * 16 // e
    if tile.major == "K":
        while cols * e % 16:
            cols *= 2
        shape, stride = [rows, cols], [cols + extra, 1]
        plane = rows * (cols + extra)
    else:
        while rows * e % 16:
            rows *= 2
        shape, stride = [rows, cols], [1, rows + extra]
        plane = cols * (rows + extra)
    if batch:
        shape.append(batch + 1)
        stride.append(plane + batch_pad * 16 // e)
    g = Layout(tuple(shape), tuple(stride))
    try:
        box = tma_box(g, tile, multicast=multicast)
    except LayoutError as err:
        # the only refusals allowed for a legal tile: multicast that cannot slice whole swizzle repeats
        assert multicast > 1 and ("divide" in str(err) or "swizzle repeat" in str(err)), err
        return
    assert box.box_bytes * multicast == tile.size_bytes
    # the global strides are the tensor's own (in bytes), padding included: the pitch of the
    # non-contiguous mode first, the batch's last
    pitch = stride[0] if tile.major == "K" else stride[1]
    assert box.strides[0] == pitch * e, (box, stride)
    if batch:
        assert box.strides[-1] == stride[2] * e and box.dims[-1] == batch + 1, (box, stride)
    row_bytes = (tile.cols if tile.major == "K" else tile.rows) * e
    assert box.rank == (3 if row_bytes > tile.span_bytes else 2) + (1 if batch else 0)
    slices = tma_multicast_slices(g, tile, multicast)
    assert sorted(s.smem_offset for s in slices) == [i * box.box_bytes for i in range(multicast)]


@PROFILE
@given(legal_tiles())
def test_tma_refuses_the_wrong_contiguous_mode(case):
    tile, _ = case
    rows, cols = tile.rows * 2, tile.cols * 2
    g = Layout((rows, cols), (1, rows)) if tile.major == "K" else Layout((rows, cols), (cols, 1))
    with pytest.raises(LayoutError, match="contiguous"):
        tma_box(g, tile)


def test_tma_refuses_a_split_of_a_ragged_row():
    tile = smem_tile(128, 128, "bf16", "K", 128)
    with pytest.raises(LayoutError, match="multiple of 64"):
        tma_box(Layout((256, 200), (208, 1)), tile)


@PROFILE
@given(legal_tiles())
def test_tma_decider_refuses_mutated_boxes(case):
    import attrs

    from warpy.layout.desc import check_tma_box

    tile, _ = case
    rows, cols = tile.rows * 2, tile.cols * 2
    g = Layout((rows, cols), (cols, 1)) if tile.major == "K" else Layout((rows, cols), (1, rows))
    box = tma_box(g, tile)
    check_tma_box(box, g, tile)
    mutants = []
    for other in (0, 32, 64, 128):
        if other != box.swizzle and box.box[0] * tile.elem_bytes <= (other or 1 << 30):
            mutants.append(("swizzle", attrs.evolve(box, swizzle=other)))
    mutants.append(("outer stride", attrs.evolve(box, strides=(box.strides[0] + 16,) + box.strides[1:])))
    outer = 1 if box.rank == 2 else 2
    bigger = list(box.box)
    bigger[outer] += 1
    if bigger[outer] <= 256:
        mutants.append(("box grown", attrs.evolve(box, box=tuple(bigger))))
    if box.box[outer] > 1:
        smaller = list(box.box)
        smaller[outer] -= 1
        mutants.append(("box shrunk", attrs.evolve(box, box=tuple(smaller))))
    for why, bad in mutants:
        with pytest.raises(LayoutError):
            check_tma_box(bad, g, tile)
            pytest.fail(f"accepted: {why}")
    with pytest.raises(LayoutError, match="aligned"):
        check_tma_box(box, g, tile, addr=64)
