"""The attention family without a GPU (the GPU runs are tests/gpu/test_attention_gpu.py):

- the host checker runs the sm_90a program clean and, with values, every element of O the simulated
  CTAs write lies within the derived tolerance of the float64 softmax: head_dim 64 and 128, causal
  and not, grouped-query, ragged sequences, S_q != S_kv, both layouts, a scale that makes the
  online softmax rescale;
- the checker with values catches a program that skips the rescale of O or the mask;
- ptxas assembles it with no spill and no wgmma serialisation, and the disassembly shows HGMMA in
  both forms (A from shared memory and from registers; V's ring read MN-major, or transposed by LDSM.T), STSM, the TMA loads
  and store, MUFU.EX2 and the ping-pong's named-barrier arrivals;
- the CTA -> tile schedule the program emits is its model, and the model is the mask's meaning;
- problems and configurations it cannot run are refused in one line; `warpy check attention`
  goes through the family seam.
"""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.errors import WarpyError
from warpy.isa.program import Program
from warpy.kernels import attention as A
from warpy.kernels.attention_sm90 import Sm90Attention, Sm90AttentionConfig
from warpy.lift.disasm import disassemble
from warpy.lift.lifter import build as assemble

from attention_checks import assert_schedule_is_the_model_and_the_mask, check as _check


# (B, H, S, D, options): every case writes a ragged last tile or a masked block
VALUE_CASES = {
    "d128-causal-gqa-bhsd-queries-longer": A.problem(1, 2, 200, 128, causal=True, H_kv=1, S_kv=150, layout="bhsd",
                                                     scale=0.5),
    "d64-rescaling-keys-longer": A.problem(1, 1, 64, 64, S_kv=333, scale=4.0),
}


@pytest.mark.parametrize("name", list(VALUE_CASES))
def test_the_checker_computes_o_within_the_tolerance(name: str) -> None:
    checked, wrong, ok, summary = _check(VALUE_CASES[name])
    assert ok and wrong == 0 and checked > 0, summary


def test_a_configuration_the_rule_does_not_pick_runs_clean_named_and_coloured() -> None:
    """No ping-pong, 64-key blocks; both texts. Without ping-pong nothing but the epilogue's own
    barrier orders the other warps' last MMAs reading a Q half before O's STSM overwrites it (found
    by the checker: it is there now)."""
    prob = A.problem(1, 1, 200, 128, causal=True)
    checked, wrong, ok, summary = _check(prob, coloured=True,
                                         program=A.build(prob, A.configure(prob, "pingpong=false,bn=64")))
    assert ok and wrong == 0 and checked > 0, summary


@pytest.mark.parametrize("name", list(VALUE_CASES))
def test_v_transposed_in_shared_memory_computes_o_within_the_tolerance(name: str) -> None:
    """`v_mn=0`: three warps turn each V tile into Vᵀ (LDSM.T, STSM) in a ring of its own, which P·V
    reads K-major (the rule reads V's ring MN-major instead: the cases above)."""
    prob = VALUE_CASES[name]
    program = A.build(prob, A.configure(prob, "v_mn=0,k_stages=2,v_stages=2,t_stages=2"))
    assert "LDSM" in str(program.kernel()) and "vmn" not in program.name
    checked, wrong, ok, summary = _check(prob, program=program)
    assert ok and wrong == 0 and checked > 0, summary


class _NoRescale(Sm90Attention):
    def rescale_o(self, p: Program, o: object, rescale: object) -> None:  # type: ignore[override]
        pass


class _NoMask(Sm90Attention):
    def mask(self, p: Program, s: object, sm: object, blk: object) -> None:  # type: ignore[override]
        pass


@pytest.mark.parametrize("broken,prob", [
    (_NoRescale, A.problem(1, 1, 64, 64, S_kv=300, scale=4.0)),  # maxima grow past 2^8 between blocks
    (_NoMask, A.problem(1, 1, 100, 64, causal=True)),
])
def test_the_checker_with_values_catches_a_wrong_softmax(broken: type[Sm90Attention], prob: A.AttentionProblem) -> None:
    checked, wrong, ok, _ = _check(prob, program=broken(prob, A.choose(prob)).build())
    assert checked > 0 and wrong > checked // 20 and not ok


def test_the_tolerance_is_tight_enough_to_matter() -> None:
    """One bf16 ulp of error on every output of a typical row is within it; a P·V that loses a key's
    weight entirely is not."""
    prob = A.problem(1, 1, 64, 64)
    rng = np.random.default_rng(0)
    q, k, v = (A.small_values(rng, 64 * 64, x).reshape(1, 64, 1, 64) for x in "qkv")
    ref, mag = A.reference(prob, q, k, v)
    tol = A.tolerance(prob, ref, mag)
    assert np.all(np.abs(ref) * 2.0 ** -8 <= tol)
    s = q[0, :, 0] @ k[0, :, 0].T * prob.scale
    w = np.exp(s - s.max(1, keepdims=True))
    dropped = (w[:, 1:] @ v[0, 1:, 0]) / w[:, 1:].sum(1, keepdims=True)  # key 0 lost
    assert np.mean(np.abs(dropped - ref[0, :, 0]) > tol[0, :, 0]) > 0.5


@pytest.mark.parametrize("config", ["", "v_mn=0,k_stages=2,v_stages=2,t_stages=2"])
def test_assembles_without_spills_and_shows_both_hgmma_forms(config: str) -> None:
    """The rule (V's ring read MN-major: no LDSM) and the transposers (LDSM.T into Vᵀ)."""
    for prob in (A.problem(4, 16, 4096, 128, causal=True), A.problem(4, 16, 4096, 64, H_kv=4)):
        kernel = A.build(prob, A.configure(prob, config)).kernel()
        cubin = assemble(kernel, "sm_90a")  # fails on spills and wgmma serialisation; checks the opcodes
        res = cubin.resource(kernel.header.kernel)
        assert res.spill_stores == 0 and res.spill_loads == 0 and res.registers == 168
        ins = disassemble(cubin).kernel(kernel.header.kernel).instructions
        hgmma = [i for i in ins if i.opcode.startswith("HGMMA")]
        ss = [i for i in hgmma if i.operands.split(",")[1].strip().startswith("gdesc")]
        rs = [i for i in hgmma if i.operands.split(",")[1].strip().startswith("R")]
        assert ss and rs, [i.operands for i in hgmma[:4]]
        assert any(f"64x{prob.D}x16" in i.opcode for i in rs) and any("64x128x16" in i.opcode for i in ss)
        ops = {i.opcode for i in ins}
        assert any(o.startswith("LDSM.16.MT88.4") for o in ops) == bool(config)
        for want in ("STSM.16.M88.4", "UTMALDG", "UTMASTG", "MUFU.EX2", "MUFU.RCP", "BAR.ARV",
                     "USETMAXREG", "F2FP.BF16.F32.PACK_AB", "SHFL.BFLY", "FMNMX"):
            assert any(o == want or o.startswith(want + ".") for o in ops), (want, sorted(ops))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3), st.sampled_from([(1, 1), (4, 4), (4, 2), (6, 1)]), st.integers(1, 700),
       st.integers(1, 700), st.booleans(), st.sampled_from([64, 128]))
def test_the_emitted_schedule_is_the_model_and_the_model_is_the_mask(B: int, heads: tuple[int, int], S: int, S_kv: int,
                                                                      causal: bool, bn: int) -> None:
    prob = A.problem(B, heads[0], S, 64, causal=causal, H_kv=heads[1], S_kv=S_kv)
    assert_schedule_is_the_model_and_the_mask(Sm90Attention(prob, Sm90AttentionConfig(bn=bn)))


@pytest.mark.parametrize("kw,match", [
    (dict(B=1, H=2, S=64, D=96), "head_dim"),
    (dict(B=1, H=3, S=64, D=64, H_kv=2), "does not divide"),
    (dict(B=0, H=2, S=64, D=64), "at least 1"),
    (dict(B=1, H=2, S=64, D=64, scale=-1.0), "scale"),
    (dict(B=1, H=2, S=64, D=64, layout="sbhd"), "layout"),
])
def test_problems_it_cannot_run_are_refused_in_one_line(kw: dict[str, object], match: str) -> None:
    with pytest.raises(WarpyError, match=match) as e:
        A.problem(**kw)  # type: ignore[arg-type]
    assert "\n" not in str(e.value)


def test_configurations_it_cannot_run_are_refused_in_one_line() -> None:
    prob = A.problem(1, 2, 256, 128)
    for over, match in (("bn=96", "key block"), ("k_stages=4", "shared memory"), ("v_stages=1", "v_stages=1"),
                        ("v_mn=0", "shared memory"),  # (the rule's K and V rings and a Vᵀ ring of two)
                        ("rescale_threshold=40", "threshold"), ("bogus=1", "no field")):
        with pytest.raises(WarpyError, match=match) as e:
            A.build(prob, A.configure(prob, over))
        assert "\n" not in str(e.value)
    with pytest.raises(WarpyError, match="sm_90a configuration"):
        A.build(prob, A.choose(A.problem(1, 2, 256, 128, arch="sm_100a")))


def test_the_rule_fills_shared_memory_and_counts_flops() -> None:
    # V's ring read MN-major, no Vᵀ ring: D = 128 fits K and V three stages (Q 32 KiB + 6 x 32 KiB), D = 64 four
    rule = [A.choose(A.problem(1, 1, 64, d)) for d in (128, 64)]
    assert [(c.v_mn, c.k_stages, c.v_stages) for c in rule] == [(True, 3, 3), (True, 4, 4)]
    p = A.problem(2, 3, 5, 64, causal=True, S_kv=3)
    assert p.pairs == sum(min(i + 1, 3) for i in range(5)) and p.flops == 4 * 2 * 3 * p.pairs * 64
    assert A.problem(2, 3, 5, 64, S_kv=3).pairs == 15
    assert A.problem_from_words([1, 4, 100, 128, "causal", "bhsd", "hkv=2", "skv=70", "scale=0.5"], "sm_90a") == \
        A.problem(1, 4, 100, 128, causal=True, layout="bhsd", H_kv=2, S_kv=70, scale=0.5)


def test_warpy_check_attention_goes_through_the_family_seam() -> None:
    """(also the value case of head_dim 64, a ragged second tile, the bshd layout)"""
    from warpy_in_process import run_cli

    p = run_cli("check", "attention", "1", "1", "200", "64", "--values", "--no-colour", timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "output values computed, 0 differ" in p.stdout
