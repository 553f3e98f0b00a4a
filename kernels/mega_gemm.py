"""The megakernel's gemm tile (sm_90a): out = act(x·Wᵀ + bias) + residual for one (tile_m x tile_n)
box of the output, K whole, bf16 in, fp32 accumulation in registers (wgmma), rounded once to bf16.

Pages (all 7 of 32 KiB, by physical number: see below):

| pages | holds | written by | released by |
|---|---|---|---|
| 0-4 | the stage ring: a stage is one page holding `k_boxes` A boxes (tile_m x 64 K) then `k_boxes` B boxes (tile_n x 64 K), 128-byte swizzle | the loader (TMA) | the consumers, after the last MMA |
| 5 | the epilogue's operands: the bias box, then the residual box (128-byte aligned) | the loader (TMA) | the consumers, after the epilogue |
| 6 | the output tile: each warpgroup's 64 x wn block, row-major, as the output map's box lands | the consumers | the storer, after the TMA store's writes |

The stage ring has barriers of its own (`gemm_stage`, a pipe of 5 stages: full = the stage's copies
landed, 1 arrival + bytes; empty = the 8 consumer warps are done with it). Its position lives in the
loader and the consumers across instructions (`start`; position 0 is a dummy, so that the consumers
free the previous stage in every iteration without a branch): stage g of the launch is barrier
g mod 5 *and page* g mod 5. The body uses every page, so it may address them by physical number
rather than through the renamed lids, and it must: a wgmma descriptor computed from the page order
(a per-thread register in ptxas's eyes) makes ptxas 12.9 crash, while one from the ring's stage (a
uniform register updated by uniform instructions) assembles. The first five stages of an
instruction wait for their page (the previous instruction released it) as well as for the ring.
After a gemm the page order is the identity (`physical_pages`): it releases pages 0-4 first (when
both consumer warpgroups have finished their MMAs), then 5, then 6, so the next instruction's first
copies land in the pages freed first and overlap this one's epilogue and store.

The decode shapes are tiles of 64 rows: A's box is 64 rows even when x has one (TMA fills the rows
past the tensor with zeros and the store clips them), both warpgroups take the 64 rows, and a stage
holds as many K boxes as fit a page so that it carries mostly weight. Where a stage holds an even
number of K boxes (`k_split`: the decode tiles, whose A boxes are 8 rows) each warpgroup takes half of
them at the tile's full N (`wgmma 64 x tile_n`, two partial sums that the epilogue adds through the
output page: `Gemm.exchange`); the fused gate/up tile (one K box a stage) does the same with every
other k16 step of each box where `MegaConfig.glu_split` asks; otherwise each takes half the tile's
columns (`wgmma 64 x tile_n/2`) over every K box. Bigger tiles (128 rows) give each warpgroup 64 rows
and every column.

The consumers have one code path per tile shape of the launch (`Launch.gemm_tiles`: wgmma's N and
the accumulator's registers are fixed by the shape), chosen by the instruction's tile_m and tile_n.
The epilogue, per accumulator pair (a row, two columns): + bias (any broadcast: the landed box's
strides, 0 along a broadcast axis), the activation (`kernels/mega_math.py`), + residual, F2FP, STS.

The fused gate/up gemm (`glu`, `MegaConfig(glu=True)`): out = silu(x·Wgᵀ)·(x·Wuᵀ). A stage holds
the A boxes, then the gate weight's, then the up weight's (operand slot 3, the same box as B's); two
wgmmas a K step into two accumulators; the epilogue computes silu(g)·u in place of bias, activation
and residual. Its code path is its own ((tile_m, tile_n, A rows, 1) in `Launch.gemm_tiles`).

Refused (`refuse`, one line at plan time): x·W (W as (K, N), N contiguous) needs wgmma's transposed
B, which warpy.isa does not model: the megakernel reads W as (N, K), torch's Linear layout (`linear`).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Optional

import attrs

from warpy.isa.buffers import SmemBuffer
from warpy.isa.families import alu, control, memory, sync, tma, wgmma
from warpy.isa.families._util import ins
from warpy.isa.families.typed import F32, U32
from warpy.isa.index import Coord, Uniform
from warpy.isa.operands import PT, RZ, URZ, Mem, P, R, RVec, UP, UR
from warpy.isa.pipes import ConsumerEnd, Pipe, ProducerEnd, wait
from warpy.isa.units.dispatch import dispatch
from warpy.isa.units.warp import warp_sum
from warpy.isa.units.wgmma import hgmma
from warpy.layout import Layout, Swizzle, SwizzledLayout
from warpy.mega import fields as F
from warpy.mega.tiling import (BOX_MAX, GEMM_K_STEP, GEMM_MAX_K_BOXES, NORM_SCRATCH, PAGE_BYTES, gemm_k_boxes,
                               gemm_tile_ok)

from .mega_math import Activation, pack_bf16, unpack_bf16
from .mega_ops import (Body, MapOp, branch_on_fields, consumers_done, descriptor, expect, out_ready, page_addr, phys_addr,
                       store_output)

if TYPE_CHECKING:
    from .mega_sm90 import Interp, Role

RING = 5
EPI = 5
OUT = 6
ROW_BYTES = 128  # a swizzled row: 64 bf16 of K
PAGE_ROWS = PAGE_BYTES // ROW_BYTES
CONSUMER_WARPS = 8
MAX_STAGES = 4095  # the k_stages field's bits
#: a normed gemm's (`norm`) norm weight: boxes of BOX_MAX bf16 elements into the epilogue page
NORM_BOX_BYTES = BOX_MAX * 2
MAX_NORM_BOXES = PAGE_BYTES // NORM_BOX_BYTES


def k_split(tm: int, tn: int, ks: int, glu: bool, glu_split: bool = False) -> Optional[str]:
    """How a 64-row tile's two warpgroups split a stage's K rather than its columns, or None (the
    column split: each 64 x tn / 2 over every K box). "boxes": a plain gemm whose stage holds an even
    number of K boxes, each warpgroup the first or second half of them; "steps": the fused gate/up
    gemm with `glu_split` (`MegaConfig.glu_split`), each warpgroup every other k16 step of every K
    box. Either way each computes 64 x tn partial sums with half as many wgmmas of twice the N as the
    column split, and the epilogue adds the two (`Gemm.exchange`). On the H200 the narrow decode
    tiles (64 x 16, 10 K boxes a stage: 80 wgmmas of N = 8 a stage) were bound by the wgmma count,
    not by the bytes (docs/performance.md)."""
    if tm != 64 or 64 * tn * 2 + 2 * 128 * (tn // 4) * 4 > PAGE_BYTES:  # (the exchange fits the output page)
        return None
    if glu:
        return "steps" if glu_split else None
    return "boxes" if ks % 2 == 0 else None


def _trade_area(ip: Interp, r: Role, wg: R, xoff: int, region: int) -> tuple[R, R]:
    """Where the two consumer warpgroups trade values through the output page (`Gemm.exchange`,
    `Gemm.swap`): from byte `xoff`, a `region` of bytes a warpgroup, thread t's 16-byte chunk c at
    16 (128 c + t) in it (a warp's 32 chunks in a row); (this thread's address in its own warpgroup's
    region, the same thread's in the other's)."""
    p = ip.p
    t, base, mine, theirs, other = (p.r(f"gx_{n}") for n in ("t", "base", "mine", "theirs", "other"))
    p.emit(alu.lop3(t, r.ctid, 127, RZ, 0xC0))
    reg, off = p.derive.value_reg("addr", ip.pages.at(OUT, 0))
    p.emit(alu.mov(base, reg))
    p.emit(alu.iadd3(base, base, off + xoff))
    p.emit(alu.imad(base, t, 16, base))
    p.emit(alu.imad(mine, wg, region, base))
    p.emit(alu.lop3(other, wg, 1, RZ, 0x3C))
    p.emit(alu.imad(theirs, other, region, base))
    return mine, theirs


def has_operand3(ip: Interp, r: Role, pred: P, name: str) -> P:
    """pred = operand 3 lands in the epilogue page (first, at its start): a bias, or a roped gemm's
    tables (`rope`; read only where the launch has a roped gemm)."""
    p = ip.p
    p.emit(alu.isetp("NE", pred, r.field("bias", p.r(f"{name}_bias")), 0))
    if any(len(t) > 5 and t[5] for t in ip.launch.gemm_tiles):
        p.emit(ins(alu.ISETP, "NE.U32.OR", pred, PT, r.field("rope", p.r(f"{name}_rope")), 0, pred))
    return pred


def norm_boxes(ip: Interp, r: Role, dst: R) -> R:
    """dst = the norm weight's boxes: K (`k_end`) in boxes of BOX_MAX, the last one partly past K."""
    p = ip.p
    r.field("k_end", dst)
    p.emit(alu.iadd3(dst, dst, BOX_MAX - 1))
    p.emit(alu.shf_r(dst, dst, BOX_MAX.bit_length() - 1))
    return dst


@attrs.frozen
class GemmShared:
    """What the gemm body declares once: its stage ring and a view of the pages as 128-byte
    swizzled rows (what the wgmma descriptors are derived from)."""

    stage: Pipe
    view: SmemBuffer


def _shared(ip: Interp) -> GemmShared:
    g = ip.decl["gemm"]
    assert isinstance(g, GemmShared)
    return g


def epi_offset(bias_bytes: int) -> int:
    """Where the residual box lands in the epilogue page: after the bias box, 128-byte aligned."""
    return -(-bias_bytes // 128) * 128


class _Loading:
    """What the gemm's loader reads from the slot for an instruction: the A and B maps, the stage
    geometry; and what `load_early` hands to `load` across the counter waits (`carry`: only these
    stay live there, the rest is read again, so the producer warps' registers suffice): the K shift
    of the next B box, how many stages it armed (`pre`) and the ring position it started at."""

    shift: UR
    pre: R
    pos0: UR

    def __init__(self, ip: Interp, r: Role, carry: Optional["_Loading"] = None) -> None:
        p = ip.p
        self.a = MapOp(ip, r, 1, "ga")
        self.b = MapOp(ip, r, 2, "gb")
        self.ks = r.field("k_boxes", p.r("g_boxes"))
        self.ns = r.field("k_stages", p.r("g_stages"))
        self.kstep = p.ur("g_kstep")
        kstep_r = r.field("k_step", p.r("g_kstep_r"))
        p.emit(alu.r2ur(self.kstep, kstep_r))
        # a copy moves K `k_step`: one K box (GEMM_K_STEP), or a stage's K boxes at once through maps
        # whose third dimension steps K by GEMM_K_STEP (`chunked`: one copy an operand a stage)
        self.chunked = p.up("g_chunked")
        p.emit(alu.uisetp("NE", self.chunked, self.kstep, GEMM_K_STEP))
        chunked_r = p.p("g_chunked_r")
        p.emit(alu.isetp("NE", chunked_r, kstep_r, GEMM_K_STEP))
        self.copies = p.r("g_copies")  # copies an operand a stage
        p.emit(alu.sel(self.copies, 1, self.ks, chunked_r))
        ks_u = p.ur("g_boxes_u")
        p.emit(alu.r2ur(ks_u, self.copies))
        self.tx_u, self.b_off = p.ur("g_tx_u"), p.ur("g_boff")  # a stage's bytes; B's boxes follow its A boxes
        p.emit(alu.uiadd3(self.tx_u, self.a.bytes, self.b.bytes))
        p.emit(alu.uimad(self.tx_u, self.tx_u, ks_u, URZ))
        p.emit(alu.uimad(self.b_off, self.a.bytes, ks_u, URZ))
        # a launch with a fused gate/up gemm (`Launch.gemm_tiles` entries (.., 1)): its loader reads
        # operand 3 (the up weight) as well; a glu instruction's stage is its A boxes, then B's
        # (gate's), then the up weight's (`u_off`), its bytes A + 2 B a copy
        self.glu = any(len(t) > 3 and t[3] for t in ip.launch.gemm_tiles)
        if self.glu:
            # the up weight's box is B's (`refuse`: the same rank, origin and bytes): B's registers with
            # the up map's descriptor (2 uniform registers, not a MapOp's 8: the loader would spill)
            self.u = copy.copy(self.b)
            self.u.name = "gu"
            self.u.desc = descriptor(ip, r, 3, p.urvec("gu_desc", 2))
            glu_r = r.field("glu", p.r("g_glu_r"))
            glu_u = p.ur("g_glu_u")
            p.emit(alu.r2ur(glu_u, glu_r))
            self.is_glu = p.up("g_glu")
            p.emit(alu.uisetp("NE", self.is_glu, glu_u, URZ))
            self.u_guard = p.p("g_glu_lead")  # the leader, on a glu instruction: issues the up copies
            p.emit(alu.isetp("NE", self.u_guard, glu_r, 0, c=r.leader))
            ub = p.ur("g_ubytes")
            p.emit(alu.usel(ub, self.b.bytes, URZ, self.is_glu))
            p.emit(alu.uimad(ub, ub, ks_u, URZ))
            p.emit(alu.uiadd3(self.tx_u, self.tx_u, ub))
            self.u_off = p.ur("g_uoff")
            p.emit(alu.uimad(self.u_off, self.b.bytes, ks_u, self.b_off))
        # a launch with a roped gemm: B's map may be a pair tile's (`encode`: K inner, rows, the two
        # halves D / 2 rows apart, K boxes), whose K boxes are its fourth dimension
        self.b_pair: Optional[UP] = None
        if any(len(t) > 5 and t[5] for t in ip.launch.gemm_tiles):
            ax = r.field("op2.axes", p.r("g_b_axes"))
            p.emit(alu.shf_r(ax, ax, 6))
            p.emit(alu.lop3(ax, ax, 7, RZ, 0xC0))
            ax_u = p.ur("g_b_axes_u")
            p.emit(alu.r2ur(ax_u, ax))
            self.b_pair = p.up("g_b_pair")
            p.emit(alu.uisetp("EQ", self.b_pair, ax_u, F.AXIS_PAIR))
        if carry is not None:
            self.shift, self.pre, self.pos0 = carry.shift, carry.pre, carry.pos0
            return
        self.shift = p.ur("g_shift")
        p.emit(alu.umov(self.shift, 0))
        self.pre = p.r("g_pre")
        self.pos0 = p.ur("g_pos0")

    def copy(self, ip: Interp, m: MapOp, dst: Optional[UR], bar: Any, shift: UR, guard: P) -> None:
        """One copy of operand m for the K `shift` (elements): along the map's first dimension, or
        for a chunked map (`chunked`) along its third, in K boxes (`encode`: K inner, rows, K boxes);
        `dst` None: a prefetch of that box into L2."""
        p = ip.p
        s0, s2 = p.ur("g_s0"), p.ur("g_s2")
        p.emit(alu.ushf_r(s2, shift, GEMM_K_STEP.bit_length() - 1))
        p.emit(alu.usel(s0, URZ, shift, self.chunked))
        p.emit(alu.usel(s2, s2, URZ, self.chunked))
        if m is self.b and self.b_pair is not None:  # a pair tile's B: K boxes along the fourth dimension
            s3 = p.ur("g_s3")
            p.emit(alu.usel(s3, s2, URZ, self.b_pair))
            p.emit(alu.usel(s2, URZ, s2, self.b_pair))
            m.copy(dst, bar, s0, guard=guard, shift2=s2, shift3=s3)
            return
        m.copy(dst, bar, s0, guard=guard, shift2=s2)


class _Norm:
    """A normed gemm's consumer side (`norm`: A is rmsnorm(a, w)). Each stage, before its wgmmas,
    every consumer warp transforms A's rows in place: warp w (of 8) takes the A boxes' rows w, w + 8,
    ... (`ar` rows a box), lane l the 16-byte chunk l % 8 of boxes l / 8, l / 8 + 4, ... (128-byte
    swizzled rows: a row's chunk c lies at chunk c ^ (row % 8), and every row of a box starts on a
    multiple of 8 rows, so a thread's chunk is the same in every box); each element a becomes
    bf16(a·w) (w from the epilogue page, at the element's K) and a² joins the row's sum (fp32). Then
    the proxy fence (generic writes before the tensor core's async reads) and a barrier of the 256
    consumer threads. After the last stage `finish` turns each row's sum (a warp sum) into rstd =
    MUFU.RSQ(sum · MUFU.RCP(K) + eps) in the epilogue page after the weight (rows past `ar`: 0), and
    the epilogue scales its accumulator rows by it (`row_scale`). Elements at K past `k_end` (the last
    stage's, zero-filled by the copy) are left as they are."""

    def __init__(self, ip: Interp, r: Role, ar: int, ks: int) -> None:
        p = self.p = ip.p
        self.ip, self.r, self.ar, self.ks = ip, r, ar, ks
        # the page is the loaded[slot] copies': the norm weight (the epilogue operands' barrier)
        wait(p, ip.loaded.at(r.cons.ring), r.cons.ring.parity)
        self.k_end = r.field("k_end", p.r("gn_k"))
        cw, lane = p.r("gn_warp"), p.r("gn_lane")
        p.emit(alu.shf_r(cw, r.ctid, 5))
        p.emit(alu.lop3(lane, r.ctid, 31, RZ, 0xC0))
        self.cw, self.lane = cw, lane
        # the weight's place: the epilogue page after the bias box (128-byte aligned); the rows'
        # rstd after the weight's boxes
        epi = p.r("gn_epi")
        reg, off = p.derive.value_reg("addr", ip.pages.at(EPI, 0))
        p.emit(alu.mov(epi, reg))
        p.emit(alu.iadd3(epi, epi, off))
        nb = r.field("op3.box_16", p.r("gn_nb"))
        has_bias = has_operand3(ip, r, p.p("gn_bias"), "gn_has")
        p.emit(alu.mov(nb, 0).guarded(~has_bias))
        p.emit(alu.imad(nb, nb, 16, 127))
        p.emit(alu.lop3(nb, nb, 0xFFFFFF80, RZ, 0xC0))
        self.wbase = p.r("gn_wbase")
        p.emit(alu.iadd3(self.wbase, epi, nb))
        self.scratch = p.r("gn_scratch")
        nbox = norm_boxes(ip, r, p.r("gn_boxes"))
        p.emit(alu.imad(self.scratch, nbox, NORM_BOX_BYTES, self.wbase))
        # this thread's chunk in every row (the swizzle's XOR with the row's place in its 8), and
        # its first box and K within a stage: box lane / 8, K 64 box + 8 (lane % 8)
        c = p.r("gn_chunk")
        p.emit(alu.lop3(c, lane, 7, RZ, 0xC0))
        self.swz = p.r("gn_swz")
        p.emit(alu.lop3(self.swz, c, cw, RZ, 0x3C))  # c ^ warp (the rows a warp takes are warp mod 8)
        p.emit(alu.shf_l(self.swz, self.swz, 4))
        self.kin = p.r("gn_kin")  # K of this thread's first element in its first box of a stage
        box0 = p.r("gn_box0")
        p.emit(alu.shf_r(box0, lane, 3))
        p.emit(alu.imad(self.kin, box0, GEMM_K_STEP, RZ))
        p.emit(alu.imad(self.kin, c, 8, self.kin))
        self.rowoff = p.r("gn_rowoff")  # bytes to row `warp` of box lane / 8 in a stage
        p.emit(alu.imad(self.rowoff, box0, ar, cw))
        p.emit(alu.imad(self.rowoff, self.rowoff, ROW_BYTES, self.swz))
        self.sums = [F32.of(p.r(f"gn_sum{q}")) for q in range(ar // 8)]
        for s_ in self.sums:
            p.emit(alu.mov(s_, 0))
        self.rstd = F32.of(p.r("gn_rstd"))

    def transform(self, page: Any, it: R) -> None:
        """The stage's A boxes (in `page`, the ring's) as the docstring says; `it` the stage's index
        in the instruction (its first K is it x ks x 64)."""
        p = self.p
        base, k0 = p.r("gn_page"), p.r("gn_k0")
        reg, off = p.derive.value_reg("addr", page)
        p.emit(alu.mov(base, reg))
        p.emit(alu.iadd3(base, base, off))
        p.emit(alu.iadd3(base, base, self.rowoff))
        p.emit(alu.imad(k0, it, self.ks * GEMM_K_STEP, self.kin))
        v, w = p.rvec("gn_v", 4), p.rvec("gn_w", 4)
        lo, hi = F32.of(p.r("gn_lo")), F32.of(p.r("gn_hi"))
        wlo, whi = F32.of(p.r("gn_wlo")), F32.of(p.r("gn_whi"))
        k, a, wa = p.r("gn_kk"), p.r("gn_a"), p.r("gn_wa")
        ok = p.p("gn_ok")
        for i in range(-(-self.ks * 8 // 32)):  # the thread's boxes lane / 8 + 4i
            p.emit(alu.iadd3(k, k0, 4 * GEMM_K_STEP * i))
            p.emit(alu.isetp("LT", ok, k, self.k_end))
            if (i + 1) * 32 > self.ks * 8:  # past the stage's last box
                p.emit(alu.isetp("LT", ok, self.lane, self.ks * 8 - 32 * i, c=ok))
            p.emit(alu.imad(wa, k, 2, self.wbase))
            p.emit(memory.lds(w, Mem(wa)).guarded(ok))
            for q, s_ in enumerate(self.sums):  # rows warp + 8q
                p.emit(alu.iadd3(a, base, (4 * i * self.ar + 8 * q) * ROW_BYTES))
                p.emit(memory.lds(v, Mem(a)).guarded(ok))
                for e in range(4):
                    unpack_bf16(p, v[e], lo, hi)
                    unpack_bf16(p, w[e], wlo, whi)
                    p.emit(alu.ffma(s_, lo, lo, s_).guarded(ok))
                    p.emit(alu.ffma(s_, hi, hi, s_).guarded(ok))
                    p.emit(alu.fmul(lo, lo, wlo))
                    p.emit(alu.fmul(hi, hi, whi))
                    pack_bf16(p, v[e], hi, lo)
                p.emit(memory.sts(Mem(a), v).guarded(ok))
        if self.ip.fault != "norm-no-fence":  # (seeded: the fence left out)
            p.emit(sync.fence_proxy_async())  # the writes before the wgmmas' async-proxy reads
        p.emit(sync.bar_sync(1, 256))

    def finish(self) -> None:
        """Each row's rstd into the epilogue page (lane 0 of the row's warp; rows past `ar` 0)."""
        p = self.p
        inv_k = F32.of(p.r("gn_inv_k"))
        p.emit(alu.i2f(inv_k, U32.of(self.k_end)))
        p.emit(alu.rcp(inv_k, inv_k))
        eps = F32.of(self.r.field("eps", p.r("gn_eps")))
        lead, a = p.p("gn_lane0"), p.r("gn_ra")
        p.emit(alu.isetp("EQ", lead, self.lane, 0))
        p.emit(alu.imad(a, self.cw, 4, self.scratch))
        for q in range(8):  # rows warp + 8q of the 64
            if q < len(self.sums):
                s_ = self.sums[q]
                warp_sum(p, s_)
                p.emit(alu.ffma(self.rstd, s_, inv_k, eps))
                p.emit(alu.rsq(self.rstd, self.rstd))
                p.emit(memory.sts(Mem(a, offset=32 * q), self.rstd).guarded(lead))
            else:
                p.emit(memory.sts(Mem(a, offset=32 * q), RZ).guarded(lead))

    def row_scale(self, row: R) -> None:
        """rstd = the rstd of the tile's row `row` (after the barrier that follows `finish`)."""
        p = self.p
        a = p.r("gn_ra")
        p.emit(alu.imad(a, row, 4, self.scratch))
        p.emit(memory.lds(self.rstd, Mem(a)))


class Gemm(Body):
    opcode: int = F.GEMM
    name: str = "gemm"
    pages: int = 7
    release: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6)
    #: pages addressed by physical number; the order after it is the identity
    physical_pages: bool = True

    # -- host ------------------------------------------------------------------------------------
    def refuse(self, fields: dict[str, int]) -> Optional[str]:
        tm, tn = fields["tile_m"], fields["tile_n"]
        glu = fields["glu"] != 0
        nb = 2 if glu else 1  # weights a K box: the fused gate/up gemm's gate and up
        if glu and (fields["bias"] or fields["residual"] or fields["activation"] != F.ACT_NONE):
            return "a fused gate/up gemm with an epilogue of its own (its epilogue is silu(gate)·up)"
        if not fields["b_kmajor"]:
            return ("gemm x·W (W as (K, N), N contiguous) needs wgmma's transposed-B form, which warpy.isa does not "
                    "model yet; store W as (N, K), torch's Linear layout, and use linear (x·Wᵀ)")
        why = gemm_tile_ok(tm, tn, b_ops=nb)
        if why:
            return why
        per_copy = max(1, fields["k_step"] // GEMM_K_STEP)  # K boxes a copy moves (chunked maps: a stage's)
        ar = fields["op1.box_16"] * 16 // (ROW_BYTES * per_copy)  # A's box rows (`gemm_a_rows`)
        kb = gemm_k_boxes(tm, tn, a_rows=ar, b_ops=nb)
        if ar != tm and not (tm == 64 and ar % 8 == 0 and 8 <= ar < 64 and ar + kb * nb * tn >= 64):
            return f"a gemm A box of {ar} rows for a {tm}x{tn} tile (the body takes {tm}, or 8k < 64 for 64-row tiles)"
        if fields["k_step"] not in (GEMM_K_STEP, GEMM_K_STEP * kb) or fields["k_boxes"] != kb:
            return (f"a gemm stage of {fields['k_boxes']} boxes of K, copies of K {fields['k_step']} (the body takes "
                    f"{kb} boxes of {GEMM_K_STEP}, copied one or all at a time, for a {tm}x{tn} tile with {ar}-row "
                    f"A boxes)")
        if not 1 <= fields["k_stages"] <= MAX_STAGES:
            return f"a gemm of {fields['k_stages']} K stages"
        if glu and any(fields[f"op3.{f}"] != fields[f"op2.{f}"] for f in
                       ("rank", "axes", "box_16") + tuple(f"coord{c}" for c in range(F.COORDS))):
            return "a fused gate/up gemm whose up weight's box is not the gate weight's (the loader copies both alike)"
        for k, rows in ((1, ar), (2, tn)):
            if (fields[f"op{k}.axes"] & 7) != F.AXIS_K:
                return f"gemm operand {k} whose innermost map dimension is not K"
            if fields[f"op{k}.box_16"] * 16 != rows * ROW_BYTES * per_copy:
                return f"gemm operand {k}'s box of {fields[f'op{k}.box_16'] * 16} bytes (the body takes {rows} rows of K 64)"
        wn = tn if tm == 128 else tn // 2
        if fields["op0.col_stride"] != 1 or fields["op0.row_stride"] != wn or fields["op0.box_16"] * 16 != 64 * wn * 2:
            return "a gemm output box that is not a warpgroup's 64 x wn block"
        epi = 0
        if fields["bias"]:
            epi = epi_offset(fields["op3.box_16"] * 16)
        if fields["rope"]:
            if glu or fields["bias"] or fields["residual"] or fields["activation"] != F.ACT_NONE:
                return "a roped gemm with an epilogue of its own (its epilogue is the rope)"
            if tm != 64:
                return f"a roped gemm of {tm}-row tiles (the decode tiles of 64 rows: each warpgroup half a head)"
            rows = ar if fields["op3.row_stride"] else 1
            if (fields["op3.col_stride"] != 1 or fields["op3.row_stride"] not in (0, tn)
                    or fields["op3.box_16"] * 16 != 2 * rows * tn * 2):
                return (f"a roped gemm whose tables' box is {fields['op3.box_16'] * 16} bytes (the body takes both "
                        f"planes of {rows} rows of the tile's {tn} columns)")
            epi = epi_offset(fields["op3.box_16"] * 16)
        if fields["norm"]:
            if fields["residual"]:
                return "a normed gemm with a residual (its norm weight takes the residual's slot)"
            if tm != 64:
                return f"a normed gemm of {tm}-row tiles (the decode tiles of 64 rows normalise their A)"
            if fields["op4.box_16"] * 16 != NORM_BOX_BYTES or (fields["op4.axes"] & 7) != F.AXIS_K:
                return (f"a normed gemm whose norm weight's box is {fields['op4.box_16'] * 16} bytes (the body takes "
                        f"boxes of {BOX_MAX} along K)")
            epi += -(-fields["k_end"] // BOX_MAX) * NORM_BOX_BYTES + NORM_SCRATCH
        elif fields["residual"]:
            epi += fields["op4.box_16"] * 16
        if epi > PAGE_BYTES:
            return f"a gemm epilogue whose bias and residual boxes take {epi} bytes, more than a page"
        return None

    # -- declarations and per-role state ---------------------------------------------------------
    def declare(self, ip: Interp) -> None:
        from .mega_sm90 import PAGES

        p = ip.p
        stage = p.pipe("gemm_stage", RING, fills=1, frees=CONSUMER_WARPS)
        lay = SwizzledLayout(Swizzle(3, 4, 3), Layout((PAGES, PAGE_ROWS, 64), (PAGE_BYTES, ROW_BYTES, 2)), 0)
        if ip.pages.base % 1024:
            raise AssertionError("the pages must be 1024-byte aligned for 128-byte swizzled tiles")
        view = SmemBuffer("gemm_rows", ip.pages.base, PAGES * PAGE_BYTES, lay, "bf16")
        p.buffers.append(view)  # a view of the pages (no memory of its own)
        ip.decl["gemm"] = GemmShared(stage, view)

    def start(self, ip: Interp, r: Role) -> None:
        """The ring's ends. Position 0 of the ring is a dummy the loader fills with no bytes and the
        consumers free without reading: so the consumers free the stage *before* the one they
        just issued MMAs for in every iteration, unconditionally (no branch: ptxas 12.9 crashes on
        the branch the first iteration would need here), and an instruction's last stage is freed
        at the start of the next gemm instruction, its MMAs long done."""
        p = ip.p
        g = _shared(ip)
        if r.name == "loader":
            ld = g.stage.producer("gemm_ld")
            p.emit(alu.umov(ld.ring.stage, 1))
            p.derive.emit_at(g.stage.bars.at(0, 0), lambda m: sync.arrive(m), guard=r.leader)
            r.state["gemm"] = ld
        elif r.name == "consumers":
            cs = g.stage.consumer("gemm_cs")
            p.emit(alu.umov(cs.ring.stage, 1))
            # the dummy's phase is waited for like any other (compute-sanitizer's synccheck reports
            # an arrival on a barrier whose previous phase no thread waited for: the loader's next
            # lap of position 0)
            wait(p, g.stage.bars.at(0, 0), RZ)
            r.state["gemm"] = (cs, g.stage.consumer("gemm_rel"))

    # -- loader --------------------------------------------------------------------------------------
    def load_early(self, ip: Interp, r: Role) -> None:
        """Before the instruction's load-stage counter waits (`Interp.loader_step`): when B (the
        weight) is an early operand (the instruction's `early` bit 2: no instruction of the launch
        writes it), arm the instruction's first min(RING - 1, k_stages) stages with their whole bytes
        and copy their B boxes; `load` copies their A boxes after the waits. At most RING - 1: the
        consumers free a stage when they issue the next one's MMAs, so the ring's RING-th stage ahead
        is the previous gemm's last, freed only by this instruction's first MMAs, which need its A."""
        p = ip.p
        ring = r.state["gemm"]
        assert isinstance(ring, ProducerEnd)
        st = _Loading(ip, r)
        r.state["gemm_load"] = st
        early = r.field("early", p.r("g_early"))
        if st.glu:  # a glu instruction arms early only when both weights (operands 2 and 3) are early
            need, glu_p = p.r("g_need"), p.p("g_glu_p")
            p.emit(alu.mov(need, 1 << 2))
            p.emit(alu.isetp("NE", glu_p, r.field("glu", p.r("g_glu_e")), 0))
            # seeded (`glu-up-early`): armed where the gate weight alone is early (the up copied unwaited)
            up_bit = 0 if ip.fault == "glu-up-early" else 1 << 3
            p.emit(alu.mov(need, (1 << 2) | up_bit).guarded(glu_p))
            p.emit(alu.lop3(st.pre, early, need, RZ, 0xC0))
            both = p.p("g_both_early")
            p.emit(alu.isetp("EQ", both, st.pre, need))
            p.emit(alu.mov(st.pre, 0).guarded(~both))
        else:
            p.emit(alu.lop3(st.pre, early, 1 << 2, RZ, 0xC0))
        # seeded (`early-all`): every stage's A boxes copied before the waits as well, whatever wrote A
        all_early = ip.fault == "early-all"
        if all_early:
            p.emit(alu.mov(st.pre, 1 << 2))
        b_early = p.p("g_b_early")
        p.emit(alu.isetp("NE", b_early, st.pre, 0))
        p.emit(alu.imin(st.pre, st.ns, RING - 1, unsigned=True, arch=p.sm).guarded(b_early))
        p.emit(alu.umov(st.pos0, ring.ring.stage))
        with p.when(b_early):
            with p.loop("gkw", st.pre, max_count=RING - 1):
                with ring.stage():
                    ring.wait_empty()
                    r.wait_pid(ring.ring)  # a stage among an instruction's first RING: its page's first use
                    tx = p.r("g_tx")
                    p.emit(alu.mov(tx, st.tx_u))
                    p.derive.emit_at(ring.full, lambda m: sync.arrive_expect_tx(m, tx), guard=r.leader)
                    reg, off = p.derive.value_reg("addr", ip.pages.at(ring.ring, 0))
                    db, da = p.ur("g_db"), p.ur("g_da")
                    p.emit(alu.uiadd3(db, reg, off))
                    p.emit(alu.umov(da, db))
                    if st.glu:
                        du = p.ur("g_du")
                        p.emit(alu.uiadd3(du, db, st.u_off))
                    p.emit(alu.uiadd3(db, db, st.b_off))
                    with p.loop("gkwb", st.copies, max_count=GEMM_MAX_K_BOXES):
                        if all_early:
                            st.copy(ip, st.a, da, ring.full, st.shift, r.leader)
                            p.emit(alu.uiadd3(da, da, st.a.bytes))
                        st.copy(ip, st.b, db, ring.full, st.shift, r.leader)
                        p.emit(alu.uiadd3(db, db, st.b.bytes))
                        if st.glu:
                            # seeded (`glu-up-offset`): the up weight's boxes read from the gate's map
                            st.copy(ip, st.b if ip.fault == "glu-up-offset" else st.u, du, ring.full, st.shift,
                                    st.u_guard)
                            p.emit(alu.uiadd3(du, du, st.b.bytes))
                        p.emit(alu.uiadd3(st.shift, st.shift, st.kstep))
        if ip.prefetch:
            # the rest of the weight into L2: the stages after the armed ones, a prefetch a copy, so
            # that their copies after the waits hit L2 rather than HBM (the loader reaches here while
            # the instructions before it compute, when the HBM is not busy with this one's weight)
            rest = p.r("g_pf_rest")
            p.emit(alu.iadd3(rest, st.ns, -st.pre, RZ))
            p.emit(alu.imad(rest, rest, st.copies, RZ))
            some = p.p("g_pf_some")
            p.emit(alu.isetp("NE", some, rest, 0, c=b_early))
            with p.when(some):
                pf = p.ur("g_pf_shift")
                p.emit(alu.umov(pf, st.shift))
                with p.loop("gkpf", rest, max_count=MAX_STAGES * GEMM_MAX_K_BOXES):
                    st.copy(ip, st.b, None, None, pf, r.leader)
                    p.emit(alu.uiadd3(pf, pf, st.kstep))

    def load(self, ip: Interp, r: Role) -> None:
        p = ip.p
        ring = r.state["gemm"]
        assert isinstance(ring, ProducerEnd)
        carry = r.state["gemm_load"]
        assert isinstance(carry, _Loading)
        st = _Loading(ip, r, carry)
        a, b = st.a, st.b
        g = _shared(ip)
        # a normed gemm (`norm`): its epilogue page (the norm weight) first, read by every stage's transform
        normed = any(len(t) > 4 and t[4] for t in ip.launch.gemm_tiles)
        if normed:
            norm_p = p.p("g_norm")
            p.emit(alu.isetp("NE", norm_p, r.field("norm", p.r("g_norm_r")), 0))
            with p.when(norm_p):
                self.epilogue_loads(ip, r, norm=True)
        # the A boxes of the stages `load_early` armed (their B boxes are on the way), in ring order
        # from the position it started at
        has_pre = p.p("g_has_pre")
        p.emit(alu.isetp("NE", has_pre, RZ if ip.fault == "early-all" else st.pre, 0))
        with p.when(has_pre):
            pos, ashift = p.ur("g_pos"), p.ur("g_ashift")
            p.emit(alu.umov(pos, st.pos0))
            p.emit(alu.umov(ashift, 0))
            upos = Uniform("g_pos", pos, RING)
            with p.loop("gka", st.pre, max_count=RING - 1):
                reg, off = p.derive.value_reg("addr", ip.pages.at(upos, 0))
                da = p.ur("g_da")
                p.emit(alu.uiadd3(da, reg, off))
                full = g.stage.bars.at(0, upos)
                with p.loop("gkab", st.copies, max_count=GEMM_MAX_K_BOXES):
                    st.copy(ip, a, da, full, ashift, r.leader)
                    p.emit(alu.uiadd3(da, da, a.bytes))
                    p.emit(alu.uiadd3(ashift, ashift, st.kstep))
                wrap = p.up("g_pos_wrap")
                p.emit(alu.uiadd3(pos, pos, 1))
                p.emit(alu.uisetp("EQ", wrap, pos, RING))
                p.emit(alu.usel(pos, URZ, pos, wrap))
        # the other stages: A and B together
        rest = p.r("g_rest")
        p.emit(alu.iadd3(rest, st.ns, -st.pre))
        more = p.p("g_more")
        p.emit(alu.isetp("GT", more, rest, 0))
        with p.when(more):
            with p.loop("gk", rest, max_count=MAX_STAGES) as k:
                with ring.stage():
                    ring.wait_empty()
                    first = p.p("g_first_use")
                    kk = p.r("g_k")
                    p.emit(alu.iadd3(kk, k.reg, st.pre))
                    p.emit(alu.isetp("LT", first, kk, RING))
                    with p.when(first):  # the page's first stage in this instruction
                        r.wait_pid(ring.ring)
                    tx = p.r("g_tx")
                    p.emit(alu.mov(tx, st.tx_u))
                    p.derive.emit_at(ring.full, lambda m: sync.arrive_expect_tx(m, tx), guard=r.leader)
                    reg, off = p.derive.value_reg("addr", ip.pages.at(ring.ring, 0))
                    da, db = p.ur("g_da"), p.ur("g_db")
                    p.emit(alu.uiadd3(da, reg, off))
                    p.emit(alu.uiadd3(db, da, st.b_off))
                    if st.glu:
                        du = p.ur("g_du")
                        p.emit(alu.uiadd3(du, da, st.u_off))
                    with p.loop("gkb", st.copies, max_count=GEMM_MAX_K_BOXES):
                        st.copy(ip, a, da, ring.full, st.shift, r.leader)
                        st.copy(ip, b, db, ring.full, st.shift, r.leader)
                        p.emit(alu.uiadd3(da, da, a.bytes))
                        p.emit(alu.uiadd3(db, db, b.bytes))
                        if st.glu:
                            src = b if ip.fault == "glu-up-offset" else st.u
                            st.copy(ip, src, du, ring.full, st.shift, st.u_guard)
                            p.emit(alu.uiadd3(du, du, st.b.bytes))
                        p.emit(alu.uiadd3(st.shift, st.shift, st.kstep))
        if normed:
            norm_p = p.p("g_norm")
            p.emit(alu.isetp("NE", norm_p, r.field("norm", p.r("g_norm_r")), 0))
            with p.when(~norm_p):
                self.epilogue_loads(ip, r, norm=False)
        else:
            self.epilogue_loads(ip, r, norm=False)

    def epilogue_loads(self, ip: Interp, r: Role, norm: bool) -> None:
        """The epilogue's operands, into their page, completing on loaded[slot]: the bias box, then
        the residual box (128-byte aligned); with `norm` (an instruction's `norm`: no residual) the
        norm weight's row after the bias instead, box after box (`norm_boxes`)."""
        p = ip.p
        bias_p, res_p = p.p("g_bias"), p.p("g_res")
        has_operand3(ip, r, bias_p, "g_has")
        if not norm:
            p.emit(alu.isetp("NE", res_p, r.field("residual", p.r("g_has_res")), 0))
        r.wait_pid(EPI)
        nb, nr = p.r("g_bias_bytes"), p.r("g_res_bytes")
        r.field("op3.box_16", nb)
        if norm:
            nbox = norm_boxes(ip, r, p.r("g_norm_boxes"))
            p.emit(alu.mov(nb, 0).guarded(~bias_p))
            p.emit(alu.imad(nb, nb, 16, RZ))
            p.emit(alu.imad(nr, nbox, NORM_BOX_BYTES, RZ))
        else:
            r.field("op4.box_16", nr)
            p.emit(alu.mov(nb, 0).guarded(~bias_p))
            p.emit(alu.mov(nr, 0).guarded(~res_p))
            p.emit(alu.imad(nb, nb, 16, RZ))
            p.emit(alu.imad(nr, nr, 16, RZ))
        total = p.r("g_epi_bytes")
        p.emit(alu.iadd3(total, nb, nr))
        expect(ip, r, total)
        with p.when(bias_p):
            MapOp(ip, r, 3, "gbias").copy(phys_addr(ip, EPI, "g_epi"), ip.loaded.at(r.cons.ring), guard=r.leader)
        if norm:  # the norm weight's boxes one after the other from epi_offset(bias bytes)
            roff = p.r("g_res_off")
            p.emit(alu.iadd3(roff, nb, 127))
            p.emit(alu.lop3(roff, roff, 0xFFFFFF80, RZ, 0xC0))
            g = MapOp(ip, r, 4, "gnorm")
            dst, shift = phys_addr(ip, EPI, "g_norm_dst", roff), p.ur("g_norm_shift")
            p.emit(alu.umov(shift, 0))
            with p.loop("gnb", nbox, max_count=MAX_NORM_BOXES):
                g.copy(dst, ip.loaded.at(r.cons.ring), shift, guard=r.leader)
                p.emit(alu.uiadd3(dst, dst, NORM_BOX_BYTES))
                p.emit(alu.uiadd3(shift, shift, BOX_MAX))
            return
        with p.when(res_p):
            roff = p.r("g_res_off")  # epi_offset(bias bytes)
            p.emit(alu.iadd3(roff, nb, 127))
            p.emit(alu.lop3(roff, roff, 0xFFFFFF80, RZ, 0xC0))
            MapOp(ip, r, 4, "gres").copy(phys_addr(ip, EPI, "g_epi_r", roff), ip.loaded.at(r.cons.ring),
                                          guard=r.leader)

    # -- consumers ----------------------------------------------------------------------------------------
    def compute(self, ip: Interp, r: Role) -> None:
        p = ip.p
        shapes = sorted(ip.launch.gemm_tiles)
        if not shapes:  # no gemm in this launch: never run
            consumers_done(ip)
            out_ready(ip, r)
            return
        tm_r, tn_r = r.field("tile_m", p.r("g_tm")), r.field("tile_n", p.r("g_tn"))
        # A's box (ar rows of 128 bytes) tells apart two paths of one tile shape, and so does the glu flag
        # (`Launch.gemm_tiles`: (tm, tn, ar) or (tm, tn, ar, 1), a fused gate/up gemm's)
        split = any(a[:2] == b[:2] and a[2] != b[2] for a in shapes for b in shapes)
        glu_any = any(len(t) > 3 and t[3] for t in shapes)
        a16 = r.field("op1.box_16", p.r("g_a16")) if split else RZ
        kstep = r.field("k_step", p.r("g_kstep_c")) if split else RZ
        glu_c = r.field("glu", p.r("g_glu_c")) if glu_any else RZ
        # and the norm flag ((tm, tn, ar, glu, 1): a normed gemm's)
        norm_any = any(len(t) > 4 and t[4] for t in shapes)
        norm_c = r.field("norm", p.r("g_norm_c")) if norm_any else RZ
        # and the rope flag ((tm, tn, ar, glu, norm, 1): a roped gemm's)
        rope_any = any(len(t) > 5 and t[5] for t in shapes)
        rope_c = r.field("rope", p.r("g_rope_c")) if rope_any else RZ
        labels = [p.fresh_label(f"GEMM_{t[0]}x{t[1]}" + (f"_A{t[2]}" if t[2] != t[0] else "")
                                + ("_GLU" if len(t) > 3 and t[3] else "") + ("_NORM" if len(t) > 4 and t[4] else "")
                                + ("_ROPE" if len(t) > 5 and t[5] else ""))
                  for t in shapes]
        done = p.fresh_label("GEMM_DONE")
        if len(shapes) > 1:
            cases: list[tuple[str, list[tuple[R, int]]]] = []
            for shape, label in zip(shapes[:-1], labels[:-1]):
                tm, tn, ar = shape[:3]
                glu = len(shape) > 3 and shape[3] != 0
                # with `split`, A's box is ar rows with copies of a K box, or k_boxes x ar rows with
                # copies of k_boxes K boxes (chunked maps): the pair (box, k_step) names ar exactly
                kb = gemm_k_boxes(tm, tn, a_rows=ar, b_ops=2 if glu else 1)
                forms = ((ar, 1), (ar * kb, kb)) if split else ((0, 0),)
                for a_rows, per_copy in forms:
                    conds = [(tm_r, tm), (tn_r, tn)]
                    if split:
                        conds += [(a16, a_rows * ROW_BYTES // 16), (kstep, GEMM_K_STEP * per_copy)]
                    if glu_any:
                        conds.append((glu_c, int(glu)))
                    if norm_any:
                        conds.append((norm_c, int(len(shape) > 4 and shape[4] != 0)))
                    if rope_any:
                        conds.append((rope_c, int(len(shape) > 5 and shape[5] != 0)))
                    cases.append((label, conds))
            branch_on_fields(p, p.p("g_shape"), cases, labels[-1])
        for shape, label in zip(shapes, labels):
            p.label(label)
            self.tile(ip, r, shape[0], shape[1], shape[2], len(shape) > 3 and shape[3] != 0,
                      len(shape) > 4 and shape[4] != 0, len(shape) > 5 and shape[5] != 0)
            p.emit(control.bra(done))
        p.label(done)

    def tile(self, ip: Interp, r: Role, tm: int, tn: int, ar: int, glu: bool = False, norm: bool = False,
             rope: bool = False) -> None:
        """The consumers' code for tiles of tm x tn whose A boxes have `ar` rows (`gemm_a_rows`: wgmma
        reads 64 from a box's start, what follows a shorter box is the stage's next boxes): the
        mainloop, the ring pages released, the epilogue. `glu`: the fused gate/up gemm: a second
        accumulator (up's, the same fragment layout as gate's) from the up weight's boxes, which
        follow the gate's in the stage; two wgmmas a K step. `norm`: a normed gemm (`_Norm`): each
        stage's A boxes are transformed in place before its wgmmas, the rows scaled in the epilogue.
        `rope`: a roped gemm (`epilogue`)."""
        p = ip.p
        g = _shared(ip)
        ends = r.state["gemm"]
        assert isinstance(ends, tuple)
        cons, rel = ends
        assert isinstance(cons, ConsumerEnd) and isinstance(rel, ConsumerEnd)
        wn = tn if tm == 128 else tn // 2  # each warpgroup's columns of the epilogue: 64 rows x wn
        ks = gemm_k_boxes(tm, tn, a_rows=ar, b_ops=2 if glu else 1)
        split = k_split(tm, tn, ks, glu, ip.launch.glu_split)
        an = tn if split else wn  # the accumulator's columns (wgmma's N)
        acc = p.rvec(f"acck{tn}" if split else f"acc{wn}", an // 2)
        up = p.rvec(f"accku{tn}" if split else f"accu{wn}", an // 2) if glu else None
        wg_r = p.r("g_wg")
        p.emit(alu.shf_r(wg_r, r.ctid, 7))
        wg_u = p.ur("g_wg_u")
        p.emit(alu.r2ur(wg_u, wg_r))
        wg = Uniform("g_wg_u", wg_u, 2)
        half = ks // 2
        a_row: Coord
        b_row: Coord
        kcol: Coord = 0  # this warpgroup's first K column of a box ("steps": every other k16 step)
        if split == "boxes":  # this warpgroup's K boxes of a stage: the first or the second half
            a_row, b_row = (half * ar) * wg, (half * tn) * wg
        elif split == "steps":
            a_row, b_row, kcol = 0, 0, 16 * wg
        else:
            a_row = (64 * wg) if tm == 128 else 0  # this warpgroup's rows of A
            b_row = 0 if tm == 128 else (tn // 2) * wg  # and of B (its columns of the tile)
        ns = r.field("k_stages", p.r("g_stages"))
        nrm = _Norm(ip, r, ar, ks) if norm else None
        first, accumulate = p.ur("g_first"), p.up("g_accumulate")
        p.emit(alu.umov(first, 0))
        with p.loop("gc", ns, max_count=MAX_STAGES) as gl:
            with cons.stage():
                p.emit(alu.uisetp("NE", accumulate, first, URZ))
                cons.wait_full()
                r.stamp("data")  # (the timeline: when the last stage's bytes had landed)
                if nrm is not None:
                    nrm.transform(ip.pages.at(cons.ring, 0), gl.reg)
                p.emit(wgmma.warpgroup_arrive())
                if split == "steps":  # the k16 steps 2q + wg of every K box
                    steps = [(j, 32 * q + kcol) for j in range(ks) for q in range(2)]
                else:
                    steps = [(j, 16 * q) for j in range(half if split == "boxes" else ks) for q in range(4)]
                for n, (j, k) in enumerate(steps):
                    at = g.view.at(cons.ring, a_row + j * ar, k)
                    bt = g.view.at(cons.ring, b_row + ks * ar + j * tn, k)
                    last = n == len(steps) - 1
                    hgmma(p, acc, at, bt, an, accumulate if n == 0 else True, end=last and up is None)
                    if up is not None:
                        ut = g.view.at(cons.ring, b_row + ks * ar + ks * tn + j * tn, k)
                        hgmma(p, up, at, ut, an, accumulate if n == 0 else True, end=last)
                p.emit(wgmma.wgmma_commit())
                p.emit(wgmma.warpgroup_wait(1))
                p.emit(alu.umov(first, 1))
            # the group before this one has finished reading its stage: free that stage (the
            # previous instruction's last, or the ring's dummy, in an instruction's first iteration)
            with rel.stage():
                rel.free(r.leader)
        p.emit(wgmma.warpgroup_wait(0))
        if nrm is not None:
            nrm.finish()  # the rows' rstd, read by the epilogue after the barrier below
        # both warpgroups' MMAs are done: the ring's pages go to the next instruction (each waited
        # for first, by every thread: the previous instruction's release of a page this one's
        # stages did not use; then no thread waits on a page once one is released)
        for q in range(RING):
            r.wait_pid(q)
        p.emit(sync.bar_sync(1, 256))
        for q in range(RING):
            r.release_pid(q, r.cleader)
        self.epilogue(ip, r, tm, tn, wn, wg_r, acc, up, nrm, split is not None, ar if rope else 0)

    def exchange(self, ip: Interp, r: Role, tn: int, wg: R, acc: RVec, again: bool = False) -> RVec:
        """A K-split tile's (`k_split`) two partial sums made one: each warpgroup holds 64 x tn over
        half of every stage's K and keeps the columns its epilogue writes (warpgroup w: wn =
        tn / 2 from w wn; in the m64nNk16 fragment, values 4j.. of column block j, so the first or
        second half of a thread's values). Each thread stores the other half to the output page past
        the output tile (thread t's 16-byte chunk c of warpgroup w's region at 16 (128 c + t): a
        warp's 32 chunks in a row), the 256 consumer threads meet (barrier 1), and each adds the
        same thread of the other warpgroup's chunks to its own half. Returns the kept half (tn / 4
        registers, what `epilogue` reads as a 64 x wn block's accumulator). `again`: a second
        accumulator through the same area (the fused gemm's up): a barrier first, so that the other
        warpgroup has read the first one's chunks before they are overwritten."""
        p = ip.p
        # seeded (`exchange-no-barrier`): the second accumulator's chunks stored over the first's
        # while the other warpgroup may still be reading them
        if again and ip.fault != "exchange-no-barrier":
            p.emit(sync.bar_sync(1, 256))
        keep = tn // 4  # values a thread keeps, and sends
        region = 128 * keep * 4
        xoff = 64 * tn * 2  # the output page's bytes the output tile takes (both blocks)
        assert keep % 4 == 0 and xoff + 2 * region <= PAGE_BYTES, (tn, xoff, region)
        mine, theirs = _trade_area(ip, r, wg, xoff, region)
        wg0 = p.p("gx_wg0")
        p.emit(alu.isetp("EQ", wg0, wg, 0))
        chunk = p.rvec("gx_chunk", 4)  # a 16-byte chunk at a time (the registers stay few)
        for c in range(keep // 4):  # warpgroup 0 sends its second half, warpgroup 1 its first
            for i in range(4):
                k = 4 * c + i
                p.emit(alu.sel(chunk[i], acc[keep + k], acc[k], wg0))
            p.emit(memory.sts(Mem(mine, offset=16 * 128 * c), chunk))
        for k in range(keep):  # and keeps the other half, in the first registers
            p.emit(alu.sel(acc[k], acc[k], acc[keep + k], wg0))
        p.emit(sync.bar_sync(1, 256))
        for c in range(keep // 4):
            p.emit(memory.lds(chunk, Mem(theirs, offset=16 * 128 * c)))
            for i in range(4):
                k = 4 * c + i
                p.emit(alu.fadd(F32.of(acc[k]), F32.of(acc[k]), F32.of(chunk[i])))
        return acc.sub(0, keep)

    def swap(self, ip: Interp, r: Role, tn: int, wg: R, acc: RVec) -> RVec:
        """A roped tile's partners: each thread's values (its warpgroup's half of the head: warpgroup
        0 the first D / 2 columns, 1 the second, at the same rows and columns of the half) traded
        with the same thread of the other warpgroup through the output page past the output tile,
        in rounds that fit there (a barrier before each round's stores: the other warpgroup may
        still read the area, the exchange's or the round before's; one after them). Returns the
        other warpgroup's values, in the layout of `acc`."""
        p = ip.p
        n = acc.width
        xoff = 64 * tn * 2
        per = min(n, (PAGE_BYTES - xoff) // (2 * 128 * 4)) // 4 * 4  # values a round
        assert per >= 4 and n % per == 0, (tn, n, per)
        region = 128 * per * 4
        part = p.rvec(f"gr_part{n}", n)
        mine, theirs = _trade_area(ip, r, wg, xoff, region)
        for k0 in range(0, n, per):
            p.emit(sync.bar_sync(1, 256))
            for c in range(per // 4):
                p.emit(memory.sts(Mem(mine, offset=16 * 128 * c), acc.sub(k0 + 4 * c, 4)))
            p.emit(sync.bar_sync(1, 256))
            for c in range(per // 4):
                p.emit(memory.lds(part.sub(k0 + 4 * c, 4), Mem(theirs, offset=16 * 128 * c)))
        return part

    def epilogue(self, ip: Interp, r: Role, tm: int, tn: int, wn: int, wg: R, acc: RVec,
                 up: Optional[RVec] = None, nrm: Optional["_Norm"] = None, ksplit: bool = False,
                 rope_rows: int = 0) -> None:
        """The tile's values into the output page (each warpgroup's 64 x wn block). `rope_rows`
        (a roped gemm: the rows of its tables' box, A's): the norm's row scale first, then each
        value x of column c paired with its partner p in the other warpgroup (`swap`) and the
        tables' c: x·cos + sgn·(p·sin), sgn -1 in the first half of the head, +1 in the second (a
        row past the tables' box rows reads their last row: those rows' values are clipped)."""
        p = ip.p
        wait(p, ip.loaded.at(r.cons.ring), r.cons.ring.parity)  # the bias and residual boxes landed
        r.wait_pid(OUT)
        if ksplit:  # (the exchange's area is the output page's: after the previous store released it)
            acc = self.exchange(ip, r, tn, wg, acc)
            if up is not None:
                up = self.exchange(ip, r, tn, wg, up, again=True)
        has_bias, has_res = r.field("bias", p.r("g_has_bias")), r.field("residual", p.r("g_has_res"))
        bias_p, res_p = p.p("g_bias"), p.p("g_res")
        p.emit(alu.isetp("NE", bias_p, has_bias, 0))
        p.emit(alu.isetp("NE", res_p, has_res, 0))
        if up is None:
            act = Activation(p, r.field("activation", p.r("g_act")), "g_act")
        else:  # the fused gate/up gemm: silu of the gate's accumulator, times the up's
            code = p.r("g_glu_act")
            p.emit(alu.mov(code, F.ACT_SILU))
            act = Activation(p, code, "g_act")
        # this thread's first row and column in the tile (the accumulator fragment of m64nNk16:
        # value 4j + 2h + i is row 16 warp + lane / 4 + 8h, column 8j + 2 (lane % 4) + i)
        t, wrow, wcol = p.r("g_t"), p.r("g_wrow"), p.r("g_wcol")  # in the warpgroup's 64 x wn block
        p.emit(alu.lop3(t, r.ctid, 127, RZ, 0xC0))
        p.emit(alu.shf_r(wrow, t, 5))
        p.emit(alu.imad(wrow, wrow, 16, RZ))
        lane = p.r("g_lane")
        p.emit(alu.lop3(lane, t, 31, RZ, 0xC0))
        q4 = p.r("g_q4")
        p.emit(alu.shf_r(q4, lane, 2))
        p.emit(alu.iadd3(wrow, wrow, q4))
        p.emit(alu.lop3(wcol, lane, 3, RZ, 0xC0))
        p.emit(alu.shf_l(wcol, wcol, 1))
        row, col = p.r("g_row"), p.r("g_col")  # in the tile
        if tm == 128:
            p.emit(alu.imad(row, wg, 64, wrow))
            p.emit(alu.mov(col, wcol))
        else:
            p.emit(alu.mov(row, wrow))
            p.emit(alu.imad(col, wg, wn, wcol))
        # the operands' places: the epilogue page (bias, then the residual 128-byte aligned), the output page
        epi = p.r("g_epi_base")
        reg, off = p.derive.value_reg("addr", ip.pages.at(EPI, 0))
        p.emit(alu.mov(epi, reg))
        p.emit(alu.iadd3(epi, epi, off))
        res_base = p.r("g_res_base")
        nb = r.field("op3.box_16", p.r("g_nb"))
        # where the residual lands: past operand 3 (a bias, or a roped gemm's tables)
        epi3_p = has_operand3(ip, r, p.p("g_epi3"), "g_epi3") if rope_rows else bias_p
        p.emit(alu.mov(nb, 0).guarded(~epi3_p))
        p.emit(alu.imad(nb, nb, 16, 127))
        p.emit(alu.lop3(nb, nb, 0xFFFFFF80, RZ, 0xC0))
        p.emit(alu.iadd3(res_base, epi, nb))
        # the output page: each warpgroup's 64 x wn block, row-major, one after the other (the
        # storer stores each through the output map, whose box is such a block)
        outb = p.r("g_out_base")
        reg, off = p.derive.value_reg("addr", ip.pages.at(OUT, 0))
        p.emit(alu.mov(outb, reg))
        p.emit(alu.iadd3(outb, outb, off))
        p.emit(alu.imad(outb, wg, 64 * wn * 2, outb))
        brs, bcs = r.field("op3.row_stride", p.r("g_brs")), r.field("op3.col_stride", p.r("g_bcs"))
        rrs, rcs = r.field("op4.row_stride", p.r("g_rrs")), r.field("op4.col_stride", p.r("g_rcs"))
        ba, ra, oa = p.r("g_ba"), p.r("g_ra"), p.r("g_oa")
        bh, rh, oh = p.r("g_bh"), p.r("g_rh"), p.r("g_oh")  # per row half: the address of column 0
        e0, e1 = p.r("g_e0"), p.r("g_e1")
        f0, f1 = F32.of(e0), F32.of(e1)
        packed = p.r("g_packed")

        def element_addr(dst: R, base: R, rs: R, cs: R, rr: R) -> None:
            """dst = base + 2 (rr x rs + col x cs): the first element of this thread's pair."""
            p.emit(alu.imad(dst, rr, rs, RZ))
            p.emit(alu.imad(dst, col, cs, dst))
            p.emit(alu.imad(dst, dst, 2, base))

        def load_elem(base: R, cs: R, c: int, extra: Optional[R], name: str) -> F32:
            """The bf16 element `c` columns (`cs` elements apart) after `base` (+ `extra` bytes), as fp32."""
            a, e = p.r("g_pair_addr"), p.r(name)
            p.emit(alu.imad(a, cs, 2 * c, base))
            if extra is not None:
                p.emit(alu.iadd3(a, a, extra))
            p.emit(ins(memory.LDS, "U16", e, Mem(a)))
            p.emit(alu.shf_l(e, e, 16))
            return F32.of(e)

        def add_pair(base: R, cs: R, j: int, v0: F32, v1: F32, guard: P) -> None:
            a = p.r("g_pair_addr")
            p.emit(alu.imad(a, cs, 16 * j, base).guarded(guard))
            p.emit(ins(memory.LDS, "U16", e0, Mem(a)).guarded(guard))
            p.emit(alu.imad(a, cs, 2, a).guarded(guard))
            p.emit(ins(memory.LDS, "U16", e1, Mem(a)).guarded(guard))
            p.emit(alu.shf_l(e0, e0, 16).guarded(guard))
            p.emit(alu.shf_l(e1, e1, 16).guarded(guard))
            p.emit(alu.fadd(v0, v0, f0).guarded(guard))
            p.emit(alu.fadd(v1, v1, f1).guarded(guard))

        rr = p.r("g_rr")
        part: Optional[RVec] = None
        if rope_rows:
            if nrm is not None:  # the rows' rstd before the partners are traded
                for h in range(2):
                    p.emit(alu.iadd3(rr, row, 8 * h))
                    nrm.row_scale(rr)
                    for j in range(wn // 8):
                        for i in range(2):
                            v = F32.of(acc[4 * j + 2 * h + i])
                            p.emit(alu.fmul(v, v, nrm.rstd))
                nrm = None
            part = self.swap(ip, r, tn, wg, acc)
            sgn = F32.of(p.r("g_rope_sgn"))  # -1 for warpgroup 0's columns (the first half), +1 for 1's
            first = p.p("g_rope_wg0")
            p.emit(alu.isetp("EQ", first, wg, 0))
            p.emit(alu.mov(sgn, F.fp32_bits(1.0)))
            p.emit(alu.mov(sgn, F.fp32_bits(-1.0)).guarded(first))
            plane = p.r("g_rope_plane")  # the sin plane: half of the tables' box (box_16 x 16 / 2 bytes)
            p.emit(alu.shf_l(plane, r.field("op3.box_16", p.r("g_rope_box")), 3))
            last = p.r("g_rope_last")
            p.emit(alu.mov(last, rope_rows - 1))
        rt = p.r("g_rt") if rope_rows else rr
        for h in range(2):
            p.emit(alu.iadd3(rr, row, 8 * h))
            if rope_rows:
                p.emit(alu.imin(rt, rr, last))
                element_addr(bh, epi, brs, bcs, rt)
            else:
                element_addr(bh, epi, brs, bcs, rr)
                element_addr(rh, res_base, rrs, rcs, rr)
            p.emit(alu.iadd3(oh, wrow, 8 * h))
            p.emit(alu.imad(oh, oh, wn, wcol))
            p.emit(alu.imad(oh, oh, 2, outb))
            if nrm is not None:
                nrm.row_scale(rr)
            for j in range(wn // 8):
                v0, v1 = F32.of(acc[4 * j + 2 * h]), F32.of(acc[4 * j + 2 * h + 1])
                if part is not None:
                    for i, v in enumerate((v0, v1)):
                        pv = F32.of(part[4 * j + 2 * h + i])
                        c_ = load_elem(bh, bcs, 8 * j + i, None, "g_rope_c")
                        s_ = load_elem(bh, bcs, 8 * j + i, plane, "g_rope_s")
                        p.emit(alu.fmul(s_, s_, sgn))
                        p.emit(alu.fmul(s_, pv, s_))
                        p.emit(alu.ffma(v, v, c_, s_))
                    p.emit(alu.f2fp_bf16(packed, v1, v0))
                    p.emit(memory.sts(Mem(oh, offset=16 * j), packed))
                    continue
                if nrm is not None:  # the row's rstd: (a·w)·Bᵀ scaled as rmsnorm(a)·Bᵀ is
                    for v in (v0, v1):
                        p.emit(alu.fmul(v, v, nrm.rstd))
                    if up is not None:
                        for v in (F32.of(up[4 * j + 2 * h]), F32.of(up[4 * j + 2 * h + 1])):
                            p.emit(alu.fmul(v, v, nrm.rstd))
                if up is not None:
                    act.apply(v0)
                    act.apply(v1)
                    p.emit(alu.fmul(v0, v0, F32.of(up[4 * j + 2 * h])))
                    p.emit(alu.fmul(v1, v1, F32.of(up[4 * j + 2 * h + 1])))
                else:
                    add_pair(bh, bcs, j, v0, v1, bias_p)
                    act.apply(v0)
                    act.apply(v1)
                    add_pair(rh, rcs, j, v0, v1, res_p)
                p.emit(alu.f2fp_bf16(packed, v1, v0))
                p.emit(memory.sts(Mem(oh, offset=16 * j), packed))
        _ = (ba, ra, oa)
        consumers_done(ip)
        r.release_pid(EPI, r.cleader)
        out_ready(ip, r)

    # -- storer ----------------------------------------------------------------------------------------
    def store(self, ip: Interp, r: Role) -> None:
        """The two warpgroups' blocks, each through the output map (a box of 64 rows x wn): the
        second 64 rows further down (128-row tiles) or wn columns further right (64-row tiles)."""
        p = ip.p
        wait(p, ip.out_ready.at(r.cons.ring), r.cons.ring.parity)
        m = MapOp(ip, r, 0, "out")
        base = phys_addr(ip, OUT, "store_page")
        tm = p.ur("g_tm_u")
        p.emit(alu.r2ur(tm, r.field("tile_m", p.r("g_tm"))))
        wide_u = p.up("g_wide_u")  # 128 rows: the second block is the next 64 rows
        p.emit(alu.uisetp("EQ", wide_u, tm, 128))
        m.copy(base, None, guard=r.leader)
        second = p.ur("store_page2")
        p.emit(alu.uiadd3(second, base, m.bytes))
        wn = p.ur("g_store_wn")  # the block's columns: its bytes / 128
        p.emit(alu.ushf_r(wn, m.bytes, 7))
        if any(len(t) > 5 and t[5] for t in ip.launch.gemm_tiles):  # a roped pair tile: D / 2 columns on
            half = p.r("g_store_half")
            r.field("rope_pair", half)
            p.emit(alu.imad(half, half, 8, RZ))
            half_u, pair_u = p.ur("g_store_half_u"), p.up("g_store_pair")
            p.emit(alu.r2ur(half_u, half))
            p.emit(alu.uisetp("NE", pair_u, half_u, URZ))
            p.emit(alu.usel(wn, half_u, wn, pair_u))
        d0, d1 = p.ur("g_store_d0"), p.ur("g_store_d1")
        p.emit(alu.usel(d0, URZ, wn, wide_u))
        p.emit(alu.umov(d1, 0))
        p.emit(alu.umov(d1, 64).guarded(wide_u))
        m.copy(second, None, d0, guard=r.leader, shift1=d1)
        p.emit(tma.bulk_commit())
        p.emit(tma.bulk_wait(0, writes=True))
        r.release_pid(OUT)


_ = (UP, UR, descriptor, dispatch)

__all__ = ["Gemm", "GemmShared", "RING", "EPI", "OUT", "epi_offset"]
