"""An answer remembered by its key, for the library's hot paths that the same process asks again
(a kernel coloured twice, an instruction decoded for every line that holds it): at most `keep`
answers, the oldest dropped first; a key that cannot be hashed is answered afresh each time, and an
error is raised each time (nothing is kept for it). Only for answers nobody changes after they are
made."""

from __future__ import annotations

from typing import Callable, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


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


__all__ = ["remembered"]
