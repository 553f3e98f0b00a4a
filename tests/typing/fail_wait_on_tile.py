"""A wait on an operand tile, not a barrier."""

from _common import setup
from warpy.isa.pipes import wait

p, sa, stage = setup()
wait(p, sa.at(0, 0, 0), p.r("parity"))  # mypy: error
