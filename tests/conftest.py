"""Suite-wide settings.

Hypothesis: the health checks about how fast inputs are generated (filtering, slow draws) are
warnings about the machine and the strategies, not about warpy; on a loaded 2-core CI machine they
fail runs at random, so they are off. Every property still runs its full number of examples.

Two profiles: `warpy` (the default, what CI runs) is derandomized, so every run draws the same
examples and whether a bug is caught does not depend on the run; `random` draws fresh examples
each run, for longer local hunts: `HYPOTHESIS_PROFILE=random python3 -m pytest -q tests/layout`
(add `--hypothesis-seed=N` to replay one).

Two workers: the whole suite (`python -m pytest -q`, the README's and CI's command, which runs the
`testpaths`) is spread over 2 processes with pytest-xdist when it is installed (the `test` extra
installs it); a machine without it runs the same tests in one process. A run of named files or
folders stays in one process (its output and `-x` as usual). `WARPY_XDIST=N` asks for N workers
on any run, `WARPY_XDIST=0` for none; an explicit `-n` wins."""

from __future__ import annotations

import os

# the suite's GEMMs run the rule's picks: a machine's own tuned table (kernels/gemm_tune.py, written on a
# GPU where a shape was first used) is neither read nor written unless a test asks for it
os.environ.setdefault("WARPY_TUNE", "0")

import pytest
from hypothesis import HealthCheck, Phase, settings

_QUIET = [HealthCheck.filter_too_much, HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("warpy", suppress_health_check=_QUIET, derandomize=True, database=None)
settings.register_profile("random", suppress_health_check=_QUIET)
# mutation testing (.ci/mutation.py): CI's examples, but a failure is not shrunk (a killed mutant
# needs no minimal example, and shrinking one can outlast mutmut's time limit)
settings.register_profile("mutation", suppress_health_check=_QUIET, derandomize=True, database=None,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "warpy"))

DEFAULT_WORKERS = 2


def _workers(config: pytest.Config) -> int:
    env = os.environ.get("WARPY_XDIST")
    if env is not None:
        try:
            return max(0, int(env))
        except ValueError:
            raise pytest.UsageError(f"WARPY_XDIST={env!r} is not a number of workers") from None
    whole_suite = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    return DEFAULT_WORKERS if whole_suite and (os.cpu_count() or 1) >= 2 else 0


BLAS_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _blas_threads(config: pytest.Config) -> None:
    """BLAS threads a test process: the cores shared among the run's processes (unless the
    environment sets them). OpenBLAS starts a thread per core for each matrix product and its threads
    spin while they wait, so two workers on two cores (or one beside other work) took turns
    spinning: the Llama MLP's VM test at T = 16 ran 65 s beside a twin of itself, 2.9 s with one
    thread each. numpy reads these on its first import, which nothing does before the tests are
    collected; the workers and the commands the tests start inherit them."""
    n = config.getoption("numprocesses", None) if config.pluginmanager.hasplugin("xdist") else None
    cores = os.cpu_count() or 1
    processes = (n if n > 0 else 1) if isinstance(n, int) else (cores if n is not None else 1)
    for var in BLAS_VARS:
        os.environ.setdefault(var, str(max(1, cores // processes)))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return  # one of xdist's workers: as its controller set up
    try:
        _spread(config)
    finally:
        _blas_threads(config)


def _spread(config: pytest.Config) -> None:
    if not config.pluginmanager.hasplugin("xdist"):
        return  # no xdist here (it is optional)
    if config.getoption("numprocesses", None) is not None or config.getoption("dist", "no") != "no":
        return  # -n / --dist given: as asked
    if config.getoption("collectonly", False) or config.getoption("usepdb", False):
        return
    n = _workers(config)
    if n:
        config.option.numprocesses = n
        config.option.dist = "load"
        config.option.tx = ["popen"] * n
