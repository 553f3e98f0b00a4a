"""Wait loops on global memory whose flag the rest of the grid raises (issue 24's check-machine mutation
group, fifth session): the value the unsimulated CTAs write is found by running the loop's body on a copy
of the waiter's registers with candidates taken from what the body compares with (each, its negation,
one more and one less; then 0 and 1). Each loop below exits on exactly one kind of candidate, and the
value raised is pinned. docs/testing.md lists the mutation run these tests answer."""

from __future__ import annotations

import pytest

from tests.check.test_mutants_check import FLAG_BODY, FLAG_HEAD
from tests.check.test_mutants_check_machine import REST_BODY, REST_HEAD
from warpy.check.machine import Machine
from warpy.check.report import check_kernel
from warpy.check.state import BLOCKED, EXITED
from warpy.isa.text import parse

POLL = "POLL:\n  LDG.E.STRONG.GPU v, desc[memdesc][p.64+0x80]\n  ISETP.EQ.U32.AND ready, PT, v, 0x0, PT\n  @ready BRA POLL\n"
LOAD = "POLL:\n  LDG.E.STRONG.GPU v, desc[memdesc][p.64+0x80]\n"
HEAD = REST_HEAD + ".reg R t\n.reg UR uv\n.reg UP up\n.reg R target\n.reg P c2\n"


def _raised(loop: str, before: str = "", one_waiter: bool = False) -> dict[int, int]:
    """CTAs 0 and 2 wait (CTA 2 exits at once with `one_waiter`), CTA 1 is not simulated: the words the
    rest of the grid raised, by their offset in the buffer."""
    assert REST_BODY.count(POLL) == 1
    body = REST_BODY.replace(POLL, loop).replace("READER:\n", "READER:\n" + before)
    if one_waiter:
        body = body.replace("READER:\n", "READER:\n  ISETP.EQ.U32.AND c2, PT, ctaid, 0x2, PT\n  @c2 EXIT\n")
    m = Machine(parse(HEAD + body))
    m.run()
    assert m.problems.total() == 0, m.problems.msgs
    assert [w.cta.name for w in m.warps] == ["CTA 0", "CTA 2"]
    base = m.global_memory.base["buf"]
    assert m.flags.raised_outside == 1  # (two waiters on one word: one write wakes both)
    assert all(w.state == EXITED for w in m.warps)
    return {a - base: v for a, v in m.global_memory.shadow.items()}


@pytest.mark.parametrize("name,loop,before,want", [
    # a uniform branch back (`BRA.U`: its predicate an operand) on the poll's value moved to a uniform register
    ("uniform", LOAD + "  R2UR uv, v\n  UISETP.EQ.U32.AND up, UPT, uv, 0x0, UPT\n  BRA.U up, POLL\n", "", 1),
    # exits when v + 5 == 0: the negation of a value the body adds
    ("negation", LOAD + "  IADD3 t, v, 0x5, RZ\n  ISETP.NE.U32.AND ready, PT, t, RZ, PT\n  @ready BRA POLL\n", "", 0xfffffffb),
    # waits while v == 0 or v >= 9: 9 and 10 do not exit, 8 (one less) does
    ("one-less", LOAD + "  ISETP.GE.U32.AND ready, PT, v, 0x9, PT\n  ISETP.EQ.U32.OR ready, PT, v, RZ, ready\n"
                        "  @ready BRA POLL\n", "", 8),
    # compares with a register set before the loop
    ("register", LOAD + "  ISETP.NE.U32.AND ready, PT, v, target, PT\n  @ready BRA POLL\n", "  MOV target, 0x5\n", 5),
    # a back-off in the body (its 0x20 is no candidate: it does not use the polled value)
    ("back-off", LOAD + "  NANOSLEEP 0x20\n  ISETP.LT.U32.AND ready, PT, v, 0x9, PT\n  @ready BRA POLL\n", "", 9),
    # a special register read in the body (the body runs on a copy of the waiter's registers, the same
    # CTA and warp index)
    ("special-register", LOAD + "  S2R t, SR_TID.X\n  ISETP.NE.U32.AND ready, PT, v, 0x7, PT\n  @ready BRA POLL\n", "", 7),
    # a branch inside the body, not taken for 3: the add after it runs and 3 exits (so does 4, tried later)
    ("inner-branch", LOAD + "  ISETP.NE.U32.AND c2, PT, v, 0x3, PT\n  @c2 BRA SKIP\n  IADD3 v, v, 0x1, RZ\nSKIP:\n"
                            "  ISETP.NE.U32.AND ready, PT, v, 0x4, PT\n  @ready BRA POLL\n", "", 3),
    # exits by a forward branch, the branch back unconditional
    ("forward-exit", LOAD + "  ISETP.NE.U32.AND ready, PT, v, 0x6, PT\n  @!ready BRA OUT\n  NANOSLEEP 0x20\n  BRA POLL\nOUT:\n",
     "", 6)])
def test_the_rest_of_the_grid_raises_what_the_loop_waits_for(name: str, loop: str, before: str, want: int) -> None:
    assert _raised(loop, before) == {0x80: want}


def test_a_poll_through_an_atomic() -> None:
    """One waiter polls with an atomic add of 0 (the atomic's old value is the poll's): it is a wait loop,
    and the value its body waits for is raised. (Two such waiters: tests/check/test_checker_gaps.py.)"""
    loop = ("POLL:\n  ATOMG.E.ADD.STRONG.GPU PT, v, desc[memdesc][p.64+0x80], RZ\n  ISETP.NE.U32.AND ready, PT, v, 0x7, PT\n"
            "  @ready BRA POLL\n")
    assert _raised(loop, one_waiter=True) == {0x80: 7}


def test_a_strong_load_through_the_read_only_path_is_weak() -> None:
    """`.CONSTANT` reads through the non-coherent path even with `.STRONG.GPU`: a weak poll (the relaxed
    load still acquires what the flag released: the data read after the fence is ordered)."""
    body = FLAG_BODY.replace("LDG.E.STRONG.GPU v", "LDG.E.CONSTANT.STRONG.GPU v")
    assert check_kernel(parse(FLAG_HEAD + body)).messages(20) == [
        "line 15 (LDG.E.CONSTANT.STRONG.GPU): a loop waits on the word it loads from global memory, through a weak "
        "load: it may read a stale value forever (poll with LDG.E.STRONG.GPU, a relaxed GPU-scope load)"]


TWO_HEAD = REST_HEAD + ".reg R t\n.reg R[2] f\n.reg P c2\n"


def _run(body: str) -> tuple[Machine, dict[str, dict[str, int]], dict[int, int], dict[int, int]]:
    m = Machine(parse(TWO_HEAD + body))
    m.run()
    base = m.global_memory.base["buf"]
    return (m, {k: dict(v) for k, v in m.problems.msgs.items() if v},
            {a - base: v for a, v in m.global_memory.shadow.items()}, {a - base: v for a, v in m.flags.version.items()})


def test_two_waiters_on_neighbouring_words_raised_from_outside() -> None:
    """CTA 0 waits on +0x80, CTA 2 on +0x84: each word is raised once, once written (the write of one
    word does not touch its neighbour), and both waiters finish."""
    assert REST_BODY.count("READER:\nPOLL:\n  LDG.E.STRONG.GPU v, desc[memdesc][p.64+0x80]\n") == 1
    body = REST_BODY.replace("READER:\nPOLL:\n  LDG.E.STRONG.GPU v, desc[memdesc][p.64+0x80]\n",
                             "READER:\n  IMAD.WIDE.U32 f, ctaid, 0x2, p\nPOLL:\n  LDG.E.STRONG.GPU v, desc[memdesc][f.64+0x80]\n")
    m, verdict, words, versions = _run(body)
    assert verdict == {} and m.flags.raised_outside == 2
    assert words == {0x80: 1, 0x84: 1} and versions == {0x80: 1, 0x84: 1}
    assert [(w.cta.name, w.state) for w in m.warps] == [("CTA 0", EXITED), ("CTA 2", EXITED)]


def test_a_waiter_no_value_releases_hangs_and_the_other_is_raised() -> None:
    """CTA 0's loop exits only when twice the word is 3 (no 32-bit value): no value is raised for it and
    its hang is reported; CTA 2, after it, waits on +0x84 and is raised."""
    body = REST_BODY.replace(
        "READER:\nPOLL:\n  LDG.E.STRONG.GPU v, desc[memdesc][p.64+0x80]\n",
        "READER:\n  ISETP.EQ.U32.AND c2, PT, ctaid, 0x2, PT\n  @c2 BRA POLL\nNEVER:\n"
        "  LDG.E.STRONG.GPU v, desc[memdesc][p.64+0x80]\n  IMAD t, v, 0x2, RZ\n  ISETP.NE.U32.AND ready, PT, t, 0x3, PT\n"
        "  @ready BRA NEVER\n  EXIT\nPOLL:\n  LDG.E.STRONG.GPU v, desc[memdesc][p.64+0x84]\n")
    m, verdict, words, versions = _run(body)
    assert verdict == {"protocol": {
        "hang: CTA 0 warp 0 waits on words+0x80 (the loop ending at line 20 polls it and nothing writes it)": 1}}
    assert m.flags.raised_outside == 1 and words == {0x84: 1} and versions == {0x84: 1}
    assert [(w.cta.name, w.state) for w in m.warps] == [("CTA 0", BLOCKED), ("CTA 2", EXITED)]


def test_a_warp_blocked_on_a_barrier_beside_a_flag_waiter() -> None:
    """Two warps a CTA: warp 0 waits on named barrier 1 (64 threads) that warp 1 never reaches; warp 1
    polls the flag. The rest of the grid raises the flag for warp 1 (warp 0, first in the list, is no
    flag waiter), which finishes; warp 0's hang is reported."""
    head = REST_HEAD.replace(".threads 32", ".threads 64") + ".reg R tid\n.reg P w0\n"
    body = REST_BODY.replace("READER:\n", "READER:\n  S2R tid, SR_TID.X\n  ISETP.LT.U32.AND w0, PT, tid, 0x20, PT\n"
                                          "  @w0 BAR.SYNC.DEFER_BLOCKING 0x1, 0x40\n  @w0 EXIT\n")
    m = Machine(parse(head + body))
    m.run()
    assert {k: dict(v) for k, v in m.problems.msgs.items() if v} == {
        "named": {f"CTA {c}: named barrier 1 ends with 32 of 64 threads arrived (generation 0)": 1 for c in (0, 2)},
        "protocol": {f"hang: CTA {c} warp 0 waits on named barrier 1 (32 of 64 threads arrived)": 1 for c in (0, 2)}}
    assert m.flags.raised_outside == 1
    assert [(w.cta.name, w.wid, w.state) for w in m.warps] == [
        ("CTA 0", 0, BLOCKED), ("CTA 0", 1, EXITED), ("CTA 2", 0, BLOCKED), ("CTA 2", 1, EXITED)]
