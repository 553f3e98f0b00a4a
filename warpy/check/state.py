"""What every part of the host checker shares: the simulated launch's clusters, CTAs and warps,
vector clocks, and the problems found (kept as counts of distinct messages).

A warp holds its registers (`warpy.isa.values` lane values), its divergent lane groups, its vector
clock and the books the tensor-core, bulk-copy and fence models keep on it; a CTA its named
barriers, shared-memory bytes (with values), tensor memory and tensor-core queue; a cluster its
cluster barrier and cluster-launch-control count. The models that act on them live in their own
modules (`schedule`, `happens_before`, `mbarrier`, `global_memory`, `flags`) and in the opcode
families (`warpy.check.families`).

Vector clocks are dicts `agent -> clock`. Agents: each warp (`("w", cta, warp)`), each warp's
wgmma queue (`("wg", cta, warp)`, clock = group number), each CTA's tensor-core queue
(`("tc", cta)`, clock = MMAs issued), each warp's bulk-store groups (`("bulk", cta, warp)`), and
each mbarrier (`("bar", cta, addr)`, clock = phases completed): a copy-engine transfer's writes
are stamped with the barrier phase they complete, so whoever has seen that phase complete is
ordered after them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Union

import numpy as np

from warpy.isa.values import Val

if TYPE_CHECKING:
    from warpy.check.happens_before import Access
    from warpy.check.mbarrier import MBar

Agent = Union[tuple[str, int, int], tuple[str, int]]  # ("w" | "wg" | "bulk" | "bar", cta, warp or address) or ("tc", cta)
VC = dict[Agent, int]  # agent -> clock
Lanes = Optional[np.ndarray]  # the lanes taking part: None for every lane of the group, else a bool vector

#: a warp's states
RUNS, BLOCKED, EXITED = 0, 1, 2


def join(dst: VC, src: VC, via: Optional[dict[Agent, str]] = None, how: str = "") -> None:
    for k, v in src.items():
        if dst.get(k, 0) < v:
            dst[k] = v
            if via is not None:
                via[k] = how


class LaneGroup:
    """Lanes of a warp at one pc: `mask` None for every lane the warp has, else a bool vector."""

    __slots__ = ("pc", "mask")

    def __init__(self, pc: int, mask: Lanes) -> None:
        self.pc = pc
        self.mask = mask


class MBarWait:
    """A warp blocked on an mbarrier until the phase of parity `parity` completes."""

    __slots__ = ("bar", "parity")

    def __init__(self, bar: MBar, parity: int) -> None:
        self.bar = bar
        self.parity = parity


class FlagWait:
    """A warp blocked in a loop that waits on global memory (`warpy.check.flags`) until a simulated
    write (or the rest of the grid) changes a word it polled: the words, the loop's branch back, and
    what a message calls the first word."""

    __slots__ = ("addrs", "back", "where")

    def __init__(self, addrs: tuple[int, ...], back: int, where: str) -> None:
        self.addrs = addrs
        self.back = back
        self.where = where

    def __str__(self) -> str:
        return f"{self.where} (the loop ending at line {self.back + 1} polls it and nothing writes it)"


class BarrierWait:
    """A warp blocked at a named barrier (`kind` "named") or the cluster barrier ("cluster")."""

    __slots__ = ("kind", "what")

    def __init__(self, kind: str, what: str) -> None:
        self.kind = kind
        self.what = what

    def __str__(self) -> str:
        return self.what


Block = Union[MBarWait, FlagWait, BarrierWait]
#: an accumulator's provenance (`warpy.check.provenance`): A's map, first row, rows; B's map, first row, rows;
#: the K it has summed, a bit per 32-byte granule of A's rows (-1: not known)
Tag = tuple[str, int, int, str, int, int, int]
Traced = Union[int, tuple[int, ...]]  # what the colouring check compares of one line's run


class Warp:
    """A warp: `gid` its index in the launch, `wid` in its CTA; `state` RUNS, BLOCKED (`block` says on
    what) or EXITED; its lane groups (the first runs), registers, vector clock (`via`: what last
    raised each agent's entry, for `warpy hb`), and the books of its asynchronous units."""

    __slots__ = ("gid", "cta", "wid", "regs", "groups", "state", "block", "vc", "via", "agent", "wg_committed",
                 "wg_open", "wg_retired", "pending", "bulk_committed", "bulk_open", "bulk_retired", "acq_done",
                 "unfenced", "gunfenced", "trace", "cl_phase", "unfenced_init", "acquired", "fenced_vc", "exit_vc",
                 "defined", "clock_n", "live", "wg_dirty", "wg_fenced", "polls", "tvc", "t_agent", "t_clock",
                 "t_open", "tags")

    def __init__(self, gid: int, cta: Cta, wid: int) -> None:
        self.gid = gid
        self.cta = cta
        self.wid = wid
        self.regs: dict[str, Val] = {}
        self.groups: list[LaneGroup] = [LaneGroup(0, None)]
        self.state = RUNS
        self.block: Optional[Block] = None
        self.agent: Agent = ("w", cta.index, wid)
        self.vc: VC = {self.agent: 1}
        self.via: dict[Agent, str] = {}
        self.wg_committed = 0
        self.wg_open = False
        self.wg_retired = 0
        # registers an asynchronous unit still writes: (base, lo, hi, wgmma group or -1: a tmem load, op)
        self.pending: list[tuple[str, int, int, int, str]] = []
        self.bulk_committed = 0
        self.bulk_open = False
        self.bulk_retired = 0
        self.acq_done = False
        self.unfenced: list[Access] = []  # generic-proxy shared writes no proxy fence has covered yet
        self.gunfenced: list[Access] = []  # global writes no GPU-scope fence has covered yet
        self.unfenced_init: list[Access] = []  # barrier inits no fence.mbarrier_init has covered yet
        self.trace: list[tuple[int, Traced]] = []
        self.cl_phase = -1
        self.acquired: VC = {}  # clocks read through GPU-scope flags, joined at the next MEMBAR.GPU
        self.fenced_vc: VC = {}  # this warp's clock at its last MEMBAR.GPU: what a flag it raises releases
        self.exit_vc: Optional[VC] = None
        self.defined: set[str] = set()  # registers an instruction has written (in some lane)
        self.clock_n = 0
        self.live: Optional[np.ndarray] = None  # the lanes a partial last warp has (None: all 32)
        # registers a wgmma accesses that another line touched since the warp's last wgmma fence: name -> pc
        self.wg_dirty: dict[str, int] = {}
        self.wg_fenced = False  # the warp has run a wgmma fence
        self.polls: dict[int, dict[int, int]] = {}  # a wait loop's poll line -> the words it read, their versions
        # tcgen05 ordering (`warpy.check.families.tcgen05`): the clocks the warp's tensor-memory work is
        # ordered after (its view, joined from `vc` at tcgen05.fence::after_thread_sync), its own
        # tcgen05 operations as an agent, and those not yet complete (clock, "ld" | "st")
        self.tvc: VC = {}
        self.t_agent: Agent = ("t", cta.index, wid)
        self.t_clock = 0
        self.t_open: list[tuple[int, str]] = []
        self.tags: dict[str, Tag] = {}  # registers holding (a value computed from) an accumulator: its provenance

    def clock_reads(self) -> int:
        """What the warp's next read of a clock register gives: it only grows."""
        self.clock_n += 1
        return (1000 * self.clock_n) & 0xFFFFFFFF

    def tick(self) -> VC:
        """A release: a copy of this warp's clock, then the warp's own clock moves on."""
        snap = dict(self.vc)
        self.vc[self.agent] = self.vc[self.agent] + 1
        return snap


class NamedGen:
    """One generation of a named barrier: threads arrived, the count it waits for (0: every thread
    of the CTA still running, decided at release), the arrivals' clocks (joined, and each arrival's
    agent and clock) and the warps waiting."""

    __slots__ = ("arrived", "count", "vc", "waiting", "arrivals")

    def __init__(self) -> None:
        self.arrived = 0
        self.count = 0
        self.vc: VC = {}
        self.waiting: list[Warp] = []
        self.arrivals: list[tuple[Agent, int, VC, int]] = []  # per arrival: its warp's agent, clock, vector clock, index


class NamedBarrier:
    """A named barrier of a CTA, by generations. A warp's k-th arrival belongs to generation k (the
    meaning the program gives its arrivals), whatever order the warps run in; a generation
    completes in order, once its threads are in. What would make the GPU put an arrival into a
    different generation (more threads than the count; an arrival that is not ordered after every
    arrival of the generation before, so it may land while that one is still open) is reported, so
    the verdict does not depend on the interleaving."""

    __slots__ = ("gens", "done", "next_of", "done_arrivals", "last_arrived", "last_vc")

    def __init__(self) -> None:
        self.gens: dict[int, NamedGen] = {}
        self.done = 0  # generations completed
        self.next_of: dict[int, int] = {}  # warp gid -> the generation its next arrival belongs to
        self.done_arrivals: dict[int, list[tuple[Agent, int, VC, int]]] = {}  # the last completed generation's arrivals
        self.last_arrived = 0  # the last completed generation's threads and clocks
        self.last_vc: VC = {}

    def gen(self, g: int) -> NamedGen:
        st = self.gens.get(g)
        if st is None:
            st = self.gens[g] = NamedGen()
        return st


TMEM_LANES, TMEM_COLUMNS = 128, 512


class Cta:
    """A CTA: `index` in the simulated launch, `linear` in the grid, `rank` in its cluster."""

    def __init__(self, index: int, ctaid: tuple[int, int, int], rank: int, cluster: Cluster, linear: int) -> None:
        self.index = index
        self.ctaid = ctaid
        self.rank = rank
        self.cluster = cluster
        self.linear = linear  # its index in the grid, x fastest
        self.name = f"CTA {linear}"
        self.warps: list[Warp] = []
        self.named: dict[int, NamedBarrier] = {}
        self.smem: Optional[np.ndarray] = None  # with values: the shared-memory bytes
        # without values, the few shared words the machine itself writes (a tensor-memory
        # allocation's address, a cluster-launch-control answer), for the LDS that reads them
        self.shadow: dict[int, int] = {}
        # what the copy engine landed where (shared address -> tensor map, coordinates, bytes)
        self.landed: dict[int, tuple[str, list[int], int]] = {}
        self.tmem_cols: list[tuple[int, int]] = []  # allocations (start column, columns)
        self.tmem_written = np.zeros((TMEM_LANES, TMEM_COLUMNS), dtype=bool)  # [lane, column] an MMA (or STTM) wrote it
        self.tmem_vals: Optional[np.ndarray] = None  # with values: the tensor-memory words
        self.tmem_base = 0
        self.tc_clock = 0
        self.tc_agent: Agent = ("tc", index)
        self.relinquished = False
        self.regs: dict[int, int] = {}  # registers a thread of each warp holds after setmaxnreg (warp -> count)
        # with values: the CTA has read global memory the simulated CTAs never wrote behind a pointer
        # parameter (another CTA's partial sums), so what it writes afterwards is not known here
        self.foreign = False

    def peer(self, rank: int) -> Optional[Cta]:
        """The CTA of the cluster with that rank."""
        for c in self.cluster.ctas:
            if c.rank == rank:
                return c
        return None

    def resolve(self, addr: int) -> tuple[Optional[Cta], int]:
        """(CTA, shared address in it) of a shared::cluster address (the rank in bits 24 and up)."""
        rank = addr >> 24
        local = addr & 0xFFFFFF
        if rank == 0 and addr < (1 << 24) and len(self.cluster.ctas) == 1:
            return self, local
        return self.peer(rank), local


class Cluster:
    """A cluster: its CTAs, its barrier's arrivals and phases, and its cluster-launch-control requests."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.ctas: list[Cta] = []
        self.bar_arrived: set[int] = set()
        self.bar_vc: VC = {}
        self.bar_phase = 0
        self.bar_release: VC = {}
        self.clc_taken = 0
        self.clc_declined = False


class Problems:
    """Distinct messages by kind, with how often each was seen."""

    KINDS = ("wrong", "coloured", "named", "protocol", "memory", "order", "pdl", "data", "registers", "coverage",
             "values", "schedule")

    def __init__(self) -> None:
        self.msgs: dict[str, dict[str, int]] = {k: {} for k in self.KINDS}

    def add(self, kind: str, msg: str) -> None:
        d = self.msgs[kind]
        d[msg] = d.get(msg, 0) + 1

    def count(self, kind: str) -> int:
        return len(self.msgs[kind])

    def total(self) -> int:
        return sum(len(d) for d in self.msgs.values())
