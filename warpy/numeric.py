"""Element values as numpy holds them: the device bits of each element type and back, rounding to a
16-bit type, and the small-integer inputs exact checks use. The one place these conversions live
(the checker, the probes, the GEMM family and the benchmarks all use them).

bf16 has no numpy type: its values travel as uint16 bit patterns. Rounding is to nearest even,
as the hardware's `cvt.rn` and `F2FP` do.
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


def to_bits(x: np.ndarray, dtype: str) -> np.ndarray:
    """float values as the device holds them in `dtype` (bf16: uint16 bits; fp16: float16; fp32:
    float32), each rounded to nearest even."""
    d = canonical(dtype)
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
    """The device representation of `dtype` (16-bit types as uint16 bits or float16) -> float32."""
    d = canonical(dtype)
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


__all__ = ["bf16_bits", "bf16_to_f32", "to_bits", "bits16", "from_bits", "round_to", "small_ints", "output_spacing",
           "compare_exact"]
