"""mbarriers (init, arrive, expect_tx, parity wait, invalidate), lane election, named and cluster
barriers, fences and the dependent-launch pair.

A wait (`SYNCS.PHASECHK` followed by its loop's branch back) that does not pass blocks the warp on
the barrier; the barrier's next phase wakes it. Passing a wait hands the warp the clocks of the
phase's arrivals (and of the copies that completed on it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np

from warpy.isa.values import Val, first
from warpy.isa.operands import URVec, elem_name
from warpy.isa.families import sync as isa
from warpy.check.semantics import BLOCK, semantics
from warpy.check.state import (BLOCKED, EXITED, RUNS, VC, Agent, BarrierWait, Cluster, Cta, Lanes, MBarWait, NamedBarrier,
                               NamedGen, Warp, join)

if TYPE_CHECKING:
    from warpy.check.code import Compiled
    from warpy.check.machine import Machine


def _lanes_n(lanes: Lanes) -> int:
    return 32 if lanes is None else int(np.count_nonzero(lanes))


def _addrs(v: Val, lanes: Lanes) -> list[int]:
    if isinstance(v, np.ndarray):
        vv = v if lanes is None else v[lanes]
        return [int(x) for x in np.unique(vv)]
    return [int(v)]


def _bar_short(name: str) -> str:
    return name.split("[")[0]


@semantics(isa.SYNCS_EXCH)
def _init(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    op = c.instr.ops[2]
    assert isinstance(op, URVec)
    lo = first(w.regs.get(elem_name(op.name, 0), 0), lanes)
    count = (1 << 20) - ((lo >> 1) & 0xFFFFF)
    mb = m.mbarriers
    for addr in _addrs(c.get[1](w), lanes):
        if not m.places.check_barrier_addr(w, c, addr):
            continue
        bar = mb.at(w.cta, addr)
        if bar.inited:
            m.problems.add("protocol", f"{w.cta.name} warp {w.wid} initialises {bar.name} again without "
                                       f"invalidating it (SYNCS.CCTL.IV)")
        mb.bar_access(bar, w, "w", w.vc, w.agent, w.vc[w.agent], c.mnem, "generic")
        bar.inited = True
        bar.count = count
        bar.pending = count
        bar.tx = 0
        bar.phase = 0
        bar.acc_vc = {}
        bar.release_vc = dict(w.vc)


@semantics(isa.SYNCS_ARRIVE)
def _arrive(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    mods = c.instr.mods
    n_lanes = _lanes_n(lanes)
    nval = c.get[2](w)
    tx = 0
    arrivals = 1
    if "A0TR" in mods:
        arrivals = 0
        tx = first(nval, lanes)
    elif "A1T0" in mods:
        tx = 0
    else:
        tx = first(nval, lanes)
    remote = "RED" in mods
    vc = w.tick()
    who = f"{w.cta.name} warp {w.wid}"
    mb = m.mbarriers
    for addr in _addrs(c.get[1](w), lanes):
        cta: Optional[Cta] = w.cta
        local = addr
        if remote:
            cta, local = w.cta.resolve(addr)
        if cta is None:
            m.problems.add("protocol", f"{who}: {c.mnem} arrives on cluster address 0x{addr:x}, a CTA rank the cluster has not")
            continue
        if not m.places.check_barrier_addr(w, c, local):
            continue
        bar = mb.at(cta, local)
        mb.bar_access(bar, w, "red", vc, w.agent, vc[w.agent], c.mnem, "generic")
        mb.arrive(bar, arrivals * n_lanes, tx * n_lanes, vc, who)


@semantics(isa.SYNCS_PHASECHK)
def _wait(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> Optional[int]:
    addr = first(c.get[1](w), lanes)
    par = (first(c.get[2](w), lanes) >> 31) & 1
    if not m.places.check_barrier_addr(w, c, addr):
        c.put[0](w, True, lanes)
        return None
    mb = m.mbarriers
    bar = mb.at(w.cta, addr)
    mb.bar_access(bar, w, "red", w.vc, w.agent, w.vc[w.agent], c.mnem, "generic")
    if not bar.inited:
        m.problems.add("protocol", f"{w.cta.name} warp {w.wid} waits on {bar.name}, which is not initialised")
        c.put[0](w, True, lanes)
        return None
    if bar.passed(par):
        if bar.phase > 0:
            join(w.vc, bar.release_vc, w.via, f"wait on {_bar_short(bar.name)}")
        c.put[0](w, True, lanes)
        return None
    if c.wait_loop:
        w.state = BLOCKED
        w.block = MBarWait(bar, par)
        bar.waiters.append(w)
        return BLOCK
    c.put[0](w, False, lanes)
    return None


@semantics(isa.SYNCS_CCTL)
def _inval(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    for addr in _addrs(c.get[0](w), lanes):
        if m.places.check_barrier_addr(w, c, addr):
            bar = m.mbarriers.at(w.cta, addr)
            bar.inited = False


@semantics(isa.ELECT)
def _elect(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    act = np.ones(32, dtype=bool) if lanes is None else lanes
    lane = int(np.argmax(act))
    p = np.zeros(32, dtype=bool)
    p[lane] = True
    c.put[0](w, p, lanes)
    c.put[1](w, lane, lanes)


def _bar_id(c: Compiled, w: Warp, lanes: Lanes) -> tuple[int, Optional[int]]:
    bid = first(c.get[0](w), lanes)
    cnt = first(c.get[1](w), lanes) if len(c.get) > 1 else None
    return bid, cnt


def _named_target(cta: Cta, gen: NamedGen) -> int:
    if gen.count:
        return gen.count
    return sum(32 if x.live is None else int(np.count_nonzero(x.live)) for x in cta.warps if x.state != EXITED)


def _covers(vc: VC, arrivals: list[tuple[Agent, int, VC, int]]) -> Optional[int]:
    """The warp of the first arrival `vc` is not ordered after (None: after all of them)."""
    for agent, clock, _, wid in arrivals:
        if vc.get(agent, 0) < clock:
            return wid
    return None


def _named_arrive(m: Machine, w: Warp, c: Compiled, lanes: Lanes, waits: bool) -> Optional[tuple[NamedGen, bool]]:
    """The warp's arrival (its running lanes' threads) at the generation it belongs to; None when
    the barrier cannot be used (a bad count), else the generation and whether it has completed. A
    generation completes once its threads are in and those before it completed."""
    bid, cnt = _bar_id(c, w, lanes)
    who = f"{w.cta.name} warp {w.wid}"
    if bid > 15:
        m.problems.add("protocol", f"{who}: {c.mnem} names barrier {bid}; a CTA has barriers 0..15")
        return None
    if cnt is not None and (cnt <= 0 or cnt % 32):
        m.problems.add("protocol", f"{who}: {c.mnem} counts {cnt} threads on barrier {bid}: a count is a positive "
                                   f"multiple of 32 (whole warps arrive)")
        return None
    nb = w.cta.named.get(bid)
    if nb is None:
        nb = w.cta.named[bid] = NamedBarrier()
    g = nb.next_of.get(w.gid, 0)
    nb.next_of[w.gid] = g + 1
    if g < nb.done:  # its generation completed without it: more threads arrive than the count
        m.problems.add("named", f"{w.cta.name}: named barrier {bid} generation {g}: warp {w.wid} arrives after it "
                                f"completed with {nb.last_arrived} threads (more threads arrive than its count: a short "
                                f"count, or one id two groups of warps share; which generation an arrival joins then "
                                f"depends on how the warps run)")
        done = NamedGen()
        join(w.vc, nb.last_vc)
        return done, True
    gen = nb.gen(g)
    if cnt is not None:
        if gen.count and gen.count != cnt:
            m.problems.add("named", f"{w.cta.name}: named barrier {bid} generation {g}: warps arrive counting {gen.count} "
                                    f"and {cnt} threads")
        gen.count = cnt
    vc = w.tick()
    gen.arrived += _lanes_n(lanes)
    join(gen.vc, vc)
    gen.arrivals.append((w.agent, vc[w.agent], vc, w.wid))
    if g > 0 and nb.done >= g:  # the generation before completed: this arrival must come after all of it
        prev = nb.done_arrivals.get(g - 1)
        if prev is not None:
            _after_gen(m, w.cta, bid, g, w.agent, w.wid, vc, prev)
    if waits:
        gen.waiting.append(w)
    _complete(m, w.cta, bid, nb)
    return gen, nb.done > g


def _complete(m: Machine, cta: Cta, bid: int, nb: NamedBarrier) -> None:
    """Complete, in order, every generation whose threads are in."""
    while True:
        gen = nb.gens.get(nb.done)
        if gen is None:
            return
        target = _named_target(cta, gen)
        if gen.arrived < target:
            return
        if gen.arrived > target:
            m.problems.add("named", f"{cta.name}: named barrier {bid} generation {nb.done}: {gen.arrived} threads arrive, "
                                    f"it counts {target} (the extra ones complete it early or spill into the next "
                                    f"generation, as the warps happen to run)")
        for x in gen.waiting:
            join(x.vc, gen.vc, x.via, f"named barrier {bid}" if bid else "CTA barrier")
            if x.state == BLOCKED:
                x.groups[0].pc += 1
                x.state = RUNS
                x.block = None
        del nb.gens[nb.done]
        nb.done_arrivals = {nb.done: gen.arrivals}
        nb.last_arrived, nb.last_vc = gen.arrived, gen.vc
        nb.done += 1
        nxt = nb.gens.get(nb.done)
        if nxt is not None:  # arrivals that came early: each must be ordered after all of this generation
            for agent, _, vc, wid in nxt.arrivals:
                _after_gen(m, cta, bid, nb.done, agent, wid, vc, gen.arrivals)


def _after_gen(m: Machine, cta: Cta, bid: int, g: int, agent: Agent, wid: int, vc: VC,
               prev: list[tuple[Agent, int, VC, int]]) -> None:
    """Warp `wid`'s arrival at generation g must be ordered after every other warp's arrival at
    generation g - 1, or it may land while that one is still open."""
    miss = _covers(vc, [a for a in prev if a[0] != agent])
    if miss is not None:
        m.problems.add("named", f"{cta.name}: named barrier {bid}: warp {wid}'s arrival {g + 1} is not ordered after "
                                f"warp {miss}'s arrival {g} (generation {g - 1} may still be open when it lands: on the "
                                f"GPU it would count toward that one)")


def named_barrier_recheck(m: Machine, cta: Cta) -> None:
    """A warp exited: a barrier for the whole CTA may now have every thread it waits for."""
    for bid, nb in list(cta.named.items()):
        _complete(m, cta, bid, nb)


@semantics(isa.BAR_SYNC)
def _bar_sync(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> Optional[int]:
    got = _named_arrive(m, w, c, lanes, waits=True)
    if got is None or got[1]:
        return None  # unusable, or completed by this very arrival (the warp goes on)
    gen = got[0]
    bid, _ = _bar_id(c, w, lanes)
    w.state = BLOCKED
    w.block = BarrierWait("named", f"named barrier {bid} ({gen.arrived} of {_named_target(w.cta, gen)} threads arrived)")
    return BLOCK


@semantics(isa.BAR_ARV)
def _bar_arv(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    _named_arrive(m, w, c, lanes, waits=False)


def cluster_barrier_check(cl: Cluster) -> None:
    """Every warp of the cluster still running has arrived: the barrier's phase completes."""
    live = [x for cta in cl.ctas for x in cta.warps if x.state != EXITED]
    if cl.bar_arrived and all(x.gid in cl.bar_arrived for x in live):
        cl.bar_release = cl.bar_vc
        cl.bar_vc = {}
        cl.bar_arrived = set()
        cl.bar_phase += 1
        for x in live:
            if x.state == BLOCKED and isinstance(x.block, BarrierWait) and x.block.kind == "cluster":
                x.state = RUNS
                x.block = None


@semantics(isa.UCGABAR_ARV)
def _cl_arrive(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    cl = w.cta.cluster
    if w.gid in cl.bar_arrived:
        m.problems.add("protocol", f"{w.cta.name} warp {w.wid} arrives twice at the cluster barrier")
    cl.bar_arrived.add(w.gid)
    w.cl_phase = cl.bar_phase
    join(cl.bar_vc, w.tick())
    cluster_barrier_check(cl)


@semantics(isa.UCGABAR_WAIT)
def _cl_wait(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> Optional[int]:
    cl = w.cta.cluster
    if w.cl_phase < 0:
        m.problems.add("protocol", f"{w.cta.name} warp {w.wid} waits at the cluster barrier without arriving")
        return None
    if cl.bar_phase > w.cl_phase:
        join(w.vc, cl.bar_release, w.via, "cluster barrier")
        w.cl_phase = -1
        return None
    w.state = BLOCKED
    w.block = BarrierWait("cluster", "the cluster barrier")
    return BLOCK


@semantics(isa.NANOSLEEP, isa.PREEXIT)
def _nothing(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    return None


@semantics(isa.FENCE_VIEW_ASYNC)
def _fence_async(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    """`.S` (fence.proxy.async.shared::cta): this warp's generic shared-memory writes so far become
    visible to the async proxy. `.G` (fence.proxy.async.global) orders global memory only: no
    shared-memory write."""
    if "S" in c.instr.mods:
        now = w.vc[w.agent]
        for a in w.unfenced:
            if not a.fenced:  # (a later fence must not re-stamp an access an earlier one already ordered)
                a.fenced = True
                a.fence_clock = now
        w.unfenced = []


@semantics(isa.FENCE_MBARRIER_INIT)
def _fence_init(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    """fence.mbarrier_init: this thread's barrier inits become visible to the async proxy (and cluster)."""
    now = w.vc[w.agent]
    for a in w.unfenced_init:
        if not a.fenced:
            a.fenced = True
            a.fence_clock = now
    w.unfenced_init = []


@semantics(isa.MEMBAR)
def _membar(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    if "GPU" in c.instr.mods or "SYS" in c.instr.mods:
        for a in w.gunfenced:
            a.gpu_fenced = True
        w.gunfenced = []
        w.fenced_vc = dict(w.vc)  # release: a flag raised from here on hands this over
        if w.acquired:  # acquire: what GPU-scope flags this warp read released
            join(w.vc, w.acquired, w.via, "GPU-scope flag")
            w.acquired = {}


@semantics(isa.CCTL)
def _cctl(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    """The acquire after a GPU-scope load or atomic: what the flags it read released is now ordered
    before the warp (as a `MEMBAR.*.GPU` acquires; CCTL.IVALL releases nothing)."""
    if w.acquired:
        join(w.vc, w.acquired, w.via, "GPU-scope flag")
        w.acquired = {}


@semantics(isa.ACQBULK)
def _acqbulk(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    w.acq_done = True
