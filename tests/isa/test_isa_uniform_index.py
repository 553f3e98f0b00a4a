"""Per-CTA uniform indices (warpy.isa.index.Uniform): a value affine in one is one UIMAD at the point of
use, noted with the buffer at its coordinates; a general register is refused."""

from __future__ import annotations

import pytest

from warpy.errors import WarpyError
from warpy.isa.families import alu, control
from warpy.isa.operands import R
from warpy.isa.index import Uniform
from warpy.isa.pipes import init_barriers
from warpy.isa.program import Program
from warpy.isa.units.tma import tma_load
from warpy.layout.desc import tma_box
from warpy.layout import Layout
from warpy.layout.smem import smem_tile


def _program() -> tuple[Program, str]:
    p = Program("uniform_ix", "sm_100a", threads=32, grid=(4, 1, 1), cluster=(4, 1, 1))
    tile = smem_tile(128, 64, "bf16", "K", 128)
    tb = p.tmap("b", tma_box(Layout((512, 64), (64, 1)), tile, multicast=4))
    ring = p.smem_ring("sb", 3, tile.layout, "bf16")
    pipe = p.pipe("stage", 3)
    init_barriers(p)
    rank = p.ur("rank")
    p.emit(alu.s2ur(rank, "SR_CgaCtaId"))
    part = Uniform("part", rank, 4)
    out = pipe.producer("ps")
    with p.loop("k", 5):
        with out.stage():
            out.wait_empty()
            tma_load(p, out.slot(ring, part * 32, 0), tb, [0, rank], out.full)
    p.emit(control.exit_())
    return p, p.text()


def test_uniform_term_is_one_uimad_at_the_point_of_use() -> None:
    p, text = _program()
    lines = [ln.strip() for ln in text.splitlines()]
    uimad = [ln for ln in lines if ln.startswith("+ UIMAD sb@part")]
    assert len(uimad) == 1
    # 32 rows of 128 bytes a part; noted as the ring at (stage, 32 part, 0)
    assert "rank, 0x1000" in uimad[0] and "// addr sb[ps_stage, rank*32, 0]" in uimad[0], uimad[0]
    # the stage term comes first, at the top of the ring iteration
    top = next(i for i, ln in enumerate(lines) if ln.startswith("+ UIMAD sb@ps,"))
    assert top < lines.index(uimad[0])


def test_uniform_index_needs_a_uniform_register() -> None:
    p = Program("bad", "sm_100a", threads=32)
    with pytest.raises(WarpyError, match="uniform register"):
        Uniform("x", R("r"), 4)  # type: ignore[arg-type]
