"""`warpy expand`: print a program's SASS text (named form by default)."""

from __future__ import annotations

import importlib.util
import inspect
import os
from typing import Callable

from warpy.errors import WarpyError
from warpy.isa.program import Program
from warpy.isa.text import Kernel, parse
from warpy.target import ARCHS


class UserCodeError(WarpyError):
    """The user's own FILE.py failed (a syntax error, an exception at import or in `build()`):
    named as theirs, with the line, never as an internal error of warpy."""


def _user_frame(exc: BaseException, path: str) -> str:
    """`FILE.py:LINE` of the innermost frame of the traceback inside the user's file."""
    import traceback

    here = os.path.realpath(path)
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if os.path.realpath(frame.filename) == here:
            line = frame.lineno
    return f"{path}:{line}" if line is not None else path


def _run_user_code(path: str, what: str, fn: Callable[[], object]) -> object:
    try:
        return fn()
    except WarpyError as e:  # warpy refused something the file asked for: still the file's line
        raise UserCodeError(f"{_user_frame(e, path)}: {what}: {e}") from None
    except SyntaxError as e:
        raise UserCodeError(f"{path}:{e.lineno}: {what}: SyntaxError: {e.msg} (the error is in your file)") from None
    except Exception as e:
        msg = " ".join(str(e).split())
        raise UserCodeError(f"{_user_frame(e, path)}: {what} raised {type(e).__name__}"
                            f"{': ' + msg if msg else ''} (the error is in your file; WARPY_TRACEBACK=1 shows "
                            "the traceback)") from e


def _read_sass(path: str) -> Kernel:
    """The SASS text at `path` (`-`: standard input), parsed; one-line errors naming the file."""
    import sys

    from warpy.isa.text import ParseError

    name = "standard input" if path == "-" else path
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as f:
                data = f.read()
    except OSError as e:
        raise WarpyError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise WarpyError(f"{name} is not a text file (a SASS text is UTF-8)") from None
    try:
        return parse(text)
    except ParseError as e:
        raise WarpyError(f"{e} (in {name})") from None


def load_program(target: str, arch: str) -> Program | Kernel:
    """A program by example name, from a Python file defining `build()`, or a `.sass` text."""
    from warpy.isa.examples import EXAMPLES

    if arch not in ARCHS:
        raise WarpyError(f"--arch {arch!r} is not one of {', '.join(ARCHS)}")
    if target in EXAMPLES:
        return EXAMPLES[target](arch)
    if target.endswith(".sass") or target == "-":
        return _read_sass(target)
    if target.endswith(".py"):
        if not os.path.isfile(target):
            raise WarpyError(f"no such file: {target}")
        spec = importlib.util.spec_from_file_location("_warpy_expand_target", target)
        if spec is None or spec.loader is None:
            raise WarpyError(f"cannot load {target} as Python")
        mod = importlib.util.module_from_spec(spec)
        loader = spec.loader
        _run_user_code(target, "importing it", lambda: loader.exec_module(mod))
        build = getattr(mod, "build", None)
        if not callable(build):
            raise WarpyError(f"{target} defines no build() returning a Program (def build(arch): ...)")
        try:
            params = inspect.signature(build).parameters
        except (TypeError, ValueError):
            params = {}  # type: ignore[assignment]
        prog = _run_user_code(target, "build()", lambda: build(arch=arch) if "arch" in params else build())
        if not isinstance(prog, (Program, Kernel)):
            raise WarpyError(f"{target}: build() returned {type(prog).__name__}, not a Program")
        return prog
    raise WarpyError(f"{target!r} is neither an example ({', '.join(EXAMPLES)}), a .py file with build(), nor a .sass "
                     "file" + ("" if os.path.exists(target) else " (and no such file exists)"))


def expand(target: str, arch: str = "sm_90a", coloured: bool = False) -> str:
    prog = load_program(target, arch)
    if isinstance(prog, Kernel):
        if coloured and prog.named:
            from warpy.isa.colour import colour

            return str(colour(prog))
        return str(prog)
    return str(prog.coloured() if coloured else prog.kernel())
