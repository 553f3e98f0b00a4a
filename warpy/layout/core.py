"""The Layout value: a shape and a stride (CuTe notation, mode 0 fastest).

`Layout` is immutable and hashable. Its constructor validates (ints or nested tuples of ints,
congruent shape and stride, extents >= 1) with fast paths for the common cases, because code
generators construct layouts in inner loops; the algebra builds its results with `_make`, which
skips the checks its own construction already guarantees.
"""

from __future__ import annotations

import re
import sys
from typing import Any, Callable, Iterator, Union, overload

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


#: Nesting deeper than this is refused (one line) rather than recursed into.
MAX_DEPTH = 64

#: A coordinate: an int, a nested tuple of coordinates; `None` (CuTe's `_`) keeps that mode (a slice).
Coord = Union[int, None, tuple["Coord", ...]]


def _check_tuple(t: object, what: str, depth: int = 0) -> IntTuple:
    if type(t) is int:
        return t
    if depth > MAX_DEPTH:
        raise LayoutError(f"{what} is nested deeper than {MAX_DEPTH} levels")
    if isinstance(t, (tuple, list)):
        return tuple(_check_tuple(e, what, depth + 1) for e in t)
    if isinstance(t, int) and not isinstance(t, bool):  # an int subclass (e.g. IntEnum): its value
        return int(t)
    raise LayoutError(f"{what} must be an int or a nested tuple of ints, not {t!r}")


def _check_extents(shape: IntTuple) -> None:
    for s in flatten(shape):
        if s < 1:
            raise LayoutError(f"shape {to_str(shape)} has an extent {s} < 1")


def _valid_pair(s: object, d: object, depth: int) -> bool:
    """One pass, no copies: exact ints or congruent nested tuples of exact ints, extents >= 1, at
    most MAX_DEPTH levels. False sends the pair to `_validated` (a refusal or a normalized copy)."""
    if type(s) is int:
        return type(d) is int and s >= 1
    if type(s) is not tuple or type(d) is not tuple or len(s) != len(d) or depth >= MAX_DEPTH:
        return False
    i = 0
    for a in s:  # d indexed alongside (no zip, no generator)
        b = d[i]
        i += 1
        if type(a) is int:
            if type(b) is not int or a < 1:
                return False
        elif type(a) is tuple and type(b) is tuple and len(a) == len(b) and depth + 1 < MAX_DEPTH:
            j = 0
            for x in a:  # one level in line (the common nesting), deeper by recursion
                y = b[j]
                j += 1
                if type(x) is int:
                    if type(y) is not int or x < 1:
                        return False
                elif not _valid_pair(x, y, depth + 2):
                    return False
        else:
            return False
    return True


def _validated(shape: object, stride: object) -> tuple[IntTuple, IntTuple]:
    """The normalized (shape, stride) (lists become tuples, the default stride filled in), or the
    LayoutError naming what is wrong."""
    try:
        sh = _check_tuple(shape, "shape")
        _check_extents(sh)
        st = prefix_product(sh) if stride is None else _check_tuple(stride, "stride")
        ok = congruent(sh, st)
    except RecursionError:
        raise LayoutError(f"a shape or stride nested deeper than {MAX_DEPTH} levels") from None
    if not ok:
        raise LayoutError(f"shape {to_str(sh)} and stride {to_str(st)} are not congruent")
    return sh, st


#: Pairs the flat checks in line do not cover (nested, rank 5 and up, a default stride), validated
#: before and kept (not when fresh: `_refs`), found by identity, so that the same objects again
#: (literals in a generator's loop) cost one dict look-up: id(shape) -> the stride it was validated
#: with (or, for a default stride, ~id(shape) -> the stride filled in). `_KEEP` holds the shapes, so no id is
#: reused while its entry lives; only inputs of exact ints and tuples (immutable) are kept. Not by
#: equality: (1, 2.0) == (1, 2) and True == 1 with equal hashes, and a float or a bool must be
#: refused, not found. Bounded; cleared when full.
_SEEN: dict[int, IntTuple] = {}
_KEEP: list[IntTuple] = []
_SEEN_MAX = 1 << 11

#: CPython's reference count of the shape as `Layout.__init__` sees it: a tuple the caller built
#: for this call and holds nowhere else (`Layout(((2, n), 8), ...)` in a loop) has no more than
#: `_FRESH` references (the caller's stack, the argument, getrefcount's own: measured below, once,
#: the same way); a literal or a variable has more. A fresh shape cannot be seen again, so it is
#: checked without the look-up and without an entry. Only the speed depends on this (a wrong guess
#: costs a look-up or an entry). Not CPython (no getrefcount): every shape is looked up.
_refs: Callable[[object], int] = getattr(sys, "getrefcount", lambda obj: 1 << 30)


class _Probe:
    """Calibrates `_FRESH` and `_FRESH_GENERAL`: called exactly as `Layout(...)` is, it reads the
    reference count of a fresh tuple in `__init__` and one call further down (`_general`)."""

    __slots__ = ("refs", "general_refs")
    refs: int
    general_refs: int

    def __init__(self, shape: object, stride: object = None) -> None:
        self.refs = _refs(shape)
        _probe_general(self, shape, stride, False)


def _probe_general(probe: _Probe, shape: object, stride: object, looked: bool) -> None:
    probe.general_refs = _refs(shape)


_probe = _Probe(tuple(range(2)), None)
_FRESH = _probe.refs if hasattr(sys, "getrefcount") else 0
_FRESH_GENERAL = _probe.general_refs if hasattr(sys, "getrefcount") else 0
del _probe


def _general(lay: "Layout", shape: object, stride: object, looked: bool) -> None:
    """What `Layout.__init__` does not check in line: a default stride, nesting it does not unroll,
    rank 5 and up, and every refusal or normalization. A pair seen before (not fresh) is found by
    identity in `_SEEN` (unless `looked`: the caller has looked it up already); a pair new here is
    checked in one pass (`_valid_pair`) and kept unless fresh; anything that pass rejects goes to
    `_validated` (refused, or normalized: lists, int subclasses)."""
    if stride is None:
        key = ~id(shape)
        seen = _SEEN.get(key)
        if seen is not None:
            lay._shape = shape  # type: ignore[assignment]
            lay._stride = seen
            return
        if not _valid_pair(shape, shape, 0):  # not exact ints and tuples, extents >= 1
            lay._shape, lay._stride = _validated(shape, stride)  # refused, or normalized
            return
        assert isinstance(shape, (int, tuple))
        lay._shape = shape
        lay._stride = stride = prefix_product(shape)
    else:
        fresh = _refs(shape) <= _FRESH_GENERAL  # counted before lay holds it
        key = id(shape)
        if not fresh and not looked and _SEEN.get(key) is stride:
            lay._shape = shape  # type: ignore[assignment]
            lay._stride = stride  # type: ignore[assignment]
            return
        if not _valid_pair(shape, stride, 0):  # refused, or normalized (not kept: a list may change)
            lay._shape, lay._stride = _validated(shape, stride)
            return
        lay._shape = shape  # type: ignore[assignment]
        lay._stride = stride  # type: ignore[assignment]
        if fresh:
            return
    if len(_KEEP) >= _SEEN_MAX:
        _SEEN.clear()
        _KEEP.clear()
    _SEEN[key] = stride  # type: ignore[assignment]
    _KEEP.append(shape)  # type: ignore[arg-type]


class Layout:
    """A map from the coordinates of `shape` to integers: `sum(c_i * stride_i)`.

    `Layout(shape)` has CuTe's default, column-major compact strides. Immutable and hashable.
    """

    __slots__ = ("_shape", "_stride", "_pairs", "_size")

    _shape: IntTuple
    _stride: IntTuple
    _pairs: tuple[tuple[int, int], ...]
    _size: int

    def __init__(self, shape: IntTuple, stride: IntTuple | None = None) -> None:
        # Checked in line (a call costs about a quarter of pycute's whole constructor), in the
        # fewest bytecodes measured (docs/performance.md, issue 22):
        # - a flat layout of rank 1-4, new or seen before: `x.__class__ is int` for every leaf (as
        #   `isinstance` reads it, without a call; bools and int subclasses fail it), extents >= 1;
        # - a rank-2 pair with a nested mode, seen before (a literal or a variable: not fresh by
        #   `_refs`): one identity look-up in `_SEEN`, no check;
        # - a rank-2 pair with a nested mode built fresh for this call (`Layout(((2, n), 8), ...)`):
        #   each mode an int or a pair of ints, unrolled;
        # - any other shape: not fresh (rank 5 and up, deeper nesting), the identity look-up; fresh,
        #   one pass of `_valid_pair` (no entry: a fresh shape cannot be seen again).
        # The first mode's type picks the path (`shape[0]` before `len`: a nested literal reaches
        # its look-up without unpacking). Leaf tests are `and` chains in an `if` (each `is` with its
        # own jump: faster than a chained `a is b is c`). A stride (or a stride's mode) of another
        # length fails its unpacking: a ValueError, free in CPython 3.11+ until raised, and the
        # refusal is `_general`'s. Everything else, every refusal and every normalization (lists,
        # int subclasses) goes to `_general`, which has the one message for each.
        a: Any  # the leaves and modes in hand (annotations only: no code)
        b: Any
        c: Any
        e: Any
        x: Any
        y: Any
        if shape.__class__ is tuple and stride.__class__ is tuple:
            try:
                a = shape[0]
                if a.__class__ is int:
                    n = len(shape)
                    if n == 2:
                        a, b = shape
                        c, e = stride
                        if b.__class__ is int:
                            if c.__class__ is int and e.__class__ is int and a > 0 and b > 0:
                                self._shape = shape
                                self._stride = stride
                                return
                        elif _refs(shape) > _FRESH:  # a literal or a variable: seen before?
                            if _SEEN.get(id(shape)) is stride:
                                self._shape = shape
                                self._stride = stride
                                return
                            _general(self, shape, stride, True)
                            return
                        elif b.__class__ is tuple and e.__class__ is tuple and len(b) == 2:  # (int, pair)
                            x, y = b
                            b, e = e
                            if (c.__class__ is int and x.__class__ is int and y.__class__ is int and b.__class__ is int
                                    and e.__class__ is int and a > 0 and x > 0 and y > 0):
                                self._shape = shape
                                self._stride = stride
                                return
                    elif n == 3:
                        a, b, c = shape
                        if b.__class__ is int and c.__class__ is int and a > 0 and b > 0 and c > 0:
                            a, b, c = stride
                            if a.__class__ is int and b.__class__ is int and c.__class__ is int:
                                self._shape = shape
                                self._stride = stride
                                return
                    elif n == 4:
                        a, b, c, e = shape
                        if (b.__class__ is int and c.__class__ is int and e.__class__ is int
                                and a > 0 and b > 0 and c > 0 and e > 0):
                            a, b, c, e = stride
                            if a.__class__ is int and b.__class__ is int and c.__class__ is int and e.__class__ is int:
                                self._shape = shape
                                self._stride = stride
                                return
                    elif n == 1:
                        (c,) = stride
                        if c.__class__ is int and a > 0:
                            self._shape = shape
                            self._stride = stride
                            return
                elif _refs(shape) > _FRESH:  # a literal or a variable: seen before?
                    if _SEEN.get(id(shape)) is stride:
                        self._shape = shape
                        self._stride = stride
                        return
                    _general(self, shape, stride, True)
                    return
                elif a.__class__ is tuple and len(a) == 2 and len(shape) == 2:  # (pair, int or pair)
                    b = shape[1]
                    c, e = stride
                    if c.__class__ is tuple:
                        x, y = a
                        a, c = c
                        if (x.__class__ is int and y.__class__ is int and a.__class__ is int and c.__class__ is int
                                and x > 0 and y > 0):
                            if b.__class__ is int:
                                if e.__class__ is int and b > 0:
                                    self._shape = shape
                                    self._stride = stride
                                    return
                            elif b.__class__ is tuple and e.__class__ is tuple and len(b) == 2:
                                x, y = b
                                a, c = e
                                if (x.__class__ is int and y.__class__ is int and a.__class__ is int
                                        and c.__class__ is int and x > 0 and y > 0):
                                    self._shape = shape
                                    self._stride = stride
                                    return
            except LayoutError:  # `_general`'s refusal
                raise
            except (ValueError, IndexError):  # a stride (or a mode's) of another length, or shape (): `_general`
                pass
            if _refs(shape) > _FRESH:  # rank 5 and up, deeper nesting, a refusal, a miss above: seen before?
                if _SEEN.get(id(shape)) is stride:
                    self._shape = shape
                    self._stride = stride
                    return
                _general(self, shape, stride, True)
                return
            if _valid_pair(shape, stride, 0):  # fresh, not unrolled above: one pass, no entry
                self._shape = shape
                self._stride = stride
                return
        elif shape.__class__ is int and stride.__class__ is int and shape > 0:
            self._shape = shape
            self._stride = stride
            return
        _general(self, shape, stride, False)

    @property
    def shape(self) -> IntTuple:
        return self._shape

    @property
    def stride(self) -> IntTuple:
        return self._stride

    def __reduce__(self) -> tuple[type["Layout"], tuple[IntTuple, IntTuple]]:
        return (Layout, (self._shape, self._stride))

    def __eq__(self, other: object) -> bool:
        if type(other) is not Layout:
            return NotImplemented
        return self._shape == other._shape and self._stride == other._stride

    def __ne__(self, other: object) -> bool:
        if type(other) is not Layout:
            return NotImplemented
        return self._shape != other._shape or self._stride != other._stride

    def __hash__(self) -> int:
        return hash((self._shape, self._stride))

    # --- flat view (cached) -----------------------------------------------------------
    def pairs(self) -> tuple[tuple[int, int], ...]:
        """The (extent, stride) leaves, left to right (cached)."""
        try:
            return self._pairs
        except AttributeError:
            pass
        if isinstance(self._shape, int):
            assert isinstance(self._stride, int)
            p: tuple[tuple[int, int], ...] = ((self._shape, self._stride),)
        else:
            p = tuple(zip(flatten(self._shape), flatten(self._stride)))
        n = 1
        for s, _ in p:
            n *= s
        self._pairs = p
        self._size = n
        return p

    # --- evaluation -------------------------------------------------------------------
    @overload
    def __call__(self, *crd: IntTuple) -> int: ...

    @overload
    def __call__(self, *crd: Coord) -> "Layout | int": ...

    def __call__(self, *crd: Coord) -> "Layout | int":
        """The value at a coordinate (an int at any level is a flat index into that sub-shape).

        With `None` (CuTe's `_`) in the coordinate, the slice: the layout of the `None` modes
        (CuTe's `layout(_, 1)`); `slice_and_offset` also gives the fixed part's offset.
        """
        c: Coord = crd[0] if len(crd) == 1 else crd
        if type(c) is int:
            shape = self._shape
            if type(shape) is int:
                if 0 <= c < shape:
                    return c * self._stride  # type: ignore[return-value]
                raise LayoutError(f"coordinate {c} is out of range for extent {shape}")
            try:
                pairs = self._pairs
                n = self._size
            except AttributeError:
                pairs = self.pairs()
                n = self._size
            if not 0 <= c < n:
                raise LayoutError(f"index {c} is out of range for shape {to_str(shape)} (size {n})")
            idx: int = c
            total = 0
            for s, d in pairs:
                total += (idx % s) * d
                idx //= s
            return total
        if _has_none(c):
            return slice_and_offset(c, self)[0]
        try:
            return crd2idx(c, self.shape, self.stride)  # type: ignore[arg-type]
        except RecursionError:
            raise LayoutError(f"coordinate nested deeper than {MAX_DEPTH} levels") from None

    # --- structure --------------------------------------------------------------------
    def size(self) -> int:
        try:
            return self._size
        except AttributeError:
            self.pairs()
            return self._size

    def cosize(self) -> int:
        """CuTe's cosize: `L(size-1) + 1` (for non-negative strides, one past the largest value)."""
        n = 0
        for s, d in self.pairs():
            n += (s - 1) * d
        return n + 1

    def rank(self) -> int:
        return len(self.shape) if type(self.shape) is tuple else 1

    def __len__(self) -> int:
        return self.rank()

    def __getitem__(self, i: int) -> "Layout":
        """Mode `i` as a layout."""
        if type(self.shape) is int:
            if i in (0, -1):
                return self
            raise IndexError(i)
        assert isinstance(self.shape, tuple) and isinstance(self.stride, tuple)
        return _make(self.shape[i], self.stride[i])

    def __iter__(self) -> Iterator["Layout"]:
        return self.modes()

    def modes(self) -> Iterator["Layout"]:
        for i in range(self.rank()):
            yield self[i]

    def flat(self) -> "Layout":
        """The same function over the flattened shape."""
        p = self.pairs()
        if len(p) == 1:
            return _make(p[0][0], p[0][1])
        return _make(tuple(s for s, _ in p), tuple(d for _, d in p))

    def values(self) -> list[int]:
        """L(i) for every i in [0, size) (colexicographic order)."""
        out = [0]
        for s, d in self.pairs():
            if s > 1:
                out = [v + k * d for k in range(s) for v in out]
        return out

    # --- text -------------------------------------------------------------------------
    def __str__(self) -> str:
        return f"{to_str(self.shape)}:{to_str(self.stride)}"

    def __repr__(self) -> str:
        return f"Layout({self.shape!r}, {self.stride!r})"

    @staticmethod
    def parse(text: str) -> "Layout":
        """Parse CuTe notation: `(6,2):(8,2)`, `20:2`, `((2,2),3):((24,2),8)`, `(4,):(1,)`, or a shape alone."""
        s = text.replace(" ", "")
        if ":" in s:
            sh, st = s.split(":", 1)
            return Layout(_parse_tuple(sh, text), _parse_tuple(st, text))
        return Layout(_parse_tuple(s, text))


def _make(shape: IntTuple, stride: IntTuple) -> Layout:
    """A Layout from parts the caller guarantees valid (no checks)."""
    lay = object.__new__(Layout)
    lay._shape = shape
    lay._stride = stride
    return lay


_TOKEN = re.compile(r"\(|\)|,|-?\d+")


def _parse_tuple(s: str, whole: str) -> IntTuple:
    toks = _TOKEN.findall(s)
    if "".join(toks) != s or not toks:
        raise LayoutError(f"cannot read {whole!r} as a layout (CuTe notation, e.g. (6,2):(8,2))")
    pos = 0

    def go(depth: int) -> IntTuple:
        nonlocal pos
        if pos >= len(toks):
            raise LayoutError(f"cannot read {whole!r}: it ends early")
        if depth > MAX_DEPTH:
            raise LayoutError(f"cannot read {whole!r}: nested deeper than {MAX_DEPTH} levels")
        t = toks[pos]
        pos += 1
        if t == "(":
            items: list[IntTuple] = [go(depth + 1)]
            while pos < len(toks) and toks[pos] == ",":
                pos += 1
                if pos < len(toks) and toks[pos] == ")":  # a trailing comma: (4,)
                    break
                items.append(go(depth + 1))
            if pos >= len(toks) or toks[pos] != ")":
                raise LayoutError(f"cannot read {whole!r}: unbalanced parentheses")
            pos += 1
            return tuple(items)
        if t in (")", ","):
            raise LayoutError(f"cannot read {whole!r}: unexpected {t!r}")
        return int(t)

    out = go(0)
    if pos != len(toks):
        raise LayoutError(f"cannot read {whole!r}: trailing text")
    return out


def _has_none(c: object) -> bool:
    if c is None:
        return True
    if type(c) is tuple:
        return any(_has_none(e) for e in c)
    return False


def crd2idx(crd: IntTuple, shape: IntTuple, stride: IntTuple) -> int:
    """Evaluate a layout at a coordinate; an int at any level is a flat index into that sub-shape."""
    if type(crd) is int:
        if type(shape) is int:
            if not 0 <= crd < shape:
                raise LayoutError(f"coordinate {crd} is out of range for extent {shape}")
            return crd * stride  # type: ignore[return-value]
        idx: int = crd
        total = product(shape)
        if not 0 <= idx < total:
            raise LayoutError(f"index {crd} is out of range for shape {to_str(shape)} (size {total})")
        out = 0
        for s, d in zip(flatten(shape), flatten(stride)):
            out += (idx % s) * d
            idx //= s
        return out
    if not isinstance(crd, tuple):
        raise LayoutError(f"a coordinate is an int or a tuple of coordinates, not {crd!r}")
    if type(shape) is int or type(stride) is int:
        raise LayoutError(f"coordinate {to_str(crd)} is deeper than shape {to_str(shape)}")
    assert isinstance(shape, tuple) and isinstance(stride, tuple)
    if len(crd) != len(shape):
        raise LayoutError(f"coordinate {to_str(crd)} has rank {len(crd)}, shape {to_str(shape)} has {len(shape)}")
    acc = 0
    for c, sub_shape, sub_stride in zip(crd, shape, stride):
        acc += crd2idx(c, sub_shape, sub_stride)
    return acc


def _slice(crd: Coord, t: IntTuple) -> tuple[IntTuple, ...]:
    """CuTe's slice: the parts of `t` where `crd` has `None`, flattened one level (as pycute)."""
    if crd is None:
        return (t,)
    if isinstance(crd, tuple):
        if not isinstance(t, tuple) or len(crd) != len(t):
            raise LayoutError(f"slice {_coord_str(crd)} does not match {to_str(t)}")
        out: list[IntTuple] = []
        for c, e in zip(crd, t):
            out.extend(_slice(c, e))
        return tuple(out)
    return ()


def _coord_str(c: Coord) -> str:
    if c is None:
        return "_"
    if isinstance(c, int):
        return str(c)
    return "(" + ",".join(_coord_str(e) for e in c) + ")"


def _zero_none(c: Coord) -> IntTuple:
    if c is None:
        return 0
    if isinstance(c, tuple):
        return tuple(_zero_none(e) for e in c)
    return c


def slice_and_offset(crd: Coord, layout: Layout) -> tuple[Layout, int]:
    """(the layout of the modes `crd` leaves free with `None`, the offset of the fixed part).

    `layout(crd)` with `c` in place of the `None`s is `offset + sliced(c)` (CuTe's slice_and_offset).
    """
    if crd is None:
        return _make((layout.shape,), (layout.stride,)), 0
    shape = _slice(crd, layout.shape)
    stride = _slice(crd, layout.stride)
    offset = crd2idx(_zero_none(crd), layout.shape, layout.stride)
    if not shape:
        return _make(1, 0), offset
    return _make(shape, stride), offset


__all__ = ["Coord", "Layout", "LayoutError", "crd2idx", "crd2idx_compact", "idx2crd", "slice_and_offset"]
