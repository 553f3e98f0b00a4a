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
