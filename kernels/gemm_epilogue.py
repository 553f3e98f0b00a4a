"""The GEMM's fused epilogue: what happens to each fp32 accumulator between the MMAs and C's store.

    C = act(alpha · A·Bᵀ + beta · C_in + bias) + residual, rounded once to C's type

- `alpha`, `beta`: constants of the program (a different value is a different plan);
- `C_in` (`beta != 0`): an M×N row-major matrix of C's type, parameter `c_in`;
- `bias`: a vector of C's type, one value per column (`bias="n"`, length N: `nn.Linear`'s) or per row
  (`bias="m"`, length M), parameter `bias`;
- `act`: `relu`, `silu` (x·σ(x)), `gelu_tanh` (0.5x(1 + tanh(√(2/π)(x + 0.044715x³))), torch's
  `approximate="tanh"`) or `gelu_erf` (x·Φ(x), torch's default);
- `residual`: an M×N row-major matrix of C's type added after the activation, parameter `residual`.

Every step is fp32 on the registers (FMUL, FFMA, FADD, FMNMX, MUFU.EX2 / MUFU.RCP); the per-target
programs (`gemm_sm90.py`, `gemm_sm100.py`) load the inputs each thread's accumulators need and call
`emit_element` on each value. `Epilogue()` (the default) is no epilogue at all: the programs are
then byte for byte what they were before epilogues existed.

**The activations' formulas and their error bounds** (absolute error of the fp32 result against the
exact function of the fp32 input t, before C's rounding; `ACT_BOUND[act] · |t|`):

- silu and gelu_tanh are both t·σ(v) = t / (1 + 2^(−v·log₂e)) with v = t (silu) or
  v = 2√(2/π)(t + 0.044715t³) (gelu_tanh: 0.5(1 + tanh u) = σ(2u), exactly). The exponent a is
  computed with at most 5 roundings (constants, t², the FFMA, the product): |Δa| ≤ 5·2⁻²⁴|a|;
  EX2 is within 2 ulp, the add 1/2 ulp, RCP 1 ulp and the product 1/2 ulp. With r = 1/(1+2^a),
  a relative error δ of 2^a moves r by (1−r)·δ relative, and |a|·r·(1−r) ≤ 0.32 over all a, so
  |Δy| ≤ |t|·(ln2·5·2⁻²⁴·0.32 + (2·2 + 1 + 2 + 1)·2⁻²⁴) ≤ 10·2⁻²⁴·|t| < 2⁻²⁰·|t|.
- gelu_erf = t·Φ(t) with Φ from Abramowitz & Stegun 7.1.26 (Hastings): for x ≥ 0,
  erf(x) = 1 − s(a₁ + s(a₂ + s(a₃ + s(a₄ + s·a₅))))·e^(−x²) + ε(x), s = 1/(1 + p·x), |ε| ≤ 1.5·10⁻⁷.
  With x = |t|/√2 and g = ½·q(s)·e^(−t²/2) (the coefficients pre-halved, exact), gelu_erf(t) =
  max(t, 0) − |t|·g, so the formula's error is |t|·ε/2 ≤ 7.5·10⁻⁸·|t|. The fp32 evaluation: s within
  2⁻²² relative (an FFMA and RCP), Horner's five steps each within 2⁻²⁴ of their value with
  Σ|aᵢ|/q ≤ 4.5 (q ≥ 1 − 1.5·10⁻⁷ only at s = 1, so about 4.5·(5 + 4)·2⁻²⁴ relative), e^(−t²/2)
  through EX2 (2 ulp, its exponent 3 roundings, |a|·2⁻ᵃ·... ≤ 0.53), g ≤ ½: in all below
  2⁻¹⁹·|t|; with the formula's, ACT_BOUND = 2⁻¹⁸.
- relu is exact.

`tests/kernels/test_gemm_epilogue.py` checks the bounds against math.erf / math.exp over a dense grid
of fp32 inputs, with every MUFU result pushed to the ends of its allowed error. The checker computes
MUFU exactly rounded (`warpy.isa.semantics`), so `warpy check gemm ... --values` proves the program
to the same tolerance as the H200 must meet.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Optional, Union

import attrs
import numpy as np

from warpy.errors import WarpyError
from warpy.isa.families import alu, memory
from warpy.isa.families._util import ins
from warpy.isa.families.typed import F16, F32
from warpy.isa.operands import RZ, CBank, GMem, P, R, RVec, URVec

if TYPE_CHECKING:
    from warpy.isa.instr import Instr
    from warpy.isa.program import Program

ACTS = ("", "relu", "silu", "gelu_tanh", "gelu_erf")
BIASES = ("", "m", "n")
AUX_PARAMS = ("bias", "c_in", "residual")  # the epilogue's pointer parameters, by name

LOG2E = 1.0 / math.log(2.0)
GELU_K0 = 2.0 * math.sqrt(2.0 / math.pi)  # 2u = t·(K0 + K1·t²)
GELU_K1 = GELU_K0 * 0.044715
AS_P = 0.3275911  # Abramowitz & Stegun 7.1.26
AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
AS_BOUND = 1.5e-7

#: |computed - exact| <= ACT_BOUND[act] * |t| (the derivation is the module's docstring)
ACT_BOUND = {"": 0.0, "relu": 0.0, "silu": 2.0 ** -20, "gelu_tanh": 2.0 ** -20, "gelu_erf": 2.0 ** -18}


def _f32(x: float) -> float:
    return float(np.float32(x))


def _act(value: str) -> str:
    v = value.lower().replace("-", "_")
    v = {"none": "", "gelu": "gelu_erf"}.get(v, v)
    if v not in ACTS:
        raise WarpyError(f"activation {value!r} is not one of relu, silu, gelu_tanh, gelu_erf (gelu)")
    return v


def _bias(value: str) -> str:
    v = value.lower()
    v = {"none": "", "row": "n", "col": "m", "rows": "n", "cols": "m"}.get(v, v)
    if v not in BIASES:
        raise WarpyError(f"bias {value!r} is not n (one value per column, length N) or m (one per row, length M)")
    return v


def _finite(inst: object, a: "attrs.Attribute[float]", v: float) -> None:
    if not math.isfinite(v):
        raise WarpyError(f"{a.name} must be a finite number, not {v!r}")


def _number(v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
        raise WarpyError(f"alpha and beta are numbers, not {v!r}")
    return float(v)


@attrs.frozen
class Epilogue:
    """What the GEMM does to C before storing it (module docstring); the default does nothing."""

    alpha: float = attrs.field(default=1.0, converter=_number, validator=_finite)
    beta: float = attrs.field(default=0.0, converter=_number, validator=_finite)
    bias: str = attrs.field(default="", converter=_bias)
    act: str = attrs.field(default="", converter=_act)
    residual: bool = attrs.field(default=False, converter=bool)

    @property
    def identity(self) -> bool:
        return self == Epilogue()

    def params(self) -> tuple[str, ...]:
        """The pointer parameters the program takes for it, in order."""
        return (("bias",) if self.bias else ()) + (("c_in",) if self.beta else ()) + (("residual",) if self.residual else ())

    def tag(self) -> str:
        """A kernel-name suffix ("" for no epilogue)."""
        if self.identity:
            return ""
        parts = []
        if self.alpha != 1.0:
            parts.append("a" + _num(self.alpha))
        if self.beta:
            parts.append("b" + _num(self.beta))
        if self.bias:
            parts.append("bias" + self.bias)
        if self.act:
            parts.append(self.act)
        if self.residual:
            parts.append("res")
        return "_ep_" + "_".join(parts)

    def describe(self) -> str:
        if self.identity:
            return "C = A·Bᵀ"
        t = "A·Bᵀ" if self.alpha == 1.0 else f"{self.alpha:g}·A·Bᵀ"
        if self.beta:
            t += f" + {self.beta:g}·C_in"
        if self.bias:
            t += " + bias[" + ("col" if self.bias == "n" else "row") + "]"
        if self.act:
            t = f"{self.act}({t})"
        if self.residual:
            t += " + residual"
        return "C = " + t

    def __str__(self) -> str:
        return self.describe()


def _num(x: float) -> str:
    return re.sub(r"[^0-9a-z]", lambda m: {"-": "m", ".": "p", "+": ""}.get(m.group(0), "x"), f"{x:g}")


def parse_words(words: list[str]) -> Epilogue:
    """`alpha=0.5 beta=1 bias=n act=gelu_erf residual=1` (the command line's words) as an Epilogue."""
    kw: dict[str, object] = {}
    for w in words:
        key, sep, val = w.partition("=")
        if not sep or key not in ("alpha", "beta", "bias", "act", "residual"):
            raise WarpyError(f"{w!r} is not an epilogue option (alpha=X beta=X bias=m|n act=relu|silu|gelu_tanh|"
                             "gelu_erf residual=0|1)")
        if key in ("alpha", "beta"):
            try:
                kw[key] = float(val)
            except ValueError:
                raise WarpyError(f"{key}={val!r} is not a number") from None
        elif key == "residual":
            if val.lower() not in ("0", "1", "true", "false"):
                raise WarpyError(f"residual={val!r} is not 0 or 1")
            kw[key] = val.lower() in ("1", "true")
        else:
            kw[key] = val
    return Epilogue(**kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# numpy: the reference and its tolerance, and the instruction sequence's own arithmetic


def _exact_act(t: np.ndarray, act: str) -> np.ndarray:
    t = np.asarray(t, dtype=np.float64)
    if act == "":
        return t
    if act == "relu":
        return np.asarray(np.maximum(t, 0.0), dtype=np.float64)
    with np.errstate(over="ignore"):
        if act == "silu":
            return np.asarray(t / (1.0 + np.exp(-t)), dtype=np.float64)
        if act == "gelu_tanh":
            return np.asarray(0.5 * t * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (t + 0.044715 * t ** 3))),
                              dtype=np.float64)
    erf = np.frompyfunc(math.erf, 1, 1)
    return np.asarray(0.5 * t * (1.0 + np.asarray(erf(t / math.sqrt(2.0)), dtype=np.float64)), dtype=np.float64)


def reference(acc: np.ndarray, ep: Epilogue, c_in: Optional[np.ndarray], bias: Optional[np.ndarray],
              residual: Optional[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(the exact result, the absolute tolerance of the fp32 result before C's rounding) of the
    epilogue over the exact product `acc` (M×N float64): the activation's bound (ACT_BOUND), and
    2⁻²² relative for each of the linear steps' roundings."""
    t = acc * ep.alpha
    lin = np.abs(t)
    if ep.beta:
        assert c_in is not None
        t = t + ep.beta * c_in
        lin = lin + np.abs(ep.beta * c_in)
    if ep.bias:
        assert bias is not None
        b = bias[None, :] if ep.bias == "n" else bias[:, None]
        t = t + b
        lin = lin + np.abs(b)
    y = _exact_act(t, ep.act)
    tol = ACT_BOUND[ep.act] * np.abs(t) + 2.0 ** -22 * lin * (1.0 if ep.act in ("", "relu") else 2.0)
    if ep.residual:
        assert residual is not None
        y = y + residual
        tol = tol + 2.0 ** -23 * np.abs(y)
    return y, tol


def emulate_act(t: np.ndarray, act: str, ex2_ulps: float = 0.0, rcp_ulps: float = 0.0) -> np.ndarray:
    """The fp32 arithmetic of `emit_activation`'s instructions in numpy (each result rounded to fp32;
    an FFMA as one rounding of the float64 value), with MUFU.EX2 / MUFU.RCP results moved by the
    given number of ulps (the hardware's allowed error: ±2 and ±1)."""
    f = np.float32
    t = np.asarray(t, dtype=f)

    def ulp_shift(x: np.ndarray, n: float) -> np.ndarray:
        x = np.asarray(x, dtype=f)
        if not n:
            return x
        with np.errstate(over="ignore", invalid="ignore"):
            step = np.spacing(np.abs(x)).astype(f)
            return np.where(np.isfinite(x), (x.astype(np.float64) + n * step).astype(f), x)

    def ex2(a: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return ulp_shift(np.exp2(a.astype(np.float64)).astype(f), ex2_ulps)

    def rcp(d: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return ulp_shift((1.0 / d.astype(np.float64)).astype(f), rcp_ulps)

    def fma(a: np.ndarray, b: float, c: float) -> np.ndarray:
        return np.asarray(a.astype(np.float64) * float(b) + float(c), dtype=f)

    with np.errstate(over="ignore", invalid="ignore"):
        if act == "relu":
            return np.asarray(np.maximum(t, f(0)), dtype=f)
        if act in ("silu", "gelu_tanh"):
            if act == "silu":
                a = (t * f(-LOG2E)).astype(f)
            else:
                z = (t * t).astype(f)
                w = fma(z, float(f(-GELU_K1 * LOG2E)), float(f(-GELU_K0 * LOG2E)))
                a = (t * w).astype(f)
            d = (ex2(a) + f(1)).astype(f)
            return np.asarray(t * rcp(d), dtype=f)
        if act == "gelu_erf":
            ax = np.abs(t)
            s = rcp(fma(ax, float(f(AS_P / math.sqrt(2.0))), 1.0))
            k = [f(0.5 * c) for c in AS_A]
            q = fma(s, float(k[4]), float(k[3]))
            for c in (k[2], k[1], k[0]):
                q = (q.astype(np.float64) * s.astype(np.float64) + np.float64(c)).astype(f)
            q = (q * s).astype(f)
            z = (t * t).astype(f)
            e = ex2((z * f(-0.5 * LOG2E)).astype(f))
            g = (q * e).astype(f)
            m = np.maximum(t, f(0))
            return np.asarray(-(ax.astype(np.float64)) * g.astype(np.float64) + m.astype(np.float64), dtype=f)
    return t


# ---------------------------------------------------------------------------------------------
# the program's side


@attrs.frozen
class Consts:
    """The epilogue's constants in registers (set once a tile, before its values)."""

    alpha: Optional[F32]
    beta: Optional[F32]
    zero: Optional[F32]
    one: Optional[F32]
    k: tuple[F32, ...]  # the activation's constants


def _bits(x: float) -> int:
    return int(np.array([x], dtype=np.float32).view(np.uint32)[0])


def emit_consts(p: Program, ep: Epilogue) -> Consts:
    def const(name: str, x: float) -> F32:
        r = F32.of(p.r(name))
        p.emit(alu.mov(r, _bits(x)))
        return r

    alpha = const("ep_alpha", ep.alpha) if ep.alpha != 1.0 else None
    beta = const("ep_beta", ep.beta) if ep.beta else None
    zero = const("ep_zero", 0.0) if ep.act in ("relu", "gelu_erf") else None
    one = const("ep_one", 1.0) if ep.act in ("silu", "gelu_tanh", "gelu_erf") else None
    ks: tuple[float, ...] = ()
    if ep.act == "silu":
        ks = (-LOG2E,)
    elif ep.act == "gelu_tanh":
        ks = (-GELU_K0 * LOG2E, -GELU_K1 * LOG2E)
    elif ep.act == "gelu_erf":
        ks = (AS_P / math.sqrt(2.0), -0.5 * LOG2E) + tuple(0.5 * c for c in AS_A)
    k = tuple(const(f"ep_k{i}", x) for i, x in enumerate(ks))
    return Consts(alpha, beta, zero, one, k)


def emit_activation(p: Program, ep: Epilogue, k: Consts, t: F32) -> None:
    """t = act(t), in place (the sequence `emulate_act` follows)."""
    if not ep.act:
        return
    if ep.act == "relu":
        assert k.zero is not None
        p.emit(alu.fmax(t, t, k.zero))
        return
    a, e = F32.of(p.r("ep_arg")), F32.of(p.r("ep_exp"))
    if ep.act in ("silu", "gelu_tanh"):
        assert k.one is not None
        if ep.act == "silu":
            p.emit(alu.fmul(a, t, k.k[0]))
        else:
            z = F32.of(p.r("ep_sq"))
            p.emit(alu.fmul(z, t, t))
            p.emit(alu.ffma(z, z, k.k[1], k.k[0]))
            p.emit(alu.fmul(a, t, z))
        p.emit(alu.ex2(e, a))
        p.emit(alu.fadd(e, e, k.one))
        p.emit(alu.rcp(e, e))
        p.emit(alu.fmul(t, t, e))
        return
    # gelu_erf: max(t, 0) - |t| * (q(s) / 2) * 2^(-t²/2 · log2 e), s = 1 / (1 + p |t| / √2)
    assert k.one is not None and k.zero is not None
    ax, s, q = F32.of(p.r("ep_abs")), F32.of(p.r("ep_s")), F32.of(p.r("ep_q"))
    kp, kh, a1, a2, a3, a4, a5 = k.k
    p.emit(alu.fmax(ax, t, -t))
    p.emit(alu.ffma(s, ax, kp, k.one))
    p.emit(alu.rcp(s, s))
    p.emit(alu.ffma(q, s, a5, a4))
    for c in (a3, a2, a1):
        p.emit(alu.ffma(q, q, s, c))
    p.emit(alu.fmul(q, q, s))
    p.emit(alu.fmul(a, t, t))
    p.emit(alu.fmul(a, a, kh))
    p.emit(alu.ex2(e, a))
    p.emit(alu.fmul(q, q, e))
    p.emit(alu.fmax(t, t, k.zero))
    p.emit(alu.ffma(t, -ax, q, t))


def emit_element(p: Program, ep: Epilogue, k: Consts, t: F32, c_in: Optional[F32], bias: Optional[F32],
                 residual: Optional[F32]) -> None:
    """t = act(alpha·t + beta·c_in + bias) + residual, in place."""
    if k.alpha is not None:
        p.emit(alu.fmul(t, t, k.alpha))
    if c_in is not None:
        assert k.beta is not None
        p.emit(alu.ffma(t, c_in, k.beta, t))
    if bias is not None:
        p.emit(alu.fadd(t, t, bias))
    emit_activation(p, ep, k, t)
    if residual is not None:
        p.emit(alu.fadd(t, t, residual))


def fragment_origin(p: Program, prefix: str, c: int, bm: int, bn: int, m_blk: R,
                    n_blk: R, rows: Optional[int] = None) -> tuple[URVec, R, R, R, R]:
    """For an sm_90a epilogue on an accumulator of consumer warpgroup `c`, the 64-row block at row
    `rows` of the tile (64 c where each warpgroup has one): (the memory descriptor, the thread's index
    in the warpgroup, a scratch register, `row`, `col`), `row` and `col` the thread's first element of
    C in the wgmma fragment (value 4j + 2h + i at row + 8h, col + 8j + i) of the tile (m_blk, n_blk) of
    bm x bn; registers named `prefix`_..."""
    md = p.urvec(f"{prefix}_md", 2)
    p.emit(alu.uldc(md, CBank(0, 0x208), p.sm))
    t, tmp = p.r(f"{prefix}_tid"), p.r(f"{prefix}_tmp")
    row, col = p.r(f"{prefix}_row"), p.r(f"{prefix}_col")
    p.emit(alu.iadd3(t, R("tid"), (1 << 32) - 128 * (c + 1)))
    p.emit(alu.shf_r(row, t, 5))
    p.emit(alu.imad(row, row, 16, 64 * c if rows is None else rows))
    p.emit(alu.lop3(tmp, t, 31, RZ, 0xC0))
    p.emit(alu.shf_r(tmp, tmp, 2))
    p.emit(alu.iadd3(row, row, tmp))
    p.emit(alu.imad(row, m_blk, bm, row))
    p.emit(alu.lop3(col, t, 3, RZ, 0xC0))
    p.emit(alu.shf_l(col, col, 1))
    p.emit(alu.imad(col, n_blk, bn, col))
    return md, t, tmp, row, col


def emit_load(p: Program, md: URVec, addr: RVec, offset: int, dtype: str, dst: tuple[F32, ...],
              guards: tuple[Optional[P], ...], pair: bool) -> None:
    """dst = one or two consecutive elements of `dtype` at addr + offset as fp32. `pair`: both in one
    aligned access under guards[0] (else one access an element, each under its guard). An element
    whose guard is false reads as 0 (nothing is loaded)."""
    eb = 4 if dtype == "fp32" else 2
    for d in dst:
        p.emit(alu.mov(d, 0))
    if dtype == "fp32":
        if pair:
            v = p.rvec("ep_ld2", 2)
            p.emit(_ldg(v, "64", GMem(md, addr, offset)).guarded(guards[0]))
            p.emit(alu.mov(dst[0], v[0]).guarded(guards[0]))
            p.emit(alu.mov(dst[1], v[1]).guarded(guards[0]))
        else:
            for i, d in enumerate(dst):
                p.emit(_ldg(d, "", GMem(md, addr, offset + i * eb)).guarded(guards[i]))
        return
    raw = p.r("ep_raw")
    if pair:
        p.emit(alu.mov(raw, 0))
        p.emit(_ldg(raw, "", GMem(md, addr, offset)).guarded(guards[0]))
        _widen(p, dtype, raw, dst[0], dst[1])
        return
    for i, d in enumerate(dst):
        p.emit(alu.mov(raw, 0))
        p.emit(_ldg(raw, "U16", GMem(md, addr, offset + i * eb)).guarded(guards[i]))
        _widen(p, dtype, raw, d, None)


def _ldg(d: Union[R, RVec], size: str, g: GMem) -> "Instr":
    """A relaxed GPU-scope load (`LDG.E[.size].STRONG.GPU`, L2-cached) of an epilogue input. The
    inputs are read once each (bias: by the lanes of one access); a plain LDG would do as well on
    the GPU, but the checker takes a plain load of memory the launch did not write for another
    grid's partial sums (stream-K), and would then not compare C's values."""
    return ins(memory.LDG, "E." + (size + "." if size else "") + "STRONG.GPU", d, g)


def _widen(p: Program, dtype: str, raw: R, lo: F32, hi: Optional[F32]) -> None:
    """lo, hi = the fp32 values of the 16-bit elements in bits 0-15 and 16-31 of raw."""
    if dtype == "bf16":
        p.emit(alu.shf_l(lo, raw, 16))
        if hi is not None:
            p.emit(alu.lop3(hi, raw, 0xFFFF0000, RZ, 0xC0))
        return
    p.emit(alu.f2f(lo, F16.of(raw)))
    if hi is not None:
        up = p.r("ep_hi16")
        p.emit(alu.shf_r(up, raw, 16))
        p.emit(alu.f2f(hi, F16.of(up)))


__all__ = ["ACTS", "ACT_BOUND", "AUX_PARAMS", "Consts", "Epilogue", "emit_activation", "emit_consts", "emit_element",
           "emit_load", "emulate_act", "parse_words", "reference"]
