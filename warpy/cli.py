"""The `warpy` command.

Each verb imports its implementation lazily, so `warpy --help` stays fast and a verb
that needs CUDA does not make the others need it.

Exit status: 0 success; 1 a check failed (the checker found a problem, a GEMM gave wrong results, a
benchmark row failed); 2 warpy refused the input (a usage error, a bad value, a file that cannot be
read, a `build()` of yours that raises), always as one line `error: ...` naming the problem and,
where there is one, the fix. Set WARPY_TRACEBACK=1 to see the traceback of any error.
"""

from __future__ import annotations

import inspect
import json as jsonlib
import os
import re
import sys
import types
from typing import Any, Callable, Optional

import typer

import warpy
from warpy.errors import WarpyError

EPILOG = ("Without a GPU: layout, expand, lift, check, hb, doctor, gemm --no-run and bench --static all work "
          "(lifting to a cubin needs ptxas, which the install brings). On an sm_90 GPU (H100/H200) gemm also runs, "
          "checks and times, and bench compares with cuBLAS. Exit status: 0 success, 1 a check failed, 2 the input "
          "was refused. WARPY_TRACEBACK=1 shows the traceback of any error.")

app = typer.Typer(
    name="warpy",
    help="warpy: a kernel DSL for NVIDIA tensor-core GPUs (sm_90a Hopper, sm_100a Blackwell).",
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"warpy {warpy.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Optional[bool] = typer.Option(
        None, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """warpy: a kernel DSL for NVIDIA tensor-core GPUs (sm_90a Hopper, sm_100a Blackwell)."""


from warpy.mega.cli import app as mega_app  # noqa: E402  (typer only; each command imports its work)
app.add_typer(mega_app, name="mega")


ARCH_HELP = "Target: sm_90a (Hopper) or sm_100a (Blackwell)."
OUT_DTYPE_HELP = "C's type: fp32 (also f32), bf16 or fp16."
CONFIG_HELP = ("The rule's configuration with fields set by hand, KEY=VALUE,... (e.g. bn=192,cluster_m=2; "
               "the fields of Sm90Config / Sm100Config in kernels/).")
JSON_HELP = "Print one JSON object on stdout instead of the report (what was printed goes to stderr)."


def _json(obj: Any) -> None:
    typer.echo(jsonlib.dumps(obj, indent=2, default=str))


def _output_folder(path: Optional[str], flag: str) -> None:
    """Refuse, before any work, an output whose folder does not exist."""
    if path is not None and path != "-":
        folder = os.path.dirname(path) or "."
        if not os.path.isdir(folder):
            raise WarpyError(f"{flag} {path}: the folder {folder} does not exist (create it first, or write elsewhere)")
        if os.path.isdir(path):
            raise WarpyError(f"{flag} {path} is a folder; give a file name")


@app.command("layout")
def layout_cmd(
    expr: str = typer.Argument(..., metavar="EXPR", help='An expression, e.g. "composition((6,2):(8,2), (4,3):(3,1))".'),
    table: bool = typer.Option(False, "--table", help="Also print the layout's values as a 2-D table (elided past "
                               "a size)."),
) -> None:
    """Evaluate a layout-algebra expression (CuTe notation, e.g. make_layout, composition,
    logical_divide, Sw<3,4,3> o (8,8):(8,1)) and print the result in the same notation."""
    from warpy.layout.lang import evaluate, show
    from warpy.layout.lang import table as value_table

    value = evaluate(expr)
    typer.echo(show(value))
    if table:
        typer.echo(value_table(value))


@app.command("expand")
def expand_cmd(
    target: str = typer.Argument(..., metavar="TARGET", help="An example (example-pipe, example-features), a FILE.py "
                                 "defining build(), or a FILE.sass."),
    arch: str = typer.Option("sm_90a", "--arch", metavar="ARCH", help=ARCH_HELP),
    coloured: bool = typer.Option(False, "--coloured", help="Print the register-coloured form instead of the named one."),
) -> None:
    """Print a program's SASS text: `+` marks derived addresses, `~` loop and ring bookkeeping. A
    FILE.py is run and its build() (optionally taking arch=) must return a warpy.isa.Program."""
    from warpy.isa.expand import expand

    typer.echo(expand(target, arch, coloured), nl=False)


@app.command("lift")
def lift_cmd(
    file: str = typer.Argument(..., metavar="FILE", help="A SASS text (FILE.sass, as warpy expand and warpy gemm "
                               "--emit sass print it; - reads standard input)."),
    out: Optional[str] = typer.Option(None, "-o", "--output", metavar="OUT",
                                      help="Write OUT.ptx, or assemble OUT.cubin (default: PTX to stdout)."),
    target: Optional[str] = typer.Option(None, "--target", metavar="ARCH",
                                         help="sm_90a or sm_100a (default: the text's .sm line)."),
    no_check: bool = typer.Option(False, "--no-check", help="Skip the disassembly check when writing a cubin."),
) -> None:
    """Lift a SASS text to PTX, or assemble it to a cubin and check its disassembly."""
    from warpy.lift.lifter import lift_file

    _output_folder(out, "-o")
    try:
        msg = lift_file(file, out, target, check=not no_check)
    except SyntaxError as e:  # a parse error: FILE:line:col: message, one line
        typer.echo(str(e), err=True)
        raise typer.Exit(2)
    if msg is None:
        return
    if out is None:
        typer.echo(msg, nl=False)
    else:
        typer.echo(msg)


@app.command("gemm")
def gemm_cmd(
    m: int = typer.Argument(..., metavar="M", help="Rows of A and C."),
    n: int = typer.Argument(..., metavar="N", help="Rows of B, columns of C."),
    k: int = typer.Argument(..., metavar="K", help="The shared (contiguous) dimension: at least 8, a multiple of 8."),
    arch: str = typer.Option("sm_90a", "--arch", metavar="ARCH", help=ARCH_HELP),
    dtype: str = typer.Option("bf16", "--dtype", metavar="TYPE", help="Input type: bf16, fp16, or the 8-bit floats e4m3 / "
                             "e5m2 (sm_90a)."),
    out_dtype: str = typer.Option("fp32", "--out-dtype", metavar="TYPE", help=OUT_DTYPE_HELP),
    emit: Optional[str] = typer.Option(None, "--emit", metavar="WHAT",
                                       help="Write an artifact: sass (coloured), ptx or cubin."),
    out: Optional[str] = typer.Option(None, "-o", "--output", metavar="PATH",
                                      help="Where --emit writes (sass and ptx default to stdout)."),
    no_run: bool = typer.Option(False, "--no-run", help="Build, assemble and check only; do not run on a GPU."),
    iters: int = typer.Option(100, "--iters", metavar="N", help="Calls to time (the median is reported)."),
    config: Optional[str] = typer.Option(None, "--config", metavar="KEY=VALUE,...", help=CONFIG_HELP),
    json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """C = A·Bᵀ: pick the program, build, lift and assemble it; on a GPU of the target, run it on
    small integers, check it exactly against numpy, and time it. Refused in one line: sizes the
    kernel cannot take, and problems whose A, B and C do not fit in the target GPU's memory."""
    from warpy.kernels.gemm_bench import CheckFailed, gemm_job

    if json and emit in ("sass", "ptx") and out is None:
        raise WarpyError("--json prints on stdout, and so does --emit without -o: give --emit ... -o PATH")
    echo: Callable[[str], None] = (lambda line: typer.echo(line, err=True)) if json else typer.echo
    try:
        result = gemm_job(m, n, k, arch=arch, dtype=dtype, out_dtype=out_dtype, emit=emit, output=out,
                          run=not no_run, iters=iters, echo=echo, config=config)
    except CheckFailed as e:
        if json and e.result is not None:
            _json({**e.result, "ok": False})
        raise
    if json:
        _json({**result, "ok": True})


@app.command("attention")
def attention_cmd(
    b: int = typer.Argument(..., metavar="B", help="Batch."),
    h: int = typer.Argument(..., metavar="H", help="Query heads."),
    s: int = typer.Argument(..., metavar="S", help="Sequence length (the keys' too, unless --skv)."),
    d: int = typer.Argument(..., metavar="D", help="Head dimension: 64 or 128."),
    causal: bool = typer.Option(False, "--causal", help="Mask key j out of query i's row when j > i."),
    hkv: Optional[int] = typer.Option(None, "--hkv", metavar="N", help="Key/value heads, dividing H (default H)."),
    skv: Optional[int] = typer.Option(None, "--skv", metavar="N", help="Keys (default S)."),
    layout: str = typer.Option("bshd", "--layout", metavar="L", help="Memory layout: bshd or bhsd."),
    scale: Optional[float] = typer.Option(None, "--scale", metavar="X", help="Softmax scale (default 1/sqrt(D))."),
    emit: Optional[str] = typer.Option(None, "--emit", metavar="WHAT", help="Write an artifact: sass, ptx or cubin."),
    out: Optional[str] = typer.Option(None, "-o", "--output", metavar="PATH", help="Where --emit writes."),
    no_run: bool = typer.Option(False, "--no-run", help="Build, assemble and check only; do not run on a GPU."),
    iters: int = typer.Option(20, "--iters", metavar="N", help="Calls to time (the median is reported)."),
    config: Optional[str] = typer.Option(None, "--config", metavar="KEY=VALUE,...", help=CONFIG_HELP),
    arch: str = typer.Option("sm_90a", "--arch", metavar="ARCH", help=ARCH_HELP),
    json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Forward attention (bf16, sm_90a or sm_100a): build, lift and assemble the program; on a GPU of
    that architecture run it, check sampled heads against the float64 softmax and time it
    (kernels/attention_bench.py)."""
    from warpy.kernels.attention import problem
    from warpy.kernels.attention_bench import CheckFailed, attention_job

    prob = problem(b, h, s, d, causal=causal, H_kv=hkv, S_kv=skv, layout=layout, scale=scale, arch=arch)
    echo: Callable[[str], None] = (lambda line: typer.echo(line, err=True)) if json else typer.echo
    try:
        result = attention_job(prob, emit=emit, output=out, run=not no_run, iters=iters, echo=echo, config=config)
    except CheckFailed as e:
        if json and e.result is not None:
            _json({**e.result, "ok": False})
        raise
    if json:
        _json({**result, "ok": True})


@app.command("bench")
def bench_cmd(
    what: str = typer.Argument(..., metavar="WHAT", help="What to benchmark: gemm or attention (shapes "
                               "BxHxSxD[:causal][:kv=N])."),
    shapes: Optional[list[str]] = typer.Argument(None, metavar="[SHAPE]...",
                                                 help="Shapes MxNxK or N (a cube); default: the standard 11."),
    dtype: str = typer.Option("bf16", "--dtype", metavar="TYPE", help="Input type: bf16, fp16, or the 8-bit floats e4m3 / "
                             "e5m2 (sm_90a)."),
    out_dtype: str = typer.Option("fp32", "--out-dtype", metavar="TYPE", help=OUT_DTYPE_HELP),
    iters: int = typer.Option(50, "--iters", metavar="N", help="Timed calls per round (4 interleaved rounds a side)."),
    png: Optional[str] = typer.Option(None, "--png", metavar="PATH",
                                      help="Write a bar chart of cuBLAS/warpy time ratios (needs matplotlib)."),
    host_overhead: bool = typer.Option(False, "--host-overhead",
                                       help="Measure host time per call (warpy.gemm against torch.mm)."),
    arch: str = typer.Option("sm_90a", "--arch", metavar="ARCH", help=ARCH_HELP + " Timing runs on sm_90a; "
                             "sm_100a goes with --static."),
    static_only: bool = typer.Option(False, "--static", help="No GPU needed: build, assemble and check each shape, "
                                     "and print its resources."),
    config: Optional[str] = typer.Option(None, "--config", metavar="KEY=VALUE,...",
                                         help=CONFIG_HELP + " Applied to every shape."),
    json: bool = typer.Option(False, "--json", help=JSON_HELP),
    backends: str = typer.Option("flash", "--backends", metavar="LIST", help="attention: torch SDPA backends to "
                                 "compare with: flash, cudnn, efficient, math, or all."),
    layout: bool = typer.Option(False, "--layout", help="gemm: time each operand layout (warpy.mm's B = w.t(), the "
                                "MN-major ones) against A·Bᵀ; default shapes 4096³ and 8192³."),
    epilogue: Optional[str] = typer.Option(None, "--epilogue", metavar="WORDS", help="gemm: time this fused "
                                           "epilogue (e.g. bias=n,act=gelu_erf) against the GEMM followed by "
                                           "torch's epilogue; default shapes 4096³ and 8192³."),
    layers: Optional[str] = typer.Option(None, "--layers", metavar="HIDDEN:MLP:QKV,...", help="gemm: the shapes "
                                         "of these Llama-style models' linear layers (QKV, attention output, "
                                         "gate+up, down), after any SHAPE given, e.g. 4096:14336:6144."),
    tokens: Optional[str] = typer.Option(None, "--tokens", metavar="M,...", help="gemm --layers: the rows (tokens) "
                                         "each layer is timed at (default 1,16,64,128,256,512,2048,8192)."),
    sweep: bool = typer.Option(False, "--sweep", help="gemm: time many configurations of the sm_90a program per "
                               "shape against cuBLAS (default shapes: the bench table, issue 18's and Llama-style "
                               "layers) and write the tile rule's table (--out); kernels/gemm_sweep.py."),
    sweep_out: Optional[str] = typer.Option(None, "--out", metavar="FILE", help="gemm --sweep: the JSON table to "
                                            "write (after every shape), e.g. kernels/data/gemm_sweep_h200.json."),
    per_shape: int = typer.Option(10, "--per-shape", metavar="N", help="gemm --sweep: configurations timed a shape."),
    regimes: Optional[str] = typer.Option(None, "--regimes", metavar="LIST", help="gemm --sweep: only the shapes of "
                                          "these regimes (skinny: M <= 64, narrow: M <= 256, wide), e.g. narrow,wide: "
                                          "the rows of the others at --out are kept."),
    sweep_report: Optional[str] = typer.Option(None, "--sweep-report", metavar="FILE", help="gemm: no GPU needed: "
                                               "the rule's pick against the fastest configuration of each shape "
                                               "of a sweep's table."),
) -> None:
    """warpy against cuBLAS (torch.mm) per shape, interleaved, the median GPU time per call; or,
    with --static, each shape's registers, shared memory, spills and main-loop size. Exit status 1
    when a shape fails its check or cannot be built. (attention: against torch's
    scaled_dot_product_attention, kernels/attention_bench.py.)"""
    from warpy.bench import Progress
    from warpy.kernels import gemm_bench as B
    from warpy.target import target as target_of

    if what == "attention":
        from warpy.kernels.attention_bench import run_cli

        code, record = run_cli(what, shapes or [], iters=iters, backends=backends, static_only=static_only,
                               config=config, json=json, echo=(lambda line: typer.echo(line, err=True)) if json else typer.echo)
        if json:
            _json(record)
        raise typer.Exit(code)
    if what != "gemm":
        raise WarpyError(f"nothing to benchmark called {what!r} (gemm or attention)")
    if iters < 1:
        raise WarpyError(f"--iters {iters} must be at least 1")
    if tokens is not None and layers is None:
        raise WarpyError("--tokens says the rows --layers' shapes are timed at: add --layers HIDDEN:MLP:QKV")
    if layers is not None:
        shapes = list(shapes or []) + ["x".join(map(str, s)) for s in B.layer_shapes(layers, tokens)]
    if regimes is not None and not sweep:
        raise WarpyError("--regimes says which shapes --sweep times: add --sweep")
    if sweep_report is not None or sweep or sweep_out is not None:
        code = _gemm_sweep(shapes, sweep, sweep_out, sweep_report, per_shape, dtype, out_dtype, arch, json,
                           [png, host_overhead, static_only, layout, epilogue, config], regimes)
        raise typer.Exit(code)
    parsed = [B.parse_shape(s) for s in shapes] if shapes else None
    target_of(arch)
    if static_only:
        if png or host_overhead:
            raise WarpyError("--png and --host-overhead time on a GPU; --static does not: drop one")
        todo = parsed or list(B.DEFAULT_SHAPES)
        B.check_bench_args(todo, arch, dtype, out_dtype, config)
        progress = Progress()
        try:
            static = B.static_rows(todo, arch, dtype, out_dtype, progress, config=config)
        finally:
            progress.done()
        failed = any(r[-1].startswith("not built: ") for r in static)
        if json:
            _json({"arch": arch, "dtype": dtype, "out_dtype": out_dtype, "shapes": B.static_json(static),
                   "ok": not failed})
        else:
            typer.echo(f"{arch} GEMM programs ({dtype} in, {out_dtype} out): built, assembled, disassembly checked")
            typer.echo(B.static_table(static), nl=False)
        raise typer.Exit(1 if failed else 0)
    if arch != "sm_90a":
        raise WarpyError(f"--arch {arch}: timing runs on an sm_90 GPU; for {arch} use --static "
                         f"(warpy bench gemm --arch {arch} --static)")
    if layout or epilogue is not None:
        if layout and epilogue is not None:
            raise WarpyError("--layout and --epilogue are two benchmarks: give one")
        if png or host_overhead or config or static_only:
            raise WarpyError("--layout and --epilogue time warpy.mm on a GPU: drop --png, --host-overhead, --config")
        todo = parsed or list(B.LAYOUT_SHAPES)
        B.check_bench_args(todo, arch, dtype, out_dtype, None)
        echo_v: Callable[[str], None] = (lambda line: typer.echo(line, err=True)) if json else typer.echo
        if layout:
            vrows = B.bench_layouts(todo, dtype, out_dtype, iters, echo=echo_v)
        else:
            assert epilogue is not None
            vrows = B.bench_epilogue(todo, epilogue, dtype, out_dtype, iters, echo=echo_v)
        vok = all(not r.note.startswith("FAIL") for r in vrows)
        if json:
            _json({"rows": [{"shape": list(r.shape), "variant": r.what, "us": r.us, "baseline_us": r.baseline_us,
                             "note": r.note} for r in vrows], "ok": vok})
        raise typer.Exit(0 if vok else 1)
    if png:
        _output_folder(png, "--png")
        B.have_matplotlib()
    todo = parsed or list(B.HOST_OVERHEAD_SHAPES if host_overhead else B.DEFAULT_SHAPES)
    B.check_bench_args(todo, arch, dtype, out_dtype, config)
    echo: Callable[[str], None] = (lambda line: typer.echo(line, err=True)) if json else typer.echo
    if host_overhead:
        if config:
            raise WarpyError("--host-overhead times warpy.gemm, which runs the rule's configuration: drop --config")
        over = B.host_overhead(todo, dtype, out_dtype, echo=echo)
        if json:
            _json({"host_overhead": [{"call": r.what, "host_us": r.enqueue_us, "gpu_us": r.gpu_us,
                                      "call_sync_us": r.sync_us, "overhead_us": r.overhead_us} for r in over],
                   "ok": True})
        return
    rows = B.bench_gemm(todo, dtype, out_dtype, iters, echo=echo, config=config)
    if png:
        echo(B.write_png(rows, png))
    ok = all(r.check == "ok" for r in rows)
    if json:
        _json({"dtype": dtype, "out_dtype": out_dtype, "iters": iters, "shapes": B.bench_json(rows), "ok": ok})
    raise typer.Exit(0 if ok else 1)


def _gemm_sweep(shapes: Optional[list[str]], sweep: bool, out: Optional[str], report_of: Optional[str], per_shape: int,
                dtype: str, out_dtype: str, arch: str, json: bool, others: list[object],
                regimes: Optional[str] = None) -> int:
    """`warpy bench gemm --sweep [SHAPE]... [--out FILE]` and `--sweep-report FILE` (kernels/gemm_sweep.py)."""
    from warpy.kernels import gemm_bench as B
    from warpy.kernels import gemm_sweep as S

    if any(o for o in others):
        raise WarpyError("--sweep and --sweep-report take shapes, --out, --per-shape, --dtype and --out-dtype only")
    if report_of is not None:
        if sweep or out is not None or shapes:
            raise WarpyError("--sweep-report FILE reads a table; it takes no shapes, --sweep or --out")
        text, summary = S.report(S.read_table(report_of))
        if json:
            _json({"report": summary, "ok": True})
        else:
            typer.echo(text, nl=False)
        return 0
    if not sweep:
        raise WarpyError("--out FILE is where --sweep writes its table: add --sweep")
    if arch != "sm_90a":
        raise WarpyError(f"--sweep times the sm_90a program, not {arch}'s")
    if per_shape < 1:
        raise WarpyError(f"--per-shape {per_shape} must be at least 1")
    if out is not None:
        _output_folder(out, "--out")
    todo = [B.parse_shape(s) for s in shapes] if shapes else S.default_shapes()
    if regimes is not None:  # only the shapes of these regimes (`gemm_sweep.regime_of`)
        want = [r.strip() for r in regimes.split(",")]
        unknown = [r for r in want if r not in S.REGIMES]
        if unknown or not want:
            raise WarpyError(f"--regimes {regimes!r}: a list of {', '.join(S.REGIMES)}")
        todo = [s for s in todo if S.regime_of(s[0]) in want]
        if not todo:
            raise WarpyError(f"--regimes {regimes}: none of the shapes is in those regimes")
    from warpy.kernels.gemm import input_type, output_type

    odt, idt = output_type(out_dtype), input_type(dtype)
    B.check_bench_args(todo, arch, idt, odt, None)
    if idt not in ("bf16", "fp16"):
        raise WarpyError(f"--sweep times 16-bit inputs (bf16, fp16), not {dtype}")
    echo: Callable[[str], None] = (lambda line: typer.echo(line, err=True)) if json else typer.echo
    table = S.run_sweep(todo, out, idt, odt, per_shape, echo=echo,
                        command="warpy " + " ".join(sys.argv[1:]))
    text, summary = S.report(table)
    echo(text.rstrip("\n"))
    bad = sum(m.check != "ok" for r in table.rows for m in r.measured if not m.check.startswith("error"))
    if json:
        _json({"report": summary, "out": out, "ok": bad == 0})
    return 1 if bad else 0


@app.command("check")
def check_cmd(
    target: str = typer.Argument(..., metavar="TARGET", help="A kernel family (gemm, then M N K) or a FILE.sass."),
    dims: Optional[list[str]] = typer.Argument(None, metavar="[SIZE]...", help="The family's sizes (gemm: M N K; "
                                               "mega: GRAPH [TOKENS])."),
    arch: str = typer.Option("sm_90a", "--arch", metavar="ARCH", help=ARCH_HELP),
    values: bool = typer.Option(False, "--values", help="Also compute the data (numpy MMAs) and compare C with numpy."),
    fault: Optional[str] = typer.Option(None, "--fault", metavar="NAME", help="Inject a known bug first: drop-arrive, "
                                        "early-free, wrong-tx, box-off-by-one, no-proxy-fence, global-before-wait, "
                                        "read-before-commit, tmem-overlap."),
    no_colour: bool = typer.Option(False, "--no-colour", help="Skip running the register-coloured text."),
    out_dtype: str = typer.Option("fp32", "--out-dtype", "--out", metavar="TYPE",
                                  help="gemm: " + OUT_DTYPE_HELP + " (--out is the same option.)"),
    dump: Optional[str] = typer.Option(None, "--dump", metavar="PATH", help="With values: save A, B, the C the "
                                       "simulated clusters wrote and its mask to this .npz (to compare with the "
                                       "GPU's C)."),
    cluster_m: Optional[int] = typer.Option(None, "--cluster-m", metavar="N", help="sm_90a gemm: the chosen "
                                            "configuration with clusters of this many CTAs along M (1, or 2: B "
                                            "multicast)."),
    config: Optional[str] = typer.Option(None, "--config", metavar="KEY=VALUE,...", help=CONFIG_HELP),
    json: bool = typer.Option(False, "--json", help=JSON_HELP),
    dtype: Optional[str] = typer.Option(None, "--dtype", metavar="TYPE", help="gemm: the input type (bf16, fp16, or "
                                        "the 8-bit floats e4m3 / e5m2; B's own with the word b_dtype=T, scales with "
                                        "scale_a=tensor|row, scale_b=tensor|col)."),
    all_ctas: bool = typer.Option(False, "--all-ctas", help="Run every CTA of the launch (not only the first and "
                                  "last clusters) and check that every output element is written once."),
    seeds: int = typer.Option(0, "--seeds", metavar="N", help="Also run N random warp schedules and report any "
                              "verdict that differs from the round-robin run's."),
) -> None:
    """Run a kernel's SASS on the CPU (its first and last clusters) and check addresses, barrier
    protocol and memory ordering (with --values, the data too). Exit status 1 on any problem, 4 when
    a --fault is missed."""
    from warpy.check.report import CheckOptions, options

    if seeds < 0:
        raise WarpyError(f"--seeds takes a count of schedules, not {seeds}")
    with options(CheckOptions(all_ctas=all_ctas, seeds=seeds)):
        code = _check(target, list(dims or []), arch, values, fault, not no_colour, dump, out_dtype, cluster_m, config,
                      json, dtype)
    raise typer.Exit(code)


def _family_work(verb: str, target: str, dims: list[str], arch: str, out_dtype: Optional[str] = None,
                 cluster_m: Optional[int] = None, config: Optional[str] = None, dtype: Optional[str] = None,
                 **kw: Any) -> Callable[[], Any]:
    """What checking `target` (a kernel family) at `dims` runs: the family's program for the problem,
    with `--config` / `--cluster-m` (the GEMM's 2-CTA clusters) applied, through warpy.plan."""
    from warpy.check.cli import _progress
    from warpy.kernels.family import FAMILY_MODULES, family
    from warpy.plan import check_problem

    if target not in FAMILY_MODULES:
        raise WarpyError(f"warpy {verb} takes a kernel family ({', '.join(FAMILY_MODULES)}) and its sizes, or a "
                         f"FILE.sass, not {target!r}" + ("" if os.path.exists(target) else " (no such file either)"))
    fam = family(target)
    # sizes are integers; a family may take a name too (mega: the graph), which it refuses or reads
    words: list[Any] = [int(d) if re.fullmatch(r"[+-]?\d+", d) else d for d in dims]
    if dtype is not None and target != "gemm":
        raise WarpyError(f"--dtype is a gemm option; {target} takes its types from its own words")
    prob = fam.problem(words, arch=arch, out_dtype=out_dtype, **({"dtype": dtype} if dtype is not None else {}))
    if target == "gemm":
        from warpy.kernels.gemm_bench import refuse_unless_it_fits

        refuse_unless_it_fits(prob.M, prob.N, prob.K, prob.dtype, prob.out_dtype, prob.arch)
    overrides: dict[str, object] = {}
    if config:
        from warpy.kernels.family import parse_overrides

        overrides = parse_overrides(config)
    if cluster_m is not None:
        if arch != "sm_90a":
            raise WarpyError(f"--cluster-m is an sm_90a option (the {arch} GEMM sets its clusters itself)")
        overrides["cluster_m"] = cluster_m
    cfg = fam.configure(prob, overrides) if overrides else None
    return lambda: check_problem(fam, prob, config=cfg, progress=_progress, **kw)


def _is_file_target(target: str) -> bool:
    from warpy.kernels.family import FAMILY_MODULES

    return target.endswith(".sass") or target == "-" or (os.path.exists(target) and target not in FAMILY_MODULES)


def _check(target: str, dims: list[str], arch: str, values: bool, fault: Optional[str], colour: bool,
           dump: Optional[str], out_dtype: str, cluster_m: Optional[int], config: Optional[str], json: bool,
           dtype: Optional[str] = None) -> int:
    from warpy.check.cli import check_file, run_check

    _output_folder(dump, "--dump")
    if _is_file_target(target):
        if dims:
            raise WarpyError("a FILE.sass takes no sizes")
        if values:
            raise WarpyError("--values needs a kernel family (the checker knows its operands): "
                             "warpy check gemm M N K --values")
        if cluster_m is not None or config:
            raise WarpyError("--cluster-m and --config configure a kernel family's program: "
                             "warpy check gemm M N K --config bn=128")
        return run_check(lambda: check_file(target, fault, colour), fault, json=json)
    work = _family_work("check", target, dims, arch, out_dtype, cluster_m, config, dtype,
                        values=values or dump is not None, fault=fault, coloured=colour)
    return run_check(work, fault, dump, json=json)


@app.command("hb")
def hb_cmd(
    target: str = typer.Argument(..., metavar="TARGET", help="A kernel family (gemm, then M N K) or a FILE.sass."),
    dims: Optional[list[str]] = typer.Argument(None, metavar="[SIZE]...", help="Its sizes (gemm: M N K; mega: GRAPH "
                                               "[TOKENS])."),
    arch: str = typer.Option("sm_90a", "--arch", metavar="ARCH", help=ARCH_HELP),
) -> None:
    """Print what orders what: buffer, earlier access, later access, what ordered them, how many
    pairs; then the checker's problems. Exit status 1 on any problem."""
    from warpy.check.cli import check_file, run_hb

    if _is_file_target(target):
        if dims:
            raise WarpyError("a FILE.sass takes no sizes")
        raise typer.Exit(run_hb(lambda: check_file(target, None, False, hb=True)))
    raise typer.Exit(run_hb(_family_work("hb", target, list(dims or []), arch, hb=True, coloured=False)))


@app.command("doctor")
def doctor_cmd(
    json: bool = typer.Option(False, "--json", help="Print one JSON object instead of the report."),
) -> None:
    """What this machine has for warpy: ptxas and nvdisasm (where they were found, their versions),
    the CUDA driver and GPU if any, the optional extras, and which commands can run here."""
    report = _doctor()
    if json:
        _json(report)
        return
    tools = report["tools"]
    lines = [f"warpy {report['warpy']} (Python {report['python']} at {report['executable']})"]
    for name in ("ptxas", "nvdisasm"):
        t = tools[name]
        lines.append(f"{name + ':':<12}{t['path']} ({t['version']}; found by {t['found_by']})" if t["path"]
                     else f"{name + ':':<12}not found: {t['why']}")
    g = report["gpu"]
    lines.append(f"{'driver:':<12}" + (f"CUDA {g['driver']}" if g.get("driver") else f"none ({g['why']})"))
    if g.get("name"):
        lines.append(f"{'GPU:':<12}{g['name']} ({g['sm']}, {g['sms']} SMs, {g['memory_bytes']} bytes of memory)")
    else:
        lines.append(f"{'GPU:':<12}none")
    for name, e in report["extras"].items():
        lines.append(f"{name + ':':<12}" + (f"{e['version']}" if e["version"] else f"not installed ({e['for']}: "
                                                                               f"pip install -e '.[{e['extra']}]')"))
    lines.append("can run here:")
    for what, why in report["commands"].items():
        lines.append(f"  {what:<58}{why}")
    typer.echo("\n".join(lines))


def _doctor() -> dict[str, Any]:
    """The facts `warpy doctor` prints."""
    import platform

    report: dict[str, Any] = {"warpy": warpy.__version__, "python": platform.python_version(),
                              "executable": sys.executable}
    tools: dict[str, dict[str, Any]] = {}
    try:
        from warpy.lift.ptxas import find_ptxas

        pt = find_ptxas()
        tools["ptxas"] = {"path": pt.path, "version": pt.version, "found_by": pt.found_by}
    except WarpyError as e:
        tools["ptxas"] = {"path": None, "why": str(e)}
    try:
        from warpy.lift.disasm import find_disassembler

        dis = find_disassembler()
        tools["nvdisasm"] = {"path": dis.path, "version": _tool_version(dis.path), "found_by": dis.found_by}
    except WarpyError as e:
        tools["nvdisasm"] = {"path": None, "why": str(e)}
    report["tools"] = tools
    gpu: dict[str, Any] = {}
    try:
        from warpy import runtime as rt
        from warpy.runtime.driver import check as cu_check
        from warpy.runtime.driver import cuda

        dev = rt.device()
        d = cuda()
        version = int(cu_check(d.cuDriverGetVersion(), "cuDriverGetVersion"))
        gpu.update(driver=f"{version // 1000}.{version % 1000 // 10}", name=dev.name, sm=dev.sm, sms=dev.sm_count,
                   memory_bytes=int(cu_check(d.cuDeviceTotalMem(dev.handle), "cuDeviceTotalMem")))
    except WarpyError as e:
        gpu["why"] = str(e)
    report["gpu"] = gpu
    extras: dict[str, dict[str, Any]] = {}
    for module, extra, for_what in (("torch", "bench", "warpy bench"), ("matplotlib", "plot", "warpy bench --png"),
                                    ("ml_dtypes", "bf16", "bf16 numpy results of warpy.gemm")):
        extras[module] = {"version": _module_version(module), "extra": extra, "for": for_what}
    report["extras"] = extras
    have_ptxas = tools["ptxas"]["path"] is not None
    on_gpu = gpu.get("sm") == "sm_90"
    no_ptxas = "no: " + str(tools["ptxas"].get("why", ""))
    report["commands"] = {
        "layout, expand, check, hb, lift (to PTX), doctor": "yes (CPU only)",
        "lift -o X.cubin, gemm --no-run, bench --static": "yes" if have_ptxas else no_ptxas,
        "gemm (run, check, time), warpy.gemm": "yes" if on_gpu and have_ptxas else
        ("no: " + (gpu.get("why") or f"the GPU is {gpu.get('sm')}, not sm_90") if not on_gpu else no_ptxas),
        "bench (against cuBLAS), bench --host-overhead": ("yes" if extras["torch"]["version"] else
                                                          "no: torch is not installed") if on_gpu and have_ptxas
        else "no: needs an sm_90 GPU, ptxas and torch",
    }
    return report


def _tool_version(path: str) -> str:
    import subprocess

    try:
        text = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return f"version unknown: {e}"
    m = re.search(r"V(\d+\.\d+\.\d+)", text) or re.search(r"release (\d+\.\d+)", text)
    return m.group(1) if m else "version unknown"


def _module_version(name: str) -> Optional[str]:
    from importlib import metadata
    from importlib.util import find_spec

    try:
        if find_spec(name) is None:
            return None
    except (ImportError, ValueError):
        return None
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "installed"


# ---------------------------------------------------------------------------------------------
# Help text, arguments, errors: one format whatever version of typer/click is installed


def _paragraphs(text: str) -> str:
    return inspect.cleandoc(text or "")


def _first_paragraph(text: Optional[str]) -> str:
    return " ".join(_paragraphs(text or "").split("\n\n")[0].split())


def _metavar(param: Any) -> str:
    name = param.metavar or (param.name or "").upper()
    if getattr(param, "nargs", 1) == -1 and not name.endswith("..."):
        name += "..."
    return str(name)


def _is_option(param: Any) -> bool:
    return bool(getattr(param, "opts", None)) and any(o.startswith("-") for o in param.opts)


def _format_help(self: Any, ctx: Any, formatter: Any) -> None:
    """`warpy CMD -h`: usage, the whole docstring (paragraphs rewrapped), arguments, options, sub-
    commands; no type tags."""
    params = self.get_params(ctx)
    args = [p for p in params if not _is_option(p)]
    opts = [p for p in params if _is_option(p) and not getattr(p, "hidden", False)]
    pieces = ["[OPTIONS]"] + [_metavar(a) for a in args]
    if hasattr(self, "list_commands"):
        pieces.append("COMMAND [ARGS]...")
    formatter.write_usage(ctx.command_path, " ".join(pieces))
    if self.help:
        formatter.write_paragraph()
        with formatter.indentation():
            formatter.write_text(_paragraphs(self.help))
    if args:
        with formatter.section("Arguments"):
            formatter.write_dl([(_metavar(a), getattr(a, "help", None) or "") for a in args])
    rows = []
    for p in opts:
        names = ", ".join(sorted(list(p.opts) + list(getattr(p, "secondary_opts", [])),
                                 key=lambda o: (o.startswith("--"), p.opts.index(o) if o in p.opts else 0)))
        if not (p.is_flag or getattr(p, "count", False)):
            names += " " + (p.metavar or (p.name or "value").upper())
        text = p.help or ""
        default = p.default
        if not p.is_flag and default is not None and not callable(default) and default != () and default != []:
            text += f"  [default: {default}]"
        rows.append((names, text))
    if rows:
        with formatter.section("Options"):
            formatter.write_dl(rows)
    if hasattr(self, "list_commands"):
        cmds = [(name, self.get_command(ctx, name)) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl([(name, _first_paragraph(c.help)) for name, c in cmds if c is not None and not c.hidden])
    if self.epilog:
        formatter.write_paragraph()
        with formatter.indentation():
            formatter.write_text(_paragraphs(self.epilog))


def _install_help(cmd: Any) -> None:
    cmd.format_help = types.MethodType(_format_help, cmd)
    for sub in getattr(cmd, "commands", {}).values():
        _install_help(sub)


_NUMBER = re.compile(r"-\d[\dxX×,.]*")


def _numbers_as_arguments(root: Any, args: list[str]) -> list[str]:
    """A negative number (`-4`) is an argument, never an option: click would say "No such option:
    -4". The leaf command's options go first and its arguments after `--`, in their order."""
    i, cmd = 0, root
    while hasattr(cmd, "commands") and i < len(args):
        tok = args[i]
        if tok.startswith("-"):
            return args  # an option of a group (--version, -h): nothing to rearrange
        sub = cmd.commands.get(tok)
        if sub is None:
            return args
        cmd, i = sub, i + 1
    if hasattr(cmd, "commands"):
        return args
    rest = args[i:]
    if not any(_NUMBER.fullmatch(t) for t in rest) or "--" in rest:
        return args
    takes_value: dict[str, bool] = {"-h": False, "--help": False}
    for p in cmd.params:
        if _is_option(p):
            for o in list(p.opts) + list(getattr(p, "secondary_opts", [])):
                takes_value[o] = not (p.is_flag or getattr(p, "count", False))
    options: list[str] = []
    positional: list[str] = []
    j = 0
    while j < len(rest):
        tok = rest[j]
        name = tok.split("=", 1)[0]
        if name in takes_value:
            options.append(tok)
            if takes_value[name] and "=" not in tok and j + 1 < len(rest):
                options.append(rest[j + 1])
                j += 1
        elif tok.startswith("-") and not _NUMBER.fullmatch(tok):
            options.append(tok)  # unknown: click names it
        else:
            positional.append(tok)
        j += 1
    return args[:i] + options + ["--"] + positional


def _user_errors() -> tuple[type[BaseException], ...]:
    from warpy.layout import LayoutError

    return (WarpyError, LayoutError)


def _click_class(name: str) -> type[BaseException]:
    """click's exception class `name` (UsageError, Abort, Exit), from the click typer uses (its
    own copy in new versions of typer, the click package in older ones)."""
    for cls in typer.BadParameter.__mro__:
        if cls.__name__ == name:
            return cls
    module = sys.modules[typer.BadParameter.__module__]
    found = getattr(module, name, None)
    if isinstance(found, type) and issubclass(found, BaseException):
        return found
    return type(f"_No{name}", (Exception,), {})


def _usage_error(e: Any) -> str:
    ctx = getattr(e, "ctx", None)
    where = ctx.command_path if ctx is not None else "warpy"
    msg = " ".join(str(e.format_message()).split()).rstrip(".")
    return f"error: {where}: {msg[0].lower() + msg[1:] if msg else msg} ({where} -h shows the usage)"


def _exit_code(rv: Any) -> int:
    return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0


def main(argv: Optional[list[str]] = None) -> None:
    """The `warpy` command: one-line errors, the exit statuses above."""
    usage_error = _click_class("UsageError")
    click_exit = _click_class("Exit")
    abort = _click_class("Abort")
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        cmd = typer.main.get_command(app)
        _install_help(cmd)
        args = _numbers_as_arguments(cmd, args)
        rv = cmd.main(args=args, prog_name="warpy", standalone_mode=False)
        sys.exit(_exit_code(rv))
    except SystemExit:
        raise
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except BaseException as e:  # one line for the user, the traceback on request
        if type(e).__name__ == "NoArgsIsHelpError":  # `warpy`, `warpy mega`: the help
            ctx = getattr(e, "ctx", None)
            if ctx is not None:
                typer.echo(ctx.get_help())
                sys.exit(0)
        if isinstance(e, usage_error):
            print(_usage_error(e), file=sys.stderr)
            sys.exit(2)
        if isinstance(e, click_exit) or isinstance(e, typer.Exit):
            sys.exit(_exit_code(getattr(e, "exit_code", 0)))
        if isinstance(e, abort):
            print("interrupted", file=sys.stderr)
            sys.exit(130)
        if os.environ.get("WARPY_TRACEBACK"):
            raise
        if isinstance(e, _user_errors()):
            print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
            sys.exit(getattr(e, "exit_status", 2))
        print(f"internal error: {type(e).__name__}: {e} (a bug in warpy; WARPY_TRACEBACK=1 shows where)",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
