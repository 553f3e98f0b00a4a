"""Element types: the one table of what warpy knows about each, and the spellings it accepts.

Every other part of warpy (tensor maps, descriptors, the SASS text, the runtime's DLPack and
`__cuda_array_interface__` readers, the GEMM problem) looks a type up here; none keeps its own
list. The canonical name is what the SASS text prints (`.tmap ... fp32`) and what kernel names
carry (`gemm_..._bf16_fp32_...`); any spelling in `aliases` is read as that name.

It lives in `warpy.layout` because the layout algebra (element sizes of tiles and tensor maps)
needs it and must import nothing else of warpy; `warpy.target` re-exports it next to the
architecture table.
"""

from __future__ import annotations

from typing import Literal, Optional

import attrs

from warpy.layout.core import LayoutError

Kind = Literal["float", "int", "uint", "fp8"]


@attrs.frozen
class DType:
    """One element type.

    name: the canonical spelling; bytes: size of one element; kind: float / int / uint / fp8;
    aliases: other spellings read as this type (numpy, torch, PTX and C names); tma: the
    `CUtensorMapDataType` enumerator; dlpack: (type code, bits) of a DLPack tensor of this type;
    cai: `__cuda_array_interface__` type strings; operand: a tensor-core operand tile may hold it; numpy: the numpy dtype name of the same bits
    (empty where numpy has none: bf16, fp8, tf32).
    """

    name: str
    bytes: int
    kind: Kind
    aliases: tuple[str, ...] = ()
    tma: str = ""
    dlpack: Optional[tuple[int, int]] = None
    cai: tuple[str, ...] = ()
    operand: bool = False
    numpy: str = ""

    @property
    def bits(self) -> int:
        return 8 * self.bytes


_TABLE = (
    DType("u8", 1, "uint", ("uint8",), "CU_TENSOR_MAP_DATA_TYPE_UINT8", (1, 8), ("|u1",), operand=True, numpy="uint8"),
    DType("e4m3", 1, "fp8", ("float8_e4m3fn", "fp8e4m3"), "CU_TENSOR_MAP_DATA_TYPE_UINT8", operand=True),
    DType("e5m2", 1, "fp8", ("float8_e5m2", "fp8e5m2"), "CU_TENSOR_MAP_DATA_TYPE_UINT8", operand=True),
    DType("u16", 2, "uint", ("uint16",), "CU_TENSOR_MAP_DATA_TYPE_UINT16", (1, 16), ("<u2",), numpy="uint16"),
    DType("fp16", 2, "float", ("f16", "float16", "half"), "CU_TENSOR_MAP_DATA_TYPE_FLOAT16", (2, 16), ("<f2",),
          operand=True, numpy="float16"),
    # __cuda_array_interface__ has no bf16 type string: some producers write "bf16", some "<V2"
    DType("bf16", 2, "float", ("bfloat16",), "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", (4, 16), ("bf16", "<V2"),
          operand=True),
    DType("u32", 4, "uint", ("uint32",), "CU_TENSOR_MAP_DATA_TYPE_UINT32", (1, 32), ("<u4",), numpy="uint32"),
    DType("s32", 4, "int", ("int32", "i32"), "CU_TENSOR_MAP_DATA_TYPE_INT32", (0, 32), ("<i4",), numpy="int32"),
    DType("fp32", 4, "float", ("f32", "float32", "float"), "CU_TENSOR_MAP_DATA_TYPE_FLOAT32", (2, 32), ("<f4",),
          operand=True, numpy="float32"),
    DType("tf32", 4, "float", (), "CU_TENSOR_MAP_DATA_TYPE_TFLOAT32", operand=True),
    DType("u64", 8, "uint", ("uint64",), "CU_TENSOR_MAP_DATA_TYPE_UINT64", (1, 64), ("<u8",), numpy="uint64"),
    DType("s64", 8, "int", ("int64", "i64"), "CU_TENSOR_MAP_DATA_TYPE_INT64", (0, 64), ("<i8",), numpy="int64"),
    DType("fp64", 8, "float", ("f64", "float64", "double"), "CU_TENSOR_MAP_DATA_TYPE_FLOAT64", (2, 64), ("<f8",), numpy="float64"),
)

#: canonical name -> type
DTYPES: dict[str, DType] = {d.name: d for d in _TABLE}
_SPELLINGS: dict[str, DType] = {s: d for d in _TABLE for s in (d.name,) + d.aliases}
_BY_DLPACK: dict[tuple[int, int], DType] = {d.dlpack: d for d in _TABLE if d.dlpack is not None}
_BY_CAI: dict[str, DType] = {s: d for d in _TABLE for s in d.cai}


def dtype(spelling: str) -> DType:
    """The type a spelling names (canonical or alias, any case; `torch.`/`numpy.` prefixes dropped)."""
    d = _SPELLINGS.get(spelling)
    if d is None and isinstance(spelling, str):
        s = spelling.lower()
        s = s.split(".", 1)[1] if s.startswith(("torch.", "numpy.", "cupy.")) else s
        d = _SPELLINGS.get(s)
    if d is None:
        raise LayoutError(f"unknown element type {spelling!r} (known: {', '.join(DTYPES)})")
    return d


def canonical(spelling: str) -> str:
    """The canonical name of a spelling (`f32` -> `fp32`)."""
    return dtype(spelling).name


def dtype_bytes(spelling: str) -> int:
    return dtype(spelling).bytes


def names(pred: str) -> tuple[str, ...]:
    """Canonical names of the types with a flag set (`operand`)."""
    return tuple(d.name for d in _TABLE if getattr(d, pred))


def from_dlpack(code: int, bits: int) -> Optional[DType]:
    """The type of a DLPack (type code, bits) pair, or None."""
    return _BY_DLPACK.get((code, bits))


def from_cai(typestr: str) -> Optional[DType]:
    """The type of an `__cuda_array_interface__` type string, or None."""
    return _BY_CAI.get(typestr)


__all__ = ["DType", "DTYPES", "dtype", "canonical", "dtype_bytes", "names", "from_dlpack", "from_cai"]
