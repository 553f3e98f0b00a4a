"""Hypothesis strategies for layouts (shared by the tests of tests/layout)."""

from __future__ import annotations

from hypothesis import strategies as st

from warpy.layout import Layout
from warpy.layout.inttuple import IntTuple


@st.composite
def nest(draw: st.DrawFn, leaves: list[int]) -> IntTuple:
    """`leaves` in a random nesting (flat, grouped, or a single int)."""
    if len(leaves) == 1 and draw(st.booleans()):
        return leaves[0]
    groups: list[IntTuple] = []
    i = 0
    while i < len(leaves):
        k = draw(st.integers(1, len(leaves) - i))
        part = leaves[i : i + k]
        groups.append(part[0] if k == 1 else tuple(part))
        i += k
    return tuple(groups)


@st.composite
def _nested_layout(draw: st.DrawFn, extents: list[int], strides: list[int]) -> Layout:
    n = len(extents)
    shape = draw(nest(list(range(n))))
    # the nesting of indices, then substitute
    def sub(t: IntTuple, vals: list[int]) -> IntTuple:
        return vals[t] if isinstance(t, int) else tuple(sub(e, vals) for e in t)

    return Layout(sub(shape, extents), sub(shape, strides))


@st.composite
def layouts(draw: st.DrawFn, max_leaves: int = 4, max_extent: int = 6, max_stride: int = 24, zero: bool = True) -> Layout:
    n = draw(st.integers(1, max_leaves))
    extents = draw(st.lists(st.integers(1, max_extent), min_size=n, max_size=n))
    strides = draw(st.lists(st.integers(0 if zero else 1, max_stride), min_size=n, max_size=n))
    return draw(_nested_layout(extents, strides))


@st.composite
def pow2_layouts(draw: st.DrawFn, max_leaves: int = 4, zero: bool = True) -> Layout:
    n = draw(st.integers(1, max_leaves))
    extents = draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=n, max_size=n))
    strides = draw(st.lists(st.sampled_from(([0] if zero else []) + [1, 2, 4, 8, 16, 32, 64]), min_size=n, max_size=n))
    return draw(_nested_layout(extents, strides))


@st.composite
def bijections(draw: st.DrawFn, max_leaves: int = 3, max_extent: int = 6, extents: list[int] | None = None) -> Layout:
    """A bijection onto [0, N): compact strides in a random order of the modes."""
    if extents is None:
        n = draw(st.integers(1, max_leaves))
        extents = draw(st.lists(st.integers(1, max_extent), min_size=n, max_size=n))
    order = draw(st.permutations(list(range(len(extents)))))
    strides = [0] * len(extents)
    cur = 1
    for k in order:
        strides[k] = cur
        cur *= extents[k]
    return draw(_nested_layout(list(extents), strides))


@st.composite
def admissible_injective(draw: st.DrawFn, max_leaves: int = 3, pow2: bool = False) -> Layout:
    """Injective with each sorted stride a multiple of the span below it (complement-admissible)."""
    n = draw(st.integers(1, max_leaves))
    ext = st.sampled_from([2, 4]) if pow2 else st.integers(2, 5)
    mult = st.sampled_from([1, 2, 4]) if pow2 else st.integers(1, 3)
    extents = draw(st.lists(ext, min_size=n, max_size=n))
    pairs = []
    span = 1
    for s in extents:
        d = span * draw(mult)
        pairs.append((s, d))
        span = s * d
    pairs = draw(st.permutations(pairs))
    return draw(_nested_layout([p[0] for p in pairs], [p[1] for p in pairs]))


@st.composite
def padded_physical(draw: st.DrawFn, extents: list[int]) -> Layout:
    """An alias-free storage layout of the given extents: strides in a random order, each one
    past the span of the smaller ones, often with padding (so boundaries rarely divide)."""
    order = draw(st.permutations(list(range(len(extents)))))
    strides = [0] * len(extents)
    span = 1
    for k in order:
        strides[k] = span + draw(st.sampled_from([0, 0, 1, 2, 3]))
        span += strides[k] * (extents[k] - 1)
    return draw(_nested_layout(list(extents), strides))


@st.composite
def factorization(draw: st.DrawFn, n: int) -> list[int]:
    """An ordered factorization of n into factors > 1 (or [1])."""
    out: list[int] = []
    while n > 1:
        divisors = [d for d in range(2, n + 1) if n % d == 0]
        d = draw(st.sampled_from(divisors))
        out.append(d)
        n //= d
    return out or [1]
