"""Printing what `warpy check` and `warpy hb` found (imported lazily by warpy.cli): the problems,
the summary line, the happens-before table; and checking a SASS file. Which program a kernel
family builds for a problem is the caller's business (warpy.cli, through warpy.plan)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

from warpy.errors import WarpyError

FAULT_MISSED = 4  # the exit status when an injected fault is not reported

if TYPE_CHECKING:
    from warpy.check.happens_before import HbKey
    from warpy.check.report import Report
    from warpy.isa.text import Kernel


def _progress(msg: str) -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\r" + msg[:150] + "\x1b[K")
    else:
        sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def _end_progress() -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\r\x1b[K")
        sys.stderr.flush()


def read_kernel(path: str) -> Kernel:
    """The SASS text at `path` (`-`: standard input), parsed; one-line errors naming the file (and
    the line and column of a parse error)."""
    from warpy.isa.text import ParseError, parse
    from warpy.lift.lifter import read_text_file

    text = read_text_file(path)
    try:
        return parse(text)
    except ParseError as e:
        raise WarpyError(f"{e} (in {'standard input' if path == '-' else path})") from None


def check_file(path: str, fault: Optional[str] = None, colour: bool = True, hb: bool = False) -> Report:
    """`warpy check FILE.sass`: parse, colour a named text (and compare the two runs), inject `fault`;
    with `hb`, record what orders what (`warpy hb FILE.sass`)."""
    from warpy.check.faults import inject
    from warpy.check.report import check_kernel, settle_fault

    k = read_kernel(path)
    col = None
    if k.named and colour:  # a named text is coloured here, and the two compared
        from warpy.isa.colour import colour as colour_text

        col = colour_text(k)
    elif not k.named and not hb:
        print("(a coloured text: the colouring is not compared with a named one)", file=sys.stderr)
    note = ""
    if fault:
        k, col, note = inject(fault, k, col)
        _progress(f"fault {fault}: {note}")
    rep = check_kernel(k, col, progress=_progress, hb=hb)
    if fault:
        rep.fault_note = note
        settle_fault(fault, rep)
    return rep


def report_json(rep: Report, fault: Optional[str] = None) -> dict[str, Any]:
    """What `warpy check --json` prints: the verdict, the problems by kind, the summary line."""
    problems = {kind: [{"message": m, "count": n} for m, n in sorted(rep.problems.msgs[kind].items())]
                for kind in rep.problems.KINDS}
    out: dict[str, Any] = {"kernel": rep.kernel, "ok": rep.ok, "steps": rep.steps,
                           "derived_operands_checked": rep.notes_checked, "problems": problems,
                           "summary": rep.summary()}
    if rep.values_on:
        out["values"] = {"checked": rep.values_checked, "wrong": rep.values_wrong}
    if fault:
        out["fault"] = {"name": fault, "note": rep.fault_note, "missed": rep.fault_missed}
    return out


def run_check(work: Callable[[], Report], fault: Optional[str] = None, dump: Optional[str] = None,
              json: bool = False) -> int:
    """Run a check (`work` returns its Report), print the problems and the summary line (or, with
    `json`, one JSON object); the exit status (0: nothing found; 1: problems; 3: the fault does not
    apply here; 4: the fault was injected and the checker missed it, said in the first line)."""
    from warpy.check.faults import FaultDoesNotApply

    t0 = time.monotonic()
    try:
        rep = work()
        if dump is not None and rep.data:
            import numpy as np

            # (savez's stubs take a keyword `allow_pickle`, which no array of ours is named)
            save: Callable[..., None] = np.savez
            try:
                save(dump, **rep.data)
            except OSError as e:
                raise WarpyError(f"cannot write {dump}: {e.strerror or e}") from None
        if fault and not json:
            _end_progress()
            if rep.fault_missed:
                print(f"fault {fault}: MISSED: the checker did not report it ({rep.fault_note})")
            else:
                print(f"fault {fault}: {rep.fault_note}")
    except FaultDoesNotApply as e:
        _end_progress()
        if json:
            import json as jsonlib

            print(jsonlib.dumps({"ok": None, "fault": {"name": fault, "applies": False, "note": str(e)}}, indent=2))
        else:
            print(str(e))
        return 3
    _end_progress()
    if json:
        import json as jsonlib

        print(jsonlib.dumps(report_json(rep, fault), indent=2))
    else:
        for line in rep.messages():
            print(line)
        print(rep.summary())
    print(f"({rep.kernel}: {rep.steps} warp instructions in {time.monotonic() - t0:.1f} s)", file=sys.stderr)
    if fault and rep.fault_missed:
        return FAULT_MISSED
    return 0 if rep.ok else 1


def run_hb(work: Callable[[], Report]) -> int:
    """`warpy hb`: what orders what, then the problems; the exit status."""
    rep = work()
    _end_progress()
    for line in hb_table(rep.hb_table):
        print(line)
    for line in rep.messages():
        print(line)
    return 0 if rep.ok else 1


def _warps(ws: set[int]) -> str:
    s = sorted(ws)
    if len(s) == 1:
        return f"warp {s[0]}"
    if s == list(range(s[0], s[-1] + 1)):
        return f"warps {s[0]}-{s[-1]}"
    return "warps " + ",".join(map(str, s))


class _Row:
    """The warps of the earlier and of the later accesses of one row, and how many pairs it counts."""

    def __init__(self) -> None:
        self.earlier: set[int] = set()
        self.later: set[int] = set()
        self.pairs = 0


def hb_table(table: dict[HbKey, int]) -> list[str]:
    """Rows: buffer, earlier access, later access, what ordered them, how many pairs."""
    rows: dict[tuple[str, str, str, str, str], _Row] = {}
    for (buf, eop, ewarp, lop, lwarp, other, how, ekind, lkind), n in table.items():
        if ekind == "r" and lkind == "r":
            continue
        r = rows.setdefault((buf, eop, lop, other, how), _Row())
        r.earlier.add(ewarp)
        r.later.add(lwarp)
        r.pairs += n
    cells = []
    for (buf, eop, lop, other, how), r in sorted(rows.items(), key=lambda kv: (kv[0][0], -kv[1].pairs)):
        cells.append((buf, f"{eop}, {_warps(r.earlier)}{other}", f"{lop}, {_warps(r.later)}",
                      f"{how or 'program order'}  ({r.pairs})"))
    wb = max([len("buffer")] + [len(x[0]) for x in cells]) + 1
    we = max([len("earlier")] + [len(x[1]) for x in cells]) + 2
    wl = max([len("later")] + [len(x[2]) for x in cells]) + 2
    out = [f"{'buffer':<{wb}}{'earlier':<{we}}{'later':<{wl}}ordered by"]
    out += [f"{b:<{wb}}{e:<{we}}{lt:<{wl}}{how}" for b, e, lt, how in cells]
    return out
