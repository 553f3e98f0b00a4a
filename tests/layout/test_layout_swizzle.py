"""Swizzles as functions on offsets, swizzled physical layouts, the shared-memory atoms."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.layout import (
    SW32,
    SW32_ATOM,
    SW64,
    SW64_ATOM,
    SW128,
    SW128_ATOM,
    SWIZZLE_ATOMS,
    Layout,
    LayoutError,
    Swizzle,
    SwizzledLayout,
    composition,
    physical,
    swizzle_atom,
    swizzle_bytes,
    swizzle_elements,
)


@st.composite
def swizzles(draw: st.DrawFn) -> Swizzle:
    b = draw(st.integers(0, 4))
    m = draw(st.integers(0, 4))
    s = draw(st.integers(b, 6)) * draw(st.sampled_from([1, -1]))
    if s < 0 and m + s < 0:
        s = -s
    return Swizzle(b, m, s)


@settings(max_examples=200, deadline=None)
@given(swizzles(), st.integers(0, 1 << 16))
def test_swizzle_is_an_involution(sw: Swizzle, x: int) -> None:
    assert sw(sw(x)) == x


@settings(max_examples=50, deadline=None)
@given(swizzles())
def test_swizzle_permutes_each_aligned_block(sw: Swizzle) -> None:
    span = 1 << (sw.base + sw.bits + abs(sw.shift))
    assert sorted(sw(x) for x in range(span)) == list(range(span))


def test_swizzle_golden() -> None:
    assert (SW32, SW64, SW128) == (Swizzle(1, 4, 3), Swizzle(2, 4, 3), Swizzle(3, 4, 3))
    assert str(SW128) == "Sw<3,4,3>"
    # row 1 of the 128-byte atom: its 16-byte chunks swap pairwise (chunk ^ 1)
    assert [SW128_ATOM(1, 16 * c) for c in range(8)] == [128 + 16 * (c ^ 1) for c in range(8)]
    assert [SW128_ATOM(5, 16 * c) for c in range(8)] == [640 + 16 * (c ^ 5) for c in range(8)]
    assert [SW64_ATOM(3, 16 * c) for c in range(4)] == [192 + 16 * (c ^ 1) for c in range(4)]
    assert [SW32_ATOM(2, 16 * c) for c in range(2)] == [64, 80]  # rows 0-3 unswizzled
    assert [SW32_ATOM(4, 16 * c) for c in range(2)] == [128 + 16 * (c ^ 1) for c in range(2)]
    assert SWIZZLE_ATOMS == {32: SW32_ATOM, 64: SW64_ATOM, 128: SW128_ATOM}
    with pytest.raises(LayoutError, match="masks do not overlap"):
        Swizzle(3, 4, 2)


@pytest.mark.parametrize("span", [32, 64, 128])
@pytest.mark.parametrize("elem", [1, 2, 4, 8])
def test_atoms_per_element_type(span: int, elem: int) -> None:
    sw_b, sw_e = swizzle_bytes(span), swizzle_elements(span, elem)
    assert all(elem * sw_e(e) == sw_b(elem * e) for e in range(4096 // elem))
    k_atom, mn_atom = swizzle_atom(span, elem, "K"), swizzle_atom(span, elem, "MN")
    width = span // elem
    assert k_atom.shape == (8, width) and mn_atom.shape == (width, 8)
    byte_atom = SWIZZLE_ATOMS[span]
    for r in range(8):
        for k in range(width):
            assert elem * k_atom(r, k) == byte_atom(r, elem * k)
            assert mn_atom(k, r) == k_atom(r, k)
    # a swizzle atom is a physical layout: a permutation of its span
    assert sorted(physical(k_atom).values()) == list(range(8 * width))


def test_swizzled_layout_keeps_working() -> None:
    sub = SwizzledLayout(SW128, composition(Layout((8, 128), (128, 1)), (8, 64)), 64)
    assert [sub(r, k) for r in range(8) for k in range(64)] == [SW128_ATOM(r, k + 64) for r in range(8) for k in range(64)]
    assert sub.size() == 512 and sub.shape == (8, 64)
    assert str(SW32_ATOM) == "Sw<1,4,3> o (8,32):(32,1)"
    with pytest.raises(LayoutError, match="not one of 32, 64, 128"):
        swizzle_atom(16)
    with pytest.raises(LayoutError, match="major must be"):
        swizzle_atom(128, 2, "M")


def test_composition_keeps_the_swizzle() -> None:
    half = composition(SW128_ATOM, (8, 64))
    assert isinstance(half, SwizzledLayout) and str(half) == "Sw<3,4,3> o (8,64):(128,1)"
    assert all(half(r, k) == SW128_ATOM(r, k) for r in range(8) for k in range(64))
