"""`warpy.gemm(a, b, out=None, out_dtype=None)`: C = A·Bᵀ on the GPU with warpy's GEMM kernel.

A is M×K and B is N×K, both row-major (K contiguous), bf16 or fp16 (the same); C is M×N row-major,
fp32, bf16 or fp16 (default: the input type, as torch.mm). Inputs are

- device tensors through DLPack (torch, cupy, anything with `__dlpack__`; the capsule is read with
  ctypes), or through `__cuda_array_interface__`; the kernel runs on the producer's current stream
  (torch, cupy) and the call returns without waiting, as torch.mm does; `out=None` allocates C with
  the inputs' library (imported only then);
- numpy arrays: copied to the device, multiplied, and C copied back (a numpy array is returned, or
  `out` filled).

Each problem (shape, types, target) is planned once: the rule in `kernels/programs.py` picks a
configuration, the program is built, lifted to PTX and assembled. Plans live in memory (a dict) and
on disk (`$WARPY_CACHE` or `~/.cache/warpy`, folder `gemm/`: the program's SASS text and PTX, keyed
by the problem and a fingerprint of the kernel and compiler sources), and ptxas's own cache keeps
the cubin by PTX, so a fresh process skips the build and a repeated call costs one launch:
`warpy bench gemm --host-overhead` measures it.

A program's scratch memory (split-K / stream-K flags and workspaces, `.param NAME u64 scratch`) is
allocated by the loaded kernel's launcher, zero-filled, once per CUDA stream it runs on, and kept
for the process's life (docs/sass.md); `bind_gemm` is the one place the GEMM parameters are named.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Optional

import attrs
import numpy as np

from warpy.errors import WarpyError

IN_DTYPES = ("bf16", "fp16")
OUT_DTYPES = ("f32", "bf16", "fp16")
ELEM_BYTES = {"bf16": 2, "fp16": 2, "f32": 4}
_ALIASES = {
    "f32": "f32", "fp32": "f32", "float32": "f32", "float": "f32",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "f16": "fp16", "float16": "fp16", "half": "fp16",
}


def dtype_name(x: Any) -> str:
    """warpy's name ("f32", "bf16", "fp16") for a dtype given as a string, numpy or torch dtype."""
    if isinstance(x, type) and issubclass(x, np.generic):  # np.float32 and the like
        x = np.dtype(x)
    s = str(x)
    s = s.split(".", 1)[1] if s.startswith(("torch.", "cupy.", "numpy.")) else s
    name = _ALIASES.get(s.lower())
    if name is None:
        raise WarpyError(f"out_dtype {x!r} is not one of f32, bf16, fp16")
    return name


# ---------------------------------------------------------------------------------------------
# DLPack, read with ctypes


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):  # DLPack < 1.0: capsule "dltensor"
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):  # DLPack >= 1.0: capsule "dltensor_versioned"
    _fields_ = [
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

DL_CPU, DL_CUDA, DL_CUDA_HOST, DL_CUDA_MANAGED = 1, 2, 3, 13
DEVICE_TYPES = {1: "CPU", 2: "CUDA", 3: "CUDA host", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 10: "ROCm",
                11: "ROCm host", 13: "CUDA managed", 14: "oneAPI"}
_DL_CODES = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 5: "complex", 6: "bool"}
_DL_DTYPES = {(2, 16): "fp16", (2, 32): "f32", (4, 16): "bf16"}


@attrs.frozen
class DLPackView:
    """What a DLPack capsule describes: the data address (byte offset applied), shape, strides in
    elements (None: compact row-major), warpy's dtype name (or the DLPack one, e.g. "int32"), and
    the device."""

    ptr: int
    shape: tuple[int, ...]
    strides: Optional[tuple[int, ...]]
    dtype: str
    device_type: int
    device_id: int
    versioned: bool


def read_capsule(capsule: Any) -> DLPackView:
    """Decode a `dltensor` or `dltensor_versioned` capsule without consuming it (its destructor
    still frees it; the memory belongs to the tensor the caller holds)."""
    try:
        raw = _capsule_name(capsule)
    except (TypeError, ValueError):
        raise WarpyError(f"not a DLPack capsule: {type(capsule).__name__}") from None
    name = raw.decode() if raw else ""
    if name == "dltensor":
        t = _DLManagedTensor.from_address(_capsule_pointer(capsule, raw)).dl_tensor
        versioned = False
    elif name == "dltensor_versioned":
        mt = _DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, raw))
        if mt.version.major != 1:
            raise WarpyError(f"DLPack version {mt.version.major}.{mt.version.minor} is not supported (1.x is)")
        t = mt.dl_tensor
        versioned = True
    else:
        raise WarpyError(f"a DLPack capsule named {name!r} (already consumed?) cannot be read")
    nd = t.ndim
    shape = tuple(t.shape[i] for i in range(nd))
    strides = tuple(t.strides[i] for i in range(nd)) if t.strides else None
    dt = t.dtype
    if dt.lanes != 1:
        dtype = f"{_DL_CODES.get(dt.code, f'code{dt.code}')}{dt.bits}x{dt.lanes}"
    else:
        dtype = _DL_DTYPES.get((dt.code, dt.bits)) or f"{_DL_CODES.get(dt.code, f'code{dt.code}')}{dt.bits}"
    return DLPackView((t.data or 0) + t.byte_offset, shape, strides, dtype, t.device.device_type,
                      t.device.device_id, versioned)


# ---------------------------------------------------------------------------------------------
# Operands


@attrs.frozen
class Matrix:
    """A 2-D operand: address, shape, strides (elements), dtype, and where it lives.
    side: "host" (numpy), "device" (GPU memory); library: "numpy", "torch", "cupy" or "other"."""

    name: str
    ptr: int
    shape: tuple[int, int]
    strides: tuple[int, int]
    dtype: str
    side: str
    library: str
    obj: Any = attrs.field(eq=False, repr=False)

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * ELEM_BYTES.get(self.dtype, 1)


def _library(x: Any) -> str:
    mod = type(x).__module__.split(".", 1)[0]
    return mod if mod in ("torch", "cupy", "numpy") else "other"


def _numpy_dtype(dt: np.dtype) -> str:
    if dt == np.float16:
        return "fp16"
    if dt == np.float32:
        return "f32"
    if dt.name == "bfloat16":  # ml_dtypes
        return "bf16"
    return str(dt)


def current_stream(library: str, x: Any) -> Optional[int]:
    """The CUstream handle (an int) the library of tensor `x` is working on now; None: unknown."""
    if library == "torch":
        torch = sys.modules["torch"]
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:  # the handle itself: no Stream object built (a third of this call's time)
            return int(raw(x.device.index or 0))
        return int(torch.cuda.current_stream(x.device).cuda_stream)
    if library == "cupy":
        cupy = sys.modules["cupy"]
        return int(cupy.cuda.get_current_stream().ptr)
    return None


_TORCH_DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "f32"}


def as_matrix(x: Any, name: str, stream: Optional[int] = None) -> Matrix:
    """Describe operand `x` (numpy array, DLPack tensor, or `__cuda_array_interface__` object).
    `stream`: the CUstream the caller will use it on, handed to the producer so it can order its
    pending work before (the DLPack protocol); None: the caller uses the producer's own stream."""
    lib = _library(x)
    if isinstance(x, np.ndarray):
        if x.ndim != 2:
            raise WarpyError(f"{name} has {x.ndim} dimensions; give a matrix (2-D)")
        item = x.itemsize
        strides = (x.strides[0] // item, x.strides[1] // item)
        return Matrix(name, x.ctypes.data, (x.shape[0], x.shape[1]), strides, _numpy_dtype(x.dtype), "host", "numpy", x)
    if lib == "torch" and stream is None and getattr(getattr(x, "device", None), "type", None) == "cuda":
        # The common call, read straight off the tensor: the same facts DLPack would give, without
        # building and parsing a capsule (most of warpy.gemm's host time; H200, 2026-11-29). On the
        # tensor's own current stream no producer synchronisation is asked for either way.
        shape, strides = x.shape, x.stride()
        _need_matrix_on_gpu0(name, len(shape), x.device.index or 0)
        return Matrix(name, x.data_ptr(), (shape[0], shape[1]), (strides[0], strides[1]),
                      _TORCH_DTYPES.get(str(x.dtype), str(x.dtype)), "device", lib, x)
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        if lib == "torch" and x.requires_grad:  # torch will not export a tensor autograd tracks
            x = x.detach()
        dev_type, dev_id = x.__dlpack_device__()
        if int(dev_type) in (DL_CUDA, DL_CUDA_MANAGED):
            # -1: no synchronisation (we run on the producer's current stream); else the consumer's stream
            s = -1 if stream is None else (stream or 1)  # DLPack spells the legacy default stream 1
            view = read_capsule(x.__dlpack__(stream=s))
        else:
            view = read_capsule(x.__dlpack__())
        return _from_view(view, name, lib, x)
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_cai(cai, name, lib, x)
    raise WarpyError(f"{name} is a {type(x).__module__}.{type(x).__name__}: give a numpy array or a GPU tensor "
                     "(DLPack or __cuda_array_interface__)")


def _need_matrix_on_gpu0(name: str, ndim: int, device_id: int) -> None:
    if ndim != 2:
        raise WarpyError(f"{name} has {ndim} dimensions; give a matrix (2-D)")
    if device_id != 0:
        raise WarpyError(f"{name} is on GPU {device_id}; warpy runs on GPU 0")


def _from_view(v: DLPackView, name: str, lib: str, x: Any) -> Matrix:
    if v.device_type not in (DL_CUDA, DL_CUDA_MANAGED) and len(v.shape) == 2:
        where = DEVICE_TYPES.get(v.device_type, f"device type {v.device_type}")
        hint = " (move it to the GPU, or pass a numpy array)" if v.device_type in (DL_CPU, DL_CUDA_HOST) else ""
        raise WarpyError(f"{name} is in {where} memory, not on the GPU{hint}")
    _need_matrix_on_gpu0(name, len(v.shape), v.device_id)
    shape = (v.shape[0], v.shape[1])
    strides = v.strides if v.strides is not None else (v.shape[1], 1)
    return Matrix(name, v.ptr, shape, (strides[0], strides[1]), v.dtype, "device", lib, x)


# __cuda_array_interface__ has no bf16 type string; some producers write "bf16" (accepted as such)
_CAI_DTYPES = {"<f2": "fp16", "<f4": "f32", "bf16": "bf16", "<V2": "bf16"}


def _from_cai(cai: dict[str, Any], name: str, lib: str, x: Any) -> Matrix:
    shape = tuple(cai["shape"])
    if len(shape) != 2:
        raise WarpyError(f"{name} has {len(shape)} dimensions; give a matrix (2-D)")
    typestr = cai["typestr"]
    dtype = _CAI_DTYPES.get(typestr, typestr)
    item = int(typestr[2:]) if typestr[2:].isdigit() else 2 if dtype == "bf16" else 1
    st = cai.get("strides")
    strides = (shape[1], 1) if st is None else (st[0] // item, st[1] // item)
    ptr = int(cai["data"][0] or 0)
    return Matrix(name, ptr, (shape[0], shape[1]), (strides[0], strides[1]), dtype, "device", lib, x)


def check_row_major(m: Matrix) -> None:
    """Refuse a matrix whose rows are not contiguous and densely packed, or whose address TMA cannot take."""
    rows, cols = m.shape
    s0, s1 = m.strides
    if (cols > 1 and s1 != 1) or (rows > 1 and s0 != cols):
        hint = " (a transposed view? pass it .contiguous())" if s0 == 1 and cols > 1 else " (pass a contiguous copy)"
        raise WarpyError(f"{m.name}: strides {m.strides} (elements) are not row-major contiguous for shape "
                         f"{rows}x{cols}{hint}")
    if m.side == "device" and m.ptr % 16:
        raise WarpyError(f"{m.name}: address 0x{m.ptr:x} is not 16-byte aligned (TMA needs 16)")


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
        if m.dtype not in IN_DTYPES:
            raise WarpyError(f"{m.name} is {m.dtype}; inputs must be bf16 or fp16")
    if B.dtype != A.dtype:
        raise WarpyError(f"a is {A.dtype} but b is {B.dtype}: both inputs must have the same type")
    M, K = A.shape
    N, Kb = B.shape
    if Kb != K:
        raise WarpyError(f"a is {M}x{K} and b is {N}x{Kb}: C = A·Bᵀ needs b to be N x K with K = {K}")
    odt = None if out_dtype is None else dtype_name(out_dtype)
    O = None
    if out is not None:
        O = as_matrix(out, "out", stream)
        if O.side != A.side:
            raise WarpyError(f"out is {_where(O)} but the inputs are {_where(A)}")
        if O.shape != (M, N):
            raise WarpyError(f"out is {O.shape[0]}x{O.shape[1]}; C = A·Bᵀ is {M}x{N}")
        if O.dtype not in OUT_DTYPES:
            raise WarpyError(f"out is {O.dtype}; the output must be f32, bf16 or fp16")
        if odt is not None and O.dtype != odt:
            raise WarpyError(f"out is {O.dtype} but out_dtype is {odt}")
        odt = O.dtype
    for m in (A, B) + ((O,) if O is not None else ()):
        if m.side == "device":  # numpy operands are copied (made contiguous) on the way
            check_row_major(m)
    return GemmCall(M, N, K, A.dtype, odt or A.dtype, A, B, O)


def _where(m: Matrix) -> str:
    return "a numpy array" if m.side == "host" else f"a {m.library} GPU tensor" if m.library != "other" else "on the GPU"


# ---------------------------------------------------------------------------------------------
# Plans: program built, lifted, assembled; memory and disk caches


def programs() -> Any:
    """The GEMM family module (`warpy.kernels.gemm`: GemmProblem / choose / build)."""
    from warpy.kernels import gemm

    return gemm


@attrs.frozen
class GemmPlan:
    """One problem's kernel: the configuration's summary, the header (parameters, grid, block,
    shared memory, cluster), the named SASS text, the PTX and the cubin."""

    problem: Any
    describe: str
    header: Any  # warpy.isa.text.Header
    sass: str
    ptx: str
    cubin: Any  # warpy.lift.ptxas.Cubin
    from_disk: bool = attrs.field(eq=False)
    config: Any = attrs.field(default=None, eq=False)  # None when read back from disk
    program: Any = attrs.field(default=None, eq=False, repr=False)


def cache_root() -> Path:
    root = os.environ.get("WARPY_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "warpy"


_fingerprint: dict[str, str] = {}


def source_fingerprint() -> str:
    """sha256 over warpy's version and the sources a GEMM plan depends on (the kernels package,
    warpy.layout, warpy.isa, warpy.lift): an edit to any of them makes every disk entry a miss."""
    fp = _fingerprint.get("fp")
    if fp is None:
        import warpy

        here = Path(__file__).resolve().parent
        folders = [here / "layout", here / "isa", here / "lift"]
        mod = programs()
        folders.append(Path(mod.__file__).resolve().parent)
        h = hashlib.sha256(warpy.__version__.encode())
        for folder in folders:
            for f in sorted(folder.rglob("*.py")):
                h.update(str(f.relative_to(folder.parent)).encode() + b"\0")
                h.update(f.read_bytes())
        fp = _fingerprint["fp"] = h.hexdigest()
    return fp


def problem_key(problem: Any) -> str:
    fields = {f.name: getattr(problem, f.name) for f in attrs.fields(type(problem))}
    h = hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode())
    h.update(source_fingerprint().encode())
    return h.hexdigest()


def _disk_path(key: str) -> Path:
    return cache_root() / "gemm" / f"{key}.json"


def _disk_read(key: str) -> Optional[dict[str, str]]:
    try:
        entry = json.loads(_disk_path(key).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("describe", "sass", "ptx")):
        return None  # damaged: a miss, rewritten
    return entry


def _disk_write(key: str, entry: dict[str, str]) -> None:
    """Atomically (temp file + rename); an unwritable cache only costs speed."""
    path = _disk_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(entry, f)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError:
        pass


def _header_of(sass: str) -> Any:
    """The header of a SASS text, parsed from its header lines alone (fast for long programs)."""
    from warpy.isa.text import parse

    lines = []
    for ln in sass.splitlines():
        if not ln.startswith("."):
            break
        lines.append(ln)
    return parse("\n".join(lines) + "\n").header


Progress = Callable[[str], None]


def make_plan(problem: Any, *, use_disk: bool = True, progress: Optional[Progress] = None,
              keep_program: bool = False, config: Any = None) -> GemmPlan:
    """Plan `problem`: from the disk cache, or choose + build + lift; then assemble (ptxas's cache).
    ptxas warnings (wgmma serialisation, spills) do not fail here: they are on `plan.cubin.warnings`.
    `config`: this configuration instead of the rule's (not cached on disk)."""
    from warpy.lift.ptxas import FAILING_KINDS, assemble

    say = progress or (lambda _msg: None)
    key = problem_key(problem)
    use_disk = use_disk and config is None
    entry = _disk_read(key) if use_disk else None
    program = None
    if entry is None or keep_program or config is not None:
        from warpy.lift.lifter import lift

        mod = programs()
        config = config if config is not None else mod.choose(problem)
        say(f"building {config.describe()}")
        program = mod.build(problem, config)
        kernel = program.kernel()
        say("lifting to PTX")
        entry = {"describe": config.describe(), "sass": str(kernel), "ptx": lift(kernel, problem.arch)}
        from_disk = False
        if use_disk:
            _disk_write(key, entry)
    else:
        from_disk = True
    say("assembling with ptxas")
    cubin = assemble(entry["ptx"], problem.arch, allow=FAILING_KINDS)
    return GemmPlan(problem, entry["describe"], _header_of(entry["sass"]), entry["sass"], entry["ptx"], cubin,
                    from_disk, config, program)


# ---------------------------------------------------------------------------------------------
# Running


def bind_gemm(header: Any, a: Any, b: Any, c: Any, M: int, N: int, K: int, *,
              scratch: Optional[Any] = None, encode: Optional[Callable[..., Any]] = None) -> list[Any]:
    """A GEMM kernel's parameters, bound by the names warpy's GEMM programs use (the one place this
    convention lives; warpy.gemm, `warpy gemm` and `warpy bench gemm` all bind through it):

    - `a`, `b`, `c`: A, B and C's memory (tensor maps or pointers, as the header declares them);
    - maps declared `over` one of these (`c_add`, through which split-K / stream-K programs add
      partial sums into C; `c_tail`, a staged epilogue's last, narrower chunk) view its memory;
    - the scalars `M N K` (also `m n k`), where declared;
    - scratch memory (flags, workspaces: `.param NAME u64 scratch`) from `scratch`, the set of the
      stream the launch goes on (`ScratchPool.get(stream)`, `alloc_scratch`).

    Names the kernel does not declare are ignored (strict=False), except in `scratch`."""
    from warpy.runtime.bind import bind_params, encode_cached

    return bind_params(header, {"a": a, "b": b, "c": c},
                       {"M": M, "N": N, "K": K, "m": M, "n": N, "k": K},
                       scratch=scratch, strict=False, encode=encode or encode_cached)


class _Loaded:
    """A plan's cubin loaded on the GPU, with its fast launcher (which owns the kernel's scratch
    memory: one zero-filled set per stream, `launcher.scratch`)."""

    def __init__(self, plan: GemmPlan) -> None:
        from warpy import runtime as rt
        from warpy.runtime.bind import FastLaunch

        self.plan = plan
        self.module = rt.load(plan.cubin)
        self.kernel = self.module.kernel(plan.header.kernel)
        self.launcher = FastLaunch(self.kernel, plan.header)

    def params(self, a: Any, b: Any, c: Any, scratch: Any) -> list[Any]:
        """The parameters over A, B, C with `scratch`, the set of the stream launched on."""
        p = self.plan.problem
        return bind_gemm(self.plan.header, a, b, c, p.M, p.N, p.K, scratch=scratch)


class CudaBackend:
    """Plans per problem (memory, then disk), loads each cubin once, launches."""

    def __init__(self) -> None:
        self._plans: dict[tuple[int, int, int, str, str, str], GemmPlan] = {}
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

    def plan(self, key: tuple[int, int, int, str, str], arch: str) -> GemmPlan:
        full = key + (arch,)
        p = self._plans.get(full)
        if p is None:
            with self._lock:
                p = self._plans.get(full)
                if p is None:
                    M, N, K, dtype, out_dtype = key
                    problem = programs().GemmProblem(M, N, K, dtype=dtype, out_dtype=out_dtype, arch=arch)
                    p = self._plans[full] = make_plan(problem)
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

        ld = self.loaded(call.key)
        a = rt.to_device(call.a.obj)
        b = rt.to_device(call.b.obj)
        c = rt.alloc(call.M * call.N * ELEM_BYTES[call.out_dtype])
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


def host_dtype(name: str) -> np.dtype:
    if name == "f32":
        return np.dtype(np.float32)
    if name == "fp16":
        return np.dtype(np.float16)
    try:
        import ml_dtypes  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        raise WarpyError("a bf16 numpy result needs the ml_dtypes package; pass out_dtype='f32'") from None
    return np.dtype(ml_dtypes.bfloat16)  # type: ignore[no-any-return,unused-ignore]


_backend: Any = None


def backend() -> Any:
    global _backend
    if _backend is None:
        _backend = CudaBackend()
    return _backend


def _new_output(call: GemmCall, stream: Optional[int]) -> Any:
    """C for device inputs, allocated by the inputs' library on their device."""
    lib = call.a.library
    if lib == "torch":
        torch = sys.modules["torch"]
        tdt = {"f32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[call.out_dtype]
        return torch.empty((call.M, call.N), dtype=tdt, device=call.a.obj.device)
    if lib == "cupy":
        cupy = sys.modules["cupy"]
        if call.out_dtype == "bf16":
            raise WarpyError("cupy has no bf16 type: pass out= or out_dtype='f32'")
        return cupy.empty((call.M, call.N), dtype={"f32": "float32", "fp16": "float16"}[call.out_dtype])
    raise WarpyError(f"out=None allocates C with torch or cupy; for a {type(call.a.obj).__name__} input pass out=")


def gemm(a: Any, b: Any, out: Any = None, out_dtype: Any = None, *, stream: Optional[int] = None) -> Any:
    """C = A·Bᵀ. `a`: M×K, `b`: N×K, row-major, both bf16 or both fp16; `out`: M×N (f32/bf16/fp16).
    Device tensors run on their library's current stream (or `stream`, a CUstream handle) without
    waiting; numpy arrays are copied to the GPU and back. Returns `out`, or a new C."""
    # With no stream named, device operands are used on their library's current stream, so the
    # producer is asked for no synchronisation (-1); with one, the producer orders its pending work
    # before that stream (the DLPack stream argument).
    call = check_call(a, b, out, out_dtype, stream=stream)
    lib_stream = stream
    if stream is None and call.side == "device" and call.a.library in ("torch", "cupy"):
        lib_stream = current_stream(call.a.library, call.a.obj)
    be = backend()
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


__all__ = ["gemm", "bind_gemm", "check_call", "as_matrix", "read_capsule", "DLPackView", "Matrix", "GemmCall", "GemmPlan",
           "make_plan", "programs", "dtype_name", "backend"]
