"""A small program the typing cases share (tests/typing: files named fail_* must fail mypy
exactly at the line marked `# mypy: error`; pass_* must type-check)."""

from __future__ import annotations

from warpy.isa.buffers import TileRing
from warpy.isa.pipes import Pipe
from warpy.isa.program import Program
from warpy.layout import Layout, Swizzle, SwizzledLayout


def setup() -> tuple[Program, TileRing, Pipe]:
    p = Program("typing", "sm_90a", threads=256)
    sa = p.smem_ring("sa", 4, SwizzledLayout(Swizzle(3, 4, 3), Layout((64, 64), (128, 2))), "bf16")
    return p, sa, p.pipe("stage", 4)
