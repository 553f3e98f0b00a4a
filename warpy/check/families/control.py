"""Control flow. Branches and exits are run by the scheduler's loop itself (they split and merge a
warp's lane groups, `warpy.check.schedule`); their handlers here are never reached."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from warpy.isa.families import control as isa
from warpy.check.registers import imm
from warpy.check.semantics import BLOCK, semantics
from warpy.check.state import BLOCKED, RUNS, BarrierWait, Lanes, Warp

if TYPE_CHECKING:
    from warpy.check.code import Compiled
    from warpy.check.machine import Machine


@semantics(isa.BRA, isa.EXIT, isa.NOP, isa.WARPSYNC)
def _nothing(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    return None


@semantics(isa.USETMAXREG)
def _setmaxnreg(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> Optional[int]:
    """setmaxnreg moves registers between a CTA's warps within the pool it was launched with (`.maxnreg`
    a thread times its threads): `.DEALLOC` gives a warp's down to n (never up), `.TRY_ALLOC` takes
    them up to n (never down) when the pool holds them, else fails and its loop retries: the warp
    waits for a `.DEALLOC` of another (a request the pool never meets is a hang)."""
    h = m.h
    n = imm(c.instr.ops[-1])
    cta = w.cta
    if h.maxnreg is None:  # no pool to account against: granted
        if len(c.get) == 2:
            c.put[0](w, True, lanes)
        return None
    have = cta.regs.get(w.wid, h.maxnreg)
    who = f"{cta.name} warp {w.wid}"
    if len(c.get) == 1:  # .DEALLOC
        if n > have:
            m.problems.add("protocol", f"{who}: {c.mnem} {n} raises its registers from {have} (setmaxnreg.dec never raises)")
        cta.regs[w.wid] = n
        for x in cta.warps:
            if x.state == BLOCKED and isinstance(x.block, BarrierWait) and x.block.kind == "setmaxnreg":
                x.state, x.block = RUNS, None
        return None
    if n < have:
        m.problems.add("protocol", f"{who}: {c.mnem} {n} lowers its registers from {have} (setmaxnreg.inc never lowers)")
    pool = h.maxnreg * h.threads
    used = sum(cta.regs.get(x.wid, h.maxnreg) for x in cta.warps) * 32
    if used - have * 32 + n * 32 <= pool:
        cta.regs[w.wid] = n
        c.put[0](w, True, lanes)
        return None
    w.state = BLOCKED
    w.block = BarrierWait("setmaxnreg", f"setmaxnreg to {n} registers: the CTA's pool of {pool} holds {pool - used} "
                                        f"more (its warps hold {used})")
    return BLOCK
