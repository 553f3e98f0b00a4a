"""The GPU tests skip only where there is no GPU: a `warpy.runtime.device()` that raises `NoGPU`
skips them, one that raises anything else (a bug of the runtime on a GPU machine) fails every one of
them with the error's line. Runs tests/gpu/test_scratch_gpu.py (small, quick to collect) in a child
pytest with device() replaced by a plugin, so the real conftest decides."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PLUGIN = """
import warpy.runtime
from warpy.errors import NoGPU

def device(ordinal=None):
    raise {exc}

warpy.runtime.device = device
"""


def _run_gpu_file(tmp_path: Path, exc: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "fake_device_plugin.py").write_text(PLUGIN.format(exc=exc))
    # the child is a plain run wherever this test runs (an xdist worker's variables would make
    # plugins of the child think it is one, and warn on stderr)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    env.update(PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]), WARPY_XDIST="0")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "fake_device_plugin",
         "tests/gpu/test_scratch_gpu.py"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )


def test_a_broken_device_fails_the_gpu_tests(tmp_path: Path) -> None:
    # an ImportError is what a broken cuda-python install raises: it too must fail, not skip
    r = _run_gpu_file(tmp_path, 'ImportError("cuInit returned 999")')
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    summary = r.stdout.strip().splitlines()[-1]  # pytest's last line: "2 errors in ..." (the fixture fails)
    assert ("error" in summary or "failed" in summary) and "skipped" not in summary and "passed" not in summary, out
    assert "failed (not NoGPU): ImportError: cuInit returned 999" in out, out


def test_no_gpu_skips_them(tmp_path: Path) -> None:
    r = _run_gpu_file(tmp_path, 'NoGPU("no CUDA driver here")')
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    last = r.stdout.strip().splitlines()[-1]  # pytest's last line: "N skipped in ..."
    assert "skipped" in last and "failed" not in last and "passed" not in last, out
    assert "no sm_90 GPU: no CUDA driver here" in out, out

