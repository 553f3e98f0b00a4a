"""Typed layouts: every layout names the space it maps into, and composition is checked by type.

- **logical** and **thread-value** layouts are bijections onto `[0, N)`;
- **physical** layouts (plain or swizzled) are alias-free — distinct coordinates, distinct
  offsets — except on the leaf modes explicitly marked *broadcast*.

Nothing maps out of a physical space. `compose(outer, inner)` needs only that the inner layout be
a dense bijection onto the outer's coordinates (a logical or thread-value layout of the outer's
size); the `Composite` always evaluates as `outer(unflatten(inner(c)))`. `decide` then says, in
time linear in the number of modes, whether the composite is a strided layout over a refinement of
the inner's shape, and returns that unique form (coarsest refinement, each refined mode
coalesced), else None; `Composite.simplify()` returns the typed strided form or the composite.

A `Restriction` (a warp's or a thread's slice) is a separate type that does not compose: settle
the whole view before slicing.
"""

from __future__ import annotations

import enum
from typing import Optional, Union

import attrs

from warpy.layout.algebra import _coalesce_pairs, _pairs
from warpy.layout.core import Layout, LayoutError
from warpy.layout.inttuple import IntTuple, flatten, idx2crd, product, to_str
from warpy.layout.render import CoordExpr, Expr, const, coord_expr, count_divmod, index_expr
from warpy.layout.swizzle import SwizzledLayout


class Space(enum.Enum):
    LOGICAL = "logical"
    THREAD_VALUE = "thread-value"
    PHYSICAL = "physical"


Mapping = Union[Layout, SwizzledLayout]

#: Above this many coordinates, an alias check that the stride test cannot settle is refused.
ALIAS_ENUMERATION_LIMIT = 1 << 20


# --- invariants ---------------------------------------------------------------------------


def bijection_problem(layout: Layout) -> Optional[str]:
    """None when `layout` is a bijection onto [0, size); else why not (linear in the modes)."""
    leaves = [(s, d) for s, d in zip(flatten(layout.shape), flatten(layout.stride)) if s != 1]
    by_stride: dict[int, int] = {}
    for k, (s, d) in enumerate(leaves):
        if d <= 0:
            return f"a mode of extent {s} has stride {d}"
        if d in by_stride:
            return f"two modes have stride {d}"
        by_stride[d] = k
    reached = 0
    nxt = 1
    while nxt in by_stride:
        s, d = leaves[by_stride[nxt]]
        nxt = s * d
        reached += 1
    if reached != len(leaves):
        return f"its strides do not tile [0,{layout.size()}) (no mode has stride {nxt})"
    return None


def alias_problem(layout: Layout, broadcast: frozenset[int]) -> Optional[str]:
    """None when `layout` is injective on its non-broadcast leaf modes; else the aliasing found."""
    leaves = list(zip(flatten(layout.shape), flatten(layout.stride)))
    for k in broadcast:
        if not 0 <= k < len(leaves):
            return f"broadcast mode {k} does not exist (the layout has {len(leaves)} leaf modes)"
    live = [(k, s, d) for k, (s, d) in enumerate(leaves) if s != 1 and k not in broadcast]
    for k, s, d in live:
        if d == 0:
            return f"leaf mode {k} (extent {s}) has stride 0 and is not marked broadcast"
    # Sufficient test: each |stride| clears the span of all smaller ones.
    span = 0
    for _, s, d in sorted(live, key=lambda t: abs(t[2])):
        if abs(d) <= span:
            break
        span += (s - 1) * abs(d)
    else:
        return None
    n = product(tuple(s for _, s, _ in live)) if live else 1
    if n > ALIAS_ENUMERATION_LIMIT:
        return f"alias-freedom cannot be shown without enumerating {n} coordinates"
    seen: dict[int, tuple[int, ...]] = {0: ()}
    for _, s, d in live:
        nxt: dict[int, tuple[int, ...]] = {}
        for v, c in seen.items():
            for i in range(s):
                w = v + i * d
                if w in nxt:
                    return f"coordinates {nxt[w] } and {c + (i,)} of the non-broadcast modes both map to offset {w}"
                nxt[w] = c + (i,)
        seen = nxt
    return None


# --- typed layouts ------------------------------------------------------------------------


@attrs.frozen
class TypedLayout:
    """A layout and the space it maps into (use `logical`, `thread_value`, `physical`)."""

    layout: Mapping
    space: Space
    broadcast: frozenset[int] = frozenset()

    def __attrs_post_init__(self) -> None:
        name = self.space.value
        if self.space is not Space.PHYSICAL:
            if self.broadcast:
                raise LayoutError(f"{name} layout {self.layout}: only physical layouts have broadcast modes")
            if not isinstance(self.layout, Layout):
                raise LayoutError(f"{name} layout {self.layout}: a swizzle belongs to a physical layout")
            why = bijection_problem(self.layout)
            if why:
                raise LayoutError(
                    f"{name} layout {self.layout} is not a bijection onto [0,{self.layout.size()}): {why}"
                )
            return
        base = self.layout.layout if isinstance(self.layout, SwizzledLayout) else self.layout
        why = alias_problem(base, self.broadcast)
        if why:
            raise LayoutError(f"physical layout {self.layout} is not alias-free: {why}")

    @property
    def shape(self) -> IntTuple:
        return self.layout.shape

    def size(self) -> int:
        return self.layout.size()

    def __call__(self, *crd: IntTuple) -> int:
        return self.layout(*crd)

    def values(self) -> list[int]:
        return [self(i) for i in range(self.size())]

    def coord_expr(self, crd: CoordExpr) -> Expr:
        return coord_expr(self.layout, crd)

    def restrict(self, *pattern: IntTuple | None) -> "Restriction":
        return Restriction(self, _pattern(pattern))

    def __str__(self) -> str:
        b = f" broadcast{sorted(self.broadcast)}" if self.broadcast else ""
        return f"{self.space.value} {self.layout}{b}"


def logical(layout: Layout) -> TypedLayout:
    return TypedLayout(layout, Space.LOGICAL)


def thread_value(layout: Layout) -> TypedLayout:
    return TypedLayout(layout, Space.THREAD_VALUE)


def physical(layout: Mapping, broadcast: tuple[int, ...] | frozenset[int] = ()) -> TypedLayout:
    """A physical layout; `broadcast` names leaf modes (indices into the flattened shape)."""
    return TypedLayout(layout, Space.PHYSICAL, frozenset(broadcast))


# --- composition --------------------------------------------------------------------------

Composable = Union[TypedLayout, "Composite"]


def _check_composable(outer: object, inner: object) -> None:
    for x in (outer, inner):
        if isinstance(x, Restriction):
            raise LayoutError(f"restriction {x} is not composable: settle the whole view before slicing")
        if not isinstance(x, (TypedLayout, Composite)):
            raise LayoutError(f"compose takes typed layouts (logical, thread_value, physical), not {x!r}")
    assert isinstance(outer, (TypedLayout, Composite)) and isinstance(inner, (TypedLayout, Composite))
    if inner.space is Space.PHYSICAL:
        raise LayoutError(
            f"nothing maps out of a physical space: the inner layout {inner} of a composition must be "
            f"logical or thread-value"
        )
    if inner.size() != outer.size():
        raise LayoutError(
            f"the inner layout {inner} is a bijection onto [0,{inner.size()}), not onto the "
            f"{outer.size()} coordinates of the outer layout {outer}"
        )


@attrs.frozen
class Composite:
    """`outer o inner`, evaluated as `outer(unflatten(inner(c)))`; space of the outer, shape of the inner."""

    outer: Composable
    inner: Composable

    def __attrs_post_init__(self) -> None:
        _check_composable(self.outer, self.inner)

    @property
    def space(self) -> Space:
        return self.outer.space

    @property
    def shape(self) -> IntTuple:
        return self.inner.shape

    def size(self) -> int:
        return self.inner.size()

    def __call__(self, *crd: IntTuple) -> int:
        return self.outer(self.inner(*crd))

    def values(self) -> list[int]:
        return [self(i) for i in range(self.size())]

    def coord_expr(self, crd: CoordExpr) -> Expr:
        # The inner index is one term in [0, N); the outer splits it into its own coordinates.
        return self.outer.coord_expr(self.inner.coord_expr(crd))

    def strided(self) -> Optional[Mapping]:
        return decide(self)

    def simplify(self) -> Composable:
        """The typed strided form when `decide` finds one, else this composite."""
        form = decide(self)
        if form is None:
            return self
        if self.space is not Space.PHYSICAL:
            return TypedLayout(form, self.space)
        # Broadcast marks name the outer's leaves; in the strided form, mark its stride-0 leaves.
        # If the form still aliases elsewhere (a broadcast mode with a stride), keep the composite.
        base = form.layout if isinstance(form, SwizzledLayout) else form
        leaves = zip(flatten(base.shape), flatten(base.stride))
        zero = frozenset(k for k, (s, d) in enumerate(leaves) if d == 0 and s > 1)
        if alias_problem(base, zero) is not None:
            return self
        return TypedLayout(form, Space.PHYSICAL, zero)

    def divmod_counts(self) -> tuple[int, Optional[int]]:
        """(divisions+moduli of the composite, of the strided form or None), same inputs."""
        form = decide(self)
        ours = count_divmod(index_expr(self))
        if form is None:
            return ours, None
        return ours, count_divmod(index_expr(form, domain=self.shape))

    def restrict(self, *pattern: IntTuple | None) -> "Restriction":
        return Restriction(self, _pattern(pattern))

    def __str__(self) -> str:
        return f"({self.outer}) o ({self.inner})"


def compose(outer: Composable, inner: Composable) -> Composite:
    """Strict typed composition: `inner` must be a dense bijection onto `outer`'s coordinates."""
    return Composite(outer, inner)


def _strided_form(outer: Layout, inner: Layout) -> Optional[Layout]:
    """The strided form of `outer o inner` over the coarsest refinement of inner's shape, or None.

    `inner` is a bijection onto [0, N): its leaf modes, ordered by stride, cut [0, N) at the
    boundaries e, e*n. The coalesced outer cuts it at its own boundaries M_j. The composite is
    strided over a refinement exactly when the merged boundaries form a divisibility chain; each
    piece [lo, hi) then is a factor hi/lo of one inner leaf with stride f_j * lo / M_j.
    """
    outer_modes = _coalesce_pairs(_pairs(outer))
    lows: list[int] = []
    m = 1
    for s, _ in outer_modes:
        lows.append(m)
        m *= s
    leaves = list(zip(flatten(inner.shape), flatten(inner.stride)))
    by_stride = {d: k for k, (s, d) in enumerate(leaves) if s != 1}
    pieces: dict[int, list[tuple[int, int]]] = {k: [] for k in range(len(leaves))}
    j = 0
    nxt = 1
    while nxt in by_stride:
        k = by_stride[nxt]
        s, e = leaves[k]
        lo, end = e, e * s
        while lo < end:
            while lows[j] * outer_modes[j][0] <= lo:
                j += 1
            hi = min(end, lows[j] * outer_modes[j][0])
            if hi % lo:
                return None
            assert lo % lows[j] == 0
            pieces[k].append((hi // lo, outer_modes[j][1] * (lo // lows[j])))
            lo = hi
        nxt = end
    refined: list[tuple[IntTuple, IntTuple]] = []
    for k, (s, _) in enumerate(leaves):
        merged = _coalesce_pairs(pieces[k])
        if not merged:
            refined.append((1, 0))
        elif len(merged) == 1:
            refined.append(merged[0])
        else:
            refined.append((tuple(p[0] for p in merged), tuple(p[1] for p in merged)))
    it = iter(refined)

    def rebuild(profile: IntTuple) -> tuple[IntTuple, IntTuple]:
        if isinstance(profile, int):
            return next(it)
        parts = [rebuild(p) for p in profile]
        return tuple(p[0] for p in parts), tuple(p[1] for p in parts)

    shape, stride = rebuild(inner.shape)
    return Layout(shape, stride)


def _as_strided(x: Composable) -> Optional[TypedLayout]:
    if isinstance(x, TypedLayout):
        return x
    y = x.simplify()
    return y if isinstance(y, TypedLayout) else None


def decide(c: Composite) -> Optional[Mapping]:
    """The unique strided form of a composite over a refinement of its shape, or None.

    A swizzled outer keeps its swizzle: the form is the swizzle over the strided form of the
    linear part. Linear in the number of modes of the two layouts.
    """
    outer = _as_strided(c.outer)
    inner = _as_strided(c.inner)
    if outer is None or inner is None:
        return None
    assert isinstance(inner.layout, Layout)
    if isinstance(outer.layout, SwizzledLayout):
        lin = _strided_form(outer.layout.layout, inner.layout)
        return None if lin is None else SwizzledLayout(outer.layout.swizzle, lin, outer.layout.offset)
    return _strided_form(outer.layout, inner.layout)


# --- restrictions -------------------------------------------------------------------------

Pattern = Union[int, None, tuple["Pattern", ...]]


def _pattern(p: tuple[IntTuple | None, ...]) -> Pattern:
    return p[0] if len(p) == 1 else tuple(p)


def _free_modes(pattern: Pattern, shape: IntTuple) -> list[IntTuple]:
    if pattern is None:
        return [shape]
    if isinstance(pattern, int):
        if not 0 <= pattern < product(shape):
            raise LayoutError(f"restriction: index {pattern} is out of range for shape {to_str(shape)}")
        return []
    if isinstance(shape, int) or len(pattern) != len(shape):
        raise LayoutError(f"restriction pattern {pattern} does not match shape {to_str(shape)}")
    out: list[IntTuple] = []
    for p, s in zip(pattern, shape):
        out.extend(_free_modes(p, s))
    return out


@attrs.frozen
class Restriction:
    """A slice of a typed layout: the coordinates `pattern` fixes (None = free). Not composable."""

    parent: Composable
    pattern: Pattern

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.parent, (TypedLayout, Composite)):
            raise LayoutError(f"only a typed layout or composite can be restricted, not {self.parent!r}")
        if not self.free_shapes:
            raise LayoutError(f"restriction {self.pattern} fixes every coordinate of {self.parent}")

    @property
    def free_shapes(self) -> list[IntTuple]:
        return _free_modes(self.pattern, self.parent.shape)

    @property
    def shape(self) -> IntTuple:
        free = self.free_shapes
        return free[0] if len(free) == 1 else tuple(free)

    @property
    def space(self) -> Space:
        return self.parent.space

    def size(self) -> int:
        return product(self.shape)

    def _full(self, free: list[object]) -> object:
        it = iter(free)

        def go(p: Pattern) -> object:
            if p is None:
                return next(it)
            if isinstance(p, int):
                return p
            return tuple(go(q) for q in p)

        return go(self.pattern)

    def __call__(self, *crd: IntTuple) -> int:
        c: IntTuple = crd[0] if len(crd) == 1 else tuple(crd)
        nfree = len(self.free_shapes)
        if isinstance(c, int):
            c = idx2crd(c, self.shape) if nfree > 1 else c
        parts: list[object] = [c] if nfree == 1 else list(c) if isinstance(c, tuple) else [c]
        if len(parts) != nfree:
            raise LayoutError(f"restriction takes {nfree} free coordinates, got {to_str(c)}")
        full = self._full(parts)
        return self.parent(full)  # type: ignore[arg-type]

    @property
    def offset(self) -> int:
        """The value at free coordinate 0 (the fixed part's contribution)."""
        return self.parent(self._full([0] * len(self.free_shapes)))  # type: ignore[arg-type]

    def coord_expr(self, crd: CoordExpr) -> Expr:
        nfree = len(self.free_shapes)
        parts: list[object] = [crd] if nfree == 1 else list(crd) if isinstance(crd, tuple) else []
        if len(parts) != nfree:
            raise LayoutError("a restriction's coordinate must give each free mode")

        def fill(p: Pattern, it: list[object]) -> CoordExpr:
            if p is None:
                return it.pop(0)  # type: ignore[return-value]
            if isinstance(p, int):
                return const(p)
            return tuple(fill(q, it) for q in p)

        return self.parent.coord_expr(fill(self.pattern, parts))

    def layout(self) -> Optional[Layout]:
        """For a strided parent: the free modes as a Layout L with `r(c) == offset + L(c)`."""
        parent = self.parent
        if not isinstance(parent, TypedLayout) or not isinstance(parent.layout, Layout):
            return None
        lay = parent.layout
        strides: list[IntTuple] = []

        def go(p: Pattern, d: IntTuple) -> None:
            if p is None:
                strides.append(d)
            elif isinstance(p, tuple):
                assert isinstance(d, tuple)
                for q, e in zip(p, d):
                    go(q, e)

        go(self.pattern, lay.stride)
        free = self.free_shapes
        if len(free) == 1:
            return Layout(free[0], strides[0])
        return Layout(tuple(free), tuple(strides))

    def __str__(self) -> str:
        return f"{self.parent} restricted to {self.pattern}"


__all__ = [
    "Composite",
    "Restriction",
    "Space",
    "TypedLayout",
    "alias_problem",
    "bijection_problem",
    "compose",
    "decide",
    "logical",
    "physical",
    "thread_value",
]
