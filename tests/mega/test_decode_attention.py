"""Decode attention on the megakernel's host side: the cache append (a copy into a view of the cache,
which becomes launch state), the split into partials and their combine, the split rule, the
encoding, the validator, the reference VM against numpy, the mutation suite, one-line refusals."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.errors import WarpyError
from warpy.mega import build, encode, validate, vm
from warpy.mega import fields as F
from warpy.mega import semantics as S
from warpy.mega.encode import decode
from warpy.mega.examples import decode_attention
from warpy.mega.graph import Graph
from warpy.mega.mutate import suite
from warpy.mega.tiling import (ATTENTION_MAX_BOXES, ATTENTION_ROW_ALIGN, COMBINE_MAX_BOXES, COSTS, PAGE_BYTES,
                               attention_split, partial_cost)
from warpy.target import target


def _softmax_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, length: int, scale: float,
                       causal: bool) -> np.ndarray:
    """An independent float64 reference: per query head, softmax over the visible rows."""
    t, hq, d = q.shape
    g = hq // k.shape[1]
    out = np.zeros((t, hq, d))
    for i in range(t):
        last = length - t + i if causal else length - 1
        for h in range(hq):
            s = np.array([float(np.dot(q[i, h].astype(np.float64), k[j, h // g].astype(np.float64))) * scale
                          for j in range(last + 1)])
            w = np.exp(s - s.max())
            out[i, h] = (w[:, None] * v[:last + 1, h // g].astype(np.float64)).sum(0) / w.sum()
    return out


def _run(g: Graph, mode: str = "static", seed: int = 0, units: int | None = None,  # type: ignore[no-untyped-def]
         fresh: bool = False):
    s = build(g, "sm_90a", mode, units, fresh=fresh)
    assert validate(s).ok, validate(s).lines()
    inputs = g.random_inputs(seed)
    out = vm.run(s, inputs, seed=seed + 1, calls=2)
    assert out.ok, out.hang + out.races
    return s, inputs, out


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_attn_small_vm_equals_numpy(mode: str) -> None:
    g = decode_attention()
    s, inputs, out = _run(g, mode)
    assert [n.kind for n in s.program.nodes] == ["unary", "unary", "attention", "attention_combine"]
    ref = s.program.run(inputs)
    assert np.array_equal(out.outputs[0], ref[s.program.outputs[0]])
    # the caches as the call leaves them: the new rows at length - T.., the rest the caller's
    for name, new in (("k_cache", "k_new"), ("v_cache", "v_new")):
        want = inputs[name].copy()
        want[69:72] = inputs[new]
        assert np.array_equal(out.state[name], want)
    # the split (fp32 partials) is within a bf16 step of softmax in float64 on the whole op
    direct = _softmax_attention(inputs["q"], out.state["k_cache"], out.state["v_cache"], 72, 1 / 8, True)
    assert np.max(np.abs(out.outputs[0] - direct)) <= 2 ** -8 * max(1.0, float(np.abs(direct).max()))
    assert np.array_equal(g.evaluate(inputs)[0], S.store(direct, "bf16")) or \
        np.max(np.abs(g.evaluate(inputs)[0] - direct)) <= 2 ** -8


def test_attn_small_schedule_golden() -> None:
    """72 rows of which 3 appended: 2 chunks of 64 per KV head (the split rule, `attention_split`:
    whole key blocks); only the last chunk (rows 64..71) reads appended rows, so only its tiles wait
    (on the appends' counters); the other is early."""
    s = build(decode_attention(), "sm_90a")
    part, comb = s.program.nodes[2], s.program.nodes[3]
    assert (part.splits, part.chunk, part.group, part.tokens) == (2, 64, 2, 3)
    assert s.program.tensors[part.out].shape == (2, 2, 6, 68) and s.program.tensors[part.out].dtype == "fp32"
    appends = {c.id for c in s.counters if c.producer in (0, 1)}
    for ins in s.instrs:
        if ins.node == 2:
            chunk = ins.box[1][0]
            waits = {w.counter for w in ins.waits}
            assert (chunk == 1) == bool(waits) and waits <= appends
            assert ins.early == ((0, 1, 2) if chunk < 1 else (0,))
        if ins.node == 3:  # a combine tile waits for every chunk of its head
            (c,) = [w.counter for w in ins.waits]
            assert sorted(s.instrs[m].box[1][0] for m in s.counters[c].members) == [0, 1]
            assert {s.instrs[m].box[0] for m in s.counters[c].members} == {(ins.box[1][0] // 2, ins.box[1][0] // 2 + 1)}
    assert len([i for i in s.instrs if i.node == 3]) == 3 * 2
    assert comb.describe() == "attention combine of 2"


def test_attention_instruction_fields() -> None:
    s = build(decode_attention(), "sm_90a")
    enc = encode(s)
    fs = decode(enc.words)
    part = [(i, f) for i, f in zip(s.instrs, fs) if i.node == 2]
    i, f = next((i, f) for i, f in part if i.box[:2] == ((1, 2), (1, 2)))
    assert f["opcode"] == F.ATTENTION and f["n_operands"] == 4
    assert (f["tile_m"], f["tile_n"], f["group"], f["causal"]) == (6, 64, 2, 1)
    assert (f["k_begin"], f["k_end"], f["k_step"], f["k_stages"]) == (64, 72, 64, 1)
    assert f["scale"] == F.fp32_bits(1 / 8 / math.log(2))
    assert f["early"] == 0b0010  # q (slot 1) only: this chunk holds appended rows
    # q: 3 tokens x 2 heads x 64; k and v: 64 rows x 64 of one head; the partial: 6 rows x 68 fp32
    assert (f["op1.box_16"] * 16, f["op2.box_16"] * 16, f["op3.box_16"] * 16, f["op0.box_16"] * 16) == \
        (3 * 2 * 64 * 2, 64 * 64 * 2, 64 * 64 * 2, 6 * 68 * 4)
    assert [f[f"op0.coord{c}"] for c in range(4)] == [0, 0, 1, 1]  # W, rows, chunk 1, head 1
    assert [f[f"op2.coord{c}"] for c in range(3)] == [0, 1, 64]  # D, head 1, row 64
    c = next(f for i, f in zip(s.instrs, fs) if i.node == 3 and i.box[:2] == ((2, 3), (2, 4)))
    assert c["opcode"] == F.ATTENTION_COMBINE and (c["tile_m"], c["tile_n"], c["k_end"], c["k_step"], c["k_stages"]) == \
        (2, 64, 2, 2, 1)
    assert [c[f"op1.coord{k}"] for k in range(4)] == [0, 4, 0, 1]  # W, rows of token 2, chunk 0, head 1
    a = next(f for i, f in zip(s.instrs, fs) if i.node == 0 and i.box == ((2, 3), (1, 2), (0, 64)))
    t0 = enc.maps[a["op0.tmap"]]
    assert a["opcode"] == F.UNARY and t0.offset == 69 * 2 * 64 * 2 and t0.tma.dims == (64, 2, 3)
    assert [a[f"op0.coord{k}"] for k in range(3)] == [0, 1, 2]  # within the appended rows' view


@pytest.mark.parametrize("arch,tokens,length,golden", [
    ("sm_90a", 1, 1024, (8, 128, 128, 1)), ("sm_90a", 16, 1024, (8, 128, 128, 1)),
    ("sm_90a", 1, 8192, (16, 512, 256, 2)), ("sm_90a", 1, 32768, (64, 512, 256, 2)),
    ("sm_100a", 1, 1024, (8, 128, 128, 1)), ("sm_100a", 1, 8192, (16, 512, 256, 2)),
])
def test_split_rule_golden(arch: str, tokens: int, length: int, golden: tuple[int, int, int, int]) -> None:
    """Llama-3.2-1B (32 query heads, 8 KV heads, head_dim 64) on the H200's 132 SMs: at 1k 8 chunks of
    128 rows with 1 or 16 tokens (the combine's walk over the chunks against the partial's blocks,
    whose wgmma computes 64 rows whatever T is); 8k in 128 tiles of two boxes, one wave; 32k in
    chunks of two boxes (what the sm_90a body holds), four waves. sm_100a (neither cost measured
    there: the bytes alone) cuts a short cache until its tiles fill the clusters; chunks are whole
    key blocks of 64 rows."""
    sp = attention_split(tokens, 32, 8, 64, length, target(arch))
    assert (sp.splits, sp.chunk, sp.box_rows, sp.boxes) == golden


@pytest.mark.parametrize("rows,keys,d,golden", [(4, 128, 64, 2.4842869333e-06), (4, 65, 64, 2.0362869333e-06),
                                                (64, 512, 64, 7.4704810667e-06), (4, 256, 128, 6.3464810667e-06)])
def test_the_partial_tile_cost(rows: int, keys: int, d: int, golden: float) -> None:
    """A partial tile's estimate on sm_90a: 1 µs, its bytes at 36 GB/s, its key blocks of 64 (a
    partly filled block costs a whole one) on the tensor cores (S and P·V of 64 padded rows) and the
    warpgroups' alternate blocks at 0.25 µs each: (4, 128, 64) is 1 + 0.955 + 0.280 + 0.25 µs."""
    assert partial_cost(COSTS["wgmma"], rows, keys, d, 2) == pytest.approx(golden, rel=1e-9)


@settings(derandomize=True, max_examples=150, deadline=None)
@given(st.integers(1, 16), st.sampled_from([(8, 8), (32, 8), (16, 2), (4, 1), (64, 8)]), st.sampled_from([64, 128]),
       st.integers(16, 40000), st.sampled_from(["sm_90a", "sm_100a"]))
def test_split_rule_properties(tokens: int, heads: tuple[int, int], d: int, length: int, arch: str) -> None:
    hq, hkv = heads
    length = max(length, tokens)
    sp = attention_split(tokens, hq, hkv, d, length, target(arch))
    assert (sp.splits - 1) * sp.chunk < length <= sp.splits * sp.chunk  # the chunks cover the rows, none empty
    assert sp.chunk == sp.boxes * sp.box_rows and sp.box_rows % ATTENTION_ROW_ALIGN == 0
    assert sp.box_rows * d * 2 <= PAGE_BYTES and sp.box_rows <= 256  # a box fits a page
    assert 1 <= sp.splits <= 256 and 1 <= sp.combine_box <= sp.splits
    assert sp.combine_box * (hq // hkv) * (d + 4) * 4 <= PAGE_BYTES or sp.combine_box == 1
    units = target(arch).sms // (2 if arch == "sm_100a" else 1)
    if hkv == 8 and hq <= 32 and length >= units * ATTENTION_ROW_ALIGN:
        # a long cache at Llama-like shapes: one wave of partial tiles while two-box chunks allow it;
        # where the model has no cost for the combine's walk over the chunks (sm_100a: not measured),
        # the tiles fill the SMs (with few query rows a head the combine's bytes do not hold the split
        # back; the chunks are whole key blocks of 64 rows)
        assert hkv * sp.splits <= units or sp.boxes == ATTENTION_MAX_BOXES
        if COSTS[target(arch).unit].combine_chunk == 0:
            assert units * 3 // 4 < hkv * sp.splits
    if d == 64 and hq // hkv <= 4:  # what the sm_90a bodies hold is always found here
        assert sp.boxes <= ATTENTION_MAX_BOXES and -(-sp.splits // sp.combine_box) <= COMBINE_MAX_BOXES


@settings(derandomize=True, max_examples=25, deadline=None)
@given(st.integers(1, 5), st.sampled_from([(2, 1), (4, 2), (3, 3), (6, 2)]), st.sampled_from([8, 64]),
       st.integers(0, 60), st.integers(0, 9), st.booleans(), st.integers(0, 3))
def test_split_equals_softmax(tokens: int, heads: tuple[int, int], d: int, past: int, spare: int, causal: bool,
                              seed: int) -> None:
    """Any (T, GQA ratio, head_dim, length, causal): the VM equals Program.reference exactly, and both
    are within a bf16 step of an independent float64 softmax; the cache holds the new rows."""
    hq, hkv = heads
    length = past + tokens
    g = decode_attention(tokens, hq, hkv, d, length, length + spare, causal, name="p")
    s, inputs, out = _run(g, "static", seed, units=4)
    assert np.array_equal(out.outputs[0], s.program.reference(inputs)[0])
    direct = _softmax_attention(inputs["q"], out.state["k_cache"], out.state["v_cache"], length, 1 / math.sqrt(d),
                                causal)
    assert np.max(np.abs(out.outputs[0] - direct)) <= 2 ** -8 * max(1.0, float(np.abs(direct).max()))


def test_partial_golden() -> None:
    """One query, two rows, scale 1 (log2 e in base 2): m is the larger score x log2 e rounded to fp32,
    l and O the weights 2^(s - m) summed; a row seeing no row of the chunk is (0, -inf, 0)."""
    q = np.array([[[1.0, 0.0]]], dtype=np.float32)
    k = np.array([[2.0, 5.0], [1.0, -1.0]], dtype=np.float32)
    v = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    p = S.attention_partial(q, k, v, 0, 2, 1.0, False)
    m = float(np.float32(2 * S.LOG2E))
    w = [2.0 ** (2 * S.LOG2E - m), 2.0 ** (S.LOG2E - m)]  # e^0 and e^-1, relative to the rounded max
    assert p.shape == (1, 6) and p[0, 2] == np.float32(m)
    assert list(p[0, :2]) == [np.float32(w[0] + 3 * w[1]), np.float32(2 * w[0] + 4 * w[1])]
    assert p[0, 3] == np.float32(w[0] + w[1]) and list(p[0, 4:]) == [0.0, 0.0]
    np.testing.assert_allclose(p[0, 3], 1 + math.exp(-1.0), rtol=1e-6)
    none = S.attention_partial(q, k, v, 5, 6, 1.0, True)  # rows 5, 6; the one query (position 5) sees row 5
    assert none[0, 3] == 1.0 and none[0, 0] == 1.0
    hidden = S.attention_partial(np.zeros((2, 1, 2), np.float32), k[:1], v[:1], 7, 8, 1.0, True)  # query 0 at 6
    assert list(hidden[0]) == [0.0, 0.0, -np.inf, 0.0, 0.0, 0.0] and hidden[1, 3] == 1.0
    comb = S.attention_combine(np.stack([p, hidden[:1]]), 2, "bf16")  # an empty chunk weighs nothing
    assert np.array_equal(comb, S.store((p[:, :2] / p[0, 3]).astype(np.float64), "bf16"))


def test_mutation_suite_on_attention() -> None:
    scheds = [(f"attn/{m}", build(decode_attention(2), mode=m, units=4)) for m in ("static", "dynamic")]
    rep = suite(scheds, 60, 0)
    t = rep.total
    assert t.mutants >= 100 and t.bad > 0 and not t.missed and not t.over_rejected and not rep.valid_rejected


def test_buffers_hold_one_element_type() -> None:
    """The fp32 partials never take a bf16 intermediate's buffer (nor give theirs to one): the launch
    declares each buffer's element type. On 4 units, a bf16 temp dead before the attention is large
    enough for its partials and a full wave behind."""
    g = Graph("mixed")
    t0 = g.relu(g.input("big", (64, 256)), name="t0")
    t1 = g.relu(t0, name="t1")
    x = g.relu(g.input("x", (2, 4, 64)), name="q")  # (8 tiles: t0 is then a full wave behind)
    o = g.attention(x, g.input("k", (40, 2, 64)), g.input("v", (40, 2, 64)), 40, name="o")
    g.output(t1, g.relu(o, name="h"))
    s, inputs, out = _run(g, units=4)
    assert [(r.old, r.new) for r in s.reuses] == [(4, 8)]  # o (bf16) in t0's buffer; not o_part (fp32)
    for b in s.buffers:
        assert len({s.program.tensors[t].dtype for t in b.tensors}) == 1, [s.program.tensors[t] for t in b.tensors]
    assert all(np.array_equal(a, b) for a, b in zip(out.outputs, s.program.reference(inputs)))


def test_llama_shapes_schedule() -> None:
    for length in (1024, 8192):
        g = decode_attention(16, 32, 8, 64, length, 8192, name="l")
        s = build(g, "sm_90a")
        assert validate(s).ok
        part = [i for i in s.instrs if i.node == 2]
        assert len(part) == (64 if length == 1024 else 128) and len(encode(s).words) == len(s.instrs)
        # one chunk per head holds the 16 appended rows and waits; the rest are early
        assert sum(1 for i in part if i.waits) == 8


def _graph(fn: Callable[..., object]) -> Graph:
    g = Graph("bad")
    q = g.input("q", (2, 4, 64))
    kc = g.input("kc", (32, 2, 64))
    vc = g.input("vc", (32, 2, 64))
    kn = g.input("kn", (2, 2, 64))
    fn(g, q, kc, vc, kn)
    return g


@pytest.mark.parametrize("fn,msg", [
    (lambda g, q, kc, vc, kn: g.attention(q, g.input("k3", (32, 3, 64)), g.input("v3", (32, 3, 64)), 8),
     "attention's 3 KV heads do not divide its 4 query heads"),
    (lambda g, q, kc, vc, kn: g.attention(q, kc, vc, 33), "attention's length 33 is not between the 2 queries and the "
     "caches' 32 rows"),
    (lambda g, q, kc, vc, kn: g.attention(q, kc, vc, 8, scale=0.0), "attention's scale is a finite number > 0"),
    (lambda g, q, kc, vc, kn: g.attention(q, kc, g.input("v2", (32, 2, 32)), 8), "attention's k and v caches differ"),
    (lambda g, q, kc, vc, kn: g.cache_append(kc, kn, at=31), "cache_append at row 31 of 2 rows does not fit a cache "
     "of 32 rows"),
    (lambda g, q, kc, vc, kn: g.cache_append(g.relu(kc), kn, at=0), "cache_append writes into a graph input (or a "
     "view of one), not into relu0"),
    (lambda g, q, kc, vc, kn: g.cache_append(kc, g.input("k5", (2, 2, 32)), at=0), "the rows' shape past the first"),
])
def test_refusals_in_one_line(fn, msg: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(WarpyError) as e:
        _graph(fn)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_old_cache_reads_refused() -> None:
    """The cache after an append is read through the append's result: reading the input again (its
    old value) is refused where it touches the appended rows, allowed where it does not."""
    def both(g, q, kc, vc, kn):  # type: ignore[no-untyped-def]
        k = g.cache_append(kc, kn, at=6)
        g.output(g.attention(q, k, vc, 8), g.relu(kc[6]))

    with pytest.raises(WarpyError, match="cache kc is read after cache_append writes into it"):
        build(_graph(both))

    def stacked(g, q, kc, vc, kn):  # type: ignore[no-untyped-def]
        ks = g.input("ks", (2, 32, 2, 64))
        k = g.cache_append(ks[0], kn, at=6)
        g.output(g.attention(q, k, vc, 8), g.relu(ks[0, 7], name="old"), g.relu(ks[1, 7], name="other"))

    with pytest.raises(WarpyError, match="old reads rows of ks that cache_append writes, not through the append"):
        build(_graph(stacked))

    def layer(g, q, kc, vc, kn):  # type: ignore[no-untyped-def]
        ks = g.input("ks", (2, 32, 2, 64))
        k = g.cache_append(ks[1], kn, at=6)
        g.output(g.attention(q, k, vc, 8), g.relu(ks[0, 7], name="other"))

    g = _graph(layer)
    s, inputs, out = _run(g, units=4)
    assert all(np.array_equal(a, b) for a, b in zip(out.outputs, s.program.reference(inputs)))
    assert np.array_equal(out.state["ks"][1, 6:8], inputs["kn"]) and np.array_equal(out.state["ks"][0], inputs["ks"][0])


@settings(derandomize=True, max_examples=20, deadline=None)
@given(st.integers(1, 5), st.sampled_from([(2, 1), (4, 2), (3, 3)]), st.sampled_from([8, 64]),
       st.integers(1, 60), st.integers(0, 9), st.booleans(), st.integers(0, 3))
def test_fresh_rows_split_equals_softmax(tokens: int, heads: tuple[int, int], d: int, past: int, spare: int,
                                         causal: bool, seed: int) -> None:
    """`fresh`: the old rows (every query sees them all: not causal) and the appended rows (causal among
    themselves) as two partial nodes writing one partials tensor, the combine over both; the VM equals
    Program.reference exactly and both are within a bf16 step of the float64 softmax; the old rows'
    K and V reads are early (nothing in the launch writes them), the appended rows' are not."""
    hq, hkv = heads
    length = past + tokens
    g = decode_attention(tokens, hq, hkv, d, length, length + spare, causal, name="p")
    s, inputs, out = _run(g, "static", seed, units=4, fresh=True)
    parts = [n for n in s.program.nodes if n.kind == "attention"]
    assert [(n.length, n.causal) for n in parts] == [(past, False), (tokens, causal)]
    comb = [n for n in s.program.nodes if n.kind == "attention_combine"][0]
    assert comb.splits == parts[0].splits + parts[1].splits == s.program.tensors[comb.operands[0].tensor].shape[1]
    for ins in s.instrs:
        if ins.node == parts[0].id:
            assert {1, 2} <= set(ins.early)
        elif ins.node == parts[1].id:
            assert not {1, 2} & set(ins.early)
    assert np.array_equal(out.outputs[0], s.program.reference(inputs)[0])
    direct = _softmax_attention(inputs["q"], out.state["k_cache"], out.state["v_cache"], length, 1 / math.sqrt(d),
                                causal)
    assert np.max(np.abs(out.outputs[0] - direct)) <= 2 ** -8 * max(1.0, float(np.abs(direct).max()))


def test_fresh_rows_only_where_every_old_row_is_seen() -> None:
    """`lower.fresh_rows`: the row the appends start at where both caches were appended there, the
    appended rows end the attended ones and every query sees every row before them; else 0 (one
    partial node): causal attention of more queries than appended rows (query 0 does not see the
    last old row), or a cache never appended to."""
    from warpy.mega.lower import fresh_rows

    def attention(tokens: int, new: int, causal: bool, append: bool = True):  # type: ignore[no-untyped-def]
        g = Graph("f")
        q = g.input("q", (tokens, 2, 8))
        kc, vc = g.input("k_cache", (32, 1, 8)), g.input("v_cache", (32, 1, 8))
        if append:
            kc = g.cache_append(kc, g.input("k_new", (new, 1, 8)), at=20)
            vc = g.cache_append(vc, g.input("v_new", (new, 1, 8)), at=20)
        return g.attention(q, kc, vc, length=20 + new, causal=causal)

    assert fresh_rows(attention(3, 3, True)) == 20
    assert fresh_rows(attention(3, 3, False)) == 20
    assert fresh_rows(attention(2, 4, True)) == 20  # query 0 sees the rows below 20 + 4 - 2 + 1 = 23
    assert fresh_rows(attention(3, 1, False)) == 20  # not causal: every query sees every row
    assert fresh_rows(attention(3, 1, True)) == 0  # query 0 sees the rows below 20 + 1 - 3 + 1 = 19
    assert fresh_rows(attention(3, 3, True, append=False)) == 0
