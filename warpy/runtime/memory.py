"""Device memory: allocate, copy to and from numpy arrays, fill; host memory the device writes
(`HostMapped`: pinned, mapped into the device's address space, readable while a kernel runs)."""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from warpy.errors import WarpyError
from warpy.runtime.driver import check, cuda, device


@attrs.define(eq=False)
class DeviceBuffer:
    """`nbytes` of device memory at `ptr` (a CUdeviceptr value). Free with `free()`, or let it be
    collected. Passed as a kernel parameter it is the u64 pointer."""

    ptr: int
    nbytes: int
    _freed: bool = attrs.field(default=False, repr=False)

    def __int__(self) -> int:
        return self.ptr

    def _live(self) -> None:
        if self._freed:
            raise WarpyError(f"device buffer at 0x{self.ptr:x} was already freed")

    def upload(self, array: np.ndarray, offset: int = 0) -> None:
        """Copy a host array into this buffer at byte `offset` (synchronous)."""
        self._live()
        a = np.ascontiguousarray(array)
        if offset < 0 or offset + a.nbytes > self.nbytes:
            raise WarpyError(f"{a.nbytes} bytes at offset {offset} do not fit a {self.nbytes}-byte device buffer")
        device()
        if a.nbytes:
            check(cuda().cuMemcpyHtoD(self.ptr + offset, a.ctypes.data, a.nbytes), "cuMemcpyHtoD")

    def download(self, dtype: Any = np.uint8, shape: tuple[int, ...] | int | None = None, offset: int = 0) -> np.ndarray:
        """A new host array of `dtype` and `shape` (default: the whole buffer, flat) copied from here."""
        self._live()
        dt = np.dtype(dtype)
        if shape is None:
            shape = ((self.nbytes - offset) // dt.itemsize,)
        out = np.empty(shape, dtype=dt)
        if offset < 0 or offset + out.nbytes > self.nbytes:
            raise WarpyError(f"{out.nbytes} bytes at offset {offset} are more than the {self.nbytes}-byte device buffer")
        device()
        if out.nbytes:
            check(cuda().cuMemcpyDtoH(out.ctypes.data, self.ptr + offset, out.nbytes), "cuMemcpyDtoH")
        return out

    def fill(self, byte: int = 0) -> None:
        """Set every byte to `byte` (cuMemsetD8, synchronous)."""
        self._live()
        if not 0 <= byte <= 255:
            raise WarpyError(f"memset value {byte} is not a byte")
        device()
        check(cuda().cuMemsetD8(self.ptr, byte, self.nbytes), "cuMemsetD8")
        check(cuda().cuCtxSynchronize(), "cuCtxSynchronize after cuMemsetD8")

    def free(self) -> None:
        if not self._freed:
            self._freed = True
            check(cuda().cuMemFree(self.ptr), "cuMemFree")

    def __del__(self) -> None:
        # Best effort only: after a hang or at interpreter exit the driver may refuse.
        if not self._freed:
            try:
                self._freed = True
                cuda().cuMemFree(self.ptr)
            except Exception:
                pass


def alloc(nbytes: int) -> DeviceBuffer:
    """Allocate `nbytes` (at least 1) of device memory (256-byte aligned, as cuMemAlloc gives)."""
    if nbytes < 1:
        raise WarpyError(f"cannot allocate {nbytes} bytes")
    device()
    ptr = check(cuda().cuMemAlloc(nbytes), f"cuMemAlloc of {nbytes} bytes")
    return DeviceBuffer(int(ptr), nbytes)


def zeros(nbytes: int, stream: Any = None) -> DeviceBuffer:
    """`nbytes` of new device memory set to zero in the order of `stream` (cuMemsetD8Async; a
    CUstream, its handle as an int, or None: warpy's own stream): work enqueued on that stream
    afterwards sees zeros, without the host waiting. Work on another stream must wait for `stream`."""
    buf = alloc(nbytes)
    from warpy.runtime.launcher import default_stream

    d = cuda()
    s = default_stream() if stream is None else d.CUstream(stream) if isinstance(stream, int) else stream
    try:
        check(d.cuMemsetD8Async(buf.ptr, 0, nbytes, s), "cuMemsetD8Async")
    except BaseException:
        buf.free()
        raise
    return buf


def to_device(array: np.ndarray) -> DeviceBuffer:
    """A new device buffer holding a copy of `array`."""
    a = np.ascontiguousarray(array)
    buf = alloc(max(a.nbytes, 1))
    buf.upload(a)
    return buf


def memset(buf: DeviceBuffer, byte: int = 0) -> None:
    buf.fill(byte)


CU_MEMHOSTALLOC_DEVICEMAP = 0x02


@attrs.define(eq=False)
class HostMapped:
    """`nbytes` of pinned host memory mapped into the device's address space (cuMemHostAlloc with
    DEVICEMAP): the device writes it at `ptr` (its device address, what a kernel parameter holds),
    the host reads it at any time with `words()`, even while the kernel that writes it is hung (a
    kernel's status words). Zeroed at allocation. Passed as a kernel parameter it is the pointer."""

    ptr: int
    host: int
    nbytes: int
    _freed: bool = attrs.field(default=False, repr=False)

    def __int__(self) -> int:
        return self.ptr

    def array(self, dtype: Any = np.uint32) -> np.ndarray:
        """A numpy view of the memory (no copy: what the device wrote, as it is now)."""
        import ctypes

        if self._freed:
            raise WarpyError(f"host-mapped memory at 0x{self.host:x} was already freed")
        dt = np.dtype(dtype)
        buf = memoryview((ctypes.c_ubyte * self.nbytes).from_address(self.host)).cast("B")
        out: np.ndarray = np.frombuffer(buf, dtype=dt, count=self.nbytes // dt.itemsize)
        return out

    def words(self) -> np.ndarray:
        """A copy of the memory as 32-bit words."""
        return self.array(np.uint32).copy()

    def zero(self) -> None:
        self.array(np.uint8)[:] = 0

    def free(self) -> None:
        if not self._freed:
            self._freed = True
            check(cuda().cuMemFreeHost(self.host), "cuMemFreeHost")


def host_mapped(nbytes: int) -> HostMapped:
    """New zeroed host memory the device can write (`HostMapped`)."""
    if nbytes < 1:
        raise WarpyError(f"cannot allocate {nbytes} bytes")
    device()
    d = cuda()
    host = int(check(d.cuMemHostAlloc(nbytes, CU_MEMHOSTALLOC_DEVICEMAP), f"cuMemHostAlloc of {nbytes} bytes"))
    try:
        ptr = int(check(d.cuMemHostGetDevicePointer(host, 0), "cuMemHostGetDevicePointer"))
    except BaseException:
        d.cuMemFreeHost(host)
        raise
    out = HostMapped(ptr, host, nbytes)
    out.zero()
    return out
