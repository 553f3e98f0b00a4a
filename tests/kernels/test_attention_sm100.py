"""The sm_100a attention program without a B200 (it has never run on one):

- the host checker runs it clean (addresses, mbarrier protocol, tcgen05 ordering, tensor-memory
  allocation, the coloured text) and, with values, every element of O the simulated CTAs write lies
  within the derived tolerance of the float64 softmax: head_dim 64 and 128, causal and not,
  grouped-query, ragged sequences, S_q != S_kv both ways, both layouts, a scale that makes the online
  softmax rescale O in tensor memory; the rule's two-tile program and the one-tile program;
- seeded faults are caught: a missing tcgen05.fence::after_thread_sync or ::before_thread_sync
  (unordered tensor-memory accesses), a skipped mask, a skipped rescale of O (values);
- ptxas assembles it with no spill, and the disassembly shows UTCHMMA in both forms (A from shared
  memory, A = P from tensor memory), LDTM, STTM, UTCBAR, the TMA loads and store, the SYNCS
  barrier operations and the transposing LDSM;
- the CTA -> tile schedule it emits is its model (the sm_90a program's for one tile), the model is
  the mask's meaning (brute force, two tiles), and it is refused in one
  line where it cannot run; `warpy check attention ... --arch sm_100a --values` and
  `warpy attention ... --arch sm_100a --no-run` go through the family seam.

Longer cases run with WARPY_SLOW=1.
"""

from __future__ import annotations

import os
import subprocess
import sys

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.check.report import check_program
from warpy.errors import WarpyError
from warpy.isa.program import Program
from warpy.kernels import attention as A
from warpy.kernels.attention_sm90 import Sm90Attention, Sm90AttentionConfig
from warpy.kernels.attention_sm100 import Sm100Attention, Sm100AttentionConfig, smem_bytes, tmem_columns
from warpy.lift.disasm import disassemble
from warpy.lift.lifter import build as assemble
from warpy.target import SM100A

from attention_checks import assert_schedule_is_the_model_and_the_mask, check as _check

SLOW = os.environ.get("WARPY_SLOW") == "1"


def problem(B: int, H: int, S: int, D: int, **kw: object) -> A.AttentionProblem:
    return A.problem(B, H, S, D, arch="sm_100a", **kw)  # type: ignore[arg-type]


def _rule(prob: A.AttentionProblem) -> Sm100AttentionConfig:
    cfg = A.choose(prob)
    assert isinstance(cfg, Sm100AttentionConfig)
    return cfg


# every case writes a ragged last tile or a masked block
VALUE_CASES = {
    "d128-causal-gqa-bhsd-queries-longer": problem(1, 2, 200, 128, causal=True, H_kv=1, S_kv=150, layout="bhsd",
                                                   scale=0.5),
    "d64-rescaling-keys-longer": problem(1, 1, 64, 64, S_kv=333, scale=4.0),
}
SLOW_CASES = {
    "d128-plain-ragged": problem(1, 1, 300, 128),
    "d64-causal-mqa-bhsd": problem(2, 4, 257, 64, causal=True, H_kv=1, layout="bhsd"),
    "d128-causal-keys-longer-rescaling": problem(1, 2, 130, 128, causal=True, S_kv=400, scale=3.0),
}


@pytest.mark.parametrize("name", list(VALUE_CASES) + [pytest.param(n, marks=pytest.mark.skipif(not SLOW, reason="WARPY_SLOW=1"))
                                                      for n in SLOW_CASES])
def test_the_checker_computes_o_within_the_tolerance(name: str) -> None:
    prob = {**VALUE_CASES, **SLOW_CASES}[name]
    checked, wrong, ok, summary = _check(prob, coloured=True)
    assert ok and wrong == 0 and checked > 0, summary


@pytest.mark.parametrize("over", ["tiles=1", "bn=64,k_stages=1,t_stages=1,rescale_threshold=1",
                                  pytest.param("tiles=1,bn=64,k_stages=1,t_stages=1,rescale_threshold=1",
                                               marks=pytest.mark.skipif(not SLOW, reason="WARPY_SLOW=1"))])
def test_configurations_the_rule_does_not_pick_run_clean(over: str) -> None:
    """The one-tile program (S double-buffered, P in columns of its own, o_done waited every block)
    and 64-key blocks with single-stage K and Vᵀ rings and a threshold of 1 (O rescaled more
    often), for both programs; named text only (the coloured one is checked above)."""
    prob = problem(1, 1, 150, 64, causal=True, scale=2.0)
    cfg = A.configure(prob, over)
    assert isinstance(cfg, Sm100AttentionConfig)
    checked, wrong, ok, summary = _check(prob, program=A.build(prob, cfg), coloured=False)
    assert ok and wrong == 0 and checked > 0, summary


@pytest.mark.skipif(not SLOW, reason="WARPY_SLOW=1 (about ten seconds an example)")
@settings(max_examples=8, deadline=None)
@given(st.sampled_from([64, 128]), st.booleans(), st.sampled_from([(2, 2), (2, 1), (4, 2)]), st.integers(1, 300),
       st.integers(1, 300), st.sampled_from(["bshd", "bhsd"]), st.sampled_from([1, 2]))
def test_hypothesis_drawn_problems_run_clean_within_the_tolerance(D: int, causal: bool, heads: tuple[int, int], S: int,
                                                                  S_kv: int, layout: str, tiles: int) -> None:
    """(head_dim, causal, GQA ratio, ragged S_q and S_kv, layout, program) drawn; the checker's
    first and last CTAs, with values."""
    prob = problem(1, heads[0], S, D, causal=causal, H_kv=heads[1], S_kv=S_kv, layout=layout)
    cfg = A.configure(prob, f"tiles={tiles}")
    checked, wrong, ok, summary = _check(prob, program=A.build(prob, cfg), coloured=False)
    assert ok and wrong == 0 and checked > 0, summary


class _NoFenceAfter(Sm100Attention):
    def fence_after_wait(self, p: Program) -> None:
        pass


class _NoFenceBefore(Sm100Attention):
    def fence_before_handoff(self, p: Program) -> None:
        pass


class _NoMask(Sm100Attention):
    def mask(self, p: Program, s: object, row: object, blk: object) -> None:
        pass


class _NoRescale(Sm100Attention):
    def rescale_o(self, p: Program, row: object, rescale: object, o_addr: object) -> None:
        pass


@pytest.mark.parametrize("broken", [_NoFenceAfter, pytest.param(_NoFenceBefore, marks=pytest.mark.skipif(
    not SLOW, reason="WARPY_SLOW=1"))])
def test_a_missing_tcgen05_fence_is_caught(broken: type[Sm100Attention]) -> None:
    """Without fence::after_thread_sync the MMA warp's UTCHMMA and the softmax's LDTM are not ordered
    after the waits that carry the other side's work; without fence::before_thread_sync the softmax's
    STTM of P (and its last LDTM of O) do not travel with its arrivals."""
    prob = problem(1, 1, 64, 64, S_kv=200)
    rep = check_program(broken(prob, _rule(prob)).build(), expect=A.FAMILY.expectation(prob), values=True)
    assert not rep.ok
    text = rep.text()
    assert "tensor memory: LDTM.x32, warp 4 reads it and UTCHMMA, warp 1 writes it, and nothing orders the two" in text


@pytest.mark.parametrize("broken,prob", [
    (_NoRescale, problem(1, 1, 64, 64, S_kv=300, scale=4.0)),  # maxima grow past 2^8 between blocks
    (_NoMask, problem(1, 1, 100, 64, causal=True)),
])
def test_the_checker_with_values_catches_a_wrong_softmax(broken: type[Sm100Attention], prob: A.AttentionProblem) -> None:
    checked, wrong, ok, _ = _check(prob, program=broken(prob, _rule(prob)).build(), coloured=False)
    assert checked > 0 and wrong > checked // 20 and not ok


def test_assembles_without_spills_and_shows_both_utchmma_forms() -> None:
    for prob in (problem(4, 16, 4096, 128, causal=True), problem(4, 16, 4096, 64, H_kv=4)):
        kernel = A.build(prob).kernel()
        cubin = assemble(kernel, "sm_100a")  # fails on spills; checks every opcode of the text is there
        res = cubin.resource(kernel.header.kernel)
        assert res.spill_stores == 0 and res.spill_loads == 0 and res.registers == 168  # 384 threads, USETMAXREG
        ins = disassemble(cubin).kernel(kernel.header.kernel).instructions
        mma = [i for i in ins if i.opcode == "UTCHMMA"]
        ss = [i for i in mma if i.operands.split(",")[0].strip().startswith("gdesc")]
        ts = [i for i in mma if i.operands.split(",")[0].strip().startswith("tmem")]
        assert ss and ts, [i.operands for i in mma[:4]]
        ops = {i.opcode for i in ins}
        for want in ("LDTM.x32", "STTM.x32", "UTCBAR", "UTMALDG", "UTMASTG", "SYNCS.ARRIVE.TRANS64",
                     "SYNCS.PHASECHK.TRANS64.TRYWAIT", "UTCATOMSWS.FIND_AND_SET.ALIGN", "UTCATOMSWS.AND",
                     "LDSM.16.MT88.4", "STSM.16.M88.4", "MUFU.EX2", "MUFU.RCP", "F2FP.BF16.F32.PACK_AB", "FMNMX",
                     "USETMAXREG"):
            assert any(o == want or o.startswith(want + ".") for o in ops), (want, sorted(ops))


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 2), st.sampled_from([(1, 1), (4, 2), (6, 1)]), st.integers(1, 700), st.integers(1, 700),
       st.booleans(), st.sampled_from([64, 128]), st.sampled_from([1, 2]))
def test_the_emitted_schedule_is_the_model_and_the_model_is_the_mask(B: int, heads: tuple[int, int], S: int,
                                                                      S_kv: int, causal: bool, bn: int,
                                                                      tiles: int) -> None:
    """One tile: the same CTA -> tile map and key-block counts as the sm_90a program; either: the
    emitted arithmetic is the model, and the model is what the mask means for the CTA's rows."""
    prob = problem(B, heads[0], S, 64, causal=causal, H_kv=heads[1], S_kv=S_kv)
    model = assert_schedule_is_the_model_and_the_mask(Sm100Attention(prob, Sm100AttentionConfig(bn=bn, tiles=tiles,
                                                                                                t_stages=1)))
    if tiles == 1:
        hopper = Sm90Attention(A.problem(B, heads[0], S, 64, causal=causal, H_kv=heads[1], S_kv=S_kv),
                               Sm90AttentionConfig(bn=bn))
        assert model == [hopper.tile_of(x) for x in range(hopper.grid)]


def test_the_rule_picks_two_tiles_and_the_deepest_rings_and_refuses_in_one_line() -> None:
    assert A.choose(problem(1, 1, 64, 128)) == Sm100AttentionConfig(bn=128, k_stages=2, v_stages=2, t_stages=1, tiles=2)
    assert A.choose(problem(1, 1, 64, 64)) == Sm100AttentionConfig(bn=128, k_stages=4, v_stages=2, t_stages=4, tiles=2)
    for cfg, d in ((A.choose(problem(1, 1, 64, 128)), 128), (A.choose(problem(1, 1, 64, 64)), 64)):
        assert isinstance(cfg, Sm100AttentionConfig)
        assert tmem_columns(cfg, d) <= 512 and smem_bytes(cfg, d) <= SM100A.max_dynamic_smem
        for field in ("k_stages", "t_stages"):  # the rings are as deep as fits (4 stages at most)
            deeper = attrs.evolve(cfg, **{field: getattr(cfg, field) + 1})
            assert smem_bytes(deeper, d) > SM100A.max_dynamic_smem or getattr(deeper, field) > 4
    prob = problem(1, 2, 256, 128)
    for over, match in (("bn=96", "key block"), ("k_stages=3", "shared memory"), ("v_stages=1", "v_stages=1"),
                        ("rescale_threshold=0", "threshold"), ("pingpong=false", "no field"), ("tiles=3", "1 or 2"),
                        ("tiles=1,t_stages=8", "shared memory")):
        with pytest.raises(WarpyError, match=match) as e:
            A.build(prob, A.configure(prob, over))
        assert "\n" not in str(e.value)
    with pytest.raises(WarpyError, match="sm_100a configuration") as e:
        A.build(prob, Sm90AttentionConfig())
    assert "\n" not in str(e.value)


def test_warpy_check_attention_sm100a_goes_through_the_family_seam() -> None:
    """(also the value case of head_dim 64, causal, a ragged second tile, the bshd layout)"""
    from warpy_in_process import run_cli

    p = run_cli("check", "attention", "1", "1", "200", "64", "causal", "--arch", "sm_100a", "--values", "--no-colour",
                timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "output values computed, 0 differ" in p.stdout and "attention_sm100_" in p.stdout + p.stderr


@pytest.mark.skipif(not SLOW, reason="WARPY_SLOW=1 (ptxas, a few seconds)")
def test_warpy_attention_builds_lifts_and_assembles_for_sm100a() -> None:
    p = subprocess.run([sys.executable, "-m", "warpy.cli", "attention", "2", "4", "1000", "128", "--causal", "--arch",
                        "sm_100a", "--no-run"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 spill bytes" in p.stdout and "disassembly check passed" in p.stdout
