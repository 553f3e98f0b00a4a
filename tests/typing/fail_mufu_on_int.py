"""The special-function unit given an integer register."""

from _common import setup
from warpy.isa.families import alu
from warpy.isa.families.typed import F32, S32

p, sa, stage = setup()
d, n = F32.of(p.r("d")), S32.of(p.r("n"))
p.emit(alu.ex2(d, n))  # mypy: error
