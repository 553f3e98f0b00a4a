"""Which GEMM program runs a problem: the problem, the rule that picks a configuration from its
shape, and the builder. `warpy gemm`, `warpy bench` and `warpy.gemm` all go through here.

C = A · Bᵀ with A (M x K) and B (N x K), each K-major (row-major with K contiguous) or MN-major (A
stored K x M, B K x N: `a_major` / `b_major`), fp16 or bf16 in, fp32 accumulation, C
(M x N) row-major in fp32 or the input type. On sm_90a A and B may be 8-bit floats (e4m3 / e5m2, each
its own: `b_dtype`), K-major, with per-tensor or per-row / per-column scales (kernels/gemm_fp8.py).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence, Union

import attrs
import numpy as np

from .gemm_epilogue import AUX_PARAMS, Epilogue, parse_words, reference
from . import gemm_fp8
from .gemm_sm90 import MAX_CLUSTER_K, Sm90Config, Sm90Gemm, cluster_refusal, even_slices, resident_clusters, smem_bytes
from .gemm_sm100 import Sm100Config, Sm100Gemm, choose_sm100, for_majors
from .family import checked_overrides
from .schedule import cdiv
from warpy.check.expect import Verdict
from warpy.errors import WarpyError
from warpy.isa.program import Program
from warpy.layout.tma import TmaBox, store_clips_exactly
from warpy.numeric import bits16, from_bits, output_spacing, round_to, small_ints
from warpy.target import SM90A, dtype, dtype_bytes, target

#: the element types warpy's GEMM programs take (A and B) and give (C), canonical names
IN_DTYPES = ("bf16", "fp16") + gemm_fp8.FP8_DTYPES
OUT_DTYPES = ("fp32", "bf16", "fp16")

Config = Union[Sm90Config, Sm100Config]

def _type_in(value: str, allowed: tuple[str, ...], what: str) -> str:
    try:
        name = dtype(value).name
    except Exception:
        name = ""
    if name not in allowed:
        raise WarpyError(f"{what} type {value!r} is not one of {', '.join(allowed)}")
    return name


def input_type(value: str) -> str:
    """The canonical name of a GEMM input type (A, B), refusing others in one line naming the spelling given."""
    return _type_in(value, IN_DTYPES, "input")


def output_type(value: str) -> str:
    """The canonical name of a GEMM output type (C), refusing others in one line naming the spelling given."""
    return _type_in(value, OUT_DTYPES, "output")


def _b_type(value: str) -> str:
    return "" if value == "" else input_type(value)


def _target_name(value: str) -> str:
    return target(value).name


@attrs.frozen
class GemmProblem:
    """One GEMM: shapes, types and target. Anything warpy cannot run is refused in one line."""

    M: int
    N: int
    K: int
    dtype: str = attrs.field(default="bf16", converter=input_type)
    out_dtype: str = attrs.field(default="fp32", converter=output_type)
    arch: str = attrs.field(default="sm_90a", converter=_target_name)
    epilogue: Epilogue = attrs.field(factory=Epilogue)  # fused after the MMAs (kernels/gemm_epilogue.py)
    # row pitches in elements of A, B (rows of K) and C (rows of N); 0: dense (K, K, N). A pitch
    # wider than the row reads a slice of a wider matrix (x[:, :K]) in place
    lda: int = 0
    ldb: int = 0
    ldc: int = 0
    # a batch of GEMMs in one launch (C[i] = A[i]·B[i]ᵀ): their count and the strides between the
    # matrices of A, B and C in elements (0: the matrices one after another); sm_90a whole tiles only
    batch: int = 1
    stride_a: int = 0
    stride_b: int = 0
    stride_c: int = 0
    # the operands' majors: "K" (A M x K, B N x K, K contiguous) or "MN" (A stored K x M, B K x N, M / N
    # contiguous: read in place, transposed by the MMA). A pitch is then between rows of K.
    a_major: str = "K"
    b_major: str = "K"
    # B's type where it is not A's (8-bit floats: e4m3 x e5m2); "" = A's. The scales of an 8-bit float
    # problem: scale_a "" / "tensor" / "row", scale_b "" / "tensor" / "col" (kernels/gemm_fp8.py)
    b_dtype: str = attrs.field(default="", converter=_b_type)
    scale_a: str = attrs.field(default="", converter=gemm_fp8.scale_a_kind)
    scale_b: str = attrs.field(default="", converter=gemm_fp8.scale_b_kind)

    @property
    def b_type(self) -> str:
        """B's element type (A's unless `b_dtype` says otherwise)."""
        return self.b_dtype or self.dtype

    def __attrs_post_init__(self) -> None:
        gemm_fp8.check(self)
        if not isinstance(self.epilogue, Epilogue):
            raise WarpyError(f"epilogue must be a gemm_epilogue.Epilogue, not {self.epilogue!r}")
        for name, major in (("a_major", self.a_major), ("b_major", self.b_major)):
            if major not in ("K", "MN"):
                raise WarpyError(f"{name}={major!r}: an operand is K-major (K contiguous) or MN-major")
        a_ext = self.M if self.a_major == "MN" else self.K
        b_ext = self.N if self.b_major == "MN" else self.K
        for name, extent, eb in (("lda", a_ext, dtype_bytes(self.dtype)), ("ldb", b_ext, dtype_bytes(self.dtype)),
                                 ("ldc", self.N, dtype_bytes(self.out_dtype))):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or (v and v < extent):
                raise WarpyError(f"{name}={v!r}: a row pitch is 0 (dense) or at least the row's {extent} elements")
            if v and (v * eb) % 16:
                raise WarpyError(f"{name}={v}: rows {v * eb} bytes apart; TMA needs a multiple of 16")
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 1:
            raise WarpyError(f"batch={self.batch!r}: a batch holds at least one GEMM")
        if self.batch > 1:
            if self.arch != "sm_90a":
                raise WarpyError(f"a batch of GEMMs in one launch is an sm_90a program so far, not {self.arch}")
            if not self.epilogue.identity:
                raise WarpyError("a batch of GEMMs in one launch takes no fused epilogue yet")
            for name, eb in (("stride_a", dtype_bytes(self.dtype)), ("stride_b", dtype_bytes(self.dtype)),
                             ("stride_c", dtype_bytes(self.out_dtype))):
                v = getattr(self, name)
                if isinstance(v, bool) or not isinstance(v, int) or v < 0 or (v * eb) % 16 or v * eb >= 1 << 31:
                    raise WarpyError(f"{name}={v!r}: matrices of a batch must be a whole number of 16 bytes apart, "
                                     "below 2 GiB")
        for name in ("M", "N", "K"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise WarpyError(f"{name} must be an integer, not {v!r}")
        if self.M < 1 or self.N < 1:
            raise WarpyError(f"M and N must be at least 1 (got M={self.M}, N={self.N})")
        if self.K < 8:
            raise WarpyError(f"K must be at least 8 (got {self.K})")
        for what, major, ext in (("A", self.a_major, self.M), ("B", self.b_major, self.N)):
            if major == "MN" and (ext * dtype_bytes(self.dtype)) % 16:
                raise WarpyError(f"{what} is MN-major: its rows of {ext} {self.dtype} elements are "
                                 f"{ext * dtype_bytes(self.dtype)} bytes; TMA needs a multiple of 16")
        row = self.K * dtype_bytes(self.dtype)
        if row % 16 and "K" in (self.a_major, self.b_major):
            raise WarpyError(
                f"K={self.K} rows of {self.dtype} are {row} bytes; TMA needs a multiple of 16 "
                f"(K a multiple of {16 // dtype_bytes(self.dtype)})"
            )

    @property
    def pitches(self) -> tuple[int, int, int]:
        """The row pitches of A, B and C in elements (the dense ones where not given)."""
        return (self.lda or self.dense[0], self.ldb or self.dense[1], self.ldc or self.N)

    @property
    def dense(self) -> tuple[int, int]:
        """A's and B's dense row pitches: their contiguous extents (K, or M / N where MN-major)."""
        return (self.M if self.a_major == "MN" else self.K, self.N if self.b_major == "MN" else self.K)

    @property
    def pitched(self) -> bool:
        return self.pitches != (*self.dense, self.N)

    @property
    def batch_strides(self) -> tuple[int, int, int]:
        """The elements between consecutive matrices of A, B and C (dense: one after another)."""
        lda, ldb, ldc = self.pitches
        rows_a = self.K if self.a_major == "MN" else self.M
        rows_b = self.K if self.b_major == "MN" else self.N
        return (self.stride_a or rows_a * lda, self.stride_b or rows_b * ldb, self.stride_c or self.M * ldc)

    @property
    def layouts(self) -> str:
        """The operands' layouts as the command line spells them where one is MN-major (a=km, b=kn), else ''."""
        return " ".join(w for w, on in (("a=km", self.a_major == "MN"), ("b=kn", self.b_major == "MN")) if on)

    @property
    def flops(self) -> int:
        return 2 * self.M * self.N * self.K

    def plan_key(self) -> str:
        """What a plan of this problem depends on beyond its fields and the sources (`warpy.plan`):
        the configuration this GPU tuned for it, if any (kernels/gemm_tune.py)."""
        from .gemm_tune import plan_key

        return plan_key(self)

    def __str__(self) -> str:
        ep = "" if self.epilogue.identity else f" ({self.epilogue})"
        ld = " lda={} ldb={} ldc={}".format(*self.pitches) if self.pitched else ""
        if self.batch > 1:
            ld += " batch={} (strides {}, {}, {})".format(self.batch, *self.batch_strides)
        mj = f" {self.layouts}" if self.layouts else ""
        ab = self.dtype if self.b_type == self.dtype else f"{self.dtype}x{self.b_type}"
        sc = "".join(f" {n}={k}" for n, k in (("scale_a", self.scale_a), ("scale_b", self.scale_b)) if k)
        return f"{self.M}x{self.N}x{self.K} {ab}->{self.out_dtype} {self.arch}{mj}{ld}{ep}{sc}"


# Relative tensor-core efficiency of a BM x BN tile per unit of work (smaller tiles re-read more
# operand bytes per FLOP through the L2 and shared memory; one consumer warpgroup (BM = 64) has no
# second to cover its waits). Measured on the H200, 2026-11-29: at 1536^3 the 128x192 tiles (96,
# one wave) beat 128x128 (144, two waves) and 128x256 (72) by 30%; at 1024^3 128x64 and 64x128
# tiles (128 CTAs) beat 128x128 (64 CTAs) by 20% and cuBLAS by 3%, fitting 0.75 and 0.72 once a
# launch's fixed 5 us is taken off; at 1536^3 120 tiles of 128x160 (one wave) ran 15.1 us against
# cuBLAS 15.2 and 16.5 for 128x192, 0.92 by the same fit; 132 tiles of 128x144 ran 14.2 us.
TILE_EFFICIENCY = {(128, 256): 1.0, (128, 224): 0.975, (128, 208): 0.96, (128, 192): 0.97, (128, 160): 0.92,
                   (128, 144): 0.90, (128, 128): 0.9, (128, 64): 0.75,
                   (64, 256): 0.88, (64, 192): 0.85, (64, 128): 0.72}


def choose(problem: GemmProblem) -> Config:
    """The configuration for a shape. sm_100a: `gemm_sm100.choose_sm100` (the B200 table).
    sm_90a (an H200's 132 SMs):

    Tiles are BM x BN (BM / 64 consumer warpgroups of m64nBN). The tile is the one that minimises
    the busiest SM's predicted work (`sm90_cost`): wide tiles on large shapes, narrower ones when
    wide tiles would leave SMs idle or add a nearly empty wave, 64-row tiles for short M. Where
    whole tiles cannot keep the SMs busy (few tiles, long K), stream-K shares the k blocks out. The
    ring is as deep as shared memory allows; 16-bit C with rows TMA stores write exactly (whole 16
    bytes: `warpy.layout.tma.store_clips_exactly`) goes out through shared memory and TMA stores,
    overlapping the next tile's loads."""
    if problem.arch == "sm_100a":
        cfg100 = for_majors(choose_sm100(problem.M, problem.N, problem.K, out_dtype=problem.out_dtype),
                            problem.a_major, problem.b_major)
        if not problem.epilogue.identity:  # the fused epilogue: whole tiles stored from the registers
            cfg100 = attrs.evolve(cfg100, split=1, stream_k=False, tma_store=False)
        return cfg100
    if problem.arch != "sm_90a":
        raise WarpyError(f"no {problem.arch} GEMM program exists yet")
    from .gemm_sweep import current_efficiencies, current_table, lookup, nearest, regime

    from .gemm_tune import tuned

    table = current_table()
    measured = lookup(problem, table)  # the fastest configuration the sweep measured at this very shape
    if measured is None:
        measured = tuned(problem)  # or that this GPU measured on the shape's first use (kernels/gemm_tune.py)
    if measured is not None:
        return measured
    if table.strategy_for(regime(problem)) == "nearest":  # where the sweep found the nearest shape's pick better
        near = nearest(table, problem)
        if near is not None:
            return near
    return model_choose(problem, current_efficiencies(table) if table.rows else {})


#: a kind of tile: (BM, BN, A and B swapped); in multicast clusters (BM, BN, swapped, cluster_m,
#: cluster_n); split in clusters along K (BM, BN, swapped, 1, 1, True). Each has an efficiency of its
#: own (a clustered kind's CTAs load slices of the operands; a K split's trade partial sums)
Kind = tuple[Any, ...]


def kind_cluster(k: Kind) -> tuple[int, int]:
    """(cluster_m, cluster_n) of a kind of tile ((1, 1): no multicast cluster)."""
    return (k[3], k[4]) if len(k) > 3 else (1, 1)


def kind_schedules(k: Kind, problem: GemmProblem) -> tuple[tuple[bool, bool], ...]:
    """The schedules (stream_k, cluster_k) the model weighs for a kind: whole tiles and stream-K for a
    plain kind (whole tiles only for a batch), whole tiles for a clustered kind, the K split in
    clusters for its own kind."""
    if len(k) > 5 and k[5]:
        return ((False, True),)
    return MODEL_SCHEDULES if len(k) == 3 and problem.batch == 1 else MODEL_SCHEDULES[:1]


def cluster_waves(problem: GemmProblem, bm: int, bn: int, swap: bool, cluster: tuple[int, int]) -> int:
    """Waves of whole tiles: ceil(tiles / 132), or in cm x cn clusters ceil(cluster tiles / the
    clusters the grid holds at once: `resident_clusters`). A and B swapped tile N by BM, M by BN."""
    rows, cols = (problem.N, problem.M) if swap else (problem.M, problem.N)
    cm, cn = cluster
    ctiles = cdiv(cdiv(rows, bm), cm) * cdiv(cdiv(cols, bn), cn) * problem.batch
    return cdiv(ctiles, min(SM90A.sms // (cm * cn), resident_clusters(cm * cn)))


def tile_work(bm: int, bn: int, swap: bool, streaming: bool) -> float:
    """A tile's work a k block, relative to a 128 x 256 tile's: its products (BM·BN / (128·256)) where
    the tensor cores are the limit, or, `streaming` (a skinny GEMM priced by the sweep's table, which
    streams its weight), the weight's rows it reads (B's: BN, or BM with A and B swapped) over 256."""
    if streaming:
        return (bm if swap else bn) / 256
    return bm * bn / (128 * 256)


def model_efficiencies(problem: GemmProblem, derived: Mapping[tuple[Kind, str], float]) -> dict[Kind, float]:
    """The efficiency of each kind of tile the model may pick for `problem`: the ones derived from the
    sweep's table for its regime (skinny, narrow or wide: `gemm_sweep.regime`, `efficiencies`) where the
    table has measured that regime at all, else the hand-fitted TILE_EFFICIENCY. A and B swapped only
    where M <= 64 and the problem is plain (no fused epilogue, batch, MN-major operand or 8-bit floats).
    8-bit float problems keep the hand-fitted efficiencies (the sweep times 16-bit inputs)."""
    from .gemm_sweep import regime

    reg = regime(problem)
    out: dict[Kind, float] = {(bm, bn, False): e for (bm, bn), e in TILE_EFFICIENCY.items()}
    swap_ok = (reg == "skinny" and problem.epilogue.identity and problem.batch == 1 and problem.a_major == "K"
               and problem.b_major == "K" and dtype_bytes(problem.dtype) == 2)
    if dtype_bytes(problem.dtype) != 2:  # the sweep measures 16-bit inputs: 8-bit floats keep the hand-fitted model
        return out
    # clustered kinds where the sweep times them at every shape (skinny, narrow) and on what it measures
    # (plain problems); in the wide regime it times one clustered twin of the pick, so their fit there
    # would come from the shapes where clusters won
    cluster_ok = reg != "wide" and problem.epilogue.identity and problem.batch == 1
    mine = {k: e for (k, r), e in derived.items() if r == reg and e > 0 and (not k[2] or swap_ok)
            and (len(k) == 3 or cluster_ok)}
    # where the table covers the regime, its measured kinds replace the hand-fitted ones: a decode GEMM
    # streams its weight, and a kind measured there is priced at that rate while an unmeasured one would
    # keep the compute-bound fit and look faster than anything measured
    return mine if mine else out


def streams(problem: GemmProblem, derived: Mapping[tuple[Kind, str], float]) -> bool:
    """Whether the model prices `problem` by the weight it streams (`tile_work`): a skinny problem
    (M <= 64) of 16-bit inputs whose regime the sweep's table measured."""
    from .gemm_sweep import regime

    return regime(problem) == "skinny" and dtype_bytes(problem.dtype) == 2 and any(r == "skinny" for _, r in derived)


def model_choose(problem: GemmProblem, derived: Mapping[tuple[Kind, str], float]) -> Sm90Config:
    """The cost model's configuration: over the kinds of tile (`model_efficiencies`) and whole tiles
    or stream-K, the one whose busiest SM does the least predicted work (`sm90_cost`)."""
    # an MN-major B lands in 64-column boxes: its tile is whole boxes wide; an 8-bit float problem whose
    # k blocks are promoted into fp32 holds two accumulators: BN at most PROMOTE_MAX_BN
    promote = gemm_fp8.promotes(problem)
    effs = model_efficiencies(problem, derived)
    streaming = streams(problem, derived)
    kinds = [k for k in effs if (problem.b_major == "K" or k[1] % 64 == 0)
             and (not promote or k[1] <= gemm_fp8.PROMOTE_MAX_BN)]
    # (a clustered kind walks whole tiles)
    k, (stream_k, cluster_k) = min(
        ((k, sch) for k in kinds for sch in kind_schedules(k, problem)),
        key=lambda c: sm90_cost(problem, c[0][0], c[0][1], c[1][0], swap=c[0][2], eff=effs[c[0]],
                                streaming=streaming, cluster_k=c[1][1], cluster=kind_cluster(c[0])))
    return model_config(problem, k[0], k[1], stream_k, k[2], cluster_k, kind_cluster(k))


#: the schedules, as (stream_k, cluster_k): whole tiles, stream-K / a K split through the workspace, a K
#: split in clusters. The sweep times all three; the model weighs the first two for a plain kind of tile
#: (MODEL_SCHEDULES): priced with the plain kind's efficiency, a K split in clusters won where measured
#: (up to 12% at decode shapes of 2048-4096) but, picked by the model at the held-out shapes, lost up to
#: 27% (64 x 5120 x 5120; docs/performance.md, 2026-12-03). A K split in clusters is instead a kind of
#: its own (`kind_schedules`), with the efficiency the table's measurements of it give.
SCHEDULES = ((False, False), (True, False), (False, True))
MODEL_SCHEDULES = SCHEDULES[:2]


def warpgroups(bm: int) -> tuple[int, int]:
    """(consumer warpgroups, rows each computes) of a BM-row tile: one per 64 rows up to 192, two of
    128 rows for 256."""
    return (2, 128) if bm == 256 else (bm // 64, 64)


def model_config(problem: GemmProblem, bm: int, bn: int, stream_k: bool, swap: bool = False,
                 cluster_k: bool = False, cluster: tuple[int, int] = (1, 1),
                 staged_swap: bool = False) -> Sm90Config:
    """The configuration the model gives a kind of tile and schedule: the split `sm90_split` gives
    (stream-K) or `cluster_split` (`cluster_k`: C then from the registers), the staged epilogue where
    C's rows allow (with A and B swapped only if `staged_swap`: the sweep's table timed them with C^T
    from the registers), the L2 promotion by the rows' alignment, the deepest ring; `cluster`:
    (cluster_m, cluster_n) of multicast clusters (whole tiles)."""
    promote = gemm_fp8.promotes(problem)
    split = sm90_split(problem, bm, bn, swap) if stream_k else 0
    # 16-bit C through TMA stores where its rows are whole 16 bytes (a store clips a row only to 16
    # bytes: a ragged row's slice of a wider C would have the bytes after its end overwritten)
    staged = (problem.out_dtype in ("bf16", "fp16") and (problem.pitches[2] * 2) % 16 == 0
              and store_clips_exactly(problem.N * 2)) and (staged_swap or not swap) and not cluster_k

    # Rows of A and B that are 16-byte but not 32-byte aligned (K * 2 bytes an odd multiple of 16)
    # are read slowly by TMA: 3072 x 3072 x K with BN 192 took 128 us at K = 3016 and 3064 against
    # 74-77 us at K = 3008, 3040, 3056 (H200, 2026-11-29); an L2 fetch of 128 bytes about each
    # request rather than 256 took 108-110 us there and the same time where rows are aligned.
    l2 = 256 if (problem.K * dtype_bytes(problem.dtype)) % 32 == 0 else 128

    # a stage's K is one 128-byte swizzle row: 64 16-bit elements, 128 8-bit ones
    consumers, wg_rows = warpgroups(bm)
    return deepest_ring(Sm90Config(bn=bn, consumers=consumers, wg_rows=wg_rows, stages=3, group=8,
                                   staged_epilogue=staged, bk=_bk(problem), stream_k=stream_k, split=split,
                                   l2_promotion=l2, promote=promote, swap_ab=swap,
                                   cluster_k=max(1, cluster_split(problem, bm, bn, swap)) if cluster_k else 1,
                                   cluster_m=cluster[0], cluster_n=cluster[1]))


def _bk(problem: GemmProblem) -> int:
    """K of one stage (a k block): one 128-byte swizzle row of the inputs' type."""
    return 128 // dtype_bytes(problem.dtype)


#: the ring's depth at most, as shared memory allows. A ring must cover the loads' latency: a decode
#: GEMM with A and B swapped streams the weight from DRAM (a 64 x 16 stage holds 8 KiB of it, and 16
#: stages keep 128 KiB in flight an SM, above the ~36 KiB that 4.8 TB/s over 132 SMs at ~1 µs of
#: latency asks), and small whole tiles are bound by the L2's latency, not the tensor cores (H200,
#: 2026-12-03: 128 x 3072 x 3072 in 64 x 64 tiles ran 12.4 µs with 8 stages, 12.0 with 10, 11.6 with
#: 13; 128 x 5120 x 3072 20.2, 19.0, 18.5)
MAX_STAGES = 16


def deepest_ring(cfg: Sm90Config) -> Sm90Config:
    """`cfg` with the deepest ring (3 to MAX_STAGES stages) its shared memory allows."""
    stages = 3
    while stages < MAX_STAGES and smem_bytes(attrs.evolve(cfg, stages=stages + 1)) <= SM90A.max_dynamic_smem:
        stages += 1
    return attrs.evolve(cfg, stages=stages)


def configure(problem: GemmProblem, overrides: Union[str, Mapping[str, object], None]) -> Config:
    """The rule's configuration for `problem` with some fields set by hand: `overrides` is a dict or
    text `key=value,...` (ints, true/false). On sm_90a a changed tile or epilogue gets the deepest
    ring that fits unless `stages` is given, and multicast clusters (`cluster_m` / `cluster_n` above 1)
    walk whole tiles unless stream-K is asked for too. An unknown field or a bad value is refused in one line."""
    cfg = choose(problem)
    overrides = checked_overrides(cfg, overrides)
    if not overrides:
        return cfg
    multicast = any(isinstance(overrides.get(f), int) and overrides.get(f) != 1 for f in ("cluster_m", "cluster_n"))
    if isinstance(cfg, Sm90Config) and multicast and "stream_k" not in overrides:
        overrides = {**overrides, "stream_k": False, "split": 0}
    if isinstance(cfg, Sm90Config) and cfg.cluster_k > 1 and "cluster_k" not in overrides and (
            multicast or overrides.get("stream_k") or overrides.get("split")):
        # the rule's K split in clusters gives way to the schedule asked for, with the epilogue the model
        # gives that tile
        whole = model_config(problem, cfg.bm, cfg.bn, False, cfg.swap_ab)
        overrides = {"cluster_k": 1, "staged_epilogue": whole.staged_epilogue, **overrides}
    ck = overrides.get("cluster_k", 1)
    if isinstance(cfg, Sm90Config) and isinstance(ck, int) and ck > 1:  # (cluster_k: S-way clusters along K)
        # a tile's k blocks split in a cluster: no workspace schedule, C from the registers, unless asked
        overrides = {"stream_k": False, "split": 0, "staged_epilogue": False, **overrides}
    if isinstance(cfg, Sm90Config) and overrides.get("swap_ab") and "staged_epilogue" not in overrides:
        # C^T from the registers, as the model configures A and B swapped (staged_epilogue=1 asks for
        # STSM.MT88 and TMA stores)
        overrides = {**overrides, "staged_epilogue": False}
    out: Config = attrs.evolve(cfg, **overrides)  # type: ignore[arg-type]  # (checked field by field above)
    if isinstance(out, Sm90Config) and out.split and "split" not in overrides:
        # the rule's split was for its tile: where the tile given by hand cannot take it, the split the
        # rule gives that tile (A and B swapped: tiles of N by BM and M by BN)
        tiles = _tiles(problem, out.bm, out.bn, out.swap_ab)
        if tiles * out.split > SM90A.sms or out.split > cdiv(problem.K, out.bk):
            out = attrs.evolve(out, split=sm90_split(problem, out.bm, out.bn, out.swap_ab))
    if isinstance(out, Sm90Config) and "stages" not in overrides:
        out = deepest_ring(out)
    return out


# Stream-K's cost over a data-parallel grid's, in k blocks of one CTA: storing or gathering a tile's
# partial sums, waiting for them, the ring's refill between segments. Measured on the H200
# (2026-11-29): 128 CTAs of 256 k blocks of 128 x 256 took 170 us as whole tiles (2048 x 2048 x
# 16384) and 183 us as tiles split 4 ways (1024 x 1024 x 65536), about 20 k blocks more; at 1024^3
# and 1536^3 stream-K lost to whole tiles by 10-15%, which any overhead above 8 k blocks predicts.
# And the margin by which stream-K must be predicted to win (its sums are ordered differently; a
# near tie keeps whole tiles).
STREAM_K_OVERHEAD = 16
STREAM_K_MARGIN = 0.95
# In the narrow regime (64 < M <= 256) the same overhead priced stream-K 7-45% too cheap: with it the
# model picked stream-K at 5 of the 24 narrow shapes of the committed table where whole tiles ran
# faster (256 x 28672 x 4096: 126.4 against 87.8 us). `--sweep-report` (each shape left out of the
# efficiencies) over the narrow overhead: 12 -> 16 of 24 narrow shapes within 3%, 16 -> 19, 20 -> 21,
# 22, 24 and 26 -> 24 of 24, 28 -> 23, 32 -> 21, 40 -> 20 (2026-12-03): the middle of the plateau.
STREAM_K_OVERHEAD_NARROW = 24


def stream_k_overhead(problem: GemmProblem, swap: bool = False) -> int:
    """Stream-K's overhead in k blocks: STREAM_K_OVERHEAD_NARROW where the rows the program tiles (M,
    or N with A and B swapped; a batch's stacked) are in the narrow regime (`gemm_sweep.regime_of`),
    so a swapped or batched problem costs what its transpose or its stacked rows cost."""
    from .gemm_sweep import regime_of

    rows = (problem.N if swap else problem.M) * problem.batch
    return STREAM_K_OVERHEAD_NARROW if regime_of(rows) == "narrow" else STREAM_K_OVERHEAD


def _tiles(problem: GemmProblem, bm: int, bn: int, swap: bool = False) -> int:
    rows, cols = (problem.N, problem.M) if swap else (problem.M, problem.N)
    return cdiv(rows, bm) * cdiv(cols, bn) * problem.batch


def sm90_split(problem: GemmProblem, bm: int, bn: int, swap: bool = False) -> int:
    """Stream-K's grid: where at most half the SMs have a tile, every tile splits S = 132 // tiles
    ways at the same k blocks (a grid of tiles x S): the CTAs of one k range then read the same A
    and B blocks at about the same time, through the L2. Measured on the H200 (2026-11-29) at
    1024 x 1024 x 65536: an even share over all 132 SMs puts the tiles' pieces at unrelated k, the
    operands stream from DRAM once a CTA (1.6 GB), and it ran 1.7x slower than whole tiles' rate.
    0: an even share over all SMs. (`swap`: A and B swapped, tiles of N by BM and M by BN.)"""
    tiles = _tiles(problem, bm, bn, swap)
    return min(SM90A.sms // tiles, cdiv(problem.K, _bk(problem))) if 2 * tiles <= SM90A.sms else 0


# The cluster split's cost over whole tiles', in k blocks of one CTA: storing the partial sums in shared
# memory, the copies between the cluster's CTAs and their waits, adding the share. It ranks the sweep's
# candidates (the model does not pick the schedule: MODEL_SCHEDULES); of 2, 4, 8, 12 and 20, 20 gave the
# smallest worst miss (+11%) in `--sweep-report` over the 52 shapes swept with it (2026-12-03).
CLUSTER_K_OVERHEAD = 20


def cluster_split(problem: GemmProblem, bm: int, bn: int, swap: bool = False) -> int:
    """`cluster_k`'s S for a kind of tile: the most CTAs (2 to MAX_CLUSTER_K) a tile's cluster may have
    with the whole grid in one wave of the SMs, at most the k blocks and the tile's shares, and its
    exchange beside a ring of 3 stages in shared memory; 0 where none fits (or the problem is a batch)."""
    if problem.batch != 1:
        return 0
    tiles = _tiles(problem, bm, bn, swap)
    s = min(MAX_CLUSTER_K, SM90A.sms // tiles, cdiv(problem.K, _bk(problem)), (bm // 64) * bn // 8)
    while s >= 2 and smem_bytes(Sm90Config(bn=bn, consumers=bm // 64, stages=3, bk=_bk(problem), cluster_k=s),
                                max(1, 128 // _bk(problem))) > SM90A.max_dynamic_smem:
        s -= 1
    return s if s >= 2 else 0


def sm90_cost(problem: GemmProblem, bm: int, bn: int, stream_k: bool, *, swap: bool = False,
              eff: Optional[float] = None, streaming: bool = False, cluster_k: bool = False,
              cluster: tuple[int, int] = (1, 1)) -> float:
    """Predicted time of the busiest SM, in k blocks of a 128 x 256 tile: whole tiles take
    ceil(tiles / 132) waves of kt k blocks; stream-K shares the tiles' k blocks out (`sm90_split`)
    and pays `stream_k_overhead` more, and must beat whole tiles by STREAM_K_MARGIN; `cluster_k`, a K
    split S ways in clusters (`cluster_split`), pays CLUSTER_K_OVERHEAD on its k/S blocks, by the same
    margin. `eff`: the kind's efficiency (TILE_EFFICIENCY's by default; the rule passes the sweep's
    where it has one); `streaming`: a tile's work is the weight it reads (`tile_work`); `cluster`:
    whole tiles in multicast clusters (`cluster_waves`; infinite where the cluster cannot run).
    Stream-K's even shares are infinite where blocks are shared (`even_shares_fit`)."""
    tiles = _tiles(problem, bm, bn, swap)
    kt = cdiv(problem.K, _bk(problem))
    per = tile_work(bm, bn, swap, streaming) / (TILE_EFFICIENCY[bm, bn] if eff is None else eff)
    if cluster != (1, 1):
        consumers, wg_rows = warpgroups(bm)
        clustered = Sm90Config(bn=bn, consumers=consumers, wg_rows=wg_rows, cluster_m=cluster[0], cluster_n=cluster[1])
        try:
            cluster_refusal(clustered)
        except WarpyError:
            return float("inf")
        if not even_slices(clustered):  # (uneven slices: not yet timed on the GPU)
            return float("inf")
        return float("inf") if stream_k or cluster_k else cluster_waves(problem, bm, bn, swap, cluster) * kt * per
    if cluster_k:
        s = cluster_split(problem, bm, bn, swap)
        return (cdiv(kt, s) + CLUSTER_K_OVERHEAD) * per / STREAM_K_MARGIN if s else float("inf")
    if not stream_k:
        return cdiv(tiles, SM90A.sms) * kt * per
    if tiles * kt < SM90A.sms:
        return float("inf")
    split = sm90_split(problem, bm, bn, swap)
    if not split and not even_shares_fit(problem, bm, bn, swap):
        return float("inf")
    share = cdiv(kt, split) if split else cdiv(tiles * kt, SM90A.sms)
    return (share + stream_k_overhead(problem, swap)) * per / STREAM_K_MARGIN


def even_shares_fit(problem: GemmProblem, bm: int, bn: int, swap: bool = False) -> bool:
    """Whether stream-K's even shares over the grid (no `split`) are worth weighing: only where the
    tiles are one row or one column of blocks, so that no block of A or B is read by several tiles at
    unrelated k (a decode GEMM's weight, each block read by one tile). Elsewhere the tiles sharing a
    block read it at different k and it comes from DRAM again: in the H200's sweeps of 2026-12-02 and
    12-03 (about 170 shapes) even shares were fastest at 6 shapes, by 1% or less but at two decode shapes
    (7%), and ran 1.3-1.7x the fastest time at dozens of others (777 x 2048 x 8192: 1.42x)."""
    rows, cols = (problem.N, problem.M) if swap else (problem.M, problem.N)
    return min(cdiv(rows, bm), cdiv(cols, bn)) == 1


def build(problem: GemmProblem, config: Config | None = None) -> Program:
    cfg = config if config is not None else choose(problem)
    if isinstance(cfg, Sm100Config):
        if problem.arch != "sm_100a":
            raise WarpyError(f"an sm_100a configuration cannot build for {problem.arch}")
        return Sm100Gemm(problem, cfg).build()
    return Sm90Gemm(problem, cfg).build()


class GemmExpectation:
    """What the checker needs to compute a GEMM's data (`warpy.check.expect`): A and B hold integers
    in [-3, 3] (exact in bf16/fp16, and every sum of their products exact in fp32); C must equal
    numpy's A · Bᵀ rounded once to C's type. Elements holding partial sums that CTAs outside the
    simulated clusters complete (split-K / stream-K) are counted, not compared."""

    def __init__(self, problem: GemmProblem) -> None:
        self.problem = problem

    def initial(self, source: str, box: Optional[TmaBox], nbytes: int, rng: np.random.Generator) -> Optional[np.ndarray]:
        if box is None and source in gemm_fp8.SCALE_PARAMS:  # an 8-bit float problem's scales
            return gemm_fp8.scale_values(rng, nbytes // 4)
        if box is None and source in AUX_PARAMS:  # the epilogue's inputs: small integers of C's type
            od = self.problem.out_dtype
            n = nbytes // dtype_bytes(od)
            vals = small_ints(rng, (n,))
            return vals if od == "fp32" else bits16(vals, od)
        if box is None or box.dtype not in IN_DTYPES:
            return None  # C, flags and workspaces start as zeros
        return bits16(small_ints(rng, (nbytes // box.elem_bytes,)), box.dtype)

    def compare(self, run: Any) -> Verdict:
        p = self.problem
        M, N, K = p.M, p.N, p.K
        lda, ldb, ldc = p.pitches
        sa, sb, sc = p.batch_strides
        bname = "b" if "b" in run.gmem else ("bt" if "bt" in run.gmem else "b")
        a_all = from_bits(_elements(run.gmem["a"], p.dtype), p.dtype)
        b_all = from_bits(_elements(run.gmem[bname], p.b_type), p.b_type)
        def operand(flat: np.ndarray, start: int, rows: int, pitch: int, mn: bool) -> np.ndarray:
            # rows x K, from K x rows where the operand is MN-major (its rows of K `pitch` apart)
            if mn:
                return _rows(flat[start: start + (K - 1) * pitch + rows], K, rows, pitch).T.copy()
            return _rows(flat[start: start + (rows - 1) * pitch + K], rows, K, pitch)

        a = np.concatenate([operand(a_all, i * sa, M, lda, p.a_major == "MN") for i in range(p.batch)])
        bs = [operand(b_all, i * sb, N, ldb, p.b_major == "MN") for i in range(p.batch)]
        b = bs[0] if p.batch == 1 else np.concatenate(bs)
        ref = np.concatenate([a[i * M:(i + 1) * M].astype(np.float64) @ bs[i].astype(np.float64).T
                              for i in range(p.batch)])
        ref = gemm_fp8.apply_reference(ref, p, run.gmem)  # (the scales of an 8-bit float problem)
        M = M * p.batch  # the batch's C, matrix under matrix
        src = _output_source(run.h)
        eb = dtype_bytes(p.out_dtype)
        Mb = p.M

        def mats(flat: np.ndarray) -> np.ndarray:  # each matrix of the batch's C, stacked
            return np.concatenate([_rows(flat[i * sc: i * sc + (Mb - 1) * ldc + N], Mb, N, ldc) for i in range(p.batch)])

        span = ((p.batch - 1) * sc + (Mb - 1) * ldc + N) * eb
        raw = run.gmem[src][: span]
        wr = mats(run.gwritten[src][: span].reshape(-1, eb).all(axis=1))
        got = mats(from_bits(raw, p.out_dtype)).astype(np.float64)
        tol: Optional[np.ndarray] = None
        if not p.epilogue.identity:
            ep = p.epilogue

            def aux(name: str, n: int) -> Optional[np.ndarray]:
                if name not in run.gmem:
                    return None
                raw_ = run.gmem[name][: n * dtype_bytes(p.out_dtype)]
                return from_bits(raw_.view(np.float32) if p.out_dtype == "fp32" else raw_.view(np.uint16),
                                 p.out_dtype).astype(np.float64)

            cin, res = aux("c_in", M * N), aux("residual", M * N)
            bias = aux("bias", N if ep.bias == "n" else M)
            ref, tol = reference(ref, ep, None if cin is None else cin.reshape(M, N), bias,
                                 None if res is None else res.reshape(M, N))
        exact = round_to(ref, p.out_dtype).reshape(M, N)
        if tol is None:
            ref = exact
        else:  # within the epilogue's bound, and C's rounding (a value near a rounding step may go either way)
            ok = np.abs(got - ref) <= tol + output_spacing(ref, p.out_dtype) + (2.0 ** -23) * np.abs(ref)
            ref = np.where(ok, got, exact)
        red = mats(run.greduced[src][: span].reshape(-1, eb).any(axis=1))
        partial = int((wr & red).sum())
        wr = wr & ~red  # partial sums: CTAs outside the simulated clusters add the rest
        n = int(wr.sum())
        bad = wr & (got != ref)
        msgs = []
        if n == 0 and not partial:
            msgs.append("values: the simulated clusters wrote no element of C")
        if bad.any():
            r, c = np.argwhere(bad)[0]
            msgs.append(f"values: {int(bad.sum())} of {n} elements of C differ from numpy, first C[{r}, {c}] = {got[r, c]} "
                        f"where numpy has {ref[r, c]}")
        stray = _stray_writes(run.gwritten[src], p)
        if stray:
            msgs.append(f"values: {stray} bytes of C's memory that hold no element of C were written (C's rows are "
                        f"{N} {p.out_dtype} elements, {ldc} apart: the bytes between them belong to someone else)")
        data = {"a": a, "b": b, "c": got.astype(np.float32), "written": wr}
        return Verdict(n, int(bad.sum()), partial, msgs, data)


def _stray_writes(written: np.ndarray, p: GemmProblem) -> int:
    """Bytes of C's memory written (`written`: a flag a byte) that are no element of C: the gaps
    between rows of a pitched C (a slice of a wider matrix), between the matrices of a batch, and
    past the end."""
    eb = dtype_bytes(p.out_dtype)
    row, n = p.pitches[2] * eb, p.N * eb
    stray = written.copy()
    for i in range(p.batch):
        seg = stray[i * p.batch_strides[2] * eb: i * p.batch_strides[2] * eb + p.M * row]  # a view
        k = seg.size // row
        seg[: k * row].reshape(k, row)[:, :n] = False
        if k < p.M:  # the last row, its gap past the memory's end
            seg[k * row: k * row + n] = False
    return int(stray.sum())


def _elements(raw: np.ndarray, dtype: str) -> np.ndarray:
    """An input's raw bytes as the bit patterns `from_bits` reads (uint16 for 16-bit types, uint8 for 8-bit)."""
    return raw.view(np.uint16) if dtype_bytes(dtype) == 2 else raw.view(np.uint8)


def _rows(flat: np.ndarray, rows: int, cols: int, pitch: int) -> np.ndarray:
    """The rows×cols matrix whose rows start `pitch` elements apart in `flat` (a copy)."""
    full = np.zeros(rows * pitch, dtype=flat.dtype)
    full[: min(flat.size, rows * pitch)] = flat[: rows * pitch]
    return full.reshape(rows, pitch)[:, :cols].copy()


def _output_source(header: Any) -> str:
    """C's memory: the source of the first global buffer, else the tensor map `c`."""
    for buf in header.buffers:
        if buf.space == "global" and buf.source:
            return str(buf.source)
    for t in header.tmaps:
        if t.name == "c":
            return "c"
    raise KeyError("no output buffer")


def bind(header: Any, a: Any, b: Any, c: Any, M: int, N: int, K: int, *,
         scratch: Optional[Any] = None, encode: Optional[Callable[..., Any]] = None, **aux: Any) -> list[Any]:
    """A GEMM kernel's parameters, bound by the names warpy's GEMM programs use (the one place this
    convention lives; warpy.gemm, `warpy gemm` and `warpy bench gemm` all bind through it):

    - `a`, `b`, `c`: A, B and C's memory (tensor maps or pointers, as the header declares them);
    - maps declared `over` one of these (`c_add`, through which split-K / stream-K programs add
      partial sums into C; `c_tail`, a staged epilogue's last, narrower chunk) view its memory;
    - the scalars `M N K` (also `m n k`), where declared;
    - the fused epilogue's inputs `bias`, `c_in`, `residual` and an 8-bit float problem's scales
      `scale_a`, `scale_b` (pointers; `aux`), where declared;
    - scratch memory (flags, workspaces: `.param NAME u64 scratch`) from `scratch`, the set of the
      stream the launch goes on (`ScratchPool.get(stream)`, `alloc_scratch`).

    Names the kernel does not declare are ignored (strict=False), except in `scratch`."""
    from warpy.runtime.bind import bind_params, encode_cached

    return bind_params(header, {"a": a, "b": b, "c": c, **aux},
                       {"M": M, "N": N, "K": K, "m": M, "n": N, "k": K},
                       scratch=scratch, strict=False, encode=encode or encode_cached)


@attrs.frozen
class GemmFamily:
    """The GEMM family (`warpy.kernels.family.KernelFamily`): C = A · Bᵀ."""

    name: str = "gemm"

    def problem(self, dims: Sequence[Any], *, arch: str, **options: Any) -> GemmProblem:
        """`gemm M N K [alpha=X] [beta=X] [bias=m|n] [act=...] [residual=1] [lda=N] [ldb=N] [ldc=N]
        [batch=B] [stride_a=N] [stride_b=N] [stride_c=N] [b_dtype=T] [scale_a=tensor|row]
        [scale_b=tensor|col]` from the command line (the words after the sizes: the fused epilogue,
        kernels/gemm_epilogue.py, row pitches, a batch, B's type and an 8-bit float problem's scales);
        options `dtype` and `out_dtype`."""
        sizes = [d for d in dims if not isinstance(d, str)]
        words = [d for d in dims if isinstance(d, str)]
        majors: dict[str, str] = {}
        for w in [w for w in words if w.split("=", 1)[0] in ("a", "b")]:  # operand layouts
            key, _, val = w.partition("=")
            k_major = "mk" if key == "a" else "nk"
            mn_major = "km" if key == "a" else "kn"
            if val not in (k_major, mn_major):
                raise WarpyError(f"{w}: {key}'s layout is {k_major} (K contiguous) or {mn_major} "
                                 f"({'M' if key == 'a' else 'N'} contiguous, MN-major)")
            majors[f"{key}_major"] = "MN" if val == mn_major else "K"
            words.remove(w)
        if len(sizes) != 3 or dims[:3] != sizes:
            raise WarpyError(f"gemm takes three sizes M N K (then epilogue words), got {list(dims)}")
        pitches: dict[str, int] = {}
        for w in [w for w in words if w.split("=", 1)[0] in ("lda", "ldb", "ldc", "batch", "stride_a", "stride_b",
                                                               "stride_c")]:
            key, _, val = w.partition("=")
            if not val.isdigit():
                raise WarpyError(f"{w}: {key} is a whole number" + (" of elements" if key != "batch" else ""))
            pitches[key] = int(val)
            words.remove(w)
        fp8: dict[str, str] = {}
        for w in [w for w in words if w.split("=", 1)[0] in ("b_dtype", "scale_a", "scale_b")]:
            key, _, val = w.partition("=")
            fp8[key] = val
            words.remove(w)
        ep = parse_words(words)
        return GemmProblem(sizes[0], sizes[1], sizes[2], arch=arch, epilogue=ep, **pitches, **majors, **fp8,  # type: ignore[arg-type]
                           **{k: v for k, v in options.items() if v is not None})

    def choose(self, problem: GemmProblem) -> Config:
        return choose(problem)

    def configure(self, problem: GemmProblem, overrides: Union[str, Mapping[str, object], None]) -> Config:
        return configure(problem, overrides)

    def build(self, problem: GemmProblem, config: Any = None) -> Program:
        return build(problem, config)

    def bind(self, header: Any, problem: GemmProblem, memory: Mapping[str, Any], *, scratch: Any = None,
             encode: Optional[Callable[..., Any]] = None) -> list[Any]:
        return bind(header, memory["a"], memory["b"], memory["c"], problem.M, problem.N, problem.K,
                    scratch=scratch, encode=encode,
                    **{k: memory[k] for k in AUX_PARAMS + gemm_fp8.SCALE_PARAMS if k in memory})

    def expectation(self, problem: GemmProblem) -> GemmExpectation:
        return GemmExpectation(problem)


FAMILY = GemmFamily()
