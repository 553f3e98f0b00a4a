"""The sm_90a GEMM's measured table: `warpy bench gemm --sweep` times many configurations of the
Hopper program per shape against cuBLAS (one process, interleaved) and writes them to a JSON table
(`kernels/data/gemm_sweep_h200.json`, filled on the H200); the tile rule (`kernels/gemm.py`'s
`choose`) reads it back:

- a shape the table holds runs the fastest configuration measured for it (checked "ok");
- every other shape goes through the rule's cost model, whose tile efficiencies are *derived* from
  the table (`efficiencies`): for each kind of tile (BM x BN, A and B swapped or not) and each regime
  (`regime`: M <= 64 "skinny", M <= 256 "narrow", or "wide"), the median over the table's shapes of
  the model's predicted time at efficiency 1 over the measured time, a launch's fixed cost taken off;
  kinds the table has not measured keep the hand-fitted `TILE_EFFICIENCY`, and kinds with neither
  are not candidates.

`report` compares, shape by shape, the model's pick (its efficiencies derived from the *other*
shapes of the table: leave one out, so a shape never teaches the rule its own answer) with the
fastest configuration measured there: how often and by how much the rule misses.

The sweep's configurations per shape (`candidates`): for every kind the model knows, its best
schedule (whole tiles, K split, stream-K, or a K split in clusters: `cluster_k`, which the model
does not weigh itself, so a table's row runs it only where measured fastest) under the model; above M = 256 the 192-row tiles (three
consumer warpgroups), 192 x 192 in 2x1 and 1x2 clusters and the 2x1-cluster twin of the model's pick; for M <= 64, A and B swapped with
BN 16..64, which the hand-fitted model has no efficiency for; up to M = 256 the best whole tiles in the
multicast clusters `cluster_shapes` gives;
for 64 < M <= 256, 64-row whole tiles of every width in `NARROW_BNS` (and 192-row ones where M fills
them), whose tile counts fill the SMs where the known kinds leave a wave ragged, and, where M is not a
multiple of 64, A and B swapped with BN fitted to M (`fitted_swaps`);
the L2 promotions where rows of A and B are not 32-byte aligned; above M = 64, whole tiles with BN
fitted to whole waves of the SMs (`fitted_tiles`), the first also in a multicast cluster. Ranked by
the model, at most `per_shape` of them (the rule's own pick always among them).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import attrs

from warpy.errors import WarpyError
from warpy.target import SM90A

from .gemm_sm90 import CLUSTER_SIDES, MAX_CLUSTER, MAX_CONSUMERS, Sm90Config, Sm90Gemm, even_slices
from .schedule import cdiv

#: the committed table (the H200's); `WARPY_GEMM_TABLE` names another file (or "none": the hand-fitted model alone)
TABLE_PATH = Path(__file__).resolve().parent / "data" / "gemm_sweep_h200.json"
TABLE_VERSION = 1

#: a launch's fixed cost (µs): 128 x 128 x 64 took 4.9 µs on the H200 (docs/performance.md), most of it
#: not the tile's work; taken off a measured time before it is compared with the model's work
LAUNCH_US = 4.0
#: the reference kind: 128 x 256 whole tiles (efficiency 1 by definition)
REFERENCE = (128, 256, False)
#: µs a unit of the model's work takes (a k block of a 128 x 256 tile on one SM) where the table has
#: no 128 x 256 whole-tile measurement: 4096³ ran 172.7 µs for 4 waves x 64 k blocks (H200, 2026-12-01)
US_PER_UNIT = 0.675
#: the regimes' boundaries, in rows of C: at or below SKINNY_M a GEMM streams its weight (decode:
#: "skinny"); up to NARROW_M it sits near the H200's ridge ("narrow": 2·M flops a weight element of
#: 2 bytes against ~206 flops a byte of HBM; M = 128 ran 0.68-0.88 of cuBLAS on efficiencies fitted
#: at M >= 512, 2026-12-03); above it the tensor cores are the limit ("wide"). Each is fitted apart.
SKINNY_M = 64
NARROW_M = 256
REGIMES = ("skinny", "narrow", "wide")

Kind = tuple[Any, ...]  # (BM, BN, A and B swapped[, cluster_m, cluster_n]): kernels/gemm.py's Kind


#: tokens (M) a Llama-style layer is timed at by default: decode, short prefill (the narrow regime), prefill
LAYER_TOKENS = (1, 16, 64, 128, 256, 512, 2048, 8192)


def llama_layers(hidden: int, mlp: int, qkv: int) -> list[tuple[int, int]]:
    """A Llama-style model's linear layers as (N, K): QKV (`qkv`: hidden + 2 KV heads' widths), the
    attention output, the gate+up projection (fused, twice the MLP width, where that is at most
    28672; else one of the two) and the down projection."""
    return [(qkv, hidden), (hidden, hidden), (2 * mlp, hidden) if 2 * mlp <= 28672 else (mlp, hidden), (hidden, mlp)]


def _llama() -> list[tuple[int, int, int]]:
    """The sweep's Llama-style layers (`llama_layers`) of 1B-, 8B- and 70B-class models at LAYER_TOKENS
    (the 1B-class at 16, 128, 256 and 4096)."""
    models = {  # hidden, MLP width, QKV width
        "1B": (2048, 8192, 3072), "8B": (4096, 14336, 6144), "70B": (8192, 28672, 10240),
    }
    out = []
    for name, dims in models.items():
        ms = LAYER_TOKENS if name != "1B" else (16, 128, 256, 4096)
        out += [(m, n, k) for m in ms for (n, k) in llama_layers(*dims)]
    return out


#: the issue's shapes beyond the default table (issue 18)
ISSUE_SHAPES: tuple[tuple[int, int, int], ...] = (
    (1, 8192, 8192), (16, 4096, 4096), (8192, 28672, 8192), (2048, 8192, 28672), (6144, 6144, 6144),
    (2304, 4608, 768), (3000, 3000, 3000),
)


def default_shapes() -> list[tuple[int, int, int]]:
    """The sweep's default shapes: the default bench table, the issue's shapes, the Llama-style
    layers (`_llama`), each once, in that order."""
    from .gemm_bench import DEFAULT_SHAPES

    seen: dict[tuple[int, int, int], None] = {}
    for s in list(DEFAULT_SHAPES) + list(ISSUE_SHAPES) + _llama():
        seen.setdefault(s, None)
    return list(seen)


# -- the table ---------------------------------------------------------------------------------------

_FIELDS = tuple(f.name for f in attrs.fields(Sm90Config))


def config_dict(cfg: Sm90Config) -> dict[str, Any]:
    """A configuration as the table stores it: the fields that differ from Sm90Config's defaults."""
    base = Sm90Config()
    return {f: getattr(cfg, f) for f in _FIELDS if getattr(cfg, f) != getattr(base, f)}


def config_of(d: dict[str, Any]) -> Sm90Config:
    """The configuration a table entry stores; an unknown field is refused in one line."""
    bad = sorted(set(d) - set(_FIELDS))
    if bad:
        raise WarpyError(f"the GEMM table's configuration has fields Sm90Config does not: {', '.join(bad)}")
    return Sm90Config(**d)


def config_text(cfg: Sm90Config) -> str:
    """`key=value,...` (as `--config` takes it) of the fields that differ from the defaults."""
    return ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in config_dict(cfg).items()) or "defaults"


@attrs.frozen
class Measured:
    """One configuration's median GPU time at a shape (µs) and its check ("ok" or what failed)."""

    config: Sm90Config
    us: float
    check: str


@attrs.frozen
class SweepRow:
    """One shape's measurements: cuBLAS's time and each configuration's."""

    shape: tuple[int, int, int]
    dtype: str
    out_dtype: str
    cublas_us: Optional[float]
    measured: tuple[Measured, ...]

    @property
    def ok(self) -> list[Measured]:
        return [m for m in self.measured if m.check == "ok" and m.us > 0]

    @property
    def best(self) -> Optional[Measured]:
        ok = self.ok
        return min(ok, key=lambda m: m.us) if ok else None

    def time_of(self, cfg: Sm90Config) -> Optional[float]:
        for m in self.ok:
            if m.config == cfg:
                return m.us
        return None


STRATEGIES = ("model", "nearest")


def _strategies(value: Any) -> tuple[tuple[str, str], ...]:
    """A table's strategies, regime by regime: one name for every regime (as tables before the narrow
    regime wrote it), or a mapping from regime to name; anything else is refused in one line."""
    pairs = [(r, value) for r in REGIMES] if isinstance(value, str) else list(dict(value).items())
    for r, v in pairs:
        if r not in REGIMES:
            raise WarpyError(f"strategy for {r!r}: the regimes are {', '.join(REGIMES)}")
        if v not in STRATEGIES:
            raise WarpyError(f"strategy {v!r} is not one of {', '.join(STRATEGIES)}")
    return tuple(sorted(pairs, key=lambda rv: REGIMES.index(rv[0])))


@attrs.frozen
class SweepTable:
    """A sweep's rows, where and how it ran, and how the rule picks for shapes it did not measure,
    regime by regime (`strategy`: the one that did better there with each shape left out, set by the
    sweep; "model" where it says nothing)."""

    rows: tuple[SweepRow, ...] = ()
    gpu: str = ""
    date: str = ""
    command: str = ""
    strategy: tuple[tuple[str, str], ...] = attrs.field(default="model", converter=_strategies)

    def strategy_for(self, reg: str) -> str:
        return dict(self.strategy).get(reg, "model")

    def row(self, shape: tuple[int, int, int], dtype: str, out_dtype: str) -> Optional[SweepRow]:
        for r in self.rows:
            if r.shape == shape and r.dtype == dtype and r.out_dtype == out_dtype:
                return r
        return None


def table_json(t: SweepTable) -> dict[str, Any]:
    return {"version": TABLE_VERSION, "gpu": t.gpu, "date": t.date, "command": t.command, "strategy": dict(t.strategy),
            "rows": [{"shape": list(r.shape), "dtype": r.dtype, "out_dtype": r.out_dtype, "cublas_us": r.cublas_us,
                      "measured": [{"config": config_dict(m.config), "us": m.us, "check": m.check}
                                   for m in r.measured]} for r in t.rows]}


def parse_table(data: Any, where: str = "the GEMM table") -> SweepTable:
    """A table from its JSON; anything malformed is refused in one line naming `where`."""
    try:
        if data.get("version") != TABLE_VERSION:
            raise WarpyError(f"{where}: version {data.get('version')!r}, this warpy reads {TABLE_VERSION}")
        rows = []
        for r in data["rows"]:
            shape = tuple(int(x) for x in r["shape"])
            if len(shape) != 3:
                raise WarpyError(f"{where}: shape {r['shape']!r} is not M, N, K")
            ms = tuple(Measured(config_of(dict(m["config"])), float(m["us"]), str(m["check"])) for m in r["measured"])
            cu = r.get("cublas_us")
            rows.append(SweepRow((shape[0], shape[1], shape[2]), str(r["dtype"]), str(r["out_dtype"]),
                                 None if cu is None else float(cu), ms))
        try:
            strat = _strategies(data.get("strategy", "model"))
        except WarpyError as e:
            raise WarpyError(f"{where}: {e}") from None
        return SweepTable(tuple(rows), str(data.get("gpu", "")), str(data.get("date", "")), str(data.get("command", "")),
                          strat)
    except WarpyError:
        raise
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise WarpyError(f"{where} is not a GEMM sweep table: {type(e).__name__}: {e}") from None


def read_table(path: os.PathLike[str] | str) -> SweepTable:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise WarpyError(f"{path}: {e.strerror or e}") from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise WarpyError(f"{path} is not JSON: {e}") from None
    return parse_table(data, str(path))


def write_table(t: SweepTable, path: os.PathLike[str] | str) -> None:
    from warpy.cache import atomic_write

    atomic_write(Path(path), (json.dumps(table_json(t), indent=1) + "\n").encode())


_cache: dict[str, tuple[float, SweepTable]] = {}
_derived: dict[int, tuple[SweepTable, dict[tuple[Kind, str], float]]] = {}


def table_path() -> Optional[Path]:
    """The table the rule reads: `WARPY_GEMM_TABLE` (a path, or "none"), else the committed one."""
    env = os.environ.get("WARPY_GEMM_TABLE")
    if env is not None:
        return None if env.lower() in ("", "none") else Path(env)
    return TABLE_PATH


def current_efficiencies(table: SweepTable) -> dict[tuple[Kind, str], float]:
    """`efficiencies(table)`, derived once a table (the rule asks for them at every plan it builds)."""
    hit = _derived.get(id(table))
    if hit is None or hit[0] is not table:
        hit = _derived[id(table)] = (table, efficiencies(table))
    return hit[1]


def current_table() -> SweepTable:
    """The table the rule reads (empty where there is none), re-read when the file changes."""
    path = table_path()
    if path is None or not path.exists():
        return SweepTable()
    mtime = path.stat().st_mtime
    hit = _cache.get(str(path))
    if hit is None or hit[0] != mtime:
        hit = _cache[str(path)] = (mtime, read_table(path))
    return hit[1]


# -- the model's work and the efficiencies derived from the table -------------------------------------

def kind(cfg: Sm90Config) -> Kind:
    """A configuration's kind of tile: (BM, BN, swapped), with (cluster_m, cluster_n) in multicast clusters."""
    base = (cfg.bm, cfg.bn, cfg.swap_ab)
    if cfg.cluster_k > 1:
        return base + (1, 1, True)
    return base if cfg.cluster_size == 1 else base + (cfg.cluster_m, cfg.cluster_n)


def regime_of(m: int) -> str:
    """The regime of a GEMM of M rows (`REGIMES`; SKINNY_M, NARROW_M)."""
    return "skinny" if m <= SKINNY_M else "narrow" if m <= NARROW_M else "wide"


def regime(problem: Any) -> str:
    """The problem's regime (`regime_of` its M), each fitted apart."""
    return regime_of(problem.M)


def work_units(problem: Any, cfg: Sm90Config) -> float:
    """The model's predicted time of the busiest SM at efficiency 1, in k blocks of a 128 x 256 tile
    (`kernels/gemm.py`'s `sm90_cost` divides by the kind's efficiency; in the skinny regime a tile's
    work is the weight it reads, `tile_work`): whole tiles take
    ceil(tiles / SMs) waves of kt k blocks; split / stream-K their share of k blocks and the
    overhead. A and B swapped tile N by BM and M by BN."""
    from .gemm import CLUSTER_K_OVERHEAD, _bk, cluster_waves, stream_k_overhead, tile_work

    rows, cols = (problem.N, problem.M) if cfg.swap_ab else (problem.M, problem.N)
    tiles = cdiv(rows, cfg.bm) * cdiv(cols, cfg.bn) * problem.batch
    kt = cdiv(problem.K, _bk(problem))
    per = tile_work(cfg.bm, cfg.bn, cfg.swap_ab, regime(problem) == "skinny")  # (skinny: the weight it streams)
    if cfg.cluster_size > 1:  # cluster tiles: the busiest cluster's waves
        return cluster_waves(problem, cfg.bm, cfg.bn, cfg.swap_ab, (cfg.cluster_m, cfg.cluster_n)) * kt * per
    if cfg.cluster_k > 1:  # one wave of clusters, each CTA k / S of a tile's blocks
        return (cdiv(kt, cfg.cluster_k) + CLUSTER_K_OVERHEAD) * per
    if not cfg.stream_k:
        return cdiv(tiles, min(cfg.sms, SM90A.sms)) * kt * per
    share = cdiv(kt, cfg.split) if cfg.split else cdiv(tiles * kt, SM90A.sms)
    return (share + stream_k_overhead(problem, cfg.swap_ab)) * per


def _model_row(row: SweepRow) -> list[Measured]:
    """The measurements of a row that the model's configurations are: what `model_config` gives
    for their kind (clustered or not) and schedule (other knobs, group heights, L2 promotions, only
    in lookups)."""
    from .gemm import GemmProblem, model_config

    p = GemmProblem(*row.shape, dtype=row.dtype, out_dtype=row.out_dtype)
    out = []
    for m in row.ok:
        try:
            want = model_config(p, m.config.bm, m.config.bn, m.config.stream_k, m.config.swap_ab,
                                m.config.cluster_k > 1, (m.config.cluster_m, m.config.cluster_n))
        except WarpyError:
            continue
        if want == m.config:
            out.append(m)
    return out


def efficiencies(table: SweepTable, leave_out: Optional[tuple[int, int, int]] = None) -> dict[tuple[Kind, str], float]:
    """Each kind's efficiency per regime (`regime`), derived from the table (rows of `leave_out`'s
    shape skipped): the median over shapes of work_units x µs-per-unit / (measured µs - LAUNCH_US),
    with µs-per-unit the median over the table's 128 x 256 whole-tile measurements of
    (µs - LAUNCH_US) / work_units (US_PER_UNIT where there are none)."""
    from .gemm import GemmProblem

    samples: dict[tuple[Kind, str], list[tuple[float, float]]] = {}  # (units, busy µs)
    for row in table.rows:
        if row.shape == leave_out:
            continue
        p = GemmProblem(*row.shape, dtype=row.dtype, out_dtype=row.out_dtype)
        for m in _model_row(row):
            busy = max(m.us - LAUNCH_US, 0.25 * m.us)
            samples.setdefault((kind(m.config), regime(p)), []).append((work_units(p, m.config), busy))
    ref = [busy / u for key, v in samples.items() if key[0] == REFERENCE for u, busy in v]
    unit = statistics.median(ref) if ref else US_PER_UNIT
    return {key: statistics.median(u * unit / busy for u, busy in v) for key, v in samples.items()}


# -- what the sweep times -------------------------------------------------------------------------------

SWAP_BNS = (16, 32, 48, 64)
WIDE_BNS = (128, 192)
#: the widths of the 64-row whole tiles a narrow shape also times (H200, 2026-12-03, 140 configurations
#: a shape: 64 x 64 was fastest at 128 x 3072 x 3072, 64 x 96 at 128 x 5120 x 3072, 64 x 160 at
#: 256 x 5120 x 5120 and 96 x 8192 x 8192: a tile count that fills the SMs in one wave, deep rings)
NARROW_BNS = (64, 96, 128, 160, 192)
#: the swapped configurations with BN fitted to M that a narrow shape times (`fitted_swaps`): on the
#: H200 the fastest of them was among the model's first four at each of 4 shapes where one won
FITTED_SWAPS = 4
#: the whole-tile configurations with BN fitted to whole waves that a shape above M = 64 times
#: (`fitted_tiles`, the model's first ones): on the H200 (2026-12-04) 128 x 168 ran 256 x 22016 x 4096
#: in 68.7 µs against 70.5 for the tuned 128 x 192 (cuBLAS 65.5), 512 x 11008 x 4096 in 62.3 against 65.8
FITTED_TILES = 3


def candidates(problem: Any, per_shape: int = 10) -> list[Sm90Config]:
    """The configurations the sweep times at a shape (see the module's docstring), the rule's pick first."""
    from .gemm import SCHEDULES, TILE_EFFICIENCY, choose, deepest_ring, model_config, sm90_cost

    pick = choose(problem)
    if not isinstance(pick, Sm90Config):
        raise WarpyError(f"the sweep times sm_90a programs, not {problem.arch}'s")
    kinds: list[Kind] = [(bm, bn, False) for (bm, bn) in TILE_EFFICIENCY]
    reg = regime(problem)
    skinny = reg == "skinny"
    # (the first H200 sweep, 2026-12-02: at M <= 64 the 192-row tiles and 2x1 clusters ran 1.3-4x slower
    # than the fastest at every shape, while A and B swapped was fastest at 17 of 18: a skinny shape's
    # places go to the swapped kinds' schedules instead; a narrow shape's M is one or two 128-row tiles,
    # which 192-row tiles and M-block pairs would leave a third or half empty: its places go to the
    # known kinds, ranked both as computing and as streaming their weight)
    extra: list[Kind] = [] if reg != "wide" else [(64 * MAX_CONSUMERS, bn, False) for bn in WIDE_BNS]
    if skinny:  # BN: the narrowest that holds M, and the next
        narrow = [bn for bn in SWAP_BNS if bn >= problem.M][:2]
        extra += [(bm, bn, True) for bn in narrow for bm in (64, 128)]
    ranked: dict[bool, list[tuple[float, Sm90Config]]] = {False: [], True: []}  # known kinds, new ones
    for k in kinds + extra:
        new = k in extra
        eff = 0.9 if new else TILE_EFFICIENCY[k[0], k[1]]  # (new kinds: a placeholder, only to rank them here)
        for sk, ck in SCHEDULES:
            cost = sm90_cost(problem, k[0], k[1], sk, swap=k[2], eff=eff, cluster_k=ck)
            if math.isfinite(cost):
                try:
                    cfg = model_config(problem, k[0], k[1], sk, k[2], ck)
                    Sm90Gemm(problem, cfg)
                except WarpyError:
                    continue
                ranked[new].append((cost, cfg))
    for v in ranked.values():
        v.sort(key=lambda c: c[0])
    if reg == "narrow":  # the compute-bound ranking's and the streaming one's, alternately
        streamed = sorted(ranked[False], key=lambda c: sm90_cost(problem, c[1].bm, c[1].bn, c[1].stream_k,
                                                                  eff=TILE_EFFICIENCY[c[1].bm, c[1].bn], streaming=True,
                                                                  cluster_k=c[1].cluster_k > 1))
        ranked[False] = [c for pair in zip(ranked[False], streamed) for c in pair]
    out: list[Sm90Config] = [pick]

    def add(cfg: Sm90Config) -> None:
        if not even_slices(cfg):
            return
        if cfg not in out:
            try:
                Sm90Gemm(problem, cfg)
            except WarpyError:
                return
            out.append(cfg)
        twin = staged_twin(problem, cfg)
        if twin is not None and twin not in out:
            out.append(twin)

    add(pick)

    # the new kinds' best schedule each (no hand-fitted efficiency: the sweep is where they are measured first)
    seen: set[Kind] = set()
    for _, cfg in ranked[True]:
        if kind(cfg) not in seen:
            seen.add(kind(cfg))
            add(cfg)
            if cfg.bm == 64 * MAX_CONSUMERS and cfg.bn == max(WIDE_BNS) and cfg.staged_epilogue:
                # 192 x 192's staged epilogue leaves room for 3 stages; C from the registers, for 4; and
                # in 2x1 clusters, B multicast, and in 1x2, A multicast (cuBLAS's "coopB" kernels at
                # large shapes, issue 18: 192 x 192 in 2x1 clusters at 8192 x 28672 x 8192, in 1x2 at 3000^3)
                add(deepest_ring(attrs.evolve(cfg, staged_epilogue=False)))
                for cm, cn in ((2, 1), (1, 2)):
                    add(deepest_ring(attrs.evolve(cfg, cluster_m=cm, cluster_n=cn, stream_k=False, split=0,
                                                  cluster_k=1)))
    if not pick.stream_k and not pick.swap_ab and problem.batch == 1 and reg == "wide":
        add(deepest_ring(attrs.evolve(pick, cluster_m=2, cluster_k=1)))  # coopB-like: B multicast over 2x1 clusters
    # multicast clusters (`cluster_shapes`): of the best swapped kind (skinny: clusters of N-blocks sharing
    # A's box), of the two best known kinds' whole tiles and of 64 x 64 and 64 x 128 tiles (narrow: M's
    # one to four blocks sharing the weight's box, runs of N-blocks sharing A's; the H200's first 4 x 2
    # clusters, 2026-12-03, ran 128 x 3072 x 8192 13% faster than the table's pick)
    whole = [c for _, c in (ranked[True] if skinny else ranked[False] if reg == "narrow" else [])
             if not c.stream_k and c.cluster_k == 1][:1 if skinny else 2]
    if reg == "narrow":
        whole += [model_config(problem, 64, bn, False) for bn in (64, 128)]
    for i, cfg in enumerate(whole):
        for cm, cn in cluster_shapes(problem, cfg, 2 if i == 0 else 1):
            add(deepest_ring(attrs.evolve(cfg, cluster_m=cm, cluster_n=cn)))
    if reg == "narrow":  # the 64-row whole tiles of every width, and 192-row ones where they waste no more rows
        for bn in NARROW_BNS:
            add(model_config(problem, 64, bn, False))
        if cdiv(problem.M, 192) * 192 <= cdiv(problem.M, 128) * 128:
            for bn in WIDE_BNS:
                add(model_config(problem, 64 * MAX_CONSUMERS, bn, False))
    if reg == "narrow" and problem.M % 64 or padded_rows(problem.M):  # A and B swapped, BN fitted to M
        for cfg in fitted_swaps(problem)[:FITTED_SWAPS]:
            add(cfg)
    if (problem.K * 2) % 32:  # rows 16- but not 32-byte aligned: the L2 promotion decides much (issue 18)
        for l2 in (256, 64, 0):
            add(attrs.evolve(pick, l2_promotion=l2))
    if reg != "skinny":  # whole tiles with BN fitted to whole waves of the SMs (`fitted_tiles`), the
        # first also in the multicast cluster that loads the fewest rows (`cluster_shapes`; cuBLAS runs
        # its 168-column tiles at 256 x 22016 x 4096 in clusters of 2)
        fitted = fitted_tiles(problem)[:FITTED_TILES]
        for i, cfg in enumerate(fitted):
            add(cfg)
            for cm, cn in cluster_shapes(problem, cfg, 1) if i == 0 else ():
                add(deepest_ring(attrs.evolve(cfg, cluster_m=cm, cluster_n=cn)))
    # then the known kinds by the model's rank and the new kinds' other schedules (those first where skinny)
    for _, cfg in (ranked[True] + ranked[False] if skinny else ranked[False] + ranked[True]):
        if len(out) >= per_shape:
            break
        add(cfg)
    return out[:max(per_shape, 1)]


def staged_twin(problem: Any, cfg: Sm90Config) -> Optional[Sm90Config]:
    """A and B swapped with C^T from the registers, above the skinny regime: the same tile with the
    staged epilogue (STSM.MT88 and TMA stores, the deepest ring beside it) where that builds. On the
    H200 (2026-12-04) it ran 777 x 3584 x 3584's 256 x 88 swapped tile in 32.2 µs against 34.8,
    150 x 28672 x 4096's 128 x 152 in 70.5 against 73.0, 200 x 18944 x 3584's 128 x 200 stream-K in
    51.7 against 54.0; at M <= 64 (C^T 16 to 48 columns) it moved nothing (docs/performance.md)."""
    if regime(problem) == "skinny" or not cfg.swap_ab or cfg.staged_epilogue or cfg.cluster_k > 1:
        return None
    from .gemm import deepest_ring

    twin = deepest_ring(attrs.evolve(cfg, staged_epilogue=True))
    try:
        Sm90Gemm(problem, twin)
    except WarpyError:
        return None
    return twin


#: a wide M that 128-row tiles pad by more than this share of its rows also times A and B swapped
#: with BN fitted to M (`fitted_swaps`): 777 rows pad to 896 (15%), where cuBLAS runs 256 x 88 swapped
PADDING_SWAP = 0.04
#: a wide M's swapped tiles cut M into at most this many blocks of BN
WIDE_SWAP_BLOCKS = 12


def padded_rows(m: int) -> bool:
    """Whether a wide M is worth A and B swapped: 128-row tiles pad it by more than PADDING_SWAP."""
    return regime_of(m) == "wide" and cdiv(m, 128) * 128 - m > PADDING_SWAP * m


def fitted_bns(m: int, blocks: Sequence[int] = (1, 2)) -> list[int]:
    """The BNs that hold `m` rows in each number of `blocks`, rounded up to whole 8-row groups (the
    MMA's N step): at most 7 rows of padding a block, where 64-row tiles may leave up to 63."""
    return sorted({bn for b in blocks if 16 <= (bn := cdiv(cdiv(m, b), 8) * 8) <= 256})


def fitted_swaps(problem: Any) -> list[Sm90Config]:
    """A and B swapped with BN fitted to M (`fitted_bns`), ranked by the model at a placeholder
    efficiency (a wide M's: `interpolated_efficiency`); those that build. A narrow M (one or two
    blocks): B's rows along 64- or 128-row tiles, each schedule, C^T from the registers (as the
    sweep's table timed them). On the H200 (2026-12-03)
    64 x 96 swapped ran 96 x 4608 x 3584 in 14.7 µs against 15.9 for the fastest of the 16 tuned
    candidates (cuBLAS 15.0), 64 x 200 split 2 ways 200 x 3584 x 18944 in 49.8 against 55.4 (cuBLAS
    51.5); cuBLAS itself swaps at such shapes (64 x 96, 64 x 104 tiles). A wide M that 128-row tiles
    pad (`padded_rows`): up to WIDE_SWAP_BLOCKS blocks, 128- or 256-row whole tiles (two warpgroups of
    128 rows: cuBLAS's 256 x 88 at 777 x 3584 x 3584), C^T staged."""
    from .gemm import SCHEDULES, model_config, sm90_cost

    ranked: list[tuple[float, Sm90Config]] = []
    wide = regime(problem) == "wide"
    bns = fitted_bns(problem.M, range(2, WIDE_SWAP_BLOCKS + 1)) if wide else fitted_bns(problem.M)
    for bn in bns:
        for bm in (128, 256) if wide else (64, 128):
            for sk, ck in SCHEDULES[:1] if wide else SCHEDULES:
                # (a wide M's narrow BN feeds few products a loaded byte: priced by `interpolated_efficiency`)
                eff = interpolated_efficiency(bm, bn) if wide else 0.9
                cost = sm90_cost(problem, bm, bn, sk, swap=True, eff=eff, cluster_k=ck)
                if not math.isfinite(cost):
                    continue
                try:
                    cfg = model_config(problem, bm, bn, sk, True, ck, staged_swap=wide)
                    Sm90Gemm(problem, cfg)
                except WarpyError:
                    continue
                ranked.append((cost, cfg))
    ranked.sort(key=lambda c: c[0])
    return [c for _, c in ranked]


def wave_bns(rows: int, cols: int, bm: int, top: int = 256, waves: int = 8) -> list[int]:
    """The BNs, 64..`top` in whole 8-column groups, that cut `cols` into as few blocks as fill 1 to
    `waves` whole waves of the SMs beside cdiv(rows, bm) blocks of rows: w waves hold w·SMs // mt
    blocks of N, BN the narrowest 8 columns that many cover. The table's widths (64, 128, ..., 256)
    leave a last wave ragged wherever their tile count is just past a multiple of the SMs (128 x 192
    tiles at 256 x 22016: 230 tiles, 1.74 waves)."""
    mt = cdiv(rows, bm)
    out = set()
    for w in range(1, waves + 1):
        nt = w * SM90A.sms // mt
        if nt >= 1 and 64 <= (bn := cdiv(cdiv(cols, nt), 8) * 8) <= top:
            out.add(bn)
    return sorted(out)


def interpolated_efficiency(bm: int, bn: int) -> float:
    """The hand-fitted efficiency (`TILE_EFFICIENCY`) of a BM x BN tile, interpolated linearly in BN
    between the widths measured at that BM (128's for 192- and 256-row tiles), held flat past the
    widest; below the narrowest, scaled by the products a loaded element feeds (1 / (1/BM + 1/BN)):
    a 128 x 32 tile loads 2.5 times the bytes a product of 128 x 256's. A placeholder that ranks
    widths the table has no kind for."""
    from .gemm import TILE_EFFICIENCY

    rows = bm if any(b == bm for b, _ in TILE_EFFICIENCY) else 128
    pts = sorted((n, e) for (b, n), e in TILE_EFFICIENCY.items() if b == rows)
    if bn <= pts[0][0]:
        n0, e0 = pts[0]
        return e0 * (1 / rows + 1 / n0) / (1 / rows + 1 / bn)
    for (n0, e0), (n1, e1) in zip(pts, pts[1:]):
        if bn <= n1:
            return e0 + (e1 - e0) * (bn - n0) / (n1 - n0)
    return pts[-1][1]


def fitted_tiles(problem: Any) -> list[Sm90Config]:
    """Whole tiles of 64, 128 or 192 rows with BN fitted to whole waves (`wave_bns`), widths the
    table's kinds lack, ranked by the model at the interpolated efficiency (`interpolated_efficiency`);
    configured as the model configures any tile (`model_config`; C from the registers where that does
    not build); those that build. cuBLAS cuts N so at 256 x 22016 x 4096 (168-column blocks: 264 tiles,
    2 waves)."""
    from .gemm import TILE_EFFICIENCY, deepest_ring, model_config, sm90_cost

    known = {bn for _, bn in TILE_EFFICIENCY} | set(WIDE_BNS) | set(NARROW_BNS)  # widths timed anyway
    ranked: list[tuple[float, Sm90Config]] = []
    for consumers in range(1, MAX_CONSUMERS + 1):
        bm = 64 * consumers
        for bn in wave_bns(problem.M, problem.N, bm, 192 if consumers == MAX_CONSUMERS else 256):
            if bn in known:
                continue
            cost = sm90_cost(problem, bm, bn, False, eff=interpolated_efficiency(bm, bn))
            cfg = model_config(problem, bm, bn, False)
            for c in (cfg, attrs.evolve(cfg, staged_epilogue=False)):
                try:
                    Sm90Gemm(problem, c)
                except WarpyError:
                    continue
                ranked.append((cost, deepest_ring(c) if c is not cfg else c))
                break
    ranked.sort(key=lambda c: c[0])
    return [c for _, c in ranked]


def cluster_shapes(problem: Any, cfg: Sm90Config, count: int = 2) -> list[tuple[int, int]]:
    """The `count` multicast clusters (cluster_m, cluster_n) worth timing for a whole-tile
    configuration: those whose CTAs issue the fewest rows of TMA loads a k block (BM / cluster_n of A's
    box, BN / cluster_m of B's; the larger cluster first where they tie), no wider along M or N than
    its blocks there (rounded up to a power of 2), the program builds, and no more waves than
    without clusters (`cluster_waves`: clusters of 4 and 8 do not all fit on the H200 at once)."""
    from .gemm import cluster_waves

    rows, cols = (problem.N, problem.M) if cfg.swap_ab else (problem.M, problem.N)
    mt, nt = cdiv(rows, cfg.bm), cdiv(cols, cfg.bn)
    whole = cluster_waves(problem, cfg.bm, cfg.bn, cfg.swap_ab, (1, 1))
    opts = []
    for cm in CLUSTER_SIDES:
        for cn in CLUSTER_SIDES:
            if not 2 <= cm * cn <= MAX_CLUSTER or cm >= 2 * mt or cn >= 2 * nt:
                continue
            if cluster_waves(problem, cfg.bm, cfg.bn, cfg.swap_ab, (cm, cn)) > whole:
                continue
            if not even_slices(attrs.evolve(cfg, cluster_m=cm, cluster_n=cn)):
                continue
            try:
                Sm90Gemm(problem, attrs.evolve(cfg, cluster_m=cm, cluster_n=cn))
            except WarpyError:
                continue
            opts.append((cfg.bm / cn + cfg.bn / cm, -cm * cn, (cm, cn)))
    return [o[2] for o in sorted(opts)[:count]]


# -- the report ----------------------------------------------------------------------------------------

@attrs.frozen
class Verdict:
    """One shape of a table: its fastest measurement, the model's pick and the nearest shape's pick
    (each with this shape left out of what it learns from) and their times there (None: not measured)."""

    shape: tuple[int, int, int]
    best: Measured
    pick: Sm90Config
    pick_us: Optional[float]  # None: the model's pick was not measured at this shape
    cublas_us: Optional[float]
    near: Optional[Sm90Config] = None
    near_us: Optional[float] = None

    @property
    def miss(self) -> Optional[float]:
        """How much slower the model's pick ran than the fastest measured (0.02 = 2%)."""
        return None if self.pick_us is None else self.pick_us / self.best.us - 1.0

    @property
    def near_miss(self) -> Optional[float]:
        """How much slower the nearest shape's pick ran than the fastest measured."""
        return None if self.near_us is None else self.near_us / self.best.us - 1.0


def verdicts(table: SweepTable) -> list[Verdict]:
    """Per shape: the model's pick with efficiencies derived from the other shapes, and the nearest
    other shape's fastest configuration carried over (`nearest`), against the best."""
    from .gemm import GemmProblem, model_choose

    out = []
    for row in table.rows:
        best = row.best
        if best is None:
            continue
        p = GemmProblem(*row.shape, dtype=row.dtype, out_dtype=row.out_dtype)
        pick = model_choose(p, efficiencies(table, leave_out=row.shape))
        near = nearest(table, p, leave_out=row.shape)
        out.append(Verdict(row.shape, best, pick, row.time_of(pick), row.cublas_us, near,
                           None if near is None else row.time_of(near)))
    return out


# -- the nearest measured shape -------------------------------------------------------------------------

def _distance(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    return sum(abs(math.log2(x / y)) for x, y in zip(a, b))


def _swap_bn(m: int, src_m: int, src_bn: int) -> int:
    """A swapped tile's BN (M's side) carried from a shape of `src_m` rows to one of `m`: as many steps
    of SWAP_BNS past the narrowest that holds M as it was past the narrowest that held `src_m` (a BN of
    16 carried from M = 16 to M = 32 would split M in two and read the weight twice)."""
    def narrowest(x: int) -> int:
        return next((i for i, b in enumerate(SWAP_BNS) if b >= x), len(SWAP_BNS) - 1)

    step = SWAP_BNS.index(src_bn) - narrowest(src_m) if src_bn in SWAP_BNS else 0
    return SWAP_BNS[min(max(narrowest(m) + step, 0), len(SWAP_BNS) - 1)]


def carry(cfg: Sm90Config, problem: Any, src_m: Optional[int] = None) -> Optional[Sm90Config]:
    """A configuration measured at another shape (of `src_m` rows, where known) carried to `problem`:
    its kind of tile and schedule (whole tiles, K split, stream-K) as the model configures them for
    this problem (split, staged epilogue, ring depth; with A and B swapped, BN as far past the
    narrowest holding M as it was: `_swap_bn`), with the measured clusters, group height and L2
    promotion where rows are aligned alike; None where that does not build for it."""
    from .gemm import deepest_ring, model_config

    bn = _swap_bn(problem.M, src_m, cfg.bn) if cfg.swap_ab and src_m is not None else cfg.bn
    try:
        out = model_config(problem, cfg.bm, bn, cfg.stream_k, cfg.swap_ab, cfg.cluster_k > 1)
        same_rows = (cfg.l2_promotion == 256) == (out.l2_promotion == 256)
        out = attrs.evolve(out, cluster_m=cfg.cluster_m, cluster_n=cfg.cluster_n, group=cfg.group,
                           l2_promotion=cfg.l2_promotion if same_rows else out.l2_promotion,
                           staged_epilogue=out.staged_epilogue and cfg.staged_epilogue)
        out = deepest_ring(out)
        Sm90Gemm(problem, out)
    except WarpyError:
        return None
    return out if even_slices(out) else None


def nearest(table: SweepTable, problem: Any, leave_out: Optional[tuple[int, int, int]] = None) -> Optional[Sm90Config]:
    """The fastest configuration of the measured shape nearest to `problem` (same input type and
    regime; distance: the sum of |log2| of the ratios of M, N and K, half a step more for another
    output type), carried over (`carry`); None where the table has no such shape or the problem is
    not `plain`."""
    if not plain(problem):
        return None
    shape = (problem.M, problem.N, problem.K)
    rows = [r for r in table.rows if r.shape != leave_out and r.dtype == problem.dtype and r.best is not None
            and regime_of(r.shape[0]) == regime(problem)]
    if not rows:
        return None
    row = min(rows, key=lambda r: (_distance(r.shape, shape) + (0.5 if r.out_dtype != problem.out_dtype else 0.0),
                                   r.shape))
    best = row.best
    assert best is not None
    return carry(best.config, problem, row.shape[0])


def strategy(table: SweepTable, tolerance: float = 0.03) -> dict[str, str]:
    """How the rule picks for a shape the table has not measured, per regime the table holds:
    "nearest" where carrying the nearest shape's fastest configuration was within `tolerance` of the
    fastest at more of the regime's shapes than the model's pick (each shape left out of what it
    learns from), else "model"."""
    out = {}
    every = verdicts(table)
    for reg in REGIMES:
        vs = [v for v in every if regime_of(v.shape[0]) == reg]
        if vs:
            model = sum(v.miss is not None and v.miss <= tolerance for v in vs)
            near = sum(v.near_miss is not None and v.near_miss <= tolerance for v in vs)
            out[reg] = "nearest" if near > model else "model"
    return out


def _rule_miss(v: "Verdict", strategies: dict[str, str]) -> Optional[float]:
    """The miss of what the rule would run at the verdict's shape had the table not measured it."""
    return v.near_miss if strategies.get(regime_of(v.shape[0])) == "nearest" and v.near is not None else v.miss


def report(table: SweepTable, tolerance: float = 0.03) -> tuple[str, dict[str, Any]]:
    """The table, shape by shape: fastest measured configuration, the rule's model's pick (leave one
    out) and its miss, cuBLAS; then how often the pick is within `tolerance` of the best."""
    from warpy.bench import cell, format_table

    from .gemm_bench import shape_text

    vs = verdicts(table)
    body = []

    def miss(x: Optional[float]) -> str:
        return "not measured" if x is None else f"{100 * x:+.1f}%"

    for v in vs:
        body.append([shape_text(v.shape), config_text(v.best.config), f"{v.best.us:.1f}", config_text(v.pick),
                     cell(v.pick_us, ".1f"), miss(v.miss), miss(v.near_miss),
                     cell(None if v.cublas_us is None else v.cublas_us / v.best.us, ".3f")])
    near_within = sum(v.near_miss is not None and v.near_miss <= tolerance for v in vs)
    strategies = strategy(table, tolerance)
    rule_misses = [_rule_miss(v, strategies) for v in vs]
    rule_within = sum(m is not None and m <= tolerance for m in rule_misses)
    within = [v for v in vs if v.miss is not None and v.miss <= tolerance]
    measured = [v for v in vs if v.miss is not None]
    misses = sorted((v.miss for v in measured if v.miss is not None), reverse=True)
    summary = {"shapes": len(vs), "pick_measured": len(measured), "within": len(within), "tolerance": tolerance,
               "share_within": (len(within) / len(vs)) if vs else None,
               "worst_miss": misses[0] if misses else None,
               "geomean_best_vs_cublas": _geomean([v.cublas_us / v.best.us for v in vs if v.cublas_us]),
               "min_best_vs_cublas": min((v.cublas_us / v.best.us for v in vs if v.cublas_us), default=None),
               "nearest_within": near_within, "strategy": strategies, "rule_within": rule_within,
               "rule_share_within": (rule_within / len(vs)) if vs else None}
    head = ["shape", "fastest measured", "µs", "model's pick (this shape left out)", "µs", "miss",
            "nearest shape's pick: miss", "cuBLAS / fastest"]
    text = format_table(head, body, [False, False, True, False, True, True, True, True])
    text += ("\nat a shape of this table the rule runs its fastest configuration (its lookup); the model, each shape "
             "left out of its own fit, is what unmeasured shapes get:"
             f"\nthe model's pick within {100 * tolerance:.0f}% of the fastest at {len(within)} of {len(vs)} shapes"
             + (f" ({100 * len(within) / len(vs):.0f}%)" if vs else "")
             + f"; picks not measured: {len(vs) - len(measured)}"
             + (f"; worst miss {100 * misses[0]:+.1f}%" if misses else "")
             + f"\nthe nearest shape's pick within {100 * tolerance:.0f}% at {near_within} of {len(vs)}"
             + "\nunmeasured shapes get, by regime: " + ", ".join(f"{r} the {s}'s pick" for r, s in strategies.items())
             + f"; that pick within {100 * tolerance:.0f}% at {rule_within} of {len(vs)}"
             + (f" ({100 * rule_within / len(vs):.0f}%)" if vs else "") + "\n")
    return text, summary


def _geomean(xs: Sequence[float]) -> Optional[float]:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


# -- the sweep on the GPU --------------------------------------------------------------------------------

def _build_entry(args: tuple[tuple[int, int, int], str, str, dict[str, Any]]) -> tuple[str, str, str]:
    """(describe, SASS text, PTX) of one configuration, assembled once (ptxas's cache then holds the
    cubin): in a worker process, the CPU's share of a plan."""
    from warpy.lift.lifter import lift
    from warpy.lift.ptxas import FAILING_KINDS, assemble

    from .gemm import GemmProblem, build

    shape, dtype, out_dtype, cfg_d = args
    problem = GemmProblem(*shape, dtype=dtype, out_dtype=out_dtype)
    cfg = config_of(cfg_d)
    kernel = build(problem, cfg).kernel()
    ptx = lift(kernel, "sm_90a")
    assemble(ptx, "sm_90a", allow=FAILING_KINDS)
    return cfg.describe(), str(kernel), ptx


def _iters_for(us_guess: float, target_us: float = 3000.0) -> int:
    return max(3, min(20, int(target_us / max(us_guess, 1.0))))


_sweeps = [0]  # sweeps running in this process


def sweeping() -> bool:
    """Whether a sweep is running here: its rule (the first candidate of a shape) is the committed
    table's and the model's, not what this machine tuned (kernels/gemm_tune.py)."""
    return _sweeps[0] > 0


#: what times one shape: (the problem, its configurations, each one's built entry (describe, SASS,
#: PTX) or the error that stopped it) -> (cuBLAS's µs, a Measured a configuration)
Timer = Callable[[Any, Sequence[Sm90Config], Sequence[Any]], tuple[Optional[float], list[Measured]]]


def run_sweep(shapes: Sequence[tuple[int, int, int]], out: Optional[str], dtype: str = "bf16", out_dtype: str = "bf16",
              per_shape: int = 10, echo: Callable[[str], None] = print, command: str = "",
              timer: Optional[Timer] = None, workers: Optional[int] = None, gpu: str = "",
              second_pass: bool = True) -> SweepTable:
    """Time `candidates` of every shape and cuBLAS (`timer`; the GPU's by default: `gpu_timer`), the
    table written to `out` after every shape (a run cut short keeps what it measured). The programs
    are built and assembled by a pool of `workers` processes (None: one a core but one; 0: a thread
    of this process) while the GPU times the shapes before. `second_pass`: then time the model's and
    the nearest shape's picks (each shape left out) that the first pass did not, and set the table's
    strategy (what `--sweep-report` judges; a shape tuned on first use needs neither)."""
    if timer is None:
        from warpy.bench import gpu_reason
        from warpy.errors import NoGPU

        why = gpu_reason("sm_90a")
        if why is not None:
            raise NoGPU(f"warpy bench gemm --sweep needs an sm_90 GPU: {why.rstrip('.')}; `warpy bench gemm "
                        "--sweep-report FILE` reads a table without one")
    _sweeps[0] += 1
    try:
        return _run_sweep(shapes, out, dtype, out_dtype, per_shape, echo, command, timer, workers, gpu, second_pass)
    finally:
        _sweeps[0] -= 1


def _run_sweep(shapes: Sequence[tuple[int, int, int]], out: Optional[str], dtype: str, out_dtype: str, per_shape: int,
               echo: Callable[[str], None], command: str, timer: Optional[Timer], workers: Optional[int], gpu: str,
               second_pass: bool) -> SweepTable:
    import concurrent.futures as cf
    import multiprocessing

    from .gemm import GemmProblem
    from .gemm_bench import shape_text

    start = time.monotonic()
    problems = [GemmProblem(*s, dtype=dtype, out_dtype=out_dtype) for s in shapes]
    todo = [(p, candidates(p, per_shape)) for p in problems]
    n_cfg = sum(len(c) for _, c in todo)
    workers = max(1, min(16, (os.cpu_count() or 2) - 1)) if workers is None else workers
    echo(f"sweep: {len(todo)} shapes, {n_cfg} configurations ({dtype} in, {out_dtype} out); built by "
         f"{workers or 'a thread of this'} process{'es' if workers else ''} while the GPU times")
    time_one = timer or gpu_timer()  # (torch and the GPU first: a refusal leaves no pool behind)
    gpu = gpu or _gpu_name()
    kept, before = _kept_rows(out, gpu, {((p.M, p.N, p.K), dtype, out_dtype) for p in problems}, echo)
    rows: list[SweepRow] = list(kept)
    today = time.strftime("%Y-%m-%d")
    # a table that kept rows says every sweep it holds: its commands, in order, rebuild it
    table = SweepTable(tuple(rows), gpu, today if before is None or before.date in ("", today) else f"{before.date}, {today}",
                       command if before is None or not before.command else f"{before.command} ; {command}")
    pool: cf.Executor = (cf.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
                         if workers else cf.ThreadPoolExecutor(max_workers=1))
    try:
        futures = [[pool.submit(_build_entry, ((p.M, p.N, p.K), dtype, out_dtype, config_dict(c))) for c in cfgs]
                   for p, cfgs in todo]
        for i, ((p, cfgs), futs) in enumerate(zip(todo, futures)):
            shape = (p.M, p.N, p.K)
            entries: list[Any] = []
            for fut in futs:
                try:
                    entries.append(fut.result())
                except Exception as e:  # a configuration that cannot build is a row's note
                    entries.append(e)
            cublas_us, measured = time_one(p, cfgs, entries)
            row = SweepRow(shape, dtype, out_dtype, cublas_us, tuple(measured))
            rows.append(row)
            table = attrs.evolve(table, rows=tuple(rows))
            if out:
                write_table(table, out)
            best = row.best
            el = time.monotonic() - start
            eta = el / (i + 1) * (len(todo) - i - 1)
            print(f"[{i + 1}/{len(todo)} {el:.0f} s, ~{eta:.0f} s left] {shape_text(shape)}: cuBLAS "
                  f"{_fmt(row.cublas_us)} µs, fastest "
                  f"{'—' if best is None else f'{best.us:.1f} µs ({config_text(best.config)})'}"
                  f", rule {_fmt(row.time_of(cfgs[0]))} µs; {sum(m.check != 'ok' for m in measured)} not ok",
                  file=sys.stderr, flush=True)
        if not second_pass:
            return table
        # a second pass: the model's pick at each shape with the others' efficiencies (what the report
        # judges) where the first pass did not time it
        extra: dict[tuple[int, int, int], list[Sm90Config]] = {}
        alike = attrs.evolve(table, rows=tuple(r for r in rows if (r.dtype, r.out_dtype) == (dtype, out_dtype)))
        for v in verdicts(alike):
            for c, us in ((v.pick, v.pick_us), (v.near, v.near_us)):
                if c is not None and us is None and c not in extra.setdefault(v.shape, []):
                    extra[v.shape].append(c)
        swept = {(p.M, p.N, p.K) for p in problems}  # (a kept row's picks are its own sweep's to time)
        todo2 = [(shape, cfgs) for shape, cfgs in extra.items() if cfgs and shape in swept]
        if todo2:
            echo(f"sweep: timing {sum(len(c) for _, c in todo2)} picks (the model's, the nearest shape's) the first "
                 "pass did not")
        by_shape = {r.shape: i for i, r in enumerate(rows) if (r.dtype, r.out_dtype) == (dtype, out_dtype)}
        for shape, cfgs in todo2:
            j = by_shape[shape]
            p = GemmProblem(*shape, dtype=dtype, out_dtype=out_dtype)
            futs2 = [pool.submit(_build_entry, (shape, dtype, out_dtype, config_dict(c))) for c in cfgs]
            entries2: list[Any] = []
            for fut in futs2:
                try:
                    entries2.append(fut.result())
                except Exception as e:
                    entries2.append(e)
            _, more = time_one(p, cfgs, entries2)
            rows[j] = attrs.evolve(rows[j], measured=rows[j].measured + tuple(more))
            table = attrs.evolve(table, rows=tuple(rows))
            if out:
                write_table(table, out)
        table = attrs.evolve(table, strategy=strategy(table))
        if out:
            write_table(table, out)
    finally:
        pool.shutdown(cancel_futures=True)
    return table


def _kept_rows(out: Optional[str], gpu: str, swept: set[tuple[tuple[int, int, int], str, str]],
               echo: Callable[[str], None]) -> tuple[tuple[SweepRow, ...], Optional[SweepTable]]:
    """The rows of an existing table at `out` that this sweep does not measure again, so that a sweep of
    a few shapes adds to a table rather than replacing it, and that table (None: none kept); a table
    of another GPU is refused in one line (its times do not mix with this one's)."""
    if out is None or not Path(out).exists():
        return (), None
    old = read_table(out)
    if old.gpu and old.gpu != gpu:
        raise WarpyError(f"{out} holds a sweep of {old.gpu}, not {gpu}: give another --out")
    kept = tuple(r for r in old.rows if (r.shape, r.dtype, r.out_dtype) not in swept)
    if not kept:
        return (), None
    echo(f"sweep: keeping {len(kept)} rows of {out} that this sweep does not measure")
    return kept, old


def _gpu_name() -> str:
    try:
        from warpy import runtime as rt

        return str(rt.device().name)
    except Exception:
        return ""


def _error_note(e: BaseException) -> str:
    first = str(e).splitlines()[0] if str(e) else ""
    return f"error: {type(e).__name__}: {first}"[:200]


def gpu_timer() -> Timer:
    """The GPU's timer: one shape's inputs (random normal, rotated through several sets where they
    fit the L2), each configuration's plan loaded and launched on torch's stream, cuBLAS (torch.mm)
    and the configurations timed in two interleaved rounds (cuBLAS then the configurations, then
    cuBLAS and the configurations in reverse order; median per-call GPU time), each configuration's C
    checked against an fp32 torch product."""
    from warpy.bench import cuda_torch, gpu_times_us, kernel_of, l2_bytes, rotation
    from warpy.lift.ptxas import FAILING_KINDS, assemble
    from warpy.plan import Plan, _header_of
    from warpy.runtime.bind import DeviceSpan, FastLaunch
    from warpy.runtime.driver import cuda

    from .gemm import FAMILY, bind
    from .gemm_bench import _bench_check, _cublas_call, operand_bytes

    torch = cuda_torch("warpy bench gemm --sweep compares with cuBLAS through torch")
    dev = torch.device("cuda", 0)
    stream_handle = int(torch.cuda.current_stream(dev).cuda_stream)
    cu_stream = cuda().CUstream(stream_handle)
    l2 = l2_bytes()

    def time_one(p: Any, cfgs: Sequence[Sm90Config], entries: Sequence[Any]) -> tuple[Optional[float], list[Measured]]:
        tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}[p.dtype]
        todt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[p.out_dtype]
        sets = rotation(operand_bytes((p.M, p.N, p.K), 2, 4 if p.out_dtype == "fp32" else 2), l2)
        g = torch.Generator(device=dev).manual_seed(0)
        A = [torch.randn((p.M, p.K), device=dev, dtype=tdt, generator=g) for _ in range(sets)]
        B = [torch.randn((p.N, p.K), device=dev, dtype=tdt, generator=g) for _ in range(sets)]
        C = [torch.empty((p.M, p.N), device=dev, dtype=todt) for _ in range(sets)]
        cublas = _cublas_call(torch, todt)

        def span(t: Any) -> DeviceSpan:
            return DeviceSpan(t.data_ptr(), t.numel() * t.element_size())

        runs: list[Optional[Callable[[int], None]]] = []
        notes: list[str] = []
        fasts: list[Any] = []
        for cfg, entry in zip(cfgs, entries):
            try:
                if isinstance(entry, BaseException):
                    raise entry
                describe, sass, ptx = entry
                cubin = assemble(ptx, "sm_90a", allow=FAILING_KINDS)
                plan = Plan(FAMILY, p, describe, _header_of(sass), sass, ptx, cubin, False, cfg, None)
                fast = FastLaunch(kernel_of(plan), plan.header)
                fasts.append(fast)

                def run(j: int, plan: Plan = plan, fast: Any = fast) -> None:
                    k = j % sets
                    fast(k, lambda scratch: bind(plan.header, span(A[k]), span(B[k]), span(C[k]), p.M, p.N, p.K,
                                                 scratch=scratch), stream_handle)

                run(0)
                runs.append(run)
                notes.append("ok")
            except Exception as e:  # a configuration that cannot build or launch is a row's note
                runs.append(None)
                notes.append(_error_note(e))

        def run_c(j: int) -> None:
            k = j % sets
            cublas(A[k], B[k], C[k])

        try:
            run_c(0)
            torch.cuda.synchronize()
            iters = _iters_for(statistics.median(gpu_times_us(run_c, cu_stream, 3)))
            times: list[list[float]] = [[] for _ in cfgs]
            ctimes: list[float] = []
            order = list(range(len(cfgs)))
            for rnd in range(2):
                ctimes += gpu_times_us(run_c, cu_stream, iters)
                for j in (order if rnd == 0 else order[::-1]):
                    fn = runs[j]
                    if fn is None:
                        continue
                    try:
                        times[j] += gpu_times_us(fn, cu_stream, iters)
                    except Exception as e:
                        runs[j], notes[j] = None, _error_note(e)
            measured = []
            for j, cfg in enumerate(cfgs):
                fn = runs[j]
                if fn is None or not times[j]:
                    measured.append(Measured(cfg, -1.0, notes[j]))
                    continue
                C[0].fill_(float("nan"))
                fn(0)
                measured.append(Measured(cfg, statistics.median(times[j]), _bench_check(torch, A[0], B[0], C[0], p.K)))
            return statistics.median(ctimes), measured
        finally:
            torch.cuda.synchronize()
            for f in fasts:
                f.scratch.free()
            del A, B, C
            torch.cuda.empty_cache()

    return time_one


def _fmt(x: Optional[float]) -> str:
    return "—" if x is None else f"{x:.1f}"


def plain(problem: Any) -> bool:
    """A problem like the sweep's: sm_90a, no fused epilogue, batch, pitches, MN-major operands or
    8-bit float scales (what a measured configuration is known to fit)."""
    return bool(problem.epilogue.identity and problem.batch == 1 and not problem.pitched and problem.a_major == "K"
                and problem.b_major == "K" and problem.arch == "sm_90a" and not problem.b_dtype
                and not problem.scale_a and not problem.scale_b)


def lookup(problem: Any, table: Optional[SweepTable] = None) -> Optional[Sm90Config]:
    """The fastest configuration the table measured for exactly this problem (a plain one: no fused
    epilogue, batch, pitches or MN-major operands), if it builds for it; else None."""
    if not plain(problem):
        return None
    t = current_table() if table is None else table
    row = t.row((problem.M, problem.N, problem.K), problem.dtype, problem.out_dtype)
    best = None if row is None else row.best
    if best is None:
        return None
    try:
        Sm90Gemm(problem, best.config)
    except WarpyError:
        return None
    return best.config


__all__ = [
    "ISSUE_SHAPES", "LAUNCH_US", "Measured", "REFERENCE", "SKINNY_M", "SweepRow", "SweepTable", "TABLE_PATH",
    "Verdict", "candidates", "config_dict", "config_of", "config_text", "current_table", "default_shapes",
    "carry", "efficiencies", "kind", "llama_layers", "LAYER_TOKENS", "lookup", "nearest", "parse_table", "strategy", "read_table", "regime", "report", "run_sweep", "table_json",
    "table_path", "verdicts", "work_units", "write_table",
]
