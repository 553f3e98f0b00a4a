"""GEMM operands with row pitches (issue 19: slices of wider matrices read and written in place):
A, B and C whose rows are `lda`, `ldb`, `ldc` elements apart, on both targets, checked with
values; a program that writes C densely caught by the pitched expectation; pitches TMA cannot
take refused in one line; dense problems keep their programs (tests/kernels/test_pinned_text.py)."""

from __future__ import annotations

import pytest

from warpy.check.report import check_kernel
from warpy.errors import WarpyError
from warpy.kernels import gemm as G


@pytest.mark.parametrize("M,N,K,words,out,arch", [
    (100, 72, 64, ["lda=80", "ldb=72", "ldc=88"], "bf16", "sm_90a"),  # the staged epilogue's TMA stores
    (128, 64, 64, ["lda=128", "ldc=72"], "fp32", "sm_90a"),  # stored from the registers
    (256, 136, 64, ["lda=72", "ldb=96", "ldc=144"], "fp16", "sm_100a"),
    (100, 72, 64, ["ldc=80", "bias=n", "act=relu", "beta=1", "residual=1"], "fp32", "sm_100a"),
])
def test_pitched_operands_checked_with_values(M: int, N: int, K: int, words: list[str], out: str, arch: str) -> None:
    prob = G.FAMILY.problem([M, N, K] + words, arch=arch, out_dtype=out)
    assert prob.pitched and "_ld" in G.build(prob).name
    rep = check_kernel(G.build(prob).kernel(), None, values=True, expect=G.FAMILY.expectation(prob))
    assert rep.ok, rep.messages()
    assert rep.values_checked >= 4096 and rep.values_wrong == 0


def test_a_dense_program_fails_the_pitched_expectation() -> None:
    dense = G.GemmProblem(128, 64, 64, out_dtype="fp32")
    pitched = G.GemmProblem(128, 64, 64, out_dtype="fp32", ldc=72)
    cfg = G.configure(dense, "stream_k=false,split=0")
    rep = check_kernel(G.build(dense, cfg).kernel(), None, values=True, expect=G.FAMILY.expectation(pitched))
    assert rep.values_wrong > 0


@pytest.mark.parametrize("kw,message", [
    ({"lda": 32}, r"^lda=32: a row pitch is 0 \(dense\) or at least the row's 64 elements$"),
    ({"ldb": 68}, "^ldb=68: rows 136 bytes apart; TMA needs a multiple of 16$"),
    ({"ldc": 66, "out_dtype": "fp32"}, "^ldc=66: rows 264 bytes apart; TMA needs a multiple of 16$"),
    ({"ldc": True}, r"^ldc=True: a row pitch is 0"),
])
def test_pitches_tma_cannot_take_are_refused(kw: dict[str, object], message: str) -> None:
    with pytest.raises(WarpyError, match=message):
        G.GemmProblem(128, 64, 64, **kw)  # type: ignore[arg-type]


def test_dense_pitches_are_the_dense_problem() -> None:
    assert G.GemmProblem(128, 64, 64, lda=64, ldb=64, ldc=64).pitched is False
    assert G.build(G.GemmProblem(128, 64, 64, lda=64)).name == G.build(G.GemmProblem(128, 64, 64)).name
