"""`warpy mega bench` without a GPU: the workloads' torch code computes what the megakernel's graph
computes (CPU torch in fp32 against `Program.reference`, within the bench's own tolerance, which a
wrong layer fails), the inputs keep the layers' scale, the error measure in bf16 steps, the table
and its JSON round trip, and one-line refusals (skipped where torch is not installed)."""

from __future__ import annotations

import numpy as np
import pytest

from warpy.errors import WarpyError
from warpy.kernels import mega_bench as B
from warpy.mega.examples import llama_mlp, mlp
from warpy.mega.lower import lower


def test_bf16_error_counts_steps_at_the_reference_or_its_rms() -> None:
    ref = np.array([1.0, 1.0, 0.0, 2.0 ** -20, 100.0], dtype=np.float32)
    rms = float(np.sqrt(np.mean(ref.astype(np.float64) ** 2)))
    got = ref.copy()
    got[0] = 1.0 + 3 * 2.0 ** -7  # 3 steps at 1.0
    got[2] = 5 * 2.0 ** (np.floor(np.log2(rms)) - 7)  # 5 steps at the rms (|ref| is 0 there)
    e, over = B.bf16_error(got, ref)
    assert e == pytest.approx(5.0) and over == 1
    got[4] = np.nan
    assert B.bf16_error(got, ref)[1] == 2
    assert B.bf16_error(ref, ref) == (0.0, 0)


def test_the_table_and_its_rows_round_trip(tmp_path: object) -> None:
    import os

    rows = [B.BenchRow("mlp3-1", "warpy", 10.0, 0.5, 0), B.BenchRow("mlp3-1", "graph", 19.0, 1.0, 0),
            B.BenchRow("mlp3-1", "eager", 60.0, 1.0, 2), B.BenchRow("mlp3-1", "compile", None, note="skipped")]
    path = os.path.join(str(tmp_path), "rows.json")
    B.write_rows(rows, path)
    assert B.read_rows(path) == rows
    lines = B.bench_table(rows).splitlines()
    assert lines[0].split()[:3] == ["workload", "warpy", "µs"]
    cells = lines[2].split()
    assert cells[0] == "mlp3-1" and "1.90x" in cells and "18.9" in cells and "6" in cells
    assert "OVER: eager 2 (max steps: warpy 0.5, eager 1.0; tol 6.9)" in lines[2]
    rows.append(B.BenchRow("mlp3-1", "llama-gate", 7.5, note="no up"))
    var = B.bench_table(rows).split("\n\n")[1].splitlines()
    assert var[2].split()[:4] == ["mlp3-1", "llama-gate", "7.5", "2.5"]


@pytest.mark.parametrize("graph", [mlp(tokens=3, hidden=64, layers=3), llama_mlp(tokens=2, hidden=64, intermediate=96,
                                                                                   layers=3)])
def test_the_torch_code_computes_the_graph(graph: object) -> None:
    torch = pytest.importorskip("torch")
    name = "mlp3" if graph.name == "mlp3" else "llama-mlp"  # type: ignore[attr-defined]
    values = B.bench_inputs(graph, seed=1)
    want = lower(graph).reference(values)[0]  # type: ignore[arg-type]
    fn = B.torch_function(name)
    got = fn(**{k: torch.from_numpy(v) for k, v in values.items()}).numpy()
    e, over = B.bf16_error(got, want)
    assert over == 0 and e <= B.TOL_STEPS, e
    # the inputs keep the scale: the output's rms within a small factor of x's
    assert 0.05 < float(np.sqrt(np.mean(want.astype(np.float64) ** 2))) < 20
    # a wrong layer is over the tolerance
    bad = dict(values)
    w = "w" if name == "mlp3" else "down"
    bad[w] = values[w].copy()
    bad[w][-1] *= -1
    got_bad = fn(**{k: torch.from_numpy(v) for k, v in bad.items()}).numpy()
    assert B.bf16_error(got_bad, want)[1] > 0


def test_refusals_in_one_line() -> None:
    pytest.importorskip("torch")
    with pytest.raises(WarpyError, match="no torch form of graph 'ew-small'"):
        B.torch_function("ew-small")
    with pytest.raises(WarpyError) as e:
        B.bench_job(["nope"])
    assert str(e.value).startswith("no workload 'nope'") and "\n" not in str(e.value)


def test_judge_holds_a_stack_to_its_steps_and_other_graphs_to_equality() -> None:
    """`judge` (what `warpy mega run` and the GPU tests compare a call with): mlp3 by the bench's
    measure, TOL_STEPS x sqrt(3) bf16 steps, so one element moved by 12 steps is off and one moved by
    2 is not; ew-small (no stack) by `compare`, where one bf16 step is already off."""
    from warpy.kernels import mega

    pl = mega.plan(mega.MegaProblem("mlp3", 1), mega.MegaConfig())
    values = B.bench_inputs(pl.schedule.program.graph, seed=3)
    want = pl.schedule.program.reference(values)
    assert B.judge(pl, "mlp3", want, want, values) == (want[0].size, 0, [])
    for steps, off in ((2, 0), (12, 1)):
        got = [w.copy() for w in want]
        g = got[0].reshape(-1)
        scale = max(abs(float(g[5])), float(np.sqrt(np.mean(want[0].astype(np.float64) ** 2))))
        g[5] += steps * scale * 2.0 ** -7
        n, bad, msgs = B.judge(pl, "mlp3", got, want, values)
        assert (n, bad) == (want[0].size, off) and len(msgs) == off
    ew = mega.plan(mega.MegaProblem("ew-small"), mega.MegaConfig())
    vals = mega.inputs(ew, seed=1)
    ref = ew.schedule.program.reference(vals)
    assert B.judge(ew, "ew-small", ref, ref, vals)[1] == 0
    bumped = [r.copy() for r in ref]
    flat = bumped[0].reshape(-1).view(np.uint16) if bumped[0].dtype == np.uint16 else None
    if flat is not None:
        flat[0] ^= 1
    else:
        bumped[0].reshape(-1)[0] = np.nextafter(np.float32(bumped[0].reshape(-1)[0]), np.float32(np.inf), dtype=np.float32)
    assert B.judge(ew, "ew-small", bumped, ref, vals)[1] >= 1
