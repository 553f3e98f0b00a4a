"""Lift rules of the TMA family. Tensor copies, bulk copies and the bulk commit are single-issue:
the driver runs their issuing line on the elected lane (`@%pe`). Bulk async-groups belong to the
thread that issued them, so the wait (`DEPBAR.LE SB0`, a warp-wide scoreboard wait in SASS) is
lifted as the elected lane's `cp.async.bulk.wait_group.read` followed by a warp barrier that keeps
the other lanes until it returns. The tensor map operand is the generic address of the
`__grid_constant__` parameter (`cvta.param`), set once at entry."""

from __future__ import annotations

from warpy.isa.instr import Instr
from warpy.isa.operands import Imm, TmapRef
from warpy.lift.families._ctx import LiftContext, Rule
from warpy.isa.families import tma as isa
from warpy.lift.families._ctx import rule


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
    assert isinstance(tm, TmapRef)
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
            f"[{dst}], [{c.tmap(tm.name)}, {{{', '.join(crd)}}}], [{bar}]{tail}")


@rule(isa.UTMASTG, isa.UTMAREDG)
def _store(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    n = _dims(rest)
    args, tm = i.ops
    assert isinstance(tm, TmapRef)
    regs = c.args(args, 1 + n)
    op = [m for m in rest if m in ("ADD", "MIN", "MAX", "INC", "DEC", "AND", "OR", "XOR")]
    head = f"cp.reduce.async.bulk.tensor.{n}d.global.shared::cta.{op[0].lower()}" if op else f"cp.async.bulk.tensor.{n}d.global.shared::cta"
    c.issue(f"{head}.tile.bulk_group [{c.tmap(tm.name)}, {{{', '.join(regs[1:])}}}], [{regs[0]}]")


@rule(isa.UTMAPF)
def _prefetch(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    n = _dims(rest)
    args, tm = i.ops
    assert isinstance(tm, TmapRef)
    regs = c.args(args, n)
    c.issue(f"cp.async.bulk.prefetch.tensor.{n}d.L2.global.tile [{c.tmap(tm.name)}, {{{', '.join(regs)}}}]")


@rule(isa.UTMACCTL)
def _tmap_prefetch(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    tm = i.ops[0]
    assert isinstance(tm, TmapRef)
    c.issue(f"prefetch.tensormap [{c.tmap(tm.name)}]")


@rule(isa.UBLKCP)
def _bulk_copy(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    # UBLKCP.S.G [dst, bar], [src.lo, src.hi], size: global -> shared, completing on bar;
    # UBLKCP.G.S [dst.lo, dst.hi], [src], size: shared -> global (a bulk group).
    dst, src, size = i.ops
    if rest[:2] == ("S", "G"):
        d, bar = c.args(dst, 2)
        g = c.wide(_pair(c, src))
        c.issue(f"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{d}], [{g}], {c.src(size)}, [{bar}]")
    elif rest[:2] == ("G", "S"):
        g = c.wide(_pair(c, dst))
        c.issue(f"cp.async.bulk.global.shared::cta.bulk_group [{g}], {c.smem_addr(src)}, {c.src(size)}")
    else:
        raise c.error("UBLKCP copies .S.G (global to shared) or .G.S (shared to global)")


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
    c.issue(f"cp.async.bulk.wait_group.read {n.value}")
    m = c.tmp()
    c.emit(f"activemask.b32 {m}")
    c.emit(f"bar.warp.sync {m}")
