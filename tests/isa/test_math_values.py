"""The value rules of the float, packed 16-bit, conversion and warp instructions
(`warpy.isa.semantics`), run through the isa's interpreter 32 lanes at a time on bit patterns from
whole domains (NaN, ±inf, subnormals, signed zeros, ties), against independent references:
`float_reference` (exact rationals, rounding by integer arithmetic, IEEE 754's special cases written
out) for every rounding mode and format, and numpy where numpy has the operation (fp32 and fp16
arithmetic to nearest, conversions to fp16, integer to float). MUFU is checked against its PTX error
bounds and special-case tables. NaN results are NVIDIA's canonical NaN, so bits compare exactly.
"""

from __future__ import annotations

import math
import struct
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import float_reference as ref
from warpy.isa import interp
from warpy.isa.families import alu
from warpy.isa.families.typed import BF16, BF16x2, F16, F16x2, F32, S32, U32
from warpy.isa.instr import Instr
from warpy.isa.operands import PT, P, R
from warpy.isa.semantics import MUFU_BOUNDS, mufu_agrees

SETTINGS = settings(max_examples=60, derandomize=True, deadline=None)

F32_EDGES = [0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000, 0x80800000,
             0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7FFFFFFF, 0xFFC00001, 0x3F800000,
             0xBF800000, 0x3F000000, 0x34000000, 0x4B800000, 0x3FFFFFFF, 0x33800000, 0x00400000, 0x7F000000]
F16_EDGES = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0x7FFF,
             0x3C00, 0xBC00, 0x3800, 0x1400, 0x0200, 0x7800]
BF16_EDGES = [0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x7FC0, 0x7FFF,
              0x3F80, 0xBF80, 0x3F00, 0x3C00, 0x0040, 0x7F00]

f32_bits = st.one_of(st.sampled_from(F32_EDGES), st.integers(0, 2**32 - 1),
                     st.integers(0x3F000000, 0x40800000), st.integers(0, 0x00FFFFFF).map(lambda x: x | (x & 1) << 31))
f16_bits = st.one_of(st.sampled_from(F16_EDGES), st.integers(0, 0xFFFF), st.integers(0x3000, 0x4400))
bf16_bits = st.one_of(st.sampled_from(BF16_EDGES), st.integers(0, 0xFFFF), st.integers(0x3E00, 0x4100))


def lanes(elem: st.SearchStrategy[Any], n: int = 1) -> st.SearchStrategy[list[Any]]:
    """32 lanes of n-tuples."""
    return st.lists(st.tuples(*[elem] * n), min_size=32, max_size=32)


def run(instr: Instr, regs: dict[str, list[int]], out: str = "d") -> list[int]:
    """Run one instruction on 32 lanes (register name -> one value a lane); the lanes of `out`."""
    m = interp.Machine()
    m.v = {k: np.array(v, dtype=np.uint64) for k, v in regs.items()}
    m.step(instr)
    got = m.v[out]
    return [int(x) for x in np.broadcast_to(np.asarray(got, dtype=np.uint64), (32,))]


def check(got: list[int], want: list[int], what: Any, *ins: list[tuple[int, ...]]) -> None:
    bad = [k for k in range(32) if got[k] != want[k]]
    assert not bad, (what, [tuple(hex(x) for x in t) for t in ins[0]][bad[0]], hex(got[bad[0]]), hex(want[bad[0]]))


def pack(lo: int, hi: int) -> int:
    return (hi & 0xFFFF) << 16 | (lo & 0xFFFF)


# -- fp32 arithmetic: every rounding mode, with and without FTZ ------------------------------------------

MODES = ["RN", "RZ", "RM", "RP"]


@SETTINGS
@given(op=st.sampled_from(["add", "mul", "fma"]), mode=st.sampled_from(MODES), ftz=st.booleans(), xs=lanes(f32_bits, 3))
def test_fp32_arithmetic_is_correctly_rounded_in_every_mode(op: str, mode: str, ftz: bool, xs: list[tuple[int, ...]]) -> None:
    a, b, c = (F32(n) for n in "abc")
    instr = {"add": lambda: alu.fadd(F32("d"), a, b, rnd=mode, ftz=ftz), "mul": lambda: alu.fmul(F32("d"), a, b, rnd=mode, ftz=ftz),
             "fma": lambda: alu.ffma(F32("d"), a, b, c, rnd=mode, ftz=ftz)}[op]()
    got = run(instr, {n: [x[k] for x in xs] for k, n in enumerate("abc")})
    nops = 3 if op == "fma" else 2
    want = [ref.arith(op, ref.F32, mode, ftz, *x[:nops]) for x in xs]
    check(got, want, (op, mode, ftz), xs)


@SETTINGS
@given(xs=lanes(f32_bits, 2))
def test_fp32_add_and_mul_to_nearest_are_numpys(xs: list[tuple[int, ...]]) -> None:
    fa = np.array([x[0] for x in xs], dtype=np.uint32).view(np.float32)
    fb = np.array([x[1] for x in xs], dtype=np.uint32).view(np.float32)
    with np.errstate(all="ignore"):
        for build, r in ((alu.fadd, fa + fb), (alu.fmul, fa * fb)):
            want = [0x7FFFFFFF if math.isnan(v) else int(u) for v, u in zip(r, r.view(np.uint32))]
            got = run(build(F32("d"), F32("a"), F32("b")), {"a": [x[0] for x in xs], "b": [x[1] for x in xs]})
            check(got, want, build.__name__, xs)


@SETTINGS
@given(xs=lanes(f32_bits, 2))
def test_negated_operands_flip_the_sign_bit(xs: list[tuple[int, ...]]) -> None:
    """`FADD d, a, -b` is a - b: b's sign flipped (NaNs too), not an integer negation."""
    got = run(alu.fadd(F32("d"), F32("a"), -F32("b")), {"a": [x[0] for x in xs], "b": [x[1] for x in xs]})
    check(got, [ref.arith("add", ref.F32, "RN", False, x[0], x[1] ^ 0x80000000) for x in xs], "sub", xs)
    got = run(alu.ffma(F32("d"), -F32("a"), F32("b"), -F32("RZ")), {"a": [x[0] for x in xs], "b": [x[1] for x in xs]})
    check(got, [ref.arith("fma", ref.F32, "RN", False, x[0] ^ 0x80000000, x[1], 0x80000000) for x in xs], "-a*b-0", xs)


@SETTINGS
@given(xs=lanes(f32_bits, 2), nan=st.booleans(), ftz=st.booleans(), want_min=st.booleans())
def test_fp32_min_and_max(xs: list[tuple[int, ...]], nan: bool, ftz: bool, want_min: bool) -> None:
    build = alu.fmin if want_min else alu.fmax
    got = run(build(F32("d"), F32("a"), F32("b"), nan=nan, ftz=ftz), {"a": [x[0] for x in xs], "b": [x[1] for x in xs]})
    check(got, [ref.minmax(x[0], x[1], ref.F32, want_min, nan, ftz) for x in xs], (want_min, nan, ftz), xs)


@SETTINGS
@given(xs=lanes(f32_bits, 2), cmp=st.sampled_from(alu.FCMPS), ftz=st.booleans())
def test_fp32_compares_and_select(xs: list[tuple[int, ...]], cmp: str, ftz: bool) -> None:
    m = interp.Machine()
    m.v = {"a": np.array([x[0] for x in xs], dtype=np.uint64), "b": np.array([x[1] for x in xs], dtype=np.uint64)}
    m.step(alu.fsetp(cmp, P("p"), F32("a"), F32("b"), ftz=ftz))
    m.step(alu.fsel(F32("d"), F32("a"), F32("b"), P("p")))
    want = [ref.compare(cmp, x[0], x[1], ftz) for x in xs]
    assert [bool(v) for v in np.broadcast_to(m.v["p"], (32,))] == want, cmp
    assert [int(v) for v in np.broadcast_to(m.v["d"], (32,))] == [x[0] if w else x[1] for x, w in zip(xs, want)]


# -- MUFU: within PTX's bounds, special cases exactly --------------------------------------------------

MUFU_SPECIALS = {  # PTX's tables (inputs flushed: a subnormal is a zero of its sign)
    "EX2": [(0xFF800000, 0x00000000), (0x80000000, 0x3F800000), (0x00000000, 0x3F800000), (0x7F800000, 0x7F800000),
            (0x80000001, 0x3F800000)],
    "RSQ": [(0xFF800000, 0x7FFFFFFF), (0xBF800000, 0x7FFFFFFF), (0x80000000, 0xFF800000), (0x00000000, 0x7F800000),
            (0x7F800000, 0x00000000), (0x00000001, 0x7F800000)],
    "RCP": [(0xFF800000, 0x80000000), (0x80000000, 0xFF800000), (0x00000000, 0x7F800000), (0x7F800000, 0x00000000),
            (0x807FFFFF, 0xFF800000)],
    "LG2": [(0xFF800000, 0x7FFFFFFF), (0xBF800000, 0x7FFFFFFF), (0x80000000, 0xFF800000), (0x00000000, 0xFF800000),
            (0x7F800000, 0x7F800000), (0x3F800000, 0x00000000)],
}


@pytest.mark.parametrize("func", alu.MUFU_FUNCS)
def test_mufu_special_cases_are_ptxs(func: str) -> None:
    cases = MUFU_SPECIALS[func] + [(0x7FC00000, 0x7FFFFFFF)]
    xs = [c[0] for c in cases]
    got = run(alu.mufu(func, F32("d"), F32("a")), {"a": xs + [xs[0]] * (32 - len(xs))})
    assert [hex(g) for g in got[:len(cases)]] == [hex(c[1]) for c in cases]
    assert all(mufu_agrees(func, x, g) for x, g in zip(xs, got))


def _true(func: str, x: float) -> float:
    import mpmath

    mpmath.mp.prec = 80
    fn: dict[str, Callable[[Any], Any]] = {"EX2": lambda v: mpmath.power(2, v), "RSQ": lambda v: 1 / mpmath.sqrt(v),
                                           "RCP": lambda v: 1 / v, "LG2": lambda v: mpmath.log(v, 2)}
    return float(fn[func](mpmath.mpf(x)))


@SETTINGS
@given(func=st.sampled_from(alu.MUFU_FUNCS), xs=lanes(f32_bits))
def test_mufu_values_are_within_ptxs_bounds(func: str, xs: list[tuple[int, ...]]) -> None:
    """The checker's value is the exact function rounded to nearest (80-bit mpmath as the truth), so it
    is within PTX's bound; and the bound test itself refuses a value two bounds away."""
    a = [x[0] for x in xs]
    got = run(alu.mufu(func, F32("d"), F32("a")), {"a": a})
    for x, g in zip(a, got):
        assert mufu_agrees(func, x, g), (func, hex(x), hex(g))
        xv = struct.unpack("<f", struct.pack("<I", x))[0]
        if abs(xv) < 2.0**-126:
            xv = math.copysign(0.0, xv)
        if math.isnan(xv) or (xv <= 0 and func in ("RSQ", "LG2")) or (func == "RCP" and xv == 0):
            continue
        t = _true(func, xv)
        gv = struct.unpack("<f", struct.pack("<I", g))[0]
        if math.isinf(t) or t == 0 or abs(t) < 2.0**-126 or abs(t) > 3.4e38:
            continue
        assert abs(gv - t) <= abs(t) * 2.0**-23, (func, xv, gv, t)  # to nearest: within half an ulp
        kind, bound = MUFU_BOUNDS[func]
        off = t * (1 + 2 * (2.0**bound if kind == "rel" else bound * 2.0**-23)) if func != "LG2" else t + 2 * 2.0**-22 * max(1.0, abs(t))
        off_bits = struct.unpack("<I", struct.pack("<f", off))[0]
        assert not mufu_agrees(func, x, off_bits), (func, xv, off)


# -- packed 16-bit arithmetic, min/max ------------------------------------------------------------------


@SETTINGS
@given(op=st.sampled_from(["add", "mul", "fma"]), bf=st.booleans(), data=st.data())
def test_packed_arithmetic_rounds_each_half_to_nearest(op: str, bf: bool, data: st.DataObject) -> None:
    fmt, elem = (ref.BF16, bf16_bits) if bf else (ref.F16, f16_bits)
    xs = data.draw(lanes(elem, 6))
    T = BF16x2 if bf else F16x2
    a, b, c = T("a"), T("b"), T("c")
    instr = {"add": lambda: alu.hadd2(T("d"), a, b), "mul": lambda: alu.hmul2(T("d"), a, b),  # type: ignore[arg-type]
             "fma": lambda: alu.hfma2(T("d"), a, b, c)}[op]()  # type: ignore[arg-type]
    regs = {n: [pack(x[k], x[k + 3]) for x in xs] for k, n in enumerate("abc")}
    got = run(instr, regs)
    nops = 3 if op == "fma" else 2
    want = [pack(ref.arith(op, fmt, "RN", False, *x[0:nops]), ref.arith(op, fmt, "RN", False, *x[3:3 + nops])) for x in xs]
    check(got, want, (op, fmt.name), xs)


@SETTINGS
@given(xs=lanes(f16_bits, 2))
def test_fp16_add_and_mul_are_numpys(xs: list[tuple[int, ...]]) -> None:
    ha = np.array([x[0] for x in xs], dtype=np.uint16).view(np.float16)
    hb = np.array([x[1] for x in xs], dtype=np.uint16).view(np.float16)
    with np.errstate(all="ignore"):
        for build, r in ((alu.hadd2, ha + hb), (alu.hmul2, ha * hb)):
            want = [0x7FFF if math.isnan(v) else int(u) for v, u in zip(r, r.view(np.uint16))]
            got = run(build(F16x2("d"), F16x2("a"), F16x2("b")), {"a": [x[0] for x in xs], "b": [x[1] for x in xs]})
            check([g & 0xFFFF for g in got], want, build.__name__, xs)


@SETTINGS
@given(bf=st.booleans(), want_min=st.booleans(), nan=st.booleans(), data=st.data())
def test_packed_min_and_max(bf: bool, want_min: bool, nan: bool, data: st.DataObject) -> None:
    fmt, elem = (ref.BF16, bf16_bits) if bf else (ref.F16, f16_bits)
    xs = data.draw(lanes(elem, 4))
    T = BF16x2 if bf else F16x2
    build = alu.hmin2 if want_min else alu.hmax2
    got = run(build(T("d"), T("a"), T("b"), nan=nan), {"a": [pack(x[0], x[2]) for x in xs], "b": [pack(x[1], x[3]) for x in xs]})  # type: ignore[arg-type]
    want = [pack(ref.minmax(x[0], x[1], fmt, want_min, nan), ref.minmax(x[2], x[3], fmt, want_min, nan)) for x in xs]
    check(got, want, (fmt.name, want_min, nan), xs)


# -- conversions ------------------------------------------------------------------------------------------

FMT = {F32: ref.F32, F16: ref.F16, BF16: ref.BF16}
EDGE_OF = {F32: f32_bits, F16: f16_bits, BF16: bf16_bits}


@SETTINGS
@given(pair=st.sampled_from([(F32, F16), (F32, BF16), (F16, F32), (BF16, F32), (F16, BF16), (BF16, F16)]), data=st.data())
def test_f2f_converts_exactly_or_to_nearest_even(pair: tuple[type, type], data: st.DataObject) -> None:
    dst, src = pair
    xs = data.draw(lanes(EDGE_OF[src]))
    garbage = data.draw(st.integers(0, 0xFFFF))  # bits 16-31 of a 16-bit source are not read
    a = [x[0] | (garbage << 16 if src is not F32 else 0) for x in xs]
    got = run(alu.f2f(dst("d"), src("a")), {"a": a})
    check(got, [ref.convert(x[0], FMT[src], FMT[dst]) for x in xs], (src.__name__, dst.__name__), xs)


@SETTINGS
@given(xs=lanes(f32_bits, 2), bf=st.booleans(), rz=st.booleans())
def test_f2fp_packs_two_conversions(xs: list[tuple[int, ...]], bf: bool, rz: bool) -> None:
    """bf16 round-to-nearest-even (and toward zero) of fp32, exactly."""
    fmt = ref.BF16 if bf else ref.F16
    got = run(alu.f2fp((BF16x2 if bf else F16x2)("d"), F32("a"), F32("b"), rnd="RZ" if rz else "RN"),
              {"a": [x[0] for x in xs], "b": [x[1] for x in xs]})
    mode = "RZ" if rz else "RN"
    check(got, [pack(ref.convert(x[1], ref.F32, fmt, mode), ref.convert(x[0], ref.F32, fmt, mode)) for x in xs], (bf, rz), xs)


@SETTINGS
@given(xs=lanes(f32_bits))
def test_fp32_to_fp16_is_numpys(xs: list[tuple[int, ...]]) -> None:
    f = np.array([x[0] for x in xs], dtype=np.uint32).view(np.float32)
    with np.errstate(all="ignore"):
        h = f.astype(np.float16)
    want = [0x7FFF if math.isnan(v) else int(u) for v, u in zip(h, h.view(np.uint16))]
    check(run(alu.f2f(F16("d"), F32("a")), {"a": [x[0] for x in xs]}), want, "f32->f16", xs)


ints = st.one_of(st.sampled_from([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x01000001, 0x00FFFFFF, 65504, 65520, 0xFFFF0000]),
                 st.integers(0, 2**32 - 1))


@SETTINGS
@given(xs=lanes(ints), dst=st.sampled_from([F32, F16, BF16]), unsigned=st.booleans(), mode=st.sampled_from(MODES))
def test_int_to_float_rounds_in_every_mode(xs: list[tuple[int, ...]], dst: type, unsigned: bool, mode: str) -> None:
    src = U32 if unsigned else S32
    got = run(alu.i2f(dst("d"), src("a"), rnd=mode), {"a": [x[0] for x in xs]})
    val = (lambda v: v) if unsigned else (lambda v: v - 2**32 if v >> 31 else v)
    check(got, [ref.from_int(val(x[0]), FMT[dst], mode) for x in xs], (dst.__name__, unsigned, mode), xs)
    if dst is F32 and mode == "RN":  # numpy's conversion, where it has one
        arr = np.array([x[0] for x in xs], dtype=np.uint32)
        np_f = (arr if unsigned else arr.view(np.int32)).astype(np.float32)
        assert got == [int(u) for u in np_f.view(np.uint32)]


@SETTINGS
@given(src=st.sampled_from([F32, F16, BF16]), unsigned=st.booleans(), mode=st.sampled_from(["RN", "TRUNC", "FLOOR", "CEIL"]),
       data=st.data())
def test_float_to_int_rounds_saturates_and_zeroes_nan(src: type, unsigned: bool, mode: str, data: st.DataObject) -> None:
    xs = data.draw(lanes(EDGE_OF[src]))
    got = run(alu.f2i((U32 if unsigned else S32)("d"), src("a"), rnd=mode), {"a": [x[0] for x in xs]})
    check(got, [ref.to_int(x[0], FMT[src], mode, unsigned) for x in xs], (src.__name__, unsigned, mode), xs)


def test_golden_conversions() -> None:
    one = [0] * 32
    assert run(alu.f2fp(BF16x2("d"), F32("a"), F32("b")), {"a": [0x3F808000] * 32, "b": [0x3F818000] * 32})[0] == 0x3F803F82  # ties to even
    assert run(alu.f2f(BF16("d"), F32("a")), {"a": [0x7F7FFFFF] * 32})[0] == 0x7F80  # max fp32 rounds up to bf16 inf
    assert run(alu.f2i(S32("d"), F32("a")), {"a": [0x4F000000] * 32})[0] == 0x7FFFFFFF  # 2^31 saturates
    assert run(alu.f2i(U32("d"), F32("a")), {"a": [0xBF800000] * 32})[0] == 0  # -1 to unsigned: 0
    assert run(alu.f2i(S32("d"), F32("a"), rnd="RN"), {"a": [0x3FC00000] * 32})[0] == 2  # 1.5 -> 2
    assert run(alu.i2f(F32("d"), S32("a")), {"a": [0x01000001] * 32})[0] == 0x4B800000  # 2^24 + 1 -> 2^24 (even)
    assert run(alu.i2f(F16("d"), U32("a")), {"a": [65520] * 32})[0] == 0x7C00  # past fp16's max: inf
    assert one


# -- integers, shuffles, votes, reductions -------------------------------------------------------------------


@SETTINGS
@given(xs=lanes(ints, 2), unsigned=st.booleans(), want_min=st.booleans(), arch=st.sampled_from(["sm_90a", "sm_100a"]))
def test_integer_min_and_max(xs: list[tuple[int, ...]], unsigned: bool, want_min: bool, arch: str) -> None:
    build = alu.imin if want_min else alu.imax
    got = run(build(R("d"), R("a"), R("b"), unsigned=unsigned, arch=arch), {"a": [x[0] for x in xs], "b": [x[1] for x in xs]})
    key = (lambda v: v) if unsigned else (lambda v: v - 2**32 if v >> 31 else v)
    pick = min if want_min else max
    assert got == [pick(x[0], x[1], key=key) for x in xs]


def ptx_shfl(mode: str, lane: int, b: int, c: int) -> tuple[int, bool]:
    """PTX's shfl.sync pseudo-code (the ISA's description, written out again)."""
    bval, cval, segmask = b & 0x1F, c & 0x1F, (c >> 8) & 0x1F
    max_lane = (lane & segmask) | (cval & ~segmask)
    min_lane = lane & segmask
    if mode == "UP":
        j, pval = lane - bval, lane - bval >= max_lane
    elif mode == "DOWN":
        j, pval = lane + bval, lane + bval <= max_lane
    elif mode == "BFLY":
        j, pval = lane ^ bval, (lane ^ bval) <= max_lane
    else:
        j = min_lane | (bval & ~segmask)
        pval = j <= max_lane
    return (j if pval else lane), pval


@SETTINGS
@given(mode=st.sampled_from(["BFLY", "IDX", "DOWN", "UP"]), b=st.integers(0, 31),
       c=st.sampled_from([0x1F, 0x0, 0x101F, 0x181F, 0x1C1F, 0x3, 0x10F]), vals=st.lists(st.integers(0, 2**32 - 1), min_size=32, max_size=32))
def test_shuffles_read_the_lane_ptx_names(mode: str, b: int, c: int, vals: list[int]) -> None:
    m = interp.Machine()
    m.v = {"a": np.array(vals, dtype=np.uint64)}
    m.step(alu.shfl(mode, R("d"), R("a"), b, c, p=P("p")))
    want = [ptx_shfl(mode, lane, b, c) for lane in range(32)]
    assert [int(x) for x in m.v["d"]] == [vals[j] for j, _ in want]
    assert [bool(x) for x in np.broadcast_to(m.v["p"], (32,))] == [ok for _, ok in want]


@SETTINGS
@given(vals=st.lists(st.integers(0, 2**32 - 1), min_size=32, max_size=32), preds=st.lists(st.booleans(), min_size=32, max_size=32))
def test_votes_and_redux_are_numpys(vals: list[int], preds: list[bool]) -> None:
    m = interp.Machine()
    m.v = {"a": np.array(vals, dtype=np.uint64), "q": np.array(preds)}
    for ins in (alu.ballot(R("bal"), P("q")), alu.vote_all(P("all"), P("q")), alu.vote_any(P("any"), P("q")),
                alu.redux("SUM", alu.UR("s"), R("a")), alu.redux("MAX", alu.UR("mx"), R("a"), signed=True),
                alu.redux("MIN", alu.UR("mn"), R("a")), alu.redux("XOR", alu.UR("x"), R("a")), alu.redux("AND", alu.UR("n"), R("a"))):
        m.step(ins)
    a = np.array(vals, dtype=np.uint64)
    assert m.v["bal"] == int(np.packbits(np.array(preds), bitorder="little").view("<u4")[0])
    assert bool(m.v["all"]) == all(preds) and bool(m.v["any"]) == any(preds)
    assert m.v["s"] == int(a.sum()) & 0xFFFFFFFF
    assert m.v["mx"] == int(a.astype(np.uint32).view(np.int32).max()) & 0xFFFFFFFF
    assert m.v["mn"] == int(a.min()) and m.v["x"] == int(np.bitwise_xor.reduce(a)) and m.v["n"] == int(np.bitwise_and.reduce(a))


@SETTINGS
@given(vals=st.lists(st.sampled_from(F32_EDGES[:14] + [0x3F800000, 0x40000000, 0xC0400000]) | st.integers(0x3E000000, 0x42000000),
                     min_size=32, max_size=32))
def test_the_butterfly_sum_and_max_are_the_same_on_every_lane(vals: list[int]) -> None:
    """The 5-step butterfly: every lane ends with the same bits, the sum added in the butterfly's order
    (reference: the same order of exactly rounded adds) and the max of PTX's max."""
    from warpy.isa.program import Program
    from warpy.isa.units.warp import warp_reduce

    p = Program("w", "sm_90a", threads=32)
    x, y = F32.of(p.r("x")), F32.of(p.r("y"))
    p.emit(alu.mov(x, 0))
    p.emit(alu.mov(y, 0))
    warp_reduce(p, x, "sum")
    warp_reduce(p, y, "max")
    body = [i for i in p.kernel().instrs()][2:]
    m = interp.Machine()
    m.v = {"x": np.array(vals, dtype=np.uint64), "y": np.array(vals, dtype=np.uint64)}
    for ins in body:
        m.step(ins)
    cur = list(vals)
    for mask in (16, 8, 4, 2, 1):
        cur = [ref.arith("add", ref.F32, "RN", False, cur[k], cur[k ^ mask]) for k in range(32)]
    assert [int(v) for v in np.broadcast_to(m.v["x"], (32,))] == cur
    best = vals[0]
    for v in vals[1:]:
        best = ref.minmax(best, v, ref.F32, False)
    got = {int(v) for v in np.broadcast_to(m.v["y"], (32,))}
    assert got == {best} or (all(g == 0x7FFFFFFF for g in got) and best == ref.F32.nan)
