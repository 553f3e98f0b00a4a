"""Three checker gaps the mutation work found (issue 24; docs/testing.md, the check-machine fifth
session): atomics that leave a polled word as it was woke its waiters (two CTAs polling one word with
atomics woke each other until the step limit's "livelock"); a global buffer whose base is not 0 (the
parser now refuses it); a staged shared buffer whose stage mode is hierarchical (refused where it is
declared, not a TypeError in the middle of a run). Each failing case sits beside a clean twin, and the
machine's whole verdict is pinned."""

from __future__ import annotations

import pytest

from tests.check.test_mutants_check_machine import PLACES_HEAD, REST_BODY, REST_HEAD, _places_body, _verdict as _check
from warpy.check import schedule
from warpy.check.machine import Machine
from warpy.check.state import EXITED
from warpy.errors import WarpyError
from warpy.isa.text import parse

POLL = "POLL:\n  LDG.E.STRONG.GPU v, desc[memdesc][p.64+0x80]\n  ISETP.EQ.U32.AND ready, PT, v, 0x0, PT\n  @ready BRA POLL\n"
# polls that read the word through an atomic that leaves it as it was: an add of 0, a compare-and-swap
# of 0 for 0, a max with 0 (each waits while the word is 0)
ADD_POLL = "POLL:\n  ATOMG.E.ADD.STRONG.GPU PT, v, desc[memdesc][p.64+0x80], RZ\n"
CAS_POLL = "POLL:\n  ATOMG.E.CAS.STRONG.GPU PT, v, [p+0x80], RZ, RZ\n"
MAX_POLL = "POLL:\n  ATOMG.E.MAX.STRONG.GPU PT, v, desc[memdesc][p.64+0x80], RZ\n"
WAIT = "  ISETP.EQ.U32.AND ready, PT, v, 0x0, PT\n  @ready BRA POLL\n"


def _verdict(m: Machine) -> dict[str, dict[str, int]]:
    return {k: dict(v) for k, v in m.problems.msgs.items() if v}


@pytest.fixture
def few_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """A livelock is reported after 20 000 warp instructions, not 50 million (the runs below need < 200)."""
    monkeypatch.setattr(schedule, "MAX_STEPS", 20_000)


@pytest.mark.parametrize("values", [False, True])
@pytest.mark.parametrize("poll", [ADD_POLL, CAS_POLL, MAX_POLL], ids=["add-0", "cas-0-0", "max-0"])
def test_two_ctas_polling_one_word_with_atomics_wait_for_the_rest_of_the_grid(few_steps: None, poll: str,
                                                                              values: bool) -> None:
    """CTAs 0 and 2 poll +0x80 with an atomic that does not change it, CTA 1 (not simulated) is to raise
    it: neither poll wakes the other, the rest of the grid raises the word once, both finish clean (with
    values, and without: the u32 buffer's words are kept)."""
    assert REST_BODY.count(POLL) == 1
    m = Machine(parse(REST_HEAD + REST_BODY.replace(POLL, poll + WAIT)), values=values)
    m.run()
    assert _verdict(m) == {}
    assert m.flags.raised_outside == 1 and m.steps < 200
    base = m.global_memory.base["buf"]
    assert {a - base: v for a, v in m.global_memory.shadow.items()} == {0x80: 1}
    assert [(w.cta.name, w.state) for w in m.warps] == [("CTA 0", EXITED), ("CTA 2", EXITED)]


@pytest.mark.parametrize("values", [False, True])
@pytest.mark.parametrize("poll", [ADD_POLL, CAS_POLL, MAX_POLL], ids=["add-0", "cas-0-0", "max-0"])
def test_an_atomic_that_changes_the_word_still_wakes_its_pollers(few_steps: None, poll: str, values: bool) -> None:
    """The clean twin: every CTA simulated, CTA 1 raises +0x80 with `REDG.ADD 1` (a change), which wakes
    the two atomic pollers; nothing is raised from outside and the run is clean."""
    m = Machine(parse(REST_HEAD + REST_BODY.replace(POLL, poll + WAIT)), values=values, all_ctas=True)
    m.run()
    assert _verdict(m) == {}
    assert m.flags.raised_outside == 0 and m.steps < 200
    assert [(w.cta.name, w.state) for w in m.warps] == [("CTA 0", EXITED), ("CTA 1", EXITED), ("CTA 2", EXITED)]


# -- a global buffer's base ------------------------------------------------------------------------------

def test_a_global_buffer_with_a_base_other_than_0_is_refused_by_the_parser() -> None:
    """A global buffer's addresses are its source's (`.param`/`.tmap`): base=0 (the builder's only
    spelling) parses and runs clean; any other base is refused in one line naming the line and column,
    not taken and then half ignored (the checker's extent checks and a source's size read from 0)."""
    decl = ".buffer words global base=0x0 size=0x100 elem=u32 source=buf layout=64:4\n"
    assert REST_HEAD.count(decl) == 1
    line = REST_HEAD[:REST_HEAD.index(decl)].count("\n") + 1
    m = Machine(parse(REST_HEAD + REST_BODY))
    m.run()
    assert _verdict(m) == {} and m.flags.raised_outside == 1
    for base in ("0x80", "0x4"):
        with pytest.raises(WarpyError) as e:
            parse(REST_HEAD.replace(decl, decl.replace("base=0x0", f"base={base}")) + REST_BODY)
        assert str(e.value) == (f"{line}:{len('.buffer words global ') + 1}: global buffer words: base={base}, "
                                f"but a global buffer starts at byte 0 of its source (buf): declare base=0x0")


# -- a staged buffer's stage mode ------------------------------------------------------------------------

SA = ".buffer sa smem base=0x400 size=0x200 elem=u32 layout=(2,4,16):(256,64,4)\n"


@pytest.mark.parametrize("layout,place", [("(2,4,16):(256,64,4)", "sa[1]"), ("(2,(2,2),16):(256,(64,128),4)", "sa[1]"),
                                          ("(2,4,16):(0,64,4)", "sa")], ids=["flat", "nested-rows", "stride-0"])
def test_a_staged_buffer_names_its_stage_by_one_stride(layout: str, place: str) -> None:
    """The clean twin: a shared buffer of rank 3 puts the stage first, with one stride (its other modes
    may nest): a race in its second stage is named `sa[1]`; with a stage stride of 0 (every stage the
    same bytes) the buffer is named alone."""
    assert PLACES_HEAD.count(SA) == 1
    head = PLACES_HEAD.replace(SA, SA.replace("(2,4,16):(256,64,4)", layout))
    assert _check(head + _places_body([], [0x500])) == {"order": {
        f"{place}: STS, warp 0 writes it and STS, warp 1 writes it, and nothing orders the two": 1}}


@pytest.mark.parametrize("layout", ["((2,1),4,16):((256,512),64,4)", "((1,2),4,16):((0,256),64,4)"])
def test_a_staged_buffer_whose_stage_mode_is_hierarchical_is_refused(layout: str) -> None:
    """A stage mode that nests (no one stride to name the stage by) is refused in one line when the
    checker reads the declarations, before it runs (it was a TypeError the first time a message named a
    place in the buffer), whether or not a message would name it."""
    head = PLACES_HEAD.replace(SA, SA.replace("(2,4,16):(256,64,4)", layout))
    want = (f"shared buffer sa: its stage mode (mode 0 of {layout}) nests, so no one stride names the "
            f"stage: declare the stages as one mode")
    for stores in ([0x500], []):
        with pytest.raises(WarpyError) as e:
            _check(head + _places_body([], stores))
        assert str(e.value) == want
