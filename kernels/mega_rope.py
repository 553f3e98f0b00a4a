"""The megakernel's rope body (sm_90a): rotary position embedding in Llama's rotate-half form,
elementwise over whole rows of the head dimension D:

    out[j] = x[j]·cos[j] - x[j + D/2]·sin[j]     (j < D/2)
    out[j] = x[j]·cos[j] + x[j - D/2]·sin[j]     (j >= D/2)

(`warpy.mega.semantics.rope`; the tables are (T, D) graph inputs, read through (T, 1, D) views so
that a tile's rows, the heads, broadcast them.) x lands in lid 0, cos in lid 1, sin in lid 2, the
output is written to lid 3 (not in place: a lane reads its partner columns, which another lane
rewrites). Lane l of a row takes columns 8l..8l+7 (`Tile2`) and the partner group 8l ^ D/2; per
element t = ±x'·sin (exact in fp32: a product of two bf16 values), out = fma(x, cos, t) rounded
once in fp32 and once to bf16, which is what the float64 reference rounds through, so the body is
exact. The consumers release x, cos and sin once computed, the storer the output once stored.
A tile is whole rows of D (the elementwise rule's columns: D <= 256); D a multiple of 16 (the
partner of an 8-column group is a whole group). sm_100a has no rope body: its plan refuses a graph
with one in one line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

from warpy.isa.families import alu, memory
from warpy.isa.families.typed import F32
from warpy.isa.operands import RZ, Mem, R
from warpy.isa.pipes import wait
from warpy.mega import fields as F

from .mega_math import const, pack_bf16, unpack_bf16
from .mega_ops import (Body, Operand, Tile2, box_bytes, consumers_done, expect, load_operand, out_ready,
                       refuse_elementwise, store_output)

if TYPE_CHECKING:
    from .mega_sm90 import Interp, Role


class Rope(Body):
    opcode: int = F.ROPE
    name: str = "rope"
    pages: int = 4
    release: tuple[int, ...] = (0, 1, 2, 3)

    def refuse(self, fields: dict[str, int]) -> Optional[str]:
        why = refuse_elementwise(fields)
        if why is not None:
            return why
        n = fields["tile_n"]
        if n % 16:
            return f"rope over rows of {n} (the body pairs groups of 8 columns: D a multiple of 16)"
        if fields["op1.col_stride"] != 1 or fields["op0.row_stride"] != fields["op1.row_stride"]:
            return "rope whose x box lands unlike its output box"
        return None

    def load(self, ip: Interp, r: Role) -> None:
        expect(ip, r, box_bytes(ip, r, (1, 2, 3)))
        load_operand(ip, r, 1, 0)
        load_operand(ip, r, 2, 1)
        load_operand(ip, r, 3, 2)

    def compute(self, ip: Interp, r: Role) -> None:
        p = ip.p
        wait(p, ip.loaded.at(r.cons.ring), r.cons.ring.parity)
        r.wait_page(3)
        t = Tile2(ip, r)
        x = Operand(ip, r, 1, 0, "x")
        xp = Operand(ip, r, 1, 0, "xp")  # the same box: its own registers for the partner columns
        cos = Operand(ip, r, 2, 1, "cos")
        sin = Operand(ip, r, 3, 2, "sin")
        out = Operand(ip, r, 0, 3, "out")
        half, pcol = p.r("rope_half"), p.r("rope_pcol")
        p.emit(alu.shf_r(half, t.tn, 1))
        p.emit(alu.lop3(pcol, t.col0, half, RZ, 0x3C))  # the partner group: col0 ^ D/2
        low = p.p("rope_low")
        p.emit(alu.isetp("LT", low, t.col0, half))
        sgn = F32.of(p.r("rope_sgn"))  # -1 for the first half (x1·cos - x2·sin), +1 for the second
        p.emit(alu.fsel(sgn, const(p, "rope_neg", -1.0), const(p, "rope_pos", 1.0), low))

        def row_body(row: R) -> None:
            vx, vp = x.load(row, t.col0), xp.load(row, pcol)
            vc, vs = cos.load(row, t.col0), sin.load(row, t.col0)
            res = p.rvec("res", 4)
            xl, xh = F32.of(p.r("x_lo")), F32.of(p.r("x_hi"))
            pl, ph = F32.of(p.r("p_lo")), F32.of(p.r("p_hi"))
            cl, ch = F32.of(p.r("c_lo")), F32.of(p.r("c_hi"))
            sl, sh = F32.of(p.r("s_lo")), F32.of(p.r("s_hi"))
            for q in range(4):
                unpack_bf16(p, vx[q], xl, xh)
                unpack_bf16(p, vp[q], pl, ph)
                unpack_bf16(p, vc[q], cl, ch)
                unpack_bf16(p, vs[q], sl, sh)
                for xv, pv, cv, sv in ((xl, pl, cl, sl), (xh, ph, ch, sh)):
                    p.emit(alu.fmul(pv, pv, sv))  # x'·sin, exact
                    p.emit(alu.fmul(pv, pv, sgn))
                    p.emit(alu.ffma(xv, xv, cv, pv))  # x·cos ± x'·sin, rounded once
                pack_bf16(p, res[q], xh, xl)
            p.emit(memory.sts(Mem(out.addr(row, t.col0)), res))

        t.rows(row_body)
        consumers_done(ip)
        r.release_page(0, r.cleader)
        r.release_page(1, r.cleader)
        r.release_page(2, r.cleader)
        out_ready(ip, r)

    def store(self, ip: Interp, r: Role) -> None:
        store_output(ip, r, 3)


def condition(a: Sequence[Any], c: Sequence[Any]) -> Any:
    """The rope output's condition (`kernels.mega_common.conditions`; `a` the operands' values, `c`
    their conditions: x, cos, sin): |cos|·cond x + |sin|·cond x' + |x|·cond cos + |x'|·cond sin, x'
    the rotated partner."""
    import numpy as np

    from warpy.mega.semantics import rotate_half

    x, cs, sn = (np.asarray(v, dtype=np.float64) for v in a)
    cx, cc, csn = (np.asarray(v, dtype=np.float64) for v in c)
    out = (np.abs(cs) * cx + np.abs(sn) * np.abs(rotate_half(cx)) + np.abs(x) * cc
                   + np.abs(rotate_half(x)) * csn)
    return out


__all__ = ["Rope", "condition"]
