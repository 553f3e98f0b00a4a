"""The host checker: clean on the repo's kernels, every fault caught by its check, values vs numpy,
the checker's message formats (docs/checker.md)."""

from __future__ import annotations

import os

import re

import pytest

from warpy.check.faults import CAUGHT_BY, FAULTS, FaultDoesNotApply, inject
from warpy.check.report import check_kernel
from warpy.kernels.gemm import FAMILY as GEMM
from warpy.plan import check_problem
from warpy.kernels.gemm import GemmProblem
from warpy.kernels.probes import PROBES
import warpy.isa.examples as E

SUMMARY = re.compile(
    r"^(\d+) derived operands checked, (\d+) wrong, (\d+) changed by the colouring; (\d+) named-barrier arrivals "
    r"that do not make their counts; (\d+) protocol problems; (\d+) uses of memory past what was declared; "
    r"(\d+) accesses nothing orders")

# (a known finding, not a checker failure: see docs/checker.md)
PROBE_FINDINGS = {"wgmma_bf16_sw0_flipped": "memory",  # LBO/SBO swapped on purpose
                  # a TMA load whose innermost start is not 16-byte aligned: it faults on the H200
                  # (tma-inner-start; tests/kernels/test_tma_start.py checks the messages)
                  "tma_start_unaligned": "memory", "tma_start_unaligned_end": "memory"}


@pytest.mark.parametrize("name,arch", [(n, a) for n, p in PROBES.items() for a in p.archs])
def test_probes(name: str, arch: str) -> None:
    p = PROBES[name].build(arch)
    rep = check_kernel(p.kernel(), p.coloured())
    if name in PROBE_FINDINGS:
        assert rep.problems.count(PROBE_FINDINGS[name]) > 0
        return
    assert rep.ok, rep.text()
    assert rep.notes_checked > 0


# (known findings in pinned programs, see docs/checker.md): example-features on sm_100a runs setmaxnreg
# (a warpgroup-collective instruction) in one warp of its warpgroup, and stores TMA boxes from a shared
# address that is not 128-byte aligned
EXAMPLE_FINDINGS = {("example-features", "sm_100a"): ("warpgroup 0: its warpgroup-collective instruction 1 differs",
                                                      "stores a box from shared 0xc460, which is not 128-byte aligned")}


@pytest.mark.parametrize("name", sorted(E.EXAMPLES))
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_examples(name: str, arch: str) -> None:
    """Every example program runs clean (example-features too: its data are not meaningful, its
    protocol is: clusters, multicast, remote arrives, CLC, bulk copies, TMA stores)."""
    p = E.EXAMPLES[name](arch)
    rep = check_kernel(p.kernel(), p.coloured())
    findings = EXAMPLE_FINDINGS.get((name, arch))
    if findings is not None:
        msgs = [m for kind in rep.problems.KINDS for m in rep.problems.msgs[kind]]
        assert all(any(f in m for m in msgs) for f in findings), rep.text()
        assert all(any(f in m for f in findings) for m in msgs), rep.text()
        return
    assert rep.ok, rep.text()


GEMMS = [
    ("sm_90a", 256, 256, 128, "fp32"), ("sm_90a", 200, 136, 96, "fp32"), ("sm_90a", 1024, 1024, 1024, "fp32"),
    ("sm_90a", 256, 512, 128, "bf16"), ("sm_90a", 1000, 520, 264, "fp16"),
    ("sm_100a", 256, 256, 128, "fp32"), ("sm_100a", 200, 136, 96, "fp32"), ("sm_100a", 1024, 1024, 1024, "fp32"),
    ("sm_100a", 2048, 2048, 2048, "fp32"),
    # stream-K and split-K adding in the L2 (flags): behind WARPY_SLOW=1, as tests/kernels/test_gemm_sm100_check.py
    # checks those programs with values in the default run; the 2x4 multicast clusters with cluster launch
    # control (3072 x 1280 x 2048) are test_values_agree_with_numpy's, whose run with values is clean too
    *[pytest.param(*g, marks=pytest.mark.skipif(os.environ.get("WARPY_SLOW") != "1", reason="WARPY_SLOW=1"))
      for g in (("sm_100a", 2048, 2048, 16384, "fp32"), ("sm_100a", 1024, 1024, 65536, "fp32"))],
]


@pytest.mark.parametrize("arch,m,n,k,od", GEMMS)
def test_gemm_clean(arch: str, m: int, n: int, k: int, od: str) -> None:
    rep = check_problem(GEMM, GemmProblem(m, n, k, arch=arch, out_dtype=od))
    assert rep.ok, rep.text()
    got = SUMMARY.match(rep.summary())
    assert got and int(got.group(1)) == rep.notes_checked > 0 and got.group(2) == "0"


@pytest.mark.parametrize("arch,m,n,k,od", [
    ("sm_90a", 256, 256, 128, "fp32"), ("sm_90a", 200, 136, 96, "fp32"), ("sm_90a", 256, 512, 128, "bf16"),
    ("sm_90a", 1536, 1536, 256, "bf16"),  # 128 x 192 tiles, C through STSM and TMA stores
    ("sm_100a", 256, 256, 128, "fp32"), ("sm_100a", 1000, 520, 264, "fp32"), ("sm_100a", 3072, 1280, 2048, "fp32"),
])
def test_values_agree_with_numpy(arch: str, m: int, n: int, k: int, od: str) -> None:
    rep = check_problem(GEMM, GemmProblem(m, n, k, arch=arch, out_dtype=od), values=True, coloured=False)
    assert rep.ok, rep.text()
    assert rep.values_checked > 0 and rep.values_wrong == 0


FAULT_CASES = [(f, a, shape) for f in FAULTS for a in ("sm_90a", "sm_100a")
               for shape in [(1024, 1024, 1024, "fp32"), (256, 512, 128, "bf16")]]


@pytest.mark.parametrize("fault,arch,shape", FAULT_CASES)
def test_fault_detected_or_not_applicable(fault: str, arch: str, shape: tuple) -> None:
    m, n, k, od = shape
    try:
        rep = check_problem(GEMM, GemmProblem(m, n, k, arch=arch, out_dtype=od), fault=fault, coloured=False)
    except FaultDoesNotApply as e:
        msg = str(e)
        assert msg.startswith(fault) and "\n" not in msg
        # the kinds that apply to these programs must not claim otherwise
        assert not (fault in ("drop-arrive", "wrong-tx", "box-off-by-one", "global-before-wait", "read-before-commit"))
        assert not (fault == "no-proxy-fence" and od != "fp32" and arch == "sm_90a")
        return
    assert not rep.ok
    assert rep.problems.count(CAUGHT_BY[fault]) > 0, rep.text()
    assert not any("did not report it" in x for x in rep.problems.msgs[CAUGHT_BY[fault]])


@pytest.mark.parametrize("fault", ["early-free", "box-off-by-one", "drop-arrive", "read-before-commit"])
@pytest.mark.parametrize("shape", [(3072, 1280, 2048), (2048, 2048, 16384)])
def test_faults_in_cluster_and_stream_k_programs(fault: str, shape: tuple[int, int, int]) -> None:
    rep = check_problem(GEMM, GemmProblem(*shape, arch="sm_100a"), fault=fault, coloured=False)
    assert rep.problems.count(CAUGHT_BY[fault]) > 0, rep.text()


def test_stream_k_values_are_partial_sums() -> None:
    rep = check_problem(GEMM, GemmProblem(256, 256, 2048, arch="sm_100a"), values=True, coloured=False)  # stream-K
    assert rep.ok, rep.text()
    assert rep.values_partial > 0 and "partial sums the rest of the grid completes" in rep.summary()


def test_tmem_overlap_caught_where_two_accumulators_are_used() -> None:
    rep = check_problem(GEMM, GemmProblem(4096, 4096, 1024, arch="sm_100a"), fault="tmem-overlap", coloured=False)
    assert rep.problems.count("order") > 0
    assert any(m.startswith("tensor memory: ") for m in rep.problems.msgs["order"])


def test_golden_hang_format() -> None:
    from warpy.kernels.gemm import configure

    prob = GemmProblem(256, 256, 128)
    rep = check_problem(GEMM, prob, fault="drop-arrive", coloured=False, config=configure(prob, "bn=64,consumers=2"))
    hangs = [m for m in rep.problems.msgs["protocol"] if m.startswith("hang:")]
    # 128 x 64 tiles (set here: the rule's pick moves with the sweep's table): the stage's 128 x 64 A box and 64 x 64 B box of bf16 have landed, 24576 bytes
    assert "hang: CTA 0 warp 4 waits on stage_full[0] for the phase of parity 0: it is in phase 0, 1 of 1 arrivals to " \
           "come, -24576 bytes" in hangs


def test_golden_order_format() -> None:
    rep = check_problem(GEMM, GemmProblem(1024, 1024, 1024, arch="sm_100a"), fault="early-free", coloured=False)
    assert any(re.fullmatch(r"sbt\[\d+\]: UTCHMMA\.2CTA, warp 1 reads it and UTMALDG\.2D\.2CTA, warp 0 writes it, and "
                            r"nothing orders the two", m) for m in rep.problems.msgs["order"])


def test_colouring_change_is_reported() -> None:
    from warpy.kernels.gemm import build
    import attrs
    from warpy.isa.instr import Instr
    from warpy.isa.operands import Imm

    prog = build(GemmProblem(256, 256, 128))
    named, col = prog.kernel(), prog.coloured()
    lines = list(col.lines)
    for j, x in enumerate(lines):  # break one derived operand in the coloured text only
        if isinstance(x, Instr) and x.mark == "+" and x.name == "UIMAD":
            lines[j] = attrs.evolve(x, ops=x.ops[:2] + (Imm(x.ops[2].value + 16),) + x.ops[3:])  # type: ignore[union-attr]
            break
    from warpy.isa.text import Kernel

    rep = check_kernel(named, Kernel(col.header, tuple(lines)))
    assert rep.problems.count("coloured") > 0


def test_unknown_fault_is_one_line() -> None:
    from warpy.errors import WarpyError

    prog = E.EXAMPLES["example-pipe"]("sm_90a")
    with pytest.raises(WarpyError, match="unknown fault"):
        inject("nope", prog.kernel(), None)


def test_tmem_load_read_before_its_wait() -> None:
    from warpy.isa.instr import Instr
    from warpy.isa.text import Kernel
    from warpy.kernels.gemm import build

    k = build(GemmProblem(256, 256, 128, arch="sm_100a")).kernel()
    lines = [x for x in k.lines if not (isinstance(x, Instr) and x.mnemonic == "TCGEN05.WAIT.LD")]
    rep = check_kernel(Kernel(k.header, tuple(lines)))
    assert any("no tcgen05.wait::ld after the load" in m for m in rep.problems.msgs["order"]), rep.text()


def test_init_needs_a_sync_and_its_fence() -> None:
    from warpy.isa.instr import Instr
    from warpy.isa.text import Kernel
    from warpy.kernels.gemm import build

    k = build(GemmProblem(256, 256, 128)).kernel()
    for drop, want in (("BAR.SYNC.DEFER_BLOCKING", "and nothing orders the two"),
                       ("FENCE.MBARRIER_INIT", "no proxy fence orders the two")):
        lines = list(k.lines)
        j = next(j for j, x in enumerate(lines) if isinstance(x, Instr) and x.mnemonic == drop)
        del lines[j]
        rep = check_kernel(Kernel(k.header, tuple(lines)))
        assert any(m.startswith("stage_full[0]: ") and want in m for m in rep.problems.msgs["order"]), rep.text()


def test_reinit_and_grid_not_whole_clusters() -> None:
    import attrs
    from warpy.isa.instr import Instr
    from warpy.isa.text import Kernel
    from warpy.kernels.gemm import build

    k = build(GemmProblem(256, 256, 128)).kernel()
    lines = list(k.lines)
    j = next(j for j, x in enumerate(lines) if isinstance(x, Instr) and x.name == "SYNCS" and "EXCH" in x.mods)
    lines.insert(j, lines[j])
    rep = check_kernel(Kernel(k.header, tuple(lines)))
    assert any("again without invalidating it" in m for m in rep.problems.msgs["protocol"])
    rep = check_kernel(Kernel(attrs.evolve(k.header, cluster=(3, 1, 1)), k.lines))
    assert any("not a whole number of clusters" in m for m in rep.problems.msgs["protocol"])
