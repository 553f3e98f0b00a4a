"""C's rows and TMA stores (issue 19's bug on the H200): a TMA store clips its box at a row's end only
to 16 bytes, so a C whose rows are not a whole number of 16 bytes (N = 33 bf16: 66 bytes) but whose
pitch is (a slice `c[:, :33]` of a 40-column c) had the gap columns 33..39 of every row overwritten by
the sm_90a staged epilogue (`warpy.mm(a[:, :K], w[:, :K].t(), out=c[:, :33])`, bf16 in and out:
903 = 129 x 7 elements). Here: the rule never stores such rows by TMA on either target, a program
asked to is refused in one line, the builder refuses the store, the plan the user's call builds is
checked with values on every CTA (C's gaps untouched), and the checker reports the old program's
stores (tests/check/corpus: tma-store-ragged-row). The GPU half is tests/gpu/test_gemm_layouts_gpu.py
(`layouts`)."""

from __future__ import annotations

from typing import Any, Optional

import attrs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import warpy.matmul as mm
from warpy.check.report import CheckOptions, check_kernel, options
from warpy.errors import WarpyError
from warpy.isa.program import Program
from warpy.isa.units.tma import tma_store
from warpy.kernels import gemm as G
from warpy.kernels.gemm_sm90 import Sm90Config
from warpy.kernels.gemm_sm100 import Sm100Config
from warpy.layout import Layout
from warpy.layout.tma import TmaBox, store_clips_exactly


class _Dev:
    """A device matrix by `__cuda_array_interface__` (fp16: the interface has no bf16)."""

    def __init__(self, shape: tuple[int, int], ptr: int, strides: Optional[tuple[int, int]] = None) -> None:
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f2", "data": (ptr, False),
                                         "strides": strides, "version": 3}


class _Record:
    """A stand-in for warpy.matmul's launcher: keeps the calls."""

    def __init__(self) -> None:
        self.calls: list[mm.GemmCall] = []

    def launch(self, call: mm.GemmCall, out: Any, stream: Any) -> None:
        self.calls.append(call)


def _check(problem: G.GemmProblem, cfg: Any = None) -> Any:
    with options(CheckOptions(all_ctas=True)):
        return check_kernel(G.build(problem, cfg).kernel(), None, values=True, expect=G.FAMILY.expectation(problem))


def test_store_clips_exactly_golden() -> None:
    assert [store_clips_exactly(b) for b in (16, 66, 80, 1018, 1008, 4)] == [True, False, True, False, True, False]
    box = TmaBox("bf16", dims=(33, 129), strides=(80,), box=(64, 64), swizzle=128)
    assert not box.stores_exactly and attrs.evolve(box, dims=(40, 129)).stores_exactly


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("out", ["fp16", "bf16"])
def test_the_users_slice_call_plans_a_program_that_leaves_the_gaps_alone(monkeypatch: pytest.MonkeyPatch, arch: str,
                                                                        out: str) -> None:
    """The layouts case's call: warpy.mm(a_wide[:, :16], w_wide[:, :16].t(), out=c_wide[:, :33]) with
    a_wide 129 x 24, w_wide 33 x 32, c_wide 129 x 40: the problem its plan key stands for, on each
    target, is stored from the registers and checked clean with values on every CTA, C's gap
    columns 33..39 unwritten (the expectation counts a written gap byte)."""
    rec = _Record()
    monkeypatch.setattr(mm, "_launches", rec)
    M, N, K = 129, 33, 16
    a = _Dev((M, K), 0x7F0000000000, strides=(2 * 24, 2))
    w = _Dev((K, N), 0x7F0000100000, strides=(2, 2 * 32))  # w_wide[:, :16].t()
    c = _Dev((M, N), 0x7F0000200000, strides=(2 * 40, 2))
    mm.mm(a, w, out=c)
    key = rec.calls[-1].key
    assert key == (M, N, K, "fp16", "fp16", (24, 32, 40))
    problem = attrs.evolve(mm.problem_of(key, arch), out_dtype=out)
    cfg = G.choose(problem)
    assert not (cfg.staged_epilogue if isinstance(cfg, Sm90Config) else cfg.tma_store)
    rep = _check(problem)
    assert rep.ok, rep.messages()
    assert rep.values_checked == M * N and rep.values_wrong == 0


def test_the_old_program_is_refused_and_was_caught() -> None:
    """The configuration the rule used to pick (the staged epilogue) is refused in one line; its text
    (with the refusal lifted) draws the checker's tma-store-row-end report."""
    problem = G.GemmProblem(129, 33, 16, out_dtype="bf16", lda=24, ldb=32, ldc=40)
    staged = G.deepest_ring(attrs.evolve(G.choose(problem), staged_epilogue=True))
    with pytest.raises(WarpyError, match=r"^the staged epilogue needs 16-bit C with rows a multiple of 16 bytes "
                                         r"\(N=33, bf16, ldc=40\): a TMA store writes a ragged row's last 16 bytes "
                                         r"whole, past its end$"):
        G.build(problem, staged)
    wide = G.GemmProblem(129, 40, 16, out_dtype="bf16", lda=24, ldb=32)  # the same program with N = 40 ...
    text = str(G.build(wide, staged).kernel()).replace(".tmap c dtype=bf16 dims=40,129",
                                                       ".tmap c dtype=bf16 dims=33,129")  # ... storing 33 columns
    from warpy.isa.text import parse

    with options(CheckOptions(all_ctas=True)):
        rep = check_kernel(parse(text), None)
    assert any("across the end of its rows of 33 bf16 (66 bytes, not a whole number of 16)" in m
               for m in rep.problems.msgs["memory"]), rep.messages()


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 600), st.integers(0, 3), st.sampled_from(["bf16", "fp16", "fp32"]),
       st.sampled_from(["sm_90a", "sm_100a"]))
def test_the_rule_stores_by_tma_only_rows_of_whole_16_bytes(N: int, extra: int, out: str, arch: str) -> None:
    """Any N, dense or a slice of a wider C (ldc: N rounded up to 16 bytes, plus `extra` 16s): C
    leaves by TMA only where N's row is whole 16 bytes; sm_90a's 16-bit C still does wherever it is
    (the staged epilogue is the fast one)."""
    eb = 4 if out == "fp32" else 2
    step = 16 // eb
    ldc = 0 if extra == 0 else (N + step - 1) // step * step + (extra - 1) * step
    if ldc == N:
        ldc = 0
    problem = G.GemmProblem(256, N, 64, out_dtype=out, arch=arch, ldc=ldc)
    cfg = G.choose(problem)
    whole = (N * eb) % 16 == 0
    if isinstance(cfg, Sm90Config):
        assert cfg.staged_epilogue == (whole and eb == 2)
    else:
        assert isinstance(cfg, Sm100Config)
        assert not cfg.tma_store or whole
        forced = attrs.evolve(cfg, tma_store=True, split=1, stream_k=False)
        text = str(G.build(problem, forced).kernel())
        assert ("\n.tmap c " in text) == whole  # a ragged row leaves from the registers even when asked


def test_the_builder_refuses_a_tma_store_of_ragged_rows() -> None:
    p = Program("ragged_store", "sm_90a", threads=32)
    dst = p.tmap("dst", TmaBox("bf16", dims=(33, 64), strides=(80,), box=(64, 64), swizzle=128))
    from warpy.layout import Swizzle, SwizzledLayout

    tile = p.smem("tile", SwizzledLayout(Swizzle(3, 4, 3), Layout((64, 64), (128, 2))), "bf16")
    with pytest.raises(WarpyError, match=r"^tensor map dst: rows of 33 bf16 are 66 bytes, not a whole number of 16; "
                                         r"a TMA store writes a row's last 16 bytes whole, past its end"):
        tma_store(p, tile.at(0, 0), dst, [0, 0])


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 70), st.integers(0, 3), st.integers(1, 3), st.sampled_from(["bf16", "fp32"]),
       st.data())
def test_stray_writes_counts_exactly_the_bytes_outside_cs_elements(M: int, N: int, extra: int, batch: int, out: str,
                                                                     data: st.DataObject) -> None:
    """The expectation's count of C's memory written outside its elements: 0 when every element (and
    nothing else) is written, one more for each gap or tail byte written."""
    eb = 4 if out == "fp32" else 2
    step = 16 // eb
    ldc = (N + step - 1) // step * step + extra * step
    sc = M * ldc + step * data.draw(st.integers(0, 2))
    p = G.GemmProblem(M, N, 64, out_dtype=out, ldc=ldc, batch=batch, stride_c=sc if batch > 1 else 0)
    size = ((batch - 1) * p.batch_strides[2] + M * ldc + step) * eb
    written = np.zeros(size, dtype=bool)
    for i in range(batch):
        for r in range(M):
            at = (i * p.batch_strides[2] + r * ldc) * eb
            written[at: at + N * eb] = True
    assert G._stray_writes(written, p) == 0
    gaps = np.flatnonzero(~written)
    picks = data.draw(st.lists(st.sampled_from(list(gaps)), max_size=5, unique=True)) if gaps.size else []
    written[picks] = True
    assert G._stray_writes(written, p) == len(picks)
