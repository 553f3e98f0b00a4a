from warpy.mega.graph import Graph
def build(tokens=3):
    g = Graph("merge1")
    x = g.input("x", (tokens, 4, 64))
    w = g.input("w", (64, 256))
    h = g.relu(x, name="h")
    g.output(g.linear(g.reshape(h, (tokens, 256)), w, name="y"))
    return g
