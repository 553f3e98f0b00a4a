"""The shared-memory descriptor words of a buffer's tiles, K-major or MN-major.

A buffer's tiles are MN-major where one step along the row coordinate (M or N) is one element
(`mn_fields`): their LBO and SBO take the MN-major roles of `warpy.layout.desc` (distance between
swizzle-span columns along M/N, and between 8-row groups along K, for a swizzled tile).

The fields come from the buffer's layout; the bit layout is `warpy.layout.desc`'s alone (its
encoder packs every word here). Two users: the derivation computes a tile's low word (start
address and LBO) at run time from the buffer's address register, stepping it by the start field
of each index's byte stride; the MMA units set the high word (SBO, swizzle, the version bits),
a constant of the buffer, once per role (`set_desc_hi`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from warpy.errors import WarpyError
from warpy.memo import forgettable
from warpy.isa.buffers import Buffer
from warpy.isa.families import alu
from warpy.isa.operands import URVec
from warpy.layout import LayoutError
from warpy.layout.desc import (
    MN_INTERLEAVE_LBO_IS_K_STRIDE,
    MN_SWIZZLED_LBO_IS_MN_STRIDE,
    UNUSED_FIELD_BYTES,
    SmemDescFields,
    encode_smem_desc,
    smem_desc_low_word,
)
from warpy.layout.smem import CORE_ROWS
from warpy.target import dtype_bytes, target as target_of

if TYPE_CHECKING:
    from warpy.isa.program import Program


def _fields(arch: str, sbo: int = UNUSED_FIELD_BYTES, swizzle: int = 0) -> SmemDescFields:
    # a K-major swizzled tile leaves LBO unused: UNUSED_FIELD_BYTES, as warpy.layout.desc writes it
    return SmemDescFields(target_of(arch).desc, start=0, lbo=UNUSED_FIELD_BYTES, sbo=sbo, swizzle=swizzle)


@functools.lru_cache(maxsize=None)
def low_word(arch: str) -> tuple[int, int]:
    """`(shift, rest)`: a tile's low descriptor word is (its shared-memory address >> shift) + rest."""
    return smem_desc_low_word(_fields(arch))


forgettable(low_word.cache_clear)


def mn_fields(buf: Buffer) -> tuple[int, int] | None:
    """(LBO, SBO) in bytes of `buf`'s tiles where they are MN-major (a step along the row coordinate,
    the second-last, is one element and a step along K is not), else None (K-major)."""
    lay = buf.linear()
    r = lay.rank()
    if r < 2 or not buf.elem:
        return None
    shape = buf.shape()
    eb = dtype_bytes(buf.elem)

    def at(row: int, k: int) -> int:
        pre = [0] * (r - 2)
        return int(lay(tuple(pre + [row, k]))) - int(lay(tuple(pre + [0, 0])))

    if at(1, 0) != eb or shape[r - 1] < 2 or at(0, 1) == eb:
        return None
    span = buf.swizzle_span()
    per = (span or 16) // eb
    if shape[r - 1] <= CORE_ROWS:
        raise WarpyError(f"{buf.name}: an MN-major tile needs more than {CORE_ROWS} rows of K, not {shape[r - 1]}")
    mn = at(per, 0) if shape[r - 2] > per else UNUSED_FIELD_BYTES
    ks = at(0, CORE_ROWS)
    if span:
        return (mn, ks) if MN_SWIZZLED_LBO_IS_MN_STRIDE else (ks, mn)
    return (ks, mn) if MN_INTERLEAVE_LBO_IS_K_STRIDE else (mn, ks)


def buffer_low_word(buf: Buffer, arch: str) -> tuple[int, int]:
    """`low_word` for `buf`'s tiles: an MN-major buffer's LBO is its own."""
    mn = mn_fields(buf)
    if mn is None:
        return low_word(arch)
    try:
        return smem_desc_low_word(SmemDescFields(target_of(arch).desc, start=0, lbo=mn[0], sbo=mn[1],
                                                 swizzle=buf.swizzle_span()))
    except LayoutError as e:
        raise WarpyError(f"{buf.name}: {e}") from None


def start_field(arch: str, offset: int, name: str) -> int:
    """What `offset` bytes (into buffer `name`) add to the low word's start field."""
    shift, _ = low_word(arch)
    if offset % (1 << shift):
        raise WarpyError(f"{name}: a descriptor start {offset:#x} is not {1 << shift}-byte aligned")
    return offset >> shift


def desc_hi(buf: Buffer, arch: str) -> int:
    """The high word of the smem descriptor of a K-major tile of `buf` (coordinates end in row, k).

    SBO is the distance between rows 0 and 8 (one 8-row group) in the unswizzled layout; an MN-major
    buffer's fields are `mn_fields`'."""
    mn = mn_fields(buf)
    if mn is not None:
        try:
            return encode_smem_desc(SmemDescFields(target_of(arch).desc, start=0, lbo=mn[0], sbo=mn[1],
                                                   swizzle=buf.swizzle_span())) >> 32
        except LayoutError as e:
            raise WarpyError(f"{buf.name}: {e}") from None
    lay = buf.linear()
    r = lay.rank()
    if r < 2:
        raise WarpyError(f"{buf.name}: a descriptor needs a (row, k) tile")
    rows = buf.shape()[r - 2]
    if rows < CORE_ROWS or rows % CORE_ROWS:
        raise WarpyError(f"{buf.name}: a descriptor's tile has whole {CORE_ROWS}-row groups, not {rows} rows")
    zero = [0] * r
    next_group = [0] * (r - 2) + [CORE_ROWS, 0]
    sbo = int(lay(tuple(next_group))) - int(lay(tuple(zero)))
    span = buf.swizzle_span()
    one = [0] * (r - 2) + [1, 0]
    if span and int(lay(tuple(one))) - int(lay(tuple(zero))) != span:
        raise WarpyError(f"{buf.name}: rows are not {span}-byte swizzle rows of a K-major tile")
    refused = f"{buf.name}: {CORE_ROWS}-row groups {sbo} bytes apart cannot be a descriptor's SBO"
    if sbo <= 0:
        raise WarpyError(refused)
    try:
        return encode_smem_desc(_fields(arch, sbo=sbo, swizzle=span)) >> 32
    except LayoutError:  # the encoder refuses an SBO its field cannot hold
        raise WarpyError(refused) from None


def set_desc_hi(p: Program, vec: URVec, elem: int, buf: Buffer, form: str) -> None:
    """vec[elem] = the high descriptor word of `buf`'s tiles: set once per role, at its top, and
    again at the point of use only where the role's operand buffer changes."""
    hi = desc_hi(buf, p.sm)
    ln = alu.umov(vec[elem], hi).noted(buf.origin().note(form)).marked("+")
    p.derive.per_role((vec.name, elem), hi, [ln])
