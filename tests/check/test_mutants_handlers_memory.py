"""The checker's opcode handlers of `warpy/check/families/{memory,wgmma,alu}.py` (the `@semantics`
bodies, mutated since `.ci/mutation.py` undecorates them in its copy): small kernels run with and
without values, the checker's whole verdict and the bytes it moved pinned. Each answers survivors
of the handlers' mutation run (docs/testing.md, "the memory, wgmma and ALU handlers")."""

from __future__ import annotations

import functools
import re
from typing import Any

import numpy as np

from warpy.check.report import check_kernel
from warpy.isa.text import parse
from warpy.kernels import gemm as G

from tests.check.test_mutants_families import MATRIX, MEM_HEAD, SRC, _Bytes, _verdict

HEAD = MEM_HEAD + ".reg R b\n.reg R cl\n.reg P g\n"


def _run(body: str, src: np.ndarray = SRC) -> tuple[list[str], _Bytes]:
    e = _Bytes(src)
    return _verdict(HEAD + body, values=True, expect=e), e

GUARDED_STS = """\
  S2R lane, SR_LANEID
  UMOV smem, `(dsmem)
  ULDC.64 memdesc, c[0x0][0x208]
  LDC.64 q, c[0x0][dst]
  IMAD.WIDE.U32 qa, lane, 0x4, q
  IMAD sa, lane, 0x4, RZ
  IMAD sb, lane, 0x40, RZ
  MOV u.0, 0x11
  STS [sa+smem], u.0
  IADD3 v.0, lane, 0x64, RZ
  ISETP.LT.U32.AND g, PT, lane, 0x10, PT
  @g STS [{addr}+smem], v.0
  LDS u.1, [sa+smem]
  STG.E desc[memdesc][qa.64], u.1
  EXIT
"""


def test_a_guarded_store_to_shared_writes_and_checks_its_lanes_only() -> None:
    """Lanes 0..15 store 100 + l over the 0x11 every lane stored; lanes 16..31 keep 0x11. At 64
    bytes a lane the idle lanes' addresses (the buffer's 0x400 on) are past the shared buffer: not checked."""
    msgs, e = _run(GUARDED_STS.format(addr="sa"))
    assert msgs == []
    assert e.out[:128].view(np.uint32).tolist() == [100 + x for x in range(16)] + [0x11] * 16
    assert _verdict(HEAD + GUARDED_STS.format(addr="sb")) == []
    assert _verdict(HEAD + GUARDED_STS.format(addr="sb").replace("@g STS", "STS")) == [
        "CTA 0 warp 0: STS touches shared 0x400..0xbc4, outside every shared buffer the kernel declares"]


LAST_WORD = """\
  S2R lane, SR_LANEID
  UMOV smem, `(dsmem)
  ULDC.64 memdesc, c[0x0][0x208]
  LDC.64 q, c[0x0][dst]
  IMAD.WIDE.U32 qa, lane, 0x4, q
  IADD3 v.0, lane, 0x64, RZ
  ISETP.EQ.U32.AND g, PT, lane, 0x5, PT
  @g STS [smem+{off}], v.0
  LDS u.1, [smem+0x3fc]
  STG.E desc[memdesc][qa.64], u.1
  EXIT
"""


def test_a_store_to_the_last_word_of_shared_memory_lands_and_one_past_is_reported() -> None:
    """Lane 5 stores 105 to the last word of the 1024 bytes (every lane reads it back); one word
    further is outside the buffer: reported, and nothing written."""
    msgs, e = _run(LAST_WORD.format(off="0x3fc"))
    assert msgs == [] and e.out[:128].view(np.uint32).tolist() == [105] * 32
    msgs, e = _run(LAST_WORD.format(off="0x400"))
    assert msgs == ["CTA 0 warp 0: STS touches shared 0x800..0x804, outside every shared buffer the kernel declares"]
    assert e.out[:128].view(np.uint32).tolist() == [0] * 32


SHFL_DOWN = """\
  S2R lane, SR_LANEID
  ULDC.64 memdesc, c[0x0][0x208]
  LDC.64 q, c[0x0][dst]
  IMAD.WIDE.U32 qa, lane, 0x4, q
  IADD3 v.0, lane, 0x64, RZ
  ISETP.LT.U32.AND g, PT, lane, 0x10, PT
  MOV u.0, RZ
  MOV b, 0x1
  MOV cl, 0x1f
  @g SHFL.DOWN PT, u.0, v.0, {b}, {c}, 0xffff
  STG.E desc[memdesc][qa.64], u.0
  EXIT
"""


def test_a_shuffle_down_past_its_members_and_register_operands() -> None:
    """Lanes 0..15 shuffle down by one: lane 15 reads lane 16, which does not run it (only lane 15
    does so); the offset and clamp read from registers give the same as immediates."""
    want = ["CTA 0 warp 0: SHFL.DOWN: lane 15 reads lane 16, which does not take part (its value is undefined)"]
    for b, c in (("0x1", "0x1f"), ("b", "cl"), ("b", "0x1f"), ("0x1", "cl")):
        msgs, e = _run(SHFL_DOWN.format(b=b, c=c))
        assert msgs == want, (b, c)
        assert e.out[:60].view(np.uint32).tolist() == [101 + x for x in range(15)], (b, c)
        assert e.out[64:128].view(np.uint32).tolist() == [0] * 16


ATOMIC_GUARDED = """\
  S2R lane, SR_LANEID
  UMOV smem, `(dsmem)
  ULDC.64 memdesc, c[0x0][0x208]
  LDC.64 p, c[0x0][src]
  LDC.64 q, c[0x0][dst]
  IMAD.WIDE.U32 qa, lane, 0x4, q
  MOV v.0, 0x5a
  MOV u.0, 0x1
  PLOP3.LUT ok, PT, PT, PT, PT, 0x0, 0x0
  ISETP.LT.U32.AND g, PT, lane, 0x10, PT
  @g ATOMG.E.ADD.STRONG.GPU ok, v.0, desc[memdesc][p.64], u.0
  SEL v.1, v.0, 0x99, ok
  STG.E desc[memdesc][qa.64], v.1
  STG.E desc[memdesc][qa.64+0x80], v.0
  EXIT
"""


def test_a_guarded_atomic_writes_its_lanes_old_words_and_predicate_only() -> None:
    """Lanes 0..15 add 1 to a word from 7: each gets the old word and its predicate set; lanes
    16..31 keep v.0 = 0x5a but their predicate false, so they store 0x99."""
    src = np.zeros(512, dtype=np.uint8)
    src[0] = 7
    msgs, e = _run(ATOMIC_GUARDED, src)
    assert msgs == []
    assert e.out[:128].view(np.uint32).tolist() == [7 + x for x in range(16)] + [0x99] * 16
    assert e.out[128:256].view(np.uint32).tolist() == [7 + x for x in range(16)] + [0x5A] * 16
    assert int(e.src_after[:4].view(np.uint32)[0]) == 23


ATOMIC_FP32_NO_VALUES = """\
  S2R lane, SR_LANEID
  UMOV smem, `(dsmem)
  ULDC.64 memdesc, c[0x0][0x208]
  LDC.64 p, c[0x0][src]
  MOV v.0, 0x5a
  MOV u.0, 0x3f800000
  PLOP3.LUT ok, PT, PT, PT, PT, 0x0, 0x0
  ATOMG.E.ADD.F32.FTZ.RN.STRONG.GPU ok, v.0, desc[memdesc][p.64], u.0
  @!ok STS [smem+0x800], lane
  ISETP.NE.U32.AND g, PT, v.0, RZ, PT
  @g STS [smem+0x900], lane
  EXIT
"""


def test_an_atomic_on_a_word_nothing_keeps_returns_zero_and_sets_its_predicate() -> None:
    """Without values the words of an fp32 buffer are not kept: the atomic's old word is 0 (not
    the 0x5a v.0 held) and its predicate is set; either wrong stores outside every buffer."""
    head = HEAD.replace(".buffer src global base=0x0 size=0x400 elem=u32", ".buffer src global base=0x0 size=0x400 elem=fp32")
    assert head != HEAD
    assert _verdict(head + ATOMIC_FP32_NO_VALUES) == []
    assert _verdict(head + ATOMIC_FP32_NO_VALUES.replace("@!ok STS", "@ok STS")) == [
        "CTA 0 warp 0: STS touches shared 0xc00..0xc04, outside every shared buffer the kernel declares"]


# a 2 x 32 fp32 output (rows 128 bytes apart): the launch must write each element once, or add into it
OUT2D = HEAD.replace(".buffer dst global base=0x0 size=0x400 elem=u32 source=dst layout=256:4",
                     ".buffer dst global base=0x0 size=0x100 elem=fp32 source=dst layout=(2,32):(128,4)")
REDUCE_ROW = """\
  S2R lane, SR_LANEID
  ULDC.64 memdesc, c[0x0][0x208]
  LDC.64 q, c[0x0][dst]
  IMAD.WIDE.U32 qa, lane, 0x4, q
  MOV u.0, 0x3f800000
  ISETP.{cmp}.U32.AND g, PT, lane, 0x{n:x}, PT
  STG.E desc[memdesc][qa.64], u.0
  @g REDG.E.ADD.F32.FTZ.RN.STRONG.GPU desc[memdesc][qa.64+0x80], u.0
  @g REDG.E.ADD.F32.FTZ.RN.STRONG.GPU desc[memdesc][qa.64+0x80], u.0
  EXIT
"""


def test_reduce_adds_cover_their_lanes_elements_of_an_output() -> None:
    """Row 0 stored, row 1 added into twice (an add is no second store): covered whole. Where only
    lanes 0..15, or only lane 0, add, the rest of row 1 is reported unwritten; with or without values."""
    assert OUT2D != HEAD
    e = _Bytes(SRC)
    assert _verdict(OUT2D + REDUCE_ROW.format(cmp="LT", n=16), values=True, expect=e) == [
        "dst: no store or reduce-add writes 16 of its 64 elements (rows 1..1, columns 16..31; the first at row 1, column 16)"]
    assert e.out[:256].view(np.float32).tolist() == [1.0] * 32 + [2.0] * 16 + [0.0] * 16  # the idle lanes add nothing
    for values in (False, True):
        assert _verdict(OUT2D + REDUCE_ROW.format(cmp="LT", n=32), values=values) == []
        assert _verdict(OUT2D + REDUCE_ROW.format(cmp="LT", n=16), values=values) == [
            "dst: no store or reduce-add writes 16 of its 64 elements (rows 1..1, columns 16..31; the first at row 1, "
            "column 16)"]
        assert _verdict(OUT2D + REDUCE_ROW.format(cmp="EQ", n=0), values=values) == [
            "dst: no store or reduce-add writes 31 of its 64 elements (rows 1..1, columns 1..31; the first at row 1, "
            "column 1)"]
        assert _verdict(OUT2D + REDUCE_ROW.format(cmp="LT", n=0), values=values) == [
            "dst: no store or reduce-add writes 32 of its 64 elements (rows 1..1, columns 0..31; the first at row 1, "
            "column 0)"]


def test_a_reduce_add_outside_every_buffer_is_reported_and_covers_nothing() -> None:
    """A REDG through a null pointer (pa = 0) is reported; the other one covers row 1 as before."""
    body = REDUCE_ROW.format(cmp="LT", n=32).replace(
        "desc[memdesc][qa.64+0x80], u.0\n  @g", "desc[memdesc][pa.64], u.0\n  @g", 1).replace(
        "  MOV u.0,", "  MOV pa.0, RZ\n  MOV pa.1, RZ\n  MOV u.0,")
    assert _verdict(OUT2D + body) == [
        "CTA 0 warp 0: REDG.E.ADD.F32.FTZ.RN.STRONG.GPU touches global 0x0..+0x4, outside every global buffer the kernel "
        "declares"]


@functools.lru_cache(maxsize=None)
def _staged_gemm() -> str:
    """A 256 x 128 x 64 bf16 GEMM on sm_100a (4 CTAs, clusters of 2): each epilogue warp reads its
    accumulator rows from tensor memory (LDTM, tagged with the rows of A and B the MMA multiplied),
    stages them in shared memory with STS.U16 and stores each 32 x 32 chunk with a TMA store."""
    prob = G.FAMILY.problem([256, 128, 64], arch="sm_100a", out_dtype="bf16")
    return str(G.build(prob, G.configure(prob, "tma_store=true")).kernel())


def test_a_staged_tile_keeps_the_rows_it_was_computed_from() -> None:
    """The STS.U16 staging carries the accumulator's tag to shared memory: the TMA store of each
    warp's first chunk, moved 32 columns right, is reported where the chunk leaves the CTA's 64 rows
    of B (warps 5 and 7, whose chunk held columns 32..63; off the tensor in CTAs 1 and 3: clipped),
    and the tiles those stores came from have holes. Unmoved: clean."""
    text = _staged_gemm()
    old = "  IADD3 n_crd, PT, PT, n_warp0, 0x0, RZ\n"
    assert text.count(old) == 2
    assert check_kernel(parse(text)).messages(40) == []
    moved = text.replace(old, "  IADD3 n_crd, PT, PT, n_warp0, 0x20, RZ\n", 1)
    tile = "from a staged tile of rows 0..63 of b times rows {a} of a"
    assert check_kernel(parse(moved)).messages(40) == [
        f"line 345 (UTMASTG.2D): CTA {c} warp {w} stores c rows {m + r}..{m + r + 31}, columns 64..95 "
        + tile.format(a=f"{m}..{m + 127}") for c, m in ((0, 0), (2, 128)) for w, r in ((5, 0), (7, 64))] + [
        "c_out: no store or reduce-add writes 4096 of its 32768 elements (rows 0..223, columns 0..31; the first at row 0, "
        "column 0)",
        "c_out: the tile of rows 0..127, columns 0..63 (line 345 (UTMASTG.2D) stores from it) has 2048 elements no store "
        "wrote (the first at row 0, column 0)",
        "c_out: the tile of rows 128..255, columns 0..63 (line 345 (UTMASTG.2D) stores from it) has 2048 elements no "
        "store wrote (the first at row 128, column 0)"]


class _Partial(_Bytes):
    """`_Bytes`, and which bytes of dst the run marked partial sums (`greduced`: a write by a CTA
    that read global memory the launch never wrote, whose values are then not compared)."""

    def compare(self, run: Any) -> Any:
        v = super().compare(run)
        self.reduced = run.greduced["dst"][:1024].copy()
        return v


RAW = HEAD.replace(".param dst u64\n", ".param dst u64\n.param raw u64\n") + ".reg R[2] ra\n"
LOAD_AFTER = """\
  S2R lane, SR_LANEID
  ULDC.64 memdesc, c[0x0][0x208]
  LDC.64 p, c[0x0][src]
  LDC.64 q, c[0x0][dst]
  LDC.64 ra, c[0x0][raw]
  IMAD.WIDE.U32 qa, lane, 0x4, q
  IMAD.WIDE.U32 pa, lane, 0x40, p
  ISETP.LT.U32.AND g, PT, lane, 0x10, PT
  MOV u.0, 0x7
  MOV u.1, 0x11
  STG.E desc[memdesc][qa.64+{w}], u.0
  {load}
  STG.E desc[memdesc][qa.64+{o}], u.1
  EXIT
"""
SRC_WORD0 = int(SRC[:4].view(np.uint32)[0])


def _load_after(w: int, o: int, load: str, values: bool = True) -> tuple[list[str], _Partial]:
    e = _Partial(SRC)
    kw: dict[str, Any] = {"values": True, "expect": e} if values else {}
    return _verdict(RAW + LOAD_AFTER.format(w=hex(w), o=hex(o), load=load), **kw), e


def test_a_load_of_memory_the_launch_never_wrote_makes_the_ctas_later_stores_partial() -> None:
    """A CTA that reads global memory no simulated CTA wrote (an input, a partial sum of another CTA)
    may compute from what the CTAs outside the simulation left: its later stores are marked partial
    (not compared). Reading back its own store, or through a GPU-scope load (a flag), does not."""
    msgs, e = _load_after(0x80, 0, "LDG.E.U8 u.1, desc[memdesc][p.64]")  # one byte, the source's first
    assert msgs == []
    assert e.out[:128].view(np.uint32).tolist() == [int(SRC[0])] * 32
    assert e.reduced[:128].all() and not e.reduced[128:].any()  # the store before the load is whole
    msgs, e = _load_after(0x80, 0, "LDG.E u.1, desc[memdesc][qa.64+0x80]")  # its own words, one lane off the start
    assert msgs == [] and e.out[:128].view(np.uint32).tolist() == [7] * 32 and not e.reduced.any()
    msgs, e = _load_after(0x80, 0, "LDG.E.STRONG.GPU u.1, desc[memdesc][p.64]")
    assert msgs == [] and e.out[:128].view(np.uint32).tolist() == [SRC_WORD0] * 32 and not e.reduced.any()
    # past the 64 KiB the checker keeps of a pointer with no declared buffer: nothing read (0), nothing partial
    msgs, e = _load_after(0x80, 0, "LDG.E u.1, desc[memdesc][ra.64+0x10000]")
    assert msgs == [] and e.out[:128].view(np.uint32).tolist() == [0] * 32 and not e.reduced.any()
    for load in ("LDG.E.U8 u.1, desc[memdesc][p.64]", "LDG.E u.1, desc[memdesc][qa.64+0x80]"):
        assert _load_after(0x80, 0, load, values=False)[0] == []


def test_a_guarded_load_reads_and_checks_its_lanes_only() -> None:
    """Lanes 0..15 load the source's words 64 bytes apart; lanes 16..31 (their addresses past the
    0x400 bytes of src: not checked) keep 0x11."""
    msgs, e = _load_after(0x80, 0, "@g LDG.E u.1, desc[memdesc][pa.64]")
    assert msgs == []
    src = np.zeros(1024, dtype=np.uint8)
    src[:SRC.size] = SRC  # (the rest of src starts zero)
    assert e.out[:128].view(np.uint32).tolist() == src.view(np.uint32)[:256:16].tolist() + [0x11] * 16
    assert _load_after(0x80, 0, "LDG.E u.1, desc[memdesc][pa.64]", values=False)[0] == [
        "CTA 0 warp 0: LDG.E touches global src+0x0..+0x7c4, outside every global buffer the kernel declares"]


def test_a_read_only_load_of_bytes_the_launch_wrote_is_reported() -> None:
    """LDG.CONSTANT (the non-coherent path) of a word this launch stored may read the old bytes:
    reported at the first byte written (one byte at offset 0, or a word at 0x80); of the source, which
    nothing wrote, or past the bytes kept of an undeclared pointer: clean."""
    warn = "CTA 0 warp 0: {op} reads dst+0x{at:x} through the read-only path, and this launch wrote there (it may read the old bytes)"
    assert _load_after(0x80, 0x100, "LDG.E.CONSTANT u.1, desc[memdesc][qa.64+0x80]")[0] == [warn.format(op="LDG.E.CONSTANT", at=0x80)]
    assert _load_after(0, 0x100, "LDG.E.U8.CONSTANT u.1, desc[memdesc][q.64]")[0] == [warn.format(op="LDG.E.U8.CONSTANT", at=0)]
    msgs, e = _load_after(0x80, 0x100, "LDG.E.CONSTANT u.1, desc[memdesc][p.64]")
    assert msgs == [] and e.out[256:384].view(np.uint32).tolist() == [SRC_WORD0] * 32
    assert _load_after(0x80, 0, "LDG.E.CONSTANT u.1, desc[memdesc][ra.64+0x10000]")[0] == []
    assert _load_after(0x80, 0x100, "LDG.E.CONSTANT u.1, desc[memdesc][qa.64+0x80]", values=False)[0] == []


SHADOW_LOAD = """\
  S2R lane, SR_LANEID
  UMOV smem, `(dsmem)
  ULDC.64 memdesc, c[0x0][0x208]
  LDC.64 p, c[0x0][src]
  IMAD.WIDE.U32 pa, lane, 0x4, p
  ISETP.LT.U32.AND g, PT, lane, 0x10, PT
  MOV u.1, 0x11
  @g LDG.E u.1, desc[memdesc][pa.64]
  ISETP.EQ.U32.AND g, PT, u.1, {w5}, PT
  @g STS [smem+0x900], lane
  ISETP.EQ.U32.AND g, PT, u.1, {w20}, PT
  @g STS [smem+0xa00], lane
  EXIT
"""


def test_without_values_a_guarded_load_of_flag_words_gives_each_lane_its_word() -> None:
    """Without values the u32 words of src are still kept (from the expectation): lanes 0..15 load
    their own word, lanes 16..31 keep 0x11. Lane 5 finds its word and stores outside shared memory
    (reported: 0x900 past the window at 0x400); lane 20, which did not load, does not."""
    words = SRC.view(np.uint32)
    w5, w20 = int(words[5]), int(words[20])
    assert list(words).count(w5) == 1 and list(words).count(w20) == 1 and 0x11 not in (w5, w20)
    assert _verdict(HEAD + SHADOW_LOAD.format(w5=hex(w5), w20=hex(w20)), expect=_Bytes(SRC)) == [
        "CTA 0 warp 0: STS touches shared 0xd00..0xd04, outside every shared buffer the kernel declares"]


GUARDED_LDS = """\
  S2R lane, SR_LANEID
  UMOV smem, `(dsmem)
  ULDC.64 memdesc, c[0x0][0x208]
  LDC.64 q, c[0x0][dst]
  IMAD.WIDE.U32 qa, lane, 0x4, q
  IMAD sa, lane, 0x4, RZ
  IMAD sb, lane, 0x40, RZ
  IADD3 v.0, lane, 0x64, RZ
  STS [sa+smem], v.0
  MOV u.1, 0x11
  ISETP.LT.U32.AND g, PT, lane, 0x10, PT
  @g LDS u.1, [{addr}+smem]
  STG.E desc[memdesc][qa.64], u.1
  EXIT
"""


def test_a_guarded_load_from_shared_reads_and_checks_its_lanes_only() -> None:
    """Lanes 0..15 read back the 100 + l they stored; lanes 16..31 keep 0x11. At 64 bytes a lane the
    idle lanes' addresses are past the shared buffer: not checked."""
    msgs, e = _run(GUARDED_LDS.format(addr="sa"))
    assert msgs == [] and e.out[:128].view(np.uint32).tolist() == [100 + x for x in range(16)] + [0x11] * 16
    assert _verdict(HEAD + GUARDED_LDS.format(addr="sb")) == []
    assert _verdict(HEAD + GUARDED_LDS.format(addr="sb").replace("@g LDS", "LDS")) == [
        "CTA 0 warp 0: LDS touches shared 0x400..0xbc4, outside every shared buffer the kernel declares"]


ALLOC_SLOT = """\
.kernel t
.sm sm_100a
.threads 32
.dynsmem 1024
.grid 1 1 1
.cluster 1 1 1
.mbarriers 0
.buffer tmem_slot smem base=0x0 size=0x8 elem=u32 layout=2:4
.reg R lane
.reg UR smem
.reg UR slot
.reg UR tb
.reg P leader
.reg P bad
.reg R[2] w
  S2R lane, SR_LANEID
  UMOV smem, `(dsmem)
  UIADD3 slot, UPT, UPT, smem, 0x0, URZ
  UTCATOMSWS.FIND_AND_SET.ALIGN [slot], 0x20
  UVIRTCOUNT.DEALLOC.SMPOOL 0x20
  ISETP.EQ.U32.AND leader, PT, lane, 0x0, PT
  MOV w.0, 0x1
  MOV w.1, 0x77
  @leader LDS{wide} w.0, [slot{off}]
  R2UR tb, w.0
  ISETP.NE.U32.AND bad, PT, w.1, {w1}, leader
  @bad STS [smem+0x900], lane
  ISETP.NE.U32.AND bad, PT, w.0, 0x1, !leader
  @bad STS [smem+0xa00], lane
  ISETP.NE.U32.AND bad, PT, w.1, 0x77, !leader
  @bad STS [smem+0xb00], lane
  UTCATOMSWS.AND tb, 0x20
  EXIT
"""


def test_without_values_one_lane_reads_the_allocations_address_from_shared_memory() -> None:
    """Without values shared memory keeps only the words the machine wrote: lane 0's LDS of the slot
    the allocation wrote reads its columns' address (0), and the free matches; the word after it was
    never written (the register keeps 1: columns 1..32 freed, 0..31 left). A 32-bit LDS writes one
    register (w.1 keeps 0x77); an LDS.64 two, the second word 0 (nothing wrote it); the other lanes
    keep theirs (any other value stores outside shared memory: reported)."""
    assert _verdict(ALLOC_SLOT.format(off="", wide="", w1="0x77")) == []
    assert _verdict(ALLOC_SLOT.format(off="", wide=".64", w1="0x0")) == []
    assert _verdict(ALLOC_SLOT.format(off="+0x4", wide="", w1="0x77")) == [
        "CTA 0 exits with tensor-memory columns 0..31 still allocated (a tcgen05.dealloc must free them: the next CTA on "
        "the SM cannot allocate them)",
        "CTA 0 warp 0 frees tensor-memory columns 1..32, which no allocation returned"]


def test_a_gpu_scope_store_is_a_flag_not_an_output_element_and_a_null_store_is_reported() -> None:
    """Row 1 written by GPU-scope stores (flags between CTAs, `.STRONG.GPU`): not counted as output
    elements, so the row is reported unwritten; written plainly, covered. A store through a null
    pointer is reported and covers nothing."""
    plain = REDUCE_ROW.format(cmp="LT", n=32).replace(
        "  @g REDG.E.ADD.F32.FTZ.RN.STRONG.GPU desc[memdesc][qa.64+0x80], u.0\n" * 2,
        "  STG.E{s} desc[memdesc][qa.64+0x80], u.0\n")
    assert plain != REDUCE_ROW.format(cmp="LT", n=32)
    assert _verdict(OUT2D + plain.format(s="")) == []
    assert _verdict(OUT2D + plain.format(s=".STRONG.GPU")) == [
        "dst: no store or reduce-add writes 32 of its 64 elements (rows 1..1, columns 0..31; the first at row 1, column 0)"]
    null = plain.format(s="").replace("  MOV u.0,", "  MOV pa.0, RZ\n  MOV pa.1, RZ\n  MOV u.0,") + ""
    null = null.replace("STG.E desc[memdesc][qa.64+0x80], u.0", "STG.E desc[memdesc][pa.64], u.0")
    assert _verdict(OUT2D + null) == [
        "CTA 0 warp 0: STG.E touches global 0x0..+0x4, outside every global buffer the kernel declares",
        "dst: no store or reduce-add writes 32 of its 64 elements (rows 1..1, columns 0..31; the first at row 1, column 0)"]


SHADOW_STORE = """\
  S2R lane, SR_LANEID
  UMOV smem, `(dsmem)
  ULDC.64 memdesc, c[0x0][0x208]
  LDC.64 q, c[0x0][dst]
  IMAD.WIDE.U32 qa, lane, 0x4, q
  ISETP.GE.U32.AND g, PT, lane, 0x10, PT
  IADD3 v.0, lane, 0x64, RZ
  @g STG.E desc[memdesc][qa.64], {reg}
  LDG.E u.1, desc[memdesc][qa.64]
  IMAD sb, lane, 0x4, RZ
  IADD3 sb, sb, 0x900, RZ
  ISETP.EQ.U32.AND g, PT, u.1, {want}, PT
  @g STS [sb+smem], lane
  EXIT
"""


def test_without_values_a_guarded_store_keeps_each_lanes_word() -> None:
    """Without values the u32 words of dst are kept: lanes 16..31 store 100 + l, every lane reads its
    word back; lane 20 finds 120 and stores outside shared memory at 0x900 + 4 l (reported). A register
    nothing wrote is stored as 0 (reported as undefined; no lane finds 1)."""
    assert _verdict(HEAD + SHADOW_STORE.format(reg="v.0", want="0x78")) == [
        "CTA 0 warp 0: STS touches shared 0xd50..0xd54, outside every shared buffer the kernel declares"]
    assert _verdict(HEAD + SHADOW_STORE.format(reg="v.3", want="0x1")) == [
        "line 8 (STG.E): CTA 0 warp 0 reads v.3 before any instruction wrote it (the register holds whatever the "
        "register file had)"]


def test_with_values_a_store_past_the_bytes_kept_of_an_undeclared_pointer_is_dropped() -> None:
    """The checker keeps 64 KiB behind a pointer with no declared buffer: a store past them lands
    nowhere (no report: the extent is unknown), and the run goes on."""
    msgs, e = _load_after(0x80, 0, "STG.E desc[memdesc][ra.64+0x10000], u.0")
    assert msgs == [] and e.out[:128].view(np.uint32).tolist() == [0x11] * 32
    # the last word kept lands, and reads back
    last = "STG.E desc[memdesc][ra.64+0xfffc], u.0\n  LDG.E u.1, desc[memdesc][ra.64+0xfffc]"
    msgs, e = _load_after(0x80, 0, last)
    assert msgs == [] and e.out[:128].view(np.uint32).tolist() == [7] * 32


def test_a_guarded_store_checks_its_lanes_only_and_every_store_is_counted() -> None:
    """Lanes 0..15 store into src 64 bytes apart; the idle lanes' addresses (past its 0x400 bytes) are
    not checked; unguarded they are reported. The report counts each STG line run (3 here)."""
    assert _load_after(0x80, 0, "@g STG.E desc[memdesc][pa.64], u.0")[0] == []
    assert _load_after(0x80, 0, "STG.E desc[memdesc][pa.64], u.0")[0] == [
        "CTA 0 warp 0: STG.E touches global src+0x0..+0x7c4, outside every global buffer the kernel declares"]
    text = RAW + LOAD_AFTER.format(w="0x80", o="0x0", load="@g STG.E desc[memdesc][pa.64], u.0")
    assert check_kernel(parse(text)).stores == 3


def test_a_guarded_ldmatrix_writes_its_lanes_registers_only() -> None:
    """stmatrix then ldmatrix of four 8x8 matrices, the load run by lanes 0..15 only (reported: it is
    warp-aligned): they get their fragment (thread t: row t // 4, elements 2 (t % 4) and + 1 of each
    matrix), lanes 16..31 keep the 0x11 their four registers held."""
    body = MATRIX.format(t="").replace("  MOV u.1, RZ\n  MOV u.2, RZ\n  MOV u.3, RZ\n",
                                       "".join(f"  MOV u.{j}, 0x11\n" for j in range(4))
                                       + "  ISETP.LT.U32.AND g, PT, lane, 0x10, PT\n").replace("  LDSM", "  @g LDSM")
    assert body.count("@g LDSM") == 1 and body.count("0x11") == 4
    msgs, e = _run(body)
    assert msgs == ["line 16 (LDSM.16.M88.4): CTA 0 warp 0 runs it on 16 of its 32 lanes; it is warp-aligned "
                    "(.sync.aligned): every lane must run it together"]
    held = SRC.view(np.uint16).reshape(32, 4, 2)  # [thread, register (matrix), half]: what each lane stored
    mats = np.zeros((4, 8, 8), dtype=np.uint16)
    t = np.arange(32)
    for h in range(2):
        mats[:, t // 4, 2 * (t % 4) + h] = held[:, :, h].T
    want = np.stack([mats[:, t // 4, 2 * (t % 4) + h].T for h in range(2)], axis=2)
    got = e.out[:512].view(np.uint16).reshape(32, 4, 2)
    np.testing.assert_array_equal(got[:16], want[:16])
    assert e.out[256:512].view(np.uint32).tolist() == [0x11] * 64


@functools.lru_cache(maxsize=None)
def _staged_gemm_fp32() -> str:
    """The fp32 twin of `_staged_gemm`: the staging stores are 32-bit STS."""
    prob = G.FAMILY.problem([256, 128, 64], arch="sm_100a", out_dtype="fp32")
    return str(G.build(prob, G.configure(prob, "tma_store=true")).kernel())


def test_a_wide_staging_store_carries_the_accumulators_tag_as_the_narrow_ones() -> None:
    """Each epilogue warp first stages its first two accumulator registers with one STS.64 (then the
    plain STSs overwrite them): the verdict is the narrow staging's, clean, or with the first chunk's
    TMA store moved 32 columns the same reports."""
    text = _staged_gemm_fp32()
    first = "  DEPBAR.LE SB0, 0x0\n  STS [c_stage@lane], v.0  // addr c_stage[quarter_u, 0, lane]\n"
    assert text.count(first) == 2
    wide = text.replace(".reg R lane\n", ".reg R lane\n.reg R wide\n", 1).replace(
        first, "  DEPBAR.LE SB0, 0x0\n  IMAD wide, lane, 0x8, c_stage@quarter\n  STS.64 [wide], v.0\n"
        "  STS [c_stage@lane], v.0  // addr c_stage[quarter_u, 0, lane]\n", 1)
    move = ("  IADD3 n_crd, PT, PT, n_warp0, 0x0, RZ\n", "  IADD3 n_crd, PT, PT, n_warp0, 0x20, RZ\n")
    assert check_kernel(parse(wide)).messages(40) == []
    def unlined(msgs: list[str]) -> list[str]:  # the two inserted lines move the later line numbers by 2
        return [re.sub(r"line (\d+)", lambda g: f"line {int(g.group(1)) - 2}", x) for x in msgs]
    narrow = check_kernel(parse(text.replace(*move, 1))).messages(40)
    assert len(narrow) > 3 and unlined(check_kernel(parse(wide.replace(*move, 1))).messages(40)) == narrow


@functools.lru_cache(maxsize=None)
def _stg_gemm() -> str:
    """A 256 x 128 x 64 fp32 GEMM on sm_90a whose epilogue stores accumulator pairs with STG.E.64."""
    prob = G.FAMILY.problem([256, 128, 64], arch="sm_90a", out_dtype="fp32")
    return str(G.build(prob, G.configure(prob, "bn=128,consumers=1")).kernel())  # 64 x 128 tiles, whatever the table


def test_a_wide_store_takes_the_tag_of_any_of_its_registers() -> None:
    """The last STG.E.64 of each warp moved one row down (warp 7's rows leave its accumulator's 64:
    reported, with the coverage it breaks); with its first register overwritten by a MOV (no tag
    left there) the second register's tag is checked: the same verdict."""
    text = _stg_gemm()
    last = "  STG.E.64 desc[memdesc][c_addr1.64+0x1e0], acc.62\n"
    assert text.count(last) == 1
    moved = text.replace(last, "  STG.E.64 desc[memdesc][c_addr1.64+0x3e0], acc.62\n")
    cleared = text.replace(last, "  MOV acc.62, RZ\n  STG.E.64 desc[memdesc][c_addr1.64+0x3e0], acc.62\n")
    want = check_kernel(parse(moved)).messages(40)
    assert any("from an accumulator of rows 0..63 of a" in x for x in want)
    got = [re.sub(r"line (2[3-9]\d)", lambda g: f"line {int(g.group(1)) - 1}", x) for x in check_kernel(parse(cleared)).messages(40)]
    assert got == want
