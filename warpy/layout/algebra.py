"""CuTe's layout algebra: coalesce, composition, complement, divides, products, inverses.

Results follow CuTe (with static shapes, as in CUTLASS's layout-algebra docs) on admissible input.
Where CuTe silently accepts an input that is not admissible, these raise `LayoutError` naming the
condition that failed: the inner layout of a composition running past the outer layout, the stride
and shape divisibility conditions of composition, a complement whose modes interleave or alias,
and a tile larger than (or not dividing) the layout it divides.

A *tiler* is a `Layout`, an int `n` (shorthand for `n:1`), `None` (CuTe's `_`: leave the mode
alone), or a tuple of tilers, applied by mode (CuTe's `Tile`; a tuple of ints is a `Shape` tiler).
"""

from __future__ import annotations

from typing import Union, overload

from warpy.layout.core import Layout, LayoutError
from warpy.layout.swizzle import SwizzledLayout
from warpy.layout.inttuple import IntTuple, flatten, prefix_product, product, to_str, unflatten
from warpy.layout.inttuple import idx2crd as natural_idx2crd

Tiler = Union[Layout, int, None, tuple["Tiler", ...]]


# --- small helpers ------------------------------------------------------------------------


def size(x: Layout | IntTuple) -> int:
    """Number of coordinates of a layout, or the product of a shape."""
    return x.size() if isinstance(x, Layout) else product(x)


def cosize(x: Layout | IntTuple) -> int:
    """One past the largest value of a layout (of a shape: its size, the compact layout's cosize)."""
    return x.cosize() if isinstance(x, Layout) else product(x)


def crd2idx(crd: IntTuple, shape: Layout | IntTuple, stride: IntTuple | None = None) -> int:
    """The index of a coordinate: `layout(crd)`; with a shape alone, its colexicographic index."""
    if isinstance(shape, Layout):
        if stride is not None:
            raise LayoutError("crd2idx(crd, layout) takes no stride")
        return shape(crd)
    return Layout(shape, stride)(crd)


def idx2crd(idx: int, shape: Layout | IntTuple, stride: IntTuple | None = None) -> IntTuple:
    """The natural coordinate of `idx` in `shape` (colexicographic, mode 0 fastest).

    With a stride (CuTe's three-argument form, or a layout), each leaf is `(idx // stride) % extent`.
    """
    if isinstance(shape, Layout):
        if stride is not None:
            raise LayoutError("idx2crd(idx, layout) takes no stride")
        lay = shape
    else:
        lay = Layout(shape, stride)
    if stride is None and not isinstance(shape, Layout):
        if not 0 <= idx < lay.size():
            raise LayoutError(f"index {idx} is out of range for shape {to_str(lay.shape)} (size {lay.size()})")
        return natural_idx2crd(idx, lay.shape)
    leaves = tuple((idx // d) % s if d else 0 for s, d in zip(flatten(lay.shape), flatten(lay.stride)))
    return unflatten(leaves, lay.shape)


def _pairs(layout: Layout) -> list[tuple[int, int]]:
    return list(zip(flatten(layout.shape), flatten(layout.stride)))


def _from_pairs(pairs: list[tuple[int, int]]) -> Layout:
    """A flat layout from (extent, stride) pairs: an int layout for one pair, `1:0` for none."""
    if not pairs:
        return Layout(1, 0)
    if len(pairs) == 1:
        return Layout(pairs[0][0], pairs[0][1])
    return Layout(tuple(s for s, _ in pairs), tuple(d for _, d in pairs))


def make_layout(*modes: Layout) -> Layout:
    """Concatenation: the layout whose modes are `modes` (CuTe's make_layout(L0, L1, ...))."""
    if not modes:
        raise LayoutError("make_layout needs at least one mode")
    return Layout(tuple(m.shape for m in modes), tuple(m.stride for m in modes))


def _as_layout(t: Layout | int, what: str) -> Layout:
    if isinstance(t, Layout):
        return t
    if isinstance(t, int) and not isinstance(t, bool):
        return Layout(t, 1)
    raise LayoutError(f"{what} must be a layout or an int, not {t!r}")


def _value_range(layout: Layout) -> tuple[int, int]:
    """(smallest, largest) value of a layout."""
    lo = hi = 0
    for s, d in _pairs(layout):
        if d > 0:
            hi += (s - 1) * d
        else:
            lo += (s - 1) * d
    return lo, hi


def _modes(layout: Layout) -> list[Layout]:
    return [layout[i] for i in range(layout.rank())]


# --- coalesce -----------------------------------------------------------------------------


def _coalesce_pairs(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, d in pairs:
        if s == 1:
            continue  # a size-1 mode only ever sees coordinate 0
        if out and out[-1][0] * out[-1][1] == d:
            out[-1] = (out[-1][0] * s, out[-1][1])
        else:
            out.append((s, d))
    return out


def coalesce(layout: Layout, profile: IntTuple | None = None) -> Layout:
    """The same function of the 1-D index with the fewest modes (depth <= 1).

    With a `profile` (CuTe's trg_profile), coalesce each mode the profile names by an int, and
    recurse where it has a tuple; modes past the profile's rank are kept.
    """
    if profile is None or isinstance(profile, int):
        return _from_pairs(_coalesce_pairs(_pairs(layout)))
    if len(profile) > layout.rank():
        raise LayoutError(f"coalesce: profile {to_str(profile)} has more modes than {layout}")
    modes = [coalesce(layout[i], p) for i, p in enumerate(profile)]
    modes += [layout[i] for i in range(len(profile), layout.rank())]
    return make_layout(*modes)


# --- composition --------------------------------------------------------------------------


def _compose_mode(outer: list[tuple[int, int]], s: int, d: int, a: Layout, b: Layout) -> Layout:
    """`outer o s:d` for a coalesced flat outer layout (CuTe's composition_impl, one mode)."""
    if s == 1:
        return Layout(1, 0)
    if d == 0:
        return Layout(s, 0)
    if len(outer) == 1:
        return Layout(s, d * outer[0][1])
    # Divide the stride d out of the outer shape, from the left (stride divisibility condition).
    rest_stride = d
    divided: list[tuple[int, int]] = []
    for si, di in outer[:-1]:
        if rest_stride % si == 0:
            divided.append((1, di * si))
            rest_stride //= si
        elif si % rest_stride == 0:
            divided.append((si // rest_stride, di * rest_stride))
            rest_stride = 1
        else:
            raise LayoutError(
                f"composition({a}, {b}) is not admissible: stride divisibility fails, "
                f"stride {d} neither divides nor is divided by extent {si} of the outer layout"
            )
    last_stride = rest_stride * outer[-1][1]
    # Keep the first s elements (shape divisibility condition).
    rest_shape = s
    kept: list[tuple[int, int]] = []
    for si, di in divided:
        if rest_shape % si == 0:
            kept.append((si, di))
            rest_shape //= si
        elif si % rest_shape == 0:
            kept.append((rest_shape, di))
            rest_shape = 1
        else:
            raise LayoutError(
                f"composition({a}, {b}) is not admissible: shape divisibility fails, "
                f"extent {s} (left {rest_shape}) neither divides nor is divided by extent {si}"
            )
    kept.append((rest_shape, last_stride))
    return _from_pairs(_coalesce_pairs(kept))


def _compose_layouts(a: Layout, b: Layout) -> Layout:
    lo, hi = _value_range(b)
    if lo < 0 or hi >= a.size():
        raise LayoutError(
            f"composition({a}, {b}) runs past the outer layout: the inner layout reaches "
            f"{hi if hi >= a.size() else lo}, the outer one has coordinates 0..{a.size() - 1}"
        )
    outer = _coalesce_pairs(_pairs(a)) or [(1, 0)]

    def go(bl: Layout) -> Layout:
        if isinstance(bl.shape, tuple):
            return make_layout(*(go(m) for m in _modes(bl)))
        assert isinstance(bl.stride, int)
        return _compose_mode(outer, bl.shape, bl.stride, a, b)

    result = go(b)
    if len(outer) > 1 and not _modes_disjoint(b):
        _check_distributes(a, b, result)
    return result


#: Above this many coordinates, a composition whose distributivity the interval test cannot show
#: is refused rather than checked point by point.
DISTRIBUTIVITY_CHECK_LIMIT = 1 << 16


def _modes_disjoint(b: Layout) -> bool:
    """True when the inner layout's modes occupy disjoint ranges [d, d*s) of the outer's index.

    Composition distributes over the inner layout's modes (the way CuTe computes it, one mode at
    a time) when their images add without carries in the outer's mixed radix. Disjoint ranges,
    each aligned by the stride divisibility condition, guarantee that.
    """
    live = sorted((d, s) for s, d in _pairs(b) if s != 1 and d != 0)
    return all(d0 * s0 <= d1 for (d0, s0), (d1, _) in zip(live, live[1:]))


def _check_distributes(a: Layout, b: Layout, result: Layout) -> None:
    n = b.size()
    if n > DISTRIBUTIVITY_CHECK_LIMIT:
        raise LayoutError(
            f"composition({a}, {b}) is not admissible: the inner layout's modes overlap in the outer's "
            f"coordinates, and with {n} coordinates distributivity is not checked point by point"
        )
    for i in range(n):
        if result(i) != a(b(i)):
            raise LayoutError(
                f"composition({a}, {b}) is not admissible: the inner layout's modes overlap in the outer's "
                f"coordinates and do not add without carries (at index {i}: {result(i)} != {a(b(i))})"
            )


@overload
def composition(a: Layout, b: Tiler) -> Layout: ...


@overload
def composition(a: SwizzledLayout, b: Tiler) -> SwizzledLayout: ...


def composition(a: Layout | SwizzledLayout, b: Tiler) -> Layout | SwizzledLayout:
    """`R(c) = a(b(c))` for every coordinate c of b (CuTe's composition; b may be a tiler).

    A swizzled outer layout keeps its swizzle and offset: `swizzle(offset + (layout o b)(c))`.
    """
    if isinstance(a, SwizzledLayout):
        return SwizzledLayout(a.swizzle, composition(a.layout, b), a.offset)
    if b is None:
        return a
    if isinstance(b, tuple):
        if len(b) > a.rank():
            raise LayoutError(f"composition: tiler has {len(b)} modes, more than the {a.rank()} of {a}")
        modes = [composition(a[i], t) for i, t in enumerate(b)]
        modes += [a[i] for i in range(len(b), a.rank())]
        return make_layout(*modes)
    return _compose_layouts(a, _as_layout(b, "a composition's inner layout"))


# --- complement ---------------------------------------------------------------------------


def complement(a: Layout, cotarget: IntTuple | None = None) -> Layout:
    """The ordered layout of the repetitions of `a` up to `size(cotarget)` (default: cosize(a)).

    Admissible only when, with the modes of `a` sorted by stride, each stride is a multiple of
    the span (extent * stride) of the mode below it: otherwise `a` aliases or its modes
    interleave and no complement is disjoint from it.
    """
    m = a.cosize() if cotarget is None else product(cotarget)
    pairs = [(s, d) for s, d in _pairs(a) if s != 1 and d != 0]
    for s, d in pairs:
        if d < 0:
            raise LayoutError(f"complement({a}, {m}) is not admissible: stride {d} is negative")
    pairs.sort(key=lambda p: (p[1], p[0]))
    shapes: list[int] = []
    strides: list[int] = []
    cur = 1
    for s, d in pairs:
        if d % cur:
            raise LayoutError(
                f"complement({a}, {m}) is not admissible: stride {d} is not a multiple of {cur}, "
                f"the span of the modes with smaller strides (the layout aliases or interleaves)"
            )
        shapes.append(d // cur)
        strides.append(cur)
        cur = s * d
    shapes.append(-(-m // cur))
    strides.append(cur)
    return coalesce(Layout(tuple(shapes), tuple(strides)))


# --- divides ------------------------------------------------------------------------------


def _divide_one(a: Layout, tile: Layout) -> Layout:
    n = a.size()
    lo, hi = _value_range(tile)
    if lo < 0:
        raise LayoutError(f"logical_divide({a}, {tile}): the tile has a negative stride")
    if hi >= n:
        raise LayoutError(
            f"logical_divide({a}, {tile}): the tile is larger than the layout "
            f"(it reaches {hi}, the layout has size {n})"
        )
    rest = complement(tile, n)
    joined = make_layout(tile, rest)
    if joined.cosize() != n:
        raise LayoutError(
            f"logical_divide({a}, {tile}): the tile does not divide the layout "
            f"(tile and its complement {rest} span {joined.cosize()}, the layout has size {n})"
        )
    return composition(a, joined)


def logical_divide(a: Layout, tiler: Tiler) -> Layout:
    """`a o (B, B*)`: mode 0 the tile B, mode 1 the tiles (by mode for a tuple tiler)."""
    if tiler is None:
        return a
    if isinstance(tiler, tuple):
        if len(tiler) > a.rank():
            raise LayoutError(f"logical_divide: tiler has {len(tiler)} modes, more than the {a.rank()} of {a}")
        modes = [logical_divide(a[i], t) for i, t in enumerate(tiler)]
        modes += [a[i] for i in range(len(tiler), a.rank())]
        return make_layout(*modes)
    return _divide_one(a, _as_layout(tiler, "a tiler"))


def _zip2_by(layout: Layout, guide: Tiler) -> tuple[Layout, Layout]:
    """Split a divided/product layout into (all tile modes, all rest modes + untouched modes)."""
    if isinstance(guide, tuple):
        if layout.rank() < len(guide):
            raise LayoutError(f"{layout} has fewer modes than the tiler")
        splits = [_zip2_by(layout[i], g) for i, g in enumerate(guide)]
        first = make_layout(*(f for f, _ in splits))
        second = make_layout(*(r for _, r in splits), *(layout[i] for i in range(len(guide), layout.rank())))
        return first, second
    if layout.rank() != 2 or not isinstance(layout.shape, tuple):
        raise LayoutError(f"expected a (tile, rest) pair, got {layout}")
    return layout[0], layout[1]


def _tile_unzip(layout: Layout, tiler: Tiler) -> Layout:
    first, second = _zip2_by(layout, tiler)
    return make_layout(first, second)


def _flat_modes(layout: Layout) -> list[Layout]:
    return _modes(layout) if isinstance(layout.shape, tuple) else [layout]


def zipped_divide(a: Layout, tiler: Tiler) -> Layout:
    """((TileM,TileN,...), (RestM,RestN,...,L,...))."""
    return _tile_unzip(logical_divide(a, tiler), tiler)


def tiled_divide(a: Layout, tiler: Tiler) -> Layout:
    """((TileM,TileN,...), RestM, RestN, ..., L, ...)."""
    z = zipped_divide(a, tiler)
    return make_layout(z[0], *_flat_modes(z[1]))


def flat_divide(a: Layout, tiler: Tiler) -> Layout:
    """(TileM, TileN, ..., RestM, RestN, ..., L, ...)."""
    z = zipped_divide(a, tiler)
    return make_layout(*_flat_modes(z[0]), *_flat_modes(z[1]))


# --- products -----------------------------------------------------------------------------


def logical_product(a: Layout, tiler: Tiler) -> Layout:
    """`(A, A* o B)`: mode 0 the block A, mode 1 B's arrangement of unique copies of A."""
    if tiler is None:
        return a
    if isinstance(tiler, tuple):
        if len(tiler) > a.rank():
            raise LayoutError(f"logical_product: tiler has {len(tiler)} modes, more than the {a.rank()} of {a}")
        modes = [logical_product(a[i], t) for i, t in enumerate(tiler)]
        modes += [a[i] for i in range(len(tiler), a.rank())]
        return make_layout(*modes)
    b = _as_layout(tiler, "a tiler")
    if _value_range(b)[0] < 0:
        raise LayoutError(f"logical_product({a}, {b}): the tiler has a negative stride")
    rest = complement(a, a.size() * b.cosize())
    return make_layout(a, composition(rest, b))


def _append(layout: Layout, rank: int) -> Layout:
    """Pad to `rank` modes with 1:0 (CuTe's append<R>)."""
    if layout.rank() >= rank:
        return layout
    modes = _flat_modes(layout) + [Layout(1, 0)] * (rank - layout.rank())
    return make_layout(*modes)


def _zip(l0: Layout, l1: Layout) -> Layout:
    """CuTe's zip of two layouts: mode i of the result is (l0's mode i, l1's mode i)."""
    if not isinstance(l0.shape, tuple):
        return make_layout(make_layout(l0, l1))
    m0, m1 = _flat_modes(l0), _flat_modes(l1)  # an int-shaped layout is its own mode 0
    if len(m0) != len(m1):
        raise LayoutError(f"cannot zip {l0} with {l1}: their ranks differ")
    return make_layout(*(make_layout(x, y) for x, y in zip(m0, m1)))


def _rank_sensitive_product(a: Layout, tiler: Layout | int) -> tuple[Layout, Layout, int]:
    b = _as_layout(tiler, "a blocked/raked product's tiler")
    r = max(a.rank(), b.rank())
    p = logical_product(_append(a, r), _append(b, r))
    return p[0], p[1], r


def blocked_product(a: Layout, tiler: Layout | int) -> Layout:
    """Each mode of the result is (a's mode, tiler's mode): copies of `a` as contiguous blocks."""
    block, tiles, r = _rank_sensitive_product(a, tiler)
    # Rank 1: one mode (block, tiles), whatever the arrangement's own nesting (CuTe would not compile
    # a rank-1 zip of a nested arrangement).
    return make_layout(make_layout(block, tiles)) if r == 1 else _zip(block, tiles)


def raked_product(a: Layout, tiler: Layout | int) -> Layout:
    """Each mode of the result is (tiler's mode, a's mode): copies of `a` interleaved."""
    block, tiles, r = _rank_sensitive_product(a, tiler)
    return make_layout(make_layout(tiles, block)) if r == 1 else _zip(tiles, block)


def zipped_product(a: Layout, tiler: Tiler) -> Layout:
    """((M,N,...), (TileM,TileN,...,L,...))."""
    return _tile_unzip(logical_product(a, tiler), tiler)


def tiled_product(a: Layout, tiler: Tiler) -> Layout:
    """((M,N,...), TileM, TileN, ..., L, ...)."""
    z = zipped_product(a, tiler)
    return make_layout(z[0], *_flat_modes(z[1]))


def flat_product(a: Layout, tiler: Tiler) -> Layout:
    """(M, N, ..., TileM, TileN, ..., L, ...)."""
    z = zipped_product(a, tiler)
    return make_layout(*_flat_modes(z[0]), *_flat_modes(z[1]))


# --- inverses -----------------------------------------------------------------------------


def right_inverse(layout: Layout) -> Layout:
    """The largest compact R with `layout(R(i)) == i` for i < size(R) (`1:0` if none)."""
    pairs = _coalesce_pairs(_pairs(layout))
    if not pairs:
        return Layout(1, 0)
    flat_shape = tuple(s for s, _ in pairs)
    rstride = flatten(prefix_product(flat_shape))
    by_stride: dict[int, int] = {}
    for i, (_, d) in enumerate(pairs):
        by_stride.setdefault(abs(d), i)
    seq: list[int] = []
    nxt = 1
    while nxt in by_stride and by_stride[nxt] not in seq:
        i = by_stride[nxt]
        seq.append(i)
        nxt = pairs[i][0] * abs(pairs[i][1])
    return _from_pairs([(pairs[i][0], (1 if pairs[i][1] > 0 else -1) * rstride[i]) for i in seq])


def left_inverse(layout: Layout) -> Layout:
    """An L with `L(layout(i)) == i` for every i < size(layout) (layout must be injective)."""
    return right_inverse(make_layout(layout, complement(layout)))


__all__ = [
    "Tiler",
    "blocked_product",
    "coalesce",
    "complement",
    "composition",
    "cosize",
    "crd2idx",
    "flat_divide",
    "flat_product",
    "idx2crd",
    "left_inverse",
    "logical_divide",
    "logical_product",
    "make_layout",
    "raked_product",
    "right_inverse",
    "size",
    "tiled_divide",
    "tiled_product",
    "zipped_divide",
    "zipped_product",
]
