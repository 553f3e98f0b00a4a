"""The GPU-scope flag instructions (LDG/STG .STRONG.GPU, REDG.E.ADD.STRONG.GPU) lift to relaxed
GPU-scope PTX, and plain global accesses keep their plain form."""

from __future__ import annotations

import textwrap

import pytest

from tests.lift.test_lift import ptx_lines


@pytest.mark.parametrize("sm", ["sm_90a", "sm_100a"])
def test_flag_accesses_lift_to_relaxed_gpu_scope(sm: str) -> None:
    md = "0x208" if sm == "sm_90a" else "0x358"
    ldc = "LDCU.64" if sm == "sm_100a" else "ULDC.64"
    body = f"""
    LDC.64 R2, c[0x0][out]
    {ldc} UR4, c[0x0][{md}]
    MOV R0, 0x1
    REDG.E.ADD.STRONG.GPU desc[UR4][R2.64], R0
    LDG.E.STRONG.GPU R1, desc[UR4][R2.64+0x4]
    STG.E.STRONG.GPU desc[UR4][R2.64+0x8], R1
    LDG.E R1, desc[UR4][R2.64+0xc]
    STG.E desc[UR4][R2.64+0x10], R1
    """
    got = " ".join(ptx_lines(textwrap.dedent(body), sm))
    assert "red.relaxed.gpu.global.add.u32 [" in got
    assert "ld.relaxed.gpu.global.b32 " in got
    assert "st.relaxed.gpu.global.b32 [" in got
    assert got.count("relaxed") == 3  # the plain LDG/STG stay plain
    assert "ld.global.b32 " in got and "st.global.b32 [" in got
