"""A schedule as the device reads it: the launch's tensor maps and each instruction's 64 words.

Tensor maps: one per distinct (tensor, view, box, swizzle); a `TmaBox` each (`warpy.layout.tma`),
with the buffer it addresses and the byte offset of the view's origin in it. A map leaves out a
view's extent-1 dimensions, and a selected dimension stays a map dimension with the index as its
coordinate, so the layers of a stacked weight share one map. An operand's box is what one TMA copy
moves; a tile may take several (gemm steps K by `k_step`; a row wider than 256 elements takes
several boxes); the instruction carries the tile's origin, the device steps by the map's box.

Box rules (one place, for the device interpreter to change with its bodies):
- a gemm writing heads (`tiling.gemm_heads`): the output's map runs (D, heads, rows), its box a
  warpgroup's block of one head (the head's coordinate fixed by the tile); the rope tables (2, T, D):
  both planes, A's box rows, the tile's columns;
- gemm A and B (and the fused gate/up gemm's up weight, slot 3, as B): 128-byte swizzle, K boxes of `k_step`; B's N box is the tile's (x·Wᵀ) or the
  64-element swizzle span (x·W, N contiguous); A's M box is the tile's rows over the CTAs of a unit
  (decode tiles: A's rows rounded up to 8, `gemm_a_rows` on sm_90a, a CTA's box `gemm_pair_a_rows` on
  sm_100a, whose B box is a CTA's half of the tile's weight rows);
  the output's box on sm_90a is one consumer warpgroup's block of the tile (64 rows; every column of
  a 128-row tile, half of a 64-row one's), stored twice a tile;
- attention (partials): q's box is the head group's T x G rows of D; K's and V's `k_step` cache rows
  of one KV head and 64 of its D columns (128-byte swizzle: the wgmma operands; head_dim 128 takes two
  copies a box); the partial's box the tile's T·G rows of D + 4 fp32 (as many rows as fit a page);
  the combine: the partials' box is `k_step` chunks of one head's G rows of one token, the output's
  one token's G heads of D;
- everything else: no swizzle, the tile's extents (rows over the CTAs of a unit), at most 256, the
  innermost rounded up to 16 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from warpy.errors import WarpyError
from warpy.layout.core import LayoutError
from warpy.layout.tma import TmaBox
from warpy.mega import fields as F
from warpy.mega.graph import MapDim, View, map_dims
from warpy.mega.lower import Node, Operand
from warpy.mega.schedule import Instr, Schedule
from warpy.mega.semantics import LOG2E
from warpy.mega.tiling import (BOX_MAX, PAGE_BYTES, NodeTiling, cdiv, gemm_a_rows, gemm_stage, gemm_view_box,
                               operand_boxes)
from warpy.target import element_type

SWIZZLE = 128
#: the base dimension of the extent-1 dimension added to what would be a rank-1 map
PAD_DIM = -1
KIND_OPCODE = {"gemm": F.GEMM, "unary": F.UNARY, "binary": F.BINARY, "silu_mul": F.SILU_MUL, "rmsnorm": F.RMSNORM,
               "attention": F.ATTENTION, "attention_combine": F.ATTENTION_COMBINE, "rope": F.ROPE}
ATTENTION_KINDS = ("attention", "attention_combine")


@dataclass(frozen=True)
class TensorMap:
    index: int
    tensor: int
    buffer: int
    offset: int
    tma: TmaBox


@dataclass(frozen=True)
class _Slot:
    """How one operand of a node is encoded: its map, the axis of each map dimension, the view."""

    tmap: int
    axes: tuple[int, ...]
    dims: tuple[int | None, ...]  # the view dimension of each map dimension (None: selected)
    fixed: tuple[int, ...]  # the coordinate of each map dimension that is selected (else 0)
    view: View


@dataclass
class Encoded:
    maps: list[TensorMap]
    words: np.ndarray  # (instructions, 64) uint32, in global order

    def per_unit(self, s: Schedule) -> np.ndarray:
        """Static mode: (waves, units, 64), instruction k of unit u at [k, u], noops after a queue ends
        (so a unit's k-th fetch is one coalesced load)."""
        if s.queues is None:
            raise WarpyError("a dynamic schedule has no per-unit queues (the units take indices in global order)")
        out = np.zeros((s.waves, s.units, F.WORDS), dtype=np.uint32)
        for u, q in enumerate(s.queues):
            for k, i in enumerate(q):
                out[k, u] = self.words[i]
        return out


def _axes(node: Node, role: int, view: View, out_rank: int) -> list[int]:
    """The tile axis of each view dimension of operand `role` (0 is the output)."""
    r = len(view.shape)
    if node.kind == "gemm" and node.norm and role == len(node.operands):  # the norm weight: a row of K
        return [F.AXIS_K]
    if node.kind == "gemm" and role == 0 and r == 3:  # heads (`tiling.gemm_heads`): rows, the head, its columns
        return [1, F.AXIS_FIXED, 0]
    if node.kind == "gemm" and role in (1, 2):
        if role == 1:
            return [1, F.AXIS_K]
        return [0, F.AXIS_K] if node.b_kmajor else [F.AXIS_K, 0]
    off = out_rank - r
    return [out_rank - 1 - (j + off) for j in range(r)]


def _attention_axes(node: Node, role: int, view: View) -> list[int]:
    """The tile axis of each view dimension of an attention operand: 0 the innermost (D, or the
    partial's row), 1 the query rows (G heads; the partial's T·G rows), 2 the tokens (q), AXIS_K the
    dimension the body steps along (cache rows; the combine's chunks), AXIS_FIXED a head or chunk
    index the tile's coordinate fixes."""
    if node.kind == "attention":
        return [[F.AXIS_FIXED, F.AXIS_FIXED, 1, 0], [2, 1, 0], [F.AXIS_K, F.AXIS_FIXED, 0],
                [F.AXIS_K, F.AXIS_FIXED, 0]][role]
    return [[2, 1, 0], [F.AXIS_FIXED, F.AXIS_K, 1, 0]][role]


def _attention_box(node: Node, role: int, axis: int, view: View, tiling: NodeTiling, esz: int) -> int:
    if axis == F.AXIS_FIXED:
        return 1
    if axis == F.AXIS_K:
        return tiling.k_step
    if axis == 0:
        if node.kind == "attention" and role in (2, 3):
            return min(view.shape[-1], SWIZZLE // esz)  # (a swizzle span: `_Maps.slot`)
        return view.shape[-1]
    if axis == 1:
        if node.kind == "attention" and role == 0:
            return max(1, min(view.shape[2], BOX_MAX, PAGE_BYTES // (view.shape[3] * esz)))
        return node.group
    return node.tokens if node.kind == "attention" else 1


def _box(node: Node, role: int, axis: int, innermost: bool, tiling: NodeTiling, cluster: int, esz: int,
         unit: str = "wgmma") -> int:
    ext = tiling.extents
    if axis == F.AXIS_FIXED:
        b = 1
    elif axis == F.AXIS_K and node.kind == "gemm" and node.norm and role == len(node.operands):
        b = BOX_MAX  # the norm weight: its row in boxes as wide as a box may be (`tiling.gemm_norm_bytes`)
    elif axis == F.AXIS_K:
        b = tiling.k_step
    elif node.kind == "gemm" and node.rope and role == 3:  # the rope tables: both planes, A's rows, the tile's columns
        b = 2 if axis == 2 else _a_rows(node, tiling) if axis == 1 else ext[-1] // 2 if rope_pair(node, tiling) else ext[-1]
    elif node.kind == "gemm" and node.rope and role == 2 and axis == 0 and rope_pair(node, tiling):
        b = ext[-1] // 2  # a pair tile's weight: w rows a half
    elif node.kind == "gemm" and role == 1 and axis == 1 and unit == "wgmma":
        b = _a_rows(node, tiling)
    elif node.kind == "gemm" and role == 1 and axis == 1:  # sm_100a: a CTA's A box (`gemm_pair_a_rows`)
        b = gemm_stage_of(node, tiling, unit)[0]
    elif node.kind == "gemm" and role == 2 and node.b_kmajor and axis == 0 and unit == "tcgen05":
        b = cdiv(ext[-1], cluster)  # sm_100a: a CTA's half of the tile's weight rows (the pair MMA's B)
    elif node.kind == "gemm" and role == 2 and not node.b_kmajor:
        b = min(ext[-1], SWIZZLE // esz)
    elif node.kind == "gemm" and role == 0 and unit == "wgmma":
        # a warpgroup's block of the output: 64 rows, and every column (128-row tiles) or half of
        # them (64-row tiles: the two warpgroups split the columns); the tile is two such boxes
        tm, tn = ext[-2], ext[-1]
        b = 64 if axis == 1 else (tn if tm == 128 else tn // 2)
    else:
        b = ext[len(ext) - 1 - axis]
        if axis == 1:
            b = cdiv(b, cluster)
    b = min(b, BOX_MAX)
    if innermost:
        align = 16 // esz
        b = min(cdiv(b, align) * align, BOX_MAX)
    return b


def _a_rows(node: Node, tiling: NodeTiling) -> int:
    """The sm_90a gemm's A box rows (`gemm_a_rows`: fewer than the tile's for a decode tile)."""
    return gemm_a_rows(tiling.extents[-2], tiling.extents[-1], node.operands[0].view.shape[0], 2 if node.glu else 1)


def rope_pair(node: Node, tiling: NodeTiling) -> int:
    """D, where the node is a roped gemm whose tiles hold pairs of half-head columns (tile_n < D,
    `tiling.rope_pairs`), else 0."""
    if node.kind != "gemm" or not node.rope:
        return 0
    d = node.operands[2].view.shape[-1]
    return d if tiling.extents[-1] < d else 0


def gemm_stage_of(node: Node, tiling: NodeTiling, unit: str) -> tuple[int, int]:
    """(A box rows, K boxes a stage) of a gemm tile on the target (`warpy.mega.tiling.gemm_stage`;
    the fused gate/up gemm's stage holds two B boxes a K box)."""
    return gemm_stage(unit, tiling.extents[-2], tiling.extents[-1], node.operands[0].view.shape[0],
                      2 if node.glu else 1)


def _k_chunk(node: Node, tiling: NodeTiling, unit: str) -> int:
    """K boxes one copy of a gemm operand moves (sm_90a, and sm_100a's decode tiles): a stage's
    `k_boxes` at once where K is a whole number of K boxes (at least a stage's) and both operands'
    maps have room for a third dimension: A's and B's maps then run (K within a box, rows, K boxes),
    the third dimension's stride one box of K (128 bytes), so that one copy lands a stage's K boxes
    one after the other exactly as `k_boxes` copies of a box would (a 64x16 decode tile: 1 copy of
    20 KiB of weight, not 10 of 2); else 1 (a copy a K box)."""
    if node.kind != "gemm":
        return 1
    kb = gemm_stage_of(node, tiling, unit)[1]
    k = node.operands[0].view.shape[1]
    if kb < 2 or k % tiling.k_step or k // tiling.k_step < kb:
        return 1
    for op in node.operands[:3 if node.glu else 2]:
        mdims, _ = map_dims(op.view, keep=True)
        if len(mdims) < 2 or len(mdims) + 1 > F.COORDS:
            return 1
    return kb


class _Maps:
    def __init__(self, s: Schedule) -> None:
        self.s = s
        self.maps: list[TensorMap] = []
        self.index: dict[tuple[object, ...], int] = {}

    def slot(self, node: Node, role: int, tensor: int, view: View, tiling: NodeTiling) -> _Slot:
        prog = self.s.program
        t = prog.tensors[tensor]
        esz = element_type(t.dtype).bytes
        # (a node writing its tensor through a view: the view's rank, `lower._coarse_out`)
        out_rank = len(node.out_view.shape if node.out_view is not None else prog.tensors[node.out].shape)
        attn = node.kind in ATTENTION_KINDS
        if node.kind == "gemm" and node.glu and role == 3:
            role = 2  # the up weight: mapped and boxed as B (the gate weight) is
        view_axes = _attention_axes(node, role, view) if attn else _axes(node, role, view, out_rank)
        # the output, A and B of a gemm: boxes of the tile's rows; K and V of attention partials: boxes of
        # k_step cache rows, also where the node's rows are one (the appended row, `lower.fresh_rows`)
        keep = (node.kind == "gemm" and role in (0, 1, 2)) or (node.kind == "attention" and role in (2, 3))
        mdims, offset = map_dims(view, keep=keep)
        if len(mdims) == 1:
            # the H200's driver refused a rank-1 map (cuTensorMapEncodeTiled: CUDA_ERROR_INVALID_VALUE
            # for bf16 dims (40,) box (40,)): every map gets a second dimension of extent 1, its
            # coordinate 0 and its stride the row's bytes rounded up to 16 (never followed)
            row = -(-mdims[0].extent * element_type(t.dtype).bytes // 16) * 16
            mdims = (mdims[0], MapDim(PAD_DIM, 1, row, None))
        pair = rope_pair(node, tiling)
        at_pair = -1  # the map dimension of a roped pair tile's halves (`tiling.rope_pairs`), D / 2 apart
        if pair and role == 2:  # the weight: (K, rows, halves[, K boxes]); a selected layer folded into the origin
            offset += sum(view.start[m.base_dim] * m.stride for m in mdims if m.view is None and m.base_dim != PAD_DIM)
            # (the rows' extent stops D / 2 short: the halves dimension reaches the rest)
            mdims = tuple(m for m in mdims if m.view is not None)
            rows = mdims[1]
            mdims = (mdims[0], MapDim(rows.base_dim, rows.extent - pair // 2, rows.stride, rows.view),
                     MapDim(PAD_DIM, 2, pair // 2 * rows.stride, None)) + mdims[2:]
            at_pair = 2
        elif pair and role == 3:  # the tables: (D / 2, halves, rows, planes)
            col = mdims[0]
            mdims = (MapDim(col.base_dim, pair // 2, col.stride, col.view), MapDim(PAD_DIM, 2, pair // 2 * esz, None)) \
                + mdims[1:]
            at_pair = 1
        chunk = _k_chunk(node, tiling, self.s.target.unit) if role in (1, 2) else 1
        at_chunk = 3 if at_pair == 2 else 2
        if chunk > 1:  # (K within a box, rows, K boxes, the rest): `_k_chunk` (a pair tile's B: after its halves)
            kd = mdims[0]
            step = tiling.k_step
            mdims = ((MapDim(kd.base_dim, step, kd.stride, kd.view),) + mdims[1:at_chunk]
                     + (MapDim(PAD_DIM, kd.extent // step, step * esz, None),) + mdims[at_chunk:])
        # a selected index, or the single element of a broadcast scalar (a map dimension of extent 1),
        # runs along no tile axis: its box is one element (16 bytes innermost), its coordinate fixed
        axes = tuple(F.AXIS_PAIR if c == at_pair else
                     F.AXIS_FIXED if m.view is None or (m.extent == 1 and not keep) else view_axes[m.view]
                     for c, m in enumerate(mdims))
        swz = SWIZZLE if (node.kind == "gemm" and role in (1, 2)) or (node.kind == "attention" and role in (2, 3)) else 0
        if attn:
            box = tuple(_attention_box(node, role, a, view, tiling, esz) for a in axes)
        else:
            box = tuple(2 if a == F.AXIS_PAIR else _box(node, role, a, c == 0, tiling, self.s.cluster, esz,
                                                            self.s.target.unit)
                        for c, a in enumerate(axes))
            if chunk > 1:
                box = box[:at_chunk] + (chunk,) + box[at_chunk + 1:]
        key = (tensor, mdims, offset, box, swz)
        if key not in self.index:
            try:
                tma = TmaBox(dtype=t.dtype, dims=tuple(m.extent for m in mdims),
                             strides=tuple(m.stride for m in mdims[1:]), box=box, swizzle=swz)
            except LayoutError as e:
                raise WarpyError(f"{node.where}: the tensor map for {t.name}: {e}") from None
            self.index[key] = len(self.maps)
            self.maps.append(TensorMap(len(self.maps), tensor, self.s.buffer_of[tensor], offset, tma))
        if role == 0 and not self.maps[self.index[key]].tma.stores_exactly:
            # (`warpy.layout.tma.store_clips_exactly`: seen on the H200)
            row = mdims[0].extent * esz
            raise WarpyError(f"{node.where}: {t.name} is stored in rows of {row} bytes, not a whole number of 16: a "
                             f"TMA store clips a row only to 16 bytes and would write the bytes after each row's end; "
                             f"pad its last dimension to a multiple of {16 // esz} elements")
        fixed = tuple(view.start[m.base_dim] if m.view is None and m.base_dim != PAD_DIM else 0 for m in mdims)
        return _Slot(self.index[key], axes, tuple(m.view for m in mdims), fixed, view)


def _slots(s: Schedule) -> tuple[list[list[_Slot]], list[TensorMap]]:
    maps = _Maps(s)
    out = []
    for node, tiling in zip(s.program.nodes, s.tilings):
        out_view = node.out_view or View.whole(s.program.tensors[node.out].shape, s.program.tensors[node.out].dtype)
        slots = [maps.slot(node, 0, node.out, out_view, tiling)]
        slots += [maps.slot(node, r + 1, op.tensor, op.view, tiling) for r, op in enumerate(node.operands)]
        out.append(slots)
    if len(maps.maps) > F.BY_NAME["op0.tmap"].mask + 1:
        raise WarpyError(f"the launch needs {len(maps.maps)} tensor maps; an instruction indexes at most "
                         f"{F.BY_NAME['op0.tmap'].mask + 1}")
    return out, maps.maps


def operand_slots(node: Node, n: int) -> list[int]:
    """The instruction slot of each of a node's n operands (the output first): their order, except a
    gemm's residual or norm weight, which is slot 4 whether or not there is a bias (slot 3)."""
    if node.kind == "gemm" and (node.residual or node.norm) and n == len(node.operands) + 1:
        return list(range(n - 1)) + [4]
    return list(range(n))


def instruction_fields(s: Schedule, ins: Instr, slots: Sequence[_Slot], maps: Sequence[TensorMap]) -> dict[str, int]:
    """The field values of one instruction."""
    node = s.program.nodes[ins.node]
    tiling = s.tilings[ins.node]
    what = f"instruction {ins.index} ({node.describe()})"
    if len(ins.waits) > F.WAITS:
        raise WarpyError(f"{what} waits on {len(ins.waits)} counters; an instruction holds {F.WAITS}")
    if len(ins.arrives) > F.ARRIVES:
        raise WarpyError(f"{what} arrives on {len(ins.arrives)} counters; an instruction holds {F.ARRIVES}")
    if len(slots) > F.OPERANDS:
        raise WarpyError(f"{what} has {len(slots)} operands; an instruction holds {F.OPERANDS}")
    used = operand_slots(node, len(slots))
    ext = tiling.extents
    v: dict[str, int] = {
        "opcode": KIND_OPCODE[node.kind], "index": ins.index, "node": node.id,
        "n_operands": max(used) + 1, "n_waits": len(ins.waits), "n_arrives": len(ins.arrives),
        "activation": F.ACTIVATIONS[node.act], "binop": F.BINOPS[node.binop], "bias": int(node.bias),
        "residual": int(node.residual), "b_kmajor": int(node.b_kmajor), "eps": F.fp32_bits(node.eps),
        "glu": int(node.glu), "norm": int(node.norm), "rope": int(node.rope), "rope_pair": rope_pair(node, tiling) // 16,
        "tile_m": ext[-2] if len(ext) >= 2 else 1, "tile_n": ext[-1],
        # read k is operand slot used[k + 1] (slot 0 is the output)
        "early": sum(1 << used[k + 1] for k in ins.early),
    }
    if node.kind == "gemm":
        k = node.operands[0].view.shape[1]
        kb = gemm_stage_of(node, tiling, s.target.unit)[1]
        # k_step: the K one copy moves (a box, or a stage's boxes through chunked maps)
        step = tiling.k_step * _k_chunk(node, tiling, s.target.unit)
        v.update(k_begin=0, k_end=k, k_step=step, k_boxes=kb, k_stages=cdiv(k, tiling.k_step * kb))
    elif node.kind == "rmsnorm":
        cols = s.program.tensors[node.out].shape[-1]
        box_cols = maps[slots[1].tmap].tma.box[0]
        v.update(k_end=cols, k_step=box_cols, k_stages=cdiv(cols, box_cols))
    elif node.kind == "attention":
        (c0, c1) = operand_boxes(s.program, node, ins.box)[1][0]
        v.update(tile_m=node.tokens * node.group, tile_n=node.head_dim, k_begin=c0, k_end=node.length,
                 k_step=tiling.k_step, k_stages=cdiv(c1 - c0, tiling.k_step), group=node.group,
                 causal=int(node.causal), scale=F.fp32_bits(node.scale * LOG2E))
    elif node.kind == "attention_combine":
        v.update(tile_m=node.group, tile_n=node.head_dim, k_end=node.splits, k_step=tiling.k_step,
                 k_stages=cdiv(node.splits, tiling.k_step), group=node.group)
    boxes = [gemm_view_box(s.program, node, ins.box)] + operand_boxes(s.program, node, ins.box)
    for i, (slot, box) in zip(operand_slots(node, len(slots)), zip(slots, boxes)):
        if len(slot.axes) > F.COORDS:
            raise WarpyError(f"{what}: operand {i}'s map has rank {len(slot.axes)}; an instruction holds {F.COORDS}")
        v[f"op{i}.tmap"] = slot.tmap
        v[f"op{i}.rank"] = len(slot.axes)
        v[f"op{i}.axes"] = sum(a << (3 * c) for c, a in enumerate(slot.axes))
        tma = maps[slot.tmap].tma
        v[f"op{i}.box_16"] = tma.box_bytes // 16
        stride = 1
        for c, a in enumerate(slot.axes):  # the landed box is packed: dimension c's elements `stride` apart
            if a in (0, 1):
                v[f"op{i}.{'col' if a == 0 else 'row'}_stride"] = stride
            stride *= tma.box[c]
        for c, j in enumerate(slot.dims):
            v[f"op{i}.coord{c}"] = slot.fixed[c] if j is None else box[j][0]
        if v[f"op{i}.coord0"] * tma.elem_bytes % 16:
            # (`tiling.inner_axes`: the tiling keeps such starts aligned; this refuses what it missed)
            raise WarpyError(f"{what}: operand {i} ({_tensor_name(s, maps[slot.tmap])}) starts its innermost dimension at "
                             f"element {v[f'op{i}.coord0']}, not on a 16-byte boundary: a TMA copy from there raises "
                             f"an illegal instruction")
    for k, w in enumerate(ins.waits):
        v[f"wait{k}.counter"] = w.counter
        v[f"wait{k}.target"] = w.target
        v[f"wait{k}.before_store"] = int(w.before_store)
    for k, c in enumerate(ins.arrives):
        v[f"arrive{k}"] = c
    return v


def _tensor_name(s: Schedule, m: TensorMap) -> str:
    return s.program.tensors[m.tensor].name


def encode(s: Schedule) -> Encoded:
    """Every instruction packed (global order) and the launch's tensor maps; a one-line error for a
    value a field cannot hold."""
    slots, maps = _slots(s)
    words = np.zeros((len(s.instrs), F.WORDS), dtype=np.uint32)
    for ins in s.instrs:
        words[ins.index] = F.pack(instruction_fields(s, ins, slots[ins.node], maps), f"instruction {ins.index}")
    return Encoded(maps, words)


def decode(words: np.ndarray) -> list[dict[str, int]]:
    """Each instruction's fields, as the device interpreter reads them."""
    return [F.unpack([int(w) for w in row]) for row in np.asarray(words).reshape(-1, F.WORDS)]


__all__ = ["TensorMap", "Encoded", "encode", "decode", "instruction_fields", "operand_slots"]
