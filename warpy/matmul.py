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

In a real program (docs/gemm-python.md):

- threads: any thread may call, at once; each call makes the operands' GPU's primary context
  current on its thread (`warpy.runtime.driver.enter`, one driver query when it already is) and
  puts back another context the caller had current. Plans and loaded kernels are built once
  whatever the number of threads asking (`Launches`' lock); the launcher's caches are safe the
  same way (`warpy.runtime.bind`);
- GPUs: operands on GPU n run on GPU n, in its primary context, on that GPU's stream; operands on
  different GPUs are refused in one line;
- `out` sharing a byte with `a` or `b` is refused in one line naming both (`interop.overlap`);
- empty problems follow torch and numpy: M = 0 or N = 0 gives an empty C, K = 0 gives zeros,
  without a kernel;
- a process that forks after a call: the child's calls are refused in one line (`driver`).

8-bit float inputs (torch.float8_e4m3fn / float8_e5m2, A and B each either; GPU tensors, sm_90a):
`warpy.gemm(a8, b8, scale_a=, scale_b=)` computes C = scale_a[row] · scale_b[col] · A·Bᵀ with fp32
accumulation, C bf16 by default (or fp32 / fp16); a scale is an fp32 GPU tensor of one value (per
tensor) or of M (scale_a, a row of A each) / N (scale_b, a row of B each) values, contiguous and
16-byte aligned, or None (1). kernels/gemm_fp8.py has the program's side.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Optional

import attrs
import numpy as np

from warpy.errors import WarpyError
from warpy.interop import (Matrix, as_matrix, as_transposed, as_vector, byte_span, check_row_major, check_rows, current_stream, dtype_name, host_dtype,
                           overlap, overlap_error)
from warpy.kernels import gemm as gemm_family
from warpy.kernels import gemm_fp8, gemm_tune
from warpy.kernels.gemm_epilogue import Epilogue
from warpy.plan import Plan, make_plan
from warpy.runtime import driver as _driver
from warpy.target import dtype_bytes


def _out_dtype(x: Any) -> str:
    try:
        name = dtype_name(x)
    except WarpyError:
        name = ""
    if name not in gemm_family.OUT_DTYPES:
        raise WarpyError(f"out_dtype {x!r} is not one of {', '.join(gemm_family.OUT_DTYPES)}")
    return name


@attrs.define
class GemmCall:
    """A checked call: the problem's sizes and types, the operands, and the GPU they are on (None:
    host operands, or device operands that do not say: the launch asks the driver). Not changed
    once made (not frozen: attrs' frozen constructor costs about 1.5 µs more, once a call)."""

    M: int
    N: int
    K: int
    dtype: str
    out_dtype: str
    a: Matrix
    b: Matrix
    out: Optional[Matrix]
    device: Optional[int] = None
    epilogue: Optional[Epilogue] = None  # a fused epilogue (None: C = A·Bᵀ)
    aux: tuple[Matrix, ...] = ()  # its inputs, in the order of epilogue.params() (bias, c_in, residual)
    pitches: Optional[tuple[int, int, int]] = None  # rows of A, B, C this many elements apart (None: dense)
    batch: Optional[tuple[int, int, int, int]] = None  # bmm in one launch: (count, strides of A, B, C in elements)
    # ("major", A's, B's) where an operand is MN-major (M / N contiguous: read in place), else None
    majors: Optional[tuple[str, str, str]] = None
    # ("fp8", B's type, scale_a's kind, scale_b's kind) for 8-bit float inputs (their scales end `aux`), else None
    fp8: Optional[tuple[str, str, str, str]] = None

    @property
    def side(self) -> str:
        return self.a.side

    @property
    def key(self) -> tuple[Any, ...]:
        """The plan's key: sizes and types, then the epilogue and the row pitches where there are."""
        k: tuple[Any, ...] = (self.M, self.N, self.K, self.dtype, self.out_dtype)
        if self.epilogue is not None:
            k += (self.epilogue,)
        if self.pitches is not None:
            k += (self.pitches,)
        if self.batch is not None:
            k += (("batch",) + self.batch,)
        if self.majors is not None:
            k += (self.majors,)
        if self.fp8 is not None:
            k += (self.fp8,)
        return k

    @property
    def empty(self) -> bool:
        """No kernel to run: C has no elements (M or N is 0) or is all zeros (K is 0)."""
        return self.M == 0 or self.N == 0 or self.K == 0


# problems (M, N, K, dtype, out_dtype[, epilogue]) the kernel's limits were checked for (a set: safe from threads)
_within_limits: set[tuple[Any, ...]] = set()
# fused epilogues by (alpha, beta, bias direction, activation, residual): one Epilogue a kind, looked up
_EPILOGUES: dict[tuple[Any, ...], Epilogue] = {}


def _epilogue(alpha: Any, beta: Any, bias: str, activation: Any, residual: bool) -> Epilogue:
    k = (alpha, beta, bias, activation, residual)
    ep = _EPILOGUES.get(k)
    if ep is None:
        ep = _EPILOGUES[k] = Epilogue(alpha=alpha, beta=beta, bias=bias, act=activation or "", residual=residual)
    return ep


def check_call(a: Any, b: Any, out: Any = None, out_dtype: Any = None, stream: Optional[int] = None, *,
               b_kn: bool = False, scales: Optional[tuple[Any, Any]] = None, **epilogue: Any) -> GemmCall:
    """Describe and check the operands of `gemm` (one-line WarpyError naming the bad input). With
    `b_kn` (`mm`: C = A·B), `b` is K×N and is read as the N×K matrix Bᵀ, a view: its element (k, n)
    is Bᵀ's (n, k), so a K×N tensor whose K is contiguous (`w.t()` of a row-major N×K `w`) is the
    K-major B the kernel reads, without a copy. `epilogue`: the fused epilogue's arguments (`gemm`'s
    alpha, beta, c_in, bias, row_bias, activation, residual), given only where they are not the defaults.
    `scales`: (scale_a, scale_b) of 8-bit float inputs (`_with_scales`)."""
    A = as_matrix(a, "a", stream)
    B = as_transposed(b, "b", stream) if b_kn else as_matrix(b, "b", stream)
    if A.side != B.side:
        raise WarpyError(f"a is {_where(A)} but b is {_where(B)}: give both as numpy arrays or both on the GPU")
    for m in (A, B):
        if m.dtype not in gemm_family.IN_DTYPES:
            raise WarpyError(f"{m.name} is {m.dtype}; inputs must be bf16 or fp16")
    if B.dtype != A.dtype and not (gemm_fp8.is_fp8(A.dtype) and gemm_fp8.is_fp8(B.dtype)):
        raise WarpyError(f"a is {A.dtype} but b is {B.dtype}: both inputs must have the same type")
    M, K = A.shape
    N, Kb = B.shape
    if Kb != K:
        if b_kn:
            raise WarpyError(f"a is {M}x{K} and b is {Kb}x{N}: C = A·B needs b to be K x N with K = {K}")
        raise WarpyError(f"a is {M}x{K} and b is {N}x{Kb}: C = A·Bᵀ needs b to be N x K with K = {K}")
    odt = None if out_dtype is None else _out_dtype(out_dtype)
    O = None
    if out is not None:
        O = as_matrix(out, "out", stream)
        if O.side != A.side:
            raise WarpyError(f"out is {_where(O)} but the inputs are {_where(A)}")
        if O.shape != (M, N):
            raise WarpyError(f"out is {O.shape[0]}x{O.shape[1]}; C = A·B{'' if b_kn else 'ᵀ'} is {M}x{N}")
        if O.dtype not in gemm_family.OUT_DTYPES:
            raise WarpyError(f"out is {O.dtype}; the output must be {', '.join(gemm_family.OUT_DTYPES)}")
        if odt is not None and O.dtype != odt:
            raise WarpyError(f"out is {O.dtype} but out_dtype is {odt}")
        odt = O.dtype
    operands = (A, B) if O is None else (A, B, O)
    dev = None
    mn_a = mn_b = False  # A, B read MN-major (M / N contiguous, in place)
    if A.side == "device":
        for m in operands:  # numpy operands are copied (made contiguous) on the way; empty ones hold nothing
            if m.shape[0] and m.shape[1]:
                try:
                    check_rows(m)
                except WarpyError:
                    if m is not O and _mn_major(m):
                        if m is A:
                            mn_a = True
                        else:
                            mn_b = True
                        continue
                    if b_kn and m is not O:  # mm says what the layout is (warpy.gemm keeps check_rows' words)
                        _refuse_layout(m, b_kn)
                    raise
        dev = _one_device(operands)
        pitches = (A.strides[0] if M > 1 else K, B.strides[0] if N > 1 else K,
                   O.strides[0] if O is not None and M > 1 else N)
        dense = (K, K, N)
        if mn_a or mn_b:  # an MN-major operand's pitch is between its rows of K
            pitches = ((A.strides[1] if K > 1 else M) if mn_a else pitches[0],
                       (B.strides[1] if K > 1 else N) if mn_b else pitches[1], pitches[2])
            dense = (M if mn_a else K, N if mn_b else K, N)
    if O is not None and not O.empty:
        _refuse_overlap(O, A, B)
    call = GemmCall(M, N, K, A.dtype, odt or (A.dtype if not gemm_fp8.is_fp8(A.dtype) else "bf16"), A, B, O, dev)
    # (the changes of a call after it is made, before anyone holds it)
    if A.side == "device" and pitches != dense:
        call.pitches = pitches
    if mn_a or mn_b:
        call.majors = ("major", "MN" if mn_a else "K", "MN" if mn_b else "K")
    if epilogue:
        call = _with_epilogue(call, stream, **epilogue)
    if gemm_fp8.is_fp8(A.dtype) or scales is not None:
        call = _with_scales(call, stream, *(scales or (None, None)))
    if A.side == "host" and O is None and call.out_dtype == "bf16":
        host_dtype("bf16")  # a bf16 numpy result needs ml_dtypes: said now, not after the GPU work
    if not call.empty and call.key not in _within_limits:
        # the kernel's own limits, before any GPU work (GemmProblem refuses them in one line)
        ld = call.pitches or (0, 0, 0)
        mj = call.majors or ("major", "K", "K")
        gemm_family.GemmProblem(M, N, K, dtype=call.dtype, out_dtype=call.out_dtype, lda=ld[0], ldb=ld[1], ldc=ld[2],
                                a_major=mj[1], b_major=mj[2], b_dtype=_fp8_of(call.key)[0],
                                scale_a=_fp8_of(call.key)[1], scale_b=_fp8_of(call.key)[2])
        _within_limits.add(call.key)
    return call


def _with_epilogue(call: GemmCall, stream: Optional[int], alpha: Any = 1.0, beta: Any = 0.0, c_in: Any = None,
                   bias: Any = None, row_bias: Any = None, activation: Optional[str] = None,
                   residual: Any = None) -> GemmCall:
    """The call with its fused epilogue (kernels/gemm_epilogue.py) and inputs checked: C_in and residual
    M×N row-major, bias a vector of N (one a column) or row_bias of M (one a row), all of C's type,
    on C's side (and GPU), 16-byte aligned; none overlapping out except C_in or residual being out
    itself (each element is read before it is written, by the thread that writes it)."""
    if bias is not None and row_bias is not None:
        raise WarpyError("give bias (one value a column) or row_bias (one a row), not both")
    if (beta == 0.0) != (c_in is None):
        raise WarpyError("beta·C_in needs both: pass c_in= with a beta other than 0" if c_in is None
                         else "c_in is given but beta is 0: pass beta= (1 adds C_in)")
    ep = _epilogue(alpha, beta, "n" if bias is not None else "m" if row_bias is not None else "",
                   activation, residual is not None)
    if call.K == 0 and call.M and call.N:
        raise WarpyError("K = 0 with a fused epilogue: C = act(beta·C_in + bias) + residual runs no GEMM; "
                         "compute it without warpy")
    M, N = call.M, call.N
    given = {"bias": (bias if bias is not None else row_bias, (N,) if bias is not None else (M,)),
             "c_in": (c_in, (M, N)), "residual": (residual, (M, N))}
    aux: list[Matrix] = []
    for name in ep.params():
        x, shape = given[name]
        label = "row_bias" if name == "bias" and row_bias is not None else name
        v = as_vector(x, label, stream) if len(shape) == 1 else as_matrix(x, label, stream)
        if v.shape != ((shape[0], 1) if len(shape) == 1 else shape):
            want = f"{shape[0]}" if len(shape) == 1 else f"{shape[0]}x{shape[1]}"
            got = f"{v.shape[0]}" if len(shape) == 1 else f"{v.shape[0]}x{v.shape[1]}"
            raise WarpyError(f"{label} holds {got} values; this call's needs {want}")
        if v.side != call.side:
            raise WarpyError(f"{label} is {_where(v)} but the inputs are {_where(call.a)}")
        if v.dtype != call.out_dtype:
            raise WarpyError(f"{label} is {v.dtype}; the epilogue's inputs have C's type, {call.out_dtype}")
        if v.side == "device" and not v.empty:
            check_row_major(v)
            if v.device is not None and call.device is not None and v.device != call.device:
                raise WarpyError(f"{label} is on GPU {v.device} but a is on GPU {call.device}: give every operand on one GPU")
        if call.out is not None and not call.out.empty and not v.empty:
            how = overlap(call.out, v)
            if how is not None and not (how == "equal" and name != "bias" and v.strides == call.out.strides):
                raise overlap_error(call.out, v, how)
        aux.append(v)
    return attrs.evolve(call, epilogue=ep, aux=tuple(aux))



def _with_scales(call: GemmCall, stream: Optional[int], scale_a: Any = None, scale_b: Any = None) -> GemmCall:
    """The call of 8-bit float inputs with its scales checked (kernels/gemm_fp8.py): each None (1) or an
    fp32 tensor of 1 value (per tensor) or M (scale_a) / N (scale_b) values, any shape holding them
    contiguously, on the inputs' GPU, 16-byte aligned. Its plan key gains ("fp8", B's type, the kinds)."""
    if not gemm_fp8.is_fp8(call.dtype):
        raise WarpyError(f"scale_a / scale_b multiply 8-bit float products; a and b are {call.dtype}")
    if call.side != "device":
        raise WarpyError("8-bit float inputs are GPU tensors (torch.float8_e4m3fn / float8_e5m2), not numpy arrays")
    kinds: list[str] = []
    mats: list[Matrix] = []
    for name, x, n, per in (("scale_a", scale_a, call.M, "row"), ("scale_b", scale_b, call.N, "col")):
        if x is None:
            kinds.append("")
            continue
        flat = x.reshape(-1) if hasattr(x, "reshape") else x
        v = as_vector(flat, name, stream)
        if v.dtype != "fp32":
            raise WarpyError(f"{name} is {v.dtype}; a scale is fp32")
        if v.side != "device":
            raise WarpyError(f"{name} is {_where(v)}; the scales of GPU inputs are on the GPU too")
        if v.shape[0] not in (1, n):
            raise WarpyError(f"{name} holds {v.shape[0]} values; it holds 1 (per tensor) or {n} (one a {per} of C)")
        if v.shape[0] > 1:
            check_row_major(v)
        if v.ptr % 16:
            raise WarpyError(f"{name}: address 0x{v.ptr:x} is not 16-byte aligned (pass a contiguous copy)")
        if v.device is not None and call.device is not None and v.device != call.device:
            raise WarpyError(f"{name} is on GPU {v.device} but a is on GPU {call.device}: give every operand on one GPU")
        kinds.append("tensor" if v.shape[0] == 1 else per)  # (M or N = 1: one value either way)
        mats.append(v)
    return attrs.evolve(call, fp8=("fp8", call.b.dtype, kinds[0], kinds[1]), aux=call.aux + tuple(mats))


def _fp8_of(key: tuple[Any, ...]) -> tuple[str, str, str]:
    """GemmProblem's b_dtype, scale_a and scale_b from a plan key's ("fp8", ...) entry (all "" where none)."""
    f = next((x for x in key[5:] if isinstance(x, tuple) and x and x[0] == "fp8"), None)
    return ("", "", "") if f is None else (f[1], f[2], f[3])


def _mn_major(m: Matrix) -> bool:
    """Whether a device operand (A M×K, or B as the N×K matrix) is one the programs read in place
    MN-major: its M / N contiguous (first stride 1) and its rows of K a pitch apart that TMA
    takes (at least M / N elements, a multiple of 16 bytes), 16-byte aligned. Refused in one line
    where it is M/N-contiguous but TMA cannot take the pitch or the address."""
    rows, cols = m.shape
    s0, s1 = m.strides
    if not (s0 == 1 and rows > 1 and cols > 1):
        return False
    if s1 < rows:
        return False  # overlapping rows of K: check_rows' refusal
    if (s1 * m.itemsize) % 16:
        raise WarpyError(f"{m.name} is {'M' if m.name == 'a' else 'N'}-contiguous (MN-major) with its rows of K "
                         f"{s1 * m.itemsize} bytes apart (strides {m.strides}, elements); TMA needs a multiple of 16 "
                         "(pass a contiguous copy)")
    if m.ptr % 16:
        raise WarpyError(f"{m.name}: address 0x{m.ptr:x} is not 16-byte aligned (TMA needs 16)")
    return True


def _refuse_layout(m: Matrix, b_kn: bool) -> None:
    """One line for an input laid out in a way the kernel does not read: its K must be the contiguous
    dimension (K-major: A M×K row-major; B as N×K row-major, or K×N with K contiguous for `mm`) with
    rows dense, or (`_mn_major`) M / N contiguous with rows of K a pitch apart. What is left: an
    M/N-contiguous operand whose rows of K overlap, and a matrix with no contiguous dimension, which
    TMA cannot read at all."""
    rows, cols = m.shape
    s0, s1 = m.strides
    if (cols <= 1 or s1 == 1) and (rows <= 1 or s0 == cols):
        return
    given = (f"{cols}x{rows} with strides ({s1}, {s0})" if m.name == "b" and b_kn
             else f"{rows}x{cols} with strides ({s0}, {s1})")
    if s1 != 1 and s0 != 1:
        raise WarpyError(f"{m.name} is {given} (elements): no dimension is contiguous, which TMA cannot read; "
                         "pass a contiguous copy")
    if s1 != 1 and rows > 1 and cols > 1:
        what = "N" if m.name == "b" else "M"
        raise WarpyError(f"{m.name} is {given} (elements): {what} is its contiguous dimension (MN-major) but its "
                         f"rows of K are {s1} elements apart, fewer than its {rows} {what}: they overlap; pass "
                         f"{m.name}.contiguous()")


def _one_device(operands: tuple[Matrix, ...]) -> Optional[int]:
    """The GPU the device operands say they are on (None: none says); operands on two GPUs are refused."""
    first: Optional[Matrix] = None
    for m in operands:
        if m.device is not None:
            if first is None:
                first = m
            elif m.device != first.device:
                raise WarpyError(f"{first.name} is on GPU {first.device} but {m.name} is on GPU {m.device}: "
                                 "give every operand on one GPU")
    return None if first is None else first.device


def _refuse_overlap(out: Matrix, a: Matrix, b: Matrix) -> None:
    """Refuse an output sharing a byte with an input (the kernel's tiles would read what others wrote)."""
    for x in (a, b):
        if out.side == "device":  # row-major and dense (checked): each operand one range of bytes
            if not (out.ptr < x.ptr + x.nbytes and x.ptr < out.ptr + out.nbytes):
                continue
        how = overlap(out, x)
        if how is not None:
            raise overlap_error(out, x, how)


def _where(m: Matrix) -> str:
    return "a numpy array" if m.side == "host" else f"a {m.library} GPU tensor" if m.library != "other" else "on the GPU"



class _Loaded:
    """A plan's cubin loaded on one GPU (the one whose context is current), with its fast launcher
    (which owns the kernel's scratch memory: one zero-filled set per stream, `launcher.scratch`)."""

    def __init__(self, plan: Plan) -> None:
        from warpy import runtime as rt
        from warpy.runtime.bind import FastLaunch

        self.plan = plan
        self.module = rt.load(plan.cubin)
        self.kernel = self.module.kernel(plan.header.kernel)
        self.launcher = FastLaunch(self.kernel, plan.header)

    def params(self, a: Any, b: Any, c: Any, scratch: Any, aux: tuple[Any, ...] = ()) -> list[Any]:
        """The parameters over A, B, C (and the fused epilogue's inputs `aux`, in the order of its
        params()) with `scratch`, the set of the stream launched on."""
        p = self.plan.problem
        ep = getattr(p, "epilogue", None)
        fp8 = hasattr(p, "scale_a")  # (a GemmProblem: an 8-bit float one's scales follow the epilogue's inputs)
        names = (ep.params() if ep is not None else ()) + (gemm_fp8.params(p) if fp8 else ())
        return gemm_family.bind(self.plan.header, a, b, c, p.M, p.N, p.K, scratch=scratch, **dict(zip(names, aux)))


PlanKey = tuple[Any, ...]


def problem_of(key: PlanKey, arch: str) -> gemm_family.GemmProblem:
    """The GEMM problem a call's plan key (`GemmCall.key`) stands for on `arch`: the problem whose
    program `warpy.gemm` / `mm` / `bmm` runs (`warpy check` can run it on the CPU first)."""
    M, N, K, dtype, out_dtype = key[:5]
    ep = next((x for x in key[5:] if isinstance(x, Epilogue)), Epilogue())
    ld = next((x for x in key[5:] if isinstance(x, tuple) and x[0] not in ("batch", "major", "fp8")), (0, 0, 0))
    bt = next((x[1:] for x in key[5:] if isinstance(x, tuple) and x[0] == "batch"), (1, 0, 0, 0))
    mj = next((x[1:] for x in key[5:] if isinstance(x, tuple) and x[0] == "major"), ("K", "K"))
    return gemm_family.GemmProblem(M, N, K, dtype=dtype, out_dtype=out_dtype, arch=arch, epilogue=ep, lda=ld[0],
                                   ldb=ld[1], ldc=ld[2], batch=bt[0], stride_a=bt[1], stride_b=bt[2], stride_c=bt[3],
                                   a_major=mj[0], b_major=mj[1], b_dtype=_fp8_of(key)[0],
                                   scale_a=_fp8_of(key)[1], scale_b=_fp8_of(key)[2])


class Launches:
    """What `warpy.gemm` keeps between calls: plans per problem and target (memory, then disk), each
    cubin loaded once per GPU with its launcher; it launches. Safe from any number of threads:
    lookups take no lock, and a plan or a load happens once, under `_lock` (a thread needing a
    problem another is building waits for it; builds do not run two at a time)."""

    def __init__(self) -> None:
        self._plans: dict[PlanKey, Plan] = {}
        self._loaded: dict[tuple[Any, ...], _Loaded] = {}
        self._archs: dict[int, str] = {}
        self._lock = threading.RLock()

    def arch(self, ordinal: int = 0) -> str:
        """The target of GPU `ordinal` ("sm_90a"); NoGPU for one warpy.gemm does not run on."""
        a = self._archs.get(ordinal)
        if a is None:
            from warpy.errors import NoGPU
            from warpy.runtime.driver import opened

            dev = opened(ordinal)
            if dev.sm not in ("sm_90", "sm_100"):
                which = f"GPU {ordinal} ({dev.name})" if ordinal else f"this one ({dev.name})"
                raise NoGPU(f"warpy.gemm runs on sm_90 (Hopper) or sm_100 (Blackwell) GPUs; {which} is {dev.sm}")
            a = self._archs[ordinal] = dev.sm + "a"
        return a

    def plan(self, key: tuple[Any, ...], arch: str) -> Plan:
        full = key + (arch,)
        p = self._plans.get(full)
        if p is None:
            with self._lock:
                p = self._plans.get(full)
                if p is None:
                    problem = problem_of(key, arch)
                    gemm_tune.ensure_tuned(problem)  # a shape the table has not measured: timed on first use
                    p = self._plans[full] = make_plan(gemm_family.FAMILY, problem)
        return p

    def loaded(self, key: tuple[Any, ...], ordinal: int = 0) -> _Loaded:
        """The plan of `key` loaded on GPU `ordinal` (loaded there on first use: the caller has made
        that GPU's context current, `driver.enter`)."""
        full = key + (ordinal,)
        ld = self._loaded.get(full)
        if ld is None:
            with self._lock:
                ld = self._loaded.get(full)
                if ld is None:
                    ld = self._loaded[full] = _Loaded(self.plan(key, self.arch(ordinal)))
        return ld

    def run_host(self, call: GemmCall) -> np.ndarray:
        """numpy in, numpy out: copy, launch on warpy's stream (of the thread's GPU), wait, copy back."""
        from warpy import runtime as rt
        from warpy.runtime.bind import run_header
        from warpy.runtime.driver import enter, leave, selected

        from warpy.kernels.gemm_bench import refuse_unless_it_fits

        ordinal = selected()
        refuse_unless_it_fits(call.M, call.N, call.K, call.dtype, call.out_dtype, self.arch(ordinal))
        entered = enter(ordinal)
        try:
            ld = self.loaded(call.key, ordinal)
            a = rt.to_device(call.a.obj)
            b = rt.to_device(call.b.obj)
            aux = tuple(rt.to_device(m.obj) for m in call.aux)
            c = rt.alloc(call.M * call.N * dtype_bytes(call.out_dtype))
            try:  # on warpy's own stream, with that stream's scratch memory
                rt.synchronize_context()  # the copies (pageable: on the legacy stream) have landed
                run_header(ld.kernel, ld.plan.header, ld.params(a, b, c, ld.launcher.scratch.get(None), aux))
                return c.download(host_dtype(call.out_dtype), (call.M, call.N))
            finally:
                for buf in (a, b, c) + aux:
                    buf.free()
        finally:
            leave(entered)

    def device_of(self, call: GemmCall, out: Matrix) -> int:
        """The GPU of the call's device operands: as they say, else as the driver says of their
        addresses (operands on two GPUs refused), else the thread's selected one."""
        if call.device is not None:
            return call.device
        from warpy.runtime.driver import device_of_pointer, selected

        found: list[Matrix] = []
        for m in (call.a, call.b, out):
            if not m.empty:
                n = device_of_pointer(m.ptr)
                if n is not None:
                    m = attrs.evolve(m, device=n)
                    found.append(m)
        dev = _one_device(tuple(found))
        return selected() if dev is None else dev

    def launch(self, call: GemmCall, out: Matrix, stream: Optional[int]) -> None:
        """Device operands: enqueue on `stream` (None: warpy's own, then wait), on their GPU."""
        from warpy.runtime.driver import enter, leave

        ordinal = self.device_of(call, out)
        entered = enter(ordinal)
        try:
            if call.K == 0:
                self._zero(out, stream)
            else:
                self._launch(call, out, stream, ordinal)
        finally:
            if entered is not None:
                leave(entered)

    def _launch(self, call: GemmCall, out: Matrix, stream: Optional[int], ordinal: int) -> None:
        from warpy.runtime.bind import DeviceSpan

        ld = self._loaded.get(call.key + (ordinal,)) or self.loaded(call.key, ordinal)
        a, b = call.a, call.b
        if stream is None:  # a producer whose stream we do not know: let its work finish first
            from warpy import runtime as rt

            rt.synchronize_context()
        if call.aux:  # the packed parameters are those of these addresses, the epilogue's inputs' too
            aux = call.aux
            ld.launcher(
                (a.ptr, b.ptr, out.ptr) + tuple(m.ptr for m in aux),
                lambda scratch: ld.params(DeviceSpan(a.ptr, a.nbytes), DeviceSpan(b.ptr, b.nbytes),
                                          DeviceSpan(out.ptr, out.nbytes), scratch,
                                          tuple(DeviceSpan(m.ptr, m.nbytes) for m in aux)),
                stream,
            )
        elif call.batch is not None:  # one launch over the batch: the spans of all its matrices
            n, sa, sb, sc = call.batch
            ld.launcher(
                (a.ptr, b.ptr, out.ptr),
                lambda scratch: ld.params(DeviceSpan(a.ptr, a.nbytes + (n - 1) * sa * a.itemsize),
                                          DeviceSpan(b.ptr, b.nbytes + (n - 1) * sb * b.itemsize),
                                          DeviceSpan(out.ptr, out.nbytes + (n - 1) * sc * out.itemsize), scratch),
                stream,
            )
        else:
            ld.launcher(
                (a.ptr, b.ptr, out.ptr),
                lambda scratch: ld.params(DeviceSpan(a.ptr, a.nbytes), DeviceSpan(b.ptr, b.nbytes),
                                          DeviceSpan(out.ptr, out.nbytes), scratch),
                stream,
            )
        if stream is None:
            from warpy import runtime as rt

            rt.synchronize(kernel=ld.kernel.name)

    def _zero(self, out: Matrix, stream: Optional[int]) -> None:
        """C = 0 (K = 0), in `stream`'s order (None: after the producer's work, then waited for)."""
        if out.empty:
            return
        from warpy import runtime as rt
        from warpy.runtime.driver import check, cuda
        from warpy.runtime.launcher import default_stream

        d = cuda()
        if stream is None:
            rt.synchronize_context()
        s = default_stream() if stream is None else d.CUstream(stream)
        rows, cols = out.shape
        if rows > 1 and out.strides[0] != cols:  # rows with a pitch: each row's bytes, not the gaps between
            for r in range(rows):
                at = out.ptr + r * out.strides[0] * out.itemsize
                check(d.cuMemsetD8Async(at, 0, cols * out.itemsize, s), "cuMemsetD8Async (C = 0 for K = 0)")
        else:
            lo, hi = byte_span(out)  # row-major and dense: every byte of C
            check(d.cuMemsetD8Async(lo, 0, hi - lo, s), "cuMemsetD8Async (C = 0 for K = 0)")
        if stream is None:
            rt.synchronize(kernel="memset")


_launches: Any = Launches()  # (tests put a fake backend here)


def launches() -> Launches:
    """The process's plans and loaded kernels for `warpy.gemm`."""
    return _launches  # type: ignore[no-any-return]


_TORCH_OUT: dict[str, Any] = {}


def _new_output(call: GemmCall, stream: Optional[int]) -> Any:
    """C for device inputs, allocated by the inputs' library on their device."""
    lib = call.a.library
    if lib == "torch":
        return sys.modules["torch"].empty((call.M, call.N), dtype=_torch_out(call.out_dtype), device=call.a.obj.device)
    if lib == "cupy":
        cupy = sys.modules["cupy"]
        if call.out_dtype == "bf16":
            raise WarpyError("cupy has no bf16 type: pass out= or out_dtype='fp32'")
        dev = getattr(call.a.obj, "device", None)
        if dev is not None:
            with dev:
                return cupy.empty((call.M, call.N), dtype=host_dtype(call.out_dtype))
        return cupy.empty((call.M, call.N), dtype=host_dtype(call.out_dtype))
    raise WarpyError(f"out=None allocates C with torch or cupy; for a {type(call.a.obj).__name__} input pass out=")


def _host_empty(call: GemmCall, out: Any) -> Any:
    """numpy's answer to an empty problem: an empty C (M or N is 0) or zeros (K is 0)."""
    if out is not None:
        out[...] = 0
        return out
    return np.zeros((call.M, call.N), dtype=host_dtype(call.out_dtype))


def gemm(a: Any, b: Any, out: Any = None, out_dtype: Any = None, *, stream: Optional[int] = None,
         alpha: float = 1.0, beta: float = 0.0, c_in: Any = None, bias: Any = None, row_bias: Any = None,
         activation: Optional[str] = None, residual: Any = None, scale_a: Any = None, scale_b: Any = None) -> Any:
    """C = A·Bᵀ on the GPU with warpy's GEMM kernel.

    a: M×K and b: N×K, row-major (K contiguous), both bf16 or both fp16. out: an M×N row-major
    fp32, bf16 or fp16 array, or None to allocate C. out_dtype: C's type when out is None
    ("fp32"/"f32", "bf16", "fp16", or a numpy/torch dtype); default: the input type, as torch.mm.

    Operands: torch/cupy (any DLPack or __cuda_array_interface__) GPU tensors run on their
    library's current stream, or on `stream` (a CUstream handle), and the call returns without
    waiting; numpy arrays are copied to the GPU and back (the call waits; a bf16 numpy result
    needs ml_dtypes: pip install -e '.[bf16]', or pass out_dtype="fp32").

    Threads and GPUs: any thread may call, several at once; operands on GPU n run on GPU n (its
    primary context, the one torch and cupy use), all operands on one GPU.

    Empty problems, as torch.mm and numpy: M = 0 or N = 0 gives an empty C, K = 0 a C of zeros
    (no kernel runs; a given out is filled with zeros on the stream).

    Limits: K >= 8 and a multiple of 8 where M, N, K > 0 (TMA needs 16-byte rows); all of A, B and
    C in the GPU's memory; `out` sharing no byte with a or b; an sm_90 (H100/H200) GPU (an sm_100
    B200 is a target warpy assembles for, never yet run). The first call for a shape builds and
    assembles its program (cached in memory and on disk, under $WARPY_CACHE): later calls cost one
    launch.

    Fused epilogue (one kernel; docs/gemm-python.md): C = act(alpha·A·Bᵀ + beta·c_in + bias) +
    residual, with `bias` a vector of N (one value a column, as nn.Linear's) or `row_bias` one of M,
    `activation` "relu", "silu", "gelu_tanh" or "gelu_erf" ("gelu"), `c_in` and `residual` M×N
    row-major; all of C's type. alpha and beta are the program's constants (each value its own
    plan); c_in (or residual) may be `out` itself.

    8-bit float inputs (torch.float8_e4m3fn / float8_e5m2 GPU tensors, A and B each either; sm_90a):
    C = scale_a[row] · scale_b[col] · A·Bᵀ, fp32 accumulation, C bf16 unless out / out_dtype say fp32 or
    fp16; `scale_a` / `scale_b`: None (1), or fp32 GPU tensors of 1 value (per tensor) or M / N values
    (one a row of A / of B), as torch._scaled_mm's. K a multiple of 16.

    Returns `out`, or the new C (the inputs' library's array; numpy for numpy inputs).

    Raises WarpyError (one line naming the problem) for a bad operand: a shape, type, layout or
    mix of host and device operands it cannot take, operands on two GPUs, an out overlapping an
    input, sizes beyond the limits above, a call in a process forked after warpy used the GPU;
    NoGPU (a WarpyError) when no GPU it runs on is present; HangError if the kernel does not finish.
    """
    # With no stream named, device operands are used on their library's current stream, so the
    # producer is asked for no synchronisation (-1); with one, the producer orders its pending work
    # before that stream (the DLPack stream argument).
    scales = None if scale_a is None and scale_b is None else (scale_a, scale_b)
    if _compiling is not None and _compiling():  # torch.compile: warpy::mm of bᵀ (a view), no graph break
        if scales is not None:
            raise WarpyError("scaled 8-bit float GEMMs are not registered with torch.compile yet: call warpy.gemm "
                             "outside the compiled region")
        return mm(a, b.t(), out, out_dtype, stream=stream, alpha=alpha, beta=beta, c_in=c_in, bias=bias,
                  row_bias=row_bias, activation=activation, residual=residual)
    if alpha == 1.0 and beta == 0.0 and c_in is bias is row_bias is activation is residual is None:
        call = check_call(a, b, out, out_dtype, stream=stream, scales=scales)
    else:
        call = check_call(a, b, out, out_dtype, stream=stream, scales=scales, alpha=alpha, beta=beta, c_in=c_in,
                          bias=bias, row_bias=row_bias, activation=activation, residual=residual)
    return _run(call, out, stream)


def _run(call: GemmCall, out: Any, stream: Optional[int]) -> Any:
    """Run a checked call (`gemm`, `mm`): numpy operands through the GPU and back, device operands
    enqueued on their library's current stream (or `stream`); returns out or the new C."""
    if "forked" in _driver._state:  # said before the library is asked for a stream or memory
        _driver.refuse_if_unusable()
    be = launches()
    if call.side == "host":
        if call.empty:
            return _host_empty(call, out)
        c = be.run_host(call)
        if out is None:
            return c
        out[...] = c
        return out
    lib_stream = stream
    if stream is None and call.a.library in ("torch", "cupy"):
        lib_stream = current_stream(call.a.library, call.a.obj)
    if out is None:
        out = _new_output(call, lib_stream)
        O = as_matrix(out, "out", stream)
    else:
        assert call.out is not None
        O = call.out
    if call.M and call.N:  # else C has no elements: nothing to run
        be.launch(call, O, lib_stream)
    return out


# torch.compile: `mm` on torch tensors inside a compiled region becomes the custom op `warpy::mm`
# (warpy/torch_ops.py; registered once torch is imported), whose fake implementation dynamo traces
# without a graph break; outside one this is one call of `torch.compiler.is_compiling`.
_compiling: Optional[Any] = None  # torch.compiler.is_compiling, once the op is registered
_torch_mm: Optional[Any] = None  # torch.ops.warpy.mm.default
_torch_bmm: Optional[Any] = None  # torch.ops.warpy.bmm.default


def hook_torch() -> None:
    """Register `warpy::mm` with torch (warpy.torch_ops) and let `mm` route compiled calls to it."""
    global _compiling, _torch_mm, _torch_bmm
    if _torch_mm is None and hasattr(sys.modules.get("torch"), "library"):  # (not a stand-in of the tests)
        from warpy import torch_ops

        _torch_mm = torch_ops.op()
        _torch_bmm = torch_ops.bmm_op()
        _compiling = sys.modules["torch"].compiler.is_compiling


if "torch" in sys.modules:  # torch first, then warpy: compiled code finds the op registered before it traces
    hook_torch()


def mm(a: Any, b: Any, out: Any = None, out_dtype: Any = None, *, stream: Optional[int] = None,
       alpha: float = 1.0, beta: float = 0.0, c_in: Any = None, bias: Any = None, row_bias: Any = None,
       activation: Optional[str] = None, residual: Any = None) -> Any:
    """C = A·B on the GPU with warpy's GEMM kernel, as torch.mm: a is M×K, b is K×N.

    The kernel reads both operands with K contiguous (K-major): a row-major M×K `a`, and a `b`
    whose K is its contiguous dimension, such as `w.t()` of a row-major N×K weight `w` (torch's
    `nn.Linear` layout: `warpy.mm(x, w.t())` is `F.linear(x, w)`), read in place without a copy.
    An operand whose M or N is the contiguous dimension (a row-major K×N `b`, a transposed `a`) is
    refused in one line, as is one with no contiguous dimension; everything else (types, out,
    out_dtype, stream, threads, GPUs, empty problems, overlap) is as `warpy.gemm`, which computes
    the same product from B given N×K: `mm(a, b) == gemm(a, b.t())`. The fused epilogue's
    arguments (alpha, beta, c_in, bias, row_bias, activation, residual) are `warpy.gemm`'s:
    `warpy.mm(x, w.t(), bias=b, activation="gelu")` is `F.gelu(F.linear(x, w, b))` in one kernel.

    Under torch.compile (torch tensors), the call is the custom op `torch.ops.warpy.mm` (no graph
    break); `out=` is refused there (an op that writes its argument cannot be traced as a pure one).
    """
    if _compiling is None and "torch" in sys.modules:  # torch imported after warpy
        hook_torch()
    if _compiling is not None and _compiling():
        if out is not None:
            raise WarpyError("warpy.mm under torch.compile returns a new tensor: out= is not supported there")
        assert _torch_mm is not None
        return _torch_mm(a, b, None if out_dtype is None else _out_dtype(out_dtype), float(alpha), float(beta),
                         c_in, bias, row_bias, activation, residual)
    if alpha == 1.0 and beta == 0.0 and c_in is bias is row_bias is activation is residual is None:
        call = check_call(a, b, out, out_dtype, stream=stream, b_kn=True)
    else:
        call = check_call(a, b, out, out_dtype, stream=stream, b_kn=True, alpha=alpha, beta=beta, c_in=c_in,
                          bias=bias, row_bias=row_bias, activation=activation, residual=residual)
    return _run(call, out, stream)


def _batched(x: Any, name: str) -> tuple[int, int, int, int, int, int]:
    """A 3-D operand's (batch, rows, cols, batch stride, row stride, col stride), strides in elements
    (torch tensors and numpy arrays)."""
    if isinstance(x, np.ndarray):
        if x.ndim != 3:
            raise WarpyError(f"{name} has {x.ndim} dimensions; bmm takes a batch of matrices (3-D)")
        st = tuple(v // x.itemsize for v in x.strides)
        return (x.shape[0], x.shape[1], x.shape[2], st[0], st[1], st[2])
    if type(x).__module__.split(".", 1)[0] == "torch":
        shape, st = tuple(x.shape), tuple(x.stride())
        if len(shape) != 3:
            raise WarpyError(f"{name} has {len(shape)} dimensions; bmm takes a batch of matrices (3-D)")
        return (shape[0], shape[1], shape[2], st[0], st[1], st[2])
    raise WarpyError(f"{name} is a {type(x).__module__}.{type(x).__name__}: bmm takes torch tensors or numpy arrays")


def bmm(a: Any, b: Any, out: Any = None, out_dtype: Any = None, *, stream: Optional[int] = None) -> Any:
    """C[i] = A[i]·B[i] for every i of the leading (batch) dimension, as torch.bmm: a is BATCH×M×K, b
    is BATCH×K×N (torch tensors or numpy arrays; each matrix laid out as `mm` takes it, the batch
    dimension any stride). out: a BATCH×M×N tensor (each matrix row-major) or None.

    On an sm_90 GPU, where the matrices of a, b and out are each a whole number of 16 bytes apart, the
    batch is one launch (3-D tensor maps, the matrix their outermost coordinate); otherwise each
    matrix is one launch of the same planned kernel on the same stream, in order. `out` sharing a
    byte with `a` or `b` anywhere is refused in one line."""
    if _compiling is None and "torch" in sys.modules:
        hook_torch()
    if _compiling is not None and _compiling():
        if out is not None:
            raise WarpyError("warpy.bmm under torch.compile returns a new tensor: out= is not supported there")
        assert _torch_bmm is not None
        return _torch_bmm(a, b, None if out_dtype is None else _out_dtype(out_dtype))
    return _bmm_eager(a, b, out, out_dtype, stream)


def _bmm_eager(a: Any, b: Any, out: Any, out_dtype: Any, stream: Optional[int]) -> Any:
    """bmm's own work (warpy::bmm's CUDA implementation calls this: not bmm, which would route back)."""
    ba, M, K, sa0, sa1, sa2 = _batched(a, "a")
    bb, Kb, N, sb0, sb1, sb2 = _batched(b, "b")
    if ba != bb:
        raise WarpyError(f"a holds {ba} matrices and b holds {bb}: bmm needs the same batch")
    if Kb != K:
        raise WarpyError(f"a is {ba}x{M}x{K} and b is {bb}x{Kb}x{N}: C = A·B needs b to be batch x K x N with K = {K}")
    host = isinstance(a, np.ndarray)
    if host:
        if not isinstance(b, np.ndarray) or (out is not None and not isinstance(out, np.ndarray)):
            raise WarpyError("bmm takes all operands as numpy arrays or all as torch GPU tensors")
        outs = [mm(a[i], b[i], None if out is None else out[i], out_dtype) for i in range(ba)]
        if out is not None:
            return out
        if not outs:
            return np.zeros((0, M, N), dtype=host_dtype(_out_dtype(out_dtype) if out_dtype is not None
                                                        else dtype_name(a.dtype)))
        return np.stack(outs)
    # one check of the first matrices (types, layouts, limits), then the same call over every entry
    torch = sys.modules["torch"]
    if ba == 0:
        shape_out = (0, M, N)
        if out is not None:
            return out
        odt = _out_dtype(out_dtype) if out_dtype is not None else dtype_name(a.dtype)
        return torch.empty(shape_out, dtype=_torch_out(odt), device=a.device)
    if out is None:
        odt = _out_dtype(out_dtype) if out_dtype is not None else dtype_name(a.dtype)
        out = torch.empty((ba, M, N), dtype=_torch_out(odt), device=a.device)
    bo, Mo, No, so0, so1, so2 = _batched(out, "out")
    if (bo, Mo, No) != (ba, M, N):
        raise WarpyError(f"out is {bo}x{Mo}x{No}; C = A·B is {ba}x{M}x{N}")
    call = check_call(a[0], b[0], out[0], out_dtype, stream=stream, b_kn=True)
    if not call.empty:
        _refuse_batch_overlap(call, (ba, sa0, sb0, so0))
    if "forked" in _driver._state:
        _driver.refuse_if_unusable()
    be = launches()
    lib_stream = stream if stream is not None else current_stream("torch", a)
    if call.M and call.N and call.K and ba > 1 and _one_launch(call, (sa0, sb0, so0)):
        # one launch over the batch (sm_90a: 3-D tensor maps, the matrix a coordinate)
        batched = attrs.evolve(call, batch=(ba, sa0, sb0, so0))
        if batched.key not in _within_limits:
            lda, ldb, ldc = batched.pitches or (0, 0, 0)
            mj = batched.majors or ("major", "K", "K")
            gemm_family.GemmProblem(call.M, call.N, call.K, dtype=call.dtype, out_dtype=call.out_dtype, lda=lda,
                                    ldb=ldb, ldc=ldc, batch=ba, stride_a=sa0, stride_b=sb0, stride_c=so0,
                                    a_major=mj[1], b_major=mj[2])
            _within_limits.add(batched.key)
        assert batched.out is not None
        be.launch(batched, batched.out, lib_stream)
        return out
    if call.M and call.N:
        for i in range(ba):
            ai = attrs.evolve(call.a, ptr=call.a.ptr + i * sa0 * call.a.itemsize)
            bi = attrs.evolve(call.b, ptr=call.b.ptr + i * sb0 * call.b.itemsize)
            assert call.out is not None
            oi = attrs.evolve(call.out, ptr=call.out.ptr + i * so0 * call.out.itemsize)
            be.launch(attrs.evolve(call, a=ai, b=bi, out=oi), oi, lib_stream)
    return out


def _one_launch(call: GemmCall, strides: tuple[int, int, int]) -> bool:
    """Whether a batch runs as one launch: on an sm_90 GPU, the matrices of A, B and C a whole number
    of 16 bytes apart (not 0: each its own memory), below 2 GiB; else one launch a matrix."""
    if call.epilogue is not None:
        return False
    for s, m in zip(strides, (call.a, call.b, call.out)):
        assert m is not None
        if s <= 0 or (s * m.itemsize) % 16 or s * m.itemsize >= 1 << 31:
            return False
    try:
        return bool(launches().arch(call.device or 0) == "sm_90a")
    except Exception:  # (a stand-in backend of the tests: the per-matrix launches)
        return False


def _torch_out(name: str) -> Any:
    torch = sys.modules["torch"]
    if not _TORCH_OUT:
        _TORCH_OUT.update(fp32=torch.float32, bf16=torch.bfloat16, fp16=torch.float16)
    return _TORCH_OUT[name]


def _refuse_batch_overlap(call: GemmCall, strides: tuple[int, int, int, int]) -> None:
    """Refuse a batched out whose bytes (all its matrices) meet those of a or b (all theirs)."""
    n, sa, sb, so = strides
    assert call.out is not None

    def whole(m: Matrix, s: int) -> tuple[int, int]:
        lo, hi = byte_span(m)
        d = (n - 1) * s * m.itemsize
        return (lo + min(d, 0), hi + max(d, 0))

    ol, oh = whole(call.out, so)
    for m, s in ((call.a, sa), (call.b, sb)):
        xl, xh = whole(m, s)
        if ol < xh and xl < oh:
            raise WarpyError(f"out (bytes 0x{ol:x}-0x{oh:x}) overlaps {m.name} (0x{xl:x}-0x{xh:x}) over the batch: "
                             f"the result cannot be written over an input it reads; give out memory of its own")


__all__ = ["gemm", "mm", "bmm", "check_call", "GemmCall", "launches", "hook_torch", "problem_of"]
