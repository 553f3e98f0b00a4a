"""The host checker's interpreter: every warp of the first and last clusters of a launch, lanes of
a warp together (numpy vectors), scheduled round-robin until all have exited or all are blocked.

What each opcode does lives in `warpy.check.families.<family>.SEMANTICS` (keyed like
`warpy.isa.families`); this module holds the machine those handlers act on: warps with their
registers, divergent lane groups and vector clocks; CTAs with their mbarriers, named barriers,
tensor memory and (with values) shared memory bytes; the memory regions whose access records the
happens-before check compares; and the bookkeeping of derived operands.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable, Optional

import numpy as np

from warpy.errors import WarpyError
from warpy.isa.families import defs_uses, lookup, record
from warpy.isa.instr import Instr, Label
from warpy.isa.operands import Mem, Operand, P, R, RVec, UP, UR, URVec
from warpy.isa.reference import reference
from warpy.isa.text import BufferDecl, Kernel
from warpy.target import dtype_bytes, target
from warpy.isa import values as L
from warpy.check.expect import Expectation
from warpy.check.state import Access, Agent, MBar, Problems, Region, VC, join, masks_of

DSMEM = 0x400  # the shared-window address of the dynamic shared memory (1024-aligned)
GLOBAL_SPAN = 1 << 40  # each global source (tensor map or pointer parameter) lives at (i + 1) << 40
BLOCK = -1
MAX_STEPS = 50_000_000


class Compiled:
    """One instruction, ready to run: its record, handler, operand readers/writers and notes."""

    pc: int
    instr: Instr
    rec: Any
    key: str
    sem: str
    mnem: str
    handler: Callable[..., Any]
    guard: Optional[L.Reader]
    get: list[Any]
    put: list[Any]
    notes: tuple[Any, ...]
    regids: list[tuple[str, int]]
    wait_loop: bool
    trace: Optional[Callable[[Any], Any]]
    single: bool
    note_modes: list[bool]

    def __init__(self) -> None:
        self.extra: dict[Any, Any] = {}


class Warp:
    __slots__ = ("gid", "cta", "wid", "regs", "groups", "state", "block", "vc", "via", "agent", "wg_committed",
                 "wg_open", "wg_retired", "pending", "bulk_committed", "bulk_open", "bulk_retired", "acq_done",
                 "unfenced", "gunfenced", "trace", "steps", "tc_before", "cl_phase", "unfenced_init", "acquired", "fenced_vc",
                 "exit_vc")

    def __init__(self, gid: int, cta: "Cta", wid: int) -> None:
        self.gid = gid
        self.cta = cta
        self.wid = wid
        self.regs: dict[str, Any] = {}
        self.groups: list[list[Any]] = [[0, None]]
        self.state = 0  # 0 runs, 1 blocked, 2 exited
        self.block: Optional[tuple[Any, ...]] = None
        self.agent = ("w", cta.index, wid)
        self.vc: VC = {self.agent: 1}
        self.via: dict[Agent, str] = {}
        self.wg_committed = 0
        self.wg_open = False
        self.wg_retired = 0
        self.pending: list[tuple[str, int, int, int, str]] = []  # (base, lo, hi, wgmma group or -1: a tmem load, op)
        self.bulk_committed = 0
        self.bulk_open = False
        self.bulk_retired = 0
        self.acq_done = False
        self.unfenced: list[Access] = []
        self.gunfenced: list[Access] = []
        self.trace: list[Any] = []
        self.steps = 0
        self.tc_before = False
        self.cl_phase = -1
        self.unfenced_init: list[Access] = []
        self.acquired: VC = {}  # clocks read through GPU-scope flags, joined at the next MEMBAR.GPU
        self.fenced_vc: VC = {}  # this warp's clock at its last MEMBAR.GPU: what a flag it raises releases
        self.exit_vc: Optional[VC] = None

    def tick(self) -> VC:
        """A release: a copy of this warp's clock, then the warp's own clock moves on."""
        snap = dict(self.vc)
        self.vc[self.agent] = self.vc[self.agent] + 1
        return snap


class Cta:
    def __init__(self, index: int, ctaid: tuple[int, int, int], rank: int, cluster: "Cluster") -> None:
        self.index = index
        self.ctaid = ctaid
        self.rank = rank
        self.cluster = cluster
        self.warps: list[Warp] = []
        self.named: dict[int, dict[str, Any]] = {}
        self.smem: Optional[np.ndarray] = None
        self.tmem_cols: list[tuple[int, int]] = []  # allocations (start column, columns)
        self.tmem_written: Optional[np.ndarray] = None  # [lane, column] an MMA (or STTM) wrote it
        self.tmem_vals: Optional[np.ndarray] = None
        self.tmem_base = 0
        self.tc_clock = 0
        self.tc_agent = ("tc", index)
        self.relinquished = False
        # with values: the CTA has read global memory the simulated CTAs never wrote behind a pointer
        # parameter (another CTA's partial sums), so what it writes afterwards is not known here
        self.foreign = False


class Cluster:
    def __init__(self, index: int) -> None:
        self.index = index
        self.ctas: list[Cta] = []
        self.bar_arrived: set[int] = set()
        self.bar_vc: VC = {}
        self.bar_phase = 0
        self.bar_release: VC = {}
        self.clc_taken = 0


def _pipe_name(decl: BufferDecl, coords: tuple[int, ...]) -> Optional[str]:
    """`stage_full[0]` for a pipe's barrier buffer `stage_bars[0, 0]` (docs/sass.md: [0, s] full,
    [1, s] empty)."""
    if decl.name.endswith("_bars") and len(coords) == 2:
        return f"{decl.name[:-5]}_{'full' if coords[0] == 0 else 'empty'}[{coords[1]}]"
    return None


class Machine:
    def __init__(self, kernel: Kernel, *, values: bool = False, resident: Optional[int] = None,
                 progress: Optional[Callable[[str], None]] = None, hb: bool = False, seed: int = 0,
                 label: str = "", expect: Optional[Expectation] = None) -> None:
        self.kernel = kernel
        self.expect = expect
        self.h = kernel.header
        self.values = values
        self.hb = hb
        self.progress = progress
        self.label = label
        self.problems = Problems()
        self.notes_checked = 0
        self.regions: dict[tuple[Any, ...], Region] = {}
        self.mbars: dict[tuple[int, int], MBar] = {}
        self.hb_table: dict[tuple[Any, ...], int] = {}
        self.ref_cache: dict[tuple[Any, ...], Any] = {}
        self.uses_pdl = False
        self.refills = 0  # a copy-engine write into shared memory an MMA had read: the ring wrapped
        self.stores_seen = 0
        self.flags_raised_outside = 0
        self.flag_waiters: list[Warp] = []
        self.flag_vc: dict[int, VC] = {}
        self.gshadow: dict[int, int] = {}
        # what other CTAs of the cluster did to a CTA's shared memory (remote arrivals, multicast and
        # pair copies landing, and the barrier completions they make): per target CTA and agent, the
        # latest clock and who did it; each must happen before one of the target's warps exits
        self.remote_into: dict[int, dict[Agent, tuple[int, str]]] = {}
        self.shadow: dict[tuple[int, int], int] = {}
        self.landed: dict[int, dict[int, tuple[Any, ...]]] = {}
        self.rng = np.random.default_rng(seed)
        self.smem_bufs = sorted((b for b in self.h.buffers if b.space == "smem"), key=lambda b: b.base)
        self.tmem_bufs = [b for b in self.h.buffers if b.space == "tmem"]
        self._setup_globals()
        self._compile()
        sms = resident if resident is not None else target(self.h.sm).sms
        self._setup_ctas(sms)

    # -- global memory: sources and declared buffers ---------------------------------------------
    def _setup_globals(self) -> None:
        self.src_base: dict[str, int] = {}
        self.src_size: dict[str, int] = {}
        self.tmaps = {t.name: t.box for t in self.h.tmaps}
        i = 0
        for t in self.h.tmaps:
            i += 1
            self.src_base[t.name] = i * GLOBAL_SPAN
            box = t.box
            self.src_size[t.name] = (box.strides[-1] * box.dims[-1]) if box.rank > 1 else box.dims[0] * box.elem_bytes
        self.params: dict[str, int] = {}
        for p in self.h.params:
            if p.type in ("u64", "s64"):
                i += 1
                self.src_base[p.name] = i * GLOBAL_SPAN
                self.params[p.name] = i * GLOBAL_SPAN
            else:
                self.params[p.name] = 1
        for b in self.h.buffers:
            if b.space == "global" and b.source in self.src_base:
                self.src_size[b.source] = max(self.src_size.get(b.source, 0), b.size)
        self.gbufs = [b for b in self.h.buffers if b.space == "global"]
        # a tensor map declared `over` another parameter (split-K's `c_add` over `c`, a staged
        # epilogue's `c_tail` over `c`) is that parameter's memory
        self.alias: dict[str, str] = {}
        for t in self.h.tmaps:
            if t.over is not None and t.over in self.src_base:
                self.alias[t.name] = self.alias.get(t.over, t.over)
                self.src_base[t.name] = self.src_base[t.over]
        self.declared_sources = {b.source for b in self.gbufs} | set(self.tmaps)
        self.gmem: dict[str, np.ndarray] = {}
        self.gwritten: dict[str, np.ndarray] = {}
        self.greduced: dict[str, np.ndarray] = {}
        if self.values:
            for name, size in self.src_size.items():
                tbox = self.tmaps.get(name)
                # what the family says the memory holds at launch (its inputs), else zeros
                init = self.expect.initial(name, tbox, size, self.rng) if self.expect is not None else None
                if init is not None:
                    self.gmem[name] = np.ascontiguousarray(init).view(np.uint8).copy()
                elif tbox is not None:
                    self.gmem[name] = np.zeros(size // tbox.elem_bytes * tbox.elem_bytes, dtype=np.uint8)
                else:
                    self.gmem[name] = np.zeros(max(size, 1 << 16), dtype=np.uint8)
                self.gwritten[name] = np.zeros(self.gmem[name].size, dtype=bool)
            for name in self.src_base:
                if name not in self.gmem:
                    self.gmem[name] = np.zeros(1 << 16, dtype=np.uint8)
                    self.gwritten[name] = np.zeros(1 << 16, dtype=bool)
            for tn, pn in self.alias.items():
                self.gmem[tn], self.gwritten[tn] = self.gmem[pn], self.gwritten[pn]
            self.greduced = {name: np.zeros(a.size, dtype=bool) for name, a in self.gwritten.items()}
            for tn, pn in self.alias.items():
                self.greduced[tn] = self.greduced[pn]

    def global_source(self, addr: int) -> tuple[Optional[str], int]:
        idx = addr // GLOBAL_SPAN
        for name, base in self.src_base.items():
            if name in self.alias:
                continue
            if base // GLOBAL_SPAN == idx:
                return name, addr - base
        return None, addr

    def global_buffer_of(self, src: str, off_lo: int, off_hi: int) -> Optional[BufferDecl]:
        for b in self.gbufs:
            if b.source == src and 0 <= off_lo and off_hi <= b.size:
                return b
        return None

    # -- the code ------------------------------------------------------------------------------
    def _compile(self) -> None:
        from warpy.check.families import SEMANTICS

        instrs: list[Instr] = []
        labels: dict[str, int] = {}
        for x in self.kernel.lines:
            if isinstance(x, Label):
                labels[x.name] = len(instrs)
            elif isinstance(x, Instr):
                instrs.append(x)
        self.labels = labels
        self.code: list[Compiled] = []
        for pc, i in enumerate(instrs):
            rec, _ = lookup(i.name, i.mods)
            c = Compiled()
            c.pc = pc
            c.instr = i
            c.rec = rec
            c.key = rec.key
            c.sem = rec.sem
            c.mnem = i.mnemonic
            c.single = rec.single_issue
            handler = SEMANTICS.get(rec)
            if handler is None:
                raise WarpyError(f"the checker has no semantics for {rec.key}")
            c.handler = handler
            c.guard = None if i.guard is None else self.read(i.guard)
            c.get = [self._reader_or_none(op) for op in i.ops]
            c.put = [self._writer_or_none(op) for op in i.ops]
            c.notes = i.notes
            d, u = defs_uses(i)
            ids: list[tuple[str, int]] = []
            for op in u + d:
                if isinstance(op, (R, RVec)):
                    ids.extend(L.reg_ids(op))
                elif isinstance(op, Mem):
                    for r in op.regs():
                        if isinstance(r, (R, RVec)):
                            ids.extend(L.reg_ids(r))
            c.regids = ids
            c.note_modes = []
            for note in i.notes:
                op = i.ops[note.operand]
                written = any(x is op for x in d) and not isinstance(op, Mem)
                c.note_modes.append(written)
            c.wait_loop = False
            c.trace = self._tracer(i)
            self.code.append(c)
        for c in self.code:
            if c.sem == "barrier-wait":
                done = c.instr.ops[0]
                nxt = c.pc + 1
                while nxt < len(self.code) and self.code[nxt].sem == "sleep":
                    nxt += 1
                if nxt < len(self.code):
                    b = self.code[nxt].instr
                    if self.code[nxt].sem == "branch" and b.guard is not None and isinstance(done, P) and b.guard.name == done.name \
                            and b.guard.neg and labels.get(b.ops[-1].name, 1 << 30) <= c.pc:  # type: ignore[union-attr]
                        c.wait_loop = True
            if c.sem == "dependent-wait":
                self.uses_pdl = True
        for c in self.code:  # spin loops on a GPU-scope flag: LDG.STRONG, ISETP on it, a branch back
            if c.sem == "load-global" and "STRONG" in c.instr.mods and c.pc + 2 < len(self.code):
                cmp_c, br_c = self.code[c.pc + 1], self.code[c.pc + 2]
                dst = getattr(c.instr.ops[0], "name", None)
                target = getattr(br_c.instr.ops[-1], "name", "")
                if cmp_c.sem == "compare" and getattr(cmp_c.instr.ops[2], "name", None) == dst and br_c.sem == "branch" \
                        and br_c.instr.guard is not None and br_c.instr.guard.name == getattr(cmp_c.instr.ops[0], "name", None) \
                        and labels.get(target, 1 << 30) <= c.pc:
                    c.extra["spin"] = (cmp_c, br_c.instr.guard.neg)
        for c in self.code:
            if c.sem == "branch":
                c.extra["target"] = labels[c.instr.ops[-1].name]  # type: ignore[union-attr]
                c.extra["cond"] = self.read(c.instr.ops[0]) if len(c.instr.ops) == 2 else None

    def _tracer(self, i: Instr) -> Optional[Callable[[Any], Any]]:
        """What the colouring check compares besides derived operands: the global addresses a line
        touches and the argument tuples of the copy engine (the program's own arithmetic)."""
        from warpy.isa.operands import GMem, elem_name

        for op in i.ops:
            if isinstance(op, GMem):
                lo, hi, off = elem_name(op.addr.name, 0), elem_name(op.addr.name, 1), op.offset

                def gaddr(w: Any, lo: str = lo, hi: str = hi, off: int = off) -> Any:
                    a, b = w.regs.get(lo, 0), w.regs.get(hi, 0)
                    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
                        v = np.asarray(a, dtype=np.uint64) | (np.asarray(b, dtype=np.uint64) << np.uint64(32))
                        return hash(np.broadcast_to(v, (32,)).tobytes()) + off
                    return (a | (b << 32)) + off
                return gaddr
        sem = record(i).sem
        if sem in ("tma-load", "tma-store", "tma-reduce") and isinstance(i.ops[0], Mem) and i.ops[0].base is not None:
            base = i.ops[0].base.name
            dims = next((int(x[:-1]) for x in i.mods if x.endswith("D") and x[:-1].isdigit()), 1)
            n = dims + (2 if sem == "tma-load" else 1)  # (dst, bar, coords) or (src, coords)

            def args(w: Any, base: str = base, n: int = n) -> Any:
                return tuple(L.first(w.regs.get(elem_name(base, k), 0)) for k in range(n))
            return args
        return None

    def read(self, op: Operand) -> L.Reader:
        if isinstance(op, Mem):
            return L.mem_addr(op, self.read)
        return L.reader(op, self._sreg, self._cbank, self._sym)

    def _reader_or_none(self, op: Operand) -> Optional[L.Reader]:
        try:
            return self.read(op)
        except WarpyError:
            return None

    def _writer_or_none(self, op: Operand) -> Any:
        try:
            return L.writer(op)
        except WarpyError:
            return None

    def _sreg(self, w: Warp, name: str) -> Any:
        cta = w.cta
        if name == "SR_TID.X":
            return L.LANE_IDS + np.uint64(32 * w.wid)
        if name == "SR_LANEID":
            return L.LANE_IDS.copy()
        if name.startswith("SR_CTAID."):
            return cta.ctaid["XYZ".index(name[-1])]
        if name.startswith("SR_NCTAID."):
            return self.h.grid["XYZ".index(name[-1])]
        if name == "SR_NTID.X":
            return self.h.threads
        if name == "SR_CgaCtaId":
            return cta.rank
        if name.startswith("SR_CLUSTERID."):
            cl = self.h.cluster
            return cta.ctaid["XYZ".index(name[-1])] // cl["XYZ".index(name[-1])]
        if name.startswith("SR_TID."):
            return 0
        return 0

    def _cbank(self, off: Any) -> int:
        if isinstance(off, str):
            if off not in self.params:
                raise WarpyError(f"c[0x0][{off}] names no .param")
            return self.params[off]
        return 0  # the memory descriptor (0x208 / 0x358) and other words: 0

    def _sym(self, name: str) -> int:
        if name == "dsmem":
            return DSMEM
        raise WarpyError(f"unknown symbol `({name})")

    # -- CTAs of the first and last clusters ---------------------------------------------------------
    def _setup_ctas(self, sms: int) -> None:
        g, cl = self.h.grid, self.h.cluster
        ncl = [max(1, g[d] // max(cl[d], 1)) for d in range(3)]
        total = ncl[0] * ncl[1] * ncl[2]
        per = cl[0] * cl[1] * cl[2]
        for d in range(3):
            if g[d] % max(cl[d], 1) or g[d] < cl[d]:
                self.problems.add("protocol", f"the grid {g} is not a whole number of clusters {cl}: the launch is refused")
                break
        self.n_clusters = total
        self.resident = max(1, min(total, sms // per))
        # the last cluster a launch runs: the grid's last, unless cluster launch control hands the
        # grid's tail to the clusters launched first (then the last of those)
        uses_clc = any(c.sem == "clc-try-cancel" for c in self.code)
        last = self.resident - 1 if uses_clc else total - 1
        picks = [0] if last == 0 else [0, last]
        self.clusters: list[Cluster] = []
        self.ctas: list[Cta] = []
        self.warps: list[Warp] = []
        nwarps = -(-self.h.threads // 32)
        for ci in picks:
            cx, rest = ci % ncl[0], ci // ncl[0]
            cy, cz = rest % ncl[1], rest // ncl[1]
            cluster = Cluster(ci)
            self.clusters.append(cluster)
            for r in range(per):
                rx, rr = r % cl[0], r // cl[0]
                ry, rz = rr % cl[1], rr // cl[1]
                ctaid = (cx * cl[0] + rx, cy * cl[1] + ry, cz * cl[2] + rz)
                cta = Cta(len(self.ctas), ctaid, r, cluster)
                cta.linear = ctaid[0] + g[0] * (ctaid[1] + g[1] * ctaid[2])  # type: ignore[attr-defined]
                if self.values:
                    cta.smem = np.zeros(DSMEM + max(self.h.dynsmem, 1), dtype=np.uint8)
                cta.tmem_written = np.zeros((128, 512), dtype=bool)
                if self.values:
                    cta.tmem_vals = np.zeros((128, 512), dtype=np.float32)
                cluster.ctas.append(cta)
                self.ctas.append(cta)
                for wi in range(nwarps):
                    w = Warp(len(self.warps), cta, wi)
                    live = self.h.threads - 32 * wi
                    if live < 32:  # a last, partial warp: its missing lanes never run
                        w.groups = [[0, np.arange(32) < live]]
                    cta.warps.append(w)
                    self.warps.append(w)

    def cta_name(self, cta: Cta) -> str:
        return f"CTA {cta.linear}"  # type: ignore[attr-defined]

    def cta_of_rank(self, cta: Cta, rank: int) -> Optional[Cta]:
        for c in cta.cluster.ctas:
            if c.rank == rank:
                return c
        return None

    # -- names of places --------------------------------------------------------------------------
    def smem_buffer(self, addr: int) -> Optional[BufferDecl]:
        off = addr - DSMEM
        for b in self.smem_bufs:
            if b.base <= off < b.base + b.size:
                return b
        return None

    def place_name(self, space: str, cta: Optional[Cta], addr: int) -> str:
        if space == "smem":
            b = self.smem_buffer(addr)
            if b is None:
                return f"shared 0x{addr:x}"
            off = addr - DSMEM - b.base
            if b.elem == "mbarrier":
                coords = self._barrier_coords(b, off)
                nm = _pipe_name(b, coords)
                return nm or f"{b.name}[{', '.join(map(str, coords))}]"
            lay: Any = getattr(b.layout, "layout", b.layout)
            shape = lay.shape if isinstance(lay.shape, tuple) else (lay.shape,)
            if len(shape) >= 3:
                st = lay.stride[0]
                return f"{b.name}[{off // int(st)}]"
            return b.name
        if space == "global":
            src, off = self.global_source(addr)
            if src is None:
                return "global memory"
            b = self.global_buffer_of(src, off, off + 1)
            return b.name if b is not None else src
        if space == "tmem":
            return "tensor memory"
        return space

    def _barrier_coords(self, b: BufferDecl, off: int) -> tuple[int, ...]:
        key = ("bc", b.name, off)
        hit = self.ref_cache.get(key)
        if hit is not None:
            return tuple(hit)
        lay = b.layout
        shape = lay.shape if isinstance(lay.shape, tuple) else (lay.shape,)
        import itertools

        found: tuple[int, ...] = (off // 8,)
        flat = [s if isinstance(s, int) else int(np.prod(s)) for s in shape]
        for c in itertools.product(*[range(s) for s in flat]):
            if int(lay(c) if len(c) > 1 else lay(c[0])) == off:
                found = c
                break
        self.ref_cache[key] = found
        return found

    # -- mbarriers ---------------------------------------------------------------------------------
    def mbar(self, cta: Cta, addr: int) -> MBar:
        key = (cta.index, addr)
        b = self.mbars.get(key)
        if b is None:
            b = MBar(cta.index, addr, self.place_name("smem", cta, addr))
            b.cta_obj = cta
            self.mbars[key] = b
        return b

    def resolve_cluster_addr(self, cta: Cta, addr: int) -> tuple[Optional[Cta], int]:
        rank = addr >> 24
        local = addr & 0xFFFFFF
        if rank == 0 and addr < (1 << 24) and len(cta.cluster.ctas) == 1:
            return cta, local
        return self.cta_of_rank(cta, rank), local

    def check_barrier_addr(self, w: Warp, c: Compiled, addr: int) -> bool:
        b = self.smem_buffer(addr)
        if b is None or b.elem != "mbarrier":
            self.problems.add("memory", f"{self.cta_name(w.cta)} warp {w.wid}: {c.mnem} uses shared 0x{addr:x} as an mbarrier, "
                                        f"which no mbarrier buffer declares")
            return False
        return True

    def bar_access(self, bar: MBar, w: Warp, kind: str, vc: VC, agent: Agent, clock: int, op: str, proxy: str) -> None:
        """The barrier's word: its init is a write; arrivals, completions and waits are atomics that
        must come after the init (a fence.mbarrier_init and a CTA or cluster barrier between)."""
        cta = bar.cta_obj
        self.access("smem", cta, None, kind, vc, agent, clock, op, w, proxy=proxy,
                    footprint=[((bar.addr >> 2) >> 12, 3 << ((bar.addr >> 2) & 4095))])

    def arrive(self, bar: MBar, n: int, tx: int, vc: VC, who: str) -> None:
        if not bar.inited:
            self.problems.add("protocol", f"{who} arrives on {bar.name}, which is not initialised")
            return
        bar.tx += tx
        bar.pending -= n
        bar.arrived_any = True
        join(bar.acc_vc, vc)
        if bar.pending < 0:
            self.problems.add("protocol", f"{who} over-arrives on {bar.name}: {-bar.pending} more arrivals than the "
                                          f"{bar.count} its phase {bar.phase} expects")
            bar.pending = 0
        self._maybe_complete(bar)

    def complete_tx(self, bar: MBar, nbytes: int, vc: VC) -> None:
        if not bar.inited:
            self.problems.add("protocol", f"a copy completes {nbytes} bytes on {bar.name}, which is not initialised")
            return
        bar.tx -= nbytes
        join(bar.acc_vc, vc)
        self._maybe_complete(bar)

    def _maybe_complete(self, bar: MBar) -> None:
        if bar.pending == 0 and bar.tx == 0:
            rel = bar.acc_vc
            bar.phase += 1
            rel[bar.agent] = bar.phase
            bar.release_vc = rel
            bar.acc_vc = {}
            bar.pending = bar.count
            bar.arrived_any = False
            for w in bar.waiters:
                if w.state == 1:
                    w.state = 0
                    w.block = None
            bar.waiters = []

    def bar_passed(self, bar: MBar, parity: int) -> bool:
        return (bar.phase & 1) != parity

    # -- memory accesses and happens-before --------------------------------------------------------
    def access(self, space: str, cta: Optional[Cta], words: Optional[np.ndarray], kind: str, vc: VC, agent: Agent,
               clock: int, op: str, w: Warp, proxy: str = "generic", via: Optional[dict[Agent, str]] = None, name_addr: int = 0,
               footprint: Optional[list[tuple[int, int]]] = None) -> None:
        """Record an access (word indices of the space) and check it against the earlier ones it
        overlaps: any two, one a write, must be ordered (the earlier one's epoch is in `vc`)."""
        fp = footprint if footprint is not None else masks_of(np.asarray(words))
        cidx = cta.index if cta is not None else -1
        if cta is not None and cta is not w.cta and kind != "r":
            into = self.remote_into.setdefault(cidx, {})
            seen = into.get(agent)
            if seen is None or seen[0] < clock:
                into[agent] = (clock, f"{op}, {self.cta_name(w.cta)} warp {w.wid}")
        via = via if via is not None else w.via
        for chunk, mask in fp:
            key = (space, cidx, chunk)
            reg = self.regions.get(key)
            if reg is None:
                reg = self.regions[key] = Region()
            others = reg.writes if kind == "r" else reg.writes + reg.reads
            for a in others:
                if not (a.mask & mask):
                    continue
                if kind == "red" and a.kind == "red":
                    continue
                self._ordered(a, vc, agent, kind, op, w, space, cta, chunk, mask, via, proxy)
            rec = Access(mask, agent, clock, kind, op, w.wid, w.cta.index, proxy)
            if kind == "r":
                for a in reg.reads:
                    if a.agent == agent and a.clock == clock and a.op == op:
                        a.mask |= mask
                        break
                    if a.agent == agent and a.mask & ~mask == 0 and a.clock <= clock:
                        a.mask, a.clock, a.op, a.warp = mask, clock, op, w.wid
                        break
                else:
                    reg.reads.append(rec)
            elif kind == "red":
                for a in reg.writes:  # one atomic record per agent and place: the latest
                    if a.kind == "red" and a.agent == agent and a.mask == mask:
                        a.clock, a.op, a.warp, a.cta, a.proxy = clock, op, w.wid, w.cta.index, proxy
                        break
                else:
                    reg.writes.append(rec)
            else:
                keep = [a for a in reg.writes if a.mask & ~mask]
                reg.writes = keep
                if proxy == "async" and any(a.agent[0] in ("wg", "tc") for a in reg.reads):
                    self.refills += 1
                reg.reads = [a for a in reg.reads if a.mask & ~mask]
                reg.writes.append(rec)
                if proxy == "generic" and space == "smem":
                    w.unfenced.append(rec)
                    if op.startswith("SYNCS.EXCH"):
                        w.unfenced_init.append(rec)
                if space == "global" and kind != "r":
                    w.gunfenced.append(rec)

    def _ordered(self, a: Access, vc: VC, agent: Agent, kind: str, op: str, w: Warp, space: str, cta: Optional[Cta],
                 chunk: int, mask: int, via: dict[Agent, str], proxy: str) -> None:
        # one warp, or one in-order queue (wgmma groups, a tensor-core queue): program order; two copies
        # completing on one barrier are two transfers, ordered only through the barrier's phases
        same = a.agent == agent and agent[0] in ("w", "wg", "tc")
        ok = same or vc.get(a.agent, 0) >= a.clock
        proxy_bad = ok and a.kind != "r" and a.proxy == "generic" and proxy == "async" and space == "smem" and not a.fenced
        gpu_bad = ok and space == "global" and a.kind != "r" and a.cta != w.cta.index and not a.gpu_fenced
        if ok and not (proxy_bad or gpu_bad or self.hb):
            return
        addr = self._chunk_addr(space, chunk, a.mask & mask)
        place = self.place_name(space, cta, addr)
        if proxy_bad:
            self.problems.add("order", f"{place}: {op}, warp {w.wid} {_verb(kind, op)} it through the async proxy and "
                                       f"{a.op}, warp {a.warp} {_verb(a.kind, a.op)} it through the generic proxy, and no proxy "
                                       f"fence orders the two")
            return
        if gpu_bad:
            self.problems.add("order", f"{place}: {op}, warp {w.wid} of CTA {w.cta.index} {_verb(kind, op)} it and {a.op}, "
                                       f"warp {a.warp} of another CTA {_verb(a.kind, a.op)} it, with no GPU-scope fence "
                                       f"after the write")
            return
        if not ok:
            self.problems.add("order", f"{place}: {a.op}, warp {a.warp} {_verb(a.kind, a.op)} it and {op}, warp {w.wid} "
                                       f"{_verb(kind, op)} it, and nothing orders the two")
            return
        if self.hb:
            how = "program order" if same else via.get(a.agent, "")
            other = "" if a.cta == w.cta.index else " of another CTA"
            key = (place.split("[")[0], a.op, a.warp, a.cta != w.cta.index and "", op, w.wid, other, how, a.kind, kind)
            self.hb_table[key] = self.hb_table.get(key, 0) + 1

    def _chunk_addr(self, space: str, chunk: int, mask: int) -> int:
        low = (mask & -mask).bit_length() - 1
        return (chunk * 4096 + max(low, 0)) * 4

    def smem_words(self, addr: np.ndarray, nbytes: int) -> np.ndarray:
        a = np.asarray(addr, dtype=np.int64).ravel()
        n = max(1, (nbytes + 3) // 4)
        return ((a[:, None] >> 2) + np.arange(n)[None, :]).ravel()

    def check_smem_range(self, w: Warp, c: Compiled, lo: int, hi: int) -> bool:
        off_lo, off_hi = lo - DSMEM, hi - DSMEM
        for b in self.smem_bufs:
            if b.base <= off_lo and off_hi <= b.base + b.size:
                return True
        self.problems.add("memory", f"{self.cta_name(w.cta)} warp {w.wid}: {c.mnem} touches shared 0x{lo:x}..0x{hi:x}, "
                                    f"outside every shared buffer the kernel declares")
        return False

    def check_global(self, w: Warp, c: Compiled, addrs: np.ndarray, nbytes: int) -> Optional[str]:
        a = np.asarray(addrs, dtype=np.int64).ravel()
        if a.size == 0:
            return None
        lo, hi = int(a.min()), int(a.max()) + nbytes
        src, off = self.global_source(lo)
        src2, _ = self.global_source(hi - 1)
        if src is not None and src2 == src and src not in self.declared_sources:
            return src  # a pointer behind which the kernel declares no buffer: its extent is unknown, unchecked
        if src is None or src2 != src or self.global_buffer_of(src, off, off + hi - lo) is None:
            where = f"{src}+0x{off:x}" if src else f"0x{lo:x}"
            self.problems.add("memory", f"{self.cta_name(w.cta)} warp {w.wid}: {c.mnem} touches global {where}..+0x{hi - lo:x}, "
                                        f"outside every global buffer the kernel declares")
            return None
        return src

    def pdl_check(self, w: Warp, c: Compiled) -> None:
        if self.uses_pdl and not w.acq_done:
            self.problems.add("pdl", f"{self.cta_name(w.cta)} warp {w.wid}: {c.mnem} reaches global memory before the "
                                     f"dependent-launch wait (ACQBULK)")

    # -- derived operands --------------------------------------------------------------------------
    def check_notes(self, w: Warp, c: Compiled, before: dict[str, Any], mask: Optional[np.ndarray], pre: list[Any]) -> None:
        for k, note in enumerate(c.notes):
            env = before
            coords = []
            for a in note.coords:
                v: Any = a.const
                for coef, name in a.terms:
                    x = env.get(name, 0)
                    if isinstance(x, np.ndarray):
                        x = x.astype(np.int64)
                    v = v + coef * x
                coords.append(v)
            got = pre[k] if not c.note_modes[k] else c.get[note.operand](w)
            lanes_vec = any(isinstance(x, np.ndarray) for x in coords) or isinstance(got, np.ndarray)
            self.notes_checked += 1
            if not lanes_vec:
                want = self._ref(w, note, tuple(int(x) for x in coords))
                gv = int(got) & L.M32
                w.trace.append((c.pc, gv))
                if want is not None and gv != want:
                    self.problems.add("wrong", f"line {c.pc + 1} ({c.mnem}): {note} is 0x{want:x}, the operand holds 0x{gv:x}")
                continue
            idx = list(range(32)) if mask is None else np.nonzero(mask)[0].tolist()
            cols = [x.tolist() if isinstance(x, np.ndarray) else [int(x)] * 32 for x in coords]
            gl = got.tolist() if isinstance(got, np.ndarray) else [int(got)] * 32
            vals = []
            bad = False
            for ln in idx:
                want = self._ref(w, note, tuple(col[ln] for col in cols))
                gv = gl[ln] & L.M32
                vals.append(gv)
                if want is not None and gv != want and not bad:
                    bad = True
                    self.problems.add("wrong", f"line {c.pc + 1} ({c.mnem}): {note} at lane {ln} is 0x{want:x}, the operand "
                                               f"holds 0x{gv:x}")
            w.trace.append((c.pc, tuple(vals)))

    def _ref(self, w: Warp, note: Any, coords: tuple[int, ...]) -> Optional[int]:
        key = (note.buffer, note.form, coords, w.cta.tmem_base)
        v = self.ref_cache.get(key)
        if v is None:
            try:
                v = reference(self.h, note, coords, dsmem=DSMEM, tmem_base=w.cta.tmem_base, params=self.params)
            except Exception as e:  # a coordinate outside the layout's shape is a wrong operand
                self.problems.add("wrong", f"{note} at {coords}: {e}")
                return None
            self.ref_cache[key] = v
        return v

    # -- running -------------------------------------------------------------------------------------
    def run(self) -> None:
        t0 = last = time.monotonic()
        total = 0
        warps = self.warps
        while True:
            progressed = False
            for w in warps:
                if w.state != 0:
                    continue
                n = self.run_warp(w, 400)
                total += n
                if n:
                    progressed = True
            if not progressed:
                if all(w.state == 2 for w in warps):
                    break
                if not any(w.state == 0 for w in warps):
                    if self._rest_of_grid():
                        continue
                    self._hang()
                    break
            if total > MAX_STEPS:
                self.problems.add("protocol", f"the simulation ran {MAX_STEPS} warp instructions without finishing (a livelock?)")
                break
            if self.progress is not None:
                now = time.monotonic()
                if now - last > 1.0:
                    last = now
                    done = sum(1 for w in warps if w.state == 2)
                    self.progress(f"{self.label}{total} warp instructions, {done}/{len(warps)} warps done, {now - t0:.0f} s")
        self.steps = total
        self._finish()

    def run_warp(self, w: Warp, quantum: int) -> int:
        code = self.code
        n = 0
        check_notes = self.check_notes
        while n < quantum:
            g = w.groups[0]
            pc, mask = g[0], g[1]
            if pc >= len(code):
                self._exit_lanes(w, mask)
                if w.state == 2:
                    return n
                continue
            c = code[pc]
            n += 1
            eff = mask
            if c.guard is not None:
                gv = c.guard(w)
                if isinstance(gv, np.ndarray):
                    e2 = gv if mask is None else (gv & mask)
                    if not e2.any():
                        g[0] = pc + 1
                        self._merge(w)
                        continue
                    eff = None if (mask is None and e2.all()) else e2
                elif not gv:
                    if c.sem == "branch":
                        g[0] = pc + 1
                        self._merge(w)
                        continue
                    g[0] = pc + 1
                    self._merge(w)
                    continue
            sem = c.sem
            if sem == "branch":
                cond = c.extra["cond"]
                if cond is not None:
                    cv = cond(w)
                    if isinstance(cv, np.ndarray):
                        e3 = cv if eff is None else (cv & eff)
                        eff = None if (eff is None and e3.all()) else (e3 if e3.any() else False)
                    elif not cv:
                        eff = False
                self._branch(w, g, eff, c.extra["target"])
                continue
            if sem == "exit":
                self._exit_lanes(w, eff)
                if w.state == 2:
                    return n
                continue
            if w.pending and c.regids and c.sem != "mma":
                self._pending_check(w, c)
            if c.trace is not None:
                w.trace.append((pc, c.trace(w)))
            if c.notes:
                before = dict(w.regs)
                pre = [None if c.note_modes[k] else c.get[nt.operand](w) for k, nt in enumerate(c.notes)]
                res = c.handler(self, w, c, eff)
                if res == BLOCK:
                    return n
                check_notes(w, c, before, eff, pre)
            else:
                res = c.handler(self, w, c, eff)
                if res == BLOCK:
                    return n
            g[0] = pc + 1
            if len(w.groups) > 1:
                self._merge(w)
            if w.state != 0:
                return n
        return n

    def _branch(self, w: Warp, g: list[Any], eff: Any, target: int) -> None:
        mask = g[1]
        if eff is False:
            g[0] += 1
        elif eff is None:
            g[0] = target
        else:
            rest = (~eff) if mask is None else (mask & ~eff)
            if not rest.any():
                g[0] = target
            else:
                pc = g[0]
                g[0], g[1] = target, eff
                w.groups.append([pc + 1, rest])
        self._merge(w)

    def _merge(self, w: Warp) -> None:
        gs = w.groups
        if len(gs) == 1:
            return
        gs.sort(key=lambda x: x[0])
        out = [gs[0]]
        for x in gs[1:]:
            if x[0] == out[-1][0]:
                a, b = out[-1][1], x[1]
                m = None if a is None or b is None else (a | b)
                if m is not None and m.all():
                    m = None
                out[-1][1] = m
            else:
                out.append(x)
        w.groups = out

    def _exit_lanes(self, w: Warp, eff: Any) -> None:
        g = w.groups[0]
        mask = g[1]
        if eff is None or eff is False:
            rest = None if eff is False else np.zeros(32, dtype=bool)
        else:
            rest = (~eff) if mask is None else (mask & ~eff)
        if rest is None:
            g[0] += 1
            return
        if not rest.any():
            w.groups.pop(0)
            if not w.groups:
                w.state = 2
                self.on_exit(w)
            return
        g[0], g[1] = g[0] + 1, rest

    def on_exit(self, w: Warp) -> None:
        from warpy.check.families.sync import cluster_barrier_check, named_barrier_recheck

        if w.wg_committed > w.wg_retired:
            w.wg_retired = w.wg_committed
        w.exit_vc = dict(w.vc)
        cluster_barrier_check(self, w.cta.cluster)
        named_barrier_recheck(self, w.cta)

    def _pending_check(self, w: Warp, c: Compiled) -> None:
        for base, idx in c.regids:
            for pb, lo, hi, grp, op in w.pending:
                if pb == base and lo <= idx < hi and (grp < 0 or grp > w.wg_retired):
                    why = "no tcgen05.wait::ld after the load" if grp < 0 else "the wgmma group has not been waited for"
                    self.problems.add("order", f"{_regname(base, lo)}: {op}, warp {w.wid} writes it and {c.mnem}, warp {w.wid} "
                                               f"touches it, and nothing orders the two ({why})")
                    return

    def _rest_of_grid(self) -> bool:
        """Every simulated warp is blocked or done, and some spin on a GPU-scope flag: the CTAs outside
        the simulated clusters (whose work the simulated ones wait for) raise those flags. A flag a
        simulated CTA should have raised is therefore not reported as a hang (docs/checker.md)."""
        from warpy.check.families.memory import flag_value

        woke = False
        for w in self.warps:
            if w.state == 1 and w.block is not None and w.block[0] == "flag":
                _, addr, want = w.block
                flag_value(self, addr, want)
                self.flags_raised_outside += 1
                w.state, w.block = 0, None
                woke = True
        return woke

    def wake_flag_waiters(self, addr: int) -> None:
        for w in self.flag_waiters:
            if w.state == 1 and w.block is not None and w.block[0] == "flag" and w.block[1] == addr:
                w.state, w.block = 0, None
        self.flag_waiters = [w for w in self.flag_waiters if w.state == 1]

    def _hang(self) -> None:
        for w in self.warps:
            if w.state != 1:
                continue
            b = w.block
            who = f"{self.cta_name(w.cta)} warp {w.wid}"
            if b is None:
                self.problems.add("protocol", f"hang: {who} is blocked")
            elif b[0] == "mbar":
                bar: MBar = b[1]
                par = b[2]
                self.problems.add("protocol", f"hang: {who} waits on {bar.name} for the phase of parity {par}: it is in phase "
                                              f"{bar.phase}, {bar.pending} of {bar.count} arrivals to come, {bar.tx} bytes")
            else:
                self.problems.add("protocol", f"hang: {who} waits on {b[1]}")

    def _finish(self) -> None:
        for cta in self.ctas:
            # a CTA's shared memory is gone once its warps have exited: whatever another CTA does to it
            # (a remote arrival, a multicast landing) must be ordered before one of those exits
            if not all(x.state == 2 for x in cta.warps):
                continue  # a hang, reported as such
            for agent, (clock, who) in self.remote_into.get(cta.index, {}).items():
                if any(x.exit_vc is not None and x.exit_vc.get(agent, 0) >= clock for x in cta.warps):
                    continue
                self.problems.add("order", f"{self.cta_name(cta)}: {who} reaches its shared memory, and nothing orders "
                                           f"that before {self.cta_name(cta)} exits (no wait of its warps sees it)")
        for cta in self.ctas:
            for bid, st in cta.named.items():
                if st["arrived"]:
                    self.problems.add("named", f"{self.cta_name(cta)}: named barrier {bid} ends with {st['arrived']} of "
                                               f"{st['count']} threads arrived")


def _verb(kind: str, op: str = "") -> str:
    if kind == "red":
        if "PHASECHK" in op:
            return "waits on"
        if op.startswith(("SYNCS.ARRIVE", "UTCBAR")):
            return "arrives on"
        if op.startswith(("UTMALDG", "UBLKCP", "UGETNEXTWORKID")):
            return "completes bytes on"
        return "adds to"
    return {"r": "reads", "w": "writes"}[kind]


def _regname(base: str, lo: int) -> str:
    return f"{base}{lo}" if base in ("R", "UR") else base


def default_progress(msg: str) -> None:
    sys.stderr.write("\r" + msg + " " * 8)
    sys.stderr.flush()
