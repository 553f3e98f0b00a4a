"""warpy.gemm of 8-bit floats on an sm_90 GPU with torch (issue 18; the CPU halves are
tests/kernels/test_gemm_fp8.py, tests/host/test_gemm_fp8_host.py and tests/isa/test_fp8_numeric.py).
Each case runs in its own subprocess and prints one JSON line (`python tests/gpu/test_gemm_fp8_gpu.py
CASE`); `-s` shows each case's line.

- `exact`: ragged shapes (two with K above 4096: promoted k blocks) × (e4m3, e4m3) / (e5m2, e5m2) / (e4m3, e5m2) / (e5m2, e4m3) × bf16 / fp32 / fp16
  out × no scales, per-tensor, per-row and per-column scales (powers of two, as torch._scaled_mm takes
  them: (M, 1) and (1, N) fp32 tensors): inputs small integers in [-2, 2] (exact in both types, every
  partial sum exact even in the tensor core's narrower adder), every element of C equal to the fp32
  reference (the inputs decoded exactly, then exact arithmetic) rounded once to C's type: the output's
  rounding bound, nothing more;
- `decode`: every finite bit pattern of A's type through the tensor core: A holds them all, B is one-hot
  (B[n, k] = 1 where k = n mod K), so C[m, n] = A[m, n mod K] · scale_a · scale_b exactly: the
  hardware's decoding of each pattern equals warpy.numeric's (and torch's);
- `refusals`: what warpy.gemm refuses of fp8 calls on the GPU, in one line.

The timing against torch._scaled_mm is `warpy bench gemm --dtype e4m3` (kernels/gemm_fp8_bench.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpu_case import case_main, run_case

# (the last two: K above 4096, the k blocks promoted into fp32, Sm90Config.promote)
SHAPES = [(200, 136, 96), (64, 520, 128), (1000, 1000, 1008), (129, 33, 16), (256, 256, 4096), (4096, 4096, 512),
          (256, 384, 8192), (300, 200, 6144)]
TYPES = [("e4m3", "e4m3"), ("e5m2", "e5m2"), ("e4m3", "e5m2"), ("e5m2", "e4m3")]
OUTS = ["bf16", "fp32", "fp16"]
SCALES = [("", ""), ("tensor", "tensor"), ("row", "col"), ("row", ""), ("", "col"), ("tensor", "col")]


def _torch() -> Any:
    import torch  # type: ignore[import-not-found,unused-ignore]

    return torch


def _t(name: str) -> Any:
    torch = _torch()
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "e4m3": torch.float8_e4m3fn,
            "e5m2": torch.float8_e5m2}[name]


def _scale(kind: str, n: int, shape: tuple[int, int], g: Any) -> Any:
    torch = _torch()
    if not kind:
        return None
    if kind == "tensor":
        return torch.tensor([0.5], device="cuda", dtype=torch.float32)
    return torch.exp2(torch.randint(-3, 4, (n,), device="cuda", generator=g).float()).reshape(shape)


def _exact() -> dict[str, Any]:
    import warpy

    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(18)
    report: dict[str, Any] = {"ok": True}
    rows = []
    i = 0
    for (M, N, K) in SHAPES:
        for ta, tb in TYPES:
            # one (output, scales) combination a shape and type pair: the 32 cover all 18 combinations
            for _ in range(1):
                out, (ka, kb) = OUTS[i % len(OUTS)], SCALES[(i // len(OUTS)) % len(SCALES)]
                i += 1
                a = torch.randint(-2, 3, (M, K), device="cuda", generator=g).float().to(_t(ta))
                b = torch.randint(-2, 3, (N, K), device="cuda", generator=g).float().to(_t(tb))
                sa, sb = _scale(ka, M, (M, 1), g), _scale(kb, N, (1, N), g)
                ref = a.double() @ b.double().t()
                if sa is not None:
                    ref = ref * sa.double().reshape(-1, 1) if ka == "row" else ref * float(sa.item())
                if sb is not None:
                    ref = ref * sb.double().reshape(1, -1) if kb == "col" else ref * float(sb.item())
                want = ref.to(_t(out))  # one rounding of the exact value
                got = warpy.gemm(a, b, out_dtype=out, scale_a=sa, scale_b=sb)
                bad = int((got != want).sum().item())
                rows.append({"shape": [M, N, K], "types": [ta, tb], "out": out, "scales": [ka, kb], "wrong": bad})
                if bad:
                    report["ok"] = False
    torch.cuda.synchronize()
    report["cases"] = len(rows)
    report["failed"] = [r for r in rows if r["wrong"]]
    return report


def _decode() -> dict[str, Any]:
    import numpy as np

    import warpy
    from warpy.numeric import fp8_to_f32

    torch = _torch()
    report: dict[str, Any] = {"ok": True}
    for ta in ("e4m3", "e5m2"):
        codes = np.arange(256, dtype=np.uint8)
        vals = fp8_to_f32(codes, ta)
        finite = codes[np.isfinite(vals)]
        M, K, N = 128, 16, 64
        pat = np.resize(finite, M * K).reshape(M, K)  # every finite pattern, repeated to fill A
        a = torch.from_numpy(pat).cuda().view(_t(ta))
        onehot = np.zeros((N, K), dtype=np.float32)
        onehot[np.arange(N), np.arange(N) % K] = 1.0
        b = torch.from_numpy(onehot).cuda().to(_t(ta))
        sa = torch.tensor([2.0], device="cuda", dtype=torch.float32)
        got = warpy.gemm(a, b, out_dtype="fp32", scale_a=sa).cpu().numpy()
        want = vals[pat][:, np.arange(N) % K] * 2.0
        bad = int((got != want).sum())
        torch_bad = int((a.float().cpu().numpy() != vals[pat]).sum())  # torch's decoding, the same patterns
        report[ta] = {"patterns": int(finite.size), "wrong": bad, "torch_disagrees": torch_bad}
        if bad or torch_bad:
            report["ok"] = False
    return report


def _refusals() -> dict[str, Any]:
    import warpy
    from warpy.errors import WarpyError

    torch = _torch()
    a = torch.zeros((64, 128), device="cuda", dtype=torch.float8_e4m3fn)
    b = torch.zeros((64, 128), device="cuda", dtype=torch.float8_e4m3fn)
    report: dict[str, Any] = {"ok": True}
    checks = {
        "scale count": (lambda: warpy.gemm(a, b, scale_a=torch.ones(63, device="cuda")),
                        "scale_a holds 63 values; it holds 1 (per tensor) or 64 (one a row of C)"),
        "scale type": (lambda: warpy.gemm(a, b, scale_b=torch.ones(64, device="cuda", dtype=torch.bfloat16)),
                       "scale_b is bf16; a scale is fp32"),
        "bf16 with fp8": (lambda: warpy.gemm(a, b.to(torch.bfloat16)), "a is e4m3 but b is bf16"),
        # mm's B is K x N: a row-major one is N-contiguous (MN-major), which fp8 wgmma cannot read
        "MN-major fp8": (lambda: warpy.mm(a, torch.zeros((128, 64), device="cuda", dtype=torch.float8_e4m3fn)),
                         "8-bit float operands are read K-major only"),
    }
    for name, (fn, words) in checks.items():
        try:
            fn()
            report[name] = "not refused"
            report["ok"] = False
        except WarpyError as e:
            report[name] = str(e)
            if words not in str(e):
                report["ok"] = False
    return report


CASES = {"exact": _exact, "decode": _decode, "refusals": _refusals}


@pytest.mark.parametrize("case", list(CASES))
def test_fp8_gemm(case: str) -> None:
    pytest.importorskip("torch")
    r = run_case(__file__, [case], 600)
    print(case, json.dumps(r))
    assert r.get("ok"), f"{case}: {json.dumps(r)}"


if __name__ == "__main__":  # one case, one JSON line (run by the tests above in a subprocess)
    case_main(lambda case: CASES[case]())
