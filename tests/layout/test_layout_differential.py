"""Differential tests: warpy.layout against the independent reference of layout_reference.py.

Each operation runs on N seeded random inputs (nested shapes; compact, padded, zero, random and
negative strides) and every answer is checked point by point against its definition; every
refusal is checked to come with a proof: the reference agrees that no (strided) answer exists.
The loops are seeded, so a failure names its input and reproduces. N is 10,000 per operation
(WARPY_LAYOUT_EXAMPLES overrides it); hypothesis tests over the same kinds of layouts follow.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from typing import Callable

import layout_reference as ref
import pytest
from hypothesis import HealthCheck, given, settings
from layout_strategies import any_layouts, random_layout

from warpy.layout import (
    Layout,
    LayoutError,
    blocked_product,
    coalesce,
    complement,
    composition,
    flat_divide,
    flat_product,
    left_inverse,
    logical_divide,
    logical_product,
    raked_product,
    right_inverse,
    tiled_divide,
    tiled_product,
    zipped_divide,
    zipped_product,
)

N = int(os.environ.get("WARPY_LAYOUT_EXAMPLES", "10000"))


def pairs(x: Layout) -> ref.Pairs:
    return ref.flat(x.shape, x.stride)


def parts(x: Layout) -> tuple[object, object]:
    return (x.shape, x.stride)


def run(seed: int, case: Callable[[random.Random], str], answers: int = 0) -> Counter[str]:
    """N cases from one seed (or, with `answers`, as many as give that many 'ok' answers, at most
    5N); each returns its outcome ('ok', 'refused', ...) or raises."""
    rng = random.Random(seed)
    seen: Counter[str] = Counter()
    for _ in range(N if not answers else 5 * N):
        seen[case(rng)] += 1
        if answers and seen["ok"] >= answers and sum(seen.values()) >= N:
            break
    return seen


def _inner(rng: random.Random, a: Layout) -> Layout:
    """An inner layout for A: a prefix k:1, one strided mode, or a random nested layout."""
    k = rng.random()
    if k < 0.3:
        return Layout(rng.randint(1, a.size()), 1)
    if k < 0.55:
        return Layout(rng.randint(1, 12), rng.randint(0, 16))
    return random_layout(rng, max_leaves=3, max_extent=5, max_stride=12)


# --- composition --------------------------------------------------------------------------


def composition_case(rng: random.Random) -> str:
    a = random_layout(rng, max_extent=8, max_stride=30)
    b = _inner(rng, a)
    try:
        expected = ref.compose(parts(a), parts(b))
        past = False
    except ref.RunsPast:
        past = True
    try:
        got = composition(a, b)
    except LayoutError as e:
        if past:
            assert "runs past" in str(e), (str(a), str(b), str(e))
            return "runs past"
        assert expected is None, f"false refusal: {a} o {b} = {expected}, warpy: {e}"
        assert "no strided answer" in str(e)
        return "refused"
    assert not past, f"{a} o {b}: the inner layout leaves A's domain, warpy gave {got}"
    assert expected is not None, f"wrong answer: {a} o {b} has no strided form, warpy gave {got}"
    assert parts(got) == expected, f"{a} o {b}: warpy {got}, reference {expected}"
    return "ok"


def test_composition_differential() -> None:
    seen = run(1, composition_case)
    assert seen["ok"] > N // 4 and seen["refused"] > N // 20 and seen["runs past"] > N // 20, seen


def composition_by_mode_case(rng: random.Random) -> str:
    a = random_layout(rng, max_leaves=4, max_extent=6, max_stride=20)
    if not isinstance(a.shape, tuple):
        return "skip"
    tiler = tuple(rng.choice([None, _inner(rng, a[i])]) for i in range(rng.randint(1, a.rank())))
    modes = []
    for i in range(a.rank()):
        t = tiler[i] if i < len(tiler) else None
        try:
            modes.append(a[i] if t is None else ref.compose(parts(a[i]), parts(t)))
        except ref.RunsPast:
            modes.append("past")
    try:
        got = composition(a, tiler)
    except LayoutError:
        assert any(m is None or m == "past" for m in modes)
        return "refused"
    for i, m in enumerate(modes):
        assert m not in (None, "past")
        assert (got[i] == m) if isinstance(m, Layout) else parts(got[i]) == m
    return "ok"


def test_composition_by_mode_differential() -> None:
    seen = run(2, composition_by_mode_case)
    assert seen["ok"] > N // 10, seen


def test_composition_large_overlapping_modes_is_decided() -> None:
    # above 65,536 points: decided symbolically, not refused (issue 22, 3)
    a, b = Layout.parse("(8,20000):(1,100)"), Layout.parse("(2,2,20000):(1,1,8)")
    r = composition(a, b)
    assert str(r) == "(2,2,20000):(1,1,100)"
    rng = random.Random(0)
    for _ in range(2000):
        i = rng.randrange(b.size())
        assert r(i) == a(b(i))


# --- complement ---------------------------------------------------------------------------


def complement_case(rng: random.Random) -> str:
    a = random_layout(rng, max_extent=6, max_stride=40)
    m = rng.randint(1, 3 * max(1, sum((s - 1) * abs(d) for s, d in pairs(a)) + 1))
    try:
        r = complement(a, m)
    except LayoutError as e:
        assert "not defined" in str(e)
        assert ref.interleaved_or_negative(pairs(a)), f"false refusal: complement({a}, {m}): {e}"
        return "refused"
    assert not ref.interleaved_or_negative(pairs(a))
    why = ref.complement_ok(pairs(a), m, pairs(r))
    assert why is None, f"complement({a}, {m}) = {r}: {why}"
    # no larger than needed: its last repetition (a mode past all of A) is needed to reach m
    rp = pairs(r)
    top_s, top_d = rp[-1]
    if top_s > 1 and top_d > max((s - 1) * d for s, d in pairs(a)):
        shorter = rp[:-1] + [(top_s - 1, top_d)]
        assert sum((s - 1) * d for s, d in pairs(a) + shorter) + 1 < m, f"complement({a}, {m}) = {r} is too long"
    return "ok"


def test_complement_differential() -> None:
    seen = run(3, complement_case)
    assert seen["ok"] > N // 4 and seen["refused"] > N // 10, seen


# --- divides ------------------------------------------------------------------------------


def _tile(rng: random.Random, n: int) -> Layout | int:
    k = rng.random()
    if k < 0.3:
        return rng.randint(1, n)
    if k < 0.6:
        return random_layout(rng, max_leaves=2, max_extent=4, max_stride=8, kinds=("compact", "padded"))
    return random_layout(rng, max_leaves=2, max_extent=4, max_stride=8)


def divide_case(rng: random.Random) -> str:
    a = random_layout(rng, max_extent=6, max_stride=30)
    tile = _tile(rng, a.size())
    t = Layout(tile, 1) if isinstance(tile, int) else tile
    n = a.size()
    lo = sum((s - 1) * d for s, d in pairs(t) if d < 0)
    hi = sum((s - 1) * d for s, d in pairs(t) if d > 0)
    try:
        d = logical_divide(a, tile)
    except LayoutError as e:
        msg = str(e)
        if "negative stride" in msg:
            assert lo < 0
        elif "larger than the layout" in msg:
            assert hi >= n
        elif "does not divide" in msg:
            rest = complement(t, n)
            assert hi + sum((s - 1) * x for s, x in pairs(rest)) >= n  # it would read past the end
        elif "is not defined" in msg:
            assert ref.interleaved_or_negative(pairs(t))
        else:
            assert "no strided answer" in msg, msg
            rest = complement(t, n)
            joined = (t.shape, rest.shape), (t.stride, rest.stride)
            assert ref.compose(parts(a), joined) is None, f"false refusal: logical_divide({a}, {t})"
        for other in (zipped_divide, tiled_divide, flat_divide):
            with pytest.raises(LayoutError):
                other(a, tile)
        return "refused"
    rest = complement(t, n)
    expected = ref.compose(parts(a), ((t.shape, rest.shape), (t.stride, rest.stride)))
    assert expected is not None and parts(d) == expected, f"logical_divide({a}, {t}) = {d}, reference {expected}"
    values = d.values()
    for other in (zipped_divide(a, tile), tiled_divide(a, tile), flat_divide(a, tile)):
        assert other.values() == values
    z = zipped_divide(a, tile)
    assert z[0] == d[0] and z[1] == d[1]
    return "ok"


def test_divides_differential() -> None:
    seen = run(4, divide_case, answers=N)  # N answers of each divide, and the refusals on the way
    assert seen["ok"] >= N and seen["refused"] > N // 20, seen


def divide_by_mode_case(rng: random.Random) -> str:
    a = random_layout(rng, max_leaves=4, max_extent=6, max_stride=20, kinds=("compact", "padded", "random"))
    if not isinstance(a.shape, tuple):
        return "skip"
    tiler = tuple(rng.choice([None, _tile(rng, a[i].size())]) for i in range(rng.randint(1, a.rank())))
    try:
        d = logical_divide(a, tiler)
    except LayoutError:
        for i, t in enumerate(tiler):
            if t is not None:
                try:
                    logical_divide(a[i], t)
                except LayoutError:
                    return "refused"
        raise AssertionError(f"logical_divide({a}, {tiler}) refused, but every mode divides")
    for i in range(a.rank()):
        t = tiler[i] if i < len(tiler) else None
        assert d[i] == (a[i] if t is None else logical_divide(a[i], t))
    z = zipped_divide(a, tiler)
    tiles = [Layout(1, 0) if t is None else d[i][0] for i, t in enumerate(tiler)]
    rests = [d[i] if t is None else d[i][1] for i, t in enumerate(tiler)] + [a[i] for i in range(len(tiler), a.rank())]
    assert [z[0][i] for i in range(len(tiler))] == tiles
    assert [z[1][i] for i in range(len(rests))] == rests
    assert sorted(tiled_divide(a, tiler).values()) == sorted(z.values()) == sorted(flat_divide(a, tiler).values())
    return "ok"


def test_divide_by_mode_differential() -> None:
    seen = run(5, divide_by_mode_case)
    assert seen["ok"] > N // 5, seen


# --- products -----------------------------------------------------------------------------


def product_case(rng: random.Random) -> str:
    a = random_layout(rng, max_leaves=3, max_extent=5, max_stride=20)
    b: Layout | int = (
        rng.randint(1, 6) if rng.random() < 0.2 else random_layout(rng, max_leaves=2, max_extent=4, max_stride=8)
    )
    bl = Layout(b, 1) if isinstance(b, int) else b
    try:
        p = logical_product(a, b)
    except LayoutError as e:
        msg = str(e)
        if "negative stride" in msg:
            assert any(d < 0 and s > 1 for s, d in pairs(bl))
        elif "not defined" in msg:
            assert ref.interleaved_or_negative(pairs(a))
        else:
            assert "no strided answer" in msg, msg
            big = complement(a, a.size() * (bl.cosize() + 1) * (bl.cosize() + 1))
            assert ref.compose(parts(big), parts(bl)) is None, f"false refusal: logical_product({a}, {bl})"
        for other in (zipped_product, tiled_product, flat_product):
            with pytest.raises(LayoutError):
                other(a, bl)
        return "refused"
    assert p[0] == a
    # mode 1 is A's complement (its repeat mode extended as far as B needs) after B, point by point
    big = complement(a, a.size() * (bl.cosize() + 1) * (bl.cosize() + 1))
    bp, gp = pairs(big), pairs(p[1])
    assert ref.table(gp) == [ref.evaluate(bp, x) for x in ref.table(pairs(bl))]
    assert ref.as_layout_parts(ref.coalesce_pairs(pairs(bl))) is not None
    # unique copies: when A (on its live modes) and B are injective, so is the product
    live = [(s, d) for s, d in pairs(a) if d != 0]
    if ref.injective(live) and ref.injective(pairs(bl)):
        assert ref.injective([(s, d) for s, d in pairs(p) if (s, d) not in [(s2, 0) for s2, _ in pairs(a)]] or [(1, 0)])
    values = p.values()
    for other in (zipped_product(a, b), tiled_product(a, b), flat_product(a, b)):
        assert other.values() == values
    for other in (blocked_product(a, bl), raked_product(a, bl)):
        assert sorted(other.values()) == sorted(values)
        assert other.rank() == max(a.rank(), bl.rank())
    return "ok"


def test_products_differential() -> None:
    seen = run(6, product_case, answers=N)  # N answers of each product, and the refusals on the way
    assert seen["ok"] >= N and seen["refused"] > N // 50, seen


# --- inverses -----------------------------------------------------------------------------


def right_inverse_case(rng: random.Random) -> str:
    a = random_layout(rng, max_extent=6, max_stride=24)
    r = right_inverse(a)
    ap = pairs(a)
    assert ref.right_inverse_ok(ap, pairs(r)), f"right_inverse({a}) = {r}"
    assert r.size() <= ref.largest_contiguous_prefix(ap)
    vals = ref.table(ap)
    if sorted(vals) == list(range(len(vals))):  # a bijection: the inverse is whole
        assert r.size() == a.size()
        assert all(ref.evaluate(pairs(r), v) == i for i, v in enumerate(vals))
        return "bijection"
    if 1 in vals and any(d == 1 and s > 1 for s, d in ap):
        assert r.size() >= 2
    return "ok"


def test_right_inverse_differential() -> None:
    seen = run(7, right_inverse_case)
    assert seen["bijection"] > N // 10, seen


#: The brute-force reference's largest cosize in the default run (a refusal of a larger layout is
#: checked against it with WARPY_SLOW=1: ~120 s for the 709 refusals of the 10,000).
REF_COSIZE = 10**9 if os.environ.get("WARPY_SLOW") == "1" else 64


def left_inverse_refusal_proven(a: Layout, message: str, ref_cosize: int = REF_COSIZE) -> str:
    """Why a refusal of left_inverse(a) is right, from the definitions (or an AssertionError): a
    negative stride (a value < 0 is in no layout's domain), two indices with one value (but for
    stride-0 modes), or the brute-force reference finds no strided left inverse."""
    assert "undecided" not in message, message
    ap = pairs(a)
    if any(s > 1 and d < 0 for s, d in ap):
        assert "negative" in message, message
        return "negative"
    targets = ref.image_targets(ap)
    if targets is None:
        assert "not injective" in message, message
        return "not injective"
    assert "no strided layout M" in message, message
    if a.cosize() > ref_cosize:
        return "unchecked"
    found = ref.strided_left_inverse(targets)
    assert found is None, f"false refusal: left_inverse({a}); {found} is one"
    return "proven"


def left_inverse_case(rng: random.Random) -> str:
    a = random_layout(rng, max_extent=6, max_stride=24)
    try:
        li = left_inverse(a)
    except LayoutError as e:
        return "refused: " + left_inverse_refusal_proven(a, str(e))
    assert ref.left_inverse_ok(pairs(a), pairs(li)), f"left_inverse({a}) = {li}"
    return "ok"


def test_left_inverse_differential() -> None:
    seen = run(8, left_inverse_case)
    assert seen["ok"] > N // 2 and seen["refused: proven"] > N // 200 and seen["refused: not injective"] > N // 20, seen


# --- coalesce -----------------------------------------------------------------------------


def coalesce_case(rng: random.Random) -> str:
    a = random_layout(rng, max_extent=6, max_stride=24)
    c = coalesce(a)
    assert parts(c) == ref.as_layout_parts(ref.coalesce_pairs(pairs(a))), f"coalesce({a}) = {c}"
    if isinstance(a.shape, tuple):
        by_mode = coalesce(a, (1,) * a.rank())
        assert by_mode.rank() == a.rank()
        for i in range(a.rank()):
            assert parts(by_mode[i]) == ref.as_layout_parts(ref.coalesce_pairs(pairs(a[i])))
    return "ok"


def test_coalesce_differential() -> None:
    assert run(9, coalesce_case)["ok"] == N


# --- hypothesis, over the same kinds of layouts --------------------------------------------

HYP = settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


@HYP
@given(any_layouts(), any_layouts(max_leaves=3, max_stride=12))
def test_composition_hypothesis(a: Layout, b: Layout) -> None:
    try:
        expected = ref.compose(parts(a), parts(b))
    except ref.RunsPast:
        with pytest.raises(LayoutError, match="runs past"):
            composition(a, b)
        return
    if expected is None:
        with pytest.raises(LayoutError, match="no strided answer"):
            composition(a, b)
    else:
        assert parts(composition(a, b)) == expected


@HYP
@given(any_layouts(max_stride=40))
def test_complement_and_inverses_hypothesis(a: Layout) -> None:
    m = a.size() * 3
    try:
        r = complement(a, m)
        assert ref.complement_ok(pairs(a), m, pairs(r)) is None
    except LayoutError:
        assert ref.interleaved_or_negative(pairs(a))
    assert ref.right_inverse_ok(pairs(a), pairs(right_inverse(a)))
    try:
        li = left_inverse(a)
    except LayoutError as e:
        left_inverse_refusal_proven(a, str(e))
    else:
        assert ref.left_inverse_ok(pairs(a), pairs(li))


@settings(max_examples=int(os.environ.get("WARPY_LI_EXAMPLES", "2000" if os.environ.get("WARPY_SLOW") == "1" else "250")),
          deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(any_layouts(max_leaves=3, max_extent=5, max_stride=16))
def test_left_inverse_every_refusal_proven(a: Layout) -> None:
    """Every answer is a left inverse point by point; every refusal agrees with the brute force
    (small layouts: nested, compact, padded, zero and negative strides)."""
    try:
        li = left_inverse(a)
    except LayoutError as e:
        left_inverse_refusal_proven(a, str(e), ref_cosize=10**9)
        return
    assert ref.left_inverse_ok(pairs(a), pairs(li)), f"left_inverse({a}) = {li}"
