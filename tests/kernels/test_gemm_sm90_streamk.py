"""Stream-K in the Hopper GEMM, without a GPU: the host checker runs grids of two CTAs (every CTA
simulated, so a tile split between them is summed here and compared with numpy), the fences around
the flags are required (deleting either is reported), bigger grids check clean, and the kernels
assemble with the fixup's instructions. The GPU runs are tests/gpu/test_gemm.py."""

from __future__ import annotations

import os
import re

import pytest

from warpy.check.report import check_kernel
from warpy.kernels.gemm import FAMILY as GEMM
from warpy.isa.text import parse
from warpy.kernels.gemm_sm90 import Sm90Config, Sm90Gemm
from warpy.kernels.gemm import GemmProblem, build, choose
from warpy.lift.disasm import disassemble
from warpy.lift.lifter import build as assemble


def _check(M: int, N: int, K: int, out: str, cfg: Sm90Config, text: str | None = None):  # type: ignore[no-untyped-def]
    prob = GemmProblem(M, N, K, out_dtype=out)
    prog = Sm90Gemm(GemmProblem(M, N, K, "bf16", prob.out_dtype), cfg).build()
    named = parse(text) if text is not None else prog.kernel()
    col = None if text is not None else prog.coloured()
    return check_kernel(named, col, values=True, expect=GEMM.expectation(prob)), prog


@pytest.mark.parametrize("M,N,K,out,bn,staged", [
    (128, 384, 1024, "fp32", 128, False),   # 3 tiles of 16 k blocks over 2 CTAs: tile 1 split 8 + 8
    pytest.param(128, 256, 4096, "bf16", 256, True,  # one tile, its 64 k blocks shared by both CTAs
                 marks=pytest.mark.skipif(os.environ.get("WARPY_SLOW") != "1",
                                          reason="WARPY_SLOW=1 (the first case splits a tile between the CTAs)")),
    (200, 296, 1000, "bf16", 128, True),    # ragged, TMA-stored C
    pytest.param(200, 300, 1000, "fp16", 128, False,  # ragged, odd rows: C stored from the registers
                 marks=pytest.mark.skipif(os.environ.get("WARPY_SLOW") != "1",
                                          reason="WARPY_SLOW=1 (the ragged bf16 case covers the split)")),
])
def test_tiles_split_between_ctas_sum_to_numpy(M: int, N: int, K: int, out: str, bn: int, staged: bool) -> None:
    cfg = Sm90Config(bn=bn, stages=4, staged_epilogue=staged, stream_k=True, sms=2)
    rep, prog = _check(M, N, K, out, cfg)
    assert rep.ok, rep.messages()
    assert rep.values_checked == M * N and rep.values_wrong == 0 and rep.values_partial == 0
    assert prog.grid == (2, 1, 1)


FENCE_BEFORE = {"release": "REDG", "acquire": "STG.E.STRONG"}


def test_a_release_fence_after_the_flag_is_too_late() -> None:
    cfg = Sm90Config(bn=128, stages=4, stream_k=True, sms=2)
    text = str(Sm90Gemm(GemmProblem(128, 384, 1024, "bf16", "fp32"), cfg).build().kernel())
    late, n = re.subn(r"\n([^\n]*MEMBAR[^\n]*)\n([^\n]*REDG[^\n]*)\n", r"\n\2\n\1\n", text, count=1)
    assert n == 1
    rep, _ = _check(128, 384, 1024, "fp32", cfg, late)
    assert any("partial_sums" in m for m in rep.messages()), rep.messages()


@pytest.mark.parametrize("which", sorted(FENCE_BEFORE))
def test_the_flag_fences_are_required(which: str) -> None:
    cfg = Sm90Config(bn=128, stages=4, stream_k=True, sms=2)
    text = str(Sm90Gemm(GemmProblem(128, 384, 1024, "bf16", "fp32"), cfg).build().kernel())
    bad, n = re.subn(r"\n[^\n]*MEMBAR[^\n]*\n(?=[^\n]*" + re.escape(FENCE_BEFORE[which]) + ")", "\n", text, count=1)
    assert n == 1
    rep, _ = _check(128, 384, 1024, "fp32", cfg, bad)
    assert not rep.ok
    assert any("partial_sums" in m for m in rep.messages()), rep.messages()


@pytest.mark.parametrize("shape,split", [((1024, 1024, 65536), 4), ((1, 4096, 4096), 4), ((512, 512, 32768), 8)])
def test_the_rule_splits_k_where_tiles_cannot_fill_the_machine(shape: tuple[int, int, int], split: int) -> None:
    prob = GemmProblem(*shape, out_dtype="bf16")
    cfg = choose(prob)
    assert cfg.stream_k and cfg.split == split
    kernel = build(prob, cfg).kernel()
    cubin = assemble(kernel, "sm_90a")
    res = cubin.resource(kernel.header.kernel)
    assert res.spill_stores == 0 and res.spill_loads == 0
    ops = {i.opcode for i in disassemble(cubin).kernel(kernel.header.kernel).instructions}
    for want in ("FADD", "REDG", "HGMMA", "UTMASTG"):
        assert any(o == want or o.startswith(want + ".") for o in ops), (want, sorted(ops))
    assert [p.name for p in kernel.header.params if p.scratch] == ["flags", "partials"]


@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 4096, 1024), (2048, 2048, 16384),
                                   (1024, 1024, 1024), (1536, 1536, 1536)])
def test_the_rule_keeps_whole_tiles_where_they_fill_the_machine(shape: tuple[int, int, int]) -> None:
    assert not choose(GemmProblem(*shape, out_dtype="bf16")).stream_k


@pytest.mark.parametrize("split", [0, 2])
def test_a_full_grid_checks_clean(split: int) -> None:
    prob = GemmProblem(1024, 1024, 1024, out_dtype="fp32")
    cfg = Sm90Config(bn=128, stages=6, stream_k=True, split=split)
    prog = build(prob, cfg)
    rep = check_kernel(prog.kernel(), prog.coloured(), values=True, expect=GEMM.expectation(prob))
    assert rep.ok, rep.messages()
    assert rep.values_checked + rep.values_partial > 0
    assert prog.grid == ((128 if split else 132), 1, 1)


def test_split_refusals() -> None:
    from warpy.errors import WarpyError

    with pytest.raises(WarpyError, match="stream_k"):
        Sm90Gemm(GemmProblem(1024, 1024, 1024, "bf16", "fp32"), Sm90Config(bn=128, split=2))
    with pytest.raises(WarpyError, match="does not fit"):
        Sm90Gemm(GemmProblem(1024, 1024, 1024, "bf16", "fp32"), Sm90Config(bn=128, stream_k=True, split=3))
