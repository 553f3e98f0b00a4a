"""CuTe's layout algebra: coalesce, composition, complement, divides, products, inverses.

Results follow CuTe (with static shapes, as in CUTLASS's layout-algebra docs) wherever CuTe's answer
is defined and correct; docs/layout.md states each operation's admissible inputs. A refusal
(`LayoutError`) happens only where no correct answer exists, or where warpy deliberately does not
extend what CuTe silently extends:

- composition is decided exactly: `composition(A, B)` is the strided layout R, over a refinement
  of B's shape, with `R(c) == A(B(c))` for every coordinate c of B, and it is refused exactly when
  no such layout exists (the message carries a witness). An inner layout running past the outer's
  domain is refused; CuTe would extend the outer's last mode, and the message gives that extended
  layout to compose with explicitly.
- complement is CuTe's, for layouts whose modes, sorted by stride, each start at or past the span
  of the one below (strides need not be multiples of it); interleaved, aliased or negative-stride
  modes are refused (CuTe's construction would give an extent 0 or less).
- a tile that does not divide the layout it divides is refused; CuTe would read past the end, and
  the message gives the padded layout to divide explicitly.

A *tiler* is a `Layout`, an int `n` (shorthand for `n:1`), `None` (CuTe's `_`: leave the mode
alone), or a tuple of tilers, applied by mode (CuTe's `Tile`; a tuple of ints is a `Shape` tiler).
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import product as _cartesian
from math import gcd
from typing import Iterator, Union, overload

from warpy.layout.core import Layout, LayoutError, _make, slice_and_offset
from warpy.layout.inttuple import IntTuple, flatten, product, to_str, unflatten
from warpy.layout.inttuple import idx2crd as natural_idx2crd
from warpy.layout.swizzle import Swizzle, SwizzledLayout

Tiler = Union[Layout, int, None, tuple["Tiler", ...]]
Pairs = list[tuple[int, int]]


# --- small helpers ------------------------------------------------------------------------


def size(x: Layout | SwizzledLayout | IntTuple) -> int:
    """Number of coordinates of a layout, or the product of a shape."""
    if isinstance(x, (Layout, SwizzledLayout)):
        return x.size()
    return product(x)


def cosize(x: Layout | SwizzledLayout | IntTuple) -> int:
    """CuTe's cosize `L(size-1)+1` (of a shape: its size, the compact layout's cosize)."""
    if isinstance(x, (Layout, SwizzledLayout)):
        return x.cosize()
    return product(x)


def crd2idx(crd: IntTuple, shape: Layout | IntTuple, stride: IntTuple | None = None) -> int:
    """The index of a coordinate: `layout(crd)`; with a shape alone, its colexicographic index."""
    if isinstance(shape, Layout):
        if stride is not None:
            raise LayoutError("crd2idx(crd, layout) takes no stride")
        return shape(crd)
    if stride is not None and type(crd) is int and type(shape) is tuple and type(stride) is tuple:
        # the common case, a flat index into a flat layout, without building the Layout
        idx: int = crd
        if idx >= 0 and len(shape) == len(stride):
            total = 0
            try:
                for s, d in zip(shape, stride):
                    if type(s) is not int or type(d) is not int or s < 1:
                        break
                    total += (idx % s) * d
                    idx //= s
                else:
                    if idx == 0:
                        return total
            except TypeError:
                pass
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
    leaves = tuple((idx // d) % s if d else 0 for s, d in lay.pairs())
    return unflatten(leaves, lay.shape)


def crd2crd(crd: IntTuple, dst_shape: IntTuple, src_shape: IntTuple | None = None) -> IntTuple:
    """A coordinate of one shape as a coordinate of another of the same size (CuTe's crd2crd).

    Tuple to tuple goes mode by mode; an int becomes the natural coordinate of `dst_shape`; a tuple
    becomes an int by its colexicographic index in `src_shape` (which is then needed).
    """
    if isinstance(crd, tuple):
        if isinstance(dst_shape, tuple):
            if len(crd) != len(dst_shape):
                raise LayoutError(f"crd2crd: coordinate {to_str(crd)} does not match shape {to_str(dst_shape)}")
            if src_shape is not None and (not isinstance(src_shape, tuple) or len(src_shape) != len(crd)):
                raise LayoutError(f"crd2crd: coordinate {to_str(crd)} does not match shape {to_str(src_shape)}")
            srcs: tuple[IntTuple | None, ...] = src_shape if isinstance(src_shape, tuple) else (None,) * len(crd)
            return tuple(crd2crd(c, d, s) for c, d, s in zip(crd, dst_shape, srcs))
        if src_shape is None:
            raise LayoutError(f"crd2crd: a tuple coordinate {to_str(crd)} into an int needs its source shape")
        return Layout(src_shape)(crd)
    if isinstance(dst_shape, tuple):
        return idx2crd(crd, dst_shape)
    if not 0 <= crd < dst_shape:
        raise LayoutError(f"crd2crd: coordinate {crd} is out of range for extent {dst_shape}")
    return crd


def _pairs(layout: Layout) -> Pairs:
    return list(layout.pairs())


def _from_pairs(pairs: Pairs) -> Layout:
    """A flat layout from (extent, stride) pairs: an int layout for one pair, `1:0` for none."""
    if not pairs:
        return _make(1, 0)
    if len(pairs) == 1:
        return _make(pairs[0][0], pairs[0][1])
    return _make(tuple(s for s, _ in pairs), tuple(d for _, d in pairs))


@overload
def make_layout(*modes: Layout) -> Layout: ...


@overload
def make_layout(shape: IntTuple, stride: IntTuple | None = None) -> Layout: ...


def make_layout(*modes: object) -> Layout:  # type: ignore[misc]
    """CuTe's make_layout: of layouts, their concatenation (each one a mode of the result); of a
    shape (and a stride), that layout (`make_layout((4,8))` is `(4,8):(1,4)`)."""
    if not modes:
        raise LayoutError("make_layout needs at least one mode, or a shape")
    if all(type(m) is Layout for m in modes):
        return _make(tuple(m.shape for m in modes), tuple(m.stride for m in modes))  # type: ignore[attr-defined]
    if any(isinstance(m, Layout) for m in modes):
        raise LayoutError("make_layout takes layouts (to concatenate) or a shape and a stride, not both")
    if len(modes) > 2:
        raise LayoutError(f"make_layout(shape, stride) takes at most 2 arguments, got {len(modes)}")
    return Layout(modes[0], modes[1] if len(modes) == 2 else None)  # type: ignore[arg-type]


def _as_layout(t: Layout | int, what: str) -> Layout:
    if type(t) is Layout:
        return t
    if isinstance(t, int) and not isinstance(t, bool):
        return Layout(t, 1)
    raise LayoutError(f"{what} must be a layout or an int, not {t!r}")


def _value_range(layout: Layout) -> tuple[int, int]:
    """(smallest, largest) value of a layout."""
    lo = hi = 0
    for s, d in layout.pairs():
        if d > 0:
            hi += (s - 1) * d
        else:
            lo += (s - 1) * d
    return lo, hi


def _modes(layout: Layout) -> list[Layout]:
    return [layout[i] for i in range(layout.rank())]


# --- coalesce and filter ------------------------------------------------------------------


def _coalesce_pairs(pairs: Pairs | tuple[tuple[int, int], ...]) -> Pairs:
    out: Pairs = []
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
        return _from_pairs(_coalesce_pairs(layout.pairs()))
    if len(profile) > layout.rank():
        raise LayoutError(f"coalesce: profile {to_str(profile)} has more modes than {layout}")
    modes = [coalesce(layout[i], p) for i, p in enumerate(profile)]
    modes += [layout[i] for i in range(len(profile), layout.rank())]
    return make_layout(*modes)


def filter(layout: Layout, profile: IntTuple | None = None) -> Layout:  # noqa: A001 - CuTe's name
    """CuTe's filter: drop the stride-0 and size-1 modes, then coalesce (`1:0` if none is left)."""
    if profile is not None and not isinstance(profile, int):
        if len(profile) > layout.rank():
            raise LayoutError(f"filter: profile {to_str(profile)} has more modes than {layout}")
        modes = [filter(layout[i], p) for i, p in enumerate(profile)]
        modes += [layout[i] for i in range(len(profile), layout.rank())]
        return make_layout(*modes)
    return _from_pairs(_coalesce_pairs([(s, d) for s, d in layout.pairs() if d != 0]))


# --- composition --------------------------------------------------------------------------
#
# A coalesced outer layout A with modes (s_i, d_i) at lows M_i (M_0 = 1, M_{i+1} = M_i s_i) is
#     A(x) = sum_i w_i * floor(x / M_i),   w_0 = d_0,  w_i = d_i - s_{i-1} d_{i-1}  (!= 0: coalesced).
# For one inner mode n:q, f(c) = A(q c) on [0, n) is a strided layout exactly when its greedy
# decomposition succeeds: its first coalesced mode is its longest run r (f(c) = c f(1) for c < r),
# r divides n, f(c0 + r j) = f(c0) + f(r j) (A adds the two parts without a carry that changes
# the sum), and j -> f(r j) is again strided. CuTe's rule (the stride and shape divisibility
# conditions) is the case where every run ends at a mode boundary of A; it is the fast path.


def _lows(outer: Pairs) -> list[int]:
    lows = []
    m = 1
    for s, _ in outer:
        lows.append(m)
        m *= s
    return lows


def _eval(outer: Pairs, x: int) -> int:
    total = 0
    for s, d in outer:
        total += (x % s) * d
        x //= s
    return total


def _argmax_mod(d: int, s: int, m: int) -> int:
    """A c in [0, s) maximising (d*c) % m."""
    d %= m
    if d == 0:
        return 0
    if d * (s - 1) < m:
        return s - 1
    g = gcd(d, m)
    period = m // g
    if s >= period:  # every multiple of g is reached; the largest is m - g
        return ((m - g) // g * pow(d // g, -1, period)) % period
    best, arg = -1, 0
    for c in range(s):
        v = (d * c) % m
        if v > best:
            best, arg = v, c
    return arg


def _carry_level(lows: list[int], leaves: Pairs, limit: int) -> int | None:
    """The first low M_i at which the leaves' values can carry when added, or None (carry-free).

    Carry-free at every level means A(sum x_k) == sum A(x_k) for every choice of the x_k.
    """
    for m in lows[1:]:
        if m > limit:
            break
        total = 0
        for s, d in leaves:
            total += (d * _argmax_mod(d, s, m)) % m
            if total >= m:
                return m
    return None


def _additivity_witness(outer: Pairs, lows: list[int], leaves: Pairs, limit: int) -> tuple[int, ...] | None:
    """None when A adds the leaves' values exactly (A(sum x_k) == sum A(x_k) for all choices),
    else a coordinate (one per leaf) where it does not.

    Decided by carries in A's mixed radix; only where carries cancel out by coincidence of A's
    strides is it checked point by point (exact, and it stops at the first difference).
    """
    m = _carry_level(lows, leaves, limit)
    if m is None:
        return None
    crd = tuple(_argmax_mod(d, s, m) for s, d in leaves)
    if _eval(outer, sum(c * d for c, (_, d) in zip(crd, leaves))) != sum(_eval(outer, c * d) for c, (_, d) in zip(crd, leaves)):
        return crd
    for crd in _cartesian(*(range(s) for s, _ in leaves)):
        if _eval(outer, sum(c * d for c, (_, d) in zip(crd, leaves))) != sum(_eval(outer, c * d) for c, (_, d) in zip(crd, leaves)):
            return crd
    return None


def _run(outer: Pairs, lows: list[int], n: int, q: int) -> tuple[int, int]:
    """(r, e): e = A(q) and r the first c in [1, n) with A(q c) != c e (n if none)."""
    e = _eval(outer, q)
    terms = [(m, q % m) for m in lows[1:] if q % m and m <= q * (n - 1)]
    cur = 0
    while True:
        # f(c) - c e changes only where some floor((q mod M) c / M) steps: the next such c
        nxt = n
        for m, b in terms:
            k = (b * cur) // m + 1  # the next multiple of m that b*c reaches
            c = -((-k * m) // b)
            if c < nxt:
                nxt = c
        if nxt >= n:
            return n, e
        if _eval(outer, q * nxt) != nxt * e:
            return nxt, e
        cur = nxt


def _compose_general(outer: Pairs, lows: list[int], n: int, q: int) -> Pairs | str:
    """The coalesced pairs of c -> A(q c) on [0, n), or why it is not a strided layout."""
    out: Pairs = []
    base = 1  # the inner coordinate step that q stands for
    while n > 1:
        r, e = _run(outer, lows, n, q)
        if r >= n:
            out.append((n, e))
            break
        if n % r:
            return (
                f"A(B(c)) advances by {e} for {r} steps of c (from c = 0 in steps of {base}), then not, "
                f"and the {n} values left are not a multiple of {r}"
            )
        m = n // r
        w = _additivity_witness(outer, lows, [(r, q), (m, q * r)], q * (n - 1))
        if w is not None:
            c = (w[0] + r * w[1]) * base
            return f"A(B(c)) is not strided: at c = {c} it is not the sum of its parts below and above {r * base}"
        out.append((r, e))
        q *= r
        base *= r
        n = m
    return out


def _compose_leaf(outer: Pairs, lows: list[int], n: int, q: int) -> Pairs | str:
    """c -> A(q c) on [0, n) (n >= 2, q >= 1, within A's domain): its coalesced pairs, or why not.

    The fast path is CuTe's rule (run through A's modes dividing the stride out, then keeping the
    first n elements), which is exact wherever it applies, including a mode of B that ends inside
    a mode of A whatever is left of that mode.
    """
    res: Pairs = []
    rest_n, rest_q = n, q
    for i in range(len(outer) - 1):
        s, d = outer[i]
        if rest_q % s == 0:
            rest_q //= s
            continue
        if s % rest_q == 0:
            r = s // rest_q
            if rest_n <= r:
                res.append((rest_n, rest_q * d))
                return res
            if rest_n % r:
                return (
                    f"it takes {r} steps through the extent-{s} mode of A, and the {rest_n} values left "
                    f"are not a multiple of {r}"
                )
            res.append((r, rest_q * d))
            rest_n //= r
            rest_q = 1
            continue
        if rest_q * (rest_n - 1) < s:  # ends inside this mode
            res.append((rest_n, rest_q * d))
            return res
        return _compose_general(outer, lows, n, q)
    res.append((rest_n, rest_q * outer[-1][1]))
    return res


def _extended(a: Layout, need: int) -> Layout:
    """A (coalesced) with its last mode extended to cover `need` indices (what CuTe does silently)."""
    outer = _coalesce_pairs(a.pairs()) or [(1, 0)]
    low = 1
    for s, _ in outer[:-1]:
        low *= s
    outer[-1] = (-(-need // low), outer[-1][1])
    return _from_pairs(outer)


def _compose_layouts(a: Layout, b: Layout) -> Layout:
    bp = b.pairs()
    lo = hi = 0
    for s, d in bp:
        if d > 0:
            hi += (s - 1) * d
        else:
            lo += (s - 1) * d
    n_a = a.size()
    if lo < 0:
        raise LayoutError(
            f"composition({a}, {b}) runs past the outer layout: the inner layout reaches index {lo} < 0, "
            f"which no extension of the outer layout covers"
        )
    if hi >= n_a:
        ext = _extended(a, hi + 1)
        raise LayoutError(
            f"composition({a}, {b}) runs past the outer layout: the inner layout reaches {hi}, the outer one "
            f"has coordinates 0..{n_a - 1}; CuTe would extend the outer's last mode, to ask for that "
            f"explicitly compose with composition({ext}, {b})"
        )
    outer = _coalesce_pairs(a.pairs())
    if not outer:  # A is a constant 0 on its one coordinate; B's values are all 0
        outer = [(1, 0)]
    lows = _lows(outer)
    single = len(outer) == 1

    def leaf(s: int, d: int) -> tuple[IntTuple, IntTuple]:
        if s == 1:
            return 1, 0
        if d == 0:
            return s, 0
        if single:
            return s, d * outer[0][1]
        got = _compose_leaf(outer, lows, s, d)
        if isinstance(got, str):
            raise LayoutError(
                f"composition({a}, {b}) has no strided answer: for the mode {s}:{d} of the inner layout, {got}"
            )
        if len(got) == 1:
            return got[0]
        return tuple(p[0] for p in got), tuple(p[1] for p in got)

    def go(shape: IntTuple, stride: IntTuple) -> tuple[IntTuple, IntTuple]:
        if type(shape) is int:
            return leaf(shape, stride)  # type: ignore[arg-type]
        parts = [go(s, d) for s, d in zip(shape, stride)]  # type: ignore[arg-type]
        return tuple(p[0] for p in parts), tuple(p[1] for p in parts)

    shape, stride = go(b.shape, b.stride)
    if not single:
        live = [(s, d) for s, d in bp if s != 1 and d != 0]
        if len(live) > 1 and not _modes_disjoint_aligned(live, lows, hi):
            w = _additivity_witness(outer, lows, live, hi)
            if w is not None:
                x = sum(c * d for c, (_, d) in zip(w, live))
                parts = sum(_eval(outer, c * d) for c, (_, d) in zip(w, live))
                raise LayoutError(
                    f"composition({a}, {b}) has no strided answer: the inner layout's modes add with a carry in the "
                    f"outer's coordinates (at inner index {x}: A = {_eval(outer, x)}, the modes' parts sum to {parts})"
                )
    return _make(shape, stride)


def _modes_disjoint_aligned(live: Pairs, lows: list[int], limit: int) -> bool:
    """A quick sufficient test for additivity: the inner modes, sorted by stride, occupy disjoint
    ranges [d, d*s), and each stride divides, or is a multiple of, each low of the outer below
    `limit` (then at each low only the highest mode below it wraps, and the ones under it fit in
    its stride: no carry)."""
    srt = sorted((d, s) for s, d in live)
    prev_end = 1
    for d, s in srt:
        if d < prev_end:
            return False
        for m in lows[1:]:
            if m > limit:
                break
            if d % m and m % d:
                return False
        prev_end = d * s
    return True


def _modes_disjoint(b: Layout) -> bool:
    """True when the inner layout's modes occupy disjoint ranges [d, d*s) (sorted by stride)."""
    live = sorted((d, s) for s, d in b.pairs() if s != 1 and d != 0)
    return all(d0 * s0 <= d1 for (d0, s0), (d1, _) in zip(live, live[1:]))


@overload
def composition(a: Layout, b: Tiler) -> Layout: ...


@overload
def composition(a: SwizzledLayout | Swizzle, b: Tiler) -> SwizzledLayout: ...


def composition(a: Layout | SwizzledLayout | Swizzle, b: Tiler) -> Layout | SwizzledLayout:
    """`R(c) = a(b(c))` for every coordinate c of b (CuTe's composition; b may be a tiler).

    A swizzled outer layout keeps its swizzle and offset: `swizzle(offset + (layout o b)(c))`;
    a swizzle composed with a layout is the swizzled layout (CuTe's `composition(Swizzle, Layout)`).
    """
    if isinstance(a, Swizzle):
        if b is None:
            raise LayoutError(f"composition({a}, _): a swizzle composes with a layout")
        if isinstance(b, SwizzledLayout):
            raise LayoutError(f"composition({a}, {b}): a swizzle of a swizzled layout is not supported")
        return SwizzledLayout(a, _as_layout(b, "a swizzle's inner layout") if not isinstance(b, tuple) else _tiler_layout(b))
    if isinstance(a, SwizzledLayout):
        return SwizzledLayout(a.swizzle, composition(a.layout, b), a.offset)
    if type(a) is not Layout:
        raise LayoutError(f"composition: the outer must be a layout or a swizzle, not {a!r}")
    if b is None:
        return a
    if type(b) is Layout:
        return _compose_layouts(a, b)
    if isinstance(b, tuple):
        if len(b) > a.rank():
            raise LayoutError(f"composition: tiler has {len(b)} modes, more than the {a.rank()} of {a}")
        modes = [composition(a[i], t) for i, t in enumerate(b)]
        modes += [a[i] for i in range(len(b), a.rank())]
        return make_layout(*modes)
    if isinstance(b, (SwizzledLayout, Swizzle)):
        raise LayoutError(f"composition({a}, {b}): a layout composed with a swizzle is not a layout")
    return _compose_layouts(a, _as_layout(b, "a composition's inner layout"))


def _tiler_layout(t: tuple[Tiler, ...]) -> Layout:
    modes = []
    for x in t:
        if x is None or isinstance(x, tuple):
            raise LayoutError("a swizzle composes with a layout, not a by-mode tiler")
        modes.append(_as_layout(x, "a tiler mode"))
    return make_layout(*modes)


# --- complement ---------------------------------------------------------------------------


def _complement_parts(a: Layout, what: str) -> tuple[Pairs, int]:
    """CuTe's complement before its last mode: the holes between a's modes, and their span."""
    live = sorted((d, s) for s, d in a.pairs() if s != 1 and d != 0)
    holes: Pairs = []
    cur = 1
    for d, s in live:
        if d < 0:
            raise LayoutError(f"{what} is not defined: stride {d} is negative (CuTe's complement needs positive strides)")
        if d < cur:
            raise LayoutError(
                f"{what} is not defined: sorted by stride, the mode {s}:{d} starts inside the span {cur} of the "
                f"modes below it (the modes interleave or alias), so CuTe's complement would have an extent 0"
            )
        holes.append((d // cur, cur))
        cur = s * d
    return holes, cur


def _complement_top(a: Layout, holes: Pairs, cur: int, m: int) -> int:
    """The extent of the complement's repeat mode: ceil(m / cur), or more where the holes leave
    the joint layout (a, complement) short of the cotarget (CuTe's own rule would then break its
    postcondition cosize((a, complement)) >= m)."""
    top = -(-m // cur)
    reach = sum((s - 1) * d for s, d in a.pairs()) + sum((s - 1) * d for s, d in holes) + (top - 1) * cur + 1
    if reach < m:
        top += -(-(m - reach) // cur)
    return top


def complement(a: Layout, cotarget: IntTuple | None = None) -> Layout:
    """CuTe's complement: the ordered layout of the repetitions of `a` up to `size(cotarget)`
    (default: cosize(a)), disjoint from `a`.

    With `a`'s modes sorted by stride, each gap between the span `c` of the modes below and the
    next stride `d` holds `d // c` repetitions (at stride c), and the last mode repeats the whole
    span up to the cotarget. Defined when each sorted stride is at least the span of the mode
    below it (it need not be a multiple of it); interleaved or aliased modes and negative strides
    have no such complement. Where the holes fall short, the repeat mode is longer than CuTe's
    `ceil(m / span)`, so that `cosize((a, complement)) >= m` always holds.
    """
    if type(a) is not Layout:
        raise LayoutError(f"complement takes a layout, not {a!r}")
    m = a.cosize() if cotarget is None else product(cotarget)
    holes, cur = _complement_parts(a, f"complement({a}, {m})")
    if m < 1:
        raise LayoutError(f"complement({a}, {m}): the cotarget {m} is not positive")
    top = _complement_top(a, holes, cur, m)
    return _from_pairs(_coalesce_pairs(holes + [(top, cur)]))


# --- divides ------------------------------------------------------------------------------


def _divide_one(a: Layout, tile: Layout) -> Layout:
    n = a.size()
    lo, hi = _value_range(tile)
    if lo < 0:
        raise LayoutError(f"logical_divide({a}, {tile}): the tile has a negative stride")
    if hi >= n:
        raise LayoutError(
            f"logical_divide({a}, {tile}): the tile is larger than the layout "
            f"(it reaches {hi}, the layout has size {n}); CuTe would read past the end, to ask for that "
            f"divide the padded layout: logical_divide({_extended(a, hi + 1)}, {tile})"
        )
    holes, cur = _complement_parts(tile, f"logical_divide({a}, {tile}): the complement of the tile")
    rest = _from_pairs(_coalesce_pairs(holes + [(_complement_top(tile, holes, cur, n), cur)]))
    joined = make_layout(tile, rest)
    top = hi + _value_range(rest)[1]
    if top >= n:
        raise LayoutError(
            f"logical_divide({a}, {tile}): the tile does not divide the layout (tile and its complement "
            f"{rest} reach {top}, the layout has size {n}); CuTe would read past the end, to ask for that "
            f"divide the padded layout: logical_divide({_extended(a, top + 1)}, {tile})"
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
    """Split a divided/product layout into (all tile modes, all rest modes + untouched modes).

    A `None` guide (CuTe's `_`) leaves its mode whole: tile `1:0`, rest the mode (as pycute).
    """
    if guide is None:
        return _make(1, 0), layout
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
    """`(A, A* o B)`: mode 0 the block A, mode 1 B's arrangement of unique copies of A.

    A* is `complement(A, size(A)*cosize(B))`; where B reaches past it, its last (repeat) mode is
    extended, as CuTe's composition does.
    """
    if tiler is None:
        return a
    if isinstance(tiler, tuple):
        if len(tiler) > a.rank():
            raise LayoutError(f"logical_product: tiler has {len(tiler)} modes, more than the {a.rank()} of {a}")
        modes = [logical_product(a[i], t) for i, t in enumerate(tiler)]
        modes += [a[i] for i in range(len(tiler), a.rank())]
        return make_layout(*modes)
    b = _as_layout(tiler, "a tiler")
    lo, hi = _value_range(b)
    if lo < 0:
        raise LayoutError(f"logical_product({a}, {b}): the tiler has a negative stride")
    holes, cur = _complement_parts(a, f"logical_product({a}, {b}): complement({a})")
    top = _complement_top(a, holes, cur, a.size() * b.cosize())
    inside = product(tuple(s for s, _ in holes)) if holes else 1
    top = max(top, -(-(hi + 1) // inside))
    rest = _from_pairs(_coalesce_pairs(holes + [(top, cur)]))
    return make_layout(a, composition(rest, b))


def _append(layout: Layout, rank: int) -> Layout:
    """Pad to `rank` modes with 1:0 (CuTe's append<R>)."""
    if layout.rank() >= rank:
        return layout
    modes = _flat_modes(layout) + [_make(1, 0)] * (rank - layout.rank())
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


@overload
def right_inverse(layout: Layout) -> Layout: ...


@overload
def right_inverse(layout: Swizzle) -> Swizzle: ...


def right_inverse(layout: Layout | Swizzle) -> Layout | Swizzle:
    """CuTe's right inverse: the compact R with `layout(R(i)) == i` for i < size(R) that follows
    the strides 1, s*d, ... of `layout` (coalesced) as far as they go (`1:0` if no stride is 1).

    A swizzle is its own inverse.
    """
    if isinstance(layout, Swizzle):
        return layout
    if type(layout) is not Layout:
        raise LayoutError(f"right_inverse takes a layout or a swizzle, not {layout!r}")
    pairs = _coalesce_pairs(layout.pairs())
    pre = _lows(pairs)
    out: Pairs = []
    cur = 1
    for i in sorted(range(len(pairs)), key=lambda k: pairs[k][1]):
        s, d = pairs[i]
        if d == cur:
            out.append((s, pre[i]))
            cur = s * d
    return _from_pairs(_coalesce_pairs(out))


# The left inverse beyond CuTe's form. A strided layout M is, over any radix chain, a sum of
# floors: with M's modes (t_1, t_2, ...):(f_1, f_2, ...) and T_j = t_1 ... t_j,
#
#     M(y) = f_1 y + sum_j g_j floor(y / T_j),    g_j = f_{j+1} - t_j f_j,
#
# (write each digit floor(y/T_{j-1}) mod t_j as floor(y/T_{j-1}) - t_j floor(y/T_j) and collect the
# terms); conversely any chain 1 | C_1 | C_2 | ... with any integer weights w_0, w_1, ... is such
# a layout (t_j = C_j / C_{j-1}, f_1 = w_0, f_{j+1} = w_j + t_j f_j). A boundary above the largest
# point y_max of L's image sees floor = 0 everywhere, and a chain is a subset of a maximal one whose
# steps are primes (extra boundaries carry weight 0). So a strided left inverse of an injective L
# exists iff, for some chain of prime steps below y_max, the integer linear system
# x(y) = sum_j w_j floor(y / C_j) (C_0 = 1; one equation per image point y, x(y) the index L maps
# to y) has an integer solution. `_li_search` decides that by a depth-first search over the chain:
#
# - at a chain ending in B, the later boundaries are multiples 2B, 3B, ... of B, so two points with
#   the same floor(y / B) get the same later terms: their difference is an equation in the weights
#   chosen so far; a point below 2B gets no later terms at all (an equation as it stands). These are
#   implied by every extension, so an inconsistent system prunes the whole subtree (sound);
# - the solutions so far are kept as an integer particular solution plus an integer basis of the
#   kernel (each new equation: extended gcd over the basis), so consistency over the integers is
#   decided exactly, not over the rationals;
# - the next boundary B*p matters only through floor(y / (B*p)) of the points still open (the rows
#   it adds, and the quotient points the rest of the search sees), so of the primes p giving the same
#   floors only the first is tried; and where the weights are pinned (no kernel left), a subtree that
#   failed is remembered by (floor(y / B), residual) of its open points, which is all its future
#   depends on.
#
# Exhausting the search is a proof that no strided left inverse exists. Its cost is bounded by
# _LI_WORK steps (and _LI_POINTS image points); past it the refusal says "undecided".

#: Most image points enumerated for the left-inverse search (beyond CuTe's form).
_LI_POINTS = 1 << 16
#: Most steps (equations, boundaries tried, look-ups) of the left-inverse search before it gives up
#: ("undecided"): 6-30 us a step at a load of 10 on 2 cores, so up to ~12 s there.
_LI_WORK = 400_000


class _Undecided(Exception):
    pass


def _primes_upto(n: int) -> list[int]:
    if n < 2:
        return []
    sieve = bytearray([1]) * (n + 1)
    sieve[0] = sieve[1] = 0
    i = 2
    while i * i <= n:
        if sieve[i]:
            sieve[i * i :: i] = bytearray(len(range(i * i, n + 1, i)))
        i += 1
    return [k for k in range(n + 1) if sieve[k]]


_Lattice = tuple[list[int], list[list[int]]]  # (a particular integer solution, a kernel basis)


def _li_add_row(lat: _Lattice, a: list[int], b: int) -> _Lattice | None:
    """The integer solutions of the system so far that also satisfy `a . w == b`, or None."""
    ws, basis = lat
    c = [sum(x * y for x, y in zip(a, k)) for k in basis]
    beta = b - sum(x * y for x, y in zip(a, ws))
    live = [i for i, ci in enumerate(c) if ci]
    if not live:
        return lat if beta == 0 else None
    basis = [list(k) for k in basis]
    while len(live) > 1:  # Euclid over the basis: one vector left with a . k = gcd
        live.sort(key=lambda i: abs(c[i]))
        i0 = live[0]
        for j in live[1:]:
            q = c[j] // c[i0]
            c[j] -= q * c[i0]
            basis[j] = [x - q * y for x, y in zip(basis[j], basis[i0])]
        live = [i for i in live if c[i]]
    g = live[0]
    if beta % c[g]:
        return None
    t = beta // c[g]
    return [w + t * k for w, k in zip(ws, basis[g])], [k for i, k in enumerate(basis) if i != g]


def _li_search(points: list[tuple[int, int]]) -> tuple[list[int], list[int]] | None:
    """A chain 1 = C_0 | C_1 | ... and integer weights with x == sum_j w_j floor(y / C_j) at every
    (y, x) of `points` (sorted by y, (0, 0) first), or None when none exists (proven: the search is
    exhaustive); _Undecided past _LI_WORK steps.

    A node holds the chain, a particular solution `ws` of the equations so far, a basis `kern` of
    their integer kernel (the free parameters), and the open points (y, r, cv): r is x minus the
    particular solution's value at y, cv the free parameters' coefficients at y, so an equation is
    `cv . u == r` over the (few) parameters, or `r == 0` once none is left."""
    top = points[-1][0]
    primes = _primes_upto(top // 2)
    work = [0]
    failed: set[tuple[tuple[int, int], ...]] = set()
    Open = list[tuple[int, int, tuple[int, ...]]]

    def options(b: int, pend: Open) -> Iterator[int | None]:
        """None (no further boundary), then the boundaries b*p <= top, p prime, one for each
        distinct tuple of floors floor(y / (b*p)) over the open points. Below sqrt of the largest
        point, every one; above, the next boundary at which some floor changes is the least
        floor(y_k / k) + 1 over k >= 1, y_k the first open point at or past k*b2."""
        yield None
        if not pend:
            return
        ys = [y for y, _, _ in pend]
        far = ys[-1]
        i = 0
        while i < len(primes) and (b * primes[i]) ** 2 <= far:  # small: the floors change at each
            yield b * primes[i]
            i += 1
        while i < len(primes) and b * primes[i] <= far:
            b2 = b * primes[i]
            yield b2
            nxt = far + 1
            work[0] += far // b2  # the look-ups below count as work too
            for k in range(1, far // b2 + 1):
                j = bisect_left(ys, b2 * k)
                nxt = min(nxt, ys[j] // k + 1)
            i = bisect_left(primes, -(-nxt // b), i + 1)

    def pinned_step(ws: list[int], pend: Open, b2: int) -> tuple[list[int], list[list[int]], Open] | None:
        """No free parameter before b2: its weight u is the only one; differences compare r."""
        u: int | None = None
        reps: dict[int, int] = {}
        keep: list[tuple[int, int]] = []
        lim = 2 * b2
        for y, r, _ in pend:
            if y < lim:
                f = y // b2
                if not f:
                    if r:
                        return None
                elif u is None:
                    if r % f:
                        return None
                    u = r // f
                elif u * f != r:
                    return None
            else:
                q = y // b2
                r0 = reps.get(q)
                if r0 is None:
                    reps[q] = r
                    keep.append((y, r))
                elif r0 != r:
                    return None
        work[0] += len(pend) // 16 + 1
        if u is None:  # the new weight stays free
            return ws + [0], [[0] * len(ws) + [1]], [(y, r, (y // b2,)) for y, r in keep]
        return ws + [u], [], [(y, r - u * (y // b2), ()) for y, r in keep]

    def general_step(
        chain: list[int], ws: list[int], kern: list[list[int]], pend: Open, b2: int | None
    ) -> tuple[list[int], list[list[int]], Open] | None:
        n = len(kern) + (b2 is not None)
        lat: _Lattice | None = ([0] * n, [[int(i == j) for j in range(n)] for i in range(n)])
        keep: Open = []
        reps: dict[int, tuple[tuple[int, ...], int]] = {}
        for y, r, cv in pend:
            c = list(cv) + [y // b2] if b2 is not None else list(cv)
            if b2 is None or y < 2 * b2:
                row, rhs = c, r
            else:
                q = y // b2
                rep = reps.get(q)
                if rep is None:
                    reps[q] = (cv, r)
                    keep.append((y, r, tuple(c)))
                    continue
                row, rhs = [p - v for p, v in zip(cv, rep[0])] + [0], r - rep[1]
            work[0] += 1
            assert lat is not None
            lat = _li_add_row(lat, row, rhs)
            if lat is None:
                return None
        if work[0] > _LI_WORK:
            raise _Undecided
        assert lat is not None
        us, vs = lat
        base = [k + [0] for k in kern] + [[0] * len(ws) + [1]] if b2 is not None else kern
        width = len(ws) + (b2 is not None)
        nws = (ws + [0]) if b2 is not None else list(ws)
        for uk, kv in zip(us, base):
            nws = [w + uk * k for w, k in zip(nws, kv)]
        nkern = [[sum(v[k] * base[k][j] for k in range(n)) for j in range(width)] for v in vs]
        npend = [
            (y, r - sum(u * x for u, x in zip(us, c)), tuple(sum(v[k] * c[k] for k in range(n)) for v in vs))
            for y, r, c in keep
        ]
        return nws, nkern, npend

    def dfs(chain: list[int], ws: list[int], kern: list[list[int]], pend: Open) -> tuple[list[int], list[int]] | None:
        b = chain[-1]
        key = None
        if not kern:
            key = tuple((y // b, r) for y, r, _ in pend)
            if key in failed:
                return None
        for b2 in options(b, pend):
            work[0] += 1
            if work[0] > _LI_WORK:
                raise _Undecided
            if b2 is not None and not kern:
                got = pinned_step(ws, pend, b2)
            else:
                got = general_step(chain, ws, kern, pend, b2)
            if got is None:
                continue
            if b2 is None:
                return chain, got[0]
            found = dfs(chain + [b2], *got)
            if found is not None:
                return found
        if key is not None:
            failed.add(key)
        return None

    # the chain [1]: w_0 multiplies y; the point 1 (if any) is below 2 and fixes it
    start = general_step([], [], [], [(y, x, ()) for y, x in points[1:]], 1)
    if start is None:
        return None
    return dfs([1], *start)


def _li_general(layout: Layout, pairs: Pairs, pre: list[int], why: str) -> Layout:
    """A strided left inverse where CuTe's form does not apply (`why`), or the refusal: proven (no
    strided layout is one) or, past the search's bound, marked undecided."""
    live = [(s, d, e) for (s, d), e in zip(pairs, pre) if d != 0]
    n = 1
    for s, _, _ in live:
        n *= s
    if n > _LI_POINTS:
        raise LayoutError(
            f"left_inverse({layout}) is undecided: {why}, and the search for another strided left inverse "
            f"enumerates at most {_LI_POINTS} points ({n} here)"
        )
    image = {0: 0}
    for s, d, e in live:
        nxt: dict[int, int] = {}
        for y, x in image.items():
            for k in range(s):
                z = y + k * d
                if z in nxt:
                    raise LayoutError(
                        f"left_inverse({layout}) is not defined: indices {nxt[z]} and {x + k * e} both map to {z}, "
                        f"so the layout is not injective"
                    )
                nxt[z] = x + k * e
        image = nxt
    points = sorted(image.items())
    top = points[-1][0]
    try:
        got = _li_search(points)
    except _Undecided:
        raise LayoutError(
            f"left_inverse({layout}) is undecided: {why}, and the search for another strided left inverse "
            f"stopped after {_LI_WORK} steps (cosize {top + 1}, {len(points)} points)"
        ) from None
    if got is None:
        raise LayoutError(
            f"left_inverse({layout}) is not defined: {why}, and no strided layout M has M(L(i)) == i for "
            f"every i (decided by an exhaustive search over M's radix orders below cosize {top + 1})"
        )
    chain, ws = got
    shapes = [chain[j] // chain[j - 1] for j in range(1, len(chain))] + [-(-(top + 1) // chain[-1])]
    strides = [ws[0]]
    for j in range(1, len(shapes)):
        strides.append(ws[j] + shapes[j - 1] * strides[j - 1])
    out = _from_pairs(_coalesce_pairs(list(zip(shapes, strides))))
    assert all(out(y) == x for y, x in points)  # the search's answer, checked at every point
    return out


@overload
def left_inverse(layout: Layout) -> Layout: ...


@overload
def left_inverse(layout: Swizzle) -> Swizzle: ...


def left_inverse(layout: Layout | Swizzle) -> Layout | Swizzle:
    """A strided layout Li with `Li(layout(i)) == i` for every i < size(layout), whenever one exists.

    CuTe's construction where it applies: with the modes of `layout` (coalesced, stride-0 modes left
    out) sorted by stride d_0 < d_1 < ..., a mode (d_0 : 0), then for each mode the gap d_{k+1} / d_k
    at that mode's compact stride, and the last mode's extent; it needs each sorted stride to divide
    the next. Where that fails, a search over Li's radix orders decides whether any strided left
    inverse exists (`left_inverse((2,3):(14,3))` is one; see the comment above `_li_search`), and
    the refusal then says none exists, or, past the search's bound, "undecided". Refused also for a
    negative stride (a value < 0 is outside every layout's domain) and where the layout is not
    injective but for its stride-0 modes (two indices share a value); with stride-0 modes the result
    is CuTe's quasi-inverse: `layout(Li(layout(i))) == layout(i)`. A swizzle is its own inverse.
    """
    if isinstance(layout, Swizzle):
        return layout
    if type(layout) is not Layout:
        raise LayoutError(f"left_inverse takes a layout or a swizzle, not {layout!r}")
    pairs = _coalesce_pairs(layout.pairs())
    pre = _lows(pairs)
    order = [i for i in sorted(range(len(pairs)), key=lambda k: pairs[k][1]) if pairs[i][1] != 0]
    if not order:
        return _make(1, 0)
    shapes: list[int] = []
    strides: list[int] = [0]
    span = 1  # the size of the result so far
    prev_end = 1
    for i in order:
        s, d = pairs[i]
        if d < 0:
            raise LayoutError(f"left_inverse({layout}) is not defined: stride {d} is negative")
        if d % span:
            return _li_general(
                layout, pairs, pre, f"CuTe's form needs each sorted stride to divide the next ({span} does not divide {d})"
            )
        if d < prev_end:
            raise LayoutError(
                f"left_inverse({layout}) is not defined: the mode {s}:{d} starts inside the span {prev_end} of the "
                f"modes with smaller strides, so the layout is not injective"
            )
        shapes.append(d // span)
        strides.append(pre[i])
        span = d
        prev_end = s * d
    shapes.append(pairs[order[-1]][0])
    return _from_pairs(_coalesce_pairs(list(zip(shapes, strides))))


__all__ = [
    "Tiler",
    "blocked_product",
    "coalesce",
    "complement",
    "composition",
    "cosize",
    "crd2crd",
    "crd2idx",
    "filter",
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
    "slice_and_offset",
    "tiled_divide",
    "tiled_product",
    "zipped_divide",
    "zipped_product",
]
