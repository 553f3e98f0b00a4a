"""GEMM operands with row pitches and batches (issue 19): A, B and C whose rows are `lda`, `ldb`,
`ldc` elements apart (slices of wider matrices read and written in place), on both targets, and a
batch of GEMMs in one sm_90a launch (3-D tensor maps, the matrix a coordinate), checked with
values over every CTA; programs that ignore the pitch or the batch caught; what TMA cannot take
refused in one line; dense problems keep their programs (tests/kernels/test_pinned_text.py)."""

from __future__ import annotations

import pytest

from warpy.check.report import CheckOptions, check_kernel, options
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


@pytest.mark.parametrize("M,N,K,words,out", [
    (100, 72, 64, ["batch=3"], "bf16"),  # the staged epilogue: 3-D TMA stores
    (128, 64, 64, ["batch=4", "ldc=72", "stride_a=16384"], "fp32"),  # from the registers, A's matrices apart
])
def test_a_batch_in_one_launch_checked_with_values_on_every_cta(M: int, N: int, K: int, words: list[str],
                                                               out: str) -> None:
    prob = G.FAMILY.problem([M, N, K] + words, arch="sm_90a", out_dtype=out)
    prog = G.build(prob)
    assert "_x" in prog.name and [t.box.rank for t in prog.kernel().header.tmaps][:2] == [3, 3]
    with options(CheckOptions(all_ctas=True)):
        rep = check_kernel(prog.kernel(), None, values=True, expect=G.FAMILY.expectation(prob))
    assert rep.ok, rep.messages()
    assert rep.values_checked == prob.batch * M * N and rep.values_wrong == 0


def test_a_batch_read_with_the_wrong_stride_is_caught() -> None:
    prob = G.GemmProblem(128, 64, 64, out_dtype="fp32", batch=2)
    other = G.GemmProblem(128, 64, 64, out_dtype="fp32", batch=2, stride_c=128 * 64 + 64)
    with options(CheckOptions(all_ctas=True)):
        rep = check_kernel(G.build(prob).kernel(), None, values=True, expect=G.FAMILY.expectation(other))
    assert rep.values_wrong > 0


@pytest.mark.parametrize("kw,message", [
    ({"batch": 0}, "^batch=0: a batch holds at least one GEMM$"),
    ({"batch": 2, "arch": "sm_100a"}, "^a batch of GEMMs in one launch is an sm_90a program so far, not sm_100a$"),
    ({"batch": 2, "stride_a": 8196}, "^stride_a=8196: matrices of a batch must be a whole number of 16 bytes apart"),
])
def test_batches_refused_in_one_line(kw: dict[str, object], message: str) -> None:
    with pytest.raises(WarpyError, match=message):
        G.GemmProblem(128, 64, 64, **kw)  # type: ignore[arg-type]
    with pytest.raises(WarpyError, match="^a batch of GEMMs runs whole tiles on single CTAs"):
        G.build(G.GemmProblem(128, 64, 64, batch=2), G.configure(G.GemmProblem(128, 64, 64, batch=2), "stream_k=true"))
