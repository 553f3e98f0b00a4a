"""Forward attention on Hopper (sm_90a): O = softmax(scale · Q·Kᵀ, masked) · V, bf16 in and out, fp32
scores and accumulators, one CTA per 128 queries of one (batch, head). Configured by the attention
family's rule (`kernels/attention.py`); docs/attention.md describes the program.

Warp-specialised, 384 threads:

- warpgroup 0 gives its registers back (`USETMAXREG.DEALLOC`). Its warp 0 is the **loader**: Q's
  two 64-row halves once, then for each key/value block a K tile and a V tile by TMA into their
  rings (128-byte swizzle; rows past the sequence arrive as zeros). Its warps 1-3 are the
  **transposers**: the wgmma reads B K-major, and V's rows are the P·V product's K, so each V tile is
  turned into Vᵀ (head_dim rows, keys contiguous) with `LDSM.T` from the landed tile and `STSM` into
  a third ring, then handed to the consumers (fence to the async proxy, one arrival a warp).
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
per-lane addresses are the layouts' swizzled offsets split into a per-lane register and an
immediate (checked against the layout for every lane at build time, noted for the checker).
"""

from __future__ import annotations

import math
import struct
from typing import TYPE_CHECKING, Optional, Union

import attrs

from warpy.errors import WarpyError
from warpy.isa.buffers import BarrierArray, TensorMap, TileRing
from warpy.isa.families import alu, control, memory, sync, tma, wgmma
from warpy.isa.families.typed import BF16x2, F32
from warpy.isa.index import Lane, as_ix
from warpy.isa.operands import RZ, URZ, Mem, P, R, RVec, UP, UR
from warpy.isa.pipes import ConsumerEnd, Pipe, ProducerEnd, init_barriers, wait
from warpy.isa.program import Program
from warpy.isa.units.tma import TmaCoord, tma_load, tma_store
from warpy.isa.units.warp import warp_reduce
from warpy.isa.units.wgmma import hgmma, hgmma_rs
from warpy.layout import Layout
from warpy.layout.atoms import wgmma_acc_chunk_as_a
from warpy.layout.desc import tma_box
from warpy.layout.smem import smem_tile
from warpy.target import SM90A

from .schedule import cdiv, divide

if TYPE_CHECKING:
    from .attention import AttentionProblem

BM = 128  # queries a CTA: two consumer warpgroups of 64
CONSUMERS = 2
THREADS = 128 * (1 + CONSUMERS)
PRODUCER_REGS = 56
CONSUMER_REGS = 224
TRANSPOSERS = 3  # warps 1..3 of the producer warpgroup
EPI_BAR = 1  # named barriers 1, 2: a consumer warpgroup's epilogue
TURN_BAR = 3  # named barriers 3, 4: consumer warpgroup w's turn to issue its MMAs
LOG2E = 1.4426950408889634


def f32_bits(x: float) -> int:
    """The bits of x rounded to fp32 (nearest)."""
    return int(struct.unpack("<I", struct.pack("<f", x))[0])


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

    def describe(self) -> str:
        turns = "ping-pong between the consumer warpgroups" if self.pingpong else "no ping-pong"
        return (f"sm_90a warp-specialised attention: {BM} queries x {self.bn} keys a step, {CONSUMERS} consumer "
                f"warpgroups (HGMMA 64xBNx16 SS for S, 64xDx16 RS for P·V), TMA rings K {self.k_stages} / V "
                f"{self.v_stages} / Vᵀ {self.t_stages} stages (V transposed by LDSM.T/STSM), {turns}, "
                f"rescale when the maximum grows past 2^{self.rescale_threshold}")


def smem_bytes(cfg: Sm90AttentionConfig, d: int) -> int:
    """Dynamic shared memory: Q (128 x D), the K, V and Vᵀ rings (BN x D each stage), barriers."""
    tile = cfg.bn * d * 2
    return BM * d * 2 + (cfg.k_stages + cfg.v_stages + cfg.t_stages) * tile + 1024


@attrs.frozen
class Sm90AttentionResources:
    """What the roles share, declared in `build` before any role: the tensor maps, the shared
    buffers (Q's halves, the K, V and Vᵀ rings) and the barriers (Q's, and the three pipes)."""

    tq: TensorMap
    tk: TensorMap
    tv: TensorMap
    to: TensorMap
    sq: TileRing
    sk: TileRing
    sv: TileRing
    st: TileRing
    q_full: BarrierArray
    kpipe: Pipe
    vpipe: Pipe
    tpipe: Pipe


@attrs.frozen
class TileOfCta:
    """The CTA's tile: its 128-query block, query head, key/value head and batch (registers), its
    key blocks and how many of them need no mask (registers, or ints where the problem fixes them)."""

    m_block: R
    h: R
    hkv: R
    b: R
    n_blocks: Union[int, R]
    n_unmasked: Union[int, R]


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


class Sm90Attention:
    """The program builder for one problem and configuration."""

    def __init__(self, problem: AttentionProblem, cfg: Sm90AttentionConfig) -> None:
        p = problem
        if cfg.bn not in (64, 128):
            raise WarpyError(f"bn={cfg.bn}: the key block is 64 or 128 keys")
        for name in ("k_stages", "v_stages", "t_stages"):
            if not 1 <= getattr(cfg, name) <= 8:
                raise WarpyError(f"{name}={getattr(cfg, name)}: a ring has 1 to 8 stages")
        if cfg.v_stages < 2:
            raise WarpyError("v_stages=1: the loader would wait on the stage the transposers have not freed; use 2 or more")
        if not 1 <= cfg.rescale_threshold <= 16:
            raise WarpyError(f"rescale_threshold={cfg.rescale_threshold}: P's values reach 2^threshold in bf16; "
                             "give 1..16")
        if smem_bytes(cfg, p.D) > SM90A.max_dynamic_smem:
            raise WarpyError(f"{cfg.describe()} needs {smem_bytes(cfg, p.D)} bytes of shared memory for D={p.D}, more "
                             f"than {SM90A.max_dynamic_smem}")
        self.p, self.cfg = problem, cfg
        self.d, self.bn = p.D, cfg.bn
        self.m_blocks = cdiv(p.S_q, BM)
        self.n_max = cdiv(p.S_kv, cfg.bn)
        self.grid = self.m_blocks * p.H_q * p.B
        self.log_bn = cfg.bn.bit_length() - 1

    @property
    def name(self) -> str:
        p, c = self.p, self.cfg
        return (f"attention_sm90_b{p.B}h{p.H_q}k{p.H_kv}_q{p.S_q}_kv{p.S_kv}_d{p.D}_{p.layout}"
                f"{'_causal' if p.causal else ''}_bn{c.bn}_s{c.k_stages}{c.v_stages}{c.t_stages}"
                f"{'' if c.pingpong else '_nopp'}_t{c.rescale_threshold}")

    # -- global tensors ------------------------------------------------------------------------
    def global_layout(self, operand: str) -> Layout:
        """An operand in elements as modes (sequence, head_dim, head, batch)."""
        b, s, h, d = self.p.shape(operand)
        if self.p.layout == "bshd":
            return Layout((s, d, h, b), (h * d, 1, d, s * h * d))
        return Layout((s, d, h, b), (d, 1, s * d, h * s * d))

    def coords(self, row: TmaCoord, head: R, batch: R) -> list[TmaCoord]:
        """A box's coordinates, innermost first: head_dim (split in 64-element spans when D = 128),
        the row, the head, the batch."""
        if self.d > 64:
            return [0, row, 0, head, batch]
        return [0, row, head, batch]

    # -- the program ---------------------------------------------------------------------------
    def build(self) -> Program:
        cfg, d, bn = self.cfg, self.d, self.bn
        p = Program(self.name, SM90A.name, threads=THREADS, grid=(self.grid, 1, 1),
                    maxnreg=(65536 // THREADS) // 8 * 8)
        q_tile = smem_tile(64, d, "bf16", "K", 128)
        kv_tile = smem_tile(bn, d, "bf16", "K", 128)
        vt_tile = smem_tile(d, bn, "bf16", "K", 128)
        tq = p.tmap("q", tma_box(self.global_layout("q"), q_tile, l2_promotion=256))
        tk = p.tmap("k", tma_box(self.global_layout("k"), kv_tile, l2_promotion=256))
        tv = p.tmap("v", tma_box(self.global_layout("v"), kv_tile, l2_promotion=256))
        to = p.tmap("o", tma_box(self.global_layout("o"), q_tile))
        og = self.global_layout("o")
        p.global_buffer("o_out", Layout(og.shape, tuple(2 * int(s) for s in og.stride)), "bf16", "o")  # type: ignore[union-attr, arg-type]
        sq = p.smem_ring("q", CONSUMERS, q_tile.layout, "bf16")  # a "stage" per consumer warpgroup's 64 rows
        sk = p.smem_ring("k", cfg.k_stages, kv_tile.layout, "bf16")
        sv = p.smem_ring("vraw", cfg.v_stages, kv_tile.layout, "bf16")
        st = p.smem_ring("vt", cfg.t_stages, vt_tile.layout, "bf16")
        q_full = p.barriers("q_full", CONSUMERS, count=1)
        kpipe = p.pipe("kv_k", cfg.k_stages, fills=1, frees=4 * CONSUMERS)
        vpipe = p.pipe("kv_v", cfg.v_stages, fills=1, frees=TRANSPOSERS)
        tpipe = p.pipe("kv_vt", cfg.t_stages, fills=TRANSPOSERS, frees=4 * CONSUMERS)
        init_barriers(p)
        res = Sm90AttentionResources(tq, tk, tv, to, sq, sk, sv, st, q_full, kpipe, vpipe, tpipe)
        with p.role("producer", range(0, 4)):
            self.producer(p, res)
        for w in range(CONSUMERS):
            with p.role(f"consumer{w}", range(4 + 4 * w, 8 + 4 * w)):
                self.consumer(p, res, w)
        p.emit(control.exit_())
        return p

    def tile_of(self, x: int) -> tuple[int, int, int, int, int, int]:
        """The model `tile` emits: CTA x's (m_block, head, kv_head, batch, n_blocks, n_unmasked)."""
        prob = self.p
        bh, rev = divmod(x, self.m_blocks)
        m_block = self.m_blocks - 1 - rev
        b, h = divmod(bh, prob.H_q)
        if not prob.causal:
            return m_block, h, h // prob.group, b, self.n_max, prob.S_kv // self.bn
        end = min(BM * m_block + BM, prob.S_q, prob.S_kv)
        free = min((BM * m_block + 1) // self.bn, prob.S_kv // self.bn)
        return m_block, h, h // prob.group, b, cdiv(end, self.bn), free

    def tile(self, p: Program) -> TileOfCta:
        """The CTA's tile from its index x: x = (b H_q + h) m_blocks + (m_blocks - 1 - m_block), so
        CTAs of one head run together (its K and V shared through the L2) and, causal, the longest
        rows of a head start first."""
        prob = self.p
        x = p.r("cta")
        p.emit(alu.s2r(x, "SR_CTAID.X"))
        bh, m_block = p.r("bh"), p.r("m_block")
        divide(p, bh, x, self.m_blocks, self.grid - 1)
        p.emit(alu.imad(m_block, bh, (1 << 32) - self.m_blocks, x))  # x - bh m_blocks
        p.emit(alu.imad(m_block, m_block, (1 << 32) - 1, self.m_blocks - 1))  # m_blocks - 1 - that
        b, h, hkv = p.r("batch"), p.r("head"), p.r("kv_head")
        divide(p, b, bh, prob.H_q, prob.B * prob.H_q - 1)
        p.emit(alu.imad(h, b, (1 << 32) - prob.H_q, bh))
        divide(p, hkv, h, prob.group, prob.H_q - 1)
        if not prob.causal:
            return TileOfCta(m_block, h, hkv, b, self.n_max, prob.S_kv // self.bn)
        # causal (key j <= query i): the tile's last row r_max = min(128 m + 127, S_q - 1) needs keys
        # 0 .. min(r_max, S_kv - 1): n_blocks = ceil(min(r_max + 1, S_kv) / BN); block n needs no mask
        # when all its keys precede the tile's first row: n < (128 m + 1) / BN, and n < S_kv / BN
        end, n_blocks, n_free = p.r("kv_end"), p.r("n_blocks"), p.r("n_unmasked")
        p.emit(alu.imad(end, m_block, BM, BM))
        p.emit(alu.imin(end, end, min(prob.S_q, prob.S_kv)))
        p.emit(alu.iadd3(end, end, self.bn - 1))
        p.emit(alu.shf_r(n_blocks, end, self.log_bn))
        p.emit(alu.imad(n_free, m_block, BM, 1))
        p.emit(alu.shf_r(n_free, n_free, self.log_bn))
        p.emit(alu.imin(n_free, n_free, prob.S_kv // self.bn))
        return TileOfCta(m_block, h, hkv, b, n_blocks, n_free)

    # -- producer warpgroup: the loader (warp 0) and the transposers (warps 1-3) ------------------
    def producer(self, p: Program, res: Sm90AttentionResources) -> None:
        p.emit(control.setmaxnreg_dealloc(PRODUCER_REGS))
        t = self.tile(p)
        warp = p.warp_index()
        is_loader = p.p("is_loader")
        p.emit(alu.isetp("EQ", is_loader, warp, 0))
        with p.when(is_loader):
            self.loader(p, res, t)
        for i in range(TRANSPOSERS):
            mine = p.p("is_transposer")
            p.emit(alu.isetp("EQ", mine, warp, 1 + i))
            with p.when(mine):
                self.transposer(p, res, t, i)

    def loader(self, p: Program, res: Sm90AttentionResources, t: TileOfCta) -> None:
        leader = p.elect()
        with p.when(leader):
            for tm in (res.tq, res.tk, res.tv, res.to):
                p.emit(tma.tmap_prefetch(tm.name))
        q_row = p.r("q_row")
        txq = p.r("tx_q")
        p.emit(alu.mov(txq, res.tq.box.box_bytes))
        for w in range(CONSUMERS):
            p.emit(alu.imad(q_row, t.m_block, BM, 64 * w))
            p.derive.emit_at(res.q_full.at(w), lambda m: sync.arrive_expect_tx(m, txq), guard=leader)
            tma_load(p, res.sq.at(w, 0, 0), res.tq, self.coords(q_row, t.h, t.b), res.q_full.at(w), guard=leader)
        kout = res.kpipe.producer("lk")
        vout = res.vpipe.producer("lv")
        with p.loop("kv_load", t.n_blocks, max_count=self.n_max) as n:
            with kout.stage():
                kout.wait_empty()
                kout.arrive_full(leader, tx_bytes=res.tk.box.box_bytes)
                tma_load(p, kout.slot(res.sk), res.tk, self.coords(n * self.bn, t.hkv, t.b), kout.full, guard=leader)
            with vout.stage():
                vout.wait_empty()
                vout.arrive_full(leader, tx_bytes=res.tv.box.box_bytes)
                tma_load(p, vout.slot(res.sv), res.tv, self.coords(n * self.bn, t.hkv, t.b), vout.full, guard=leader)

    def transpose_pairs(self, i: int) -> list[tuple[int, int]]:
        """Transposer i's share of a V tile: (a, c) = the 32 keys 32a.. by the 8 head_dim columns 8c..,
        one LDSM.T.x4 + STSM.x4 each, split evenly and contiguously over the transposers."""
        pairs = [(a, c) for c in range(self.d // 8) for a in range(self.bn // 32)]
        lo, hi = i * len(pairs) // TRANSPOSERS, (i + 1) * len(pairs) // TRANSPOSERS
        return pairs[lo:hi]

    def transposer(self, p: Program, res: Sm90AttentionResources, t: TileOfCta, i: int) -> None:
        """Vᵀ from V, 32 keys x 8 columns at a time: lane l reads row 32a + l of the landed tile at
        column 8c (`LDSM.16.M88.4.T`: four 8 x 8 matrices, transposed: each lane then holds the
        fragment of four 8 x 8 blocks of Vᵀ), and writes rows 8c + l % 8 of Vᵀ at column
        32a + 8 (l / 8) (`STSM.16.M88.4`). Swizzled offsets are a per-lane register (8 for the loads,
        one per 16-byte chunk c % 8; 2 for the stores, one per half of a 64-key swizzle span) plus
        an immediate."""
        sv, st = res.sv, res.st
        lane, lane_r, lane_q = p.r("t_lane"), p.r("t_lane_r"), p.r("t_lane_q")
        p.emit(alu.lop3(lane, R("tid"), 31, RZ, 0xC0))
        p.emit(alu.lop3(lane_r, lane, 7, RZ, 0xC0))
        p.emit(alu.shf_r(lane_q, lane, 3))
        ld = [p.r(f"t_ld{c}") for c in range(8)]  # lane l: l * 128 + ((l % 8) ^ c) * 16
        tmp = p.r("t_tmp")
        p.emit(alu.shf_l(ld[0], lane_r, 4))
        p.emit(alu.shf_l(tmp, lane, 7))
        p.emit(alu.iadd3(ld[0], ld[0], tmp))
        for c in range(1, 8):
            p.emit(alu.lop3(ld[c], ld[0], c << 4, RZ, 0x3C))
        sts = [p.r(f"t_st{h}") for h in range(2)]  # lane l: (l % 8) * 128 + ((4 h + l / 8) ^ (l % 8)) * 16
        for h in range(2):
            p.emit(alu.iadd3(tmp, lane_q, 4 * h))
            p.emit(alu.lop3(tmp, tmp, lane_r, RZ, 0x3C))
            p.emit(alu.shf_l(tmp, tmp, 4))
            p.emit(alu.shf_l(sts[h], lane_r, 7))
            p.emit(alu.iadd3(sts[h], sts[h], tmp))
        pairs = self.transpose_pairs(i)
        ld_imm, st_imm = self.transpose_offsets(sv, st, pairs)
        leader = p.elect("t_leader")
        vin = res.vpipe.consumer(f"tv{i}")
        vout = res.tpipe.producer(f"tt{i}")
        regs = [p.rvec(f"t_frag{j}", 4) for j in range(2)]
        lane_ix = Lane("t_lane", lane, 32)
        r_ix = Lane("t_lane_r", lane_r, 8)
        q_ix = Lane("t_lane_q", lane_q, 4)
        with p.loop("kv_transpose", t.n_blocks, max_count=self.n_max):
            with vin.stage():
                with vout.stage():
                    vin.wait_full()
                    vout.wait_empty()
                    ld_base, ld_off = p.derive.value_reg("addr", sv.at(vin.ring, 0, 0))
                    st_base, st_off = p.derive.value_reg("addr", st.at(vout.ring, 0, 0))
                    for j, (a, c) in enumerate(pairs):
                        v = regs[j % 2]
                        src = sv.at(vin.ring, lane_ix + 32 * a, 8 * c)
                        p.emit(memory.ldsm(v, Mem(ld[c % 8], ld_base, ld_off + ld_imm[j]), trans=True)
                               .noted(src.note("addr", 1)))
                        dst = st.at(vout.ring, r_ix + 8 * c, q_ix * 8 + 32 * a)
                        p.emit(memory.stsm(Mem(sts[(a % 2) if self.bn > 32 else 0], st_base, st_off + st_imm[j]), v)
                               .noted(dst.note("addr", 0)))
                    p.emit(sync.fence_proxy_async())  # Vᵀ's generic writes before the tensor core reads them
                    p.emit(control.warpsync_all())
                    vout.arrive_full(leader)
                    vin.free(leader)

    def transpose_offsets(self, sv: TileRing, st: TileRing, pairs: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
        """The immediates of each pair's load and store, checked for every lane against the
        buffers' layouts (stage 0; a stage is a whole number of swizzle periods)."""
        ld_imm, st_imm = [], []
        for a, c in pairs:
            def ld_reg(lane: int) -> int:
                return lane * 128 + ((lane % 8) ^ (c % 8)) * 16

            def st_reg(lane: int) -> int:
                h = a % 2
                return (lane % 8) * 128 + ((4 * h + lane // 8) ^ (lane % 8)) * 16

            li = sv.offset([0, 32 * a, 8 * c]) - ld_reg(0)
            si = st.offset([0, 8 * c, 32 * a]) - st_reg(0)
            for lane in range(32):
                if sv.offset([0, 32 * a + lane, 8 * c]) != li + ld_reg(lane):
                    raise WarpyError(f"transposer: V's layout puts row {32 * a + lane}, column {8 * c} elsewhere than "
                                     "the per-lane load offsets assume")
                if st.offset([0, 8 * c + lane % 8, 32 * a + 8 * (lane // 8)]) != si + st_reg(lane):
                    raise WarpyError(f"transposer: Vᵀ's layout puts row {8 * c + lane % 8}, column "
                                     f"{32 * a + 8 * (lane // 8)} elsewhere than the per-lane store offsets assume")
            ld_imm.append(li)
            st_imm.append(si)
        return ld_imm, st_imm

    # -- consumers ----------------------------------------------------------------------------
    def turn_wait(self, p: Program, w: int) -> None:
        if self.cfg.pingpong:
            p.emit(sync.bar_sync(TURN_BAR + w, 256))

    def turn_pass(self, p: Program, w: int) -> None:
        if self.cfg.pingpong:
            p.emit(sync.bar_arv(TURN_BAR + (1 - w), 256))

    def consumer(self, p: Program, res: Sm90AttentionResources, w: int) -> None:
        cfg, bn, d = self.cfg, self.bn, self.d
        ok = p.up("regs_granted")
        grow = p.fresh_label("GROW")
        p.label(grow)
        p.emit(control.setmaxnreg_try_alloc(ok, CONSUMER_REGS))
        p.emit(control.bra(grow).guarded(~ok), mark="~")
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
        c, thr, ninf = F32.of(p.r("c_log2")), F32.of(p.r("thr")), F32.of(p.r("neg_inf"))
        p.emit(alu.mov(c, f32_bits(prob.scale * LOG2E)))
        p.emit(alu.mov(thr, f32_bits(float(self.cfg.rescale_threshold))))
        p.emit(alu.mov(ninf, 0xFF800000))
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
        masked: Union[bool, P]
        if isinstance(t.n_unmasked, int) and isinstance(blk, int):
            masked = blk >= t.n_unmasked
        elif isinstance(t.n_unmasked, int) and t.n_unmasked >= self.n_max:
            masked = False
        else:
            masked = p.p("masked")
            nu = t.n_unmasked
            if isinstance(blk, int):
                assert not isinstance(nu, int)
                p.emit(alu.isetp("LE", masked, nu, blk))
            else:
                if isinstance(nu, int):
                    p.emit(alu.isetp("GE", masked, blk, nu))
                else:
                    p.emit(alu.isetp("GE", masked, blk, nu))
        if masked is True:
            self.mask(p, s, sm, blk)
        elif isinstance(masked, P):
            with p.when(masked):
                self.mask(p, s, sm, blk)
        # the rows' maxima of the raw scores: 4 chains a row, then the quad of lanes holding the row
        mb = []
        for h in range(2):
            vals = self.row_values(h)
            chains = [F32.of(p.r(f"mxc{h}_{k}")) for k in range(4)]
            for k in range(4):
                p.emit(alu.fmax(chains[k], F32.of(s[vals[2 * k]]), F32.of(s[vals[2 * k + 1]])))
            for j, v in enumerate(vals[8:]):
                ch = chains[j % 4]
                p.emit(alu.fmax(ch, ch, F32.of(s[v])))
            p.emit(alu.fmax(chains[0], chains[0], chains[1]))
            p.emit(alu.fmax(chains[2], chains[2], chains[3]))
            p.emit(alu.fmax(chains[0], chains[0], chains[2]))
            warp_reduce(p, chains[0], "max", width=4, tmp=f"xchg{h}")
            mb.append(chains[0])
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
            need = p.p("need_rescale")
            p.emit(alu.fsetp("GT", need, grow[0], sm.thr))
            rescale = p.up("rescale")
            p.emit(alu.voteu_any(rescale, need))
            with p.when(rescale):
                for h in range(2):
                    alpha = F32.of(p.r(f"alpha{h}"))
                    p.emit(alu.fmax(cand[h], cand[h], sm.mx[h]))  # the new maximum (never below the old)
                    p.emit(alu.fadd(alpha, sm.mx[h], -cand[h]))
                    p.emit(alu.ex2(alpha, alpha))
                    p.emit(alu.mov(sm.mx[h], cand[h]))
                    p.emit(alu.fmul(sm.l[h], sm.l[h], alpha))
        # S = exp2(S c - max), then the rows' partial sums (4 chains a row)
        for h in range(2):
            for v in self.row_values(h):
                x = F32.of(s[v])
                p.emit(alu.ffma(x, x, sm.c, -sm.mx[h]))
                p.emit(alu.ex2(x, x))
        for h in range(2):
            vals = self.row_values(h)
            chains = [F32.of(p.r(f"sum{h}_{k}")) for k in range(4)]
            for k in range(4):
                p.emit(alu.fadd(chains[k], F32.of(s[vals[2 * k]]), F32.of(s[vals[2 * k + 1]])))
            for j, v in enumerate(vals[8:]):
                ch = chains[j % 4]
                p.emit(alu.fadd(ch, ch, F32.of(s[v])))
            p.emit(alu.fadd(chains[0], chains[0], chains[1]))
            p.emit(alu.fadd(chains[2], chains[2], chains[3]))
            p.emit(alu.fadd(chains[0], chains[0], chains[2]))
            if first:
                p.emit(alu.mov(sm.l[h], chains[0]))
            else:
                p.emit(alu.fadd(sm.l[h], sm.l[h], chains[0]))
        return rescale

    def rescale_o(self, p: Program, o: RVec, rescale: UP) -> None:
        """O's rows *= their factors, where the warp's rows moved (after the P·V reading O is done)."""
        with p.when(rescale):
            for v in range(self.d // 2):
                x = F32.of(o[v])
                p.emit(alu.fmul(x, x, F32.of(R(f"alpha{(v // 2) % 2}"))))

    def pack(self, p: Program, s: RVec, pf: RVec) -> None:
        """P = S's fp32 values as bf16 pairs: register i holds columns 2i, 2i + 1 of the fragment."""
        for i in range(self.bn // 4):
            p.emit(alu.f2fp(BF16x2.of(pf[i]), F32.of(s[2 * i + 1]), F32.of(s[2 * i])))

    def normalise(self, p: Program, o: RVec, sm: Softmax) -> None:
        """O /= the row sums (the quad's partial sums added first)."""
        for h in range(2):
            warp_reduce(p, sm.l[h], "sum", width=4, tmp=f"xchg{h}")
            p.emit(alu.rcp(sm.l[h], sm.l[h]))
        for v in range(self.d // 2):
            x = F32.of(o[v])
            p.emit(alu.fmul(x, x, sm.l[(v // 2) % 2]))

    def epilogue(self, p: Program, res: Sm90AttentionResources, w: int, t: TileOfCta, o: RVec) -> None:
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
        with p.when(lead):
            tma_store(p, res.sq.at(w, 0, 0), res.to, self.coords(q_row, t.h, t.b))
            p.emit(tma.bulk_commit())
            p.emit(tma.bulk_wait(0))
