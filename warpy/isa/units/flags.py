"""Counters and flags between CTAs in global memory, with the orderings PTX spells:

| warpy | SASS lines | PTX the lifter gives ptxas |
|---|---|---|
| `load_acquire` | `LDG.E.STRONG.GPU` + `CCTL.IVALL` | `ld.acquire.gpu.global` |
| `atomic(..., order="acquire")` | `ATOMG...STRONG.GPU` + `CCTL.IVALL` | `atom.acquire.gpu.global` |
| `atomic(..., order="release")`, `red_release`, `store_release` | `MEMBAR.ALL.GPU` + the relaxed op | `fence.acq_rel.gpu` + `.relaxed.gpu` |
| `atomic(..., order="acq_rel")` | both | both |
| `spin_wait` | the loop below, then `CCTL.IVALL` | `ld.relaxed.gpu` in the loop, `fence.acq_rel.gpu` after |

`spin_wait(p, ctr, target)` waits until the 32-bit counter at `ctr` is at least `target` (unsigned),
backing off between polls with `NANOSLEEP` (the sleep doubles up to a ceiling), then acquires what
the counter's writers released:

```
  MOV ns, first_ns
  BRA POLL_n
BACKOFF_n:
  NANOSLEEP ns
  SHF.L.U32 ns, ns, 0x1, RZ
  VIMNMX.U32 ns, ns, max_ns, PT
POLL_n:
  LDG.E.STRONG.GPU seen, desc[..][ctr]
  ISETP.LT.U32.AND again, PT, seen, target, PT
  @again BRA BACKOFF_n
  CCTL.IVALL
```

The poll, compare and branch back are adjacent: the checker knows the loop as a wait on the flag
(`warpy.check.flags`: the warp blocks until a simulated warp raises it, or the rest of the grid does).
The megakernel waits on `target × epoch` counters: pass the product as `target` (a register).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

from warpy.errors import WarpyError
from warpy.isa.families import alu, control, memory, sync
from warpy.isa.operands import GMem, R

if TYPE_CHECKING:
    from warpy.isa.program import Program

ORDERS = ("relaxed", "acquire", "release", "acq_rel")


def load_acquire(p: Program, d: R, addr: GMem) -> None:
    """d = the 32-bit word at addr, GPU scope, acquire (`ld.acquire.gpu`)."""
    p.emit(memory.ldg_strong(d, addr))
    p.emit(sync.cctl_ivall())


def store_release(p: Program, addr: GMem, v: R) -> None:
    """global[addr] = v at GPU scope, release: what this thread did before is visible to whoever
    acquires the word."""
    p.emit(sync.membar("GPU"))
    p.emit(memory.stg_strong(addr, v))


def red_release(p: Program, op: str, addr: GMem, v: R, *, signed: bool = False) -> None:
    """global[addr] = op(global[addr], v), release, no value returned (a counter's increment)."""
    p.emit(sync.membar("GPU"))
    p.emit(memory.red(op, addr, v, signed=signed))


def atomic(p: Program, op: str, d: R, addr: GMem, v: R, *, order: str = "acq_rel", signed: bool = False) -> None:
    """d = global[addr], which becomes op(d, v) (ADD, MIN, MAX, EXCH), with the ordering `order`."""
    if order not in ORDERS:
        raise WarpyError(f"atomic: order {order!r} is not one of {', '.join(ORDERS)}")
    if order in ("release", "acq_rel"):
        p.emit(sync.membar("GPU"))
    p.emit(memory.atom(op, d, addr, v, signed=signed))
    if order in ("acquire", "acq_rel"):
        p.emit(sync.cctl_ivall())


def atomic_cas(p: Program, d: R, addr: GMem, cmp: R, new: R, *, order: str = "acq_rel") -> None:
    """d = global[addr], which becomes `new` where d == cmp, with the ordering `order`."""
    if order not in ORDERS:
        raise WarpyError(f"atomic_cas: order {order!r} is not one of {', '.join(ORDERS)}")
    if order in ("release", "acq_rel"):
        p.emit(sync.membar("GPU"))
    p.emit(memory.atom_cas(d, addr, cmp, new))
    if order in ("acquire", "acq_rel"):
        p.emit(sync.cctl_ivall())


def spin_wait(p: Program, ctr: GMem, target: Union[R, int], *, first_ns: int = 32, max_ns: int = 1024,
              seen: str = "seen", name: str = "spin") -> R:
    """Wait until the counter at `ctr` is at least `target` (unsigned), NANOSLEEP back-off doubling
    from `first_ns` to `max_ns` between polls, then acquire. Returns the register holding the value
    seen. Every lane that runs it polls (run it on one lane, or a warp, as the caller needs)."""
    if not 0 < first_ns <= max_ns:
        raise WarpyError(f"spin_wait: back-off {first_ns}..{max_ns} ns is not 0 < first <= max")
    ns, v, again = p.r(f"{name}_ns"), p.r(seen), p.p(f"{name}_again")
    backoff, poll = p.fresh_label("BACKOFF"), p.fresh_label("POLL")
    p.emit(alu.mov(ns, first_ns))
    p.emit(control.bra(poll))
    p.label(backoff)
    p.emit(sync.nanosleep(ns))
    p.emit(alu.shf_l(ns, ns, 1))
    p.emit(alu.imin(ns, ns, max_ns, unsigned=True, arch=p.sm))
    p.label(poll)
    p.emit(memory.ldg_strong(v, ctr))
    p.emit(alu.isetp("LT", again, v, target))
    p.emit(control.bra(backoff).guarded(again))
    p.emit(sync.cctl_ivall())
    return v


__all__ = ["load_acquire", "store_release", "red_release", "atomic", "atomic_cas", "spin_wait", "ORDERS"]
