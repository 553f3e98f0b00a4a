"""The SASS that ptxas emits for the PTX probes of tests/isa/probes/ (disassembled by nvdisasm, once
a session): what the records' spellings are checked against, and where the opcode walk finds each
record's probe."""

from __future__ import annotations

import functools
import pathlib
import re
import subprocess
import tempfile

import pytest

PROBES = pathlib.Path(__file__).resolve().parent / "probes"

#: Records ptxas emits but no probe makes it emit yet, and why that is acceptable for now.
NOT_PROBED = {
    "UIMAD": "ptxas keeps uniform multiply-adds for its own address arithmetic; no PTX asks for one directly",
    "USEL": "ptxas selects USEL only for uniform selp it proves warp-uniform; the probes' selp land in SEL",
    "UPLOP3": "ptxas emits uniform predicate logic only when it moves predicates to the uniform file itself",
}


def _disassemble(ptx: pathlib.Path, tmp: pathlib.Path) -> list[str]:
    """The instruction texts nvdisasm prints for a probe (ptxas and nvdisasm found as warpy finds them;
    the probe is assembled directly, not through warpy's lifter or cubin cache; the listing comes
    through `warpy.lift.disasm.listing`, which keeps nvdisasm's output on disk)."""
    from warpy.lift.disasm import find_disassembler, listing
    from warpy.lift.ptxas import find_ptxas

    # ptxas and nvdisasm are dependencies (nvidia-cuda-nvcc-cu12, nvidia-cuda-nvdisasm): a missing
    # one fails here naming it, never skips
    ptxas, nvdisasm = find_ptxas().path, find_disassembler()
    if nvdisasm.kind != "nvdisasm":
        pytest.fail(f"the probes' spellings are nvdisasm's; only {nvdisasm.kind} was found (pip install nvidia-cuda-nvdisasm)")
    arch = re.search(r"sm_\d+a", ptx.name).group(0)  # type: ignore[union-attr]
    cubin = tmp / (ptx.stem + ".cubin")
    subprocess.run([ptxas, f"-arch={arch}", str(ptx), "-o", str(cubin)], check=True, capture_output=True, timeout=120)
    out = listing(cubin.read_bytes(), nvdisasm)  # (`nvdisasm -c`; kept on disk by the cubin's and the tool's bytes)
    lines = []
    for line in out.splitlines():
        m = re.match(r"\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P[0-9T]\s+)?(.*?)\s*;", line)
        if m:
            lines.append(m.group(1))
    return lines


@functools.lru_cache(maxsize=1)
def _all() -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for ptx in sorted(PROBES.glob("*.ptx")):
            arch = re.search(r"sm_\d+a", ptx.name).group(0)  # type: ignore[union-attr]
            out.extend((arch, text) for text in _disassemble(ptx, pathlib.Path(tmp)))
    return tuple(out)


def probe_disassembly() -> tuple[tuple[str, str], ...]:
    """(target, instruction text) of every instruction of every probe."""
    return _all()
