"""Opcode family records: the registry, the records' own consistency, and their spellings checked
against what ptxas emits (nvdisasm of the probes in tests/isa/probes/)."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

import pytest

from warpy.errors import WarpyError
from warpy.isa import families
from warpy.isa.families import ALL, FAMILIES, SEM_CLASSES, lookup

PROBES = pathlib.Path(__file__).resolve().parent / "probes"

#: Records whose text form is warpy's own (docs/sass.md, "Differences from nvdisasm").
OWN_FORM = {"UTCATOMSWS.FIND_AND_SET"}
#: Records ptxas emits but the probes do not (yet) make it emit.
NOT_PROBED = {"UIMAD", "USEL", "UPLOP3"}


def test_registry_is_the_union_of_the_family_modules():
    assert set(FAMILIES) == {"alu", "control", "memory", "sync", "tma", "hopper", "blackwell", "clc"}
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


def _tool(env: str, rel: str) -> str | None:
    if os.environ.get(env):
        return os.environ[env]
    try:
        import nvidia

        for base in nvidia.__path__:
            p = pathlib.Path(base) / rel
            if p.exists():
                return str(p)
    except ImportError:
        pass
    return None


def _disassemble(ptx: pathlib.Path, tmp: pathlib.Path) -> list[str]:
    ptxas = _tool("WARPY_PTXAS", "cuda_nvcc/bin/ptxas") or shutil.which("ptxas")
    nvdisasm = _tool("WARPY_NVDISASM", "cu13/bin/nvdisasm") or shutil.which("nvdisasm")
    if not ptxas or not nvdisasm:
        pytest.skip("ptxas or nvdisasm not found")
    arch = re.search(r"sm_\d+a", ptx.name).group(0)  # type: ignore[union-attr]
    cubin = tmp / (ptx.stem + ".cubin")
    subprocess.run([ptxas, f"-arch={arch}", str(ptx), "-o", str(cubin)], check=True, capture_output=True, timeout=120)
    out = subprocess.run([nvdisasm, "-c", str(cubin)], check=True, capture_output=True, text=True, timeout=120).stdout
    lines = []
    for line in out.splitlines():
        m = re.match(r"\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P[0-9T]\s+)?(.*?)\s*;", line)
        if m:
            lines.append(m.group(1))
    return lines


def test_spellings_match_ptxas(tmp_path: pathlib.Path) -> None:
    seen: dict[str, set[str]] = {"sm_90a": set(), "sm_100a": set()}
    problems: list[str] = []
    for ptx in sorted(PROBES.glob("*.ptx")):
        arch = re.search(r"sm_\d+a", ptx.name).group(0)  # type: ignore[union-attr]
        for text in _disassemble(ptx, tmp_path):
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
