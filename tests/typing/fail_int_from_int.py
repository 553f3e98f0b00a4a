"""A float-to-integer conversion given an integer source."""

from _common import setup
from warpy.isa.families import alu
from warpy.isa.families.typed import S32, U32

p, sa, stage = setup()
d, n = S32.of(p.r("d")), U32.of(p.r("n"))
p.emit(alu.f2i(d, n))  # mypy: error
