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


@rule(isa.LDG)
def _ldg(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, g = i.ops
    ty, n = _shape(rest, False)
    addr = c.gmem_addr(g)
    regs = [c.dst(d)] if n == 1 else c.elems(d, n)
    ty = ty.replace("u32", "b32")
    c.emit(f"ld{_scope(rest)}.global.{ty} {regs[0] if n == 1 else '{' + ', '.join(regs) + '}'}, {addr}")


@rule(isa.STG)
def _stg(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    g, v = i.ops
    ty, n = _shape(rest, True)
    addr = c.gmem_addr(g)
    c.emit(f"st{_scope(rest)}.global.{ty} {addr}, {_vec(c, v, n, True)}")


@rule(isa.REDG)
def _redg(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    g, v = i.ops
    c.emit(f"red.relaxed.gpu.global.add.u32 {c.gmem_addr(g)}, {c.src(v)}")


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
