"""A decode layer whose K (768 = 12 K boxes) is whole K boxes, for the sm_90a gemm's chunked copies
(`warpy.mega.encode._k_chunk`: a stage's 10 K boxes in one copy an operand, the second stage's
chunks 12..19 past K, zero-filled): small enough for the host checker on every CTA
(tests/kernels/test_mega.py)."""

from warpy.mega.examples import mlp


def build(tokens=None):  # type: ignore[no-untyped-def]
    return mlp(tokens or 5, 768, 1, name="mlp-chunked")
