"""warpy: a Python kernel DSL for NVIDIA tensor-core GPUs.

This module imports nothing else of warpy eagerly, so that ``import warpy.layout``
stays free of CUDA and of the rest of the package.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # `warpy.gemm` pulls in the runtime (and CUDA) only when asked for.
    if name == "gemm":
        from warpy.runtime.gemm import gemm

        return gemm
    raise AttributeError(f"module 'warpy' has no attribute {name!r}")
