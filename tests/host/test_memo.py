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


def test_forget_all_empties_every_registered_memo() -> None:
    import functools

    from warpy.memo import forget_all, forgettable, new_cache

    d = new_cache()
    d["a"] = 1

    @functools.lru_cache(maxsize=4)
    def twice(x: int) -> int:
        return 2 * x

    forgettable(twice.cache_clear)
    twice(3)
    forget_all()
    assert d == {} and twice.cache_info().currsize == 0


def test_the_librarys_memos_are_registered() -> None:
    """What mutation testing's one-process driver relies on: after `forget_all`, the colouring, the
    checker's decoding, the opcode look-ups, the tensor maps, the descriptor word and the megakernel
    plans are all empty (an answer the unmutated code left would stand in for a mutant's)."""
    from warpy.check import code
    from warpy.isa.instr import Instr
    from warpy.isa import colour, descriptors, families
    from warpy.isa.units import tma
    from warpy.kernels import mega
    from warpy.lift import disasm
    from warpy.memo import forget_all

    p = mega.MegaProblem("ew-small")
    prog = mega.build(p)
    prog.coloured()
    first = next(line for line in prog.kernel().lines if isinstance(line, Instr))
    code._static(first, 0)
    descriptors.low_word("sm_90a")
    assert colour._COLOURED and colour._LIVENESS and code._STATIC and families._FORMS and families._LOOKED_UP
    assert mega.plan.cache_info().currsize and descriptors.low_word.cache_info().currsize
    forget_all()
    assert not (colour._COLOURED or colour._LIVENESS or code._STATIC or families._FORMS or families._LOOKED_UP)
    for fn in (mega.plan, descriptors.low_word, tma.tma_box, tma.tma_multicast_slices, disasm._disassemble):
        assert fn.cache_info().currsize == 0
