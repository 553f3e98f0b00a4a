"""Index arithmetic rendered as Python and C text evaluates to the layout at every coordinate."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from layout_strategies import bijections, factorization, layouts, padded_physical

from warpy.layout import (
    SW64_ATOM,
    Layout,
    SwizzledLayout,
    Swizzle,
    compose,
    count_divmod,
    index_expr,
    logical,
    physical,
    swizzle_atom,
    to_c,
    to_python,
)
from warpy.layout.inttuple import flatten, idx2crd
from warpy.layout.render import Expr, variables

FAST = settings(max_examples=80, deadline=None)


def c_to_python(text: str) -> str:
    """The tiny translation the C form needs: integer division; everything else is shared."""
    assert "//" not in text
    return re.sub(r"(?<![/])/(?![/])", "//", text)


def check_everywhere(obj: object, shape: object, value: object) -> None:
    """Python and C forms, over per-leaf coordinates and over one flat index, equal `value`."""
    leaves = flatten(shape)  # type: ignore[arg-type]
    size = 1
    for s in leaves:
        size *= s
    per_leaf = index_expr(obj, domain=shape)  # type: ignore[arg-type]
    flat = index_expr(obj, domain=size, names=["i"])  # type: ignore[arg-type]
    forms = [(to_python(per_leaf), False), (c_to_python(to_c(per_leaf)), False)]
    forms += [(to_python(flat), True), (c_to_python(to_c(flat)), True)]
    for k in range(size):
        crd = flatten(idx2crd(k, shape))  # type: ignore[arg-type]
        env = {f"c{j}": c for j, c in enumerate(crd)}
        want = value(k)  # type: ignore[operator]
        for text, is_flat in forms:
            assert eval(text, {}, {"i": k} if is_flat else env) == want, text


@FAST
@given(layouts(max_leaves=4, max_extent=4, max_stride=20))
def test_layout_renders(a: Layout) -> None:
    check_everywhere(a, a.shape, a)


@FAST
@given(layouts(max_leaves=3, max_extent=4, max_stride=40), st.integers(0, 3), st.integers(0, 3), st.integers(0, 64))
def test_swizzled_layout_renders(a: Layout, b: int, m: int, offset: int) -> None:
    sw = SwizzledLayout(Swizzle(b, m, 3), a, offset)
    check_everywhere(sw, a.shape, sw)


@FAST
@given(bijections(max_leaves=3, max_extent=4), st.data())
def test_composite_renders(inner: Layout, data: st.DataObject) -> None:
    outer = data.draw(padded_physical(data.draw(factorization(inner.size()))))
    c = compose(physical(outer), logical(inner))
    check_everywhere(c, inner.shape, c)
    s = c.simplify()
    check_everywhere(s, inner.shape, c)


def test_restriction_renders() -> None:
    tile = physical(Layout((4, 8), (8, 1)))
    row = tile.restrict(2, None)
    assert to_python(row) == "16 + c0"
    assert all(eval(to_python(row), {}, {"c0": k}) == row(k) for k in range(8))


def test_golden_text() -> None:
    a = Layout.parse("((2,2),3):((24,2),8)")
    assert to_python(a) == "c0 * 24 + c1 * 2 + c2 * 8"
    assert to_python(index_expr(a, domain=12, names=["i"])) == "i % 2 * 24 + i // 2 % 2 * 2 + i // 4 * 8"
    assert to_c(index_expr(a, domain=12, names=["i"])) == "i % 2 * 24 + i / 2 % 2 * 2 + i / 4 * 8"
    assert to_c(SW64_ATOM) == "(c0 * 64 + c1) ^ (((c0 * 64 + c1) & 384) >> 3)"
    c = compose(physical(Layout((6, 4), (1, 8))), logical(Layout((4, 6), (1, 4))))
    assert to_c(c) == "(c0 + c1 * 4) % 6 + (c0 + c1 * 4) / 6 * 8"
    assert count_divmod(c) == 2
    # a negative stride renders as a parenthesised constant
    assert to_python(Layout(4, -2)) == "c0 * (-2)"


def test_expression_values() -> None:
    e = index_expr(swizzle_atom(128, 2), names=["row", "k"])
    assert isinstance(e, Expr) and variables(e) == ["row", "k"]
    # (row*64 + k) < 512: the bound lets x % 512 and x // 512 vanish
    assert count_divmod(e) == 0
