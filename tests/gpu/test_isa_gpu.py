"""The instruction set beyond GEMM on an sm_90 GPU (H100/H200): the lifted PTX agrees with the
checker's values, word for word.

- `math_table`: `warpy.isa.examples.math_table` (every fp32, MUFU, packed 16-bit, conversion, integer,
  shuffle, vote, REDUX and atomic opcode of issue 13) runs on a table of edge-case inputs (NaN, ±inf,
  subnormals, signed zeros, ties, overflows; `table()`); each of its 64 x 56 output words must equal
  the checker's (`warpy.check` with values on the same inputs), the MUFU words within PTX's error
  bounds of the exact function (`warpy.isa.semantics.mufu_agrees`);
- `hgmma_rs` (HGMMA with A from registers vs numpy), `counters` (atomics, acquire/release, the
  spin-wait across 8 CTAs) and `dispatch` (an interpreter loop whose dispatch ptxas makes a jump
  table) run through tests/gpu/test_probes.py's runner and compare with their host expectations.

Each case runs in its own subprocess (`python tests/gpu/test_isa_gpu.py NAME` prints one JSON
line), so a fault or a hang in one leaves the others' CUDA context intact;
`python tests/gpu/test_isa_gpu.py --all` prints a Markdown table for the hardware log. The host side
(inputs, the checker's words, the comparison) runs on the CPU too: tests/lift/test_isa_probes.py.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest

from gpu_case import assert_probe_exact, case_main, probe_table_row, run_case, run_probe

#: what each of math_table's output words holds (`warpy.isa.examples.math_table`): f0..f3 are the
#: thread's fp32 inputs, w0..w3 its raw words
SLOTS = [
    "FADD f0+f1", "FADD.FTZ.RZ f0-f1", "FMUL f0*f1", "FMUL.RM f1*f2", "FFMA f0*f1+f2", "FFMA.FTZ.RP f1*f2-f3",
    "FMNMX min(f0,f1)", "FMNMX.NAN max(f2,f3)", "FSEL f0<f1 ? f2 : f3", "FSETP.GEU.FTZ f2,f3", "MUFU.EX2 f0",
    "MUFU.RSQ f1", "MUFU.RCP f2", "MUFU.LG2 f3", "F2FP.BF16 (f0,f1)", "F2FP.F16.RZ (f2,f3)", "HADD2.BF16_V2 w0+w1",
    "HMUL2 w2*w3", "HFMA2.BF16_V2 w0*w1+w2", "HFMA2 w1*w2+w3", "HMNMX2.BF16_V2 min(w0,w1)", "HMNMX2.NAN max(w2,w3)",
    "F2F.F32.BF16 w0", "F2F.F32.F16 w1", "F2F.BF16.F16 w2", "F2F.F16.BF16 w3", "F2F.F16.F32 f0", "F2F.BF16.F32 f1",
    "I2FP.F32.S32 w0", "I2F.F16.U32 w1", "I2F.BF16 w2", "I2FP.F32.U32.RZ w3", "F2I.TRUNC f0", "F2I.U32.CEIL f1",
    "F2I.F16.NTZ w2", "F2I.BF16.FLOOR w3", "VIMNMX min(w0,w1)", "VIMNMX.U32 max(w2,w3)", "SHFL.BFLY w0 ^1",
    "SHFL.IDX w1 from w2&31", "SHFL.DOWN w3 +3", "SHFL.DOWN in range", "warp sum f0", "warp max f1",
    "VOTE ballot f0<f1", "VOTE.ALL geu", "REDUX.SUM w0", "REDUX.MAX.S32 w1", "ATOMG.ADD own word",
    "ATOMG.MAX.S32 own word", "ATOMG.CAS own word", "spin-wait saw", "CTA sum f0", "REDUX.MIN w1", "REDUX.OR w2",
    "VOTE ballot shfl in range",
]
MUFU_SLOTS = {10: ("EX2", 0), 11: ("RSQ", 1), 12: ("RCP", 2), 13: ("LG2", 3)}  # slot -> (function, f input)

F32_TABLE = [0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x00800000, 0x80800001, 0x7F7FFFFF, 0xFF7FFFFF,
             0x7F800000, 0xFF800000, 0x7FC00000, 0xFFFFFFFF, 0x3F800000, 0xBF800000, 0x3F000000, 0x40490FDB,
             0xC2FC0000, 0x43000000, 0x4F000000, 0xCF000001, 0x3FC00000, 0x40200000, 0x3EAAAAAB, 0x33800001,
             0x4B800001, 0x3F7FFFFF, 0x7E967699, 0x0C000000, 0x42B17218, 0xC1200000, 0x3F808000, 0x3F818000]
F16_TABLE = [0x0000, 0x8000, 0x0001, 0x83FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0x3C00, 0xBC00,
             0x3800, 0x4248, 0x7800, 0x1400, 0x3C01, 0x5BFF, 0xD7FF, 0x0200]
BF16_TABLE = [0x0000, 0x8000, 0x0001, 0x807F, 0x0080, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x7FC0, 0x3F80, 0xBF80,
              0x3F00, 0x4049, 0x4F00, 0x0C00, 0x3F81, 0x477F, 0xC77F, 0x0040]
INT_TABLE = [0, 1, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 0x01000001, 65504, 65520, 0x00FFFFFF, 0xFFFF0000, 37, 0xDEADBEEF]


def table() -> Any:
    """The inputs: thread t's f0..f3 from F32_TABLE and w0..w3 pairing fp16 / bf16 edge values or
    integers, so that every pair of edges meets in some thread and operation."""
    import numpy as np

    from warpy.isa.examples import MATH_IN, MATH_THREADS

    f, h, b, n = F32_TABLE, F16_TABLE, BF16_TABLE, INT_TABLE
    inp = np.zeros((MATH_THREADS, MATH_IN), dtype=np.uint32)
    for t in range(MATH_THREADS):
        inp[t, 0:4] = [f[t % len(f)], f[(7 * t + 3) % len(f)], f[(5 * t + 1) % len(f)], f[(11 * t + 2) % len(f)]]
        if t % 4 == 3:  # integers for the conversions from integers and integer min/max
            inp[t, 4:8] = [n[t % len(n)], n[(5 * t + 1) % len(n)], n[(3 * t + 2) % len(n)], n[(7 * t + 5) % len(n)]]
        else:
            w0 = b[t % len(b)] | b[(3 * t + 1) % len(b)] << 16
            w1 = b[(5 * t + 2) % len(b)] | h[(7 * t + 3) % len(h)] << 16
            w2 = h[t % len(h)] | h[(9 * t + 4) % len(h)] << 16
            w3 = h[(3 * t + 5) % len(h)] | b[(11 * t + 6) % len(b)] << 16
            inp[t, 4:8] = [w0, w1, w2, w3]
    return inp


def checker_words(inp: Any, arch: str = "sm_90a") -> Any:
    """math_table's output words as the checker computes them from `inp` (a uint32 [64, 56])."""
    import numpy as np

    from warpy.check.report import check_kernel
    from warpy.isa.examples import MATH_CTR, MATH_OUT, MATH_THREADS, math_table
    from warpy.kernels.probes import HostCase, ProbeExpectation

    case = HostCase({"inp": inp, "ctr": np.zeros(MATH_CTR, np.uint32)}, {"out": np.zeros((MATH_THREADS, MATH_OUT), np.uint32)})
    expect = ProbeExpectation(case)
    p = math_table(arch)
    rep = check_kernel(p.kernel(), None, values=True, expect=expect)
    if rep.problems.total() - rep.problems.count("values"):
        raise AssertionError(f"the checker reports problems in math_table: {rep.text()}")
    return expect.outputs["out"].copy()


def _f32(bits: int) -> float:
    return float(struct.unpack("<f", struct.pack("<I", int(bits) & 0xFFFFFFFF))[0])


def compare(inp: Any, got: Any, want: Any) -> list[dict[str, Any]]:
    """Where the GPU's words differ from the checker's: every word exactly, the MUFU words within
    PTX's bounds of the exact function. One record a difference (slot, thread, inputs, both words)."""
    from warpy.isa.semantics import mufu_agrees

    bad: list[dict[str, Any]] = []
    for t in range(got.shape[0]):
        for s in range(got.shape[1]):
            g, w = int(got[t, s]), int(want[t, s])
            if s in MUFU_SLOTS:
                func, k = MUFU_SLOTS[s]
                ok = mufu_agrees(func, int(inp[t, k]), g)
            else:
                ok = g == w
            if not ok:
                bad.append({"slot": SLOTS[s], "thread": t, "inputs": [hex(int(x)) for x in inp[t]],
                            "gpu": hex(g), "checker": hex(w), "gpu_f32": _f32(g), "checker_f32": _f32(w)})
    return bad


def _run_math_table() -> dict[str, Any]:
    import numpy as np

    from warpy import runtime as rt
    from warpy.isa.examples import MATH_CTR, MATH_OUT, MATH_THREADS, math_table
    from warpy.lift.lifter import build
    from warpy.runtime.bind import bind_params, run_header

    kernel = math_table("sm_90a").kernel()
    h = kernel.header
    cubin = build(kernel, "sm_90a", check=False)
    inp = table()
    k = rt.load(cubin).kernel(h.kernel)
    bufs = {"inp": rt.to_device(inp), "out": rt.to_device(np.full((MATH_THREADS, MATH_OUT), 0xABABABAB, np.uint32)),
            "ctr": rt.to_device(np.zeros(MATH_CTR, np.uint32))}
    run_header(k, h, bind_params(h, bufs, {}), timeout=20)
    got = bufs["out"].download(np.uint32, (MATH_THREADS, MATH_OUT))
    want = checker_words(inp)
    bad = compare(inp, got, want)
    return {"ok": not bad, "kernel": h.kernel, "registers": cubin.resource(h.kernel).registers,
            "words": int(got.size), "mismatches": len(bad), "first": bad[:12],
            "slots_differing": sorted({b["slot"] for b in bad})}


def _math_table_isolated() -> dict[str, Any]:
    return run_case(__file__, ["math_table"], timeout=300)


PROBES_OF_ISSUE = ["hgmma_rs", "counters", "dispatch"]


def test_math_table_agrees_with_the_checker() -> None:
    r = _math_table_isolated()
    assert r.get("ok"), f"math_table: {json.dumps(r, indent=1)}"
    assert r["words"] == 64 * 56


@pytest.mark.parametrize("name", PROBES_OF_ISSUE)
def test_probe_agrees_with_its_host_expectation(name: str) -> None:
    assert_probe_exact(name, run_probe(name))


def _table_md() -> str:
    out = ["| case | result | registers | words / elements checked |", "|---|---|---|---|"]
    r = _math_table_isolated()
    res = "ok" if r.get("ok") else (f"{r.get('mismatches')} mismatches in {', '.join(r.get('slots_differing', []))}"
                                   if "mismatches" in r else r.get("error", "?")[:160])
    out.append(f"| math_table | {res} | {r.get('registers', '-')} | {r.get('words', 0)} |")
    for name in PROBES_OF_ISSUE:
        out.append(probe_table_row(name, run_probe(name)))
    return "\n".join(out)


def _run_here(case: str) -> dict[str, Any]:
    if case != "math_table":
        raise ValueError(f"unknown case {case!r} (math_table; the probes run through tests/gpu/test_probes.py)")
    return _run_math_table()


if __name__ == "__main__":  # one case, one JSON line (run by the tests above in a subprocess)
    case_main(_run_here, _table_md)
