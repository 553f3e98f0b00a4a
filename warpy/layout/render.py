"""Index arithmetic as an expression, rendered as Python or C text for other code generators.

`index_expr(obj)` builds the expression of a layout (a `Layout`, a `SwizzledLayout`, or a typed
layout, composite or restriction of `warpy.layout.typed`) over input variables, one per leaf of a
*domain* profile: by default the object's own shape (one variable per coordinate); an int domain
means one flat index; any profile the shape refines works (a refined mode's coordinate is split
by division and modulo, as `crd2idx` does). The expression keeps an exclusive upper bound on each
non-negative subterm, so that `x % n` with `x < n` and `x // n` with `x < n` vanish.

`to_python(e)` and `to_c(e)` print it; `count_divmod(e)` counts its distinct divisions and moduli
(the cost the decision procedure of typed composition minimises).
"""

from __future__ import annotations

from typing import Protocol, Sequence, Union

import attrs

from warpy.layout.algebra import coalesce
from warpy.layout.core import Layout, LayoutError
from warpy.layout.inttuple import IntTuple, flatten, product, to_str
from warpy.layout.swizzle import Swizzle, SwizzledLayout


@attrs.frozen
class Expr:
    """A node: `op` is "var", "const", or a binary operator (+ * // % ^ & >> <<)."""

    op: str
    args: tuple["Expr", ...] = ()
    name: str = ""
    value: int = 0
    bound: int | None = None  # exclusive upper bound when the value is known to be >= 0

    def __str__(self) -> str:
        return to_python(self)


def var(name: str, extent: int | None = None) -> Expr:
    return Expr("var", name=name, bound=extent)


def const(v: int) -> Expr:
    return Expr("const", value=v, bound=v + 1 if v >= 0 else None)


def _is_const(e: Expr, v: int | None = None) -> bool:
    return e.op == "const" and (v is None or e.value == v)


def add(a: Expr, b: Expr) -> Expr:
    if _is_const(a, 0):
        return b
    if _is_const(b, 0):
        return a
    if _is_const(a) and _is_const(b):
        return const(a.value + b.value)
    bound = a.bound + b.bound - 1 if a.bound is not None and b.bound is not None else None
    return Expr("+", (a, b), bound=bound)


def mul(a: Expr, k: int) -> Expr:
    if k == 0 or _is_const(a, 0):
        return const(0)
    if k == 1:
        return a
    if _is_const(a):
        return const(a.value * k)
    if a.op == "*" and _is_const(a.args[1]):
        return mul(a.args[0], a.args[1].value * k)
    bound = (a.bound - 1) * k + 1 if a.bound is not None and k > 0 else None
    return Expr("*", (a, const(k)), bound=bound)


def _terms(e: Expr) -> list[Expr]:
    return _terms(e.args[0]) + _terms(e.args[1]) if e.op == "+" else [e]


def _coefficient(e: Expr) -> int:
    if e.op == "*" and _is_const(e.args[1]):
        return e.args[1].value
    if _is_const(e):
        return e.value
    return 1


def _sum(terms: list[Expr]) -> Expr:
    total = const(0)
    for t in terms:
        total = add(total, t)
    return total


def _split_multiples(a: Expr, k: int) -> tuple[list[Expr], list[Expr]]:
    """The terms of a non-negative sum whose coefficient is a multiple of k, and the others."""
    terms = _terms(a)
    if any(t.bound is None for t in terms):
        return [], terms
    whole = [t for t in terms if _coefficient(t) % k == 0]
    return whole, [t for t in terms if _coefficient(t) % k != 0]


def div(a: Expr, k: int) -> Expr:
    """Floor division of a non-negative term by a positive constant."""
    if k <= 0:
        raise LayoutError(f"division by {k} in an index expression")
    if k == 1:
        return a
    if a.op == "+":
        # (low + k*m) // k == m when 0 <= low < k
        whole, low = _split_multiples(a, k)
        if whole and _sum(low).bound is not None and (_sum(low).bound or 0) <= k:
            return _sum([div(t, k) for t in whole])
    if _is_const(a):
        return const(a.value // k)
    if a.bound is not None and a.bound <= k:
        return const(0)
    if a.op == "*" and _is_const(a.args[1]) and a.args[1].value % k == 0:
        return mul(a.args[0], a.args[1].value // k)
    if a.op == "//" and _is_const(a.args[1]):
        return div(a.args[0], a.args[1].value * k)
    bound = (a.bound - 1) // k + 1 if a.bound is not None else None
    return Expr("//", (a, const(k)), bound=bound)


def mod(a: Expr, k: int) -> Expr:
    """Remainder of a non-negative term by a positive constant."""
    if k <= 0:
        raise LayoutError(f"modulo by {k} in an index expression")
    if k == 1:
        return const(0)
    if a.op == "+":
        # (low + k*m) % k == low % k
        whole, low = _split_multiples(a, k)
        if whole:
            return mod(_sum(low), k)
    if _is_const(a):
        return const(a.value % k)
    if a.bound is not None and a.bound <= k:
        return a
    if a.op == "*" and _is_const(a.args[1]) and a.args[1].value % k == 0:
        return const(0)
    if a.op == "%" and _is_const(a.args[1]) and a.args[1].value % k == 0:
        return mod(a.args[0], k)
    bound = min(k, a.bound) if a.bound is not None else k
    return Expr("%", (a, const(k)), bound=bound)


def _binop(op: str, a: Expr, b: Expr, bound: int | None) -> Expr:
    return Expr(op, (a, b), bound=bound)


def swizzle_expr(sw: Swizzle, x: Expr) -> Expr:
    """`x ^ ((x & src_mask) >> S)` (or `<< -S`)."""
    if sw.bits == 0:
        return x
    picked = _binop("&", x, const(sw.source_mask), sw.source_mask + 1)
    if sw.shift >= 0:
        moved = _binop(">>", picked, const(sw.shift), (sw.source_mask >> sw.shift) + 1)
    else:
        moved = _binop("<<", picked, const(-sw.shift), (sw.source_mask << -sw.shift) + 1)
    bound = None
    if x.bound is not None:
        bound = 1 << max(x.bound - 1, moved.bound or 0).bit_length()
    return _binop("^", x, moved, bound)


# --- coordinates --------------------------------------------------------------------------

CoordExpr = Union[Expr, tuple["CoordExpr", ...]]


def index_to_coord(x: Expr, shape: IntTuple) -> CoordExpr:
    """The natural (colexicographic) coordinate of a flat index term in `shape`."""
    if isinstance(shape, int):
        return x
    out: list[CoordExpr] = []
    below = 1
    for k, s in enumerate(shape):
        n = product(s)
        digit = div(x, below)
        if k < len(shape) - 1:
            digit = mod(digit, n)
        out.append(index_to_coord(digit, s))
        below *= n
    return tuple(out)


def crd2idx_expr(crd: CoordExpr, shape: IntTuple, stride: IntTuple) -> Expr:
    """`sum(c_i * d_i)`, splitting any coordinate term given for a whole sub-shape."""
    if isinstance(crd, Expr):
        if isinstance(shape, int):
            assert isinstance(stride, int)
            return mul(crd, stride)
        crd = index_to_coord(crd, shape)
        assert not isinstance(crd, Expr)
    if isinstance(shape, int) or isinstance(stride, int):
        raise LayoutError(f"coordinate is deeper than shape {to_str(shape)}")
    if len(crd) != len(shape):
        raise LayoutError(f"coordinate of rank {len(crd)} for shape {to_str(shape)}")
    total = const(0)
    for c, s, d in zip(crd, shape, stride):
        total = add(total, crd2idx_expr(c, s, d))
    return total


class Renderable(Protocol):
    """What `index_expr` accepts besides Layout and SwizzledLayout (the typed layouts)."""

    @property
    def shape(self) -> IntTuple: ...

    def coord_expr(self, crd: CoordExpr) -> Expr: ...


Indexable = Union[Layout, SwizzledLayout, Renderable]


def coord_expr(obj: Indexable, crd: CoordExpr) -> Expr:
    """The expression of `obj` at a coordinate whose leaves are terms."""
    if isinstance(obj, (Layout, SwizzledLayout)):
        lay = obj if isinstance(obj, Layout) else obj.layout
        if isinstance(crd, Expr):
            # One flat index for the whole shape: the coalesced layout is the same function with
            # the fewest modes, so the fewest divisions and moduli.
            lay = coalesce(lay)
        linear = crd2idx_expr(crd, lay.shape, lay.stride)
        if isinstance(obj, Layout):
            return linear
        return swizzle_expr(obj.swizzle, add(const(obj.offset), linear))
    return obj.coord_expr(crd)


def _inputs(shape: IntTuple, domain: IntTuple, names: Sequence[str]) -> CoordExpr:
    """One variable per leaf of `domain`, nested as the shape needs them."""
    if product(domain) != product(shape):
        raise LayoutError(f"domain {to_str(domain)} does not have the size of shape {to_str(shape)}")
    leaves = flatten(domain)
    if len(names) != len(leaves):
        raise LayoutError(f"{len(names)} input names for a domain with {len(leaves)} coordinates")
    it = iter(zip(names, leaves))

    def go(dom: IntTuple, shp: IntTuple) -> CoordExpr:
        if isinstance(dom, int):
            name, extent = next(it)
            return var(name, extent)
        if isinstance(shp, int) or len(dom) != len(shp):
            raise LayoutError(f"shape {to_str(shape)} does not refine domain {to_str(domain)}")
        return tuple(go(d, s) for d, s in zip(dom, shp))

    return go(domain, shape)


def index_expr(obj: Indexable, domain: IntTuple | None = None, names: Sequence[str] | None = None) -> Expr:
    """The index arithmetic of `obj` over input variables, one per leaf of `domain`.

    `domain` defaults to `obj.shape`; pass an int (the size) for one flat index, or any profile the
    shape refines. `names` default to `c0, c1, ...`.
    """
    dom = obj.shape if domain is None else domain
    if names is None:
        names = [f"c{k}" for k in range(len(flatten(dom)))]
    return coord_expr(obj, _inputs(obj.shape, dom, names))


# --- text ---------------------------------------------------------------------------------

_PREC = {"^": 1, "&": 2, ">>": 3, "<<": 3, "+": 4, "*": 5, "//": 5, "%": 5}


def _text(e: Expr, c: bool) -> str:
    if e.op == "var":
        return e.name
    if e.op == "const":
        return str(e.value)
    a, b = e.args
    p = _PREC[e.op]

    def side(x: Expr, right: bool) -> str:
        t = _text(x, c)
        if x.op in _PREC and (_PREC[x.op] < p or (right and _PREC[x.op] == p) or p <= 3):
            # bitwise operands are always parenthesised: the precedence of & ^ << >> surprises readers
            return f"({t})"
        if x.op == "const" and x.value < 0:
            return f"({t})"
        return t

    op = "/" if (c and e.op == "//") else e.op
    return f"{side(a, False)} {op} {side(b, True)}"


def _as_expr(x: Expr | Indexable) -> Expr:
    return x if isinstance(x, Expr) else index_expr(x)


def to_python(x: Expr | Indexable) -> str:
    """Python text (floor division `//`); evaluates to the layout's value."""
    return _text(_as_expr(x), c=False)


def to_c(x: Expr | Indexable) -> str:
    """C text (integer `/`, non-negative operands only, so it agrees with floor division)."""
    return _text(_as_expr(x), c=True)


def count_divmod(x: Expr | Indexable) -> int:
    """Distinct divisions and moduli in the expression (shared subterms counted once)."""
    seen: set[Expr] = set()

    def go(e: Expr) -> None:
        if e in seen:
            return
        seen.add(e)
        for a in e.args:
            go(a)

    go(_as_expr(x))
    return sum(1 for e in seen if e.op in ("//", "%"))


def variables(x: Expr) -> list[str]:
    out: list[str] = []

    def go(e: Expr) -> None:
        if e.op == "var" and e.name not in out:
            out.append(e.name)
        for a in e.args:
            go(a)

    go(x)
    return out


__all__ = [
    "CoordExpr",
    "Expr",
    "add",
    "const",
    "coord_expr",
    "count_divmod",
    "crd2idx_expr",
    "div",
    "index_expr",
    "index_to_coord",
    "mod",
    "mul",
    "swizzle_expr",
    "to_c",
    "to_python",
    "var",
]
