"""A graph lowered to the nodes the megakernel runs: one node per interpreter body.

Fusion (each fused value has exactly one use and is not an output, so nothing else sees it):
- a matmul takes the values after it into its epilogue: an add of any operand that broadcasts to the
  product's shape (the bias), then an activation, then another such add (the residual);
  `act(x·W + bias) + residual`, rounded once;
- `mul(silu(a), b)` becomes `silu_mul(a, b)`.
Views are no nodes: an operand is a view of a tensor (`Operand`). An output that is a view or an
input is copied out by a `unary` node with no activation.

`Program.reference` runs the nodes on whole tensors with `warpy.mega.semantics`; the reference VM
must give exactly the same values tile by tile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

import numpy as np

from warpy.errors import WarpyError
from warpy.mega import semantics as S
from warpy.mega.graph import ACTIVATION_OPS, Graph, Value, View, view_of


@dataclass(eq=False)
class Tensor:
    """Memory a launch owns or is given. kind: input (the caller's), temp (an intermediate the
    schedule may put in a reused buffer) or output (returned, never reused)."""

    id: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    kind: str
    producer: Optional[int] = None

    @property
    def size(self) -> int:
        n = 1
        for e in self.shape:
            n *= e
        return n

    def __repr__(self) -> str:
        return f"T{self.id}:{self.name}{list(self.shape)}"


@dataclass(frozen=True)
class Operand:
    """A node reads `view` of tensor `tensor`."""

    tensor: int
    view: View

    def array(self, arrays: Mapping[int, np.ndarray]) -> np.ndarray:
        """The elements the view names in its tensor's array."""
        a = arrays[self.tensor]
        idx = [slice(s, s + 1) for s in self.view.start]
        for j, d in enumerate(self.view.dims):
            idx[d] = slice(self.view.start[d], self.view.start[d] + self.view.shape[j])
        return a[tuple(idx)].reshape(self.view.shape)


@dataclass(eq=False)
class Node:
    """One body: kind gemm / unary / binary / silu_mul / rmsnorm writing tensor `out` from `operands`
    (in the roles of `warpy.mega.fields.OPERAND_ROLES`, the output left out)."""

    id: int
    kind: str
    out: int
    operands: tuple[Operand, ...]
    act: str = "none"
    binop: str = "add"
    b_kmajor: bool = False
    bias: bool = False
    residual: bool = False
    eps: float = 0.0
    values: tuple[str, ...] = ()
    where: str = ""

    def describe(self) -> str:
        if self.kind == "gemm":
            s = f"gemm x·W{'ᵀ' if self.b_kmajor else ''}"
            s += " + bias" if self.bias else ""
            s += f", {self.act}" if self.act != "none" else ""
            return s + (" + residual" if self.residual else "")
        if self.kind == "unary":
            return "copy" if self.act == "none" else self.act
        if self.kind == "binary":
            return self.binop
        if self.kind == "rmsnorm":
            return f"rmsnorm eps={self.eps:g}"
        return self.kind


@dataclass
class Program:
    graph: Graph
    tensors: list[Tensor] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)

    def reference(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Numpy on the whole program: each node on whole tensors, in order; the outputs."""
        arrays: dict[int, np.ndarray] = {}
        for t in self.tensors:
            if t.kind == "input":
                x = np.asarray(inputs[t.name]).astype(np.float32, copy=False)
                if x.shape != t.shape:
                    raise WarpyError(f"input {t.name} has shape {list(x.shape)}, the graph says {list(t.shape)}")
                arrays[t.id] = x
        for n in self.nodes:
            arrays[n.out] = compute(n, [o.array(arrays) for o in n.operands], self.tensors[n.out].dtype)
        return [arrays[i] for i in self.outputs]

    def consumers(self) -> dict[int, list[int]]:
        """tensor id -> the nodes reading it."""
        out: dict[int, list[int]] = {t.id: [] for t in self.tensors}
        for n in self.nodes:
            for o in n.operands:
                if n.id not in out[o.tensor]:
                    out[o.tensor].append(n.id)
        return out


def compute(n: Node, args: list[np.ndarray], dtype: str) -> np.ndarray:
    """Node `n` on its operands' elements (whole tensors or a tile's boxes)."""
    if n.kind == "gemm":
        it = iter(args[2:])
        bias = next(it) if n.bias else None
        res = next(it) if n.residual else None
        return S.gemm(args[0], args[1], n.b_kmajor, bias, n.act, res, dtype)
    if n.kind == "unary":
        return S.unary(args[0], n.act, dtype)
    if n.kind == "binary":
        return S.binary(n.binop, args[0], args[1], dtype)
    if n.kind == "silu_mul":
        return S.silu_mul(args[0], args[1], dtype)
    if n.kind == "rmsnorm":
        return S.rmsnorm(args[0], args[1], n.eps, dtype)
    raise WarpyError(f"no meaning for node kind {n.kind!r}")


def lower(graph: Graph) -> Program:
    """The nodes that compute `graph`'s outputs, epilogues and SwiGLU fused."""
    graph.check()
    live = graph.live()
    uses: dict[int, int] = {v.id: 0 for v in live}
    users: dict[int, list[Value]] = {v.id: [] for v in live}
    for v in live:
        for a in v.args:
            uses[a.id] += 1
            users[a.id].append(v)
    out_ids = {v.id for v in graph.outputs}
    prog = Program(graph)
    tensor_of: dict[int, int] = {}  # graph value (owning memory) -> tensor

    def new_tensor(name: str, shape: tuple[int, ...], dtype: str, kind: str) -> Tensor:
        t = Tensor(len(prog.tensors), name, shape, dtype, kind)
        prog.tensors.append(t)
        return t

    def operand(v: Value) -> Operand:
        base, view = view_of(v)
        return Operand(tensor_of[base.id], view)

    def sole_user(v: Value) -> Optional[Value]:
        """The one value using v, where v may be fused into it."""
        if uses[v.id] != 1 or v.id in out_ids:
            return None
        return users[v.id][0]

    def other(add: Value, v: Value) -> Optional[Value]:
        """The operand of `add` that is not v, where it broadcasts to v's shape."""
        if add.op != "add" or add.shape != v.shape:
            return None
        o = add.args[1] if add.args[0] is v else add.args[0]
        return o

    for v in live:
        if v.op == "input":
            tensor_of[v.id] = new_tensor(v.name, v.shape, v.dtype, "input").id
    absorbed: set[int] = set()
    for v in live:
        if v.op == "input" or v.is_view or v.id in absorbed:
            continue
        chain = [v]
        kw: dict[str, object] = {}
        operands: list[Value] = []
        kind = v.op
        if v.op in ("matmul", "linear"):
            kind = "gemm"
            operands = [v.args[0], v.args[1]]
            kw["b_kmajor"] = v.op == "linear"
            cur = v
            u = sole_user(cur)
            o = other(u, cur) if u is not None else None
            if u is not None and o is not None:
                kw["bias"] = True
                operands.append(o)
                cur = u
                chain.append(u)
            u = sole_user(cur)
            if u is not None and u.op in ACTIVATION_OPS:
                kw["act"] = u.op
                cur = u
                chain.append(u)
            u = sole_user(cur)
            o = other(u, cur) if u is not None else None
            if u is not None and o is not None:
                kw["residual"] = True
                operands.append(o)
                cur = u
                chain.append(u)
            elif kw.get("bias") and "act" not in kw and operands[2].shape == v.shape:
                # one add of a whole tensor and no activation: it is a residual (the same arithmetic)
                kw["bias"], kw["residual"] = False, True
        elif v.op == "silu" and (u := sole_user(v)) is not None and u.op == "mul" and \
                u.shape == np.broadcast_shapes(v.shape, u.shape):
            kind = "silu_mul"
            b = u.args[1] if u.args[0] is v else u.args[0]
            if b is v:  # silu(a) * silu(a): the silu has two uses, never here
                raise WarpyError(f"{u.where}: internal: a mul of one value by itself")
            operands = [v.args[0], b]
            chain.append(u)
        elif v.op in ACTIVATION_OPS:
            kind, kw["act"], operands = "unary", v.op, [v.args[0]]
        elif v.op in ("add", "mul"):
            kind, kw["binop"], operands = "binary", v.op, list(v.args)
        elif v.op == "silu_mul":
            operands = list(v.args)
        elif v.op == "rmsnorm":
            kw["eps"] = v.attrs["eps"]
            operands = list(v.args)
        else:
            raise WarpyError(f"{v.where}: internal: no lowering for {v.op}")
        last = chain[-1]
        absorbed.update(c.id for c in chain)
        t = new_tensor(last.name, last.shape, last.dtype, "output" if last.id in out_ids else "temp")
        node = Node(len(prog.nodes), kind, t.id, tuple(operand(o) for o in operands),
                    values=tuple(c.name for c in chain), where=v.where, **kw)  # type: ignore[arg-type]
        t.producer = node.id
        prog.nodes.append(node)
        for c in chain:
            tensor_of[c.id] = t.id
    for v in graph.outputs:
        base, view = view_of(v)
        t = prog.tensors[tensor_of[base.id]]
        if t.kind == "output" and view.is_whole:
            prog.outputs.append(t.id)
            continue
        # a view, or a tensor the caller gave: copied into memory the call returns
        copy = new_tensor(f"{v.name}_out", v.shape, v.dtype, "output")
        node = Node(len(prog.nodes), "unary", copy.id, (Operand(t.id, view),), values=(v.name,), where=v.where)
        copy.producer = node.id
        prog.nodes.append(node)
        prog.outputs.append(copy.id)
    return prog


__all__ = ["Tensor", "Operand", "Node", "Program", "lower", "compute"]
