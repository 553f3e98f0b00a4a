"""Random small graphs of every supported op with random shapes (no divisibility: any extents TMA
can address) schedule, validate, encode and run on the reference VM (per-element race tracking on)
equal to numpy on the whole graph, in static and dynamic mode, on sm_90a and sm_100a."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.mega import Graph, build, encode, validate
from warpy.mega.vm import VM

dims = st.integers(1, 12).map(lambda k: 8 * k)  # innermost extents: 16-byte rows
rows = st.integers(1, 40)


@st.composite
def graphs(draw: st.DrawFn) -> Graph:
    g = Graph("random")
    m, k = draw(rows), draw(dims)
    vals = [g.input("x", (m, k))]
    n_in = [0]

    def inp(shape: tuple[int, ...]):  # type: ignore[no-untyped-def]
        n_in[0] += 1
        return g.input(f"in{n_in[0]}", shape)

    for _ in range(draw(st.integers(1, 6))):
        x = draw(st.sampled_from(vals[-3:]))
        op = draw(st.sampled_from(["linear", "matmul", "stacked", "add_row", "mul_col", "add_full", "act",
                                   "silu_mul", "rmsnorm", "slice"]))
        M, K = x.shape
        if op in ("linear", "matmul", "stacked"):
            n = draw(dims)
            if op == "linear":
                y = g.linear(x, inp((n, K)))
            elif op == "matmul":
                y = g.matmul(x, inp((K, n)))
            else:
                y = g.linear(x, inp((3, n, K))[draw(st.integers(0, 2))])
        elif op == "add_row":
            y = x + inp((K,))
        elif op == "mul_col":
            y = x * inp((M, 1))
        elif op == "add_full":
            y = g.add(x, draw(st.sampled_from([v for v in vals if v.shape == x.shape])))
        elif op == "act":
            y = getattr(g, draw(st.sampled_from(["relu", "silu", "gelu"])))(x)
        elif op == "silu_mul":
            y = g.silu_mul(x, inp((M, K)))
        elif op == "rmsnorm":
            y = g.rmsnorm(x, inp((K,)), draw(st.sampled_from([1e-6, 1e-5, 0.25])))
        else:
            lo = 8 * draw(st.integers(0, (K - 8) // 8))
            y = x[draw(st.integers(0, M - 1)):, lo:]
        vals.append(y)
    g.output(*draw(st.lists(st.sampled_from(vals[1:]), min_size=1, max_size=2)))
    return g


@settings(derandomize=True, max_examples=60, deadline=None)
@given(graphs(), st.sampled_from(["static", "dynamic"]), st.sampled_from(["sm_90a", "sm_100a"]),
       st.integers(1, 6), st.integers(0, 1000))
def test_random_graphs_on_the_vm(g: Graph, mode: str, arch: str, units: int, seed: int) -> None:
    s = build(g, arch, mode, units=units)
    p = validate(s)
    assert p.ok, p.lines()
    enc = encode(s)
    assert enc.words.shape == (len(s.instrs), 64)
    inputs = g.random_inputs(seed)
    ref = s.program.reference(inputs)
    machine = VM(s, values=True, races=True, seed=seed, epoch=1 + seed % 3)
    for _ in range(2):  # no reset between calls
        out = machine.run(inputs)
        assert out.ok, out.hang + out.races
        assert all(np.array_equal(a, b) for a, b in zip(out.outputs, ref))
    for a, b in zip(out.outputs, g.evaluate(inputs)):
        assert a.shape == b.shape
        assert np.max(np.abs(a - b)) <= 2 ** -4 * max(1.0, float(np.max(np.abs(b))))


def _filled(s, w) -> float:  # type: ignore[no-untyped-def]
    """When the schedule estimates a wait's counter full: its last member's estimated finish."""
    return max(s.finish[m] for m in s.counters[w.counter].members)


@settings(derandomize=True, max_examples=40, deadline=None)
@given(graphs(), st.sampled_from(["sm_90a", "sm_100a"]), st.integers(1, 6))
def test_waits_are_polled_in_the_order_their_counters_fill(g: Graph, arch: str, units: int) -> None:
    """The device polls an instruction's waits one after the other (each a round trip even when it
    already holds), so the schedule lists each stage's waits by when their counters are estimated to
    fill: the last to fill is polled last."""
    s = build(g, arch, "static", units=units)
    for ins in s.instrs:
        for stage in (False, True):
            times = [_filled(s, w) for w in ins.waits if w.before_store == stage]
            assert times == sorted(times)


def test_the_decoder_layer_polls_the_residual_before_the_level_just_done() -> None:
    """A golden case: in a Llama decoder layer (two layers, a short cache) the output projection and
    the down projection each wait on the level just before them and on the residual stream written a
    level or more earlier; the residual's counter comes first, the level just done last."""
    from warpy.mega.examples import llama_decoder

    s = build(llama_decoder(hidden=256, heads=4, kv_heads=2, head_dim=64, intermediate=512, layers=2, length=128),
              "sm_90a", "static")
    residual_gemms = [n for n in s.program.nodes if n.kind == "gemm" and n.residual]
    assert len(residual_gemms) == 4  # (output and down projections, two layers)
    two = set()
    for n in residual_gemms:
        a_writer = next(m.id for m in s.program.nodes if m.out == n.operands[0].tensor)
        for ins in (i for i in s.instrs if i.node == n.id):
            producers = [s.counters[w.counter].producer for w in ins.waits if not w.before_store]
            # (layer 0's output projection adds the graph's input x: nothing to wait for)
            assert producers[-1] == a_writer and producers[:-1] in ([], [min(producers)]), (n.id, producers)
            if len(producers) == 2:
                two.add(n.id)
    assert len(two) == 3
