"""Plans: problem -> program -> SASS text -> PTX -> cubin, for any kernel family, cached.

A plan is built once per problem: the family's rule picks a configuration, the program is built,
lifted to PTX and assembled. Plans live on disk (`$WARPY_CACHE` or `~/.cache/warpy`, one folder a
family: the program's SASS text and PTX, keyed by the problem and a fingerprint of the kernel and
compiler sources), and ptxas's own cache keeps the cubin by PTX, so a fresh process skips the
build. `check_problem` runs the host checker on the program a problem gets.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import attrs

from warpy.cache import atomic_write, cache_root
from warpy.isa.text import Header

if TYPE_CHECKING:
    from warpy.check.report import Report
    from warpy.isa.program import Program
    from warpy.kernels.family import KernelFamily
    from warpy.lift.ptxas import Cubin


@attrs.frozen
class Plan:
    """One problem's kernel: its family, the configuration's summary, the header (parameters,
    grid, block, shared memory, cluster), the named SASS text, the PTX and the cubin."""

    family: KernelFamily
    problem: Any
    describe: str
    header: Header
    sass: str
    ptx: str
    cubin: Cubin
    from_disk: bool = attrs.field(eq=False)
    config: Any = attrs.field(default=None, eq=False)  # None when read back from disk
    program: Optional[Program] = attrs.field(default=None, eq=False, repr=False)


_fingerprint: dict[str, str] = {}


def source_fingerprint() -> str:
    """sha256 over warpy's version and the sources a plan depends on (the kernels package with its
    data, the GEMM rule's measured table among them, warpy.layout, warpy.isa, warpy.lift,
    warpy.target): an edit to any of them makes every disk entry a miss. (A table named by
    `WARPY_GEMM_TABLE` is outside it: the plan key takes its path and contents too.)"""
    fp = _fingerprint.get("fp")
    if fp is None:
        import warpy
        import warpy.kernels

        here = Path(__file__).resolve().parent
        folders = [here / "layout", here / "isa", here / "lift", Path(warpy.kernels.__file__).resolve().parent]
        h = hashlib.sha256(warpy.__version__.encode())
        for folder in folders:
            for f in sorted(folder.rglob("*.py")) + sorted(folder.rglob("data/*.json")):
                h.update(str(f.relative_to(folder.parent)).encode() + b"\0")
                h.update(f.read_bytes())
        h.update((here / "target.py").read_bytes())
        fp = _fingerprint["fp"] = h.hexdigest()
    return fp


def problem_key(problem: Any) -> str:
    fields = {f.name: getattr(problem, f.name) for f in attrs.fields(type(problem))}
    h = hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode())
    h.update(source_fingerprint().encode())
    extra = getattr(problem, "plan_key", None)  # (a family's problem may depend on more: a GEMM's tuned row)
    if callable(extra):
        h.update(str(extra()).encode())
    table = os.environ.get("WARPY_GEMM_TABLE")
    if table:  # another GEMM table than the committed one (kernels/gemm_sweep.py): its path and bytes
        h.update(table.encode())
        with contextlib.suppress(OSError):
            h.update(Path(table).read_bytes())
    return h.hexdigest()


def _disk_path(family: str, key: str) -> Path:
    return cache_root() / family / f"{key}.json"


def _disk_read(family: str, key: str) -> Optional[dict[str, str]]:
    try:
        entry = json.loads(_disk_path(family, key).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("describe", "sass", "ptx")):
        return None  # damaged: a miss, rewritten
    return entry


def _disk_write(family: str, key: str, entry: dict[str, str]) -> None:
    atomic_write(_disk_path(family, key), json.dumps(entry).encode())


def _header_of(sass: str) -> Header:
    """The header of a SASS text, parsed from its header lines alone (fast for long programs)."""
    from warpy.isa.text import parse

    lines = []
    for ln in sass.splitlines():
        if not ln.startswith("."):
            break
        lines.append(ln)
    return parse("\n".join(lines) + "\n").header


Progress = Callable[[str], None]


def make_plan(family: KernelFamily, problem: Any, *, use_disk: bool = True, progress: Optional[Progress] = None,
              keep_program: bool = False, config: Any = None) -> Plan:
    """Plan `problem` of `family` (`warpy.kernels.family`): from the disk cache, or choose + build +
    lift; then assemble (ptxas's cache). ptxas warnings (wgmma serialisation, spills) do not fail
    here: they are on `plan.cubin.warnings`. `config`: this configuration instead of the rule's
    (not cached on disk)."""
    from warpy.lift.ptxas import FAILING_KINDS, assemble

    say = progress or (lambda _msg: None)
    key = problem_key(problem)
    use_disk = use_disk and config is None
    entry = _disk_read(family.name, key) if use_disk else None
    program = None
    if entry is None or keep_program or config is not None:
        from warpy.lift.lifter import lift

        config = config if config is not None else family.choose(problem)
        say(f"building {config.describe()}")
        program = family.build(problem, config)
        kernel = program.kernel()
        say("lifting to PTX")
        entry = {"describe": config.describe(), "sass": str(kernel), "ptx": lift(kernel, problem.arch)}
        from_disk = False
        if use_disk:
            _disk_write(family.name, key, entry)
    else:
        from_disk = True
    say("assembling with ptxas")
    cubin = assemble(entry["ptx"], problem.arch, allow=FAILING_KINDS)
    return Plan(family, problem, entry["describe"], _header_of(entry["sass"]), entry["sass"], entry["ptx"], cubin,
                from_disk, config, program)


def plan_for(family: KernelFamily, problem: Any, config: Optional[str] = None, **kw: Any) -> Plan:
    """`make_plan` of the family's rule's configuration, or of it with `config`'s fields set by
    hand (`family.configure`, text `key=value,...`)."""
    return make_plan(family, problem, config=family.configure(problem, config) if config else None, **kw)


def check_problem(family: KernelFamily, problem: Any, *, config: Any = None, values: bool = False,
                  fault: Optional[str] = None, hb: bool = False, progress: Optional[Progress] = None,
                  coloured: bool = True) -> Report:
    """Build the program `problem` gets (or `config`'s) and run the host checker on it, with the
    family's expectation of its data (`warpy.check.report.check_program`). An expectation may have
    `configured(config)` (the expectation of that configuration's program: the megakernel's queue
    depends on its mode) and `resident` (the SMs of the checker's machine, None for the target's)."""
    from warpy.check.report import check_program

    prog = family.build(problem, config)
    expect = family.expectation(problem)
    configured = getattr(expect, "configured", None)  # an expectation that depends on the configuration
    if config is not None and configured is not None:
        expect = configured(config)
    return check_program(prog, expect=expect, values=values, fault=fault, hb=hb, progress=progress,
                         coloured=coloured, resident=getattr(expect, "resident", None))


__all__ = ["Plan", "make_plan", "plan_for", "check_problem", "cache_root", "source_fingerprint", "problem_key"]
