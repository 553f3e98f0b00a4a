"""The megakernel's sm_100a interpreter on the CPU (nothing of it has run on a B200): it builds, prints
and parses, ptxas assembles it for every SM with no spill and the disassembly shows the pair's
instructions, the host checker runs every CTA of both clusters clean with the values equal to the
lowered graph's reference, in static queues and with cluster launch control, and the protocol's
seeded faults are caught with a message naming the SM, the CTA of the cluster, the role and the
instruction. Slower cases (more graphs, every fault) run with WARPY_SLOW=1."""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np
import pytest

from warpy.errors import WarpyError
from warpy.isa.text import parse
from warpy.kernels import mega, mega_sm100
from warpy.target import SM100A

SLOW = bool(os.environ.get("WARPY_SLOW"))
slow = pytest.mark.skipif(not SLOW, reason="slow: set WARPY_SLOW=1")
SMALL = mega.MegaProblem("ew-small", arch="sm_100a")
FOUND = r"\[found by SM [0-3] \(CTA [01] of cluster [01]\), the (loader|storer|launcher|consumers), at instruction \d+ " \
        r"\(its \d+(st|nd|rd|th): node \d+ \w+\)\]"


def test_the_interpreter_prints_and_parses_for_the_pair() -> None:
    p = mega.build(SMALL)
    named = p.text()
    assert str(parse(named)) == named
    coloured = str(p.coloured())
    assert str(parse(coloured)) == coloured
    h = parse(named).header
    # two clusters of two CTAs; the pages, slots and barriers fit sm_100a's shared memory
    assert (h.threads, h.grid, h.cluster) == (384, (4, 1, 1), (2, 1, 1))
    assert 7 * 32768 < h.dynsmem <= SM100A.max_dynamic_smem
    lines = named.splitlines()
    for line in ("UTCATOMSWS.2CTA.FIND_AND_SET.ALIGN [tmem_slot", "UTCATOMSWS.2CTA.AND tmem_base", "UCGABAR_ARV",
                 "TCGEN05.FENCE.AFTER", "@leader UBLKCP.S.G", "MEMBAR.ALL.GPU", "CCTL.IVALL", "ACQBULK"):
        assert any(x.strip().startswith(line) for x in lines), line
    # the queue holds the stop instruction after each unit's last
    pl = mega.plan(SMALL, mega.choose(SMALL))
    q = pl.queue_words
    assert q.shape == (pl.schedule.waves + 1, 2, 64) and (q[-1, :, 0] == mega_sm100.STOP).all()
    dyn = mega.plan(SMALL, mega.MegaConfig(mode="dynamic"))
    assert dyn.queue_words.shape == (len(dyn.schedule.instrs) + 1, 64)
    assert mega.build(SMALL, mega.MegaConfig(mode="dynamic")).kernel().header.grid == (2 * len(dyn.schedule.instrs), 1, 1)


def test_ptxas_assembles_every_sm_with_cluster_launch_control() -> None:
    from warpy.lift.disasm import disassemble
    from warpy.lift.lifter import build

    pr = mega.MegaProblem("ew-chain", arch="sm_100a", units=0)
    try:
        cubin = build(mega.build(pr, mega.MegaConfig(mode="dynamic")).kernel())  # with the disassembly check
    except WarpyError as e:
        if "ptxas" in str(e) and "not found" in str(e):
            pytest.skip(str(e))
        raise
    (res,) = cubin.resources
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.registers <= mega_sm100.MAXNREG
    ops = disassemble(cubin).opcodes()
    for op in ("UGETNEXTWORKID.BROADCAST", "UTCATOMSWS.2CTA.FIND_AND_SET.ALIGN", "UTCATOMSWS.AND", "UCGABAR_ARV",
               "UCGABAR_WAIT", "UBLKCP.S.G", "UTMALDG.2D", "UTMASTG.2D", "SYNCS.ARRIVE.TRANS64.RED.A1T0",
               "SYNCS.PHASECHK.TRANS64.TRYWAIT", "REDG.E.ADD.STRONG.GPU", "BRX"):
        assert ops[op] > 0, op


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_check_launch_is_clean_with_values(mode: str) -> None:
    """Every CTA of two clusters, the values equal to the reference; in dynamic mode the grid is a
    cluster an instruction and the two resident clusters take the rest by cluster launch control."""
    rep = mega.check_launch(SMALL, mega.MegaConfig(mode=mode), coloured=mode == "static")
    assert rep.ok, rep.text()
    assert rep.values_checked == 440 and rep.values_wrong == 0


@slow
@pytest.mark.parametrize("graph,mode", [("ew-chain", "static"), ("ew-wide", "static"), ("ew-chain", "dynamic")])
def test_more_graphs_are_clean(graph: str, mode: str) -> None:
    rep = mega.check_launch(mega.MegaProblem(graph, arch="sm_100a"), mega.MegaConfig(mode=mode))
    assert rep.ok, rep.text()
    assert rep.values_checked > 0 and rep.values_wrong == 0


@slow
def test_warpy_check_mega_generic_path() -> None:
    """`warpy check mega ew-small --arch sm_100a` (without values: the control flow reads the queue)."""
    from warpy.plan import check_problem

    rep = check_problem(mega.FAMILY, mega.FAMILY.problem(["ew-small"], arch="sm_100a"), values=False)
    assert rep.ok, rep.text()


FAULTS = [
    ("no-release", None, "order", "UTMASTG.2D, warp 2 writes it and UTMALDG.2D, warp 1 reads it, and nothing orders"),
    ("early-page-free", None, "order", "pages: UTMASTG.2D, warp 2 reads it and UTMALDG.2D, warp 1 writes it, and "
                                       "nothing orders the two"),
    ("drop-arrive", None, "protocol", "waits on counter"),
]


@pytest.mark.parametrize("fault,slow_cta,kind,what", [FAULTS[0]] + [pytest.param(*f, marks=slow) for f in FAULTS[1:]])
def test_seeded_protocol_faults_are_caught(fault: str, slow_cta: Any, kind: str, what: str) -> None:
    rep = mega.check_launch(SMALL, mega.MegaConfig(fault=fault), coloured=False, slow=slow_cta)
    msgs = list(rep.problems.msgs[kind])
    assert any(what in m and (re.search(FOUND, m) or m.startswith("hang: SM")) for m in msgs), rep.text()


@pytest.mark.parametrize("problem,config,what", [
    (lambda: mega.MegaProblem("ew-small", arch="sm_100a"), "mode=queue", "is not static or dynamic"),
    (lambda: mega.MegaProblem("ew-small", arch="sm_100a"), "fault=nope", "fault 'nope' is not one of"),
    (lambda: mega.MegaProblem("ew-small", 200, arch="sm_100a"), None, "which the pair's CTAs cannot split"),
])
def test_refused_in_one_line(problem: Any, config: Any, what: str) -> None:
    with pytest.raises(WarpyError) as e:
        pr = problem()
        mega.build(pr, mega.configure(pr, config) if config else None)
    assert what in str(e.value) and "\n" not in str(e.value)


def test_the_pair_splits_a_tile_s_rows() -> None:
    """The host's boxes along the rows are half the tile's: CTA 0 the first ceil(rows / 2), CTA 1 the
    rest; a one-row tile is CTA 0's."""
    pl = mega.plan(mega.MegaProblem("ew-small", 148, arch="sm_100a"), mega.choose(SMALL))
    from warpy.mega.encode import decode

    f = next(x for x in decode(pl.encoded.words) if x["opcode"] != 0 and x["tile_m"] > 1)
    box = pl.encoded.maps[f["op0.tmap"]].tma.box
    assert box[1] == -(-f["tile_m"] // 2)
    words = np.asarray(pl.queue_words)
    assert words.dtype == np.uint32
