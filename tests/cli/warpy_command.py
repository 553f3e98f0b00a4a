"""Running the real `warpy` command (the console script installed beside this Python) in a subprocess
with no GPU visible and no traceback switch: what a user types, what a user sees."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

REPO = Path(__file__).resolve().parents[2]


def warpy_command() -> str:
    """The `warpy` console script of the Python running the tests (a venv's bin/, or PATH)."""
    here = Path(sys.executable).parent / ("warpy.exe" if os.name == "nt" else "warpy")
    if here.is_file():
        return str(here)
    found = shutil.which("warpy")
    if found is None:
        pytest.fail("the warpy command is not installed: run the README's set-up (python3 bootstrap.py test)")
    return found


def run_warpy(*args: str, cwd: Optional[Path] = None, stdin: Optional[str | bytes] = None,
              env: Optional[dict[str, str]] = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    e.pop("WARPY_TRACEBACK", None)
    e.update(env or {})
    data = stdin.decode("latin-1") if isinstance(stdin, bytes) else stdin
    return subprocess.run([warpy_command(), *args], capture_output=True, text=True, cwd=cwd or REPO, env=e,
                          input=data if data is not None else "", timeout=timeout)
