"""The Layout value: a shape and a stride (CuTe notation, mode 0 fastest)."""

from __future__ import annotations

import re
from typing import Iterator

import attrs

from warpy.layout.inttuple import (
    IntTuple,
    congruent,
    crd2idx_compact,
    flatten,
    idx2crd,
    prefix_product,
    product,
    to_str,
)


class LayoutError(ValueError):
    """A layout operation whose input is not admissible; the message names the failed condition."""


def _check_tuple(t: object, what: str) -> IntTuple:
    if isinstance(t, bool):
        raise LayoutError(f"{what} must be an int or a nested tuple of ints, not {t!r}")
    if isinstance(t, int):
        return t
    if isinstance(t, (tuple, list)):
        return tuple(_check_tuple(e, what) for e in t)
    raise LayoutError(f"{what} must be an int or a nested tuple of ints, not {t!r}")


@attrs.frozen(eq=True, hash=True, repr=False, init=False)
class Layout:
    """A map from the coordinates of `shape` to integers: `sum(c_i * stride_i)`.

    `Layout(shape)` has CuTe's default, column-major compact strides.
    """

    shape: IntTuple
    stride: IntTuple

    def __init__(self, shape: IntTuple, stride: IntTuple | None = None) -> None:
        shape = _check_tuple(shape, "shape")
        for s in flatten(shape):
            if s < 1:
                raise LayoutError(f"shape {to_str(shape)} has an extent {s} < 1")
        if stride is None:
            stride = prefix_product(shape)
        stride = _check_tuple(stride, "stride")
        if not congruent(shape, stride):
            raise LayoutError(f"shape {to_str(shape)} and stride {to_str(stride)} are not congruent")
        self.__attrs_init__(shape, stride)

    # --- evaluation -------------------------------------------------------------------
    def __call__(self, *crd: IntTuple) -> int:
        c: IntTuple = crd[0] if len(crd) == 1 else tuple(crd)
        return crd2idx(c, self.shape, self.stride)

    # --- structure --------------------------------------------------------------------
    def size(self) -> int:
        return product(self.shape)

    def cosize(self) -> int:
        """One past the largest value (`L(size-1)+1` for non-negative strides)."""
        hi = 0
        lo = 0
        for s, d in zip(flatten(self.shape), flatten(self.stride)):
            if d > 0:
                hi += (s - 1) * d
            else:
                lo += (s - 1) * d
        return hi - lo + 1

    def rank(self) -> int:
        return len(self.shape) if isinstance(self.shape, tuple) else 1

    def __len__(self) -> int:
        return self.rank()

    def __getitem__(self, i: int) -> "Layout":
        """Mode `i` as a layout."""
        if isinstance(self.shape, int):
            if i in (0, -1):
                return self
            raise IndexError(i)
        assert isinstance(self.stride, tuple)
        return Layout(self.shape[i], self.stride[i])

    def modes(self) -> Iterator["Layout"]:
        for i in range(self.rank()):
            yield self[i]

    def flat(self) -> "Layout":
        """The same function over the flattened shape."""
        fs, fd = flatten(self.shape), flatten(self.stride)
        if len(fs) == 1:
            return Layout(fs[0], fd[0])
        return Layout(fs, fd)

    def values(self) -> list[int]:
        """L(i) for every i in [0, size) (colexicographic order)."""
        return [self(i) for i in range(self.size())]

    # --- text -------------------------------------------------------------------------
    def __str__(self) -> str:
        return f"{to_str(self.shape)}:{to_str(self.stride)}"

    def __repr__(self) -> str:
        return f"Layout({self.shape!r}, {self.stride!r})"

    @staticmethod
    def parse(text: str) -> "Layout":
        """Parse CuTe notation: `(6,2):(8,2)`, `20:2`, `((2,2),3):((24,2),8)`, or a shape alone."""
        s = text.replace(" ", "")
        if ":" in s:
            sh, st = s.split(":", 1)
            return Layout(_parse_tuple(sh, text), _parse_tuple(st, text))
        return Layout(_parse_tuple(s, text))


_TOKEN = re.compile(r"\(|\)|,|-?\d+")


def _parse_tuple(s: str, whole: str) -> IntTuple:
    toks = _TOKEN.findall(s)
    if "".join(toks) != s or not toks:
        raise LayoutError(f"cannot read {whole!r} as a layout (CuTe notation, e.g. (6,2):(8,2))")
    pos = 0

    def go() -> IntTuple:
        nonlocal pos
        if pos >= len(toks):
            raise LayoutError(f"cannot read {whole!r}: it ends early")
        t = toks[pos]
        pos += 1
        if t == "(":
            items: list[IntTuple] = [go()]
            while pos < len(toks) and toks[pos] == ",":
                pos += 1
                items.append(go())
            if pos >= len(toks) or toks[pos] != ")":
                raise LayoutError(f"cannot read {whole!r}: unbalanced parentheses")
            pos += 1
            return tuple(items)
        if t in (")", ","):
            raise LayoutError(f"cannot read {whole!r}: unexpected {t!r}")
        return int(t)

    out = go()
    if pos != len(toks):
        raise LayoutError(f"cannot read {whole!r}: trailing text")
    return out


def crd2idx(crd: IntTuple, shape: IntTuple, stride: IntTuple) -> int:
    """Evaluate a layout at a coordinate; an int at any level is a flat index into that sub-shape."""
    if isinstance(crd, int):
        if isinstance(shape, int):
            if not 0 <= crd < shape:
                raise LayoutError(f"coordinate {crd} is out of range for extent {shape}")
            assert isinstance(stride, int)
            return crd * stride
        total = product(shape)
        if not 0 <= crd < total:
            raise LayoutError(f"index {crd} is out of range for shape {to_str(shape)} (size {total})")
        return crd2idx(idx2crd(crd, shape), shape, stride)
    if isinstance(shape, int) or isinstance(stride, int):
        raise LayoutError(f"coordinate {to_str(crd)} is deeper than shape {to_str(shape)}")
    if len(crd) != len(shape):
        raise LayoutError(f"coordinate {to_str(crd)} has rank {len(crd)}, shape {to_str(shape)} has {len(shape)}")
    return sum(crd2idx(c, s, d) for c, s, d in zip(crd, shape, stride))


__all__ = ["Layout", "LayoutError", "crd2idx", "crd2idx_compact", "idx2crd"]
