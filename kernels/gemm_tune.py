"""A GEMM shape tuned on this GPU on first use.

The rule (`kernels/gemm.py`'s `choose`) runs the fastest configuration the committed sweep table
measured at a shape, else the model's pick for it. Where the table has not measured a plain sm_90a
shape (16-bit inputs, no fused epilogue, batch, pitches or MN-major operand), the first GEMM of that
shape on an sm_90 GPU times the sweep's candidates for it (`gemm_sweep.candidates`, the rule's pick
first; `gemm_sweep.run_sweep` of one shape: the same builds, timer and fp32 check) and keeps the row
in this machine's tuned table, `$WARPY_CACHE/gemm_tuned_<GPU>.json` (the sweep table's format). From
then on `choose` runs that row's fastest configuration, in this process and every later one.

It takes a few seconds a shape (the candidates built by a pool of processes, then timed against
cuBLAS), said on stderr. It never runs without an sm_90 GPU, torch, or while a CUDA graph is being
captured (the rule's pick runs then), and `WARPY_TUNE=0` turns it off (the tuned table is then not
read either). A row of another GPU's table is never used: each GPU model has its own file.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from .gemm_sm90 import Sm90Config
from .gemm_sweep import SweepRow, SweepTable, config_text, current_table, lookup, plain, read_table, run_sweep, sweeping

#: configurations timed when a shape is tuned (the sweep's default table was swept with 10 to 20)
TUNE_CANDIDATES = 24
#: how much faster than the rule's pick a tuned configuration must have run to replace it
TUNE_MARGIN = 0.02
#: processes that build the candidates (each imports warpy: for 16 candidates more cost more than they saved)
TUNE_WORKERS = 6

_tables: dict[str, tuple[float, SweepTable]] = {}


def enabled() -> bool:
    """Whether shapes are tuned and the tuned table read (`WARPY_TUNE`, on unless "0")."""
    return os.environ.get("WARPY_TUNE", "1") != "0"


def tuned_path(gpu: Optional[str] = None) -> Optional[Path]:
    """This machine's tuned table for GPU model `gpu` (default: GPU 0's; None where there is none)."""
    if gpu is None:
        from .gemm_sweep import _gpu_name

        gpu = _gpu_name()
    if not gpu:
        return None
    from warpy.cache import cache_root

    return cache_root() / f"gemm_tuned_{re.sub(r'[^A-Za-z0-9]+', '_', gpu).strip('_')}.json"


def tuned_table(path: Optional[Path] = None) -> SweepTable:
    """The tuned table (empty where there is none, tuning is off, or no GPU), re-read when it changes."""
    if not enabled():
        return SweepTable()
    path = path if path is not None else _known_path()
    if path is None or not path.exists():
        return SweepTable()
    mtime = path.stat().st_mtime
    hit = _tables.get(str(path))
    if hit is None or hit[0] != mtime:
        try:
            hit = _tables[str(path)] = (mtime, read_table(path))
        except Exception:  # a damaged file is a miss: the next tune rewrites it
            return SweepTable()
    return hit[1]


_path_memo: dict[str, Optional[Path]] = {}
_no_table: set[str] = set()  # cache folders holding no tuned table when this process looked


def _known_path(tuning: bool = False) -> Optional[Path]:
    """The tuned table's path: the driver is asked for the GPU's name only where a tuned table exists
    (a machine that tuned before) or a shape is being tuned (`tuning`); never without a GPU."""
    from warpy.cache import cache_root

    if "path" not in _path_memo:
        if not tuning:  # (looked for once a cache folder and process: `choose` asks at every plan)
            root = str(cache_root())
            if root in _no_table:
                return None
            if not any(cache_root().glob("gemm_tuned_*.json")):
                _no_table.add(root)
                return None
        from warpy.bench import gpu_reason

        _path_memo["path"] = tuned_path() if gpu_reason("sm_90a") is None else None
    return _path_memo["path"]


def tuned(problem: Any) -> Optional[Sm90Config]:
    """The tuned table's configuration for exactly this problem, if it builds for it: the fastest
    timed, unless the rule's own pick (the row's first: `candidates` puts it first) ran within
    TUNE_MARGIN of it (a near tie is timing noise, and the fastest of many noisy times is
    optimistic)."""
    if problem.arch != "sm_90a" or not plain(problem) or not enabled() or sweeping():
        return None
    best = lookup(problem, tuned_table())
    if best is None:
        return None
    row = _row(problem)
    assert row is not None and row.best is not None
    first = row.measured[0]
    if first.check == "ok" and first.us * (1 - TUNE_MARGIN) <= row.best.us:
        return first.config
    return best


def _row(problem: Any) -> Optional[SweepRow]:
    """The tuned table's row of exactly this problem (its shape and types), if any."""
    return tuned_table().row((problem.M, problem.N, problem.K), problem.dtype, problem.out_dtype)


def _workers() -> int:
    """Build processes: TUNE_WORKERS, or 0 (a thread of this process) where the main program is no file
    a spawned process can import again (`python - <<EOF`, a notebook's kernel)."""
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    return TUNE_WORKERS if main is None or Path(main).exists() else 0


def plan_key(problem: Any) -> str:
    """What a plan of `problem` depends on beyond the problem and the sources: its tuned configuration."""
    cfg = tuned(problem)
    return "" if cfg is None else config_text(cfg)


def _capturing() -> bool:
    try:
        import torch  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return True  # (no torch: no cuBLAS to time against, nothing to tune with)
    return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One tuner at a time on a table (processes of one machine: a rewrite would lose another's row)."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_tuned(problem: Any, echo: Optional[Callable[[str], None]] = None) -> Optional[Sm90Config]:
    """Tune `problem` on this GPU if it should be and has not been (module docstring); returns the
    tuned configuration (None: the rule's own pick runs)."""
    if (not enabled() or problem.arch != "sm_90a" or not plain(problem) or problem.dtype not in ("bf16", "fp16")
            or lookup(problem, current_table()) is not None):
        return None
    if _row(problem) is not None:  # tuned before (None: no candidate ran there; the rule's pick runs)
        return tuned(problem)
    path = _known_path(tuning=True)
    if path is None or _capturing():
        return None
    say = echo or (lambda msg: print(msg, file=sys.stderr, flush=True))
    shape = (problem.M, problem.N, problem.K)
    with _locked(path):
        if _row(problem) is not None:  # (another process tuned it meanwhile)
            return tuned(problem)
        say(f"warpy: tuning {problem.M}x{problem.N}x{problem.K} {problem.dtype}->{problem.out_dtype} on this GPU "
            f"(first use; {TUNE_CANDIDATES} configurations; kept in {path}; WARPY_TUNE=0 turns this off)")
        run_sweep([shape], str(path), problem.dtype, problem.out_dtype, per_shape=TUNE_CANDIDATES, echo=say,
                  command=f"tuned on first use: {problem.M}x{problem.N}x{problem.K}", workers=_workers(),
                  second_pass=False)
    return tuned(problem)


__all__ = ["TUNE_CANDIDATES", "enabled", "ensure_tuned", "plan_key", "tuned", "tuned_path", "tuned_table"]
