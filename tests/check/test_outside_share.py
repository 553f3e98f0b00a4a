"""The rest of the grid adds its own arrivals, no more (`warpy.check.flags.raise_outside` with
`Expectation.outside_share`): on a megakernel launch of more units than the checker simulates (the
first and last CTA), a counter the simulated CTAs arrive on too passes only after their arrivals.
Raising it straight to its target let a simulated waiter pass before a simulated producer arrived,
and its loads were reported as racing that producer's stores (`warpy check mega llama-small 1 6`:
4 "nothing orders the two" pairs on the reused activation buffers, on a correct program)."""

from __future__ import annotations

from warpy.check.report import check_kernel
from warpy.kernels import mega


def test_the_share_is_the_other_units_arrivals() -> None:
    problem = mega.MegaProblem("llama-small", 1, units=6)
    pl = mega.plan(problem, mega.configure(problem, None))
    ex = mega.expectation(problem)
    s = pl.schedule
    assert s.queues is not None
    unit_of = {i: u for u, q in enumerate(s.queues) for i in q}
    sim = [0, 5]
    seen_both = False
    for c in s.counters:
        mine = sum(1 for i in c.members if unit_of[i] in sim)
        for call in (1, 2, 7):
            share = ex.outside_share("counters", 4 * c.id, c.target * call, sim)
            assert share is not None and share + mine * call == c.target * call
        seen_both |= 0 < mine < c.target
        assert ex.outside_share("counters", 4 * c.id, c.target + 1, sim) is None if c.target > 1 else True
    assert seen_both  # some counter both simulated and other units arrive on (the case that raced)
    assert ex.outside_share("buf0", 0, 1, sim) is None and ex.outside_share("counters", 2, 1, sim) is None
    assert ex.outside_share("counters", 0, s.counters[0].target, list(range(6))) == 0


def test_a_partly_simulated_launch_reports_no_race() -> None:
    problem = mega.MegaProblem("llama-small", 1, units=6)
    cfg = mega.configure(problem, None)
    rep = check_kernel(mega.build(problem, cfg).kernel(), expect=mega.MegaExpectation(mega.plan(problem, cfg)))
    assert rep.raised_outside > 0  # the rest of the grid did raise flags
    assert rep.ok, rep.text()


def test_check_launch_reports_no_hang_where_the_rest_of_the_grid_arrives() -> None:
    """`mega.check_launch` on a partly simulated launch: a counter wait the rest of the grid's
    arrivals let pass is no hang (it reported one each time every simulated warp waited, before
    letting the rest arrive: the Llama decoder layer on 132 units was "8 protocol problems")."""
    problem = mega.MegaProblem("llama-small", 1, units=6)
    rep = mega.check_launch(problem, values=False, coloured=False)
    assert not any("hang:" in m for msgs in rep.problems.msgs.values() for m in msgs), rep.text()
    assert rep.ok, rep.text()


def test_values_read_from_reused_buffers_are_not_compared_on_a_partial_run() -> None:
    """llama-small over 6 units reuses buffers: the first and last CTA read poison where the others'
    data would be (the model fills only buffers of one tensor), so what they compute from it is said
    not compared rather than reported wrong (8 of 72 NaN elements "differed" before)."""
    problem = mega.MegaProblem("llama-small", 1, units=6)
    pl = mega.plan(problem, mega.configure(problem, None))
    assert pl.schedule.reuses
    rep = mega.check_launch(problem, coloured=False)
    assert rep.ok, rep.text()
    assert rep.values_checked == 0 and rep.values_unmodelled > 0
    assert "not compared: run every CTA to compare them" in rep.text()
