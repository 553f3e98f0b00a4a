"""`warpy expand`: examples, a build() file, a .sass text; one-line errors."""

from __future__ import annotations

import subprocess
import textwrap

import pytest

from warpy.isa.expand import expand
from warpy.isa.text import parse


def _warpy(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m warpy.cli ARGS`'s result, from its entry point in this process."""
    from warpy_in_process import run_cli

    return run_cli(*args, timeout=120)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_expand_example(arch: str) -> None:
    r = _warpy("expand", "example-pipe", "--arch", arch)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f".kernel example_pipe_{arch[:-1].replace('_', '')}\n.sm {arch}\n")
    assert str(parse(r.stdout)) == r.stdout
    assert "\n+ UIMAD " in r.stdout and "\n~ @!waited BRA WAIT_" in r.stdout
    c = _warpy("expand", "example-pipe", "--arch", arch, "--coloured")
    assert c.returncode == 0 and ".reg " not in c.stdout and str(parse(c.stdout)) == c.stdout


def test_expand_a_file_and_a_sass_text(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "k.py"
    f.write_text(textwrap.dedent('''
        from warpy.isa import Program
        from warpy.isa.families import alu, control

        def build(arch="sm_90a"):
            p = Program("tiny", arch, threads=32)
            x = p.r("x")
            with p.loop("i", 3):
                p.emit(alu.iadd3(x, x, 1))
            p.emit(control.exit_())
            return p
    '''))
    text = expand(str(f), "sm_100a")
    assert ".kernel tiny\n.sm sm_100a\n" in text and "  IADD3 x, PT, PT, x, 0x1, RZ\n" in text
    s = tmp_path / "k.sass"
    s.write_text(expand(str(f), "sm_90a", coloured=True))
    assert expand(str(s)) == s.read_text()


def test_expand_errors_are_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = _warpy("expand", "no-such-thing")
    assert r.returncode == 2 and r.stderr.startswith("error: 'no-such-thing' is neither") and r.stderr.count("\n") == 1
    bad = tmp_path / "bad.sass"
    bad.write_text(".kernel k\n.sm sm_90a\n.threads 32\n  BOGUS R1\n")
    r = _warpy("expand", str(bad))
    assert r.returncode == 2 and r.stderr.startswith("error: 4:3: unknown opcode BOGUS")
    nobuild = tmp_path / "nobuild.py"
    nobuild.write_text("x = 1\n")
    r = _warpy("expand", str(nobuild))
    assert r.returncode == 2 and "defines no build()" in r.stderr
