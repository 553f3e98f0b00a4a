"""The layout micro-benchmark runs (slow: only with WARPY_SLOW=1); it compares with pycute when
pycute is importable and says so when it is not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not os.environ.get("WARPY_SLOW"), reason="slow: set WARPY_SLOW=1 to run the layout benchmark")
def test_bench_layout_runs() -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "layout" / "bench_layout.py"), "--number", "200"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "composition((6,2):(8,2), (4,3):(3,1))" in r.stdout
    assert ("pycute" in r.stdout)
