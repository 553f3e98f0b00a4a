"""One decoder layer whose projections' K (640) is whole stages of K boxes: the roped pair tiles'
weight copies are chunked (a stage's ten K boxes in one copy, along the map's fourth dimension after
the halves), tests/kernels/test_mega_rope_fused.py."""

from warpy.mega.examples import llama_decoder


def build(tokens: int = 2):
    return llama_decoder(tokens, hidden=640, heads=4, kv_heads=2, head_dim=64, intermediate=128, layers=1, length=40,
                         cache_rows=48, name="rope-chunked")
