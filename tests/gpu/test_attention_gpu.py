"""warpy's forward attention on an sm_90 GPU, against torch's scaled_dot_product_attention in fp32.

Each case runs in its own subprocess (`python tests/gpu/test_attention_gpu.py CASE` prints one JSON
line), so that a fault or a hang in one leaves the others' CUDA context intact. Every element of O is
compared with SDPA computed in fp32 (the math backend on fp32 copies of the bf16 inputs), within
`kernels.attention.tolerance` (A, the softmax-weighted |V|, is SDPA of q, k and |v| in fp32):

- `sdpa:B:H:H_kv:S_q:S_kv:D:causal:layout[:scale]`: `warpy.attention` on random normal tensors in
  that memory layout (bshd: (B, S, H, D) storage seen through .transpose(1, 2); bhsd: contiguous),
  ragged lengths, S_q != S_kv, grouped-query and multi-query, both head dims, a large scale (the
  online softmax rescales often);
- `hypothesis`: 16 derandomized draws of (head_dim, causal, GQA ratio, S_q, S_kv, layout, batch);
- `api`: what warpy.attention does besides the values (the output's shape, strides and type; `out=`;
  layout="bshd"; ordering on the producer's stream; empty problems; one-line refusals);
- `plan:...`: the plan run by kernels.attention_bench.run_check (float64 reference on sampled heads),
  the path `warpy attention` takes.

Without torch the sdpa / hypothesis / api cases skip; the plan cases need only the GPU.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpu_case import case_main, run_case

SDPA = [
    "sdpa:1:1:1:1:1:64:0:bshd",  # one query, one key
    "sdpa:1:1:1:64:64:64:0:bshd",
    "sdpa:2:3:3:200:200:64:0:bshd",  # ragged
    "sdpa:2:3:3:200:200:64:1:bhsd",
    "sdpa:1:2:2:333:333:128:1:bhsd",
    "sdpa:2:4:2:1000:1000:128:1:bshd",  # GQA
    "sdpa:2:8:1:777:777:64:1:bhsd",  # MQA
    "sdpa:1:2:2:100:300:64:0:bshd",  # more keys than queries
    "sdpa:1:2:2:300:100:128:1:bshd",  # more queries than keys (rows past S_kv see all keys)
    "sdpa:1:4:4:1024:1024:128:0:bshd:1.0",  # scale 1: maxima move a lot, the rescale runs
    "sdpa:4:16:16:2048:2048:128:1:bshd",
    "sdpa:2:16:4:4096:4096:128:0:bshd",
    "sdpa:2:8:8:4096:4096:64:1:bhsd",
    "sdpa:1:4:4:8192:8192:128:1:bshd",
]
PLANS = ["plan:2:16:16:4096:128:1:bshd", "plan:1:8:2:3000:64:0:bhsd"]


def _tol(torch: Any, S_kv: int, ref: Any, mag: Any) -> Any:
    u = 2.0 ** -8
    return u * ref.abs() + (u + 2.0 ** -14 + S_kv * 2.0 ** -24) * mag + 2.0 ** -24


def _sdpa_case(B: int, H: int, Hkv: int, Sq: int, Skv: int, D: int, causal: bool, layout: str,
               scale: float | None = None, seed: int = 0) -> dict[str, Any]:
    import torch  # type: ignore[import-not-found,unused-ignore]

    import warpy

    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev).manual_seed(seed)

    def make(h: int, s: int) -> Any:
        if layout == "bshd":
            return torch.randn((B, s, h, D), device=dev, generator=g).to(torch.bfloat16).transpose(1, 2)
        return torch.randn((B, h, s, D), device=dev, generator=g).to(torch.bfloat16)

    q, k, v = make(H, Sq), make(Hkv, Skv), make(Hkv, Skv)
    o = warpy.attention(q, k, v, causal=causal, scale=scale)
    torch.cuda.synchronize()
    sdpa = torch.nn.functional.scaled_dot_product_attention
    kw: dict[str, Any] = {"is_causal": causal, "scale": scale}
    if Hkv != H:
        kw["enable_gqa"] = True
    bad = total = 0
    worst = 0.0
    for b in range(B):  # a batch at a time: the fp32 math backend holds S_q x S_kv scores a head
        qf, kf, vf = q[b:b + 1].float(), k[b:b + 1].float(), v[b:b + 1].float()
        ref = sdpa(qf, kf, vf, **kw)
        mag = sdpa(qf, kf, vf.abs(), **kw)
        err = (o[b:b + 1].float() - ref).abs()
        tol = _tol(torch, Skv, ref, mag)
        bad += int((~(err <= tol)).sum().item())
        total += err.numel()
        worst = max(worst, float((err / tol).max().item()))
    # the output in q's memory layout (a stride along a dimension of size 1 says nothing)
    same_layout = all(n == 1 or so == sq for n, so, sq in zip(q.shape, o.stride(), q.stride()))
    return {"ok": bad == 0 and tuple(o.shape) == (B, H, Sq, D) and o.dtype == torch.bfloat16 and same_layout,
            "bad": bad, "of": total, "worst_vs_tolerance": round(worst, 4), "o_strides": list(o.stride())}


def _hypothesis() -> dict[str, Any]:
    from hypothesis import Phase, given, settings
    from hypothesis import strategies as st

    results: list[dict[str, Any]] = []

    # every draw is run and recorded (no shrinking: each one builds and assembles a program)
    @settings(max_examples=16, deadline=None, derandomize=True, database=None, phases=[Phase.generate])
    @given(st.sampled_from([64, 128]), st.booleans(), st.sampled_from([1, 2, 4, 8]), st.integers(1, 1500),
           st.integers(1, 1500), st.sampled_from(["bshd", "bhsd"]), st.integers(1, 3))
    def case(D: int, causal: bool, ratio: int, Sq: int, Skv: int, layout: str, B: int) -> None:
        r = _sdpa_case(B, 2 * ratio, 2, Sq, Skv, D, causal, layout, seed=len(results))
        r["case"] = f"B={B} H={2 * ratio} H_kv=2 S_q={Sq} S_kv={Skv} D={D} causal={causal} {layout}"
        results.append(r)

    case()
    return {"ok": bool(results) and all(r["ok"] for r in results), "cases": results}


def _api() -> dict[str, Any]:
    import torch  # type: ignore[import-not-found,unused-ignore]

    import warpy
    from warpy.errors import WarpyError

    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev).manual_seed(7)
    rep: dict[str, Any] = {}
    B, H, S, D = 2, 4, 300, 128
    qs = torch.randn((B, S, H, D), device=dev, generator=g).to(torch.bfloat16)
    ks = torch.randn((B, S, H, D), device=dev, generator=g).to(torch.bfloat16)
    vs = torch.randn((B, S, H, D), device=dev, generator=g).to(torch.bfloat16)
    # flash-attn's convention: (B, S, H, D) tensors, output (B, S, H, D)
    o1 = warpy.attention(qs, ks, vs, causal=True, layout="bshd")
    # torch's convention on the same memory, output given
    out = torch.full((B, S, H, D), float("nan"), device=dev, dtype=torch.bfloat16).transpose(1, 2)
    o2 = warpy.attention(qs.transpose(1, 2), ks.transpose(1, 2), vs.transpose(1, 2), causal=True, out=out)
    # the same values in bhsd memory
    o3 = warpy.attention(qs.transpose(1, 2).contiguous(), ks.transpose(1, 2).contiguous(),
                         vs.transpose(1, 2).contiguous(), causal=True)
    torch.cuda.synchronize()
    rep["shapes"] = [list(o1.shape), list(o2.shape), list(o3.shape)]
    rep["out_returned"] = o2 is out
    rep["same_values"] = bool(torch.equal(o1, o2.transpose(1, 2)) and torch.equal(o1, o3.transpose(1, 2)))
    rep["o3_contiguous"] = bool(o3.is_contiguous())
    # ordering on the producer's stream: inputs written by work still in flight on a side stream
    side = torch.cuda.Stream(device=dev)
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        q = torch.zeros((1, 2, 256, 64), device=dev, dtype=torch.bfloat16)
        k = torch.zeros((1, 2, 256, 64), device=dev, dtype=torch.bfloat16)
        v = torch.ones((1, 2, 256, 64), device=dev, dtype=torch.bfloat16) * 3
        o = warpy.attention(q, k, v)
    side.synchronize()
    rep["stream_ok"] = bool((o == 3).all().item())
    # empty problems: an empty output, nothing run
    e = warpy.attention(q[:0], k[:0], v[:0])
    rep["empty"] = list(e.shape)
    refusals = {}
    for name, call in {
        "fp16": lambda: warpy.attention(q.half(), k.half(), v.half()),
        "head_dim": lambda: warpy.attention(*(torch.zeros((1, 2, 64, 48), device=dev, dtype=torch.bfloat16),) * 3),
        "strides": lambda: warpy.attention(q[:, :, ::2], k[:, :, ::2], v[:, :, ::2]),
        "cpu": lambda: warpy.attention(q.cpu(), k.cpu(), v.cpu()),
        "gqa": lambda: warpy.attention(torch.zeros((1, 3, 64, 64), device=dev, dtype=torch.bfloat16),
                                       k[:, :, :64], v[:, :, :64]),
    }.items():
        try:
            call()
            refusals[name] = "accepted"
        except WarpyError as err:
            refusals[name] = str(err)
    rep["refusals"] = refusals
    rep["ok"] = (rep["shapes"] == [[B, S, H, D], [B, H, S, D], [B, H, S, D]] and rep["out_returned"]
                 and rep["same_values"] and rep["o3_contiguous"] and rep["stream_ok"] and rep["empty"] == [0, 2, 256, 64]
                 and all(r != "accepted" and "\n" not in r for r in refusals.values()))
    return rep


def _plan(B: int, H: int, Hkv: int, S: int, D: int, causal: bool, layout: str) -> dict[str, Any]:
    from warpy.kernels.attention import FAMILY, problem
    from warpy.kernels.attention_bench import run_check
    from warpy.plan import make_plan

    pl = make_plan(FAMILY, problem(B, H, S, D, causal=causal, H_kv=Hkv, layout=layout))
    bad, msg = run_check(pl)
    return {"ok": bad == 0, "message": msg, "program": pl.describe}


def _run_here(case: str) -> dict[str, Any]:
    kind, *rest = case.split(":")
    if kind == "sdpa":
        B, H, Hkv, Sq, Skv, D, c = (int(x) for x in rest[:7])
        scale = float(rest[8]) if len(rest) > 8 else None
        return _sdpa_case(B, H, Hkv, Sq, Skv, D, bool(c), rest[7], scale)
    if kind == "hypothesis":
        return _hypothesis()
    if kind == "api":
        return _api()
    if kind == "plan":
        B, H, Hkv, S, D, c = (int(x) for x in rest[:6])
        return _plan(B, H, Hkv, S, D, bool(c), rest[6])
    raise AssertionError(case)


def _run_isolated(case: str, timeout: float = 600) -> dict[str, Any]:
    return run_case(__file__, [case], timeout)


@pytest.mark.parametrize("case", SDPA)
def test_attention_against_sdpa_in_fp32(case: str) -> None:
    pytest.importorskip("torch")
    r = _run_isolated(case)
    assert r.get("ok"), f"{case}: {json.dumps(r)}"


def test_attention_on_hypothesis_drawn_problems() -> None:
    pytest.importorskip("torch")
    r = _run_isolated("hypothesis")
    assert r.get("ok"), json.dumps(r)


def test_warpy_attention_api() -> None:
    pytest.importorskip("torch")
    r = _run_isolated("api")
    assert r.get("ok"), json.dumps(r)


@pytest.mark.parametrize("case", PLANS)
def test_the_plan_as_warpy_attention_runs_it(case: str) -> None:
    r = _run_isolated(case)
    assert r.get("ok"), f"{case}: {json.dumps(r)}"


if __name__ == "__main__":  # one case, one JSON line (run by the tests above in a subprocess)
    case_main(_run_here)
