"""Small kernels that break exactly one mbarrier rule, each beside its clean twin, with the checker's
whole verdict pinned word for word (the corpus matches one message a case, so a mutant that changes
what else is reported, or the numbers in a message, survives it; docs/testing.md lists the mutation
run these tests answer).

The base program: warp 0 initialises one mbarrier (count 1), arrives on it declaring the bytes a
bulk copy brings (two copies of 64 bytes into `data`) and waits; warp 1 waits for the phase and
reads `data`. Each variant is the base with one edit."""

from __future__ import annotations

import pytest

from warpy.check.report import check_kernel
from warpy.isa.text import parse

HEAD = """\
.kernel t
.sm sm_90a
.threads 64
.dynsmem 1024
.grid 1 1 1
.cluster 1 1 1
.mbarriers 1
.param src u64
.buffer src global base=0x0 size=0x100 elem=u32 source=src layout=64:4
.buffer bars smem base=0x0 size=0x8 elem=mbarrier layout=1:8
.buffer data smem base=0x80 size=0x100 elem=u32 layout=64:4
.reg R tid
.reg R warp
.reg R lane
.reg R v
.reg R addr
.reg R par
.reg R nbytes
.reg UR smem
.reg UR bar
.reg UR size
.reg UR[2] mbar_init
.reg UR[2] gsrc
.reg UR[2] cp
.reg P leader
.reg P w0
.reg P done
"""

BODY = """\
  S2R tid, SR_TID.X
  S2R lane, SR_LANEID
  SHF.R.U32.HI warp, RZ, 0x5, tid
  UMOV smem, `(dsmem)
  UIADD3 bar, smem, 0x0, URZ
  ISETP.EQ.U32.AND w0, PT, warp, 0x0, PT
  ELECT leader, URZ, PT
  @!w0 BRA INIT
  @!leader BRA INIT
  UMOV mbar_init.0, 0x1ffffe
  UMOV mbar_init.1, 0x7ffff800
  SYNCS.EXCH.64 URZ, [bar], mbar_init
  FENCE.MBARRIER_INIT
INIT:
  BAR.SYNC.DEFER_BLOCKING 0x0
  @!w0 BRA CONSUMER
  ULDC.64 gsrc, c[0x0][src]
  UMOV size, 0x40
  MOV nbytes, 0x80
  @leader SYNCS.ARRIVE.TRANS64 RZ, [bar], nbytes
  UIADD3 cp.0, smem, 0x80, URZ
  UIADD3 cp.1, bar, 0x0, URZ
  @leader UBLKCP.S.G [cp], [gsrc], size
  UIADD3 cp.0, smem, 0xc0, URZ
  UIADD3 gsrc.0, gsrc.0, 0x40, URZ
  @leader UBLKCP.S.G [cp], [gsrc], size
  MOV par, RZ
WAITP:
  SYNCS.PHASECHK.TRANS64.TRYWAIT done, [bar], par
  @!done BRA WAITP
  EXIT
CONSUMER:
  MOV par, RZ
WAIT:
  SYNCS.PHASECHK.TRANS64.TRYWAIT done, [bar], par
  @!done BRA WAIT
  IMAD addr, lane, 0x4, RZ
  LDS v, [addr+smem+0x80]
  EXIT
"""


def _edit(old: str, new: str) -> str:
    assert BODY.count(old) == 1, old
    return BODY.replace(old, new)


def _verdict(body: str) -> list[str]:
    rep = check_kernel(parse(HEAD + body))
    return rep.messages(20)


HANG = "hang: CTA 0 warp {w} waits on bars[0] for the phase of parity 0: it is in phase 0, {pending} of {count} arrivals to come, {tx} bytes"
RACE = "data: LDS, warp 1 reads it and UBLKCP.S.G, warp 0 writes it, and nothing orders the two"
EXIT_COPY = ("CTA 0: UBLKCP.S.G, warp 0 completes bytes on bars[0] asynchronously, and nothing orders that before CTA 0 "
             "exits (no wait of its warps sees it done: its shared memory may be gone)")

CASES = [
    # over-arrival: 32 lanes arrive on a barrier that counts one; the phase completes (what comes
    # after it is ordered), the 31 extra arrivals are reported
    ("over-arrival", _edit("@leader SYNCS.ARRIVE.TRANS64 RZ", "SYNCS.ARRIVE.TRANS64 RZ"),
     # each lane declares 128 bytes: 32 x 128 owed, 128 of them landed
     ["CTA 0 warp 0 over-arrives on bars[0]: 31 more arrivals than the 1 its phase 0 expects",
      HANG.format(w=0, pending=0, count=1, tx=31 * 128), HANG.format(w=1, pending=0, count=1, tx=31 * 128)]),
    # a count of two for one arrival: a hang with one arrival to come
    ("count-two", _edit("UMOV mbar_init.0, 0x1ffffe\n  UMOV mbar_init.1, 0x7ffff800",
                        "UMOV mbar_init.0, 0x1ffffc\n  UMOV mbar_init.1, 0x7ffff000"),
     [HANG.format(w=0, pending=1, count=2, tx=0), HANG.format(w=1, pending=1, count=2, tx=0)]),
    # expect_tx over-declared: never completes, 64 bytes owed
    ("tx-over", _edit("MOV nbytes, 0x80", "MOV nbytes, 0xc0"),
     [HANG.format(w=0, pending=0, count=1, tx=64), HANG.format(w=1, pending=0, count=1, tx=64)]),
    # under-declared by the second copy: the phase completes when the first lands; the second lands
    # in the next phase, unordered with the read after the wait and with the exit
    ("tx-under", _edit("MOV nbytes, 0x80", "MOV nbytes, 0x40"),
     [EXIT_COPY, "data: UBLKCP.S.G, warp 0 writes it and LDS, warp 1 reads it, and nothing orders the two"]),
    # no init: every use of the barrier is reported, and nothing is ordered by it
    ("uninitialised", _edit("  SYNCS.EXCH.64 URZ, [bar], mbar_init\n", ""),
     ["CTA 0 warp 0 arrives on bars[0], which is not initialised",
      "CTA 0 warp 0 waits on bars[0], which is not initialised",
      "CTA 0 warp 1 waits on bars[0], which is not initialised",
      "a copy completes 64 bytes on bars[0], which is not initialised (2 times)",
      EXIT_COPY, RACE + " (2 times)"]),
    ("reinit", _edit("  SYNCS.EXCH.64 URZ, [bar], mbar_init\n",
                     "  SYNCS.EXCH.64 URZ, [bar], mbar_init\n  SYNCS.EXCH.64 URZ, [bar], mbar_init\n"),
     ["CTA 0 warp 0 initialises bars[0] again without invalidating it (SYNCS.CCTL.IV)"]),
    # phase release: the consumer waits for parity 1, which a fresh barrier has completed: its wait
    # passes at once and orders nothing (the producer's own wait is right)
    ("fresh-parity-1", _edit("CONSUMER:\n  MOV par, RZ", "CONSUMER:\n  MOV par, 0x80000000"),
     [RACE + " (2 times)"]),
    # barrier-init-order: no CTA barrier after the init, so warp 1's wait may see the word before it
    ("init-no-sync", _edit("  BAR.SYNC.DEFER_BLOCKING 0x0\n", ""),
     ["bars[0]: SYNCS.EXCH.64, warp 0 writes it and SYNCS.PHASECHK.TRANS64.TRYWAIT, warp 1 waits on it, and nothing "
      "orders the two"]),
    # the consumer does not wait at all
    ("no-wait", _edit("  @!done BRA WAIT\n", ""),
     [RACE + " (2 times)"]),
]


def test_the_base_is_clean() -> None:
    assert _verdict(BODY) == []


@pytest.mark.parametrize("name,body,want", CASES, ids=[c[0] for c in CASES])
def test_one_mbarrier_rule_broken(name: str, body: str, want: list[str]) -> None:
    assert _verdict(body) == want


# -- GPU-scope flags between two CTAs ------------------------------------------------------------------
# CTA 1 stores a word a lane to global memory, fences (MEMBAR.ALL.GPU: the release) and raises a flag
# (REDG); CTA 0 polls the flag (LDG.STRONG.GPU) until it is raised, fences (the acquire) and reads the
# words. CTA 0 runs first, so its loop waits on the flag.

FLAG_HEAD = """\
.kernel f
.sm sm_90a
.threads 32
.dynsmem 0
.grid 2 1 1
.cluster 1 1 1
.mbarriers 0
.param buf u64
.buffer words global base=0x0 size=0x100 elem=u32 source=buf layout=64:4
.reg R ctaid
.reg R lane
.reg R v
.reg R[2] p
.reg R[2] q
.reg R one
.reg UR[2] memdesc
.reg P c0
.reg P leader
.reg P ready
"""

FLAG_BODY = """\
  S2R ctaid, SR_CTAID.X
  S2R lane, SR_LANEID
  ULDC.64 memdesc, c[0x0][0x208]
  LDC.64 p, c[0x0][buf]
  IMAD.WIDE.U32 q, lane, 0x4, p
  ISETP.EQ.U32.AND c0, PT, ctaid, 0x0, PT
  @c0 BRA READER
  MOV v, 0x5
  STG.E desc[memdesc][q.64], v
  MEMBAR.ALL.GPU
  ELECT leader, URZ, PT
  MOV one, 0x1
  @leader REDG.E.ADD.STRONG.GPU desc[memdesc][p.64+0x80], one
  EXIT
READER:
POLL:
  LDG.E.STRONG.GPU v, desc[memdesc][p.64+0x80]
  ISETP.EQ.U32.AND ready, PT, v, 0x0, PT
  @ready BRA POLL
  MEMBAR.ALL.GPU
  LDG.E v, desc[memdesc][q.64]
  EXIT
"""


def _flag_edit(old: str, new: str) -> str:
    assert FLAG_BODY.count(old) == 1, old
    return FLAG_BODY.replace(old, new)


UNORDERED = "words: STG.E, warp 0 writes it and LDG.E, warp 0 reads it, and nothing orders the two"

FLAG_CASES = [
    # the acquire may be CCTL.IVALL as well as a MEMBAR
    ("acquire-by-cctl", _flag_edit("  MEMBAR.ALL.GPU\n  LDG.E v", "  CCTL.IVALL\n  LDG.E v"), []),
    ("release-dropped", _flag_edit("  MEMBAR.ALL.GPU\n  ELECT", "  ELECT"), [UNORDERED]),
    ("acquire-dropped", _flag_edit("  MEMBAR.ALL.GPU\n  LDG.E v", "  LDG.E v"), [UNORDERED]),
    # a fence on the wrong side of what it should order
    ("release-before-data", _flag_edit("  STG.E desc[memdesc][q.64], v\n  MEMBAR.ALL.GPU\n",
                                       "  MEMBAR.ALL.GPU\n  STG.E desc[memdesc][q.64], v\n"),
     ["words: LDG.E, warp 0 of CTA 0 reads it and STG.E, warp 0 of another CTA writes it, with no GPU-scope fence "
      "after the write"]),
    ("acquire-before-poll", _flag_edit("READER:\nPOLL:", "READER:\n  MEMBAR.ALL.GPU\nPOLL:").replace(
        "  MEMBAR.ALL.GPU\n  LDG.E v", "  LDG.E v"), [UNORDERED]),
    ("weak-poll", _flag_edit("LDG.E.STRONG.GPU v", "LDG.E v"),
     ["line 15 (LDG.E): a loop waits on the word it loads from global memory, through a weak load: it may read a "
      "stale value forever (poll with LDG.E.STRONG.GPU, a relaxed GPU-scope load)", UNORDERED]),
    # every CTA is simulated: nobody else raises the flag
    ("flag-never-raised", _flag_edit("  @leader REDG.E.ADD.STRONG.GPU desc[memdesc][p.64+0x80], one\n", ""),
     ["hang: CTA 0 warp 0 waits on words+0x80 (the loop ending at line 16 polls it and nothing writes it)"]),
]


def test_the_flag_base_is_clean() -> None:
    assert check_kernel(parse(FLAG_HEAD + FLAG_BODY)).messages(20) == []


@pytest.mark.parametrize("name,body,want", FLAG_CASES, ids=[c[0] for c in FLAG_CASES])
def test_one_flag_rule_broken(name: str, body: str, want: list[str]) -> None:
    assert check_kernel(parse(FLAG_HEAD + body)).messages(20) == want


# -- a one-stage ring over two rounds ------------------------------------------------------------------
# bars[0] is the stage's full barrier, bars[1] its empty one (each counts one arrival): the producer
# (warp 0) waits for empty (parity 1 first: a fresh barrier's), arrives on full declaring 128 bytes and
# copies them; the consumer (warp 1) waits for full, reads, frees the stage; both flip their parity.

RING_HEAD = HEAD.replace(".buffer bars smem base=0x0 size=0x8 elem=mbarrier layout=1:8",
                         ".buffer bars smem base=0x0 size=0x10 elem=mbarrier layout=2:8").replace(
    ".mbarriers 1", ".mbarriers 2") + ".reg R k\n.reg P more\n"

RING = """\
  S2R tid, SR_TID.X
  S2R lane, SR_LANEID
  SHF.R.U32.HI warp, RZ, 0x5, tid
  UMOV smem, `(dsmem)
  UIADD3 bar, smem, 0x0, URZ
  ISETP.EQ.U32.AND w0, PT, warp, 0x0, PT
  ELECT leader, URZ, PT
  @!w0 BRA INIT
  @!leader BRA INIT
  UMOV mbar_init.0, 0x1ffffe
  UMOV mbar_init.1, 0x7ffff800
  SYNCS.EXCH.64 URZ, [bar], mbar_init
  SYNCS.EXCH.64 URZ, [bar+0x8], mbar_init
  FENCE.MBARRIER_INIT
INIT:
  BAR.SYNC.DEFER_BLOCKING 0x0
  MOV k, RZ
  @!w0 BRA CONSUMER
  ULDC.64 gsrc, c[0x0][src]
  UMOV size, 0x80
  MOV nbytes, 0x80
  UIADD3 cp.0, smem, 0x80, URZ
  UIADD3 cp.1, bar, 0x0, URZ
  MOV par, 0x80000000
PLOOP:
  SYNCS.PHASECHK.TRANS64.TRYWAIT done, [bar+0x8], par
  @!done BRA PLOOP
  @leader SYNCS.ARRIVE.TRANS64 RZ, [bar], nbytes
  @leader UBLKCP.S.G [cp], [gsrc], size
  IADD3 par, par, 0x80000000, RZ
  IADD3 k, k, 0x1, RZ
  ISETP.LT.U32.AND more, PT, k, 0x2, PT
  @more BRA PLOOP
  EXIT
CONSUMER:
  IMAD addr, lane, 0x4, RZ
  MOV par, RZ
CLOOP:
  SYNCS.PHASECHK.TRANS64.TRYWAIT done, [bar], par
  @!done BRA CLOOP
  LDS v, [addr+smem+0x80]
  @leader SYNCS.ARRIVE.TRANS64.A1T0 RZ, [bar+0x8], RZ
  IADD3 par, par, 0x80000000, RZ
  IADD3 k, k, 0x1, RZ
  ISETP.LT.U32.AND more, PT, k, 0x2, PT
  @more BRA CLOOP
  EXIT
"""


def _ring_edit(old: str, new: str) -> str:
    assert RING.count(old) == 1, old
    return RING.replace(old, new)


RING_CASES = [
    ("clean", RING, []),
    # expect_tx in two parts (an expect-only arrive, then the arrive with the rest): the count adds up
    ("tx-in-two-parts", _ring_edit("  @leader SYNCS.ARRIVE.TRANS64 RZ, [bar], nbytes\n",
                                   "  MOV nbytes, 0x40\n  @leader SYNCS.ARRIVE.TRANS64.A0TR RZ, [bar], nbytes\n"
                                   "  @leader SYNCS.ARRIVE.TRANS64 RZ, [bar], nbytes\n"), []),
    # the copy's bytes may land before the arrive declares them (the count goes below zero first)
    ("copy-before-arrive", _ring_edit("  @leader SYNCS.ARRIVE.TRANS64 RZ, [bar], nbytes\n  @leader UBLKCP.S.G [cp], [gsrc], size\n",
                                      "  @leader UBLKCP.S.G [cp], [gsrc], size\n  @leader SYNCS.ARRIVE.TRANS64 RZ, [bar], nbytes\n"),
     []),
    # the consumer keeps waiting for parity 0: its second wait passes on the first phase, it frees the
    # stage twice for one fill, and the producer's wait for the empty barrier's second phase never passes
    ("parity-not-flipped", _ring_edit("  @leader SYNCS.ARRIVE.TRANS64.A1T0 RZ, [bar+0x8], RZ\n  IADD3 par, par, 0x80000000, RZ\n",
                                      "  @leader SYNCS.ARRIVE.TRANS64.A1T0 RZ, [bar+0x8], RZ\n"),
     ["hang: CTA 0 warp 0 waits on bars[1] for the phase of parity 0: it is in phase 2, 1 of 1 arrivals to come, 0 bytes"]),
    # the producer refills the stage without waiting for it to be freed
    ("no-empty-wait", _ring_edit("  SYNCS.PHASECHK.TRANS64.TRYWAIT done, [bar+0x8], par\n  @!done BRA PLOOP\n", ""),
     ["hang: CTA 0 warp 1 waits on bars[0] for the phase of parity 0: it is in phase 2, 1 of 1 arrivals to come, 0 bytes",
      "data: UBLKCP.S.G, warp 0 writes it and UBLKCP.S.G, warp 0 writes it, and nothing orders the two"]),
    # barrier-init-order: the copy engine completes on a barrier whose init no fence.mbarrier_init publishes
    ("init-no-fence", _ring_edit("  FENCE.MBARRIER_INIT\n", ""),
     ["bars[0]: UBLKCP.S.G, warp 0 completes bytes on it through the async proxy and SYNCS.EXCH.64, warp 0 writes it "
      "through the generic proxy, and no proxy fence orders the two (2 times)"]),
]


@pytest.mark.parametrize("name,body,want", RING_CASES, ids=[c[0] for c in RING_CASES])
def test_a_ring_over_two_rounds(name: str, body: str, want: list[str]) -> None:
    assert check_kernel(parse(RING_HEAD + body)).messages(20) == want


def test_a_barrier_word_is_its_own_eight_bytes() -> None:
    """The consumer initialises a second barrier (bars[1], the next 8 bytes) while the producer
    arrives on bars[0], unordered: two words, no race (a barrier's footprint is its 8 bytes)."""
    head = HEAD.replace(".buffer bars smem base=0x0 size=0x8 elem=mbarrier layout=1:8",
                        ".buffer bars smem base=0x0 size=0x10 elem=mbarrier layout=2:8").replace(".mbarriers 1", ".mbarriers 2")
    body = _edit("CONSUMER:\n", "CONSUMER:\n  UMOV mbar_init.0, 0x1ffffe\n  UMOV mbar_init.1, 0x7ffff800\n"
                                "  @leader SYNCS.EXCH.64 URZ, [bar+0x8], mbar_init\n")
    assert check_kernel(parse(head + body)).messages(20) == []


# -- named barriers ------------------------------------------------------------------------------------
# warp 0 stores a word a lane and arrives on named barrier 1 (64 threads); warp 1 syncs on it and reads.

NAMED_HEAD = """\
.kernel n
.sm sm_90a
.threads 64
.dynsmem 1024
.grid 1 1 1
.cluster 1 1 1
.mbarriers 0
.buffer data smem base=0x80 size=0x100 elem=u32 layout=64:4
.reg R tid
.reg R warp
.reg R lane
.reg R v
.reg R addr
.reg UR smem
.reg P w0
.reg P leader
"""

NAMED = """\
  S2R tid, SR_TID.X
  S2R lane, SR_LANEID
  SHF.R.U32.HI warp, RZ, 0x5, tid
  UMOV smem, `(dsmem)
  IMAD addr, lane, 0x4, RZ
  ISETP.EQ.U32.AND w0, PT, warp, 0x0, PT
  @!w0 BRA CONSUMER
  MOV v, 0x7
  STS [addr+smem+0x80], v
  BAR.ARV 0x1, 0x40
  EXIT
CONSUMER:
  BAR.SYNC.DEFER_BLOCKING 0x1, 0x40
  LDS v, [addr+smem+0x80]
  EXIT
"""

NO_ORDER = "data: STS, warp 0 writes it and LDS, warp 1 reads it, and nothing orders the two"


def _named(*edits: tuple[str, str]) -> str:
    body = NAMED
    for old, new in edits:
        assert old in body, old
        body = body.replace(old, new)
    return body


NAMED_CASES = [
    ("clean", NAMED, []),
    # two generations, both warps syncing on each: ordered
    ("two-generations", _named(("  BAR.ARV 0x1, 0x40\n", "  BAR.SYNC.DEFER_BLOCKING 0x1, 0x40\n  BAR.SYNC.DEFER_BLOCKING 0x1, 0x40\n"),
                               ("  LDS v, [addr+smem+0x80]\n", "  LDS v, [addr+smem+0x80]\n  BAR.SYNC.DEFER_BLOCKING 0x1, 0x40\n")),
     []),
    ("no-barrier", _named(("  BAR.ARV 0x1, 0x40\n", ""), ("  BAR.SYNC.DEFER_BLOCKING 0x1, 0x40\n", "")), [NO_ORDER]),
    # a store after the arrival is not ordered before the reader
    ("store-after-arrive", _named(("  BAR.ARV 0x1, 0x40\n", "  BAR.ARV 0x1, 0x40\n  STS [addr+smem+0x80], v\n")), [NO_ORDER]),
    ("count-short", _named(("ARV 0x1, 0x40", "ARV 0x1, 0x20"), ("BLOCKING 0x1, 0x40", "BLOCKING 0x1, 0x20")),
     ["CTA 0: named barrier 1 generation 0: warp 1 arrives after it completed with 32 threads (more threads arrive than "
      "its count: a short count, or one id two groups of warps share; which generation an arrival joins then depends on "
      "how the warps run)"]),
    ("counts-disagree", _named(("BAR.ARV 0x1, 0x40", "BAR.ARV 0x1, 0x60")),
     ["CTA 0: named barrier 1 generation 0: warps arrive counting 96 and 64 threads"]),
    ("count-not-whole-warps", _named(("ARV 0x1, 0x40", "ARV 0x1, 0x50"), ("BLOCKING 0x1, 0x40", "BLOCKING 0x1, 0x50")),
     ["CTA 0 warp 0: BAR.ARV counts 80 threads on barrier 1: a count is a positive multiple of 32 (whole warps arrive)",
      "CTA 0 warp 1: BAR.SYNC.DEFER_BLOCKING counts 80 threads on barrier 1: a count is a positive multiple of 32 "
      "(whole warps arrive)", NO_ORDER]),
    ("id-16", _named(("ARV 0x1, 0x40", "ARV 0x10, 0x40"), ("BLOCKING 0x1, 0x40", "BLOCKING 0x10, 0x40")),
     ["CTA 0 warp 0: BAR.ARV names barrier 16; a CTA has barriers 0..15",
      "CTA 0 warp 1: BAR.SYNC.DEFER_BLOCKING names barrier 16; a CTA has barriers 0..15", NO_ORDER]),
    ("count-too-big", _named(("ARV 0x1, 0x40", "ARV 0x1, 0x80"), ("BLOCKING 0x1, 0x40", "BLOCKING 0x1, 0x80")),
     ["CTA 0: named barrier 1 ends with 64 of 128 threads arrived (generation 0)",
      "hang: CTA 0 warp 1 waits on named barrier 1 (64 of 128 threads arrived)"]),
    # arrivals count the lanes that run them
    ("one-lane-arrives", _named(("  BAR.ARV 0x1, 0x40\n", "  ELECT leader, URZ, PT\n  @leader BAR.ARV 0x1, 0x40\n")),
     ["CTA 0: named barrier 1 ends with 33 of 64 threads arrived (generation 0)",
      "hang: CTA 0 warp 1 waits on named barrier 1 (33 of 64 threads arrived)",
      "line 11 (BAR.ARV): CTA 0 warp 0 runs it on 1 of its 32 lanes; it is warp-aligned (.sync.aligned): every lane "
      "must run it together"]),
    # warp 0 arrives twice (generations 0 and 1) before warp 1's first arrival completes generation 0
    ("next-generation-unordered", _named(("  BAR.ARV 0x1, 0x40\n", "  BAR.ARV 0x1, 0x40\n  BAR.ARV 0x1, 0x40\n"),
                                         ("  LDS v, [addr+smem+0x80]\n", "  LDS v, [addr+smem+0x80]\n  BAR.SYNC.DEFER_BLOCKING 0x1, 0x40\n")),
     ["CTA 0: named barrier 1: warp 0's arrival 2 is not ordered after warp 1's arrival 1 (generation 0 may still be "
      "open when it lands: on the GPU it would count toward that one)"]),
    ("ids-differ", _named(("BAR.ARV 0x1, 0x40", "BAR.ARV 0x2, 0x40")),
     ["CTA 0: named barrier 1 ends with 32 of 64 threads arrived (generation 0)",
      "CTA 0: named barrier 2 ends with 32 of 64 threads arrived (generation 0)",
      "hang: CTA 0 warp 1 waits on named barrier 1 (32 of 64 threads arrived)"]),
]


@pytest.mark.parametrize("name,body,want", NAMED_CASES, ids=[c[0] for c in NAMED_CASES])
def test_one_named_barrier_rule_broken(name: str, body: str, want: list[str]) -> None:
    assert check_kernel(parse(NAMED_HEAD + body)).messages(20) == want


# -- the cluster barrier: two CTAs of two warps, each arriving and waiting once ----------------------------

CLUSTER_HEAD = NAMED_HEAD.replace(".grid 1 1 1", ".grid 2 1 1").replace(".cluster 1 1 1", ".cluster 2 1 1")
CLUSTER = "  S2R tid, SR_TID.X\n  UCGABAR_ARV\n  UCGABAR_WAIT\n  EXIT\n"


def test_the_cluster_barrier() -> None:
    assert check_kernel(parse(CLUSTER_HEAD + CLUSTER)).messages(20) == []
    twice = check_kernel(parse(CLUSTER_HEAD + CLUSTER.replace("UCGABAR_ARV\n", "UCGABAR_ARV\n  UCGABAR_ARV\n"))).messages(20)
    assert twice and "CTA 0 warp 0 arrives twice at the cluster barrier" in twice
    assert all(m.endswith("arrives twice at the cluster barrier") for m in twice), twice
    unarrived = check_kernel(parse(CLUSTER_HEAD + CLUSTER.replace("  UCGABAR_ARV\n", ""))).messages(20)
    assert unarrived == [f"CTA {c} warp {w} waits at the cluster barrier without arriving" for c in (0, 1) for w in (0, 1)]
    # a grid of 3 CTAs in clusters of 2
    assert check_kernel(parse(CLUSTER_HEAD.replace(".grid 2 1 1", ".grid 3 1 1") + CLUSTER)).messages(20) == [
        "the grid (3, 1, 1) is not a whole number of clusters (2, 1, 1): the launch is refused"]


AFTER_COMPLETED = """\
  S2R tid, SR_TID.X
  SHF.R.U32.HI warp, RZ, 0x5, tid
  ISETP.EQ.U32.AND w0, PT, warp, 0x0, PT
  @!w0 BRA SECOND
  BAR.SYNC.DEFER_BLOCKING 0x1, 0x40
  BAR.SYNC.DEFER_BLOCKING 0x1, 0x40
  EXIT
SECOND:
  BAR.ARV 0x1, 0x40
  BAR.ARV 0x1, 0x40
  EXIT
"""

MORE_NAMED = [
    ("id-15", _named(("ARV 0x1, 0x40", "ARV 0xf, 0x40"), ("BLOCKING 0x1, 0x40", "BLOCKING 0xf, 0x40")), []),
    ("count-0", _named(("ARV 0x1, 0x40", "ARV 0x1, 0x0"), ("BLOCKING 0x1, 0x40", "BLOCKING 0x1, 0x0")),
     ["CTA 0 warp 0: BAR.ARV counts 0 threads on barrier 1: a count is a positive multiple of 32 (whole warps arrive)",
      "CTA 0 warp 1: BAR.SYNC.DEFER_BLOCKING counts 0 threads on barrier 1: a count is a positive multiple of 32 "
      "(whole warps arrive)", NO_ORDER]),
    # a barrier without a count waits for the CTA's running threads: warp 0 exits without arriving, so
    # warp 1's sync completes when it exits (no hang), and orders nothing of warp 0's
    ("count-less-completes-at-exit", _named(("  BAR.ARV 0x1, 0x40\n", ""),
                                            ("BAR.SYNC.DEFER_BLOCKING 0x1, 0x40", "BAR.SYNC.DEFER_BLOCKING 0x1")), [NO_ORDER]),
    # warp 0 waits at generation 0; warp 1 completes it and arrives at generation 1 without having
    # waited: its second arrival is not ordered after warp 0's first
    ("arrival-after-a-completed-generation", AFTER_COMPLETED,
     ["CTA 0: named barrier 1: warp 1's arrival 2 is not ordered after warp 0's arrival 1 (generation 0 may still be "
      "open when it lands: on the GPU it would count toward that one)"]),
    ("arrival-after-a-waited-generation", AFTER_COMPLETED.replace("SECOND:\n  BAR.ARV 0x1, 0x40\n",
                                                                  "SECOND:\n  BAR.SYNC.DEFER_BLOCKING 0x1, 0x40\n"), []),
]


@pytest.mark.parametrize("name,body,want", MORE_NAMED, ids=[c[0] for c in MORE_NAMED])
def test_named_barrier_ids_counts_and_generations(name: str, body: str, want: list[str]) -> None:
    assert check_kernel(parse(NAMED_HEAD + body)).messages(20) == want


def test_a_count_less_barrier_left_short() -> None:
    """31 lanes of warp 1 exit, the last one syncs on a barrier without a count: a warp-aligned
    instruction run by part of a warp, and a generation left short at the end ("every running")."""
    body = ("  S2R tid, SR_TID.X\n  SHF.R.U32.HI warp, RZ, 0x5, tid\n  ISETP.EQ.U32.AND w0, PT, warp, 0x0, PT\n"
            "  ELECT leader, URZ, PT\n  @!w0 BRA SECOND\n  BAR.SYNC.DEFER_BLOCKING 0x1\n  EXIT\n"
            "SECOND:\n  @!leader EXIT\n  BAR.SYNC.DEFER_BLOCKING 0x1\n  EXIT\n")
    assert check_kernel(parse(NAMED_HEAD + body)).messages(20) == [
        "CTA 0: named barrier 1 ends with 33 of every running threads arrived (generation 0)",
        "hang: CTA 0 warp 0 waits on named barrier 1 (32 of 64 threads arrived)",
        "hang: CTA 0 warp 1 waits on named barrier 1 (33 of 64 threads arrived)",
        "line 9 (BAR.SYNC.DEFER_BLOCKING): CTA 0 warp 1 runs it on 1 of its 32 lanes; it is warp-aligned (.sync.aligned): "
        "every lane must run it together"]


def test_two_rounds_of_the_cluster_barrier() -> None:
    body = CLUSTER.replace("  UCGABAR_WAIT\n", "  UCGABAR_WAIT\n  UCGABAR_ARV\n  UCGABAR_WAIT\n")
    assert check_kernel(parse(CLUSTER_HEAD + body)).messages(20) == []


def test_an_arrive_takes_the_barrier_address_of_its_running_lanes() -> None:
    """Each lane's register holds another address (lane x 8), the arrive runs on the elected lane:
    only its address (bars[0]) is arrived on; the other lanes' addresses are no barrier at all."""
    head = HEAD.replace(".reg P done\n", ".reg P done\n.reg R baddr\n")
    body = _edit("  @leader SYNCS.ARRIVE.TRANS64 RZ, [bar], nbytes\n",
                 "  IMAD baddr, lane, 0x8, RZ\n  @leader SYNCS.ARRIVE.TRANS64 RZ, [baddr+bar], nbytes\n")
    assert check_kernel(parse(head + body)).messages(20) == []


def test_barrier_ids_and_counts_in_registers() -> None:
    """The id and count may be registers; under a guard the running lanes' values count (the elected
    lane, which does not arrive, holds id 2 and count 32)."""
    regs = _named(("  BAR.ARV 0x1, 0x40\n", "  MOV v, 0x1\n  MOV addr, 0x40\n  BAR.ARV v, addr\n  IMAD addr, lane, 0x4, RZ\n"))
    assert check_kernel(parse(NAMED_HEAD + regs)).messages(20) == []
    guarded = _named(("  BAR.ARV 0x1, 0x40\n", "  ELECT leader, URZ, PT\n  SEL v, 0x2, 0x1, leader\n  SEL addr, 0x20, 0x40, leader\n"
                                               "  @!leader BAR.ARV v, addr\n  IMAD addr, lane, 0x4, RZ\n"))
    assert check_kernel(parse(NAMED_HEAD + guarded)).messages(20) == [
        "CTA 0: named barrier 1 ends with 63 of 64 threads arrived (generation 0)",
        "hang: CTA 0 warp 1 waits on named barrier 1 (63 of 64 threads arrived)",
        "line 13 (BAR.ARV): CTA 0 warp 0 runs it on 31 of its 32 lanes; it is warp-aligned (.sync.aligned): every lane "
        "must run it together"]


def test_a_count_less_barrier_completes_when_the_last_other_warp_exits() -> None:
    """Warp 0 syncs on a barrier without a count and blocks; warp 1 exits without arriving: the
    barrier's running threads are then warp 0's, and it goes on (no hang)."""
    body = ("  S2R tid, SR_TID.X\n  SHF.R.U32.HI warp, RZ, 0x5, tid\n  ISETP.EQ.U32.AND w0, PT, warp, 0x0, PT\n"
            "  @!w0 BRA SECOND\n  BAR.SYNC.DEFER_BLOCKING 0x1\n  EXIT\nSECOND:\n  EXIT\n")
    assert check_kernel(parse(NAMED_HEAD + body)).messages(20) == []


def test_the_hb_table_names_what_orders_each_pair() -> None:
    """`warpy hb`'s table: (buffer, earlier, its warp, later, its warp, other CTA, ordered by, kinds) -> count."""
    assert check_kernel(parse(NAMED_HEAD + NAMED), hb=True).hb_table == {
        ("data", "STS", 0, "LDS", 1, "", "named barrier 1", "w", "r"): 1}
    assert check_kernel(parse(HEAD + BODY), hb=True).hb_table == {
        ("bars", "SYNCS.EXCH.64", 0, "SYNCS.PHASECHK.TRANS64.TRYWAIT", 1, "", "CTA barrier", "w", "red"): 2,
        ("bars", "SYNCS.EXCH.64", 0, "SYNCS.ARRIVE.TRANS64", 0, "", "program order", "w", "red"): 1,
        ("bars", "SYNCS.EXCH.64", 0, "UBLKCP.S.G", 0, "", "", "w", "red"): 2,
        ("bars", "SYNCS.EXCH.64", 0, "SYNCS.PHASECHK.TRANS64.TRYWAIT", 0, "", "program order", "w", "red"): 1,
        ("data", "UBLKCP.S.G", 0, "LDS", 1, "", "wait on bars", "w", "r"): 2}


def test_a_read_handed_over_to_another_cta_s_write() -> None:
    """The other way round: CTA 0 reads the words, fences and raises the flag; CTA 1 waits for it,
    acquires and overwrites them. The write is ordered after the read (a read needs no fence to be
    published: only a write another CTA reads does)."""
    body = _flag_edit("  @c0 BRA READER\n  MOV v, 0x5\n  STG.E desc[memdesc][q.64], v\n  MEMBAR.ALL.GPU\n",
                      "  @!c0 BRA READER\n  LDG.E v, desc[memdesc][q.64]\n  MEMBAR.ALL.GPU\n")
    body = body.replace("  MEMBAR.ALL.GPU\n  LDG.E v, desc[memdesc][q.64]\n  EXIT\n",
                        "  MEMBAR.ALL.GPU\n  MOV v, 0x5\n  STG.E desc[memdesc][q.64], v\n  EXIT\n")
    assert "STG.E desc[memdesc][q.64], v\n  EXIT" in body
    assert check_kernel(parse(FLAG_HEAD + body)).messages(20) == []


def test_the_hb_table_of_a_flag_between_ctas() -> None:
    assert check_kernel(parse(FLAG_HEAD + FLAG_BODY), hb=True).hb_table == {
        ("words", "STG.E", 0, "LDG.E", 0, " of another CTA", "GPU-scope flag", "w", "r"): 1}


def test_an_older_flag_read_later_keeps_what_the_newer_one_released() -> None:
    """CTA 1 raises flag B (+0x84), then stores the words and raises flag A (+0x80), each after a
    fence; CTA 0 waits for A, then reads B (released earlier, with less), fences and reads the
    words: what A released stays acquired (a later, older flag does not lower it)."""
    body = _flag_edit("  MOV v, 0x5\n  STG.E desc[memdesc][q.64], v\n  MEMBAR.ALL.GPU\n  ELECT leader, URZ, PT\n  MOV one, 0x1\n",
                      "  ELECT leader, URZ, PT\n  MOV one, 0x1\n  MEMBAR.ALL.GPU\n"
                      "  @leader REDG.E.ADD.STRONG.GPU desc[memdesc][p.64+0x84], one\n"
                      "  MOV v, 0x5\n  STG.E desc[memdesc][q.64], v\n  MEMBAR.ALL.GPU\n")
    body = body.replace("  @ready BRA POLL\n  MEMBAR.ALL.GPU\n",
                        "  @ready BRA POLL\n  LDG.E.STRONG.GPU v, desc[memdesc][p.64+0x84]\n  MEMBAR.ALL.GPU\n")
    assert body.count("p.64+0x84") == 2
    assert check_kernel(parse(FLAG_HEAD + body)).messages(20) == []
