"""The PTX probes of tests/lift/probes: each assembles for the targets it names, shows the SASS
opcodes it expects (docs/toolchain.md's table), and the warning probes provoke the warnings they name.

Probe header lines:
  // targets: sm_90a sm_100a      assemble for each (the `.target` line is rewritten to match)
  // expect: OP OP ...            opcodes expected for every target (check_opcodes spellings)
  // expect sm_100a: OP ...       opcodes expected for that target only
  // flags: -c ...                extra ptxas flags
  // warns: kind[:code] ...       the warnings assembling must raise (fails by default)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from warpy.errors import WarpyError
from warpy.lift import ptxas as P
from warpy.lift.disasm import check_opcodes, disassemble

PROBES = Path(__file__).parent / "probes"


# nvdisasm is a dependency (the nvidia-cuda-nvdisasm wheel): without it these tests fail, naming it.


def _header(src: str, key: str) -> list[str]:
    m = re.search(rf"^// {re.escape(key)}: (.*)$", src, re.M)
    return m.group(1).split() if m else []


def probe_cases(prefix_warn: bool) -> list[tuple[str, str]]:
    out = []
    for f in sorted(PROBES.glob("*.ptx")):
        if f.name.startswith("warn_") != prefix_warn:
            continue
        for t in _header(f.read_text(), "targets"):
            out.append((f.name, t))
    return out


def _ptx_for(src: str, target: str) -> str:
    return re.sub(r"^\.target \S+", f".target {target}", src, flags=re.M)


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WARPY_CACHE", str(tmp_path / "cache"))
    P.clear_memory_cache()


@pytest.mark.parametrize("name,target", probe_cases(prefix_warn=False))
def test_probe_assembles_and_shows_its_opcodes(name: str, target: str) -> None:
    src = (PROBES / name).read_text()
    cubin = P.assemble(_ptx_for(src, target), target, _header(src, "flags"))
    assert cubin.warnings == ()
    expected = _header(src, "expect") + _header(src, f"expect {target}")
    assert expected, f"{name} names no expected opcodes for {target}"
    report = check_opcodes(expected, cubin)
    assert report.ok and report.missing == ()


def test_probe_table_distinguishes_the_cta_groups() -> None:
    one = disassemble(P.assemble((PROBES / "tcgen05_cta1.ptx").read_text(), "sm_100a"))
    two = disassemble(P.assemble((PROBES / "tcgen05_cta2.ptx").read_text(), "sm_100a"))
    assert not any(".2CTA" in op for op in one.opcodes())
    assert {"UTCHMMA.2CTA", "UTCBAR.2CTA", "UTCBAR.2CTA.MULTICAST"} <= set(two.opcodes())
    assert "UTCHMMA" not in two.opcodes()


@pytest.mark.parametrize("name,target", probe_cases(prefix_warn=True))
def test_warning_probe_fails_by_default_and_passes_when_allowed(name: str, target: str) -> None:
    src = (PROBES / name).read_text()
    ptx, flags = _ptx_for(src, target), _header(src, "flags")
    wanted = [w.split(":") for w in _header(src, "warns")]
    kinds = tuple(dict.fromkeys(w[0] for w in wanted))
    with pytest.raises(P.PtxasWarningError) as e:
        P.assemble(ptx, target, flags)
    msg = str(e.value)
    assert "\n" not in msg and f"({kinds[0]})" in msg and f"allow=('{kinds[0]}',)" in msg
    got = e.value.cubin.warnings
    for w in wanted:
        assert any(g.kind == w[0] and (len(w) == 1 or g.code == w[1]) for g in got), (w, got)
    # allowing every named kind accepts it; the same warnings are still reported
    ok = P.assemble(ptx, target, flags, allow=kinds)
    assert ok.warnings == got and ok.cache_hit
    # allowing by ptxas code works too, for the coded ones
    codes = tuple(w[1] for w in wanted if len(w) == 2)
    uncoded = tuple(w[0] for w in wanted if len(w) == 1)
    assert P.assemble(ptx, target, flags, allow=codes + uncoded).warnings == got


def test_spill_probe_resources() -> None:
    src = (PROBES / "warn_spill.ptx").read_text()
    c = P.assemble(src, "sm_90a", _header(src, "flags"), allow=("spill",))
    r = c.resource("probe_warn_spill")
    assert r.registers == 24 and r.spill_stores > 0 and r.spill_loads > 0 and r.stack_frame > 0
    (w,) = c.warnings
    assert w.kind == "spill" and w.kernel == "probe_warn_spill" and f"{r.spill_stores} bytes spill stores" in w.text
