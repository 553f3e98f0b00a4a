"""The megakernel's decode-attention bodies (sm_90a): the partials of one (KV head, chunk of the cache)
and their combine (`warpy.mega.semantics.attention_partial`, `attention_combine`; the host side and
the design with its instruction counts are `docs/megakernel.md`'s "Decode attention").

Math on CUDA cores in fp32 (the byte/flop count and the wgmma body that would replace it: the same
section).

Attention (opcode 6). Pages: lid 0 q (the T·G rows of D, packed as its box lands: row r = t·G + g),
lids 1-2 K (one box of `k_step` cache rows each; the second only when `k_stages` is 2), lids 3-4 V
likewise, lid 5 the partial (T·G rows of D + 4 fp32). Every copy completes on `loaded[slot]`. The
consumers split the tile's keys, not its rows: the rows in groups of RG = 4, KS of the 8 warps sharing
a group's keys (8, 4, 2, 1 for 1, 2, 3-4, more groups; 1 for a chunk of one key block), each warp's
key blocks of 32 (a lane a key) against the group's 4 rows at once: S from 16-byte chunks of K and q
read with a lane rotation (no
bank conflict), each K chunk multiplied into the 4 rows; the online softmax in base 2 (exponents
relative to the running max, or 0 while it is -inf: no -inf - -inf); P·V with the block's weights
broadcast from shared memory and each V row read once for the 4 rows. Then the KS warps' (m, l, O)
merge through lid 0 in log2 KS levels (a named barrier of the consumers each), and key part 0 writes
the rows' records: O (unnormalised), m, l, 0, 0.

Combine (opcode 7). Pages: lids 0-5 the partials of one head's G rows of one token, `k_step` chunks a
box (chunk c of a box, row g at (c·G + g)·(D + 4) fp32), `k_stages` boxes of the six; lid 6 the output
(G rows of D bf16). Warp w takes rows w, w + 8,
...: M = the chunks' largest m, then Σ 2^(m_c - M)·O_c / Σ 2^(m_c - M)·l_c, rounded once to bf16. Its
lanes take 32 chunks at once for M (a warp maximum) and for each chunk's weight 2^(m_c - M); the sums
then walk the chunks in order, each chunk's weight and l shuffled from its lane: the operations and
their order are one lane's walk over the chunks, so the result is the reference's to the bit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

from warpy.isa.families import alu, control, memory, sync
from warpy.isa.families.typed import F32, S32, U32
from warpy.isa.operands import RZ, URZ, Mem, P, R, RVec, UR
from warpy.isa.pipes import wait
from warpy.isa.units.warp import warp_max, warp_sum
from warpy.mega import fields as F
from warpy.mega.semantics import PARTIAL_EXTRA
from warpy.mega.tiling import (ATTENTION_KEY_SPLITS, ATTENTION_MAX_BOXES, ATTENTION_ROW_GROUP, ATTENTION_WARPS,
                                COMBINE_MAX_BOXES, PAGE_BYTES)

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
    if f["op0.box_16"] * 16 != rows * (d + PARTIAL_EXTRA) * 4 or rows * (d + PARTIAL_EXTRA) * 4 > PAGE_BYTES:
        return f"decode attention whose partial of {rows} rows is more than a page (one box)"
    if step % (KEY_BLOCK // 2):
        return f"decode-attention K boxes of {step} rows (the sm_90a body takes multiples of {KEY_BLOCK // 2})"
    if f["group"] < 1 or rows % f["group"]:
        return f"decode attention of {rows} rows in groups of {f['group']}"
    return None


#: the consumer warps, and the rows a warp computes at once (a row group): every K and V element a
#: warp loads from shared memory serves the group's four rows
WARPS = ATTENTION_WARPS
RG = ATTENTION_ROW_GROUP
KEY_BLOCK = 32
#: lid 0 past q (q is below 16 KiB: a partial of T·G rows fits a page, so T·G·D·2 < PAGE_BYTES / 2):
#: the merge's two areas at MERGE_AT (used only when the keys are split over 2-8 warps, T·G <= 16
#: rows: q then ends by 4 KiB), each of MERGE_WRITERS records of a row group, and each warp's block
#: of weights (32 keys x RG rows, fp32) at P_AT + 512·warp
MERGE_AT = 8192
MERGE_WRITERS = 4  # (8 / KS) row-group slots x KS / 2 writers a level
P_AT = PAGE_BYTES - WARPS * KEY_BLOCK * RG * 4


def _record_bytes(d: int) -> int:
    return (d + PARTIAL_EXTRA) * 4


def _merge_area(d: int) -> int:
    return MERGE_WRITERS * RG * _record_bytes(d)


assert MERGE_AT + 2 * _merge_area(max(HEAD_DIMS)) <= P_AT


class _Ctx:
    """What both head-dim paths of the compute step share: the instruction's fields, the pages'
    addresses, this warp's place in the split of the tile (row-group slot, key part)."""

    def __init__(self, ip: Interp, r: Role) -> None:
        p = self.p = ip.p
        self.rows = r.field("tile_m", p.r("att_tm"))
        self.d = r.field("tile_n", p.r("att_d"))
        self.nbox = r.field("k_stages", p.r("att_nbox"))
        self.step = r.field("k_step", p.r("att_step_r"))
        self.kbeg = r.field("k_begin", p.r("att_kbeg"))
        self.length = r.field("k_end", p.r("att_len"))
        grp = r.field("group", p.r("att_g"))
        self.causal = p.p("att_causal")
        p.emit(alu.isetp("NE", self.causal, r.field("causal", p.r("att_causal_f")), 0))
        self.scale = F32.of(r.field("scale", p.r("att_scale")))
        self.rcp_g = F32.of(p.r("att_rcp_g"))
        p.emit(alu.i2f(self.rcp_g, U32.of(grp)))
        p.emit(alu.rcp(self.rcp_g, self.rcp_g))
        tokens = p.r("att_t")
        _quotient(p, tokens, self.rows, self.rcp_g, "att_tq")
        self.base_lim = p.r("att_base_lim")  # the causal limit of token 0: length - T + 1
        p.emit(alu.iadd3(self.base_lim, self.length, 1))
        neg_t = p.r("att_neg_t")
        p.emit(alu.imad(neg_t, tokens, -1, RZ))
        p.emit(alu.iadd3(self.base_lim, self.base_lim, neg_t))
        self.rows_m1, self.step_m1 = p.r("att_rows_m1"), p.r("att_step_m1")
        p.emit(alu.iadd3(self.rows_m1, self.rows, -1))
        p.emit(alu.iadd3(self.step_m1, self.step, -1))
        self.qbase = _page_base(ip, r, 0, "att_qbase")
        self.kbase = [_page_base(ip, r, 1, "att_kbase0"), _page_base(ip, r, 2, "att_kbase1")]
        self.vbase = [_page_base(ip, r, 3, "att_vbase0"), _page_base(ip, r, 4, "att_vbase1")]
        self.obase = _page_base(ip, r, 5, "att_obase")
        self.cw, self.lane = p.r("att_warp"), p.r("att_lane")
        p.emit(alu.shf_r(self.cw, r.ctid, 5))
        p.emit(alu.lop3(self.lane, r.ctid, 31, RZ, 0xC0))
        self.lane0 = p.p("att_lane0")
        p.emit(alu.isetp("EQ", self.lane0, self.lane, 0))
        self.neg_inf = F32.of(p.r("att_neg_inf"))
        p.emit(alu.mov(self.neg_inf, NEG_INF))
        self.zero = F32.of(p.r("att_zero"))
        p.emit(alu.mov(self.zero, 0))
        # the split: NG row groups; KS = 8, 4, 2, 1 warps share a group's keys when NG is 1, 2, 3-4, 5+
        # (`warpy.mega.tiling.ATTENTION_KEY_SPLITS`, which the split rule's cost model reads too;
        # warp w: slot w / KS, key part w % KS); the slots take groups slot, slot + 8 / KS, ...
        self.ng = p.r("att_ng")
        p.emit(alu.iadd3(self.ng, self.rows, RG - 1))
        p.emit(alu.shf_r(self.ng, self.ng, 2))
        self.ks_log = p.r("att_ks_log")
        p.emit(alu.mov(self.ks_log, 0))
        few = p.p("att_few")
        for most, ks in reversed(ATTENTION_KEY_SPLITS):  # (the last that holds: the fewest groups')
            p.emit(alu.isetp("LE", few, self.ng, most))
            p.emit(alu.mov(self.ks_log, ks.bit_length() - 1).guarded(few))
        # a chunk of one key block (one box of at most KEY_BLOCK rows: the appended rows of
        # `lower.fresh_rows`, a short cache's chunk) is one warp's: no other warp has keys, no merge
        one = p.p("att_one_block")
        p.emit(alu.isetp("LE", one, self.step, KEY_BLOCK))
        p.emit(alu.isetp("EQ", one, self.nbox, 1, c=one))
        p.emit(alu.mov(self.ks_log, 0).guarded(one))
        self.ks = p.r("att_ks")
        p.emit(alu.mov(self.ks, 1))
        p.emit(alu.shf_l(self.ks, self.ks, self.ks_log))
        self.part, self.slot = p.r("att_part"), p.r("att_slot")
        km1 = p.r("att_ks_m1")
        p.emit(alu.iadd3(km1, self.ks, -1))
        p.emit(alu.lop3(self.part, self.cw, km1, RZ, 0xC0))
        p.emit(alu.shf_r(self.slot, self.cw, self.ks_log))
        sl = p.r("att_slots_log")
        p.emit(alu.imad(sl, self.ks_log, -1, 3))
        self.slots = p.r("att_slots")
        p.emit(alu.mov(self.slots, 1))
        p.emit(alu.shf_l(self.slots, self.slots, sl))
        self.iters = p.r("att_iters")  # row groups a slot takes (the same loop count in every warp)
        p.emit(alu.iadd3(self.iters, self.ng, self.slots, -1))
        p.emit(alu.shf_r(self.iters, self.iters, sl))
        # this warp's key blocks: the chunk's blocks numbered across its boxes (box b's block i is
        # b·nblk + i, nblk = ceil(k_step / 32)), those equal to part mod KS; in box b the first is
        # i0 = (part - b·nblk) mod KS, then every KS-th below nblk
        nblk = p.r("att_nblk")
        p.emit(alu.iadd3(nblk, self.step, KEY_BLOCK - 1))
        p.emit(alu.shf_r(nblk, nblk, 5))
        self.first: list[R] = []
        self.cnt: list[R] = []
        for b in range(MAX_KV_BOXES):
            i0, cnt = p.r(f"att_i0_{b}"), p.r(f"att_cnt{b}")
            p.emit(alu.imad(i0, nblk, -b, self.part))
            p.emit(alu.lop3(i0, i0, km1, RZ, 0xC0))
            p.emit(alu.iadd3(cnt, nblk, self.ks, -1))
            p.emit(alu.imad(cnt, i0, -1, cnt))
            p.emit(alu.shf_r(cnt, cnt, self.ks_log))
            self.first.append(i0)
            self.cnt.append(cnt)
        self.xl = p.r("att_xl")  # the lane's rotation of 16-byte chunks: (lane & 7)·16
        p.emit(alu.lop3(self.xl, self.lane, 7, RZ, 0xC0))
        p.emit(alu.shf_l(self.xl, self.xl, 4))
        self.pscr = p.r("att_pscr")  # this warp's weights block
        p.emit(alu.imad(self.pscr, self.cw, KEY_BLOCK * RG * 4, self.qbase))
        p.emit(alu.iadd3(self.pscr, self.pscr, P_AT))
        self.merge = p.r("att_merge")
        p.emit(alu.iadd3(self.merge, self.qbase, MERGE_AT))


def _row_stats(c: _Ctx, s: F32, m: F32, name: str) -> tuple[F32, F32]:
    """(the new running max M of m and the warp's s, -M where M is finite else -0): exponents taken
    relative to it never form -inf - -inf."""
    p = c.p
    bm = F32.of(p.r(f"{name}_bm"))
    p.emit(alu.mov(bm, s))
    warp_max(p, bm)
    p.emit(alu.fmax(bm, bm, m))
    return bm, _neg_safe(c, bm, name)


def _neg_safe(c: _Ctx, big: F32, name: str) -> F32:
    p = c.p
    none = p.p("att_none")
    p.emit(alu.fsetp("EQ", none, big, c.neg_inf))
    mu = F32.of(p.r(f"{name}_nmu"))
    p.emit(alu.fsel(mu, c.zero, big, none))
    p.emit(alu.lop3(mu, mu, 0x80000000, RZ, 0x3C))  # -mu
    return mu


def _tiles(c: _Ctx, d: int) -> None:
    """The row groups of this warp's slot at head_dim d: per group, the warp's key blocks (S, the
    online softmax, P·V), the merge of the group's KS warps, the group's records."""
    p = c.p
    na = d // KEY_BLOCK  # the columns a lane owns: na·lane ..
    rowb, rec = 2 * d, _record_bytes(d)
    m = [F32.of(p.r(f"att_m{i}")) for i in range(RG)]
    l_ = [F32.of(p.r(f"att_l{i}")) for i in range(RG)]
    acc = [[F32.of(p.r(f"att_acc{i}_{j}")) for j in range(na)] for i in range(RG)]
    qrow = [p.r(f"att_qrow{i}") for i in range(RG)]
    lim = [p.r(f"att_lim{i}") for i in range(RG)]
    with p.loop(f"att_it{d}", c.iters, max_count=32) as it:
        g = p.r("att_grp")
        p.emit(alu.imad(g, it.reg, c.slots, c.slot))
        active = p.p("att_active")
        p.emit(alu.isetp("LT", active, g, c.ng))
        r0 = p.r("att_r0")
        p.emit(alu.shf_l(r0, g, 2))
        for i in range(RG):
            p.emit(alu.mov(m[i], NEG_INF))
            p.emit(alu.mov(l_[i], 0))
            for a in acc[i]:
                p.emit(alu.mov(a, 0))
        idle = p.fresh_label("ATT_IDLE")
        p.emit(control.bra(idle).guarded(~active))  # (the same in every lane of the warp)
        for i in range(RG):
            row = p.r("att_row")  # rows past the tile read the last row's q (their results are not written)
            p.emit(alu.iadd3(row, r0, i))
            p.emit(alu.imin(row, row, c.rows_m1, unsigned=True, arch=p.sm))
            p.emit(alu.imad(qrow[i], row, rowb, c.qbase))
            tok = p.r("att_tok")
            _quotient(p, tok, row, c.rcp_g, "att_rq")
            p.emit(alu.mov(lim[i], c.length))
            p.emit(alu.iadd3(lim[i], c.base_lim, tok).guarded(c.causal))
        for b in range(MAX_KV_BOXES):
            has = p.p("att_has_box")
            p.emit(alu.isetp("GT", has, c.nbox, b))
            p.emit(alu.isetp("GT", has, c.cnt[b], 0, c=has))
            bskip = p.fresh_label("ATT_BOX_OUT")
            p.emit(control.bra(bskip).guarded(~has))
            with p.loop(f"att_blk{d}_{b}", c.cnt[b], max_count=8) as blk:
                _block(c, d, b, blk.reg, m, l_, acc, qrow, lim)
            p.label(bskip)
        p.label(idle)
        for i in range(RG):
            warp_sum(p, l_[i])
        _merge(c, d, m, l_, acc)
        # the group's records (key part 0): O at columns na·lane.., then m, l, 0, 0
        first = p.p("att_first")
        p.emit(alu.isetp("EQ", first, c.part, 0, c=active))
        with p.when(first):
            for i in range(RG):
                row = p.r("att_row")
                p.emit(alu.iadd3(row, r0, i))
                inrow, rec0 = p.p("att_inrow"), p.p("att_rec0")
                p.emit(alu.isetp("LT", inrow, row, c.rows))
                p.emit(alu.isetp("EQ", rec0, c.lane, 0, c=inrow))
                orow = p.r("att_orow")
                p.emit(alu.imad(orow, row, rec, c.obase))
                oa = p.r("att_oa")
                p.emit(alu.imad(oa, c.lane, na * 4, orow))
                o = p.rvec(f"att_o{na}", na)
                for j in range(na):
                    p.emit(alu.mov(o[j], acc[i][j]))
                p.emit(memory.sts(Mem(oa), o).guarded(inrow))
                stats = p.rvec("att_stats", 4)
                p.emit(alu.mov(stats[0], m[i]))
                p.emit(alu.mov(stats[1], l_[i]))
                p.emit(alu.mov(stats[2], 0))
                p.emit(alu.mov(stats[3], 0))
                p.emit(memory.sts(Mem(orow, offset=d * 4), stats).guarded(rec0))


def _block(c: _Ctx, d: int, b: int, blk: R, m: list[F32], l_: list[F32], acc: list[list[F32]], qrow: list[R],
           lim: list[R]) -> None:
    """One key block of box b (32 keys, lane l the key key0 + l) against the group's rows."""
    p = c.p
    na = d // KEY_BLOCK
    rowb = 2 * d
    jb = p.r("att_jb")
    p.emit(alu.imad(jb, blk, c.ks, c.first[b]))
    key0 = p.r("att_key0")
    p.emit(alu.shf_l(key0, jb, 5))
    key = p.r("att_key")
    p.emit(alu.iadd3(key, key0, c.lane))
    inbox = p.p("att_inbox")
    p.emit(alu.isetp("LT", inbox, key, c.step))
    kcl = p.r("att_kcl")  # keys past the box read its last row (their scores are -inf)
    p.emit(alu.imin(kcl, key, c.step_m1, unsigned=True, arch=p.sm))
    krow = p.r("att_krow")
    p.emit(alu.imad(krow, kcl, rowb, c.kbase[b]))
    pos = p.r("att_pos")  # the key's cache row, or past every limit when the key is past the box
    p.emit(alu.imad(pos, c.step, b, c.kbeg))
    p.emit(alu.iadd3(pos, pos, key))
    p.emit(alu.sel(pos, pos, 0x7FFFFFFF, inbox))
    s = [F32.of(p.r(f"att_s{i}")) for i in range(RG)]
    for x in s:
        p.emit(alu.mov(x, 0))
    # S: the key's row in 16-byte chunks (8 dims), chunk (lane & 7) ^ ch so that the 8 lanes of a
    # quarter warp read 8 different chunks (K's rows and q's rows are 128 or 256 bytes apart: one
    # chunk of every key would be one bank group); each K chunk serves the RG rows
    kv, qv = p.rvec("att_kv", 4), p.rvec("att_qv", 4)
    kf = [F32.of(p.r(f"att_kf{e}")) for e in range(8)]
    qlo, qhi = F32.of(p.r("att_qlo")), F32.of(p.r("att_qhi"))
    with p.loop(f"att_dot{d}_{b}", d // 8, max_count=16) as ch:
        off = p.r("att_off")
        p.emit(alu.shf_l(off, ch.reg, 4))
        p.emit(alu.lop3(off, off, c.xl, RZ, 0x3C))
        ka = p.r("att_ka")
        p.emit(alu.iadd3(ka, krow, off))
        p.emit(memory.lds(kv, Mem(ka)))
        for e in range(4):
            unpack_bf16(p, kv[e], kf[2 * e], kf[2 * e + 1])
        for i in range(RG):
            qa = p.r("att_qa")
            p.emit(alu.iadd3(qa, qrow[i], off))
            p.emit(memory.lds(qv, Mem(qa)))
            for e in range(4):
                unpack_bf16(p, qv[e], qlo, qhi)
                p.emit(alu.ffma(s[i], qlo, kf[2 * e], s[i]))
                p.emit(alu.ffma(s[i], qhi, kf[2 * e + 1], s[i]))
    # the online softmax, per row: scores in base 2, -inf where not visible; the running max over
    # the warp's keys; l is kept per lane (summed over the warp once, after the last block)
    pv = p.rvec("att_pw", RG)
    for i in range(RG):
        p.emit(alu.fmul(s[i], s[i], c.scale))
        vis = p.p("att_vis")
        p.emit(alu.isetp("LT", vis, pos, lim[i]))
        p.emit(alu.fsel(s[i], s[i], c.neg_inf, vis))
        big, nmu = _row_stats(c, s[i], m[i], "att_row")
        alpha = F32.of(p.r("att_alpha"))
        p.emit(alu.fadd(alpha, m[i], nmu))
        p.emit(alu.ex2(alpha, alpha))
        pw = F32.of(pv[i])
        p.emit(alu.fadd(pw, s[i], nmu))
        p.emit(alu.ex2(pw, pw))
        p.emit(alu.mov(m[i], big))
        p.emit(alu.ffma(l_[i], l_[i], alpha, pw))
        for a in acc[i]:
            p.emit(alu.fmul(a, a, alpha))
    # P·V: the weights through this warp's block in shared memory (key k's RG weights: 16 bytes,
    # read by every lane at once), V's row k read once for the RG rows; lane l owns columns na·l..
    pa = p.r("att_pa")
    p.emit(alu.imad(pa, c.lane, RG * 4, c.pscr))
    p.emit(control.warpsync_all())  # (the previous block's reads of the weights are done)
    p.emit(memory.sts(Mem(pa), pv))
    p.emit(control.warpsync_all())
    vrow = p.r("att_vrow")
    p.emit(alu.imad(vrow, key0, rowb, c.vbase[b]))
    p.emit(alu.imad(vrow, c.lane, na * 2, vrow))
    more = p.p("att_more")  # the block's second 16 keys are in the box (k_step is a multiple of 16)
    p.emit(alu.iadd3(key, key0, 16))
    p.emit(alu.isetp("LT", more, key, c.step))
    pk = p.rvec("att_pk", RG)
    vw: R | RVec = p.r("att_vw") if na == 2 else p.rvec("att_vw2", na // 2)
    vf = [F32.of(p.r(f"att_vf{j}")) for j in range(na)]
    out = p.fresh_label("ATT_PV_OUT")
    for k in range(KEY_BLOCK):
        if k == 16:
            p.emit(control.bra(out).guarded(~more))
        p.emit(memory.lds(pk, Mem(c.pscr, offset=k * RG * 4)))
        p.emit(memory.lds(vw, Mem(vrow, offset=k * rowb)))
        words = [vw] if isinstance(vw, R) else [vw[e] for e in range(na // 2)]
        for e, wd in enumerate(words):
            unpack_bf16(p, wd, vf[2 * e], vf[2 * e + 1])
        for i in range(RG):
            for j in range(na):
                p.emit(alu.ffma(acc[i][j], F32.of(pk[i]), vf[j], acc[i][j]))
    p.label(out)


def _merge(c: _Ctx, d: int, m: list[F32], l_: list[F32], acc: list[list[F32]]) -> None:
    """The KS warps of each row group merged into key part 0, in log2 KS levels (h = KS/2 .. 1): the
    parts h..2h-1 write (O, m, l) of the group's rows to the level's area (two areas, alternating),
    a named barrier of the consumers, then part i < h takes part i + h's: M = max(m, m'), O and l
    weighed by 2^(m - M) and 2^(m' - M) (M = -inf taken as 0). A fixed order: the same bits every run."""
    p = c.p
    na = d // KEY_BLOCK
    rec = _record_bytes(d)
    skip = p.fresh_label("ATT_NO_MERGE")
    one = p.p("att_one_part")
    p.emit(alu.isetp("EQ", one, c.ks_log, 0))
    p.emit(control.bra(skip).guarded(one))
    half = p.r("att_half_ks")
    p.emit(alu.shf_r(half, c.ks, 1))
    with p.loop(f"att_lv{d}", c.ks_log, max_count=3) as lv:
        h, t = p.r("att_h"), p.r("att_ht")
        p.emit(alu.iadd3(t, c.ks_log, -1))
        p.emit(alu.imad(t, lv.reg, -1, t))
        p.emit(alu.mov(h, 1))
        p.emit(alu.shf_l(h, h, t))
        area = p.r("att_area")
        p.emit(alu.lop3(t, lv.reg, 1, RZ, 0xC0))
        p.emit(alu.imad(area, t, _merge_area(d), c.merge))
        idx = p.r("att_midx")  # part + slot·KS/2: the reader's record set; the writer's is idx - h
        p.emit(alu.imad(idx, c.slot, half, c.part))
        writer, reader = p.p("att_writer"), p.p("att_reader")
        h2 = p.r("att_h2")
        p.emit(alu.shf_l(h2, h, 1))
        p.emit(alu.isetp("GE", writer, c.part, h))
        p.emit(alu.isetp("LT", writer, c.part, h2, c=writer))
        p.emit(alu.isetp("LT", reader, c.part, h))
        o = p.rvec(f"att_mo{na}", na)
        st = p.rvec("att_mst", 2)
        with p.when(writer):
            wa = p.r("att_wa")
            p.emit(alu.imad(t, h, -1, idx))
            p.emit(alu.imad(wa, t, RG * rec, area))
            wl = p.r("att_wl")
            p.emit(alu.imad(wl, c.lane, na * 4, wa))
            for i in range(RG):
                for j in range(na):
                    p.emit(alu.mov(o[j], acc[i][j]))
                p.emit(memory.sts(Mem(wl, offset=i * rec), o))
                p.emit(alu.mov(st[0], m[i]))
                p.emit(alu.mov(st[1], l_[i]))
                p.emit(memory.sts(Mem(wa, offset=i * rec + d * 4), st).guarded(c.lane0))
        p.emit(sync.bar_sync(1, 256))
        with p.when(reader):
            ra = p.r("att_ra")
            p.emit(alu.imad(ra, idx, RG * rec, area))
            rl = p.r("att_rl")
            p.emit(alu.imad(rl, c.lane, na * 4, ra))
            for i in range(RG):
                p.emit(memory.lds(st, Mem(ra, offset=i * rec + d * 4)))
                p.emit(memory.lds(o, Mem(rl, offset=i * rec)))
                mo, lo = F32.of(st[0]), F32.of(st[1])
                big = F32.of(p.r("att_mbig"))
                p.emit(alu.fmax(big, m[i], mo))
                nmu = _neg_safe(c, big, "att_mg")
                wa_, wb_ = F32.of(p.r("att_wa_f")), F32.of(p.r("att_wb_f"))
                p.emit(alu.fadd(wa_, m[i], nmu))
                p.emit(alu.ex2(wa_, wa_))
                p.emit(alu.fadd(wb_, mo, nmu))
                p.emit(alu.ex2(wb_, wb_))
                p.emit(alu.fmul(l_[i], l_[i], wa_))
                p.emit(alu.ffma(l_[i], lo, wb_, l_[i]))
                for j in range(na):
                    p.emit(alu.fmul(acc[i][j], acc[i][j], wa_))
                    p.emit(alu.ffma(acc[i][j], F32.of(o[j]), wb_, acc[i][j]))
                p.emit(alu.mov(m[i], big))
    p.emit(sync.bar_sync(1, 256))  # (the areas are free for the next row group)
    p.label(skip)


class Attention(Body):
    opcode: int = F.ATTENTION
    name: str = "attention"
    pages: int = 6
    release: tuple[int, ...] = (0, 1, 2, 3, 4, 5)

    def refuse(self, fields: dict[str, int]) -> Optional[str]:
        return refuse_attention(fields)

    @staticmethod
    def _kv_early(ip: Interp, r: Role) -> P:
        """Whether the instruction's K and V are early (its `early` bits 2 and 3: cache rows nothing
        in the launch writes, the old rows of `warpy.mega.lower.fresh_rows`)."""
        p = ip.p
        e = r.field("early", p.r("att_early"))
        p.emit(alu.lop3(e, e, 0xC, RZ, 0xC0))
        kv_early = p.p("att_kv_early")
        p.emit(alu.isetp("EQ", kv_early, e, 0xC))
        return kv_early

    def load_early(self, ip: Interp, r: Role) -> None:
        """Before the counter waits, where K and V are early: their pages, the instruction's one
        arrival on `loaded[slot]` with every copy's bytes (q's too), the K and V copies; `load` then
        copies q alone. The chunk's keys stream while the instructions before it run."""
        with ip.p.when(self._kv_early(ip, r)):
            self._copies(ip, r, with_q=False)

    def load(self, ip: Interp, r: Role) -> None:
        p = ip.p
        done = p.fresh_label("ATT_LOADED")
        with p.when(self._kv_early(ip, r)):  # (K and V on the way: `load_early`)
            q = MapOp(ip, r, 1, "aq")
            q.copy(page_addr(ip, r, 0, "att_qpage"), ip.loaded.at(r.cons.ring), guard=r.leader)
            p.emit(control.bra(done))
        self._copies(ip, r, with_q=True)
        p.label(done)

    def _copies(self, ip: Interp, r: Role, with_q: bool) -> None:
        """The pages, the arrival on `loaded[slot]` with the bytes of q and the chunk's K and V boxes,
        and the copies (q's only `with_q`)."""
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
        if with_q:
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
        p.label(p.fresh_label("ATT_C_BEGIN"))  # (where the compute step starts: for instruction counts)
        c = _Ctx(ip, r)
        wide = p.p("att_wide")
        p.emit(alu.isetp("GT", wide, c.d, 64))
        d128, done = p.fresh_label("ATT_D128"), p.fresh_label("ATT_DONE")
        p.emit(control.bra(d128).guarded(wide))
        _tiles(c, 64)
        p.emit(control.bra(done))
        p.label(d128)
        _tiles(c, 128)
        p.label(done)
        p.label(p.fresh_label("ATT_C_END"))
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

        def each_group(tag: str, body: Callable[[R, R, R], None]) -> None:
            """body(chunks in the group, the group's first record, this lane's chunk's record) for every
            group of 32 chunks in order, box by box: lane l takes the group's chunk l."""
            p.emit(alu.mov(left, chunks))
            for b in range(COMBINE_MAX_BOXES):
                has = p.p("acp_has")
                p.emit(alu.isetp("GT", has, nbox, b))
                with p.when(has):  # (every box holds at least one chunk: `refuse`)
                    p.emit(alu.imin(count, left, per, unsigned=True, arch=p.sm))
                    groups = p.r("acp_groups")
                    p.emit(alu.iadd3(groups, count, 31))
                    p.emit(alu.shf_r(groups, groups, 5))
                    with p.loop(f"acp_{tag}{b}", groups, max_count=8) as g:
                        first, n = p.r("acp_first"), p.r("acp_n")
                        p.emit(alu.imad(first, g.reg, -32, count))  # chunks from the group's first on
                        p.emit(alu.imin(n, first, 32, unsigned=True, arch=p.sm))
                        p.emit(alu.shf_l(first, g.reg, 5))
                        mine = p.r("acp_mine")
                        p.emit(alu.iadd3(mine, first, lane))
                        p.emit(alu.imad(first, first, cb, roff))
                        p.emit(alu.iadd3(first, first, pbase[b]))
                        p.emit(alu.imad(mine, mine, cb, roff))
                        p.emit(alu.iadd3(mine, mine, pbase[b]))
                        body(n, first, mine)
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

            def biggest(n: R, first: R, rec: R) -> None:
                """The lanes' chunks' m at once (a lane past the group's chunks reads none)."""
                valid = p.p("acp_valid")
                p.emit(alu.isetp("LT", valid, lane, n))
                ma = p.r("acp_ma")
                p.emit(alu.imad(ma, d, 4, rec))
                p.emit(alu.mov(mc, NEG_INF))
                p.emit(memory.lds(mc, Mem(ma)).guarded(valid))
                p.emit(alu.fmax(big, big, mc))

            each_group("max", biggest)
            warp_max(p, big, tmp="acp_xchg")  # M: exact in any order
            p.emit(alu.lop3(nbig, big, 0x80000000, RZ, 0x3C))  # -M
            p.emit(alu.mov(den, 0))
            for a in num:
                p.emit(alu.mov(a, 0))

            def weigh(n: R, first: R, rec: R) -> None:
                """Each lane its chunk's weight 2^(m - M) and l; then, chunk after chunk in order, the
                sums (the weight and l from the chunk's lane): the same operations in the same order
                as one lane walking the chunks."""
                valid = p.p("acp_valid")
                p.emit(alu.isetp("LT", valid, lane, n))
                ma = p.r("acp_ma")
                p.emit(alu.imad(ma, d, 4, rec))
                stats = p.rvec("acp_stats", 2)
                p.emit(alu.mov(stats[0], NEG_INF))
                p.emit(alu.mov(stats[1], 0))
                p.emit(memory.lds(stats, Mem(ma)).guarded(valid))
                p.emit(alu.fadd(w, F32.of(stats[0]), nbig))
                p.emit(alu.ex2(w, w))
                oa = p.r("acp_oa")
                p.emit(alu.imad(oa, lane, 8, first))
                with p.loop("acp_k", n, max_count=32) as k:
                    wk, lk = F32.of(p.r("acp_wk")), F32.of(p.r("acp_lk"))
                    p.emit(alu.shfl("IDX", wk, w, k.reg))
                    p.emit(alu.shfl("IDX", lk, F32.of(stats[1]), k.reg))
                    o = p.rvec("acp_o", 2)
                    p.emit(memory.lds(o, Mem(oa)))
                    o2 = p.rvec("acp_o2", 2)
                    p.emit(alu.mov(o2[0], 0))
                    p.emit(alu.mov(o2[1], 0))
                    p.emit(memory.lds(o2, Mem(oa, offset=256)).guarded(wide))
                    p.emit(alu.ffma(den, wk, lk, den))
                    p.emit(alu.ffma(num[0], wk, F32.of(o[0]), num[0]))
                    p.emit(alu.ffma(num[1], wk, F32.of(o[1]), num[1]))
                    p.emit(alu.ffma(num[2], wk, F32.of(o2[0]), num[2]))
                    p.emit(alu.ffma(num[3], wk, F32.of(o2[1]), num[3]))
                    p.emit(alu.iadd3(oa, oa, cb))

            each_group("sum", weigh)
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
