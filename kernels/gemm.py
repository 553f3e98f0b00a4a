"""Which GEMM program runs a problem: the problem, the rule that picks a configuration from its
shape, and the builder. `warpy gemm`, `warpy bench` and `warpy.gemm` all go through here.

C = A · Bᵀ with A (M x K) and B (N x K), both K-major (row-major with K contiguous), fp16 or bf16
in, fp32 accumulation, C (M x N) row-major in fp32 or the input type.
"""

from __future__ import annotations

from typing import Callable, Union

import attrs

from .gemm_sm90 import Sm90Config, Sm90Gemm, smem_bytes
from .gemm_sm100 import Sm100Config, Sm100Gemm, choose_sm100
from .schedule import cdiv
from warpy.errors import WarpyError
from warpy.isa.program import Program
from warpy.target import SM90A, dtype, dtype_bytes, target

#: the element types warpy's GEMM programs take (A and B) and give (C), canonical names
IN_DTYPES = ("bf16", "fp16")
OUT_DTYPES = ("fp32", "bf16", "fp16")

Config = Union[Sm90Config, Sm100Config]

def _type_in(allowed: tuple[str, ...], what: str) -> Callable[[str], str]:
    def convert(value: str) -> str:
        try:
            name = dtype(value).name
        except Exception:
            name = ""
        if name not in allowed:
            raise WarpyError(f"{what} type {value!r} is not one of {', '.join(allowed)}")
        return name

    return convert


@attrs.frozen
class GemmProblem:
    """One GEMM: shapes, types and target. Anything warpy cannot run is refused in one line."""

    M: int
    N: int
    K: int
    dtype: str = attrs.field(default="bf16", converter=_type_in(IN_DTYPES, "input"))
    out_dtype: str = attrs.field(default="fp32", converter=_type_in(OUT_DTYPES, "output"))
    arch: str = attrs.field(default="sm_90a", converter=lambda a: target(a).name)

    def __attrs_post_init__(self) -> None:
        for name in ("M", "N", "K"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise WarpyError(f"{name} must be an integer, not {v!r}")
        if self.M < 1 or self.N < 1:
            raise WarpyError(f"M and N must be at least 1 (got M={self.M}, N={self.N})")
        if self.K < 8:
            raise WarpyError(f"K must be at least 8 (got {self.K})")
        row = self.K * dtype_bytes(self.dtype)
        if row % 16:
            raise WarpyError(
                f"K={self.K} rows of {self.dtype} are {row} bytes; TMA needs a multiple of 16 "
                f"(K a multiple of {16 // dtype_bytes(self.dtype)})"
            )

    @property
    def flops(self) -> int:
        return 2 * self.M * self.N * self.K

    def __str__(self) -> str:
        return f"{self.M}x{self.N}x{self.K} {self.dtype}->{self.out_dtype} {self.arch}"


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
    ring is as deep as shared memory allows; 16-bit C with TMA-addressable rows goes out through
    shared memory and TMA stores, overlapping the next tile's loads."""
    if problem.arch == "sm_100a":
        return choose_sm100(problem.M, problem.N, problem.K, out_dtype=problem.out_dtype)
    if problem.arch != "sm_90a":
        raise WarpyError(f"no {problem.arch} GEMM program exists yet")
    (bm, bn), stream_k = min(((tile, sk) for tile in TILE_EFFICIENCY for sk in (False, True)),
                             key=lambda c: sm90_cost(problem, c[0][0], c[0][1], c[1]))
    split = sm90_split(problem, bm, bn) if stream_k else 0
    staged = problem.out_dtype in ("bf16", "fp16") and (problem.N * 2) % 16 == 0

    # Rows of A and B that are 16-byte but not 32-byte aligned (K * 2 bytes an odd multiple of 16)
    # are read slowly by TMA: 3072 x 3072 x K with BN 192 took 128 us at K = 3016 and 3064 against
    # 74-77 us at K = 3008, 3040, 3056 (H200, 2026-11-29); an L2 fetch of 128 bytes about each
    # request rather than 256 took 108-110 us there and the same time where rows are aligned.
    l2 = 256 if (problem.K * dtype_bytes(problem.dtype)) % 32 == 0 else 128

    return deepest_ring(Sm90Config(bn=bn, consumers=bm // 64, stages=3, group=8, staged_epilogue=staged,
                                   stream_k=stream_k, split=split, l2_promotion=l2))


def deepest_ring(cfg: Sm90Config) -> Sm90Config:
    """`cfg` with the deepest ring (3 to 8 stages) its shared memory allows."""
    stages = 3
    while stages < 8 and smem_bytes(attrs.evolve(cfg, stages=stages + 1)) <= SM90A.max_dynamic_smem:
        stages += 1
    return attrs.evolve(cfg, stages=stages)


def _override_value(text: str) -> Union[int, bool, str]:
    low = text.lower()
    if low in ("true", "false", "yes", "no"):
        return low in ("true", "yes")
    try:
        return int(text, 0)
    except ValueError:
        return text


def parse_overrides(text: str) -> dict[str, object]:
    """`key=value,...` (ints in any base Python reads, true/false/yes/no) as a dict."""
    items: dict[str, object] = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key or not value:
            raise WarpyError(f"configuration {text!r}: {item!r} is not KEY=VALUE")
        items[key.strip()] = _override_value(value.strip())
    return items


def configure(problem: GemmProblem, overrides: Union[str, dict[str, object], None]) -> Config:
    """The rule's configuration for `problem` with some fields set by hand: `overrides` is a dict or
    text `key=value,...` (ints, true/false). On sm_90a a changed tile or epilogue gets the deepest
    ring that fits unless `stages` is given, and clusters (`cluster_m=2`) walk whole tiles unless
    stream-K is asked for too. An unknown field or a bad value is refused in one line."""
    cfg = choose(problem)
    overrides = parse_overrides(overrides) if isinstance(overrides, str) else dict(overrides or {})
    if not overrides:
        return cfg
    fields = {f.name: f for f in attrs.fields(type(cfg))}
    for key, value in overrides.items():
        if key not in fields:
            raise WarpyError(f"{type(cfg).__name__} has no field {key!r} (fields: {', '.join(fields)})")
        default = fields[key].default
        want = type(default) if default is not attrs.NOTHING and default is not None else None
        if want is bool and not isinstance(value, bool) and value in (0, 1):
            value = bool(value)
            overrides[key] = value
        if want is not None and type(value) is not want:
            kind = {"int": "an integer", "bool": "true or false"}.get(want.__name__, want.__name__)
            raise WarpyError(f"{key}={value!r}: {type(cfg).__name__}.{key} takes {kind}")
    if isinstance(cfg, Sm90Config) and overrides.get("cluster_m") == 2 and "stream_k" not in overrides:
        overrides = {**overrides, "stream_k": False, "split": 0}
    out: Config = attrs.evolve(cfg, **overrides)  # type: ignore[arg-type]  # (checked field by field above)
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


def _tiles(problem: GemmProblem, bm: int, bn: int) -> int:
    return cdiv(problem.M, bm) * cdiv(problem.N, bn)


def sm90_split(problem: GemmProblem, bm: int, bn: int) -> int:
    """Stream-K's grid: where at most half the SMs have a tile, every tile splits S = 132 // tiles
    ways at the same k blocks (a grid of tiles x S): the CTAs of one k range then read the same A
    and B blocks at about the same time, through the L2. Measured on the H200 (2026-11-29) at
    1024 x 1024 x 65536: an even share over all 132 SMs puts the tiles' pieces at unrelated k, the
    operands stream from DRAM once a CTA (1.6 GB), and it ran 1.7x slower than whole tiles' rate.
    0: an even share over all SMs."""
    tiles = _tiles(problem, bm, bn)
    return min(SM90A.sms // tiles, cdiv(problem.K, 64)) if 2 * tiles <= SM90A.sms else 0


def sm90_cost(problem: GemmProblem, bm: int, bn: int, stream_k: bool) -> float:
    """Predicted time of the busiest SM, in k blocks of a 128 x 256 tile: whole tiles take
    ceil(tiles / 132) waves of kt k blocks; stream-K shares the tiles' k blocks out (`sm90_split`)
    and pays STREAM_K_OVERHEAD more, and must beat whole tiles by STREAM_K_MARGIN."""
    tiles = _tiles(problem, bm, bn)
    kt = cdiv(problem.K, 64)
    per = bm * bn / (128 * 256) / TILE_EFFICIENCY[bm, bn]
    if not stream_k:
        return cdiv(tiles, SM90A.sms) * kt * per
    if tiles * kt < SM90A.sms:
        return float("inf")
    split = sm90_split(problem, bm, bn)
    share = cdiv(kt, split) if split else cdiv(tiles * kt, SM90A.sms)
    return (share + STREAM_K_OVERHEAD) * per / STREAM_K_MARGIN


def build(problem: GemmProblem, config: Config | None = None) -> Program:
    cfg = config if config is not None else choose(problem)
    if isinstance(cfg, Sm100Config):
        if problem.arch != "sm_100a":
            raise WarpyError(f"an sm_100a configuration cannot build for {problem.arch}")
        return Sm100Gemm(problem, cfg).build()
    return Sm90Gemm(problem, cfg).build()
