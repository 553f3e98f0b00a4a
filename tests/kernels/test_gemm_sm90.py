"""The Hopper GEMM programs, without a GPU: every default shape and the ragged ones build, lift and
assemble for sm_90a with no spill and no wgmma serialisation (ptxas warnings fail the build), and
the disassembly shows the tensor-core, TMA, barrier and register-reallocation instructions the
program is written with. The GPU runs are tests/gpu/test_gemm.py."""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.errors import WarpyError
from warpy.kernels.gemm_sm90 import Sm90Config, Sm90Gemm
from warpy.kernels.gemm import GemmProblem, build, choose
from warpy.lift.disasm import disassemble
from warpy.lift.lifter import build as assemble

DEFAULT_SHAPES = [
    (1024, 1024, 1024), (1536, 1536, 1536), (2048, 2048, 2048), (3072, 1280, 2048), (4096, 4096, 1024),
    (4096, 4096, 4096), (8192, 2048, 4096), (8192, 8192, 8192), (16384, 16384, 16384), (2048, 2048, 16384),
    (1024, 1024, 65536),
]
RAGGED = [(1, 4096, 4096), (4097, 129, 72), (1000, 1000, 1000), (127, 8191, 136)]


@pytest.mark.parametrize("out", ["bf16", "fp32"])
@pytest.mark.parametrize("shape", DEFAULT_SHAPES + RAGGED, ids=lambda s: "x".join(map(str, s)))
def test_every_shape_assembles_and_shows_its_instructions(shape: tuple[int, int, int], out: str) -> None:
    prob = GemmProblem(*shape, out_dtype=out)
    cfg = choose(prob)
    kernel = build(prob, cfg).kernel()
    cubin = assemble(kernel, "sm_90a")  # fails on spills and wgmma serialisation
    res = cubin.resource(kernel.header.kernel)
    assert res.spill_stores == 0 and res.spill_loads == 0
    ops = {i.opcode for i in disassemble(cubin).kernel(kernel.header.kernel).instructions}
    wants = ["HGMMA", "UTMALDG", "SYNCS", "USETMAXREG", "WARPGROUP", "UTMACCTL"]
    if cfg.staged_epilogue:  # 16-bit C with TMA-addressable rows goes out through TMA stores
        wants += ["STSM", "UTMASTG"]
    for want in wants:
        assert any(o == want or o.startswith(want + ".") for o in ops), (want, sorted(ops))
    # (a K split in clusters stores each CTA's share of C from the registers)
    assert cfg.staged_epilogue == (out == "bf16" and shape[1] % 8 == 0 and cfg.cluster_k == 1)


@pytest.mark.parametrize("out", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_types_assemble(dtype: str, out: str) -> None:
    prob = GemmProblem(1000, 1000, 1000, dtype, out)
    kernel = build(prob).kernel()
    res = assemble(kernel, "sm_90a").resource(kernel.header.kernel)
    assert res.spill_stores == 0 and res.spill_loads == 0
    spelled = {"bf16": "BF16", "fp16": "F16"}[dtype]
    assert re.search(rf"HGMMA\.64x\d+x16\.F32\.{spelled} ", str(kernel))  # the input type reaches the MMA


def test_the_rule_narrows_tiles_when_they_would_leave_sms_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARPY_GEMM_TABLE", "none")  # the hand-fitted model's picks, not the sweep's table's

    def tile(*shape: int) -> tuple[int, int]:
        cfg = choose(GemmProblem(*shape))
        return cfg.bm, cfg.bn

    assert tile(4096, 4096, 4096) == (128, 256)
    assert tile(1024, 1024, 1024) == (128, 64)  # 128 narrow tiles, not 32 wide ones, for 132 SMs
    assert tile(1536, 1536, 1536) == (128, 144)  # one wave of 132, not 96 wider or two of 144 narrower
    assert tile(1, 4096, 4096) == (64, 128)  # a short M wastes less of a 64-row tile


@pytest.mark.parametrize("bad", [(0, 8, 8), (8, 0, 8), (8, 8, 4), (8, 8, 12)])
def test_problems_warpy_cannot_run_are_refused_in_one_line(bad: tuple[int, int, int]) -> None:
    with pytest.raises(WarpyError) as e:
        GemmProblem(*bad)
    assert "\n" not in str(e.value)


def test_out_dtype_aliases() -> None:
    assert GemmProblem(8, 8, 8, out_dtype="f32").out_dtype == "fp32"
    with pytest.raises(WarpyError):
        GemmProblem(8, 8, 8, out_dtype="int8")


def test_too_much_shared_memory_is_refused() -> None:
    with pytest.raises(WarpyError, match="shared memory"):
        Sm90Gemm(GemmProblem(4096, 4096, 4096, "bf16", "fp32"), Sm90Config(stages=8))


def test_the_main_loop_is_the_innermost_loop_holding_the_mma() -> None:
    from warpy.lift.disasm import MMA_OPCODES, loop_instruction_count

    kernel = build(GemmProblem(4096, 4096, 4096)).kernel()
    sass = disassemble(assemble(kernel, "sm_90a")).kernel(kernel.header.kernel)
    main = loop_instruction_count(sass, holding=MMA_OPCODES)
    loops = [lp for lp in sass.loops() if any(i.opcode.startswith("HGMMA") for i in lp.instructions)]
    assert main == min(lp.count for lp in loops) < loop_instruction_count(sass)
    with pytest.raises(WarpyError):
        loop_instruction_count(sass, holding=("UTCHMMA",))


# tails of 16 and 32 columns (144, 160, 208), 32 + 8 (168: 128 x 168 tiles fill two waves at
# 256 x 22016), 32 + 16 (176), 8 alone (200), and 32 + 16 + 8 with no whole chunk (56)
@pytest.mark.parametrize("M,N,K,bn,out", [(256, 288, 256, 144, "bf16"), (200, 328, 200, 160, "fp16"),
                                          (130, 416, 64, 208, "bf16"), (128, 336, 64, 168, "bf16"),
                                          (100, 352, 64, 176, "fp16"), (72, 400, 64, 200, "bf16"),
                                          (128, 112, 64, 56, "bf16")])
def test_staged_epilogue_with_narrower_last_chunks_is_exact(M: int, N: int, K: int, bn: int, out: str) -> None:
    from warpy.check.report import check_kernel
    from warpy.kernels.gemm import FAMILY as GEMM
    from warpy.kernels.gemm_sm90 import epi_tails

    prob = GemmProblem(M, N, K, out_dtype=out)
    prog = Sm90Gemm(GemmProblem(M, N, K, "bf16", prob.out_dtype), Sm90Config(bn=bn, stages=4, staged_epilogue=True)).build()
    kernel = prog.kernel()
    tails = epi_tails(bn)
    assert sum(tails) == bn % 64 and list(tails) == sorted(set(tails), reverse=True)
    assert [(t.name, t.over) for t in kernel.header.tmaps][-1 - len(tails):] == (
        [("c", None)] + [(f"c_tail{w}", "c") for w in tails])
    rep = check_kernel(kernel, prog.coloured(), values=True, expect=GEMM.expectation(prob))
    assert rep.ok, rep.messages()
    assert rep.values_wrong == 0
    written = rep.data["written"]  # the first and last CTAs' tiles, the tail chunks' columns too
    assert written[:64, :bn].all() and written[:64, bn - bn % 64:bn].all()
    assemble(kernel, "sm_90a")


def test_epi_tails_golden() -> None:
    from warpy.kernels.gemm_sm90 import epi_tails

    assert [epi_tails(bn) for bn in (64, 144, 160, 168, 176, 200, 56, 8)] == [
        (), (16,), (32,), (32, 8), (32, 16), (8,), (32, 16, 8), (8,)]


def _slow(*bns: int) -> list[object]:
    return [pytest.param(b, marks=pytest.mark.skipif(os.environ.get("WARPY_SLOW") != "1", reason="WARPY_SLOW=1"))
            for b in bns]


# BN 32 (a lone tail), 64 (an odd count of whole chunks), 144 (whole chunks and a tail), 168 (whole
# chunks and two tails), 256 (an even count) in the default run; 56 (three tails), 80, 192, 208 (the
# same cases at other counts) with WARPY_SLOW=1
@pytest.mark.parametrize("bn", [32, 64, 144, 168, 256, *_slow(56, 80, 192, 208)])
def test_the_staged_epilogue_reuses_a_buffer_only_after_its_store_read_it(bn: int) -> None:
    """Chunks of 64 columns alternate two staging buffers, a narrower last one has its own: with an
    odd number of 64-column chunks (BN 64, 192) the next tile's first chunk reuses the buffer of this
    tile's last, whose store is the latest in flight; a lone tail chunk (BN 32) reuses its own. Several
    tiles a CTA, so the ring of buffers wraps."""
    from warpy.check.report import check_kernel

    prog = Sm90Gemm(GemmProblem(1024, 1024, 128, "bf16", "bf16"), Sm90Config(bn=bn, stages=4, sms=8, staged_epilogue=True)).build()
    rep = check_kernel(prog.kernel(), prog.coloured())
    assert rep.ok, "\n".join(list(rep.messages())[:5])


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 700).map(lambda k8: 8 * k8))
def test_rows_not_32_byte_aligned_get_a_128_byte_l2_promotion(k: int) -> None:
    cfg = choose(GemmProblem(1024, 1024, k, out_dtype="bf16"))
    assert cfg.l2_promotion == (256 if (2 * k) % 32 == 0 else 128)
