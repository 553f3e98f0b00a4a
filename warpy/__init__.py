"""warpy: a Python kernel DSL for NVIDIA tensor-core GPUs.

This module imports nothing else of warpy eagerly, so that ``import warpy.layout``
stays free of CUDA and of the rest of the package.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # lazy: `warpy.gemm` (and `mm`, `bmm`) imports numpy and the GEMM machinery on first use only, so that
    # `import warpy` (and `import warpy.layout`) stay free of it
    if name in ("gemm", "mm", "bmm"):
        import warpy.matmul as matmul

        fn = getattr(matmul, name)
        globals()[name] = fn  # later lookups skip this hook
        return fn
    if name == "attention":
        # the module warpy/attention.py itself, which is callable: `warpy.attention(q, k, v)` calls its
        # `attention`, and importing the module (which makes it this attribute) changes nothing
        import importlib

        mod = importlib.import_module("warpy.attention")
        globals()["attention"] = mod
        return mod
    raise AttributeError(f"module 'warpy' has no attribute {name!r}")


def __dir__() -> list[str]:
    # `gemm`, `mm`, `bmm` and `attention` are loaded lazily (above) but listed, so that dir(warpy) and completion show them
    return sorted((set(globals()) - {"Any", "annotations"}) | {"gemm", "mm", "bmm", "attention"})
