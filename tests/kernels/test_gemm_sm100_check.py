"""The Blackwell GEMM on the host checker (warpy.check): small programs that exercise each feature
(2-CTA pairs with two accumulators on a fixed grid, 2x4 multicast clusters on a ragged bf16 C,
cluster launch control in 2x2 clusters, M = 128 pairs stored from the registers with asking ahead,
split-K and stream-K adding in the L2, PDL after the last load) run on the CPU with every check and
the values: each is clean, and C agrees with numpy. The grids are small enough that the simulated
clusters are the whole grid, so the partial sums added in the L2 are complete and compared too."""

from __future__ import annotations

import numpy as np
import pytest

from warpy.kernels.gemm_sm100 import Sm100Config as C
from warpy.kernels.gemm_sm100 import Sm100Gemm
from warpy.kernels.gemm import FAMILY as GEMM
from warpy.kernels.gemm import GemmProblem

import warpy.check.report as check

CASES = {
    "pairs-fixed-grid-2acc": ((256, 1024, 320), C(bm=128, cta_rows=128, stages=3, accs=2, sms=4), "fp32"),
    "multicast-2x4-ragged-bf16": ((1000, 300, 200), C(bm=128, cta_rows=128, stages=3, pairs=4, sms=8), "bf16"),
    "clc-2x2": ((512, 512, 128), C(bm=64, cta_rows=128, stages=3, accs=2, pairs=2, clc=True, sms=4), "fp32"),
    "m128-ask-registers-fp16": ((200, 130, 256), C(bm=128, cta_rows=64, stages=4, accs=1, ask_ahead=True,
                                                    tma_store=False, sms=4), "fp16"),
    "split-k": ((256, 256, 1024), C(bm=256, cta_rows=128, stages=3, accs=1, split=2, ask_ahead=True, sms=4), "fp32"),
    "stream-k": ((256, 512, 768), C(bm=256, cta_rows=128, stages=3, accs=2, stream_k=True, sms=4), "fp32"),
    "pdl-last-load": ((256, 256, 256), C(bm=128, cta_rows=128, stages=2, accs=2, pdl="last_load", sms=4), "bf16"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_feature_program_is_clean_and_right(name: str) -> None:
    (m, n, k), cfg, out = CASES[name]
    prob = GemmProblem(m, n, k, dtype="bf16", out_dtype=out, arch="sm_100a")
    prog = Sm100Gemm(GemmProblem(m, n, k, "bf16", out, arch="sm_100a"), cfg).build()
    rep = check.check_kernel(prog.kernel(), prog.coloured(), values=True, expect=GEMM.expectation(prob))
    assert rep.ok, "\n".join(list(rep.messages())[:10])
    assert rep.notes_checked > 0
    if not (cfg.split > 1 or cfg.stream_k):
        assert rep.values_checked > 0 and rep.values_wrong == 0  # every element the simulated clusters wrote
        return
    # partial sums: the checker leaves elements added in the L2 to the caller; here the simulated
    # clusters are the whole grid, so C is complete
    assert prog.grid[0] == 2 * prog.cluster[0]
    d = rep.data
    ref = d["a"].astype(np.float64) @ d["b"].astype(np.float64).T
    got = d["c"].astype(np.float64)
    assert (got == ref).all(), f"{int((got != ref).sum())} of {got.size} elements of C differ from numpy"
