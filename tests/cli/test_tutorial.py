"""docs/tutorial.md runs: every block that needs no GPU, in order, in one folder (the GPU blocks run
in tests/gpu/test_tutorial_gpu.py on an sm_90 GPU)."""

from __future__ import annotations

from pathlib import Path

from tutorial_runner import TUTORIAL, blocks, run


def test_every_block_of_the_tutorial_is_one_the_test_runs() -> None:
    found = blocks(TUTORIAL.read_text())
    assert {b.kind for b in found} == {"file", "python", "sh"}
    assert any(b.gpu for b in found) and any(not b.gpu for b in found)


def test_the_tutorial_runs_without_a_gpu(tmp_path: Path) -> None:
    printed = "".join(run(tmp_path, gpu=False))
    # the checker's verdicts, as the page says
    assert "0 protocol problems; 0 uses of memory past what was declared; 0 accesses nothing orders" in printed
    assert "8192 output values computed, 0 differ from numpy" in printed
    assert (tmp_path / "copy.cubin").read_bytes()[:4] == b"\x7fELF"
    assert (tmp_path / "tile.cubin").read_bytes()[:4] == b"\x7fELF"
