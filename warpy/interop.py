"""Operands from other libraries: numpy arrays, and device tensors through DLPack (torch, cupy,
anything with `__dlpack__`; the capsule is read with ctypes) or `__cuda_array_interface__`.

`as_matrix` describes a 2-D operand (`Matrix`: address, shape, strides in elements, warpy's dtype
name, host or device, the library, the GPU it is on where the operand says); `current_stream` is
the CUstream a library works on now (per thread and per GPU, as torch and cupy keep it);
`byte_span` and `overlap` say which bytes an operand's elements occupy and how two operands' bytes
meet (strides of any sign, views of one storage). Element types come from the table in
`warpy.target`. Nothing here knows a kernel family or touches the driver.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any, Optional

import attrs
import numpy as np

from warpy.errors import WarpyError
from warpy.target import DTYPES, dtype_bytes, element_type, from_cai, from_dlpack


def dtype_name(x: Any) -> str:
    """warpy's canonical name (`warpy.target`: "fp32", "bf16", "fp16", ...) of a dtype given as a
    string (any accepted spelling), a numpy dtype or type, or a torch / cupy dtype."""
    if isinstance(x, type) and issubclass(x, np.generic):  # np.float32 and the like
        x = np.dtype(x)
    return element_type(str(x)).name


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
        known = from_dlpack(dt.code, dt.bits)
        dtype = known.name if known is not None else f"{_DL_CODES.get(dt.code, f'code{dt.code}')}{dt.bits}"
    return DLPackView((t.data or 0) + t.byte_offset, shape, strides, dtype, t.device.device_type,
                      t.device.device_id, versioned)


# ---------------------------------------------------------------------------------------------
# Operands


@attrs.define
class Matrix:
    """A 2-D operand: address, shape, strides (elements), dtype, and where it lives.
    side: "host" (numpy), "device" (GPU memory); library: "numpy", "torch", "cupy" or "other".
    Not changed once made (a new one is `attrs.evolve`d); not frozen, because attrs' frozen
    constructor costs about 1.5 µs more, and `warpy.gemm` makes three a call."""

    name: str
    ptr: int
    shape: tuple[int, int]
    strides: tuple[int, int]
    dtype: str
    side: str
    library: str
    obj: Any = attrs.field(eq=False, repr=False)
    device: Optional[int] = None  # the GPU's ordinal where the operand says (torch, DLPack); None: host or unknown

    @property
    def itemsize(self) -> int:
        return dtype_bytes(self.dtype) if self.dtype in DTYPES else 1

    @property
    def nbytes(self) -> int:
        """The bytes from the first element to the end of the last (strides not negative): the
        element count's for a dense matrix, more for rows with a pitch."""
        rows, cols = self.shape
        if rows <= 0 or cols <= 0:
            return 0
        s0, s1 = self.strides
        if s0 < 0 or s1 < 0:
            return rows * cols * self.itemsize
        return ((rows - 1) * s0 + (cols - 1) * s1 + 1) * self.itemsize

    @property
    def empty(self) -> bool:
        return self.shape[0] == 0 or self.shape[1] == 0


def _library(x: Any) -> str:
    mod = type(x).__module__.split(".", 1)[0]
    return mod if mod in ("torch", "cupy", "numpy") else "other"


def _numpy_dtype(dt: np.dtype) -> str:
    """warpy's name of a numpy dtype (ml_dtypes' bfloat16 included), or numpy's own for others."""
    try:
        return element_type(dt.name).name
    except WarpyError:
        return str(dt)


def current_stream(library: str, x: Any) -> Optional[int]:
    """The CUstream handle (an int) the library of tensor `x` is working on now, on the calling
    thread and on `x`'s GPU; None: unknown."""
    if library == "torch":
        torch = sys.modules["torch"]
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:  # the handle itself: no Stream object built (a third of this call's time)
            return int(raw(x.device.index or 0))
        return int(torch.cuda.current_stream(x.device).cuda_stream)
    if library == "cupy":
        cupy = sys.modules["cupy"]
        dev = getattr(x, "device", None)
        if dev is not None and getattr(dev, "id", None) not in (None, cupy.cuda.runtime.getDevice()):
            with dev:  # cupy keeps a current stream per GPU: the one of x's
                return int(cupy.cuda.get_current_stream().ptr)
        return int(cupy.cuda.get_current_stream().ptr)
    return None


_TORCH_DTYPES: dict[Any, str] = {}  # torch dtype object -> warpy's name (or torch's, for others)


def _torch_dtype(dt: Any) -> str:
    name = _TORCH_DTYPES.get(dt)
    if name is None:
        s = str(dt)
        try:
            name = element_type(s).name
        except WarpyError:
            name = s
        _TORCH_DTYPES[dt] = name
    return name


def as_vector(x: Any, name: str, stream: Optional[int] = None) -> Matrix:
    """Describe a 1-D operand (a bias) as an n×1 Matrix whose first stride is the vector's; anything
    else is refused in one line (as `as_matrix`, the same sources)."""
    return _vector_of(x, name, stream)


def as_transposed(x: Any, name: str, stream: Optional[int] = None) -> Matrix:
    """Describe xᵀ of a 2-D operand `x`, a view: shape and strides swapped (a numpy operand's object
    is x.T, what a copy to the GPU reads). `warpy.mm`'s B (K×N) is read as this N×K matrix."""
    if type(x).__module__.split(".", 1)[0] == "torch" and stream is None and \
            getattr(getattr(x, "device", None), "type", None) == "cuda":
        shape, strides = x.shape, x.stride()  # the common call (warpy.mm's w.t()), built once
        if len(shape) != 2:
            raise WarpyError(f"{name} has {len(shape)} dimensions; give a matrix (2-D)")
        return Matrix(name, x.data_ptr(), (shape[1], shape[0]), (strides[1], strides[0]),
                      _torch_dtype(x.dtype), "device", "torch", x, x.device.index or 0)
    m = as_matrix(x, name, stream)
    obj = m.obj.T if m.side == "host" else m.obj
    return attrs.evolve(m, shape=(m.shape[1], m.shape[0]), strides=(m.strides[1], m.strides[0]), obj=obj)


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
        if len(shape) != 2:
            raise WarpyError(f"{name} has {len(shape)} dimensions; give a matrix (2-D)")
        return Matrix(name, x.data_ptr(), (shape[0], shape[1]), (strides[0], strides[1]),
                      _torch_dtype(x.dtype), "device", lib, x, x.device.index or 0)
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


def _vector_of(x: Any, name: str, stream: Optional[int]) -> Matrix:
    def refuse(nd: int) -> WarpyError:
        return WarpyError(f"{name} has {nd} dimensions; give a vector (1-D)")

    if isinstance(x, np.ndarray):
        if x.ndim != 1:
            raise refuse(x.ndim)
        return as_matrix(x.reshape(-1, 1), name, stream)
    cai = None if hasattr(x, "__dlpack__") else getattr(x, "__cuda_array_interface__", None)
    if cai is not None:
        nd = len(tuple(cai["shape"]))
        if nd != 1:
            raise refuse(nd)
        st = cai.get("strides")
        return as_matrix(_CAI2(cai, None if st is None else (st[0], st[0])), name, stream)
    dims = getattr(x, "shape", None)
    if dims is None or not hasattr(x, "reshape"):
        return as_matrix(x, name, stream)  # refused there, in its words
    if len(tuple(dims)) != 1:
        raise refuse(len(tuple(dims)))
    return as_matrix(x.reshape(-1, 1), name, stream)


class _CAI2:
    """A 1-D `__cuda_array_interface__` vector seen as an n×1 matrix."""

    def __init__(self, cai: dict[str, Any], strides: Optional[tuple[int, int]]) -> None:
        self.__cuda_array_interface__ = dict(cai, shape=(cai["shape"][0], 1), strides=strides)


def _from_view(v: DLPackView, name: str, lib: str, x: Any) -> Matrix:
    if v.device_type not in (DL_CUDA, DL_CUDA_MANAGED) and len(v.shape) == 2:
        where = DEVICE_TYPES.get(v.device_type, f"device type {v.device_type}")
        hint = " (move it to the GPU, or pass a numpy array)" if v.device_type in (DL_CPU, DL_CUDA_HOST) else ""
        raise WarpyError(f"{name} is in {where} memory, not on the GPU{hint}")
    if len(v.shape) != 2:
        raise WarpyError(f"{name} has {len(v.shape)} dimensions; give a matrix (2-D)")
    shape = (v.shape[0], v.shape[1])
    strides = v.strides if v.strides is not None else (v.shape[1], 1)
    # managed memory is reachable from every GPU: its device id says where it was made, no more
    dev = v.device_id if v.device_type == DL_CUDA else None
    return Matrix(name, v.ptr, shape, (strides[0], strides[1]), v.dtype, "device", lib, x, dev)


def _from_cai(cai: dict[str, Any], name: str, lib: str, x: Any) -> Matrix:
    shape = tuple(cai["shape"])
    if len(shape) != 2:
        raise WarpyError(f"{name} has {len(shape)} dimensions; give a matrix (2-D)")
    typestr = cai["typestr"]
    known = from_cai(typestr)
    dtype = known.name if known is not None else typestr
    item = int(typestr[2:]) if typestr[2:].isdigit() else 2 if dtype == "bf16" else 1
    st = cai.get("strides")
    strides = (shape[1], 1) if st is None else (st[0] // item, st[1] // item)
    ptr = int(cai["data"][0] or 0)
    return Matrix(name, ptr, (shape[0], shape[1]), (strides[0], strides[1]), dtype, "device", lib, x)


# ---------------------------------------------------------------------------------------------
# Which bytes an operand occupies, and how two operands' bytes meet


def byte_span(m: Matrix) -> tuple[int, int]:
    """[first, last + 1) of the bytes `m`'s elements occupy, strides of either sign included;
    an empty span (start == end) for a matrix without elements."""
    rows, cols = m.shape
    if rows <= 0 or cols <= 0:
        return (m.ptr, m.ptr)
    e = m.itemsize
    lo = hi = m.ptr
    for n, s in ((rows, m.strides[0]), (cols, m.strides[1])):
        d = (n - 1) * s * e
        if d < 0:
            lo += d
        else:
            hi += d
    return (lo, hi + e)


# (start, count, step, length): `count` byte ranges [start + k step, start + k step + length), step >= 0
Segments = tuple[int, int, int, int]


def segments(m: Matrix) -> Optional[Segments]:
    """`m`'s bytes as one family of equally spaced, equally long ranges (a row-major matrix: its rows,
    merged into one range where they touch; a column-major one: its columns), or None where no axis
    is contiguous (every element apart: no family this simple says it exactly)."""
    rows, cols = m.shape
    if rows <= 0 or cols <= 0:
        return (m.ptr, 0, 0, 0)
    e = m.itemsize
    lo, _ = byte_span(m)
    dims = [(n, abs(s)) for n, s in ((rows, m.strides[0]), (cols, m.strides[1])) if n > 1]
    if not dims:
        return (lo, 1, 0, e)
    if len(dims) == 1:
        (n, s), = dims
        return _merged(lo, 1, 0, n * e) if s == 1 else _merged(lo, n, s * e, e)
    (n0, s0), (n1, s1) = dims
    if s1 == 1:
        return _merged(lo, n0, s0 * e, n1 * e)
    if s0 == 1:
        return _merged(lo, n1, s1 * e, n0 * e)
    return None


def _merged(start: int, count: int, step: int, length: int) -> Segments:
    """A family whose ranges touch or overlap one another is one range."""
    if count > 1 and step <= length:
        return (start, 1, 0, (count - 1) * step + length)
    return (start, count, step, length)


_MEET_LIMIT = 1 << 20  # ranges compared one by one before `families_meet` answers "may" (True)


def families_meet(f: Segments, g: Segments) -> bool:
    """Whether a range of family `f` shares a byte with a range of family `g` (exact; True without
    deciding past `_MEET_LIMIT` ranges: the safe answer for a caller refusing overlap)."""
    if f[1] > g[1]:
        f, g = g, f
    a1, n1, st1, l1 = f
    a2, n2, st2, l2 = g
    if n1 == 0 or n2 == 0 or l1 == 0 or l2 == 0:
        return False
    if n1 > _MEET_LIMIT:
        return True
    for k1 in range(n1):
        x = a1 + k1 * st1  # this range is [x, x + l1); the first of g's ending after x:
        k2 = 0 if st2 == 0 else max(0, (x - l2 - a2) // st2 + 1)
        if k2 < n2 and a2 + k2 * st2 + l2 > x and a2 + k2 * st2 < x + l1:
            return True
    return False


def overlap(x: Matrix, y: Matrix) -> Optional[str]:
    """How the bytes of `x` and `y` meet: None when they share none; else "equal" (the same span of
    bytes), "inside" (x's span within y's), "contains" (y's within x's) or "partial". Exact where
    each operand's bytes are one family of ranges (`segments`: any matrix with a contiguous axis, so
    two disjoint slices of one storage, rows or columns, share none); otherwise by spans (may
    answer overlap for interleaved elements that share no byte)."""
    xl, xh = byte_span(x)
    yl, yh = byte_span(y)
    if xl == xh or yl == yh or xh <= yl or yh <= xl:
        return None
    fx, fy = segments(x), segments(y)
    if fx is not None and fy is not None and not families_meet(fx, fy):
        return None
    if (xl, xh) == (yl, yh):
        return "equal"
    if yl <= xl and xh <= yh:
        return "inside"
    if xl <= yl and yh <= xh:
        return "contains"
    return "partial"


def overlap_error(out: Matrix, x: Matrix, how: str) -> WarpyError:
    """The one-line refusal of an output whose bytes meet input `x`'s (`how`: `overlap`'s answer)."""
    xl, xh = byte_span(x)
    ol, oh = byte_span(out)
    where = f"{out.name}: bytes 0x{ol:x}-0x{oh:x}, {x.name}: 0x{xl:x}-0x{xh:x}"
    what = {"equal": f"{out.name} is {x.name}'s memory (the same {oh - ol} bytes at 0x{ol:x})",
            "inside": f"{out.name} lies inside {x.name} ({where})",
            "contains": f"{x.name} lies inside {out.name} ({where})",
            "partial": f"{out.name} partly overlaps {x.name} ({where})"}[how]
    return WarpyError(f"{what}: the result cannot be written over an input it reads; give "
                      f"{out.name} memory of its own")


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


def check_rows(m: Matrix) -> None:
    """Refuse a matrix whose rows TMA cannot read or write: the rows must be contiguous (the second
    stride 1), not overlapping (the first stride at least the row), 16 bytes apart times a whole
    number, and start 16-byte aligned. Rows with a pitch (a slice `x[:, :k]` of a wider matrix) are
    fine."""
    rows, cols = m.shape
    s0, s1 = m.strides
    if (cols > 1 and s1 != 1) or (rows > 1 and s0 < cols):
        hint = " (a transposed view? pass it .contiguous())" if s0 == 1 and cols > 1 else " (pass a contiguous copy)"
        raise WarpyError(f"{m.name}: strides {m.strides} (elements) are not row-major for shape {rows}x{cols}{hint}")
    if rows > 1 and s0 != cols and (s0 * m.itemsize) % 16:
        raise WarpyError(f"{m.name}: rows {s0 * m.itemsize} bytes apart (strides {m.strides}, elements); TMA needs a "
                         f"multiple of 16 (pass a contiguous copy)")
    if m.side == "device" and m.ptr % 16:
        raise WarpyError(f"{m.name}: address 0x{m.ptr:x} is not 16-byte aligned (TMA needs 16)")


def host_dtype(name: str) -> np.dtype:
    """The numpy dtype that holds values of warpy's type `name` on the host (bf16: ml_dtypes')."""
    d = element_type(name)
    if d.numpy:
        return np.dtype(d.numpy)
    if d.name != "bf16":
        raise WarpyError(f"numpy has no type for {d.name}")
    try:
        import ml_dtypes  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        raise WarpyError("a bf16 numpy result needs the ml_dtypes package; pass out_dtype='fp32'") from None
    return np.dtype(ml_dtypes.bfloat16)  # type: ignore[no-any-return,unused-ignore]


__all__ = ["DLPackView", "Matrix", "as_matrix", "as_transposed", "as_vector", "byte_span", "check_row_major", "check_rows", "current_stream", "dtype_name",
           "families_meet", "host_dtype", "overlap", "overlap_error", "read_capsule", "segments"]
