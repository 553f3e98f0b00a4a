"""Lift rules of the ALU family: integer arithmetic, logic, moves, compares, predicate logic,
special and constant-bank reads. ptxas re-selects these freely (an `IADD3` may come back as
`IMAD.IADD` or vanish), so the disassembly check does not ask for them."""

from __future__ import annotations

from warpy.isa.instr import Instr
from warpy.isa.operands import CBank, Imm, Operand, P, R, SReg, Sym, UP
from warpy.lift.families._ctx import LiftContext, Rule, imm
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
    if op == "and" and c.is_true(cc):  # (x and true: the plain compare, which ptxas reads best, e.g. as a switch)
        c.emit(f"setp.{cmp}.{ty} {dests}, {c.src(a, signed)}, {c.src(b, signed)}")
        return
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
    rnd = "rz" if "RZ" in rest else "rn"
    c.emit(f"cvt.{rnd}.{ty}.f32 {c.dst(d)}, {fsrc(c, a)}, {fsrc(c, b)}")




# -- floating point ----------------------------------------------------------------------------------
# Float operands print negated as `-x` (the sign flipped, as SASS's operand negation does, NaNs too):
# lifted as an xor of the sign bit(s), not as an integer negation.

SIGN32 = 0x80000000
SIGN16x2 = 0x80008000


def fsrc(c: LiftContext, op: Operand, sign: int = SIGN32, bits: bool = False) -> str:
    """A float source: a register (its sign flipped for `-x`) or RZ (+0, `-RZ` -0): an fp32 literal
    (`0f80000000`) for an fp32 instruction, a 32-bit integer for a bitwise one (`bits`), a register
    for a packed one (PTX takes no f16x2 literal)."""
    if not isinstance(op, R):
        raise c.error(f"operand {op} is not a general register")
    if op.inv:
        raise c.error(f"a float operand cannot be inverted: {op}")
    if op.name == "RZ":
        v = sign if op.neg else 0
        if bits:
            return imm(v)
        if sign == SIGN32:
            return f"0f{v:08X}"
        t = c.tmp()
        c.emit(f"mov.b32 {t}, {imm(v)}")
        return t
    r = c.reg(R(op.name))
    if op.neg:
        t = c.tmp()
        c.emit(f"xor.b32 {t}, {r}, {imm(sign)}")
        return t
    return r


def _fmods(rest: tuple[str, ...], default_rn: bool = True) -> str:
    rnd = next((m.lower() for m in rest if m in ("RZ", "RM", "RP")), "rn" if default_rn else "")
    return (f".{rnd}" if rnd else "") + (".ftz" if "FTZ" in rest else "")


@rule(isa.FADD)
def _fadd(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a, b = i.ops
    c.emit(f"add{_fmods(rest)}.f32 {c.dst(d)}, {fsrc(c, a)}, {fsrc(c, b)}")


@rule(isa.FMUL)
def _fmul(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a, b = i.ops
    c.emit(f"mul{_fmods(rest)}.f32 {c.dst(d)}, {fsrc(c, a)}, {fsrc(c, b)}")


@rule(isa.FFMA)
def _ffma(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a, b, cc = i.ops
    c.emit(f"fma{_fmods(rest)}.f32 {c.dst(d)}, {fsrc(c, a)}, {fsrc(c, b)}, {fsrc(c, cc)}")


def _min_or_max(c: LiftContext, p: Operand, what: str) -> str:
    if c.is_true(p):
        return "min"
    if c.is_false(p):
        return "max"
    raise c.error(f"{what} chooses min (PT) or max (!PT) when it is lifted, not by {p}")


@rule(isa.FMNMX)
def _fmnmx(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a, b, p = i.ops
    op = _min_or_max(c, p, "FMNMX")
    mods = (".ftz" if "FTZ" in rest else "") + (".NaN" if "NAN" in rest else "")
    c.emit(f"{op}{mods}.f32 {c.dst(d)}, {fsrc(c, a)}, {fsrc(c, b)}")


@rule(isa.FSETP)
def _fsetp(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    p, q, a, b, cc = i.ops
    dests = c.pred_dst(p)
    if not c.is_true(q):
        dests += f"|{c.pred_dst(q)}"
    ftz = ".ftz" if "FTZ" in rest else ""
    if rest[-1] == "AND" and c.is_true(cc):
        c.emit(f"setp.{rest[0].lower()}{ftz}.f32 {dests}, {fsrc(c, a)}, {fsrc(c, b)}")
        return
    c.emit(f"setp.{rest[0].lower()}.{rest[-1].lower()}{ftz}.f32 {dests}, {fsrc(c, a)}, {fsrc(c, b)}, {c.pred_neg(cc)}")


@rule(isa.FSEL)
def _fsel(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a, b, p = i.ops
    assert isinstance(p, (P, UP))
    sa, sb = fsrc(c, a, bits=True), fsrc(c, b, bits=True)
    if c.is_true(p) or c.is_false(p):
        c.emit(f"mov.b32 {c.dst(d)}, {sa if c.is_true(p) else sb}")
        return
    if p.neg:
        sa, sb = sb, sa
    c.emit(f"selp.b32 {c.dst(d)}, {sa}, {sb}, {c.reg(type(p)(p.name))}")


MUFU_PTX = {"EX2": "ex2", "RSQ": "rsqrt", "RCP": "rcp", "LG2": "lg2"}


@rule(isa.MUFU)
def _mufu(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a = i.ops
    c.emit(f"{MUFU_PTX[rest[0]]}.approx.ftz.f32 {c.dst(d)}, {fsrc(c, a)}")


def _htype(rest: tuple[str, ...]) -> str:
    return "bf16x2" if "BF16_V2" in rest else "f16x2"


@rule(isa.HADD2)
def _hadd2(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a, b = i.ops
    c.emit(f"add.rn.{_htype(rest)} {c.dst(d)}, {fsrc(c, a, SIGN16x2)}, {fsrc(c, b, SIGN16x2)}")


@rule(isa.HMUL2)
def _hmul2(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a, b = i.ops
    c.emit(f"mul.rn.{_htype(rest)} {c.dst(d)}, {fsrc(c, a, SIGN16x2)}, {fsrc(c, b, SIGN16x2)}")


@rule(isa.HFMA2)
def _hfma2(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a, b, cc = i.ops
    srcs = ", ".join(fsrc(c, x, SIGN16x2) for x in (a, b, cc))
    c.emit(f"fma.rn.{_htype(rest)} {c.dst(d)}, {srcs}")


@rule(isa.HMNMX2)
def _hmnmx2(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a, b, p = i.ops
    op = _min_or_max(c, p, "HMNMX2")
    nan = ".NaN" if "NAN" in rest else ""
    c.emit(f"{op}{nan}.{_htype(rest)} {c.dst(d)}, {fsrc(c, a, SIGN16x2)}, {fsrc(c, b, SIGN16x2)}")


_CVT = {"F32": "f32", "F16": "f16", "BF16": "bf16"}


def _half_in(c: LiftContext, op: Operand) -> str:
    """Bits 0-15 of a register as a .b16 temporary (`-x`: the half's sign bit flipped)."""
    h = c.tmp("th")
    c.emit(f"cvt.u16.u32 {h}, {fsrc(c, op, 0x8000, bits=True) if isinstance(op, R) else c.src(op)}")
    return h


def _half_out(c: LiftContext, d: Operand, h: str) -> None:
    """A .b16 result into bits 0-15 of d, bits 16-31 zero."""
    c.emit(f"cvt.u32.u16 {c.dst(d)}, {h}")


@rule(isa.F2F)
def _f2f(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a = i.ops
    dst, src = rest[0], rest[1]
    if dst == src:
        raise c.error(f"F2F.{dst}.{src} converts nothing")
    rnd = "" if dst == "F32" else ".rn"  # widening to fp32 is exact; PTX takes no rounding there
    # `-x`: the sign flipped, as any float operand (an immediate as written)
    s = (fsrc(c, a) if isinstance(a, R) else c.src(a)) if src == "F32" else _half_in(c, a)
    if dst == "F32":
        c.emit(f"cvt{rnd}.f32.{_CVT[src]} {c.dst(d)}, {s}")
        return
    h = c.tmp("th")
    c.emit(f"cvt{rnd}.{_CVT[dst]}.{_CVT[src]} {h}, {s}")
    _half_out(c, d, h)


def _irnd(rest: tuple[str, ...]) -> str:
    return "." + next((m.lower() for m in rest if m in ("RZ", "RM", "RP")), "rn")


@rule(isa.I2F)
def _i2f(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a = i.ops
    src = "u32" if "U32" in rest else "s32"
    dst = "f16" if "F16" in rest else "bf16" if "BF16" in rest else "f32"
    if dst == "f32":
        c.emit(f"cvt{_irnd(rest)}.f32.{src} {c.dst(d)}, {c.src(a)}")
        return
    h = c.tmp("th")
    c.emit(f"cvt{_irnd(rest)}.{dst}.{src} {h}, {c.src(a)}")
    _half_out(c, d, h)


@rule(isa.I2FP)
def _i2fp(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a = i.ops
    src = "u32" if "U32" in rest else "s32"
    c.emit(f"cvt{_irnd(rest)}.f32.{src} {c.dst(d)}, {c.src(a)}")


_F2I_RND = {"TRUNC": "rzi", "FLOOR": "rmi", "CEIL": "rpi"}


@rule(isa.F2I)
def _f2i(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a = i.ops
    rnd = next((_F2I_RND[m] for m in rest if m in _F2I_RND), "rni")
    dst = "u32" if "U32" in rest else "s32"
    src = "f16" if "F16" in rest else "bf16" if "BF16" in rest else "f32"
    s = (fsrc(c, a) if isinstance(a, R) else c.src(a)) if src == "f32" else _half_in(c, a)  # `-x`: the sign flipped
    c.emit(f"cvt.{rnd}.{dst}.{src} {c.dst(d)}, {s}")


@rule(isa.VIMNMX)
def _vimnmx(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    ops = i.ops
    if len(ops) == 6:
        for x in ops[1:3]:
            if not c.is_true(x):
                raise c.error(f"VIMNMX's predicate {x} is not lifted (only PT)")
        ops = (ops[0],) + ops[3:]
    d, a, b, p = ops
    op = _min_or_max(c, p, "VIMNMX")
    ty = "u32" if "U32" in rest else "s32"
    signed = ty == "s32"
    c.emit(f"{op}.{ty} {c.dst(d)}, {c.src(a, signed)}, {c.src(b, signed)}")


# -- warp communication ------------------------------------------------------------------------------


@rule(isa.SHFL)
def _shfl(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    p, d, a, b, cc = i.ops[:5]
    members = i.ops[5] if len(i.ops) == 6 else Imm(0xFFFFFFFF)
    assert isinstance(members, Imm)
    dst = c.dst(d) + ("" if c.is_true(p) else f"|{c.pred_dst(p)}")
    c.emit(f"shfl.sync.{rest[0].lower()}.b32 {dst}, {c.src(a)}, {c.src(b)}, {c.src(cc)}, {imm(members.value)}")


@rule(isa.VOTE)
def _vote_r(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    m = c.tmp()
    c.emit(f"activemask.b32 {m}")
    mode = rest[0].lower()
    if len(i.ops) == 2:
        d, p = i.ops
        c.emit(f"vote.sync.{mode}.pred {c.pred_dst(d)}, {c.pred_neg(p)}, {m}")
        return
    d, q, p = i.ops
    c.emit(f"vote.sync.ballot.b32 {c.dst(d)}, {c.pred_neg(p)}, {m}")
    if not c.is_true(q):
        c.emit(f"vote.sync.{mode}.pred {c.pred_dst(q)}, {c.pred_neg(p)}, {m}")


_REDUX = {"SUM": "add", "MIN": "min", "MAX": "max", "OR": "or", "XOR": "xor"}


@rule(isa.REDUX)
def _redux(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None:
    d, a = i.ops
    op = next((_REDUX[m] for m in rest if m in _REDUX), "and")
    ty = "s32" if "S32" in rest else "u32" if op in ("add", "min", "max") else "b32"
    m = c.tmp()
    c.emit(f"activemask.b32 {m}")
    c.emit(f"redux.sync.{op}.{ty} {c.dst(d)}, {c.src(a)}, {m}")
