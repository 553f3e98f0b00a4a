"""Literal results of CuTe's operations (CUTLASS's 02_layout_algebra.md and the CuTe DSL notebook
cute_layout_algebra.ipynb, static-shape results), and the refusals of non-admissible input."""

from __future__ import annotations

import pytest

from warpy.layout import (
    Layout,
    LayoutError,
    blocked_product,
    coalesce,
    complement,
    composition,
    cosize,
    crd2idx,
    flat_divide,
    flat_product,
    idx2crd,
    left_inverse,
    logical_divide,
    logical_product,
    make_layout,
    raked_product,
    right_inverse,
    size,
    tiled_divide,
    tiled_product,
    zipped_divide,
    zipped_product,
)

P = Layout.parse


def test_layout_basics() -> None:
    a = Layout((6, 2), (8, 2))
    assert str(a) == "(6,2):(8,2)" and str(Layout(20, 2)) == "20:2"
    assert Layout((4, 3)) == P("(4,3):(1,4)")  # CuTe's default: column-major
    assert a(7) == a((1, 1)) == a(1, 1) == 10
    assert size(a) == 12 and cosize(a) == 43 and size((2, (3, 4))) == 24
    assert crd2idx((1, 1), a.shape, a.stride) == 10 and crd2idx((1, 1), a) == 10
    assert crd2idx((1, 2), (4, 3)) == 9
    assert idx2crd(7, (6, 2)) == (1, 1) and idx2crd(9, (4, 3)) == (1, 2)
    assert idx2crd(7, (2, (2, 2))) == (1, (1, 1))
    assert idx2crd(10, (6, 2), (8, 2)) == (1, 5 % 2)


@pytest.mark.parametrize(
    "layout, expected",
    [
        ("(2,(1,6)):(1,(6,2))", "12:1"),
        ("((2,(3,4)),(3,2),1):((4,(8,24)),(2,6),12)", "(24,6):(4,2)"),
        ("(2,4):(1,2)", "8:1"),
        ("(1,1):(3,5)", "1:0"),
        ("(4,1,2):(2,7,8)", "8:2"),
        ("(2,2):(0,0)", "4:0"),
    ],
)
def test_coalesce(layout: str, expected: str) -> None:
    assert str(coalesce(P(layout))) == expected


def test_coalesce_by_mode() -> None:
    assert str(coalesce(P("(2,(1,6)):(1,(6,2))"), (1, 1))) == "(2,6):(1,2)"


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ("(6,2):(8,2)", "(4,3):(3,1)", "((2,2),3):((24,2),8)"),
        ("(6,2):(8,2)", "4:3", "(2,2):(24,2)"),
        ("(6,2):(8,2)", "3:1", "3:8"),
        ("20:2", "(5,4):(4,1)", "(5,4):(8,2)"),
        ("(10,2):(16,4)", "(5,4):(1,5)", "(5,(2,2)):(16,(80,4))"),
        # the doc's (3,6,2,8):(w,x,y,z) o 16:9 = (1,2,2,4):(9w,3x,y,z), with w,x,y,z = 1,100,1000,10000
        ("(3,6,2,8):(1,100,1000,10000)", "16:9", "(2,2,4):(300,1000,10000)"),
        ("(12,(4,8)):(59,(13,1))", "3:1", "3:59"),
        ("128:1", "6:12", "6:12"),  # a tiler that is not dense
        ("(4,4):(1,4)", "4:0", "4:0"),
    ],
)
def test_composition(a: str, b: str, expected: str) -> None:
    assert str(composition(P(a), P(b))) == expected


def test_composition_by_mode() -> None:
    a = P("(12,(4,8)):(59,(13,1))")
    assert str(composition(a, (P("3:4"), P("8:2")))) == "(3,(2,4)):(236,(26,1))"
    assert str(composition(a, (3, 8))) == "(3,(4,2)):(59,(13,1))"
    assert composition(a, (None, 8)) == make_layout(a[0], composition(a[1], 8))


@pytest.mark.parametrize(
    "a, m, expected",
    [
        ("4:1", 24, "6:4"),
        ("6:4", 24, "4:1"),
        ("(4,6):(1,4)", 24, "1:0"),
        ("4:2", 24, "(2,3):(1,8)"),
        ("(2,4):(1,6)", 24, "3:2"),
        ("(2,2):(1,6)", 24, "(3,2):(2,12)"),
        ("(2,2):(4,1)", 24, "(2,3):(2,8)"),
    ],
)
def test_complement(a: str, m: int, expected: str) -> None:
    assert str(complement(P(a), m)) == expected


def test_complement_default_cotarget_is_cosize() -> None:
    assert complement(P("4:2")) == complement(P("4:2"), 7) == P("2:1")


def test_divides() -> None:
    assert str(logical_divide(P("(4,2,3):(2,1,8)"), P("4:2"))) == "((2,2),(2,3)):((4,1),(2,8))"
    a = P("(9,(4,8)):(59,(13,1))")
    tiler = (P("3:3"), P("(2,4):(1,8)"))
    assert str(logical_divide(a, tiler)) == "((3,3),((2,4),(2,2))):((177,59),((13,2),(26,1)))"
    assert str(zipped_divide(a, tiler)) == "((3,(2,4)),(3,(2,2))):((177,(13,2)),(59,(26,1)))"
    assert str(tiled_divide(a, tiler)) == "((3,(2,4)),3,(2,2)):((177,(13,2)),59,(26,1))"
    assert str(flat_divide(a, tiler)) == "(3,(2,4),3,(2,2)):(177,(13,2),59,(26,1))"
    # the tile of a zipped divide is the composition
    assert str(zipped_divide(a, tiler)[0]) == "(3,(2,4)):(177,(13,2))" == str(composition(a, tiler))
    # an int tiler is n:1
    assert logical_divide(P("24:1"), 4) == logical_divide(P("24:1"), P("4:1")) == P("(4,6):(1,4)")


def test_products() -> None:
    assert str(logical_product(P("(2,2):(4,1)"), P("6:1"))) == "((2,2),(2,3)):((4,1),(2,8))"
    # an int tiler is n:1 (pycute gets this one wrong)
    assert str(logical_product(P("(2,2):(4,1)"), 6)) == "((2,2),(2,3)):((4,1),(2,8))"
    assert str(logical_product(P("(2,2):(4,1)"), P("(4,2):(2,1)"))) == "((2,2),(4,2)):((4,1),(8,2))"
    a, t = P("(2,5):(5,1)"), P("(3,4):(1,3)")
    assert str(blocked_product(a, t)) == "((2,3),(5,4)):((5,10),(1,30))"
    assert str(raked_product(a, t)) == "((3,2),(4,5)):((10,5),(30,1))"
    assert str(zipped_product(a, t)) == "((2,5),(3,4)):((5,1),(10,30))"
    assert str(tiled_product(a, t)) == "((2,5),3,4):((5,1),10,30)"
    assert str(flat_product(a, t)) == "(2,5,3,4):(5,1,10,30)"
    assert str(blocked_product(P("4:1"), P("3:1"))) == "((4,3)):((1,4))"
    assert str(blocked_product(P("(2,2):(1,2)"), P("3:1"))) == "((2,3),(2,1)):((1,4),(2,0))"


def test_inverses() -> None:
    assert str(right_inverse(P("(4,8):(8,1)"))) == "(8,4):(4,1)"
    assert str(right_inverse(P("(2,4):(1,2)"))) == "8:1"
    assert str(right_inverse(P("(4,8):(1,4)"))) == "32:1"
    assert str(right_inverse(P("(4,8):(1,5)"))) == "4:1"
    assert str(right_inverse(P("4:2"))) == "1:0"
    assert str(right_inverse(P("(4,2):(1,8)"))) == "4:1"
    assert str(right_inverse(P("((2,2),3):((6,1),2)"))) == "(6,2):(2,1)"
    assert str(left_inverse(P("4:2"))) == "(2,4):(0,1)"  # CuTe's: the gap mode below stride 2 has stride 0
    assert str(left_inverse(P("(4,8):(8,1)"))) == "(8,4):(4,1)"


@pytest.mark.parametrize(
    "call, condition",
    [
        (lambda: composition(P("4:1"), P("8:1")), "runs past the outer layout"),
        (lambda: composition(P("(2,3):(1,2)"), P("(2,2):(3,3)")), "runs past the outer layout"),
        (lambda: composition(P("8:1"), P("2:-1")), "runs past the outer layout"),
        (lambda: composition(P("(3,4):(1,10)"), P("4:2")), "no strided answer"),
        (lambda: composition(P("(4,3):(1,100)"), P("6:1")), "the 6 values left are not a multiple of 4"),
        (lambda: composition(P("(8,8):(8,1)"), P("6:5")), "no strided answer"),
        (lambda: composition(P("(4,4):(1,10)"), P("(2,2):(2,2)")), "carry"),
        (lambda: composition(P("(4,4):(1,4)"), (2, 2, 2)), "more than the 2"),
        (lambda: complement(P("(4,6):(1,2)"), 24), "interleave or alias"),
        (lambda: complement(P("(2,2):(1,1)"), 8), "interleave or alias"),
        (lambda: complement(P("4:-1"), 8), "negative"),
        (lambda: logical_divide(P("2:1"), 32), "tile is larger than the layout"),
        (lambda: logical_divide(P("6:1"), 4), "does not divide the layout"),
        (lambda: logical_divide(P("24:1"), P("(2,2):(1,1)")), "interleave or alias"),
        (lambda: logical_product(P("(2,2):(1,1)"), 3), "interleave or alias"),
        (lambda: left_inverse(P("(2,2):(1,1)")), "not injective"),
        (lambda: left_inverse(P("(2,2,2):(2,5,1)")), "no strided layout M has M"),
        (lambda: Layout((2, 3), (1,)), "not congruent"),
        (lambda: Layout((0, 3)), "extent 0"),
        (lambda: P("(4,3):(3,1)")(12), "out of range"),
        (lambda: P("(4,3):(3,1)")((4, 0)), "out of range"),
        (lambda: P("(4,3"), "unbalanced"),
    ],
)
def test_refusals(call: object, condition: str) -> None:
    with pytest.raises(LayoutError, match=condition):
        call()  # type: ignore[operator]
