"""Tests written to kill the tile group's mutants in the GEMM problem (`kernels/gemm.py`: `GemmProblem`'s
refusals, its derived pitches and strides, its printed form; `GemmFamily.problem`, the command line's
words): every refusal word for word at the edge where it starts (one element or byte either side),
the printed forms and the parsed words as literal goldens."""

from __future__ import annotations

from typing import Any

import pytest

from warpy.errors import WarpyError
from warpy.kernels.gemm import FAMILY, GemmProblem, input_type, output_type
from warpy.kernels.gemm_epilogue import Epilogue
from warpy.target import SM100A


def _refused(message: str, *args: Any, **kw: Any) -> None:
    with pytest.raises(WarpyError) as e:
        GemmProblem(*args, **kw)
    assert str(e.value) == message


@pytest.mark.parametrize("args,kw,message", [
    ((64, 64, 64), {"epilogue": "relu"}, "epilogue must be a gemm_epilogue.Epilogue, not 'relu'"),
    ((64, 64, 64), {"a_major": "M"}, "a_major='M': an operand is K-major (K contiguous) or MN-major"),
    ((64, 64, 64), {"b_major": "k"}, "b_major='k': an operand is K-major (K contiguous) or MN-major"),
    # a pitch below its row (K-major: K; MN-major: M or N; C: N), a bool or not an int
    ((64, 64, 48), {"lda": 40}, "lda=40: a row pitch is 0 (dense) or at least the row's 48 elements"),
    ((24, 64, 48), {"lda": 16, "a_major": "MN"}, "lda=16: a row pitch is 0 (dense) or at least the row's 24 elements"),
    ((64, 40, 48), {"ldb": 32, "b_major": "MN"}, "ldb=32: a row pitch is 0 (dense) or at least the row's 40 elements"),
    ((64, 40, 48), {"ldb": 40}, "ldb=40: a row pitch is 0 (dense) or at least the row's 48 elements"),
    ((64, 40, 48), {"ldc": 32}, "ldc=32: a row pitch is 0 (dense) or at least the row's 40 elements"),
    ((64, 64, 64), {"lda": True}, "lda=True: a row pitch is 0 (dense) or at least the row's 64 elements"),
    ((64, 64, 64), {"ldc": 64.0}, "ldc=64.0: a row pitch is 0 (dense) or at least the row's 64 elements"),
    # rows a whole 16 bytes apart, by each operand's type
    ((64, 64, 64), {"lda": 68}, "lda=68: rows 136 bytes apart; TMA needs a multiple of 16"),
    ((64, 64, 64), {"ldb": 76}, "ldb=76: rows 152 bytes apart; TMA needs a multiple of 16"),
    ((64, 64, 64), {"ldc": 66}, "ldc=66: rows 264 bytes apart; TMA needs a multiple of 16"),
    ((64, 64, 64, "bf16", "bf16"), {"ldc": 68}, "ldc=68: rows 136 bytes apart; TMA needs a multiple of 16"),
    # a batch
    ((64, 64, 64), {"batch": 0}, "batch=0: a batch holds at least one GEMM"),
    ((64, 64, 64), {"batch": True}, "batch=True: a batch holds at least one GEMM"),
    ((64, 64, 64), {"batch": 2.0}, "batch=2.0: a batch holds at least one GEMM"),
    ((64, 64, 64), {"batch": 2, "arch": "sm_100a"}, "a batch of GEMMs in one launch is an sm_90a program so far, not sm_100a"),
    ((64, 64, 64), {"batch": 2, "epilogue": Epilogue(alpha=2.0)}, "a batch of GEMMs in one launch takes no fused epilogue yet"),
    ((64, 64, 64), {"batch": 2, "stride_a": -8},
     "stride_a=-8: matrices of a batch must be a whole number of 16 bytes apart, below 2 GiB"),
    ((64, 64, 64), {"batch": 2, "stride_b": 4100},
     "stride_b=4100: matrices of a batch must be a whole number of 16 bytes apart, below 2 GiB"),
    ((64, 64, 64), {"batch": 2, "stride_b": 1 << 30},
     "stride_b=1073741824: matrices of a batch must be a whole number of 16 bytes apart, below 2 GiB"),
    ((64, 64, 64), {"batch": 2, "stride_c": 4098},
     "stride_c=4098: matrices of a batch must be a whole number of 16 bytes apart, below 2 GiB"),
    ((64, 64, 64, "bf16", "bf16"), {"batch": 2, "stride_c": 4100},
     "stride_c=4100: matrices of a batch must be a whole number of 16 bytes apart, below 2 GiB"),
    ((64, 64, 64), {"batch": 2, "stride_a": True},
     "stride_a=True: matrices of a batch must be a whole number of 16 bytes apart, below 2 GiB"),
    ((64, 64, 64), {"batch": 2, "stride_a": 4096.0},
     "stride_a=4096.0: matrices of a batch must be a whole number of 16 bytes apart, below 2 GiB"),
    # the sizes
    (("64", 64, 64), {}, "M must be an integer, not '64'"),
    ((64, True, 64), {}, "N must be an integer, not True"),
    ((64, 64, 64.0), {}, "K must be an integer, not 64.0"),
    ((0, 64, 64), {}, "M and N must be at least 1 (got M=0, N=64)"),
    ((64, 0, 64), {}, "M and N must be at least 1 (got M=64, N=0)"),
    ((64, 64, 7), {"a_major": "MN", "b_major": "MN"}, "K must be at least 8 (got 7)"),
    ((64, 64, 0), {}, "K must be at least 8 (got 0)"),
    # MN-major rows whole 16 bytes; K-major rows of K whole 16 bytes
    ((12, 64, 64), {"a_major": "MN"}, "A is MN-major: its rows of 12 bf16 elements are 24 bytes; TMA needs a multiple of 16"),
    ((64, 20, 64, "fp16"), {"b_major": "MN"},
     "B is MN-major: its rows of 20 fp16 elements are 40 bytes; TMA needs a multiple of 16"),
    ((64, 64, 12), {}, "K=12 rows of bf16 are 24 bytes; TMA needs a multiple of 16 (K a multiple of 8)"),
    ((64, 64, 12), {"a_major": "MN"}, "K=12 rows of bf16 are 24 bytes; TMA needs a multiple of 16 (K a multiple of 8)"),
    ((64, 64, 12), {"b_major": "MN"}, "K=12 rows of bf16 are 24 bytes; TMA needs a multiple of 16 (K a multiple of 8)"),
    ((64, 64, 24, "e4m3", "bf16"), {}, "K=24 rows of e4m3 are 24 bytes; TMA needs a multiple of 16 (K a multiple of 16)"),
])
def test_refusals_word_for_word(args: tuple[Any, ...], kw: dict[str, Any], message: str) -> None:
    _refused(message, *args, **kw)


@pytest.mark.parametrize("args,kw", [
    ((64, 64, 48), {"lda": 48, "ldb": 56, "ldc": 64}),          # a pitch equal to its row, or wider
    ((24, 40, 48), {"lda": 24, "ldb": 40, "a_major": "MN", "b_major": "MN"}),
    ((64, 64, 64), {"ldc": 68}),                               # fp32 C: 272 bytes
    ((64, 64, 64, "bf16", "bf16"), {"ldc": 72}),
    ((64, 64, 64), {"batch": 2, "stride_a": 4104, "stride_b": 0, "stride_c": 4100}),
    ((64, 64, 64), {"batch": 2, "stride_b": (1 << 30) - 8}),     # one 16 bytes below 2 GiB
    ((64, 64, 64, "bf16", "bf16"), {"batch": 2, "stride_c": 4104}),
    ((1, 1, 8), {}),
    ((8, 64, 12), {"a_major": "MN", "b_major": "MN"}),          # K need not be whole 16 bytes where no row is of K
    ((64, 64, 16, "e4m3", "bf16"), {}),
])
def test_problems_at_the_edge_are_taken(args: tuple[Any, ...], kw: dict[str, Any]) -> None:
    p = GemmProblem(*args, **kw)
    assert (p.M, p.N, p.K) == args[:3]


@pytest.mark.parametrize("p,text", [
    (GemmProblem(3, 5, 16), "3x5x16 bf16->fp32 sm_90a"),
    (GemmProblem(3, 5, 16, lda=24, ldb=32, ldc=8), "3x5x16 bf16->fp32 sm_90a lda=24 ldb=32 ldc=8"),
    (GemmProblem(3, 8, 16, lda=16, ldb=16, ldc=8), "3x8x16 bf16->fp32 sm_90a"),       # the dense pitches given
    (GemmProblem(2, 5, 16, batch=3), "2x5x16 bf16->fp32 sm_90a batch=3 (strides 32, 80, 10)"),
    (GemmProblem(2, 5, 16, "bf16", "bf16", batch=2, stride_a=48, stride_b=96, stride_c=24, ldc=16),
     "2x5x16 bf16->bf16 sm_90a lda=16 ldb=16 ldc=16 batch=2 (strides 48, 96, 24)"),
    (GemmProblem(16, 32, 64, a_major="MN", b_major="MN", arch="sm_100a"), "16x32x64 bf16->fp32 sm_100a a=km b=kn"),
    (GemmProblem(16, 32, 64, b_major="MN", lda=80), "16x32x64 bf16->fp32 sm_90a b=kn lda=80 ldb=32 ldc=32"),
    (GemmProblem(8, 16, 24, a_major="MN", lda=16, ldb=32, batch=2),
     "8x16x24 bf16->fp32 sm_90a a=km lda=16 ldb=32 ldc=16 batch=2 (strides 384, 512, 128)"),
    (GemmProblem(64, 64, 64, epilogue=Epilogue(alpha=2, bias="n", act="relu")),
     "64x64x64 bf16->fp32 sm_90a (C = relu(2·A·Bᵀ + bias[col]))"),
    (GemmProblem(64, 64, 64, "e4m3", "bf16", b_dtype="e5m2", scale_a="tensor", scale_b="col"),
     "64x64x64 e4m3xe5m2->bf16 sm_90a scale_a=tensor scale_b=col"),
    (GemmProblem(64, 64, 64, "e4m3", "bf16", scale_b="col"), "64x64x64 e4m3->bf16 sm_90a scale_b=col"),
    (GemmProblem(64, 64, 64, "e4m3", "bf16", b_dtype="e4m3"), "64x64x64 e4m3->bf16 sm_90a"),
])
def test_printed_form_literal(p: GemmProblem, text: str) -> None:
    assert str(p) == text


def test_derived_pitches_and_strides_literal() -> None:
    p = GemmProblem(8, 16, 24, a_major="MN", ldb=32)
    assert (p.dense, p.pitches, p.pitched, p.batch_strides) == ((8, 24), (8, 32, 16), True, (192, 512, 128))
    q = GemmProblem(8, 16, 24, b_major="MN", batch=2)
    assert (q.dense, q.pitches, q.pitched, q.batch_strides) == ((24, 16), (24, 16, 16), False, (192, 384, 128))
    assert (q.layouts, p.layouts, GemmProblem(8, 16, 24).layouts) == ("b=kn", "a=km", "")
    assert GemmProblem(8, 16, 32, "e4m3", b_dtype="e5m2").b_type == "e5m2" and q.b_type == "bf16"
    assert GemmProblem(3, 5, 16).flops == 480


def test_type_names_canonical_and_refused_in_one_line() -> None:
    assert GemmProblem(64, 64, 64, "float16", "float32").dtype == "fp16"
    assert (input_type("bfloat16"), output_type("bfloat16")) == ("bf16", "bf16")
    with pytest.raises(WarpyError) as e:
        input_type("fp32")
    assert str(e.value) == "input type 'fp32' is not one of bf16, fp16, e4m3, e5m2"
    with pytest.raises(WarpyError) as e:
        output_type("e4m3")
    assert str(e.value) == "output type 'e4m3' is not one of fp32, bf16, fp16"
    with pytest.raises(WarpyError) as e:
        output_type("nonsense")
    assert str(e.value) == "output type 'nonsense' is not one of fp32, bf16, fp16"
    with pytest.raises(WarpyError) as e:
        GemmProblem(64, 64, 64, "e4m3", b_dtype="int8")
    assert str(e.value) == "input type 'int8' is not one of bf16, fp16, e4m3, e5m2"
    assert GemmProblem(64, 64, 64, arch=SM100A).arch == "sm_100a"  # type: ignore[arg-type]  # (a Target converts to its name)


def test_command_line_words_parsed_literal() -> None:
    p = FAMILY.problem([64, 128, 256, "a=km", "b=kn", "bias=n", "act=relu"], arch="sm_90a", dtype="fp16", out_dtype=None)
    assert p == GemmProblem(64, 128, 256, "fp16", a_major="MN", b_major="MN", epilogue=Epilogue(bias="n", act="relu"))
    q = FAMILY.problem([64, 128, 256, "a=mk", "b=nk", "lda=264", "ldb=256", "ldc=136", "batch=2", "stride_a=20000",
                        "stride_b=40000", "stride_c=9000"], arch="sm_90a")
    assert q == GemmProblem(64, 128, 256, lda=264, ldb=256, ldc=136, batch=2, stride_a=20000, stride_b=40000,
                            stride_c=9000)
    r = FAMILY.problem([64, 128, 256, "b_dtype=e5m2", "scale_a=row", "scale_b=tensor"], arch="sm_90a", dtype="e4m3",
                       out_dtype="bf16")
    assert r == GemmProblem(64, 128, 256, "e4m3", "bf16", b_dtype="e5m2", scale_a="row", scale_b="tensor")
    assert FAMILY.problem([64, 128, 256], arch="sm_100a") == GemmProblem(64, 128, 256, arch="sm_100a")


@pytest.mark.parametrize("dims,message", [
    ([64, 128, 256, "a=kn"], "a=kn: a's layout is mk (K contiguous) or km (M contiguous, MN-major)"),
    ([64, 128, 256, "b=km"], "b=km: b's layout is nk (K contiguous) or kn (N contiguous, MN-major)"),
    ([64, 128], "gemm takes three sizes M N K (then epilogue words), got [64, 128]"),
    ([64, 128, 256, 512], "gemm takes three sizes M N K (then epilogue words), got [64, 128, 256, 512]"),
    ([64, "bias=n", 128, 256], "gemm takes three sizes M N K (then epilogue words), got [64, 'bias=n', 128, 256]"),
    ([64, 128, 256, "lda=x"], "lda=x: lda is a whole number of elements"),
    ([64, 128, 256, "stride_c=-4"], "stride_c=-4: stride_c is a whole number of elements"),
    ([64, 128, 256, "batch=two"], "batch=two: batch is a whole number"),
])
def test_command_line_refusals_word_for_word(dims: list[Any], message: str) -> None:
    with pytest.raises(WarpyError) as e:
        FAMILY.problem(dims, arch="sm_90a")
    assert str(e.value) == message


@pytest.mark.parametrize("word,message", [
    # a word's key is what comes before its first "=": the rest is its value, refused as a value
    ("a=km=1", "a=km=1: a's layout is mk (K contiguous) or km (M contiguous, MN-major)"),
    ("lda=8=9", "lda=8=9: lda is a whole number of elements"),
    ("scale_a=row=1", "scale_a='row=1': a scale is none, 'tensor' (one value) or 'row' (one a row of A)"),
    ("b_dtype=e5m2=x", "input type 'e5m2=x' is not one of bf16, fp16, e4m3, e5m2"),
])
def test_a_word_with_two_equals_signs_is_keyed_by_the_first(word: str, message: str) -> None:
    with pytest.raises(WarpyError) as e:
        FAMILY.problem([64, 128, 256, word], arch="sm_90a", dtype="e4m3", out_dtype="bf16")
    assert str(e.value) == message


def test_bind_names_the_operands_scalars_and_inputs_literal() -> None:
    """A GEMM header's parameters bound by the family's names: A, B, C, the sizes (either case), the
    epilogue's and the scales' pointers, scratch from scratch only; tensor maps through `encode`
    (a map declared over C views C's memory); names the header lacks are ignored."""
    from warpy.isa.text import parse
    from warpy.runtime.bind import DeviceSpan
    from warpy.runtime.launcher import Scalar

    head = (".kernel g\n.sm sm_90a\n.threads 32\n.dynsmem 0\n.grid 1 1 1\n.cluster 1 1 1\n.mbarriers 0\n"
            ".param a u64\n.param b u64\n.param c u64\n.param M u32\n.param n u32\n.param K u32\n.param m u32\n"
            ".param N u32\n.param k u32\n.param bias u64\n.param scale_b u64\n.param c_in u64\n.param residual u64\n"
            ".param scale_a u64\n.param flags u64 scratch\n"
            ".buffer fw global base=0x0 size=0x40 elem=u32 source=flags layout=16:4\n"
            ".tmap c_add over=c dtype=fp32 dims=96,64 strides=384 box=32,64\n")
    h = parse(head).header
    seen: list[tuple[Any, int]] = []

    def encode(box: Any, address: int) -> str:
        seen.append((box, address))
        return f"map@{address:#x}"

    mem = {"a": 0x1000, "b": 0x2000, "c": 0x3000, "bias": 0x4000, "scale_b": 0x5000, "c_in": 0x6000,
           "residual": 0x7000, "scale_a": 0x8000, "other": 9}
    got = FAMILY.bind(h, GemmProblem(64, 96, 128), mem, scratch={"flags": DeviceSpan(0x9000, 64)}, encode=encode)
    def u64(v: int) -> Scalar:
        return Scalar("u64", v)

    def u32(v: int) -> Scalar:
        return Scalar("u32", v)

    assert got == ["map@0x3000", u64(0x1000), u64(0x2000), u64(0x3000), u32(64), u32(96), u32(128), u32(64), u32(96), u32(128),
                   u64(0x4000), u64(0x5000), u64(0x6000), u64(0x7000), u64(0x8000), u64(0x9000)]
    assert [a for _, a in seen] == [0x3000] and seen[0][0].dims == (96, 64)
    with pytest.raises(WarpyError, match="nothing given for scratch memory 'flags'"):
        FAMILY.bind(h, GemmProblem(64, 96, 128), mem, encode=encode)
    with pytest.raises(WarpyError, match="nothing given for pointer or scalar 'bias'"):
        FAMILY.bind(h, GemmProblem(64, 96, 128), {k: v for k, v in mem.items() if k != "bias"},
                    scratch={"flags": DeviceSpan(0x9000, 64)}, encode=encode)


def test_the_family_delegates_to_the_rule_the_builder_and_the_expectation() -> None:
    from warpy.kernels.gemm import GemmExpectation, build, choose, configure

    p = GemmProblem(256, 256, 512)
    assert FAMILY.name == "gemm"
    assert FAMILY.choose(p) == choose(p)
    assert FAMILY.configure(p, "stages=3") == configure(p, "stages=3") != choose(p)
    assert FAMILY.configure(p, "stages=3").stages == 3
    e = FAMILY.expectation(p)
    assert isinstance(e, GemmExpectation) and e.problem is p
    cfg = configure(p, {"bn": 128, "stages": 4})
    assert list(FAMILY.build(p, cfg).kernel().lines) == list(build(p, cfg).kernel().lines)


def test_bind_ignores_the_names_a_kernel_does_not_declare() -> None:
    """A kernel that takes only A, B, C and M: the sizes N, K, m, n, k and the inputs it lacks are not
    refused (bind is not strict), and nothing else is bound."""
    from warpy.isa.text import parse
    from warpy.kernels.gemm import bind
    from warpy.runtime.launcher import Scalar

    h = parse(".kernel g\n.sm sm_90a\n.threads 32\n.dynsmem 0\n.grid 1 1 1\n.cluster 1 1 1\n.mbarriers 0\n"
              ".param a u64\n.param b u64\n.param c u64\n.param M u32\n").header
    got = bind(h, 0x1000, 0x2000, 0x3000, 64, 96, 128, bias=0x4000, encode=lambda box, address: None)
    assert got == [Scalar("u64", 0x1000), Scalar("u64", 0x2000), Scalar("u64", 0x3000), Scalar("u32", 64)]
