"""The mbarrier model: each barrier's expected and pending arrivals, transaction bytes and phases
completed; arrivals and completed bytes carry the clocks of whoever made them, and a completed phase
hands their join to its waiters (and wakes the warps blocked on it).

A barrier's word is memory too (`bar_access`): its init is a write, and every arrival, wait and
completion an atomic that must be ordered after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from warpy.check.happens_before import byte_mask
from warpy.check.state import BLOCKED, RUNS, Agent, Cta, Problems, VC, Warp, join

if TYPE_CHECKING:
    from warpy.check.happens_before import HappensBefore
    from warpy.check.places import Places


class MBar:
    """An mbarrier: expected arrivals, pending arrivals and transaction bytes of the current phase,
    and the number of phases completed (`phase`; its parity is the current phase's)."""

    __slots__ = ("cta", "addr", "name", "count", "pending", "tx", "phase", "acc_vc", "release_vc", "waiters",
                 "inited", "agent", "arrived_any")

    def __init__(self, cta: Cta, addr: int, name: str) -> None:
        self.cta = cta
        self.addr = addr
        self.name = name
        self.count = 0
        self.pending = 0
        self.tx = 0
        self.phase = 0
        self.acc_vc: VC = {}  # the arrivals' and completions' clocks of the current phase
        self.release_vc: VC = {}  # what the last completed phase hands its waiters
        self.waiters: list[Warp] = []
        self.inited = False
        self.agent: Agent = ("bar", cta.index, addr)
        self.arrived_any = False

    def passed(self, parity: int) -> bool:
        """A wait for the phase of this parity passes (a fresh barrier has completed parity 1)."""
        return (self.phase & 1) != parity


class MBarriers:
    def __init__(self, places: Places, order: HappensBefore, problems: Problems) -> None:
        self.places = places
        self.order = order
        self.problems = problems
        self.bars: dict[tuple[int, int], MBar] = {}

    def at(self, cta: Cta, addr: int) -> MBar:
        """The barrier at a shared address of a CTA."""
        key = (cta.index, addr)
        b = self.bars.get(key)
        if b is None:
            b = self.bars[key] = MBar(cta, addr, self.places.name("smem", cta, addr))
        return b

    def bar_access(self, bar: MBar, w: Warp, kind: str, vc: VC, agent: Agent, clock: int, op: str, proxy: str) -> None:
        """The barrier's word: its init is a write; arrivals, completions and waits are atomics that
        must come after the init (a fence.mbarrier_init and a CTA or cluster barrier between)."""
        self.order.access("smem", bar.cta, None, kind, vc, agent, clock, op, w, proxy=proxy,
                          footprint=byte_mask(bar.addr, 8))

    def arrive(self, bar: MBar, n: int, tx: int, vc: VC, who: str) -> None:
        if not bar.inited:
            self.problems.add("protocol", f"{who} arrives on {bar.name}, which is not initialised")
            return
        bar.tx += tx
        bar.pending -= n
        bar.arrived_any = True
        join(bar.acc_vc, vc)
        if bar.pending < 0:
            self.problems.add("protocol", f"{who} over-arrives on {bar.name}: {-bar.pending} more arrivals than the "
                                          f"{bar.count} its phase {bar.phase} expects")
            bar.pending = 0
        self._maybe_complete(bar)

    def complete_tx(self, bar: MBar, nbytes: int, vc: VC) -> None:
        if not bar.inited:
            self.problems.add("protocol", f"a copy completes {nbytes} bytes on {bar.name}, which is not initialised")
            return
        bar.tx -= nbytes
        join(bar.acc_vc, vc)
        self._maybe_complete(bar)

    def _maybe_complete(self, bar: MBar) -> None:
        if bar.pending == 0 and bar.tx == 0:
            rel = bar.acc_vc
            bar.phase += 1
            rel[bar.agent] = bar.phase
            bar.release_vc = rel
            bar.acc_vc = {}
            bar.pending = bar.count
            bar.arrived_any = False
            for w in bar.waiters:
                if w.state == BLOCKED:
                    w.state = RUNS
                    w.block = None
            bar.waiters = []
