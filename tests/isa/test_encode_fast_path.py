"""`semantics.encode`'s fast path (binary32, round to nearest even, no flush, no residual: the CPU's
own conversion) gives the bits of the general exact path, over values drawn across every binade,
subnormals, the overflow edge, zeros of both signs, infinities and NaN."""

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
