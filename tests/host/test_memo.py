"""`warpy.memo.remembered`: the answer made once per key and kept, at most `keep` answers (the oldest
dropped first), a key that cannot be hashed answered afresh each time, an error raised each time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.memo import remembered


@settings(derandomize=True, max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 9), max_size=40), st.integers(1, 5))
def test_answers_and_what_is_kept(keys: list[int], keep: int) -> None:
    cache: dict[int, tuple[int, int]] = {}
    made: list[int] = []
    order: list[int] = []  # the keys kept, oldest first (the reference)
    for k in keys:
        def make(k: int = k) -> tuple[int, int]:
            made.append(k)
            return (k, len(made))

        before = len(made)
        got = remembered(cache, k, make, keep)
        assert got[0] == k
        if k in order:  # kept: not made again, the same answer
            assert len(made) == before and got == cache[k]
        else:
            assert len(made) == before + 1
            if len(order) >= keep:
                order.pop(0)
            order.append(k)
        assert list(cache) == order and len(cache) <= keep


def test_an_unhashable_key_is_answered_each_time() -> None:
    cache: dict[object, int] = {}
    calls: list[int] = []

    def make() -> int:
        calls.append(1)
        return 7

    for _ in range(3):
        assert remembered(cache, ([1, 2],), make, 4) == 7
    assert len(calls) == 3 and cache == {}


def test_an_error_is_raised_each_time_and_nothing_kept() -> None:
    cache: dict[str, int] = {}

    def bad() -> int:
        raise ValueError("refused")

    for _ in range(2):
        with pytest.raises(ValueError, match="refused"):
            remembered(cache, "k", bad, 4)
    assert cache == {}
    assert remembered(cache, "k", lambda: 3, 4) == 3 and cache == {"k": 3}
