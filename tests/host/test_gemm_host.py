"""warpy.gemm without a GPU: operand description (numpy, DLPack capsules read with ctypes,
__cuda_array_interface__), argument checking and its one-line errors, the flow into a fake backend,
binding by header names, the plan caches, and the lazy `warpy.gemm`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import warpy.matmul as mm
import warpy.interop as interop
import warpy.plan as plan
from warpy.kernels import gemm as gemm_family
from warpy.kernels.gemm import FAMILY as GEMM
from warpy.errors import WarpyError
from warpy.isa.text import parse
from warpy.runtime.bind import DeviceSpan, bind_params, tmap_extent_bytes
from warpy.runtime.tensormap import TensorMap

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------
# DLPack capsules (numpy's __dlpack__ gives CPU capsules, legacy and versioned)


@pytest.mark.parametrize("versioned", [False, True])
@pytest.mark.parametrize("dtype,name", [(np.float16, "fp16"), (np.float32, "fp32"), (np.int32, "s32"),
                                        (np.uint8, "u8"), (np.float64, "fp64"), (np.int8, "int8")])
def test_capsule_decodes_shape_strides_dtype(versioned: bool, dtype: Any, name: str) -> None:
    a = np.zeros((3, 5), dtype=dtype)
    cap = a.__dlpack__(max_version=(1, 0)) if versioned else a.__dlpack__()
    v = interop.read_capsule(cap)
    assert v.versioned is versioned
    assert v.shape == (3, 5)
    assert v.strides in (None, (5, 1))
    assert v.dtype == name
    assert v.ptr == a.ctypes.data
    assert (v.device_type, v.device_id) == (interop.DL_CPU, 0)


def test_capsule_of_a_transposed_and_offset_view() -> None:
    base = np.zeros((6, 8), dtype=np.float16)
    t = base.T  # 8x6, strides (1, 8) in elements
    v = interop.read_capsule(t.__dlpack__())
    assert v.shape == (8, 6) and v.strides == (1, 8)
    sub = base[2:, 3:]  # data pointer moved (numpy puts it in data or in byte_offset: both count)
    v = interop.read_capsule(sub.__dlpack__())
    assert v.ptr == base.ctypes.data + (2 * 8 + 3) * 2
    assert v.shape == (4, 5) and v.strides == (8, 1)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 7), min_size=1, max_size=4))
def test_capsule_shape_any_rank(shape: list[int]) -> None:
    a = np.ones(shape, dtype=np.float32)
    v = interop.read_capsule(a.__dlpack__())
    assert v.shape == tuple(shape)
    assert v.strides is None or v.strides == tuple(s // 4 for s in a.strides)


def test_not_a_capsule_and_a_consumed_capsule() -> None:
    with pytest.raises(WarpyError, match="not a DLPack capsule"):
        interop.read_capsule(object())
    import ctypes

    cap = np.zeros(4, np.float32).__dlpack__()
    set_name = ctypes.pythonapi.PyCapsule_SetName
    set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]
    keep = ctypes.c_char_p(b"used_dltensor")
    set_name(cap, keep)
    try:
        with pytest.raises(WarpyError, match="already consumed"):
            interop.read_capsule(cap)
    finally:
        set_name(cap, b"dltensor")  # give it back its name so its destructor frees it


class FakeDLPack:
    """A tensor that offers a numpy capsule but claims a device (as a confused producer might)."""

    def __init__(self, a: np.ndarray, device: tuple[int, int]) -> None:
        self.a, self.device = a, device
        self.streams: list[Any] = []

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device

    def __dlpack__(self, stream: Any = None) -> Any:
        self.streams.append(stream)
        return self.a.__dlpack__()


def test_cpu_memory_is_refused_where_the_gpu_is_needed() -> None:
    a = np.zeros((4, 8), np.float16)
    with pytest.raises(WarpyError, match=r"^a is in CPU memory, not on the GPU \(move it to the GPU"):
        interop.as_matrix(FakeDLPack(a, (1, 0)), "a")
    # the producer says CUDA but the capsule says CPU: the capsule wins; the stream was handed over
    f = FakeDLPack(a, (2, 0))
    with pytest.raises(WarpyError, match="^b is in CPU memory"):
        interop.as_matrix(f, "b", stream=7)
    assert f.streams == [7]
    f = FakeDLPack(a, (2, 0))
    with pytest.raises(WarpyError):
        interop.as_matrix(f, "b")
    assert f.streams == [-1]  # no stream named: no synchronisation asked for


def test_other_device_types_are_named() -> None:
    v = interop.DLPackView(0x1000, (2, 8), None, "fp16", 10, 0, False)
    with pytest.raises(WarpyError, match="^a is in ROCm memory, not on the GPU$"):
        interop._from_view(v, "a", "other", None)
    v = interop.DLPackView(0x1000, (2, 8), None, "fp16", interop.DL_CUDA, 1, False)
    assert interop._from_view(v, "a", "other", None).device == 1  # GPU 1: run there (docs/gemm-python.md)
    v = interop.DLPackView(0x1000, (2, 8), None, "fp16", interop.DL_CUDA_MANAGED, 1, False)
    assert interop._from_view(v, "a", "other", None).device is None  # managed: reachable from any GPU
    v = interop.DLPackView(0x1000, (2, 8), None, "fp16", interop.DL_CUDA, 0, False)
    m = interop._from_view(v, "a", "other", None)
    assert m.strides == (8, 1) and m.side == "device" and m.device == 0


# ---------------------------------------------------------------------------------------------
# Device operands through __cuda_array_interface__, and a fake backend


class CAI:
    def __init__(self, shape: tuple[int, ...], typestr: str = "<f2", ptr: int = 0x7F0000000000,
                 strides: Optional[tuple[int, ...]] = None) -> None:
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False),
                                         "strides": strides, "version": 3}


class FakeBackend:
    def __init__(self) -> None:
        self.host_calls: list[mm.GemmCall] = []
        self.launches: list[tuple[mm.GemmCall, interop.Matrix, Any]] = []

    def run_host(self, call: mm.GemmCall) -> np.ndarray:
        self.host_calls.append(call)
        a = np.asarray(call.a.obj, dtype=np.float64)
        b = np.asarray(call.b.obj, dtype=np.float64)
        return (a @ b.T).astype(np.float32 if call.out_dtype == "fp32" else np.float16)

    def launch(self, call: mm.GemmCall, out: interop.Matrix, stream: Any) -> None:
        self.launches.append((call, out, stream))


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeBackend:
    be = FakeBackend()
    monkeypatch.setattr(mm, "_launches", be)
    return be


def test_numpy_in_numpy_out(fake: FakeBackend) -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(-3, 4, (5, 16)).astype(np.float16)
    b = rng.integers(-3, 4, (7, 16)).astype(np.float16)
    c = mm.gemm(a, b, out_dtype="float32")
    assert c.shape == (5, 7) and c.dtype == np.float32
    assert np.array_equal(c, a.astype(np.float64) @ b.astype(np.float64).T)
    call = fake.host_calls[-1]
    assert (call.M, call.N, call.K, call.dtype, call.out_dtype) == (5, 7, 16, "fp16", "fp32")
    out = np.zeros((5, 7), np.float16)
    assert mm.gemm(a, b, out=out) is out and fake.host_calls[-1].out_dtype == "fp16"
    assert np.array_equal(out, c)
    # a transposed numpy view is copied on the way (only device operands must be row-major)
    mm.gemm(np.ascontiguousarray(a.T).T, b)


@pytest.mark.parametrize("args,message", [
    ((np.zeros((4, 16), np.float32), np.zeros((4, 16), np.float16)), "^a is fp32; inputs must be bf16 or fp16$"),
    ((np.zeros((4, 16), np.float16), np.zeros((4, 16), np.int8)), "^b is int8; inputs must be bf16 or fp16$"),
    ((np.zeros(16, np.float16), np.zeros((4, 16), np.float16)), "^a has 1 dimensions; give a matrix"),
    ((np.zeros((4, 16), np.float16), np.zeros((4, 8), np.float16)),
     r"^a is 4x16 and b is 4x8: C = A·Bᵀ needs b to be N x K with K = 16$"),
    (([[1.0]], np.zeros((4, 8), np.float16)), "^a is a builtins.list: give a numpy array or a GPU tensor"),
])
def test_argument_errors(fake: FakeBackend, args: tuple[Any, Any], message: str) -> None:
    with pytest.raises(WarpyError, match=message):
        mm.gemm(*args)
    assert not fake.host_calls and not fake.launches


def test_out_errors(fake: FakeBackend) -> None:
    a, b = np.zeros((4, 16), np.float16), np.zeros((6, 16), np.float16)
    with pytest.raises(WarpyError, match="^out is 6x4; C = A·Bᵀ is 4x6$"):
        mm.gemm(a, b, out=np.zeros((6, 4), np.float32))
    with pytest.raises(WarpyError, match="^out is fp16 but out_dtype is fp32$"):
        mm.gemm(a, b, out=np.zeros((4, 6), np.float16), out_dtype="f32")
    with pytest.raises(WarpyError, match="^out is s32; the output must be fp32, bf16, fp16$"):
        mm.gemm(a, b, out=np.zeros((4, 6), np.int32))
    with pytest.raises(WarpyError, match="^out_dtype 'f64' is not one of fp32, bf16, fp16$"):
        mm.gemm(a, b, out_dtype="f64")
    with pytest.raises(WarpyError, match="^a is a numpy array but b is on the GPU"):
        mm.gemm(a, CAI((6, 16)))
    with pytest.raises(WarpyError, match="^a is fp32; inputs must be bf16 or fp16$"):
        mm.gemm(CAI((4, 16), "<f4"), CAI((6, 16), "<f4"))
    with pytest.raises(WarpyError, match="^a is fp16 but b is bf16: both inputs must have the same type$"):
        mm.gemm(CAI((4, 16)), CAI((6, 16), "bf16"))
    assert not fake.host_calls and not fake.launches


def test_device_strides_alignment_and_outputs(fake: FakeBackend) -> None:
    a, b = CAI((64, 128)), CAI((32, 128), ptr=0x7F0000100000)
    # a transposed view is read in place, MN-major (issue 19), unless its rows of K overlap
    mm.gemm(a, CAI((32, 128), strides=(2, 64)), out=CAI((64, 32), "<f4", ptr=0x7F0000200000))
    assert fake.launches[-1][0].majors == ("major", "K", "MN")
    with pytest.raises(WarpyError, match=r"^b: strides \(1, 16\) \(elements\) are not row-major for "
                                         r"shape 32x128 \(a transposed view\? pass it \.contiguous\(\)\)$"):
        mm.gemm(a, CAI((32, 128), strides=(2, 32)))
    with pytest.raises(WarpyError, match=r"^a: rows 260 bytes apart \(strides \(130, 1\), elements\); TMA needs a "
                                         r"multiple of 16 \(pass a contiguous copy\)$"):
        mm.gemm(CAI((64, 128), strides=(260, 2)), b)
    with pytest.raises(WarpyError, match=r"^a: strides \(64, 1\) \(elements\) are not row-major for shape 64x128"):
        mm.gemm(CAI((64, 128), strides=(128, 2)), b)  # rows overlapping
    with pytest.raises(WarpyError, match="^a: address 0x7f0000000008 is not 16-byte aligned"):
        mm.gemm(CAI((64, 128), ptr=0x7F0000000008), b)
    with pytest.raises(WarpyError, match="^out=None allocates C with torch or cupy; for a CAI input pass out=$"):
        mm.gemm(a, b)
    out = CAI((64, 32), "<f4", ptr=0x7F0000200000)
    assert mm.gemm(a, b, out=out) is out
    call, o, stream = fake.launches[-1]
    assert (call.M, call.N, call.K, call.dtype, call.out_dtype) == (64, 32, 128, "fp16", "fp32")
    assert o.ptr == 0x7F0000200000 and o.nbytes == 64 * 32 * 4 and stream is None
    mm.gemm(a, b, out=out, stream=5)
    assert fake.launches[-1][2] == 5
    # a single row or column: its other stride does not matter
    mm.gemm(CAI((1, 128), strides=(0, 2)), b, out=CAI((1, 32), "<f4", ptr=0x7F0000200000, strides=(4, 4)))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 9), st.integers(-3, 3), st.integers(-3, 3))
def test_row_major_rule(rows: int, cols: int, d0: int, d1: int) -> None:
    s0, s1 = cols + d0, 1 + d1
    m = interop.Matrix("x", 0, (rows, cols), (s0, s1), "fp16", "device", "other", None)
    dense = (cols == 1 or s1 == 1) and (rows == 1 or s0 == cols)
    if dense:
        interop.check_row_major(m)
    else:
        with pytest.raises(WarpyError, match="^x: strides"):
            interop.check_row_major(m)


def test_dtype_names() -> None:
    assert [interop.dtype_name(x) for x in ("f32", "fp32", "float32", "bf16", "bfloat16", "fp16", "half")] == \
        ["fp32", "fp32", "fp32", "bf16", "bf16", "fp16", "fp16"]
    assert interop.dtype_name(np.float32) == interop.dtype_name(np.dtype(np.float32)) == "fp32"
    assert interop.dtype_name(np.dtype(np.float16)) == "fp16"
    assert interop.dtype_name("torch.bfloat16") == "bf16"


# ---------------------------------------------------------------------------------------------
# Binding by header names

HEADER = parse(
    ".kernel g\n.sm sm_90a\n.threads 384\n.dynsmem 1024\n.grid 132 1 1\n.cluster 2 1 1\n.mbarriers 0\n"
    ".tmap a dtype=bf16 dims=64,256 strides=128 box=64,128 swizzle=128\n"
    ".tmap b dtype=bf16 dims=64,96 strides=128 box=64,96 swizzle=128\n"
    ".param c u64\n.param M u32\n.param flag u16\n.param off s64\n.param alpha f32\n"
).header


def _encode(box: Any, address: int) -> TensorMap:
    return TensorMap(bytes(128), box, address)


def test_bind_by_name_in_header_order() -> None:
    ps = bind_params(HEADER, {"c": DeviceSpan(0x3000, 4), "b": 0x2000, "a": DeviceSpan(0x1000, 256 * 128)},
                     {"M": 7, "flag": 3, "off": -2, "alpha": 0.5, "unused": 1}, strict=False, encode=_encode)
    assert [type(p).__name__ for p in ps] == ["TensorMap", "TensorMap", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar"]
    assert (ps[0].address, ps[1].address) == (0x1000, 0x2000)
    assert ps[0].box == HEADER.tmap("a")
    assert [(p.kind, p.value) for p in ps[2:]] == [("u64", 0x3000), ("u32", 7), ("u32", 3),
                                                   ("u64", (1 << 64) - 2), ("f32", 0.5)]


def test_bind_errors() -> None:
    full = {"a": 0x1000, "b": 0x2000, "c": 0x3000}
    sc = {"M": 1, "flag": 0, "off": 0, "alpha": 1.0}
    with pytest.raises(WarpyError, match=r"^kernel g: nothing given for tensor map 'b' \(given: a\)$"):
        bind_params(HEADER, {"a": 0x1000}, encode=_encode)
    with pytest.raises(WarpyError, match=r"^kernel g: nothing given for u32 scalar 'M'"):
        bind_params(HEADER, full, {}, encode=_encode)
    with pytest.raises(WarpyError, match=r"^kernel g has no parameter 'z' \(parameters: a, b, c, M, flag, off, alpha\)$"):
        bind_params(HEADER, full, {**sc, "z": 1}, encode=_encode)
    with pytest.raises(WarpyError, match=r"^kernel g: tensor map 'a' spans 32768 bytes \(dims \(64, 256\)\), but the memory given holds 32767$"):
        bind_params(HEADER, {**full, "a": DeviceSpan(0x1000, 32767)}, sc, encode=_encode)
    with pytest.raises(WarpyError, match=r"^parameter 'flag' \(u16\): 65536 does not fit 16 bits$"):
        bind_params(HEADER, full, {**sc, "flag": 65536}, encode=_encode)
    with pytest.raises(WarpyError, match=r"^parameter 'M' \(u32\): 1.5 is not an integer$"):
        bind_params(HEADER, full, {**sc, "M": 1.5}, encode=_encode)


def test_tmap_extent_is_the_last_byte() -> None:
    box = HEADER.tmap("a")  # 256 rows of 64 bf16 at a 128-byte pitch
    assert tmap_extent_bytes(box) == 255 * 128 + 64 * 2


# ---------------------------------------------------------------------------------------------
# Plans: memory and disk caches (the real programs)


def test_plan_disk_cache_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prog = gemm_family
    monkeypatch.setattr(plan, "cache_root", lambda: tmp_path)
    problem = prog.GemmProblem(256, 256, 64, dtype="bf16", out_dtype="f32")
    first = plan.make_plan(GEMM, problem)
    assert not first.from_disk and first.config is not None
    entries = list((tmp_path / "gemm").glob("*.json"))
    assert len(entries) == 1
    again = plan.make_plan(GEMM, problem)
    assert again.from_disk and again.config is None
    assert (again.header, again.ptx, again.sass, again.describe) == (first.header, first.ptx, first.sass, first.describe)
    assert {n for n, _ in again.header.kernel_params()} >= {"a", "b"}
    entries[0].write_text("{not json")  # damaged: a miss, rewritten
    assert not plan.make_plan(GEMM, problem).from_disk
    assert plan.make_plan(GEMM, problem).from_disk
    other = prog.GemmProblem(256, 256, 64, dtype="bf16", out_dtype="bf16")
    assert plan.problem_key(other) != plan.problem_key(problem)


def test_header_of_reads_only_the_header() -> None:
    text = str(HEADER.lines() and "\n".join(HEADER.lines())) + "\n  EXIT\n"
    assert plan._header_of(text) == HEADER


# ---------------------------------------------------------------------------------------------
# warpy.gemm is lazy


def test_import_warpy_layout_stays_free_and_gemm_is_lazy() -> None:
    code = ("import sys, warpy, warpy.layout\n"
            "bad = sorted(m for m in sys.modules if m.startswith(('numpy', 'cuda', 'torch', 'warpy.matmul', 'warpy.runtime')))\n"
            "print(bad)\n"
            "g = warpy.gemm\n"
            "print(g.__module__, 'warpy.matmul' in sys.modules, 'torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[]", "warpy.matmul True False"]
    with pytest.raises(AttributeError, match="no attribute 'gem'"):
        import warpy

        warpy.gem  # noqa: B018
