"""Example programs: a TMA producer and an MMA consumer over a 4-stage pipe, for sm_90a and sm_100a.

They are small but complete kernels (the lifter assembles them, the checker runs them): one CTA
computes C = A · Bᵀ for A (M x K) and B (N x K), both bf16 K-major behind tensor maps, with fp32
accumulation, and each thread stores its accumulator registers to a scratch buffer `out` in the
order it holds them (`c[thread][value]`, 4-byte floats): the wgmma fragment layout on sm_90a, one
TMEM lane's columns on sm_100a.

- `pipe_sm90`: 256 threads. Warpgroup 0 (warps 0-3) is the consumer: HGMMA 64x128x16 from both
  rings into 64 accumulator registers; each warp's elected lane frees a stage (4 arrivals).
  Warpgroup 1 gives registers back (USETMAXREG) and its warp 4 is the producer: waits for an empty
  stage, arms the full barrier with the stage's bytes, and issues two TMA loads.
- `pipe_sm100`: 192 threads. Warp 0 is the producer as above; warp 1 allocates 128 TMEM columns
  and issues UTCHMMA (M=128, N=128, K=16 steps), freeing each stage with UTCBAR and signalling
  the accumulator with a last UTCBAR; warps 2-5 read their 32 TMEM lanes with LDTM and store them.

`EXAMPLES` maps the names `warpy expand` knows to builders.
"""

from __future__ import annotations

from typing import Callable

from warpy.isa.families import alu, blackwell, control, hopper, memory, sync
from warpy.isa.operands import RZ, URZ, CBank, GMem, Mem
from warpy.isa.program import Program
from warpy.layout import Layout, Swizzle, SwizzledLayout
from warpy.layout.tma import TmaBox

SW128 = Swizzle(3, 4, 3)


def k_major_tile(rows: int, k: int = 64, elem_bytes: int = 2) -> SwizzledLayout:
    """A K-major tile of `rows` x `k` with the 128-byte swizzle: coordinates (row, k) -> bytes."""
    assert k * elem_bytes == 128, "one 128-byte swizzle column"
    return SwizzledLayout(SW128, Layout((rows, k), (128, elem_bytes)))


def umma_idesc_bf16(m: int, n: int) -> int:
    """The 32-bit instruction descriptor of tcgen05.mma kind::f16, bf16 x bf16 -> f32, K-major."""
    return (1 << 4) | (1 << 7) | (1 << 10) | ((n >> 3) << 17) | ((m >> 4) << 24)


def pipe_sm90(k_tiles: int = 8, depth: int = 4) -> Program:
    m, n, tk = 64, 128, 64
    k_total = k_tiles * tk
    p = Program("example_pipe_sm90", "sm_90a", threads=256, maxnreg=168)
    ta = p.tmap("a", TmaBox("bf16", (k_total, m), (k_total * 2,), (tk, m), swizzle=128))
    tb = p.tmap("b", TmaBox("bf16", (k_total, n), (k_total * 2,), (tk, n), swizzle=128))
    c = p.param("out", "u64")
    sa = p.smem_ring("sa", depth, k_major_tile(m), "bf16")
    sb = p.smem_ring("sb", depth, k_major_tile(n), "bf16")
    stage = p.pipe("stage", depth, fills=1, frees=4)
    p.init_barriers()

    with p.role("producer", range(4, 8)):
        p.emit(hopper.setmaxnreg_dealloc(40))
        warp = p.warp_index()
        w4 = p.p("is_loader")
        p.emit(alu.isetp("EQ", w4, warp, 4))
        with p.when(w4):
            leader = p.elect()
            out = stage.producer("ps")
            with p.loop("k", k_tiles) as k:
                with out.stage():
                    out.wait_empty()
                    out.arrive_full(leader, tx_bytes=(m + n) * tk * 2)
                    p.tma_load(out.slot(sa), ta, [k * tk, 0], out.full)
                    p.tma_load(out.slot(sb), tb, [k * tk, 0], out.full)

    with p.role("consumer", range(0, 4)):
        ok = p.up("regs_granted")
        grow = p.fresh_label("GROW")
        p.label(grow)
        p.emit(hopper.setmaxnreg_try_alloc(ok, 232))
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
                p.emit(hopper.warpgroup_arrive())
                for j in range(tk // 16):
                    p.hgmma(acc, inp.slot(sa, 0, 16 * j), inp.slot(sb, 0, 16 * j), n,
                            accumulate if j == 0 else True, end=j == tk // 16 - 1)
                p.emit(hopper.wgmma_commit())
                p.emit(hopper.warpgroup_wait(0))
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


def pipe_sm100(k_tiles: int = 8, depth: int = 4) -> Program:
    m, n, tk = 128, 128, 64
    k_total = k_tiles * tk
    p = Program("example_pipe_sm100", "sm_100a", threads=192)
    ta = p.tmap("a", TmaBox("bf16", (k_total, m), (k_total * 2,), (tk, m), swizzle=128))
    tb = p.tmap("b", TmaBox("bf16", (k_total, n), (k_total * 2,), (tk, n), swizzle=128))
    c = p.param("out", "u64")
    sa = p.smem_ring("sa", depth, k_major_tile(m), "bf16")
    sb = p.smem_ring("sb", depth, k_major_tile(n), "bf16")
    stage = p.pipe("stage", depth, fills=1, frees=1)
    acc_full = p.barriers("acc_full", 1, count=1)
    tmem_slot = p.smem_words("tmem_slot", 1)
    acc = p.tmem("acc", Layout((m, n), (1 << 16, 1)), n)
    p.init_barriers()

    # warp 1 allocates the accumulator's columns; everyone reads the address after a CTA barrier
    warp = p.warp_index()
    w1 = p.p("is_mma_warp")
    p.emit(alu.isetp("EQ", w1, warp, 1))
    with p.when(w1):
        p.emit_at(tmem_slot.at(0), lambda a: blackwell.tmem_alloc(a, n))
        p.emit(blackwell.tmem_relinquish())
    p.emit(sync.bar_sync(0))
    tword = p.r("tmem_word")
    p.emit_at(tmem_slot.at(0), lambda a: memory.lds(tword, a))
    p.tmem_base = p.ur("tmem_base")
    p.emit(alu.r2ur(p.tmem_base, tword))

    with p.role("producer", range(0, 1)):
        leader = p.elect()
        out = stage.producer("ps")
        with p.loop("k", k_tiles) as k:
            with out.stage():
                out.wait_empty()
                out.arrive_full(leader, tx_bytes=(m + n) * tk * 2)
                p.tma_load(out.slot(sa), ta, [k * tk, 0], out.full)
                p.tma_load(out.slot(sb), tb, [k * tk, 0], out.full)

    with p.role("mma", range(1, 2)):
        first = p.ur("first")
        accumulate = p.up("accumulate")
        p.emit(alu.umov(first, 0))
        inp = stage.consumer("cs")
        with p.loop("k", k_tiles):
            with inp.stage():
                p.emit(alu.uisetp("NE", accumulate, first, URZ))
                inp.wait_full()
                for j in range(tk // 16):
                    p.utchmma(inp.slot(sa, 0, 16 * j), inp.slot(sb, 0, 16 * j), acc.at(0, 0),
                              umma_idesc_bf16(m, n), accumulate if j == 0 else True)
                p.emit(alu.umov(first, 1))
                inp.free_commit()
        p.emit_at(acc_full.at(0), lambda b: blackwell.utcbar(b))
        # the accumulator is read by the epilogue; the MMA warp frees the columns at the end
        p.wait(acc_full.at(0), _zero(p))
        p.emit(blackwell.tmem_dealloc(p.tmem_base, n))

    with p.role("epilogue", range(2, 6)):
        p.wait(acc_full.at(0), _zero(p))
        p.emit(blackwell.tc_fence_after())
        quarter = p.r("quarter")
        lanes = p.ur("lanes")
        taddr = p.ur("taddr")
        p.emit(alu.lop3(quarter, warp, 3, RZ, 0xC0))
        p.emit(alu.shf_l(quarter, quarter, 21))  # (32 * (warp % 4)) << 16: this warp's TMEM lanes
        p.emit(alu.r2ur(lanes, quarter))
        v = p.rvec("v", 32)
        tid = p.r("tid")
        row = p.r("row")
        cptr = p.rvec("cptr", 2)
        caddr = p.rvec("caddr", 2)
        memdesc = p.urvec("memdesc", 2)
        p.emit(alu.ldc(cptr, c.cbank()))
        p.emit(alu.uldc(memdesc, CBank(0, 0x358), p.sm))
        p.emit(alu.iadd3(row, tid, -64))
        p.emit(alu.imad_wide(caddr, row, 4 * n, cptr))
        for chunk in range(n // 32):
            p.emit(alu.uiadd3(taddr, p.tmem_base, lanes, 32 * chunk))
            p.emit(blackwell.ldtm(v, taddr))
            p.emit(blackwell.tmem_wait_ld())
            for j in range(8):
                p.emit(memory.stg(GMem(memdesc, caddr, 128 * chunk + 16 * j), v.sub(4 * j, 4)))
    p.emit(control.exit_())
    return p


def _zero(p: Program):  # type: ignore[no-untyped-def]
    """A parity register for the first phase (parity 0)."""
    z = p.r("phase0")
    p.emit(alu.mov(z, 0))
    return z


EXAMPLES: dict[str, Callable[[str], Program]] = {
    "example-pipe": lambda arch: pipe_sm90() if arch == "sm_90a" else pipe_sm100(),
}

_ = (Mem, sync)
