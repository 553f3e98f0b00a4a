"""The copy engine's handlers (`_tma_load`, `_tma_store`, `_tma_prefetch`, `_tmap_control`, `_bulk_copy`,
`_commit`, `_wait` of `warpy/check/families/tma.py`) on small kernels: each breaks one rule beside its
clean twin, the checker's whole verdict pinned word for word, or runs with values and pins the words
it wrote. Each case runs in well under a second; docs/testing.md ("check-families: the handlers of
`tma.py`") lists the mutation run these tests answer."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

from warpy.check.report import check_kernel
from warpy.isa.text import parse
from warpy.kernels.probes import HostCase, ProbeExpectation

from test_mutants_check import BODY, HEAD
from test_mutants_families import TMA


def _edit(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def _verdict(text: str, **kw: object) -> list[str]:
    return check_kernel(parse(text), **kw).messages(20)  # type: ignore[arg-type]


# -- bulk copies (UBLKCP), shared -> global: one warp writes a word a lane into `data`, fences the proxy,
# copies the 128 bytes to `dst` and waits for the copy's reads

OUT_HEAD = HEAD.replace(".param src u64\n", ".param src u64\n.param dst u64\n").replace(
    ".buffer bars smem", ".buffer dst global base=0x0 size=0x100 elem=u32 source=dst layout=64:4\n.buffer bars smem").replace(
    ".reg UR[2] cp\n", ".reg UR[2] cp\n.reg UR sa\n.reg UR[2] gdst\n.reg R[2] q\n.reg UR[2] memdesc\n")
ONE_WARP = OUT_HEAD.replace(".threads 64", ".threads 32")
STORE = """\
  S2R lane, SR_LANEID
  UMOV smem, `(dsmem)
  IMAD addr, lane, 0x4, RZ
  MOV v, 0x7
  STS [addr+smem+0x80], v
  FENCE.VIEW.ASYNC.S
  ELECT leader, URZ, PT
  ULDC.64 gdst, c[0x0][dst]
  UMOV size, 0x80
  UIADD3 sa, smem, 0x80, URZ
  @leader UBLKCP.G.S [gdst], [sa], size
  @leader UTMACMDFLUSH
  @leader DEPBAR.LE SB0, 0x0
  EXIT
"""
GS = "CTA 0 warp 0: UBLKCP.G.S "
# two warps: each copies the 64 bytes of its own words to dst + 64 x warp (apart), or to the same
# 64 bytes; or warp 1 stores one word of dst with an STG
TWO = """\
  S2R tid, SR_TID.X
  S2R lane, SR_LANEID
  SHF.R.U32.HI warp, RZ, 0x5, tid
  UMOV smem, `(dsmem)
  IMAD addr, tid, 0x4, RZ
  MOV v, 0x7
  STS [addr+smem+0x80], v
  FENCE.VIEW.ASYNC.S
  ELECT leader, URZ, PT
  ULDC.64 gdst, c[0x0][dst]
  UMOV size, 0x40
  IMAD addr, warp, 0x40, RZ
  R2UR cp.0, addr
  UIADD3 gdst.0, gdst.0, cp.0, URZ
  IMAD addr, warp, 0x80, RZ
  R2UR cp.1, addr
  UIADD3 sa, smem, cp.1, URZ
  UIADD3 sa, sa, 0x80, URZ
  @leader UBLKCP.G.S [gdst], [sa], size
  @leader UTMACMDFLUSH
  @leader DEPBAR.LE SB0, 0x0
  EXIT
"""
ONE_WORD = _edit(TWO, "  ELECT leader, URZ, PT\n",
                 "  ELECT leader, URZ, PT\n  ISETP.EQ.U32.AND w0, PT, warp, 0x0, PT\n  @w0 BRA COPY\n"
                 "  LDC.64 q, c[0x0][dst]\n  ULDC.64 memdesc, c[0x0][0x208]\n  STG.E desc[memdesc][q.64+0x3c], v\n  EXIT\nCOPY:\n")
BOTH = "dst: UBLKCP.G.S, warp 0 writes it and {}, warp 1 writes it, and nothing orders the two"

STORE_CASES = [
    ("clean", ONE_WARP, STORE, []),
    ("size-not-16", ONE_WARP, _edit(STORE, "UMOV size, 0x80", "UMOV size, 0x48"),
     [GS + "copies 72 bytes: a bulk copy moves a positive multiple of 16 bytes"]),
    ("size-0", ONE_WARP, _edit(STORE, "UMOV size, 0x80", "UMOV size, 0x0"),
     [GS + "copies 0 bytes: a bulk copy moves a positive multiple of 16 bytes",
      GS + "touches global dst+0x0..+0x0, outside every global buffer the kernel declares"]),
    ("global-off-16", ONE_WARP, _edit(STORE, "  UMOV size, 0x80\n", "  UMOV size, 0x80\n  UIADD3 gdst.0, gdst.0, 0x8, URZ\n"),
     [GS + "writes global 0x20000000008, which is not 16-byte aligned"]),
    ("global-past-the-buffer", ONE_WARP, _edit(STORE, "  UMOV size, 0x80\n", "  UMOV size, 0x80\n  UIADD3 gdst.0, gdst.0, 0x100, URZ\n"),
     [GS + "touches global dst+0x100..+0x80, outside every global buffer the kernel declares"]),
    ("shared-off-16", ONE_WARP, _edit(STORE, "UIADD3 sa, smem, 0x80, URZ", "UIADD3 sa, smem, 0x88, URZ"),
     [GS + "stores from shared 0x488, which is not 16-byte aligned"]),
    ("shared-past-the-buffer", ONE_WARP, _edit(STORE, "UIADD3 sa, smem, 0x80, URZ", "UIADD3 sa, smem, 0x180, URZ"),
     [GS + "touches shared 0x580..0x600, outside every shared buffer the kernel declares"]),
    # a dependent launch's wait (ACQBULK) after the copy
    ("before-the-dependent-launch-wait", ONE_WARP, _edit(STORE, "  EXIT\n", "  ACQBULK\n  EXIT\n"),
     [GS + "reaches global memory before the dependent-launch wait (ACQBULK)"]),
    ("two-warps-apart", OUT_HEAD, TWO, []),
    ("two-warps-same-bytes", OUT_HEAD, _edit(TWO, "IMAD addr, warp, 0x40, RZ", "IMAD addr, warp, 0x0, RZ"),
     [BOTH.format("UBLKCP.G.S")]),
    ("a-word-of-the-copy-s-last-16-bytes", OUT_HEAD, ONE_WORD, [BOTH.format("STG.E")]),
    ("the-word-after-the-copy", OUT_HEAD, _edit(ONE_WORD, "q.64+0x3c", "q.64+0x40"), []),
]


@pytest.mark.parametrize("name,head,body,want", STORE_CASES, ids=[c[0] for c in STORE_CASES])
def test_a_bulk_copy_to_global_memory(name: str, head: str, body: str, want: list[str]) -> None:
    assert _verdict(head + body) == want


def test_a_bulk_copy_to_global_memory_writes_its_bytes_with_values() -> None:
    """With values the copy's 128 bytes land in `dst` (32 words of 7), marked written; the rest of
    `dst` is untouched."""
    from warpy.check.machine import Machine

    m = Machine(parse(ONE_WARP + STORE), values=True)
    m.run()
    assert m.problems.total() == 0
    words = m.gmem["dst"][:256].view(np.uint32)
    assert (words[:32] == 7).all() and (words[32:64] == 0).all()
    assert m.gwritten["dst"][:128].all() and not m.gwritten["dst"][128:256].any()


def test_a_bulk_copy_s_writes_are_released_only_after_a_writes_wait() -> None:
    """Like a TMA store's: the copy's global writes join the warp's GPU-scope release (its MEMBAR.GPU
    before a flag) only once a `DEPBAR.LE.WRITES` wait for the group's writes has passed;
    a plain wait (the copy's reads done) leaves them out of the release."""
    from warpy.check.machine import Machine

    for wait, released in (("@leader DEPBAR.LE SB0, 0x0\n", False), ("@leader DEPBAR.LE.WRITES SB0, 0x0\n", True)):
        body = _edit(STORE, "  @leader DEPBAR.LE SB0, 0x0\n", "  " + wait)
        m = Machine(parse(ONE_WARP + body))
        m.run()
        w = m.warps[0]
        pending = m.global_memory.bulk_writes.get(w.gid, [])
        assert (not pending) == released, wait
        assert bool(w.gunfenced) == released, wait


# -- bulk copies, global -> shared: test_mutants_check.py's base program (two copies of 64 bytes into
# `data`, completing on a barrier the consumer waits on)

LOAD_CASES = [
    ("size-not-16", _edit(BODY, "UMOV size, 0x40", "UMOV size, 0x48"),
     # (144 bytes land for the 128 declared: the count goes past zero, and the copies overlap)
     [f"hang: CTA 0 warp {w} waits on bars[0] for the phase of parity 0: it is in phase 0, 0 of 1 arrivals to come, -16 "
      f"bytes" for w in (0, 1)]
     + ["CTA 0 warp 0: UBLKCP.S.G copies 72 bytes: a bulk copy moves a positive multiple of 16 bytes (2 times)",
        "data: UBLKCP.S.G, warp 0 writes it and UBLKCP.S.G, warp 0 writes it, and nothing orders the two"]),
    ("global-off-16", _edit(BODY, "  UIADD3 gsrc.0, gsrc.0, 0x40, URZ\n", "  UIADD3 gsrc.0, gsrc.0, 0x48, URZ\n"),
     ["CTA 0 warp 0: UBLKCP.S.G reads global 0x10000000048, which is not 16-byte aligned"]),
    ("before-the-dependent-launch-wait", _edit(BODY, "  MOV par, RZ\nWAITP:", "  ACQBULK\n  MOV par, RZ\nWAITP:"),
     ["CTA 0 warp 0: UBLKCP.S.G reaches global memory before the dependent-launch wait (ACQBULK) (2 times)"]),
]


@pytest.mark.parametrize("name,body,want", LOAD_CASES, ids=[c[0] for c in LOAD_CASES])
def test_a_bulk_copy_to_shared_memory(name: str, body: str, want: list[str]) -> None:
    assert _verdict(HEAD + body) == want


def test_a_bulk_copy_lands_the_words_it_read() -> None:
    """With values: the consumer stores the 32 words it read from `data` to `dst`, each the one the
    copies brought from `src`."""
    body = _edit(BODY, "  LDS v, [addr+smem+0x80]\n",
                 "  LDS v, [addr+smem+0x80]\n  LDC.64 q, c[0x0][dst]\n  ULDC.64 memdesc, c[0x0][0x208]\n"
                 "  IMAD.WIDE.U32 q, lane, 0x4, q\n  STG.E desc[memdesc][q.64], v\n")
    src = (np.arange(64, dtype=np.uint32) * 0x01010101 + 0x10).astype(np.uint32)
    want = np.concatenate([src[:32], np.zeros(32, np.uint32)])
    e = ProbeExpectation(HostCase(arrays={"src": src, "dst": np.zeros(64, np.uint32)}, expected={"dst": want}))
    assert check_kernel(parse(OUT_HEAD + body), values=True, expect=e).messages(20) == []
    assert e.outputs["dst"].tolist() == want.tolist()


def test_without_values_a_bulk_copy_lands_the_words_kept_of_a_u32_buffer() -> None:
    """Without values the 32-bit words of a u32 buffer are kept (an instruction queue): the copies land
    them in shared memory, the consumer reads words 5, 31 and 7 (0) back and stores at the address each
    holds (two past every buffer, reported; the third inside `data`)."""
    src = (0x400 + 4 * np.arange(64)).astype(np.uint32)
    src[7] = 0
    body = _edit(BODY, "  LDS v, [addr+smem+0x80]\n",
                 "".join(f"  LDS v, [smem+0x{0x80 + 4 * k:x}]\n  STS [v+smem+0x100], lane\n" for k in (5, 31, 7)))
    e = ProbeExpectation(HostCase(arrays={"src": src}, expected={}))
    assert check_kernel(parse(HEAD + body), expect=e).messages(20) == [
        f"CTA 0 warp 1: STS touches shared 0x{a:x}..0x{a + 4:x}, outside every shared buffer the kernel declares"
        for a in (0x914, 0x97c)]


# -- tensor-map stores on tma_copy_2d (test_mutants_families.py: 12 CTAs, each loads its box, dumps it
# and stores it back through `dst`)

TMA_ST = "+ UIADD3 tmas_dst.0, tile_base, 0x0, URZ  // addr tile[0, 0]"
DUMP = "  LDS.128 v, [soff+tile_base+0x800]\n  STG.E.128 desc[memdesc][gaddr.64+0x800], v\n"
ST = "CTA {c} warp 0: UTMASTG.2D "
TMA_STORE_CASES = [
    ("from-shared-off-the-swizzle-repeat", _edit(TMA, TMA_ST, "  UIADD3 tmas_dst.0, tile_base, 0x80, URZ"),
     [m for c in (0, 11) for m in (
         ST.format(c=c) + "stores a box from shared 0x480, which is not 1024-byte aligned (a 128-byte swizzle repeats "
                          "every 1024 bytes)",
         ST.format(c=c) + "touches shared 0x480..0x1480, outside every shared buffer the kernel declares")]),
    ("from-past-shared-memory", _edit(TMA, TMA_ST, "  UIADD3 tmas_dst.0, tile_base, 0x1000, URZ"),
     [ST.format(c=c) + "touches shared 0x1400..0x2400, outside every shared buffer the kernel declares" for c in (0, 11)]),
    # the store's box (not the load's) 4 elements right
    ("starting-off-16-bytes", _edit(TMA, "  R2UR tmas_dst.1, crd0\n", "  IADD3 crd0, crd0, 0x4, RZ\n  R2UR tmas_dst.1, crd0\n"),
     [ST.format(c=c) + f"copies a box of dst starting at element {e} of its innermost dimension ({2 * e} bytes, not a "
                       f"multiple of 16): the engine raises an illegal instruction" for c, e in ((0, 4), (11, 196))]),
    # each thread writes its 16 bytes of the tile back (STS) before the proxy fence: clean; after it,
    # the store reads them through the async proxy unordered
    ("generic-writes-fenced", _edit(TMA, DUMP, DUMP + "  STS.128 [soff+tile_base], v\n"), []),
    ("generic-writes-not-fenced", _edit(TMA, DUMP + "  FENCE.VIEW.ASYNC.S\n", DUMP + "  STS.128 [soff+tile_base], v\n"),
     [f"tile: UTMASTG.2D, warp 0 reads it through the async proxy and STS.128, warp {w} writes it through the generic "
      f"proxy, and no proxy fence orders the two (2 times)" for w in range(4)]),
]


@pytest.mark.parametrize("name,text,want", TMA_STORE_CASES, ids=[c[0] for c in TMA_STORE_CASES])
def test_a_tensor_map_store(name: str, text: str, want: list[str]) -> None:
    assert _verdict(text) == want


def test_tensor_copies_before_the_dependent_launch_wait() -> None:
    msgs = _verdict(_edit(TMA, "SKIP_4:\n  EXIT\n", "SKIP_4:\n  ACQBULK\n  EXIT\n"))
    assert [m for m in msgs if "UTMA" in m] == [
        f"CTA {c} warp 0: {op} reaches global memory before the dependent-launch wait (ACQBULK)"
        for c in (0, 11) for op in ("UTMALDG.2D", "UTMASTG.2D")]


# -- reduce-add stores (UTMAREDG.ADD) with values: the box added into dst, fp16 and bf16 (small
# integers: every sum exact); the same kernel storing (UTMASTG) leaves the sums wrong

RED = _edit(TMA, "UTMASTG.2D [tmas_dst], tmap[dst]", "UTMAREDG.2D.ADD [tmas_dst], tmap[dst]")


def _bits(x: np.ndarray, dt: str) -> np.ndarray:
    if dt == "fp16":
        return x.astype(np.float16).view(np.uint16)
    return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


@pytest.mark.parametrize("dt", ["fp16", "bf16"])
@pytest.mark.parametrize("op,wrong", [("UTMAREDG.2D.ADD", 0), ("UTMASTG.2D", 2116)])
def test_a_reduce_add_store_adds_the_box(dt: str, op: str, wrong: int) -> None:
    rng = np.random.default_rng(5)
    a, b = rng.integers(0, 16, (90, 200)), rng.integers(0, 16, (90, 208))
    want = _bits(b, dt)
    want[:, :200] = _bits(a + b[:, :200], dt)
    e = ProbeExpectation(HostCase(arrays={"src": _bits(a, dt), "dst": _bits(b, dt), "dump": np.zeros(49152, np.uint8)},
                                  expected={"dst": want}))
    text = RED.replace("UTMAREDG.2D.ADD", op).replace("dtype=fp16", f"dtype={dt}")
    rep = check_kernel(parse(text), values=True, expect=e)
    # CTAs 0 and 11 are simulated: their boxes' 2256 elements inside the tensor
    assert (rep.values_checked, rep.values_wrong) == (2256, wrong)
    assert len(rep.messages(20)) == (1 if wrong else 0)


# -- a prefetch (UTMAPF) and the tensor-map fence (UTMACCTL) on test_mega_tma_table.py's relay: two CTAs
# copy through maps that are slots of a table in global memory (CTA 0: x to y, CTA 1: y to z)

UNFENCED = ("CTA {c} warp 0: {op} uses tensor map {m} (maps slot {s}) from the table maps the host wrote, without fencing "
            "the tensor-map proxy on it first (UTMACCTL.IV: fence.proxy.tensormap::generic.acquire)")
NO_SLOT = "CTA {c} warp 0: {op} takes its tensor map from maps+0x{a:x}, no slot of its table (slots at maps + 0x80 k, k < 3)"
LOAD_ARGS = "  UMOV tma_args2.2, 0x0\n"
# the two maps each CTA uses, (name, slot), its load's and its store's
MAPS = {0: (("x", 0), ("y", 1)), 1: (("y", 1), ("z", 2))}


def _relay(fence: bool) -> str:
    from tests.kernels.test_mega_tma_table import relay

    return relay(acquire_fence=fence).text()


def _prefetch(text: str, c0: int = 0) -> str:
    """A prefetch of the load's box (at (c0, 0)) through the load's map, just before the load."""
    text = text.replace(".reg R tid\n", ".reg R tid\n.reg UR[2] pfa\n", 1)
    return _edit(text, LOAD_ARGS, LOAD_ARGS + f"  UMOV pfa.0, 0x{c0:x}\n  UMOV pfa.1, 0x0\n  UTMAPF.L2.2D [pfa], tmap[map_desc]\n")


def _off_slot(text: str, line: str) -> str:
    """`line` (naming tmap[map_desc]) run with the descriptor's address 8 bytes into its slot."""
    return _edit(text, line, "  UIADD3 map_desc.0, map_desc.0, 0x8, URZ\n" + line + "  UIADD3 map_desc.0, map_desc.0, -0x8, URZ\n")


def _unfenced(*ops: str) -> list[str]:
    return [UNFENCED.format(c=c, op=op, m=MAPS[c][op == "UTMASTG.2D"][0], s=MAPS[c][op == "UTMASTG.2D"][1])
            for c in (0, 1) for op in ops]


TABLE_CASES = [
    ("prefetch", lambda: _prefetch(_relay(True)), []),
    ("prefetch-without-the-fence", lambda: _prefetch(_relay(False)), _unfenced("UTMALDG.2D", "UTMAPF.L2.2D", "UTMASTG.2D")),
    ("prefetch-off-16-bytes", lambda: _prefetch(_relay(True), 4),
     [f"CTA {c} warp 0: UTMAPF.L2.2D copies a box of {MAPS[c][0][0]} starting at element 4 of its innermost dimension "
      f"(8 bytes, not a multiple of 16): the engine raises an illegal instruction" for c in (0, 1)]),
    ("prefetch-off-its-slot", lambda: _off_slot(_prefetch(_relay(True)), "  UTMAPF.L2.2D [pfa], tmap[map_desc]\n"),
     [NO_SLOT.format(c=c, op="UTMAPF.L2.2D", a=0x80 * c + 8) for c in (0, 1)]),
    # UTMACCTL.PF fences nothing
    ("control-pf-is-no-fence", lambda: _edit(_relay(False), "  MOV tx, 0x800\n", "  UTMACCTL.PF tmap[map_desc]\n  MOV tx, 0x800\n"),
     _unfenced("UTMALDG.2D", "UTMASTG.2D")),
    # the load's fence 8 bytes into the slot: refused, and the load is then unfenced
    ("control-iv-off-its-slot",
     lambda: _off_slot(_relay(True), "  UTMACCTL.IV tmap[map_desc]\n  MOV tx, 0x800\n"),
     [m for c in (0, 1) for m in (NO_SLOT.format(c=c, op="UTMACCTL.IV", a=0x80 * c + 8),
                                  UNFENCED.format(c=c, op="UTMALDG.2D", m=MAPS[c][0][0], s=MAPS[c][0][1]))]),
]


@pytest.mark.parametrize("name,text,want", TABLE_CASES, ids=[c[0] for c in TABLE_CASES])
def test_a_prefetch_and_the_tensor_map_fence(name: str, text: Callable[[], str], want: list[str]) -> None:
    assert _verdict(text()) == want


# -- bulk groups: two copies of 64 bytes in two groups (DEPBAR.LE SB0, 0x1 then waits for the first
# only), or in one; the leader then writes a word of a copy's source, and waits for everything

GROUPS = _edit(STORE, """  UMOV size, 0x80
  UIADD3 sa, smem, 0x80, URZ
  @leader UBLKCP.G.S [gdst], [sa], size
  @leader UTMACMDFLUSH
  @leader DEPBAR.LE SB0, 0x0
""", """  UMOV size, 0x40
  UIADD3 sa, smem, 0x80, URZ
  @leader UBLKCP.G.S [gdst], [sa], size
  @leader UTMACMDFLUSH
  UIADD3 sa, smem, 0xc0, URZ
  UIADD3 gdst.0, gdst.0, 0x40, URZ
  @leader UBLKCP.G.S [gdst], [sa], size
  @leader UTMACMDFLUSH
  @leader DEPBAR.LE SB0, 0x1
  @leader STS [smem+0x80], v
  @leader DEPBAR.LE SB0, 0x0
""")
SOURCE_WRITTEN = "data: UBLKCP.G.S, warp 0 reads it and STS, warp 0 writes it, and nothing orders the two"


@pytest.mark.parametrize("name,body,want", [
    ("the-first-group-s-source", GROUPS, []),
    ("the-second-group-s-source", _edit(GROUPS, "STS [smem+0x80]", "STS [smem+0xc0]"), [SOURCE_WRITTEN]),
    ("one-group", _edit(GROUPS, "  @leader UTMACMDFLUSH\n  UIADD3 sa, smem, 0xc0", "  UIADD3 sa, smem, 0xc0"), [SOURCE_WRITTEN]),
])
def test_a_wait_for_all_groups_but_one(name: str, body: str, want: list[str]) -> None:
    assert _verdict(ONE_WARP + body) == want


def test_two_ctas_reduce_into_one_box_unordered_but_do_not_store_into_it() -> None:
    """CTAs 0 and 11 both put their box at (0, 0) of dst: two reduce-adds need no order, two stores do."""
    same = _edit(RED, "  R2UR tmas_dst.1, crd0\n  R2UR tmas_dst.2, crd1\n", "  UMOV tmas_dst.1, 0x0\n  UMOV tmas_dst.2, 0x0\n")
    assert _verdict(same) == []
    assert _verdict(same.replace("UTMAREDG.2D.ADD", "UTMASTG.2D")) == [
        "dst: UTMASTG.2D, warp 0 writes it and UTMASTG.2D, warp 0 writes it, and nothing orders the two"]


def test_two_stores_of_one_box_in_one_group() -> None:
    """The copies of one bulk group are not ordered with each other; the report counts each store run."""
    twice = _edit(TMA, "  UTMASTG.2D [tmas_dst], tmap[dst]\n", "  UTMASTG.2D [tmas_dst], tmap[dst]\n" * 2)
    rep = check_kernel(parse(twice))
    assert rep.messages(20) == [
        "dst: UTMASTG.2D, warp 0 writes it and UTMASTG.2D, warp 0 writes it, and nothing orders the two (3 times)"]
    # the two CTAs the main run simulates store once more each
    assert rep.stores - check_kernel(parse(TMA)).stores == 2


def test_the_hb_table_names_the_bulk_group_wait() -> None:
    """The leader's write of the first copy's source is ordered after that copy's read by the wait."""
    table = check_kernel(parse(ONE_WARP + GROUPS), hb=True).hb_table
    assert table[("data", "UBLKCP.G.S", 0, "STS", 0, "", "bulk-group wait", "r", "w")] == 1


def test_a_store_twice_in_one_group_before_any_other_global_write() -> None:
    """The relay's store issued twice in its group: the two copies are unordered with each other; the
    second one's write merges into the first's record (the warp has no other global write to hold back
    until its bulk-group wait)."""
    store = "  UTMASTG.2D [tmas_args2], tmap[map_desc]\n"
    assert _verdict(_edit(_relay(True), store, store * 2)) == [
        "mem_words: UTMASTG.2D, warp 0 writes it and UTMASTG.2D, warp 0 writes it, and nothing orders the two (2 times)"]


# -- a multicast load: tma_copy_2d in clusters of two (a cluster barrier after the init); rank 0 loads its
# box into the CTAs of the mask, each of which waits on its own barrier for 4096 bytes

def _multicast(mask: int, pair: bool = False) -> str:
    text = TMA.replace(".cluster 1 1 1", ".cluster 2 1 1").replace(".reg R tid\n", ".reg R tid\n.reg R rank\n.reg P r1\n"
                                                                   ".reg UR mcmask\n", 1)
    text = _edit(text, "INIT_DONE_1:\n  BAR.SYNC.DEFER_BLOCKING 0x0\n",
                 "INIT_DONE_1:\n  BAR.SYNC.DEFER_BLOCKING 0x0\n  UCGABAR_ARV\n  UCGABAR_WAIT\n")
    return _edit(text, "  UTMALDG.2D [tma_src], tmap[src]\n",
                 f"  S2R rank, SR_CgaCtaId\n  ISETP.NE.U32.AND r1, PT, rank, 0x0, PT\n  @r1 BRA SKIP_2\n  UMOV mcmask, 0x{mask:x}\n"
                 f"  UTMALDG.2D.MULTICAST{'.2CTA' if pair else ''} [tma_src], tmap[src], mcmask\n")


FULL_HANG = "hang: CTA {c} warp {w} waits on full[0] for the phase of parity 0: it is in phase 0, 0 of 1 arrivals to come, 4096 bytes"


@pytest.mark.parametrize("mask,hung", [(0b11, ()), (0b01, (1, 11)), (0b10, (0, 10))])
def test_a_multicast_lands_in_the_ctas_of_its_mask(mask: int, hung: tuple[int, ...]) -> None:
    """The simulated clusters are CTAs 0, 1 and 10, 11: a CTA outside the mask never gets its bytes."""
    assert _verdict(_multicast(mask)) == [FULL_HANG.format(c=c, w=w) for c in hung for w in range(4)]


def test_a_2cta_multicast_completes_on_the_pair_s_even_barrier() -> None:
    """.2CTA: both boxes complete on rank 0's barrier (8192 bytes where 4096 are expected: it completes,
    the second half unwaited at exit), rank 1's never gets its bytes."""
    assert _verdict(_multicast(0b11, pair=True)) == [FULL_HANG.format(c=c, w=w) for c in (1, 11) for w in range(4)] + [
        f"CTA {c}: UTMALDG.2D.MULTICAST.2CTA, warp 0 completes bytes on full[0] asynchronously, and nothing orders that "
        f"before CTA {c} exits (no wait of its warps sees it done: its shared memory may be gone)" for c in (0, 10)]


def _relay_y_at(yoff: int, writes: bool, read: int) -> str:
    """The relay with y (and z after it) moved to byte `yoff` of mem, CTA 1 reading y's word at byte `read`
    of mem with an LDG after its acquire (besides its TMA load of y)."""
    from tests.kernels.test_mega_tma_table import relay

    t = relay(writes=writes).text()
    t = _edit(t, ".tmap y table=maps slot=1 over=mem offset=2048", f".tmap y table=maps slot=1 over=mem offset={yoff}")
    t = _edit(t, ".tmap z table=maps slot=2 over=mem offset=4096", f".tmap z table=maps slot=2 over=mem offset={yoff + 4096}")
    t = _edit(t, "size=0x1800 elem=bf16 source=mem layout=3072:2", f"size=0x{yoff + 6144:x} elem=bf16 source=mem "
                                                                  f"layout={(yoff + 6144) // 2}:2")
    t = t.replace(".reg R tid\n", ".reg R tid\n.reg R[2] yp\n.reg R yv\n", 1)
    return _edit(t, "  CCTL.IVALL\n  FENCE.VIEW.ASYNC.G\n",
                 f"  CCTL.IVALL\n  FENCE.VIEW.ASYNC.G\n  LDC.64 yp, c[0x0][mem]\n  LDG.E yv, desc[memdesc][yp.64+0x{read:x}]\n")


@pytest.mark.parametrize("read", [15360, 15360 + 0x7fc], ids=["first-word", "last-word"])
def test_every_word_of_a_store_across_16_kib_waits_for_the_bulk_group(read: int) -> None:
    """y at byte 15360 of mem: CTA 0's store of its 2 KiB box crosses the model's 16 KiB chunk boundary.
    Without `.WRITES` the wait does not release the store's writes: CTA 1 reads y's first word and its
    last unordered, each reported (before the fix the first was not: the store held back only its last
    chunk's record until the bulk-group wait, CTA 0's MEMBAR released the others); with `.WRITES` both
    are ordered."""
    late = "mem_words: {}, warp 0 of CTA 1 reads it and UTMASTG.2D, warp 0 of another CTA writes it, with no GPU-scope fence after the write"
    # (the TMA load meets both chunks' writes: two reports)
    assert _verdict(_relay_y_at(15360, False, read)) == [late.format("LDG.E"), late.format("UTMALDG.2D") + " (2 times)"]
    assert _verdict(_relay_y_at(15360, True, read)) == []


def test_a_multicast_box_off_the_swizzle_repeat_is_reported_for_each_cta() -> None:
    """Rank 0's multicast lands at 0x80 past its tile in both CTAs of the cluster: each landing is checked."""
    text = _edit(_multicast(0b11), "+ UIADD3 tma_src.0, tile_base, 0x0, URZ  // addr tile[0, 0]",
                 "  UIADD3 tma_src.0, tile_base, 0x80, URZ")
    assert _verdict(text) == [m for c in (0, 10) for m in (
        f"CTA {c} warp 0: UTMALDG.2D.MULTICAST lands its box at shared 0x480, which is not 1024-byte aligned (a 128-byte "
        f"swizzle repeats every 1024 bytes) (2 times)",
        f"CTA {c} warp 0: UTMALDG.2D.MULTICAST touches shared 0x480..0x1480, outside every shared buffer the kernel declares "
        f"(2 times)")]


def _relay_two_groups(waits: str) -> str:
    """The relay with a first store, through the load's map (x, or y for CTA 1), in a group of its own
    before the store of y (z): `waits` in place of the one wait for all the groups' writes."""
    from tests.kernels.test_mega_tma_table import relay

    t = _edit(relay().text(), "  ULDC.64 maps_addr, c[0x0][maps]\n  R2UR map_desc_slot, dst\n",
              "  UIADD3 tmas_args2.0, page_base, 0x0, URZ\n  UMOV tmas_args2.1, 0x0\n  UMOV tmas_args2.2, 0x0\n"
              "  UTMASTG.2D [tmas_args2], tmap[map_desc]\n  UTMACMDFLUSH\n  ULDC.64 maps_addr, c[0x0][maps]\n"
              "  R2UR map_desc_slot, dst\n")
    return _edit(t, "  DEPBAR.LE.WRITES SB0, 0x0\n", waits)


def test_the_writes_of_the_group_a_partial_wait_leaves_are_released_by_the_next() -> None:
    """`.WRITES` with one group left, then with none: both groups' writes are released before the flag;
    with the first wait alone, y's store is neither waited for nor released."""
    assert _verdict(_relay_two_groups("  DEPBAR.LE.WRITES SB0, 0x1\n  DEPBAR.LE.WRITES SB0, 0x0\n")) == []
    assert _verdict(_relay_two_groups("  DEPBAR.LE.WRITES SB0, 0x1\n")) == [
        f"CTA {c}: UTMASTG.2D, warp 0 reads page asynchronously, and nothing orders that before CTA {c} exits (no wait of "
        f"its warps sees it done: its shared memory may be gone)" for c in (0, 1)] + [
        "mem_words: UTMASTG.2D, warp 0 writes it and UTMALDG.2D, warp 0 reads it, and nothing orders the two",
        "mem_words: UTMASTG.2D, warp 0 writes it and UTMASTG.2D, warp 0 writes it, and nothing orders the two"]
