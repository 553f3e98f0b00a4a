"""warpy.layout stands alone: no CUDA, nothing else of warpy, and mypy --strict clean."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_loads_nothing_else() -> None:
    code = "import sys, json, warpy.layout; print(json.dumps(sorted(sys.modules)))"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, check=True)
    modules = json.loads(out.stdout)
    assert "warpy.layout" in modules
    outside = [m for m in modules if m.startswith("warpy") and m != "warpy" and not m.startswith("warpy.layout")]
    assert outside == []
    cuda = [m for m in modules if "cuda" in m.lower() or m.startswith(("torch", "cupy", "numba"))]
    assert cuda == []


def test_mypy_strict_on_warpy_layout() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "warpy/layout"], capture_output=True, text=True, cwd=ROOT
    )
    # Report only what is inside warpy/layout: mypy follows imports into the package root too.
    errors = [line for line in r.stdout.splitlines() if line.startswith("warpy/layout/") and ": error:" in line]
    assert errors == [], "\n".join(errors)
    assert "error" not in r.stderr.lower(), r.stderr
