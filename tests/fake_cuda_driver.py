"""A fake CUDA driver for the host tests: enough of `cuda.bindings.driver` (result codes, attribute
names, launch configuration, stream handles and the calls warpy.runtime makes) for warpy to open a
device, load a module, launch, allocate and zero memory without a GPU.

One skeleton, shared by tests/runtime/test_runtime_cpu.py, tests/runtime/test_scratch.py,
tests/host/test_gemm_launch_host.py and tests/kernels/test_attention_api.py; each test parameterises it:
- `on_call(name, args, result)` sees every driver call (its `cu…` name, arguments and what it
  returned; while the call's arguments are still live), for tests that record what warpy asked of
  the driver;
- keyword overrides replace particular calls (a failing cuInit, a stream that never finishes),
  and are seen by `on_call` too; `launch_args` reads a launch's packed parameters;
- `fake_launches` sets up an entry point's whole device path (the driver recording every call and
  launch, tensor maps encoded without it, plans cached in a folder of the test's);
- `name`, `cc`, `sms`, `smem` describe the device (an H200 by default); `devices` how many there
  are (each with its own primary context; `devices=2, cc1=(8, 0)` makes GPU 1 an sm_80).

Contexts are modelled as the driver has them: current per thread (`cuCtxSetCurrent`,
`cuCtxGetCurrent`), a module belonging to the context current when it was loaded, and a launch
refused with CUDA_ERROR_INVALID_CONTEXT on a thread with no context current and with
CUDA_ERROR_INVALID_HANDLE when its kernel's module belongs to another context (warpy's own streams
likewise): what a real driver answers to a call from the wrong thread or for the wrong GPU.
`cuPointerGetAttribute` says which GPU an address is on: `pointer_device(ptr)` (default: GPU 0).

Imported by its bare name (`from fake_cuda_driver import …`): tests/ is on sys.path because
pytest's default (prepend) import mode puts tests/conftest.py's folder there, for the whole suite
and for a single file alike.
"""

from __future__ import annotations

import ctypes
import enum
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from warpy.runtime import driver as drv
from warpy.runtime import launcher as L


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_INVALID_CONTEXT = 201
    CUDA_ERROR_INVALID_HANDLE = 400
    CUDA_ERROR_NOT_READY = 600
    CUDA_ERROR_ILLEGAL_ADDRESS = 700


OK = (CUresult.CUDA_SUCCESS,)
WARPY_STREAM = 99  # the handle of the stream warpy creates for itself (cuStreamCreate)


class Stream:
    """A CUstream: built from an int handle, and back to it with int()."""

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __int__(self) -> int:
        return self.handle

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.handle == self.handle

    def __hash__(self) -> int:
        return self.handle


class Context:
    """A CUcontext: GPU `ordinal`'s primary context; int() is its address (0: none)."""

    def __init__(self, ordinal: int | None) -> None:
        self.ordinal = ordinal

    def __int__(self) -> int:
        return 0 if self.ordinal is None else 0xC000 + self.ordinal

    def __repr__(self) -> str:
        return f"ctx{self.ordinal}"


class Handle(str):
    """A module or function handle (a string, as the tests have always seen it) that remembers the
    context it was loaded in."""

    context: Context | None


def _handle(text: str, ctx: Context | None) -> Handle:
    h = Handle(text)
    h.context = ctx
    return h


class LaunchConfig(SimpleNamespace):
    """A CUlaunchConfig: the launcher sets its fields."""


class Attribute:
    """A CUlaunchAttribute."""

    def __init__(self) -> None:
        self.id = None
        self.value = SimpleNamespace(clusterDim=SimpleNamespace(x=0, y=0, z=0), programmaticStreamSerializationAllowed=0)


def launch_args(header: Any, address: int) -> dict[str, int]:
    """The kernel parameters packed at `address`, by the header's names: a u64 its value, a u32 its
    value, a tensor map the first 8 bytes of its 128 (the tests encode its base address there)."""
    declared = header.kernel_params()
    ptrs = (ctypes.c_void_p * len(declared)).from_address(address)
    return {name: (ctypes.c_uint64 if typ in ("tmap", "u64") else ctypes.c_uint32).from_address(p).value
            for (name, typ), p in zip(declared, ptrs)}


OnCall = Callable[[str, tuple[Any, ...], Any], None]


def fake_driver(on_call: OnCall | None = None, *, name: bytes = b"Fake H200\0",
                cc: tuple[int, int] = (9, 0), sms: int = 132, smem: int = 232448, devices: int = 1,
                cc1: tuple[int, int] | None = None, pointer_device: Callable[[int], int] = lambda ptr: 0,
                **overrides: Callable[..., Any]) -> SimpleNamespace:
    """The driver namespace; every call succeeds unless overridden (see the module's docstring)."""
    values = {"major": cc[0], "minor": cc[1], "sms": sms, "smem": smem}
    next_ptr = [0x7E00_0000_0000]
    current = threading.local()  # .ctx: the thread's current context
    contexts = [Context(i) for i in range(devices)]
    warpy_streams: dict[int, Context] = {}

    def ctx_now() -> Context | None:
        return getattr(current, "ctx", None)

    def set_current(c: Any) -> Any:
        current.ctx = c if isinstance(c, Context) and c.ordinal is not None else None
        return OK

    def attribute(a: str, h: str) -> Any:
        i = int(h[3:])
        if i == 1 and cc1 is not None and a in ("major", "minor"):
            return (CUresult.CUDA_SUCCESS, cc1[0] if a == "major" else cc1[1])
        return (CUresult.CUDA_SUCCESS, values[a])

    def stream_create(flags: int) -> Any:
        c = ctx_now()
        if c is None:
            return (CUresult.CUDA_ERROR_INVALID_CONTEXT, None)
        handle = WARPY_STREAM + 1000 * (c.ordinal or 0)
        warpy_streams[handle] = c
        return (CUresult.CUDA_SUCCESS, Stream(handle))

    def launch(cfg: Any, fn: Any, address: int, extra: Any) -> Any:
        c = ctx_now()
        if c is None:
            return (CUresult.CUDA_ERROR_INVALID_CONTEXT,)
        owner = getattr(fn, "context", c)
        if owner is not c or warpy_streams.get(int(cfg.hStream), c) is not c:
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        return OK

    def pointer_attribute(attr: Any, ptr: int) -> Any:
        return (CUresult.CUDA_SUCCESS, pointer_device(int(ptr)))

    def memcpy_dtoh(dst: int, src: int, n: int) -> Any:  # the device holds zeros (a download is defined)
        ctypes.memset(dst, 0, n)
        return OK

    def mem_alloc(n: int) -> Any:  # distinct addresses, 64 KiB apart at the least
        ptr = next_ptr[0]
        next_ptr[0] += (n + 0xFFFF) // 0x10000 * 0x10000
        return (CUresult.CUDA_SUCCESS, ptr)

    calls: dict[str, Callable[..., Any]] = dict(
        cuInit=lambda flags: OK,
        cuDeviceGetCount=lambda: (CUresult.CUDA_SUCCESS, devices),
        cuDeviceGet=lambda i: (CUresult.CUDA_SUCCESS, f"dev{i}"),
        cuDeviceGetName=lambda n, h: (CUresult.CUDA_SUCCESS, name),
        cuDeviceGetAttribute=attribute,
        cuDevicePrimaryCtxRetain=lambda h: (CUresult.CUDA_SUCCESS, contexts[int(h[3:])]),
        cuCtxSetCurrent=set_current,
        cuCtxGetCurrent=lambda: (CUresult.CUDA_SUCCESS, ctx_now() or Context(None)),
        cuCtxSynchronize=lambda: OK,
        cuModuleLoadData=lambda image: (CUresult.CUDA_SUCCESS, _handle("module", ctx_now())),
        cuModuleGetFunction=lambda m, n: (CUresult.CUDA_SUCCESS, _handle("function", getattr(m, "context", None))),
        cuFuncSetAttribute=lambda *a: OK,
        cuStreamCreate=stream_create,
        cuStreamQuery=lambda s: OK,
        cuStreamIsCapturing=lambda s: (CUresult.CUDA_SUCCESS, 0),
        cuLaunchKernelEx=launch,
        cuPointerGetAttribute=pointer_attribute,
        cuMemAlloc=mem_alloc,
        cuMemFree=lambda ptr: OK,
        cuMemsetD8Async=lambda ptr, value, n, stream: OK,
        cuMemsetD8=lambda ptr, value, n: OK,
        cuMemcpyHtoD=lambda *a: OK,
        cuMemcpyDtoH=memcpy_dtoh,
        cuGetErrorName=lambda e: (CUresult.CUDA_SUCCESS, CUresult(e).name.encode()),
        cuGetErrorString=lambda e: (CUresult.CUDA_SUCCESS, b"fake description"),
    )
    unknown = set(overrides) - set(calls)
    assert not unknown, f"the fake driver has no {sorted(unknown)}"
    calls.update(overrides)
    if on_call is not None:
        calls = {n: _seen(n, f, on_call) for n, f in calls.items()}
    return SimpleNamespace(
        CUresult=CUresult,
        CUdevice_attribute=SimpleNamespace(
            CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR="major", CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR="minor",
            CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT="sms", CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN="smem"),
        CUfunction_attribute=SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES="dsmem",
                                             CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED="np"),
        CUstream_flags=SimpleNamespace(CU_STREAM_NON_BLOCKING=SimpleNamespace(value=1)),
        CUpointer_attribute=SimpleNamespace(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL="ordinal"),
        CUstreamCaptureStatus=SimpleNamespace(CU_STREAM_CAPTURE_STATUS_NONE=0, CU_STREAM_CAPTURE_STATUS_ACTIVE=1),
        CUlaunchAttributeID=SimpleNamespace(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION="cluster",
                                            CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION="pdl"),
        CUlaunchConfig=LaunchConfig,
        CUlaunchAttribute=Attribute,
        CUstream=Stream,
        **calls,
    )


def _seen(name: str, f: Callable[..., Any], on_call: OnCall) -> Callable[..., Any]:
    def call(*a: Any) -> Any:
        result = f(*a)
        on_call(name, a, result)
        return result
    return call


def install(monkeypatch: pytest.MonkeyPatch, driver: SimpleNamespace | None,
            default_stream: dict[int, Any] | None = None) -> dict[str, Any]:
    """Make `driver` warpy's driver (None: none yet) with no device opened, no stream of warpy's own
    (or `default_stream`) and no kernel launched; undone after the test. The driver state, for a
    test that installs another driver later."""
    state: dict[str, Any] = {} if driver is None else {"driver": driver}
    monkeypatch.setattr(drv, "_state", state)
    monkeypatch.setattr(L, "_default_stream", {} if default_stream is None else default_stream)
    monkeypatch.setattr(L, "_last_kernel", {})
    return state


def launch_recorder(launches: list[dict[str, Any]], calls: list[str], header: list[Any]) -> OnCall:
    """Records the name of every driver call into `calls`, and each launch's geometry, stream, launch
    attributes and arguments (by the header's names, once the test has put it in `header`) into
    `launches`."""

    def on_call(name: str, args: tuple[Any, ...], result: Any) -> None:
        calls.append(name)
        if name == "cuLaunchKernelEx":
            cfg, _fn, address, _extra = args
            # tensor maps carry their base address in their first 8 bytes (see fake_launches); u64: the value
            launches.append(dict(
                grid=(cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ), block=(cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ),
                smem=cfg.sharedMemBytes, stream=int(cfg.hStream), attrs=[a.id for a in cfg.attrs],
                **launch_args(header[0], address),
            ))

    return on_call


def fake_launches(monkeypatch: pytest.MonkeyPatch, plans: Any) -> SimpleNamespace:
    """An entry point's device path without a GPU (warpy.gemm, warpy.attention): the fake driver
    installed with `launch_recorder` (`launches`, `calls`; a test appends the kernel's header to
    `header` for the launches' arguments to be read by name), the tensor-map cache emptied and
    `encode_tensor_map` replaced by one that records (box, address) in `encoded` and writes the base
    address in the map's first 8 bytes, and plans cached under the folder `plans`."""
    import warpy.plan as plan
    import warpy.runtime.bind as bind
    import warpy.runtime.tensormap as tm

    launches: list[dict[str, Any]] = []
    calls: list[str] = []
    encoded: list[tuple[Any, int]] = []
    header: list[Any] = []
    install(monkeypatch, fake_driver(launch_recorder(launches, calls, header)))
    monkeypatch.setattr(bind, "_TMAP_CACHE", type(bind._TMAP_CACHE)())

    def encode(box: Any, address: int) -> tm.TensorMap:
        encoded.append((box, address))
        return tm.TensorMap(int(address).to_bytes(8, "little") + bytes(120), box, int(address))

    monkeypatch.setattr(tm, "encode_tensor_map", encode)
    monkeypatch.setattr(plan, "cache_root", lambda: plans)
    return SimpleNamespace(launches=launches, calls=calls, encoded=encoded, header=header)
