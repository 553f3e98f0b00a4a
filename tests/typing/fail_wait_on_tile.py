"""A wait on an operand tile, not a barrier."""

from _common import setup

p, sa, stage = setup()
p.wait(sa.at(0, 0, 0), p.r("parity"))  # mypy: error
