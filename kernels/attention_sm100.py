"""Forward attention on Blackwell (sm_100a): O = softmax(scale · Q·Kᵀ, masked) · V, bf16 in and out,
fp32 scores and accumulators in tensor memory, one CTA per 128 x `tiles` queries of one (batch,
head). Configured by the attention family's rule (`kernels/attention.py`); docs/attention.md
("Blackwell") describes the program. It has never run on a B200: ptxas, the disassembly and the
host checker (with values) are its evidence.

Warp-specialised, 128 (1 + tiles) threads, every MMA `tcgen05.mma.cta_group::1` (`UTCHMMA`,
M = 128). With `tiles = 2` (the rule's choice) the CTA takes two 128-query tiles, one softmax
warpgroup each (warps 4-7, 8-11), and the MMA warp alternates between them, so that one
warpgroup's softmax runs while the tensor core serves the other tile (FlashAttention-4's
arrangement); with `tiles = 1` one warpgroup takes one tile and S is double-buffered instead.
The roles:

- warp 0, the **loader**: Q's tiles once (128 x D each), then K(n) and V(n) by TMA into their
  rings (128-byte swizzle; rows past the sequence land as zeros);
- warp 1, the **MMA warp** (one thread issues; it also allocates and frees the tensor memory):
  S_i(n) = Q_i·K(n)ᵀ (SS form: both from shared memory) into tile i's S in tensor memory,
  committed to `s_full[i]`; once the softmax has written P_i(n) into tensor memory (`p_full[i]`),
  O_i (+)= P_i(n)·V(n) (TS form: A = P_i from tensor memory, B = Vᵀ(n) from shared memory). Two
  tiles: per block P_0·V, S_0(n+1), P_1·V, S_1(n+1) (S_i(n+1) overwrites P_i(n)'s columns after
  the queue has run P_i(n)·V, and its commit tells the softmax O_i is up to date); `o_done[i]` once
  at the end. One tile: S(n+1) into the other of two S buffers before P(n)·V(n), `o_done` after
  every P·V;
- warps 2-3, the **transposers**: the tensor core reads B K-major here (the checker models K-major
  shared-memory operands only), and V's rows are P·V's K, so each landed V tile becomes Vᵀ
  (`LDSM.16.MT88.4` / `STSM.16.M88.4`, as on sm_90a) in a third ring;
- warps 4-7 (and 8-11), the **softmax warpgroup** of tile i (thread = query row = tensor-memory
  lane): LDTM its row of S_i(n), mask, row maximum, base-2 exponentials (`MUFU.EX2` of
  `FFMA(s, scale·log2 e, -max)`), the row sum, P packed to bf16 pairs; it rescales O_i in tensor
  memory if its warp's maximum moved past the threshold (LDTM, FMUL, STTM: the **correction**,
  done by the row's own thread; one tile: after waiting for P(n-1)·V(n-1), `o_done`), STTMs
  P_i(n) and arrives on `p_full[i]`. At the end: O / l from tensor memory, bf16, STS over Q_i's
  buffer (swizzled), TMA store clipped at S_q.

Tensor memory (512 columns allocated). tiles = 1: O at columns [0, D), S(0) and S(1) at
[D, D + 2 BN), P at [D + 2 BN, D + 2 BN + BN/2) (bf16 pairs: column k/2 holds keys k, k+1 of the
row). tiles = 2: tile i's O at [i (D + BN), i (D + BN) + D), its S after it (BN columns), its P in
the first BN/2 columns of its S (written once S has been read; S(n+1) is issued after P(n)·V(n)).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Union

import attrs

from warpy.errors import WarpyError
from warpy.isa.buffers import BarrierArray, SmemBuffer, TmemBuffer, TmemRef
from warpy.isa.families import alu, control, memory, sync, tcgen05
from warpy.isa.families.typed import BF16x2, F32
from warpy.isa.index import Lane, Ring
from warpy.isa.operands import RZ, URZ, P, R, RVec, UP, UR
from warpy.isa.pipes import init_barriers, wait
from warpy.isa.program import Program
from warpy.isa.units.tcgen05 import utchmma, utchmma_ts
from warpy.isa.units.tma import tma_load
from warpy.layout import Layout
from warpy.layout.desc import umma_idesc
from warpy.target import SM100A

from .attention_common import (BM, AttentionBuilder, AttentionResources, TileOfCta, grow_registers, pack_pairs,
                               raise_max, reduce4, ring_smem_bytes)

if TYPE_CHECKING:
    from .attention import AttentionProblem

TRANSPOSERS = 2  # warps 2, 3
TMEM_COLS = 512
FREE_BAR = 1  # named barrier 1: the softmax warpgroups tell the MMA warp the tensor memory is done
EPI_BAR = 2  # named barriers 2, 3: softmax warpgroup i's epilogue (128 threads)
MAXNREG = 248  # one tile (256 threads)
PRODUCER_REGS = 72  # two tiles (384 threads): the loader/MMA/transposer warpgroup gives back to 72
SOFTMAX_REGS = 216  # and the softmax warpgroups take 216 (72 + 2 x 216 = 504 <= 512)


@attrs.frozen
class Sm100AttentionConfig:
    """One configuration of the sm_100a program: the key/value block (BN keys a step; the CTA takes
    128 queries), ring depths (K as loaded, V as loaded, V transposed) and how far (log2 units) a
    row's maximum may grow before O is rescaled."""

    bn: int = 128
    k_stages: int = 2
    v_stages: int = 2
    t_stages: int = 2
    rescale_threshold: int = 8
    tiles: int = 2

    def describe(self) -> str:
        how = ("two 128-query tiles, a softmax warpgroup each, the MMA warp alternating between them" if self.tiles == 2
               else "one 128-query tile, S double-buffered in tensor memory")
        return (f"sm_100a warp-specialised attention: {BM * self.tiles} queries x {self.bn} keys a step ({how}), "
                f"tcgen05 (UTCHMMA 128x{self.bn} SS for S, 128xD TS for P·V with P in tensor memory), TMA rings "
                f"K {self.k_stages} / V {self.v_stages} / Vᵀ {self.t_stages} stages (V transposed by LDSM.T/STSM), "
                f"O rescaled in tensor memory when the maximum grows past 2^{self.rescale_threshold}")


def smem_bytes(cfg: Sm100AttentionConfig, d: int) -> int:
    """Dynamic shared memory: Q (tiles x 128 x D, O's staging at the end), the K, V and Vᵀ rings, barriers."""
    return ring_smem_bytes(cfg, d, cfg.tiles * BM)


def tmem_columns(cfg: Sm100AttentionConfig, d: int) -> int:
    """Tensor-memory columns the program uses (O, S and P of each tile)."""
    if cfg.tiles == 1:
        return d + 2 * cfg.bn + cfg.bn // 2
    return cfg.tiles * (d + cfg.bn)


@attrs.frozen(kw_only=True)
class Sm100AttentionResources(AttentionResources):
    """What the roles share besides what every target's do (`AttentionResources`: the tensor maps,
    Q's tiles, the rings, the pipes): the tensor-memory slot, each tile's tensor-memory buffers
    (O, S, P) and barriers (s_full, p_full, o_done), and the register holding the allocation's
    address."""

    tmem_slot: SmemBuffer
    o_tm: tuple[TmemBuffer, ...]
    s_tm: tuple[TmemBuffer, ...]
    p_tm: tuple[TmemBuffer, ...]
    s_full: tuple[BarrierArray, ...]
    p_full: tuple[BarrierArray, ...]
    o_done: tuple[BarrierArray, ...]
    tmem_base: UR


@attrs.frozen
class Row:
    """A softmax thread's state and constants: its row's maximum (scaled, log2 units) and sum, the
    scale · log2 e, the threshold, -inf, the row's mask limit (keys before it are seen), its
    tensor-memory lane offset (uniform: the warp's first lane << 16), the lane index of the warp's
    first lane, and its row in the CTA's tile (a lane index)."""

    mx: F32
    l: F32
    c: F32
    thr: F32
    neg_inf: F32
    lim: R
    uwofs: UR
    wl_ix: Lane
    row_ix: Lane


class Sm100Attention(AttentionBuilder):
    """The program builder for one problem and configuration."""

    def __init__(self, problem: AttentionProblem, cfg: Sm100AttentionConfig) -> None:
        if cfg.tiles not in (1, 2):
            raise WarpyError(f"tiles={cfg.tiles}: a CTA takes 1 or 2 tiles of 128 queries")
        self.setup(problem, cfg, SM100A, BM * cfg.tiles, smem_bytes(cfg, problem.D), TRANSPOSERS)
        if tmem_columns(cfg, problem.D) > TMEM_COLS:
            raise WarpyError(f"{cfg.describe()} needs {tmem_columns(cfg, problem.D)} tensor-memory columns for "
                             f"D={problem.D}, more than {TMEM_COLS}")
        self.cfg: Sm100AttentionConfig = cfg
        self.tiles = cfg.tiles
        self.threads = 128 * (1 + cfg.tiles)

    @property
    def name(self) -> str:
        c = self.cfg
        return f"{self.name_stem}_t{c.rescale_threshold}_x{c.tiles}"

    # -- the program ---------------------------------------------------------------------------
    def build(self) -> Program:
        cfg, d, bn, tiles = self.cfg, self.d, self.bn, self.tiles
        # one CTA an SM (the rings fill shared memory): one tile's 256 threads may take 248 registers;
        # two tiles' 384 start at 168 and move them to the softmax warpgroups (USETMAXREG)
        p = Program(self.name, SM100A.name, threads=self.threads, grid=(self.grid, 1, 1),
                    maxnreg=MAXNREG if tiles == 1 else (65536 // self.threads) // 8 * 8)
        ops = self.operands(p, BM, tiles)  # a Q "stage" a tile
        q_full = p.barriers("q_full", 1, count=1)
        s_depth = 2 if tiles == 1 else 1
        # a commit: S(n) is in its buffer / softmax warps' arrivals: P(n) written, O rescaled /
        # a commit: P(n)·V(n) and every MMA before it done
        s_full = tuple(p.barriers(f"s_full{i}", s_depth, count=1) for i in range(tiles))
        p_full = tuple(p.barriers(f"p_full{i}", 1, count=4) for i in range(tiles))
        o_done = tuple(p.barriers(f"o_done{i}", 1, count=1) for i in range(tiles))
        kpipe = p.pipe("kv_k", cfg.k_stages, fills=1, frees=1)
        vpipe = p.pipe("kv_v", cfg.v_stages, fills=1, frees=TRANSPOSERS)
        tpipe = p.pipe("kv_vt", cfg.t_stages, fills=TRANSPOSERS, frees=1)
        tmem_slot = p.smem_words("tmem_slot", 1)
        lane = 1 << 16
        o_tm, s_tm, p_tm = [], [], []
        for i in range(tiles):
            sfx = str(i) if tiles > 1 else ""
            o0 = i * (d + bn)
            o_tm.append(p.tmem(f"o{sfx}", Layout((BM, d), (lane, 1)), d, base=o0))
            s_tm.append(p.tmem(f"s{sfx}", Layout((s_depth, BM, bn), (bn, lane, 1)), s_depth * bn, base=o0 + d))
            p0 = o0 + d + (2 * bn if tiles == 1 else 0)  # one tile: after both S; two: over the tile's S
            p_tm.append(p.tmem(f"p{sfx}", Layout((BM, bn // 2), (lane, 1)), bn // 2, elem="bf16", base=p0))
        init_barriers(p)
        # warp 1 allocates the tensor memory; the CTA barrier orders it before every role's use
        warp = p.warp_index()
        w1 = p.p("is_warp1")
        p.emit(alu.isetp("EQ", w1, warp, 1))
        with p.when(w1):
            p.derive.emit_at(tmem_slot.at(0), lambda a: tcgen05.tmem_alloc(a, TMEM_COLS))
            p.emit(tcgen05.tmem_relinquish())
        p.emit(tcgen05.tc_fence_before())
        p.emit(sync.bar_sync(0))
        p.emit(tcgen05.tc_fence_after())
        tmem_base = p.ur("tmem_base")
        p.derive.tmem_base = tmem_base
        tword = p.r("tmem_word")  # every thread reads the allocation's address (the roles' derived ones follow it)
        p.derive.emit_at(tmem_slot.at(0), lambda a: memory.lds(tword, a))
        p.emit(alu.r2ur(tmem_base, tword))
        res = Sm100AttentionResources.of(ops, q_full=q_full, kpipe=kpipe, vpipe=vpipe, tpipe=tpipe, tmem_slot=tmem_slot,
                                         o_tm=tuple(o_tm), s_tm=tuple(s_tm), p_tm=tuple(p_tm),
                                         s_full=s_full, p_full=p_full, o_done=o_done, tmem_base=tmem_base)
        with p.role("producer", range(0, 4)):
            if tiles > 1:
                p.emit(control.setmaxnreg_dealloc(PRODUCER_REGS))
            t = self.tile(p)
            for name, warps in (("loader", (0,)), ("mma", (1,)), ("transposer", (2, 3))):
                mine = p.p(f"is_{name}")
                p.emit(alu.isetp("GE", mine, warp, warps[0]))
                p.emit(alu.isetp("LE", mine, warp, warps[-1], c=mine))
                with p.when(mine):
                    if name == "loader":
                        self.loader(p, res, t)
                    elif name == "mma":
                        self.mma(p, res, t)
                    else:
                        self.transposer(p, res, t)
        for i in range(tiles):
            with p.role(f"softmax{i}", range(4 + 4 * i, 8 + 4 * i)):
                if tiles > 1:
                    grow_registers(p, SOFTMAX_REGS)
                self.softmax_role(p, res, self.tile(p), i)
        p.emit(control.exit_())
        return p

    # -- warp 0: the loader ----------------------------------------------------------------------
    def loader(self, p: Program, res: Sm100AttentionResources, t: TileOfCta) -> None:
        leader = self.prefetch_maps(p, res)
        q_row, txq = p.r("q_row"), p.r("tx_q")
        p.emit(alu.mov(txq, self.tiles * res.tq.box.box_bytes))
        p.derive.emit_at(res.q_full.at(0), lambda m: sync.arrive_expect_tx(m, txq), guard=leader)
        for i in range(self.tiles):
            p.emit(alu.imad(q_row, t.m_block, self.bm, BM * i))
            tma_load(p, res.sq.at(i, 0, 0), res.tq, self.coords(q_row, t.h, t.b), res.q_full.at(0), guard=leader)
        self.load_kv(p, res, t, leader)

    # -- warp 1: the MMA warp -------------------------------------------------------------------
    def fence_after_wait(self, p: Program) -> None:
        """tcgen05.fence::after_thread_sync: what a wait brought orders this warp's next tcgen05 work."""
        p.emit(tcgen05.tc_fence_after())

    def fence_before_handoff(self, p: Program) -> None:
        """tcgen05.fence::before_thread_sync: this warp's completed tensor-memory loads and stores go
        with its next synchronisation."""
        p.emit(tcgen05.tc_fence_before())

    def mma(self, p: Program, res: Sm100AttentionResources, t: TileOfCta) -> None:
        """One tile: S(0); for each block n: S(n+1) into the other S buffer (if any), then P(n)·V(n).
        Two tiles: S0(0), S1(0); for each block n: P0(n)·V(n), S0(n+1), P1(n)·V(n), S1(n+1) (S(n+1)
        overwrites the columns P(n) was read from: the queue orders it after P(n)·V(n)), the last
        block without the S. Every wait is followed by tcgen05.fence::after_thread_sync."""
        d, bn = self.d, self.bn
        idesc_s = umma_idesc("bf16", "bf16", "f32", BM, bn, "K", "K")
        idesc_o = umma_idesc("bf16", "bf16", "f32", BM, d, "K", "K", a_from_tmem=True)
        zero = p.r("phase0")
        p.emit(alu.mov(zero, 0))
        wait(p, res.q_full.at(0), zero)
        kin = res.kpipe.consumer("mk")
        vin = res.tpipe.consumer("mv")
        o_started, acc_o = p.ur("o_started"), p.up("acc_o")
        p.emit(alu.umov(o_started, 0))
        p_rings = [p.ring(f"p_wait{i}", 1) for i in range(self.tiles)]

        def s_mmas(i: int, stage: Union[int, Ring]) -> None:
            """S_i = Q_i·Kᵀ from K's current stage into S buffer `stage` of tile i, committed to s_full."""
            for j in range(d // 16):
                utchmma(p, res.sq.at(i, 0, 16 * j), kin.slot(res.sk, 0, 16 * j), res.s_tm[i].at(stage, 0, 0), idesc_s,
                        j > 0)
            p.derive.emit_at(res.s_full[i].at(stage), lambda b: tcgen05.utcbar(b))

        def pv(i: int) -> None:
            """Wait for P_i(n); O_i (+)= P_i(n)·Vᵀ(n) from Vᵀ's current stage."""
            with p.ring_iteration(p_rings[i]):
                wait(p, res.p_full[i].at(0), p_rings[i].parity)
            self.fence_after_wait(p)
            for j in range(bn // 16):
                utchmma_ts(p, res.p_tm[i].at(0, 8 * j), vin.slot(res.st, 0, 16 * j), res.o_tm[i].at(0, 0), idesc_o,
                           acc_o if j == 0 else True)

        if self.tiles == 1:
            s_ring = p.ring("s_fill", 2)

            def scores() -> None:
                with p.ring_iteration(s_ring):
                    with kin.stage():
                        kin.wait_full()
                        self.fence_after_wait(p)
                        s_mmas(0, s_ring)
                        kin.free_commit()

            scores()  # S(0)
            with p.loop("kv", t.n_blocks, max_count=self.n_max) as n:
                nxt = p.p("has_next")
                n1 = p.r("n_plus1")
                p.emit(alu.iadd3(n1, n.reg, 1))
                p.emit(alu.isetp("LT", nxt, n1, t.n_blocks))
                with p.when(nxt):
                    scores()  # S(n+1): its buffer's P(n-1)·V(n-1) was issued last iteration (the queue orders it)
                with vin.stage():
                    vin.wait_full()
                    p.emit(alu.uisetp("NE", acc_o, o_started, URZ))
                    pv(0)
                    p.emit(alu.umov(o_started, 1))
                    vin.free_commit()
                p.derive.emit_at(res.o_done[0].at(0), lambda b: tcgen05.utcbar(b))
        else:
            with kin.stage():  # S0(0), S1(0)
                kin.wait_full()
                self.fence_after_wait(p)
                for i in range(self.tiles):
                    s_mmas(i, 0)
                kin.free_commit()
            more = self.blocks_after_first(p, t)
            skip = p.fresh_label("LAST_BLOCK")
            p.emit(control.bra(skip).guarded(~more[1]))
            with p.loop("kv", more[0], max_count=max(1, self.n_max - 1)):
                with vin.stage():
                    vin.wait_full()
                    p.emit(alu.uisetp("NE", acc_o, o_started, URZ))
                    with kin.stage():
                        for i in range(self.tiles):
                            pv(i)
                            if i == 0:
                                kin.wait_full()
                                self.fence_after_wait(p)
                            s_mmas(i, 0)
                        kin.free_commit()
                    p.emit(alu.umov(o_started, 1))
                    vin.free_commit()
            p.label(skip)
            with vin.stage():  # the last block's P·V
                vin.wait_full()
                p.emit(alu.uisetp("NE", acc_o, o_started, URZ))
                for i in range(self.tiles):
                    pv(i)
                vin.free_commit()
            for i in range(self.tiles):
                p.derive.emit_at(res.o_done[i].at(0), lambda b: tcgen05.utcbar(b))
        # the softmax warpgroups have read O for the last time: free the tensor memory
        p.emit(sync.bar_sync(FREE_BAR, 32 + 128 * self.tiles))
        self.fence_after_wait(p)
        p.emit(tcgen05.tmem_dealloc(res.tmem_base, TMEM_COLS))

    def blocks_after_first(self, p: Program, t: TileOfCta) -> tuple[R, P]:
        """n_blocks - 1 in a register and whether it is positive."""
        nm1 = p.r("more_blocks")
        if isinstance(t.n_blocks, int):
            p.emit(alu.mov(nm1, t.n_blocks - 1))
        else:
            p.emit(alu.iadd3(nm1, t.n_blocks, (1 << 32) - 1))
        more = p.p("has_more_blocks")
        p.emit(alu.isetp("GT", more, nm1, 0))
        return nm1, more

    # -- warps 2-3: the transposers ---------------------------------------------------------------
    def transposer(self, p: Program, res: Sm100AttentionResources, t: TileOfCta) -> None:
        """Vᵀ from V, 32 keys x 8 columns at a time (`LDSM.16.M88.4.T` from the landed tile, lane l
        addressing row 32a + l at column 8c; `STSM.16.M88.4` into rows 8c + l % 8 of Vᵀ at column
        32a + 8 (l / 8)); each warp takes the pairs of its index (warp 2 or 3) with the same code,
        its immediates chosen by a uniform branch. Swizzled offsets are a per-lane register (8 for
        the loads, 2 for the stores) plus an immediate checked against the layouts for every lane."""
        lanes = self.transposer_lanes(p)
        leader = p.elect("t_leader")
        vin = res.vpipe.consumer("tv")
        vout = res.tpipe.producer("tt")
        regs = [p.rvec(f"t_frag{j}", 4) for j in range(2)]
        second = p.p("t_second")
        p.emit(alu.isetp("EQ", second, R("warp"), 3))

        def both(ld: tuple[UR, int], st: tuple[UR, int]) -> None:
            done = p.fresh_label("T_DONE")
            for i in range(TRANSPOSERS):
                other = p.fresh_label("T_OTHER")
                if i == 0:
                    p.emit(control.bra(other).guarded(second))
                self.transpose_share(p, res, vin, vout, lanes, regs, i, ld, st)
                if i == 0:
                    p.emit(control.bra(done))
                p.label(other)
            p.label(done)

        self.transpose_loop(p, res, t, vin, vout, leader, both)

    # -- warps 4-7: softmax, correction and epilogue -------------------------------------------------
    def row_setup(self, p: Program, t: TileOfCta, i: int) -> Row:
        """Thread l of tile i's warpgroup holds query row 128 (tiles m + i) + l (tensor-memory lane l);
        a column c of key block n is a key it sees when c < lim - n BN, lim = causal ? min(S_kv,
        row + 1) : S_kv."""
        prob = self.p
        wt, row, q, wl = p.r("wg_tid"), p.r("q_row_here"), p.r("quarter"), p.r("warp_lane0")
        p.emit(alu.iadd3(wt, R("tid"), (1 << 32) - 128 * (1 + i)))
        p.emit(alu.lop3(q, R("warp"), 3, RZ, 0xC0))
        p.emit(alu.shf_l(wl, q, 5))
        wofs, uwofs = p.r("tmem_warp_ofs"), p.ur("tmem_warp")
        p.emit(alu.shf_l(wofs, wl, 16))  # lanes are the high half of a tensor-memory address
        p.emit(alu.r2ur(uwofs, wofs))
        p.emit(alu.iadd3(row, wt, BM * i))
        p.emit(alu.imad(row, t.m_block, self.bm, row))
        lim = p.r("lim")
        if prob.causal:
            p.emit(alu.iadd3(lim, row, 1))
            p.emit(alu.imin(lim, lim, prob.S_kv, arch=SM100A.name))
        else:
            p.emit(alu.mov(lim, prob.S_kv))
        c, thr, ninf = self.softmax_constants(p)
        return Row(F32.of(p.r("mx")), F32.of(p.r("lsum")), c, thr, ninf, lim, uwofs, Lane("warp_lane0", wl, BM),
                   Lane("wg_tid", wt, BM))

    def tmem_addr(self, p: Program, dst: UR, base_ref: TmemRef, ref: TmemRef, row: Row, col: int) -> UR:
        """dst = the address of this warp's lanes at column `col` of `base_ref`'s buffer (noted `ref`)."""
        base, off = p.derive.value_reg("addr", base_ref)
        p.emit(alu.uiadd3(dst, base, row.uwofs, off + col).noted(ref.note("addr")), mark="+")
        return dst

    def softmax_role(self, p: Program, res: Sm100AttentionResources, t: TileOfCta, i: int) -> None:
        """Tile i's warpgroup: for each block, S from tensor memory, the softmax, P into tensor memory
        (one tile: after P(n-1)·V(n-1) is done, `o_done`, and O rescaled if needed; two tiles: S(n)'s
        commit carries P(n-1)·V(n-1) already, O is rescaled after it); then O / l out."""
        bn = self.bn
        row = self.row_setup(p, t, i)
        s = p.rvec("s", bn)
        pf = p.rvec("pf", bn // 2)
        taddr = p.ur("taddr")
        leader = p.elect("sm_leader")
        o_tm, s_tm, p_tm = res.o_tm[i], res.s_tm[i], res.p_tm[i]
        o_addr = self.o_addrs(p, o_tm, row)
        s_ring = p.ring("s_read", 2 if self.tiles == 1 else 1)
        o_ring = p.ring("o_wait", 1)

        def load_s() -> None:
            stage: Union[int, Ring] = s_ring if self.tiles == 1 else 0
            wait(p, res.s_full[i].at(stage), s_ring.parity)
            self.fence_after_wait(p)
            for ch in range(bn // 32):
                self.tmem_addr(p, taddr, s_tm.at(stage, 0, 0), s_tm.at(stage, row.wl_ix, 32 * ch), row, 32 * ch)
                p.emit(tcgen05.ldtm(s.sub(32 * ch, 32), taddr))
            p.emit(tcgen05.tmem_wait_ld())

        def store_p() -> None:
            for ch in range(bn // 64):
                self.tmem_addr(p, taddr, p_tm.at(0, 0), p_tm.at(row.wl_ix, 32 * ch), row, 32 * ch)
                p.emit(tcgen05.sttm(taddr, pf.sub(32 * ch, 32)))
            p.emit(tcgen05.tmem_wait_st())
            self.fence_before_handoff(p)
            p.derive.emit_at(res.p_full[i].at(0), lambda m: sync.arrive(m), guard=leader)

        # block 0: its maxima set the row's
        with p.ring_iteration(s_ring):
            load_s()
            self.softmax(p, s, row, t, 0, first=True)
        self.pack(p, s, pf)
        store_p()
        nm1, more = self.blocks_after_first(p, t)
        skip = p.fresh_label("NO_MORE_BLOCKS")
        p.emit(control.bra(skip).guarded(~more))
        with p.loop("kv", nm1, max_count=max(1, self.n_max - 1)) as k:
            blk = p.r("blk")
            p.emit(alu.iadd3(blk, k.reg, 1))
            with p.ring_iteration(s_ring):
                load_s()
                rescale = self.softmax(p, s, row, t, blk, first=False)
            self.pack(p, s, pf)
            if self.tiles == 1:
                with p.ring_iteration(o_ring):
                    wait(p, res.o_done[i].at(0), o_ring.parity)  # P(n-1)·V(n-1) done: O complete, P free
                self.fence_after_wait(p)
            assert rescale is not None
            self.rescale_o(p, row, rescale, o_addr)
            store_p()
        p.label(skip)
        # the last P·V, then O / l from tensor memory through Q's buffer to the TMA store
        with p.ring_iteration(o_ring):
            wait(p, res.o_done[i].at(0), o_ring.parity)
        self.fence_after_wait(p)
        self.epilogue(p, res, row, t, o_addr, i)

    def mask(self, p: Program, s: RVec, row: Row, blk: Union[int, R]) -> None:
        """S[c] = -inf where column c of block `blk` is a key the row does not see."""
        lim = p.r("mlim")
        if isinstance(blk, int):
            p.emit(alu.iadd3(lim, row.lim, (-blk * self.bn) & 0xFFFFFFFF))
        else:
            p.emit(alu.imad(lim, blk, (1 << 32) - self.bn, row.lim))
        keep = p.p("keep")
        for v in range(self.bn):
            p.emit(alu.isetp("GT", keep, lim, v, unsigned=False))
            x = F32.of(s[v])
            p.emit(alu.fsel(x, x, row.neg_inf, keep))

    def softmax(self, p: Program, s: RVec, row: Row, t: TileOfCta, blk: Union[int, R], first: bool) -> Optional[UP]:
        """The online softmax of block `blk` in S's registers (the thread's whole row): masked if the
        block needs it, the row's maximum, (not first) whether a row of the warp grew past the
        threshold and if so the new maximum and its factor `alpha` (the sum rescaled here, O by
        `rescale_o`), S = exp2(S c - max) in place, the row's sum. Returns the uniform predicate "O
        must be rescaled", None for the first block."""
        self.mask_if_needed(p, t, blk, lambda: self.mask(p, s, row, blk))
        vals = [F32.of(s[v]) for v in range(self.bn)]
        mb = reduce4(p, alu.fmax, [F32.of(p.r(f"mxc{k}")) for k in range(4)], vals)
        rescale: Optional[UP] = None
        if first:
            p.emit(alu.fmul(row.mx, mb, row.c))
        else:
            cand, grow = F32.of(p.r("cand")), F32.of(p.r("grow"))
            p.emit(alu.fmul(cand, mb, row.c))
            p.emit(alu.fadd(grow, cand, -row.mx))
            rescale = self.rescale_needed(p, grow, row.thr)
            with p.when(rescale):
                raise_max(p, cand, row.mx, row.l, F32.of(p.r("alpha")))
        for v in range(self.bn):
            x = F32.of(s[v])
            p.emit(alu.ffma(x, x, row.c, -row.mx))
            p.emit(alu.ex2(x, x))
        total = reduce4(p, alu.fadd, [F32.of(p.r(f"sum{k}")) for k in range(4)], vals)
        if first:
            p.emit(alu.mov(row.l, total))
        else:
            p.emit(alu.fadd(row.l, row.l, total))
        return rescale

    def pack(self, p: Program, s: RVec, pf: RVec) -> None:
        """P = S's fp32 values as bf16 pairs: register i holds keys 2i (low half) and 2i + 1 (high),
        tensor-memory column i of P (`warpy.layout.atoms.umma_ts_a_tmem`)."""
        pack_pairs(p, s, pf, self.bn // 2)

    def o_addrs(self, p: Program, o_tm: TmemBuffer, row: Row) -> list[UR]:
        """The addresses of this warp's lanes of O, 32 columns apart (set once: the rescale, a
        data-dependent branch, computes no address of its own)."""
        out = []
        for ch in range(self.d // 32):
            out.append(self.tmem_addr(p, p.ur(f"o_addr{ch}"), o_tm.at(0, 0), o_tm.at(row.wl_ix, 32 * ch), row, 32 * ch))
        return out

    def rescale_o(self, p: Program, row: Row, rescale: UP, o_addr: list[UR]) -> None:
        """O's row *= alpha in tensor memory (LDTM, FMUL, STTM 32 columns at a time), where the warp's
        rows moved; P(n-1)·V(n-1) has completed (the wait before carried its commit)."""
        ov = p.rvec("ov", 32)
        with p.when(rescale):
            for ch in range(self.d // 32):
                taddr = o_addr[ch]
                p.emit(tcgen05.ldtm(ov, taddr))
                p.emit(tcgen05.tmem_wait_ld())
                for v in range(32):
                    x = F32.of(ov[v])
                    p.emit(alu.fmul(x, x, F32.of(R("alpha"))))
                p.emit(tcgen05.sttm(taddr, ov))
            p.emit(tcgen05.tmem_wait_st())

    def epilogue(self, p: Program, res: Sm100AttentionResources, row: Row, t: TileOfCta, o_addr: list[UR], i: int) -> None:
        """O / l as bf16 over Q's buffer (every MMA reading Q has completed: o_done carries them), 16
        bytes a `STS.128` at the row's swizzled address, fenced to the async proxy; the tensor memory
        handed back to the MMA warp; then one thread stores the 128 x D box by TMA (clipped at S_q)."""
        rl = F32.of(p.r("inv_l"))
        p.emit(alu.rcp(rl, row.l))
        ov = p.rvec("ov", 32)
        pk = p.rvec("opk", 16)
        for ch in range(self.d // 32):
            p.emit(tcgen05.ldtm(ov, o_addr[ch]))
            p.emit(tcgen05.tmem_wait_ld())
            for v in range(32):
                x = F32.of(ov[v])
                p.emit(alu.fmul(x, x, rl))
            for e in range(16):
                p.emit(alu.f2fp(BF16x2.of(pk[e]), F32.of(ov[2 * e + 1]), F32.of(ov[2 * e])))
            for k in range(4):
                p.derive.emit_swizzled_at(res.sq.at(i, row.row_ix, 32 * ch + 8 * k),
                                          lambda m: memory.sts(m, pk.sub(4 * k, 4)))
        # the tensor memory is no longer read: the MMA warp may free it
        self.fence_before_handoff(p)
        p.emit(sync.bar_arv(FREE_BAR, 32 + 128 * self.tiles))
        p.emit(sync.fence_proxy_async())
        p.emit(sync.bar_sync(EPI_BAR + i, 128))
        lead = p.p("epi_lead")
        p.emit(alu.isetp("EQ", lead, R("wg_tid"), 0))
        o_row = p.r("o_row")
        p.emit(alu.imad(o_row, t.m_block, self.bm, BM * i))
        self.store_o(p, res, lead, i, o_row, t)


__all__ = ["Sm100Attention", "Sm100AttentionConfig", "smem_bytes", "tmem_columns", "BM"]
