"""The SASS text: print/parse round trips (every program in the repo, generated programs),
golden spellings, and parse errors with line:column."""

from __future__ import annotations

import importlib
import inspect
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.errors import WarpyError
from warpy.isa.examples import EXAMPLES, pipe_sm90, pipe_sm100
from warpy.isa.families import alu, control, sync
from warpy.isa.operands import Mem
from warpy.isa.pipes import init_barriers, wait
from warpy.isa.program import Program
from warpy.isa.units.tma import tma_load
from warpy.isa.units.wgmma import hgmma
from warpy.isa.text import ParseError, parse
from warpy.layout import Layout, Swizzle, SwizzledLayout
from warpy.layout.tma import TmaBox

ROOT = pathlib.Path(__file__).resolve().parents[2]


def repo_programs() -> list[tuple[str, Program]]:
    """Every program in the repo: the examples, and each kernels/*.py build() (default config)."""
    out = [(f"{name}@{arch}", build(arch)) for name, build in EXAMPLES.items() for arch in ("sm_90a", "sm_100a")]
    for path in sorted((ROOT / "kernels").glob("*.py")) if (ROOT / "kernels").is_dir() else []:
        mod = importlib.import_module(f"warpy.kernels.{path.stem}") if path.stem != "__init__" else None
        build = getattr(mod, "build", None)
        if callable(build) and all(p.default is not inspect.Parameter.empty for p in inspect.signature(build).parameters.values()):
            prog = build()
            if isinstance(prog, Program):
                out.append((path.stem, prog))
    return out


@pytest.mark.parametrize("name,prog", repo_programs(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_program_round_trips_named_and_coloured(name, prog):  # type: ignore[no-untyped-def]
    named = prog.text()
    assert str(parse(named)) == named
    coloured = str(prog.coloured())
    assert str(parse(coloured)) == coloured
    assert ".reg " in named and ".reg " not in coloured


@pytest.mark.parametrize("build", [pipe_sm90, pipe_sm100])
def test_examples_show_marks_and_notes(build):  # type: ignore[no-untyped-def]
    lines = build().text().splitlines()
    body = [x for x in lines if not x.startswith(".")]
    assert any(x.startswith("+ UIMAD ") and "// addr sa[" in x for x in body)
    assert any(x.startswith("~ @!") and "BRA WAIT_" in x for x in body)
    assert any(x.startswith("~ IADD3 k") for x in body)
    assert any(x.startswith("  UTMALDG.2D [tma_a], tmap[a]") for x in body)


def test_golden_sm90_lines():
    text = pipe_sm90().text()
    for line in [
        ".tmap a dtype=bf16 dims=512,64 strides=1024 box=64,64 swizzle=128",
        ".buffer sa smem base=0x0 size=0x8000 elem=bf16 layout=Sw<3,4,3> o (4,64,64):(8192,128,2)",
        ".buffer stage_bars smem base=0x18000 size=0x40 elem=mbarrier layout=(2,4):(8,16)",
        "+ UMOV smem, `(dsmem)",
        "+ UMOV gmma_desc.1, 0x40000040  // gdesc.hi sa[0, 0, 0]",
        "  SYNCS.PHASECHK.TRANS64.TRYWAIT waited, [stage_bars@cs], cs_parity  // op1: addr stage_bars[0, cs_stage]",
        "  HGMMA.64x128x16.F32.BF16 acc, gdesc[gmma_desc], acc, accumulate",
        "  HGMMA.64x128x16.F32.BF16 acc, gdesc[gmma_desc], acc, gsb0",
        "  WARPGROUP.DEPBAR.LE gsb0, 0x0",
        "  @leader SYNCS.ARRIVE.TRANS64.A1T0 RZ, [stage_bars@cs+0x8], RZ  // op1: addr stage_bars[1, cs_stage]",
        "  USETMAXREG.DEALLOC.CTAPOOL 0x28",
        "  STG.E.128 desc[memdesc][caddr.64+0x10], acc.4",
        "  IADD3 k, k, 0x1, RZ".replace("  ", "~ ", 1),
    ]:
        assert line in text.splitlines(), line


def test_golden_sm100_lines():
    text = pipe_sm100().text()
    for line in [
        "~ IADD3 k, PT, PT, k, 0x1, RZ",
        "+ UMOV umma_a.1, 0x40004040  // udesc.hi sa[0, 0, 0]",
        "  UTCHMMA gdesc[umma_a], gdesc[umma_b], tmem[tmem_base], tmem[zero_idesc.0], idesc[zero_idesc.1], accumulate",
        "  UTCBAR [stage_bars@cs+0x8], URZ  // addr stage_bars[1, cs_stage]",
        "  UTCATOMSWS.FIND_AND_SET.ALIGN [tmem_slot_base], 0x80  // addr tmem_slot[0]",
        "  LDTM.x32 v, tmem[taddr]",
        "  LDCU.64 memdesc, c[0x0][0x358]",
        "  UMOV zero_idesc.1, 0x8200490",
    ]:
        assert line in text.splitlines(), line


HEAD = ".kernel k\n.sm sm_90a\n.threads 32\n.dynsmem 0\n.grid 1 1 1\n.cluster 1 1 1\n.mbarriers 0\n.reg R a\n.reg UR u\n"


@pytest.mark.parametrize(
    "body,where,what",
    [
        ("  IADD3 a, a, 0x1, RZ\n  FOO a\n", "11:3", "unknown opcode FOO"),
        ("  IADD3 a, b, 0x1, RZ\n", "10:12", "'b' is not a declared register"),
        ("  IADD3 a, u, 0x1, RZ\n", "10:3", "operand 1 (a) must be R or I, not UR u"),
        ("IADD3 a, a, 0x1, RZ\n", "10:1", "starts with a mark"),
        ("  IADD3 a, a, 0x1\n", "10:3", "takes 4 or 6 operands"),
        ("  HGMMA.64x7x16.F32.BF16 a, gdesc[u], a\n", "10:3", "needs a modifier matching"),
        ("  MOV a, 0x1  // addr sa[\n", "10:18", "cannot read derived-operand note"),
        ("  MOV a, 0x1\n.threads 5\n", "11:1", "header line after"),
    ],
)
def test_parse_errors_name_line_and_column(body, where, what):  # type: ignore[no-untyped-def]
    with pytest.raises(ParseError) as e:
        parse(HEAD + body)
    assert str(e.value).startswith(where + ":"), str(e.value)
    assert what in str(e.value)


def test_header_errors():
    with pytest.raises(ParseError, match=r"^2:5: target 'sm_80'"):
        parse(".kernel k\n.sm sm_80\n")
    with pytest.raises(ParseError, match=r"^1:1: the header has no .sm"):
        parse(".kernel k\n.threads 1\n")
    with pytest.raises(ParseError, match="box extent 300"):
        parse(HEAD + ".tmap a dtype=bf16 dims=64 strides= box=300\n")


# -- generated programs -----------------------------------------------------------------------


@st.composite
def programs(draw):  # type: ignore[no-untyped-def]
    sm = draw(st.sampled_from(["sm_90a", "sm_100a"]))
    p = Program("gen", sm, threads=draw(st.sampled_from([32, 128, 256])), cluster=(draw(st.sampled_from([1, 2])), 1, 1))
    if draw(st.booleans()):
        p.tmap("t", TmaBox("bf16", (draw(st.integers(64, 4096)), 64), (8192,), (64, 64), swizzle=128))
    if draw(st.booleans()):
        p.param("out", draw(st.sampled_from(["u64", "u32"])))
    depth = draw(st.integers(1, 4))
    rows = draw(st.sampled_from([8, 64]))
    sa = p.smem_ring("sa", depth, SwizzledLayout(Swizzle(3, 4, 3), Layout((rows, 64), (128, 2))), "bf16")
    pipe = p.pipe("st", depth, fills=1, frees=draw(st.integers(1, 4)))
    if draw(st.booleans()):
        init_barriers(p)
    r = [p.r(f"r{n}") for n in range(4)]
    u = [p.ur(f"u{n}") for n in range(3)]
    for x in r:
        p.emit(alu.mov(x, draw(st.integers(-100, 100))))
    for x in u:
        p.emit(alu.umov(x, draw(st.integers(0, 100))))
    with p.role("w", range(0, 1)):
        end = pipe.consumer("c")
        with p.loop("k", draw(st.integers(1, 5))) as k:
            with end.stage():
                end.wait_full(sleep=draw(st.sampled_from([None, 0x20])))
                for _ in range(draw(st.integers(0, 4))):
                    j = draw(st.integers(0, 3))
                    p.derive.into(u[0], draw(st.sampled_from(["addr", "gdesc.lo", "udesc.lo"])),
                                  end.slot(sa, 8 * draw(st.integers(0, rows // 8 - 1)), 16 * j))
                if draw(st.booleans()):
                    p.emit(alu.iadd3(r[0], r[1], k.reg, r[2]).guarded(~p.p("waited")))
                if draw(st.booleans()):
                    p.comment(draw(st.text("abc xyz_0123", min_size=0, max_size=10)).strip())
                end.free(p.elect() if draw(st.booleans()) else None)
    p.emit(control.exit_())
    return p


@settings(max_examples=40, deadline=None)
@given(programs())
def test_generated_programs_round_trip(p):  # type: ignore[no-untyped-def]
    named = p.text()
    assert str(parse(named)) == named
    coloured = str(p.coloured())
    assert str(parse(coloured)) == coloured


def test_builders_name_the_bad_operand():
    p = Program("t", "sm_90a", threads=32)
    with pytest.raises(WarpyError, match=r"IADD3: operand 1 \(a\) must be R or I, not UR u"):
        alu.iadd3(p.r("a"), p.ur("u"), p.r("b"))  # type: ignore[arg-type]
    sa = p.smem_ring("sa", 2, SwizzledLayout(Swizzle(3, 4, 3), Layout((8, 64), (128, 2))), "bf16")
    with pytest.raises(WarpyError, match="wait takes a barrier, not Tile sa"):
        wait(p, sa.at(0, 0, 0), p.r("par"))  # type: ignore[arg-type]
    with p.loop("k", 2) as k:
        with pytest.raises(WarpyError, match="advance takes a ring, not Counter k"):
            p.advance(k)  # type: ignore[arg-type]
    with pytest.raises(WarpyError, match=r"SYNCS.PHASECHK.TRANS64.TRYWAIT: operand 2 \(parity\) must be R"):
        sync.try_wait(p.p("w"), Mem(p.ur("bar")), p.ur("upar"))  # type: ignore[arg-type]
    with pytest.raises(WarpyError, match="register x is already a R"):
        p.r("x")
        p.ur("x")


def test_branch_to_a_missing_label_is_refused():
    with pytest.raises(ParseError, match=r"^4:3: BRA branches to NOWHERE"):
        parse(".kernel k\n.sm sm_90a\n.threads 32\n  BRA NOWHERE\n")
    p = Program("t", "sm_90a", threads=32)
    p.emit(control.bra("NOWHERE"))
    with pytest.raises(WarpyError, match="never places"):
        p.kernel()


def test_barriers_after_init_are_refused():
    p = Program("t", "sm_90a", threads=32)
    p.pipe("a", 2)
    init_barriers(p)
    with pytest.raises(WarpyError, match="declared after init_barriers"):
        p.pipe("b", 2)


@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5])
def test_tma_loads_of_every_rank_and_multicast(rank: int) -> None:
    p = Program("tma", "sm_90a", threads=128, cluster=(2, 1, 1))
    dims = (64,) + (4,) * (rank - 1)
    strides = tuple(128 * 4 ** i for i in range(rank - 1))
    t = p.tmap("t", TmaBox("bf16", dims, strides, (64,) + (1,) * (rank - 1), swizzle=128))
    sa = p.smem_ring("sa", 2, SwizzledLayout(Swizzle(3, 4, 3), Layout((8, 64), (128, 2))), "bf16")
    bars = p.barriers("full", 2)
    mask = p.ur("mask")
    p.emit(alu.umov(mask, 3))
    tma_load(p, sa.at(1, 0, 0), t, [0] * rank, bars.at(1), mask=mask)
    p.emit(control.exit_())
    text = p.text()
    assert f".reg UR[{2 + rank}] tma_t" in text
    assert f"  UTMALDG.{rank}D.MULTICAST [tma_t], tmap[t], mask\n" in text
    assert "+ UIADD3 tma_t.0, sa_base, 0x400, URZ  // addr sa[1, 0, 0]" in text
    assert str(parse(text)) == text


def test_a_128_register_accumulator():
    from warpy.isa.families import wgmma

    p = Program("wide", "sm_90a", threads=128)
    acc = p.rvec("acc", 128)
    d = p.urvec("d", 4)
    for k in range(4):
        p.emit(alu.umov(d[k], 0))
    p.emit(wgmma.hgmma(256, acc, d, False, end=True))
    p.emit(wgmma.hgmma(256, acc, d, True, end=True))
    p.emit(control.exit_())
    text = str(p.coloured())
    assert "  HGMMA.64x256x16.F32.BF16 R0, gdesc[UR0], RZ, !UPT, gsb0\n" in text
    with pytest.raises(WarpyError, match="needs 128 registers, small has 64"):
        wgmma.hgmma(256, p.rvec("small", 64), d, True)


def test_a_tma_box_must_fit_and_match_the_tile():
    p = Program("t", "sm_90a", threads=32)
    sa = p.smem_ring("sa", 2, SwizzledLayout(Swizzle(3, 4, 3), Layout((64, 64), (128, 2))), "bf16")
    bars = p.barriers("b", 2)
    big = p.tmap("big", TmaBox("bf16", (64, 256), (128,), (64, 128), swizzle=128))
    plain = p.tmap("plain", TmaBox("bf16", (64, 256), (128,), (64, 64)))
    with pytest.raises(WarpyError, match="box is 16384 bytes, more than sa's 8192"):
        tma_load(p, sa.at(0, 0, 0), big, [0, 0], bars.at(0))
    with pytest.raises(WarpyError, match="swizzles 0 bytes, buffer sa 128"):
        tma_load(p, sa.at(0, 0, 0), plain, [0, 0], bars.at(0))


def test_hgmma_takes_its_type_from_the_buffers():
    p = Program("t", "sm_90a", threads=128)
    tile = SwizzledLayout(Swizzle(3, 4, 3), Layout((64, 64), (128, 2)))
    sa = p.smem_ring("sa", 2, tile, "fp16")
    sb = p.smem_ring("sb", 2, tile, "fp16")
    sc = p.smem_ring("sc", 2, tile, "bf16")
    acc = p.rvec("acc", 32)
    hgmma(p, acc, sa.at(0, 0, 0), sb.at(0, 0, 0), 64, False)
    assert str(p.lines[-1]) == "  HGMMA.64x64x16.F32.F16 acc, gdesc[gmma_desc], RZ, !UPT"
    with pytest.raises(WarpyError, match="must share one of the types"):
        hgmma(p, acc, sa.at(0, 0, 0), sc.at(0, 0, 0), 64, False)
    t32 = p.smem_ring("t32", 2, SwizzledLayout(Swizzle(3, 4, 3), Layout((64, 32), (128, 4))), "tf32")
    hgmma(p, acc, t32.at(0, 0, 0), t32.at(0, 0, 0), 64, True)
    assert str(p.lines[-1]) == "  HGMMA.64x64x8.F32.TF32 acc, gdesc[gmma_desc], acc"
    # 8-bit floats are QGMMA (k32), each operand its own type; an 8-bit tile with a 16-bit one is refused
    f8 = p.smem_ring("f8", 2, SwizzledLayout(Swizzle(3, 4, 3), Layout((64, 128), (128, 1))), "e4m3")
    g8 = p.smem_ring("g8", 2, SwizzledLayout(Swizzle(3, 4, 3), Layout((64, 128), (128, 1))), "e5m2")
    hgmma(p, acc, f8.at(0, 0, 0), g8.at(0, 0, 0), 64, True)
    assert str(p.lines[-1]) == "  QGMMA.64x64x32.F32.E4M3.E5M2 acc, gdesc[gmma_desc], acc"
    with pytest.raises(WarpyError, match=r"QGMMA operands are 8-bit floats \(e4m3, e5m2\); sa holds fp16"):
        hgmma(p, acc, f8.at(0, 0, 0), sa.at(0, 0, 0), 64, True)


def test_note_coordinates_name_registers():
    with pytest.raises(ParseError, match=r"^10:18: note addr sa\[zz, 0\]: 'zz' is not a declared register"):
        parse(HEAD + "  MOV a, 0x1  // addr sa[zz, 0]\n")
    assert str(parse(HEAD + "  MOV a, 0x1  // addr sa[a*2-1, UR3]\n")).endswith("// addr sa[a*2-1, UR3]\n")
