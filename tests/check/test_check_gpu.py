"""`--values` against the GPU: the C elements the checker computed on the CPU for the simulated
clusters equal what the same program computes on an H200 from the same A and B. Skipped without an
sm_90 GPU (the checker's own agreement with numpy is tested in test_check.py)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from warpy.kernels.gemm import FAMILY as GEMM
from warpy.plan import check_problem
from warpy.kernels.gemm import GemmProblem


@functools.cache
def _why_no_sm90() -> str | None:
    from warpy.errors import NoGPU

    try:
        from warpy.runtime import device

        dev = device()
    except NoGPU as e:  # no driver, no GPU; any other error is a runtime bug on a GPU machine: it fails
        return f"{type(e).__name__}: {e}"
    if dev.compute_capability != (9, 0):
        return f"needs an sm_90 GPU; found {dev.name}"
    return None


@pytest.mark.parametrize("m,n,k", [(256, 256, 128), (1000, 520, 264), (4096, 4096, 512)])
def test_checker_values_match_the_h200(m: int, n: int, k: int) -> None:
    why = _why_no_sm90()
    if why is not None:
        pytest.skip(f"no sm_90 GPU: {why}")
    import warpy

    rep = check_problem(GEMM, GemmProblem(m, n, k, dtype="fp16"), values=True, coloured=False)
    assert rep.ok, rep.text()
    d = rep.data
    a16, b16 = d["a"].astype(np.float16), d["b"].astype(np.float16)
    gpu = np.asarray(warpy.gemm(a16, b16, out_dtype="f32"), dtype=np.float32)  # type: ignore[attr-defined]
    w = d["written"]
    assert w.any()
    assert np.array_equal(gpu[w], d["c"][w])
