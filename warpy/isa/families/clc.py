"""Cluster launch control (sm_100a): cancel a not-yet-launched cluster and take its tile.

`UGETNEXTWORKID.BROADCAST [resp], [bar]` (multicast to every CTA of the cluster) or `.SELFCAST`
writes a 16-byte response to shared [resp] and completes 16 transaction bytes on [bar]. Reading
the response (`clusterlaunchcontrol.query_cancel`) is ordinary ALU work in SASS; the text carries
it as `CLCQUERY.CANCELED p, resp` and `CLCQUERY.CTAID.X d, resp` (resp: the response loaded into
a vector of 4 registers by `LDS.128`), which have no SASS of their own.
"""

from __future__ import annotations

from warpy.isa.families._util import ins
from warpy.isa.families.base import Opcode, a
from warpy.isa.instr import Instr
from warpy.isa.operands import Mem, P, R, RVec

F = "clc"
B100 = frozenset({"sm_100a"})
W4 = lambda mods: 4  # noqa: E731

UGETNEXTWORKID = Opcode("UGETNEXTWORKID", F, "clc-try-cancel", ((a("resp", "mem"), a("bar", "mem")),), mods=(r"!BROADCAST|SELFCAST",),
    single_issue=True, archs=B100,
    ptx="clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes[.multicast::cluster::all].b128 [resp], [bar]",
    doc="ask to cancel a cluster not yet launched; the answer lands at resp, completing 16 bytes on bar")
CLCQUERY = Opcode("CLCQUERY", F, "clc-query", ((a("p", "P", "d"), a("resp", "Rv", "u", W4)), (a("d", "R", "d"), a("resp", "Rv", "u", W4))),
    mods=(r"!CANCELED|CTAID", r"X|Y|Z"), archs=B100, ptxas_emits=False,
    ptx="clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 / .get_first_ctaid::x.b32.b128",
    doc="CANCELED: p = a cluster was cancelled; CTAID.X: d = its first CTA's x index")

OPCODES: list[Opcode] = [
    UGETNEXTWORKID, CLCQUERY,
]


def try_cancel(resp: Mem, bar: Mem, multicast: bool = True) -> Instr:
    return ins(UGETNEXTWORKID, "BROADCAST" if multicast else "SELFCAST", resp, bar)


def query_canceled(p: P, resp: RVec) -> Instr:
    return ins(CLCQUERY, "CANCELED", p, resp)


def query_ctaid_x(d: R, resp: RVec) -> Instr:
    return ins(CLCQUERY, "CTAID.X", d, resp)
