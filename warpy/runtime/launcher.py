"""Launching kernels: parameters, cuLaunchKernelEx with cluster and PDL attributes, a watchdog
synchronize that reports hangs, and GPU timing with events."""

from __future__ import annotations

import ctypes
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Union

import attrs
import numpy as np

from warpy.errors import WarpyError
from warpy.runtime.driver import check, cuda, device, mark_unusable
from warpy.runtime.memory import DeviceBuffer
from warpy.runtime.module import Kernel
from warpy.runtime.tensormap import TensorMap


class HangError(WarpyError):
    """A kernel did not finish within the watchdog's time. The CUDA context is unusable afterwards:
    the kernel is still running and cannot be stopped from this process; exit the process."""


# ---------------------------------------------------------------------------------------------
# Parameters

_SCALARS: dict[str, tuple[type, int, int]] = {
    "u32": (ctypes.c_uint32, 0, (1 << 32) - 1),
    "i32": (ctypes.c_int32, -(1 << 31), (1 << 31) - 1),
    "u64": (ctypes.c_uint64, 0, (1 << 64) - 1),
}


@attrs.frozen
class Scalar:
    """A typed scalar kernel parameter: u32, i32, u64 (integers) or f32."""

    kind: str
    value: int | float

    def __attrs_post_init__(self) -> None:
        if self.kind == "f32":
            return
        if self.kind not in _SCALARS:
            raise WarpyError(f"unknown scalar parameter type {self.kind!r}")
        _, lo, hi = _SCALARS[self.kind]
        if not isinstance(self.value, (int, np.integer)) or not lo <= int(self.value) <= hi:
            raise WarpyError(f"{self.value!r} is not a {self.kind}")

    def ctype(self) -> Any:
        if self.kind == "f32":
            return ctypes.c_float(float(self.value))
        return _SCALARS[self.kind][0](int(self.value))


def u32(v: int) -> Scalar:
    return Scalar("u32", v)


def i32(v: int) -> Scalar:
    return Scalar("i32", v)


def u64(v: int) -> Scalar:
    return Scalar("u64", v)


def f32(v: float) -> Scalar:
    return Scalar("f32", v)


Param = Union[TensorMap, DeviceBuffer, Scalar, np.uint32, np.int32, np.uint64, np.float32]


def _param_storage(p: Any, index: int) -> Any:
    """A ctypes object holding one parameter's bytes, as the kernel's `.param` expects them."""
    if isinstance(p, TensorMap):
        # 128 bytes, 64-byte aligned in host memory as the driver's CUtensorMap is
        raw = (ctypes.c_ubyte * 192)()
        off = (-ctypes.addressof(raw)) % 64
        ctypes.memmove(ctypes.addressof(raw) + off, p.data, 128)
        return (raw, off)
    if isinstance(p, DeviceBuffer):
        return ctypes.c_uint64(p.ptr)
    if isinstance(p, Scalar):
        return p.ctype()
    if isinstance(p, np.uint32):
        return ctypes.c_uint32(int(p))
    if isinstance(p, np.int32):
        return ctypes.c_int32(int(p))
    if isinstance(p, np.uint64):
        return ctypes.c_uint64(int(p))
    if isinstance(p, np.float32):
        return ctypes.c_float(float(p))
    raise WarpyError(
        f"kernel parameter {index} is a {type(p).__name__}; give a TensorMap, a DeviceBuffer, "
        "or a typed scalar u32(..), i32(..), u64(..), f32(..)"
    )


def pack_params(params: Sequence[Any]) -> tuple[int, list[Any]]:
    """The address of a `void*[]` pointing at each parameter, and the objects to keep alive."""
    storage = [_param_storage(p, i) for i, p in enumerate(params)]
    ptrs = (ctypes.c_void_p * max(len(storage), 1))()
    for i, s in enumerate(storage):
        if isinstance(s, tuple):
            raw, off = s
            ptrs[i] = ctypes.addressof(raw) + off
        else:
            ptrs[i] = ctypes.addressof(s)
    return ctypes.addressof(ptrs), [ptrs, storage]


# ---------------------------------------------------------------------------------------------
# Launch


def _dim3(v: int | Sequence[int], what: str) -> tuple[int, int, int]:
    t = (v,) if isinstance(v, (int, np.integer)) else tuple(v)
    if not 1 <= len(t) <= 3 or any(int(x) < 1 for x in t):
        raise WarpyError(f"{what} {v!r} is not 1 to 3 positive extents")
    return tuple(int(x) for x in t) + (1,) * (3 - len(t))  # type: ignore[return-value]


_default_stream: dict[int, Any] = {}  # GPU ordinal -> warpy's stream there
_last_kernel: dict[int, str] = {}
_stream_lock = threading.Lock()


def default_stream() -> Any:
    """warpy's own non-blocking stream on the thread's selected GPU (`driver.selected()`; created on
    first use, one a GPU, shared by every thread); launches use it unless told otherwise."""
    dev = device()
    s = _default_stream.get(dev.ordinal)
    if s is None:
        with _stream_lock:
            s = _default_stream.get(dev.ordinal)
            if s is None:
                d = cuda()
                s = _default_stream[dev.ordinal] = check(
                    d.cuStreamCreate(d.CUstream_flags.CU_STREAM_NON_BLOCKING.value), "cuStreamCreate"
                )
    return s


def _stream_key(stream: Any) -> int:
    try:
        return int(stream)
    except TypeError:
        return id(stream)


def launch_config(
    kernel: Kernel,
    grid: int | Sequence[int],
    block: int | Sequence[int],
    smem: int = 0,
    cluster: int | Sequence[int] = (1, 1, 1),
    pdl: bool = False,
    stream: Any = None,
) -> Any:
    """The checked `CUlaunchConfig` of a launch (what `launch` enqueues with; `FastLaunch` keeps it
    for the calls after its first). `smem` is dynamic shared memory in bytes (above 48 KiB the
    kernel's opt-in attribute is raised first); `cluster` adds the cluster-dimension attribute (when
    not 1x1x1); `pdl` allows programmatic stream serialization (the kernel may start before the
    previous one on the stream ends, and must `griddepcontrol.wait` before reading its outputs)."""
    g = _dim3(grid, "grid")
    b = _dim3(block, "block")
    c = _dim3(cluster, "cluster")
    if b[0] * b[1] * b[2] > 1024:
        raise WarpyError(f"block {b} has {b[0] * b[1] * b[2]} threads, more than 1024")
    for gi, ci, axis in zip(g, c, "xyz"):
        if gi % ci:
            raise WarpyError(f"cluster {c} does not divide grid {g} along {axis}")
    if smem < 0:
        raise WarpyError(f"dynamic shared memory {smem} is negative")
    kernel.allow_dynamic_smem(smem)
    d = cuda()
    stream = default_stream() if stream is None else stream

    cfg = d.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = g
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = b
    cfg.sharedMemBytes = smem
    cfg.hStream = stream
    attributes = []
    if c != (1, 1, 1):
        if c[0] * c[1] * c[2] > 8:
            check(
                d.cuFuncSetAttribute(
                    kernel.handle, d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1
                ),
                f"allowing a non-portable cluster size for kernel {kernel.name}",
            )
        a = d.CUlaunchAttribute()
        a.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z = c
        attributes.append(a)
    if pdl:
        a = d.CUlaunchAttribute()
        a.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        a.value.programmaticStreamSerializationAllowed = 1
        attributes.append(a)
    cfg.attrs = attributes
    cfg.numAttrs = len(attributes)
    return cfg


def launch_with(kernel: Kernel, cfg: Any, params: Sequence[Any]) -> None:
    """Enqueue `kernel` with a configuration `launch_config` made."""
    d = cuda()
    address, keep = pack_params(params)
    check(d.cuLaunchKernelEx(cfg, kernel.handle, address, 0), f"launch of kernel {kernel.name}")
    del keep  # the driver has copied the parameters by the time cuLaunchKernelEx returns
    _last_kernel[_stream_key(cfg.hStream)] = kernel.name


def launch(
    kernel: Kernel,
    grid: int | Sequence[int],
    block: int | Sequence[int],
    smem: int = 0,
    params: Sequence[Any] = (),
    cluster: int | Sequence[int] = (1, 1, 1),
    pdl: bool = False,
    stream: Any = None,
) -> None:
    """Enqueue `kernel` with cuLaunchKernelEx (`launch_config` says what each argument does).
    Returns at once; use `synchronize` to wait under the watchdog."""
    launch_with(kernel, launch_config(kernel, grid, block, smem, cluster, pdl, stream), params)


def synchronize(stream: Any = None, timeout: float = 30.0, kernel: str | None = None,
                on_hang: Callable[[], str] | None = None) -> None:
    """Wait for `stream` (default: warpy's stream) to drain, polling, for at most `timeout` seconds.
    On timeout raise `HangError("hang: kernel NAME did not finish within S s")`, and mark the runtime
    unusable: the kernel keeps running, nothing in this process can stop it, and every later runtime
    call raises. The caller should report and exit (run launches that may hang in a subprocess).
    `on_hang`: called on timeout (without touching the driver); what it returns follows the message
    on lines of its own (e.g. where each SM of a persistent kernel stands, read from host-visible
    status words)."""
    d = cuda()
    device()
    stream = default_stream() if stream is None else stream
    name = kernel or _last_kernel.get(_stream_key(stream), "?")
    deadline = time.monotonic() + timeout
    pause = 0.0001
    while True:
        err = d.cuStreamQuery(stream)
        err = err[0] if isinstance(err, tuple) else err
        if err == d.CUresult.CUDA_SUCCESS:
            return
        if err != d.CUresult.CUDA_ERROR_NOT_READY:
            raise WarpyError(f"kernel {name} failed: {_err(err)} (the CUDA context is now unusable)")
        if time.monotonic() >= deadline:
            msg = f"hang: kernel {name} did not finish within {timeout:g} s"
            mark_unusable(msg)
            if on_hang is not None:
                try:
                    extra = on_hang()
                except Exception as e:  # the report must not hide the hang
                    extra = f"(the hang report failed: {type(e).__name__}: {e})"
                if extra:
                    msg += "\n" + extra
            raise HangError(msg)
        time.sleep(pause)
        pause = min(pause * 2, 0.01)


def _err(err: Any) -> str:
    from warpy.runtime.driver import error_text

    return error_text(err)


def run(
    kernel: Kernel,
    grid: int | Sequence[int],
    block: int | Sequence[int],
    smem: int = 0,
    params: Sequence[Any] = (),
    cluster: int | Sequence[int] = (1, 1, 1),
    pdl: bool = False,
    stream: Any = None,
    timeout: float = 30.0,
) -> None:
    """`launch` then `synchronize` under the watchdog."""
    launch(kernel, grid, block, smem, params, cluster, pdl, stream)
    synchronize(stream, timeout, kernel.name)


# ---------------------------------------------------------------------------------------------
# Timing


@attrs.frozen
class Timing:
    """Per-call GPU times in milliseconds (CUDA events around each call), in call order."""

    samples_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def min_ms(self) -> float:
        return min(self.samples_ms)

    @property
    def max_ms(self) -> float:
        return max(self.samples_ms)

    def tflops(self, flops: float) -> float:
        """TFLOP/s of `flops` per call at the median time."""
        return flops / (self.median_ms * 1e-3) / 1e12


def time_calls(
    enqueue: Callable[[], None],
    iters: int = 20,
    warmup: int = 3,
    stream: Any = None,
    timeout: float = 60.0,
    name: str = "?",
) -> Timing:
    """Time `enqueue()` (which enqueues GPU work on `stream`): `warmup` untimed calls, then `iters`
    calls each between two recorded events. Waits under the watchdog."""
    if iters < 1 or warmup < 0:
        raise WarpyError(f"timing needs iters >= 1 and warmup >= 0, not {iters} and {warmup}")
    d = cuda()
    device()
    stream = default_stream() if stream is None else stream
    for _ in range(warmup):
        enqueue()
    synchronize(stream, timeout, name)
    events = [
        (check(d.cuEventCreate(0), "cuEventCreate"), check(d.cuEventCreate(0), "cuEventCreate")) for _ in range(iters)
    ]
    try:
        for start, end in events:
            check(d.cuEventRecord(start, stream), "cuEventRecord")
            enqueue()
            check(d.cuEventRecord(end, stream), "cuEventRecord")
        synchronize(stream, timeout, name)
        samples = tuple(float(check(d.cuEventElapsedTime(s, e), "cuEventElapsedTime")) for s, e in events)
    finally:
        for s, e in events:
            d.cuEventDestroy(s)
            d.cuEventDestroy(e)
    return Timing(samples)


def time_kernel(
    kernel: Kernel,
    grid: int | Sequence[int],
    block: int | Sequence[int],
    smem: int = 0,
    params: Sequence[Any] = (),
    cluster: int | Sequence[int] = (1, 1, 1),
    pdl: bool = False,
    stream: Any = None,
    iters: int = 20,
    warmup: int = 3,
    timeout: float = 60.0,
) -> Timing:
    """The median-ready per-launch GPU times of `kernel` over `iters` launches after `warmup`."""
    return time_calls(
        lambda: launch(kernel, grid, block, smem, params, cluster, pdl, stream),
        iters, warmup, stream, timeout, kernel.name,
    )
