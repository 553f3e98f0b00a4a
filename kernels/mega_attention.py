"""The megakernel's decode-attention bodies (sm_90a): the partials of one (KV head, chunk of the cache)
and their combine (`warpy.mega.semantics.attention_partial`, `attention_combine`; the host side is
`docs/megakernel.md`'s "Decode attention").

Math on CUDA cores in fp32. This first body is written for correctness and the checker, not for
speed: at T·G query rows a tile it computes T·G flops a byte of K and V, which CUDA-core fp32 (~14 flop
a byte of an SM's share of HBM) keeps up with only for T·G below ~14 (docs/megakernel.md has the
count and the wgmma design that replaces it).

Attention (opcode 6). Pages: lid 0 q (the T·G rows of D, packed as its box lands: row r = t·G + g),
lids 1-2 K (one box of `k_step` cache rows each; the second only when `k_stages` is 2), lids 3-4 V
likewise, lid 5 the partial (T·G rows of D + 4 fp32). Every copy completes on `loaded[slot]`. The
consumers: warp w takes rows w, w + 8, ...; per row, keys in blocks of 32 (lane l the key j0 + l): the
score q·k (the lane walks the row's bf16 pairs from its own rotated start, so the 32 lanes read 32
banks), times scale·log2 e, -inf where the key is past the row's limit (k_end, or k_end - T + 1 + t
when causal) or past the box; the block's max by a butterfly, the running max m, the weights
p = 2^(s - m) by MUFU.EX2 (m = -inf, nothing seen yet, is taken as 0 so that no -inf - -inf is
formed), the running sum l and the accumulators rescaled by 2^(m_old - m); then P·V: each key's p
broadcast from its lane, lane l accumulating the columns 2l, 2l + 1 (and 64 + 2l, 65 + 2l at D 128).
The row's record: O (unnormalised), m, l, 0, 0.

Combine (opcode 7). Pages: lids 0-5 the partials of one head's G rows of one token, `k_step` chunks a
box (chunk c of a box, row g at (c·G + g)·(D + 4) fp32), `k_stages` boxes of the six; lid 6 the output
(G rows of D bf16). Warp w takes rows w, w + 8,
...: M = the chunks' largest m, then Σ 2^(m_c - M)·O_c / Σ 2^(m_c - M)·l_c, rounded once to bf16.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

from warpy.isa.families import alu, control, memory
from warpy.isa.families.typed import F32, S32, U32
from warpy.isa.operands import RZ, URZ, Mem, R, UR
from warpy.isa.pipes import wait
from warpy.isa.units.warp import warp_max, warp_sum
from warpy.mega import fields as F
from warpy.mega.semantics import PARTIAL_EXTRA
from warpy.mega.tiling import ATTENTION_MAX_BOXES, COMBINE_MAX_BOXES, PAGE_BYTES

from .mega_math import pack_bf16, unpack_bf16
from .mega_ops import Body, MapOp, consumers_done, expect, out_ready, page_addr, store_output

if TYPE_CHECKING:
    from .mega_sm90 import Interp, Role

NEG_INF = 0xFF800000
#: K (and V) boxes a chunk may have: one page each (the split rule's preference)
MAX_KV_BOXES = ATTENTION_MAX_BOXES
HEAD_DIMS = (64, 128)


def _page_base(ip: Interp, r: Role, lid: int, name: str) -> R:
    """A general register holding logical page `lid`'s shared address."""
    p = ip.p
    reg, off = p.derive.value_reg("addr", r.page(lid))
    base = p.r(name)
    p.emit(alu.mov(base, reg))
    p.emit(alu.iadd3(base, base, off))
    return base


def _quotient(p: object, d: R, a: R, rcp: F32, name: str) -> None:
    """d = a // b for small non-negative integers (below 2^16), `rcp` = 1/b in fp32: (a + 0.5)/b is
    at least 0.5/b from an integer, far more than MUFU.RCP's error."""
    from warpy.isa.program import Program

    assert isinstance(p, Program)
    x = F32.of(p.r(f"{name}_f"))
    half = F32.of(p.r(f"{name}_half"))
    p.emit(alu.i2f(x, U32.of(a)))
    p.emit(alu.mov(half, F.fp32_bits(0.5)))
    p.emit(alu.fadd(x, x, half))
    p.emit(alu.fmul(x, x, rcp))
    p.emit(alu.f2i(S32.of(d), x))


def _shift_rows(ip: Interp, r: Role, k: int, m: MapOp, step: UR) -> None:
    """Move operand k's box origin `step` rows on along its map dimension of axis AXIS_K (the cache
    rows: dimension 1 or 2, whether the KV heads are a map dimension or not)."""
    p = ip.p
    axes = p.ur(f"{m.name}_axes")
    p.emit(alu.r2ur(axes, r.field(f"op{k}.axes", p.r("att_axes"))))
    code, hit = p.ur(f"{m.name}_axis"), p.up(f"{m.name}_is_k")
    for c in range(1, F.COORDS):
        p.emit(alu.ushf_r(code, axes, 3 * c))
        p.emit(alu.ulop3(code, code, 7, URZ, 0xC0))
        p.emit(alu.uisetp("EQ", hit, code, F.AXIS_K))
        p.emit(alu.uiadd3(m.coords[c], m.coords[c], step).guarded(hit))


def refuse_attention(f: dict[str, int]) -> Optional[str]:
    d, rows, step, boxes = f["tile_n"], f["tile_m"], f["k_step"], f["k_stages"]
    if d not in HEAD_DIMS:
        return f"decode attention of head_dim {d} (the sm_90a body takes {' or '.join(map(str, HEAD_DIMS))})"
    if not 1 <= boxes <= MAX_KV_BOXES:
        return f"a decode-attention chunk of {boxes} K boxes (the sm_90a body takes at most {MAX_KV_BOXES})"
    if f["op2.box_16"] * 16 != step * d * 2 or f["op3.box_16"] * 16 != step * d * 2 or step * d * 2 > PAGE_BYTES:
        return "decode-attention K or V boxes that are not k_step rows of one head within a page"
    if f["op1.box_16"] * 16 != rows * d * 2 or rows * d * 2 > PAGE_BYTES:
        return f"decode attention of {rows} query rows whose q box is not those rows within a page"
    if f["op0.box_16"] * 16 != rows * (d + PARTIAL_EXTRA) * 4:
        return f"decode attention whose partial of {rows} rows is more than a page (one box)"
    if f["group"] < 1 or rows % f["group"]:
        return f"decode attention of {rows} rows in groups of {f['group']}"
    return None


class Attention(Body):
    opcode: int = F.ATTENTION
    name: str = "attention"
    pages: int = 6
    release: tuple[int, ...] = (0, 1, 2, 3, 4, 5)

    def refuse(self, fields: dict[str, int]) -> Optional[str]:
        return refuse_attention(fields)

    def load(self, ip: Interp, r: Role) -> None:
        p = ip.p
        nbox = r.field("k_stages", p.r("att_nbox"))
        step = p.ur("att_step")
        p.emit(alu.r2ur(step, r.field("k_step", p.r("att_rows"))))
        q = MapOp(ip, r, 1, "aq")
        kk = MapOp(ip, r, 2, "ak")
        vv = MapOp(ip, r, 3, "av")
        kv = p.ur("att_kvb")
        p.emit(alu.uiadd3(kv, kk.bytes, vv.bytes))
        total = p.r("att_tx")
        p.emit(alu.mov(total, kv))
        p.emit(alu.imad(total, total, nbox, RZ))
        qb = p.r("att_qb")
        p.emit(alu.mov(qb, q.bytes))
        p.emit(alu.iadd3(total, total, qb))
        for lid in range(5):
            r.wait_page(lid)
        expect(ip, r, total)
        bar = ip.loaded.at(r.cons.ring)
        q.copy(page_addr(ip, r, 0, "att_qpage"), bar, guard=r.leader)
        kk.copy(page_addr(ip, r, 1, "att_k0"), bar, guard=r.leader)
        vv.copy(page_addr(ip, r, 3, "att_v0"), bar, guard=r.leader)
        two = p.p("att_two")
        p.emit(alu.isetp("GE", two, nbox, 2))
        with p.when(two):
            _shift_rows(ip, r, 2, kk, step)
            _shift_rows(ip, r, 3, vv, step)
            kk.copy(page_addr(ip, r, 2, "att_k1"), bar, guard=r.leader)
            vv.copy(page_addr(ip, r, 4, "att_v1"), bar, guard=r.leader)

    def compute(self, ip: Interp, r: Role) -> None:
        p = ip.p
        wait(p, ip.loaded.at(r.cons.ring), r.cons.ring.parity)
        r.wait_page(5)
        rows = r.field("tile_m", p.r("att_tm"))
        d = r.field("tile_n", p.r("att_d"))
        nbox = r.field("k_stages", p.r("att_nbox"))
        step = r.field("k_step", p.r("att_step_r"))
        kbeg = r.field("k_begin", p.r("att_kbeg"))
        length = r.field("k_end", p.r("att_len"))
        grp = r.field("group", p.r("att_g"))
        causal = p.p("att_causal")
        p.emit(alu.isetp("NE", causal, r.field("causal", p.r("att_causal_f")), 0))
        scale = F32.of(r.field("scale", p.r("att_scale")))
        wide = p.p("att_wide")  # D 128: two bf16 pairs a lane
        p.emit(alu.isetp("GT", wide, d, 64))
        rcp_g = F32.of(p.r("att_rcp_g"))
        p.emit(alu.i2f(rcp_g, U32.of(grp)))
        p.emit(alu.rcp(rcp_g, rcp_g))
        tokens = p.r("att_t")
        _quotient(p, tokens, rows, rcp_g, "att_tq")
        base_lim = p.r("att_base_lim")  # the causal limit of token 0: length - T + 1
        p.emit(alu.iadd3(base_lim, length, 1))
        neg_t = p.r("att_neg_t")
        p.emit(alu.imad(neg_t, tokens, -1, RZ))
        p.emit(alu.iadd3(base_lim, base_lim, neg_t))
        qbase = _page_base(ip, r, 0, "att_qbase")
        kbase = [_page_base(ip, r, 1, "att_kbase0"), _page_base(ip, r, 2, "att_kbase1")]
        vbase = [_page_base(ip, r, 3, "att_vbase0"), _page_base(ip, r, 4, "att_vbase1")]
        obase = _page_base(ip, r, 5, "att_obase")
        cw, lane = p.r("att_warp"), p.r("att_lane")
        p.emit(alu.shf_r(cw, r.ctid, 5))
        p.emit(alu.lop3(lane, r.ctid, 31, RZ, 0xC0))
        words = p.r("att_words")  # bf16 pairs a row: D / 2
        p.emit(alu.shf_r(words, d, 1))
        wmask = p.r("att_wmask")
        p.emit(alu.iadd3(wmask, words, -1))
        rowb = p.r("att_rowb")  # bytes of a bf16 row: 2 D
        p.emit(alu.shf_l(rowb, d, 1))
        neg_inf = F32.of(p.r("att_neg_inf"))
        p.emit(alu.mov(neg_inf, NEG_INF))
        zero = F32.of(p.r("att_zero"))
        p.emit(alu.mov(zero, 0))
        m, l_, s, bm, mu, alpha, pw = (F32.of(p.r(f"att_{n}")) for n in ("m", "l", "s", "bm", "mu", "alpha", "p"))
        acc = [F32.of(p.r(f"att_acc{i}")) for i in range(4)]
        qv, kv_, lo, hi, qlo, qhi = (p.r(f"att_{n}") for n in ("qv", "kv", "lo", "hi", "qlo", "qhi"))
        flo, fhi, fqlo, fqhi = F32.of(lo), F32.of(hi), F32.of(qlo), F32.of(qhi)
        steps = p.r("att_row_steps")
        p.emit(alu.iadd3(steps, rows, 7))
        p.emit(alu.shf_r(steps, steps, 3))
        blocks = p.r("att_blocks")
        p.emit(alu.iadd3(blocks, step, 31))
        p.emit(alu.shf_r(blocks, blocks, 5))
        with p.loop("att_row", steps, max_count=32) as j:
            row = p.r("att_r")
            p.emit(alu.imad(row, j.reg, 8, cw))
            inside = p.p("att_row_in")
            p.emit(alu.isetp("LT", inside, row, rows))
            skip = p.fresh_label("ATT_ROW_OUT")
            p.emit(control.bra(skip).guarded(~inside))  # (the same in every lane of the warp)
            tok = p.r("att_tok")
            _quotient(p, tok, row, rcp_g, "att_rq")
            lim = p.r("att_lim")
            p.emit(alu.mov(lim, length))
            p.emit(alu.iadd3(lim, base_lim, tok).guarded(causal))
            qrow = p.r("att_qrow")
            p.emit(alu.imad(qrow, row, rowb, qbase))
            p.emit(alu.mov(m, NEG_INF))
            p.emit(alu.mov(l_, 0))
            for a in acc:
                p.emit(alu.mov(a, 0))
            for b in range(MAX_KV_BOXES):
                has = p.p("att_has_box")
                p.emit(alu.isetp("GT", has, nbox, b))
                bskip = p.fresh_label("ATT_BOX_OUT")
                p.emit(control.bra(bskip).guarded(~has))
                with p.loop(f"att_blk{b}", blocks, max_count=8) as blk:
                    key = p.r("att_key")  # this lane's key in the box
                    p.emit(alu.imad(key, blk.reg, 32, lane))
                    inbox = p.p("att_inbox")
                    p.emit(alu.isetp("LT", inbox, key, step))
                    pos = p.r("att_pos")
                    p.emit(alu.imad(pos, step, b, kbeg))
                    p.emit(alu.iadd3(pos, pos, key))
                    vis = p.p("att_vis")
                    p.emit(alu.isetp("LT", vis, pos, lim, c=inbox))
                    krow = p.r("att_krow")
                    p.emit(alu.imad(krow, key, rowb, kbase[b]))
                    p.emit(alu.mov(s, 0))
                    with p.loop(f"att_dot{b}", words, max_count=64) as w:
                        idx = p.r("att_idx")
                        p.emit(alu.iadd3(idx, w.reg, lane))
                        p.emit(alu.lop3(idx, idx, wmask, RZ, 0xC0))
                        qa, ka = p.r("att_qa"), p.r("att_ka")
                        p.emit(alu.imad(qa, idx, 4, qrow))
                        p.emit(alu.imad(ka, idx, 4, krow))
                        p.emit(memory.lds(qv, Mem(qa)))
                        p.emit(alu.mov(kv_, 0))
                        p.emit(memory.lds(kv_, Mem(ka)).guarded(inbox))
                        unpack_bf16(p, qv, fqlo, fqhi)
                        unpack_bf16(p, kv_, flo, fhi)
                        p.emit(alu.ffma(s, fqlo, flo, s))
                        p.emit(alu.ffma(s, fqhi, fhi, s))
                    p.emit(alu.fmul(s, s, scale))
                    p.emit(alu.fsel(s, s, neg_inf, vis))
                    p.emit(alu.mov(bm, s))
                    warp_max(p, bm)
                    p.emit(alu.fmax(bm, bm, m))  # the new running max
                    none = p.p("att_none")
                    p.emit(alu.fsetp("EQ", none, bm, neg_inf))
                    p.emit(alu.fsel(mu, zero, bm, none))
                    nmu = F32.of(p.r("att_nmu"))
                    p.emit(alu.lop3(nmu, mu, 0x80000000, RZ, 0x3C))  # -mu
                    p.emit(alu.fadd(alpha, m, nmu))
                    p.emit(alu.ex2(alpha, alpha))
                    p.emit(alu.fadd(pw, s, nmu))
                    p.emit(alu.ex2(pw, pw))
                    p.emit(alu.mov(m, bm))
                    bs = F32.of(p.r("att_bs"))
                    p.emit(alu.mov(bs, pw))
                    warp_sum(p, bs)
                    p.emit(alu.ffma(l_, l_, alpha, bs))
                    for a in acc:
                        p.emit(alu.fmul(a, a, alpha))
                    with p.loop(f"att_pv{b}", 32, max_count=32) as kk:
                        vkey = p.r("att_vkey")
                        p.emit(alu.imad(vkey, blk.reg, 32, kk.reg))
                        vin = p.p("att_vin")
                        p.emit(alu.isetp("LT", vin, vkey, step))
                        pk = F32.of(p.r("att_pk"))
                        p.emit(alu.shfl_idx(pk, pw, kk.reg))
                        va = p.r("att_va")
                        p.emit(alu.imad(va, vkey, rowb, vbase[b]))
                        p.emit(alu.imad(va, lane, 4, va))
                        for half in range(2):
                            pv = p.r("att_pv")
                            p.emit(alu.mov(pv, 0))
                            if half == 0:
                                p.emit(memory.lds(pv, Mem(va)).guarded(vin))
                            else:
                                both = p.p("att_vin2")
                                p.emit(alu.plop3_mov(both, vin))
                                p.emit(alu.isetp("NE", both, d, 64, c=both))
                                p.emit(memory.lds(pv, Mem(va, offset=128)).guarded(both))
                            unpack_bf16(p, pv, flo, fhi)
                            p.emit(alu.ffma(acc[2 * half], pk, flo, acc[2 * half]))
                            p.emit(alu.ffma(acc[2 * half + 1], pk, fhi, acc[2 * half + 1]))
                p.label(bskip)
            # the row's record: O at columns 2l, 2l + 1 (and 64 + 2l, 65 + 2l), then m, l, 0, 0
            orow = p.r("att_orow")
            wb = p.r("att_wb")  # bytes of a partial row: 4 (D + 4)
            p.emit(alu.iadd3(wb, d, PARTIAL_EXTRA))
            p.emit(alu.shf_l(wb, wb, 2))
            p.emit(alu.imad(orow, row, wb, obase))
            oa = p.r("att_oa")
            p.emit(alu.imad(oa, lane, 8, orow))
            pair = p.rvec("att_pair", 2)
            p.emit(alu.mov(pair[0], acc[0]))
            p.emit(alu.mov(pair[1], acc[1]))
            p.emit(memory.sts(Mem(oa), pair))
            p.emit(alu.mov(pair[0], acc[2]))
            p.emit(alu.mov(pair[1], acc[3]))
            p.emit(memory.sts(Mem(oa, offset=256), pair).guarded(wide))
            first = p.p("att_lane0")
            p.emit(alu.isetp("EQ", first, lane, 0))
            rec = p.rvec("att_rec", 4)
            p.emit(alu.mov(rec[0], m))
            p.emit(alu.mov(rec[1], l_))
            p.emit(alu.mov(rec[2], 0))
            p.emit(alu.mov(rec[3], 0))
            ma = p.r("att_ma")
            p.emit(alu.imad(ma, d, 4, orow))
            p.emit(memory.sts(Mem(ma), rec).guarded(first))
            p.label(skip)
        consumers_done(ip)
        for lid in range(5):
            r.release_page(lid, r.cleader)
        out_ready(ip, r)

    def store(self, ip: Interp, r: Role) -> None:
        store_output(ip, r, 5)


class AttentionCombine(Body):
    opcode: int = F.ATTENTION_COMBINE
    name: str = "attention_combine"
    pages: int = COMBINE_MAX_BOXES + 1
    release: tuple[int, ...] = tuple(range(COMBINE_MAX_BOXES + 1))

    def refuse(self, f: dict[str, int]) -> Optional[str]:
        d, g, chunks, per, boxes = f["tile_n"], f["group"], f["k_end"], f["k_step"], f["k_stages"]
        if d not in HEAD_DIMS:
            return f"an attention combine of head_dim {d} (the sm_90a body takes {' or '.join(map(str, HEAD_DIMS))})"
        if not 1 <= boxes <= COMBINE_MAX_BOXES or not 1 <= per <= chunks or (boxes - 1) * per >= chunks or \
                boxes * per < chunks:
            return (f"an attention combine of {chunks} chunks in {boxes} boxes of {per} (the sm_90a body takes at most "
                    f"{COMBINE_MAX_BOXES} boxes)")
        if f["op1.box_16"] * 16 != per * g * (d + PARTIAL_EXTRA) * 4 or f["op1.box_16"] * 16 > PAGE_BYTES:
            return "an attention combine whose partials box is not k_step chunks of the tile's rows within a page"
        if f["op0.box_16"] * 16 != g * d * 2 or f["tile_m"] != g:
            return "an attention combine whose output box is not the tile's rows"
        return None

    def load(self, ip: Interp, r: Role) -> None:
        p = ip.p
        nbox = r.field("k_stages", p.r("acp_nbox"))
        step = p.ur("acp_step")
        p.emit(alu.r2ur(step, r.field("k_step", p.r("acp_per"))))
        part = MapOp(ip, r, 1, "acp")
        t = p.r("acp_tx")
        p.emit(alu.mov(t, part.bytes))
        p.emit(alu.imad(t, t, nbox, RZ))
        for lid in range(COMBINE_MAX_BOXES):
            r.wait_page(lid)
        expect(ip, r, t)
        bar = ip.loaded.at(r.cons.ring)
        part.copy(page_addr(ip, r, 0, "acp_page0"), bar, guard=r.leader)
        for b in range(1, COMBINE_MAX_BOXES):
            more = p.p("acp_more")
            p.emit(alu.isetp("GT", more, nbox, b))
            with p.when(more):  # (box b is loaded only when every box before it was)
                _shift_rows(ip, r, 1, part, step)
                part.copy(page_addr(ip, r, b, f"acp_page{b}"), bar, guard=r.leader)

    def compute(self, ip: Interp, r: Role) -> None:
        p = ip.p
        out_lid = COMBINE_MAX_BOXES
        wait(p, ip.loaded.at(r.cons.ring), r.cons.ring.parity)
        r.wait_page(out_lid)
        rows = r.field("tile_m", p.r("acp_tm"))
        d = r.field("tile_n", p.r("acp_d"))
        chunks = r.field("k_end", p.r("acp_s"))
        per = r.field("k_step", p.r("acp_per_c"))
        nbox = r.field("k_stages", p.r("acp_nbox_c"))
        wide = p.p("acp_wide")
        p.emit(alu.isetp("GT", wide, d, 64))
        pbase = [_page_base(ip, r, b, f"acp_pbase{b}") for b in range(COMBINE_MAX_BOXES)]
        obase = _page_base(ip, r, out_lid, "acp_obase")
        cw, lane = p.r("acp_warp"), p.r("acp_lane")
        p.emit(alu.shf_r(cw, r.ctid, 5))
        p.emit(alu.lop3(lane, r.ctid, 31, RZ, 0xC0))
        wb = p.r("acp_wb")  # bytes of a partial row
        p.emit(alu.iadd3(wb, d, PARTIAL_EXTRA))
        p.emit(alu.shf_l(wb, wb, 2))
        cb = p.r("acp_cb")  # bytes of a chunk's rows
        p.emit(alu.imad(cb, wb, rows, RZ))
        big, mc, w, den = (F32.of(p.r(f"acp_{n}")) for n in ("big", "mc", "w", "den"))
        num = [F32.of(p.r(f"acp_num{i}")) for i in range(4)]
        nbig = F32.of(p.r("acp_nbig"))
        steps = p.r("acp_steps")
        p.emit(alu.iadd3(steps, rows, 7))
        p.emit(alu.shf_r(steps, steps, 3))
        left = p.r("acp_left")  # chunks in the boxes from this one on
        count = p.r("acp_count")
        roff = p.r("acp_roff")

        def each_chunk(tag: str, body: Callable[[R], None]) -> None:
            """body(the row's record in chunk c), for every chunk in order, box by box."""
            p.emit(alu.mov(left, chunks))
            for b in range(COMBINE_MAX_BOXES):
                has = p.p("acp_has")
                p.emit(alu.isetp("GT", has, nbox, b))
                with p.when(has):
                    p.emit(alu.imin(count, left, per, unsigned=True, arch=p.sm))
                    with p.loop(f"acp_{tag}{b}", count, max_count=256) as c:
                        rec = p.r("acp_rec")
                        p.emit(alu.imad(rec, c.reg, cb, roff))
                        p.emit(alu.iadd3(rec, rec, pbase[b]))
                        body(rec)
                    p.emit(alu.imad(left, per, -1, left))

        with p.loop("acp_row", steps, max_count=32) as j:
            row = p.r("acp_r")
            p.emit(alu.imad(row, j.reg, 8, cw))
            inside = p.p("acp_in")
            p.emit(alu.isetp("LT", inside, row, rows))
            skip = p.fresh_label("ACP_ROW_OUT")
            p.emit(control.bra(skip).guarded(~inside))
            p.emit(alu.imad(roff, row, wb, RZ))
            p.emit(alu.mov(big, NEG_INF))

            def biggest(rec: R) -> None:
                ma = p.r("acp_ma")
                p.emit(alu.imad(ma, d, 4, rec))
                p.emit(memory.lds(mc, Mem(ma)))
                p.emit(alu.fmax(big, big, mc))

            each_chunk("max", biggest)
            p.emit(alu.lop3(nbig, big, 0x80000000, RZ, 0x3C))  # -M
            p.emit(alu.mov(den, 0))
            for a in num:
                p.emit(alu.mov(a, 0))

            def weigh(rec: R) -> None:
                ma = p.r("acp_ma")
                p.emit(alu.imad(ma, d, 4, rec))
                stats = p.rvec("acp_stats", 2)
                p.emit(memory.lds(stats, Mem(ma)))
                p.emit(alu.fadd(w, F32.of(stats[0]), nbig))
                p.emit(alu.ex2(w, w))
                p.emit(alu.ffma(den, w, F32.of(stats[1]), den))
                oa = p.r("acp_oa")
                p.emit(alu.imad(oa, lane, 8, rec))
                o = p.rvec("acp_o", 2)
                p.emit(memory.lds(o, Mem(oa)))
                p.emit(alu.ffma(num[0], w, F32.of(o[0]), num[0]))
                p.emit(alu.ffma(num[1], w, F32.of(o[1]), num[1]))
                p.emit(alu.mov(o[0], 0))
                p.emit(alu.mov(o[1], 0))
                p.emit(memory.lds(o, Mem(oa, offset=256)).guarded(wide))
                p.emit(alu.ffma(num[2], w, F32.of(o[0]), num[2]))
                p.emit(alu.ffma(num[3], w, F32.of(o[1]), num[3]))

            each_chunk("sum", weigh)
            inv = F32.of(p.r("acp_inv"))
            p.emit(alu.rcp(inv, den))
            for a in num:
                p.emit(alu.fmul(a, a, inv))
            out = p.r("acp_out")
            oa2 = p.r("acp_oa2")
            rowb = p.r("acp_rowb")
            p.emit(alu.shf_l(rowb, d, 1))
            p.emit(alu.imad(oa2, row, rowb, obase))
            p.emit(alu.imad(oa2, lane, 4, oa2))
            pack_bf16(p, out, num[1], num[0])
            p.emit(memory.sts(Mem(oa2), out))
            pack_bf16(p, out, num[3], num[2])
            p.emit(memory.sts(Mem(oa2, offset=128), out).guarded(wide))
            p.label(skip)
        consumers_done(ip)
        for lid in range(COMBINE_MAX_BOXES):
            r.release_page(lid, r.cleader)
        out_ready(ip, r)

    def store(self, ip: Interp, r: Role) -> None:
        store_output(ip, r, COMBINE_MAX_BOXES)


def condition(n: Any, c: list[Any], shape: tuple[int, ...]) -> Any:
    """What the error of an attention node's elements scales with (for
    `kernels.mega_common.conditions`; `c` the operands' conditions, `shape` the output's): an output
    row is a convex combination of V's rows, so its roundings are in proportion to the largest |v|
    of its KV head, not to itself. The partials carry that bound per head (they are a temp, never
    compared), the combine takes it from them."""
    import numpy as np

    if n.kind == "attention":
        out = np.zeros(shape)
        for h in range(shape[0]):
            out[h] = float(np.max(c[2][:, h, :]))
        return out
    out = np.zeros(shape)
    g = n.group
    for h in range(c[0].shape[0]):
        out[:, h * g:(h + 1) * g, :] = float(np.max(c[0][h]))
    return out


__all__ = ["Attention", "AttentionCombine", "refuse_attention", "condition"]
