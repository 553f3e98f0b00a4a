"""A decode gemm whose K (768 = 12 K boxes) is whole K boxes, for the sm_90a gemm's chunked copies
(`warpy.mega.encode._k_chunk`: a stage's 10 K boxes in one copy an operand, the second stage's
chunks 12..19 past K, zero-filled), with a bias and relu: small enough for the host checker on every
CTA in the default run (tests/kernels/test_mega.py)."""

from warpy.mega.graph import Graph


def build(tokens=None):  # type: ignore[no-untyped-def]
    g = Graph("mlp-chunked")
    x = g.input("x", (tokens or 5, 768))
    w = g.input("w", (48, 768))
    b = g.input("b", (48,))
    g.output(g.relu(g.linear(x, w) + b, name="h"))
    return g
