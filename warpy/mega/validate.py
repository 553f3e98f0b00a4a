"""The static validator: a schedule either cannot hang or race, or is refused with the reasons.

It trusts nothing the scheduler derived: it reads only the instructions (the boxes each reads and
writes, its waits and arrives), the queues and the buffer each tensor lies in, and checks

- **structure**: the lowered graph is acyclic (every operand's producer is an earlier node); in
  static mode every instruction is in exactly one queue; counters named exist;
- **satisfiable, epoch-consistent waits**: a wait's target per call equals the arrivals on its
  counter per call (instructions listing it x CTAs per unit). Fewer arrivals hang; more let the
  waiter pass early in a later call (the counter has run ahead by the excess every call), a race;
- **no deadlock**: an abstract execution in which any unit runs its head whenever the head's waits
  are met must finish (counters only grow, so one greedy run decides it); in dynamic mode every
  instruction a wait names is earlier in the global order (units take indices in that order, so
  otherwise one unit could hold the waiter while the producer is never taken);
- **no race**: ordering is only through counters (an instruction's loads may overlap the previous
  instruction's stores on the same unit), and reads wait on the counters of their stage: a
  load is ordered after an instruction x when x, or an instruction ordered after x, arrives on a
  counter the load waits for (before its loads); a store likewise with every wait. Every box read
  of a tensor is covered by the boxes of its writers, each ordered before the load; no two
  instructions write the same elements of a tensor; where two tensors share a buffer, every
  instruction that touches the elements they share is ordered (the earlier tensor's readers before
  the later one's writers, and a read never sees the other tensor's value); the caller's inputs
  are never written, and an output's elements are written last by the output's own writers;
  state (a cache the launch appends to) is written only by its appends: a read of appended rows is
  ordered after the append, the rest of a state read is the caller's and needs no writer, and an
  early read touches no appended row.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from warpy.mega.schedule import Instr, Schedule
from warpy.target import element_type

Box = tuple[tuple[int, int], ...]


@dataclass
class Problems:
    """What the validator found, by kind: hang, race, structure."""

    items: list[tuple[str, str]] = field(default_factory=list)

    def add(self, kind: str, msg: str) -> None:
        self.items.append((kind, msg))

    @property
    def ok(self) -> bool:
        return not self.items

    def kinds(self) -> set[str]:
        return {k for k, _ in self.items}

    def lines(self, limit: int = 12) -> list[str]:
        out = [f"{k}: {m}" for k, m in self.items[:limit]]
        if len(self.items) > limit:
            out.append(f"... and {len(self.items) - limit} more")
        return out


def _vol(box: Box) -> int:
    n = 1
    for lo, hi in box:
        n *= max(0, hi - lo)
    return n


def _intersect(a: Box, b: Box) -> Optional[Box]:
    out = tuple((max(x0, y0), min(x1, y1)) for (x0, x1), (y0, y1) in zip(a, b))
    return out if all(lo < hi for lo, hi in out) else None


def _footprint(shape: tuple[int, ...], box: Box) -> list[tuple[int, int]]:
    """The flat element intervals of a box of a row-major tensor, merged."""
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    # the innermost run: dimensions from the back that the box covers whole merge into one interval
    inner = len(shape) - 1
    while inner > 0 and box[inner] == (0, shape[inner]):
        inner -= 1
    run = (box[inner][1] - box[inner][0]) * strides[inner]
    starts = [0]
    for d in range(inner + 1):
        lo, hi = box[d]
        if d == inner:
            starts = [s + lo * strides[d] for s in starts]
        else:
            starts = [s + i * strides[d] for s in starts for i in range(lo, hi)]
    out: list[tuple[int, int]] = []
    for s in starts:
        if out and out[-1][1] == s:
            out[-1] = (out[-1][0], s + run)
        else:
            out.append((s, s + run))
    return out


def _overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    i = j = 0
    out = []
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


class _Order:
    """Happens-before through counters. load[i]: instructions ordered before i's loads; done[i]:
    before i's stores (and completion). Only waits whose target equals their counter's arrivals per
    call order anything."""

    def __init__(self, s: Schedule, consistent: dict[int, bool], order: list[int]) -> None:
        self.s = s
        self.consistent = consistent
        self.topo = order
        self._load: Optional[list[int]] = None
        self._done: Optional[list[int]] = None
        self.arrivers: dict[int, list[int]] = {}
        for ins in s.instrs:
            for c in ins.arrives:
                self.arrivers.setdefault(c, []).append(ins.index)
        self.arrset = {c: frozenset(v) for c, v in self.arrivers.items()}

    def counters(self, y: int, stage_load: bool) -> list[int]:
        """The consistent counters y waits on (at the stage)."""
        return [w.counter for w in self.s.instrs[y].waits
                if (not stage_load or not w.before_store) and self.consistent.get(w.counter)]

    def direct(self, x: int, y: int, stage_load: bool) -> bool:
        """x arrives on a consistent counter y waits on (at the stage)."""
        return any(x in self.arrset.get(c, ()) for c in self.counters(y, stage_load))

    def all_before(self, xs: list[int], y: int, stage_load: bool) -> bool:
        """Every x in xs (other than y) completes before y's loads / stores."""
        rest = set(xs)
        rest.discard(y)
        for c in self.counters(y, stage_load):
            rest -= self.arrset.get(c, frozenset())
        return all(self.before(x, y, stage_load) for x in rest)

    def _closure(self) -> None:
        n = len(self.s.instrs)
        load = [0] * n
        done = [0] * n
        cclock: dict[int, int] = {}
        for i in self.topo:
            ins = self.s.instrs[i]
            lo = hi = 0
            for w in ins.waits:
                if not self.consistent.get(w.counter):
                    continue
                if w.counter not in cclock:
                    acc = 0
                    for m in self.arrivers.get(w.counter, ()):
                        acc |= done[m] | (1 << m)
                    cclock[w.counter] = acc
                hi |= cclock[w.counter]
                if not w.before_store:
                    lo |= cclock[w.counter]
            load[i], done[i] = lo, hi
        self._load, self._done = load, done

    def before(self, x: int, y: int, stage_load: bool) -> bool:
        """x completes before y's loads (stage_load) or before y's stores."""
        if self.direct(x, y, stage_load):
            return True
        if self._load is None:
            self._closure()
        assert self._load is not None and self._done is not None
        if y not in self._in_topo:
            return False
        return bool(((self._load if stage_load else self._done)[y] >> x) & 1)

    @property
    def _in_topo(self) -> set[int]:
        if not hasattr(self, "_topo_set"):
            self._topo_set = set(self.topo)
        return self._topo_set


def validate(s: Schedule) -> Problems:
    """Every problem of `s` (none: it cannot hang and cannot race)."""
    p = Problems()
    prog = s.program
    n = len(s.instrs)
    name = {i.index: f"instruction {i.index} ({prog.nodes[i.node].describe()} of {prog.tensors[i.write.tensor].name})"
            for i in s.instrs}
    # --- structure ----------------------------------------------------------------------------
    for node in prog.nodes:
        for op in node.operands:
            prod = prog.tensors[op.tensor].producer
            if prod is not None and prod >= node.id:
                p.add("structure", f"the graph is cyclic: node {node.id} reads {prog.tensors[op.tensor].name} of "
                      f"node {prod}")
    n_counters = len(s.counters)
    for ins in s.instrs:
        for c in ins.arrives + [w.counter for w in ins.waits]:
            if not 0 <= c < n_counters:
                p.add("structure", f"{name[ins.index]} names counter {c}, which does not exist")
    if s.mode == "static":
        seen = np.zeros(n, dtype=np.int64)
        for q in s.queues or []:
            for i in q:
                seen[i] += 1
        for bad in np.nonzero(seen != 1)[0]:
            k = int(bad)
            p.add("hang" if seen[k] == 0 else "race", f"{name[k]} is in {int(seen[k])} queues (an instruction runs "
                  "exactly once)")
    if not p.ok:
        return p
    # --- waits: satisfiable and epoch-consistent --------------------------------------------------
    arrivals = [0] * n_counters
    for ins in s.instrs:
        for c in ins.arrives:
            arrivals[c] += s.cluster
    consistent: dict[int, bool] = {}
    for ins in s.instrs:
        for w in ins.waits:
            a = arrivals[w.counter]
            if w.target > a:
                p.add("hang", f"{name[ins.index]} waits for {w.target} arrivals on counter {w.counter}, which gets "
                      f"{a} a call")
            elif w.target < a:
                p.add("race", f"{name[ins.index]} waits for {w.target} arrivals on counter {w.counter}, which gets "
                      f"{a} a call: from the second call on it passes before its producers")
            consistent.setdefault(w.counter, True)
            if w.target != a:
                consistent[w.counter] = False
    # --- deadlock -----------------------------------------------------------------------------
    order = _topological(s, consistent, p)
    if s.mode == "static":
        _abstract_run(s, arrivals, p, name)
    else:
        arr: dict[int, list[int]] = {}
        for ins in s.instrs:
            for c in ins.arrives:
                arr.setdefault(c, []).append(ins.index)
        for ins in s.instrs:
            for w in ins.waits:
                late = [m for m in arr.get(w.counter, ()) if m >= ins.index]
                if late:
                    p.add("hang", f"{name[ins.index]} waits on instruction {late[0]}, later in the global order "
                          "(the units take indices in that order)")
    # --- races --------------------------------------------------------------------------------
    hb = _Order(s, consistent, order)
    _races(s, hb, p, name)
    return p


def _topological(s: Schedule, consistent: dict[int, bool], p: Problems) -> list[int]:
    """Instructions in an order where every arriver precedes the waiters of its counter (counters
    are the graph's middle nodes, so a counter of many arrivers and many waiters costs their sum);
    a cycle of waits is a hang (reported once)."""
    n = len(s.instrs)
    waiters: dict[int, list[int]] = {}
    left_in = [0] * n  # counters an instruction still waits for
    for ins in s.instrs:
        cs = {w.counter for w in ins.waits}
        left_in[ins.index] = len(cs)
        for c in cs:
            waiters.setdefault(c, []).append(ins.index)
    left_arr: dict[int, int] = {}
    for ins in s.instrs:
        for c in set(ins.arrives):
            left_arr[c] = left_arr.get(c, 0) + 1
    q = deque(i for i in range(n) if left_in[i] == 0)
    for c in waiters:
        if left_arr.get(c, 0) == 0:  # nobody arrives: its waiters are not held back by an order
            for j in waiters[c]:
                left_in[j] -= 1
                if left_in[j] == 0:
                    q.append(j)
    out = []
    while q:
        i = q.popleft()
        out.append(i)
        for c in set(s.instrs[i].arrives):
            left_arr[c] -= 1
            if left_arr[c] == 0:
                for j in waiters.get(c, ()):
                    left_in[j] -= 1
                    if left_in[j] == 0:
                        q.append(j)
    if len(out) < n:
        stuck = next(i for i in range(n) if left_in[i] > 0)
        p.add("hang", f"instruction {stuck} is on a cycle of waits")
    return out


def _abstract_run(s: Schedule, arrivals: list[int], p: Problems, name: dict[int, str]) -> None:
    """Run every unit's head whenever its waits are met (counts per call); it must finish."""
    queues = s.queues or []
    pos = [0] * len(queues)
    value = [0] * len(s.counters)
    blocked: dict[int, list[int]] = {}
    ready = deque(range(len(queues)))
    done = 0
    while ready:
        u = ready.popleft()
        while pos[u] < len(queues[u]):
            ins = s.instrs[queues[u][pos[u]]]
            unmet = next((w for w in ins.waits if value[w.counter] < w.target), None)
            if unmet is not None:
                blocked.setdefault(unmet.counter, []).append(u)
                break
            pos[u] += 1
            done += 1
            for c in ins.arrives:
                value[c] += s.cluster
                ready.extend(blocked.pop(c, []))
    if done < len(s.instrs):
        for u, q in enumerate(queues):
            if pos[u] < len(q):
                ins = s.instrs[q[pos[u]]]
                w = next(w for w in ins.waits if value[w.counter] < w.target)
                p.add("hang", f"unit {u} stops at {name[ins.index]}: counter {w.counter} reaches {value[w.counter]} "
                      f"of {w.target}")
                break


def _races(s: Schedule, hb: _Order, p: Problems, name: dict[int, str]) -> None:
    prog = s.program
    writers: dict[int, list[Instr]] = {}
    readers: dict[int, list[tuple[Instr, Box]]] = {}
    for ins in s.instrs:
        writers.setdefault(ins.write.tensor, []).append(ins)
        for acc in ins.reads:
            readers.setdefault(acc.tensor, []).append((ins, acc.box))
    found = 0

    def race(msg: str) -> None:
        nonlocal found
        found += 1
        if found <= 50:
            p.add("race", msg)

    for t in prog.tensors:
        ws = writers.get(t.id, [])
        if t.kind == "input" and ws:
            race(f"{name[ws[0].index]} writes the caller's input {t.name}")
            continue
        if ws:
            # (an instruction writing several boxes is a row each: `Instr.writes`)
            wsb = [(w, acc.box) for w in ws for acc in w.writes]
            ws = [w for w, _ in wsb]
            lo = np.array([[lo for lo, _ in b] for _, b in wsb])
            hi = np.array([[hi for _, hi in b] for _, b in wsb])
            if len(ws) > 1:
                inter = np.all(np.maximum(lo[:, None], lo[None]) < np.minimum(hi[:, None], hi[None]), axis=2)
                np.fill_diagonal(inter, False)
                inter &= np.array([[a is not b for b in ws] for a in ws])  # (an instruction's own boxes)
                if inter.any():
                    a, b = (int(x) for x in np.argwhere(inter)[0])
                    race(f"{name[ws[a].index]} and {name[ws[b].index]} write the same elements of {t.name}")
        for r, box in readers.get(t.id, []):
            if t.kind == "input" or (t.kind == "state" and not ws):
                continue
            if not ws:
                race(f"{name[r.index]} reads {t.name}, which nothing writes")
                continue
            rlo = np.array([l for l, _ in box])
            rhi = np.array([h for _, h in box])
            ilo = np.maximum(lo, rlo)
            ihi = np.minimum(hi, rhi)
            ext = np.clip(ihi - ilo, 0, None)
            vols = np.prod(ext, axis=1)
            if int(vols.sum()) != _vol(box) and t.kind != "state":  # state: the rest is the caller's
                race(f"{name[r.index]} reads elements of {t.name} that no instruction writes")
            for k in np.nonzero(vols)[0]:
                w = ws[int(k)]
                if not hb.before(w.index, r.index, stage_load=True):
                    race(f"{name[r.index]} may load {t.name} before {name[w.index]} stores it")
                    break
    # a read marked early is loaded before the instruction's waits: nothing of the launch may write it
    for ins in s.instrs:
        for e in ins.early:
            t = prog.tensors[ins.reads[e].tensor]
            # state: only the rows an append writes are off limits (the caller's rows are read early)
            hit = [w for w in writers.get(t.id, []) if t.kind != "state"
                   or any(_intersect(acc.box, ins.reads[e].box) for acc in w.writes)]
            if hit:
                race(f"{name[ins.index]} loads {t.name} before its waits (early), but "
                     f"{name[hit[0].index]} writes it")
    _shared_buffers(s, hb, race, writers, readers, name)


def _shared_buffers(s: Schedule, hb: _Order, race: Callable[[str], None], writers: dict[int, list[Instr]],
                    readers: dict[int, list[tuple[Instr, Box]]], name: dict[int, str]) -> None:
    prog = s.program
    on: dict[int, list[int]] = {}
    for t in prog.tensors:
        on.setdefault(s.buffer_of[t.id], []).append(t.id)
    for b, ts in on.items():
        if len(ts) < 2:
            continue
        # the chain: when each tensor's accesses all precede the next one's writes, every pair is
        # ordered (a tensor's readers follow its writers, which follow everything before them)
        chain = sorted(ts, key=lambda t: min((w.index for w in writers.get(t, [])), default=-1))
        if all(_before_all(s, hb, x, y, writers, readers) for x, y in zip(chain, chain[1:])):
            continue
        for x in range(len(ts)):
            for y in range(x + 1, len(ts)):
                _pair(s, hb, race, prog.tensors[ts[x]].id, prog.tensors[ts[y]].id, writers, readers, name)


def _before_all(s: Schedule, hb: _Order, first: int, second: int, writers: dict[int, list[Instr]],
                readers: dict[int, list[tuple[Instr, Box]]]) -> bool:
    """Every access of `first` completes before every write of `second` (and `first`, whose value
    is then gone, is neither the caller's input nor an output)."""
    if s.program.tensors[first].kind in ("input", "state", "output"):
        return False
    fa = [i.index for i in _touching(s, first, writers, readers)]
    return all(hb.all_before(fa, w.index, stage_load=False) for w in writers.get(second, []))


def _pair(s: Schedule, hb: _Order, race: Callable[[str], None], a: int, b: int,
          writers: dict[int, list[Instr]], readers: dict[int, list[tuple[Instr, Box]]], name: dict[int, str]) -> None:
    """Two tensors in one buffer: whatever touches the elements they share is ordered, and a read sees
    its own tensor's value."""
    prog = s.program
    ta, tb = prog.tensors[a], prog.tensors[b]
    caller = ("input", "state")
    if ta.kind in caller and tb.kind in caller:
        race(f"the caller's inputs {ta.name} and {tb.name} are given one buffer")
        return
    for t, other in ((ta, tb), (tb, ta)):
        if t.kind in caller and writers.get(other.id):
            race(f"{name[writers[other.id][0].index]} writes {other.name} over the caller's input {t.name}")
            return
    shared = min(ta.size, tb.size)  # both start at the buffer's start

    def acc(t: int) -> list[tuple[Instr, bool, list[tuple[int, int]]]]:
        shape = prog.tensors[t].shape
        out = [(w, True, sorted(iv for acc in w.writes for iv in _footprint(shape, acc.box))) for w in writers.get(t, [])]
        out += [(r, False, _footprint(shape, box)) for r, box in readers.get(t, [])]
        return [(i, wr, [(lo, min(hi, shared)) for lo, hi in fp if lo < shared]) for i, wr, fp in out]

    if _before_all(s, hb, a, b, writers, readers) or _before_all(s, hb, b, a, writers, readers):
        return
    # exact: every pair that shares elements, at least one a write, is ordered; reads see their own
    acc_a, acc_b = acc(a), acc(b)
    wa = [(i, fp) for i, wr, fp in acc_a if wr]
    wb = [(i, fp) for i, wr, fp in acc_b if wr]
    for mine, theirs_w, mine_w, t_mine, t_other in ((acc_a, wb, wa, ta, tb), (acc_b, wa, wb, tb, ta)):
        for x, xw, fx in mine:
            for y, fy in theirs_w:
                if x.index == y.index:
                    continue
                common = _overlap(fx, fy)
                if not common:
                    continue
                x_first = hb.before(x.index, y.index, stage_load=False)
                y_first = hb.before(y.index, x.index, stage_load=not xw)
                if not (x_first or y_first):
                    race(f"{name[x.index]} and {name[y.index]} touch the same elements of buffer "
                         f"{s.buffer_of[t_mine.id]} ({t_mine.name}, {t_other.name}) unordered")
                    return
                if xw and x_first and t_mine.kind == "output":
                    race(f"{name[y.index]} writes {t_other.name} over the output {t_mine.name} after it is written")
                    return
                if not xw and y_first:
                    # x reads its tensor after the other's write: its own writers must come after that write
                    for w, fw in mine_w:
                        if _overlap(fw, common) and not hb.before(y.index, w.index, stage_load=False):
                            race(f"{name[x.index]} may read {t_other.name}'s value (written by {name[y.index]}) "
                                 f"where it reads {t_mine.name}")
                            return


def _touching(s: Schedule, t: int, writers: dict[int, list[Instr]],
              readers: dict[int, list[tuple[Instr, Box]]]) -> list[Instr]:
    out = {w.index: w for w in writers.get(t, [])}
    out.update({r.index: r for r, _ in readers.get(t, [])})
    return list(out.values())


def element_bytes(s: Schedule, t: int) -> int:
    return element_type(s.program.tensors[t].dtype).bytes


__all__ = ["validate", "Problems"]
