"""Tests written to kill the layout algebra's surviving mutants (.ci/mutation.py algebra; see
docs/testing.md): the flat fast path of crd2idx against the general one, idx2crd's ranges and
stride-0 leaves, the argmax that decides carries in composition, coalesce and logical_product by
mode, the inverses' edge cases, rank-1 blocked and raked products, and the refusals word for word.
Literal values are CuTe's (worked by hand from its definitions)."""

from __future__ import annotations

import random
import re
from collections import Counter
from typing import Any, Callable

import layout_reference as ref
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.layout import Layout, LayoutError, Swizzle, SwizzledLayout
from warpy.layout.algebra import (
    _argmax_mod,
    _modes_disjoint,
    _pairs,
    blocked_product,
    coalesce,
    complement,
    composition,
    cosize,
    crd2crd,
    crd2idx,
    filter,
    idx2crd,
    left_inverse,
    logical_divide,
    logical_product,
    make_layout,
    raked_product,
    right_inverse,
)


@st.composite
def flat_layouts(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    n = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=n, max_size=n)))
    stride = tuple(draw(st.lists(st.integers(-9, 30), min_size=n, max_size=n)))
    return shape, stride


@settings(max_examples=100, deadline=None)
@given(flat_layouts(), st.data())
def test_crd2idx_of_a_flat_index_is_the_layouts_value(fl: tuple[tuple[int, ...], tuple[int, ...]], data: st.DataObject) -> None:
    """crd2idx(i, shape, stride) takes a path of its own for a flat int index into a flat layout:
    it gives what the layout gives, index by index, and refuses what the layout refuses."""
    shape, stride = fl
    lay = Layout(shape, stride)
    size = lay.size()
    for i in range(size):
        assert crd2idx(i, shape, stride) == lay(i) == sum((i // m) % s * d for s, d, m in zip(shape, stride, _lows(shape)))
    bad = data.draw(st.sampled_from([-1, size, size + 3]))
    with pytest.raises(LayoutError, match=f"index {bad} is out of range"):
        crd2idx(bad, shape, stride)


def _lows(shape: tuple[int, ...]) -> list[int]:
    out, m = [], 1
    for s in shape:
        out.append(m)
        m *= s
    return out


def test_crd2idx_goldens() -> None:
    assert crd2idx(5, (4, 3), (3, 1)) == 4  # (1, 1) -> 3 + 1
    assert crd2idx(11, (4, 3), (3, 1)) == 11
    assert crd2idx(7, (2, 2, 2), (4, -2, 1)) == 3  # (1,1,1) -> 4 - 2 + 1
    assert crd2idx(5, (4, (3, 1)), (3, (1, 7))) == 4  # nested: the general path
    assert crd2idx(3, (1, 4), (5, 2)) == 6  # an extent-1 mode first
    with pytest.raises(LayoutError, match=r"^crd2idx\(crd, layout\) takes no stride$"):
        crd2idx(1, Layout(4), (1,))
    # what the flat path must leave to the layout: a stride shorter than the shape, an extent 0
    with pytest.raises(LayoutError, match=r"^shape \(4,3\) and stride \(1\) are not congruent$"):
        crd2idx(2, (4, 3), (1,))
    with pytest.raises(LayoutError, match=r"^shape \(4,0\) has an extent 0 < 1$"):
        crd2idx(1, (4, 0), (1, 4))


def test_idx2crd_goldens_and_ranges() -> None:
    assert idx2crd(0, (4, 3)) == (0, 0)
    assert idx2crd(11, (4, 3)) == (3, 2)
    assert idx2crd(5, Layout((4, 3), (3, 1))) == (1, 2)  # with a layout: (5 // 3) % 4, (5 // 1) % 3
    assert idx2crd(7, (4, 3), (0, 4)) == (0, 1)  # a stride-0 leaf is 0
    assert idx2crd(9, (4, 3), (1, 4)) == (1, 2)
    for bad in (12, 13, -1):
        with pytest.raises(LayoutError, match=rf"^index {bad} is out of range for shape \(4,3\) \(size 12\)$"):
            idx2crd(bad, (4, 3))
    with pytest.raises(LayoutError, match=r"^idx2crd\(idx, layout\) takes no stride$"):
        idx2crd(1, Layout((4, 3)), (1, 4))


def test_cosize_of_a_shape_is_its_size() -> None:
    assert cosize((4, (2, 3))) == 24 and cosize(5) == 5
    assert cosize(Layout((4, 2), (2, 1))) == 8


@settings(max_examples=300, deadline=None)
@given(st.integers(-40, 80), st.integers(1, 40), st.integers(1, 64))
def test_argmax_mod_reaches_the_largest_residue(d: int, s: int, m: int) -> None:
    """The carry test of composition asks, per level M, for the c < s with the largest (d c) mod M."""
    c = _argmax_mod(d, s, m)
    assert isinstance(c, int) and 0 <= c < s
    assert (d * c) % m == max((d * k) % m for k in range(s))


def test_argmax_mod_goldens() -> None:
    assert _argmax_mod(0, 5, 7) == 0 and _argmax_mod(14, 5, 7) == 0  # d = 0 mod m: 0
    assert _argmax_mod(3, 3, 7) == 2  # 3 * 2 = 6 < 7: the last
    assert _argmax_mod(3, 4, 9) == 2  # 0, 3, 6, 0: 6 at c = 2 (d (s - 1) = 9 = m, not below it)
    assert _argmax_mod(5, 12, 12) == 7  # every residue: 11 = 5 * 7 mod 12
    assert _argmax_mod(4, 6, 6) == 1  # gcd 2, period 3: 4 at c = 1 (and 4)
    assert _argmax_mod(7, 3, 10) == 1  # 0, 7, 4


def test_coalesce_by_profile() -> None:
    a = Layout(((2, 3), (2, 2)), ((1, 2), (6, 12)))
    assert coalesce(a, (1, (1, 1))) == Layout((6, (2, 2)), (1, (6, 12)))
    assert coalesce(a, (1, 1)) == Layout((6, 4), (1, 6))
    assert coalesce(a, (1,)) == Layout((6, (2, 2)), (1, (6, 12)))  # modes past the profile kept
    with pytest.raises(LayoutError, match=r"^coalesce: profile \(1,1,1\) has more modes than \(2,3\):\(1,2\)$"):
        coalesce(Layout((2, 3), (1, 2)), (1, 1, 1))


def test_logical_product_by_mode() -> None:
    a = Layout((2, 3), (1, 2))
    # each mode its own product: 2:1 x 2:1 = (2,2):(1,2); 3:2 x 2:1 = (3:2, complement(3:2, 6) o 2:1 = 2:1)
    assert logical_product(a, (Layout(2), Layout(2))) == Layout(((2, 2), (3, 2)), ((1, 2), (2, 1)))
    assert logical_product(a, (Layout(2),)) == Layout(((2, 2), 3), ((1, 2), 2))
    with pytest.raises(LayoutError, match=r"^logical_product: tiler has 3 modes, more than the 2 of \(2,3\):\(1,2\)$"):
        logical_product(a, (Layout(2), Layout(2), Layout(2)))


def test_rank_one_blocked_and_raked_products_are_one_mode() -> None:
    """Rank 1: one mode (block, tiles) / (tiles, block), nested arrangement or not."""
    assert blocked_product(Layout(2), Layout(3)) == Layout(((2, 3),), ((1, 2),))
    assert raked_product(Layout(2), Layout(3)) == Layout(((3, 2),), ((2, 1),))
    assert blocked_product(Layout(2), Layout((3,), (1,))) == Layout(((2, (3,)),), ((1, (2,)),))
    # rank 2: mode i is (a's mode i, tiles' mode i); tiles = complement((2,2):(1,2), 24) o (3,2):(1,3) = (3,2):(4,12)
    assert blocked_product(Layout((2, 2), (1, 2)), Layout((3, 2), (1, 3))) == Layout(((2, 3), (2, 2)), ((1, 4), (2, 12)))
    assert raked_product(Layout((2, 2), (1, 2)), Layout((3, 2), (1, 3))) == Layout(((3, 2), (2, 2)), ((4, 1), (12, 2)))
    with pytest.raises(LayoutError, match="a blocked/raked product's tiler"):
        blocked_product(Layout(2), "x")  # type: ignore[arg-type]


def test_inverses_edge_cases() -> None:
    assert left_inverse(Layout(4, 0)) == Layout(1, 0)  # no stride but 0: 1:0
    assert left_inverse(Layout((4, 1), (0, 3))) == Layout(1, 0)
    assert left_inverse(Layout((4, 2), (1, 4))) == Layout(8, 1)  # coalesced: 8:1 is its own inverse
    assert left_inverse(Layout((4, 2), (1, 8))) == Layout((8, 2), (1, 4))  # x % 8 + 4 (x // 8): 9 -> 5
    assert left_inverse(Layout((2, 4), (4, 1))) == Layout((4, 2), (2, 1))
    with pytest.raises(LayoutError, match=r"mode 2:4 starts inside the span 8 .* not injective"):
        left_inverse(Layout((4, 2), (2, 4)))
    with pytest.raises(LayoutError, match=r"^left_inverse\(\(4,2\):\(-1,4\)\) is not defined: stride -1 is negative$"):
        left_inverse(Layout((4, 2), (-1, 4)))
    for f in (left_inverse, right_inverse):
        with pytest.raises(LayoutError, match=rf"^{f.__name__} takes a layout or a swizzle, not 3$"):
            f(3)  # type: ignore[call-overload]
    assert right_inverse(Layout((4, 2), (2, 8))) == Layout(1, 0)  # no stride 1


def test_make_layout_and_composition_goldens() -> None:
    assert make_layout(Layout(2), Layout(3, 2)) == Layout((2, 3), (1, 2))
    assert composition(Layout((4, 2), (2, 8)), Layout(8, 1)) == Layout(8, 2)  # (4,2):(2,8) is 8:2


@pytest.mark.parametrize("a,b,suggested", [
    (Layout((4, 2), (1, 8)), Layout(12, 1), "composition((4,3):(1,8), 12:1)"),  # 12 / 4 = 3 of the last mode
    (Layout((2, 3, 2), (1, 4, 16)), Layout(13, 1), "composition((2,3,3):(1,4,16), 13:1)"),  # ceil(13 / 6)
    (Layout(1, 0), Layout(3, 1), "composition(3:0, 3:1)"),  # a constant: its one mode extended
])
def test_a_composition_past_the_outer_layout_names_the_extended_one(a: Layout, b: Layout, suggested: str) -> None:
    with pytest.raises(LayoutError, match=r"runs past the outer layout") as e:
        composition(a, b)
    assert str(e.value).endswith("to ask for that explicitly compose with " + suggested)


def test_products_pad_the_lower_rank_with_1_0_and_name_a_bad_tiler() -> None:
    assert blocked_product(Layout((2, 2), (1, 2)), Layout(3)) == Layout(((2, 3), (2, 1)), ((1, 4), (2, 0)))
    assert raked_product(Layout((2, 2), (1, 2)), Layout(3)) == Layout(((3, 2), (1, 2)), ((4, 1), (0, 2)))
    # rank 1 with a nested arrangement: one mode (block, tiles), the arrangement's nesting kept
    assert blocked_product(Layout(2), Layout(((3, 2),), ((1, 3),))) == Layout(((2, ((3, 2),)),), ((1, ((2, 6),)),))
    with pytest.raises(LayoutError, match=r"^a blocked/raked product's tiler must be a layout or an int, not 'x'$"):
        blocked_product(Layout(2), "x")  # type: ignore[arg-type]


def test_crd2crd_by_mode_ranges_and_refusals() -> None:
    assert crd2crd((3, 2), ((2, 2), 3), (4, 3)) == ((1, 1), 2)  # mode 0: 3 in 4 -> (1, 1) in (2, 2)
    assert crd2crd(((1, 1), 2), ((2, 2), 3), ((2, 2), 3)) == ((1, 1), 2)
    assert crd2crd(((1, 1), 2), (4, 3), ((2, 2), 3)) == (3, 2)  # mode 0: (1, 1) of (2, 2) is 3 of 4
    assert crd2crd(0, 5) == 0 and crd2crd(4, 5) == 4
    for bad in (5, -1):
        with pytest.raises(LayoutError, match=rf"^crd2crd: coordinate {bad} is out of range for extent 5$"):
            crd2crd(bad, 5)
    with pytest.raises(LayoutError, match=r"^crd2crd: coordinate \(1,2\) does not match shape \(4,3,2\)$"):
        crd2crd((1, 2), (4, 3, 2))
    with pytest.raises(LayoutError, match=r"^crd2crd: coordinate \(1,2\) does not match shape \(12\)$"):
        crd2crd((1, 2), (4, 3), (12,))
    with pytest.raises(LayoutError, match=r"^crd2crd: coordinate \(1,2\) does not match shape 12$"):
        crd2crd((1, 2), (4, 3), 12)


def test_filter_by_a_nested_profile_and_its_refusal() -> None:
    # mode 0 ((2,2):(0,1)) filtered leaf by leaf: (1, 2):(0, 1); mode 1 (3,4):(1,0) filtered whole: 3:1
    assert filter(Layout(((2, 2), (3, 4)), ((0, 1), (1, 0))), ((1, 1), 1)) == Layout(((1, 2), 3), ((0, 1), 1))
    with pytest.raises(LayoutError, match=r"^filter: profile \(1,1,1\) has more modes than \(2,3\):\(1,2\)$"):
        filter(Layout((2, 3), (1, 2)), (1, 1, 1))


def test_a_swizzle_composed_with_a_tuple_of_layouts() -> None:
    assert str(composition(Swizzle(3, 4, 3), (Layout(8, 8), Layout(8, 1)))) == "Sw<3,4,3> o (8,8):(8,1)"
    assert str(composition(Swizzle(3, 4, 3), (8, 4))) == "Sw<3,4,3> o (8,4):(1,1)"
    for bad in ((Layout(8, 8), (Layout(2),)), (Layout(8, 8), None)):
        with pytest.raises(LayoutError, match=r"^a swizzle composes with a layout, not a by-mode tiler$"):
            composition(Swizzle(3, 4, 3), bad)
    with pytest.raises(LayoutError, match=r"^a tiler mode must be a layout or an int, not 'x'$"):
        composition(Swizzle(3, 4, 3), (Layout(8, 8), "x"))  # type: ignore[arg-type]


def test_composition_with_swizzles_and_its_refusals_word_for_word() -> None:
    sw = Swizzle(3, 4, 3)
    # a swizzled outer layout keeps its swizzle and offset; its layout is composed:
    # (8,8):(8,1) o (4,2):(2,16) = (4,2):(16,2) (2 c0 is row 2 c0 % 8: 16 c0; 16 c1 is column 2 c1)
    assert str(composition(SwizzledLayout(sw, Layout((8, 8), (8, 1)), 4), Layout((4, 2), (2, 16)))) == \
        "Sw<3,4,3> o +4(4,2):(16,2)"
    assert str(composition(sw, 64)) == "Sw<3,4,3> o 64:1"
    assert str(composition(Layout((4, 4), (4, 1)), 4)) == "4:4"
    # bad input on purpose: through untyped names
    loose_composition: Any = composition
    loose_complement: Any = complement
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: loose_composition(sw, None), "composition(Sw<3,4,3>, _): a swizzle composes with a layout"),
        (lambda: loose_composition(sw, SwizzledLayout(sw, Layout((8, 8), (8, 1)))),
         "composition(Sw<3,4,3>, Sw<3,4,3> o (8,8):(8,1)): a swizzle of a swizzled layout is not supported"),
        (lambda: loose_composition(sw, "x"),
         "a swizzle's inner layout must be a layout or an int, not 'x'"),
        (lambda: loose_composition("q", Layout(2)),
         "composition: the outer must be a layout or a swizzle, not 'q'"),
        (lambda: loose_composition(Layout(8), sw), "composition(8:1, Sw<3,4,3>): a layout composed with a swizzle is not a layout"),
        (lambda: loose_composition(Layout(8), "x"),
         "a composition's inner layout must be a layout or an int, not 'x'"),
        (lambda: loose_complement("x"),
         "complement takes a layout, not 'x'"),
        (lambda: loose_complement(Layout(4, 1), 0), "complement(4:1, 0): the cotarget 0 is not positive"),
        (lambda: loose_complement(Layout(4, -1), 8),
         "complement(4:-1, 8) is not defined: stride -1 is negative (CuTe's complement needs positive strides)"),
    ]
    for call, message in cases:
        with pytest.raises(LayoutError) as e:
            call()
        assert str(e.value) == message


# --- the algebra group's third pass: composition's general path, complement's repeat mode, the
# products' and divides' refusals (docs/testing.md, the algebra group's survivors) ----------------


def test_builders_refuse_word_for_word() -> None:
    loose: Any = make_layout
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: loose(), "make_layout needs at least one mode, or a shape"),
        (lambda: loose(Layout(4), 3), "make_layout takes layouts (to concatenate) or a shape and a stride, not both"),
        (lambda: loose(4, 1, 2), "make_layout(shape, stride) takes at most 2 arguments, got 3"),
        (lambda: logical_divide(Layout((4, 4), (1, 4)), (2, 2, 2)),
         "logical_divide: tiler has 3 modes, more than the 2 of (4,4):(1,4)"),
        (lambda: logical_divide(Layout(8), 2.0), "a tiler must be a layout or an int, not 2.0"),  # type: ignore[arg-type]
        (lambda: logical_product(Layout(8), 2.0), "a tiler must be a layout or an int, not 2.0"),  # type: ignore[arg-type]
        (lambda: logical_divide(Layout(8), Layout(2, -1)), "logical_divide(8:1, 2:-1): the tile has a negative stride"),
        (lambda: logical_divide(Layout(6), Layout(8)),
         "logical_divide(6:1, 8:1): the tile is larger than the layout (it reaches 7, the layout has size 6); CuTe "
         "would read past the end, to ask for that divide the padded layout: logical_divide(8:1, 8:1)"),
        (lambda: logical_divide(Layout(24), Layout((2, 2), (1, 1))),
         "logical_divide(24:1, (2,2):(1,1)): the complement of the tile is not defined: sorted by stride, the mode "
         "2:1 starts inside the span 2 of the modes below it (the modes interleave or alias), so CuTe's complement "
         "would have an extent 0"),
        # the tile and its complement (2,2):(1,4) reach 7 = the size exactly: one past the last index
        (lambda: logical_divide(Layout(7), Layout(2, 2)),
         "logical_divide(7:1, 2:2): the tile does not divide the layout (tile and its complement (2,2):(1,4) reach 7, "
         "the layout has size 7); CuTe would read past the end, to ask for that divide the padded layout: "
         "logical_divide(8:1, 2:2)"),
        (lambda: logical_product(Layout((2, 2), (1, 1)), 3),
         "logical_product((2,2):(1,1), 3:1): complement((2,2):(1,1)) is not defined: sorted by stride, the mode 2:1 "
         "starts inside the span 2 of the modes below it (the modes interleave or alias), so CuTe's complement would "
         "have an extent 0"),
        # CuTe's fast rule (through A's modes): 4 steps fill the extent-4 mode, 6 is not a multiple of 4
        (lambda: composition(Layout((4, 3), (1, 100)), Layout(6)),
         "composition((4,3):(1,100), 6:1) has no strided answer: for the mode 6:1 of the inner layout, it takes 4 "
         "steps through the extent-4 mode of A, and the 6 values left are not a multiple of 4"),
        # B(1,1) = 3 = (0, 1) in A's coordinates: A(3) = 10, but A(1) + A(2) = 3
        (lambda: composition(Layout((3, 4), (1, 10)), Layout((2, 2), (1, 2))),
         "composition((3,4):(1,10), (2,2):(1,2)) has no strided answer: the inner layout's modes add with a carry in "
         "the outer's coordinates (at inner index 3: A = 10, the modes' parts sum to 3)"),
        (lambda: composition(Layout((4, 2), (1, 8)), Layout(12)),
         "composition((4,2):(1,8), 12:1) runs past the outer layout: the inner layout reaches 11, the outer one has "
         "coordinates 0..7; CuTe would extend the outer's last mode, to ask for that explicitly compose with "
         "composition((4,3):(1,8), 12:1)"),
    ]
    for call, message in cases:
        with pytest.raises(LayoutError) as e:
            call()
        assert str(e.value) == message


def test_pairs_is_the_flat_leaves_as_a_list() -> None:
    # warpy.layout.typed's strided form reads the outer layout through it
    assert _pairs(Layout(((2, 3), 4), ((1, 2), 6))) == [(2, 1), (3, 2), (4, 6)]
    assert _pairs(Layout(5, 0)) == [(5, 0)]


def test_modes_disjoint_goldens() -> None:
    """The property tests' filter for inner layouts: live modes (extent > 1, stride != 0) sorted by
    stride occupy disjoint ranges [d, d*s)."""
    assert _modes_disjoint(Layout((2, 2), (1, 2)))  # [1,2) and [2,4): touching is disjoint
    assert _modes_disjoint(Layout((2, 1, 2), (1, 3, 2)))  # the extent-1 mode at 3 is no range
    assert _modes_disjoint(Layout((2, 3, 2), (1, 0, 2)))  # nor is the stride-0 one
    assert not _modes_disjoint(Layout((3, 2), (1, 2)))  # [1,3) and [2,4) overlap


def test_complement_repeat_mode_reaches_the_cotarget() -> None:
    # (2,2):(1,3) is {0,1,3,4}: one hole of 1 at 2, span 6. For 6, CuTe's ceil(6/6) = 1 copy reaches
    # only 4 < 6: the repeat mode needs 2 (2:6); for 5, one copy reaches 5 and is enough (1:0)
    assert complement(Layout((2, 2), (1, 3)), 6) == Layout(2, 6)
    assert complement(Layout((2, 2), (1, 3)), 5) == Layout(1, 0)
    assert complement(Layout((4, 2), (1, 10)), 14) == Layout(2, 4)  # CuTe's answer (issue 22)
    assert complement(Layout((4, 2), (1, 10)), 41) == Layout((2, 3), (4, 20))
    # {0,1,5,6}: holes (2):(2) and span 10; 3 copies reach 29 < 30, so 4
    assert complement(Layout((2, 2), (1, 5)), 30) == Layout((2, 4), (2, 10))
    assert complement(Layout(3, 4), 20) == Layout((4, 2), (1, 12))


def test_products_of_holey_layouts_goldens() -> None:
    # (2,2):(1,8) has the hole (4):(2) and span 16: B = 3:5 needs A* o B with A* = (4, 3):(2, 16)
    for a, b, expected in [
        (Layout((2, 2), (1, 8)), Layout(3, 5), "((2,2),3):((1,8),18)"),
        (Layout((2, 2), (1, 3)), Layout(3), "((2,2),3):((1,3),6)"),
        (Layout((2, 2), (1, 5)), Layout((2, 3), (1, 4)), "((2,2),(2,3)):((1,5),(2,20))"),
        (Layout(4, 3), Layout(9), "(4,(3,3)):(3,(1,12))"),
    ]:
        p = logical_product(a, b)
        assert str(p) == expected
        assert p[0] == a
        values = [p(i) for i in range(p.size())]
        assert len(set(values)) == len(values)  # unique copies of A
    with pytest.raises(LayoutError) as e:
        logical_product(Layout((2, 2), (1, 8)), Layout(6))
    assert str(e.value) == (
        "composition((4,2):(2,16), 6:1) has no strided answer: for the mode 6:1 of the inner layout, it takes 4 steps "
        "through the extent-4 mode of A, and the 6 values left are not a multiple of 4"
    )


_ADVANCES = re.compile(
    r"A\(B\(c\)\) advances by (-?\d+) for (\d+) steps of c \(from c = 0 in steps of (\d+)\), then not, and the (\d+) "
    r"values left are not a multiple of (\d+)"
)
_NOT_STRIDED = re.compile(r"A\(B\(c\)\) is not strided: at c = (\d+) it is not the sum of its parts below and above (\d+)")
_THROUGH = re.compile(r"it takes (\d+) steps through the extent-(\d+) mode of A, and the (\d+) values left are not a multiple of (\d+)")
_CARRY = re.compile(
    r"the inner layout's modes add with a carry in the outer's coordinates \(at inner index (\d+): A = (-?\d+), the "
    r"modes' parts sum to (-?\d+)\)"
)


def _check_refusal(a: Layout, b: Layout, message: str) -> str:
    """The refusal's claims, checked point by point: which kind of witness it gives."""
    head = f"composition({a}, {b}) has no strided answer: "
    assert message.startswith(head), message
    rest = message[len(head):]
    if (m := _CARRY.fullmatch(rest)) is not None:
        x, ax, parts = map(int, m.groups())
        assert a(x) == ax != parts
        bp = list(b.pairs())
        assert any(b(i) == x and sum(a(d * ((i // w) % s)) for (s, d), w in zip(bp, _lows(tuple(s for s, _ in bp)))) == parts
                   for i in range(b.size()))
        return "carry"
    lead = re.match(r"for the mode (\d+):(-?\d+) of the inner layout, ", rest)
    assert lead is not None, message
    s, d = int(lead.group(1)), int(lead.group(2))
    assert (s, d) in b.pairs()
    why = rest[lead.end():]

    def f(c: int) -> int:
        return a(d * c)
    if (m := _ADVANCES.fullmatch(why)) is not None:
        e, r, base, left, r2 = map(int, m.groups())
        assert r == r2 and s % base == 0 and left == s // base and left % r != 0
        assert all(f(base * c) == c * e for c in range(r)) and f(base * r) != r * e
        return "advances"
    if (m := _NOT_STRIDED.fullmatch(why)) is not None:
        c, p = map(int, m.groups())
        assert c < s and f(c) != f(c % p) + f(c - c % p)
        return "not strided"
    m = _THROUGH.fullmatch(why)
    assert m is not None, message
    r, extent, left, r2 = map(int, m.groups())
    assert r == r2 and extent % r == 0 and left % r != 0 and extent in [x for x, _ in coalesce(a).pairs()] + [a.size()]
    return "through"


def _composition_case(rng: random.Random) -> tuple[Layout, Layout]:
    """A flat outer layout of 2-4 modes with unrelated strides (so that runs end inside its modes
    and carry), and an inner mode n:q or a pair of modes, within its domain."""
    n = rng.randint(2, 4)
    a = Layout(tuple(rng.randint(2, 7) for _ in range(n)), tuple(rng.randint(1, 40) for _ in range(n)))
    if rng.random() < 0.6:
        q = rng.randint(1, 12)
        return a, Layout(rng.randint(2, max(2, (a.size() - 1) // q + 1)), q)
    return a, Layout((rng.randint(2, 4), rng.randint(2, 4)), (rng.randint(1, 6), rng.randint(1, 16)))


def test_composition_general_path_against_the_reference() -> None:
    """Seeded: every answer is the reference's (A(B(c)) point by point, recognised as a strided
    layout), every refusal is one (the reference finds no strided answer) and its message's witness
    holds; the cases reach the general path (runs ending inside A's modes, carries)."""
    rng = random.Random(22)
    seen: Counter[str] = Counter()
    for _ in range(1500):
        a, b = _composition_case(rng)
        try:
            expected = ref.compose((a.shape, a.stride), (b.shape, b.stride))
        except ref.RunsPast:
            with pytest.raises(LayoutError, match=r"runs past the outer layout"):
                composition(a, b)
            seen["past"] += 1
            continue
        try:
            got = composition(a, b)
        except LayoutError as e:
            assert expected is None, f"false refusal: {a} o {b} = {expected}: {e}"
            seen[_check_refusal(a, b, str(e))] += 1
            continue
        assert (got.shape, got.stride) == expected, f"{a} o {b}: {got}, reference {expected}"
        seen["ok"] += 1
    assert all(seen[k] > 20 for k in ("ok", "past", "carry", "advances", "not strided", "through")), seen


@pytest.mark.parametrize("a, b, why", [
    # two runs split off (of 2, then 2) before the third fails: the message counts c in steps of 4
    (Layout((4, 6, 4, 7), (30, 39, 17, 36)), Layout(72, 6),
     "for the mode 72:6 of the inner layout, A(B(c)) advances by 17 for 4 steps of c (from c = 0 in steps of 4), then "
     "not, and the 18 values left are not a multiple of 4"),
    # after a first run of 2, c in steps of 2 (B's values 0, 6, 12): the last one, 12, is the low of
    # A's third mode, where the run breaks (A(12) = 15, not 2 * 3)
    (Layout((2, 6, 5, 2), (14, 1, 15, 34)), Layout(6, 3),
     "for the mode 6:3 of the inner layout, A(B(c)) advances by 3 for 2 steps of c (from c = 0 in steps of 2), then "
     "not, and the 3 values left are not a multiple of 2"),
])
def test_composition_general_path_refusals_word_for_word(a: Layout, b: Layout, why: str) -> None:
    assert ref.compose((a.shape, a.stride), (b.shape, b.stride)) is None
    with pytest.raises(LayoutError) as e:
        composition(a, b)
    assert str(e.value) == f"composition({a}, {b}) has no strided answer: {why}"
    _check_refusal(a, b, str(e.value))


def test_logical_product_names_the_complement_it_composes() -> None:
    """A* = complement(A, size(A) * cosize(B)), its repeat mode long enough for B's largest value;
    a refusal names A* with that extent (here the holes of A are 5 wide, B reaches 26: 6 copies,
    more than the cotarget's 5)."""
    cases = [
        (Layout(((4, 1), 2), ((11, 4), 1)), Layout(((2, 4),), ((5, 7),)), Layout((5, 6), (2, 44))),
        (Layout(((2, 1), 3), ((4, 0), 9)), Layout((2, 3), (3, 6)), Layout((4, 4), (1, 27))),
    ]
    for a, b, a_star in cases:
        with pytest.raises(LayoutError) as e:
            logical_product(a, b)
        head = f"composition({a_star}, {b}) has no strided answer: "
        assert str(e.value).startswith(head)
        _check_refusal(a_star, b, str(e.value))
        assert ref.compose((a_star.shape, a_star.stride), (b.shape, b.stride)) is None
    # stride-0 modes only: no holes, A* is the compact size(A) * cosize(B) = 30 (an int cotarget)
    assert logical_product(Layout(((5, 2), 1), ((0, 0), 14)), 3) == Layout((((5, 2), 1), 3), (((0, 0), 14), 1))


def test_composition_where_carries_cancel_is_strided() -> None:
    """A = (2,3,4):(1,5,12) is A(x) = x + 3 floor(x/2) - 3 floor(x/6): B = 8:3 carries at A's
    lows 2 and 6 at the same points (c = 2, 4, 6: 3c = 6, 12, 18) and the two steps cancel (weights 3
    and -3: A(6) = 12 = 2 A(3)); the run goes on past them, checked at each: A o B = 8:6."""
    a = Layout((2, 3, 4), (1, 5, 12))
    assert [a(3 * c) for c in range(8)] == [6 * c for c in range(8)]
    assert composition(a, Layout(8, 3)) == Layout(8, 6)
    assert composition(a, Layout((2, 4), (3, 6))) == Layout((2, 4), (6, 12))


def test_left_inverse_search_goldens(monkeypatch: pytest.MonkeyPatch) -> None:
    """The search beyond CuTe's form: its answers, its proven refusals and its bounds, literally."""
    import warpy.layout.algebra as algebra

    P = Layout.parse
    for text, expected in [
        ("(2,3):(14,3)", "(2,2,2,3):(9,-7,11,-3)"),
        ("(2,2):(2,3)", "(2,3):(1,1)"),
        ("(2,3):(3,2)", "(2,4):(-1,2)"),
        ("(2,3):(5,2)", "(2,5):(-3,2)"),
        ("(3,2):(3,14)", "(2,2,2,3):(2,-1,3,1)"),
        ("(2,(2,2)):(0,(2,3))", "(2,3):(2,2)"),
        ("(4,2):(3,1)", "(3,4):(4,1)"),  # CuTe's form
        ("(3,2,2):(1,1000,7)", "(4,2,4,2,16):(1,3,7,-844,56)"),
    ]:
        a = P(text)
        li = left_inverse(a)
        if expected is not None:
            assert str(li) == expected
        vals = [a(i) for i in range(a.size())]
        for i, y in enumerate(vals):
            assert a(li(y)) == y
    assert algebra._primes_upto(30) == [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]
    assert algebra._primes_upto(1) == [] and algebra._primes_upto(2) == [2]
    with pytest.raises(LayoutError, match=r"^left_inverse\(\(3,3\):\(3,2\)\) is not defined: .*\(2 does not divide 3\), and no strided layout M .* below cosize 11\)$"):
        left_inverse(P("(3,3):(3,2)"))
    monkeypatch.setattr(algebra, "_LI_WORK", 5)
    with pytest.raises(LayoutError, match=r"undecided: .* stopped after 5 steps \(cosize 21, 6 points\)$"):
        left_inverse(P("(2,3):(14,3)"))
