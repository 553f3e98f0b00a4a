"""The checker's wgmma handlers (`warpy/check/families/wgmma.py`: `_hgmma`, `_fence`, `_commit`,
`_wait`, mutated since `.ci/mutation.py` undecorates them in its copy) on the smallest wgmma probe
(one warpgroup, one 64 x 64 x 32 product in two MMAs, waited for and stored): the tile pass (what
`--all-ctas` runs on a large launch: groups and pending accumulators only), the happens-before table
of what orders an MMA's operand reads before a later write. Each case answers survivors of the
handlers' mutation run (docs/testing.md, "the memory, wgmma and ALU handlers")."""

from __future__ import annotations

import functools

import numpy as np

from warpy.check.machine import Machine
from warpy.check.report import check_kernel
from warpy.isa.text import parse
from warpy.kernels.probes import PROBES, ProbeExpectation


@functools.lru_cache(maxsize=None)
def _ss() -> str:
    return str(PROBES["wgmma_fp16_sw64"].build("sm_90a").kernel())


def _edit(text: str, *edits: tuple[str, str]) -> str:
    """Each (old, new) replaced once; `old` must occur exactly once."""
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def _tile_pass(text: str) -> list[str]:
    """The messages of the tile pass's run of cluster 0 (no ordering, provenance or derived checks)."""
    m = Machine(parse(text), values=False, fast=True, chosen=[0])
    m.run()
    return [msg if n == 1 else f"{msg} ({n} times)" for msgs in m.problems.msgs.values() for msg, n in msgs.items()]


WAIT = "  WARPGROUP.DEPBAR.LE gsb0, 0x0\n"
EARLY = "acc: HGMMA.64x64x16.F32.F16, warp {w} writes it and {op}, warp {w} touches it, and nothing orders the two (the wgmma group has not been waited for){n}"
# a second accumulator, written by a third MMA in the same group after the two into acc
ACC2 = (".reg R[32] acc\n", ".reg R[32] acc\n.reg R[32] acc2\n")
THIRD = ("  HGMMA.64x64x16.F32.F16 acc, gdesc[gmma_desc], acc, gsb0\n",
         "  HGMMA.64x64x16.F32.F16 acc, gdesc[gmma_desc], acc, gsb0\n  HGMMA.64x64x16.F32.F16 acc2, gdesc[gmma_desc], RZ, !UPT\n")


def test_the_tile_pass_keeps_each_accumulator_pending_until_its_group_is_waited_for() -> None:
    """In the tile pass too, an accumulator is the MMAs' until the wait retires their group: read
    before the wait (its first and last register), or never waited for, each warp is reported; after
    the wait, clean. A second accumulator's MMA does not end the first one's pending."""
    ss = _ss()
    assert _tile_pass(ss) == []
    early = _edit(ss, (WAIT, "  MOV tx, acc.0\n  MOV tx, acc.31\n" + WAIT))
    assert _tile_pass(early) == [EARLY.format(w=w, op="MOV", n=" (2 times)") for w in range(4)]
    assert _tile_pass(_edit(ss, (WAIT, ""))) == [EARLY.format(w=w, op="STG.E.128", n=" (8 times)") for w in range(4)]
    two = _edit(ss, ACC2, THIRD, (WAIT, "  MOV tx, acc.0\n" + WAIT))
    assert _tile_pass(two) == [EARLY.format(w=w, op="MOV", n="") for w in range(4)]
    assert _tile_pass(_edit(ss, ACC2, THIRD)) == []
    # the two accumulators halves of one vector: the MMA into acc.32 does not end acc.0's pending either
    halves = _edit(ss, (".reg R[32] acc\n", ".reg R[64] acc\n"), (THIRD[0], THIRD[1].replace("acc2,", "acc.32,")),
                   (WAIT, "  MOV tx, acc.0\n" + WAIT))
    assert _tile_pass(halves) == [EARLY.format(w=w, op="MOV", n="") for w in range(4)]


def test_the_hb_table_names_the_wgmma_wait_that_orders_an_operand_read_before_a_write() -> None:
    """After the wait and a CTA barrier each warp overwrites A's first word: its own MMAs' reads of A
    are ordered by its wgmma wait, the other warps' by the barrier."""
    text = _edit(_ss(), (WAIT, WAIT + "  BAR.SYNC.DEFER_BLOCKING 0x0\n  STS [sa_base], RZ\n"))
    table = check_kernel(parse(text), hb=True).hb_table
    reads = {k: n for k, n in table.items() if k[0] == "sa" and k[1] == "HGMMA.64x64x16.F32.F16" and k[3] == "STS"}
    assert reads == {("sa", "HGMMA.64x64x16.F32.F16", r, "STS", w, "", "wgmma wait" if r == w else "CTA barrier", "r", "w"): 1
                     for r in range(4) for w in range(4)}


def test_a_descriptor_word_nothing_wrote_reads_as_zero() -> None:
    """B's descriptor high word never written: reported (once, the first warp), and read as 0, a
    descriptor without swizzle whose 8-row groups are 0 bytes apart: rows 0 and 1 of the 64-byte
    swizzled box are read 16 bytes apart in one row."""
    text = _edit(_ss(), ("+ UMOV gmma_desc.3, 0x80000020  // gdesc.hi sb[0, 0]\n", ""))
    read = ("CTA 0 warp 0: HGMMA.64x64x16.F32.F16 reads its B operand with a no-byte swizzle descriptor whose row 1, K byte "
            "0 is row 0, byte {b} of the box (not row 1, byte {k}); the copy engine landed it through tensor map b (64-byte "
            "swizzle, 64-byte rows)")
    undef = ("line {line} (HGMMA.64x64x16.F32.F16): CTA 0 warp 0 reads gmma_desc.3 before any instruction wrote it (the "
             "register holds whatever the register file had)")
    assert check_kernel(parse(text)).messages(40) == [read.format(b=16, k=0), read.format(b=48, k=32)] + [
        undef.format(line=line) for line in (42, 45)]



def test_with_values_a_descriptor_word_nothing_wrote_is_the_word_zero() -> None:
    """The product computed through that descriptor is the one an explicit zero word gives (and not
    the probe's: B's rows 8..63 are read from the wrong bytes)."""
    text = _edit(_ss(), ("+ UMOV gmma_desc.3, 0x80000020  // gdesc.hi sb[0, 0]\n", ""))
    zero = _edit(_ss(), ("+ UMOV gmma_desc.3, 0x80000020  // gdesc.hi sb[0, 0]\n", "  UMOV gmma_desc.3, 0x0\n"))
    outs = []
    for t in (text, zero, _ss()):
        e = ProbeExpectation(PROBES["wgmma_fp16_sw64"].host(np.random.default_rng(7)))
        check_kernel(parse(t), values=True, expect=e)
        outs.append(e.outputs["out"])
    assert np.array_equal(outs[0], outs[1]) and not np.array_equal(outs[0], outs[2])


FIRST = "  HGMMA.64x64x16.F32.F16 acc, gdesc[gmma_desc], RZ, !UPT\n"


class _Zeros:
    """An `Expectation` whose inputs are all zero; it keeps the `out` bytes the run wrote."""

    out = np.zeros(0, dtype=np.uint8)

    def initial(self, source, box, nbytes, rng):  # type: ignore[no-untyped-def]
        return None

    def compare(self, run):  # type: ignore[no-untyped-def]
        from warpy.check.expect import Verdict

        self.out = run.gmem["out"][:128 * 128].copy()
        return Verdict(0, 0)


def test_an_mma_accumulates_only_where_its_c_operand_is_a_register() -> None:
    """The first MMA's C is RZ: it does not accumulate, even with its scale-d predicate true (UPT):
    clean. Given acc instead, it reads 32 registers nothing wrote (reported once), taken as 0: with
    zero operands every output word is 0 (the bits, not only the value)."""
    ss = _ss()
    assert check_kernel(parse(_edit(ss, (FIRST, FIRST.replace("!UPT", "UPT"))))).messages(40) == []
    acc = _edit(ss, (FIRST, FIRST.replace("RZ, !UPT", "acc, UPT")))
    regs = ", ".join(f"acc.{j}" for j in sorted(range(32), key=str))
    assert check_kernel(parse(acc)).messages(40) == [
        f"line 43 (HGMMA.64x64x16.F32.F16): CTA 0 warp 0 reads {regs} before any instruction wrote it (the register "
        "holds whatever the register file had)"]
    e = _Zeros()
    check_kernel(parse(acc), values=True, expect=e)
    assert e.out.size == 128 * 128 and not e.out.any()


ARRIVE = "  WARPGROUP.ARRIVE\n"


def test_the_mmas_read_their_operands_through_the_async_proxy() -> None:
    """Warp 0 overwrites A's first word with a plain STS before the MMAs (a CTA barrier orders it for
    the other warps): without a proxy fence every warp's MMA reads it through the async proxy
    unordered; FENCE.VIEW.ASYNC.S after the store orders it."""
    ss = _ss()
    store = "  @is_w0 STS [sa_base], RZ\n{fence}  BAR.SYNC.DEFER_BLOCKING 0x0\n"
    assert check_kernel(parse(_edit(ss, (ARRIVE, store.format(fence="  FENCE.VIEW.ASYNC.S\n") + ARRIVE)))).messages(40) == []
    assert check_kernel(parse(_edit(ss, (ARRIVE, store.format(fence="") + ARRIVE)))).messages(40) == [
        f"sa: HGMMA.64x64x16.F32.F16, warp {w} reads it through the async proxy and STS, warp 0 writes it through the "
        "generic proxy, and no proxy fence orders the two" for w in range(4)]


def test_a_second_accumulator_does_not_end_the_first_ones_pending() -> None:
    """The full check as the tile pass above: acc.0 read before the wait is reported in every warp
    though a later MMA of the group wrote acc2."""
    two = _edit(_ss(), ACC2, THIRD, (WAIT, "  MOV tx, acc.0\n" + WAIT))
    assert check_kernel(parse(two)).messages(40) == [EARLY.format(w=w, op="MOV", n="") for w in range(4)]


SECOND_A = "+ UIADD3 gmma_desc.0, sa_gdesc, 0x2, URZ  // gdesc.lo sa[0, 16]"
SECOND_B = "+ UIADD3 gmma_desc.2, sb_gdesc, 0x2, URZ  // gdesc.lo sb[0, 16]"


def test_an_operand_tile_is_known_by_all_of_its_descriptor() -> None:
    """The second MMA reads the first one's K step again, A through a descriptor that differs only in
    its high word (a 32-byte swizzle): a tile of its own, compared with the box (reported), not the
    first MMA's tile remembered. With the same high word: clean."""
    again = _edit(_ss(), (SECOND_A, "  UIADD3 gmma_desc.0, sa_gdesc, 0x0, URZ\n{hi}"),
                  (SECOND_B, "  UIADD3 gmma_desc.2, sb_gdesc, 0x0, URZ"))
    assert check_kernel(parse(again.format(hi=""))).messages(40) == []
    assert check_kernel(parse(again.format(hi="  UMOV gmma_desc.1, 0xc0000020\n"))).messages(40) == [
        "CTA 0 warp 0: HGMMA.64x64x16.F32.F16 reads its A operand with a 32-byte swizzle descriptor whose row 1, K byte 0 "
        "is row 0, byte 32 of the box (not row 1, byte 0); the copy engine landed it through tensor map a (64-byte "
        "swizzle, 64-byte rows)"]



def test_the_other_half_of_an_accumulator_vector_does_not_end_the_first_halfs_pending() -> None:
    """The full check as the tile pass: an MMA into acc.32 leaves acc.0..31 pending."""
    halves = _edit(_ss(), (".reg R[32] acc\n", ".reg R[64] acc\n"), (THIRD[0], THIRD[1].replace("acc2,", "acc.32,")),
                   (WAIT, "  MOV tx, acc.0\n" + WAIT))
    assert check_kernel(parse(halves)).messages(40) == [EARLY.format(w=w, op="MOV", n="") for w in range(4)]



def test_an_accumulator_half_written_first_stays_pending_after_the_other_halfs_mma() -> None:
    """The MMA into acc.32 first, then the two into acc.0: acc.32 read before the wait is reported,
    in the tile pass and the full check."""
    first = _edit(_ss(), (".reg R[32] acc\n", ".reg R[64] acc\n"),
                  (FIRST, "  HGMMA.64x64x16.F32.F16 acc.32, gdesc[gmma_desc], RZ, !UPT\n" + FIRST),
                  (WAIT, "  MOV tx, acc.32\n" + WAIT))
    want = [EARLY.format(w=w, op="MOV", n="") for w in range(4)]
    assert _tile_pass(first) == want
    assert check_kernel(parse(first)).messages(40) == want


@functools.lru_cache(maxsize=None)
def _fp8_gemm() -> str:
    """A 128 x 128 x 128 e4m3 GEMM on sm_90a (QGMMA, 128-byte swizzled operands, two consumer warpgroups)."""
    from warpy.kernels import gemm as G

    prob = G.FAMILY.problem([128, 128, 128], arch="sm_90a", dtype="e4m3", out_dtype="fp32")
    return str(G.build(prob).kernel())


def test_an_fp8_operand_read_with_the_wrong_swizzle_names_its_bytes() -> None:
    """QGMMA's operands are one byte an element: a descriptor saying 64-byte swizzle where the map
    lands 128-byte swizzled rows is reported per warp at the first four K-byte groups that disagree,
    A's rows 64 on for the second warpgroup."""
    text = _fp8_gemm()
    assert check_kernel(parse(text)).messages(40) == []
    msg = ("CTA 0 warp {w}: QGMMA.64x64x32.F32.E4M3.E4M3 reads its {op} operand with a 64-byte swizzle descriptor whose "
           "row 1, K byte 0 is row {r}, byte {b} of the box (not row {wr}, byte {wb}); the copy engine landed it through "
           "tensor map {m} (128-byte swizzle, 128-byte rows)")
    for which, m in (("3", "b"), ("1", "a")):
        hi = f"+ UMOV gmma_desc.{which}, 0x40000040  // gdesc.hi s{m}[0, 0, 0]"
        bad = text.replace(hi, f"  UMOV gmma_desc.{which}, 0x80000040")
        assert bad.count("0x80000040") == 2
        want = [msg.format(w=w, op=m.upper(), m=m, r=r + (64 if m == "a" and w == 8 else 0), b=b,
                           wr=1 + (64 if m == "a" and w == 8 else 0), wb=wb)
                for w in (4, 8) for r, b, wb in ((0, 64, 0), (0, 96, 32), (1, 0, 64), (1, 32, 96))]
        assert check_kernel(parse(bad)).messages(40) == want
