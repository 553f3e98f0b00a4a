"""The megakernel's rmsnorm body (sm_90a): out = x / sqrt(mean(x²) + eps) · w over whole rows, eps
from the graph (fp32 bits in the instruction), w the graph's weight row.

A tile is `tile_m` whole rows of H columns. A TMA box is at most 256 columns wide, so a row lands as
`k_stages` boxes of `k_step` columns (the host derives both from the map): lid 0 holds the x boxes
one after the other (box b: the tile's rows of columns b·k_step.., packed), lid 1 the weight's boxes
likewise; the tiling rule keeps a tile within a page. The output is computed in place in lid 0 and
stored box by box through the output's map (the same boxes as x's).

The consumers: warp w of 8 takes rows w, w + 8, ...; lane l the 8 columns 8l..8l+7 of every box
(lanes past the box's width hold zeros). Each lane sums the squares of its elements in fp32 (FFMA),
the warp adds them (`warpy.isa.units.warp.warp_sum`: the butterfly, the same bits in every lane),
rstd = MUFU.RSQ(sum · MUFU.RCP(H) + eps), and each element becomes bf16(x · rstd · w). Columns past H
in the last box, and rows past the tensor in the last tile, were filled with zeros by the copy: they
add nothing to the sums and are clipped by the store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from warpy.isa.families import alu, control, memory
from warpy.isa.families.typed import F32, U32
from warpy.isa.operands import RZ, Mem, R
from warpy.isa.pipes import wait
from warpy.isa.units.warp import warp_sum
from warpy.mega import fields as F
from warpy.mega.tiling import BOX_MAX, PAGE_BYTES

from .mega_math import pack_bf16, unpack_bf16
from .mega_ops import Body, MapOp, consumers_done, expect, load_boxes, out_ready, store_output

if TYPE_CHECKING:
    from .mega_sm90 import Interp, Role

MAX_BOXES = 64  # a row of at most 64 boxes of 256 columns (a page holds one such row)


class RmsNorm(Body):
    opcode: int = F.RMSNORM
    name: str = "rmsnorm"
    pages: int = 2
    release: tuple[int, ...] = (1, 0)

    def refuse(self, fields: dict[str, int]) -> Optional[str]:
        bc, nbox = fields["k_step"], fields["k_stages"]
        if not 8 <= bc <= BOX_MAX or bc % 8 or not 1 <= nbox <= MAX_BOXES or bc * nbox < fields["k_end"]:
            return f"rmsnorm rows of {fields['k_end']} columns as {nbox} boxes of {bc}"
        if fields["op1.col_stride"] != 1 or fields["op1.row_stride"] not in (0, bc):
            return "rmsnorm whose rows do not land as boxes of whole rows"
        if (fields["op0.box_16"], fields["op0.row_stride"], fields["op0.col_stride"]) != \
                (fields["op1.box_16"], fields["op1.row_stride"], fields["op1.col_stride"]):
            return "rmsnorm whose output box lands unlike its input box (it is computed in place)"
        if fields["op2.col_stride"] != 1 or fields["op2.row_stride"] != 0:
            return "rmsnorm whose weight is not one row broadcast over the tile's rows"
        if fields["op1.box_16"] * 16 * nbox > PAGE_BYTES or fields["op2.box_16"] * 16 * nbox > PAGE_BYTES:
            return "rmsnorm tile larger than a page"
        if fields["tile_m"] * bc * 2 != fields["op1.box_16"] * 16:
            return "rmsnorm box that is not the tile's rows"
        return None

    def load(self, ip: Interp, r: Role) -> None:
        p = ip.p
        nbox = r.field("k_stages", p.r("rn_nbox"))
        step = p.ur("rn_step")
        p.emit(alu.r2ur(step, r.field("k_step", p.r("rn_cols"))))
        x = MapOp(ip, r, 1, "rnx")
        w = MapOp(ip, r, 2, "rnw")
        both = p.ur("rn_both")
        p.emit(alu.uiadd3(both, x.bytes, w.bytes))
        total = p.r("rn_tx")
        p.emit(alu.mov(total, both))
        p.emit(alu.imad(total, total, nbox, RZ))
        r.wait_page(0)
        r.wait_page(1)
        expect(ip, r, total)
        load_boxes(ip, r, x, 0, nbox, step)
        load_boxes(ip, r, w, 1, nbox, step)

    def compute(self, ip: Interp, r: Role) -> None:
        p = ip.p
        wait(p, ip.loaded.at(r.cons.ring), r.cons.ring.parity)
        tm = r.field("tile_m", p.r("rn_tm"))
        nbox = r.field("k_stages", p.r("rn_nbox"))
        bc = r.field("k_step", p.r("rn_cols"))
        h = r.field("k_end", p.r("rn_h"))
        bx = r.field("op1.box_16", p.r("rn_bx"))
        p.emit(alu.imad(bx, bx, 16, RZ))
        bw = r.field("op2.box_16", p.r("rn_bw"))
        p.emit(alu.imad(bw, bw, 16, RZ))
        eps = F32.of(r.field("eps", p.r("rn_eps")))
        inv_h = F32.of(p.r("rn_inv_h"))
        p.emit(alu.i2f(inv_h, U32.of(h)))
        p.emit(alu.rcp(inv_h, inv_h))
        xbase, wbase = p.r("rn_xbase"), p.r("rn_wbase")
        for base, lid in ((xbase, 0), (wbase, 1)):
            reg, off = p.derive.value_reg("addr", r.page(lid))
            p.emit(alu.mov(base, reg))
            p.emit(alu.iadd3(base, base, off))
        cw, lane = p.r("rn_warp"), p.r("rn_lane")
        p.emit(alu.shf_r(cw, r.ctid, 5))
        p.emit(alu.lop3(lane, r.ctid, 31, RZ, 0xC0))
        col = p.r("rn_col")  # this lane's first column in a box
        p.emit(alu.imad(col, lane, 8, RZ))
        inbox = p.p("rn_inbox")
        p.emit(alu.isetp("LT", inbox, col, bc))
        steps = p.r("rn_steps")
        p.emit(alu.iadd3(steps, tm, 7))
        p.emit(alu.shf_r(steps, steps, 3))
        s = F32.of(p.r("rn_sum"))
        rstd = F32.of(p.r("rn_rstd"))
        v, wv = p.rvec("rn_v", 4), p.rvec("rn_w", 4)
        lo, hi = F32.of(p.r("rn_lo")), F32.of(p.r("rn_hi"))
        wlo, whi = F32.of(p.r("rn_wlo")), F32.of(p.r("rn_whi"))
        xa, wa = p.r("rn_xa"), p.r("rn_wa")
        with p.loop("rn_row", steps, max_count=32) as j:
            row = p.r("rn_r")
            p.emit(alu.imad(row, j.reg, 8, cw))
            inside = p.p("rn_row_in")
            p.emit(alu.isetp("LT", inside, row, tm))
            skip = p.fresh_label("RN_ROW_OUT")
            p.emit(control.bra(skip).guarded(~inside))  # (the same in every lane of the warp)
            p.emit(alu.mov(s, 0))

            def row_addr() -> None:
                """xa = the row's first element of this lane in box 0; wa = the weight's."""
                p.emit(alu.imad(xa, row, bc, col))
                p.emit(alu.imad(xa, xa, 2, xbase))
                p.emit(alu.imad(wa, col, 2, wbase))

            row_addr()
            with p.loop("rn_sq", nbox, max_count=MAX_BOXES):
                p.emit(memory.lds(v, Mem(xa)).guarded(inbox))
                for q in range(4):
                    p.emit(alu.mov(v[q], 0).guarded(~inbox))
                    unpack_bf16(p, v[q], lo, hi)
                    p.emit(alu.ffma(s, lo, lo, s))
                    p.emit(alu.ffma(s, hi, hi, s))
                p.emit(alu.iadd3(xa, xa, bx))
            warp_sum(p, s)
            p.emit(alu.ffma(rstd, s, inv_h, eps))
            p.emit(alu.rsq(rstd, rstd))
            row_addr()
            with p.loop("rn_out", nbox, max_count=MAX_BOXES):
                p.emit(memory.lds(v, Mem(xa)).guarded(inbox))
                p.emit(memory.lds(wv, Mem(wa)).guarded(inbox))
                for q in range(4):
                    p.emit(alu.mov(v[q], 0).guarded(~inbox))
                    p.emit(alu.mov(wv[q], 0).guarded(~inbox))
                    unpack_bf16(p, v[q], lo, hi)
                    unpack_bf16(p, wv[q], wlo, whi)
                    p.emit(alu.fmul(lo, lo, rstd))
                    p.emit(alu.fmul(hi, hi, rstd))
                    p.emit(alu.fmul(lo, lo, wlo))
                    p.emit(alu.fmul(hi, hi, whi))
                    pack_bf16(p, v[q], hi, lo)
                p.emit(memory.sts(Mem(xa), v).guarded(inbox))
                p.emit(alu.iadd3(xa, xa, bx))
                p.emit(alu.iadd3(wa, wa, bw))
            p.label(skip)
        consumers_done(ip)
        r.release_page(1, r.cleader)
        out_ready(ip, r)

    def store(self, ip: Interp, r: Role) -> None:
        p = ip.p
        nbox = r.field("k_stages", p.r("rn_nbox"))
        step = p.ur("rn_step")
        p.emit(alu.r2ur(step, r.field("k_step", p.r("rn_cols"))))
        store_output(ip, r, 0, nbox, step)


_ = R

__all__ = ["RmsNorm"]
