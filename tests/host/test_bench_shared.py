"""What warpy/bench.py does for every family's jobs, without a GPU: the interleaved rounds and their
medians, a static row that could not be built, the static table, the one-line refusals of a job's
arguments, and the attention job's report and run branch through them (the GEMM job's:
tests/host/test_bench_host.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

import warpy.bench as B
import warpy.plan as plan
from warpy.errors import WarpyError
from warpy.kernels import attention_bench as AB


def test_interleaved_rounds_alternate_the_sides_and_take_medians(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    samples = {"ours": iter([[1.0, 9.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]]),
               "a": iter([[10.0], [11.0], [12.0], [13.0]]), "b": iter([[5.0], [6.0], [7.0], [100.0]])}

    def fake_times(fn: Callable[[int], None], stream: Any, iters: int) -> list[float]:
        assert (stream, iters) == ("s", 7)
        order.append(fn.__name__)
        return next(samples[fn.__name__])

    def ours(_i: int) -> None: ...
    def a(_i: int) -> None: ...
    def b(_i: int) -> None: ...

    monkeypatch.setattr(B, "gpu_times_us", fake_times)
    mine, theirs = B.interleaved(ours, {"a": a, "b": b}, "s", 7)
    assert order == ["ours", "a", "b", "a", "b", "ours"] * 2
    assert mine == 3.0 and theirs == {"a": 11.5, "b": 6.5}


def test_a_static_row_that_cannot_be_built_says_why_in_its_last_cell() -> None:
    def refuse() -> Any:
        raise WarpyError("D=96: no")

    row = B.static_row_of("1x1x64x96", refuse)
    assert row == ["1x1x64x96", "", "", "", "", "", "", "not built: D=96: no"]
    table = B.static_table([row, ["s", "168", "1024", "0", "300", "ok", "-", "a program"]])
    assert table.splitlines()[0].split() == ["shape", "registers", "smem", "bytes", "spill", "bytes", "loop", "instrs",
                                             "opcodes", "ptxas", "warnings"]
    assert table.endswith("1x1x64x96  not built: D=96: no\ns          a program\n")


@pytest.mark.parametrize("emit,output,iters,match", [
    ("elf", None, 1, "--emit 'elf' is not one of sass, ptx, cubin"), ("cubin", None, 1, "--emit cubin needs -o PATH"),
    (None, "x.ptx", 1, "-o PATH goes with --emit"), (None, None, 0, "--iters 0 must be at least 1")])
def test_a_jobs_arguments_are_refused_in_one_line(emit: str | None, output: str | None, iters: int, match: str) -> None:
    with pytest.raises(WarpyError, match=match) as e:
        B.check_emit_args(emit, output, iters)
    assert "\n" not in str(e.value)


def test_the_attention_job_reports_runs_checks_and_times_through_the_shared_path(monkeypatch: pytest.MonkeyPatch,
                                                                                 tmp_path: Path) -> None:
    monkeypatch.setattr(plan, "cache_root", lambda: tmp_path)
    prob = AB.problem(1, 2, 64, 64)
    lines: list[str] = []
    monkeypatch.setattr(AB, "gpu_reason", lambda arch: "no GPU in this test")
    result = AB.attention_job(prob, echo=lines.append)
    assert lines[0].startswith("program: sm_90a warp-specialised attention")
    assert lines[1].startswith("kernel attention_sm90_b1h2k2_q64_kv64_d64_bshd_") and \
        lines[1].endswith("; grid 2x1x1, 384 threads, cluster 1x1x1")
    assert lines[-1] == "not run: no sm_90 GPU here (no GPU in this test); built and assembled only"
    assert result["ran"] is False and result["grid"] == [2, 1, 1] and result["cluster"] == [1, 1, 1]
    monkeypatch.setattr(AB, "gpu_reason", lambda arch: None)
    monkeypatch.setattr(AB, "run_check", lambda pl: (0, "ok (8192 elements)"))
    monkeypatch.setattr(AB, "time_plan", lambda pl, iters: 8.0)
    lines.clear()
    result = AB.attention_job(prob, iters=3, echo=lines.append)
    assert lines[-2] == "check against the float64 softmax (random normal inputs): ok (8192 elements)"
    assert lines[-1] == f"time: 8.0 µs (median of 3 calls), {prob.flops / 8e-6 / 1e12:.1f} TFLOP/s"
    assert result["ran"] is True and result["time_us"] == 8.0 and result["iters"] == 3
    monkeypatch.setattr(AB, "run_check", lambda pl: (3, "FAIL: 3 of 8192 elements"))
    with pytest.raises(AB.CheckFailed, match=r"^attention B=1 H=2 S=64 D=64 bshd scale=0.125 sm_90a gave wrong "
                                             r"results \(3 elements\)$") as e:
        AB.attention_job(prob, echo=lines.append)
    assert e.value.exit_status == 1 and e.value.result is not None and e.value.result["wrong_elements"] == 3
