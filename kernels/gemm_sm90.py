"""The Hopper GEMM (sm_90a): C = A · Bᵀ, A (M x K) and B (N x K) each K-major or MN-major (A stored
K x M, B K x N: read in place by HGMMA's `.tnspA` / `.tnspB`, landed by one TMA box per 64 rows of M
or N), fp16/bf16 in (or 8-bit floats, K-major, through QGMMA, scaled per tensor or per row / column:
kernels/gemm_fp8.py), fp32 accumulation, fp32/bf16/fp16 out. One program, configured per shape by the GEMM family's rule (`kernels/gemm.py`).

Warp-specialised and persistent:

- warpgroup 0 gives its registers back (`USETMAXREG.DEALLOC`); its warp 0 is the producer: for
  every tile this CTA owns and every K block, it waits for an empty stage of the ring, arms the
  stage's full barrier with the stage's bytes and issues two TMA loads (A's BM x 64 box, B's
  BN x 64 box, 128-byte swizzle);
- warpgroups 1.. are consumers, one per 64 rows of the tile (1 to 3: 64- to 192-row tiles; or two of
  128 rows, `wg_rows`, each issuing two HGMMAs a k step into two accumulators: 256-row tiles;
  `USETMAXREG.TRY_ALLOC` up to 232 registers beside one or two, 160 beside three: `register_split`): each waits for a full stage, issues BK/16 `HGMMA.64xBNx16` into its accumulator
  registers, keeps one group in flight (`WARPGROUP.DEPBAR.LE gsb0, 0x1`) and frees the stage
  before it; at the end of the tile it stores its accumulators straight from registers, or through
  shared memory and TMA stores (`staged_epilogue`; the producer meanwhile fills the ring for the
  next tile);
- tiles are walked in a grouped order (`group` M-tiles share a sweep over N, so a wave of CTAs
  reuses A and B through the L2); a CTA takes tiles ctaid, ctaid + grid, ...;
- or, with `stream_k`, the tiles' k blocks are shared out over the grid (kernels.schedule.StreamK):
  CTAs that hold part of a tile leave fp32 partial sums in scratch memory and raise flags; the CTA
  holding its last k block adds them and stores C (`fixup`);
- with `cluster_m` x `cluster_n` > 1, multicast clusters (1, 2, 4 or 8 CTAs a side, 8 at most): CTA
  (i, j) of a cluster takes M-block cluster_m I + i and N-block cluster_n J + j of cluster tile (I, J),
  all in lockstep (cluster tiles in the grouped order; those past M or N compute zeros and store
  nothing). Each producer loads slice j of its A box (BM / cluster_n rows), multicast to the CTAs of
  its row (same M-block), and slice i of its B box (BN / cluster_m rows), multicast to its column; a
  stage is refilled once every CTA writing into it has had it freed (each consumer warp arrives on
  its own empty barrier and those of its row's and column's CTAs); the producer drains the ring
  before it exits so no remote arrival reaches an exited CTA. A grid holds no more clusters than the
  H200 runs at once (`RESIDENT_CLUSTERS`).

docs/wgmma.md describes the program and the rule that configures it.

Every shared-memory address, descriptor and barrier address is derived from the buffers'
layouts by the Program; the global output address is the program's own arithmetic (rows and
columns of the wgmma accumulator fragment, checked against the problem's edges on ragged tiles).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Iterator, Optional, Union

import attrs

from warpy.errors import WarpyError
from warpy.isa.families import alu, control, memory, sync, tma, wgmma
from warpy.isa.families._util import ins
from warpy.isa.families.typed import F32
from warpy.isa.operands import PT, RZ, UR, URZ, CBank, GMem, Mem, P, R, RVec, URVec
from warpy.isa.buffers import BarrierArray, Param, SmemBuffer, TensorMap, Tile, TileRing
from warpy.isa.index import Coord, Ix, Lane, Uniform
from warpy.isa.pipes import ConsumerEnd, Pipe, ProducerEnd, init_barriers, wait
from warpy.isa.program import Program
from warpy.isa.units.tma import tma_box, tma_load, tma_multicast_slices, tma_store, tma_uneven_slices
from warpy.isa.units.wgmma import hgmma
from warpy.layout import Layout, LayoutError, Swizzle, SwizzledLayout
from warpy.layout.desc import multicast_rows
from warpy.layout.tma import store_clips_exactly
from warpy.layout.smem import SmemTile as SmemTileT, smem_tile
from warpy.target import SM90A, dtype_bytes

from .gemm_epilogue import Epilogue, emit_consts, emit_element, emit_load, fragment_origin
from . import gemm_fp8
from .schedule import StreamK, TileOrder, cdiv, divide, strided_tiles

if TYPE_CHECKING:
    from .gemm import GemmProblem

ACC_FULL_REGS = 232  # consumer warpgroups' registers after USETMAXREG (one or two consumer warpgroups)
PRODUCER_REGS = 40
PRODUCER_REGS_WIDE = 32  # the producer's registers beside three consumer warpgroups (what they leave: 65536 exactly)
MAX_CONSUMERS = 3  # 192-row tiles: three consumer warpgroups of 64 rows (4 x 128 threads a CTA)
WG_ROWS = (64, 128)  # rows a consumer warpgroup computes (Sm90Config.wg_rows)
WIDE_WG_MAX_BN = 128  # a 128-row warpgroup's accumulator: 128 x BN fp32 = BN registers a thread, as 64 x 256's


def register_split(consumers: int) -> tuple[int, int]:
    """(producer's, each consumer's) registers a thread after USETMAXREG: one or two consumer
    warpgroups take ACC_FULL_REGS beside a producer of PRODUCER_REGS; three share what the register
    file (65536 a CTA at one CTA an SM) leaves beside a producer of 32, in multiples of 8:
    (65536 - 128 x 32) / (3 x 128) = 160 exactly, enough for a 64 x 192 fp32 accumulator (96 a
    thread) and the addresses. (24, USETMAXREG's least, would leave 162.7: still 160 a consumer.)
    The pool USETMAXREG shares out is what the CTA was launched with, (65536 / threads) rounded down
    to 8 a thread (65536 for 512 threads; four consumer warpgroups, 640 threads, would launch with
    96 a thread, 61440 in all, and take 112 each)."""
    if consumers <= 2:
        return PRODUCER_REGS, ACC_FULL_REGS
    prod = PRODUCER_REGS_WIDE
    threads = 128 * (1 + consumers)
    pool = (65536 // threads) // 8 * 8 * threads
    return prod, (pool - 128 * prod) // (128 * consumers) // 8 * 8


STORE_OFFSET_LIMIT = 1 << 23  # a global store's immediate offset: 24 bits, signed
MN_BOX_ROWS = 64  # rows (M or N) of an MN-major operand's TMA box: one 128-byte swizzle span of 16-bit elements


@attrs.frozen
class Sm90Config:
    """One configuration of the program: tile BM x BN x BK (BM = 64 per consumer warpgroup), ring
    depth, grid (persistent CTAs) and the tile order's group height (in M-blocks). With
    `cluster_m` x `cluster_n` > 1 the CTAs run in clusters: a cluster's tile is cluster_m M-blocks by
    cluster_n N-blocks, each CTA loads a slice of its A box and of its B box, multicast to the CTAs of
    the cluster that share it."""

    bn: int = 256
    consumers: int = 2
    stages: int = 4
    sms: int = SM90A.sms
    group: int = 8
    bk: int = 64
    l2_promotion: int = 256  # bytes the L2 fetches around each TMA request (0 = the driver's default)
    staged_epilogue: bool = False  # C through shared memory (STSM) and TMA stores; 16-bit C only
    stream_k: bool = False  # the tiles' k blocks shared out evenly over the grid (kernels.schedule.StreamK)
    split: int = 0  # with stream_k: a grid of tiles x split CTAs, so every tile splits at the same k blocks
    # CTAs a cluster along M and along N (1, 2, 4 or 8; at most MAX_CLUSTER a cluster): the cluster_m
    # CTAs of a column of the cluster share B's tile (each loads BN / cluster_m of its rows, multicast to
    # the column), the cluster_n CTAs of a row share A's tile likewise
    cluster_m: int = 1
    cluster_n: int = 1
    # 8-bit floats: each k block's products summed by the tensor core into a second register set
    # (`part`), then added into the fp32 accumulator on the CUDA cores (FADD): the tensor core's fp8
    # adder keeps fewer bits than fp32, so long K loses precision without it (docs/fp8.md)
    promote: bool = False
    # C^T = B · A^T: B's rows (N) run along the MMA's 64-row side and A's (M) along its narrow BN side, so
    # a short M (decode: M <= 64) takes BN 8..64 and the tiles split N finely over the SMs; the
    # accumulator holds C transposed, stored element by element, or staged (`staged_epilogue`:
    # STSM.16.MT88 writes it transposed into a tile of C, a TMA store moves it)
    swap_ab: bool = False
    # CTAs a cluster along K: the S CTAs of an S x 1 cluster share one tile's k blocks (S even
    # slices), then trade partial sums through shared memory: each owns S-th of the tile's
    # accumulator (`exchange_shares`), receives the others' sums of it by bulk copies into its
    # shared memory and stores it. No global workspace, flags or waits on another cluster.
    cluster_k: int = 1
    # rows of the tile each consumer warpgroup computes: 64 (one HGMMA 64 x BN a k step) or 128 (two, at
    # rows 0 and 64 of its slice, over the same B: 256 x BN tiles from two warpgroups, each holding a
    # 128 x BN accumulator, BN <= WIDE_WG_MAX_BN); whole tiles only (no stream-K, cluster_k or promote)
    wg_rows: int = 64

    @property
    def bm(self) -> int:
        return self.wg_rows * self.consumers

    @property
    def subs(self) -> int:
        """64-row blocks of a consumer warpgroup's slice of the tile (one accumulator each)."""
        return self.wg_rows // 64

    @property
    def cluster_size(self) -> int:
        """CTAs of a multicast cluster (cluster_m x cluster_n; 1: none)."""
        return self.cluster_m * self.cluster_n

    def describe(self) -> str:
        epi = "STSM + TMA-store epilogue" if self.staged_epilogue else "epilogue stored from registers"
        walk = f"persistent over {self.sms} SMs"
        if self.stream_k:
            over = f"K split {self.split} ways a tile" if self.split else f"stream-K over {self.sms} SMs"
            walk = f"{over} (partial sums through an fp32 workspace)"
        if self.cluster_k > 1:
            walk = (f"K split {self.cluster_k} ways a tile in {self.cluster_k}x1 clusters (partial sums traded "
                    "through shared memory)")
        shared = " and ".join(op for op, ways in (("A", self.cluster_n), ("B", self.cluster_m)) if ways > 1)
        cl = f", {self.cluster_m}x{self.cluster_n} clusters ({shared} multicast)" if self.cluster_size > 1 else ""
        cl += ", each k block's sums added in fp32 (promotion)" if self.promote else ""
        mma = f"HGMMA 64x{self.bn}x16" if self.bk == 64 else f"QGMMA 64x{self.bn}x32"  # (BK: 128 bytes of K)
        mma = mma if self.subs == 1 else f"{self.subs} x {mma} a k step"
        if self.swap_ab:
            cl += f", A and B swapped (C^T tiles: {self.bm} rows of N x {self.bn} of M)"
        return (f"sm_90a warp-specialised: {self.bm}x{self.bn}x{self.bk} tiles, {self.consumers} consumer "
                f"warpgroups ({mma}), {self.stages}-stage TMA ring, {walk}, "
                f"tiles grouped by {self.group}{cl}, {epi}")


@attrs.frozen
class Work:
    """One piece of a CTA's work: the tile (its blocks and number) and its k blocks: [k_lo,
    k_lo + k_cnt) with stream-K (registers), all kt otherwise (k_lo None)."""

    m_blk: R
    n_blk: R
    t: R
    k_lo: R | None
    k_cnt: Union[int, R]
    bt: Optional[R] = None  # the matrix of a batch (batched problems)


@attrs.frozen
class StagedChunks:
    """A map over C and the consumer warpgroups' staging tiles of C it stores from (the staged
    epilogue): 64-column chunks through two tiles a warpgroup (`c`), or one of the narrower last
    chunks (`epi_tails`: 32, 16 or 8 columns) through one (`c_tail32`, `c_tail16`, `c_tail8`)."""

    tmap: TensorMap
    tiles: SmemBuffer
    cols: int = 64  # columns of C a store moves


@attrs.frozen
class Workspace:
    """Stream-K's scratch: a flag per tile and consumer warp, a slot of partial sums per CTA."""

    flags: Param
    partials: Param


@attrs.frozen
class Sm90Resources:
    """What the roles share, declared in `build` before any role: the operand maps and rings, the
    stage pipe, and where C goes (a pointer `c` for the register-stored epilogue; `staged` and
    `staged_tails` for the staged one); the stream-K workspace; the CTA's cluster rank (2x1 clusters)."""

    ta: TensorMap
    tb: TensorMap
    c: Optional[Param]
    staged: Optional[StagedChunks]
    staged_tails: tuple[StagedChunks, ...]
    workspace: Optional[Workspace]
    sa: TileRing
    sb: TileRing
    stage: Pipe
    rank: Optional[UR]
    aux: dict[str, Param] = attrs.field(factory=dict)  # the fused epilogue's inputs (bias, c_in, residual)
    exchange: Optional["Exchange"] = None  # cluster_k: the shared memory and barriers the CTAs trade sums through
    scales: dict[str, Param] = attrs.field(factory=dict)  # an 8-bit float problem's scales (scale_a, scale_b)
    # the last CTA's box of an operand shared in uneven slices (`uneven_slices`; None: equal slices)
    ta_last: Optional[TensorMap] = None
    tb_last: Optional[TensorMap] = None


@attrs.frozen
class Exchange:
    """cluster_k's shared memory: `send` (unit, thread, 4 fp32) holds every unit of this CTA's
    partial sums; `recv` (sender rank, unit of the share, thread, 4 fp32) the copies of this CTA's
    share from the others; `recv_bar` completes when they have all landed; `done_bar` when every
    other CTA has received this one's copies (its shared memory may then go)."""

    send: SmemBuffer
    recv: SmemBuffer
    recv_bar: BarrierArray
    done_bar: BarrierArray


@attrs.frozen
class Share:
    """cluster_k: which vectors of a consumer warpgroup's accumulator this CTA owns: vector j where
    the CTA's rank (`rank`, a register) is owner[j]."""

    rank: R
    owner: tuple[int, ...]

    def mine(self, p: Program, j: int) -> P:
        """A predicate (set here, just before its use: predicates are few) that this CTA owns vector j."""
        q = p.p("x_mine")
        p.emit(alu.isetp("EQ", q, self.rank, self.owner[j]))
        return q


@attrs.frozen
class FixupThread:
    """Stream-K's per-thread constants: the memory descriptor, this thread's byte offset in a slot
    of partial sums, the CTA's index and the consumer warp's index among the flags."""

    md: URVec
    off: R
    cta: R
    wflag: R


@attrs.frozen
class EpilogueThread:
    """The register-stored epilogue's per-thread constants: this thread's first row and column in
    the tile, C's pointer, the memory descriptor and 8 rows of C in bytes."""

    row: R
    col: R
    cptr: RVec
    memdesc: URVec
    pitch8: R


@attrs.frozen
class StagedThread:
    """The staged epilogue's per-thread constants: the warpgroup's first thread (it issues the TMA
    stores) and this lane's row and column of STSM.16.M88.4's matrices, indices of the staging tiles."""

    lead: P
    row: Lane
    col: Lane
    row8: Optional[Lane] = None  # (transposed) lanes 0-15's row of an .x2 store's two matrices: l % 8


EPI_COLS = 64  # columns of C one TMA store moves (64 16-bit values: one 128-byte swizzle row)
EPI_TAILS = (32, 16, 8)  # the narrower last chunks: 64, 32 or 16 bytes a row, that span's swizzle (16: none)


def epi_tails(bn: int) -> tuple[int, ...]:
    """The staged epilogue's last chunks past the whole 64-column ones, widest first: BN % 64 as a
    sum of distinct EPI_TAILS (every multiple of 8 is one; () where BN is whole 64-column chunks)."""
    return tuple(w for w in EPI_TAILS if bn % EPI_COLS & w)


def tail_bytes(consumers: int, width: int) -> int:
    """Shared memory of one narrower chunk's staging tiles (64 rows a consumer warpgroup), 1024-byte aligned."""
    return -(-consumers * 64 * width * 2 // 1024) * 1024


def smem_bytes(cfg: Sm90Config, elem: int = 0) -> int:
    """Dynamic shared memory the configuration needs: the ring, the epilogue's staging (two
    64 x 64 buffers per consumer warpgroup) and the barriers. `elem`: bytes an input element (0: a
    stage's K is one 128-byte swizzle row of either type, as the program requires)."""
    elem = elem or max(1, 128 // cfg.bk)
    staging = 2 * cfg.consumers * 64 * EPI_COLS * 2 if cfg.staged_epilogue else 0
    if cfg.staged_epilogue and cfg.swap_ab:  # C^T: a BN x 64 tile of C a warpgroup (its blocks in turn)
        staging = cfg.consumers * cfg.bn * EPI_COLS * 2
    elif cfg.staged_epilogue:  # one more buffer a warpgroup for each narrower chunk
        staging += sum(tail_bytes(cfg.consumers, w) for w in epi_tails(cfg.bn))
    return cfg.stages * (cfg.bm + cfg.bn) * cfg.bk * elem + staging + exchange_bytes(cfg) + 1024


#: a unit of the cluster exchange: one 16-byte vector (4 accumulators) of every thread of a consumer warpgroup
UNIT_BYTES = 128 * 16
MAX_CLUSTER_K = 8  # the portable cluster size
EXCHANGE_BAR = 1 + MAX_CONSUMERS  # the named barrier of every consumer warpgroup (0: the CTA's; 1 + c: each one's)


def exchange_shares(cfg: Sm90Config) -> list[tuple[int, int]]:
    """With `cluster_k` = S: the units [lo, hi) of the tile's accumulator each rank owns. Unit
    u = c * BN/8 + j is vector j (accumulators 4j .. 4j + 3, columns 8j .. 8j + 7 of the fragment) of
    every thread of consumer warpgroup c; rank r owns [r U / S, (r + 1) U / S) of the U units."""
    s = cfg.cluster_k
    units = cfg.consumers * cfg.bn // 8
    return [(r * units // s, (r + 1) * units // s) for r in range(s)]


def cluster_k_refusal(cfg: Sm90Config) -> None:
    """Refuse, in one line, a `cluster_k` out of range or combined with what it cannot run beside."""
    s = cfg.cluster_k
    if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= MAX_CLUSTER_K:
        raise WarpyError(f"cluster_k {s!r}: a tile's k blocks split over 2 to {MAX_CLUSTER_K} CTAs of a cluster "
                         "(1: none)")
    if s == 1:
        return
    why = ("stream-K / split (the workspace's schedule)" if cfg.stream_k or cfg.split
           else "multicast clusters" if cfg.cluster_size != 1
           else "the staged epilogue (each CTA stores its share of the tile from the registers)"
           if cfg.staged_epilogue else "")
    if why:
        raise WarpyError(f"cluster_k {s}: a tile's k blocks split in a cluster do not combine with {why}")


#: the sides a multicast cluster may have (CTAs along M or N) and its most CTAs (the portable size)
CLUSTER_SIDES = (1, 2, 4, 8)
MAX_CLUSTER = 8
#: clusters of each size the H200 holds at once at one CTA an SM (cuOccupancyMaxActiveClusters, measured:
#: docs/hopper.md). A grid of more clusters than this does not run at once: the rest wait for a
#: whole cluster's SMs, and a persistent walk takes twice as long.
RESIDENT_CLUSTERS = {1: SM90A.sms, 2: 66, 4: 30, 8: 15}


def resident_clusters(size: int) -> int:
    """Clusters of `size` CTAs (one CTA an SM) the H200 runs at once."""
    return RESIDENT_CLUSTERS[size]


def cluster_refusal(cfg: Sm90Config) -> None:
    """Refuse, in one line, a multicast cluster out of range, whose slices are not whole 8-row groups,
    or combined with what it cannot run beside."""
    cm, cn = cfg.cluster_m, cfg.cluster_n
    for side, name in ((cm, "cluster_m"), (cn, "cluster_n")):
        if isinstance(side, bool) or side not in CLUSTER_SIDES:
            raise WarpyError(f"{name} {side!r}: the sm_90a GEMM runs clusters of {', '.join(map(str, CLUSTER_SIDES))} "
                             "CTAs along M and along N")
    size = cm * cn
    if size == 1:
        return
    if size > MAX_CLUSTER:
        raise WarpyError(f"a {cm}x{cn} cluster has {size} CTAs, more than {MAX_CLUSTER} (the portable size)")
    if cfg.sms < size:
        raise WarpyError(f"a grid of {cfg.sms} CTAs cannot hold a cluster of {size} ({cm}x{cn} needs sms >= {size})")
    if not multicast_rows(cfg.bn, cm)[1]:
        raise WarpyError(f"BN {cfg.bn}: {cm} CTAs' slices of B's box in whole 8-row groups leave the last none")
    if not multicast_rows(cfg.bm, cn)[1]:
        raise WarpyError(f"BM {cfg.bm}: {cn} CTAs' slices of A's box in whole 8-row groups leave the last none")
    if cfg.stream_k or cfg.split:
        raise WarpyError(f"{cm}x{cn} clusters walk whole tiles; stream-K / split is not combined with them")


def wide_wg_refusal(cfg: Sm90Config) -> None:
    """Refuse, in one line, a `wg_rows` out of range or combined with what it cannot run beside."""
    w = cfg.wg_rows
    if isinstance(w, bool) or w not in WG_ROWS:
        raise WarpyError(f"wg_rows {w!r}: a consumer warpgroup computes {' or '.join(map(str, WG_ROWS))} rows of the tile")
    if w == 64:
        return
    why = ("more than two consumer warpgroups (a TMA box is at most 256 rows)" if cfg.consumers > 2
           else f"BN {cfg.bn} (a 128 x BN accumulator past BN {WIDE_WG_MAX_BN} would spill)" if cfg.bn > WIDE_WG_MAX_BN
           else "stream-K / split (the workspace's slots hold 64-row warpgroups)" if cfg.stream_k or cfg.split
           else "cluster_k (the exchange's shares are 64-row warpgroups')" if cfg.cluster_k > 1
           else "promote (a second accumulator would spill)" if cfg.promote else "")
    if why:
        raise WarpyError(f"wg_rows {w}: 128-row consumer warpgroups do not take {why}")


def even_slices(cfg: Sm90Config) -> bool:
    """Whether a multicast cluster's CTAs load equal slices of A's and B's boxes. Uneven ones (the
    last CTA's box the shorter: `multicast_rows`) are proven by the checker but not yet timed on the
    GPU, so the sweep's candidates and the rule keep to equal ones; `--config` reaches the others."""
    return all(a == b for a, b in (multicast_rows(cfg.bn, cfg.cluster_m), multicast_rows(cfg.bm, cfg.cluster_n)))


def exchange_bytes(cfg: Sm90Config) -> int:
    """Shared memory of the cluster exchange: every unit's partial sums to send, a slot of the
    largest share for each rank's copy to receive (its own unused, so every address is static)."""
    if cfg.cluster_k <= 1:
        return 0
    units = cfg.consumers * cfg.bn // 8
    most = max(hi - lo for lo, hi in exchange_shares(cfg))
    return (units + cfg.cluster_k * most) * UNIT_BYTES + 16


class Sm90Gemm:
    """The program builder for one problem and configuration."""

    def __init__(self, problem: GemmProblem, cfg: Sm90Config) -> None:
        m, n, k, dtype, out_dtype = problem.M, problem.N, problem.K, problem.dtype, problem.out_dtype
        self.swap = cfg.swap_ab
        if self.swap:
            # the program computes C^T = B · A^T: its "M" is N, its "N" is M; the maps keep their names
            # (A's memory is still bound as `a`) and C is written transposed
            why = ("a fused epilogue" if not problem.epilogue.identity else "a batch" if problem.batch > 1
                   else "an MN-major operand" if "MN" in (problem.a_major, problem.b_major)
                   else "8-bit float inputs" if dtype_bytes(dtype) != 2 else "")
            if why:
                raise WarpyError(f"swap_ab (C^T = B·A^T) does not take {why} yet")
            m, n = n, m
        if cfg.bk * dtype_bytes(dtype) != 128:
            raise WarpyError(f"BK {cfg.bk} of {dtype} is not one 128-byte swizzle row")
        if cfg.staged_epilogue and (dtype_bytes(out_dtype) != 2 or (problem.pitches[2] * 2) % 16
                                    or not store_clips_exactly(problem.N * 2)):
            raise WarpyError(f"the staged epilogue needs 16-bit C with rows a multiple of 16 bytes (N={problem.N}, {out_dtype}"
                             f"{f', ldc={problem.ldc}' if problem.ldc else ''}): a TMA store writes a ragged row's "
                             "last 16 bytes whole, past its end")
        cluster_k_refusal(cfg)
        if smem_bytes(cfg) > SM90A.max_dynamic_smem:
            raise WarpyError(f"{cfg.describe()} needs {smem_bytes(cfg)} bytes of shared memory, more than "
                             f"{SM90A.max_dynamic_smem}")
        if cfg.promote and dtype_bytes(dtype) != 1:
            raise WarpyError(f"promote adds 8-bit float MMAs' k blocks in fp32; {dtype} MMAs accumulate in fp32 already")
        if cfg.promote and cfg.bn > gemm_fp8.PROMOTE_MAX_BN:
            raise WarpyError(f"promote keeps a second accumulator (BN / 2 registers a thread): BN {cfg.bn} would spill; "
                             f"at most {gemm_fp8.PROMOTE_MAX_BN}")
        if cfg.bn < 16 or cfg.bn % 8:
            raise WarpyError(f"BN {cfg.bn}: a tile is whole 8-column groups, at least 16 (the MMA's B descriptor strides "
                             "from one 8-row group to the next)")
        if not 1 <= cfg.consumers <= MAX_CONSUMERS:
            raise WarpyError(f"consumers {cfg.consumers}: the sm_90a GEMM runs 1 to {MAX_CONSUMERS} consumer warpgroups "
                             "(tiles of 64 to 192 rows)")
        wide_wg_refusal(cfg)
        if cfg.consumers == MAX_CONSUMERS and cfg.promote:
            raise WarpyError(f"three consumer warpgroups hold {register_split(3)[1]} registers a thread: promote's second "
                             "accumulator would spill; one or two consumer warpgroups")
        if cfg.consumers == MAX_CONSUMERS and cfg.bn > 192:
            raise WarpyError(f"three consumer warpgroups hold {register_split(3)[1]} registers a thread: a 64 x {cfg.bn} "
                             "accumulator would spill; BN at most 192")
        cluster_refusal(cfg)
        self.m, self.n, self.k = m, n, k
        self.dtype, self.out_dtype, self.cfg = dtype, out_dtype, cfg
        self.problem = problem
        self.b_dtype = problem.b_type  # B's type: A's, except for 8-bit floats (e4m3 x e5m2)
        self.ep: Epilogue = problem.epilogue
        self.lda, self.ldb, self.ldc = problem.pitches
        if self.swap:
            self.lda, self.ldb = self.ldb, self.lda
        self.op_names = ("b", "a") if self.swap else ("a", "b")  # the maps of the MMA's A and B operands
        self.pitched = problem.pitched
        self.batch = problem.batch
        self.sa, self.sb, self.sc = problem.batch_strides
        self.a_major, self.b_major = problem.a_major, problem.b_major
        if self.batch > 1 and (cfg.stream_k or cfg.cluster_size != 1):
            raise WarpyError("a batch of GEMMs runs whole tiles on single CTAs: no stream-K, split or clusters")
        self.oeb = dtype_bytes(out_dtype)
        self.mt, self.nt = cdiv(m, cfg.bm), cdiv(n, cfg.bn)
        self.tiles_per = self.mt * self.nt  # a matrix's tiles; a batch's are batch x as many
        self.tiles = self.tiles_per * problem.batch
        self.kt = cdiv(k, cfg.bk)
        self.grid = min(cfg.sms, self.tiles)
        self.sk: StreamK | None = None
        if cfg.split and not cfg.stream_k:
            raise WarpyError("split is a form of stream-K: set stream_k too")
        if cfg.stream_k:
            workers = min(cfg.sms, self.tiles * self.kt)
            if cfg.split:
                if not 1 <= cfg.split <= self.kt or self.tiles * cfg.split > cfg.sms:
                    raise WarpyError(f"K split {cfg.split} ways over {self.tiles} tiles of {self.kt} k blocks "
                                     f"does not fit {cfg.sms} SMs")
                workers = self.tiles * cfg.split
            self.sk = StreamK(self.tiles, self.kt, workers)
            self.grid = self.sk.workers
        self.order = TileOrder(self.mt, self.nt, cfg.group)
        if cfg.cluster_size > 1:
            # cluster tiles: cluster_m M-blocks by cluster_n N-blocks (those past M or N compute zeros
            # and store nothing); the grouped order walks cluster tiles, `group` M-blocks
            # (group // cluster_m cluster rows) a sweep over N; no more clusters than the GPU holds at once
            cm, cn = cfg.cluster_m, cfg.cluster_n
            self.cluster_grid = (cdiv(self.mt, cm), cdiv(self.nt, cn))
            self.cluster_tiles = self.cluster_grid[0] * self.cluster_grid[1]
            self.clusters = min(cfg.sms // cfg.cluster_size, resident_clusters(cfg.cluster_size), self.cluster_tiles)
            self.grid = cfg.cluster_size * self.clusters
            self.order = TileOrder(*self.cluster_grid, max(1, cfg.group // cm))
        if cfg.cluster_k != 1:
            self.check_cluster_k()
            self.grid = self.tiles * cfg.cluster_k  # one tile a cluster, its k blocks split S ways

    def check_cluster_k(self) -> None:
        """Refuse, in one line, a `cluster_k` the problem cannot take (`cluster_k_refusal`: the configuration)."""
        cfg = self.cfg
        s = cfg.cluster_k
        if self.batch > 1:
            raise WarpyError(f"cluster_k {s}: a batch of GEMMs runs whole tiles on single CTAs")
        if s > self.kt:
            raise WarpyError(f"cluster_k {s}: K = {self.k} is {self.kt} k blocks of {cfg.bk}, fewer than the cluster's CTAs")
        if s > cfg.consumers * cfg.bn // 8:
            raise WarpyError(f"cluster_k {s}: a {cfg.bm} x {cfg.bn} tile has {cfg.consumers * cfg.bn // 8} shares of "
                             "8 columns a warpgroup to hand out, fewer than the cluster's CTAs")

    @property
    def name(self) -> str:
        c = self.cfg
        mnk = f"{self.n}x{self.m}x{self.k}" if self.swap else f"{self.m}x{self.n}x{self.k}"
        return (f"gemm_sm90_{mnk}_{self.dtype}_{self.out_dtype}"
                f"_{c.bm}x{c.bn}x{c.bk}_s{c.stages}_g{c.group}" + ("_sk" if c.stream_k else "") + (f"{c.split}" if c.split else "")
                + (f"_c{c.cluster_m}" if c.cluster_size > 1 else "") + (f"x{c.cluster_n}" if c.cluster_n > 1 else "") + (f"_ck{c.cluster_k}" if c.cluster_k > 1 else "")
                + ("_p" if c.promote else "") + (f"_w{c.wg_rows}" if c.wg_rows != 64 else "") + ("_swab" if self.swap else "") + self.ep.tag()
                + (f"_ld{self.lda}x{self.ldb}x{self.ldc}" if self.pitched else "")
                + (f"_x{self.batch}s{self.sa}x{self.sb}x{self.sc}" if self.batch > 1 else "")
                + ("_akm" if self.a_major == "MN" else "") + ("_bkn" if self.b_major == "MN" else "")
                + gemm_fp8.tag(self.problem))

    # -- the program ---------------------------------------------------------------------------
    def build(self) -> Program:
        cfg = self.cfg
        threads = 128 * (1 + cfg.consumers)
        cm, cn = cfg.cluster_m, cfg.cluster_n
        p = Program(self.name, SM90A.name, threads=threads, grid=(self.grid, 1, 1),
                    cluster=(cfg.cluster_size * cfg.cluster_k, 1, 1),
                    maxnreg=min((65536 // threads) // 8 * 8, register_split(cfg.consumers)[1]))
        # an MN-major operand (stored K x M / K x N) lands M / N innermost, one box per 64 rows (a
        # 128-byte swizzle span of M or N by BK), and is read transposed (`.tnspA` / `.tnspB`)
        a_tile = smem_tile(cfg.bm, cfg.bk, self.dtype, self.a_major, 128)
        b_tile = smem_tile(cfg.bn, cfg.bk, self.b_dtype, self.b_major, 128)
        l2 = cfg.l2_promotion
        try:
            a_glob = self.glob(self.m, self.k, self.lda, self.sa, self.a_major)
            b_glob = self.glob(self.n, self.k, self.ldb, self.sb, self.b_major)

            def op_map(name: str, glob: Layout, tile: SmemTileT, ways: int) -> tuple[TensorMap, Optional[TensorMap]]:
                """The map of an MMA operand shared `ways` ways in a cluster: each CTA loads rows
                [r * rows/ways, (r + 1) * rows/ways) of the tile, multicast to the CTAs sharing it (an
                MN-major operand: its slice's 64-row boxes, each multicast whole); where the rows do
                not cut into equal slices of whole 8-row groups, uneven ones (`tma_uneven_slices`:
                the last CTA's box, map NAME_last, is the shorter), else None for the second."""
                if ways == 1 or tile.major == "MN":
                    if tile.major == "MN" and (tile.rows % ways or (tile.rows // ways) % MN_BOX_ROWS):
                        raise WarpyError(f"{name}: each CTA's slice of an MN-major tile ({tile.rows} / {ways} rows) is "
                                         f"not whole {MN_BOX_ROWS}-row boxes")
                    return p.tmap(name, tma_box(glob, self.box_tile(tile), l2_promotion=l2)), None
                per, last = multicast_rows(tile.rows, ways)
                if per != last:
                    main, tail, sls = tma_uneven_slices(glob, tile, ways, l2_promotion=l2)
                    for sl in sls:
                        want = int(tile.layout((sl.cta * per, 0)))
                        if sl.smem_offset != want or sl.coord_offset != (0, sl.cta * per):
                            raise WarpyError(f"multicast slice {sl} is not rows {sl.cta * per}.. of {name}'s tile")
                    return p.tmap(name, main), p.tmap(f"{name}_last", tail, over=name)
                rows = tile.rows // ways
                for sl in tma_multicast_slices(glob, tile, ways):
                    want = int(tile.layout((sl.cta * rows, 0)))
                    if sl.smem_offset != want or sl.coord_offset != (0, sl.cta * rows):
                        raise WarpyError(f"multicast slice {sl} is not rows {sl.cta * rows}.. of {name}'s tile")
                return p.tmap(name, tma_box(glob, tile, multicast=ways, l2_promotion=l2)), None

            # (the narrow operand, A's memory `a`, first where A and B are swapped, as the unswapped
            # program declares its maps)
            if self.swap:
                tb, tb_last = op_map("a", b_glob, b_tile, cm)
                ta, ta_last = op_map("b", a_glob, a_tile, cn)
            else:
                ta, ta_last = op_map("a", a_glob, a_tile, cn)
                tb, tb_last = op_map("b", b_glob, b_tile, cm)
        except LayoutError as e:
            raise WarpyError(f"{self.name}: {e}") from None
        tails = epi_tails(cfg.bn) if cfg.staged_epilogue and not self.swap else ()
        c: Optional[Param] = None
        tc: Optional[TensorMap] = None
        tc_tails: list[tuple[int, TensorMap, SmemTileT]] = []
        if cfg.staged_epilogue and self.swap:  # C^T: each 64-row block lands as BN rows of C by 64 columns
            c_tile = smem_tile(cfg.bn, EPI_COLS, self.out_dtype, "K", 128)
            tc = p.tmap("c", tma_box(self.glob(self.n, self.m, self.ldc, self.sc), c_tile))
        elif cfg.staged_epilogue:
            c_tile = smem_tile(64, EPI_COLS, self.out_dtype, "K", 128)
            tc = p.tmap("c", tma_box(self.glob(self.m, self.n, self.ldc, self.sc), c_tile))
        else:
            c = p.param("c", "u64")
        for tail in tails:  # each narrower chunk: a map of its own over C (box 64 x tail, its row's swizzle)
            t_tile = smem_tile(64, tail, self.out_dtype, "K", 2 * tail if tail > 8 else 0)
            tc_tails.append((tail, p.tmap(f"c_tail{tail}", tma_box(self.glob(self.m, self.n, self.ldc, self.sc), t_tile),
                                          over="c"), t_tile))
        oeb = self.oeb
        # (C as it lies in memory: where A and B are swapped, the program's columns by its rows)
        p.global_buffer("c_out", Layout((self.n, self.m), (self.ldc * oeb, oeb)) if self.swap else
                        Layout((self.m, self.n), self.c_strides()) if self.batch == 1 else
                        Layout((self.m, self.n, self.batch), (self.ldc * oeb, oeb, self.sc * oeb)), self.out_dtype, "c")
        aux: dict[str, Param] = {}
        for name in self.ep.params():  # the fused epilogue's inputs, of C's type
            aux[name] = p.param(name, "u64")
            n_el = (self.n if self.ep.bias == "n" else self.m) if name == "bias" else None
            lay = Layout(n_el, self.oeb) if n_el is not None else Layout((self.m, self.n), (self.n * self.oeb, self.oeb))
            p.global_buffer(f"{name}_in", lay, self.out_dtype, name)
        scales = gemm_fp8.declare(p, self.problem)
        workspace: Optional[Workspace] = None
        if self.sk is not None:
            # scratch the host owns (zeroed once): a flag per tile and consumer warp, which the tile's
            # finisher resets; a slot of partial sums per CTA (a CTA contributes to one tile at most)
            flags, _ = p.scratch("flags", "flag_words", Layout(self.tiles * 4 * cfg.consumers, 4), "u32")
            partials, _ = p.scratch("partials", "partial_sums", Layout(self.grid * cfg.bm * cfg.bn, 4), "fp32")
            workspace = Workspace(flags, partials)
        sa = p.smem_ring("sa", cfg.stages, a_tile.layout, self.dtype)
        sb = p.smem_ring("sb", cfg.stages, b_tile.layout, self.b_dtype)
        staged: Optional[StagedChunks] = None
        if tc is not None and self.swap:  # per consumer warpgroup, a BN x 64 tile of C (its 64-row blocks in turn)
            staged = StagedChunks(tc, p.smem("c_stage", SwizzledLayout(Swizzle(3, 4, 3), Layout(
                (cfg.consumers, cfg.bn, EPI_COLS), (cfg.bn * EPI_COLS * 2, EPI_COLS * 2, 2))), self.out_dtype))
        elif tc is not None:  # per consumer warpgroup, two 64 x 64 tiles of C (128-byte swizzle)
            staged = StagedChunks(tc, p.smem("c_stage", SwizzledLayout(Swizzle(3, 4, 3), Layout(
                (cfg.consumers, 2, 64, EPI_COLS), (2 * 64 * EPI_COLS * 2, 64 * EPI_COLS * 2, EPI_COLS * 2, 2))),
                self.out_dtype))
        staged_tails = tuple(StagedChunks(tm, p.smem(f"c_stage_tail{tail}", SwizzledLayout(t.layout.swizzle, Layout(
            (cfg.consumers, 64, tail), (64 * tail * 2, tail * 2, 2))), self.out_dtype), tail) for tail, tm, t in tc_tails)
        # a stage is free once every consumer warp has freed it: with clusters, those of every CTA whose
        # producer multicasts into it (each consumer warp frees its own CTA's stage and those of the
        # CTAs sharing its A or B slices: the cluster_m + cluster_n - 1 of its row and column)
        stage = p.pipe("stage", cfg.stages, fills=1, frees=4 * cfg.consumers * (cm + cn - 1))
        exchange: Optional[Exchange] = None
        if cfg.cluster_k > 1:
            s_ = cfg.cluster_k
            units = cfg.consumers * cfg.bn // 8
            most = max(hi - lo for lo, hi in exchange_shares(cfg))
            exchange = Exchange(
                p.smem("x_send", Layout((units, 128, 4), (UNIT_BYTES, 16, 4)), "fp32"),
                p.smem("x_recv", Layout((s_, most, 128, 4), (most * UNIT_BYTES, UNIT_BYTES, 16, 4)), "fp32"),
                p.barriers("x_recv_full", 1, count=1), p.barriers("x_sent", 1, count=s_ - 1))
        rank: Optional[UR] = None
        if cfg.cluster_size == 1 and cfg.cluster_k == 1:
            init_barriers(p)
        else:
            # the cluster barrier orders the CTAs' barrier inits before any remote arrival, multicast or copy
            init_barriers(p, cluster_sync=True)
            rank = p.ur("cta_rank")
            p.emit(alu.s2ur(rank, "SR_CgaCtaId"))
        res = Sm90Resources(ta=ta, tb=tb, ta_last=ta_last, tb_last=tb_last, c=c, staged=staged, staged_tails=staged_tails, workspace=workspace,
                            sa=sa, sb=sb, stage=stage, rank=rank, aux=aux, scales=scales, exchange=exchange)
        with p.role("producer", range(0, 4)):
            self.producer(p, res)
        for wg in range(cfg.consumers):
            with p.role(f"consumer{wg}", range(4 + 4 * wg, 8 + 4 * wg)):
                self.consumer(p, res, wg)
        p.emit(control.exit_())
        return p

    def c_strides(self) -> tuple[int, int]:
        """Bytes between the program's rows and between its columns of C: (ldc, 1) elements, or (1,
        ldc) where A and B are swapped (the program's rows are C's columns)."""
        pitch = self.ldc * self.oeb
        return (self.oeb, pitch) if self.swap else (pitch, self.oeb)

    def glob(self, rows: int, cols: int, pitch: int, stride: int, major: str = "K") -> Layout:
        """An operand in global memory, (row, col[, matrix of the batch]) -> element offset; an
        MN-major operand (major "MN") has its rows contiguous and its columns (K) `pitch` apart."""
        st = (pitch, 1) if major == "K" else (1, pitch)
        if self.batch == 1:
            return Layout((rows, cols), st)
        return Layout((rows, cols, self.batch), st + (stride,))

    def box_tile(self, tile: SmemTileT) -> SmemTileT:
        """The shared-memory tile one TMA box of an operand lands: the whole tile (K-major), or 64 of
        its rows (MN-major: M or N is the box's inner dimension, one 128-byte swizzle span)."""
        if tile.major == "K":
            return tile
        if tile.rows % MN_BOX_ROWS:
            raise WarpyError(f"an MN-major operand's tile is whole {MN_BOX_ROWS}-row boxes, not {tile.rows} rows")
        return smem_tile(MN_BOX_ROWS, tile.cols, tile.dtype, "MN", tile.swizzle)

    def row_boxes(self, p: Program, major: str, rows: int, row0: R, name: str) -> list[tuple[int, R]]:
        """(first row in the tile, the register holding its global row) of each box of an operand's
        tile whose first row is `row0`: one (K-major), or one per 64 rows (MN-major; set here, once)."""
        if major == "K":
            return [(0, row0)]
        out = [(0, row0)]
        for j in range(1, rows // MN_BOX_ROWS):
            r = p.r(f"{name}_row{j}")
            p.emit(alu.iadd3(r, row0, MN_BOX_ROWS * j, RZ))
            out.append((MN_BOX_ROWS * j, r))
        return out

    def operand_coords(self, w: Work, major: str, kc: Union[Ix, R], row: R) -> list[Union[Ix, R, UR]]:
        """A TMA load's coordinates (innermost first; the batch's matrix last where there is one) of
        an operand box at K `kc` and global row `row`: (k, row) K-major, (row, k) MN-major."""
        return self.coords(w, kc, row) if major == "K" else self.coords(w, row, kc)

    def coords(self, w: Work, *c: Union[Ix, R, UR]) -> list[Union[Ix, R, UR]]:
        """A TMA box's coordinates (innermost first), then the matrix of the batch where there is one."""
        return list(c) + ([w.bt] if w.bt is not None else [])

    @contextlib.contextmanager
    def work_loop(self, p: Program, res: Sm90Resources) -> Iterator[Work]:
        """For each piece of work this CTA owns: a whole tile (ctaid, ctaid + grid, ...; with clusters,
        its cluster's cluster tiles) or, with stream-K, a segment of a tile's k blocks; tiles in the
        grouped order."""
        ctaid = p.r("ctaid")
        p.emit(alu.s2r(ctaid, "SR_CTAID.X"))
        cm, cn = self.cfg.cluster_m, self.cfg.cluster_n
        if cm * cn > 1:
            # clusters of cm x cn: cluster c takes cluster tiles c, c + clusters, ... (all its CTAs the
            # same ones, in lockstep); CTA rank r = i + cm j computes M-block cm I + i, N-block cn J + j
            # of cluster tile (I, J)
            assert res.rank is not None
            cid = p.r("cluster_id")
            p.emit(alu.shf_r(cid, ctaid, (cm * cn).bit_length() - 1))
            ri, rj = self.cluster_coords(p, res.rank)
            rank_i = rank_j = None
            if cm > 1:
                rank_i = p.r("rank_r")
                p.emit(alu.mov(rank_i, ri))
            if cn > 1:
                rank_j = p.r("rank_c")
                p.emit(alu.mov(rank_j, rj))
            with strided_tiles(p, cid, self.clusters, self.cluster_tiles) as t:
                m_blk, n_blk = self.order.emit(p, t)
                if rank_i is not None:
                    p.emit(alu.imad(m_blk, m_blk, cm, rank_i))
                if rank_j is not None:
                    p.emit(alu.imad(n_blk, n_blk, cn, rank_j))
                yield Work(m_blk, n_blk, t, None, self.kt)
            return
        if self.cfg.cluster_k > 1:
            # S x 1 clusters along K: cluster t (CTAs tS .. tS + S - 1) takes tile t, CTA rank r its
            # k blocks [r kt / S, (r + 1) kt / S)
            s_ = self.cfg.cluster_k
            t, r, k_lo, k_cnt = p.r("tile"), p.r("k_rank"), p.r("k_lo"), p.r("k_cnt")
            divide(p, t, ctaid, s_, self.grid)
            p.emit(alu.imad(r, t, (1 << 32) - s_, ctaid))
            p.emit(alu.imad(r, r, self.kt, RZ))
            divide(p, k_lo, r, s_, s_ * self.kt)
            p.emit(alu.iadd3(r, r, self.kt))
            hi = p.r("k_hi")
            divide(p, hi, r, s_, s_ * self.kt)
            p.emit(alu.imad(k_cnt, k_lo, (1 << 32) - 1, hi))
            m_blk, n_blk = self.order.emit(p, t)
            yield Work(m_blk, n_blk, t, k_lo, k_cnt)
            return
        if self.sk is None and self.batch > 1:
            # tile t of the batch: matrix t // tiles_per, its tile t % tiles_per in the grouped order
            with strided_tiles(p, ctaid, self.grid, self.tiles) as t:
                bt, tt = p.r("batch_ix"), p.r("tile_in_matrix")
                divide(p, bt, t, self.tiles_per, self.tiles)
                p.emit(alu.imad(tt, bt, (1 << 32) - self.tiles_per, t))
                m_blk, n_blk = self.order.emit(p, tt)
                yield Work(m_blk, n_blk, t, None, self.kt, bt)
            return
        if self.sk is None:
            with strided_tiles(p, ctaid, self.grid, self.tiles) as t:
                m_blk, n_blk = self.order.emit(p, t)
                yield Work(m_blk, n_blk, t, None, self.kt)
            return
        with self.sk.emit(p, ctaid) as seg:
            m_blk, n_blk = self.order.emit(p, seg.t)
            yield Work(m_blk, n_blk, seg.t, seg.k_lo, seg.k_cnt)

    def cluster_coords(self, p: Program, rank: UR) -> tuple[UR, UR]:
        """(i, j) of the CTA of cluster rank `rank` = i + cluster_m j in its cluster (uniform
        registers; the rank itself and URZ where the cluster is one column or one row)."""
        cm, cn = self.cfg.cluster_m, self.cfg.cluster_n
        if cm == 1:
            return URZ, rank
        if cn == 1:
            return rank, URZ
        ri, rj = p.ur("rank_i"), p.ur("rank_j")
        p.emit(alu.ulop3(ri, rank, cm - 1, URZ, 0xC0))
        p.emit(alu.ushf_r(rj, rank, cm.bit_length() - 1))
        return ri, rj

    # -- producer --------------------------------------------------------------------------
    def producer(self, p: Program, res: Sm90Resources) -> None:
        cfg = self.cfg
        p.emit(control.setmaxnreg_dealloc(register_split(cfg.consumers)[0]))
        loader = p.p("is_loader")
        p.emit(alu.isetp("EQ", loader, p.warp_index(), 0))
        with p.when(loader):
            leader = p.elect()
            with p.when(leader):  # the descriptors' first fetch overlaps the ring's first waits
                for tm in (res.ta, res.tb) + ((res.staged.tmap,) if res.staged is not None else ()):
                    p.emit(tma.tmap_prefetch(tm.name))
            out = res.stage.producer("ps")
            if cfg.cluster_size > 1:
                self.cluster_producer(p, res, leader, out)
                return
            with self.work_loop(p, res) as w:
                m0, n0 = p.r("m0"), p.r("n0")
                p.emit(alu.imad(m0, w.m_blk, cfg.bm, RZ))
                p.emit(alu.imad(n0, w.n_blk, cfg.bn, RZ))
                ra = self.row_boxes(p, self.a_major, cfg.bm, m0, "a")
                rb = self.row_boxes(p, self.b_major, cfg.bn, n0, "b")
                with p.loop("k", w.k_cnt, max_count=self.kt) as k:
                    with out.stage():
                        out.wait_empty()
                        out.arrive_full(leader, tx_bytes=len(ra) * res.ta.box.box_bytes + len(rb) * res.tb.box.box_bytes)
                        kc: Union[Ix, R] = k * cfg.bk
                        if w.k_lo is not None:  # the segment's k blocks start at k_lo
                            kc = p.r("k_elem")
                            p.emit(alu.iadd3(kc, k.reg, w.k_lo))
                            p.emit(alu.imad(kc, kc, cfg.bk, RZ))
                        for r0, row in ra:
                            tma_load(p, out.slot(res.sa, r0, 0) if r0 else out.slot(res.sa), res.ta,
                                     self.operand_coords(w, self.a_major, kc, row), out.full, guard=leader)
                        for r0, row in rb:
                            tma_load(p, out.slot(res.sb, r0, 0) if r0 else out.slot(res.sb), res.tb,
                                     self.operand_coords(w, self.b_major, kc, row), out.full, guard=leader)

    def cluster_producer(self, p: Program, res: Sm90Resources, leader: P, out: ProducerEnd) -> None:
        """The producer of CTA (i, j) of a cluster_m x cluster_n cluster (rank i + cluster_m j): its
        slice j of A's box (rows j * BM/cluster_n..) multicast into that slice of the stage in the
        CTAs of its row (those sharing the M-block), and its slice i of B's box (rows i * BN/cluster_m..)
        into the CTAs of its column. The stage's empty barrier takes the frees of all of them, the
        full barrier the whole stage's bytes (a peer's slice may complete before the arm, which tx
        counts allow). Then it drains the ring: every stage freed by every sharing CTA's consumers, so
        no remote arrival is still on its way to this CTA's barriers when it exits."""
        cfg = self.cfg
        assert res.rank is not None
        cm, cn = cfg.cluster_m, cfg.cluster_n
        ri, rj = self.cluster_coords(p, res.rank)

        def share(ways: int, rows: int, own: UR, peers_mask: int, shift: UR, major: str,
                  name: str) -> tuple[int, Optional[UR], Optional[Uniform]]:
            """(rows of this CTA's slice (every CTA's but the last's where slices are uneven), its
            multicast mask, its slice number)."""
            if ways == 1:
                return rows, None, None
            mask = p.ur(f"{name}_mask")
            p.emit(alu.umov(mask, peers_mask))
            if shift is not URZ:
                p.emit(alu.ushf_l(mask, mask, shift))
            per = rows // ways if major == "MN" else multicast_rows(rows, ways)[0]
            return per, mask, Uniform(f"{name}_slice", own, ways)

        # A's slice: shared by the CTAs of this row (ranks i + cm j' for every j'): the mask 0b..0001
        # every cm bits, shifted by i. B's: the CTAs of this column (ranks cm j .. cm j + cm - 1)
        shift_b = URZ  # cluster_m j
        if cn > 1 and cm > 1:
            shift_b = p.ur("rank_col")
            p.emit(alu.ushf_l(shift_b, rj, cm.bit_length() - 1))
        a_rows, a_mask, a_slice = share(cn, cfg.bm, rj, sum(1 << (cm * j) for j in range(cn)), ri, self.a_major, "a")
        b_rows, b_mask, b_slice = share(cm, cfg.bn, ri, (1 << cm) - 1, shift_b, self.b_major, "b")
        # every slice lands in every sharing CTA: the stage's bytes are the whole tiles'
        tx = cfg.bk * (cfg.bm * dtype_bytes(self.dtype) + cfg.bn * dtype_bytes(self.b_dtype))

        def last_guards(ways: int, own: UR, name: str) -> Optional[tuple[P, P]]:
            """Where an operand's slices are uneven: (leader and not the last slice, leader and the last)."""
            if ways == 1:
                return None
            at = p.r(f"{name}_slice_no")
            p.emit(alu.mov(at, own))
            g = p.p(f"{name}_lead_main"), p.p(f"{name}_lead_last")
            p.emit(alu.isetp("NE", g[0], at, ways - 1, c=leader))
            p.emit(alu.isetp("EQ", g[1], at, ways - 1, c=leader))
            return g

        a_guards = last_guards(cn, rj, "a") if res.ta_last is not None else None
        b_guards = last_guards(cm, ri, "b") if res.tb_last is not None else None
        # the first row of this CTA's slice in the tile (RZ: the whole tile)
        a_off: Union[R, int] = RZ
        b_off: Union[R, int] = RZ
        if a_slice is not None:
            a_off = p.r("a_slice_row")
            p.emit(alu.mov(a_off, rj))
            p.emit(alu.imad(a_off, a_off, a_rows, RZ))
        if b_slice is not None:
            b_off = p.r("b_slice_row")
            p.emit(alu.mov(b_off, ri))
            p.emit(alu.imad(b_off, b_off, b_rows, RZ))
        with self.work_loop(p, res) as w:
            m0, n0 = p.r("m0"), p.r("n0")
            p.emit(alu.imad(m0, w.m_blk, cfg.bm, a_off))
            p.emit(alu.imad(n0, w.n_blk, cfg.bn, b_off))
            ra = self.row_boxes(p, self.a_major, a_rows, m0, "a")
            rb = self.row_boxes(p, self.b_major, b_rows, n0, "b")
            with p.loop("k", self.kt) as k:
                with out.stage():
                    out.wait_empty()
                    out.arrive_full(leader, tx_bytes=tx)
                    for ring, tm, tm_last, guards, rows_of, sl, rows, mask, major in (
                            (res.sa, res.ta, res.ta_last, a_guards, ra, a_slice, a_rows, a_mask, self.a_major),
                            (res.sb, res.tb, res.tb_last, b_guards, rb, b_slice, b_rows, b_mask, self.b_major)):
                        for r0, row in rows_of:
                            at = (sl * rows + r0 if r0 else sl * rows) if sl is not None else r0
                            dst = out.slot(ring, at, 0) if (sl is not None or r0) else out.slot(ring)
                            crd = self.operand_coords(w, major, k * cfg.bk, row)
                            if tm_last is None or guards is None:
                                tma_load(p, dst, tm, crd, out.full, mask=mask, guard=leader)
                                continue
                            # uneven slices: the last CTA's box is the shorter one
                            tma_load(p, dst, tm, crd, out.full, mask=mask, guard=guards[0])
                            tma_load(p, dst, tm_last, crd, out.full, mask=mask, guard=guards[1])
        with p.loop("drain", cfg.stages):
            with out.stage():
                out.wait_empty()

    # -- consumers -----------------------------------------------------------------------------
    def consumer(self, p: Program, res: Sm90Resources, c: int) -> None:
        cfg = self.cfg
        ok = p.up("regs_granted")
        grow = p.fresh_label("GROW")
        p.label(grow)
        p.emit(control.setmaxnreg_try_alloc(ok, register_split(cfg.consumers)[1]))
        p.emit(control.bra(grow).guarded(~ok), mark="~")
        # an accumulator a 64-row block of the warpgroup's slice (rows wg_rows c + 64 s of the tile)
        accs = [p.rvec("acc" if s == 0 else f"acc{s}", cfg.bn // 2) for s in range(cfg.subs)]
        acc = accs[0]
        part = p.rvec("part_acc", cfg.bn // 2) if cfg.promote else None  # a k block's sums (promotion)
        leader = p.elect()
        first, accumulate = p.ur("first"), p.up("accumulate")
        # the CTAs whose producers multicast into this one's stages: rank ^ e for e < cluster_m (its
        # column, sharing B) and rank ^ cluster_m e (its row, sharing A)
        peers: list[UR] = []
        for x in [e for e in range(1, cfg.cluster_m)] + [cfg.cluster_m * e for e in range(1, cfg.cluster_n)]:
            assert res.rank is not None
            peers.append(p.ur(f"peer_rank{len(peers)}" if len(peers) else "peer_rank"))
            p.emit(alu.ulop3(peers[-1], res.rank, x, URZ, 0x3C))  # rank ^ x
        cons = res.stage.consumer("cs")
        rel = res.stage.consumer("rel")
        staged = self.staged_setup(p, c, self.swap) if res.staged is not None else None
        epi = self.epilogue_setup(p, res, c) if res.staged is None else None
        fix = self.fixup_setup(p, c) if self.sk is not None else None
        with self.work_loop(p, res) as w:
            m_blk, n_blk = w.m_blk, w.n_blk
            p.emit(alu.umov(first, 0))
            if part is not None:  # the fp32 sum of the tile's k blocks starts at zero
                for r in range(cfg.bn // 2):
                    p.emit(alu.mov(acc[r], 0))
            with p.loop("k", w.k_cnt, max_count=self.kt) as k:
                with cons.stage():
                    p.emit(alu.uisetp("NE", accumulate, first, URZ))
                    cons.wait_full()
                    p.emit(wgmma.warpgroup_arrive())
                    ks = 32 // dtype_bytes(self.dtype)  # K of one MMA: 32 bytes (HGMMA k16, QGMMA k32)
                    steps = cfg.bk // ks
                    for j in range(steps):
                        if part is not None:  # each k block's products from zero, into part
                            hgmma(p, part, cons.slot(res.sa, 64 * c, ks * j), cons.slot(res.sb, 0, ks * j), cfg.bn,
                                  j != 0, end=j == steps - 1)
                            continue
                        for s, acc_s in enumerate(accs):  # (the sub-blocks' MMAs read the same B)
                            hgmma(p, acc_s, cons.slot(res.sa, cfg.wg_rows * c + 64 * s, ks * j),
                                  cons.slot(res.sb, 0, ks * j), cfg.bn, accumulate if j == 0 else True,
                                  end=j == steps - 1 and s == cfg.subs - 1)
                    p.emit(wgmma.wgmma_commit())
                    if part is not None:  # the block's sums are in part: add them in fp32, free the stage
                        p.emit(wgmma.warpgroup_wait(0))
                        for r in range(cfg.bn // 2):
                            p.emit(alu.fadd(acc[r], acc[r], part[r]))
                    else:
                        p.emit(wgmma.warpgroup_wait(1))
                    p.emit(alu.umov(first, 1))
                if part is not None:  # this block's group is retired: its stage is free
                    with rel.stage():
                        self.free(p, rel, leader, peers)
                else:
                    # the group before this one has finished reading its stage: free that stage
                    not_first = p.p("not_first_k")
                    p.emit(alu.isetp("NE", not_first, k.reg, 0))
                    with p.when(not_first):
                        with rel.stage():
                            self.free(p, rel, leader, peers)
            if part is None:
                p.emit(wgmma.warpgroup_wait(0))
                with rel.stage():
                    self.free(p, rel, leader, peers)
            done = None
            if fix is not None:
                assert res.workspace is not None
                done = p.fresh_label("SEGMENT_DONE")
                self.fixup(p, res.workspace, fix, w, acc, done)
            share = self.exchange_sums(p, res, c, acc) if res.exchange is not None else None
            with self.real_tile(p, m_blk, n_blk):
                for s, acc_s in enumerate(accs):
                    rows = cfg.wg_rows * c + 64 * s  # the block's first row in the tile
                    if res.scales:
                        gemm_fp8.emit_scales(p, self.problem, res.scales, c, cfg.bm, cfg.bn, acc_s, m_blk, n_blk, rows)
                    if not self.ep.identity:
                        self.fused_epilogue(p, res, c, acc_s, m_blk, n_blk, rows)
                if staged is not None and self.swap:
                    self.staged_epilogue_swapped(p, res, c, staged, accs, m_blk, n_blk)
                elif staged is not None:
                    self.staged_epilogue(p, res, c, staged, accs, m_blk, n_blk, w)
                else:
                    assert epi is not None
                    for s, acc_s in enumerate(accs):
                        self.epilogue(p, epi, acc_s, m_blk, n_blk, w.bt, share, 64 * s)
            if done is not None:
                p.label(done)
        if staged is not None:  # the last stores must have read shared memory before the CTA exits
            p.emit(tma.bulk_wait(0).guarded(staged.lead))
        if res.exchange is not None:  # every other CTA has this one's copies: its shared memory may go
            wait(p, res.exchange.done_bar.at(0), self.zero(p))

    # -- cluster_k: a tile's partial sums traded through shared memory ------------------------------
    def zero(self, p: Program) -> R:
        z = p.r("zero")
        p.emit(alu.mov(z, 0))
        return z

    def exchange_sums(self, p: Program, res: Sm90Resources, c: int, acc: RVec) -> Share:
        """cluster_k = S, after this CTA's k blocks: consumer warpgroup c's accumulators go to the
        send buffer (a unit a 16-byte vector of each thread); once every consumer warpgroup's are
        there, one thread copies each other rank's share of the units into that rank's receive
        buffer (a slot a sender, completing on its `recv_bar`). Then this CTA waits for the others'
        copies of its own share, tells each sender its copy is done (`done_bar`), and adds them, in
        the order of the ranks, into the accumulators of its share. Returns which vectors of the
        accumulator this CTA owns (and stores)."""
        cfg = self.cfg
        x = res.exchange
        assert x is not None
        s_ = cfg.cluster_k
        v = cfg.bn // 8
        shares = exchange_shares(cfg)
        owner = [next(r for r, (lo, hi) in enumerate(shares) if lo <= u < hi) for u in range(cfg.consumers * v)]
        most = max(hi - lo for lo, hi in shares)
        rank = p.ur("x_rank")
        p.emit(alu.s2ur(rank, "SR_CgaCtaId"))
        rank_r = p.r("x_rank_r")
        p.emit(alu.mov(rank_r, rank))
        off = p.r("x_off")  # this thread's 16 bytes of a unit
        p.emit(alu.iadd3(off, R("tid"), (1 << 32) - 128 * (c + 1)))
        p.emit(alu.imad(off, off, 16, RZ))
        sbase, soff = p.derive.value_reg("addr", x.send.at(0, 0, 0))
        for j in range(v):
            p.emit(memory.sts(Mem(off, sbase, soff + (c * v + j) * UNIT_BYTES), acc.sub(4 * j, 4)))
        p.emit(sync.fence_proxy_async())  # the copies read the units through the async proxy
        p.emit(sync.bar_sync(EXCHANGE_BAR, 128 * cfg.consumers))
        first: Optional[P] = None
        if c == 0:
            first = p.p("x_first_warp")
            p.emit(alu.isetp("EQ", first, p.warp_index(), 4))
            with p.when(first):
                leader = p.elect("x_leader")
                # this CTA's share arrives from S - 1 senders: arm its barrier with their bytes
                tx = p.r("x_tx")
                p.emit(alu.mov(tx, (s_ - 1) * (shares[0][1] - shares[0][0]) * UNIT_BYTES))
                for r in range(1, s_):
                    if shares[r][1] - shares[r][0] != shares[0][1] - shares[0][0]:
                        is_r, nb = p.p("x_is_rank"), p.r("x_tx_r")
                        p.emit(alu.isetp("EQ", is_r, rank_r, r))
                        p.emit(alu.mov(nb, (s_ - 1) * (shares[r][1] - shares[r][0]) * UNIT_BYTES))
                        p.emit(alu.sel(tx, nb, tx, is_r))
                p.derive.emit_at(x.recv_bar.at(0), lambda m: sync.arrive_expect_tx(m, tx), guard=leader)
                args, src, size, peer = p.urvec("x_args", 2), p.ur("x_src"), p.ur("x_size"), p.ur("x_peer")
                for r in range(s_):
                    other = p.p("x_other")
                    p.emit(alu.isetp("NE", other, rank_r, r))
                    with p.when(other):
                        lo, hi = shares[r]
                        p.emit(alu.umov(peer, r))
                        p.derive.into(args[0], "addr", x.recv.at(0, 0, 0, 0))
                        p.emit(alu.uimad(args[0], rank, most * UNIT_BYTES, args[0]))  # this sender's slot
                        p.emit(alu.mapa(args[0], peer, args[0]))
                        p.derive.into(args[1], "addr", x.recv_bar.at(0))
                        p.emit(alu.mapa(args[1], peer, args[1]))
                        p.derive.into(src, "addr", x.send.at(lo, 0, 0))
                        p.emit(alu.umov(size, (hi - lo) * UNIT_BYTES))
                        p.emit(tma.bulk_copy_s_s(Mem(args), Mem(src), size).guarded(leader))
        wait(p, x.recv_bar.at(0), self.zero(p))
        if first is not None:
            with p.when(first):
                leader = p.elect("x_leader")
                bar, peer = p.ur("x_sent_bar"), p.ur("x_peer")
                for r in range(s_):
                    other = p.p("x_other")
                    p.emit(alu.isetp("NE", other, rank_r, r))
                    with p.when(other):
                        p.emit(alu.umov(peer, r))
                        p.derive.into(bar, "addr", x.done_bar.at(0))
                        p.emit(alu.mapa(bar, peer, bar))
                        p.emit(sync.arrive_remote(Mem(bar)).guarded(leader))
        rbase, roff = p.derive.value_reg("addr", x.recv.at(0, 0, 0, 0))
        part = p.rvec("x_part", 4 * (s_ - 1))
        share = Share(rank_r, tuple(owner[c * v: (c + 1) * v]))
        for j in range(v):
            u = c * v + j
            o = owner[u]
            senders = [q for q in range(s_) if q != o]
            with p.when(share.mine(p, j)):
                for i, q in enumerate(senders):
                    at = roff + q * most * UNIT_BYTES + (u - shares[o][0]) * UNIT_BYTES
                    p.emit(memory.lds(part.sub(4 * i, 4), Mem(off, rbase, at)))
                for i in range(len(senders)):
                    for e in range(4):
                        p.emit(alu.fadd(acc[4 * j + e], acc[4 * j + e], part[4 * i + e]))
        return share

    def free(self, p: Program, rel: ConsumerEnd, leader: P, peers: list[UR]) -> None:
        """Free a stage: one arrival a warp on this CTA's empty barrier, and with clusters one on each
        peer's too (the CTAs of ranks `peers`, whose producers' multicasts write slices of this
        CTA's stage)."""
        rel.free(leader)
        for peer in peers:
            rel.free_remote(peer, leader)

    @contextlib.contextmanager
    def real_tile(self, p: Program, m_blk: R, n_blk: R) -> Iterator[None]:
        """The epilogue, skipped for a CTA's tile of a cluster tile past M or N (M-blocks not a
        multiple of cluster_m, N-blocks of cluster_n): that CTA loaded zeros (TMA fills rows past the
        tensor) and its consumers freed the stages, so the cluster stayed in lockstep; it stores nothing."""
        past_m = self.cfg.cluster_m > 1 and self.mt % self.cfg.cluster_m
        past_n = self.cfg.cluster_n > 1 and self.nt % self.cfg.cluster_n
        if not (past_m or past_n):
            yield
            return
        real = p.p("tile_in_c")
        if past_m:
            p.emit(alu.isetp("LT", real, m_blk, self.mt))
        if past_n:
            p.emit(alu.isetp("LT", real, n_blk, self.nt, c=real if past_m else PT))
        with p.when(real):
            yield

    # -- stream-K: partial sums between the CTAs sharing a tile ------------------------------------
    def fixup_setup(self, p: Program, c: int) -> FixupThread:
        """Per-thread constants: this thread's place in a slot of partial sums (a slot holds a CTA's
        accumulators, warpgroup by warpgroup, 16 bytes a thread at a time: every access is a whole,
        coalesced 512-byte line a warp), its own slot's address, the flag word's warp index."""
        cfg = self.cfg
        md = p.urvec("memdesc_sk", 2)
        p.emit(alu.uldc(md, CBank(0, 0x208), p.sm))
        t = p.r("sk_tid")
        p.emit(alu.iadd3(t, R("tid"), (1 << 32) - 128 * (c + 1)))
        off = p.r("sk_off")  # c * (the warpgroup's bytes) + 16 t
        p.emit(alu.imad(off, t, 16, c * 64 * cfg.bn * 4))
        ctaid = p.r("sk_cta")
        p.emit(alu.s2r(ctaid, "SR_CTAID.X"))
        wflag = p.r("flag_warp")  # the consumer warp's index: 0 .. 4 consumers - 1
        p.emit(alu.iadd3(wflag, p.warp_index(), (1 << 32) - 4))
        # (the pointers are read from the parameters where they are used: registers are scarce)
        return FixupThread(md, off, ctaid, wflag)

    def slot_address(self, p: Program, ws: Workspace, f: FixupThread, dst: RVec, slot: R) -> RVec:
        """dst = the address of this thread's first vector in CTA `slot`'s partial sums."""
        p.emit(alu.ldc(dst, ws.partials.cbank()))
        p.emit(alu.imad_wide(dst, slot, self.cfg.bm * self.cfg.bn * 4, dst))
        p.emit(alu.imad_wide(dst, f.off, 1, dst))
        return dst

    def fixup(self, p: Program, ws: Workspace, f: FixupThread, w: Work, acc: RVec, done: str) -> None:
        """After a segment's MMAs. A segment that stops short of the tile's last k block contributes:
        its accumulators go to the CTA's slot, then each warp raises its flag of the tile (once its
        stores are visible at GPU scope) and the CTA goes on with its next segment. The segment
        holding the last k block finishes the tile: if it did not start at k block 0, each warp
        waits until the tile's contributors (CTAs first_worker(t) .. this one - 1) have all raised
        its flag, resets the flag (the scratch stays zero between launches), adds their slots into
        its accumulators, in the order of the CTAs (deterministic), and the epilogue stores C."""
        assert self.sk is not None and w.k_lo is not None
        cfg = self.cfg
        md = f.md
        fa = p.rvec("flag_addr", 2)
        x = p.r("flag_ix")
        p.emit(alu.ldc(fa, ws.flags.cbank()))
        p.emit(alu.imad(x, w.t, 4 * cfg.consumers, f.wflag))
        p.emit(alu.imad_wide(fa, x, 4, fa))
        end, contrib = p.r("seg_end"), p.p("contributes")
        p.emit(alu.iadd3(end, w.k_lo, w.k_cnt))
        p.emit(alu.isetp("LT", contrib, end, self.kt))
        give, gather_done = p.fresh_label("CONTRIBUTE"), p.fresh_label("GATHERED")
        p.emit(control.bra(give).guarded(contrib))
        # the finisher: partial sums of the tile's earlier k blocks, if any
        whole = p.p("whole_tile")
        p.emit(alu.isetp("EQ", whole, w.k_lo, 0))
        p.emit(control.bra(gather_done).guarded(whole))
        first, count = p.r("first_cta"), p.r("contributors")
        self.sk.emit_first_worker(p, first, w.t)
        p.emit(alu.imad(count, first, (1 << 32) - 1, f.cta))
        flag, up = p.r("flag"), p.p("flag_up")
        spin = p.fresh_label("FLAG")
        p.label(spin)
        p.emit(memory.ldg_strong(flag, GMem(md, fa)))
        p.emit(alu.isetp("GE", up, flag, count))
        p.emit(control.bra(spin).guarded(~up))
        p.emit(sync.membar("GPU"))  # acquire: the contributors' partial sums before the loads
        p.emit(memory.stg_strong(GMem(md, fa), RZ))
        src = self.slot_address(p, ws, f, p.rvec("slot_addr", 2), first)
        # loads in flight a thread: 8 vectors, 4 where the register-stored epilogue's addresses of
        # 128 x 256 tiles leave too few registers (H200, 1024 x 1024 x 65536 split 4 ways: 8, 12 or
        # 16 in flight all ran 182.6 us: the gathering is not what stream-K's overhead is made of)
        batch = 4 if cfg.bn > 128 and not cfg.staged_epilogue else 8
        part = p.rvec("part", 4 * batch)
        vecs = cfg.bn // 8  # 16-byte vectors a thread holds: accumulator registers 4j .. 4j + 3
        with p.loop("slot", count, max_count=self.sk.max_contributors()):
            for j0 in range(0, vecs, batch):
                n = min(batch, vecs - j0)
                for j in range(n):
                    p.emit(memory.ldg(part.sub(4 * j, 4), GMem(md, src, (j0 + j) * 128 * 16)))
                for j in range(n):
                    for i in range(4):
                        r = 4 * (j0 + j) + i
                        p.emit(alu.fadd(acc[r], acc[r], part[4 * j + i]))
            p.emit(alu.iadd3(first, first, 1))
            self.slot_address(p, ws, f, src, first)
        p.emit(control.bra(gather_done))
        # a contributor: the accumulators to this CTA's slot, then the flag
        p.label(give)
        mine = self.slot_address(p, ws, f, p.rvec("my_slot", 2), f.cta)
        for j in range(vecs):
            p.emit(memory.stg(GMem(md, mine, j * 128 * 16), acc.sub(4 * j, 4)))
        p.emit(control.warpsync_all())
        raiser = p.elect("flag_raiser")
        one = p.r("one")
        p.emit(alu.mov(one, 1))
        with p.when(raiser):
            p.emit(sync.membar("GPU"))  # release: the warp's partial sums before the flag
            p.emit(memory.red_add(GMem(md, fa), one))
        p.emit(control.bra(done))
        p.label(gather_done)

    # -- the fused epilogue: alpha, beta·C_in, bias, activation, residual on the accumulators -------
    def fused_epilogue(self, p: Program, res: Sm90Resources, c: int, acc: RVec, m_blk: R, n_blk: R, rows: int) -> None:
        """acc = act(alpha·acc + beta·C_in + bias) + residual (kernels/gemm_epilogue.py), each value
        4j + 2h + i at row `row` + 8h, column `col` + 8j + i of C (the wgmma fragment); the inputs
        loaded with the accumulator's pattern (pairs of columns, one access each where N is even),
        guarded by C's edges on ragged problems (an element past them reads 0 and is not stored)."""
        cfg, ep, oeb, od = self.cfg, self.ep, self.oeb, self.out_dtype
        M, N = self.m, self.n
        k = emit_consts(p, ep)
        md, t, tmp, row, col = fragment_origin(p, "ep", c, cfg.bm, cfg.bn, m_blk, n_blk, rows)
        ragged = bool(M % cfg.bm or N % cfg.bn)
        even = N % 2 == 0
        row_ok: list[Optional[P]] = [None, None]
        if ragged:
            for h in range(2):
                if M > 8 * h:
                    ok = row_ok[h] = p.p(f"ep_row_ok{h}")
                    p.emit(alu.isetp("LT", ok, row, M - 8 * h))

        def col_guard(name: str, j: int, i: int, h: Optional[int]) -> Optional[P]:
            if not ragged:
                return None
            g = p.p(name)
            c_ = row_ok[h] if h is not None else None
            p.emit(alu.isetp("LT", g, col, N - 8 * j - i, c=c_) if c_ is not None else alu.isetp("LT", g, col, N - 8 * j - i))
            return g

        def pointer(name: str) -> RVec:
            v = p.rvec(f"ep_{name}_ptr", 2)
            p.emit(alu.ldc(v, res.aux[name].cbank()))
            return v

        bias_n: Optional[RVec] = None
        bias_m: list[Optional[F32]] = [None, None]
        if ep.bias == "n":
            bias_n = pointer("bias")
            p.emit(alu.imad_wide(bias_n, col, oeb, bias_n))
        elif ep.bias == "m":
            ptr = pointer("bias")
            p.emit(alu.imad_wide(ptr, row, oeb, ptr))
            for h in range(2):
                if ragged and M <= 8 * h:
                    continue
                bm_h = bias_m[h] = F32.of(p.r(f"ep_bias_m{h}"))
                emit_load(p, md, ptr, 8 * h * oeb, od, (bm_h,), (row_ok[h],), False)
        mats: dict[str, list[RVec]] = {}
        for name in ("c_in", "residual"):
            if name in res.aux:
                base = pointer(name)
                p.emit(alu.imad_wide(base, row, N * oeb, base))
                p.emit(alu.imad_wide(base, col, oeb, base))
                nxt = p.rvec(f"ep_{name}_ptr8", 2)
                pitch = p.r("ep_pitch8")
                p.emit(alu.mov(pitch, 8 * N * oeb))
                p.emit(alu.imad_wide(nxt, pitch, 1, base))
                mats[name] = [base, nxt]
        for j in range(cfg.bn // 8):
            if ragged and N - 8 * j <= 0:
                break
            bn_vals: tuple[Optional[F32], Optional[F32]] = (None, None)
            if bias_n is not None:
                b0, b1 = F32.of(p.r("ep_bias0")), F32.of(p.r("ep_bias1"))
                g0 = col_guard("ep_bias_ok0", j, 0, None)
                g1 = g0 if even else col_guard("ep_bias_ok1", j, 1, None)
                emit_load(p, md, bias_n, 8 * j * oeb, od, (b0, b1), (g0, g1), even or not ragged)
                bn_vals = (b0, b1)
            for h in range(2):
                if ragged and M <= 8 * h:
                    continue
                g0 = col_guard("ep_ok0", j, 0, h)
                g1 = g0 if even or g0 is None else col_guard("ep_ok1", j, 1, h)
                vals: dict[str, tuple[F32, F32]] = {}
                for name, addrs in mats.items():
                    v0, v1 = F32.of(p.r(f"ep_{name}0")), F32.of(p.r(f"ep_{name}1"))
                    emit_load(p, md, addrs[h], 8 * j * oeb, od, (v0, v1), (g0, g1), even)
                    vals[name] = (v0, v1)
                for i in range(2):
                    bias = bn_vals[i] if bias_n is not None else bias_m[h]
                    emit_element(p, ep, k, F32.of(acc[4 * j + 2 * h + i]),
                                 vals["c_in"][i] if "c_in" in vals else None, bias,
                                 vals["residual"][i] if "residual" in vals else None)

    # -- epilogue: registers -> global, guarded on ragged tiles ----------------------------------
    def epilogue_setup(self, p: Program, res: Sm90Resources, c: int) -> EpilogueThread:
        """Per-thread constants: this thread's first row and column in the tile, C's pointer."""
        t = p.r("wg_tid")
        p.emit(alu.iadd3(t, R("tid"), (1 << 32) - 128 * (c + 1)))
        row = p.r("frag_row")  # wg_rows c + 16 * warp + lane / 4
        col = p.r("frag_col")  # 2 * (lane % 4)
        tmp = p.r("frag_tmp")
        p.emit(alu.shf_r(row, t, 5))
        p.emit(alu.imad(row, row, 16, self.cfg.wg_rows * c))
        p.emit(alu.lop3(tmp, t, 31, RZ, 0xC0))
        p.emit(alu.shf_r(tmp, tmp, 2))
        p.emit(alu.iadd3(row, row, tmp))
        p.emit(alu.lop3(col, t, 3, RZ, 0xC0))
        p.emit(alu.shf_l(col, col, 1))
        cptr = p.rvec("c_ptr", 2)
        assert res.c is not None
        p.emit(alu.ldc(cptr, res.c.cbank()))
        memdesc = p.urvec("memdesc", 2)
        p.emit(alu.uldc(memdesc, CBank(0, 0x208), p.sm))
        pitch = p.r("c_pitch8")
        p.emit(alu.mov(pitch, 8 * self.c_strides()[0]))
        return EpilogueThread(row, col, cptr, memdesc, pitch)

    def epilogue(self, p: Program, e: EpilogueThread, acc: RVec, m_blk: R, n_blk: R, bt: Optional[R] = None,
                 share: Optional[Share] = None, sub_row: int = 0) -> None:
        """Store `acc`, the block `sub_row` rows into the warpgroup's slice of tile (m_blk, n_blk)."""
        cfg = self.cfg
        row0, col0 = p.r("row0"), p.r("col0")
        p.emit(alu.imad(row0, m_blk, cfg.bm, e.row))
        if sub_row:
            p.emit(alu.iadd3(row0, row0, sub_row, RZ))
        p.emit(alu.imad(col0, n_blk, cfg.bn, e.col))
        addr = [p.rvec("c_addr0", 2), p.rvec("c_addr1", 2)]
        row_b, col_b = self.c_strides()
        p.emit(alu.imad_wide(addr[0], row0, row_b, e.cptr))
        p.emit(alu.imad_wide(addr[0], col0, col_b, addr[0]))
        if bt is not None:  # the batch's matrix
            p.emit(alu.imad_wide(addr[0], bt, self.sc * self.oeb, addr[0]))
        p.emit(alu.imad_wide(addr[1], e.pitch8, 1, addr[0]))
        ragged = self.m % cfg.bm or self.n % cfg.bn
        if not ragged:
            self.stores(p, e, acc, addr, None, None, share)
            return
        inside = p.p("tile_inside")
        p.emit(alu.isetp("LT", inside, m_blk, self.m // cfg.bm))
        p.emit(alu.isetp("LT", inside, n_blk, self.n // cfg.bn, c=inside))
        edge, done = p.fresh_label("EDGE_TILE"), p.fresh_label("STORED")
        p.emit(control.bra(edge).guarded(~inside))
        self.stores(p, e, acc, addr, None, None, share)
        p.emit(control.bra(done))
        p.label(edge)
        self.stores(p, e, acc, addr, row0, col0, share)
        p.label(done)

    def stores(self, p: Program, e: EpilogueThread, acc: RVec, addr: list[RVec],
               row0: R | None, col0: R | None, share: Optional[Share] = None) -> None:
        """Store the accumulator: value 4j + 2h + i is row + 8h, column 8j + i of this thread's
        fragment. With row0/col0, every store is guarded by the problem's edges; with `share`, vector
        j only where this CTA owns it (cluster_k: the CTA's share of the tile)."""
        cfg, oeb = self.cfg, self.oeb
        md = e.memdesc
        guarded = row0 is not None and col0 is not None
        # a pair of columns is one aligned access only if rows stay aligned (and the columns are adjacent
        # in memory: not where A and B are swapped, the program's columns being C's rows)
        pair_ok = self.n % 2 == 0 and not self.swap
        col_b = self.c_strides()[1]
        packed = p.r("packed")
        hi_half = p.r("hi_half")
        # a store's immediate offset is 24 bits, signed: where the tile's columns reach past it (A and
        # B swapped: its columns are C's rows, ldc apart), the stores go from an address moved on to the
        # first column past the reach, a window at a time
        window: Optional[tuple[RVec, R]] = None
        for h in range(2):
            base, base_j = addr[h], 0
            row_ok: P | None = None
            if guarded:
                assert row0 is not None
                row_ok = p.p("row_ok")
                p.emit(alu.isetp("LT", row_ok, row0, self.m - 8 * h)) if self.m > 8 * h else None
                if self.m <= 8 * h:
                    continue
            for j in range(cfg.bn // 8):
                if guarded and self.n - 8 * j <= 0:
                    break
                if (8 * (j - base_j) + 1) * col_b >= STORE_OFFSET_LIMIT:
                    window = window or (p.rvec("c_window", 2), p.r("c_window_col"))
                    base, base_j = window[0], j
                    p.emit(alu.mov(window[1], 8 * j))
                    p.emit(alu.imad_wide(window[0], window[1], col_b, addr[h]))
                with p.when(share.mine(p, j)) if share is not None else contextlib.nullcontext():
                    v = acc.sub(4 * j + 2 * h, 2)
                    g0 = GMem(md, base, 8 * (j - base_j) * col_b)
                    g1 = GMem(md, base, (8 * (j - base_j) + 1) * col_b)
                    ok0 = ok1 = None
                    if guarded:
                        assert col0 is not None and row_ok is not None
                        ok0 = p.p("col_ok")
                        p.emit(alu.isetp("LT", ok0, col0, self.n - 8 * j, c=row_ok))
                        if not pair_ok:
                            ok1 = p.p("col1_ok")
                            p.emit(alu.isetp("LT", ok1, col0, self.n - 8 * j - 1, c=row_ok))
                    if self.out_dtype == "fp32":
                        if pair_ok:
                            p.emit(memory.stg(g0, v).guarded(ok0))
                        else:
                            p.emit(memory.stg(g0, v[0]).guarded(ok0))
                            p.emit(memory.stg(g1, v[1]).guarded(ok1))
                        continue
                    kind = "BF16" if self.out_dtype == "bf16" else "F16"
                    p.emit(ins(alu.F2FP, f"{kind}.F32.PACK_AB", packed, v[1], v[0]))
                    if pair_ok:
                        p.emit(memory.stg(g0, packed).guarded(ok0))
                    else:
                        p.emit(ins(memory.STG, "E.U16", g0, packed).guarded(ok0))
                        p.emit(alu.shf_r(hi_half, packed, 16))
                        p.emit(ins(memory.STG, "E.U16", g1, hi_half).guarded(ok1))

    # -- staged epilogue: registers -> STSM -> shared memory -> TMA store, 64 columns at a time ------
    def staged_epilogue_swapped(self, p: Program, res: Sm90Resources, c: int, e: StagedThread, accs: list[RVec],
                                m_blk: R, n_blk: R) -> None:
        """A and B swapped: each 64-row block of the warpgroup's accumulators is 64 columns of C by BN
        of its rows; STSM.16.MT88 stores it transposed into its BN x 64 tile of C, one TMA store moves
        it (C's edges clip it). The warpgroup's one staging tile takes its blocks in turn (a ring stage
        is worth more than a second tile): the store that last read it must be done (the lead's bulk
        wait), before any thread writes it again (the barrier)."""
        cfg = self.cfg
        assert res.staged is not None
        main, lead = res.staged, e.lead
        kind = "BF16" if self.out_dtype == "bf16" else "F16"
        v = p.rvec("stsm_v", 4)
        v2 = v.sub(0, 2)
        c_row, c_col = p.r("tile_row"), p.r("tile_col")
        bar = 1 + c
        p.emit(alu.imad(c_row, n_blk, cfg.bn, RZ))  # C's first row: the program's column
        for s, acc in enumerate(accs):
            p.emit(tma.bulk_wait(0).guarded(lead))
            p.emit(sync.bar_sync(bar, 128))
            for j in range(0, cfg.bn // 8 - 1, 2):  # 16 rows of C at a time: 8-column groups j, j + 1
                for r, (jv, h) in enumerate(((j, 0), (j, 1), (j + 1, 0), (j + 1, 1))):
                    p.emit(ins(alu.F2FP, f"{kind}.F32.PACK_AB", v[r], acc[4 * jv + 2 * h + 1], acc[4 * jv + 2 * h]))
                p.derive.emit_swizzled_at(main.tiles.at(c, e.row + 8 * j, e.col),
                                          lambda m: memory.stsm(m, v, trans=True))
            if cfg.bn // 8 % 2:  # the last 8 rows: matrices (j, 0), (j, 1), addressed by lanes 0-15
                j = cfg.bn // 8 - 1
                for r, h in enumerate((0, 1)):
                    p.emit(ins(alu.F2FP, f"{kind}.F32.PACK_AB", v2[r], acc[4 * j + 2 * h + 1], acc[4 * j + 2 * h]))
                assert e.row8 is not None
                p.derive.emit_swizzled_at(main.tiles.at(c, e.row8 + 8 * j, e.col),
                                          lambda m: memory.stsm(m, v2, trans=True))
            p.emit(sync.fence_proxy_async())
            p.emit(sync.bar_sync(bar, 128))
            p.emit(alu.imad(c_col, m_blk, cfg.bm, cfg.wg_rows * c + 64 * s))  # C's column: the program's row
            with p.when(lead):
                tma_store(p, main.tiles.at(c, 0, 0), main.tmap, [c_col, c_row])
                p.emit(tma.bulk_commit())

    def staged_setup(self, p: Program, c: int, trans: bool = False) -> StagedThread:
        """Per-thread constants of STSM.16.M88.4: lane l gives the address of row l % 8 of matrix
        l // 8; matrices (0, 1, 2, 3) are (rows 0-7, rows 8-15) x (columns 0-7, 8-15) of the warp's
        16 x 16 block. With `trans` (STSM.16.MT88.4, A and B swapped) each matrix is stored
        transposed: row l % 8 of the stored matrix l // 8 is the fragment's column, so the lane's row
        of C is l % 8 + 8 (l // 16) and its column 16 warp + 8 ((l // 8) % 2). The TMA stores are
        issued by the warpgroup's first thread."""
        t = p.r("wg_tid")
        p.emit(alu.iadd3(t, R("tid"), (1 << 32) - 128 * (c + 1)))
        lead = p.p("epi_lead")
        p.emit(alu.isetp("EQ", lead, t, 0))
        srow, scol, tmp = p.r("stsm_row"), p.r("stsm_col"), p.r("stsm_tmp")
        if trans:
            srow8 = p.r("stsm_row8")
            p.emit(alu.lop3(srow8, t, 7, RZ, 0xC0))  # l % 8
            p.emit(alu.lop3(tmp, t, 16, RZ, 0xC0))  # 16 * (l // 16)
            p.emit(alu.shf_r(tmp, tmp, 1))
            p.emit(alu.iadd3(srow, srow8, tmp))
            p.emit(alu.shf_r(scol, t, 5))  # warp in the warpgroup
            p.emit(alu.imad(scol, scol, 16, RZ))
            p.emit(alu.lop3(tmp, t, 8, RZ, 0xC0))  # 8 * ((l // 8) % 2)
            p.emit(alu.iadd3(scol, scol, tmp))
            return StagedThread(lead, Lane("stsm_row", srow, 16), Lane("stsm_col", scol, 64), Lane("stsm_row8", srow8, 8))
        p.emit(alu.shf_r(srow, t, 5))  # warp in the warpgroup
        p.emit(alu.imad(srow, srow, 16, RZ))
        p.emit(alu.lop3(tmp, t, 7, RZ, 0xC0))  # l % 8
        p.emit(alu.iadd3(srow, srow, tmp))
        p.emit(alu.lop3(tmp, t, 8, RZ, 0xC0))  # 8 * ((l // 8) % 2)
        p.emit(alu.iadd3(srow, srow, tmp))
        p.emit(alu.lop3(scol, t, 16, RZ, 0xC0))  # 8 * (l // 16)
        p.emit(alu.shf_r(scol, scol, 1))
        return StagedThread(lead, Lane("stsm_row", srow, 64), Lane("stsm_col", scol, 16))

    def staged_epilogue(self, p: Program, res: Sm90Resources, c: int, e: StagedThread, accs: list[RVec], m_blk: R,
                        n_blk: R, w: Work) -> None:
        """Store the warpgroup's accumulators (one a 64-row block of its slice, `accs`), each chunk by
        chunk through the warpgroup's staging tiles."""
        cfg = self.cfg
        assert res.staged is not None
        main = res.staged
        lead = e.lead
        kind = "BF16" if self.out_dtype == "bf16" else "F16"
        v = p.rvec("stsm_v", 4)
        v2 = v.sub(0, 2)  # an 8-column chunk's two 8 x 8 matrices (STSM .x2)
        row0, col = p.r("tile_row"), p.r("tile_col")
        bar = 1 + c  # named barrier of this consumer warpgroup (0 is the CTA's)
        # each block's chunks of 64 columns through two alternating buffers, then the narrower ones
        # (`epi_tails`: BN % 64 as 32, 16 and 8 columns) each through its own buffer and map (buffer
        # -1 - i); a warpgroup of two blocks stores the second's after the first's, through the same buffers
        one = [(q * EPI_COLS, EPI_COLS, q % 2) for q in range(cfg.bn // EPI_COLS)]
        c0 = cfg.bn // EPI_COLS * EPI_COLS
        for i, t in enumerate(res.staged_tails):
            one.append((c0, t.cols, -1 - i))
            c0 += t.cols
        chunks = [(s, c0, width, b) for s in range(len(accs)) for c0, width, b in one]
        bufs = [b for _, _, _, b in chunks]
        for i, (s, c0, width, b) in enumerate(chunks):
            acc = accs[s]
            if c0 == 0:  # the block's first row of C
                p.emit(alu.imad(row0, m_blk, cfg.bm, cfg.wg_rows * c + 64 * s))

            def at(col_: Coord) -> Tile:
                if b >= 0:
                    return main.tiles.at(c, b, e.row, col_)
                return res.staged_tails[-1 - b].tiles.at(c, e.row, col_)

            # the store that last read this buffer must be done with it: `back` stores ago, counting
            # into the previous tile's chunks (one 64-column chunk, or three: the next tile's first
            # reuses the buffer of this tile's last, the latest store in flight)
            back = next(d for d in range(1, len(chunks) + 1) if bufs[(i - d) % len(chunks)] == b)
            p.emit(tma.bulk_wait(min(1, back - 1)).guarded(lead))
            p.emit(sync.bar_sync(bar, 128))
            for jj in range(width // 16):
                j = c0 // 8 + 2 * jj  # 8-column group of the accumulator fragment
                for r, (jv, h) in enumerate(((j, 0), (j, 1), (j + 1, 0), (j + 1, 1))):
                    p.emit(ins(alu.F2FP, f"{kind}.F32.PACK_AB", v[r], acc[4 * jv + 2 * h + 1], acc[4 * jv + 2 * h]))
                p.derive.emit_swizzled_at(at(e.col + 16 * jj), lambda m: memory.stsm(m, v))
            if width % 16:  # 8 columns: rows 0-7 and 8-15 of the group, addressed by lanes 0-15 (column 0)
                j = c0 // 8 + width // 8 - 1
                for r, h in enumerate((0, 1)):
                    p.emit(ins(alu.F2FP, f"{kind}.F32.PACK_AB", v2[r], acc[4 * j + 2 * h + 1], acc[4 * j + 2 * h]))
                p.derive.emit_swizzled_at(at(0), lambda m: memory.stsm(m, v2))
            p.emit(sync.fence_proxy_async())
            p.emit(sync.bar_sync(bar, 128))
            p.emit(alu.imad(col, n_blk, cfg.bn, c0))
            with p.when(lead):
                if b >= 0:
                    tma_store(p, main.tiles.at(c, b, 0, 0), main.tmap, self.coords(w, col, row0))
                else:
                    t = res.staged_tails[-1 - b]
                    tma_store(p, t.tiles.at(c, 0, 0), t.tmap, self.coords(w, col, row0))
                p.emit(tma.bulk_commit())
