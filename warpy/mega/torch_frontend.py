"""`warpy.mega.compile(fn)`: a `torch.compile` backend that maps the aten graph onto `warpy.mega.Graph`.

torch is optional (`pip install -e .[torch]`); this module imports it only when `compile` is called.
The whole function must be one graph (`fullgraph=True`: a graph break is a one-line error), shapes
are static (a new shape traces again). AOTAutograd gives the aten graph; each node maps to an op of
the graph API, views stay views (view and reshape: `Graph.reshape`), and RMSNorm's decomposition (upcast, pow 2, mean, add eps, rsqrt,
mul, mul weight, downcast) is recognised as `rmsnorm(x, weight, eps)` with the eps it carries. A node
with no mapping is a one-line error naming the aten op and the user's source line.

Until the device interpreter runs it, the compiled function runs the validated schedule on the
reference VM and returns torch tensors; `fn.schedule` is the last schedule built.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from warpy.errors import WarpyError
from warpy.mega.graph import Graph, Value

_MAX_INDEX = 1 << 62


@dataclass(frozen=True)
class _Marker:
    """An intermediate of a pattern the graph API has as one op (an fp32 step of RMSNorm, a
    transposed weight)."""

    kind: str  # up (fp32 copy), sq, ms, mseps, rrms, normed, normw (fp32 result), t (transposed)
    x: Value
    eps: float = 0.0


def source_line(node: Any) -> str:
    """The user's file:line that made an FX node (from its stack trace), or '?'."""
    st = node.meta.get("stack_trace") or ""
    found = re.findall(r'File "([^"]+)", line (\d+)', st)
    if not found:
        return "?"
    f, line = found[-1]
    return f"{f.rsplit('/', 1)[-1]}:{line}"


def to_graph(gm: Any, name: str = "torch") -> Graph:
    """The graph API's graph for an aten-level FX graph."""
    import torch  # type: ignore[import-not-found,unused-ignore]

    aten = torch.ops.aten
    g = Graph(name)
    env: dict[Any, Any] = {}

    def fail(node: Any, why: str = "") -> WarpyError:
        op = getattr(node.target, "__name__", str(node.target))
        return WarpyError(f"{source_line(node)}: aten op {op} has no megakernel mapping" + (f" ({why})" if why else ""))

    def val(node: Any, a: Any) -> Value:
        v = env.get(a, a) if isinstance(a, torch.fx.Node) else a
        if isinstance(v, Value):
            return v
        if isinstance(v, _Marker):
            raise fail(node, "an fp32 intermediate: the megakernel's tensors are bf16")
        raise fail(node, f"an operand {v!r} that is not a tensor")

    def dtype_name(node: Any) -> str:
        t = node.meta["val"]
        return str(t.dtype).replace("torch.", "")

    for node in gm.graph.nodes:
        where = source_line(node)
        if node.op == "placeholder":
            t = node.meta["val"]
            try:
                env[node] = g.input(node.name, tuple(int(n) for n in t.shape), dtype_name(node), where=where)
            except WarpyError as e:
                raise WarpyError(f"{where}: {e}") from None
            continue
        if node.op == "output":
            outs = node.args[0]
            g.output(*[val(node, o) for o in (outs if isinstance(outs, (list, tuple)) else [outs])])
            continue
        if node.op != "call_function":
            raise fail(node, f"an FX {node.op} node")
        f, args, kw = node.target, node.args, node.kwargs
        A = [env.get(a, a) if isinstance(a, torch.fx.Node) else a for a in args]
        if f in (aten.t.default,) or (f is aten.permute.default and list(args[1]) in ([1, 0], [-1, -2])) or \
                (f is aten.transpose.int and sorted(int(d) % 2 for d in args[1:3]) == [0, 1]):
            env[node] = _Marker("t", val(node, args[0]))
        elif f in (aten.mm.default, aten.addmm.default):
            off = 1 if f is aten.addmm.default else 0
            if f is aten.addmm.default and (kw.get("beta", 1) != 1 or kw.get("alpha", 1) != 1):
                raise fail(node, "beta or alpha other than 1")
            x, w = val(node, args[off]), A[off + 1]
            y = g.linear(x, w.x, where=where) if isinstance(w, _Marker) and w.kind == "t" else \
                g.matmul(x, val(node, args[off + 1]), where=where)
            env[node] = g.add(y, val(node, args[0]), where=where) if off else y
        elif f is aten._to_copy.default:
            want = str(kw.get("dtype", "")).replace("torch.", "")
            src = A[0]
            if want == "float32" and isinstance(src, Value):
                env[node] = _Marker("up", src)
            elif want == "bfloat16" and isinstance(src, _Marker) and src.kind == "normw":
                env[node] = src.x
            elif want == "bfloat16" and isinstance(src, Value):
                env[node] = src
            else:
                raise fail(node, f"a copy to {want or 'another layout'}")
        elif f is aten.pow.Tensor_Scalar and isinstance(A[0], _Marker) and A[0].kind == "up" and A[1] == 2:
            env[node] = _Marker("sq", A[0].x)
        elif f is aten.mean.dim and isinstance(A[0], _Marker) and A[0].kind == "sq" and \
                [int(d) % A[0].x.rank for d in A[1]] == [A[0].x.rank - 1] and (len(A) > 2 and A[2]):
            env[node] = _Marker("ms", A[0].x)
        elif f in (aten.add.Scalar, aten.add.Tensor) and isinstance(A[0], _Marker) and A[0].kind == "ms" and \
                isinstance(A[1], (int, float)):
            env[node] = _Marker("mseps", A[0].x, float(A[1]))
        elif f is aten.rsqrt.default and isinstance(A[0], _Marker) and A[0].kind == "mseps":
            env[node] = _Marker("rrms", A[0].x, A[0].eps)
        elif f is aten.mul.Tensor and any(isinstance(a, _Marker) and a.kind == "rrms" for a in A[:2]) and \
                any(isinstance(a, _Marker) and a.kind == "up" for a in A[:2]):
            r = next(a for a in A[:2] if isinstance(a, _Marker) and a.kind == "rrms")
            env[node] = _Marker("normed", r.x, r.eps)
        elif f is aten.mul.Tensor and any(isinstance(a, _Marker) and a.kind == "normed" for a in A[:2]):
            m = next(a for a in A[:2] if isinstance(a, _Marker) and a.kind == "normed")
            wv = next(a for a in A[:2] if a is not m)
            w = wv.x if isinstance(wv, _Marker) and wv.kind == "up" else wv
            if not isinstance(w, Value):
                raise fail(node, "rmsnorm with a weight that is not a tensor")
            env[node] = _Marker("normw", g.rmsnorm(m.x, w, m.eps, where=where))
        elif f in (aten.add.Tensor, aten.mul.Tensor):
            if kw.get("alpha", 1) != 1:
                raise fail(node, "alpha other than 1")
            a, b = val(node, args[0]), val(node, args[1])
            env[node] = (g.add if f is aten.add.Tensor else g.mul)(a, b, where=where)
        elif f in (aten.relu.default, aten.silu.default):
            env[node] = (g.relu if f is aten.relu.default else g.silu)(val(node, args[0]), where=where)
        elif f is aten.gelu.default:
            if kw.get("approximate", "none") != "tanh":
                raise fail(node, "gelu without approximate='tanh'")
            env[node] = g.gelu(val(node, args[0]), where=where)
        elif f is aten.select.int:
            env[node] = g.select(val(node, args[0]), int(args[1]), int(args[2]), where=where)
        elif f is aten.slice.Tensor:
            x = val(node, args[0])
            dim = int(args[1]) if len(args) > 1 else 0
            start = int(args[2]) if len(args) > 2 and args[2] is not None else 0
            end = int(args[3]) if len(args) > 3 and args[3] is not None else _MAX_INDEX
            step = int(args[4]) if len(args) > 4 else 1
            if step != 1:
                raise fail(node, f"a slice with step {step}")
            d = dim % x.rank
            env[node] = x if (start, min(end, x.shape[d])) == (0, x.shape[d]) else \
                g.slice(x, dim, start, min(end, x.shape[d]), where=where)
        elif f in (aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.alias.default,
                   aten.clone.default, aten.detach.default):
            x = val(node, args[0])
            shape = tuple(int(n) for n in node.meta["val"].shape)
            env[node] = x if shape == x.shape else g.reshape(x, shape, where=where)  # (a view, or one line)
        else:
            raise fail(node)
    return g


class Compiled:
    """The function `compile` returns: call it like the original."""

    def __init__(self, fn: Callable[..., Any], arch: str, mode: str) -> None:
        import torch  # type: ignore[import-not-found,unused-ignore]

        self.fn, self.arch, self.mode = fn, arch, mode
        self.schedule: Optional[Any] = None
        self.graph: Optional[Graph] = None
        from torch._dynamo.backends.common import aot_autograd  # type: ignore[import-not-found,unused-ignore]

        self._compiled = torch.compile(fn, backend=aot_autograd(fw_compiler=self._backend), fullgraph=True,
                                       dynamic=False)

    def _backend(self, gm: Any, example_inputs: Any) -> Callable[..., Any]:
        import torch  # type: ignore[import-not-found,unused-ignore]
        # (by name: torch does not export it, and mypy must pass with torch installed or not)
        make_boxed_func: Callable[..., Any] = getattr(importlib.import_module("torch._functorch.aot_autograd"),
                                                      "make_boxed_func")

        from warpy.mega.schedule import build
        from warpy.mega.validate import validate
        from warpy.mega.vm import VM

        graph = to_graph(gm, getattr(self.fn, "__name__", "torch"))
        sched = build(graph, self.arch, self.mode)
        problems = validate(sched)
        if not problems.ok:
            raise WarpyError(f"internal: the schedule of {graph.name} fails validation: {problems.lines(1)[0]}")
        self.schedule, self.graph = sched, graph
        vm = VM(sched, values=True)
        names = [v.name for v in graph.inputs()]

        def run(*args: Any) -> list[Any]:
            inputs = {n: a.detach().to(torch.float32).cpu().numpy() for n, a in zip(names, args)}
            out = vm.run(inputs)
            if not out.ok:
                raise WarpyError("the reference VM " + ("hung: " + out.hang[0] if out.hang else "raced"))
            return [torch.from_numpy(np.ascontiguousarray(o)).to(torch.bfloat16) for o in out.outputs]

        boxed: Callable[..., Any] = make_boxed_func(run)
        return boxed

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import torch  # type: ignore[import-not-found,unused-ignore]

        try:
            return self._compiled(*args, **kwargs)
        except WarpyError:
            raise
        except Exception as e:  # dynamo wraps what the backend raised; a graph break is its own error
            inner = getattr(e, "inner_exception", None) or e.__cause__
            if isinstance(inner, WarpyError):
                raise WarpyError(str(inner)) from None
            if isinstance(e, torch._dynamo.exc.Unsupported) or "graph break" in str(e).lower():
                msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                where = re.findall(r'File "([^"]+)", line (\d+)', str(e))
                at = f"{where[-1][0].rsplit('/', 1)[-1]}:{where[-1][1]}: " if where else ""
                raise WarpyError(f"{at}graph break: {msg}") from None
            raise


def compile(fn: Callable[..., Any], arch: str = "sm_90a", mode: str = "static") -> Compiled:
    """`fn` compiled to one megakernel schedule per input shape (torch needed)."""
    try:
        import torch  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        raise WarpyError("warpy.mega.compile needs torch (pip install -e .[torch])") from None
    return Compiled(fn, arch, mode)


__all__ = ["compile", "to_graph", "Compiled", "source_line"]
