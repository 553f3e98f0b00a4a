"""A GEMM shape tuned on first use (kernels/gemm_tune.py), without a GPU: the sweep of one shape is
driven by a fake timer, and the tuned table's path stands in for a GPU's.

- a shape the committed table has not measured is tuned once: its candidates (the rule's pick first)
  timed, the row kept in the tuned table, and the rule then runs that row's fastest, in this
  process and (the file) every later one; a plan's key follows the tuned configuration;
- a shape the committed table measured, a problem the sweep does not measure (a fused epilogue,
  8-bit floats), `WARPY_TUNE=0`, no GPU, and a CUDA graph being captured are never tuned;
- two processes tuning in turn keep each other's rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import pytest

from warpy.kernels import gemm_sweep as S
from warpy.kernels import gemm_tune as T
from warpy.kernels.gemm import GemmProblem, choose
from warpy.kernels.gemm_epilogue import parse_words
from warpy.kernels.gemm_sm90 import Sm90Config
from warpy.plan import problem_key

SHAPE = (64, 5120, 5120)  # (not a shape of the committed table)


@pytest.fixture
def tuner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Tuning on, a tuned table at tmp_path as this 'GPU's, no graph capture, and the sweep's timer
    replaced: the last candidate is made the fastest, each call recorded."""
    path = tmp_path / "gemm_tuned_NVIDIA_H200.json"
    monkeypatch.setenv("WARPY_TUNE", "1")
    monkeypatch.setitem(T._path_memo, "path", path)
    monkeypatch.setattr(T, "_capturing", lambda: False)
    calls: list[tuple[tuple[int, int, int], list[Sm90Config]]] = []

    def timer(p: Any, cfgs: Sequence[Sm90Config], entries: Sequence[Any]) -> tuple[Optional[float], list[S.Measured]]:
        calls.append(((p.M, p.N, p.K), list(cfgs)))
        return 20.0, [S.Measured(c, 30.0 - i, "ok") for i, c in enumerate(cfgs)]

    run = S.run_sweep

    def sweep(*a: Any, **kw: Any) -> S.SweepTable:
        assert kw["second_pass"] is False and kw["per_shape"] == T.TUNE_CANDIDATES
        return run(*a, **{**kw, "timer": timer, "workers": 0, "gpu": "NVIDIA H200"})

    monkeypatch.setattr(T, "run_sweep", sweep)
    return {"path": path, "calls": calls}


def test_a_shape_is_tuned_once_and_then_runs_its_fastest(tuner: dict[str, Any]) -> None:
    p = GemmProblem(*SHAPE, out_dtype="bf16")
    rule, key = choose(p), problem_key(p)
    said: list[str] = []
    got = T.ensure_tuned(p, echo=said.append)
    calls = tuner["calls"]
    assert len(calls) == 1 and calls[0][0] == SHAPE and calls[0][1][0] == rule  # the rule's pick among them
    assert got == calls[0][1][-1] and choose(p) == got  # the fastest timed runs from now on
    assert problem_key(p) != key  # a plan built before is not reused for the tuned configuration
    table = S.read_table(tuner["path"])
    assert [r.shape for r in table.rows] == [SHAPE] and table.gpu == "NVIDIA H200"
    assert any("tuning 64x5120x5120" in line and "WARPY_TUNE=0" in line for line in said)
    assert T.ensure_tuned(p) == got and len(calls) == 1  # not again
    T._tables.clear()  # another process: the file
    assert choose(p) == got


def test_a_near_tie_keeps_the_rules_pick(tuner: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the fastest candidate ran within TUNE_MARGIN of the rule's pick, the rule's pick stays."""
    def sweep(shapes: Any, out: str, *a: Any, **kw: Any) -> S.SweepTable:
        p = GemmProblem(*shapes[0], out_dtype="bf16")
        cfgs = S.candidates(p, T.TUNE_CANDIDATES)
        times = [30.0] + [30.0 * (1 - T.TUNE_MARGIN / 2)] * (len(cfgs) - 1)
        t = S.SweepTable((S.SweepRow(shapes[0], "bf16", "bf16", 20.0, tuple(
            S.Measured(c, us, "ok") for c, us in zip(cfgs, times))),), "NVIDIA H200")
        S.write_table(t, out)
        return t

    monkeypatch.setattr(T, "run_sweep", sweep)
    p = GemmProblem(*SHAPE, out_dtype="bf16")
    rule = choose(p)
    assert T.ensure_tuned(p) == rule and choose(p) == rule


def test_another_shape_keeps_the_first_ones_row(tuner: dict[str, Any]) -> None:
    first, second = GemmProblem(*SHAPE, out_dtype="bf16"), GemmProblem(8, 5120, 5120, out_dtype="bf16")
    a, b = T.ensure_tuned(first), T.ensure_tuned(second)
    rows = {r.shape: r for r in S.read_table(tuner["path"]).rows}
    assert set(rows) == {SHAPE, (8, 5120, 5120)} and choose(first) == a and choose(second) == b


@pytest.mark.parametrize("why", ["committed-row", "epilogue", "fp8", "off", "capturing"])
def test_what_is_never_tuned(tuner: dict[str, Any], monkeypatch: pytest.MonkeyPatch, why: str) -> None:
    p = GemmProblem(*SHAPE, out_dtype="bf16")
    if why == "committed-row":
        monkeypatch.setenv("WARPY_GEMM_TABLE", str(S.TABLE_PATH))
        row = S.current_table().rows[0]
        p = GemmProblem(*row.shape, dtype=row.dtype, out_dtype=row.out_dtype)
    elif why == "epilogue":
        p = GemmProblem(*SHAPE, out_dtype="bf16", epilogue=parse_words(["bias=n"]))
    elif why == "fp8":
        p = GemmProblem(*SHAPE, dtype="e4m3", out_dtype="bf16")
    elif why == "off":
        monkeypatch.setenv("WARPY_TUNE", "0")
    elif why == "capturing":
        monkeypatch.setattr(T, "_capturing", lambda: True)
    rule = choose(p)
    assert T.ensure_tuned(p) is None and tuner["calls"] == [] and choose(p) == rule
    assert not tuner["path"].exists()


def test_without_a_gpu_nothing_is_tuned_or_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPY_TUNE", "1")
    monkeypatch.setenv("WARPY_CACHE", str(tmp_path))
    monkeypatch.setattr(T, "_path_memo", {})
    p = GemmProblem(*SHAPE, out_dtype="bf16")
    assert T.tuned_table().rows == () and T.ensure_tuned(p) is None  # (this machine has no GPU)
    assert list(tmp_path.glob("gemm_tuned_*")) == []


def test_each_gpu_model_has_its_own_table() -> None:
    a, b = T.tuned_path("NVIDIA H200"), T.tuned_path("NVIDIA H100 80GB HBM3")
    assert a is not None and b is not None and a != b and a.parent == b.parent
    assert a.name == "gemm_tuned_NVIDIA_H200.json" and T.tuned_path("") is None


def test_a_sweep_times_the_rules_pick_first_not_the_tuned_one(tuner: dict[str, Any]) -> None:
    p = GemmProblem(*SHAPE, out_dtype="bf16")
    rule = choose(p)
    got = T.ensure_tuned(p)
    assert got is not None and got != rule and choose(p) == got
    seen: list[Sm90Config] = []

    def timer(q: Any, cfgs: Sequence[Sm90Config], entries: Sequence[Any]) -> tuple[Optional[float], list[S.Measured]]:
        seen.append(cfgs[0])
        return 20.0, [S.Measured(c, 10.0, "ok") for c in cfgs]

    S.run_sweep([SHAPE], None, per_shape=2, timer=timer, workers=0, echo=lambda _l: None, gpu="x", second_pass=False)
    assert seen == [rule] and choose(p) == got  # (and after the sweep, the tuned one again)


def test_a_shape_where_no_candidate_ran_is_not_tuned_again(tuner: dict[str, Any],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def sweep(shapes: Any, out: str, *a: Any, **kw: Any) -> S.SweepTable:
        calls.append(1)
        p = GemmProblem(*shapes[0], out_dtype="bf16")
        t = S.SweepTable((S.SweepRow(shapes[0], "bf16", "bf16", 20.0, tuple(
            S.Measured(c, 0.0, "error: build failed") for c in S.candidates(p, 3))),), "NVIDIA H200")
        S.write_table(t, out)
        return t

    monkeypatch.setattr(T, "run_sweep", sweep)
    p = GemmProblem(*SHAPE, out_dtype="bf16")
    rule = choose(p)
    assert T.ensure_tuned(p) is None and T.ensure_tuned(p) is None and calls == [1] and choose(p) == rule


def test_builds_run_in_this_process_where_the_main_program_is_no_file(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    main = types.ModuleType("__main__")
    main.__file__ = "<stdin>"
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert T._workers() == 0
    main.__file__ = __file__
    assert T._workers() == T.TUNE_WORKERS
