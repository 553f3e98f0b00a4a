"""Decode projections that write their heads themselves (`MegaConfig.rope`, `lower(rope=True)`,
`Node.rope`, sm_90a): which ropes and appends the lowering takes into the projection's gemm and which
it leaves as nodes, the meaning (`semantics.gemm_rope`) against the unfused graph and a literal case,
the tiles (a roped tile holds pairs of half-head columns), the encoded maps, the reference VM tile by tile with the
caches, the sm_90a program proven by the host checker with values, and the refusals."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.errors import WarpyError
from warpy.kernels import mega
from warpy.kernels.mega_gemm import Gemm
from warpy.mega import semantics as S
from warpy.mega.encode import decode, encode
from warpy.mega.examples import llama_decoder
from warpy.mega.graph import Graph
from warpy.mega.lower import lower
from warpy.mega.schedule import build
from warpy.mega.validate import validate
from warpy.mega.vm import VM
from warpy.numeric import from_bits, to_bits

SLOW = os.environ.get("WARPY_SLOW") == "1"
CHUNKED = os.path.join(os.path.dirname(__file__), "graphs", "rope_chunked.py")
PROJ = os.path.join(os.path.dirname(__file__), "graphs", "rope_proj.py")


def _bf16(x: np.ndarray) -> np.ndarray:
    return np.asarray(from_bits(to_bits(np.asarray(x, dtype=np.float32), "bf16"), "bf16"), dtype=np.float32)


def _small(tokens: int = 1, layers: int = 2, head_dim: int = 32) -> Graph:
    return llama_decoder(tokens, hidden=128, heads=4, kv_heads=2, head_dim=head_dim, intermediate=192, layers=layers,
                         length=40, cache_rows=48)


def _inputs(g: Graph, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {v.name: S.random_values(rng, v.shape, v.dtype, 0.5) for v in g.inputs()}


def test_the_decoder_layer_has_no_rope_or_copy_node_and_the_projections_write_the_caches() -> None:
    prog = lower(_small(), "sm_90a", glu=True, norm=True, rope=True)
    kinds = [n.describe() for n in prog.nodes]
    assert "rope" not in [n.kind for n in prog.nodes]
    # the tables are stacked once (two copies), then per layer Q (roped), K (roped, into its cache), V (into its cache)
    assert kinds[:5] == ["copy", "copy", "gemm rope(rmsnorm(x, eps=1e-05)·Wᵀ)", "gemm rope(rmsnorm(x, eps=1e-05)·Wᵀ)",
                         "gemm rmsnorm(x, eps=1e-05)·Wᵀ"]
    assert kinds.count("copy") == 2 and len(prog.nodes) == 2 + 2 * 8
    names = {t.id: t.name for t in prog.tensors}
    q, k, v = prog.nodes[2:5]
    assert (names[q.out], prog.tensors[q.out].shape, q.out_view) == ("q0", (1, 4, 32), None)
    assert names[k.out] == "k_cache" and k.out_view is not None and k.out_view.shape == (1, 2, 32)
    assert names[v.out] == "v_cache" and v.out_view is not None and v.out_view.shape == (1, 2, 32)
    assert (q.rope, k.rope, v.rope) == (True, True, False) and q.norm and k.norm and v.norm
    assert names[q.operands[2].tensor] == "cos_sin" and q.operands[2].view.shape == (2, 1, 32)
    assert names[q.operands[-1].tensor] == "attn_norm"
    assert [t.name for t in prog.tensors if t.kind == "state"] == ["k_cache", "v_cache"]
    # without `rope`: Q's rope, K's rope into the cache and V's copy are nodes
    plain = [n.kind for n in lower(_small(), "sm_90a", glu=True, norm=True).nodes]
    assert plain[:6] == ["gemm", "rope", "gemm", "gemm", "rope", "unary"]


def _rope_graph(case: str) -> Graph:
    g = Graph("rope-cases")
    x = g.input("x", (2, 64))
    w = g.input("w", (64, 64))
    cos, sin = g.input("cos", (2, 32)), g.input("sin", (2, 32))
    y = g.linear(x, w, name="y")
    if case == "two-uses":  # the product is read as it is too
        g.output(g.add(y, y, name="yy"))
    r = g.rope(g.reshape(y, (2, 2, 32)), cos, sin, name="r")
    if case == "rope-of-input":
        r = g.rope(g.input("z", (2, 2, 32)), cos, sin, name="r2")
    g.output(r)
    return g


def test_a_head_no_tile_fits_keeps_its_rope_node() -> None:
    """D = 72: no tile of 16 columns or more lies in a head, so the rope stays a node (and builds)."""
    g = Graph("rope-72")
    x, w = g.input("x", (1, 64)), g.input("w", (144, 64))
    cos, sin = g.input("cos", (1, 72)), g.input("sin", (1, 72))
    g.output(g.rope(g.reshape(g.linear(x, w), (1, 2, 72)), cos, sin, name="r"))
    assert [n.kind for n in lower(g, "sm_90a", rope=True).nodes] == ["gemm", "rope"]
    assert build(g, "sm_90a", rope=True).instrs


@pytest.mark.parametrize("case,ropes", [("plain", 0), ("two-uses", 1), ("rope-of-input", 1)])
def test_which_ropes_the_projection_takes_in(case: str, ropes: int) -> None:
    prog = lower(_rope_graph(case), "sm_90a", rope=True)
    assert [n.kind for n in prog.nodes].count("rope") == ropes
    vals = _inputs(prog.graph, 5)
    want = prog.graph.evaluate(vals)
    got = prog.reference(vals)
    for a, b in zip(got, want):
        assert np.abs(a - b).max() <= 2.0 ** -6 * np.abs(b).max()


def test_rope_off_sm90_is_refused() -> None:
    with pytest.raises(WarpyError, match="rope: the rope fused into its projection is the sm_90a"):
        lower(_small(), "sm_100a", rope=True)
    with pytest.raises(WarpyError, match="sm_90a interpreter's"):
        mega.configure(mega.MegaProblem("decoder-small", arch="sm_100a"), "rope=1")


def test_gemm_rope_on_a_literal_head() -> None:
    """x = a·Wᵀ = [1, 2, 3, -1]; rotate_half(x) = [-3, 1, 1, 2]; cos 0.5, sin 1: x/2 + rotate_half(x)."""
    a = np.array([[1.0, 2.0]], dtype=np.float32)
    w = np.array([[1, 0], [0, 1], [1, 1], [1, -1]], dtype=np.float32)
    table = np.stack([np.full((1, 4), 0.5, np.float32), np.ones((1, 4), np.float32)])
    assert S.gemm_rope(a, w, table, "bf16").tolist() == [[[-2.5, 2.0, 2.5, 1.5]]]
    # two heads of 2: each roped on its own
    assert S.gemm_rope(a, w, table[:, :, :2], "bf16").tolist() == [[[-1.5, 2.0], [2.5, 2.5]]]


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 5), st.sampled_from([8, 16, 32]), st.integers(1, 3), st.integers(0, 2 ** 31 - 1))
def test_gemm_rope_is_the_rope_of_the_product_rounded_once(m: int, d: int, heads: int, seed: int) -> None:
    """Against the unfused program (the product rounded to bf16, then roped): within one bf16 step
    of the larger of the two and of the rope's condition; with the product not rounded, equal."""
    rng = np.random.default_rng(seed)
    k = 24
    a = _bf16(rng.standard_normal((m, k)))
    w = _bf16(rng.standard_normal((heads * d, k)))
    table = _bf16(rng.uniform(-1, 1, (2, m, d)))
    got = S.gemm_rope(a, w, table, "bf16")
    exact = S.rope((a.astype(np.float64) @ w.T.astype(np.float64)).reshape(m, heads, d), table[0][:, None],
                   table[1][:, None], "bf16")
    assert np.array_equal(got, exact)
    unfused = S.rope(S.gemm(a, w, True, None, "none", None, "bf16").reshape(m, heads, d), table[0][:, None],
                     table[1][:, None], "bf16")
    x = np.abs(a.astype(np.float64)) @ np.abs(w.T.astype(np.float64))
    cond = 2 * x.reshape(m, heads, d).max() + 1e-30
    assert np.abs(got - unfused).max() <= cond * 2.0 ** -7


@pytest.mark.parametrize("tokens", [1, 3])
def test_the_vm_equals_the_reference_tile_by_tile_with_the_caches(tokens: int) -> None:
    from warpy.kernels.mega_bench import bench_inputs

    g = _small(tokens)
    vals = bench_inputs(g, tokens)  # (the bench's scales: a softmax of random 0.5-scale products is too sharp to compare)
    s = build(g, "sm_90a", glu=True, norm=True, rope=True, units=8)
    assert not validate(s).items
    arrays = s.program.run(vals)
    machine = VM(s, values=True, races=True, seed=tokens)
    for _ in range(2):
        out = machine.run(vals)
        assert out.ok and not out.races
        assert np.array_equal(out.outputs[0], arrays[s.program.outputs[0]])
        for t in s.program.tensors:
            if t.kind == "state":
                assert np.array_equal(out.state[t.name], arrays[t.id])
    # the roped K rows went into the cache, and only those rows
    kc = arrays[next(t.id for t in s.program.tensors if t.name == "k_cache")]
    assert np.array_equal(kc[:, :40 - tokens], vals["k_cache"][:, :40 - tokens])
    assert np.array_equal(kc[:, 40:], vals["k_cache"][:, 40:])
    assert not np.array_equal(kc[:, 40 - tokens:40], vals["k_cache"][:, 40 - tokens:40])
    # the whole graph evaluated op by op (rounding the products before the rope): within a few steps
    from warpy.kernels.mega_bench import bf16_error

    worst, over = bf16_error(arrays[s.program.outputs[0]], g.evaluate(vals)[0], 4.0)
    assert over == 0, worst


def test_a_roped_tile_holds_pairs_and_its_maps() -> None:
    """Q's and K's tiles hold pairs (`tiling.rope_pairs`): 64 x 16 at D = 64, the columns j·8.. and
    32 + j·8.. of a head; the weight's map runs (K, rows, halves 32 rows apart), its box 8 rows of
    each half; the output map (D, heads, rows[, layers]) with a warpgroup's box (8, 1, 64), the second
    warpgroup's block stored D / 2 on (`rope_pair` = D / 16); the tables' box both planes of both
    halves' columns, A's rows."""
    g = _small(3, head_dim=64)
    s = build(g, "sm_90a", glu=True, norm=True, rope=True)
    enc = encode(s)
    fields = decode(enc.words)
    seen = set()
    for ins, f in zip(s.instrs, fields):
        n = s.program.nodes[ins.node]
        if n.kind != "gemm" or n.glu or not n.norm:
            continue
        tm, tn = s.tilings[ins.node].extents
        seen.add(ins.node)
        if n.rope:
            assert (tm, tn, f["rope_pair"]) == (64, 16, 4)
            (n0, n1) = ins.box[1]
            h, j = n0 // 64, n0 % 64 // 16
            boxes = [acc.box[-1] for acc in ins.writes]
            assert boxes == [(8 * j, 8 * j + 8), (32 + 8 * j, 32 + 8 * j + 8)]
            assert all(acc.box[-2] == (h, h + 1) for acc in ins.writes)
            out, b, tab = (enc.maps[f[f"op{k}.tmap"]].tma for k in (0, 2, 3))
            assert out.box[:3] == (8, 1, 64) and (f["op0.coord0"], f["op0.coord1"]) == (8 * j, h)
            assert b.box[:3] == (64, 8, 2) and b.strides[1] == 32 * b.strides[0]
            assert f["op2.coord1"] == 64 * h + 8 * j
            assert tab.box == (8, 2, 8, 2) and (f["op3.row_stride"], f["op3.col_stride"]) == (16, 1)
            assert Gemm().refuse(f) is None
        else:  # V into its cache: a tile within one head
            assert tm == 64 and 64 % tn == 0 and len(ins.writes) == 1
    assert len(seen) == 6  # two layers of Q, K, V


def _rope_fields() -> dict[str, int]:
    s = build(_small(3, head_dim=64), "sm_90a", glu=True, norm=True, rope=True)
    fields = decode(encode(s).words)
    return next(f for ins, f in zip(s.instrs, fields) if s.program.nodes[ins.node].rope)


@pytest.mark.parametrize("change,why", [
    ({"bias": 1}, "a roped gemm with an epilogue of its own"),
    ({"activation": 2}, "a roped gemm with an epilogue of its own"),
    ({"op3.box_16": 8}, "a roped gemm whose tables' box is 128 bytes"),
    ({"op3.col_stride": 2}, "a roped gemm whose tables' box"),
])
def test_the_body_refuses_roped_fields_it_does_not_take(change: dict[str, int], why: str) -> None:
    f = _rope_fields()
    assert Gemm().refuse(f) is None
    assert why in (Gemm().refuse({**f, **change}) or "")


def test_a_roped_projection_is_clean_with_values() -> None:
    """The sm_90a program of one normed projection roped in its epilogue (pair tiles, the weight
    copies chunked along the map's fourth dimension) through the host checker with values (~5 s)."""
    pr = mega.MegaProblem(PROJ)
    cfg = mega.choose(pr)
    assert cfg.rope
    f = decode(encode(mega.plan(pr, cfg).schedule).words)
    assert any(x["rope"] and x["rope_pair"] and x["op2.rank"] == 4 for x in f)
    rep = mega.check_launch(pr, cfg, coloured=False)
    assert rep.ok, rep.text()
    assert rep.values_checked == 2 * 4 * 64 and rep.values_wrong == 0


@pytest.mark.skipif(not SLOW, reason="WARPY_SLOW=1 (~1 min)")
def test_decoder_small_with_rope_is_clean_with_values() -> None:
    """The sm_90a program (every CTA of two units: Q and K roped in their epilogues, pair tiles, K and V
    written into the caches by their projections) through the host checker with values."""
    pr = mega.MegaProblem("decoder-small")
    rep = mega.check_launch(pr, mega.configure(pr, "rope=1"), coloured=False)
    assert rep.ok, rep.text()
    assert rep.values_checked == 3 * 128 and rep.values_wrong == 0


@pytest.mark.skipif(not SLOW, reason="WARPY_SLOW=1 (~40 s a seed)")
@pytest.mark.parametrize("seed", [0, 1])
def test_chunked_pair_tiles_are_clean_with_values(seed: int) -> None:
    """K 640: a pair tile's weight copies take a stage's ten K boxes at once along the map's fourth
    dimension (the loader's K shift moves past the halves)."""
    pr = mega.MegaProblem(CHUNKED)
    cfg = mega.configure(pr, "rope=1")
    f = decode(encode(mega.plan(pr, cfg).schedule).words)
    assert any(x["rope"] and x["op2.rank"] == 4 and x["k_step"] == 640 for x in f)
    rep = mega.check_launch(pr, cfg, coloured=False, seed=seed)
    assert rep.ok, rep.text()
    assert rep.values_wrong == 0
