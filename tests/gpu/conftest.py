"""GPU tests run only where an sm_90 GPU (H100/H200) and a ptxas are present; elsewhere every test
under tests/gpu is skipped with the reason (no driver, no GPU, another architecture, no ptxas).

Only those reasons skip: `warpy.runtime.device()` says "there is no GPU here" with `NoGPU`; any
other error it raises is a bug of the runtime on a GPU machine, and every GPU test fails on it with
that error's line, not skips (tests/runtime/test_gpu_conftest.py proves it with a broken device())."""

from __future__ import annotations

import functools

import pytest


@functools.cache
def why_no_sm90() -> str | None:
    """The reason to skip (None: run them). Raises whatever `device()` raises other than NoGPU."""
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


def _is_gpu_test(item: pytest.Item) -> bool:
    return "tests/gpu/" in str(item.path).replace("\\", "/")


_BROKEN = pytest.StashKey[str]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [it for it in items if _is_gpu_test(it)]
    if not gpu_items:
        return
    try:
        reason = why_no_sm90()
    except Exception as e:  # not NoGPU: the runtime is broken on a machine that has a GPU
        for it in gpu_items:
            it.stash[_BROKEN] = f"warpy.runtime.device() failed (not NoGPU): {type(e).__name__}: {e}"
        return
    if reason is not None:
        mark = pytest.mark.skip(reason=f"no sm_90 GPU: {reason}")
        for it in gpu_items:
            it.add_marker(mark)


def pytest_runtest_setup(item: pytest.Item) -> None:
    broken = item.stash.get(_BROKEN, None)
    if broken is not None:
        pytest.fail(broken, pytrace=False)
