"""The `warpy check` and `warpy hb` verbs (imported lazily by warpy.cli)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Optional

from warpy.errors import WarpyError


def _progress(msg: str) -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\r" + msg[:150] + "\x1b[K")
    else:
        sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def _end_progress() -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\r\x1b[K")
        sys.stderr.flush()


def _problem(target: str, dims: list[int], arch: str, out_dtype: str = "fp32"):  # type: ignore[no-untyped-def]
    from warpy.kernels.gemm import GemmProblem  # type: ignore[import-not-found,unused-ignore]

    if target != "gemm":
        raise WarpyError(f"warpy check takes `gemm M N K` or a FILE.sass, not {target!r}")
    if len(dims) != 3:
        raise WarpyError(f"gemm takes three sizes M N K, got {len(dims)}")
    return GemmProblem(dims[0], dims[1], dims[2], arch=arch, out_dtype=out_dtype)


def _config(problem: Any, cluster_m: Optional[int], config: Optional[str] = None) -> Any:
    """The configuration `choose` gives the shape with `--config` and `--cluster-m` applied
    (`kernels.programs.configure`; clusters walk whole tiles, so a stream-K choice becomes the
    persistent walk); None when neither is given."""
    if cluster_m is None and not config:
        return None
    from warpy.kernels.gemm import configure, parse_overrides  # type: ignore[import-not-found,unused-ignore]

    if cluster_m is not None and problem.arch != "sm_90a":
        raise WarpyError(f"--cluster-m is an sm_90a option (the {problem.arch} GEMM sets its clusters itself)")
    overrides = parse_overrides(config) if config else {}
    if cluster_m is not None:
        overrides["cluster_m"] = cluster_m
    return configure(problem, overrides)


def check_main(target: str, dims: list[int], arch: str, values: bool, fault: Optional[str], colour: bool,
               dump: Optional[str] = None, out_dtype: str = "fp32", cluster_m: Optional[int] = None,
               config: Optional[str] = None) -> int:
    """Print the problems and the summary line; the exit status (0: nothing found)."""
    from warpy.check.faults import FaultDoesNotApply, inject
    from warpy.check.report import check_gemm, check_kernel, settle_fault

    t0 = time.monotonic()
    try:
        if target.endswith(".sass") or (os.path.exists(target) and target != "gemm"):
            from warpy.isa.text import parse

            if dims:
                raise WarpyError("a FILE.sass takes no sizes")
            if values:
                raise WarpyError("--values needs a GEMM (the checker knows its operands): warpy check gemm M N K --values")
            if cluster_m is not None or config:
                raise WarpyError("--cluster-m and --config configure a GEMM: warpy check gemm M N K --config bn=128")
            try:
                text = open(target).read()
            except OSError as e:
                raise WarpyError(f"cannot read {target}: {e.strerror}") from None
            k = parse(text)
            col = None
            if k.named:  # a named text is coloured here, and the two compared
                from warpy.isa.colour import colour as colour_text

                col = colour_text(k)
            else:
                print("(a coloured text: the colouring is not compared with a named one)", file=sys.stderr)
            if fault:
                k, col, note = inject(fault, k, col)
                _progress(f"fault {fault}: {note}")
            rep = check_kernel(k, col, progress=_progress)
            if fault:
                rep.fault_note = note
                settle_fault(fault, rep)
        else:
            prob = _problem(target, dims, arch, out_dtype)
            rep = check_gemm(prob, values=values or dump is not None, fault=fault, progress=_progress, coloured=colour,
                             config=_config(prob, cluster_m, config))
            if dump is not None and rep.data:
                import numpy as np

                np.savez(dump, **rep.data)  # type: ignore[arg-type]
            if fault:
                _end_progress()
                print(f"fault {fault}: {rep.fault_note}")
    except FaultDoesNotApply as e:
        _end_progress()
        print(str(e))
        return 3
    _end_progress()
    for line in rep.messages():
        print(line)
    print(rep.summary())
    print(f"({rep.kernel}: {rep.steps} warp instructions in {time.monotonic() - t0:.1f} s)", file=sys.stderr)
    return 0 if rep.ok else 1


def hb_main(target: str, dims: list[int], arch: str) -> int:
    from warpy.check.report import check_gemm

    prob = _problem(target, dims, arch)
    rep = check_gemm(prob, hb=True, progress=_progress, coloured=False)
    _end_progress()
    for line in hb_table(rep.hb_table):
        print(line)
    for line in rep.messages():
        print(line)
    return 0 if rep.ok else 1


def _warps(ws: set[int]) -> str:
    s = sorted(ws)
    if len(s) == 1:
        return f"warp {s[0]}"
    if s == list(range(s[0], s[-1] + 1)):
        return f"warps {s[0]}-{s[-1]}"
    return "warps " + ",".join(map(str, s))


def hb_table(table: dict[tuple[Any, ...], int]) -> list[str]:
    """Rows: buffer, earlier access, later access, what ordered them, how many pairs."""
    rows: dict[tuple[Any, ...], list[Any]] = {}
    for (buf, eop, ewarp, _, lop, lwarp, other, how, ekind, lkind), n in table.items():
        if ekind == "r" and lkind == "r":
            continue
        key = (buf, eop, lop, other, how)
        r = rows.setdefault(key, [set(), set(), 0])
        r[0].add(ewarp)
        r[1].add(lwarp)
        r[2] += n
    cells = []
    for (buf, eop, lop, other, how), (ew, lw, n) in sorted(rows.items(), key=lambda kv: (kv[0][0], -kv[1][2])):
        cells.append((buf, f"{eop}, {_warps(ew)}{other}", f"{lop}, {_warps(lw)}", f"{how or 'program order'}  ({n})"))
    wb = max([len("buffer")] + [len(x[0]) for x in cells]) + 1
    we = max([len("earlier")] + [len(x[1]) for x in cells]) + 2
    wl = max([len("later")] + [len(x[2]) for x in cells]) + 2
    out = [f"{'buffer':<{wb}}{'earlier':<{we}}{'later':<{wl}}ordered by"]
    out += [f"{b:<{wb}}{e:<{we}}{lt:<{wl}}{how}" for b, e, lt, how in cells]
    return out
