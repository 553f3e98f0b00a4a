"""HGMMA's transposed-operand forms (`gdesc[..].tnspA` / `.tnspB`: A / B MN-major in shared memory):
the builder, the text form read back, the lift to wgmma's imm-trans-a / imm-trans-b, and what is refused."""

from __future__ import annotations

import pytest

from warpy.errors import WarpyError
from warpy.isa.families import wgmma
from warpy.isa.instr import Instr
from warpy.isa.operands import Desc, RVec, URVec
from warpy.isa.text import parse
from warpy.lift.lifter import lift

HEADER = """\
.kernel g
.sm sm_90a
.threads 128
.dynsmem 1024
.grid 1 1 1
.cluster 1 1 1
.mbarriers 1
.param out u64
"""


def ptx_of(body: str) -> list[str]:
    ptx = lift(HEADER + "".join(f"  {ln}\n" for ln in body.strip().splitlines()) + "  EXIT\n")
    return [ln.strip() for ln in ptx.split("// --- the program ---\n")[1].splitlines() if "wgmma.mma_async" in ln]


REGS = "{%r24, %r25, %r26, %r27}"


@pytest.mark.parametrize("flags, trans", [("", "0, 0"), (".tnspA", "1, 0"), (".tnspB", "0, 1"), (".tnspA.tnspB", "1, 1")])
def test_the_transpose_flags_lift_to_imm_trans(flags: str, trans: str) -> None:
    got = ptx_of(f"HGMMA.64x8x16.F32.BF16 R24, gdesc[UR4]{flags}, RZ, !UPT")
    assert got == [f"wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {REGS}, %td0, %td1, 0, 1, 1, {trans};"]


def test_fp16_and_the_rs_form_take_tnsp_b() -> None:
    got = ptx_of("HGMMA.64x8x16.F32.F16 R24, gdesc[UR4].tnspA, R24\nHGMMA.64x8x16.F32.BF16 R24, R8, gdesc[UR4].tnspB, R24")
    assert got[0].endswith(f"f32.f16.f16 {REGS}, %td0, %td1, 1, 1, 1, 1, 0;")
    assert got[1].endswith(f"{{%r8, %r9, %r10, %r11}}, %td3, 1, 1, 1, 1;")


@pytest.mark.parametrize("ta, tb", [(False, False), (True, False), (False, True), (True, True)])
def test_the_builder_prints_nvdisasms_spelling_and_reads_back(ta: bool, tb: bool) -> None:
    ins = wgmma.hgmma(64, RVec("acc", 32), URVec("dsc", 4), True, True, tnsp_a=ta, tnsp_b=tb)
    want = "".join(s for s, on in ((".tnspA", ta), (".tnspB", tb)) if on)
    assert str(ins.ops[1]) == f"gdesc[dsc]{want}"
    back = parse(HEADER + ".reg R[32] acc\n.reg UR[4] dsc\n" + str(ins) + "\n  EXIT\n")
    op = [i for i in back.lines if isinstance(i, Instr) and i.name == "HGMMA"][0].ops[1]
    assert isinstance(op, Desc) and op.flags == ins.ops[1].flags  # type: ignore[union-attr]


def test_refusals() -> None:
    with pytest.raises(WarpyError, match="only K-major"):
        wgmma.hgmma(8, RVec("acc", 4), URVec("dsc", 4), True, ab="TF32", k=8, tnsp_b=True)
    with pytest.raises(WarpyError, match="only gdesc takes tnspA, tnspB, each once, in that order"):
        Desc("gdesc", URVec("dsc", 4), ("tnspB", "tnspA"))
    with pytest.raises(WarpyError, match="tnspA"):
        ptx_of("HGMMA.64x8x16.F32.BF16 R24, gdesc[UR4].tnspB.tnspA, R24")
    with pytest.raises(WarpyError, match="only BF16 and F16"):
        ptx_of("HGMMA.64x8x8.F32.TF32 R24, gdesc[UR4].tnspA, R24")
    with pytest.raises(WarpyError, match="no .tnspA"):
        ptx_of("HGMMA.64x8x16.F32.BF16 R24, R8, gdesc[UR4].tnspA, R24")
