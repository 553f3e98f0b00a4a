"""The megakernel's gemm tile on sm_100a: out = act(x·Wᵀ + bias) + residual for one tile_m x tile_n
box of the output, K whole, bf16 in, fp32 accumulation in the pair's tensor memory
(`tcgen05.mma.cta_group::2`, `UTCHMMA.2CTA`, M = tile_m, N = tile_n), rounded once to bf16.

The pair: CTA r holds rows [r tile_m/2, (r + 1) tile_m/2) of the tile's x (the host's A box is
tile_m/2 rows: `Role.field` gives CTA 1 its half's origin) and the tile's W rows
[r tile_n/2, (r + 1) tile_n/2) at the same shared address, as the pair MMA reads B (the host's B
box is tile_n/2 rows; CTA 1's copy starts tile_n/2 rows further). Each CTA's tensor memory gets its rows of the product: M = 256
one row a lane, N columns; M = 128 the folded layout (lanes 0-63 the first N/2 columns of the
CTA's 64 rows, lanes 64-127 the rest, `warpy.layout.atoms.tmem_accumulator`).

Pages (7 of 32 KiB in each CTA), as the sm_90a gemm lays them out:

| lids | holds | written by | released by |
|---|---|---|---|
| 0-4 | the stage ring: a stage is one page, this CTA's `k_boxes` A boxes (ar x 64 K each) then its `k_boxes` B boxes (tile_n/2 x 64 K), 128-byte swizzle | the loader (TMA, `.2CTA`: completing on CTA 0's stage barrier) | the consumers, as soon as the MMAs are done (the accumulator is full), before they read it |
| 5 | the epilogue's operands: the bias box, then the residual box (128-byte aligned) | the loader | the consumers, after the epilogue |
| 6 | the output, this CTA's rows as the output map's box lands | the consumers | the storer, after the TMA store's writes |

The ring (`g100_stage`, 5 stages) lives across instructions: its position is the loader's (both
CTAs) and the launcher's (CTA 0); stage g of the launch is barrier g mod 5, the page of an
instruction's k-th stage is lid k mod 5. Full: CTA 0's barrier, one arrival (CTA 0's loader, with
both CTAs' bytes) and the two CTAs' copies; empty: each CTA's own, one commit
(`UTCBAR.2CTA.MULTICAST` to both) when the MMAs that read the stage are done.

CTA 0's launcher, holding the token: per stage, wait full, `tcgen05.fence::after_thread_sync`, four
`UTCHMMA.2CTA` a K box (K 16 each; the first of the tile overwrites), commit to the stage's empty
barriers; after the last, commit to both CTAs' `g100_acc` (the accumulator is full).

**Decode tiles** (A of fewer than 64 rows: T <= 16 tokens, `warpy.mega.tiling.gemm_pair_a_rows`):
a 128-row tile whose A box is A's rows rounded up to 8 (ar), so that a stage holds `k_boxes` K boxes
(`gemm_pair_k_boxes`, up to 12: the page mostly weight), loaded by one copy an operand where K is
whole K boxes (`warpy.mega.encode._k_chunk`'s chunked maps, as on sm_90a) or a copy a box. The pair
MMA still reads tile_m/2 = 64 rows from each CTA's A box start: what follows a short box is the
stage's next A boxes, then its B boxes, all written by the stage's own copies; those products land
in accumulator rows past A's edge (CTA 0's rows >= T, all of CTA 1's: its A boxes are zero-filled
past the tensor), which the output's TMA store clips. The consumers' code is the full tiles'; the
code paths are per (tile_m, tile_n, ar). docs/megakernel.md ("The decode path on sm_100a") says why
this and not swap-AB.

The consumers of each CTA (one code path per tile shape of the launch, `Launch.gemm_tiles`): wait
`g100_acc` (parity: the gemms this role has run), fence after, `LDTM` their lanes' columns into
registers, `tcgen05.wait::ld`, `tcgen05.fence::before_thread_sync`, the consumers' barrier, and one
thread returns the token (CTA 1's to CTA 0, remote): the next gemm's MMAs may now overwrite the
accumulator while this one's epilogue runs from registers: + bias, the activation
(`kernels.mega_math.Activation`: relu, silu, gelu-tanh), + residual (each broadcast by its box's
strides), F2FP, STS into the output page. The ring's pages
go to the next instruction as soon as the accumulator is full, before it is read: the next gemm's
copies never wait for this one's reads, so only the token orders its MMAs after them (in both CTAs:
CTA 1's return is what orders CTA 0's MMAs after CTA 1's reads).

Refused at plan time (`refuse`, one line): x·W (the megakernel reads W as (N, K), torch's Linear
layout); a tile
whose stage (tile_m/2 + tile_n/2 rows of 128 bytes) or output box does not fit a page; an A box, a
stage's K boxes or copies other than the rule's.
"""

from __future__ import annotations

from typing import Any, Optional

import attrs

from warpy.isa.buffers import BarrierArray, SmemBuffer
from warpy.isa.families import alu, control, memory, sync, tcgen05
from warpy.isa.families._util import ins
from warpy.isa.families.typed import F32
from warpy.isa.operands import RZ, URZ, Mem, P, R, RVec, UR, URVec
from warpy.isa.pipes import ConsumerEnd, Pipe, ProducerEnd, wait
from warpy.isa.units.dispatch import dispatch
from warpy.isa.units.tcgen05 import utchmma
from warpy.isa.units.tma import tma_load_at
from warpy.layout import Layout, Swizzle, SwizzledLayout
from warpy.layout.desc import umma_idesc
from warpy.mega import fields as F
from warpy.mega.tiling import GEMM_MAX_K_BOXES, gemm_pair_k_boxes

from .mega_common import PAGE_BYTES, PAGES
from .mega_math import Activation
from .mega_ops import branch_on_fields, consumers_done, expect, out_ready
from .mega_sm100_ops import descriptor, store_output

RING = 5
EPI = 5
OUT = 6
ROW_BYTES = 128  # a swizzled row: 64 bf16 of K
PAGE_ROWS = PAGE_BYTES // ROW_BYTES
K_STEP = 64
MAX_STAGES = 1 << 16


def tile_ok(tm: int, tn: int) -> Optional[str]:
    """Why the sm_100a gemm body cannot compute a tm x tn tile, or None: a pair MMA's M (128, 256)
    and N (16..256, steps of 16), a stage (this CTA's A box and its half of the B rows, one K box)
    and the output box in a page."""
    if tm not in (128, 256) or not (16 <= tn <= 256 and tn % 16 == 0):
        return f"a gemm tile of {tm}x{tn} (the sm_100a pair MMA takes 128 or 256 rows and 16..256 columns in 16s)"
    if (tm // 2 + tn // 2) * ROW_BYTES > PAGE_BYTES:
        return f"a gemm tile of {tm}x{tn}, whose stage ({tm // 2} + {tn // 2} rows of 64 K) does not fit a page"
    if (tm // 2) * tn * 2 > PAGE_BYTES:
        return f"a gemm tile of {tm}x{tn}, whose output box ({tm // 2} x {tn}) does not fit a page"
    return None


def epi_offset(bias_bytes: int) -> int:
    """Where the residual box lands in the epilogue page: after the bias box, 128-byte aligned."""
    return -(-bias_bytes // 128) * 128


@attrs.frozen
class Shared:
    """What the gemm body declares once: its stage ring, the accumulator-full barrier, and a view
    of the pages as 128-byte swizzled rows (what the MMA descriptors are derived from)."""

    stage: Pipe
    acc: BarrierArray
    view: SmemBuffer


def _shared(ip: Any) -> Shared:
    g = ip.decl["gemm"]
    assert isinstance(g, Shared)
    return g


def _mask(p: Any, name: str, value: int) -> UR:
    u: UR = p.ur(name)
    p.emit(alu.umov(u, value))
    return u


class Gemm:
    opcode: int = F.GEMM
    name: str = "gemm"
    pages: int = PAGES
    release: tuple[int, ...] = tuple(range(PAGES))
    tmem: bool = True

    # -- host ------------------------------------------------------------------------------------
    def refuse(self, fields: dict[str, int]) -> Optional[str]:
        tm, tn = fields["tile_m"], fields["tile_n"]
        if not fields["b_kmajor"]:
            return ("gemm x·W (W as (K, N), N contiguous): the megakernel reads W as (N, K), torch's Linear layout; "
                    "use linear (x·Wᵀ)")
        why = tile_ok(tm, tn)
        if why:
            return why
        half = tm // 2
        per_copy = max(1, fields["k_step"] // K_STEP)  # K boxes a copy moves (chunked maps: a stage's)
        ar = fields["op1.box_16"] * 16 // (ROW_BYTES * per_copy)  # a CTA's A box rows (`gemm_pair_a_rows`)
        kb = gemm_pair_k_boxes(tm, tn, ar)
        if ar != half and not (tm == 128 and ar % 8 == 0 and 8 <= ar < half and ar + kb * (tn // 2) >= half):
            return (f"a gemm A box of {ar} rows for a {tm}x{tn} tile (the body takes {half} a CTA, or 8k < 64 for "
                    f"128-row decode tiles)")
        if fields["k_step"] not in (K_STEP, K_STEP * kb) or fields["k_boxes"] != kb:
            return (f"a gemm stage of {fields['k_boxes']} boxes of K, copies of K {fields['k_step']} (the body takes "
                    f"{kb} boxes of {K_STEP}, copied one or all at a time, for a {tm}x{tn} tile with {ar}-row A boxes)")
        k_range = fields["k_end"] - fields["k_begin"]
        if not 0 < k_range <= K_STEP * MAX_STAGES or fields["k_stages"] != -(-k_range // (K_STEP * kb)):
            return f"a gemm K range of {k_range} in {fields['k_stages']} stages"
        for k, rows in ((1, ar), (2, tn // 2)):
            if (fields[f"op{k}.axes"] & 7) != F.AXIS_K:
                return f"gemm operand {k} whose innermost map dimension is not K"
            if fields[f"op{k}.box_16"] * 16 != rows * ROW_BYTES * per_copy:
                return f"gemm operand {k}'s box of {fields[f'op{k}.box_16'] * 16} bytes (the body takes {rows} rows of K 64)"
        if fields["op0.col_stride"] != 1:
            return "a gemm output whose last dimension is 1"
        epi = epi_offset(fields["op3.box_16"] * 16) if fields["bias"] else 0
        if fields["residual"]:
            epi += fields["op4.box_16"] * 16
        if epi > PAGE_BYTES:
            return f"a gemm epilogue whose bias and residual boxes take {epi} bytes, more than a page"
        return None

    # -- declarations and per-role state ---------------------------------------------------------
    def declare(self, ip: Any) -> None:
        p = ip.p
        stage = p.pipe("g100_stage", RING, fills=1, frees=1)
        acc = p.barriers("g100_acc", 1, 1)
        lay = SwizzledLayout(Swizzle(3, 4, 3), Layout((PAGES, PAGE_ROWS, 64), (PAGE_BYTES, ROW_BYTES, 2)), 0)
        if ip.pages.base % 1024:
            raise AssertionError("the pages must be 1024-byte aligned for 128-byte swizzled tiles")
        view = SmemBuffer("g100_rows", ip.pages.base, PAGES * PAGE_BYTES, lay, "bf16")
        p.buffers.append(view)  # a view of the pages (no memory of its own)
        ip.decl["gemm"] = Shared(stage, acc, view)

    def start(self, ip: Any, r: Any) -> None:
        p = ip.p
        g = _shared(ip)
        if r.name == "loader":
            r.state["gemm"] = g.stage.producer("g100_ld")
        elif r.name == "launcher":
            r.state["gemm"] = g.stage.consumer("g100_mma")
        elif r.name == "consumers":
            n = p.r("g100_count")  # the gemms this role has run: the accumulator barrier's phase
            p.emit(alu.mov(n, 0))
            r.state["gemm"] = n
            ip.read_tmem_base()

    # -- loader (both CTAs) ----------------------------------------------------------------------------
    def load(self, ip: Any, r: Any) -> None:
        """Per stage: its ring slot empty, its page free (first use), CTA 0 arms the stage's full
        barrier with both CTAs' bytes, then `copies` copies of each operand: A's box i at i x its
        bytes, B's after the stage's A boxes. A copy moves K `k_step`: one K box, or a stage's
        `k_boxes` at once through a chunked map (`warpy.mega.encode._k_chunk`: K within a box, rows,
        K boxes[, layer]). Only the loop's state stays live across it (the producer warps have 40
        registers): the rest is read again from the slot where it is used."""
        p = ip.p
        ring = r.state["gemm"]
        assert isinstance(ring, ProducerEnd)
        ns = r.field("k_stages", p.r("g100_stages"))
        copies = self.copies(ip, r, p.r("g100_copies"))
        kcol = r.field("k_begin", p.r("g100_kcol"))  # the K of the next copy
        lid = p.r("g100_lid")
        p.emit(alu.mov(lid, 0))
        zero = r.zero
        with p.loop("g100_k", ns, max_count=MAX_STAGES) as k:
            pid = r.pid_at(lid, "g100_pid")
            with ring.stage():
                ring.wait_empty()  # this CTA's copy of the stage: the MMAs that read it are done
                first = p.p("g100_first_use")
                p.emit(alu.isetp("LT", first, k.reg, RING))
                with p.when(first):  # the page's first stage in this instruction
                    r.wait_pid(pid)
                with p.when(r.rank0):
                    tx = self.pair_bytes(ip, r, p.r("g100_tx"))  # both CTAs' copies of one box pair
                    if ip.fault != "decode-tx":  # seeded: a stage's bytes one pair's, whatever it copies
                        p.emit(alu.imad(tx, tx, copies, RZ))
                    p.emit(alu.shf_l(tx, tx, 1))  # both CTAs' copies complete on CTA 0's barrier
                    p.derive.emit_at(ring.full, lambda m: sync.arrive_expect_tx(m, tx), guard=r.leader)
                page = ip.pages.at(pid, 0)
                with p.loop("g100_box", copies, max_count=GEMM_MAX_K_BOXES) as i:
                    off = self.box_bytes(ip, r, 1, p.r("g100_off"))
                    p.emit(alu.imad(off, off, i.reg, RZ))  # A's box i
                    self.copy(ip, r, 1, page, ring, kcol, False, zero, 0, off)
                    off = self.box_bytes(ip, r, 1, off)
                    p.emit(alu.imad(off, off, copies, RZ))  # B's box i, after the stage's A boxes
                    bb = self.box_bytes(ip, r, 2, p.r("g100_bb"))
                    p.emit(alu.imad(off, bb, i.reg, off))
                    self.copy(ip, r, 2, page, ring, kcol, True, zero, 1, off)
                    kstep = r.field("k_step", p.r("g100_kstep"))
                    p.emit(alu.iadd3(kcol, kcol, kstep))
            wrap = p.p("g100_wrap")
            p.emit(alu.iadd3(lid, lid, 1))
            p.emit(alu.isetp("EQ", wrap, lid, RING))
            p.emit(alu.mov(lid, 0).guarded(wrap))
        # the epilogue's operands, into their page, completing on loaded[slot]
        bias_p, res_p = self.flags(ip, r)
        r.wait_page(EPI)
        nb, nr = p.r("g100_bias_bytes"), p.r("g100_res_bytes")
        r.field("op3.box_16", nb)
        r.field("op4.box_16", nr)
        p.emit(alu.mov(nb, 0).guarded(~bias_p))
        p.emit(alu.mov(nr, 0).guarded(~res_p))
        p.emit(alu.imad(nb, nb, 16, RZ))
        p.emit(alu.imad(nr, nr, 16, RZ))
        total = p.r("g100_epi_bytes")
        p.emit(alu.iadd3(total, nb, nr))
        expect(ip, r, total)
        epi = r.page(EPI)
        with p.when(bias_p):
            self.copy_plain(ip, r, 3, epi, None)
        with p.when(res_p):
            off = p.r("g100_res_off")  # epi_offset(bias bytes)
            p.emit(alu.iadd3(off, nb, 127))
            p.emit(alu.lop3(off, off, 0xFFFFFF80, RZ, 0xC0))
            self.copy_plain(ip, r, 4, epi, off)

    def copies(self, ip: Any, r: Any, dst: R) -> R:
        """Copies of each operand a stage: `k_boxes`, or 1 where a copy moves them all (`k_step` >
        one K box: chunked maps)."""
        p = ip.p
        r.field("k_boxes", dst)
        kstep = r.field("k_step", p.r("g100_kstep"))
        chunked = p.p("g100_chunked")
        p.emit(alu.isetp("NE", chunked, kstep, K_STEP))
        p.emit(alu.mov(dst, 1).guarded(chunked))
        return dst

    def box_bytes(self, ip: Any, r: Any, k: int, dst: R) -> R:
        """Bytes of one copy of operand k."""
        r.field(f"op{k}.box_16", dst)
        ip.p.emit(alu.imad(dst, dst, 16, RZ))
        return dst

    def pair_bytes(self, ip: Any, r: Any, dst: R) -> R:
        """Bytes of one copy of A and one of B."""
        p = ip.p
        self.box_bytes(ip, r, 1, dst)
        bb = self.box_bytes(ip, r, 2, p.r("g100_bb"))
        p.emit(alu.iadd3(dst, dst, bb))
        return dst

    def flags(self, ip: Any, r: Any) -> tuple[P, P]:
        p = ip.p
        has_bias, has_res = r.field("bias", p.r("g100_has_bias")), r.field("residual", p.r("g100_has_res"))
        bias_p, res_p = p.p("g100_bias"), p.p("g100_res")
        p.emit(alu.isetp("NE", bias_p, has_bias, 0))
        p.emit(alu.isetp("NE", res_p, has_res, 0))
        return bias_p, res_p

    def copy(self, ip: Any, r: Any, k: int, dst: Any, ring: ProducerEnd, kcol: R, half: bool, zero: UR,
             nrow_dim: int, offset: R) -> None:
        """Operand k's box at K `kcol` into `dst` + `offset` bytes, a `.2CTA` copy completing on CTA
        0's stage barrier; with `half` (B) CTA 1's box is tile_n / 2 rows further along map dimension
        `nrow_dim` (its half of the tile's W rows). K runs along map dimension 0 (`kcol` its
        coordinate), or for a chunked map along dimension 2 in K boxes (`kcol` / 64; dimension 0 is
        then K within a box, 0)."""
        p = ip.p
        d = descriptor(ip, r, k)
        kstep = r.field("k_step", p.r("g100_kstep"))
        chunked = p.p("g100_chunked")
        p.emit(alu.isetp("NE", chunked, kstep, K_STEP))
        rank = r.field(f"op{k}.rank", p.r("map_rank"))
        p.emit(alu.iadd3(rank, rank, -1))
        labels = [p.fresh_label(f"G100_RANK{n}") for n in range(1, F.COORDS + 1)]
        done = p.fresh_label("G100_COPIED")
        dispatch(p, rank, labels, name="g100_rank")
        for n, label in enumerate(labels, 1):
            p.label(label)
            coords: list[R] = []
            for c in range(n):
                crd = r.field(f"op{k}.coord{c}", p.r(f"coord{c}"))
                if c == 0:
                    p.emit(alu.mov(crd, kcol).guarded(~chunked))  # the innermost dimension is K (refuse checks it)
                elif c == 2:
                    kbox = p.r("g100_kbox")
                    p.emit(alu.shf_r(kbox, kcol, K_STEP.bit_length() - 1))
                    p.emit(alu.iadd3(crd, crd, kbox).guarded(chunked))
                if c == nrow_dim and half:
                    hn = r.whole_field("tile_n", p.r("g100_halfn"))
                    p.emit(alu.shf_r(hn, hn, 1))
                    p.emit(alu.iadd3(crd, crd, hn).guarded(~r.prank0))
                coords.append(crd)
            self._load_offset(ip, r, dst, d, n, coords, ring, zero, offset)
            p.emit(control.bra(done))
        p.label(done)

    def _load_offset(self, ip: Any, r: Any, dst: Any, d: URVec, n: int, coords: list[R], ring: ProducerEnd,
                     zero: UR, offset: R) -> None:
        """A `.2CTA` copy into `dst` + offset bytes (a box of the stage's page)."""
        from warpy.isa.families import tma

        p = ip.p
        args = p.urvec(f"g100b_args{n}", 2 + n)
        p.derive.into(args[0], "addr", dst)
        o = p.ur("g100_off_u")
        p.emit(alu.r2ur(o, offset))
        p.emit(alu.uiadd3(args[0], args[0], o))
        p.derive.into(args[1], "addr", ring.full)
        p.emit(alu.mapa(args[1], zero, args[1]))
        for c, v in enumerate(coords):
            p.emit(alu.r2ur(args[2 + c], v))
        p.emit(tma.tma_load(Mem(args), d, two_cta=True).guarded(r.leader))

    def copy_plain(self, ip: Any, r: Any, k: int, page: Any, offset: Optional[R]) -> None:
        """Operand k's box (bias, residual) at this CTA's origin into the epilogue page (+ offset),
        completing on `loaded[slot]`."""
        from warpy.isa.families import tma

        p = ip.p
        d = descriptor(ip, r, k)
        rank = r.field(f"op{k}.rank", p.r("map_rank"))
        p.emit(alu.iadd3(rank, rank, -1))
        labels = [p.fresh_label(f"G100_EPI{n}") for n in range(1, F.COORDS + 1)]
        done = p.fresh_label("G100_EPI_COPIED")
        dispatch(p, rank, labels, name="g100_epi_rank")
        for n, label in enumerate(labels, 1):
            p.label(label)
            coords = [r.field(f"op{k}.coord{c}", p.r(f"coord{c}")) for c in range(n)]
            args = p.urvec(f"g100e_args{n}", 2 + n)
            p.derive.into(args[0], "addr", page)
            if offset is not None:
                o = p.ur("g100_eoff")
                p.emit(alu.r2ur(o, offset))
                p.emit(alu.uiadd3(args[0], args[0], o))
            p.derive.into(args[1], "addr", ip.loaded.at(r.cons.ring))
            for c, v in enumerate(coords):
                p.emit(alu.r2ur(args[2 + c], v))
            p.emit(tma.tma_load(Mem(args), d).guarded(r.leader))
            p.emit(control.bra(done))
        p.label(done)

    # -- launcher (CTA 0, holding the token) ------------------------------------------------------------
    def by_shape(self, ip: Any, r: Any, run: Any) -> None:
        """run(tm, tn, ar) for the instruction's tile shape and A box rows (one code path per shape of
        the launch, `Launch.gemm_tiles`; two paths of one tile shape are told apart by A's box bytes
        and the copy's K together, as on sm_90a: a chunked box of k_boxes x ar rows, or ar rows)."""
        p = ip.p
        shapes = sorted(ip.launch.gemm_tiles)
        if not shapes:  # no gemm in this launch: never run
            return
        tm_r, tn_r = r.whole_field("tile_m", p.r("g100_tm")), r.whole_field("tile_n", p.r("g100_tn"))
        split = any(a[:2] == b[:2] and a[2] != b[2] for a in shapes for b in shapes)
        a16 = r.field("op1.box_16", p.r("g100_a16")) if split else RZ
        kstep = r.field("k_step", p.r("g100_kstep_s")) if split else RZ
        labels = [p.fresh_label(f"G100_{tm}x{tn}" + (f"_A{ar}" if ar != tm // 2 else "")) for tm, tn, ar in shapes]
        done = p.fresh_label("G100_SHAPED")
        if len(shapes) > 1:
            cases: list[tuple[str, list[tuple[Any, int]]]] = []
            for (tm, tn, ar), label in zip(shapes[:-1], labels[:-1]):
                kb = gemm_pair_k_boxes(tm, tn, ar)
                forms = ((ar, 1), (ar * kb, kb)) if split else ((0, 0),)
                for a_rows, per_copy in forms:
                    conds = [(tm_r, tm), (tn_r, tn)]
                    if split:
                        conds += [(a16, a_rows * ROW_BYTES // 16), (kstep, K_STEP * per_copy)]
                    cases.append((label, conds))
            branch_on_fields(p, p.p("g100_shape"), cases, labels[-1])
        for (tm, tn, ar), label in zip(shapes, labels):
            p.label(label)
            run(tm, tn, ar)
            p.emit(control.bra(done))
        p.label(done)

    def launch(self, ip: Any, r: Any) -> None:
        self.by_shape(ip, r, lambda tm, tn, ar: self.mmas(ip, r, tm, tn, ar))

    def mmas(self, ip: Any, r: Any, tm: int, tn: int, ar: int) -> None:
        """CTA 0's MMAs of a tm x tn tile whose A boxes have `ar` rows: per stage, per K box j of its
        `k_boxes`, four `UTCHMMA.2CTA` (K 16 each) reading A from box j (ar rows from j ar: the pair
        MMA reads tm / 2 rows from there in each CTA, `gemm_pair_a_rows`) and B from box j (the CTA's
        tn / 2 rows, after the stage's A boxes)."""
        p = ip.p
        g = _shared(ip)
        cons = r.state["gemm"]
        assert isinstance(cons, ConsumerEnd)
        idesc = umma_idesc("bf16", "bf16", "f32", tm, tn, "K", "K", cta_group=2)
        both = _mask(p, "g100_both", 0b11)
        kb = gemm_pair_k_boxes(tm, tn, ar)
        bn = tn // 2
        ns = r.field("k_stages", p.r("g100_stages"))
        lid = p.r("g100_lid")
        p.emit(alu.mov(lid, 0))
        first, accumulate = p.ur("g100_first"), p.up("g100_accumulate")
        p.emit(alu.umov(first, 0))
        acc = ip.tmem.at(0, 0)
        with p.loop("g100_mk", ns, max_count=MAX_STAGES):
            pid = r.pid_at(lid, "g100_mpid")
            with cons.stage():
                p.emit(alu.uisetp("NE", accumulate, first, URZ))
                cons.wait_full()  # both CTAs' copies of the stage landed
                if ip.fault != "no-fence-after":  # seeded: no after_thread_sync between the token and the MMAs
                    p.emit(tcgen05.tc_fence_after())
                steps = [(j, q) for j in range(kb) for q in range(K_STEP // 16)]
                b0 = (ar if ip.fault == "decode-b-offset" else kb * ar)  # seeded: B's box j right after A's
                for n, (j, q) in enumerate(steps):
                    utchmma(p, g.view.at(pid, j * ar, 16 * q), g.view.at(pid, b0 + j * bn, 16 * q), acc, idesc,
                            accumulate if n == 0 else True, two_cta=True)
                p.emit(alu.umov(first, 1))
                cons.free_commit(both, two_cta=True)  # both CTAs' stage copies free once these MMAs are done
            wrap = p.p("g100_wrap")
            p.emit(alu.iadd3(lid, lid, 1))
            p.emit(alu.isetp("EQ", wrap, lid, RING))
            p.emit(alu.mov(lid, 0).guarded(wrap))
        p.derive.emit_at(g.acc.at(0), lambda b: tcgen05.utcbar(b, both, True))

    # -- consumers (both CTAs) --------------------------------------------------------------------------
    def compute(self, ip: Any, r: Any) -> None:
        p = ip.p
        n = r.state["gemm"]
        assert isinstance(n, R)
        if not ip.launch.gemm_tiles:
            consumers_done(ip)
            out_ready(ip, r)
            return
        self.by_shape(ip, r, lambda tm, tn, ar: self.tile(ip, r, tm, tn))
        p.emit(alu.iadd3(n, n, 1))

    def tile(self, ip: Any, r: Any, tm: int, tn: int) -> None:
        """The consumers' code for tiles of tm x tn: the accumulator into registers, the token back,
        the ring's pages on, the epilogue."""
        p = ip.p
        g = _shared(ip)
        count = r.state["gemm"]
        # this thread's place: warp w's quarter q = w % 4 reads lanes 32q.. (its row of the CTA's
        # tile), the two warpgroups split the columns
        warp, lane, q, grp = p.r("g100_warp"), p.r("g100_lane"), p.r("g100_q"), p.r("g100_grp")
        p.emit(alu.shf_r(warp, r.ctid, 5))
        p.emit(alu.lop3(lane, r.ctid, 31, RZ, 0xC0))
        p.emit(alu.lop3(q, warp, 3, RZ, 0xC0))
        p.emit(alu.shf_r(grp, warp, 2))
        row, col0, tcol = p.r("g100_row"), p.r("g100_col0"), p.r("g100_tcol")
        if tm == 256:  # a lane a row, tn columns: each warpgroup half of them
            ncols = tn // 2
            p.emit(alu.imad(row, q, 32, lane))
            p.emit(alu.imad(col0, grp, ncols, RZ))
            p.emit(alu.mov(tcol, col0))
        else:  # folded: lanes 64.. hold the columns tn/2.. of the CTA's 64 rows
            ncols = tn // 4
            half = p.r("g100_lanehalf")
            p.emit(alu.shf_r(half, q, 1))
            p.emit(alu.lop3(row, q, 1, RZ, 0xC0))
            p.emit(alu.imad(row, row, 32, lane))
            p.emit(alu.imad(tcol, grp, ncols, RZ))
            p.emit(alu.imad(col0, half, tn // 2, tcol))
        chunks = _chunks(ncols)
        # the accumulator is full (the launcher's last commit), this warp's view ordered after it
        par = p.r("g100_par")
        p.emit(alu.shf_l(par, count, 31))
        wait(p, g.acc.at(0), par)
        p.emit(tcgen05.tc_fence_after())
        # the MMAs are done: the ring's pages go to the next instruction at once, so that its loads
        # and MMAs overlap this epilogue (each page waited for first, by every thread; then no
        # thread waits on a page once one is released); only the token orders the next MMAs after
        # this accumulator's reads
        for lid in range(RING):
            r.wait_page(lid)
        p.emit(sync.bar_sync(1, 256))
        for lid in range(RING):
            r.release_page(lid, r.cleader)
        if ip.fault == "early-token":  # seeded: the token back before the accumulator was read
            self.give_back(ip, r)
        # the warp's lanes: 32q.. (a tensor-memory address's high half), its first column
        lanes_u, taddr, t = p.ur("g100_lanes"), p.ur("g100_taddr"), p.r("g100_t")
        p.emit(alu.shf_l(t, q, 21))  # (32 q) << 16
        p.emit(alu.r2ur(lanes_u, t))
        tc_u = p.ur("g100_tcol_u")
        p.emit(alu.r2ur(tc_u, tcol))
        p.emit(alu.uiadd3(lanes_u, lanes_u, tc_u))
        base, off = p.derive.value_reg("addr", ip.tmem.at(0, 0))
        vals: list[RVec] = []
        at = 0
        for j, w in enumerate(chunks):
            v = p.rvec(f"g100_v{j}w{w}", w)
            p.emit(alu.uiadd3(taddr, base, lanes_u, off + at))
            p.emit(tcgen05.ldtm(v, taddr))
            vals.append(v)
            at += w
        p.emit(tcgen05.tmem_wait_ld())
        if ip.fault != "early-token":
            if ip.fault != "no-fence-before":  # seeded: the loads not released with the barrier
                p.emit(tcgen05.tc_fence_before())
            p.emit(sync.bar_sync(1, 256))  # every consumer warp's loads are done
            self.give_back(ip, r)
        self.epilogue(ip, r, tn, row, col0, vals)

    def give_back(self, ip: Any, r: Any) -> None:
        """One consumer thread returns the token (CTA 1's by a remote arrive on CTA 0's barrier;
        with the seeded pair-handoff fault CTA 1 never does)."""
        p = ip.p
        if ip.fault == "pair-handoff":
            with p.when(r.rank0):
                ip.return_token(r, r.cleader)
            return
        ip.return_token(r, r.cleader)

    def epilogue(self, ip: Any, r: Any, tn: int, row: R, col0: R, vals: list[RVec]) -> None:
        p = ip.p
        wait(p, ip.loaded.at(r.cons.ring), r.cons.ring.parity)  # the bias and residual boxes landed
        r.wait_page(OUT)
        bias_p, res_p = self.flags(ip, r)
        act = Activation(p, r.field("activation", p.r("g100_act")), "g100_act")
        epi = p.r("g100_epi")
        reg, off = p.derive.value_reg("addr", r.page(EPI))
        p.emit(alu.mov(epi, reg))
        p.emit(alu.iadd3(epi, epi, off))
        nb = r.field("op3.box_16", p.r("g100_nb"))
        p.emit(alu.mov(nb, 0).guarded(~bias_p))
        p.emit(alu.imad(nb, nb, 16, 127))
        p.emit(alu.lop3(nb, nb, 0xFFFFFF80, RZ, 0xC0))
        res = p.r("g100_resb")
        p.emit(alu.iadd3(res, epi, nb))
        outb = p.r("g100_out")
        reg, off = p.derive.value_reg("addr", r.page(OUT))
        p.emit(alu.mov(outb, reg))
        p.emit(alu.iadd3(outb, outb, off))

        def first_addr(dst: R, b: R, k: int, name: str) -> R:
            """dst = b + 2 (row x row_stride + col0 x col_stride) of operand k; returns its col stride."""
            rs: R = r.field(f"op{k}.row_stride", p.r(f"g100_{name}rs"))
            cs: R = r.field(f"op{k}.col_stride", p.r(f"g100_{name}cs"))
            p.emit(alu.imad(dst, row, rs, RZ))
            p.emit(alu.imad(dst, col0, cs, dst))
            p.emit(alu.imad(dst, dst, 2, b))
            return cs

        ba, ra, oa = p.r("g100_ba"), p.r("g100_ra"), p.r("g100_oa")
        bcs = first_addr(ba, epi, 3, "b")
        rcs = first_addr(ra, res, 4, "r")
        first_addr(oa, outb, 0, "o")
        bstep, rstep = p.r("g100_bstep"), p.r("g100_rstep")  # bytes between consecutive columns
        p.emit(alu.shf_l(bstep, bcs, 1))
        p.emit(alu.shf_l(rstep, rcs, 1))
        e = p.r("g100_e")
        ef = F32.of(e)
        packed = p.r("g100_packed")

        def add(v: F32, a: R, guard: P) -> None:
            p.emit(ins(memory.LDS, "U16", e, Mem(a)).guarded(guard))
            p.emit(alu.shf_l(e, e, 16).guarded(guard))
            p.emit(alu.fadd(v, v, ef).guarded(guard))

        at = 0
        for vec in vals:
            for i in range(vec.width):
                v = F32.of(vec[i])
                add(v, ba, bias_p)
                act.apply(v)
                add(v, ra, res_p)
                p.emit(alu.iadd3(ba, ba, bstep))
                p.emit(alu.iadd3(ra, ra, rstep))
                if i % 2:
                    p.emit(alu.f2fp_bf16(packed, vec[i], vec[i - 1]))
                    p.emit(memory.sts(Mem(oa, offset=2 * (at + i - 1)), packed))
            at += vec.width
        consumers_done(ip)
        r.release_page(EPI, r.cleader)
        out_ready(ip, r)

    # -- storer ----------------------------------------------------------------------------------------
    def store(self, ip: Any, r: Any) -> None:
        store_output(ip, r, OUT, r.leader)

    def finish(self, ip: Any, r: Any) -> None:
        """The loader, after its last instruction: every stage's last commit has landed in this CTA
        (no commit of the pair's MMAs arrives after the CTA leaves)."""
        if r.name != "loader":
            return
        ring = r.state["gemm"]
        assert isinstance(ring, ProducerEnd)
        with ip.p.loop("g100_drain", RING):
            with ring.stage():
                ring.wait_empty()


def _chunks(ncols: int) -> list[int]:
    """The widths of the LDTM loads of a thread's ncols columns: 32s, then powers of two."""
    out = []
    left = ncols
    while left >= 32:
        out.append(32)
        left -= 32
    w = 16
    while left:
        if left >= w:
            out.append(w)
            left -= w
        w //= 2
    return out


_ = (UR, URVec, ProducerEnd)

__all__ = ["Gemm", "Shared", "tile_ok", "epi_offset", "RING", "EPI", "OUT"]
