"""Lazy access to the CUDA driver (`cuda.bindings.driver`) and the primary contexts of the GPUs.

Nothing here touches CUDA at import time. The first call that needs a GPU initialises the driver;
when there is no driver, no GPU, or a failure, it raises a one-line `NoGPU`/`WarpyError`.

Devices and threads. A CUDA context is current per thread; warpy uses each GPU's primary context,
the one torch and cupy use (the runtime API's), so memory and streams of either are warpy's too.
`device(n)` opens GPU n (once a process: its primary context retained) and makes its context current
on the calling thread; `device()` is the thread's selected GPU, 0 unless inside `using(n)` (or
between `enter(n)` and `leave`), the way cudaSetDevice selects one for the runtime API. `enter(n)`
is the cheap guard `warpy.gemm` wraps each call in: it makes GPU n's context current on this thread
only where it is not already (one cuCtxGetCurrent when it is), and `leave` puts back a different
context the caller had current (a thread that had none keeps GPU n's, as the runtime API would).

Fork. CUDA cannot be used in a child forked after the parent initialised it (the driver's state
does not survive fork; calls fail or hang). Once warpy has opened a GPU, a forked child's every
runtime call raises one line saying so (`os.register_at_fork`), before any driver call or lock.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Optional

import attrs

from warpy.errors import NoGPU, WarpyError

_lock = threading.RLock()
# "driver": the bindings module; "devices": {ordinal: Device}; "unusable"/"forked": why every
# later call is refused (a hang or fault; a fork after the GPU was used)
_state: dict[str, Any] = {}
_tls = threading.local()  # .ordinal: the thread's selected GPU (0 when never set)


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
    """A GPU warpy.runtime uses and its primary context (`context_id`: the context's address, what
    `int()` of a CUcontext gives, to compare with the thread's current one)."""

    ordinal: int
    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    max_shared_per_block_optin: int
    handle: Any = attrs.field(eq=False, repr=False)
    context: Any = attrs.field(eq=False, repr=False)
    context_id: int = attrs.field(default=0, eq=False, repr=False)

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


def refuse_if_unusable() -> None:
    """Raise the one line that says why the GPU cannot be used any more (a hang, a fault, a fork)."""
    forked = _state.get("forked")
    if forked is not None:
        raise WarpyError(forked)
    if "unusable" in _state:
        raise WarpyError(f"the CUDA context is unusable after: {_state['unusable']} (restart the process)")


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.RLock()  # another thread may have held it at the fork: it never lets go here
    if _state.get("devices"):
        _state["forked"] = (f"warpy used the GPU in process {_state.get('pid', '?')}, which then forked this one "
                            f"({os.getpid()}): CUDA cannot be used in a forked child; start worker processes with "
                            "the 'spawn' method (multiprocessing.set_start_method('spawn'))")


os.register_at_fork(after_in_child=_after_fork_in_child)


def selected() -> int:
    """The GPU this thread's runtime calls go to: 0, or the one `using`/`enter` selected."""
    return getattr(_tls, "ordinal", 0)


def opened(ordinal: int) -> Device:
    """GPU `ordinal`, opened on first use (driver initialised, primary context retained), without
    touching the thread's current context."""
    refuse_if_unusable()
    devs = _state.get("devices")
    dev = devs.get(ordinal) if devs is not None else None
    if dev is None:
        with _lock:
            devs = _state.setdefault("devices", {})
            dev = devs.get(ordinal)
            if dev is None:
                dev = _open_device(ordinal)
                devs[ordinal] = dev
                _state.setdefault("pid", os.getpid())
    return dev


def device(ordinal: Optional[int] = None) -> Device:
    """GPU `ordinal` (default: the thread's selected one, `selected()`), opened on first use, with its
    primary context made current on this thread."""
    dev = opened(selected() if ordinal is None else ordinal)
    check(cuda().cuCtxSetCurrent(dev.context), "cuCtxSetCurrent")
    return dev


# what `enter` changed, for `leave` to undo: (the context to make current again or None, the
# thread's previous selection)
Entered = Optional[tuple[Any, int]]


def enter(ordinal: int) -> Entered:
    """Select GPU `ordinal` for this thread and make its primary context current, touching the
    driver only where another context (or none) is current. Returns what `leave` needs to undo it
    (None: nothing changed). Raises first if the GPU cannot be used (a hang, a fault, a fork)."""
    if "forked" in _state or "unusable" in _state:
        refuse_if_unusable()
    devs = _state.get("devices")
    dev = devs.get(ordinal) if devs is not None else None
    if dev is None:
        dev = opened(ordinal)
    d = _state["driver"]
    err, cur = d.cuCtxGetCurrent()
    if err != d.CUresult.CUDA_SUCCESS:
        check((err,), "cuCtxGetCurrent")
    cur_id = int(cur) if cur is not None else 0
    prev = getattr(_tls, "ordinal", 0)
    if cur_id == dev.context_id and prev == ordinal:
        return None
    _tls.ordinal = ordinal
    if cur_id != dev.context_id:
        check(d.cuCtxSetCurrent(dev.context), "cuCtxSetCurrent")
    return (cur if cur_id not in (0, dev.context_id) else None, prev)


def leave(entered: Entered) -> None:
    """Undo `enter`: the thread's previous selection, and the context it had current if that was
    another one."""
    if entered is None:
        return
    ctx, prev = entered
    _tls.ordinal = prev
    if ctx is not None:
        check(cuda().cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


class using:
    """`with using(n):` runtime calls on this thread go to GPU n (its primary context current);
    afterwards the thread's selection and current context are as before."""

    def __init__(self, ordinal: int) -> None:
        self.ordinal = ordinal
        self._entered: Entered = None

    def __enter__(self) -> Device:
        self._entered = enter(self.ordinal)
        return opened(self.ordinal)

    def __exit__(self, *exc: Any) -> None:
        leave(self._entered)


def _open_device(ordinal: int) -> Device:
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
    if not 0 <= ordinal < count:
        raise WarpyError(f"there is no GPU {ordinal}: the CUDA driver sees {count} (0..{count - 1})")
    handle = check(d.cuDeviceGet(ordinal), "cuDeviceGet")
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
    return Device(ordinal, name, (major, minor), sms, smem, handle, ctx, int(ctx))


def device_of_pointer(ptr: int) -> Optional[int]:
    """The GPU whose memory holds device address `ptr` (cuPointerGetAttribute), or None where the
    driver does not say (managed memory, host memory it maps, an address it does not know)."""
    opened(0)  # the driver initialised
    d = cuda()
    try:
        r = d.cuPointerGetAttribute(d.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
    except Exception:
        return None
    err, value = (r[0], r[1]) if isinstance(r, tuple) and len(r) > 1 else (r, None)
    if err != d.CUresult.CUDA_SUCCESS or value is None:
        return None
    n = int(value)
    return n if n >= 0 else None


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


__all__ = ["Device", "check", "cuda", "device", "device_of_pointer", "enter", "error_text", "leave",
           "mark_unusable", "opened", "refuse_if_unusable", "require_arch", "selected", "synchronize_context",
           "using"]
