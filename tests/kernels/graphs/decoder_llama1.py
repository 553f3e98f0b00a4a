"""One layer of the Llama-3.2-1B-shaped decoder stack (`warpy.mega.examples.llama_decoder`: hidden
2048, 32 query heads and 8 KV heads of 64, intermediate 8192) at context 1024 of a 1024-row cache, for
the host checker at full width (the 16-layer stack's weights are more than its memory model holds)."""

from warpy.mega.examples import llama_decoder


def build(tokens=None):
    return llama_decoder(tokens or 1, layers=1, length=1024, cache_rows=1024, name="decoder-llama1")
