"""Tensor maps: a `warpy.layout.tma.TmaBox` plus a device address, encoded by cuTensorMapEncodeTiled.

`tensor_map_args` is the pure mapping (checked on the CPU); `encode_tensor_map` hands it to the driver
and returns the 128 opaque bytes, which a launch passes by value (a `.param .align 64 .b8 [128]`).
"""

from __future__ import annotations

from typing import Any

import attrs

from warpy.errors import WarpyError
from warpy.layout.tma import TmaBox
from warpy.target import dtype

SWIZZLE_ENUMS = {
    0: "CU_TENSOR_MAP_SWIZZLE_NONE",
    32: "CU_TENSOR_MAP_SWIZZLE_32B",
    64: "CU_TENSOR_MAP_SWIZZLE_64B",
    128: "CU_TENSOR_MAP_SWIZZLE_128B",
}
INTERLEAVE_ENUMS = {
    0: "CU_TENSOR_MAP_INTERLEAVE_NONE",
    16: "CU_TENSOR_MAP_INTERLEAVE_16B",
    32: "CU_TENSOR_MAP_INTERLEAVE_32B",
}
L2_PROMOTION_ENUMS = {
    0: "CU_TENSOR_MAP_L2_PROMOTION_NONE",
    64: "CU_TENSOR_MAP_L2_PROMOTION_L2_64B",
    128: "CU_TENSOR_MAP_L2_PROMOTION_L2_128B",
    256: "CU_TENSOR_MAP_L2_PROMOTION_L2_256B",
}
# "nan" asks the TMA to fill out-of-bounds elements with NaN (and FMA-zero requests); "zero" is the default.
OOB_FILL_ENUMS = {
    "zero": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE",
    "nan": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA",
}


@attrs.frozen
class TensorMapArgs:
    """The arguments of cuTensorMapEncodeTiled, enums by enumerator name."""

    data_type: str
    rank: int
    global_address: int
    global_dims: tuple[int, ...]
    global_strides: tuple[int, ...]  # bytes, dims 1..rank-1
    box_dims: tuple[int, ...]
    element_strides: tuple[int, ...]
    interleave: str
    swizzle: str
    l2_promotion: str
    oob_fill: str


def tensor_map_args(box: TmaBox, address: int) -> TensorMapArgs:
    """Map a TmaBox and a global address onto cuTensorMapEncodeTiled's arguments."""
    address = int(address)
    align = 32 if box.interleave == 32 else 16
    if address % align:
        raise WarpyError(f"tensor map base address 0x{address:x} is not {align}-byte aligned")
    return TensorMapArgs(
        data_type=dtype(box.dtype).tma,
        rank=box.rank,
        global_address=address,
        global_dims=tuple(box.dims),
        global_strides=tuple(box.strides),
        box_dims=tuple(box.box),
        element_strides=box.element_strides,
        interleave=INTERLEAVE_ENUMS[box.interleave],
        swizzle=SWIZZLE_ENUMS[box.swizzle],
        l2_promotion=L2_PROMOTION_ENUMS[box.l2_promotion],
        oob_fill=OOB_FILL_ENUMS[box.oob_fill],
    )


@attrs.frozen
class TensorMap:
    """An encoded tensor map: 128 bytes, passed to a kernel by value."""

    data: bytes = attrs.field(repr=False)
    box: TmaBox
    address: int

    def __attrs_post_init__(self) -> None:
        if len(self.data) != 128:
            raise WarpyError(f"a tensor map is 128 bytes, not {len(self.data)}")


def encode_tensor_map(box: TmaBox, address: Any) -> TensorMap:
    """Encode `box` over the global memory at `address` (an int or a DeviceBuffer)."""
    import ctypes

    from warpy.runtime.driver import check, cuda, device

    args = tensor_map_args(box, int(address))
    device()
    d = cuda()
    tmap = check(
        d.cuTensorMapEncodeTiled(
            getattr(d.CUtensorMapDataType, args.data_type),
            args.rank,
            args.global_address,
            [d.cuuint64_t(x) for x in args.global_dims],
            [d.cuuint64_t(x) for x in args.global_strides],
            [d.cuuint32_t(x) for x in args.box_dims],
            [d.cuuint32_t(x) for x in args.element_strides],
            getattr(d.CUtensorMapInterleave, args.interleave),
            getattr(d.CUtensorMapSwizzle, args.swizzle),
            getattr(d.CUtensorMapL2promotion, args.l2_promotion),
            getattr(d.CUtensorMapFloatOOBfill, args.oob_fill),
        ),
        f"cuTensorMapEncodeTiled ({box.dtype} dims {box.dims} box {box.box} swizzle {box.swizzle})",
    )
    return TensorMap(ctypes.string_at(tmap.getPtr(), 128), box, args.global_address)
