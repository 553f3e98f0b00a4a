"""Which attention program runs a problem: the problem, the rule that picks a configuration, the
builder, the binding and what the checker expects of the data. `warpy attention`, `warpy bench
attention`, `warpy check attention` and `warpy.attention` all go through here.

O = softmax(Q·Kᵀ · scale, masked) · V for every batch b and query head h, with grouped-query
attention (query head h reads key/value head h // (H_q / H_kv)). Q and O are B x S_q x H_q x D,
K and V are B x S_kv x H_kv x D, all bf16, in one of two memory layouts:

- `bshd`: (batch, sequence, head, head_dim), head_dim contiguous (what a fused QKV projection
  writes; torch's (B, H, S, D) tensors `.transpose(1, 2)` of a contiguous (B, S, H, D) one);
- `bhsd`: (batch, head, sequence, head_dim), contiguous (torch's scaled_dot_product_attention's).

`causal` masks key j out of query i's row when j > i: the upper-left triangle, as torch's
`scaled_dot_product_attention(is_causal=True)` does for any S_q and S_kv (so every row sees key 0
and no row is empty). The softmax is computed in base 2 with fp32 scores; P is rounded to bf16 for
the P·V product; O is bf16.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import attrs
import numpy as np

from warpy.check.expect import Verdict
from warpy.errors import WarpyError
from warpy.isa.program import Program
from warpy.layout.tma import TmaBox
from warpy.numeric import bits16, from_bits
from warpy.target import SM90A, SM100A, target

from .attention_sm90 import Sm90AttentionConfig, Sm90Attention, smem_bytes
from .attention_sm100 import Sm100Attention, Sm100AttentionConfig, smem_bytes as smem_bytes_sm100
from .family import checked_overrides
from .schedule import cdiv

LAYOUTS = ("bshd", "bhsd")
HEAD_DIMS = (64, 128)
DTYPES = ("bf16",)
#: the operands' names, as the programs' tensor maps and `bind` call them
OPERANDS = ("q", "k", "v", "o")

Config = Union[Sm90AttentionConfig, Sm100AttentionConfig]


def _layout(value: str) -> str:
    low = str(value).lower()
    if low not in LAYOUTS:
        raise WarpyError(f"layout {value!r} is not one of {', '.join(LAYOUTS)}")
    return low


def _dtype(value: str) -> str:
    if value not in DTYPES and str(value).lower() not in ("bfloat16", "bf16"):
        raise WarpyError(f"attention takes bf16 inputs, not {value!r}")
    return "bf16"


def _target_name(value: str) -> str:
    return target(value).name


@attrs.frozen
class AttentionProblem:
    """One forward attention: sizes, mask, memory layout, scale, type and target. Anything warpy
    cannot run is refused in one line. `scale` multiplies Q·Kᵀ before the softmax (torch's
    default is 1/√D: `default_scale`)."""

    B: int
    H_q: int
    H_kv: int
    S_q: int
    S_kv: int
    D: int
    causal: bool = False
    layout: str = attrs.field(default="bshd", converter=_layout)
    scale: float = 0.0  # 0: 1/sqrt(D)
    dtype: str = attrs.field(default="bf16", converter=_dtype)
    arch: str = attrs.field(default="sm_90a", converter=_target_name)

    def __attrs_post_init__(self) -> None:
        for name in ("B", "H_q", "H_kv", "S_q", "S_kv", "D"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise WarpyError(f"{name} must be an integer, not {v!r}")
            if v < 1:
                raise WarpyError(f"{name} must be at least 1 (got {v})")
        if self.D not in HEAD_DIMS:
            raise WarpyError(f"head_dim D={self.D}: the attention programs take D = {' or '.join(map(str, HEAD_DIMS))}")
        if self.H_q % self.H_kv:
            raise WarpyError(f"H_kv={self.H_kv} does not divide H_q={self.H_q} (grouped-query attention shares "
                             "each key/value head among H_q / H_kv query heads)")
        if not isinstance(self.causal, bool):
            raise WarpyError(f"causal must be true or false, not {self.causal!r}")
        if isinstance(self.scale, bool) or not isinstance(self.scale, (int, float)):
            raise WarpyError(f"scale must be a number, not {self.scale!r}")
        if self.scale == 0.0:
            object.__setattr__(self, "scale", default_scale(self.D))
        s = float(self.scale)
        if not (math.isfinite(s) and s > 0.0):
            raise WarpyError(f"scale={self.scale}: the programs take a finite scale > 0 (the row maximum of "
                             "scale·Q·Kᵀ is taken on Q·Kᵀ)")
        object.__setattr__(self, "scale", s)
        if self.B * self.H_q * cdiv(self.S_q, 128) >= 1 << 31:
            raise WarpyError(f"{self}: more than 2^31 - 1 tiles of 128 queries")

    @property
    def group(self) -> int:
        """Query heads a key/value head serves."""
        return self.H_q // self.H_kv

    @property
    def pairs(self) -> int:
        """(query, key) pairs the softmax weighs, per batch and query head (causal: j <= i)."""
        if not self.causal:
            return self.S_q * self.S_kv
        n = min(self.S_q, self.S_kv)
        # rows i < S_kv see i + 1 keys; rows from S_kv on see all S_kv
        return n * (n + 1) // 2 + max(0, self.S_q - self.S_kv) * self.S_kv

    @property
    def flops(self) -> int:
        """Multiply-adds x 2 of Q·Kᵀ and P·V over the pairs the mask keeps (FlashAttention's count)."""
        return 4 * self.B * self.H_q * self.pairs * self.D

    def shape(self, operand: str) -> tuple[int, int, int, int]:
        """An operand's (B, S, H, D) (q and o: S_q, H_q; k and v: S_kv, H_kv)."""
        if operand in ("q", "o"):
            return (self.B, self.S_q, self.H_q, self.D)
        return (self.B, self.S_kv, self.H_kv, self.D)

    def nbytes(self, operand: str) -> int:
        b, s, h, d = self.shape(operand)
        return b * s * h * d * 2

    def __str__(self) -> str:
        kv = f" kv {self.H_kv}x{self.S_kv}" if (self.H_kv, self.S_kv) != (self.H_q, self.S_q) else ""
        return (f"B={self.B} H={self.H_q} S={self.S_q} D={self.D}{kv}{' causal' if self.causal else ''} "
                f"{self.layout} scale={self.scale:g} {self.arch}")


def default_scale(d: int) -> float:
    """torch's default softmax scale, 1/√D."""
    return 1.0 / math.sqrt(d)


def problem(B: int, H: int, S: int, D: int, *, causal: bool = False, H_kv: Optional[int] = None,
            S_kv: Optional[int] = None, layout: str = "bshd", scale: Optional[float] = None,
            arch: str = "sm_90a") -> AttentionProblem:
    """The problem with H_kv = H and S_kv = S unless given, the default scale unless given."""
    return AttentionProblem(B, H, H if H_kv is None else H_kv, S, S if S_kv is None else S_kv, D, causal,
                            layout, 0.0 if scale is None else scale, "bf16", arch)


# -- the rule ---------------------------------------------------------------------------------------


def choose(prob: AttentionProblem) -> Config:
    """The configuration for a problem.

    sm_90a: 128 queries a CTA (two consumer warpgroups of 64, ping-ponging), key/value blocks of
    128, V's ring read MN-major by the P·V wgmma (no Vᵀ ring), and the deepest rings shared memory
    holds: head_dim 128 fits three stages of K and of V (224 KiB with Q); head_dim 64 four each.
    sm_100a: two tiles of 128 queries a CTA (a softmax warpgroup each, the MMA warp alternating
    between them; S, P and O in tensor memory), key/value blocks of 128, the deepest rings the same
    way: head_dim 128 fits K and V two stages and Vᵀ one (224 KiB with the two Q tiles)."""
    if prob.arch == "sm_100a":
        return deepest(Sm100AttentionConfig(bn=128, k_stages=2, v_stages=2, t_stages=1, tiles=2), prob.D)
    if prob.arch != "sm_90a":
        raise WarpyError(f"no {prob.arch} attention program exists (sm_90a and sm_100a)")
    return deepest(Sm90AttentionConfig(bn=128, k_stages=2, v_stages=2, t_stages=2, v_mn=True), prob.D)


def _smem(cfg: Config, d: int) -> int:
    if isinstance(cfg, Sm100AttentionConfig):
        return smem_bytes_sm100(cfg, d)
    return smem_bytes(cfg, d)


def deepest(cfg: Config, d: int) -> Config:
    """`cfg` with its rings deepened a stage at a time, K then V transposed (V itself where it is
    read MN-major), while shared memory allows (at most 4 stages each)."""
    limit = (SM100A if isinstance(cfg, Sm100AttentionConfig) else SM90A).max_dynamic_smem
    grew = True
    while grew:
        grew = False
        for field in ("k_stages", "v_stages" if getattr(cfg, "v_mn", False) else "t_stages"):
            more = attrs.evolve(cfg, **{field: getattr(cfg, field) + 1})
            if getattr(more, field) <= 4 and _smem(more, d) <= limit:
                cfg, grew = more, True
    return cfg


def configure(prob: AttentionProblem, overrides: Union[str, Mapping[str, object], None]) -> Config:
    """The rule's configuration with fields set by hand (`key=value,...`); one-line refusals."""
    cfg = choose(prob)
    items = checked_overrides(cfg, overrides)
    if not items:
        return cfg
    out: Config = attrs.evolve(cfg, **items)  # type: ignore[arg-type]  # (checked field by field above)
    return out


def build(prob: AttentionProblem, config: Optional[Config] = None) -> Program:
    cfg = config if config is not None else choose(prob)
    if prob.arch == "sm_100a":
        if not isinstance(cfg, Sm100AttentionConfig):
            raise WarpyError(f"an sm_100a attention program takes an sm_100a configuration, not {type(cfg).__name__}")
        return Sm100Attention(prob, cfg).build()
    if prob.arch != "sm_90a":
        raise WarpyError(f"no {prob.arch} attention program exists (sm_90a and sm_100a)")
    if not isinstance(cfg, Sm90AttentionConfig):
        raise WarpyError(f"an sm_90a attention program takes an sm_90a configuration, not {type(cfg).__name__}")
    return Sm90Attention(prob, cfg).build()


# -- the reference and what the checker expects ------------------------------------------------------


def head_reference(prob: AttentionProblem, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                   rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(O, A) in float64 for one query head: q (len(rows), D) the query rows `rows` (their indices in
    the sequence, for the causal mask), k and v (S_kv, D) its key/value head. O is the attention
    output; A = softmax(...)·|V|, the weighted mean magnitude of the values each output mixes (what
    `tolerance` scales with)."""
    s = q.astype(np.float64) @ k.astype(np.float64).T * prob.scale
    if prob.causal:
        s = np.where(np.arange(prob.S_kv)[None, :] <= rows[:, None], s, -np.inf)
    s -= s.max(axis=1, keepdims=True)
    w = np.exp(s)
    w /= w.sum(axis=1, keepdims=True)
    vv = v.astype(np.float64)
    return w @ vv, w @ np.abs(vv)


def reference(prob: AttentionProblem, q: np.ndarray, k: np.ndarray, v: np.ndarray,
              rows: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray]:
    """(O, A) (`head_reference`) for q (B, S_q, H_q, D), k and v (B, S_kv, H_kv, D) as (B, S_q, H_q, D)
    arrays; `rows`: only these query rows (the others are zero)."""
    B, Sq, Hq, D = prob.shape("q")
    O = np.zeros((B, Sq, Hq, D))
    A = np.zeros((B, Sq, Hq, D))
    rsel = np.arange(Sq) if rows is None else rows
    for b in range(B):
        for h in range(Hq):
            hk = h // prob.group
            O[b, rsel, h, :], A[b, rsel, h, :] = head_reference(prob, q[b, rsel, h, :], k[b, :, hk, :], v[b, :, hk, :],
                                                                 rsel)
    return O, A


def tolerance(prob: AttentionProblem, ref: np.ndarray, weighted_abs_v: np.ndarray) -> np.ndarray:
    """How far the kernel's bf16 O may be from the float64 softmax, elementwise (docs/attention.md,
    "Accuracy"). The kernel computes O = Σ_j p̂_j v_j / Σ_j p_j with p_j = EX2(x_j - m) in fp32 and
    p̂_j = bf16(p_j); with u = 2^-8, bf16's unit roundoff, and A = Σ_j p_j |v_j| / Σ_j p_j (the
    weighted mean |v|, `reference`'s second output):

    - P rounded to bf16: |Σ_j (p̂_j - p_j) v_j| / Σ_j p_j <= u A;
    - O rounded to bf16 once at the end: u |O|;
    - the rest, each far below u: MUFU.EX2 within 2 ulp of fp32 and the FFMA forming x_j - m rounded
      once (relative 2^-22 + |x_j - m| 2^-24 ln 2 < 2^-16 for the terms that are not flushed to 0),
      the fp32 sums of S_kv terms (S_kv 2^-24 A), the reciprocal and the products (a few 2^-24),
      the output rounding of those errors (u times them): 2^-14 A covers them. A rescale multiplies O
      and the sums by one factor, so its error cancels in the ratio (up to one rounding each).

    So |O_kernel - O| <= u |O| + (u + 2^-14 + S_kv 2^-24) A (+ 2^-24 for values near 0)."""
    u = 2.0 ** -8
    tol: np.ndarray = u * np.abs(ref) + (u + 2.0 ** -14 + prob.S_kv * 2.0 ** -24) * weighted_abs_v + 2.0 ** -24
    return tol


def small_values(rng: np.random.Generator, n: int, what: str) -> np.ndarray:
    """Inputs exact in bf16 and with exact products and short sums in fp32: Q and K in
    {-1, -1/2, 0, 1/2, 1}, V in quarters of [-1, 1]."""
    if what == "v":
        return rng.integers(-4, 5, size=n).astype(np.float32) / 4
    return rng.integers(-2, 3, size=n).astype(np.float32) / 2


class AttentionExpectation:
    """What the checker needs (`warpy.check.expect`): Q, K and V hold `small_values`; every element
    of O a simulated CTA wrote must lie within `tolerance` of the float64 softmax (`reference`)."""

    def __init__(self, prob: AttentionProblem) -> None:
        self.problem = prob

    def initial(self, source: str, box: Optional[TmaBox], nbytes: int, rng: np.random.Generator) -> Optional[np.ndarray]:
        if source not in ("q", "k", "v"):
            return None  # O starts as zeros
        n = self.problem.nbytes(source) // 2
        out = np.zeros(max(nbytes // 2, n), dtype=np.uint16)
        out[:n] = bits16(small_values(rng, n, source), "bf16")
        return out

    def _operand(self, run: Any, name: str) -> np.ndarray:
        p = self.problem
        b, s, h, d = p.shape(name)
        raw = from_bits(np.asarray(run.gmem[name]).view(np.uint16)[: b * s * h * d], "bf16")
        return to_bshd(raw, p.shape(name), p.layout)

    def compare(self, run: Any) -> Verdict:
        p = self.problem
        q, k, v = (self._operand(run, n) for n in ("q", "k", "v"))
        n_out = p.nbytes("o") // 2
        got = to_bshd(from_bits(np.asarray(run.gmem["o"]).view(np.uint16)[:n_out], "bf16"), p.shape("o"), p.layout)
        written = np.asarray(np.asarray(run.gwritten["o"])[: 2 * n_out].reshape(n_out, 2).all(axis=1))
        wr = to_bshd(written, p.shape("o"), p.layout)
        rows = np.flatnonzero(wr.any(axis=(0, 2, 3)))
        msgs: list[str] = []
        if rows.size == 0:
            msgs.append("values: the simulated CTAs wrote no element of O")
            return Verdict(0, 0, 0, msgs)
        ref, mag = reference(p, q, k, v, rows)
        tol = tolerance(p, ref, mag)
        err = np.abs(got.astype(np.float64) - ref)
        bad = wr & ~(err <= tol)
        n = int(wr.sum())
        if bad.any():
            b, s, h, d = (int(x) for x in np.argwhere(bad)[0])
            msgs.append(f"values: {int(bad.sum())} of {n} elements of O differ from the float64 softmax by more than "
                        f"the tolerance, first O[b={b}, s={s}, h={h}, d={d}] = {got[b, s, h, d]} where it is "
                        f"{ref[b, s, h, d]:.6g} (tolerance {tol[b, s, h, d]:.3g})")
        data = {"q": q, "k": k, "v": v, "o": got.astype(np.float32), "written": wr}
        return Verdict(n, int(bad.sum()), 0, msgs, data)


def to_bshd(flat: np.ndarray, shape: tuple[int, int, int, int], layout: str) -> np.ndarray:
    """A flat operand in `layout` as a (B, S, H, D) array (a view)."""
    b, s, h, d = shape
    if layout == "bshd":
        return flat.reshape(b, s, h, d)
    return flat.reshape(b, h, s, d).transpose(0, 2, 1, 3)


def from_bshd(x: np.ndarray, layout: str) -> np.ndarray:
    """A (B, S, H, D) array in `layout`'s memory order, flat."""
    if layout == "bshd":
        return np.ascontiguousarray(x).reshape(-1)
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3)).reshape(-1)


# -- binding ------------------------------------------------------------------------------------------


def bind(header: Any, q: Any, k: Any, v: Any, o: Any, *, scratch: Optional[Any] = None,
         encode: Optional[Callable[..., Any]] = None) -> list[Any]:
    """An attention kernel's parameters by the names its programs use: the tensor maps `q`, `k`,
    `v` and `o` over those tensors' memory (device buffers or `DeviceSpan`s)."""
    from warpy.runtime.bind import bind_params, encode_cached

    return bind_params(header, {"q": q, "k": k, "v": v, "o": o}, {}, scratch=scratch, strict=False,
                       encode=encode or encode_cached)


# -- the family ---------------------------------------------------------------------------------------

#: words `problem` reads after the four sizes: flags, then KEY=VALUE
WORDS_HELP = "B H S D [causal] [bhsd|bshd] [hkv=N] [skv=N] [scale=X]"


def problem_from_words(dims: Sequence[Union[int, str]], arch: str) -> AttentionProblem:
    """`B H S D [causal] [bhsd|bshd] [hkv=N] [skv=N] [scale=X]` (the command line's words)."""
    if len(dims) < 4 or not all(isinstance(d, int) for d in dims[:4]):
        raise WarpyError(f"attention takes four sizes, then options: {WORDS_HELP}")
    B, H, S, D = (int(d) for d in dims[:4])
    kw: dict[str, Any] = {}
    for word in dims[4:]:
        w = str(word).lower()
        if w == "causal":
            kw["causal"] = True
        elif w in LAYOUTS:
            kw["layout"] = w
        elif "=" in w:
            key, _, val = w.partition("=")
            try:
                if key in ("hkv", "h_kv"):
                    kw["H_kv"] = int(val)
                elif key in ("skv", "s_kv"):
                    kw["S_kv"] = int(val)
                elif key == "scale":
                    kw["scale"] = float(val)
                else:
                    raise WarpyError(f"attention: unknown option {word!r} ({WORDS_HELP})")
            except ValueError:
                raise WarpyError(f"attention: {word!r} needs a number") from None
        else:
            raise WarpyError(f"attention: unknown word {word!r} ({WORDS_HELP})")
    return problem(B, H, S, D, arch=arch, **kw)


@attrs.frozen
class AttentionFamily:
    """The attention family (`warpy.kernels.family.KernelFamily`): forward attention."""

    name: str = "attention"

    def problem(self, dims: Sequence[Union[int, str]], *, arch: str, **options: Any) -> AttentionProblem:
        """`attention B H S D [causal] [bhsd|bshd] [hkv=N] [skv=N] [scale=X]` from the command line
        (other options, such as a GEMM's output type, do not apply and are ignored)."""
        return problem_from_words(dims, arch)

    def choose(self, problem: AttentionProblem) -> Config:
        return choose(problem)

    def configure(self, problem: AttentionProblem, overrides: Union[str, Mapping[str, object], None]) -> Config:
        return configure(problem, overrides)

    def build(self, problem: AttentionProblem, config: Any = None) -> Program:
        return build(problem, config)

    def bind(self, header: Any, problem: AttentionProblem, memory: Mapping[str, Any], *, scratch: Any = None,
             encode: Optional[Callable[..., Any]] = None) -> list[Any]:
        return bind(header, memory["q"], memory["k"], memory["v"], memory["o"], scratch=scratch, encode=encode)

    def expectation(self, problem: AttentionProblem) -> AttentionExpectation:
        return AttentionExpectation(problem)


FAMILY = AttentionFamily()
