"""`Layout`'s constructor checks the common shapes in line (flat ranks 1-4; rank-2 pairs with a
mode of two ints, built fresh for the call; pairs seen before by identity) and leaves everything
else to `warpy.layout.core._general`. Each of those paths must build what the general validation
(`_validated`) builds, or refuse with its message, word for word: the same layout with plain-int
leaves (lists become tuples, int subclasses their value), or the same LayoutError.

Every input is built three ways: fresh (a new tuple tree passed straight to the constructor: the
unrolled checks, no cache entry), and the same objects twice (the identity look-up, and its entry).
`test_every_path_is_reached` traces the constructor on the examples below and asserts that each of
its `return`s and `_general` calls runs, so that the agreement tests reach every fast path."""

from __future__ import annotations

import enum
import inspect
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import warpy.layout.core as core
from warpy.layout import Layout, LayoutError
from warpy.layout.core import _validated


class _E(enum.IntEnum):
    TWO = 2


class _MyInt(int):
    pass


def _leaves(t: object) -> list[object]:
    return [y for x in t for y in _leaves(x)] if isinstance(t, (tuple, list)) else [t]


def _outcome(make: Any) -> tuple[object, ...]:
    try:
        lay = make()
    except LayoutError as e:
        return ("refused", str(e))
    return ("built", lay.shape, lay.stride, [type(x) for x in _leaves(lay.shape) + _leaves(lay.stride)])


def _reference(shape: object, stride: object) -> tuple[object, ...]:
    return _outcome(lambda: _Validated(*_validated(shape, stride)))


class _Validated:
    def __init__(self, shape: object, stride: object) -> None:
        self.shape, self.stride = shape, stride


def _copy(t: object) -> object:
    """A new tree equal to t (lists stay lists): passed straight to Layout it is held by nothing
    else, so the constructor takes its fresh path."""
    if isinstance(t, tuple):
        return tuple(_copy(x) for x in t)
    if isinstance(t, list):
        return [_copy(x) for x in t]
    return t


def _check(shape: object, stride: object) -> None:
    expected = _reference(shape, stride)
    kept = len(core._SEEN)
    assert _outcome(lambda: Layout(_copy(shape), _copy(stride))) == expected  # type: ignore[arg-type]
    if sys.implementation.name == "cpython" and isinstance(shape, tuple) and shape != () and stride is not None:
        assert len(core._SEEN) <= kept, "a fresh shape was kept"  # (CPython has one empty tuple: never fresh)
    for _ in range(2):  # the same objects: looked up, then found
        assert _outcome(lambda: Layout(shape, stride)) == expected  # type: ignore[arg-type]


# one input of each path, and of each way out of it (refused or normalized)
EXAMPLES: list[tuple[object, object]] = [
    ((4, 8), (8, 1)),
    ((4, 8, 2), (8, 1, 32)),
    ((4, 8, 2, 3), (1, 4, 32, 64)),
    ((5,), (3,)),
    (7, 3),
    ((4, 8), None),
    ((2, (3, 4)), (1, (2, 6))),
    (((2, 3), 4), ((1, 2), 6)),
    (((2, 3), (4, 5)), ((1, 2), (8, 24))),
    ((2, 2, 3, 4, 5), (1, 2, 3, 4, 5)),
    ((((2, 3), 2), 8), (((1, 2), 4), 16)),
    (((2, 3, 4), 5), ((1, 2, 6), 24)),
    ((), ()),
    # refused
    ((4, 0), (8, 1)),
    ((4, True), (8, 1)),
    ((4, 8), (8, 1.0)),
    ((4, 8), (8, 1, 2)),
    ((4, 8, 0), (8, 1, 2)),
    ((4, 8, 2, -1), (8, 1, 2, 3)),
    ((0,), (1,)),
    ((2, (3, 0)), (1, (2, 6))),
    ((2, (3, 4)), (1, (2, 6, 7))),
    ((2, (3, 4)), (1, 6)),
    ((2, (3, False)), (1, (2, 6))),
    (((2, 3), 4), ((1, 2, 5), 6)),
    (((2, 3), 4), (1, 6)),
    (((2, 3), 4), ((1, 2), (6, 7))),
    (((2, 3), (4, 5)), ((1, 2), (6, 7, 8))),
    (((2, 3), (4, 5)), ((1, 2), 6)),
    (((2, 3), (4, 5.0)), ((1, 2), (8, 24))),
    (((2, 3), 0), ((1, 2), 6)),
    ((), (1,)),
    # normalized
    ((4, _E.TWO), (8, 1)),
    ((2, (3, 4)), (1, [2, 6])),
    (((2, 3), 4), ([1, 2], 6)),
    (((2, _MyInt(3)), 4), ((1, 2), 6)),
    ([4, 8], (8, 1)),
]




def _flat_with_one_leaf(n: int, where: int, leaf: object) -> tuple[object, object]:
    """A flat rank-n pair with `leaf` at position `where` of the shape (where < n) or the stride."""
    shape: list[object] = [2 + i for i in range(n)]
    stride: list[object] = [3 * i + 1 for i in range(n)]
    (shape if where < n else stride)[where % n] = leaf
    return tuple(shape), tuple(stride)


# each leaf of each flat path, in the shape and in the stride: each way a leaf can be wrong
EXAMPLES += [
    _flat_with_one_leaf(n, where, leaf)
    for n in (1, 2, 3, 4)
    for where in range(2 * n)
    for leaf in (2.0, True, _E.TWO, 0, -3)
]


@pytest.mark.parametrize("shape, stride", EXAMPLES)
def test_construction_paths_agree_with_the_general_validation(shape: object, stride: object) -> None:
    _check(shape, stride)


def test_every_path_is_reached() -> None:
    """Each `return` of `Layout.__init__`, and each call of `_general`, runs for some example."""
    code = Layout.__init__.__code__
    hit: set[int] = set()

    def tracer(frame: Any, event: str, arg: object) -> Any:
        if frame.f_code is code:
            hit.add(frame.f_lineno)
            return tracer
        return None

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        for shape, stride in EXAMPLES:
            for _ in range(2):
                _outcome(lambda: Layout(_copy(shape), _copy(stride)))  # type: ignore[arg-type]
                _outcome(lambda: Layout(shape, stride))  # type: ignore[arg-type]
    finally:
        sys.settrace(old)
    lines, first = inspect.getsourcelines(Layout.__init__)
    wanted = {first + i for i, text in enumerate(lines) if text.strip() == "return" or text.strip().startswith("_general(")}
    assert len(wanted) >= 12
    missed = sorted(wanted - hit)
    assert not missed, f"lines of Layout.__init__ no example reaches: {missed}"


# --- random inputs: rank-2 (and other) pairs of modes that are ints, pairs, triples or lists -----

_LEAF = st.one_of(
    st.integers(-2, 9),
    st.sampled_from([True, False, 2.0, _E.TWO, _MyInt(3), "2", None]),
)
_GOOD_LEAF = st.integers(1, 9)


def _mode(leaf: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.one_of(
        leaf,
        st.tuples(leaf, leaf),
        st.lists(leaf, min_size=1, max_size=3).map(tuple),
        st.lists(leaf, min_size=2, max_size=2),
        st.tuples(st.tuples(leaf, leaf), leaf),
    )


@st.composite
def _pairs(draw: st.DrawFn) -> tuple[object, object]:
    """A shape and a stride: mostly congruent (the stride a copy of the shape's tree with other
    leaves, sometimes one of them bad), sometimes of another tree; mostly good leaves."""
    leaf = draw(st.sampled_from([_GOOD_LEAF, _GOOD_LEAF, _LEAF]))
    n = draw(st.sampled_from([2, 2, 2, 1, 3, 4, 5]))
    shape = tuple(draw(_mode(leaf)) for _ in range(n))
    if draw(st.integers(0, 3)) == 0:
        stride = tuple(draw(_mode(_LEAF)) for _ in range(draw(st.integers(1, 5))))
        return shape, stride

    def restride(t: object) -> object:
        if isinstance(t, (tuple, list)):
            return type(t)(restride(x) for x in t)
        return draw(st.one_of(st.integers(-8, 64), _LEAF) if draw(st.integers(0, 9)) == 0 else st.integers(-8, 64))

    return shape, restride(shape)


@settings(max_examples=400, deadline=None)
@given(_pairs())
def test_random_pairs_agree_with_the_general_validation(pair: tuple[object, object]) -> None:
    """Random shapes and strides (valid, refused, normalized), fresh and seen again: the layout or
    the refusal of the general validation."""
    _check(*pair)
