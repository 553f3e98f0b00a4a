"""Tests that kill mutmut's survivors in warpy/lift/families (docs/testing.md lists the run): the
lifted PTX declares every register it uses (a temporary of the wrong kind is an undeclared name
ptxas would refuse; this finds it without running ptxas), golden PTX for the forms no other golden
reaches (cluster launch control's 128-bit responses, tensor-memory 16x64b shapes, multicast masks,
a parity of RZ, a negated enable-input-d, rounding modes), and the lifter's one-line refusals."""

from __future__ import annotations

import re

import numpy as np

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
    # each uniform guard around a single-issue instruction gets its own label
    ("@!UP0 UTMACMDFLUSH\n@!UP1 UTMACMDFLUSH", "sm_90a",
     ["@%up0 bra $Wskip_1;", "@%pe cp.async.bulk.commit_group;", "$Wskip_1:",
      "@%up1 bra $Wskip_2;", "@%pe cp.async.bulk.commit_group;", "$Wskip_2:"]),
    # the uniform true predicate as a destination, a combining operand and a selector
    ("UISETP.GE.U32.AND UP0, UPT, UR4, UR5, UPT", "sm_90a", ["setp.ge.u32 %up0, %ur4, %ur5;"]),
    ("UISETP.GE.U32.AND UP0, UP1, UR4, UR5, !UPT", "sm_90a", ["setp.ge.and.u32 %up0|%up1, %ur4, %ur5, %pf;"]),
    ("USEL UR1, UR2, UR3, !UPT", "sm_90a", ["mov.b32 %ur1, %ur3;"]),
    ("USEL UR1, UR2, UR3, UPT", "sm_90a", ["mov.b32 %ur1, %ur2;"]),
    ("ISETP.LT.AND PT, P1, R1, R2, PT", "sm_90a", ["setp.lt.s32 %tp0|%p1, %r1, %r2;"]),
    # zero registers in a shared address drop out
    ("LDS R1, [RZ+UR4]", "sm_90a", ["ld.shared.b32 %r1, [%ur4];"]),
    ("LDS R1, [R2+URZ+0x4]", "sm_90a", ["ld.shared.b32 %r1, [%r2+4];"]),
    # a global atomic's plain [pair+offset] address
    ("ATOMG.E.ADD.STRONG.GPU PT, R1, [R6], R3", "sm_90a",
     ["mov.b64 %td0, {%r6, %r7};", "atom.relaxed.gpu.global.add.u32 %r1, [%td0], %r3;"]),
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
    # a deallocation whose column count a register holds
    ("UTCATOMSWS.AND UR5, UR6", "sm_100a", ["tcgen05.dealloc.cta_group::1.sync.aligned.b32 %ur5, %ur6;"]),
    # the uniform true predicate as the first destination: a temporary, not a register named UPT
    ("UISETP.GE.U32.AND UPT, UP1, UR4, UR5, UPT", "sm_90a", ["setp.ge.u32 %tp0|%up1, %ur4, %ur5;"]),
    # a vector store of RZ stores a vector of zeros (ptxas refuses a scalar 0 there:
    # test_wide_stores_of_rz_are_vectors_ptxas_takes)
    ("STS.64 [R2], RZ", "sm_90a", ["st.shared.v2.b32 [%r2], {0, 0};"]),
    ("STS.128 [R2], RZ", "sm_90a", ["st.shared.v4.b32 [%r2], {0, 0, 0, 0};"]),
]


# ids on one line: mutmut passes a test's id back to pytest, which cannot select one holding a newline
@pytest.mark.parametrize("sass,sm,want", MORE, ids=[m[0].replace("\n", "; ") for m in MORE])
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


# operands the parser reads but the lifter cannot give a meaning to: each refused in one line rather
# than lifted without the part it drops (a uniform register in an atomic's address, an offset in a
# TMA tuple, an address with no register, a negated destination)
@pytest.mark.parametrize("sass,message", [
    ("ATOMG.E.ADD.STRONG.GPU PT, R1, [R6+UR4], R3",
     "ATOMG.E.ADD.STRONG.GPU: a global atomic's address [R6+UR4] is not a register pair + offset"),
    ("ATOMG.E.ADD.STRONG.GPU PT, R1, [0x0], R3",
     "ATOMG.E.ADD.STRONG.GPU: a global atomic's address [0x0] is not a register pair + offset"),
    ("UTMALDG.2D [UR8+0x10], tmap[a]", "UTMALDG.2D: the TMA argument tuple must be [vector], not [UR8+0x10]"),
    ("UTMALDG.2D [0x0], tmap[a]", "UTMALDG.2D: the TMA argument tuple must be [vector], not [0x0]"),
    ("UBLKCP.S.G [UR4], [0x0], UR8", "UBLKCP.S.G: a bulk copy's global address is [pair], not [0x0]"),
    ("FMNMX R1, R2, R3, P0", "FMNMX: FMNMX chooses min (PT) or max (!PT) when it is lifted, not by P0"),
    ("ISETP.LT.AND !P0, PT, R1, R2, PT", "ISETP.LT.AND: operand !P0 is not a predicate destination"),
    ("S2R R1, SR_NOSUCH", "S2R: special register SR_NOSUCH has no PTX equivalent known to the lifter"),
])
def test_operands_without_a_meaning_are_refused(sass: str, message: str) -> None:
    with pytest.raises(WarpyError) as e:
        lift(parse(text(sass)), "sm_90a")
    assert str(e.value) == message


def test_a_64_bit_result_into_rz_is_dropped() -> None:
    """IMAD.WIDE into RZ computes and writes nothing back (no move into the zero register)."""
    assert [ln for ln in ptx_lines("IMAD.WIDE RZ, R2, R3, R4") if ln != "exit;"] == [
        "mul.wide.s32 %td0, %r2, %r3;", "mov.b64 %td1, {%r4, %r5};", "add.u64 %td0, %td0, %td1;"]


def test_wide_stores_of_rz_are_vectors_ptxas_takes() -> None:
    """A 64- and 128-bit store of RZ lift to a vector of zeros, which ptxas assembles (a scalar 0 in
    a vector store is refused: 'Argument vector size mismatch')."""
    from warpy.lift.ptxas import assemble

    body = "S2R R2, SR_TID.X\nSTS.64 [R2], RZ\nSTS.128 [R2], RZ\nLDC.64 R4, c[0x0][out]\nSTG.E.64 desc[UR4][R4.64], RZ"
    ptx = lift(parse(text(body)), "sm_90a")
    assert ptx.count("{0, 0}") == 2 and ptx.count("{0, 0, 0, 0}") == 1
    assemble(ptx, "sm_90a")


HEADER_PARAMS = """\
.kernel g
.sm sm_90a
.threads 128
.dynsmem 1024
.grid 1 1 1
.cluster 1 1 1
.mbarriers 1
.param maps u64
.tmap a dtype=bf16 dims=64,64 strides=128 box=64,64 swizzle=128
.tmap b table=maps slot=3 dtype=bf16 dims=64,16 strides=128 box=64,16
.param x u16
.param y u64
.param z u32
"""


def _body(lines: str) -> list[str]:
    ptx = lift(parse(HEADER_PARAMS + "".join(f"  {ln}\n" for ln in lines.splitlines()) + "  EXIT\n"), "sm_90a")
    body = ptx.split("// --- the program ---\n")[1]
    return [ln.strip() for ln in body.splitlines() if ln.strip() and not ln.strip().startswith(("//", "}", "exit"))]


@pytest.mark.parametrize("sass,want", [
    # the parameters from constant-bank offset 0x210 (sm_90a) as the CUDA ABI places them: the maps
    # that are parameters first (docs/sass.md), a at 0 (128 bytes, 64-aligned), then the .params in
    # text order, each aligned to its size: maps u64 at 128, x u16 at 136, y u64 at 144, z u32 at 152
    ("LDC R1, c[0x0][0x290]", ["ld.param.b32 %r1, [maps];"]),
    ("LDC R1, c[0x0][0x294]", ["ld.param.b32 %r1, [maps+4];"]),
    ("LDC R1, c[0x0][0x298]", ["ld.param.u16 %r1, [x];"]),
    ("LDC R1, c[0x0][0x2a0]", ["ld.param.b32 %r1, [y];"]),
    ("LDC R1, c[0x0][0x2a4]", ["ld.param.b32 %r1, [y+4];"]),
    ("LDC.64 R2, c[0x0][0x2a0]", ["ld.param.u64 %td0, [y];", "mov.b64 {%r2, %r3}, %td0;"]),
    ("LDC R1, c[0x0][0x2a8]", ["ld.param.b32 %r1, [z];"]),
    # a map in a table: slot 3's descriptor 3 x 128 bytes into the table the u64 parameter holds
    ("UTMALDG.2D [UR8], tmap[b]", ["ld.param.u64 %td0, [maps];", "add.s64 %td0, %td0, 384;",
                                   "@%pe cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                                   "[%ur8], [%td0, {%ur10, %ur11}], [%ur9];"]),
    ("UTMACCTL.PF tmap[b]", ["ld.param.u64 %td0, [maps];", "add.s64 %td0, %td0, 384;", "@%pe prefetch.tensormap [%td0];"]),
    # a map whose address a uniform pair holds
    ("UTMALDG.2D [UR8], tmap[UR14]", ["mov.b64 %td0, {%ur14, %ur15};",
                                      "@%pe cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                                      "[%ur8], [%td0, {%ur10, %ur11}], [%ur9];"]),
    ("UTMASTG.2D [UR8], tmap[a]", ["@%pe cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%tm0, {%ur9, %ur10}], [%ur8];"]),
    # shared addresses: a register plus a uniform register plus an offset; a store of zero
    ("LDS R1, [R2+UR4+0x10]", ["add.u32 %t0, %r2, %ur4;", "ld.shared.b32 %r1, [%t0+16];"]),
    ("STS [UR4+0x8], R1", ["st.shared.b32 [%ur4+8], %r1;"]),
    ("STS [R2], RZ", ["st.shared.b32 [%r2], 0;"]),
])
def test_parameters_maps_and_shared_addresses(sass: str, want: list[str]) -> None:
    assert _body(sass) == want


@pytest.mark.parametrize("sass,message", [
    ("LDC R1, c[0x0][0x250]", "LDC: c[0x0][592] reads tensor map a; use tmap[a]"),
    ("LDC R1, c[0x0][0x29c]", "LDC: constant-bank word 0x29c is not a kernel parameter of this kernel"),
    ("LDC R1, c[0x0][0x2ac]", "LDC: constant-bank word 0x2ac is not a kernel parameter of this kernel"),
    ("LDC.64 R2, c[0x0][0x2a4]", "LDC.64: a 64-bit read of parameter y (u64) at byte 4"),
    ("LDC R1, c[0x0][nosuch]", "LDC: c[0x0][nosuch] names no kernel parameter (a, maps, x, y, z)"),
])
def test_parameter_refusals(sass: str, message: str) -> None:
    with pytest.raises(WarpyError) as e:
        _body(sass)
    assert str(e.value) == message


def _lift_with(header_extra: str, body: str, params: bool = True) -> list[str]:
    head = HEADER_PARAMS if params else HEADER_PARAMS.split(".param maps")[0]
    ptx = lift(parse(head + header_extra + "".join(f"  {ln}\n" for ln in body.splitlines()) + "  EXIT\n"), "sm_90a")
    body_ptx = ptx.split("// --- the program ---\n")[1]
    return [ln.strip() for ln in body_ptx.splitlines() if ln.strip() and not ln.strip().startswith(("//", "}", "exit"))]


def test_two_tensor_map_parameters_are_64_byte_aligned() -> None:
    """Maps that are parameters take 128 bytes each at 64-byte alignment: a at 0, c at 128, then the
    .params (maps u64 at 256, x u16 at 264, y u64 at 272): c[0x0][0x310] is `maps`, 0x290 is map c."""
    extra = ".tmap c dtype=bf16 dims=64,64 strides=128 box=64,64\n"
    assert _lift_with(extra, "LDC R1, c[0x0][0x310]") == ["ld.param.b32 %r1, [maps];"]
    assert _lift_with(extra, "LDC R1, c[0x0][0x320]") == ["ld.param.b32 %r1, [y];"]
    with pytest.raises(WarpyError, match=r"^LDC: c\[0x0\]\[656\] reads tensor map c; use tmap\[c\]$"):
        _lift_with(extra, "LDC R1, c[0x0][0x290]")


def test_a_named_parameter_of_a_kernel_without_parameters() -> None:
    with pytest.raises(WarpyError) as e:
        _lift_with("", "LDC R1, c[0x0][nosuch]", params=False)
    assert str(e.value) == "LDC: c[0x0][nosuch] names no kernel parameter (none)"


def test_named_registers_in_shared_addresses() -> None:
    """A named register of one (`.reg R x`) is an address; a tuple of two or four is refused."""
    assert _lift_with(".reg R x\n", "LDS R1, [x+0x4]") == ["ld.shared.b32 %r1, [%rn0+4];"]
    for w in (2, 4):
        with pytest.raises(WarpyError) as e:
            _lift_with(f".reg R[{w}] x\n", "LDS R1, [x]")
        assert str(e.value) == "LDS: address [x] is a register tuple, not an address"


# the TMA family's rules (brought into the mutation score by .ci/mutation.py's undecorating): the
# interpreter has no meaning for a copy engine's instruction, so each form is pinned as the PTX ISA
# spells it (cp.async.bulk.tensor's .multicast::cluster and .cta_group::2 qualifiers, cp.reduce's
# operation, the L2 prefetch, the tensor-map fence and prefetch, the wait without .read for WRITES);
# `@%pe` is the elected lane that issues the copy engine's instructions
TMA_PTX = [
    ("UTMALDG.2D.MULTICAST.2CTA [UR8], tmap[a], UR12", "sm_100a",
     ["cvt.u16.u32 %th0, %ur12;",
      "@%pe cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster.cta_group::2 [%ur8], [%tm0, {%ur10, %ur11}], [%ur9], %th0;"]),
    ("UTMALDG.2D.2CTA [UR8], tmap[a]", "sm_100a",
     ["@%pe cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.cta_group::2 "
      "[%ur8], [%tm0, {%ur10, %ur11}], [%ur9];"]),
    *[(f"UTMAREDG.2D.{op} [UR8], tmap[a]", "sm_90a",
       [f"@%pe cp.reduce.async.bulk.tensor.2d.global.shared::cta.{op.lower()}.tile.bulk_group "
        "[%tm0, {%ur9, %ur10}], [%ur8];"])
      for op in ("ADD", "MIN", "MAX", "INC", "DEC", "AND", "OR", "XOR")],
    ("UTMAPF.L2.2D [UR8], tmap[a]", "sm_90a",
     ["@%pe cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%tm0, {%ur8, %ur9}];"]),
    ("UTMAPF.L2.3D [UR8], tmap[a]", "sm_90a",
     ["@%pe cp.async.bulk.prefetch.tensor.3d.L2.global.tile [%tm0, {%ur8, %ur9, %ur10}];"]),
    # the fence runs on every lane (no @%pe): whichever lane issues the copies has fenced
    ("UTMACCTL.IV tmap[a]", "sm_90a", ["fence.proxy.tensormap::generic.acquire.sys [%tm0], 128;"]),
    ("UTMACCTL.PF tmap[a]", "sm_90a", ["@%pe prefetch.tensormap [%tm0];"]),
    # a bulk copy to a CTA of the cluster: the pair (destination, barrier), the source a shared::cta address
    ("UBLKCP.S.S [UR6], [UR5+0x10], UR8", "sm_90a",
     ["@%pe cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%ur6], [%ur5+16], %ur8, [%ur7];"]),
    ("UBLKCP.S.S [UR6], [R2+UR5], UR8", "sm_100a",
     ["add.u32 %t0, %r2, %ur5;",
      "@%pe cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%ur6], [%t0], %ur8, [%ur7];"]),
    ("DEPBAR.LE.WRITES SB0, 0x1", "sm_90a",
     ["@%pe cp.async.bulk.wait_group 1;", "activemask.b32 %t0;", "bar.warp.sync %t0;"]),
    ("DEPBAR.LE SB0, 0x2", "sm_90a",
     ["@%pe cp.async.bulk.wait_group.read 2;", "activemask.b32 %t0;", "bar.warp.sync %t0;"]),
]


@pytest.mark.parametrize("sass,sm,want", TMA_PTX, ids=[t[0] for t in TMA_PTX])
def test_tma_rules_word_for_word(sass: str, sm: str, want: list[str]) -> None:
    assert ptx_lines(sass, sm=sm)[: len(want) + 1] == want + ["exit;"]


@pytest.mark.parametrize("sass,message", [
    ("UBLKCP.G.S [0x0], [UR4], UR8", "UBLKCP.G.S: a bulk copy's global address is [pair], not [0x0]"),
    ("UBLKCP.S.S [0x0], [UR4], UR8", "UBLKCP.S.S: the TMA argument tuple must be [vector], not [0x0]"),
    ("UBLKCP.G.G [UR4], [UR6], UR8", "UBLKCP.G.G: UBLKCP copies .S.G (global to shared), .S.S (shared to a CTA of "
                                     "the cluster) or .G.S (shared to global)"),
])
def test_bulk_copy_refusals(sass: str, message: str) -> None:
    with pytest.raises(WarpyError) as e:
        lift(parse(text(sass)), "sm_90a")
    assert str(e.value) == message


# the ALU rules' forms the random semantic comparison (test_lift_semantics) does not draw: carry-outs
# of PT, a sum of nothing, multiplies by 0, 1 and RZ, 64-bit immediates added after a wide multiply,
# negative immediates of signed multiplies and compares (PTX writes a signed type's immediate
# signed), a LOP3 whose only result is its predicate, PLOP3 on constant inputs. Each lifted program
# must compute what the interpreter computes from the same registers; the PTX is pinned as well
# (the IMAD.MOV form and the signed immediates compute the same either way)
ALU_FORMS = [
    ("IADD3 R1, PT, PT, R2, R3, RZ", ["add.u32 %r1, %r2, %r3;"]),
    ("IADD3 R1, RZ, RZ, RZ", ["mov.b32 %r1, 0;"]),
    ("IADD3 R1, R2, 0x1, RZ", ["add.u32 %r1, %r2, 1;"]),
    ("IMAD.WIDE R8, R2, R3, 0x1",
     ["mul.wide.s32 %td0, %r2, %r3;", "add.u64 %td0, %td0, 1;", "mov.b64 {%r8, %r9}, %td0;"]),
    # a negative immediate addend: the integer written, as 64 bits (the interpreter added it as 32 bits once)
    ("IMAD.WIDE R8, R2, R3, -0x1",
     ["mul.wide.s32 %td0, %r2, %r3;", "add.u64 %td0, %td0, 18446744073709551615;", "mov.b64 {%r8, %r9}, %td0;"]),
    ("IMAD.WIDE.U32 R8, R2, R3, -0x5",
     ["mul.wide.u32 %td0, %r2, %r3;", "add.u64 %td0, %td0, 18446744073709551611;", "mov.b64 {%r8, %r9}, %td0;"]),
    ("IMAD.WIDE.U32 R8, R2, R3, 0xFFFFFFFF",
     ["mul.wide.u32 %td0, %r2, %r3;", "add.u64 %td0, %td0, 4294967295;", "mov.b64 {%r8, %r9}, %td0;"]),
    ("IMAD.WIDE R8, R2, -0x3, RZ", ["mul.wide.s32 %td0, %r2, -3;", "mov.b64 {%r8, %r9}, %td0;"]),
    ("IMAD.WIDE.U32 R8, R2, -0x3, RZ", ["mul.wide.u32 %td0, %r2, 0xFFFFFFFD;", "mov.b64 {%r8, %r9}, %td0;"]),
    ("IMAD.HI R1, R2, -0x3, R4", ["mul.hi.s32 %t0, %r2, -3;", "add.u32 %r1, %t0, %r4;"]),
    ("IMAD.HI.U32 R1, R2, -0x3, R4", ["mul.hi.u32 %t0, %r2, 0xFFFFFFFD;", "add.u32 %r1, %t0, %r4;"]),
    ("IMAD R1, R2, RZ, R3", ["mov.b32 %r1, %r3;"]),
    ("IMAD R1, RZ, R2, R3", ["mov.b32 %r1, %r3;"]),
    ("IMAD R1, R2, 0x0, R3", ["mov.b32 %r1, %r3;"]),
    ("IMAD R1, R2, 0x1, R3", ["mad.lo.u32 %r1, %r2, 1, %r3;"]),
    ("LOP3.LUT P0, RZ, R2, R3, R4, 0x80, !PT", ["lop3.b32 %t0, %r2, %r3, %r4, 0x80;", "setp.ne.u32 %p0, %t0, 0;"]),
    ("LOP3.LUT P0, R1, R2, R3, R4, 0x80, !PT", ["lop3.b32 %r1, %r2, %r3, %r4, 0x80;", "setp.ne.u32 %p0, %r1, 0;"]),
    ("ISETP.LT.AND P0, PT, R2, -0x3, PT", ["setp.lt.s32 %p0, %r2, -3;"]),
    ("ISETP.LT.AND P0, PT, R2, -0x3, P1", ["setp.lt.and.s32 %p0, %r2, -3, %p1;"]),
    ("ISETP.GE.U32.AND P0, PT, R2, -0x3, PT", ["setp.ge.u32 %p0, %r2, 0xFFFFFFFD;"]),
    ("ISETP.LT.AND P0, PT, ~RZ, R2, PT", ["setp.lt.s32 %p0, -1, %r2;"]),
    ("ISETP.LT.AND P0, PT, ~RZ, R2, P1", ["setp.lt.and.s32 %p0, -1, %r2, %p1;"]),
    ("IMAD.HI R1, ~RZ, R3, R4", ["mul.hi.s32 %t0, -1, %r3;", "add.u32 %r1, %t0, %r4;"]),
    ("IMAD.WIDE R8, ~RZ, R3, RZ", ["mul.wide.s32 %td0, -1, %r3;", "mov.b64 {%r8, %r9}, %td0;"]),
    ("VIMNMX R1, R2, -0x3, PT", ["min.s32 %r1, %r2, -3;"]),
    ("VIMNMX R1, R2, -0x3, !PT", ["max.s32 %r1, %r2, -3;"]),
    ("VIMNMX.U32 R1, R2, -0x3, PT", ["min.u32 %r1, %r2, 0xFFFFFFFD;"]),
    ("VIMNMX.U32 R1, R2, R3, !PT", ["max.u32 %r1, %r2, %r3;"]),
    ("VIMNMX R1, PT, PT, R2, R3, !PT", ["max.s32 %r1, %r2, %r3;"]),
    ("VIMNMX R1, ~RZ, R3, PT", ["min.s32 %r1, -1, %r3;"]),
    ("PLOP3.LUT P0, PT, P1, PT, !PT, 0x80, 0x0",
     ["selp.b32 %t0, 0xFFFFFFFF, 0, %p1;", "lop3.b32 %t1, %t0, 0xFFFFFFFF, 0, 0x80;", "setp.ne.u32 %p0, %t1, 0;"]),
    ("PLOP3.LUT P0, PT, P1, !PT, PT, 0xfe, 0x0",
     ["selp.b32 %t0, 0xFFFFFFFF, 0, %p1;", "lop3.b32 %t1, %t0, 0, 0xFFFFFFFF, 0xfe;", "setp.ne.u32 %p0, %t1, 0;"]),
]


@pytest.mark.parametrize("sass,want", ALU_FORMS, ids=[f[0] for f in ALU_FORMS])
def test_alu_forms_compute_what_the_interpreter_computes(sass: str, want: list[str]) -> None:
    import random

    from ptx_eval import run_ptx
    from warpy.isa import interp

    assert ptx_lines(sass)[: len(want) + 1] == want + ["exit;"]
    names = [f"R{i}" for i in range(10)] + ["P0", "P1"]
    kernel = parse(text(sass))
    body = lift(kernel, "sm_90a").split("// --- the program ---\n")[1].splitlines()
    rnd = random.Random(sass)
    edge = [0, 1, 2, 3, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFD, 0xFFFFFFFF]
    for k in range(40):
        init = {n: (rnd.choice(edge) if k % 2 else rnd.getrandbits(32)) for n in names[:10]}
        init.update({"P0": rnd.getrandbits(1), "P1": k >> 1 & 1})
        m = interp.Machine()
        m.v = dict(init)
        interp.run(kernel, m)
        got = run_ptx(body, {"%" + n.lower(): x for n, x in init.items()})
        for n in names:
            assert got.get("%" + n.lower(), 0) == m.v.get(n, 0), (n, init, sass, body)


@pytest.mark.parametrize("sass,message", [
    ("IADD3 R1, P0, PT, R2, R3, RZ", "IADD3: the carry-out P0 is not lifted (only PT/UPT)"),
    ("IADD3 R1, PT, P1, R2, R3, RZ", "IADD3: the carry-out P1 is not lifted (only PT/UPT)"),
    ("LOP3.LUT R1, R2, R3, R4, 0xfe, P0", "LOP3.LUT: LOP3's predicate input must be !PT, not P0"),
    ("PLOP3.LUT P0, P1, PT, PT, PT, 0x80, 0x0", "PLOP3.LUT: PLOP3's second result is not lifted (only PT)"),
    ("VIMNMX R1, P0, PT, R2, R3, !PT", "VIMNMX: VIMNMX's predicate P0 is not lifted (only PT)"),
    ("VIMNMX R1, PT, P0, R2, R3, !PT", "VIMNMX: VIMNMX's predicate P0 is not lifted (only PT)"),
    ("VIMNMX R1, R2, R3, P0", "VIMNMX: VIMNMX chooses min (PT) or max (!PT) when it is lifted, not by P0"),
    ("HMNMX2 R1, R2, R3, P0", "HMNMX2: HMNMX2 chooses min (PT) or max (!PT) when it is lifted, not by P0"),
    ("F2F.F32.F32 R1, R2", "F2F.F32.F32: F2F.F32.F32 converts nothing"),
    ("LDC R1, c[0x1][0x10]", "LDC: constant bank 1 is not lifted (only bank 0: kernel parameters)"),
])
def test_alu_refusals_word_for_word(sass: str, message: str) -> None:
    with pytest.raises(WarpyError) as e:
        lift(parse(text(sass)), "sm_90a")
    assert str(e.value) == message


# warp-wide rules (one lane's evaluator cannot run them): the PTX ISA's spelling, pinned. `%t0` is
# the active mask the lifter reads first; a ballot's q of PT writes no predicate
WARP_PTX = [
    ("VOTEU.ANY UP0, P1", ["activemask.b32 %t0;", "vote.sync.any.pred %up0, %p1, %t0;"]),
    ("VOTEU.ALL UP0, !P1", ["activemask.b32 %t0;", "vote.sync.all.pred %up0, !%p1, %t0;"]),
    ("VOTEU.ANY UR4, P1", ["activemask.b32 %t0;", "vote.sync.ballot.b32 %ur4, %p1, %t0;"]),
    ("VOTEU.ALL UR4, UP1, P2",
     ["activemask.b32 %t0;", "vote.sync.ballot.b32 %ur4, %p2, %t0;", "vote.sync.all.pred %up1, %p2, %t0;"]),
    ("VOTE.ANY P0, P1", ["activemask.b32 %t0;", "vote.sync.any.pred %p0, %p1, %t0;"]),
    ("VOTE.ALL P0, !P1", ["activemask.b32 %t0;", "vote.sync.all.pred %p0, !%p1, %t0;"]),
    ("VOTE.ANY R4, PT, P1", ["activemask.b32 %t0;", "vote.sync.ballot.b32 %r4, %p1, %t0;"]),
    ("VOTE.ALL R4, P3, !P1",
     ["activemask.b32 %t0;", "vote.sync.ballot.b32 %r4, !%p1, %t0;", "vote.sync.all.pred %p3, !%p1, %t0;"]),
    ("REDUX.SUM UR4, R2", ["activemask.b32 %t0;", "redux.sync.add.u32 %ur4, %r2, %t0;"]),
    ("REDUX.SUM.S32 UR4, R2", ["activemask.b32 %t0;", "redux.sync.add.s32 %ur4, %r2, %t0;"]),
    ("REDUX.MIN UR4, R2", ["activemask.b32 %t0;", "redux.sync.min.u32 %ur4, %r2, %t0;"]),
    ("REDUX.MAX UR4, R2", ["activemask.b32 %t0;", "redux.sync.max.u32 %ur4, %r2, %t0;"]),
    ("REDUX.MIN.S32 UR4, R2", ["activemask.b32 %t0;", "redux.sync.min.s32 %ur4, %r2, %t0;"]),
    ("REDUX UR4, R2", ["activemask.b32 %t0;", "redux.sync.and.b32 %ur4, %r2, %t0;"]),
    ("REDUX.OR UR4, R2", ["activemask.b32 %t0;", "redux.sync.or.b32 %ur4, %r2, %t0;"]),
    ("REDUX.XOR UR4, R2", ["activemask.b32 %t0;", "redux.sync.xor.b32 %ur4, %r2, %t0;"]),
    # the global memory descriptor (sm_90a's c[0x0][0x208]): PTX needs none, the pair reads 0
    ("LDC.64 R4, c[0x0][0x208]", ["mov.b32 %r4, 0;", "mov.b32 %r5, 0;"]),
]


@pytest.mark.parametrize("sass,want", WARP_PTX, ids=[w[0] for w in WARP_PTX])
def test_warp_rules_word_for_word(sass: str, want: list[str]) -> None:
    assert ptx_lines(sass)[: len(want) + 1] == want + ["exit;"]


def test_parameters_of_every_type_are_read_at_their_width() -> None:
    extra = ".param s s32\n.param f f32\n.param w s64\n"
    assert _lift_with(extra, "LDC R1, c[0x0][s]") == ["ld.param.b32 %r1, [s];"]
    assert _lift_with(extra, "LDC R1, c[0x0][f]") == ["ld.param.b32 %r1, [f];"]
    assert _lift_with(extra, "LDC R1, c[0x0][w]") == ["ld.param.b32 %r1, [w];"]  # the low word
    assert _lift_with(extra, "LDC R1, c[0x0][x]") == ["ld.param.u16 %r1, [x];"]
    assert _lift_with(extra, "LDC.64 R2, c[0x0][w]") == ["ld.param.u64 %td0, [w];", "mov.b64 {%r2, %r3}, %td0;"]
    assert _lift_with(extra, "LDC.64 R2, c[0x0][y]") == ["ld.param.u64 %td0, [y];", "mov.b64 {%r2, %r3}, %td0;"]
    with pytest.raises(WarpyError) as e:
        _lift_with(extra, "LDC.64 R2, c[0x0][s]")
    assert str(e.value) == "LDC.64: a 64-bit read of parameter s (s32) at byte 0"


# the float rules (the evaluator has no float): the PTX ISA's spelling, pinned. A negated fp32
# operand flips bit 31 (`xor 0x80000000`), a negated f16x2/bf16x2 pair both halves' sign bits
# (`xor 0x80008000`); a 16-bit result is zero-extended into its register (`cvt.u32.u16`)
FLOAT_PTX = [
    ("F2FP.F16.F32.PACK_AB R1, R2, R3", ["cvt.rn.f16x2.f32 %r1, %r2, %r3;"]),
    ("F2FP.BF16.F32.PACK_AB R1, R2, R3", ["cvt.rn.bf16x2.f32 %r1, %r2, %r3;"]),
    ("F2FP.BF16.F32.PACK_AB.RZ R1, R2, R3", ["cvt.rz.bf16x2.f32 %r1, %r2, %r3;"]),
    ("FSETP.GT.AND P0, PT, R2, R3, PT", ["setp.gt.f32 %p0, %r2, %r3;"]),
    ("FSETP.GT.FTZ.AND P0, PT, R2, R3, PT", ["setp.gt.ftz.f32 %p0, %r2, %r3;"]),
    ("FSETP.LT.AND P0, P1, R2, -R3, P2",
     ["xor.b32 %t0, %r3, 0x80000000;", "setp.lt.and.f32 %p0|%p1, %r2, %t0, %p2;"]),
    ("FSETP.GE.OR P0, PT, R2, R3, P1", ["setp.ge.or.f32 %p0, %r2, %r3, %p1;"]),
    ("FSETP.GE.OR P0, PT, -R2, R3, PT", ["xor.b32 %t0, %r2, 0x80000000;", "setp.ge.or.f32 %p0, %t0, %r3, %pt;"]),
    ("FSEL R1, -R2, R3, P0", ["xor.b32 %t0, %r2, 0x80000000;", "selp.b32 %r1, %t0, %r3, %p0;"]),
    ("FSEL R1, R2, R3, !PT", ["mov.b32 %r1, %r3;"]),
    # FSEL moves bits: -RZ is the integer 0x80000000 of selp.b32, not an fp32 literal
    ("FSEL R1, -RZ, R3, P0", ["selp.b32 %r1, 0x80000000, %r3, %p0;"]),
    ("FSEL R1, R2, -RZ, P0", ["selp.b32 %r1, %r2, 0x80000000, %p0;"]),
    ("FSEL R1, -R2, R3, PT", ["xor.b32 %t0, %r2, 0x80000000;", "mov.b32 %r1, %t0;"]),
    ("HADD2 R1, -R2, R3", ["xor.b32 %t0, %r2, 0x80008000;", "add.rn.f16x2 %r1, %t0, %r3;"]),
    ("HADD2.BF16_V2 R1, R2, -R3", ["xor.b32 %t0, %r3, 0x80008000;", "add.rn.bf16x2 %r1, %r2, %t0;"]),
    ("HMUL2 R1, -R2, R3", ["xor.b32 %t0, %r2, 0x80008000;", "mul.rn.f16x2 %r1, %t0, %r3;"]),
    ("HMUL2.BF16_V2 R1, R2, -R3", ["xor.b32 %t0, %r3, 0x80008000;", "mul.rn.bf16x2 %r1, %r2, %t0;"]),
    ("HFMA2 R1, -R2, R3, -R4",
     ["xor.b32 %t0, %r2, 0x80008000;", "xor.b32 %t1, %r4, 0x80008000;", "fma.rn.f16x2 %r1, %t0, %r3, %t1;"]),
    ("HMNMX2 R1, -R2, R3, PT", ["xor.b32 %t0, %r2, 0x80008000;", "min.f16x2 %r1, %t0, %r3;"]),
    ("HMNMX2.NAN R1, R2, -R3, !PT", ["xor.b32 %t0, %r3, 0x80008000;", "max.NaN.f16x2 %r1, %r2, %t0;"]),
    ("F2F.F16.F32 R1, R2", ["cvt.rn.f16.f32 %th0, %r2;", "cvt.u32.u16 %r1, %th0;"]),
    ("F2F.F32.F16 R1, R2", ["cvt.u16.u32 %th0, %r2;", "cvt.f32.f16 %r1, %th0;"]),
    ("I2F R1, R2", ["cvt.rn.f32.s32 %r1, %r2;"]),
    ("I2F.U32 R1, R2", ["cvt.rn.f32.u32 %r1, %r2;"]),
    ("I2F.F16 R1, R2", ["cvt.rn.f16.s32 %th0, %r2;", "cvt.u32.u16 %r1, %th0;"]),
    ("I2F.BF16.U32 R1, R2", ["cvt.rn.bf16.u32 %th0, %r2;", "cvt.u32.u16 %r1, %th0;"]),
    ("F2I.S32.NTZ R1, R2", ["cvt.rni.s32.f32 %r1, %r2;"]),
    ("F2I.U32.F16.TRUNC.NTZ R1, R2", ["cvt.u16.u32 %th0, %r2;", "cvt.rzi.u32.f16 %r1, %th0;"]),
    ("F2I.BF16.FLOOR.NTZ R1, R2", ["cvt.u16.u32 %th0, %r2;", "cvt.rmi.s32.bf16 %r1, %th0;"]),
]


@pytest.mark.parametrize("sass,want", FLOAT_PTX, ids=[f[0] for f in FLOAT_PTX])
def test_float_rules_word_for_word(sass: str, want: list[str]) -> None:
    assert ptx_lines(sass)[: len(want) + 1] == want + ["exit;"]


# fences and warpgroup MMAs, pinned as PTX: MEMBAR's semantics and scope; wgmma's accumulator count
# (n/2 fp32 or n/4 f16x2 registers), the descriptors' pairs, scale-d (0 for a c of RZ or a false
# predicate, 1, or the predicate), the transposes (only for 16-bit operands; an RS form's B only)
GMMA_PTX = [
    ("MEMBAR.SC.CTA", ["fence.sc.cta;"]),
    ("MEMBAR.ALL.GPU", ["fence.acq_rel.gpu;"]),
    ("MEMBAR.SC.SYS", ["fence.sc.sys;"]),
    ("MEMBAR.ALL.CTA", ["fence.acq_rel.cta;"]),
    ("HGMMA.64x8x16.F32.BF16 R24, gdesc[UR4].tnspA.tnspB, R24, UP1",
     ["mov.b64 %td0, {%ur4, %ur5};", "mov.b64 %td1, {%ur6, %ur7};",
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%r24, %r25, %r26, %r27}, %td0, %td1, %up1, 1, 1, 1, 1;"]),
    ("HGMMA.64x8x16.F32.BF16 R24, gdesc[UR4].tnspA, RZ, !UPT",
     ["mov.b64 %td0, {%ur4, %ur5};", "mov.b64 %td1, {%ur6, %ur7};",
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%r24, %r25, %r26, %r27}, %td0, %td1, 0, 1, 1, 1, 0;"]),
    ("HGMMA.64x8x16.F16.F16 R24, gdesc[UR4], R24, UPT",
     ["mov.b64 %td0, {%ur4, %ur5};", "mov.b64 %td1, {%ur6, %ur7};",
      "wgmma.mma_async.sync.aligned.m64n8k16.f16.f16.f16 {%r24, %r25}, %td0, %td1, 1, 1, 1, 0, 0;"]),
    ("HGMMA.64x8x16.F32.BF16 R24, gdesc[UR4], R24, !UPT",
     ["mov.b64 %td0, {%ur4, %ur5};", "mov.b64 %td1, {%ur6, %ur7};",
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%r24, %r25, %r26, %r27}, %td0, %td1, 0, 1, 1, 0, 0;"]),
    ("HGMMA.64x16x16.F32.BF16 R24, R8, gdesc[UR4].tnspB, RZ",
     ["mov.b64 %td1, {%ur6, %ur7};",
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%r24, %r25, %r26, %r27, %r28, %r29, %r30, %r31}, "
      "{%r8, %r9, %r10, %r11}, %td1, 0, 1, 1, 1;"]),
    ("HGMMA.64x8x8.F32.TF32 R24, gdesc[UR4], RZ, !UPT",
     ["mov.b64 %td0, {%ur4, %ur5};", "mov.b64 %td1, {%ur6, %ur7};",
      "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%r24, %r25, %r26, %r27}, %td0, %td1, 0, 1, 1;"]),
    ("QGMMA.64x8x32.F32.E4M3.E4M3 R24, gdesc[UR4], R24, UP1",
     ["mov.b64 %td0, {%ur4, %ur5};", "mov.b64 %td1, {%ur6, %ur7};",
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%r24, %r25, %r26, %r27}, %td0, %td1, %up1, 1, 1;"]),
    ("QGMMA.64x8x32.F16.E4M3.E4M3 R24, gdesc[UR4], R24, UPT",
     ["mov.b64 %td0, {%ur4, %ur5};", "mov.b64 %td1, {%ur6, %ur7};",
      "wgmma.mma_async.sync.aligned.m64n8k32.f16.e4m3.e4m3 {%r24, %r25}, %td0, %td1, 1, 1, 1;"]),
    ("QGMMA.64x8x32.F32.E4M3.E4M3 R24, gdesc[UR4], R24, !UPT",
     ["mov.b64 %td0, {%ur4, %ur5};", "mov.b64 %td1, {%ur6, %ur7};",
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%r24, %r25, %r26, %r27}, %td0, %td1, 0, 1, 1;"]),
    ("LDS R2, [R4]", ["ld.shared.b32 %r2, [%r4];"]),
    ("LDS.U16 R2, [R4]", ["ld.shared.u16 %r2, [%r4];"]),
    ("LDS.64 R2, [R4]", ["ld.shared.v2.b32 {%r2, %r3}, [%r4];"]),
    ("LDS.128 R4, [R8+0x10]", ["ld.shared.v4.b32 {%r4, %r5, %r6, %r7}, [%r8+16];"]),
    ("LDSM.16.M88.4 R4, [R8]", ["ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r4, %r5, %r6, %r7}, [%r8];"]),
    ("LDSM.16.M88.T.2 R4, [R8]", ["ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%r4, %r5}, [%r8];"]),
]


@pytest.mark.parametrize("sass,want", GMMA_PTX, ids=[g[0] for g in GMMA_PTX])
def test_fences_and_gmma_word_for_word(sass: str, want: list[str]) -> None:
    assert ptx_lines(sass)[: len(want) + 1] == want + ["exit;"]


@pytest.mark.parametrize("sass,message", [
    ("HGMMA.64x8x16.F32.BF16 R24, R8, gdesc[UR4].tnspA, RZ",
     "HGMMA.64x8x16.F32.BF16: HGMMA with A from registers has no .tnspA (only B is read from shared memory)"),
    ("HGMMA.64x8x16.F32.BF16 R24, gdesc[UR4], R28, UPT",
     "HGMMA.64x8x16.F32.BF16: HGMMA accumulates into its destination: c must be d (or RZ)"),
    ("HGMMA.64x8x8.F32.TF32 R24, gdesc[UR4].tnspB, RZ, !UPT",
     "HGMMA.64x8x8.F32.TF32: HGMMA transposes (.tnspA/.tnspB) only BF16 and F16 operands, not TF32"),
    ("QGMMA.64x8x32.F32.E4M3.E4M3 R24, gdesc[UR4], R28, UPT",
     "QGMMA.64x8x32.F32.E4M3.E4M3: QGMMA accumulates into its destination: c must be d (or RZ)"),
    ("QGMMA.64x8x32.F32.E4M3.E4M3 R24, gdesc[UR4].tnspA.tnspB, RZ, !UPT",
     "QGMMA.64x8x32.F32.E4M3.E4M3: QGMMA reads 8-bit operands K-major only: no tnspA.tnspB"),
])
def test_gmma_refusals_word_for_word(sass: str, message: str) -> None:
    with pytest.raises(WarpyError) as e:
        lift(parse(text(sass)), "sm_90a")
    assert str(e.value) == message


def test_cluster_launch_control_word_for_word() -> None:
    """UGETNEXTWORKID (sm_100a): the response and the barrier in their order, .BROADCAST multicast."""
    pre = "@%pe clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes"
    assert ptx_lines("UGETNEXTWORKID.BROADCAST [UR4], [UR6]", sm="sm_100a")[:2] == [
        pre + ".multicast::cluster::all.b128 [%ur4], [%ur6];", "exit;"]
    assert ptx_lines("UGETNEXTWORKID.SELFCAST [UR4], [UR6]", sm="sm_100a")[:2] == [pre + ".b128 [%ur4], [%ur6];", "exit;"]


# a negated float source of a conversion flips the source's sign bit (bit 31 of an fp32, bit 15 of a
# 16-bit value), as SASS's operand negation does for every float operand: not an integer negation
# (which turned 1.0 as a half, 0x3C00, into 0xC400, -4.0)
NEGATED_CONVERSIONS = [
    ("F2F.F32.F16 R1, -R2", 0x3C00, 0xBF800000, ["xor.b32 %t0, %r2, 0x8000;", "cvt.u16.u32 %th0, %t0;", "cvt.f32.f16 %r1, %th0;"]),
    ("F2F.F32.BF16 R1, -R2", 0x3FC0, 0xBFC00000, ["xor.b32 %t0, %r2, 0x8000;", "cvt.u16.u32 %th0, %t0;", "cvt.f32.bf16 %r1, %th0;"]),
    ("F2F.F16.F32 R1, -R2", 0x3F800000, 0xBC00, ["xor.b32 %t0, %r2, 0x80000000;", "cvt.rn.f16.f32 %th0, %t0;", "cvt.u32.u16 %r1, %th0;"]),
    ("F2I.S32.NTZ R1, -R2", 0x40400000, 0xFFFFFFFD, ["xor.b32 %t0, %r2, 0x80000000;", "cvt.rni.s32.f32 %r1, %t0;"]),
    ("F2I.F16.TRUNC.NTZ R1, -R2", 0x4200, 0xFFFFFFFD, ["xor.b32 %t0, %r2, 0x8000;", "cvt.u16.u32 %th0, %t0;", "cvt.rzi.s32.f16 %r1, %th0;"]),
]


@pytest.mark.parametrize("sass,a,want,ptx", NEGATED_CONVERSIONS, ids=[n[0] for n in NEGATED_CONVERSIONS])
def test_a_negated_conversion_source_flips_its_sign(sass: str, a: int, want: int, ptx: list[str]) -> None:
    """The lifted PTX word for word, and the interpreter's result on one value (-1.5, -1.0, -3.0)."""
    from warpy.isa import interp

    assert ptx_lines(sass)[: len(ptx) + 1] == ptx + ["exit;"]
    kernel = parse(text(sass))
    m = interp.Machine()
    m.v["R2"] = np.uint64(a)
    interp.run(kernel, m)
    assert m.get(kernel.instrs()[0].ops[0]) == want


# the memory, sync, tcgen05, wgmma, control and clc rules' forms no other test lifts (brought into
# the mutation score by .ci/mutation.py's undecorating), pinned as the PTX ISA spells them: an
# arrive whose count is RZ is a plain arrive (an expect_tx of 0 bytes adds nothing), .A1T0 arrives
# once and expects no bytes whatever its count operand holds (as the checker's SYNCS.ARRIVE does),
# .A0TR only expects bytes (a CTA's own barrier: .cta.shared::cta); a named-barrier arrive; a
# register sleep time; the global proxy fence; a load into RZ (the sink %tz, not the literal 0); the
# sub-word stores untyped (.b8/.b16: a store has no signedness); STSM's transpose; CLCQUERY's y and
# z axes; USETMAXREG.TRY_ALLOC (setmaxnreg.inc returns once the registers are granted: its
# predicate is true); an RS-form TF32 wgmma (no imm-trans-b: the transpose is for 16-bit types
# only); an FP8 wgmma whose c is RZ (scale-d 0: d = A·B whatever the predicate); an allocation
# whose column count a register holds; the fences and barriers that take no operand
OTHER_PTX = [
    ("SYNCS.ARRIVE.TRANS64 RZ, [UR4], RZ", "sm_90a", ["mbarrier.arrive.shared::cta.b64 _, [%ur4];"]),
    ("SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR4], R5", "sm_90a", ["mbarrier.arrive.shared::cta.b64 _, [%ur4];"]),
    ("SYNCS.ARRIVE.TRANS64.A0TR RZ, [UR4], R5", "sm_90a", ["mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%ur4], %r5;"]),
    ("SYNCS.ARRIVE.TRANS64.A0TR RZ, [UR4], RZ", "sm_90a", ["mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%ur4], 0;"]),
    ("SYNCS.ARRIVE.TRANS64.RED.A0TR RZ, [UR4], RZ", "sm_90a",
     ["mbarrier.expect_tx.relaxed.cluster.shared::cluster.b64 [%ur4], 0;"]),
    ("SYNCS.CCTL.IV [UR4+0x8]", "sm_90a", ["mbarrier.inval.shared::cta.b64 [%ur4+8];"]),
    ("ELECT P0, UR4, PT", "sm_90a", ["activemask.b32 %t0;", "elect.sync %ur4|%p0, %t0;"]),
    ("ELECT P0, URZ, PT", "sm_90a", ["activemask.b32 %t0;", "elect.sync _|%p0, %t0;"]),
    ("BAR.ARV 0x1, 0x40", "sm_90a", ["barrier.arrive.aligned 1, 0x40;"]),
    ("BAR.SYNC.DEFER_BLOCKING 0x1, 0x40", "sm_90a", ["barrier.sync.aligned 1, 0x40;"]),
    ("UCGABAR_WAIT", "sm_90a", ["barrier.cluster.wait.acquire.aligned;"]),
    ("NANOSLEEP R2", "sm_90a", ["nanosleep.u32 %r2;"]),
    ("FENCE.VIEW.ASYNC.G", "sm_90a", ["fence.proxy.async.global;"]),
    ("FENCE.VIEW.ASYNC.S", "sm_90a", ["fence.proxy.async.shared::cta;"]),
    ("FENCE.MBARRIER_INIT", "sm_90a", ["fence.mbarrier_init.release.cluster;"]),
    ("WARPSYNC.ALL", "sm_90a", ["bar.warp.sync 0xffffffff;"]),
    ("LDS RZ, [R4]", "sm_90a", ["ld.shared.b32 %tz, [%r4];"]),
    ("STS.U8 [R2], R3", "sm_90a", ["st.shared.b8 [%r2], %r3;"]),
    ("STS.S16 [R2], R3", "sm_90a", ["st.shared.b16 [%r2], %r3;"]),
    ("STG.E.U8 desc[UR4][R6.64], R3", "sm_90a", ["mov.b64 %td0, {%r6, %r7};", "st.global.b8 [%td0], %r3;"]),
    ("STG.E.S16.STRONG.GPU desc[UR4][R6.64], R3", "sm_90a",
     ["mov.b64 %td0, {%r6, %r7};", "st.relaxed.gpu.global.b16 [%td0], %r3;"]),
    ("STSM.16.M88.T.2 [R8], R4", "sm_90a", ["stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%r8], {%r4, %r5};"]),
    ("STSM.16.M88.4 [R8], R4", "sm_90a", ["stmatrix.sync.aligned.m8n8.x4.shared.b16 [%r8], {%r4, %r5, %r6, %r7};"]),
    *[(f"CLCQUERY.CTAID.{ax} R1, R4", "sm_100a",
       ["mov.b64 %td0, {%r4, %r5};", "mov.b64 %td1, {%r6, %r7};", "mov.b128 %tq0, {%td0, %td1};",
        f"clusterlaunchcontrol.query_cancel.get_first_ctaid::{ax.lower()}.b32.b128 %r1, %tq0;"])
      for ax in ("X", "Y", "Z")],
    ("USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xe8", "sm_90a", ["setmaxnreg.inc.sync.aligned.u32 232;", "mov.pred %up0, 1;"]),
    ("USETMAXREG.TRY_ALLOC.CTAPOOL 0xe8", "sm_90a", ["setmaxnreg.inc.sync.aligned.u32 232;"]),
    ("USETMAXREG.DEALLOC.CTAPOOL 0x28", "sm_90a", ["setmaxnreg.dec.sync.aligned.u32 40;"]),
    ("HGMMA.64x8x8.F32.TF32 R24, R8, gdesc[UR4], RZ", "sm_90a",
     ["mov.b64 %td1, {%ur6, %ur7};",
      "wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%r24, %r25, %r26, %r27}, {%r8, %r9, %r10, %r11}, %td1, 0, 1, 1;"]),
    ("QGMMA.64x8x32.F32.E4M3.E4M3 R24, gdesc[UR4], RZ", "sm_90a",
     ["mov.b64 %td0, {%ur4, %ur5};", "mov.b64 %td1, {%ur6, %ur7};",
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%r24, %r25, %r26, %r27}, %td0, %td1, 0, 1, 1;"]),
    ("QGMMA.64x8x32.F32.E4M3.E4M3 R24, gdesc[UR4], RZ, UPT", "sm_90a",
     ["mov.b64 %td0, {%ur4, %ur5};", "mov.b64 %td1, {%ur6, %ur7};",
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%r24, %r25, %r26, %r27}, %td0, %td1, 0, 1, 1;"]),
    ("WARPGROUP.ARRIVE", "sm_90a", ["wgmma.fence.sync.aligned;"]),
    ("UTCATOMSWS.FIND_AND_SET.ALIGN [UR4], UR5", "sm_100a",
     ["tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%ur4], %ur5;"]),
    ("TCGEN05.FENCE.BEFORE", "sm_100a", ["tcgen05.fence::before_thread_sync;"]),
    ("TCGEN05.FENCE.AFTER", "sm_100a", ["tcgen05.fence::after_thread_sync;"]),
]


@pytest.mark.parametrize("sass,sm,want", OTHER_PTX, ids=[o[0] for o in OTHER_PTX])
def test_other_rules_word_for_word(sass: str, sm: str, want: list[str]) -> None:
    assert ptx_lines(sass, sm=sm)[: len(want) + 1] == want + ["exit;"]


@pytest.mark.parametrize("sass,sm,message", [
    ("SYNCS.EXCH.64 UR4, [UR5], UR6", "sm_90a",
     "SYNCS.EXCH.64: mbarrier.init returns nothing: the first operand must be URZ"),
    ("ELECT P0, URZ, P1", "sm_90a", "ELECT: ELECT's lane mask must be PT"),
    ("FENCE.VIEW.ASYNC.T", "sm_100a", "FENCE.VIEW.ASYNC.T: FENCE.VIEW.ASYNC.T has no PTX of its own: ptxas emits it "
     "after a tcgen05.st; write the tcgen05 wait or fence the kernel needs instead"),
    ("ATOMG.E.ADD.STRONG.GPU P0, R1, [R6], R3", "sm_90a",
     "ATOMG.E.ADD.STRONG.GPU: ATOMG's predicate P0 is not lifted (only PT)"),
    ("STTM.16dp256bit.x4 tmem[UR4], R8", "sm_100a",
     "STTM.16dp256bit.x4: LDTM/STTM .16dp256bit needs more registers than the text's x4 names; not lifted"),
    ("STTM.16dp128bit.x4 tmem[UR4], R8", "sm_100a",
     "STTM.16dp128bit.x4: LDTM/STTM .16dp128bit needs more registers than the text's x4 names; not lifted"),
])
def test_other_refusals_word_for_word(sass: str, sm: str, message: str) -> None:
    with pytest.raises(WarpyError) as e:
        lift(parse(text(sass, sm)), sm)
    assert str(e.value) == message


# BRA.U with its uniform predicate as an operand: a guarded branch (`@!%up0 bra`), an unconditional
# one for UPT, nothing for !UPT; each run by the interpreter and the PTX evaluator for both values
# of UP0 (the add is skipped exactly when the branch is taken), and pinned as PTX (UPT's and !UPT's
# guards `@%pt` / `@%pf` would compute the same but are not what the lifter writes)
BRANCHES = [
    ("!UP0", ["@!%up0 bra skip;"]),
    ("UP0", ["@%up0 bra skip;"]),
    ("UPT", ["bra skip;"]),
    ("!UPT", []),
]


@pytest.mark.parametrize("guard,want", BRANCHES, ids=[b[0] for b in BRANCHES])
def test_uniform_branches_compute_what_the_interpreter_computes(guard: str, want: list[str]) -> None:
    from ptx_eval import run_ptx
    from warpy.isa import interp

    sass = f"BRA.U {guard}, skip\nIADD3 R1, R1, 0x1, RZ\nskip:"
    assert ptx_lines(sass)[: len(want) + 3] == want + ["add.u32 %r1, %r1, 1;", "skip:", "exit;"]
    kernel = parse(text(sass))
    body = lift(kernel, "sm_90a").split("// --- the program ---\n")[1].splitlines()
    taken = []
    for up in (0, 1):
        m = interp.Machine()
        m.v = {"R1": 5, "UP0": up}
        interp.run(kernel, m)
        got = run_ptx(body, {"%r1": 5, "%up0": up})
        assert got["%r1"] == m.v["R1"], (guard, up, body)
        taken.append(m.v["R1"] == 5)
    assert taken == {"!UP0": [True, False], "UP0": [False, True], "UPT": [True, True], "!UPT": [False, False]}[guard]


def test_nop_lifts_to_a_comment() -> None:
    """NOP does nothing: its PTX is the source line's comment and the rule's `// NOP`, no instruction."""
    body = lift(parse(text("NOP")), "sm_90a").split("// --- the program ---\n")[1]
    assert body.splitlines()[:3] == ["    // NOP", "    // NOP", "    // EXIT"]


# the declarations end at the highest register the instruction's operands span: SYNCS.EXCH's init
# word is the pair UR6:UR7 (only UR6's low word is read), HGMMA's and QGMMA's descriptor operand the
# four UR4..UR7; a rule that took one register more would declare %ur<9>
@pytest.mark.parametrize("sass", [
    "SYNCS.EXCH.64 URZ, [UR4], UR6",
    "HGMMA.64x8x16.F32.BF16 R24, gdesc[UR4], R24, UPT",
    "QGMMA.64x8x32.F32.E4M3.E4M3 R24, gdesc[UR4], R24, UPT",
])
def test_declarations_end_at_the_operands_last_register(sass: str) -> None:
    ptx = lift(parse(text(sass)), "sm_90a")
    assert [ln.strip() for ln in ptx.splitlines() if ln.strip().startswith(".reg .b32 %ur")] == [".reg .b32 %ur<8>;"]
