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

M32 = 0xFFFFFFFF
M64 = (1 << 64) - 1
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
    kind = draw(st.integers(0, 14))
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
    else:
        cmp = draw(st.sampled_from(CMPS))
        line = f"UISETP.{cmp}.U32.AND {draw(st.sampled_from(UPR))}, UPT, {u()}, {draw(st.sampled_from([u(), imm()]))}, UPT"
    if draw(st.booleans()) and not line.startswith(("U", "PLOP3")):
        line = f"@{neg()}{p()} {line}"
    return line


# -- a PTX evaluator for what the ALU rules emit ---------------------------------------------------


def _s32(x: int) -> int:
    x &= M32
    return x - (1 << 32) if x >> 31 else x


def _lut(lut: int, a: int, b: int, c: int) -> int:
    return interp.lut3(lut, a, b, c)


def run_ptx(body: list[str], regs: dict[str, int]) -> dict[str, int]:
    v = dict(regs)
    v["%pt"], v["%pf"] = 1, 0

    def val(tok: str) -> int:
        tok = tok.strip()
        if tok.startswith("!"):
            return 1 - val(tok[1:])
        if tok.startswith("%"):
            return v.get(tok, 0)
        return int(tok, 0)

    code = [ln.strip().rstrip(";") for ln in body]
    labels = {ln[:-1]: n for n, ln in enumerate(code) if ln.endswith(":")}
    pc = 0
    while pc < len(code):
        line = code[pc]
        pc += 1
        if not line or line.startswith("//") or line.endswith(":") or line == "}":
            continue
        m = re.match(r"@(!?)(%\w+) (.*)", line)
        if m:
            if val(m.group(2)) == (1 if m.group(1) else 0):
                continue
            line = m.group(3)
        if line == "exit":
            break
        op, _, rest = line.partition(" ")
        if op == "bra":
            pc = labels[rest.strip()]
            continue
        if op.startswith("mov.b64") and rest.startswith("{"):
            lo, hi, src = re.match(r"\{(%\w+), (%\w+)\}, (\S+)", rest).groups()  # type: ignore[union-attr]
            x = val(src)
            v[lo], v[hi] = x & M32, (x >> 32) & M32
            continue
        if op.startswith("mov.b64"):
            d, lo, hi = re.match(r"(%\w+), \{(%\w+), (%\w+)\}", rest).groups()  # type: ignore[union-attr]
            v[d] = val(lo) | val(hi) << 32
            continue
        if op.startswith("setp."):
            parts = op.split(".")
            cmp, typ = parts[1], parts[-1]
            logic = parts[2] if len(parts) == 4 else None
            dests, a, b, *c = [t.strip() for t in rest.split(",")]
            x, y = val(a), val(b)
            if typ == "s32":
                x, y = _s32(x), _s32(y)
            t = {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}[cmp]
            z = val(c[0]) if c else None
            comb = {"and": lambda s: s and z, "or": lambda s: s or z, "xor": lambda s: s != bool(z), None: lambda s: s}[logic]
            ds = dests.split("|")
            v[ds[0]] = int(bool(comb(t)))
            if len(ds) > 1:
                v[ds[1]] = int(bool(comb(not t)))
            continue
        d, *srcs = [t.strip() for t in rest.split(",")]
        a = [val(s) for s in srcs]
        if op in ("mov.b32", "mov.u32", "mov.pred"):
            r = a[0]
        elif op == "add.u32":
            r = a[0] + a[1]
        elif op == "sub.u32":
            r = a[0] - a[1]
        elif op == "mad.lo.u32":
            r = a[0] * a[1] + a[2]
        elif op == "mul.wide.u32":
            r = (a[0] & M32) * (a[1] & M32)
            v[d] = r & M64
            continue
        elif op == "add.u64":
            v[d] = (a[0] + a[1]) & M64
            continue
        elif op == "shl.b32":
            r = a[0] << a[1] if a[1] < 32 else 0
        elif op == "shr.u32":
            r = a[0] >> a[1] if a[1] < 32 else 0
        elif op == "lop3.b32":
            r = _lut(a[3], a[0], a[1], a[2])
        elif op == "selp.b32":
            r = a[0] if a[2] else a[1]
        elif op == "not.b32":
            r = ~a[0]
        elif op == "neg.s32":
            r = -a[0]
        elif op == "not.pred":
            r = 1 - a[0]
        elif op == "and.b32":
            r = a[0] & a[1]
        else:
            raise AssertionError(f"the evaluator does not know {op}")
        v[d] = r & M32
    return v


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
