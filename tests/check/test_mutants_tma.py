"""The copy engine's checker (`warpy/check/families/tma.py`) on small kernels, each breaking one TMA
rule beside its clean twin, the checker's whole verdict pinned word for word: MN-major operands
landed by TMA (the transposed layout an HGMMA or UMMA descriptor must read, the K its boxes are at),
a load from a tensor the launch also stores to (the load's global read against another CTA's
store), a 2-CTA load whose barrier names a CTA outside the cluster, a load completing on an
address that is no barrier, a bulk copy from memory no buffer holds (with values). Each case runs
in well under a second; docs/testing.md lists the mutation runs these tests answer."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from warpy.check.report import CheckOptions, check_kernel, options
from warpy.isa.text import parse
from warpy.kernels import gemm as G
from warpy.kernels.probes import PROBES


def _edit(text: str, *edits: tuple[str, str]) -> str:
    """Each (old, new) replaced once; `old` must occur exactly once."""
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def _verdict(text: str, limit: int = 40, **kw: Any) -> list[str]:
    return check_kernel(parse(text), **kw).messages(limit)


@functools.lru_cache(maxsize=None)
def _mn_gemm(arch: str) -> str:
    """A 128 x 64 x 64 GEMM whose A is stored K x M and B K x N (both MN-major: the boxes land M or N
    innermost, 128-byte swizzled, and the MMAs read them through transposed descriptors)."""
    prob = G.FAMILY.problem([128, 64, 64, "a=km", "b=kn"], arch=arch, out_dtype="fp32")
    # sm_90a: 64 x 128 tiles, whatever the rule's table says (the anchors below are that program's lines)
    return str(G.build(prob, G.configure(prob, "bn=128,consumers=1,stages=8") if arch == "sm_90a" else None).kernel())


@functools.lru_cache(maxsize=None)
def _one_box_tiles(*words: str, k: int = 128) -> str:
    """A 128 x 128 x k GEMM in 64-column tiles on 4 CTAs: each MMA's A and B tiles lie in one box, so
    the accumulator is tagged with their rows, and each CTA's stores are checked against them."""
    prob = G.FAMILY.problem([128, 128, k, *words], arch="sm_90a", out_dtype="fp32")
    return str(G.build(prob, G.configure(prob, "bn=64,consumers=1,stages=8")).kernel())  # 64 x 64 tiles, whatever the table


@functools.lru_cache(maxsize=None)
def _probe(name: str, arch: str) -> str:
    return str(PROBES[name].build(arch).kernel())


# -- MN-major operands landed by TMA: the transposed tile, the K of each box -------------------------

MN90 = _mn_gemm("sm_90a")
MN100 = _mn_gemm("sm_100a")
HG = "HGMMA.64x128x16.F32.BF16"
MEET = "CTA {c} warp {w}: {op} multiplies {a} at K byte {ka} with {b} at K byte {kb} (the boxes the copy engine landed there disagree)"
K_UNSUMMED = ("line {line} (STG.E): CTA 0 warp 4 stores c_out rows {r}..{r}, columns 0..31 from an accumulator with "
              "K bytes 0..31 of 128 (1 of its 4 k-steps of 32 bytes) never summed")
MN_READ = ("{who}: {op} reads its {which} operand with a 128-byte swizzle MN-major descriptor whose row {r}, K byte {k} is "
           "box row {br}, inner byte {bi} (not box row {wr}, inner byte {wi}); the copy engine landed it through tensor map "
           "{m} (128-byte swizzle, 128-byte rows)")
# a box of 64 K rows of A one descriptor's SBO short (512 bytes for 1024): K row 8 read from box row 4 on
SBO_HALF = [MN_READ.format(who="{who}", op="{op}", which="{which}", r=0, k=16, br=br, bi=0, wr=br + 4, wi=0, m="{m}")
            for br in (20, 36, 4, 52)]
MN_CASES = [
    ("clean-sm90", MN90, []),
    ("clean-sm100", MN100, []),
    ("clean-one-box-tiles", _one_box_tiles("a=km", "b=kn"), []),
    ("clean-one-box-tiles-k-major", _one_box_tiles(), []),
    # the first MMA's A one K step (16 rows of the box) on, B at K 0
    ("a-one-k-step-on", _edit(MN90, ("+ UIADD3 gmma_desc.0, sa_gdesc@cs, 0x0, URZ  // gdesc.lo sa[cs_stage, 0, 0]",
                                     "  UIADD3 gmma_desc.0, sa_gdesc@cs, 0x80, URZ")),
     [MEET.format(c=c, w=w, op=HG, a="a", ka=32, b="b", kb=0) for c in (0, 1) for w in range(4, 8)]),
    # the third MMA's B at the second K step: A at K byte 64, B at 32
    ("b-one-k-step-back", _edit(MN90, ("+ UIADD3 gmma_desc.2, sb_gdesc@cs, 0x100, URZ  // gdesc.lo sb[cs_stage, 0, 32]",
                                       "  UIADD3 gmma_desc.2, sb_gdesc@cs, 0x80, URZ")),
     [MEET.format(c=c, w=w, op=HG, a="a", ka=64, b="b", kb=32) for c in (0, 1) for w in range(4, 8)]),
    ("a-sbo-half", _edit(MN90, ("+ UMOV gmma_desc.1, 0x40000040  // gdesc.hi sa[0, 0, 0]", "  UMOV gmma_desc.1, 0x40000020")),
     [s.format(who="CTA 0 warp 4", op=HG, which="A", m="a") for s in SBO_HALF]),
    # A read through an unswizzled MN-major descriptor: its K rows run past the stage into one nothing loaded
    ("a-without-swizzle", _edit(MN90, ("+ UMOV gmma_desc.1, 0x40000040  // gdesc.hi sa[0, 0, 0]", "  UMOV gmma_desc.1, 0x40")),
     [f"sa[1]: {HG}, warp {w} reads it through the async proxy, and nothing has written it (an operand tile never "
      f"loaded or stored there) (6 times)" for w in range(4, 8)]
     + [f"CTA 0 warp 4: {HG} reads its A operand with a no-byte swizzle MN-major descriptor whose row 0, K byte 2 is box "
        f"row 0, inner byte 16 (not box row 1, inner byte 0); the copy engine landed it through tensor map a (128-byte "
        f"swizzle, 128-byte rows)"]),
    # B's LBO (the stride between its two 64-column boxes) half: N element 64 read from K row 32 of the first box
    ("b-lbo-half", _edit(MN90, ("+ UIADD3 sb_gdesc, sb_gdesc, 0x2000000, URZ  // gdesc.lo sb[0, 0, 0]",
                                "  UIADD3 sb_gdesc, sb_gdesc, 0x1000000, URZ")),
     [f"line {line} ({op}): gdesc.lo sb[cs_stage, 0, {k}] is 0x20{lo:05x}, the operand holds 0x10{lo:05x} (8 times)"
      for line, op, k, lo in ((165, "UIMAD", 0, 0x1040), (171, "UIADD3", 0, 0x1040), (174, "UIADD3", 16, 0x10c0),
                              (177, "UIADD3", 32, 0x1140), (180, "UIADD3", 48, 0x11c0))]
     + [MN_READ.format(who="CTA 0 warp 4", op=HG, which="B", r=64, k=0, br=br, bi=0, wr=wr, wi=128, m="b")
        for br, wr in ((32, 0), (48, 16))]),
    # B's tensor 48 rows of K where A's has 64 (K is an MN-major map's dimension 1)
    ("maps-disagree-on-k", _edit(MN90, (".tmap b dtype=bf16 dims=64,64", ".tmap b dtype=bf16 dims=64,48")),
     [f"CTA 0 warp 4: {HG} multiplies a, whose rows are 128 bytes of K, with b, whose rows are 96 (the tensor maps "
      f"disagree on K) (4 times)"]),
    # sm_100a: the operands swapped (the UMMA's A is the tensor's B) and a pair of CTAs
    ("umma-a-one-k-step-on", _edit(MN100, ("+ UIADD3 umma_a.0, UPT, UPT, sbt_udesc@cs, 0x0, URZ  // udesc.lo sbt[cs_stage, 0, 0]",
                                           "  UIADD3 umma_a.0, UPT, UPT, sbt_udesc@cs, 0x80, URZ")),
     [MEET.format(c=0, w=1, op="UTCHMMA.2CTA", a="b", ka=32, b="a", kb=0)]
     # and every store of the accumulator: its first k-step of the UMMA's A (the tensor b) never summed
     + [K_UNSUMMED.format(line=356 + 2 * r if r < 32 else 429 + 2 * (r - 32), r=r) for r in range(39)]
     + ["... and 25 more like these"]),
    ("umma-b-sbo-half", _edit(MN100, ("+ UMOV umma_b.1, 0x40004040  // udesc.hi sa[0, 0, 0]", "  UMOV umma_b.1, 0x40004020")),
     [s.format(who="CTA 0 warp 1", op="UTCHMMA.2CTA", which="B", m="a") for s in SBO_HALF]),
    ("umma-maps-disagree-on-k", _edit(MN100, (".tmap a dtype=bf16 dims=128,64", ".tmap a dtype=bf16 dims=128,48")),
     ["CTA 0 warp 1: UTCHMMA.2CTA multiplies b, whose rows are 128 bytes of K, with a, whose rows are 96 (the tensor "
      "maps disagree on K) (4 times)"]),
    # A's boxes 32 K rows deep (64 x 32, the expected bytes cut to match): the first two K steps are in
    # the box, compared as a box of 64-element rows 32 deep; the last two read what nothing landed
    ("a-boxes-half-as-deep", _edit(MN90, ("box=64,64 swizzle=128 elem_strides=1,1 l2_promotion=256\n.tmap b",
                                          "box=64,32 swizzle=128 elem_strides=1,1 l2_promotion=256\n.tmap b"),
                                   ("MOV tx_bytes, 0x6000", "MOV tx_bytes, 0x5000")),
     [f"sa[0]: {HG}, warp {w} reads it through the async proxy, and nothing has written it (an operand tile never "
      f"loaded or stored there) (4 times)" for w in range(4, 8)]),
    # the first MMA's B in the ring's second stage, which nothing loaded (A is in a landed box, B in none)
    ("b-in-a-stage-never-loaded", _edit(MN90, ("+ UIADD3 gmma_desc.2, sb_gdesc@cs, 0x0, URZ  // gdesc.lo sb[cs_stage, 0, 0]",
                                               "  UIADD3 gmma_desc.2, sb_gdesc@cs, 0x400, URZ")),
     [f"sb[1]: {HG}, warp {w} reads it through the async proxy, and nothing has written it (an operand tile never "
      f"loaded or stored there) (2 times)" for w in range(4, 8)]),
    # the 2-CTA load's barrier in CTA rank 2 of a cluster of 2: refused, nothing lands, everyone waits
    ("barrier-in-a-cta-the-cluster-has-not", _edit(MN100, ("  UPRMT tma_a.1, leader_rank, 0x654, tma_a.1\n",
                                                         "  UPRMT tma_a.1, leader_rank, 0x654, tma_a.1\n"
                                                         "  UIADD3 tma_a.1, UPT, UPT, tma_a.1, 0x2000000, URZ\n")),
     [f"CTA {c} warp 0: UTMALDG.2D.2CTA names a CTA the cluster has not" for c in (0, 1)]
     + ["hang: CTA 0 warp 1 waits on stage_full[0] for the phase of parity 0: it is in phase 0, 0 of 1 arrivals to come, "
        "16384 bytes"]
     + [f"hang: CTA {c} warp {w} waits on {bar}[0] for the phase of parity 0: it is in phase 0, 1 of 1 arrivals to come, 0 bytes"
        for c, w, bar in ((0, 0, "stage_empty"), (0, 4, "acc_full"), (0, 5, "acc_full"), (0, 6, "acc_full"),
                          (0, 7, "acc_full"), (1, 0, "stage_empty"), (1, 1, "tmem_free"), (1, 4, "acc_full"),
                          (1, 5, "acc_full"), (1, 6, "acc_full"), (1, 7, "acc_full"))]),
]


@pytest.mark.parametrize("name,text,want", MN_CASES, ids=[c[0] for c in MN_CASES])
def test_one_mn_major_operand_rule_broken(name: str, text: str, want: list[str]) -> None:
    assert _verdict(text) == want


@functools.lru_cache(maxsize=None)
def _ring() -> tuple[Any, str]:
    """The MN-major GEMM with K = 640: 10 k-blocks through an 8-stage ring, so the boxes of the first
    two stages land again over ones the MMAs read (18 refills)."""
    prob = G.FAMILY.problem([128, 64, 640, "a=km", "b=kn"], arch="sm_90a", out_dtype="fp32")
    return prob, str(G.build(prob, G.configure(prob, "bn=128,consumers=1,stages=8")).kernel())  # (64 x 128, as `_mn_gemm`)


def test_a_ring_of_mn_major_boxes_lands_each_k_block_once() -> None:
    prob, text = _ring()
    rep = check_kernel(parse(text), values=True, expect=G.FAMILY.expectation(prob))
    assert rep.messages(40) == [] and rep.refills == 18
    assert rep.values_checked == 128 * 64 and rep.values_wrong == 0
    # every k-block's A one K step on: each block's boxes (the refilled ones too) are the ones compared
    bad = check_kernel(parse(_edit(text, ("+ UIADD3 gmma_desc.0, sa_gdesc@cs, 0x0, URZ  // gdesc.lo sa[cs_stage, 0, 0]",
                                          "  UIADD3 gmma_desc.0, sa_gdesc@cs, 0x80, URZ"))))
    assert bad.messages(200) == sorted(MEET.format(c=c, w=w, op=HG, a="a", ka=128 * kb + 32, b="b", kb=128 * kb)
                                       for c in (0, 1) for w in range(4, 8) for kb in range(10))
    assert bad.refills == 18


# -- a load from a tensor the launch stores to: the load's global read --------------------------------

TMA = _probe("tma_copy_2d", "sm_90a")
# each CTA stores its tile back into src (where it loaded it from): ordered after the load's read,
# through the barrier phase the store's warp waited for
OWN = _edit(TMA, ("UTMASTG.2D [tmas_dst], tmap[dst]", "UTMASTG.2D [tmas_dst], tmap[src]"))
# ... 192 columns right and 64 rows down: CTA 0 stores over the box CTA 11 loads, unordered (CTA 11's
# own store lands wholly outside the tensor)
SHIFTED = _edit(OWN, ("  R2UR tmas_dst.1, crd0\n", "  IADD3 crd0, crd0, 0xc0, RZ\n  IADD3 crd1, crd1, 0x40, RZ\n"
                                                   "  R2UR tmas_dst.1, crd0\n"))
# ... then loads it again (the barrier's second phase) after waiting for the store: the load reads
# what the store wrote, ordered by the bulk-group wait; loaded before that wait, it races the store
# in global memory and overwrites the tile the store still reads
AGAIN = ("  @leader SYNCS.ARRIVE.TRANS64 RZ, [full_base], tx\n  UTMALDG.2D [tma_src], tmap[src]\n  MOV phase0, 0x80000000\n"
         "WAIT_AGAIN:\n  SYNCS.PHASECHK.TRANS64.TRYWAIT waited, [full_base], phase0\n  @!waited BRA WAIT_AGAIN\n")
HANG_FULL = "hang: CTA {c} warp {w} waits on full[0] for the phase of parity 0: it is in phase 0, 0 of 1 arrivals to come, 4096 bytes"
TMA_CASES = [
    ("store-over-its-own-box", OWN, []),
    ("store-over-another-cta-s-box", SHIFTED,
     ["src: UTMALDG.2D, warp 0 reads it and UTMASTG.2D, warp 0 writes it, and nothing orders the two (2 times)"]),
    ("load-after-the-store-s-wait", _edit(OWN, ("  DEPBAR.LE SB0, 0x0\n", "  DEPBAR.LE SB0, 0x0\n" + AGAIN)), []),
    ("load-before-the-store-s-wait", _edit(OWN, ("  DEPBAR.LE SB0, 0x0\n", AGAIN + "  DEPBAR.LE SB0, 0x0\n")),
     ["src: UTMASTG.2D, warp 0 writes it and UTMALDG.2D, warp 0 reads it, and nothing orders the two (3 times)",
      "tile: UTMASTG.2D, warp 0 reads it and UTMALDG.2D, warp 0 writes it, and nothing orders the two (2 times)"]),
    # the load completes on the barrier's second word, or on the tile: refused, nothing lands
    ("barrier-off-its-word", _edit(TMA, ("+ UIADD3 tma_src.1, full_base, 0x0, URZ  // addr full[0]",
                                         "  UIADD3 tma_src.1, full_base, 0x4, URZ")),
     [HANG_FULL.format(c=c, w=w) for c in (0, 11) for w in range(4)]
     + [f"CTA {c} warp 0: UTMALDG.2D uses shared 0x1404 as an mbarrier, which is not 8-byte aligned" for c in (0, 11)]),
    ("barrier-on-the-tile", _edit(TMA, ("+ UIADD3 tma_src.1, full_base, 0x0, URZ  // addr full[0]",
                                        "  UIADD3 tma_src.1, tile_base, 0x0, URZ")),
     [HANG_FULL.format(c=c, w=w) for c in (0, 11) for w in range(4)]
     + [f"CTA {c} warp 0: UTMALDG.2D uses shared 0x400 as an mbarrier, which no mbarrier buffer declares" for c in (0, 11)]),
]


@pytest.mark.parametrize("values", [False, True])
@pytest.mark.parametrize("name,text,want", TMA_CASES, ids=[c[0] for c in TMA_CASES])
def test_one_load_rule_broken(name: str, text: str, want: list[str], values: bool) -> None:
    assert _verdict(text, values=values) == want


def test_a_bulk_copy_from_outside_every_buffer_lands_nothing_it_read() -> None:
    """Both copies of the bulk-copy kernel read 4 KiB past `src`: refused, with values too (no image
    of memory nobody holds lands in shared memory)."""
    from tests.check.test_mutants_check import HEAD, BODY

    body = _edit(BODY, ("  ULDC.64 gsrc, c[0x0][src]\n", "  ULDC.64 gsrc, c[0x0][src]\n  UIADD3 gsrc.0, gsrc.0, 0x1000, URZ\n"))
    want = [f"CTA 0 warp 0: UBLKCP.S.G touches global src+0x{o:x}..+0x40, outside every global buffer the kernel declares"
            for o in (0x1000, 0x1040)]
    for values in (False, True):
        assert _verdict(HEAD + body, values=values) == want


def test_a_bulk_copy_off_16_bytes_in_shared_memory() -> None:
    """The second bulk copy lands at 8 bytes past a 16-byte boundary: reported with no swizzle's
    repeat in the message (a bulk copy has none)."""
    from tests.check.test_mutants_check import HEAD, BODY

    body = _edit(BODY, ("  UIADD3 cp.0, smem, 0xc0, URZ\n", "  UIADD3 cp.0, smem, 0xc8, URZ\n"))
    assert _verdict(HEAD + body) == ["CTA 0 warp 0: UBLKCP.S.G lands at shared 0x4c8, which is not 16-byte aligned"]


def test_a_store_inside_a_ragged_tensor_does_not_reach_its_row_end() -> None:
    """Rows of 196 fp16 (wider than the 90 rows are many): CTA 0's box at columns 64..127 ends inside
    its rows (nothing reported), CTA 11's lands wholly outside."""
    from tests.check.test_mutants_families import TMA as COPY, _moved

    ragged = _edit(COPY, (".tmap dst dtype=fp16 dims=200,90", ".tmap dst dtype=fp16 dims=196,90"))
    assert _verdict(_moved(ragged, 64, 0)) == []


def test_a_table_slot_named_by_its_map_s_name_still_needs_the_fence() -> None:
    """The relay's load names map x directly (`tmap[x]`, not the slot's descriptor) with no
    tensor-map proxy fence: the message names the map as its own place; the store through the
    descriptor names the slot."""
    from tests.kernels.test_mega_tma_table import relay

    text = _edit(relay(acquire_fence=False).text(), ("  @leader UTMALDG.2D [tma_args2], tmap[map_desc]",
                                                    "  @leader UTMALDG.2D [tma_args2], tmap[x]"))
    unfenced = ("CTA {c} warp 0: {op} uses tensor map {m} ({where}) from the table maps the host wrote, without fencing "
                "the tensor-map proxy on it first (UTMACCTL.IV: fence.proxy.tensormap::generic.acquire)")
    assert _verdict(text) == [unfenced.format(c=c, op=op, m=mp, where=where) for c, op, mp, where in (
        (0, "UTMALDG.2D", "x", "x"), (0, "UTMASTG.2D", "y", "maps slot 1"), (1, "UTMALDG.2D", "x", "x"),
        (1, "UTMASTG.2D", "z", "maps slot 2"))]


@pytest.mark.parametrize("k", [128, 64])
@pytest.mark.parametrize("words", [(), ("a=km", "b=kn")], ids=["k-major", "mn-major"])
def test_a_box_of_a_64_rows_below_the_stored_tile(words: tuple[str, ...], k: int) -> None:
    """The producer loads A's box 64 rows (one tile) below the tile the epilogue stores: every store
    of CTAs 0 and 3 names the rows of A the accumulator holds (the box's rows the descriptor read).
    At K = 64 an MN-major map's rows (its dimension 0, 128) differ from its dimension 1 (K): the
    output's shape is matched against the rows, not against K (at K = 128 both are 128)."""
    text = _edit(_one_box_tiles(*words, k=k), ("  IMAD m0, m_blk, 0x40, RZ", "  IMAD m0, m_blk, 0x40, 0x40"))
    want = []
    for c in (0, 3):
        t = 64 * (c // 3)  # the tile's first row and column
        for w in range(4, 8):
            for j in range(16):  # each store: 8 rows, 7 columns (two fp32 a lane) of the warp's 16 rows
                r, col = t + 16 * (w - 4) + 8 * (j // 8), t + 8 * (j % 8)
                want.append(f"line {208 + j} (STG.E.64): CTA {c} warp {w} stores c_out rows {r}..{r + 7}, columns "
                            f"{col}..{col + 6} from an accumulator of rows {t + 64}..{t + 127} of a times rows "
                            f"{t}..{t + 63} of b")
    assert _verdict(text, limit=200) == sorted(want)


@pytest.mark.parametrize("k", [128, 64])
@pytest.mark.parametrize("words", [(), ("a=km", "b=kn")], ids=["k-major", "mn-major"])
def test_every_cta_of_the_one_box_gemm_is_clean(words: tuple[str, ...], k: int) -> None:
    """All 4 CTAs run (CTAs 1 and 2 multiply rows of A and B from different blocks: each operand's K is
    its own box's K coordinate, not its row coordinate)."""
    with options(CheckOptions(all_ctas=True)):
        assert check_kernel(parse(_one_box_tiles(*words, k=k))).messages() == []


def test_an_unswizzled_operand_s_wrong_lbo_is_caught_by_its_values() -> None:
    """The `wgmma_fp16_sw0` probe's B read with an LBO of 256 bytes where its two K columns land 1024
    apart (one 16-byte-wide box each): the layout check compares only tiles inside one box, so the
    verdict without values is clean (docs/testing.md: a gap); with values the product differs."""
    import numpy as np

    from warpy.kernels.probes import ProbeExpectation

    pr = PROBES["wgmma_fp16_sw0"]
    assert pr.host is not None
    text = _edit(_probe("wgmma_fp16_sw0", "sm_90a"), ("UIADD3 gmma_desc.2, gmma_desc.2, 0x400000, URZ",
                                                      "UIADD3 gmma_desc.2, gmma_desc.2, 0x100000, URZ"))
    assert _verdict(text) == []
    rep = check_kernel(parse(text), values=True, expect=ProbeExpectation(pr.host(np.random.default_rng(7))))
    assert rep.messages() == ["values: 3996 of 4096 elements of out differ, first [0] = 10.0 where the host expects 33.0"]
