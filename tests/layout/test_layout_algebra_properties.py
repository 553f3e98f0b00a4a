"""Properties of CuTe's operations over whole domains (hypothesis)."""

from __future__ import annotations

import os

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
import layout_reference as reference
from layout_strategies import admissible_injective, bijections, layouts, pow2_layouts

from warpy.layout import (
    Layout,
    LayoutError,
    blocked_product,
    coalesce,
    complement,
    composition,
    flat_divide,
    flat_product,
    left_inverse,
    logical_divide,
    logical_product,
    make_layout,
    raked_product,
    right_inverse,
    tiled_divide,
    tiled_product,
    zipped_divide,
    zipped_product,
)
from warpy.layout.algebra import _modes_disjoint, _value_range
from warpy.layout.inttuple import depth, flatten

FAST = settings(max_examples=120, deadline=None)
#: the by-mode properties (a tuple of tilers applied mode by mode): half the examples, each mode's own
#: composition or divide being the 120-example properties' business; 120 with WARPY_SLOW=1
BY_MODE = settings(max_examples=120 if os.environ.get("WARPY_SLOW") == "1" else 60, deadline=None)


def values(layout: Layout) -> list[int]:
    return layout.values()


@FAST
@given(layouts())
def test_coalesce_preserves_the_function(a: Layout) -> None:
    c = coalesce(a)
    assert c.size() == a.size() and depth(c.shape) <= 1
    assert values(c) == values(a)
    by_mode = coalesce(a, (1,) * a.rank()) if isinstance(a.shape, tuple) else coalesce(a, 1)
    assert values(by_mode) == values(a)
    if isinstance(a.shape, tuple):
        assert by_mode.rank() == a.rank()
        assert all(by_mode[i].size() == a[i].size() for i in range(a.rank()))


def _check_composition(a: Layout, b: Layout, r: Layout) -> None:
    assert r.size() == b.size()
    assert [r(i) for i in range(b.size())] == [a(b(i)) for i in range(b.size())]
    if isinstance(b.shape, tuple):  # compatible with B: its coordinates are R's coordinates
        assert r.rank() == b.rank() and all(r[i].size() == b[i].size() for i in range(b.rank()))


@FAST
@given(layouts(), layouts(max_stride=8))
def test_composition_is_a_of_b_or_refused(a: Layout, b: Layout) -> None:
    try:
        r = composition(a, b)
    except LayoutError as e:
        lo, hi = _value_range(b)
        if "runs past" in str(e):
            assert lo < 0 or hi >= a.size()
        else:
            assert "no strided answer" in str(e)
            assert 0 <= lo and hi < a.size()
            # the proof: A(B(c)) is no strided layout over any refinement of B's shape
            assert reference.compose((a.shape, a.stride), (b.shape, b.stride)) is None
        return
    _check_composition(a, b, r)


@FAST
@given(pow2_layouts(), pow2_layouts())
def test_composition_of_powers_of_two_always_admissible(a: Layout, b: Layout) -> None:
    assume(_value_range(b)[1] < a.size() and _modes_disjoint(b))
    _check_composition(a, b, composition(a, b))


@BY_MODE
@given(pow2_layouts(max_leaves=4), st.data())
def test_composition_by_mode(a: Layout, data: st.DataObject) -> None:
    assume(isinstance(a.shape, tuple))
    tiler = tuple(data.draw(pow2_layouts(max_leaves=2)) for _ in range(a.rank()))
    assume(all(_value_range(t)[1] < a[i].size() and _modes_disjoint(t) for i, t in enumerate(tiler)))
    r = composition(a, tiler)
    assert r == make_layout(*(composition(a[i], t) for i, t in enumerate(tiler)))
    for i, t in enumerate(tiler):
        _check_composition(a[i], t, r[i])


@FAST
@given(admissible_injective(), st.integers(1, 4), st.booleans())
def test_complement_disjoint_ordered_covering(a: Layout, k: int, exact: bool) -> None:
    span = max(s * d for s, d in zip(*(_flat(a))))
    m = span * k if exact else span * k - (k > 1)
    r = complement(a, m)
    rv = values(r)
    assert all(rv[i - 1] < rv[i] for i in range(1, len(rv)))  # ordered
    assert not set(rv[1:]) & set(values(a))  # disjoint
    joined = make_layout(a, r)
    assert len(set(values(joined))) == joined.size()  # (A, A*) still injective
    assert joined.cosize() >= m  # covers the cotarget
    if exact:
        assert sorted(values(joined)) == list(range(m))


def _flat(a: Layout) -> tuple[tuple[int, ...], tuple[int, ...]]:
    from warpy.layout.inttuple import flatten

    return flatten(a.shape), flatten(a.stride)


@FAST
@given(layouts(zero=False, max_stride=12), st.integers(1, 64))
def test_complement_of_any_layout_is_disjoint_or_refused(a: Layout, m: int) -> None:
    try:
        r = complement(a, m)
    except LayoutError as e:
        assert "not defined" in str(e)
        assert reference.interleaved_or_negative(reference.flat(a.shape, a.stride))
        return
    assert reference.complement_ok(reference.flat(a.shape, a.stride), m, reference.flat(r.shape, r.stride)) is None
    joined = make_layout(coalesce(a), r)
    assert len(set(values(joined))) == len(set(values(a))) * r.size()
    assert not set(values(r)[1:]) & set(values(a))


@FAST
@given(pow2_layouts(zero=False), admissible_injective(pow2=True))
def test_logical_divide(a: Layout, tile: Layout) -> None:
    span = max(s * d for s, d in zip(*_flat(tile)))
    assume(a.size() % span == 0)
    d = logical_divide(a, tile)
    assert d == composition(a, make_layout(tile, complement(tile, a.size())))
    assert values(d[0]) == values(composition(a, tile))
    assert sorted(values(d)) == sorted(values(a))  # a permutation of a's coordinates
    z = zipped_divide(a, tile)
    assert values(z) == values(d) == values(tiled_divide(a, tile)) == values(flat_divide(a, tile))


@BY_MODE
@given(pow2_layouts(zero=False, max_leaves=4), st.data())
def test_divide_by_mode(a: Layout, data: st.DataObject) -> None:
    assume(isinstance(a.shape, tuple) and a.rank() >= 2)
    t0 = data.draw(admissible_injective(max_leaves=2, pow2=True))
    t1 = data.draw(st.sampled_from([1, 2, 4]))
    span0 = max(s * d for s, d in zip(*_flat(t0)))
    assume(a[0].size() % span0 == 0 and a[1].size() % t1 == 0)
    tiler = (t0, t1)
    d = logical_divide(a, tiler)
    assert d == make_layout(logical_divide(a[0], t0), logical_divide(a[1], t1), *(a[i] for i in range(2, a.rank())))
    z = zipped_divide(a, tiler)
    assert z[0] == make_layout(composition(a[0], t0), composition(a[1], t1))
    for other in (z, tiled_divide(a, tiler), flat_divide(a, tiler)):
        assert sorted(values(other)) == sorted(values(a))


@FAST
@given(pow2_layouts(max_leaves=3), st.integers(0, 5))
def test_tile_larger_than_the_layout_is_refused(a: Layout, extra: int) -> None:
    with pytest.raises(LayoutError, match="larger than the layout"):
        logical_divide(a, a.size() + 1 + extra)


def _check_product(a: Layout, b: Layout, p: Layout) -> None:
    assert p[0] == a
    assert p[1] == composition(complement(a, a.size() * b.cosize()), b)
    if len(set(values(b))) == b.size():  # B injective: every copy of A is distinct
        assert len(set(values(p))) == p.size()
    for other in (zipped_product(a, b), tiled_product(a, b), flat_product(a, b)):
        assert values(other) == values(p)
    for other in (blocked_product(a, b), raked_product(a, b)):
        assert sorted(values(other)) == sorted(values(p))


def _negative_tiler(b: Layout) -> bool:
    return any(s < 0 and e > 1 for e, s in zip(flatten(b.shape), flatten(b.stride)))


@FAST
@given(bijections(), layouts(max_leaves=3, max_stride=6))
def test_logical_product_of_a_dense_block(a: Layout, b: Layout) -> None:
    if _negative_tiler(b):  # a product repeats A at B's offsets: below 0 there is no A to place
        with pytest.raises(LayoutError, match="the tiler has a negative stride"):
            logical_product(a, b)
        return
    _check_product(a, b, logical_product(a, b))


@FAST
@given(admissible_injective(), layouts(max_leaves=3, max_stride=6))
def test_logical_product_or_refused(a: Layout, b: Layout) -> None:
    try:
        p = logical_product(a, b)
    except LayoutError as e:
        if _negative_tiler(b):
            assert "the tiler has a negative stride" in str(e)
        else:
            assert "no strided answer" in str(e)  # B's strides do not fit A's holes
        return
    assert not _negative_tiler(b)
    _check_product(a, b, p)


@FAST
@given(bijections(), st.integers(1, 6))
def test_divide_undoes_product(a: Layout, m: int) -> None:
    # A is a bijection onto [0,n): (A, m:n) is the product, and dividing it by n gives it back.
    p = logical_product(a, m)
    assert sorted(values(p)) == list(range(a.size() * m))
    d = logical_divide(p, a.size())
    assert values(d) == values(p)
    assert values(d[0]) == values(a)


@FAST
@given(layouts(zero=True, max_stride=16))
def test_right_inverse(a: Layout) -> None:
    r = right_inverse(a)
    assert all(a(r(i)) == i for i in range(r.size()))


@FAST
@given(bijections())
def test_right_inverse_of_a_bijection_is_its_inverse(a: Layout) -> None:
    r = right_inverse(a)
    assert r.size() == a.size()
    assert all(r(a(i)) == i for i in range(a.size()))


@FAST
@given(admissible_injective())
def test_left_inverse(a: Layout) -> None:
    li = left_inverse(a)
    assert all(li(a(i)) == i for i in range(a.size()))
