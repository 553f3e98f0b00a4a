"""Lift rules of the memory family: shared and global loads/stores, ldmatrix/stmatrix."""

from __future__ import annotations

from warpy.isa.instr import Instr
from warpy.lift.families._ctx import LiftContext, Rule
from warpy.isa.families import memory as isa
from warpy.lift.families._ctx import rule

_TYPE = {"U8": "u8", "S8": "s8", "U16": "u16", "S16": "s16"}


def _shape(rest: tuple[str, ...], store: bool) -> tuple[str, int]:
    for m in rest:
        if m in _TYPE:
            t = _TYPE[m]
            return (t.replace("s", "b").replace("u", "b") if store else t), 1
        if m == "64":
            return "v2.b32", 2
        if m == "128":
            return "v4.b32", 4
    return "b32", 1


def _vec(c: LiftContext, op: object, n: int, store: bool) -> str:
    regs = c.elems(op, n)  # type: ignore[arg-type]
    if store and regs[0] == "0" and n == 1:
        return "0"
    return regs[0] if n == 1 else "{" + ", ".join(regs) + "}"


@rule(isa.LDS)
def _lds(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a = i.ops
    ty, n = _shape(rest, False)
    addr = c.smem_addr(a)
    regs = [c.dst(d)] if n == 1 else c.elems(d, n)
    c.emit(f"ld.shared.{ty} {regs[0] if n == 1 else '{' + ', '.join(regs) + '}'}, {addr}")


@rule(isa.STS)
def _sts(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    a, v = i.ops
    ty, n = _shape(rest, True)
    addr = c.smem_addr(a)
    c.emit(f"st.shared.{ty} {addr}, {_vec(c, v, n, True)}")


def _scope(rest: tuple[str, ...]) -> str:
    """`.STRONG.GPU` (what ptxas prints for a relaxed GPU-scope access) back to its PTX qualifiers."""
    return ".relaxed.gpu" if "STRONG" in rest and "GPU" in rest else ""


def _hints(c: LiftContext, rest: tuple[str, ...]) -> str:
    """LDG's cache hints as PTX qualifiers, in PTX's order (.nc, then eviction, then prefetch size)."""
    got = [m for m in rest if m in isa.LDG_HINTS]
    if got and "STRONG" in rest:
        raise c.error(f"a GPU-scope load takes no cache hint ({', '.join(got)})")
    order = ["CONSTANT", "LU", "EF", "EL", "EU", "NA", "LTC64B", "LTC128B", "LTC256B"]
    return "".join(isa.LDG_HINTS[m] for m in order if m in got)


@rule(isa.LDG)
def _ldg(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, g = i.ops
    ty, n = _shape(rest, False)
    addr = c.gmem_addr(g)
    regs = [c.dst(d)] if n == 1 else c.elems(d, n)
    ty = ty.replace("u32", "b32")
    hints = _hints(c, rest)
    c.emit(f"ld{_scope(rest)}.global{hints}.{ty} {regs[0] if n == 1 else '{' + ', '.join(regs) + '}'}, {addr}")


@rule(isa.STG)
def _stg(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    g, v = i.ops
    ty, n = _shape(rest, True)
    addr = c.gmem_addr(g)
    c.emit(f"st{_scope(rest)}.global.{ty} {addr}, {_vec(c, v, n, True)}")


def _atype(rest: tuple[str, ...], op: str) -> str:
    if "F32" in rest:
        return "f32"
    if op in ("exch", "cas"):
        return "b32"
    return "s32" if "S32" in rest else "u32"


@rule(isa.REDG)
def _redg(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    g, v = i.ops
    op = rest[1].lower()
    c.emit(f"red.relaxed.gpu.global.{op}.{_atype(rest, op)} {c.gmem_addr(g)}, {c.src(v)}")


@rule(isa.ATOMG)
def _atomg(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    p, d, g = i.ops[:3]
    if not c.is_true(p):
        raise c.error(f"ATOMG's predicate {p} is not lifted (only PT)")
    op = rest[1].lower()
    srcs = ", ".join(c.src(x) for x in i.ops[3:])
    c.emit(f"atom.relaxed.gpu.global.{op}.{_atype(rest, op)} {c.dst(d)}, {_atom_addr(c, g)}, {srcs}")


def _atom_addr(c: LiftContext, g: object) -> str:
    """A global address `desc[..][R.64+off]`, or `[R+off]` as nvdisasm prints a CAS's (a 64-bit pair)."""
    from warpy.isa.operands import Mem

    if isinstance(g, Mem):
        if g.base is None or g.ubase is not None:
            raise c.error(f"a global atomic's address {g} is not a register pair + offset")
        a = c.wide(g.base)
        return f"[{a}+{g.offset}]" if g.offset else f"[{a}]"
    return c.gmem_addr(g)  # type: ignore[arg-type]


def _num(rest: tuple[str, ...]) -> int:
    return int(rest[-1])


@rule(isa.LDSM)
def _ldsm(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a = i.ops
    n = _num(rest)
    trans = ".trans" if "T" in rest else ""
    addr = c.smem_addr(a)
    c.emit(f"ldmatrix.sync.aligned.m8n8.x{n}{trans}.shared.b16 {{{', '.join(c.elems(d, n))}}}, {addr}")


@rule(isa.STSM)
def _stsm(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    a, v = i.ops
    n = _num(rest)
    trans = ".trans" if "T" in rest else ""
    addr = c.smem_addr(a)
    c.emit(f"stmatrix.sync.aligned.m8n8.x{n}{trans}.shared.b16 {addr}, {{{', '.join(c.elems(v, n))}}}")
