"""What the forward attention programs share, whatever the target: the CTA's tile and the order of
the CTAs, the operands' global layouts and TMA boxes, the shared buffers (Q, the K, V and Vᵀ rings)
and the pipes between the roles, the loader's K/V loop, the V transposer (V's rows are P·V's K and
both tensor cores read B K-major, so each landed V tile becomes Vᵀ by `LDSM.T` / `STSM`), the mask,
the online softmax's constants, reductions and maximum updates, and the TMA store of O.

Each target's module builds on it: `kernels/attention_sm90.py` (sm_90a: two consumer warpgroups of
64 queries, wgmma with P in registers) and `kernels/attention_sm100.py` (sm_100a: one or two tiles
of 128 queries, tcgen05 with S, P and O in tensor memory). docs/attention.md describes both.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, Callable, Protocol, TypeVar, Union

import attrs

from warpy.errors import WarpyError
from warpy.isa.buffers import BarrierArray, TensorMap, TileRing
from warpy.isa.families import alu, control, memory, sync, tma
from warpy.isa.families.typed import BF16x2, F32
from warpy.isa.index import Lane
from warpy.isa.instr import Instr
from warpy.isa.operands import RZ, Mem, P, R, RVec, UP, UR
from warpy.isa.pipes import ConsumerEnd, Pipe, ProducerEnd
from warpy.isa.program import Program
from warpy.isa.units.tma import TmaCoord, tma_box, tma_load, tma_store
from warpy.layout import Layout
from warpy.layout.smem import smem_tile
from warpy.target import Target

from .schedule import cdiv, divide

if TYPE_CHECKING:
    from .attention import AttentionProblem

BM = 128  # queries a tile: a CTA's on sm_90a, a tensor-memory lane a query on sm_100a
LOG2E = 1.4426950408889634


def f32_bits(x: float) -> int:
    """The bits of x rounded to fp32 (nearest)."""
    return int(struct.unpack("<I", struct.pack("<f", x))[0])


class RingConfig(Protocol):
    """What both targets' configurations have: the key block, the rings' depths, the threshold."""

    @property
    def bn(self) -> int: ...
    @property
    def k_stages(self) -> int: ...
    @property
    def v_stages(self) -> int: ...
    @property
    def t_stages(self) -> int: ...
    @property
    def rescale_threshold(self) -> int: ...

    def describe(self) -> str: ...


def ring_smem_bytes(cfg: RingConfig, d: int, q_rows: int, transposed: bool = True) -> int:
    """Dynamic shared memory: Q (q_rows x D; O is staged over it), the K, V and (`transposed`) Vᵀ
    rings (BN x D a stage), barriers."""
    tile = cfg.bn * d * 2
    return q_rows * d * 2 + (cfg.k_stages + cfg.v_stages + (cfg.t_stages if transposed else 0)) * tile + 1024


@attrs.frozen
class TileOfCta:
    """The CTA's tile: its query block, query head, key/value head and batch (registers), its key
    blocks and how many of them need no mask (registers, or ints where the problem fixes them)."""

    m_block: R
    h: R
    hkv: R
    b: R
    n_blocks: Union[int, R]
    n_unmasked: Union[int, R]


@attrs.frozen
class Operands:
    """The tensor maps and shared buffers `AttentionBuilder.operands` declares: Q, K, V and O's maps,
    Q's tiles, the K, V and Vᵀ rings."""

    tq: TensorMap
    tk: TensorMap
    tv: TensorMap
    to: TensorMap
    sq: TileRing
    sk: TileRing
    sv: TileRing
    st: TileRing


_R = TypeVar("_R", bound="AttentionResources")


@attrs.frozen(kw_only=True)
class AttentionResources(Operands):
    """What the roles share on every target, declared in `build` before any role: the operands,
    Q's barrier and the K, V and Vᵀ pipes. A target adds its own (sm_100a: tensor memory and its
    barriers)."""

    q_full: BarrierArray
    kpipe: Pipe
    vpipe: Pipe
    tpipe: Pipe

    @classmethod
    def of(cls: type[_R], ops: Operands, **more: Any) -> _R:
        """The resources of `ops` and the fields `more` names."""
        return cls(**attrs.asdict(ops, recurse=False), **more)


@attrs.frozen
class TransposerLanes:
    """A transposer lane's registers: its lane, lane % 8 and lane / 8, the 8 load offsets (one per
    16-byte chunk c % 8: l * 128 + ((l % 8) ^ c) * 16) and the 2 store offsets (one per half of a
    64-key swizzle span: (l % 8) * 128 + ((4 h + l / 8) ^ (l % 8)) * 16), and the lanes as indices."""

    ld: list[R]
    sts: list[R]
    lane_ix: Lane
    r_ix: Lane
    q_ix: Lane


def reduce4(p: Program, op: Callable[[F32, F32, F32], Instr], chains: list[F32], vals: list[F32]) -> F32:
    """chains[0] = op over `vals` (at least 8) in 4 independent chains, then their tree."""
    for k in range(4):
        p.emit(op(chains[k], vals[2 * k], vals[2 * k + 1]))
    for j, v in enumerate(vals[8:]):
        ch = chains[j % 4]
        p.emit(op(ch, ch, v))
    p.emit(op(chains[0], chains[0], chains[1]))
    p.emit(op(chains[2], chains[2], chains[3]))
    p.emit(op(chains[0], chains[0], chains[2]))
    return chains[0]


def raise_max(p: Program, cand: F32, mx: F32, l: F32, alpha: F32) -> None:
    """A row's maximum moves to cand (never below the old): alpha = exp2(old - new), l *= alpha."""
    p.emit(alu.fmax(cand, cand, mx))  # the new maximum (never below the old)
    p.emit(alu.fadd(alpha, mx, -cand))
    p.emit(alu.ex2(alpha, alpha))
    p.emit(alu.mov(mx, cand))
    p.emit(alu.fmul(l, l, alpha))


def pack_pairs(p: Program, s: RVec, pf: RVec, n: int) -> None:
    """P = S's fp32 values as n bf16 pairs: register i holds values 2i (low half) and 2i + 1 (high)."""
    for i in range(n):
        p.emit(alu.f2fp(BF16x2.of(pf[i]), F32.of(s[2 * i + 1]), F32.of(s[2 * i])))


def grow_registers(p: Program, regs: int) -> None:
    """USETMAXREG.TRY_ALLOC to `regs`, retried until granted."""
    ok = p.up("regs_granted")
    grow = p.fresh_label("GROW")
    p.label(grow)
    p.emit(control.setmaxnreg_try_alloc(ok, regs))
    p.emit(control.bra(grow).guarded(~ok), mark="~")


class AttentionBuilder:
    """The program builder's parts both targets share; `setup` sets what they read."""

    p: AttentionProblem
    cfg: RingConfig
    target: Target
    d: int
    bn: int
    bm: int
    m_blocks: int
    n_max: int
    grid: int
    log_bn: int
    transposers: int

    def setup(self, problem: AttentionProblem, cfg: RingConfig, target: Target, bm: int, smem: int,
              transposers: int) -> None:
        """Refuse what no target runs (in one line), then the sizes: `bm` queries a CTA, `smem`
        bytes of shared memory, `transposers` warps turning V into Vᵀ."""
        p = problem
        if cfg.bn not in (64, 128):
            raise WarpyError(f"bn={cfg.bn}: the key block is 64 or 128 keys")
        for name in ("k_stages", "v_stages") + (("t_stages",) if transposers else ()):
            if not 1 <= getattr(cfg, name) <= 8:
                raise WarpyError(f"{name}={getattr(cfg, name)}: a ring has 1 to 8 stages")
        if cfg.v_stages < 2:
            raise WarpyError("v_stages=1: the loader would wait on the stage the block before still reads; use 2 or more")
        if not 1 <= cfg.rescale_threshold <= 16:
            raise WarpyError(f"rescale_threshold={cfg.rescale_threshold}: P's values reach 2^threshold in bf16; "
                             "give 1..16")
        if smem > target.max_dynamic_smem:
            raise WarpyError(f"{cfg.describe()} needs {smem} bytes of shared memory for D={p.D}, more "
                             f"than {target.max_dynamic_smem}")
        self.p, self.cfg, self.target = problem, cfg, target
        self.d, self.bn, self.bm = p.D, cfg.bn, bm
        self.m_blocks = cdiv(p.S_q, bm)
        self.n_max = cdiv(p.S_kv, cfg.bn)
        self.grid = self.m_blocks * p.H_q * p.B
        self.log_bn = cfg.bn.bit_length() - 1
        self.transposers = transposers

    @property
    def name_stem(self) -> str:
        """The program's name up to its target's own fields."""
        p, c = self.p, self.cfg
        return (f"attention_{self.target.short}_b{p.B}h{p.H_q}k{p.H_kv}_q{p.S_q}_kv{p.S_kv}_d{p.D}_{p.layout}"
                f"{'_causal' if p.causal else ''}_bn{c.bn}_s{c.k_stages}{c.v_stages}{c.t_stages if self.transposers else ''}")

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

    def operands(self, p: Program, q_rows: int, q_tiles: int, transposed: bool = True) -> Operands:
        """The tensor maps (Q and O in boxes of q_rows x D, K and V of BN x D; 128-byte swizzle), O's
        global buffer, and the shared buffers: Q's q_tiles tiles, the K and V rings, and P·V's B: the
        Vᵀ ring (`transposed`), or else V's ring itself seen MN-major (coordinates (stage, head_dim,
        key): the same bytes, no memory of its own), which the 16-bit wgmma reads transposed."""
        cfg, d, bn = self.cfg, self.d, self.bn
        q_tile = smem_tile(q_rows, d, "bf16", "K", 128)
        kv_tile = smem_tile(bn, d, "bf16", "K", 128)
        vt_tile = smem_tile(d, bn, "bf16", "K", 128)
        tq = p.tmap("q", tma_box(self.global_layout("q"), q_tile, l2_promotion=256))
        tk = p.tmap("k", tma_box(self.global_layout("k"), kv_tile, l2_promotion=256))
        tv = p.tmap("v", tma_box(self.global_layout("v"), kv_tile, l2_promotion=256))
        to = p.tmap("o", tma_box(self.global_layout("o"), q_tile))
        og = self.global_layout("o")
        p.global_buffer("o_out", Layout(og.shape, tuple(2 * int(s) for s in og.stride)), "bf16", "o")  # type: ignore[union-attr, arg-type]
        sq = p.smem_ring("q", q_tiles, q_tile.layout, "bf16")  # a "stage" a tile of Q
        sk = p.smem_ring("k", cfg.k_stages, kv_tile.layout, "bf16")
        sv = p.smem_ring("vraw", cfg.v_stages, kv_tile.layout, "bf16")
        if transposed:
            st = p.smem_ring("vt", cfg.t_stages, vt_tile.layout, "bf16")
        else:
            st = TileRing("vmn", sv.base, cfg.v_stages, smem_tile(d, bn, "bf16", "MN", 128).layout, "bf16")
            p.buffers.append(st)
        return Operands(tq, tk, tv, to, sq, sk, sv, st)

    # -- the CTA's tile ------------------------------------------------------------------------
    def tile_of(self, x: int) -> tuple[int, int, int, int, int, int]:
        """The model `tile` emits: CTA x's (m_block, head, kv_head, batch, n_blocks, n_unmasked) (the
        CTA's bm queries: the blocks its last row sees, the blocks all its rows see whole)."""
        prob, bm = self.p, self.bm
        bh, rev = divmod(x, self.m_blocks)
        m_block = self.m_blocks - 1 - rev
        b, h = divmod(bh, prob.H_q)
        if not prob.causal:
            return m_block, h, h // prob.group, b, self.n_max, prob.S_kv // self.bn
        end = min(bm * m_block + bm, prob.S_q, prob.S_kv)
        free = min((bm * m_block + 1) // self.bn, prob.S_kv // self.bn)
        return m_block, h, h // prob.group, b, cdiv(end, self.bn), free

    def tile(self, p: Program) -> TileOfCta:
        """The CTA's tile from its index x: x = (b H_q + h) m_blocks + (m_blocks - 1 - m_block), so
        CTAs of one head run together (its K and V shared through the L2) and, causal, the longest
        rows of a head start first."""
        prob, bm, arch = self.p, self.bm, self.target.name
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
        # causal (key j <= query i): the tile's last row r_max = min(bm m + bm - 1, S_q - 1) needs keys
        # 0 .. min(r_max, S_kv - 1): n_blocks = ceil(min(r_max + 1, S_kv) / BN); block n needs no mask
        # when all its keys precede the tile's first row: n < (bm m + 1) / BN, and n < S_kv / BN
        end, n_blocks, n_free = p.r("kv_end"), p.r("n_blocks"), p.r("n_unmasked")
        p.emit(alu.imad(end, m_block, bm, bm))
        p.emit(alu.imin(end, end, min(prob.S_q, prob.S_kv), arch=arch))
        p.emit(alu.iadd3(end, end, self.bn - 1))
        p.emit(alu.shf_r(n_blocks, end, self.log_bn))
        p.emit(alu.imad(n_free, m_block, bm, 1))
        p.emit(alu.shf_r(n_free, n_free, self.log_bn))
        p.emit(alu.imin(n_free, n_free, prob.S_kv // self.bn, arch=arch))
        return TileOfCta(m_block, h, hkv, b, n_blocks, n_free)

    # -- the loader ------------------------------------------------------------------------------
    def prefetch_maps(self, p: Program, res: AttentionResources) -> P:
        """The loader's elected thread (returned) prefetches the four tensor maps."""
        leader = p.elect()
        with p.when(leader):
            for tm in (res.tq, res.tk, res.tv, res.to):
                p.emit(tma.tmap_prefetch(tm.name))
        return leader

    def load_kv(self, p: Program, res: AttentionResources, t: TileOfCta, leader: P) -> None:
        """For each of the tile's key blocks n: K(n) and V(n) by TMA into their rings."""
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

    # -- the transposers ---------------------------------------------------------------------------
    def transpose_pairs(self, i: int) -> list[tuple[int, int]]:
        """Transposer i's share of a V tile: (a, c) = the 32 keys 32a.. by the 8 head_dim columns 8c..,
        one LDSM.T.x4 + STSM.x4 each, split evenly and contiguously over the transposers."""
        pairs = [(a, c) for c in range(self.d // 8) for a in range(self.bn // 32)]
        lo, hi = i * len(pairs) // self.transposers, (i + 1) * len(pairs) // self.transposers
        return pairs[lo:hi]

    def transpose_offsets(self, sv: TileRing, st: TileRing, pairs: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
        """The immediates of each pair's load and store, checked for every lane against the
        buffers' layouts (stage 0; a stage is a whole number of swizzle periods)."""
        ld_imm, st_imm = [], []
        for a, c in pairs:
            def ld_reg(lane: int) -> int:
                return lane * 128 + ((lane % 8) ^ (c % 8)) * 16

            def st_reg(lane: int) -> int:
                return (lane % 8) * 128 + ((4 * (a % 2) + lane // 8) ^ (lane % 8)) * 16

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

    def transposer_lanes(self, p: Program) -> TransposerLanes:
        """The lane's registers the transposer addresses with (`TransposerLanes`)."""
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
        return TransposerLanes(ld, sts, Lane("t_lane", lane, 32), Lane("t_lane_r", lane_r, 8), Lane("t_lane_q", lane_q, 4))

    def transpose_loop(self, p: Program, res: AttentionResources, t: TileOfCta, vin: ConsumerEnd, vout: ProducerEnd,
                       leader: P, body: Callable[[tuple[UR, int], tuple[UR, int]], None]) -> None:
        """For each key block: wait for V(n) and a free Vᵀ stage, `body(V's base, Vᵀ's base)` (each a
        register and offset), then Vᵀ's generic writes fenced to the async proxy, Vᵀ full, V free."""
        with p.loop("kv_transpose", t.n_blocks, max_count=self.n_max):
            with vin.stage():
                with vout.stage():
                    vin.wait_full()
                    vout.wait_empty()
                    ld_base = p.derive.value_reg("addr", res.sv.at(vin.ring, 0, 0))
                    st_base = p.derive.value_reg("addr", res.st.at(vout.ring, 0, 0))
                    body(ld_base, st_base)
                    p.emit(sync.fence_proxy_async())  # Vᵀ's generic writes before the tensor core reads them
                    p.emit(control.warpsync_all())
                    vout.arrive_full(leader)
                    vin.free(leader)

    def transpose_share(self, p: Program, res: AttentionResources, vin: ConsumerEnd, vout: ProducerEnd,
                        lanes: TransposerLanes, regs: list[RVec], i: int, ld_base: tuple[UR, int],
                        st_base: tuple[UR, int]) -> None:
        """Transposer i's pairs of the current V tile: lane l reads row 32a + l of V at column 8c
        (`LDSM.16.M88.4.T`: four 8 x 8 matrices, transposed) and writes rows 8c + l % 8 of Vᵀ at
        column 32a + 8 (l / 8) (`STSM.16.M88.4`), at its lane's register plus an immediate."""
        sv, st = res.sv, res.st
        pairs = self.transpose_pairs(i)
        ld_imm, st_imm = self.transpose_offsets(sv, st, pairs)
        for j, (a, c) in enumerate(pairs):
            v = regs[j % 2]
            src = sv.at(vin.ring, lanes.lane_ix + 32 * a, 8 * c)
            p.emit(memory.ldsm(v, Mem(lanes.ld[c % 8], ld_base[0], ld_base[1] + ld_imm[j]), trans=True)
                   .noted(src.note("addr", 1)))
            dst = st.at(vout.ring, lanes.r_ix + 8 * c, lanes.q_ix * 8 + 32 * a)
            p.emit(memory.stsm(Mem(lanes.sts[(a % 2) if self.bn > 32 else 0], st_base[0], st_base[1] + st_imm[j]), v)
                   .noted(dst.note("addr", 0)))

    # -- the softmax ---------------------------------------------------------------------------------
    def softmax_constants(self, p: Program) -> tuple[F32, F32, F32]:
        """scale · log2 e, the rescale threshold and -inf in registers."""
        c, thr, ninf = F32.of(p.r("c_log2")), F32.of(p.r("thr")), F32.of(p.r("neg_inf"))
        p.emit(alu.mov(c, f32_bits(self.p.scale * LOG2E)))
        p.emit(alu.mov(thr, f32_bits(float(self.cfg.rescale_threshold))))
        p.emit(alu.mov(ninf, 0xFF800000))
        return c, thr, ninf

    def mask_if_needed(self, p: Program, t: TileOfCta, blk: Union[int, R], mask: Callable[[], None]) -> None:
        """`mask()` where block `blk` needs it (n_unmasked <= blk): not at all, always, or under a
        predicate, as far as the problem fixes it at build time."""
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
                p.emit(alu.isetp("GE", masked, blk, nu))
        if masked is True:
            mask()
        elif isinstance(masked, P):
            with p.when(masked):
                mask()

    def rescale_needed(self, p: Program, grow: F32, thr: F32) -> UP:
        """The uniform predicate "some row of the warp grew past the threshold"."""
        need = p.p("need_rescale")
        p.emit(alu.fsetp("GT", need, grow, thr))
        rescale = p.up("rescale")
        p.emit(alu.voteu_any(rescale, need))
        return rescale

    # -- the epilogue ----------------------------------------------------------------------------------
    def store_o(self, p: Program, res: AttentionResources, lead: P, q_tile: int, o_row: R, t: TileOfCta) -> None:
        """The lead thread stores Q's tile `q_tile` (O staged over it) by TMA at row o_row (clipped
        at S_q) and waits for the store."""
        with p.when(lead):
            tma_store(p, res.sq.at(q_tile, 0, 0), res.to, self.coords(o_row, t.h, t.b))
            p.emit(tma.bulk_commit())
            p.emit(tma.bulk_wait(0))


__all__ = ["AttentionBuilder", "AttentionResources", "BM", "LOG2E", "Operands", "RingConfig", "TileOfCta",
           "TransposerLanes", "f32_bits", "grow_registers", "pack_pairs", "raise_max", "reduce4", "ring_smem_bytes"]
