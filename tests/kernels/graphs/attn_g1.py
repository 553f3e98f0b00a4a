"""Decode attention without grouping (G = 1: one query row a tile at T = 1, the wgmma's other 63
rows zeros, never written) at a cache length that is no multiple of 16 or 32 (77 of 96 rows: a key
block past the length), head_dim 64, causal, for the sm_90a attention body's tests
(tests/kernels/test_mega_attention.py, tests/gpu/test_mega_attention_gpu.py)."""

from warpy.mega.examples import decode_attention


def build(tokens=None):  # type: ignore[no-untyped-def]
    return decode_attention(tokens or 1, 2, 2, 64, 77, 96, name="attn-g1")
