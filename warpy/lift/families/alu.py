"""Lift rules of the ALU family: integer arithmetic, logic, moves, compares, predicate logic,
special and constant-bank reads. ptxas re-selects these freely (an `IADD3` may come back as
`IMAD.IADD` or vanish), so the disassembly check does not ask for them."""

from __future__ import annotations

from warpy.isa.instr import Instr
from warpy.isa.operands import CBank, Imm, P, SReg, Sym, UP
from warpy.lift.families._ctx import LiftContext, Rule
from warpy.isa.families import alu as isa
from warpy.lift.families._ctx import rule

CMP = {"EQ": "eq", "NE": "ne", "LT": "lt", "LE": "le", "GT": "gt", "GE": "ge"}


@rule(isa.IADD3, isa.UIADD3)
def _add3(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    ops = i.ops
    if len(ops) == 6:
        for carry in ops[1:3]:
            if not c.is_true(carry):
                raise c.error(f"the carry-out {carry} is not lifted (only PT/UPT)")
        ops = (ops[0],) + ops[3:]
    d = c.dst(ops[0])
    terms = [c.src(o) for o in ops[1:] if not c.is_zero(o) and not (isinstance(o, Imm) and o.value == 0)]
    if not terms:
        c.emit(f"mov.b32 {d}, 0")
    elif len(terms) == 1:
        c.emit(f"mov.b32 {d}, {terms[0]}")
    elif len(terms) == 2:
        c.emit(f"add.u32 {d}, {terms[0]}, {terms[1]}")
    else:
        t = c.tmp()
        c.emit(f"add.u32 {t}, {terms[0]}, {terms[1]}")
        c.emit(f"add.u32 {d}, {t}, {terms[2]}")


@rule(isa.IMAD, isa.UIMAD)
def _mad(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a, b, cc = i.ops
    signed = "U32" not in rest
    ty = "s32" if signed else "u32"
    if "WIDE" in rest:
        t = c.tmp("td")
        c.emit(f"mul.wide.{ty} {t}, {c.src(a, signed)}, {c.src(b, signed)}")
        if not c.is_zero(cc) and not (isinstance(cc, Imm) and cc.value == 0):
            if isinstance(cc, Imm):
                c.emit(f"add.u64 {t}, {t}, {cc.value & 0xFFFFFFFFFFFFFFFF}")
            else:
                c.emit(f"add.u64 {t}, {t}, {c.wide(cc)}")
        c.set_wide(d, t)
        return
    dd = c.dst(d)
    if "HI" in rest:
        t = c.tmp()
        c.emit(f"mul.hi.{ty} {t}, {c.src(a, signed)}, {c.src(b, signed)}")
        c.emit(f"add.u32 {dd}, {t}, {c.src(cc)}")
        return
    if c.is_zero(a) or c.is_zero(b) or any(isinstance(x, Imm) and x.value == 0 for x in (a, b)):
        c.emit(f"mov.b32 {dd}, {c.src(cc)}")  # IMAD.MOV: d = c
        return
    c.emit(f"mad.lo.u32 {dd}, {c.src(a)}, {c.src(b)}, {c.src(cc)}")


@rule(isa.LEA, isa.ULEA)
def _lea(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a, b, sh = i.ops
    assert isinstance(sh, Imm)
    t = c.tmp()
    if "HI" in rest:  # d = b + high word of (0:a) << shift
        c.emit(f"shr.u32 {t}, {c.src(a)}, {32 - sh.value}")
    else:
        c.emit(f"shl.b32 {t}, {c.src(a)}, {sh.value}")
    c.emit(f"add.u32 {c.dst(d)}, {t}, {c.src(b)}")


@rule(isa.LOP3, isa.ULOP3)
def _lop3(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    ops = i.ops
    pd = None
    if len(ops) == 7:
        pd, ops = ops[0], ops[1:]
    d, a, b, cc, lut, pin = ops
    if not c.is_false(pin):
        raise c.error(f"LOP3's predicate input must be !PT, not {pin}")
    assert isinstance(lut, Imm)
    res = c.dst(d) if pd is None or not c.is_zero(d) else c.tmp()
    c.emit(f"lop3.b32 {res}, {c.src(a)}, {c.src(b)}, {c.src(cc)}, {lut.value & 0xFF:#x}")
    if pd is not None:
        c.emit(f"setp.ne.u32 {c.pred_dst(pd)}, {res}, 0")


@rule(isa.SHF, isa.USHF)
def _shf(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a, sh, b = i.ops
    dd = c.dst(d)
    s = c.src(sh)
    if "L" in rest:
        if "HI" in rest:  # high word of (b:a) << s
            c.emit(f"shf.l.clamp.b32 {dd}, {c.src(a)}, {c.src(b)}, {s}")
        else:  # low word of (b:a) << s
            c.emit(f"shl.b32 {dd}, {c.src(a)}, {s}")
    else:
        if "HI" in rest:  # high word of (b:a) >> s
            ty = "s32" if "S32" in rest else "u32"
            c.emit(f"shr.{ty} {dd}, {c.src(b)}, {s}")
        else:  # low word of (b:a) >> s
            c.emit(f"shf.r.clamp.b32 {dd}, {c.src(a)}, {c.src(b)}, {s}")


@rule(isa.MOV, isa.UMOV, isa.R2UR)
def _mov(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a = i.ops
    if isinstance(a, Sym):
        c.emit(f"mov.u32 {c.dst(d)}, {c.sym(a)}")
    else:
        c.emit(f"mov.b32 {c.dst(d)}, {c.src(a)}")


@rule(isa.SEL, isa.USEL)
def _sel(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a, b, p = i.ops
    assert isinstance(p, (P, UP))
    sa, sb = c.src(a), c.src(b)
    if c.is_true(p) or c.is_false(p):
        c.emit(f"mov.b32 {c.dst(d)}, {sa if c.is_true(p) else sb}")
        return
    if p.neg:
        sa, sb = sb, sa
    c.emit(f"selp.b32 {c.dst(d)}, {sa}, {sb}, {c.reg(type(p)(p.name))}")


@rule(isa.PRMT, isa.UPRMT)
def _prmt(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    # SASS PRMT d, a, sel, b: bytes 0-3 of a, 4-7 of b, as PTX prmt's {b, a}. With sel 0x654 it is
    # (a << 24) | b[23:0]: the shared::cluster address of b in CTA a, which is what ptxas emits for mapa.
    d, a, sel, b = i.ops
    assert isinstance(sel, Imm)
    c.emit(f"prmt.b32 {c.dst(d)}, {c.src(a)}, {c.src(b)}, {sel.value & 0xFFFF:#x}")


@rule(isa.ISETP, isa.UISETP)
def _setp(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    p, q, a, b, cc = i.ops
    cmp = CMP[rest[0]]
    signed = "U32" not in rest
    ty = "s32" if signed else "u32"
    op = rest[-1].lower()
    dests = c.pred_dst(p)
    if not c.is_true(q):
        dests += f"|{c.pred_dst(q)}"
    c.emit(f"setp.{cmp}.{op}.{ty} {dests}, {c.src(a, signed)}, {c.src(b, signed)}, {c.pred_neg(cc)}")


@rule(isa.PLOP3, isa.UPLOP3)
def _plop3(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    p, q, a, b, cc, lut, _lut2 = i.ops
    if not c.is_true(q):
        raise c.error("PLOP3's second result is not lifted (only PT)")
    assert isinstance(lut, Imm)
    masks = []
    for x in (a, b, cc):
        assert isinstance(x, (P, UP))
        if c.is_true(x) or c.is_false(x):
            masks.append("0xFFFFFFFF" if c.is_true(x) else "0")
            continue
        t = c.tmp()
        r = c.reg(type(x)(x.name))
        on, off = ("0", "0xFFFFFFFF") if x.neg else ("0xFFFFFFFF", "0")
        c.emit(f"selp.b32 {t}, {on}, {off}, {r}")
        masks.append(t)
    t = c.tmp()
    c.emit(f"lop3.b32 {t}, {masks[0]}, {masks[1]}, {masks[2]}, {lut.value & 0xFF:#x}")
    c.emit(f"setp.ne.u32 {c.pred_dst(p)}, {t}, 0")


@rule(isa.S2R, isa.S2UR)
def _s2r(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, sr = i.ops
    assert isinstance(sr, SReg)
    c.emit(f"mov.u32 {c.dst(d)}, {c.special(sr.name)}")


@rule(isa.LDC, isa.ULDC, isa.LDCU)
def _ldc(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, cb = i.ops
    assert isinstance(cb, CBank)
    if cb.bank != 0:
        raise c.error(f"constant bank {cb.bank} is not lifted (only bank 0: kernel parameters)")
    wide = "64" in rest
    if cb.offset == c.arch.memdesc and wide:
        # the global memory descriptor: PTX addresses global memory without one
        for r in c.elems(d, 2):
            c.emit(f"mov.b32 {r}, 0")
        return
    name, typ, off = c.param_at(cb.offset)
    if typ == "tmap":
        raise c.error(f"c[0x0][{cb.offset}] reads tensor map {name}; use tmap[{name}]")
    if wide:
        if off or typ not in ("u64", "s64"):
            raise c.error(f"a 64-bit read of parameter {name} ({typ}) at byte {off}")
        t = c.tmp("td")
        c.emit(f"ld.param.u64 {t}, [{name}]")
        c.set_wide(d, t)
        return
    ty = {"u16": "u16", "u32": "b32", "s32": "b32", "f32": "b32", "u64": "b32", "s64": "b32"}[typ]
    where = f"[{name}+{off}]" if off else f"[{name}]"
    c.emit(f"ld.param.{ty} {c.dst(d)}, {where}")


@rule(isa.VOTEU)
def _vote(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    m = c.tmp()
    c.emit(f"activemask.b32 {m}")
    mode = rest[0].lower()
    if len(i.ops) == 2:
        d, p = i.ops
        if isinstance(d, UP):
            c.emit(f"vote.sync.{mode}.pred {c.pred_dst(d)}, {c.pred_neg(p)}, {m}")
        else:
            c.emit(f"vote.sync.ballot.b32 {c.dst(d)}, {c.pred_neg(p)}, {m}")
        return
    d, q, p = i.ops
    c.emit(f"vote.sync.ballot.b32 {c.dst(d)}, {c.pred_neg(p)}, {m}")
    c.emit(f"vote.sync.{mode}.pred {c.pred_dst(q)}, {c.pred_neg(p)}, {m}")


@rule(isa.F2FP)
def _f2fp(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a, b = i.ops
    ty = "bf16x2" if "BF16" in rest else "f16x2"
    c.emit(f"cvt.rn.{ty}.f32 {c.dst(d)}, {c.src(a)}, {c.src(b)}")


@rule(isa.FADD)
def _fadd(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a, b = i.ops
    c.emit(f"add.rn.f32 {c.dst(d)}, {c.src(a)}, {c.src(b)}")


@rule(isa.FMUL)
def _fmul(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a, b = i.ops
    c.emit(f"mul.rn.f32 {c.dst(d)}, {c.src(a)}, {c.src(b)}")
