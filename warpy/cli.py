"""The `warpy` command.

Each verb imports its implementation lazily, so `warpy --help` stays fast and a verb
that needs CUDA does not make the others need it. Errors a user can cause are one line
(`error: ...`) and exit status 2; set WARPY_TRACEBACK=1 to see the traceback of any error.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

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
