"""The megakernel's timeline (`warpy mega run --timeline`): the interpreter built with the roles'
stamps is proven by the checker like any other (protocol, ordering, values), and the host reads the
stamps back into steps, hops and a Chrome trace exactly (synthetic stamps across the timer's wrap)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from warpy.kernels import mega
from warpy.kernels.mega_common import STAMPS, TIME_WORDS
from warpy.kernels.mega_timeline import Timeline, after_waits, chrome_trace, report


def _plan() -> mega.Plan:
    return mega.plan(mega.MegaProblem("mlp3", 1, units=0), mega.MegaConfig())


def _words(n: int, base: int) -> np.ndarray:
    i = np.arange(n, dtype=np.int64)[:, None]
    w = np.arange(TIME_WORDS, dtype=np.int64)[None, :]
    return ((base + 1000 * i + 10 * w) % (1 << 32)).astype(np.uint32).ravel()


@pytest.mark.parametrize("base", [5_001, (1 << 32) - 69_999])  # (stamps are odd) the second wraps mid-call
def test_stamps_become_steps_and_hops(base: int) -> None:
    s = _plan().schedule
    n = len(s.instrs)
    tl = Timeline.from_words(s, _words(n, base))
    assert tl.at[0, 0] == 0.0
    assert np.allclose(tl.at, (1000 * np.arange(n)[:, None] + 10 * np.arange(TIME_WORDS)[None, :]) / 1e3)
    assert np.allclose(tl.step("wait"), 0.01 * (STAMPS[("loader", "waits")] - STAMPS[("loader", "start")]))
    assert tl.total_us == pytest.approx((1000 * (n - 1) + 10 * (TIME_WORDS - 1)) / 1e3)
    hops = tl.hops()
    assert hops  # layers 2 and 3 wait on the previous layer
    for i, c, h in hops:
        last = max(s.counters[c].members)  # the latest-stamped arrival is the highest index here
        want = (1000 * i + 10 * STAMPS[("loader", "waits")] - 1000 * last - 10 * STAMPS[("storer", "end")]) / 1e3
        assert h == pytest.approx(want)
    text = report(tl)
    assert "hops" in text and "gemm 64x16" in text
    # each tile's steps after its own waits: the stamps' word offsets apart, 10 ns a word here
    w = STAMPS[("loader", "waits")]
    steps = after_waits(tl, range(n))
    assert steps == pytest.approx((0.01 * (STAMPS[("loader", "end")] - w), 0.01 * (STAMPS[("consumers", "end")] - w),
                                   0.01 * (STAMPS[("storer", "end")] - w),
                                   0.01 * (STAMPS[("storer", "end")] - STAMPS[("consumers", "end")])))
    assert "store+arrive" in text


def test_chrome_trace_has_an_event_per_instruction_and_role() -> None:
    s = _plan().schedule
    tl = Timeline.from_words(s, _words(len(s.instrs), 123))  # (odd, as the device stamps)
    tr = json.loads(json.dumps(chrome_trace(tl)))
    spans = [e for e in tr["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == 3 * len(s.instrs)
    units = {i: u for u, q in enumerate(s.queues) for i in q}
    for e in spans:
        assert e["pid"] == units[e["args"]["instruction"]] and e["dur"] > 0


def test_no_stamps_is_refused() -> None:
    s = _plan().schedule
    with pytest.raises(ValueError, match="no stamps"):
        Timeline.from_words(s, np.zeros(len(s.instrs) * TIME_WORDS, np.uint32))


@pytest.mark.parametrize("graph,values", [("ew-small", 440), ("gemm-small", 2880)])
def test_the_checker_proves_the_stamping_interpreter(graph: str, values: int) -> None:
    """Elementwise bodies, and a gemm's, whose consumers also stamp each stage's landing."""
    from warpy.kernels.mega import check_launch

    pr = mega.MegaProblem(graph)
    cfg = mega.configure(pr, "timeline=1")
    rep = check_launch(pr, cfg, coloured=False)
    assert rep.ok, rep.text()
    assert rep.values_checked == values and rep.values_wrong == 0
    if graph == "gemm-small":  # every stamp in one place, the gemm consumers' stage stamp among them
        assert str(mega.build(pr, cfg).kernel()).count("SR_GLOBALTIMERLO") == len(STAMPS)
        assert "SR_GLOBALTIMERLO" not in str(mega.build(pr, mega.configure(pr, "")).kernel())
