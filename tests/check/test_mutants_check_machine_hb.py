"""The checker's machine parts, continued (issue 24's check-machine mutation group, fifth session):
happens-before's helpers with literal values (regions' byte masks, the verbs and register names its
messages use), registers an asynchronous unit still writes (a wgmma group not waited for, an LDTM
without tcgen05.wait::ld), an MMA operand nothing wrote, barrier words read by plain loads, a flag in
a buffer's last word, remote arrivals a CTA must see before it exits, and the progress lines of a long
run. Each kernel beside its clean twin, the checker's whole verdict pinned. docs/testing.md lists the
mutation run these tests answer."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

from tests.check.corpus import base_text
from tests.check.corpus.cases import CASES
from tests.check.test_mutants_check import BODY, FLAG_BODY, FLAG_HEAD, HEAD
from tests.check.test_mutants_check_machine import CHUNK_HEAD, STORE, _two_warps
from warpy.check.happens_before import (CHUNK_BYTES, HappensBefore, _chunk_addr, _regname, _verb, byte_mask, bytes_of,
                                        masks_of, word_bytes)
from warpy.check.machine import Machine
from warpy.check.report import check_kernel
from warpy.check.state import Problems
from warpy.isa.text import parse

Verdict = dict[str, dict[str, int]]


def _verdict(text: str, **kw: object) -> Verdict:
    rep = check_kernel(parse(text), **kw)  # type: ignore[arg-type]
    return {k: dict(v) for k, v in rep.problems.msgs.items() if v}


# -- the helpers, with literal values --------------------------------------------------------------------

def test_byte_masks_of_regions() -> None:
    """A region is a 16 KiB chunk; each byte a bit of its mask."""
    assert CHUNK_BYTES == 16384
    assert masks_of(np.array([], dtype=np.int64)) == []
    assert masks_of(np.array([0])) == [(0, 1)]
    assert masks_of(np.array([5, 3])) == [(0, 0b101000)]
    # across chunks: each chunk's own bytes, in chunk order
    assert masks_of(np.array([16385, 3, 16384 * 3 + 1])) == [(0, 0b1000), (1, 0b10), (3, 0b10)]
    assert bytes_of(np.array([0x10, 0x20]), 2).tolist() == [0x10, 0x11, 0x20, 0x21]
    assert bytes_of(np.array([7]), 0).tolist() == [7]  # at least one byte
    assert word_bytes(np.array([1, 3])).tolist() == [4, 5, 6, 7, 12, 13, 14, 15]
    # an mbarrier's 8 bytes, also across a chunk's end
    assert byte_mask(8, 8) == [(0, 0xff << 8)]
    assert byte_mask(16380, 8) == [(0, 0xf << 16380), (1, 0xf)]
    assert byte_mask(16384, 1) == [(1, 1)]


def test_the_first_byte_a_message_names() -> None:
    assert _chunk_addr(0, 1) == 0
    assert _chunk_addr(0, 0b1100) == 2
    assert _chunk_addr(2, 1 << 100) == 2 * 16384 + 100
    assert _chunk_addr(1, 0) == 16384  # no byte: the chunk's start


def test_verbs_and_register_names() -> None:
    assert [_verb("r"), _verb("w"), _verb("red")] == ["reads", "writes", "adds to"]
    assert [_verb("red", op) for op in ("SYNCS.PHASECHK.TRANS64.TRYWAIT", "SYNCS.ARRIVE.TRANS64.A1T0", "UTCBAR.2CTA",
                                        "UTMALDG.2D", "UBLKCP.S.G", "UGETNEXTWORKID.BROADCAST", "UTMAREDG.2D.ADD",
                                        "SYNCS.EXCH.64")] == \
        ["waits on", "arrives on", "arrives on", "completes bytes on", "completes bytes on", "completes bytes on",
         "adds to", "adds to"]
    # a numbered register is named with its number; a named vector by its name alone
    assert [_regname("R", 12), _regname("UR", 4), _regname("acc", 3), _regname("v", 0), _regname("r", 1),
            _regname("ur", 2)] == ["R12", "UR4", "acc", "v", "r", "ur"]


def test_footprints_are_remembered_by_key() -> None:
    hb = HappensBefore(None, Problems(), False)  # type: ignore[arg-type]
    assert hb.byte_footprint("a", lambda: np.array([1, 2])) == [(0, 0b110)]
    assert hb.byte_footprint("a", lambda: np.array([9])) == [(0, 0b110)]  # the first answer, by key
    assert hb.footprint("b", lambda: np.array([0, 4097])) == [(0, 0xf), (1, 0xf << 4)]
    assert hb.footprint("b", lambda: np.array([7])) == [(0, 0xf), (1, 0xf << 4)]
    assert hb.refills == 0 and hb.table == {} and hb.regions == {}


# -- registers a wgmma group still writes (the RS probe: four warps, one group) ----------------------------

RS = base_text("probe hgmma_rs sm_90a")
WAIT = "WARPGROUP.DEPBAR.LE gsb0, 0x0"
STORES = "".join(f"  STG.E.128 desc[memdesc][gaddr.64+{o}], acc.{r}\n" for o, r in
                 [("", 0)] + [(hex(16 * k), 4 * k) for k in range(1, 8)]).replace("gaddr.64+]", "gaddr.64]")
HGMMA = "HGMMA.64x64x16.F32.BF16"


def _exits_unwaited(buf: str) -> dict[str, int]:
    return {f"CTA 0: {HGMMA}, warp {w} reads {buf} asynchronously, and nothing orders that before CTA 0 exits (no wait "
            f"of its warps sees it done: its shared memory may be gone)": 1 for w in range(4)}


def test_a_wgmma_group_read_before_its_wait() -> None:
    """Waiting for the group (DEPBAR 0) orders the accumulator's stores; DEPBAR 1 leaves the one group in
    flight: every store of its registers is reported, once a store (the first register it touches), and
    the operand the group reads is not seen done before the CTA exits. A store of the accumulator's first
    register alone is reported as well."""
    assert RS.count(WAIT) == 1 and RS.count(STORES) == 1
    assert _verdict(RS) == {}
    unwaited = RS.replace(WAIT, "WARPGROUP.DEPBAR.LE gsb0, 0x1")
    race = (f"acc: {HGMMA}, warp {{w}} writes it and {{op}}, warp {{w}} touches it, and nothing orders the two (the "
            f"wgmma group has not been waited for)")
    assert _verdict(unwaited) == {"order": {**{race.format(w=w, op="STG.E.128"): 8 for w in range(4)},
                                            **_exits_unwaited("sb")}}
    first = unwaited.replace(STORES, "  STG.E desc[memdesc][gaddr.64], acc.0\n")
    assert _verdict(first) == {  # (and the rest of the output is never stored)
        "order": {**{race.format(w=w, op="STG.E"): 1 for w in range(4)}, **_exits_unwaited("sb")},
        "coverage": {"out: no store or reduce-add writes 3968 of its 4096 elements (rows 0..127, columns 1..31; the "
                     "first at row 0, column 1)": 1}}


def test_an_mma_operand_nothing_wrote() -> None:
    """The TMA load of B dropped (and its byte count with it: the barrier completes on the arrival): the
    wgmma reads shared memory nothing wrote."""
    load = "  UTMALDG.2D [tma_b], tmap[b]\n"
    assert RS.count(load) == 1 and RS.count("MOV tx, 0x2000") == 1
    bad = RS.replace(load, "").replace("MOV tx, 0x2000", "MOV tx, 0x0")
    assert _verdict(bad) == {"memory": {
        f"sb: {HGMMA}, warp {w} reads it through the async proxy, and nothing has written it (an operand tile never "
        f"loaded or stored there)": 4 for w in range(4)}}
    # the same on sm_100a: the UMMA probe without B's load (A's 0x4000 bytes still expected)
    umma = base_text("probe umma_1cta sm_100a")
    load_b = "  UTMALDG.2D [tma_args], tmap[b]\n"
    assert umma.count(load_b) == 1 and umma.count("MOV tx, 0x6000") == 1 and _verdict(umma) == {}
    assert _verdict(umma.replace(load_b, "").replace("MOV tx, 0x6000", "MOV tx, 0x4000")) == {"memory": {
        "sb: UTCHMMA, warp 0 reads it through the async proxy, and nothing has written it (an operand tile never loaded "
        "or stored there)": 4}}


# -- an LDTM's registers without tcgen05.wait::ld (the sm_100a pipe example) -------------------------------

def _case(name: str) -> Verdict:
    rep = next(c for c in CASES if c.name == name).run()
    return {k: dict(v) for k, v in rep.problems.msgs.items() if v}


def test_ldtm_registers_before_the_wait() -> None:
    assert _verdict(base_text("example example-pipe sm_100a")) == {}
    why = "and nothing orders the two (no tcgen05.wait::ld after the load)"
    assert _case("ldtm-wait-dropped") == {"order": {
        **{f"v: LDTM.x32, warp {w} writes it and STG.E.128, warp {w} touches it, {why}": 8 for w in range(2, 6)},
        **{f"v: LDTM.x32, warp {w} writes it and LDTM.x32, warp {w} touches it, {why}": 1 for w in range(2, 6)}}}


# -- remote arrivals a CTA must see before it exits (sm_100a, 2-CTA MMA) -----------------------------------

def test_remote_arrivals_before_exit() -> None:
    """The MMA warp skips its drain: the peer CTA's epilogue arrives on its accumulator-empty barrier
    remotely after it may have exited; each remote agent is reported once, for the CTA it reaches."""
    assert _verdict(base_text("gemm sm_100a 256x256x128 fp32")) == {}  # drained: every remote arrival seen
    got = _case("mma-warp-skips-drain")["order"]
    remote = {m: n for m, n in got.items() if "reaches its shared memory" in m}
    assert remote == {f"CTA {c}: SYNCS.ARRIVE.TRANS64.RED.A1T0, CTA {c + 1} warp {w} reaches its shared memory, and "
                      f"nothing orders that before CTA {c} exits (no wait of its warps sees it)": 1
                      for c in (0, 6) for w in range(4, 8)}


# -- a barrier word read by a plain load -------------------------------------------------------------------

def test_a_barrier_word_read_by_a_plain_load() -> None:
    """The consumer loads the barrier word itself: before its wait, unordered with the producer's arrival,
    the copies' completions and the producer's own wait; after its wait, with the producer's wait only
    (the phase it completed is ordered by the consumer's wait)."""
    assert BODY.count("CONSUMER:\n") == 1 and BODY.count("  LDS v, [addr+smem+0x80]\n") == 1
    before = BODY.replace("CONSUMER:\n", "CONSUMER:\n  LDS v, [smem]\n")
    after = BODY.replace("  LDS v, [addr+smem+0x80]\n", "  LDS v, [addr+smem+0x80]\n  LDS v, [smem]\n")
    assert _verdict(HEAD + before) == {"order": {
        "bars[0]: LDS, warp 1 reads it and SYNCS.ARRIVE.TRANS64, warp 0 arrives on it, and nothing orders the two": 1,
        "bars[0]: LDS, warp 1 reads it and UBLKCP.S.G, warp 0 completes bytes on it, and nothing orders the two": 2,
        "bars[0]: LDS, warp 1 reads it and SYNCS.PHASECHK.TRANS64.TRYWAIT, warp 0 waits on it, and nothing orders "
        "the two": 1}}
    assert _verdict(HEAD + after) == {"order": {
        "bars[0]: SYNCS.PHASECHK.TRANS64.TRYWAIT, warp 0 waits on it and LDS, warp 1 reads it, and nothing orders "
        "the two": 1}}


# -- a flag in a buffer's last word --------------------------------------------------------------------------

def test_a_hang_on_a_buffer_s_last_word() -> None:
    never = FLAG_BODY.replace("  @leader REDG.E.ADD.STRONG.GPU desc[memdesc][p.64+0x80], one\n", "")
    assert never.count("p.64+0x80") == 1
    assert _verdict(FLAG_HEAD + never.replace("p.64+0x80", "p.64+0xfc")) == {"protocol": {
        "hang: CTA 0 warp 0 waits on words+0xfc (the loop ending at line 16 polls it and nothing writes it)": 1}}


# -- the progress lines of a long run --------------------------------------------------------------------------

@pytest.fixture
def slow_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every reading of the clock (the run loop's) 2 s after the last: a progress line every round."""
    t = [0.0]

    def tick() -> float:
        t[0] += 2.0
        return t[0]
    monkeypatch.setattr(time, "monotonic", tick)


LINE = r"\d+ warp instructions, [0-2]/2 warps done, \d+ s"


def test_progress_lines_name_the_run(slow_clock: None) -> None:
    lines: list[str] = []
    rep = check_kernel(parse(HEAD + BODY), progress=lines.append)
    assert rep.ok and lines and all(re.fullmatch("named: " + LINE, s) for s in lines), lines
    lines.clear()
    Machine(parse(HEAD + BODY), progress=lines.append).run()  # no label: the line alone
    assert lines and all(re.fullmatch(LINE, s) for s in lines), lines
    lines.clear()
    Machine(parse(HEAD + BODY), label="x: ").run()  # no progress asked: none
    assert lines == []


# -- the machine's schedule, its scratch words, the place two partly overlapping accesses share ------------

def test_a_schedule_other_than_round_robin_shuffles_the_warps() -> None:
    """Round-robin (the default, and schedule 0) runs warp 0 first; schedule 3's shuffle runs warp 1
    first, so the race is found the other way round."""
    k = parse(CHUNK_HEAD + _two_warps(0x10, 0x10))
    race = "big[16]: STS, warp {} writes it and STS, warp {} writes it, and nothing orders the two"
    for m, first in ((Machine(k), 0), (Machine(k, schedule=0), 0), (Machine(k, schedule=3), 1)):
        m.run()
        assert {kind: dict(v) for kind, v in m.problems.msgs.items() if v} == {"order": {race.format(first, 1 - first): 1}}


def test_the_scratch_words_end_at_their_source() -> None:
    """Scratch memory's words handed to the next launch are those of scratch parameters only: not the
    first word of the source after one (`flags` at 2^40, `buf` right after it at 2 * 2^40)."""
    head = FLAG_HEAD.replace(".grid 2 1 1", ".grid 1 1 1").replace(
        ".param buf u64", ".param flags u64 scratch\n.param buf u64").replace(
        ".buffer words", ".buffer flag_words global base=0x0 size=0x10 elem=u32 source=flags layout=4:4\n.buffer words")
    k = parse(head + STORE)
    m = Machine(k, scratch={1 << 40: 7, (1 << 40) + 12: 9, 2 << 40: 5})
    assert m.global_memory.base == {"flags": 1 << 40, "buf": 2 << 40}
    m.run()
    assert m.problems.total() == 0 and m.scratch_words() == {1 << 40: 7, (1 << 40) + 12: 9}


def test_a_race_names_the_first_byte_both_accesses_touch() -> None:
    """Warp 0 stores bytes 0x10..0x8f, warp 1 bytes 0x20..0x9f: the place named is 0x20, where they
    meet, not 0x10."""
    assert _verdict(CHUNK_HEAD + _two_warps(0x10, 0x20)) == {"order": {
        "big[32]: STS, warp 0 writes it and STS, warp 1 writes it, and nothing orders the two": 1}}


# -- which records a region keeps: one record for a warp's accesses at one epoch; a covering write drops
# what it covers. Three warps (warp 2 synchronises with no one; warps 0 and 1 through named barrier 1)

THREE = CHUNK_HEAD.replace(".threads 64", ".threads 96") + ".reg R warp\n.reg P is\n"
FOUR, EIGHT, BAR1 = "IMAD addr, lane, 0x4, RZ", "IMAD addr, lane, 0x8, RZ", "BAR.SYNC.DEFER_BLOCKING 0x1, 0x40"


def _warps(*blocks: list[str]) -> str:
    blocks += ([],) * (3 - len(blocks))  # a warp with no block exits
    lines = ["  S2R tid, SR_TID.X", "  S2R lane, SR_LANEID", "  UMOV smem, `(dsmem)", "  SHF.R.U32.HI warp, RZ, 0x5, tid",
             "  MOV v, 0x1"]
    lines += [f"  ISETP.EQ.U32.AND is, PT, warp, {i:#x}, PT\n  @is BRA W{i}" for i in range(1, len(blocks))]
    for i, b in enumerate(blocks):
        lines += ([f"W{i}:"] if i else []) + ["  " + x for x in b] + ["  EXIT"]
    return THREE + "\n".join(lines) + "\n"


def _st(at: int) -> str:
    return f"STS [addr+smem+{at:#x}], v"


def _ld(at: int) -> str:
    return f"LDS v, [addr+smem+{at:#x}]"


def _pairs(*pairs: tuple[int, str, int, str, int]) -> Verdict:
    verb = {"STS": "writes", "LDS": "reads"}
    return {"order": {f"big[{at}]: {a}, warp {wa} {verb[a]} it and {b}, warp {wb} {verb[b]} it, and nothing orders the "
                      f"two": 1 for at, a, wa, b, wb in pairs}}


@pytest.mark.parametrize("blocks,want", [
    # warp 0's two stores (reads), one epoch, one record: one race with warp 1's store over both, at the first byte
    (([FOUR, _st(0x10), _st(0x90)], [EIGHT, _st(0x10)]), _pairs((16, "STS", 0, "STS", 1))),
    (([FOUR, _ld(0x10), _ld(0x90)], [EIGHT, _st(0x10)]), _pairs((16, "LDS", 0, "STS", 1))),
    # the second store (read) crosses into the next chunk: its part there is kept as well
    (([FOUR, _st(0x3f40), _st(0x3fc0)], [FOUR, _st(0x4000)]), _pairs((16384, "STS", 0, "STS", 1))),
    (([FOUR, _ld(0x3f40), _ld(0x3fc0)], [FOUR, _st(0x4000)]), _pairs((16384, "LDS", 0, "STS", 1))),
    # two warps' reads are two records, whichever covers the other
    (([FOUR, _ld(0x10)], [FOUR, _ld(0x10)], [FOUR, _st(0x10)]),
     _pairs((16, "LDS", 0, "STS", 2), (16, "LDS", 1, "STS", 2))),
    (([FOUR, _ld(0x10)], [EIGHT, _ld(0x10)], [FOUR, _st(0x10)]),
     _pairs((16, "LDS", 0, "STS", 2), (16, "LDS", 1, "STS", 2))),
    # warp 1's store, ordered after warp 0's store (read), replaces it: warp 2 races with warp 1's only
    (([FOUR, _st(0x10), BAR1], [FOUR, BAR1, _st(0x10)], [FOUR, _st(0x10)]), _pairs((16, "STS", 1, "STS", 2))),
    (([FOUR, _ld(0x10), BAR1], [FOUR, BAR1, _st(0x10)], [FOUR, _st(0x10)]), _pairs((16, "STS", 1, "STS", 2)))])
def test_the_records_a_region_keeps(blocks: tuple[list[str], ...], want: Verdict) -> None:
    assert _verdict(_warps(*blocks)) == want


def test_refills_are_counted_where_a_ring_wraps() -> None:
    """A refill is an asynchronous write over shared memory an MMA read (the ring wrapped: only then can an
    early free race): the sm_90a pipe's 8 k-blocks pass its 4 stages twice; the RS probe's one stage is
    loaded once."""
    assert check_kernel(parse(base_text("example example-pipe sm_90a"))).refills > 0
    assert check_kernel(parse(RS)).refills == 0


def test_tensor_memory_held_at_exit() -> None:
    """The UMMA probe without its dealloc exits holding its 64 columns; with a second allocation of 32
    (whose base the probe then uses: the MMA and loads past the first are reported too) both ranges are
    named."""
    umma = base_text("probe umma_1cta sm_100a")
    alloc = "  UTCATOMSWS.FIND_AND_SET.ALIGN [tmem_slot_base], 0x40  // addr tmem_slot[0]\n"
    free = "  UTCATOMSWS.AND tmem_base, 0x40\n"
    assert umma.count(alloc) == 1 and umma.count(free) == 1
    held = "CTA 0 exits with tensor-memory columns {} still allocated (a tcgen05.dealloc must free them: the next CTA on " \
           "the SM cannot allocate them)"
    assert _verdict(umma.replace(free, "")) == {"protocol": {held.format("0..63"): 1}}
    two = _verdict(umma.replace(free, "").replace(alloc, alloc + alloc.replace("0x40", "0x20")))
    assert [m for m in two["protocol"] if "exits with" in m] == [held.format("0..63, 64..95")]


def test_the_hb_table_of_the_umma_probe() -> None:
    """`warpy hb`'s pairs for the sm_100a UMMA probe (4 warps; warp 0 initialises the barriers, loads A
    and B by TMA and issues the MMAs; all four load the accumulator): each barrier's init ordered before
    warp 0's own uses by program order and before the other warps' waits by the CTA barrier; the
    copies' landing before the MMAs by the wait on `full`; the MMAs one after the other by the tensor
    core's program order, before the loads and the dealloc by the wait on `acc_full`; the loads before
    the dealloc by warp 0's `tcgen05.fence::before_thread_sync` and the CTA barrier; the copies and the
    commit's arrival ordered after the init by their issue (no label). (Key: buffer, earlier
    op, its warp, later op, its warp, another CTA, what ordered them, earlier kind, later kind.)"""
    rep = check_kernel(parse(base_text("probe umma_1cta sm_100a")), hb=True)
    assert rep.ok and rep.hb_table == {
        ("acc_full", "SYNCS.EXCH.64", 0, "SYNCS.PHASECHK.TRANS64.TRYWAIT", 0, "", "program order", "w", "red"): 1,
        ("acc_full", "SYNCS.EXCH.64", 0, "SYNCS.PHASECHK.TRANS64.TRYWAIT", 1, "", "CTA barrier", "w", "red"): 1,
        ("acc_full", "SYNCS.EXCH.64", 0, "SYNCS.PHASECHK.TRANS64.TRYWAIT", 2, "", "CTA barrier", "w", "red"): 2,
        ("acc_full", "SYNCS.EXCH.64", 0, "SYNCS.PHASECHK.TRANS64.TRYWAIT", 3, "", "CTA barrier", "w", "red"): 2,
        ("acc_full", "SYNCS.EXCH.64", 0, "UTCBAR", 0, "", "", "w", "red"): 1,
        ("full", "SYNCS.EXCH.64", 0, "SYNCS.ARRIVE.TRANS64", 0, "", "program order", "w", "red"): 1,
        ("full", "SYNCS.EXCH.64", 0, "SYNCS.PHASECHK.TRANS64.TRYWAIT", 0, "", "program order", "w", "red"): 1,
        ("full", "SYNCS.EXCH.64", 0, "UTMALDG.2D", 0, "", "", "w", "red"): 2,
        ("sa", "UTMALDG.2D", 0, "UTCHMMA", 0, "", "wait on full", "w", "r"): 8,
        ("sb", "UTMALDG.2D", 0, "UTCHMMA", 0, "", "wait on full", "w", "r"): 4,
        ("tensor memory", "LDTM.x32", 0, "UTCATOMSWS.AND", 0, "", "tcgen05.fence::before_thread_sync", "r", "w"): 2,
        ("tensor memory", "LDTM.x32", 1, "UTCATOMSWS.AND", 0, "", "CTA barrier", "r", "w"): 2,
        ("tensor memory", "LDTM.x32", 2, "UTCATOMSWS.AND", 0, "", "CTA barrier", "r", "w"): 2,
        ("tensor memory", "LDTM.x32", 3, "UTCATOMSWS.AND", 0, "", "CTA barrier", "r", "w"): 2,
        ("tensor memory", "UTCATOMSWS.FIND_AND_SET.ALIGN", 0, "UTCHMMA", 0, "", "", "w", "w"): 2,
        ("tensor memory", "UTCHMMA", 0, "LDTM.x32", 0, "", "wait on acc_full", "w", "r"): 2,
        ("tensor memory", "UTCHMMA", 0, "LDTM.x32", 1, "", "wait on acc_full", "w", "r"): 2,
        ("tensor memory", "UTCHMMA", 0, "LDTM.x32", 2, "", "wait on acc_full", "w", "r"): 2,
        ("tensor memory", "UTCHMMA", 0, "LDTM.x32", 3, "", "wait on acc_full", "w", "r"): 2,
        ("tensor memory", "UTCHMMA", 0, "UTCATOMSWS.AND", 0, "", "wait on acc_full", "w", "w"): 2,
        ("tensor memory", "UTCHMMA", 0, "UTCHMMA", 0, "", "program order", "w", "w"): 6,
        ("tmem_slot", "UTCATOMSWS.FIND_AND_SET.ALIGN", 0, "LDS", 0, "", "program order", "w", "r"): 1,
        ("tmem_slot", "UTCATOMSWS.FIND_AND_SET.ALIGN", 0, "LDS", 1, "", "CTA barrier", "w", "r"): 1,
        ("tmem_slot", "UTCATOMSWS.FIND_AND_SET.ALIGN", 0, "LDS", 2, "", "CTA barrier", "w", "r"): 1,
        ("tmem_slot", "UTCATOMSWS.FIND_AND_SET.ALIGN", 0, "LDS", 3, "", "CTA barrier", "w", "r"): 1,
    }
