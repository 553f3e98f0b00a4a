"""GPU tests run only where an sm_90 GPU (H100/H200) and a ptxas are present; elsewhere every test
under tests/gpu is skipped with the reason (no driver, no GPU, another architecture, no ptxas).

Only those reasons skip: `warpy.runtime.device()` says "there is no GPU here" with `NoGPU`; any
other error it raises is a bug of the runtime on a GPU machine, and the GPU tests must fail on it,
not skip."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def why_no_sm90() -> str | None:
    from warpy.errors import NoGPU, WarpyError

    try:
        from warpy.runtime import device

        dev = device()
    except NoGPU as e:
        return str(e)
    if dev.compute_capability != (9, 0):
        return f"needs an sm_90 GPU; found {dev.name} ({dev.sm})"
    try:
        from warpy.lift.ptxas import find_ptxas

        find_ptxas()
    except WarpyError as e:
        return str(e)
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [it for it in items if "tests/gpu/" in str(it.path).replace("\\", "/")]
    if not gpu_items:
        return
    reason = why_no_sm90()
    if reason is not None:
        mark = pytest.mark.skip(reason=f"no sm_90 GPU: {reason}")
        for it in gpu_items:
            it.add_marker(mark)
