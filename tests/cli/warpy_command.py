"""Running the real `warpy` command (the console script installed beside this Python) in a subprocess
with no GPU visible and no traceback switch: what a user types, what a user sees. `run_warpy_here`
gives the same result through the command's entry point in this process (`tests/warpy_in_process.py`:
no interpreter start and imports per case)."""

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


def _child_env(env: Optional[dict[str, str]]) -> dict[str, str]:
    e = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    e.pop("WARPY_TRACEBACK", None)
    e.update(env or {})
    return e


def run_warpy(*args: str, cwd: Optional[Path] = None, stdin: Optional[str | bytes] = None,
              env: Optional[dict[str, str]] = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    data = stdin.decode("latin-1") if isinstance(stdin, bytes) else stdin
    return subprocess.run([warpy_command(), *args], capture_output=True, text=True, cwd=cwd or REPO,
                          env=_child_env(env), input=data if data is not None else "", timeout=timeout)


def run_warpy_here(*args: str, cwd: Optional[Path] = None, stdin: Optional[str | bytes] = None,
                   env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess[str]:
    """`run_warpy`'s result (exit status, stdout, stderr) from `warpy.cli.main` in this process; a real
    subprocess where this process can open a GPU (`warpy_in_process.run_main`)."""
    from warpy_in_process import run_main

    data = stdin.decode("latin-1") if isinstance(stdin, bytes) else stdin
    return run_main(args, argv0=warpy_command(), cwd=cwd or REPO, stdin=data, env=_child_env(env),
                    subprocess_fallback=lambda: run_warpy(*args, cwd=cwd, stdin=stdin, env=env))
