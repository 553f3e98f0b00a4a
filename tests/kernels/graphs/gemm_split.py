"""Two gemms of one tile shape whose A boxes differ (3 rows: 8-row boxes, K 768 whole K boxes, so
chunked copies; 20 rows: 24-row boxes, K 200, a copy a K box): the sm_90a consumers tell the two code
paths apart by A's box bytes and the instruction's k_step (`kernels/mega_gemm.py`, `split`); small
enough for the host checker on every CTA (tests/kernels/test_mega.py)."""

from warpy.mega.graph import Graph


def build(tokens=None):  # type: ignore[no-untyped-def]
    g = Graph("gemm-split")
    a = g.input("a", (tokens or 3, 768))
    b = g.input("b", (20, 200))
    w1 = g.input("w1", (48, 768))
    w2 = g.input("w2", (48, 200))
    g.output(g.linear(a, w1, name="y1"), g.linear(b, w2, name="y2"))
    return g
