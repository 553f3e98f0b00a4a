"""The megakernel's silu_mul body (sm_90a): out = silu(gate) · up, elementwise with numpy
broadcasting (SwiGLU's middle: the lowering fuses `mul(silu(a), b)` into it).

Like the binary body: gate lands in lid 0, up in lid 1, the output is written to lid 2; each pair of
bf16 values is unpacked to fp32, silu(gate) = gate / (1 + 2^(-gate log2 e)) (MUFU EX2 and RCP,
`kernels/mega_math.py`), times up, rounded once to bf16. The consumers release gate and up once
computed, the storer the output once stored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from warpy.isa.families import alu
from warpy.isa.families.typed import F32
from warpy.mega import fields as F

from .mega_math import SIGMOID_FORM, const
from .mega_ops import TwoInputs, combine_tile

if TYPE_CHECKING:
    from .mega_sm90 import Interp, Role


class SiluMul(TwoInputs):
    opcode: int = F.SILU_MUL
    name: str = "silu_mul"

    def compute(self, ip: Interp, r: Role) -> None:
        p = ip.p
        self.inputs_landed(ip, r)
        a = const(p, "silu_a", SIGMOID_FORM[F.ACT_SILU][0])
        one = const(p, "silu_one", 1.0)
        t = F32.of(p.r("silu_t"))

        def silu_mul(x: F32, y: F32) -> None:
            p.emit(alu.fmul(t, x, a))  # -x log2 e
            p.emit(alu.ex2(t, t))
            p.emit(alu.fadd(t, t, one))
            p.emit(alu.rcp(t, t))
            p.emit(alu.fmul(x, x, t))  # silu(x)
            p.emit(alu.fmul(x, x, y))

        combine_tile(ip, r, 0, 1, 2, silu_mul)
        self.computed(ip, r)


__all__ = ["SiluMul"]
