"""A decode rmsnorm read by two linears, one with a bias and a relu (`Node.norm`, sm_90a): both gemms
take the norm in (the rmsnorm is no node), K 520 (three boxes of the norm weight, the last one
partly past K; nine K boxes, the last one partly past K) and 3 rows; small enough for the host
checker with values on every CTA (tests/kernels/test_mega_norm.py)."""

from warpy.mega.graph import Graph


def build(tokens=None):  # type: ignore[no-untyped-def]
    g = Graph("norm-bias")
    x = g.input("x", (tokens or 3, 520))
    w = g.input("w", (520,))
    w1 = g.input("w1", (40, 520))
    b1 = g.input("b1", (40,))
    w2 = g.input("w2", (24, 520))
    h = g.rmsnorm(x, w, 1e-5, name="h")
    g.output(g.relu(g.add(g.linear(h, w1, name="y1"), b1), name="y1r"), g.linear(h, w2, name="y2"))
    return g
