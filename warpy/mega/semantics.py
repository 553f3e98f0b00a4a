"""What each op computes, in numpy, once: the whole-graph reference, the lowered program's reference
and the reference VM's tiles all call these functions, on whole tensors or on tiles.

Values travel as float32 arrays that hold values of the tensor's element type exactly (a bf16 value
is a float32 value). An op computes in float64 from its operands and rounds its result once to the
element type (through fp32, nearest even, as the device's fp32 accumulator is converted), so a tile
computed alone equals the same elements of the whole tensor computed at once.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import numpy as np

from warpy.errors import WarpyError
from warpy.numeric import from_bits, to_bits

if TYPE_CHECKING:
    from warpy.mega.graph import Value

GELU_C = math.sqrt(2.0 / math.pi)


def store(x: np.ndarray, dtype: str) -> np.ndarray:
    """float64 results -> what a tensor of `dtype` holds (float32 array of its values)."""
    return np.asarray(from_bits(to_bits(np.asarray(x, dtype=np.float32), dtype), dtype), dtype=np.float32)


def activation(x: np.ndarray, act: str) -> np.ndarray:
    out: np.ndarray
    if act == "none":
        return x
    if act == "relu":
        out = np.maximum(x, 0.0)
        return out
    if act == "silu":
        out = x / (1.0 + np.exp(-x))
        return out
    if act == "gelu":
        out = 0.5 * x * (1.0 + np.tanh(GELU_C * (x + 0.044715 * x * x * x)))
        return out
    raise WarpyError(f"no activation called {act!r}")


def f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def gemm(a: np.ndarray, b: np.ndarray, b_kmajor: bool, bias: Optional[np.ndarray], act: str,
         residual: Optional[np.ndarray], dtype: str) -> np.ndarray:
    """act(a·B + bias) + residual, rounded once: a (M, K); b (N, K) when b_kmajor (x·Wᵀ), else (K, N);
    bias and residual broadcast to (M, N)."""
    acc = f64(a) @ (f64(b).T if b_kmajor else f64(b))
    if bias is not None:
        acc = acc + f64(bias)
    acc = activation(acc, act)
    if residual is not None:
        acc = acc + f64(residual)
    return store(acc, dtype)


def gemm_glu(a: np.ndarray, wg: np.ndarray, wu: np.ndarray, dtype: str) -> np.ndarray:
    """SwiGLU's first half as one gemm: silu(a·Wgᵀ)·(a·Wuᵀ), a (M, K), Wg and Wu (N, K), in float64,
    rounded once (the unfused program rounds gate, up and their silu_mul: three times)."""
    return store(activation(f64(a) @ f64(wg).T, "silu") * (f64(a) @ f64(wu).T), dtype)


def gemm_norm(a: np.ndarray, w: np.ndarray, eps: float, b: np.ndarray, bias: Optional[np.ndarray], act: str,
              up: Optional[np.ndarray], dtype: str, a_dtype: str) -> np.ndarray:
    """A gemm whose A is rmsnorm(a, w) (`Node.norm`), as the device computes it: A's elements
    a·w rounded to A's type (what the tensor core reads), the products summed, each row scaled by
    rstd = 1/sqrt(mean(a²) + eps) of the unnormalised row, then the epilogue: act(rstd·(a·w)·Bᵀ +
    bias), or with `up` (the fused gate/up gemm) silu(rstd·(a·w)·Bᵀ)·(rstd·(a·w)·Upᵀ); rounded once.
    (The unfused program rounds rmsnorm(a)·w itself before the gemm: the two differ by that rounding.)"""
    af = f64(a)
    rstd = 1.0 / np.sqrt(np.mean(af * af, axis=-1, keepdims=True) + eps)
    an = f64(store(af * f64(w), a_dtype))
    acc = (an @ f64(b).T) * rstd
    if up is not None:
        return store(activation(acc, "silu") * ((an @ f64(up).T) * rstd), dtype)
    if bias is not None:
        acc = acc + f64(bias)
    return store(activation(acc, act), dtype)


def gemm_rope(a: np.ndarray, b: np.ndarray, table: np.ndarray, dtype: str,
              norm: Optional[tuple[np.ndarray, float, str]] = None) -> np.ndarray:
    """A linear whose product is roped before it is rounded (`Node.rope`): a (M, K), b (N, K), the
    rope tables stacked as `table` (2, M, D) (cos, then sin); the product (M, N) viewed as (M, N/D,
    D) heads, rope (`rope_exact`) in float64, rounded once: shape (M, N/D, D). With `norm` (w, eps,
    A's type) A is rmsnorm(a, w) as `gemm_norm` computes it. (The unfused program rounds the
    product to bf16 before the rope: the two differ by that rounding.)"""
    if norm is not None:
        w, eps, a_dtype = norm
        af = f64(a)
        rstd = 1.0 / np.sqrt(np.mean(af * af, axis=-1, keepdims=True) + eps)
        acc = (f64(store(af * f64(w), a_dtype)) @ f64(b).T) * rstd
    else:
        acc = f64(a) @ f64(b).T
    d = table.shape[-1]
    x = acc.reshape(acc.shape[0], -1, d)
    t = f64(table)
    return store(rope_exact(x, t[0][:, None, :], t[1][:, None, :]), dtype)


def unary(x: np.ndarray, act: str, dtype: str) -> np.ndarray:
    return store(activation(f64(x), act), dtype)


def binary(op: str, a: np.ndarray, b: np.ndarray, dtype: str) -> np.ndarray:
    if op == "add":
        return store(f64(a) + f64(b), dtype)
    if op == "mul":
        return store(f64(a) * f64(b), dtype)
    raise WarpyError(f"no binary op called {op!r}")


def silu_mul(gate: np.ndarray, up: np.ndarray, dtype: str) -> np.ndarray:
    return store(activation(f64(gate), "silu") * f64(up), dtype)


def rotate_half(x: np.ndarray) -> np.ndarray:
    """cat(-x2, x1) of the last dimension's halves x1, x2."""
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def rope_exact(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotary embedding, rotate-half form, in float64, not rounded: x·cos + rotate_half(x)·sin."""
    xf = f64(x)
    out: np.ndarray = xf * f64(cos) + rotate_half(xf) * f64(sin)
    return out


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, dtype: str) -> np.ndarray:
    """Rotary embedding, rotate-half form: x·cos + rotate_half(x)·sin (numpy broadcasting: x
    (T, H, D), the tables (T, 1, D)), in float64, rounded once; a tile is whole rows of D."""
    return store(rope_exact(x, cos, sin), dtype)


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float, dtype: str) -> np.ndarray:
    """Over the last dimension, whole rows at a time."""
    xf = f64(x)
    ms = np.mean(xf * xf, axis=-1, keepdims=True)
    return store(xf / np.sqrt(ms + eps) * f64(w), dtype)


LOG2E = 1.0 / math.log(2.0)
#: a partial's row: the unnormalised O (D values), then the running max m and sum l, then zeros to a
#: 16-byte multiple (fp32), so that each row is one record and a tile's partial is one box
PARTIAL_EXTRA = 4


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, length: int, scale: float, causal: bool,
              dtype: str) -> np.ndarray:
    """The whole op in float64, rounded once: q (T, Hq, D), k and v (Lmax, Hkv, D) -> (T, Hq, D)."""
    t, hq, d = q.shape
    hkv = k.shape[1]
    g = hq // hkv
    kk, vv = f64(k[:length]), f64(v[:length])
    out = np.zeros((t, hq, d))
    pos = np.arange(length)
    for h in range(hq):
        s = f64(q[:, h, :]) @ kk[:, h // g, :].T * scale  # (T, length)
        if causal:
            s = np.where(pos[None, :] <= (length - t + np.arange(t))[:, None], s, -np.inf)
        s = s - s.max(axis=1, keepdims=True)
        p = np.exp(s)
        out[:, h, :] = (p @ vv[:, h // g, :]) / p.sum(axis=1, keepdims=True)
    return store(out, dtype)


def attention_partial(q: np.ndarray, k: np.ndarray, v: np.ndarray, row0: int, length: int, scale: float,
                      causal: bool) -> np.ndarray:
    """One tile of the split: the T·G query rows of one KV head (q (T, G, D), rows r = t·G + g) against
    cache rows row0.. (k, v (C, D), all below `length`), in base 2. The partial
    (T·G, D + PARTIAL_EXTRA) fp32: m = max of the visible scores·scale·log2 e, rounded to fp32 first,
    then l = sum of 2^(s - m) and O = sum of 2^(s - m)·v, each rounded once; a row that sees none of
    the chunk's rows holds m = -inf, l = 0, O = 0 (it weighs nothing in the combine)."""
    tt, g, d = q.shape
    rows = tt * g
    kk, vv = f64(k), f64(v)
    s = f64(q.reshape(rows, d)) @ kk.T * (scale * LOG2E)  # (rows, C)
    pos = row0 + np.arange(k.shape[0])
    limit = np.full(rows, length)
    if causal:
        limit = np.minimum(limit, np.repeat(length - tt + 1 + np.arange(tt), g))
    vis = pos[None, :] < limit[:, None]
    out = np.zeros((rows, d + PARTIAL_EXTRA))
    any_vis = vis.any(axis=1)
    m = np.where(any_vis, np.max(np.where(vis, s, -np.inf), axis=1), -np.inf)
    m = f64(store(m, "fp32"))
    safe = np.where(any_vis, m, 0.0)
    p = np.exp2(np.where(vis, s - safe[:, None], -np.inf))  # (no exp2 of a hidden score: it may overflow)
    out[:, :d] = p @ vv
    out[:, d] = m
    out[:, d + 1] = p.sum(axis=1)
    return store(out, "fp32")


def attention_combine(part: np.ndarray, d: int, dtype: str) -> np.ndarray:
    """Partials of one head's rows (S, R, D + PARTIAL_EXTRA) -> (R, D): with M the largest m,
    Σ 2^(m_c - M)·O_c / Σ 2^(m_c - M)·l_c in float64 (chunks in order), rounded once."""
    pf = f64(part)
    big = pf[:, :, d].max(axis=0)
    num = np.zeros((pf.shape[1], d))
    den = np.zeros(pf.shape[1])
    for c in range(pf.shape[0]):
        w = np.exp2(pf[c, :, d] - big)
        num = num + w[:, None] * pf[c, :, :d]
        den = den + w * pf[c, :, d + 1]
    return store(num / den[:, None], dtype)


def cache_append(cache: np.ndarray, rows: np.ndarray, at: int) -> np.ndarray:
    out = np.array(cache, dtype=np.float32, copy=True)
    out[at:at + rows.shape[0]] = rows
    return out


def view_array(v: "Value", base: np.ndarray) -> np.ndarray:
    """The elements of view `v` of the array `base` holds (numpy views of it)."""
    from warpy.mega.graph import view_of

    _, vw = view_of(v)
    return vw.take(base)


def evaluate_value(v: "Value", args: Sequence[np.ndarray], inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """One graph value from its operands' values (the unfused, op-by-op meaning)."""
    if v.op == "input":
        if v.name not in inputs:
            raise WarpyError(f"no value given for input {v.name!r}")
        x = np.asarray(inputs[v.name])
        if x.shape != v.shape:
            raise WarpyError(f"input {v.name} has shape {list(x.shape)}, the graph says {list(v.shape)}")
        return x.astype(np.float32, copy=False)
    if v.op == "reshape":
        return np.reshape(args[0], v.shape)
    if v.op in ("select", "slice"):
        parent = v.args[0]
        idx: list[Any] = [slice(None)] * parent.rank
        d = v.attrs["dim"]
        idx[d] = v.attrs["index"] if v.op == "select" else slice(v.attrs["start"], v.attrs["start"] + v.shape[d])
        sel: np.ndarray = args[0][tuple(idx)]
        return sel
    if v.op == "matmul":
        return gemm(args[0], args[1], False, None, "none", None, v.dtype)
    if v.op == "linear":
        return gemm(args[0], args[1], True, None, "none", None, v.dtype)
    if v.op in ("add", "mul"):
        return binary(v.op, args[0], args[1], v.dtype)
    if v.op in ("relu", "silu", "gelu"):
        return unary(args[0], v.op, v.dtype)
    if v.op == "silu_mul":
        return silu_mul(args[0], args[1], v.dtype)
    if v.op == "rmsnorm":
        return rmsnorm(args[0], args[1], v.attrs["eps"], v.dtype)
    if v.op == "rope":
        return rope(args[0], args[1], args[2], v.dtype)
    if v.op == "cache_append":
        return cache_append(args[0], args[1], v.attrs["at"])
    if v.op == "attention":
        return attention(args[0], args[1], args[2], v.attrs["length"], v.attrs["scale"], v.attrs["causal"], v.dtype)
    raise WarpyError(f"no meaning for op {v.op!r}")


def random_values(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, scale: float = 1.0) -> np.ndarray:
    """Values of `dtype` (float32 array), normal with standard deviation `scale`."""
    return store(rng.standard_normal(shape, dtype=np.float32) * scale, dtype)


__all__ = ["store", "activation", "gemm", "gemm_glu", "gemm_norm", "gemm_rope", "rope_exact", "unary", "binary", "silu_mul", "rmsnorm", "rope", "rotate_half", "evaluate_value", "attention",
           "attention_partial", "attention_combine", "cache_append", "PARTIAL_EXTRA", "LOG2E",
           "random_values", "view_array"]
