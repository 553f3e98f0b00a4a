"""Which warps run, and how: the first and last clusters of the launch (their CTAs and warps), or
every cluster (`all_ctas`), and the run loop. Warps are scheduled round-robin, a quantum of
instructions each (or, for `warpy check --seeds`, in a random order with random turns), until all
have exited or all are blocked. The lanes of a warp run together; where a branch splits them they become
lane groups, run lowest pc first and merged where they meet again.

The last cluster a launch runs is the grid's last, unless cluster launch control hands the grid's
tail to the clusters launched first (then the last of those: `resident` clusters fit at once).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable, Literal, Optional, Union

import numpy as np

from warpy.isa.text import Header
from warpy.check import obligations
from warpy.check.families.sync import cluster_barrier_check, named_barrier_recheck
from warpy.check.places import DSMEM
from warpy.check.semantics import BLOCK
from warpy.check.state import (EXITED, RUNS, TMEM_COLUMNS, TMEM_LANES, Cluster, Cta, LaneGroup, Lanes, Problems, Warp)

if TYPE_CHECKING:
    from warpy.check.code import Compiled
    from warpy.check.machine import Machine

MAX_STEPS = 50_000_000
QUANTUM = 400  # instructions a warp runs before the next one's turn

Effective = Union[Lanes, Literal[False]]  # the lanes a branch takes; False: none of them


class Scheduler:
    """The simulated clusters, CTAs and warps (`clusters`, `ctas`, `warps`), how many clusters the
    grid has and how many are resident at once, and the loop that runs them on a machine."""

    def __init__(self, h: Header, problems: Problems, *, sms: int, values: bool, uses_clc: bool,
                 all_ctas: bool = False, schedule: int = 0, chosen: Optional[list[int]] = None) -> None:
        self.problems = problems
        # schedule 0: round-robin, QUANTUM instructions a turn; another: the warps' order shuffled
        # every round and each turn's length drawn at random (`warpy check --seeds N`)
        self.rng = np.random.default_rng(schedule) if schedule else None
        g, cl = h.grid, h.cluster
        ncl = [max(1, g[d] // max(cl[d], 1)) for d in range(3)]
        total = ncl[0] * ncl[1] * ncl[2]
        per = cl[0] * cl[1] * cl[2]
        for d in range(3):
            if g[d] % max(cl[d], 1) or g[d] < cl[d]:
                problems.add("protocol", f"the grid {g} is not a whole number of clusters {cl}: the launch is refused")
                break
        self.n_clusters = total
        self.resident = max(1, min(total, sms // per))
        last = self.resident - 1 if uses_clc else total - 1
        picks = [0] if last == 0 else [0, last]
        self.launched = last + 1  # clusters the launch starts with (the rest come by cluster launch control)
        if all_ctas:  # every cluster (with cluster launch control: every one launched at first)
            picks = list(range(last + 1))
        if chosen is not None:  # these clusters only (the tile pass runs the grid a batch at a time)
            picks = chosen
        # every CTA of the grid runs here (with cluster launch control: every cluster launched at first,
        # which takes the rest over)
        self.whole = len(picks) == (min(total, self.resident) if uses_clc else total)
        self.clusters: list[Cluster] = []
        self.ctas: list[Cta] = []
        self.warps: list[Warp] = []
        self.steps = 0
        nwarps = -(-h.threads // 32)
        for ci in picks:
            cx, rest = ci % ncl[0], ci // ncl[0]
            cy, cz = rest % ncl[1], rest // ncl[1]
            cluster = Cluster(ci)
            self.clusters.append(cluster)
            for r in range(per):
                rx, rr = r % cl[0], r // cl[0]
                ry, rz = rr % cl[1], rr // cl[1]
                ctaid = (cx * cl[0] + rx, cy * cl[1] + ry, cz * cl[2] + rz)
                cta = Cta(len(self.ctas), ctaid, r, cluster, ctaid[0] + g[0] * (ctaid[1] + g[1] * ctaid[2]))
                if values:
                    cta.smem = np.zeros(DSMEM + max(h.dynsmem, 1), dtype=np.uint8)
                    cta.tmem_vals = np.zeros((TMEM_LANES, TMEM_COLUMNS), dtype=np.float32)
                cluster.ctas.append(cta)
                self.ctas.append(cta)
                for wi in range(nwarps):
                    w = Warp(len(self.warps), cta, wi)
                    live = h.threads - 32 * wi
                    if live < 32:  # a last, partial warp: its missing lanes never run
                        w.live = np.arange(32) < live
                        w.groups = [LaneGroup(0, w.live)]
                    cta.warps.append(w)
                    self.warps.append(w)

    # -- the run loop ----------------------------------------------------------------------------
    def run(self, m: Machine, progress: Optional[Callable[[str], None]], label: str) -> None:
        t0 = last = time.monotonic()
        total = 0
        warps = self.warps
        rng = self.rng
        while True:
            progressed = False
            order = warps if rng is None else [warps[k] for k in rng.permutation(len(warps))]
            for w in order:
                if w.state != RUNS:
                    continue
                n = self.run_warp(m, w, QUANTUM if rng is None else int(rng.integers(1, 2 * QUANTUM)))
                total += n
                if n:
                    progressed = True
            if not progressed:
                if all(w.state == EXITED for w in warps):
                    break
                if not any(w.state == RUNS for w in warps):
                    if m.flags.raise_outside(m, warps):
                        continue
                    obligations.hangs(warps, self.problems)
                    break
            if total > MAX_STEPS:
                self.problems.add("protocol", f"the simulation ran {MAX_STEPS} warp instructions without finishing (a livelock?)")
                break
            if progress is not None:
                now = time.monotonic()
                if now - last > 1.0:
                    last = now
                    done = sum(1 for w in warps if w.state == EXITED)
                    progress(f"{label}{total} warp instructions, {done}/{len(warps)} warps done, {now - t0:.0f} s")
        self.steps = total

    def run_warp(self, m: Machine, w: Warp, quantum: int) -> int:
        """Run the warp's first lane group up to `quantum` instructions (fewer if it blocks or exits)."""
        code = m.code.instrs
        n = 0
        check_notes = m.derived.check
        fast = not m.order.enabled
        while n < quantum:
            g = w.groups[0]
            pc, mask = g.pc, g.mask
            if pc >= len(code):
                self._exit_lanes(m, w, mask)
                if w.state == EXITED:
                    return n
                continue
            c = code[pc]
            n += 1
            lanes = mask
            if c.guard is not None:
                if not c.guard_uses <= w.defined:  # a guard nothing set: any lanes may run the line
                    m.rules.undefined(w, c, c.guard_uses - w.defined)
                gv = c.guard(w)
                if isinstance(gv, np.ndarray):
                    e2 = gv if mask is None else (gv & mask)
                    if not e2.any():
                        g.pc = pc + 1
                        self._merge(w)
                        continue
                    lanes = None if (mask is None and e2.all()) else e2
                elif not gv:
                    g.pc = pc + 1
                    self._merge(w)
                    continue
            sem = c.sem
            if sem == "branch":
                eff: Effective = lanes
                cond = c.cond
                if cond is not None:
                    cv = cond(w)
                    if isinstance(cv, np.ndarray):
                        e3 = cv if eff is None else (cv & eff)
                        eff = None if (eff is None and e3.all()) else (e3 if e3.any() else False)
                    elif not cv:
                        eff = False
                self._branch(w, g, eff, c.target)
                if c.loop is not None and eff is not False and c.loop.back == pc and m.flags.stall(m, w, c):
                    return n
                continue
            if sem == "exit":
                self._exit_lanes(m, w, lanes)
                if w.state == EXITED:
                    return n
                continue
            if w.pending and c.regids and c.sem != "mma":
                m.order.registers(w, c.regids, c.mnem)
            if not c.uses <= w.defined:
                m.rules.undefined(w, c, c.uses - w.defined)
            if c.collective:
                if c.collective == 2:
                    m.rules.warpgroup(w, c, lanes, w.live)
                else:
                    m.rules.aligned(w, c, lanes, w.live)
            if c.mma_touch:
                for r in c.mma_touch:
                    w.wg_dirty[r] = pc
            if c.trace is not None:
                w.trace.append((pc, c.trace(w, lanes)))
            if c.notes and not fast:
                regs = w.regs  # (the registers the notes' coordinates read, as they were before the line)
                before = {n: regs[n] for n in c.note_names if n in regs}
                pre = [None if c.note_modes[k] else c.get[nt.operand](w) for k, nt in enumerate(c.notes)]
                res = c.handler(m, w, c, lanes)
                if res == BLOCK:
                    return n
                check_notes(w, c, before, lanes, pre)
            else:
                res = c.handler(m, w, c, lanes)
                if res == BLOCK:
                    return n
            if c.defs:
                w.defined.update(c.defs)
                if w.tags and c.rec.key not in ("HGMMA", "QGMMA", "LDTM"):
                    _propagate(w, c)
            g.pc = pc + 1
            if len(w.groups) > 1:
                self._merge(w)
            if w.state != RUNS:
                return n
        return n

    def _branch(self, w: Warp, g: LaneGroup, eff: Effective, target: int) -> None:
        mask = g.mask
        if eff is False:
            g.pc += 1
        elif eff is None:
            g.pc = target
        else:
            rest = (~eff) if mask is None else (mask & ~eff)
            if not rest.any():
                g.pc = target
            else:
                pc = g.pc
                g.pc, g.mask = target, eff
                w.groups.append(LaneGroup(pc + 1, rest))
        self._merge(w)

    def _merge(self, w: Warp) -> None:
        gs = w.groups
        if len(gs) == 1:
            return
        gs.sort(key=lambda x: x.pc)
        out = [gs[0]]
        for x in gs[1:]:
            if x.pc == out[-1].pc:
                a, b = out[-1].mask, x.mask
                mk = None if a is None or b is None else (a | b)
                if mk is not None and mk.all():
                    mk = None
                out[-1].mask = mk
            else:
                out.append(x)
        w.groups = out

    def _exit_lanes(self, m: Machine, w: Warp, eff: Effective) -> None:
        g = w.groups[0]
        mask = g.mask
        rest: Optional[np.ndarray]
        if eff is None or eff is False:
            rest = None if eff is False else np.zeros(32, dtype=bool)
        else:
            rest = (~eff) if mask is None else (mask & ~eff)
        if rest is None:
            g.pc += 1
            return
        if not rest.any():
            w.groups.pop(0)
            if not w.groups:
                w.state = EXITED
                self._on_exit(m, w)
            return
        g.pc, g.mask = g.pc + 1, rest

    def _on_exit(self, m: Machine, w: Warp) -> None:
        if w.wg_committed > w.wg_retired:
            w.wg_retired = w.wg_committed
        w.exit_vc = dict(w.vc)
        cluster_barrier_check(w.cta.cluster)
        named_barrier_recheck(m, w.cta)


def _propagate(w: Warp, c: Compiled) -> None:
    """A value computed from a register holding (part of) an accumulator holds it too (its tag,
    `warpy.check.provenance`); any other write ends the register's tag."""
    tag = None
    if c.sem in ("alu", "shuffle"):
        tags = w.tags
        tagged = [tags[u] for u in sorted(c.uses) if u in tags]  # (sorted: the same answer every run)
        tag = tagged[0] if tagged else None
        if tag is not None and tag[6] != -1:
            if any(u not in tags for u in c.uses) or any(t[6] == -1 or t[:6] != tag[:6] for t in tagged[1:]):
                tag = tag[:6] + (-1,)  # mixed with other data (a partial sum loaded, a bias): its K is not known
            else:  # sums of one product over different K (an fp8 block's promotion): the K of both
                for t in tagged[1:]:
                    tag = tag[:6] + (tag[6] | t[6],)
    for d in c.defs:
        if tag is None:
            w.tags.pop(d, None)
        else:
            w.tags[d] = tag
