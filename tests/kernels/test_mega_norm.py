"""A decode rmsnorm fused into the gemms that read it (`MegaConfig.norm`, `Node.norm`, sm_90a): which
rmsnorms the lowering takes in and which it leaves as nodes, the meaning (`semantics.gemm_norm`)
against the unfused graph, the reference VM tile by tile, the sm_90a program proven by the host
checker with values (a bias and a relu, K past the last box, two gemms of one rmsnorm; the Llama
MLP's fused gate/up at T = 16: two rows a warp), a seeded missing proxy fence caught, and the
refusals."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.errors import WarpyError
from warpy.kernels import mega
from warpy.kernels.mega_gemm import Gemm
from warpy.mega import semantics as S
from warpy.mega.encode import decode
from warpy.mega.examples import llama_decoder, load
from warpy.mega.graph import Graph
from warpy.mega.lower import NORM_ROWS, lower
from warpy.mega.schedule import build as schedule
from warpy.mega.vm import run as vm_run
from warpy.numeric import from_bits, to_bits

SLOW = os.environ.get("WARPY_SLOW") == "1"
GRAPHS = os.path.join(os.path.dirname(__file__), "graphs")
NORM_BIAS = os.path.join(GRAPHS, "norm_bias.py")


def _bf16(x: np.ndarray) -> np.ndarray:
    return np.asarray(from_bits(to_bits(np.asarray(x, dtype=np.float32), "bf16"), "bf16"), dtype=np.float32)


def _kinds(g: Graph, norm: bool = True) -> list[str]:
    return [n.describe() for n in lower(g, "sm_90a", glu=True, norm=norm).nodes]


def test_the_decoder_stack_has_no_rmsnorm_node_and_each_normed_gemm_reads_x_and_the_weight() -> None:
    g = llama_decoder(1, hidden=128, heads=4, kv_heads=2, head_dim=32, intermediate=192, layers=2, length=40,
                      cache_rows=48)
    prog = lower(g, "sm_90a", glu=True, norm=True)
    kinds = [n.kind for n in prog.nodes]
    assert "rmsnorm" not in kinds
    normed = [n for n in prog.nodes if n.norm]
    assert len(normed) == 8  # per layer: the Q, K and V projections and the fused gate/up
    names = {t.id: t.name for t in prog.tensors}
    for n in normed:
        assert n.eps == pytest.approx(1e-5)
        assert names[n.operands[-1].tensor] in ("attn_norm", "mlp_norm")  # the weight, last
        assert n.operands[0].view.shape == (1, 128)  # x itself, not a normalised copy
        assert not n.residual
    assert [n.glu for n in normed] == [False, False, False, True] * 2
    # unfused: one rmsnorm node for each
    assert [n.kind for n in lower(g, "sm_90a", glu=True).nodes].count("rmsnorm") == 4


def _one_norm(rows: int, users: str, output: bool = False) -> Graph:
    g = Graph("norm-users")
    x = g.input("x", (rows, 64))
    w = g.input("w", (64,))
    h = g.rmsnorm(x, w, 1e-6, name="h")
    w1 = g.input("w1", (32, 64))
    y = g.linear(h, w1, name="y")
    if users == "residual":  # y + x: the gemm's residual
        y = g.add(y, g.input("r", (rows, 32)), name="y_res")
    elif users == "add":  # h read by something that is not a linear
        g.output(g.add(h, x, name="hx"))
    elif users == "b-operand":  # h as the weight of a linear
        g.output(g.linear(g.input("z", (8, 64)), h, name="zh"))
    g.output(y)
    if output:
        g.output(h)
    return g


@pytest.mark.parametrize("rows,users,output,fused", [
    (1, "plain", False, True), (NORM_ROWS, "plain", False, True), (NORM_ROWS + 1, "plain", False, False),
    (4, "residual", False, False), (4, "add", False, False), (8, "b-operand", False, False),
    (4, "plain", True, False)])
def test_which_rmsnorms_are_taken_in(rows: int, users: str, output: bool, fused: bool) -> None:
    kinds = _kinds(_one_norm(rows, users, output))
    assert ("rmsnorm eps=1e-06" not in kinds) == fused, kinds
    assert any(k.startswith("gemm rmsnorm(x, eps=1e-06)") for k in kinds) == fused, kinds
    assert "rmsnorm eps=1e-06" in _kinds(_one_norm(rows, users, output), norm=False)


def test_norm_is_refused_on_sm100a_and_by_the_configuration() -> None:
    with pytest.raises(WarpyError, match="^norm: the rmsnorm fused into its gemms is the sm_90a interpreter's"):
        lower(_one_norm(1, "plain"), "sm_100a", norm=True)
    p = mega.MegaProblem("llama-small", 1, arch="sm_100a")
    assert not mega.choose(p).norm
    with pytest.raises(WarpyError, match="sm_90a interpreter's"):
        mega.configure(p, "norm=1")
    assert mega.choose(mega.MegaProblem("llama-small", 1)).norm


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 8), k=st.integers(1, 40).map(lambda c: 8 * c), n=st.integers(1, 24),
       seed=st.integers(0, 2**31 - 1), act=st.sampled_from(["none", "relu", "silu"]), bias=st.booleans())
def test_the_fused_meaning_is_the_unfused_graph_within_a_rounding(rows: int, k: int, n: int, seed: int, act: str,
                                                                   bias: bool) -> None:
    """gemm_norm(x, w) = act(rmsnorm(x, w)·Wᵀ + b) but for where each rounds: within 2 bf16 steps of
    the larger of the result and its condition (sum of |products|)."""
    rng = np.random.default_rng(seed)
    x, w = _bf16(rng.normal(size=(rows, k)) * 3), _bf16(rng.normal(size=k))
    wt, b = _bf16(rng.normal(size=(n, k)) / np.sqrt(k)), _bf16(rng.normal(size=n))
    got = S.gemm_norm(x, w, 1e-5, wt, b if bias else None, act, None, "bf16", "bf16")
    h = S.rmsnorm(x, w, 1e-5, "bf16")
    want = S.gemm(h, wt, True, b if bias else None, act, None, "bf16")
    cond = np.abs(h) @ np.abs(wt).T + (np.abs(b) if bias else 0.0)
    mag = np.maximum(np.maximum(np.abs(want), cond), 2.0 ** -126)
    steps = np.abs(got - want) / np.exp2(np.floor(np.log2(mag)) - 7)
    assert steps.max() <= 2.0, steps.max()


def test_the_fused_meaning_golden() -> None:
    """One row by hand: x = (3, 4) (mean square 12.5), w = (1, 2), eps 0: rstd = 1/sqrt(12.5);
    A becomes (3, 8); B = ((1, 1), (1, -1)): (11, -5) x rstd = (3.1113, -1.4142), to bf16."""
    x = np.array([[3.0, 4.0]], dtype=np.float32)
    got = S.gemm_norm(x, np.array([1.0, 2.0], dtype=np.float32), 0.0, np.array([[1.0, 1.0], [1.0, -1.0]],
                      dtype=np.float32), None, "none", None, "bf16", "bf16")
    assert got.tolist() == [[3.109375, -1.4140625]]
    up = np.array([[2.0, 0.0], [0.0, 1.0]], dtype=np.float32)  # the gate/up form: silu(g)·u
    glu = S.gemm_norm(x, np.array([1.0, 2.0], dtype=np.float32), 0.0, np.array([[1.0, 1.0], [1.0, -1.0]],
                      dtype=np.float32), None, "none", up, "bf16", "bf16")
    g, u = np.array([11.0, -5.0]) / np.sqrt(12.5), np.array([6.0, 8.0]) / np.sqrt(12.5)
    assert glu[0].tolist() == _bf16(g / (1 + np.exp(-g)) * u).tolist()


@pytest.mark.parametrize("graph,tokens", [("decoder-small", 1), (NORM_BIAS, None), ("llama-small", 16)])
def test_the_reference_vm_is_numpy_tile_by_tile_and_the_program_is_the_graph(graph: str, tokens: int) -> None:
    s = schedule(load(graph, tokens), "sm_90a", "static", None, glu=True, norm=True)
    assert any(n.norm for n in s.program.nodes) and not any(n.kind == "rmsnorm" for n in s.program.nodes)
    inputs = s.program.graph.random_inputs(3)
    ref = s.program.reference(inputs)
    out = vm_run(s, inputs, seed=3, calls=2)
    assert out.ok, out.hang + out.races
    assert all(np.array_equal(a, b) for a, b in zip(out.outputs, ref))
    unfused = schedule(load(graph, tokens), "sm_90a", "static", None, glu=True).program.reference(inputs)
    for a, b in zip(ref, unfused):
        scale = max(float(np.sqrt(np.mean(np.asarray(b, np.float64) ** 2))), 1e-30)
        assert np.max(np.abs(a - b)) <= 0.05 * scale  # one rounding moved, the rest the same


def test_the_instruction_carries_the_norm() -> None:
    """The normed gemm's fields: the flag, eps, the weight in slot 4 as boxes of 256 along K, early."""
    p = mega.MegaProblem(NORM_BIAS, units=2)
    pl = mega.plan(p, mega.choose(p))
    fields = [f for f in decode(pl.encoded.words) if f["opcode"] == 1]
    assert fields and all(f["norm"] == 1 and f["residual"] == 0 for f in fields)
    assert {f["eps"] for f in fields} == {0x3727C5AC}  # 1e-5 as fp32
    assert {(f["op4.box_16"] * 16, f["op4.axes"] & 7, f["early"] >> 4 & 1) for f in fields} == {(512, 4, 1)}
    assert {f["bias"] for f in fields} == {0, 1}
    assert pl.launch.gemm_tiles == ((64, 16, 8, 0, 1),)


def test_the_gemm_body_refuses_what_it_cannot_norm() -> None:
    p = mega.MegaProblem(NORM_BIAS, units=2)
    f = next(f for f in decode(mega.plan(p, mega.choose(p)).encoded.words) if f["opcode"] == 1)
    assert Gemm().refuse(f) is None
    assert Gemm().refuse({**f, "residual": 1}) == "a normed gemm with a residual (its norm weight takes the residual's slot)"
    assert Gemm().refuse({**f, "op4.box_16": 16}) == ("a normed gemm whose norm weight's box is 256 bytes (the body "
                                                      "takes boxes of 256 along K)")
    assert "more than a page" in (Gemm().refuse({**f, "k_end": 64 * 256}) or "")


def test_the_normed_program_is_clean_with_values() -> None:
    """Every CTA with values: a bias and a relu after the norm, two gemms of one rmsnorm, K 520 (the
    last A box and the last weight box partly past K), 3 rows."""
    p = mega.MegaProblem(NORM_BIAS, units=2)
    rep = mega.check_launch(p, mega.choose(p), coloured=False)
    assert rep.ok, rep.text()
    assert rep.values_checked == 3 * 40 + 3 * 24 and rep.values_wrong == 0


@pytest.mark.skipif(not SLOW, reason="WARPY_SLOW=1 (~40 s: the fused gate/up at T = 16, two rows a warp)")
def test_the_normed_llama_mlp_is_clean_with_values() -> None:
    p = mega.MegaProblem("llama-small", 16)
    rep = mega.check_launch(p, mega.choose(p), coloured=False)
    assert rep.ok, rep.text()
    assert rep.values_checked > 0 and rep.values_wrong == 0


def test_a_missing_proxy_fence_is_caught() -> None:
    """`norm-no-fence`: the consumers' rewritten A read by the wgmmas with no proxy fence."""
    p = mega.MegaProblem(NORM_BIAS, units=2)
    rep = mega.check_launch(p, mega.configure(p, "fault=norm-no-fence"), coloured=False, values=False)
    assert not rep.ok
    first = rep.text().splitlines()[0]
    assert re.match(r"pages: HGMMA\.64x\d+x16\.F32\.BF16, warp ", first) and "reads it through the async proxy and " \
        "STS.128" in first and "writes it through the generic proxy, and no proxy fence orders the two" in first, first
