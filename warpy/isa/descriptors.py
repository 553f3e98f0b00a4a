"""The shared-memory descriptor words of a buffer's K-major tiles.

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
from warpy.isa.buffers import Buffer
from warpy.isa.families import alu
from warpy.isa.operands import URVec
from warpy.layout import LayoutError
from warpy.layout.desc import UNUSED_FIELD_BYTES, SmemDescFields, encode_smem_desc, smem_desc_low_word
from warpy.layout.smem import CORE_ROWS
from warpy.target import target as target_of

if TYPE_CHECKING:
    from warpy.isa.program import Program


def _fields(arch: str, sbo: int = UNUSED_FIELD_BYTES, swizzle: int = 0) -> SmemDescFields:
    # a K-major swizzled tile leaves LBO unused: UNUSED_FIELD_BYTES, as warpy.layout.desc writes it
    return SmemDescFields(target_of(arch).desc, start=0, lbo=UNUSED_FIELD_BYTES, sbo=sbo, swizzle=swizzle)


@functools.lru_cache(maxsize=None)
def low_word(arch: str) -> tuple[int, int]:
    """`(shift, rest)`: a tile's low descriptor word is (its shared-memory address >> shift) + rest."""
    return smem_desc_low_word(_fields(arch))


def start_field(arch: str, offset: int, name: str) -> int:
    """What `offset` bytes (into buffer `name`) add to the low word's start field."""
    shift, _ = low_word(arch)
    if offset % (1 << shift):
        raise WarpyError(f"{name}: a descriptor start {offset:#x} is not {1 << shift}-byte aligned")
    return offset >> shift


def desc_hi(buf: Buffer, arch: str) -> int:
    """The high word of the smem descriptor of a K-major tile of `buf` (coordinates end in row, k).

    SBO is the distance between rows 0 and 8 (one 8-row group) in the unswizzled layout."""
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
