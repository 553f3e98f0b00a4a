"""Each node becomes tiles: a box of its output, the boxes of its operands it reads, an estimated cost.

The tile shape comes from the node's rule, never from a divisibility requirement: the output is cut
into tiles of the rule's extents and the last tile along a dimension is whatever remains (TMA fills
the loads past a tensor's edge with zeros and clips the stores), so any M, N, K and any hidden size
that TMA can address tile.

- gemm: (tile_m, tile_n) chosen among the shapes the device's gemm body computes to minimise the
  estimated makespan (waves over the launch's units x the cost of one tile, memory or compute bound),
  larger tiles on a tie; the whole K in one tile; tiles in an L2-friendly order (groups of row tiles
  walked column by column, so a wave shares the rows of x and the columns of W), then longest first.
  On sm_90a the shapes are those whose stage (an A and a B box of 64 K) and output tile each fit one
  of the interpreter's 32 KiB pages (`gemm_tile_ok`: tile_m 64 or 128, tile_n 16..128), and whose
  epilogue operands (bias and residual boxes) share one page; 64-row tiles are the decode path
  (T <= 16 rows: A's box is 64 rows, the rows past x zero-filled, the weight streamed in stages of
  `gemm_k_boxes` boxes). On sm_100a a tile is a 2-CTA pair's (tile_m 128 or 256, tile_n 16..256);
  its decode tiles are 128-row tiles whose A boxes are short (`gemm_pair_a_rows`, `gemm_pair_k_boxes`;
  `gemm_stage` gives either target's).
- elementwise (unary, binary, silu_mul): up to 256 columns and enough rows that the tiles fill the
  units, each tile at most 32 KiB per operand.
- rmsnorm: whole rows (the reduction needs the row), as many as fill the units and fit one page
  (32 KiB: rows of boxes at most 256 columns wide, so a row of H takes ceil(H / 256) boxes); a row
  that alone is wider than a page is refused.

- attention (decode, the partials): one tile per (KV head, chunk of the cache), every query row of
  the head's group; the split (`attention_split`) minimises the estimated makespan of both nodes.
- attention_combine: one tile per (query token, KV head): the head group's rows of one token.
- rope: elementwise, its tiles whole rows of the head dimension (at most 256: a lane reads its
  partner columns D/2 away in the same box).
- a node writing its tensor through a view (a cache append; a tensor a reshape made coarser) cuts
  the view's shape (`out_shape`).

Boxes are (lo, hi) per dimension, clipped to the tensor; `extents` are the rule's (unclipped) tile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from warpy.errors import WarpyError
from warpy.mega.graph import map_dims
from warpy.mega.lower import Node, Program
from warpy.mega.semantics import PARTIAL_EXTRA
from warpy.target import Target, element_type

Box = tuple[tuple[int, int], ...]

#: K of one gemm operand box: 128 bytes of bf16, the 128-byte swizzle span
GEMM_K_STEP = 64
GEMM_N_CHOICES = {"wgmma": (16, 32, 64, 128), "tcgen05": (16, 32, 64, 128, 192, 256)}
#: a TMA box is at most 256 elements along each dimension
BOX_MAX = 256
#: the sm_90a interpreter's shared-memory page (kernels/mega_sm90.py): every box a body copies lands
#: in one page
PAGE_BYTES = 32 * 1024
ELEMENTWISE_TILE_BYTES = PAGE_BYTES
#: gemm rows per tile and 2-CTA pairs per unit, per tensor-core family: a unit is one CTA on sm_90a
#: (two consumer warpgroups of 64 rows) and a 2-CTA cluster on sm_100a (cta_group::2, 128 rows a CTA)
GEMM_M_CHOICES = {"wgmma": (64, 128), "tcgen05": (128, 256)}
CLUSTER = {"wgmma": 1, "tcgen05": 2}


@dataclass(frozen=True)
class CostModel:
    """Estimated throughput of one SM (for placement only; nothing depends on it for correctness)."""

    flops: float  # dense bf16 tensor-core flop/s
    bytes: float  # HBM bytes/s when every SM streams
    overhead: float  # seconds an instruction costs regardless of size
    #: seconds one consumer warpgroup of the decode-attention partial body spends on a key block
    #: (`ATTENTION_KEY_BLOCK` keys) beyond its tensor-core work (the online softmax and the waits for
    #: its wgmmas: `partial_cost`), and a combine tile on one chunk's partial for each row a warp takes
    #: (its warps a row each, walking the chunks in turn). sm_90a: the combine's fitted to the H200's
    #: Llama decoder stack at context 1k with T = 1 and 16 and 4-32 chunks (docs/performance.md), the
    #: block's estimated from the body's instruction count (not measured yet); sm_100a: not measured
    #: (0: the bytes alone)
    attention_block: float = 0.0
    combine_chunk: float = 0.0


COSTS = {"wgmma": CostModel(7.5e12, 36e9, 1.0e-6, 0.25e-6, 0.29e-6), "tcgen05": CostModel(15e12, 54e9, 1.0e-6)}


#: the most K boxes a stage of the sm_90a gemm holds (what its consumers unroll; the field has 4 bits)
GEMM_MAX_K_BOXES = 12


def gemm_k_boxes(tile_m: int, tile_n: int, esz: int = 2, a_rows: Optional[int] = None, b_ops: int = 1) -> int:
    """K boxes (of GEMM_K_STEP) a stage of the sm_90a gemm holds: as many A and B box pairs as fit a
    page, A's box `a_rows` rows (default the tile's: `gemm_a_rows`); `b_ops` weights (2: the fused
    gate/up gemm, `Node.glu`, whose stage holds a gate and an up box per K box)."""
    ar = tile_m if a_rows is None else a_rows
    return max(1, min(GEMM_MAX_K_BOXES, PAGE_BYTES // ((ar + b_ops * tile_n) * GEMM_K_STEP * esz)))


def gemm_a_rows(tile_m: int, tile_n: int, rows: int, b_ops: int = 1) -> int:
    """Rows of the sm_90a gemm's A box for a tile over an A of `rows` rows: the tile's, except a
    64-row tile over fewer rows (decode, T < 64): those rows rounded up to 8 (one 128-byte swizzle
    atom of 1 KiB), so that a stage's page carries mostly weight (a 64x16 tile's stage: 10 K boxes,
    20 KiB of weight, where 64-row A boxes left room for 3, 6 KiB). wgmma still reads 64 rows from an
    A box's start: the 8-row groups past the box are the stage's next A boxes, then its B boxes, all
    written by the stage's own copies, so the stage must reach 64 rows past its last A box's start
    (else the tile's rows are kept); their products land in accumulator rows past the tensor's
    edge, which the output's TMA store clips."""
    if tile_m != 64 or rows >= tile_m:
        return tile_m
    ar = max(8, cdiv(rows, 8) * 8)
    return ar if ar + gemm_k_boxes(tile_m, tile_n, a_rows=ar, b_ops=b_ops) * b_ops * tile_n >= 64 else tile_m


def gemm_pair_k_boxes(tile_m: int, tile_n: int, a_rows: int, esz: int = 2) -> int:
    """K boxes (of GEMM_K_STEP) a stage of the sm_100a gemm holds in each CTA's page: a CTA's stage is
    its A box (`a_rows` rows) and its half of the tile's B rows (tile_n / 2) per K box. One K box
    where A's box is the CTA's whole share of the tile's rows (tile_m / 2: a stage is then already
    10-32 KiB); a decode tile (a shorter A box, `gemm_pair_a_rows`) holds as many box pairs as fit a
    page (up to GEMM_MAX_K_BOXES), so that the page carries mostly weight."""
    if a_rows >= tile_m // 2:
        return 1
    return max(1, min(GEMM_MAX_K_BOXES, PAGE_BYTES // ((a_rows + tile_n // 2) * GEMM_K_STEP * esz)))


def gemm_pair_a_rows(tile_m: int, tile_n: int, rows: int) -> int:
    """Rows of each CTA's A box on sm_100a for a tile over an A of `rows` rows: the CTA's share of the
    tile (tile_m / 2), except a 128-row tile over fewer than 64 rows (decode: every real row is CTA
    0's): those rows rounded up to 8 (a 128-byte swizzle atom). The pair MMA (M = 128) still reads 64
    rows from each CTA's A box start: the 8-row groups past it are the stage's next A boxes, then its
    B boxes, all written by the stage's own copies (so the stage must reach 64 rows past its last A
    box's start, else the CTA's share is kept); their products land in accumulator rows past the
    tensor's edge (CTA 0's rows >= `rows`, all of CTA 1's), which the output's TMA store clips."""
    half = tile_m // 2
    if tile_m != 128 or rows >= half:
        return half
    ar = max(8, cdiv(rows, 8) * 8)
    return ar if ar + gemm_pair_k_boxes(tile_m, tile_n, ar) * (tile_n // 2) >= half else half


def gemm_stage(unit: str, tile_m: int, tile_n: int, rows: int, b_ops: int = 1) -> tuple[int, int]:
    """(rows of a CTA's A box, K boxes a stage) of a gemm tile over an A of `rows` rows, per target:
    sm_90a `gemm_a_rows` / `gemm_k_boxes` (`b_ops` 2: the fused gate/up gemm), sm_100a
    `gemm_pair_a_rows` / `gemm_pair_k_boxes`."""
    if unit == "tcgen05":
        if b_ops != 1:
            raise WarpyError("internal: the fused gate/up gemm is the sm_90a interpreter's")
        ar = gemm_pair_a_rows(tile_m, tile_n, rows)
        return ar, gemm_pair_k_boxes(tile_m, tile_n, ar)
    ar = gemm_a_rows(tile_m, tile_n, rows, b_ops)
    return ar, gemm_k_boxes(tile_m, tile_n, a_rows=ar, b_ops=b_ops)


#: a normed gemm's (`Node.norm`) rstd of each of a tile's 64 rows, fp32, after the norm weight in the
#: epilogue page
NORM_SCRATCH = 64 * 4


def gemm_norm_bytes(k: int, esz: int = 2) -> int:
    """What a normed gemm adds to the sm_90a epilogue page: the norm weight's row of K (boxes of
    BOX_MAX elements, the last one whole), 128-byte aligned, then the rows' rstd."""
    return -(-k // BOX_MAX) * BOX_MAX * esz + NORM_SCRATCH


def gemm_tile_ok(tile_m: int, tile_n: int, esz: int = 2, b_ops: int = 1) -> Optional[str]:
    """Why the sm_90a gemm body cannot compute a tile of this shape, or None: each warpgroup computes
    64 rows (tile_m 128) or half the columns of 64 rows (tile_m 64) with wgmma (N a multiple of 8),
    a stage's A and B boxes fit a page (`b_ops` B boxes a K box: 2 for the fused gate/up gemm), so
    does the output tile. (The page bounds the fused gemm's two accumulators too: its widest
    warpgroup block is 64 x 64 (a 128 x 64 tile), 2 x 32 registers a thread, as many as a 128 x 128
    tile's one.)"""
    if tile_m not in (64, 128) or tile_n not in GEMM_N_CHOICES["wgmma"]:
        return f"a gemm tile of {tile_m}x{tile_n} (the sm_90a body takes 64 or 128 rows and 16, 32, 64 or 128 columns)"
    if (tile_m + b_ops * tile_n) * GEMM_K_STEP * esz > PAGE_BYTES or tile_m * tile_n * esz > PAGE_BYTES:
        return f"a gemm tile of {tile_m}x{tile_n}, whose stage or output does not fit a page"
    return None


#: the sm_90a decode-attention partial body's key block (`kernels/mega_attention.py`: one wgmma's N,
#: 64 keys a step of a consumer warpgroup): chunks, and their K and V boxes, are whole blocks
ATTENTION_KEY_BLOCK = 64
ATTENTION_ROW_ALIGN = ATTENTION_KEY_BLOCK
#: the wgmma's M: the partial body computes the tile's T·G query rows padded to it
ATTENTION_MMA_ROWS = 64
#: the sm_90a combine body's warps (a row each in turn)
COMBINE_WARPS = 8
#: what the sm_90a bodies hold in their pages (kernels/mega_attention.py): a chunk of at most two K
#: (and V) boxes, a combine of the partials in at most six boxes; the split rule prefers splits that fit
ATTENTION_MAX_BOXES = 2
COMBINE_MAX_BOXES = 6
PARTIAL_BYTES = 4  # fp32


@dataclass(frozen=True)
class AttentionSplit:
    """How decode attention is cut along the cache: `splits` chunks of `chunk` rows per KV head
    (the last one what remains of `length`), a chunk loaded as `boxes` K (and V) boxes of `box_rows`
    rows, each at most a page; `combine_box` chunks of partials per box of the combine; the
    estimated makespan of both nodes."""

    splits: int
    chunk: int
    box_rows: int
    boxes: int
    combine_box: int
    cost: float


def combine_cost(cm: CostModel, splits: int, g: int, d: int, esz: int) -> float:
    """A combine tile's estimated time: the overhead, its bytes (the `splits` partials of the G rows,
    the output rows) and its walk over the chunks (`CostModel.combine_chunk` a chunk for each row a
    warp takes)."""
    return (cm.overhead + (splits * g * (d + PARTIAL_EXTRA) * PARTIAL_BYTES + g * d * esz) / cm.bytes
            + splits * cdiv(g, COMBINE_WARPS) * cm.combine_chunk)


def partial_cost(cm: CostModel, rows: int, keys: int, d: int, esz: int) -> float:
    """A partial tile's estimated time: the overhead, its bytes (`keys` K and V rows, the rows' queries,
    its partial) and its math: the key blocks' wgmmas on the SM's tensor cores (S = Q·Kᵀ and P·V, the
    rows padded to ATTENTION_MMA_ROWS) and each warpgroup's share of the blocks at
    `CostModel.attention_block` (the two consumer warpgroups take alternate blocks)."""
    blocks = cdiv(keys, ATTENTION_KEY_BLOCK)
    mma = blocks * 2 * 2 * ATTENTION_MMA_ROWS * ATTENTION_KEY_BLOCK * d / cm.flops
    return (cm.overhead + (2 * keys * d * esz + rows * d * esz + rows * (d + PARTIAL_EXTRA) * PARTIAL_BYTES) / cm.bytes
            + mma + cdiv(blocks, 2) * cm.attention_block)


def attention_split(tokens: int, hq: int, hkv: int, d: int, length: int, target: Target, esz: int = 2) -> AttentionSplit:
    """The split rule. A K or V box is at most a page (`PAGE_BYTES // (d·esz)` rows, at most 256: 256
    rows at head_dim 64, 128 at 128); a chunk is `boxes` such boxes of equal rows, a multiple of
    ATTENTION_ROW_ALIGN. Among every chunk count S (1 .. 256, and no chunk below ATTENTION_ROW_ALIGN
    rows) the rule takes the one minimising the cost model's makespan: waves of the Hkv·S partial tiles
    over the units x one tile's time (`partial_cost`: the overhead, its bytes at the per-SM bandwidth,
    its math) plus the combine's waves x its tile's time (`combine_cost`: S partials of a group's rows,
    its walk over them); the fewer chunks on a tie. Where the model has no cost for the math and the
    walk (sm_100a, not measured) a short cache is cut until Hkv·S fills the SMs (a tile's overhead
    then dominates its bytes); on sm_90a a short cache with few query rows takes a few chunks of a
    box, one with many rows smaller chunks; a long one goes into one wave of chunks of many pages.
    Splits whose chunks are at most ATTENTION_MAX_BOXES boxes and whose combine reads at most
    COMBINE_MAX_BOXES boxes (what the sm_90a bodies hold) come first: a long cache then takes more
    waves of two-box chunks (32k at Llama-3.2-1B's shape: 64 chunks of 512 rows, four waves)."""
    cm = COSTS[target.unit]
    n_units = units(target)
    g = hq // hkv
    rows = tokens * g
    width = d + PARTIAL_EXTRA
    box_max = max(ATTENTION_ROW_ALIGN, min(BOX_MAX, PAGE_BYTES // (d * esz)) // ATTENTION_ROW_ALIGN * ATTENTION_ROW_ALIGN)
    best: Optional[tuple[bool, float, int, AttentionSplit]] = None
    seen: set[int] = set()
    for want in range(1, min(BOX_MAX, cdiv(length, ATTENTION_ROW_ALIGN)) + 1):
        chunk = cdiv(cdiv(length, want), ATTENTION_ROW_ALIGN) * ATTENTION_ROW_ALIGN
        boxes = cdiv(chunk, box_max)
        box_rows = cdiv(cdiv(chunk, boxes), ATTENTION_ROW_ALIGN) * ATTENTION_ROW_ALIGN
        chunk = boxes * box_rows
        splits = cdiv(length, chunk)
        if chunk in seen or splits > BOX_MAX:
            continue
        seen.add(chunk)
        tile = partial_cost(cm, rows, chunk, d, esz)
        combine_box = max(1, min(splits, BOX_MAX, PAGE_BYTES // (g * width * PARTIAL_BYTES)))
        comb = combine_cost(cm, splits, g, d, esz)
        span = cdiv(hkv * splits, n_units) * tile + cdiv(hkv * tokens, n_units) * comb
        cand = AttentionSplit(splits, chunk, box_rows, boxes, combine_box, span)
        key = (boxes > ATTENTION_MAX_BOXES or cdiv(splits, combine_box) > COMBINE_MAX_BOXES, span, splits)
        if best is None or key < best[:3]:
            best = (*key, cand)
    assert best is not None
    return best[3]


def _attention(prog: Program, node: Node, target: Target) -> NodeTiling:
    hkv, splits, rows, width = out_shape(prog, node)  # (a node of the old or the appended rows: its chunks' view)
    d = node.head_dim
    esz = element_type(prog.tensors[node.operands[1].tensor].dtype).bytes
    split = attention_split(node.tokens, hkv * node.group, hkv, d, node.length, target, esz)
    cm = COSTS[target.unit]
    tiles = []
    for s in range(splits):
        n = min(node.length, (s + 1) * node.chunk) - s * node.chunk
        cost = partial_cost(cm, rows, n, d, esz)
        for h in range(hkv):
            tiles.append(Tile(node.id, ((h, h + 1), (s, s + 1), (0, rows), (0, width)), cost))
    tiles.sort(key=lambda t: -t.cost)
    return NodeTiling(node.id, (1, 1, rows, width), split.box_rows, tuple(tiles))


def out_shape(prog: Program, node: Node) -> tuple[int, ...]:
    """The shape a node's tiles cut: its output view's (a cache append's rows, a tensor a reshape made
    coarser, `lower._coarse_out`), else its tensor's."""
    return node.out_view.shape if node.out_view is not None else prog.tensors[node.out].shape


def _combine(prog: Program, node: Node, target: Target) -> NodeTiling:
    tokens, hq, d = out_shape(prog, node)
    g = node.group
    hkv, splits, _, width = prog.tensors[node.operands[0].tensor].shape
    cost = combine_cost(COSTS[target.unit], splits, g, d, 2)
    tiles = [Tile(node.id, ((t, t + 1), (h * g, (h + 1) * g), (0, d)), cost) for h in range(hkv) for t in range(tokens)]
    per_box = max(1, min(splits, BOX_MAX, PAGE_BYTES // (g * width * PARTIAL_BYTES)))
    return NodeTiling(node.id, (1, g, d), per_box, tuple(tiles))


def units(target: Target) -> int:
    """The queues of a launch: CTAs on sm_90a, 2-CTA clusters on sm_100a."""
    return target.sms // CLUSTER[target.unit]


@dataclass(frozen=True)
class Tile:
    node: int
    box: Box
    cost: float


@dataclass(frozen=True)
class NodeTiling:
    """A node's rule: tile extents per output dimension, the gemm K step, the tiles in order."""

    node: int
    extents: tuple[int, ...]
    k_step: int
    tiles: tuple[Tile, ...]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _grid(shape: Sequence[int], ext: Sequence[int]) -> list[Box]:
    """Row-major tiles of `ext` over `shape`, clipped."""
    boxes: list[Box] = [()]
    for n, e in zip(shape, ext):
        boxes = [b + ((lo, min(lo + e, n)),) for b in boxes for lo in range(0, n, e)]
    return boxes


def _elems(box: Box) -> int:
    return math.prod(hi - lo for lo, hi in box)


def project(view_shape: Sequence[int], out_box: Box) -> Box:
    """The box of a broadcast operand (of `view_shape`, right-aligned to the output) that a tile of
    the output reads: its own extent-1 dimensions whole, the others as the tile's."""
    off = len(out_box) - len(view_shape)
    return tuple((0, 1) if n == 1 else out_box[j + off] for j, n in enumerate(view_shape))


def operand_boxes(prog: Program, node: Node, out_box: Box) -> list[Box]:
    """The box of each operand (in its view's coordinates) a tile writing `out_box` reads."""
    out: list[Box] = []
    for role, op in enumerate(node.operands):
        shape = op.view.shape
        if node.kind == "gemm" and node.norm and role == len(node.operands) - 1:  # the norm weight: the row of K
            out.append(((0, shape[0]),))
        elif node.kind == "gemm" and node.rope and role in (1, 2):
            # a roped tile's weight rows and tables' columns: the hull of its two runs (`rope_pairs`)
            (m0, m1), (n0, n1) = out_box
            d = node.operands[2].view.shape[-1]
            c, w = rope_pairs(d, n0, n1)
            if role == 1:
                out.append(((c, c + d // 2 + w), (0, shape[1])))
            else:
                out.append(((0, 2), (m0, m1), (c % d, c % d + d // 2 + w)))
        elif node.kind == "gemm" and (role < 2 or node.glu):  # glu: role 2 is the up weight, B's box
            (m0, m1), (n0, n1) = out_box
            if role == 0:
                out.append(((m0, m1), (0, shape[1])))
            elif node.b_kmajor:
                out.append(((n0, n1), (0, shape[1])))
            else:
                out.append(((0, shape[0]), (n0, n1)))
        elif node.kind == "rmsnorm" and role == 1:
            out.append(((0, shape[0]),))
        elif node.kind == "attention":
            (h0, h1), (c0, c1) = out_box[0], out_box[1]
            g = node.group
            if role == 0:
                out.append(((0, shape[0]), (h0 * g, h1 * g), (0, shape[2])))
            else:
                out.append(((c0 * node.chunk, min(c1 * node.chunk, node.length)), (h0, h1), (0, shape[2])))
        elif node.kind == "attention_combine":
            (t0, t1), (q0, q1) = out_box[0], out_box[1]
            g = node.group
            out.append(((q0 // g, q1 // g), (0, shape[1]), (t0 * g, t1 * g), (0, shape[3])))
        else:
            out.append(project(shape, out_box))
    return out


def gemm_heads(prog: Program, node: Node) -> Optional[int]:
    """D, where a gemm writes its (M, N) product as (M, N / D, D) heads (`lower(rope=True)`: roped
    heads, or a cache's rows), else None. Its tiles are 64 rows, and a tile's columns lie in one head
    (a roped tile's columns are pairs: `rope_pairs`)."""
    shape = out_shape(prog, node)
    return shape[-1] if node.kind == "gemm" and len(shape) == 3 else None


def rope_pairs(d: int, n0: int, n1: int) -> tuple[int, int]:
    """A roped gemm's tile of columns n0..n1 of its product in pair order (`Node.rope`): the tile
    holds w = (n1 - n0) / 2 columns of a head's first half and the w columns D / 2 after them (each
    value's rope partner), so that the tile of tile_n columns j of head h holds columns h·D + j·w ..
    + w and h·D + D/2 + j·w .. + w (a whole head when tile_n = D: pair order is the columns' own).
    Returns (the first column, w)."""
    w = (n1 - n0) // 2
    h, q = divmod(n0, d)
    return h * d + (q // (2 * w)) * w, w


def gemm_write_boxes(prog: Program, node: Node, box: Box) -> list[Box]:
    """A gemm tile's boxes of its output, in the output's coordinates: the box itself, or for heads
    (`gemm_heads`) ((m), (head), (columns of D)); a roped tile narrower than a head two such boxes,
    its first and second half's columns (`rope_pairs`)."""
    d = gemm_heads(prog, node)
    if d is None:
        return [box]
    (m0, m1), (n0, n1) = box
    if node.rope and n1 - n0 < d:
        c, w = rope_pairs(d, n0, n1)
        h = c // d
        return [((m0, m1), (h, h + 1), (c - h * d, c - h * d + w)),
                ((m0, m1), (h, h + 1), (c - h * d + d // 2, c - h * d + d // 2 + w))]
    h = n0 // d
    if (n1 - 1) // d != h:
        raise WarpyError(f"{node.where}: internal: a gemm tile of columns {n0}..{n1} runs across heads of {d}")
    return [((m0, m1), (h, h + 1), (n0 - h * d, n1 - h * d))]


def gemm_view_box(prog: Program, node: Node, box: Box) -> Box:
    """The first of `gemm_write_boxes` (where the output's map is addressed from)."""
    return gemm_write_boxes(prog, node, box)[0]


def _gemm(prog: Program, node: Node, target: Target) -> NodeTiling:
    oshape = out_shape(prog, node)
    M, N = oshape[0], math.prod(oshape[1:])
    heads = gemm_heads(prog, node)
    K = node.operands[0].view.shape[1]
    esz = element_type(prog.tensors[node.out].dtype).bytes
    cm = COSTS[target.unit]
    cl = CLUSTER[target.unit]
    # projections writing heads (`gemm_heads`) that read the same A (a layer's Q, K and V) run side by
    # side: each is tiled for its share of the units, in proportion to its columns, so that together
    # they fill one wave (on the H200 the decoder's Q, K and V each tiled for every SM took two waves:
    # 1k 1184 against 1110 µs; docs/performance.md)
    mates = [n for n in prog.nodes if n.kind == "gemm" and n.operands[0] == node.operands[0]
             and gemm_heads(prog, n) is not None] if gemm_heads(prog, node) is not None else []
    cols = sum(math.prod(out_shape(prog, n)[1:]) for n in mates)
    n_units = max(1, units(target) * N // cols) if len(mates) > 1 else units(target)

    nb = 2 if node.glu else 1  # weights read per output column (the fused gate/up gemm: two)

    def tile_cost(bm: int, bn: int, rows: int, cols: int) -> float:
        flops = 2.0 * bm * bn * K * nb / cl
        moved = (rows + nb * cols) * K * esz + rows * cols * esz
        return max(flops / cm.flops, moved / (cm.bytes * cl)) + cm.overhead

    # the epilogue's operands share a page on sm_90a: a bias row and a residual box together
    epi_rows = [] if node.glu or node.rope else [op.view.shape for op in node.operands[2:len(node.operands) - int(node.norm)]]
    best: tuple[float, int, int, int, int] | None = None
    for bm in GEMM_M_CHOICES[target.unit]:
        for bn in GEMM_N_CHOICES[target.unit]:
            stage = (bm // cl + nb * bn) * GEMM_K_STEP * esz
            if 2 * stage + (bm // cl) * bn * esz > target.max_dynamic_smem:
                continue
            # a roped tile: pairs of w = bn / 2 columns of one head (`rope_pairs`)
            if heads is not None and (bm != 64 or heads % bn or (node.rope and (heads // 2) % (bn // 2))):
                continue
            if target.unit == "wgmma":
                if gemm_tile_ok(bm, bn, esz, nb) is not None:
                    continue
                # the rope tables: both planes of the tile's columns, as many rows as A's box
                epi = 2 * gemm_a_rows(bm, bn, M, nb) * bn * esz if node.rope else 0
                for shape in epi_rows:
                    box = project(shape, ((0, bm), (0, bn)))
                    epi = -(-epi // 128) * 128 + _elems(box) * esz
                if node.norm:  # the norm weight's row and the rows' rstd after the bias (`gemm_norm_bytes`)
                    if bm != 64:
                        continue
                    epi = -(-epi // 128) * 128 + gemm_norm_bytes(K, esz)
                if epi > PAGE_BYTES:
                    continue
            t = cdiv(M, bm) * cdiv(N, bn)
            span = cdiv(t, n_units) * tile_cost(bm, bn, min(bm, M), min(bn, N))
            waste = cdiv(M, bm) * bm * cdiv(N, bn) * bn - M * N  # padded elements computed for nothing
            key = (span, waste, -bm * bn, bm, bn)
            if best is None or key < best:
                best = key
    if best is None:
        raise WarpyError(f"{node.where}: no gemm tile writes heads of {heads}" + (" roped" if node.rope else "")
                         + f" on {target.name}")
    bm, bn = best[3], best[4]
    mt, nt = cdiv(M, bm), cdiv(N, bn)
    group = max(1, min(mt, round(math.sqrt(n_units * bn / bm)) or 1))
    order: list[tuple[int, int]] = []
    for g0 in range(0, mt, group):
        for j in range(nt):
            for i in range(g0, min(g0 + group, mt)):
                order.append((i, j))
    tiles = []
    for i, j in order:
        box = ((i * bm, min(M, (i + 1) * bm)), (j * bn, min(N, (j + 1) * bn)))
        tiles.append(Tile(node.id, box, tile_cost(bm, bn, box[0][1] - box[0][0], box[1][1] - box[1][0])))
    tiles.sort(key=lambda t: -t.cost)  # longest first; stable, so the L2 order stays within a cost
    return NodeTiling(node.id, (bm, bn), GEMM_K_STEP, tuple(tiles))


def _rows_cols(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(outer tiles, rows, cols) of an output: rank 1 is one row; dims before the last two are cut in 1s."""
    cols = shape[-1]
    rows = shape[-2] if len(shape) >= 2 else 1
    outer = math.prod(shape[:-2]) if len(shape) > 2 else 1
    return outer, rows, cols


def _moved(prog: Program, node: Node, box: Box) -> int:
    esz = element_type(prog.tensors[node.out].dtype).bytes
    return esz * (_elems(box) + sum(_elems(b) for b in operand_boxes(prog, node, box)))


def _cut(prog: Program, node: Node, target: Target, ext: tuple[int, ...]) -> NodeTiling:
    cm = COSTS[target.unit]
    cl = CLUSTER[target.unit]
    shape = node.out_view.shape if node.out_view is not None else prog.tensors[node.out].shape
    tiles = [Tile(node.id, b, _moved(prog, node, b) / (cm.bytes * cl) + cm.overhead) for b in _grid(shape, ext)]
    tiles.sort(key=lambda t: -t.cost)
    return NodeTiling(node.id, ext, 0, tuple(tiles))


def inner_axes(prog: Program, node: Node, out_shape: Sequence[int]) -> dict[int, int]:
    """The tile axes (0 the columns, 1 the rows, 2.. outer) along which some operand's tensor map
    (or the output's) has its innermost dimension, each with the elements of 16 bytes of the
    narrowest such operand: a TMA copy must start its innermost dimension on a 16-byte boundary (an
    unswizzled load from an element off one raises an illegal instruction on the H200: the probe
    `tma_start_unaligned`), so a tile's start along such an axis must be a multiple of that. A (T, 1)
    column read beside (T, H) rows runs its innermost dimension along the rows."""
    rank = len(out_shape)
    out: dict[int, int] = {}

    def note(axis: int, dtype: str) -> None:
        a = 16 // element_type(dtype).bytes
        out[axis] = max(out.get(axis, 1), a)

    big = [j for j, n in enumerate(out_shape) if n > 1]
    note(rank - 1 - big[-1] if big else 0, prog.tensors[node.out].dtype)
    for op in node.operands:
        md, _ = map_dims(op.view)
        j = md[0].view
        if j is None or md[0].extent == 1:
            continue  # a fixed coordinate (checked where it is encoded) or a single element
        note(rank - 1 - (j + rank - len(op.view.shape)), op.view.dtype)
    return out


def _elementwise(prog: Program, node: Node, target: Target, view: Optional[tuple[int, ...]] = None) -> NodeTiling:
    """`view`: the shape of the output's view a node writes (a cache append), the tensor's otherwise.
    Columns in tiles of whole 16 bytes; rows in as many tiles as the units want, but in multiples of
    16 bytes' elements (times the cluster: a pair splits a tile's rows) where an operand's innermost
    dimension runs along the rows (`inner_axes`)."""
    shape = view or prog.tensors[node.out].shape
    esz = element_type(prog.tensors[node.out].dtype).bytes
    outer, rows, cols = _rows_cols(shape)
    align = 16 // esz
    tc = min(cdiv(cols, align) * align, BOX_MAX)
    col_tiles = cdiv(cols, tc)
    want_row_tiles = max(1, cdiv(units(target), col_tiles * outer))
    cap = max(1, min(BOX_MAX, ELEMENTWISE_TILE_BYTES // (tc * esz)))
    tr = max(1, min(cap, cdiv(rows, want_row_tiles)))
    inner = inner_axes(prog, node, shape)
    cl = CLUSTER[target.unit]
    if len(shape) >= 2 and 1 in inner and (tr < rows or cl > 1):
        # (a pair's second CTA starts half a tile down: the tile is a multiple of 16 bytes' rows per
        # CTA even where it is the only one; its rows past the tensor are zero-filled and clipped)
        step = inner[1] * cl
        tr = cdiv(tr, step) * step if cl > 1 else min(rows, cdiv(tr, step) * step)
        if tr > cap:
            raise WarpyError(f"{node.where}: an operand runs its innermost dimension along the rows, so a tile takes "
                             f"rows in multiples of {step}, and {step} rows of {tc} columns do not fit a page")
    if any(a >= 2 and shape[len(shape) - 1 - a] > 1 for a in inner):
        raise WarpyError(f"{node.where}: an operand runs its innermost dimension along an outer dimension of the "
                         f"output, which the interpreter tiles one index at a time (a TMA copy must start its "
                         f"innermost dimension on a 16-byte boundary): make that dimension the last")
    ext = (1,) * (len(shape) - 2) + ((tr,) if len(shape) >= 2 else ()) + (tc,)
    return _cut(prog, node, target, ext)


def _rmsnorm(prog: Program, node: Node, target: Target) -> NodeTiling:
    shape = prog.tensors[node.out].shape
    esz = element_type(prog.tensors[node.out].dtype).bytes
    outer, rows, cols = _rows_cols(shape)
    box_cols = min(cdiv(cols, 16 // esz) * (16 // esz), BOX_MAX)
    row_bytes = cdiv(cols, box_cols) * box_cols * esz  # a row as its boxes land
    if row_bytes > PAGE_BYTES:
        raise WarpyError(f"{node.where}: rmsnorm over rows of {cols} elements: a row is {row_bytes} bytes, more than "
                         f"a page of the interpreter ({PAGE_BYTES})")
    fit = max(1, PAGE_BYTES // row_bytes)
    tr = max(1, min(BOX_MAX, fit, cdiv(rows * outer, units(target))))
    ext = (1,) * (len(shape) - 2) + ((min(tr, rows),) if len(shape) >= 2 else ()) + (cols,)
    return _cut(prog, node, target, ext)


def tile_node(prog: Program, node: Node, target: Target) -> NodeTiling:
    if node.kind == "gemm":
        return _gemm(prog, node, target)
    if node.kind == "rmsnorm":
        return _rmsnorm(prog, node, target)
    if node.kind == "attention":
        return _attention(prog, node, target)
    if node.kind == "attention_combine":
        return _combine(prog, node, target)
    if node.kind == "rope" and out_shape(prog, node)[-1] > BOX_MAX:
        raise WarpyError(f"{node.where}: rope over a head dimension of {out_shape(prog, node)[-1]}: a tile is whole "
                         f"rows of it, at most {BOX_MAX}")
    if node.out_view is not None:
        return _elementwise(prog, node, target, node.out_view.shape)
    return _elementwise(prog, node, target)


__all__ = ["Box", "Tile", "NodeTiling", "tile_node", "gemm_heads", "gemm_view_box", "gemm_write_boxes", "rope_pairs", "gemm_norm_bytes", "NORM_SCRATCH", "out_shape", "operand_boxes", "project", "units", "CLUSTER", "COSTS",
           "GEMM_K_STEP", "BOX_MAX", "cdiv", "CostModel", "PAGE_BYTES", "gemm_k_boxes", "gemm_a_rows",
           "GEMM_MAX_K_BOXES", "gemm_tile_ok", "gemm_pair_k_boxes", "gemm_pair_a_rows", "gemm_stage",
           "AttentionSplit", "attention_split", "ATTENTION_ROW_ALIGN", "ATTENTION_KEY_BLOCK", "ATTENTION_MMA_ROWS", "COMBINE_WARPS", "ATTENTION_MAX_BOXES", "COMBINE_MAX_BOXES"]
