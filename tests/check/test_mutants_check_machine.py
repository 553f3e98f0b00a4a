"""Small kernels for the checker's machine parts (`warpy/check/places.py`, `global_memory.py`,
`flags.py`, `happens_before.py`, `machine.py`): each breaks one rule beside a clean twin, or names
one kind of place in a message, with the checker's whole verdict pinned (every message with its kind
and count: a corpus case matches one message, so a mutant that changes what else is reported, a
message's kind or the place it names survives it). docs/testing.md lists the mutation run these tests
answer."""

from __future__ import annotations

import numpy as np
import pytest

from tests.check.test_mutants_check import FLAG_BODY, FLAG_HEAD
from warpy.check.global_memory import GLOBAL_SPAN, GlobalMemory
from warpy.check.machine import Machine
from warpy.check.report import check_kernel
from warpy.check.state import Problems
from warpy.isa.text import parse
from warpy.layout.tma import TmaBox

Verdict = dict[str, dict[str, int]]


def _verdict(text: str, **kw: object) -> Verdict:
    rep = check_kernel(parse(text), **kw)  # type: ignore[arg-type]
    return {k: dict(v) for k, v in rep.problems.msgs.items() if v}


# -- places: what a message calls a place of shared memory ---------------------------------------------
# Two warps run the same body: each arrives once (the elected lane) on a word of every barrier buffer,
# none initialised, so each arrival is reported with the place's name; then each stores a word a lane.

PLACES_HEAD = """\
.kernel p
.sm sm_90a
.threads 64
.dynsmem 4096
.grid 1 1 1
.cluster 1 1 1
.mbarriers 20
.buffer acc_bars smem base=0x10 size=0x20 elem=mbarrier layout=(2,2):(8,16)
.buffer bars smem base=0x30 size=0x20 elem=mbarrier layout=(2,2):(8,16)
.buffer holes smem base=0x50 size=0x20 elem=mbarrier layout=2:16
.buffer nest smem base=0x80 size=0x40 elem=mbarrier layout=((2,2),2):((8,16),32)
.buffer ring_bars smem base=0xc0 size=0x10 elem=mbarrier layout=2:8
.buffer data smem base=0x200 size=0x100 elem=u32 layout=(4,16):(64,4)
.buffer sa smem base=0x400 size=0x200 elem=u32 layout=(2,4,16):(256,64,4)
.buffer sb smem base=0x800 size=0x200 elem=u32 layout=Sw<1,4,3> o (2,4,16):(256,64,4)
.reg R lane
.reg R v
.reg R addr
.reg UR smem
.reg P leader
"""


def _places_body(arrive_at: list[int], store_at: list[int]) -> str:
    lines = ["  S2R lane, SR_LANEID", "  UMOV smem, `(dsmem)", "  ELECT leader, URZ, PT"]
    lines += [f"  @leader SYNCS.ARRIVE.TRANS64.A1T0 RZ, [smem+{a:#x}], RZ" for a in arrive_at]
    lines += ["  IMAD addr, lane, 0x4, RZ", "  MOV v, 0x1"]
    lines += [f"  STS [addr+smem+{a:#x}], v" for a in store_at]
    return "\n".join(lines + ["  EXIT", ""])


def _both_warps(msgs: list[str]) -> dict[str, int]:
    return {m.format(w=w): 1 for m in msgs for w in (0, 1)}


def test_barrier_places_are_named_by_their_coordinates() -> None:
    """A pipe's barrier buffer `acc_bars[i, s]` is `acc_full[s]` (i = 0) or `acc_empty[s]`;
    another barrier buffer of rank 2 names both coordinates, found through its layout (column-major
    here: the word 8 bytes in is [1, 0]); a word between a layout's elements is named by its 8-byte
    index; a nested mode counts as one coordinate; a pipe's barriers of rank 1 are named as such."""
    body = _places_body([0x18, 0x20, 0x38, 0x68, 0xb8, 0xc8], [])
    assert _verdict(PLACES_HEAD + body) == {"protocol": _both_warps([
        "CTA 0 warp {w} arrives on acc_empty[0], which is not initialised",
        "CTA 0 warp {w} arrives on acc_full[1], which is not initialised",
        "CTA 0 warp {w} arrives on bars[1, 0], which is not initialised",
        "CTA 0 warp {w} arrives on holes[3], which is not initialised",
        "CTA 0 warp {w} arrives on nest[3, 1], which is not initialised",
        "CTA 0 warp {w} arrives on ring_bars[1], which is not initialised"])}


def test_a_barrier_address_must_be_an_aligned_word_of_a_barrier_buffer() -> None:
    """Shared memory in no buffer (0xd0: one past a barrier buffer's end), in a buffer of another
    element, or 4 bytes into a barrier: each
    refused (kind "memory"), and nothing is arrived on."""
    body = _places_body([0x100, 0x208, 0x14, 0xd0], [])
    assert _verdict(PLACES_HEAD + body) == {"memory": _both_warps([
        "CTA 0 warp {w}: SYNCS.ARRIVE.TRANS64.A1T0 uses shared 0x500 as an mbarrier, which no mbarrier buffer declares",
        "CTA 0 warp {w}: SYNCS.ARRIVE.TRANS64.A1T0 uses shared 0x608 as an mbarrier, which no mbarrier buffer declares",
        "CTA 0 warp {w}: SYNCS.ARRIVE.TRANS64.A1T0 uses shared 0x414 as an mbarrier, which is not 8-byte aligned",
        "CTA 0 warp {w}: SYNCS.ARRIVE.TRANS64.A1T0 uses shared 0x4d0 as an mbarrier, which no mbarrier buffer declares"])}


def test_shared_accesses_stay_inside_a_buffer() -> None:
    """A store ending exactly at a buffer's end is inside it; one in the gap below a buffer, or across
    its end, is refused (and not recorded: the two warps' stores there are no race)."""
    assert _verdict(PLACES_HEAD + _places_body([], [0x280])) == {
        "order": {"data: STS, warp 0 writes it and STS, warp 1 writes it, and nothing orders the two": 1}}
    assert _verdict(PLACES_HEAD + _places_body([], [0x180, 0x2c0])) == {"memory": _both_warps([
        "CTA 0 warp {w}: STS touches shared 0x580..0x600, outside every shared buffer the kernel declares",
        "CTA 0 warp {w}: STS touches shared 0x6c0..0x740, outside every shared buffer the kernel declares"])}


def test_a_staged_buffer_names_the_stage() -> None:
    """A buffer of rank 3 or more puts the stage first: a race in its second stage names `sa[1]`,
    swizzled or not; a rank-2 buffer is named alone."""
    assert _verdict(PLACES_HEAD + _places_body([], [0x500, 0x900])) == {"order": {
        "sa[1]: STS, warp 0 writes it and STS, warp 1 writes it, and nothing orders the two": 1,
        "sb[1]: STS, warp 0 writes it and STS, warp 1 writes it, and nothing orders the two": 1}}


# -- global memory: sources, maps over other parameters, tables of maps, the bytes with values ---------


GLOBAL_HEAD = """\
.kernel g
.sm sm_90a
.threads 32
.dynsmem 256
.grid 1 1 1
.cluster 1 1 1
.mbarriers 0
.tmap a dtype=fp32 dims=16,8 strides=64 box=16,8
.tmap col dtype=bf16 dims=64,4,2 strides=256,128 box=64,4,2
.tmap v dtype=fp32 dims=100 strides= box=100
.tmap pitched dtype=fp32 dims=16,8 strides=128 box=16,8
.param c u64
.tmap c_tail over=c offset=256 dtype=fp32 dims=16,4 strides=64 box=16,4
.tmap c_far over=c_tail offset=64 dtype=fp32 dims=16,4 strides=64 box=16,4
.param flags u64
.param n u32
.param tab u64
.param signed s64
.tmap s0 table=tab slot=0 dtype=fp32 dims=16 strides= box=16
.tmap s2 table=tab slot=2 dtype=fp32 dims=16 strides= box=16
.buffer c_out global base=0x0 size=0x200 elem=fp32 source=c layout=(8,16):(64,4)
.buffer c_head global base=0x0 size=0x100 elem=s32 source=c layout=64:4
.buffer flag_words global base=0x0 size=0x40 elem=s32 source=flags layout=16:4
.buffer stage smem base=0x0 size=0x100 elem=u32 layout=64:4
"""


class _Inputs:
    """An expectation that fills `a` with 0..127 and the flag words with 7, 0, 9, 0, ..., 0, 4; the rest zeros."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, object, int]] = []

    def initial(self, source: str, box: object, nbytes: int, rng: np.random.Generator) -> object:
        self.asked.append((source, box, nbytes))
        if source == "a":
            return np.arange(nbytes // 4, dtype=np.float32)
        if source == "flags":
            return np.array([7, 0, 9] + [0] * (nbytes // 4 - 4) + [4], dtype=np.uint32)
        return None

    def compare(self, run: object) -> object:
        raise AssertionError("not compared here")


def _gm(values: bool, expect: object = None) -> tuple[GlobalMemory, Problems]:
    p = Problems()
    g = GlobalMemory(parse(GLOBAL_HEAD + "  EXIT\n").header, p, values, expect, np.random.default_rng(0))  # type: ignore[arg-type]
    return g, p


def test_global_sources_and_maps_over_a_parameter() -> None:
    """Each map and pointer parameter at (i + 1) << 40, maps first (a map over another keeps its number
    unused); a map over a map over `c` is `c`'s memory at the sum of the offsets; one that runs past
    what is declared behind `c` is reported (c_tail ends exactly at c's 512 bytes: not reported)."""
    g, p = _gm(False)
    S = GLOBAL_SPAN
    assert g.base == {"a": S, "col": 2 * S, "v": 3 * S, "pitched": 4 * S, "s0": 7 * S, "s2": 8 * S, "c": 9 * S,
                      "flags": 10 * S, "tab": 11 * S, "signed": 12 * S, "c_tail": 9 * S + 256, "c_far": 9 * S + 320}
    assert g.params == {"c": 9 * S, "flags": 10 * S, "n": 1, "tab": 11 * S, "signed": 12 * S}
    assert (g.alias, g.offset) == ({"c_tail": "c", "c_far": "c"}, {"c_tail": 256, "c_far": 320})
    assert p.msgs["memory"] == {"tensor map c_far spans 256 bytes from byte 320 of c, past its 512 declared bytes": 1}
    assert p.total() == 1
    assert g.source(9 * S + 300) == ("c", 300) and g.source(S + 4) == ("a", 4) and g.source(13 * S) == (None, 13 * S)
    assert g.declared == {"c", "flags", "a", "col", "v", "pitched", "c_tail", "c_far", "s0", "s2"}


def test_the_bytes_of_each_source_with_values() -> None:
    """A map's bytes run to its last element (a 3-D map whose columns step less than its rows: 1024
    bytes, not 256), or to the end of its last row's pitch (`pitched`: 8 rows of 128 bytes); a pointer's
    at least 64 KiB, or what the expectation gives; a map over a parameter is a view of its memory, and
    so are its written and reduced marks; the expectation is asked once a source or map, with its box."""
    inputs = _Inputs()
    g, _ = _gm(True, inputs)
    assert {k: v.size for k, v in g.gmem.items()} == {
        "a": 512, "col": 1024, "v": 400, "pitched": 1024, "s0": 64, "s2": 64, "c": 65536, "flags": 64, "tab": 65536,
        "signed": 65536, "c_tail": 65536 - 256, "c_far": 65536 - 320}
    assert all(g.gwritten[k].size == v.size and g.greduced[k].size == v.size and v.dtype == np.uint8
               and g.gwritten[k].dtype == bool and g.greduced[k].dtype == bool for k, v in g.gmem.items())
    assert g.gmem["a"].view(np.float32).tolist() == list(range(128))
    assert g.gmem["flags"].view(np.uint32).tolist() == [7, 0, 9] + [0] * 12 + [4]
    assert not g.gmem["col"].any()
    g.gmem["c_far"][0] = 5
    g.gwritten["c_tail"][64] = True
    g.greduced["c_far"][1] = True
    assert g.gmem["c"][320] == 5 and g.gwritten["c"][320] and g.greduced["c"][321] and g.greduced["c_tail"][65]
    asked = {s: (box, n) for s, box, n in inputs.asked}
    assert sorted(asked) == ["a", "c", "c_far", "c_tail", "col", "flags", "pitched", "s0", "s2", "v"]
    assert len(inputs.asked) == 10  # (not `signed`: no buffer declared behind it, zeros)
    assert asked["a"] == (g.tmaps["a"], 512) and asked["c"] == (None, 512) and asked["flags"] == (None, 64)
    assert isinstance(asked["col"][0], TmaBox) and asked["col"][1] == 1024


def test_without_values_the_flag_words_are_kept() -> None:
    """Without values only the u32/s32 words behind pointers are kept, the nonzero ones the
    expectation gives (flags at 0, 8 and 60; `c`'s s32 words: none); nothing else is asked."""
    inputs = _Inputs()
    g, _ = _gm(False, inputs)
    base = g.base["flags"]
    assert g.shadow == {base: 7, base + 8: 9, base + 60: 4} and g.gmem == {}
    assert inputs.asked == [("c", None, 512), ("flags", None, 64)]
    assert _gm(False)[0].shadow == {}


def test_a_word_written_from_outside() -> None:
    """The rest of the grid raises a flag: the word is kept, and with values its bytes are written (not
    past the end of the source's memory)."""
    g, _ = _gm(True)
    base = g.base["flags"]
    g.write_word(base, 0x0a)
    g.write_word(base + 8, 0x01020304)
    g.write_word(base + 65532, 0x0b)  # the last word kept
    g.write_word(base + 65536, 9)  # past the 64 KiB kept: only the word
    g.write_word(20 * GLOBAL_SPAN, 3)  # no source
    assert g.gmem["flags"][8:12].tolist() == [4, 3, 2, 1] and g.gmem["flags"][0] == 10 and g.gmem["flags"][65532] == 11
    assert g.gmem["flags"].sum() == 31
    assert g.shadow == {base: 10, base + 8: 0x01020304, base + 65532: 11, base + 65536: 9, 20 * GLOBAL_SPAN: 3}
    h, _ = _gm(False)
    h.write_word(base + 4, 6)
    assert h.shadow == {base + 4: 6} and h.gmem == {}


def test_table_slots() -> None:
    """A descriptor named by its address: slot k of a table at table + 128 k; anything else says why."""
    g, _ = _gm(False)
    t = g.params["tab"]
    assert g.slot_at(t) == ("s0", "tab slot 0") and g.slot_at(t + 256) == ("s2", "tab slot 2")
    assert g.slot_at(t + 128) == (None, "tab+0x80, no slot of its table (slots at tab + 0x80 k, k < 3)")
    assert g.slot_at(t + 8) == (None, "tab+0x8, no slot of its table (slots at tab + 0x80 k, k < 3)")
    assert g.slot_at(t - 128) == (None, f"0x{t - 128:x}, which is in no table of tensor maps")
    assert g.slot_at(t + GLOBAL_SPAN) == (None, f"0x{t + GLOBAL_SPAN:x}, which is in no table of tensor maps")
    assert (g.table_slot("s2"), g.table_slot("a")) == ("tab", None)


def test_which_maps_the_launch_may_write() -> None:
    g, _ = _gm(False)
    assert g.may_be_written("a") and g.may_be_written("v")  # no store seen yet: any may be
    g.stored_maps = {"a"}
    assert g.may_be_written("a") and not g.may_be_written("v") and g.may_be_written("c_tail")
    g.stored_maps = set()
    assert not g.may_be_written("a") and g.may_be_written("c_far")


def test_global_buffers() -> None:
    """`buffer_of`: the declared buffer behind a source holding the whole range, ends included."""
    g, _ = _gm(False)
    assert g.buffer_of("c", 0, 0x200) is not None and g.buffer_of("c", 0x1fc, 0x200) is not None
    assert g.buffer_of("c", 0x1fc, 0x201) is None and g.buffer_of("c", -4, 4) is None
    flags = g.buffer_of("flags", 0, 0x40)
    assert flags is not None and flags.name == "flag_words" and g.buffer_of("tab", 0, 4) is None


# -- global accesses: inside declared buffers, after the dependent-launch wait, GPU-scope atomics --------

GACCESS_HEAD = FLAG_HEAD.replace(".threads 32", ".threads 64").replace(".grid 2 1 1", ".grid 1 1 1").replace(
    ".param buf u64", ".param buf u64\n.param raw u64").replace(".reg P ready", ".reg P ready\n.reg P hi")

# warp 0 reads a word a lane before the dependent-launch wait, stores the buffer's last byte, reads
# through `raw` (a pointer with no buffer declared: unchecked); warp 1 adds to the same words with
# GPU-scope atomics (no data race), stores the last byte too, and stores: one lane just past the buffer,
# every lane across the buffer's end, across the end of `buf`'s memory into `raw`'s, past every source,
# and into `raw`.
GACCESS = """\
  S2R ctaid, SR_TID.X
  S2R lane, SR_LANEID
  ULDC.64 memdesc, c[0x0][0x208]
  LDC.64 p, c[0x0][buf]
  IMAD.WIDE.U32 q, lane, 0x4, p
  ISETP.LT.U32.AND c0, PT, ctaid, 0x20, PT
  ISETP.GE.U32.AND hi, PT, lane, 0x10, PT
  MOV one, 0x1
  @c0 BRA READER
  ACQBULK
  ELECT leader, URZ, PT
  @leader STG.E desc[memdesc][p.64+0x100], one
  ATOMG.E.ADD.STRONG.GPU PT, v, desc[memdesc][q.64], one
  STG.E.U8 desc[memdesc][p.64+0xff], one
  STG.E desc[memdesc][q.64+0xf0], one
  @hi IADD3 q.1, q.1, 0x100, RZ
  STG.E desc[memdesc][q.64], one
  @hi IADD3 q.1, q.1, 0x1000, RZ
  STG.E desc[memdesc][q.64], one
  IADD3 q.1, q.1, 0x1000, RZ
  STG.E desc[memdesc][q.64], one
  LDC.64 p, c[0x0][raw]
  STG.E desc[memdesc][p.64+0x1000], one
  EXIT
READER:
  LDG.E v, desc[memdesc][q.64]
  ACQBULK
  STG.E.U8 desc[memdesc][p.64+0xff], one
  LDC.64 p, c[0x0][raw]
  LDG.E v, desc[memdesc][p.64+0x1000]
  EXIT
"""


def test_global_accesses() -> None:
    outside = "CTA 0 warp 1: STG.E touches global {}, outside every global buffer the kernel declares"
    assert _verdict(GACCESS_HEAD + GACCESS) == {
        "memory": {outside.format(w): 1 for w in ("buf+0x100..+0x4", "buf+0xf0..+0x80", "buf+0x0..+0x10000000080",
                                                  "buf+0x0..+0x110000000080",
                                                  "0x110000000000..+0x110000000080")},
        "order": {"words: STG.E.U8, warp 0 writes it and STG.E.U8, warp 1 writes it, and nothing orders the two": 1,
                  "raw: LDG.E, warp 0 reads it and STG.E, warp 1 writes it, and nothing orders the two": 1},
        "pdl": {"CTA 0 warp 0: LDG.E reaches global memory before the dependent-launch wait (ACQBULK)": 1}}
    # without a dependent-launch wait in the kernel, nothing is "before" it
    no_wait = GACCESS.replace("  ACQBULK\n", "")
    assert "pdl" not in _verdict(GACCESS_HEAD + no_wait)


# -- flags raised by the rest of the grid ----------------------------------------------------------------
# Three CTAs: the checker simulates the first and the last (0 and 2), which poll the flag; CTA 1, not
# simulated, raises it: the rest of the grid writes each polled word a value that lets its loop exit.

REST_BODY = FLAG_BODY.replace("ISETP.EQ.U32.AND c0, PT, ctaid, 0x0, PT\n  @c0 BRA READER",
                              "ISETP.EQ.U32.AND c0, PT, ctaid, 0x1, PT\n  @!c0 BRA READER")
REST_HEAD = FLAG_HEAD.replace(".grid 2 1 1", ".grid 3 1 1")


@pytest.mark.parametrize("poll,want", [("ISETP.EQ.U32.AND ready, PT, v, 0x0, PT", 1),  # waits while 0
                                       ("ISETP.NE.U32.AND ready, PT, v, 0x5, PT", 5),  # waits for 5
                                       ("ISETP.LT.U32.AND ready, PT, v, 0x9, PT", 9)])  # waits while below 9
def test_the_rest_of_the_grid_raises_a_flag(poll: str, want: int) -> None:
    body = REST_BODY.replace("ISETP.EQ.U32.AND ready, PT, v, 0x0, PT", poll)
    m = Machine(parse(REST_HEAD + body))
    m.run()
    flag = m.global_memory.base["buf"] + 0x80
    assert m.problems.total() == 0
    assert m.flags.raised_outside == 1 and m.global_memory.shadow == {flag: want}
    assert [w.cta.name for w in m.warps] == ["CTA 0", "CTA 2"]


# -- the machine's options -------------------------------------------------------------------------------

def test_which_ctas_run() -> None:
    """By default the first and last clusters (CTA 1 is the rest of the grid); every CTA with
    `all_ctas` (CTA 1 then raises the flag itself); chosen clusters only with `chosen`. The hb table
    is kept only when asked for."""
    m = Machine(parse(REST_HEAD + REST_BODY))
    m.run()
    assert m.order.table == {} and not m.launch.whole and m.gmem == {}
    every = Machine(parse(REST_HEAD + REST_BODY), all_ctas=True, hb=True)
    every.run()
    assert [w.cta.name for w in every.warps] == ["CTA 0", "CTA 1", "CTA 2"] and every.launch.whole
    assert every.flags.raised_outside == 0 and every.problems.total() == 0
    assert every.order.table == {("words", "STG.E", 0, "LDG.E", 0, " of another CTA", "GPU-scope flag", "w", "r"): 2}
    one = Machine(parse(REST_HEAD + REST_BODY), chosen=[1])
    one.run()
    assert [w.cta.name for w in one.warps] == ["CTA 1"] and one.problems.total() == 0


STORE_HEAD = FLAG_HEAD.replace(".grid 2 1 1", ".grid 1 1 1").replace(
    ".param buf u64", ".param buf u64\n.param flags u64 scratch").replace(
    ".buffer words", ".buffer flag_words global base=0x0 size=0x10 elem=u32 source=flags layout=4:4\n.buffer words")
STORE = """\
  S2R lane, SR_LANEID
  ULDC.64 memdesc, c[0x0][0x208]
  LDC.64 p, c[0x0][buf]
  IMAD.WIDE.U32 q, lane, 0x4, p
  IADD3 v, lane, 0x3, RZ
  STG.E desc[memdesc][q.64], v
  EXIT
"""


class _Drawn:
    """Inputs drawn from the machine's generator."""

    def initial(self, source: str, box: object, nbytes: int, rng: np.random.Generator) -> object:
        return rng.integers(0, 1 << 30, nbytes // 4, dtype=np.uint32)

    def compare(self, run: object) -> object:
        raise AssertionError("not compared here")


def test_values_scratch_and_the_inputs_seed() -> None:
    """With values the stores land in global memory (and are marked written); scratch words given at
    launch are kept and handed back (those of scratch parameters only); the inputs are drawn from
    the seed: the same seed, the same inputs."""
    k = parse(STORE_HEAD + STORE)
    m = Machine(k, values=True, scratch={0x2 << 40: 7, (0x2 << 40) + 12: 9, (0x1 << 40) + 0x200: 5})
    m.run()
    assert m.problems.total() == 0
    assert m.gmem["buf"][:128].view(np.uint32).tolist() == list(range(3, 35)) and m.gwritten["buf"][:128].all()
    assert not m.gwritten["buf"][128:].any()
    assert m.scratch_words() == {0x2 << 40: 7, (0x2 << 40) + 12: 9}
    assert m.gmem["flags"][:16].view(np.uint32).tolist() == [7, 0, 0, 9]
    assert m.global_memory.shadow[(0x1 << 40) + 0x200] == 5
    a, b, c = (Machine(k, values=True, expect=_Drawn(), seed=s) for s in (3, 3, 4))  # type: ignore[arg-type]
    assert (a.gmem["buf"] == b.gmem["buf"]).all() and not (a.gmem["buf"] == c.gmem["buf"]).all()
    assert Machine(k).gmem == {}
    # without values the flag words are still drawn from the seed
    d, e = (Machine(k, expect=_Drawn(), seed=3) for _ in range(2))  # type: ignore[arg-type]
    assert len(d.global_memory.shadow) == 64 + 4 and d.global_memory.shadow == e.global_memory.shadow  # words, flag_words
    assert check_kernel(k).stores == 1


def test_header_and_map_problems_are_reported() -> None:
    """The header's check and the global memory's (a map past its parameter) report through the run."""
    assert _verdict(PLACES_HEAD.replace(".dynsmem 4096", ".dynsmem 2048") + "  EXIT\n") == {"memory": {
        ".dynsmem 2048 is smaller than the shared buffers: sb ends at byte 2560 of the dynamic shared memory": 1}}
    assert _verdict(GLOBAL_HEAD + "  EXIT\n") == {"memory": {
        "tensor map c_far spans 256 bytes from byte 320 of c, past its 512 declared bytes": 1}}


def test_a_flag_left_raised_by_an_earlier_launch() -> None:
    """The flag (here at +0x84) lives in scratch memory; CTA 0 stores the words and raises it, CTA 1
    polls it. Left at 1 by an earlier launch, CTA 1's poll may pass on that stale value, before CTA 0
    raised it: it acquires nothing, and its read is unordered with CTA 0's store. A word beside the
    flag left raised changes nothing; the words the launch leaves are handed back."""
    body = FLAG_BODY.replace("@c0 BRA READER", "@!c0 BRA READER").replace("p.64+0x80", "p.64+0x84")
    k = parse(FLAG_HEAD.replace(".param buf u64", ".param buf u64 scratch") + body)
    flag = (1 << 40) + 0x84
    words = {(1 << 40) + 4 * i: 5 for i in range(32)}
    race = {"order": {"words: STG.E, warp 0 writes it and LDG.E, warp 0 reads it, and nothing orders the two": 1}}
    for scratch, want, left in [({}, {}, {flag: 1}), ({flag - 4: 1}, {}, {flag: 1, flag - 4: 1}),
                                ({flag + 4: 1}, {}, {flag: 1, flag + 4: 1}),
                                ({flag: 1}, race, {flag: 2}), ({flag: 3}, race, {flag: 4})]:
        m = Machine(k, scratch=scratch)
        m.run()
        assert {a: dict(b) for a, b in m.problems.msgs.items() if b} == want
        assert m.scratch_words() == {**words, **left}


def test_a_poll_through_the_read_only_path_is_weak() -> None:
    body = FLAG_BODY.replace("LDG.E.STRONG.GPU v", "LDG.E.CONSTANT v")
    assert _verdict(FLAG_HEAD + body) == {
        "protocol": {"line 15 (LDG.E.CONSTANT): a loop waits on the word it loads from global memory, through a weak load: "
                     "it may read a stale value forever (poll with LDG.E.STRONG.GPU, a relaxed GPU-scope load)": 1},
        "order": {"words: STG.E, warp 0 writes it and LDG.E, warp 0 reads it, and nothing orders the two": 1}}


# -- happens-before regions: 16 KiB chunks, byte masks ---------------------------------------------------
# Two warps store a word (or a byte) a lane; `big`'s layout names each byte (a "stage" of one byte), so
# a message says exactly which byte the two accesses share first.

CHUNK_HEAD = """\
.kernel c
.sm sm_90a
.threads 64
.dynsmem 40960
.grid 1 1 1
.cluster 1 1 1
.mbarriers 0
.buffer big smem base=0x0 size=0x8000 elem=u8 layout=(32768,1,1):(1,1,1)
.reg R tid
.reg R lane
.reg R v
.reg R addr
.reg UR smem
.reg P w0
"""


def _two_warps(a0: int, a1: int, op: str = "STS", step: int = 4) -> str:
    return (f"  S2R tid, SR_TID.X\n  S2R lane, SR_LANEID\n  UMOV smem, `(dsmem)\n  ISETP.LT.U32.AND w0, PT, tid, 0x20, PT\n"
            f"  IMAD addr, lane, {step:#x}, RZ\n  MOV v, 0x1\n  @!w0 BRA W1\n  {op} [addr+smem+{a0:#x}], v\n  EXIT\n"
            f"W1:\n  {op} [addr+smem+{a1:#x}], v\n  EXIT\n")


def _race(byte: int, op: str = "STS") -> Verdict:
    return {"order": {f"big[{byte}]: {op}, warp 0 writes it and {op}, warp 1 writes it, and nothing orders the two": 1}}


@pytest.mark.parametrize("a0,a1,op,step,want", [
    (0x3fc0, 0x4000, "STS", 4, _race(0x4000)),  # warp 0's stores cross into the second chunk, where warp 1's are
    (0x3fc0, 0x4040, "STS", 4, {}),  # neighbours across the chunk boundary
    (0x3fc0, 0x3f40, "STS", 4, {}),
    (0x4011, 0x4011, "STS.U8", 2, _race(0x4011, "STS.U8")),
    (0x10, 0x11, "STS.U8", 2, {}),  # neighbouring bytes of one word
    (0x10, 0x10, "STS.U8", 2, _race(0x10, "STS.U8"))])
def test_regions_are_chunks_of_bytes(a0: int, a1: int, op: str, step: int, want: Verdict) -> None:
    assert _verdict(CHUNK_HEAD + _two_warps(a0, a1, op, step)) == want


# -- which loops wait on a flag --------------------------------------------------------------------------
# CTA 1 stores the words and raises the flag (+0x84); CTA 0 first runs three loops that are not wait
# loops (one counts, one stores, one sums a word it loads with a count for its exit: none hangs, none
# stops the search for the next), then polls the flag (with a back-off, exiting by a forward branch),
# stores right after the loop, acquires and reads the words. With a weak poll the loop is still found.

LOOPS_HEAD = FLAG_HEAD + ".reg R k\n.reg R acc\n.reg R w2\n.reg P more\n"
LOOPS = """\
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
  @leader REDG.E.ADD.STRONG.GPU desc[memdesc][p.64+0x84], one
  EXIT
READER:
  MOV k, RZ
COUNT:
  IADD3 k, k, 0x1, RZ
  ISETP.LT.U32.AND more, PT, k, 0x2, PT
  @more BRA COUNT
  MOV k, RZ
STORES:
  STG.E desc[memdesc][p.64+0xe0], k
  IADD3 k, k, 0x1, RZ
  ISETP.LT.U32.AND more, PT, k, 0x2, PT
  @more BRA STORES
  MOV k, RZ
  MOV acc, RZ
SUM:
  LDG.E.STRONG.GPU w2, desc[memdesc][p.64+0xc0]
  IADD3 acc, acc, w2, RZ
  IADD3 k, k, 0x1, RZ
  ISETP.LT.U32.AND more, PT, k, 0x2, PT
  @more BRA SUM
POLL:
  LDG.E v, desc[memdesc][p.64+0x84]
  ISETP.NE.U32.AND ready, PT, v, 0x0, PT
  @ready BRA OUT
  NANOSLEEP 0x20
  BRA POLL
OUT:
  STG.E desc[memdesc][p.64+0xc4], acc
  MEMBAR.ALL.GPU
  LDG.E v, desc[memdesc][q.64]
  EXIT
"""


def test_which_loops_wait_on_a_flag() -> None:
    strong = LOOPS.replace("LDG.E v, desc[memdesc][p.64+0x84]", "LDG.E.STRONG.GPU v, desc[memdesc][p.64+0x84]")
    assert _verdict(LOOPS_HEAD + strong) == {}
    assert _verdict(LOOPS_HEAD + LOOPS) == {
        "protocol": {"line 31 (LDG.E): a loop waits on the word it loads from global memory, through a weak load: it may "
                     "read a stale value forever (poll with LDG.E.STRONG.GPU, a relaxed GPU-scope load)": 1},
        "order": {"words: STG.E, warp 0 writes it and LDG.E, warp 0 reads it, and nothing orders the two": 1}}


def test_a_flag_raised_by_a_wide_store_and_one_raised_twice() -> None:
    """The flag is the upper half of a 64-bit store (a write wakes the waiters of every word it
    covers); then a flag the writer raises twice, the reader waiting for 2."""
    head = FLAG_HEAD + ".reg R[2] two\n"
    wide = FLAG_BODY.replace("  @leader REDG.E.ADD.STRONG.GPU desc[memdesc][p.64+0x80], one\n",
                             "  MOV two.0, RZ\n  MOV two.1, 0x1\n  @leader STG.E.64.STRONG.GPU desc[memdesc][p.64+0x80], two\n"
                             ).replace("[p.64+0x80]\n  ISETP", "[p.64+0x84]\n  ISETP")
    assert wide.count("p.64+0x84") == 1
    # the waiter wakes and reads 1, and the release covers the upper word it polls: nothing to report,
    # with values or without (the words kept of a u32 buffer follow every 32-bit word of a wider store);
    # the same with the flag in the lower word
    low = wide.replace("[p.64+0x84]\n  ISETP", "[p.64+0x80]\n  ISETP").replace(
        "MOV two.0, RZ\n  MOV two.1, 0x1", "MOV two.0, 0x1\n  MOV two.1, RZ")
    assert low.count("p.64+0x80") == 2
    for text in (wide, low):
        assert _verdict(head + text) == {} and _verdict(head + text, values=True) == {}
    twice = FLAG_BODY.replace("  @leader REDG.E.ADD.STRONG.GPU desc[memdesc][p.64+0x80], one\n",
                              "  @leader REDG.E.ADD.STRONG.GPU desc[memdesc][p.64+0x80], one\n" * 2).replace(
        "ISETP.EQ.U32.AND ready, PT, v, 0x0, PT", "ISETP.NE.U32.AND ready, PT, v, 0x2, PT")
    assert _verdict(FLAG_HEAD + twice) == {}
    once = twice.replace("  @leader REDG.E.ADD.STRONG.GPU desc[memdesc][p.64+0x80], one\n" * 2,
                         "  @leader REDG.E.ADD.STRONG.GPU desc[memdesc][p.64+0x80], one\n")
    assert _verdict(FLAG_HEAD + once) == {"protocol": {
        "hang: CTA 0 warp 0 waits on words+0x80 (the loop ending at line 17 polls it and nothing writes it)": 1}}


def test_two_waiters_on_two_flags() -> None:
    """Every CTA simulated: CTAs 0 and 1 wait on flags +0x80 and +0x84, CTA 2 raises one, then the
    other: the first write wakes CTA 0 only, and CTA 1 stays a waiter until the second."""
    body = REST_BODY.replace("ISETP.EQ.U32.AND c0, PT, ctaid, 0x1, PT", "ISETP.EQ.U32.AND c0, PT, ctaid, 0x2, PT").replace(
        "  @leader REDG.E.ADD.STRONG.GPU desc[memdesc][p.64+0x80], one\n",
        "  @leader REDG.E.ADD.STRONG.GPU desc[memdesc][p.64+0x80], one\n"
        "  @leader REDG.E.ADD.STRONG.GPU desc[memdesc][p.64+0x84], one\n").replace(
        "READER:\nPOLL:\n  LDG.E.STRONG.GPU v, desc[memdesc][p.64+0x80]",
        "READER:\n  IMAD.WIDE.U32 f, ctaid, 0x4, p\nPOLL:\n  LDG.E.STRONG.GPU v, desc[memdesc][f.64+0x80]")
    m = Machine(parse(REST_HEAD + ".reg R[2] f\n" + body), all_ctas=True)
    m.run()
    flag = m.global_memory.base["buf"] + 0x80
    assert m.problems.total() == 0 and m.flags.version == {flag: 1, flag + 4: 1} and m.flags.waiters == []


def test_a_3d_map_whose_outer_step_is_the_widest() -> None:
    """2 planes 1024 bytes apart of 8 rows 64 bytes apart: the map's memory is its outer pitch times its
    outer extent, 2048 bytes (its last element ends at 1536)."""
    head = GLOBAL_HEAD.split(".tmap a ")[0] + ".tmap m3 dtype=fp32 dims=16,8,2 strides=64,1024 box=16,8,2\n"
    g = GlobalMemory(parse(head + "  EXIT\n").header, Problems(), True, None, np.random.default_rng(0))
    assert {k: v.size for k, v in g.gmem.items()} == {"m3": 2048}


def test_an_access_ending_at_its_source_s_end() -> None:
    """A buffer as large as a source's span (2^40 bytes): a word ending exactly at its end is inside it;
    one a byte further crosses into the next source and is refused."""
    head = FLAG_HEAD.replace(
        ".buffer words global base=0x0 size=0x100 elem=u32 source=buf layout=64:4",
        ".param next u64\n.buffer words global base=0x0 size=0x10000000000 elem=u32 source=buf layout=274877906944:4\n"
        ".buffer more global base=0x0 size=0x100 elem=u32 source=next layout=64:4")
    m = Machine(parse(head + "  EXIT\n"))
    gm, w, c = m.global_memory, m.warps[0], m.code.instrs[0]
    assert gm.base == {"buf": GLOBAL_SPAN, "next": 2 * GLOBAL_SPAN}
    assert [gm.check(w, c, np.array([a]), 4) for a in (2 * GLOBAL_SPAN - 4, 2 * GLOBAL_SPAN - 3, 2 * GLOBAL_SPAN)] == \
        ["buf", None, "next"]
    assert m.problems.msgs["memory"] == {
        "CTA 0 warp 0: EXIT touches global buf+0xfffffffffd..+0x4, outside every global buffer the kernel declares": 1}
