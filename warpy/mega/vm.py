"""The reference VM: numpy runs a schedule tile by tile, the way the device interpreter must.

Each unit walks its queue (static mode) or takes the next global index (dynamic mode). An
instruction is two steps, as on the device: LOAD (after its load-stage waits: the operands' boxes
are read) and STORE (after its store-stage waits: the tile is computed, written, and its counters
get one arrival per CTA of the unit). A unit may have two instructions loaded (the interpreter's
two instruction slots), stores in order. Every step is taken in a random order among those
possible (seeded), so one run is one interleaving the GPU could produce.

Counters are 32-bit and monotonic: before call `epoch` each holds its arrivals per call x (epoch - 1)
(modulo 2^32), a waiter passes when the signed difference counter - target x epoch is >= 0, exactly
the device's test. No state is reset between calls.

With `races=True` the VM also keeps, per buffer element, the tensor and the instruction that wrote
it, and vector clocks through the counters (a waiter acquires the arrivals up to the one that let
it pass, no more): a load that sees another tensor's value, an unwritten or stale element, or a
writer it is not ordered after, and a store over elements an unordered instruction touched, are
races. A run that can make no step is a hang, reported per unit like the device's status words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

import numpy as np

from warpy.errors import WarpyError
from warpy.mega.lower import compute
from warpy.mega.schedule import Instr, Schedule
from warpy.mega.tiling import operand_boxes

MASK32 = 0xFFFFFFFF


def passes(value: int, target: int, epoch: int) -> bool:
    """The device's wait test: (s32)(counter - target x epoch) >= 0."""
    d = (value - target * epoch) & MASK32
    return d < 0x80000000


@dataclass
class Outcome:
    outputs: list[np.ndarray] = field(default_factory=list)
    hang: list[str] = field(default_factory=list)
    races: list[str] = field(default_factory=list)
    steps: int = 0
    #: the state tensors (caches the launch appends to) as the call leaves them, by name
    state: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.hang and not self.races


class VM:
    """One schedule's state across calls: buffers, counters (nothing reset between calls)."""

    def __init__(self, s: Schedule, *, values: bool = True, races: bool = False, seed: int = 0, epoch: int = 1,
                 units: Optional[int] = None):
        if units is not None and s.queues is not None:
            raise WarpyError("the number of units is the schedule's own in static mode")
        self.s = s
        self.units = units or s.units
        self.values = values
        self.track = races
        self.rng = np.random.default_rng(seed)
        self.epoch = epoch
        prog = s.program
        self.arrivals = [0] * len(s.counters)
        for ins in s.instrs:
            for c in ins.arrives:
                self.arrivals[c] += s.cluster
        self.counter = [(a * (epoch - 1)) & MASK32 for a in self.arrivals]
        sizes: dict[int, int] = {}
        for t in prog.tensors:  # a buffer holds the largest tensor put in it
            b = s.buffer_of[t.id]
            sizes[b] = max(sizes.get(b, 0), t.size)
        self.buf: dict[int, np.ndarray] = {}
        if values:
            self.buf = {b: np.full(n, np.nan, dtype=np.float32) for b, n in sizes.items()}
        if races:
            self.tag = {b: np.full(n, -1, dtype=np.int64) for b, n in sizes.items()}
            self.writer = {b: np.full(n, -1, dtype=np.int64) for b, n in sizes.items()}
            for t in prog.tensors:
                if t.kind in ("input", "state"):
                    self.tag[s.buffer_of[t.id]][:t.size] = t.id

    def array(self, store: dict[int, np.ndarray], t: int) -> np.ndarray:
        tt = self.s.program.tensors[t]
        return store[self.s.buffer_of[t]][:tt.size].reshape(tt.shape)

    def run(self, inputs: Optional[Mapping[str, np.ndarray]] = None) -> Outcome:
        """One call (at the current epoch, then the epoch advances)."""
        s = self.s
        prog = s.program
        out = Outcome()
        if self.values:
            for t in prog.tensors:
                if t.kind in ("input", "state"):  # state: the caller's cache as it stands before the call
                    if inputs is None or t.name not in inputs:
                        raise WarpyError(f"no value given for input {t.name!r}")
                    self.array(self.buf, t.id)[...] = t.caller_array(np.asarray(inputs[t.name], dtype=np.float32))
        n_units = self.units
        queue: list[list[int]] = [list(q) for q in s.queues] if s.queues is not None else [[] for _ in range(n_units)]
        next_take = 0
        loaded: list[list[int]] = [[] for _ in range(n_units)]
        load_pos = [0] * n_units
        snap: dict[int, list[np.ndarray]] = {}
        clock_load: dict[int, int] = {}
        history: list[list[tuple[int, int]]] = [[] for _ in s.counters]  # (value, clock) after each arrival
        cclock = [0] * len(s.counters)
        loaded_reads: dict[int, list[tuple[int, int, np.ndarray]]] = {}  # buffer -> (instr, tensor, mask)
        done = 0
        n = len(s.instrs)

        if self.track:  # elements written by an earlier call: ordered by the launch boundary
            for w in self.writer.values():
                w[w >= 0] = -2
        blocked_on: dict[int, set[int]] = {}

        def acquire(ins: Instr, stage_store: bool) -> tuple[Optional[int], int]:
            """(the clock the waits of a stage give, -1), or (None, the counter not yet met)."""
            clk = 0
            for w in ins.waits:
                if w.before_store != stage_store:
                    continue
                if not passes(self.counter[w.counter], w.target, self.epoch):
                    return None, w.counter
                if self.track:
                    # the arrivals up to the first value that passes, no more
                    base = (self.arrivals[w.counter] * (self.epoch - 1)) & MASK32
                    if passes(base, w.target, self.epoch):
                        continue
                    for v, c in history[w.counter]:
                        if passes(v, w.target, self.epoch):
                            clk |= c
                            break
            return clk, -1

        def possible(u: int) -> Optional[tuple[str, int]]:
            nonlocal next_take
            if loaded[u]:
                i = loaded[u][0]
                clk, c = acquire(s.instrs[i], True)
                if clk is not None:
                    return ("store", i)
                blocked_on.setdefault(c, set()).add(u)
            if len(loaded[u]) < 2:
                if s.queues is None and load_pos[u] == len(queue[u]) and next_take < n:
                    queue[u].append(next_take)
                    next_take += 1
                if load_pos[u] < len(queue[u]):
                    i = queue[u][load_pos[u]]
                    clk, c = acquire(s.instrs[i], False)
                    if clk is not None:
                        return ("load", i)
                    blocked_on.setdefault(c, set()).add(u)
            return None

        enabled: dict[int, tuple[str, int]] = {}

        def refresh(u: int) -> None:
            st = possible(u)
            if st is None:
                enabled.pop(u, None)
            else:
                enabled[u] = st

        for u in range(n_units):
            refresh(u)
        while done < n:
            if not enabled:
                out.hang = self._status(queue, load_pos, loaded)
                break
            keys = list(enabled)
            u = keys[int(self.rng.integers(len(keys)))]
            kind, i = enabled[u]
            ins = s.instrs[i]
            out.steps += 1
            if kind == "load":
                clk, _ = acquire(ins, False)
                assert clk is not None
                clock_load[i] = clk
                load_pos[u] += 1
                loaded[u].append(i)
                if self.track:
                    self._check_load(ins, clk, out, loaded_reads)
                if self.values:
                    snap[i] = [self._read(acc.tensor, acc.box) for acc in ins.reads]
            else:
                clk2, _ = acquire(ins, True)
                assert clk2 is not None
                clk = clock_load.pop(i) | clk2 | (1 << i)
                loaded[u].pop(0)
                if self.track:
                    self._check_store(ins, clk, out, loaded_reads)
                if self.values:
                    node = prog.nodes[ins.node]
                    args = snap.pop(i)
                    shaped = [a.reshape(tuple(hi - lo for lo, hi in vb))
                              for a, vb in zip(args, operand_boxes(prog, node, ins.box))]
                    res = compute(node, shaped, prog.tensors[ins.write.tensor].dtype, ins.box)
                    dest = self.array(self.buf, ins.write.tensor)
                    # a view output: the box in its tensor's dimensions; several boxes (`Instr.writes`):
                    # the result's equal parts along its last dimension, in order
                    parts = np.split(res, len(ins.writes), axis=-1)
                    for acc, part in zip(ins.writes, parts):
                        sl = tuple(slice(lo, hi) for lo, hi in acc.box)
                        dest[sl] = part.reshape(dest[sl].shape)
                for c in ins.arrives:
                    self.counter[c] = (self.counter[c] + s.cluster) & MASK32
                    if self.track:
                        cclock[c] |= clk
                        history[c].append((self.counter[c], cclock[c]))
                done += 1
                for c in ins.arrives:
                    for v in blocked_on.pop(c, set()):
                        if v != u:
                            refresh(v)
            refresh(u)
        if self.track and not out.hang:
            for t in prog.tensors:
                if t.kind in ("input", "state", "output"):
                    tags = self.tag[s.buffer_of[t.id]][:t.size]
                    if (tags != t.id).any():
                        out.races.append(f"after the call, {t.name} ({t.kind}) holds another tensor's elements")
        if self.values and not out.hang:
            out.outputs = [self.array(self.buf, t).copy() for t in prog.outputs]
            out.state = {t.name: self.array(self.buf, t.id).copy() for t in prog.tensors if t.kind == "state"}
        self.epoch += 1
        return out

    def _read(self, t: int, box: tuple[tuple[int, int], ...]) -> np.ndarray:
        return self.array(self.buf, t)[tuple(slice(lo, hi) for lo, hi in box)].copy()

    # --- races ---------------------------------------------------------------------------------

    def _mask(self, t: int, box: tuple[tuple[int, int], ...]) -> np.ndarray:
        b = self.s.buffer_of[t]
        m = np.zeros(len(self.tag[b]), dtype=bool)
        tt = self.s.program.tensors[t]
        m[:tt.size].reshape(tt.shape)[tuple(slice(lo, hi) for lo, hi in box)] = True
        return m

    def _check_load(self, ins: Instr, clk: int, out: Outcome,
                    loaded_reads: dict[int, list[tuple[int, int, np.ndarray]]]) -> None:
        prog = self.s.program
        for acc in ins.reads:
            b = self.s.buffer_of[acc.tensor]
            m = self._mask(acc.tensor, acc.box)
            loaded_reads.setdefault(b, []).append((ins.index, acc.tensor, m))
            tags = self.tag[b][m]
            if (tags != acc.tensor).any():
                bad = int(tags[tags != acc.tensor][0])
                what = "unwritten elements" if bad < 0 else f"{prog.tensors[bad].name}'s elements"
                out.races.append(f"instruction {ins.index} loads {prog.tensors[acc.tensor].name} and finds {what}")
                continue
            for w in np.unique(self.writer[b][m]):
                if w == -2 and prog.tensors[acc.tensor].kind != "input":
                    out.races.append(f"instruction {ins.index} loads {prog.tensors[acc.tensor].name} before this "
                                     "call wrote it (an earlier call's value)")
                elif w >= 0 and not (clk >> int(w)) & 1:
                    out.races.append(f"instruction {ins.index} loads {prog.tensors[acc.tensor].name} written by "
                                     f"instruction {int(w)}, which it is not ordered after")

    def _check_store(self, ins: Instr, clk: int, out: Outcome,
                     loaded_reads: dict[int, list[tuple[int, int, np.ndarray]]]) -> None:
        prog = self.s.program
        t = ins.write.tensor
        b = self.s.buffer_of[t]
        m = self._mask(t, ins.write.box)
        for acc in ins.more:
            m |= self._mask(t, acc.box)
        tags = self.tag[b][m]
        for old in np.unique(tags):
            if old >= 0 and prog.tensors[int(old)].kind == "input":
                out.races.append(f"instruction {ins.index} writes over the caller's input {prog.tensors[int(old)].name}")
        for w in np.unique(self.writer[b][m]):
            if w >= 0 and w != ins.index and not (clk >> int(w)) & 1:
                out.races.append(f"instruction {ins.index} writes elements instruction {int(w)} wrote, unordered")
        for r, rt, rm in loaded_reads.get(b, []):
            if r != ins.index and not (clk >> r) & 1 and (rm & m).any():
                out.races.append(f"instruction {ins.index} writes {prog.tensors[t].name} over elements instruction {r} "
                                 f"loaded ({prog.tensors[rt].name}), unordered")
        self.tag[b][m] = t
        self.writer[b][m] = ins.index

    def _status(self, queue: list[list[int]], load_pos: list[int], loaded: list[list[int]]) -> list[str]:
        """Where each stuck unit stands: the instruction, the counter it waits on, value and target."""
        s = self.s
        lines = []
        for u in range(len(queue)):
            i = loaded[u][0] if loaded[u] else (queue[u][load_pos[u]] if load_pos[u] < len(queue[u]) else None)
            if i is None:
                continue
            ins = s.instrs[i]
            stage = bool(loaded[u])
            w = next((w for w in ins.waits if w.before_store == stage and
                      not passes(self.counter[w.counter], w.target, self.epoch)), None)
            if w is not None:
                lines.append(f"unit {u}: instruction {i} waits before its {'stores' if stage else 'loads'} on counter "
                             f"{w.counter}: {self.counter[w.counter]} of {w.target * self.epoch & MASK32}")
        return lines


def run(s: Schedule, inputs: Mapping[str, np.ndarray], *, seed: int = 0, calls: int = 1, epoch: int = 1,
        races: bool = False) -> Outcome:
    """`calls` calls of the schedule on one VM (the outputs of the last); a hang or race ends it."""
    vm = VM(s, values=True, races=races, seed=seed, epoch=epoch)
    out = Outcome()
    for _ in range(calls):
        out = vm.run(inputs)
        if not out.ok:
            break
    return out


__all__ = ["VM", "Outcome", "run", "passes"]
