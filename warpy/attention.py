"""`warpy.attention(q, k, v, causal=False, scale=None)`: forward attention on the GPU with warpy's
attention kernel, on torch tensors, as `torch.nn.functional.scaled_dot_product_attention` takes them.

q is (B, H_q, S_q, D), k and v are (B, H_kv, S_kv, D), bf16 on one GPU, with H_kv dividing H_q
(grouped-query attention: query head h reads key/value head h // (H_q / H_kv)) and D 64 or 128.
The memory behind them is read as it lies (`kernels/attention.py`), one of

- contiguous (B, H, S, D) tensors: the `bhsd` layout;
- (B, H, S, D) views `.transpose(1, 2)` of contiguous (B, S, H, D) tensors (what a QKV projection
  writes): the `bshd` layout, no copy.

All three share one layout; the output is allocated in q's (returned as (B, H_q, S_q, D)), or
written to `out`. With `layout="bshd"` the tensors are given as (B, S, H, D) (flash-attn's
convention) and the output is (B, S_q, H_q, D). `causal` masks key j out of query i's row when
j > i (torch's `is_causal`, the upper-left triangle); `scale` multiplies Q·Kᵀ (default 1/√D).

As `warpy.gemm` (`warpy/matmul.py`), whose structure this module follows: each problem is planned
once (`warpy.plan`: the family's rule, build, lift, assemble; cached in memory and on disk), so a
repeated call costs one launch, on the tensors' current torch stream (or `stream`), returning
without waiting; any thread may call; the operands' GPU's primary context is made current
(`warpy.runtime.driver.enter`). The attention family's `bind` names the parameters.
"""

from __future__ import annotations

import sys
import threading
import types
from typing import Any, Optional

import attrs

from warpy.errors import WarpyError
from warpy.interop import Matrix, as_matrix, current_stream
from warpy.kernels import attention as family
from warpy.plan import Plan, make_plan
from warpy.runtime import driver as _driver

#: layouts the caller may name: None (torch's (B, H, S, D), the memory's layout read off the strides)
#: or "bshd" ((B, S, H, D) tensors, contiguous)
CALL_LAYOUTS = (None, "bshd")


@attrs.frozen
class Operand:
    """A 4-D operand: its logical (B, S, H, D) sizes, its memory (a 2-D view of its dense storage,
    through `warpy.interop`), and the layout that memory is in."""

    name: str
    bshd: tuple[int, int, int, int]
    layout: str
    mem: Matrix

    @property
    def either(self) -> bool:
        """One head or one position: (B, H, S, D) and (B, S, H, D) memory are the same bytes, so the
        operand is in whichever layout the others are."""
        _, s, h, _ = self.bshd
        return s == 1 or h == 1

    @property
    def nbytes(self) -> int:
        b, s, h, d = self.bshd
        return b * s * h * d * 2


def _dense_layout(shape: tuple[int, ...], strides: tuple[int, ...], order: tuple[int, ...]) -> bool:
    """Whether `strides` are dense row-major over the dimensions in `order` (sizes of 1 match any stride)."""
    want = 1
    for dim in reversed(order):
        if shape[dim] != 1 and strides[dim] != want:
            return False
        want *= shape[dim]
    return True


def describe(x: Any, name: str, layout: Optional[str], stream: Optional[int] = None) -> Operand:
    """The operand `x` (a torch GPU tensor): its sizes and memory layout, refused in one line when
    warpy's kernel cannot read it as it lies."""
    if type(x).__module__.split(".", 1)[0] != "torch" or not hasattr(x, "stride"):
        raise WarpyError(f"{name} is a {type(x).__module__}.{type(x).__name__}: warpy.attention takes torch GPU tensors")
    if getattr(getattr(x, "device", None), "type", None) != "cuda":
        raise WarpyError(f"{name} is on {x.device}, not on the GPU: move it with .cuda()")
    shape, strides = tuple(x.shape), tuple(x.stride())
    if len(shape) != 4:
        want = "(B, S, H, D)" if layout == "bshd" else "(B, H, S, D)"
        raise WarpyError(f"{name} has {len(shape)} dimensions; attention takes {want} tensors")
    if layout == "bshd":
        b, s, h, d = shape
        if not _dense_layout(shape, strides, (0, 1, 2, 3)):
            raise WarpyError(f"{name} (B, S, H, D) = {shape} has strides {strides}: give it contiguous (.contiguous())")
        flat = x.view(b * s * h, d)
        mem = "bshd"
    else:
        b, h, s, d = shape
        if _dense_layout(shape, strides, (0, 1, 2, 3)):
            flat, mem = x.view(b * h * s, d), "bhsd"
        elif _dense_layout(shape, strides, (0, 2, 1, 3)):
            flat, mem = x.transpose(1, 2).view(b * s * h, d), "bshd"
        else:
            raise WarpyError(f"{name} (B, H, S, D) = {shape} has strides {strides}: the kernel reads contiguous (B, H, S, "
                             "D) tensors or (B, S, H, D) ones seen through .transpose(1, 2); give it .contiguous()")
    if x.requires_grad:  # warpy computes the forward pass only; torch will not hand over an autograd tensor
        flat = flat.detach()
    m = as_matrix(flat, name, stream)
    if m.dtype != "bf16":
        raise WarpyError(f"{name} is {m.dtype}; attention takes bf16 tensors")
    return Operand(name, (b, s, h, d), mem, m)


@attrs.frozen
class AttentionCall:
    """A checked call: the problem (None: an empty output, nothing to run), the operands, the
    layout the caller named, and the GPU the operands say they are on."""

    problem: Optional[family.AttentionProblem]
    q: Operand
    k: Operand
    v: Operand
    out: Optional[Operand]
    layout: Optional[str]
    device: Optional[int]

    @property
    def empty(self) -> bool:
        """No kernel to run: the output has no elements."""
        return self.problem is None


def check_call(q: Any, k: Any, v: Any, *, causal: bool = False, scale: Optional[float] = None, out: Any = None,
               layout: Optional[str] = None, stream: Optional[int] = None) -> AttentionCall:
    """Describe and check the operands of `attention` (one-line WarpyError naming the bad input)."""
    if layout not in CALL_LAYOUTS:
        raise WarpyError(f"layout={layout!r}: give None (torch's (B, H, S, D)) or 'bshd' ((B, S, H, D) tensors)")
    if not isinstance(causal, bool):
        raise WarpyError(f"causal must be True or False, not {causal!r}")
    Q, K, V = (describe(x, n, layout, stream) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    mem = next((x.layout for x in (Q, K, V) if not x.either), Q.layout)
    Q, K, V = (attrs.evolve(x, layout=mem) if x.either else x for x in (Q, K, V))
    B, S, H, D = Q.bshd
    if K.bshd != V.bshd:
        raise WarpyError(f"k is {_shape(K, layout)} but v is {_shape(V, layout)}: they must be the same shape")
    Bk, Skv, Hkv, Dk = K.bshd
    if (Bk, Dk) != (B, D):
        raise WarpyError(f"q is {_shape(Q, layout)} and k is {_shape(K, layout)}: batch and head_dim must agree")
    if Hkv == 0 or H % Hkv:
        raise WarpyError(f"q has {H} heads and k, v {Hkv}: the key/value heads must divide the query heads")
    empty = B == 0 or S == 0 or H == 0
    if not empty and Skv == 0:
        raise WarpyError("k and v hold no keys (S_kv = 0): there is nothing to attend to")
    for x in (K, V):
        if x.layout != Q.layout and not empty:
            raise WarpyError(f"q's memory is {Q.layout} but {x.name}'s is {x.layout}: give all three in one layout")
    O = None
    if out is not None:
        O = describe(out, "out", layout, stream)
        if O.either:
            O = attrs.evolve(O, layout=Q.layout)
        if O.bshd != Q.bshd or (O.layout != Q.layout and not empty):
            raise WarpyError(f"out is {_shape(O, layout)} ({O.layout}); the output is {_shape(Q, layout)} in q's "
                             f"layout ({Q.layout})")
        for x in (Q, K, V):
            if _meets(O, x):
                raise WarpyError(f"out shares memory with {x.name}: give an output of its own")
    dev = None
    for x in (Q, K, V) + ((O,) if O is not None else ()):
        if x.mem.device is not None:
            if dev is not None and x.mem.device != dev:
                raise WarpyError(f"the operands are on GPUs {dev} and {x.mem.device}: give them on one GPU")
            dev = x.mem.device
    if empty:  # nothing runs; the sizes still had to make sense
        return AttentionCall(None, Q, K, V, O, layout, dev)
    prob = family.problem(B, H, S, D, causal=causal, H_kv=Hkv, S_kv=Skv, layout=Q.layout, scale=scale)
    return AttentionCall(prob, Q, K, V, O, layout, dev)


def _shape(x: Operand, layout: Optional[str]) -> str:
    b, s, h, d = x.bshd
    return f"({b}, {s}, {h}, {d})" if layout == "bshd" else f"({b}, {h}, {s}, {d})"


def _meets(a: Operand, b: Operand) -> bool:
    return a.mem.ptr < b.mem.ptr + b.nbytes and b.mem.ptr < a.mem.ptr + a.nbytes and a.nbytes > 0 and b.nbytes > 0


class _Loaded:
    """A plan's cubin loaded on one GPU, with its fast launcher."""

    def __init__(self, plan: Plan) -> None:
        from warpy import runtime as rt
        from warpy.runtime.bind import FastLaunch

        self.plan = plan
        self.module = rt.load(plan.cubin)
        self.kernel = self.module.kernel(plan.header.kernel)
        self.launcher = FastLaunch(self.kernel, plan.header)

    def params(self, q: Any, k: Any, v: Any, o: Any, scratch: Any) -> list[Any]:
        return family.bind(self.plan.header, q, k, v, o, scratch=scratch)


class Launches:
    """What `warpy.attention` keeps between calls: plans per problem (memory, then disk), each cubin
    loaded once per GPU with its launcher; it launches. A plan or a load happens once, under `_lock`."""

    def __init__(self) -> None:
        self._plans: dict[family.AttentionProblem, Plan] = {}
        self._loaded: dict[tuple[family.AttentionProblem, int], _Loaded] = {}
        self._lock = threading.RLock()

    def arch(self, ordinal: int = 0) -> str:
        from warpy.errors import NoGPU
        from warpy.runtime.driver import opened

        dev = opened(ordinal)
        if dev.sm != "sm_90":
            raise NoGPU(f"warpy.attention runs on sm_90 (Hopper) GPUs; GPU {ordinal} ({dev.name}) is {dev.sm}")
        return "sm_90a"

    def plan(self, problem: family.AttentionProblem) -> Plan:
        p = self._plans.get(problem)
        if p is None:
            with self._lock:
                p = self._plans.get(problem)
                if p is None:
                    p = self._plans[problem] = make_plan(family.FAMILY, problem)
        return p

    def loaded(self, problem: family.AttentionProblem, ordinal: int = 0) -> _Loaded:
        ld = self._loaded.get((problem, ordinal))
        if ld is None:
            with self._lock:
                ld = self._loaded.get((problem, ordinal))
                if ld is None:
                    self.arch(ordinal)
                    ld = self._loaded[(problem, ordinal)] = _Loaded(self.plan(problem))
        return ld

    def launch(self, call: AttentionCall, out: Operand, stream: Optional[int]) -> None:
        """Enqueue on `stream` (None: warpy's own, then wait), on the operands' GPU."""
        from warpy import runtime as rt
        from warpy.runtime.bind import DeviceSpan
        from warpy.runtime.driver import enter, leave, selected

        ordinal = call.device if call.device is not None else selected()
        entered = enter(ordinal)
        try:
            assert call.problem is not None
            ld = self.loaded(call.problem, ordinal)
            q, k, v = (DeviceSpan(x.mem.ptr, x.nbytes) for x in (call.q, call.k, call.v))
            o = DeviceSpan(out.mem.ptr, out.nbytes)
            if stream is None:
                rt.synchronize_context()
            ld.launcher((q.ptr, k.ptr, v.ptr, o.ptr), lambda scratch: ld.params(q, k, v, o, scratch), stream)
            if stream is None:
                rt.synchronize(kernel=ld.kernel.name)
        finally:
            if entered is not None:
                leave(entered)


_launches: Any = Launches()  # (tests put a fake backend here)


def launches() -> Launches:
    """The process's plans and loaded kernels for `warpy.attention`."""
    return _launches  # type: ignore[no-any-return]


def _new_output(call: AttentionCall) -> Any:
    """The output, allocated by torch on q's GPU in q's memory layout, seen as the caller's shape."""
    torch = sys.modules["torch"]
    b, s, h, d = call.q.bshd
    dev = call.q.mem.obj.device
    if call.layout == "bshd" or call.q.layout == "bshd":
        o = torch.empty((b, s, h, d), dtype=torch.bfloat16, device=dev)
        return o if call.layout == "bshd" else o.transpose(1, 2)
    return torch.empty((b, h, s, d), dtype=torch.bfloat16, device=dev)


def attention(q: Any, k: Any, v: Any, *, causal: bool = False, scale: Optional[float] = None, out: Any = None,
              layout: Optional[str] = None, stream: Optional[int] = None) -> Any:
    """softmax(q·kᵀ · scale, masked) · v on the GPU with warpy's attention kernel (sm_90).

    q: (B, H_q, S_q, D), k and v: (B, H_kv, S_kv, D) bf16 torch tensors on one GPU, as
    `torch.nn.functional.scaled_dot_product_attention` takes them (with `layout="bshd"`: (B, S, H, D)
    tensors, flash-attn's convention). H_kv divides H_q; D is 64 or 128; the memory is contiguous
    (B, H, S, D) or (B, S, H, D) (a `.transpose(1, 2)` view), the same for all three.
    causal: mask key j from query i when j > i (torch's is_causal). scale: default 1/√D.
    out: a tensor of q's shape and memory layout to write, or None to allocate one.

    Runs on the tensors' current torch stream (or `stream`, a CUstream handle) and returns without
    waiting. The first call for a problem builds and assembles its program (cached in memory and on
    disk): later calls cost one launch. Empty problems (B, H or S_q = 0) return an empty output.

    Raises WarpyError (one line naming the problem) for an operand it cannot take, NoGPU when no
    sm_90 GPU is present, HangError if the kernel does not finish."""
    call = check_call(q, k, v, causal=causal, scale=scale, out=out, layout=layout, stream=stream)
    if "forked" in _driver._state:
        _driver.refuse_if_unusable()
    if out is None:
        out = _new_output(call)
    if call.empty:
        return out
    O = call.out if call.out is not None else describe(out, "out", layout, stream)
    lib_stream = stream if stream is not None else current_stream("torch", call.q.mem.obj)
    launches().launch(call, O, lib_stream)
    return out


class _CallableModule(types.ModuleType):
    """This module, callable: `warpy.attention` is the module (importing it makes it the package's
    attribute), and `warpy.attention(q, k, v, ...)` is `attention(q, k, v, ...)`."""

    def __call__(self, q: Any, k: Any, v: Any, **kw: Any) -> Any:
        return attention(q, k, v, **kw)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["attention", "check_call", "AttentionCall", "launches", "describe"]
