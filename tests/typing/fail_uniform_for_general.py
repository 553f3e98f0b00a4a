"""A uniform register where a general one belongs."""

from _common import setup
from warpy.isa.families import alu

p, sa, stage = setup()
p.emit(alu.iadd3(p.r("a"), p.ur("u"), p.r("b")))  # mypy: error
