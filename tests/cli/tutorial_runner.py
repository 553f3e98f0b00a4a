"""Runs the code blocks of docs/tutorial.md, in order, in one folder, so that the tutorial cannot rot.

A fenced block's info string says what it is: `python file=NAME` is written to NAME; `python` runs
in one namespace shared by the whole page (the folder first on sys.path, as for a script there);
`sh` is one command a line, each run by bash in the folder with the `warpy` of the Python running
the tests first on PATH, each of which must exit 0. A trailing `gpu` marks a block that needs an
sm_90 GPU: it runs only with `gpu=True` (tests/gpu/test_tutorial_gpu.py). Any other info string,
or a block with none, fails: every block on the page is executed."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import attrs

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial.md"
FENCE = re.compile(r"^```(.*)$")


@attrs.frozen
class Block:
    line: int  # where it starts in the page (1-based)
    kind: str  # "file", "python", "sh"
    gpu: bool
    name: str  # the file's name, for kind "file"
    code: str


def blocks(text: str) -> list[Block]:
    """The page's fenced blocks; a one-line AssertionError for an unterminated or unknown one."""
    out: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        info, start = m.group(1).split(), i + 1
        j = i + 1
        while j < len(lines) and lines[j] != "```":
            j += 1
        assert j < len(lines), f"docs/tutorial.md:{start}: the block never ends"
        code = "\n".join(lines[i + 1:j]) + "\n"
        gpu = "gpu" in info
        rest = [w for w in info if w != "gpu"]
        if rest[:1] == ["python"] and len(rest) == 2 and rest[1].startswith("file="):
            out.append(Block(start, "file", gpu, rest[1][len("file="):], code))
        elif rest in (["python"], ["sh"]):
            out.append(Block(start, rest[0], gpu, "", code))
        else:
            raise AssertionError(f"docs/tutorial.md:{start}: a block marked {m.group(1)!r}, which the test does not "
                                 "run (python, python file=NAME, sh, each optionally gpu)")
        i = j + 1
    return out


@contextlib.contextmanager
def _inside(folder: Path) -> Iterator[None]:
    old_cwd, old_path = os.getcwd(), list(sys.path)
    os.chdir(folder)
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        os.chdir(old_cwd)
        sys.path[:] = old_path
        for name in ("copy_kernel", "wgmma_tile", "tile_data"):  # the page's modules: fresh next time
            sys.modules.pop(name, None)


def run(folder: Path, gpu: bool) -> list[str]:
    """Run the page's blocks (the `gpu` ones only with `gpu`); returns what they printed."""
    from warpy_command import warpy_command

    env = dict(os.environ)
    env["PATH"] = str(Path(warpy_command()).parent) + os.pathsep + env.get("PATH", "")
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.pop("WARPY_TRACEBACK", None)
    printed: list[str] = []
    namespace: dict[str, Any] = {"__name__": "__tutorial__"}
    with _inside(folder):
        for b in blocks(TUTORIAL.read_text()):
            if b.gpu and not gpu:
                continue
            where = f"docs/tutorial.md:{b.line}"
            if b.kind == "file":
                (folder / b.name).write_text(b.code)
            elif b.kind == "python":
                buf = io.StringIO()
                with contextlib.redirect_stdout(buf):
                    exec(compile(b.code, where, "exec"), namespace)
                printed.append(buf.getvalue())
            else:
                for cmd in filter(None, (ln.strip() for ln in b.code.splitlines())):
                    r = subprocess.run(["bash", "-c", cmd], cwd=folder, env=env, capture_output=True, text=True,
                                       timeout=600)
                    assert r.returncode == 0, f"{where}: `{cmd}` exited {r.returncode}: {r.stderr[-2000:]}"
                    printed.append(r.stdout)
    return printed
