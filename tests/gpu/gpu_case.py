"""A GPU test's case run in its own process, so that a fault or a hang in one leaves the others'
CUDA context intact: the test calls `run_case(script, [case])`, which runs `python script case`;
the script, run so, ends in `case_main(run)`, which prints what `run(case)` found as one JSON line
(a failure as `{"ok": false, "error": "<type>: <message>"}`) and leaves without the interpreter's
teardown (a kernel may still be running after a hang).

Imported by the tests under tests/gpu both under pytest (tests/gpu is on sys.path, as the folder of
the test files and of their conftest) and as scripts (their own folder is sys.path[0]); importing it
puts the repository first on sys.path, so `kernels/` is importable as `warpy.kernels` either way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, Optional, Union

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as a script: kernels/ is importable
    sys.path.insert(0, str(REPO))


def repo_env() -> dict[str, str]:
    """This process's environment with the repository first on PYTHONPATH (for a child Python)."""
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def run_case(script: Union[str, Path], args: Sequence[str], timeout: float = 600) -> dict[str, Any]:
    """`python script *args` in the repository, its last JSON line as a dict; a child that printed
    none (it crashed) is `{"ok": False, "error": "exit N; stderr: ..."}`."""
    p = subprocess.run([sys.executable, str(Path(script).resolve()), *args], capture_output=True, text=True,
                       timeout=timeout, env=repo_env(), cwd=str(REPO))
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"ok": False, "error": f"exit {p.returncode}; stderr: {p.stderr.strip()[-2000:]}"}
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def case_main(run: Callable[[str], dict[str, Any]], table: Optional[Callable[[], str]] = None) -> NoReturn:
    """The script's side: `run(sys.argv[1])` printed as one JSON line (an exception as a one-line
    account of what went wrong), then out at once; with `table`, `--all` prints `table()` instead
    (a Markdown table for the hardware log)."""
    if table is not None and sys.argv[1] == "--all":
        print(table())
        sys.exit(0)
    try:
        result = run(sys.argv[1])
    except Exception as e:  # a one-line account of what went wrong
        result = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    print(json.dumps(result))
    sys.stdout.flush()
    os._exit(0)  # a kernel may still be running after a hang: skip teardown that could wait on it


# -- the probes of kernels/probes.py, each run by tests/gpu/test_probes.py in its own process -------

PROBE_RUNNER = Path(__file__).resolve().parent / "test_probes.py"


def run_probe(name: str) -> dict[str, Any]:
    """`python tests/gpu/test_probes.py NAME`: the probe built, launched and compared in a child."""
    return run_case(PROBE_RUNNER, [name], timeout=240)


def assert_probe_exact(name: str, r: dict[str, Any]) -> None:
    """The probe ran and every element of every output equals its host expectation."""
    assert r.get("ok"), f"probe {name}: {json.dumps(r)}"
    for out in r["outputs"].values():
        assert out["mismatches"] == 0 and out["elements"] > 0


def probe_table_row(name: str, r: dict[str, Any], width: int = 160) -> str:
    """A probe's line of the hardware log's table: name, result (ok, the mismatches, or the error's
    first `width` characters), registers, elements checked."""
    n = sum(o["elements"] for o in r.get("outputs", {}).values())
    bad = sum(o["mismatches"] for o in r.get("outputs", {}).values())
    res = "ok" if r.get("ok") else (f"{bad} mismatches" if "outputs" in r else r.get("error", "?")[:width])
    return f"| {name} | {res} | {r.get('registers', '-')} | {n} |"


def host_us_per_call(torch: Any, fn: Callable[[], Any], calls: int = 200, warmup: int = 20) -> float:
    """The host's time (µs, one decimal) a call of `fn` takes: warm-up calls, then `calls` calls
    while the GPU is kept busy (`torch.cuda._sleep`), so the loop measures the host alone."""
    import time

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)  # keep the GPU busy: the loop below measures the host alone
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    us = round((time.perf_counter() - t) / calls * 1e6, 1)
    torch.cuda.synchronize()
    return us
