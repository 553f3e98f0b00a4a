"""Named graphs (`warpy mega show NAME`) and loading a graph from a Python file.

- `mlp3`: three layers of relu(x·W[i]ᵀ + b[i]), x (T, 1024), W (3, 1024, 1024) in torch's Linear
  layout (out, in), b (3, 1024) a row broadcast over the rows (T = 1024 unless given);
- `llama-mlp`: a Llama-style MLP block per layer, x + down(silu(gate(h)) · up(h)) with
  h = rmsnorm(x, w, eps), hidden 2048, intermediate 8192, 16 layers, weights stacked per layer
  (T = 16 unless given);
- `llama-nonorm`, `llama-gate`: llama-mlp with a stage left out (no rmsnorm; no rmsnorm, no up gemm
  and no silu_mul), for `warpy mega bench --variants` (the time of each op kind by difference);
- `mlp-small`, `llama-small`: the same structures at sizes the reference VM runs in a blink;
- `views`: views, broadcasts, and outputs that are copied out;
- `ew-small`, `ew-chain`, `ew-wide`: elementwise only (bias rows, per-row columns, a scalar, a stacked
  weight's rows, wide and ragged rows, rank 3);
- `gemm-small`, `gemm-epi`, `acts`: small graphs for the sm_90a interpreter's gemm body (a bias row,
  a residual, ragged M, N and K, gelu and silu in the epilogue, a column bias) and its unary
  silu/gelu, silu_mul and rmsnorm bodies, sized for the host checker;
- `attn-small`: decode attention with the cache append (T = 3 queries, 4 query heads on 2 KV heads,
  head_dim 64, 72 of a 96-row cache, causal), sized for the host checker; `llama-attn-1k`,
  `llama-attn-8k`, `llama-attn-32k`: the same at Llama-3.2-1B's shape (32 query heads, 8 KV heads,
  head_dim 64) at context 1024 and 8192 of an 8192-row cache, and 32768 of 32768 (T = 1 unless given);
- `decoder-small`, `llama-decoder-1k`, `llama-decoder-8k`: a Llama decoder stack for one decode step
  (`llama_decoder`: rmsnorm, the QKV projection, RoPE, the cache appends, decode attention, the
  output projection + residual, the MLP block, per layer): 2 layers of hidden 128, 4 query heads on
  2 KV heads of 64, intermediate 192, 72 of 96 cache rows, T = 3 (for the checker); and
  Llama-3.2-1B's shape (16 layers, hidden 2048, 32 / 8 heads of 64, intermediate 8192) at context
  1024 and 8192 of an 8192-row cache (T = 1 unless given).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any, Callable, Optional

from warpy.errors import WarpyError
from warpy.mega.graph import Graph

LLAMA_EPS = 1e-5


def mlp(tokens: int = 1024, hidden: int = 1024, layers: int = 3, name: str = "mlp3") -> Graph:
    """relu(x·W[i]ᵀ + b[i]) per layer (W[i] as torch.nn.Linear holds it: (out, in))."""
    g = Graph(name)
    x = g.input("x", (tokens, hidden))
    w = g.input("w", (layers, hidden, hidden))
    b = g.input("b", (layers, hidden))
    for i in range(layers):
        x = g.relu(g.linear(x, w[i]) + b[i], name=f"h{i}")
    g.output(x)
    return g


def llama_mlp(tokens: int = 16, hidden: int = 2048, intermediate: int = 8192, layers: int = 16,
              eps: float = LLAMA_EPS, name: str = "llama-mlp", norm: bool = True, gated: bool = True) -> Graph:
    """x + down(silu(gate(h)) · up(h)), h = rmsnorm(x) per layer. The bench's variants that leave a
    stage out: `norm=False` (h = x), `gated=False` (x + down(silu(gate(h))): no up gemm, no silu_mul;
    the silu in the gate's epilogue)."""
    g = Graph(name)
    x = g.input("x", (tokens, hidden))
    nw = g.input("norm", (layers, hidden)) if norm else None
    gate = g.input("gate", (layers, intermediate, hidden))
    up = g.input("up", (layers, intermediate, hidden)) if gated else None
    down = g.input("down", (layers, hidden, intermediate))
    for i in range(layers):
        h = g.rmsnorm(x, nw[i], eps, name=f"h{i}") if nw is not None else x
        if up is not None:
            a = g.silu_mul(g.linear(h, gate[i], name=f"gate{i}"), g.linear(h, up[i], name=f"up{i}"), name=f"act{i}")
        else:
            a = g.silu(g.linear(h, gate[i]), name=f"act{i}")
        x = g.add(x, g.linear(a, down[i], name=f"down{i}"), name=f"x{i + 1}")
    g.output(x)
    return g


def views() -> Graph:
    """Views (a select of a stacked weight, slices), a per-row column, a bias row, gelu, silu_mul,
    an output that is a view and one that is an input (both copied out)."""
    g = Graph("views")
    x = g.input("x", (24, 40))
    w = g.input("w", (2, 48, 40))
    c = g.input("c", (24, 1))
    r = g.input("r", (48,))
    h = g.linear(x, w[0]) * c
    h = g.gelu(h + r)
    h2 = g.silu_mul(h[:, 8:40], g.linear(x, w[1])[:, 0:32])
    g.output(h2, h[3], x)
    return g


def elementwise(tokens: int = 6, hidden: int = 40, name: str = "ew-small") -> Graph:
    """Elementwise only (what the sm_90a interpreter runs before its gemm lands): a bias row, relu,
    a per-row column, a scalar, rows shifted by one (so a tile reads what two units wrote), a copy
    out; numpy broadcasting on every side."""
    g = Graph(name)
    x = g.input("x", (tokens, hidden))
    r = g.input("r", (hidden,))
    c = g.input("c", (tokens, 1))
    s = g.input("s", (1,))
    a = g.relu(x + r, name="a")
    b = g.mul(a, c, name="b")
    d = g.add(b[1:tokens], b[0:tokens - 1], name="d") if tokens > 1 else b
    g.output(g.add(s, d, name="y"), a)
    return g


def elementwise_chain(tokens: int = 4, hidden: int = 96, layers: int = 4, name: str = "ew-chain") -> Graph:
    """A longer elementwise chain through a stacked weight's rows (views), so that a unit's queue is
    long and pages are handed on many times: h = relu(h * w[i] + x) per layer."""
    g = Graph(name)
    x = g.input("x", (tokens, hidden))
    w = g.input("w", (layers, hidden))
    h = x
    for i in range(layers):
        h = g.relu(g.add(g.mul(h, w[i]), x), name=f"h{i}")
    g.output(h)
    return g


def elementwise_wide(tokens: int = 3, name: str = "ew-wide") -> Graph:
    """Rows wider than a box (296 columns: a 256-column tile and a ragged 40), rank 3, a slice view."""
    g = Graph(name)
    x = g.input("x", (tokens, 296))
    y = g.input("y", (2, tokens, 24))
    z = g.input("z", (tokens, 24))
    g.output(g.relu(x), g.mul(y, z), g.add(x[:, 8:32], z))
    return g


def gemm_small(tokens: int = 40, name: str = "gemm-small") -> Graph:
    """gelu(x·W[1]ᵀ + b) + r with ragged M, N and K (40 x 48 x 72: a K box past the edge, a tile
    past the rows), then relu(h·Vᵀ + c[:, None]-like column bias): two gemms, one reading the other."""
    g = Graph(name)
    x = g.input("x", (tokens, 72))
    w = g.input("w", (2, 48, 72))
    b = g.input("b", (48,))
    r = g.input("r", (tokens, 48))
    v = g.input("v", (24, 48))
    c = g.input("c", (tokens, 1))
    h = g.add(g.gelu(g.linear(x, w[1]) + b), r, name="h")
    g.output(g.relu(g.add(g.linear(h, v), c), name="y"), h)
    return g


def gemm_epi(tokens: int = 3, name: str = "gemm-epi") -> Graph:
    """Decode-shaped gemms (a few rows): silu with a bias, a residual without a bias, a plain one,
    K over several stages (200 = 3 boxes and a ragged one)."""
    g = Graph(name)
    x = g.input("x", (tokens, 200))
    w1 = g.input("w1", (64, 200))
    b1 = g.input("b1", (64,))
    w2 = g.input("w2", (200, 64))
    h = g.silu(g.linear(x, w1) + b1, name="h")
    y = g.add(x, g.linear(h, w2), name="y")
    g.output(y, g.linear(y, w1, name="z"))
    return g


def acts(tokens: int = 5, name: str = "acts") -> Graph:
    """The elementwise bodies with MUFU math: silu, gelu, silu_mul (SwiGLU's middle), rmsnorm over
    rows wider than a box (296 = 256 + 40) and of a stacked weight's row."""
    g = Graph(name)
    x = g.input("x", (tokens, 296))
    y = g.input("y", (tokens, 296))
    nw = g.input("nw", (2, 296))
    g.output(g.silu(x, name="s"), g.gelu(y, name="e"), g.silu_mul(x, y, name="m"),
             g.rmsnorm(x, nw[1], 1e-5, name="n"))
    return g


def decode_attention(tokens: int = 3, heads: int = 4, kv_heads: int = 2, head_dim: int = 64, length: int = 72,
                     cache_rows: int = 96, causal: bool = True, name: str = "attn-small") -> Graph:
    """One decode step's attention: the T new K and V rows appended to the caches at rows length-T..,
    then the T queries against the first `length` rows (causal among the new ones)."""
    g = Graph(name)
    q = g.input("q", (tokens, heads, head_dim))
    k_new = g.input("k_new", (tokens, kv_heads, head_dim))
    v_new = g.input("v_new", (tokens, kv_heads, head_dim))
    k_cache = g.input("k_cache", (cache_rows, kv_heads, head_dim))
    v_cache = g.input("v_cache", (cache_rows, kv_heads, head_dim))
    k = g.cache_append(k_cache, k_new, at=length - tokens, name="k")
    v = g.cache_append(v_cache, v_new, at=length - tokens, name="v")
    g.output(g.attention(q, k, v, length=length, causal=causal, name="o"))
    return g


def llama_decoder(tokens: int = 1, hidden: int = 2048, heads: int = 32, kv_heads: int = 8, head_dim: int = 64,
                  intermediate: int = 8192, layers: int = 16, length: int = 1024, cache_rows: int = 8192,
                  eps: float = LLAMA_EPS, name: str = "llama-decoder") -> Graph:
    """A Llama decoder stack for one decode step of T new tokens at positions length-T..length-1:
    per layer, h = rmsnorm(x); q, k, v = h·Wᵀ for the three row blocks of one weight Wqkv (the query
    heads' rows, then the KV heads' K rows, then V rows), each viewed as (T, heads, D); RoPE on q and k (tables
    cos, sin (T, D), shared by the layers); k and v appended to the layer's caches (layers,
    cache_rows, kv_heads, D) at row length-T; causal grouped-query decode attention over the first
    `length` rows; x += (the attention's (T, heads·D) view)·Woᵀ; then the MLP block as `llama_mlp`:
    x += down(silu(gate(h2))·up(h2)), h2 = rmsnorm(x). The output is the last x (no final norm or
    head); the caches are written in place."""
    g = Graph(name)
    d, qd, kd = head_dim, heads * head_dim, kv_heads * head_dim
    x = g.input("x", (tokens, hidden))
    cos = g.input("cos", (tokens, d))
    sin = g.input("sin", (tokens, d))
    attn_norm = g.input("attn_norm", (layers, hidden))
    wqkv = g.input("wqkv", (layers, qd + 2 * kd, hidden))
    wo = g.input("wo", (layers, hidden, qd))
    k_cache = g.input("k_cache", (layers, cache_rows, kv_heads, d))
    v_cache = g.input("v_cache", (layers, cache_rows, kv_heads, d))
    mlp_norm = g.input("mlp_norm", (layers, hidden))
    gate = g.input("gate", (layers, intermediate, hidden))
    up = g.input("up", (layers, intermediate, hidden))
    down = g.input("down", (layers, hidden, intermediate))
    at = length - tokens
    for i in range(layers):
        h = g.rmsnorm(x, attn_norm[i], eps, name=f"attn_h{i}")
        w = wqkv[i]
        q = g.rope(g.reshape(g.linear(h, w[:qd], name=f"qp{i}"), (tokens, heads, d)), cos, sin, name=f"q{i}")
        k = g.rope(g.reshape(g.linear(h, w[qd:qd + kd], name=f"kp{i}"), (tokens, kv_heads, d)), cos, sin, name=f"k{i}")
        v = g.reshape(g.linear(h, w[qd + kd:], name=f"vp{i}"), (tokens, kv_heads, d), name=f"v{i}")
        kc = g.cache_append(k_cache[i], k, at=at, name=f"kc{i}")
        vc = g.cache_append(v_cache[i], v, at=at, name=f"vc{i}")
        o = g.attention(q, kc, vc, length=length, causal=True, name=f"o{i}")
        x = g.add(x, g.linear(g.reshape(o, (tokens, qd)), wo[i], name=f"proj{i}"), name=f"xa{i}")
        h2 = g.rmsnorm(x, mlp_norm[i], eps, name=f"mlp_h{i}")
        a = g.silu_mul(g.linear(h2, gate[i], name=f"gate{i}"), g.linear(h2, up[i], name=f"up{i}"), name=f"act{i}")
        x = g.add(x, g.linear(a, down[i], name=f"down{i}"), name=f"x{i + 1}")
    g.output(x)
    return g


def rope_tables(tokens: int, head_dim: int, length: int, theta: float = 500000.0) -> tuple[Any, Any]:
    """Llama's RoPE tables (T, D) for positions length-T..length-1, as HF's LlamaRotaryEmbedding makes
    them without scaling: inv_freq = theta^(-2i/D), angles = position·inv_freq twice (cat(f, f)),
    cos and sin in float32, then bf16 (float32 arrays holding bf16 values)."""
    import numpy as np

    from warpy.mega.semantics import store

    inv = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    pos = np.arange(length - tokens, length, dtype=np.float32)
    f = np.outer(pos, inv).astype(np.float32)
    emb = np.concatenate([f, f], axis=-1)
    return store(np.cos(emb), "bf16"), store(np.sin(emb), "bf16")


EXAMPLES: dict[str, Callable[[Optional[int]], Graph]] = {
    "mlp3": lambda t: mlp(t or 1024),
    "llama-mlp": lambda t: llama_mlp(t or 16),
    "llama-nonorm": lambda t: llama_mlp(t or 16, name="llama-nonorm", norm=False),
    "llama-gate": lambda t: llama_mlp(t or 16, name="llama-gate", norm=False, gated=False),
    "mlp-small": lambda t: mlp(t or 100, hidden=136, name="mlp-small"),
    "llama-small": lambda t: llama_mlp(t or 5, hidden=72, intermediate=200, layers=3, name="llama-small"),
    "views": lambda t: views(),
    "ew-small": lambda t: elementwise(t or 6),
    "ew-chain": lambda t: elementwise_chain(t or 4),
    "ew-wide": lambda t: elementwise_wide(t or 3),
    "gemm-small": lambda t: gemm_small(t or 40),
    "gemm-epi": lambda t: gemm_epi(t or 3),
    "acts": lambda t: acts(t or 5),
    "attn-small": lambda t: decode_attention(t or 3),
    "llama-attn-1k": lambda t: decode_attention(t or 1, 32, 8, 64, 1024, 8192, name="llama-attn-1k"),
    "llama-attn-8k": lambda t: decode_attention(t or 1, 32, 8, 64, 8192, 8192, name="llama-attn-8k"),
    "llama-attn-32k": lambda t: decode_attention(t or 1, 32, 8, 64, 32768, 32768, name="llama-attn-32k"),
    "decoder-small": lambda t: llama_decoder(t or 3, hidden=128, heads=4, kv_heads=2, head_dim=64, intermediate=192,
                                             layers=2, length=72, cache_rows=96, name="decoder-small"),
    "llama-decoder-1k": lambda t: llama_decoder(t or 1, length=1024, cache_rows=8192, name="llama-decoder-1k"),
    "llama-decoder-8k": lambda t: llama_decoder(t or 1, length=8192, cache_rows=8192, name="llama-decoder-8k"),
}


def load(spec: str, tokens: Optional[int] = None) -> Graph:
    """A named example, or FILE.py defining `build()` (called with `tokens=` when given) or `graph`."""
    if spec in EXAMPLES:
        return EXAMPLES[spec](tokens)
    if not spec.endswith(".py") or not os.path.exists(spec):
        raise WarpyError(f"no graph called {spec!r}: a name ({', '.join(EXAMPLES)}) or FILE.py defining "
                         "build() or graph")
    mod_spec = importlib.util.spec_from_file_location("warpy_mega_user_graph", spec)
    assert mod_spec is not None and mod_spec.loader is not None
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    build = getattr(mod, "build", None)
    g = build(tokens=tokens) if callable(build) and tokens is not None else build() if callable(build) \
        else getattr(mod, "graph", None)
    if not isinstance(g, Graph):
        raise WarpyError(f"{spec} defines neither build() returning a Graph nor a Graph called graph")
    return g


__all__ = ["mlp", "llama_mlp", "llama_decoder", "rope_tables", "elementwise", "elementwise_chain", "elementwise_wide", "gemm_small", "gemm_epi", "acts",
           "decode_attention",
           "EXAMPLES", "load"]
