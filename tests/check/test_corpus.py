"""The corpus (tests/check/corpus): every bug caught by the check it names, without --values; every
correct variant clean. `python -m tests.check.corpus` prints the same verdicts as a table."""

from __future__ import annotations

import pytest

from tests.check.corpus import Case
from tests.check.corpus.cases import CASES
from warpy.check.report import Report

CLASSES = {"subword", "usedef", "collective", "wgmma", "named", "flags", "tcgen05", "exit", "provenance", "header",
           "align", "coverage", "scratch", "protocol", "ring", "proxy"}


# the report of a base program checked as it is (no edits), by (base, all_ctas): three clean cases
# check the same unedited sm_100a program (each with its own verdict), and it runs once
_UNEDITED: dict[tuple[str, bool], Report] = {}


def _report(case: Case) -> Report:
    if case.edits:
        return case.run()
    key = (case.base, case.all_ctas)
    if key not in _UNEDITED:
        _UNEDITED[key] = case.run()
    return _UNEDITED[key]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case) -> None:  # type: ignore[no-untyped-def]
    rep = _report(case)
    why = case.verdict(rep)
    assert why is None, f"{case.name} ({case.why}): {why}"


def test_corpus_covers_every_class_with_bugs_and_correct_kernels() -> None:
    names = [c.name for c in CASES]
    assert len(names) == len(set(names)) and len(CASES) >= 60
    assert {c.cls for c in CASES} == CLASSES
    for cls in CLASSES - {"protocol"}:  # (the older protocol checks have correct variants elsewhere)
        kinds = {c.expect == "clean" for c in CASES if c.cls == cls}
        assert kinds == {True, False}, cls
