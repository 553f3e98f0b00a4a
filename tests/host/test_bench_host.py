"""warpy bench / warpy gemm without a GPU: shape parsing, the tables, the exact-check arithmetic
(bf16 rounding, output spacing), L2 rotation, progress, and the CLI's no-GPU path (`python -m warpy.cli`'s
result, from its entry point in this process: `tests/warpy_in_process.py`)."""

from __future__ import annotations

import io
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import warpy.bench as B
import warpy.numeric as N
import warpy.plan as plan
from warpy.kernels import gemm_bench as G
from warpy.errors import WarpyError
from warpy_in_process import run_cli

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------
# shapes


@pytest.mark.parametrize("text,shape", [
    ("4096x4096x1024", (4096, 4096, 1024)), ("2048", (2048, 2048, 2048)), ("1X2X3", (1, 2, 3)),
    ("8192×2048×4096", (8192, 2048, 4096)), ("3,4,5", (3, 4, 5)), (" 7 ", (7, 7, 7)),
])
def test_parse_shape(text: str, shape: tuple[int, int, int]) -> None:
    assert G.parse_shape(text) == shape


@pytest.mark.parametrize("text", ["", "1x2", "1x2x3x4", "ax2x3", "-1", "0x4x4", "4x4x", "1.5", "1e3"])
def test_parse_shape_refuses_in_one_line(text: str) -> None:
    with pytest.raises(WarpyError) as e:
        G.parse_shape(text)
    assert "\n" not in str(e.value) and repr(text) in str(e.value)


@settings(max_examples=50, deadline=None)
@given(st.tuples(st.integers(1, 10**6), st.integers(1, 10**6), st.integers(1, 10**6)))
def test_shape_text_round_trips(shape: tuple[int, int, int]) -> None:
    text = G.shape_text(shape)
    assert G.parse_shape(text.replace("³", "")) == shape


def test_default_shapes_are_the_issue_s() -> None:
    assert [G.shape_text(s) for s in G.DEFAULT_SHAPES] == [
        "1024³", "1536³", "2048³", "3072x1280x2048", "4096x4096x1024", "4096³", "8192x2048x4096", "8192³",
        "16384³", "2048x2048x16384", "1024x1024x65536"]


# ---------------------------------------------------------------------------------------------
# tables


def test_bench_table_golden() -> None:
    rows = [G.BenchRow((4096, 4096, 4096), 200.0, 190.0, "ok"),
            G.BenchRow((1024, 1024, 65536), None, 500.0, "error: no GPU"),
            G.BenchRow((8192, 2048, 4096), 160.0, 170.0, "FAIL (3 elements; max |Δ| 0.5)")]
    assert G.bench_table(rows) == (
        "shape            warpy µs  cuBLAS µs  warpy TFLOP/s  cuBLAS TFLOP/s  ratio  check\n"
        "---------------  --------  ---------  -------------  --------------  -----  ------------------------------\n"
        "4096³               200.0      190.0            687             723  0.950  ok\n"
        "1024x1024x65536         —      500.0              —             275      —  error: no GPU\n"
        "8192x2048x4096      160.0      170.0            859             808  1.062  FAIL (3 elements; max |Δ| 0.5)\n"
    )


def test_bench_summary_golden() -> None:
    """The line under the table: the rows that ran, their ratios' geometric mean, the lowest, and how
    many are below 0.97; nothing for fewer than two rows that ran."""
    rows = [G.BenchRow((4096, 4096, 4096), 200.0, 190.0, "ok"),
            G.BenchRow((1024, 1024, 65536), None, 500.0, "error: no GPU"),
            G.BenchRow((8192, 2048, 4096), 160.0, 170.0, "ok"),
            G.BenchRow((64, 4096, 4096), 10.0, 8.0, "ok")]
    assert G.bench_summary(rows) == ("3 shapes: geometric mean ratio 0.931, lowest 0.800 (64x4096x4096), "
                                     "2 below 0.97")
    assert G.bench_summary(rows[:2]) is None


def test_ratio_is_cublas_over_warpy() -> None:
    assert G.BenchRow((1, 1, 1), 2.0, 3.0, "ok").ratio == 1.5
    assert G.BenchRow((1, 1, 1), None, 3.0, "ok").ratio is None
    assert G.tflops((1000, 1000, 1000), 2.0) == pytest.approx(1000.0)


def test_overhead_and_static_tables() -> None:
    t = G.overhead_table([G.OverheadRow("warpy.gemm(a, b, out=c) 256³", 6.25, 30.0, 12.0)])
    assert t.splitlines()[0].split("  ")[0] == "call"
    assert t.splitlines()[2].split()[-4:] == ["6.2", "12.0", "30.0", "18.0"]
    s = G.static_table([["1024³", "168", "197632", "0", "772", "ok", "-", "prog"],
                        ["256³", "", "", "", "", "", "", "not built: no sm_100a GEMM program exists yet"]])
    lines = s.splitlines()
    assert lines[0].split() == ["shape", "registers", "smem", "bytes", "spill", "bytes", "loop", "instrs", "opcodes",
                                "ptxas", "warnings"]
    # each program (or why not) on its own line below the table: no column, no rule, as wide as a description
    assert lines[-2:] == ["1024³  prog", "256³   not built: no sm_100a GEMM program exists yet"]
    assert max(len(x) for x in lines[:4]) < 100


def test_png_without_matplotlib_is_one_line(tmp_path: Path) -> None:
    try:
        import matplotlib  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        msg = G.write_png([G.BenchRow((1, 1, 1), 1.0, 1.0, "ok")], str(tmp_path / "r.png"))
        assert msg.startswith("no chart: matplotlib is not installed") and "\n" not in msg
    else:
        msg = G.write_png([G.BenchRow((1, 1, 1), 1.0, 1.0, "ok")], str(tmp_path / "r.png"))
        assert (tmp_path / "r.png").stat().st_size > 0 and msg.startswith("wrote")


# ---------------------------------------------------------------------------------------------
# exact checks


def test_bf16_bits_golden() -> None:
    x = np.array([1.0, -3.0, 0.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 65504.0, 1.0 + 2**-7], dtype=np.float32)
    bits = N.bf16_bits(x)
    # ties to even: 1 + 2^-8 → 1.0 (0x3F80); 1 + 3·2^-8 → 1 + 2^-6 (0x3F82)
    assert [hex(int(b)) for b in bits] == ["0x3f80", "0xc040", "0x0", "0x3f80", "0x3f82", "0x4780", "0x3f81"]
    assert np.array_equal(N.bf16_to_f32(N.bf16_bits(np.array([-3, 3, 27], np.float32))), [-3, 3, 27])


@settings(max_examples=100, deadline=None)
@given(st.floats(-(2.0**100), 2.0**100, width=32, allow_subnormal=False))
def test_bf16_rounding_is_within_half_a_step(v: float) -> None:
    x = np.array([v], np.float32)
    back = N.bf16_to_f32(N.bf16_bits(x)).astype(np.float64)
    assert abs(back[0] - float(x[0])) <= N.output_spacing(x.astype(np.float64), "bf16")[0] / 2


def test_compare_exact() -> None:
    ref = np.array([[3.0, 300.0], [-257.0, 0.0]])
    assert N.compare_exact(ref.copy(), ref, "fp32")[0] == 0
    got = ref.copy()
    got[1, 0] = -256.0  # bf16 has 8 significant bits: -257 rounds to -256 (a half step away: allowed)
    assert N.compare_exact(got, ref, "bf16") == (0, "exact (4 elements, within the output rounding)")
    n, msg = N.compare_exact(got, ref, "fp32")
    assert n == 1 and msg == "1 of 4 elements wrong: C[1,0]=-256 want -257"
    got[0, 1] = 302.0  # a bf16 step at 300 is 2: 302 is a whole step away
    assert N.compare_exact(got, ref, "bf16")[0] == 1
    assert N.compare_exact(got, ref, "fp16")[0] == 2  # fp16 at 257 has a step of 0.25
    never_written = ref.copy()
    never_written[0, 0] = np.nan
    assert N.compare_exact(never_written, ref, "fp32")[0] == 1
    assert N.compare_exact(never_written, ref, "bf16")[0] == 1


def test_to_and_from_bits() -> None:
    x = np.array([[1.0, -2.0]], np.float32)
    assert N.to_bits(x, "bf16").dtype == np.uint16
    assert np.array_equal(N.from_bits(N.to_bits(x, "bf16"), "bf16"), x)
    assert np.array_equal(N.from_bits(N.to_bits(x, "fp16"), "fp16"), x)


# ---------------------------------------------------------------------------------------------
# rotation and progress


def test_rotation_keeps_small_shapes_out_of_the_l2() -> None:
    l2 = 50 * 2**20
    assert B.rotation(G.operand_bytes((16384, 16384, 16384), 2, 2), l2) == 1
    n = B.rotation(G.operand_bytes((1024, 1024, 1024), 2, 2), l2)
    assert n * (3 * 1024 * 1024 * 2) >= 3 * l2 and n <= 32
    assert B.rotation(G.operand_bytes((1, 1, 8), 2, 4), l2) == 32
    assert G.operand_bytes((3, 5, 7), 2, 4) == (3 * 7 + 5 * 7) * 2 + 3 * 5 * 4


def test_progress_prints_only_slow_steps() -> None:
    out = io.StringIO()
    p = B.Progress(after=0.05, stream=out)
    p("fast")
    p.done()
    p("slow")
    time.sleep(0.3)
    p.done()
    assert out.getvalue() == "slow...\n"


# ---------------------------------------------------------------------------------------------
# the CLI without a GPU (CUDA_VISIBLE_DEVICES hides any GPU)


def _warpy(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), CUDA_VISIBLE_DEVICES="")
    return run_cli(*args, timeout=240, env=env, cwd=str(REPO))


def test_cli_gemm_no_run_builds() -> None:
    r = _warpy("gemm", "256", "256", "64", "--no-run")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("program: ")
    assert " registers, " in lines[1] and " spill bytes" in lines[1]
    assert not any(ln.startswith("not run") for ln in lines)


def test_cli_gemm_without_a_gpu_says_so_and_builds() -> None:
    r = _warpy("gemm", "256", "256", "64")
    assert r.returncode == 0, r.stderr
    last = r.stdout.splitlines()[-1]
    assert last.startswith("not run: no sm_90 GPU here (") and last.endswith("); built and assembled only")


def test_cli_gemm_errors_are_one_line(tmp_path: Path) -> None:
    for args, msg in [(("256", "256", "60"), "error: K=60 rows of bf16 are 120 bytes; TMA needs a multiple of 16"),
                      (("0", "256", "64"), "error: M and N must be at least 1"),
                      (("256", "256", "64", "--out-dtype", "f64"), "error: output type 'f64' is not one of fp32, bf16, fp16"),
                      (("256", "256", "64", "--emit", "cubin"), "error: --emit cubin needs -o PATH")]:
        r = _warpy("gemm", *args)
        assert r.returncode == 2 and r.stderr.startswith(msg) and r.stderr.count("\n") == 1, (args, r.stderr)
    out = tmp_path / "g.ptx"
    r = _warpy("gemm", "256", "256", "64", "--no-run", "--emit", "ptx", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_text().startswith("// warpy lift: kernel ")


def test_cli_bench_refuses_bad_shapes_and_no_gpu() -> None:
    r = _warpy("bench", "gemm", "12x")
    assert r.returncode == 2 and r.stderr == "error: shape '12x' is not MxNxK or N (e.g. 4096x4096x1024 or 2048)\n"
    r = _warpy("bench", "conv")
    assert r.returncode == 2 and r.stderr == "error: nothing to benchmark called 'conv' (gemm or attention)\n"
    r = _warpy("bench", "gemm", "256", "--arch", "sm_100a")
    assert r.returncode == 2 and r.stderr == ("error: --arch sm_100a: timing runs on an sm_90 GPU; for sm_100a use "
                                              "--static (warpy bench gemm --arch sm_100a --static)\n")
    r = _warpy("bench", "gemm", "256")
    assert r.returncode == 2 and r.stderr.startswith("error: warpy bench needs an sm_90 GPU: ")
    assert r.stderr.count("\n") == 1 and "warpy bench gemm --static" in r.stderr
    r = _warpy("bench", "gemm", "--host-overhead")
    assert r.returncode == 2 and r.stderr.startswith("error: warpy bench --host-overhead needs an sm_90 GPU: ")
    assert r.stderr.count("\n") == 1


def test_cli_bench_static_sm100_says_so_per_shape() -> None:
    r = _warpy("bench", "gemm", "256", "128x256x64", "--static", "--arch", "sm_100a")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    rows, programs = lines[3:5], lines[6:]
    assert len(rows) == 2 and len(programs) == 2 and lines[5] == ""
    for row in rows:
        assert row.split()[5] == "ok"
    assert programs[0].startswith("256³") and "sm_100a" in programs[0]


# ---------------------------------------------------------------------------------------------
# pieces of the GPU paths that can be checked here


def test_spin_kernel_assembles() -> None:
    from warpy.lift.ptxas import assemble

    cubin = assemble(B._SPIN_PTX.format(arch="sm_90a"), "sm_90a")
    assert cubin.kernels == ("warpy_spin",)


def test_gemm_job_reports_run_check_and_time(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The run branch of `warpy gemm`, with the GPU parts replaced: what it prints, and a wrong
    result failing in one line."""
    monkeypatch.setattr(plan, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(G, "gpu_reason", lambda arch: None)
    seen: list[tuple[int, ...]] = []

    def run_check(plan: object, M: int, N: int, K: int, dtype: str, out: str) -> tuple[int, str]:
        seen.append((M, N, K))
        return 0, "exact (65536 elements)"

    monkeypatch.setattr(G, "run_check", run_check)
    monkeypatch.setattr(G, "time_plan", lambda plan, iters: 10.0)
    lines: list[str] = []
    G.gemm_job(256, 256, 64, echo=lines.append)
    assert seen == [(256, 256, 64)]
    assert lines[0].startswith("program: ")
    assert lines[-2] == "check against numpy (inputs in [-3, 3]): exact (65536 elements)"
    assert lines[-1] == "time: 10.0 µs (median of 100 calls), 0.8 TFLOP/s"
    monkeypatch.setattr(G, "run_check", lambda *a: (3, "3 of 65536 elements wrong: C[0,0]=1 want 2"))
    with pytest.raises(G.CheckFailed, match=r"^GEMM 256x256x64 gave wrong results \(3 elements\)$") as e:
        G.gemm_job(256, 256, 64, echo=lines.append)
    assert e.value.exit_status == 1 and e.value.result is not None and e.value.result["wrong_elements"] == 3


def test_progress_on_a_terminal_is_one_line_and_repeats_once() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    p = B.Progress(after=0.0, stream=out)
    for _ in range(3):
        p("256³: assembling with ptxas")
        time.sleep(0.1)
    p.done()
    text = out.getvalue()
    assert text.count("256³: assembling with ptxas...") == 1 and "\n" not in text and text.endswith("\r\x1b[K")


def test_static_progress_names_the_shape(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(plan, "cache_root", lambda: tmp_path)
    said: list[str] = []
    G.static_rows([(256, 256, 64)], "sm_90a", progress=said.append)  # type: ignore[arg-type]
    assert said and all(m.startswith("256x256x64: ") or m.startswith("256³: ") for m in said)


def test_cli_bench_layout_and_epilogue_refusals() -> None:
    for args, start in ((("--layout",), "error: warpy bench needs an sm_90 GPU: "),
                        (("--epilogue", "act=foo"), "error: activation 'foo' is not one of relu, silu"),
                        (("--layout", "--epilogue", "act=relu"), "error: --layout and --epilogue are two benchmarks")):
        r = _warpy("bench", "gemm", *args)
        assert r.returncode == 2 and r.stderr.startswith(start) and r.stderr.count("\n") == 1, (args, r.stderr)


def test_cli_check_gemm_with_an_epilogue_proves_its_values() -> None:
    r = _warpy("check", "gemm", "100", "72", "64", "bias=n", "act=gelu_erf", "alpha=0.5", "--values", "--out", "bf16")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "7200 output values computed, 0 differ from numpy" in r.stdout
    r = _warpy("check", "gemm", "64", "64", "16", "b=kn", "--arch", "sm_100a", "--config", "pairs=2")
    assert r.returncode == 2 and r.stderr == "error: B is MN-major: its tile is not multicast in slices (pairs=1)\n"


def test_the_json_rows_say_what_warpy_ran() -> None:
    """`warpy bench gemm --json`: each row names the configuration warpy ran (the rule's, with
    `--config`'s fields set by hand), spelled as the sweep's tables spell it."""
    from warpy.kernels.gemm import GemmProblem, configure
    from warpy.kernels.gemm_sweep import config_text

    row = G.BenchRow((777, 3584, 3584), 32.0, 31.0, "ok", "bn=88,staged_epilogue=1,swap_ab=1,wg_rows=128")
    rec = G.bench_json([row, G.BenchRow((1, 1, 1), None, 3.0, "error: no GPU")])
    assert rec[0]["config"] == row.config and rec[1]["config"] == "" and rec[0]["ratio"] == pytest.approx(31 / 32)
    ran = G._ran((777, 3584, 3584), "bf16", "bf16", "bn=88,swap_ab=1,wg_rows=128,staged_epilogue=1")
    assert ran == "bn=88,staged_epilogue=1,swap_ab=1,wg_rows=128"
    assert G._ran((4096, 4096, 4096), "bf16", "fp32", None) == config_text(
        configure(GemmProblem(4096, 4096, 4096, out_dtype="fp32"), None))
