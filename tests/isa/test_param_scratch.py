"""Scratch parameters in the SASS text: `Program.scratch` declares `.param NAME u64 scratch` and the
buffer behind it; the line prints and parses back; only u64 can be scratch; `Header.scratch_params`
gives each one's bytes (the extent of the buffers behind it)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from warpy.errors import WarpyError
from warpy.isa.program import Program
from warpy.isa.text import PARAM_TYPES, Header, ParamDecl, ParseError, parse
from warpy.layout import Layout
from warpy.target import dtype_bytes

HEAD = ".kernel g\n.sm sm_90a\n.threads 32\n.dynsmem 0\n.grid 1 1 1\n.cluster 1 1 1\n.mbarriers 0\n"


def test_program_scratch_declares_the_param_and_the_buffer() -> None:
    p = Program("g", "sm_90a", threads=32)
    prm, buf = p.scratch("flags", "flag_words", Layout(10, 4), "u32")
    assert (prm.name, prm.type, prm.scratch) == ("flags", "u64", True)
    assert (buf.name, buf.space, buf.source, buf.size, buf.elem) == ("flag_words", "global", "flags", 40, "u32")
    h = p.header()
    assert [str(d) for d in h.params] == [".param flags u64 scratch"]
    assert h.scratch_params() == {"flags": 40}
    # the kernel parameter is an ordinary u64 pointer: the lifter and the launch see no difference
    assert h.kernel_params() == [("flags", "u64")]


def test_round_trip_named_and_coloured() -> None:
    from warpy.isa.families import control

    p = Program("g", "sm_90a", threads=32)
    p.param("out", "u64")
    p.scratch("work", "partials", Layout((4, 8), (4, 16)), "fp32")
    p.global_buffer("out_words", Layout(8, 4), "fp32", "out")
    p.emit(control.exit_())
    for k in (p.kernel(), p.coloured()):
        text = str(k)
        assert ".param out u64\n.param work u64 scratch\n" in text
        back = parse(text)
        assert str(back) == text and back.header == k.header
        assert back.header.scratch_params() == {"work": 3 * 4 + 7 * 16 + 4}


def test_only_u64_is_scratch() -> None:
    with pytest.raises(ParseError, match=r"^8:14: \.param n: only a u64 pointer can be scratch, not a u32$"):
        parse(HEAD + ".param n u32 scratch\n")
    with pytest.raises(WarpyError, match="only a u64 pointer can be scratch, not a f32"):
        ParamDecl("x", "f32", True)


@pytest.mark.parametrize("line", [".param f u64 scrach", ".param f u64 scratch scratch", ".param f scratch"])
def test_malformed_param_lines(line: str) -> None:
    with pytest.raises(ParseError, match=r"^8:8: \.param takes a name, a type \(u64, .*\) and optionally `scratch`$"):
        parse(HEAD + line + "\n")


def test_scratch_without_a_buffer_has_no_size() -> None:
    h = parse(HEAD + ".param f u64 scratch\n.param g u64\n").header  # a text may say so; binding it cannot
    with pytest.raises(WarpyError, match=r"^kernel g: scratch parameter 'f' has no global buffer declared behind it"):
        h.scratch_params()


def test_non_scratch_params_are_not_listed() -> None:
    h = parse(HEAD + ".param c u64\n.param M u32\n.buffer c global base=0x0 size=0x40 elem=u32 source=c layout=16:4\n").header
    assert h.scratch_params() == {}


_names = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)


@st.composite
def _params(draw: st.DrawFn) -> tuple[ParamDecl, ...]:
    names = draw(st.lists(_names, min_size=0, max_size=6, unique=True))
    out = []
    for n in names:
        typ = draw(st.sampled_from(PARAM_TYPES))
        out.append(ParamDecl(n, typ, typ == "u64" and draw(st.booleans())))
    return tuple(out)


@given(_params())
def test_param_lines_round_trip(params: tuple[ParamDecl, ...]) -> None:
    h = Header("g", "sm_90a", 32, params=params)
    text = "\n".join(h.lines()) + "\n"
    assert parse(text).header == h
    assert [str(p).endswith(" scratch") for p in params] == [p.scratch for p in params]


_ELEMS = ("u32", "fp32", "bf16", "fp16", "u8")


@st.composite
def _buffers(draw: st.DrawFn) -> list[tuple[int, tuple[int, ...], tuple[int, ...], str]]:
    """(which scratch param, shape, byte strides, elem) for 1..5 buffers over up to 3 params."""
    out = []
    for _ in range(draw(st.integers(1, 5))):
        rank = draw(st.integers(1, 3))
        shape = tuple(draw(st.lists(st.integers(1, 9), min_size=rank, max_size=rank)))
        stride = tuple(draw(st.lists(st.integers(0, 512), min_size=rank, max_size=rank)))
        out.append((draw(st.integers(0, 2)), shape, stride, draw(st.sampled_from(_ELEMS))))
    return out


@given(_buffers())
def test_scratch_bytes_are_the_extent_of_the_buffers_behind(bufs: list[tuple[int, tuple[int, ...], tuple[int, ...], str]]) -> None:
    p = Program("g", "sm_90a", threads=32)
    used = sorted({i for i, *_ in bufs})
    p.param("plain", "u64")
    want: dict[str, int] = {}
    first = True
    for j, (i, shape, stride, elem) in enumerate(bufs):
        layout = Layout(shape, stride)
        end = sum((s - 1) * d for s, d in zip(shape, stride)) + dtype_bytes(elem)
        name = f"s{i}"
        if name not in want:
            p.scratch(name, f"b{j}", layout, elem)
        else:
            p.global_buffer(f"b{j}", layout, elem, name)
        want[name] = max(want.get(name, 0), end)
        if first:  # a plain pointer's buffer is not scratch
            p.global_buffer("plain_words", layout, elem, "plain")
            first = False
    h = p.header()
    assert h.scratch_params() == {f"s{i}": want[f"s{i}"] for i in used}
    assert parse("\n".join(h.lines()) + "\n").header.scratch_params() == h.scratch_params()


@pytest.mark.parametrize("shape", [(2048, 2048, 16384), (1024, 1024, 65536)])
def test_split_and_stream_k_flags_are_scratch(shape: tuple[int, int, int]) -> None:
    """The sm_100a GEMM's flags and epochs (one word a tile, then one a CTA) are scratch memory."""
    from warpy.kernels.gemm import GemmProblem, build, choose

    problem = GemmProblem(*shape, arch="sm_100a", out_dtype="fp32")
    prog = build(problem, choose(problem))
    h = prog.header()
    flags = {p.name: p for p in h.params}["flags"]
    assert flags.scratch and flags.type == "u64"
    words = h.buffer("flag_words")
    assert words.source == "flags" and words.elem == "u32"
    assert h.scratch_params() == {"flags": words.size}
    assert words.size % 4 == 0 and words.size > 0
    assert {t.name for t in h.tmaps} >= {"c_add"} and "c" in {p.name for p in h.params}


def test_a_map_over_another_parameter_round_trips_and_is_checked() -> None:
    from warpy.isa.program import Program
    from warpy.layout import Layout
    from warpy.layout.desc import tma_box
    from warpy.layout.smem import smem_tile

    p = Program("over", "sm_90a", threads=128)
    box = tma_box(Layout((64, 64), (64, 1)), smem_tile(64, 64, "bf16", "K", 128))
    p.tmap("c", box)
    p.tmap("c_view", box, over="c")
    with pytest.raises(WarpyError, match="declared before"):
        p.tmap("c_bad", box, over="nothing")
    text = str(p.kernel())
    assert ".tmap c_view over=c dtype=bf16" in text
    h = parse(text).header
    assert [(t.name, t.over) for t in h.tmaps] == [("c", None), ("c_view", "c")]
    assert str(parse(text)) == text
    # parsed text is checked the same way: over= names a u64 parameter or another map, not itself
    for bad in ("nothing", "c_view"):
        with pytest.raises(ParseError, match=f"over={bad} names no `.param {bad} u64` and no other tensor map"):
            parse(text.replace(".tmap c_view over=c ", f".tmap c_view over={bad} "))
