"""The 8-bit float conversions of warpy.numeric (e4m3 = torch's float8_e4m3fn, e5m2): every bit pattern
decoded exactly, rounding to nearest even, e4m3's saturation and e5m2's infinities."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from warpy.numeric import fp8_bits, fp8_to_f32, from_bits, to_bits

# (pattern, value) pairs worked by hand from the formats (sign, exponent, mantissa; bias 7 / 15)
GOLDEN = {
    "e4m3": [(0x00, 0.0), (0x80, -0.0), (0x01, 2.0 ** -9), (0x07, 7 * 2.0 ** -9), (0x08, 2.0 ** -6), (0x38, 1.0),
             (0x39, 1.125), (0xB8, -1.0), (0x40, 2.0), (0x4C, 6.0), (0x77, 240.0),
             (0x78, 256.0), (0x7E, 448.0), (0xFE, -448.0)],
    "e5m2": [(0x00, 0.0), (0x01, 2.0 ** -16), (0x03, 3 * 2.0 ** -16), (0x04, 2.0 ** -14), (0x3C, 1.0), (0x3D, 1.25),
             (0xBC, -1.0), (0x40, 2.0), (0x7B, 57344.0), (0x7C, math.inf), (0xFC, -math.inf)],
}
NAN = {"e4m3": (0x7F, 0xFF), "e5m2": (0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF)}


@pytest.mark.parametrize("dtype", ["e4m3", "e5m2"])
def test_golden_patterns_decode_and_encode(dtype: str) -> None:
    for bits, value in GOLDEN[dtype]:
        got = float(fp8_to_f32(np.uint8(bits), dtype))
        assert got == value and math.copysign(1, got) == math.copysign(1, value), (dtype, hex(bits), got, value)
        assert int(fp8_bits(np.float32(value), dtype)) == bits
    for bits in NAN[dtype]:
        assert math.isnan(float(fp8_to_f32(np.uint8(bits), dtype)))
    assert int(fp8_bits(np.float32(np.nan), dtype)) & 0x7F == 0x7F


@pytest.mark.parametrize("dtype", ["e4m3", "e5m2"])
def test_every_finite_pattern_round_trips_and_values_ascend(dtype: str) -> None:
    codes = np.arange(256, dtype=np.uint8)
    vals = fp8_to_f32(codes, dtype)
    fin = np.isfinite(vals)
    assert (fp8_bits(vals[fin], dtype)[vals[fin] != 0] == codes[fin][vals[fin] != 0]).all()
    pos = vals[:128][np.isfinite(vals[:128])]
    assert (np.diff(pos) > 0).all()  # the patterns of a sign ascend with their value
    assert (to_bits(vals[fin], dtype) == fp8_bits(vals[fin], dtype)).all()
    assert (from_bits(codes, dtype)[fin] == vals[fin]).all()


def test_overflow_saturates_e4m3_and_is_infinite_in_e5m2() -> None:
    big = np.float32([449.0, 470.0, 1e6, np.inf, -np.inf])
    assert list(fp8_bits(big, "e4m3")) == [0x7E, 0x7E, 0x7E, 0x7E, 0xFE]
    # 57344 = 1.75 * 2^15; the next step would be 2^16, so 61440 is the midpoint: below it rounds down,
    # at it (to even: the infinity's pattern) and above it overflows
    assert list(fp8_bits(np.float32([61439.0, 61440.0, -1e6]), "e5m2")) == [0x7B, 0x7C, 0xFC]


@pytest.mark.parametrize("dtype", ["e4m3", "e5m2"])
@given(st.integers(0, 125), st.booleans())
def test_midpoints_round_to_the_even_pattern(dtype: str, code: int, neg: bool) -> None:
    """Half way between two neighbouring positive patterns goes to the even one; a hair either side to
    the nearer."""
    lo, hi = (float(v) for v in fp8_to_f32(np.uint8([code, code + 1]), dtype))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return
    mid = (lo + hi) / 2  # exact in float64
    sign = -1.0 if neg else 1.0
    want = code if code % 2 == 0 else code + 1
    assert int(fp8_bits(np.float64(sign * mid), dtype)) & 0x7F == want
    eps = (hi - lo) / 64
    assert int(fp8_bits(np.float64(sign * (mid - eps)), dtype)) & 0x7F == code
    assert int(fp8_bits(np.float64(sign * (mid + eps)), dtype)) & 0x7F == code + 1


@pytest.mark.parametrize("dtype,name", [("e4m3", "float8_e4m3fn"), ("e5m2", "float8_e5m2")])
def test_as_torch_converts(dtype: str, name: str) -> None:
    torch = pytest.importorskip("torch")
    td = getattr(torch, name)
    codes = torch.arange(256, dtype=torch.uint8)
    ref = codes.view(td).float().numpy()
    got = fp8_to_f32(codes.numpy(), dtype)
    assert ((ref == got) | (np.isnan(ref) & np.isnan(got))).all()
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(20000) * s for s in (1e-5, 1e-2, 1.0, 100.0, 3e4)]).astype(np.float32)
    if dtype == "e4m3":  # (older torch turns e4m3's overflow into NaN; newer saturates, as warpy does)
        x = x[np.abs(x) <= 448]
    tb = torch.from_numpy(x).to(td).view(torch.uint8).numpy()
    assert (tb == fp8_bits(x, dtype)).all()
