"""Typed layouts: invariants, strict composition, the decision procedure, restrictions."""

from __future__ import annotations

import itertools
from itertools import permutations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from layout_strategies import bijections, factorization, layouts, padded_physical

from warpy.layout import (
    SW128_ATOM,
    Composite,
    Layout,
    LayoutError,
    Space,
    TypedLayout,
    compose,
    count_divmod,
    decide,
    index_expr,
    logical,
    physical,
    thread_value,
)
from warpy.layout.inttuple import flatten, idx2crd, product
from warpy.layout.typed import Restriction, alias_problem, bijection_problem

P = Layout.parse
FAST = settings(max_examples=100, deadline=None)


# --- invariants ---------------------------------------------------------------------------


@FAST
@given(layouts(max_leaves=3, max_extent=4, max_stride=12))
def test_bijection_invariant_matches_enumeration(a: Layout) -> None:
    is_bijection = sorted(a.values()) == list(range(a.size()))
    assert (bijection_problem(a) is None) == is_bijection
    for make in (logical, thread_value):
        if is_bijection:
            assert make(a).values() == a.values()
        else:
            with pytest.raises(LayoutError, match="is not a bijection onto"):
                make(a)


@FAST
@given(layouts(max_leaves=3, max_extent=4, max_stride=12), st.data())
def test_alias_invariant_matches_enumeration(a: Layout, data: st.DataObject) -> None:
    leaves = list(zip(flatten(a.shape), flatten(a.stride)))
    bcast = frozenset(data.draw(st.sets(st.integers(0, len(leaves) - 1), max_size=1)))
    live = [(s, d) for k, (s, d) in enumerate(leaves) if k not in bcast]
    sub = Layout(tuple(s for s, _ in live) or 1, tuple(d for _, d in live) or 0)
    alias_free = len(set(sub.values())) == sub.size()
    assert (alias_problem(a, bcast) is None) == alias_free
    if alias_free:
        assert physical(a, bcast).space is Space.PHYSICAL
    else:
        with pytest.raises(LayoutError, match="is not alias-free"):
            physical(a, bcast)


def test_invariant_messages() -> None:
    with pytest.raises(LayoutError, match=r"logical layout \(4,2\):\(2,2\) is not a bijection onto \[0,8\)"):
        logical(P("(4,2):(2,2)"))
    with pytest.raises(LayoutError, match="thread-value layout 4:2 is not a bijection"):
        thread_value(P("4:2"))
    with pytest.raises(LayoutError, match="stride 0 and is not marked broadcast"):
        physical(P("(32,4):(0,1)"))
    assert physical(P("(32,4):(0,1)"), broadcast=(0,))((5, 3)) == 3
    with pytest.raises(LayoutError, match="only physical layouts have broadcast modes"):
        TypedLayout(P("8:1"), Space.LOGICAL, frozenset({0}))
    with pytest.raises(LayoutError, match="a swizzle belongs to a physical layout"):
        TypedLayout(SW128_ATOM, Space.LOGICAL)
    with pytest.raises(LayoutError, match="broadcast mode 3 does not exist"):
        physical(P("(2,2):(1,2)"), broadcast=(3,))
    assert physical(SW128_ATOM).values() == SW128_ATOM.values()


# --- strict composition -------------------------------------------------------------------


def test_composition_golden() -> None:
    c = compose(physical(P("(6,2):(8,2)")), logical(P("(4,3):(3,1)")))
    assert [c(i) for i in range(12)] == [0, 24, 2, 26, 8, 32, 10, 34, 16, 40, 18, 42]
    assert str(decide(c)) == "((2,2),3):((24,2),8)"
    assert str(c.simplify()) == "physical ((2,2),3):((24,2),8)"
    # a padded row-major store read in column-major order: strided over (7,5)
    c = compose(physical(P("(5,7):(1,8)")), logical(P("(7,5):(5,1)")))
    assert str(decide(c)) == "(7,5):(8,1)"
    # the padding falls inside a mode of the reader: no strided form, the composite stays
    c = compose(physical(P("(6,4):(1,8)")), logical(P("(4,6):(1,4)")))
    assert decide(c) is None and c.simplify() is c
    assert [c(i) for i in range(24)] == [P("(6,4):(1,8)")(P("(4,6):(1,4)")(i)) for i in range(24)]
    # a swizzled outer keeps its swizzle over the strided form
    c = compose(physical(SW128_ATOM), logical(P("(128,8):(8,1)")))
    form = decide(c)
    assert str(form) == "Sw<3,4,3> o (128,8):(1,128)"
    assert form is not None and all(form(i) == c(i) for i in range(1024))


@pytest.mark.parametrize(
    "outer, inner, condition",
    [
        (lambda: physical(P("8:1")), lambda: physical(P("8:1")), "nothing maps out of a physical space"),
        (lambda: physical(P("8:1")), lambda: logical(P("4:1")), r"bijection onto \[0,4\), not onto the 8 coordinates"),
        (lambda: logical(P("16:1")), lambda: thread_value(P("(4,2):(2,1)")), "not onto the 16 coordinates"),
        (lambda: P("8:1"), lambda: logical(P("8:1")), "compose takes typed layouts"),
        (lambda: physical(P("8:1")).restrict(None), lambda: logical(P("8:1")), "is not composable"),
        (lambda: physical(P("(2,4):(4,1)")), lambda: physical(P("(2,4):(4,1)")).restrict(None, None), "is not composable"),
    ],
)
def test_invalid_compositions_are_refused(outer: object, inner: object, condition: str) -> None:
    with pytest.raises(LayoutError, match=condition):
        compose(outer(), inner())  # type: ignore[operator]


@FAST
@given(layouts(max_leaves=3, max_extent=5, max_stride=10), layouts(max_leaves=3, max_extent=5, max_stride=10))
def test_any_untyped_or_non_bijective_inner_is_refused(outer: Layout, inner: Layout) -> None:
    try:
        o = physical(outer)
    except LayoutError:
        return
    try:
        i = logical(inner)
    except LayoutError:
        assert sorted(inner.values()) != list(range(inner.size()))
        return
    if i.size() != o.size():
        with pytest.raises(LayoutError, match="not onto the"):
            compose(o, i)
    else:
        c = compose(o, i)
        assert c.values() == [outer(inner(k)) for k in range(inner.size())]


def _all_refinements(shape: tuple[int, ...]) -> list[tuple[tuple[int, ...], ...]]:
    """Every maximal refinement of each leaf: ordered prime factorizations."""

    def primes(n: int) -> list[int]:
        out, p = [], 2
        while n > 1:
            while n % p == 0:
                out.append(p)
                n //= p
            p += 1
        return out

    per_leaf = [sorted(set(permutations(primes(n)))) or [()] for n in shape]
    return [tuple(r) for r in itertools.product(*per_leaf)]


def _strided_over(values: list[int], shape: tuple[int, ...], refinement: tuple[tuple[int, ...], ...]) -> bool:
    """Is the function (over colexicographic indices of `shape`) strided over the refinement?"""
    ext = [f for r in refinement for f in (r or (1,))]
    lay = Layout(tuple(ext))  # the refined coordinates in colexicographic order
    strides = []
    for k in range(len(ext)):
        unit = [0] * len(ext)
        unit[k] = 1 if ext[k] > 1 else 0
        strides.append(values[lay(tuple(unit))] - values[0])
    cand = Layout(tuple(ext), tuple(strides))
    return all(cand(i) + values[0] == values[i] for i in range(len(values)))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_decision_procedure(data: st.DataObject) -> None:
    n = data.draw(st.sampled_from([4, 6, 8, 12, 16, 18, 24, 30, 36, 48]))
    extents = data.draw(factorization(n))
    if len(extents) > 3:
        extents = extents[:2] + [product(tuple(extents[2:]))]
    inner = data.draw(bijections(extents=extents))
    outer = data.draw(padded_physical(data.draw(factorization(n))))
    c = compose(physical(outer), logical(inner))
    truth = [outer(inner(k)) for k in range(n)]
    assert c.values() == truth  # the composite always evaluates
    form = decide(c)
    shape = tuple(flatten(inner.shape))
    if form is None:
        # no refinement of the inner's shape makes it strided
        assert not any(_strided_over(truth, shape, r) for r in _all_refinements(shape))
        return
    assert isinstance(form, Layout)
    assert form.size() == n and form.values() == truth
    # over the inner's own coordinates too (a refined mode takes its whole coordinate)
    for k in range(n):
        assert form(idx2crd(k, inner.shape)) == c(idx2crd(k, inner.shape))
    # each leaf of the form refines the matching leaf of the inner shape
    assert [product(m) for m in _leaves_of(form.shape, inner.shape)] == list(shape)
    ours, strided = c.divmod_counts()
    assert strided is not None and strided <= ours
    assert count_divmod(index_expr(form, domain=inner.shape)) == strided


def _leaves_of(shape: object, profile: object) -> list[object]:
    if isinstance(profile, int):
        return [shape]
    assert isinstance(shape, tuple) and isinstance(profile, tuple)
    return [x for s, p in zip(shape, profile) for x in _leaves_of(s, p)]


@FAST
@given(bijections(max_leaves=3, max_extent=4), st.data())
def test_logical_through_logical_then_physical(inner: Layout, data: st.DataObject) -> None:
    n = inner.size()
    mid = data.draw(bijections(extents=data.draw(factorization(n))))
    outer = data.draw(padded_physical(data.draw(factorization(n))))
    c = compose(physical(outer), compose(logical(mid), logical(inner)))
    assert c.values() == [outer(mid(inner(k))) for k in range(n)]
    form = decide(c)
    if form is not None:
        assert form.values() == c.values()


def test_broadcast_survives_simplification() -> None:
    # 32 threads reading the same 4 values: the strided form marks its stride-0 mode broadcast
    c = compose(physical(P("(32,4):(0,1)"), broadcast=(0,)), logical(P("(4,32):(32,1)")))
    s = c.simplify()
    assert isinstance(s, TypedLayout) and str(s) == "physical (4,32):(1,0) broadcast[1]"
    # a broadcast mode with a stride aliases in the strided form too: the composite stays
    c = compose(physical(P("(2,4):(2,1)"), broadcast=(0,)), logical(P("8:1")))
    assert c.simplify() is c


# --- restrictions -------------------------------------------------------------------------


def test_restriction() -> None:
    tile = physical(P("(4,8):(8,1)"))
    row = tile.restrict(2, None)
    assert isinstance(row, Restriction) and row.shape == 8 and row.offset == 16
    assert [row(k) for k in range(8)] == [tile(2, k) for k in range(8)]
    assert row.layout() == P("8:1")
    col = tile.restrict(None, 5)
    assert col.layout() == P("4:8") and col.offset == 5
    assert [col(k) for k in range(4)] == [tile(k, 5) for k in range(4)]
    c = compose(physical(P("(6,4):(1,8)")), logical(P("(4,6):(1,4)")))
    part = c.restrict(None, 3)
    assert [part(k) for k in range(4)] == [c(k, 3) for k in range(4)] and part.layout() is None
    assert not hasattr(row, "restrict")  # a slice is final
    with pytest.raises(LayoutError, match="fixes every coordinate"):
        tile.restrict(1, 1)
    with pytest.raises(LayoutError, match="out of range"):
        tile.restrict(4, None)


def test_composite_is_a_value() -> None:
    a = compose(physical(P("(6,4):(1,8)")), logical(P("(4,6):(1,4)")))
    b = compose(physical(P("(6,4):(1,8)")), logical(P("(4,6):(1,4)")))
    assert a == b and hash(a) == hash(b) and isinstance(a, Composite) and a.space is Space.PHYSICAL
