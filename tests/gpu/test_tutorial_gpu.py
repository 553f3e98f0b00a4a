"""docs/tutorial.md on an sm_90 GPU: every block, the GPU ones too (a TMA copy and a pipelined
wgmma tile, run and compared with numpy, then timed). Run on the H200 with
`python -m pytest -q tests/gpu/test_tutorial_gpu.py -s` (-s shows the two numbers)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "cli"))  # the runner lives beside the CPU test

from tutorial_runner import run  # noqa: E402


def test_the_tutorial_runs_on_the_gpu(tmp_path: Path) -> None:
    printed = "".join(run(tmp_path, gpu=True))
    print(printed)
    assert "copy: " in printed and " GB/s" in printed
    assert "tile: " in printed and " flops on one SM" in printed
