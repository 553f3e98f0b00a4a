"""Lift rules of the Hopper tensor-core family: wgmma (`HGMMA`), its fence/commit/wait, setmaxnreg.

`HGMMA.64xNxK.D.AB d, gdesc[descs], c[, scale][, gsb0]` → `wgmma.mma_async.sync.aligned.m64nNkK.d.ab.ab
{d}, adesc, bdesc, scale-d, 1, 1[, 0, 0]` with `adesc = {descs.0, descs.1}`, `bdesc = {descs.2,
descs.3}`; scale-d is 0 when c is `RZ` (d = A·B), else the `scale` predicate (default true).
imm-trans-a / imm-trans-b (16-bit types only) are 1 where the descriptor operand carries nvdisasm's
`.tnspA` / `.tnspB` (that operand is MN-major), else 0. `gsb0` has no PTX of its own (ptxas marks
the last HGMMA before a commit).

`QGMMA.64xNx32.D.A.B d, gdesc[descs], c[, scale][, gsb0]` (8-bit floats, A's type then B's) →
`wgmma.mma_async.sync.aligned.m64nNk32.d.a.b {d}, adesc, bdesc, scale-d, 1, 1` (no imm-trans: fp8
operands are K-major only)."""

from __future__ import annotations

from warpy.isa.instr import Instr
from warpy.isa.operands import Desc, Imm, Kw, UP
from warpy.lift.families._ctx import LiftContext, Rule
from warpy.isa.families import wgmma as isa
from warpy.lift.families._ctx import rule

DT = {"F32": "f32", "F16": "f16", "BF16": "bf16", "E4M3": "e4m3", "E5M2": "e5m2", "TF32": "tf32"}


@rule(isa.HGMMA)
def _hgmma(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    shape, dt, ab = rest[0], rest[1], rest[2]
    _, n, k = shape.split("x")
    width = int(n) // 2 if dt == "F32" else int(n) // 4
    ops = [o for o in i.ops if not isinstance(o, Kw)]
    a_regs = None
    if not isinstance(ops[1], Desc):  # the RS form: A from registers
        a_regs = ops[1]
        ops = ops[:1] + ops[2:]
    d, descs, cc = ops[0], ops[1], ops[2]
    scale = ops[3] if len(ops) > 3 else None
    assert isinstance(descs, Desc)
    ta, tb = int("tnspA" in descs.flags), int("tnspB" in descs.flags)
    if (ta or tb) and ab not in isa.TNSP_TYPES:
        raise c.error(f"HGMMA transposes (.tnspA/.tnspB) only {' and '.join(isa.TNSP_TYPES)} operands, not {ab}")
    if ta and a_regs is not None:
        raise c.error("HGMMA with A from registers has no .tnspA (only B is read from shared memory)")
    v = c.elems(descs.reg, 4)
    ad, bd = c.tmp("td"), c.tmp("td")
    if a_regs is None:
        c.emit(f"mov.b64 {ad}, {{{v[0]}, {v[1]}}}")
    c.emit(f"mov.b64 {bd}, {{{v[2]}, {v[3]}}}")
    if c.is_zero(cc):
        sd = "0"
    elif scale is None:
        sd = "1"
    else:
        assert isinstance(scale, UP)
        sd = "1" if c.is_true(scale) else "0" if c.is_false(scale) else c.pred(scale)
    if not c.is_zero(cc):
        if c.elems(cc, width) != c.elems(d, width):
            raise c.error("HGMMA accumulates into its destination: c must be d (or RZ)")
    regs = ", ".join(c.elems(d, width))
    if a_regs is not None:  # RS: A's 4 registers; only B has a transpose flag
        a_list = ", ".join(c.elems(a_regs, isa.A_REGS))
        trans = f", {tb}" if ab in isa.TNSP_TYPES else ""
        c.emit(f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.{DT[dt]}.{DT[ab]}.{DT[ab]} {{{regs}}}, {{{a_list}}}, {bd}, {sd}, "
               f"1, 1{trans}")
        return
    trans = f", {ta}, {tb}" if ab in isa.TNSP_TYPES else ""
    c.emit(f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.{DT[dt]}.{DT[ab]}.{DT[ab]} {{{regs}}}, {ad}, {bd}, {sd}, 1, 1{trans}")


@rule(isa.QGMMA)
def _qgmma(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    shape, dt, at, bt = rest[0], rest[1], rest[2], rest[3]
    _, n, k = shape.split("x")
    width = int(n) // 2 if dt == "F32" else int(n) // 4
    ops = [o for o in i.ops if not isinstance(o, Kw)]
    d, descs, cc = ops[0], ops[1], ops[2]
    scale = ops[3] if len(ops) > 3 else None
    assert isinstance(descs, Desc)
    if descs.flags:
        raise c.error(f"QGMMA reads 8-bit operands K-major only: no {'.'.join(descs.flags)}")
    v = c.elems(descs.reg, 4)
    ad, bd = c.tmp("td"), c.tmp("td")
    c.emit(f"mov.b64 {ad}, {{{v[0]}, {v[1]}}}")
    c.emit(f"mov.b64 {bd}, {{{v[2]}, {v[3]}}}")
    if c.is_zero(cc):
        sd = "0"
    elif scale is None:
        sd = "1"
    else:
        assert isinstance(scale, UP)
        sd = "1" if c.is_true(scale) else "0" if c.is_false(scale) else c.pred(scale)
    if not c.is_zero(cc) and c.elems(cc, width) != c.elems(d, width):
        raise c.error("QGMMA accumulates into its destination: c must be d (or RZ)")
    regs = ", ".join(c.elems(d, width))
    c.emit(f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.{DT[dt]}.{DT[at]}.{DT[bt]} {{{regs}}}, {ad}, {bd}, {sd}, 1, 1")


@rule(isa.WARPGROUP_ARRIVE)
def _arrive(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    c.emit("wgmma.fence.sync.aligned")


@rule(isa.WGMMA_COMMIT)
def _commit(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    c.emit("wgmma.commit_group.sync.aligned")


@rule(isa.WARPGROUP_DEPBAR)
def _wait(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    n = i.ops[1]
    assert isinstance(n, Imm)
    c.emit(f"wgmma.wait_group.sync.aligned {n.value}")
