"""The kernel-family seam: what a family of programs (the GEMMs, the megakernel, attention...)
gives the rest of warpy, so that the checker, the planner, the caches and the command line work
with any family by its name and none of them knows a family's insides.

A family is an object with:

- `name`: the word the command line takes (`warpy check gemm ...`, `warpy bench gemm`);
- `problem(dims, arch=..., **options)`: a problem from the command line's words (sizes, names such
  as the megakernel's graph, and options such as `dtype` and `out_dtype`), refused in one line when
  it cannot run;
- `choose(problem)`: the configuration the family's rule picks (an attrs record with `describe()`);
- `configure(problem, overrides)`: that configuration with fields set by hand (`--config k=v,...`);
- `build(problem, config=None)`: the `warpy.isa.Program`;
- `bind(header, problem, memory, scratch=..., encode=...)`: the kernel's parameters, in the
  header's order, from device memory given by role (`a`, `b`, `c` for a GEMM);
- `expectation(problem)`: what the checker needs to compute and judge its data
  (`warpy.check.expect.Expectation`).

`family(name)` finds one; `FAMILY_MODULES` lists where each lives (the module's `FAMILY`).
docs/architecture.md's "add a kernel family" recipe says what a new one touches.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence, Union

import attrs

from warpy.check.expect import Expectation
from warpy.errors import WarpyError
from warpy.isa.program import Program

#: family name -> the module whose `FAMILY` it is
FAMILY_MODULES: dict[str, str] = {"gemm": "warpy.kernels.gemm", "mega": "warpy.kernels.mega",
                                  "attention": "warpy.kernels.attention"}


class Config(Protocol):
    def describe(self) -> str: ...


class KernelFamily(Protocol):
    @property
    def name(self) -> str: ...

    def problem(self, dims: Sequence[int], *, arch: str, **options: Any) -> Any: ...

    def choose(self, problem: Any) -> Config: ...

    def configure(self, problem: Any, overrides: Union[str, Mapping[str, object], None]) -> Config: ...

    def build(self, problem: Any, config: Optional[Config] = None) -> Program: ...

    def bind(self, header: Any, problem: Any, memory: Mapping[str, Any], *, scratch: Any = None,
             encode: Optional[Callable[..., Any]] = None) -> list[Any]: ...

    def expectation(self, problem: Any) -> Expectation: ...


def family(name: str) -> KernelFamily:
    """The family called `name` (one-line error naming the families there are)."""
    mod = FAMILY_MODULES.get(name)
    if mod is None:
        raise WarpyError(f"{name!r} is not a kernel family (families: {', '.join(FAMILY_MODULES)})")
    fam: KernelFamily = importlib.import_module(mod).FAMILY
    return fam


# -- configurations set by hand -------------------------------------------------------------------


def _override_value(text: str) -> Union[int, bool, str]:
    low = text.lower()
    if low in ("true", "false", "yes", "no"):
        return low in ("true", "yes")
    try:
        return int(text, 0)
    except ValueError:
        return text


def parse_overrides(text: str) -> dict[str, object]:
    """`key=value,...` (ints in any base Python reads, true/false/yes/no) as a dict."""
    items: dict[str, object] = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key or not value:
            raise WarpyError(f"configuration {text!r}: {item!r} is not KEY=VALUE")
        items[key.strip()] = _override_value(value.strip())
    return items


def checked_overrides(cfg: Any, overrides: Union[str, Mapping[str, object], None]) -> dict[str, object]:
    """`overrides` (text or a mapping) checked against the fields of the attrs record `cfg`: each
    key a field, each value of the field's type (0/1 accepted for booleans). One-line refusals."""
    items = parse_overrides(overrides) if isinstance(overrides, str) else dict(overrides or {})
    fields = {f.name: f for f in attrs.fields(type(cfg))}
    for key, value in list(items.items()):
        if key not in fields:
            raise WarpyError(f"{type(cfg).__name__} has no field {key!r} (fields: {', '.join(fields)})")
        default = fields[key].default
        want = type(default) if default is not attrs.NOTHING and default is not None else None
        if want is bool and not isinstance(value, bool) and value in (0, 1):
            value = bool(value)
            items[key] = value
        if want is not None and type(value) is not want:
            kind = {"int": "an integer", "bool": "true or false"}.get(want.__name__, want.__name__)
            raise WarpyError(f"{key}={value!r}: {type(cfg).__name__}.{key} takes {kind}")
    return items


__all__ = ["KernelFamily", "Config", "FAMILY_MODULES", "family", "parse_overrides", "checked_overrides"]
