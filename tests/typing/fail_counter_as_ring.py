"""A counter stepped as a ring."""

from _common import setup

p, sa, stage = setup()
with p.loop("k", 2) as k:
    p.advance(k)  # mypy: error
