"""Tiles into a schedule: the global order, buffers with reuse, counters from access regions, and the
per-unit queues.

1. **Global order.** Nodes in topological order, each node's tiles in its rule's order. Every
   instruction an instruction waits on is earlier in this order (a producer node precedes its
   consumers; a buffer's earlier users precede its reuser), and that is what makes the schedule
   impossible to deadlock (see `docs/megakernel.md`).
2. **Buffers.** Inputs and outputs own their memory. An intermediate may take the buffer of an
   earlier intermediate of its element type (the launch declares a buffer's type) when its first
   instruction is at least a full wave (the number of units) after the last instruction that
   touched the buffer, so on the GPU its reuse barrier is almost always passed already. The reuse counter: every instruction that read or wrote the old tensor
   arrives; every instruction of the new tensor's node waits for all of them before its first store.
3. **Counters from access regions.** For each tensor a node writes, the unit cells are the grid
   that every box boundary (writers' and readers') falls on: on regular tilings the gcd of the box
   extents, and still exact at ragged edges and view offsets. Each cell knows its writer; a reading
   instruction's dependency set is the writers of the cells its box covers. One counter per distinct
   (producer node, dependency set), shared by every consumer with that set; its target per call is
   the number of arrivals (set size x CTAs per unit). A waiter waits for target x call number.
4. **Placement.** `static`: list scheduling over the global order with the tiles' estimated costs
   (each instruction to the unit that frees first, its start no earlier than its producers'
   estimated finish), so each queue is a subsequence of the global order. An instruction's waits of
   a stage are in the order their counters are estimated to fill (the device polls them one after
   the other: a wait that already holds still costs a round trip, so it goes before the last one). `dynamic`: no queues; on
   sm_90a the units take the next index from a global work counter (monotonic too: call c's indices
   are the counter minus (N + units) x (c - 1)); on sm_100a cluster launch control hands out
   clusters, one per instruction, in launch order.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from warpy.errors import WarpyError
from warpy.mega.fields import ARRIVES, WAITS
from warpy.mega.graph import Graph
from warpy.mega.lower import Program, lower
from warpy.mega.tiling import CLUSTER, Box, NodeTiling, gemm_write_boxes, operand_boxes, tile_node
from warpy.mega.tiling import units as units_of
from warpy.target import Target, element_type, target as get_target

MODES = ("static", "dynamic")


@dataclass(frozen=True)
class Access:
    """A box of a tensor, in the tensor's own coordinates (clipped)."""

    tensor: int
    box: Box


@dataclass(frozen=True)
class Wait:
    counter: int
    target: int
    before_store: bool = False


@dataclass(eq=False)
class Instr:
    index: int
    node: int
    box: Box
    reads: tuple[Access, ...]
    write: Access
    cost: float
    #: more boxes of the write's tensor it writes (a roped gemm's pair tile: the two halves of a head's
    #: columns it holds, `tiling.gemm_write_boxes`)
    more: tuple[Access, ...] = ()
    waits: list[Wait] = field(default_factory=list)
    arrives: list[int] = field(default_factory=list)
    #: the read positions whose boxes no instruction of the launch writes (their dependency set is
    #: empty: graph inputs, which are never written and whose buffers are never reused), so a loader
    #: may copy them before its load-stage waits
    early: tuple[int, ...] = ()

    @property
    def writes(self) -> tuple[Access, ...]:
        """Every box it writes (one tensor's)."""
        return (self.write,) + self.more


@dataclass(eq=False)
class Counter:
    """kind data: `producer` is the node whose instructions `members` arrive; kind reuse: `producer`
    is the buffer being reused. target: arrivals per call."""

    id: int
    kind: str
    producer: int
    members: tuple[int, ...]
    target: int


@dataclass(eq=False)
class Buffer:
    id: int
    nbytes: int
    tensors: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Reuse:
    buffer: int
    old: int
    new: int
    counter: int
    distance: int  # instructions between the old tensor's last access and the new one's first


@dataclass(eq=False)
class Schedule:
    target: Target
    program: Program
    mode: str
    cluster: int
    units: int
    tilings: list[NodeTiling]
    instrs: list[Instr]
    counters: list[Counter]
    buffers: list[Buffer]
    buffer_of: list[int]
    reuses: list[Reuse]
    queues: Optional[list[list[int]]]
    finish: list[float]

    @property
    def waves(self) -> int:
        """Instructions in the longest queue (dynamic: instructions over units, rounded up)."""
        if self.queues is None:
            return -(-len(self.instrs) // self.units)
        return max((len(q) for q in self.queues), default=0)

    @property
    def makespan(self) -> float:
        return max(self.finish, default=0.0)

    def node_instrs(self, node: int) -> list[int]:
        return [i.index for i in self.instrs if i.node == node]

    def work_counter_step(self) -> int:
        """Dynamic mode on sm_90a: how far the global work counter moves in one call (every index
        taken, plus one failed take per unit)."""
        return len(self.instrs) + self.units


def _dependency_sets(prog: Program, instrs: list[Instr]) -> dict[tuple[int, int], tuple[int, ...]]:
    """(instruction, read position) -> the instructions that write the cells the read covers (tensors
    a node writes; reads of inputs have none; a read of state, a cache the launch appends to, has the
    writers of the appended cells it covers, and none where it reads only the caller's rows)."""
    writes: dict[int, list[tuple[Instr, Box]]] = {}
    reads: dict[int, list[tuple[Instr, int]]] = {}
    for ins in instrs:
        for w in ins.writes:
            writes.setdefault(w.tensor, []).append((ins, w.box))
        for k, acc in enumerate(ins.reads):
            if prog.tensors[acc.tensor].kind != "input":
                reads.setdefault(acc.tensor, []).append((ins, k))
    out: dict[tuple[int, int], tuple[int, ...]] = {}
    for t, readers in reads.items():
        shape = prog.tensors[t].shape
        cuts = [{0, n} for n in shape]
        for ins, wb in writes.get(t, []):
            for d, (lo, hi) in enumerate(wb):
                cuts[d].update((lo, hi))
        for ins, k in readers:
            for d, (lo, hi) in enumerate(ins.reads[k].box):
                cuts[d].update((lo, hi))
        edges = [np.array(sorted(c)) for c in cuts]
        owner = np.full(tuple(len(e) - 1 for e in edges), -1, dtype=np.int64)

        def cells(box: Box) -> tuple[slice, ...]:
            return tuple(slice(int(np.searchsorted(e, lo)), int(np.searchsorted(e, hi))) for e, (lo, hi) in zip(edges, box))

        for ins, wb in writes.get(t, []):
            sl = cells(wb)
            if (owner[sl] >= 0).any():
                raise WarpyError(f"internal: two instructions write the same cells of {prog.tensors[t]}")
            owner[sl] = ins.index
        memo: dict[Box, tuple[int, ...]] = {}
        for ins, k in readers:
            box = ins.reads[k].box
            if box not in memo:
                ids = np.unique(owner[cells(box)])
                if ids[0] < 0 and prog.tensors[t].kind != "state":
                    raise WarpyError(f"internal: instruction {ins.index} reads cells of {prog.tensors[t]} nothing writes")
                memo[box] = tuple(int(i) for i in ids if i >= 0)
            if memo[box]:
                out[(ins.index, k)] = memo[box]
    return out


def build(graph: Graph, arch: str | Target = "sm_90a", mode: str = "static", units: Optional[int] = None,
          glu: bool = False, norm: bool = False, fresh: bool = False, rope: bool = False) -> Schedule:
    """Lower, tile and schedule `graph` for `arch`; a one-line error for what cannot be scheduled.
    `units`: schedule for fewer units than the target has (small tests that want reuse and long
    queues from small graphs); tile rules still use the target's. `glu`: SwiGLU's gate and up
    gemms fused with their silu_mul, `norm`: a decode rmsnorm fused into the gemms reading it, `fresh`: decode
    attention's old and appended cache rows as two partial nodes (`lower`; sm_90a)."""
    tgt = get_target(arch)
    if mode not in MODES:
        raise WarpyError(f"schedule mode {mode!r} is not one of {', '.join(MODES)}")
    prog = lower(graph, tgt, glu, norm, fresh, rope)
    cl = CLUSTER[tgt.unit]
    n_units = units_of(tgt) if units is None else units
    if n_units < 1:
        raise WarpyError(f"a schedule needs at least one unit, not {n_units}")
    tilings = [tile_node(prog, n, tgt) for n in prog.nodes]
    instrs: list[Instr] = []
    for n, tiling in zip(prog.nodes, tilings):
        for tile in tiling.tiles:
            vboxes = operand_boxes(prog, n, tile.box)
            reads = tuple(Access(op.tensor, op.view.base_box(b)) for op, b in zip(n.operands, vboxes))
            wboxes = [vb if n.out_view is None else n.out_view.base_box(vb) for vb in gemm_write_boxes(prog, n, tile.box)]
            instrs.append(Instr(len(instrs), n.id, tile.box, reads, Access(n.out, wboxes[0]), tile.cost,
                                tuple(Access(n.out, b) for b in wboxes[1:])))
    counters: list[Counter] = []

    # --- counters from access regions -----------------------------------------------------------
    deps = _dependency_sets(prog, instrs)
    for ins in instrs:
        ins.early = tuple(k for k in range(len(ins.reads)) if (ins.index, k) not in deps)
    by_key: dict[tuple[int, tuple[int, ...]], int] = {}

    def counter(kind: str, producer: int, members: tuple[int, ...]) -> int:
        key = (producer if kind == "data" else -1 - producer, members)
        if kind == "data" and key in by_key:
            return by_key[key]
        c = Counter(len(counters), kind, producer, members, len(members) * cl)
        counters.append(c)
        if kind == "data":
            by_key[key] = c.id
        return c.id

    grouped: dict[int, list[int]] = {n.id: [] for n in prog.nodes}
    for ins in instrs:
        grouped[ins.node].append(ins.index)
    node_members = {n: tuple(v) for n, v in grouped.items()}
    # consumer node -> producer node pairs switched to whole-node counters (an arrive list too long)
    coarse: set[tuple[int, int]] = set()
    while True:
        counters.clear()
        by_key.clear()
        for ins in instrs:
            ins.waits, ins.arrives = [], []
        for (i, k), members in sorted(deps.items()):
            ins = instrs[i]
            prod = instrs[members[0]].node
            if (ins.node, prod) in coarse:
                members = node_members[prod]
            cid = counter("data", prod, members)
            if all(w.counter != cid for w in ins.waits):
                ins.waits.append(Wait(cid, counters[cid].target))
        for c in counters:
            for m in c.members:
                instrs[m].arrives.append(c.id)
        over = [ins for ins in instrs if len(ins.arrives) > ARRIVES]
        if not over:
            break
        # the consumer node with the most distinct sets over the crowded producer goes coarse
        ins = over[0]
        tally: dict[tuple[int, int], int] = {}
        for cid in ins.arrives:
            c = counters[cid]
            for (i, k), members in deps.items():
                if members == c.members and (instrs[i].node, c.producer) not in coarse:
                    tally[(instrs[i].node, c.producer)] = tally.get((instrs[i].node, c.producer), 0) + 1
        if not tally:
            raise WarpyError(f"instruction {ins.index} would arrive on {len(ins.arrives)} counters; an instruction "
                             f"holds {ARRIVES}")
        coarse.add(max(tally, key=lambda k: tally[k]))

    # --- buffers, reused a full wave behind ----------------------------------------------------
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    accessors: dict[int, list[int]] = {}
    for ins in instrs:
        for acc in ins.reads + ins.writes:
            first.setdefault(acc.tensor, ins.index)
            last[acc.tensor] = ins.index
            lst = accessors.setdefault(acc.tensor, [])
            if not lst or lst[-1] != ins.index:
                lst.append(ins.index)
    buffers: list[Buffer] = []
    buffer_of = [-1] * len(prog.tensors)
    reuses: list[Reuse] = []
    free: list[int] = []  # buffers holding a temp no later instruction touches
    for t in prog.tensors:
        nbytes = t.size * element_type(t.dtype).bytes
        if t.kind == "temp" and t.id in first:
            start = first[t.id]
            # (every node writing it: decode attention's partials may come from two, `lower.fresh_rows`)
            writers = [i for n in prog.nodes if n.out == t.id for i in node_members[n.id]]
            # a buffer a full wave behind, whose users can take one more arrive and whose reuser one more wait
            fits = [b for b in free if buffers[b].nbytes >= nbytes and start - last[buffers[b].tensors[-1]] >= n_units
                    and prog.tensors[buffers[b].tensors[-1]].dtype == t.dtype  # (a buffer holds one element type)
                    and all(len(instrs[m].arrives) < ARRIVES for m in accessors[buffers[b].tensors[-1]])
                    and all(len(instrs[i].waits) < WAITS for i in writers)]
            if fits:
                b = min(fits, key=lambda b: (buffers[b].nbytes, b))
                free.remove(b)
                old = buffers[b].tensors[-1]
                cid = counter("reuse", b, tuple(accessors[old]))
                for m in accessors[old]:
                    instrs[m].arrives.append(cid)
                for i in writers:
                    instrs[i].waits.append(Wait(cid, counters[cid].target, before_store=True))
                reuses.append(Reuse(b, old, t.id, cid, start - last[old]))
                buffers[b].tensors.append(t.id)
                buffer_of[t.id] = b
                free.append(b)
                continue
        b = len(buffers)
        buffers.append(Buffer(b, nbytes, [t.id]))
        buffer_of[t.id] = b
        if t.kind == "temp":
            free.append(b)

    # --- placement -------------------------------------------------------------------------------
    finish = [0.0] * len(instrs)
    done_at: dict[int, float] = {}  # counter -> estimated time of its last arrival (members precede their waiters)
    heap = [(0.0, u) for u in range(n_units)]
    queues: list[list[int]] = [[] for _ in range(n_units)]
    for ins in instrs:
        for w in ins.waits:
            if w.counter not in done_at:
                done_at[w.counter] = max(finish[m] for m in counters[w.counter].members)
        ready = max((done_at[w.counter] for w in ins.waits), default=0.0)
        t0, u = heapq.heappop(heap)
        finish[ins.index] = max(t0, ready) + ins.cost
        queues[u].append(ins.index)
        heapq.heappush(heap, (finish[ins.index], u))
        # a role polls its waits one after the other, each a round trip to the L2 even when it holds
        # already: the counter estimated to fill last goes last, so that once it holds none is left
        ins.waits.sort(key=lambda w: (w.before_store, done_at[w.counter]))
    return Schedule(tgt, prog, mode, cl, n_units, tilings, instrs, counters, buffers, buffer_of, reuses,
                    queues if mode == "static" else None, finish)


__all__ = ["Access", "Wait", "Instr", "Counter", "Buffer", "Reuse", "Schedule", "build", "MODES"]
