"""The operator graph a megakernel runs, built without torch.

    g = Graph("mlp")
    x = g.input("x", (1024, 1024))
    w = g.input("w", (3, 1024, 1024))
    b = g.input("b", (3, 1024))
    for i in range(3):
        x = g.relu(g.matmul(x, w[i]) + b[i])
    g.output(x)

Values are tensors with a shape and an element type. Ops: `matmul` (x·W, W (K, N)) and `linear`
(x·Wᵀ, W (N, K)); `add`, `mul` with numpy broadcasting (`+`, `*`); `relu`, `silu`, `gelu` (tanh);
`silu_mul` (silu(a)·b); `rmsnorm(x, weight, eps)` over the last dimension, eps kept as the graph gives
it; `rope(x, cos, sin)` (rotary embedding, rotate-half form, tables (T, D)); views: `select` and
`slice` on any dimension with step 1 (`x[i]`, `x[:, a:b]`), `reshape` (split and merge dimensions
that are contiguous, as strides); `output`.
Decode attention: `cache_append(cache, rows, at)` writes new K or V rows into a cache (a graph input,
or a view of one, updated in place: the input becomes launch state) and is the cache after the write;
`attention(q, k, v, length, scale, causal)` attends T new queries to the first `length` rows of the
caches (grouped-query: KV heads divide query heads).
Every refusal is a one-line `WarpyError` naming the value and the line that made it.

`Graph.node(name, op, args)` is the by-name form (arguments may name values defined later); `check`
resolves it, so a cycle is reported there.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

import numpy as np

from warpy.errors import WarpyError
from warpy.target import element_type

#: the element types the megakernel's op bodies take (bf16 operands, fp32 accumulation)
ELEMENT_TYPES: tuple[str, ...] = ("bf16",)
#: tensors of rank 1..MAX_RANK (a tensor map has at most COORDS dimensions in an instruction)
MAX_RANK = 4
ACTIVATION_OPS = ("relu", "silu", "gelu")
BINARY_OPS = ("add", "mul")
VIEW_OPS = ("select", "slice", "reshape")
ATTENTION_OPS = ("cache_append", "attention")
OPS = ("input", "matmul", "linear", "silu_mul", "rmsnorm", "rope") + ACTIVATION_OPS + BINARY_OPS + VIEW_OPS + ATTENTION_OPS

#: TMA's limits on a global tensor: strides are multiples of 16 bytes below 2^40, extents at most 2^32
TMA_STRIDE_ALIGN = 16
TMA_MAX_EXTENT = 1 << 32
TMA_MAX_STRIDE = 1 << 40

Arg = Union["Value", str]

_HERE = os.path.dirname(os.path.abspath(__file__))


def caller() -> str:
    """file:line of the first frame outside warpy/mega: where the user made a value."""
    f = sys._getframe(1)
    while f is not None and os.path.dirname(os.path.abspath(f.f_code.co_filename)) == _HERE:
        f = f.f_back  # type: ignore[assignment]
    if f is None:
        return "?"
    return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}"


class Value:
    """A tensor of the graph: an input, an op's result or a view of another value."""

    __slots__ = ("graph", "id", "op", "args", "attrs", "name", "shape", "dtype", "where")

    def __init__(self, graph: "Graph", id: int, op: str, args: tuple["Value", ...], attrs: dict[str, Any],
                 name: str, shape: tuple[int, ...], dtype: str, where: str) -> None:
        self.graph, self.id, self.op, self.args, self.attrs = graph, id, op, args, attrs
        self.name, self.shape, self.dtype, self.where = name, shape, dtype, where

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def is_view(self) -> bool:
        return self.op in VIEW_OPS

    def __add__(self, other: "Value") -> "Value":
        return self.graph.add(self, other)

    def __radd__(self, other: "Value") -> "Value":
        return self.graph.add(other, self)

    def __mul__(self, other: "Value") -> "Value":
        return self.graph.mul(self, other)

    def __rmul__(self, other: "Value") -> "Value":
        return self.graph.mul(other, self)

    def __getitem__(self, key: Any) -> "Value":
        keys = key if isinstance(key, tuple) else (key,)
        v, dim = self, 0
        for k in keys:
            if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
                v = self.graph.select(v, dim, int(k))
            elif isinstance(k, slice):
                if k.step not in (None, 1):
                    raise WarpyError(f"{self.graph._at()}: a view takes step 1, not {k.step}")
                if not (k.start in (None, 0) and k.stop is None):
                    start, stop, _ = k.indices(v.shape[dim]) if dim < v.rank else (0, 0, 1)
                    v = self.graph.slice(v, dim, start, stop)
                dim += 1
            else:
                raise WarpyError(f"{self.graph._at()}: a view index is an int or a slice, not {k!r}")
        return v

    def __repr__(self) -> str:
        return f"%{self.name}: {self.dtype}{list(self.shape)}"


@dataclass(frozen=True)
class View:
    """Where a value's elements lie in the tensor that owns the memory (of `base_shape`, row-major).

    dims[j]: the base dimension view dimension j runs along, `steps[j]` base indices a step (empty:
    every step 1); several view dimensions may run along one base dimension (a reshape's split:
    the outer one with the larger step); start[d]: the first index along base dimension d (a
    selected index for dimensions no view dimension runs along); shape: the view's extents."""

    base_shape: tuple[int, ...]
    dtype: str
    dims: tuple[int, ...]
    start: tuple[int, ...]
    shape: tuple[int, ...]
    steps: tuple[int, ...] = ()

    @staticmethod
    def whole(shape: tuple[int, ...], dtype: str) -> "View":
        return View(shape, dtype, tuple(range(len(shape))), (0,) * len(shape), shape)

    def step(self, j: int) -> int:
        return self.steps[j] if self.steps else 1

    @property
    def selected(self) -> tuple[int, ...]:
        return tuple(d for d in range(len(self.base_shape)) if d not in self.dims)

    @property
    def is_whole(self) -> bool:
        return self.shape == self.base_shape and not self.steps

    def base_box(self, box: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
        """A box of the view ((lo, hi) per view dimension) in base coordinates; a one-line error where
        its elements are no box of the base (a box across a reshape's split that is not whole inside)."""
        out = [(s, s + 1) for s in self.start]
        if not self.steps:
            for j, d in enumerate(self.dims):
                lo, hi = box[j]
                out[d] = (self.start[d] + lo, self.start[d] + hi)
            return tuple(out)
        for d in set(self.dims):
            lo, length = 0, 1  # the interval the view dimensions along d cover so far, innermost first
            for j in sorted((j for j, dd in enumerate(self.dims) if dd == d), key=self.step):
                a, b = box[j]
                s = self.step(j)
                if b - a > 1 and length != s:
                    raise WarpyError(f"a box {[tuple(x) for x in box]} of a {list(self.shape)} view is no box of its "
                                     f"{list(self.base_shape)} tensor (it runs across a reshape's split without "
                                     f"covering the inner dimensions)")
                lo += a * s
                length = length + (b - a - 1) * s
            out[d] = (self.start[d] + lo, self.start[d] + lo + length)
        return tuple(out)

    def full_box(self) -> tuple[tuple[int, int], ...]:
        return self.base_box([(0, n) for n in self.shape])

    def elem_strides(self) -> tuple[tuple[int, ...], int]:
        """(the element stride of each view dimension, the element offset of the origin) in the
        row-major base."""
        bs = [1] * len(self.base_shape)
        for d in range(len(self.base_shape) - 2, -1, -1):
            bs[d] = bs[d + 1] * self.base_shape[d + 1]
        return (tuple(bs[d] * self.step(j) for j, d in enumerate(self.dims)),
                sum(s * b for s, b in zip(self.start, bs)))

    def take(self, a: np.ndarray) -> np.ndarray:
        """The view's elements of `a` (the base's array, any shape of its size), as a read-only numpy
        view where `a` is C-contiguous."""
        st, off = self.elem_strides()
        flat = np.ascontiguousarray(a).reshape(-1)
        out: np.ndarray = np.lib.stride_tricks.as_strided(flat[off:], self.shape,
                                                          tuple(x * flat.itemsize for x in st), writeable=False)
        return out

    def put(self, a: np.ndarray, value: np.ndarray) -> None:
        """Write `value` (of the view's size) into the view's elements of `a` (C-contiguous: in place)."""
        if not a.flags.c_contiguous:
            raise WarpyError("internal: a view is written into an array that is not contiguous")
        st, off = self.elem_strides()
        flat = a.reshape(-1)
        dst = np.lib.stride_tricks.as_strided(flat[off:], self.shape, tuple(x * flat.itemsize for x in st))
        dst[...] = np.asarray(value).reshape(self.shape)


def coarsen(shape: tuple[int, ...], merge: tuple[int, int]) -> tuple[int, ...]:
    """`shape` with dimensions merge[0]..merge[1] made one."""
    a, b = merge
    return shape[:a] + (math.prod(shape[a:b + 1]),) + shape[b + 1:]


def rebase(view: View, coarse: tuple[int, ...]) -> View:
    """`view` expressed over `coarse`, a coarsening of its base shape (each coarse dimension the
    product of a run of the fine ones, innermost runs first): a view dimension along fine dimension d
    runs along d's coarse dimension with its step times the extents inside it after d."""
    fine = view.base_shape
    if fine == coarse:
        return view
    group: list[int] = []
    inner: list[int] = []
    c, prod = len(coarse) - 1, 1
    for d in range(len(fine) - 1, -1, -1):
        if prod == coarse[c] and c > 0:
            c, prod = c - 1, 1
        group.append(c)
        inner.append(prod)
        prod *= fine[d]
    group.reverse()
    inner.reverse()
    if c != 0 or prod != coarse[0]:
        raise WarpyError(f"internal: {list(coarse)} is no coarsening of {list(fine)}")
    start = [0] * len(coarse)
    for d in range(len(fine)):
        start[group[d]] += view.start[d] * inner[d]
    dims = tuple(group[d] for d in view.dims)
    steps = tuple(view.step(j) * inner[d] for j, d in enumerate(view.dims))
    return View(coarse, view.dtype, dims, tuple(start), view.shape, steps if any(s != 1 for s in steps) else ())


def _reshaped(inner: View, shape: tuple[int, ...], where: str) -> tuple[View, list[tuple[int, int]]]:
    """`inner` reshaped to `shape` (row-major, as numpy's reshape), and the runs of base dimensions it
    needs merged first (empty: the view is computed). One line where the reshape is no view (it
    merges dimensions that are not contiguous in memory)."""
    bs = [1] * len(inner.base_shape)
    for d in range(len(inner.base_shape) - 2, -1, -1):
        bs[d] = bs[d + 1] * inner.base_shape[d + 1]
    old = [(inner.dims[j], inner.step(j), n) for j, n in enumerate(inner.shape) if n > 1]
    groups: list[tuple[list[int], list[int]]] = []
    oi, po, pn = 0, 1, 1
    cur_o: list[int] = []
    cur_n: list[int] = []
    for k, m in enumerate(shape):
        cur_n.append(k)
        pn *= m
        while po < pn and oi < len(old):
            cur_o.append(oi)
            po *= old[oi][2]
            oi += 1
        if po == pn and m > 1:
            groups.append((cur_o, cur_n))
            cur_o, cur_n, po, pn = [], [], 1, 1
    if cur_n:  # trailing extent-1 dimensions: with the last group
        if groups:
            groups[-1][1].extend(cur_n)
        else:
            groups.append(([], cur_n))
    merges: list[tuple[int, int]] = []
    for olds, _ in groups:
        for i, j in zip(olds, olds[1:]):
            (d0, s0, _n0), (d1, s1, n1) = old[i], old[j]
            if bs[d0] * s0 != bs[d1] * s1 * n1:
                raise WarpyError(f"{where}: reshape of a {list(inner.shape)} view to {list(shape)} merges dimensions "
                                 f"that are not contiguous in memory (strides of {bs[d0] * s0} and {bs[d1] * s1} x "
                                 f"{n1} elements): it is no view")
            if d0 != d1:
                merges.append((d0, d1))
    if merges:
        return inner, merges
    dims: list[int] = [0] * len(shape)
    steps: list[int] = [1] * len(shape)
    for olds, news in groups:
        if olds:
            d, s, _ = old[olds[-1]]
        else:  # every extent is 1: any base dimension the view ran along
            d, s = (inner.dims[-1] if inner.dims else len(inner.base_shape) - 1), 1
        acc = s
        for k in reversed(news):
            dims[k], steps[k] = d, acc
            acc *= shape[k]
    return View(inner.base_shape, inner.dtype, tuple(dims), inner.start, shape,
                tuple(steps) if any(x != 1 for x in steps) else ()), []


def base_shape(v: Value) -> tuple[int, ...]:
    """The shape of the tensor that owns base value `v`'s memory: v's own, or coarser where a reshape
    merged dimensions of it that v's shape keeps apart (`Graph.reshape`)."""
    return v.graph.coarse.get(v.id, v.shape)


def view_of(v: Value) -> tuple[Value, View]:
    """The value that owns `v`'s memory, and where `v` lies in it (the whole of it for a non-view; a
    cache_append's result is the memory of the cache it wrote into), over `base_shape` of it."""
    if v.op == "cache_append":
        return view_of(v.args[0])
    if not v.is_view:
        return v, rebase(View.whole(v.shape, v.dtype), base_shape(v))
    base, inner = view_of(v.args[0])
    if v.op == "reshape":
        out, merges = _reshaped(inner, v.shape, v.where)
        if merges:
            raise WarpyError(f"{v.where}: internal: reshape {v.name} needs its base's dimensions merged")
        return base, out
    dims, start, steps = list(inner.dims), list(inner.start), list(inner.steps)
    d = v.attrs["dim"]
    s = inner.step(d)
    if v.op == "select":
        start[dims[d]] += v.attrs["index"] * s
        del dims[d]
        if steps:
            del steps[d]
    else:
        start[dims[d]] += v.attrs["start"] * s
    return base, View(inner.base_shape, inner.dtype, tuple(dims), tuple(start), v.shape,
                      tuple(steps) if any(x != 1 for x in steps) else ())


@dataclass(frozen=True)
class MapDim:
    """One dimension of a tensor map over a view: its base dimension, extent and byte stride; `view`
    is the view dimension it runs along, or None for a selected (fixed) dimension."""

    base_dim: int
    extent: int
    stride: int
    view: Optional[int]


def map_dims(view: View, keep: bool = False) -> tuple[tuple[MapDim, ...], int]:
    """The dimensions (innermost first) of the tensor map that addresses `view`, and the byte offset
    of its origin from the base tensor's start. Dimensions of extent 1 are left out (they need no
    stride, and a (M, 1) column is then the vector it is) unless `keep` (a gemm operand: its box is
    a tile's rows whatever the tensor's extent; an extent-1 dimension's stride is never followed, so
    it is rounded up to a multiple of 16 bytes where it is not one); a selected dimension becomes a
    map dimension of the base's full extent with the index as its coordinate; a sliced dimension
    keeps the slice's extent (so TMA clips at the slice's end) and moves the origin."""
    bshape = view.base_shape
    esz = element_type(view.dtype).bytes
    strides = [esz] * len(bshape)
    for d in range(len(bshape) - 2, -1, -1):
        strides[d] = strides[d + 1] * bshape[d + 1]
    out: list[MapDim] = []
    offset = 0
    for d in set(view.dims):
        offset += view.start[d] * strides[d]
    for j in range(len(view.dims) - 1, -1, -1):
        d = view.dims[j]
        stride = strides[d] * view.step(j)
        if view.shape[j] > 1:
            out.append(MapDim(d, view.shape[j], stride, j))
        elif keep:
            st = stride if not out else -(-stride // TMA_STRIDE_ALIGN) * TMA_STRIDE_ALIGN
            out.append(MapDim(d, 1, st, j))
    for d in sorted(view.selected, reverse=True):
        if bshape[d] > 1:
            out.append(MapDim(d, bshape[d], strides[d], None))
    if not out:  # a single element: a rank-1 map of extent 1
        out.append(MapDim(len(bshape) - 1, 1, esz, len(view.dims) - 1 if view.dims else None))
    return tuple(out), offset


def addressable(view: View, what: str) -> None:
    """Refuse, in one line, a view no TMA tensor map can address."""
    esz = element_type(view.dtype).bytes
    dims, offset = map_dims(view)
    shape = "x".join(map(str, view.shape))
    if dims[0].stride != esz and dims[0].extent > 1:
        raise WarpyError(f"{what}: the {shape} view's innermost dimension is not contiguous (a stride of "
                         f"{dims[0].stride} bytes); TMA needs the innermost dimension contiguous")
    for m in dims[1:]:
        if m.stride % TMA_STRIDE_ALIGN or m.stride >= TMA_MAX_STRIDE:
            raise WarpyError(f"{what}: a {view.dtype} {shape} tensor has a stride of {m.stride} bytes; TMA "
                             f"needs strides that are multiples of {TMA_STRIDE_ALIGN} bytes below 2^40")
    for m in dims:
        if m.extent > TMA_MAX_EXTENT:
            raise WarpyError(f"{what}: an extent of {m.extent} is more than TMA's 2^32")
    if offset % TMA_STRIDE_ALIGN:
        raise WarpyError(f"{what}: the {shape} view starts {offset} bytes into its tensor; TMA needs a "
                         f"{TMA_STRIDE_ALIGN}-byte aligned start (slice the innermost dimension at a multiple of "
                         f"{TMA_STRIDE_ALIGN // esz})")


@dataclass
class _Pending:
    name: str
    op: str
    args: tuple[Arg, ...]
    attrs: dict[str, Any]
    where: str


class Graph:
    """An operator graph: build it with the methods below, then `output(...)`."""

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.values: list[Value] = []
        self.by_name: dict[str, Value] = {}
        self.outputs: list[Value] = []
        self._pending: list[_Pending] = []
        self._pending_outputs: list[tuple[str, str]] = []
        self._where = "?"
        #: base value id -> the coarser shape its tensor has (`reshape` merged dimensions of it)
        self.coarse: dict[int, tuple[int, ...]] = {}

    # --- construction -------------------------------------------------------------------------

    def _at(self) -> str:
        return caller()

    def _new(self, op: str, args: tuple[Value, ...], attrs: dict[str, Any], shape: tuple[int, ...], dtype: str,
             name: Optional[str], where: str) -> Value:
        if name is None:
            name = f"{op}{sum(1 for v in self.values if v.op == op)}"
        if name in self.by_name:
            raise WarpyError(f"{where}: a value is already called {name!r}")
        if not 1 <= len(shape) <= MAX_RANK:
            raise WarpyError(f"{where}: {name} would have rank {len(shape)}; tensors have rank 1..{MAX_RANK}")
        for n in shape:
            if not isinstance(n, int) or n < 1:
                raise WarpyError(f"{where}: {name} has extent {n!r}; extents are positive integers")
        v = Value(self, len(self.values), op, args, attrs, name, shape, dtype, where)
        self.values.append(v)
        self.by_name[name] = v
        if not v.is_view:
            addressable(View.whole(v.shape, v.dtype), f"{where}: {name}")
        return v

    def _operand(self, a: Any, op: str, where: str) -> Value:
        if not isinstance(a, Value):
            raise WarpyError(f"{where}: {op} takes graph values, not {type(a).__name__}")
        if a.graph is not self:
            raise WarpyError(f"{where}: {op} takes a value of another graph ({a.name})")
        return a

    def _read(self, a: Value, op: str, where: str) -> None:
        """An op reads `a` through a tensor map: its view must be addressable."""
        if a.is_view:
            addressable(view_of(a)[1], f"{where}: {op} reads {a.name}")

    def input(self, name: str, shape: Sequence[int], dtype: str = "bf16", where: Optional[str] = None) -> Value:
        """A tensor the caller passes in."""
        where = where or self._at()
        try:
            canon = element_type(dtype).name
        except WarpyError as e:
            raise WarpyError(f"{where}: input {name}: {e}") from None
        if canon not in ELEMENT_TYPES:
            raise WarpyError(f"{where}: input {name} is {canon}; the megakernel's op bodies take "
                             f"{', '.join(ELEMENT_TYPES)}")
        return self._new("input", (), {}, tuple(int(n) for n in shape), canon, name, where)

    def _same_dtype(self, op: str, where: str, *vs: Value) -> str:
        dts = {v.dtype for v in vs}
        if len(dts) > 1:
            raise WarpyError(f"{where}: {op} mixes element types {sorted(dts)}")
        return vs[0].dtype

    def matmul(self, x: Value, w: Value, name: Optional[str] = None, where: Optional[str] = None) -> Value:
        """x·W: x (M, K), W (K, N) -> (M, N); bf16 operands, fp32 accumulation."""
        return self._mm("matmul", x, w, name, where or self._at())

    def linear(self, x: Value, w: Value, name: Optional[str] = None, where: Optional[str] = None) -> Value:
        """x·Wᵀ: x (M, K), W (N, K) -> (M, N) (torch's linear without bias)."""
        return self._mm("linear", x, w, name, where or self._at())

    def _mm(self, op: str, x: Value, w: Value, name: Optional[str], where: str) -> Value:
        x, w = self._operand(x, op, where), self._operand(w, op, where)
        if x.rank != 2 or w.rank != 2:
            raise WarpyError(f"{where}: {op} takes a rank-2 x and W, not {list(x.shape)} and {list(w.shape)}")
        k_w, n = (w.shape[0], w.shape[1]) if op == "matmul" else (w.shape[1], w.shape[0])
        if x.shape[1] != k_w:
            raise WarpyError(f"{where}: {op} of {list(x.shape)} and {list(w.shape)}: K {x.shape[1]} != {k_w}")
        dt = self._same_dtype(op, where, x, w)
        for a in (x, w):
            self._read(a, op, where)
        return self._new(op, (x, w), {}, (x.shape[0], n), dt, name, where)

    def _broadcast(self, op: str, a: Value, b: Value, name: Optional[str], where: str) -> Value:
        a, b = self._operand(a, op, where), self._operand(b, op, where)
        try:
            shape = tuple(int(n) for n in np.broadcast_shapes(a.shape, b.shape))
        except ValueError:
            raise WarpyError(f"{where}: {op} of {list(a.shape)} and {list(b.shape)}: the shapes do not broadcast") from None
        dt = self._same_dtype(op, where, a, b)
        for v in (a, b):
            self._read(v, op, where)
        return self._new(op, (a, b), {}, shape, dt, name, where)

    def add(self, a: Value, b: Value, name: Optional[str] = None, where: Optional[str] = None) -> Value:
        """a + b, numpy broadcasting (a bias row, a per-row column, a residual)."""
        return self._broadcast("add", a, b, name, where or self._at())

    residual = add

    def mul(self, a: Value, b: Value, name: Optional[str] = None, where: Optional[str] = None) -> Value:
        """a · b elementwise, numpy broadcasting (a per-row scale)."""
        return self._broadcast("mul", a, b, name, where or self._at())

    def silu_mul(self, gate: Value, up: Value, name: Optional[str] = None, where: Optional[str] = None) -> Value:
        """silu(gate) · up (SwiGLU), numpy broadcasting."""
        return self._broadcast("silu_mul", gate, up, name, where or self._at())

    def _unary(self, op: str, x: Value, name: Optional[str], where: str) -> Value:
        x = self._operand(x, op, where)
        self._read(x, op, where)
        return self._new(op, (x,), {}, x.shape, x.dtype, name, where)

    def relu(self, x: Value, name: Optional[str] = None, where: Optional[str] = None) -> Value:
        return self._unary("relu", x, name, where or self._at())

    def silu(self, x: Value, name: Optional[str] = None, where: Optional[str] = None) -> Value:
        """x · sigmoid(x)."""
        return self._unary("silu", x, name, where or self._at())

    def gelu(self, x: Value, name: Optional[str] = None, where: Optional[str] = None) -> Value:
        """The tanh form: x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))."""
        return self._unary("gelu", x, name, where or self._at())

    def rmsnorm(self, x: Value, weight: Value, eps: float, name: Optional[str] = None,
                where: Optional[str] = None) -> Value:
        """x / sqrt(mean(x², last dimension) + eps) · weight; eps as the graph gives it."""
        where = where or self._at()
        x, weight = self._operand(x, "rmsnorm", where), self._operand(weight, "rmsnorm", where)
        if weight.shape != (x.shape[-1],):
            raise WarpyError(f"{where}: rmsnorm of {list(x.shape)} takes a weight of shape [{x.shape[-1]}], "
                             f"not {list(weight.shape)}")
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
            raise WarpyError(f"{where}: rmsnorm's eps is a finite number >= 0, not {eps!r}")
        dt = self._same_dtype("rmsnorm", where, x, weight)
        for v in (x, weight):
            self._read(v, "rmsnorm", where)
        return self._new("rmsnorm", (x, weight), {"eps": float(eps)}, x.shape, dt, name, where)

    def cache_append(self, cache: Value, rows: Value, at: int, name: Optional[str] = None,
                     where: Optional[str] = None) -> Value:
        """`cache` (Lmax, ...) with rows at..at+T-1 replaced by `rows` (T, ...), written in place: the
        result is the cache after the write (read the new rows through it). The cache is a graph input
        or a view of one, and has no other use (its old value is gone once the launch writes)."""
        where = where or self._at()
        cache, rows = self._operand(cache, "cache_append", where), self._operand(rows, "cache_append", where)
        base = cache
        while base.is_view:
            base = base.args[0]
        if base.op != "input":
            raise WarpyError(f"{where}: cache_append writes into a graph input (or a view of one), not into "
                             f"{cache.name}, a {cache.op} result")
        if rows.rank != cache.rank or rows.shape[1:] != cache.shape[1:]:
            raise WarpyError(f"{where}: cache_append of rows {list(rows.shape)} into a cache {list(cache.shape)}: "
                             f"the rows' shape past the first dimension must be the cache's")
        if isinstance(at, bool) or not isinstance(at, int) or at < 0 or at + rows.shape[0] > cache.shape[0]:
            raise WarpyError(f"{where}: cache_append at row {at!r} of {rows.shape[0]} rows does not fit a cache of "
                             f"{cache.shape[0]} rows")
        dt = self._same_dtype("cache_append", where, cache, rows)
        for v in (cache, rows):
            self._read(v, "cache_append", where)
        # the rows are written through the cache's view sliced to them: that must be addressable too
        _, vw = view_of(cache)
        addressable(View(vw.base_shape, vw.dtype, vw.dims, vw.start[:vw.dims[0]] + (vw.start[vw.dims[0]] + at,) +
                         vw.start[vw.dims[0] + 1:], rows.shape), f"{where}: cache_append's rows in {cache.name}")
        return self._new("cache_append", (cache, rows), {"at": at}, cache.shape, dt, name, where)

    def attention(self, q: Value, k: Value, v: Value, length: int, scale: Optional[float] = None,
                  causal: bool = True, name: Optional[str] = None, where: Optional[str] = None) -> Value:
        """Decode attention: q (T, Hq, D) against the first `length` rows of the caches k, v (Lmax, Hkv, D),
        Hkv dividing Hq (query head i reads KV head i // (Hq / Hkv)); softmax(scale · q·kᵀ)·v per head,
        (T, Hq, D). The T queries are the last T of the `length` positions: with `causal` query t sees
        rows 0..length-T+t, without it every row below `length`. scale defaults to 1/sqrt(D). `length`
        is static (a graph is built per cache length)."""
        where = where or self._at()
        q, k, v = (self._operand(a, "attention", where) for a in (q, k, v))
        if q.rank != 3 or k.rank != 3 or v.rank != 3:
            raise WarpyError(f"{where}: attention takes q (T, Hq, D) and caches (Lmax, Hkv, D), not {list(q.shape)}, "
                             f"{list(k.shape)}, {list(v.shape)}")
        if k.shape != v.shape:
            raise WarpyError(f"{where}: attention's k and v caches differ in shape: {list(k.shape)} and {list(v.shape)}")
        t, hq, d = q.shape
        lmax, hkv, dk = k.shape
        if dk != d:
            raise WarpyError(f"{where}: attention's q has head_dim {d}, the caches {dk}")
        if hq % hkv:
            raise WarpyError(f"{where}: attention's {hkv} KV heads do not divide its {hq} query heads")
        if isinstance(length, bool) or not isinstance(length, int) or not t <= length <= lmax:
            raise WarpyError(f"{where}: attention's length {length!r} is not between the {t} queries and the "
                             f"caches' {lmax} rows")
        if scale is None:
            scale = 1.0 / math.sqrt(d)
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
            raise WarpyError(f"{where}: attention's scale is a finite number > 0, not {scale!r}")
        dt = self._same_dtype("attention", where, q, k, v)
        for a in (q, k, v):
            self._read(a, "attention", where)
        return self._new("attention", (q, k, v), {"length": length, "scale": float(scale), "causal": bool(causal)},
                         q.shape, dt, name, where)

    def reshape(self, x: Value, shape: Sequence[int], name: Optional[str] = None,
                where: Optional[str] = None) -> Value:
        """x with the same elements in row-major order as `shape` (numpy's reshape; one extent may be
        -1): a view, splitting and merging dimensions. Refused in one line where it is no view (it
        merges dimensions not contiguous in memory). A merge of dimensions the owning tensor keeps
        apart (x (T, H, D) made by an op, viewed as (T, H·D)) makes that tensor coarser: its producer
        writes it through a view of the finer shape; an input's tensor takes the caller's array in
        the coarser shape (the same bytes)."""
        where = where or self._at()
        x = self._operand(x, "reshape", where)
        want = [int(n) for n in shape]
        if want.count(-1) > 1 or any(n < 1 and n != -1 for n in want):
            raise WarpyError(f"{where}: reshape to {want}: extents are positive (one may be -1)")
        if -1 in want:
            rest = math.prod(n for n in want if n != -1)
            if rest == 0 or x.size % rest:
                raise WarpyError(f"{where}: reshape of {list(x.shape)} to {want}: the sizes do not match")
            want[want.index(-1)] = x.size // rest
        new = tuple(want)
        if math.prod(new) != x.size:
            raise WarpyError(f"{where}: reshape of {list(x.shape)} ({x.size} elements) to {list(new)} "
                             f"({math.prod(new)}): the sizes differ")
        while True:
            base, inner = view_of(x)
            _, merges = _reshaped(inner, new, where)
            if not merges:
                break
            self.coarse[base.id] = coarsen(base_shape(base), merges[0])
        return self._new("reshape", (x,), {"shape": new}, new, x.dtype, name, where)

    def rope(self, x: Value, cos: Value, sin: Value, name: Optional[str] = None, where: Optional[str] = None) -> Value:
        """Rotary position embedding, Llama's rotate-half form: x (T, H, D) with tables cos, sin (T, D)
        (a row per token, as HF's LlamaRotaryEmbedding makes them: each frequency's value twice,
        cat(f, f)), broadcast over the heads: out = x·cos + rotate_half(x)·sin, rotate_half(x) =
        cat(-x[..., D/2:], x[..., :D/2]); so out[..., :D/2] = x1·cos - x2·sin and out[..., D/2:] =
        x2·cos + x1·sin (with the halves' own table columns), rounded once."""
        where = where or self._at()
        x, cos, sin = (self._operand(a, "rope", where) for a in (x, cos, sin))
        if x.rank != 3 or x.shape[2] % 2:
            raise WarpyError(f"{where}: rope takes x (T, H, D) with D even, not {list(x.shape)}")
        t, _, d = x.shape
        for a in (cos, sin):
            if a.shape != (t, d):
                raise WarpyError(f"{where}: rope of {list(x.shape)} takes cos and sin tables of shape [{t}, {d}], not "
                                 f"{list(a.shape)} ({a.name})")
        dt = self._same_dtype("rope", where, x, cos, sin)
        c3 = self.reshape(cos, (t, 1, d), where=where)
        s3 = self.reshape(sin, (t, 1, d), where=where)
        for a in (x, c3, s3):
            self._read(a, "rope", where)
        return self._new("rope", (x, c3, s3), {}, x.shape, dt, name, where)


    def select(self, x: Value, dim: int, index: int, name: Optional[str] = None, where: Optional[str] = None) -> Value:
        """x[..., index, ...] along `dim`: a view, one dimension fewer."""
        where = where or self._at()
        x = self._operand(x, "select", where)
        d = self._dim(x, dim, "select", where)
        n = x.shape[d]
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise WarpyError(f"{where}: select index {index} is outside dimension {d} of {list(x.shape)}")
        if x.rank == 1:
            raise WarpyError(f"{where}: select on a rank-1 value would leave a scalar; slice it instead")
        shape = x.shape[:d] + x.shape[d + 1:]
        return self._new("select", (x,), {"dim": d, "index": i}, shape, x.dtype, name, where)

    def slice(self, x: Value, dim: int, start: int, stop: int, name: Optional[str] = None,
              where: Optional[str] = None) -> Value:
        """x[..., start:stop, ...] along `dim` (step 1): a view."""
        where = where or self._at()
        x = self._operand(x, "slice", where)
        d = self._dim(x, dim, "slice", where)
        n = x.shape[d]
        lo, hi, _ = slice(start, stop).indices(n)
        if hi <= lo:
            raise WarpyError(f"{where}: slice {start}:{stop} of dimension {d} (extent {n}) is empty")
        shape = x.shape[:d] + (hi - lo,) + x.shape[d + 1:]
        return self._new("slice", (x,), {"dim": d, "start": lo}, shape, x.dtype, name, where)

    def _dim(self, x: Value, dim: int, op: str, where: str) -> int:
        d = dim + x.rank if dim < 0 else dim
        if not 0 <= d < x.rank:
            raise WarpyError(f"{where}: {op} dimension {dim} of a rank-{x.rank} value")
        return d

    def output(self, *values: Arg) -> None:
        """Mark values the call returns (in this order); a name may be of a by-name node."""
        where = self._at()
        for a in values:
            if isinstance(a, str):
                self._pending_outputs.append((a, where))
                continue
            v = self._operand(a, "output", where)
            self._read(v, "output", where)  # an output that is a view is copied out through its map
            self.outputs.append(v)

    # --- the by-name form ---------------------------------------------------------------------

    def node(self, name: str, op: str, args: Sequence[Arg] = (), **attrs: Any) -> None:
        """Define `name` = op(args...) where args are values or names, possibly of values defined later;
        `check` builds them in dependency order (and reports a cycle)."""
        if op not in OPS or op == "input":
            raise WarpyError(f"{caller()}: no op called {op!r} (ops: {', '.join(o for o in OPS if o != 'input')})")
        self._pending.append(_Pending(name, op, tuple(args), dict(attrs), caller()))

    def _build(self, p: _Pending) -> None:
        args: list[Any] = [a if isinstance(a, Value) else self.by_name[a] for a in p.args]
        kw: dict[str, Any] = dict(p.attrs, name=p.name, where=p.where)
        getattr(self, p.op)(*args, **kw)

    def _resolve(self) -> None:
        pending = {p.name: p for p in self._pending}
        self._pending = []
        state: dict[str, int] = {}  # 1 visiting, 2 done

        def visit(name: str, path: list[str]) -> None:
            if name in self.by_name and name not in pending:
                return
            if name not in pending:
                raise WarpyError(f"{path and pending[path[-1]].where or '?'}: {path[-1] if path else '?'} uses "
                                 f"{name!r}, which no input or node defines")
            if state.get(name) == 2:
                return
            if state.get(name) == 1:
                cyc = path[path.index(name):] + [name]
                raise WarpyError(f"{pending[name].where}: the graph is cyclic: {' -> '.join(cyc)}")
            state[name] = 1
            for a in pending[name].args:
                if isinstance(a, str):
                    visit(a, path + [name])
            state[name] = 2
            self._build(pending[name])

        for name in list(pending):
            visit(name, [])

    # --- whole-graph questions ----------------------------------------------------------------

    def check(self) -> None:
        """Resolve by-name nodes and refuse a graph with no output (one line each)."""
        if self._pending:
            self._resolve()
        for name, where in self._pending_outputs:
            if name not in self.by_name:
                raise WarpyError(f"{where}: output {name!r} names no value")
            v = self.by_name[name]
            self._read(v, "output", where)
            self.outputs.append(v)
        self._pending_outputs = []
        if not self.outputs:
            raise WarpyError(f"graph {self.name!r} has no output (mark the results with output(...))")

    def inputs(self) -> list[Value]:
        return [v for v in self.values if v.op == "input"]

    def consumers(self) -> dict[int, list[Value]]:
        out: dict[int, list[Value]] = {v.id: [] for v in self.values}
        for v in self.values:
            for a in v.args:
                out[a.id].append(v)
        return out

    def live(self) -> list[Value]:
        """The values an output depends on, in definition order (a topological order)."""
        seen: set[int] = set()
        stack = list(self.outputs)
        while stack:
            v = stack.pop()
            if v.id not in seen:
                seen.add(v.id)
                stack.extend(v.args)
        return [v for v in self.values if v.id in seen]

    def evaluate(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Numpy on the whole graph, op by op: each op computed in float64 from its operands and
        rounded to its element type (as a tensor of that type would hold it). The outputs in order."""
        from warpy.mega import semantics as S

        self.check()
        env: dict[int, np.ndarray] = {}
        for v in self.live():
            env[v.id] = S.evaluate_value(v, [env[a.id] for a in v.args], inputs)
        return [env[v.id] for v in self.outputs]

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Inputs with values of the graph's element types (float64 arrays), small and of both signs."""
        from warpy.mega import semantics as S

        rng = np.random.default_rng(seed)
        return {v.name: S.random_values(rng, v.shape, v.dtype) for v in self.inputs()}

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.values)} values, {len(self.outputs)} outputs)"


def topological(values: Iterable[Value]) -> list[Value]:
    return sorted(values, key=lambda v: v.id)


__all__ = ["Graph", "Value", "View", "MapDim", "view_of", "base_shape", "rebase", "coarsen", "map_dims", "addressable", "ELEMENT_TYPES", "MAX_RANK",
           "ACTIVATION_OPS", "BINARY_OPS", "VIEW_OPS", "ATTENTION_OPS", "OPS", "caller"]
