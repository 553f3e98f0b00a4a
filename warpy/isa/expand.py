"""`warpy expand`: print a program's SASS text (named form by default)."""

from __future__ import annotations

import importlib.util
import inspect
import os

from warpy.errors import WarpyError
from warpy.isa.program import Program
from warpy.isa.text import Kernel, parse
from warpy.target import ARCHS


def load_program(target: str, arch: str) -> Program | Kernel:
    """A program by example name, from a Python file defining `build()`, or a `.sass` text."""
    from warpy.isa.examples import EXAMPLES

    if arch not in ARCHS:
        raise WarpyError(f"--arch {arch!r} is not one of {', '.join(ARCHS)}")
    if target in EXAMPLES:
        return EXAMPLES[target](arch)
    if target.endswith(".sass"):
        try:
            with open(target) as f:
                return parse(f.read())
        except OSError as e:
            raise WarpyError(f"cannot read {target}: {e.strerror}") from None
    if target.endswith(".py"):
        if not os.path.isfile(target):
            raise WarpyError(f"no such file: {target}")
        spec = importlib.util.spec_from_file_location("_warpy_expand_target", target)
        if spec is None or spec.loader is None:
            raise WarpyError(f"cannot load {target} as Python")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        build = getattr(mod, "build", None)
        if not callable(build):
            raise WarpyError(f"{target} defines no build() returning a Program")
        params = inspect.signature(build).parameters
        prog = build(arch=arch) if "arch" in params else build()
        if not isinstance(prog, (Program, Kernel)):
            raise WarpyError(f"{target}: build() returned {type(prog).__name__}, not a Program")
        return prog
    raise WarpyError(f"{target!r} is neither an example ({', '.join(EXAMPLES)}), a .py file with build(), nor a .sass file")


def expand(target: str, arch: str = "sm_90a", coloured: bool = False) -> str:
    prog = load_program(target, arch)
    if isinstance(prog, Kernel):
        if coloured and prog.named:
            from warpy.isa.colour import colour

            return str(colour(prog))
        return str(prog)
    return str(prog.coloured() if coloured else prog.kernel())
