"""192-row tiles (three consumer warpgroups of 64 rows each, `consumers=3`), 256-row tiles (two of
128 rows, `wg_rows=128`) and A and B swapped (C^T from the registers or staged): what fits the
register file, exact values on ragged shapes, no spills, and the refusals."""

from __future__ import annotations

import os
import re

import attrs
import pytest

from warpy.check.report import check_kernel
from warpy.errors import WarpyError
from warpy.isa.program import Program
from warpy.kernels.gemm import FAMILY as GEMM, GemmProblem, configure
from warpy.kernels.gemm_sm90 import Sm90Config, Sm90Gemm, register_split
from warpy.lift.lifter import build as assemble


def test_three_consumers_share_what_the_register_file_leaves() -> None:
    prod, cons = register_split(3)
    assert (prod, cons) == (32, 160)
    assert 128 * prod + 3 * 128 * cons == 65536
    assert register_split(2) == (40, 232) and register_split(1) == (40, 232)


def _slow(*cases: tuple[object, ...]) -> list[object]:
    return [pytest.param(*c, marks=pytest.mark.skipif(os.environ.get("WARPY_SLOW") != "1", reason="WARPY_SLOW=1"))
            for c in cases]


# one case a kind in the default run, the others with WARPY_SLOW=1 (each ~5-15 s of checking)
@pytest.mark.parametrize("M,N,K,config,out", [
    (200, 200, 128, "consumers=3,bn=128,cluster_m=2", "fp32"),  # 2x1 clusters, the second M-block past M
    *_slow((300, 301, 136, "consumers=3,bn=192", "bf16"),  # ragged both ways, register-stored C
           (400, 312, 256, "consumers=3,bn=192", "bf16")),  # staged epilogue, three 64-column chunks
])
def test_192_row_tiles_are_exact_on_ragged_shapes(M: int, N: int, K: int, config: str, out: str) -> None:
    prob = GemmProblem(M, N, K, out_dtype=out)
    cfg = configure(prob, config)
    assert isinstance(cfg, Sm90Config) and cfg.bm == 192
    prog = Sm90Gemm(prob, cfg).build()
    kernel = prog.kernel()
    text = str(kernel)
    assert ".threads 512" in text and "USETMAXREG.DEALLOC.CTAPOOL 0x20" in text  # the producer at 32 registers
    assert text.count("USETMAXREG.TRY_ALLOC.CTAPOOL regs_granted, 0xa0") == 3  # each consumer at 160
    rep = check_kernel(kernel, prog.coloured(), values=True, expect=GEMM.expectation(prob))
    assert rep.ok, "\n".join(list(rep.messages())[:5])
    assert rep.values_wrong == 0 and rep.values_checked > 0
    res = assemble(kernel, "sm_90a").resource(kernel.header.kernel)
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.registers <= 128


def test_three_consumers_refuse_what_would_spill_and_four() -> None:
    prob = GemmProblem(1024, 1024, 1024, out_dtype="bf16")
    with pytest.raises(WarpyError, match="BN at most 192"):
        Sm90Gemm(prob, Sm90Config(bn=256, consumers=3, stages=3))
    with pytest.raises(WarpyError, match="promote's second accumulator would spill"):
        Sm90Gemm(GemmProblem(1024, 1024, 8192, "e4m3", "bf16"), Sm90Config(bn=128, consumers=3, stages=3, bk=128,
                                                                           promote=True))
    with pytest.raises(WarpyError, match="1 to 3 consumer warpgroups"):
        Sm90Gemm(prob, Sm90Config(bn=64, consumers=4, stages=3))


def _exact_in_every_cta(prob: GemmProblem, prog: Program) -> None:
    """Every CTA run on the CPU: every element of C computed and compared with numpy; no spills."""
    from warpy.check.report import CheckOptions, options

    kernel = prog.kernel()
    with options(CheckOptions(all_ctas=True)):
        rep = check_kernel(kernel, prog.coloured(), values=True, expect=GEMM.expectation(prob))
    assert rep.ok, "\n".join(list(rep.messages())[:5])
    assert rep.values_wrong == 0 and rep.values_checked == prob.M * prob.N
    res = assemble(kernel, "sm_90a").resource(kernel.header.kernel)
    assert res.spill_stores == 0 and res.spill_loads == 0


# -- A and B swapped (C^T = B·A^T) for short M: N along the MMA's 64-row side, M along its BN side -----

@pytest.mark.parametrize("M,N,K,config,out,ldc", [
    (1, 300, 136, "swap_ab=1,bn=16,consumers=1", "bf16", 0),  # one row (decode), ragged N
    # 2x1 clusters of N-blocks sharing A's box (multicast halves); 5 N-blocks: the last pair's second past N
    (20, 300, 200, "swap_ab=1,bn=32,consumers=1,cluster_m=2", "bf16", 0),
    *_slow((37, 301, 520, "swap_ab=1,bn=32,consumers=2", "fp32", 0),  # odd N: C's rows 301 elements apart
           (5, 200, 1024, "swap_ab=1,bn=16,consumers=1,stream_k=1,split=4", "bf16", 0)),  # K split 4 ways
    # C's rows 2 MiB apart: the tile's columns (C's rows) reach past a store's 24-bit offset, so the
    # stores move the address on a window at a time (a BN fitted to a narrow M beside a wide N)
    (20, 200, 64, "swap_ab=1,bn=24,consumers=1", "bf16", (1 << 20) + 8),
])
def test_swapped_operands_are_exact_on_ragged_shapes(M: int, N: int, K: int, config: str, out: str,
                                                     ldc: int) -> None:
    prob = GemmProblem(M, N, K, out_dtype=out, ldc=ldc)
    cfg = configure(prob, config)
    assert isinstance(cfg, Sm90Config) and cfg.swap_ab and not cfg.staged_epilogue  # (configure drops the staged epilogue for swap_ab)
    prog = Sm90Gemm(prob, cfg).build()
    kernel = prog.kernel()
    text = str(kernel)
    # the maps keep their memory: `a` is A (M rows of K), `b` is B (N rows); C is written transposed
    assert f".tmap a dtype=bf16 dims={K},{M} " in text and f".tmap b dtype=bf16 dims={K},{N} " in text
    eb = 2 if out == "bf16" else 4
    assert f"layout=({M},{N}):({(ldc or N) * eb},{eb})" in text  # (C as it lies in memory)
    assert ("IMAD.WIDE.U32 c_window" in text) == ((cfg.bn - 7) * (ldc or N) * eb >= 1 << 23)  # (the windows)
    if cfg.cluster_m == 2:  # A's map (the MMA's B) is the multicast one: each CTA's box is half its BN rows
        assert f"box=64,{cfg.bn // 2} " in text.split(".tmap a ")[1].split("\n")[0]
        assert "UTMALDG.2D.MULTICAST [tma_a], tmap[a]" in text and "MULTICAST [tma_b]" not in text
    _exact_in_every_cta(prob, prog)


def test_rings_run_as_deep_as_shared_memory_allows() -> None:
    from warpy.kernels.gemm import MAX_STAGES, model_config
    from warpy.kernels.gemm_sm90 import smem_bytes
    from warpy.target import SM90A

    prob = GemmProblem(1, 8192, 8192, out_dtype="bf16")
    cfg = model_config(prob, 64, 16, False, True)
    assert cfg.stages == MAX_STAGES == 16 and smem_bytes(cfg) <= SM90A.max_dynamic_smem
    for c in (model_config(prob, 128, 64, False, True), model_config(prob, 64, 128, False),
              model_config(prob, 64, 64, False), model_config(prob, 128, 256, False)):
        assert 3 <= c.stages < MAX_STAGES and smem_bytes(c) <= SM90A.max_dynamic_smem < smem_bytes(
            attrs.evolve(c, stages=c.stages + 1)), c  # each as deep as shared memory holds
    assert model_config(prob, 64, 64, False).stages == 13  # 16 KiB a stage, 64 x 64 fp32 C from the registers
    kernel = Sm90Gemm(prob, cfg).build().kernel()
    res = assemble(kernel, "sm_90a").resource(kernel.header.kernel)
    assert res.spill_stores == 0 and res.spill_loads == 0


def test_swapped_operands_refuse_what_they_do_not_take() -> None:
    # C^T staged: each C row a whole 16 bytes (N = 4100 bf16 is 8200 bytes), the map over C's own rows
    with pytest.raises(WarpyError, match=r"staged epilogue needs 16-bit C .*N=4100"):
        Sm90Gemm(GemmProblem(16, 4100, 4096, out_dtype="bf16"), Sm90Config(bn=16, consumers=1, swap_ab=True,
                                                                           staged_epilogue=True))
    with pytest.raises(WarpyError, match="does not take a batch"):
        Sm90Gemm(GemmProblem(16, 4096, 4096, batch=2), Sm90Config(bn=16, consumers=1, swap_ab=True))
    with pytest.raises(WarpyError, match="at least 16"):
        Sm90Gemm(GemmProblem(1, 4096, 4096), Sm90Config(bn=8, consumers=1, swap_ab=True))


# -- C^T staged: STSM.MT88 writes each 64-row block transposed, a TMA store moves BN rows of C ----------

@pytest.mark.parametrize("M,N,K,config,out", [
    (200, 776, 192, "swap_ab=1,bn=104,consumers=1,staged_epilogue=1", "bf16"),  # 13 groups: the last .x2
    # two CTAs, four tiles each: a block's staging tile reused only after its store has read it
    (100, 1024, 256, "swap_ab=1,bn=88,consumers=2,staged_epilogue=1,sms=2", "fp16"),
    *_slow((777, 520, 128, "swap_ab=1,bn=88,wg_rows=128,staged_epilogue=1", "bf16"),  # 256-row swapped tiles
           (40, 304, 64, "swap_ab=1,bn=48,consumers=1,staged_epilogue=1,cluster_m=2", "bf16")),
])
def test_swapped_staged_epilogue_is_exact_on_ragged_shapes(M: int, N: int, K: int, config: str, out: str) -> None:
    prob = GemmProblem(M, N, K, out_dtype=out)
    cfg = configure(prob, config)
    assert isinstance(cfg, Sm90Config) and cfg.swap_ab and cfg.staged_epilogue
    prog = Sm90Gemm(prob, cfg).build()
    kernel = prog.kernel()
    text = str(kernel)
    # C's map is over C as it lies in memory (M rows of N), its box BN rows of M by 64 columns of N
    assert f".tmap c dtype={out} dims={N},{M} " in text and f"box=64,{cfg.bn} " in text.split(".tmap c ")[1].split("\n")[0]
    assert "STSM.16.M88.T.4" in text and ("STSM.16.M88.T.2" in text) == bool(cfg.bn // 8 % 2)
    assert not re.search(r"^\s*(@\S+ )?STG", text, re.M)  # (nothing stored from the registers)
    _exact_in_every_cta(prob, prog)


# -- 256-row tiles: two consumer warpgroups of 128 rows, two HGMMAs a k step over the same B -----------

@pytest.mark.parametrize("M,N,K,config,out", [
    (600, 520, 192, "bn=128,wg_rows=128,consumers=2,staged_epilogue=1", "bf16"),  # ragged M and N, staged
    (300, 200, 128, "bn=96,wg_rows=128,consumers=1", "fp32"),  # 128-row tiles of one warpgroup, from registers
    *_slow((600, 520, 192, "bn=112,wg_rows=128,consumers=2,cluster_m=2", "bf16"),  # 2x1 clusters, B multicast
           (520, 296, 256, "bn=72,wg_rows=128,consumers=2,cluster_n=2,staged_epilogue=1", "fp16")),
])
def test_128_row_warpgroups_are_exact_on_ragged_shapes(M: int, N: int, K: int, config: str, out: str) -> None:
    prob = GemmProblem(M, N, K, out_dtype=out)
    cfg = configure(prob, config)
    assert isinstance(cfg, Sm90Config) and cfg.wg_rows == 128 and cfg.bm == 128 * cfg.consumers
    prog = Sm90Gemm(prob, cfg).build()
    kernel = prog.kernel()
    text = str(kernel)
    # each consumer: two accumulators, each BK / 16 HGMMAs a stage, the group's last one closing it
    assert text.count(f"HGMMA.64x{cfg.bn}x16") == 2 * 4 * cfg.consumers
    assert len(re.findall(r"HGMMA[^\n]*gsb0", text)) == cfg.consumers and f"_{cfg.bm}x{cfg.bn}x64_" in kernel.header.kernel
    rep = check_kernel(kernel, prog.coloured(), values=True, expect=GEMM.expectation(prob))
    assert rep.ok, "\n".join(list(rep.messages())[:5])
    assert rep.values_wrong == 0 and rep.values_checked > 0
    res = assemble(kernel, "sm_90a").resource(kernel.header.kernel)
    assert res.spill_stores == 0 and res.spill_loads == 0


def test_128_row_warpgroups_with_scales_and_a_fused_epilogue_are_exact() -> None:
    from warpy.kernels import gemm as G
    from warpy.kernels.gemm_epilogue import Epilogue

    fp8 = G.FAMILY.problem([300, 136, 256, "scale_a=row", "scale_b=col"], arch="sm_90a", dtype="e4m3",
                           out_dtype="bf16")
    fused = GemmProblem(300, 136, 128, out_dtype="bf16", epilogue=Epilogue(0.5, 0.0, "m", "relu", False))
    for prob, config in ((fp8, "bn=64,wg_rows=128,consumers=2"), (fused, "bn=72,wg_rows=128,consumers=2")):
        prog = G.build(prob, configure(prob, config))
        rep = check_kernel(prog.kernel(), None, values=True, expect=GEMM.expectation(prob))
        assert rep.ok, "\n".join(list(rep.messages())[:5])
        assert rep.values_wrong == 0 and rep.values_checked > 0


def test_128_row_warpgroups_refuse_what_they_cannot_take() -> None:
    prob = GemmProblem(1024, 1024, 1024, out_dtype="bf16")
    for cfg, why in ((Sm90Config(bn=64, wg_rows=96), "wg_rows 96: a consumer warpgroup computes 64 or 128 rows"),
                     (Sm90Config(bn=64, wg_rows=128, consumers=3), "more than two consumer warpgroups"),
                     (Sm90Config(bn=136, wg_rows=128), "BN 136 .* would spill"),
                     (Sm90Config(bn=128, wg_rows=128, stream_k=True), "stream-K"),
                     (Sm90Config(bn=64, wg_rows=128, stages=2, cluster_k=2), "cluster_k")):
        with pytest.raises(WarpyError, match=why):
            Sm90Gemm(prob, cfg)
    with pytest.raises(WarpyError, match="promote"):
        Sm90Gemm(GemmProblem(1024, 1024, 8192, "e4m3", "bf16"), Sm90Config(bn=64, wg_rows=128, bk=128, promote=True))


def test_the_swapped_staged_epilogue_is_refused_without_its_waits() -> None:
    """C^T staged through one tile a warpgroup: without the bulk wait before a block's STSMs (the
    store of the one before may still be reading the tile) or without the proxy fence (the TMA store
    may read before the STSMs land), the checker finds the unordered accesses to the staging tile."""
    from warpy.isa.text import parse
    from warpy.plan import check_problem

    prob = GemmProblem(100, 1024, 256, out_dtype="bf16")
    cfg = configure(prob, "swap_ab=1,bn=40,wg_rows=128,consumers=2,staged_epilogue=1,sms=3")
    assert check_problem(GEMM, prob, config=cfg).ok
    rep = check_problem(GEMM, prob, fault="no-proxy-fence", config=cfg)
    assert any(x.startswith("c_stage[") and "no proxy fence orders the two" in x for x in rep.messages())
    lines = str(Sm90Gemm(prob, cfg).build().kernel()).splitlines()
    waits = [i for i, x in enumerate(lines) if "DEPBAR.LE SB0" in x and any("STSM" in y for y in lines[i:i + 12])]
    assert len(waits) == 2 * cfg.consumers  # (each warpgroup's two blocks)
    rep = check_kernel(parse("\n".join(x for i, x in enumerate(lines) if i not in waits)), None,
                       expect=GEMM.expectation(prob))
    assert any(x.startswith("c_stage[") and "nothing orders the two" in x for x in rep.messages())
