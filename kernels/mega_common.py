"""What the megakernel's interpreters share, whatever the target: the instruction slots and their
pipe, the pages and their renaming, the counters between SMs (waits with their back-off and status
words, arrives with release at GPU scope), reads of an instruction's fields, dispatch on its
opcode, and the steps of the loader, the storer, the page recycling and the consumers that do not
depend on the tensor core.

Each target's module builds on it: `kernels/mega_sm90.py` (sm_90a: one CTA a unit, wgmma) and
`kernels/mega_sm100.py` (sm_100a: a 2-CTA cluster a unit, tcgen05, a launcher warp, the
tensor-memory token, cluster launch control). docs/megakernel.md says why the interpreter is built
this way; the rules below are the ones both targets keep.

**Slots.** Two slots of 256 bytes, a pipe (`slot`: full = the fetch landed, free = the four worker
roles are done reading it), so two instructions are in flight. Every worker role walks every
instruction, so each per-slot barrier (`loaded`, `out_ready`) completes once an instruction and its
parity is the slot ring's.

**Pages.** 7 pages of 32 KiB (a TMA box of an elementwise tile is at most 32 KiB, and so is the
largest gemm operand box, so every copy lands in one page). An instruction addresses logical pages
(lids 0..6) mapped to physical ones by `order` (seven 3-bit fields). Every instruction releases
every physical page exactly once (`page_free[p]`, count 1, pre-arrived once): its body releases the
lids it uses in the order it declares, the pages it does not use are handed on first. The next
instruction's lid q is the page released q-th (`new[q] = old[release[q]]`, `rename`).

**Counters between SMs.** A wait reads the counter at GPU scope (relaxed), compares the signed
difference `counter - target x call` with 0, polls with a NANOSLEEP back-off (writing the CTA's
status words the first time it does not pass), then acquires (`CCTL.IVALL`: `fence.acq_rel.gpu`)
and fences the generic proxy before the async proxy's loads. An arrive: the stores' writes waited
for (`DEPBAR.LE.WRITES`), `FENCE.VIEW.ASYNC.G`, `MEMBAR.ALL.GPU`, then one thread's relaxed
`REDG.ADD` per counter: a release. Every CTA of a unit arrives (a counter's target counts them).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Sequence

import attrs

from warpy.errors import WarpyError
from warpy.isa.buffers import BarrierArray, MapTable, Param, SmemBuffer, Tile
from warpy.isa.families import alu, control, memory, sync, tma
from warpy.isa.families._util import ins
from warpy.isa.index import Coord, Uniform
from warpy.isa.operands import RZ, CBank, GMem, Mem, P, R, RVec, UR, URVec
from warpy.isa.pipes import ConsumerEnd, Pipe, ProducerEnd, wait
from warpy.isa.program import Program
from warpy.isa.units.dispatch import dispatch
from warpy.layout import Layout
from warpy.mega import fields as F
from warpy.target import Target

if TYPE_CHECKING:
    pass

THREADS = 384
PAGES = 7
PAGE_BYTES = 32 * 1024
SLOTS = 2
CONSUMER_WARPS = range(4, 12)
PRODUCER_REGS = 40
CONSUMER_REGS = 232
#: roles that write status words, and their slot in a CTA's status (8 words each)
ROLE_CODES = {"controller": 0, "loader": 1, "consumers": 2, "storer": 3}
STATUS_ROLE_WORDS = 8
STATUS_WORDS = STATUS_ROLE_WORDS * len(ROLE_CODES)
STAGE_LOAD, STAGE_STORE, DONE = 1, 2, 1 << 16
BACKOFF_FIRST_NS, BACKOFF_MAX_NS = 32, 1024
IDENTITY_ORDER = sum(q << (3 * q) for q in range(PAGES))
#: the seeded faults of the protocol every target keeps (each target may add its own)
FAULTS = ("no-release", "early-page-free", "wrong-epoch", "drop-arrive")
#: the timeline (`Launch.timeline`): words an instruction has in the `times` buffer, and which word
#: each role's stamp writes (%globaltimer's low 32 bits, ns): the loader when it has the slot, when
#: its counter waits passed, when its copies are issued; the consumers when they have the slot,
#: when they computed and (a gemm's, each stage, so the last stage's is what stays) when a stage's
#: bytes had landed; the storer when it has the slot, when its stores' writes are done, when it
#: arrived on the counters
TIME_WORDS = 9
STAMPS = {("loader", "start"): 0, ("loader", "waits"): 1, ("loader", "end"): 2,
          ("consumers", "start"): 3, ("consumers", "end"): 4,
          ("storer", "start"): 5, ("storer", "written"): 6, ("storer", "end"): 7,
          ("consumers", "data"): 8}


def release_word(release: Sequence[int]) -> int:
    """A release order (lid released k-th, for k = 0..6) as seven 3-bit fields."""
    if sorted(release) != list(range(PAGES)):
        raise WarpyError(f"a release order is a permutation of the {PAGES} pages, not {list(release)}")
    return sum(lid << (3 * k) for k, lid in enumerate(release))


def full_release(pages: int, body_release: Sequence[int]) -> tuple[int, ...]:
    """An instruction's whole release order: the pages its body does not use first (handed on at
    once), then the body's, in the order the body releases them."""
    if sorted(body_release) != list(range(pages)):
        raise WarpyError(f"a body using {pages} pages releases each once, not {list(body_release)}")
    return tuple(range(pages, PAGES)) + tuple(body_release)


def rename(order: int, release: Sequence[int]) -> int:
    """The next instruction's page order: its lid q is the physical page the previous one released
    q-th (the device computes the same, `Role.update_order`)."""
    return sum(((order >> (3 * lid)) & 7) << (3 * q) for q, lid in enumerate(release))


@attrs.frozen
class Launch:
    """What a program is built for: the units, waves (instructions a queue), counters, the tensor
    maps (index, buffer, byte offset, box), the buffers' bytes, a seeded fault; `ctas`: CTAs a unit
    (1 on sm_90a, the 2-CTA cluster on sm_100a); `mode`: static queues, or dynamic (the units take
    instructions in global order); `instructions`: how many the schedule has (the dynamic queue's
    length); `gemm_tiles`: the gemm tile shapes the queue holds, a code path each ((tile_m, tile_n) on
    sm_100a; (tile_m, tile_n, rows of A's box) on sm_90a)."""

    name: str
    units: int
    waves: int
    counters: int
    maps: tuple[tuple[int, int, int, object], ...]  # (index, buffer, offset, TmaBox)
    buffers: tuple[tuple[int, int], ...]  # (buffer, bytes)
    fault: Optional[str] = None
    ctas: int = 1
    mode: str = "static"
    instructions: int = 0
    gemm_tiles: tuple[tuple[int, ...], ...] = ()
    #: sm_90a: fence each tensor map's descriptor once per CTA and role (a bitmap of the maps fenced
    #: so far) rather than before each instruction's copies
    fence_once: bool = False
    #: the roles stamp each instruction's steps into a `times` buffer (`STAMPS`, TIME_WORDS words an
    #: instruction, by its index): `warpy mega run --timeline` reads them
    timeline: bool = False
    #: sm_90a: a gemm prefetches the rest of its early weight into L2 before its waits (`MegaConfig`)
    prefetch: bool = False
    #: sm_90a: the fused gate/up gemm's warpgroups split its K steps (`MegaConfig.glu_split`)
    glu_split: bool = False
    #: sm_90a: the queue has rope instructions, so the interpreter has the rope body (else not: the
    #: programs of graphs without one keep their text)
    rope: bool = False
    #: sm_90a: the ceiling of a counter poll's NANOSLEEP back-off, ns (`MegaConfig.backoff`)
    backoff_ns: int = BACKOFF_MAX_NS

    @property
    def grid_ctas(self) -> int:
        """CTAs the launch has: one unit's CTAs a unit (static), or a unit an instruction (dynamic:
        cluster launch control hands the rest out)."""
        return self.ctas * (self.instructions if self.mode == "dynamic" else self.units)


def smem_bytes(barriers: int, extra: int = 0) -> int:
    """Dynamic shared memory: the pages, the two slots, `barriers` mbarriers and `extra` bytes (the
    header rounds up to 1 KiB)."""
    return PAGES * PAGE_BYTES + SLOTS * F.BYTES + 8 * barriers + extra


class InterpBase:
    """The program under construction and what every role shares: the declared memory (the graph's
    buffers, the queue, counters, status words, the table of maps, the pages and slots), the slot
    pipe, the per-slot and per-page barriers, the op bodies by opcode. A target's interpreter
    subclasses it: the program's launch shape, its roles, its controller."""

    target: Target
    #: what the target seeds besides the common faults
    FAULTS: tuple[str, ...] = FAULTS

    def __init__(self, launch: Launch, bodies: dict[int, Any], *, maxnreg: int, stop_row: bool = False) -> None:
        if launch.fault is not None and launch.fault not in self.FAULTS:
            raise WarpyError(f"no interpreter fault called {launch.fault!r} (faults: {', '.join(self.FAULTS)})")
        self.launch = launch
        self.bodies = bodies
        self.fault = launch.fault
        self.prefetch = launch.prefetch
        ctas = launch.grid_ctas
        p = self.p = Program(launch.name, self.target.name, threads=THREADS, grid=(ctas, 1, 1),
                             cluster=(launch.ctas, 1, 1), maxnreg=maxnreg)
        for b, nbytes in launch.buffers:
            p.param(f"buf{b}", "u64")
            # the element type of the maps over it (fp32: decode attention's partials; the schedule
            # reuses a buffer only for a tensor of its type)
            dts = {m[3].dtype for m in launch.maps if m[1] == b}  # type: ignore[attr-defined]
            dt = dts.pop() if len(dts) == 1 else "bf16"
            esz = 4 if dt == "fp32" else 2
            p.global_buffer(f"buf{b}_mem", Layout(max(nbytes // esz, 1), esz), dt, f"buf{b}")
        self.queue = p.param("queue", "u64")
        # (waves, units, 64) words (static) or the instructions in global order (dynamic), and with
        # `stop_row` one more row (static) or instruction (dynamic) of the stop opcode
        rows = launch.instructions if launch.mode == "dynamic" else launch.waves * launch.units
        extra = (1 if launch.mode == "dynamic" else launch.units) if stop_row else 0
        words = (rows + extra) * F.WORDS
        p.global_buffer("queue_words", Layout(max(words, F.WORDS), 4), "u32", "queue")
        self.counters = p.param("counters", "u64")
        p.global_buffer("counter_words", Layout(max(launch.counters, 1), 4), "u32", "counters")
        self.status = p.param("status", "u64")
        p.global_buffer("status_words", Layout(ctas * STATUS_WORDS, 4), "u32", "status")
        self.call = p.param("call", "u32")
        self.times: Optional[Param] = None
        if launch.timeline:
            self.times = p.param("times", "u64")
            p.global_buffer("time_words", Layout(max(launch.instructions, 1) * TIME_WORDS, 4), "u32", "times")
        self.table: MapTable = p.map_table("maps")
        for index, buf, offset, box in launch.maps:
            t = self.table.add(f"m{index}", box, over=f"buf{buf}", offset=offset)  # type: ignore[arg-type]
            assert t.slot == index
        # the pages first: at the base of the dynamic shared memory, 1 KiB aligned (swizzled views)
        self.pages: SmemBuffer = p.smem("pages", Layout((PAGES, PAGE_BYTES // 2), (PAGE_BYTES, 2)), "bf16")
        self.slots: SmemBuffer = p.smem("slots", Layout((SLOTS, F.WORDS), (F.BYTES, 4)), "u32")
        # the slot pipe: full = the fetch landed; free = the four worker roles read it
        self.slot: Pipe = p.pipe("slot", SLOTS, fills=1, frees=self.slot_frees)
        self.loaded: BarrierArray = p.barriers("loaded", SLOTS, 1)
        self.out_ready: BarrierArray = p.barriers("out_ready", SLOTS, 1)
        self.page_free: BarrierArray = p.barriers("page_free", PAGES, 1)

    def check_smem(self) -> None:
        """Refuse a program whose shared memory does not fit the target (after every declaration)."""
        need = self.p.header(with_regs=False).dynsmem
        if need > self.target.max_dynamic_smem:
            raise WarpyError(f"the interpreter needs {need} bytes of shared memory, more than the "
                             f"{self.target.max_dynamic_smem} of {self.target.name}")

    def release_of(self, body: Any) -> tuple[int, ...]:
        """An instruction's whole release order (`full_release`); with the seeded fault
        `early-page-free` the body releases its output page first, before its store has read it,
        and says so (the next instruction's first page is that one)."""
        order = full_release(body.pages, body.release)
        if self.fault == "early-page-free" and body.pages:
            out = body.release[-1]
            order = (out,) + tuple(x for x in order if x != out)
        return order

    # -- the controller's fetch ----------------------------------------------------------------
    def fetch(self, out: ProducerEnd, k: UR, leader: P, qbase: URVec) -> None:
        """Arm the slot's `full` barrier with 256 bytes and copy instruction `k` of the queue (words
        k x 64 ..) into the slot with one bulk copy: the instruction is published when it lands.
        (compute-sanitizer racecheck reports this copy as racing the slot's earlier reads, which the
        checker proves ordered; issuing the copy before the arrival made racecheck report 24 read
        sites instead of 8: docs/hardware-log.md.)"""
        p = self.p
        size = p.ur("fetch_bytes")
        p.emit(alu.umov(size, F.BYTES))
        out.arrive_full(leader, tx_bytes=F.BYTES)
        src = p.urvec("fetch_src", 2)
        p.emit(ins(alu.UIMAD, "WIDE.U32", src, k, F.BYTES, qbase))
        args = p.urvec("fetch_args", 2)
        p.derive.into(args[0], "addr", self.slots.at(out.ring, 0))
        p.derive.into(args[1], "addr", out.full)
        p.emit(tma.bulk_copy_s_g(Mem(args), Mem(src), size).guarded(leader))

    # -- loader ------------------------------------------------------------------------------------
    def loader_step(self, r: "Role") -> None:
        r.counter_waits(STAGE_LOAD)
        r.stamp("waits")
        # the acquire above is a generic-proxy operation; the copies below read global memory
        # through the async proxy
        self.p.emit(sync.fence_proxy_async_global())
        r.dispatch(lambda body: body.load(self, r))

    # -- storer --------------------------------------------------------------------------------------
    def storer_step(self, r: "Role") -> None:
        p = self.p
        r.counter_waits(STAGE_STORE)
        r.dispatch(lambda body: body.store(self, r))
        r.stamp("written")
        self.arrive_counters(r)

    def arrive_counters(self, r: "Role") -> None:
        """The stores' writes are done (the body waited for them): release them at GPU scope, one
        thread adding 1 to each counter the instruction arrives on."""
        p = self.p
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

    # -- page recycling ----------------------------------------------------------------------------
    def recycler_start(self) -> None:
        """Every page's first phase: free for the first instruction."""
        p = self.p
        leader = p.elect("recycle_leader")
        for pg in range(PAGES):
            p.derive.emit_at(self.page_free.at(pg), lambda m: sync.arrive(m), guard=leader)

    def recycle_unused(self, r: "Role") -> None:
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
        # with the slot, and the target frees it (`free_slot`: one thread, or every thread)
        r.dispatch(lambda body: body.compute(self, r))
        r.stamp("end")
        self.free_slot(r, r.cleader)

    #: arrivals that free an instruction slot: one a worker role (its leader's, after the role's
    #: threads are done with the slot); a target whose every reading thread arrives says so
    slot_frees = 4

    def free_slot(self, r: "Role", leader: P) -> None:
        """The role is done with the instruction's slot: its arrival on the slot's empty barrier."""
        r.cons.free(leader)


class Role:
    """One role's per-instruction state and helpers: its end of the slot pipe and ring, the loop
    counter `it` (instructions this role has run), the page order, reads of instruction fields from
    the slot, pages by lid, the counter waits, dispatch on the opcode; `state`: what a body keeps in
    this role across instructions, by body name."""

    SHORT = {"loader": "ld", "storer": "st", "recycler": "rc", "consumers": "cs", "launcher": "ln"}

    def __init__(self, ip: InterpBase, name: str) -> None:
        self.ip = ip
        self.name = name
        p = self.p = ip.p
        self.code = ROLE_CODES.get(name, 0)
        self.fence_row = 1 if name == "storer" else 0  # this role's row of a fenced-maps bitmap (sm_90a)
        self.cons: ConsumerEnd = ip.slot.consumer(self.SHORT[name])
        self.it: R = RZ
        self.stamp_addr: Optional[RVec] = None
        self.stamp_on: Optional[P] = None
        self.state: dict[str, object] = {}
        self.leader = p.elect()
        self.order = p.r("page_order")
        p.emit(alu.mov(self.order, IDENTITY_ORDER))
        self.opcode = p.r("opcode")
        self.memdesc = p.urvec("memdesc", 2)
        p.emit(alu.uldc(self.memdesc, CBank(0, p.target.memdesc), p.sm))
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
        # a body that uses every page by its physical number (sm_90a's gemm: its descriptors' pages
        # must be values ptxas can prove warp-uniform) releases them in that order: lid q = page q next
        for code, body in sorted(self.ip.bodies.items()):
            if getattr(body, "physical_pages", False):
                p.emit(alu.isetp("EQ", hit, self.opcode, code))
                p.emit(alu.mov(new, IDENTITY_ORDER).guarded(hit))
        p.emit(alu.mov(self.order, new))

    # -- dispatch --------------------------------------------------------------------------------
    def dispatch(self, run: Callable[[Any], None]) -> None:
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
        cap = self.ip.launch.backoff_ns
        if cap < BACKOFF_MAX_NS:  # the sleep capped lower than the status flush's point
            nap = p.r("backoff_nap")
            p.emit(alu.imin(nap, ns, cap, unsigned=True, arch=p.sm))
            p.emit(sync.nanosleep(nap))
        else:
            p.emit(sync.nanosleep(ns))
        p.emit(alu.shf_l(ns, ns, 1))
        # the first time the back-off reaches BACKOFF_MAX_NS (a wait of a microsecond or more), make
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

    # -- the timeline ------------------------------------------------------------------------------
    def stamp(self, what: str) -> None:
        """With `Launch.timeline`: one thread writes %globaltimer into this instruction's word for
        (role, what) of the `times` buffer (`STAMPS`; its lowest bit set, so that no stamp is 0);
        nothing otherwise. The "start" stamp reads the instruction's index from the slot and keeps
        the address of its words for the later stamps (the consumers free the slot before their "end")."""
        times = self.ip.times
        word = STAMPS.get((self.name, what))
        if times is None or word is None:
            return
        p = self.p
        if what == "start":
            idx = p.r("stamp_index")
            self.field("index", idx)
            self.stamp_addr = p.rvec("stamp_addr", 2)
            p.emit(alu.ldc(self.stamp_addr, times.cbank()))
            p.emit(alu.imad_wide(self.stamp_addr, idx, 4 * TIME_WORDS, self.stamp_addr))
            # noops are not stamped: the queues' padding is noops of index 0 on several SMs, whose
            # stamps would race on instruction 0's words
            self.stamp_on = p.p("stamp_on")
            p.emit(alu.isetp("NE", self.stamp_on, self.opcode, F.NOOP, c=self.cleader))
        assert self.stamp_addr is not None and self.stamp_on is not None, "a role's first stamp is its start"
        t = p.r("stamp_time")
        p.emit(alu.s2r(t, "SR_GLOBALTIMERLO"))
        p.emit(alu.lop3(t, t, 1, RZ, 0xFC))  # odd: 0 is left for "never stamped"
        p.emit(memory.stg(GMem(self.memdesc, self.stamp_addr, 4 * word), t).guarded(self.stamp_on))

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


# -- comparing a run's outputs with the reference --------------------------------------------------

#: how many bf16 steps an output that an fp32 sum or MUFU math feeds may be from the float64
#: reference, the step taken at the element's magnitude or at COND_SCALE x its condition, whichever
#: is larger: a gemm accumulates in fp32 in the tensor core (and the checker's model of it sums in its
#: own order), so an element can round to the neighbouring bf16 value, and one layer's rounding
#: moves the next layer's sums by a few steps of what they sum
CLOSE_STEPS = 4
#: the condition of an element (`conditions`: what its sums add up in magnitude) scaled to the
#: magnitude its steps are taken at: an element that cancels to near 0 has an error in proportion
#: to what cancelled, not to itself. Set from mlp3 (three K = 1024 layers whose magnitudes grow
#: 30-fold a layer): numpy's own fp32 evaluation of it is up to 3 such steps from the float64
#: reference (10 at 2^-8), the interpreter's up to 2.2; an element that does not cancel (a sum of
#: K terms of random signs is about sqrt(K) times smaller than its condition) mostly has its
#: magnitude above this and keeps CLOSE_STEPS steps of itself
COND_SCALE = 2.0 ** -6
#: the ops whose result is not the reference's exactly: fp32 sums (gemm, rmsnorm) and MUFU math
INEXACT = ("gemm", "rmsnorm", "silu_mul", "attention", "attention_combine")
#: (rope is exact: fma(x, cos, ±x'·sin) rounds once in fp32 as the reference does, then to bf16)
#: bounds of |f'(x)| of the activations (silu: 1.0998 at x = 2.40; gelu-tanh: 1.1289 at x = 1.5)
LIPSCHITZ = {"none": 1.0, "relu": 1.0, "silu": 1.1, "gelu": 1.13}


def inexact_output(prog: Any, tensor: int) -> bool:
    """Whether a lowered program's tensor depends on an op computed in fp32 sums or MUFU math (a
    gemm, rmsnorm, silu_mul, silu or gelu), where the device may differ from the float64 reference
    by a rounding; elementwise add, mul, relu and copies round once from the exact value."""
    seen: set[int] = set()
    todo = [tensor]
    while todo:
        t = prog.tensors[todo.pop()]
        if t.producer is None or t.id in seen:
            continue
        seen.add(t.id)
        n = prog.nodes[t.producer]
        if n.kind in INEXACT or (n.kind == "unary" and n.act in ("silu", "gelu")):
            return True
        todo.extend(op.tensor for op in n.operands)
    return False


def conditions(prog: Any, inputs: Mapping[str, Any]) -> dict[int, Any]:
    """For every tensor of a lowered program, elementwise, the magnitude its error scales with
    (float64): an input's |x|; a gemm's sum of |products| max(|x|, cond x)·|W| (+ |bias|, the residual's
    condition: where the sum cancels, its rounding errors and its operands' are in proportion to
    this, not to the result); elementwise ops carry their operands' conditions through their slopes
    (add: the sum; mul: |a| cond b + |b| cond a; activations: their Lipschitz bound; rmsnorm: the
    input's, normalised)."""
    import numpy as np

    from warpy.mega.lower import Operand, apply
    from warpy.mega.semantics import activation

    from .mega_attention import condition

    vals: dict[int, Any] = {}
    cond: dict[int, Any] = {}
    for t in prog.tensors:
        if t.kind in ("input", "state"):  # (state: a cache the launch appends to, written in place)
            vals[t.id] = np.array(inputs[t.name], dtype=np.float32)
            cond[t.id] = np.abs(vals[t.id].astype(np.float64))
    for n in prog.nodes:
        a = [np.asarray(o.array(vals), dtype=np.float64) for o in n.operands]
        c = [np.asarray(o.array(cond), dtype=np.float64) for o in n.operands]
        if n.kind == "gemm" and n.rope:  # the product's condition (as a plain or normed gemm's), roped
            from .mega_rope import condition as rope_condition

            if n.norm:
                rstd = 1.0 / np.sqrt(np.mean(a[0] * a[0], axis=-1, keepdims=True) + n.eps)
                xn = a[0] * a[-1] * rstd
                xv, cx = xn @ a[1].T, np.abs(xn) @ np.abs(a[1]).T
            else:
                xv, cx = a[0] @ a[1].T, np.abs(a[0]) @ np.abs(a[1]).T
            d = a[2].shape[-1]
            heads = (xv.shape[0], -1, d)
            out = rope_condition([xv.reshape(heads), a[2][0][:, None], a[2][1][:, None]],
                                 [cx.reshape(heads), c[2][0][:, None], c[2][1][:, None]])
        elif n.kind == "gemm" and n.norm:  # A is rmsnorm(x, w) (the last operand): the normalised |x·w|
            rstd = 1.0 / np.sqrt(np.mean(a[0] * a[0], axis=-1, keepdims=True) + n.eps)
            an, xn = np.abs(a[0] * a[-1]) * rstd, a[0] * a[-1] * rstd
            if n.glu:
                cg, cu = an @ np.abs(a[1]).T, an @ np.abs(a[2]).T
                gv, uv = xn @ a[1].T, xn @ a[2].T
                out = LIPSCHITZ["silu"] * cg * np.abs(uv) + np.abs(activation(gv, "silu")) * cu
            else:
                out = LIPSCHITZ[n.act] * (an @ np.abs(a[1]).T + (c[2] if n.bias else 0.0))
        elif n.kind == "gemm" and n.glu:  # silu(g)·u of two sums: silu_mul's slopes on the sums' conditions
            cg, cu = np.abs(a[0]) @ np.abs(a[1]).T, np.abs(a[0]) @ np.abs(a[2]).T
            gv, uv = a[0] @ a[1].T, a[0] @ a[2].T
            out = LIPSCHITZ["silu"] * cg * np.abs(uv) + np.abs(activation(gv, "silu")) * cu
        elif n.kind == "gemm":
            # (A's own condition carried through |W|, as the elementwise ops carry theirs: an A within
            # its bound of the reference moves the sum by up to that times |W|)
            w = np.abs(a[1].T if n.b_kmajor else a[1])
            out = np.maximum(np.abs(a[0]), c[0]) @ w
            for extra in c[2:]:
                out = out + extra
        elif n.kind == "unary":
            out = LIPSCHITZ[n.act] * c[0]
        elif n.kind == "binary":
            out = c[0] + c[1] if n.binop == "add" else np.abs(a[0]) * c[1] + np.abs(a[1]) * c[0]
        elif n.kind == "silu_mul":
            out = LIPSCHITZ["silu"] * c[0] * np.abs(a[1]) + np.abs(activation(a[0], "silu")) * c[1]
        elif n.kind == "rmsnorm":
            ms = np.mean(a[0] * a[0], axis=-1, keepdims=True)
            out = c[0] * np.abs(a[1]) / np.sqrt(ms + n.eps)
        elif n.kind in ("attention", "attention_combine"):
            out = condition(n, c, n.out_view.shape if n.out_view is not None else prog.tensors[n.out].shape)
        elif n.kind == "rope":
            from .mega_rope import condition as rope_condition

            out = rope_condition(a, c)
        else:
            raise WarpyError(f"no condition for node kind {n.kind!r}")
        apply(n, vals, prog.tensors[n.out].dtype)
        # (a gemm writing heads computes its product (M, N): as the heads (M, N / D, D) it writes)
        if n.out_view is not None:  # a cache append's rows, or a tensor its node writes through a view
            view = Operand(n.out, n.out_view)
            got = view.array(vals).astype(np.float64)
            view.assign(cond, np.maximum(np.reshape(out, got.shape), np.abs(got)))
        else:
            cond[n.out] = np.maximum(np.reshape(out, vals[n.out].shape), np.abs(vals[n.out].astype(np.float64)))
    return cond


def bf16_steps(got: Any, want: Any, cond: Any) -> Any:
    """|got - want| in bf16 steps (2^(e - 7) for a magnitude in [2^e, 2^(e+1))) taken at the larger
    of |want| and COND_SCALE x `cond`; NaN where they disagree about NaN."""
    import numpy as np

    g = np.asarray(got, dtype=np.float64)
    w = np.asarray(want, dtype=np.float64)
    mag = np.maximum(np.maximum(np.abs(w), COND_SCALE * np.asarray(cond, dtype=np.float64)), 2.0 ** -126)
    step = np.exp2(np.floor(np.log2(mag)) - 7)
    out = np.abs(g - w) / step
    both_nan = np.isnan(g) & np.isnan(w)
    out[both_nan] = 0.0
    return out


def compare_close(prog: Any, outputs: Sequence[int], got: Sequence[Any], want: Sequence[Any],
                  inputs: Mapping[str, Any]) -> tuple[int, int, int, list[str]]:
    """(elements compared, elements wrong, elements not equal but within CLOSE_STEPS bf16 steps,
    one line per output that is wrong), the run's `inputs`: outputs of elementwise chains must equal
    the reference; those that depend on fp32 sums or MUFU math (`inexact_output`) must be within
    CLOSE_STEPS steps at the element's magnitude or condition (`conditions`)."""
    import numpy as np

    conds: Optional[dict[int, Any]] = None
    n = bad = close = 0
    msgs = []
    for i, (g, w) in enumerate(zip(got, want)):
        t = prog.tensors[outputs[i]]
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        n += same.size
        tol = inexact_output(prog, outputs[i])
        if tol:
            conds = conds if conds is not None else conditions(prog, inputs)
            steps = bf16_steps(g, w, conds[outputs[i]])
            ok = same | (steps <= CLOSE_STEPS)
            close += int((ok & ~same).sum())
        else:
            ok = same
        k = int((~ok).sum())
        bad += k
        if k:
            at = tuple(int(x) for x in np.argwhere(~ok)[0])
            how = f"more than {CLOSE_STEPS} bf16 steps (of its magnitude or condition) from" if tol else "differ from"
            msgs.append(f"values: {k} of {ok.size} elements of output {t.name} {how} the reference, first "
                        f"{t.name}{list(at)} = {g[at]} where the reference has {w[at]}")
    return n, bad, close, msgs


_ = (Param, RVec, UR)

__all__ = ["InterpBase", "Role", "Launch", "THREADS", "PAGES", "PAGE_BYTES", "SLOTS", "CONSUMER_WARPS",
           "PRODUCER_REGS", "CONSUMER_REGS", "ROLE_CODES", "TIME_WORDS", "STAMPS", "STATUS_ROLE_WORDS",
           "STATUS_WORDS", "STAGE_LOAD",
           "STAGE_STORE", "DONE", "IDENTITY_ORDER", "FAULTS", "release_word", "full_release", "rename", "smem_bytes",
           "CLOSE_STEPS", "COND_SCALE", "LIPSCHITZ", "inexact_output", "conditions", "bf16_steps", "compare_close"]
