"""Lift rules of the sync family: mbarriers, lane election, named and cluster barriers, fences,
sleeps and the dependent-launch pair.

A `NANOSLEEP` that directly follows a `SYNCS.PHASECHK.TRANS64.TRYWAIT done, ...` and is guarded by
`!done` (the back-off of a wait loop) is not lifted on its own: the driver folds it into the
try-wait as its suspend-time hint (`mbarrier.try_wait.parity ... , hint`), which ptxas turns back
into `NANOSLEEP.SYNCS` on the retry path."""

from __future__ import annotations

from typing import Optional

from warpy.isa.instr import Instr
from warpy.isa.operands import Imm
from warpy.lift.families._ctx import LiftContext, Rule
from warpy.isa.families import sync as isa
from warpy.lift.families._ctx import rule


@rule(isa.SYNCS_EXCH)
def _init(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    old, bar, init = i.ops
    if not c.is_zero(old):
        raise c.error("mbarrier.init returns nothing: the first operand must be URZ")
    lo = c.elems(init, 2)[0]
    # the packed word holds 2^20 - count at bit 1 (and bit 43): recover the count
    t = c.tmp()
    c.emit(f"shr.u32 {t}, {lo}, 1")
    c.emit(f"and.b32 {t}, {t}, 0xFFFFF")
    c.emit(f"sub.u32 {t}, 0x100000, {t}")
    c.emit(f"mbarrier.init.shared::cta.b64 {c.smem_addr(bar)}, {t}")


def _state(c: LiftContext, op: object) -> Optional[str]:
    return None if c.is_zero(op) else c.tmp("td")


@rule(isa.SYNCS_ARRIVE)
def _arrive(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    state, bar, n = i.ops
    remote = "RED" in rest
    addr = c.smem_addr(bar)
    st = _state(c, state)
    sink = st or "_"
    tx = None if c.is_zero(n) else c.src(n)
    if "A0TR" in rest:  # expect_tx only, no arrival
        c.emit(f"mbarrier.expect_tx.relaxed.{'cluster.shared::cluster' if remote else 'cta.shared::cta'}.b64 {addr}, {tx or 0}")
        return
    # a remote arrive is the bare SYNCS.ARRIVE.TRANS64.RED.A1T0: `mbarrier.arrive.shared::cluster` (the
    # default .release.cta, as CUTLASS's ClusterBarrier::arrive(cta_id) writes it). `.release.cluster`
    # would make ptxas put MEMBAR.ALL.CTA; MEMBAR.ALL.GPU; ERRBAR; CGAERRBAR before it, which the
    # text does not say (docs/toolchain.md); a program that needs such a fence writes it.
    space = "shared::cluster" if remote else "shared::cta"
    if "A1T0" in rest or tx is None:
        c.emit(f"mbarrier.arrive.{space}.b64 {sink}, {addr}")
    else:
        c.emit(f"mbarrier.arrive.expect_tx.{space}.b64 {sink}, {addr}, {tx}")
    if st is not None:
        c.emit(f"cvt.u32.u64 {c.dst(state)}, {st}")


def lift_trywait(c: LiftContext, i: Instr, rest: tuple[str, ...], hint: Optional[str] = None) -> None:
    done, bar, par = i.ops
    addr = c.smem_addr(bar)
    if c.is_zero(par):
        ph = "0"
    else:
        ph = c.tmp()
        c.emit(f"shr.u32 {ph}, {c.src(par)}, 31")  # the parity lives in bit 31
    if "TRYWAIT" in rest:
        h = f", {hint}" if hint is not None else ""
        c.emit(f"mbarrier.try_wait.parity.shared::cta.b64 {c.pred_dst(done)}, {addr}, {ph}{h}")
    else:
        c.emit(f"mbarrier.test_wait.parity.shared::cta.b64 {c.pred_dst(done)}, {addr}, {ph}")


@rule(isa.SYNCS_PHASECHK)
def _wait(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    lift_trywait(c, i, rest)


@rule(isa.SYNCS_CCTL)
def _inval(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    c.emit(f"mbarrier.inval.shared::cta.b64 {c.smem_addr(i.ops[0])}")


@rule(isa.ELECT)
def _elect(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    p, lane, mask = i.ops
    if not c.is_true(mask):
        raise c.error("ELECT's lane mask must be PT")
    m = c.tmp()
    c.emit(f"activemask.b32 {m}")
    d = "_" if c.is_zero(lane) else c.dst(lane)
    c.emit(f"elect.sync {d}|{c.pred_dst(p)}, {m}")


@rule(isa.BAR_SYNC, isa.BAR_ARV)
def _bar_sync(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    args = ", ".join(c.src(o) for o in i.ops)
    c.emit(f"barrier.sync.aligned {args}" if i.name == "BAR" and "SYNC" in i.mods else f"barrier.arrive.aligned {args}")


@rule(isa.UCGABAR_ARV)
def _cluster_arrive(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    c.emit("barrier.cluster.arrive.release.aligned")


@rule(isa.UCGABAR_WAIT)
def _cluster_wait(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    c.emit("barrier.cluster.wait.acquire.aligned")


@rule(isa.NANOSLEEP)
def _nanosleep(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    ns = i.ops[0]
    c.emit(f"nanosleep.u32 {c.src(ns) if not isinstance(ns, Imm) else ns.value}")


@rule(isa.FENCE_VIEW_ASYNC)
def _fence_async(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    if "T" in rest:  # (lifted as .global once: a fence the text did not have)
        raise c.error("FENCE.VIEW.ASYNC.T has no PTX of its own: ptxas emits it after a tcgen05.st; "
                      "write the tcgen05 wait or fence the kernel needs instead")
    c.emit("fence.proxy.async.shared::cta" if "S" in rest else "fence.proxy.async.global")


@rule(isa.FENCE_MBARRIER_INIT)
def _fence_init(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    c.emit("fence.mbarrier_init.release.cluster")


@rule(isa.MEMBAR)
def _membar(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    sem = "sc" if "SC" in rest else "acq_rel"
    scope = {"CTA": "cta", "GPU": "gpu", "SYS": "sys"}[rest[-1]]
    c.emit(f"fence.{sem}.{scope}")


@rule(isa.CCTL)
def _cctl(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    """`CCTL.IVALL` right after a GPU-scope load or atomic makes it the acquire PTX spells
    `ld.acquire.gpu` / `atom.acquire.gpu` (ptxas prints the pair back); elsewhere (after a spin loop's
    branch) it is the fence-based acquire `fence.acq_rel.gpu` (ptxas: MEMBAR.ALL.GPU ... CCTL.IVALL)."""
    for k in range(len(c.lines) - 1, -1, -1):
        ln = c.lines[k].strip()
        if not ln or ln.startswith("//"):
            continue
        body = ln.split(" ", 1)[1] if ln.startswith("@") else ln
        if body.startswith(("ld.relaxed.gpu.", "atom.relaxed.gpu.")):
            c.lines[k] = c.lines[k].replace(".relaxed.gpu.", ".acquire.gpu.", 1)
            c.lines.append("    // (CCTL.IVALL: the acquire of the line above)")
            return
        break
    c.emit("fence.acq_rel.gpu")


@rule(isa.ACQBULK)
def _acqbulk(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    c.emit("griddepcontrol.wait")


@rule(isa.PREEXIT)
def _preexit(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    c.emit("griddepcontrol.launch_dependents")
