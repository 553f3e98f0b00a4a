"""A small, safe expression language over the layout algebra (what `warpy layout EXPR` reads).

    expr   := term {'o' term}                          composition, right to left (CuTe's `o`)
    term   := NAME '(' [expr {',' expr}] ')'          a call of a public function
            | '(' expr {',' expr} [','] ')' [':' expr] a tuple; with ':' a layout shape:stride
            | '<' expr {',' expr} '>'                  a by-mode tiler (CuTe's <A, B>)
            | 'Sw' '<' INT ',' INT ',' INT '>'         a swizzle, as printed: Sw<3,4,3>
            | '+' INT term                             an offset before a layout (Sw<3,4,3> o +16 L)
            | INT [':' expr]                           an int; with ':' a layout
            | '_'                                      leave this mode alone (a tiler entry)

`Sw<B,M,S> o L`, `Sw<B,M,S> o OFF o L` (CuTe's print of a composed layout) and
`Sw<B,M,S> o +OFF L` (warpy's) read back as the swizzled layout; `A o B` of layouts is
`composition(A, B)`. Nothing is evaluated but these literals and the functions in `FUNCTIONS`;
every error is a one-line LayoutError.
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
        "tiled_product flat_product right_inverse left_inverse make_layout filter crd2crd slice_and_offset"
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

_TOKEN = re.compile(r"\s*(?:(?P<int>-?\d+)|(?P<name>[A-Za-z_][A-Za-z_0-9]*)|(?P<sym>[(),:<>+]))")

#: Deeper nesting than this is a one-line error (not a RecursionError).
MAX_DEPTH = 64


class _Offset:
    """`+N` before a layout in `Sw<..> o +N L`: the layout and the swizzle's offset."""

    def __init__(self, offset: int, inner: object) -> None:
        self.offset = offset
        self.inner = inner



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
        self.depth = 0

    def fail(self, what: str) -> LayoutError:
        at = self.toks[self.pos][2] if self.pos < len(self.toks) else len(self.text)
        text = self.text if len(self.text) <= 80 else self.text[:60] + "..."
        return LayoutError(f"cannot read {text!r}: {what} at position {at}")

    def peek(self) -> str:
        return self.toks[self.pos][1] if self.pos < len(self.toks) else ""

    def take(self, sym: str) -> None:
        if self.peek() != sym:
            raise self.fail(f"expected {sym!r}")
        self.pos += 1

    def items(self, close: str, trailing: bool = False) -> list[object]:
        out = [self.expr()]
        while self.peek() == ",":
            self.pos += 1
            if trailing and self.peek() == close:  # (4,) as Python writes a 1-tuple
                break
            out.append(self.expr())
        self.take(close)
        return out

    def maybe_layout(self, shape: object) -> object:
        if self.peek() != ":":
            return shape
        self.pos += 1
        stride = self.term()
        return Layout(_int_tuple(shape, self), _int_tuple(stride, self))

    def expr(self) -> object:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH} levels")
        try:
            terms = [self.term()]
            while self.peek() == "o" and self.toks[self.pos][0] == "name":
                self.pos += 1
                terms.append(self.term())
        finally:
            self.depth -= 1
        return _compose_terms(terms, self)

    def term(self) -> object:
        if self.pos >= len(self.toks):
            raise self.fail("it ends early")
        kind, tok, _ = self.toks[self.pos]
        self.pos += 1
        if kind == "int":
            return self.maybe_layout(int(tok))
        if kind == "name":
            if tok == "_" and self.peek() != "(":
                return None
            if tok == "Sw" and self.peek() == "<":
                self.take("<")
                bms = self.items(">")
                if len(bms) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) for v in bms):
                    raise self.fail("a swizzle is Sw<B,M,S> with three ints")
                return Swizzle(*bms)  # type: ignore[arg-type]
            if tok not in FUNCTIONS:
                raise LayoutError(f"unknown function {tok!r} (known: {', '.join(sorted(FUNCTIONS))})")
            self.take("(")
            args: list[object] = []
            if self.peek() == ")":
                self.take(")")
            else:
                args = self.items(")")
            return _call(tok, args)
        if tok == "(":
            return self.maybe_layout(tuple(self.items(")", trailing=True)))
        if tok == "<":
            return tuple(self.items(">"))
        if tok == "+":
            if self.pos >= len(self.toks) or self.toks[self.pos][0] != "int":
                raise self.fail("expected an offset after '+'")
            off = int(self.toks[self.pos][1])
            self.pos += 1
            return _Offset(off, self.term())
        self.pos -= 1
        raise self.fail(f"unexpected {tok!r}")


def _call(name: str, args: list[object]) -> object:
    for a in args:
        if isinstance(a, _Offset):
            raise LayoutError(f"{name}: an offset '+N' belongs after 'Sw<B,M,S> o'")
    try:
        return FUNCTIONS[name](*args)
    except LayoutError:
        raise
    except RecursionError:
        raise LayoutError(f"{name}: arguments nested too deeply") from None
    except (TypeError, AttributeError, ValueError, IndexError, ZeroDivisionError) as e:
        raise LayoutError(f"{name}: bad arguments ({e})") from None


def _compose_terms(terms: list[object], p: "_Parser") -> object:
    """Fold `t0 o t1 o ... o tn` from the right (composition is associative)."""
    if len(terms) == 1:
        if isinstance(terms[0], _Offset):
            raise p.fail("an offset '+N' belongs after 'Sw<B,M,S> o'")
        return terms[0]
    acc = terms[-1]
    for t in reversed(terms[:-1]):
        if isinstance(t, Swizzle):
            if isinstance(acc, _Offset):
                acc = SwizzledLayout(t, _layout_operand(acc.inner, p), acc.offset)
            elif isinstance(acc, _OffsetLayout):
                acc = SwizzledLayout(t, acc.layout, acc.offset)
            else:
                acc = SwizzledLayout(t, _layout_operand(acc, p))
        elif isinstance(t, int) and not isinstance(t, bool):
            # CuTe prints a composed layout as `Sw<B,M,S> o OFFSET o LAYOUT`
            acc = _OffsetLayout(t, _layout_operand(acc, p))
        elif isinstance(t, (Layout, SwizzledLayout)):
            acc = _call("composition", [t, _layout_operand(acc, p)])
        else:
            raise p.fail(f"cannot compose {show(t)} with {show(acc)}")
    if isinstance(acc, (_Offset, _OffsetLayout)):
        raise p.fail("an offset belongs between a swizzle and a layout")
    return acc


class _OffsetLayout:
    def __init__(self, offset: int, layout: Layout) -> None:
        self.offset = offset
        self.layout = layout


def _layout_operand(x: object, p: "_Parser") -> Layout:
    if isinstance(x, Layout):
        return x
    if isinstance(x, int) and not isinstance(x, bool):
        return Layout(x, 1)
    raise p.fail(f"expected a layout, got {show(x)}")


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


#: A table shows at most this many rows and columns; past that it is elided (and says so).
TABLE_ROWS = 32
TABLE_COLS = 16


def table(value: object, max_rows: int = TABLE_ROWS, max_cols: int = TABLE_COLS) -> str:
    """The values as a 2-D table: rows over mode 0, columns over the other modes (colexicographic).

    Past `max_rows` rows or `max_cols` columns the table is elided: the first ones are shown, a
    `...` row/column marks the cut, and a last line gives the full size.
    """
    if not hasattr(value, "shape") or not callable(value):
        raise LayoutError(f"{show(value)} is not a layout, so it has no table")
    shape = getattr(value, "shape")
    first = shape[0] if isinstance(shape, tuple) else shape
    rows = algebra.size(first)
    total = algebra.size(shape)
    cols = total // rows
    nr, nc = min(rows, max_rows), min(cols, max_cols)
    cells = [[str(value(r + rows * c)) for c in range(nc)] for r in range(nr)]
    more_cols = nc < cols
    width = max([len(x) for row in cells for x in row] + [len(str(nc - 1)), 3 if more_cols else 1])
    lw = max(len(str(nr - 1)), 3 if nr < rows else 1)
    heads = [f"{c:>{width}}" for c in range(nc)] + ([f"{'...':>{width}}"] if more_cols else [])
    head = " " * (lw + 3) + " ".join(heads)
    lines = [head, " " * (lw + 1) + "+" + "-" * (len(head) - lw - 1)]
    for r in range(nr):
        row = [f"{x:>{width}}" for x in cells[r]] + ([f"{'...':>{width}}"] if more_cols else [])
        lines.append(f"{r:>{lw}} | " + " ".join(row))
    if nr < rows:
        lines.append(f"{'...':>{lw}} | " + " ".join(f"{'...':>{width}}" for _ in heads))
    if nr < rows or more_cols:
        lines.append(f"(elided: {rows} rows x {cols} columns, the first {nr} x {nc} shown)")
    return "\n".join(lines)


__all__ = ["FUNCTIONS", "evaluate", "show", "table"]
