"""The mutation suite: the validator against the reference VM on broken schedules.

Each mutant is a valid schedule with one change: drop an arrive, add a second arrive, lower or
raise a wait's target, drop a wait, point a wait at another counter, move a load-stage wait to the
store stage, swap two instructions of a queue, move an instruction to another unit's queue, put two
tensors whose lifetimes overlap in one buffer. Whether a mutant can hang or race is decided without
the validator, by the protocol's arithmetic and by running it:

- a counter whose arrivals per call differ from a waiter's target drifts every call: it hangs
  (fewer) or passes its waiter early from some call on and, once it has run 2^31 ahead, hangs (more);
- otherwise the reference VM runs it, with races tracked per element, at the first call and at
  call 2^16 (where a drifted counter has run far ahead), in static mode on its queues and in dynamic
  mode with one unit (units take indices in order, so a wait on a later index hangs there).

A mutant the VM finds bad and the validator accepts is missed; a mutant the VM finds good and the
validator rejects is over-rejected. Both must be 0.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional, Sequence, TypeVar

import numpy as np

from warpy.mega.schedule import Schedule, Wait
from warpy.mega.validate import validate
from warpy.mega.vm import VM

MUTATIONS = ("drop_arrive", "extra_arrive", "lower_target", "raise_target", "drop_wait", "retarget_wait",
             "late_stage", "swap_queue", "move_unit", "alias_buffers")
LATE_EPOCH = 1 << 16
T = TypeVar("T")


def clone(s: Schedule) -> Schedule:
    """A copy whose waits, arrives, queues and buffer map a mutation may change."""
    c = copy.copy(s)
    c.instrs = [copy.copy(i) for i in s.instrs]
    for i in c.instrs:
        i.waits = list(i.waits)
        i.arrives = list(i.arrives)
    c.queues = [list(q) for q in s.queues] if s.queues is not None else None
    c.buffer_of = list(s.buffer_of)
    return c


def _mutate(s: Schedule, kind: str, rng: np.random.Generator) -> Optional[tuple[str, Schedule]]:
    m = clone(s)
    ins = m.instrs

    def pick(seq: Sequence[T]) -> T:
        return seq[int(rng.integers(len(seq)))]

    if kind in ("drop_arrive", "extra_arrive"):
        cands = [i for i in ins if i.arrives]
        if not cands:
            return None
        i = pick(cands)
        k = int(rng.integers(len(i.arrives)))
        c = i.arrives[k]
        if kind == "drop_arrive":
            del i.arrives[k]
            return f"instruction {i.index} no longer arrives on counter {c}", m
        i.arrives.append(c)
        return f"instruction {i.index} arrives twice on counter {c}", m
    if kind in ("lower_target", "raise_target", "drop_wait", "retarget_wait", "late_stage"):
        cands = [i for i in ins if i.waits and (kind != "late_stage" or any(not w.before_store for w in i.waits))]
        if not cands:
            return None
        i = pick(cands)
        ks = [k for k, w in enumerate(i.waits) if kind != "late_stage" or not w.before_store]
        k = pick(ks)
        w = i.waits[k]
        if kind == "lower_target":
            d = int(rng.integers(1, w.target + 1))
            i.waits[k] = Wait(w.counter, w.target - d, w.before_store)
            return f"instruction {i.index} waits for {w.target - d} of {w.target} on counter {w.counter}", m
        if kind == "raise_target":
            d = int(rng.integers(1, 3))
            i.waits[k] = Wait(w.counter, w.target + d, w.before_store)
            return f"instruction {i.index} waits for {w.target + d} of {w.target} on counter {w.counter}", m
        if kind == "drop_wait":
            del i.waits[k]
            return f"instruction {i.index} no longer waits on counter {w.counter}", m
        if kind == "late_stage":
            i.waits[k] = Wait(w.counter, w.target, True)
            return f"instruction {i.index} waits on counter {w.counter} only before its stores", m
        other = pick(m.counters)
        if other.id == w.counter:
            return None
        i.waits[k] = Wait(other.id, other.target, w.before_store)
        return f"instruction {i.index} waits on counter {other.id} instead of {w.counter}", m
    if kind in ("swap_queue", "move_unit"):
        if m.queues is None:
            return None
        qs = [q for q in m.queues if len(q) >= (2 if kind == "swap_queue" else 1)]
        if not qs:
            return None
        q = pick(qs)
        if kind == "swap_queue":
            a, b = sorted(int(x) for x in rng.choice(len(q), size=2, replace=False))
            q[a], q[b] = q[b], q[a]
            return f"instructions {q[b]} and {q[a]} swap places in a queue", m
        if len(m.queues) < 2:
            return None
        a = int(rng.integers(len(q)))
        moved = q.pop(a)
        dest = pick([d for d in m.queues if d is not q])
        pos = int(rng.integers(len(dest) + 1))
        dest.insert(pos, moved)
        return f"instruction {moved} moves to another unit's queue (position {pos})", m
    if kind == "alias_buffers":
        prog = m.program
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for it in ins:
            for acc in it.reads + it.writes:
                first.setdefault(acc.tensor, it.index)
                last[acc.tensor] = it.index
        ts = [t.id for t in prog.tensors if t.id in first]
        pairs = [(a, b) for a in ts for b in ts if a != b and m.buffer_of[a] != m.buffer_of[b]
                 and first[a] <= last[b] and first[b] <= last[a]]
        if not pairs:
            return None
        a, b = pick(pairs)
        m.buffer_of[b] = m.buffer_of[a]
        return f"{prog.tensors[b].name} moves into {prog.tensors[a].name}'s buffer while both are live", m
    raise ValueError(kind)


def mutants(s: Schedule, count: int, seed: int = 0) -> Iterator[tuple[str, str, Schedule]]:
    """`count` mutants of `s`, the kinds taken in turn: (kind, what changed, mutant)."""
    rng = np.random.default_rng(seed)
    made = tries = 0
    while made < count and tries < 20 * count:
        kind = MUTATIONS[tries % len(MUTATIONS)]
        tries += 1
        r = _mutate(s, kind, rng)
        if r is not None:
            made += 1
            yield kind, r[0], r[1]


def truth(s: Schedule, seed: int = 0) -> list[str]:
    """Why `s` can hang or race, decided without the validator (empty: it cannot)."""
    arrivals = [0] * len(s.counters)
    for ins in s.instrs:
        for c in ins.arrives:
            arrivals[c] += s.cluster
    for ins in s.instrs:
        for w in ins.waits:
            if w.target != arrivals[w.counter]:
                return [f"counter {w.counter} gets {arrivals[w.counter]} arrivals a call, instruction {ins.index} "
                        f"waits for {w.target}: it drifts"]
    for epoch in (1, LATE_EPOCH):
        units = 1 if s.queues is None else None
        out = VM(s, values=False, races=True, seed=seed, epoch=epoch, units=units).run()
        if not out.ok:
            return out.hang[:1] + out.races[:1]
        if s.queues is None:  # races need every unit running
            out = VM(s, values=False, races=True, seed=seed, epoch=epoch).run()
            if not out.ok:
                return out.races[:1]
    return []


@dataclass
class Tally:
    mutants: int = 0
    bad: int = 0
    rejected: int = 0
    missed: list[str] = field(default_factory=list)
    over_rejected: list[str] = field(default_factory=list)


@dataclass
class Report:
    by_kind: dict[str, Tally] = field(default_factory=dict)
    valid_schedules: int = 0
    valid_rejected: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total(self) -> Tally:
        t = Tally()
        for k in self.by_kind.values():
            t.mutants += k.mutants
            t.bad += k.bad
            t.rejected += k.rejected
            t.missed += k.missed
            t.over_rejected += k.over_rejected
        return t

    def lines(self) -> list[str]:
        out = [f"{'mutation':<15} {'mutants':>8} {'hang/race':>10} {'rejected':>9} {'missed':>7} {'over':>5}"]
        for k, t in self.by_kind.items():
            out.append(f"{k:<15} {t.mutants:>8} {t.bad:>10} {t.rejected:>9} {len(t.missed):>7} "
                       f"{len(t.over_rejected):>5}")
        t = self.total
        out.append(f"{'total':<15} {t.mutants:>8} {t.bad:>10} {t.rejected:>9} {len(t.missed):>7} "
                   f"{len(t.over_rejected):>5}")
        out.append(f"{self.valid_schedules} valid schedules, {len(self.valid_rejected)} rejected; "
                   f"{self.seconds:.1f} s")
        return out + [f"missed: {m}" for m in t.missed[:5]] + [f"over-rejected: {m}" for m in t.over_rejected[:5]] \
            + [f"valid rejected: {m}" for m in self.valid_rejected[:5]]


def suite(schedules: list[tuple[str, Schedule]], per_schedule: int, seed: int = 0,
          progress: Optional[Callable[[str], None]] = None) -> Report:
    """Validate each schedule, then `per_schedule` mutants of each against the VM's verdict."""
    t0 = time.perf_counter()
    rep = Report(by_kind={k: Tally() for k in MUTATIONS})
    for name, s in schedules:
        rep.valid_schedules += 1
        p = validate(s)
        if not p.ok:
            rep.valid_rejected.append(f"{name}: {p.lines(1)[0]}")
        for n, (kind, what, m) in enumerate(mutants(s, per_schedule, seed)):
            t = rep.by_kind[kind]
            t.mutants += 1
            bad = truth(m, seed=seed + n)
            rejected = not validate(m).ok
            t.bad += bool(bad)
            t.rejected += rejected
            if bad and not rejected:
                t.missed.append(f"{name}: {what}: {bad[0]}")
            if rejected and not bad:
                t.over_rejected.append(f"{name}: {what}: {validate(m).lines(1)[0]}")
        if progress:
            progress(name)
    rep.seconds = time.perf_counter() - t0
    return rep


__all__ = ["MUTATIONS", "mutants", "truth", "suite", "Report", "Tally", "clone"]
