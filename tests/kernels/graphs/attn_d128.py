"""Decode attention at head_dim 128 for the sm_90a attention bodies' tests (tests/kernels/test_mega_attention.py,
tests/gpu/test_mega_attention_gpu.py): 8 query heads on 2 KV heads (G 4), T = 5 queries, not causal,
300 of a 320-row cache (a ragged last chunk), small enough for the host checker."""

from warpy.mega.examples import decode_attention


def build(tokens=None):  # type: ignore[no-untyped-def]
    return decode_attention(tokens or 5, 8, 2, 128, 300, 320, causal=False, name="attn-d128")
