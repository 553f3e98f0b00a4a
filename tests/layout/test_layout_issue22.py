"""Golden values for issue 22 (CuTe's answers on the inputs warpy refused or got wrong) and for the
layout rough edges of issue 20; the CLI cases run `python -m warpy.cli layout`'s entry point in this
process (`tests/warpy_in_process.py`: its exit status, stdout and stderr, without a Python start)."""

from __future__ import annotations

import enum
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from warpy.layout import (
    SW128_ATOM,
    Layout,
    LayoutError,
    Swizzle,
    SwizzledLayout,
    complement,
    composition,
    cosize,
    crd2crd,
    filter,
    flat_product,
    left_inverse,
    logical_divide,
    logical_product,
    make_layout,
    right_inverse,
    slice_and_offset,
    tiled_product,
    zipped_divide,
    zipped_product,
)
import warpy.layout.core as core
from warpy.layout.core import _validated
from warpy.layout.lang import evaluate, show, table

P = Layout.parse
ROOT = Path(__file__).resolve().parents[2]


def values(x: Layout) -> list[int]:
    return [x(i) for i in range(x.size())]


# --- 1, 2, 3: composition ------------------------------------------------------------------


@pytest.mark.parametrize(
    "a, b, expected",
    [
        # 1: a prefix that ends inside a mode
        ("(3,2):(2,1)", "2:1", "2:2"),
        ("(4,6,8,10):(2,3,5,7)", "6:12", "(2,3):(9,5)"),
        ("(48,24,5):(1,128,3072)", "32:1", "32:1"),
        ("(6,6):(6,1)", "(2,2):(2,6)", "(2,2):(12,1)"),
        # 2: B's mode ends inside one A mode, whatever the stride
        ("(4,2):(2,1)", "2:3", "2:6"),
        ("(8,8):(8,1)", "3:3", "3:24"),
        # CuTe's own weaker rule is wrong here; the strided answer is (3,2):(24,9)
        ("(8,8):(8,1)", "6:3", "(3,2):(24,9)"),
        # 3: large overlapping inner modes, decided symbolically
        ("(8,20000):(1,100)", "(2,2,20000):(1,1,8)", "(2,2,20000):(1,1,100)"),
    ],
)
def test_composition_cute_answers(a: str, b: str, expected: str) -> None:
    la, lb = P(a), P(b)
    r = composition(la, lb)
    assert str(r) == expected
    n = lb.size()
    for i in range(0, n, max(1, n // 997)):
        assert r(i) == la(lb(i))


def test_composition_prefixes_are_all_decided() -> None:
    # every prefix k:1 of these layouts: an answer exactly when A(c), c < k, is strided
    for a in map(P, ["(3,2):(2,1)", "(48,24,5):(1,128,3072)", "(4,6,8,10):(2,3,5,7)", "(5,3,2):(3,1,40)"]):
        for k in range(1, a.size() + 1):
            try:
                r = composition(a, k)
            except LayoutError as e:
                assert "no strided answer" in str(e)
                continue
            assert values(r) == [a(i) for i in range(k)]


def test_composition_refusals_say_what_cute_does() -> None:
    with pytest.raises(LayoutError, match=r"CuTe would extend the outer's last mode.*composition\(8:1, 8:1\)"):
        composition(P("4:1"), P("8:1"))
    with pytest.raises(LayoutError, match=r"no strided answer.*carry"):
        composition(P("(4,4):(1,10)"), P("(2,2):(2,2)"))
    with pytest.raises(LayoutError, match=r"does not divide.*CuTe would read past the end.*logical_divide\(8:1, 4:1\)"):
        logical_divide(P("6:1"), 4)
    # what the message proposes does what CuTe would have done
    assert str(logical_divide(P("8:1"), 4)) == "(4,2):(1,4)"


def test_composition_with_a_swizzle() -> None:
    sw = composition(Swizzle(3, 4, 3), P("(8,8):(8,1)"))
    assert sw == SwizzledLayout(Swizzle(3, 4, 3), P("(8,8):(8,1)"))
    assert right_inverse(Swizzle(3, 4, 3)) == Swizzle(3, 4, 3) == left_inverse(Swizzle(3, 4, 3))


# --- 4: complement and what it feeds -------------------------------------------------------


def test_complement_cute_answers() -> None:
    assert str(complement(P("(4,2):(1,10)"), 14)) == "2:4"
    assert str(complement(P("(2,2):(1,3)"), 5)) == "1:0"
    assert str(complement(P("(4,6):(1,6)"), 24)) == "1:0"
    # the holes: (A, A*) is injective and reaches the cotarget
    a, r = P("(4,2):(1,10)"), complement(P("(4,2):(1,10)"), 40)
    joined = make_layout(a, r)
    assert len(set(values(joined))) == joined.size() and joined.cosize() >= 40


def test_left_inverse_cute_answers() -> None:
    assert str(left_inverse(P("(2,2):(1,3)"))) == "(3,2):(1,2)"
    for text in ["(4,2):(1,5)", "(128,160):(65536,1)", "(128,3,160):(65536,512,1)", "(2,2):(1,3)"]:
        a = P(text)
        li = left_inverse(a)
        step = max(1, a.size() // 4093)
        assert all(li(a(i)) == i for i in range(0, a.size(), step))
    assert str(left_inverse(P("(4,2):(1,5)"))) == "(5,2):(1,4)"
    assert str(left_inverse(P("(128,160):(65536,1)"))) == "(65536,128):(128,1)"


def test_products_of_holey_layouts() -> None:
    a = P("(2,2):(1,3)")
    p = logical_product(a, 3)
    assert p[0] == a and len(set(values(p))) == p.size()
    assert values(zipped_product(a, 3)) == values(tiled_product(a, 3)) == values(flat_product(a, 3)) == values(p)


# --- 5: right inverse of negative strides --------------------------------------------------


def test_right_inverse_ignores_negative_strides() -> None:
    assert str(right_inverse(P("2:-1"))) == "1:0"
    r = right_inverse(P("(2,4):(-1,1)"))
    a = P("(2,4):(-1,1)")
    assert all(0 <= r(i) < a.size() and a(r(i)) == i for i in range(r.size()))


# --- 6: None in a by-mode tiler ------------------------------------------------------------


def test_none_in_a_zipped_tiler() -> None:
    # as pycute: the untouched mode is a tile of 1:0 and a whole rest
    assert str(zipped_divide(P("(4,6):(1,4)"), (2, None))) == "((2,1),(2,6)):((1,0),(2,4))"
    # a mode with two sub-modes is not split
    assert str(zipped_divide(P("(4,(2,3)):(1,(4,8))"), (2, None))) == "((2,1),(2,(2,3))):((1,0),(2,(4,8)))"
    assert show(evaluate("zipped_divide((4,6):(1,4), <2,_>)")) == "((2,1),(2,6)):((1,0),(2,4))"


# --- 7: smaller ----------------------------------------------------------------------------


def test_slicing_with_none() -> None:
    a = Layout((2, 3))
    assert a(None, 1) == Layout((2,), (1,))
    assert a(1, None) == Layout((3,), (2,))
    s, off = slice_and_offset((1, None), a)
    assert s == Layout((3,), (2,)) and off == 1
    assert all(a(1, j) == off + s(j) for j in range(3))
    b = P("((2,3),4):((1,2),6)")
    s, off = slice_and_offset(((None, 2), None), b)
    assert str(s) == "(2,4):(1,6)" and off == 4


def test_parse_one_tuples_and_deep_nesting() -> None:
    assert Layout.parse("(4,):(1,)") == Layout((4,), (1,))
    assert str(Layout.parse("(4,):(1,)")) == "(4):(1)"
    assert Layout.parse("(4):(1)") == Layout((4,), (1,))
    deep = "(" * 2000 + "1" + ")" * 2000
    with pytest.raises(LayoutError, match="deeper than"):
        Layout.parse(deep)
    with pytest.raises(LayoutError, match="deeper than"):
        evaluate(deep)


def test_cosize_is_cutes() -> None:
    assert cosize(P("20:-2")) == P("20:-2")(19) + 1 == -37
    assert cosize(P("(2,2):(1,-1)")) == 1
    assert cosize(P("(6,2):(8,2)")) == 43


def test_filter_and_crd2crd() -> None:
    assert str(filter(P("(2,3,4):(1,0,2)"))) == "8:1"
    assert str(filter(P("(3,4):(0,0)"))) == "1:0"
    assert str(filter(P("(2,(3,4)):(0,(1,0))"), (1, 1))) == "(1,3):(0,1)"
    assert crd2crd((1, 2), (4, 3)) == (1, 2)
    assert crd2crd(7, (2, (2, 2))) == (1, (1, 1))
    assert crd2crd((1, 2), 12, (4, 3)) == 9
    with pytest.raises(LayoutError, match="needs its source shape"):
        crd2crd((1, 2), 12)


def test_make_layout_of_a_shape() -> None:
    assert make_layout((4, 8)) == Layout((4, 8), (1, 4))
    assert make_layout((4, 8), (8, 1)) == Layout((4, 8), (8, 1))
    assert make_layout(P("4:1"), P("3:4")) == Layout((4, 3), (1, 4))


# --- issue 20: the expression language and the CLI ----------------------------------------


def test_swizzle_notation_reads_back() -> None:
    for obj in [SW128_ATOM, SwizzledLayout(Swizzle(2, 4, 3), P("(8,64):(64,1)"), 1024)]:
        assert evaluate(str(obj)) == obj
    # CuTe's print of a composed layout, with the offset between
    assert evaluate("Sw<3,4,3> o 0 o (8,128):(128,1)") == SW128_ATOM
    assert evaluate("Sw<3,4,3> o (8,8):(8,1)") == composition(Swizzle(3, 4, 3), P("(8,8):(8,1)"))
    assert evaluate("(6,2):(8,2) o (4,3):(3,1)") == composition(P("(6,2):(8,2)"), P("(4,3):(3,1)"))


@pytest.mark.parametrize(
    "expr, message",
    [
        ("size(Swizzle(3,4,3))", "bad arguments"),
        ("Sw<3,4> o 4:1", "three ints"),
        ("composition(4:1, Swizzle(3,4,3))", "not a layout"),
        ("+4 (8,8):(8,1)", "offset"),
        ("right_inverse(Sw<3,4,3> o (8,8):(8,1))", "takes a layout or a swizzle"),
    ],
)
def test_bad_swizzle_input_is_one_line(expr: str, message: str) -> None:
    with pytest.raises(LayoutError, match=message) as e:
        evaluate(expr)
    assert "\n" not in str(e.value)


def test_table_is_bounded() -> None:
    t = table(P("(1000000,1000000):(1,1000000)"))
    lines = t.splitlines()
    assert len(lines) <= 40 and lines[-1] == "(elided: 1000000 rows x 1000000 columns, the first 32 x 16 shown)"
    assert lines[2].split()[:4] == ["0", "|", "0", "1000000"]
    small = table(P("(4,3):(3,1)"))
    assert "elided" not in small


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("WARPY_TRACEBACK", None)
    from warpy_in_process import run_cli

    return run_cli("layout", *args, cwd=ROOT, env=env, timeout=60)


@pytest.mark.parametrize(
    "expr, out",
    [
        ("make_layout((4,8))", "(4,8):(1,4)"),
        ("composition(Swizzle(3,4,3), (8,8):(8,1))", "Sw<3,4,3> o (8,8):(8,1)"),
        ("right_inverse(Swizzle(3,4,3))", "Sw<3,4,3>"),
        ("Sw<3,4,3> o +1024(8,128):(128,1)", "Sw<3,4,3> o +1024(8,128):(128,1)"),
        ("composition((3,2):(2,1), 2:1)", "2:2"),
        ("left_inverse((2,2):(1,3))", "(3,2):(1,2)"),
    ],
)
def test_cli_cute_expressions(expr: str, out: str) -> None:
    r = cli(expr)
    assert r.returncode == 0 and r.stdout == out + "\n", r.stderr
    # and what it prints reads back
    again = cli(r.stdout.strip())
    assert again.returncode == 0 and again.stdout == r.stdout


def test_cli_deep_nesting_is_one_line() -> None:
    r = cli("(" * 2000 + "1" + ")" * 2000)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: ") and "deeper than" in r.stderr
    assert "internal error" not in r.stderr and len(r.stderr) < 300


def test_cli_huge_table_is_bounded() -> None:
    r = cli("(1000000,1000000):(1,1000000)", "--table")  # (10^12 cells: only an elided table can finish)
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[0] == "(1000000,1000000):(1,1000000)" and len(lines) < 45
    assert lines[-1].startswith("(elided: 1000000 rows x 1000000 columns")


def test_cli_bad_arguments_are_one_line() -> None:
    for expr in ["size(Swizzle(3,4,3))", "complement(Swizzle(3,4,3))", "make_layout(4:1, (2,2))"]:
        r = cli(expr)
        assert r.returncode == 2 and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, (expr, r.stderr)


# --- 8: construction's fast paths refuse and normalize exactly what the general path does ---------

class _E(enum.IntEnum):
    TWO = 2


# a leaf: an int (0 and negatives included), or what must be refused or normalized
_LEAVES = st.one_of(
    st.integers(-3, 9), st.sampled_from([True, False, 2.0, _E.TWO, "2", None]), st.tuples(st.integers(1, 4))
)


def _built(shape: object, stride: object) -> tuple[object, ...]:
    try:
        lay = Layout(shape, stride)  # type: ignore[arg-type]
    except LayoutError as e:
        return ("refused", str(e))
    return ("built", lay.shape, lay.stride, [type(x) for x in _leaves(lay.shape) + _leaves(lay.stride)])


def _copy(t: object) -> object:
    """A new tuple tree equal to t (lists stay lists): passed straight to Layout, it is held by
    nothing else, so the constructor's fresh path (no identity look-up, no entry) checks it."""
    return tuple(_copy(x) for x in t) if isinstance(t, tuple) else t


def _built_fresh(shape: object, stride: object) -> tuple[object, ...]:
    kept = len(core._SEEN)
    try:
        lay = Layout(_copy(shape), _copy(stride))  # type: ignore[arg-type]
    except LayoutError as e:
        return ("refused", str(e))
    if sys.implementation.name == "cpython" and isinstance(shape, tuple) and stride is not None:
        assert len(core._SEEN) <= kept, "a fresh shape was kept"
    return ("built", lay.shape, lay.stride, [type(x) for x in _leaves(lay.shape) + _leaves(lay.stride)])


def _reference(shape: object, stride: object) -> tuple[object, ...]:
    try:
        sh, st_ = _validated(shape, stride)
    except LayoutError as e:
        return ("refused", str(e))
    return ("built", sh, st_, [type(x) for x in _leaves(sh) + _leaves(st_)])


def _leaves(t: object) -> list[object]:
    return [y for x in t for y in _leaves(x)] if isinstance(t, tuple) else [t]


@given(
    st.integers(0, 6).flatmap(lambda n: st.tuples(st.lists(_LEAVES, min_size=n, max_size=n), st.lists(_LEAVES, min_size=n, max_size=n))),
    st.sampled_from(["tuples", "stride-short", "lists", "int", "default"]),
)
def test_construction_fast_paths_agree_with_the_general_path(pair: tuple[list[object], list[object]], form: str) -> None:
    """Flat ranks 1-3 are checked in line and a pair seen before comes from a cache: every input
    (bools, floats, IntEnum, extents 0 or negative, short strides, lists, ints) gets the same layout
    (leaves plain ints) or the same refusal as the general validation, new and a second time."""
    shape_l, stride_l = pair
    shape: object
    stride: object
    if form == "tuples":
        shape, stride = tuple(shape_l), tuple(stride_l)
    elif form == "stride-short":
        shape, stride = tuple(shape_l), tuple(stride_l[:-1])
    elif form == "lists":
        shape, stride = shape_l, stride_l
    elif form == "int":
        shape, stride = (shape_l[0], stride_l[0]) if shape_l else (4, 1)
    else:
        shape, stride = tuple(shape_l), None
    expected = _reference(shape, stride)
    assert _built(shape, stride) == expected
    assert _built(shape, stride) == expected  # the second time: from the cache where there is one


def test_construction_literal_cases() -> None:
    assert Layout((4, 8), (8, 1)).shape == (4, 8)
    assert Layout((4, 8, 2), (8, 1, 32)).stride == (8, 1, 32)
    assert Layout((5,), (3,)).shape == (5,)
    assert Layout(7, 3) == P("7:3")
    # a pair equal to one built before (equal hashes) but of a float or a bool is still refused
    cases: list[tuple[tuple[object, object], tuple[object, object]]] = [
        ((((2, 3), 4), ((1, 2), 6)), (((2, 3), 4), ((1, 2), 6.0))),
        ((((1, 3), 4), ((1, 2), 6)), (((True, 3), 4), ((1, 2), 6))),
        (((4, 8, 2, 3, 2), (1, 4, 32, 64, 192)), ((4, 8, 2, 3, 2), (1, 4, 32, 64, 192.0))),
        (((2, (2, 2)), None), ((2, (2, 2.0)), None)),
    ]
    for good, bad in cases:
        for _ in range(2):
            assert Layout(*good).shape == good[0]  # type: ignore[arg-type]
            with pytest.raises(LayoutError, match="must be an int or a nested tuple of ints"):
                Layout(*bad)  # type: ignore[arg-type]
    e = Layout((_E.TWO, 3), (1, 2))  # an int subclass: its value
    assert e.shape == (2, 3) and type(e.shape[0]) is int
    refused: list[tuple[tuple[object, object], str]] = [
        (((True, 2), (1, 2)), "must be an int or a nested tuple of ints, not True"),
        (((2, 3), (1, 2.0)), "not 2.0"),
        (((2, 0, 3), (1, 2, 2)), "has an extent 0 < 1"),
        (((2,), (1, 2)), "not congruent"),
        (((-1,), (1,)), "extent -1 < 1"),
        ((0, 1), "extent 0 < 1"),
        ((4, False), "not False"),
    ]
    for bad, message in refused:
        with pytest.raises(LayoutError, match=message):
            Layout(*bad)  # type: ignore[arg-type]


# nested pairs: a tree of (shape leaf, stride leaf) split into two congruent trees (ints, 0 and
# negatives, and what must be refused or normalized), so that the one-pass nested check, its
# recursion and the identity cache are reached; a stride of another tree is mostly not congruent
_PAIR_LEAVES = st.tuples(
    st.one_of(st.integers(-1, 6), st.sampled_from([True, 2.0, _E.TWO])),
    st.one_of(st.integers(-3, 9), st.sampled_from([False, 1.0, _E.TWO])),
)
_PAIR_TREES = st.recursive(
    _PAIR_LEAVES, lambda ch: st.lists(ch, min_size=1, max_size=3).map(tuple), max_leaves=10
)


def _split(tree: object, side: int) -> object:
    if isinstance(tree, tuple) and len(tree) == 2 and not isinstance(tree[0], tuple) and not isinstance(tree[1], tuple):
        return tree[side]  # a leaf pair
    assert isinstance(tree, tuple)
    return tuple(_split(t, side) for t in tree)


def _is_pair_leaf(tree: object) -> bool:
    return isinstance(tree, tuple) and len(tree) == 2 and not isinstance(tree[0], tuple)


@given(_PAIR_TREES, _PAIR_TREES, st.sampled_from(["tuples", "lists", "default"]))
def test_nested_construction_agrees_with_the_general_path(tree: object, other: object, form: str) -> None:
    """Nested pairs (any depth): the same layout or refusal as the general validation, new, again
    (the identity cache), and with the same shape object and another stride (of another tree, a
    default stride, or an equal stride with one bad leaf): a kept shape never vouches for a stride."""
    if _is_pair_leaf(tree):
        tree = (tree,)
    shape, stride = _split(tree, 0), _split(tree, 1)
    if form == "lists":
        shape, stride = list(shape), list(stride)  # type: ignore[call-overload]
    elif form == "default":
        stride = None
    expected = _reference(shape, stride)
    assert _built_fresh(shape, stride) == expected
    assert _built(shape, stride) == expected
    assert _built(shape, stride) == expected
    stride2 = _split(other, 1) if not _is_pair_leaf(other) else (_split(other, 1),)
    for st2 in (stride2, None, stride):
        assert _built(shape, st2) == _reference(shape, st2)
        assert _built(shape, st2) == _reference(shape, st2)
    if expected[0] == "built" and isinstance(stride, tuple):
        bad = _with_first_leaf(stride, 2.0)  # equal to a stride with a 2, a float: refused
        assert _built(shape, bad)[0] == "refused" and _built(shape, bad) == _reference(shape, bad)
    assert _built(shape, stride) == expected  # the first pair again, after the others


def _with_first_leaf(t: object, leaf: object) -> object:
    if isinstance(t, tuple):
        return (_with_first_leaf(t[0], leaf),) + t[1:]
    return leaf


def test_construction_nesting_at_the_depth_limit() -> None:
    """One-tuples nested around MAX_DEPTH: the fast check stops short of the limit and hands over
    to the general validation, which builds up to the limit and refuses past it (twice: no cache
    entry changes that)."""
    from warpy.layout.core import MAX_DEPTH

    for depth in range(MAX_DEPTH - 2, MAX_DEPTH + 3):
        shape: object = 3
        stride: object = 1
        for _ in range(depth):
            shape, stride = (shape,), (stride,)
        for _ in range(2):
            assert _built(shape, stride) == _reference(shape, stride)
            assert _built(shape, None) == _reference(shape, None)
        assert (_reference(shape, stride)[0] == "built") == (depth <= MAX_DEPTH + 1)


# --- left inverses beyond CuTe's form ------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("(2,3):(14,3)", "(2,2,2,3):(9,-7,11,-3)"),  # M(14) = 1, M(3k) = 2k
        ("(2,2):(2,3)", "(2,3):(1,1)"),
        ("(3,2):(2,5)", "(2,5):(1,1)"),
        ("(2,3):(3,2)", "(2,4):(-1,2)"),
        ("(2,3):(5,2)", "(2,5):(-3,2)"),
        ("(3,2):(3,14)", "(2,2,2,3):(2,-1,3,1)"),
        ("(2,(2,2)):(0,(2,3))", "(2,3):(2,2)"),  # a stride-0 mode: CuTe's quasi-inverse
    ],
)
def test_left_inverse_beyond_cutes_form(text: str, expected: str) -> None:
    a = P(text)
    li = left_inverse(a)
    assert str(li) == expected
    vals = values(a)
    for i, y in enumerate(vals):
        assert a(li(y)) == y  # quasi-inverse (stride-0 modes); a left inverse where a is injective
        if len(set(vals)) == len(vals):
            assert li(y) == i


def test_left_inverse_refusals_say_why() -> None:
    # no strided left inverse at all: the search is exhaustive
    with pytest.raises(
        LayoutError,
        match=r"^left_inverse\(\(2,2,2\):\(2,5,1\)\) is not defined: CuTe's form needs each sorted stride to divide "
        r"the next \(2 does not divide 5\), and no strided layout M has M\(L\(i\)\) == i for every i \(decided by an "
        r"exhaustive search over M's radix orders below cosize 9\)$",
    ):
        left_inverse(P("(2,2,2):(2,5,1)"))
    with pytest.raises(LayoutError, match=r"\(3 does not divide 2\)|\(2 does not divide 3\)"):
        left_inverse(P("(3,3):(3,2)"))
    # not injective, with the witness
    with pytest.raises(
        LayoutError,
        match=r"^left_inverse\(\(4,3\):\(2,3\)\) is not defined: indices 8 and 3 both map to 6, so the layout is not injective$",
    ):
        left_inverse(P("(4,3):(2,3)"))


def test_left_inverse_bounds_say_undecided(monkeypatch: pytest.MonkeyPatch) -> None:
    import warpy.layout.algebra as algebra

    monkeypatch.setattr(algebra, "_LI_WORK", 5)
    with pytest.raises(LayoutError, match=r"is undecided: .* stopped after 5 steps \(cosize 21, 6 points\)$"):
        left_inverse(P("(2,3):(14,3)"))
    monkeypatch.setattr(algebra, "_LI_POINTS", 5)
    with pytest.raises(LayoutError, match=r"is undecided: .* enumerates at most 5 points \(6 here\)$"):
        left_inverse(P("(2,3):(14,3)"))
    assert str(left_inverse(P("(4,2):(1,5)"))) == "(5,2):(1,4)"  # CuTe's form needs no search


@pytest.mark.parametrize(
    "shape, stride, error",
    [
        (((2, 3), 4), ((1, 2),), "not congruent"),
        (((2, 3), 4), ((1, 2), (8, 1)), "not congruent"),
        (((2, 3), (4, 5)), ((1, 2), 8), "not congruent"),
        (((2, True), 4), ((1, 2), 8), "not True"),
        (((2, 3), 4.0), ((1, 2), 8), "not 4.0"),
        (((2, 3), (4, 5)), ((1, 2), (8, 3.0)), "not 3.0"),
        (((2, 3), (4, 5)), ((1, 2.0), (8, 3)), "not 2.0"),
        (((0, 3), 4), ((1, 2), 8), "extent 0"),
        (((2, 3), (4, 0)), ((1, 2), (8, 3)), "extent 0"),
        (((2, 3), 0), ((1, 2), 8), "extent 0"),
        (((2, 3), (4, 5)), ((1, 2), (8, 24)), None),
        (((2, 3), 4), ((1, 2), -8), None),
        (((2, 3), (4, (5, 6))), ((1, 2), (8, (24, 120))), None),
    ],
)
def test_rank2_nested_construction(shape: object, stride: object, error: str | None) -> None:
    """The unrolled rank-2 nested check refuses what the general validation refuses, word for word."""
    assert _built_fresh(shape, stride) == _reference(shape, stride)  # a new pair each call: checked in line
    if error is None:
        a = Layout(shape, stride)  # type: ignore[arg-type]
        assert (a.shape, a.stride) == (shape, stride) == _validated(shape, stride)
        assert Layout(shape, stride) == a  # type: ignore[arg-type]  # seen before: the identity look-up
        return
    with pytest.raises(LayoutError, match=error) as got:
        Layout(shape, stride)  # type: ignore[arg-type]
    with pytest.raises(LayoutError) as general:
        _validated(shape, stride)
    assert str(got.value) == str(general.value)
