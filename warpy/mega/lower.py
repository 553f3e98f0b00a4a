"""A graph lowered to the nodes the megakernel runs: one node per interpreter body.

Fusion (each fused value has exactly one use and is not an output, so nothing else sees it):
- a matmul takes the values after it into its epilogue: an add of any operand that broadcasts to the
  product's shape (the bias), then an activation, then another such add (the residual);
  `act(x·W + bias) + residual`, rounded once;
- `mul(silu(a), b)` becomes `silu_mul(a, b)`;
- with `glu` (`MegaConfig.glu`, sm_90a only): `silu_mul(linear(h, Wg), linear(h, Wu))` where both
  linears read the same value h, have the same shape, and neither has another use nor is an output
  becomes ONE gemm node (`Node.glu`) with operands (h, Wg, Wu) whose value is silu(h·Wgᵀ)·(h·Wuᵀ),
  rounded once (`semantics.gemm_glu`): SwiGLU's first half without the silu_mul level.
- with `norm` (`MegaConfig.norm`, sm_90a only): an rmsnorm whose every use is the A operand of a
  linear that takes no residual (after the fusions above), with at most `NORM_ROWS` rows and not an
  output, is no node of its own: each of those gemms reads the rmsnorm's input and weight instead
  (`Node.norm`, the weight its last operand) and computes `semantics.gemm_norm` (the decode tiles
  normalise the rows of A they load anyway; a dependency level less each time).
- with `rope` (`MegaConfig.rope`, sm_90a only): a linear of at most ROPE_ROWS rows whose one use is
  a reshape of its product into heads (M, N / D, D), D a multiple of ROPE_HEAD_ALIGN, that reshape's one use a rope (its result a
  tensor of its own) or a cache append, neither an output, is one gemm node writing the heads itself
  (`tiling.gemm_heads`): roped (`Node.rope`, operands (a, W, the tables)[, the norm weight],
  `semantics.gemm_rope`: the product roped before it is rounded), into the cache's rows where the
  rope (K) or the heads themselves (V) are appended. A gemm has one operand for the tables: the
  rope's cos and sin are stacked as one (2, T, D) tensor by two copy nodes, once per pair.
Views are no nodes: an operand is a view of a tensor (`Operand`; a reshape's split or merge is a
view with steps, `graph.View`). A tensor a reshape made coarser than the value its node computes
(`Graph.reshape` merged its dimensions) is written through a view of the value's shape
(`Node.out_view`, `_coarse_out`), an input of that kind takes the caller's array in the coarser shape
(`Tensor.given`). An output that is a view or an input is copied out by a `unary` node with no
activation.

Decode attention: `cache_append` is a `unary` copy whose output is a view of the cache (`Node.out_view`:
the rows it writes), or, where the rows are a rope used only there, that rope writing the rows itself; the cache's input tensor becomes `state` (the caller's memory, written in place).
A read of the cache through anything but the append's result may not touch the appended rows (its
value would depend on whether it ran before the write). `attention` becomes two nodes: `attention`
(one tile per KV head and chunk of the cache, writing the fp32 partial of `semantics.attention_partial`
into a temp of (Hkv, S, T·G, D + 4)) and `attention_combine` (the partials of each head reduced to the
bf16 output); the split S and the chunk rows come from `tiling.attention_split` (the target's SMs).
With `fresh` (sm_90a) an attention whose caches' last rows were just appended (`fresh_rows`) has two
partial nodes writing one partials tensor through views of its chunk axis: the old rows (every query
sees them: not causal; nothing in the launch writes them) and the appended rows (causal among
themselves); the combine reads the chunks of both.

`Program.reference` runs the nodes on whole tensors with `warpy.mega.semantics`; the reference VM
must give exactly the same values tile by tile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

import numpy as np

from warpy.errors import WarpyError
from warpy.mega import semantics as S
from warpy.mega.graph import ACTIVATION_OPS, Graph, Value, View, base_shape, rebase, view_of

if TYPE_CHECKING:
    from warpy.target import Target


@dataclass(eq=False)
class Tensor:
    """Memory a launch owns or is given. kind: input (the caller's), state (the caller's, written in
    place by the launch: a KV cache), temp (an intermediate the schedule may put in a reused buffer) or
    output (returned, never reused)."""

    id: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    kind: str
    producer: Optional[int] = None
    #: an input or state tensor a reshape made coarser (`Graph.reshape`): the shape the caller gives
    given: tuple[int, ...] = ()

    def caller_array(self, x: np.ndarray) -> np.ndarray:
        """The caller's array for this input or state tensor in the tensor's shape (one line where it
        is neither that shape nor the caller's)."""
        if x.shape != self.shape:
            if not self.given or x.shape != self.given:
                raise WarpyError(f"input {self.name} has shape {list(x.shape)}, the graph says "
                                 f"{list(self.given or self.shape)}")
            x = x.reshape(self.shape)
        return x

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
        """The elements the view names in its tensor's array (a read-only numpy view)."""
        return self.view.take(arrays[self.tensor])

    def assign(self, arrays: dict[int, np.ndarray], value: np.ndarray) -> None:
        """Write `value` (the view's shape) into the view's elements of its tensor's array (made, zero,
        where the tensor has none yet: a tensor its producer writes through a view)."""
        if self.tensor not in arrays:
            arrays[self.tensor] = np.zeros(self.view.base_shape, dtype=np.asarray(value).dtype)
        elif not arrays[self.tensor].flags.c_contiguous:
            arrays[self.tensor] = np.ascontiguousarray(arrays[self.tensor])
        self.view.put(arrays[self.tensor], value)


@dataclass(eq=False)
class Node:
    """One body: kind gemm / unary / binary / silu_mul / rmsnorm / attention / attention_combine writing
    tensor `out` (or its view `out_view`) from `operands` (in the roles of
    `warpy.mega.fields.OPERAND_ROLES`, the output left out). Attention: `length` cache rows, `scale`,
    `causal`, `group` query heads a KV head, `tokens` queries, `chunk` cache rows a tile, `splits`
    chunks a head."""

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
    out_view: Optional[View] = None
    length: int = 0
    scale: float = 0.0
    causal: bool = False
    group: int = 1
    tokens: int = 1
    chunk: int = 0
    splits: int = 0
    #: gemm: operands (a, gate weight, up weight), value silu(a·Wgᵀ)·(a·Wuᵀ) (no bias, residual, act)
    glu: bool = False
    #: gemm: A is rmsnorm(a, w) with `eps`: the norm weight w is the last operand (no residual)
    norm: bool = False
    #: gemm: the product is roped before it is rounded (`semantics.gemm_rope`): operands (a, W, the
    #: rope tables stacked (2, T, D)[, the norm weight]), the output (T, N/D, D); no bias or residual
    rope: bool = False

    @property
    def head_dim(self) -> int:
        """Attention: D (the combine's operand is the partial, D + PARTIAL_EXTRA wide)."""
        op = self.operands[0].view.shape[-1]
        return op - S.PARTIAL_EXTRA if self.kind == "attention_combine" else op

    def describe(self) -> str:
        x = f"rmsnorm(x, eps={self.eps:g})" if self.norm else "x"
        if self.kind == "gemm" and self.glu:
            return f"gemm silu({x}·Wgᵀ)·({x}·Wuᵀ)"
        if self.kind == "gemm" and self.rope:
            return f"gemm rope({x}·Wᵀ)"
        if self.kind == "gemm":
            s = f"gemm {x}·W{'ᵀ' if self.b_kmajor else ''}"
            s += " + bias" if self.bias else ""
            s += f", {self.act}" if self.act != "none" else ""
            return s + (" + residual" if self.residual else "")
        if self.kind == "unary":
            return "copy" if self.act == "none" else self.act
        if self.kind == "binary":
            return self.binop
        if self.kind == "rmsnorm":
            return f"rmsnorm eps={self.eps:g}"
        if self.kind == "rope":
            return "rope"
        if self.kind == "unary" and self.out_view is not None:
            return "cache append"
        if self.kind == "attention":
            return f"attention partials L={self.length} x{self.splits} of {self.chunk}"
        if self.kind == "attention_combine":
            return f"attention combine of {self.splits}"
        return self.kind


@dataclass
class Program:
    graph: Graph
    tensors: list[Tensor] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)

    def reference(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Numpy on the whole program: each node on whole tensors, in order; the outputs."""
        arrays = self.run(inputs)
        return [arrays[i] for i in self.outputs]

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[int, np.ndarray]:
        """Every tensor's value after the program (state tensors as the launch leaves them; the
        caller's arrays are not written)."""
        arrays: dict[int, np.ndarray] = {}
        for t in self.tensors:
            if t.kind in ("input", "state"):
                arrays[t.id] = t.caller_array(np.asarray(inputs[t.name]).astype(np.float32, copy=t.kind == "state"))
        for n in self.nodes:
            apply(n, arrays, self.tensors[n.out].dtype)
        return arrays

    def consumers(self) -> dict[int, list[int]]:
        """tensor id -> the nodes reading it."""
        out: dict[int, list[int]] = {t.id: [] for t in self.tensors}
        for n in self.nodes:
            for o in n.operands:
                if n.id not in out[o.tensor]:
                    out[o.tensor].append(n.id)
        return out


def apply(n: Node, arrays: dict[int, np.ndarray], dtype: str) -> None:
    """Node `n` on whole tensors: its output's value in `arrays` (a view output written in place)."""
    res = compute(n, [o.array(arrays) for o in n.operands], dtype)
    if n.out_view is None:
        arrays[n.out] = res
    else:
        Operand(n.out, n.out_view).assign(arrays, res)


def compute(n: Node, args: list[np.ndarray], dtype: str, box: Optional[tuple[tuple[int, int], ...]] = None) \
        -> np.ndarray:
    """Node `n` on its operands' elements: whole tensors (`box` None), or the boxes a tile writing
    `box` of its output reads (the boxes of `tiling.operand_boxes`, in the operands' view shapes)."""
    if n.kind == "attention":
        return _attention(n, args, box)
    if n.kind == "attention_combine":
        return _combine(n, args[0], dtype, box)
    if n.kind == "gemm" and n.rope:
        w_, tab = args[1], args[2]
        if box is not None:  # a tile: its weight rows and tables' columns are two runs D / 2 apart in their hulls
            d, w = n.operands[2].view.shape[-1], (box[1][1] - box[1][0]) // 2
            pick = np.r_[0:w, d // 2:d // 2 + w]
            w_, tab = w_[pick], tab[..., pick]
        return S.gemm_rope(args[0], w_, tab, dtype, (args[-1], n.eps, n.operands[0].view.dtype) if n.norm else None)
    if n.kind == "gemm" and n.norm:
        return S.gemm_norm(args[0], args[-1], n.eps, args[1], args[2] if n.bias else None, n.act,
                           args[2] if n.glu else None, dtype, n.operands[0].view.dtype)
    if n.kind == "gemm" and n.glu:
        return S.gemm_glu(args[0], args[1], args[2], dtype)
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
    if n.kind == "rope":
        return S.rope(args[0], args[1], args[2], dtype)
    raise WarpyError(f"no meaning for node kind {n.kind!r}")


def _attention(n: Node, args: list[np.ndarray], box: Optional[tuple[tuple[int, int], ...]]) -> np.ndarray:
    """Partials: a tile is one (KV head, chunk) (its boxes: q (T, G, D), k and v (rows, 1, D));
    whole tensors loop over the tiles the same way, so each tile's numbers are the VM's."""
    q, k, v = args
    g, d = n.group, n.head_dim
    if box is not None:
        (h0, h1), (c0, c1) = box[0], box[1]
        if h1 - h0 != 1 or c1 - c0 != 1:
            raise WarpyError(f"internal: an attention tile of {box}; a tile is one KV head and one chunk")
        part = S.attention_partial(q, k[:, 0, :], v[:, 0, :], c0 * n.chunk, n.length, n.scale, n.causal)
        return part.reshape(1, 1, *part.shape)
    hkv = k.shape[1]
    out = np.zeros((hkv, n.splits, n.tokens * g, d + S.PARTIAL_EXTRA), dtype=np.float32)
    for h in range(hkv):
        for c in range(n.splits):
            r0, r1 = c * n.chunk, min((c + 1) * n.chunk, n.length)
            out[h, c] = S.attention_partial(q[:, h * g:(h + 1) * g, :], k[r0:r1, h, :], v[r0:r1, h, :], r0, n.length,
                                            n.scale, n.causal)
    return out


def _combine(n: Node, part: np.ndarray, dtype: str, box: Optional[tuple[tuple[int, int], ...]]) -> np.ndarray:
    """A tile is rows of the output of one KV head (its box: the partials (1, S, rows, W)); whole
    tensors: every head."""
    d, g = n.head_dim, n.group
    if box is not None:
        shape = tuple(hi - lo for lo, hi in box)
        return S.attention_combine(part[0], d, dtype).reshape(shape)
    hkv = part.shape[0]
    out = np.zeros((n.tokens, hkv * g, d), dtype=np.float32)
    for h in range(hkv):
        out[:, h * g:(h + 1) * g, :] = S.attention_combine(part[h], d, dtype).reshape(n.tokens, g, d)
    return out


def _rows(view: View, lo: int, hi: int, axis: int = 0) -> View:
    """Indices lo..hi of a view's dimension `axis` (its rows by default)."""
    d = view.dims[axis]
    start = view.start[:d] + (view.start[d] + lo * view.step(axis),) + view.start[d + 1:]
    return View(view.base_shape, view.dtype, view.dims, start, view.shape[:axis] + (hi - lo,) + view.shape[axis + 1:],
                view.steps)


#: the most rows an rmsnorm fused into the gemms after it (`lower(norm=True)`) may have: the decode
#: tiles (one 64-row tile's A box holds them), where the rmsnorm's level costs most against its work
NORM_ROWS = 64


def lower(graph: Graph, target: Optional["Target | str"] = None, glu: bool = False, norm: bool = False,
          fresh: bool = False, rope: bool = False) -> Program:
    """The nodes that compute `graph`'s outputs, epilogues and SwiGLU fused; `target` (sm_90a by
    default) sizes the split of decode attention over its SMs; `glu`: gate and up gemms fused with
    their silu_mul into one gemm node; `norm`: an rmsnorm of at most NORM_ROWS rows fused into the
    gemms that read it; `fresh`: decode attention's old and appended cache rows as two partial nodes;
    `rope`: decode projections writing their heads themselves, roped or into a cache (all four sm_90a
    only: elsewhere a one-line refusal)."""
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
            t_in = new_tensor(v.name, base_shape(v), v.dtype, "input")
            t_in.given = v.shape if t_in.shape != v.shape else ()
            tensor_of[v.id] = t_in.id
    absorbed: set[int] = set()
    appended: list[tuple[Value, Node]] = []
    from warpy.target import target as get_target

    tgt = get_target(target or "sm_90a")
    if glu and tgt.unit != "wgmma":
        raise WarpyError(f"glu: the fused gate/up gemm is the sm_90a interpreter's; {tgt.name} runs them unfused")
    if fresh and tgt.unit != "wgmma":
        raise WarpyError(f"fresh: decode attention's old and appended rows as two partial nodes is the sm_90a "
                         f"interpreter's; {tgt.name} runs one")
    if norm and tgt.unit != "wgmma":
        raise WarpyError(f"norm: the rmsnorm fused into its gemms is the sm_90a interpreter's; {tgt.name} runs it "
                         f"as a node")
    if rope and tgt.unit != "wgmma":
        raise WarpyError(f"rope: the rope fused into its projection is the sm_90a interpreter's; {tgt.name} runs it "
                         f"as a node")
    fused = _glu_pairs(live, uses, out_ids) if glu else {}
    glu_of = {x.id: first for first, trio in fused.items() for x in trio}

    def epilogue(v: Value) -> tuple[list[Value], dict[str, object], list[Value]]:
        """A matmul's or linear's fused epilogue: (its operands after A and B, the node's flags, the
        values it absorbs after v)."""
        extra: list[Value] = []
        kw: dict[str, object] = {}
        chain: list[Value] = []
        cur = v
        u = sole_user(cur)
        o = other(u, cur) if u is not None else None
        if u is not None and o is not None:
            kw["bias"] = True
            extra.append(o)
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
            extra.append(o)
            cur = u
            chain.append(u)
        elif kw.get("bias") and "act" not in kw and extra[0].shape == v.shape:
            # one add of a whole tensor and no activation: it is a residual (the same arithmetic)
            kw["bias"], kw["residual"] = False, True
        return extra, kw, chain

    def normable(v: Value) -> bool:
        """An rmsnorm the gemms reading it take in (`norm`): every use the A of a linear (or of a
        fused gate/up pair) that takes no residual."""
        if v.op != "rmsnorm" or v.id in out_ids or len(v.shape) != 2 or v.shape[0] > NORM_ROWS or not users[v.id]:
            return False
        for u in users[v.id]:
            if u.op != "linear" or u.args[0] is not v or u.args[1] is v:
                return False
            if u.id not in glu_of and epilogue(u)[1].get("residual"):
                return False
        return True

    normed = {v.id: v for v in live if norm and normable(v)}

    def projection(x: Value) -> Optional[Value]:
        """The linear whose (M, N) product `x` is, viewed as (M, N / D, D) heads (a reshape that
        splits the last dimension), where the gemm may write x itself (`rope`): x and the linear
        each have that one use, neither is an output, M is a decode tile's rows at most."""
        if x.op != "reshape" or uses[x.id] != 1 or x.id in out_ids or x.rank != 3:
            return None
        lin = x.args[0]
        if lin.op != "linear" or uses[lin.id] != 1 or lin.id in out_ids or lin.id in glu_of or lin.rank != 2:
            return None
        if x.shape[0] != lin.shape[0] or x.shape[1] * x.shape[2] != lin.shape[1] or lin.shape[0] > ROPE_ROWS:
            return None
        if x.shape[2] % ROPE_HEAD_ALIGN:  # (no tile lies in such a head: `tiling.gemm_heads`)
            return None
        return lin

    def roped(v: Value) -> Optional[Value]:
        """A rope whose x is a projection (`projection`) and whose result is its own tensor: the linear."""
        if not rope or v.op != "rope" or base_shape(v) != v.shape:
            return None
        return projection(v.args[0])

    tables: dict[tuple[int, int], Operand] = {}

    def table(r: Value) -> Operand:
        """The rope tables of rope `r` stacked as one (2, T, D) tensor (a gemm has one operand for
        them): two copy nodes, made once per pair of tables."""
        cos, sin = (a.args[0] if a.op == "reshape" else a for a in r.args[1:])
        key = (cos.id, sin.id)
        if key not in tables:
            t_tab = new_tensor(f"{cos.name}_{sin.name}", (2,) + cos.shape, cos.dtype, "temp")
            whole = View.whole(t_tab.shape, cos.dtype)
            for i, a in enumerate((cos, sin)):
                plane = View(t_tab.shape, cos.dtype, (1, 2), (i, 0, 0), cos.shape)
                node = Node(len(prog.nodes), "unary", t_tab.id, (operand(a),), values=(a.name,), where=r.where,
                            out_view=plane)
                prog.nodes.append(node)
            t_tab.producer = prog.nodes[-1].id
            tables[key] = Operand(t_tab.id, whole)
        return tables[key]

    def projection_node(lin: Value, out: Tensor, out_view: Optional[View], r: Optional[Value],
                        chain: tuple[Value, ...]) -> Node:
        """The gemm of `lin` writing its heads into `out` (through `out_view`), roped by `r`'s tables."""
        rn = normed.get(lin.args[0].id)  # A an rmsnorm the gemm takes in: its x first, its weight last
        ops = [operand(lin.args[0] if rn is None else rn.args[0]), operand(lin.args[1])]
        kw: dict[str, object] = {"b_kmajor": True}
        if r is not None:
            ops.append(table(r))
            kw["rope"] = True
        if rn is not None:
            ops.append(operand(rn.args[1]))
            kw["norm"], kw["eps"] = True, rn.attrs["eps"]
        node = Node(len(prog.nodes), "gemm", out.id, tuple(ops), values=tuple(c.name for c in chain), where=lin.where,
                    out_view=out_view, **kw)  # type: ignore[arg-type]
        prog.nodes.append(node)
        absorbed.update(c.id for c in chain)
        return node

    rope_lin = {lin.id for v in live if (lin := roped(v)) is not None}
    # a rope whose one use is a cache append writes the cache's rows itself (no copy node after it)
    rope_rows = {v.args[1].id for v in live if v.op == "cache_append" and v.args[1].op == "rope"
                 and uses[v.args[1].id] == 1 and v.args[1].id not in out_ids}
    # `rope`: a projection (`projection`) appended as it is (V) writes the cache's rows itself
    appended_lin = {lin.id for v in live if rope and v.op == "cache_append" and (lin := projection(v.args[1])) is not None}
    for v in live:
        if v.op == "input" or v.is_view or v.id in absorbed or v.id in rope_rows or v.id in normed \
                or v.id in rope_lin or v.id in appended_lin:
            continue
        if v.op == "rope" and (lin := roped(v)) is not None:  # the gemm writes the roped heads
            t = new_tensor(v.name, v.shape, v.dtype, "output" if v.id in out_ids else "temp")
            t.producer = projection_node(lin, t, None, v, (lin, v)).id
            tensor_of[v.id] = t.id
            continue
        chain = [v]
        kw: dict[str, object] = {}
        operands: list[Value] = []
        kind = v.op
        if v.id in fused:
            gate, up, sm = fused[v.id]
            kind, kw["b_kmajor"], kw["glu"] = "gemm", True, True
            operands = [gate.args[0], gate.args[1], up.args[1]]
            chain = [v, up if v is gate else gate, sm]
        elif v.op in ("matmul", "linear"):
            kind = "gemm"
            extra, kw, after = epilogue(v)
            operands = [v.args[0], v.args[1]] + extra
            kw["b_kmajor"] = v.op == "linear"
            chain += after
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
        elif v.op == "rope":
            operands = list(v.args)
        elif v.op == "cache_append":
            cache = v.args[0]
            if uses[cache.id] != 1 or cache.id in out_ids:
                raise WarpyError(f"{v.where}: the cache {cache.name} is read after cache_append writes into it; "
                                 f"read the append's result ({v.name}) instead")
            base, cview = view_of(cache)
            t = prog.tensors[tensor_of[base.id]]
            t.kind = "state"
            rows = v.args[1]
            rows_view = _rows(cview, v.attrs["at"], v.attrs["at"] + rows.shape[0])
            if rows.id in rope_rows and (lin := roped(rows)) is not None:  # its projection computes into them
                node = projection_node(lin, t, rows_view, rows, (lin, rows, v))
                prog.nodes.pop()  # (appended below, as every append's node is)
            elif rope and (lin := projection(rows)) is not None:  # the projection writes its rows as they are
                node = projection_node(lin, t, rows_view, None, (lin, v))
                prog.nodes.pop()
            elif rows.id in rope_rows:  # the rope computes into the cache's rows
                node = Node(len(prog.nodes), "rope", t.id, tuple(operand(o) for o in rows.args),
                            values=(rows.name, v.name), where=rows.where, out_view=rows_view)
            else:
                node = Node(len(prog.nodes), "unary", t.id, (operand(rows),), values=(v.name,), where=v.where,
                            out_view=rows_view)
            prog.nodes.append(node)
            appended.append((v, node))
            absorbed.add(v.id)
            tensor_of[v.id] = t.id
            continue
        elif v.op == "attention":
            _lower_attention(prog, v, operand, tgt, "output" if v.id in out_ids else "temp", fresh)
            absorbed.add(v.id)
            tensor_of[v.id] = prog.nodes[-1].out
            continue
        else:
            raise WarpyError(f"{v.where}: internal: no lowering for {v.op}")
        if kind == "gemm" and operands[0].id in normed:  # A is an rmsnorm the gemm takes in: its x, w last
            rn = normed[operands[0].id]
            operands = [rn.args[0]] + operands[1:] + [rn.args[1]]
            kw["norm"], kw["eps"] = True, rn.attrs["eps"]
        last = chain[-1]
        absorbed.update(c.id for c in chain)
        t = new_tensor(last.name, base_shape(last), last.dtype, "output" if last.id in out_ids else "temp")
        out_view = _coarse_out(last, kind)
        node = Node(len(prog.nodes), kind, t.id, tuple(operand(o) for o in operands),
                    values=tuple(c.name for c in chain), where=v.where, out_view=out_view,
                    **kw)  # type: ignore[arg-type]
        t.producer = node.id
        prog.nodes.append(node)
        for c in chain:
            tensor_of[c.id] = t.id
    _check_state_reads(prog, live, appended, tensor_of)
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


#: the most rows a projection that writes roped heads or cache rows itself (`lower(rope=True)`) may
#: have: one decode tile's (64)
ROPE_ROWS = 64

#: a head dimension such a projection writes is a multiple of this: its tiles are 16 columns at
#: least (a roped one's halves then 8: a 16-byte box row)
ROPE_HEAD_ALIGN = 16

#: the node kinds whose output may be written through a view (a reshape merged its tensor's dimensions)
OUT_VIEW_KINDS = ("unary", "binary", "silu_mul", "rope", "attention_combine")


def _coarse_out(v: Value, kind: str) -> Optional[View]:
    """The view a node writes value `v` through where a reshape made v's tensor coarser than v
    (`Graph.reshape`), else None; refused in one line for a body that writes whole tensors only."""
    coarse = base_shape(v)
    if coarse == v.shape:
        return None
    if kind not in OUT_VIEW_KINDS:
        raise WarpyError(f"{v.where}: {v.name} ({kind}) is reshaped with its dimensions merged, and a {kind} node "
                         f"writes its output whole; reshape a copy of it (or split its users' views instead)")
    return rebase(View.whole(v.shape, v.dtype), coarse)


def _glu_pairs(live: list[Value], uses: Mapping[int, int], out_ids: set[int]) \
        -> dict[int, tuple[Value, Value, Value]]:
    """The SwiGLU halves `lower(glu=True)` fuses: the first of the two linears in `live` order ->
    (gate, up, silu_mul), for each silu_mul of two linears of one A and one shape, each used once and
    no output (so no epilogue of theirs and nothing else sees them)."""
    order = {v.id: i for i, v in enumerate(live)}
    out: dict[int, tuple[Value, Value, Value]] = {}
    for v in live:
        if v.op != "silu_mul":
            continue
        gate, up = v.args
        if gate is up or gate.op != "linear" or up.op != "linear" or gate.args[0] is not up.args[0]:
            continue
        if gate.shape != up.shape or gate.shape != v.shape or gate.args[1].shape != up.args[1].shape:
            continue
        if any(uses[x.id] != 1 or x.id in out_ids for x in (gate, up)):
            continue
        first = gate if order[gate.id] < order[up.id] else up
        out[first.id] = (gate, up, v)
    return out


def fresh_rows(v: Value) -> int:
    """Where attention `v` reads caches that appends wrote the last rows of, both at one row `at` and
    every earlier row visible to every query: `at` (the rows before it are the old rows, which nothing
    in the launch writes); else 0."""
    q, k, vv = v.args
    if k.op != "cache_append" or vv.op != "cache_append":
        return 0
    at, length, t = k.attrs["at"], v.attrs["length"], q.shape[0]
    if vv.attrs["at"] != at or at + k.args[1].shape[0] != length or vv.args[1].shape[0] != k.args[1].shape[0]:
        return 0
    if v.attrs["causal"] and at > length - t + 1:  # (query 0 sees the rows below length - T + 1)
        return 0
    return at if at > 0 else 0


def _lower_attention(prog: Program, v: Value, operand: Callable[[Value], Operand], tgt: "Target", kind: str,
                     fresh: bool = False) -> None:
    from warpy.mega.tiling import attention_split

    q, k, vv = v.args
    t, hq, d = q.shape
    hkv = k.shape[1]
    length = v.attrs["length"]
    ko, vo = operand(k), operand(vv)
    at = fresh_rows(v) if fresh else 0
    # (first row, rows, causal) of each partial node: one over the cache's first `length` rows, or
    # with `fresh` one over the old rows (every query sees them all) and one over the appended rows
    parts = [(0, at, False), (at, length - at, v.attrs["causal"])] if at else [(0, length, v.attrs["causal"])]
    splits = [attention_split(t, hq, hkv, d, n, tgt) for _, n, _ in parts]
    total = sum(sp.splits for sp in splits)
    attrs: dict[str, Any] = dict(length=length, scale=v.attrs["scale"], causal=v.attrs["causal"], group=hq // hkv,
                                 tokens=t, where=v.where)
    part = Tensor(len(prog.tensors), f"{v.name}_part", (hkv, total, t * (hq // hkv), d + S.PARTIAL_EXTRA),
                  "fp32", "temp")
    prog.tensors.append(part)
    firsts = [sum(sp.splits for sp in splits[:i]) for i in range(len(parts))]
    # (the old rows' node first: placed before the appended rows', on the H200 the decoder at 8k ran
    # 1275.8 µs against 1317.0 the other way round; docs/performance.md)
    for (r0, n, causal), sp, c0 in zip(parts, splits, firsts):
        # only the node's rows: a box past them is zero-filled by TMA, never another call's rows
        kr, vr = Operand(ko.tensor, _rows(ko.view, r0, r0 + n)), Operand(vo.tensor, _rows(vo.view, r0, r0 + n))
        out_view = None if not at else _rows(View.whole(part.shape, "fp32"), c0, c0 + sp.splits, 1)
        n1 = Node(len(prog.nodes), "attention", part.id, (operand(q), kr, vr), values=(v.name,), out_view=out_view,
                  **{**attrs, "length": n, "causal": causal, "chunk": sp.chunk, "splits": sp.splits})
        part.producer = n1.id
        prog.nodes.append(n1)
    out = Tensor(len(prog.tensors), v.name, base_shape(v), v.dtype, kind)
    prog.tensors.append(out)
    n2 = Node(len(prog.nodes), "attention_combine", out.id, (Operand(part.id, View.whole(part.shape, "fp32")),),
              values=(v.name,), out_view=_coarse_out(v, "attention_combine"), chunk=splits[0].chunk, splits=total,
              **attrs)
    out.producer = n2.id
    prog.nodes.append(n2)


def _check_state_reads(prog: Program, live: list[Value], appended: list[tuple[Value, Node]],
                       tensor_of: dict[int, int]) -> None:
    """A read of a cache other than through its append's result may not touch the rows an append
    writes: the functional meaning (the old value) and the memory (written in place) would differ."""
    if not appended:
        return
    boxes: dict[int, list[tuple[tuple[int, int], ...]]] = {}
    for _, node in appended:
        assert node.out_view is not None
        boxes.setdefault(node.out, []).append(node.out_view.full_box())

    def through_append(a: Value) -> bool:
        while a.is_view:
            a = a.args[0]
        return a.op == "cache_append"

    for v in live:
        if v.op == "cache_append" or v.is_view:  # a view reads nothing; what reads through it is checked
            continue
        for a in v.args:
            base, view = view_of(a)
            if base.op != "input" or through_append(a):
                continue
            for b in boxes.get(tensor_of[base.id], []):
                if all(lo < bhi and blo < hi for (lo, hi), (blo, bhi) in zip(view.full_box(), b)):
                    raise WarpyError(f"{v.where}: {v.name} reads rows of {base.name} that cache_append writes, not "
                                     f"through the append's result")


__all__ = ["Tensor", "Operand", "Node", "Program", "lower", "compute", "apply"]
