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
        if isinstance(cc, Imm):  # an immediate addend is the integer written, as 64 bits (-0x1: all ones), as lifted
            c64 = cc.value & ((1 << 64) - 1)
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
        c.put[0](w, _shf_lanes(mods, a, s, b), lanes)
        return
    c.put[0](w, _shf1(mods, a, s, b), lanes)


def _shf_lanes(mods: tuple[str, ...], a: Val, s: Val, b: Val) -> np.ndarray:
    """`_shf1` on 32 lanes at once, in uint64 (32-bit operands: the 64-bit pair and any shift of it
    up to 32 keep the bits the result takes)."""
    av, sv, bv = (np.asarray(x, dtype=np.uint64) for x in (a, s, b))
    m32 = np.uint64(M32)
    sv = np.minimum(sv & m32, np.uint64(32))
    if "HI" in mods and "L" not in mods:
        if "S32" in mods:
            bi = np.asarray(bv & m32).astype(np.int64)
            out = ((bi - ((bi >> 31) & 1) * (1 << 32)) >> sv.astype(np.int64)) & M32
            return _lanes32(out.astype(np.uint64))
        return _lanes32((bv >> sv) & m32)
    if "L" in mods and "HI" not in mods:
        return _lanes32((av << sv) & m32)
    wide = (bv << np.uint64(32)) | av
    out = ((wide << sv) >> np.uint64(32)) & m32 if "L" in mods else (wide >> sv) & m32
    return _lanes32(out)


def _lanes32(x: np.ndarray) -> np.ndarray:
    """A fresh result as 32 lanes (one value for every lane, when no operand was a lane vector)."""
    return x if x.shape == (32,) else np.full(32, x, dtype=np.uint64)


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


# -- floating point ------------------------------------------------------------------------------------
# Values are decoded exactly into binary64, computed there exactly (a sum as s + e by TwoSum, a product
# of two 24-bit significands exactly), and rounded once into the destination format by `encode`,
# which takes the exact value as (x, e) with |e| tiny next to x. NaN results are the canonical NaN the
# GPU writes (0x7fffffff, 0x7fff); .FTZ flushes subnormal inputs and results to zero of their sign.


class Fmt:
    """A binary floating-point format: its name, exponent and fraction bits."""

    def __init__(self, name: str, ebits: int, mbits: int) -> None:
        self.name, self.ebits, self.mbits = name, ebits, mbits
        self.bias = (1 << (ebits - 1)) - 1
        self.emin = 1 - self.bias  # the exponent of the smallest normal
        self.max = (2.0 - 2.0 ** -mbits) * 2.0 ** self.bias  # the largest finite value
        self.sign = 1 << (ebits + mbits)
        self.inf = ((1 << ebits) - 1) << mbits
        self.nan = self.inf | ((1 << mbits) - 1)  # NVIDIA's canonical NaN: every fraction bit set
        self.tiny = 2.0 ** self.emin


F32 = Fmt("f32", 8, 23)
F16 = Fmt("f16", 5, 10)
BF16 = Fmt("bf16", 8, 7)
FMTS = {"F32": F32, "F16": F16, "BF16": BF16}
_U64 = np.uint64


def _arr(x: Val) -> np.ndarray:
    return np.atleast_1d(np.asarray(x, dtype=np.uint64))


def decode(bits: Val, fmt: Fmt) -> np.ndarray:
    """The binary64 values (exact) of `fmt` values in the low bits of `bits`."""
    b = _arr(bits)
    if fmt is F32:
        return b.astype(np.uint32).view(np.float32).astype(np.float64)
    if fmt is F16:
        return (b & _U64(0xFFFF)).astype(np.uint16).view(np.float16).astype(np.float64)
    return ((b & _U64(0xFFFF)) << _U64(16)).astype(np.uint32).view(np.float32).astype(np.float64)


def flush(x: np.ndarray, fmt: Fmt) -> np.ndarray:
    """Subnormal values to zero of their sign (.FTZ)."""
    return np.where(np.abs(x) < fmt.tiny, np.copysign(0.0, x), x)


def _exact_bits(x: np.ndarray, fmt: Fmt) -> np.ndarray:
    """The bits of values exactly representable in `fmt` (finite)."""
    if fmt is F32:
        return x.astype(np.float32).view(np.uint32).astype(np.uint64)
    if fmt is F16:
        return x.astype(np.float16).view(np.uint16).astype(np.uint64)
    return (x.astype(np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint64)


def encode(x: np.ndarray, fmt: Fmt, mode: str = "RN", ftz: bool = False, e: Optional[np.ndarray] = None) -> np.ndarray:
    """The bits of x + e (exact, e tiny next to x or 0) rounded into `fmt`: RN to nearest even, RZ
    toward zero, RM down, RP up; overflow to infinity or the largest finite value as IEEE 754 says;
    NaN canonical; with `ftz` a subnormal result is zero of its sign."""
    x = np.asarray(x, dtype=np.float64)
    if fmt is F32 and mode == "RN" and not ftz and (e is None or not np.any(e)):
        # binary64 -> binary32 in the CPU's IEEE conversion: round to nearest even, gradual underflow,
        # overflow to infinity, the sign of zero kept (the general path below gives the same bits)
        with np.errstate(over="ignore"):
            bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        nan = np.isnan(x)
        if nan.any():
            bits[nan] = fmt.nan
        return bits
    if fmt is BF16 and mode == "RN" and not ftz and (e is None or not np.any(e)):
        # values exact in binary32 (an fp32 register's): bf16 is binary32's upper half, so round to
        # nearest even on the low 16 bits of the binary32 bits (a carry runs into the exponent, up to
        # infinity past the largest finite value; subnormals alike); NaN canonical
        with np.errstate(over="ignore", invalid="ignore"):
            f = x.astype(np.float32)
            exact = bool(np.all((f == x) | np.isnan(x)))
        if exact:
            b = f.view(np.uint32).astype(np.uint64)
            half = (b + _U64(0x7FFF) + ((b >> _U64(16)) & _U64(1))) >> _U64(16)
            nan = np.isnan(x)
            if nan.any():
                half[nan] = fmt.nan
            return half
    return _encode_exact(x, fmt, mode, ftz, e)


def _encode_exact(x: np.ndarray, fmt: Fmt, mode: str, ftz: bool, e: Optional[np.ndarray]) -> np.ndarray:
    """`encode`'s general path: the rounding worked out from the exact value."""
    e = np.zeros_like(x) if e is None else np.where(np.isfinite(x), np.asarray(e, dtype=np.float64), 0.0)
    out = np.zeros(x.shape, dtype=np.uint64)
    neg = np.signbit(x)
    sign = np.where(neg, _U64(fmt.sign), _U64(0))
    nan, inf = np.isnan(x), np.isinf(x)
    out[nan] = fmt.nan
    out[inf] = sign[inf] | _U64(fmt.inf)
    zero = (x == 0) & (e == 0)
    out[zero] = sign[zero]
    fin = ~(nan | inf | zero)
    if fin.any():
        xf, ef, nf = x[fin], e[fin], neg[fin]
        mant, k = np.frexp(xf)
        expo = k - 1
        # a power of two with a residual toward zero lies in the binade below
        expo = np.where((np.abs(mant) == 0.5) & (ef != 0) & (np.signbit(ef) != nf), expo - 1, expo)
        qexp = np.maximum(expo, fmt.emin) - fmt.mbits
        y = np.ldexp(xf, -qexp)
        er = np.ldexp(ef, -qexp)
        fl = np.floor(y)
        frac = y - fl
        below = (frac == 0) & (er < 0)
        f = np.where(below, fl - 1, fl)
        exact = (frac == 0) & (er == 0)
        r = y - f
        if mode == "RN":
            tie = r == 0.5
            odd = np.mod(f, 2) == 1
            up = np.where(tie, np.where(er > 0, True, np.where(er < 0, False, odd)), r > 0.5) & ~exact
        elif mode == "RZ":
            up = nf & ~exact
        elif mode == "RM":
            up = np.zeros(f.shape, dtype=bool)
        elif mode == "RP":
            up = ~exact
        else:
            raise ValueError(f"rounding mode {mode!r}")
        n = f + up
        val = np.ldexp(n, qexp)
        big = np.abs(val) > fmt.max
        to_inf = {"RN": np.ones_like(nf), "RZ": np.zeros_like(nf), "RM": nf, "RP": ~nf}[mode]
        val = np.where(big & to_inf, np.copysign(np.inf, xf), np.where(big, np.copysign(fmt.max, xf), val))
        val = np.where(val == 0, np.copysign(0.0, xf), val)
        if ftz:
            val = flush(val, fmt)
        bits = np.zeros(val.shape, dtype=np.uint64)
        isinf = np.isinf(val)
        bits[isinf] = np.where(nf[isinf], _U64(fmt.sign), _U64(0)) | _U64(fmt.inf)
        bits[~isinf] = _exact_bits(val[~isinf], fmt)
        out[fin] = bits
    return out


def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """s + e = a + b exactly (s = fl(a + b)); e is 0 where s is not finite."""
    with np.errstate(all="ignore"):
        s = a + b
        bb = s - a
        e = (a - (s - bb)) + (b - bb)
    return s, np.where(np.isfinite(s), e, 0.0)


def _zero_sign_rm(s: np.ndarray, e: np.ndarray, x: np.ndarray, y: np.ndarray, mode: str) -> np.ndarray:
    """IEEE 754's sign of an exact zero sum x + y: two zeros of one sign keep it; otherwise +0, and -0
    when rounding down (binary64's own sum has the rest right)."""
    if mode != "RM":
        return s
    same_zeros = (x == 0) & (y == 0) & (np.signbit(x) == np.signbit(y))
    z = (s == 0) & (e == 0) & ~same_zeros
    return np.where(z, -0.0, s)


def f_add(a: np.ndarray, b: np.ndarray, fmt: Fmt, mode: str = "RN", ftz: bool = False) -> np.ndarray:
    """The bits of a + b (binary64 values of `fmt`) rounded into `fmt`."""
    if ftz:
        a, b = flush(a, fmt), flush(b, fmt)
    s, e = two_sum(a, b)
    return encode(_zero_sign_rm(s, e, a, b, mode), fmt, mode, ftz, e)


def f_mul(a: np.ndarray, b: np.ndarray, fmt: Fmt, mode: str = "RN", ftz: bool = False) -> np.ndarray:
    if ftz:
        a, b = flush(a, fmt), flush(b, fmt)
    with np.errstate(all="ignore"):
        p = a * b  # exact: at most 2 x 24 significant bits
    return encode(p, fmt, mode, ftz)


def f_fma(a: np.ndarray, b: np.ndarray, c: np.ndarray, fmt: Fmt, mode: str = "RN", ftz: bool = False) -> np.ndarray:
    if ftz:
        a, b, c = flush(a, fmt), flush(b, fmt), flush(c, fmt)
    with np.errstate(all="ignore"):
        p = a * b  # exact
    s, e = two_sum(p, c)
    return encode(_zero_sign_rm(s, e, p, c, mode), fmt, mode, ftz, e)


def f_minmax(a: np.ndarray, b: np.ndarray, abits: np.ndarray, bbits: np.ndarray, fmt: Fmt, want_min: Union[bool, np.ndarray],
             nan: bool = False, ftz: bool = False) -> np.ndarray:
    """min/max as PTX defines them: -0 < +0; a NaN operand yields the other (both NaN, or any with
    `nan`: the canonical NaN); the result is one operand's bits (flushed with `ftz`)."""
    if ftz:
        sub_a, sub_b = np.abs(a) < fmt.tiny, np.abs(b) < fmt.tiny
        a, b = flush(a, fmt), flush(b, fmt)
        abits = np.where(sub_a, abits & _U64(fmt.sign), abits)
        bbits = np.where(sub_b, bbits & _U64(fmt.sign), bbits)
    na, nb = np.isnan(a), np.isnan(b)
    a_less = (a < b) | ((a == b) & np.signbit(a) & ~np.signbit(b))
    b_less = (b < a) | ((a == b) & np.signbit(b) & ~np.signbit(a))
    pick_a = np.where(want_min, a_less | ~b_less, b_less | ~a_less)
    pick_a = np.where(na, False, np.where(nb, True, pick_a))
    out = np.where(pick_a, abits, bbits)
    bad = (na & nb) | ((na | nb) & nan)
    return np.where(bad, _U64(fmt.nan), out).astype(np.uint64)


def f_to_int(x: np.ndarray, mode: str, unsigned: bool) -> np.ndarray:
    """x rounded to an integer (RN nearest even, TRUNC, FLOOR, CEIL), saturated to the 32-bit range
    (signed or unsigned), NaN to 0, as the 32-bit pattern."""
    r = {"RN": np.rint, "TRUNC": np.trunc, "FLOOR": np.floor, "CEIL": np.ceil}[mode](x)
    lo, hi = (0.0, 4294967295.0) if unsigned else (-2147483648.0, 2147483647.0)
    r = np.where(np.isnan(r), 0.0, np.clip(r, lo, hi))
    return (r.astype(np.int64) & M32).astype(np.uint64)


def _fmode(mods: tuple[str, ...]) -> str:
    return next((m for m in mods if m in ("RZ", "RM", "RP")), "RN")


def fbits(w: W, c: ValueInstr[W], k: int, sign: int = 0x80000000) -> Val:
    """Operand k of a float instruction: `-x` is x with its sign bit(s) flipped (not an integer
    negation), `-RZ` negative zero."""
    op = c.instr.ops[k]
    if isinstance(op, R) and op.neg and not op.inv:
        raw: Val = 0 if op.name == "RZ" else w.regs.get(op.name, 0)
        return raw ^ sign
    return c.get[k](w)


def _scalar(*xs: Val) -> bool:
    return not any(isinstance(x, V) for x in xs)


def _put_bits(c: ValueInstr[W], k: int, w: W, v: np.ndarray, scalar: bool, lanes: Lanes) -> None:
    v = np.asarray(v, dtype=np.uint64) & _U64(M32)
    if scalar and v.size == 1:
        c.put[k](w, int(v[0]), lanes)
    else:
        c.put[k](w, np.broadcast_to(v, (32,)).copy(), lanes)


def _halves(x: Val, fmt: Fmt) -> tuple[np.ndarray, np.ndarray]:
    b = _arr(x)
    return decode(b, fmt), decode(b >> _U64(16), fmt)


def _pack(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return (np.asarray(lo, dtype=np.uint64) & _U64(0xFFFF)) | ((np.asarray(hi, dtype=np.uint64) & _U64(0xFFFF)) << _U64(16))


@value(isa.F2FP)
def _f2fp(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    a, b = fbits(w, c, 1), fbits(w, c, 2)
    fmt = F16 if c.instr.mods[0] == "F16" else BF16
    mode = "RZ" if "RZ" in c.instr.mods else "RN"
    hi, lo = encode(decode(a, F32), fmt, mode), encode(decode(b, F32), fmt, mode)
    _put_bits(c, 0, w, _pack(lo, hi), _scalar(a, b), lanes)


@value(isa.FADD, isa.FMUL, isa.FFMA)
def _f32_arith(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    """d = a + b, a * b, a * b + c in fp32, one rounding (FTZ / RZ / RM / RP as the modifiers say)."""
    mods = c.instr.mods
    mode, ftz = _fmode(mods), "FTZ" in mods
    xs = [fbits(w, c, k) for k in range(1, len(c.instr.ops))]
    vals = [decode(x, F32) for x in xs]
    name = c.instr.name
    if name == "FADD":
        v = f_add(vals[0], vals[1], F32, mode, ftz)
    elif name == "FMUL":
        v = f_mul(vals[0], vals[1], F32, mode, ftz)
    else:
        v = f_fma(vals[0], vals[1], vals[2], F32, mode, ftz)
    _put_bits(c, 0, w, v, _scalar(*xs), lanes)


def _which(p: Val) -> Union[bool, np.ndarray]:
    return np.asarray(p, dtype=bool) if isinstance(p, V) else bool(p)


@value(isa.FMNMX)
def _fmnmx(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    a, b, p = fbits(w, c, 1), fbits(w, c, 2), c.get[3](w)
    mods = c.instr.mods
    v = f_minmax(decode(a, F32), decode(b, F32), _arr(a), _arr(b), F32, _which(p), "NAN" in mods, "FTZ" in mods)
    _put_bits(c, 0, w, v, _scalar(a, b, p), lanes)


_FCMP = {
    "EQ": lambda x, y: x == y, "NE": lambda x, y: (x != y) & ~np.isnan(x) & ~np.isnan(y),
    "LT": lambda x, y: x < y, "LE": lambda x, y: x <= y, "GT": lambda x, y: x > y, "GE": lambda x, y: x >= y,
    "EQU": lambda x, y: ~(x != y) | np.isnan(x) | np.isnan(y), "NEU": lambda x, y: x != y,
    "LTU": lambda x, y: ~(x >= y), "LEU": lambda x, y: ~(x > y), "GTU": lambda x, y: ~(x <= y),
    "GEU": lambda x, y: ~(x < y),
    "NUM": lambda x, y: ~np.isnan(x) & ~np.isnan(y), "NAN": lambda x, y: np.isnan(x) | np.isnan(y),
}


def f_compare(cmp: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """setp's comparisons on binary64 values: EQ..GE are false on NaN, EQU..GEU true, NUM/NAN test for NaN."""
    with np.errstate(invalid="ignore"):
        return np.asarray(_FCMP[cmp](x, y), dtype=bool)


def _bool_op(t: Val, z: Val, logic: str) -> tuple[Val, Val]:
    """(t op z, (not t) op z) for op AND / OR / XOR (setp's two results)."""
    if isinstance(t, V) or isinstance(z, V):
        tv, zv = np.asarray(t, dtype=bool), np.asarray(z, dtype=bool)
        p = (tv & zv) if logic == "AND" else (tv | zv) if logic == "OR" else (tv ^ zv)
        q = (~tv & zv) if logic == "AND" else (~tv | zv) if logic == "OR" else (~tv ^ zv)
        return p, q
    tb, zb = bool(t), bool(z)
    pb = (tb and zb) if logic == "AND" else (tb or zb) if logic == "OR" else (tb != zb)
    qb = ((not tb) and zb) if logic == "AND" else ((not tb) or zb) if logic == "OR" else ((not tb) != zb)
    return pb, qb


@value(isa.FSETP)
def _fsetp(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    mods = c.instr.mods
    a, b = fbits(w, c, 2), fbits(w, c, 3)
    x, y = decode(a, F32), decode(b, F32)
    if "FTZ" in mods:
        x, y = flush(x, F32), flush(y, F32)
    tv = f_compare(mods[0], x, y)
    t: Val = tv if not _scalar(a, b) else bool(tv[0])
    p, q = _bool_op(t, c.get[4](w), mods[-1])
    c.put[0](w, p, lanes)
    c.put[1](w, q, lanes)


@value(isa.FSEL)
def _fsel(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    a, b, p = fbits(w, c, 1), fbits(w, c, 2), c.get[3](w)
    v: Val
    if isinstance(p, V):
        v = np.where(p, np.asarray(a, dtype=np.uint64), np.asarray(b, dtype=np.uint64))
    else:
        v = a if p else b
    c.put[0](w, v, lanes)


#: the special-function unit's functions on binary64 values (its special cases are IEEE's: PTX's tables)
MUFU_FUNCS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "EX2": np.exp2,
    "RSQ": lambda x: 1.0 / np.sqrt(x),
    "RCP": lambda x: 1.0 / x,
    "LG2": np.log2,
}


def mufu(func: str, x: np.ndarray) -> np.ndarray:
    """The bits of MUFU.func of fp32 values x (flushed in and out): the exact function rounded to
    nearest. The hardware approximates it within PTX's bounds (docs/sass.md); this is the centre."""
    with np.errstate(all="ignore"):
        return encode(MUFU_FUNCS[func](flush(x, F32)), F32, "RN", ftz=True)


#: PTX's error bounds of the approximations (`ex2/rsqrt/rcp/lg2.approx.ftz.f32`): ("ulp", n): within n
#: units in the last place of the correctly rounded result; ("rel", e): |got - f| <= 2^e |f|;
#: LG2 is absolute (2^-22) for inputs in (0.5, 2) and relative (2^-22) elsewhere
MUFU_BOUNDS: dict[str, tuple[str, float]] = {"EX2": ("ulp", 2), "RCP": ("ulp", 1), "RSQ": ("rel", -22.9), "LG2": ("rel", -22.0)}


def _ulps(a: int, b: int) -> int:
    """How many fp32 values lie from a to b (bit patterns, the same sign or zeros)."""
    def key(x: int) -> int:
        return -(x & 0x7FFFFFFF) if x >> 31 else x
    return abs(key(a) - key(b))


def mufu_agrees(func: str, x_bits: int, got_bits: int) -> bool:
    """Whether MUFU.func of the fp32 input x (flushed) may give `got`: the special cases exactly as
    PTX's tables say, the rest within MUFU_BOUNDS of the exact function (a subnormal exact result may
    also come out as zero of its sign: the unit flushes)."""
    x = float(flush(decode(x_bits, F32), F32)[0])
    with np.errstate(all="ignore"):
        want = float(MUFU_FUNCS[func](np.array([x]))[0])
    got = float(decode(got_bits, F32)[0])
    cr = int(encode(np.array([want]), F32, "RN", ftz=False)[0])
    if np.isnan(want) or np.isnan(got):
        return bool(np.isnan(want) and np.isnan(got))
    if want == 0 or np.isinf(want):
        return got == want and bool(np.signbit(got) == np.signbit(want))
    if abs(want) < F32.tiny and got == 0 and np.signbit(got) == np.signbit(want):
        return True
    kind, b = MUFU_BOUNDS[func]
    if kind == "ulp":
        return bool(np.signbit(got) == np.signbit(want)) and _ulps(got_bits & M32, cr) <= b
    if func == "LG2" and 0.5 < x < 2.0:
        return bool(abs(got - want) <= 2.0 ** b)
    return bool(abs(got - want) <= 2.0 ** b * abs(want))


@value(isa.MUFU)
def _mufu(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    a = fbits(w, c, 1)
    _put_bits(c, 0, w, mufu(c.instr.mods[0], decode(a, F32)), _scalar(a), lanes)


def _hfmt(mods: tuple[str, ...]) -> Fmt:
    return BF16 if "BF16_V2" in mods else F16


@value(isa.HADD2, isa.HMUL2, isa.HFMA2)
def _h2_arith(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    """Each 16-bit half: a + b, a * b, a * b + c, rounded to nearest even in fp16 or bf16."""
    fmt = _hfmt(c.instr.mods)
    xs = [fbits(w, c, k, 0x80008000) for k in range(1, len(c.instr.ops))]
    halves = [_halves(x, fmt) for x in xs]
    out = []
    for h in range(2):
        vs = [hv[h] for hv in halves]
        if c.instr.name == "HADD2":
            out.append(f_add(vs[0], vs[1], fmt))
        elif c.instr.name == "HMUL2":
            out.append(f_mul(vs[0], vs[1], fmt))
        else:
            out.append(f_fma(vs[0], vs[1], vs[2], fmt))
    _put_bits(c, 0, w, _pack(out[0], out[1]), _scalar(*xs), lanes)


@value(isa.HMNMX2)
def _hmnmx2(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    fmt = _hfmt(c.instr.mods)
    a, b, p = fbits(w, c, 1, 0x80008000), fbits(w, c, 2, 0x80008000), c.get[3](w)
    ab, bb = _arr(a), _arr(b)
    out = []
    for h in range(2):
        sh = _U64(16 * h)
        ah, bh = (ab >> sh) & _U64(0xFFFF), (bb >> sh) & _U64(0xFFFF)
        out.append(f_minmax(decode(ah, fmt), decode(bh, fmt), ah, bh, fmt, _which(p), "NAN" in c.instr.mods))
    _put_bits(c, 0, w, _pack(out[0], out[1]), _scalar(a, b, p), lanes)


@value(isa.F2F)
def _f2f(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    """d = a converted (16-bit values in bits 0-15; a 16-bit result's bits 16-31 zero)."""
    dst, src = FMTS[c.instr.mods[0]], FMTS[c.instr.mods[1]]
    a = fbits(w, c, 1, src.sign)  # `-x`: the source's sign bit flipped
    if src is BF16 and dst is F32:
        # bf16 is fp32's upper half: the widening is exact for every value, and the H200 keeps a NaN's
        # sign and payload (0xffff -> 0xffff0000) rather than writing the canonical NaN
        _put_bits(c, 0, w, (_arr(a) & _U64(0xFFFF)) << _U64(16), _scalar(a), lanes)
        return
    _put_bits(c, 0, w, encode(decode(a, src), dst, "RN"), _scalar(a), lanes)


def _int_value(x: Val, unsigned: bool) -> np.ndarray:
    b = _arr(x) & _U64(M32)
    return b.astype(np.float64) if unsigned else b.astype(np.uint32).view(np.int32).astype(np.float64)


@value(isa.I2F, isa.I2FP)
def _i2f(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    mods = c.instr.mods
    fmt = F16 if "F16" in mods else BF16 if "BF16" in mods else F32
    a = c.get[1](w)
    _put_bits(c, 0, w, encode(_int_value(a, "U32" in mods), fmt, _fmode(mods)), _scalar(a), lanes)


@value(isa.F2I)
def _f2i(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    mods = c.instr.mods
    fmt = F16 if "F16" in mods else BF16 if "BF16" in mods else F32
    mode = next((x for x in mods if x in ("TRUNC", "FLOOR", "CEIL")), "RN")
    a = fbits(w, c, 1, fmt.sign)  # `-x`: the source's sign bit flipped
    _put_bits(c, 0, w, f_to_int(decode(a, fmt), mode, "U32" in mods), _scalar(a), lanes)


@value(isa.VIMNMX)
def _vimnmx(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    g = c.get
    k = 3 if len(g) == 6 else 1
    a, b, p = g[k](w), g[k + 1](w), g[k + 2](w)
    unsigned = "U32" in c.instr.mods
    av = _arr(a).astype(np.int64) if unsigned else _arr(a).astype(np.uint32).view(np.int32).astype(np.int64)
    bv = _arr(b).astype(np.int64) if unsigned else _arr(b).astype(np.uint32).view(np.int32).astype(np.int64)
    v = np.where(_which(p), np.minimum(av, bv), np.maximum(av, bv))
    _put_bits(c, 0, w, (v & M32).astype(np.uint64), _scalar(a, b, p), lanes)
    if len(g) == 6:
        c.put[1](w, True, lanes)
        c.put[2](w, True, lanes)


# -- warp communication ----------------------------------------------------------------------------------

FULL = 0xFFFFFFFF


def _active(lanes: Lanes) -> np.ndarray:
    return np.ones(32, dtype=bool) if lanes is None else np.asarray(lanes, dtype=bool)


def shfl_lanes(mode: str, b: Val, cval: Val) -> tuple[np.ndarray, np.ndarray]:
    """(source lane, in range) of every lane for SHFL.mode with lane operand b and clamp word c."""
    lane = np.arange(32, dtype=np.int64)
    bv = np.broadcast_to(_arr(b).astype(np.int64), (32,)) & 0x1F
    cv = np.broadcast_to(_arr(cval).astype(np.int64), (32,))
    clamp, seg = cv & 0x1F, (cv >> 8) & 0x1F
    max_lane = (lane & seg) | (clamp & ~seg)
    min_lane = lane & seg
    if mode == "UP":
        j = lane - bv
        ok = j >= max_lane
    elif mode == "DOWN":
        j = lane + bv
        ok = j <= max_lane
    elif mode == "BFLY":
        j = lane ^ bv
        ok = j <= max_lane
    else:
        j = min_lane | (bv & ~seg)
        ok = j <= max_lane
    return np.where(ok, j, lane), ok


def shfl_members(c: ValueInstr[W]) -> int:
    """The lanes a SHFL names as taking part (its sixth operand; the whole warp without one)."""
    ops = c.instr.ops
    return _imm(ops[5]) & FULL if len(ops) == 6 else FULL


@value(isa.SHFL)
def _shfl(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    a, b, cc = c.get[2](w), c.get[3](w), c.get[4](w)
    src, ok = shfl_lanes(c.instr.mods[0], b, cc)
    av = np.broadcast_to(_arr(a), (32,))
    v = av[src]
    if _scalar(a):  # every lane holds the same value: so does every lane's source
        c.put[1](w, int(v[0]), lanes)
    else:
        c.put[1](w, v.copy(), lanes)
    okv: Val = bool(ok[0]) if bool((ok == ok[0]).all()) else ok.copy()
    c.put[0](w, okv, lanes)


@value(isa.VOTE)
def _vote_r(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    p = c.get[-1](w)
    act = _active(lanes)
    pv = np.broadcast_to(np.asarray(p, dtype=bool), (32,)) & act
    res = bool(pv.any()) if "ANY" in c.instr.mods else bool((pv | ~act).all())
    if len(c.get) == 2:
        c.put[0](w, res, lanes)
        return
    c.put[0](w, int(np.packbits(pv, bitorder="little").view("<u4")[0]), lanes)
    c.put[1](w, res, lanes)


@value(isa.REDUX)
def _redux(m: Env, w: W, c: ValueInstr[W], lanes: Lanes) -> None:
    a = c.get[1](w)
    act = _active(lanes)
    mods = c.instr.mods
    v = np.broadcast_to(_arr(a), (32,))[act] & _U64(M32)
    op = next((x for x in mods if x in ("SUM", "MIN", "MAX", "OR", "XOR")), "AND")
    if op == "SUM":
        r = int(v.sum()) & M32
    elif op in ("MIN", "MAX"):
        sv = v.astype(np.uint32).view(np.int32).astype(np.int64) if "S32" in mods else v.astype(np.int64)
        r = int(sv.min() if op == "MIN" else sv.max()) & M32
    else:
        fn = {"AND": np.bitwise_and, "OR": np.bitwise_or, "XOR": np.bitwise_xor}[op]
        r = int(fn.reduce(v)) & M32
    c.put[0](w, r, lanes)
