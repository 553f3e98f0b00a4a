"""8-bit float GEMMs on sm_90a (issue 18): e4m3 / e5m2 inputs (each operand its own) through QGMMA,
fp32 accumulation, scales per tensor and per row (A) / column (B) applied to the accumulators.
Checked with values on ragged shapes (every element of C against numpy, the inputs decoded exactly,
the scales powers of two so the products are exact); a wrong scale index is caught; the tile is
derived (one 128-byte swizzle row of K a stage); the program assembles to QGMMA; what is refused is
refused in one line. Wider shapes run with WARPY_SLOW=1."""

from __future__ import annotations

import os
import re

import pytest

from warpy.check.report import CheckOptions, check_kernel, options
from warpy.errors import WarpyError
from warpy.isa.text import parse
from warpy.kernels import gemm as G
from warpy.kernels import gemm_fp8 as F

SLOW = pytest.mark.skipif(os.environ.get("WARPY_SLOW") != "1", reason="WARPY_SLOW=1")


def _check(prob: G.GemmProblem, config: str | None = None, all_ctas: bool = True):  # type: ignore[no-untyped-def]
    prog = G.build(prob, G.configure(prob, config) if config else None)
    with options(CheckOptions(all_ctas=all_ctas)):
        return prog, check_kernel(prog.kernel(), None, values=True, expect=G.FAMILY.expectation(prob))


@pytest.mark.parametrize("M,N,K,words,dtype,out", [
    (200, 136, 96, ["scale_a=row", "scale_b=col"], "e4m3", "bf16"),  # ragged M and N, K below one stage
    (130, 250, 272, ["scale_a=tensor", "scale_b=col"], "e5m2", "fp32"),  # ragged K (3 stages, the last partial)
    (77, 301, 48, ["b_dtype=e5m2", "scale_a=row", "scale_b=tensor"], "e4m3", "bf16"),  # odd N: single loads
    pytest.param(129, 255, 160, ["b_dtype=e4m3", "scale_a=row"], "e5m2", "fp16", marks=SLOW),
    (64, 64, 128, [], "e4m3", "fp32"),  # no scales
    pytest.param(384, 1024, 512, ["scale_a=row", "scale_b=col"], "e4m3", "bf16", marks=SLOW),  # 128 x 256 tiles
])
def test_fp8_exact(M: int, N: int, K: int, words: list[str], dtype: str, out: str) -> None:
    prob = G.FAMILY.problem([M, N, K] + words, arch="sm_90a", dtype=dtype, out_dtype=out)
    prog, rep = _check(prob)
    assert rep.ok, rep.messages()
    assert rep.values_wrong == 0 and rep.values_checked + rep.values_partial >= M * N
    text = str(prog.kernel())
    a_t, b_t = prob.dtype.upper(), prob.b_type.upper()
    assert re.findall(r"QGMMA\.64x\d+x32\.F32\.(\w+)\.(\w+) ", text) and \
        set(re.findall(r"QGMMA\.64x\d+x32\.F32\.(\w+)\.(\w+) ", text)) == {(a_t, b_t)}
    assert "HGMMA" not in text


def test_stream_k_partial_sums_are_scaled_once() -> None:
    """Split K: the finisher scales the sum of every piece (not each piece's own)."""
    prob = G.FAMILY.problem([128, 128, 1024, "scale_a=row", "scale_b=col"], arch="sm_90a", dtype="e4m3",
                            out_dtype="fp32")
    _, rep = _check(prob, "bn=128,stream_k=true,split=4")
    assert rep.ok, rep.messages()
    assert rep.values_checked == 128 * 128 and rep.values_wrong == 0 and rep.values_partial == 0


@SLOW
def test_stream_k_over_two_ctas() -> None:
    """Stream-K shares 3 tiles' k blocks over 2 CTAs (a tile's pieces in both), per-tensor scales."""
    prob = G.FAMILY.problem([128, 384, 2048, "scale_a=tensor", "scale_b=tensor"], arch="sm_90a", dtype="e4m3",
                            out_dtype="bf16")
    _, rep = _check(prob, "bn=128,stream_k=true,split=0,sms=2")
    assert rep.ok, rep.messages()
    assert rep.values_checked == 128 * 384 and rep.values_wrong == 0 and rep.values_partial == 0


def _scale_load(text: str, name: str) -> str:
    m = re.search(rf"desc\[sc_md\]\[sc_{name}_ptr\.64\+0x20\]", text)
    assert m, f"no load of {name} at +0x20"
    return m.group(0)


@pytest.mark.parametrize("name,words", [("scale_a", ["scale_a=row"]), ("scale_b", ["scale_b=col"])])
def test_a_wrong_scale_index_is_caught(name: str, words: list[str]) -> None:
    """The row scale of rows 8.. (or the column scale of columns 8..) read from row (column) 0's."""
    prob = G.FAMILY.problem([128, 64, 64] + words, arch="sm_90a", dtype="e4m3", out_dtype="fp32")
    text = str(G.build(prob).kernel())
    load = _scale_load(text, name)
    bad = text.replace(load, load.replace("+0x20", ""), 1)
    rep = check_kernel(parse(bad), None, values=True, expect=G.FAMILY.expectation(prob))
    assert not rep.ok and rep.values_wrong > 0
    assert re.search(r"values: \d+ of 8192 elements of C differ from numpy", "\n".join(rep.messages()))


def test_the_tile_is_one_swizzle_row_of_k_a_stage() -> None:
    """BK = 128 bytes of K: 128 fp8 elements (64 bf16), the same bytes a stage, the same ring depth;
    above K = 4096 the k blocks are promoted into fp32 and BN is at most 192 (two accumulators)."""
    c8 = G.choose(G.GemmProblem(4096, 4096, 4096, dtype="e4m3", out_dtype="bf16"))
    c16 = G.choose(G.GemmProblem(4096, 4096, 4096, dtype="bf16", out_dtype="bf16"))
    assert isinstance(c8, G.Sm90Config) and isinstance(c16, G.Sm90Config)
    assert (c8.bm, c8.bn, c8.bk, c8.promote) == (128, 256, 128, False) and c16.bk == 64
    assert c8.stages == c16.stages
    assert "QGMMA 64x256x32" in c8.describe()
    for shape in ((8192, 8192, 8192), (8192, 28672, 8192), (2048, 2048, 16384), (1, 8192, 8192)):
        c = G.choose(G.GemmProblem(*shape, dtype="e4m3", out_dtype="bf16"))
        assert isinstance(c, G.Sm90Config) and c.promote and c.bn <= F.PROMOTE_MAX_BN and c.bk == 128
        assert "promotion" in c.describe()
    assert not G.choose(G.GemmProblem(8192, 8192, 8192, dtype="bf16", out_dtype="bf16")).promote  # type: ignore[union-attr]


@pytest.mark.parametrize("M,N,K,config,words", [
    (200, 136, 1024, "promote=true,bn=128", ["scale_a=row", "scale_b=col"]),
    (128, 192, 512, "promote=true,bn=192,stream_k=true,split=2", []),  # stream-K's pieces promoted too
])
def test_promoted_k_blocks_exact(M: int, N: int, K: int, config: str, words: list[str]) -> None:
    prob = G.FAMILY.problem([M, N, K] + words, arch="sm_90a", dtype="e4m3", out_dtype="fp32")
    prog, rep = _check(prob, config)
    assert rep.ok, rep.messages()
    assert rep.values_checked == M * N and rep.values_wrong == 0
    text = str(prog.kernel())
    assert "FADD acc.0, acc.0, part_acc.0" in text and "_p" in prog.name


def test_a_block_not_promoted_is_caught() -> None:
    """One accumulator register never given its k blocks' sums: its elements are wrong."""
    prob = G.FAMILY.problem([128, 128, 512], arch="sm_90a", dtype="e4m3", out_dtype="fp32")
    text = str(G.build(prob, G.configure(prob, "promote=true,bn=128")).kernel())
    line = "  FADD acc.5, acc.5, part_acc.5\n"
    assert line in text
    rep = check_kernel(parse(text.replace(line, "", 1)), None, values=True, expect=G.FAMILY.expectation(prob))
    assert not rep.ok and rep.values_wrong > 0


def test_promotion_refusals() -> None:
    p8 = G.GemmProblem(256, 256, 8192, dtype="e4m3", out_dtype="bf16")
    with pytest.raises(WarpyError, match=r"promote keeps a second accumulator \(BN / 2 registers a thread\): BN 256"):
        G.build(p8, G.configure(p8, "bn=256"))
    p16 = G.GemmProblem(256, 256, 1024, dtype="bf16", out_dtype="bf16")
    with pytest.raises(WarpyError, match=r"promote adds 8-bit float MMAs' k blocks in fp32; bf16 MMAs"):
        G.build(p16, G.configure(p16, "promote=true"))


def test_assembles_to_qgmma() -> None:
    from warpy.lift.disasm import disassemble
    from warpy.lift.lifter import build as assemble_text

    prob = G.FAMILY.problem([200, 136, 96, "b_dtype=e5m2", "scale_a=row", "scale_b=col"], arch="sm_90a",
                            dtype="e4m3", out_dtype="bf16")
    ops = [i.opcode for i in disassemble(assemble_text(G.build(prob).kernel())).kernel().instructions]
    assert any(o.startswith("QGMMA.64x64x32.F32.E4M3.E5M2") for o in ops), sorted(set(ops))
    assert not any(o.startswith("HGMMA") for o in ops)


@pytest.mark.parametrize("kw,msg", [
    (dict(dtype="bf16", scale_a="row"), "scales multiply 8-bit float products; bf16 inputs take none"),
    (dict(dtype="bf16", b_dtype="fp16"), "A is bf16 and B is fp16: only 8-bit float inputs may differ"),
    (dict(dtype="e4m3", b_dtype="bf16"), "A is e4m3 and B is bf16: only 8-bit float inputs may differ"),
    (dict(dtype="e4m3", a_major="MN"), "8-bit float operands are read K-major only"),
    (dict(dtype="e4m3", arch="sm_100a", scale_b="col"), "scales of 8-bit float inputs are applied by the sm_90a"),
    (dict(dtype="e4m3", batch=2), "a batch of 8-bit float GEMMs in one launch is not written yet"),
    (dict(dtype="e4m3", scale_a="col"), "scale_a='col': a scale is none, 'tensor' (one value) or 'row'"),
    (dict(dtype="e4m3", scale_b="row"), "scale_b='row': a scale is none, 'tensor' (one value) or 'col'"),
    (dict(dtype="e4m3", b_dtype="int8"), "input type 'int8' is not one of"),
])
def test_refusals(kw: dict[str, object], msg: str) -> None:
    with pytest.raises(WarpyError, match=re.escape(msg)):
        G.GemmProblem(128, 128, 128, **kw)  # type: ignore[arg-type]


def test_k_rows_of_16_bytes() -> None:
    with pytest.raises(WarpyError, match=r"K=40 rows of e4m3 are 40 bytes; TMA needs a multiple of 16 \(K a multiple of 16\)"):
        G.GemmProblem(64, 64, 40, dtype="e4m3")
    G.GemmProblem(64, 64, 48, dtype="e4m3")


def test_names_and_words() -> None:
    p = G.FAMILY.problem([64, 64, 64, "b_dtype=e5m2", "scale_a=row", "scale_b=tensor"], arch="sm_90a",
                         dtype="float8_e4m3fn", out_dtype="bf16")
    assert (p.dtype, p.b_type, p.scale_a, p.scale_b) == ("e4m3", "e5m2", "row", "tensor")
    assert str(p) == "64x64x64 e4m3xe5m2->bf16 sm_90a scale_a=row scale_b=tensor"
    assert G.build(p).name.endswith("_g8_be5m2_sar_sbt")
    assert F.params(p) == ("scale_a", "scale_b")
    q = G.GemmProblem(64, 64, 64, dtype="e4m3")
    assert q.b_type == "e4m3" and F.params(q) == () and F.tag(q) == ""


# -- sm_100a: UTCQMMA (tcgen05.mma kind::f8f6f4), no scales yet ------------------------------------


@pytest.mark.parametrize("M,N,K,words,out", [
    (256, 256, 256, [], "bf16"),
    (300, 520, 272, ["b_dtype=e5m2"], "fp32"),  # ragged; B's format its own in the instruction descriptor
])
def test_sm100_fp8_exact(M: int, N: int, K: int, words: list[str], out: str) -> None:
    prob = G.FAMILY.problem([M, N, K] + words, arch="sm_100a", dtype="e4m3", out_dtype=out)
    prog = G.build(prob)
    text = str(prog.kernel())
    assert "UTCQMMA.2CTA" in text and "UTCHMMA" not in text
    rep = check_kernel(prog.kernel(), None, values=True, expect=G.FAMILY.expectation(prob))
    assert rep.ok, rep.messages()
    assert rep.values_checked > 0 and rep.values_wrong == 0


def test_sm100_a_wrong_format_field_is_caught() -> None:
    """The instruction descriptor saying e5m2 for an e4m3 operand (bits 7-9: the MMA's A, warpy's Bᵀ
    tile): the products differ."""
    prob = G.GemmProblem(256, 256, 256, dtype="e4m3", out_dtype="fp32", arch="sm_100a")
    text = str(G.build(prob).kernel())
    m = re.search(r"UMOV zero_idesc\.1, (0x[0-9a-f]+)", text)
    assert m and (int(m.group(1), 16) >> 7) & 0x3F == 0  # A and B e4m3
    bad = text.replace(m.group(0), f"UMOV zero_idesc.1, {hex(int(m.group(1), 16) | 1 << 7)}")
    rep = check_kernel(parse(bad), None, values=True, expect=G.FAMILY.expectation(prob))
    assert not rep.ok and rep.values_wrong > 0


def test_sm100_assembles_to_utcqmma() -> None:
    from warpy.lift.disasm import disassemble
    from warpy.lift.lifter import build as assemble_text

    prob = G.GemmProblem(256, 256, 256, dtype="e4m3", b_dtype="e5m2", out_dtype="bf16", arch="sm_100a")
    ops = [i.opcode for i in disassemble(assemble_text(G.build(prob).kernel())).kernel().instructions]
    assert any(o.startswith("UTCQMMA.2CTA") for o in ops), sorted(set(ops))
    assert not any(o.startswith("UTCHMMA") for o in ops)


def test_sm100_refuses_scales() -> None:
    with pytest.raises(WarpyError, match=r"^scales of 8-bit float inputs are applied by the sm_90a program"):
        G.GemmProblem(256, 256, 256, dtype="e4m3", arch="sm_100a", scale_a="row")
