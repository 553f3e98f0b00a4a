"""Decode attention over a cache of 1275 rows (of 1280), one KV head for 2 query heads, T = 1: the
graph tests/kernels/test_mega_attention.py splits into 40 chunks of 32 rows by hand, so that the
combine walks more chunks than a warp has lanes."""

from warpy.mega.examples import decode_attention


def build(tokens=None):  # type: ignore[no-untyped-def]
    return decode_attention(tokens or 1, 2, 1, 64, 1275, 1280, name="attn-chunks40")
