"""Scratch memory on an sm_90 GPU: a kernel counting its launches in scratch (tests/runtime/
scratch_counter.py) finds zeros on the first launch on a stream, then what the previous launch on
that stream left; another stream has its own memory. Skipped without a GPU (tests/gpu/conftest.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from warpy import runtime as rt
from warpy.runtime.bind import FastLaunch, alloc_scratch, bind_params, free_scratch, run_header

_spec = importlib.util.spec_from_file_location(
    "scratch_counter_gpu", Path(__file__).resolve().parents[1] / "runtime" / "scratch_counter.py")
assert _spec is not None and _spec.loader is not None
sc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sc)


@pytest.fixture(scope="module")
def loaded() -> tuple[Any, Any]:
    from warpy.lift.lifter import lift
    from warpy.lift.ptxas import assemble

    k = sc.scratch_counter("sm_90a").kernel()
    return rt.load(assemble(lift(k, "sm_90a"), "sm_90a")).kernel(k.header.kernel), k.header


def test_scratch_is_zero_then_kept_per_stream(loaded: tuple[Any, Any]) -> None:
    kernel, header = loaded
    from warpy.runtime.driver import check, cuda

    d = cuda()
    other = check(d.cuStreamCreate(d.CUstream_flags.CU_STREAM_NON_BLOCKING.value), "cuStreamCreate")
    out = rt.alloc(4 * sc.WORDS)
    fast = FastLaunch(kernel, header)
    try:
        for stream, want in ((None, 0), (None, 1), (None, 2), (int(other), 0), (int(other), 1), (None, 3)):
            out.fill(0xFF)
            fast(("out", out.ptr), lambda scratch: bind_params(header, {"out": out}, scratch=scratch), stream)
            rt.synchronize(None if stream is None else other, timeout=20)
            got = out.download(np.uint32)
            assert (got == want).all(), f"stream {stream}: found {got[:4]}..., want {want}"
    finally:
        rt.synchronize_context()
        fast.scratch.free()
        out.free()
        d.cuStreamDestroy(other)


def test_alloc_scratch_then_run_header(loaded: tuple[Any, Any]) -> None:
    kernel, header = loaded
    out = rt.alloc(4 * sc.WORDS)
    scratch = alloc_scratch(header)
    try:
        for want in range(3):
            run_header(kernel, header, bind_params(header, {"out": out}, scratch=scratch), timeout=20)
            assert (out.download(np.uint32) == want).all()
        assert (scratch["epochs"].download(np.uint32) == 3).all()
    finally:
        free_scratch(scratch)
        out.free()
