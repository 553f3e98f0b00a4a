"""warpy: a Python kernel DSL for NVIDIA tensor-core GPUs.

This module imports nothing else of warpy eagerly, so that ``import warpy.layout``
stays free of CUDA and of the rest of the package.
"""

from __future__ import annotations

__version__ = "0.1.0"
