"""GPU-scope flags between CTAs (stream-K, split-K): a loop `LDG.STRONG.GPU f; ISETP p, f, target;
@!p BRA` is a wait on the flag word. The warp blocks until a simulated warp writes the word
(`STG.STRONG`, `REDG`), which also hands over a clock: the writer's as of its last `MEMBAR.*.GPU`
(a release is the fence, then the relaxed write); the reader takes it at its own next
`MEMBAR.*.GPU` (the acquire). When no simulated warp can run and some wait on flags, the rest of
the grid (the CTAs outside the simulated clusters) raises those flags to what they wait for."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np

from warpy.isa.operands import LabelRef, Operand, P, R, RVec, SReg, Sym, TmapRef, UP, UR, URVec
from warpy.isa.values import M32, first
from warpy.check.semantics import BLOCK
from warpy.check.state import BLOCKED, RUNS, FlagWait, Lanes, VC, Warp, join

if TYPE_CHECKING:
    from warpy.check.code import Compiled
    from warpy.check.global_memory import GlobalMemory


def _name(op: Operand) -> Optional[str]:
    if isinstance(op, (R, UR, P, UP, RVec, URVec, SReg, TmapRef, LabelRef, Sym)):
        return op.name
    return None


def find_spins(code: list[Compiled], labels: dict[str, int]) -> None:
    """Mark each spin on a GPU-scope flag (LDG.STRONG, an ISETP on what it loaded, a branch back on
    that predicate) with its compare and whether it loops while the compare is false."""
    for c in code:
        if c.sem == "load-global" and "STRONG" in c.instr.mods and c.pc + 2 < len(code):
            cmp_c, br_c = code[c.pc + 1], code[c.pc + 2]
            dst = _name(c.instr.ops[0])
            target = _name(br_c.instr.ops[-1]) or ""
            guard = br_c.instr.guard
            if cmp_c.sem == "compare" and _name(cmp_c.instr.ops[2]) == dst and br_c.sem == "branch" \
                    and guard is not None and guard.name == _name(cmp_c.instr.ops[0]) \
                    and labels.get(target, 1 << 30) <= c.pc:
                c.spin = (cmp_c, guard.neg)


class Flags:
    """What each flag word released (`released`: address -> clock), the warps waiting on one, and
    how many flags the rest of the grid raised."""

    def __init__(self, gmem: GlobalMemory) -> None:
        self.gmem = gmem
        self.released: dict[int, VC] = {}
        self.waiters: list[Warp] = []
        self.raised_outside = 0

    def acquire(self, w: Warp, addr: int) -> None:
        """A relaxed load of a flag: what the flag releases is acquired by the warp's next fence."""
        rel = self.released.get(addr)
        if rel is not None:
            for k, v in rel.items():
                if w.acquired.get(k, 0) < v:
                    w.acquired[k] = v

    def spin(self, w: Warp, c: Compiled, spin: tuple[Compiled, bool], addr: int, lanes: Lanes) -> Optional[int]:
        """A flag loop whose flag does not yet hold what it waits for blocks the warp until a simulated
        warp writes the flag (or, when nothing else can run, the rest of the grid raises it)."""
        s, loop_on_false = spin
        mods = s.instr.mods
        x = first(w.regs.get(_name(c.instr.ops[0]) or "", 0), lanes)
        y = first(s.get[3](w), lanes)
        t = {"EQ": x == y, "NE": x != y, "LT": x < y, "LE": x <= y, "GT": x > y, "GE": x >= y}[mods[0]]
        leaves = t if loop_on_false else not t
        if leaves:
            return None
        want = {"EQ": y, "GE": y, "GT": y + 1, "NE": y + 1, "LE": y, "LT": y - 1}[mods[0]]
        if not loop_on_false:
            want = {"EQ": y + 1, "NE": y, "LT": y, "LE": y + 1, "GT": y, "GE": y - 1}[mods[0]]
        w.state = BLOCKED
        w.block = FlagWait(addr, want & M32)
        self.waiters.append(w)
        return BLOCK

    def release(self, w: Warp, addrs: np.ndarray) -> None:
        """A relaxed GPU-scope write raises a flag: it releases what the warp did before its last
        `MEMBAR.*.GPU` (a release is the fence, then the relaxed write), not what came after."""
        w.tick()
        vc = dict(w.fenced_vc)
        for a in np.unique(addrs):
            join(self.released.setdefault(int(a), {}), vc)
            self.wake(int(a))

    def wake(self, addr: int) -> None:
        for w in self.waiters:
            if w.state == BLOCKED and isinstance(w.block, FlagWait) and w.block.addr == addr:
                w.state, w.block = RUNS, None
        self.waiters = [w for w in self.waiters if w.state == BLOCKED]

    def raise_outside(self, warps: list[Warp]) -> bool:
        """Every simulated warp is blocked or done, and some spin on a GPU-scope flag: the CTAs outside
        the simulated clusters (whose work the simulated ones wait for) raise those flags. A flag a
        simulated CTA should have raised is therefore not reported as a hang (docs/checker.md)."""
        woke = False
        for w in warps:
            if w.state == BLOCKED and isinstance(w.block, FlagWait):
                self.gmem.write_word(w.block.addr, w.block.want)
                self.raised_outside += 1
                w.state, w.block = RUNS, None
                woke = True
        return woke
