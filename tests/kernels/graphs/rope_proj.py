"""One normed projection roped in its epilogue (`MegaConfig.rope`): K 640 (the pair tiles' weight
copies chunked), 4 heads of 64, T = 2; tests/kernels/test_mega_rope_fused.py."""

from warpy.mega.graph import Graph


def build(tokens: int = 2) -> Graph:
    g = Graph("rope-proj")
    x = g.input("x", (tokens, 640))
    nw = g.input("nw", (640,))
    w = g.input("w", (256, 640))
    cos, sin = g.input("cos", (tokens, 64)), g.input("sin", (tokens, 64))
    h = g.rmsnorm(x, nw, 1e-5, name="h")
    y = g.linear(h, w, name="y")
    g.output(g.rope(g.reshape(y, (tokens, 4, 64)), cos, sin, name="r"))
    return g
