"""Printing what `warpy check` and `warpy hb` found (imported lazily by warpy.cli): the problems,
the summary line, the happens-before table; and checking a SASS file. Which program a kernel
family builds for a problem is the caller's business (warpy.cli, through warpy.plan)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Callable, Optional

from warpy.errors import WarpyError

if TYPE_CHECKING:
    from warpy.check.happens_before import HbKey
    from warpy.check.report import Report


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


def check_file(path: str, fault: Optional[str] = None, colour: bool = True) -> Report:
    """`warpy check FILE.sass`: parse, colour a named text (and compare the two runs), inject `fault`."""
    from warpy.check.faults import inject
    from warpy.check.report import check_kernel, settle_fault
    from warpy.isa.text import parse

    try:
        text = open(path).read()
    except OSError as e:
        raise WarpyError(f"cannot read {path}: {e.strerror}") from None
    k = parse(text)
    col = None
    if k.named and colour:  # a named text is coloured here, and the two compared
        from warpy.isa.colour import colour as colour_text

        col = colour_text(k)
    elif not k.named:
        print("(a coloured text: the colouring is not compared with a named one)", file=sys.stderr)
    note = ""
    if fault:
        k, col, note = inject(fault, k, col)
        _progress(f"fault {fault}: {note}")
    rep = check_kernel(k, col, progress=_progress)
    if fault:
        rep.fault_note = note
        settle_fault(fault, rep)
    return rep


def run_check(work: Callable[[], Report], fault: Optional[str] = None, dump: Optional[str] = None) -> int:
    """Run a check (`work` returns its Report), print the problems and the summary line; the exit
    status (0: nothing found; 3: the fault does not apply here)."""
    from warpy.check.faults import FaultDoesNotApply

    t0 = time.monotonic()
    try:
        rep = work()
        if dump is not None and rep.data:
            import numpy as np

            # (savez's stubs take a keyword `allow_pickle`, which no array of ours is named)
            save: Callable[..., None] = np.savez
            save(dump, **rep.data)
        if fault:
            _end_progress()
            print(f"fault {fault}: {rep.fault_note}")
    except FaultDoesNotApply as e:
        _end_progress()
        print(str(e))
        return 3
    _end_progress()
    for line in rep.messages():
        print(line)
    print(rep.summary())
    print(f"({rep.kernel}: {rep.steps} warp instructions in {time.monotonic() - t0:.1f} s)", file=sys.stderr)
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
