"""fp32 element math the megakernel's op bodies share: activations, bf16 pairs in and out.

Every activation is computed in fp32 and rounded once to bf16 by the body (`F2FP`, nearest even):

- relu: `max(x, 0)` (FMNMX; exact);
- silu and gelu-tanh: one formula, `x / (1 + 2^(x (a + b x²)))`, with `(a, b) = (-log2 e, 0)` for
  silu (x σ(x)) and `(-2c log2 e, -2c 0.044715 log2 e)`, c = √(2/π), for gelu-tanh, because
  `0.5 (1 + tanh u) = σ(2u)` with `u = c (x + 0.044715 x³)`. Two MUFU operations a value (EX2, RCP:
  PTX's `ex2.approx.ftz` and `rcp.approx.ftz`, a few fp32 ulps), so the result is within one bf16
  step of the float64 reference (`warpy.mega.semantics`), not equal to it: the comparison uses the
  tolerance `warpy.mega.semantics.close` defines. For x far below 0 the power overflows to +inf and
  the result is x x 0 (−0), as the reference's rounded value; for x far above 0 it is x.

`Activation` reads the instruction's `activation` field once and makes the predicates and constants;
`apply(x)` is then eight predicated fp32 lines a value (none and copy: all predicated off).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from warpy.isa.families import alu
from warpy.isa.families.typed import F32
from warpy.isa.operands import RZ, R
from warpy.mega import fields as F
from warpy.mega.fields import fp32_bits

if TYPE_CHECKING:
    from warpy.isa.program import Program

LOG2E = 1.0 / math.log(2.0)
GELU_C = math.sqrt(2.0 / math.pi)
#: (a, b) of x / (1 + 2^(x (a + b x²))) per activation code
SIGMOID_FORM = {
    F.ACT_SILU: (-LOG2E, 0.0),
    F.ACT_GELU_TANH: (-2.0 * GELU_C * LOG2E, -2.0 * GELU_C * 0.044715 * LOG2E),
}
ONE = fp32_bits(1.0)


def const(p: Program, name: str, value: float) -> F32:
    """An F32 register holding `value` (rounded to fp32)."""
    r = F32.of(p.r(name))
    p.emit(alu.mov(r, fp32_bits(value)))
    return r


class Activation:
    """The activation of the instruction whose code `act` holds (a general register): predicates
    `relu` and `sig` (silu or gelu), and the fp32 constants of the sigmoid form."""

    def __init__(self, p: Program, act: R, name: str = "act") -> None:
        self.p = p
        self.relu = p.p(f"{name}_relu")
        self.sig = p.p(f"{name}_sig")
        gelu = p.p(f"{name}_gelu")
        p.emit(alu.isetp("EQ", self.relu, act, F.ACT_RELU))
        p.emit(alu.isetp("GE", self.sig, act, F.ACT_SILU))
        p.emit(alu.isetp("EQ", gelu, act, F.ACT_GELU_TANH))
        silu_a, silu_b = SIGMOID_FORM[F.ACT_SILU]
        gelu_a, gelu_b = SIGMOID_FORM[F.ACT_GELU_TANH]
        self.a = F32.of(p.r(f"{name}_a"))
        self.b = F32.of(p.r(f"{name}_b"))
        p.emit(alu.mov(self.a, fp32_bits(silu_a)))
        p.emit(alu.mov(self.a, fp32_bits(gelu_a)).guarded(gelu))
        p.emit(alu.mov(self.b, fp32_bits(silu_b)))
        p.emit(alu.mov(self.b, fp32_bits(gelu_b)).guarded(gelu))
        self.one = const(p, f"{name}_one", 1.0)
        self.zero = F32.of(RZ)
        self.t = F32.of(p.r(f"{name}_t"))

    def apply(self, x: F32) -> None:
        """x = act(x) in place (fp32)."""
        p, t, g = self.p, self.t, self.sig
        p.emit(alu.fmul(t, x, x).guarded(g))
        p.emit(alu.ffma(t, t, self.b, self.a).guarded(g))  # a + b x²
        p.emit(alu.fmul(t, t, x).guarded(g))  # x (a + b x²)
        p.emit(alu.ex2(t, t).guarded(g))
        p.emit(alu.fadd(t, t, self.one).guarded(g))
        p.emit(alu.rcp(t, t).guarded(g))
        p.emit(alu.fmul(x, x, t).guarded(g))
        p.emit(alu.fmax(x, x, self.zero).guarded(self.relu))


def unpack_bf16(p: Program, pair: R, lo: F32, hi: F32) -> None:
    """lo, hi = the fp32 values of the bf16 pair in `pair` (bits 0-15, bits 16-31)."""
    p.emit(alu.shf_l(lo, pair, 16))
    p.emit(alu.lop3(hi, pair, 0xFFFF0000, RZ, 0xC0))


def pack_bf16(p: Program, pair: R, hi: F32, lo: F32) -> None:
    """pair = (bf16(hi) << 16) | bf16(lo), each rounded to nearest even."""
    p.emit(alu.f2fp_bf16(pair, hi, lo))


__all__ = ["Activation", "SIGMOID_FORM", "unpack_bf16", "pack_bf16", "const", "LOG2E", "GELU_C"]
