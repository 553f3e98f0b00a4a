"""warpy.runtime: load cubins, encode tensor maps, launch with clusters and PDL, time, and watch for hangs.

Built on `cuda.bindings.driver` only, imported lazily: importing warpy.runtime never needs a GPU or a
driver. The first call that does raises a one-line `warpy.errors.NoGPU` (no driver / no GPU / wrong
architecture) or `WarpyError`. See docs/toolchain.md for the API.
"""

from __future__ import annotations

from warpy.runtime.driver import Device, device, synchronize_context
from warpy.runtime.launcher import (
    HangError,
    Scalar,
    Timing,
    default_stream,
    f32,
    i32,
    launch,
    pack_params,
    run,
    synchronize,
    time_calls,
    time_kernel,
    u32,
    u64,
)
from warpy.runtime.memory import DeviceBuffer, alloc, memset, to_device
from warpy.runtime.module import Kernel, Module, load
from warpy.runtime.tensormap import TensorMap, TensorMapArgs, encode_tensor_map, tensor_map_args

__all__ = [
    "Device", "device", "synchronize_context",
    "HangError", "Scalar", "Timing", "default_stream", "f32", "i32", "launch", "pack_params", "run",
    "synchronize", "time_calls", "time_kernel", "u32", "u64",
    "DeviceBuffer", "alloc", "memset", "to_device",
    "Kernel", "Module", "load",
    "TensorMap", "TensorMapArgs", "encode_tensor_map", "tensor_map_args",
]
