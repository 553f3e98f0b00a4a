"""warpy.gemm's device path against a fake CUDA driver: the real plan (built and assembled), loaded,
bound by the header's names, launched with the header's geometry on the caller's stream; repeated
calls reuse the tensor maps, the launch configuration and the packed parameters."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

import warpy.matmul as mm
from warpy.kernels import gemm as gemm_family
import warpy.runtime.bind as bind
from warpy.errors import WarpyError
from fake_cuda_driver import fake_launches


class CAI:
    def __init__(self, shape: tuple[int, int], typestr: str, ptr: int) -> None:
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False), "strides": None,
                                         "version": 3}


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SimpleNamespace:
    fake = fake_launches(monkeypatch, tmp_path)  # the kernel's header goes in fake.header, for the launches' arguments
    monkeypatch.setattr(mm, "_launches", mm.Launches())
    return fake


def test_device_launch_by_header(gpu: SimpleNamespace) -> None:
    M, N, K = 256, 192, 64
    a = CAI((M, K), "bf16", 0x7F0000000000)
    b = CAI((N, K), "bf16", 0x7F0000100000)
    c = CAI((M, N), "<f4", 0x7F0000200000)
    plan = mm.launches().plan((M, N, K, "bf16", "fp32"), "sm_90a")
    h = plan.header
    gpu.header.append(h)
    assert mm.gemm(a, b, out=c, stream=5) is c
    assert {n for n, _ in h.kernel_params()} >= {"a", "b"}
    (first,) = gpu.launches
    assert first["grid"] == h.grid and first["block"] == (h.threads, 1, 1) and first["smem"] == h.dynsmem
    assert first["stream"] == 5
    assert (first["a"], first["b"], first["c"]) == (0x7F0000000000, 0x7F0000100000, 0x7F0000200000)
    assert [box for box, _ in gpu.encoded] == [h.tmap("a"), h.tmap("b")] + ([h.tmap("c")] if "c" in {t.name for t in h.tmaps} else [])
    assert gpu.calls.count("cuModuleLoadData") == 1

    # again, same operands: nothing re-encoded, the launch is the fast path with the same arguments
    n_enc = len(gpu.encoded)
    mm.gemm(a, b, out=c, stream=5)
    assert len(gpu.launches) == 2 and gpu.launches[1] == first and len(gpu.encoded) == n_enc
    assert gpu.calls.count("cuModuleLoadData") == 1

    # another output: bound afresh; another stream: its own configuration
    c2 = CAI((M, N), "<f4", 0x7F0000300000)
    mm.gemm(a, b, out=c2, stream=6)
    assert gpu.launches[-1]["c"] == 0x7F0000300000 and gpu.launches[-1]["stream"] == 6
    assert "cuStreamQuery" not in gpu.calls  # device calls do not wait

    # no stream known (a producer warpy cannot ask): wait for the context, run on warpy's stream, wait
    mm.gemm(a, b, out=c)
    assert gpu.launches[-1]["stream"] == 99
    assert "cuCtxSynchronize" in gpu.calls and "cuStreamQuery" in gpu.calls


def test_device_launch_refuses_small_memory_for_a_map(gpu: SimpleNamespace) -> None:
    """The kernel's maps span exactly the operands: binding checks each against the operand's bytes."""
    M, N, K = 256, 192, 64
    plan = mm.launches().plan((M, N, K, "bf16", "fp32"), "sm_90a")
    with pytest.raises(WarpyError, match="tensor map 'a' spans"):
        bind.bind_params(plan.header, {"a": bind.DeviceSpan(0x1000, M * K * 2 - 2), "b": bind.DeviceSpan(0x2000, N * K * 2),
                                       "c": bind.DeviceSpan(0x3000, M * N * 4)},
                         {"M": M, "N": N, "K": K}, strict=False)


class FakeTensor:
    """What `warpy bench gemm --config` reads off a torch tensor."""

    def __init__(self, ptr: int, numel: int, elem: int) -> None:
        self._ptr, self._numel, self._elem = ptr, numel, elem

    def data_ptr(self) -> int:
        return self._ptr

    def numel(self) -> int:
        return self._numel

    def element_size(self) -> int:
        return self._elem


def test_bench_with_a_configuration_launches_that_plan_on_the_tensors(gpu: SimpleNamespace) -> None:
    """`warpy bench gemm --config ...`: warpy's side is the configured plan (here stream-K, whose
    scratch is bound too), launched on each rotated tensor set, on the benchmark's stream."""
    from warpy.kernels.gemm_bench import _configured_launcher, plan_for

    M, N, K = 256, 256, 4096
    A = [FakeTensor(0x7F0000000000 + i * 0x1000000, M * K, 2) for i in range(2)]
    B = [FakeTensor(0x7F0010000000 + i * 0x1000000, N * K, 2) for i in range(2)]
    C = [FakeTensor(0x7F0020000000 + i * 0x1000000, M * N, 2) for i in range(2)]
    run = _configured_launcher((M, N, K), "bf16", "bf16", "bn=128,stream_k=true", A, B, C, 7)
    h = plan_for(gemm_family.GemmProblem(M, N, K, out_dtype="bf16"), "bn=128,stream_k=true").header
    gpu.header.append(h)
    assert "_sk" in h.kernel and {"flags", "partials"} <= set(h.scratch_params())
    for i in range(3):
        run(i)
    assert [(x["a"], x["b"], x["c"], x["stream"]) for x in gpu.launches] == \
        [(A[i % 2].data_ptr(), B[i % 2].data_ptr(), C[i % 2].data_ptr(), 7) for i in range(3)]
    assert gpu.launches[0]["flags"] == gpu.launches[2]["flags"] != 0  # one scratch set for the stream
    assert gpu.launches[0]["grid"] == h.grid


def test_fp8_bench_with_a_configuration_binds_the_scales(gpu: SimpleNamespace) -> None:
    """`warpy bench gemm --dtype e4m3 --config ...`: the configured 8-bit float plan, its per-tensor
    scales bound to every launch beside the rotated operands."""
    from warpy.kernels.gemm_bench import _configured_launcher, plan_for

    M, N, K = 256, 384, 1024
    A = [FakeTensor(0x7F0000000000 + i * 0x1000000, M * K, 1) for i in range(2)]
    B = [FakeTensor(0x7F0010000000 + i * 0x1000000, N * K, 1) for i in range(2)]
    C = [FakeTensor(0x7F0020000000 + i * 0x1000000, M * N, 2) for i in range(2)]
    SA, SB = FakeTensor(0x7F0030000000, 1, 4), FakeTensor(0x7F0030000100, 1, 4)
    run = _configured_launcher((M, N, K), "e4m3", "bf16", "bn=128", A, B, C, 5, scales=(SA, SB))
    h = plan_for(gemm_family.GemmProblem(M, N, K, dtype="e4m3", out_dtype="bf16", b_dtype="e4m3", scale_a="tensor",
                                         scale_b="tensor"), "bn=128").header
    gpu.header.append(h)
    assert "_sat_sbt" in h.kernel and "128x128" in h.kernel
    for i in range(2):
        run(i)
    assert [(x["a"], x["b"], x["c"], x["scale_a"], x["scale_b"], x["stream"]) for x in gpu.launches] == \
        [(A[i].data_ptr(), B[i].data_ptr(), C[i].data_ptr(), SA.data_ptr(), SB.data_ptr(), 5) for i in range(2)]
