"""Decode attention whose combine reads its partials in more than one box (8 chunks, 7 a page at G 8
and head_dim 128; three boxes: graphs/attn_chunks40.py), one KV head for 8 query heads, T = 2 causal, 2000 of a 2048-row cache (a ragged last
chunk): for the sm_90a attention bodies' tests (tests/kernels/test_mega_attention.py,
tests/gpu/test_mega_attention_gpu.py)."""

from warpy.mega.examples import decode_attention


def build(tokens=None):  # type: ignore[no-untyped-def]
    return decode_attention(tokens or 2, 8, 1, 128, 2000, 2048, name="attn-combine3")
