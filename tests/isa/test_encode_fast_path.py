"""`semantics.encode`'s fast paths give the bits of the general exact path: binary32 (round to nearest
even, no flush, no residual: the CPU's own conversion) over values drawn across every binade,
subnormals, the overflow edge, zeros of both signs, infinities and NaN; bf16 (the same rounding) over
values exact in binary32 (an fp32 register's, what F2FP packs), the same edges."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import warpy.isa.semantics as sem

_EDGES = [0.0, -0.0, np.inf, -np.inf, np.nan, sem.F32.max, -sem.F32.max, 2.0**-149, 2.0**-150, 2.0**-151, 3 * 2.0**-151,
          2.0**-126, 2.0**-126 - 2.0**-150, sem.F32.max + 2.0**103, sem.F32.max + 2.0**103 - 2.0**50, 1 + 2.0**-24,
          1 + 3 * 2.0**-24, 1 - 2.0**-25]


def _general(x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return sem._encode_exact(x, sem.F32, "RN", False, None)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=1, max_size=32),
       st.integers(-160, 140))
def test_fast_path_equals_the_general_path(values: list[float], scale: int) -> None:
    x = np.array(values + _EDGES, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        x = np.concatenate([x, np.ldexp(np.array(values), scale)])
    fast = sem.encode(x, sem.F32)
    assert np.array_equal(fast, _general(x)), [(v, hex(int(a)), hex(int(b))) for v, a, b in zip(x, fast, _general(x)) if a != b][:4]


def test_literal_bits() -> None:
    x = np.array([1.0, -0.0, 1 + 2.0**-24, 1 + 3 * 2.0**-24, 2.0**-150, 3 * 2.0**-151, np.nan, 4e38, -4e38])
    want = [0x3F800000, 0x80000000, 0x3F800000, 0x3F800002, 0x0, 0x1, 0x7FFFFFFF, 0x7F800000, 0xFF800000]
    assert [int(b) for b in sem.encode(x, sem.F32)] == want


def _bf16_general(x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return sem._encode_exact(x, sem.BF16, "RN", False, None)


_BF16_EDGES = [0.0, -0.0, np.inf, -np.inf, np.nan, 1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-8 + 2.0**-23, 2.0**-133,
               2.0**-134, 3 * 2.0**-134, 2.0**-149, 2.0**-126 - 2.0**-149, float(sem.F32.max), -float(sem.F32.max),
               2.0**127 * (2 - 2.0**-8), 2.0**127 * (2 - 2.0**-8 - 2.0**-9)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=1, max_size=32),
       st.integers(-40, 40))
def test_bf16_fast_path_equals_the_general_path(values: list[float], scale: int) -> None:
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        scaled = np.ldexp(np.array(values, dtype=np.float32), scale).astype(np.float32)  # still binary32
    x = np.concatenate([np.array(values + _BF16_EDGES, dtype=np.float64), scaled.astype(np.float64)])
    fast = sem.encode(x, sem.BF16)
    want = _bf16_general(x)
    assert np.array_equal(fast, want), [(v, hex(int(a)), hex(int(b))) for v, a, b in zip(x, fast, want) if a != b][:4]


def test_bf16_literal_bits_and_the_exact_path_for_wider_values() -> None:
    # ties to even (1 + 2^-8 down, 1 + 3·2^-8 up), a tie broken by a lower bit, overflow to infinity,
    # the smallest subnormal's half (a tie: to even, zero)
    x = np.array([1.0, -0.0, 1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-8 + 2.0**-23, 2.0**127 * (2 - 2.0**-9), 2.0**-134, np.nan])
    assert [int(b) for b in sem.encode(x, sem.BF16)] == [0x3F80, 0x8000, 0x3F80, 0x3F82, 0x3F81, 0x7F80, 0x0, 0x7FFF]
    # not binary32 (1 + 2^-8 + 2^-40 is above the tie): the general path, which rounds up
    assert int(sem.encode(np.array([1 + 2.0**-8 + 2.0**-40]), sem.BF16)[0]) == 0x3F81
