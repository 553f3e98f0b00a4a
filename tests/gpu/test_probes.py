"""The probe kernels of kernels/probes.py on an sm_90 GPU (H100/H200): each is built with warpy.isa's
Program builder, lifted, assembled (no disassembler needed), launched through warpy.runtime, and
every element of its output is compared with the numpy expectation.

Each probe runs in its own subprocess (`python tests/gpu/test_probes.py NAME` prints one JSON line),
so that a fault or a hang in one leaves the others' CUDA context intact;
`python tests/gpu/test_probes.py --all` prints a Markdown table of every probe (for the hardware log).

- `tma_copy_2d` / `tma_copy_3d`: TMA load into a 128B-swizzled tile with mbarrier + expect_tx,
  raw tile dump (proves the swizzle and the zero fill of ragged boxes), TMA store into a wider
  pitch (proves clipping: the padding keeps its sentinel);
- `tma_start_*`: the innermost start of an unswizzled box 16 bytes or 0 elements off (they run, the
  latter at a ragged row end) or 1 element off (they fault: `Probe.faults`, asserted here);
- `tma_split_none` / `tma_split_sw128`: the 3-D boxes warpy.layout.desc.tma_box builds for
  tiles wider than a span land where the tile layout says;
- `pipe`: 64 tiles through a 4-stage ring, producer warp → two consumer warps, every byte;
- `multicast`: a 2-CTA cluster, each CTA loads half and multicasts, both store the whole tile;
- `wgmma_*`: one warpgroup HGMMA 64x64 (bf16/fp16 → fp32) per swizzle (128/64/32/none);
  `wgmma_bf16_sw0_flipped` (LBO/SBO swapped) must come out wrong — between the two, one run
  settles `warpy.layout.desc.K_INTERLEAVE_LBO_IS_K_STRIDE`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpu_case import assert_probe_exact, case_main, probe_table_row, run_probe

SEED = 20261129


def _run_here(name: str) -> dict[str, Any]:
    """Build, launch and compare one probe in this process; a dict saying what happened."""
    import numpy as np

    from warpy.kernels.probes import PROBES
    from warpy import runtime as rt
    from warpy.lift.lifter import build, lift
    from warpy.runtime.bind import bind_params, run_header

    probe = PROBES[name]
    kernel = probe.build("sm_90a").kernel()
    h = kernel.header
    cubin = build(kernel, "sm_90a", check=False)
    assert probe.host is not None
    case = probe.host(np.random.default_rng(SEED))
    module = rt.load(cubin)
    k = module.kernel(h.kernel)
    bufs = {n: rt.to_device(np.ascontiguousarray(a)) for n, a in case.arrays.items()}
    params = bind_params(h, bufs, case.scalars)  # by the header's names; grid/block/smem/cluster too
    run_header(k, h, params, timeout=20)
    report: dict[str, Any] = {"ok": True, "kernel": h.kernel, "registers": cubin.resource(h.kernel).registers,
                              "ptx_lines": len(lift(kernel).splitlines()), "outputs": {}}
    for oname, want in case.expected.items():
        got = bufs[oname].download(want.dtype, want.shape)
        a = got.reshape(-1).view(np.uint8) if want.dtype.kind != "f" else got.reshape(-1)
        b = want.reshape(-1).view(np.uint8) if want.dtype.kind != "f" else want.reshape(-1)
        bad = np.flatnonzero(a != b)
        out: dict[str, Any] = {"elements": int(want.size), "mismatches": int(bad.size)}
        if bad.size:
            report["ok"] = False
            out["first"] = [[int(i), float(a[i]), float(b[i])] for i in bad[:8]]
            if want.dtype.kind == "f" and want.ndim == 2 and name.startswith("wgmma"):
                out["rows_of_C_wrong"] = _wrong_rows(got, want)
        report["outputs"][oname] = out
    return report


def _wrong_rows(got: Any, want: Any) -> list[int]:
    """Which rows of C (64 x N) differ, read through the wgmma fragment map (to see 8-row permutations)."""
    import numpy as np

    t = np.arange(128)[:, None]
    i = np.arange(want.shape[1])[None, :]
    row = 16 * (t // 32) + (t % 32) // 4 + 8 * ((i // 2) % 2)
    bad = got != want
    return sorted({int(r) for r in row[bad]})


def _gpu_probes() -> list[str]:
    from warpy.kernels.probes import PROBES

    return [n for n, pr in PROBES.items()
            if "sm_90a" in pr.archs and pr.host is not None and not n.endswith("_flipped") and not pr.faults]


def _faulting_probes() -> list[str]:
    from warpy.kernels.probes import PROBES

    return [n for n, pr in PROBES.items() if pr.faults]


@pytest.mark.parametrize("name", _gpu_probes())
def test_probe_on_the_gpu(name: str) -> None:
    assert_probe_exact(name, run_probe(name))


@pytest.mark.parametrize("name", _faulting_probes())
def test_what_the_hardware_refuses_it_still_refuses(name: str) -> None:
    """The probes recorded as faulting (the checker reports each: tests/kernels/test_tma_start.py)
    still raise what they raised when measured; one that runs would make the checker's rule too strict."""
    from warpy.kernels.probes import PROBES

    r = run_probe(name)
    assert not r.get("ok") and PROBES[name].faults in r.get("error", ""), json.dumps(r)


def test_wgmma_with_lbo_and_sbo_swapped_is_wrong() -> None:
    """The other reading of the unswizzled K-major descriptor must not also give the right C
    (if `wgmma_bf16_sw0` fails and this one fails too, the flip constant is what to change)."""
    r = run_probe("wgmma_bf16_sw0_flipped")
    assert not r.get("ok"), f"the flipped descriptor gave the right C as well: {json.dumps(r)}"
    # wrong through its results, or through a fault of the kernel itself (reading past the tiles),
    # not through anything before the launch
    faulted = "error" in r and "kernel probe_wgmma_bf16_sw0_flipped failed" in r["error"]
    assert faulted or r.get("outputs", {}).get("out", {}).get("mismatches", 0) > 0, json.dumps(r)


def _table() -> str:
    """Every sm_90a probe, each in its own subprocess: one line each (for the hardware log)."""
    out = ["| probe | result | registers | elements checked |", "|---|---|---|---|"]
    for name in _gpu_probes() + ["wgmma_bf16_sw0_flipped"] + _faulting_probes():
        out.append(probe_table_row(name, run_probe(name), width=120))
    return "\n".join(out)


if __name__ == "__main__":  # one probe, one JSON line (run by the tests above in a subprocess)
    case_main(_run_here, _table)
