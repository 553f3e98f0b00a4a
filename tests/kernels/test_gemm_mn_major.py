"""MN-major GEMM operands read in place on sm_90a (issue 19; sm_100a: test_gemm_sm100_mn_major.py): A stored K x M (`a=km`) and/or B stored
K x N (`b=kn`) land M / N innermost in 64-row TMA boxes and are read by HGMMA's transposed forms
(`gdesc[..].tnspA/.tnspB`, MN-major descriptor fields). Every combination checked with values on
ragged shapes; a program whose transpose bit is wrong caught; what stays refused, refused in one line;
K-major programs unchanged (tests/kernels/test_pinned_text.py). The wider shapes run with WARPY_SLOW=1."""

from __future__ import annotations

import os
import re

import pytest

from warpy.check.report import CheckOptions, check_kernel, options
from warpy.errors import WarpyError
from warpy.isa.text import parse
from warpy.kernels import gemm as G

COMBOS = [["a=km"], ["b=kn"], ["a=km", "b=kn"], []]
SLOW = pytest.mark.skipif(os.environ.get("WARPY_SLOW") != "1", reason="WARPY_SLOW=1")


@pytest.mark.parametrize("words", COMBOS, ids=lambda w: "+".join(w) or "mk+nk")
@pytest.mark.parametrize("M,N,K,out,config", [
    (200, 136, 72, "fp32", None),  # ragged M, N and K: the boxes' out-of-bounds fill
    pytest.param(64, 256, 40, "bf16", "bn=256", marks=SLOW),  # four 64-row boxes of B, the staged epilogue
    pytest.param(128, 192, 48, "fp16", "bn=192,stream_k=false,split=0", marks=SLOW),
])
def test_every_layout_combination_exact(words: list[str], M: int, N: int, K: int, out: str,
                                        config: str | None) -> None:
    prob = G.FAMILY.problem([M, N, K] + words, arch="sm_90a", out_dtype=out)
    prog = G.build(prob, G.configure(prob, config) if config else None)
    text = str(prog.kernel())
    flags = {f for f in re.findall(r"gdesc\[[^\]]+\]((?:\.tnsp[AB])*)", text)}
    want = "".join(f for f, w in ((".tnspA", "a=km"), (".tnspB", "b=kn")) if w in words)
    assert flags == {want}
    with options(CheckOptions(all_ctas=True)):
        rep = check_kernel(prog.kernel(), None, values=True, expect=G.FAMILY.expectation(prob))
    assert rep.ok, rep.messages()
    assert rep.values_checked == M * N and rep.values_wrong == 0


def _without(text: str, flag: str) -> str:
    return text.replace(flag, "")


@pytest.mark.parametrize("words,flag", [(["a=km"], ".tnspA"), (["b=kn"], ".tnspB")])
def test_a_wrong_transpose_bit_is_caught(words: list[str], flag: str) -> None:
    prob = G.FAMILY.problem([128, 128, 64] + words, arch="sm_90a", out_dtype="fp32")
    k = G.build(prob).kernel()
    text = str(k)
    assert flag in text
    rep = check_kernel(parse(_without(text, flag)), None, values=True, expect=G.FAMILY.expectation(prob))
    assert not rep.ok and rep.values_wrong > 0
    msgs = "\n".join(rep.messages())
    assert "the boxes the copy engine landed there disagree" in msgs or "the tensor maps disagree on K" in msgs
    assert re.search(r"values: \d+ of 16384 elements of C differ from numpy", msgs)


def test_a_k_major_program_fails_the_mn_major_expectation() -> None:
    dense = G.GemmProblem(128, 64, 64, out_dtype="fp32")
    mn = G.GemmProblem(128, 64, 64, out_dtype="fp32", a_major="MN", b_major="MN")
    rep = check_kernel(G.build(dense).kernel(), None, values=True, expect=G.FAMILY.expectation(mn))
    assert rep.values_wrong > 0


@pytest.mark.parametrize("args,kw,message", [
    ([100, 64, 64], {"a_major": "MN"}, r"^A is MN-major: its rows of 100 bf16 elements are 200 bytes; TMA needs a multiple of 16$"),
    ([128, 36, 64], {"b_major": "MN", "arch": "sm_100a"}, r"^B is MN-major: its rows of 36 bf16 elements are 72 bytes"),
    ([128, 64, 64], {"a_major": "T"}, r"^a_major='T': an operand is K-major"),
    ([128, 64, 64], {"a_major": "MN", "lda": 64}, r"^lda=64: a row pitch is 0 \(dense\) or at least the row's 128 elements$"),
])
def test_refusals(args: list[int], kw: dict[str, object], message: str) -> None:
    with pytest.raises(WarpyError, match=message):
        G.GemmProblem(*args, **kw)  # type: ignore[arg-type]


def test_command_line_words() -> None:
    p = G.FAMILY.problem([128, 64, 64, "a=km", "b=kn"], arch="sm_90a")
    assert (p.a_major, p.b_major, p.pitches) == ("MN", "MN", (128, 64, 64)) and "a=km b=kn" in str(p)
    assert G.build(p).name.endswith("_akm_bkn")
    with pytest.raises(WarpyError, match=r"^a=nk: a's layout is mk \(K contiguous\) or km \(M contiguous, MN-major\)$"):
        G.FAMILY.problem([128, 64, 64, "a=nk"], arch="sm_90a")
    p100 = G.FAMILY.problem([128, 64, 64, "b=kn"], arch="sm_100a")  # read in place there too
    assert p100.b_major == "MN" and G.build(p100).name.endswith("_bkn")


def test_the_rule_gives_an_mn_major_b_whole_64_row_boxes() -> None:
    for n in (208, 416, 1000, 4096):
        cfg = G.choose(G.GemmProblem(4096, n, 4096, b_major="MN"))
        assert cfg.bn % 64 == 0  # type: ignore[union-attr]


def test_pitched_and_batched_mn_major_operands_exact() -> None:
    prob = G.FAMILY.problem([128, 64, 64, "a=km", "b=kn", "lda=136", "ldb=72", "batch=2"], arch="sm_90a",
                            out_dtype="fp32")
    assert prob.pitches == (136, 72, 64) and prob.batch_strides == (64 * 136, 64 * 72, 128 * 64)
    with options(CheckOptions(all_ctas=True)):
        rep = check_kernel(G.build(prob).kernel(), None, values=True, expect=G.FAMILY.expectation(prob))
    assert rep.ok, rep.messages()
    assert rep.values_checked == 2 * 128 * 64 and rep.values_wrong == 0


@pytest.mark.parametrize("words,flags", [(["a=km"], ".tnspA"), (["a=km", "b=kn"], ".tnspA.tnspB")])
def test_ptxas_emits_the_transposed_hgmma(words: list[str], flags: str) -> None:
    """The text reads back, and through the lifter and ptxas every HGMMA of the cubin carries the bits."""
    from warpy.lift.disasm import disassemble
    from warpy.lift.lifter import build as assemble_text

    k = G.build(G.FAMILY.problem([200, 136, 72] + words, arch="sm_90a")).kernel()
    assert str(parse(str(k))) == str(k)
    hgmma = [i.operands for i in disassemble(assemble_text(k)).kernel().instructions if i.opcode.startswith("HGMMA")]
    assert hgmma and all(re.search(r"gdesc\[UR\d+\]" + re.escape(flags) + r"(,|$)", s) for s in hgmma), hgmma[:2]
