"""The sm_100a interpreter's op bodies (`kernels/mega_sm100.py`): the interface, the pair's copies,
the elementwise bodies, and the registry `bodies()`.

A body keeps the sm_90a contract (`kernels/mega_ops.py`: pages and their release order, one arrival
on `loaded` with the bytes of its copies, the consumers' `out_ready`, the storer's stores and the
wait for their writes) in each CTA of the pair, on its half of the tile's rows (`Role.field` gives
the CTA's share), and says whether it uses the tensor memory:

- `tmem` False: the launcher hands the token straight on;
- `tmem` True: `launch(ip, r)` runs in CTA 0's launcher once it holds the token (it issues the
  pair's MMAs), and the body's consumers in each CTA return the token once they have read their
  CTA's accumulator (`kernels/mega_sm100_gemm.py`).

The elementwise bodies compute as the sm_90a ones do (their `compute` is `kernels/mega_ops.py`'s,
run on the CTA's rows); their copies are the pair's: a CTA with no rows of the tile (a tile of one
row: CTA 1) waits for its pages and releases them as always, but copies nothing and expects no bytes.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

from warpy.isa.buffers import Barrier, Tile
from warpy.isa.families import alu, control, tma
from warpy.isa.operands import RZ, P, R, UR, URVec
from warpy.isa.pipes import wait
from warpy.isa.units.dispatch import dispatch
from warpy.isa.units.tma import table_entry, tma_load_at, tma_store_at
from warpy.mega import fields as F

from . import mega_ops as ops
from . import mega_rmsnorm as rmsnorm
from . import mega_silu_mul as silu_mul
from .mega_ops import box_bytes, expect


def refuse_pair(fields: dict[str, int]) -> Optional[str]:
    """What the pair cannot split: a tile of an odd number of rows above 1 (each CTA's box is
    ceil(rows / 2) rows, so CTA 1's would reach into the next tile's first row)."""
    tm = fields["tile_m"]
    if tm > 1 and tm % 2:
        return (f"a tile of {tm} rows, which the pair's CTAs cannot split (each CTA's box is {-(-tm // 2)} rows; "
                f"sm_100a tiles take an even number of rows, or one)")
    return None


def copier(ip: Any, r: Any) -> P:
    """The thread that copies for this CTA: the role's leader, where the CTA has rows of the tile."""
    p = ip.p
    rows = r.field("tile_m", p.r("cta_rows"))
    g: P = p.p("cta_copies")
    p.emit(alu.isetp("NE", g, rows, 0, c=r.leader))
    return g


def cta_bytes(ip: Any, r: Any, ops_: tuple[int, ...], guard: P) -> R:
    """The bytes one copy of each operand moves, summed; 0 where this CTA copies nothing."""
    total = box_bytes(ip, r, ops_)
    ip.p.emit(alu.mov(total, 0).guarded(~guard))
    return total


def descriptor(ip: Any, r: Any, k: int) -> URVec:
    """The address of operand k's map in the launch's table, fenced for the tensor-map proxy (the
    host wrote the table)."""
    p = ip.p
    d: URVec = p.urvec("map_desc", 2)
    table_entry(p, ip.table, r.field(f"op{k}.tmap", p.r("map_index")), d)
    p.emit(tma.tmap_acquire(d))
    return d


def copy(ip: Any, r: Any, k: int, tile: Tile, bar: Optional[Barrier], guard: P) -> None:
    """Operand k's box at this CTA's origin: loaded into `tile` completing on `bar`, or (bar None)
    stored from `tile`; the map's rank (1..4) dispatched at run time."""
    p = ip.p
    d = descriptor(ip, r, k)
    rank = r.field(f"op{k}.rank", p.r("map_rank"))
    p.emit(alu.iadd3(rank, rank, -1))
    labels = [p.fresh_label(f"RANK{n}") for n in range(1, F.COORDS + 1)]
    done = p.fresh_label("RANKED")
    dispatch(p, rank, labels, name="map_rank")
    for n, label in enumerate(labels, 1):
        p.label(label)
        coords = [r.field(f"op{k}.coord{c}", p.r(f"coord{c}")) for c in range(n)]
        if bar is not None:
            tma_load_at(p, tile, d, n, coords, bar, guard=guard)
        else:
            tma_store_at(p, tile, d, n, coords, guard=guard)
        p.emit(control.bra(done))
    p.label(done)


def load_operand(ip: Any, r: Any, k: int, lid: int, guard: P) -> None:
    """Wait for page `lid` (always: its release by this instruction is ordered after the previous
    one's), then copy operand k's box into it, completing on `loaded[slot]`."""
    r.wait_page(lid)
    copy(ip, r, k, r.page(lid), ip.loaded.at(r.cons.ring), guard)


def store_output(ip: Any, r: Any, lid: int, guard: P) -> None:
    """Wait for the consumers, store page `lid` through operand 0's map, wait for the writes,
    release the page (the seeded fault `early-page-free`: released before the store read it)."""
    p = ip.p
    wait(p, ip.out_ready.at(r.cons.ring), r.cons.ring.parity)
    copy(ip, r, 0, r.page(lid), None, guard)
    p.emit(tma.bulk_commit())
    if ip.fault == "early-page-free":
        r.release_page(lid)
        p.emit(tma.bulk_wait(0, writes=True))
        return
    p.emit(tma.bulk_wait(0, writes=True))
    r.release_page(lid)


class Noop(ops.Noop):
    tmem = False


class Unary(ops.Unary):
    """out = act(x) on the CTA's rows (`kernels.mega_ops.Unary`'s computation)."""

    tmem = False

    def refuse(self, fields: dict[str, int]) -> Optional[str]:
        return super().refuse(fields) or refuse_pair(fields)

    def load(self, ip: Any, r: Any) -> None:
        g = copier(ip, r)
        expect(ip, r, cta_bytes(ip, r, (1,), g))
        load_operand(ip, r, 1, 0, g)

    def store(self, ip: Any, r: Any) -> None:
        store_output(ip, r, 0, copier(ip, r))


class Binary(ops.Binary):
    """out = a op b on the CTA's rows (`kernels.mega_ops.Binary`'s computation)."""

    tmem = False

    def refuse(self, fields: dict[str, int]) -> Optional[str]:
        return super().refuse(fields) or refuse_pair(fields)

    def load(self, ip: Any, r: Any) -> None:
        g = copier(ip, r)
        expect(ip, r, cta_bytes(ip, r, (1, 2), g))
        load_operand(ip, r, 1, 0, g)
        load_operand(ip, r, 2, 1, g)

    def store(self, ip: Any, r: Any) -> None:
        store_output(ip, r, 2, copier(ip, r))


class SiluMul(silu_mul.SiluMul):
    """out = silu(gate) · up on the CTA's rows (`kernels.mega_silu_mul.SiluMul`'s computation), the
    binary body's copies."""

    tmem = False

    def refuse(self, fields: dict[str, int]) -> Optional[str]:
        return super().refuse(fields) or refuse_pair(fields)

    def load(self, ip: Any, r: Any) -> None:
        Binary.load(self, ip, r)  # type: ignore[arg-type]

    def store(self, ip: Any, r: Any) -> None:
        Binary.store(self, ip, r)  # type: ignore[arg-type]


def boxes(ip: Any, r: Any, m: ops.MapOp, lid: int, count: R, step: UR, bar: Optional[Barrier], guard: P) -> None:
    """`count` boxes of operand m from or into page `lid` (`kernels.mega_ops.load_boxes`' walk: box b
    at b x its bytes, its origin b x `step` along the innermost dimension), loads completing on `bar`
    (None: stores), issued by `guard` (this CTA's copier)."""
    p = ip.p
    base = ops.page_addr(ip, r, lid, f"{m.name}_page")
    at, shift = p.ur(f"{m.name}_at"), p.ur(f"{m.name}_shift")
    p.emit(alu.umov(at, base))
    p.emit(alu.umov(shift, 0))
    with p.loop(f"{m.name}_box", count, max_count=rmsnorm.MAX_BOXES):
        m.copy(at, bar, shift, guard=guard)
        p.emit(alu.uiadd3(at, at, m.bytes))
        p.emit(alu.uiadd3(shift, shift, step))


class RmsNorm(rmsnorm.RmsNorm):
    """Whole rows normalised (`kernels.mega_rmsnorm.RmsNorm`'s computation) on the CTA's rows: the
    pair splits a tile's rows (a one-row tile is CTA 0's; CTA 1 copies, computes and stores nothing
    and expects no bytes)."""

    tmem = False

    def refuse(self, fields: dict[str, int]) -> Optional[str]:
        # the host's boxes hold a CTA's share of the rows: the sm_90a checks on CTA 0's share
        half = dict(fields, tile_m=-(-fields["tile_m"] // 2))
        return refuse_pair(fields) or super().refuse(half)

    def row_boxes(self, ip: Any, r: Any) -> tuple[R, UR]:
        p = ip.p
        nbox = r.field("k_stages", p.r("rn_nbox"))
        step = p.ur("rn_step")
        p.emit(alu.r2ur(step, r.field("k_step", p.r("rn_cols"))))
        return nbox, step

    def load(self, ip: Any, r: Any) -> None:
        """The row boxes of x, then of the weight row; the bytes summed from the slot's fields first,
        and one operand's map held at a time (the producer warps' registers: two maps' uniform
        registers at once spilled in ptxas)."""
        p = ip.p
        g = copier(ip, r)
        nbox, step = self.row_boxes(ip, r)
        total = cta_bytes(ip, r, (1, 2), g)  # one box of each, 0 where this CTA copies nothing
        p.emit(alu.imad(total, total, nbox, RZ))
        r.wait_page(0)
        r.wait_page(1)
        expect(ip, r, total)
        bar = ip.loaded.at(r.cons.ring)
        boxes(ip, r, ops.MapOp(ip, r, 1, "rnx"), 0, nbox, step, bar, g)
        nbox, step = self.row_boxes(ip, r)
        boxes(ip, r, ops.MapOp(ip, r, 2, "rnw"), 1, nbox, step, bar, g)

    def store(self, ip: Any, r: Any) -> None:
        p = ip.p
        g = copier(ip, r)
        nbox, step = self.row_boxes(ip, r)
        wait(p, ip.out_ready.at(r.cons.ring), r.cons.ring.parity)
        boxes(ip, r, ops.MapOp(ip, r, 0, "rno"), 0, nbox, step, None, g)
        p.emit(tma.bulk_commit())
        if ip.fault == "early-page-free":
            r.release_page(0)
            p.emit(tma.bulk_wait(0, writes=True))
            return
        p.emit(tma.bulk_wait(0, writes=True))
        r.release_page(0)


@functools.cache
def bodies() -> dict[int, Any]:
    """The bodies the sm_100a interpreter has, by opcode (made on first use: the gemm body's module
    imports this one)."""
    from .mega_sm100_gemm import Gemm

    made = (Noop(), Gemm(), Unary(), Binary(), SiluMul(), RmsNorm())
    return {b.opcode: b for b in made}

__all__ = ["bodies", "Noop", "Unary", "Binary", "SiluMul", "RmsNorm", "boxes", "refuse_pair", "copier", "cta_bytes", "copy", "load_operand",
           "store_output", "descriptor"]
