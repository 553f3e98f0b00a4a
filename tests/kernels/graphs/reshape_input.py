"""Reshape views of inputs: a (T, H, D) input merged to (T, H·D) for a gemm (its tensor takes the
caller's array as (T, H·D)), and split again into heads for a rope with its tables."""

from warpy.mega.graph import Graph


def build(tokens=3):
    g = Graph("reshape_input")
    x = g.input("x", (tokens, 4, 64))
    w = g.input("w", (128, 256))
    c, s = g.input("cos", (tokens, 64)), g.input("sin", (tokens, 64))
    y = g.linear(g.reshape(x, (tokens, 256)), w, name="y")
    g.output(y, g.rope(g.reshape(y, (tokens, 2, 64)), c, s, name="r"))
    return g
