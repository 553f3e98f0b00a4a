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
GEMM2 = mega.MegaProblem(os.path.join(os.path.dirname(__file__), "graphs", "gemm2.py"), arch="sm_100a")
FOUND = r"\[found by SM [0-3] \(CTA [01] of cluster [01]\), the (loader|storer|launcher|consumers), at instruction \d+ " \
        r"\(its \d+(st|nd|rd|th): node \d+ [^]]+\)\]"


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


PTXAS_CASES = [("llama-mlp", None, "dynamic"), pytest.param("mlp3", None, "static", marks=slow),
               pytest.param("mlp3", None, "dynamic", marks=slow), pytest.param("llama-mlp", None, "static", marks=slow),
               pytest.param("llama-mlp", 1, "static", marks=slow)]


@pytest.mark.parametrize("graph,tokens,mode", PTXAS_CASES)
def test_ptxas_assembles_every_sm(graph: str, tokens: Any, mode: str) -> None:
    """The acceptance's graphs on 74 clusters (the Llama-MLP stack at T = 16 and 1, a decode graph:
    rmsnorm, gemms of two tile shapes, silu_mul, a gemm with a residual; mlp3: three gemms with bias
    and relu), static queues or cluster launch control: no spill, and the disassembly shows the
    pair's MMAs and commits, the tensor-memory loads, the 2-CTA copies, the stores, the SYNCS family
    and (CLC) the scheduler; a decode path's MMAs are unrolled over its stage's K boxes (four a K
    box, `gemm_pair_k_boxes`) and its chunked copies are 3-D and 4-D maps."""
    from warpy.lift.disasm import disassemble
    from warpy.lift.lifter import build
    from warpy.mega.tiling import gemm_pair_k_boxes

    pr = mega.MegaProblem(graph, tokens, arch="sm_100a", units=0)
    cubin = build(mega.build(pr, mega.MegaConfig(mode=mode)).kernel())  # with the disassembly check
    (res,) = cubin.resources
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.registers <= mega_sm100.MAXNREG
    ops = disassemble(cubin).opcodes()
    want = ["UTCHMMA.2CTA", "UTCBAR.2CTA.MULTICAST", "LDTM.x32", "UTMALDG.2D.2CTA", "UTCATOMSWS.2CTA.FIND_AND_SET.ALIGN",
            "UTCATOMSWS.AND", "UCGABAR_ARV", "UCGABAR_WAIT", "UBLKCP.S.G", "UTMALDG.2D", "UTMASTG.2D",
            "SYNCS.ARRIVE.TRANS64.RED.A1T0", "SYNCS.PHASECHK.TRANS64.TRYWAIT", "REDG.E.ADD.STRONG.GPU", "BRX"]
    if graph == "llama-mlp":
        want += ["LDTM.x8", "MUFU.RSQ", "MUFU.EX2"]  # the 128x32 tiles' loads; rmsnorm, silu
        want += ["UTMALDG.3D.2CTA", "UTMALDG.4D.2CTA"]  # chunked copies: x (K, T, K boxes), W (.., layer)
    for op in want:
        assert ops.get(op, 0) > 0, op
    tiles = mega.plan(pr, mega.MegaConfig(mode=mode)).launch.gemm_tiles
    assert ops["UTCHMMA.2CTA"] == sum(4 * gemm_pair_k_boxes(tm, tn, ar) for tm, tn, ar in tiles)
    if graph == "llama-mlp":  # decode tiles: 128x128 and 128x32, A boxes of T rows rounded up to 8
        t = tokens or 16
        assert tiles == ((128, 32, max(8, t)), (128, 128, max(8, t)))
    assert (ops.get("UGETNEXTWORKID.BROADCAST", 0) > 0) == (mode == "dynamic")


@pytest.mark.parametrize("coloured", [False, pytest.param(True, marks=slow)])
def test_check_launch_is_clean_with_values(coloured: bool) -> None:
    """Elementwise: every CTA of two clusters (and the coloured text), the values equal to the reference."""
    rep = mega.check_launch(SMALL, coloured=coloured)
    assert rep.ok, rep.text()
    assert rep.values_checked == 440 and rep.values_wrong == 0


LLAMA1 = mega.MegaProblem(os.path.join(os.path.dirname(__file__), "graphs", "llama1.py"), arch="sm_100a")


@pytest.mark.parametrize("mode", ["dynamic", pytest.param("static", marks=slow)])
def test_a_llama_layer_is_clean_with_values(mode: str) -> None:
    """One Llama MLP layer (rmsnorm, the gate and up gemms, silu_mul, the down gemm with the
    residual): every CTA of two clusters clean, every output element within the gemm tolerance of
    the reference (here every one equal)."""
    rep = mega.check_launch(LLAMA1, mega.MegaConfig(mode=mode), coloured=False)
    assert rep.ok, rep.text()
    assert rep.values_checked == 160 and rep.values_wrong == 0
    pl = mega.plan(LLAMA1, mega.MegaConfig(mode=mode))
    assert {pl.schedule.program.nodes[i.node].kind for i in pl.schedule.instrs} == {"rmsnorm", "gemm", "silu_mul"}


@pytest.mark.parametrize("mode", ["dynamic", pytest.param("static", marks=slow)])
def test_gemm_check_launch_is_clean_with_values(mode: str) -> None:
    """Two gemms, each unit running gemm after gemm: no protocol problem, no unordered access (the
    tensor memory handed from one gemm's reads to the next one's MMAs in both CTAs), the values
    within the gemm tolerance of the reference (here every one equal); in dynamic mode the grid is a
    cluster an instruction and the two resident clusters take the rest by cluster launch control."""
    pl = mega.plan(GEMM2, mega.MegaConfig(mode=mode))
    assert [pl.schedule.program.nodes[i.node].kind for i in pl.schedule.instrs] == ["gemm"] * 6
    assert pl.launch.gemm_tiles == ((128, 16, 16),)  # decode tiles: 16-row A boxes, 10 K boxes a stage
    rep = mega.check_launch(GEMM2, mega.MegaConfig(mode=mode), coloured=False)
    assert rep.ok, rep.text()
    assert rep.values_checked == 512 and rep.values_wrong == 0
    want = pl.schedule.program.reference(mega.inputs(pl))
    assert np.array_equal(rep.data["out0"], want[0])


@pytest.mark.parametrize("graph,mode,coloured", [
    # gelu(x·Wᵀ + b) + r and relu(h·Vᵀ + c) with c a column (a bias broadcast along the columns)
    ("gemm-small", "static", False),
    pytest.param("ew-chain", "static", True, marks=slow), pytest.param("ew-wide", "static", True, marks=slow),
    pytest.param("ew-chain", "dynamic", True, marks=slow),
    pytest.param("gemm-epi", "dynamic", False, marks=slow),  # silu with a bias, a residual, K of 200
    pytest.param("acts", "static", False, marks=slow),  # silu, gelu, silu_mul, rmsnorm rows of two boxes
    pytest.param("llama-small", "static", False, marks=slow),
    pytest.param("mlp3", "static", False, marks=slow),  # the acceptance's (many minutes each)
    pytest.param("mlp3", "dynamic", False, marks=slow),
])
def test_more_graphs_are_clean(graph: str, mode: str, coloured: bool) -> None:
    """Every CTA of two clusters clean, every output within the tolerance of the reference (gemm:
    `compare_close`; elementwise chains exact)."""
    rep = mega.check_launch(mega.MegaProblem(graph, arch="sm_100a"), mega.MegaConfig(mode=mode), coloured=coloured)
    assert rep.ok, rep.text()
    assert rep.values_checked > 0 and rep.values_wrong == 0


@slow
def test_warpy_check_mega_generic_path() -> None:
    """`warpy check mega ew-small --arch sm_100a` (without values: the control flow reads the queue)."""
    from warpy.plan import check_problem

    rep = check_problem(mega.FAMILY, mega.FAMILY.problem(["ew-small"], arch="sm_100a"), values=False)
    assert rep.ok, rep.text()


def test_warpy_check_mega_generic_path_with_cluster_launch_control() -> None:
    """`warpy check mega GRAPH --arch sm_100a --values --config mode=dynamic`: the expectation is the
    dynamic plan's (its queue) and the machine has the launch's two clusters, which cluster launch
    control hands the rest of the grid (a cluster an instruction) to: every instruction runs and the
    values equal the reference."""
    from warpy.plan import check_problem

    pr = mega.FAMILY.problem([GEMM2.graph], arch="sm_100a")
    cfg = mega.FAMILY.configure(pr, "mode=dynamic")
    exp = mega.FAMILY.expectation(pr)
    assert exp.resident == 4 and exp.configured(cfg).pl.config.mode == "dynamic"
    rep = check_problem(mega.FAMILY, pr, config=cfg, values=True, coloured=False)
    assert rep.ok, rep.text()
    assert rep.values_checked == 512 and rep.values_wrong == 0


FAULTS = [
    ("no-release", None, "order", "UTMASTG.2D, warp 2 writes it and UTMALDG.2D.2CTA, warp 1 reads it, and nothing "
                                  "orders", "the loader"),
    ("early-page-free", None, "order", "pages: UTMASTG.2D, warp 2 reads it and UTMALDG.2D.2CTA, warp 1 writes it, "
                                       "and nothing orders the two", "the loader"),
    ("drop-arrive", None, "protocol", "waits on counter", "hang: SM"),
]


@pytest.mark.parametrize("fault,slow_cta,kind,what,who", [FAULTS[0]] + [pytest.param(*f, marks=slow) for f in FAULTS[1:]])
def test_seeded_protocol_faults_are_caught(fault: str, slow_cta: Any, kind: str, what: str, who: str) -> None:
    """The release before a cross-SM arrive (no-release: the relaxed add without MEMBAR.ALL.GPU) and
    the common protocol's other faults, on the gemm graph (the next gemm's copy reads what the
    previous one stored)."""
    rep = mega.check_launch(GEMM2, mega.MegaConfig(fault=fault), coloured=False, values=False, slow=slow_cta)
    msgs = list(rep.problems.msgs[kind])
    assert any(what in m and who in m and (re.search(FOUND, m) or m.startswith("hang: SM")) for m in msgs), rep.text()


@pytest.fixture(scope="module")
def clean_gemm() -> Any:
    return mega.check_launch(GEMM2, coloured=False, values=False)


#: (fault, what the race's message names): each is a read of a previous gemm's accumulator (LDTM)
#: and a write of the next one's (the pair's MMA, UTCHMMA.2CTA, issued by CTA 0's launcher) that
#: nothing orders, found at the second gemm of a unit
TMEM_FAULTS = [
    # the consumers return the token without tcgen05.fence::before_thread_sync: their loads are
    # not released with the arrive
    ("no-fence-before", "LDTM.x4, warp 4 reads it and UTCHMMA.2CTA, warp 3 writes it"),
    # the launcher issues its MMAs without tcgen05.fence::after_thread_sync after the token's wait
    # (or the stages'): what the wait acquired does not order its tensor-core work
    ("no-fence-after", "and UTCHMMA.2CTA, warp 3 writes it"),
    # CTA 1's consumers never return the token: CTA 0's MMAs write CTA 1's tensor memory after CTA
    # 0's consumers only (MegaKittens' open question); CTA 0's own reads are ordered, so the race is
    # CTA 1's accumulator
    ("pair-handoff", "LDTM.x4, warp 4 reads it and UTCHMMA.2CTA, warp 3 writes it"),
    # the token returned before the accumulator was read
    ("early-token", "LDTM.x4, warp 4 reads it and UTCHMMA.2CTA, warp 3 writes it"),
]


@pytest.mark.parametrize("fault,what", TMEM_FAULTS)
def test_tensor_memory_hand_off_faults_are_caught(clean_gemm: Any, fault: str, what: str) -> None:
    assert clean_gemm.ok, clean_gemm.text()
    rep = mega.check_launch(GEMM2, mega.MegaConfig(fault=fault), coloured=False, values=False)
    msgs = list(rep.problems.msgs["order"])
    at_mma = [m for m in msgs if what in m and re.search(FOUND, m) and
              re.search(r"found by SM [02] \(CTA 0 of cluster [01]\), the launcher, at instruction", m)]
    assert at_mma, rep.text()
    assert all(m.startswith("tensor memory: ") for m in msgs), rep.text()


def _xw_graph() -> str:
    """A FILE.py graph with x·W (W as (K, N)), which the sm_100a gemm body refuses."""
    import tempfile

    path = os.path.join(tempfile.mkdtemp(prefix="warpy-mega-"), "xw.py")
    with open(path, "w") as f:
        f.write("from warpy.mega.graph import Graph\n"
                "g = Graph('xw')\n"
                "graph = g\n"
                "g.output(g.matmul(g.input('x', (8, 64)), g.input('w', (64, 32))))\n")
    return path


@pytest.mark.parametrize("problem,config,what", [
    (lambda: mega.MegaProblem("ew-small", arch="sm_100a"), "mode=queue", "is not static or dynamic"),
    (lambda: mega.MegaProblem("ew-small", arch="sm_100a"), "fault=nope", "fault 'nope' is not one of"),
    (lambda: mega.MegaProblem("ew-small", 200, arch="sm_100a"), None, "which the pair's CTAs cannot split"),
    (lambda: mega.MegaProblem(_xw_graph(), arch="sm_100a"), None, "the megakernel reads W as (N, K)"),
])
def test_refused_in_one_line(problem: Any, config: Any, what: str) -> None:
    with pytest.raises(WarpyError) as e:
        pr = problem()
        mega.build(pr, mega.configure(pr, config) if config else None)
    assert what in str(e.value) and "\n" not in str(e.value)


def test_gemm_outputs_compare_within_bf16_steps() -> None:
    """An elementwise chain's output must equal the reference; an output a gemm feeds may differ by
    CLOSE_STEPS bf16 steps of its magnitude (fp32 sums), and no more; an element that cancels has
    its steps taken at COND_SCALE x its condition (what its sum added up in magnitude)."""
    from warpy.kernels.mega_common import CLOSE_STEPS, COND_SCALE, compare_close, conditions, inexact_output

    pl = mega.plan(GEMM2, mega.choose(GEMM2))
    prog = pl.schedule.program
    assert inexact_output(prog, prog.outputs[0])
    ew = mega.plan(SMALL, mega.choose(SMALL)).schedule.program
    assert not any(inexact_output(ew, t) for t in ew.outputs)
    vals = mega.inputs(pl)
    want = prog.reference(vals)
    cond = conditions(prog, vals)[prog.outputs[0]]
    got = [w.copy() for w in want]
    y = got[0]
    # an element that does not cancel: its own magnitude's steps
    at = next(tuple(int(i) for i in ix) for ix in np.argwhere(np.abs(want[0]) > COND_SCALE * cond))
    step = 2.0 ** (np.floor(np.log2(np.abs(y[at]))) - 7)
    y[at] += CLOSE_STEPS * step
    n, bad, close, msgs = compare_close(prog, prog.outputs, got, want, vals)
    assert (n, bad, close, msgs) == (y.size, 0, 1, [])
    y[at] += step
    n, bad, close, msgs = compare_close(prog, prog.outputs, got, want, vals)
    assert (bad, close) == (1, 0) and "more than 4 bf16 steps (of its magnitude or condition)" in msgs[0]
    # y = h·W2ᵀ + r: its condition is max(|h|, cond h)·|W2|ᵀ + |r| (h the first gemm's output, as
    # stored; cond h = max(|x|·|W1|ᵀ + |b|, |h|): the error h may carry, carried through |W2|)
    from warpy.mega.lower import compute

    arrays = {t.id: np.asarray(vals[t.name], dtype=np.float32) for t in prog.tensors if t.kind == "input"}
    n0 = prog.nodes[0]
    h = np.asarray(compute(n0, [o.array(arrays) for o in n0.operands], "bf16"), dtype=np.float64)
    x, w1, w2, r = (np.asarray(vals[k], dtype=np.float64) for k in ("x", "w1", "w2", "r"))
    extra = [np.abs(np.asarray(o.array(arrays), dtype=np.float64)) for o in n0.operands[2:]]
    cond_h = np.maximum(np.abs(x) @ np.abs(w1).T + sum(extra), np.abs(h))
    assert np.allclose(cond, np.maximum(cond_h @ np.abs(w2).T + np.abs(r), np.abs(want[0])))


@pytest.mark.parametrize("tokens", [256, pytest.param(1024, marks=slow)])
def test_numpy_fp32_mlp3_is_within_the_tolerance(tokens: int) -> None:
    """mlp3 (three K = 1024 layers, relu) evaluated by numpy in fp32 (each layer's sums in fp32,
    stored as bf16) passes `compare_close` against the float64 reference: the tolerance admits
    what a different summation order does, with its cancelling elements."""
    from warpy.kernels.mega_common import compare_close
    from warpy.numeric import from_bits, to_bits

    pr = mega.MegaProblem("mlp3", tokens, arch="sm_100a")
    pl = mega.plan(pr, mega.choose(pr))
    prog = pl.schedule.program
    vals = mega.inputs(pl)
    want = prog.reference(vals)
    h, w, b = (np.asarray(vals[k], dtype=np.float32) for k in ("x", "w", "b"))
    for i in range(3):
        h = np.asarray(from_bits(to_bits(np.maximum(h @ w[i].T + b[i], 0), "bf16"), "bf16"), dtype=np.float32)
    n, bad, close, msgs = compare_close(prog, prog.outputs, [h], want, vals)
    assert (n, bad, msgs) == (tokens * 1024, 0, []) and close > 0


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
