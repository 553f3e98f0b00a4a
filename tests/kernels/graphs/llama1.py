"""A graph for the sm_100a bodies' tests (tests/kernels/test_mega_sm100.py), small enough for the
host checker: one Llama-style MLP layer, x + down(silu(gate(h)) · up(h)) with h = rmsnorm(x), at 4
tokens, hidden 40 and intermediate 48 (every body of the stack: rmsnorm, gemm without and with a
residual, silu_mul; gemm tiles of 128x16, ragged K and N)."""

from warpy.mega.examples import llama_mlp


def build(tokens=None):  # type: ignore[no-untyped-def]
    return llama_mlp(tokens or 4, hidden=40, intermediate=48, layers=1, name="llama1")
