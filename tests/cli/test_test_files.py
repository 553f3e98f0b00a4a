"""The suite's own layout: pytest imports test modules by basename (rootdir-relative, no packages),
so two test files of one name in different folders make a clean run refuse to collect the second
(a collection error CI met once, tests/mega/test_attention.py beside tests/kernels/test_attention.py)."""

from __future__ import annotations

import collections
import os

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_no_two_test_modules_share_a_basename() -> None:
    seen: dict[str, list[str]] = collections.defaultdict(list)
    for root, dirs, files in os.walk(TESTS):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for f in files:
            if f.startswith("test_") and f.endswith(".py"):
                seen[f].append(os.path.relpath(os.path.join(root, f), TESTS))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"test modules sharing a basename (pytest collects only the first): {clashes}"
    assert len(seen) > 100  # (the walk found the suite)
