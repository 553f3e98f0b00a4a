"""`warpy.gemm(a, b, out=None, out_dtype=None)`: C = A·Bᵀ on the GPU with warpy's GEMM kernel.

A is M×K and B is N×K, both row-major (K contiguous), bf16 or fp16 (the same); C is M×N row-major,
fp32, bf16 or fp16 (default: the input type, as torch.mm). Inputs are (`warpy.interop`)

- device tensors through DLPack (torch, cupy, anything with `__dlpack__`), or through
  `__cuda_array_interface__`; the kernel runs on the producer's current stream (torch, cupy) and the
  call returns without waiting, as torch.mm does; `out=None` allocates C with the inputs' library
  (imported only then);
- numpy arrays: copied to the device, multiplied, and C copied back (a numpy array is returned, or
  `out` filled).

Each problem (shape, types, target) is planned once (`warpy.plan`: the GEMM family's rule picks a
configuration, the program is built, lifted and assembled, cached in memory and on disk), so a
repeated call costs one launch: `warpy bench gemm --host-overhead` measures it.

A program's scratch memory (split-K / stream-K flags and workspaces, `.param NAME u64 scratch`) is
allocated by the loaded kernel's launcher, zero-filled, once per CUDA stream it runs on, and kept
for the process's life (docs/sass.md); the GEMM family's `bind` names the parameters.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Optional

import attrs
import numpy as np

from warpy.errors import WarpyError
from warpy.interop import Matrix, as_matrix, check_row_major, current_stream, dtype_name, host_dtype
from warpy.kernels import gemm as gemm_family
from warpy.plan import Plan, make_plan
from warpy.target import dtype_bytes


def _out_dtype(x: Any) -> str:
    try:
        name = dtype_name(x)
    except WarpyError:
        name = ""
    if name not in gemm_family.OUT_DTYPES:
        raise WarpyError(f"out_dtype {x!r} is not one of {', '.join(gemm_family.OUT_DTYPES)}")
    return name


@attrs.frozen
class GemmCall:
    """A checked call: the problem's sizes and types, and the operands."""

    M: int
    N: int
    K: int
    dtype: str
    out_dtype: str
    a: Matrix
    b: Matrix
    out: Optional[Matrix]

    @property
    def side(self) -> str:
        return self.a.side

    @property
    def key(self) -> tuple[int, int, int, str, str]:
        return (self.M, self.N, self.K, self.dtype, self.out_dtype)


def check_call(a: Any, b: Any, out: Any = None, out_dtype: Any = None, stream: Optional[int] = None) -> GemmCall:
    """Describe and check the operands of `gemm` (one-line WarpyError naming the bad input)."""
    A = as_matrix(a, "a", stream)
    B = as_matrix(b, "b", stream)
    if A.side != B.side:
        raise WarpyError(f"a is {_where(A)} but b is {_where(B)}: give both as numpy arrays or both on the GPU")
    for m in (A, B):
        if m.dtype not in gemm_family.IN_DTYPES:
            raise WarpyError(f"{m.name} is {m.dtype}; inputs must be bf16 or fp16")
    if B.dtype != A.dtype:
        raise WarpyError(f"a is {A.dtype} but b is {B.dtype}: both inputs must have the same type")
    M, K = A.shape
    N, Kb = B.shape
    if Kb != K:
        raise WarpyError(f"a is {M}x{K} and b is {N}x{Kb}: C = A·Bᵀ needs b to be N x K with K = {K}")
    odt = None if out_dtype is None else _out_dtype(out_dtype)
    O = None
    if out is not None:
        O = as_matrix(out, "out", stream)
        if O.side != A.side:
            raise WarpyError(f"out is {_where(O)} but the inputs are {_where(A)}")
        if O.shape != (M, N):
            raise WarpyError(f"out is {O.shape[0]}x{O.shape[1]}; C = A·Bᵀ is {M}x{N}")
        if O.dtype not in gemm_family.OUT_DTYPES:
            raise WarpyError(f"out is {O.dtype}; the output must be {', '.join(gemm_family.OUT_DTYPES)}")
        if odt is not None and O.dtype != odt:
            raise WarpyError(f"out is {O.dtype} but out_dtype is {odt}")
        odt = O.dtype
    for m in (A, B) + ((O,) if O is not None else ()):
        if m.side == "device":  # numpy operands are copied (made contiguous) on the way
            check_row_major(m)
    call = GemmCall(M, N, K, A.dtype, odt or A.dtype, A, B, O)
    if A.side == "host" and O is None and call.out_dtype == "bf16":
        host_dtype("bf16")  # a bf16 numpy result needs ml_dtypes: said now, not after the GPU work
    # the kernel's own limits, before any GPU work (GemmProblem refuses them in one line)
    gemm_family.GemmProblem(M, N, K, dtype=call.dtype, out_dtype=call.out_dtype)
    return call


def _where(m: Matrix) -> str:
    return "a numpy array" if m.side == "host" else f"a {m.library} GPU tensor" if m.library != "other" else "on the GPU"



class _Loaded:
    """A plan's cubin loaded on the GPU, with its fast launcher (which owns the kernel's scratch
    memory: one zero-filled set per stream, `launcher.scratch`)."""

    def __init__(self, plan: Plan) -> None:
        from warpy import runtime as rt
        from warpy.runtime.bind import FastLaunch

        self.plan = plan
        self.module = rt.load(plan.cubin)
        self.kernel = self.module.kernel(plan.header.kernel)
        self.launcher = FastLaunch(self.kernel, plan.header)

    def params(self, a: Any, b: Any, c: Any, scratch: Any) -> list[Any]:
        """The parameters over A, B, C with `scratch`, the set of the stream launched on."""
        p = self.plan.problem
        return gemm_family.bind(self.plan.header, a, b, c, p.M, p.N, p.K, scratch=scratch)


class Launches:
    """What `warpy.gemm` keeps between calls: plans per problem (memory, then disk), each cubin
    loaded once with its launcher; it launches."""

    def __init__(self) -> None:
        self._plans: dict[tuple[int, int, int, str, str, str], Plan] = {}
        self._loaded: dict[tuple[int, int, int, str, str, str], _Loaded] = {}
        self._arch: Optional[str] = None
        self._lock = threading.Lock()

    def arch(self) -> str:
        if self._arch is None:
            from warpy import runtime as rt
            from warpy.errors import NoGPU

            sm = rt.device().sm
            if sm not in ("sm_90", "sm_100"):
                raise NoGPU(f"warpy.gemm runs on sm_90 (Hopper) or sm_100 (Blackwell) GPUs; this one is {sm}")
            self._arch = sm + "a"
        return self._arch

    def plan(self, key: tuple[int, int, int, str, str], arch: str) -> Plan:
        full = key + (arch,)
        p = self._plans.get(full)
        if p is None:
            with self._lock:
                p = self._plans.get(full)
                if p is None:
                    M, N, K, dtype, out_dtype = key
                    problem = gemm_family.GemmProblem(M, N, K, dtype=dtype, out_dtype=out_dtype, arch=arch)
                    p = self._plans[full] = make_plan(gemm_family.FAMILY, problem)
        return p

    def loaded(self, key: tuple[int, int, int, str, str]) -> _Loaded:
        arch = self.arch()
        full = key + (arch,)
        ld = self._loaded.get(full)
        if ld is None:
            ld = self._loaded[full] = _Loaded(self.plan(key, arch))
        return ld

    def run_host(self, call: GemmCall) -> np.ndarray:
        """numpy in, numpy out: copy, launch on warpy's stream, wait, copy back."""
        from warpy import runtime as rt
        from warpy.runtime.bind import run_header

        from warpy.kernels.gemm_bench import refuse_unless_it_fits

        refuse_unless_it_fits(call.M, call.N, call.K, call.dtype, call.out_dtype, self.arch())
        ld = self.loaded(call.key)
        a = rt.to_device(call.a.obj)
        b = rt.to_device(call.b.obj)
        c = rt.alloc(call.M * call.N * dtype_bytes(call.out_dtype))
        try:  # on warpy's own stream, with that stream's scratch memory
            run_header(ld.kernel, ld.plan.header, ld.params(a, b, c, ld.launcher.scratch.get(None)))
            return c.download(host_dtype(call.out_dtype), (call.M, call.N))
        finally:
            for buf in (a, b, c):
                buf.free()

    def launch(self, call: GemmCall, out: Matrix, stream: Optional[int]) -> None:
        """Device operands: enqueue on `stream` (None: warpy's own, then wait)."""
        from warpy.runtime.bind import DeviceSpan

        ld = self.loaded(call.key)
        a, b = call.a, call.b
        if stream is None:  # a producer whose stream we do not know: let its work finish first
            from warpy import runtime as rt

            rt.synchronize_context()
        ld.launcher(
            (a.ptr, b.ptr, out.ptr),
            lambda scratch: ld.params(DeviceSpan(a.ptr, a.nbytes), DeviceSpan(b.ptr, b.nbytes),
                                      DeviceSpan(out.ptr, out.nbytes), scratch),
            stream,
        )
        if stream is None:
            from warpy import runtime as rt

            rt.synchronize(kernel=ld.kernel.name)


_launches: Optional[Launches] = None


def launches() -> Launches:
    """The process's plans and loaded kernels for `warpy.gemm`."""
    global _launches
    if _launches is None:
        _launches = Launches()
    return _launches


def _new_output(call: GemmCall, stream: Optional[int]) -> Any:
    """C for device inputs, allocated by the inputs' library on their device."""
    lib = call.a.library
    if lib == "torch":
        torch = sys.modules["torch"]
        tdt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[call.out_dtype]
        return torch.empty((call.M, call.N), dtype=tdt, device=call.a.obj.device)
    if lib == "cupy":
        cupy = sys.modules["cupy"]
        if call.out_dtype == "bf16":
            raise WarpyError("cupy has no bf16 type: pass out= or out_dtype='fp32'")
        return cupy.empty((call.M, call.N), dtype=host_dtype(call.out_dtype))
    raise WarpyError(f"out=None allocates C with torch or cupy; for a {type(call.a.obj).__name__} input pass out=")


def gemm(a: Any, b: Any, out: Any = None, out_dtype: Any = None, *, stream: Optional[int] = None) -> Any:
    """C = A·Bᵀ on the GPU with warpy's GEMM kernel.

    a: M×K and b: N×K, row-major (K contiguous), both bf16 or both fp16. out: an M×N row-major
    fp32, bf16 or fp16 array, or None to allocate C. out_dtype: C's type when out is None
    ("fp32"/"f32", "bf16", "fp16", or a numpy/torch dtype); default: the input type, as torch.mm.

    Operands: torch/cupy (any DLPack or __cuda_array_interface__) GPU tensors run on their
    library's current stream, or on `stream` (a CUstream handle), and the call returns without
    waiting; numpy arrays are copied to the GPU and back (the call waits; a bf16 numpy result
    needs ml_dtypes: pip install -e '.[bf16]', or pass out_dtype="fp32").

    Limits: M, N >= 1; K >= 8 and a multiple of 8 (TMA needs 16-byte rows); all of A, B and C in
    the GPU's memory; an sm_90 (H100/H200) GPU (an sm_100 B200 is a target warpy assembles for,
    never yet run). The first call for a shape builds and assembles its program (cached in memory
    and on disk, under $WARPY_CACHE): later calls cost one launch.

    Returns `out`, or the new C (the inputs' library's array; numpy for numpy inputs).

    Raises WarpyError (one line naming the problem) for a bad operand: a shape, type, layout or
    mix of host and device operands it cannot take, sizes beyond the limits above; NoGPU (a
    WarpyError) when no GPU it runs on is present; HangError if the kernel does not finish.
    """
    # With no stream named, device operands are used on their library's current stream, so the
    # producer is asked for no synchronisation (-1); with one, the producer orders its pending work
    # before that stream (the DLPack stream argument).
    call = check_call(a, b, out, out_dtype, stream=stream)
    lib_stream = stream
    if stream is None and call.side == "device" and call.a.library in ("torch", "cupy"):
        lib_stream = current_stream(call.a.library, call.a.obj)
    be = launches()
    if call.side == "host":
        c = be.run_host(call)
        if out is None:
            return c
        out[...] = c
        return out
    if out is None:
        out = _new_output(call, lib_stream)
        O = as_matrix(out, "out", stream)
    else:
        assert call.out is not None
        O = call.out
    be.launch(call, O, lib_stream)
    return out


__all__ = ["gemm", "check_call", "GemmCall", "launches"]
