"""The mutation suite: hundreds of broken schedules of several graphs (thousands with WARPY_SLOW=1), each judged by the reference VM
(hang or race, per element) and by the validator; none missed, none over-rejected, every valid
schedule accepted. The counts are printed."""

from __future__ import annotations

import os

import pytest

from warpy.mega import build
from warpy.mega.examples import EXAMPLES
from warpy.mega.mutate import MUTATIONS, suite



#: mutants per schedule: 60 in the default run (every kind on every schedule, 360 in all, a seventh of
#: the time), 340 (over 2000) with WARPY_SLOW=1
PER_SCHEDULE = 340 if os.environ.get("WARPY_SLOW") == "1" else 60


def test_mutation_suite(capsys: pytest.CaptureFixture[str]) -> None:
    scheds = [(f"{n}/{m}", build(EXAMPLES[n](None), mode=m, units=4))
              for n in ("mlp-small", "llama-small") for m in ("static", "dynamic")]
    scheds += [("views/static", build(EXAMPLES["views"](None), units=3)), ("llama-small/sm_100a",
               build(EXAMPLES["llama-small"](None), "sm_100a", units=3))]
    rep = suite(scheds, PER_SCHEDULE, seed=7)
    with capsys.disabled():
        print("\n" + "\n".join(rep.lines()))
    t = rep.total
    assert t.mutants == 6 * PER_SCHEDULE
    assert not t.missed and not t.over_rejected and not rep.valid_rejected, rep.lines()
    assert all(rep.by_kind[k].mutants > 0 for k in MUTATIONS)
    # every kind that always breaks the protocol is always caught
    for k in ("drop_arrive", "extra_arrive", "lower_target", "raise_target"):
        assert rep.by_kind[k].bad == rep.by_kind[k].rejected == rep.by_kind[k].mutants
    # (no assertion on rep.seconds: a shared or loaded machine takes what it takes; it is printed)
