"""`.ci/mutation.py`'s rewrite of registering decorators (`undecorate`): in a group's copy, a lift
rule or checker handler becomes a plain `def` plus its registration as a call, so mutmut 3 (which
skips decorated functions) mutates its body. The rewrite must register exactly what the decorators
did: the same records, to functions of the same names, in the sample and in every real family."""

from __future__ import annotations

import ast
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from warpy.isa.families import alu as isa_alu
from warpy.isa.registry import Registry

ROOT = Path(__file__).resolve().parents[2]


def _load_script() -> Any:
    spec = importlib.util.spec_from_file_location("warpy_ci_mutation", ROOT / ".ci" / "mutation.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


M = _load_script()

SAMPLE = '''\
from warpy.isa.families import alu as isa
ORDER = []


def note(tag):
    def deco(fn):
        ORDER.append((tag, fn.__name__))
        return fn
    return deco


@rule(isa.IADD3, isa.UIADD3)
def _add3(c, i, rest):
    return "add3"


@rule(isa.LOP3)
@rule(
    isa.ULOP3,
)
# a comment among the decorators
def _lop3(c, i, rest):
    return "lop3"


@note("kept")
def _other(c, i, rest):
    return "other"


@rule(isa.IMAD)
@note("inner")
def _mixed(c, i, rest):
    return "mixed"


class K:
    @staticmethod
    def s():
        return 1
@rule(isa.SHF)
def _last(c, i, rest): return "last"'''


def _registered(source: str) -> tuple[dict[str, str], list[tuple[str, str]], dict[str, Any]]:
    reg: Registry[Any] = Registry("sample rule")
    ns: dict[str, Any] = {"rule": reg.register, "__name__": "sample"}
    exec(compile(source, "sample.py", "exec"), ns)
    return {rec.key: fn.__name__ for rec, fn in reg.items()}, ns["ORDER"], ns


def test_the_sample_registers_the_same_functions_under_the_same_records() -> None:
    out = M.undecorate(SAMPLE)
    before, order_before, _ = _registered(SAMPLE)
    after, order_after, ns = _registered(out)
    assert after == before
    assert before == {isa_alu.IADD3.key: "_add3", isa_alu.UIADD3.key: "_add3", isa_alu.LOP3.key: "_lop3",
                      isa_alu.ULOP3.key: "_lop3", isa_alu.IMAD.key: "_mixed", isa_alu.SHF.key: "_last"}
    assert order_after == order_before == [("kept", "_other"), ("inner", "_mixed")]
    assert ns["_lop3"](None, None, ()) == "lop3" and ns["_last"](None, None, ()) == "last"
    tree = ast.parse(out)
    decorated = {n.name: [M.decorator_name(d) for d in n.decorator_list]
                 for n in tree.body if isinstance(n, ast.FunctionDef)}
    # only the functions decorated by registering decorators alone lose them
    assert decorated == {"note": [], "_add3": [], "_lop3": [], "_other": ["note"], "_mixed": ["rule", "note"],
                         "_last": []}
    # the stacked decorators nest in Python's order (the outermost applied last)
    assert "_lop3 = rule(isa.LOP3)(rule(isa.ULOP3)(_lop3))\n" in out
    # every def stays on its line: the calls take the blank lines after the functions; only the
    # last function, with no line after it, adds one
    lines_in, lines_out = SAMPLE.splitlines(), out.splitlines()
    assert len(lines_out) == len(lines_in) + 1
    for k, line in enumerate(lines_in):
        if line.lstrip().startswith("def "):
            assert lines_out[k] == line
    assert lines_out[-1] == "_last = rule(isa.SHF)(_last)"


def test_a_source_without_registering_decorators_is_unchanged() -> None:
    src = "import attrs\n\n\n@attrs.frozen\nclass A:\n    x: int\n\n\ndef f():\n    return 1\n"
    assert M.undecorate(src) == src


FAMILIES = [("warpy.lift.families", "warpy.lift.families._ctx", "LIFT_RULES", ("rule",)),
            ("warpy.check.families", "warpy.check.semantics", "SEMANTICS", ("semantics",))]


@pytest.mark.parametrize("package, home, table, names", FAMILIES, ids=["lift", "check"])
def test_the_real_families_rewritten_register_the_same_tables(
        package: str, home: str, table: str, names: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = importlib.import_module(package)
    real: Registry[Any] = getattr(pkg, table)
    fresh: Registry[Any] = Registry(real.what)
    # the rewritten modules run against a fresh table: `from home import rule` then gets its register
    monkeypatch.setattr(sys.modules[home], table, fresh)
    for name in names:
        monkeypatch.setattr(sys.modules[home], name, fresh.register)
    rewritten = 0
    for mod in pkg.MODULES:
        path = Path(mod.__file__)
        src = path.read_text()
        out = M.undecorate(src)
        rewritten += out != src
        assert not any(M.decorator_name(d) in M.REGISTERING for n in ast.walk(ast.parse(out))
                       if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for d in n.decorator_list)
        copy = types.ModuleType(mod.__name__)
        copy.__file__ = str(path)
        exec(compile(out, str(path), "exec"), copy.__dict__)
    assert rewritten >= 6  # (the families with rules were found and rewritten)
    assert len(fresh) == len(real) > 50
    for rec, fn in real.items():
        got = fresh.get(rec)
        assert got is not None, f"{rec.key} not registered by the rewritten modules"
        assert (got.__module__, got.__qualname__) == (fn.__module__, fn.__qualname__), rec.key


def _group_files() -> list[Path]:
    out: list[Path] = []
    for pats, _, _ in M.GROUPS.values():
        for pat in pats:
            pat = pat.replace("warpy/kernels/", "kernels/")  # the tile group's real copy of kernels/
            out += [p for p in sorted(ROOT.glob(pat)) if p.suffix == ".py"]
    return out


def test_every_decorator_in_the_groups_files_is_known_to_register_or_not() -> None:
    """A new registering decorator (its function outside every score) fails here until it is named
    in REGISTERING; each one named is the `register` of a Registry."""
    files = _group_files()
    assert len(files) > 20
    seen = {M.decorator_name(d) for f in files for n in ast.walk(ast.parse(f.read_text()))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for d in n.decorator_list}
    assert seen <= M.REGISTERING | M.NOT_REGISTERING, seen - (M.REGISTERING | M.NOT_REGISTERING)
    assert M.REGISTERING <= seen
    # each registering name, as the groups' files import it, is a Registry's `register`
    homes = {a.name: node.module for f in files for node in ast.walk(ast.parse(f.read_text()))
             if isinstance(node, ast.ImportFrom) and node.module for a in node.names if a.name in M.REGISTERING}
    assert set(homes) == M.REGISTERING
    for name, home in homes.items():
        fn = getattr(importlib.import_module(home), name)
        assert isinstance(fn.__self__, Registry) and fn.__func__ is Registry.register, (name, home)
