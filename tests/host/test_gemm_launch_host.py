"""warpy.gemm's device path against a fake CUDA driver: the real plan (built and assembled), loaded,
bound by the header's names, launched with the header's geometry on the caller's stream; repeated
calls reuse the tensor maps, the launch configuration and the packed parameters."""

from __future__ import annotations

import ctypes
import enum
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import warpy.matmul as mm
import warpy.runtime.bind as bind
import warpy.runtime.tensormap as tm
from warpy.errors import WarpyError
from warpy.runtime import driver as drv
from warpy.runtime import launcher as L


class R(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_NOT_READY = 600


class Stream:
    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __int__(self) -> int:
        return self.handle

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.handle == self.handle

    def __hash__(self) -> int:
        return self.handle


class Record(SimpleNamespace):
    pass


class Attribute:
    def __init__(self) -> None:
        self.id = None
        self.value = SimpleNamespace(clusterDim=SimpleNamespace(x=0, y=0, z=0), programmaticStreamSerializationAllowed=0)


def fake_driver(launches: list[dict[str, Any]], calls: list[str], header: list[Any]) -> SimpleNamespace:
    ok = (R.CUDA_SUCCESS,)
    values = {"major": 9, "minor": 0, "sms": 132, "smem": 232448}

    def launch(cfg: Any, fn: Any, address: int, extra: int) -> Any:
        declared = header[0].kernel_params()
        ptrs = (ctypes.c_void_p * len(declared)).from_address(address)
        # tensor maps carry their base address in their first 8 bytes (see encode below); u64: the value
        args = {name: (ctypes.c_uint64 if typ in ("tmap", "u64") else ctypes.c_uint32).from_address(p).value
                for (name, typ), p in zip(declared, ptrs)}
        launches.append(dict(
            grid=(cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ), block=(cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ),
            smem=cfg.sharedMemBytes, stream=int(cfg.hStream), attrs=[a.id for a in cfg.attrs], **args,
        ))
        return ok

    def log(name: str, result: Any) -> Any:
        def f(*a: Any) -> Any:
            calls.append(name)
            return result
        return f

    return SimpleNamespace(
        CUresult=R,
        CUdevice_attribute=SimpleNamespace(
            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR="major", CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR="minor",
            CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT="sms", CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN="smem"),
        CUfunction_attribute=SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES="dsmem",
                                             CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED="np"),
        CUstream_flags=SimpleNamespace(CU_STREAM_NON_BLOCKING=SimpleNamespace(value=1)),
        CUlaunchAttributeID=SimpleNamespace(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION="cluster",
                                            CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION="pdl"),
        CUlaunchConfig=Record,
        CUlaunchAttribute=Attribute,
        CUstream=Stream,
        cuInit=lambda flags: ok,
        cuDeviceGetCount=lambda: (R.CUDA_SUCCESS, 1),
        cuDeviceGet=lambda i: (R.CUDA_SUCCESS, "dev0"),
        cuDeviceGetName=lambda n, h: (R.CUDA_SUCCESS, b"Fake H200\0"),
        cuDeviceGetAttribute=lambda a, h: (R.CUDA_SUCCESS, values[a]),
        cuDevicePrimaryCtxRetain=lambda h: (R.CUDA_SUCCESS, "ctx"),
        cuCtxSetCurrent=lambda c: ok,
        cuCtxSynchronize=log("cuCtxSynchronize", ok),
        cuModuleLoadData=log("cuModuleLoadData", (R.CUDA_SUCCESS, "module")),
        cuModuleGetFunction=lambda m, n: (R.CUDA_SUCCESS, "function"),
        cuFuncSetAttribute=log("cuFuncSetAttribute", ok),
        cuStreamCreate=lambda flags: (R.CUDA_SUCCESS, Stream(99)),
        cuStreamQuery=log("cuStreamQuery", ok),
        cuLaunchKernelEx=launch,
        cuGetErrorName=lambda e: (R.CUDA_SUCCESS, R(e).name.encode()),
        cuGetErrorString=lambda e: (R.CUDA_SUCCESS, b"fake"),
    )


class CAI:
    def __init__(self, shape: tuple[int, int], typestr: str, ptr: int) -> None:
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False), "strides": None,
                                         "version": 3}


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SimpleNamespace:
    try:
        mm.programs()
    except WarpyError as e:
        pytest.skip(f"kernels/programs.py not importable yet: {e}")
    launches: list[dict[str, Any]] = []
    calls: list[str] = []
    encoded: list[tuple[Any, int]] = []
    header: list[Any] = []  # the kernel's header, for the fake launch to read the parameters by
    monkeypatch.setattr(drv, "_state", {"driver": fake_driver(launches, calls, header)})
    monkeypatch.setattr(L, "_default_stream", {})
    monkeypatch.setattr(L, "_last_kernel", {})
    monkeypatch.setattr(bind, "_TMAP_CACHE", type(bind._TMAP_CACHE)())

    def encode(box: Any, address: int) -> tm.TensorMap:
        encoded.append((box, address))
        return tm.TensorMap(int(address).to_bytes(8, "little") + bytes(120), box, int(address))

    monkeypatch.setattr(tm, "encode_tensor_map", encode)
    monkeypatch.setattr(mm, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(mm, "_backend", mm.CudaBackend())
    return SimpleNamespace(launches=launches, calls=calls, encoded=encoded, header=header)


def test_device_launch_by_header(gpu: SimpleNamespace) -> None:
    M, N, K = 256, 192, 64
    a = CAI((M, K), "bf16", 0x7F0000000000)
    b = CAI((N, K), "bf16", 0x7F0000100000)
    c = CAI((M, N), "<f4", 0x7F0000200000)
    plan = mm.backend().plan((M, N, K, "bf16", "f32"), "sm_90a")
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
    plan = mm.backend().plan((M, N, K, "bf16", "f32"), "sm_90a")
    with pytest.raises(WarpyError, match="tensor map 'a' spans"):
        bind.bind_params(plan.header, {"a": bind.DeviceSpan(0x1000, M * K * 2 - 2), "b": bind.DeviceSpan(0x2000, N * K * 2),
                                       "c": bind.DeviceSpan(0x3000, M * N * 4)},
                         {"M": M, "N": N, "K": K}, strict=False)
