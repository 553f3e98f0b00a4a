"""Suite-wide settings.

Hypothesis: the health checks about how fast inputs are generated (filtering, slow draws) are
warnings about the machine and the strategies, not about warpy; on a loaded 2-core CI machine they
fail runs at random, so they are off. Every property still runs its full number of examples.

Two profiles: `warpy` (the default, what CI runs) is derandomized, so every run draws the same
examples and whether a bug is caught does not depend on the run; `random` draws fresh examples
each run, for longer local hunts: `HYPOTHESIS_PROFILE=random python3 -m pytest -q tests/layout`
(add `--hypothesis-seed=N` to replay one)."""

import os

from hypothesis import HealthCheck, settings

_QUIET = [HealthCheck.filter_too_much, HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("warpy", suppress_health_check=_QUIET, derandomize=True, database=None)
settings.register_profile("random", suppress_health_check=_QUIET)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "warpy"))
