"""The megakernel's interpreter on sm_100a: a unit is a 2-CTA cluster whose two CTAs run the same
instruction, each its half of the tile's rows; the tensor core (tcgen05) is driven by a launcher
warp, and the tensor memory is a token passed from one instruction to the next. What it shares with
the sm_90a interpreter (slots, pages and renaming, counters, status words, fields, dispatch, the
loader's and storer's steps) is `kernels/mega_common.py`; the op bodies are
`kernels/mega_sm100_*.py`. docs/megakernel.md ("The interpreter on sm_100a") says why.

384 threads, 12 warps, in each CTA of the pair:

| warps | role | per instruction |
|---|---|---|
| 0 | controller | waits until its slot is free, fetches the instruction with one bulk copy (static: instruction `it` of its cluster's queue; dynamic: the index cluster launch control handed out) |
| 1 | loader | the load-stage counter waits (acquire), the body's `load`, then hands on the pages the body does not use |
| 2 | storer | the store-stage counter waits, the body's `store`, the arrives (release at GPU scope) |
| 3 | launcher | CTA 0: waits for the tensor-memory token, then the body's `launch` (its tcgen05 MMAs, `cta_group::2`, for both CTAs) or, for a body that does not use the tensor memory, hands the token straight on |
| 4-11 | consumers | the body's `compute` (a gemm's reads its accumulator from its CTA's tensor memory and returns the token) |

**The pair.** Both CTAs fetch the same instruction: the queue of unit u is cluster u's (static
mode), and cluster launch control's answer lands in both CTAs (dynamic mode). Each CTA computes its
half of the tile's rows: the host's boxes along the tile's rows are `tile_m / 2` (`warpy.mega.encode`),
and `Role.field` gives a body the instruction as its CTA sees it (`tile_m`: its rows; a coordinate
along the rows: its half's origin). Each CTA arrives on the counters after its own stores (a
counter's target counts both). A tile of one row is CTA 0's alone (CTA 1 loads and stores nothing).

**The tensor-memory token** (`tmem_token`, CTA 0's, 2 arrivals a phase, pre-arrived at start): an
instruction's phase completes when both CTAs are done with the tensor memory of the instruction
before. CTA 0's launcher waits for phase `it` before its MMAs write either CTA's tensor memory; a
gemm's consumers in each CTA return it (CTA 1's by a remote arrive) once its accumulator is in
registers (`tcgen05.wait::ld`, then `tcgen05.fence::before_thread_sync`), so the next gemm's MMAs
overlap this one's epilogue and stores. For a body that does not use the tensor memory the launcher
arrives twice itself. No party arrives for phase i + 1 before phase i completed, so a parity wait
never sees a phase overrun.

**Cluster launch control** (dynamic mode): one cluster an instruction is launched; cluster c runs
instruction c, then rank 0's controller asks (`UGETNEXTWORKID.BROADCAST`) for a cluster not yet
launched, whose answer lands in both CTAs (each arms its own barrier with 16 bytes), and the pair
runs the instruction of the cancelled cluster's index. Indices are handed out in launch order, so
every counter wait names an instruction taken earlier (docs/megakernel.md: no deadlock).

**Leaving.** The workers loop until the controller publishes the stop opcode (`STOP`, an instruction
the host appends to the queue, `with_stop`: the static queue's last row, the dynamic queue's
instruction N), fetched after the queue's end or cluster launch control's refusal. No CTA
leaves while its partner may still address it: CTA 0's launcher waits for the token's last phase
(every MMA done, every consumer of both CTAs done with the tensor memory) before it tells CTA 1
(`pair_done`); rank 0's controller drains the answers' barrier (CTA 1's frees landed). Then each
CTA frees its tensor memory.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Optional

from warpy.errors import WarpyError
from warpy.isa.buffers import BarrierArray, SmemBuffer, TmemBuffer
from warpy.isa.families import alu, clc, control, memory, sync, tcgen05
from warpy.isa.operands import RZ, URZ, Mem, P, R, UP, UR, URVec
from warpy.isa.pipes import Pipe, ProducerEnd, init_barriers, wait
from warpy.isa.program import Program
from warpy.layout import Layout
from warpy.mega import fields as F
from warpy.target import SM100A

from . import mega_common as C
from .mega_common import CONSUMER_REGS, CONSUMER_WARPS, PRODUCER_REGS, InterpBase, Launch

MAXNREG = 168
#: the opcode the controller publishes when its unit has no instruction left (no host instruction has it)
STOP = F.BY_NAME["opcode"].mask
#: answers of cluster launch control in flight
CLC_DEPTH = 2
TMEM_COLUMNS = SM100A.tmem_columns
#: the seeded faults: the common ones, and the tensor memory's hand-offs (the gemm body's): no
#: tcgen05.fence::before_thread_sync in the consumers before they return the token; no
#: after_thread_sync in the launcher after its waits (the token's, and the stages': any one of them
#: after the token wait would order the MMAs, as PTX says); CTA 1's consumers not returning it (the
#: pair hand-off: CTA 0's MMAs write CTA 1's tensor memory after CTA 0's consumers only); the token
#: returned before the accumulator was read; and the decode tiles' (`kernels/mega_sm100_gemm.py`): a
#: stage's expected bytes those of one A and B box pair where a stage copies `k_boxes` pairs
#: (`decode-tx`), the MMAs reading B's box j after box j of A, as if the boxes alternated, instead
#: of after the stage's A boxes (`decode-b-offset`)
FAULTS = C.FAULTS + ("no-fence-before", "no-fence-after", "pair-handoff", "early-token", "decode-tx", "decode-b-offset")
_COORD = re.compile(r"op(\d)\.coord(\d)")


class Interp(InterpBase):
    """The sm_100a program under construction: what every role shares (`InterpBase`) and the pair's
    tensor memory, its token, the answers of cluster launch control."""

    target = SM100A
    FAULTS = FAULTS

    def __init__(self, launch: Launch, bodies: dict[int, Any]) -> None:
        if launch.ctas != 2:
            raise WarpyError(f"the sm_100a interpreter runs 2-CTA units, not {launch.ctas}")
        super().__init__(launch, bodies, maxnreg=MAXNREG, stop_row=True)
        p = self.p
        # tensor memory: the whole of it, allocated by each CTA's launcher for the pair (cta_group::2)
        self.tmem_slot: SmemBuffer = p.smem_words("tmem_slot", 1)
        self.tmem: TmemBuffer = p.tmem("tmem", Layout((128, TMEM_COLUMNS), (1 << 16, 1)), TMEM_COLUMNS)
        # the register tensor-memory addresses are derived from: each role that uses the tensor
        # memory reads the allocation's address into it (`read_tmem_base`)
        self.tmem_base: UR = p.ur("tmem_base")
        p.derive.tmem_base = self.tmem_base
        # the token (CTA 0's): two returns a phase; the seeded pair-handoff fault counts CTA 0's only
        self.token: BarrierArray = p.barriers("tmem_token", 1, 1 if self.fault == "pair-handoff" else 2)
        # CTA 0's launcher to CTA 1's: the pair's tensor-core work is over
        self.pair_done: BarrierArray = p.barriers("pair_done", 1, 1)
        self.clc: Optional[Pipe] = None
        self.clc_resp: Optional[SmemBuffer] = None
        if launch.mode == "dynamic":
            # each CTA's controller arms its own stage (16 bytes); both free it in rank 0
            self.clc = p.pipe("clc", CLC_DEPTH, fills=1, frees=2)
            self.clc_resp = p.smem_words("clc_resp", CLC_DEPTH, "b128")
        #: the bitmap of fenced tensor maps the sm_90a bodies' `descriptor` can keep: none here, every
        #: copy fences its map (`kernels.mega_ops.descriptor`)
        self.fenced: Optional[SmemBuffer] = None
        #: what bodies declare for themselves (`declare`), by body name
        self.decl: dict[str, object] = {}
        for body in sorted(bodies.values(), key=lambda b: b.opcode):
            declare = getattr(body, "declare", None)
            if declare is not None:
                declare(self)
        self.check_smem()

    # -- the program ---------------------------------------------------------------------------
    def build(self) -> Program:
        p = self.p
        init_barriers(p)
        # each CTA's launcher warp allocates the pair's tensor memory; the cluster barrier orders the
        # allocation and the barriers' initialisation before any peer's MMA or remote arrival
        warp = p.warp_index()
        w3 = p.p("is_warp3")
        p.emit(alu.isetp("EQ", w3, warp, 3))
        with p.when(w3):
            p.derive.emit_at(self.tmem_slot.at(0), lambda a: tcgen05.tmem_alloc(a, TMEM_COLUMNS, True))
            p.emit(tcgen05.tmem_relinquish())
        p.emit(tcgen05.tc_fence_before())
        p.emit(sync.cluster_arrive())
        p.emit(sync.cluster_wait())
        p.emit(tcgen05.tc_fence_after())
        with p.role("producers", range(0, 4)):
            p.emit(control.setmaxnreg_dealloc(PRODUCER_REGS))
            with p.role("controller", range(0, 1)):
                self.controller()
            with p.role("loader", range(1, 2)):
                self.worker("loader", self.loader_step, before=lambda r: self.recycler_start())
            with p.role("storer", range(2, 3)):
                self.worker("storer", self.storer_step)
            with p.role("launcher", range(3, 4)):
                self.worker("launcher", self.launcher_step, before=self.launcher_start, after=self.launcher_end)
        with p.role("consumers", CONSUMER_WARPS):
            ok = p.up("regs_granted")
            grow = p.fresh_label("GROW")
            p.label(grow)
            p.emit(control.setmaxnreg_try_alloc(ok, CONSUMER_REGS))
            p.emit(control.bra(grow).guarded(~ok), mark="~")
            self.worker("consumers", self.consumer_step)
        p.emit(control.exit_())
        return p

    # -- the controller --------------------------------------------------------------------------
    def controller(self) -> None:
        p = self.p
        p.emit(sync.acqbulk())  # the queue is read-only, but every global access follows the dependent-launch wait
        p.emit(sync.preexit())  # the next launch may start its prologue as SMs free up
        leader = p.elect()
        qbase = p.urvec("queue_base", 2)
        p.emit(alu.uldc(qbase, self.queue.cbank(), p.sm))
        cta = p.ur("cta_u")
        p.emit(alu.s2ur(cta, "SR_CTAID.X"))
        unit = p.ur("unit_u")  # the cluster's index: its queue (static), its first instruction (dynamic)
        p.emit(alu.ushf_r(unit, cta, 1))
        out = self.slot.producer("fetch")
        if self.clc is None:
            # instruction `it` of this unit: queue[it, unit] of (waves + 1, units, 64) words, the
            # last row the stop opcode
            with p.loop("it", self.launch.waves + 1) as it:
                with out.stage():
                    out.wait_empty()
                    k = p.ur("fetch_k")
                    p.emit(alu.r2ur(k, it.reg))
                    p.emit(alu.uimad(k, k, self.launch.units, unit))
                    self.fetch(out, k, leader, qbase)
            return
        rank0 = self.clc_fetches(out, unit, leader, qbase)
        # rank 0 leaves only once both CTAs have freed the last answers (CTA 1's frees are remote)
        prod = self.clc_prod
        with p.when(rank0):
            with p.loop("clc_drain", CLC_DEPTH):
                with prod.stage():
                    prod.wait_empty()

    def clc_fetches(self, out: ProducerEnd, unit: UR, leader: P, qbase: URVec) -> UP:
        """Dynamic mode: the cluster's own instruction, then one a cancelled cluster until cluster
        launch control declines, then the stop opcode (the queue's instruction N); returns the
        uniform predicate `rank 0`."""
        p = self.p
        assert self.clc is not None and self.clc_resp is not None
        rank = p.ur("ctrl_rank")
        p.emit(alu.s2ur(rank, "SR_CgaCtaId"))
        rank0 = p.up("ctrl_rank0")
        p.emit(alu.uisetp("EQ", rank0, rank, 0))
        zero = p.ur("rank_zero")
        p.emit(alu.umov(zero, 0))
        prod = self.clc_prod = self.clc.producer("clc_p")
        cons = self.clc.consumer("clc_c")
        k = p.ur("fetch_k")
        p.emit(alu.umov(k, unit))
        top = p.fresh_label("FETCH")
        p.label(top)
        with out.stage():
            out.wait_empty()
            self.fetch(out, k, leader, qbase)
        # ask for the next cluster (rank 0, once both CTAs freed this stage's previous answer); the
        # answer lands in both CTAs, each counting 16 bytes on its own barrier
        with prod.stage():
            with p.when(rank0):
                prod.wait_empty()
            prod.arrive_full(leader, tx_bytes=16)
            resp = self.clc_resp.at(prod.ring)
            rreg, roff = p.derive.value_reg("addr", resp)
            breg, boff = p.derive.value_reg("addr", prod.full)
            ask = clc.try_cancel(Mem(rreg, offset=roff), Mem(breg, offset=boff), multicast=True)
            with p.when(rank0):
                p.emit(ask.noted(resp.note("addr", 0)).noted(prod.full.note("addr", 1)).guarded(leader))
        more = p.p("more_work")
        with cons.stage():
            cons.wait_full()
            ans = p.rvec("clc_answer", 4)
            p.derive.emit_at(self.clc_resp.at(cons.ring), lambda a: memory.lds(ans, a))
            p.emit(clc.query_canceled(more, ans))
            nxt = p.r("next_cta")
            p.emit(clc.query_ctaid_x(nxt, ans))
            cons.free_remote(zero, leader)
        p.emit(alu.r2ur(k, nxt))
        p.emit(alu.ushf_r(k, k, 1))  # the cancelled cluster's index: its instruction
        p.emit(control.bra(top).guarded(more))
        with out.stage():
            out.wait_empty()
            p.emit(alu.umov(k, self.launch.instructions))
            self.fetch(out, k, leader, qbase)
        return rank0

    clc_prod: ProducerEnd

    # -- every worker role: the loop until STOP ------------------------------------------------
    def worker(self, role: str, step: Callable[["Role"], None], before: Optional[Callable[["Role"], None]] = None,
               after: Optional[Callable[["Role"], None]] = None) -> None:
        """The role's loop over its unit's instructions until the controller publishes STOP: wait
        for the slot, run `step`, free the slot, rename the pages for the next instruction."""
        p = self.p
        if role in ("loader", "storer"):
            p.emit(sync.acqbulk())
        r = Role(self, role)
        for body in sorted(self.bodies.values(), key=lambda b: b.opcode):
            start = getattr(body, "start", None)
            if start is not None:
                start(self, r)  # per-role state a body keeps across instructions
        if before is not None:
            before(r)
        it = p.r("it")
        p.emit(alu.mov(it, 0))
        r.it = it
        top, end = p.fresh_label(f"{role.upper()}_NEXT"), p.fresh_label(f"{role.upper()}_STOP")
        p.label(top)
        with r.cons.stage():
            r.cons.wait_full()
            r.begin()
            stop = p.p("stop")
            p.emit(alu.isetp("EQ", stop, r.opcode, STOP))
            p.emit(control.bra(end).guarded(stop))
            r.lds(r.index, F.BY_NAME["index"].word)  # (where the checker's messages say it is)
            step(r)
            if role != "consumers":
                r.cons.free(r.leader)
            r.update_order()
        p.emit(alu.iadd3(it, it, 1))
        p.emit(control.bra(top))
        p.label(end)
        for body in sorted(self.bodies.values(), key=lambda b: b.opcode):
            body.finish(self, r)  # what a body does once its role has run every instruction (a drain)
        if after is not None:
            after(r)

    # -- loader: the body's loads, then the pages it does not use -------------------------------
    def loader_step(self, r: "C.Role") -> None:
        super().loader_step(r)
        self.recycle_unused(r)

    # -- launcher ------------------------------------------------------------------------------
    def launcher_start(self, r: "Role") -> None:
        """The tensor memory's address; the token's first phase (free), CTA 0."""
        p = self.p
        self.read_tmem_base()
        with p.when(r.rank0):
            self.return_token(r, r.leader, both=True)

    def read_tmem_base(self) -> None:
        """tmem_base = the allocation's address, from the slot the launcher wrote before the
        prologue's cluster barrier."""
        p = self.p
        word = p.r("tmem_word")
        p.derive.emit_at(self.tmem_slot.at(0), lambda a: memory.lds(word, a))
        p.emit(alu.r2ur(self.tmem_base, word))

    def token_parity(self, r: "Role") -> R:
        """Bit 31: the parity of the token's phase this instruction waits for (the instruction count's)."""
        return r.page_parity()

    def return_token(self, r: "Role", guard: P, both: bool = False) -> None:
        """One return of the token (`both`: the two of an instruction that did not use the tensor
        memory): local in CTA 0, a remote arrive from CTA 1."""
        p = self.p
        n = 1 if self.fault == "pair-handoff" else 2
        for _ in range(n if both else 1):
            reg = p.ur("token_addr")
            base, off = p.derive.value_reg("addr", self.token.at(0))
            p.emit(alu.uiadd3(reg, base, off).noted(self.token.at(0).note()), mark="+")
            p.emit(alu.mapa(reg, r.zero, reg))
            p.emit(sync.arrive_remote(Mem(reg)).guarded(guard))

    def launcher_step(self, r: "Role") -> None:
        """CTA 0: wait for the token (phase `it`: both CTAs done with the tensor memory of the
        instruction before); then the body's MMAs (`launch`, after tcgen05.fence::after_thread_sync:
        the wait now orders them), or, for a body that does not use the tensor memory, the token
        handed straight on."""
        p = self.p

        def launch(body: Any) -> None:
            uses = getattr(body, "tmem", False)
            with p.when(r.rank0):
                wait(p, self.token.at(0), self.token_parity(r))
                if not uses:
                    self.return_token(r, r.leader, both=True)
                    return
                if self.fault != "no-fence-after":  # seeded: the launcher never fences after its waits
                    p.emit(tcgen05.tc_fence_after())
                body.launch(self, r)

        r.dispatch(launch)

    def launcher_end(self, r: "Role") -> None:
        """CTA 0: the token's last phase (every MMA done, every read of both CTAs' tensor memory
        done), then CTA 1 is told; each CTA frees its tensor memory."""
        p = self.p
        one = p.ur("rank_one")
        p.emit(alu.umov(one, 1))
        with p.when(r.rank0):
            wait(p, self.token.at(0), self.token_parity(r))
            p.emit(tcgen05.tc_fence_after())
            reg = p.ur("pair_done_peer")
            base, off = p.derive.value_reg("addr", self.pair_done.at(0))
            p.emit(alu.uiadd3(reg, base, off).noted(self.pair_done.at(0).note()), mark="+")
            p.emit(alu.mapa(reg, one, reg))
            p.emit(sync.arrive_remote(Mem(reg)).guarded(r.leader))
        with p.when(~r.rank0):
            zero = p.r("phase0")
            p.emit(alu.mov(zero, 0))
            wait(p, self.pair_done.at(0), zero)
            p.emit(tcgen05.tc_fence_after())
        p.emit(tcgen05.tmem_dealloc(self.tmem_base, TMEM_COLUMNS, True))


class Role(C.Role):
    """A role of one CTA of the pair: the common role (`kernels.mega_common.Role`) and the CTA's rank;
    `field` gives the instruction as this CTA sees it (its share of the tile's rows)."""

    def __init__(self, ip: InterpBase, name: str) -> None:
        super().__init__(ip, name)
        p = self.p
        self.urank = p.ur("cta_rank")
        p.emit(alu.s2ur(self.urank, "SR_CgaCtaId"))
        self.rank0 = p.up("is_rank0")
        p.emit(alu.uisetp("EQ", self.rank0, self.urank, 0))
        self.prank0 = p.p("is_rank0_p")
        p.emit(alu.plop3_mov(self.prank0, self.rank0))
        self.zero = p.ur("rank_zero")
        p.emit(alu.umov(self.zero, 0))
        #: the index of the instruction the role runs (its place in the global order)
        self.index = p.r("ins_index")

    def whole_field(self, name: str, dst: Optional[R] = None) -> R:
        """A field of the instruction as the host wrote it (the whole tile's)."""
        return super().field(name, dst)

    def field(self, name: str, dst: Optional[R] = None) -> R:
        """A field of the instruction as this CTA of the pair sees it: `tile_m` is its rows (the
        first ceil(tile_m / 2) CTA 0's, the rest CTA 1's), a box coordinate along the tile's rows
        its half's origin (+ ceil(tile_m / 2) in CTA 1); the rest as the host wrote them."""
        d = super().field(name, dst)
        m = _COORD.fullmatch(name)
        if name != "tile_m" and m is None:
            return d
        p = self.p
        half = p.r("pair_half")
        self.whole_field("tile_m", half)
        p.emit(alu.iadd3(half, half, 1))
        p.emit(alu.shf_r(half, half, 1))
        if name == "tile_m":
            # CTA 0: ceil(tile_m / 2) rows; CTA 1: the rest
            p.emit(alu.imad(d, half, (1 << 32) - 1, d).guarded(~self.prank0))
            p.emit(alu.mov(d, half).guarded(self.prank0))
            return d
        assert m is not None
        k, c = int(m.group(1)), int(m.group(2))
        axes = self.whole_field(f"op{k}.axes", p.r("pair_axes"))
        p.emit(alu.shf_r(axes, axes, 3 * c))
        p.emit(alu.lop3(axes, axes, 7, RZ, 0xC0))
        along = p.p("cta1_row_coord")  # CTA 1, and map dimension c runs along the tile's rows
        p.emit(alu.isetp("EQ", along, axes, 1, c=~self.prank0))
        p.emit(alu.iadd3(d, d, half).guarded(along))
        return d


def with_stop(words: Any) -> Any:
    """The `queue` parameter's words with the stop instruction appended: (waves, units, 64) gets a
    last row of it for every unit (static), (N, 64) an instruction N (dynamic)."""
    import numpy as np

    w = np.asarray(words, dtype=np.uint32)
    stop = np.zeros((1,) + w.shape[1:], dtype=np.uint32)
    stop[..., F.BY_NAME["opcode"].word] = STOP
    return np.concatenate([w, stop], axis=0)


ROLE_OF_WARP = {0: "controller", 1: "loader", 2: "storer", 3: "launcher"}


def where(pl: Any, cta: int, warp: int, regs: Any) -> str:
    """`SM c (CTA r of cluster u), the launcher, at instruction N (its k-th: node n op)` for a warp of
    the sm_100a interpreter (`kernels.mega.check_launch`'s messages)."""
    import numpy as np

    role = ROLE_OF_WARP.get(warp, "consumers")
    at = f"SM {cta} (CTA {cta % 2} of cluster {cta // 2}), the {role}"

    def reg(name: str) -> Optional[int]:
        v = regs.get(name)
        if v is None:
            return None
        return int(np.asarray(v).ravel()[0]) if isinstance(v, np.ndarray) else int(v)

    it = reg("it")
    if role == "controller":
        return f"{at}, at its fetch {it}" if it is not None else f"{at}, before its first fetch"
    idx, op = reg("ins_index"), reg("opcode")
    if it is None or idx is None:
        return f"{at}, before its first instruction"
    if op == STOP:
        return f"{at}, after its last instruction ({it} run)"
    s = pl.schedule
    if op == F.NOOP or not 0 <= idx < len(s.instrs):  # (every node's instructions have a body: a noop pads a queue)
        return f"{at}, at a noop (its queue has ended)"
    node = s.program.nodes[s.instrs[idx].node]
    n = it + 1
    nth = f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"
    return f"{at}, at instruction {idx} (its {nth}: node {node.id} {node.describe()})"


def build(launch: Launch) -> Program:
    """The sm_100a interpreter program for one launch."""
    from .mega_sm100_ops import bodies

    return Interp(launch, bodies()).build()


_ = (UP, RZ)

__all__ = ["Interp", "Role", "build", "where", "with_stop", "STOP", "FAULTS", "MAXNREG", "CLC_DEPTH", "ROLE_OF_WARP"]
