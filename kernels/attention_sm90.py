"""Forward attention on Hopper (sm_90a): O = softmax(scale · Q·Kᵀ, masked) · V, bf16 in and out, fp32
scores and accumulators, one CTA per 128 queries of one (batch, head). Configured by the attention
family's rule (`kernels/attention.py`); docs/attention.md describes the program.

Warp-specialised, 384 threads:

- warpgroup 0 gives its registers back (`USETMAXREG.DEALLOC`). Its warp 0 is the **loader**: Q's
  two 64-row halves once, then for each key/value block a K tile and a V tile by TMA into their
  rings (128-byte swizzle; rows past the sequence arrive as zeros). V's rows are the P·V product's K:
  by the rule (`v_mn`) the P·V wgmma reads V's ring MN-major (the 16-bit wgmma's transposed B; the
  ring seen as (stage, head_dim, key), the same bytes) and warps 1-3 have nothing to do. With
  `v_mn=0` they are the **transposers**: each V tile is turned into Vᵀ (head_dim rows, keys
  contiguous) with `LDSM.T` from the landed tile and `STSM` into a third ring, then handed to the
  consumers (fence to the async proxy, one arrival a warp), which read it K-major.
- warpgroups 1 and 2 are **consumers**, each 64 of the 128 queries (`USETMAXREG.TRY_ALLOC`): for
  each key block n, S = Q·Kₙᵀ (`HGMMA.64xBNx16`, both from shared memory) and, in the same
  issue, O += Pₙ₋₁·Vₙ₋₁ (`HGMMA.64xDx16` with P from registers: the RS form); then the online
  softmax of S in base 2 while P·V runs: the row maximum (a quad of lanes holds a row), exp2 via
  `MUFU.EX2` of `FFMA(s, scale·log2 e, -max)`, the row sums kept per thread; P is S's fp32 values
  packed to bf16 pairs in place of the accumulator fragment (`F2FP`), which is exactly the RS form's
  A fragment (`warpy.layout.atoms.wgmma_acc_chunk_as_a`). The maximum a row's exponents are taken
  against moves only when a new block's maximum exceeds it by more than `rescale_threshold` (in
  log2 units): otherwise P's values stay below 2^threshold and O and the sums are not rescaled; when
  a warp's rows move, O's rows and the sums are multiplied by exp2(old - new).
- **ping-pong**: the two consumer warpgroups take turns issuing their MMAs through two named
  barriers, so one warpgroup's softmax runs while the other's MMAs keep the tensor core busy.
- the last key blocks are masked (causal: key j > query i; keys past S_kv), the others not; the
  output is normalised by the quad-reduced sums (`MUFU.RCP`), packed to bf16, written with `STSM`
  over the warpgroup's half of Q's buffer and stored by TMA (clipped at the sequence's end).

Every shared-memory address and descriptor is derived from the buffers' layouts; the transposers'
(`v_mn=0`) per-lane addresses are the layouts' swizzled offsets split into a per-lane register and an
immediate (checked against the layout for every lane at build time, noted for the checker).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Union

import attrs

from warpy.isa.families import alu, control, memory, sync, wgmma
from warpy.isa.families.typed import BF16x2, F32
from warpy.isa.index import Lane, as_ix
from warpy.isa.operands import RZ, URZ, P, R, RVec, UP
from warpy.isa.pipes import ConsumerEnd, init_barriers, wait
from warpy.isa.program import Program
from warpy.isa.units.tma import tma_load
from warpy.isa.units.warp import warp_reduce
from warpy.isa.units.wgmma import hgmma, hgmma_rs
from warpy.layout.atoms import wgmma_acc_chunk_as_a
from warpy.target import SM90A

from .attention_common import (BM, AttentionBuilder, AttentionResources, TileOfCta, grow_registers, pack_pairs,
                               raise_max, reduce4, ring_smem_bytes)

if TYPE_CHECKING:
    from .attention import AttentionProblem

CONSUMERS = 2  # the CTA's BM = 128 queries: two consumer warpgroups of 64
THREADS = 128 * (1 + CONSUMERS)
PRODUCER_REGS = 56
CONSUMER_REGS = 224
TRANSPOSERS = 3  # warps 1..3 of the producer warpgroup
EPI_BAR = 1  # named barriers 1, 2: a consumer warpgroup's epilogue
TURN_BAR = 3  # named barriers 3, 4: consumer warpgroup w's turn to issue its MMAs


@attrs.frozen
class Sm90AttentionConfig:
    """One configuration of the program: the key/value block (BN keys a step; the CTA takes 128
    queries), ring depths (K as loaded, V as loaded, V transposed), whether the two consumer
    warpgroups take turns issuing their MMAs (ping-pong), and how far (log2 units) a row's maximum
    may grow before O is rescaled."""

    bn: int = 128
    k_stages: int = 2
    v_stages: int = 2
    t_stages: int = 2
    pingpong: bool = True
    rescale_threshold: int = 8
    #: P·V's wgmma reads V MN-major straight from its ring (the 16-bit wgmma's transposed B): no
    #: transposer warps and no Vᵀ ring (`t_stages` unused), the consumers free V's stages
    v_mn: bool = False

    def describe(self) -> str:
        turns = "ping-pong between the consumer warpgroups" if self.pingpong else "no ping-pong"
        rings = (f"K {self.k_stages} / V {self.v_stages} stages (V read MN-major by the P·V wgmma)" if self.v_mn else
                 f"K {self.k_stages} / V {self.v_stages} / Vᵀ {self.t_stages} stages (V transposed by LDSM.T/STSM)")
        return (f"sm_90a warp-specialised attention: {BM} queries x {self.bn} keys a step, {CONSUMERS} consumer "
                f"warpgroups (HGMMA 64xBNx16 SS for S, 64xDx16 RS for P·V), TMA rings {rings}, {turns}, "
                f"rescale when the maximum grows past 2^{self.rescale_threshold}")


def smem_bytes(cfg: Sm90AttentionConfig, d: int) -> int:
    """Dynamic shared memory: Q (128 x D), the K, V and (unless `v_mn`) Vᵀ rings (BN x D each stage),
    barriers."""
    return ring_smem_bytes(cfg, d, BM, transposed=not cfg.v_mn)


@attrs.frozen
class Softmax:
    """A consumer thread's softmax state and constants: its two rows' maxima (scaled, log2 units)
    and partial sums, the scale · log2 e, the threshold, -inf, the rows' mask limits."""

    mx: tuple[F32, F32]
    l: tuple[F32, F32]
    c: F32
    thr: F32
    neg_inf: F32
    lim_base: tuple[R, R]


class Sm90Attention(AttentionBuilder):
    """The program builder for one problem and configuration."""

    def __init__(self, problem: AttentionProblem, cfg: Sm90AttentionConfig) -> None:
        self.setup(problem, cfg, SM90A, BM, smem_bytes(cfg, problem.D), 0 if cfg.v_mn else TRANSPOSERS)
        self.cfg: Sm90AttentionConfig = cfg

    @property
    def name(self) -> str:
        c = self.cfg
        return f"{self.name_stem}{'' if c.pingpong else '_nopp'}_t{c.rescale_threshold}{'_vmn' if c.v_mn else ''}"

    # -- the program ---------------------------------------------------------------------------
    def build(self) -> Program:
        cfg = self.cfg
        p = Program(self.name, SM90A.name, threads=THREADS, grid=(self.grid, 1, 1),
                    maxnreg=(65536 // THREADS) // 8 * 8)
        ops = self.operands(p, 64, CONSUMERS, transposed=not cfg.v_mn)  # a Q "stage" per consumer warpgroup's 64 rows
        q_full = p.barriers("q_full", CONSUMERS, count=1)
        kpipe = p.pipe("kv_k", cfg.k_stages, fills=1, frees=4 * CONSUMERS)
        if cfg.v_mn:  # the consumers read V's ring themselves: its pipe is P·V's
            vpipe = tpipe = p.pipe("kv_v", cfg.v_stages, fills=1, frees=4 * CONSUMERS)
        else:
            vpipe = p.pipe("kv_v", cfg.v_stages, fills=1, frees=TRANSPOSERS)
            tpipe = p.pipe("kv_vt", cfg.t_stages, fills=TRANSPOSERS, frees=4 * CONSUMERS)
        init_barriers(p)
        res = AttentionResources.of(ops, q_full=q_full, kpipe=kpipe, vpipe=vpipe, tpipe=tpipe)
        with p.role("producer", range(0, 4)):
            self.producer(p, res)
        for w in range(CONSUMERS):
            with p.role(f"consumer{w}", range(4 + 4 * w, 8 + 4 * w)):
                self.consumer(p, res, w)
        p.emit(control.exit_())
        return p

    # -- producer warpgroup: the loader (warp 0) and the transposers (warps 1-3) ------------------
    def producer(self, p: Program, res: AttentionResources) -> None:
        p.emit(control.setmaxnreg_dealloc(PRODUCER_REGS))
        t = self.tile(p)
        warp = p.warp_index()
        is_loader = p.p("is_loader")
        p.emit(alu.isetp("EQ", is_loader, warp, 0))
        with p.when(is_loader):
            self.loader(p, res, t)
        for i in range(self.transposers):
            mine = p.p("is_transposer")
            p.emit(alu.isetp("EQ", mine, warp, 1 + i))
            with p.when(mine):
                self.transposer(p, res, t, i)

    def loader(self, p: Program, res: AttentionResources, t: TileOfCta) -> None:
        leader = self.prefetch_maps(p, res)
        q_row = p.r("q_row")
        txq = p.r("tx_q")
        p.emit(alu.mov(txq, res.tq.box.box_bytes))
        for w in range(CONSUMERS):
            p.emit(alu.imad(q_row, t.m_block, BM, 64 * w))
            p.derive.emit_at(res.q_full.at(w), lambda m: sync.arrive_expect_tx(m, txq), guard=leader)
            tma_load(p, res.sq.at(w, 0, 0), res.tq, self.coords(q_row, t.h, t.b), res.q_full.at(w), guard=leader)
        self.load_kv(p, res, t, leader)

    def transposer(self, p: Program, res: AttentionResources, t: TileOfCta, i: int) -> None:
        """Vᵀ from V, 32 keys x 8 columns at a time: lane l reads row 32a + l of the landed tile at
        column 8c (`LDSM.16.M88.4.T`: four 8 x 8 matrices, transposed: each lane then holds the
        fragment of four 8 x 8 blocks of Vᵀ), and writes rows 8c + l % 8 of Vᵀ at column
        32a + 8 (l / 8) (`STSM.16.M88.4`). Swizzled offsets are a per-lane register (8 for the loads,
        one per 16-byte chunk c % 8; 2 for the stores, one per half of a 64-key swizzle span) plus
        an immediate."""
        lanes = self.transposer_lanes(p)
        leader = p.elect("t_leader")
        vin = res.vpipe.consumer(f"tv{i}")
        vout = res.tpipe.producer(f"tt{i}")
        regs = [p.rvec(f"t_frag{j}", 4) for j in range(2)]
        self.transpose_loop(p, res, t, vin, vout, leader,
                            lambda ld, st: self.transpose_share(p, res, vin, vout, lanes, regs, i, ld, st))

    # -- consumers ----------------------------------------------------------------------------
    def turn_wait(self, p: Program, w: int) -> None:
        if self.cfg.pingpong:
            p.emit(sync.bar_sync(TURN_BAR + w, 256))

    def turn_pass(self, p: Program, w: int) -> None:
        if self.cfg.pingpong:
            p.emit(sync.bar_arv(TURN_BAR + (1 - w), 256))

    def consumer(self, p: Program, res: AttentionResources, w: int) -> None:
        cfg, bn, d = self.cfg, self.bn, self.d
        grow_registers(p, CONSUMER_REGS)
        if cfg.pingpong and w == 1:
            p.emit(sync.bar_arv(TURN_BAR + 0, 256))  # warpgroup 0 goes first
        t = self.tile(p)
        s_acc = p.rvec("sacc", bn // 2)
        o_acc = p.rvec("oacc", d // 2)
        pf = p.rvec("pf", bn // 4)
        leader = p.elect()
        sm = self.softmax_setup(p, t, w)
        o_started, acc_o = p.ur("o_started"), p.up("acc_o")
        p.emit(alu.umov(o_started, 0))
        zero = p.r("phase0")
        p.emit(alu.mov(zero, 0))
        wait(p, res.q_full.at(w), zero)
        kin = res.kpipe.consumer("ck")
        vin = res.tpipe.consumer("cv")
        qa = res.sq

        def qk(kslot: ConsumerEnd) -> None:
            steps = d // 16
            for j in range(steps):
                hgmma(p, s_acc, qa.at(w, 0, 16 * j), kslot.slot(res.sk, 0, 16 * j), bn, j > 0, end=j == steps - 1)
            p.emit(wgmma.wgmma_commit())

        def pv(vslot: ConsumerEnd, first: bool = False) -> None:
            """O (+)= P V; `first`: the program's only P·V (one key block), which overwrites O."""
            if not first:
                p.emit(alu.uisetp("NE", acc_o, o_started, URZ))
            steps = bn // 16
            for j in range(steps):
                hgmma_rs(p, o_acc, pf.sub(4 * j, 4), wgmma_acc_chunk_as_a(bn, j), vslot.slot(res.st, 0, 16 * j), d,
                         (False if first else acc_o) if j == 0 else True, end=j == steps - 1)
            p.emit(wgmma.wgmma_commit())
            p.emit(alu.umov(o_started, 1))

        # block 0: S = Q K0ᵀ, its softmax sets the maxima
        with kin.stage():
            kin.wait_full()
            self.turn_wait(p, w)
            p.emit(wgmma.warpgroup_arrive())
            qk(kin)
            self.turn_pass(p, w)
            p.emit(wgmma.warpgroup_wait(0))
            kin.free(leader)
            self.softmax(p, s_acc, sm, t, 0, first=True)
        self.pack(p, s_acc, pf)
        # blocks 1 .. n_blocks - 1: S = Q Knᵀ and O += P(n-1) V(n-1) together, then n's softmax
        nm1: Union[int, R]
        if isinstance(t.n_blocks, int):
            nm1 = t.n_blocks - 1
            more: Optional[P] = None
        else:
            nm1 = p.r("more_blocks")
            p.emit(alu.iadd3(nm1, t.n_blocks, (1 << 32) - 1))
            more = p.p("has_more_blocks")
            p.emit(alu.isetp("GT", more, nm1, 0))
        if not isinstance(nm1, int) or nm1 > 0:
            skip = p.fresh_label("NO_MORE_BLOCKS")
            if more is not None:
                p.emit(control.bra(skip).guarded(~more))
            with p.loop("kv", nm1, max_count=max(1, self.n_max - 1)) as k:
                blk = p.r("blk")
                p.emit(alu.iadd3(blk, k.reg, 1))
                with kin.stage():
                    with vin.stage():
                        kin.wait_full()
                        vin.wait_full()
                        self.turn_wait(p, w)
                        p.emit(wgmma.warpgroup_arrive())
                        qk(kin)
                        pv(vin)
                        self.turn_pass(p, w)
                        p.emit(wgmma.warpgroup_wait(1))
                        kin.free(leader)
                        rescale = self.softmax(p, s_acc, sm, t, blk, first=False)
                        p.emit(wgmma.warpgroup_wait(0))
                        vin.free(leader)
                        assert rescale is not None
                        self.rescale_o(p, o_acc, rescale)
                self.pack(p, s_acc, pf)
            p.label(skip)
        # the last block's P·V, then O / l
        with vin.stage():
            vin.wait_full()
            self.turn_wait(p, w)
            p.emit(wgmma.warpgroup_arrive())
            pv(vin, first=isinstance(nm1, int) and nm1 == 0)
            if w == 0:
                self.turn_pass(p, w)  # (warpgroup 1 took the first turn's arrival ahead: its last is not owed)
            p.emit(wgmma.warpgroup_wait(0))
            vin.free(leader)
        self.normalise(p, o_acc, sm)
        self.epilogue(p, res, w, t, o_acc)

    def softmax_setup(self, p: Program, t: TileOfCta, w: int) -> Softmax:
        """Constants and per-row limits: thread l of the warpgroup holds rows r = 16 (l / 32) +
        (l % 32) / 4 and r + 8 of its 64, columns 2 (l % 4) + 8 j + {0, 1} of each block; a column
        c of block n is a key to keep when c < lim - n BN, lim = (causal: min(S_kv, row + 1), else
        S_kv) - 2 (l % 4)."""
        prob = self.p
        wt, row, tmp = p.r("wg_tid"), p.r("q_row_here"), p.r("sm_tmp")
        p.emit(alu.iadd3(wt, R("tid"), (1 << 32) - 128 * (w + 1)))
        p.emit(alu.shf_r(row, wt, 5))
        p.emit(alu.imad(row, row, 16, 64 * w))
        p.emit(alu.lop3(tmp, wt, 31, RZ, 0xC0))
        p.emit(alu.shf_r(tmp, tmp, 2))
        p.emit(alu.iadd3(row, row, tmp))
        p.emit(alu.imad(row, t.m_block, BM, row))  # the query row of the thread's first row
        col2 = p.r("col2")
        p.emit(alu.lop3(col2, wt, 3, RZ, 0xC0))
        p.emit(alu.shf_l(col2, col2, 1))
        lims = []
        for h in range(2):
            lim = p.r(f"lim{h}")
            if prob.causal:
                p.emit(alu.iadd3(lim, row, 1 + 8 * h))
                p.emit(alu.imin(lim, lim, prob.S_kv))
            else:
                p.emit(alu.mov(lim, prob.S_kv))
            p.emit(alu.imad(lim, col2, (1 << 32) - 1, lim))
            lims.append(lim)
        c, thr, ninf = self.softmax_constants(p)
        mx = (F32.of(p.r("mx0")), F32.of(p.r("mx1")))
        ls = (F32.of(p.r("l0")), F32.of(p.r("l1")))
        return Softmax(mx, ls, c, thr, ninf, (lims[0], lims[1]))

    def row_values(self, h: int) -> list[int]:
        """The accumulator registers of row h (0: the thread's first row, 1: 8 rows down)."""
        return [v for v in range(self.bn // 2) if (v // 2) % 2 == h]

    def mask(self, p: Program, s: RVec, sm: Softmax, blk: Union[int, R]) -> None:
        """S[v] = -inf where column v of block `blk` is a key the row does not see."""
        for h in range(2):
            lim = p.r(f"mlim{h}")
            if isinstance(blk, int):
                p.emit(alu.iadd3(lim, sm.lim_base[h], (-blk * self.bn) & 0xFFFFFFFF))
            else:
                p.emit(alu.imad(lim, blk, (1 << 32) - self.bn, sm.lim_base[h]))
            keep = p.p("keep")
            for v in self.row_values(h):
                col = 8 * (v // 4) + v % 2
                p.emit(alu.isetp("GT", keep, lim, col, unsigned=False))
                x = F32.of(s[v])
                p.emit(alu.fsel(x, x, sm.neg_inf, keep))

    def softmax(self, p: Program, s: RVec, sm: Softmax, t: TileOfCta, blk: Union[int, R], first: bool) -> Optional[UP]:
        """The online softmax of block `blk` in S's registers: masked if the block needs it, the rows'
        maxima, (not first) whether a row of the warp grew past the threshold and if so the new
        maxima and factors, S = exp2(S c - max) in place, the rows' partial sums. Returns the
        uniform predicate "O must be rescaled" (its factors in `alpha0/1`), None for the first."""
        self.mask_if_needed(p, t, blk, lambda: self.mask(p, s, sm, blk))
        # the rows' maxima of the raw scores: 4 chains a row, then the quad of lanes holding the row
        mb = []
        for h in range(2):
            vals = self.row_values(h)
            chains = [F32.of(p.r(f"mxc{h}_{k}")) for k in range(4)]
            m = reduce4(p, alu.fmax, chains, [F32.of(s[v]) for v in self.row_values(h)])
            warp_reduce(p, m, "max", width=4, tmp=f"xchg{h}")
            mb.append(m)
        rescale: Optional[UP] = None
        if first:
            for h in range(2):
                p.emit(alu.fmul(sm.mx[h], mb[h], sm.c))
        else:
            cand = [F32.of(p.r(f"cand{h}")) for h in range(2)]
            grow = [F32.of(p.r(f"grow{h}")) for h in range(2)]
            for h in range(2):
                p.emit(alu.fmul(cand[h], mb[h], sm.c))
                p.emit(alu.fadd(grow[h], cand[h], -sm.mx[h]))
            p.emit(alu.fmax(grow[0], grow[0], grow[1]))
            rescale = self.rescale_needed(p, grow[0], sm.thr)
            with p.when(rescale):
                for h in range(2):
                    raise_max(p, cand[h], sm.mx[h], sm.l[h], F32.of(p.r(f"alpha{h}")))
        # S = exp2(S c - max), then the rows' partial sums (4 chains a row)
        for h in range(2):
            for v in self.row_values(h):
                x = F32.of(s[v])
                p.emit(alu.ffma(x, x, sm.c, -sm.mx[h]))
                p.emit(alu.ex2(x, x))
        for h in range(2):
            chains = [F32.of(p.r(f"sum{h}_{k}")) for k in range(4)]
            total = reduce4(p, alu.fadd, chains, [F32.of(s[v]) for v in self.row_values(h)])
            if first:
                p.emit(alu.mov(sm.l[h], total))
            else:
                p.emit(alu.fadd(sm.l[h], sm.l[h], total))
        return rescale

    def rescale_o(self, p: Program, o: RVec, rescale: UP) -> None:
        """O's rows *= their factors, where the warp's rows moved (after the P·V reading O is done)."""
        with p.when(rescale):
            for v in range(self.d // 2):
                x = F32.of(o[v])
                p.emit(alu.fmul(x, x, F32.of(R(f"alpha{(v // 2) % 2}"))))

    def pack(self, p: Program, s: RVec, pf: RVec) -> None:
        """P = S's fp32 values as bf16 pairs: register i holds columns 2i, 2i + 1 of the fragment."""
        pack_pairs(p, s, pf, self.bn // 4)

    def normalise(self, p: Program, o: RVec, sm: Softmax) -> None:
        """O /= the row sums (the quad's partial sums added first)."""
        for h in range(2):
            warp_reduce(p, sm.l[h], "sum", width=4, tmp=f"xchg{h}")
            p.emit(alu.rcp(sm.l[h], sm.l[h]))
        for v in range(self.d // 2):
            x = F32.of(o[v])
            p.emit(alu.fmul(x, x, sm.l[(v // 2) % 2]))

    def epilogue(self, p: Program, res: AttentionResources, w: int, t: TileOfCta, o: RVec) -> None:
        """O as bf16 through the warpgroup's half of Q's buffer (its Q is no longer read): `STSM.16.M88.4`
        of 16 x 16 blocks (lane l addresses row l % 8 + 8 ((l / 8) % 2), column 8 (l / 16) of the
        warp's block), fenced to the async proxy, then one thread stores the 64 x D box by TMA."""
        wt = R("wg_tid")
        lead = p.p("epi_lead")
        p.emit(alu.isetp("EQ", lead, wt, 0))
        srow, scol, tmp = p.r("stsm_row"), p.r("stsm_col"), p.r("stsm_tmp")
        p.emit(alu.shf_r(srow, wt, 5))
        p.emit(alu.imad(srow, srow, 16, RZ))
        p.emit(alu.lop3(tmp, wt, 7, RZ, 0xC0))
        p.emit(alu.iadd3(srow, srow, tmp))
        p.emit(alu.lop3(tmp, wt, 8, RZ, 0xC0))
        p.emit(alu.iadd3(srow, srow, tmp))
        p.emit(alu.lop3(scol, wt, 16, RZ, 0xC0))
        p.emit(alu.shf_r(scol, scol, 1))
        row_ix, col_ix = Lane("stsm_row", srow, 64), Lane("stsm_col", scol, 16)
        v = p.rvec("stsm_v", 4)
        # every warp of the warpgroup is past its last wait for the MMAs that read this Q half (each
        # warp's wait covers its own view; with ping-pong the last turn's barrier orders them too)
        p.emit(sync.bar_sync(EPI_BAR + w, 128))
        for jj in range(self.d // 16):
            j = 2 * jj
            for r, (jv, h) in enumerate(((j, 0), (j, 1), (j + 1, 0), (j + 1, 1))):
                p.emit(alu.f2fp(BF16x2.of(v[r]), F32.of(o[4 * jv + 2 * h + 1]), F32.of(o[4 * jv + 2 * h])))
            p.derive.emit_swizzled_at(res.sq.at(w, as_ix(row_ix), col_ix + 16 * jj), lambda m: memory.stsm(m, v))
        p.emit(sync.fence_proxy_async())
        p.emit(sync.bar_sync(EPI_BAR + w, 128))
        q_row = p.r("o_row")
        p.emit(alu.imad(q_row, t.m_block, BM, 64 * w))
        self.store_o(p, res, lead, w, q_row, t)
