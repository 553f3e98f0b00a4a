"""Opcode family records: the registry, the records' own consistency, and their spellings checked
against what ptxas emits (nvdisasm of the probes in tests/isa/probes/)."""

from __future__ import annotations

import pathlib
import re

import pytest

from warpy.errors import WarpyError
from warpy.isa import families
from warpy.isa.families import ALL, FAMILIES, SEM_CLASSES, lookup

from probe_spellings import NOT_PROBED, probe_disassembly

#: Records whose text form is warpy's own (docs/sass.md, "Differences from nvdisasm").
OWN_FORM = {"UTCATOMSWS.FIND_AND_SET"}


def test_registry_is_the_union_of_the_family_modules():
    assert set(FAMILIES) == {"alu", "control", "memory", "sync", "tma", "wgmma", "tcgen05", "clc"}
    keys = [op.key for fam in FAMILIES.values() for op in fam]
    assert len(keys) == len(set(keys)) == len(ALL)
    for name, fam in FAMILIES.items():
        assert all(op.family == name for op in fam)


def test_every_record_is_complete():
    for op in ALL.values():
        assert op.sem in SEM_CLASSES
        assert op.forms and all(isinstance(f, tuple) for f in op.forms)
        assert op.ptx, op.key
        assert op.archs <= {"sm_90a", "sm_100a"} and op.archs
        for f in op.forms:
            for arg in f:
                assert arg.role in ("d", "u", "du")
        op.text_form()


def test_markers_without_sass_are_exactly_these():
    assert {k for k, op in ALL.items() if not op.ptxas_emits} == {
        "WGMMA.COMMIT", "TCGEN05.WAIT", "TCGEN05.FENCE", "CLCQUERY", "FENCE.MBARRIER_INIT",
    }


def test_single_issue_classes():
    single = {op.sem for op in ALL.values() if op.single_issue}
    assert {"tma-load", "tma-store", "mma", "commit", "tmem-alloc", "clc-try-cancel"} <= single
    assert not ALL["HGMMA"].single_issue  # a warpgroup instruction, every thread takes part
    assert ALL["UTCHMMA"].single_issue


def test_lookup_by_key_words():
    assert lookup("UTCATOMSWS", ("2CTA", "FIND_AND_SET", "ALIGN"))[0].key == "UTCATOMSWS.FIND_AND_SET"
    assert lookup("UTCATOMSWS", ("AND",))[0].key == "UTCATOMSWS.AND"
    assert lookup("SYNCS", ("PHASECHK", "TRANS64", "TRYWAIT")) == (ALL["SYNCS.PHASECHK"], ("TRANS64", "TRYWAIT"))
    with pytest.raises(WarpyError, match="unknown opcode FOO.BAR"):
        lookup("FOO", ("BAR",))


def test_spellings_match_ptxas() -> None:
    seen: dict[str, set[str]] = {"sm_90a": set(), "sm_100a": set()}
    problems: list[str] = []
    for arch, text in probe_disassembly():
        mnemonic, _, ops = text.partition(" ")
        words = mnemonic.split(".")
        if words[0] not in {k.split(".")[0] for k in ALL}:
            continue
        try:
            rec, rest = lookup(words[0], tuple(words[1:]))
        except WarpyError:
            continue  # e.g. SYNCS.CCTL forms warpy does not model
        try:
            rec.check_mods(rest, text)  # every modifier ptxas prints is one the record accepts
        except WarpyError as e:
            problems.append(str(e))
        n_ops = len([o for o in re.split(r",\s*(?![^\[]*\])", ops) if o.strip()]) if ops.strip() else 0
        if rec.key not in OWN_FORM:
            if n_ops not in {len(f) for f in rec.forms}:
                problems.append(f"{text}: {n_ops} operands, {rec.key} takes {[len(f) for f in rec.forms]}")
        seen[arch].add(rec.key)
    for key, rec in ALL.items():
        if not rec.ptxas_emits or key in NOT_PROBED:
            continue
        if not any(key in seen[a] for a in rec.archs):
            problems.append(f"{key}: ptxas emitted no such instruction in the probes")
    assert not problems, "\n".join(sorted(set(problems)))


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_the_examples_use_every_opcode_of_their_target(arch: str) -> None:
    """warpy.isa.examples is the lifter's and checker's coverage: every record of a target appears."""
    from warpy.isa.examples import EXAMPLES

    used = {families.record(i).key for build in EXAMPLES.values() for i in build(arch).kernel().instrs()}
    assert sorted(k for k, op in ALL.items() if arch in op.archs and k not in used) == []
    assert all(arch in ALL[k].archs for k in used)


def test_the_bulk_copy_builders_spell_what_ptxas_prints() -> None:
    """UBLKCP's builders, global to shared (`.S.G`) and shared to a CTA of the cluster (`.S.S`), spell
    the modifiers nvdisasm prints for the probes' cp.async.bulk (tests/isa/probes/sm_90a*.ptx)."""
    from warpy.isa.families import tma
    from warpy.isa.operands import UR, Mem, URVec

    printed = {text.partition(" ")[0] for _, text in probe_disassembly() if text.startswith("UBLKCP")}
    args, size = Mem(URVec("UR6", 2)), UR("UR8")
    built = [tma.bulk_copy_s_g(args, Mem(URVec("UR4", 2)), size), tma.bulk_copy_s_s(args, Mem(UR("UR5")), size)]
    assert [i.mnemonic for i in built] == ["UBLKCP.S.G", "UBLKCP.S.S"]
    assert {i.mnemonic for i in built} <= printed
    assert all(families.record(i).key == "UBLKCP" for i in built)
