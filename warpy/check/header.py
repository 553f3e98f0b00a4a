"""The header against itself and against the target, before anything runs:

- `.dynsmem` holds every shared buffer the kernel declares, and fits the target;
- a tensor-memory buffer fits the target's 512 columns;
- a tensor map that a global `.buffer` also describes (the buffer's source is the map, or the
  pointer parameter the map is declared over) agrees with that buffer: the same element type, the same row pitch, and dimensions inside the buffer's shape (a map
  whose rows are a few bytes off reads or writes a skewed tensor that no address check sees);
- a map's swizzle and box fit each other (`warpy.layout.tma.TmaBox` refuses the rest when it is built).

What the code does with the header is checked where it happens: a TMA box's shared-memory address
is aligned for its swizzle, the tiles an MMA's descriptors read are laid out as the copy engine wrote
them (`warpy.check.families.tma.operand_layout`)."""

from __future__ import annotations

from typing import Optional

from warpy.isa.text import BufferDecl, Header
from warpy.layout import Layout
from warpy.target import dtype_bytes, target
from warpy.check.state import Problems

TMEM_COLUMNS = 512


def check_header(h: Header, problems: Problems) -> None:
    _shared(h, problems)
    _maps_over_buffers(h, problems)


def _shared(h: Header, problems: Problems) -> None:
    smem = [b for b in h.buffers if b.space == "smem"]
    if smem:
        last = max(smem, key=lambda b: b.base + b.size)
        end = last.base + last.size
        if end > h.dynsmem:
            problems.add("memory", f".dynsmem {h.dynsmem} is smaller than the shared buffers: {last.name} ends at byte "
                                   f"{end} of the dynamic shared memory")
    t = target(h.sm)
    if h.dynsmem > t.max_dynamic_smem:
        problems.add("memory", f".dynsmem {h.dynsmem} is more than the {t.max_dynamic_smem} bytes of dynamic shared "
                               f"memory a CTA may have on {h.sm}")
    for b in h.buffers:
        if b.space == "tmem" and b.base + b.size > TMEM_COLUMNS:
            problems.add("memory", f"tensor-memory buffer {b.name} spans columns {b.base}..{b.base + b.size - 1}, past "
                                   f"the {TMEM_COLUMNS} a CTA has")


def _rows(b: BufferDecl) -> Optional[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(shape, byte strides) of a global buffer's plain layout, outermost first."""
    lay = b.layout
    if not isinstance(lay, Layout):
        return None
    shape = lay.shape if isinstance(lay.shape, tuple) else (lay.shape,)
    stride = lay.stride if isinstance(lay.stride, tuple) else (lay.stride,)
    sh = [x for x in shape if isinstance(x, int)]
    st = [x for x in stride if isinstance(x, int)]
    if len(sh) != len(shape) or len(st) != len(stride):
        return None
    return tuple(sh), tuple(st)


def _maps_over_buffers(h: Header, problems: Problems) -> None:
    for t in h.tmaps:
        for b in h.buffers:
            if b.space != "global" or b.source is None or b.source not in (t.name, t.over) or b.elem is None:
                continue
            got = _rows(b)
            if got is None:
                continue
            shape, stride = got
            box = t.box
            eb = box.elem_bytes
            if b.elem in ("u32", "s32", "fp32", "bf16", "fp16", "u16", "s16", "u8", "s8") and dtype_bytes(b.elem) != eb:
                problems.add("memory", f"tensor map {t.name} moves {box.dtype} ({eb} bytes) where buffer "
                                       f"{b.name} declares {b.elem}")
                continue
            if len(shape) != box.rank or stride[-1] != eb:
                continue  # not a plain row-major tensor of the map's rank: nothing to compare
            pitches = tuple(reversed(stride[:-1]))  # the map's byte strides, innermost outer dimension first
            if tuple(box.strides) != pitches:
                problems.add("memory", f"tensor map {t.name} steps {', '.join(map(str, box.strides))} "
                                       f"bytes between rows, buffer {b.name} {', '.join(map(str, pitches))}")
                continue
            dims = tuple(reversed(shape))
            if t.offset == 0 and any(d > s for d, s in zip(box.dims, dims)):
                problems.add("memory", f"tensor map {t.name} is {'x'.join(map(str, box.dims))} elements, "
                                       f"buffer {b.name} {'x'.join(map(str, dims))}")
