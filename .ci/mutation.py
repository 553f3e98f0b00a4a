"""Mutation testing with mutmut, one module (group) at a time, on a copy of the working tree.

    python3 .ci/mutation.py desc            # warpy/layout/desc.py against its focused tests
    python3 .ci/mutation.py algebra lift    # several groups, one after the other
    python3 .ci/mutation.py --list          # the groups, their files and test selections
    python3 .ci/mutation.py desc --show     # the surviving mutants' diffs of the last run
    python3 .ci/mutation.py desc --survivors  # after adding tests: re-run only the last run's survivors
    python3 .ci/mutation.py tile --only 'kernels.gemm.x_choose*' --only 'kernels.schedule.*'
                                            # a sample: only the mutants of the functions matching these
                                            # (mutmut's names: module.x_function, module.xǁClassǁmethod)
    python3 .ci/mutation.py algebra --late tests/layout/test_mutants_algebra.py
                                            # late kills: each recorded survivor against these tests
    python3 .ci/mutation.py check-machine --only 'warpy.check.mbarrier.*' --tests tests/check/test_mutants_check.py
                                            # a quick first filter instead of the group's selection
                                            # (then --late the survivors against the slow tests)

Needs mutmut (`pip install mutmut`, part of the `test` extra). Each group runs in its own copy
($WARPY_MUTATION_DIR, default /tmp/warpy-mutation/<group>, made from the working tree's tracked and
untracked-not-ignored files), so the working tree never holds a mutated file and a second run
reuses mutmut's cache for unchanged code. mutmut runs the selected tests once to record which test
calls which function; each mutant then runs only the tests that reached its function. It runs under
`nice -n 10` with two children (the CI machine's cores). The score printed is killed / (killed +
survived + "no tests" + timeout); docs/testing.md records each group's score, time and the
survivors judged equivalent.

mutmut 3 does not mutate a decorated function, and every lift rule (`@rule(...)`) and checker
handler (`@semantics(...)`) is one. So in the group's copy (never in the working tree) each
module-level function whose decorators all register it into a table (`REGISTERING`) is rewritten
as a plain `def` followed by the registration as a call, `name = rule(isa.X)(name)` (stacked
decorators nested in their order): the same tables, and bodies mutmut mutates. The decorator lines
become blank lines and the call takes the first blank line after the function, so line numbers
stay the same where a blank line follows (PEP 8's two). `--keep-decorators` turns it off.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent

# group -> (files mutated, tests selected, extra pytest arguments). The tests are the ones that
# exercise the files directly and run in seconds; the whole suite would kill more mutants but cost
# hours a group on 2 cores (the lift group leaves out the tests that run ptxas on whole programs).
GROUPS: dict[str, tuple[list[str], list[str], list[str]]] = {
    "desc": (["warpy/layout/desc.py"], ["tests/desc"], []),
    # the algebra's properties and goldens (tests/layout whole takes 10 minutes of CPU under mutmut's
    # tracing; test_layout_hygiene's mypy run cannot type-check mutmut's trampolines)
    "algebra": (["warpy/layout/algebra.py"],
                ["tests/layout/test_layout_algebra_properties.py", "tests/layout/test_layout_golden.py",
                 "tests/layout/test_mutants_algebra.py"], []),
    "lift": (
        ["warpy/lift/families/*"],
        ["tests/lift/test_lift.py", "tests/lift/test_lift_semantics.py", "tests/lift/test_lift_flags.py",
         "tests/lift/test_meaning.py", "tests/lift/test_mutants_lift.py"],
        ["-k", "not assembles and not probes_show and not coloured_form and not missing_opcode"],
    ),
    # the kernel families are imported as warpy.kernels.* (warpy/kernels links to kernels/): their
    # group mutates a real copy at warpy/kernels, so the mutants' module names are the ones the
    # tests import (mutated through the link's target, kernels.gemm, no test reaches a mutant)
    "tile": (
        ["warpy/kernels/gemm.py", "warpy/kernels/schedule.py"],
        ["tests/kernels/test_configure.py", "tests/kernels/test_schedule.py", "tests/kernels/test_tile_rule.py",
         "tests/lift/test_meaning.py", "tests/kernels/test_mutants_tile.py", "tests/kernels/test_mutants_tile_problem.py",
         "tests/kernels/test_mutants_tile_expect.py", "tests/kernels/test_mutants_tile_model.py",
         "tests/kernels/test_mutants_tile_rule.py"],
        [],
    ),
    # the checker: the corpus (a buggy and a correct kernel for every documented check) is its net,
    # with the tests that kill its survivors; tests/check/test_check.py (whole GEMMs, faults, options)
    # would double each survivor's cost (~150 s a survivor on 2 cores) and is left out
    "check-machine": (
        ["warpy/check/machine.py", "warpy/check/mbarrier.py", "warpy/check/happens_before.py", "warpy/check/flags.py",
         "warpy/check/obligations.py", "warpy/check/global_memory.py", "warpy/check/places.py"],
        ["tests/check/test_corpus.py", "tests/check/test_mutants_check.py", "tests/check/test_mutants_check_machine.py",
         "tests/check/test_mutants_check_machine_flags.py", "tests/check/test_mutants_check_machine_hb.py"],
        [],
    ),
    "check-families": (
        ["warpy/check/families/*"],
        ["tests/check/test_corpus.py", "tests/check/test_mutants_check.py", "tests/check/test_mutants_families.py",
         "tests/check/test_mutants_tma.py"],
        [],
    ),
}


# the decorators that register the function they decorate into a table (each is the `register`
# method of a warpy.isa.registry.Registry: `rule` of LIFT_RULES, `semantics` of SEMANTICS);
# tests/ci/test_mutation_script.py checks that every other decorator the groups' files use is one
# that does not register (NOT_REGISTERING), so a new registering decorator cannot go unnoticed
REGISTERING = frozenset({"rule", "semantics"})
NOT_REGISTERING = frozenset({"property", "staticmethod", "classmethod", "overload", "attrs.frozen",
                             "attrs.define", "contextlib.contextmanager", "functools.cache"})


def decorator_name(d: ast.expr) -> str:
    """`rule` for `@rule(...)`, `attrs.frozen` for `@attrs.frozen`: the decorator's dotted name."""
    if isinstance(d, ast.Call):
        d = d.func
    parts: list[str] = []
    while isinstance(d, ast.Attribute):
        parts.append(d.attr)
        d = d.value
    if isinstance(d, ast.Name):
        parts.append(d.id)
        return ".".join(reversed(parts))
    return ast.unparse(d)


def undecorate(source: str, registering: frozenset[str] = REGISTERING) -> str:
    """`source` with each module-level function decorated only by registering decorators rewritten
    as an undecorated `def` followed by `name = d1(d2(name))` (d1 the outermost decorator: the
    order Python applies them). A function with any other decorator is left as it is."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, int, str]] = []  # (first decorator line, def line, end line, registration)
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not node.decorator_list:
            continue
        if not all(decorator_name(d) in registering for d in node.decorator_list):
            continue
        call = node.name
        for d in reversed(node.decorator_list):
            call = f"{ast.unparse(d)}({call})"
        first = min(d.lineno for d in node.decorator_list)
        assert node.end_lineno is not None
        edits.append((first, node.lineno, node.end_lineno, f"{node.name} = {call}"))
    for first, def_line, end, reg in reversed(edits):  # bottom up: the earlier edits' line numbers hold
        nl = "\r\n" if lines[end - 1].endswith("\r\n") else "\n"
        if end < len(lines) and not lines[end].strip():
            lines[end] = reg + nl  # the blank line after the function: no line moves
        else:
            if not lines[end - 1].endswith(("\n", "\r")):
                lines[end - 1] += nl
            lines.insert(end, reg + nl)
        for k in range(first - 1, def_line - 1):  # the decorator lines (and comments among them)
            lines[k] = "\n"
    out = "".join(lines)
    ast.parse(out)  # a rewrite that does not parse is a bug here, not a mutant
    return out


def _mutated(group: str, rel: str) -> bool:
    return rel.endswith(".py") and any(fnmatch.fnmatch(rel, pat) for pat in GROUPS[group][0])


def _real_kernels(group: str) -> bool:
    return any(m.startswith("warpy/kernels/") for m in GROUPS[group][0])


def _put(src: Path, dst: Path, text: Optional[bytes]) -> None:
    """dst made a copy of src, or `text` where given; untouched when it already holds that (it then
    keeps its mtime, so mutmut's cache stays valid)."""
    want = src.read_bytes() if text is None else text
    if dst.exists() and dst.read_bytes() == want:
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    if text is None:
        shutil.copy2(src, dst)
    else:
        dst.write_bytes(text)


def _copy_tree(dest: Path, real_kernels: bool = False, group: Optional[str] = None) -> None:
    """The working tree's tracked and untracked-not-ignored files copied to dest; with `group`, that
    group's mutated files undecorated (`undecorate`)."""
    def text(rel: str, src: Path) -> Optional[bytes]:
        if group is None or not _mutated(group, rel):
            return None
        return undecorate(src.read_text()).encode()

    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout.decode().split("\0")
    for rel in files:
        if not rel:
            continue
        src = ROOT / rel
        dst = dest / rel
        if real_kernels and rel == "warpy/kernels":
            continue  # copied as files below
        if src.is_symlink():
            if not dst.is_symlink():
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.symlink_to(os.readlink(src))
            continue
        if not src.is_file():
            continue
        _put(src, dst, text(rel, src))
    if real_kernels:
        for rel in files:
            if rel.startswith("kernels/") and (ROOT / rel).is_file() and not (ROOT / rel).is_symlink():
                _put(ROOT / rel, dest / "warpy" / rel, text("warpy/" + rel, ROOT / rel))


def _configure(dest: Path, group: str, tests_override: list[str] | None = None) -> None:
    mutate, tests, extra = GROUPS[group]
    if tests_override:
        tests, extra = tests_override, []
    text = (ROOT / "pyproject.toml").read_text()
    text = text.split("\n[tool.mutmut]")[0]
    sources = ["warpy", "kernels"]  # warpy/kernels is a link to kernels/: made by hand below
    tests = [t for t in tests if (dest / t.split("::")[0]).exists()]  # a test id keeps its file's check
    cfg = [
        "",
        "[tool.mutmut]",
        f"source_paths = {json.dumps(sources)}",
        f"only_mutate = {json.dumps(mutate)}",
        'also_copy = ["docs", "README.md", "bootstrap.py"]',
        f"pytest_add_cli_args_test_selection = {json.dumps(tests + extra)}",
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-x", "-q"]',
        "timeout_multiplier = 15.0",  # mutmut's default: a loaded machine is slow, not looping
        "",
    ]
    (dest / "pyproject.toml").write_text(text + "\n".join(cfg))
    link = dest / "mutants" / "warpy" / "kernels"  # mutmut copies files, not the link
    if not _real_kernels(group) and not link.is_symlink():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to("../kernels")


def _results(dest: Path) -> dict[str, list[str]]:
    out = subprocess.run(
        [sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=dest, capture_output=True, text=True
    ).stdout
    by: dict[str, list[str]] = {}
    for line in out.splitlines():
        if ":" not in line:
            continue
        name, status = (s.strip() for s in line.rsplit(":", 1))
        by.setdefault(status, []).append(name)
    return by


def run_group(group: str, show: bool, survivors: bool = False, only: list[str] | None = None,
              tests: list[str] | None = None, keep_decorators: bool = False) -> None:
    dest = Path(os.environ.get("WARPY_MUTATION_DIR", "/tmp/warpy-mutation")) / group
    dest.mkdir(parents=True, exist_ok=True)
    if not show:
        if survivors:
            last = _results(dest)
            again = set(last.get("survived", []) + last.get("no tests", []) + last.get("timeout", []))
            # mutmut re-runs the mutants without a result: forget these ones' (naming them on the
            # command line instead makes mutmut pass test ids that pytest cannot parse back)
            for meta in (dest / "mutants").rglob("*.py.meta"):
                data = json.loads(meta.read_text())
                codes = data["exit_code_by_key"]
                for name in again & set(codes):
                    codes[name] = None
                meta.write_text(json.dumps(data))
        # the recorded test-to-function map is made again from the whole selection: mutmut's own
        # update, which traces only the tests added since, passes pytest ids it cannot run
        # (BadTestExecutionCommandsException on tests/lift/test_mutants_lift.py's ids)
        (dest / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
        _copy_tree(dest, _real_kernels(group), None if keep_decorators else group)
        _configure(dest, group, tests)
        t0 = time.monotonic()
        # --only: mutmut runs just the mutants matching the patterns (fnmatch on their names); one
        # already judged is judged again
        subprocess.run(["nice", "-n", "10", sys.executable, "-m", "mutmut", "run", "--max-children", "2",
                        *[pat if pat.endswith("*") else pat + "*" for pat in only or []]],
                       cwd=dest, env=dict(os.environ, HYPOTHESIS_PROFILE="mutation"))
        took = time.monotonic() - t0
    by = _results(dest)
    if only:  # the score of the sample only
        by = {k: [n for n in v if any(fnmatch.fnmatch(n, pat if pat.endswith("*") else pat + "*") for pat in only)]
              for k, v in by.items()}
    killed = len(by.get("killed", []))
    survived = by.get("survived", []) + by.get("no tests", [])
    timeouts = by.get("timeout", [])
    total = killed + len(survived) + len(timeouts)  # a timeout counts as killed only once re-run clean
    if show:
        for name in survived:
            print(subprocess.run([sys.executable, "-m", "mutmut", "show", name], cwd=dest,
                                 capture_output=True, text=True).stdout)
    score = 100.0 * killed / total if total else 0.0
    print(f"{group}: {killed}/{total} killed ({score:.1f}%)" + ("" if show else f" in {took:.0f} s"),
          {k: len(v) for k, v in by.items()})
    for name in survived:
        print("  survived:", name)
    for name in timeouts:
        print("  timeout:", name)


LATE_LIMIT = 120  # seconds a mutant's tests may run in --late (they take seconds unmutated)


def late_kills(group: str, tests: list[str], only: list[str] | None, keep_decorators: bool = False) -> None:
    """Each survivor of the group's last run ("survived" or "no tests", within --only) run against
    `tests` in the group's mutants/ folder (mutmut's trampolines pick the mutant named by
    MUTANT_UNDER_TEST): a mutant these tests fail is a late kill. Quicker than a mutmut re-run, which
    first traces the whole selection again; the group's score is then (killed + late kills) / checked."""
    dest = Path(os.environ.get("WARPY_MUTATION_DIR", "/tmp/warpy-mutation")) / group
    _copy_tree(dest, _real_kernels(group), None if keep_decorators else group)
    _configure(dest, group)
    by = _results(dest)
    names = by.get("survived", []) + by.get("no tests", [])
    if only:
        names = [n for n in names if any(fnmatch.fnmatch(n, pat if pat.endswith("*") else pat + "*") for pat in only)]
    if not names:
        sys.exit(f"mutation: no survivors of {group} recorded" + (" matching --only" if only else ""))
    work = dest / "mutants"
    for rel in tests:  # the tests as they are now (mutmut copied the tests of its last run)
        src = ROOT / rel.split("::")[0]
        files = [src] if src.is_file() else sorted(src.rglob("*.py"))
        for f in files:
            (work / f.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, work / f.relative_to(ROOT))
    # one process for every mutant (pytest.main per mutant, the mutant named in the environment the
    # trampolines read at each call): no interpreter start and import per mutant; the library's process
    # memos are emptied before each (`warpy.memo.forget_all`)
    # a mutant whose tests run past LATE_LIMIT seconds (a wait loop no longer recognised spins until the
    # scheduler's step limit) is interrupted (pytest's exit 2) and listed as a timeout
    driver = (
        "import json, os, signal, sys, pytest\n"
        "names, tests, limit = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])\n"
        "def stop(*_):\n"
        "    raise KeyboardInterrupt\n"
        "signal.signal(signal.SIGALRM, stop)\n"
        "args = ['-x', '-q', '-p', 'no:cacheprovider', '-p', 'no:randomly', '--no-header', '--no-summary', *tests]\n"
        "import warpy.memo\n"
        "for name in [''] + names:\n"
        "    os.environ['MUTANT_UNDER_TEST'] = name\n"
        "    warpy.memo.forget_all()  # (what the previous run remembered is not this mutant's)\n"
        "    signal.alarm(limit if name else 0)\n"
        "    rc = int(pytest.main(args))\n"
        "    signal.alarm(0)\n"
        "    print('@@', rc, name or '(none)', flush=True)\n"
        "    if not name and rc != 0:\n"
        "        sys.exit('the tests fail without a mutant')\n"
    )
    env = dict(os.environ, HYPOTHESIS_PROFILE="mutation", WARPY_XDIST="0")
    t0 = time.monotonic()
    # each verdict printed as it comes (a long run shows its progress)
    r = subprocess.Popen(["nice", "-n", "10", sys.executable, "-c", driver, json.dumps(names), json.dumps(tests),
                          str(LATE_LIMIT)],
                         cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed = []
    tail: list[str] = []  # the last lines besides the verdicts (the error, if the driver fails)
    assert r.stdout is not None
    for line in r.stdout:
        if not line.startswith("@@ "):
            tail = (tail + [line])[-40:]
        elif not line.rstrip().endswith("(none)"):
            _, rc, name = line.rstrip().split(" ", 2)
            if rc == "1":  # a test failed (2-5: interrupted, usage, collection: not a kill)
                killed.append(name)
            what = "killed" if rc == "1" else "timeout" if rc == "2" else f"survives (exit {rc})"
            print(f"  {what}: {name}", flush=True)
    if r.wait() != 0:
        sys.exit(f"mutation: {''.join(tail).strip()[-2000:]}")
    print(f"{group}: {len(killed)} of {len(names)} survivors killed by {' '.join(tests)} in {time.monotonic() - t0:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("groups", nargs="*")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--show", action="store_true", help="print the last run's survivors as diffs")
    ap.add_argument("--survivors", action="store_true",
                    help="re-run only the last run's survivors, timeouts and unchecked mutants against the current tests")
    ap.add_argument("--only", action="append", metavar="PATTERN",
                    help="run (and score) only the mutants whose names match PATTERN (repeatable), e.g. "
                         "'warpy.layout.algebra.x_composition*'")
    ap.add_argument("--tests", nargs="+", metavar="TEST",
                    help="run the mutants against these tests instead of the group's selection (a quick first "
                         "filter: then --late the survivors against the whole selection)")
    ap.add_argument("--late", nargs="+", metavar="TEST",
                    help="judge the last run's survivors again against these test files (no mutmut re-run)")
    ap.add_argument("--keep-decorators", action="store_true",
                    help="mutate the files as they are: the functions registered by a decorator (lift rules, "
                         "checker handlers) are then not mutated (mutmut 3 skips decorated functions)")
    a = ap.parse_args()
    if a.list or not a.groups:
        for g, (m, t, x) in GROUPS.items():
            print(f"{g}: mutate {' '.join(m)}; tests {' '.join(t + x)}")
        return
    for g in a.groups:
        if g not in GROUPS:
            sys.exit(f"mutation: no group {g!r}; groups: {', '.join(GROUPS)}")
    for g in a.groups:
        if a.late:
            late_kills(g, a.late, a.only, a.keep_decorators)
        else:
            run_group(g, a.show, a.survivors, a.only, a.tests, a.keep_decorators)


if __name__ == "__main__":
    main()
