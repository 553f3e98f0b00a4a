"""The sm_90a warpgroup MMA: `hgmma`, one step of acc (+)= A * B from two shared-memory tiles (8-bit
float tiles go to `qgmma`, QGMMA), and `hgmma_rs`, the same with A from registers (its fragment
checked against the layout atom)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

from warpy.errors import WarpyError
from warpy.isa.buffers import Tile
from warpy.isa.descriptors import mn_fields, set_desc_hi
from warpy.isa.families import alu, wgmma
from warpy.isa.operands import UP, RVec
from warpy.layout import Layout, LayoutError, atoms
from warpy.layout.atoms import check_fragment

if TYPE_CHECKING:
    from warpy.isa.program import Program


def hgmma(p: Program, acc: RVec, a: Tile, b: Tile, n: int, accumulate: Union[UP, bool], end: bool = False) -> None:
    """acc (+)= A * B for one 64 x n x K step (K = 32 bytes of the operands' type: 16 for bf16/fp16),
    both operands from shared memory; the type modifier comes from the buffers' elem, and an
    operand whose buffer is M/N-contiguous (`warpy.isa.descriptors.mn_fields`) is read MN-major
    (`.tnspA`/`.tnspB`)."""
    if p.sm != "sm_90a":
        raise WarpyError("HGMMA is an sm_90a instruction")
    if a.buffer.elem in wgmma.Q_TYPES or b.buffer.elem in wgmma.Q_TYPES:
        qgmma(p, acc, a, b, n, accumulate, end)
        return
    if a.buffer.elem != b.buffer.elem or a.buffer.elem not in wgmma.AB_TYPES:
        raise WarpyError(f"HGMMA operands {a.buffer.name} ({a.buffer.elem}) and {b.buffer.name} ({b.buffer.elem}) "
                         f"must share one of the types {', '.join(wgmma.AB_TYPES)}")
    ab, kstep = wgmma.AB_TYPES[a.buffer.elem or ""]
    # an operand whose buffer is M- or N-contiguous is read transposed (MN-major descriptor fields)
    ta, tb = mn_fields(a.buffer) is not None, mn_fields(b.buffer) is not None
    descs = p.urvec("gmma_desc", 4)
    set_desc_hi(p, descs, 1, a.buffer, "gdesc.hi")
    set_desc_hi(p, descs, 3, b.buffer, "gdesc.hi")
    p.derive.into(descs[0], "gdesc.lo", a)
    p.derive.into(descs[2], "gdesc.lo", b)
    p.emit(wgmma.hgmma(n, acc, descs, accumulate, end, ab=ab, k=kstep, tnsp_a=ta, tnsp_b=tb))


def qgmma(p: Program, acc: RVec, a: Tile, b: Tile, n: int, accumulate: Union[UP, bool], end: bool = False) -> None:
    """acc (+)= A * B for one 64 x n x 32 step of 8-bit floats (QGMMA): A's and B's types (e4m3 or e5m2,
    each its own) come from their buffers; both must be K-major (fp8 wgmma has no transpose)."""
    if p.sm != "sm_90a":
        raise WarpyError("QGMMA is an sm_90a instruction")
    for t in (a, b):
        if t.buffer.elem not in wgmma.Q_TYPES:
            raise WarpyError(f"QGMMA operands are 8-bit floats ({', '.join(wgmma.Q_TYPES)}); {t.buffer.name} holds "
                             f"{t.buffer.elem or 'no type'}")
        if mn_fields(t.buffer) is not None:
            raise WarpyError(f"QGMMA reads 8-bit operands K-major only; {t.buffer.name} is M/N-contiguous")
    descs = p.urvec("gmma_desc", 4)
    set_desc_hi(p, descs, 1, a.buffer, "gdesc.hi")
    set_desc_hi(p, descs, 3, b.buffer, "gdesc.hi")
    p.derive.into(descs[0], "gdesc.lo", a)
    p.derive.into(descs[2], "gdesc.lo", b)
    p.emit(wgmma.qgmma(n, acc, descs, accumulate, end, a_type=wgmma.Q_TYPES[a.buffer.elem or ""][0],
                       b_type=wgmma.Q_TYPES[b.buffer.elem or ""][0]))


def hgmma_rs(p: Program, acc: RVec, a: RVec, a_fragment: Layout, b: Tile, n: int, accumulate: Union[UP, bool],
             end: bool = False) -> None:
    """acc (+)= A * B for one 64 x n x 16 step with A from registers (the RS form): `a` holds 4
    registers a thread whose 8 16-bit values are the elements `a_fragment` says ((thread, value) ->
    row + 64 k of the 64 x 16 A, e.g. `warpy.layout.atoms.wgmma_acc_chunk_as_a` for a packed
    accumulator chunk); it must be the wgmma A atom's fragment, or the program is refused. B comes
    from shared memory by descriptor; the type is B's buffer's."""
    if p.sm != "sm_90a":
        raise WarpyError("HGMMA is an sm_90a instruction")
    elem = b.buffer.elem or ""
    if elem not in ("bf16", "fp16", "f16"):
        raise WarpyError(f"HGMMA with A from registers takes 16-bit operands; {b.buffer.name} holds {elem or 'no type'}")
    if a.width != wgmma.A_REGS:
        raise WarpyError(f"HGMMA's A from registers is {wgmma.A_REGS} registers a thread, not {a.width} ({a.name})")
    try:
        check_fragment(f"HGMMA A {a.name}", a_fragment, atoms.wgmma(n, elem, a_from_registers=True).a, 128, 2 * wgmma.A_REGS)
    except LayoutError as e:
        raise WarpyError(str(e)) from None
    ab, kstep = wgmma.AB_TYPES[elem]
    # a vector of its own: the SS form's A words (gmma_desc.0/1) must not be clobbered by the zeros below in
    # a role that issues both forms (attention: S = Q·Kᵀ from shared memory, O += P·V with P in registers)
    descs = p.urvec("gmma_rs_desc", 4)
    # the operand names all four words; A's pair is not read in the RS form: zero, once per role
    p.derive.per_role(("rs_no_a_desc",), 0, [alu.umov(descs[0], 0), alu.umov(descs[1], 0)])
    set_desc_hi(p, descs, 3, b.buffer, "gdesc.hi")
    p.derive.into(descs[2], "gdesc.lo", b)
    p.emit(wgmma.hgmma_rs(n, acc, a, descs, accumulate, end, ab=ab, k=kstep, tnsp_b=mn_fields(b.buffer) is not None))
