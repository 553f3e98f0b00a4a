"""The `warpy` command run in this process: `warpy.cli.main` (the console script's entry point, what
`warpy ARGS` and `python -m warpy.cli ARGS` call) with the child's surroundings set up here, so a
test asserts the same exit status, stdout and stderr without a Python start and warpy's imports for
each case (~0.6 s each on the 2-core CI machine).

What a child process would have, and this gives: argv; the working folder; the environment
(`CUDA_VISIBLE_DEVICES=""`, no `WARPY_TRACEBACK`, the caller's additions, and `COLUMNS=80` where
unset: a child's stdout is a pipe, so click lays help out for 80 columns); standard input as bytes
in the locale's encoding (what `subprocess.run(input=..., text=True)` writes); stdout and stderr
captured as bytes and decoded as `text=True` does (universal newlines); the exit status from
`SystemExit` (None 0, a number, or a message printed to stderr and 1, as the interpreter does); an
exception escaping `main` printed as a traceback with status 1; warnings shown on stderr under the
interpreter's default filters (a child prints them; pytest would otherwise record them).

A GPU is hidden from a child by `CUDA_VISIBLE_DEVICES`, which an initialised driver in this process
no longer reads: where this process can open a GPU, every call goes to a real subprocess instead
(`subprocess_fallback`). `tests/cli/test_bad_input.py::test_in_process_runs_are_the_commands_runs`
runs cases of each kind both ways and compares the three results exactly."""

from __future__ import annotations

import contextlib
import functools
import io
import locale
import os
import subprocess
import sys
import traceback
import warnings
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence


@functools.lru_cache(maxsize=None)
def gpu_reachable() -> bool:
    """Whether this process can open a GPU (then in-process runs could not hide it)."""
    try:
        from warpy import runtime as rt
        from warpy.errors import NoGPU

        rt.device()
    except NoGPU:
        return False
    except Exception:  # a runtime that fails otherwise: let real processes show what it does
        return True
    return True


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _text(data: bytes, encoding: str) -> str:
    return data.decode(encoding).replace("\r\n", "\n").replace("\r", "\n")


def run_main(args: Sequence[str], *, argv0: str, cwd: Path, stdin: Optional[str] = None,
             env: Optional[dict[str, str]] = None,
             subprocess_fallback: Optional[Callable[[], subprocess.CompletedProcess[str]]] = None
             ) -> subprocess.CompletedProcess[str]:
    """`warpy ARGS` through `warpy.cli.main` in this process, as a child with `env` (the whole
    environment it would get), `cwd` and `stdin` would run it; `subprocess_fallback` runs the real
    child where a GPU is reachable here."""
    if gpu_reachable():
        if subprocess_fallback is None:
            raise RuntimeError("a GPU is reachable in this process: run the command in a subprocess")
        return subprocess_fallback()
    from warpy.cli import main

    e = dict(os.environ if env is None else env)
    e.setdefault("COLUMNS", "80")
    e.setdefault("LINES", "24")
    enc = locale.getpreferredencoding(False)
    out, err = io.BytesIO(), io.BytesIO()
    new_out = io.TextIOWrapper(out, encoding=enc, errors="strict", write_through=True)
    new_err = io.TextIOWrapper(err, encoding=enc, errors="backslashreplace", write_through=True)
    new_in = io.TextIOWrapper(io.BytesIO((stdin or "").encode(enc)), encoding=enc)
    saved = (sys.stdin, sys.stdout, sys.stderr, sys.argv, os.getcwd())

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: object = None, line: Optional[str] = None) -> None:
        new_err.write(warnings.formatwarning(message, category, filename, lineno, line))

    code: int
    try:
        with _environment(e), warnings.catch_warnings():
            warnings.resetwarnings()  # the interpreter's default filters, as a child starts with
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", category)
            warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
            warnings.showwarning = show
            os.chdir(cwd)
            sys.stdin, sys.stdout, sys.stderr, sys.argv = new_in, new_out, new_err, [argv0, *args]
            try:
                main(list(args))
                code = 0
            except SystemExit as x:
                if x.code is None:
                    code = 0
                elif isinstance(x.code, int):
                    code = x.code
                else:
                    print(x.code, file=sys.stderr)
                    code = 1
            except BaseException:  # what the interpreter does with an exception that reaches the top
                traceback.print_exc(file=sys.stderr)
                code = 1
    finally:
        sys.stdin, sys.stdout, sys.stderr, sys.argv = saved[:4]
        os.chdir(saved[4])
    for stream in (new_out, new_err):
        stream.flush()
    return subprocess.CompletedProcess([argv0, *args], code, _text(out.getvalue(), enc), _text(err.getvalue(), enc))


def run_cli(*args: str, cwd: Optional[Path | str] = None, env: Optional[dict[str, str]] = None,
            stdin: Optional[str] = None, timeout: Optional[float] = None) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([sys.executable, "-m", "warpy.cli", *args], capture_output=True, text=True,
    cwd=cwd, env=env, input=stdin, timeout=timeout)`'s result, from `warpy.cli.main` in this process
    (that subprocess where a GPU is reachable here)."""
    def child() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "warpy.cli", *args], capture_output=True, text=True, cwd=cwd,
                              env=env, input=stdin, timeout=timeout)

    return run_main(args, argv0=sys.executable, cwd=Path(cwd) if cwd is not None else Path.cwd(), stdin=stdin,
                    env=env, subprocess_fallback=child)
