"""The fused gate/up gemm (`MegaConfig(glu=True)`, sm_90a): silu_mul(linear(h, Wg), linear(h, Wu))
lowered to one gemm node with two weights (`Node.glu`), its tiling, encoding, reference VM values and
the comparison's conditions. Off by default: the default lowering is unchanged."""

from __future__ import annotations

import os

import numpy as np
import pytest

from warpy.errors import WarpyError
from warpy.mega import build, encode, validate, vm
from warpy.mega import fields as F
from warpy.mega.examples import llama_mlp, load
from warpy.mega.graph import Graph
from warpy.mega.lower import lower
from warpy.mega.semantics import gemm_glu, random_values, silu_mul, store
from warpy.mega.tiling import gemm_a_rows, gemm_k_boxes, gemm_stage, gemm_tile_ok


def swiglu(shared_a: bool = True, extra_use: bool = False, out_gate: bool = False) -> Graph:
    g = Graph("glu")
    x = g.input("x", (5, 72))
    wg, wu = g.input("wg", (40, 72)), g.input("wu", (40, 72))
    h = g.rmsnorm(x, g.input("nw", (72,)), 1e-5, name="h")
    gate = g.linear(h, wg, name="gate")
    up = g.linear(h if shared_a else x, wu, name="up")
    a = g.silu_mul(gate, up, name="act")
    outs = [a]
    if extra_use:
        outs.append(g.relu(gate, name="r"))
    if out_gate:
        outs.append(gate)
    g.output(*outs)
    return g


def inputs_of(g: Graph, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {v.name: random_values(rng, v.shape, v.dtype) for v in g.inputs()}


def test_the_default_lowering_is_unchanged() -> None:
    g = swiglu()
    assert [n.kind for n in lower(g).nodes] == ["rmsnorm", "gemm", "gemm", "silu_mul"]
    assert not any(n.glu for n in lower(g).nodes)


def test_gate_up_and_silu_mul_become_one_gemm() -> None:
    g = swiglu()
    prog = lower(g, "sm_90a", glu=True)
    assert [n.kind for n in prog.nodes] == ["rmsnorm", "gemm"]
    n = prog.nodes[1]
    assert n.glu and n.b_kmajor and not n.bias and not n.residual and n.act == "none"
    assert n.values == ("gate", "up", "act") and n.describe() == "gemm silu(x·Wgᵀ)·(x·Wuᵀ)"
    names = [prog.tensors[o.tensor].name for o in n.operands]
    assert names == ["h", "wg", "wu"] and prog.tensors[n.out].name == "act"


@pytest.mark.parametrize("kw", [dict(shared_a=False), dict(extra_use=True), dict(out_gate=True)])
def test_not_fused_where_the_halves_differ_or_are_seen(kw: dict[str, bool]) -> None:
    prog = lower(swiglu(**kw), "sm_90a", glu=True)
    assert not any(n.glu for n in prog.nodes)
    assert sum(n.kind == "gemm" for n in prog.nodes) >= 2


def test_sm100_keeps_the_unfused_nodes() -> None:
    with pytest.raises(WarpyError, match="glu: the fused gate/up gemm is the sm_90a interpreter's"):
        lower(swiglu(), "sm_100a", glu=True)


def test_the_fused_value_rounds_once() -> None:
    a = np.array([[1.0, 2.0], [-1.0, 0.5]], dtype=np.float32)
    wg = np.array([[0.5, 0.25], [1.0, -1.0]], dtype=np.float32)
    wu = np.array([[2.0, 0.0], [0.125, 3.0]], dtype=np.float32)
    got = gemm_glu(a, wg, wu, "bf16")
    # g = a·wgᵀ = [[1, -1], [-0.375, -1.5]], u = a·wuᵀ = [[2, 6.125], [-2, 1.375]]
    g = np.array([[1.0, -1.0], [-0.375, -1.5]])
    u = np.array([[2.0, 6.125], [-2.0, 1.375]])
    assert np.array_equal(got, store(g / (1 + np.exp(-g)) * u, "bf16"))
    assert got[0, 0] == np.float32(1.4609375)  # silu(1)·2 = 1.46211716 -> bf16
    # the unfused program rounds g and u first; here gate = -0.375 is exact, so equal up to one rounding
    assert np.allclose(got, silu_mul(store(g, "bf16"), store(u, "bf16"), "bf16"), rtol=2 ** -7)


def test_the_stage_holds_two_weight_boxes_a_k_box() -> None:
    # a page of 32 KiB: (A rows + 2 tile_n) rows of 128 bytes a K box
    assert gemm_k_boxes(64, 64) == 2 and gemm_k_boxes(64, 64, b_ops=2) == 1
    assert gemm_k_boxes(64, 16, a_rows=8) == 10 and gemm_k_boxes(64, 16, a_rows=8, b_ops=2) == 6
    assert gemm_k_boxes(64, 16, a_rows=8, b_ops=2) * 2 * 16 + 8 >= 64
    assert gemm_a_rows(64, 16, 1, b_ops=2) == 8 and gemm_stage("wgmma", 64, 64, 1, 2) == (8, 1)
    assert gemm_tile_ok(128, 128) is None
    assert "does not fit a page" in str(gemm_tile_ok(64, 128, b_ops=2))
    assert "does not fit a page" in str(gemm_tile_ok(128, 128, b_ops=2))
    assert gemm_tile_ok(128, 64, b_ops=2) is None and gemm_tile_ok(64, 64, b_ops=2) is None
    with pytest.raises(WarpyError, match="sm_90a"):
        gemm_stage("tcgen05", 128, 64, 1, 2)


def test_the_instruction_carries_the_up_weight_in_slot_3() -> None:
    g = llama_mlp(1, 72, 200, 2, name="llama-small")
    s = build(g, "sm_90a", units=8, glu=True)
    enc = encode(s)
    fused = {n.id for n in s.program.nodes if n.glu}
    assert len(fused) == 2 and len(s.program.nodes) == 6  # rmsnorm, fused gemm, down per layer
    for ins, words in zip(s.instrs, enc.words):
        f = F.unpack([int(w) for w in words])
        if ins.node not in fused:
            assert f["glu"] == 0
            continue
        node = s.program.nodes[ins.node]
        assert f["glu"] == 1 and f["n_operands"] == 4 and f["bias"] == f["residual"] == 0
        gate_map, up_map = enc.maps[f["op2.tmap"]], enc.maps[f["op3.tmap"]]
        assert (gate_map.tensor, up_map.tensor) == (node.operands[1].tensor, node.operands[2].tensor)
        assert gate_map.tma.box == up_map.tma.box and f["op2.box_16"] == f["op3.box_16"]
        assert f["op3.axes"] == f["op2.axes"] and f["op3.coord1"] == f["op2.coord1"] == ins.box[1][0]
        ar, kb = gemm_stage("wgmma", f["tile_m"], f["tile_n"], 1, 2)
        assert f["k_boxes"] == kb and f["op1.box_16"] * 16 == ar * 128 * (f["k_step"] // 64)
        # both weights are early (no instruction writes them): bits 2 and 3
        assert f["early"] & 0b1100 == 0b1100


@pytest.mark.parametrize("name,tokens", [("llama-small", 1), ("llama-small", 16), ("mlp-small", None)])
def test_the_vm_runs_the_fused_program_equal_to_its_reference(name: str, tokens: int | None) -> None:
    g = load(name, tokens)
    s = build(g, "sm_90a", units=8, glu=True)
    p = validate(s)
    assert p.ok, p.lines()
    if name == "llama-small":
        assert sum(n.glu for n in s.program.nodes) == 3  # 3 layers
        # a level less a layer: the unfused program has 5 nodes a layer, the fused 3
        assert len(s.program.nodes) == len(build(g, "sm_90a", units=8).program.nodes) - 6
    inputs = inputs_of(g, 7)
    out = vm.run(s, inputs, seed=3, calls=2)
    assert out.ok
    assert all(np.array_equal(a, b) for a, b in zip(out.outputs, s.program.reference(inputs)))
    for a, b in zip(out.outputs, g.evaluate(inputs)):  # rounded once where the graph rounds three times
        assert np.max(np.abs(a - b)) <= 2 ** -5 * max(1.0, float(np.max(np.abs(b))))


def test_the_conditions_of_the_fused_value() -> None:
    from warpy.kernels.mega_common import LIPSCHITZ, conditions

    g = swiglu()
    prog = lower(g, "sm_90a", glu=True)
    inputs = inputs_of(g, 2)
    cond = conditions(prog, inputs)
    n = prog.nodes[1]
    vals = prog.run(inputs)
    h, wg, wu = (vals[o.tensor].astype(np.float64) for o in n.operands)
    gv, uv = h @ wg.T, h @ wu.T
    want = LIPSCHITZ["silu"] * (np.abs(h) @ np.abs(wg).T) * np.abs(uv) + np.abs(gv / (1 + np.exp(-gv))) * (
        np.abs(h) @ np.abs(wu).T)
    assert np.allclose(cond[n.out], np.maximum(want, np.abs(vals[n.out])))
    assert cond[n.out].shape == (5, 40)


def test_the_rule_fuses_on_sm90_only() -> None:
    """The rule fuses on sm_90a (measured faster on the H200), `glu=0` unfuses; sm_100a runs the
    gemms unfused and refuses `glu=1` in one line."""
    from warpy.kernels import mega

    p = mega.MegaProblem("llama-small", 1, units=8)
    assert mega.choose(p).glu and not mega.configure(p, "glu=0").glu
    assert "gate/up gemms fused" in mega.choose(p).describe()
    assert "gate/up" not in mega.configure(p, "glu=0").describe()
    p100 = mega.MegaProblem("llama-small", 1, arch="sm_100a")
    assert not mega.choose(p100).glu
    with pytest.raises(WarpyError, match="sm_100a runs them unfused"):
        mega.configure(p100, "glu=1")
    # the program's name says whether something was fused, not the flag: a graph with no SwiGLU
    ew = mega.MegaProblem("ew-chain")
    assert mega.choose(ew).glu and not mega.build(ew).name.endswith("_glu")
    assert mega.build(p).name.endswith("_glu_norm")  # (its rmsnorms fused too: `norm`)
    assert mega.build(p, mega.configure(p, "norm=0")).name.endswith("_glu")


# -- the sm_90a gemm body's fused path ------------------------------------------------------------------

SLOW = os.environ.get("WARPY_SLOW") == "1"
STAGED = os.path.join(os.path.dirname(__file__), "graphs", "glu_staged.py")


def test_the_gemm_body_takes_the_fused_instructions_and_refuses_malformed_ones() -> None:
    from warpy.kernels import mega
    from warpy.kernels.mega_gemm import Gemm
    from warpy.mega.encode import decode

    p = mega.MegaProblem("llama-small", 1)
    pl = mega.plan(p, mega.MegaConfig(glu=True))
    # a code path per tile shape, the fused gemm's marked (tile_m, tile_n, A rows, 1)
    assert pl.launch.gemm_tiles == ((64, 16, 8), (64, 16, 8, 1))
    assert all(len(t) == 3 for t in mega.plan(p, mega.MegaConfig()).launch.gemm_tiles)
    f = next(x for x in decode(pl.encoded.words) if x["opcode"] == F.GEMM and x["glu"])
    g = Gemm()
    assert g.refuse(f) is None
    assert "epilogue of its own" in (g.refuse({**f, "bias": 1}) or "")
    assert "epilogue of its own" in (g.refuse({**f, "activation": F.ACT_RELU}) or "")
    assert "up weight's box is not the gate weight's" in (g.refuse({**f, "op3.coord1": f["op2.coord1"] + 16}) or "")
    assert "a gemm stage of" in (g.refuse({**f, "k_boxes": 10}) or "")  # the unfused stage's boxes


def test_the_interpreter_has_the_fused_path_and_assembles_without_spills() -> None:
    from warpy.kernels import mega
    from warpy.lift.lifter import build as assemble

    p = mega.MegaProblem("llama-mlp", 1, units=0)
    prog = mega.build(p, mega.MegaConfig(glu=True))
    assert mega.plan(p, mega.MegaConfig(glu=True)).launch.gemm_tiles == ((64, 16, 8), (64, 64, 8, 1))
    labels = {line.rsplit("_", 1)[0] for line in str(prog.kernel()).splitlines() if line.startswith("GEMM_")}
    assert labels == {"GEMM_64x16_A8", "GEMM_64x64_A8_GLU", "GEMM_DONE"}
    cubin = assemble(prog.kernel())
    (res,) = cubin.resources
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.registers <= 168


@pytest.mark.skipif(not SLOW, reason="WARPY_SLOW=1 (4 s)")
def test_the_prefill_shapes_assemble_without_spills() -> None:
    from warpy.kernels import mega
    from warpy.lift.lifter import build as assemble

    cubin = assemble(mega.build(mega.MegaProblem("llama-mlp", 16, units=0), mega.MegaConfig(glu=True)).kernel())
    (res,) = cubin.resources
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.registers <= 168


@pytest.mark.parametrize("graph,tokens", [pytest.param(g, t, marks=pytest.mark.skipif(
    not SLOW, reason="WARPY_SLOW=1 (~10 s each idle; the staged graph in the default run covers the fused body)"))
    for g, t in [("llama-small", 1), ("llama-small", 16), ("llama-small", None)]] + [(STAGED, None)])
def test_the_fused_gemm_is_clean_with_values(graph: str, tokens: int | None) -> None:
    """Every CTA, with values: decode tiles of 64 x 16 (A boxes of 8 rows) at T = 1, 5 and 16 (the
    Llama layers: rmsnorm, the fused gemm, down + residual), weights copied before the waits and
    after them (written by the launch), a stage past K, a ragged K."""
    from warpy.kernels import mega

    p = mega.MegaProblem(graph, tokens)
    rep = mega.check_launch(p, mega.MegaConfig(glu=True), coloured=False)
    assert rep.ok, rep.text()
    assert rep.values_checked > 0 and rep.values_wrong == 0


@pytest.mark.skipif(not SLOW, reason="WARPY_SLOW=1 (20 s)")
def test_up_boxes_from_the_gate_map_are_caught() -> None:
    """The seeded `glu-up-offset`: the loader copies the gate weight's boxes where the up weight's
    belong (silu(g)·g): the numbers are wrong, which only --values sees."""
    from warpy.kernels import mega

    p = mega.MegaProblem("llama-small", 1)
    rep = mega.check_launch(p, mega.MegaConfig(glu=True, fault="glu-up-offset"), coloured=False)
    assert rep.values_wrong > 0
    assert "bf16 steps" in rep.text()


@pytest.mark.skipif(not SLOW, reason="WARPY_SLOW=1 (20 s)")
def test_an_up_weight_copied_before_its_writer_is_caught() -> None:
    """The seeded `glu-up-early`: the loader arms a fused gemm's stages before the counter waits
    where the gate weight alone is early; glu_staged's third pair reads an up weight the launch
    writes (wu + dw), and the checker finds that copy unordered with the add's store."""
    import re

    from warpy.kernels import mega

    p = mega.MegaProblem(STAGED)
    rep = mega.check_launch(p, mega.MegaConfig(glu=True, fault="glu-up-early"), coloured=False)
    msgs = list(rep.problems.msgs["order"])
    assert any("nothing orders the two" in m and re.search(r"\(wave \d+: node \d+ gemm silu\(x·Wgᵀ\)·\(x·Wuᵀ\)\)", m)
               for m in msgs), rep.text()
