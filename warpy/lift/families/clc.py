"""Lift rules of cluster launch control (sm_100a). The try-cancel is single-issue; the queries read
the 16-byte response (four registers, as `LDS.128` loaded it) as one `.b128` value."""

from __future__ import annotations

from warpy.isa.instr import Instr
from warpy.lift.families._ctx import LiftContext, Rule
from warpy.isa.families import clc as isa
from warpy.lift.families._ctx import rule


@rule(isa.UGETNEXTWORKID)
def _try_cancel(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    resp, bar = c.smem_addr(i.ops[0]), c.smem_addr(i.ops[1])
    mc = ".multicast::cluster::all" if "BROADCAST" in rest else ""
    c.issue(f"clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes{mc}.b128 {resp}, {bar}")


def _b128(c: LiftContext, op: object) -> str:
    r = c.elems(op, 4)  # type: ignore[arg-type]
    lo, hi, q = c.tmp("td"), c.tmp("td"), c.tmp("tq")
    c.emit(f"mov.b64 {lo}, {{{r[0]}, {r[1]}}}")
    c.emit(f"mov.b64 {hi}, {{{r[2]}, {r[3]}}}")
    c.emit(f"mov.b128 {q}, {{{lo}, {hi}}}")
    return q


@rule(isa.CLCQUERY)
def _query(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, resp = i.ops
    q = _b128(c, resp)
    if rest[0] == "CANCELED":
        c.emit(f"clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 {c.pred_dst(d)}, {q}")
    else:
        axis = rest[1].lower() if len(rest) > 1 else "x"
        c.emit(f"clusterlaunchcontrol.query_cancel.get_first_ctaid::{axis}.b32.b128 {c.dst(d)}, {q}")
