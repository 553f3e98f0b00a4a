"""Running the megakernel on the GPU: `MegaRunner` (device memory for the schedule's buffers, the
queue, the counters, host-visible status words; calls with a growing call number, PDL between them;
the watchdog with a per-SM dump), `status_lines` (the dump, also on the host checker's status
words), and `run_job` (`warpy mega run GRAPH`: every output element against the reference).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from warpy.errors import WarpyError
from warpy.mega.fields import unpack

from .mega import MegaConfig, MegaProblem, Plan, buffer_images, build, compare, inputs, outputs_of, plan
from .mega_sm90 import DONE, ROLE_CODES, STAGE_LOAD, STATUS_ROLE_WORDS, STATUS_WORDS


def status_lines(pl: Plan, words: np.ndarray, counters: Optional[np.ndarray] = None) -> list[str]:
    """Where each SM stands, from the launch's status words (units x STATUS_WORDS): each role that
    is waiting on a counter (the instruction, the counter, what it waits for, what it saw: `counters`
    where the current values are known); SMs with no wait pending are counted on one line."""
    n = pl.launch.units * STATUS_WORDS
    w = np.asarray(words, dtype=np.uint32).ravel()[:n].reshape(pl.launch.units, STATUS_WORDS)
    names = {v: k for k, v in ROLE_CODES.items()}
    lines, idle = [], 0
    for u in range(pl.launch.units):
        mine = []
        for code in range(len(ROLE_CODES)):
            idx1, what, ctr, want, seen, call = (int(x) for x in w[u, code * STATUS_ROLE_WORDS:code * STATUS_ROLE_WORDS + 6])
            if not idx1 or what & DONE:
                continue
            stage = "loads" if what & 0xFF == STAGE_LOAD else "stores"
            ins = pl.schedule.instrs[idx1 - 1] if idx1 - 1 < len(pl.schedule.instrs) else None
            node = f" (node {ins.node} {pl.schedule.program.nodes[ins.node].describe()})" if ins is not None else ""
            now = f", now {int(counters[ctr])}" if counters is not None and ctr < len(counters) else ""
            mine.append(f"SM {u}: the {names.get(code, code)} waits before the {stage} of instruction {idx1 - 1}{node} "
                        f"on counter {ctr}: saw {seen}{now}, waits for {want} (call {call})")
        if mine:
            lines += mine
        else:
            idle += 1
    if idle:
        lines.append(f"{idle} SM{'s' if idle != 1 else ''}: no counter wait pending (done, or running)")
    return lines


class MegaRunner:
    """One launch configuration on the GPU: the interpreter's cubin, device memory for every buffer
    of the schedule, the queue, the counters (never reset: call c waits for target x c), the status
    words (host-visible); `__call__(values)` uploads the inputs, launches (PDL after the first) and
    returns the outputs; a launch that exceeds `deadline` seconds raises HangError with the per-SM
    dump."""

    def __init__(self, problem: MegaProblem, config: Optional[MegaConfig] = None, *, deadline: float = 10.0,
                 pdl: bool = True, encode: Optional[Callable[..., Any]] = None) -> None:
        from warpy.lift.lifter import build as assemble
        from warpy.runtime import device, load, to_device
        from warpy.runtime.driver import require_arch
        from warpy.runtime.memory import alloc, host_mapped, zeros

        require_arch(problem.arch)
        dev = device()
        if problem.units > dev.sm_count:
            raise WarpyError(f"{problem.units} units: the persistent interpreter needs a CTA on an SM each, and the "
                             f"GPU has {dev.sm_count} SMs")
        cfg = config if config is not None else MegaConfig()
        self.plan: Plan = plan(problem, cfg)
        self.program = build(problem, cfg)
        self.header = self.program.header(with_regs=False)
        cubin = assemble(self.program.kernel(), problem.arch, check=False)  # (CI checks the disassembly)
        self.kernel = load(cubin).kernel(self.header.kernel)
        self.deadline = deadline
        self.pdl = pdl
        self.encode = encode  # (None: cuTensorMapEncodeTiled, memoised)
        self.calls = 0
        s = self.plan.schedule
        self.buffers = {b: alloc(max(nbytes, 16)) for b, nbytes in self.plan.launch.buffers}
        self.queue = to_device(self.plan.per_unit)
        self.counters = zeros(max(4 * len(s.counters), 4))
        self.status = host_mapped(4 * STATUS_WORDS * self.plan.launch.units)
        self.memory: dict[str, Any] = {f"buf{b}": m for b, m in self.buffers.items()}
        self.memory.update(queue=self.queue, counters=self.counters, status=self.status)

    def upload(self, values: Mapping[str, np.ndarray]) -> None:
        """The inputs into their buffers (and the poison into every other buffer)."""
        for b, img in buffer_images(self.plan, values).items():
            self.buffers[b].upload(img.view(np.uint8)[: self.buffers[b].nbytes])

    def launch(self) -> None:
        from warpy.kernels.mega import bind
        from warpy.runtime.bind import launch_header

        self.calls += 1
        self.status.zero()
        params = bind(self.header, self.memory, self.calls, encode=self.encode)
        launch_header(self.kernel, self.header, params, pdl=self.pdl and self.calls > 1)

    def wait(self) -> None:
        from warpy.runtime.launcher import synchronize

        synchronize(timeout=self.deadline, kernel=self.header.kernel, on_hang=self.dump)

    def dump(self) -> str:
        """Where each SM stands (status words; counters are device memory, not read after a hang)."""
        return "\n".join(status_lines(self.plan, self.status.words()))

    def outputs(self) -> list[np.ndarray]:
        images = {b: m.download(np.uint16) for b, m in self.buffers.items()}
        return outputs_of(self.plan, images)

    def __call__(self, values: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        self.upload(values)
        self.launch()
        self.wait()
        return self.outputs()


def run_job(graph: str, tokens: Optional[int] = None, units: int = 0, calls: int = 3, deadline: float = 10.0,
            fault: str = "", seed: int = 0, echo: Callable[[str], None] = print) -> bool:
    """`warpy mega run`: build, run `calls` calls on the GPU (the counters carry over: each call waits
    for its own epoch), compare every output element of each call with the reference; False if any
    differs. A hang raises HangError with the per-SM dump."""
    problem = MegaProblem(graph, tokens, units=units)
    r = MegaRunner(problem, MegaConfig(fault=fault), deadline=deadline)
    pl = r.plan
    s = pl.schedule
    echo(f"{problem}: {len(s.instrs)} instructions on {pl.launch.units} SMs ({pl.launch.waves} waves), "
         f"{len(s.counters)} counters, {len(pl.encoded.maps)} tensor maps in a table, {pl.launch.units} x 384 threads, "
         f"{r.header.dynsmem} bytes of shared memory")
    ok = True
    for call in range(1, calls + 1):
        values = inputs(pl, seed + call)
        want = s.program.reference(values)
        t0 = time.perf_counter()
        got = r(values)
        dt = time.perf_counter() - t0
        n, bad, msgs = compare(pl, got, want)
        echo(f"call {call}: {n - bad} of {n} output elements equal the reference ({dt * 1e3:.2f} ms with the copies)")
        for m in msgs:
            echo("  " + m)
        ok = ok and bad == 0
    words = r.counters.download(np.uint32)
    short = [c.id for c in s.counters if int(words[c.id]) != (c.target * calls) & 0xFFFFFFFF]
    echo(f"counters after {calls} calls: " + ("each holds its arrivals x calls" if not short else
                                              f"{len(short)} do not hold their arrivals x calls: {short[:8]}"))
    return ok and not short


def first_wait(pl: Plan) -> Optional[tuple[int, int, int]]:
    """(unit, wave, instruction) of the first queued instruction with a load-stage wait (a test's
    target for a fault)."""
    q = pl.per_unit
    for k in range(q.shape[0]):
        for u in range(q.shape[1]):
            f = unpack([int(x) for x in q[k, u]])
            if f["n_waits"]:
                return u, k, f["index"]
    return None


__all__ = ["MegaRunner", "status_lines", "run_job", "first_wait"]

_ = Sequence
