"""A small, safe expression language over the layout algebra (what `warpy layout EXPR` reads).

    expr   := NAME '(' [expr {',' expr}] ')'          a call of a public function
            | '(' expr {',' expr} ')' [':' expr]       a tuple; with ':' a layout shape:stride
            | '<' expr {',' expr} '>'                  a by-mode tiler (CuTe's <A, B>)
            | INT [':' expr]                           an int; with ':' a layout
            | '_'                                      leave this mode alone (a tiler entry)

Nothing is evaluated but these literals and the functions in `FUNCTIONS`; errors are LayoutError.
"""

from __future__ import annotations

import re
from typing import Callable

from warpy.layout import algebra, typed
from warpy.layout.core import Layout, LayoutError
from warpy.layout.inttuple import IntTuple, to_str
from warpy.layout.render import index_expr, to_c, to_python
from warpy.layout.swizzle import Swizzle, SwizzledLayout

FUNCTIONS: dict[str, Callable[..., object]] = {
    name: getattr(algebra, name)
    for name in (
        "size cosize crd2idx idx2crd coalesce composition complement logical_divide zipped_divide "
        "tiled_divide flat_divide logical_product blocked_product raked_product zipped_product "
        "tiled_product flat_product right_inverse left_inverse make_layout"
    ).split()
}
FUNCTIONS.update(
    Layout=Layout,
    Swizzle=Swizzle,
    SwizzledLayout=SwizzledLayout,
    logical=typed.logical,
    thread_value=typed.thread_value,
    physical=lambda layout, *broadcast: typed.physical(layout, tuple(broadcast)),
    compose=lambda outer, inner: typed.compose(outer, inner).simplify(),
    composite=typed.compose,
    python=lambda x: to_python(index_expr(x)),
    c=lambda x: to_c(index_expr(x)),
)

_TOKEN = re.compile(r"\s*(?:(?P<int>-?\d+)|(?P<name>[A-Za-z_][A-Za-z_0-9]*)|(?P<sym>[(),:<>]))")


def _tokens(text: str) -> list[tuple[str, str, int]]:
    out: list[tuple[str, str, int]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise LayoutError(f"cannot read {text!r}: unexpected {text[pos:].strip()[:1]!r} at position {pos}")
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m.group(kind), m.start(kind)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.pos = 0

    def fail(self, what: str) -> LayoutError:
        at = self.toks[self.pos][2] if self.pos < len(self.toks) else len(self.text)
        return LayoutError(f"cannot read {self.text!r}: {what} at position {at}")

    def peek(self) -> str:
        return self.toks[self.pos][1] if self.pos < len(self.toks) else ""

    def take(self, sym: str) -> None:
        if self.peek() != sym:
            raise self.fail(f"expected {sym!r}")
        self.pos += 1

    def items(self, close: str) -> list[object]:
        out = [self.expr()]
        while self.peek() == ",":
            self.pos += 1
            out.append(self.expr())
        self.take(close)
        return out

    def maybe_layout(self, shape: object) -> object:
        if self.peek() != ":":
            return shape
        self.pos += 1
        stride = self.expr()
        return Layout(_int_tuple(shape, self), _int_tuple(stride, self))

    def expr(self) -> object:
        if self.pos >= len(self.toks):
            raise self.fail("it ends early")
        kind, tok, _ = self.toks[self.pos]
        self.pos += 1
        if kind == "int":
            return self.maybe_layout(int(tok))
        if kind == "name":
            if tok == "_" and self.peek() != "(":
                return None
            if tok not in FUNCTIONS:
                raise LayoutError(f"unknown function {tok!r} (known: {', '.join(sorted(FUNCTIONS))})")
            self.take("(")
            args: list[object] = []
            if self.peek() == ")":
                self.take(")")
            else:
                args = self.items(")")
            try:
                return FUNCTIONS[tok](*args)
            except TypeError as e:
                raise LayoutError(f"{tok}: bad arguments ({e})") from None
        if tok == "(":
            return self.maybe_layout(tuple(self.items(")")))
        if tok == "<":
            return tuple(self.items(">"))
        self.pos -= 1
        raise self.fail(f"unexpected {tok!r}")


def _int_tuple(x: object, p: _Parser) -> IntTuple:
    if isinstance(x, bool):
        raise p.fail("a shape or stride holds only ints")
    if isinstance(x, int):
        return x
    if isinstance(x, tuple):
        return tuple(_int_tuple(e, p) for e in x)
    raise p.fail("a shape or stride holds only ints")


def evaluate(text: str) -> object:
    """Evaluate one expression of the language."""
    p = _Parser(text)
    value = p.expr()
    if p.pos != len(p.toks):
        raise p.fail("trailing text")
    return value


def show(value: object) -> str:
    """One line: CuTe notation for layouts, tuples as (a,b), the rest as str()."""
    if value is None:
        return "_"
    if isinstance(value, (int, tuple)) and not isinstance(value, bool):
        try:
            return to_str(_int_tuple(value, _Parser("")))
        except LayoutError:
            return "(" + ",".join(show(v) for v in value) + ")" if isinstance(value, tuple) else str(value)
    return str(value)


def table(value: object) -> str:
    """The values as a 2-D table: rows over mode 0, columns over the other modes (colexicographic)."""
    if not hasattr(value, "shape") or not callable(value):
        raise LayoutError(f"{show(value)} is not a layout, so it has no table")
    shape = getattr(value, "shape")
    first = shape[0] if isinstance(shape, tuple) else shape
    rows = algebra.size(first)
    total = algebra.size(shape)
    cols = total // rows
    cells = [[str(value(r + rows * c)) for c in range(cols)] for r in range(rows)]
    width = max([len(x) for row in cells for x in row] + [len(str(cols - 1))])
    lw = len(str(rows - 1))
    head = " " * (lw + 3) + " ".join(f"{c:>{width}}" for c in range(cols))
    lines = [head, " " * (lw + 1) + "+" + "-" * (len(head) - lw - 1)]
    for r in range(rows):
        lines.append(f"{r:>{lw}} | " + " ".join(f"{x:>{width}}" for x in cells[r]))
    return "\n".join(lines)


__all__ = ["FUNCTIONS", "evaluate", "show", "table"]
