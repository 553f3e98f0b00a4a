"""What the integer/ALU, compare, predicate and conversion instructions compute: one definition,
used by the host checker (`warpy.check`, every lane of every warp) and by the isa's interpreter
(`warpy.isa.interp`, one warp, no memory), and compared with the lifter's PTX by tests/lift.

Values are `warpy.isa.values` lane values: Python ints where every lane holds the same value,
numpy uint64 vectors of 32 lanes otherwise, reduced to 32 bits. A rule is called as
`rule(env, warp, compiled, lanes)`:

- env (`Env`): the machine; only `env.params` (kernel parameter name -> value) is read, by 64-bit `LDC`;
- warp (`RegFile`): anything with a `regs` dict;
- compiled (`ValueInstr`): the instruction (`instr`), one reader per operand (`get[k](warp)`), one
  writer per operand (`put[k](warp, value, lanes)`) and a dict for the rule's own caches (`extra`);
  its readers and writers take the warp the rule is given (the checker's `Warp`, the interpreter's
  one-thread machine);
- lanes: None for every lane of the warp's current group, else a bool vector of the lanes taking part.
"""

from __future__ import annotations

from typing import Callable, Mapping, Optional, Protocol, Sequence, TypeVar, Union, cast, overload

import numpy as np

from warpy.isa.instr import Instr
from warpy.isa.values import M32, Val, first, writer
from warpy.isa.operands import CBank, Imm, Operand, R, RVec, UR, URVec, elem_name
from warpy.isa.families import alu as isa
from warpy.isa.registry import Registry

V = np.ndarray
Lanes = Optional[np.ndarray]


class RegFile(Protocol):
    """A warp as a value rule sees it: its registers (name -> lane value)."""

    @property
    def regs(self) -> dict[str, Val]: ...


class Env(Protocol):
    """The machine as a value rule sees it: the kernel parameters' values (for 64-bit `LDC`)."""

    @property
    def params(self) -> Mapping[str, int]: ...


W = TypeVar("W", bound=RegFile)
W_contra = TypeVar("W_contra", bound=RegFile, contravariant=True)


class ValueInstr(Protocol[W_contra]):
    """An instruction as a value rule sees it: one reader and one writer per operand over warps of
    one kind, and a dict for the rule's own caches."""

    @property
    def instr(self) -> Instr: ...

    @property
    def get(self) -> Sequence[Callable[[W_contra], Val]]: ...

    @property
    def put(self) -> Sequence[Callable[[W_contra, Val, Lanes], None]]: ...

    @property
    def extra(self) -> dict[object, object]: ...


class ValueRule(Protocol):
    def __call__(self, env: Env, w: W, c: ValueInstr[W], lanes: Lanes, /) -> None: ...


#: the value rules, by opcode record
VALUES: Registry[ValueRule] = Registry("value rule")
value = VALUES.register


@overload
def _s32(x: int) -> int: ...


@overload
def _s32(x: np.ndarray) -> np.ndarray: ...


@overload
def _s32(x: Val) -> Val: ...


def _s32(x: Val) -> Val:
    """The lane value as signed 32-bit (an int64 vector for a vector)."""
    if isinstance(x, V):
        return x.astype(np.int64) - ((x.astype(np.int64) >> 31) & 1) * (1 << 32)
    return x - (1 << 32) if x >> 31 else x


def _lut(lut: int, a: Val, b: Val, c: Val) -> Val:
    if isinstance(a, V) or isinstance(b, V) or isinstance(c, V):
        av, bv, cv = (np.asarray(x, dtype=np.uint64) for x in (a, b, c))
        vout = np.zeros(32, dtype=np.uint64)
        for i in range(8):
            if lut >> i & 1:
                vout = vout | ((av if i & 4 else ~av) & (bv if i & 2 else ~bv) & (cv if i & 1 else ~cv))
        return vout & M32
    out = 0
    for i in range(8):
        if lut >> i & 1:
            out = out | ((a if i & 4 else ~a) & (b if i & 2 else ~b) & (c if i & 1 else ~c))
    return out & M32


@overload
def _u(x: int) -> int: ...


@overload
def _u(x: np.ndarray) -> np.ndarray: ...


@overload
def _u(x: Val) -> Val: ...


def _u(x: Val) -> Val:
    return np.asarray(x, dtype=np.uint64) if isinstance(x, V) else x


@value(isa.IADD3, isa.UIADD3)
def _iadd3(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    g = c.get
    if len(g) == 6:
        v = _sum(g[3](w), g[4](w), g[5](w)) & M32
    else:
        v = _sum(g[1](w), g[2](w), g[3](w)) & M32
    c.put[0](w, v, lanes)


def _sum(a: Val, b: Val, c: Val) -> Val:
    # (numpy's stubs take int + array for a float array; an int lane value and a uint64 vector add to
    # a uint64 vector)
    return cast(Val, a + b + c)


def _reg(op: Operand) -> str:
    if not isinstance(op, (R, UR, RVec, URVec)):
        raise TypeError(f"{op} is not a register")
    return op.name


def _imm(op: Operand) -> int:
    """An immediate operand's value (a LUT, a shift, a byte selector)."""
    if not isinstance(op, Imm):
        raise TypeError(f"{op} is not an immediate")
    return op.value


def _pair(w: RegFile, op: Union[R, UR, RVec, URVec]) -> Val:
    """The 64-bit value of a register pair (the vector, or its first register in a parsed coloured text)."""
    lo = w.regs.get(elem_name(op.name, 0), 0)
    hi = w.regs.get(elem_name(op.name, 1), 0)
    return _u(lo) | (_u(hi) << 32) if isinstance(lo, V) or isinstance(hi, V) else lo | (hi << 32)


Writer = Callable[[W, Val, Lanes], None]


def _put_pair(w: W, c: ValueInstr[W], op: Operand, v: Val, lanes: Lanes) -> None:
    """Write a 64-bit value into a register pair (its writers are kept in the instruction's `extra`)."""
    key = ("pair", id(op))
    cached = c.extra.get(key)
    if cached is None:
        kind = R if isinstance(op, RVec) else UR
        name = _reg(op)
        cached = c.extra[key] = (writer(kind(elem_name(name, 0))), writer(kind(elem_name(name, 1))))
    ws = cast(tuple[Writer[W], Writer[W]], cached)
    if isinstance(v, V):
        v = v.astype(np.uint64)
        ws[0](w, v & np.uint64(M32), lanes)
        ws[1](w, (v >> np.uint64(32)) & np.uint64(M32), lanes)
    else:
        v &= (1 << 64) - 1
        ws[0](w, v & M32, lanes)
        ws[1](w, (v >> 32) & M32, lanes)


@value(isa.IMAD, isa.UIMAD)
def _imad(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    i = c.instr
    g = c.get
    a, b = g[1](w), g[2](w)
    signed = "U32" not in i.mods
    # (casts: numpy's stubs take int * array for a float array; an int lane value and a uint64 vector
    # multiply and add to a uint64 vector)
    v: Val
    if "WIDE" in i.mods:
        cc = i.ops[3]
        # a register c is 64-bit (a pair: the vector, or its first register in a parsed coloured text)
        c64 = _pair(w, cc) if isinstance(cc, (RVec, URVec)) or (isinstance(cc, (R, UR)) and cc.name not in ("RZ", "URZ")) else g[3](w)
        if signed:
            sa, sb = _s32(a), _s32(b)
            if isinstance(sa, V) or isinstance(sb, V):
                v = (np.asarray(sa, dtype=np.int64) * np.asarray(sb, dtype=np.int64)).astype(np.uint64) + _u(c64)
            else:
                v = (sa * sb + c64) & ((1 << 64) - 1)
        elif isinstance(a, V) or isinstance(b, V) or isinstance(c64, V):
            v = cast(Val, _u(a) * _u(b) + _u(c64))
        else:
            v = a * b + c64
        _put_pair(w, c, i.ops[0], v, lanes)
        return
    cv = g[3](w)
    if "HI" in i.mods:
        hi: Val
        if signed:
            p: Val
            if isinstance(a, V) or isinstance(b, V):
                p = np.asarray(_s32(a), dtype=np.int64) * np.asarray(_s32(b), dtype=np.int64)
            else:
                p = _s32(a) * _s32(b)
            hi = (p >> 32) & M32
        elif isinstance(a, V) or isinstance(b, V):
            hi = cast(Val, _u(a) * _u(b)) >> 32
        else:
            hi = (a * b) >> 32
        v = cast(Val, _u(hi) + cv) & M32 if isinstance(hi, V) else (hi + cv) & M32
    else:
        v = cast(Val, a * b + cv) & M32
    c.put[0](w, v, lanes)


@value(isa.LEA, isa.ULEA)
def _lea(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    g = c.get
    a, b, sh = g[1](w), g[2](w), _imm(c.instr.ops[3])
    if "HI" in c.instr.mods:
        v = ((a >> (32 - sh)) + b) & M32
    else:
        v = ((a << sh) + b) & M32
    c.put[0](w, v, lanes)


@value(isa.LOP3, isa.ULOP3)
def _lop3(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    g = c.get
    if len(g) == 7:
        r = _lut(_imm(c.instr.ops[5]), g[2](w), g[3](w), g[4](w))
        c.put[0](w, (r != 0) if isinstance(r, V) else r != 0, lanes)
        c.put[1](w, r, lanes)
    else:
        c.put[0](w, _lut(_imm(c.instr.ops[4]), g[1](w), g[2](w), g[3](w)), lanes)


@value(isa.SHF, isa.USHF)
def _shf(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    g = c.get
    mods = c.instr.mods
    a, s, b = g[1](w), g[2](w), g[3](w)
    if isinstance(a, V) or isinstance(s, V) or isinstance(b, V):
        av, sv, bv = (np.broadcast_to(np.asarray(x, dtype=np.uint64), (32,)).astype(object) for x in (a, s, b))
        out = np.array([_shf1(mods, int(x), int(y), int(z)) for x, y, z in zip(av, sv, bv)], dtype=np.uint64)
        c.put[0](w, out, lanes)
        return
    c.put[0](w, _shf1(mods, a, s, b), lanes)


def _shf1(mods: tuple[str, ...], a: int, s: int, b: int) -> int:
    s = min(s & 0xFFFFFFFF, 32)
    wide = (b << 32) | a
    if "L" in mods:
        return ((wide << s) >> 32) & M32 if "HI" in mods else (a << s) & M32
    if "HI" in mods:
        if "S32" in mods:
            return int(_s32(b) >> s) & M32
        return (b >> s) & M32
    return (wide >> s) & M32


@value(isa.MOV, isa.UMOV, isa.R2UR)
def _mov(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    if len(c.get) == 3:  # R2UR p, d, a
        c.put[0](w, True, lanes)
        c.put[1](w, c.get[2](w), lanes)
        return
    c.put[0](w, c.get[1](w), lanes)


@value(isa.SEL, isa.USEL)
def _sel(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    g = c.get
    a, b, p = g[1](w), g[2](w), g[3](w)
    v: Val
    if isinstance(p, V):
        v = np.where(p, np.asarray(a, dtype=np.uint64), np.asarray(b, dtype=np.uint64))
    else:
        v = a if p else b
    c.put[0](w, v, lanes)


def _prmt1(a: int, sel: int, b: int) -> int:
    src = (b << 32) | a
    out = 0
    for k in range(4):
        nib = (sel >> (4 * k)) & 0xF
        byte = (src >> (8 * (nib & 7))) & 0xFF
        if nib & 8:
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << (8 * k)
    return out


@value(isa.PRMT, isa.UPRMT)
def _prmt(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    g = c.get
    a, sel, b = g[1](w), _imm(c.instr.ops[2]), g[3](w)
    if isinstance(a, V) or isinstance(b, V):
        aa = np.broadcast_to(np.asarray(a, dtype=np.uint64), (32,))
        bb = np.broadcast_to(np.asarray(b, dtype=np.uint64), (32,))
        v: Val = np.array([_prmt1(int(x), sel, int(y)) for x, y in zip(aa, bb)], dtype=np.uint64)
    else:
        v = _prmt1(a, sel, b)
    c.put[0](w, v, lanes)


_CMP = {
    "EQ": lambda x, y: x == y, "NE": lambda x, y: x != y, "LT": lambda x, y: x < y,
    "LE": lambda x, y: x <= y, "GT": lambda x, y: x > y, "GE": lambda x, y: x >= y,
}


@value(isa.ISETP, isa.UISETP)
def _setp(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    g = c.get
    mods = c.instr.mods
    x, y = g[2](w), g[3](w)
    if "U32" not in mods:
        x, y = _s32(x), _s32(y)
    elif isinstance(x, V) or isinstance(y, V):
        x, y = np.asarray(x, dtype=np.int64), np.asarray(y, dtype=np.int64)
    t = _CMP[mods[0]](x, y)
    z = g[4](w)
    logic = mods[-1]
    p: Val
    q: Val
    if isinstance(t, V) or isinstance(z, V):
        tv, zv = np.asarray(t, dtype=bool), np.asarray(z, dtype=bool)
        p = (tv & zv) if logic == "AND" else (tv | zv) if logic == "OR" else (tv ^ zv)
        q = (~tv & zv) if logic == "AND" else (~tv | zv) if logic == "OR" else (~tv ^ zv)
    else:
        tb, zb = bool(t), bool(z)
        p = (tb and zb) if logic == "AND" else (tb or zb) if logic == "OR" else (tb != zb)
        q = ((not tb) and zb) if logic == "AND" else ((not tb) or zb) if logic == "OR" else ((not tb) != zb)
    c.put[0](w, p, lanes)
    c.put[1](w, q, lanes)


@value(isa.PLOP3, isa.UPLOP3)
def _plop3(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    g = c.get
    a, b, cc = g[2](w), g[3](w), g[4](w)
    lut = _imm(c.instr.ops[5])
    v: Val
    if any(isinstance(x, V) for x in (a, b, cc)):
        av, bv, cv = (np.broadcast_to(np.asarray(x, dtype=bool), (32,)).astype(np.int64) for x in (a, b, cc))
        idx = (av << 2) | (bv << 1) | cv
        v = ((lut >> idx) & 1).astype(bool)
    else:
        v = bool((lut >> ((int(a) << 2) | (int(b) << 1) | int(cc))) & 1)
    c.put[0](w, v, lanes)


@value(isa.S2R, isa.S2UR)
def _s2r(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    c.put[0](w, c.get[1](w), lanes)


@value(isa.LDC, isa.ULDC, isa.LDCU)
def _ldc(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    op = c.instr.ops[1]
    assert isinstance(op, CBank)
    if "64" in c.instr.mods:
        v = m.params.get(op.offset, 0) if isinstance(op.offset, str) else 0
        _put_pair(w, c, c.instr.ops[0], v, lanes)
        return
    c.put[0](w, c.get[1](w), lanes)


@value(isa.VOTEU)
def _vote(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    p = c.get[-1](w)
    act = np.ones(32, dtype=bool) if lanes is None else lanes
    pv = np.broadcast_to(np.asarray(p, dtype=bool), (32,)) & act
    anyv = bool(pv.any())
    allv = bool((pv | ~act).all())
    res = anyv if "ANY" in c.instr.mods else allv
    ballot = int(np.packbits(pv, bitorder="little").view("<u4")[0])
    from warpy.isa.operands import UP

    if len(c.get) == 2:
        d = c.instr.ops[0]
        c.put[0](w, res if isinstance(d, UP) else ballot, lanes)
    else:
        c.put[0](w, ballot, lanes)
        c.put[1](w, res, lanes)


def _bf16(bits: np.ndarray, kind: str) -> np.ndarray:
    f = np.asarray(bits, dtype=np.uint64).astype(np.uint32).view(np.float32)
    if kind == "F16":
        return f.astype(np.float16).view(np.uint16).astype(np.uint64)
    u = f.view(np.uint32).astype(np.uint64)
    r = (u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    return r & np.uint64(0xFFFF)


@value(isa.F2FP)
def _f2fp(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    a, b = c.get[1](w), c.get[2](w)
    kind = "F16" if "F16" in c.instr.mods[:1] else "BF16"
    hi, lo = _bf16(np.atleast_1d(a), kind), _bf16(np.atleast_1d(b), kind)
    v = (hi << np.uint64(16)) | lo
    if v.size == 1 and not isinstance(a, V) and not isinstance(b, V):
        c.put[0](w, int(v[0]), lanes)
    else:
        c.put[0](w, np.broadcast_to(v, (32,)).copy(), lanes)


def _f32_binary(w: W, c: ValueInstr[W], lanes: Lanes, op: str) -> None:
    """d = a op b in fp32, rounded to nearest even (numpy's float32 arithmetic is IEEE's)."""
    a, b = c.get[1](w), c.get[2](w)
    fa = np.atleast_1d(np.asarray(a, dtype=np.uint64)).astype(np.uint32).view(np.float32)
    fb = np.atleast_1d(np.asarray(b, dtype=np.uint64)).astype(np.uint32).view(np.float32)
    with np.errstate(all="ignore"):  # overflow to inf and inf - inf = NaN are the values, not errors
        r = fa + fb if op == "add" else fa * fb
    v = r.astype(np.float32).view(np.uint32).astype(np.uint64)
    if v.size == 1 and not isinstance(a, V) and not isinstance(b, V):
        c.put[0](w, int(v[0]), lanes)
    else:
        c.put[0](w, np.broadcast_to(v, (32,)).copy(), lanes)


@value(isa.FADD)
def _fadd(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    _f32_binary(w, c, lanes, "add")


@value(isa.FMUL)
def _fmul(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    _f32_binary(w, c, lanes, "mul")


