"""The interpreter's 32-lane paths give, lane by lane, what its one-value path gives: SHF's uint64
form (`semantics._shf_lanes`) against `_shf1` on Python ints, for every modifier set the ISA
builds, 32-bit values drawn whole (the sign bit and the shift's edges 0, 31, 32 and above 32
included), each operand a lane vector or one value for every lane."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import warpy.isa.semantics as sem

_MODS = [("L", "W", "U32"), ("L", "W", "U32", "HI"), ("R", "W", "U32"), ("R", "W", "U32", "HI"),
         ("R", "S32", "HI"), ("R", "U32", "HI"), ("L", "U64", "HI"), ("R", "U64")]
_WORD = st.one_of(st.integers(0, 0xFFFFFFFF), st.sampled_from([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]))
_SHIFT = st.one_of(st.integers(0, 40), st.sampled_from([0, 31, 32, 33, 0xFFFFFFFF]))


def _operand(vals: list[int], vector: bool) -> object:
    return np.array(vals, dtype=np.uint64) if vector else vals[0]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_MODS), st.lists(_WORD, min_size=32, max_size=32), st.lists(_SHIFT, min_size=32, max_size=32),
       st.lists(_WORD, min_size=32, max_size=32), st.tuples(st.booleans(), st.booleans(), st.booleans()))
def test_shf_lanes_equal_the_scalar_rule(mods: tuple[str, ...], a: list[int], s: list[int], b: list[int],
                                         vec: tuple[bool, bool, bool]) -> None:
    if not any(vec):
        vec = (True, vec[1], vec[2])
    av, sv, bv = _operand(a, vec[0]), _operand(s, vec[1]), _operand(b, vec[2])
    got = sem._shf_lanes(mods, av, sv, bv)
    lane = [(a[i] if vec[0] else a[0], s[i] if vec[1] else s[0], b[i] if vec[2] else b[0]) for i in range(32)]
    want = [sem._shf1(mods, x, y, z) for x, y, z in lane]
    assert got.dtype == np.uint64 and got.shape == (32,)
    assert [int(v) for v in got] == want


def test_shf_literals() -> None:
    a = np.array([0x80000001] * 32, dtype=np.uint64)
    assert int(sem._shf_lanes(("R", "S32", "HI"), 0, 4, a)[0]) == 0xF8000000  # arithmetic: the sign comes in
    assert int(sem._shf_lanes(("R", "U32", "HI"), 0, 4, a)[0]) == 0x08000000
    assert int(sem._shf_lanes(("L", "W", "U32", "HI"), a, 4, 0)[0]) == 0x8  # the low word's top bits into the high
    assert int(sem._shf_lanes(("R", "W", "U32"), 0, 32, a)[0]) == 0x80000001  # the high word whole
