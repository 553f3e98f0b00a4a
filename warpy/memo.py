"""What the library remembers within a process, in one place.

`remembered`: an answer kept by its key for the hot paths that the same process asks again (a
kernel coloured twice, an instruction decoded for every line that holds it): at most `keep` answers,
the oldest dropped first; a key that cannot be hashed is answered afresh each time, and an error is
raised each time (nothing is kept for it). Only for answers nobody changes after they are made.

Every such memo is made by `new_cache` or registered with `forgettable` (a `functools.lru_cache`'s
`cache_clear`), so that `forget_all` empties them: mutation testing's one-process driver
(`.ci/mutation.py --late`) runs the tests once unmutated and then once per mutant, and an answer
the unmutated code left would otherwise stand in for the mutant's. (`warpy.layout` keeps its own
identity table of validated shapes: it imports nothing else of warpy.)"""

from __future__ import annotations

from typing import Any, Callable, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
F = TypeVar("F", bound=Callable[[], object])

_FORGET: list[Callable[[], object]] = []


def new_cache() -> dict[Any, Any]:
    """An empty memo that `forget_all` empties."""
    d: dict[Any, Any] = {}
    _FORGET.append(d.clear)
    return d


def forgettable(clear: F) -> F:
    """Register a memo's clear (an `lru_cache`'s `cache_clear`) with `forget_all`."""
    _FORGET.append(clear)
    return clear


def forget_all() -> None:
    """Empty every registered memo of this process."""
    for clear in _FORGET:
        clear()


def remembered(cache: dict[K, V], key: K, make: Callable[[], V], keep: int) -> V:
    """`cache[key]`, made by `make()` and kept the first time (`keep`: the most entries)."""
    try:
        hit = cache.get(key)
    except TypeError:  # (a key that cannot be hashed: made each time)
        return make()
    if hit is None:
        hit = make()
        if len(cache) >= keep:
            del cache[next(iter(cache))]
        cache[key] = hit
    return hit


__all__ = ["remembered", "new_cache", "forgettable", "forget_all"]
