"""`warpy lift FILE.sass [-o out.ptx|out.cubin] [--no-check]` through the installed entry point's code
path (`python -m warpy.cli`'s result, from its entry point in this process: `tests/warpy_in_process.py`;
the pipe case runs a real subprocess): PTX to stdout, a .ptx file, a checked cubin, and the
one-line `FILE:line:col: message` of a parse error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from warpy.kernels.probes import PROBES

REPO = Path(__file__).resolve().parents[2]


def warpy(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    from warpy_in_process import run_cli

    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return run_cli(*args, cwd=cwd, env=env, timeout=120)


@pytest.fixture()
def sass(tmp_path: Path) -> Path:
    f = tmp_path / "mc.sass"
    f.write_text(PROBES["multicast"].build("sm_90a").text())
    return f


def test_lift_prints_ptx(sass: Path, tmp_path: Path) -> None:
    r = warpy("lift", str(sass), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("// warpy lift: kernel probe_multicast for sm_90a\n.version ")
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster" in r.stdout


def test_lift_writes_ptx_and_a_checked_cubin(sass: Path, tmp_path: Path) -> None:
    r = warpy("lift", str(sass), "-o", "k.ptx", "--target", "sm_100a", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert ".target sm_100a" in (tmp_path / "k.ptx").read_text()
    r = warpy("lift", str(sass), "-o", "k.cubin", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "k.cubin").read_bytes()[:4] == b"\x7fELF"
    assert r.stdout.startswith("wrote k.cubin for sm_90a: ") and "disassembly check passed" in r.stdout
    r = warpy("lift", str(sass), "-o", "k2.cubin", "--no-check", cwd=tmp_path)
    assert r.returncode == 0 and "disassembly" not in r.stdout


def test_parse_error_is_file_line_col(sass: Path, tmp_path: Path) -> None:
    lines = sass.read_text().splitlines()
    n = next(i for i, ln in enumerate(lines) if "UIMAD row" in ln)
    lines[n] = lines[n] + ", RZ"
    bad = tmp_path / "bad.sass"
    bad.write_text("\n".join(lines) + "\n")
    r = warpy("lift", str(bad), cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"{bad}:{n + 1}:3: UIMAD: UIMAD takes 4 operands, not 5\n"


def test_other_errors_are_one_line(sass: Path, tmp_path: Path) -> None:
    r = warpy("lift", str(tmp_path / "missing.sass"), cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith("error: cannot read ") and r.stderr.count("\n") == 1
    r = warpy("lift", str(sass), "-o", "k.bin", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr == "error: output k.bin must end in .ptx or .cubin\n"


def test_what_warpy_prints_warpy_reads_back_through_a_file_and_a_pipe(tmp_path: Path) -> None:
    """`warpy gemm ... --emit sass` to stdout, then `warpy lift` of that file and of standard input."""
    emitted = warpy("gemm", "256", "256", "128", "--out-dtype", "bf16", "--emit", "sass", "--no-run", cwd=tmp_path)
    assert emitted.returncode == 0, emitted.stderr
    assert emitted.stdout.endswith("EXIT\n") and not emitted.stdout.endswith("\n\n")
    (tmp_path / "out.sass").write_text(emitted.stdout)
    from_file = warpy("lift", "out.sass", cwd=tmp_path)
    assert from_file.returncode == 0, from_file.stderr
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    from_pipe = subprocess.run([sys.executable, "-m", "warpy.cli", "lift", "-"], input=emitted.stdout, capture_output=True,
                               text=True, cwd=tmp_path, env=env, timeout=120)
    assert from_pipe.returncode == 0, from_pipe.stderr
    assert from_pipe.stdout == from_file.stdout


def test_blank_lines_and_header_comments_are_read(sass: Path, tmp_path: Path) -> None:
    text = sass.read_text()
    edited = "// a note above the header\n" + text.replace("\n", "\n\n", 3) + "\n\n"
    (tmp_path / "edited.sass").write_text(edited)
    a, b = warpy("lift", str(sass), cwd=tmp_path), warpy("lift", "edited.sass", cwd=tmp_path)
    assert a.returncode == b.returncode == 0, b.stderr
    assert a.stdout.replace(str(sass), "X") == b.stdout.replace("edited.sass", "X").replace(str(tmp_path / "X"), "X")


def test_a_binary_file_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "k.cubin").write_bytes(bytes(range(256)))
    r = warpy("lift", "k.cubin", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr == "error: k.cubin is not a text file (a SASS text is UTF-8)\n"
