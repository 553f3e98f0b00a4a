"""The GEMM's fused epilogue (issue 19; kernels/gemm_epilogue.py) without a GPU: the activations'
error bounds against the exact functions with every MUFU result at the ends of its allowed error;
the epilogue's options and their one-line refusals; both targets' programs checked clean with
values (C within the derived tolerance of numpy's act(alpha·A·Bᵀ + beta·C_in + bias) + residual)
over ragged shapes, both bias directions and every activation; a program that drops a step caught;
no epilogue = the programs as before (tests/kernels/test_pinned_text.py pins them)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from warpy.check.report import check_kernel
from warpy.errors import WarpyError
from warpy.kernels import gemm as G
from warpy.kernels import gemm_epilogue as E
from warpy.kernels.gemm_epilogue import ACT_BOUND, Epilogue, emulate_act, parse_words


def _exact(t: np.ndarray, act: str) -> np.ndarray:
    f = {"silu": lambda x: x / (1.0 + math.exp(-x)) if x > -700 else 0.0,
         "gelu_tanh": lambda x: 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3))),
         "gelu_erf": lambda x: 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0))),
         "relu": lambda x: max(x, 0.0)}[act]
    return np.array([f(float(x)) for x in t])


# every fp32 value in [-2, 2) a 2^-12 apart, then wider ranges more coarsely (where the exponentials saturate)
GRID = np.concatenate([np.arange(-2.0, 2.0, 2.0 ** -12), np.linspace(-40.0, 40.0, 20001),
                       np.geomspace(2.0 ** -30, 1e4, 2001), -np.geomspace(2.0 ** -30, 1e4, 2001)]).astype(np.float32)


@pytest.mark.parametrize("act", ["silu", "gelu_tanh", "gelu_erf", "relu"])
def test_activation_within_its_bound_with_mufu_at_its_error_ends(act: str) -> None:
    exact = _exact(GRID, act)
    worst = 0.0
    for ex2 in (-2.0, 0.0, 2.0):  # MUFU.EX2: within 2 ulp; MUFU.RCP: within 1 ulp (PTX's bounds)
        for rcp in (-1.0, 0.0, 1.0):
            got = emulate_act(GRID, act, ex2, rcp).astype(np.float64)
            err = np.abs(got - exact)
            assert (err <= ACT_BOUND[act] * np.abs(GRID.astype(np.float64))).all(), (act, ex2, rcp)
            worst = max(worst, float((err / np.maximum(np.abs(GRID), 1e-38)).max()))
    # the bound is not loose by more than a few binary orders (a sloppier formula would show)
    assert act == "relu" or ACT_BOUND[act] / 64 < worst <= ACT_BOUND[act]


def test_activation_golden_values() -> None:
    t = np.array([-3.0, -1.0, 0.0, 0.5, 1.0, 2.0], np.float32)
    # torch.nn.functional.gelu / silu in float64
    want = {"gelu_erf": [-0.0040496570, -0.15865525, 0.0, 0.34573123, 0.84134475, 1.9544997],
            "gelu_tanh": [-0.0036373920, -0.15880801, 0.0, 0.34571401, 0.84119199, 1.9545977],
            "silu": [-0.14227763, -0.26894142, 0.0, 0.31122967, 0.73105858, 1.7615942]}
    for act, w in want.items():
        assert np.allclose(emulate_act(t, act), w, rtol=0, atol=1e-6), act


def test_options_and_refusals() -> None:
    ep = parse_words(["alpha=0.5", "beta=-1", "bias=n", "act=gelu", "residual=1"])
    assert ep == Epilogue(0.5, -1.0, "n", "gelu_erf", True)
    assert ep.params() == ("bias", "c_in", "residual")
    assert ep.tag() == "_ep_a0p5_bm1_biasn_gelu_erf_res"
    assert str(ep) == "C = gelu_erf(0.5·A·Bᵀ + -1·C_in + bias[col]) + residual"
    assert Epilogue().identity and Epilogue().tag() == "" and Epilogue(bias="row").bias == "n"
    for words, msg in ((["act=tanh"], "^activation 'tanh' is not one of relu, silu, gelu_tanh, gelu_erf"),
                       (["bias=x"], "^bias 'x' is not n"), (["alpha=two"], "^alpha='two' is not a number$"),
                       (["alpha=inf"], "^alpha must be a finite number, not inf$"), (["gamma=1"], "^'gamma=1' is not an"),
                       (["residual=2"], "^residual='2' is not 0 or 1$")):
        with pytest.raises(WarpyError, match=msg):
            parse_words(words)
    with pytest.raises(WarpyError, match="^alpha and beta are numbers, not True$"):
        Epilogue(alpha=True)
    assert G.FAMILY.problem([64, 64, 16, "a=km"], arch="sm_90a") == G.GemmProblem(64, 64, 16, a_major="MN")
    assert G.FAMILY.problem([64, 64, 16, "a=km"], arch="sm_100a") == G.GemmProblem(64, 64, 16, a_major="MN",
                                                                                  arch="sm_100a")
    assert G.FAMILY.problem([64, 64, 16, "a=mk", "b=nk"], arch="sm_90a") == G.GemmProblem(64, 64, 16)


def test_no_epilogue_keeps_the_programs_name() -> None:
    p = G.GemmProblem(256, 256, 64)
    assert G.build(p).name == G.build(G.GemmProblem(256, 256, 64, epilogue=Epilogue())).name
    assert "_ep_" not in G.build(p).name
    assert G.build(G.GemmProblem(256, 256, 64, epilogue=Epilogue(act="relu"))).name.endswith("_ep_relu")


CASES = [  # (M, N, K, out, arch, epilogue words, config)
    (100, 72, 64, "bf16", "sm_90a", ["act=gelu_erf", "bias=m"], None),
    (64, 33, 16, "fp32", "sm_90a", ["bias=n", "beta=-1", "residual=1", "act=relu"], None),
    (256, 256, 64, "bf16", "sm_90a", ["act=gelu_tanh", "bias=n", "alpha=0.25"], "staged_epilogue=true"),
    (128, 64, 256, "fp16", "sm_90a", ["act=silu", "beta=2", "residual=1"], "bn=64,stream_k=true,split=2"),
    (256, 256, 128, "bf16", "sm_100a", ["act=gelu_erf", "bias=m"], None),
    (200, 136, 64, "fp16", "sm_100a", ["act=silu", "beta=2", "residual=1", "bias=n", "alpha=3"], None),
]


def _check(M: int, N: int, K: int, out: str, arch: str, words: list[str], config: str | None) -> object:
    prob = G.FAMILY.problem([M, N, K] + words, arch=arch, out_dtype=out)
    cfg = G.configure(prob, config) if config else G.choose(prob)
    prog = G.build(prob, cfg)
    return check_kernel(prog.kernel(), None, values=True, expect=G.FAMILY.expectation(prob))


@pytest.mark.parametrize("M,N,K,out,arch,words,config", CASES)
def test_fused_epilogue_checked_with_values(M: int, N: int, K: int, out: str, arch: str, words: list[str],
                                            config: str | None) -> None:
    rep = _check(M, N, K, out, arch, words, config)
    assert rep.ok, rep.messages()  # type: ignore[attr-defined]
    assert rep.values_checked >= min(M * N, 4096) and rep.values_wrong == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_a_program_that_skips_the_activation_is_caught(arch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(E, "emit_activation", lambda p, ep, k, t: None)
    rep = _check(128, 128, 64, "fp32", arch, ["act=gelu_tanh", "bias=n"], None)
    assert rep.values_wrong > 0  # type: ignore[attr-defined]


def test_a_bias_read_along_the_wrong_direction_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference takes bias per column; a program built for bias per row must fail the check."""
    prob_m = G.FAMILY.problem([128, 128, 64, "bias=m"], arch="sm_90a", out_dtype="fp32")
    prob_n = G.FAMILY.problem([128, 128, 64, "bias=n"], arch="sm_90a", out_dtype="fp32")
    prog = G.build(prob_m)
    rep = check_kernel(prog.kernel(), None, values=True, expect=G.FAMILY.expectation(prob_n))
    assert rep.values_wrong > 0


def test_sm100_epilogue_refuses_partial_sums_and_tma_stores() -> None:
    prob = G.FAMILY.problem([256, 256, 64, "act=relu"], arch="sm_100a", out_dtype="fp32")
    cfg = G.choose(prob)
    assert (cfg.split, cfg.stream_k, cfg.tma_store) == (1, False, False)  # type: ignore[union-attr]
    with pytest.raises(WarpyError, match="^a fused epilogue runs on whole tiles stored from the registers on sm_100a"):
        G.build(prob, G.configure(prob, "tma_store=true"))
