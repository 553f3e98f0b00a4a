"""A packed 16-bit add given an fp32 register."""

from _common import setup
from warpy.isa.families import alu
from warpy.isa.families.typed import BF16x2, F32

p, sa, stage = setup()
d, x, y = BF16x2.of(p.r("d")), F32.of(p.r("x")), BF16x2.of(p.r("y"))
p.emit(alu.hadd2(d, x, y))  # mypy: error
