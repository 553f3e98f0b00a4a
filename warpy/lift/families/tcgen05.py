"""Lift rules of the Blackwell tensor-core family (tcgen05).

`UTCHMMA` and `UTCBAR` are single-issue (run on the elected lane). The allocation, deallocation
and relinquish are `.sync.aligned` in PTX (the whole warp executes them; ptxas elects inside), so
they are lifted for every lane. `tcgen05.alloc` writes the address to shared memory at [slot];
the program reads it back with its own `LDS`, as it does after ptxas's allocation loop. The
kernel's `.cta_group` comes from its instructions (`.2CTA` → 2); the driver refuses a kernel that
names both."""

from __future__ import annotations

from warpy.isa.instr import Instr
from warpy.isa.operands import Desc, Imm, UP
from warpy.lift.families._ctx import LiftContext, Rule
from warpy.isa.families import tcgen05 as isa
from warpy.lift.families._ctx import rule


def _g(c: LiftContext) -> str:
    return f"cta_group::{c.cta_group}"


@rule(isa.UTCHMMA, isa.UTCQMMA)
def _mma(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    a, b, d, _z, idesc, acc = i.ops
    assert isinstance(a, Desc) and isinstance(b, Desc) and isinstance(d, Desc) and isinstance(idesc, Desc)
    ad = f"[{c.src(a.reg)}]" if a.kind == "tmem" else c.wide(a.reg)  # TS: A's tensor-memory address
    bd = c.wide(b.reg)
    dt = c.src(d.reg)
    idv = c.src(idesc.reg)
    assert isinstance(acc, UP)
    en = c.pred(acc)
    kind = "f8f6f4" if i.name == "UTCQMMA" else "f16"  # (the descriptor's formats say which 8-bit floats)
    c.issue(f"tcgen05.mma.{_g(c)}.kind::{kind} [{dt}], {ad}, {bd}, {idv}, {en}")


@rule(isa.UTCBAR)
def _commit(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    bar = c.smem_addr(i.ops[0])
    if "MULTICAST" in rest:
        h = c.tmp("th")
        c.emit(f"cvt.u16.u32 {h}, {c.src(i.ops[2])}")
        c.issue(f"tcgen05.commit.{_g(c)}.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 {bar}, {h}")
    else:
        c.issue(f"tcgen05.commit.{_g(c)}.mbarrier::arrive::one.shared::cluster.b64 {bar}")


def _shape(c: LiftContext, rest: tuple[str, ...]) -> tuple[str, int]:
    n = int(next(m for m in rest if m.startswith("x"))[1:])
    shapes = {"16dp64bit": "16x64b"}
    for m in rest:
        if m in ("16dp128bit", "16dp256bit"):
            raise c.error(f"LDTM/STTM .{m} needs more registers than the text's x{n} names; not lifted")
        if m in shapes:
            return shapes[m], n
    return "32x32b", n


@rule(isa.LDTM)
def _ld(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, t = i.ops
    assert isinstance(t, Desc)
    shape, n = _shape(c, rest)
    c.emit(f"tcgen05.ld.sync.aligned.{shape}.x{n}.b32 {{{', '.join(c.elems(d, n))}}}, [{c.src(t.reg)}]")


@rule(isa.STTM)
def _st(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    t, v = i.ops
    assert isinstance(t, Desc)
    shape, n = _shape(c, rest)
    c.emit(f"tcgen05.st.sync.aligned.{shape}.x{n}.b32 [{c.src(t.reg)}], {{{', '.join(c.elems(v, n))}}}")


@rule(isa.TCGEN05_WAIT)
def _wait(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    c.emit(f"tcgen05.wait::{rest[0].lower()}.sync.aligned")


@rule(isa.TCGEN05_FENCE)
def _fence(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    c.emit(f"tcgen05.fence::{rest[0].lower()}_thread_sync")


def _ncols(c: LiftContext, op: object) -> str:
    if isinstance(op, Imm):
        return str(op.value)
    return c.src(op)  # type: ignore[arg-type]


@rule(isa.UTCATOMSWS_FIND_AND_SET)
def _alloc(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    slot, ncols = i.ops
    c.emit(f"tcgen05.alloc.{_g(c)}.sync.aligned.shared::cta.b32 {c.smem_addr(slot)}, {_ncols(c, ncols)}")


@rule(isa.UTCATOMSWS_AND)
def _dealloc(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    taddr, ncols = i.ops
    c.emit(f"tcgen05.dealloc.{_g(c)}.sync.aligned.b32 {c.src(taddr)}, {_ncols(c, ncols)}")


@rule(isa.UVIRTCOUNT_DEALLOC)
def _relinquish(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    c.emit(f"tcgen05.relinquish_alloc_permit.{_g(c)}.sync.aligned")


