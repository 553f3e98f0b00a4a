"""Flags between CTAs with the orderings PTX spells (`warpy.isa.units.flags`): what they lift to, and
what the checker makes of them. A producer CTA writes data and raises a counter with a release; a
consumer CTA waits on the counter (`spin_wait`: poll, back-off, acquire) and reads the data. With the
acquire the read is ordered after the write; without it the checker reports the read."""

from __future__ import annotations

import pytest

from warpy.check.report import check_kernel
from warpy.isa.families import alu, control, memory, sync
from warpy.isa.operands import CBank, GMem
from warpy.isa.program import Program
from warpy.isa.units import flags
from warpy.layout import Layout
from warpy.lift.lifter import lift


def producer_consumer(acquire: bool = True, release: bool = True) -> Program:
    p = Program("flags", "sm_90a", threads=32, grid=(2, 1, 1))
    data, ctr = p.param("data", "u64"), p.param("ctr", "u64")
    p.global_buffer("data", Layout(32, 4), "u32", source="data")
    p.global_buffer("ctr", Layout(1, 4), "u32", source="ctr")
    md = p.urvec("memdesc", 2)
    p.emit(alu.uldc(md, CBank(0, p.target.memdesc), p.sm))
    dptr, cptr = p.rvec("dptr", 2), p.rvec("cptr", 2)
    p.emit(alu.ldc(dptr, data.cbank()))
    p.emit(alu.ldc(cptr, ctr.cbank()))
    tid, cta = p.r("tid"), p.r("cta")
    p.emit(alu.s2r(tid, "SR_TID.X"))
    p.emit(alu.s2r(cta, "SR_CTAID.X"))
    mine = p.rvec("mine", 2)
    p.emit(alu.imad_wide(mine, tid, 4, dptr))
    is_producer = p.p("is_producer")
    p.emit(alu.isetp("EQ", is_producer, cta, 0))
    consumer = p.fresh_label("CONSUMER")
    p.emit(control.bra(consumer).guarded(~is_producer))
    p.emit(memory.stg(GMem(md, mine), tid))
    one = p.r("one")
    p.emit(alu.mov(one, 1))
    if release:
        flags.red_release(p, "ADD", GMem(md, cptr), one)
    else:
        p.emit(memory.red("ADD", GMem(md, cptr), one))
    p.emit(control.exit_())
    p.label(consumer)
    if acquire:
        flags.spin_wait(p, GMem(md, cptr), 1)
    else:
        ns, v, again = p.r("ns"), p.r("seen"), p.p("again")
        poll = p.fresh_label("POLL")
        p.emit(alu.mov(ns, 32))
        p.label(poll)
        p.emit(memory.ldg_strong(v, GMem(md, cptr)))
        p.emit(alu.isetp("LT", again, v, 1))
        p.emit(control.bra(poll).guarded(again))
    got = p.r("got")
    p.emit(memory.ldg(got, GMem(md, mine)))
    p.emit(control.exit_())
    return p


def test_release_then_acquire_orders_the_data() -> None:
    p = producer_consumer()
    rep = check_kernel(p.kernel(), p.coloured())
    assert rep.ok, rep.text()


@pytest.mark.parametrize("acquire,release", [(False, True), (True, False)])
def test_a_missing_acquire_or_release_is_reported(acquire: bool, release: bool) -> None:
    p = producer_consumer(acquire, release)
    rep = check_kernel(p.kernel(), p.coloured())
    assert rep.problems.count("order") > 0, rep.text()


def test_the_spin_wait_lifts_to_a_relaxed_poll_and_a_fence() -> None:
    ptx = lift(producer_consumer().kernel())
    poll = ptx[ptx.index("POLL"):]
    assert "ld.relaxed.gpu.global.b32" in poll and "nanosleep.u32" in ptx
    assert "fence.acq_rel.gpu;" in poll  # the acquire after the loop: PTX's fence-based acquire
    assert "red.relaxed.gpu.global.add.u32" in ptx and ptx.index("fence.acq_rel.gpu") < ptx.index("red.relaxed")


def test_load_acquire_and_atomic_orders_lift_as_ptx_spells_them() -> None:
    p = Program("orders", "sm_90a", threads=32)
    c = p.param("ctr", "u64")
    p.global_buffer("ctr", Layout(4, 4), "u32", source="ctr")
    md, ptr = p.urvec("memdesc", 2), p.rvec("ptr", 2)
    p.emit(alu.uldc(md, CBank(0, p.target.memdesc), p.sm))
    p.emit(alu.ldc(ptr, c.cbank()))
    v, d = p.r("v"), p.r("d")
    flags.load_acquire(p, v, GMem(md, ptr))
    flags.atomic(p, "ADD", d, GMem(md, ptr, 4), v, order="acquire")
    flags.atomic(p, "EXCH", d, GMem(md, ptr, 8), v, order="acq_rel")
    flags.store_release(p, GMem(md, ptr, 12), d)
    p.emit(sync.membar("GPU"))
    p.emit(control.exit_())
    ptx = lift(p.kernel())
    assert "ld.acquire.gpu.global.b32" in ptx
    assert "atom.acquire.gpu.global.add.u32" in ptx and "atom.acquire.gpu.global.exch.b32" in ptx
    assert "st.relaxed.gpu.global.b32" in ptx
    rep = check_kernel(p.kernel(), p.coloured())
    assert rep.ok, rep.text()
