"""GPU-scope flags between CTAs (stream-K, split-K, the megakernel's counters), and loops that wait
on them, recognised by what they mean rather than by their shape.

**Wait loops** (`find_waits`): a loop (a branch back to a line at or before it) whose exit depends
on a value it loads from global memory, at an address the loop does not change, and that has no
other effect (no store, arrival, copy or MMA in its body: polls, compares, a `NANOSLEEP` back-off,
fences) waits for another agent to write that memory. `LDG.STRONG; ISETP; @!p BRA` is one; so is
`warpy.isa.units.flags.spin_wait`'s poll, compare, back-off with the acquire after the loop, a
CAS lock, or a poll whose compare is several lines from its branch. When a warp is about to go
round such a loop again and no simulated warp has written what it polled since it read it, the
warp blocks until one does (`stall`): going round again would read the same thing.

**Release and acquire**: a relaxed GPU-scope write (`STG.STRONG`, `REDG`, `ATOMG`) hands over the
writer's clock as of its last `MEMBAR.*.GPU` (a release is the fence, then the relaxed write); a
GPU-scope read takes it at the reader's next `MEMBAR.*.GPU` or `CCTL.IVALL` (the acquire). So a
fence missing on either side, or placed after the flag, leaves the data unordered.

A poll whose loop would already exit on what the word held at launch (what an earlier launch left in
scratch memory) may read that stale value: it acquires nothing of this launch's writes.

**The rest of the grid**: when no simulated warp can run and some wait in such loops, and the launch
has CTAs outside the simulated ones, those CTAs raise the flags (`raise_outside`): each polled word
gets a value that lets its loop exit, found by running the loop's body on a copy of the warp's
registers with candidate values (the values the body compares with, and their neighbours). Where
the kernel family knows what the rest adds to the word (`Expectation.outside_share`: the megakernel's
counters, whose arrivals it places on units), the rest adds that and no more: a counter that
simulated CTAs arrive on too passes only once they have (else the waiter would pass before a
simulated producer's arrival, and its reads race that producer's writes: a false report). A launch
whose every CTA is simulated has no rest: a wait nobody ends is a hang. How many flags the rest of
the grid raised is reported with the summary.

A loop that polls with a weak load (`LDG` without `.STRONG`, or through the read-only path) may read
a stale value forever: that is reported."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Optional

import numpy as np

from warpy.errors import WarpyError
from warpy.isa.operands import Imm, R, UR
from warpy.isa.semantics import VALUES
from warpy.isa.values import M32, first
from warpy.check.state import BLOCKED, RUNS, FlagWait, Lanes, VC, Warp, join

if TYPE_CHECKING:
    from warpy.check.code import Compiled
    from warpy.check.global_memory import GlobalMemory
    from warpy.check.machine import Machine

#: what a wait loop's body may do besides polling (anything else is an effect going round again repeats)
_QUIET = frozenset({"alu", "compare", "predicate", "special-reg", "const-load", "vote", "shuffle", "warp-reduce", "branch",
                    "sleep", "fence", "warp-sync", "nop", "elect", "load-global", "atomic-global", "load-shared"})


class WaitLoop:
    """A loop that waits on global memory: its first and last lines (the branch back), the lines
    that poll (loads or atomics whose value the exit depends on), and the registers that value
    flows into."""

    __slots__ = ("head", "back", "polls", "tainted")

    def __init__(self, head: int, back: int, polls: list[int], tainted: frozenset[str]) -> None:
        self.head = head
        self.back = back
        self.polls = polls
        self.tainted = tainted


def find_waits(code: list[Compiled]) -> None:
    """Mark each wait loop's branch back and poll lines (`Compiled.loop`)."""
    for b in code:
        if b.sem != "branch" or b.target > b.pc or b.target < 0:
            continue
        t = b.target
        body = code[t:b.pc + 1]
        if any(x.sem not in _QUIET for x in body):
            continue
        written = {d for x in body for d in x.defs}
        polls = [x for x in body if x.sem in ("load-global", "atomic-global") and not (x.uses & written)]
        if not polls:
            continue
        tainted = {d for x in polls for d in x.defs}
        for _ in range(3):  # values carried round the loop
            for x in body:
                if x.uses & tainted and x.sem != "branch":
                    tainted.update(x.defs)
        exits = [x for x in body if x.sem == "branch" and x.uses & tainted
                 and (x is b or not t <= x.target <= b.pc)]
        if not exits:
            continue
        loop = WaitLoop(t, b.pc, [x.pc for x in polls], frozenset(tainted))
        b.loop = loop
        for x in polls:
            x.loop = loop


def _scratch(w: Warp) -> Warp:
    """A copy of a warp's registers that a loop's body runs on (special registers read through the
    same CTA and warp index)."""
    s = Warp(-1, w.cta, w.wid)
    s.regs = dict(w.regs)
    s.live = w.live
    return s


class Flags:
    """What each flag word released (`released`: address -> clock), each polled word's version (how
    many simulated writes it has seen), the warps waiting in loops, and how many flags the rest of
    the grid raised."""

    def __init__(self, gmem: GlobalMemory) -> None:
        self.gmem = gmem
        self.released: dict[int, VC] = {}
        self.version: dict[int, int] = {}  # a polled word's writes so far
        self.polled: set[int] = set()  # every word a wait loop has polled
        self.waiters: list[Warp] = []
        self.raised_outside = 0
        self.outside = True  # the launch has CTAs the machine does not simulate
        self.weak_seen: set[int] = set()
        self.initial: dict[int, int] = {}  # the 32-bit words kept at launch (set once memory is filled)
        self.added: dict[int, int] = {}  # what the rest of the grid has added to a word whose share is known

    # -- release and acquire ---------------------------------------------------------------------
    def acquire(self, w: Warp, addr: int) -> None:
        """A relaxed load of a flag: what the flag releases is acquired by the warp's next fence."""
        rel = self.released.get(addr)
        if rel is not None:
            for k, v in rel.items():
                if w.acquired.get(k, 0) < v:
                    w.acquired[k] = v

    def release(self, w: Warp, addrs: np.ndarray) -> None:
        """A relaxed GPU-scope write raises a flag: it releases what the warp did before its last
        `MEMBAR.*.GPU` (a release is the fence, then the relaxed write), not what came after."""
        w.tick()
        vc = dict(w.fenced_vc)
        for a in np.unique(addrs):
            join(self.released.setdefault(int(a), {}), vc)

    # -- polls, writes and waits -----------------------------------------------------------------
    def stale_passes(self, m: Machine, w: Warp, c: Compiled, addrs: np.ndarray) -> bool:
        """Whether the poll's loop would exit on what the words held at launch (what an earlier launch
        left there): then the wait may pass on that stale value, and it acquires nothing."""
        loop = c.loop
        if loop is None or addrs.size == 0:
            return False
        vals = {self.initial.get(int(a) & ~3, 0) for a in np.unique(addrs)}
        if len(vals) != 1:
            return False
        return self._exits(m, w, loop, vals.pop())

    def polled_by(self, w: Warp, c: Compiled, addrs: np.ndarray) -> None:
        """A wait loop's poll read these words: remember what it saw (their versions)."""
        seen = {}
        for a in np.unique(addrs & ~np.int64(3)):
            ai = int(a)
            self.polled.add(ai)
            seen[ai] = self.version.get(ai, 0)
        w.polls[c.pc] = seen

    def written(self, addrs: np.ndarray, nbytes: int = 4) -> None:
        """Simulated writes to global memory: polled words they touch change version and wake their waiters."""
        if not self.polled:
            return
        lo = np.asarray(addrs, dtype=np.int64).ravel() & ~np.int64(3)
        words = {int(x) for k in range(0, max(nbytes, 4), 4) for x in lo + k}
        hit = words & self.polled
        for a in hit:
            self.version[a] = self.version.get(a, 0) + 1
        if hit:
            self._wake(hit)

    def _wake(self, addrs: set[int]) -> None:
        for w in self.waiters:
            if w.state == BLOCKED and isinstance(w.block, FlagWait) and addrs & set(w.block.addrs):
                w.state, w.block = RUNS, None
        self.waiters = [w for w in self.waiters if w.state == BLOCKED]

    def stall(self, m: Machine, w: Warp, c: Compiled) -> bool:
        """The warp takes a wait loop's branch back: if nothing it polled has been written since it
        read it, it blocks until something is (True)."""
        loop = c.loop
        assert isinstance(loop, WaitLoop)
        addrs: list[int] = []
        for pc in loop.polls:
            seen = w.polls.get(pc)
            if seen is None:
                return False  # a poll that did not run this time round: go round
            for a, ver in seen.items():
                if self.version.get(a, 0) != ver:
                    return False
                addrs.append(a)
        if not addrs:
            return False
        for pc in loop.polls:
            p = m.code.instrs[pc]
            if p.sem == "load-global" and ("STRONG" not in p.instr.mods or "CONSTANT" in p.instr.mods) \
                    and pc not in self.weak_seen:
                self.weak_seen.add(pc)
                m.problems.add("protocol", f"line {pc + 1} ({p.mnem}): a loop waits on the word it loads from global "
                                           f"memory, through a weak load: it may read a stale value forever (poll with "
                                           f"LDG.E.STRONG.GPU, a relaxed GPU-scope load)")
        w.state = BLOCKED
        w.block = FlagWait(tuple(sorted(set(addrs))), c.pc, self._where(addrs[0]))
        self.waiters.append(w)
        return True

    def _where(self, addr: int) -> str:
        src, off = self.gmem.source(addr)
        if src is None:
            return f"global 0x{addr:x}"
        b = self.gmem.buffer_of(src, off, off + 4)
        if b is not None:
            return f"{b.name}+0x{off - b.base:x}"
        return f"{src}+0x{off:x}"

    # -- the rest of the grid --------------------------------------------------------------------
    def raise_outside(self, m: Machine, warps: list[Warp]) -> bool:
        """Every simulated warp is blocked or done, and some wait in loops on global memory: the CTAs
        outside the simulated clusters (whose work the simulated ones wait for) write each polled
        word a value that lets its loop exit. Nothing is raised when every CTA is simulated."""
        if not self.outside:
            return False
        woke = False
        simulated = [c.linear for c in m.launch.ctas]
        for w in warps:
            if not (w.state == BLOCKED and isinstance(w.block, FlagWait)):
                continue
            blk = w.block
            v = self.escape(m, w, blk.back)
            if v is None:
                continue
            raised = []
            for a in blk.addrs:
                share = self.gmem.outside_share(int(a), v, simulated)
                if share is None:  # what the rest adds is unknown: the value that lets the loop exit
                    self.gmem.write_word(a, v)
                elif share > self.added.get(int(a), 0):  # the rest's arrivals, and no more: the
                    # simulated CTAs' own arrivals are still theirs to make (else a waiter would pass
                    # before a simulated producer arrived, and its reads race that producer's writes)
                    cur = self.gmem.read_word(int(a))
                    self.gmem.write_word(a, (cur + share - self.added.get(int(a), 0)) & M32)
                    self.added[int(a)] = share
                else:
                    continue
                self.raised_outside += 1
                raised.append(int(a))
            if raised:
                self.written(np.asarray(raised, dtype=np.int64))
                woke = True
        return woke

    def escape(self, m: Machine, w: Warp, back: int) -> Optional[int]:
        """A value of the polled words with which the warp's loop exits: candidates from what the
        loop's body compares with, each tried by running the body on a copy of the registers."""
        loop = m.code.instrs[back].loop
        assert isinstance(loop, WaitLoop)
        for v in self._candidates(m, w, loop):
            if self._exits(m, w, loop, v):
                return v
        return None

    def _candidates(self, m: Machine, w: Warp, loop: WaitLoop) -> Iterator[int]:
        seen: set[int] = set()
        base: list[int] = []
        for c in m.code.instrs[loop.head:loop.back + 1]:
            if not (c.uses & loop.tainted) or c.sem == "branch":
                continue
            for op, get in zip(c.instr.ops, c.get):
                if isinstance(op, (R, UR)) and op.name in loop.tainted:
                    continue
                if isinstance(op, (R, UR, Imm)):
                    try:
                        base.append(int(first(get(w))) & M32)
                    except (WarpyError, TypeError):
                        continue
        for x in base + [(-x) & M32 for x in base] + [0, 1]:
            for d in (0, 1, -1):
                v = (x + d) & M32
                if v not in seen:
                    seen.add(v)
                    yield v

    def _exits(self, m: Machine, w: Warp, loop: WaitLoop, v: int) -> bool:
        """Whether the loop's body, run from its first line with every poll reading `v`, leaves the loop."""
        s = _scratch(w)
        code = m.code.instrs
        pc = loop.head
        for _ in range(8 * (loop.back - loop.head + 1)):
            if not loop.head <= pc <= loop.back:
                return True
            c = code[pc]
            on = True
            if c.guard is not None:
                on = bool(np.any(c.guard(s)))
            if c.sem == "branch":
                taken = on
                if taken and c.cond is not None:
                    taken = bool(np.any(c.cond(s)))
                if taken:
                    if c.pc == loop.back:
                        return False
                    pc = c.target
                else:
                    pc += 1
                continue
            if on:
                if pc in loop.polls:
                    k = 1 if c.sem == "atomic-global" else 0
                    c.put[k](s, v, None)
                    if k:
                        c.put[0](s, True, None)
                else:
                    rule = VALUES.get(c.rec)
                    if rule is not None:
                        try:
                            rule(m, s, c, None)
                        except WarpyError:
                            return False
            pc += 1
        return False
