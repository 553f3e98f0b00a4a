"""The checker's parts import on their own, in any order: they name each other's types only for the
type checker, so no part needs another to have been imported first."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import warpy.check
import warpy.check.families


def _modules() -> list[str]:
    out = []
    for pkg in (warpy.check, warpy.check.families):
        out += [f"{pkg.__name__}.{m.name}" for m in pkgutil.iter_modules(pkg.__path__) if not m.ispkg]
    return sorted(out)


def test_each_part_imports_alone() -> None:
    mods = _modules()
    assert "warpy.check.schedule" in mods and "warpy.check.families.sync" in mods
    for mod in mods:
        r = subprocess.run([sys.executable, "-c", f"import {mod}"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, (mod, r.stderr)


def test_machine_is_a_facade() -> None:
    """Machine holds the parts; their state lives in them (a handful of fields, no logic of its own)."""
    from warpy.check.machine import Machine
    from warpy.check.state import EXITED
    from warpy.isa.examples import EXAMPLES

    m = Machine(EXAMPLES["example-pipe"]("sm_100a").kernel())
    assert len(vars(m)) <= 16, sorted(vars(m))
    m.run()
    assert m.problems.total() == 0 and m.steps > 0 and all(w.state == EXITED for w in m.warps)
