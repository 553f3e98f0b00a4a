"""Element values as numpy holds them: the device bits of each element type and back, rounding to a
16-bit type, and the small-integer inputs exact checks use. The one place these conversions live
(the checker, the probes, the GEMM family and the benchmarks all use them).

bf16 has no numpy type: its values travel as uint16 bit patterns. Rounding is to nearest even,
as the hardware's `cvt.rn` and `F2FP` do.

The 8-bit floats travel as uint8 bit patterns: e4m3 (torch's float8_e4m3fn: 4 exponent bits, bias 7,
3 mantissa bits, no infinity, S.1111.111 is NaN, largest 448) and e5m2 (5 exponent bits, bias 15, 2
mantissa bits, IEEE-like: infinities and NaNs at exponent 31, largest 57344). Both have subnormals.
`fp8_to_f32` decodes every pattern exactly (float32 holds each value); `fp8_bits` rounds to nearest
even as torch's conversions do: e4m3 saturates (a magnitude past 448, infinity included, becomes
±448), e5m2 overflows to infinity past the largest finite value's rounding midpoint.
"""

from __future__ import annotations

import numpy as np

from warpy.target import canonical


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values -> bf16 bit patterns (uint16), rounding to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) -> float32 values (exact)."""
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


#: exponent bits, mantissa bits of each 8-bit float type
FP8_FORMATS = {"e4m3": (4, 3), "e5m2": (5, 2)}


def _fp8_table(dtype: str) -> np.ndarray:
    """The float64 value of each of the 256 bit patterns of `dtype` (NaN where the pattern is one)."""
    ebits, mbits = FP8_FORMATS[canonical(dtype)]
    bias = (1 << (ebits - 1)) - 1
    u = np.arange(256)
    sign = np.where(u >> 7, -1.0, 1.0)
    e = (u >> mbits) & ((1 << ebits) - 1)
    m = u & ((1 << mbits) - 1)
    mag = np.where(e == 0, m / (1 << mbits) * 2.0 ** (1 - bias), (1 + m / (1 << mbits)) * 2.0 ** (e - bias))
    val = sign * mag
    top = (1 << ebits) - 1
    if ebits == 4:  # e4m3fn: only S.1111.111 is NaN; the rest of the top exponent holds finite values
        val = np.where((e == top) & (m == (1 << mbits) - 1), np.nan, val)
    else:  # e5m2: the top exponent is infinity (mantissa 0) or NaN
        val = np.where(e == top, np.where(m == 0, sign * np.inf, np.nan), val)
    return val


def fp8_to_f32(bits: np.ndarray, dtype: str) -> np.ndarray:
    """8-bit float bit patterns (uint8) of `dtype` (e4m3 / e5m2) -> float32 values (exact)."""
    return _fp8_table(dtype).astype(np.float32)[np.asarray(bits).astype(np.uint8)]


def fp8_bits(x: np.ndarray, dtype: str) -> np.ndarray:
    """float values -> the uint8 bit patterns of `dtype` (e4m3 / e5m2), rounding to nearest even; NaN
    stays NaN; e4m3 saturates at ±448 (it has no infinity); in e5m2 a magnitude at or past the midpoint
    above the largest finite value (57344) is infinity."""
    d = canonical(dtype)
    table = _fp8_table(d)
    finite = np.flatnonzero(np.isfinite(table[:128]))  # the non-negative finite patterns, ascending in value
    vals = table[finite]
    step = vals[-1] - vals[-2]
    over = int(finite[-1]) if d == "e4m3" else 0x7C  # e4m3 saturates at its largest; e5m2: +infinity
    grid = np.append(vals, vals[-1] + step)  # the value one step past the largest rounds to `over`
    codes = np.append(finite, over)
    xa = np.asarray(x, dtype=np.float64)
    mag = np.abs(xa)
    hi = np.clip(np.searchsorted(grid, mag, side="left"), 1, len(grid) - 1)
    lo = hi - 1
    dlo, dhi = mag - grid[lo], grid[hi] - mag
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (codes[hi] % 2 == 0))
    out = np.where(pick_hi, codes[hi], codes[lo])
    out = np.where(mag >= grid[-1], over, out)
    out = np.where(np.signbit(xa), out | 0x80, out)
    out = np.where(np.isnan(xa), 0x7F, out)
    return out.astype(np.uint8)


def to_bits(x: np.ndarray, dtype: str) -> np.ndarray:
    """float values as the device holds them in `dtype` (bf16: uint16 bits; fp16: float16; fp32:
    float32; e4m3 / e5m2: uint8 bits), each rounded to nearest even."""
    d = canonical(dtype)
    if d in FP8_FORMATS:
        return fp8_bits(x, d)
    if d == "bf16":
        return bf16_bits(x)
    if d == "fp16":
        return np.asarray(x).astype(np.float16)
    if d == "fp32":
        return np.asarray(x).astype(np.float32)
    raise ValueError(f"no float conversion to {dtype}")


def bits16(x: np.ndarray, dtype: str) -> np.ndarray:
    """float values -> the uint16 bit patterns of the 16-bit `dtype` (bf16 or fp16)."""
    b = to_bits(x, dtype)
    return b.view(np.uint16) if b.dtype == np.float16 else b


def from_bits(raw: np.ndarray, dtype: str) -> np.ndarray:
    """The device representation of `dtype` (16-bit types as uint16 bits or float16, 8-bit floats as
    uint8 bits) -> float32."""
    d = canonical(dtype)
    if d in FP8_FORMATS:
        return fp8_to_f32(np.asarray(raw).view(np.uint8), d)
    if d == "bf16":
        return bf16_to_f32(np.asarray(raw).view(np.uint16))
    if d == "fp16":
        return np.asarray(raw).view(np.float16).astype(np.float32)
    if d == "fp32":
        return np.asarray(raw).view(np.float32)
    raise ValueError(f"no float conversion from {dtype}")


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """float values rounded to `dtype` and back (float64): what an output of that type holds."""
    if canonical(dtype) == "fp32":
        return np.asarray(x).astype(np.float32).astype(np.float64)
    return from_bits(to_bits(np.asarray(x, dtype=np.float32), dtype), dtype).astype(np.float64)


def small_ints(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Integers in [-3, 3] as float32: exact in every type, and sums of K of their products stay exact
    in fp32 for any K warpy runs."""
    return rng.integers(-3, 4, size=shape).astype(np.float32)


def output_spacing(ref: np.ndarray, dtype: str) -> np.ndarray:
    """The gap between neighbouring values of `dtype` at each |ref| (0 for fp32: exact)."""
    d = canonical(dtype)
    if d == "fp32":
        return np.zeros_like(ref)
    mant = {"bf16": 7, "fp16": 10}[d]
    a = np.abs(ref)
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    if d == "fp16":
        e = np.maximum(e, -14.0)
    return np.where(a > 0, np.exp2(e - mant), 0.0)


def compare_exact(got: np.ndarray, ref: np.ndarray, out_dtype: str) -> tuple[int, str]:
    """(mismatches, a one-line account) of `got` against the float64 reference: fp32 exact; bf16 /
    fp16 within half a step of the output type (one rounding of the exact value). NaN (an element
    never written, where the buffer starts as NaN) is wrong."""
    tol = output_spacing(ref, out_dtype) / 2
    bad = ~(np.abs(got - ref) <= tol)
    n = int(bad.sum())
    if not n:
        exact = canonical(out_dtype) == "fp32"
        return 0, f"exact ({got.size} elements{'' if exact else ', within the output rounding'})"
    idx = np.argwhere(bad)[:3]
    first = "; ".join(f"C[{i},{j}]={got[i, j]:g} want {ref[i, j]:g}" for i, j in idx)
    return n, f"{n} of {got.size} elements wrong: {first}"


__all__ = ["FP8_FORMATS", "fp8_to_f32", "fp8_bits", "bf16_bits", "bf16_to_f32", "to_bits", "bits16", "from_bits", "round_to", "small_ints", "output_spacing",
           "compare_exact"]
