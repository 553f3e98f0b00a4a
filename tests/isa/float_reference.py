"""An independent reference for the float value rules: binary formats decoded field by field into
exact rationals (`fractions.Fraction`), the operation done exactly, and the result rounded once by
integer arithmetic into the destination format, with IEEE 754's special cases written out. Nothing
here uses numpy's float types or `warpy.isa.semantics`.

A value is ("nan",), ("inf", sign) or ("num", sign, magnitude) with magnitude a Fraction (0 for zeros).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Union

Value = Union[tuple[str], tuple[str, int], tuple[str, int, Fraction]]


class Format:
    def __init__(self, name: str, ebits: int, mbits: int) -> None:
        self.name, self.ebits, self.mbits = name, ebits, mbits
        self.bias = (1 << (ebits - 1)) - 1
        self.emin = 1 - self.bias
        self.emax = self.bias
        self.p = mbits + 1
        self.nan = (((1 << ebits) - 1) << mbits) | ((1 << mbits) - 1)  # NVIDIA's canonical NaN
        self.max = Fraction((1 << self.p) - 1) * Fraction(2) ** (self.emax - mbits)
        self.tiny = Fraction(2) ** self.emin


F32 = Format("f32", 8, 23)
F16 = Format("f16", 5, 10)
BF16 = Format("bf16", 8, 7)


def decode(bits: int, f: Format) -> Value:
    sign = (bits >> (f.ebits + f.mbits)) & 1
    e = (bits >> f.mbits) & ((1 << f.ebits) - 1)
    frac = bits & ((1 << f.mbits) - 1)
    if e == (1 << f.ebits) - 1:
        return ("nan",) if frac else ("inf", sign)
    if e == 0:
        return ("num", sign, Fraction(frac) * Fraction(2) ** (f.emin - f.mbits))
    return ("num", sign, Fraction((1 << f.mbits) | frac) * Fraction(2) ** (e - f.bias - f.mbits))


def _floor_log2(q: Fraction) -> int:
    e = q.numerator.bit_length() - q.denominator.bit_length()
    while Fraction(2) ** e > q:
        e -= 1
    while Fraction(2) ** (e + 1) <= q:
        e += 1
    return e


def encode(v: Value, f: Format, mode: str = "RN", ftz: bool = False) -> int:
    """The bits of v rounded into f (RN nearest even, RZ, RM, RP); ftz: a subnormal result is 0."""
    if v[0] == "nan":
        return f.nan
    sign = v[1]  # type: ignore[misc]
    top = sign << (f.ebits + f.mbits)
    inf = top | (((1 << f.ebits) - 1) << f.mbits)
    if v[0] == "inf":
        return inf
    q: Fraction = v[2]  # type: ignore[misc]
    if q == 0:
        return top
    e = max(_floor_log2(q), f.emin)
    quantum = Fraction(2) ** (e - f.mbits)
    n = q / quantum
    fl = n.numerator // n.denominator
    rem = n - fl
    if rem == 0:
        k = fl
    elif mode == "RN":
        k = fl + 1 if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2) else fl
    elif mode == "RZ":
        k = fl
    elif mode == "RM":
        k = fl + 1 if sign else fl
    else:
        k = fl if sign else fl + 1
    val = k * quantum
    if val > f.max:
        to_inf = mode == "RN" or (mode == "RM" and sign) or (mode == "RP" and not sign)
        if to_inf:
            return inf
        val = f.max
    if val == 0 or (ftz and val < f.tiny):
        return top
    e2 = _floor_log2(val)
    if e2 < f.emin:  # subnormal
        return top | int(val / Fraction(2) ** (f.emin - f.mbits))
    mant = val / Fraction(2) ** (e2 - f.mbits)
    return top | ((e2 + f.bias) << f.mbits) | (int(mant) - (1 << f.mbits))


def _flush(v: Value, f: Format) -> Value:
    if v[0] == "num" and 0 < v[2] < f.tiny:  # type: ignore[misc]
        return ("num", v[1], Fraction(0))  # type: ignore[misc]
    return v


def _signed(v: Value) -> Fraction:
    return -v[2] if v[1] else v[2]  # type: ignore[misc]


def add(a: Value, b: Value, mode: str) -> Value:
    if a[0] == "nan" or b[0] == "nan":
        return ("nan",)
    if a[0] == "inf" and b[0] == "inf":
        return a if a[1] == b[1] else ("nan",)  # type: ignore[misc]
    if a[0] == "inf":
        return a
    if b[0] == "inf":
        return b
    s = _signed(a) + _signed(b)
    if s == 0:
        if a[2] == 0 and b[2] == 0 and a[1] == b[1]:  # type: ignore[misc]
            return ("num", a[1], Fraction(0))  # type: ignore[misc]
        return ("num", 1 if mode == "RM" else 0, Fraction(0))
    return ("num", int(s < 0), abs(s))


def mul(a: Value, b: Value) -> Value:
    if a[0] == "nan" or b[0] == "nan":
        return ("nan",)
    sign = a[1] ^ b[1]  # type: ignore[misc]
    if a[0] == "inf" or b[0] == "inf":
        other = b if a[0] == "inf" else a
        if other[0] == "num" and other[2] == 0:  # type: ignore[misc]
            return ("nan",)
        return ("inf", sign)
    return ("num", sign, a[2] * b[2])  # type: ignore[misc]


def arith(op: str, f: Format, mode: str, ftz: bool, *bits: int) -> int:
    """The bits of a + b, a * b or a * b + c of f values, rounded once."""
    vals = [decode(b, f) for b in bits]
    if ftz:
        vals = [_flush(v, f) for v in vals]
    if op == "add":
        r = add(vals[0], vals[1], mode)
    elif op == "mul":
        r = mul(vals[0], vals[1])
    else:
        r = add(mul(vals[0], vals[1]), vals[2], mode)
    return encode(r, f, mode, ftz)


def convert(bits: int, src: Format, dst: Format, mode: str = "RN") -> int:
    if src is BF16 and dst is F32:
        # measured on the H200 (tests/gpu/test_isa_gpu.py, 2026-12-01): the widening is the bits moved
        # to the upper half, a NaN keeping its sign and payload (0xffff -> 0xffff0000)
        return (bits & 0xFFFF) << 16
    return encode(decode(bits, src), dst, mode)


def from_int(x: int, dst: Format, mode: str) -> int:
    return encode(("num", int(x < 0), Fraction(abs(x))), dst, mode)


def to_int(bits: int, src: Format, mode: str, unsigned: bool) -> int:
    """Round to an integer (RN nearest even, TRUNC, FLOOR, CEIL), saturate, NaN to 0; the 32-bit pattern."""
    v = decode(bits, src)
    lo, hi = (0, 2**32 - 1) if unsigned else (-(2**31), 2**31 - 1)
    if v[0] == "nan":
        return 0
    if v[0] == "inf":
        return (lo if v[1] else hi) & 0xFFFFFFFF  # type: ignore[misc]
    q = _signed(v)
    fl = q.numerator // q.denominator
    rem = q - fl
    if mode == "FLOOR" or rem == 0:
        k = fl
    elif mode == "CEIL":
        k = fl + 1
    elif mode == "TRUNC":
        k = fl if q >= 0 else fl + 1
    else:
        k = fl + 1 if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2) else fl
    return min(max(k, lo), hi) & 0xFFFFFFFF


def minmax(a_bits: int, b_bits: int, f: Format, want_min: bool, nan: bool = False, ftz: bool = False) -> int:
    """PTX's min/max: -0 < +0; one NaN: the other operand; both (or any, with .NaN): canonical NaN."""
    a, b = decode(a_bits, f), decode(b_bits, f)
    if ftz:
        if a != _flush(a, f):
            a_bits, a = a_bits & (1 << (f.ebits + f.mbits)), _flush(a, f)
        if b != _flush(b, f):
            b_bits, b = b_bits & (1 << (f.ebits + f.mbits)), _flush(b, f)
    if a[0] == "nan" and b[0] == "nan" or (nan and (a[0] == "nan" or b[0] == "nan")):
        return f.nan
    if a[0] == "nan":
        return b_bits
    if b[0] == "nan":
        return a_bits

    def key(v: Value) -> tuple[Fraction, int]:
        big = Fraction(2) ** 200
        x = (-big if v[1] else big) if v[0] == "inf" else _signed(v)  # type: ignore[misc]
        return (x, 0 if v[1] else 1)  # -0 sorts below +0

    if key(a) == key(b):
        return a_bits
    lt = key(a) < key(b)
    if want_min:
        return a_bits if lt else b_bits
    return b_bits if lt else a_bits


def compare(cmp: str, a_bits: int, b_bits: int, ftz: bool = False) -> bool:
    """setp's comparison of two fp32 values (ordered: false on NaN; U: true on NaN)."""
    a, b = decode(a_bits, F32), decode(b_bits, F32)
    if ftz:
        a, b = _flush(a, F32), _flush(b, F32)
    if a[0] == "nan" or b[0] == "nan":
        return cmp.endswith("U") or cmp == "NAN"
    if cmp == "NUM":
        return True
    if cmp == "NAN":
        return False
    big = Fraction(2) ** 200

    def x(v: Value) -> Fraction:
        return (-big if v[1] else big) if v[0] == "inf" else _signed(v)  # type: ignore[misc]

    xa, xb = x(a), x(b)
    base = cmp.rstrip("U") if cmp not in ("EQU", "NEU") else cmp[:2]
    return {"EQ": xa == xb, "NE": xa != xb, "LT": xa < xb, "LE": xa <= xb, "GT": xa > xb, "GE": xa >= xb}[base]
