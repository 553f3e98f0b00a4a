"""The megakernel interpreter's op bodies (sm_90a) behind one interface (`OpBody`): what the loader
loads, what the consumers compute, what the storer stores, and the order the body releases its
pages. `kernels/mega_sm90.py` runs them. This module holds the interface, the steps the bodies share
and the elementwise bodies (noop, unary, binary); the others have a module each:
`kernels/mega_gemm.py` (gemm with its fused epilogue, the decode shapes too), `kernels/mega_silu_mul.py`,
`kernels/mega_rmsnorm.py`. `bodies()` (at the end) registers them all by opcode.

The contract a body keeps, per instruction (the interpreter's barriers count on it):

- `pages` logical pages (lids 0..pages-1), `release` the order it releases them (a permutation):
  the interpreter renames pages so that the next instruction's lid q is the page released q-th;
  every lid is released exactly once, by whichever role is done with it last (`r.release_page`);
  a lid is written only after `r.wait_page(lid)` (the previous instruction released it);
- `load` (the loader, after the load-stage counter waits): exactly one arrival on
  `ip.loaded[slot]`, with the bytes of every copy it completes there (`expect`), then the copies
  (a body with a stage ring of its own completes its other copies on that ring's barriers);
- `compute` (the consumers, 256 threads): wait for `loaded`, compute in shared memory, then
  `consumers_done` (proxy fence + the consumers' named barrier), release what it no longer
  needs and exactly one arrival on `ip.out_ready[slot]` (`r.cleader`);
- `store` (the storer, after the store-stage counter waits): wait for `out_ready`, store, wait for
  the stores' writes (`DEPBAR.LE.WRITES`), release its pages; the interpreter then arrives on the
  instruction's counters;
- `refuse(fields)` (host): why an instruction cannot run on this body, or None;
- `declare(ip)` (once, before the barriers are initialised): barriers or views of the pages of
  its own; `start(ip, r)` (each role, before its first instruction): state it keeps across
  instructions in `r.state` (a ring's position).

Element math is bf16 in shared memory, computed in fp32 and rounded once to bf16 (`F2FP`, nearest
even): for add, mul and relu that is the value rounded once from the exact result (fp32 has more
than 2 x 8 + 2 bits), which is what `warpy.mega.semantics` computes; silu and gelu go through MUFU
(`kernels/mega_math.py`) and are compared with a tolerance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional, Protocol, Sequence

from warpy.isa.buffers import Barrier
from warpy.isa.families import alu, control, memory, sync, tma
from warpy.isa.families._util import ins
from warpy.isa.families.typed import F32
from warpy.isa.operands import RZ, Mem, P, R, RVec, UR, URVec
from warpy.isa.pipes import wait
from warpy.isa.units.dispatch import dispatch
from warpy.isa.units.tma import table_entry
from warpy.mega import fields as F

from .mega_math import Activation, pack_bf16, unpack_bf16

if TYPE_CHECKING:
    from warpy.isa.program import Program

    from .mega_sm90 import Interp, Role


class OpBody(Protocol):
    opcode: int
    name: str
    pages: int
    release: tuple[int, ...]

    def refuse(self, fields: dict[str, int]) -> Optional[str]: ...

    def declare(self, ip: Interp) -> None: ...

    def start(self, ip: Interp, r: Role) -> None: ...

    def load(self, ip: Interp, r: Role) -> None: ...

    def compute(self, ip: Interp, r: Role) -> None: ...

    def store(self, ip: Interp, r: Role) -> None: ...

    def finish(self, ip: Interp, r: Role) -> None:
        """What the body does once role `r` has run every instruction (a drain), on the targets
        whose interpreter calls it (sm_100a)."""


class Body:
    """What most bodies share: nothing declared, no state across instructions, nothing to drain."""

    def declare(self, ip: Interp) -> None:
        return None

    def start(self, ip: Interp, r: Role) -> None:
        return None

    def finish(self, ip: Interp, r: Role) -> None:
        return None


# -- helpers the bodies share ---------------------------------------------------------------------------


def expect(ip: Interp, r: Role, nbytes: Optional[R]) -> None:
    """The loader's one arrival on `loaded[slot]`, expecting `nbytes` (None: no copy)."""
    bar = ip.loaded.at(r.cons.ring)
    if nbytes is None:
        ip.p.derive.emit_at(bar, lambda m: sync.arrive(m), guard=r.leader)
    else:
        ip.p.derive.emit_at(bar, lambda m: sync.arrive_expect_tx(m, nbytes), guard=r.leader)


def box_bytes(ip: Interp, r: Role, ops: tuple[int, ...], scale: Optional[R] = None) -> R:
    """The bytes one copy of each operand moves, summed (times `scale` when given: boxes a tile)."""
    p = ip.p
    total, b = p.r("tx_bytes"), p.r("box_bytes")
    p.emit(alu.mov(total, 0))
    for k in ops:
        r.field(f"op{k}.box_16", b)
        p.emit(alu.imad(total, b, 16, total))
    if scale is not None:
        p.emit(alu.imad(total, total, scale, RZ))
    return total


def descriptor(ip: Interp, r: Role, k: int, d: Optional[URVec] = None) -> URVec:
    """d = the address of operand k's map in the launch's table, fenced for the tensor-map proxy
    (the host wrote the table: fence.proxy.tensormap::generic.acquire before this thread's first
    copy through it). With the launch's `fence_once`, a bitmap in shared memory (one per role)
    remembers the maps this CTA's role has fenced, and a map is fenced the first time only."""
    p = ip.p
    d = d if d is not None else p.urvec("map_desc", 2)
    idx = r.field(f"op{k}.tmap", p.r("map_index"))
    table_entry(p, ip.table, idx, d)
    if ip.fenced is None:
        p.emit(tma.tmap_acquire(d))
        return d
    word, bit, off = p.r("fenced_word"), p.r("fenced_bit"), p.r("fenced_off")
    p.emit(alu.shf_r(off, idx, 5))
    p.emit(alu.lop3(bit, idx, 31, RZ, 0xC0))
    one = p.r("fenced_one")
    p.emit(alu.mov(one, 1))
    p.emit(alu.shf_l(bit, one, bit))
    reg, base = p.derive.value_reg("addr", ip.fenced.at(r.fence_row * ip.fence_words))
    addr = p.r("fenced_addr")
    p.emit(alu.mov(addr, reg))
    p.emit(alu.iadd3(addr, addr, base))
    p.emit(alu.imad(addr, off, 4, addr))
    p.emit(memory.lds(word, Mem(addr)))
    seen = p.p("fenced_seen")
    p.emit(alu.lop3_p(seen, word, bit, RZ, 0xC0))
    with p.when(~seen):
        p.emit(tma.tmap_acquire(d))
        p.emit(alu.lop3(word, word, bit, RZ, 0xFC))
        p.emit(memory.sts(Mem(addr), word))
    return d


class MapOp:
    """Operand k's tensor map as the loader or the storer uses it through one instruction: the
    descriptor's address (fenced), its rank, the box origin and the box's bytes, read from the slot
    once (the origin and the bytes into uniform registers: the producer warps have 40 general
    registers); `copy` issues one TMA load (or store) of the box at the origin shifted along the
    two innermost map dimensions, dispatching on the rank at run time."""

    def __init__(self, ip: Interp, r: Role, k: int, name: str) -> None:
        p = self.p = ip.p
        self.ip, self.r, self.name = ip, r, name
        t = p.r("map_field")
        self.rank = p.ur(f"{name}_rank")
        p.emit(alu.r2ur(self.rank, r.field(f"op{k}.rank", t)))
        self.coords: list[UR] = []
        for c in range(F.COORDS):
            r.field(f"op{k}.coord{c}", t)
            u = p.ur(f"{name}_c{c}")
            p.emit(alu.r2ur(u, t))
            self.coords.append(u)
        r.field(f"op{k}.box_16", t)
        p.emit(alu.shf_l(t, t, 4))
        self.bytes = p.ur(f"{name}_bytes")
        p.emit(alu.r2ur(self.bytes, t))
        self.desc = descriptor(ip, r, k, p.urvec(f"{name}_desc", 2))

    def copy(self, dst: Optional[UR], bar: Optional[Barrier], shift0: Optional[UR] = None, guard: Optional[P] = None,
             shift1: Optional[UR] = None, shift2: Optional[UR] = None, shift3: Optional[UR] = None) -> None:
        """Load the box at (c0 + shift0, c1 + shift1, c2 + shift2, c3 + shift3) into shared memory at `dst`
        completing on `bar` (None: store the box from `dst` there; `dst` None as well: prefetch the
        box into L2). `guard`: the thread that issues it."""
        p = self.p
        tag = "PF" if dst is None else ""
        labels = [p.fresh_label(f"{self.name.upper()}{tag}_RANK{n}") for n in range(1, F.COORDS + 1)]
        done = p.fresh_label(f"{self.name.upper()}_{'PREFETCHED' if dst is None else 'COPIED'}")
        hit = p.up("rank_hit")  # the rank is the same in every lane: uniform compares and branches
        for n, label in enumerate(labels[:-1], 1):
            p.emit(alu.uisetp("EQ", hit, self.rank, n))
            p.emit(control.bra_u(hit, label))
        p.emit(control.bra(labels[-1]))
        for n, label in enumerate(labels, 1):
            p.label(label)
            first = 2 if bar is not None else 0 if dst is None else 1
            args = p.urvec(f"{'tma' if bar is not None else 'tmapf' if dst is None else 'tmas'}_args{n}", first + n)
            if dst is not None:
                p.emit(alu.umov(args[0], dst))
            if bar is not None:
                p.derive.into(args[1], "addr", bar)
            for c in range(n):
                shift = (shift0, shift1, shift2, shift3)[c] if c < 4 else None
                if shift is not None:
                    p.emit(alu.uiadd3(args[first + c], self.coords[c], shift))
                else:
                    p.emit(alu.umov(args[first + c], self.coords[c]))
            if bar is not None:
                p.emit(tma.tma_load(Mem(args), self.desc).guarded(guard))
            elif dst is None:
                p.emit(tma.tma_prefetch(Mem(args), self.desc).guarded(guard))
            else:
                p.emit(tma.tma_store(Mem(args), self.desc).guarded(guard))
            p.emit(control.bra(done))
        p.label(done)


def page_addr(ip: Interp, r: Role, lid: int, name: str = "page_addr", offset: Optional[R] = None) -> UR:
    """A uniform register holding the shared address of logical page `lid` (+ `offset` bytes)."""
    p = ip.p
    reg, off = p.derive.value_reg("addr", r.page(lid))
    u = p.ur(name)
    p.emit(alu.uiadd3(u, reg, off))
    if offset is not None:
        t = p.ur(f"{name}_off")
        p.emit(alu.r2ur(t, offset))
        p.emit(alu.uiadd3(u, u, t))
    return u


def phys_addr(ip: Interp, page: int, name: str, offset: Optional[R] = None, off: int = 0) -> UR:
    """A uniform register holding the shared address of physical page `page` (+ `offset` bytes, +
    `off`): the bodies that address their pages by number (`physical_pages`)."""
    p = ip.p
    reg, o = p.derive.value_reg("addr", ip.pages.at(page, 0))
    u = p.ur(name)
    p.emit(alu.uiadd3(u, reg, o + off))
    if offset is not None:
        t = p.ur(f"{name}_off")
        p.emit(alu.r2ur(t, offset))
        p.emit(alu.uiadd3(u, u, t))
    return u


def load_operand(ip: Interp, r: Role, k: int, lid: int) -> None:
    """Wait for page `lid`, copy operand k's box into it, completing on `loaded[slot]`."""
    r.wait_page(lid)
    m = MapOp(ip, r, k, f"op{k}")
    m.copy(page_addr(ip, r, lid), ip.loaded.at(r.cons.ring), guard=r.leader)


def load_boxes(ip: Interp, r: Role, m: MapOp, lid: int, count: R, step: UR) -> None:
    """`count` boxes of operand m into page `lid`, box b at b x its bytes, at the origin shifted by
    b x `step` along the innermost map dimension, completing on `loaded[slot]` (the caller waited
    for the page and expected the bytes)."""
    p = ip.p
    base = page_addr(ip, r, lid, f"{m.name}_page")
    dst, shift = p.ur(f"{m.name}_dst"), p.ur(f"{m.name}_shift")
    p.emit(alu.umov(dst, base))
    p.emit(alu.umov(shift, 0))
    with p.loop(f"{m.name}_box", count, max_count=64):
        m.copy(dst, ip.loaded.at(r.cons.ring), shift, guard=r.leader)
        p.emit(alu.uiadd3(dst, dst, m.bytes))
        p.emit(alu.uiadd3(shift, shift, step))


def store_output(ip: Interp, r: Role, lid: int, count: Optional[R] = None, step: Optional[UR] = None,
                 physical: bool = False) -> None:
    """Wait for the consumers, store page `lid` (physical page `lid` where `physical`) through operand
    0's map (`count` boxes, box b at b x its bytes and b x `step` along the innermost dimension; one
    box when None), wait for the writes, release the page."""
    p = ip.p
    wait(p, ip.out_ready.at(r.cons.ring), r.cons.ring.parity)
    m = MapOp(ip, r, 0, "out")
    base = phys_addr(ip, lid, "store_page") if physical else page_addr(ip, r, lid, "store_page")

    def release() -> None:
        if physical:
            r.release_pid(lid)
        else:
            r.release_page(lid)

    if count is None:
        m.copy(base, None, guard=r.leader)
    else:
        assert step is not None
        dst, shift = p.ur("out_src"), p.ur("out_shift")
        p.emit(alu.umov(dst, base))
        p.emit(alu.umov(shift, 0))
        with p.loop("out_box", count, max_count=64):
            m.copy(dst, None, shift, guard=r.leader)
            p.emit(alu.uiadd3(dst, dst, m.bytes))
            p.emit(alu.uiadd3(shift, shift, step))
    p.emit(tma.bulk_commit())
    if ip.fault == "early-page-free":  # seeded: the page goes back before the store has read it
        release()
        p.emit(tma.bulk_wait(0, writes=True))
        return
    p.emit(tma.bulk_wait(0, writes=True))
    release()


def branch_on_fields(p: Program, hit: P, cases: Sequence[tuple[str, Sequence[tuple[R, int]]]], last: str) -> None:
    """Branch to the first case's label whose fields all hold their values ((register, value) pairs
    compared for equality, ANDed in `hit`), else to `last`: a gemm body's choice of code path by the
    instruction's tile shape, A box and flags."""
    for label, conds in cases:
        for k, (reg, value) in enumerate(conds):
            p.emit(alu.isetp("EQ", hit, reg, value, c=hit) if k else alu.isetp("EQ", hit, reg, value))
        p.emit(control.bra(label).guarded(hit))
    p.emit(control.bra(last))


def consumers_done(ip: Interp) -> None:
    """Every consumer thread's shared-memory writes are fenced for the async proxy (the TMA store
    reads them) and every consumer thread is here."""
    ip.p.emit(sync.fence_proxy_async())
    ip.p.emit(sync.bar_sync(1, 256))


def out_ready(ip: Interp, r: Role) -> None:
    ip.p.derive.emit_at(ip.out_ready.at(r.cons.ring), lambda m: sync.arrive(m), guard=r.cleader)


class Tile2:
    """The consumers' walk over an elementwise tile: warp w of 8 takes rows w, w + 8, ...; lane l
    the 8 columns 8l..8l+7 (a tile row is at most 256 columns); `row` runs body(row, col0) where
    both are in the tile."""

    def __init__(self, ip: Interp, r: Role) -> None:
        p = self.p = ip.p
        self.ip, self.r = ip, r
        self.tm = r.field("tile_m", p.r("tile_m"))
        self.tn = r.field("tile_n", p.r("tile_n"))
        cw, lane = p.r("cons_warp"), p.r("cons_lane")
        p.emit(alu.shf_r(cw, r.ctid, 5))
        p.emit(alu.lop3(lane, r.ctid, 31, RZ, 0xC0))
        self.cw = cw
        self.col0 = p.r("col0")
        p.emit(alu.imad(self.col0, lane, 8, RZ))

    def rows(self, body: Callable[[R], None]) -> None:
        p = self.p
        n = p.r("row_steps")
        p.emit(alu.iadd3(n, self.tm, 7))
        p.emit(alu.shf_r(n, n, 3))
        with p.loop("row_step", n, max_count=32) as j:
            row = p.r("row")
            p.emit(alu.imad(row, j.reg, 8, self.cw))
            ok = p.p("in_tile")
            p.emit(alu.isetp("LT", ok, row, self.tm))
            p.emit(alu.isetp("LT", ok, self.col0, self.tn, c=ok))
            skip = p.fresh_label("OUTSIDE")
            p.emit(control.bra(skip).guarded(~ok))
            body(row)
            p.label(skip)


class Operand:
    """Operand k's elements in page `lid`: the packed box's row and column strides (elements; 0
    where it broadcasts), its page's address; `load(row, col0)` the 8 elements at (row, col0..+7)
    as 4 registers of bf16 pairs (8 copies of one element where it broadcasts along columns)."""

    def __init__(self, ip: Interp, r: Role, k: int, lid: int, name: str) -> None:
        p = self.p = ip.p
        self.name = name
        self.rs = r.field(f"op{k}.row_stride", p.r(f"{name}_rs"))
        self.cs = r.field(f"op{k}.col_stride", p.r(f"{name}_cs"))
        self.vec = p.p(f"{name}_vec")
        p.emit(alu.isetp("NE", self.vec, self.cs, 0))
        reg, off = p.derive.value_reg("addr", r.page(lid))
        self.base = p.r(f"{name}_page")
        p.emit(alu.mov(self.base, reg))
        p.emit(alu.iadd3(self.base, self.base, off))

    def addr(self, row: R, col0: R) -> R:
        p = self.p
        a = p.r(f"{self.name}_addr")
        p.emit(alu.imad(a, row, self.rs, RZ))
        p.emit(alu.imad(a, col0, self.cs, a))
        p.emit(alu.imad(a, a, 2, self.base))
        return a

    def load(self, row: R, col0: R) -> RVec:
        p = self.p
        v = p.rvec(f"{self.name}_v", 4)
        a = self.addr(row, col0)
        p.emit(memory.lds(v, Mem(a)).guarded(self.vec))
        one = p.r(f"{self.name}_one")
        p.emit(ins(memory.LDS, "U16", one, Mem(a)).guarded(~self.vec))
        for q in range(4):
            p.emit(alu.prmt(v[q], one, 0x1010, one).guarded(~self.vec))
        return v


def _halves(p: object, x: R, lo: R, hi: R) -> None:
    """lo, hi = the fp32 values of the bf16 pair in x (low half, high half)."""
    from warpy.isa.program import Program

    assert isinstance(p, Program)
    p.emit(alu.shf_l(lo, x, 16))
    p.emit(alu.lop3(hi, x, 0xFFFF0000, RZ, 0xC0))


def combine_tile(ip: Interp, r: Role, a_lid: int, b_lid: int, out_lid: int,
                 combine: Callable[[F32, F32], None]) -> None:
    """out = combine(a, b) elementwise over the tile, with numpy broadcasting (operands 1 and 2 in
    pages a_lid and b_lid, the output operand 0 in out_lid): each bf16 pair unpacked to fp32,
    `combine(x, y)` leaves its result in x, rounded once to bf16."""
    p = ip.p
    t = Tile2(ip, r)
    a = Operand(ip, r, 1, a_lid, "a")
    b = Operand(ip, r, 2, b_lid, "b")
    out = Operand(ip, r, 0, out_lid, "out")

    def row_body(row: R) -> None:
        va, vb = a.load(row, t.col0), b.load(row, t.col0)
        res = p.rvec("res", 4)
        alo, ahi = F32.of(p.r("a_lo")), F32.of(p.r("a_hi"))
        blo, bhi = F32.of(p.r("b_lo")), F32.of(p.r("b_hi"))
        for q in range(4):
            unpack_bf16(p, va[q], alo, ahi)
            unpack_bf16(p, vb[q], blo, bhi)
            combine(alo, blo)
            combine(ahi, bhi)
            pack_bf16(p, res[q], ahi, alo)
        p.emit(memory.sts(Mem(out.addr(row, t.col0)), res))

    t.rows(row_body)


# -- the bodies -------------------------------------------------------------------------------------------


class Noop(Body):
    """No operand, nothing computed or stored (a queue's padding, or an instruction whose counters
    alone matter)."""

    opcode: int = F.NOOP
    name: str = "noop"
    pages: int = 0
    release: tuple[int, ...] = ()

    def refuse(self, fields: dict[str, int]) -> Optional[str]:
        return None

    def load(self, ip: Interp, r: Role) -> None:
        expect(ip, r, None)

    def compute(self, ip: Interp, r: Role) -> None:
        consumers_done(ip)
        out_ready(ip, r)

    def store(self, ip: Interp, r: Role) -> None:
        return None


def refuse_elementwise(fields: dict[str, int]) -> Optional[str]:
    """What no elementwise body runs: an output whose last dimension is 1 (columns are stored 8 at a
    time) or a tile row wider than the 256 columns a warp's lanes cover."""
    if fields["op0.col_stride"] != 1:
        return "an elementwise output whose last dimension is 1 (columns are stored 8 at a time)"
    if fields["tile_n"] > 256:
        return f"an elementwise tile {fields['tile_n']} columns wide (a warp covers 256)"
    return None


class Unary(Body):
    """out = act(x): x lands in lid 0 and is computed in place (relu, silu, gelu-tanh: fp32, rounded
    once; `none` is a copy: nothing to compute), stored from lid 0."""

    opcode: int = F.UNARY
    name: str = "unary"
    pages: int = 1
    release: tuple[int, ...] = (0,)

    def refuse(self, fields: dict[str, int]) -> Optional[str]:
        if (fields["op0.row_stride"], fields["op0.col_stride"]) != (fields["op1.row_stride"], fields["op1.col_stride"]):
            return "unary whose input box lands unlike its output box (it is computed in place)"
        return refuse_elementwise(fields)

    def load(self, ip: Interp, r: Role) -> None:
        expect(ip, r, box_bytes(ip, r, (1,)))
        load_operand(ip, r, 1, 0)

    def compute(self, ip: Interp, r: Role) -> None:
        p = ip.p
        wait(p, ip.loaded.at(r.cons.ring), r.cons.ring.parity)
        act = Activation(p, r.field("activation", p.r("act")))
        active = p.p("act_any")
        p.emit(alu.isetp("NE", active, r.field("activation", p.r("act_code")), F.ACT_NONE))
        t = Tile2(ip, r)
        x = Operand(ip, r, 1, 0, "x")

        # (a copy walks the tile with its loads and stores predicated off: ptxas 12.9 crashes on a
        # branch around this loop that joins before the consumers' named barrier)
        def apply(row: R) -> None:
            v = p.rvec("x_v", 4)
            a = x.addr(row, t.col0)
            p.emit(memory.lds(v, Mem(a)).guarded(active))
            lo, hi = F32.of(p.r("x_lo")), F32.of(p.r("x_hi"))
            for q in range(4):
                p.emit(alu.mov(v[q], 0).guarded(~active))  # (a copy reads nothing: no value unwritten)
                unpack_bf16(p, v[q], lo, hi)
                act.apply(lo)
                act.apply(hi)
                pack_bf16(p, v[q], hi, lo)
            p.emit(memory.sts(Mem(a), v).guarded(active))

        t.rows(apply)
        consumers_done(ip)
        out_ready(ip, r)

    def store(self, ip: Interp, r: Role) -> None:
        store_output(ip, r, 0)


class TwoInputs(Body):
    """An elementwise body of two inputs with numpy broadcasting: a in lid 0, b in lid 1, out in
    lid 2; the consumers release a and b once computed, the storer out once stored. A subclass
    gives the computation between `inputs_landed` and `computed`."""

    pages: int = 3
    release: tuple[int, ...] = (0, 1, 2)

    def refuse(self, fields: dict[str, int]) -> Optional[str]:
        return refuse_elementwise(fields)

    def load(self, ip: Interp, r: Role) -> None:
        expect(ip, r, box_bytes(ip, r, (1, 2)))
        load_operand(ip, r, 1, 0)
        load_operand(ip, r, 2, 1)

    def inputs_landed(self, ip: Interp, r: Role) -> None:
        """Until both inputs landed and the output's page is free."""
        wait(ip.p, ip.loaded.at(r.cons.ring), r.cons.ring.parity)
        r.wait_page(2)

    def computed(self, ip: Interp, r: Role) -> None:
        """The inputs' pages released, the output handed to the storer."""
        consumers_done(ip)
        r.release_page(0, r.cleader)
        r.release_page(1, r.cleader)
        out_ready(ip, r)

    def store(self, ip: Interp, r: Role) -> None:
        store_output(ip, r, 2)


class Binary(TwoInputs):
    """out = a op b (add, mul)."""

    opcode: int = F.BINARY
    name: str = "binary"

    def compute(self, ip: Interp, r: Role) -> None:
        p = ip.p
        self.inputs_landed(ip, r)
        op = r.field("binop", p.r("binop"))
        is_mul = p.p("is_mul")
        p.emit(alu.isetp("EQ", is_mul, op, F.BIN_MUL))
        mul_path, joined = p.fresh_label("MUL"), p.fresh_label("COMPUTED")
        p.emit(control.bra(mul_path).guarded(is_mul))

        def add(x: F32, y: F32) -> None:
            p.emit(alu.fadd(x, x, y))

        def mul(x: F32, y: F32) -> None:
            p.emit(alu.fmul(x, x, y))

        combine_tile(ip, r, 0, 1, 2, add)
        p.emit(control.bra(joined))
        p.label(mul_path)
        combine_tile(ip, r, 0, 1, 2, mul)
        p.label(joined)
        self.computed(ip, r)


_BODIES: dict[int, OpBody] = {}


def bodies(rope: bool = False) -> dict[int, OpBody]:
    """The bodies the sm_90a interpreter has, by opcode (the modules of the other bodies import this
    one, so the table is made on first use). `rope`: with the rope body (`kernels/mega_rope.py`),
    which a launch includes only where its queue has a rope instruction (`Launch.rope`), so that
    the programs of graphs without one keep their text."""
    if not _BODIES:
        from .mega_attention import Attention, AttentionCombine
        from .mega_gemm import Gemm
        from .mega_rmsnorm import RmsNorm
        from .mega_rope import Rope
        from .mega_silu_mul import SiluMul

        made: Sequence[OpBody] = (Noop(), Gemm(), Unary(), Binary(), SiluMul(), RmsNorm(), Attention(),
                                  AttentionCombine(), Rope())
        _BODIES.update({b.opcode: b for b in made})
    return dict(_BODIES) if rope else {k: b for k, b in _BODIES.items() if k != F.ROPE}


__all__ = ["OpBody", "Body", "bodies", "Noop", "Unary", "TwoInputs", "Binary", "Operand", "Tile2", "MapOp", "load_operand",
           "load_boxes", "store_output", "expect", "box_bytes", "descriptor", "consumers_done", "out_ready",
           "page_addr", "combine_tile", "refuse_elementwise"]
