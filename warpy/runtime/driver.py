"""Lazy access to the CUDA driver (`cuda.bindings.driver`) and the primary context of device 0.

Nothing here touches CUDA at import time. The first call that needs the GPU initialises the
driver; when there is no driver, no GPU, or a failure, it raises a one-line `NoGPU`/`WarpyError`.
"""

from __future__ import annotations

import threading
from typing import Any

import attrs

from warpy.errors import NoGPU, WarpyError

_lock = threading.Lock()
_state: dict[str, Any] = {}


def cuda() -> Any:
    """The `cuda.bindings.driver` module (imported on first use)."""
    mod = _state.get("driver")
    if mod is None:
        try:
            from cuda.bindings import driver as mod  # type: ignore[import-untyped,import-not-found,no-redef,unused-ignore]
        except ImportError:
            try:
                from cuda import cuda as mod  # type: ignore[import-untyped,import-not-found,no-redef,unused-ignore]  # cuda-python < 12.6
            except ImportError:
                raise NoGPU("no CUDA driver bindings: install cuda-python (cuda.bindings.driver)") from None
        _state["driver"] = mod
    return mod


def error_text(err: Any) -> str:
    """`CUDA_ERROR_NAME: description` for a CUresult."""
    d = cuda()
    try:
        _, name = d.cuGetErrorName(err)
        _, desc = d.cuGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else str(name)
        desc = desc.decode() if isinstance(desc, bytes) else str(desc)
        return f"{name}: {desc}"
    except Exception:  # the driver may be unusable; the enum's name is still informative
        return str(getattr(err, "name", err))


def check(result: Any, what: str) -> Any:
    """Unpack a cuda-python result tuple `(CUresult, *values)`; raise a one-line WarpyError on error."""
    d = cuda()
    if isinstance(result, tuple):
        err, values = result[0], result[1:]
    else:
        err, values = result, ()
    if err != d.CUresult.CUDA_SUCCESS:
        raise WarpyError(f"{what} failed: {error_text(err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


@attrs.frozen
class Device:
    """The GPU warpy.runtime uses (device 0) and its primary context."""

    ordinal: int
    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    max_shared_per_block_optin: int
    handle: Any = attrs.field(eq=False, repr=False)
    context: Any = attrs.field(eq=False, repr=False)

    @property
    def sm(self) -> str:
        """`sm_90` for an H100/H200, `sm_100` for a B200."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    def can_run(self, arch: str) -> bool:
        """Whether a cubin for `arch` (e.g. "sm_90a") runs here. Arch-specific (`a`) cubins run only on
        exactly their compute capability."""
        return arch.rstrip("af") == self.sm if arch.endswith("a") else arch == self.sm


def mark_unusable(reason: str) -> None:
    """After a hang or a fault the context cannot be trusted; every later runtime call raises."""
    _state["unusable"] = reason


def device() -> Device:
    """Initialise the driver, retain device 0's primary context and make it current (per thread)."""
    if "unusable" in _state:
        raise WarpyError(f"the CUDA context is unusable after: {_state['unusable']} (restart the process)")
    dev = _state.get("device")
    if dev is None:
        with _lock:
            dev = _state.get("device")
            if dev is None:
                dev = _open_device()
                _state["device"] = dev
    d = cuda()
    check(d.cuCtxSetCurrent(dev.context), "cuCtxSetCurrent")
    return dev


def _open_device() -> Device:
    d = cuda()
    try:
        result = d.cuInit(0)
    except Exception as e:  # cuda-python raises (not returns) when libcuda.so cannot be loaded
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise NoGPU(f"no CUDA driver: {first}") from None
    err = result[0] if isinstance(result, tuple) else result
    if err != d.CUresult.CUDA_SUCCESS:
        name = getattr(err, "name", str(err))
        if name in ("CUDA_ERROR_NO_DEVICE", "CUDA_ERROR_NOT_FOUND"):
            raise NoGPU("no GPU: the CUDA driver found no device")
        raise NoGPU(f"no usable GPU: cuInit failed: {error_text(err)}")
    count = check(d.cuDeviceGetCount(), "cuDeviceGetCount")
    if count < 1:
        raise NoGPU("no GPU: the CUDA driver found no device")
    handle = check(d.cuDeviceGet(0), "cuDeviceGet")
    raw = check(d.cuDeviceGetName(256, handle), "cuDeviceGetName")
    name = raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw)
    A = d.CUdevice_attribute

    def attr(a: Any) -> int:
        return int(check(d.cuDeviceGetAttribute(a, handle), "cuDeviceGetAttribute"))

    major = attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
    minor = attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
    sms = attr(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
    smem = attr(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
    ctx = check(d.cuDevicePrimaryCtxRetain(handle), "cuDevicePrimaryCtxRetain")
    check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return Device(0, name, (major, minor), sms, smem, handle, ctx)


def require_arch(arch: str) -> Device:
    """The device, if it can run cubins for `arch`; else a one-line NoGPU naming both."""
    dev = device()
    if not dev.can_run(arch):
        raise NoGPU(
            f"wrong architecture: the cubin is for {arch}, but the GPU ({dev.name}) is {dev.sm}"
            + (" (sm_100a cubins need a B200-class GPU)" if arch.startswith("sm_100") else "")
        )
    return dev


def synchronize_context() -> None:
    device()
    check(cuda().cuCtxSynchronize(), "cuCtxSynchronize")
