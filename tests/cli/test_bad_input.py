"""Bad input, and the edges a new user hits (issue 20), through the `warpy` command and through the
Python API. Every refusal is one line `error: ...` on stderr naming the problem (and the fix where
there is one), nothing on stdout, never "internal error" or a traceback; the exit status is 2 for
refused input, 1 for a failed check, 0 for success.

The table's cases run the command's entry point in this process (`run_warpy_here`: the same exit
status, stdout and stderr, without a Python start and warpy's imports per case);
`test_in_process_runs_are_the_commands_runs` runs one case of each kind through the real `warpy`
command too and compares, and the traceback switch and the pipe run the real command."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Optional

import attrs
import numpy as np
import pytest

from warpy.errors import WarpyError

from warpy_command import run_warpy, run_warpy_here

DEEP = "(" * 2000 + "4" + ")" * 2000


@attrs.frozen
class Case:
    """`warpy *args` (in a folder holding the files below) must exit `code`; a refusal's one line
    contains each of `says`; a success's stdout contains each of `prints`."""

    args: tuple[str, ...]
    code: int
    says: tuple[str, ...] = ()
    prints: tuple[str, ...] = ()
    stdin: Optional[str] = None


CASES: dict[str, Case] = {
    # --- issue 20, point by point --------------------------------------------------------------
    "layout-reads-the-swizzle-notation-it-prints": Case(("layout", "Sw<3,4,3> o (8,8):(8,1)"), 0,
                                                        prints=("Sw<3,4,3> o (8,8):(8,1)\n",)),
    "layout-make_layout": Case(("layout", "make_layout((4,8))"), 0, prints=("(4,8):(1,4)\n",)),
    "layout-composition-with-a-swizzle": Case(("layout", "composition(Swizzle(3,4,3), (8,8):(8,1))"), 0,
                                              prints=("Sw<3,4,3> o (8,8):(8,1)",)),
    "layout-right_inverse-of-a-swizzle": Case(("layout", "right_inverse(Swizzle(3,4,3))"), 0, prints=("Sw<3,4,3>",)),
    "layout-2000-nested-parentheses": Case(("layout", DEEP), 2, says=("nested deeper than 64 levels",)),
    "layout-huge-table-is-bounded": Case(("layout", "(1000000,1000000):(1,1000000)", "--table"), 0,
                                         prints=("(1000000,1000000):(1,1000000)\n", "...")),
    "gemm-operands-beyond-the-gpu-memory": Case(("gemm", "1000000", "1000000", "1000000"), 2,
                                                says=("need 8000000000000 bytes", "H200", "give smaller sizes")),
    "gemm-4e6-by-4e6-answers-at-once": Case(("gemm", "4000000", "4000000", "8", "--no-run"), 2,
                                            says=("need 64000128000000 bytes",)),
    "bench-static-bad-arch": Case(("bench", "gemm", "--arch", "sm_75", "--static"), 2,
                                  says=("target 'sm_75' is not one of sm_90a, sm_100a",)),
    "bench-static-bad-config": Case(("bench", "gemm", "512", "--config", "nonsense=1", "--static"), 2,
                                    says=("Sm90Config has no field 'nonsense'", "fields: bn")),
    "bench-bad-arch-without-a-gpu": Case(("bench", "gemm", "--arch", "sm_75"), 2, says=("'sm_75' is not one of",)),
    "bench-sm100-times-only-statically": Case(("bench", "gemm", "--arch", "sm_100a"), 2,
                                              says=("warpy bench gemm --arch sm_100a --static",)),
    "bench-without-a-gpu-suggests-static": Case(("bench", "gemm", "1024"), 2,
                                                says=("needs an sm_90 GPU", "warpy bench gemm --static")),
    "hb-names-itself": Case(("hb", "kernel"), 2, says=("warpy hb takes a kernel family", "no such file")),
    "hb-of-a-binary-file": Case(("hb", "binary.sass"), 2, says=("binary.sass is not a text file",)),
    "lift-a-binary-file": Case(("lift", "binary.sass"), 2, says=("binary.sass is not a text file",)),
    "check-a-binary-file": Case(("check", "binary.sass"), 2, says=("binary.sass is not a text file",)),
    "check-a-binary-file-of-another-name": Case(("check", "binary.bin"), 2, says=("binary.bin is not a text file",)),
    "gemm-o-into-a-missing-folder": Case(("gemm", "512", "512", "512", "--emit", "sass", "-o", "nodir/x.sass",
                                          "--no-run"), 2, says=("the folder nodir does not exist", "create it")),
    "lift-o-into-a-missing-folder": Case(("lift", "tiny.sass", "-o", "nodir/k.ptx"), 2,
                                         says=("the folder nodir does not exist",)),
    "check-dump-into-a-missing-folder": Case(("check", "gemm", "128", "128", "64", "--values", "--dump",
                                              "nodir/c.npz"), 2, says=("the folder nodir does not exist",)),
    "bench-png-into-a-missing-folder": Case(("bench", "gemm", "--png", "nodir/r.png"), 2,
                                            says=("the folder nodir does not exist",)),
    "expand-user-build-raises": Case(("expand", "raises.py"), 2,
                                     says=("raises.py:6: build() raised ValueError: my own bug", "in your file")),
    "expand-user-file-has-a-syntax-error": Case(("expand", "syntax.py"), 2,
                                                says=("syntax.py:2: importing it: SyntaxError",)),
    "expand-user-file-fails-on-import": Case(("expand", "imports.py"), 2,
                                             says=("imports.py:1: importing it raised ModuleNotFoundError",)),
    "gemm-h": Case(("gemm", "-h"), 0, prints=("Usage: warpy gemm [OPTIONS] M N K", "--out-dtype TYPE")),
    "negative-number-is-a-number": Case(("gemm", "-4", "4", "4"), 2, says=("M and N must be at least 1 (got M=-4",)),
    "negative-size-in-check": Case(("check", "gemm", "128", "128", "-64"), 2, says=("K must be at least 8 (got -64)",)),
    "negative-shape-in-bench": Case(("bench", "gemm", "-4"), 2, says=("shape '-4' is not MxNxK or N",)),
    "check-takes-out-dtype": Case(("check", "gemm", "128", "128", "64", "--out-dtype", "f64"), 2,
                                  says=("output type 'f64' is not one of fp32, bf16, fp16",)),
    "check-keeps-out-as-alias": Case(("check", "gemm", "128", "128", "64", "--out", "f64"), 2,
                                     says=("output type 'f64' is not one of fp32, bf16, fp16",)),
    "traceback-switch-is-documented": Case(("-h",), 0, prints=("WARPY_TRACEBACK=1", "Without a GPU")),
    # --- more of the same kind --------------------------------------------------------------------
    "gemm-k-not-a-multiple-of-8": Case(("gemm", "256", "256", "60"), 2,
                                       says=("K=60 rows of bf16 are 120 bytes", "K a multiple of 8")),
    "gemm-zero-m": Case(("gemm", "0", "256", "64"), 2, says=("M and N must be at least 1",)),
    "gemm-not-an-integer": Case(("gemm", "256", "256", "abc"), 2, says=("warpy gemm: invalid value for 'K'",
                                                                        "warpy gemm -h shows the usage")),
    "gemm-missing-argument": Case(("gemm", "4", "4"), 2, says=("warpy gemm: missing argument 'K'",)),
    "gemm-unknown-option": Case(("gemm", "4", "4", "4", "--bogus"), 2, says=("no such option: --bogus",)),
    "gemm-bad-input-type": Case(("gemm", "256", "256", "64", "--dtype", "fp8"), 2, says=("'fp8'",)),
    "gemm-bad-output-type": Case(("gemm", "256", "256", "64", "--out-dtype", "f64"), 2,
                                 says=("output type 'f64' is not one of fp32, bf16, fp16",)),
    "gemm-bad-emit": Case(("gemm", "256", "256", "64", "--emit", "elf"), 2, says=("--emit 'elf' is not one of",)),
    "gemm-cubin-needs-o": Case(("gemm", "256", "256", "64", "--emit", "cubin"), 2, says=("--emit cubin needs -o PATH",)),
    "gemm-o-without-emit": Case(("gemm", "256", "256", "64", "-o", "x.ptx"), 2, says=("-o PATH goes with --emit",)),
    "gemm-o-is-a-folder": Case(("gemm", "256", "256", "64", "--emit", "ptx", "-o", "adir"), 2,
                               says=("-o adir is a folder; give a file name",)),
    "gemm-zero-iters": Case(("gemm", "256", "256", "64", "--iters", "0"), 2, says=("--iters 0 must be at least 1",)),
    "gemm-bad-arch": Case(("gemm", "256", "256", "64", "--arch", "sm_75"), 2, says=("'sm_75' is not one of",)),
    "gemm-config-not-key-value": Case(("gemm", "256", "256", "64", "--config", "nonsense"), 2,
                                      says=("'nonsense' is not KEY=VALUE",)),
    "gemm-config-bad-value": Case(("gemm", "256", "256", "64", "--config", "bn=abc"), 2,
                                  says=("bn='abc': Sm90Config.bn takes an integer",)),
    "gemm-json-and-emit-to-stdout": Case(("gemm", "256", "256", "64", "--json", "--emit", "sass"), 2,
                                         says=("--json prints on stdout", "-o PATH")),
    "gemm-b200-operands-beyond-its-memory": Case(("gemm", "300000", "300000", "64", "--arch", "sm_100a"), 2,
                                                 says=("B200", "bytes")),
    "bench-unknown-what": Case(("bench", "conv"), 2, says=("nothing to benchmark called 'conv' (gemm or attention)",)),
    "bench-bad-shape": Case(("bench", "gemm", "12x"), 2, says=("shape '12x' is not MxNxK or N",)),
    "bench-zero-iters": Case(("bench", "gemm", "--iters", "0"), 2, says=("--iters 0 must be at least 1",)),
    "bench-static-with-png": Case(("bench", "gemm", "--static", "--png", "r.png"), 2,
                                  says=("--png and --host-overhead time on a GPU",)),
    "bench-static-shape-beyond-memory": Case(("bench", "gemm", "1000000", "--static"), 2, says=("bytes",)),
    "bench-png-without-matplotlib-before-any-work": Case(("bench", "gemm", "--png", "r.png"), 2,
                                                         says=("matplotlib", "pip install -e '.[plot]'")),
    "bench-host-overhead-with-config": Case(("bench", "gemm", "--host-overhead", "--config", "bn=128"), 2,
                                            says=("drop --config",)),
    "check-wrong-number-of-sizes": Case(("check", "gemm", "1", "2"), 2, says=("gemm",)),
    "check-missing-file": Case(("check", "nosuch.sass"), 2, says=("cannot read nosuch.sass",)),
    "check-unknown-fault": Case(("check", "gemm", "64", "64", "64", "--fault", "x"), 2, says=("x",)),
    "check-file-with-sizes": Case(("check", "tiny.sass", "4"), 2, says=("a FILE.sass takes no sizes",)),
    "check-file-with-values": Case(("check", "tiny.sass", "--values"), 2,
                                   says=("--values needs a kernel family", "warpy check gemm M N K --values")),
    "check-cluster-m-3": Case(("check", "gemm", "384", "256", "192", "--cluster-m", "3"), 2, says=("cluster",)),
    "check-cluster-m-on-sm100": Case(("check", "gemm", "256", "256", "64", "--arch", "sm_100a", "--cluster-m", "2"), 2,
                                     says=("--cluster-m is an sm_90a option",)),
    "check-a-text-that-is-not-sass": Case(("check", "junk.sass"), 2, says=("1:1: an instruction line", "(in junk.sass)")),
    "check-operands-beyond-the-gpu-memory": Case(("check", "gemm", "1000000", "1000000", "64"), 2,
                                                 says=("need", "bytes", "give smaller sizes")),
    "check-standard-input-not-sass": Case(("check", "-"), 2, says=("(in standard input)",), stdin="hello\n"),
    "hb-wrong-number-of-sizes": Case(("hb", "gemm", "1", "2"), 2, says=("gemm",)),
    "lift-missing-file": Case(("lift", "missing.sass"), 2, says=("cannot read missing.sass",)),
    "lift-bad-output-suffix": Case(("lift", "tiny.sass", "-o", "k.bin"), 2, says=("must end in .ptx or .cubin",)),
    "lift-empty-standard-input": Case(("lift", "-"), 2, says=(),  stdin=""),
    "expand-unknown-target": Case(("expand", "no-such-thing"), 2, says=("is neither an example", "no such file")),
    "expand-file-without-build": Case(("expand", "nobuild.py"), 2, says=("defines no build()",)),
    "expand-build-returns-no-program": Case(("expand", "returns_int.py"), 2, says=("build() returned int, not a Program",)),
    "expand-bad-arch": Case(("expand", "example-pipe", "--arch", "sm_75"), 2, says=("'sm_75' is not one of",)),
    "expand-a-text-that-is-not-sass": Case(("expand", "junk.sass"), 2, says=("(in junk.sass)",)),
    "layout-unknown-function": Case(("layout", "nonsense(("), 2, says=("unknown function 'nonsense'",)),
    "layout-composition-that-runs-past": Case(("layout", "composition(4:1, 8:1)"), 2, says=("runs past",)),
    "layout-empty": Case(("layout", ""), 2, says=("ends early",)),
    "unknown-command": Case(("frobnicate",), 2, says=("no such command 'frobnicate'", "warpy -h shows the usage")),
    "no-arguments-is-help": Case((), 0, prints=("Usage: warpy [OPTIONS] COMMAND",)),
    "version": Case(("--version",), 0, prints=("warpy 0.1.0",)),
}

FILES: dict[str, str | bytes] = {
    "binary.sass": bytes(range(256)) * 4,
    "binary.bin": b"\x00\xff\xfe" * 100,
    "junk.sass": "hello\n",
    "raises.py": "from warpy.isa.program import Program\n\n\ndef build(arch):\n    p = Program('k', arch, threads=32)\n"
                 "    raise ValueError('my own bug')\n",
    "syntax.py": "def build(arch):\n    return (\n",
    "imports.py": "import no_such_module_anywhere\n",
    "nobuild.py": "x = 1\n",
    "returns_int.py": "def build():\n    return 3\n",
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("bad_input")
    for name, content in FILES.items():
        if isinstance(content, bytes):
            (d / name).write_bytes(content)
        else:
            (d / name).write_text(content)
    (d / "adir").mkdir()
    from warpy.kernels.probes import PROBES

    (d / "tiny.sass").write_text(PROBES["tma_copy_2d"].build("sm_90a").text())
    return d


@pytest.mark.parametrize("name", list(CASES))
def test_cli(name: str, folder: Path) -> None:
    case = CASES[name]
    r = run_warpy_here(*case.args, cwd=folder, stdin=case.stdin)
    assert r.returncode == case.code, (case.args, r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    if case.code == 0:
        for text in case.prints:
            assert text in r.stdout, (text, r.stdout[:3000])
        return
    assert r.stdout == "", r.stdout[:2000]
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(("error: ", f"{case.args[1] if len(case.args) > 1 else ''}")), \
        r.stderr
    for text in case.says:
        assert text in r.stderr, (text, r.stderr)


# one case of each kind: output on stdout, a usage error (click's), a refusal (WarpyError), standard
# input, a user's file that raises, the help laid out (its width), the no-GPU path, empty input
BOTH_WAYS = ["layout-make_layout", "gemm-not-an-integer", "gemm-k-not-a-multiple-of-8", "check-standard-input-not-sass",
             "expand-user-build-raises", "no-arguments-is-help", "bench-without-a-gpu-suggests-static",
             "lift-empty-standard-input"]


def test_in_process_runs_are_the_commands_runs(folder: Path) -> None:
    """The real `warpy` command and `run_warpy_here` give the same exit status, stdout and stderr."""
    for name in BOTH_WAYS:
        case = CASES[name]
        real = run_warpy(*case.args, cwd=folder, stdin=case.stdin)
        here = run_warpy_here(*case.args, cwd=folder, stdin=case.stdin)
        assert (here.returncode, here.stdout, here.stderr) == (real.returncode, real.stdout, real.stderr), name


def test_the_table_is_as_large_as_the_issue_asks() -> None:
    assert len(CASES) + len(API_CASES) >= 25 + 30


def test_help_has_no_type_tags_and_whole_sentences() -> None:
    """Every command's -h: no `<bool>`/`<str>`/`<int>` tags, and the command list carries each
    docstring's first paragraph whole (no line ends in the middle of a sentence and then a gap)."""
    for cmd in ("layout", "expand", "lift", "gemm", "bench", "check", "hb", "doctor"):
        r = run_warpy_here(cmd, "-h")
        assert r.returncode == 0 and r.stdout.startswith(f"Usage: warpy {cmd} [OPTIONS]"), (cmd, r.stderr)
        for tag in ("<bool>", "<str>", "<int>", "<list"):
            assert tag not in r.stdout, (cmd, tag)
    top = run_warpy_here("--help").stdout
    assert re.search(r"\n  gemm +C = A·Bᵀ: pick the program, build, lift and assemble it; on a GPU\n", top), top
    for cmd in ("gemm", "bench", "check"):  # one default output type, spelled one way
        flat = " ".join(run_warpy_here(cmd, "-h").stdout.split())
        assert "fp32 (also f32), bf16 or fp16." in flat and "[default: fp32]" in flat, cmd


def test_traceback_switch_shows_the_traceback(folder: Path) -> None:
    r = run_warpy("expand", "raises.py", cwd=folder, env={"WARPY_TRACEBACK": "1"})
    assert r.returncode != 0 and "Traceback" in r.stderr and "my own bug" in r.stderr


def test_text_warpy_prints_reads_back_through_a_pipe(folder: Path) -> None:
    emitted = run_warpy("expand", "example-pipe", cwd=folder)
    assert emitted.returncode == 0 and not emitted.stdout.endswith("\n\n")
    lifted = run_warpy("lift", "-", cwd=folder, stdin=emitted.stdout + "\n\n")
    assert lifted.returncode == 0 and ".version" in lifted.stdout, lifted.stderr
    checked = run_warpy("check", "-", cwd=folder, stdin=emitted.stdout)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    hb = run_warpy("hb", "-", cwd=folder, stdin=emitted.stdout)
    assert hb.returncode == 0 and hb.stdout.startswith("buffer "), hb.stderr


def test_json_outputs_parse(folder: Path) -> None:
    g = run_warpy_here("gemm", "256", "256", "64", "--no-run", "--json", cwd=folder)
    assert g.returncode == 0, g.stderr
    gj = json.loads(g.stdout)
    assert gj["ok"] and gj["problem"] == {"M": 256, "N": 256, "K": 64, "dtype": "bf16", "out_dtype": "fp32",
                                          "arch": "sm_90a"}
    assert gj["registers"] > 0 and gj["ran"] is False and gj["kernel"].startswith("gemm_sm90_256x256x64")
    c = run_warpy_here("check", "gemm", "128", "128", "64", "--json", cwd=folder)
    assert c.returncode == 0, c.stderr
    cj = json.loads(c.stdout)
    assert cj["ok"] is True and set(cj["problems"]) >= {"wrong", "protocol", "order"} and cj["steps"] > 0
    f = run_warpy_here("check", "gemm", "128", "128", "64", "--json", "--fault", "drop-arrive", cwd=folder)
    assert f.returncode == 1 and json.loads(f.stdout)["ok"] is False
    s = run_warpy_here("bench", "gemm", "256", "--static", "--json", cwd=folder)
    assert s.returncode == 0, s.stderr
    sj = json.loads(s.stdout)
    assert sj["ok"] and sj["shapes"][0]["shape"] == "256³" and sj["shapes"][0]["registers"] > 0


def test_doctor_says_what_runs_here(folder: Path) -> None:
    r = run_warpy_here("doctor", cwd=folder)
    assert r.returncode == 0, r.stderr
    assert "ptxas:" in r.stdout and "can run here:" in r.stdout and "GPU:" in r.stdout
    assert "gemm (run, check, time), warpy.gemm" in r.stdout
    j = json.loads(run_warpy_here("doctor", "--json", cwd=folder).stdout)
    assert set(j) >= {"tools", "gpu", "extras", "commands"} and "torch" in j["extras"]


# ---------------------------------------------------------------------------------------------
# The Python API


def _gemm(*args: Any, **kw: Any) -> Any:
    import warpy

    return warpy.gemm(*args, **kw)


def _bf16(shape: tuple[int, int]) -> np.ndarray:
    import warpy.numeric as N

    return np.zeros(shape, np.float16) if False else N.to_bits(np.zeros(shape, np.float32), "bf16")


API_CASES: dict[str, tuple[Callable[[], Any], str]] = {
    "fp32-inputs": (lambda: _gemm(np.zeros((4, 16), np.float32), np.zeros((4, 16), np.float32)),
                    "a is fp32; inputs must be bf16 or fp16"),
    "k-not-a-multiple-of-8": (lambda: _gemm(np.zeros((4, 12), np.float16), np.zeros((4, 12), np.float16)),
                              "K a multiple of 8"),
    "k-disagrees": (lambda: _gemm(np.zeros((4, 16), np.float16), np.zeros((4, 24), np.float16)),
                    "C = A·Bᵀ needs b to be N x K with K = 16"),
    "mixed-types": (lambda: _gemm(np.zeros((4, 16), np.float16), _bf16((4, 16))), "inputs"),
    "out-of-the-wrong-shape": (lambda: _gemm(np.zeros((4, 16), np.float16), np.zeros((6, 16), np.float16),
                                             out=np.zeros((4, 5), np.float32)), "out is 4x5; C = A·Bᵀ is 4x6"),
    "bad-out-dtype": (lambda: _gemm(np.zeros((4, 16), np.float16), np.zeros((4, 16), np.float16), out_dtype="f64"),
                      "out_dtype 'f64' is not one of fp32, bf16, fp16"),
    "one-dimensional-input": (lambda: _gemm(np.zeros(16, np.float16), np.zeros((4, 16), np.float16)), "a"),
    "operands-beyond-the-gpu-memory": (lambda: _fits(1000000, 1000000, 1000000), "need 8000000000000 bytes"),
    "problem-of-zero-rows": (lambda: _problem(0, 4, 16), "M and N must be at least 1"),
    "problem-of-a-bool": (lambda: _problem(True, 4, 16), "M must be an integer"),
    "shape-text-negative": (lambda: _shape("-4"), "shape '-4' is not MxNxK or N"),
    "layout-cute-typos-read": (lambda: _layout("make_layout((4,8)) junk"), "trailing text"),
}
try:
    import ml_dtypes  # type: ignore[import-not-found,import-untyped,unused-ignore]  # noqa: F401
except ImportError:  # checked before any GPU work: the call needs no GPU to say so
    API_CASES["bf16-numpy-result-without-ml_dtypes"] = (
        lambda: _gemm(np.zeros((4, 16), np.float16), np.zeros((4, 16), np.float16), out_dtype="bf16"), "ml_dtypes")


def _fits(M: int, N: int, K: int) -> None:
    from warpy.kernels.gemm_bench import refuse_unless_it_fits

    refuse_unless_it_fits(M, N, K, "bf16", "fp32", "sm_90a")


def _problem(M: Any, N: int, K: int) -> None:
    from warpy.kernels.gemm import GemmProblem

    GemmProblem(M, N, K)


def _shape(text: str) -> None:
    from warpy.kernels.gemm_bench import parse_shape

    parse_shape(text)


def _layout(text: str) -> None:
    from warpy.layout.lang import evaluate

    evaluate(text)


@pytest.mark.parametrize("name", list(API_CASES))
def test_api(name: str) -> None:
    from warpy.layout import LayoutError

    fn, says = API_CASES[name]
    with pytest.raises((WarpyError, LayoutError)) as e:
        fn()
    assert "\n" not in str(e.value) and says in str(e.value), str(e.value)


def test_dir_lists_gemm_and_help_states_limits_and_exceptions() -> None:
    import warpy

    assert "gemm" in dir(warpy)
    doc = warpy.gemm.__doc__ or ""
    for text in ("K >= 8 and a multiple of 8", "Raises WarpyError", "NoGPU", "default: the input type", "B200"):
        assert text in doc, text


def test_schedule_checks_are_closed_form() -> None:
    """A magic number for every tile number up to 2^31 is found and checked exactly on a constant
    number of probe points (not a scan of 2^31 values)."""
    from warpy.kernels.schedule import Magic, _probe_points

    for d in (3, 7, 125, 1000003):
        points = _probe_points(d, (1 << 31) - 1)
        assert len(points) <= 3
        m = Magic.find(d, (1 << 31) - 1)
        for x in (0, d - 1, d, (1 << 31) - 1, ((1 << 31) - 1) // d * d - 1, *points):
            assert m(x) == x // d


def test_png_chart_is_centred_on_one_with_each_ratio_on_its_bar(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    """The chart through a stand-in for matplotlib that records the calls."""
    import sys
    import types

    calls: dict[str, list[Any]] = {"bar": [], "text": [], "ylim": []}

    class Ax:
        def bar(self, x: Any, h: Any, bottom: float = 0.0, **kw: Any) -> None:
            calls["bar"].append((x, h, bottom))

        def text(self, x: Any, y: Any, s: str, **kw: Any) -> None:
            calls["text"].append(s)

        def set_ylim(self, lo: float, hi: float) -> None:
            calls["ylim"].append((lo, hi))

        def __getattr__(self, name: str) -> Any:
            return lambda *a, **k: None

    class Fig:
        def tight_layout(self) -> None:
            pass

        def savefig(self, path: str, **kw: Any) -> None:
            Path(path).write_bytes(b"png")

    plt = types.SimpleNamespace(subplots=lambda **kw: (Fig(), Ax()), close=lambda fig: None)
    mpl = types.ModuleType("matplotlib")
    mpl.use = lambda name: None  # type: ignore[attr-defined]
    mpl.pyplot = plt  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "matplotlib", mpl)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", plt)  # type: ignore[arg-type]
    from warpy.kernels import gemm_bench as G

    rows = [G.BenchRow((1024, 1024, 1024), 10.0, 10.3, "ok"), G.BenchRow((4096, 4096, 4096), 100.0, 96.0, "ok")]
    assert G.write_png(rows, str(tmp_path / "r.png")) == f"wrote {tmp_path / 'r.png'}"
    assert [b[2] for b in calls["bar"]] == [1.0, 1.0]  # bars start at 1.0
    assert calls["text"] == ["1.030", "0.960"]
    (lo, hi), = calls["ylim"]
    assert abs((lo + hi) / 2 - 1.0) < 1e-9 and hi - lo < 0.2  # centred on 1.0: ±5% is visible
