"""Decode attention at T = 16 (64 query rows a KV head: every row of the wgmma): 8 query heads on 2
KV heads, head_dim 64, causal, 200 of a 208-row cache (two chunks of 128 rows: a last chunk of 72
visible rows), for the sm_90a attention body's tests
(tests/kernels/test_mega_attention.py, tests/gpu/test_mega_attention_gpu.py)."""

from warpy.mega.examples import decode_attention


def build(tokens=None):  # type: ignore[no-untyped-def]
    return decode_attention(tokens or 16, 8, 2, 64, 200, 208, name="attn-t16")
