"""The fp32 arithmetic value rules (`warpy.isa.semantics`), run through the isa's interpreter on bit
patterns from the whole fp32 domain (NaN, ±inf, denormals, signed zeros included), against an
independent reference: the operation in Python's binary64 then rounded once to binary32, which is
the correctly rounded binary32 result for + and × (binary64 has more than 2·24 + 2 bits, so the
double rounding cannot differ)."""

from __future__ import annotations

import math
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.isa import interp
from warpy.isa.families import alu
from warpy.isa.operands import R

EDGES = [0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000,
         0xFF800000, 0x7FC00000, 0x3F800000, 0xBF800000, 0x34000000, 0x4B800000]
bits32 = st.one_of(st.sampled_from(EDGES), st.integers(0, 2**32 - 1))


def f32(bits: int) -> float:
    return float(struct.unpack("<f", struct.pack("<I", bits))[0])


def bits(x: float) -> int:
    try:
        return int(struct.unpack("<I", struct.pack("<f", x))[0])
    except OverflowError:  # beyond binary32's range: rounds to infinity
        return 0x7F800000 if x > 0 else 0xFF800000


def reference(op: str, a: int, b: int) -> int:
    x, y = f32(a), f32(b)
    if op == "add":
        r = x + y if not (math.isinf(x) and math.isinf(y) and x != y) else math.nan
    else:
        r = x * y if not ((math.isinf(x) and y == 0) or (math.isinf(y) and x == 0)) else math.nan
    return bits(r)


def run(op: str, a: int, b: int) -> int:
    build = alu.fadd if op == "add" else alu.fmul
    m = interp.Machine()
    m.v = {"a": a, "b": b}
    m.step(build(R("d"), R("a"), R("b")))
    return int(m.v["d"])


def same(x: int, y: int) -> bool:
    nan = lambda v: (v & 0x7F800000) == 0x7F800000 and v & 0x007FFFFF  # noqa: E731
    return bool(nan(x) and nan(y)) or x == y


@settings(max_examples=3000, derandomize=True, deadline=None)
@given(op=st.sampled_from(["add", "mul"]), a=bits32, b=bits32)
def test_fp32_add_and_mul_are_correctly_rounded(op: str, a: int, b: int) -> None:
    got, want = run(op, a, b), reference(op, a, b)
    assert same(got, want), (op, hex(a), hex(b), hex(got), hex(want))


def test_golden_values() -> None:
    assert run("mul", 0x3FC00000, 0x40000000) == 0x40400000  # 1.5 * 2 = 3
    assert run("add", 0x7F7FFFFF, 0x7F7FFFFF) == 0x7F800000  # overflow to +inf
    assert run("mul", 0x00000001, 0x3F000000) == 0x00000000  # the smallest denormal halved: ties to even, 0
    assert run("mul", 0x7F800000, 0x00000000) & 0x7FC00000 == 0x7FC00000  # inf * 0 = NaN
