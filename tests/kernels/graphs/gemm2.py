"""A graph for the sm_100a gemm body's tests (tests/kernels/test_mega_sm100.py), small enough for the
host checker: two gemms, the second reading the first, so that each unit runs gemm after gemm (the
tensor-memory token handed from one to the next, in both CTAs of the pair); a bias with relu, a
residual; K of 72 (two stages, the second ragged) and 64; 16 rows of a 128-row tile (CTA 1's rows
all past x: zero-filled copies, clipped stores); N of four and two 16-column tiles."""

from warpy.mega.graph import Graph


def build(tokens=None):  # type: ignore[no-untyped-def]
    t = tokens or 16
    g = Graph("gemm2")
    x = g.input("x", (t, 72))
    w1 = g.input("w1", (64, 72))
    b1 = g.input("b1", (64,))
    w2 = g.input("w2", (32, 64))
    r = g.input("r", (t, 32))
    h = g.relu(g.linear(x, w1) + b1, name="h")
    g.output(g.add(g.linear(h, w2), r, name="y"))
    return g
