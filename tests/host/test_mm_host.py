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


@pytest.mark.parametrize("a_shape,a_strides,b_shape,b_strides,message", [
    # b row-major K×N: N contiguous (MN-major)
    ((64, 128), None, (128, 32), None,
     r"^b is 128x32 with strides \(32, 1\) \(elements\): N is its contiguous dimension \(MN-major\), and warpy's "
     r"GEMM reads operands with K contiguous only so far; pass b\.t\(\)\.contiguous\(\)\.t\(\)$"),
    # a = x.t() of a row-major K×M x: M contiguous
    ((64, 128), (2, 128), (128, 32), (2, 256),
     r"^a is 64x128 with strides \(1, 64\) \(elements\): M is its contiguous dimension \(MN-major\), and warpy's "
     r"GEMM reads operands with K contiguous only so far; pass a\.contiguous\(\)$"),
    # no contiguous dimension
    ((64, 128), (512, 4), (128, 32), (2, 256),
     r"^a is 64x128 with strides \(256, 2\) \(elements\): no dimension is contiguous, which TMA cannot read; "
     r"pass a contiguous copy$"),
    # padded rows (K contiguous, row pitch != K): check_row_major's message
    ((64, 128), (512, 2), (128, 32), (2, 256), r"^a: strides \(256, 1\) .*\(pass a contiguous copy\)$"),
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
    with pytest.raises(WarpyError, match=r"^b is 128x32 with strides \(32, 1\) .*MN-major"):
        mm.bmm(a, Torch3((B, K, N), (N * K, N, 1), "bf16", BASE + 0x100_0000), out=out)
    assert fake.launches == []


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
