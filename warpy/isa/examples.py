"""Example programs: a TMA producer and an MMA consumer over a 4-stage pipe, for sm_90a and sm_100a.

They are small but complete kernels (the lifter assembles them, the checker runs them): one CTA
computes C = A · Bᵀ for A (M x K) and B (N x K), both bf16 K-major behind tensor maps, with fp32
accumulation, and each thread stores its accumulator registers to a scratch buffer `out` in the
order it holds them (`out[thread][value]`, 4-byte floats): the wgmma fragment layout on sm_90a; on
sm_100a `out[row][column]`, each thread storing its TMEM lane (the accumulator's row) in full.

- `pipe_sm90`: 256 threads. Warpgroup 0 (warps 0-3) is the consumer: HGMMA 64x128x16 from both
  rings into 64 accumulator registers; each warp's elected lane frees a stage (4 arrivals).
  Warpgroup 1 gives registers back (USETMAXREG) and its warp 4 is the producer: waits for an empty
  stage, arms the full barrier with the stage's bytes, and issues two TMA loads. With 8-bit float
  types (`example-fp8`: A e4m3, B e5m2) the MMAs are QGMMA 64x128x32, 128 of K a stage (on sm_100a
  UTCQMMA, kind::f8f6f4).
- `pipe_sm100`: 192 threads. Warp 0 is the producer as above; warp 1 allocates 128 TMEM columns
  and issues UTCHMMA (M=128, N=128, K=16 steps), freeing each stage with UTCBAR and signalling
  the accumulator with a last UTCBAR; warps 2-5 read their 32 TMEM lanes with LDTM and store them,
  then free the accumulator (acc_empty, 4 arrivals) so that warp 1 can deallocate it.

`EXAMPLES` maps the names `warpy expand` knows to builders.
"""

from __future__ import annotations

import contextlib

from typing import TYPE_CHECKING, Callable, Optional

from warpy.isa.families import alu, clc, control, memory, sync, tcgen05, tma, wgmma
from warpy.isa.instr import Affine, Note
from warpy.isa.operands import RZ, URZ, CBank, GMem, Mem
from warpy.isa.index import Uniform
from warpy.isa.pipes import init_barriers, wait
from warpy.isa.program import Program
from warpy.isa.units.tcgen05 import utchmma
from warpy.isa.units.tma import tma_load, tma_store
from warpy.isa.units.wgmma import hgmma
from warpy.layout import Layout, Swizzle, SwizzledLayout
from warpy.layout.desc import umma_idesc
from warpy.layout.tma import TmaBox

if TYPE_CHECKING:
    from warpy.isa.operands import P, RVec
    from warpy.isa.buffers import BarrierArray, Param, SmemBuffer, TensorMap

SW128 = Swizzle(3, 4, 3)


def k_major_tile(rows: int, k: int = 64, elem_bytes: int = 2) -> SwizzledLayout:
    """A K-major tile of `rows` x `k` with the 128-byte swizzle: coordinates (row, k) -> bytes."""
    assert k * elem_bytes == 128, "one 128-byte swizzle column"
    return SwizzledLayout(SW128, Layout((rows, k), (128, elem_bytes)))


def umma_idesc_bf16(m: int, n: int) -> int:
    """The 32-bit instruction descriptor of tcgen05.mma kind::f16, bf16 x bf16 -> f32, K-major."""
    return umma_idesc("bf16", "bf16", "f32", m, n, cta_group=2 if m == 256 else 1)


def pipe_sm90(k_tiles: int = 8, depth: int = 4, a_dtype: str = "bf16", b_dtype: str = "") -> Program:
    """The sm_90a pipe; with 8-bit float types (`a_dtype`, `b_dtype`: e4m3 / e5m2) its MMAs are QGMMA,
    K = 32 a step, 128 of K a stage (one 128-byte swizzle row either way)."""
    b_dtype = b_dtype or a_dtype
    eb = 1 if a_dtype in ("e4m3", "e5m2") else 2
    m, n, tk, ks = 64, 128, 128 // eb, 32 // eb
    k_total = k_tiles * tk
    name = "example_pipe_sm90" if a_dtype == "bf16" else f"example_pipe_sm90_{a_dtype}_{b_dtype}"
    p = Program(name, "sm_90a", threads=256, maxnreg=168)
    ta = p.tmap("a", TmaBox(a_dtype, (k_total, m), (k_total * eb,), (tk, m), swizzle=128))
    tb = p.tmap("b", TmaBox(b_dtype, (k_total, n), (k_total * eb,), (tk, n), swizzle=128))
    c = p.param("out", "u64")
    p.global_buffer("out", Layout((n // 2, 128), (4, 2 * n)), "fp32", source="out")  # out[value, thread]
    sa = p.smem_ring("sa", depth, k_major_tile(m, tk, eb), a_dtype)
    sb = p.smem_ring("sb", depth, k_major_tile(n, tk, eb), b_dtype)
    stage = p.pipe("stage", depth, fills=1, frees=4)
    init_barriers(p)

    with p.role("producer", range(4, 8)):
        p.emit(control.setmaxnreg_dealloc(40))
        warp = p.warp_index()
        w4 = p.p("is_loader")
        p.emit(alu.isetp("EQ", w4, warp, 4))
        with p.when(w4):
            leader = p.elect()
            out = stage.producer("ps")
            with p.loop("k", k_tiles) as k:
                with out.stage():
                    out.wait_empty()
                    out.arrive_full(leader, tx_bytes=(m + n) * tk * eb)
                    tma_load(p, out.slot(sa), ta, [k * tk, 0], out.full)
                    tma_load(p, out.slot(sb), tb, [k * tk, 0], out.full)

    with p.role("consumer", range(0, 4)):
        ok = p.up("regs_granted")
        grow = p.fresh_label("GROW")
        p.label(grow)
        p.emit(control.setmaxnreg_try_alloc(ok, 232))
        p.emit(control.bra(grow).guarded(~ok), mark="~")
        acc = p.rvec("acc", n // 2)
        leader = p.elect()
        first = p.ur("first")
        accumulate = p.up("accumulate")
        p.emit(alu.umov(first, 0))
        inp = stage.consumer("cs")
        with p.loop("k", k_tiles):
            with inp.stage():
                p.emit(alu.uisetp("NE", accumulate, first, URZ))
                inp.wait_full()
                p.emit(wgmma.warpgroup_arrive())
                for j in range(tk // ks):
                    hgmma(p, acc, inp.slot(sa, 0, ks * j), inp.slot(sb, 0, ks * j), n,
                            accumulate if j == 0 else True, end=j == tk // ks - 1)
                p.emit(wgmma.wgmma_commit())
                p.emit(wgmma.warpgroup_wait(0))
                p.emit(alu.umov(first, 1))
                inp.free(leader)
        # epilogue: each thread stores its n/2 accumulator values at c + tid * 4 * n/2
        tid = p.r("tid")
        cptr = p.rvec("cptr", 2)
        caddr = p.rvec("caddr", 2)
        memdesc = p.urvec("memdesc", 2)
        p.emit(alu.ldc(cptr, c.cbank()))
        p.emit(alu.uldc(memdesc, CBank(0, 0x208), p.sm))
        p.emit(alu.imad_wide(caddr, tid, 2 * n, cptr))
        for j in range(n // 8):
            p.emit(memory.stg(GMem(memdesc, caddr, 16 * j), acc.sub(4 * j, 4)))
    p.emit(control.exit_())
    return p


def pipe_sm100(k_tiles: int = 8, depth: int = 4, a_dtype: str = "bf16", b_dtype: str = "") -> Program:
    """The sm_100a pipe; with 8-bit float types (`a_dtype`, `b_dtype`: e4m3 / e5m2) its MMAs are
    UTCQMMA (kind::f8f6f4, the instruction descriptor's formats), K = 32 a step, 128 of K a stage."""
    b_dtype = b_dtype or a_dtype
    eb = 1 if a_dtype in ("e4m3", "e5m2") else 2
    m, n, tk, ks = 128, 128, 128 // eb, 32 // eb
    k_total = k_tiles * tk
    name = "example_pipe_sm100" if a_dtype == "bf16" else f"example_pipe_sm100_{a_dtype}_{b_dtype}"
    p = Program(name, "sm_100a", threads=192)
    ta = p.tmap("a", TmaBox(a_dtype, (k_total, m), (k_total * eb,), (tk, m), swizzle=128))
    tb = p.tmap("b", TmaBox(b_dtype, (k_total, n), (k_total * eb,), (tk, n), swizzle=128))
    c = p.param("out", "u64")
    p.global_buffer("out", Layout((n, m), (4, 4 * n)), "fp32", source="out")  # out[column, row]
    sa = p.smem_ring("sa", depth, k_major_tile(m, tk, eb), a_dtype)
    sb = p.smem_ring("sb", depth, k_major_tile(n, tk, eb), b_dtype)
    idesc = umma_idesc_bf16(m, n) if a_dtype == "bf16" else umma_idesc(a_dtype, b_dtype, "f32", m, n)
    stage = p.pipe("stage", depth, fills=1, frees=1)
    acc_full = p.barriers("acc_full", 1, count=1)
    acc_empty = p.barriers("acc_empty", 1, count=4)
    tmem_slot = p.smem_words("tmem_slot", 1)
    acc = p.tmem("acc", Layout((m, n), (1 << 16, 1)), n)
    init_barriers(p)

    # warp 1 allocates the accumulator's columns; everyone reads the address after a CTA barrier
    warp = p.warp_index()
    w1 = p.p("is_mma_warp")
    p.emit(alu.isetp("EQ", w1, warp, 1))
    with p.when(w1):
        p.derive.emit_at(tmem_slot.at(0), lambda a: tcgen05.tmem_alloc(a, n))
        p.emit(tcgen05.tmem_relinquish())
    p.emit(sync.bar_sync(0))
    tword = p.r("tmem_word")
    p.derive.emit_at(tmem_slot.at(0), lambda a: memory.lds(tword, a))
    p.derive.tmem_base = p.ur("tmem_base")
    p.emit(alu.r2ur(p.derive.tmem_base, tword))

    with p.role("producer", range(0, 1)):
        leader = p.elect()
        out = stage.producer("ps")
        with p.loop("k", k_tiles) as k:
            with out.stage():
                out.wait_empty()
                out.arrive_full(leader, tx_bytes=(m + n) * tk * eb)
                tma_load(p, out.slot(sa), ta, [k * tk, 0], out.full)
                tma_load(p, out.slot(sb), tb, [k * tk, 0], out.full)

    with p.role("mma", range(1, 2)):
        first = p.ur("first")
        accumulate = p.up("accumulate")
        p.emit(alu.umov(first, 0))
        inp = stage.consumer("cs")
        probe = p.p("probe")
        p.emit(alu.pset(probe, False))
        with p.loop("k", k_tiles) as k:
            more = p.p("more_stages")
            with inp.stage(probe=probe, probe_when=more):  # asking a stage ahead
                p.emit(alu.uisetp("NE", accumulate, first, URZ))
                p.emit(alu.isetp("LT", more, k.reg, k_tiles - 1))
                inp.wait_full()
                for j in range(tk // ks):
                    utchmma(p, inp.slot(sa, 0, ks * j), inp.slot(sb, 0, ks * j), acc.at(0, 0),
                              idesc, accumulate if j == 0 else True)
                p.emit(alu.umov(first, 1))
                inp.free_commit()
        p.derive.emit_at(acc_full.at(0), lambda b: tcgen05.utcbar(b))
        # the epilogue reads the accumulator; the columns are freed once all four warps are done
        wait(p, acc_empty.at(0), _zero(p))
        p.emit(tcgen05.tc_fence_after())
        p.emit(tcgen05.tmem_dealloc(p.derive.tmem_base, n))

    with p.role("epilogue", range(2, 6)):
        wait(p, acc_full.at(0), _zero(p))
        p.emit(tcgen05.tc_fence_after())
        # warp w reads TMEM lanes 32*(w%4) .. +31: lane0 is the first, each thread its row
        lane0 = p.r("lane0")
        shifted = p.r("shifted")
        lanes = p.ur("lanes")
        taddr = p.ur("taddr")
        p.emit(alu.lop3(lane0, warp, 3, RZ, 0xC0))
        p.emit(alu.shf_l(lane0, lane0, 5))
        p.emit(alu.shf_l(shifted, lane0, 16))
        p.emit(alu.r2ur(lanes, shifted))
        v = p.rvec("v", 32)
        tid = p.r("tid")
        row = p.r("row")
        cptr = p.rvec("cptr", 2)
        caddr = p.rvec("caddr", 2)
        memdesc = p.urvec("memdesc", 2)
        p.emit(alu.ldc(cptr, c.cbank()))
        p.emit(alu.uldc(memdesc, CBank(0, 0x358), p.sm))
        p.emit(alu.lop3(row, tid, 31, RZ, 0xC0))
        p.emit(alu.iadd3(row, row, lane0))
        p.emit(alu.imad_wide(caddr, row, 4 * n, cptr))
        for chunk in range(n // 32):
            p.emit(alu.uiadd3(taddr, p.derive.tmem_base, lanes, 32 * chunk).noted(Note("acc", (Affine(0, ((1, "lane0"),)), Affine(32 * chunk)))), mark="+")
            p.emit(tcgen05.ldtm(v, taddr))
            p.emit(tcgen05.tmem_wait_ld())
            for j in range(8):
                p.emit(memory.stg(GMem(memdesc, caddr, 128 * chunk + 16 * j), v.sub(4 * j, 4)))
        p.emit(tcgen05.tc_fence_before())
        done = p.elect("done_leader")
        p.derive.emit_at(acc_empty.at(0), lambda b: sync.arrive(b), guard=done)
    p.emit(control.exit_())
    return p


def _zero(p: Program):  # type: ignore[no-untyped-def]
    """A parity register for the first phase (parity 0)."""
    z = p.r("phase0")
    p.emit(alu.mov(z, 0))
    return z


EXAMPLES: dict[str, Callable[[str], Program]] = {
    "example-pipe": lambda arch: pipe_sm90() if arch == "sm_90a" else pipe_sm100(),
    # 8-bit floats, A e4m3 and B e5m2 (sm_90a: QGMMA)
    "example-fp8": lambda arch: (pipe_sm90(a_dtype="e4m3", b_dtype="e5m2") if arch == "sm_90a"
                                 else pipe_sm100(a_dtype="e4m3", b_dtype="e5m2")),
}



def features_sm90() -> Program:
    """Every sm_90a opcode family in one small kernel (its data are not meaningful; its protocol is,
    and the host checker runs it clean): a 2-CTA cluster in which each CTA loads half of a tile and
    multicasts it to both, frees a stage in both CTAs (mapa + remote arrive), named barriers,
    ldmatrix/stmatrix, TMA store and reduce-add with the bulk-group wait, a bulk copy, dependent
    launch, setmaxnreg."""
    p = Program("features_sm90", "sm_90a", threads=256, grid=(2, 1, 1), cluster=(2, 1, 1), maxnreg=168)
    ta = p.tmap("a", TmaBox("bf16", (256, 64), (512,), (64, 32), swizzle=128))  # half a 64-row tile a CTA
    tc = p.tmap("c", TmaBox("fp32", (64, 128), (256,), (32, 64)))
    out = p.param("out", "u64")
    n = p.param("n", "u32")
    sa = p.smem_ring("sa", 2, k_major_tile(64), "bf16")
    stile = p.smem("sc", Layout((32, 64), (4, 128)), "fp32")
    stage = p.pipe("stage", 2, fills=1, frees=8)  # 4 consumer warps of each of the 2 CTAs
    bulk_bar = p.barriers("bulk_full", 1)
    init_barriers(p, cluster_sync=True)
    warp = p.warp_index()
    rank = p.ur("rank")
    p.emit(alu.s2ur(rank, "SR_CgaCtaId"))
    p.emit(sync.acqbulk())
    with p.role("producer", range(4, 8)):
        p.emit(control.setmaxnreg_dealloc(40))
        w4 = p.p("is_loader")
        p.emit(alu.isetp("EQ", w4, warp, 4))
        with p.when(w4):
            leader = p.elect()
            mask = p.ur("mask")
            p.emit(alu.umov(mask, 0x3))
            half = Uniform("half", rank, 2)
            row0 = p.ur("half_row")
            p.emit(alu.uimad(row0, rank, 32, URZ))
            prod = stage.producer("ps")
            with p.loop("k", 4) as k:
                with prod.stage():
                    prod.wait_empty(sleep=0x20)
                    prod.arrive_full(leader, tx_bytes=64 * 64 * 2)  # both halves land in each CTA
                    tma_load(p, prod.slot(sa, 32 * half, 0), ta, [k * 64, row0], prod.full, mask=mask, guard=leader)
            p.emit(sync.preexit())
        # exit through a cluster barrier (each role exits at its end): no CTA leaves while the peer's
        # consumers may still arrive on its empty barriers
        p.emit(sync.cluster_arrive())
        p.emit(sync.cluster_wait())
    with p.role("consumer", range(0, 4)):
        ok = p.up("regs_granted")
        p.emit(control.setmaxnreg_try_alloc(ok, 232))
        acc = p.rvec("acc", 32)
        leader = p.elect()
        peer = p.ur("peer")
        p.emit(alu.ulop3(peer, rank, 1, URZ, 0x3C))
        cons = stage.consumer("cs")
        k_count = p.r("k_count")
        p.emit(alu.mov(k_count, 4))
        with p.loop("k", k_count, max_count=4):
            with cons.stage():
                cons.wait_full()
                p.emit(wgmma.warpgroup_arrive())
                hgmma(p, acc, cons.slot(sa), cons.slot(sa), 64, False, end=True)
                p.emit(wgmma.wgmma_commit())
                p.emit(wgmma.warpgroup_wait(0))
                cons.free(leader)
                cons.free_remote(peer, leader)
        first = p.p("first_warp")
        p.emit(alu.isetp("EQ", first, warp, 0))
        _generic_tail(p, acc, stile, tc, out, n, leader, bulk_bar, first, threads=128)
        p.emit(sync.cluster_arrive())
        p.emit(sync.cluster_wait())
    p.emit(control.exit_())
    return p


def features_sm100() -> Program:
    """Every sm_100a family in one small kernel: a CTA pair issuing 2-CTA UMMA with a multicast
    commit, cluster launch control (try-cancel and query), TMEM store/load, dealloc."""
    m, n = 256, 128
    p = Program("features_sm100", "sm_100a", threads=128, grid=(2, 1, 1), cluster=(2, 1, 1))
    ta = p.tmap("a", TmaBox("bf16", (128, 256), (256,), (64, 128), swizzle=128))
    tb = p.tmap("b", TmaBox("bf16", (128, 128), (256,), (64, 64), swizzle=128))
    sa = p.smem_ring("sa", 2, k_major_tile(128), "bf16")
    sb = p.smem_ring("sb", 2, k_major_tile(64), "bf16")
    stage = p.pipe("stage", 2, fills=1, frees=1)
    clc_bar = p.barriers("clc_full", 1, count=1)
    acc_bar = p.barriers("acc_full", 1, count=1)
    peer_bar = p.barriers("peer_done", 1, count=1)
    resp = p.smem_words("clc_resp", 1, "b128")
    tmem_slot = p.smem_words("tmem_slot", 1)
    acc = p.tmem("acc", Layout((128, n), (1 << 16, 1)), n)
    tc = p.tmap("c", TmaBox("fp32", (64, 128), (256,), (32, 64)))
    out = p.param("out", "u64")
    nparam = p.param("n", "u32")
    stile = p.smem("sc", Layout((32, 64), (4, 128)), "fp32")
    bulk_bar = p.barriers("bulk_full", 1)
    init_barriers(p, cluster_sync=True)
    p.emit(sync.acqbulk())
    warp = p.warp_index()
    rank = p.ur("rank")
    p.emit(alu.s2ur(rank, "SR_CgaCtaId"))
    w1 = p.p("is_mma_warp")
    p.emit(alu.isetp("EQ", w1, warp, 1))
    with p.when(w1):
        p.derive.emit_at(tmem_slot.at(0), lambda s: tcgen05.tmem_alloc(s, n, two_cta=True))
        p.emit(tcgen05.tmem_relinquish())
    p.emit(tcgen05.tc_fence_before())
    p.emit(sync.cluster_arrive())
    p.emit(sync.cluster_wait())
    p.emit(tcgen05.tc_fence_after())
    tword = p.r("tmem_word")
    p.derive.emit_at(tmem_slot.at(0), lambda s: memory.lds(tword, s))
    p.derive.tmem_base = p.ur("tmem_base")
    p.emit(alu.r2ur(p.derive.tmem_base, tword))
    with p.role("producer", range(0, 1)):
        leader = p.elect()
        pair0 = p.ur("pair0")
        p.emit(alu.ulop3(pair0, rank, 0xFFFFFFFE, URZ, 0xC0))  # the even CTA of the pair leads
        crank = p.r("cta_rank")
        lead_lane = p.p("lead_lane")
        p.emit(alu.s2r(crank, "SR_CgaCtaId"))
        p.emit(alu.isetp("EQ", lead_lane, crank, 0, c=leader))  # the leader CTA's elected lane
        prod = stage.producer("ps")
        with p.loop("k", 2) as k:
            with prod.stage():
                prod.wait_empty()
                # the pair leader's full barrier counts both CTAs' bytes; both CTAs' loads complete on it
                prod.arrive_full(lead_lane, tx_bytes=2 * (128 + 64) * 64 * 2)
                tma_load(p, prod.slot(sa), ta, [k * 64, 0], prod.full, two_cta=True, bar_rank=pair0)
                tma_load(p, prod.slot(sb), tb, [k * 64, 0], prod.full, two_cta=True, bar_rank=pair0)
    with p.role("mma", range(1, 2)):
        lead = p.up("pair_leader")
        p.emit(alu.uisetp("EQ", lead, rank, 0))
        mask = p.ur("mask")
        p.emit(alu.umov(mask, 0x3))
        with p.when(lead):  # the leader CTA issues the pair's MMAs and commits to both CTAs
            cons = stage.consumer("cs")
            first, accumulate = p.ur("first"), p.up("accumulate")
            p.emit(alu.umov(first, 0))
            with p.loop("k", 2):
                with cons.stage():
                    p.emit(alu.uisetp("NE", accumulate, first, URZ))
                    cons.wait_full()
                    utchmma(p, cons.slot(sa), cons.slot(sb), acc.at(0, 0), umma_idesc_bf16(m, n), accumulate,
                              two_cta=True)
                    p.emit(alu.umov(first, 1))
                    cons.free_commit(mask=mask, two_cta=True)
            p.derive.emit_at(acc_bar.at(0), lambda b: tcgen05.utcbar(b, mask, True))
        wait(p, acc_bar.at(0), _zero(p))  # both CTAs: the pair's MMAs are done with the accumulator
        p.emit(tcgen05.tc_fence_after())
        # ask for the next tile: the response lands in clc_resp, 16 bytes complete on clc_full
        leader = p.elect()
        sixteen = p.r("sixteen")
        p.emit(alu.mov(sixteen, 16))
        p.derive.emit_at(clc_bar.at(0), lambda b: sync.arrive_expect_tx(b, sixteen), guard=leader)
        cbar = p.ur("clc_bar_addr")
        p.derive.into(cbar, "addr", clc_bar.at(0))
        with p.when(lead):  # one request for the cluster; the answer lands in both CTAs
            p.derive.emit_at(resp.at(0), lambda r: clc.try_cancel(r, Mem(cbar)))
        wait(p, clc_bar.at(0), _zero(p))
        answer = p.rvec("answer", 4)
        p.derive.emit_at(resp.at(0), lambda r: memory.lds(answer, r))
        got = p.p("got_tile")
        next_x = p.r("next_x")
        p.emit(clc.query_canceled(got, answer))
        p.emit(clc.query_ctaid_x(next_x, answer).guarded(got))
        v = p.rvec("v", 8)
        p.emit(tcgen05.ldtm(v, p.derive.tmem_base))
        p.emit(tcgen05.tmem_wait_ld())
        p.emit(tcgen05.sttm(p.derive.tmem_base, v))
        p.emit(tcgen05.tmem_wait_st())
        p.emit(control.setmaxnreg_dealloc(64))
        _generic_tail(p, v, stile, tc, out, nparam, leader, bulk_bar, None, threads=32)
        p.emit(tcgen05.tmem_dealloc(p.derive.tmem_base, n, two_cta=True))
        peer = p.ur("peer")
        remote = p.ur("remote")
        p.emit(alu.ulop3(peer, rank, 1, URZ, 0x3C))
        p.derive.into(remote, "addr", peer_bar.at(0))
        p.emit(alu.mapa(remote, peer, remote))
        p.emit(sync.arrive_remote(Mem(remote)).guarded(leader))  # tell the peer this CTA is done
        wait(p, peer_bar.at(0), _zero(p))  # and leave only once the peer said so too
    p.emit(sync.cluster_arrive())
    p.emit(sync.cluster_wait())
    p.emit(control.exit_())
    return p


def _generic_tail(p: Program, acc: "RVec", stile: "SmemBuffer", tc: "TensorMap", out: "Param", n: "Param", leader: "P",
                  bulk_bar: "BarrierArray", only: Optional["P"], threads: int) -> None:
    """Instructions both targets have, in one block (so every family record is exercised). Every
    thread of the role (`threads`) writes its own rows of the staging tile; the warp `only` (None:
    the role is one warp) stores the tile by TMA, touches global memory (in its CTA's own words of
    `out`, whose first 256 bytes nobody writes: the bulk copy reads them) and runs the bulk copy."""
    frag = p.rvec("frag", 4)
    for j in range(4):
        p.emit(alu.f2fp_bf16(frag[j], acc[2 * j + 1], acc[2 * j]))
    p.emit(alu.fadd(acc[0], acc[0], acc[1]))  # (an fp32 sum, as partial sums are added)
    p.emit(alu.fmul(acc[1], acc[1], acc[2]))  # (an fp32 product, as epilogues scale)
    tid = p.r("tid")
    row = p.r("row")
    p.emit(alu.lop3(row, tid, 0x7F, RZ, 0xC0))
    saddr = p.r("saddr")
    sbase = p.ur("sc_addr")
    p.derive.into(sbase, "addr", stile.at(0, 0))
    p.emit(alu.imad(saddr, row, 16, sbase))  # 16 bytes a thread: rows 0..127 of 2 KiB
    p.emit(memory.stsm(Mem(saddr), frag))
    p.emit(memory.ldsm(frag, Mem(saddr)))
    p.emit(memory.sts(Mem(saddr, offset=0x800), frag[0]))  # a second, disjoint 2 KiB
    p.emit(memory.lds(frag[1], Mem(saddr, offset=0x800)))
    # a few more ALU and predicate forms
    t = p.r("t")
    u = p.ur("u")
    sel_p = p.p("sel_p")
    any_p = p.up("any_p")
    p.emit(alu.isetp("NE", sel_p, row, 0))
    p.emit(alu.sel(t, row, 7, sel_p))
    p.emit(alu.lea(t, t, row, 2))
    p.emit(alu.prmt(t, t, 0x3210, row))
    p.emit(alu.voteu_any(any_p, sel_p))
    p.emit(alu.uplop3_mov(any_p, any_p))
    p.emit(alu.umov(u, 5))
    p.emit(alu.usel(u, u, 9, any_p))
    p.emit(alu.ulea(u, u, u, 3))
    p.emit(control.warpsync_all())
    with p.when(any_p):  # a uniform predicate: BRA.U !any_p, SKIP_n
        p.emit(control.nop())
    p.emit(sync.nanosleep(0x20))
    p.emit(sync.fence_proxy_async())  # the staging tile's generic writes, before the copy engine reads it
    p.emit(sync.bar_arv(2, threads))  # an arrival nobody waits for (a barrier of its own)
    p.emit(sync.bar_sync(1, threads))
    ctx = p.when(only) if only is not None else contextlib.nullcontext()
    with ctx:
        ctaid, crow = p.r("ctaid"), p.r("c_row")
        p.emit(alu.s2r(ctaid, "SR_CTAID.X"))
        p.emit(alu.imad(crow, ctaid, 64, RZ))  # each CTA its own 64 rows of c
        with p.when(leader):
            tma_store(p, stile.at(0, 0), tc, [0, crow])
            tma_store(p, stile.at(0, 0), tc, [32, crow], reduce_add=True)
            p.emit(tma.bulk_commit())
            p.emit(tma.bulk_wait(0))
            pf = p.urvec("tma_pf", 2)
            p.emit(alu.umov(pf[0], 0))
            p.emit(alu.umov(pf[1], 0))
            p.emit(tma.tma_prefetch(Mem(pf), tc.name))
            p.emit(tma.tmap_prefetch(tc.name))
        optr = p.rvec("optr", 2)
        memdesc = p.urvec("memdesc", 2)
        nval = p.r("nval")
        p.emit(alu.ldc(optr, out.cbank()))
        p.emit(alu.imad_wide(optr, ctaid, 16, optr))  # this CTA's 16 bytes, past the first 1 KiB
        p.emit(alu.ldc(nval, n.cbank()))
        p.emit(alu.uldc(memdesc, CBank(0, p.target.memdesc), p.sm))
        p.emit(memory.ldg(frag[2], GMem(memdesc, optr, 0x400)))
        p.emit(alu.iadd3(frag[2], frag[2], nval))
        p.emit(memory.stg(GMem(memdesc, optr, 0x404), frag[2]).guarded(leader))
        p.emit(sync.membar("GPU"))
        # a flag between CTAs: raised with a GPU-scope reduction, read back with a GPU-scope load
        one = p.r("one")
        p.emit(alu.mov(one, 1))
        p.emit(memory.red_add(GMem(memdesc, optr, 0x408), one).guarded(leader))
        p.emit(memory.ldg_strong(frag[3], GMem(memdesc, optr, 0x408)))
        p.emit(memory.stg_strong(GMem(memdesc, optr, 0x40C), frag[3]).guarded(leader))
        # a bulk copy of 256 bytes from out into the staging tile, completing on bulk_bar (the TMA
        # stores above have finished reading the tile: bulk wait)
        gsrc = p.urvec("gsrc", 2)
        size = p.ur("size")
        cp = p.urvec("bulk_args", 2)
        nbytes = p.r("nbytes")
        p.emit(alu.uldc(gsrc, out.cbank(), p.sm))
        p.emit(alu.umov(size, 256))
        p.emit(alu.mov(nbytes, 256))
        p.derive.emit_at(bulk_bar.at(0), lambda b: sync.arrive_expect_tx(b, nbytes), guard=leader)
        p.derive.into(cp[0], "addr", stile.at(0, 0))
        p.derive.into(cp[1], "addr", bulk_bar.at(0))
        p.emit(tma.bulk_copy_s_g(Mem(cp), Mem(gsrc), size).guarded(leader))
        wait(p, bulk_bar.at(0), _zero(p))
        p.derive.emit_at(bulk_bar.at(0), lambda b: sync.mbar_inval(b), guard=leader)
    p.emit(sync.preexit())


EXAMPLES["example-features"] = lambda arch: features_sm90() if arch == "sm_90a" else features_sm100()


# -- the instruction set beyond GEMM: every float, packed, conversion, warp and atomic opcode ----------

MATH_THREADS = 64
MATH_IN = 8  # words a thread reads: four fp32 values, four raw words (packed halves, integers)
MATH_OUT = 56  # words a thread writes
MATH_CTR = MATH_THREADS + 4  # counter words: one a thread, then the warps' shared counter


def math_table(arch: str) -> Program:
    """Each of 64 threads (two warps) reads 8 words of `inp` (`inp[tid]`: fp32 f0..f3, raw w0..w3)
    and writes `out[tid][0..55]`: every fp32 op (FADD/FMUL/FFMA with .FTZ and directed rounding,
    FMNMX, FSETP, FSEL, MUFU), the packed 16-bit ops on w0..w3 read as bf16 and fp16 pairs, every
    conversion between f32, f16, bf16 and s32/u32, integer min/max, shuffles, a warp sum and max
    (the butterfly), votes and REDUX, global atomics on `ctr` (its own word: ADD, MAX.S32, CAS;
    then lane 0 of each warp adds 1 to the shared counter with acq_rel and every lane spins until
    both warps have), and the CTA's sum: each warp's sum through shared memory. The GPU test runs
    it on a table of edge-case inputs and compares every word with the checker's values
    (`tests/gpu/test_isa_gpu.py`)."""
    from warpy.isa.families.typed import BF16, BF16x2, F16, F16x2, F32, S32, U32
    from warpy.isa.units import flags
    from warpy.isa.units.warp import warp_reduce

    p = Program(f"example_math_{arch.split('_')[1]}", arch, threads=MATH_THREADS)
    inp, out, ctr = p.param("inp", "u64"), p.param("out", "u64"), p.param("ctr", "u64")
    p.global_buffer("inp", Layout((MATH_THREADS, MATH_IN), (4 * MATH_IN, 4)), "u32", source="inp")
    p.global_buffer("out", Layout((MATH_THREADS, MATH_OUT), (4 * MATH_OUT, 4)), "u32", source="out")
    p.global_buffer("ctr", Layout(MATH_CTR, 4), "u32", source="ctr")
    tid = p.r("tid")
    p.emit(alu.s2r(tid, "SR_TID.X"))
    md = p.urvec("memdesc", 2)
    p.emit(alu.uldc(md, CBank(0, p.target.memdesc), p.sm))
    ptrs = {}
    for prm, stride in ((inp, 4 * MATH_IN), (out, 4 * MATH_OUT), (ctr, 4)):
        base = p.rvec(f"{prm.name}_base", 2)
        p.emit(alu.ldc(base, prm.cbank()))
        ptrs[prm.name] = p.rvec(f"{prm.name}_at", 2)
        p.emit(alu.imad_wide(ptrs[prm.name], tid, stride, base))
    fv, wv = p.rvec("f", 4), p.rvec("w", 4)
    p.emit(memory.ldg(fv, GMem(md, ptrs["inp"]), "CONSTANT"))  # the table: nothing of this launch writes it
    p.emit(memory.ldg(wv, GMem(md, ptrs["inp"], 16), "EF"))  # (read once: evict first)
    f = [F32.of(fv[i]) for i in range(4)]
    w = [wv[i] for i in range(4)]
    o = p.rvec("o", MATH_OUT)
    of = [F32.of(o[k]) for k in range(MATH_OUT)]
    # fp32 arithmetic
    p.emit(alu.fadd(of[0], f[0], f[1]))
    p.emit(alu.fadd(of[1], f[0], -f[1], rnd="RZ", ftz=True))
    p.emit(alu.fmul(of[2], f[0], f[1]))
    p.emit(alu.fmul(of[3], f[1], f[2], rnd="RM"))
    p.emit(alu.ffma(of[4], f[0], f[1], f[2]))
    p.emit(alu.ffma(of[5], f[1], f[2], -f[3], rnd="RP", ftz=True))
    p.emit(alu.fmin(of[6], f[0], f[1]))
    p.emit(alu.fmax(of[7], f[2], f[3], nan=True))
    lt, geu = p.p("f_lt"), p.p("f_geu")
    p.emit(alu.fsetp("LT", lt, f[0], f[1]))
    p.emit(alu.fsel(of[8], f[2], f[3], lt))
    p.emit(alu.fsetp("GEU", geu, f[2], f[3], ftz=True))
    p.emit(alu.sel(o[9], 1, RZ, geu))
    for k, fn in enumerate(alu.MUFU_FUNCS):
        p.emit(alu.mufu(fn, of[10 + k], f[k]))
    # packing and packed 16-bit arithmetic
    p.emit(alu.f2fp(BF16x2.of(o[14]), f[0], f[1]))
    p.emit(alu.f2fp(F16x2.of(o[15]), f[2], f[3], rnd="RZ"))
    b = [BF16x2.of(x) for x in w]
    h = [F16x2.of(x) for x in w]
    p.emit(alu.hadd2(BF16x2.of(o[16]), b[0], b[1]))
    p.emit(alu.hmul2(F16x2.of(o[17]), h[2], h[3]))
    p.emit(alu.hfma2(BF16x2.of(o[18]), b[0], b[1], b[2]))
    p.emit(alu.hfma2(F16x2.of(o[19]), h[1], h[2], h[3]))
    p.emit(alu.hmin2(BF16x2.of(o[20]), b[0], b[1]))
    p.emit(alu.hmax2(F16x2.of(o[21]), h[2], h[3], nan=True))
    # conversions (a 16-bit source is bits 0-15 of its word)
    p.emit(alu.f2f(of[22], BF16.of(w[0])))
    p.emit(alu.f2f(of[23], F16.of(w[1])))
    p.emit(alu.f2f(BF16.of(o[24]), F16.of(w[2])))
    p.emit(alu.f2f(F16.of(o[25]), BF16.of(w[3])))
    p.emit(alu.f2f(F16.of(o[26]), f[0]))
    p.emit(alu.f2f(BF16.of(o[27]), f[1]))
    p.emit(alu.i2f(of[28], S32.of(w[0])))
    p.emit(alu.i2f(F16.of(o[29]), U32.of(w[1])))
    p.emit(alu.i2f(BF16.of(o[30]), S32.of(w[2])))
    p.emit(alu.i2f(of[31], U32.of(w[3]), rnd="RZ"))
    p.emit(alu.f2i(S32.of(o[32]), f[0]))
    p.emit(alu.f2i(U32.of(o[33]), f[1], rnd="CEIL"))
    p.emit(alu.f2i(S32.of(o[34]), F16.of(w[2]), rnd="RN"))
    p.emit(alu.f2i(S32.of(o[35]), BF16.of(w[3]), rnd="FLOOR"))
    p.emit(alu.imin(o[36], w[0], w[1], arch=arch))
    p.emit(alu.imax(o[37], w[2], w[3], unsigned=True, arch=arch))
    # warp communication
    src = p.r("src_lane")
    p.emit(alu.lop3(src, w[2], 0x1F, RZ, 0xC0))
    p.emit(alu.shfl_bfly(o[38], w[0], 1))
    p.emit(alu.shfl_idx(o[39], w[1], src))
    in_range = p.p("in_range")
    p.emit(alu.shfl_down(o[40], w[3], 3, p=in_range))
    p.emit(alu.sel(o[41], 1, RZ, in_range))
    p.emit(alu.mov(o[42], f[0]))
    warp_reduce(p, of[42], "sum")
    p.emit(alu.mov(o[43], f[1]))
    warp_reduce(p, of[43], "max")
    p.emit(alu.ballot(o[44], lt))
    all_geu = p.p("all_geu")
    p.emit(alu.vote_all(all_geu, geu))
    p.emit(alu.sel(o[45], 1, RZ, all_geu))
    sums, most = p.ur("lane_sum"), p.ur("lane_max")
    p.emit(alu.redux("SUM", sums, w[0]))
    p.emit(alu.redux("MAX", most, w[1], signed=True))
    p.emit(alu.mov(o[46], sums))
    p.emit(alu.mov(o[47], most))
    # atomics: each thread's own counter word, then the warps' shared one and a spin until both added
    mine = GMem(md, ptrs["ctr"])
    one = p.r("one")
    p.emit(alu.mov(one, 1))
    flags.atomic(p, "ADD", o[48], mine, one, order="relaxed")
    flags.atomic(p, "MAX", o[49], mine, w[1], order="release", signed=True)
    flags.atomic_cas(p, o[50], mine, o[49], w[2], order="acquire")
    lane, lane0 = p.r("lane"), p.p("lane0")
    p.emit(alu.s2r(lane, "SR_LANEID"))
    p.emit(alu.isetp("EQ", lane0, lane, 0))
    base = p.rvec("ctr_base", 2)
    shared = GMem(md, base, 4 * MATH_THREADS)
    with p.when(lane0):
        flags.atomic(p, "ADD", p.r("before"), shared, one, order="acq_rel")
    seen = flags.spin_wait(p, shared, MATH_THREADS // 32, seen="seen")
    p.emit(alu.mov(o[51], seen))
    p.emit(memory.red("MAX", GMem(md, base, 4 * MATH_THREADS + 4), w[0]))
    p.emit(memory.red("ADD", GMem(md, base, 4 * MATH_THREADS + 8), f[0]))
    # the CTA's sum: lane 0 of each warp leaves its warp's sum in shared memory, every thread adds both
    part = p.smem("part", Layout(MATH_THREADS // 32, 4), "fp32")
    pbase, poff = p.derive.value_reg("addr", part.at(0))
    warp4 = p.r("warp4")
    p.emit(alu.shf_r(warp4, tid, 5))
    p.emit(alu.shf_l(warp4, warp4, 2))
    p.emit(memory.sts(Mem(warp4, pbase, poff), o[42]).guarded(lane0))
    p.emit(sync.bar_sync(0))
    halves = p.rvec("halves", 2)
    p.emit(memory.lds(halves, Mem(None, pbase, poff)))
    p.emit(alu.fadd(of[52], F32.of(halves[0]), F32.of(halves[1])))
    p.emit(alu.redux("MIN", sums, w[1]))
    p.emit(alu.redux("OR", most, w[2]))
    p.emit(alu.mov(o[53], sums))
    p.emit(alu.mov(o[54], most))
    p.emit(alu.ballot(o[55], in_range))
    for j in range(MATH_OUT // 4):
        p.emit(memory.stg(GMem(md, ptrs["out"], 16 * j), o.sub(4 * j, 4)))
    p.emit(control.exit_())
    return p


EXAMPLES["example-math"] = math_table
