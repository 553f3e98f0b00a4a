"""The sm_90a warpgroup MMA: `hgmma`, one step of acc (+)= A * B from two shared-memory tiles."""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

from warpy.errors import WarpyError
from warpy.isa.buffers import Tile
from warpy.isa.descriptors import set_desc_hi
from warpy.isa.families import wgmma
from warpy.isa.operands import UP, RVec

if TYPE_CHECKING:
    from warpy.isa.program import Program


def hgmma(p: Program, acc: RVec, a: Tile, b: Tile, n: int, accumulate: Union[UP, bool], end: bool = False) -> None:
    """acc (+)= A * B for one 64 x n x K step (K = 32 bytes of the operands' type: 16 for bf16/fp16),
    both operands from shared memory; the type modifier comes from the buffers' elem."""
    if p.sm != "sm_90a":
        raise WarpyError("HGMMA is an sm_90a instruction")
    if a.buffer.elem != b.buffer.elem or a.buffer.elem not in wgmma.AB_TYPES:
        raise WarpyError(f"HGMMA operands {a.buffer.name} ({a.buffer.elem}) and {b.buffer.name} ({b.buffer.elem}) "
                         f"must share one of the types {', '.join(wgmma.AB_TYPES)}")
    ab, kstep = wgmma.AB_TYPES[a.buffer.elem or ""]
    descs = p.urvec("gmma_desc", 4)
    set_desc_hi(p, descs, 1, a.buffer, "gdesc.hi")
    set_desc_hi(p, descs, 3, b.buffer, "gdesc.hi")
    p.derive.into(descs[0], "gdesc.lo", a)
    p.derive.into(descs[2], "gdesc.lo", b)
    p.emit(wgmma.hgmma(n, acc, descs, accumulate, end, ab=ab, k=kstep))
