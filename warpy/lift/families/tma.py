"""Lift rules of the TMA family. Tensor copies, bulk copies and the bulk commit are single-issue:
the driver runs their issuing line on the elected lane (`@%pe`). Bulk async-groups belong to the
thread that issued them, so the wait (`DEPBAR.LE SB0`, a warp-wide scoreboard wait in SASS) is
lifted as the elected lane's `cp.async.bulk.wait_group.read` (`.WRITES`: `cp.async.bulk.wait_group`,
the groups' global writes too) followed by a warp barrier that keeps the other lanes until it
returns. The tensor map operand is the generic address of the `__grid_constant__` parameter
(`cvta.param`), set once at entry; a map in a table in global memory is the generic address of
its descriptor: the register pair of `tmap[desc]`, or for a slot named `tmap[m]` the table's
address (`ld.param`) + 128 x slot."""

from __future__ import annotations

from warpy.isa.instr import Instr
from warpy.isa.operands import Imm, Operand, TmapRef
from warpy.lift.families._ctx import LiftContext, Rule, ident
from warpy.isa.families import tma as isa
from warpy.lift.families._ctx import rule


def _map_addr(c: LiftContext, op: Operand) -> str:
    """The generic address of a tensor map operand's descriptor (a .b64 register)."""
    assert isinstance(op, TmapRef)
    if op.reg is not None:
        return c.wide(op.reg)
    decl = next((t for t in c.header.tmaps if t.name == op.name), None)
    if decl is None or decl.table is None or decl.slot is None:
        return c.tmap(op.name)
    t = c.tmp("td")
    c.emit(f"ld.param.u64 {t}, [{ident(decl.table)}]")
    c.emit(f"add.s64 {t}, {t}, {128 * decl.slot}")
    return t


def _dims(rest: tuple[str, ...]) -> int:
    for m in rest:
        if m.endswith("D") and m[:-1].isdigit():
            return int(m[:-1])
    raise AssertionError(rest)


def _mask16(c: LiftContext, op: object) -> str:
    h = c.tmp("th")
    c.emit(f"cvt.u16.u32 {h}, {c.src(op)}")  # type: ignore[arg-type]
    return h


@rule(isa.UTMALDG)
def _load(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    n = _dims(rest)
    args, tm = i.ops[0], i.ops[1]
    regs = c.args(args, 2 + n)
    dst, bar, crd = regs[0], regs[1], regs[2:]
    mods = ""
    tail = ""
    if "MULTICAST" in rest:
        mods += ".multicast::cluster"
        tail = f", {_mask16(c, i.ops[2])}"
    if "2CTA" in rest:
        mods += ".cta_group::2"
    c.issue(f"cp.async.bulk.tensor.{n}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes{mods} "
            f"[{dst}], [{_map_addr(c, tm)}, {{{', '.join(crd)}}}], [{bar}]{tail}")


@rule(isa.UTMASTG, isa.UTMAREDG)
def _store(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    n = _dims(rest)
    args, tm = i.ops
    regs = c.args(args, 1 + n)
    op = [m for m in rest if m in ("ADD", "MIN", "MAX", "INC", "DEC", "AND", "OR", "XOR")]
    head = f"cp.reduce.async.bulk.tensor.{n}d.global.shared::cta.{op[0].lower()}" if op else f"cp.async.bulk.tensor.{n}d.global.shared::cta"
    c.issue(f"{head}.tile.bulk_group [{_map_addr(c, tm)}, {{{', '.join(regs[1:])}}}], [{regs[0]}]")


@rule(isa.UTMAPF)
def _prefetch(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    n = _dims(rest)
    args, tm = i.ops
    regs = c.args(args, n)
    c.issue(f"cp.async.bulk.prefetch.tensor.{n}d.L2.global.tile [{_map_addr(c, tm)}, {{{', '.join(regs)}}}]")


@rule(isa.UTMACCTL)
def _tmap_prefetch(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    if "IV" in rest:  # the acquire fence: on every lane, so whichever lane issues the copies has fenced
        c.emit(f"fence.proxy.tensormap::generic.acquire.sys [{_map_addr(c, i.ops[0])}], 128")
        return
    c.issue(f"prefetch.tensormap [{_map_addr(c, i.ops[0])}]")


@rule(isa.UBLKCP)
def _bulk_copy(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    # UBLKCP.S.G [dst, bar], [src.lo, src.hi], size: global -> shared, completing on bar;
    # UBLKCP.S.S [dst, bar], [src], size: this CTA's shared -> a CTA of the cluster (dst, bar: mapa'd);
    # UBLKCP.G.S [dst.lo, dst.hi], [src], size: shared -> global (a bulk group).
    dst, src, size = i.ops
    if rest[:2] == ("S", "G"):
        d, bar = c.args(dst, 2)
        g = c.wide(_pair(c, src))
        c.issue(f"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{g}], {c.src(size)}, [{bar}]")
    elif rest[:2] == ("S", "S"):
        d, bar = c.args(dst, 2)
        c.issue(f"cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [{d}], {c.smem_addr(src)}, "
                f"{c.src(size)}, [{bar}]")
    elif rest[:2] == ("G", "S"):
        g = c.wide(_pair(c, dst))
        c.issue(f"cp.async.bulk.global.shared::cta.bulk_group [{g}], {c.smem_addr(src)}, {c.src(size)}")
    else:
        raise c.error("UBLKCP copies .S.G (global to shared), .S.S (shared to a CTA of the cluster) or .G.S "
                      "(shared to global)")


def _pair(c: LiftContext, m: object):  # type: ignore[no-untyped-def]
    from warpy.isa.operands import Mem

    if not isinstance(m, Mem) or m.base is None or m.offset or m.ubase is not None:
        raise c.error(f"a bulk copy's global address is [pair], not {m}")
    return m.base


@rule(isa.UTMACMDFLUSH)
def _commit(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    c.issue("cp.async.bulk.commit_group")


@rule(isa.DEPBAR)
def _wait(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    n = i.ops[1]
    assert isinstance(n, Imm)
    c.issue(f"cp.async.bulk.wait_group{'' if 'WRITES' in rest else '.read'} {n.value}")
    m = c.tmp()
    c.emit(f"activemask.b32 {m}")
    c.emit(f"bar.warp.sync {m}")
