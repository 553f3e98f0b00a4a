"""The tensor memory accelerator: tensor copies through a tensor map, bulk copies, and their
completion.

The first operand of a tensor copy is a tuple of consecutive uniform registers (a `URVec`):
loads `[dst, bar, c0, c1, ...]` (shared destination, mbarrier, coordinates, innermost first),
stores and reductions `[src, c0, c1, ...]`. A multicast load takes the CTA mask as a third
operand (a uniform register). The tensor map is named, `tmap[a]`, or held as the address of its
descriptor in a uniform register pair, `tmap[desc]`: a slot of a table of maps in global memory
(`.tmap NAME table=T slot=K`), chosen at run time. Before a thread first uses a descriptor the
host wrote to global memory it fences the tensor-map proxy (`UTMACCTL.IV tmap[desc]`).
"""

from __future__ import annotations

from warpy.isa.families._util import ins
from warpy.isa.families.base import Opcode, a
from warpy.isa.instr import Instr
from typing import Union

from warpy.isa.operands import Kw, Mem, TmapRef, UR, URVec

F = "tma"
DIM = r"!1D|2D|3D|4D|5D"

UTMALDG = Opcode("UTMALDG", F, "tma-load", ((a("args", "mem"), a("map", "tmap")), (a("args", "mem"), a("map", "tmap"), a("mask", "UR"))),
    mods=(DIM, r"MULTICAST", r"2CTA"), single_issue=True,
    ptx="cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes[.multicast::cluster][.cta_group::2]",
    doc="copy the box at (c0, c1, ...) into shared memory at dst (in every CTA of mask), completing bytes on bar")
UTMASTG = Opcode("UTMASTG", F, "tma-store", ((a("args", "mem"), a("map", "tmap")),), mods=(DIM,), single_issue=True,
    ptx="cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group",
    doc="copy the box from shared memory at src to the tensor at (c0, c1, ...)", bulk_group=True)
UTMAREDG = Opcode("UTMAREDG", F, "tma-reduce", ((a("args", "mem"), a("map", "tmap")),), mods=(DIM, r"!ADD|MIN|MAX|INC|DEC|AND|OR|XOR"),
    single_issue=True, ptx="cp.reduce.async.bulk.tensor.Nd.global.shared::cta.op.tile.bulk_group",
    doc="reduce the box from shared memory into the tensor", bulk_group=True)
UTMAPF = Opcode("UTMAPF", F, "tma-prefetch", ((a("args", "mem"), a("map", "tmap")),), mods=(r"!L2", DIM), single_issue=True,
    ptx="cp.async.bulk.prefetch.tensor.Nd.L2.global.tile", doc="prefetch the box into L2 (args: [c0, c1, ...])")
UTMACCTL = Opcode("UTMACCTL", F, "tma-prefetch", ((a("map", "tmap"),),), mods=(r"!PF|IV",), single_issue=True,
    ptx="prefetch.tensormap; .IV: fence.proxy.tensormap::generic.acquire.sys [map], 128",
    doc="fetch the tensor map's descriptor into the copy engine's cache; .IV: order the generic-proxy writes of a "
        "descriptor in global memory (the host's table of maps) before this thread's tensor-map-proxy reads of it "
        "(drops the cached copy; every lane of the warp fences; ptxas emits DEPBAR {5,4,3,2,1,0} before it)")
UBLKCP = Opcode("UBLKCP", F, "bulk-copy", ((a("args", "mem"), a("src", "mem"), a("size", "UR")),), mods=(r"!S|G", r"!S|G"),
    single_issue=True, ptx="cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src], size, [bar]; "
    ".S.S: cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes; .G.S: cp.async.bulk.global.shared::cta.bulk_group",
    doc="copy size bytes from global src (a uniform pair) to shared: args = (dst, bar), completing on bar (.S.G); .S.S: "
        "from this CTA's shared src to a CTA of the cluster (dst, bar: shared::cluster addresses, mapa); .G.S: back",
    bulk_group=True)
UTMACMDFLUSH = Opcode("UTMACMDFLUSH", F, "bulk-commit", ((),), single_issue=True, ptx="cp.async.bulk.commit_group",
    doc="close the group of bulk stores issued so far", bulk_group=True)
DEPBAR = Opcode("DEPBAR", F, "bulk-wait", ((a("sb", "kw:SB0"), a("n", "I")),), mods=(r"!LE", r"WRITES"),
    ptx="cp.async.bulk.wait_group.read n; .WRITES: cp.async.bulk.wait_group n",
    doc="wait until at most n bulk groups are outstanding: their reads of shared memory are done; .WRITES: their "
        "writes too, visible to this thread (ptxas emits DEPBAR.LE SB0 then CCTL.IVALL; warpy's modifier)",
    spelling=lambda w: w[:2])
OPCODES: list[Opcode] = [
    UTMALDG, UTMASTG, UTMAREDG, UTMAPF, UTMACCTL, UBLKCP, UTMACMDFLUSH, DEPBAR,
]

#: a tensor map operand: a `.tmap` name, or a uniform register pair holding a descriptor's address
MapOperand = Union[str, URVec]


def _map(tmap: MapOperand) -> TmapRef:
    return TmapRef(tmap) if isinstance(tmap, str) else TmapRef(reg=tmap)


def _dim(args: Mem, first: int) -> str:
    from warpy.isa.operands import URVec

    if not isinstance(args.base, URVec):
        raise TypeError("the TMA argument tuple must be a uniform-register vector")
    return f"{args.base.width - first}D"


def tma_load(args: Mem, tmap: MapOperand, mask: UR | None = None, two_cta: bool = False) -> Instr:
    mods = _dim(args, 2) + (".MULTICAST" if mask is not None else "") + (".2CTA" if two_cta else "")
    if mask is not None:
        return ins(UTMALDG, mods, args, _map(tmap), mask)
    return ins(UTMALDG, mods, args, _map(tmap))


def tma_store(args: Mem, tmap: MapOperand) -> Instr:
    return ins(UTMASTG, _dim(args, 1), args, _map(tmap))


def tma_reduce_add(args: Mem, tmap: str) -> Instr:
    return ins(UTMAREDG, _dim(args, 1) + ".ADD", args, TmapRef(tmap))


def bulk_commit() -> Instr:
    return ins(UTMACMDFLUSH, "")


def bulk_wait(n: int = 0, writes: bool = False) -> Instr:
    """Wait until at most n bulk groups are outstanding (their reads of shared memory done); with
    `writes`, their writes to global memory done and visible to this thread too (before a release
    that hands them to another CTA)."""
    return ins(DEPBAR, "LE.WRITES" if writes else "LE", Kw("SB0"), n)


def tmap_acquire(tmap: MapOperand) -> Instr:
    """fence.proxy.tensormap::generic.acquire.sys on a descriptor the host wrote to global memory:
    what a thread does before its first copy through it (ptxas: UTMACCTL.IV [UR])."""
    return ins(UTMACCTL, "IV", _map(tmap))


def tmap_prefetch(tmap: str) -> Instr:
    """Fetch a tensor map's descriptor ahead of its first copy (ptxas: UTMACCTL.PF [UR])."""
    return ins(UTMACCTL, "PF", TmapRef(tmap))


def tma_prefetch(args: Mem, tmap: MapOperand) -> Instr:
    """Prefetch a box into L2 (args: the coordinates)."""
    return ins(UTMAPF, "L2." + _dim(args, 0), args, _map(tmap))


def bulk_copy_s_g(args: Mem, src: Mem, size: UR) -> Instr:
    """Copy size bytes from global (src: a uniform pair holding the address) to shared:
    args = (dst, bar) consecutive uniform registers, completing size bytes on bar."""
    return ins(UBLKCP, "S.G", args, src, size)


def bulk_copy_s_s(args: Mem, src: Mem, size: UR) -> Instr:
    """Copy size bytes from this CTA's shared memory (src: a shared::cta address) to a CTA of the
    cluster: args = (dst, bar) consecutive uniform registers holding shared::cluster addresses
    (mapa), completing size bytes on bar in the destination CTA."""
    return ins(UBLKCP, "S.S", args, src, size)
