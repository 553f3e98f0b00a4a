"""`warpy check --all-ctas / --seeds`, the tile pass, a missed --fault's exit status, and the small
fixes around them: special registers, the rest of the grid's raised flags in the summary, the
colouring tracer's inactive lanes, the interpreter's atomics (docs/checker.md)."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import warpy.check.report as report
from warpy.check.code import KNOWN_SREGS, _tracer
from warpy.check.report import CheckOptions, Report, check_kernel, options
from warpy.check.state import Problems
from warpy.isa.operands import SPECIAL_REGS
from warpy.isa.text import parse
from tests.check.corpus import base_text, drop, sub_all
from tests.check.corpus.cases import CASES, G90M


def _warpy(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m warpy.cli ARGS`'s result, from its entry point in this process."""
    from warpy_in_process import run_cli

    return run_cli(*args, timeout=300)


def test_all_ctas_finds_two_ctas_on_one_tile(tmp_path) -> None:  # type: ignore[no-untyped-def]
    case = next(c for c in CASES if c.name == "tile-index-collides")
    f = tmp_path / "collide.sass"
    f.write_text(case.text())
    r = _warpy("check", str(f), "--no-colour")
    assert "output tiles or elements" not in r.stdout  # the first and last clusters cannot see it
    r = _warpy("check", str(f), "--no-colour", "--all-ctas")
    assert r.returncode == 1 and "c_out: no store or reduce-add writes" in r.stdout
    assert "output tiles or elements not written exactly once" in r.stdout.splitlines()[-1]


def test_tile_pass_on_a_launch_too_large_for_every_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report, "FULL_STEPS", 0)
    monkeypatch.setattr(report, "TILE_PASS_BATCH", 1)
    bad = parse(sub_all(r"MOV tile_count, 0x8", "0x8", "0x7")(base_text(G90M)))
    with options(CheckOptions(all_ctas=True)):
        assert check_kernel(parse(base_text(G90M))).ok
        rep = check_kernel(bad)
    assert [m for m in rep.problems.msgs["coverage"] if "16384 of its 131072" in m], rep.text()


def test_seeds_same_verdict_for_named_barriers() -> None:
    """Named-barrier generations are counted per id: a shared id is found under every schedule, the
    same way (no verdict differs)."""
    case = next(c for c in CASES if c.name == "named-id-shared-by-warpgroups")
    with options(CheckOptions(seeds=3)):
        rep = check_kernel(case.kernel())
    assert case.verdict(rep) is None
    assert not rep.problems.msgs["schedule"], rep.problems.msgs["schedule"]


def test_a_verdict_that_differs_between_schedules_is_reported() -> None:
    k = parse(base_text("gemm sm_90a 256x256x128 fp32"))
    problems = Problems()
    problems.add("order", "a race only the round-robin schedule shows")
    report._other_schedules(k, problems, CheckOptions(seeds=2), None, None)
    assert problems.msgs["schedule"] == {"order problems not found under schedule 1, 2 but under round-robin: a race only "
                                         "the round-robin schedule shows": 1}


def test_cli_seeds_and_all_ctas_clean() -> None:
    r = _warpy("check", "gemm", "256", "256", "128", "--arch", "sm_100a", "--all-ctas", "--seeds", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    r = _warpy("check", "gemm", "256", "256", "128", "--seeds", "-1")
    assert r.returncode == 2 and r.stderr.startswith("error: --seeds")


def test_a_missed_fault_exits_4_and_says_so_first(capsys: pytest.CaptureFixture[str]) -> None:
    from warpy.check.cli import FAULT_MISSED, run_check

    def work() -> Report:
        rep = Report("k", 0, Problems(), fault_note="dropped line 7")
        report.settle_fault("drop-arrive", rep)  # nothing reported it: settled as missed
        return rep

    assert run_check(work, "drop-arrive") == FAULT_MISSED == 4
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "fault drop-arrive: MISSED: the checker did not report it (dropped line 7)"


def test_special_registers() -> None:
    assert KNOWN_SREGS == set(SPECIAL_REGS)
    text = base_text("probe counters sm_90a").replace("  S2R cta, SR_CTAID.X", "  S2R cta, SR_CTAID.X\n  S2R t1, SR_TID.Y\n"
                                                       "  S2R c1, SR_CLOCKLO\n  S2R c2, SR_CLOCKLO")
    text = text.replace(".reg R tid", ".reg R tid\n.reg R t1\n.reg R c1\n.reg R c2")
    from warpy.check.machine import Machine

    m = Machine(parse(text))
    m.run()
    w = m.warps[0]
    assert w.regs["t1"] == 0 and int(w.regs["c2"]) > int(w.regs["c1"])


def test_flags_the_rest_of_the_grid_raised_are_in_the_summary() -> None:
    rep = check_kernel(parse(base_text("probe counters sm_90a")))
    assert rep.ok and rep.raised_outside > 0
    assert "flag words raised by CTAs outside the simulated clusters" in rep.summary()
    with options(CheckOptions(all_ctas=True)):
        rep = check_kernel(parse(base_text("probe counters sm_90a")))
    assert rep.ok and rep.raised_outside == 0


def test_a_flag_nobody_raises_hangs_when_every_cta_runs() -> None:
    text = drop(r"ATOMG.E.ADD.STRONG.GPU PT, arrived")(base_text("probe counters sm_90a"))
    assert check_kernel(parse(text)).ok  # the rest of the grid raises it
    with options(CheckOptions(all_ctas=True)):
        rep = check_kernel(parse(text))
    assert any(m.startswith("hang: ") and "waits on ctr+0x0" in m for m in rep.problems.msgs["protocol"]), rep.text()


def test_tracer_ignores_inactive_lanes() -> None:
    """A register the colouring reuses inside a one-lane region holds anything in the other lanes: the
    colouring check compares the lanes that run the line."""
    k = parse(base_text("probe counters sm_90a"))
    line = next(x for x in k.lines if getattr(x, "name", "") == "STG")
    trace = _tracer(line)
    assert trace is not None
    from warpy.check.machine import Machine

    w = Machine(k).warps[0]
    one = np.zeros(32, dtype=bool)
    one[3] = True
    w.regs["out_ptr.0"] = np.arange(32, dtype=np.uint64) * 0x100 + 7  # lane 3 holds 0x307, the others garbage
    w.regs["out_ptr.1"] = 0
    got = trace(w, one)
    w.regs["out_ptr.0"] = np.full(32, 0x307, dtype=np.uint64)
    assert got == trace(w, one) == 0x307


def test_interpreter_atomics_read_zero() -> None:
    from warpy.isa import interp
    from warpy.isa.instr import Instr

    k = parse(base_text("probe counters sm_90a"))
    atom = next(x for x in k.lines if isinstance(x, Instr) and x.name == "ATOMG")
    m = interp.Machine()
    m.v["arrived"] = 5
    m.step(atom)
    assert m.v["arrived"] == 0
