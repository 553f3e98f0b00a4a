"""A fused gate/up gemm over a decode rmsnorm (the Llama MLP's first level): 128 columns of gate and
up over K = 320 (5 K boxes, the fused stage's 1 K box a stage), T = 1, small enough for the host
checker on every CTA with values. The tests force its tiles to 64x64 (the Llama MLP's) to prove the
warpgroups' K-step split (`MegaConfig.glu_split`): two accumulators of 64 x 64 through the exchange,
and the norm's row scale after it (tests/kernels/test_mega_ksplit.py)."""

from warpy.mega.graph import Graph


def build(tokens=None):  # type: ignore[no-untyped-def]
    g = Graph("glu-wide")
    x = g.input("x", (tokens or 1, 320))
    nw = g.input("nw", (320,))
    wg, wu = g.input("wg", (128, 320)), g.input("wu", (128, 320))
    h = g.rmsnorm(x, nw, 1e-5, name="h")
    g.output(g.silu_mul(g.linear(h, wg), g.linear(h, wu), name="y"))
    return g
