"""The megakernel's decode-attention bodies (sm_90a): the partials of one (KV head, chunk of the cache)
and their combine (`warpy.mega.semantics.attention_partial`, `attention_combine`; the host side and
the design: `docs/megakernel.md`'s "Decode attention").

Attention (opcode 6), on the tensor cores. Its pages by physical number (its wgmma descriptors must
be values ptxas can prove warp-uniform, as the gemm's): 0-1 K (a box of `k_step` cache rows each, the
second only when `k_stages` is 2), 2-3 V likewise (128-byte swizzle; head_dim 128's columns 64-127
half a page on), 4 q (the T·G rows of D as its box lands: row r = t·G + g), 5 the partial (T·G rows
of D + 4 fp32), 6 q as the wgmma's A (64 rows: the tile's, then zeros; 128-byte swizzle), which the
consumers write from page 4 first. Every copy completes on `loaded[slot]`; the order after the
instruction is the identity. Per key block of 64 (`k_step` is whole blocks): S = Q·Kᵀ (`HGMMA.64x64`,
both from shared memory: the rows past T·G compute zeros, never stored), the online softmax in base 2
in the accumulator's registers (a quad of lanes holds a row; -inf where a row does not see the key,
only in a block that some row's limit cuts; exponents relative to the running maximum, or to 0 while
it is -inf), P packed to bf16 pairs and O += P·V (`HGMMA.64x64` with P from registers, V read
MN-major). At head_dim 64 the two consumer warpgroups take alternate blocks and warpgroup 1's (O, m,
l) reach warpgroup 0 through the records, which it merges (M = max(m, m'), weights 2^(m - M)) and
rewrites; at 128 each warpgroup takes every block and 64 of O's columns (an accumulator of all 128
would not fit the interpreter's registers). Records: O (unnormalised), m, l, 0, 0.

Combine (opcode 7). Pages: lids 0-5 the partials of one head's G rows of one token, `k_step` chunks a
box (chunk c of a box, row g at (c·G + g)·(D + 4) fp32), `k_stages` boxes of the six; lid 6 the output
(G rows of D bf16). Warp w takes rows w, w + 8,
...: M = the chunks' largest m, then Σ 2^(m_c - M)·O_c / Σ 2^(m_c - M)·l_c, rounded once to bf16. Its
lanes take 32 chunks at once for M (a warp maximum) and for each chunk's weight 2^(m_c - M); the sums
then walk the chunks in order, each chunk's weight and l shuffled from its lane: the operations and
their order are one lane's walk over the chunks, so the result is the reference's to the bit.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Callable, Optional

from warpy.isa.buffers import SmemBuffer
from warpy.isa.families import alu, control, memory, sync, wgmma
from warpy.isa.families.typed import F32, S32, U32
from warpy.isa.index import Uniform
from warpy.isa.operands import RZ, URZ, Mem, P, R, RVec, UR
from warpy.isa.pipes import wait
from warpy.isa.units.warp import warp_max, warp_reduce
from warpy.isa.units.wgmma import hgmma, hgmma_rs
from warpy.layout import Layout, Swizzle, SwizzledLayout
from warpy.layout.atoms import wgmma_acc_chunk_as_a
from warpy.mega import fields as F
from warpy.mega.semantics import PARTIAL_EXTRA
from warpy.mega.tiling import ATTENTION_KEY_BLOCK, ATTENTION_MAX_BOXES, ATTENTION_MMA_ROWS, COMBINE_MAX_BOXES, PAGE_BYTES

from .attention_common import pack_pairs, reduce4
from .mega_math import pack_bf16
from .mega_ops import Body, MapOp, consumers_done, expect, out_ready, page_addr, phys_addr, store_output

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
    if step % KB or step * d * 2 > PAGE_BYTES:
        return f"decode-attention K boxes of {step} rows (the sm_90a body takes whole blocks of {KB} within a page)"
    span = min(d, SPAN)
    if f["op2.box_16"] * 16 != step * span * 2 or f["op3.box_16"] * 16 != step * span * 2:
        return f"decode-attention K or V boxes that are not k_step rows of {span} columns of one head"
    if rows > ATTENTION_MMA_ROWS:
        return f"decode attention of {rows} query rows a KV head (the sm_90a body's wgmma takes {ATTENTION_MMA_ROWS}: T·G)"
    if f["op1.box_16"] * 16 != rows * d * 2 or rows * d * 2 > PAGE_BYTES:
        return f"decode attention of {rows} query rows whose q box is not those rows within a page"
    if f["op0.box_16"] * 16 != rows * (d + PARTIAL_EXTRA) * 4 or rows * (d + PARTIAL_EXTRA) * 4 > PAGE_BYTES:
        return f"decode attention whose partial of {rows} rows is more than a page (one box)"
    if f["group"] < 1 or rows % f["group"]:
        return f"decode attention of {rows} rows in groups of {f['group']}"
    return None


#: the partial body's pages, by physical number (its wgmma descriptors must be values ptxas can
#: prove warp-uniform, as the gemm's: `kernels/mega_gemm.py`): K boxes 0-1, V boxes 2-3, q as it
#: lands, the partial, q as the wgmma's A (64 rows, 128-byte swizzle, the rows past the tile zeros)
K_PAGE, V_PAGE, Q_PAGE, OUT_PAGE, QA_PAGE = 0, 2, 4, 5, 6
KB = ATTENTION_KEY_BLOCK
SPAN = 64  # the columns of a 128-byte swizzle span (bf16)
ROW_BYTES = 2 * SPAN
PAGE_ROWS = PAGE_BYTES // ROW_BYTES
#: head_dim 128: a box's columns 64-127 land half a page on (at most 128 rows of 128 bytes a half)
HALF = PAGE_BYTES // 2
def _views(ip: Interp) -> tuple[SmemBuffer, SmemBuffer]:
    """The pages seen as K (rows of 64 columns, 128-byte swizzle: the wgmma's K-major B) and as V
    (coordinates (page, column, key), 64 columns: the MN-major B of P·V)."""
    views = ip.decl.get("attention")
    if views is None:
        from .mega_sm90 import PAGES

        if ip.pages.base % 1024:
            raise AssertionError("the pages must be 1024-byte aligned for 128-byte swizzled tiles")
        sw = Swizzle(3, 4, 3)
        k = SmemBuffer("att_k", ip.pages.base, PAGES * PAGE_BYTES,
                       SwizzledLayout(sw, Layout((PAGES, PAGE_ROWS, SPAN), (PAGE_BYTES, ROW_BYTES, 2)), 0), "bf16")
        v = SmemBuffer("att_v", ip.pages.base, PAGES * PAGE_BYTES,
                       SwizzledLayout(sw, Layout((PAGES, SPAN, PAGE_ROWS), (PAGE_BYTES, 2, ROW_BYTES)), 0), "bf16")
        ip.p.buffers.extend([k, v])  # (views of the pages: no memory of their own)
        views = ip.decl["attention"] = (k, v)
    return views  # type: ignore[return-value]


def _phys_r(ip: Interp, page: int, name: str) -> R:
    """A general register holding physical page `page`'s shared address."""
    p = ip.p
    reg, off = p.derive.value_reg("addr", ip.pages.at(page, 0))
    base = p.r(name)
    p.emit(alu.mov(base, reg))
    p.emit(alu.iadd3(base, base, off))
    return base


class _Ctx:
    """What both head-dim paths of the compute step share: the instruction's fields, the pages'
    addresses, this thread's place in the accumulator fragments (rows r0 and r0 + 8 of its
    warpgroup's 64, columns c2, c2 + 1 of each 8) and its rows' causal limits."""

    def __init__(self, ip: Interp, r: Role) -> None:
        p = self.p = ip.p
        self.ip = ip
        self.rows = r.field("tile_m", p.r("att_tm"))
        self.nbox = r.field("k_stages", p.r("att_nbox"))
        self.step = r.field("k_step", p.r("att_step_r"))
        self.kbeg = r.field("k_begin", p.r("att_kbeg"))
        length = r.field("k_end", p.r("att_len"))
        grp = r.field("group", p.r("att_g"))
        causal = p.p("att_causal")
        p.emit(alu.isetp("NE", causal, r.field("causal", p.r("att_causal_f")), 0))
        self.scale = F32.of(r.field("scale", p.r("att_scale")))
        rcp_g = F32.of(p.r("att_rcp_g"))
        p.emit(alu.i2f(rcp_g, U32.of(grp)))
        p.emit(alu.rcp(rcp_g, rcp_g))
        tokens = p.r("att_t")
        _quotient(p, tokens, self.rows, rcp_g, "att_tq")
        base_lim = p.r("att_base_lim")  # the causal limit of token 0: length - T + 1
        p.emit(alu.iadd3(base_lim, length, 1))
        neg_t = p.r("att_neg_t")
        p.emit(alu.imad(neg_t, tokens, -1, RZ))
        p.emit(alu.iadd3(base_lim, base_lim, neg_t))
        self.lim_all = p.r("att_lim_all")  # every row sees the keys below it (the first row's limit)
        p.emit(alu.sel(self.lim_all, base_lim, length, causal))
        self.ctid = r.ctid
        self.qbase = _phys_r(ip, Q_PAGE, "att_qbase")
        self.obase = _phys_r(ip, OUT_PAGE, "att_obase")
        t, lane, w = p.r("att_t128"), p.r("att_lane"), p.r("att_w")
        p.emit(alu.lop3(t, r.ctid, 127, RZ, 0xC0))
        p.emit(alu.lop3(lane, t, 31, RZ, 0xC0))
        p.emit(alu.shf_r(w, t, 5))
        wg = p.r("att_wg")
        p.emit(alu.shf_r(wg, r.ctid, 7))
        self.wg_u = p.ur("att_wg_u")
        p.emit(alu.r2ur(self.wg_u, wg))
        self.wg0 = p.p("att_wg0")
        p.emit(alu.isetp("EQ", self.wg0, wg, 0))
        self.r0 = p.r("att_r0")
        p.emit(alu.shf_r(self.r0, lane, 2))
        p.emit(alu.imad(self.r0, w, 16, self.r0))
        self.c2 = p.r("att_c2")
        p.emit(alu.lop3(self.c2, lane, 3, RZ, 0xC0))
        p.emit(alu.shf_l(self.c2, self.c2, 1))
        # per row h of the thread: whether it is a row of the tile, and its limit less c2 (a column
        # c of a block at key position pos is seen where c < lim - pos - c2)
        self.inrow: list[P] = []
        self.lim: list[R] = []
        for h in range(2):
            row = p.r(f"att_row{h}")
            p.emit(alu.iadd3(row, self.r0, 8 * h))
            inr = p.p(f"att_in{h}")
            p.emit(alu.isetp("LT", inr, row, self.rows))
            tok = p.r("att_tok")
            _quotient(p, tok, row, rcp_g, "att_rq")
            lim = p.r(f"att_lim{h}")
            p.emit(alu.mov(lim, length))
            p.emit(alu.iadd3(lim, base_lim, tok).guarded(causal))
            negc = p.r("att_negc")
            p.emit(alu.imad(negc, self.c2, -1, RZ))
            p.emit(alu.iadd3(lim, lim, negc))
            self.inrow.append(inr)
            self.lim.append(lim)
        self.nblk = p.r("att_nblk")  # key blocks a box
        p.emit(alu.shf_r(self.nblk, self.step, KB.bit_length() - 1))
        self.neg_inf = F32.of(p.r("att_neg_inf"))
        p.emit(alu.mov(self.neg_inf, NEG_INF))


def _neg_safe(c: _Ctx, big: F32, name: str) -> F32:
    """-big where big is finite, else 0 (exponents taken relative to it never form -inf - -inf)."""
    p = c.p
    none = p.p("att_none")
    p.emit(alu.fsetp("EQ", none, big, c.neg_inf))
    mu = F32.of(p.r(f"{name}_nmu"))
    p.emit(alu.fsel(mu, F32.of(RZ), big, none))
    p.emit(alu.lop3(mu, mu, 0x80000000, RZ, 0x3C))  # -mu
    return mu


def _row_values(n: int, h: int) -> list[int]:
    """The registers of row h (0: the thread's r0, 1: r0 + 8) in an m64nN accumulator."""
    return [v for v in range(n // 2) if (v // 2) % 2 == h]


def _col(v: int) -> int:
    """Accumulator value v's column, less c2."""
    return 8 * (v // 4) + v % 2


def _partials(c: _Ctx, d: int) -> None:
    """The consumers' key blocks of the chunk at head_dim d: per block S = Q·Kᵀ (RS form: q from
    registers, K's block from its page), the online softmax, O += P·V (RS form: P in registers, V
    MN-major). At head_dim 64 the warpgroups split the blocks (warpgroup w takes blocks w, w + 2,
    ... of box 0 and 1 - w, 3 - w, ... of box 1), then warpgroup 1's (O, m, l) go through the
    records to warpgroup 0, which merges them with its own and writes the tile's records. At 128
    (an accumulator of every column would not fit the registers) each warpgroup takes every block
    and 64 of O's columns (S is computed twice; m and l are the same in both)."""
    p = c.p
    kview, vview = _views(c.ip)
    split = d == SPAN
    steps = d // 16
    rec = (d + PARTIAL_EXTRA) * 4
    # q as the wgmma's A: its rows from the landed box in 16-byte chunks to their swizzled places
    # (columns 64-127 of head_dim 128 8 KiB on), the rows past the tile zeros, for the async proxy
    chunks = ATTENTION_MMA_ROWS * d // 8  # (a multiple of the 256 threads)
    qt = _phys_r(c.ip, QA_PAGE, "att_qt")
    ch, row, col, src, dst, t = (p.r(f"att_x{n}") for n in ("ch", "row", "col", "src", "dst", "t"))
    val = p.rvec("att_xv", 4)
    inside = p.p("att_xin")
    for k in range(chunks // 256):
        p.emit(alu.iadd3(ch, c.ctid, 256 * k))
        p.emit(alu.shf_r(row, ch, (d // 8).bit_length() - 1))  # chunk = row · D/8 + col
        p.emit(alu.lop3(col, ch, d // 8 - 1, RZ, 0xC0))
        p.emit(alu.isetp("LT", inside, row, c.rows))
        p.emit(alu.imad(src, row, 2 * d, c.qbase))
        p.emit(alu.imad(src, col, 16, src))
        for e in range(4):
            p.emit(alu.mov(val[e], 0))
        p.emit(memory.lds(val, Mem(src)).guarded(inside))
        # (row, col) -> (col / 8) · 8 KiB + row · 128 + ((col % 8) ^ (row % 8)) · 16
        p.emit(alu.lop3(t, row, 7, RZ, 0xC0))
        p.emit(alu.lop3(t, t, col, RZ, 0x3C))
        p.emit(alu.lop3(t, t, 7, RZ, 0xC0))
        p.emit(alu.imad(dst, t, 16, qt))
        p.emit(alu.imad(dst, row, ROW_BYTES, dst))
        p.emit(alu.shf_r(t, col, 3))
        p.emit(alu.imad(dst, t, ATTENTION_MMA_ROWS * ROW_BYTES, dst))
        p.emit(memory.sts(Mem(dst), val))
    p.emit(sync.fence_proxy_async())
    p.emit(sync.bar_sync(1, 256))
    s = p.rvec("att_s", KB // 2)
    pf = p.rvec("att_pf", KB // 4)
    o = p.rvec("att_o", SPAN // 2)
    mx = [F32.of(p.r(f"att_mx{h}")) for h in range(2)]
    ls = [F32.of(p.r(f"att_l{h}")) for h in range(2)]
    for i in range(SPAN // 2):
        p.emit(alu.mov(o[i], 0))
    for h in range(2):
        p.emit(alu.mov(mx[h], NEG_INF))
        p.emit(alu.mov(ls[h], 0))
    ub, uj = p.ur("att_ub"), p.ur("att_uj")
    box_rows = PAGE_ROWS if d == SPAN else HALF // ROW_BYTES  # the most rows a box has (its columns' span)
    box, blk = Uniform("att_ub", ub, MAX_KV_BOXES), Uniform("att_uj", uj, box_rows // KB)
    wgi = Uniform("att_wg_u", c.wg_u, 2)
    p.emit(alu.umov(ub, 0))
    stride = 2 if split else 1  # (blocks a warpgroup steps)
    pos = p.r("att_pos")  # the block's first cache row
    with p.loop(f"att_box{d}", c.nbox, max_count=MAX_KV_BOXES) as bl:
        if split:
            p.emit(alu.uiadd3(uj, c.wg_u, ub))
            p.emit(alu.ulop3(uj, uj, 1, URZ, 0xC0))
        else:
            p.emit(alu.umov(uj, 0))
        j = p.r("att_j")
        p.emit(alu.mov(j, uj))
        cnt = p.r("att_cnt")  # this warpgroup's blocks of the box: j, j + stride, ... below nblk
        p.emit(alu.iadd3(cnt, c.nblk, stride - 1))
        p.emit(alu.imad(cnt, j, -1, cnt))
        p.emit(alu.shf_r(cnt, cnt, stride - 1))
        p.emit(alu.imad(pos, bl.reg, c.step, c.kbeg))
        p.emit(alu.imad(pos, j, KB, pos))
        none = p.p("att_no_blk")
        p.emit(alu.isetp("EQ", none, cnt, 0))
        skip = p.fresh_label("ATT_BOX_DONE")
        p.emit(control.bra(skip).guarded(none))
        with p.loop(f"att_blk{d}", cnt, max_count=box_rows // KB // stride):
            # S = Q·Kᵀ over the block
            p.emit(wgmma.warpgroup_arrive())
            for kk in range(steps):
                half = (16 * kk) // SPAN
                qtile = kview.at(QA_PAGE, ATTENTION_MMA_ROWS * half, (16 * kk) % SPAN)
                kt = kview.at(box + K_PAGE, blk * KB + (HALF // ROW_BYTES) * half, (16 * kk) % SPAN)
                hgmma(p, s, qtile, kt, KB, kk > 0, end=kk == steps - 1)
            p.emit(wgmma.wgmma_commit())
            p.emit(wgmma.warpgroup_wait(0))
            _softmax(c, d, s, pf, o, mx, ls, pos)
            # O += P·V
            p.emit(wgmma.warpgroup_arrive())
            for kk in range(KB // 16):  # (head_dim 128: this warpgroup's columns, half a page on for 1)
                vt = vview.at(box + V_PAGE, 0, blk * KB + 16 * kk + (0 if split else (HALF // ROW_BYTES) * wgi))
                hgmma_rs(p, o, pf.sub(4 * kk, 4), wgmma_acc_chunk_as_a(KB, kk), vt, SPAN, True, end=kk == KB // 16 - 1)
            p.emit(wgmma.wgmma_commit())
            # (waited for here: overlapping it with the next block's S = Q·Kᵀ would keep S, P and O
            # live at once, more registers than the interpreter has)
            p.emit(wgmma.warpgroup_wait(0))
            p.emit(alu.uiadd3(uj, uj, stride))
            p.emit(alu.iadd3(pos, pos, stride * KB))
        p.label(skip)
        p.emit(alu.uiadd3(ub, ub, 1))
    for h in range(2):
        warp_reduce(p, ls[h], "sum", width=4, tmp=f"att_xl{h}")
    # the records' addresses of the thread's rows (ra) and its columns of them (ca: head_dim 128,
    # warpgroup w's columns from 64 w)
    ra, ca = [], []
    for h in range(2):
        a = p.r(f"att_ra{h}")
        p.emit(alu.iadd3(a, c.r0, 8 * h))
        p.emit(alu.imad(a, a, rec, c.obase))
        ra.append(a)
        b = p.r(f"att_ca{h}")
        p.emit(alu.imad(b, c.c2, 4, a))
        if not split:
            p.emit(alu.iadd3(b, b, 4 * SPAN).guarded(~c.wg0))
        ca.append(b)

    def write(stats: bool) -> None:
        """This thread's O values of its rows in the tile, and (lanes of column 0, with `stats`)
        each row's m, l, 0, 0 after the row's D values."""
        for h in range(2):
            for v in _row_values(SPAN, h)[::2]:
                p.emit(memory.sts(Mem(ca[h], offset=4 * _col(v)), o.sub(v, 2)).guarded(c.inrow[h]))
            if not stats:
                continue
            st = p.rvec("att_st", 4)
            p.emit(alu.mov(st[0], mx[h]))
            p.emit(alu.mov(st[1], ls[h]))
            p.emit(alu.mov(st[2], 0))
            p.emit(alu.mov(st[3], 0))
            put = p.p("att_put")
            p.emit(alu.isetp("EQ", put, c.c2, 0, c=c.inrow[h]))
            p.emit(memory.sts(Mem(ra[h], offset=4 * d), st).guarded(put))

    if not split:  # (m and l: warpgroup 0's)
        with p.when(c.wg0):
            write(True)
        with p.when(~c.wg0):
            write(False)
        return
    # warpgroup 1's (O, m, l) to the records, warpgroup 0 merges them: M = max(m, m'), O and l
    # weighed by 2^(m - M) and 2^(m' - M) (M = -inf taken as 0); the same thread of each holds the
    # same rows and columns
    with p.when(~c.wg0):
        write(True)
    p.emit(sync.bar_sync(1, 256))
    with p.when(c.wg0):
        for h in range(2):
            st = p.rvec("att_st2", 2)
            p.emit(alu.mov(st[0], NEG_INF))
            p.emit(alu.mov(st[1], 0))
            p.emit(memory.lds(st, Mem(ra[h], offset=4 * d)).guarded(c.inrow[h]))
            mo, lo = F32.of(st[0]), F32.of(st[1])
            big = F32.of(p.r("att_big"))
            p.emit(alu.fmax(big, mx[h], mo))
            nmu = _neg_safe(c, big, "att_mg")
            wa, wb = F32.of(p.r("att_wa")), F32.of(p.r("att_wb"))
            p.emit(alu.fadd(wa, mx[h], nmu))
            p.emit(alu.ex2(wa, wa))
            p.emit(alu.fadd(wb, mo, nmu))
            p.emit(alu.ex2(wb, wb))
            p.emit(alu.fmul(ls[h], ls[h], wa))
            p.emit(alu.ffma(ls[h], lo, wb, ls[h]))
            p.emit(alu.mov(mx[h], big))
            theirs = p.rvec("att_oth", 2)
            for v in _row_values(SPAN, h)[::2]:
                p.emit(alu.mov(theirs[0], 0))
                p.emit(alu.mov(theirs[1], 0))
                p.emit(memory.lds(theirs, Mem(ca[h], offset=4 * _col(v))).guarded(c.inrow[h]))
                for e in range(2):
                    x = F32.of(o[v + e])
                    p.emit(alu.fmul(x, x, wa))
                    p.emit(alu.ffma(x, F32.of(theirs[e]), wb, x))
        write(True)


def _softmax(c: _Ctx, d: int, s: RVec, pf: RVec, o: RVec, mx: list[F32], ls: list[F32], pos: R) -> None:
    """The online softmax of a block's S (64 keys from cache row `pos`) in base 2: -inf where a row
    does not see the key (only in a block some row's limit cuts), the rows' maxima (a quad of lanes
    holds a row), exponents relative to the new maximum (0 while it is -inf), l and O rescaled by
    2^(old - new), P packed to bf16 pairs (the RS form's A fragments)."""
    p = c.p
    cut = p.p("att_cut")  # some row of the tile does not see every key of the block
    end = p.r("att_bend")
    p.emit(alu.iadd3(end, pos, KB))
    p.emit(alu.isetp("GT", cut, end, c.lim_all))
    with p.when(cut):
        for h in range(2):
            rem = p.r("att_rem")
            p.emit(alu.imad(rem, pos, -1, c.lim[h]))
            keep = p.p("att_keep")
            for v in _row_values(KB, h):
                p.emit(alu.isetp("GT", keep, rem, _col(v), unsigned=False))
                x = F32.of(s[v])
                p.emit(alu.fsel(x, x, c.neg_inf, keep))
    for h in range(2):
        vals = [F32.of(s[v]) for v in _row_values(KB, h)]
        chains = [F32.of(p.r(f"att_mc{k}")) for k in range(4)]
        m = reduce4(p, alu.fmax, chains, vals)
        warp_reduce(p, m, "max", width=4, tmp=f"att_xm{h}")
        cand = F32.of(p.r("att_cand"))
        p.emit(alu.fmul(cand, m, c.scale))
        p.emit(alu.fmax(cand, cand, mx[h]))
        nmu = _neg_safe(c, cand, "att_sm")
        alpha = F32.of(p.r(f"att_alpha{h}"))
        p.emit(alu.fadd(alpha, mx[h], nmu))
        p.emit(alu.ex2(alpha, alpha))
        p.emit(alu.mov(mx[h], cand))
        for x in vals:
            p.emit(alu.ffma(x, x, c.scale, nmu))
            p.emit(alu.ex2(x, x))
        sums = [F32.of(p.r(f"att_sc{k}")) for k in range(4)]
        total = reduce4(p, alu.fadd, sums, vals)
        p.emit(alu.ffma(ls[h], ls[h], alpha, total))
        for v in _row_values(SPAN, h):
            x = F32.of(o[v])
            p.emit(alu.fmul(x, x, alpha))
    pack_pairs(p, s, pf, KB // 4)


class Attention(Body):
    opcode: int = F.ATTENTION
    name: str = "attention"
    pages: int = 7
    release: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6)
    #: pages addressed by physical number; the order after it is the identity
    physical_pages: bool = True

    def refuse(self, fields: dict[str, int]) -> Optional[str]:
        return refuse_attention(fields)

    def declare(self, ip: Interp) -> None:
        _views(ip)

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
            q.copy(phys_addr(ip, Q_PAGE, "att_qpage"), ip.loaded.at(r.cons.ring), guard=r.leader)
            p.emit(control.bra(done))
        self._copies(ip, r, with_q=True)
        p.label(done)

    def _copies(self, ip: Interp, r: Role, with_q: bool) -> None:
        """The pages, the arrival on `loaded[slot]` with the bytes of q and the chunk's K and V boxes,
        and the copies (q's only `with_q`): box b of K to page K_PAGE + b, of V to V_PAGE + b, each
        box's columns 64-127 (head_dim 128) half a page on."""
        p = ip.p
        nbox = r.field("k_stages", p.r("att_nbox"))
        wide = p.p("att_wide_l")
        p.emit(alu.isetp("GT", wide, r.field("tile_n", p.r("att_d_l")), SPAN))
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
        p.emit(alu.shf_l(total, total, 1).guarded(wide))
        qb = p.r("att_qb")
        p.emit(alu.mov(qb, q.bytes))
        p.emit(alu.iadd3(total, total, qb))
        for pg in range(K_PAGE, OUT_PAGE):
            r.wait_pid(pg)
        expect(ip, r, total)
        bar = ip.loaded.at(r.cons.ring)
        if with_q:
            q.copy(phys_addr(ip, Q_PAGE, "att_qpage"), bar, guard=r.leader)
        col = p.ur("att_col")
        p.emit(alu.umov(col, SPAN))
        two = p.p("att_two")
        p.emit(alu.isetp("GE", two, nbox, 2))
        for b in range(MAX_KV_BOXES):
            with p.when(two) if b else contextlib.nullcontext():
                if b:
                    _shift_rows(ip, r, 2, kk, step)
                    _shift_rows(ip, r, 3, vv, step)
                kk.copy(phys_addr(ip, K_PAGE + b, f"att_k{b}"), bar, guard=r.leader)
                vv.copy(phys_addr(ip, V_PAGE + b, f"att_v{b}"), bar, guard=r.leader)
                with p.when(wide):
                    kk.copy(phys_addr(ip, K_PAGE + b, f"att_k{b}h", off=HALF), bar, col, guard=r.leader)
                    vv.copy(phys_addr(ip, V_PAGE + b, f"att_v{b}h", off=HALF), bar, col, guard=r.leader)

    def compute(self, ip: Interp, r: Role) -> None:
        p = ip.p
        wait(p, ip.loaded.at(r.cons.ring), r.cons.ring.parity)
        r.wait_pid(OUT_PAGE)
        r.wait_pid(QA_PAGE)
        p.label(p.fresh_label("ATT_C_BEGIN"))  # (where the compute step starts: for instruction counts)
        c = _Ctx(ip, r)
        wide = p.p("att_wide")
        p.emit(alu.isetp("GT", wide, r.field("tile_n", p.r("att_d")), SPAN))
        d128, done = p.fresh_label("ATT_D128"), p.fresh_label("ATT_DONE")
        p.emit(control.bra(d128).guarded(wide))
        _partials(c, 64)
        p.emit(control.bra(done))
        p.label(d128)
        _partials(c, 128)
        p.label(done)
        p.label(p.fresh_label("ATT_C_END"))
        consumers_done(ip)
        for pg in (*range(K_PAGE, OUT_PAGE), QA_PAGE):
            r.release_pid(pg, r.cleader)
        out_ready(ip, r)

    def store(self, ip: Interp, r: Role) -> None:
        store_output(ip, r, OUT_PAGE, physical=True)


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
