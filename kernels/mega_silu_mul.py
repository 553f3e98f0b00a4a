"""The megakernel's silu_mul body (sm_90a): out = silu(gate) · up, elementwise with numpy
broadcasting (SwiGLU's middle: the lowering fuses `mul(silu(a), b)` into it).

Like the binary body: gate lands in lid 0, up in lid 1, the output is written to lid 2; each pair of
bf16 values is unpacked to fp32, silu(gate) = gate / (1 + 2^(-gate log2 e)) (MUFU EX2 and RCP,
`kernels/mega_math.py`), times up, rounded once to bf16. The consumers release gate and up once
computed, the storer the output once stored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from warpy.isa.families import alu
from warpy.isa.families.typed import F32
from warpy.isa.pipes import wait
from warpy.mega import fields as F

from .mega_math import SIGMOID_FORM, const
from .mega_ops import Body, box_bytes, combine_tile, consumers_done, expect, load_operand, out_ready, \
    refuse_elementwise, store_output

if TYPE_CHECKING:
    from .mega_sm90 import Interp, Role


class SiluMul(Body):
    opcode: int = F.SILU_MUL
    name: str = "silu_mul"
    pages: int = 3
    release: tuple[int, ...] = (0, 1, 2)

    def refuse(self, fields: dict[str, int]) -> Optional[str]:
        return refuse_elementwise(fields)

    def load(self, ip: Interp, r: Role) -> None:
        expect(ip, r, box_bytes(ip, r, (1, 2)))
        load_operand(ip, r, 1, 0)
        load_operand(ip, r, 2, 1)

    def compute(self, ip: Interp, r: Role) -> None:
        p = ip.p
        wait(p, ip.loaded.at(r.cons.ring), r.cons.ring.parity)
        r.wait_page(2)
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
        consumers_done(ip)
        r.release_page(0, r.cleader)
        r.release_page(1, r.cleader)
        out_ready(ip, r)

    def store(self, ip: Interp, r: Role) -> None:
        store_output(ip, r, 2)


__all__ = ["SiluMul"]
