"""`warpy check` and `warpy hb`: summary line, exit status, faults, FILE.sass, one-line errors."""

from __future__ import annotations

import subprocess

import numpy as np

from warpy.kernels.gemm import GemmProblem, build
from warpy_in_process import run_cli


def _warpy(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m warpy.cli ARGS`'s result, from its entry point in this process."""
    return run_cli(*args, timeout=300)


def test_check_gemm_clean_and_progress() -> None:
    r = _warpy("check", "gemm", "256", "256", "128")
    assert r.returncode == 0, r.stdout + r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.endswith("0 wrong, 0 changed by the colouring; 0 named-barrier arrivals that do not make their counts; "
                         "0 protocol problems; 0 uses of memory past what was declared; 0 accesses nothing orders")
    assert "warp instructions" in r.stderr


def test_check_fault_exits_nonzero_with_the_hang_message_format() -> None:
    # 128 x 64 tiles (set here: the rule's pick moves with the sweep's table), a stage of 24576 bytes
    r = _warpy("check", "gemm", "256", "256", "128", "--fault", "drop-arrive", "--config", "bn=64,consumers=2")
    assert r.returncode == 1
    assert "hang: CTA 0 warp 4 waits on stage_full[0] for the phase of parity 0: it is in phase 0, 1 of 1 arrivals " \
           "to come, -24576 bytes" in r.stdout
    assert r.stdout.startswith("fault drop-arrive: dropped line ")


def test_fault_that_does_not_apply_says_so_in_one_line() -> None:
    r = _warpy("check", "gemm", "256", "256", "128", "--fault", "tmem-overlap")
    assert r.returncode == 3
    assert r.stdout.strip().count("\n") == 0 and r.stdout.startswith("tmem-overlap: ")


def test_check_a_sass_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "k.sass"
    f.write_text(str(build(GemmProblem(256, 256, 128, arch="sm_100a")).coloured()))
    r = _warpy("check", str(f))
    assert r.returncode == 0, r.stdout + r.stderr
    r = _warpy("check", str(f), "--fault", "read-before-commit")
    assert r.returncode == 1 and "tensor memory: " in r.stdout


def test_values_dump(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "c.npz"
    r = _warpy("check", "gemm", "192", "136", "64", "--values", "--no-colour", "--dump", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    d = np.load(out)
    ref = d["a"].astype(np.float64) @ d["b"].astype(np.float64).T
    w = d["written"]
    assert w.any() and np.array_equal(d["c"][w], ref[w].astype(np.float32))


def test_hb_table() -> None:
    r = _warpy("hb", "gemm", "1024", "1024", "1024", "--arch", "sm_100a")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["buffer", "earlier", "later", "ordered", "by"]
    assert any(x.startswith("sa ") and "UTMALDG.2D.2CTA, warp 0" in x and "UTCHMMA.2CTA, warp 1" in x
               and "wait on stage_full" in x for x in lines)
    assert any(x.startswith("tensor memory ") and "LDTM.x32, warps 4-7" in x and "wait on acc_full" in x for x in lines)


def test_bad_inputs_are_one_line() -> None:
    for args in (["check", "gemm", "1", "2"], ["check", "nosuch.sass"], ["check", "gemm", "64", "64", "64", "--fault", "x"]):
        r = _warpy(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1
