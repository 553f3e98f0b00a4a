"""The `warpy` command.

Each verb imports its implementation lazily, so `warpy --help` stays fast and a verb
that needs CUDA does not make the others need it. Errors a user can cause are one line
(`error: ...`) and exit status 2; set WARPY_TRACEBACK=1 to see the traceback of any error.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Optional

from warpy.errors import WarpyError

import typer

import warpy

app = typer.Typer(
    name="warpy",
    help="warpy: a kernel DSL for NVIDIA tensor-core GPUs (sm_90a Hopper, sm_100a Blackwell).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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


@app.command("layout")
def layout_cmd(
    expr: str = typer.Argument(..., help='An expression, e.g. "composition((6,2):(8,2), (4,3):(3,1))".'),
    table: bool = typer.Option(False, "--table", help="Also print the layout's values as a 2-D table."),
) -> None:
    """Evaluate a layout-algebra expression and print the result in CuTe notation."""
    from warpy.layout.lang import evaluate, show
    from warpy.layout.lang import table as value_table

    value = evaluate(expr)
    typer.echo(show(value))
    if table:
        typer.echo(value_table(value))


@app.command("expand")
def expand_cmd(
    target: str = typer.Argument(..., help="An example (example-pipe), a FILE.py defining build(), or a FILE.sass."),
    arch: str = typer.Option("sm_90a", "--arch", help="Target: sm_90a or sm_100a."),
    coloured: bool = typer.Option(False, "--coloured", help="Print the register-coloured form instead of the named one."),
) -> None:
    """Print a program's SASS text: `+` derived addresses, `~` loop/ring bookkeeping."""
    from warpy.isa.expand import expand

    typer.echo(expand(target, arch, coloured), nl=False)


@app.command("lift")
def lift_cmd(
    file: str = typer.Argument(..., help="A SASS text (FILE.sass, as warpy expand / warpy gemm --emit sass print it)."),
    out: Optional[str] = typer.Option(None, "-o", "--output", help="Write OUT.ptx, or assemble OUT.cubin (default: PTX to stdout)."),
    target: Optional[str] = typer.Option(None, "--target", help="sm_90a or sm_100a (default: the text's .sm line)."),
    no_check: bool = typer.Option(False, "--no-check", help="Skip the disassembly check when writing a cubin."),
) -> None:
    """Lift a SASS text to PTX, or assemble it to a cubin and check its disassembly."""
    from warpy.lift.lifter import lift_file

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


CONFIG_HELP = ("The rule's configuration with fields set by hand, KEY=VALUE,... (e.g. bn=192,cluster_m=2; "
               "the fields of Sm90Config / Sm100Config in kernels/).")


@app.command("gemm")
def gemm_cmd(
    m: int = typer.Argument(..., help="M: rows of A and C."),
    n: int = typer.Argument(..., help="N: rows of B, columns of C."),
    k: int = typer.Argument(..., help="K: the shared (contiguous) dimension."),
    arch: str = typer.Option("sm_90a", "--arch", help="Target: sm_90a or sm_100a."),
    dtype: str = typer.Option("bf16", "--dtype", help="Input type: bf16 or fp16."),
    out_dtype: str = typer.Option("f32", "--out-dtype", help="Output type: f32, bf16 or fp16."),
    emit: Optional[str] = typer.Option(None, "--emit", help="Write an artifact: sass (coloured), ptx or cubin."),
    out: Optional[str] = typer.Option(None, "-o", "--output", help="Where --emit writes (sass/ptx default: stdout)."),
    no_run: bool = typer.Option(False, "--no-run", help="Build, assemble and check only; do not run on a GPU."),
    iters: int = typer.Option(100, "--iters", help="Calls to time (the median is reported)."),
    config: Optional[str] = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """C = A·Bᵀ: pick the program, build, lift, assemble; on a GPU of the target run it on small
    integers, check exactly against numpy, and time it."""
    from warpy.kernels.gemm_bench import gemm_job

    gemm_job(m, n, k, arch=arch, dtype=dtype, out_dtype=out_dtype, emit=emit, output=out, run=not no_run,
             iters=iters, echo=typer.echo, config=config)


@app.command("bench")
def bench_cmd(
    what: str = typer.Argument(..., help="What to benchmark: gemm."),
    shapes: Optional[list[str]] = typer.Argument(None, help="Shapes MxNxK or N (a cube); default: the standard 11."),
    dtype: str = typer.Option("bf16", "--dtype", help="Input type: bf16 or fp16."),
    out_dtype: Optional[str] = typer.Option(None, "--out-dtype", help="Output type: f32, bf16, fp16 (default: the input type)."),
    iters: int = typer.Option(50, "--iters", help="Timed calls per round (4 interleaved rounds a side)."),
    png: Optional[str] = typer.Option(None, "--png", help="Write a bar chart of cuBLAS/warpy time ratios."),
    host_overhead: bool = typer.Option(False, "--host-overhead", help="Measure host time per call (warpy.gemm vs torch.mm)."),
    arch: str = typer.Option("sm_90a", "--arch", help="Target for --static: sm_90a or sm_100a."),
    static_only: bool = typer.Option(False, "--static", help="No GPU: build, assemble, check; print resources per shape."),
    config: Optional[str] = typer.Option(None, "--config", help=CONFIG_HELP + " Applied to every shape."),
) -> None:
    """warpy against cuBLAS (torch.mm) per shape, interleaved, median GPU time per call; or --static."""
    from warpy.errors import WarpyError
    from warpy.kernels import gemm_bench as B

    if what != "gemm":
        raise WarpyError(f"nothing to benchmark called {what!r} (only: gemm)")
    if iters < 1:
        raise WarpyError(f"--iters {iters} must be at least 1")
    parsed = [B.parse_shape(s) for s in shapes] if shapes else None
    if static_only:
        from warpy.bench import Progress

        progress = Progress()
        try:
            static = B.static_rows(parsed or list(B.DEFAULT_SHAPES), arch, dtype, out_dtype, progress, config=config)
        finally:
            progress.done()
        typer.echo(f"{arch} GEMM programs ({dtype} in, {out_dtype or dtype} out): built, assembled, disassembly checked")
        typer.echo(B.static_table(static), nl=False)
        return
    if arch != "sm_90a":
        raise WarpyError(f"--arch {arch} runs only with --static (the GPU here is timed as sm_90a)")
    if host_overhead:
        if config:
            raise WarpyError("--host-overhead times warpy.gemm, which runs the rule's configuration: drop --config")
        B.host_overhead(parsed or list(B.HOST_OVERHEAD_SHAPES), dtype, out_dtype, echo=typer.echo)
        return
    rows = B.bench_gemm(parsed or list(B.DEFAULT_SHAPES), dtype, out_dtype, iters, echo=typer.echo, config=config)
    if png:
        typer.echo(B.write_png(rows, png))


@app.command("check")
def check_cmd(
    target: str = typer.Argument(..., help="A kernel family (gemm, then M N K) or a FILE.sass."),
    dims: Optional[list[int]] = typer.Argument(None, help="The family's sizes (gemm: M N K)."),
    arch: str = typer.Option("sm_90a", "--arch", help="Target: sm_90a or sm_100a."),
    values: bool = typer.Option(False, "--values", help="Also compute the data (numpy MMAs) and compare C with numpy."),
    fault: Optional[str] = typer.Option(None, "--fault", help="Inject a known bug first: drop-arrive, early-free, wrong-tx, "
                                        "box-off-by-one, no-proxy-fence, global-before-wait, read-before-commit, tmem-overlap."),
    no_colour: bool = typer.Option(False, "--no-colour", help="Skip running the register-coloured text."),
    out: str = typer.Option("fp32", "--out", help="C's type for gemm: f32, bf16 or fp16."),
    dump: Optional[str] = typer.Option(None, "--dump", help="With values: save A, B, the C the simulated clusters "
                                       "wrote and its mask to this .npz (to compare with the GPU's C)."),
    cluster_m: Optional[int] = typer.Option(None, "--cluster-m", help="sm_90a gemm: the chosen configuration with "
                                            "clusters of this many CTAs along M (1, or 2: B multicast)."),
    config: Optional[str] = typer.Option(None, "--config", help=CONFIG_HELP),
) -> None:
    """Run a kernel's SASS on the CPU (first and last clusters) and check it; exit 1 on any problem."""
    raise typer.Exit(_check(target, list(dims or []), arch, values, fault, not no_colour, dump, out, cluster_m, config))


def _family_work(target: str, dims: list[int], arch: str, out_dtype: Optional[str] = None,
                 cluster_m: Optional[int] = None, config: Optional[str] = None, **kw: Any) -> Callable[[], Any]:
    """What checking `target` (a kernel family) at `dims` runs: the family's program for the problem,
    with `--config` / `--cluster-m` (the GEMM's 2-CTA clusters) applied, through warpy.plan."""
    from warpy.check.cli import _progress
    from warpy.kernels.family import FAMILY_MODULES, family, parse_overrides
    from warpy.plan import check_problem

    if target not in FAMILY_MODULES:
        raise WarpyError(f"warpy check takes a kernel family ({', '.join(FAMILY_MODULES)}) and its sizes, or a "
                         f"FILE.sass, not {target!r}")
    fam = family(target)
    prob = fam.problem(dims, arch=arch, out_dtype=out_dtype)
    overrides = parse_overrides(config) if config else {}
    if cluster_m is not None:
        if arch != "sm_90a":
            raise WarpyError(f"--cluster-m is an sm_90a option (the {arch} GEMM sets its clusters itself)")
        overrides["cluster_m"] = cluster_m
    cfg = fam.configure(prob, overrides) if overrides else None
    return lambda: check_problem(fam, prob, config=cfg, progress=_progress, **kw)


def _check(target: str, dims: list[int], arch: str, values: bool, fault: Optional[str], colour: bool,
           dump: Optional[str], out: str, cluster_m: Optional[int], config: Optional[str]) -> int:
    from warpy.check.cli import check_file, run_check
    from warpy.kernels.family import FAMILY_MODULES

    if target.endswith(".sass") or (os.path.exists(target) and target not in FAMILY_MODULES):
        if dims:
            raise WarpyError("a FILE.sass takes no sizes")
        if values:
            raise WarpyError("--values needs a kernel family (the checker knows its operands): "
                             "warpy check gemm M N K --values")
        if cluster_m is not None or config:
            raise WarpyError("--cluster-m and --config configure a kernel family's program: "
                             "warpy check gemm M N K --config bn=128")
        return run_check(lambda: check_file(target, fault, colour))
    work = _family_work(target, dims, arch, out, cluster_m, config, values=values or dump is not None, fault=fault,
                        coloured=colour)
    return run_check(work, fault, dump)


@app.command("hb")
def hb_cmd(
    target: str = typer.Argument(..., help="A kernel family: gemm."),
    dims: Optional[list[int]] = typer.Argument(None, help="Its sizes (gemm: M N K)."),
    arch: str = typer.Option("sm_90a", "--arch", help="Target: sm_90a or sm_100a."),
) -> None:
    """Print what orders what: buffer, earlier access, later access, ordered by, how many pairs."""
    from warpy.check.cli import run_hb

    raise typer.Exit(run_hb(_family_work(target, list(dims or []), arch, hb=True, coloured=False)))


def _user_errors() -> tuple[type[BaseException], ...]:
    from warpy.errors import WarpyError
    from warpy.layout import LayoutError

    return (WarpyError, LayoutError)


def main() -> None:
    try:
        app()
    except SystemExit:
        raise
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except BaseException as e:  # one line for the user, the traceback on request
        if os.environ.get("WARPY_TRACEBACK"):
            raise
        if isinstance(e, _user_errors()):
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
        print(f"internal error: {type(e).__name__}: {e} (WARPY_TRACEBACK=1 shows where)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
