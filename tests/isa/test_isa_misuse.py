"""Misuse of the float, packed, conversion, shuffle, atomic and register-operand MMA builders is
refused when the program is built, in one line naming the operand and what it holds (and statically
by mypy where the types say it: tests/typing). The checker reports what only a run shows: a shuffle
executed by lanes other than its members, or reading a lane that does not take part."""

from __future__ import annotations

import re
from typing import Callable

import pytest

from warpy.check.report import check_kernel
from warpy.errors import WarpyError
from warpy.isa.families import alu, control, memory
from warpy.isa.families.typed import BF16, BF16x2, F16, F16x2, F32, S32, U32
from warpy.isa.operands import GMem, R, RVec, URVec
from warpy.isa.program import Program, SmemBuffer

d32, x32, y32 = F32("d"), F32("x"), F32("y")

CASES: list[tuple[str, Callable[[], object], str]] = [
    ("a packed op on an fp32 register", lambda: alu.hadd2(BF16x2("d"), x32, BF16x2("y")),  # type: ignore[call-overload]
     r"^HADD2: operand a must be a BF16x2 or F16x2 register, not F32 x \(one fp32 value\)$"),
    ("an MUFU on an integer", lambda: alu.ex2(d32, S32("n")),  # type: ignore[arg-type]
     r"^MUFU.EX2: operand a must be an F32 register, not S32 n \(a signed 32-bit integer\)$"),
    ("a shuffle whose member mask excludes its source lane", lambda: alu.shfl_bfly(R("d"), R("a"), 16, members=0x0000FFFF),
     r"^SHFL.BFLY: lane 0 reads lane 16, which the member mask 0x0000ffff excludes$"),
    ("an index shuffle from outside the members", lambda: alu.shfl_idx(R("d"), R("a"), 3, members=0xFFFFFFF0),
     r"^SHFL.IDX: lane 4 reads lane 3, which the member mask 0xfffffff0 excludes$"),
    ("bf16 and fp16 pairs mixed", lambda: alu.hfma2(BF16x2("d"), BF16x2("a"), F16x2("b"), BF16x2("c")),  # type: ignore[call-overload]
     r"^HFMA2: the operands must hold one type; .*b is F16x2 b"),
    ("an untyped register where a type decides", lambda: alu.hmul2(R("d"), R("a"), R("b")),  # type: ignore[call-overload]
     r"^HMUL2: operand d must be a BF16x2 or F16x2 register, not the untyped register d \(say what it holds: BF16x2.of\(r\)\)$"),
    ("an fp32 add of a packed register", lambda: alu.fadd(d32, BF16x2("a"), y32),
     r"^FADD: operand a is BF16x2 a \(two bf16 values\); an fp32 instruction takes F32 registers$"),
    ("a float-to-integer conversion of an integer", lambda: alu.f2i(S32("d"), U32("n")),  # type: ignore[arg-type]
     r"^F2I: operand a must be an F32 or F16 or BF16 register, not U32 n"),
    ("an integer-to-float conversion of a float", lambda: alu.i2f(d32, F16("h")),  # type: ignore[arg-type]
     r"^I2F: operand a must be an S32 or U32 register, not F16 h"),
    ("a conversion to the same type", lambda: alu.f2f(BF16("d"), BF16("a")), r"^F2F: converting BF16 a .* converts nothing"),
    ("one 16-bit value packed with a high half", lambda: alu.f2fp(BF16("d"), x32, y32), r"^F2FP: d is BF16 d .*hi must be RZ"),
    ("an integer warp sum of floats", lambda: alu.redux("SUM", alu.UR("s"), d32), r"^REDUX: operand a is F32 d"),
    ("a rounding mode that is none", lambda: alu.ffma(d32, x32, y32, d32, rnd="RU"), r"^FFMA: rounding 'RU' is not RN, RZ, RM or RP$"),
    ("an unknown cache hint", lambda: memory.ldg(R("d"), GMem(URVec("md", 2), RVec("a", 2)), "NC"), r"^LDG: cache hint 'NC' is not one of"),
    ("a global load of 12 bytes", lambda: memory.ldg(RVec("v", 3), GMem(URVec("md", 2), RVec("a", 2))),
     r"^LDG: a vector of 3 registers; a global load moves 1, 2 or 4"),
    ("an fp32 atomic max", lambda: memory.atom("MAX", R("d"), GMem(URVec("md", 2), RVec("a", 2)), x32), r"^ATOMG.MAX: fp32 operands have only ADD$"),
    ("a signed atomic add", lambda: memory.red("ADD", GMem(URVec("md", 2), RVec("a", 2)), S32("v")), r"^REDG.ADD: only MIN and MAX have a signed form$"),
]


@pytest.mark.parametrize("what,build,message", CASES, ids=[c[0] for c in CASES])
def test_misuse_is_refused_in_one_line(what: str, build: Callable[[], object], message: str) -> None:
    with pytest.raises(WarpyError) as e:
        build()
    msg = str(e.value)
    assert "\n" not in msg and re.search(message, msg), msg


def test_a_shuffle_whose_partners_are_members_is_built() -> None:
    assert str(alu.shfl_bfly(R("d"), R("a"), 8, members=0x0000FFFF)).strip() == "SHFL.BFLY PT, d, a, 0x8, 0x1f, 0xffff"
    assert str(alu.shfl_bfly(R("d"), R("a"), 16)).strip() == "SHFL.BFLY PT, d, a, 0x10, 0x1f"


def _shuffle_program(members: int, lanes_running: int, lane_mask: int = 1) -> Program:
    """One warp: lanes below `lanes_running` run a butterfly shuffle naming `members`."""
    p = Program("shfl", "sm_90a", threads=32)
    lane, inside = p.r("lane"), p.p("inside")
    p.emit(alu.s2r(lane, "SR_LANEID"))
    p.emit(alu.isetp("LT", inside, lane, lanes_running))
    d = p.r("d")
    with p.when(inside):
        p.emit(alu.shfl("BFLY", d, lane, lane_mask, 0x1F, members=members))
    p.emit(control.exit_())
    return p


def test_the_checker_accepts_a_shuffle_of_its_members() -> None:
    p = _shuffle_program(0x0000FFFF, 16)
    rep = check_kernel(p.kernel(), p.coloured())
    assert rep.ok, rep.text()


def test_the_checker_reports_a_shuffle_run_by_lanes_it_does_not_name() -> None:
    p = _shuffle_program(0xFFFFFFFF, 16, lane_mask=16)  # half the warp runs a full-warp shuffle
    rep = check_kernel(p.kernel(), p.coloured())
    msgs = rep.problems.msgs["protocol"]
    assert any("runs on lanes 0x0000ffff, its member mask is 0xffffffff" in m for m in msgs), rep.text()
    assert any("lane 0 reads lane 16, which does not take part" in m for m in msgs), rep.text()


# -- register and tensor-memory fragments of the MMAs: the layout atoms decide ---------------------------


def _rs_program() -> tuple[Program, SmemBuffer, RVec, RVec]:
    from warpy.layout.smem import smem_tile

    p = Program("rs", "sm_90a", threads=128)
    st = smem_tile(64, 64, "bf16", "K", 128)
    sb = p.smem("sb", st.layout, "bf16")
    return p, sb, p.rvec("acc", 32), p.rvec("afrag", 4)


def test_the_rs_hgmma_takes_the_atoms_fragment_and_an_accumulator_chunk() -> None:
    from warpy.isa.units.wgmma import hgmma_rs
    from warpy.layout import atoms

    p, sb, acc, af = _rs_program()
    hgmma_rs(p, acc, af, atoms.wgmma(64, "bf16", a_from_registers=True).a, sb.at(0, 0), 64, False)
    hgmma_rs(p, acc, af, atoms.wgmma_acc_chunk_as_a(128, 3), sb.at(0, 16), 64, True)
    rs = [str(ln).strip() for ln in p.lines if "HGMMA" in str(ln)]
    # both the register-A form: A from the fragment, B by descriptor; the second accumulates
    assert len(rs) == 2 and all(ln.startswith("HGMMA.64x64x16.F32.BF16 acc, afrag, gdesc[") for ln in rs), rs
    assert rs[0].endswith(", RZ, !UPT") and not rs[1].endswith(", RZ, !UPT"), rs


def test_the_rs_hgmma_refuses_another_fragment() -> None:
    from warpy.isa.units.wgmma import hgmma_rs
    from warpy.layout import atoms

    p, sb, acc, af = _rs_program()
    ldsm = atoms.ldmatrix_fragment(4)  # what ldmatrix.x4 gives a warp: not the wgmma A fragment
    with pytest.raises(WarpyError) as e:
        hgmma_rs(p, acc, af, ldsm, sb.at(0, 0), 64, False)
    assert re.match(r"^HGMMA A afrag: (the fragment .* has no|thread \d+ value \d+ holds element \d+, the atom's)", str(e.value))
    assert "\n" not in str(e.value)
    with pytest.raises(WarpyError, match=r"4 registers a thread, not 2"):
        hgmma_rs(p, acc, p.rvec("two", 2), atoms.wgmma(64, a_from_registers=True).a, sb.at(0, 0), 64, False)


def test_the_ts_umma_refuses_a_tensor_memory_layout_that_is_not_the_atoms() -> None:
    from warpy.isa.units.tcgen05 import utchmma_ts
    from warpy.layout import Layout as L
    from warpy.layout.desc import umma_idesc
    from warpy.layout.smem import smem_tile

    p = Program("ts", "sm_100a", threads=128)
    sb = p.smem("sb", smem_tile(64, 64, "bf16", "K", 128).layout, "bf16")
    acc = p.tmem("acc", L((128, 64), (1 << 16, 1)), 64)
    p.derive.tmem_base = p.ur("tmem_base")
    p.emit(alu.umov(p.derive.tmem_base, 0))
    idesc = umma_idesc("bf16", "bf16", "f32", 128, 64, "K", "K")
    good = p.tmem("a_good", L((128, 32), (1 << 16, 1)), 32, elem="bf16", base=64)
    utchmma_ts(p, good.at(0, 0), sb.at(0, 0), acc.at(0, 0), idesc, False)
    bad = p.tmem("a_bad", L((128, 32), (1, 1 << 16)), 32, elem="bf16", base=96)  # rows along columns
    with pytest.raises(WarpyError, match=r"^A in tensor memory a_bad has layout .* the TS form reads \(128,32\):\(65536,1\)"):
        utchmma_ts(p, bad.at(0, 0), sb.at(0, 0), acc.at(0, 0), idesc, False)
    wrong_type = p.tmem("a_f16", L((128, 32), (1 << 16, 1)), 32, elem="fp16", base=96)
    with pytest.raises(WarpyError, match=r"must share a type"):
        utchmma_ts(p, wrong_type.at(0, 0), sb.at(0, 0), acc.at(0, 0), idesc, False)
