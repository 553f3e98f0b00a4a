"""The megakernel's interpreter on sm_90a: one persistent CTA per unit runs its queue of 256-byte
instructions (`warpy.mega`), written instruction by instruction like the GEMMs. docs/megakernel.md
("The device interpreter") says why it is built this way; the op bodies live in
`kernels/mega_ops.py` behind a small interface (`OpBody`).

384 threads, 12 warps:

| warps | role | per instruction |
|---|---|---|
| 0 | controller | waits until its instruction slot is free, fetches the next 256 bytes of its queue into it with one bulk copy (coalesced) completing on the slot's `full` mbarrier: the instruction is published |
| 1 | loader | waits for the slot, then on the instruction's load-stage counters (acquire), fences the generic proxy before the async one, and runs the body's `load`: one arrive.expect_tx on `loaded[slot]`, TMA loads into its pages |
| 2 | storer | waits for the slot, on the store-stage counters (buffer reuse), runs the body's `store` (TMA stores from shared memory after `out_ready[slot]`, a wait for their writes, the output pages released), then adds 1 to each arrive counter with release at GPU scope (one thread) |
| 3 | recycler | hands the pages the instruction does not use on to the next one (and, once at start, every page to the first) |
| 4-11 | consumers (2 warpgroups, `USETMAXREG.TRY_ALLOC`) | the body's `compute`: wait `loaded[slot]`, compute in shared memory, release the input pages, arrive `out_ready[slot]` |

Warpgroup 0 gives its registers back (`USETMAXREG.DEALLOC`) before its warps split into roles.

**Instruction slots.** Two slots of 256 bytes, a pipe (`slot`: full = the fetch landed, free = the
four worker roles are done reading it), so two instructions are in flight: the loader of the next
one runs while the consumers and the storer finish the current one. Every worker role walks every
instruction, so each per-slot barrier (`loaded`, `out_ready`) completes once an instruction and its
parity is the slot ring's.

**Pages.** Shared memory is 7 pages of 32 KiB (224 KiB of the H200's 227): a TMA box of an
elementwise tile is at most 32 KiB (the tiling rule's cap), and so is the largest gemm operand box
(256 x 64 bf16), so every copy lands in one page; 7 is what fits beside the slots and barriers.
Each instruction addresses logical pages (lids 0..6) mapped to physical ones by `order` (seven
3-bit fields). Every instruction releases every physical page exactly once (`page_free[p]`, one
arrival a phase, pre-arrived once): its body releases the lids it uses, in the order it declares,
the recycler the rest, first. The next instruction's lid q is the page released q-th
(`new[q] = old[release[q]]`), so its first loads land in the pages freed first. A wait on a page
for instruction i is a wait for phase i (parity i & 1).

**Counters between SMs.** A wait reads the counter at GPU scope (relaxed) and compares the signed
difference `counter - target x call` with 0; until it passes it polls with a NANOSLEEP back-off that
doubles to 1 us (the first failure writes the CTA's status words), then acquires (`CCTL.IVALL` after
the loop, which the lifter makes `fence.acq_rel.gpu`: the fence-based acquire after relaxed loads)
and fences the generic proxy before the async proxy's loads (`FENCE.VIEW.ASYNC.G`). An arrive: the
TMA stores' writes waited for
(`DEPBAR.LE.WRITES`), `FENCE.VIEW.ASYNC.G`, `MEMBAR.ALL.GPU`, then one thread's relaxed `REDG.ADD`
per counter: a release. After the first failed compare the poll compares for equality (the counter
only climbs to `target x call` and stays there within a call), which is the loop shape the host
checker knows as a wait on a flag.

**Status words.** Per CTA, 8 words a role (`STATUS_WORDS`): instruction index + 1, what it waits on
(role, stage, done), counter, the value it waits for, the value seen, the call. Written only when a
counter wait does not pass at once (and marked done when it does), in host-visible memory, so a run
that exceeds its deadline prints where each SM stands (`warpy.mega.hang`).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Sequence

import attrs

from warpy.errors import WarpyError
from warpy.isa.buffers import BarrierArray, MapTable, Param, SmemBuffer, Tile
from warpy.isa.families import alu, control, memory, sync, tma
from warpy.isa.families._util import ins
from warpy.isa.index import Coord, Uniform
from warpy.isa.operands import RZ, CBank, GMem, Mem, P, R, RVec, UR, URVec
from warpy.isa.pipes import ConsumerEnd, Pipe, init_barriers, wait
from warpy.isa.program import Program
from warpy.isa.units.dispatch import dispatch
from warpy.isa.units.tma import table_entry, tma_load_at, tma_store_at
from warpy.layout import Layout
from warpy.mega import fields as F
from warpy.target import SM90A

if TYPE_CHECKING:
    from .mega_ops import OpBody

THREADS = 384
PAGES = 7
PAGE_BYTES = 32 * 1024
SLOTS = 2
CONSUMER_WARPS = range(4, 12)
PRODUCER_REGS = 56
CONSUMER_REGS = 224
#: roles that write status words, and their slot in a CTA's status (8 words each)
ROLE_CODES = {"controller": 0, "loader": 1, "consumers": 2, "storer": 3}
STATUS_ROLE_WORDS = 8
STATUS_WORDS = STATUS_ROLE_WORDS * len(ROLE_CODES)
STAGE_LOAD, STAGE_STORE, DONE = 1, 2, 1 << 16
BACKOFF_FIRST_NS, BACKOFF_MAX_NS = 32, 1024
IDENTITY_ORDER = sum(q << (3 * q) for q in range(PAGES))
#: seeded faults the interpreter can be built with (tests/kernels/test_mega_faults.py): each breaks
#: one rule of the protocol this module documents
FAULTS = ("no-release", "early-page-free", "wrong-epoch", "drop-arrive")


def smem_bytes(body_barriers: int = 0) -> int:
    """Dynamic shared memory: the pages, the two slots, the barriers (the interpreter's and
    `body_barriers` the bodies declare; the header rounds up to 1 KiB)."""
    return PAGES * PAGE_BYTES + SLOTS * F.BYTES + 8 * (2 * SLOTS + 2 * SLOTS + PAGES + body_barriers)


def release_word(release: Sequence[int]) -> int:
    """A release order (lid released k-th, for k = 0..6) as seven 3-bit fields."""
    if sorted(release) != list(range(PAGES)):
        raise WarpyError(f"a release order is a permutation of the {PAGES} pages, not {list(release)}")
    return sum(lid << (3 * k) for k, lid in enumerate(release))


def full_release(pages: int, body_release: Sequence[int]) -> tuple[int, ...]:
    """An instruction's whole release order: the pages its body does not use first (the recycler
    hands them on at once), then the body's, in the order the body releases them."""
    if sorted(body_release) != list(range(pages)):
        raise WarpyError(f"a body using {pages} pages releases each once, not {list(body_release)}")
    return tuple(range(pages, PAGES)) + tuple(body_release)


def rename(order: int, release: Sequence[int]) -> int:
    """The next instruction's page order: its lid q is the physical page the previous one released
    q-th (the device computes the same, `Interp.update_order`)."""
    return sum(((order >> (3 * lid)) & 7) << (3 * q) for q, lid in enumerate(release))


@attrs.frozen
class Launch:
    """What the program is built for: the units (CTAs), waves (instructions a queue), counters, the
    tensor maps (index, buffer, byte offset, box), the buffers' bytes, the bodies by opcode."""

    name: str
    units: int
    waves: int
    counters: int
    maps: tuple[tuple[int, int, int, object], ...]  # (index, buffer, offset, TmaBox)
    buffers: tuple[tuple[int, int], ...]  # (buffer, bytes)
    fault: Optional[str] = None
    #: the gemm tile shapes (tile_m, tile_n) the queue holds: the gemm body's consumers have a code
    #: path for each (wgmma's N and the accumulator are fixed per path)
    gemm_tiles: tuple[tuple[int, int], ...] = ()
    #: fence each tensor map's descriptor once per CTA and role (a bitmap of the maps fenced so
    #: far) rather than before each instruction's copies
    fence_once: bool = False


class Interp:
    """The program under construction and what every role shares: the declared memory, the slot pipe,
    the per-slot and per-page barriers, the op bodies by opcode."""

    def __init__(self, launch: Launch, bodies: dict[int, "OpBody"]) -> None:
        if launch.fault is not None and launch.fault not in FAULTS:
            raise WarpyError(f"no interpreter fault called {launch.fault!r} (faults: {', '.join(FAULTS)})")
        self.launch = launch
        self.bodies = bodies
        self.fault = launch.fault
        p = self.p = Program(launch.name, SM90A.name, threads=THREADS, grid=(launch.units, 1, 1),
                             maxnreg=(65536 // THREADS) // 8 * 8)
        for b, nbytes in launch.buffers:
            p.param(f"buf{b}", "u64")
            p.global_buffer(f"buf{b}_mem", Layout(max(nbytes // 2, 1), 2), "bf16", f"buf{b}")
        self.queue = p.param("queue", "u64")
        p.global_buffer("queue_words", Layout(launch.waves * launch.units * F.WORDS, 4), "u32", "queue")
        self.counters = p.param("counters", "u64")
        p.global_buffer("counter_words", Layout(max(launch.counters, 1), 4), "u32", "counters")
        self.status = p.param("status", "u64")
        p.global_buffer("status_words", Layout(launch.units * STATUS_WORDS, 4), "u32", "status")
        self.call = p.param("call", "u32")
        self.table: MapTable = p.map_table("maps")
        for index, buf, offset, box in launch.maps:
            t = self.table.add(f"m{index}", box, over=f"buf{buf}", offset=offset)  # type: ignore[arg-type]
            assert t.slot == index
        self.pages: SmemBuffer = p.smem("pages", Layout((PAGES, PAGE_BYTES // 2), (PAGE_BYTES, 2)), "bf16")
        self.slots: SmemBuffer = p.smem("slots", Layout((SLOTS, F.WORDS), (F.BYTES, 4)), "u32")
        # the slot pipe: full = the fetch landed; free = loader, storer, recycler and the consumers read it
        self.slot: Pipe = p.pipe("slot", SLOTS, fills=1, frees=4)
        self.loaded: BarrierArray = p.barriers("loaded", SLOTS, 1)
        self.out_ready: BarrierArray = p.barriers("out_ready", SLOTS, 1)
        self.page_free: BarrierArray = p.barriers("page_free", PAGES, 1)
        # with fence_once: a bitmap per TMA-issuing role (loader, storer) of the maps it has fenced
        self.fence_words = max(1, -(-len(launch.maps) // 32))
        self.fenced: Optional[SmemBuffer] = (p.smem_words("fenced", 2 * self.fence_words) if launch.fence_once
                                             else None)
        # what the bodies declare for themselves (a gemm's stage ring and its views of the pages)
        self.decl: dict[str, object] = {}
        for body in sorted(bodies.values(), key=lambda b: b.opcode):
            body.declare(self)
        if p.smem_top > SM90A.max_dynamic_smem:
            raise WarpyError(f"the interpreter needs {p.smem_top} bytes of shared memory, more than "
                             f"{SM90A.max_dynamic_smem}")

    def release_of(self, body: "OpBody") -> tuple[int, ...]:
        """An instruction's whole release order (`full_release`); with the seeded fault
        `early-page-free` the body releases its output page first, before its store has read it,
        and says so (the next instruction's first page is that one)."""
        order = full_release(body.pages, body.release)
        if self.fault == "early-page-free" and body.pages:
            out = body.release[-1]
            order = (out,) + tuple(x for x in order if x != out)
        return order

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
        size = p.ur("fetch_bytes")
        p.emit(alu.umov(size, F.BYTES))
        with p.loop("it", self.launch.waves) as it:
            with out.stage():
                out.wait_empty()
                out.arrive_full(leader, tx_bytes=F.BYTES)
                # instruction `it` of this unit: queue[it, cta] of (waves, units, 64) words
                k = p.ur("fetch_k")
                p.emit(alu.r2ur(k, it.reg))
                p.emit(alu.uimad(k, k, self.launch.units, cta))
                src = p.urvec("fetch_src", 2)
                p.emit(ins(alu.UIMAD, "WIDE.U32", src, k, F.BYTES, qbase))
                args = p.urvec("fetch_args", 2)
                p.derive.into(args[0], "addr", self.slots.at(out.ring, 0))
                p.derive.into(args[1], "addr", out.full)
                p.emit(tma.bulk_copy_s_g(Mem(args), Mem(src), size).guarded(leader))

    # -- what every worker role does per instruction --------------------------------------------
    def worker(self, role: str, step: Callable[["Role"], None]) -> None:
        """The role's loop over its queue: wait for the instruction's slot, run `step`, free the slot,
        rename the pages for the next instruction."""
        p = self.p
        if role in ("loader", "storer"):
            p.emit(sync.acqbulk())
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
                step(r)
                if role != "consumers":
                    # every lane has read the slot's words before the leader frees the slot (the
                    # consumers end at their named barrier); without it compute-sanitizer's
                    # racecheck saw the next fetch's bulk copy race with the other lanes' reads
                    p.emit(control.warpsync_all())
                    r.cons.free(r.leader)
                r.update_order()

    # -- loader ------------------------------------------------------------------------------------
    def loader_step(self, r: "Role") -> None:
        r.counter_waits(STAGE_LOAD)
        # the acquire above is a generic-proxy operation; the copies below read global memory
        # through the async proxy
        self.p.emit(sync.fence_proxy_async_global())
        r.dispatch(lambda body: body.load(self, r))

    # -- storer --------------------------------------------------------------------------------------
    def storer_step(self, r: "Role") -> None:
        p = self.p
        r.counter_waits(STAGE_STORE)
        r.dispatch(lambda body: body.store(self, r))
        # the stores' writes are done (the body waited for them): release them at GPU scope, one
        # thread adding 1 to each counter the instruction arrives on
        n = r.field("n_arrives")
        if self.fault == "drop-arrive":  # seeded: the last arrive is never made
            some = p.p("arrives_some")
            p.emit(alu.isetp("NE", some, n, 0))
            p.emit(alu.iadd3(n, n, (1 << 32) - 1).guarded(some))
        p.emit(sync.fence_proxy_async_global())
        if self.fault != "no-release":  # seeded: the relaxed add without the fence before it
            p.emit(sync.membar("GPU"))
        one = p.r("one")
        p.emit(alu.mov(one, 1))
        with r.each("arrive", n, F.ARRIVES) as k:
            ctr = p.r("arrive_ctr")
            r.lds_at(ctr, F.BY_NAME["arrive0"].word, k, 1)
            addr = r.counter_addr(ctr)
            p.emit(memory.red_add(GMem(r.memdesc, addr), one).guarded(r.leader))

    # -- recycler -------------------------------------------------------------------------------
    def recycler_start(self) -> None:
        """Every page's first phase: free for the first instruction."""
        p = self.p
        leader = p.elect("recycle_leader")
        for pg in range(PAGES):
            p.derive.emit_at(self.page_free.at(pg), lambda m: sync.arrive(m), guard=leader)

    def recycler_step(self, r: "Role") -> None:
        """The pages the instruction does not use (lids pages..6), in lid order: wait until the
        previous instruction released each, release it at once."""
        p = self.p
        used = r.pages_used()
        for lid in range(PAGES):
            skip = p.fresh_label("USED")
            unused = p.p("page_unused")
            p.emit(alu.isetp("GE", unused, used, lid + 1))
            p.emit(control.bra(skip).guarded(unused))
            r.wait_page(lid)
            r.release_page(lid)
            p.label(skip)

    # -- consumers ------------------------------------------------------------------------------
    def consumer_step(self, r: "Role") -> None:
        # the body ended with every consumer thread at the consumers' named barrier: all are done
        # with the slot, one thread frees it
        r.dispatch(lambda body: body.compute(self, r))
        r.cons.free(r.cleader)


class Role:
    """One role's per-instruction state and helpers: its end of the slot pipe and ring, the loop
    counter `it`, the page order, reads of instruction fields from the slot, pages by lid, the
    counter waits, dispatch on the opcode."""

    def __init__(self, ip: Interp, name: str) -> None:
        self.ip = ip
        self.name = name
        p = self.p = ip.p
        self.code = ROLE_CODES.get(name, 0)
        self.fence_row = 1 if name == "storer" else 0  # this role's row of the fenced-maps bitmap
        short = {"loader": "ld", "storer": "st", "recycler": "rc", "consumers": "cs"}[name]
        self.cons: ConsumerEnd = ip.slot.consumer(short)
        self.it: R = RZ
        #: what a body keeps in this role across instructions (`OpBody.start`), by body name
        self.state: dict[str, object] = {}
        self.leader = p.elect()
        self.order = p.r("page_order")
        p.emit(alu.mov(self.order, IDENTITY_ORDER))
        self.opcode = p.r("opcode")
        self.memdesc = p.urvec("memdesc", 2)
        p.emit(alu.uldc(self.memdesc, CBank(0, 0x208), p.sm))
        # the consumers' one thread (their first) that arrives for all 256; other roles: their leader
        self.cleader = self.leader
        self.ctid = RZ
        if name == "consumers":
            t = p.r("cons_tid")
            p.emit(alu.iadd3(t, R("tid"), (1 << 32) - 32 * CONSUMER_WARPS.start))
            self.cleader = p.p("cons_leader")
            p.emit(alu.isetp("EQ", self.cleader, t, 0))
            self.ctid = t

    # -- fields ------------------------------------------------------------------------------------
    def begin(self) -> None:
        self.p.emit(alu.mov(self.opcode, 0))
        self.lds(self.opcode, F.BY_NAME["opcode"].word)
        self._extract(self.opcode, F.BY_NAME["opcode"])

    def slot_word(self, word: int) -> Tile:
        return self.ip.slots.at(self.cons.ring, word)

    def lds(self, dst: R, word: int) -> None:
        self.p.derive.emit_at(self.slot_word(word), lambda m: memory.lds(dst, m))

    def lds_at(self, dst: R, word: int, k: R, stride: int) -> None:
        """dst = word `word + stride x k` of the slot (k a register: the wait or arrive number)."""
        p = self.p
        base = p.r("slot_word_addr")
        reg, off = p.derive.value_reg("addr", self.slot_word(word))
        p.emit(alu.imad(base, k, 4 * stride, reg))
        p.emit(memory.lds(dst, Mem(base, offset=off)))

    def _extract(self, dst: R, f: F.Field) -> None:
        if f.lo:
            self.p.emit(alu.shf_r(dst, dst, f.lo))
        if f.bits < 32:
            self.p.emit(alu.lop3(dst, dst, f.mask, RZ, 0xC0))

    def field(self, name: str, dst: Optional[R] = None) -> R:
        """A field of the instruction in the slot (`warpy.mega.fields`), in a general register."""
        f = F.BY_NAME[name]
        d = dst if dst is not None else self.p.r("f_" + name.replace(".", "_"))
        self.lds(d, f.word)
        self._extract(d, f)
        return d

    # -- pages -------------------------------------------------------------------------------------
    def pid(self, lid: int) -> Uniform:
        """The physical page of logical page `lid`, as a per-CTA index (a uniform register)."""
        p = self.p
        t = p.r("pid_r")
        p.emit(alu.shf_r(t, self.order, 3 * lid))
        p.emit(alu.lop3(t, t, 7, RZ, 0xC0))
        u = p.ur(f"pid{lid}")
        p.emit(alu.r2ur(u, t))
        return Uniform(f"pid{lid}", u, PAGES)

    def pid_at(self, lid: R, name: str = "pid_k") -> Uniform:
        """The physical page of the logical page a register holds (0..6), as a per-CTA index."""
        p = self.p
        t = p.r("pid_r")
        p.emit(alu.imad(t, lid, 3, RZ))
        p.emit(alu.shf_r(t, self.order, t))
        p.emit(alu.lop3(t, t, 7, RZ, 0xC0))
        u = p.ur(name)
        p.emit(alu.r2ur(u, t))
        return Uniform(name, u, PAGES)

    def page(self, lid: int) -> Tile:
        return self.ip.pages.at(self.pid(lid), 0)

    def wait_pid(self, pid: Coord) -> None:
        """Until the previous instruction has released physical page `pid` (an index or an int)."""
        wait(self.p, self.ip.page_free.at(pid), self.page_parity())

    def release_pid(self, pid: Coord, guard: Optional[P] = None) -> None:
        """Hand physical page `pid` on (its one release this instruction)."""
        self.p.derive.emit_at(self.ip.page_free.at(pid), lambda m: sync.arrive(m),
                              guard=self.leader if guard is None else guard)

    def page_parity(self) -> R:
        """Bit 31: the parity of this instruction's phase of a page (the instruction count's)."""
        par = self.p.r("page_parity")
        self.p.emit(alu.shf_l(par, self.it, 31))
        return par

    def wait_page(self, lid: int) -> None:
        """Until the previous instruction has released logical page `lid`'s physical page."""
        wait(self.p, self.ip.page_free.at(self.pid(lid)), self.page_parity())

    def release_page(self, lid: int, guard: Optional[P] = None) -> None:
        """Hand logical page `lid`'s page on (its one release this instruction)."""
        self.p.derive.emit_at(self.ip.page_free.at(self.pid(lid)), lambda m: sync.arrive(m),
                              guard=self.leader if guard is None else guard)

    def pages_used(self) -> R:
        """How many pages this instruction's body uses (lids 0..n-1), from its opcode."""
        p = self.p
        n = p.r("pages_used")
        p.emit(alu.mov(n, 0))
        hit = p.p("is_op")
        for code, body in sorted(self.ip.bodies.items()):
            if body.pages:
                p.emit(alu.isetp("EQ", hit, self.opcode, code))
                p.emit(alu.sel(n, body.pages, n, hit))
        return n

    def update_order(self) -> None:
        """order = the next instruction's: new[q] = old[release[q]], release = this instruction's
        whole release order (its body's from its opcode; identity for an opcode without a body)."""
        p = self.p
        rel = p.r("release")
        p.emit(alu.mov(rel, IDENTITY_ORDER))
        hit = p.p("is_op")
        for code, body in sorted(self.ip.bodies.items()):
            p.emit(alu.isetp("EQ", hit, self.opcode, code))
            p.emit(alu.sel(rel, release_word(self.ip.release_of(body)), rel, hit))
        new, idx, v = p.r("new_order"), p.r("rel_lid"), p.r("rel_pid")
        p.emit(alu.mov(new, 0))
        for q in range(PAGES):
            p.emit(alu.shf_r(idx, rel, 3 * q))
            p.emit(alu.lop3(idx, idx, 7, RZ, 0xC0))
            p.emit(alu.imad(idx, idx, 3, RZ))
            p.emit(alu.shf_r(v, self.order, idx))
            p.emit(alu.lop3(v, v, 7, RZ, 0xC0))
            p.emit(alu.shf_l(v, v, 3 * q))
            p.emit(alu.lop3(new, new, v, RZ, 0xFC))
        # a body that uses every page by its physical number (the gemm: its descriptors' pages must
        # be values ptxas can prove warp-uniform) releases them in that order: lid q = page q next
        for code, body in sorted(self.ip.bodies.items()):
            if getattr(body, "physical_pages", False):
                p.emit(alu.isetp("EQ", hit, self.opcode, code))
                p.emit(alu.mov(new, IDENTITY_ORDER).guarded(hit))
        p.emit(alu.mov(self.order, new))

    # -- dispatch --------------------------------------------------------------------------------
    def dispatch(self, run: Callable[["OpBody"], None]) -> None:
        """Run the body of the instruction's opcode (a jump table; ptxas makes it an indexed branch).
        An opcode without a body here runs as a noop (the host refuses graphs that need one)."""
        p = self.p
        codes = sorted(self.ip.bodies)
        top = max(codes) + 1
        labels = [p.fresh_label(f"{self.name.upper()}_OP{k}") for k in range(top + 1)]
        done = p.fresh_label(f"{self.name.upper()}_DONE")
        dispatch(p, self.opcode, labels, name=f"{self.name}_op")
        noop = self.ip.bodies[F.NOOP]
        for k, label in enumerate(labels):
            p.label(label)
            run(self.ip.bodies.get(k, noop))
            p.emit(control.bra(done))
        p.label(done)

    # -- loops over an instruction's waits and arrives -------------------------------------------
    @contextlib.contextmanager
    def each(self, name: str, n: R, most: int) -> Iterator[R]:
        """for k in range(n) (n a register, 0..most): the body sees k."""
        p = self.p
        k = p.r(f"{name}_k")
        more = p.p(f"{name}_more")
        top, end = p.fresh_label(name.upper()), p.fresh_label(f"{name.upper()}_END")
        p.emit(alu.mov(k, 0))
        p.label(top)
        p.emit(alu.isetp("GE", more, k, n))
        p.emit(control.bra(end).guarded(more))
        yield k
        p.emit(alu.iadd3(k, k, 1))
        p.emit(control.bra(top))
        p.label(end)

    def counter_addr(self, ctr: R) -> RVec:
        p = self.p
        a = p.rvec("ctr_addr", 2)
        p.emit(alu.ldc(a, self.ip.counters.cbank()))
        p.emit(alu.imad_wide(a, ctr, 4, a))
        return a

    def counter_waits(self, stage: int) -> None:
        """Wait on each counter of the instruction's waits of this stage (load: before the first
        load; store: before the first store)."""
        p = self.p
        n = self.field("n_waits")
        call = p.r("call")
        p.emit(alu.ldc(call, self.ip.call.cbank()))
        if self.ip.fault == "wrong-epoch" and stage == STAGE_LOAD:  # seeded: the previous call's target
            p.emit(alu.iadd3(call, call, -1))
        with self.each("wait", n, F.WAITS) as k:
            ctr, tw = p.r("wait_ctr"), p.r("wait_word")
            w0 = F.BY_NAME["wait0.counter"].word
            self.lds_at(ctr, w0, k, F.WAIT_WORDS)
            self.lds_at(tw, w0 + 1, k, F.WAIT_WORDS)
            st, skip = p.r("wait_stage"), p.p("other_stage")
            p.emit(alu.shf_r(st, tw, 31))
            p.emit(alu.isetp("NE", skip, st, 1 if stage == STAGE_STORE else 0))
            nxt = p.fresh_label("OTHER_STAGE")
            p.emit(control.bra(nxt).guarded(skip))
            want = p.r("wait_want")
            p.emit(alu.lop3(want, tw, F.BY_NAME["wait0.target"].mask, RZ, 0xC0))
            p.emit(alu.imad(want, want, call, RZ))
            self.counter_wait(ctr, want, stage)
            p.label(nxt)

    def counter_wait(self, ctr: R, want: R, stage: int) -> None:
        """Until (s32)(counter - want) >= 0, then acquire (see the module's docstring)."""
        p = self.p
        addr = self.counter_addr(ctr)
        g = GMem(self.memdesc, addr)
        seen, diff, ready = p.r("seen"), p.r("seen_diff"), p.p("ready")
        ns, again = p.r("backoff_ns"), p.p("not_yet")
        done, backoff, poll = p.fresh_label("PASSED"), p.fresh_label("BACKOFF"), p.fresh_label("POLL")
        p.emit(memory.ldg_strong(seen, g))
        p.emit(alu.iadd3(diff, seen, -want))
        p.emit(alu.isetp("GE", ready, diff, RZ, unsigned=False))
        p.emit(control.bra(done).guarded(ready))
        # not yet: say so in the status words, then poll with a back-off until it holds
        self.status(ctr, want, seen, stage)
        p.emit(alu.mov(ns, BACKOFF_FIRST_NS))
        p.emit(control.bra(poll))
        p.label(backoff)
        p.emit(sync.nanosleep(ns))
        p.emit(alu.shf_l(ns, ns, 1))
        # the first time the back-off reaches its ceiling (a wait of a microsecond or more), make
        # the status words reach the host (they are in host-visible memory)
        capped = p.p("backoff_capped")
        p.emit(alu.isetp("EQ", capped, ns, BACKOFF_MAX_NS))
        p.emit(alu.imin(ns, ns, BACKOFF_MAX_NS, unsigned=True, arch=p.sm))
        p.emit(sync.membar("SYS").guarded(capped))
        p.label(poll)
        p.emit(memory.ldg_strong(seen, g))
        p.emit(alu.isetp("NE", again, seen, want))
        p.emit(control.bra(backoff).guarded(again))
        self.status_done()
        p.label(done)
        p.emit(sync.cctl_ivall())  # the acquire: what the counter's arrivals released

    # -- status words --------------------------------------------------------------------------
    def status_addr(self) -> RVec:
        p = self.p
        a = p.rvec("status_addr", 2)
        cta = p.r("status_cta")
        p.emit(alu.s2r(cta, "SR_CTAID.X"))
        p.emit(alu.imad(cta, cta, STATUS_WORDS, self.code * STATUS_ROLE_WORDS))
        p.emit(alu.ldc(a, self.ip.status.cbank()))
        p.emit(alu.imad_wide(a, cta, 4, a))
        return a

    def status(self, ctr: R, want: R, seen: R, stage: int) -> None:
        """Where this role waits: instruction index + 1, (role << 8) | stage, counter, want, seen, call."""
        p = self.p
        a = self.status_addr()
        idx = self.field("index", p.r("status_index"))
        p.emit(alu.iadd3(idx, idx, 1))
        what, call = p.r("status_what"), p.r("status_call")
        p.emit(alu.mov(what, (self.code << 8) | stage))
        p.emit(alu.ldc(call, self.ip.call.cbank()))
        for k, v in enumerate((idx, what, ctr, want, seen, call)):
            p.emit(memory.stg_strong(GMem(self.memdesc, a, 4 * k), v).guarded(self.leader))

    def status_done(self) -> None:
        p = self.p
        a = self.status_addr()
        what = p.r("status_what")
        p.emit(alu.mov(what, DONE))
        p.emit(memory.stg_strong(GMem(self.memdesc, a, 4), what).guarded(self.leader))


def build(launch: Launch) -> Program:
    """The interpreter program for one launch (its maps, buffers, units, waves)."""
    from .mega_ops import bodies

    return Interp(launch, bodies()).build()


__all__ = ["Interp", "Role", "Launch", "build", "PAGES", "PAGE_BYTES", "THREADS", "STATUS_WORDS", "STATUS_ROLE_WORDS",
           "ROLE_CODES", "FAULTS", "release_word", "full_release", "rename", "smem_bytes", "IDENTITY_ORDER"]
