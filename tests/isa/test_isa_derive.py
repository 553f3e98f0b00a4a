"""Address derivation: every derived operand equals its buffer's layout at the coordinates.

The reference comes from the `.buffer` lines of the printed text (parsed back), never from the
derivation: a ring of swizzled tiles walked by a k-loop, run through every iteration by the
scalar interpreter, in the named and in the coloured form.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.errors import WarpyError
from warpy.isa.families import alu, control
from warpy.isa.interp import Machine, note_value, run
from warpy.isa.index import Lane
from warpy.isa.program import Program
from warpy.isa.reference import reference
from warpy.isa.text import BufferDecl, Kernel, parse
from warpy.layout import Layout, Swizzle, SwizzledLayout

DSMEM = 0x400


def check_notes(k: Kernel) -> int:
    """Run the kernel; compare every note with the reference; return how many were checked."""
    checked = 0
    bad: list[str] = []

    def on_step(pc: int, i, m: Machine, before: dict[str, int]) -> None:  # type: ignore[no-untyped-def]
        nonlocal checked
        for note in i.notes:
            env = lambda name: before.get(name, 0)  # noqa: E731
            coords = [c.eval(env) for c in note.coords]
            want = reference(k.header, note, coords, dsmem=DSMEM)
            got = note_value(m, i, note, before)
            checked += 1
            if got != want:
                bad.append(f"line {pc}: {i}: {got:#x} != {want:#x}")

    run(k, Machine(sym={"dsmem": DSMEM}), on_step=on_step)
    assert not bad, "\n".join(bad[:10])
    return checked


def ring_program(depth: int, k_tiles: int, span: int, rows: int, sm: str, row_offsets: tuple[int, ...]) -> Program:
    p = Program("derive", sm, threads=32)
    k_elems = span // 2
    tile = SwizzledLayout(Swizzle({32: 1, 64: 2, 128: 3}[span], 4, 3), Layout((rows, k_elems), (span, 2)))
    sa = p.smem_ring("sa", depth, tile, "bf16")
    sx = p.smem("sx", Layout((k_tiles, 8), (64, 4)), "fp32")
    stage = p.pipe("stage", depth)
    inp = stage.consumer("cs")
    out = p.ur("out")
    form = "gdesc" if sm == "sm_90a" else "udesc"
    with p.loop("k", k_tiles) as k:
        with inp.stage():
            inp.wait_full()
            for j in range(k_elems // 16):
                p.derive.into(out, f"{form}.lo", inp.slot(sa, 0, 16 * j))
                for r in row_offsets:
                    p.derive.into(out, "addr", inp.slot(sa, r % rows, (16 * j + r) % k_elems))
            p.derive.into(out, "addr", sx.at(k, 3))
            p.derive.into(out, "addr", sx.at(k * 1, 0))
            inp.free()
    p.emit(control.exit_())
    return p


@settings(max_examples=25, deadline=None)
@given(
    depth=st.integers(1, 5),
    k_tiles=st.integers(1, 9),
    span=st.sampled_from([32, 64, 128]),
    rows=st.sampled_from([8, 64, 128]),
    sm=st.sampled_from(["sm_90a", "sm_100a"]),
    row_offsets=st.lists(st.integers(0, 127), max_size=3).map(tuple),
)
def test_every_derived_operand_matches_the_layout(depth, k_tiles, span, rows, sm, row_offsets):  # type: ignore[no-untyped-def]
    p = ring_program(depth, k_tiles, span, rows, sm, row_offsets)
    named = parse(p.text())
    n = check_notes(named)
    # per iteration: one wait + one free (noted) + descriptors + addresses + 2 inductions
    per_iter = 2 + (span // 32) * (1 + len(row_offsets)) + 2
    assert n >= k_tiles * per_iter
    coloured = parse(str(p.coloured()))
    assert check_notes(coloured) == n


def test_ring_values_are_one_multiply_add_at_the_top_ahead_of_the_wait():
    p = ring_program(4, 3, 128, 64, "sm_90a", (5,))
    text = p.text()
    lines = text.splitlines()
    head = lines.index(next(x for x in lines if x.startswith("LOOP_k")))
    wait = next(n for n, x in enumerate(lines) if x.startswith("WAIT_"))
    top = lines[head + 1 : wait]
    assert all(x.startswith("+ UIMAD ") for x in top), top
    assert "+ UIMAD sa_gdesc@cs, cs_stage, 0x200, sa_gdesc  // gdesc.lo sa[cs_stage, 0, 0]" in top
    # an induction for the k-affine buffer: set before the loop, stepped at its end
    assert "+ UIADD3 sx@k, sx_base, 0x0, URZ  // addr sx[k, 0]" in lines
    assert "+ UIADD3 sx@k, sx@k, 0x40, URZ" in lines
    # ring bookkeeping is marked ~
    assert "~ @!cs_stays_p LOP3.LUT cs_parity, cs_parity, 0x80000000, RZ, 0x3c, !PT" in lines


def test_a_descriptor_that_cannot_start_at_a_swizzled_row_is_refused():
    p = Program("bad", "sm_90a", threads=32)
    tile = SwizzledLayout(Swizzle(3, 4, 3), Layout((64, 64), (128, 2)))
    sa = p.smem_ring("sa", 2, tile, "bf16")
    with pytest.raises(WarpyError, match="not a swizzle-atom row"):
        p.derive.into(p.ur("d"), "gdesc.lo", sa.at(0, 1, 0))


def test_a_value_not_affine_in_the_index_is_refused():
    p = Program("bad", "sm_90a", threads=32)
    # a swizzled buffer whose stage stride is inside the swizzle's bits: not affine in the stage
    sx = p.smem("sx", SwizzledLayout(Swizzle(3, 4, 3), Layout((8, 8), (128, 16))), "bf16")
    with p.loop("k", 8) as k:
        with pytest.raises(WarpyError, match="not affine"):
            p.derive.into(p.ur("d"), "addr", sx.at(1, k))


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("span,rows", [(128, 64), (128, 128), (64, 64), (32, 128)])
def test_descriptors_agree_with_warpy_layout_desc(arch: str, span: int, rows: int) -> None:
    """The derived descriptor words, run through the interpreter, equal warpy.layout.desc's encoding of
    the same tile (warpy.layout.smem.smem_tile) for every stage and MMA K-step."""
    from warpy.isa.families import alu
    from warpy.isa.descriptors import desc_hi
    from warpy.layout.desc import smem_descs
    from warpy.layout.smem import smem_tile

    tile = smem_tile(rows, span // 2, "bf16", "K", span)
    depth = 3
    p = Program("descs", arch, threads=32)
    sa = p.smem_ring("sa", depth, tile.layout, "bf16")
    form = "gdesc" if arch == "sm_90a" else "udesc"
    lo, hi = p.ur("lo"), p.ur("hi")
    stage = p.ring("st", depth)
    got: list[int] = []
    with p.loop("k", depth):
        with p.ring_iteration(stage):
            for j in range(span // 32):
                p.derive.into(lo, f"{form}.lo", sa.at(stage, 0, 16 * j))
                p.emit(alu.umov(hi, desc_hi(sa, arch)))
                p.emit(control.nop())
    p.emit(control.exit_())

    def on_step(pc, i, m, before):  # type: ignore[no-untyped-def]
        if i.name == "NOP":
            got.append(m.v["lo"] | m.v["hi"] << 32)

    run(parse(p.text()), Machine(sym={"dsmem": DSMEM}), on_step=on_step)
    steps = span // 32
    for s in range(depth):
        addr = DSMEM + sa.base + s * sa.stage_bytes
        want = smem_descs(tile, addr, "sm90" if arch == "sm_90a" else "sm100")
        assert got[s * steps : (s + 1) * steps] == want[:steps], (s, [hex(x) for x in got], [hex(x) for x in want])
    assert check_notes(parse(str(p.coloured()))) > 0


@pytest.mark.parametrize("tid", [0, 1, 37, 127])
def test_per_thread_addresses(tid: int) -> None:
    """A staging tile written by 128 threads, row = tid: one IMAD on the thread's row at the point
    of use, on top of the ring's multiply-add; each thread's address equals the layout."""
    from warpy.isa.families import memory

    p = Program("lanes", "sm_100a", threads=128)
    st = p.smem_ring("st", 2, Layout((128, 32), (132, 4)), "fp32")  # padded rows
    ring = p.ring("r", 2)
    t = p.r("t")
    p.emit(alu.s2r(t, "SR_TID.X"))
    row = Lane("row", t, 128)
    v = p.r("v")
    p.emit(alu.mov(v, 7))
    with p.loop("k", 3):
        with p.ring_iteration(ring):
            p.derive.emit_at(st.at(ring, row, 5), lambda m: memory.sts(m, v))
    p.emit(control.exit_())
    text = p.text()
    assert "+ IMAD st@row, t, 0x84, st@r  // addr st[r_stage, t, 0]" in text
    assert "  STS [st@row+0x14], v  // addr st[r_stage, t, 5]" in text
    m = Machine(sym={"dsmem": DSMEM}, sreg={"SR_TID.X": tid})
    checked = 0
    k = parse(text)

    def on_step(pc, i, m_, before):  # type: ignore[no-untyped-def]
        nonlocal checked
        for note in i.notes:
            coords = [c.eval(lambda n: before.get(n, 0)) for c in note.coords]
            assert note_value(m_, i, note, before) == reference(k.header, note, coords, dsmem=DSMEM)
            checked += 1

    run(k, m, on_step=on_step)
    assert checked >= 6
    with pytest.raises(WarpyError, match="per-thread coordinate"):
        p.derive.into(p.ur("u"), "addr", st.at(0, row, 0))


@pytest.mark.parametrize("name", ["example-pipe", "example-features"])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_every_note_of_the_examples_holds_in_every_role(name: str, arch: str) -> None:
    """Run each example as each warp would (the scalar interpreter, waits passing at once) and
    check every note it meets against the .buffer lines, named and coloured."""
    from warpy.isa.examples import EXAMPLES

    prog = EXAMPLES[name](arch)
    for text in (prog.text(), str(prog.coloured())):
        k = parse(text)
        total = 0
        for warp in range(k.header.threads // 32):
            seen = 0

            def on_step(pc, i, m, before):  # type: ignore[no-untyped-def]
                nonlocal seen
                for note in i.notes:
                    coords = [c.eval(lambda n: before.get(n, 0)) for c in note.coords]
                    want = reference(k.header, note, coords, dsmem=DSMEM, tmem_base=0)
                    assert note_value(m, i, note, before) == want, (pc, str(i))
                    seen += 1

            run(k, Machine(sym={"dsmem": DSMEM}, sreg={"SR_TID.X": 32 * warp}, cbank={"n": 3}), on_step=on_step)
            total += seen
        assert total > 20
