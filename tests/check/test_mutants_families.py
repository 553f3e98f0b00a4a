"""The checker's opcode families (`warpy/check/families/`) on small kernels: the probes (one TMA
copy, one wgmma or UMMA tile, counters) run with values against their host's expectation, and
edits of them that break exactly one rule, the checker's whole verdict pinned word for word (the
corpus matches one message a case, so a mutant that changes a number in a message, or what else
is reported, survives it). Each case runs in well under a second; docs/testing.md lists the
mutation runs these tests answer."""

from __future__ import annotations

import functools
from typing import Any, Optional

import numpy as np
import pytest

from warpy.check.report import check_kernel
from warpy.isa.text import parse
from warpy.kernels.probes import PROBES, ProbeExpectation, wgmma_fragment
from warpy.layout.tma import TmaBox


@functools.lru_cache(maxsize=None)
def _probe(name: str, arch: str) -> str:
    return str(PROBES[name].build(arch).kernel())


def _edit(text: str, *edits: tuple[str, str]) -> str:
    """Each (old, new) replaced once; `old` must occur exactly once. A derived line (`+ `) edited
    becomes a plain one."""
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def _verdict(text: str, **kw: Any) -> list[str]:
    return check_kernel(parse(text), **kw).messages(40)


# -- the probes with values: every byte the checker moves is the host's ------------------------------

# probe -> its whole verdict (the starts the H200 refuses: tests/kernels/test_tma_start.py)
UNALIGNED = ["CTA 0 warp 0: UTMALDG.2D copies a box of src starting at element 1 of its innermost dimension (2 bytes, "
             "not a multiple of 16): the engine raises an illegal instruction",
             "CTA 1 warp 0: UTMALDG.2D copies a box of src starting at element 65 of its innermost dimension (130 bytes, "
             "not a multiple of 16): the engine raises an illegal instruction"]
VALUE_PROBES = {n: UNALIGNED if n in ("tma_start_unaligned", "tma_start_unaligned_end") else []
                for n, p in PROBES.items() if p.host is not None and n not in ("pipe", "wgmma_bf16_sw0_flipped")}


@pytest.mark.parametrize("name,arch", [(n, a) for n in VALUE_PROBES for a in PROBES[n].archs])
def test_a_probe_s_values_are_the_host_s(name: str, arch: str) -> None:
    pr = PROBES[name]
    assert pr.host is not None
    rep = check_kernel(parse(_probe(name, arch)), values=True, expect=ProbeExpectation(pr.host(np.random.default_rng(7))))
    assert rep.messages(40) == VALUE_PROBES[name]
    assert rep.values_checked > 0 and rep.values_wrong == 0


class _Gemm:
    """An `Expectation` for a probe's product: `a` and `b` (bf16 bits, K innermost) behind their maps,
    `out` (fp32 rows) must be a @ b.T to fp32 rounding."""

    def __init__(self, a: np.ndarray, b: np.ndarray) -> None:
        self.a, self.b = a, b
        self.out: Optional[np.ndarray] = None

    def initial(self, source: str, box: Optional[TmaBox], nbytes: int, rng: np.random.Generator) -> Optional[np.ndarray]:
        arr = {"a": self.a, "b": self.b}.get(source)
        if arr is None:
            return None
        out = np.zeros(max(nbytes, arr.nbytes), dtype=np.uint8)
        out[:arr.nbytes] = arr.reshape(-1).view(np.uint8)
        return out

    def compare(self, run: Any) -> Any:
        from warpy.check.expect import Verdict

        self.out = run.gmem["out"].view(np.float32).copy()
        return Verdict(0, 0)


def _bf16(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(bits, values): small integers over 8, exact in bf16 and in every fp32 sum of their products."""
    v = rng.integers(-4, 5, size=shape).astype(np.float32) / 8
    return (v.view(np.uint32) >> 16).astype(np.uint16), v


def test_the_umma_probe_multiplies() -> None:
    rng = np.random.default_rng(3)
    (a, av), (b, bv) = _bf16(rng, (128, 64)), _bf16(rng, (64, 64))
    e = _Gemm(a, b)
    assert _verdict(_probe("umma_1cta", "sm_100a"), values=True, expect=e) == []
    assert e.out is not None
    np.testing.assert_array_equal(e.out[:128 * 64].reshape(128, 64), av @ bv.T)


# -- wgmma: the register rules, descriptors against the boxes ---------------------------------------

RS = _probe("hgmma_rs", "sm_90a")
SS = _probe("wgmma_fp16_sw64", "sm_90a")


def _wg(line: int, warp_msgs: str) -> list[str]:
    return [f"line {line} (HGMMA.64x64x16.F32.BF16): CTA 0 warp {w} {warp_msgs}" for w in range(4)]


DIRTY = "accesses {r}, which line {at} ({op}) touched after the warp's last wgmma fence: a WARPGROUP.ARRIVE (wgmma.fence) must come between"
UNDEF = ("line {line} (HGMMA.64x64x16.F32.BF16): CTA 0 warp 0 reads " + ", ".join(f"acc.{j}" for j in sorted(range(32), key=str))
         + " before any instruction wrote it (the register holds whatever the register file had)")

WGMMA_CASES = [
    ("rs-clean", RS, []),
    ("ss-clean", SS, []),
    # the RS form's accumulator touched between the fence and the MMAs (the A registers are checked too)
    ("rs-acc-after-fence", _edit(RS, ("  WARPGROUP.ARRIVE\n", "  WARPGROUP.ARRIVE\n  MOV acc.3, RZ\n")),
     [m for line in (43, 45, 47, 49) for m in _wg(line, DIRTY.format(r="acc.3", at=41, op="MOV"))]),
    # every A register is watched, not only the first the operand names (af.13 of af.12..af.15)
    ("rs-a-after-fence", _edit(RS, ("  WARPGROUP.ARRIVE\n", "  WARPGROUP.ARRIVE\n  MOV af.13, RZ\n")),
     _wg(49, DIRTY.format(r="af.13", at=41, op="MOV"))),
    # the last fragment loaded half: its MMA reads two registers nothing wrote
    ("rs-a-half-loaded", _edit(RS, ("LDG.E.128.CONSTANT af.12", "LDG.E.64.CONSTANT af.12")),
     ["line 48 (HGMMA.64x64x16.F32.BF16): CTA 0 warp 0 reads af.14, af.15 before any instruction wrote it (the register "
      "holds whatever the register file had)"]),
    # no fence, and the first MMA accumulates: every warp's MMAs run before a fence and read A registers
    # loaded after the last (none); warp 0's first reads an accumulator nothing wrote (once: the
    # registers are then taken as written)
    ("rs-no-fence-accumulates", _edit(RS, ("  WARPGROUP.ARRIVE\n", ""), ("gdesc[gmma_rs_desc], RZ, !UPT", "gdesc[gmma_rs_desc], acc")),
     [m for j, line in enumerate((41, 43, 45, 47)) for w in range(4)
      for m in [f"line {line} (HGMMA.64x64x16.F32.BF16): CTA 0 warp {w} "
                + DIRTY.format(r=f"af.{4 * j}", at=33 + j, op="LDG.E.128.CONSTANT")]
      + ([UNDEF.format(line=41)] if (line, w) == (41, 0) else [])
      + [f"line {line} (HGMMA.64x64x16.F32.BF16): CTA 0 warp {w} runs before any wgmma fence (WARPGROUP.ARRIVE) of the warp"]]),
    ("rs-first-accumulates", _edit(RS, ("gdesc[gmma_rs_desc], RZ, !UPT", "gdesc[gmma_rs_desc], acc")), [UNDEF.format(line=42)]),
]


@pytest.mark.parametrize("name,text,want", WGMMA_CASES, ids=[c[0] for c in WGMMA_CASES])
def test_one_wgmma_rule_broken(name: str, text: str, want: list[str]) -> None:
    assert _verdict(text) == want


def _per_warp(fmt: str, warps: range = range(4)) -> list[str]:
    return [fmt.format(w=w) for w in warps]


SS_HEAD = "CTA 0 warp {w}: HGMMA.64x64x16.F32.F16 "
EXITS_UNWAITED = ("CTA 0: HGMMA.64x64x16.F32.F16, warp {w} reads sa asynchronously, and nothing orders that before CTA 0 "
                  "exits (no wait of its warps sees it done: its shared memory may be gone)")
ACC_UNWAITED = ("acc: HGMMA.64x64x16.F32.F16, warp {w} writes it and STG.E.128, warp {w} touches it, and nothing orders "
                "the two (the wgmma group has not been waited for) (8 times)")
SS_CASES = [
    # the first MMA's A one K step on (K byte 32 of the box) while B is at K byte 0
    ("a-one-k-step-on", _edit(SS, ("+ UIADD3 gmma_desc.0, sa_gdesc, 0x0, URZ  // gdesc.lo sa[0, 0]", "  UIADD3 gmma_desc.0, sa_gdesc, 0x2, URZ")),
     _per_warp(SS_HEAD + "multiplies a at K byte 32 with b at K byte 0 (the boxes the copy engine landed there disagree)")),
    # B's stride between 8-row groups 256 bytes (4 rows of the box) where the box's rows are 64 bytes
    ("b-sbo-half", _edit(SS, ("+ UMOV gmma_desc.3, 0x80000020  // gdesc.hi sb[0, 0]", "  UMOV gmma_desc.3, 0x80000010")),
     [SS_HEAD.format(w=0) + f"reads its B operand with a 64-byte swizzle descriptor whose row 8, K byte 0 is row 4, byte "
      f"{k} of the box (not row 8, byte {k}); the copy engine landed it through tensor map b (64-byte swizzle, 64-byte rows)"
      for k in (0, 32)]),
    # A read with a 32-byte swizzle where the map lands 64-byte swizzled rows
    ("a-swizzle-32-for-64", _edit(SS, ("+ UMOV gmma_desc.1, 0x80000020  // gdesc.hi sa[0, 0]", "  UMOV gmma_desc.1, 0xc0000020")),
     [SS_HEAD.format(w=0) + f"reads its A operand with a 32-byte swizzle descriptor whose row 1, K byte 0 is row {r}, byte "
      f"{b} of the box (not row 1, byte {k}); the copy engine landed it through tensor map a (64-byte swizzle, 64-byte rows)"
      for r, b, k in ((0, 32, 0), (1, 0, 32))]),
    # B's second K step 32 rows down: past the buffer
    ("b-past-its-buffer", _edit(SS, ("+ UIADD3 gmma_desc.2, sb_gdesc, 0x2, URZ  // gdesc.lo sb[0, 16]", "  UIADD3 gmma_desc.2, sb_gdesc, 0x22, URZ")),
     _per_warp(SS_HEAD + "touches shared 0x1620..0x25e0, outside every shared buffer the kernel declares")),
    # B's tensor 24 elements of K wide where A's is 32: the maps disagree on K (once an MMA)
    ("maps-disagree-on-k", _edit(SS, (".tmap b dtype=fp16 dims=32,64", ".tmap b dtype=fp16 dims=24,64")),
     [SS_HEAD.format(w=0) + "multiplies a, whose rows are 64 bytes of K, with b, whose rows are 48 (the tensor maps "
      "disagree on K) (2 times)"]),
    ("a-without-swizzle-for-64", _edit(SS, ("+ UMOV gmma_desc.1, 0x80000020  // gdesc.hi sa[0, 0]", "  UMOV gmma_desc.1, 0x20")),
     [SS_HEAD.format(w=0) + f"reads its A operand with a no-byte swizzle descriptor whose row 1, K byte 0 is row 0, byte "
      f"{b} of the box (not row 1, byte {b - 16}); the copy engine landed it through tensor map a (64-byte swizzle, "
      f"64-byte rows)" for b in (16, 48)]),
    # the first and the last accumulator register read before the wait: both are the MMA's until it retires
    ("first-and-last-accumulator-early", _edit(SS, ("  WARPGROUP.DEPBAR.LE gsb0, 0x0\n",
                                                    "  MOV tx, acc.0\n  MOV tx, acc.31\n  WARPGROUP.DEPBAR.LE gsb0, 0x0\n")),
     _per_warp("acc: HGMMA.64x64x16.F32.F16, warp {w} writes it and MOV, warp {w} touches it, and nothing orders the two "
               "(the wgmma group has not been waited for) (2 times)")),
    ("no-wgmma-wait", _edit(SS, ("  WARPGROUP.DEPBAR.LE gsb0, 0x0\n", "")), _per_warp(EXITS_UNWAITED) + _per_warp(ACC_UNWAITED)),
    ("wgmma-wait-leaves-one", _edit(SS, ("WARPGROUP.DEPBAR.LE gsb0, 0x0", "WARPGROUP.DEPBAR.LE gsb0, 0x1")),
     _per_warp(EXITS_UNWAITED) + _per_warp(ACC_UNWAITED)),
]


@pytest.mark.parametrize("name,text,want", SS_CASES, ids=[c[0] for c in SS_CASES])
def test_one_wgmma_operand_rule_broken(name: str, text: str, want: list[str]) -> None:
    assert _verdict(text) == want


# -- tcgen05: tensor memory, UMMA descriptors against the boxes --------------------------------------

UMMA = _probe("umma_1cta", "sm_100a")
LDTM = "CTA 0 warp {w}: LDTM.x32 "
UMMA_CASES = [
    ("clean", UMMA, []),
    # each warp's LDTM names lane 64 x warp: only warp 0 (lane 0) addresses its own quarter
    ("lane-of-another-quarter", _edit(UMMA, ("SHF.L.U32 lanes, warp, 0x15, RZ", "SHF.L.U32 lanes, warp, 0x16, RZ")),
     [LDTM.format(w=w) + f"addresses tensor-memory lane {64 * w}; warp {w} may access lanes {32 * w}..{32 * w + 31} (2 times)"
      for w in (1, 2, 3)]),
    # the second load at column 48 of a 64-column allocation
    ("columns-past-the-allocation", _edit(UMMA, ("tmem_base, ulanes, 0x20", "tmem_base, ulanes, 0x30")),
     _per_warp(LDTM + "reads tensor-memory columns 48..79 that no MMA wrote")
     + _per_warp(LDTM + "touches tensor-memory columns 48..79, outside what the CTA allocated")),
    ("a-narrower-load", _edit(UMMA, ("tmem_base, ulanes, 0x20\n  LDTM.x32", "tmem_base, ulanes, 0x20\n  LDTM.x16")), []),
    ("no-wait-after-a-load", _edit(UMMA, ("  LDTM.x32 v, tmem[taddr]\n  TCGEN05.WAIT.LD\n  STG.E.128 desc[memdesc][gaddr.64], v.0",
                                          "  LDTM.x32 v, tmem[taddr]\n  STG.E.128 desc[memdesc][gaddr.64], v.0")),
     [m for w in range(4) for m in (
         f"v: LDTM.x32, warp {w} writes it and LDTM.x32, warp {w} touches it, and nothing orders the two (no "
         f"tcgen05.wait::ld after the load)",
         f"v: LDTM.x32, warp {w} writes it and STG.E.128, warp {w} touches it, and nothing orders the two (no "
         f"tcgen05.wait::ld after the load) (8 times)")]),
    ("no-fence-after-the-wait", _edit(UMMA, ("~ @!waited BRA WAIT_7\n  TCGEN05.FENCE.AFTER\n", "~ @!waited BRA WAIT_7\n")),
     _per_warp("tensor memory: UTCHMMA, warp 0 writes it and LDTM.x32, warp {w} reads it, and nothing orders the two (2 times)")),
    ("a-one-k-step-on", _edit(UMMA, ("+ UIADD3 umma_a.0, UPT, UPT, sa_udesc, 0x0, URZ  // udesc.lo sa[0, 0]",
                                     "  UIADD3 umma_a.0, UPT, UPT, sa_udesc, 0x2, URZ")),
     ["CTA 0 warp 0: UTCHMMA multiplies a at K byte 32 with b at K byte 0 (the boxes the copy engine landed there disagree)"]),
    # every warp's loads name lane 0: the warp's own quarter is implied (no report)
    ("every-warp-names-lane-0", _edit(UMMA, ("SHF.L.U32 lanes, warp, 0x15, RZ", "MOV lanes, RZ")), []),
    ("b-without-swizzle-for-128", _edit(UMMA, ("+ UMOV umma_b.1, 0x40004040  // udesc.hi sb[0, 0]", "  UMOV umma_b.1, 0x4040")),
     [f"CTA 0 warp 0: UTCHMMA reads its B operand with a no-byte swizzle descriptor whose row 1, K byte 0 is row 0, byte "
      f"{b} of the box (not row 1, byte {b - 16}); the copy engine landed it through tensor map b (128-byte swizzle, "
      f"128-byte rows)" for b in (112, 16, 48, 80)]),
    ("b-swizzle-64-for-128", _edit(UMMA, ("+ UMOV umma_b.1, 0x40004040  // udesc.hi sb[0, 0]", "  UMOV umma_b.1, 0x80004040")),
     [f"CTA 0 warp 0: UTCHMMA reads its B operand with a 64-byte swizzle descriptor whose row 1, K byte 0 is row {r}, byte "
      f"{b} of the box (not row 1, byte {k}); the copy engine landed it through tensor map b (128-byte swizzle, 128-byte rows)"
      for r, b, k in ((0, 64, 0), (0, 96, 32), (1, 0, 64), (1, 32, 96))]),
]


@pytest.mark.parametrize("name,text,want", UMMA_CASES, ids=[c[0] for c in UMMA_CASES])
def test_one_tcgen05_rule_broken(name: str, text: str, want: list[str]) -> None:
    assert _verdict(text) == want


# -- memory: loads and stores of every width, the matrix forms, atomics ------------------------------
# One warp: lane l loads its nb bytes of `src` (global), stores them to shared memory, and after a
# CTA barrier loads lane l + 1's and stores them to `dst`: dst is src rotated by one lane.

MEM_HEAD = """\
.kernel m
.sm sm_90a
.threads 32
.dynsmem 1024
.grid 1 1 1
.cluster 1 1 1
.mbarriers 0
.param src u64
.param dst u64
.buffer src global base=0x0 size=0x400 elem=u32 source=src layout=256:4
.buffer dst global base=0x0 size=0x400 elem=u32 source=dst layout=256:4
.buffer data smem base=0x0 size=0x400 elem=u32 layout=256:4
.reg R lane
.reg R next
.reg R sa
.reg R sb
.reg R[4] v
.reg R[4] u
.reg R[2] p
.reg R[2] q
.reg R[2] pa
.reg R[2] qa
.reg UR smem
.reg UR[2] memdesc
.reg P ok
"""

ROTATE = """\
  S2R lane, SR_LANEID
  UMOV smem, `(dsmem)
  ULDC.64 memdesc, c[0x0][0x208]
  LDC.64 p, c[0x0][src]
  LDC.64 q, c[0x0][dst]
  IMAD.WIDE.U32 pa, lane, {nb:#x}, p
  IMAD.WIDE.U32 qa, lane, {nb:#x}, q
  IADD3 next, lane, 0x1, RZ
  LOP3.LUT next, next, 0x1f, RZ, 0xc0, !PT
  IMAD sa, lane, {nb:#x}, RZ
  IMAD sb, next, {nb:#x}, RZ
  LDG.E{m} v.0, desc[memdesc][pa.64]
  STS{m} [sa+smem], v.0
  BAR.SYNC.DEFER_BLOCKING 0x0
  LDS{m} u.0, [sb+smem]
  STG.E{m} desc[memdesc][qa.64], u.0
  EXIT
"""

SRC = np.random.default_rng(5).integers(0, 256, 512).astype(np.uint8)


class _Bytes:
    """An `Expectation` that starts `src` as the given bytes (other sources zero) and keeps what the
    run left in `dst` and which of its bytes were written."""

    def __init__(self, src: np.ndarray) -> None:
        self.src = src
        self.out = self.written = self.src_after = np.zeros(0, dtype=np.uint8)

    def initial(self, source: str, box: Optional[TmaBox], nbytes: int, rng: np.random.Generator) -> Optional[np.ndarray]:
        if source != "src":
            return None
        out = np.zeros(max(nbytes, self.src.size), dtype=np.uint8)
        out[:self.src.size] = self.src
        return out

    def compare(self, run: Any) -> Any:
        from warpy.check.expect import Verdict

        self.out = run.gmem["dst"][:1024].copy()
        self.src_after = run.gmem["src"][:512].copy()
        self.written = run.gwritten["dst"][:1024].copy()
        return Verdict(0, 0)


def _run(body: str, src: np.ndarray = SRC) -> tuple[list[str], _Bytes]:
    e = _Bytes(src)
    return _verdict(MEM_HEAD + body, values=True, expect=e), e


@pytest.mark.parametrize("mods,nb", [("", 4), (".64", 8), (".128", 16), (".U16", 2), (".U8", 1), (".S16", 2), (".S8", 1)])
def test_loads_and_stores_move_their_width(mods: str, nb: int) -> None:
    msgs, e = _run(ROTATE.format(nb=nb, m=mods))
    assert msgs == []
    assert e.written.sum() == 32 * nb and e.written[:32 * nb].all()
    np.testing.assert_array_equal(e.out[:32 * nb], np.roll(SRC[:32 * nb].reshape(32, nb), -1, axis=0).reshape(-1))


@pytest.mark.parametrize("mods,nb", [(".64", 8), (".128", 16), (".U16", 2)])
def test_a_wide_access_off_its_size_is_reported(mods: str, nb: int) -> None:
    """Each lane's pitch one byte more than its width (3 for 2 bytes): lane 1's addresses are the first
    that are not multiples of nb."""
    body = ROTATE.format(nb=nb + 1 if nb > 2 else 3, m=mods)
    msgs, _ = _run(body)
    step = nb + 1 if nb > 2 else 3
    assert msgs == [f"CTA 0 warp 0: {op} at {space} address {base + step:#x}: a {nb}-byte access needs an address that "
                    f"is a multiple of {nb}" for op, space, base in ((f"LDG.E{mods}", "global", 1 << 40), (f"LDS{mods}", "shared", 0x400),
                                                                   (f"STG.E{mods}", "global", 2 << 40), (f"STS{mods}", "shared", 0x400))]


MATRIX = """\
  S2R lane, SR_LANEID
  UMOV smem, `(dsmem)
  ULDC.64 memdesc, c[0x0][0x208]
  LDC.64 p, c[0x0][src]
  LDC.64 q, c[0x0][dst]
  IMAD.WIDE.U32 pa, lane, 0x10, p
  IMAD.WIDE.U32 qa, lane, 0x10, q
  IMAD sa, lane, 0x10, RZ
  LDG.E.128 v.0, desc[memdesc][pa.64]
  MOV u.1, RZ
  MOV u.2, RZ
  MOV u.3, RZ
  STSM.16.M88.4 [sa+smem], v
  LDSM.16.M88{t}.4 u, [sa+smem]
  STG.E.128 desc[memdesc][qa.64], u.0
  LDS.128 v.0, [sa+smem]
  STG.E.128 desc[memdesc][qa.64+0x200], v.0
  EXIT
"""


@pytest.mark.parametrize("count", [1, 2, 4])
@pytest.mark.parametrize("store_trans,load_trans", [(False, False), (False, True), (True, False)])
def test_the_matrix_forms_move_fragments(store_trans: bool, load_trans: bool, count: int) -> None:
    """stmatrix then ldmatrix (either .trans) of 1, 2 or 4 8x8 matrices of 16-bit elements, lane l
    addressing row l % 8 of matrix l // 8: as the PTX ISA's fragment says, thread t holds row t // 4,
    elements 2 (t % 4) and 2 (t % 4) + 1 of each matrix (register j: matrix j); transposed, element
    (c, r) where it held (r, c). Shared memory is read back plainly too."""
    body = MATRIX.format(t=".T" if load_trans else "").replace("M88.4", f"M88.{count}").replace("M88.T.4", f"M88.T.{count}")
    if store_trans:
        body = body.replace(f"STSM.16.M88.{count}", f"STSM.16.M88.T.{count}")
    msgs, e = _run(body)
    assert msgs == [] and e.written.all()
    held = SRC.view(np.uint16).reshape(32, 4, 2)  # [thread, register (matrix), half]
    mats = np.zeros((4, 8, 8), dtype=np.uint16)
    t = np.arange(32)
    for h in range(2):
        mats[:, t // 4, 2 * (t % 4) + h] = held[:, :, h].T
    if store_trans:
        mats = mats.transpose(0, 2, 1)
    # what stmatrix left in shared memory, read as plain rows: row r of matrix j at lane 8 j + r's address
    stored = e.out[512:].view(np.uint16).reshape(4, 8, 8)
    np.testing.assert_array_equal(stored[:count], mats[:count])
    assert not stored[count:].any()
    if load_trans:
        mats = mats.transpose(0, 2, 1)
    want = np.stack([mats[:, t // 4, 2 * (t % 4) + h].T for h in range(2)], axis=2)
    got = e.out[:512].view(np.uint16).reshape(32, 4, 2)
    np.testing.assert_array_equal(got[:, :count], want[:, :count])
    assert not got[:, count:].any()  # registers past the count: loaded by neither (zeroed before)
    # the fragment is not the identity: one transpose moves the halves
    assert (store_trans or load_trans) == (not np.array_equal(want[:, :count], held[:, :count]))


ATOMIC = """\
  S2R lane, SR_LANEID
  ULDC.64 memdesc, c[0x0][0x208]
  LDC.64 p, c[0x0][src]
  LDC.64 q, c[0x0][dst]
  IMAD.WIDE.U32 qa, lane, 0x4, q
  {setup}
  ATOMG.E.{op}.STRONG.GPU ok, v.0, desc[memdesc][p.64], {args}
  STG.E desc[memdesc][qa.64], v.0
  EXIT
"""


def _atomics(op: str, setup: str, args: str, first: int) -> tuple[np.ndarray, int]:
    """Each lane's old word (lowest lane first) and the word left, from `first`."""
    src = np.zeros(512, dtype=np.uint8)
    src[:4] = np.frombuffer(np.uint32(first).tobytes(), dtype=np.uint8)
    e = _Bytes(src)
    rep = check_kernel(parse(MEM_HEAD + ATOMIC.format(op=op, setup=setup, args=args)), values=True, expect=e)
    assert rep.messages(40) == []
    assert e.written[:128].all()
    return e.out[:128].view(np.uint32).copy(), int(e.src_after[:4].view(np.uint32)[0])


@pytest.mark.parametrize("op,setup,args,first,olds,last", [
    # lane l adds l + 1: each old word is the sum of the lanes before it
    ("ADD", "IADD3 u.0, lane, 0x1, RZ", "u.0", 100, [100 + x * (x + 1) // 2 for x in range(32)], 628),
    # lane l offers 31 - l: the minimum so far, 100 until lane 0's 31
    ("MIN", "IADD3 u.0, -lane, 0x1f, RZ", "u.0", 100, [100] + list(range(31, 0, -1)), 0),
    ("MAX", "IADD3 u.0, lane, 0x3c, RZ", "u.0", 70, [70] * 11 + list(range(70, 91)), 91),
    # signed: -1 - l is below 5 as an S32, above it unsigned
    ("MIN.S32", "LOP3.LUT u.0, lane, RZ, RZ, 0xf, !PT", "u.0", 5, [5] + [0xFFFFFFFF - x for x in range(31)], 0xFFFFFFE0),
    ("MIN", "LOP3.LUT u.0, lane, RZ, RZ, 0xf, !PT", "u.0", 5, [5] * 32, 5),
    ("MAX.S32", "LOP3.LUT u.0, lane, RZ, RZ, 0xf, !PT", "u.0", 5, [5] * 32, 5),
    ("EXCH", "IADD3 u.0, lane, 0x7, RZ", "u.0", 3, [3] + [x + 7 for x in range(31)], 38),
    # compare-and-swap 9 -> lane + 10: lane 0 swaps, the others find 10
    ("CAS", "MOV u.1, 0x9\n  IADD3 u.0, lane, 0xa, RZ", "u.1, u.0", 9, [9] + [10] * 31, 10),
    # fp32: 1.5 + 0.25 a lane
    ("ADD.F32.FTZ.RN", "MOV u.0, 0x3e800000", "u.0", 0x3FC00000,
     [int(np.float32(1.5 + 0.25 * x).view(np.uint32)) for x in range(32)], 0x41180000),
])
def test_global_atomics_lane_by_lane(op: str, setup: str, args: str, first: int, olds: list[int], last: int) -> None:
    got, word = _atomics(op, setup, args, first)
    assert got.tolist() == olds and word == last


def test_a_reduction_returns_nothing_and_adds() -> None:
    body = ATOMIC.format(op="ADD", setup="IADD3 u.0, lane, 0x1, RZ", args="u.0").replace(
        "  ATOMG.E.ADD.STRONG.GPU ok, v.0, desc[memdesc][p.64], u.0\n  STG.E desc[memdesc][qa.64], v.0\n",
        "  REDG.E.ADD.STRONG.GPU desc[memdesc][p.64], u.0\n")
    src = np.zeros(512, dtype=np.uint8)
    src[:4] = [100, 0, 0, 0]
    msgs, e = _run(body, src)
    assert msgs == [] and not e.written.any()
    assert int(e.src_after[:4].view(np.uint32)[0]) == 628


# -- the copy engine: box images, clipping, alignment, stores ------------------------------------------
# tma_copy_2d: a CTA per 64 x 32 box of a 90 x 200 fp16 tensor (ragged at both edges); each loads its
# box (128-byte swizzle), dumps the raw tile and stores it back through a map of pitched rows.

TMA = _probe("tma_copy_2d", "sm_90a")


def _dumps_at(g: np.ndarray, dx: int, dy: int) -> np.ndarray:
    """The raw tiles of the 4 x 3 CTAs when each box starts (dx, dy) elements off its grid position:
    the box's elements inside the tensor, zeros outside, 128-byte swizzled (16-byte chunk c of each
    128-byte row r lands at chunk c ^ (r % 8))."""
    pad = np.zeros((g.shape[0] + 256, g.shape[1] + 256), dtype=g.dtype)
    pad[128:128 + g.shape[0], 128:128 + g.shape[1]] = g
    out = []
    for y in range(3):
        for x in range(4):
            r0, c0 = 128 + 32 * y + dy, 128 + 64 * x + dx
            tile = pad[r0:r0 + 32, c0:c0 + 64].reshape(32, 8, 8)  # [row, 16-byte chunk, element]
            sw = np.empty_like(tile)
            for r in range(32):
                sw[r, np.arange(8) ^ (r % 8)] = tile[r]
            out.append(sw.reshape(-1))
    return np.concatenate(out)


@pytest.mark.parametrize("dx,dy", [(0, 0), (-8, 0), (8, -3), (0, 96), (-64, 0), (0, -31)])
def test_a_box_off_its_place_lands_zeros_outside_the_tensor(dx: int, dy: int) -> None:
    """The boxes moved by (dx, dy) elements (negative coordinates too; (0, 96) and (-64, 0) put every
    simulated box wholly outside, (0, -31) keeps one row of CTA 0's inside): the dumps are the boxes' elements with zeros outside the tensor,
    and the stores write back what was loaded, clipped to the tensor."""
    pr = PROBES["tma_copy_2d"]
    assert pr.host is not None
    case = pr.host(np.random.default_rng(11))
    g = case.arrays["src"]
    text = TMA
    for reg, d in (("crd0", dx), ("crd1", dy)):
        if d:
            mul = "0x40" if reg == "crd0" else "0x20"
            text = _edit(text, (f"IMAD {reg}, cta{reg[-1]}, {mul}, RZ", f"IMAD {reg}, cta{reg[-1]}, {mul}, RZ\n  "
                                f"IADD3 {reg}, {reg}, {d:#x}, RZ".replace("0x-", "-0x")))
    e = ProbeExpectation(type(case)(case.arrays, {"dump": _dumps_at(g, dx, dy), "dst": case.expected["dst"]}))
    rep = check_kernel(parse(text), values=True, expect=e)
    assert rep.messages(40) == [] and rep.values_wrong == 0
    # CTAs 0 and 11 run: their whole tiles dumped, and what their stores wrote inside the tensor
    inside = sum(max(0, min(200, 64 * x + dx + 64) - max(0, 64 * x + dx)) * max(0, min(90, 32 * y + dy + 32) - max(0, 32 * y + dy))
                 for x, y in ((0, 0), (3, 2)))
    assert rep.values_checked == 2 * 64 * 32 + inside


TMA_CASES = [
    # the load's destination 128 bytes into the tile: not on the 128-byte swizzle's 1024-byte repeat,
    # and past the buffer's end
    ("lands-off-the-swizzle-repeat", _edit(TMA, ("+ UIADD3 tma_src.0, tile_base, 0x0, URZ  // addr tile[0, 0]",
                                                 "  UIADD3 tma_src.0, tile_base, 0x80, URZ")),
     [m for c in (0, 11) for m in (
         f"CTA {c} warp 0: UTMALDG.2D lands its box at shared 0x480, which is not 1024-byte aligned (a 128-byte swizzle "
         f"repeats every 1024 bytes)",
         f"CTA {c} warp 0: UTMALDG.2D touches shared 0x480..0x1480, outside every shared buffer the kernel declares")]),
    # rows of 196 fp16 (392 bytes): the last column's store writes 8 bytes past each row's end
    ("store-across-a-ragged-row-end", _edit(TMA, (".tmap dst dtype=fp16 dims=200,90", ".tmap dst dtype=fp16 dims=196,90")),
     ["CTA 11 warp 0: UTMASTG.2D stores a box of dst at (192, 64) across the end of its rows of 196 fp16 (392 bytes, not a "
      "whole number of 16): the engine writes a row's last 16 bytes whole, 8 bytes past its end, memory the tensor map "
      "does not hold"]),
    ("store-not-waited", _edit(TMA, ("  DEPBAR.LE SB0, 0x0\n", "")),
     [f"CTA {c}: UTMASTG.2D, warp 0 reads tile asynchronously, and nothing orders that before CTA {c} exits (no wait of "
      f"its warps sees it done: its shared memory may be gone)" for c in (0, 11)]),
    ("expect-tx-16-over", _edit(TMA, ("MOV tx, 0x1000", "MOV tx, 0x1010")),
     [f"hang: CTA {c} warp {w} waits on full[0] for the phase of parity 0: it is in phase 0, 0 of 1 arrivals to come, "
      f"16 bytes" for c in (0, 11) for w in range(4)]),
]


@pytest.mark.parametrize("name,text,want", TMA_CASES, ids=[c[0] for c in TMA_CASES])
def test_one_copy_rule_broken(name: str, text: str, want: list[str]) -> None:
    assert _verdict(text) == want


# -- QGMMA: each operand decoded as its own 8-bit type ----------------------------------------------

# bit patterns and their values (OCP FP8: e4m3 bias 7, 3 mantissa bits; e5m2 bias 15, 2): read as the
# other type each is another number (e4m3's 0x3c is 1.5, e5m2's 0x38 is 0.5 where e4m3's is 1.0)
E4M3 = {0x38: 1.0, 0x40: 2.0, 0xB8: -1.0, 0x30: 0.5, 0x3C: 1.5}
E5M2 = {0x3C: 1.0, 0x40: 2.0, 0xBC: -1.0, 0x38: 0.5, 0x3E: 1.5}


def test_qgmma_decodes_a_as_e4m3_and_b_as_e5m2() -> None:
    from warpy.isa.examples import pipe_sm90

    rng = np.random.default_rng(8)
    a_bits = rng.choice(list(E4M3), size=(64, 128)).astype(np.uint8)
    b_bits = rng.choice(list(E5M2), size=(128, 128)).astype(np.uint8)
    a = np.vectorize(E4M3.get)(a_bits).astype(np.float64)
    b = np.vectorize(E5M2.get)(b_bits).astype(np.float64)
    e = _Gemm(a_bits, b_bits)
    text = str(pipe_sm90(k_tiles=1, depth=1, a_dtype="e4m3", b_dtype="e5m2").kernel())
    assert "QGMMA.64x128x32.F32.E4M3.E5M2" in text
    assert _verdict(text, values=True, expect=e) == []
    assert e.out is not None
    # thread t's 64 accumulator registers at 256 t: the fragments of a @ b.T (sums of halves: exact in fp32)
    np.testing.assert_array_equal(e.out[:128 * 64].reshape(128, 64), wgmma_fragment(a @ b.T))


# -- UMMA descriptors: what the checker reads is the layout's tile ------------------------------------

def _layout_bytes(tile: Any, addr: int, k0: int) -> np.ndarray:
    """Byte (r, kb) of the K step at k0: where the layout algebra puts the tile's element."""
    from warpy.layout.desc import mma_k_elems

    e, kk = tile.elem_bytes, mma_k_elems(tile.dtype)
    return np.array([[tile.layout.swizzle(addr + tile.linear(r, k0 + kb // e)) + kb % e for kb in range(kk * e)]
                     for r in range(tile.rows)], dtype=np.int64)


@pytest.mark.parametrize("major", ["K", "MN"])
@pytest.mark.parametrize("swizzle", [0, 32, 64, 128])
def test_umma_descriptors_read_the_layouts_tile(major: str, swizzle: int) -> None:
    """Through the encoder's words (`warpy.layout.desc.smem_descs`, sm100) for tiles of 1-2 swizzle
    spans along MN, 1-2 K groups, at 0 and at a later repeat: every K step's bytes are the layout's,
    and the other major's reading of the same word is another tile."""
    from warpy.check.families.tcgen05 import umma_tile
    from warpy.layout.desc import smem_descs
    from warpy.layout.smem import repeat_bytes, smem_tile

    se = (swizzle or 16) // 2
    for spans in (1, 2):
        for groups in (1, 2):
            rows, k = (se * spans, 16 * groups) if major == "MN" else (8 * spans, max(16, swizzle // 2) * groups)
            tile = smem_tile(rows, k, "bf16", major, swizzle)
            for addr in (0, 3 * repeat_bytes(swizzle)):
                for j, desc in enumerate(smem_descs(tile, addr, "sm100")):
                    want = _layout_bytes(tile, addr, 16 * j)
                    assert np.array_equal(umma_tile(desc, tile.rows, 32, major == "MN"), want), (spans, groups, addr, j)
                    if tile.rows > 8:
                        assert not np.array_equal(umma_tile(desc, tile.rows, 32, major != "MN"), want)


# -- the TS form: A from tensor memory -----------------------------------------------------------------

TS = _probe("umma_ts", "sm_100a")
TS_A = "+ UIADD3 a_t_base, UPT, UPT, tmem_base, 0x40, URZ  // addr a_t[0, 0]"
NO_MMA = [f"CTA 0 warp {w}: LDTM.x32 reads tensor-memory columns {c} that no MMA wrote" for w in range(4) for c in ("0..31", "32..63")]
DERIVED = "line {line} (UIADD3): addr a_t[0, {k}] is {at:#x}, the operand holds {holds:#x}"
TS_CASES = [
    ("clean", TS, []),
    # A's address names lane 32: the MMAs are refused (and the accumulator stays unwritten)
    ("a-at-lane-32", _edit(TS, (TS_A, "  UIADD3 a_t_base, UPT, UPT, tmem_base, 0x200040, URZ")),
     [DERIVED.format(line=72 + 3 * j, k=8 * (j + 1), at=0x48 + 8 * j, holds=0x200048 + 8 * j) for j in range(3)]
     + NO_MMA[:2] + ["CTA 0 warp 0: UTCHMMA reads A from tensor-memory lane 32; A's rows are lanes 0..127 (4 times)"]
     + NO_MMA[2:]),
    # the store lands 8 columns on: the first MMA's A (columns 64..71) was never stored
    ("a-not-stored", _edit(TS, ("UIADD3 ta, UPT, UPT, tmem_base, ulanes, 0x40", "UIADD3 ta, UPT, UPT, tmem_base, ulanes, 0x48")),
     ["CTA 0 warp 0: UTCHMMA reads A from tensor-memory columns 64..71 that no tcgen05 store (STTM) wrote"]),
    # A at column 100: the last MMA's columns run past the 128 allocated
    ("a-past-the-allocation", _edit(TS, (TS_A, "  UIADD3 a_t_base, UPT, UPT, tmem_base, 0x64, URZ")),
     [DERIVED.format(line=72 + 3 * j, k=8 * (j + 1), at=0x48 + 8 * j, holds=0x6c + 8 * j) for j in range(3)]
     + [f"CTA 0 warp 0: UTCHMMA reads A from tensor-memory columns {c} that no tcgen05 store (STTM) wrote"
        for c in ("100..107", "108..115", "116..123")]
     + ["CTA 0 warp 0: UTCHMMA touches tensor-memory columns 124..131, outside what the CTA allocated"]),
    # the tcgen05 store waited with wait::ld: it stays open, so the fence before the CTA barrier publishes
    # none of the warp's tcgen05 operations from the store on (the MMA's read of A, the free after it)
    ("store-waited-as-a-load", _edit(TS, ("  STTM.x32 tmem[ta], arow\n  TCGEN05.WAIT.ST\n", "  STTM.x32 tmem[ta], arow\n  TCGEN05.WAIT.LD\n")),
     [f"tensor memory: LDTM.x32, warp {w} reads it and UTCATOMSWS.AND, warp 0 writes it, and nothing orders the two (2 times)"
      for w in (1, 2, 3)]
     + [m for w in (1, 2, 3) for m in (
         f"tensor memory: STTM.x32, warp {w} writes it and UTCATOMSWS.AND, warp 0 writes it, and nothing orders the two",
         f"tensor memory: STTM.x32, warp {w} writes it and UTCHMMA, warp 0 reads it, and nothing orders the two (4 times)")]),
    # M = 64 in the instruction descriptor: warpy models the TS form for M = 128 only
    ("m-64", _edit(TS, ("UMOV zero_idesc.1, 0x8100490", "UMOV zero_idesc.1, 0x4100490")),
     NO_MMA[:2] + ["CTA 0 warp 0: UTCHMMA reads A from tensor memory with M = 64 over 1 CTA(s); warpy models the TS form "
                   "for M = 128 on one CTA (4 times)"] + NO_MMA[2:]),
]


@pytest.mark.parametrize("name,text,want", TS_CASES, ids=[c[0] for c in TS_CASES])
def test_one_ts_operand_rule_broken(name: str, text: str, want: list[str]) -> None:
    assert _verdict(text) == want


def test_a_guarded_narrow_load_writes_its_lanes_and_register_only() -> None:
    """Lanes 1..31 load 4 bytes into u.0 (lane 0 does not: it keeps 0x5a5a); u.1 keeps 0x77 in every
    lane; the 64-bit store shows both registers."""
    body = ROTATE.format(nb=8, m=".64").replace(
        "  LDS.64 u.0, [sb+smem]\n",
        "  MOV u.0, 0x5a5a\n  MOV u.1, 0x77\n  ISETP.NE.U32.AND ok, PT, lane, RZ, PT\n  @ok LDS u.0, [sb+smem]\n")
    msgs, e = _run(body)
    assert msgs == []
    got = e.out[:256].view(np.uint32).reshape(32, 2)
    rotated = np.roll(SRC[:256].reshape(32, 8), -1, axis=0)[:, :4].copy().view(np.uint32).reshape(32)
    assert got[0].tolist() == [0x5A5A, 0x77]
    assert got[1:, 0].tolist() == rotated[1:].tolist() and (got[:, 1] == 0x77).all()


def test_atomic_update_goldens() -> None:
    from warpy.check.families.memory import atomic_update

    f32 = ("F32", "FTZ", "RN")
    # fp32 adds flush subnormal inputs and results to zero (.FTZ), and round to nearest even
    assert atomic_update("ADD", f32, 0x00000001, 0x00000000) == 0
    assert atomic_update("ADD", f32, 0x00800000, 0x80000001) == 0x00800000
    assert atomic_update("ADD", f32, 0x3F800000, 0x33800000) == 0x3F800000  # 1 + 2^-24: a tie, to even
    assert atomic_update("ADD", f32, 0x3F800001, 0x33800000) == 0x3F800002  # the tie from odd, up
    assert atomic_update("ADD", (), 0xFFFFFFFF, 2) == 1
    assert atomic_update("CAS", (), 5, 9, 5) == 9 and atomic_update("CAS", (), 5, 9, 4) == 5
    with pytest.raises(ValueError, match="^atomic XOR$"):
        atomic_update("XOR", (), 1, 2)


def test_flags_in_32_bit_integer_buffers_are_kept_without_values() -> None:
    """The flag test of tests/check/test_mutants_check.py (CTA 1 raises a word CTA 0 polls): without
    values the checker keeps the words of u32 and s32 buffers only, so over an fp32 buffer the poll
    never sees the flag; a load outside every buffer is reported, not kept."""
    from tests.check.test_mutants_check import FLAG_BODY, FLAG_HEAD

    def run(head: str, body: str = FLAG_BODY) -> list[str]:
        return check_kernel(parse(head + body)).messages(20)

    assert run(FLAG_HEAD) == [] and run(FLAG_HEAD.replace("elem=u32", "elem=s32")) == []
    assert run(FLAG_HEAD.replace("elem=u32", "elem=fp32")) == [
        "hang: CTA 0 warp 0 waits on words+0x80 (the loop ending at line 17 polls it and nothing writes it)"]
    assert run(FLAG_HEAD, FLAG_BODY.replace("  LDG.E v, desc[memdesc][q.64]\n", "  LDG.E v, desc[memdesc][q.64+0x100]\n")) == [
        "CTA 0 warp 0: LDG.E touches global buf+0x100..+0x80, outside every global buffer the kernel declares"]


def test_descriptor_tiles_are_integer_addresses() -> None:
    """The byte addresses a descriptor describes index shared memory: integers, both majors, every
    swizzle (and tensor-memory words likewise)."""
    from warpy.check.families.tcgen05 import tmem_words, umma_tile
    from warpy.check.families.wgmma import gmma_tile

    for hi in (0x00000040, 0x40000040, 0x80000040, 0xC0000040):
        for mn in (False, True):
            assert gmma_tile(0x10010, hi, 64, 32, mn, 2).dtype == np.int64
            assert umma_tile(0x10010 | (hi & 0x3FFF) << 32 | (hi >> 30) << 62, 64, 32, mn).dtype == np.int64
    words = tmem_words(np.arange(2), np.arange(3))
    assert words.dtype == np.int64 and words.tolist() == [0, 128, 256, 1, 129, 257]


# -- shuffles: the lanes that run one are its member mask --------------------------------------------

SHUFFLE = """\
  S2R lane, SR_LANEID
  ULDC.64 memdesc, c[0x0][0x208]
  LDC.64 q, c[0x0][dst]
  IMAD.WIDE.U32 qa, lane, 0x4, q
  IADD3 v.0, lane, 0x64, RZ
  ISETP.LT.U32.AND ok, PT, lane, {n}, PT
  MOV u.0, RZ
  {guard}SHFL.BFLY PT, u.0, v.0, {b}, 0x1f{members}
  STG.E desc[memdesc][qa.64], u.0
  EXIT
"""
SHFL_WHO = "CTA 0 warp 0: SHFL.BFLY "


@pytest.mark.parametrize("guard,b,members,want,values", [
    ("", "0x1", "", [], [100 + (x ^ 1) for x in range(32)]),
    # lanes 0..15 run it: their mask says so, or it does not
    ("@ok ", "0x1", ", 0xffff", [], [100 + (x ^ 1) for x in range(16)] + [0] * 16),
    ("@ok ", "0x1", "", [SHFL_WHO + "runs on lanes 0x0000ffff, its member mask is 0xffffffff (every member, and only they, "
                         "must execute it together)"], [100 + (x ^ 1) for x in range(16)] + [0] * 16),
    # lane 0 reads lane 16, which does not run it
    ("@ok ", "0x10", ", 0xffff", [SHFL_WHO[:-1] + ": lane 0 reads lane 16, which does not take part (its value is undefined)"],
     list(range(116, 132)) + [0] * 16),
    ("", "0x1", ", 0xffff", [SHFL_WHO + "runs on lanes 0xffffffff, its member mask is 0x0000ffff (every member, and only "
                                        "they, must execute it together)",
                             SHFL_WHO[:-1] + ": lane 16 reads lane 17, which does not take part (its value is undefined)"],
     [100 + (x ^ 1) for x in range(32)]),
    # lanes 0..3 and their mask: lane l is bit l
    ("@ok ", "0x1", ", 0xf", [], [101, 100, 103, 102] + [0] * 28),
])
def test_a_shuffle_s_members_run_it(guard: str, b: str, members: str, want: list[str], values: list[int]) -> None:
    msgs, e = _run(SHUFFLE.format(guard=guard, b=b, members=members, n="0x4" if members == ", 0xf" else "0x10"))
    assert msgs == want
    assert e.out[:128].view(np.uint32).tolist() == values


def _moved(text: str, dx: int, dy: int) -> str:
    for reg, d, mul in (("crd0", dx, "0x40"), ("crd1", dy, "0x20")):
        if d:
            text = _edit(text, (f"IMAD {reg}, cta{reg[-1]}, {mul}, RZ",
                                f"IMAD {reg}, cta{reg[-1]}, {mul}, RZ\n  IADD3 {reg}, {reg}, {d:#x}, RZ".replace("0x-", "-0x")))
    return text


@pytest.mark.parametrize("dx,dy,want", [
    # CTA 11's box starts at row 90 (26 down) or 160 (96 down): wholly outside, nothing written, nothing reported
    (0, 26, []), (0, 96, []),
    # 32 columns left: CTA 11's box is columns 160..223, across the end at 196
    (-32, 0, ["CTA 11 warp 0: UTMASTG.2D stores a box of dst at (160, 64) across the end of its rows of 196 fp16 (392 "
              "bytes, not a whole number of 16): the engine writes a row's last 16 bytes whole, 8 bytes past its end, "
              "memory the tensor map does not hold"]),
])
def test_only_a_store_that_reaches_a_ragged_row_end_writes_past_it(dx: int, dy: int, want: list[str]) -> None:
    ragged = _edit(TMA, (".tmap dst dtype=fp16 dims=200,90", ".tmap dst dtype=fp16 dims=196,90"))
    assert _verdict(_moved(ragged, dx, dy)) == want


@pytest.mark.parametrize("mods,nb,word", [(".S16", 2, 0xFFFF8001), (".U16", 2, 0x8001), (".S8", 1, 0xFFFFFF81),
                                          (".U8", 1, 0x81)])
def test_a_narrow_load_extends_by_its_sign(mods: str, nb: int, word: int) -> None:
    """ld.s16 / ld.s8 sign-extend into the 32-bit register, ld.u16 / ld.u8 zero-extend: each lane's
    narrow element (0x8001 or 0x81, the next lane's) stored back as a whole word."""
    body = ROTATE.format(nb=nb, m=mods).replace(f"  STG.E{mods} desc[memdesc][qa.64], u.0\n",
                                                "  IMAD.WIDE.U32 qa, lane, 0x4, q\n  STG.E desc[memdesc][qa.64], u.0\n")
    src = np.tile(np.frombuffer(np.uint16(0x8001).tobytes() if nb == 2 else b"\x81", dtype=np.uint8), 512 // nb)
    msgs, e = _run(body, src)
    assert msgs == [] and e.out[:128].view(np.uint32).tolist() == [word] * 32
    # the global load alone (a load and a store that both swapped the bytes would pass the round trip)
    direct = _edit(body, (f"  STS{mods} [sa+smem], v.0\n  BAR.SYNC.DEFER_BLOCKING 0x0\n  LDS{mods} u.0, [sb+smem]\n",
                          "  MOV u.0, v.0\n"))
    msgs, e = _run(direct, src)
    assert msgs == [] and e.out[:128].view(np.uint32).tolist() == [word] * 32


ATOMIC_NO_VALUES = """\
  S2R lane, SR_LANEID
  UMOV smem, `(dsmem)
  ULDC.64 memdesc, c[0x0][0x208]
  LDC.64 p, c[0x0][src]
  MOV u.0, lane
  ATOMG.E.EXCH.STRONG.GPU ok, v.0, desc[memdesc][p.64], u.0
  IADD3 next, lane, -0x1, RZ
  ISETP.EQ.U32.AND ok, PT, lane, RZ, PT
  SEL next, RZ, next, ok
  ISETP.NE.U32.AND ok, PT, v.0, {want}, PT
  @ok STS [smem+0x800], lane
  EXIT
"""


def test_an_atomic_returns_the_old_word_without_values() -> None:
    """Without values the words of a u32 buffer are kept: lane l's exchange returns lane l - 1's
    value (lane 0 the word's initial 0). A lane whose old word is not that stores outside every
    buffer, which is reported."""
    assert _verdict(MEM_HEAD + ATOMIC_NO_VALUES.format(want="next")) == []
    assert _verdict(MEM_HEAD + ATOMIC_NO_VALUES.format(want="lane")) == [
        "CTA 0 warp 0: STS touches shared 0xc00..0xc04, outside every shared buffer the kernel declares"]


# -- UMMA descriptor layout codes the checker does not model ----------------------------------------

UMMA = _probe("umma_1cta", "sm_100a")
UMMA_B_HI = "+ UMOV umma_b.1, 0x40004040  // udesc.hi sb[0, 0]"


@pytest.mark.parametrize("code,what", [(1, "128B with 32B atoms"), (3, "reserved"), (5, "reserved"), (7, "reserved")])
def test_a_umma_descriptor_with_an_unmodelled_layout_code_is_reported(code: int, what: str) -> None:
    """B's descriptor with layout code 1 (128-byte swizzle, 32-byte atoms) or a reserved one: every
    UTCHMMA reading it is reported (it was read as no swizzle), the clean probe is silent."""
    hi = (0x40004040 & ~(7 << 29)) | code << 29
    msgs = _verdict(_edit(UMMA, (UMMA_B_HI, f"  UMOV umma_b.1, {hi:#x}")))
    ours = [x for x in msgs if "layout code" in x]
    assert ours and all(f"B descriptor 0x{hi:x}" in x and f"layout code {code} ({what})" in x for x in ours), msgs
    assert len(ours) == 4  # the four K steps' UTCHMMAs
    assert _verdict(UMMA) == []
