"""Set up warpy in a virtual environment `.venv` beside this file, with the Python that runs it.

    python3 bootstrap.py            # .venv with warpy installed (editable)
    python3 bootstrap.py test       # ... and the test extras (pytest, hypothesis, mypy)
    python3 bootstrap.py bench plot # any extras of pyproject.toml

Then `. .venv/bin/activate` puts `warpy` on PATH (the README's commands do both).

Why a script: a distribution's python3 (Debian 12, Ubuntu 24.04) refuses `pip install` outside a
virtual environment (PEP 668, "externally-managed-environment"), and without the python3-venv
package its `python3 -m venv` cannot install pip (no ensurepip). This script creates `.venv` with
pip where it can; otherwise without pip, and then installs pip into it from the package index
(PyPI, or $PIP_INDEX_URL), checking the wheel's sha256 against the index. It needs nothing but the
standard library, runs again safely (an existing `.venv` is reused), and says in one line what is
missing when it cannot go on.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
MIN_PYTHON = (3, 11)


def fail(msg: str) -> None:
    print(f"bootstrap: {msg}", file=sys.stderr)
    sys.exit(1)


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def has_pip(python: Path) -> bool:
    return subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True).returncode == 0


def create_venv() -> None:
    said = io.StringIO()  # a distribution's venv explains its missing ensurepip at length: kept quiet
    try:
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            venv.EnvBuilder(with_pip=True).create(VENV)
        return
    except (subprocess.CalledProcessError, OSError, SystemExit):
        print("bootstrap: this python3 has no ensurepip (a distribution's python3 without python3-venv): "
              "creating .venv without pip, then installing pip from the package index", file=sys.stderr)
    venv.EnvBuilder(with_pip=False, clear=True).create(VENV)


def _index_url() -> str:
    return os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")


def fetch_pip_wheel(dest: Path) -> Path:
    """The newest pip wheel from the index's JSON simple API (PEP 691), checked against its sha256."""
    url = f"{_index_url()}/pip/"
    req = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            index = json.load(r)
    except Exception as e:  # no network, no CA certificates, an index without the JSON API
        why = str(getattr(e, "reason", e))
        hint = (" (install ca-certificates: apt-get install ca-certificates)" if "CERTIFICATE" in why.upper() else "")
        fail(f"cannot read {url}: {why}{hint}; or install python3-venv (apt-get install python3-venv) and run "
             "this again")
    wheels = [f for f in index.get("files", []) if f["filename"].endswith("-py3-none-any.whl")
              and not f.get("yanked") and "sha256" in f.get("hashes", {})]
    if not wheels:
        fail(f"{url} lists no pip wheel")

    def version(f: dict[str, object]) -> tuple[int, ...]:
        v = str(f["filename"]).split("-")[1]
        return tuple(int(x) if x.isdigit() else -1 for x in v.split("."))

    best = max(wheels, key=version)
    target = dest / str(best["filename"])
    file_url = urllib.parse.urljoin(url, str(best["url"]))
    with urllib.request.urlopen(file_url, timeout=300) as r:
        data = r.read()
    if hashlib.sha256(data).hexdigest() != best["hashes"]["sha256"]:
        fail(f"{best['filename']}: the download does not match the index's sha256")
    target.write_bytes(data)
    return target


def ensure_pip(python: Path) -> None:
    if has_pip(python):
        return
    with tempfile.TemporaryDirectory(prefix="warpy-bootstrap-") as d:
        wheel = fetch_pip_wheel(Path(d))
        # a pip wheel runs from the zip: pip installs itself
        run([str(python), str(wheel / "pip"), "install", "--quiet", str(wheel)])
    if not has_pip(python):
        fail("pip did not install into .venv")


def run(cmd: list[str]) -> None:
    r = subprocess.run(cmd)
    if r.returncode:
        fail(f"{' '.join(cmd)} failed (exit status {r.returncode})")


def main() -> None:
    if sys.version_info < MIN_PYTHON:
        fail(f"warpy needs Python {'.'.join(map(str, MIN_PYTHON))} or newer; this is {sys.version.split()[0]}")
    extras = [a for a in sys.argv[1:] if not a.startswith("-")]
    if any(a.startswith("-") for a in sys.argv[1:]):
        print(__doc__)
        sys.exit(0 if set(sys.argv[1:]) & {"-h", "--help"} else 2)
    python = venv_python()
    if not python.exists():
        print(f"bootstrap: creating {VENV.relative_to(ROOT)} with Python {sys.version.split()[0]}", file=sys.stderr)
        create_venv()
    (VENV / ".gitignore").write_text("*\n")  # the venv never shows in git status
    ensure_pip(python)
    spec = f"{ROOT}[{','.join(extras)}]" if extras else str(ROOT)
    print(f"bootstrap: installing warpy{'[' + ','.join(extras) + ']' if extras else ''} into .venv", file=sys.stderr)
    run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-e", spec])


if __name__ == "__main__":
    main()
