"""`warpy.kernels.gemm.configure`: the rule's configuration with fields set by hand (`--config` of
`warpy gemm`, `warpy bench gemm` and `warpy check gemm`)."""

from __future__ import annotations

import subprocess

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.errors import WarpyError
from warpy.kernels.gemm_sm90 import smem_bytes
from warpy.target import SM90A

MAX_SMEM = SM90A.max_dynamic_smem
from warpy.kernels.family import parse_overrides
from warpy.kernels.gemm import GemmProblem, choose, configure


def test_overrides_parse_as_ints_and_booleans() -> None:
    assert parse_overrides("bn=192, cluster_m=2,staged_epilogue=false,sms=0x84") == \
        {"bn": 192, "cluster_m": 2, "staged_epilogue": False, "sms": 132}
    assert parse_overrides("") == {}
    with pytest.raises(WarpyError, match="not KEY=VALUE"):
        parse_overrides("bn")


def test_nothing_set_is_the_rule() -> None:
    prob = GemmProblem(4096, 4096, 4096, out_dtype="bf16")
    assert configure(prob, None) == configure(prob, "") == choose(prob)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([64, 128, 144, 160, 192, 208, 224, 256]), st.sampled_from([1, 2]),
       st.sampled_from([(4096, 4096, 4096), (1000, 1000, 1000), (1, 4096, 4096)]))
def test_a_changed_tile_gets_the_deepest_ring_that_fits(bn: int, consumers: int, shape: tuple[int, int, int]) -> None:
    prob = GemmProblem(*shape, out_dtype="bf16")
    cfg = configure(prob, {"bn": bn, "consumers": consumers})
    assert (cfg.bn, cfg.consumers) == (bn, consumers)
    assert smem_bytes(cfg) <= MAX_SMEM
    assert cfg.stages == 8 or smem_bytes(attrs.evolve(cfg, stages=cfg.stages + 1)) > MAX_SMEM
    assert configure(prob, {"bn": bn, "consumers": consumers, "stages": 3}).stages == 3


def test_clusters_walk_whole_tiles_unless_stream_k_is_asked_for() -> None:
    prob = GemmProblem(1024, 1024, 65536, out_dtype="bf16")
    assert choose(prob).stream_k
    cfg = configure(prob, "cluster_m=2")
    assert cfg.cluster_m == 2 and not cfg.stream_k and cfg.split == 0


@pytest.mark.parametrize("text,match", [("bnn=1", "no field 'bnn'"), ("bn=x", "takes an integer"),
                                        ("staged_epilogue=3", "takes true or false")])
def test_bad_fields_are_refused_in_one_line(text: str, match: str) -> None:
    with pytest.raises(WarpyError, match=match):
        configure(GemmProblem(256, 256, 128), text)


def _warpy(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m warpy.cli ARGS`'s result, from its entry point in this process."""
    from warpy_in_process import run_cli

    return run_cli(*args, timeout=300)


def test_gemm_and_check_take_a_configuration() -> None:
    r = _warpy("gemm", "256", "256", "128", "--config", "bn=128,stages=5", "--no-run")
    assert r.returncode == 0, r.stderr
    assert "128x128x64 tiles" in r.stdout and "5-stage TMA ring" in r.stdout
    r = _warpy("check", "gemm", "256", "512", "256", "--config", "bn=256,cluster_m=2", "--values")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "_c2:" in r.stderr and "0 differ from numpy" in r.stdout
    r = _warpy("gemm", "256", "256", "128", "--config", "bnn=1", "--no-run")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "no field 'bnn'" in r.stderr
