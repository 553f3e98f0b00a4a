"""Two SwiGLU halves for the fused gate/up gemm (`MegaConfig(glu=True)`): one over graph weights
(early operands: the loader arms its stages and copies both weights before the counter waits) and
one whose weights the launch writes first (gate + a delta: copied after the waits, with A), one
whose gate weight is the graph's and up weight the launch's (not armed early: both weights must be),
each with K = 448 (7 K boxes: two stages of a decode tile, the second past K, zero-filled), and a
72-column one with a ragged K of 200 (one copy a K box); small enough for the host checker on every
CTA (tests/kernels/test_mega_glu.py)."""

from warpy.mega.graph import Graph


def build(tokens=None):  # type: ignore[no-untyped-def]
    g = Graph("glu-staged")
    t = tokens or 3
    x = g.input("x", (t, 448))
    wg, wu, dw = g.input("wg", (40, 448)), g.input("wu", (40, 448)), g.input("dw", (40, 448))
    a1 = g.silu_mul(g.linear(x, wg), g.linear(x, wu), name="a1")
    wg2 = g.add(wg, dw, name="wg2")
    wu2 = g.add(wu, dw, name="wu2")
    a2 = g.silu_mul(g.linear(x, wg2), g.linear(x, wu2), name="a2")
    a4 = g.silu_mul(g.linear(x, wg), g.linear(x, wu2), name="a4")
    z = g.input("z", (t, 200))
    vg, vu = g.input("vg", (72, 200)), g.input("vu", (72, 200))
    a3 = g.silu_mul(g.linear(z, vg), g.linear(z, vu), name="a3")
    g.output(g.add(g.add(a1, a2), a4, name="y"), a3)
    return g
