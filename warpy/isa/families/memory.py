"""Loads and stores: shared (`LDS/STS`), global (`LDG/STG` through a memory descriptor), and the
matrix transposing forms (`LDSM/STSM`). The data operand is a vector as wide as the access."""

from __future__ import annotations

from typing import Union

from warpy.errors import WarpyError
from warpy.isa.families._util import ins
from warpy.isa.families.base import Opcode, a
from warpy.isa.families.typed import F32, S32, U32, Typed, what
from warpy.isa.instr import Instr
from warpy.isa.operands import PT, GMem, Mem, R, RVec

F = "memory"
SIZE = r"U8|S8|U16|S16|64|128"
EVICT = r"EF|EL|EU|NA|LU"
L2_PREFETCH = r"LTC64B|LTC128B|LTC256B"


def _w(mods: tuple[str, ...]) -> int:
    return 4 if "128" in mods else 2 if "64" in mods else 1


def _wm(mods: tuple[str, ...]) -> int:
    return int(mods[-1]) if mods and mods[-1] in ("1", "2", "4") else 1


LDS = Opcode("LDS", F, "load-shared", ((a("d", "Rv", "d", _w), a("addr", "mem")),), mods=(SIZE,),
    ptx="ld.shared", doc="d = shared[addr]")
STS = Opcode("STS", F, "store-shared", ((a("addr", "mem"), a("v", "Rv", "u", _w)),), mods=(SIZE,),
    ptx="st.shared", doc="shared[addr] = v")
LDG = Opcode("LDG", F, "load-global", ((a("d", "Rv", "d", _w), a("addr", "gmem")),),
    mods=(r"!E", EVICT, L2_PREFETCH, SIZE, r"CONSTANT", r"STRONG", r"GPU"),
    ptx="ld.global{.nc}{.L1::evict_*|no_allocate}{.lu}{.L2::NB} / .STRONG.GPU: ld.relaxed.gpu.global",
    doc="d = global[addr] (STRONG.GPU: a relaxed GPU-scope load; cache hints: docs/sass.md)")
STG = Opcode("STG", F, "store-global", ((a("addr", "gmem"), a("v", "Rv", "u", _w)),), mods=(r"!E", SIZE, r"STRONG", r"GPU"),
    ptx="st.global / .STRONG.GPU: st.relaxed.gpu.global", doc="global[addr] = v (STRONG.GPU: a relaxed GPU-scope store)")
REDG = Opcode("REDG", F, "reduce-global", ((a("addr", "gmem"), a("v", "R")),),
    mods=(r"!E", r"!ADD|MIN|MAX", r"S32|F32", r"FTZ", r"RN", r"!STRONG", r"!GPU"),
    ptx="red.relaxed.gpu.global.add/min/max.u32/.s32, add.f32",
    doc="global[addr] = op(global[addr], v), atomically at GPU scope, no value returned (u32 unless .S32; "
        ".F32.FTZ.RN: an fp32 add)")
ATOMG = Opcode("ATOMG", F, "atomic-global", (
    (a("p", "P", "d"), a("d", "R", "d"), a("addr", "gmem|mem"), a("v", "R")),
    (a("p", "P", "d"), a("d", "R", "d"), a("addr", "gmem|mem"), a("cmp", "R"), a("new", "R")),
), mods=(r"!E", r"!ADD|MIN|MAX|EXCH|CAS", r"S32|F32", r"FTZ", r"RN", r"!STRONG", r"!GPU"),
    ptx="atom.relaxed.gpu.global.add/min/max.u32/.s32, add.f32, exch.b32, cas.b32",
    doc="d = global[addr], which becomes op(d, v) atomically at GPU scope (CAS: new where d == cmp); "
        "p is PT. Acquire/release: CCTL.IVALL after, MEMBAR.ALL.GPU before (docs/sass.md)")
def _mt88(words: tuple[str, ...]) -> tuple[str, ...]:
    """nvdisasm spells the transposing forms `LDSM.16.MT88.4` / `STSM.16.MT88.4` (the text: `.M88.T`)."""
    if "T" not in words:
        return words
    return tuple("MT88" if x == "M88" else x for x in words if x != "T")


LDSM = Opcode("LDSM", F, "load-matrix", ((a("d", "Rv", "d", _wm), a("addr", "mem")),),
    mods=(r"!16", r"!M88", r"T", r"!1|2|4"), ptx="ldmatrix.sync.aligned.m8n8.xN[.trans].shared.b16",
    doc="each lane gets its fragment of N 8x8 b16 matrices whose rows the lanes address", spelling=_mt88)
STSM = Opcode("STSM", F, "store-matrix", ((a("addr", "mem"), a("v", "Rv", "u", _wm)),),
    mods=(r"!16", r"!M88", r"T", r"!1|2|4"), ptx="stmatrix.sync.aligned.m8n8.xN[.trans].shared.b16",
    doc="the inverse of LDSM", spelling=_mt88)

OPCODES: list[Opcode] = [
    LDS, STS, LDG, STG, REDG, ATOMG, LDSM, STSM,
]


def _size(width: int) -> str:
    return {1: "", 2: "64", 4: "128"}[width]


def lds(d: Union[R, RVec], addr: Mem) -> Instr:
    return ins(LDS, _size(d.width if isinstance(d, RVec) else 1), d, addr)


def sts(addr: Mem, v: Union[R, RVec]) -> Instr:
    return ins(STS, _size(v.width if isinstance(v, RVec) else 1), addr, v)


#: LDG's cache hints: the PTX qualifier each stands for (nvdisasm's modifier -> PTX)
LDG_HINTS = {
    "CONSTANT": ".nc",  # the read-only (non-coherent) path: memory no thread of the launch writes
    "EF": ".L1::evict_first", "EL": ".L1::evict_last", "EU": ".L1::evict_unchanged", "NA": ".L1::no_allocate",
    "LU": ".lu",  # last use: the line may be dropped after this read
    "LTC64B": ".L2::64B", "LTC128B": ".L2::128B", "LTC256B": ".L2::256B",  # L2 prefetch size
}


def ldg(d: Union[R, RVec], addr: GMem, *hints: str) -> Instr:
    """d = global[addr], 4, 8 or 16 bytes (a register, or a vector of 2 or 4). `hints`: cache hints of
    LDG_HINTS (at most one of EF/EL/EU/NA/LU, one L2 prefetch size, CONSTANT)."""
    for h in hints:
        if h not in LDG_HINTS:
            raise WarpyError(f"LDG: cache hint {h!r} is not one of {', '.join(LDG_HINTS)}")
    width = d.width if isinstance(d, RVec) else 1
    if width not in (1, 2, 4):
        raise WarpyError(f"LDG: a vector of {width} registers; a global load moves 1, 2 or 4 (4, 8 or 16 bytes)")
    order = ["E"] + [h for h in hints if h in ("EF", "EL", "EU", "NA", "LU")] + [h for h in hints if h.startswith("LTC")]
    order += [_size(width)] + [h for h in hints if h == "CONSTANT"]
    return ins(LDG, ".".join(m for m in order if m), d, addr)


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


ATOM_OPS = ("ADD", "MIN", "MAX", "EXCH")


def _atom_type(where: str, op: str, v: R, signed: bool) -> str:
    if isinstance(v, F32):
        if op != "ADD":
            raise WarpyError(f"{where}.{op}: fp32 operands have only ADD")
        return "F32.FTZ.RN"
    if isinstance(v, Typed) and not isinstance(v, (S32, U32)):
        raise WarpyError(f"{where}: operand v is {what(v)}; global atomics take 32-bit integers or F32")
    if signed or isinstance(v, S32):
        if op not in ("MIN", "MAX"):
            raise WarpyError(f"{where}.{op}: only MIN and MAX have a signed form")
        return "S32"
    return ""


def red(op: str, addr: GMem, v: R, *, signed: bool = False) -> Instr:
    """global[addr] = op(global[addr], v) at GPU scope (relaxed), no value returned: ADD, MIN, MAX
    (u32, S32 when `signed` or v is S32; v an F32: an fp32 ADD)."""
    if op not in ("ADD", "MIN", "MAX"):
        raise WarpyError(f"REDG: operation {op!r} is not ADD, MIN or MAX")
    ty = _atom_type("REDG", op, v, signed)
    return ins(REDG, ".".join(m for m in ("E", op, ty, "STRONG.GPU") if m), addr, v)


def atom(op: str, d: R, addr: GMem, v: R, *, signed: bool = False) -> Instr:
    """d = global[addr], which becomes op(d, v) atomically at GPU scope (relaxed): ADD, MIN, MAX, EXCH.
    For acquire/release semantics put `sync.cctl_ivall()` after / `sync.membar("GPU")` before
    (`warpy.isa.units.flags.atomic` does)."""
    if op not in ATOM_OPS:
        raise WarpyError(f"ATOMG: operation {op!r} is not one of {', '.join(ATOM_OPS)} (CAS: atom_cas)")
    ty = _atom_type("ATOMG", op, v, signed) if op != "EXCH" else ""
    return ins(ATOMG, ".".join(m for m in ("E", op, ty, "STRONG.GPU") if m), PT, d, addr, v)


def atom_cas(d: R, addr: GMem, cmp: R, new: R) -> Instr:
    """d = global[addr]; where d == cmp it becomes `new`, atomically at GPU scope (relaxed)."""
    return ins(ATOMG, "E.CAS.STRONG.GPU", PT, d, addr, cmp, new)


def ldsm(d: RVec, addr: Mem, trans: bool = False) -> Instr:
    return ins(LDSM, f"16.M88{'.T' if trans else ''}.{d.width}", d, addr)


def stsm(addr: Mem, v: RVec, trans: bool = False) -> Instr:
    return ins(STSM, f"16.M88{'.T' if trans else ''}.{v.width}", addr, v)
