"""Loads and stores: shared (`LDS/STS`), global (`LDG/STG` through a memory descriptor), and the
matrix transposing forms (`LDSM/STSM`). The data operand is a vector as wide as the access."""

from __future__ import annotations

from typing import Union

from warpy.isa.families._util import ins
from warpy.isa.families.base import Opcode, a
from warpy.isa.instr import Instr
from warpy.isa.operands import GMem, Mem, R, RVec

F = "memory"
SIZE = r"U8|S8|U16|S16|64|128"


def _w(mods: tuple[str, ...]) -> int:
    return 4 if "128" in mods else 2 if "64" in mods else 1


def _wm(mods: tuple[str, ...]) -> int:
    return int(mods[-1]) if mods and mods[-1] in ("1", "2", "4") else 1


LDS = Opcode("LDS", F, "load-shared", ((a("d", "Rv", "d", _w), a("addr", "mem")),), mods=(SIZE,),
    ptx="ld.shared", doc="d = shared[addr]")
STS = Opcode("STS", F, "store-shared", ((a("addr", "mem"), a("v", "Rv", "u", _w)),), mods=(SIZE,),
    ptx="st.shared", doc="shared[addr] = v")
LDG = Opcode("LDG", F, "load-global", ((a("d", "Rv", "d", _w), a("addr", "gmem")),), mods=(r"!E", SIZE, r"STRONG", r"GPU"),
    ptx="ld.global / .STRONG.GPU: ld.relaxed.gpu.global", doc="d = global[addr] (STRONG.GPU: a relaxed GPU-scope load)")
STG = Opcode("STG", F, "store-global", ((a("addr", "gmem"), a("v", "Rv", "u", _w)),), mods=(r"!E", SIZE, r"STRONG", r"GPU"),
    ptx="st.global / .STRONG.GPU: st.relaxed.gpu.global", doc="global[addr] = v (STRONG.GPU: a relaxed GPU-scope store)")
REDG = Opcode("REDG", F, "reduce-global", ((a("addr", "gmem"), a("v", "R")),), mods=(r"!E", r"!ADD", r"!STRONG", r"!GPU"),
    ptx="red.relaxed.gpu.global.add.u32", doc="global[addr] += v, atomically at GPU scope (no value returned)")
LDSM = Opcode("LDSM", F, "load-matrix", ((a("d", "Rv", "d", _wm), a("addr", "mem")),),
    mods=(r"!16", r"!M88", r"T", r"!1|2|4"), ptx="ldmatrix.sync.aligned.m8n8.xN[.trans].shared.b16",
    doc="each lane gets its fragment of N 8x8 b16 matrices whose rows the lanes address")
STSM = Opcode("STSM", F, "store-matrix", ((a("addr", "mem"), a("v", "Rv", "u", _wm)),),
    mods=(r"!16", r"!M88", r"T", r"!1|2|4"), ptx="stmatrix.sync.aligned.m8n8.xN[.trans].shared.b16",
    doc="the inverse of LDSM")

OPCODES: list[Opcode] = [
    LDS, STS, LDG, STG, REDG, LDSM, STSM,
]


def _size(width: int) -> str:
    return {1: "", 2: "64", 4: "128"}[width]


def lds(d: Union[R, RVec], addr: Mem) -> Instr:
    return ins(LDS, _size(d.width if isinstance(d, RVec) else 1), d, addr)


def sts(addr: Mem, v: Union[R, RVec]) -> Instr:
    return ins(STS, _size(v.width if isinstance(v, RVec) else 1), addr, v)


def ldg(d: Union[R, RVec], addr: GMem) -> Instr:
    return ins(LDG, ("E." + _size(d.width if isinstance(d, RVec) else 1)).rstrip("."), d, addr)


def stg(addr: GMem, v: Union[R, RVec]) -> Instr:
    return ins(STG, ("E." + _size(v.width if isinstance(v, RVec) else 1)).rstrip("."), addr, v)


def ldg_strong(d: R, addr: GMem) -> Instr:
    """A relaxed GPU-scope load (a flag another CTA raises; order it with MEMBAR.ALL.GPU)."""
    return ins(LDG, "E.STRONG.GPU", d, addr)


def stg_strong(addr: GMem, v: R) -> Instr:
    return ins(STG, "E.STRONG.GPU", addr, v)


def red_add(addr: GMem, v: R) -> Instr:
    """global[addr] += v at GPU scope (relaxed; ptxas prints REDG.E.ADD.STRONG.GPU)."""
    return ins(REDG, "E.ADD.STRONG.GPU", addr, v)


def ldsm(d: RVec, addr: Mem, trans: bool = False) -> Instr:
    return ins(LDSM, f"16.M88{'.T' if trans else ''}.{d.width}", d, addr)


def stsm(addr: Mem, v: RVec, trans: bool = False) -> Instr:
    return ins(STSM, f"16.M88{'.T' if trans else ''}.{v.width}", addr, v)
