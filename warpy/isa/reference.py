"""The reference value of a derived-operand note, from the `.buffer` line alone (docs/sass.md).

This is what the host checker compares a derived operand with; it deliberately shares no code with
the derivation in `warpy.isa.derive`.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from warpy.errors import WarpyError
from warpy.isa.instr import Note
from warpy.isa.text import BufferDecl, Header
from warpy.layout import SwizzledLayout
from warpy.layout.desc import MN_INTERLEAVE_LBO_IS_K_STRIDE, MN_SWIZZLED_LBO_IS_MN_STRIDE
from warpy.target import dtype_bytes

_GMMA_MODE = {0: 0, 128: 1, 64: 2, 32: 3}
_UMMA_MODE = {0: 0, 128: 2, 64: 4, 32: 6}


def _span(decl: BufferDecl) -> int:
    if not isinstance(decl.layout, SwizzledLayout) or decl.layout.swizzle.bits == 0:
        return 0
    return 16 << decl.layout.swizzle.bits


def _offset(decl: BufferDecl, coords: Sequence[int], swizzled: bool = True) -> int:
    lay = decl.layout if swizzled or not isinstance(decl.layout, SwizzledLayout) else decl.layout.layout
    c = tuple(coords)
    return int(lay(c) if len(c) > 1 else lay(c[0]))


def _size(mode: object) -> int:
    """The number of coordinates of a (possibly nested) mode."""
    if isinstance(mode, tuple):
        out = 1
        for m in mode:
            out *= _size(m)
        return out
    if not isinstance(mode, int):
        raise WarpyError(f"a layout mode {mode!r} is not an extent")
    return mode


def _mn_major(decl: BufferDecl, n: int, span: int) -> tuple[int, int] | None:
    """(LBO, SBO) of an MN-major buffer (a row step is one element, M or N contiguous), in the roles
    `warpy.layout.desc`'s named constants give: the distance between swizzle-span columns along M/N
    (16 = unused when the rows fit one) and between 8-row groups along K."""
    if n < 2 or not decl.elem:
        return None
    eb = dtype_bytes(decl.elem)
    base = [0] * n

    def at(row: int, k: int) -> int:
        return _offset(decl, base[:-2] + [row, k], swizzled=False) - _offset(decl, base, swizzled=False)

    shape = decl.layout.layout.shape if isinstance(decl.layout, SwizzledLayout) else decl.layout.shape
    dims = [_size(d) for d in (shape if isinstance(shape, tuple) else (shape,))]
    if len(dims) != n or dims[-1] < 2 or at(1, 0) != eb or at(0, 1) == eb:
        return None
    per = (span or 16) // eb
    mn = at(per, 0) if dims[-2] > per else 16
    ks = at(0, 8)
    if span:
        return (mn, ks) if MN_SWIZZLED_LBO_IS_MN_STRIDE else (ks, mn)
    return (ks, mn) if MN_INTERLEAVE_LBO_IS_K_STRIDE else (mn, ks)


def reference(header: Header, note: Note, coords: Sequence[int], *, dsmem: int = 0x400, tmem_base: int = 0,
              params: Mapping[str, int] | None = None) -> int:
    """The value `note` claims at the given (evaluated) coordinates.

    dsmem: the shared address of the dynamic shared memory; tmem_base: the address the tensor-memory
    allocation returned; params: kernel parameter values (global buffers' source pointers).
    """
    decl = header.buffer(note.buffer)
    off = _offset(decl, coords)
    if decl.space == "smem":
        addr = dsmem + decl.base + off
    elif decl.space == "tmem":
        addr = tmem_base + decl.base + off
    else:
        src = decl.source
        if not params or src is None or src not in params:
            raise WarpyError(f"{note}: the global buffer's source {src} has no value")
        addr = params[src] + off
    if note.form == "addr":
        return addr & 0xFFFFFFFF
    if decl.space != "smem":
        raise WarpyError(f"{note}: a descriptor describes shared memory, not {decl.space}")
    n = len(coords)
    zero = [0] * n
    span = _span(decl)
    mn = _mn_major(decl, n, span)
    if note.form.endswith(".lo"):
        return ((addr >> 4) & 0x3FFF) | ((mn[0] >> 4 if mn else 1) << 16)
    if mn is not None:
        sbo = mn[1]
        if note.form == "gdesc.hi":
            return (sbo >> 4) | (_GMMA_MODE[span] << 30)
        if note.form == "udesc.hi":
            return (sbo >> 4) | (1 << 14) | (_UMMA_MODE[span] << 29)
        raise WarpyError(f"unknown note form {note.form!r}")
    # high word: SBO from rows 0 and 8 of the unswizzled layout (the coordinates end in row, k)
    eight = [0] * (n - 2) + [8, 0]
    sbo = _offset(decl, eight, swizzled=False) - _offset(decl, zero, swizzled=False)
    if note.form == "gdesc.hi":
        return (sbo >> 4) | (_GMMA_MODE[span] << 30)
    if note.form == "udesc.hi":
        return (sbo >> 4) | (1 << 14) | (_UMMA_MODE[span] << 29)
    raise WarpyError(f"unknown note form {note.form!r}")
