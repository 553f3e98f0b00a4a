"""The sm_100a tensor core: `utchmma`, one K step of D (+)= A * B, A and B from shared-memory
tiles, D in tensor memory; `utchmma_ts`, the same with A from tensor memory."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Union

from warpy.errors import WarpyError
from warpy.isa.buffers import Tile, TmemRef
from warpy.isa.descriptors import set_desc_hi
from warpy.isa.families import alu, tcgen05
from warpy.isa.operands import UP, UPT, P, URVec
from warpy.layout import LayoutError
from warpy.layout.atoms import umma_ts_a_tmem

if TYPE_CHECKING:
    from warpy.isa.program import Program


#: per program: (role, instruction descriptor) -> the name of its (zero, idesc) register pair
_IDESC_PAIRS: "weakref.WeakKeyDictionary[Program, dict[tuple[str, int], str]]" = weakref.WeakKeyDictionary()


def idesc_pair(p: Program, idesc: int) -> URVec:
    """The (zero, idesc) register pair an MMA with instruction descriptor `idesc` reads, set once at
    the top of the role: each distinct descriptor of a role has a pair of its own (`zero_idesc`,
    then `zero_idesc_1`, ...), so a role issuing MMAs of two shapes in one loop (attention's
    S = Q·Kᵀ and O += P·V) never reads the other's descriptor."""
    role = p.derive.role_scope().role
    names = _IDESC_PAIRS.setdefault(p, {})
    name = names.get((role, idesc))
    if name is None:
        n = sum(1 for r, _ in names if r == role)
        name = names[(role, idesc)] = "zero_idesc" if n == 0 else f"zero_idesc_{n}"
    zi = p.urvec(name, 2)
    p.derive.per_role((name, idesc), idesc, [alu.umov(zi[0], 0), alu.umov(zi[1], idesc)])
    return zi


FP8 = ("e4m3", "e5m2")


def utchmma(p: Program, a: Tile, b: Tile, acc: TmemRef, idesc: int, accumulate: Union[UP, bool],
            two_cta: bool = False, guard: Union[P, UP, None] = None) -> None:
    """D (+)= A * B for one K step of the tensor core (sm_100a); 8-bit float tiles (their idesc
    kind::f8f6f4) go out as UTCQMMA."""
    if p.sm != "sm_100a":
        raise WarpyError("UTCHMMA is an sm_100a instruction")
    if not isinstance(acc, TmemRef):
        raise WarpyError(f"utchmma's accumulator must be tensor memory, not {type(acc).__name__}")
    ad = p.urvec("umma_a", 2)
    bd = p.urvec("umma_b", 2)
    set_desc_hi(p, ad, 1, a.buffer, "udesc.hi")
    set_desc_hi(p, bd, 1, b.buffer, "udesc.hi")
    zi = idesc_pair(p, idesc)  # the instruction descriptor's pair of words (zero, idesc)
    p.derive.into(ad[0], "udesc.lo", a)
    p.derive.into(bd[0], "udesc.lo", b)
    treg, toff = p.derive.value_reg("addr", acc)
    if toff:
        t = p.ur("acc_col")
        p.emit(alu.uiadd3(t, treg, toff).noted(acc.note()), mark="+")
        treg = t
    acc_p = accumulate if isinstance(accumulate, UP) else (UPT if accumulate else ~UPT)
    if a.buffer.elem in FP8 or b.buffer.elem in FP8:  # 8-bit floats: kind::f8f6f4, UTCQMMA
        if a.buffer.elem not in FP8 or b.buffer.elem not in FP8:
            raise WarpyError(f"UTCQMMA multiplies 8-bit floats; {a.buffer.name} holds {a.buffer.elem}, "
                             f"{b.buffer.name} {b.buffer.elem}")
        p.emit(tcgen05.utcqmma(ad, bd, treg, zi, acc_p, two_cta).guarded(guard))
        return
    p.emit(tcgen05.utchmma(ad, bd, treg, zi, acc_p, two_cta).guarded(guard))


def utchmma_ts(p: Program, a: TmemRef, b: Tile, acc: TmemRef, idesc: int, accumulate: Union[UP, bool],
               guard: Union[P, UP, None] = None) -> None:
    """D (+)= A * B for one K step with A from tensor memory (the TS form, cta_group::1): `a` is A's
    origin in a tensor-memory buffer whose layout must be `warpy.layout.atoms.umma_ts_a_tmem` (lane =
    row, a 32-bit column two 16-bit elements of K) and whose elem is B's 16-bit type; else refused."""
    if p.sm != "sm_100a":
        raise WarpyError("UTCHMMA is an sm_100a instruction")
    if not isinstance(a, TmemRef) or not isinstance(acc, TmemRef):
        raise WarpyError("utchmma_ts takes A and the accumulator in tensor memory")
    buf = a.buffer
    if buf.elem != b.buffer.elem:
        raise WarpyError(f"A in tensor memory ({buf.name}, {buf.elem}) and B ({b.buffer.name}, {b.buffer.elem}) must share a type")
    lay = buf.linear()
    rows, pairs = buf.shape()[0], buf.shape()[-1] if len(buf.shape()) > 1 else 1
    try:
        want = umma_ts_a_tmem(rows, 2 * pairs, buf.elem or "")
        if lay.shape != want.shape or lay.stride != want.stride:
            raise LayoutError(f"A in tensor memory {buf.name} has layout {lay}; the TS form reads {want} "
                              f"(lane = row, column = k // 2)")
    except LayoutError as e:
        raise WarpyError(str(e)) from None
    bd = p.urvec("umma_b", 2)
    set_desc_hi(p, bd, 1, b.buffer, "udesc.hi")
    zi = idesc_pair(p, idesc)
    p.derive.into(bd[0], "udesc.lo", b)
    regs = []
    for name, ref in (("umma_ta", a), ("acc_col", acc)):
        treg, toff = p.derive.value_reg("addr", ref)
        if toff:
            t = p.ur(name)
            p.emit(alu.uiadd3(t, treg, toff).noted(ref.note()), mark="+")
            treg = t
        regs.append(treg)
    acc_p = accumulate if isinstance(accumulate, UP) else (UPT if accumulate else ~UPT)
    p.emit(tcgen05.utchmma_ts(regs[0], bd, regs[1], zi, acc_p).guarded(guard))
