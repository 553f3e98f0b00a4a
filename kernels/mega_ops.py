"""The megakernel interpreter's op bodies (sm_90a), one class each, behind one interface (`OpBody`):
what the loader loads, what the consumers compute, what the storer stores, and the order the body
releases its pages. `kernels/mega_sm90.py` runs them; a new body (15b: gemm with its epilogue, the
skinny-M gemm, silu_mul, rmsnorm) is a class here and one line in `BODIES`.

The contract a body keeps, per instruction (the interpreter's barriers count on it):

- `pages` logical pages (lids 0..pages-1), `release` the order it releases them (a permutation):
  the interpreter renames pages so that the next instruction's lid q is the page released q-th;
  every lid is released exactly once, by whichever role is done with it last (`r.release_page`);
  a lid is written only after `r.wait_page(lid)` (the previous instruction released it);
- `load` (the loader, after the load-stage counter waits): exactly one arrival on
  `ip.loaded[slot]`, with the bytes of every copy it issues (`r.expect(bytes)`), then the copies;
- `compute` (the consumers, 256 threads): wait for `loaded`, compute in shared memory, then
  `r.consumers_done()` (proxy fence + the consumers' named barrier), release what it no longer
  needs and exactly one arrival on `ip.out_ready[slot]` (`r.cleader`);
- `store` (the storer, after the store-stage counter waits): wait for `out_ready`, store, wait for
  the stores' writes (`DEPBAR.LE.WRITES`), release its pages; the interpreter then arrives on the
  instruction's counters;
- `refuse(fields)` (host): why an instruction cannot run on this body, or None.

Element math is bf16 in shared memory, computed in fp32 and rounded once to bf16 (`F2FP`, nearest
even): for add and mul of bf16 values that is the value rounded once from the exact result (fp32
has more than 2 x 8 + 2 bits), which is what `warpy.mega.semantics` computes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional, Protocol

from warpy.isa.families import alu, control, memory, sync, tma
from warpy.isa.families._util import ins
from warpy.isa.operands import RZ, Mem, P, R, RVec
from warpy.isa.pipes import wait
from warpy.isa.units.dispatch import dispatch
from warpy.isa.units.tma import table_entry, tma_load_at, tma_store_at
from warpy.mega import fields as F

if TYPE_CHECKING:
    from .mega_sm90 import Interp, Role


class OpBody(Protocol):
    opcode: int
    name: str
    pages: int
    release: tuple[int, ...]

    def refuse(self, fields: dict[str, int]) -> Optional[str]: ...

    def load(self, ip: Interp, r: Role) -> None: ...

    def compute(self, ip: Interp, r: Role) -> None: ...

    def store(self, ip: Interp, r: Role) -> None: ...


# -- helpers the bodies share ---------------------------------------------------------------------------


def expect(ip: Interp, r: Role, nbytes: Optional[R]) -> None:
    """The loader's one arrival on `loaded[slot]`, expecting `nbytes` (None: no copy)."""
    bar = ip.loaded.at(r.cons.ring)
    if nbytes is None:
        ip.p.derive.emit_at(bar, lambda m: sync.arrive(m), guard=r.leader)
    else:
        ip.p.derive.emit_at(bar, lambda m: sync.arrive_expect_tx(m, nbytes), guard=r.leader)


def box_bytes(ip: Interp, r: Role, ops: tuple[int, ...]) -> R:
    """The bytes one copy of each operand moves, summed."""
    p = ip.p
    total, b = p.r("tx_bytes"), p.r("box_bytes")
    p.emit(alu.mov(total, 0))
    for k in ops:
        r.field(f"op{k}.box_16", b)
        p.emit(alu.imad(total, b, 16, total))
    return total


def descriptor(ip: Interp, r: Role, k: int) -> None:
    """desc = the address of operand k's map in the launch's table, fenced for the tensor-map proxy
    (the host wrote the table: fence.proxy.tensormap::generic.acquire before this thread uses it)."""
    p = ip.p
    d = p.urvec("map_desc", 2)
    table_entry(p, ip.table, r.field(f"op{k}.tmap", p.r("map_index")), d)
    p.emit(tma.tmap_acquire(d))


def _by_rank(ip: Interp, r: Role, k: int, body: Callable[[int, list[R]], None]) -> None:
    """body(rank, coordinates) for the rank of operand k's map (1..4), dispatched at run time."""
    p = ip.p
    rank = r.field(f"op{k}.rank", p.r("map_rank"))
    p.emit(alu.iadd3(rank, rank, -1))
    labels = [p.fresh_label(f"RANK{n}") for n in range(1, F.COORDS + 1)]
    done = p.fresh_label("RANKED")
    dispatch(p, rank, labels, name="rank")
    for n, label in enumerate(labels, 1):
        p.label(label)
        coords = [r.field(f"op{k}.coord{c}", p.r(f"coord{c}")) for c in range(n)]
        body(n, coords)
        p.emit(control.bra(done))
    p.label(done)


def load_operand(ip: Interp, r: Role, k: int, lid: int) -> None:
    """Wait for page `lid`, copy operand k's box into it, completing on `loaded[slot]`."""
    p = ip.p
    r.wait_page(lid)
    descriptor(ip, r, k)
    dst = r.page(lid)
    d = p.urvec("map_desc", 2)
    _by_rank(ip, r, k, lambda n, crd: tma_load_at(p, dst, d, n, crd, ip.loaded.at(r.cons.ring), guard=r.leader))


def store_output(ip: Interp, r: Role, lid: int) -> None:
    """Wait for the consumers, store page `lid` through operand 0's map, wait for the writes,
    release the page."""
    p = ip.p
    wait(p, ip.out_ready.at(r.cons.ring), r.cons.ring.parity)
    descriptor(ip, r, 0)
    src = r.page(lid)
    d = p.urvec("map_desc", 2)
    _by_rank(ip, r, 0, lambda n, crd: tma_store_at(p, src, d, n, crd))
    p.emit(tma.bulk_commit())
    if ip.fault == "early-page-free":  # seeded: the page goes back before the store has read it
        r.release_page(lid)
        p.emit(tma.bulk_wait(0, writes=True))
        return
    p.emit(tma.bulk_wait(0, writes=True))
    r.release_page(lid)


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


# -- the bodies -------------------------------------------------------------------------------------------


class Noop:
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


class Unary:
    """out = act(x): x lands in lid 0 and is computed in place (relu; `none` is a copy: nothing to
    compute), stored from lid 0. silu and gelu wait for the MUFU-based bodies with a tolerance (15b)."""

    opcode: int = F.UNARY
    name: str = "unary"
    pages: int = 1
    release: tuple[int, ...] = (0,)

    def refuse(self, fields: dict[str, int]) -> Optional[str]:
        if fields["activation"] not in (F.ACT_NONE, F.ACT_RELU):
            act = {v: k for k, v in F.ACTIVATIONS.items()}[fields["activation"]]
            return f"unary {act} (the sm_90a interpreter has copy and relu; silu and gelu come with issue 15b)"
        if (fields["op0.row_stride"], fields["op0.col_stride"]) != (fields["op1.row_stride"], fields["op1.col_stride"]):
            return "unary whose input box lands unlike its output box (it is computed in place)"
        if fields["op0.col_stride"] != 1:
            return "an elementwise output whose last dimension is 1 (columns are stored 8 at a time)"
        return None

    def load(self, ip: Interp, r: Role) -> None:
        expect(ip, r, box_bytes(ip, r, (1,)))
        load_operand(ip, r, 1, 0)

    def compute(self, ip: Interp, r: Role) -> None:
        p = ip.p
        wait(p, ip.loaded.at(r.cons.ring), r.cons.ring.parity)
        act = r.field("activation", p.r("act"))
        is_relu = p.p("is_relu")
        p.emit(alu.isetp("EQ", is_relu, act, F.ACT_RELU))
        t = Tile2(ip, r)
        x = Operand(ip, r, 1, 0, "x")

        # (a copy walks the tile with its loads and stores predicated off: ptxas 12.9 crashes on a
        # branch around this loop that joins before the consumers' named barrier)
        def relu(row: R) -> None:
            v = p.rvec("x_v", 4)
            a = x.addr(row, t.col0)
            p.emit(memory.lds(v, Mem(a)).guarded(is_relu))
            m = p.r("neg_mask")
            for q in range(4):
                p.emit(alu.prmt(m, v[q], 0xBB99, v[q]))  # 0xffff in each half whose sign is set
                p.emit(alu.lop3(v[q], v[q], m, RZ, 0x30))  # v & ~m
            p.emit(memory.sts(Mem(a), v).guarded(is_relu))

        t.rows(relu)
        consumers_done(ip)
        out_ready(ip, r)

    def store(self, ip: Interp, r: Role) -> None:
        store_output(ip, r, 0)


class Binary:
    """out = a op b (add, mul) with numpy broadcasting: a in lid 0, b in lid 1, out in lid 2; the
    consumers release a and b once computed, the storer out once stored."""

    opcode: int = F.BINARY
    name: str = "binary"
    pages: int = 3
    release: tuple[int, ...] = (0, 1, 2)

    def refuse(self, fields: dict[str, int]) -> Optional[str]:
        if fields["op0.col_stride"] != 1:
            return "an elementwise output whose last dimension is 1 (columns are stored 8 at a time)"
        return None

    def load(self, ip: Interp, r: Role) -> None:
        expect(ip, r, box_bytes(ip, r, (1, 2)))
        load_operand(ip, r, 1, 0)
        load_operand(ip, r, 2, 1)

    def compute(self, ip: Interp, r: Role) -> None:
        p = ip.p
        wait(p, ip.loaded.at(r.cons.ring), r.cons.ring.parity)
        r.wait_page(2)
        t = Tile2(ip, r)
        a = Operand(ip, r, 1, 0, "a")
        b = Operand(ip, r, 2, 1, "b")
        out = Operand(ip, r, 0, 2, "out")
        op = r.field("binop", p.r("binop"))
        is_mul = p.p("is_mul")
        p.emit(alu.isetp("EQ", is_mul, op, F.BIN_MUL))
        mul_path, joined = p.fresh_label("MUL"), p.fresh_label("COMPUTED")
        p.emit(control.bra(mul_path).guarded(is_mul))
        for name, label in (("add", None), ("mul", mul_path)):
            if label is not None:
                p.label(label)

            def combine(row: R, name: str = name) -> None:
                va, vb = a.load(row, t.col0), b.load(row, t.col0)
                res = p.rvec("res", 4)
                alo, ahi, blo, bhi = p.r("a_lo"), p.r("a_hi"), p.r("b_lo"), p.r("b_hi")
                for q in range(4):
                    _halves(p, va[q], alo, ahi)
                    _halves(p, vb[q], blo, bhi)
                    f = alu.fadd if name == "add" else alu.fmul
                    p.emit(f(alo, alo, blo))
                    p.emit(f(ahi, ahi, bhi))
                    p.emit(alu.f2fp_bf16(res[q], ahi, alo))
                p.emit(memory.sts(Mem(out.addr(row, t.col0)), res))

            t.rows(combine)
            p.emit(control.bra(joined))
        p.label(joined)
        consumers_done(ip)
        r.release_page(0, r.cleader)
        r.release_page(1, r.cleader)
        out_ready(ip, r)

    def store(self, ip: Interp, r: Role) -> None:
        store_output(ip, r, 2)


#: the bodies the sm_90a interpreter has, by opcode (15b adds gemm, silu_mul, rmsnorm here)
BODIES: dict[int, OpBody] = {b.opcode: b for b in (Noop(), Unary(), Binary())}

_ = P  # (a predicate type the bodies' helpers take)

__all__ = ["OpBody", "BODIES", "Noop", "Unary", "Binary", "Operand", "Tile2", "load_operand", "store_output",
           "expect", "box_bytes", "descriptor", "consumers_done", "out_ready"]
