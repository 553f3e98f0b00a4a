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


def test_ab_refuses_in_one_line_before_anything_runs() -> None:
    """`warpy mega ab`: a bad workload, no configuration, a bad field or round count: one line, before
    torch is imported or anything is built."""
    from warpy.kernels.mega_bench import ab_job

    for args, msg in (((["nope"], ["fresh=1"]), "no workload 'nope'"),
                      ((["llama-decoder-1k"], []), "give at least one --config"),
                      ((["llama-decoder-1k"], ["nonsense=1"]), "MegaConfig has no field 'nonsense'"),
                      ((["llama-1"], ["fresh=1"], 0), "--rounds and --iters must be at least 1"),
                      ((["llama-1"], ["fresh=1", "fresh=1"]), "--config fresh=1 is given twice")):
        with pytest.raises(WarpyError, match=msg) as e:
            ab_job(*args)  # type: ignore[arg-type]
        assert "\n" not in str(e.value)


def test_ab_table_golden() -> None:
    """The rule first, each configuration's best and median round and its best against the rule's."""
    from warpy.kernels.mega_bench import ABRow, ab_table

    rows = [ABRow("llama-decoder-1k", "rule", (1165.6, 1166.0, 1170.2), 8.4, 0),
            ABRow("llama-decoder-1k", "fresh=1", (1174.7, 1170.9, 1173.3), 8.5, 0),
            ABRow("llama-decoder-1k", "fence=once", (1200.0,), 20.0, 3)]
    lines = ab_table(rows).splitlines()
    assert lines[0].split() == ["workload", "configuration", "best", "µs", "median", "µs", "vs", "rule", "max", "steps"]
    assert lines[2].split() == ["llama-decoder-1k", "rule", "1165.6", "1166.0", "-", "8.40"]
    assert lines[3].split() == ["llama-decoder-1k", "fresh=1", "1170.9", "1173.3", "+0.5%", "8.50"]
    assert lines[4].split() == ["llama-decoder-1k", "fence=once", "1200.0", "1200.0", "+3.0%", "20.00", "3", "OVER"]
