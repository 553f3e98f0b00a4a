"""Nested integer tuples (CuTe's IntTuple): the shapes, strides and coordinates of layouts."""

from __future__ import annotations

from typing import Union

IntTuple = Union[int, tuple["IntTuple", ...]]


def is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_tuple(x: object) -> bool:
    return isinstance(x, tuple)


def flatten(t: IntTuple) -> tuple[int, ...]:
    """The leaves of `t`, left to right."""
    if isinstance(t, int):
        return (t,)
    out: list[int] = []
    for e in t:
        out.extend(flatten(e))
    return tuple(out)


def rank(t: IntTuple) -> int:
    return len(t) if isinstance(t, tuple) else 1


def depth(t: IntTuple) -> int:
    if isinstance(t, int):
        return 0
    return 1 + max((depth(e) for e in t), default=0)


def product(t: IntTuple) -> int:
    if isinstance(t, int):
        return t
    p = 1
    for e in t:
        p *= product(e)
    return p


def congruent(a: IntTuple, b: IntTuple) -> bool:
    """Same nesting (profile)."""
    if isinstance(a, int) or isinstance(b, int):
        return isinstance(a, int) and isinstance(b, int)
    return len(a) == len(b) and all(congruent(x, y) for x, y in zip(a, b))


def unflatten(flat: tuple[int, ...], profile: IntTuple) -> IntTuple:
    """Rebuild `profile`'s nesting with the leaves `flat`."""

    it = iter(flat)

    def go(p: IntTuple) -> IntTuple:
        if isinstance(p, int):
            return next(it)
        return tuple(go(e) for e in p)

    out = go(profile)
    rest = list(it)
    if rest:
        raise ValueError(f"{len(rest)} leaves left over for profile {profile}")
    return out


def prefix_product(shape: IntTuple, init: int = 1) -> IntTuple:
    """Column-major (mode 0 fastest) compact strides for `shape`."""
    if isinstance(shape, int):
        return init
    out: list[IntTuple] = []
    cur = init
    for s in shape:
        out.append(prefix_product(s, cur))
        cur *= product(s)
    return tuple(out)


def to_str(t: IntTuple) -> str:
    if isinstance(t, int):
        return str(t)
    return "(" + ",".join(to_str(e) for e in t) + ")"


def idx2crd(idx: int, shape: IntTuple) -> IntTuple:
    """The natural (colexicographic) coordinate of a flat index in `shape`."""
    if isinstance(shape, int):
        return idx
    out: list[IntTuple] = []
    for s in shape:
        n = product(s)
        out.append(idx2crd(idx % n, s))
        idx //= n
    return tuple(out)


def crd2idx_compact(crd: IntTuple, shape: IntTuple) -> int:
    """Flat colexicographic index of a coordinate (which may be an int at any level)."""
    if isinstance(crd, int):
        return crd
    if isinstance(shape, int):
        raise ValueError(f"coordinate {to_str(crd)} is deeper than shape {shape}")
    if len(crd) != len(shape):
        raise ValueError(f"coordinate {to_str(crd)} does not match shape {to_str(shape)}")
    idx = 0
    mul = 1
    for c, s in zip(crd, shape):
        idx += crd2idx_compact(c, s) * mul
        mul *= product(s)
    return idx
