"""A bulk copy from one CTA's shared memory to its peer's (`UBLKCP.S.S`, cp.async.bulk.shared::cluster.
shared::cta) on a two-CTA cluster: each CTA writes 256 bytes with STS, fences the proxy, synchronises,
and one elected thread copies them into the peer's `recv`, completing on the peer's barrier (armed
by the receiver with arrive.expect_tx); the receiver waits and stores what landed to `out`. The
clean program runs clean with values (each CTA stores its peer's words) and assembles; each mutant
breaks one rule the checker must report, its verdict pinned word for word."""

from __future__ import annotations

import numpy as np
import pytest

from warpy.check.report import check_kernel
from warpy.isa.families import alu, control, memory, sync, tma
from warpy.isa.operands import URZ, CBank, GMem, Mem
from warpy.isa.pipes import init_barriers, wait
from warpy.isa.program import Program
from warpy.isa.text import parse
from warpy.kernels.probes import HostCase, ProbeExpectation
from warpy.layout import Layout
from warpy.lift.lifter import build, lift

WORDS = 64  # 256 bytes a CTA sends


def peer_copy(fence: bool = True, size: int = 4 * WORDS, read_early: bool = False, exit_sync: bool = True,
              rewrite: bool = False) -> Program:
    """The clean program, or one mutant: no proxy fence, another size, the receiver reading before its
    wait, no cluster barrier before the exit, or the sender rewriting its words once its own barrier
    completes (which says nothing about its own copy's read)."""
    p = Program("bulk_peer", "sm_90a", threads=64, grid=(2, 1, 1), cluster=(2, 1, 1))
    out = p.param("out", "u64")
    p.global_buffer("out", Layout((2, WORDS), (4 * WORDS, 4)), "u32", source="out")
    send = p.smem_words("send", WORDS)
    recv = p.smem_words("recv", WORDS)
    full = p.barriers("recv_full", 1)
    init_barriers(p)
    warp = p.warp_index()
    tid, cta, v = p.r("tid"), p.r("cta"), p.r("v")
    rank, peer = p.ur("rank"), p.ur("peer")
    p.emit(alu.s2r(tid, "SR_TID.X"))
    p.emit(alu.s2r(cta, "SR_CTAID.X"))
    p.emit(alu.s2ur(rank, "SR_CgaCtaId"))
    p.emit(alu.ulop3(peer, rank, 1, URZ, 0x3C))
    w0 = p.p("w0")
    p.emit(alu.isetp("EQ", w0, warp, 0))
    leader = p.elect()
    with p.when(w0):  # the receiver arms its barrier for the peer's 256 bytes
        nbytes = p.r("nbytes")
        p.emit(alu.mov(nbytes, 4 * WORDS))
        p.derive.emit_at(full.at(0), lambda b: sync.arrive_expect_tx(b, nbytes), guard=leader)
    # each thread writes one word of the send buffer: 0x1000 x (CTA + 1) + tid
    sbase, saddr = p.ur("send_addr"), p.r("saddr")
    p.derive.into(sbase, "addr", send.at(0))
    p.emit(alu.imad(saddr, tid, 4, sbase))
    p.emit(alu.imad(v, cta, 0x1000, tid))
    p.emit(alu.iadd3(v, v, 0x1000))
    p.emit(memory.sts(Mem(saddr), v))
    if fence:
        p.emit(sync.fence_proxy_async())
    p.emit(sync.bar_sync(1, 64))
    # the peer's barrier is initialised and armed, and its words written, before either copy
    p.emit(sync.cluster_arrive())
    p.emit(sync.cluster_wait())
    rbase, raddr = p.ur("recv_addr"), p.r("raddr")
    p.derive.into(rbase, "addr", recv.at(0))
    p.emit(alu.imad(raddr, tid, 4, rbase))
    with p.when(w0):  # warp 0's elected thread copies the words into the peer's recv, on the peer's barrier
        cp, n = p.urvec("cp_args", 2), p.ur("size")
        p.derive.into(cp[0], "addr", recv.at(0))
        p.emit(alu.mapa(cp[0], peer, cp[0]))
        p.derive.into(cp[1], "addr", full.at(0))
        p.emit(alu.mapa(cp[1], peer, cp[1]))
        p.emit(alu.umov(n, size))
        p.emit(tma.bulk_copy_s_s(Mem(cp), Mem(sbase), n).guarded(leader))
    got = p.r("got")
    if read_early:
        p.emit(memory.lds(got, Mem(raddr)))
    zero = p.r("phase0")
    p.emit(alu.mov(zero, 0))
    wait(p, full.at(0), zero)
    if not read_early:
        p.emit(memory.lds(got, Mem(raddr)))
    if rewrite:
        p.emit(memory.sts(Mem(saddr), tid))
    optr, md, gi = p.rvec("optr", 2), p.urvec("memdesc", 2), p.r("gi")
    p.emit(alu.ldc(optr, out.cbank()))
    p.emit(alu.uldc(md, CBank(0, p.target.memdesc), p.sm))
    p.emit(alu.imad(gi, cta, WORDS, tid))
    p.emit(alu.imad_wide(optr, gi, 4, optr))
    p.emit(memory.stg(GMem(md, optr), got))
    if exit_sync:  # no CTA exits while the peer's copy may still read its send buffer
        p.emit(sync.cluster_arrive())
        p.emit(sync.cluster_wait())
    p.emit(control.exit_())
    return p


def _peer_words() -> np.ndarray:
    """out[cta] = the words the other CTA wrote: 0x1000 x (peer + 1) + tid."""
    return np.array([[0x1000 * (2 - c) + t for t in range(WORDS)] for c in range(2)], np.uint32)


def test_the_copy_runs_clean_with_values_and_lands_the_peers_words() -> None:
    p = peer_copy()
    e = ProbeExpectation(HostCase(arrays={"out": np.zeros((2, WORDS), np.uint32)}, expected={"out": _peer_words()}))
    rep = check_kernel(p.kernel(), p.coloured(), values=True, expect=e)
    assert rep.ok, rep.text()
    assert (rep.values_checked, rep.values_wrong) == (2 * WORDS, 0) and rep.notes_checked > 0
    assert e.outputs["out"].tolist() == _peer_words().tolist()
    assert check_kernel(p.kernel()).ok  # without values too


def test_the_copy_lifts_and_assembles_for_sm_90a() -> None:
    """The lifted PTX names the copy as the PTX ISA spells it; ptxas assembles it to UBLKCP.S.S (the
    disassembly check), and the printed text lifts to the same PTX."""
    from warpy.lift.disasm import disassemble

    kernel = peer_copy().kernel()
    ptx = lift(kernel, "sm_90a")
    assert ptx.count("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes") == 1
    assert lift(parse(str(kernel))) == ptx
    assert "UBLKCP.S.S" in disassemble(build(kernel, "sm_90a")).opcodes()


SEND = ("send: UBLKCP.S.S, warp 0 reads it through the async proxy and STS, warp {w} writes it through the generic "
        "proxy, and no proxy fence orders the two (2 times)")
HANG = ("hang: CTA {c} warp {w} waits on recv_full[0] for the phase of parity 0: it is in phase 0, 0 of 1 arrivals to "
        "come, 8 bytes")
EXIT = ("CTA {c}: UBLKCP.S.S, warp 0 reads send asynchronously, and nothing orders that before CTA {c} exits (no wait "
        "of its warps sees it done: its shared memory may be gone)")

CASES = [
    # (a) the STS are not fenced before the copy engine reads them
    ("no-proxy-fence", dict(fence=False), [SEND.format(w=0), SEND.format(w=1)]),
    # (b) 248 bytes: not a multiple of 16 (and the 256 the receivers expect never all land)
    ("size-248", dict(size=0xF8),
     [HANG.format(c=c, w=w) for c in (0, 1) for w in (0, 1)]
     + [f"CTA {c} warp 0: UBLKCP.S.S copies 248 bytes: a bulk copy moves a positive multiple of 16 bytes" for c in (0, 1)]),
    # (c) the receiver reads recv before its wait: nothing orders the read with the landing
    ("read-before-wait", dict(read_early=True),
     ["recv: LDS, warp 0 reads it and UBLKCP.S.S, warp 0 writes it, and nothing orders the two",
      "recv: LDS, warp 1 reads it and UBLKCP.S.S, warp 0 writes it, and nothing orders the two (2 times)",
      "recv: UBLKCP.S.S, warp 0 writes it and LDS, warp 0 reads it, and nothing orders the two"]),
    # (d) no cluster barrier before the exit: the sender may leave while its copy still reads its words
    ("exit-before-peer-waits", dict(exit_sync=False), [EXIT.format(c=0), EXIT.format(c=1)]),
    # (e) the sender's own barrier completing (the peer's copy landed) does not order its own copy's read
    ("rewrite-after-own-wait", dict(rewrite=True),
     [f"send: UBLKCP.S.S, warp 0 reads it and STS, warp {w} writes it, and nothing orders the two (2 times)" for w in (0, 1)]),
]


@pytest.mark.parametrize("name,kw,want", CASES, ids=[c[0] for c in CASES])
def test_mutants_are_reported(name: str, kw: dict[str, object], want: list[str]) -> None:
    p = peer_copy(**kw)  # type: ignore[arg-type]
    assert check_kernel(p.kernel(), p.coloured()).messages(20) == want


def test_a_copy_between_ctas_shared_memories_is_no_global_access_for_the_faults() -> None:
    """`global-before-wait` moves the dependent-launch wait after the first global access: a bulk copy
    into another CTA's shared memory (UBLKCP.S.S) reaches no global memory, one from global
    (UBLKCP.S.G) does."""
    from warpy.check.faults import _reaches_global
    from warpy.isa.families import tma
    from warpy.isa.operands import Mem, UR

    args, src, size = Mem(UR("args")), Mem(UR("src")), UR("size")
    assert not _reaches_global(tma.bulk_copy_s_s(args, src, size))
    assert _reaches_global(tma.bulk_copy_s_g(args, src, size))
