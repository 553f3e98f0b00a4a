"""The checker's handlers of `warpy/check/families/sync.py`, `control.py` and `clc.py` on small kernels:
each breaks one rule beside its clean twin, the checker's whole verdict pinned word for word (the
corpus matches one message a case), or runs with values and pins the words it wrote. Each case runs
in well under a second; docs/testing.md ("sync.py, control.py and clc.py: the handlers") lists the
mutation run these tests answer."""

from __future__ import annotations

from typing import Optional

import numpy as np
import pytest

from warpy.check.report import check_kernel
from warpy.isa.text import parse
from warpy.kernels.probes import HostCase, ProbeExpectation

from test_mutants_check import EXIT_COPY, FLAG_BODY, FLAG_HEAD, HANG, HEAD, RACE, UNORDERED, _edit, _flag_edit


# -- mbarrier init, arrive and wait (SYNCS.EXCH, SYNCS.ARRIVE, SYNCS.PHASECHK), on test_mutants_check.py's base program (first in
# the file: a mutant that makes a wait loop spin hangs a case below until the scheduler's step limit,
# so the cases that kill it quickly run before)

INIT = "  SYNCS.EXCH.64 URZ, [bar], mbar_init\n"
MBAR_INIT = "  UMOV mbar_init.0, 0x1ffffe\n  UMOV mbar_init.1, 0x7ffff800\n"
LANES_HEAD = HEAD.replace(".reg P done\n", ".reg P done\n.reg R baddr\n.reg P l0\n")
# bars[0] at shared 0x8: address 0 is no barrier (below it, so first among a warp's sorted addresses)
BARS_AT_8 = LANES_HEAD.replace("bars smem base=0x0 size=0x8", "bars smem base=0x8 size=0x8")
# two barriers: bars[1] initialised only where a case says
TWO_BARS = LANES_HEAD.replace(".mbarriers 1", ".mbarriers 2").replace(
    "bars smem base=0x0 size=0x8 elem=mbarrier layout=1:8", "bars smem base=0x0 size=0x10 elem=mbarrier layout=2:8")
NOT_A_BARRIER = "CTA 0 warp {w}: {op} uses shared 0x{a:x} as an mbarrier, which no mbarrier buffer declares"
CONSUMER = "CONSUMER:\n  MOV par, RZ\nWAIT:\n  SYNCS.PHASECHK.TRANS64.TRYWAIT done, [bar], par\n"
CONSUMER_READS = CONSUMER + "  @!done BRA WAIT\n  IMAD addr, lane, 0x4, RZ\n  LDS v, [addr+smem+0x80]\n"
# only the consumer's lane 0 waits, once (no loop); the lanes whose `done` is then false leave, the
# others store a word a lane past every buffer: the store's extent counts the lanes the wait set. The
# producer does not wait either (no loop in the kernel: a mutant whose wait never passes ends at once)
ONE_LANE_WAITS = _edit(CONSUMER_READS, "CONSUMER:\n  ISETP.EQ.U32.AND l0, PT, lane, 0x0, PT\n"
                       "  ISETP.NE.U32.AND done, PT, RZ, RZ, PT\n  MOV par, RZ\n"
                       "  @l0 SYNCS.PHASECHK.TRANS64.TRYWAIT done, [bar+0x80], par\n  @!done EXIT\n"
                       "  IMAD addr, lane, 0x4, RZ\n  STS [addr+smem+0x400], lane\n").replace(
    "WAITP:\n  SYNCS.PHASECHK.TRANS64.TRYWAIT done, [bar], par\n  @!done BRA WAITP\n", "")
PAST = "CTA 0 warp 1: STS touches shared 0x800..0x804, outside every shared buffer the kernel declares"
FRESH = """\
  S2R tid, SR_TID.X
  S2R lane, SR_LANEID
  SHF.R.U32.HI warp, RZ, 0x5, tid
  UMOV smem, `(dsmem)
  UIADD3 bar, smem, 0x0, URZ
  ISETP.EQ.U32.AND w0, PT, warp, 0x0, PT
  IMAD addr, lane, 0x4, RZ
  @!w0 BRA CONSUMER
  MOV v, 0x7
  STS [addr+smem+0x80], v
  ELECT leader, URZ, PT
  @!leader EXIT
  UMOV mbar_init.0, 0x1ffffe
  UMOV mbar_init.1, 0x7ffff800
  SYNCS.EXCH.64 URZ, [bar], mbar_init
  EXIT
CONSUMER:
  MOV par, 0x80000000
WAIT:
  SYNCS.PHASECHK.TRANS64.TRYWAIT done, [bar], par
  @!done BRA WAIT
  LDS v, [addr+smem+0x80]
  EXIT
"""
COPY_BARS = _edit("  @!done BRA WAITP\n  EXIT\n", "  @!done BRA WAITP\n  UMOV size, 0x10\n  @leader UBLKCP.G.S [gsrc], [bar], size\n"
                  "  @leader UTMACMDFLUSH\n  @leader DEPBAR.LE SB0, 0x0\n  EXIT\n")
ARRIVE = "  MOV nbytes, 0x80\n  @leader SYNCS.ARRIVE.TRANS64 RZ, [bar], nbytes\n"
ARRIVE_LANE_1 = ("  MOV nbytes, 0x80\n  @leader MOV nbytes, 0x40\n  ISETP.EQ.U32.AND l0, PT, lane, 0x1, PT\n"
                 "  @l0 SYNCS.ARRIVE.TRANS64{} RZ, [bar], nbytes\n")
INIT_WAIT_CASES = [
    # one lane's wait on a data word, or on a barrier never initialised, passes for that lane only
    ("one-lane-waits-on-data", LANES_HEAD, ONE_LANE_WAITS,
     [PAST, NOT_A_BARRIER.format(w=1, op="SYNCS.PHASECHK.TRANS64.TRYWAIT", a=0x480), EXIT_COPY]),
    ("one-lane-waits-on-a-barrier-not-initialised", TWO_BARS, ONE_LANE_WAITS.replace("[bar+0x80]", "[bar+0x8]"),
     ["CTA 0 warp 1 waits on bars[1], which is not initialised", PAST, EXIT_COPY]),
    # on bars[0], not passed and no loop: every lane leaves
    ("one-lane-waits-once", LANES_HEAD, ONE_LANE_WAITS.replace("[bar+0x80]", "[bar]"), [EXIT_COPY]),
    # lane 0 waits for parity 1 on bars[1], initialised and never arrived on: passed, for lane 0 only
    ("one-lane-waits-on-a-fresh-phase", TWO_BARS,
     ONE_LANE_WAITS.replace("[bar+0x80], par", "[bar+0x8], par").replace("  MOV par, RZ\n  @l0", "  MOV par, 0x80000000\n  @l0")
     .replace(INIT, INIT + "  SYNCS.EXCH.64 URZ, [bar+0x8], mbar_init\n"), [PAST, EXIT_COPY]),
    # lane 0's wait on bars[0] does not pass (no loop): its `done` false, the other lanes' kept true
    ("one-lane-fails-its-wait", LANES_HEAD, ONE_LANE_WAITS.replace("[bar+0x80]", "[bar]").replace(
        "ISETP.NE.U32.AND done, PT, RZ, RZ, PT", "ISETP.EQ.U32.AND done, PT, RZ, RZ, PT"),
     ["CTA 0 warp 1: STS touches shared 0x804..0x880, outside every shared buffer the kernel declares", EXIT_COPY]),
    # lanes 0 and 1 arrive remotely (.RED) on cluster addresses of ranks 1 and 2: a one-CTA cluster has
    # neither, each reported; then at two data words, each reported
    ("remote-arrives-at-ranks-the-cluster-has-not", LANES_HEAD.replace(".reg UR size\n", ".reg UR size\n.reg UR far\n"),
     _edit(ARRIVE, ARRIVE + "  IMAD baddr, lane, 0x1000000, RZ\n  UIADD3 far, bar, 0x1000000, URZ\n"
                            "  ISETP.LT.U32.AND l0, PT, lane, 0x2, PT\n  @l0 SYNCS.ARRIVE.TRANS64.RED.A1T0 RZ, [baddr+far], RZ\n"),
     [f"CTA 0 warp 0: SYNCS.ARRIVE.TRANS64.RED.A1T0 arrives on cluster address 0x{r}000400, a CTA rank the cluster has not"
      for r in (1, 2)]),
    ("arrives-at-two-data-words", LANES_HEAD,
     _edit(ARRIVE, ARRIVE + "  IMAD baddr, lane, 0x8, RZ\n  ISETP.LT.U32.AND l0, PT, lane, 0x2, PT\n"
                            "  @l0 SYNCS.ARRIVE.TRANS64.A1T0 RZ, [baddr+bar+0x80], RZ\n"),
     [NOT_A_BARRIER.format(w=0, op="SYNCS.ARRIVE.TRANS64.A1T0", a=a) for a in (0x480, 0x488)]),
    ("init-of-data", HEAD, _edit(INIT, INIT + "  SYNCS.EXCH.64 URZ, [bar+0x80], mbar_init\n"),
     [NOT_A_BARRIER.format(w=0, op="SYNCS.EXCH.64", a=0x480)]),
    # the init word never written: a count of 2^20 (the register file's zeros), never reached
    ("init-word-never-written", HEAD, _edit(MBAR_INIT, ""),
     [HANG.format(w=w, pending=(1 << 20) - 1, count=1 << 20, tx=0) for w in (0, 1)]
     + ["line 10 (SYNCS.EXCH.64): CTA 0 warp 0 reads mbar_init.0, mbar_init.1 before any instruction wrote it (the "
        "register holds whatever the register file had)"]),
    # warp 1 invalidates the barrier warp 0 initialised and initialises it again, a CTA barrier between
    ("init-again-by-another-warp", HEAD, _edit("INIT:\n  BAR.SYNC.DEFER_BLOCKING 0x0\n",
                                               "INIT:\n  BAR.SYNC.DEFER_BLOCKING 0x0\n  @w0 BRA SKIP\n  @!leader BRA SKIP\n"
                                               "  SYNCS.CCTL.IV [bar]\n" + MBAR_INIT + INIT + "  FENCE.MBARRIER_INIT\n"
                                               "SKIP:\n  BAR.SYNC.DEFER_BLOCKING 0x0\n"), []),
    # lanes 0 and 1 initialise shared 0x0 and 0x8 (each lane's register holds lane x 8): 0x0 is
    # reported, bars[0] initialised all the same; the other lanes' addresses are not used
    ("init-at-the-running-lanes-addresses", BARS_AT_8,
     _edit("  @!leader BRA INIT\n" + MBAR_INIT + INIT,
           "  IMAD baddr, lane, 0x8, RZ\n  ISETP.LT.U32.AND l0, PT, lane, 0x2, PT\n  @!l0 BRA INIT\n" + MBAR_INIT
           + "  SYNCS.EXCH.64 URZ, [baddr+smem], mbar_init\n").replace(
               "  UIADD3 bar, smem, 0x0, URZ\n", "  UIADD3 bar, smem, 0x8, URZ\n"),
     [NOT_A_BARRIER.format(w=0, op="SYNCS.EXCH.64", a=0x400)]),
    # the consumer's lane 0 leaves first; its address (a data word) and parity (1) are not the wait's
    ("wait-at-the-running-lanes-address-and-parity", LANES_HEAD,
     _edit(CONSUMER, "CONSUMER:\n  ISETP.EQ.U32.AND l0, PT, lane, 0x0, PT\n  MOV par, RZ\n  MOV baddr, RZ\n"
                     "  @l0 MOV par, 0x80000000\n  @l0 MOV baddr, 0x80\n  @l0 EXIT\nWAIT:\n"
                     "  SYNCS.PHASECHK.TRANS64.TRYWAIT done, [baddr+bar], par\n"), []),
    # one lane's arrive declares the bytes in its own register (lane 0's holds half); an expect-only
    # arrive (A0TR) the same; an arrival without bytes (A1T0) ignores its register
    ("arrive-with-the-running-lane-s-bytes", LANES_HEAD, _edit(ARRIVE, ARRIVE_LANE_1.format("")), []),
    ("expect-tx-with-the-running-lane-s-bytes", LANES_HEAD,
     _edit(ARRIVE, ARRIVE_LANE_1.format(".RED.A0TR") + "  @leader SYNCS.ARRIVE.TRANS64.A1T0 RZ, [bar], RZ\n"), []),
    ("arrival-ignores-its-register", LANES_HEAD,
     _edit(ARRIVE, "  MOV nbytes, 0x80\n  @leader SYNCS.ARRIVE.TRANS64.RED.A0TR RZ, [bar], nbytes\n"
                   "  @leader SYNCS.ARRIVE.TRANS64.A1T0 RZ, [bar], nbytes\n"), []),
    # a second init after the warp's mbarrier-init fence, and a second fence
    ("init-fence-init-fence", TWO_BARS, _edit(INIT + "  FENCE.MBARRIER_INIT\n", INIT + "  FENCE.MBARRIER_INIT\n"
                                              "  SYNCS.EXCH.64 URZ, [bar+0x8], mbar_init\n  FENCE.MBARRIER_INIT\n"), []),
    # a wait on a data word: reported, and passes (what it should order is not)
    ("wait-on-data", HEAD, _edit(CONSUMER, CONSUMER.replace("[bar]", "[bar+0x80]")),
     [NOT_A_BARRIER.format(w=1, op="SYNCS.PHASECHK.TRANS64.TRYWAIT", a=0x480), RACE + " (2 times)"]),
    # warp 0 stores the data, then initialises the barrier and leaves (no CTA barrier); warp 1's wait
    # for parity 1 passes on the fresh barrier and orders nothing: neither the init nor the store
    ("fresh-parity-1-orders-nothing", HEAD, FRESH,
     ["bars[0]: SYNCS.EXCH.64, warp 0 writes it and SYNCS.PHASECHK.TRANS64.TRYWAIT, warp 1 waits on it, and nothing "
      "orders the two", "data: STS, warp 0 writes it and LDS, warp 1 reads it, and nothing orders the two"]),
    # the producer, after its wait, copies the barrier's words out with a bulk copy (the async proxy):
    # its own wait touched them through the generic proxy, and no proxy fence is between
    ("bulk-copy-of-the-barrier-word", TWO_BARS, COPY_BARS, [
        "bars[0]: SYNCS.PHASECHK.TRANS64.TRYWAIT, warp 1 waits on it and UBLKCP.G.S, warp 0 reads it, and nothing orders "
        "the two",
        "bars[0]: UBLKCP.G.S, warp 0 reads it and SYNCS.PHASECHK.TRANS64.TRYWAIT, warp 1 waits on it, and nothing orders "
        "the two",
        "bars[0]: UBLKCP.G.S, warp 0 reads it through the async proxy and SYNCS.PHASECHK.TRANS64.TRYWAIT, warp 0 waits on "
        "it through the generic proxy, and no proxy fence orders the two"]),
]


@pytest.mark.parametrize("name,head,body,want", INIT_WAIT_CASES, ids=[c[0] for c in INIT_WAIT_CASES])
def test_mbarrier_init_and_wait(name: str, head: str, body: str, want: list[str]) -> None:
    assert check_kernel(parse(head + body)).messages(20) == want


# -- setmaxnreg: two warpgroups launched with 128 registers a thread; warpgroup 0 gives its warps' down
# to 40, warpgroup 1 asks for 216 each, retried until granted. The pool (128 x 256 threads) then holds
# exactly 4 x 40 + 4 x 216 registers a lane: the last request fits with nothing to spare.

SMR_HEAD = """\
.kernel r
.sm sm_90a
.threads 256
.maxnreg 128
.grid 1 1 1
.cluster 1 1 1
.mbarriers 0
.reg R tid
.reg R warp
.reg R n
.reg UP ok
.reg P wg0
"""

SMR = """\
  S2R tid, SR_TID.X
  SHF.R.U32.HI warp, RZ, 0x7, tid
  ISETP.EQ.U32.AND wg0, PT, warp, 0x0, PT
  @!wg0 BRA GROW
  USETMAXREG.DEALLOC.CTAPOOL 0x28
  EXIT
GROW:
  USETMAXREG.TRY_ALLOC.CTAPOOL ok, 0xd8
  @!ok BRA GROW
  EXIT
"""

# warpgroup 0 first spins a while, so warpgroup 1's requests find the pool full and wait for its
# DEALLOC to wake them
LATE_DEALLOC = SMR.replace("  USETMAXREG.DEALLOC", "  MOV n, 0x10\nSPIN:\n  IADD3 n, n, -0x1, RZ\n"
                           "  ISETP.NE.U32.AND wg0, PT, n, 0x0, PT\n  @wg0 BRA SPIN\n  USETMAXREG.DEALLOC")


def _pool_hang(w: int, n: int, free: int, used: int) -> str:
    return (f"hang: CTA 0 warp {w} waits on setmaxnreg to {n} registers: the CTA's pool of 32768 holds {free} more "
            f"(its warps hold {used})")


# one request each, no retry loop: a request not granted goes on to name barrier 16 (reported)
ONCE = SMR.replace("  @!ok BRA GROW\n  EXIT\n", "  @ok EXIT\n  BAR.SYNC.DEFER_BLOCKING 0x10\n  EXIT\n")
# warpgroup 1 waits at named barrier 1 (both warpgroups) while warpgroup 0 spins, then gives its
# registers back: a DEALLOC wakes the warps waiting for registers, not those at a barrier
WAKE = LATE_DEALLOC.replace("  USETMAXREG.DEALLOC.CTAPOOL 0x28\n  EXIT\n",
                            "  USETMAXREG.DEALLOC.CTAPOOL 0x28\n  BAR.SYNC.DEFER_BLOCKING 0x1, 0x100\n  EXIT\n").replace(
    "GROW:\n  USETMAXREG.TRY_ALLOC.CTAPOOL ok, 0xd8\n  @!ok BRA GROW\n  EXIT\n", "GROW:\n  BAR.SYNC.DEFER_BLOCKING 0x1, 0x100\n  EXIT\n")
# .maxnreg 256: warp 0 alone raises its registers to 264 (reported), the pool is then 256 registers
# over; warpgroup 1 asks for the 256 it has and waits (the pool does not hold what is already used)
OVER = SMR.replace("DEALLOC.CTAPOOL 0x28", "DEALLOC.CTAPOOL 0x108").replace("0xd8", "0x100").replace(
    "  @!wg0 BRA GROW\n", "  @!wg0 BRA GROW\n  SHF.R.U32.HI n, RZ, 0x5, tid\n  ISETP.EQ.U32.AND wg0, PT, n, 0x0, PT\n  @!wg0 EXIT\n")

SMR_CASES = [
    ("once-granted", SMR_HEAD, ONCE, []),
    ("once-without-a-pool", SMR_HEAD.replace(".maxnreg 128\n", ""), ONCE, []),
    ("exactly-the-pool", SMR_HEAD, SMR, []),
    # each gives back or asks for the registers it has: neither raises nor lowers
    ("the-same-count", SMR_HEAD, SMR.replace("DEALLOC.CTAPOOL 0x28", "DEALLOC.CTAPOOL 0x80").replace("0xd8", "0x80"), []),
    # a second DEALLOC (to 80, from 40) raises; a second TRY_ALLOC (to 200, from 216) lowers
    ("dealloc-twice", SMR_HEAD, SMR.replace("  USETMAXREG.DEALLOC.CTAPOOL 0x28\n",
                                            "  USETMAXREG.DEALLOC.CTAPOOL 0x28\n  USETMAXREG.DEALLOC.CTAPOOL 0x50\n"),
     [f"CTA 0 warp {w}: USETMAXREG.DEALLOC.CTAPOOL 80 raises its registers from 40 (setmaxnreg.dec never raises)"
      for w in range(4)] + [_pool_hang(w, 216, 512, 32256) for w in (6, 7)]),
    ("alloc-twice", SMR_HEAD, SMR.replace("  @!ok BRA GROW\n  EXIT\n", "  @!ok BRA GROW\n  USETMAXREG.TRY_ALLOC.CTAPOOL ok, 0xc8\n  EXIT\n"),
     [f"CTA 0 warp {w}: USETMAXREG.TRY_ALLOC.CTAPOOL 200 lowers its registers from 216 (setmaxnreg.inc never lowers)"
      for w in (4, 5, 6, 7)]),
    ("dealloc-wakes-only-register-waits", SMR_HEAD, WAKE, []),
    ("pool-over-by-one-step", SMR_HEAD.replace(".maxnreg 128", ".maxnreg 256"), OVER,
     ["CTA 0 warp 0: USETMAXREG.DEALLOC.CTAPOOL 264 raises its registers from 256 (setmaxnreg.dec never raises)",
      "CTA 0 warpgroup 0: its warpgroup-collective instruction 1 differs: warps 1,2,3 run none; warp 0 run line 8 "
      "(USETMAXREG.DEALLOC.CTAPOOL) (all four warps must run each one together)"]
     + [f"hang: CTA 0 warp {w} waits on setmaxnreg to 256 registers: the CTA's pool of 65536 holds -256 more (its warps "
        f"hold 65792)" for w in (4, 5, 6, 7)]),
    ("late-dealloc", SMR_HEAD, LATE_DEALLOC, []),
    # 224 a lane: the last warp finds 4 x 40 + 3 x 224 + 128 = 960 a lane held, 2048 registers free
    ("one-step-over", SMR_HEAD, SMR.replace("0xd8", "0xe0"), [_pool_hang(7, 224, 2048, 30720)]),
    # nobody gives registers back: every request waits on a pool with nothing free
    ("no-dealloc", SMR_HEAD, SMR.replace("  USETMAXREG.DEALLOC.CTAPOOL 0x28\n", ""),
     [_pool_hang(w, 216, 0, 32768) for w in (4, 5, 6, 7)]),
    # no .maxnreg: no pool to account against, every request granted (its loop ends)
    ("no-pool", SMR_HEAD.replace(".maxnreg 128\n", ""), SMR.replace("0xd8", "0xf0"), []),
    ("dealloc-raises", SMR_HEAD, SMR.replace("DEALLOC.CTAPOOL 0x28", "DEALLOC.CTAPOOL 0x88"),
     [f"CTA 0 warp {w}: USETMAXREG.DEALLOC.CTAPOOL 136 raises its registers from 128 (setmaxnreg.dec never raises)"
      for w in range(4)] + [_pool_hang(w, 216, -1024, 33792) for w in (4, 5, 6, 7)]),
    ("alloc-lowers", SMR_HEAD, SMR.replace("0xd8", "0x78"),
     [f"CTA 0 warp {w}: USETMAXREG.TRY_ALLOC.CTAPOOL 120 lowers its registers from 128 (setmaxnreg.inc never lowers)"
      for w in (4, 5, 6, 7)]),
]


@pytest.mark.parametrize("name,head,body,want", SMR_CASES, ids=[c[0] for c in SMR_CASES])
def test_setmaxnreg_against_the_pool(name: str, head: str, body: str, want: list[str]) -> None:
    assert check_kernel(parse(head + body)).messages(20) == want


# -- cluster launch control: 8 one-CTA clusters (grid 2 x 2 x 2); each CTA adds 1 to its tile's word
# (x + 2y + 4z), asks for the next cluster (SELFCAST), waits for the 16 bytes and goes on with the tile
# it took while one was cancelled. With `resident` clusters launched, cluster r takes r + resident,
# r + 2 resident, ...: every tile is counted once; the simulated clusters' words are pinned.

CLC_HEAD = """\
.kernel c
.sm sm_100a
.threads 32
.dynsmem 1024
.grid 2 2 2
.cluster 1 1 1
.mbarriers 1
.param out u64
.buffer cnt global base=0x0 size=0x20 elem=u32 source=out layout=8:4
.buffer bars smem base=0x0 size=0x8 elem=mbarrier layout=1:8
.buffer resp smem base=0x10 size=0x10 elem=b128 layout=1:16
.reg R x
.reg R y
.reg R z
.reg R idx
.reg R one
.reg R par
.reg R sixteen
.reg R[2] p
.reg R[2] q
.reg R[4] answer
.reg UR smem
.reg UR bar
.reg UR rsp
.reg UR[2] mbar_init
.reg UR[2] memdesc
.reg P leader
.reg P done
.reg P got
"""

CLC = """\
  S2R x, SR_CTAID.X
  S2R y, SR_CTAID.Y
  S2R z, SR_CTAID.Z
  UMOV smem, `(dsmem)
  UIADD3 bar, smem, 0x0, URZ
  UIADD3 rsp, smem, 0x10, URZ
  ULDC.64 memdesc, c[0x0][0x208]
  LDC.64 p, c[0x0][out]
  ELECT leader, URZ, PT
  @!leader BRA INIT
  UMOV mbar_init.0, 0x1ffffe
  UMOV mbar_init.1, 0x7ffff800
  SYNCS.EXCH.64 URZ, [bar], mbar_init
  FENCE.MBARRIER_INIT
INIT:
  MOV par, RZ
  MOV one, 0x1
  MOV sixteen, 0x10
TILE:
  IMAD idx, y, 0x2, x
  IMAD idx, z, 0x4, idx
  IMAD.WIDE.U32 q, idx, 0x4, p
  @leader REDG.E.ADD.STRONG.GPU desc[memdesc][q.64], one
  @leader SYNCS.ARRIVE.TRANS64 RZ, [bar], sixteen
  @!leader BRA WAIT
  UGETNEXTWORKID.SELFCAST [rsp], [bar]
WAIT:
  SYNCS.PHASECHK.TRANS64.TRYWAIT done, [bar], par
  @!done BRA WAIT
  LOP3.LUT par, par, 0x80000000, RZ, 0x3c, !PT
  LDS.128 answer, [rsp]
  CLCQUERY.CANCELED got, answer
  @!got EXIT
  CLCQUERY.CTAID.X x, answer
  CLCQUERY.CTAID.Y y, answer
  CLCQUERY.CTAID.Z z, answer
  BRA TILE
"""


def _clc_counts(body: str, resident: Optional[int], values: bool) -> tuple[list[str], list[int]]:
    e = ProbeExpectation(HostCase(arrays={"out": np.zeros(8, np.uint32)}, expected={"out": np.ones(8, np.uint32)}))
    rep = check_kernel(parse(CLC_HEAD + body), resident=resident, values=values, expect=e if values else None)
    return rep.messages(20), [int(v) for v in e.outputs["out"]] if values else []


@pytest.mark.parametrize("resident,want", [(1, [1] * 8), (3, [1, 0, 1, 1, 0, 1, 1, 0]), (None, [1, 0, 0, 0, 0, 0, 0, 1])])
def test_cluster_launch_control_hands_out_each_tile_once(resident: Optional[int], want: list[int]) -> None:
    """resident 1: cluster 0 takes 1..7 in turn; 3: cluster 0 takes 3 and 6, cluster 2 takes 5 (the
    first and last clusters are the simulated ones); all 8 resident: every request is declined."""
    assert _clc_counts(CLC, resident, values=True) == ([], want)


def _grid(gx: int, gy: int, gz: int) -> tuple[str, str]:
    """The 8 tiles as another grid: the word of tile (x, y, z) is x + gx y + gx gy z."""
    return (CLC_HEAD.replace(".grid 2 2 2", f".grid {gx} {gy} {gz}"),
            CLC.replace("IMAD idx, y, 0x2, x", f"IMAD idx, y, 0x{gx:x}, x").replace("IMAD idx, z, 0x4, idx",
                                                                                  f"IMAD idx, z, 0x{gx * gy:x}, idx"))


@pytest.mark.parametrize("grid", [(1, 8, 1), (2, 1, 4), (1, 1, 8), (8, 1, 1)])
def test_each_tile_once_in_other_grids(grid: tuple[int, int, int]) -> None:
    head, body = _grid(*grid)
    e = ProbeExpectation(HostCase(arrays={"out": np.zeros(8, np.uint32)}, expected={"out": np.ones(8, np.uint32)}))
    rep = check_kernel(parse(head + body), resident=1, values=True, expect=e)
    assert rep.messages(20) == [] and [int(v) for v in e.outputs["out"]] == [1] * 8


# without values an LDS reads what the response wrote in the model's record of shared words: a taken
# tile is never tile 0 (launched first), so a response read wrong (tile 0) stores out of bounds
TRAP = CLC.replace("  BRA TILE\n", "  IMAD idx, y, 0x2, x\n  IMAD idx, z, 0x4, idx\n  ISETP.EQ.U32.AND got, PT, idx, 0x0, PT\n"
                   "  @got STG.E desc[memdesc][p.64+0x40], one\n  BRA TILE\n")


OUTSIDE = "CTA {c} warp 0: STG.E touches global out+0x40..+0x4, outside every global buffer the kernel declares"


@pytest.mark.parametrize("resident,sprung", [(1, [OUTSIDE.format(c=0) + " (7 times)"]),
                                             (3, [OUTSIDE.format(c=0) + " (2 times)", OUTSIDE.format(c=2)])])
def test_the_response_read_without_values(resident: int, sprung: list[str]) -> None:
    assert _clc_counts(TRAP, resident, values=False)[0] == []
    # the trap springs at every taken tile when the tile read is 0
    zero = TRAP.replace("  CLCQUERY.CTAID.Z z, answer\n", "  CLCQUERY.CTAID.Z z, answer\n  MOV x, RZ\n  MOV y, RZ\n  MOV z, RZ\n")
    assert _clc_counts(zero, resident, values=False)[0] == sprung


def test_asking_again_after_a_decline() -> None:
    again = CLC.replace("  @!got EXIT\n", "  @!got BRA LAST\n") + (
        "LAST:\n  @!leader EXIT\n  SYNCS.ARRIVE.TRANS64 RZ, [bar], sixteen\n  UGETNEXTWORKID.SELFCAST [rsp], [bar]\n  EXIT\n")
    assert _clc_counts(again, 3, values=False)[0] == [
        f"CTA {c} warp 0 asks cluster launch control again after it declined" for c in (0, 2)] + [
        f"CTA {c}: UGETNEXTWORKID.SELFCAST, warp 0 completes bytes on bars[0] asynchronously, and nothing orders that "
        f"before CTA {c} exits (no wait of its warps sees it done: its shared memory may be gone)" for c in (0, 2)]


# clusters of two CTAs (grid 4 x 2 x 2: 8 clusters, 16 tiles x + 4y + 8z): rank 0 asks for both, the
# BROADCAST response lands in each CTA and completes 16 bytes on its own barrier; each CTA takes the
# first CTA's x plus its rank. A cluster barrier after the init and after each read of the response.
CLC2_HEAD = (CLC_HEAD.replace(".grid 2 2 2", ".grid 4 2 2").replace(".cluster 1 1 1", ".cluster 2 1 1")
             .replace("size=0x20 elem=u32 source=out layout=8:4", "size=0x40 elem=u32 source=out layout=16:4")
             + ".reg R rank\n.reg P r0\n")
CLC2 = (CLC.replace("  IMAD idx, y, 0x2, x\n  IMAD idx, z, 0x4, idx\n", "  IMAD idx, y, 0x4, x\n  IMAD idx, z, 0x8, idx\n")
        .replace("  @!leader BRA WAIT\n  UGETNEXTWORKID.SELFCAST",
                 "  S2R rank, SR_CTAID.X\n  LOP3.LUT rank, rank, 0x1, RZ, 0xc0, !PT\n  ISETP.NE.U32.AND r0, PT, rank, 0x0, PT\n"
                 "  @r0 BRA WAIT\n  @!leader BRA WAIT\n  UGETNEXTWORKID.BROADCAST")
        .replace("  CLCQUERY.CTAID.X x, answer\n", "  CLCQUERY.CTAID.X x, answer\n  IADD3 x, x, rank, RZ\n")
        .replace("INIT:\n", "INIT:\n  UCGABAR_ARV\n  UCGABAR_WAIT\n")
        .replace("  LDS.128 answer, [rsp]\n", "  LDS.128 answer, [rsp]\n  UCGABAR_ARV\n  UCGABAR_WAIT\n"))


@pytest.mark.parametrize("resident", [1, 3])
def test_a_broadcast_response_lands_in_each_cta_of_the_cluster(resident: int) -> None:
    e = ProbeExpectation(HostCase(arrays={"out": np.zeros(16, np.uint32)}, expected={"out": np.ones(16, np.uint32)}))
    rep = check_kernel(parse(CLC2_HEAD + CLC2), resident=resident, values=True, expect=e)
    assert rep.messages(20) == [] and [int(v) for v in e.outputs["out"]] == [1] * 16
    # SELFCAST: rank 1's barrier never gets its 16 bytes
    assert check_kernel(parse(CLC2_HEAD + CLC2.replace("BROADCAST", "SELFCAST")), resident=resident).messages(20) == [
        "hang: CTA 0 warp 0 waits on the cluster barrier",
        "hang: CTA 1 warp 0 waits on bars[0] for the phase of parity 0: it is in phase 0, 0 of 1 arrivals to come, 16 bytes"]


# -- mbarrier invalidation (SYNCS.CCTL.IV), on test_mutants_check.py's base program -------------------------

INVAL_CASES = [
    # invalidated, then initialised again: no "again without invalidating it"
    ("inval-then-init", HEAD, _edit(INIT, INIT + "  SYNCS.CCTL.IV [bar]\n" + INIT), []),
    # each lane's register holds another address (lane x 8); only the elected lane runs the inval:
    # its address (bars[0]) is invalidated, the other lanes' are no barrier and not reported
    ("inval-at-the-running-lane-s-address", HEAD.replace(".reg P done\n", ".reg P done\n.reg R baddr\n"),
     _edit(INIT, INIT + "  SYNCS.CCTL.IV [baddr+bar]\n" + INIT).replace(
         "  S2R lane, SR_LANEID\n", "  S2R lane, SR_LANEID\n  IMAD baddr, lane, 0x8, RZ\n"), []),
    # invalidated and used: every use is of a barrier not initialised
    ("inval-then-use", HEAD, _edit(INIT, INIT + "  SYNCS.CCTL.IV [bar]\n"),
     ["CTA 0 warp 0 arrives on bars[0], which is not initialised", "CTA 0 warp 0 waits on bars[0], which is not initialised",
      "CTA 0 warp 1 waits on bars[0], which is not initialised",
      "a copy completes 64 bytes on bars[0], which is not initialised (2 times)", EXIT_COPY, RACE + " (2 times)"]),
    ("inval-of-data", HEAD, _edit(INIT, INIT + "  SYNCS.CCTL.IV [bar+0x80]\n"),
     ["CTA 0 warp 0: SYNCS.CCTL.IV uses shared 0x480 as an mbarrier, which no mbarrier buffer declares"]),
]


@pytest.mark.parametrize("name,head,body,want", INVAL_CASES, ids=[c[0] for c in INVAL_CASES])
def test_an_invalidated_barrier(name: str, head: str, body: str, want: list[str]) -> None:
    assert check_kernel(parse(head + body)).messages(20) == want


# -- fences on test_mutants_check.py's flag between two CTAs: the scope decides (MEMBAR.*.CTA orders
# nothing across CTAs), and a warp acquires twice (a flag read after the first acquire)

ACQUIRE = "  MEMBAR.ALL.GPU\n  LDG.E v, desc[memdesc][q.64]\n"
FENCE_CASES = [
    ("sys", FLAG_BODY.replace("MEMBAR.ALL.GPU", "MEMBAR.ALL.SYS"), []),
    ("sc-gpu", FLAG_BODY.replace("MEMBAR.ALL.GPU", "MEMBAR.SC.GPU"), []),
    ("cta", FLAG_BODY.replace("MEMBAR.ALL.GPU", "MEMBAR.ALL.CTA"), [UNORDERED]),
    ("release-sys-acquire-cta", _flag_edit(ACQUIRE, ACQUIRE.replace("GPU", "CTA")).replace("MEMBAR.ALL.GPU", "MEMBAR.ALL.SYS"),
     [UNORDERED]),
    ("acquire-twice", _flag_edit(ACQUIRE, "  MEMBAR.ALL.GPU\n  LDG.E.STRONG.GPU v, desc[memdesc][p.64+0x80]\n" + ACQUIRE), []),
    ("acquire-twice-by-cctl", _flag_edit(ACQUIRE, "  CCTL.IVALL\n  LDG.E.STRONG.GPU v, desc[memdesc][p.64+0x80]\n"
                                                  "  CCTL.IVALL\n  LDG.E v, desc[memdesc][q.64]\n"), []),
]


@pytest.mark.parametrize("name,body,want", FENCE_CASES, ids=[c[0] for c in FENCE_CASES])
def test_fence_scopes_and_acquires(name: str, body: str, want: list[str]) -> None:
    assert check_kernel(parse(FLAG_HEAD + body)).messages(20) == want


def test_the_hb_table_names_an_acquire_by_cctl() -> None:
    body = _flag_edit(ACQUIRE, "  CCTL.IVALL\n  LDG.E v, desc[memdesc][q.64]\n")
    assert check_kernel(parse(FLAG_HEAD + body), hb=True).hb_table == {
        ("words", "STG.E", 0, "LDG.E", 0, " of another CTA", "GPU-scope flag", "w", "r"): 1}


# -- the proxy fence: one warp stores a word a lane to shared memory and copies the 128 bytes to global
# memory with a bulk copy (the async proxy), waiting for it before it exits

PROXY_HEAD = HEAD.replace(".threads 64", ".threads 32").replace(".reg UR[2] cp\n", ".reg UR[2] cp\n.reg UR sa\n")
PROXY = """\
  S2R lane, SR_LANEID
  UMOV smem, `(dsmem)
  IMAD addr, lane, 0x4, RZ
  MOV v, 0x7
  STS [addr+smem+0x80], v
  FENCE.VIEW.ASYNC.S
  ELECT leader, URZ, PT
  ULDC.64 gsrc, c[0x0][src]
  UMOV size, 0x80
  UIADD3 sa, smem, 0x80, URZ
  @leader UBLKCP.G.S [gsrc], [sa], size
  @leader UTMACMDFLUSH
  @leader DEPBAR.LE SB0, 0x0
  EXIT
"""
NO_PROXY_FENCE = ("data: UBLKCP.G.S, warp 0 reads it through the async proxy and STS, warp 0 writes it through the generic "
                  "proxy, and no proxy fence orders the two")


@pytest.mark.parametrize("fence,want", [("FENCE.VIEW.ASYNC.S", []), ("FENCE.VIEW.ASYNC.T", [NO_PROXY_FENCE]),
                                        ("NOP", [NO_PROXY_FENCE]), ("FENCE.MBARRIER_INIT", [NO_PROXY_FENCE])])
def test_a_shared_write_read_by_a_bulk_copy_needs_the_proxy_fence(fence: str, want: list[str]) -> None:
    """.T (ptxas's fence around tcgen05 stores) and the mbarrier-init fence do not order the store."""
    assert check_kernel(parse(PROXY_HEAD + PROXY.replace("FENCE.VIEW.ASYNC.S", fence))).messages(20) == want


def test_a_query_of_the_ctaid_without_an_axis_reads_x() -> None:
    body = TRAP.replace("CLCQUERY.CTAID.X x", "CLCQUERY.CTAID x")
    assert _clc_counts(body, 1, values=False)[0] == [] and _clc_counts(body, 1, values=True) == ([], [1] * 8)


def test_a_second_cluster_wait_without_arriving() -> None:
    head = (CLC_HEAD.replace(".grid 2 2 2", ".grid 2 1 1").replace(".cluster 1 1 1", ".cluster 2 1 1"))
    body = "  S2R x, SR_TID.X\n  UCGABAR_ARV\n  UCGABAR_WAIT\n  UCGABAR_WAIT\n  EXIT\n"
    assert check_kernel(parse(head + body)).messages(20) == [
        f"CTA {c} warp 0 waits at the cluster barrier without arriving" for c in (0, 1)]


# -- ELECT and a named barrier's id in a register, on one warp: lane 0 leaves (or branches) first ---------

ONE_WARP = """\
.kernel e
.sm sm_90a
.threads 32
.dynsmem 256
.grid 1 1 1
.cluster 1 1 1
.mbarriers 0
.buffer data smem base=0x0 size=0x100 elem=u32 layout=64:4
.reg R lane
.reg R addr
.reg R id
.reg UR smem
.reg UR ul
.reg P l0
.reg P leader
"""
LANE_0_LEAVES = "  S2R lane, SR_LANEID\n  UMOV smem, `(dsmem)\n  IMAD addr, lane, 0x4, RZ\n  ISETP.EQ.U32.AND l0, PT, lane, 0x0, PT\n"
ELECT_CASES = [
    # lanes 1..31 elect lane 1: it stores its word past the buffer (at lane x 4)
    ("the-first-running-lane", LANE_0_LEAVES + "  @l0 EXIT\n  ELECT leader, URZ, PT\n  @leader STS [addr+smem+0x400], lane\n  EXIT\n",
     ["CTA 0 warp 0: STS touches shared 0x804..0x808, outside every shared buffer the kernel declares"]),
    # lane 0 set its `leader` before and skips the ELECT: it keeps it, and stores beside lane 1
    ("a-lane-not-running-keeps-its-predicate",
     LANE_0_LEAVES + "  ISETP.EQ.U32.AND leader, PT, lane, 0x0, PT\n  @l0 BRA SKIP\n  ELECT leader, URZ, PT\nSKIP:\n"
     "  @leader STS [addr+smem+0x400], lane\n  EXIT\n",
     ["CTA 0 warp 0: STS touches shared 0x800..0x808, outside every shared buffer the kernel declares"]),
    # the elected lane's id in a uniform register (1): every lane stores at 0x800 + 4 x 1
    ("the-elected-lane-s-id", LANE_0_LEAVES + "  @l0 EXIT\n  ELECT leader, ul, PT\n  USHF.L.U32 ul, ul, 0x2, URZ\n"
     "  STS [RZ+ul+0x800], lane\n  EXIT\n",
     ["CTA 0 warp 0: STS touches shared 0x804..0x808, outside every shared buffer the kernel declares"]),
    # named barrier 1 for 64 threads, its id in a register (lane 0's, 2, not the running lanes'): it
    # never completes, the hang names barrier 1
    ("a-named-barrier-s-id-in-a-register",
     LANE_0_LEAVES + "  MOV id, 0x1\n  @l0 MOV id, 0x2\n  @l0 EXIT\n  BAR.SYNC.DEFER_BLOCKING id, 0x40\n  EXIT\n",
     ["CTA 0: named barrier 1 ends with 31 of 64 threads arrived (generation 0)",
      "hang: CTA 0 warp 0 waits on named barrier 1 (31 of 64 threads arrived)",
      "line 8 (BAR.SYNC.DEFER_BLOCKING): CTA 0 warp 0 runs it on 31 of its 32 lanes; it is warp-aligned (.sync.aligned): "
      "every lane must run it together"]),
]


@pytest.mark.parametrize("name,body,want", ELECT_CASES, ids=[c[0] for c in ELECT_CASES])
def test_elect_and_a_barrier_id_among_the_running_lanes(name: str, body: str, want: list[str]) -> None:
    assert check_kernel(parse(ONE_WARP + body)).messages(20) == want
