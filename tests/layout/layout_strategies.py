"""Hypothesis strategies for layouts (shared by the tests of tests/layout)."""

from __future__ import annotations

import random

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
def layouts(draw: st.DrawFn, max_leaves: int = 4, max_extent: int = 6, max_stride: int = 24, zero: bool = True,
            negative: bool = True, long: bool = True) -> Layout:
    """Extents 1..max_extent, with `long` one mode up to 4 * max_extent at times (a total size kept
    small enough to enumerate); strides 0 (if `zero`) or 1..max_stride, with `negative` a stride's
    sign flipped at times."""
    n = draw(st.integers(1, max_leaves))
    extents = draw(st.lists(st.integers(1, max_extent), min_size=n, max_size=n))
    if long and draw(st.integers(0, 3)) == 0:
        extents[draw(st.integers(0, n - 1))] = draw(st.integers(max_extent + 1, 4 * max_extent))
    strides = draw(st.lists(st.integers(0 if zero else 1, max_stride), min_size=n, max_size=n))
    if negative and draw(st.integers(0, 3)) == 0:
        k = draw(st.integers(0, n - 1))
        strides[k] = -max(strides[k], 1)
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


# --- the differential suite's generators: nested shapes, compact / padded / zero / negative strides


def _nest_random(rng: random.Random, vals: list[int]) -> IntTuple:
    if len(vals) == 1 and rng.random() < 0.5:
        return vals[0]
    out: list[IntTuple] = []
    i = 0
    while i < len(vals):
        k = rng.randint(1, len(vals) - i)
        part = vals[i : i + k]
        out.append(part[0] if k == 1 else tuple(part))
        i += k
    return tuple(out)


def stride_kinds(rng: random.Random, extents: list[int], kind: str, max_stride: int) -> list[int]:
    """Strides for `extents`: compact or padded (in a random order of the modes), or random with
    zeros, or random with negative strides."""
    n = len(extents)
    if kind in ("compact", "padded"):
        order = list(range(n))
        rng.shuffle(order)
        strides = [0] * n
        span = 1
        for k in order:
            strides[k] = span + (rng.choice([0, 0, 1, 2, 3]) if kind == "padded" else 0)
            span = strides[k] * extents[k]
        return strides
    lo = -max_stride if kind == "negative" else 0
    return [rng.choice([0, rng.randint(lo, max_stride)]) if kind == "zero" else rng.randint(lo, max_stride) for _ in range(n)]


def random_layout(
    rng: random.Random,
    max_leaves: int = 4,
    max_extent: int = 6,
    max_stride: int = 24,
    kinds: tuple[str, ...] = ("compact", "padded", "zero", "random", "negative"),
) -> Layout:
    """A random layout: a random nesting of 1..max_leaves leaves, extents 1..max_extent, strides of
    one of `kinds`."""
    n = rng.randint(1, max_leaves)
    extents = [rng.randint(1, max_extent) for _ in range(n)]
    strides = stride_kinds(rng, extents, rng.choice(kinds), max_stride)
    idx = _nest_random(rng, list(range(n)))

    def sub(t: IntTuple, vals: list[int]) -> IntTuple:
        return vals[t] if isinstance(t, int) else tuple(sub(e, vals) for e in t)

    return Layout(sub(idx, extents), sub(idx, strides))


@st.composite
def any_layouts(draw: st.DrawFn, max_leaves: int = 4, max_extent: int = 6, max_stride: int = 24) -> Layout:
    """Hypothesis: nested layouts with compact, padded, zero, random or negative strides."""
    n = draw(st.integers(1, max_leaves))
    extents = draw(st.lists(st.integers(1, max_extent), min_size=n, max_size=n))
    kind = draw(st.sampled_from(["compact", "padded", "zero", "random", "negative"]))
    if kind in ("compact", "padded"):
        order = draw(st.permutations(list(range(n))))
        pads = draw(st.lists(st.sampled_from([0, 0, 1, 2, 3] if kind == "padded" else [0]), min_size=n, max_size=n))
        strides = [0] * n
        span = 1
        for k in order:
            strides[k] = span + pads[k]
            span = strides[k] * extents[k]
    else:
        lo = -max_stride if kind == "negative" else 0
        strides = draw(st.lists(st.integers(lo, max_stride), min_size=n, max_size=n))
        if kind == "zero":
            zeros = draw(st.lists(st.booleans(), min_size=n, max_size=n))
            strides = [0 if z else d for z, d in zip(zeros, strides)]
    return draw(_nested_layout(extents, strides))
