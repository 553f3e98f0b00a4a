"""warpy.lift: a rule for every opcode, golden PTX for the instructions whose lift is not one-to-one
(the known differences), the refusal of a kernel naming both cta_groups, and every example and
probe program lifted, assembled for each target and checked against its disassembly."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from warpy.errors import WarpyError
from warpy.isa import families as isa_families
from warpy.isa.text import parse
from warpy.lift import families as lift_families
from warpy.lift.lifter import PTX_VERSION, build, cta_group, expected_opcodes, lift

HEADER = """\
.kernel g
.sm {sm}
.threads 128
.dynsmem 1024
.grid 1 1 1
.cluster {cluster}
.mbarriers 1
.tmap a dtype=bf16 dims=64,64 strides=128 box=64,64 swizzle=128
.param out u64
"""


def text(body: str, sm: str = "sm_90a", cluster: str = "1 1 1") -> str:
    lines = [ln if ln.endswith(":") else f"  {ln}" for ln in body.strip().splitlines()]
    return HEADER.format(sm=sm, cluster=cluster) + "".join(f"{ln}\n" for ln in lines) + "  EXIT\n"


def ptx_lines(body: str, sm: str = "sm_90a", cluster: str = "1 1 1") -> list[str]:
    """The PTX instruction lines the body lifts to (comments, declarations and the entry prologue dropped)."""
    ptx = lift(text(body, sm, cluster))
    body_ptx = ptx.split("// --- the program ---\n")[1]
    return [ln.strip() for ln in body_ptx.splitlines() if ln.strip() and not ln.strip().startswith(("//", "}"))]


# -- coverage ---------------------------------------------------------------------------------


# -- golden PTX ---------------------------------------------------------------------------------


GOLDEN = [
    ("IADD3 R1, R2, -0x3, RZ", ["add.u32 %r1, %r2, 0xFFFFFFFD;"]),
    ("FADD R1, R2, R3", ["add.rn.f32 %r1, %r2, %r3;"]),
    ("FMUL R1, R2, R3", ["mul.rn.f32 %r1, %r2, %r3;"]),
    # float operands: `-x` flips the sign bit; RZ is an fp32 literal
    ("FADD.FTZ.RZ R1, R2, -R3", ["xor.b32 %t0, %r3, 0x80000000;", "add.rz.ftz.f32 %r1, %r2, %t0;"]),
    ("FFMA.RM R1, R2, R3, -RZ", ["fma.rm.f32 %r1, %r2, %r3, 0f80000000;"]),
    ("FMNMX.NAN R1, R2, R3, !PT", ["max.NaN.f32 %r1, %r2, %r3;"]),
    ("FSETP.GEU.FTZ.AND P0, P1, R2, R3, !P2", ["setp.geu.and.ftz.f32 %p0|%p1, %r2, %r3, !%p2;"]),
    ("FSEL R1, R2, RZ, !P0", ["selp.b32 %r1, 0, %r2, %p0;"]),
    ("MUFU.EX2 R1, R2", ["ex2.approx.ftz.f32 %r1, %r2;"]),
    ("MUFU.RSQ R1, R2", ["rsqrt.approx.ftz.f32 %r1, %r2;"]),
    ("HADD2.BF16_V2 R1, R2, -R3", ["xor.b32 %t0, %r3, 0x80008000;", "add.rn.bf16x2 %r1, %r2, %t0;"]),
    ("HFMA2 R1, R2, R3, RZ", ["mov.b32 %t0, 0;", "fma.rn.f16x2 %r1, %r2, %r3, %t0;"]),
    ("HMNMX2.BF16_V2 R1, R2, R3, PT", ["min.bf16x2 %r1, %r2, %r3;"]),
    ("F2F.F32.BF16 R1, R2", ["cvt.u16.u32 %th0, %r2;", "cvt.f32.bf16 %r1, %th0;"]),
    ("F2F.BF16.F16 R1, R2", ["cvt.u16.u32 %th0, %r2;", "cvt.rn.bf16.f16 %th1, %th0;", "cvt.u32.u16 %r1, %th1;"]),
    ("F2FP.BF16.F32.PACK_AB.RZ R1, R2, R3", ["cvt.rz.bf16x2.f32 %r1, %r2, %r3;"]),
    ("I2F.BF16.U32.RM R1, R2", ["cvt.rm.bf16.u32 %th0, %r2;", "cvt.u32.u16 %r1, %th0;"]),
    ("I2FP.F32.S32 R1, R2", ["cvt.rn.f32.s32 %r1, %r2;"]),
    ("F2I.U32.F16.CEIL.NTZ R1, R2", ["cvt.u16.u32 %th0, %r2;", "cvt.rpi.u32.f16 %r1, %th0;"]),
    ("F2I.NTZ R1, R2", ["cvt.rni.s32.f32 %r1, %r2;"]),
    ("VIMNMX.U32 R1, R2, 0x7, !PT", ["max.u32 %r1, %r2, 7;"]),
    ("SHFL.BFLY PT, R1, R2, 0x10, 0x1f", ["shfl.sync.bfly.b32 %r1, %r2, 0x10, 0x1f, 0xFFFFFFFF;"]),
    ("SHFL.DOWN P0, R1, R2, 0x1, 0x1f, 0xffff", ["shfl.sync.down.b32 %r1|%p0, %r2, 1, 0x1f, 0xffff;"]),
    ("VOTE.ANY R1, PT, P0", ["activemask.b32 %t0;", "vote.sync.ballot.b32 %r1, %p0, %t0;"]),
    ("REDUX.SUM UR4, R1", ["activemask.b32 %t0;", "redux.sync.add.u32 %ur4, %r1, %t0;"]),
    ("REDUX UR4, R1", ["activemask.b32 %t0;", "redux.sync.and.b32 %ur4, %r1, %t0;"]),
    # cache hints; atomics; CCTL.IVALL makes the load or atomic before it an acquire
    ("LDG.E.EF.LTC128B.128.CONSTANT R4, desc[UR4][R2.64]",
     ["mov.b64 %td0, {%r2, %r3};", "ld.global.nc.L1::evict_first.L2::128B.v4.b32 {%r4, %r5, %r6, %r7}, [%td0];"]),
    ("ATOMG.E.MAX.S32.STRONG.GPU PT, R1, desc[UR4][R2.64+0x8], R3",
     ["mov.b64 %td0, {%r2, %r3};", "atom.relaxed.gpu.global.max.s32 %r1, [%td0+8], %r3;"]),
    ("ATOMG.E.CAS.STRONG.GPU PT, R1, [R2+0x8], R4, R5",
     ["mov.b64 %td0, {%r2, %r3};", "atom.relaxed.gpu.global.cas.b32 %r1, [%td0+8], %r4, %r5;"]),
    ("REDG.E.ADD.F32.FTZ.RN.STRONG.GPU desc[UR4][R2.64], R1", ["mov.b64 %td0, {%r2, %r3};", "red.relaxed.gpu.global.add.f32 [%td0], %r1;"]),
    ("LDG.E.STRONG.GPU R1, desc[UR4][R2.64]\nCCTL.IVALL",
     ["mov.b64 %td0, {%r2, %r3};", "ld.acquire.gpu.global.b32 %r1, [%td0];"]),
    ("MOV R1, 0x1\nCCTL.IVALL", ["mov.b32 %r1, 1;", "fence.acq_rel.gpu;"]),
    ("IADD3 R1, R2, R3, R4", ["add.u32 %t0, %r2, %r3;", "add.u32 %r1, %t0, %r4;"]),
    ("ISETP.LT.AND P0, PT, R1, 0x40, PT", ["setp.lt.s32 %p0, %r1, 0x40;"]),
    ("ISETP.LT.OR P0, PT, R1, 0x40, PT", ["setp.lt.or.s32 %p0, %r1, 0x40, %pt;"]),
    ("ISETP.GE.U32.AND P1, P2, R1, R3, !P0", ["setp.ge.and.u32 %p1|%p2, %r1, %r3, !%p0;"]),
    ("SHF.R.U32.HI R1, RZ, 0x5, R0", ["shr.u32 %r1, %r0, 5;"]),
    ("SHF.L.U32 R1, R0, 0x4, RZ", ["shl.b32 %r1, %r0, 4;"]),
    ("PRMT R3, R1, 0x654, R2", ["prmt.b32 %r3, %r1, %r2, 0x654;"]),
    ("LOP3.LUT R1, R1, 0x80000000, RZ, 0x3c, !PT", ["lop3.b32 %r1, %r1, 0x80000000, 0, 0x3c;"]),
    ("@!P1 SEL R1, R2, 0x7, P0", ["@!%p1 selp.b32 %r1, %r2, 7, %p0;"]),
    ("IMAD.WIDE.U32 R4, R0, 0x10, R2",
     ["mul.wide.u32 %td0, %r0, 0x10;", "mov.b64 %td1, {%r2, %r3};", "add.u64 %td0, %td0, %td1;", "mov.b64 {%r4, %r5}, %td0;"]),
    ("LDC.64 R2, c[0x0][out]", ["ld.param.u64 %td0, [out];", "mov.b64 {%r2, %r3}, %td0;"]),
    ("ULDC.64 UR4, c[0x0][0x208]", ["mov.b32 %ur4, 0;", "mov.b32 %ur5, 0;"]),
    ("S2UR UR4, SR_CgaCtaId", ["mov.u32 %ur4, %cluster_ctarank;"]),
    ("UMOV UR4, `(dsmem)", ["mov.u32 %ur4, dsmem;"]),
    ("SYNCS.ARRIVE.TRANS64 RZ, [UR4], R5", ["mbarrier.arrive.expect_tx.shared::cta.b64 _, [%ur4], %r5;"]),
    ("SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR4+0x8], RZ", ["mbarrier.arrive.shared::cta.b64 _, [%ur4+8];"]),
    ("SYNCS.ARRIVE.TRANS64.RED.A1T0 RZ, [UR4], RZ", ["mbarrier.arrive.shared::cluster.b64 _, [%ur4];"]),
    ("SYNCS.ARRIVE.TRANS64.RED.A0TR RZ, [UR4], R5", ["mbarrier.expect_tx.relaxed.cluster.shared::cluster.b64 [%ur4], %r5;"]),
    ("SYNCS.EXCH.64 URZ, [UR4], UR6",
     ["shr.u32 %t0, %ur6, 1;", "and.b32 %t0, %t0, 0xFFFFF;", "sub.u32 %t0, 0x100000, %t0;",
      "mbarrier.init.shared::cta.b64 [%ur4], %t0;"]),
    ("ELECT P0, URZ, PT", ["activemask.b32 %t0;", "elect.sync _|%p0, %t0;"]),
    ("ACQBULK", ["griddepcontrol.wait;"]),
    ("PREEXIT", ["griddepcontrol.launch_dependents;"]),
    ("FENCE.VIEW.ASYNC.S", ["fence.proxy.async.shared::cta;"]),
    ("BAR.SYNC.DEFER_BLOCKING 0x1, 0x80", ["barrier.sync.aligned 1, 0x80;"]),
    ("UCGABAR_ARV", ["barrier.cluster.arrive.release.aligned;"]),
    ("WGMMA.COMMIT", ["wgmma.commit_group.sync.aligned;"]),
    ("WARPGROUP.DEPBAR.LE gsb0, 0x1", ["wgmma.wait_group.sync.aligned 1;"]),
    ("USETMAXREG.DEALLOC.CTAPOOL 0x28", ["setmaxnreg.dec.sync.aligned.u32 40;"]),
    ("DEPBAR.LE SB0, 0x0", ["@%pe cp.async.bulk.wait_group.read 0;", "activemask.b32 %t0;", "bar.warp.sync %t0;"]),
    # a single-issue instruction runs on the lane elected at entry
    ("UTMALDG.2D [UR8], tmap[a]",
     ["@%pe cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%ur8], [%tm0, {%ur10, %ur11}], [%ur9];"]),
    ("UTMASTG.2D [UR8], tmap[a]", ["@%pe cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%tm0, {%ur9, %ur10}], [%ur8];"]),
    ("UTMACMDFLUSH", ["@%pe cp.async.bulk.commit_group;"]),
    # ... and a uniform guard on one becomes a branch around it
    ("@!UP0 UTMACMDFLUSH", ["@%up0 bra $Wskip_1;", "@%pe cp.async.bulk.commit_group;", "$Wskip_1:"]),
    # a per-lane guard: the warp issues it when the guard holds in some lane
    ("@P2 UTMACMDFLUSH",
     ["activemask.b32 %t0;", "vote.sync.any.pred %tp0, %p2, %t0;", "@!%tp0 bra $Wskip_1;", "@%pe cp.async.bulk.commit_group;",
      "$Wskip_1:"]),
]


@pytest.mark.parametrize("sass,want", GOLDEN, ids=[g[0] for g in GOLDEN])
def test_golden_ptx(sass: str, want: list[str]) -> None:
    got = ptx_lines(sass)
    assert got[: len(want)] == want, got


def test_try_wait_sleep_becomes_the_suspend_time_hint() -> None:
    got = ptx_lines("WAIT:\nSYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R5\n@!P0 NANOSLEEP.SYNCS 0x20\n@!P0 BRA WAIT")
    assert got == ["WAIT:", "shr.u32 %t0, %r5, 31;", "mbarrier.try_wait.parity.shared::cta.b64 %p0, [%ur4], %t0, 32;",
                   "@!%p0 bra WAIT;", "exit;", "exit;"]
    # a sleep not guarded by the wait's result stays a sleep
    got = ptx_lines("SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R5\nNANOSLEEP 0x20")
    assert "nanosleep.u32 32;" in got and all(", 32;" not in g for g in got if "try_wait" in g)


def test_a_single_issue_instruction_under_the_programs_own_elect_runs_on_that_lane() -> None:
    # guarded by the ELECT's predicate: that lane issues (no entry election needed)
    ptx = lift(text("ELECT P3, URZ, PT\n@P3 UTMALDG.2D [UR8], tmap[a]"))
    assert "@%p3 cp.async.bulk.tensor.2d.shared::cluster" in ptx and "%pe," not in ptx and "vote" not in ptx
    # inside a region only the elected lane enters: whichever lane is there issues
    got = ptx_lines("ELECT P3, URZ, PT\n@!P3 BRA DONE\nUTMACMDFLUSH\nDONE:\nUTMACMDFLUSH")
    assert got[2:] == ["@!%p3 bra DONE;", "cp.async.bulk.commit_group;", "DONE:", "@%pe cp.async.bulk.commit_group;",
                       "exit;", "exit;"]
    # a bulk-group store stays on the entry's lane, with its commit and wait
    ptx = lift(text("ELECT P3, URZ, PT\n@P3 UTMASTG.2D [UR8], tmap[a]\nUTMACMDFLUSH\nDEPBAR.LE SB0, 0x0"))
    assert "@%pe cp.async.bulk.tensor.2d.global" in ptx and "@%pe cp.async.bulk.commit_group;" in ptx
    assert "@%pe cp.async.bulk.wait_group.read 0;" in ptx
    # once the predicate is rewritten it no longer names the elected lane
    ptx = lift(text("ELECT P3, URZ, PT\nISETP.EQ.U32.AND P3, PT, R1, 0x0, PT\n@P3 UTMALDG.2D [UR8], tmap[a]"))
    assert "vote.sync.any.pred" in ptx and "@%pe cp.async.bulk.tensor.2d.shared::cluster" in ptx


def test_elected_lane_is_computed_once_at_entry_only_when_needed() -> None:
    with_tma = lift(text("UTMACMDFLUSH\nUTMACMDFLUSH"))
    assert with_tma.count("elect.sync _|%pe") == 1
    assert with_tma.index("elect.sync _|%pe") < with_tma.index("cp.async.bulk.commit_group")
    assert "%pe" not in lift(text("IADD3 R1, R2, 0x1, RZ")).split(".reg .pred %pt, %pf, %pe;")[1]


def test_tmem_allocation_runs_on_every_lane() -> None:
    got = ptx_lines("UTCATOMSWS.FIND_AND_SET.ALIGN [UR4], 0x80\nUVIRTCOUNT.DEALLOC.SMPOOL 0x80\nUTCATOMSWS.AND UR5, 0x80", sm="sm_100a")
    assert got[:3] == ["tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%ur4], 128;",
                       "tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;",
                       "tcgen05.dealloc.cta_group::1.sync.aligned.b32 %ur5, 128;"]


def test_tcgen05_lifts_with_the_kernels_cta_group() -> None:
    body = ("UTCHMMA.2CTA gdesc[UR8], gdesc[UR10], tmem[UR4], tmem[UR6], idesc[UR7], UPT\n"
            "UTCBAR.2CTA.MULTICAST [UR12], URZ, UR13\nLDTM.x4 R8, tmem[UR4]\nTCGEN05.WAIT.LD")
    got = ptx_lines(body, sm="sm_100a", cluster="2 1 1")
    assert "@%pe tcgen05.mma.cta_group::2.kind::f16 [%ur4], %td0, %td1, %ur7, %pt;" in got
    assert "@%pe tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%ur12], %th0;" in got
    assert "tcgen05.ld.sync.aligned.32x32b.x4.b32 {%r8, %r9, %r10, %r11}, [%ur4];" in got
    assert "tcgen05.wait::ld.sync.aligned;" in got


def test_utcqmma_lifts_to_kind_f8f6f4() -> None:
    got = ptx_lines("UTCQMMA.2CTA gdesc[UR8], gdesc[UR10], tmem[UR4], tmem[UR6], idesc[UR7], UPT",
                    sm="sm_100a", cluster="2 1 1")
    assert "@%pe tcgen05.mma.cta_group::2.kind::f8f6f4 [%ur4], %td0, %td1, %ur7, %pt;" in got


def test_hgmma_scale_d_and_descriptors() -> None:
    got = ptx_lines("HGMMA.64x8x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT\nHGMMA.64x8x16.F32.BF16 R24, gdesc[UR4], R24, gsb0")
    regs = "{%r24, %r25, %r26, %r27}"
    assert got[:3] == ["mov.b64 %td0, {%ur4, %ur5};", "mov.b64 %td1, {%ur6, %ur7};",
                       f"wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {regs}, %td0, %td1, 0, 1, 1, 0, 0;"]
    assert got[5] == f"wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {regs}, %td2, %td3, 1, 1, 1, 0, 0;"


def test_qgmma_types_scale_d_and_no_transpose() -> None:
    got = ptx_lines("QGMMA.64x8x32.F32.E4M3.E5M2 R24, gdesc[UR4], RZ, !UPT\n"
                    "QGMMA.64x8x32.F32.E5M2.E4M3 R24, gdesc[UR4], R24, gsb0")
    regs = "{%r24, %r25, %r26, %r27}"
    assert got[:3] == ["mov.b64 %td0, {%ur4, %ur5};", "mov.b64 %td1, {%ur6, %ur7};",
                       f"wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e5m2 {regs}, %td0, %td1, 0, 1, 1;"]
    assert got[5] == f"wgmma.mma_async.sync.aligned.m64n8k32.f32.e5m2.e4m3 {regs}, %td2, %td3, 1, 1, 1;"
    with pytest.raises(WarpyError, match="QGMMA reads 8-bit operands K-major only: no tnspB"):
        lift(text("QGMMA.64x8x32.F32.E4M3.E4M3 R24, gdesc[UR4].tnspB, RZ, !UPT"))


def test_header_becomes_the_entry() -> None:
    src = text("UTMASTG.2D [UR8], tmap[a]", cluster="2 1 1").replace(".threads 128\n", ".threads 384\n.maxnreg 168\n")
    ptx = lift(src)
    assert f".version {PTX_VERSION}\n.target sm_90a\n.address_size 64\n" in ptx
    assert ".extern .shared .align 1024 .b8 dsmem[];" in ptx
    assert ".visible .entry g(\n    .param .align 64 .b8 a[128],\n    .param .u64 out\n)" in ptx
    assert ".maxntid 384, 1, 1\n.maxnreg 168\n.reqnctapercluster 2, 1, 1\n{" in ptx
    assert "mov.b64 %tm0, a;\n    cvta.param.u64 %tm0, %tm0;" in ptx
    no_cap = lift(text("USETMAXREG.DEALLOC.CTAPOOL 0x28"))
    assert ".minnctapersm 1" in no_cap  # setmaxnreg needs the register count at entry


# -- refusals -------------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [
    "UTCHMMA gdesc[UR8], gdesc[UR10], tmem[UR4], tmem[UR6], idesc[UR7], UPT\n"
    "UTCHMMA.2CTA gdesc[UR8], gdesc[UR10], tmem[UR4], tmem[UR6], idesc[UR7], UPT",
    "UTCATOMSWS.2CTA.FIND_AND_SET.ALIGN [UR4], 0x80\nUTCBAR [UR12], URZ",
])
def test_a_kernel_naming_both_cta_groups_is_refused(body: str) -> None:
    k = parse(text(body, sm="sm_100a", cluster="2 1 1"))
    with pytest.raises(WarpyError, match=r"^kernel g names both cta_groups \(.+ and .+\); PTX allows one .cta_group per kernel$"):
        lift(k)
    with pytest.raises(WarpyError) as e:
        cta_group(k)
    assert "\n" not in str(e.value)


def test_an_instruction_of_the_other_target_is_refused() -> None:
    with pytest.raises(WarpyError, match="HGMMA.64x8x16.F32.BF16 is not an instruction of sm_100a"):
        lift(text("HGMMA.64x8x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT"), "sm_100a")


def test_unliftable_operands_are_named() -> None:
    with pytest.raises(WarpyError, match="carry-out P0"):
        lift(text("IADD3 R1, P0, PT, R2, 0x1, RZ", sm="sm_100a"))
    with pytest.raises(WarpyError, match=r"c\[0x0\]\[nothere\] names no kernel parameter"):
        lift(text("LDC R1, c[0x0][nothere]"))


# -- every program, both targets, assembled and checked -------------------------------------------


# nvdisasm is a dependency (the nvidia-cuda-nvdisasm wheel): without it these tests fail, naming it.


def _programs() -> list[tuple[str, str]]:
    from warpy.kernels.probes import PROBES
    from warpy.isa.examples import EXAMPLES

    out = [(f"example:{n}", a) for n in EXAMPLES for a in ("sm_90a", "sm_100a")]
    out += [(f"probe:{n}", a) for n, pr in PROBES.items() for a in pr.archs]
    return out


def _program(which: str, arch: str):  # type: ignore[no-untyped-def]
    kind, name = which.split(":")
    if kind == "example":
        from warpy.isa.examples import EXAMPLES

        return EXAMPLES[name](arch)
    from warpy.kernels.probes import PROBES

    return PROBES[name].build(arch)


@pytest.mark.parametrize("which,arch", _programs())
def test_program_lifts_assembles_and_passes_the_disassembly_check(which: str, arch: str) -> None:
    prog = _program(which, arch)
    kernel = prog.kernel()
    cubin = build(kernel, arch)
    assert cubin.kernels == (kernel.header.kernel,)
    assert not cubin.resource(kernel.header.kernel).spills
    assert expected_opcodes(kernel)  # the check asked for something
    # what is checked is what is assembled: the printed text lifts to the same PTX
    assert lift(parse(str(kernel))) == lift(kernel)


@pytest.mark.parametrize("name", ["umma_1cta", "umma_2cta", "umma_ts"])
def test_tcgen05_probes_show_their_opcodes(name: str) -> None:
    from warpy.kernels.probes import PROBES, UMMA_OPCODES
    from warpy.lift.disasm import check_opcodes, disassemble

    kernel = PROBES[name].build("sm_100a").kernel()
    cubin = build(kernel, "sm_100a")
    dis = disassemble(cubin)
    check_opcodes(UMMA_OPCODES[name], dis)
    two = [op for op in dis.opcodes() if ".2CTA" in op]
    assert bool(two) == (name == "umma_2cta"), two


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_the_coloured_form_lifts_too(arch: str) -> None:
    from warpy.isa.examples import EXAMPLES

    kernel = EXAMPLES["example-pipe"](arch).coloured()
    ptx = lift(kernel)
    assert re.search(r"%r\d+", ptx) and "%rn" not in ptx
    build(kernel, arch)


def test_the_missing_opcode_message_names_what_is_missing(tmp_path: Path) -> None:
    # a kernel whose wgmma fence is lifted but never followed by an HGMMA still shows WARPGROUP.ARRIVE;
    # asking for an opcode the cubin lacks fails with one line naming it
    from warpy.lift.disasm import check_opcodes

    cubin = build(text("WARPGROUP.ARRIVE"), "sm_90a")
    with pytest.raises(WarpyError, match=r"^missing SASS opcodes in kernel 'g': HGMMA$"):
        check_opcodes(["WARPGROUP.ARRIVE", "HGMMA"], cubin, "g")


# -- properties ---------------------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(deadline=None, max_examples=200)
@given(v=st.integers(-(2**31), 2**32 - 1), signed=st.booleans())
def test_immediates_keep_their_32_bit_pattern(v: int, signed: bool) -> None:
    from warpy.lift.families._ctx import imm

    s = imm(v, signed)
    assert int(s, 0) & 0xFFFFFFFF == v & 0xFFFFFFFF
    if signed:
        assert -(2**31) <= int(s, 0) < 2**31


@settings(deadline=None, max_examples=60)
@given(count=st.integers(1, (1 << 20) - 1))
def test_mbarrier_init_recovers_the_count_the_program_packed(count: int) -> None:
    # the isa packs 2^20 - count at bits 1 (and 43); the lift computes 0x100000 - ((lo >> 1) & 0xFFFFF)
    t = (1 << 20) - count
    lo, hi = (t << 1) & 0xFFFFFFFF, (t << 11) & 0xFFFFFFFF
    got = ptx_lines(f"UMOV UR6, {hex(lo)}\nUMOV UR7, {hex(hi)}\nSYNCS.EXCH.64 URZ, [UR4], UR6")
    assert got[2:5] == ["shr.u32 %t0, %ur6, 1;", "and.b32 %t0, %t0, 0xFFFFF;", "sub.u32 %t0, 0x100000, %t0;"]
    assert 0x100000 - ((lo >> 1) & 0xFFFFF) == count
