"""Decode attention over a cache of 2555 rows (of 2560), one KV head for 2 query heads, T = 1: the
graph tests/kernels/test_mega_attention.py splits into 40 chunks of 64 rows by hand, so that the
combine walks more chunks than a warp has lanes."""

from warpy.mega.examples import decode_attention


def build(tokens=None):  # type: ignore[no-untyped-def]
    return decode_attention(tokens or 1, 2, 1, 64, 2555, 2560, name="attn-chunks40")
