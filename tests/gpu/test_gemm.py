"""warpy's GEMM on an sm_90 GPU: every element of C checked.

Each case runs in its own subprocess (`python tests/gpu/test_gemm.py CASE` prints one JSON line), so
that a fault or a hang in one leaves the others' CUDA context intact.

- `exact:M:N:K:dtype:out`: the plan run on inputs in [-3, 3] against the float64 product (exact
  for f32 output, within one rounding for bf16/fp16), including ragged shapes;
- `config:M:N:K:out:KEY=V,...`: the same with the rule's configuration with fields set by hand
  (`warpy.kernels.gemm.configure`: 2-CTA clusters with multicast, stream-K over 132 SMs, splits,
  64-row tiles), every element;
- `numpy:...`: `warpy.gemm` on numpy arrays (copied to the GPU and back);
- `torch:...`: `warpy.gemm` on torch tensors (out given and allocated, out_dtype variants, the
  producer's stream ordering, a transposed operand refused); skipped where torch is missing.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpu_case import case_main, run_case

RAGGED = ["1:4096:4096", "4097:129:72", "1000:1000:1000", "127:8191:136"]
EXACT = (
    [f"exact:{s}:bf16:f32" for s in RAGGED]
    + ["exact:256:256:64:bf16:f32", "exact:1024:1024:1024:bf16:f32", "exact:4096:4096:1024:bf16:f32",
       "exact:1024:1024:65536:bf16:f32", "exact:2048:2048:16384:bf16:f32", "exact:3072:1280:2048:bf16:f32"]
    + ["exact:1000:1000:1000:bf16:bf16", "exact:4097:129:72:bf16:fp16", "exact:1000:1000:1000:fp16:f32",
       "exact:127:8191:136:fp16:fp16"]
)


CONFIGS = [
    "config:4096:4096:1024:bf16:bn=256,stages=4,staged_epilogue=1,cluster_m=2",
    "config:1000:1000:1000:f32:bn=128,stages=6,cluster_m=2",
    "config:1920:1536:4096:bf16:bn=256,stages=4,staged_epilogue=1,cluster_m=2",  # 15 M-blocks: a phantom tile
    "config:1536:1536:1536:bf16:bn=128,stages=6,staged_epilogue=1,stream_k=1",
    "config:1000:1000:1000:f32:bn=192,stages=4,stream_k=1",
    "config:512:512:32768:bf16:bn=128,stages=6,staged_epilogue=1,stream_k=1,split=8",
    "config:3072:3072:1024:bf16:bn=192,stages=4,staged_epilogue=1",  # 3 chunks: a buffer reused across tiles
    "config:2000:1000:512:fp16:bn=160,consumers=1,stages=6,staged_epilogue=1",
]


def _exact(M: int, N: int, K: int, dtype: str, out: str, config: Any = None) -> dict[str, Any]:
    from warpy.kernels.gemm import FAMILY, GemmProblem
    from warpy.kernels.gemm_bench import run_check
    from warpy.plan import make_plan

    problem = GemmProblem(M, N, K, dtype=dtype, out_dtype=out, arch="sm_90a")
    plan = make_plan(FAMILY, problem, config=config)
    bad, msg = run_check(plan, M, N, K, dtype, problem.out_dtype)
    return {"ok": bad == 0, "mismatches": bad, "message": msg, "program": plan.describe}


def _numpy(M: int, N: int, K: int) -> dict[str, Any]:
    import numpy as np

    import warpy

    rng = np.random.default_rng(3)
    a = rng.integers(-3, 4, (M, K)).astype(np.float16)
    b = rng.integers(-3, 4, (N, K)).astype(np.float16)
    want = a.astype(np.float64) @ b.astype(np.float64).T
    c = warpy.gemm(a, b, out_dtype="f32")
    out = np.full((M, N), np.nan, np.float32)
    again = warpy.gemm(a, b, out=out)
    bad = int((c != want).sum()) + int((out != want).sum())
    return {"ok": bad == 0 and again is out and c.dtype == np.float32, "mismatches": bad}


def _torch(M: int, N: int, K: int) -> dict[str, Any]:
    import torch  # type: ignore[import-not-found,unused-ignore]

    import warpy
    from warpy.errors import WarpyError

    dev = torch.device("cuda", 0)
    report: dict[str, Any] = {"ok": True}
    g = torch.Generator(device=dev).manual_seed(5)
    for dtype in (torch.bfloat16, torch.float16):
        a = torch.randint(-3, 4, (M, K), device=dev, generator=g).to(dtype)
        b = torch.randint(-3, 4, (N, K), device=dev, generator=g).to(dtype)
        want = a.double() @ b.double().t()
        # allocated output: the input type, as torch.mm; f32 on request
        c = warpy.gemm(a, b)
        c32 = warpy.gemm(a, b, out_dtype="f32")
        out = torch.full((M, N), float("nan"), device=dev, dtype=torch.float32)
        same = warpy.gemm(a, b, out=out)
        torch.cuda.synchronize()
        report[f"{dtype}"] = {
            "out_dtype": str(c.dtype), "f32": str(c32.dtype),
            "bad_default": int((c.double() != want.to(c.dtype).double()).sum()),
            "bad_f32": int((c32.double() != want).sum()),
            "bad_out": int((out.double() != want).sum()),
        }
        r = report[f"{dtype}"]
        report["ok"] &= (r["bad_default"] == 0 and r["bad_f32"] == 0 and r["bad_out"] == 0 and same is out
                         and c.dtype == dtype and c32.dtype == torch.float32)
    # ordering on the producer's stream: inputs written by a kernel still in flight on a side stream
    side = torch.cuda.Stream(device=dev)
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # ~25 ms of GPU time before the inputs are written
        a = torch.ones((M, K), device=dev, dtype=torch.bfloat16) * 2
        b = torch.ones((N, K), device=dev, dtype=torch.bfloat16)
        c = warpy.gemm(a, b, out_dtype="f32")
    side.synchronize()
    report["stream_ok"] = bool((c == 2 * K).all().item())
    report["ok"] &= report["stream_ok"]
    # random normal inputs: within bf16 tolerance of an fp32 product
    a = torch.randn((M, K), device=dev, dtype=torch.bfloat16, generator=g)
    b = torch.randn((N, K), device=dev, dtype=torch.bfloat16, generator=g)
    ref = a.float() @ b.float().t()
    c = warpy.gemm(a, b)
    err = (c.float() - ref).abs()
    tol = 2.0 ** -7 * ref.abs() + 2.0 ** -9 * K ** 0.5
    report["random_bad"] = int((err > tol).sum().item())
    report["ok"] &= report["random_bad"] == 0
    # a transposed view (B N×K with N contiguous) is read in place, MN-major (issue 19), where its rows
    # of K are a multiple of 16 bytes apart; else refused in one line
    try:
        ct = warpy.gemm(a, b.t().contiguous().t())
        report["transposed_bad"] = int(((ct.float() - ref).abs() > tol).sum().item())
    except WarpyError as e:
        report["transposed_bad"] = str(e)
    report["ok"] &= (report["transposed_bad"] == 0 if (N * 2) % 16 == 0 else
                     str(report["transposed_bad"]).startswith("b is N-contiguous (MN-major) with its rows of K"))
    return report


def _run_here(case: str) -> dict[str, Any]:
    kind, *rest = case.split(":")
    if kind == "exact":
        M, N, K = (int(x) for x in rest[:3])
        return _exact(M, N, K, rest[3], rest[4])
    if kind == "config":
        from warpy.kernels.gemm import GemmProblem, configure

        M, N, K = (int(x) for x in rest[:3])
        problem = GemmProblem(M, N, K, dtype="bf16", out_dtype=rest[3], arch="sm_90a")
        return _exact(M, N, K, "bf16", rest[3], configure(problem, rest[4]))
    if kind == "numpy":
        M, N, K = (int(x) for x in rest)
        return _numpy(M, N, K)
    if kind == "torch":
        M, N, K = (int(x) for x in rest)
        return _torch(M, N, K)
    raise AssertionError(case)


def _run_isolated(case: str, timeout: float = 600) -> dict[str, Any]:
    return run_case(__file__, [case], timeout)


@pytest.mark.parametrize("case", EXACT)
def test_gemm_exact_on_small_integers(case: str) -> None:
    r = _run_isolated(case)
    assert r.get("ok"), f"{case}: {json.dumps(r)}"


@pytest.mark.parametrize("case", CONFIGS)
def test_gemm_exact_with_configurations_the_rule_does_not_pick(case: str) -> None:
    r = _run_isolated(case)
    assert r.get("ok"), f"{case}: {json.dumps(r)}"


@pytest.mark.parametrize("shape", ["4097:129:72", "127:8191:136"])
def test_warpy_gemm_on_numpy(shape: str) -> None:
    r = _run_isolated(f"numpy:{shape}")
    assert r.get("ok"), json.dumps(r)


@pytest.mark.parametrize("shape", ["1000:1000:1000", "1:4096:4096", "4097:129:72"])
def test_warpy_gemm_on_torch(shape: str) -> None:
    pytest.importorskip("torch")
    r = _run_isolated(f"torch:{shape}")
    assert r.get("ok"), json.dumps(r)


if __name__ == "__main__":  # one case, one JSON line (run by the tests above in a subprocess)
    case_main(_run_here)
