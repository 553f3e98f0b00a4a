"""warpy.mm and warpy.bmm without a GPU (issue 19): torch.mm / torch.bmm operands (b is K×N),
read in place where K is contiguous, one-line refusals of the layouts the kernel does not read,
batches, and a CUDA-graph capture of chained calls against the fake driver (nothing but the context
query and the launches while capturing).

The GPU half is tests/gpu/test_gemm_layouts_gpu.py."""

from __future__ import annotations

import threading
from typing import Any, Optional

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import warpy
import warpy.matmul as mm
import warpy.runtime.bind as bind
import warpy.runtime.driver as drv
import warpy.runtime.tensormap as tm
from warpy.errors import WarpyError
from warpy.kernels.gemm_epilogue import Epilogue
from fake_cuda_driver import fake_driver, install, launch_args
from test_gemm_host import CAI, FakeBackend
from test_real_programs import ARGS_HEADER_S, BASE, TorchLike, _fake_torch, fake_plan


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeBackend:
    be = FakeBackend()
    monkeypatch.setattr(mm, "_launches", be)
    return be


def _ints(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-3, 4, shape).astype(np.float16)


# ---------------------------------------------------------------------------------------------
# mm: C = A·B


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 9), st.integers(1, 9), st.sampled_from([8, 16, 24]), st.booleans(), st.integers(0, 2 ** 32 - 1))
def test_mm_numpy_is_a_times_b(M: int, N: int, K: int, b_view: bool, seed: int) -> None:
    """numpy operands in any layout (copied on the way): mm(a, b) is a @ b, the call gemm's with Bᵀ."""
    be = FakeBackend()
    old = mm._launches
    mm._launches = be
    try:
        rng = np.random.default_rng(seed)
        a = _ints(rng, (M, K))
        b = _ints(rng, (K, N)) if not b_view else np.ascontiguousarray(_ints(rng, (N, K))).T
        c = mm.mm(a, b, out_dtype="fp32")
        assert c.shape == (M, N) and np.array_equal(c, a.astype(np.float64) @ b.astype(np.float64))
        call = be.host_calls[-1]
        assert (call.M, call.N, call.K) == (M, N, K) and call.b.shape == (N, K)
    finally:
        mm._launches = old


def test_mm_device_reads_a_k_contiguous_b_in_place(fake: FakeBackend) -> None:
    """b = w.t() of a row-major N×K w (nn.Linear's weight): no copy, the launch's B is w itself."""
    M, N, K = 64, 32, 128
    a, w = CAI((M, K)), CAI((K, N), strides=(2, 2 * K), ptr=0x7F0000100000)  # K×N, K contiguous
    out = CAI((M, N), "<f4", ptr=0x7F0000200000)
    assert mm.mm(a, w, out=out) is out
    call, o, _ = fake.launches[-1]
    assert (call.M, call.N, call.K) == (M, N, K)
    assert call.b.ptr == 0x7F0000100000 and call.b.shape == (N, K) and call.b.strides == (K, 1)
    assert o.ptr == 0x7F0000200000
    # warpy.gemm of the same w given N×K row-major is the same launch
    mm.gemm(a, CAI((N, K), ptr=0x7F0000100000), out=out)
    assert fake.launches[-1][0].key == call.key and fake.launches[-1][0].b.strides == call.b.strides


@pytest.mark.parametrize("a_shape,a_strides,b_shape,b_strides,a_major,b_major,pitches", [
    ((64, 128), None, (128, 32), None, "K", "MN", None),  # x·W with W row-major K×N: N contiguous
    ((64, 128), (2, 128), (128, 32), (2, 256), "MN", "K", None),  # a = x.t() of a row-major K×M x
    ((64, 128), (2, 160), (128, 32), (96, 2), "MN", "MN", (80, 48, 32)),  # both, rows of K with a pitch
])
def test_mm_reads_mn_major_operands_in_place(fake: FakeBackend, a_shape: tuple[int, int],
                                             a_strides: Optional[tuple[int, int]], b_shape: tuple[int, int],
                                             b_strides: Optional[tuple[int, int]], a_major: str, b_major: str,
                                             pitches: Optional[tuple[int, int, int]]) -> None:
    a = CAI(a_shape, strides=a_strides)
    b = CAI(b_shape, strides=b_strides, ptr=0x7F0000100000)
    out = CAI((64, 32), "<f4", ptr=0x7F0000200000)
    mm.mm(a, b, out=out)
    call = fake.launches[-1][0]
    assert call.majors == ("major", a_major, b_major) and call.pitches == pitches
    assert call.a.ptr == 0x7F0000000000 and call.b.ptr == 0x7F0000100000  # no copy
    assert call.key[-1] == ("major", a_major, b_major)


@pytest.mark.parametrize("a_shape,a_strides,b_shape,b_strides,message", [
    # b K×N with N contiguous but rows of K closer than N: overlapping
    ((64, 128), None, (128, 32), (32, 2),
     r"^b is 128x32 with strides \(16, 1\) \(elements\): N is its contiguous dimension \(MN-major\) but its rows "
     r"of K are 16 elements apart, fewer than its 32 N: they overlap; pass b\.contiguous\(\)$"),
    # a M-contiguous with rows of K 132 bytes apart
    ((64, 128), (2, 132), (128, 32), (2, 256),
     r"^a is M-contiguous \(MN-major\) with its rows of K 132 bytes apart \(strides \(1, 66\), elements\); TMA needs "
     r"a multiple of 16 \(pass a contiguous copy\)$"),
    # no contiguous dimension
    ((64, 128), (512, 4), (128, 32), (2, 256),
     r"^a is 64x128 with strides \(256, 2\) \(elements\): no dimension is contiguous, which TMA cannot read; "
     r"pass a contiguous copy$"),
    # rows with a pitch TMA cannot take (260 bytes): check_rows' message
    ((64, 128), (260, 2), (128, 32), (2, 256), r"^a: rows 260 bytes apart \(strides \(130, 1\), elements\); TMA "
                                               r"needs a multiple of 16 \(pass a contiguous copy\)$"),
    ((64, 128), None, (64, 32), (2, 128), r"^a is 64x128 and b is 64x32: C = A·B needs b to be K x N with K = 128$"),
])
def test_mm_layouts_it_cannot_read_are_refused_in_one_line(fake: FakeBackend, a_shape: tuple[int, int],
                                                            a_strides: Optional[tuple[int, int]],
                                                            b_shape: tuple[int, int], b_strides: Optional[tuple[int, int]],
                                                            message: str) -> None:
    a = CAI(a_shape, strides=a_strides)
    b = CAI(b_shape, strides=b_strides, ptr=0x7F0000100000)
    with pytest.raises(WarpyError, match=message):
        mm.mm(a, b, out=CAI((a_shape[0], b_shape[1]), "<f4", ptr=0x7F0000200000))
    assert fake.launches == []


def test_mm_misaligned_b_and_overlap_are_refused(fake: FakeBackend) -> None:
    a = CAI((64, 128))
    with pytest.raises(WarpyError, match="^b: address 0x7f0000100008 is not 16-byte aligned"):
        mm.mm(a, CAI((128, 32), strides=(2, 256), ptr=0x7F0000100008), out=CAI((64, 32), "<f4", ptr=0x7F0000200000))
    with pytest.raises(WarpyError, match=r"^out lies inside b .*give out memory of its own$"):
        mm.mm(a, CAI((128, 32), strides=(2, 256), ptr=0x7F0000100000), out=CAI((64, 32), "<f2", ptr=0x7F0000100000 + 256))
    assert fake.launches == []


def test_mm_empty_problems_follow_torch(fake: FakeBackend) -> None:
    rng = np.random.default_rng(1)
    assert mm.mm(_ints(rng, (0, 16)), _ints(rng, (16, 4))).shape == (0, 4)
    z = mm.mm(_ints(rng, (3, 0)), _ints(rng, (0, 4)), out_dtype="fp32")
    assert z.shape == (3, 4) and not z.any()
    assert fake.host_calls == []


def test_warpy_exports_mm_and_bmm() -> None:
    assert warpy.mm is mm.mm and warpy.bmm is mm.bmm and {"mm", "bmm", "gemm"} <= set(dir(warpy))


# ---------------------------------------------------------------------------------------------
# bmm: C[i] = A[i]·B[i]


def test_bmm_numpy_is_a_batched_product(fake: FakeBackend) -> None:
    rng = np.random.default_rng(2)
    a, b = _ints(rng, (3, 5, 16)), _ints(rng, (3, 16, 7))
    c = mm.bmm(a, b, out_dtype="fp32")
    assert c.shape == (3, 5, 7) and np.array_equal(c, a.astype(np.float64) @ b.astype(np.float64))
    out = np.zeros((3, 5, 7), np.float16)
    assert mm.bmm(a, b, out=out) is out and np.array_equal(out, c)
    assert mm.bmm(a[:0], b[:0]).shape == (0, 5, 7)
    with pytest.raises(WarpyError, match="^a holds 3 matrices and b holds 2: bmm needs the same batch$"):
        mm.bmm(a, b[:2])
    with pytest.raises(WarpyError, match="^a has 2 dimensions; bmm takes a batch of matrices"):
        mm.bmm(a[0], b)


class Torch3:
    """A 3-D torch-like CUDA tensor (batch, rows, cols) with strides; indexing gives its matrices."""

    def __init__(self, shape: tuple[int, int, int], strides: tuple[int, int, int], dtype: str, ptr: int) -> None:
        self.shape, self._strides, self._ptr, self.dt = shape, strides, ptr, dtype
        self.device = TorchLike((1, 1), dtype, 0).device

    def stride(self) -> tuple[int, int, int]:
        return self._strides

    def __getitem__(self, i: int) -> TorchLike:
        m = TorchLike(self.shape[1:], self.dt, self._ptr + i * self._strides[0] * (4 if self.dt == "fp32" else 2))
        s = self._strides[1:]
        m.stride = lambda: s  # type: ignore[method-assign]
        return m


Torch3.__module__ = "torch"


def test_bmm_torch_launches_each_matrix_on_the_stream(fake: FakeBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_torch(monkeypatch)
    B, M, N, K = 4, 64, 32, 128
    a = Torch3((B, M, K), (M * K, K, 1), "bf16", BASE)
    w = Torch3((B, K, N), (N * K, 1, K), "bf16", BASE + 0x100_0000)  # each w[i].t() of a row-major N×K
    out = Torch3((B, M, N), (M * N, N, 1), "fp32", BASE + 0x200_0000)
    assert mm.bmm(a, w, out=out) is out
    assert [(x[0].a.ptr, x[0].b.ptr, x[1].ptr) for x in fake.launches] == [
        (BASE + i * M * K * 2, BASE + 0x100_0000 + i * N * K * 2, BASE + 0x200_0000 + i * M * N * 4) for i in range(B)]
    assert {x[2] for x in fake.launches} == {0x500}  # torch's current stream
    assert all(x[0].key == (M, N, K, "bf16", "fp32") for x in fake.launches)
    # an out overlapping an input anywhere in the batch is refused before any launch
    fake.launches.clear()
    with pytest.raises(WarpyError, match=r"^out \(bytes .*\) overlaps a .* over the batch: the result cannot be written"):
        mm.bmm(a, w, out=Torch3((B, M, N), (M * N, N, 1), "fp32", BASE + 3 * M * K * 2))
    assert fake.launches == []
    # each w[i] row-major K×N: read MN-major in place, a launch a matrix
    mm.bmm(a, Torch3((B, K, N), (N * K, N, 1), "bf16", BASE + 0x100_0000), out=out)
    assert [x[0].majors for x in fake.launches] == [("major", "K", "MN")] * B


# ---------------------------------------------------------------------------------------------
# CUDA graphs: while capturing, a call is the context query and the launch, nothing else


def test_ten_chained_mm_captured_are_ten_launches_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    """Capture (the stream says it is capturing) of 10 chained warpy.mm calls, each after one
    uncaptured call of its shape on the stream: no allocation, memset, copy, synchronisation or
    query beyond the thread's context, and each launch carries its own call's buffers, so a replay
    reads whatever the same buffers hold then."""
    names: list[str] = []
    launched: list[dict[str, int]] = []
    capturing = [0]

    def on_call(name: str, args: tuple[Any, ...], result: Any) -> None:
        names.append(name)
        if name == "cuLaunchKernelEx":
            launched.append(launch_args(ARGS_HEADER_S, args[2]))

    install(monkeypatch, fake_driver(on_call, cuStreamIsCapturing=lambda s: (0, capturing[0])))
    monkeypatch.setattr(drv, "_tls", threading.local())
    monkeypatch.setattr(bind, "_TMAP_CACHE", type(bind._TMAP_CACHE)())
    monkeypatch.setattr(tm, "encode_tensor_map",
                        lambda box, address: tm.TensorMap(int(address).to_bytes(8, "little") + bytes(120), box,
                                                          int(address)))
    be = mm.Launches()
    M = N = K = 128  # C of one call is A of the next: x -> x w0 -> x w0 w1 -> ...
    dt = "fp16"
    be._plans[(M, N, K, dt, dt, "sm_90a")] = fake_plan(M, N, K, dt, dt)  # a program with scratch memory
    monkeypatch.setattr(mm, "_launches", be)
    _fake_torch(monkeypatch)

    def wt(i: int) -> TorchLike:  # w_i.t(): K×N with K contiguous
        t = TorchLike((K, N), dt, BASE + 0x100_0000 + i * 0x10_0000)
        t.stride = lambda: (1, K)  # type: ignore[method-assign]
        return t

    xs = [TorchLike((M, K), dt, BASE + 0x400_0000 + i * 0x10_0000) for i in range(11)]  # xs[i + 1] = xs[i] w_i

    def chain() -> None:
        for i in range(10):
            mm.mm(xs[i], wt(i), out=xs[i + 1])

    chain()  # the warm-up: the first call loads the kernel and makes the stream's scratch
    names.clear()
    launched.clear()
    capturing[0] = 1
    chain()
    assert names == ["cuCtxGetCurrent", "cuLaunchKernelEx"] * 10
    assert [(x["a"], x["b"], x["c"]) for x in launched] == [
        (xs[i].data_ptr(), wt(i).data_ptr(), xs[i + 1].data_ptr()) for i in range(10)]
    assert len({x["flags"] for x in launched}) == 1  # one stream: its one scratch set


# ---------------------------------------------------------------------------------------------
# The fused epilogue's arguments


def test_epilogue_arguments_are_checked_and_carried(fake: FakeBackend) -> None:
    M, N, K = 64, 32, 128
    a, w = CAI((M, K)), CAI((K, N), strides=(2, 2 * K), ptr=0x7F0000100000)
    out = CAI((M, N), "<f2", ptr=0x7F0000200000)
    bias, c_in = CAI((N,), ptr=0x7F0000300000), CAI((M, N), ptr=0x7F0000400000)
    mm.mm(a, w, out=out, bias=bias, activation="gelu", beta=0.5, c_in=c_in, alpha=2)
    call = fake.launches[-1][0]
    assert call.epilogue == Epilogue(2.0, 0.5, "n", "gelu_erf", False)
    assert [x.ptr for x in call.aux] == [0x7F0000300000, 0x7F0000400000] and call.key[-1] is call.epilogue
    # the same epilogue again is the same object (one dict lookup a call)
    mm.mm(a, w, out=out, bias=bias, activation="gelu", beta=0.5, c_in=c_in, alpha=2)
    assert fake.launches[-1][0].epilogue is call.epilogue
    # c_in may be out itself (addmm in place); a row bias is M long
    mm.mm(a, w, out=out, beta=1, c_in=out, row_bias=CAI((M,), ptr=0x7F0000300000), activation="relu")
    assert fake.launches[-1][0].epilogue.bias == "m"
    assert mm.mm(a, w, out=out).__class__ is CAI and fake.launches[-1][0].epilogue is None


@pytest.mark.parametrize("kw,message", [
    ({"bias": CAI((31,), ptr=0x7F0000300000)}, "^bias holds 31 values; this call's needs 32$"),
    ({"bias": CAI((32,), "<f4", ptr=0x7F0000300000)}, "^bias is fp32; the epilogue's inputs have C's type, fp16$"),
    ({"bias": CAI((32,), ptr=0x7F0000300000), "row_bias": CAI((64,), ptr=0x7F0000310000)},
     r"^give bias \(one value a column\) or row_bias \(one a row\), not both$"),
    ({"beta": 1.0}, "^beta·C_in needs both: pass c_in= with a beta other than 0$"),
    ({"c_in": CAI((64, 32), ptr=0x7F0000400000)}, r"^c_in is given but beta is 0: pass beta= \(1 adds C_in\)$"),
    ({"activation": "tanh"}, "^activation 'tanh' is not one of relu, silu, gelu_tanh, gelu_erf"),
    ({"alpha": float("nan")}, "^alpha must be a finite number, not nan$"),
    ({"residual": CAI((64, 32), ptr=0x7F0000200000 + 64)}, r"^out partly overlaps residual"),
    ({"bias": CAI((32,), ptr=0x7F0000200000)}, r"^bias lies inside out"),
    ({"residual": CAI((64, 32), strides=(128, 2), ptr=0x7F0000400000)}, r"^residual: strides \(64, 1\)"),
    ({"residual": CAI((64, 32), ptr=0x7F0000400008)}, "^residual: address 0x7f0000400008 is not 16-byte aligned"),
    ({"bias": CAI((4, 8), ptr=0x7F0000300000)}, r"^bias has 2 dimensions; give a vector \(1-D\)$"),
])
def test_epilogue_arguments_refused_in_one_line(fake: FakeBackend, kw: dict[str, Any], message: str) -> None:
    a, w = CAI((64, 128)), CAI((128, 32), strides=(2, 256), ptr=0x7F0000100000)
    with pytest.raises(WarpyError, match=message):
        mm.mm(a, w, out=CAI((64, 32), "<f2", ptr=0x7F0000200000), **kw)
    assert fake.launches == []


def test_epilogue_with_k_zero_is_refused_and_empty_outputs_are_empty(fake: FakeBackend) -> None:
    rng = np.random.default_rng(3)
    with pytest.raises(WarpyError, match="^K = 0 with a fused epilogue"):
        mm.mm(_ints(rng, (3, 0)), _ints(rng, (0, 4)), activation="relu")
    assert mm.mm(_ints(rng, (0, 16)), _ints(rng, (16, 4)), bias=_ints(rng, (4,))).shape == (0, 4)


def test_epilogue_inputs_reach_the_launch_and_key_the_packed_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """Against the fake driver: the kernel's bias / c_in parameters carry this call's addresses, and a
    call differing from the last only in its bias gets its own packed parameters."""
    from warpy.isa.text import parse
    import warpy.plan as plan
    from warpy.kernels import gemm as gemm_family

    M = N = K = 64
    text = (f".kernel gemm_fake_ep\n.sm sm_90a\n.threads 128\n.dynsmem 1024\n.grid 4 1 1\n.cluster 1 1 1\n"
            f".mbarriers 0\n.tmap a dtype=fp16 dims={K},{M} strides={K * 2} box=64,64 swizzle=128\n"
            f".tmap b dtype=fp16 dims={K},{N} strides={K * 2} box=64,64 swizzle=128\n"
            ".param c u64\n.param bias u64\n.param c_in u64\n")
    header = parse(text).header
    launched: list[dict[str, int]] = []

    def on_call(name: str, args: tuple[Any, ...], result: Any) -> None:
        if name == "cuLaunchKernelEx":
            launched.append(launch_args(header, args[2]))

    install(monkeypatch, fake_driver(on_call))
    monkeypatch.setattr(drv, "_tls", threading.local())
    monkeypatch.setattr(bind, "_TMAP_CACHE", type(bind._TMAP_CACHE)())
    monkeypatch.setattr(tm, "encode_tensor_map",
                        lambda box, address: tm.TensorMap(int(address).to_bytes(8, "little") + bytes(120), box,
                                                          int(address)))
    ep = Epilogue(beta=1.0, bias="n", act="silu")
    problem = gemm_family.GemmProblem(M, N, K, dtype="fp16", out_dtype="fp16", epilogue=ep)
    be = mm.Launches()
    be._plans[(M, N, K, "fp16", "fp16", ep, "sm_90a")] = plan.Plan(gemm_family.FAMILY, problem, "fake", header, text,
                                                                 "", b"not a cubin", False)  # type: ignore[arg-type]
    monkeypatch.setattr(mm, "_launches", be)
    a, w, out = CAI((M, K)), CAI((K, N), strides=(2, 2 * K), ptr=0x7F0000100000), CAI((M, N), ptr=0x7F0000200000)
    c_in = CAI((M, N), ptr=0x7F0000400000)
    for bias_ptr in (0x7F0000300000, 0x7F0000310000, 0x7F0000300000):
        mm.mm(a, w, out=out, bias=CAI((N,), ptr=bias_ptr), beta=1, c_in=c_in, activation="silu", stream=5)
    assert [(x["a"], x["b"], x["c"], x["bias"], x["c_in"]) for x in launched] == [
        (0x7F0000000000, 0x7F0000100000, 0x7F0000200000, p_, 0x7F0000400000)
        for p_ in (0x7F0000300000, 0x7F0000310000, 0x7F0000300000)]


# ---------------------------------------------------------------------------------------------
# Rows with a pitch: slices of wider matrices, read and written in place


def test_pitched_operands_are_read_in_place_and_key_their_own_plan(fake: FakeBackend) -> None:
    M, N, K = 64, 32, 128
    a = CAI((M, K), strides=(2 * 192, 2))  # x[:, :128] of a 64 x 192 x
    w = CAI((K, N), strides=(2, 2 * 136), ptr=0x7F0000100000)  # w.t() of a 32 x 136 w's first 128 columns
    out = CAI((M, N), "<f4", strides=(4 * 40, 4), ptr=0x7F0000200000)  # c[:, :32] of a 64 x 40 c
    mm.mm(a, w, out=out)
    call = fake.launches[-1][0]
    assert call.pitches == (192, 136, 40) and call.key == (M, N, K, "fp16", "fp32", (192, 136, 40))
    assert call.a.nbytes == ((M - 1) * 192 + K) * 2  # the span the kernel may touch
    mm.mm(a, w, out=CAI((M, N), "<f4", ptr=0x7F0000200000))
    assert fake.launches[-1][0].pitches == (192, 136, N)
    mm.mm(CAI((M, K)), CAI((K, N), strides=(2, 2 * K), ptr=0x7F0000100000), out=CAI((M, N), "<f4", ptr=0x7F0000200000))
    assert fake.launches[-1][0].pitches is None and len(fake.launches[-1][0].key) == 5
    # an out interleaved with an input's rows (the gaps of a pitched a): refused only where bytes meet
    with pytest.raises(WarpyError, match="^out partly overlaps a"):  # columns 120..151 of x: 8 of them a's
        mm.mm(a, w, out=CAI((M, N), "<f2", strides=(2 * 192, 2), ptr=0x7F0000000000 + 2 * 120))
    mm.mm(a, w, out=CAI((M, N), "<f2", strides=(2 * 192, 2), ptr=0x7F0000000000 + 2 * 128))  # x[:, 128:160]: a's gaps
    assert fake.launches[-1][1].ptr == 0x7F0000000000 + 256


def test_k0_zeroes_each_row_of_a_pitched_out_not_the_gaps(monkeypatch: pytest.MonkeyPatch) -> None:
    memsets: list[tuple[int, int]] = []

    def on_call(name: str, args: tuple[Any, ...], result: Any) -> None:
        if name == "cuMemsetD8Async":
            memsets.append((int(args[0]), int(args[2])))

    install(monkeypatch, fake_driver(on_call))
    monkeypatch.setattr(drv, "_tls", threading.local())
    monkeypatch.setattr(mm, "_launches", mm.Launches())
    out = CAI((3, 8), "<f4", strides=(4 * 20, 4), ptr=0x7F0000200000)
    mm.gemm(CAI((3, 0)), CAI((8, 0), ptr=0x7F0000100000), out=out, stream=5)
    assert memsets == [(0x7F0000200000 + r * 80, 32) for r in range(3)]


class Fake90(FakeBackend):
    """A backend on an sm_90 GPU: a batch of matrices evenly 16-byte apart is one launch."""

    def arch(self, ordinal: int = 0) -> str:
        return "sm_90a"


def test_bmm_is_one_launch_on_sm90_when_the_batch_strides_allow(monkeypatch: pytest.MonkeyPatch) -> None:
    be = Fake90()
    monkeypatch.setattr(mm, "_launches", be)
    _fake_torch(monkeypatch)
    B, M, N, K = 4, 64, 32, 128
    a = Torch3((B, M, K), (M * K, K, 1), "bf16", BASE)
    w = Torch3((B, K, N), (N * K, 1, K), "bf16", BASE + 0x100_0000)
    out = Torch3((B, M, N), (M * N, N, 1), "fp32", BASE + 0x200_0000)
    assert mm.bmm(a, w, out=out) is out
    assert len(be.launches) == 1
    call, o, stream = be.launches[0]
    assert call.batch == (B, M * K, N * K, M * N) and call.key[-1] == ("batch", B, M * K, N * K, M * N)
    assert (call.a.ptr, call.b.ptr, o.ptr, stream) == (BASE, BASE + 0x100_0000, BASE + 0x200_0000, 0x500)
    # matrices 8 bytes apart in a (not a whole 16): a launch a matrix
    be.launches.clear()
    a2 = Torch3((B, M, K), (M * K + 4, K, 1), "bf16", BASE)
    mm.bmm(a2, w, out=out)
    assert len(be.launches) == B and all(x[0].batch is None for x in be.launches)
