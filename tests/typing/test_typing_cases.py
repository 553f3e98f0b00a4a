"""Programs that must fail to type-check, each exactly at its line marked `# mypy: error`, and a
control that must pass: the public builder signatures are typed so that mypy rejects the same
mistakes the builders refuse at build time (docs/architecture.md)."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CASES = sorted(HERE.glob("fail_*.py")) + sorted(HERE.glob("pass_*.py"))


@pytest.fixture(scope="module")
def mypy_errors() -> dict[str, list[int]]:
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--follow-imports=silent", "--no-error-summary", "--show-error-codes",
         *[str(c.relative_to(ROOT)) for c in CASES]],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    errors: dict[str, list[int]] = {}
    for line in out.stdout.splitlines():
        m = re.match(r"(.+?\.py):(\d+): error:", line)
        if m:
            errors.setdefault(pathlib.Path(m.group(1)).name, []).append(int(m.group(2)))
    if out.returncode not in (0, 1) or (out.returncode == 1 and not errors):
        pytest.fail(f"mypy did not run: {out.stdout}{out.stderr}")
    return errors


def test_there_are_cases():
    assert len([c for c in CASES if c.name.startswith("fail_")]) >= 4
    assert any(c.name.startswith("pass_") for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.stem)
def test_case(case: pathlib.Path, mypy_errors: dict[str, list[int]]) -> None:
    marked = [n for n, line in enumerate(case.read_text().splitlines(), 1) if line.rstrip().endswith("# mypy: error")]
    got = mypy_errors.get(case.name, [])
    if case.name.startswith("pass_"):
        assert marked == [] and got == [], f"{case.name} should type-check; mypy reports lines {got}"
    else:
        assert len(marked) == 1, f"{case.name} must mark exactly one line"
        assert got == marked, f"{case.name}: mypy reports errors at lines {got}, expected exactly {marked}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.stem)
def test_case_at_run_time(case: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same mistakes raise when the program is built, naming what is wrong."""
    import runpy

    from warpy.errors import WarpyError

    monkeypatch.syspath_prepend(str(HERE))
    if case.name.startswith("pass_"):
        runpy.run_path(str(case))
        return
    with pytest.raises((WarpyError, AttributeError)) as e:
        runpy.run_path(str(case))
    msg = str(e.value)
    assert re.search(r"Tile sa|Counter k|UR u|'free'|must be an? [A-Za-z0-9 ]+ register, not", msg), msg
    assert "\n" not in msg
