"""Running the checker and reporting what it found."""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Callable, Iterator, Optional, Protocol

import attrs
import numpy as np

from warpy.isa.text import Kernel
from warpy.check.expect import Expectation
from warpy.check.happens_before import HbKey
from warpy.check.machine import Machine
from warpy.check.state import Problems, Traced

MAX_LINES = 12  # messages printed per kind (the rest are counted)


@attrs.frozen
class CheckOptions:
    """How a check runs, beyond what it checks: `all_ctas` every CTA of the launch (not only the
    first and last clusters); `seeds` the number of further warp schedules to run and compare."""

    all_ctas: bool = False
    seeds: int = 0


_OPTIONS: ContextVar[CheckOptions] = ContextVar("warpy_check_options", default=CheckOptions())


@contextlib.contextmanager
def options(opts: CheckOptions) -> Iterator[None]:
    """Run the checks inside with these options (`warpy check --all-ctas --seeds N` sets them around
    whatever builds and checks the program)."""
    token = _OPTIONS.set(opts)
    try:
        yield
    finally:
        _OPTIONS.reset(token)


@attrs.define
class Report:
    """What one check found. `problems` holds the distinct messages by kind."""

    kernel: str
    notes_checked: int
    problems: Problems
    steps: int = 0
    seconds: float = 0.0
    values_checked: int = 0
    values_wrong: int = 0
    values_partial: int = 0
    values_unmodelled: int = 0
    values_on: bool = False
    refills: int = 0
    stores: int = 0
    uses_pdl: bool = False
    proxy_fences: int = 0
    hb_table: dict[HbKey, int] = attrs.field(factory=dict)
    fault_note: str = ""
    fault_missed: bool = False  # a fault was injected and the check that should see it did not
    raised_outside: int = 0  # flag words the CTAs outside the simulated clusters were taken to raise
    #: with values: the inputs (A, B as float32) and what the simulated clusters wrote of C (C, and
    #: a mask of the elements written), to compare with what the cubin computes on a GPU
    data: dict[str, np.ndarray] = attrs.field(factory=dict)

    @property
    def ok(self) -> bool:
        return self.problems.total() == 0

    def summary(self) -> str:
        p = self.problems
        s = (f"{self.notes_checked} derived operands checked, {p.count('wrong')} wrong, {p.count('coloured')} changed by "
             f"the colouring; {p.count('named')} named-barrier arrivals that do not make their counts; "
             f"{p.count('protocol')} protocol problems; {p.count('memory')} uses of memory past what was declared; "
             f"{p.count('order')} accesses nothing orders")
        if p.count("data"):
            s += f"; {p.count('data')} MMAs whose operands come from different K"
        if self.uses_pdl or p.count("pdl"):
            s += f"; {p.count('pdl')} global accesses before the dependent-launch wait"
        if p.count("registers"):
            s += f"; {p.count('registers')} register rules broken (use before def, wgmma fence)"
        if p.count("coverage"):
            s += f"; {p.count('coverage')} output tiles or elements not written exactly once"
        if self.raised_outside:
            s += (f"; {self.raised_outside} flag words raised by CTAs outside the simulated clusters (a flag a "
                  f"simulated CTA fails to raise shows only with --all-ctas)")
        if p.count("schedule"):
            s += f"; {p.count('schedule')} verdicts that differ between warp schedules"
        if self.values_on or self.values_checked or p.count("values"):
            s += f"; {self.values_checked} output values computed, {self.values_wrong} differ from numpy"
            if self.values_partial:
                s += (f" ({self.values_partial} more hold partial sums the rest of the grid completes, "
                      f"or sums of them, not compared)")
            if self.values_unmodelled:
                s += (f" ({self.values_unmodelled} more computed from what the rest of the grid writes where "
                      f"the checker does not model it, not compared: run every CTA to compare them)")
        return s

    def messages(self, limit: int = MAX_LINES) -> list[str]:
        out: list[str] = []
        for kind in Problems.KINDS:
            msgs = self.problems.msgs[kind]
            # hangs on a barrier still owed bytes first: they are usually the cause of the others
            for k, (m, n) in enumerate(sorted(msgs.items(), key=lambda kv: (", 0 bytes" in kv[0], kv[0]))):
                if k == limit:
                    out.append(f"... and {len(msgs) - limit} more like these")
                    break
                out.append(m if n == 1 else f"{m} ({n} times)")
        return out

    def text(self) -> str:
        return "\n".join(self.messages() + [self.summary()])


def check_kernel(named: Kernel, coloured: Optional[Kernel] = None, *, values: bool = False, hb: bool = False,
                 progress: Optional[Callable[[str], None]] = None, resident: Optional[int] = None,
                 expect: Optional[Expectation] = None) -> Report:
    """Run the named text (and the coloured one, comparing their derived values) and report. With
    `values`, the data is computed too, from `expect`'s inputs (zeros without one), and `expect`
    judges the outputs (`warpy.check.expect`)."""
    import time

    t0 = time.monotonic()
    opts = _OPTIONS.get()
    m0 = m = Machine(named, values=values, hb=hb, progress=progress, resident=resident, label="named: ", expect=expect)
    m.run()
    problems = m.problems
    big = False
    if opts.all_ctas and not m.launch.whole:
        # every CTA: all of them with every check, or (a launch too large for that) the first and last
        # clusters with every check, then the tile pass over all of them
        sim = max(1, len(m.launch.clusters))
        big = m.steps / sim * m.launch.launched > FULL_STEPS
        if big:
            tile_pass(named, problems, expect, resident, progress)
        else:
            m = Machine(named, values=values, hb=hb, progress=progress, resident=resident, label="every CTA: ",
                        expect=expect, all_ctas=True)
            m.run()
            for kind, msgs in m.problems.msgs.items():
                for msg in msgs:
                    if msg not in problems.msgs[kind]:
                        problems.add(kind, msg)
    if opts.seeds:
        _other_schedules(named, m.problems, opts, expect, resident)
    if m.launch.whole and any(p.scratch for p in named.header.params):
        # every CTA ran: the next launch starts from the scratch memory this one left (its flags,
        # counters, epochs), and must run as well as this one did
        m2 = Machine(named, values=False, progress=progress, resident=resident, label="second launch: ", expect=expect,
                     all_ctas=opts.all_ctas and not big, scratch=m.scratch_words())
        m2.run()
        for kind, msgs in m2.problems.msgs.items():
            for msg in msgs:
                if msg not in problems.msgs[kind]:
                    problems.add(kind, "second launch (from the scratch memory the first left): " + msg)
    if coloured is not None:
        # without values, but with what the expectation says u32 words hold at launch (a program whose
        # control flow reads its memory, the megakernel's queue, must take the same path)
        mc = Machine(coloured, values=False, progress=progress, resident=resident, label="coloured: ", expect=expect)
        mc.run()
        changed = 0
        for wa, wb in zip(m0.warps, mc.warps):
            ta, tb = wa.trace, wb.trace
            for k in range(max(len(ta), len(tb))):
                va = ta[k][1] if k < len(ta) else None
                vb = tb[k][1] if k < len(tb) else None
                if va != vb:
                    changed += 1
                    line = (ta[k] if k < len(ta) else tb[k])[0] + 1
                    problems.add("coloured", f"{wa.cta.name} warp {wa.wid}, line {line}: the named text computes "
                                             f"{_hx(va)}, the coloured one {_hx(vb)}")
                    break  # one message a warp: after a difference the two runs need not line up
        for kind, msgs in mc.problems.msgs.items():
            if kind in ("wrong",):
                continue
            for msg in msgs:
                if msg not in problems.msgs[kind]:
                    problems.add(kind, "coloured: " + msg)
    rep = Report(named.header.kernel, m.derived.checked, problems, m.steps, time.monotonic() - t0, refills=m.order.refills,
                 stores=m.global_memory.stores_seen, uses_pdl=m.code.uses_pdl, hb_table=m.order.table)
    rep.values_on = values
    rep.raised_outside = m.flags.raised_outside
    if values and expect is not None:
        verdict = expect.compare(m)
        rep.values_checked, rep.values_wrong = verdict.checked, verdict.wrong
        rep.data = verdict.data
        rep.values_partial, rep.values_unmodelled = verdict.partial, verdict.unmodelled
        for vmsg in verdict.messages:
            problems.add("values", vmsg)
    return rep


#: `--all-ctas` runs every CTA with every check when that is estimated (from the first and last clusters'
#: run) at most this many warp instructions; beyond, the tile pass (what each CTA computes and stores,
#: without the ordering, derived-operand and provenance checks), a batch of clusters at a time
FULL_STEPS = 500_000
TILE_PASS_BATCH = 32  # clusters a batch


def tile_pass(named: Kernel, problems: Problems, expect: Optional[Expectation], resident: Optional[int],
              progress: Optional[Callable[[str], None]] = None) -> None:
    """Every cluster of the launch (every one launched at first, with cluster launch control), a batch
    at a time, with only the protocol, memory and coverage checks: then every output element must
    have been written, and none twice. The flags a batch waits on, CTAs of other batches raise."""
    first = Machine(named, values=False, resident=resident, expect=expect, chosen=[0], fast=True)
    total = first.launch.launched
    cover = first.prov.cover
    for lo in range(0, total, TILE_PASS_BATCH):
        batch = list(range(lo, min(total, lo + TILE_PASS_BATCH)))
        mb = Machine(named, values=False, resident=resident, expect=expect, chosen=batch, fast=True,
                     label=f"tile pass, clusters {batch[0]}..{batch[-1]} of {total}: ", progress=progress)
        mb.run()
        cover.merge(mb.prov.cover)
        for kind, msgs in mb.problems.msgs.items():
            for msg in msgs:
                if msg not in problems.msgs[kind]:
                    problems.add(kind, "tile pass: " + msg)
    cover.check(problems)


def _other_schedules(named: Kernel, problems: Problems, opts: CheckOptions, expect: Optional[Expectation],
                     resident: Optional[int]) -> None:
    """Run the named text under `opts.seeds` random warp schedules and report every kind of problem
    one of them finds that the round-robin run did not, or the other way round: a verdict that
    depends on the interleaving. (The messages themselves may name other warps or generations under
    another schedule; the verdict is which checks fail.)"""
    base = {k: sorted(msgs)[0] for k, msgs in problems.msgs.items() if msgs}
    found: dict[str, tuple[list[int], str]] = {}
    for seed in range(1, opts.seeds + 1):
        ms = Machine(named, values=False, resident=resident, expect=expect, all_ctas=opts.all_ctas, schedule=seed)
        ms.run()
        got = {k: sorted(msgs)[0] for k, msgs in ms.problems.msgs.items() if msgs}
        for kind in set(got) ^ set(base):
            seeds, msg = found.setdefault(kind, ([], got.get(kind) or base[kind]))
            seeds.append(seed)
    for kind, (seeds, msg) in sorted(found.items()):
        where = "found" if kind not in base else "not found"
        problems.add("schedule", f"{kind} problems {where} under schedule {', '.join(map(str, seeds[:4]))}"
                                 f"{' and others' if len(seeds) > 4 else ''} but {'not ' if where == 'found' else ''}under "
                                 f"round-robin: {msg}")


def _hx(v: Optional[Traced]) -> str:
    if v is None:
        return "nothing"
    if isinstance(v, tuple):
        return "(" + ", ".join(f"0x{x:x}" for x in v[:4]) + (", ..." if len(v) > 4 else "") + ")"
    if v < 0:
        return f"-0x{-v:x}"
    return f"0x{v:x}"


class Checkable(Protocol):
    """A built program (`warpy.isa.Program`): its named text and its coloured one."""

    def kernel(self) -> Kernel: ...

    def coloured(self) -> Kernel: ...


def check_program(prog: Checkable, *, expect: Optional[Expectation] = None, values: bool = False, fault: Optional[str] = None,
                  hb: bool = False, progress: Optional[Callable[[str], None]] = None, coloured: bool = True,
                  resident: Optional[int] = None) -> Report:
    """Check a built program (anything with `kernel()` and `coloured()`, a `warpy.isa.Program`):
    inject `fault` first if given; with `values`, compute the data from `expect`'s inputs and let it
    judge the outputs. `resident`: the SMs of the machine (the target's by default)."""
    from warpy.check.faults import inject

    named = prog.kernel()
    col = prog.coloured() if coloured else None
    note = ""
    if fault is not None:
        named, col, note = inject(fault, named, col)
    rep = check_kernel(named, col, values=values, hb=hb, progress=progress, expect=expect, resident=resident)
    rep.fault_note = note
    if fault is not None:
        settle_fault(fault, rep)
    return rep


def settle_fault(fault: str, rep: Report) -> None:
    """A fault the right check did not report: either it cannot show in the simulated clusters (then
    it does not apply, said in one line) or the checker missed it (reported as a problem)."""
    from warpy.check.faults import CAUGHT_BY, FaultDoesNotApply

    kind = CAUGHT_BY[fault]
    if rep.problems.count(kind):
        return
    if fault == "early-free" and rep.refills == 0:
        raise FaultDoesNotApply("early-free: does not apply here: no stage of the ring is refilled in the simulated "
                                "clusters (too few k-steps for the ring's depth), so an early free cannot race")
    if fault == "tmem-overlap" and not rep.problems.total():
        raise FaultDoesNotApply("tmem-overlap: does not apply here: no CTA of the simulated clusters uses its second "
                                "accumulator (one tile each)")
    rep.fault_missed = True
    rep.problems.add(kind, f"fault {fault} was injected ({rep.fault_note}) and the {kind} check did not report it")
