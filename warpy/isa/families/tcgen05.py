"""The Blackwell tensor core (sm_100a): `UTCHMMA` (tcgen05.mma), `UTCBAR` (tcgen05.commit),
tensor-memory loads/stores (`LDTM`/`STTM`), and tensor-memory allocation.

`UTCHMMA[.2CTA] gdesc[a], gdesc[b], tmem[d], tmem[z], idesc[z+1], acc`: a and b are pairs of
uniform registers holding the 64-bit UMMA shared-memory descriptors; d the accumulator's tensor
memory address; z and z+1 consecutive registers (`zero_idesc.0`, `zero_idesc.1` as Program names them):
z is 0 for the SS form, z+1 the 32-bit instruction descriptor; acc the uniform predicate
enable-input-d (`UPT`: always add). `UTCQMMA` is the same with 8-bit float operands
(`tcgen05.mma ... kind::f8f6f4`: the instruction descriptor's A / B format fields say e4m3 or e5m2;
both operands from shared memory, K = 32 elements a step).

Allocation: ptxas turns `tcgen05.alloc` into a retry loop around `UTCATOMSWS.FIND_AND_SET.ALIGN`
and a store of the address; warpy writes that as one instruction in the form
`UTCATOMSWS[.2CTA].FIND_AND_SET.ALIGN [slot], ncols` (the PTX operands), and the dealloc as
`UTCATOMSWS[.2CTA].AND taddr, ncols`. The relinquish is `UVIRTCOUNT.DEALLOC.SMPOOL 0x80` as ptxas
prints it. `tcgen05.wait::ld/st` and `tcgen05.fence::before/after_thread_sync` emit no SASS of
their own: the text carries them as `TCGEN05.WAIT.LD/ST` and `TCGEN05.FENCE.BEFORE/AFTER`.
"""

from __future__ import annotations

from typing import Union

from warpy.isa.families._util import ins
from warpy.isa.families.base import Opcode, a
from warpy.isa.instr import Instr
from warpy.isa.operands import URZ, Desc, Mem, RVec, UP, UR, URVec

F = "tcgen05"
B100 = frozenset({"sm_100a"})


def _x(mods: tuple[str, ...]) -> int:
    for m in mods:
        if m.startswith("x"):
            return int(m[1:])
    return 1


UTCHMMA = Opcode("UTCHMMA", F, "mma", ((a("a", "gdesc|tmem"), a("b", "gdesc"), a("d", "tmem"), a("z", "tmem"), a("idesc", "idesc"),
                             a("acc", "UP")),),
    mods=(r"2CTA",), single_issue=True, archs=B100,
    ptx="tcgen05.mma.cta_group::1/2.kind::f16 [d], adesc or [a], bdesc, idesc, acc",
    doc="D (+)= A * B, D in tensor memory, B from shared memory by descriptor; A by descriptor (SS) or from "
        "tensor memory at a (TS: lane = row, each 32-bit column two 16-bit elements of K)", cta_group=True)
UTCQMMA = Opcode("UTCQMMA", F, "mma", ((a("a", "gdesc"), a("b", "gdesc"), a("d", "tmem"), a("z", "tmem"), a("idesc", "idesc"),
                             a("acc", "UP")),),
    mods=(r"2CTA",), single_issue=True, archs=B100,
    ptx="tcgen05.mma.cta_group::1/2.kind::f8f6f4 [d], adesc, bdesc, idesc, acc",
    doc="D (+)= A * B of 8-bit floats (the instruction descriptor's formats: e4m3 / e5m2), D in tensor memory, "
        "A and B from shared memory by descriptor", cta_group=True)
UTCBAR = Opcode("UTCBAR", F, "commit", ((a("bar", "mem"), a("z", "UR")), (a("bar", "mem"), a("z", "UR"), a("mask", "UR"))),
    mods=(r"2CTA", r"MULTICAST"), single_issue=True, archs=B100,
    ptx="tcgen05.commit.cta_group::1/2.mbarrier::arrive::one.shared::cluster[.multicast::cluster].b64 [bar][, mask]",
    doc="one arrival on bar (in each CTA of mask) once every MMA issued so far has completed", cta_group=True)
LDTM = Opcode("LDTM", F, "tmem-load", ((a("d", "Rv", "d", _x), a("t", "tmem")),), mods=(r"16dp256bit|16dp128bit|16dp64bit", r"!x\d+"),
    archs=B100, ptx="tcgen05.ld.sync.aligned.32x32b.xN.b32",
    doc="each lane reads N consecutive columns of its tensor-memory lane (32x32b shape without a shape modifier)")
STTM = Opcode("STTM", F, "tmem-store", ((a("t", "tmem"), a("v", "Rv", "u", _x)),), mods=(r"16dp256bit|16dp128bit|16dp64bit", r"!x\d+"),
    archs=B100, ptx="tcgen05.st.sync.aligned.32x32b.xN.b32", doc="the inverse of LDTM")
TCGEN05_WAIT = Opcode("TCGEN05.WAIT", F, "tmem-wait", ((),), mods=(r"!LD|ST",), archs=B100, ptxas_emits=False,
    ptx="tcgen05.wait::ld / ::st.sync.aligned", doc="wait for this thread's LDTMs (or STTMs) to complete")
TCGEN05_FENCE = Opcode("TCGEN05.FENCE", F, "tc-fence", ((),), mods=(r"!BEFORE|AFTER",), archs=B100, ptxas_emits=False,
    ptx="tcgen05.fence::before_thread_sync / ::after_thread_sync",
    doc="order tensor-core work before (after) the next (previous) thread synchronisation")
UTCATOMSWS_FIND_AND_SET = Opcode("UTCATOMSWS.FIND_AND_SET", F, "tmem-alloc", ((a("slot", "mem"), a("ncols", "I|UR")),), mods=(r"2CTA", r"!ALIGN"),
    single_issue=True, archs=B100, ptx="tcgen05.alloc.cta_group::1/2.sync.aligned.shared::cta.b32 [slot], ncols",
    doc="allocate ncols (a power of two, 32..512) tensor-memory columns; their address is written to shared [slot]", warp_collective=True, cta_group=True)
UTCATOMSWS_AND = Opcode("UTCATOMSWS.AND", F, "tmem-dealloc", ((a("taddr", "UR"), a("ncols", "I|UR")),), mods=(r"2CTA",),
    single_issue=True, archs=B100, ptx="tcgen05.dealloc.cta_group::1/2.sync.aligned.b32 taddr, ncols",
    doc="free the columns an allocation returned", warp_collective=True, cta_group=True, spelling=lambda w: tuple(x for x in w if x != "2CTA"))
UVIRTCOUNT_DEALLOC = Opcode("UVIRTCOUNT.DEALLOC", F, "tmem-relinquish", ((a("n", "I"),),), mods=(r"!SMPOOL",), single_issue=True, archs=B100,
    ptx="tcgen05.relinquish_alloc_permit.cta_group::1/2.sync.aligned",
    doc="this CTA will allocate no more tensor memory", warp_collective=True)

OPCODES: list[Opcode] = [
    UTCHMMA, UTCQMMA, UTCBAR, LDTM, STTM, TCGEN05_WAIT, TCGEN05_FENCE, UTCATOMSWS_FIND_AND_SET,
    UTCATOMSWS_AND, UVIRTCOUNT_DEALLOC,
]


def utchmma(a_: URVec, b: URVec, d: UR, zero_idesc: URVec, acc: UP, two_cta: bool = False) -> Instr:
    return ins(UTCHMMA, "2CTA" if two_cta else "", Desc("gdesc", a_), Desc("gdesc", b), Desc("tmem", d),
               Desc("tmem", zero_idesc[0]), Desc("idesc", zero_idesc[1]), acc)


def utcqmma(a_: URVec, b: URVec, d: UR, zero_idesc: URVec, acc: UP, two_cta: bool = False) -> Instr:
    """UTCHMMA's SS form for 8-bit floats (kind::f8f6f4)."""
    return ins(UTCQMMA, "2CTA" if two_cta else "", Desc("gdesc", a_), Desc("gdesc", b), Desc("tmem", d),
               Desc("tmem", zero_idesc[0]), Desc("idesc", zero_idesc[1]), acc)


def utchmma_ts(a_tmem: UR, b: URVec, d: UR, zero_idesc: URVec, acc: UP) -> Instr:
    """D (+)= A * B with A in tensor memory at `a_tmem` (`warpy.isa.units.tcgen05.utchmma_ts` checks
    its layout), B by descriptor, D at `d` (cta_group::1)."""
    return ins(UTCHMMA, "", Desc("tmem", a_tmem), Desc("gdesc", b), Desc("tmem", d),
               Desc("tmem", zero_idesc[0]), Desc("idesc", zero_idesc[1]), acc)


def utcbar(bar: Mem, mask: Union[UR, None] = None, two_cta: bool = False) -> Instr:
    mods = ("2CTA." if two_cta else "") + ("MULTICAST" if mask is not None else "")
    if mask is not None:
        return ins(UTCBAR, mods, bar, URZ, mask)
    return ins(UTCBAR, mods, bar, URZ)


def ldtm(d: RVec, t: UR) -> Instr:
    return ins(LDTM, f"x{d.width}", d, Desc("tmem", t))


def sttm(t: UR, v: RVec) -> Instr:
    return ins(STTM, f"x{v.width}", Desc("tmem", t), v)


def tmem_wait_ld() -> Instr:
    return ins(TCGEN05_WAIT, "WAIT.LD")


def tmem_wait_st() -> Instr:
    return ins(TCGEN05_WAIT, "WAIT.ST")


def tc_fence_before() -> Instr:
    return ins(TCGEN05_FENCE, "FENCE.BEFORE")


def tc_fence_after() -> Instr:
    return ins(TCGEN05_FENCE, "FENCE.AFTER")


def tmem_alloc(slot: Mem, ncols: int, two_cta: bool = False) -> Instr:
    if ncols < 32 or ncols > 512 or ncols & (ncols - 1):
        from warpy.errors import WarpyError

        raise WarpyError(f"tensor-memory allocation of {ncols} columns: needs a power of two in 32..512")
    return ins(UTCATOMSWS_FIND_AND_SET, ("2CTA." if two_cta else "") + "FIND_AND_SET.ALIGN", slot, ncols)


def tmem_dealloc(taddr: UR, ncols: int, two_cta: bool = False) -> Instr:
    return ins(UTCATOMSWS_AND, ("2CTA." if two_cta else "") + "AND", taddr, ncols)


def tmem_relinquish() -> Instr:
    return ins(UVIRTCOUNT_DEALLOC, "DEALLOC.SMPOOL", 0x80)

