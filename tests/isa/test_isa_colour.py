"""Register colouring: the coloured program computes what the named one does, the limits hold,
and running out names the point of greatest pressure."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.errors import WarpyError
from warpy.isa.colour import LIMITS, colour, liveness, pressure
from warpy.isa.examples import pipe_sm90, pipe_sm100
from warpy.isa.families import alu, control
from warpy.isa.instr import Instr
from warpy.isa.interp import Machine, run
from warpy.isa.operands import RZ, URZ, physical_kind
from warpy.isa.program import Program
from warpy.isa.text import parse

OPS = ["iadd3", "imad", "lop3", "shf_l", "shf_r", "sel", "uiadd3", "uimad", "ulop3", "ushf_l", "r2ur", "isetp", "uisetp"]


@st.composite
def straight_line(draw):  # type: ignore[no-untyped-def]
    """A random straight-line program over named R/UR/P/UP registers, each defined before use."""
    sm = draw(st.sampled_from(["sm_90a", "sm_100a"]))
    p = Program("rand", sm, threads=32)
    rs = [p.r(f"r{n}") for n in range(draw(st.integers(2, 12)))]
    us = [p.ur(f"u{n}") for n in range(draw(st.integers(2, 8)))]
    ps = [p.p(f"p{n}") for n in range(3)]
    ups = [p.up(f"q{n}") for n in range(3)]
    imm = st.integers(-(1 << 31), (1 << 32) - 1)
    for r in rs:
        p.emit(alu.mov(r, draw(imm)))
    for u in us:
        p.emit(alu.umov(u, draw(imm)))
    for pr in ps:
        p.emit(alu.isetp("LT", pr, rs[0], draw(imm) & 0xFFFFFFFF))
    for q in ups:
        p.emit(alu.uisetp("NE", q, us[0], draw(imm) & 0xFFFFFFFF))
    R = st.sampled_from(rs)
    U = st.sampled_from(us)
    for _ in range(draw(st.integers(1, 40))):
        op = draw(st.sampled_from(OPS))
        if op == "iadd3":
            i = alu.iadd3(draw(R), draw(R), draw(st.one_of(R, imm)), draw(st.sampled_from([RZ] + rs)))
        elif op == "imad":
            i = alu.imad(draw(R), draw(R), draw(st.one_of(R, st.integers(0, 1000))), draw(R))
        elif op == "lop3":
            i = alu.lop3(draw(R), draw(R), draw(R), draw(R), draw(st.integers(0, 255)))
        elif op == "shf_l":
            i = alu.shf_l(draw(R), draw(R), draw(st.integers(0, 31)))
        elif op == "shf_r":
            i = alu.shf_r(draw(R), draw(R), draw(st.integers(0, 31)))
        elif op == "sel":
            i = alu.sel(draw(R), draw(R), draw(R), draw(st.sampled_from(ps)))
        elif op == "uiadd3":
            i = alu.uiadd3(draw(U), draw(U), draw(st.one_of(U, imm)), draw(st.sampled_from([URZ] + us)))
        elif op == "uimad":
            i = alu.uimad(draw(U), draw(U), draw(st.integers(0, 5000)), draw(U))
        elif op == "ulop3":
            i = alu.ulop3(draw(U), draw(U), draw(U), draw(U), draw(st.integers(0, 255)))
        elif op == "ushf_l":
            i = alu.ushf_l(draw(U), draw(U), draw(st.integers(0, 31)))
        elif op == "r2ur":
            i = alu.r2ur(draw(U), draw(R))
        elif op == "isetp":
            i = alu.isetp(draw(st.sampled_from(["EQ", "NE", "LT", "GE"])), draw(st.sampled_from(ps)), draw(R), draw(R))
        else:
            i = alu.uisetp(draw(st.sampled_from(["EQ", "NE", "LT", "GE"])), draw(st.sampled_from(ups)), draw(U), draw(U))
        if draw(st.booleans()) and op not in ("uiadd3", "uimad", "ulop3", "ushf_l", "uisetp"):
            i = i.guarded(draw(st.sampled_from(ps)) if draw(st.booleans()) else ~draw(st.sampled_from(ps)))
        elif draw(st.booleans()) and op in ("uiadd3", "uimad", "ulop3", "ushf_l"):
            i = i.guarded(draw(st.sampled_from(ups)))
        p.emit(i)
    # everything is read at the end, so every value is live to the end of the trace it writes
    p.emit(control.exit_())
    return p


def Machine_at(values: dict[str, int]) -> Machine:
    m = Machine()
    m.v = dict(values)
    return m


def trace(k) -> list[tuple[int, tuple[int, ...]]]:  # type: ignore[no-untyped-def]
    """The values each instruction writes, in order (registers by operand, not by name)."""
    from warpy.isa.families import defs_uses

    out: list[tuple[int, tuple[int, ...]]] = []

    def on_step(pc: int, i: Instr, m: Machine, before: dict[str, int]) -> None:
        if i.name in ("BRA", "EXIT"):
            return
        d, _ = defs_uses(i)
        # a write under a false guard writes nothing: only values actually written are compared
        taken = i.guard is None or Machine_at(before).get(i.guard)
        out.append((pc, tuple(m.get(o) for o in d) if taken else ()))

    run(k, Machine(), on_step=on_step)
    return out


@settings(max_examples=60, deadline=None)
@given(straight_line())
def test_colouring_changes_no_value(p):  # type: ignore[no-untyped-def]
    named = p.kernel()
    coloured = colour(named)
    assert trace(parse(str(named))) == trace(parse(str(coloured)))
    for i in coloured.instrs():
        for r in i.regs():
            assert physical_kind(r.name.split(".")[0]) is not None


def _check_no_clash(k):  # type: ignore[no-untyped-def]
    """No two named cells that are live at once share a physical register."""
    decls = {d.name: d for d in k.header.regs}
    from warpy.isa.colour import assign

    base = assign(list(k.lines), decls)
    lv = liveness(list(k.lines), decls)
    for n in lv.instrs:
        seen: dict[tuple[str, int], tuple[str, int]] = {}
        for name, e in lv.live_out[n] | lv.defs[n]:
            key = (decls[name].kind, base[name] + e)
            assert key[1] < LIMITS[key[0]]
            assert seen.setdefault(key, (name, e)) == (name, e), (n, key, seen[key], (name, e))


@pytest.mark.parametrize("build", [pipe_sm90, pipe_sm100])
def test_examples_colour_without_clashes(build):  # type: ignore[no-untyped-def]
    k = build().kernel()
    _check_no_clash(k)
    pr = pressure(k)
    assert pr["R"] >= 32 and pr["UR"] >= 8
    assert all(pr[kind] <= LIMITS[kind] for kind in LIMITS)


def test_vectors_are_aligned_blocks():
    k = pipe_sm90().coloured()
    text = str(k)
    # the accumulator is one block of 64, aligned to 4: HGMMA names its first register
    line = next(x for x in text.splitlines() if "HGMMA" in x)
    first = int(line.split()[1].rstrip(",")[1:])
    assert first % 4 == 0
    assert all(int(x.split(", R")[1]) % 4 == 0 for x in text.splitlines() if "STG.E.128" in x)


def test_pressure_error_names_the_point_and_what_is_live():
    p = Program("too_many", "sm_90a", threads=32)
    regs = [p.r(f"x{n}") for n in range(300)]
    for n, r in enumerate(regs):
        p.emit(alu.mov(r, n))
    acc = p.r("acc")
    p.emit(alu.mov(acc, 0))
    for r in regs:
        p.emit(alu.iadd3(acc, acc, r))
    p.emit(control.exit_())
    with pytest.raises(WarpyError) as e:
        p.coloured()
    msg = str(e.value)
    assert "R registers do not fit in 255" in msg
    assert "MOV acc, 0x0" in msg  # the point: all 300 values and acc are live there
    assert "301 R live" in msg and "x0" in msg and "x299" in msg


def test_uniform_pressure_is_separate_from_general():
    p = Program("many_ur", "sm_90a", threads=32)
    regs = [p.ur(f"u{n}") for n in range(70)]
    for n, r in enumerate(regs):
        p.emit(alu.umov(r, n))
    s = p.ur("s")
    p.emit(alu.umov(s, 0))
    for r in regs:
        p.emit(alu.uiadd3(s, s, r))
    with pytest.raises(WarpyError, match="UR registers do not fit in 63"):
        p.coloured()


def test_a_read_before_any_write_is_refused():
    p = Program("undef", "sm_90a", threads=32)
    a, b = p.r("a"), p.r("b")
    p.emit(alu.mov(a, 1))
    p.emit(alu.iadd3(a, a, b))
    p.emit(control.exit_())
    with pytest.raises(WarpyError, match=r"line 2 of the body `IADD3 a, a, b, RZ` reads b before any write"):
        p.kernel()


def test_a_value_written_on_some_path_is_live_only_from_its_write():
    """An accumulator first read under a predicate (a loop's first MMA) costs no registers before
    its first write: the producer role of the sm_90a example shares registers with it."""
    k = pipe_sm90().kernel()
    decls = {d.name: d for d in k.header.regs}
    lv = liveness(list(k.lines), decls)
    assert not lv.live_in[lv.instrs[0]]
    assert pressure(k)["R"] < 64 + 16
