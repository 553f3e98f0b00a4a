"""The megakernel's sm_90a interpreter on the CPU: it builds, prints and parses, ptxas assembles it,
the host checker runs every CTA of small elementwise graphs clean (protocol, ordering, the values
against the lowered graph's reference), and each seeded interpreter fault is caught with a message
naming the SM, the role and the instruction. The page renaming and the hang dump are checked on
their own."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from warpy.errors import WarpyError
from warpy.isa.text import parse
from warpy.kernels import mega, mega_sm90
from warpy.kernels.mega_bench import status_lines
from warpy.kernels.mega_ops import bodies
from warpy.plan import check_problem

SMALL = mega.MegaProblem("ew-small")


def test_the_interpreter_prints_and_parses_named_and_coloured() -> None:
    p = mega.build(SMALL)
    named = p.text()
    assert str(parse(named)) == named
    coloured = str(p.coloured())
    assert str(parse(coloured)) == coloured
    h = parse(named).header
    assert (h.threads, h.grid, h.dynsmem) == (384, (2, 1, 1), 230400)
    assert [n for n, _ in h.kernel_params()][-5:] == ["queue", "counters", "status", "call", "maps"]
    assert len(h.tables()["maps"]) == len(mega.plan(SMALL, mega.choose(SMALL)).encoded.maps)
    for line in ("  USETMAXREG.DEALLOC.CTAPOOL 0x38", "  ACQBULK", "  PREEXIT", "  UTMACCTL.IV tmap[op1_desc]",
                 "  DEPBAR.LE.WRITES SB0, 0x0", "  FENCE.VIEW.ASYNC.G", "  MEMBAR.ALL.GPU", "  CCTL.IVALL"):
        assert line in named.splitlines(), line


def test_ptxas_assembles_the_interpreter_for_every_sm() -> None:
    from warpy.lift.lifter import build

    cubin = build(mega.build(mega.MegaProblem("ew-chain", units=0)).kernel())  # with the disassembly check
    (res,) = cubin.resources
    assert res.spill_stores == 0 and res.registers <= 168


@pytest.mark.parametrize("values", [pytest.param(False, marks=pytest.mark.skipif(
    os.environ.get("WARPY_SLOW") != "1", reason="WARPY_SLOW=1 (7 s: the run with values checks the same protocol too)")),
    True])
def test_warpy_check_mega_is_clean(values: bool) -> None:
    """The generic path (`warpy check mega ew-small [--values]`): every CTA, the coloured text too."""
    rep = check_problem(mega.FAMILY, mega.FAMILY.problem(["ew-small"], arch="sm_90a"), values=values)
    assert rep.ok, rep.text()
    assert rep.steps > 20_000 and rep.uses_pdl
    if values:
        assert rep.values_checked == 440 and rep.values_wrong == 0


@pytest.mark.parametrize("graph,tokens,units", [("ew-chain", None, 2), ("ew-wide", None, 2), pytest.param(
    "ew-small", 40, 1, marks=pytest.mark.skipif(os.environ.get("WARPY_SLOW") != "1", reason="WARPY_SLOW=1 (one unit, "
                                                "14 s: the two-unit cases cover the bodies)"))])
def test_check_launch_is_clean(graph: str, tokens: Any, units: int) -> None:
    """Stacked weights' rows, rows wider than a box, rank 3, a slice, several rows a tile, one unit."""
    rep = mega.check_launch(mega.MegaProblem(graph, tokens, units=units), coloured=units == 2)
    assert rep.ok, rep.text()
    assert rep.values_checked > 0 and rep.values_wrong == 0


SLOW = os.environ.get("WARPY_SLOW") == "1"


CHUNKED = os.path.join(os.path.dirname(__file__), "graphs", "mlp_chunked.py")
SPLIT = os.path.join(os.path.dirname(__file__), "graphs", "gemm_split.py")


@pytest.mark.skipif(not SLOW, reason="WARPY_SLOW=1 (71 s)")
def test_the_weights_prefetch_into_l2_is_clean_with_values() -> None:
    """`prefetch=1` (off by default: slower on the H200): the decode gemms' prefetches of their
    weight's later stages, through the fenced table slots, with 16-byte-aligned starts."""
    p = mega.MegaProblem("llama-small", 1)
    rep = mega.check_launch(p, mega.configure(p, "prefetch=1"), coloured=False)
    assert rep.ok, rep.text()
    assert rep.values_checked > 0 and rep.values_wrong == 0


@pytest.mark.parametrize("graph", ["gemm-small", "gemm-epi", "acts", CHUNKED, SPLIT] + [
    pytest.param(g, marks=pytest.mark.skipif(not SLOW, reason="WARPY_SLOW=1")) for g in ("mlp-small", "llama-small")])
def test_the_op_bodies_are_clean_with_values(graph: str) -> None:
    """Every CTA, with values: gemm tiles of 64 and 128 rows with ragged M, N and K (a K box past the
    edge, rows past x zero-filled and clipped), bias rows and a per-row column, relu, gelu and silu
    in the epilogue, a residual with and without a bias, gemm after gemm on a unit (the stage ring's
    position carried over); silu, gelu, silu_mul; rmsnorm over rows wider than a box; the MLPs; a
    decode layer whose K is whole K boxes (a stage's boxes one copy an operand, a stage past K); two
    gemms of one tile shape with A boxes of 8 rows (chunked) and 24 (not), told apart by the consumers."""
    rep = mega.check_launch(mega.MegaProblem(graph), coloured=False)
    assert rep.ok, rep.text()
    assert rep.values_checked > 0 and rep.values_wrong == 0


def test_warpy_check_mega_mlp3_with_values_models_the_other_ctas() -> None:
    """`warpy check mega mlp3 --values`: too large for every CTA on 2 units, so every SM (132), the
    first and last CTA simulated, the others' counters raised and their data the reference's; the
    elements the simulated CTAs wrote (CTA 0's 64x128 tile of the last layer) equal the reference."""
    pr = mega.FAMILY.problem(["mlp3"], arch="sm_90a")
    assert pr.units == 0 and mega.check_units(mega.MegaProblem("mlp-small")) == mega.CHECK_UNITS
    rep = check_problem(mega.FAMILY, pr, values=True)
    assert rep.ok, rep.text()
    assert rep.values_checked == 64 * 128 and rep.values_wrong == 0


def test_the_gemm_body_refuses_what_it_cannot_compute() -> None:
    from warpy.kernels.mega_gemm import Gemm

    pl = mega.plan(mega.MegaProblem("gemm-epi"), mega.MegaConfig())
    from warpy.mega.encode import decode

    f = next(x for x in decode(pl.encoded.words) if x["opcode"] == 1)
    g = Gemm()
    assert g.refuse(f) is None
    assert "tile of 64x48" in (g.refuse({**f, "tile_n": 48}) or "")
    assert "a gemm stage of" in (g.refuse({**f, "k_boxes": f["k_boxes"] + 1}) or "")
    assert "transposed-B" in (g.refuse({**f, "b_kmajor": 0}) or "")


@pytest.fixture(scope="module")
def hung() -> Any:
    return mega.check_launch(SMALL, mega.MegaConfig(fault="drop-arrive"), coloured=False)


FOUND = r"\[found by SM [01], the (loader|storer), at instruction \d+ \(wave \d+: node \d+ \w+\)\]"


_CLEAN: dict[Any, Any] = {}


def _clean_small(slow: Any) -> Any:
    """The fault cases' clean run of SMALL (the same check for the two cases without a slow CTA: once)."""
    if slow not in _CLEAN:
        _CLEAN[slow] = mega.check_launch(SMALL, coloured=False, slow=slow)
    return _CLEAN[slow]


@pytest.mark.parametrize("fault,slow,kind,what", [
    ("no-release", None, "order", "UTMASTG.2D, warp 2 writes it and UTMALDG.2D, warp 1 reads it, and nothing orders"),
    ("early-page-free", None, "order", "pages: UTMASTG.2D, warp 2 reads it and UTMALDG.2D, warp 1 writes it, and "
                                       "nothing orders the two"),
    ("wrong-epoch", 1, "order", "UTMALDG.2D, warp 1 reads it and UTMASTG.2D, warp 2 writes it, and nothing orders"),
])
def test_seeded_faults_are_caught_naming_the_sm_and_instruction(fault: str, slow: Any, kind: str, what: str) -> None:
    import re

    clean = _clean_small(slow)
    assert clean.ok, clean.text()
    rep = mega.check_launch(SMALL, mega.MegaConfig(fault=fault), coloured=False, slow=slow)
    msgs = list(rep.problems.msgs[kind])
    assert any(what in m and re.search(FOUND, m) for m in msgs), rep.text()


def test_early_copies_of_a_written_operand_are_caught() -> None:
    """The loader copies a gemm's weight (B: the instruction's early bit) before its load-stage
    waits; the seeded `early-all` copies the activation (A, written by the previous gemm) there too,
    and the checker finds the second gemm's load of it unordered with the first gemm's store."""
    import re

    mlp = mega.MegaProblem("mlp-small")
    rep = mega.check_launch(mlp, mega.MegaConfig(fault="early-all"), coloured=False)
    msgs = list(rep.problems.msgs["order"])
    assert any("UTMASTG.2D, warp 2 writes it and UTMALDG.2D, warp 1 reads it, and nothing orders" in m
               and re.search(r"\[found by SM [01], the loader, at instruction \d+ \(wave \d+: node \d+ gemm ", m)
               for m in msgs), rep.text()


def test_a_dropped_arrive_is_a_hang_naming_the_waiter(hung: Any) -> None:
    msgs = list(hung.problems.msgs["protocol"])
    assert "hang: SM 0, the loader, at instruction 14 (wave 7: node 3 add) waits on counter 7 for 1 arrivals and " \
           "has 0; no CTA will arrive" in msgs
    assert any(m.startswith("hang: SM 1, the storer") for m in msgs)


def test_the_hang_dump_from_the_status_words(hung: Any) -> None:
    """What `warpy mega run` prints at its deadline, here from the status words the checker's run left."""
    pl = mega.plan(SMALL, mega.MegaConfig(fault="drop-arrive"))
    lines = status_lines(pl, hung.data["hang_status"], hung.data["hang_counters"])
    assert "SM 0: the loader waits before the loads of instruction 14 (node 3 add) on counter 7: saw 0, now 0, " \
           "waits for 1 (call 1)" in lines
    assert any(x.startswith("SM 1: the storer waits before the stores of instruction 13") for x in lines)
    words = np.zeros(2 * mega_sm90.STATUS_WORDS, dtype=np.uint32)
    assert status_lines(pl, words) == ["2 SMs: no counter wait pending (done, or running)"]


def test_page_renaming_hands_the_first_freed_page_to_the_next_first_load() -> None:
    order = mega_sm90.IDENTITY_ORDER
    seen = []
    table = bodies()
    for body in (table[2], table[3], table[3], table[0], table[2]):
        rel = mega_sm90.full_release(body.pages, body.release)
        assert sorted(rel) == list(range(mega_sm90.PAGES))
        assert rel[mega_sm90.PAGES - body.pages:] == body.release  # the pages it does not use go first
        new = mega_sm90.rename(order, rel)
        assert (new & 7) == (order >> (3 * rel[0])) & 7  # lid 0 is the page released first
        assert sorted((new >> (3 * q)) & 7 for q in range(7)) == list(range(7))
        seen.append(new)
        order = new
    assert len(set(seen)) > 1
    with pytest.raises(WarpyError, match="permutation"):
        mega_sm90.release_word([0, 0, 1, 2, 3, 4, 5])


def _xw_graph() -> str:
    """A FILE.py graph with x·W (W as (K, N)): the sm_90a gemm body refuses it."""
    import os
    import tempfile

    path = os.path.join(tempfile.mkdtemp(prefix="warpy-mega-"), "xw.py")
    with open(path, "w") as f:
        f.write("from warpy.mega.graph import Graph\n"
                "g = Graph('xw')\n"
                "graph = g\n"
                "g.output(g.matmul(g.input('x', (8, 64)), g.input('w', (64, 32))))\n")
    return path


@pytest.mark.parametrize("problem,config,what", [
    (lambda: mega.MegaProblem(_xw_graph()), None, "gemm x·W (W as (K, N), N contiguous) needs wgmma's transposed-B form"),
    (lambda: mega.MegaProblem("ew-small", 0), None, "tokens must be a positive integer"),
    (lambda: mega.MegaProblem("nope"), None, "no graph called 'nope'"),
    (lambda: SMALL, "mode=dynamic", "runs static queues"),
    (lambda: SMALL, "fault=nope", "fault 'nope' is not one of"),
    (lambda: mega.MegaProblem("attn-small", arch="sm_100a"), "fresh=1", "fresh: decode attention's old and appended"),
])
def test_refused_in_one_line(problem: Any, config: Any, what: str) -> None:
    with pytest.raises(WarpyError) as e:
        pr = problem()
        mega.build(pr, mega.configure(pr, config) if config else None)
    assert what in str(e.value) and "\n" not in str(e.value)


def test_the_family_reads_graph_tokens_and_units() -> None:
    pr = mega.FAMILY.problem(["ew-chain", 8, 1], arch="sm_90a")
    assert (pr.graph, pr.tokens, pr.units) == ("ew-chain", 8, 1)
    with pytest.raises(WarpyError, match="takes a graph"):
        mega.FAMILY.problem([4, 4], arch="sm_90a")


def test_bind_lays_the_parameters_out_by_name() -> None:
    """The table is encoded over each slot's buffer (at its offset) and uploaded; the call number and
    pointers go where the header says (no driver: a fake encoder and upload)."""
    from warpy.runtime.launcher import Scalar
    from warpy.runtime.tensormap import TensorMap

    pl = mega.plan(SMALL, mega.choose(SMALL))
    header = mega.build(SMALL).header(with_regs=False)
    memory = {f"buf{b}": 0x10000 * (b + 1) for b, _ in pl.launch.buffers}
    memory.update(queue=0x900000, counters=0xA00000, status=0xB00000)
    uploads: list[bytes] = []

    def encode(box: Any, address: int) -> TensorMap:
        return TensorMap(address.to_bytes(8, "little") + bytes(120), box, address)

    def upload(data: bytes) -> int:
        uploads.append(data)
        return 0xC00000

    params = mega.bind(header, memory, 7, encode=encode, upload=upload)
    names = [n for n, _ in header.kernel_params()]
    got = dict(zip(names, params))
    assert isinstance(got["call"], Scalar) and got["call"].value == 7
    assert got["maps"].value == 0xC00000 and got["queue"].value == 0x900000
    (table,) = uploads
    assert len(table) == 128 * len(pl.encoded.maps)
    for m in pl.encoded.maps:
        assert int.from_bytes(table[128 * m.index:128 * m.index + 8], "little") == memory[f"buf{m.buffer}"] + m.offset
    mega.bind(header, memory, 8, encode=encode, upload=upload)
    assert len(uploads) == 1  # the same binding: the table is uploaded once


def test_the_gpu_runner_up_to_the_launch_and_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    """`MegaRunner` (what `warpy mega run` and tests/gpu/test_mega_gpu.py drive) against a fake
    driver: the cubin loads, the launch has the header's geometry, PDL from the second call, the
    parameters by name (the table's address, the call number); a call past its deadline raises with
    where each SM stands, read from the host-visible status words the device would have written."""
    import ctypes

    from fake_cuda_driver import CUresult, fake_driver, install, launch_args

    from warpy.kernels.mega_bench import MegaRunner
    from warpy.runtime.launcher import HangError
    from warpy.runtime.tensormap import TensorMap

    launches: list[tuple[Any, dict[str, int]]] = []
    keep: list[Any] = []
    header: list[Any] = []
    pending = {"stuck": False}

    def on_call(name: str, args: tuple[Any, ...], result: Any) -> None:
        if name == "cuLaunchKernelEx":
            launches.append((args[0], launch_args(header[0], args[2])))

    def host_alloc(n: int, flags: int) -> Any:
        buf = (ctypes.c_ubyte * n)()
        keep.append(buf)
        return (CUresult.CUDA_SUCCESS, ctypes.addressof(buf))

    drv = fake_driver(on_call, cuStreamQuery=lambda s: (CUresult.CUDA_ERROR_NOT_READY,) if pending["stuck"]
                      else (CUresult.CUDA_SUCCESS,))
    drv.cuMemHostAlloc = host_alloc
    drv.cuMemHostGetDevicePointer = lambda host, flags: (CUresult.CUDA_SUCCESS, host)
    drv.cuMemFreeHost = lambda host: (CUresult.CUDA_SUCCESS,)
    install(monkeypatch, drv)
    r = MegaRunner(SMALL, deadline=0.05,
                   encode=lambda box, address: TensorMap(address.to_bytes(8, "little") + bytes(120), box, address))
    header.append(r.header)
    r.upload(mega.inputs(r.plan))
    r.launch()
    r.launch()
    (cfg1, p1), (cfg2, p2) = launches
    assert (cfg1.gridDimX, cfg1.blockDimX, cfg1.sharedMemBytes) == (2, 384, 230400)
    assert (cfg1.numAttrs, cfg2.numAttrs) == (0, 1)  # programmatic dependent launch from the second call
    assert (p1["call"], p2["call"]) == (1, 2) and p1["maps"] == p2["maps"] != 0
    assert p1["status"] == r.status.ptr and p1["queue"] == r.queue.ptr
    # the device is stuck: the loader of SM 1 waits on counter 3 (what its status words say)
    words = r.status.array(np.uint32).reshape(2, mega_sm90.STATUS_WORDS)
    words[1, 8:14] = [19 + 1, (1 << 8) | 1, 3, 2, 1, 2]
    pending["stuck"] = True
    with pytest.raises(HangError) as e:
        r.wait()
    assert str(e.value).splitlines()[1:] == [
        "SM 1: the loader waits before the loads of instruction 19 (node 4 add) on counter 3: saw 1, waits for 2 "
        "(call 2)", "1 SM: no counter wait pending (done, or running)"]


def test_the_command_line_takes_a_graph() -> None:
    """`warpy check mega GRAPH`: the check verb passes a family a word that is no size."""
    from warpy_in_process import run_cli

    out = run_cli("check", "mega", "ew-small", timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 protocol problems" in out.stdout and "0 accesses nothing orders" in out.stdout
    bad = run_cli("check", "gemm", "abc", "1", "1", timeout=120)
    err = bad.stderr.strip()  # (the gemm family's own wording: one line naming the word)
    assert bad.returncode == 2 and err.startswith("error: ") and "'abc'" in err and "\n" not in err, err


def test_a_hang_leaves_without_the_interpreters_exit(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """`warpy mega run` on a hang prints the report and leaves by os._exit(1): the kernel still runs,
    and the interpreter's exit would free device memory, which waits for it (on the H200 the process
    never ended)."""
    import warpy.kernels.mega_bench as mb
    from warpy.mega import cli
    from warpy.runtime.launcher import HangError

    def hang(*a: Any, **k: Any) -> bool:
        raise HangError("hang: kernel k did not finish within 5 s\nSM 0: the loader waits")

    class Left(Exception):
        pass

    def leave(code: int) -> None:
        raise Left(code)

    monkeypatch.setattr(mb, "run_job", hang)
    monkeypatch.setattr(cli.os, "_exit", leave)
    with pytest.raises(Left) as e:
        cli.run_cmd("ew-small", None, 0, 1, 5.0, True, 0, False, None)
    assert e.value.args == (1,)
    assert capsys.readouterr().out.splitlines() == ["hang: kernel k did not finish within 5 s", "SM 0: the loader waits"]


def test_the_poll_back_off_ceiling_is_the_rules_and_the_programs() -> None:
    """The rule's ceiling on sm_90a is 128 ns: the counter polls sleep min(back-off, 128) ns
    (`NANOSLEEP` of a capped register), while the status words still reach the host when the back-off
    reaches 1024 ns; `backoff=1024` is the program without the cap. Each proven on two units with
    values (`backoff=64` too); values the interpreter cannot take are refused."""
    p = mega.MegaProblem("ew-chain", units=2)
    assert mega.choose(p).backoff == 128
    assert mega.choose(mega.MegaProblem("ew-chain", units=2, arch="sm_100a")).backoff == 1024
    base = [line.split() for line in mega.build(p, mega.configure(p, "backoff=1024")).text().splitlines()]
    assert {w[1] for w in base if w[:1] == ["NANOSLEEP"]} == {"backoff_ns"}
    for config, cap in (("", "0x80,"), ("backoff=64", "0x40,")):
        cfg = mega.configure(p, config)
        lines = [line.split() for line in mega.build(p, cfg).text().splitlines()]
        sleeps = [w[1] for w in lines if w[:1] == ["NANOSLEEP"]]
        assert sleeps and set(sleeps) == {"backoff_nap"}  # every poll sleeps the capped register
        caps = {(w[1], w[3]) for w in lines if w[:1] == ["VIMNMX.U32"] and w[1].startswith("backoff_")}
        assert caps == {("backoff_nap,", cap), ("backoff_ns,", "0x400,")}  # the ceiling; the flush's point
        rep = mega.check_launch(p, cfg, coloured=False)
        assert rep.ok, rep.text()
        assert rep.values_checked > 0 and rep.values_wrong == 0
    for bad in ("backoff=48", "backoff=16", "backoff=2048"):
        with pytest.raises(WarpyError, match="power of two from 32 to 1024"):
            mega.configure(p, bad)
    with pytest.raises(WarpyError, match="sm_90a interpreter's"):
        mega.configure(mega.MegaProblem("ew-chain", units=2, arch="sm_100a"), "backoff=128")
