"""Typed float, packed and conversion builders used as intended type-check (and build)."""

from _common import setup
from warpy.isa.families import alu
from warpy.isa.families.typed import BF16, BF16x2, F16x2, F32, S32

p, sa, stage = setup()
x, y, z = F32.of(p.r("x")), F32.of(p.r("y")), F32.of(p.r("z"))
for r in (x, y, z):
    p.emit(alu.mov(r, 0))
p.emit(alu.ffma(z, x, y, -z))
p.emit(alu.ex2(z, z))
b, h = BF16x2.of(p.r("b")), F16x2.of(p.r("h"))
p.emit(alu.f2fp(b, x, y))
p.emit(alu.f2fp(h, x, y))
p.emit(alu.hfma2(b, b, b, b))
p.emit(alu.hmax2(h, h, h))
n = S32.of(p.r("n"))
p.emit(alu.f2i(n, z))
p.emit(alu.i2f(BF16.of(p.r("one")), n))
p.emit(alu.shfl_bfly(x, x, 16))
