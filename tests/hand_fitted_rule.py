"""An autouse fixture for the conftest of a test folder whose GEMM rule is the hand-fitted model
(tests/kernels, tests/host): `WARPY_GEMM_TABLE=none` around every module, so the literal tiles,
splits and pinned program texts there do not move when the H200's sweep table
(kernels/data/gemm_sweep_h200.json) is filled or refreshed. What the rule makes of a table, the
committed one included, is tested in tests/kernels/test_gemm_sweep.py, which names its tables
itself."""

from __future__ import annotations

from typing import Iterator

import pytest


@pytest.fixture(autouse=True, scope="module")
def _gemm_rule_without_the_sweep_table() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WARPY_GEMM_TABLE", "none")
        yield
