"""The opcode walk: every record of `warpy.isa.families.ALL` has everything an opcode needs.

- a builder: a public function of its isa family module that builds it (`ins(RECORD, ...)`);
- a lift rule (`warpy.lift.families.LIFT_RULES`) and checker semantics (`warpy.check.families.SEMANTICS`);
- a meaning in the isa's interpreter (a value rule, or a semantic class it handles explicitly);
- a probe: ptxas emits it for one of the PTX probes of tests/isa/probes (or a named exemption:
  a marker with no SASS of its own, or `probe_spellings.NOT_PROBED`);
- a row in docs/sass.md's opcode table, which is itself rendered from the records and kept current.

`walk()` lists what is missing; the last tests take entries out of the registries and watch the
walk name them, so deleting a lift rule or a checker handler cannot go unnoticed.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import re

import pytest

from warpy.check.families import SEMANTICS
from warpy.isa.families import ALL, FAMILIES, lookup, opcode_table
from warpy.isa.families.base import Opcode
from warpy.isa.interp import INTERP_NOTHING, INTERP_PASSES, INTERP_ZEROES
from warpy.isa.semantics import VALUES
from warpy.lift.families import LIFT_RULES

from probe_spellings import NOT_PROBED, probe_disassembly

ROOT = pathlib.Path(__file__).resolve().parents[2]
SASS_MD = ROOT / "docs" / "sass.md"


def builders() -> dict[Opcode, list[str]]:
    """record -> the public builder functions of the isa family modules that build it."""
    out: dict[Opcode, list[str]] = {}
    for fam in FAMILIES:
        mod = importlib.import_module(f"warpy.isa.families.{fam}")
        tree = ast.parse(pathlib.Path(mod.__file__ or "").read_text())
        for fn in tree.body:
            if not isinstance(fn, ast.FunctionDef) or fn.name.startswith("_"):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ins" and node.args:
                    # ins(RECORD, ...) or ins(A if cond else B, ...)
                    arg = node.args[0]
                    names = [n.id for n in ast.walk(arg) if isinstance(n, ast.Name)]
                    for name in names:
                        rec = getattr(mod, name, None)
                        if isinstance(rec, Opcode):
                            out.setdefault(rec, []).append(f"{fam}.{fn.name}")
    return out


def probed() -> set[str]:
    seen: set[str] = set()
    for _arch, text in probe_disassembly():
        words = text.partition(" ")[0].split(".")
        try:
            seen.add(lookup(words[0], tuple(words[1:]))[0].key)
        except Exception:  # an instruction no record models
            continue
    return seen


def docs_rows() -> set[str]:
    return set(re.findall(r"^\| `([A-Z0-9_.]+)` \|", SASS_MD.read_text(), re.M))


def walk(records: list[Opcode] | None = None, *, seen: set[str] | None = None) -> list[str]:
    """What each record lacks, one line per lack."""
    recs = list(ALL.values()) if records is None else records
    built = builders()
    rows = docs_rows()
    seen = probed() if seen is None else seen
    interp_classes = INTERP_PASSES | INTERP_ZEROES | INTERP_NOTHING | {"branch", "exit"}
    out = []
    for r in recs:
        if r not in built:
            out.append(f"{r.key}: no builder in warpy/isa/families/{r.family}.py")
        if r not in LIFT_RULES:
            out.append(f"{r.key}: no lift rule")
        if r not in SEMANTICS:
            out.append(f"{r.key}: no checker semantics")
        if r not in VALUES and r.sem not in interp_classes:
            out.append(f"{r.key}: the interpreter has no meaning for it")
        if r.ptxas_emits and r.key not in NOT_PROBED and r.key not in seen:
            out.append(f"{r.key}: no probe in tests/isa/probes makes ptxas emit it")
        if r.key not in rows:
            out.append(f"{r.key}: no row in docs/sass.md")
    return out


def test_every_opcode_has_a_builder_rules_semantics_a_probe_and_a_docs_row() -> None:
    assert walk() == []


def test_the_docs_opcode_table_is_the_rendered_one() -> None:
    text = SASS_MD.read_text()
    start = text.index("<!-- opcode table:")
    body = text[text.index("\n", start) + 1:text.index("<!-- end of opcode table -->")]
    assert body == opcode_table(), "docs/sass.md's opcode table is stale: paste warpy.isa.families.opcode_table()"


def test_exemptions_are_real() -> None:
    """A named exemption must still be needed: a record in NOT_PROBED that a probe now emits, or a
    marker with no SASS, is stale."""
    seen = probed()
    assert [k for k in NOT_PROBED if k in seen] == []
    assert all(k in ALL and ALL[k].ptxas_emits for k in NOT_PROBED)


# -- the walk notices what is taken away ----------------------------------------------------------

SAMPLE = ["IADD3", "SYNCS.PHASECHK", "UTMALDG", "HGMMA", "UTCHMMA", "LDS", "BRA", "UGETNEXTWORKID", "FADD"]


@pytest.mark.parametrize("key", SAMPLE)
def test_deleting_a_lift_rule_fails_the_walk(key: str) -> None:
    rec = ALL[key]
    fn = LIFT_RULES.remove(rec)
    try:
        assert walk([rec], seen={key}) == [f"{key}: no lift rule"]
    finally:
        LIFT_RULES.add(rec, fn)


@pytest.mark.parametrize("key", SAMPLE)
def test_deleting_a_checker_handler_fails_the_walk(key: str) -> None:
    rec = ALL[key]
    fn = SEMANTICS.remove(rec)
    try:
        assert walk([rec], seen={key}) == [f"{key}: no checker semantics"]
    finally:
        SEMANTICS.add(rec, fn)


def test_every_lift_rule_and_handler_is_the_walks_business() -> None:
    """Each record of the whole table is walked: removing any one entry (any, not a sample) is seen."""
    for reg, what in ((LIFT_RULES, "no lift rule"), (SEMANTICS, "no checker semantics")):
        for rec in list(ALL.values()):
            fn = reg.remove(rec)
            try:
                assert f"{rec.key}: {what}" in walk([rec], seen={rec.key})
            finally:
                reg.add(rec, fn)
