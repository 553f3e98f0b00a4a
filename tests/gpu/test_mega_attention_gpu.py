"""Decode attention through the sm_90a megakernel on an H200 (skipped without an sm_90 GPU): the
cache append and the attention of `warpy.mega.examples.decode_attention` on every SM, at the
Llama-3.2-1B shape (32 query heads, 8 KV heads, head_dim 64; context 1k, 8k and 32k, T = 1 and 16), the
small checker graph, head_dim 128, a combine of two boxes, one query row a tile (G = 1, a cache of 77
rows) and 64 (T = 16); every output element against an fp32 softmax of the inputs
(the caches with the new rows), and the caches as the launch leaves them: the new rows appended, the
caller's rows untouched. Three calls in a row (the counters carried over).

    python -m pytest -q tests/gpu/test_mega_attention_gpu.py
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from warpy.kernels import mega
from warpy.kernels.mega_bench import MegaRunner
from warpy.numeric import from_bits

GRAPHS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernels", "graphs")
CASES = [("attn-small", None), ("llama-attn-1k", 1), ("llama-attn-1k", 16), ("llama-attn-8k", 1),
         ("llama-attn-8k", 16), ("llama-attn-32k", 1), ("llama-attn-32k", 16), (os.path.join(GRAPHS, "attn_d128.py"), None),
         (os.path.join(GRAPHS, "attn_combine3.py"), None), (os.path.join(GRAPHS, "attn_g1.py"), None),
         (os.path.join(GRAPHS, "attn_t16.py"), None)]


def fp32_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, length: int, scale: float, causal: bool) -> np.ndarray:
    """softmax(scale q·kᵀ)·v per query head in fp32 (query head i on KV head i // G)."""
    t, hq, d = q.shape
    g = hq // k.shape[1]
    kk = np.repeat(k[:length].astype(np.float32), g, axis=1)  # (length, Hq, D)
    vv = np.repeat(v[:length].astype(np.float32), g, axis=1)
    s = np.einsum("thd,lhd->thl", q.astype(np.float32), kk) * np.float32(scale)
    if causal:
        pos = np.arange(length)
        s = np.where(pos[None, None, :] <= (length - t + np.arange(t))[:, None, None], s, -np.inf)
    s = s - s.max(axis=2, keepdims=True)
    p = np.exp(s)
    out: np.ndarray = np.einsum("thl,lhd->thd", p, vv) / p.sum(axis=2)[:, :, None]
    return out


@pytest.mark.parametrize("graph,tokens", CASES)
def test_every_element_against_fp32(graph: str, tokens: int | None) -> None:
    r = MegaRunner(mega.MegaProblem(graph, tokens, units=0), deadline=30)
    prog = r.plan.schedule.program
    # (the graph's attention: with `fresh` its old and appended rows are two partial nodes)
    att = next(v for v in prog.graph.values if v.op == "attention").attrs
    appended = [(n, prog.tensors[n.out]) for n in prog.nodes
                if n.out_view is not None and prog.tensors[n.out].kind == "state"]
    for call in range(1, 4):
        values = mega.inputs(r.plan, seed=call)
        (got,) = r(values)
        state = {}
        for n, t in appended:
            raw = r.buffers[r.plan.schedule.buffer_of[t.id]].download(np.uint16)[: t.size]
            state[t.name] = np.asarray(from_bits(raw, t.dtype), dtype=np.float32).reshape(t.shape)
            want = values[t.name].copy()
            rows = n.out_view.start[n.out_view.dims[0]]
            new = values[prog.tensors[n.operands[0].tensor].name]
            want[rows:rows + new.shape[0]] = new
            assert np.array_equal(state[t.name], want), f"{graph}: {t.name} after call {call}"
        ref = fp32_attention(values["q"], state["k_cache"], state["v_cache"], att["length"], att["scale"], att["causal"])
        err = np.abs(got.astype(np.float64) - ref)
        tol = 2.0 ** -7 * np.maximum(np.abs(ref), 0.25)  # two bf16 steps, at 1/4 for the small elements
        assert np.all(err <= tol), f"{graph} T={tokens} call {call}: {int((err > tol).sum())} of {err.size} off, " \
            f"the worst {float(err.max()):.3g}"
