"""The Blackwell GEMM (sm_100a): C = A · Bᵀ, A (M x K) and B (N x K) each K-major or MN-major
(stored K x M / K x N: 64-row TMA boxes, MN-major UMMA descriptors, the instruction descriptor's
major bits), fp16/bf16 in, fp32 accumulation in tensor memory, fp32/bf16/fp16 out. One program,
configured per shape by the GEMM family's rule (`kernels/gemm.py`, `choose_sm100` below,
`for_majors`).

CTA pairs and SwapAB. Every MMA is `tcgen05.mma.cta_group::2` (`UTCHMMA.2CTA`), issued by the
pair's leader (even cluster rank) for both CTAs. The tile of Bᵀ (rows of B: columns of C) is the
MMA's A operand and the tile of A its B operand, so each CTA's accumulator is its block of C
transposed: tensor-memory lane = a column of C, tensor-memory column = a row of C.

- The pair covers BM rows of C (the MMA's N; each CTA loads BM/2 rows of A) and 2 x `cta_rows`
  columns (each CTA loads `cta_rows` rows of B: 64 → one M = 128 pair MMA, 128 → M = 256,
  256 → two stacked M = 256 MMAs, the second into the columns after the first's).
- A cluster holds `pairs` pairs (1, 2 or 4: clusters of 1 x 2, 2 x 2 and 2 x 4 CTAs) covering
  consecutive BM-row blocks of C and the same columns; they share the Bᵀ tile: each CTA loads
  1/pairs of it and multicasts it to the CTAs of the same rank in their pairs.

Warp roles (256 threads a CTA):

- warp 0, producer (both CTAs): for each tile and k block, waits for an empty stage, (leader CTA)
  arms the stage's full barrier with both CTAs' bytes, and issues its `.2CTA` TMA loads of A and
  Bᵀ, completing on the leader's barrier (mapa to the leader rank);
- warp 1, MMA (leader CTA): waits for a full stage, issues BK/16 x reps `UTCHMMA.2CTA` into one of
  the tensor-memory accumulators, frees the stage with `UTCBAR.2CTA.MULTICAST` to every CTA of the
  cluster (each stage's empty barrier takes one commit per pair); after the last k block, commits
  the accumulator-full barrier of both CTAs of the pair;
- warp 2, cluster launch control (when configured): asks for the next tile
  (`UGETNEXTWORKID.BROADCAST`) and hands it to every role through a pipe;
- warps 4-7, epilogue (both CTAs): wait for the accumulator, read their 32 lanes with `LDTM.x32`,
  store C from the registers (guarded on ragged tiles) or, for split-K / stream-K, stage the tile in
  shared memory and add it into C in the L2 with `UTMAREDG.ADD`; then free the accumulator (one
  arrival per warp on the leader's barrier).

Every shared-memory address, descriptor, barrier and tensor-memory address is derived by the
Program from the buffers' layouts; global addresses of C are the program's own arithmetic.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Union

import attrs

from warpy.errors import WarpyError
from warpy.isa.buffers import BarrierArray, Param, SmemBuffer, TensorMap, TileRing, TmemBuffer
from warpy.isa.families import alu, clc, control, memory, sync, tcgen05, tma
from warpy.isa.families._util import ins
from warpy.isa.families.typed import F32
from warpy.isa.index import Ix, Lane, Ring, Uniform
from warpy.isa.operands import RZ, UP, URZ, CBank, GMem, Mem, P, R, RVec, UR, URVec
from warpy.isa.pipes import ConsumerEnd, Pipe, init_barriers, wait
from warpy.isa.program import Program
from warpy.isa.units.tcgen05 import utchmma
from warpy.isa.units.tma import tma_box, tma_load, tma_multicast_slices, tma_store
from warpy.layout import Layout
from warpy.layout.desc import umma_idesc
from warpy.layout.smem import SmemTile, smem_tile
from warpy.layout.tma import TmaBox, store_clips_exactly
from warpy.target import SM100A, dtype_bytes

from .gemm_epilogue import Epilogue, emit_consts, emit_element, emit_load
from . import gemm_fp8
from .schedule import StreamK, TileOrder, cdiv, divide, strided_tiles

if TYPE_CHECKING:
    from .gemm import GemmProblem

MEMDESC = CBank(0, SM100A.memdesc)  # the global memory descriptor word
BK = 64  # one 128-byte swizzle row of fp16/bf16 (8-bit floats: 128, `Sm100Gemm.bk`)
CLC_DEPTH = 2
MAXNREG = 168  # answers of cluster launch control in flight


@attrs.frozen
class Sm100Config:
    """One configuration of the program.

    bm: rows of C a CTA (and its pair) covers: the MMA's N (16..256 step 16; each CTA loads bm/2 rows of A);
    cta_rows: columns of C a CTA covers (64, 128 or 256 rows of B: the pair MMA's M is 2 x min(cta_rows, 128),
    stacked twice for 256); stages: ring depth; accs: tensor-memory accumulators (1 or 2);
    pairs: CTA pairs a cluster (1, 2, 4) sharing the Bᵀ tile by multicast; persistent: a fixed grid
    of clusters walking the tiles by stride (else one cluster a tile); group: the tile order's group
    height; serpentine: alternate the direction of each group column; clc: tiles taken by cluster
    launch control; ask_ahead: the MMA warp probes the next stage's barrier; pdl: programmatic
    dependent launch: the kernel always waits (ACQBULK) before its first global access; "entry" lets
    the next grid in at once (PREEXIT at entry), "last_load" once the producer has issued its last
    load, "" never (no PREEXIT; the wait stays); split: K split that many ways over the grid,
    partial sums added into C in the L2; stream_k: stream-K over the grid (the tile's first-k owner
    zeroes it, every piece adds once the tile's flag is up); tma_store: C leaves through a staging
    tile and TMA stores (else straight from the registers)."""

    bm: int = 128
    cta_rows: int = 128
    stages: int = 6
    accs: int = 2
    pairs: int = 1
    sms: int = SM100A.sms
    persistent: bool = True
    group: int = 8
    serpentine: bool = False
    clc: bool = False
    ask_ahead: bool = False
    pdl: str = "entry"
    split: int = 1
    stream_k: bool = False
    tma_store: bool = True

    @property
    def reps(self) -> int:
        return 2 if self.cta_rows == 256 else 1

    @property
    def mma_m(self) -> int:
        return 2 * min(self.cta_rows, 128)

    @property
    def acc_cols(self) -> int:
        """Tensor-memory columns one accumulator takes."""
        return self.bm // 2 if self.cta_rows == 64 else self.reps * self.bm

    @property
    def cluster(self) -> int:
        return 2 * self.pairs

    def describe(self) -> str:
        feats = [f"{self.bm}x{self.cta_rows} a CTA (pair MMA M={self.mma_m} N={self.bm}" +
                 (", two stacked" if self.reps == 2 else "") + ")",
                 f"ring depth {self.stages}", f"{self.accs} accumulator" + ("s" if self.accs > 1 else "")]
        if self.pairs > 1:
            feats.append(f"2x{self.pairs} clusters (Bᵀ multicast)")
        if self.clc:
            feats.append("cluster launch control")
        elif self.split > 1 or self.stream_k:
            pass
        elif self.persistent:
            feats.append(f"a fixed grid walking the tiles by stride in groups of {self.group}")
        if self.serpentine:
            feats.append("serpentine order")
        if self.ask_ahead:
            feats.append("asking a stage ahead")
        if self.pdl == "last_load":
            feats.append("the next grid let in after the last load")
        if self.split > 1:
            feats.append(f"K split {self.split} ways over the grid, adding in the L2")
        if self.stream_k:
            feats.append("stream-K adding in the L2")
        if not (self.split > 1 or self.stream_k):
            feats.append("stored by TMA" if self.tma_store else "stored from the registers")
        return "sm_100a 2-CTA tcgen05, SwapAB: " + ", ".join(feats)


def smem_bytes(cfg: Sm100Config, elem: int = 2) -> int:
    """Dynamic shared memory: the ring (per CTA: bm/2 rows of A and cta_rows of Bᵀ a stage), the
    epilogue's staging tile when partial sums are added by TMA, barriers and slots."""
    stage = (cfg.bm // 2 + cfg.cta_rows) * BK * elem
    staging = 4 * 32 * 32 * 4 if (cfg.split > 1 or cfg.stream_k or cfg.tma_store) else 0
    return cfg.stages * stage + staging + 1024


def check_config(cfg: Sm100Config) -> None:
    if cfg.cta_rows not in (64, 128, 256):
        raise WarpyError(f"cta_rows {cfg.cta_rows} is not 64, 128 or 256")
    if not (16 <= cfg.bm <= 256 and cfg.bm % 16 == 0):
        raise WarpyError(f"bm {cfg.bm}: the pair MMA's N is 16..256 in steps of 16")
    if cfg.cta_rows == 64 and cfg.bm % 64:
        raise WarpyError(f"bm {cfg.bm}: an M=128 pair MMA folds N over two lane halves; bm must be a multiple of 64")
    if cfg.acc_cols % 32:
        raise WarpyError(f"an accumulator of {cfg.acc_cols} columns is not whole 32-column loads")
    if cfg.accs not in (1, 2) or cfg.accs * cfg.acc_cols > SM100A.tmem_columns:
        raise WarpyError(f"{cfg.accs} accumulators of {cfg.acc_cols} columns do not fit {SM100A.tmem_columns} "
                         f"tensor-memory columns")
    if cfg.pairs not in (1, 2, 4):
        raise WarpyError(f"{cfg.pairs} pairs a cluster: 1, 2 or 4")
    if cfg.cta_rows // cfg.pairs < 8:
        raise WarpyError(f"a multicast slice of {cfg.cta_rows // cfg.pairs} rows is less than one 8-row group")
    if cfg.pdl not in ("", "entry", "last_load"):
        raise WarpyError(f"pdl {cfg.pdl!r} is not '', 'entry' or 'last_load'")
    if smem_bytes(cfg) > SM100A.max_dynamic_smem:
        raise WarpyError(f"{cfg.describe()} needs {smem_bytes(cfg)} bytes of shared memory, more than "
                         f"{SM100A.max_dynamic_smem}")
    if cfg.split > 1 and cfg.stream_k:
        raise WarpyError("split-K over the grid and stream-K are two ways of one thing; pick one")
    if (cfg.split > 1 or cfg.stream_k) and cfg.clc:
        raise WarpyError("split-K / stream-K walk a fixed grid; cluster launch control is not combined with them")
    if (cfg.split > 1 or cfg.stream_k) and cfg.pairs != 1:
        raise WarpyError("split-K / stream-K run one pair a cluster")


@attrs.frozen
class Work:
    """One piece of a cluster's work: the tile's number, its first k block and how many (a
    register, or None / the whole K), and whether this cluster owns the tile's first k block."""

    t: R
    k_lo: Optional[R]
    k_cnt: Union[int, R]
    owner: Optional[P]


@attrs.frozen
class Ranks:
    """This CTA's place in its cluster, uniform registers set in the prologue: its rank, its place
    in its pair (0: the pair's leader), its pair, the pair leader's rank, and whether it leads."""

    rank: UR
    in_pair: UR
    pair: UR
    leader_rank: UR
    is_leader: UP


@attrs.frozen
class Scheduler:
    """Cluster launch control: the pipe handing the next tile to every role, and the answers' slots."""

    pipe: Pipe
    resp: SmemBuffer


@attrs.frozen
class CStaging:
    """C leaving (or added to in the L2) by TMA: the map, and the warps' staging tiles (a 32 x 32
    box a warp and chunk: 32 rows of C's 32 columns, row-major)."""

    tmap: TensorMap
    tiles: SmemBuffer


@attrs.frozen
class Sm100Resources:
    """What the roles share, declared in `build` before any role: tensor maps and parameters,
    buffers, pipes, barriers and the prologue's registers.

    c: C's pointer where the program stores with STG (from the registers; zeros for split-K /
    stream-K); staging: where C leaves by TMA; flags: the split-K / stream-K workspace (one flag a
    tile, then one epoch word a CTA); stage: the operand ring (sa, sbt); accp: the tensor-memory
    accumulators; clc: cluster launch control; tmem_free: the leader's word to the peer that it
    may free its columns; tmem_slot: where warp 1 writes the allocation's address; tmem_base: the
    register each role reads it into."""

    ta: TensorMap
    tb: TensorMap
    c: Optional[Param]
    staging: Optional[CStaging]
    flags: Optional[Param]
    sa: TileRing
    sbt: TileRing
    stage: Pipe
    accp: Pipe
    clc: Optional[Scheduler]
    tmem_free: BarrierArray
    tmem_slot: SmemBuffer
    acc: TmemBuffer
    tmem_base: UR
    ranks: Ranks
    aux: dict[str, Param] = attrs.field(factory=dict)  # the fused epilogue's inputs (bias, c_in, residual)


@attrs.frozen
class EpilogueThread:
    """The epilogue's per-thread constants, set before its tile loop: the thread's lane and the
    warp's first tensor-memory lane (an index of acc), the warp's lane offset in a tensor-memory
    address, the address and the 32 values of one load, the global memory descriptor, C's pointer,
    the accumulator columns a warp reads, (C through staging tiles) the warp's staging tile and the
    thread's column in it, and (split-K / stream-K) this CTA's epoch."""

    lane: R
    wl_ix: Lane
    uwofs: UR
    taddr: UR
    v: RVec
    md: URVec
    cptr: RVec
    ncols: int
    staging: Optional["StagingIndex"]
    epoch: Optional["Epoch"]


@attrs.frozen
class Epoch:
    """Split-K / stream-K: the workspace's pointer, this CTA's epoch word (its address, and the
    launches run so far, read from it) and the flag value saying a tile was zeroed in this launch."""

    flags_ptr: RVec
    addr: RVec
    value: R
    flag_target: R


@attrs.frozen
class StagingIndex:
    """The warp's staging tile (a per-CTA index: the warp's quarter) and the thread's column in it."""

    quarter: Uniform
    lane: Lane


@attrs.frozen
class OutTile:
    """A tile the epilogue writes: its number and blocks, and the thread's first row and its column of C."""

    t: R
    m_blk: R
    n_blk: R
    mrow: R
    ncol: R


@attrs.frozen
class AccRead:
    """The accumulator a tile's stores read: the buffer and ring position, its derived tensor-memory
    address (a register and an offset), and what to do once the last load has completed."""

    acc: TmemBuffer
    ring: Ring
    base: UR
    off: int
    on_last_load: Callable[[], None]


def tma_box_plain(m: int, n: int, dtype: str = "fp32", pitch: int = 0) -> TmaBox:
    """C (M x N, row-major, rows `pitch` elements apart; 0: N) in 32 x 32 boxes, unswizzled: a warp's
    staging tile (32 rows of C's 32 columns), as the TMA store or reduce-add copies it."""
    return TmaBox(dtype, dims=(n, m), strides=((pitch or n) * dtype_bytes(dtype),), box=(32, 32), swizzle=0)


#: rows (M or N) of an MN-major operand's TMA box: one 128-byte swizzle span of 16-bit elements
MN_BOX_ROWS = 64


def box_tile(tile: SmemTile) -> SmemTile:
    """The shared-memory tile one TMA box of an operand lands: the whole tile (K-major), or 64 of its
    rows (MN-major: M or N is the box's inner dimension, one 128-byte swizzle span)."""
    if tile.major == "K":
        return tile
    if tile.rows % MN_BOX_ROWS:
        raise WarpyError(f"an MN-major operand's tile is whole {MN_BOX_ROWS}-row boxes, not {tile.rows} rows")
    return smem_tile(MN_BOX_ROWS, tile.cols, tile.dtype, "MN", tile.swizzle)


def mn_rows(p: Program, row0: UR, rows: int, name: str) -> list[tuple[int, UR]]:
    """(first row in the tile, the register holding its global row) of each 64-row box of an
    MN-major operand's tile of `rows` rows starting at global row `row0`."""
    out = [(0, row0)]
    for j in range(1, rows // MN_BOX_ROWS):
        r = p.ur(f"{name}{j}")
        p.emit(alu.uiadd3(r, row0, MN_BOX_ROWS * j))
        out.append((MN_BOX_ROWS * j, r))
    return out


def for_majors(cfg: Sm100Config, a_major: str, b_major: str) -> Sm100Config:
    """`cfg` made able to read MN-major operands: A's rows a CTA (bm/2) whole 64-row boxes (bm 128
    or 256), one pair a cluster where B is MN-major (no multicast slices), and a ring that fits."""
    if a_major == "MN" and (cfg.bm // 2) % MN_BOX_ROWS:
        cfg = attrs.evolve(cfg, bm=128 if cfg.bm < 128 else 256)
    if b_major == "MN" and cfg.pairs != 1:
        cfg = attrs.evolve(cfg, pairs=1)
    while cfg.accs * cfg.acc_cols > SM100A.tmem_columns and cfg.accs > 1:
        cfg = attrs.evolve(cfg, accs=cfg.accs - 1)
    while smem_bytes(cfg) > SM100A.max_dynamic_smem and cfg.stages > 2:
        cfg = attrs.evolve(cfg, stages=cfg.stages - 1)
    return cfg


class Sm100Gemm:
    """The program builder for one problem and configuration."""

    def __init__(self, problem: GemmProblem, cfg: Sm100Config) -> None:
        m, n, k, dtype, out_dtype = problem.M, problem.N, problem.K, problem.dtype, problem.out_dtype
        check_config(cfg)
        self.m, self.n, self.k = m, n, k
        self.dtype, self.out_dtype, self.cfg = dtype, out_dtype, cfg
        self.ep: Epilogue = problem.epilogue
        self.lda, self.ldb, self.ldc = problem.pitches
        self.pitched = problem.pitched
        self.a_major, self.b_major = problem.a_major, problem.b_major
        # an MN-major operand lands in boxes of 64 rows (one 128-byte swizzle span of M / N)
        if self.a_major == "MN" and (cfg.bm // 2) % MN_BOX_ROWS:
            raise WarpyError(f"A is MN-major: each CTA's {cfg.bm // 2} rows of A (bm/2) must be whole "
                             f"{MN_BOX_ROWS}-row boxes (bm 128 or 256)")
        if self.b_major == "MN" and cfg.pairs != 1:
            raise WarpyError("B is MN-major: its tile is not multicast in slices (pairs=1)")
        self.fused_at: dict[str, RVec] = {}  # the fused epilogue's inputs at the tile being stored
        if not self.ep.identity and (cfg.split > 1 or cfg.stream_k or cfg.tma_store):
            raise WarpyError("a fused epilogue runs on whole tiles stored from the registers on sm_100a: set "
                             "split=1, stream_k=false, tma_store=false")
        self.eb = dtype_bytes(dtype)
        self.oeb = dtype_bytes(out_dtype)
        # a cluster's tile: pairs x bm rows of C, 2 x cta_rows columns
        self.tile_m = cfg.pairs * cfg.bm
        self.tile_n = 2 * cfg.cta_rows
        self.mt, self.nt = cdiv(m, self.tile_m), cdiv(n, self.tile_n)
        self.tiles = self.mt * self.nt
        # K of a stage: one 128-byte swizzle row (BK 16-bit elements, 128 8-bit ones: UTCQMMA, kind::f8f6f4)
        self.bk = 128 // dtype_bytes(dtype)
        self.problem = problem
        self.b_dtype = problem.b_type  # B's type: A's, except for 8-bit floats (e4m3 x e5m2)
        self.kt = cdiv(k, self.bk)
        max_clusters = max(1, cfg.sms // cfg.cluster)
        self.clusters = min(max_clusters, self.tiles) if (cfg.persistent and not cfg.clc) else self.tiles
        if cfg.split > 1 or cfg.stream_k:
            self.clusters = max_clusters if cfg.stream_k else min(max_clusters, self.tiles * cfg.split)
        if cfg.split > self.kt:
            raise WarpyError(f"K split {cfg.split} ways is more than its {self.kt} blocks of {self.bk}")
        self.adds = cfg.split > 1 or cfg.stream_k  # partial sums meet in C, added in the L2
        if self.adds and out_dtype != "fp32":
            raise WarpyError(f"split-K / stream-K add fp32 partial sums in C; {out_dtype} output is not added in the L2")
        if (self.ldc * self.oeb) % 16 or not store_clips_exactly(n * self.oeb):
            if self.adds:
                raise WarpyError(f"C's rows are {n * self.oeb} bytes, not whole 16 bytes: no tensor map can add "
                                 f"into them (no split-K / stream-K)")
            # no tensor map can store rows that are not whole 16 bytes (a pitch TMA cannot take, or a
            # ragged row whose last 16 bytes a store would write whole, past its end): C leaves from
            # the registers
            self.cfg = cfg = attrs.evolve(cfg, tma_store=False)
        self.work = self.tiles * self.kt  # k blocks of all tiles (stream-K shares them out evenly over the clusters)
        if cfg.stream_k:
            self.clusters = min(max_clusters, self.work)
        self.nctas = self.clusters * cfg.cluster
        self.slice_rows = cfg.cta_rows // cfg.pairs  # rows of the Bᵀ tile each CTA of a cluster loads
        self.staged = self.adds or cfg.tma_store  # C leaves through staging tiles and the TMA
        self.alloc_cols = max(32, 1 << (cfg.accs * cfg.acc_cols - 1).bit_length())  # tensor memory, a power of 2

    @property
    def name(self) -> str:
        c = self.cfg
        tag = f"_c{c.pairs}" + ("_clc" if c.clc else "") + ("_ask" if c.ask_ahead else "") + \
            (f"_sk{c.split}" if c.split > 1 else "") + ("_stk" if c.stream_k else "") + \
            ("_pdll" if c.pdl == "last_load" else "") + ("_sp" if c.serpentine else "")
        return (f"gemm_sm100_{self.m}x{self.n}x{self.k}_{self.dtype}_{self.out_dtype}"
                f"_{c.bm}x{c.cta_rows}_s{c.stages}_a{c.accs}{tag}" + self.ep.tag()
                + ("_akm" if self.a_major == "MN" else "") + ("_bkn" if self.b_major == "MN" else "")
                + (f"_ld{self.lda}x{self.ldb}x{self.ldc}" if self.pitched else "") + gemm_fp8.tag(self.problem))

    # -- the program ---------------------------------------------------------------------------
    def build(self) -> Program:
        cfg = self.cfg
        # one CTA an SM (the ring fills shared memory): without a cap ptxas aims at 4 and spills at 64
        p = Program(self.name, SM100A.name, threads=256, grid=(self.clusters * cfg.cluster, 1, 1),
                    cluster=(cfg.cluster, 1, 1), maxnreg=MAXNREG)
        a_tile = smem_tile(cfg.bm // 2, self.bk, self.dtype, self.a_major, 128)
        bt_tile = smem_tile(cfg.cta_rows, self.bk, self.b_dtype, self.b_major, 128)
        # an operand in global memory: (row, k) -> element; MN-major: rows contiguous, K `pitch` apart
        a_glob = Layout((self.m, self.k), (self.lda, 1) if self.a_major == "K" else (1, self.lda))
        b_glob = Layout((self.n, self.k), (self.ldb, 1) if self.b_major == "K" else (1, self.ldb))
        ta = p.tmap("a", tma_box(a_glob, box_tile(a_tile)))
        tb = p.tmap("b", tma_box(b_glob, box_tile(bt_tile), multicast=cfg.pairs))  # the host binds a, b, c by name
        if cfg.pairs > 1:
            # each CTA's slice of the Bᵀ box: rows [p * slice_rows, ...) of the tile, at that row's bytes
            for s in tma_multicast_slices(b_glob, bt_tile, cfg.pairs):
                want_off = int(bt_tile.layout((s.cta * self.slice_rows, 0)))
                if s.smem_offset != want_off or s.coord_offset != (0, s.cta * self.slice_rows):
                    raise WarpyError(f"multicast slice {s} is not rows {s.cta * self.slice_rows}.. of the Bᵀ tile")
        # C: a pointer where the program stores with STG (from the registers; zeros for split-K /
        # stream-K), a tensor map where it leaves by TMA; a TMA-stored program's map is named c
        c: Optional[Param] = None
        if self.adds or not cfg.tma_store:
            c = p.param("c", "u64")
        staging: Optional[CStaging] = None
        if self.staged:
            # C leaves (or is added to in the L2) by TMA: a 32 x 32 box a warp and chunk, from the
            # warp's staging tile (32 rows of C's 32 columns, row-major)
            oeb = self.oeb
            tc = p.tmap("c_add" if self.adds else "c", tma_box_plain(self.m, self.n, self.out_dtype, self.ldc),
                        over="c" if self.adds else None)
            staging = CStaging(tc, p.smem("c_stage", Layout((4, 32, 32), (32 * 32 * oeb, 32 * oeb, oeb)), self.out_dtype))
        p.global_buffer("c_out", Layout((self.m, self.n), (self.ldc * self.oeb, self.oeb)), self.out_dtype, "c")
        aux: dict[str, Param] = {}
        for name in self.ep.params():  # the fused epilogue's inputs, of C's type
            aux[name] = p.param(name, "u64")
            n_el = (self.n if self.ep.bias == "n" else self.m) if name == "bias" else None
            lay = Layout(n_el, self.oeb) if n_el is not None else Layout((self.m, self.n), (self.n * self.oeb, self.oeb))
            p.global_buffer(f"{name}_in", lay, self.out_dtype, name)
        flags: Optional[Param] = None
        if self.adds:
            # the workspace, scratch memory the host owns (zero-filled once per kernel and stream,
            # never cleared again): one flag a tile, then one epoch word a CTA (zero once, never reset)
            flags, _ = p.scratch("flags", "flag_words", Layout(self.tiles + self.nctas, 4), "u32")
        sa = p.smem_ring("sa", cfg.stages, a_tile.layout, self.dtype)
        sbt = p.smem_ring("sbt", cfg.stages, bt_tile.layout, self.b_dtype)
        stage = p.pipe("stage", cfg.stages, fills=1, frees=cfg.pairs)
        accp = p.pipe("acc", cfg.accs, fills=1, frees=8)  # 4 epilogue warps in each CTA of the pair
        clc_: Optional[Scheduler] = None
        if cfg.clc:
            # the next tile: the CLC warp of each CTA arms its own stage (16 bytes), cluster rank 0 asks;
            # every consumer (producer, epilogue warps and the CLC warp of each CTA, each pair's MMA warp)
            # frees the stage in rank 0, whose answer lands in every CTA
            sched = p.pipe("sched", CLC_DEPTH, fills=1, frees=cfg.cluster * 6 + cfg.pairs)
            clc_ = Scheduler(sched, p.smem_words("clc_resp", CLC_DEPTH, "b128"))
        tmem_free = p.barriers("tmem_free", 1, count=1)
        tmem_slot = p.smem_words("tmem_slot", 1)
        alloc = self.alloc_cols
        acc = p.tmem("acc", Layout((cfg.accs, 128, cfg.acc_cols), (cfg.acc_cols, 1 << 16, 1)), alloc)
        init_barriers(p)

        # ranks: this CTA's in the cluster, its pair, its place in the pair, the pair's leader
        rank = p.ur("cta_rank")
        p.emit(alu.s2ur(rank, "SR_CgaCtaId"))
        in_pair = p.ur("in_pair")
        p.emit(alu.ulop3(in_pair, rank, 1, URZ, 0xC0))
        pair = p.ur("pair")
        p.emit(alu.ushf_r(pair, rank, 1))
        leader_rank = p.ur("leader_rank")
        p.emit(alu.ulop3(leader_rank, rank, 0xFFFFFFFE, URZ, 0xC0))
        is_leader = p.up("is_leader_cta")
        p.emit(alu.uisetp("EQ", is_leader, in_pair, 0))
        # the previous grid's writes are visible before any global access (on every path: here)
        p.emit(sync.acqbulk())
        if cfg.pdl == "entry":
            p.emit(sync.preexit())

        # warp 1 of each CTA allocates the pair's tensor memory; the cluster barrier orders the
        # allocation (and the barriers' initialisation) before any peer's MMA or remote arrival
        warp = p.warp_index()
        w1 = p.p("is_warp1")
        p.emit(alu.isetp("EQ", w1, warp, 1))
        with p.when(w1):
            p.derive.emit_at(tmem_slot.at(0), lambda a: tcgen05.tmem_alloc(a, alloc, True))
            p.emit(tcgen05.tmem_relinquish())
        p.emit(tcgen05.tc_fence_before())
        p.emit(sync.cluster_arrive())
        p.emit(sync.cluster_wait())
        p.emit(tcgen05.tc_fence_after())
        tmem_base = p.ur("tmem_base")  # read in the roles that use it (a short live range)
        p.derive.tmem_base = tmem_base
        res = Sm100Resources(ta=ta, tb=tb, c=c, staging=staging, flags=flags, sa=sa, sbt=sbt, stage=stage,
                             accp=accp, clc=clc_, tmem_free=tmem_free, tmem_slot=tmem_slot, acc=acc,
                             tmem_base=tmem_base, ranks=Ranks(rank, in_pair, pair, leader_rank, is_leader), aux=aux)

        with p.role("producer", range(0, 1)):
            self.producer(p, res)
        with p.role("mma", range(1, 2)):
            self.mma(p, res)
        if cfg.clc:
            with p.role("scheduler", range(2, 3)):
                self.scheduler(p, res)
        with p.role("epilogue", range(4, 8)):
            self.epilogue(p, res)
        p.emit(control.exit_())
        return p

    # -- the tile schedule ------------------------------------------------------------------------
    @contextlib.contextmanager
    def work_loop(self, p: Program, res: Sm100Resources) -> Iterator[Work]:
        """For each piece of work this cluster owns: a tile, and (split-K / stream-K) which k blocks
        of it and whether this cluster owns the tile's first k block."""
        cfg = self.cfg
        if not self.adds:
            with self.tile_loop(p, res) as t:
                yield Work(t, None, self.kt, None)
            return
        ctaid = p.r("ctaid")
        p.emit(alu.s2r(ctaid, "SR_CTAID.X"))
        cid = p.r("cluster_id")
        p.emit(alu.shf_r(cid, ctaid, cfg.cluster.bit_length() - 1))
        owner = p.p("owns_tile")
        if cfg.split > 1:
            t, k_lo, k_cnt, tmp = p.r("t"), p.r("k_lo"), p.r("k_cnt"), p.r("work_tmp")
            # cluster c: split s = c // tiles of tile c % tiles, k blocks [s kt / S, (s + 1) kt / S)
            s = self.divide(p, p.r("split_ix"), cid, self.tiles, self.clusters)
            p.emit(alu.imad(t, s, (1 << 32) - self.tiles, cid))
            p.emit(alu.imad(tmp, s, self.kt, RZ))
            self.divide(p, k_lo, tmp, cfg.split, cfg.split * self.kt)
            p.emit(alu.iadd3(tmp, tmp, self.kt))
            self.divide(p, k_cnt, tmp, cfg.split, cfg.split * self.kt)
            p.emit(alu.imad(k_cnt, k_lo, (1 << 32) - 1, k_cnt))
            p.emit(alu.isetp("EQ", owner, s, 0))
            yield Work(t, k_lo, k_cnt, owner)
            return
        # stream-K (kernels.schedule.StreamK): the cluster walks its iterations from the last tile
        # to the first, so a tile's first k block (whose owner zeroes the tile) comes first in its
        # owner's order and no owner waits for anyone
        with StreamK(self.tiles, self.kt, self.clusters).emit(p, cid) as seg:
            p.emit(alu.isetp("EQ", owner, seg.k_lo, 0))
            yield Work(seg.t, seg.k_lo, seg.k_cnt, owner)

    @contextlib.contextmanager
    def tile_loop(self, p: Program, res: Sm100Resources) -> Iterator[R]:
        """For each tile this cluster owns: yields the register holding the tile's number."""
        cfg = self.cfg
        ctaid = p.r("ctaid")
        p.emit(alu.s2r(ctaid, "SR_CTAID.X"))
        cid = p.r("cluster_id")
        p.emit(alu.shf_r(cid, ctaid, cfg.cluster.bit_length() - 1))
        if res.clc is not None:
            # the cluster's own tile first, then one answer of the scheduler a tile until it declines
            t = p.r("t")
            p.emit(alu.mov(t, cid))
            cons = res.clc.pipe.consumer("sched_c")
            leader = p.elect("sched_free_leader")
            top = p.fresh_label("TILE")
            p.label(top)
            yield t
            more = self.next_tile(p, res.clc, cons, leader)
            p.emit(alu.shf_r(t, R("next_cta"), cfg.cluster.bit_length() - 1))
            p.emit(control.bra(top).guarded(more))
            return
        with strided_tiles(p, cid, self.clusters, self.tiles) as t:
            yield t

    def next_tile(self, p: Program, clc_: Scheduler, cons: ConsumerEnd, leader: P) -> P:
        """Read the scheduler's next answer: `more_tiles` (a cluster was cancelled) and `next_cta` (its
        first CTA); free the answer's stage in cluster rank 0."""
        more = p.p("more_tiles")
        with cons.stage():
            cons.wait_full()
            resp = p.rvec("clc_answer", 4)
            p.derive.emit_at(clc_.resp.at(cons.ring), lambda a: memory.lds(resp, a))
            p.emit(clc.query_canceled(more, resp))
            p.emit(clc.query_ctaid_x(p.r("next_cta"), resp))
            rank0 = p.ur("rank0")
            p.emit(alu.umov(rank0, 0))
            cons.free_remote(rank0, leader)
        return more

    def scheduler(self, p: Program, res: Sm100Resources) -> None:
        """Warp 2: cluster rank 0 asks for the next tile (`UGETNEXTWORKID.BROADCAST`: the answer lands
        in every CTA of the cluster, 16 bytes on each CTA's stage barrier, which its own CLC warp arms),
        one stage ahead of the answer it reads itself; it stops asking once an answer declines."""
        assert res.clc is not None
        first = p.up("is_rank0")
        p.emit(alu.uisetp("EQ", first, res.ranks.rank, 0))
        leader = p.elect("sched_leader")
        prod = res.clc.pipe.producer("sched_p")
        cons = res.clc.pipe.consumer("sched_c")
        top = p.fresh_label("ASK")
        p.label(top)
        with prod.stage():
            with p.when(first):
                prod.wait_empty()
            prod.arrive_full(leader, tx_bytes=16)
            resp = res.clc.resp.at(prod.ring)
            rreg, roff = p.derive.value_reg("addr", resp)
            breg, boff = p.derive.value_reg("addr", prod.full)
            ask = clc.try_cancel(Mem(rreg, offset=roff), Mem(breg, offset=boff), multicast=True)
            p.emit(ask.noted(resp.note("addr", 0)).noted(prod.full.note("addr", 1)).guarded(first))
        more = self.next_tile(p, res.clc, cons, leader)
        p.emit(control.bra(top).guarded(more))
        # rank 0 leaves only once every CTA's consumers have freed the last answer (remote arrivals)
        with p.when(first):
            with p.loop("sched_drain", CLC_DEPTH):
                with prod.stage():
                    prod.wait_empty()

    def tile_origin(self, p: Program, t: R) -> tuple[R, R]:
        """(m_blk, n_blk) of cluster tile number t: grouped order (`group` M-blocks share a sweep
        over N), each group column walked downwards, or alternately up and down (serpentine)."""
        return TileOrder(self.mt, self.nt, self.cfg.group, self.cfg.serpentine).emit(p, t)

    def divide(self, p: Program, q: R, x: R, d: int, x_max: int = 0) -> R:
        """q = x // d for 0 <= x <= x_max (default: the tile count)."""
        return divide(p, q, x, d, max(x_max, self.tiles))

    # -- producer ---------------------------------------------------------------------------------
    def producer(self, p: Program, res: Sm100Resources) -> None:
        cfg = self.cfg
        ranks = res.ranks
        leader = p.elect()
        arms = p.p("arms_full")  # the elected lane of the pair's leader arms the stage's barrier
        lead_r = p.r("in_pair_r")
        p.emit(alu.mov(lead_r, ranks.in_pair))
        p.emit(alu.isetp("EQ", arms, lead_r, 0, c=leader))
        mask: Optional[UR] = None
        slice_ix: Optional[Uniform] = None
        if cfg.pairs > 1:
            # the CTAs of this CTA's place in the pair, one in each pair of the cluster
            mask = p.ur("bt_mask")
            p.emit(alu.umov(mask, (0x55 & ((1 << cfg.cluster) - 1))))
            p.emit(alu.ushf_l(mask, mask, ranks.in_pair))
            slice_ix = Uniform("bt_slice", ranks.pair, cfg.pairs)
        out = res.stage.producer("ps")
        tx = (cfg.bm + 2 * cfg.cta_rows) * self.bk * self.eb  # both CTAs' A halves and Bᵀ tiles
        a_row, bt_row = p.ur("a_row"), p.ur("bt_row")
        with self.work_loop(p, res) as w:
            m_blk, n_blk = self.tile_origin(p, w.t)
            r = p.r("row_tmp")
            # A: rows m_blk * tile_m + pair * bm + in_pair * bm/2
            p.emit(alu.imad(r, m_blk, self.tile_m, RZ))
            p.emit(alu.r2ur(a_row, r))
            p.emit(alu.uimad(a_row, ranks.rank, cfg.bm // 2, a_row))
            # Bᵀ: rows n_blk * tile_n + in_pair * cta_rows (+ this CTA's slice)
            p.emit(alu.imad(r, n_blk, self.tile_n, RZ))
            p.emit(alu.r2ur(bt_row, r))
            p.emit(alu.uimad(bt_row, ranks.in_pair, cfg.cta_rows, bt_row))
            if cfg.pairs > 1:
                p.emit(alu.uimad(bt_row, ranks.pair, self.slice_rows, bt_row))
            with p.loop("k", w.k_cnt, max_count=self.kt) as k:
                with out.stage():
                    out.wait_empty()
                    out.arrive_full(arms, tx_bytes=tx)
                    kc: Union[Ix, R] = k * self.bk
                    if w.k_lo is not None:  # this piece's k blocks start at k_lo
                        kc = p.r("k_elem")
                        p.emit(alu.iadd3(kc, k.reg, w.k_lo))
                        p.emit(alu.imad(kc, kc, self.bk, RZ))
                    if self.a_major == "K":
                        tma_load(p, out.slot(res.sa), res.ta, [kc, a_row], out.full, two_cta=True,
                                 bar_rank=ranks.leader_rank)
                    else:  # 64-row boxes, M innermost
                        for j, row in mn_rows(p, a_row, cfg.bm // 2, "a_row"):
                            tma_load(p, out.slot(res.sa, j, 0), res.ta, [row, kc], out.full, two_cta=True,
                                     bar_rank=ranks.leader_rank)
                    if self.b_major == "K":
                        dst = (out.slot(res.sbt, slice_ix * self.slice_rows, 0) if slice_ix is not None
                               else out.slot(res.sbt))
                        tma_load(p, dst, res.tb, [kc, bt_row], out.full, mask=mask, two_cta=True,
                                 bar_rank=ranks.leader_rank)
                    else:  # 64-row boxes, N innermost (one pair a cluster: no slices)
                        for j, row in mn_rows(p, bt_row, cfg.cta_rows, "bt_row"):
                            tma_load(p, out.slot(res.sbt, j, 0), res.tb, [row, kc], out.full, two_cta=True,
                                     bar_rank=ranks.leader_rank)
        if cfg.pdl == "last_load":
            p.emit(sync.preexit())
        # drain: every stage freed by every pair's MMAs (their commits land in this CTA's barriers)
        with p.loop("drain", cfg.stages):
            with out.stage():
                out.wait_empty()

    # -- MMA --------------------------------------------------------------------------------------
    def read_tmem_base(self, p: Program, res: Sm100Resources) -> None:
        """The allocation's address, from the slot warp 1 wrote before the cluster barrier."""
        tword = p.r("tmem_word")
        p.derive.emit_at(res.tmem_slot.at(0), lambda a: memory.lds(tword, a))
        p.emit(alu.r2ur(res.tmem_base, tword))

    def mma(self, p: Program, res: Sm100Resources) -> None:
        cfg = self.cfg
        ranks = res.ranks
        self.read_tmem_base(p, res)
        # SwapAB: the MMA's A is the Bᵀ tile, its B the A tile (their majors likewise)
        idesc = umma_idesc(self.b_dtype, self.dtype, "f32", cfg.mma_m, cfg.bm, self.b_major, self.a_major, cta_group=2)
        done = p.fresh_label("MMA_DONE")
        p.emit(control.bra_u(~ranks.is_leader, done))
        mask_all, mask_pair = p.ur("mask_all"), p.ur("mask_pair")
        p.emit(alu.umov(mask_all, (1 << cfg.cluster) - 1))
        p.emit(alu.umov(mask_pair, 0b11))
        p.emit(alu.ushf_l(mask_pair, mask_pair, ranks.rank))  # the leader's rank is even
        first, accumulate = p.ur("first"), p.up("accumulate")
        acc_out = res.accp.producer("acc_p")
        inp = res.stage.consumer("cs")
        # asking a stage ahead: after each stage, test the next one's full barrier (the stage the next
        # wait is for, this tile's or the next tile's: the ring runs on across tiles, and a phase seen
        # complete stays complete until this warp frees the stage), and skip that wait if it landed
        probe = p.p("probe") if cfg.ask_ahead else None
        if probe is not None:
            p.emit(alu.pset(probe, False))
        with self.work_loop(p, res) as w:
            with acc_out.stage():
                acc_out.wait_empty()
                p.emit(tcgen05.tc_fence_after())
                p.emit(alu.umov(first, 0))
                with p.loop("k", w.k_cnt, max_count=self.kt):
                    with inp.stage(probe=probe):
                        p.emit(alu.uisetp("NE", accumulate, first, URZ))
                        inp.wait_full()
                        p.emit(tcgen05.tc_fence_after())
                        for rep in range(cfg.reps):
                            ks = 32 // self.eb  # K of one MMA: 32 bytes (16 16-bit elements, 32 8-bit)
                            for j in range(self.bk // ks):
                                utchmma(p, inp.slot(res.sbt, 128 * rep, ks * j), inp.slot(res.sa, 0, ks * j),
                                        res.acc.at(acc_out.ring, 0, rep * cfg.bm), idesc,
                                        accumulate if j == 0 else True, two_cta=True)
                        p.emit(alu.umov(first, 1))
                        inp.free_commit(mask_all, two_cta=True)
                p.derive.emit_at(acc_out.full, lambda b: tcgen05.utcbar(b, mask_pair, True))
        # drain: every accumulator read by both CTAs' epilogues; then the peer may free its columns
        with p.loop("acc_drain", cfg.accs):
            with acc_out.stage():
                acc_out.wait_empty()
        peer = p.ur("peer_rank")
        p.emit(alu.uiadd3(peer, ranks.rank, 1))
        lane = p.elect("free_leader")
        fb = p.ur("tmem_free_peer")
        p.derive.into(fb, "addr", res.tmem_free.at(0))
        p.emit(alu.mapa(fb, peer, fb))
        p.emit(sync.arrive_remote(Mem(fb)).guarded(lane))
        p.label(done)
        # the non-leader frees its columns once the leader says every MMA and load is done
        skip = p.fresh_label("FREE_OWN")
        p.emit(control.bra_u(ranks.is_leader, skip))
        zero = p.r("phase0")
        p.emit(alu.mov(zero, 0))
        wait(p, res.tmem_free.at(0), zero)
        p.label(skip)
        p.emit(tcgen05.tc_fence_after())
        p.emit(tcgen05.tmem_dealloc(res.tmem_base, self.alloc_cols, True))

    # -- epilogue ---------------------------------------------------------------------------------
    def epilogue(self, p: Program, res: Sm100Resources) -> None:
        cfg = self.cfg
        self.read_tmem_base(p, res)
        warp = p.warp_index()
        tid = p.r("tid")
        q = p.r("quarter")  # the warp's tensor-memory sub-partition: lanes 32q..32q+31
        p.emit(alu.lop3(q, warp, 3, RZ, 0xC0))
        lane = p.r("lane")
        p.emit(alu.lop3(lane, tid, 31, RZ, 0xC0))
        wl = p.r("warp_lane0")  # 32q: the warp's first tensor-memory lane
        p.emit(alu.shf_l(wl, q, 5))
        # M = 128 pairs fold the accumulator's N over the lane halves: lanes 64.. hold rows bm/2.. of
        # C's block at the same tensor-memory columns (warpy.layout.atoms.tmem_accumulator)
        wc = p.r("warp_col0")
        row_in = p.r("row_in")  # this thread's column of C within the CTA's block (lane of the atom)
        if cfg.cta_rows == 64:
            half = p.r("half")
            p.emit(alu.shf_r(half, q, 1))
            p.emit(alu.imad(wc, half, cfg.bm // 2, RZ))
            p.emit(alu.lop3(row_in, wl, 32, RZ, 0xC0))
            p.emit(alu.iadd3(row_in, row_in, lane))
            ncols = cfg.bm // 2
        else:
            p.emit(alu.mov(wc, 0))
            p.emit(alu.iadd3(row_in, wl, lane))
            ncols = cfg.bm
        wofs = p.r("tmem_warp_ofs")
        p.emit(alu.shf_l(wofs, wl, 16))  # lanes are the high half of a tensor-memory address
        uwofs = p.ur("tmem_warp")
        p.emit(alu.r2ur(uwofs, wofs))
        wl_ix = Lane("warp_lane0", wl, 128)
        cptr = p.rvec("c_ptr", 2)
        if res.c is not None:
            p.emit(alu.ldc(cptr, res.c.cbank()))
        md = p.urvec("memdesc", 2)
        p.emit(alu.uldc(md, MEMDESC, p.sm))
        prank = p.r("rank_r")
        p.emit(alu.mov(prank, res.ranks.rank))
        inp = res.accp.consumer("acc_c")
        v = p.rvec("v", 32)
        taddr = p.ur("taddr")
        free_lane = p.elect("acc_free_leader")
        epoch: Optional[Epoch] = None
        staging: Optional[StagingIndex] = None
        if self.adds:
            epoch = self.read_epoch(p, res, md)
        if self.staged:
            staging = self.staging_index(p, q, lane)
        e = EpilogueThread(lane, wl_ix, uwofs, taddr, v, md, cptr, ncols, staging, epoch)
        with self.work_loop(p, res) as w:
            m_blk, n_blk = self.tile_origin(p, w.t)
            mrow, ncol = p.r("m_row0"), p.r("n_col0")
            # C rows of accumulator column wc: m_blk * tile_m + pair * bm + wc (rank >> 1 = pair)
            p.emit(alu.shf_r(mrow, prank, 1))
            p.emit(alu.imad(mrow, mrow, cfg.bm, wc))
            p.emit(alu.imad(mrow, m_blk, self.tile_m, mrow))
            # C column: n_blk * tile_n + in_pair * cta_rows + row_in
            p.emit(alu.lop3(ncol, prank, 1, RZ, 0xC0))
            p.emit(alu.imad(ncol, ncol, cfg.cta_rows, row_in))
            p.emit(alu.imad(ncol, n_blk, self.tile_n, ncol))
            tile = OutTile(w.t, m_blk, n_blk, mrow, ncol)
            if self.adds:
                assert w.owner is not None
                with p.when(w.owner):
                    self.zero_block(p, e, tile)
            with inp.stage():
                inp.wait_full()
                p.emit(tcgen05.tc_fence_after())
                base, off = p.derive.value_reg("addr", res.acc.at(inp.ring, 0, 0))

                def free_acc() -> None:
                    # the last LDTM has completed: the tensor core may refill this accumulator
                    p.emit(tcgen05.tc_fence_before())
                    inp.free_remote(res.ranks.leader_rank, free_lane)

                read = AccRead(res.acc, inp.ring, base, off, free_acc)
                if self.staged:
                    self.add_tile(p, res, e, tile, read)
                else:
                    self.store_tile(p, e, tile, read, res.aux)
        if epoch is not None:
            # this CTA's launches, counted: the next launch's flags are one past this one's
            done = p.p("epoch_writer")
            p.emit(alu.isetp("EQ", done, q, 0, c=free_lane))
            nxt = p.r("epoch_next")
            p.emit(alu.iadd3(nxt, epoch.value, 1))
            p.emit(memory.stg(GMem(md, epoch.addr), nxt).guarded(done))

    # -- adding partial sums in the L2 (split-K, stream-K) --------------------------------------------
    def read_epoch(self, p: Program, res: Sm100Resources, md: URVec) -> Epoch:
        """Read this CTA's epoch (how many launches it has run) and agree on it before any warp of
        the epilogue can write it back."""
        assert res.flags is not None
        fptr = p.rvec("flags_ptr", 2)
        p.emit(alu.ldc(fptr, res.flags.cbank()))
        ctaid = p.r("ctaid_e")
        p.emit(alu.s2r(ctaid, "SR_CTAID.X"))
        ea = p.rvec("epoch_addr", 2)
        p.emit(alu.iadd3(ctaid, ctaid, self.tiles))
        p.emit(alu.imad_wide(ea, ctaid, 4, fptr))
        e = p.r("epoch")
        p.emit(memory.ldg(e, GMem(md, ea)))
        p.emit(sync.bar_sync(1, 128))  # every epilogue warp has read it before warp 4 may write it
        target = p.r("flag_target")  # 4 warps x 2 CTAs zero a tile and raise its flag once a launch
        p.emit(alu.imad(target, e, 8, 8))
        return Epoch(fptr, ea, e, target)

    def staging_index(self, p: Program, q: R, lane: R) -> StagingIndex:
        """The warp's staging tile (per-CTA index: the warp's quarter) and the thread's column in it."""
        uq = p.ur("quarter_u")
        p.emit(alu.r2ur(uq, q))
        return StagingIndex(Uniform("quarter", uq, 4), Lane("lane", lane, 32))

    def flag_addr(self, p: Program, epoch: Epoch, t: R) -> RVec:
        fa = p.rvec("flag_addr", 2)
        p.emit(alu.imad_wide(fa, t, 4, epoch.flags_ptr))
        return fa

    def zero_block(self, p: Program, e: EpilogueThread, tile: OutTile) -> None:
        """The tile's first k block is this cluster's: zero this CTA's block of C (guarded at the
        edges), make the writes visible to the copy engine, and raise the tile's flag (one per warp)."""
        assert e.epoch is not None
        self.store_tile(p, e, tile, None)
        p.emit(sync.fence_proxy_async_global())
        p.emit(control.warpsync_all())
        raiser = p.elect("flag_raiser")
        fa = self.flag_addr(p, e.epoch, tile.t)
        one = p.r("one")
        p.emit(alu.mov(one, 1))
        with p.when(raiser):
            p.emit(sync.membar("GPU"))  # release: the warp's zeros before the flag
            p.emit(memory.red_add(GMem(e.md, fa), one))

    def add_tile(self, p: Program, res: Sm100Resources, e: EpilogueThread, tile: OutTile, read: AccRead) -> None:
        """Wait until the tile's owner has zeroed it (split-K / stream-K), then add the accumulator
        into C, or store it there: each 32 x 32 chunk from tensor memory into the warp's staging
        tile, then a TMA reduce-add (UTMAREDG.ADD) or store."""
        cfg = self.cfg
        md = e.md
        assert res.staging is not None and e.staging is not None
        stage_c, tc = res.staging.tiles, res.staging.tmap
        quarter, lane_ix = e.staging.quarter, e.staging.lane
        if e.epoch is not None:
            fa = self.flag_addr(p, e.epoch, tile.t)
            flag, up = p.r("flag"), p.p("flag_up")
            spin = p.fresh_label("FLAG")
            p.label(spin)
            p.emit(memory.ldg_strong(flag, GMem(md, fa)))
            p.emit(alu.isetp("EQ", up, flag, e.epoch.flag_target))
            p.emit(control.bra(spin).guarded(~up))
            p.emit(sync.membar("GPU"))  # acquire: the owner's zeros before the adds
            p.emit(sync.fence_proxy_async_global())
        oeb = self.oeb
        packed, hi = p.r("packed"), p.r("hi_half")
        kind = "BF16" if self.out_dtype == "bf16" else "F16"
        nw, mw = p.r("n_warp0"), p.r("m_chunk0")
        p.emit(alu.imad(nw, e.lane, (1 << 32) - 1, tile.ncol))  # the warp's first column of C
        st_reg, st_off = p.derive.lane_value("addr", stage_c.at(quarter, 0, lane_ix))
        chunks = [(rep, chunk) for rep in range(cfg.reps) for chunk in range(e.ncols // 32)]
        for rep, chunk in chunks:
            col = rep * cfg.bm + 32 * chunk
            ref = read.acc.at(read.ring, e.wl_ix, col)
            p.emit(alu.uiadd3(e.taddr, read.base, e.uwofs, read.off + col).noted(ref.note("addr")), mark="+")
            p.emit(tcgen05.ldtm(e.v, e.taddr))
            p.emit(tcgen05.tmem_wait_ld())
            if (rep, chunk) == chunks[-1]:
                read.on_last_load()
            p.emit(tma.bulk_wait(0))  # the last chunk's copy has read the staging tile
            for i in range(32):
                at = stage_c.at(quarter, i, lane_ix)
                sts_at = Mem(st_reg, offset=st_off + 32 * oeb * i)
                if oeb == 4:
                    p.emit(memory.sts(sts_at, e.v[i]).noted(at.note("addr", 0)))
                    continue
                if i % 2 == 0:
                    p.emit(ins(alu.F2FP, f"{kind}.F32.PACK_AB", packed, e.v[i + 1], e.v[i]))
                    p.emit(ins(memory.STS, "U16", sts_at, packed).noted(at.note("addr", 0)))
                else:
                    p.emit(alu.shf_r(hi, packed, 16))
                    p.emit(ins(memory.STS, "U16", sts_at, hi).noted(at.note("addr", 0)))
            p.emit(sync.fence_proxy_async())  # the staging writes, visible to the copy engine
            p.emit(control.warpsync_all())
            ncrd = p.r("n_crd")
            p.emit(alu.iadd3(ncrd, nw, 128 * rep))
            p.emit(alu.iadd3(mw, tile.mrow, 32 * chunk))
            tma_store(p, stage_c.at(quarter, 0, 0), tc, [ncrd, mw], reduce_add=self.adds)
            p.emit(tma.bulk_commit())
        p.emit(tma.bulk_wait(0))

    def store_tile(self, p: Program, e: EpilogueThread, tile: OutTile, read: Optional[AccRead],
                   aux: Optional[dict[str, Param]] = None) -> None:
        """Store the accumulator `read` (None: zeros) as this thread's column of C: rows mrow.., column
        ncol; with a fused epilogue, through it (`aux`: its inputs' parameters)."""
        ragged = bool(self.m % self.tile_m or self.n % self.tile_n)
        tile_addr = p.rvec("c_tile", 2)
        p.emit(alu.imad_wide(tile_addr, tile.mrow, self.ldc * self.oeb, e.cptr))
        p.emit(alu.imad_wide(tile_addr, tile.ncol, self.oeb, tile_addr))
        self.fused_at = {}
        if read is not None and not self.ep.identity:
            assert aux is not None
            for name, prm in aux.items():  # this thread's first element of each input
                ptr = p.rvec(f"ep_{name}_tile", 2)
                p.emit(alu.ldc(ptr, prm.cbank()))
                if name == "bias":
                    p.emit(alu.imad_wide(ptr, tile.ncol if self.ep.bias == "n" else tile.mrow, self.oeb, ptr))
                else:
                    p.emit(alu.imad_wide(ptr, tile.mrow, self.n * self.oeb, ptr))
                    p.emit(alu.imad_wide(ptr, tile.ncol, self.oeb, ptr))
                self.fused_at[name] = ptr
        inside: Optional[P] = None
        if ragged:
            # the same for the whole warp (LDTM is warp-collective): is the cluster's tile inside C?
            inside = p.p("tile_inside")
            p.emit(alu.isetp("LT", inside, tile.m_blk, self.m // self.tile_m))
            p.emit(alu.isetp("LT", inside, tile.n_blk, self.n // self.tile_n, c=inside))
        edge = p.fresh_label("EDGE_TILE") if ragged else None
        stored = p.fresh_label("STORED") if ragged else None
        if ragged:
            assert inside is not None and edge is not None
            p.emit(control.bra(edge).guarded(~inside))
        self._stores(p, e, tile, read, tile_addr, False)
        if ragged:
            assert stored is not None and edge is not None
            p.emit(control.bra(stored))
            p.label(edge)
            self._stores(p, e, tile, read, tile_addr, True)
            p.label(stored)

    def _stores(self, p: Program, e: EpilogueThread, tile: OutTile, read: Optional[AccRead], tile_addr: RVec,
                guarded: bool) -> None:
        cfg, oeb = self.cfg, self.oeb
        md, v, ncols = e.md, e.v, e.ncols
        caddr = p.rvec("c_addr", 2)
        cofs = p.r("c_ofs")
        packed, hi = p.r("packed"), p.r("hi_half")
        reps = [rep for rep in range(cfg.reps) if not guarded or self.n - 128 * rep > 0]
        for rep in reps:
            n_ok: Optional[P] = None
            if guarded:
                n_ok = p.p("n_ok")
                p.emit(alu.isetp("LT", n_ok, tile.ncol, self.n - 128 * rep))
            for chunk in range(ncols // 32):
                col = rep * cfg.bm + 32 * chunk
                if read is not None:
                    ref = read.acc.at(read.ring, e.wl_ix, col)
                    p.emit(alu.uiadd3(e.taddr, read.base, e.uwofs, read.off + col).noted(ref.note("addr")), mark="+")
                    p.emit(tcgen05.ldtm(v, e.taddr))
                    p.emit(tcgen05.tmem_wait_ld())
                    if rep == reps[-1] and chunk == ncols // 32 - 1:
                        read.on_last_load()
                p.emit(alu.mov(cofs, 32 * chunk * self.ldc * oeb + 128 * rep * oeb))
                p.emit(alu.imad_wide(caddr, cofs, 1, tile_addr))
                if read is not None and self.fused_at:
                    self.fused(p, e, tile, rep, chunk, cofs, n_ok, guarded)
                for i in range(32):
                    ok: Optional[P] = None
                    if guarded:
                        bound = self.m - 32 * chunk - i
                        if bound <= 0:
                            break
                        ok = p.p("st_ok")
                        assert n_ok is not None
                        p.emit(alu.isetp("LT", ok, tile.mrow, bound, c=n_ok))
                    g = GMem(md, caddr, i * self.ldc * oeb)
                    if read is None:
                        p.emit(memory.stg(g, RZ).guarded(ok))
                        continue
                    if self.out_dtype == "fp32":
                        p.emit(memory.stg(g, v[i]).guarded(ok))
                        continue
                    kind = "BF16" if self.out_dtype == "bf16" else "F16"
                    if i % 2 == 0:
                        p.emit(ins(alu.F2FP, f"{kind}.F32.PACK_AB", packed, v[i + 1], v[i]))
                        p.emit(ins(memory.STG, "E.U16", g, packed).guarded(ok))
                    else:
                        p.emit(alu.shf_r(hi, packed, 16))
                        p.emit(ins(memory.STG, "E.U16", g, hi).guarded(ok))


    def fused(self, p: Program, e: EpilogueThread, tile: OutTile, rep: int, chunk: int, cofs: R,
              n_ok: Optional[P], guarded: bool) -> None:
        """The fused epilogue on the 32 values of a chunk (kernels/gemm_epilogue.py): value i is C's
        row mrow + 32 chunk + i in this thread's column ncol + 128 rep; the inputs are read at the
        elements the stores write (a warp's lanes: 32 consecutive columns of one row), guarded like
        them on ragged tiles (an element past C's edges reads 0 and is not stored)."""
        ep, oeb, od = self.ep, self.oeb, self.out_dtype
        k = emit_consts(p, ep)
        at: dict[str, RVec] = {}
        if "c_in" in self.fused_at or "residual" in self.fused_at:  # dense rows of N (C's may be wider: ldc)
            aofs = p.r("ep_aux_ofs")
            p.emit(alu.mov(aofs, 32 * chunk * self.n * oeb + 128 * rep * oeb))
        for name in ("c_in", "residual"):
            if name in self.fused_at:
                a = at[name] = p.rvec(f"ep_{name}_at", 2)
                p.emit(alu.imad_wide(a, aofs, 1, self.fused_at[name]))
        bias_n: Optional[F32] = None
        if ep.bias == "n":
            bias_n = F32.of(p.r("ep_bias_col"))
            emit_load(p, e.md, self.fused_at["bias"], 128 * rep * oeb, od, (bias_n,), (n_ok,), False)
        for i in range(32):
            ok: Optional[P] = None
            if guarded:
                bound = self.m - 32 * chunk - i
                if bound <= 0:
                    break
                ok = p.p("ep_ok")
                assert n_ok is not None
                p.emit(alu.isetp("LT", ok, tile.mrow, bound, c=n_ok))
            vals: dict[str, F32] = {}
            for name, a in at.items():
                x = vals[name] = F32.of(p.r(f"ep_{name}_v"))
                emit_load(p, e.md, a, i * self.n * oeb, od, (x,), (ok,), False)
            bias = bias_n
            if ep.bias == "m":
                bias = F32.of(p.r("ep_bias_row"))
                emit_load(p, e.md, self.fused_at["bias"], (32 * chunk + i) * oeb, od, (bias,), (ok,), False)
            emit_element(p, ep, k, F32.of(e.v[i]), vals.get("c_in"), bias, vals.get("residual"))


def choose_sm100(m: int, n: int, k: int, sms: int = SM100A.sms, out_dtype: str = "fp32") -> Sm100Config:
    """The configuration for a shape on a B200 (148 SMs: 74 CTA pairs): the reference table of B200
    configurations at its 11 shapes (docs/blackwell.md) and the same rule elsewhere:

    - long K (K >= 4 max(M, N), fp32 out): the tiles cannot fill the machine, so K is split. Very long K with
      few 256 x 512 pair tiles: 256 x 256 a CTA, K split over the grid (as many ways as pairs per
      tile, at least 8 k blocks each); otherwise stream-K with 256 x 128 a CTA;
    - small (max(M, N) <= 1024): 128 x 64 a CTA (M = 128 pair MMAs), a deep ring of 13, asking ahead;
      up to 1536: 128 x 128, ring 6, the next grid let in after the last load;
    - up to 2048 x 2048 outputs: 128 x 128, ring 8, two accumulators; a fixed grid walking the
      tiles by stride in groups of 16, or, for tall C (M >= 2N), 2 x 4 clusters sharing Bᵀ with
      cluster launch control;
    - short K (K <= min(M, N) / 4): 256 x 128, ring 5, two accumulators, persistent;
    - up to 4096 x 4096 outputs: 192 x 128, ring 7, two accumulators, cluster launch control;
    - larger: 256 x 256 (two stacked pair MMAs), ring 4, cluster launch control in serpentine order,
      asking a stage ahead."""
    cfg = _choose_sm100(m, n, k, sms, out_dtype)
    if not store_clips_exactly(n * dtype_bytes(out_dtype)):
        # a tensor map's rows are whole 16 bytes: C leaves from the registers, K is not split
        if cfg.split > 1 or cfg.stream_k:
            cfg = _choose_sm100(m, n, k, sms, "bf16")
        cfg = attrs.evolve(cfg, tma_store=False)
    return cfg


def _choose_sm100(m: int, n: int, k: int, sms: int, out_dtype: str) -> Sm100Config:
    big = max(m, n)
    kt = cdiv(k, BK)
    pairs = sms // 2
    small_m = m <= 64
    if k >= 4 * big and kt >= 16 and out_dtype == "fp32":
        t256 = cdiv(m, 256) * cdiv(n, 512)
        if k >= 32 * big and t256 * 2 <= pairs:
            split = max(2, min(pairs // t256, kt // 8))
            return Sm100Config(bm=256, cta_rows=256, stages=4, accs=1, ask_ahead=True, split=split, sms=sms)
        return Sm100Config(bm=256, cta_rows=128, stages=6, accs=2, ask_ahead=True, stream_k=True, sms=sms)
    if small_m:
        return Sm100Config(bm=64, cta_rows=128, stages=8, accs=2, group=8, sms=sms)
    if big <= 1024:
        return Sm100Config(bm=128, cta_rows=64, stages=13, accs=1, persistent=False, ask_ahead=True,
                           tma_store=False, sms=sms)
    if big <= 1536:
        return Sm100Config(bm=128, cta_rows=128, stages=6, accs=1, persistent=False, pdl="last_load",
                           tma_store=False, sms=sms)
    if m * n <= 2048 * 2048:
        if m >= 2 * n:
            return Sm100Config(bm=128, cta_rows=128, stages=8, accs=2, pairs=4, clc=True, pdl="last_load", sms=sms)
        return Sm100Config(bm=128, cta_rows=128, stages=8, accs=2, group=16, sms=sms)
    if 4 * k <= min(m, n):
        return Sm100Config(bm=256, cta_rows=128, stages=5, accs=2, pdl="last_load", sms=sms)
    if m * n <= 4096 * 4096:
        return Sm100Config(bm=192, cta_rows=128, stages=7, accs=2, clc=True, sms=sms)
    return Sm100Config(bm=256, cta_rows=256, stages=4, accs=1, clc=True, ask_ahead=True, serpentine=True, sms=sms)

