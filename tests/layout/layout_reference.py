"""An independent reference for the layout algebra, written from the definitions, point by point.

Nothing here calls warpy's algebra: a layout is a (shape, stride) pair of nested tuples, evaluated
by its colexicographic digits, and each operation is checked against its defining property:

- composition: R(c) == A(B(c)) for every c, R a strided layout over a refinement of B's shape;
  `recognize` decides, from the values alone, whether a function on [0, n) is a strided layout
  (greedily: its first coalesced mode is its longest run, the rest must repeat it exactly), so a
  refused composition can be checked to have no strided answer at all;
- complement: ordered, disjoint from A's translates, covering the cotarget; CuTe's extents;
- the inverses: their defining equations;
- coalesce: the same function with the fewest modes.
"""

from __future__ import annotations

from typing import Optional, Union

IntTuple = Union[int, tuple["IntTuple", ...]]
Pairs = list[tuple[int, int]]


def leaves(t: IntTuple) -> list[int]:
    if isinstance(t, int):
        return [t]
    out: list[int] = []
    for e in t:
        out += leaves(e)
    return out


def flat(shape: IntTuple, stride: IntTuple) -> Pairs:
    return list(zip(leaves(shape), leaves(stride)))


def evaluate(pairs: Pairs, i: int) -> int:
    """The value at flat index i (colexicographic: the first mode fastest)."""
    total = 0
    for s, d in pairs:
        total += (i % s) * d
        i //= s
    assert i == 0, "index out of range"
    return total


def size_of(pairs: Pairs) -> int:
    n = 1
    for s, _ in pairs:
        n *= s
    return n


def table(pairs: Pairs) -> list[int]:
    return [evaluate(pairs, i) for i in range(size_of(pairs))]


def recognize(values: list[int]) -> Optional[Pairs]:
    """The coalesced (extent, stride) pairs of the strided layout equal to `values` on [0, n), or
    None when no strided layout is (a coalesced layout's first mode is the longest run of
    f(c) = c*f(1); its extent must divide n, and f(c0 + r*j) = f(c0) + f(r*j) throughout)."""
    if not values or values[0] != 0:
        return None
    vals = list(values)
    out: Pairs = []
    while len(vals) > 1:
        n = len(vals)
        e = vals[1]
        r = 1
        while r < n and vals[r] == r * e:
            r += 1
        if r == n:
            out.append((n, e))
            break
        if n % r:
            return None
        m = n // r
        for j in range(m):
            base = vals[r * j]
            for c0 in range(r):
                if vals[c0 + r * j] != vals[c0] + base:
                    return None
        out.append((r, e))
        vals = [vals[r * j] for j in range(m)]
    return out


def coalesce_pairs(pairs: Pairs) -> Pairs:
    """The fewest-modes form, from the values (unique: see recognize)."""
    got = recognize(table(pairs))
    assert got is not None
    return got


def as_layout_parts(pairs: Pairs) -> tuple[IntTuple, IntTuple]:
    if not pairs:
        return 1, 0
    if len(pairs) == 1:
        return pairs[0]
    return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)


# --- composition --------------------------------------------------------------------------


class RunsPast(Exception):
    pass


def compose(a: tuple[IntTuple, IntTuple], b: tuple[IntTuple, IntTuple]) -> Optional[tuple[IntTuple, IntTuple]]:
    """The composition A o B over a refinement of B's shape (each leaf of B becomes its coalesced
    sub-layout), or None when A(B(c)) is no strided layout; RunsPast when B leaves A's domain."""
    ap = flat(*a)
    na = size_of(ap)
    bp = flat(*b)
    vals_b = table(bp)
    if any(not 0 <= v < na for v in vals_b):
        raise RunsPast
    full = [evaluate(ap, v) for v in vals_b]
    # each leaf of B on its own
    per_leaf: list[Pairs] = []
    for s, d in bp:
        got = recognize([evaluate(ap, d * c) for c in range(s)])
        if got is None:
            return None
        per_leaf.append(got)
    # and the whole is the sum of the leaves' parts (the layout over the refinement is additive)
    for i, v in enumerate(full):
        idx = i
        total = 0
        for (s, d), _ in zip(bp, per_leaf):
            total += evaluate(ap, d * (idx % s))
            idx //= s
        if total != v:
            return None
    it = iter(per_leaf)

    def build(shape: IntTuple) -> tuple[IntTuple, IntTuple]:
        if isinstance(shape, int):
            return as_layout_parts(next(it))
        parts = [build(e) for e in shape]
        return tuple(p[0] for p in parts), tuple(p[1] for p in parts)

    return build(b[0])


# --- complement ---------------------------------------------------------------------------


def complement_ok(a: Pairs, m: int, r: Pairs) -> Optional[str]:
    """None when R is a complement of A up to m by CuTe's postconditions, else what fails:
    R ordered (strictly increasing from 0), every translate of A's image by a value of R
    disjoint from the others, the joint layout (A, R) reaching the cotarget, and R no larger than
    needed (dropping R's last repetition would no longer reach it)."""
    rv = table(r)
    if rv[0] != 0 or any(rv[i - 1] >= rv[i] for i in range(1, len(rv))):
        return "not ordered"
    img = sorted(set(table([(s, d) for s, d in a if d != 0])))
    seen: set[int] = set()
    for t in rv:
        shifted = {t + x for x in img}
        if shifted & seen:
            return "translates overlap"
        seen |= shifted
    joint = a + r
    cos = sum((s - 1) * d for s, d in joint) + 1
    if cos < m:
        return f"cosize {cos} < cotarget {m}"
    return None


def interleaved_or_negative(a: Pairs) -> bool:
    """Whether A's live modes (extent > 1, stride != 0) have a negative stride, or two of them
    i != j with d_i <= d_j < s_i * d_i (mode j starts inside mode i's span): no CuTe complement."""
    live = [(s, d) for s, d in a if s != 1 and d != 0]
    if any(d < 0 for _, d in live):
        return True
    for i, (si, di) in enumerate(live):
        for j, (_, dj) in enumerate(live):
            if i != j and di <= dj < si * di:
                if di == dj and i > j:
                    continue  # an equal pair counts once
                return True
    return False


# --- inverses -----------------------------------------------------------------------------


def injective(pairs: Pairs) -> bool:
    v = table(pairs)
    return len(set(v)) == len(v)


def right_inverse_ok(a: Pairs, r: Pairs) -> bool:
    """L(R(i)) == i for every i < size(R)."""
    na = size_of(a)
    for i, x in enumerate(table(r)):
        if not 0 <= x < na or evaluate(a, x) != i:
            return False
    return True


def largest_contiguous_prefix(a: Pairs) -> int:
    """The largest N with [0, N) inside A's image (an upper bound on any right inverse's size)."""
    img = set(table(a))
    n = 0
    while n in img:
        n += 1
    return n


def left_inverse_ok(a: Pairs, li: Pairs) -> bool:
    """R(L(i)) == i for every i < size(L) (L injective), else L(R(L(i))) == L(i) (quasi-inverse)."""
    n = size_of(li)
    vals = table(a)
    inj = len(set(vals)) == len(vals)
    for i, x in enumerate(vals):
        if not 0 <= x < n:
            return False
        y = evaluate(li, x)
        if inj and y != i:
            return False
        if not inj and (not 0 <= y < len(vals) or vals[y] != x):
            return False
    return True


# --- strided left inverses, by brute force -------------------------------------------------


def image_targets(a: Pairs) -> Optional[dict[int, int]]:
    """{L(c): index of c} over the coordinates c whose stride-0 modes are 0 (CuTe's quasi-inverse
    target), or None when two of them share a value (L not injective but for stride-0 modes)."""
    out: dict[int, int] = {}
    for i in range(size_of(a)):
        idx, zero = i, True
        for s, d in a:
            if d == 0 and idx % s:
                zero = False
            idx //= s
        if zero:
            y = evaluate(a, i)
            if y in out:
                return None
            out[y] = i
    return out


def integer_solution(rows: list[list[int]], rhs: list[int], n: int) -> Optional[list[int]]:
    """An integer f with rows . f == rhs, or None: column Hermite form of the whole matrix (A U = H
    lower triangular, U unimodular), forward substitution in H, f = U g."""
    m = len(rows)
    h = [list(r) for r in rows]
    u = [[int(i == j) for j in range(n)] for i in range(n)]  # columns are the transform's
    piv_row: list[int] = []
    col = 0
    for r in range(m):
        if col == n:
            break
        # gcd of h[r][col:] into column col, by column swaps and subtractions
        while True:
            nz = [j for j in range(col, n) if h[r][j]]
            if len(nz) <= 1:
                break
            j0 = min(nz, key=lambda j: abs(h[r][j]))
            for j in nz:
                if j != j0:
                    q = h[r][j] // h[r][j0]
                    for rr in range(m):
                        h[rr][j] -= q * h[rr][j0]
                    for rr in range(n):
                        u[rr][j] -= q * u[rr][j0]
        nz = [j for j in range(col, n) if h[r][j]]
        if nz:
            j = nz[0]
            for rr in range(m):
                h[rr][col], h[rr][j] = h[rr][j], h[rr][col]
            for rr in range(n):
                u[rr][col], u[rr][j] = u[rr][j], u[rr][col]
            piv_row.append(r)
            col += 1
    g = [0] * n
    for r in range(m):
        acc = sum(h[r][j] * g[j] for j in range(n))
        k = piv_row.index(r) if r in piv_row else -1
        if k >= 0:
            rest = rhs[r] - acc
            if rest % h[r][k]:
                return None
            g[k] = rest // h[r][k]
        elif acc != rhs[r]:
            return None
    return [sum(u[i][j] * g[j] for j in range(n)) for i in range(n)]


def _primes(n: int) -> list[int]:
    return [p for p in range(2, n + 1) if all(p % q for q in range(2, int(p**0.5) + 1))]


def strided_left_inverse(targets: dict[int, int]) -> Optional[Pairs]:
    """A strided M with M(y) == targets[y] for every y, or None when none exists. From the
    definition: a mode of M splits into its prime factors without changing M, and modes past the
    largest point see digit 0, so M is, up to that, a sequence of prime radices t_1, t_2, ... with
    T = t_1 ... t_k <= the largest point, and a last mode reaching past it; for each sequence, M's
    strides solve the integer system sum_j digit_j(y) f_j == targets[y]. Every sequence is tried
    (a prefix is dropped only when the points below its product, whose later digits are all 0,
    already have no solution)."""
    ys = sorted(targets)
    top = ys[-1]
    if top == 0:
        return [(1, 0)]
    primes = _primes(top)

    def digits(y: int, radices: list[int]) -> list[int]:
        out = []
        for t in radices:
            out.append(y % t)
            y //= t
        return out + [y]

    def solve(radices: list[int], below: int) -> Optional[list[int]]:
        pts = [y for y in ys if y < below]
        rows = [digits(y, radices) for y in pts]
        return integer_solution(rows, [targets[y] for y in pts], len(radices) + 1)

    def go(radices: list[int], t: int) -> Optional[Pairs]:
        f = solve(radices, top + 1)  # a last mode reaching past the largest point
        if f is not None:
            last = -(-(top + 1) // t)
            return list(zip(radices + [last], f))
        for p in primes:
            if t * p > top:
                break
            if solve(radices + [p], t * p) is not None:  # the points below t*p: digits beyond are 0
                got = go(radices + [p], t * p)
                if got is not None:
                    return got
        return None

    return go([], 1)
