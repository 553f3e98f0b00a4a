"""Tests that kill mutmut's survivors in warpy/lift/families (docs/testing.md lists the run): the
lifted PTX declares every register it uses (a temporary of the wrong kind is an undeclared name
ptxas would refuse; this finds it without running ptxas), golden PTX for the forms no other golden
reaches (cluster launch control's 128-bit responses, tensor-memory 16x64b shapes, multicast masks,
a parity of RZ, a negated enable-input-d, rounding modes), and the lifter's one-line refusals."""

from __future__ import annotations

import re

import pytest

from warpy.errors import WarpyError
from warpy.isa.text import parse
from warpy.lift.lifter import lift

from test_lift import GOLDEN, ptx_lines, text
from test_meaning import ROLES

MORE = [
    ("CLCQUERY.CANCELED P0, R4", "sm_100a",
     ["mov.b64 %td0, {%r4, %r5};", "mov.b64 %td1, {%r6, %r7};", "mov.b128 %tq0, {%td0, %td1};",
      "clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 %p0, %tq0;"]),
    ("CLCQUERY.CTAID R1, R4", "sm_100a",
     ["mov.b64 %td0, {%r4, %r5};", "mov.b64 %td1, {%r6, %r7};", "mov.b128 %tq0, {%td0, %td1};",
      "clusterlaunchcontrol.query_cancel.get_first_ctaid::x.b32.b128 %r1, %tq0;"]),
    ("LDTM.16dp64bit.x4 R8, tmem[UR4]", "sm_100a", ["tcgen05.ld.sync.aligned.16x64b.x4.b32 {%r8, %r9, %r10, %r11}, [%ur4];"]),
    ("STTM.16dp64bit.x2 tmem[UR4], R8", "sm_100a", ["tcgen05.st.sync.aligned.16x64b.x2.b32 [%ur4], {%r8, %r9};"]),
    ("UTMALDG.2D.MULTICAST [UR8], tmap[a], UR12", "sm_90a",
     ["cvt.u16.u32 %th0, %ur12;",
      "@%pe cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
      "[%ur8], [%tm0, {%ur10, %ur11}], [%ur9], %th0;"]),
    ("UTCBAR.MULTICAST [UR12], URZ, UR13", "sm_100a",
     ["cvt.u16.u32 %th0, %ur13;",
      "@%pe tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%ur12], %th0;"]),
    ("SYNCS.PHASECHK.TRANS64 P0, [UR4], RZ", "sm_90a", ["mbarrier.test_wait.parity.shared::cta.b64 %p0, [%ur4], 0;"]),
    ("SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4+0x8], RZ", "sm_90a", ["mbarrier.try_wait.parity.shared::cta.b64 %p0, [%ur4+8], 0;"]),
    ("UTCHMMA gdesc[UR8], gdesc[UR10], tmem[UR4], tmem[UR6], idesc[UR7], !UP1", "sm_100a",
     ["mov.b64 %td0, {%ur8, %ur9};", "mov.b64 %td1, {%ur10, %ur11};", "not.pred %tp0, %up1;",
      "@%pe tcgen05.mma.cta_group::1.kind::f16 [%ur4], %td0, %td1, %ur7, %tp0;"]),
    ("UTCHMMA gdesc[UR8], gdesc[UR10], tmem[UR4], tmem[UR6], idesc[UR7], !UPT", "sm_100a",
     ["mov.b64 %td0, {%ur8, %ur9};", "mov.b64 %td1, {%ur10, %ur11};",
      "@%pe tcgen05.mma.cta_group::1.kind::f16 [%ur4], %td0, %td1, %ur7, %pf;"]),
    ("UTCATOMSWS.AND UR5, 0x80", "sm_100a", ["tcgen05.dealloc.cta_group::1.sync.aligned.b32 %ur5, 128;"]),
    ("ATOMG.E.EXCH.STRONG.GPU PT, R1, desc[UR4][R6.64+0x10], R3", "sm_90a",
     ["mov.b64 %td0, {%r6, %r7};", "atom.relaxed.gpu.global.exch.b32 %r1, [%td0+16], %r3;"]),
    ("ATOMG.E.ADD.STRONG.GPU PT, R1, desc[UR4][R6.64], R3", "sm_90a",
     ["mov.b64 %td0, {%r6, %r7};", "atom.relaxed.gpu.global.add.u32 %r1, [%td0], %r3;"]),
    ("S2R R1, SR_LANEID", "sm_90a", ["mov.u32 %r1, %laneid;"]),
    # an arrive that keeps its state token: the 64-bit state's low word lands in the register
    ("SYNCS.ARRIVE.TRANS64 R2, [UR4], R5", "sm_90a",
     ["mbarrier.arrive.expect_tx.shared::cta.b64 %td0, [%ur4], %r5;", "cvt.u32.u64 %r2, %td0;"]),
    ("SYNCS.ARRIVE.TRANS64.A1T0 R2, [UR4], RZ", "sm_90a", ["mbarrier.arrive.shared::cta.b64 %td0, [%ur4];", "cvt.u32.u64 %r2, %td0;"]),
    ("FADD.RP R1, R2, R3", "sm_90a", ["add.rp.f32 %r1, %r2, %r3;"]),
    ("FFMA.RZ R1, R2, R3, R4", "sm_90a", ["fma.rz.f32 %r1, %r2, %r3, %r4;"]),
    ("FMUL.FTZ R1, R2, R3", "sm_90a", ["mul.rn.ftz.f32 %r1, %r2, %r3;"]),
    ("FMNMX.FTZ R1, R2, R3, PT", "sm_90a", ["min.ftz.f32 %r1, %r2, %r3;"]),
    ("I2FP.F32.S32.RP R1, R2", "sm_90a", ["cvt.rp.f32.s32 %r1, %r2;"]),
    ("I2FP.F32.S32.RM R1, R2", "sm_90a", ["cvt.rm.f32.s32 %r1, %r2;"]),
    ("I2FP.F32.U32.RZ R1, R2", "sm_90a", ["cvt.rz.f32.u32 %r1, %r2;"]),
]


@pytest.mark.parametrize("sass,sm,want", MORE, ids=[m[0] for m in MORE])
def test_more_golden_ptx(sass: str, sm: str, want: list[str]) -> None:
    assert ptx_lines(sass, sm=sm)[: len(want)] == want


def _declared(ptx: str) -> tuple[set[str], list[tuple[str, int]]]:
    names: set[str] = set()
    ranges: list[tuple[str, int]] = []
    for decl in re.findall(r"^\s*\.reg\s+\.\w+\s+([^;]+);", ptx, flags=re.M):
        for item in decl.split(","):
            item = item.strip()
            m = re.fullmatch(r"%(\w+)<(\d+)>", item)
            if m:
                ranges.append((m.group(1), int(m.group(2))))
            else:
                names.add(item)
    return names, ranges


CORPUS = [(g[0], "sm_90a") for g in GOLDEN] + [(r[0], r[1]) for r in ROLES] + [(m[0], m[1]) for m in MORE]


@pytest.mark.parametrize("sass,sm", CORPUS, ids=[c[0].splitlines()[0] for c in CORPUS])
def test_every_register_the_ptx_uses_is_declared(sass: str, sm: str) -> None:
    ptx = lift(parse(text(sass, sm)), sm)
    names, ranges = _declared(ptx)
    body = ptx.split("// --- the program ---\n")[1]
    body = "\n".join(ln for ln in body.splitlines() if not ln.strip().startswith("//"))
    for reg in set(re.findall(r"%\w+", body)):
        if reg in names or reg in ("%laneid", "%clock", "%cluster_ctarank", "%tid", "%ctaid"):
            continue
        m = re.fullmatch(r"%([a-z_]+?)(\d+)", reg)
        assert m and any(m.group(1) == pre and int(m.group(2)) < n for pre, n in ranges), (reg, sass, ptx)


@pytest.mark.parametrize("sass,sm,message", [
    ("UBLKCP.S.G [UR4], [UR6+0x10], UR8", "sm_90a", "UBLKCP.S.G: a bulk copy's global address is [pair], not [UR6+0x10]"),
    ("FADD R1, ~R2, R3", "sm_90a", "FADD: a float operand cannot be inverted: ~R2"),
    ("UMOV UR4, `(nosuch)", "sm_90a", "UMOV: unknown symbol `(nosuch)"),
    ("LDTM.16dp256bit.x4 R8, tmem[UR4]", "sm_100a",
     "LDTM.16dp256bit.x4: LDTM/STTM .16dp256bit needs more registers than the text's x4 names; not lifted"),
    ("LDTM.16dp128bit.x4 R8, tmem[UR4]", "sm_100a",
     "LDTM.16dp128bit.x4: LDTM/STTM .16dp128bit needs more registers than the text's x4 names; not lifted"),
])
def test_refusals_name_the_instruction_and_why(sass: str, sm: str, message: str) -> None:
    with pytest.raises(WarpyError) as e:
        lift(parse(text(sass, sm)), sm)
    assert str(e.value) == message
