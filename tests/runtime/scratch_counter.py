"""A tiny program with scratch memory, for the tests of scratch parameters (host checker, lifter,
runtime binding, and on an H200 the launch itself).

`epochs` is scratch: one u32 a thread, counting this kernel's launches on a stream. Each thread
copies its word to `out` (what the launch found: the number of earlier launches on that stream)
and writes it back one higher — the "keep its own epochs" way of using memory that is zeroed once
and never cleared again.
"""

from __future__ import annotations

from warpy.isa.families import alu, control, memory
from warpy.isa.operands import CBank, GMem, RZ
from warpy.isa.program import Program
from warpy.layout import Layout
from warpy.target import target

THREADS, CTAS = 64, 2
WORDS = THREADS * CTAS


def scratch_counter(arch: str = "sm_90a", scratch_words: int = WORDS) -> Program:
    """`scratch_words` < WORDS declares too little scratch (what the host checker must catch)."""
    p = Program("scratch_counter", arch, threads=THREADS, grid=(CTAS, 1, 1))
    epochs, _ = p.scratch("epochs", "epoch_words", Layout(scratch_words, 4), "u32")
    out = p.param("out", "u64")
    p.global_buffer("out_words", Layout(WORDS, 4), "u32", "out")
    tid, cta, idx = p.r("tid"), p.r("cta"), p.r("idx")
    p.emit(alu.s2r(tid, "SR_TID.X"))
    p.emit(alu.s2r(cta, "SR_CTAID.X"))
    p.emit(alu.imad(idx, cta, THREADS, tid))
    md = p.urvec("memdesc", 2)
    p.emit(alu.uldc(md, CBank(0, target(arch).memdesc), arch))
    eptr, optr = p.rvec("epochs_ptr", 2), p.rvec("out_ptr", 2)
    p.emit(alu.ldc(eptr, epochs.cbank()))
    p.emit(alu.ldc(optr, out.cbank()))
    ea, oa = p.rvec("epoch_addr", 2), p.rvec("out_addr", 2)
    p.emit(alu.imad_wide(ea, idx, 4, eptr))
    p.emit(alu.imad_wide(oa, idx, 4, optr))
    seen, nxt = p.r("seen"), p.r("next")
    p.emit(memory.ldg(seen, GMem(md, ea)))
    p.emit(memory.stg(GMem(md, oa), seen))
    p.emit(alu.iadd3(nxt, seen, 1, RZ))
    p.emit(memory.stg(GMem(md, ea), nxt))
    p.emit(control.exit_())
    return p
