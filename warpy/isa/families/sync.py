"""Synchronisation: mbarriers (`SYNCS.*`), lane election, named and cluster barriers, fences,
sleeps, and the dependent-launch pair (`ACQBULK`/`PREEXIT`).

mbarrier spellings, as ptxas 12.9/13 emits them for sm_90a and sm_100a alike:

| PTX | SASS |
|---|---|
| `mbarrier.init [bar], n` | `SYNCS.EXCH.64 URZ, [bar], init` (`init` a pair: the packed word) |
| `mbarrier.arrive [bar]` | `SYNCS.ARRIVE.TRANS64.A1T0 RZ, [bar], RZ` |
| `mbarrier.arrive.expect_tx [bar], n` | `SYNCS.ARRIVE.TRANS64 RZ, [bar], n` |
| `mbarrier.expect_tx [bar], n` | `SYNCS.ARRIVE.TRANS64.RED.A0TR RZ, [bar], n` |
| `mbarrier.arrive.shared::cluster [remote]` | `SYNCS.ARRIVE.TRANS64.RED.A1T0 RZ, [remote], RZ` |
| `mbarrier.try_wait.parity p, [bar], par` | `SYNCS.PHASECHK.TRANS64.TRYWAIT p, [bar], par` with the parity in bit 31 of `par` |
"""

from __future__ import annotations

from typing import Union

from warpy.isa.families._util import ins
from warpy.isa.families.base import Opcode, a
from warpy.isa.instr import Instr
from warpy.isa.operands import PT, RZ, URZ, Mem, P, R, UR, URVec

F = "sync"
W2 = lambda mods: 2  # noqa: E731

SYNCS_EXCH = Opcode("SYNCS.EXCH", F, "barrier-init", ((a("old", "UR", "d"), a("bar", "mem"), a("init", "URv", "u", W2)),),
    mods=(r"!64",), ptx="mbarrier.init.shared::cta.b64 [bar], count",
    doc="write the packed init word: pending = expected = 2^20 - count at bits 1 and 43, phase 0, tx 0")
SYNCS_ARRIVE = Opcode("SYNCS.ARRIVE", F, "barrier-arrive", ((a("state", "R", "d"), a("bar", "mem"), a("n", "R|UR")),),
    mods=(r"!TRANS64", r"RED", r"A1T0|A0TR"),
    ptx="mbarrier.arrive[.expect_tx] / mbarrier.expect_tx / remote arrive (.RED: a shared::cluster address)",
    doc="no suffix: one arrival and expect n transaction bytes; .A1T0: one arrival; .A0TR: expect n bytes only")
SYNCS_PHASECHK = Opcode("SYNCS.PHASECHK", F, "barrier-wait", ((a("done", "P", "d"), a("bar", "mem"), a("parity", "R")),),
    mods=(r"!TRANS64", r"TRYWAIT"), ptx="mbarrier.try_wait.parity / test_wait.parity",
    doc="done = the phase of parity (parity >> 31) has completed")
SYNCS_CCTL = Opcode("SYNCS.CCTL", F, "barrier-inval", ((a("bar", "mem"),),), mods=(r"!IV",), ptx="mbarrier.inval",
    doc="the barrier's word becomes ordinary shared memory")
ELECT = Opcode("ELECT", F, "elect", ((a("p", "P", "d"), a("lane", "UR", "d"), a("mask", "P")),),
    ptx="elect.sync", doc="p is true in exactly one active lane (lane: its id, or URZ)")
BAR_SYNC = Opcode("BAR.SYNC", F, "named-barrier-sync", ((a("id", "I|R"),), (a("id", "I|R"), a("count", "I|R"))),
    mods=(r"DEFER_BLOCKING",), ptx="bar.sync id[, count]",
    doc="wait until count threads (default: the CTA) have arrived at named barrier id")
BAR_ARV = Opcode("BAR.ARV", F, "named-barrier-arrive", ((a("id", "I|R"), a("count", "I|R")),), ptx="bar.arrive id, count",
    doc="arrive at named barrier id without waiting", spelling=lambda w: w[:2])
UCGABAR_ARV = Opcode("UCGABAR_ARV", F, "cluster-barrier-arrive", ((),), ptx="barrier.cluster.arrive.release.aligned",
    doc="arrive at the cluster barrier (release)")
UCGABAR_WAIT = Opcode("UCGABAR_WAIT", F, "cluster-barrier-wait", ((),), ptx="barrier.cluster.wait.acquire.aligned",
    doc="wait for the cluster barrier's phase (acquire)")
NANOSLEEP = Opcode("NANOSLEEP", F, "sleep", ((a("ns", "I|R"),),), mods=(r"SYNCS",), ptx="nanosleep.u32 / try_wait suspend hint",
    doc="sleep about ns nanoseconds (.SYNCS: the back-off of an mbarrier wait loop)")
FENCE_VIEW_ASYNC = Opcode("FENCE.VIEW.ASYNC", F, "fence", ((),), mods=(r"!S|G|T",), ptx="fence.proxy.async.shared::cta (.S) / .global (.G); .T: ptxas emits it around tcgen05 stores",
    doc="order this thread's generic-proxy accesses before later async-proxy (TMA, tensor core) ones")
FENCE_MBARRIER_INIT = Opcode("FENCE.MBARRIER_INIT", F, "fence", ((),), ptxas_emits=False, ptx="fence.mbarrier_init.release.cluster",
    doc="make mbarrier inits visible to the cluster and the async proxy; ptxas emits no instruction of this name")
MEMBAR = Opcode("MEMBAR", F, "fence", ((),), mods=(r"!ALL|SC", r"!CTA|GPU|SYS"), ptx="fence.acq_rel.cta/.gpu/.sys",
    doc="memory fence at the scope")
CCTL = Opcode("CCTL", F, "fence", ((),), mods=(r"!IVALL",), ptx="the .acquire of ld/atom.acquire.gpu (else fence.acq_rel.gpu)",
    doc="invalidate the L1: after a GPU-scope load or atomic, what its writer released becomes visible (acquire)")
ACQBULK = Opcode("ACQBULK", F, "dependent-wait", ((),), ptx="griddepcontrol.wait",
    doc="wait until the grids this one depends on have completed and their memory is visible")
PREEXIT = Opcode("PREEXIT", F, "dependent-launch", ((),), ptx="griddepcontrol.launch_dependents",
    doc="let the dependent grid launch")

OPCODES: list[Opcode] = [
    SYNCS_EXCH, SYNCS_ARRIVE, SYNCS_PHASECHK, SYNCS_CCTL, ELECT, BAR_SYNC, BAR_ARV, UCGABAR_ARV,
    UCGABAR_WAIT, NANOSLEEP, FENCE_VIEW_ASYNC, FENCE_MBARRIER_INIT, MEMBAR, CCTL, ACQBULK, PREEXIT,
]


def mbar_init(bar: Mem, init: URVec) -> Instr:
    return ins(SYNCS_EXCH, "EXCH.64", URZ, bar, init)


def arrive(bar: Mem) -> Instr:
    return ins(SYNCS_ARRIVE, "ARRIVE.TRANS64.A1T0", RZ, bar, RZ)


def arrive_remote(bar: Mem) -> Instr:
    return ins(SYNCS_ARRIVE, "ARRIVE.TRANS64.RED.A1T0", RZ, bar, RZ)


def arrive_expect_tx(bar: Mem, nbytes: Union[R, UR]) -> Instr:
    return ins(SYNCS_ARRIVE, "ARRIVE.TRANS64", RZ, bar, nbytes)


def expect_tx(bar: Mem, nbytes: Union[R, UR]) -> Instr:
    return ins(SYNCS_ARRIVE, "ARRIVE.TRANS64.RED.A0TR", RZ, bar, nbytes)


def try_wait(done: P, bar: Mem, parity: R) -> Instr:
    return ins(SYNCS_PHASECHK, "PHASECHK.TRANS64.TRYWAIT", done, bar, parity)


def elect(p: P, lane: UR = URZ) -> Instr:
    return ins(ELECT, "", p, lane, PT)


def bar_sync(bid: int, count: int | None = None) -> Instr:
    if count is None:
        return ins(BAR_SYNC, "SYNC.DEFER_BLOCKING", bid)
    return ins(BAR_SYNC, "SYNC.DEFER_BLOCKING", bid, count)


def bar_arv(bid: int, count: int) -> Instr:
    return ins(BAR_ARV, "ARV", bid, count)


def cluster_arrive() -> Instr:
    return ins(UCGABAR_ARV, "")


def cluster_wait() -> Instr:
    return ins(UCGABAR_WAIT, "")


def nanosleep(ns: Union[int, R], syncs: bool = False) -> Instr:
    """Sleep about ns nanoseconds (an immediate, or a register: a back-off that grows)."""
    return ins(NANOSLEEP, "SYNCS" if syncs else "", ns)


def fence_proxy_async() -> Instr:
    return ins(FENCE_VIEW_ASYNC, "VIEW.ASYNC.S")


def fence_proxy_async_global() -> Instr:
    """fence.proxy.async.global: generic-proxy global writes before the copy engine reads them."""
    return ins(FENCE_VIEW_ASYNC, "VIEW.ASYNC.G")


def fence_mbarrier_init() -> Instr:
    return ins(FENCE_MBARRIER_INIT, "MBARRIER_INIT")


def membar(scope: str = "CTA") -> Instr:
    return ins(MEMBAR, f"ALL.{scope}")


def cctl_ivall() -> Instr:
    """The acquire half of a GPU-scope load or atomic: `LDG.E.STRONG.GPU` (or `ATOMG`) then `CCTL.IVALL`
    is what ptxas emits for `ld.acquire.gpu` (`atom.acquire.gpu`)."""
    return ins(CCTL, "IVALL")


def acqbulk() -> Instr:
    return ins(ACQBULK, "")


def preexit() -> Instr:
    return ins(PREEXIT, "")


def mbar_inval(bar: Mem) -> Instr:
    return ins(SYNCS_CCTL, "CCTL.IV", bar)
