"""The lifter and the isa's interpreter agree on the ALU: random straight-line programs of the ALU
forms warpy programs use are run by `warpy.isa.interp` on the SASS text and by a small evaluator
of the PTX subset the ALU rules emit, from the same random registers; every register must end
equal. (The interpreter is the reference the checker builds on: what is checked is what is lifted.)"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.isa import interp
from warpy.isa.text import parse
from warpy.lift.lifter import lift

from ptx_eval import run_ptx

M32 = 0xFFFFFFFF
HEADER = ".kernel s\n.sm sm_90a\n.threads 32\n.dynsmem 0\n.grid 1 1 1\n.cluster 1 1 1\n.mbarriers 0\n"

R = [f"R{i}" for i in range(8)]
UR = [f"UR{i}" for i in range(4)]
PR = [f"P{i}" for i in range(4)]
UPR = [f"UP{i}" for i in range(3)]
CMPS = ["EQ", "NE", "LT", "LE", "GT", "GE"]


def _imm(v: int) -> str:
    return f"-0x{-v:x}" if v < 0 else f"0x{v:x}"


@st.composite
def alu_line(draw: st.DrawFn) -> str:
    r = lambda: draw(st.sampled_from(R))  # noqa: E731
    u = lambda: draw(st.sampled_from(UR))  # noqa: E731
    p = lambda: draw(st.sampled_from(PR))  # noqa: E731
    imm = lambda: _imm(draw(st.one_of(st.integers(-200, 200), st.integers(0, M32))))  # noqa: E731
    neg = lambda: draw(st.sampled_from(["", "!"]))  # noqa: E731
    src = lambda: draw(st.sampled_from([r(), "-" + r(), "~" + r(), imm(), "RZ"]))  # noqa: E731
    kind = draw(st.integers(0, 20))
    if kind == 0:
        line = f"IADD3 {r()}, {src()}, {src()}, {src()}"
    elif kind == 1:
        line = f"UIADD3 {u()}, {u()}, {draw(st.sampled_from([u(), imm()]))}, URZ"
    elif kind == 2:
        line = f"IMAD {r()}, {r()}, {draw(st.sampled_from([r(), imm()]))}, {draw(st.sampled_from([r(), 'RZ']))}"
    elif kind == 3:
        # c is RZ: the coloured text's `R10` as a 64-bit addend parses as one register, and the
        # interpreter then adds only its low word (the lifter adds the pair R10:R11, as SASS does)
        line = f"IMAD.WIDE.U32 R8, {r()}, {draw(st.sampled_from([r(), imm()]))}, RZ"
    elif kind == 4:
        line = f"LEA {r()}, {r()}, {r()}, {_imm(draw(st.integers(0, 31)))}"
    elif kind == 5:
        line = f"LOP3.LUT {r()}, {src()}, {r()}, {src()}, {_imm(draw(st.integers(0, 255)))}, !PT"
    elif kind == 6:
        line = f"LOP3.LUT {p()}, RZ, {r()}, {r()}, {src()}, {_imm(draw(st.integers(0, 255)))}, !PT"
    elif kind == 7:
        line = f"SHF.L.U32 {r()}, {r()}, {_imm(draw(st.integers(0, 31)))}, RZ"
    elif kind == 8:
        line = f"SHF.R.U32.HI {r()}, RZ, {_imm(draw(st.integers(0, 31)))}, {r()}"
    elif kind == 9:
        line = f"MOV {r()}, {draw(st.sampled_from([r(), imm(), u()]))}"
    elif kind == 10:
        line = f"SEL {r()}, {r()}, {draw(st.sampled_from([r(), imm()]))}, {neg()}{p()}"
    elif kind == 11:
        cmp = draw(st.sampled_from(CMPS))
        uns = draw(st.sampled_from(["", ".U32"]))
        c = draw(st.sampled_from(["PT", p(), "!" + p()]))
        logic = draw(st.sampled_from(["AND", "OR", "XOR"]))
        line = f"ISETP.{cmp}{uns}.{logic} {p()}, PT, {r()}, {draw(st.sampled_from([r(), imm()]))}, {c}"
    elif kind == 12:
        line = f"PLOP3.LUT {p()}, PT, PT, PT, {neg()}{draw(st.sampled_from(PR + UPR))}, 0x80, 0x8"
    elif kind == 13:
        line = f"USEL {u()}, {u()}, {draw(st.sampled_from([u(), imm()]))}, {neg()}{draw(st.sampled_from(UPR))}"
    elif kind == 15:
        # multiply-high: unsigned (the magic-number division's multipliers are >= 2^31) and signed
        big = _imm(draw(st.integers(1 << 31, M32)))
        line = f"IMAD.HI{draw(st.sampled_from(['', '.U32']))} {r()}, {r()}, {draw(st.sampled_from([r(), big]))}, {r()}"
    elif kind == 16:
        line = f"IMAD.WIDE R8, {r()}, {draw(st.sampled_from([r(), imm()]))}, RZ"
    elif kind == 17:
        sh = draw(st.sampled_from([_imm(draw(st.integers(0, 32))), r()]))
        form = draw(st.sampled_from(["L.U32", "L.U32.HI", "R.U32", "R.S32.HI", "R.U32.HI"]))
        line = f"SHF.{form} {r()}, {r()}, {sh}, {r()}"
    elif kind == 18:
        line = f"PRMT {r()}, {r()}, {_imm(draw(st.integers(0, 0xFFFF)))}, {r()}"
    elif kind == 19:
        line = f"VIMNMX{draw(st.sampled_from(['', '.U32']))} {r()}, {r()}, {draw(st.sampled_from([r(), imm()]))}, {draw(st.sampled_from(['PT', '!PT']))}"
    elif kind == 20:
        line = f"LEA.HI {r()}, {r()}, {r()}, {_imm(draw(st.integers(1, 31)))}"
    else:
        cmp = draw(st.sampled_from(CMPS))
        line = f"UISETP.{cmp}.U32.AND {draw(st.sampled_from(UPR))}, UPT, {u()}, {draw(st.sampled_from([u(), imm()]))}, UPT"
    if draw(st.booleans()) and not line.startswith(("U", "PLOP3")):
        line = f"@{neg()}{p()} {line}"
    return line


@settings(deadline=None, max_examples=150)
@given(lines=st.lists(alu_line(), min_size=1, max_size=6), seed=st.integers(0, 2**32 - 1))
def test_lifted_alu_computes_what_the_interpreter_computes(lines: list[str], seed: int) -> None:
    import random

    rnd = random.Random(seed)
    init = {n: rnd.getrandbits(32) for n in R + UR + ["R8", "R9", "R10", "R11"]}
    init.update({n: rnd.getrandbits(1) for n in PR + UPR})
    text = HEADER + "".join(f"  {ln}\n" for ln in lines) + "  EXIT\n"
    kernel = parse(text)
    m = interp.Machine()
    m.v = dict(init)
    interp.run(kernel, m)

    ptx = lift(kernel)
    body = ptx.split("// --- the program ---\n")[1].splitlines()
    ptx_name = {n: "%" + re.sub(r"^([A-Z]+)(\d+)$", lambda x: x.group(1).lower() + x.group(2), n) for n in init}
    got = run_ptx(body, {ptx_name[n]: x for n, x in init.items()})
    for n in init:
        assert got.get(ptx_name[n], 0) == m.v.get(n, 0), (n, text, "\n".join(body))
