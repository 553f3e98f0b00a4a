"""A corpus of buggy and correct kernels for the host checker, each an edit of a real warpy program
(a small GEMM of either target, an example, a probe) with the verdict the checker must give.

A case names its base program (`gemm sm_90a 256x256x128 fp32 [config]`, `example example-pipe
sm_100a`, `probe counters sm_90a`), the edits that make it (text in, text out: `sub`, `drop`,
`insert_after`, `header`), the class of checker rule it exercises, and its expected verdict:
`clean`, or the problem kind that must be reported with a message matching `match`. A correct
variant is as much a case as a bug: the corpus measures false alarms too.

    python -m tests.check.corpus          # every case: verdict, time, and the totals by class
    python -m tests.check.corpus NAME...  # those cases, with the checker's messages

Edits fail loudly when their line is not found, so a case cannot silently stop applying when the
programs change.
"""

from __future__ import annotations

import functools
import re
from typing import Callable, Optional

import attrs

from warpy.check.report import Report, check_kernel
from warpy.isa.text import Kernel, parse

Edit = Callable[[str], str]


class EditMissed(AssertionError):
    """An edit's line is not in the program (the case no longer applies as written)."""


def _lines(text: str) -> list[str]:
    return text.split("\n")


def _find(lines: list[str], pattern: str, nth: int, body: bool = True) -> int:
    rx = re.compile(pattern)
    hits = [k for k, x in enumerate(lines) if rx.search(x) and (not body or not x.startswith("."))]
    if nth >= len(hits) or -nth > len(hits):
        raise EditMissed(f"no line {nth} matching {pattern!r} ({len(hits)} found)")
    return hits[nth]


def sub(pattern: str, old: str, new: str, nth: int = 0) -> Edit:
    """In the nth body line matching `pattern`, replace `old` (a regex) with `new` once."""
    def edit(text: str) -> str:
        ls = _lines(text)
        k = _find(ls, pattern, nth)
        changed = re.sub(old, new, ls[k], count=1)
        if changed == ls[k]:
            raise EditMissed(f"{old!r} not in line {ls[k]!r}")
        ls[k] = changed
        return "\n".join(ls)
    return edit


def sub_all(pattern: str, old: str, new: str) -> Edit:
    """In every body line matching `pattern`, replace `old` (a regex) with `new`."""
    def edit(text: str) -> str:
        ls = _lines(text)
        rx = re.compile(pattern)
        n = 0
        for k, x in enumerate(ls):
            if rx.search(x) and not x.startswith("."):
                y = re.sub(old, new, x)
                n += y != x
                ls[k] = y
        if not n:
            raise EditMissed(f"no line matching {pattern!r} holds {old!r}")
        return "\n".join(ls)
    return edit


def drop(pattern: str, nth: int = 0, count: int = 1) -> Edit:
    """Delete the nth body line matching `pattern` (and the `count - 1` lines after it)."""
    def edit(text: str) -> str:
        ls = _lines(text)
        k = _find(ls, pattern, nth)
        del ls[k:k + count]
        return "\n".join(ls)
    return edit


def drop_all(pattern: str) -> Edit:
    """Delete every body line matching `pattern`."""
    def edit(text: str) -> str:
        ls = _lines(text)
        rx = re.compile(pattern)
        out = [x for x in ls if x.startswith(".") or not rx.search(x)]
        if len(out) == len(ls):
            raise EditMissed(f"no line matching {pattern!r}")
        return "\n".join(out)
    return edit


def insert_after(pattern: str, new: str, nth: int = 0) -> Edit:
    """Insert `new` (lines) after the nth body line matching `pattern`."""
    def edit(text: str) -> str:
        ls = _lines(text)
        k = _find(ls, pattern, nth)
        ls[k + 1:k + 1] = new.split("\n")
        return "\n".join(ls)
    return edit


def insert_before(pattern: str, new: str, nth: int = 0) -> Edit:
    """Insert `new` (lines) before the nth body line matching `pattern`."""
    def edit(text: str) -> str:
        ls = _lines(text)
        k = _find(ls, pattern, nth)
        ls[k:k] = new.split("\n")
        return "\n".join(ls)
    return edit


def move(pattern: str, to: str, nth: int = 0, to_nth: int = 0, after: bool = True) -> Edit:
    """Move the nth body line matching `pattern` to just after (before) the line matching `to`."""
    def edit(text: str) -> str:
        ls = _lines(text)
        k = _find(ls, pattern, nth)
        line = ls.pop(k)
        j = _find(ls, to, to_nth)
        ls.insert(j + 1 if after else j, line)
        return "\n".join(ls)
    return edit


def declare(*regs: str) -> Edit:
    """Declare registers a case's new lines use (`"R tmp"`, `"P flag"`, `"UR[2] pair"`)."""
    def edit(text: str) -> str:
        ls = _lines(text)
        k = max(j for j, x in enumerate(ls) if x.startswith(".reg ") or x.startswith(".buffer ") or x.startswith(".param "))
        ls[k + 1:k + 1] = [f".reg {r}" for r in regs]
        return "\n".join(ls)
    return edit


def header(prefix: str, new: str) -> Edit:
    """Replace the header line starting with `prefix`."""
    def edit(text: str) -> str:
        ls = _lines(text)
        hits = [k for k, x in enumerate(ls) if x.startswith(prefix)]
        if not hits:
            raise EditMissed(f"no header line starting {prefix!r}")
        ls[hits[0]] = new
        return "\n".join(ls)
    return edit


@functools.lru_cache(maxsize=None)
def base_text(base: str) -> str:
    """The named text of a base program: `gemm ARCH MxNxK OUT [CONFIG]`, `example NAME ARCH`,
    `probe NAME ARCH`."""
    words = base.split()
    if words[0] == "gemm":
        from warpy.kernels.gemm import GemmProblem, build, configure

        m, n, k = (int(x) for x in words[2].split("x"))
        prob = GemmProblem(m, n, k, arch=words[1], out_dtype=words[3])
        cfg = configure(prob, words[4]) if len(words) > 4 else None
        return str(build(prob, cfg).kernel())
    if words[0] == "example":
        from warpy.isa.examples import EXAMPLES

        return str(EXAMPLES[words[1]](words[2]).kernel())
    if words[0] == "probe":
        from warpy.kernels.probes import PROBES

        return str(PROBES[words[1]].build(words[2]).kernel())
    raise ValueError(f"unknown base program {base!r}")


@attrs.frozen
class Case:
    """One corpus kernel: `base` edited by `edits`; `cls` the checker rule's class; `expect` "clean"
    or the problem kind a message matching `match` must have; `why` what the edit does, as a kernel
    engineer's mistake (or, for a clean case, why it is still correct). `expect` may name several
    kinds, `a|b`: the bug shows as either."""

    name: str
    cls: str
    base: str
    edits: tuple[Edit, ...]
    expect: str
    match: str = ""
    why: str = ""
    all_ctas: bool = False

    def text(self) -> str:
        t = base_text(self.base)
        for e in self.edits:
            t = e(t)
        return t

    def kernel(self) -> Kernel:
        return parse(self.text())

    def run(self) -> Report:
        from warpy.check.report import CheckOptions, options

        with options(CheckOptions(all_ctas=self.all_ctas)):
            return check_kernel(self.kernel())

    def verdict(self, rep: Report) -> Optional[str]:
        """None when the report is what the case expects, else what is wrong."""
        if self.expect == "clean":
            return None if rep.ok else "false alarm: " + " | ".join(rep.messages(3))
        hits = [m for kind in self.expect.split("|") for m in rep.problems.msgs[kind] if re.search(self.match, m)]
        if hits:
            return None
        if rep.ok:
            return "missed: the checker found nothing"
        return f"missed: no {self.expect} problem matching {self.match!r}; found: " + " | ".join(rep.messages(3))


def case(name: str, cls: str, base: str, *edits: Edit, expect: str, match: str = "", why: str = "",
         all_ctas: bool = False) -> Case:
    return Case(name, cls, base, tuple(edits), expect, match, why, all_ctas)
