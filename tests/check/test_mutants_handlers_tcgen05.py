"""The checker's tcgen05 handlers (`warpy/check/families/tcgen05.py`: UMMA, its commit, tensor-memory
allocation and free) on edits of the `umma_1cta` and `umma_2cta` probes that break exactly one rule, beside the clean
probe: the checker's whole verdict pinned, and how many problems of each kind (a message filed under
another kind, or reworded, or a second one, fails). Written against the survivors of the mutation runs
of the handlers' bodies (docs/testing.md: "check-families: the handlers of `tcgen05.py`, all 1172"); a
few sm_100a GEMMs checked with values (the MMA's operand formats) beside. Each case runs in about a second
or less, a GEMM in about three."""

from __future__ import annotations

import contextlib
import functools
import re
import signal
from typing import Iterator

import pytest

from warpy.check.report import check_kernel
from warpy.isa.text import parse
from warpy.kernels import gemm as G
from warpy.kernels.probes import PROBES


@functools.lru_cache(maxsize=None)
def _umma() -> str:
    return str(PROBES["umma_1cta"].build("sm_100a").kernel())


@functools.lru_cache(maxsize=None)
def _pair() -> str:
    return str(PROBES["umma_2cta"].build("sm_100a").kernel())


def _edit(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def _no_mma(*warps: int) -> list[str]:
    return [f"CTA 0 warp {w}: LDTM.x32 reads tensor-memory columns {c} that no MMA wrote" for w in warps for c in ("0..31", "32..63")]


IDESC = "UMOV zero_idesc.1, 0x8100490"  # kind::f16, bf16 A / B, fp32 D, N = 64, M = 128
A_HI = "+ UMOV umma_a.1, 0x40004040  // udesc.hi sa[0, 0]"  # layout code 2: 128-byte swizzle
B_HI = "+ UMOV umma_b.1, 0x40004040  // udesc.hi sb[0, 0]"
ALLOC = "UTCATOMSWS.FIND_AND_SET.ALIGN [tmem_slot_base], 0x40"
FREE = "UTCATOMSWS.AND tmem_base, 0x40"
DESC_CODE = "CTA 0 warp 0: UTCHMMA's {w} descriptor 0x{d:x} has layout code {c} ({why}), which the checker does not model"
WAIT_FULL = "SYNCS.PHASECHK.TRANS64.TRYWAIT waited, [full_base], phase0  // op1: addr full[0]\n~ @!waited BRA WAIT_6\n  TCGEN05.FENCE.AFTER\n"
STG2 = "  STG.E.128 desc[memdesc][gaddr.64+0x80], v.0\n"
FIRST_MMA = "UTCHMMA gdesc[umma_a], gdesc[umma_b], tmem[tmem_base], tmem[zero_idesc.0], idesc[zero_idesc.1], !UPT"
A_LO = "+ UIADD3 sa_udesc, UPT, UPT, sa_udesc, 0x10000, URZ  // udesc.lo sa[0, 0]"
OUTSIDE = "CTA 0 warp {w}: LDTM.x32 touches tensor-memory columns {c}, outside what the CTA allocated"

# name -> (edit, whole verdict, {kind: count})
CASES = {
    "clean": (None, [], {}),
    # N = 0 in the instruction descriptor: each MMA refused, so the loads read columns no MMA wrote
    "idesc-n-0": ((IDESC, "UMOV zero_idesc.1, 0x8000490"),
                  _no_mma(0) + ["CTA 0 warp 0: UTCHMMA has instruction descriptor 0x8000490 (M 128, N 0) (4 times)"]
                  + _no_mma(1, 2, 3), {"protocol": 9}),
    # M = 0 in the instruction descriptor: each MMA refused the same way
    "idesc-m-0": ((IDESC, "UMOV zero_idesc.1, 0x100490"),
                  _no_mma(0) + ["CTA 0 warp 0: UTCHMMA has instruction descriptor 0x100490 (M 0, N 64) (4 times)"]
                  + _no_mma(1, 2, 3), {"protocol": 9}),
    # M = 64 on one CTA: the accumulator is lanes 0..63, so warps 2 and 3 load lanes no MMA wrote
    "m-64": ((IDESC, "UMOV zero_idesc.1, 0x4100490"),
             [f"CTA 0 warp {w}: LDTM.x32 reads tensor-memory columns {c} that no MMA wrote" for w in (2, 3)
              for c in ("0..31", "32..63")], {"protocol": 4}),
    # the first MMA's accumulator at lane 64 (the address's lane field): it writes lanes 64..127 only, so the
    # second MMA (at lane 0) adds to lanes 0..63 that no MMA wrote
    "first-mma-at-lane-64": ((FIRST_MMA, "UIADD3 taddr, UPT, UPT, tmem_base, 0x400000, URZ\n  "
                              + FIRST_MMA.replace("tmem[tmem_base]", "tmem[taddr]")),
                             ["CTA 0: UTCHMMA (warp 0) adds to tensor-memory columns 0..63 that no MMA wrote"], {"protocol": 1}),
    # A's descriptor with SBO 512 for 1024: rows 8.. of each K step's A tile are rows 4.. of the box TMA landed
    "a-sbo-wrong": ((A_HI, "  UMOV umma_a.1, 0x40004020"),
                    [f"CTA 0 warp 0: UTCHMMA reads its A operand with a 128-byte swizzle descriptor whose row 8, K byte 0 is "
                     f"row 4, byte {32 * k} of the box (not row 8, byte {32 * k}); the copy engine landed it through tensor "
                     f"map a (128-byte swizzle, 128-byte rows)" for k in range(4)], {"data": 4}),
    # A's start address 0x7000 bytes on: past the kernel's shared memory (the derived address checks too)
    "a-outside-shared": ((A_LO, "  UIADD3 sa_udesc, UPT, UPT, sa_udesc, 0x10700, URZ"),
                         [f"line {59 + 3 * k} (UIADD3): udesc.lo sa[0, {16 * k}] is 0x{0x10040 + 2 * k:x}, the operand holds "
                          f"0x{0x10740 + 2 * k:x}" for k in range(4)]
                         + [f"CTA 0 warp 0: UTCHMMA touches shared 0x{0x7400 + 0x20 * k:x}..0x{0xb400 - 0x20 * k:x}, outside "
                            f"every shared buffer the kernel declares" for k in range(4)], {"wrong": 4, "memory": 4}),
    # the column counts of the allocation and of the free from a uniform register (clean: each is read from it)
    "alloc-count-in-a-register": ((ALLOC, "UMOV bar0, 0x40\n  " + ALLOC.replace("0x40", "bar0")), [], {}),
    "free-count-in-a-register": ((FREE, "UMOV bar0, 0x40\n  " + FREE.replace("0x40", "bar0")), [], {}),
    # B's layout code 3 (reserved): each of the four K steps' MMAs refused, with its own descriptor
    "b-layout-code-3": ((B_HI, "  UMOV umma_b.1, 0x60004040"),
                        _no_mma(0) + [DESC_CODE.format(w="B", d=0x6000404000010440 + 2 * k, c=3, why="reserved")
                                      for k in range(4)] + _no_mma(1, 2, 3), {"protocol": 12}),
    # A's layout code 1 (128-byte swizzle with 32-byte atoms)
    "a-layout-code-1": ((A_HI, "  UMOV umma_a.1, 0x20004040"),
                        _no_mma(0) + [DESC_CODE.format(w="A", d=0x2000404000010040 + 2 * k, c=1, why="128B with 32B atoms")
                                      for k in range(4)] + _no_mma(1, 2, 3), {"protocol": 12}),
    # 48 columns: not a power of two, nothing is allocated, so every use is outside the allocation
    "allocates-48-columns": ((ALLOC, ALLOC.replace("0x40", "0x30")),
                             ["CTA 0 warp 0 frees tensor-memory columns 0..63, which no allocation returned"] + _no_mma(0)
                             + ["CTA 0 warp 0: UTCATOMSWS.FIND_AND_SET.ALIGN allocates 48 tensor-memory columns: a power "
                                "of two from 32 to 512"] + _no_mma(1, 2, 3)
                             + [OUTSIDE.format(w=0, c=c) for c in ("0..31", "32..63")]
                             + ["CTA 0 warp 0: UTCHMMA touches tensor-memory columns 0..63, outside what the CTA allocated "
                                "(4 times)"]
                             + [OUTSIDE.format(w=w, c=c) for w in (1, 2, 3) for c in ("0..31", "32..63")],
                             {"protocol": 10, "memory": 9}),
    # the first MMA accumulates (UPT for !UPT): it adds to columns no MMA wrote (the words pinned)
    "first-mma-accumulates": (("tmem[zero_idesc.0], idesc[zero_idesc.1], !UPT", "tmem[zero_idesc.0], idesc[zero_idesc.1], UPT"),
                              ["CTA 0: UTCHMMA (warp 0) adds to tensor-memory columns 0..63 that no MMA wrote"], {"protocol": 1}),
    # warp 0 stores into A's tile (the generic proxy) after its wait, with no proxy fence before the MMAs
    # read it (the async proxy)
    "sts-into-a-unfenced": ((WAIT_FULL, WAIT_FULL + "  SHF.L.U32 row, tid, 0x2, RZ\n  STS [row+smem], RZ\n"),
                            ["sa: UTCHMMA, warp 0 reads it through the async proxy and STS, warp 0 writes it through the "
                             "generic proxy, and no proxy fence orders the two (4 times)"], {"order": 1}),
    # the allocation's slot past the end of shared memory (0x7010 for 0x6010): its write is refused
    # (the report names the warp), as are the loads of it
    "slot-outside-shared": (("+ UIADD3 tmem_slot_base, UPT, UPT, smem, 0x6010, URZ", "  UIADD3 tmem_slot_base, UPT, UPT, smem, 0x7010, URZ"),
                            ["line 29 (UTCATOMSWS.FIND_AND_SET.ALIGN): addr tmem_slot[0] is 0x6410, the operand holds 0x7410",
                             "line 34 (LDS): op1: addr tmem_slot[0] is 0x6410, the operand holds 0x7410 (4 times)",
                             "line 6 (UIADD3): addr tmem_slot[0] is 0x6410, the operand holds 0x7410 (4 times)"]
                            + [f"CTA 0 warp {w}: {op} touches shared 0x7410..0x7414, outside every shared buffer the kernel "
                               f"declares" for w, op in ((0, "LDS"), (0, "UTCATOMSWS.FIND_AND_SET.ALIGN"), (1, "LDS"), (2, "LDS"),
                                                         (3, "LDS"))],
                            {"wrong": 3, "memory": 5}),
    # the second load waited with wait::st: its registers stay the load's (each store of them is reported)
    # and the load stays open, so the fence before the barrier does not publish it to the free
    "second-load-waited-as-a-store": (("  TCGEN05.WAIT.LD\n" + STG2, "  TCGEN05.WAIT.ST\n" + STG2),
                                      [f"tensor memory: LDTM.x32, warp {w} reads it and UTCATOMSWS.AND, warp 0 writes it, "
                                       f"and nothing orders the two" for w in (1, 2, 3)]
                                      + [f"v: LDTM.x32, warp {w} writes it and STG.E.128, warp {w} touches it, and nothing "
                                         f"orders the two (no tcgen05.wait::ld after the load) (8 times)" for w in range(4)],
                                      {"order": 7}),
    # the free names 32 of the 64 columns allocated: refused, and the CTA exits holding them
    "frees-32-of-64": ((FREE, FREE.replace("0x40", "0x20")),
                       ["CTA 0 exits with tensor-memory columns 0..63 still allocated (a tcgen05.dealloc must free them: "
                        "the next CTA on the SM cannot allocate them)",
                        "CTA 0 warp 0 frees tensor-memory columns 0..31, which no allocation returned"], {"protocol": 2}),
}


# the pair probe (`umma_2cta`: M = 256, N = 128, one commit multicast to both CTAs' acc_full)
HANG_ACC = "hang: CTA {r} warp {w} waits on acc_full[0] for the phase of parity 0: it is in phase 0, 1 of 1 arrivals to come, 0 bytes"
HANG_CLUSTER = "hang: CTA {r} warp {w} waits on the cluster barrier"
PAIR_CASES = {
    "clean": (None, [], {}),
    # M = 128 over the pair: each CTA's 64 rows fold into lanes 0..127 of the first N / 2 = 64 columns,
    # so each warp's loads of columns 64..127 read what no MMA wrote
    "pair-m-128-folds": (("UMOV zero_idesc.1, 0x10200490", "UMOV zero_idesc.1, 0x8200490"),
                         [f"CTA {r} warp {w}: LDTM.x32 reads tensor-memory columns {c} that no MMA wrote"
                          for r in (0, 1) for w in range(4) for c in ("64..95", "96..127")], {"protocol": 16}),
    # the commit's multicast mask names one CTA: the other's acc_full never completes
    "commit-to-rank-0-only": (("UMOV cta_mask, 0x3", "UMOV cta_mask, 0x1"),
                              [HANG_CLUSTER.format(r=0, w=w) for w in range(4)] + [HANG_ACC.format(r=1, w=w) for w in range(4)],
                              {"protocol": 8}),
    "commit-to-rank-1-only": (("UMOV cta_mask, 0x3", "UMOV cta_mask, 0x2"),
                              [HANG_CLUSTER.format(r=1, w=w) for w in range(4)] + [HANG_ACC.format(r=0, w=w) for w in range(4)],
                              {"protocol": 8}),
}


@pytest.mark.parametrize("name", list(PAIR_CASES))
def test_one_tcgen05_pair_rule_broken(name: str) -> None:
    edit, want, kinds = PAIR_CASES[name]
    text = _pair() if edit is None else _edit(_pair(), *edit)
    rep = check_kernel(parse(text))
    assert rep.messages(40) == want
    assert {k: rep.problems.count(k) for k in rep.problems.KINDS if rep.problems.count(k)} == kinds


@pytest.mark.parametrize("name", list(CASES))
def test_one_tcgen05_handler_rule_broken(name: str) -> None:
    edit, want, kinds = CASES[name]
    text = _umma() if edit is None else _edit(_umma(), *edit)
    rep = check_kernel(parse(text))
    assert rep.messages(40) == want
    assert {k: rep.problems.count(k) for k in rep.problems.KINDS if rep.problems.count(k)} == kinds


# the pair probe with its output declared as a global buffer shaped as A's rows x B's rows (256 x 128 fp32,
# rows of 0x200 bytes, as the probe stores them): the provenance then knows the MMA's product is an
# output's, so B's halves taken from rows that are not one run is reported as data
OUT_C = ".buffer c global base=0x0 size=0x20000 elem=fp32 source=out layout=(256,128):(512,4)\n"
B_ROWS = "UIMAD tma_args.3, rank, 0x40, URZ"


def _pair_with_output() -> str:
    return _edit(_pair(), ".param out u64\n", ".param out u64\n" + OUT_C)


def test_a_pair_whose_accumulator_is_not_allocated() -> None:
    """The pair allocates 64 columns (0x40 for 0x80) and uses 128: each CTA's MMAs are refused there (one report a
    CTA: the second CTA is checked after the first is refused), every load reads what no MMA wrote, and the frees fail."""
    alloc = "UTCATOMSWS.2CTA.FIND_AND_SET.ALIGN [tmem_slot_base], 0x80"
    rep = check_kernel(parse(_edit(_pair(), alloc, alloc.replace("0x80", "0x40"))))
    assert [x for x in rep.messages(80) if "UTCHMMA" in x] == [
        f"CTA {r} warp 0: UTCHMMA.2CTA touches tensor-memory columns 0..127, outside what the CTA allocated (4 times)" for r in (0, 1)]
    assert {k: rep.problems.count(k) for k in rep.problems.KINDS if rep.problems.count(k)} == {"protocol": 36, "memory": 18}


@pytest.mark.parametrize("name,edit,want", [
    ("clean", None, []),
    # both CTAs load B's rows 0..63 (rank * 0 for rank * 64): the pair's B is not rows 0..127
    ("b-rows-twice", (B_ROWS, B_ROWS.replace("0x40", "0x0")),
     ["CTA 0 warp 0: UTCHMMA.2CTA multiplies B rows 0..63, 0..63 of b from the pair's CTAs: not one run of 128 rows (4 times)"]),
])
def test_the_pairs_b_rows_are_one_run(name: str, edit: tuple[str, str] | None, want: list[str]) -> None:
    text = _pair_with_output() if edit is None else _edit(_pair_with_output(), *edit)
    rep = check_kernel(parse(text))
    assert rep.messages(40) == want
    assert rep.problems.count("data") == len(want)


def test_b_rows_not_one_run_without_a_declared_output_are_not_reported() -> None:
    """The same B rows taken twice, in the probe as it is (no output declared): the provenance cannot say the
    product is an output's, so nothing is reported (the report needs both A's layout and the output)."""
    rep = check_kernel(parse(_edit(_pair(), B_ROWS, B_ROWS.replace("0x40", "0x0"))))
    assert rep.messages(40) == [] and rep.problems.total() == 0


@contextlib.contextmanager
def _within(seconds: int) -> Iterator[None]:
    """Fails the test (TimeoutError) where the block runs past `seconds`: a checker that spins."""
    def stop(*_: object) -> None:
        raise TimeoutError(f"the checker ran past {seconds} s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_a_third_allocation_finds_the_columns_after_two() -> None:
    """Three allocations of 64 columns: the third steps over two held ones to columns 128..191 (where
    the slot then points, so the MMAs, loads and free use those), and the CTA exits holding the first
    two. A search that stops stepping spins for ever: the check must answer within seconds."""
    alloc = "  " + ALLOC + "  // addr tmem_slot[0]\n"
    with _within(30):
        rep = check_kernel(parse(_edit(_umma(), alloc, alloc * 3)))
    assert rep.messages(40) == ["CTA 0 exits with tensor-memory columns 0..63, 64..127 still allocated (a tcgen05.dealloc "
                                "must free them: the next CTA on the SM cannot allocate them)"]
    assert rep.problems.count("protocol") == 1


HELD = "CTA 0 exits with tensor-memory columns 0..255, 256..511 still allocated (a tcgen05.dealloc must free them: the next CTA on the SM cannot allocate them)"
FREE_256 = "CTA 0 warp 0 frees tensor-memory columns 256..319, which no allocation returned"


@pytest.mark.parametrize("n,want", [
    # two of 256: the second takes the last columns (256..511), the slot then points there
    (2, [HELD, FREE_256]),
    # a third of 256: none are free
    (3, [HELD, "CTA 0 warp 0 allocates 256 tensor-memory columns: none are free (a hang on the GPU)", FREE_256]),
])
def test_allocations_of_256_columns_fill_the_tensor_memory(n: int, want: list[str]) -> None:
    alloc = "  " + ALLOC + "  // addr tmem_slot[0]\n"
    rep = check_kernel(parse(_edit(_umma(), alloc, alloc.replace("0x40", "0x100") * n)))
    assert rep.messages(40) == want
    assert rep.problems.count("protocol") == len(want) == rep.problems.total()


@pytest.mark.parametrize("first,want", [
    # 16 columns: under the least (32), refused; the probe's own 64 then take columns 0..63
    ("0x10", ["CTA 0 warp 0: UTCATOMSWS.FIND_AND_SET.ALIGN allocates 16 tensor-memory columns: a power of two from 32 to 512"]),
    # 32 columns: the least, allowed (the probe's 64 go to 64..127, and the first 32 are never freed)
    ("0x20", ["CTA 0 exits with tensor-memory columns 0..31 still allocated (a tcgen05.dealloc must free them: the next "
              "CTA on the SM cannot allocate them)"]),
    # 512 columns: the most, allowed, and then none are free for the probe's 64
    ("0x200", ["CTA 0 exits with tensor-memory columns 0..511 still allocated (a tcgen05.dealloc must free them: the next "
               "CTA on the SM cannot allocate them)", "CTA 0 warp 0 allocates 64 tensor-memory columns: none are free (a hang on "
               "the GPU)", "CTA 0 warp 0 frees tensor-memory columns 0..63, which no allocation returned"]),
])
def test_an_allocation_of_the_least_and_the_most_columns(first: str, want: list[str]) -> None:
    alloc = "  " + ALLOC + "  // addr tmem_slot[0]\n"
    rep = check_kernel(parse(_edit(_umma(), alloc, alloc.replace("0x40", first) + alloc)))
    assert rep.messages(40) == want
    assert rep.problems.count("protocol") == len(want) == rep.problems.total()


@pytest.mark.parametrize("dtype,mma", [("e5m2", "UTCQMMA.2CTA"), ("fp16", "UTCHMMA.2CTA")])
def test_an_umma_reads_its_operands_in_their_format(dtype: str, mma: str) -> None:
    """kind::f8f6f4 (UTCQMMA) with both operands e5m2: the instruction descriptor's A and B format fields
    (bits 7-9, 10-12) each decode their operand, checked with values against numpy (e5m2 read as e4m3, a
    field read wrong, gives other products; `tests/kernels/test_gemm_fp8.py` has the e4m3 GEMMs); kind::f16
    with fp16 operands (format 0, not bf16's 1)."""
    prob = G.GemmProblem(256, 256, 64, dtype=dtype, out_dtype="fp32", arch="sm_100a")
    prog = G.build(prob)
    assert mma in str(prog.kernel())
    rep = check_kernel(prog.kernel(), None, values=True, expect=G.FAMILY.expectation(prob))
    assert rep.messages() == [] and rep.values_checked == 256 * 256 // 2 and rep.values_wrong == 0


def test_columns_freed_and_allocated_again() -> None:
    """Warp 0 frees the accumulator's columns, allocates them again (without relinquishing the permit
    first) and loads columns 32..63: the free forgot what the MMAs wrote there, so the load reads columns
    no MMA wrote; the second allocation is ordered after the free (the warp's own program order) and the
    second free after the load."""
    free = "  " + FREE + "\n"
    again = free + "  " + ALLOC + "\n  LDTM.x32 v, tmem[taddr]\n  TCGEN05.WAIT.LD\n" + free
    text = _edit(_edit(_umma(), free, again), "  UVIRTCOUNT.DEALLOC.SMPOOL 0x80\n", "")
    rep = check_kernel(parse(text))
    assert rep.messages(40) == ["CTA 0 warp 0: LDTM.x32 reads tensor-memory columns 32..63 that no MMA wrote"]
    assert rep.problems.count("protocol") == 1 and rep.problems.total() == 1


@pytest.mark.parametrize("field,codes", [(2 << 7, "2, 0"), (3 << 10, "0, 3")])
def test_an_fp8_format_code_warpy_does_not_model_is_refused(field: int, codes: str) -> None:
    """kind::f8f6f4 with A's format code 2 (e2m3) or B's 3 (e3m2), the other e4m3: each MMA is refused with
    both codes named (the products are then missing: C differs)."""
    prob = G.GemmProblem(256, 256, 64, dtype="e4m3", out_dtype="fp32", arch="sm_100a")
    text = str(G.build(prob).kernel())
    m = re.search(r"UMOV zero_idesc\.1, (0x[0-9a-f]+)", text)
    assert m and int(m.group(1), 16) >> 7 & 0x3F == 0  # A and B e4m3
    idesc = int(m.group(1), 16) | field
    rep = check_kernel(parse(text.replace(m.group(0), f"UMOV zero_idesc.1, {idesc:#x}")), None, values=True,
                       expect=G.FAMILY.expectation(prob))
    assert rep.messages(10)[:2] == [f"CTA {c} warp 1: UTCQMMA.2CTA has instruction descriptor {idesc:#x}, whose A / B formats "
                                    f"({codes}) are not e4m3 (0) or e5m2 (1) (4 times)" for c in (0, 6)]
    assert rep.problems.count("protocol") == 2 and rep.values_wrong > 0
