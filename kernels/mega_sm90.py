"""The megakernel's interpreter on sm_90a: one persistent CTA per unit runs its queue of 256-byte
instructions (`warpy.mega`), written instruction by instruction like the GEMMs. docs/megakernel.md
("The device interpreter") says why it is built this way; what the targets share (slots, pages and
their renaming, counters between SMs and status words, `Role`, the loader's, storer's, recycling and
consumers' steps) is `kernels/mega_common.py`; the op bodies live in `kernels/mega_ops.py` behind a
small interface (`OpBody`).

384 threads, 12 warps:

| warps | role | per instruction |
|---|---|---|
| 0 | controller | waits until its instruction slot is free, fetches the next 256 bytes of its queue into it with one bulk copy (coalesced) completing on the slot's `full` mbarrier: the instruction is published |
| 1 | loader | waits for the slot, then on the instruction's load-stage counters (acquire), fences the generic proxy before the async one, and runs the body's `load`: one arrive.expect_tx on `loaded[slot]`, TMA loads into its pages |
| 2 | storer | waits for the slot, on the store-stage counters (buffer reuse), runs the body's `store` (TMA stores from shared memory after `out_ready[slot]`, a wait for their writes, the output pages released), then adds 1 to each arrive counter with release at GPU scope (one thread) |
| 3 | recycler | hands the pages the instruction does not use on to the next one (and, once at start, every page to the first) |
| 4-11 | consumers (2 warpgroups, `USETMAXREG.TRY_ALLOC`) | the body's `compute`: wait `loaded[slot]`, compute in shared memory, release the input pages, arrive `out_ready[slot]` |

Warpgroup 0 gives its registers back (`USETMAXREG.DEALLOC`) before its warps split into roles.
What is sm_90a's own here: one CTA a unit, the register split, the descriptors' fenced-maps bitmap
(`fence_once`), every reading thread's own arrival freeing the slot (`slot_frees`), the bodies'
per-role state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from warpy.isa.buffers import SmemBuffer
from warpy.isa.families import alu, control, memory, sync
from warpy.isa.operands import RZ, P
from warpy.isa.pipes import init_barriers
from warpy.isa.program import Program
from warpy.target import SM90A

from .mega_common import (CONSUMER_WARPS, DONE, FAULTS, IDENTITY_ORDER, PAGE_BYTES, PAGES, ROLE_CODES, SLOTS,
                          STAGE_LOAD, STAGE_STORE, STATUS_ROLE_WORDS, STATUS_WORDS, THREADS, InterpBase, Launch, Role,
                          full_release, release_word, rename)

if TYPE_CHECKING:
    from .mega_ops import OpBody

#: the seeded faults: the common ones, `early-all` (the gemm's loader copies A, not only the
#: weight B, before the load-stage counter waits), `glu-up-offset` (the fused gate/up gemm's loader
#: copies the gate weight's boxes where the up weight's belong), `glu-up-early` (it copies the up
#: weight before the waits where only the gate weight is early) and `norm-no-fence` (a normed gemm's
#: consumers rewrite A in shared memory and the wgmmas read it with no proxy fence between)
SM90_FAULTS = FAULTS + ("early-all", "glu-up-offset", "glu-up-early", "norm-no-fence", "exchange-no-barrier")

#: the register split (sm_90a's own: the loader's copies and the storer's stores keep more live than
#: the sm_100a roles do)
PRODUCER_REGS = 56
CONSUMER_REGS = 224


class Interp(InterpBase):
    """The sm_90a interpreter under construction: `InterpBase`'s declarations, the fenced-maps bitmap,
    what the bodies declare; its roles and controller."""

    target = SM90A
    FAULTS = SM90_FAULTS
    #: every thread that read the slot arrives on its empty barrier (three one-warp roles and the
    #: consumers): an arrive releases only its own thread's reads, and compute-sanitizer racecheck
    #: reported the next fetch's bulk copy racing the reads of the lanes whose leader arrived for them
    slot_frees = 3 * 32 + len(CONSUMER_WARPS) * 32

    def free_slot(self, r: "Role", leader: P) -> None:
        r.cons.free(None)

    def __init__(self, launch: Launch, bodies: dict[int, "OpBody"]) -> None:
        super().__init__(launch, bodies, maxnreg=(65536 // THREADS) // 8 * 8)
        p = self.p
        # with fence_once: a bitmap per TMA-issuing role (loader, storer) of the maps it has fenced
        self.fence_words = max(1, -(-len(launch.maps) // 32))
        self.fenced: Optional[SmemBuffer] = (p.smem_words("fenced", 2 * self.fence_words) if launch.fence_once
                                             else None)
        # what the bodies declare for themselves (a gemm's stage ring and its views of the pages)
        self.decl: dict[str, object] = {}
        for body in sorted(bodies.values(), key=lambda b: b.opcode):
            body.declare(self)
        self.check_smem()

    # -- the program ---------------------------------------------------------------------------
    def build(self) -> Program:
        p = self.p
        init_barriers(p)
        with p.role("producers", range(0, 4)):
            p.emit(control.setmaxnreg_dealloc(PRODUCER_REGS))
            with p.role("controller", range(0, 1)):
                self.controller()
            with p.role("loader", range(1, 2)):
                self.worker("loader", self.loader_step)
            with p.role("storer", range(2, 3)):
                self.worker("storer", self.storer_step)
            with p.role("recycler", range(3, 4)):
                self.recycler_start()
                self.worker("recycler", self.recycler_step)
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
        out = self.slot.producer("fetch")
        with p.loop("it", self.launch.waves) as it:
            with out.stage():
                out.wait_empty()
                # instruction `it` of this unit: queue[it, cta] of (waves, units, 64) words
                k = p.ur("fetch_k")
                p.emit(alu.r2ur(k, it.reg))
                p.emit(alu.uimad(k, k, self.launch.units, cta))
                self.fetch(out, k, leader, qbase)

    # -- what every worker role does per instruction --------------------------------------------
    def worker(self, role: str, step: Callable[["Role"], None]) -> None:
        """The role's loop over its queue: wait for the instruction's slot, run `step`, free the slot,
        rename the pages for the next instruction."""
        p = self.p
        if role in ("loader", "storer") or (role == "consumers" and self.times is not None):
            p.emit(sync.acqbulk())  # (the consumers touch global memory only with the timeline's stamps)
        r = Role(self, role)
        if self.fenced is not None and role in ("loader", "storer"):  # no map fenced yet
            for w in range(self.fence_words):
                p.derive.emit_at(self.fenced.at(r.fence_row * self.fence_words + w),
                                 lambda m: memory.sts(m, RZ), guard=r.leader)
        for body in sorted(self.bodies.values(), key=lambda b: b.opcode):
            body.start(self, r)  # per-role state a body keeps across instructions (its ring's position)
        with p.loop("it", self.launch.waves) as it:
            r.it = it.reg
            with r.cons.stage():
                r.cons.wait_full()
                r.begin()
                r.stamp("start")
                step(r)
                if role != "consumers":
                    r.stamp("end")
                if role != "consumers":
                    # the warp's lanes converge, then each frees the slot (`free_slot`: its own
                    # arrival, which releases its own reads of the slot's words)
                    p.emit(control.warpsync_all())
                    self.free_slot(r, r.leader)
                r.update_order()

    # -- loader ------------------------------------------------------------------------------------
    def loader_step(self, r: "Role") -> None:
        """The copies of the instruction's early operands first (`early` bits: what no instruction of
        the launch writes, the weights; a body that has such copies declares `load_early`), then the
        load-stage counter waits (acquire), the proxy fence, and the body's other copies: the next
        instruction's weights stream while the current one computes (docs/megakernel.md)."""
        p = self.p
        for code, body in sorted(self.bodies.items()):
            early = getattr(body, "load_early", None)
            if early is not None:
                hit = p.p("early_op")
                p.emit(alu.isetp("EQ", hit, r.opcode, code))
                with p.when(hit):
                    early(self, r)
        super().loader_step(r)

    # -- recycler -------------------------------------------------------------------------------
    def recycler_step(self, r: "Role") -> None:
        self.recycle_unused(r)


def build(launch: Launch) -> Program:
    """The interpreter program for one launch (its maps, buffers, units, waves)."""
    from .mega_ops import bodies

    return Interp(launch, bodies(rope=launch.rope)).build()


__all__ = ["Interp", "Role", "Launch", "build", "PAGES", "PAGE_BYTES", "SLOTS", "THREADS", "STATUS_WORDS",
           "STATUS_ROLE_WORDS", "ROLE_CODES", "FAULTS", "SM90_FAULTS", "DONE", "STAGE_LOAD", "STAGE_STORE", "CONSUMER_WARPS",
           "PRODUCER_REGS", "CONSUMER_REGS", "release_word", "full_release", "rename", "IDENTITY_ORDER"]
