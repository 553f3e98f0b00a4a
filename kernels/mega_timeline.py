"""The megakernel's timeline: what `warpy mega run --timeline` reads back and reports.

With `MegaConfig.timeline` the sm_90a interpreter's roles stamp each instruction's steps with
%globaltimer (ns, its low 32 bits) into a `times` buffer, `TIME_WORDS` words an instruction
(`kernels.mega_common.STAMPS`): the loader when it has the instruction's slot, when its counter
waits passed and when its copies are issued; the consumers when they have the slot, when they
computed and (a gemm's) when each stage's bytes had landed (the last stage's stays); the storer
when it has the slot, when its stores' writes are done and when it arrived on the counters. This module turns one call's words into

- per instruction, its steps in µs from the call's first stamp (`Timeline`);
- a report: each node's span (first slot to last arrive) and the medians of its tiles' steps after
  each tile's own counter waits (copies issued, consumers done, arrived), the mean of each step per op kind, and the
  *hop* of each counter wait (the waiter's waits passed minus the last arrival of what it waits
  for: the cost of one dependency between SMs, which the schedule's model takes as free);
- a Chrome trace (chrome://tracing or ui.perfetto.dev): a process per SM, a thread per role.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import attrs
import numpy as np

from .mega_common import STAMPS, TIME_WORDS

#: the steps the report measures, each (name, from stamp, to stamp) by (role, what)
STEPS = (
    ("wait", ("loader", "start"), ("loader", "waits")),
    ("issue", ("loader", "waits"), ("loader", "end")),
    ("compute", ("consumers", "start"), ("consumers", "end")),
    # a gemm's: from the consumers' start to its last stage's bytes landing, and from there to their end
    ("data", ("consumers", "start"), ("consumers", "data")),
    ("tail", ("consumers", "data"), ("consumers", "end")),
    ("store", ("storer", "start"), ("storer", "written")),
    ("arrive", ("storer", "written"), ("storer", "end")),
    ("slot to arrive", ("loader", "start"), ("storer", "end")),
)


@attrs.frozen
class Timeline:
    """One call's stamps: `at[i, w]` µs from the call's first stamp for instruction i's word w
    (NaN where an instruction has no such stamp), with the schedule it ran."""

    schedule: Any
    at: np.ndarray  # (instructions, TIME_WORDS) float64, µs

    @classmethod
    def from_words(cls, schedule: Any, words: np.ndarray) -> "Timeline":
        """From the `times` buffer's u32 words (zero: never stamped; a stamp is odd). The timer's low 32 bits wrap
        every 4.3 s; a call is far shorter, so differences are taken modulo 2^32 from the first."""
        n = len(schedule.instrs)
        w = np.asarray(words, dtype=np.uint32)[: n * TIME_WORDS].reshape(n, TIME_WORDS)
        stamped = w != 0
        if not stamped.any():
            raise ValueError("the timeline has no stamps (was the interpreter built with timeline=True?)")
        # the earliest stamp may sit just below a wrap and others just above it: take the stamp that
        # minimises the spread as the origin (the call spans far less than half the period)
        vals = np.unique(w[stamped].astype(np.int64))
        gaps = np.diff(np.concatenate([vals, vals[:1] + (1 << 32)]))
        first = int(vals[(int(np.argmax(gaps)) + 1) % len(vals)])
        rel = (w.astype(np.int64) - first) % (1 << 32)
        at = np.where(stamped, rel / 1e3, np.nan)
        return cls(schedule, at)

    def stamp(self, role: str, what: str) -> np.ndarray:
        return np.asarray(self.at[:, STAMPS[(role, what)]])

    def step(self, name: str) -> np.ndarray:
        _, a, b = next(s for s in STEPS if s[0] == name)
        return np.asarray(self.stamp(*b) - self.stamp(*a))

    @property
    def total_us(self) -> float:
        return float(np.nanmax(self.at))

    def hops(self) -> list[tuple[int, int, float]]:
        """(waiting instruction, counter, µs from the counter's last arrival to the wait passing)
        for each load-stage wait: the latency of a dependency between SMs."""
        s = self.schedule
        arrived = self.stamp("storer", "end")
        passed = self.stamp("loader", "waits")
        out = []
        for ins in s.instrs:
            for w in ins.waits:
                if w.before_store:
                    continue
                last = max(arrived[m] for m in s.counters[w.counter].members)
                out.append((ins.index, w.counter, float(passed[ins.index] - last)))
        return out

    def unit_of(self) -> dict[int, int]:
        s = self.schedule
        return {i: u for u, q in enumerate(s.queues or []) for i in q}


def _kind(schedule: Any, node: int) -> str:
    n = schedule.program.nodes[node]
    if n.kind == "gemm":
        t = schedule.tilings[node].extents
        return f"gemm {t[0]}x{t[1]}"
    return str(n.kind)


def _fmt(x: float) -> str:
    return "-" if x != x else f"{x:.1f}"


def after_waits(tl: Timeline, idx: Sequence[int]) -> tuple[float, float, float, float]:
    """Medians over instructions `idx` (a node's tiles) of each tile's own steps from its counter
    waits passing: its copies issued, its consumers done, its arrival; and its consumers done to its
    arrival (the store and the release). Where a level's time goes, whatever the tiles' skew."""
    passed = tl.stamp("loader", "waits")[list(idx)]

    def med(x: np.ndarray) -> float:
        x = x[np.isfinite(x)]
        return float(np.median(x)) if x.size else float("nan")

    issued, computed, arrived = (tl.stamp(*k)[list(idx)] for k in (("loader", "end"), ("consumers", "end"),
                                                                     ("storer", "end")))
    return med(issued - passed), med(computed - passed), med(arrived - passed), med(arrived - computed)


def report(tl: Timeline) -> str:
    """The nodes' spans and each tile's steps after its waits (medians), the steps per op kind and the
    hops, as text tables (µs)."""
    s = tl.schedule
    lines = [f"timeline of one call: {tl.total_us:.1f} µs from the first instruction's slot to the last stamp"]
    lines.append("")
    lines.append(f"{'node':>4}  {'what':<34} {'tiles':>5}  {'first slot':>10}  {'waits passed':>12}  "
                 f"{'last arrive':>11}  {'span':>6}   after a tile's waits (medians): {'issued':>6}  "
                 f"{'computed':>8}  {'arrived':>7}  {'store+arrive':>12}")
    start, passed, done = tl.stamp("loader", "start"), tl.stamp("loader", "waits"), tl.stamp("storer", "end")
    by_node: dict[int, list[int]] = {}
    for ins in s.instrs:
        by_node.setdefault(ins.node, []).append(ins.index)
    for node, idx in by_node.items():
        n = s.program.nodes[node]
        a, p, d = (float(np.nanmin(start[idx])), float(np.nanmin(passed[idx])), float(np.nanmax(done[idx])))
        steps = after_waits(tl, idx)
        lines.append(f"{node:>4}  {n.describe()[:34]:<34} {len(idx):>5}  {a:>10.1f}  {p:>12.1f}  {d:>11.1f}  "
                     f"{d - a:>6.1f}   {'':>31} " + "  ".join(f"{_fmt(v):>{w}}" for v, w in zip(steps, (6, 8, 7, 12))))
    lines.append("")
    names = [st[0] for st in STEPS]
    lines.append(f"{'op kind':<16} {'tiles':>5}  " + "  ".join(f"{nm + ' µs':>16}" for nm in names)
                 + "   (mean over the kind's instructions)")
    kinds: dict[str, list[int]] = {}
    for ins in s.instrs:
        kinds.setdefault(_kind(s, ins.node), []).append(ins.index)
    for kind, idx in kinds.items():
        vals = [float(np.nanmean(tl.step(nm)[idx])) if np.isfinite(tl.step(nm)[idx]).any() else float("nan")
                for nm in names]
        lines.append(f"{kind:<16} {len(idx):>5}  " + "  ".join(f"{_fmt(v):>16}" for v in vals))
    hops = tl.hops()
    if hops:
        lines.append("")
        lines.append("hops (a load-stage wait passing after the last arrival it waits for), µs, by the waiter's kind:")
        lines.append(f"{'waiter':<16} {'waits':>6}  {'median':>7}  {'p90':>7}  {'max':>7}")
        per: dict[str, list[float]] = {}
        for i, _, h in hops:
            per.setdefault(_kind(s, s.instrs[i].node), []).append(h)
        for kind, hs in per.items():
            v = np.asarray(hs)
            v = v[np.isfinite(v)]
            if v.size:
                lines.append(f"{kind:<16} {v.size:>6}  {np.median(v):>7.2f}  {np.percentile(v, 90):>7.2f}  "
                             f"{v.max():>7.2f}")
    return "\n".join(lines)


def chrome_trace(tl: Timeline) -> dict[str, Any]:
    """Trace events (µs): a process per SM (unit), a thread per role, an event per instruction and
    role spanning its slot to its end, named by the node, with the steps in its args."""
    s = tl.schedule
    unit = tl.unit_of()
    events: list[dict[str, Any]] = []
    spans = (("loader", "start", "end"), ("consumers", "start", "end"), ("storer", "start", "end"))
    for ins in s.instrs:
        n = s.program.nodes[ins.node]
        for tid, (role, a, b) in enumerate(spans):
            t0, t1 = tl.at[ins.index, STAMPS[(role, a)]], tl.at[ins.index, STAMPS[(role, b)]]
            if not (np.isfinite(t0) and np.isfinite(t1)):
                continue
            args: dict[str, Any] = {"instruction": ins.index, "node": ins.node}
            if role == "loader":
                args["waits passed µs"] = round(float(tl.at[ins.index, STAMPS[("loader", "waits")]] - t0), 3)
            events.append({"name": f"{ins.node}: {n.describe()}", "cat": role, "ph": "X", "ts": float(t0),
                           "dur": max(float(t1 - t0), 0.001), "pid": unit.get(ins.index, 0), "tid": tid,
                           "args": args})
    for u in range(s.units):
        events.append({"name": "process_name", "ph": "M", "pid": u, "args": {"name": f"SM {u}"}})
        for tid, (role, _, _) in enumerate(spans):
            events.append({"name": "thread_name", "ph": "M", "pid": u, "tid": tid, "args": {"name": role}})
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_trace(tl: Timeline, path: str) -> None:
    with open(path, "w") as f:
        json.dump(chrome_trace(tl), f)


def summary_row(tl: Timeline) -> dict[str, float]:
    """The numbers a bench row keeps: the call's µs and the median hop."""
    h = np.asarray([x for _, _, x in tl.hops()])
    h = h[np.isfinite(h)] if h.size else h
    return {"total_us": tl.total_us, "hop_median_us": float(np.median(h)) if h.size else float("nan")}


__all__ = ["Timeline", "STEPS", "report", "chrome_trace", "write_trace", "summary_row"]
