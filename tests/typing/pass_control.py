"""The same program written correctly: it must type-check."""

from _common import setup
from warpy.isa.families import alu
from warpy.isa.pipes import wait

p, sa, stage = setup()
p.emit(alu.iadd3(p.r("a"), p.r("c0"), p.r("b")))
inp = stage.consumer()
with p.loop("k", 2) as k:
    with inp.stage():
        inp.wait_full()
        wait(p, inp.full, inp.ring.parity)
        p.derive.into(p.ur("d"), "gdesc.lo", inp.slot(sa, 0, 16))
        inp.free()
    p.emit(alu.iadd3(p.r("x"), k.reg, 1))
p.advance(inp.ring)
