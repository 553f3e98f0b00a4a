"""The GPU tests' host side, loaded by CPU tests: a file of tests/gpu as a module of its own, with
tests/gpu on the import path for the helpers those files share (gpu_case), whichever folder the
CPU test runs from."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

GPU_TESTS = Path(__file__).resolve().parent / "gpu"


def gpu_script(filename: str, name: str) -> ModuleType:
    """tests/gpu/`filename` executed as the module `name`."""
    if str(GPU_TESTS) not in sys.path:
        sys.path.insert(0, str(GPU_TESTS))
    spec = importlib.util.spec_from_file_location(name, GPU_TESTS / filename)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
