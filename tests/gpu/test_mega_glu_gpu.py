"""The fused gate/up gemm (`MegaConfig(glu=True)`) on an H200 (skipped without an sm_90 GPU): the
Llama MLP at T = 1 and 16 on every SM, the small graphs the host checker proves (llama-small at
T = 1, 5, 16 and tests/kernels/graphs/glu_staged.py: weights written by the launch, a stage past K, a
ragged K) on every SM and on the checker's 2 units; every output element against the reference of
the fused program, as tests/gpu/test_mega_gpu.py compares the unfused ones.

    python -m pytest -q tests/gpu/test_mega_glu_gpu.py
"""

from __future__ import annotations

import os

import pytest

from warpy.kernels import mega
from warpy.kernels.mega_bench import MegaRunner, bench_inputs, judge

STAGED = os.path.join(os.path.dirname(__file__), "..", "kernels", "graphs", "glu_staged.py")


@pytest.mark.parametrize("graph,tokens,units", [("llama-mlp", 1, 0), ("llama-mlp", 16, 0), ("llama-small", 1, 0),
                                                ("llama-small", None, 0), ("llama-small", 16, 2), (STAGED, None, 0),
                                                (STAGED, None, 2)])
def test_every_output_element_equals_the_reference(graph: str, tokens: int | None, units: int) -> None:
    r = MegaRunner(mega.MegaProblem(graph, tokens, units=units), mega.MegaConfig(glu=True), deadline=30)
    assert any(n.glu for n in r.plan.schedule.program.nodes)
    for call in range(1, 3):
        values = bench_inputs(r.plan.schedule.program.graph, seed=call)
        want = r.plan.schedule.program.reference(values)
        got = r(values)
        n, bad, msgs = judge(r.plan, graph, got, want, values)
        assert n == sum(w.size for w in want) and bad == 0, msgs
