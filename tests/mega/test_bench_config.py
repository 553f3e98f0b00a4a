"""`warpy mega bench --config`: warpy's rows with the interpreter's fields set by hand (the command
that times a configuration the rule does not take yet, e.g. glu_split=1); a bad field or workload is
refused in one line before anything is imported or built."""

from __future__ import annotations

import pytest

from warpy.errors import WarpyError
from warpy.kernels.mega_bench import bench_job


def test_a_bad_field_is_refused_before_anything_runs() -> None:
    with pytest.raises(WarpyError, match=r"MegaConfig has no field 'nonsense' \(fields: .*glu_split"):
        bench_job(["llama-1"], config="nonsense=1")
    with pytest.raises(WarpyError, match="glu_split='maybe': MegaConfig.glu_split takes true or false"):
        bench_job(["llama-decoder-1k"], config="glu_split=maybe")
    with pytest.raises(WarpyError, match="no workload 'nope'"):
        bench_job(["nope"], config="glu_split=1")
