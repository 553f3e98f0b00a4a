from warpy.mega.graph import Graph
def build(tokens=3):
    g = Graph("split1")
    x = g.input("x", (tokens, 128))
    w = g.input("w", (384, 128))
    c = g.input("cos", (tokens, 64)); s = g.input("sin", (tokens, 64))
    qkv = g.linear(x, w)
    q = g.rope(g.reshape(qkv[:, :256], (tokens, 4, 64)), c, s, name="q")
    v = g.relu(g.reshape(qkv[:, 256:], (tokens, 2, 64)), name="v")
    g.output(q, v)
    return g
