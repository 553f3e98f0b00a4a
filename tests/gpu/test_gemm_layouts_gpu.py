"""warpy.gemm as a user's matmul on an sm_90 GPU with torch (issue 19; the CPU halves are
tests/host/test_mm_host.py, tests/host/test_torch_op.py and tests/kernels/test_gemm_epilogue.py).
Each case runs in its own subprocess and prints one JSON line (`python tests/gpu/test_gemm_layouts_gpu.py
CASE`); `-s` shows each case's line.

- `layouts`: warpy.mm (torch.mm's operands), warpy.gemm and warpy.bmm (one launch a batch) over
  bf16/fp16 in, fp32/bf16/fp16 out,
  ragged shapes: B as K×N with K contiguous (`w.t()`, read in place), B as N×K row-major, every
  element against the float64 product rounded to C's type (exact on small integers); the layouts
  the programs do not read are refused in one line: an MN-major operand whose rows of K TMA cannot
  take, no contiguous dimension, rows a pitch TMA cannot take, a misaligned base; slices of wider
  matrices (rows with a pitch: A, B and C, and a batch's C) read and written in place, C's gaps
  untouched (where C's rows are not whole 16 bytes, N = 33, no TMA store may write them: once, the
  staged epilogue's did, columns 33..39);
- `majors`: the four operand layouts (A M×K or K×M, B N×K or K×N: MN-major operands read in place
  by HGMMA's transposed forms, sm_90a) × bf16/fp16 × the ragged shapes, with and without a fused
  bias + relu, every element exact; where an MN-major operand's rows of K are not a multiple of 16
  bytes apart (M or N not a multiple of 8), the one-line refusal;
- `epilogues`: every fused epilogue (alpha, beta·C_in, bias along N and along M, relu / silu /
  gelu_tanh / gelu_erf, residual) × bf16/fp16 × fp32/bf16/fp16 out × ragged shapes, every element
  within the derived bound of the float64 reference (kernels/gemm_epilogue.py; exact where there is
  no transcendental);
- `graph`: 10 chained warpy.mm calls captured with torch.cuda.graph and replayed three times on new
  inputs copied into the same buffers, exact each time; the GPU time per GEMM of a replay against
  the same 10 calls uncaptured (CUDA events), within 5%;
- `compile`: torch.compile of a small MLP whose linears call warpy.mm (one with bias and GELU fused):
  torch._dynamo.explain says no graph break, the compiled model equals eager bit for bit and both
  are within bf16 rounding of an fp32 reference;
- `host`: host µs per call of warpy.mm and torch.mm, plain and with a bias + GELU (reported);
- `tma_row_end`: the hardware behaviour the `layouts` bug came from, measured: a TMA store of a box
  across the end of a row of 66 bytes (rows 80 apart) writes the row's last 16 bytes whole (the
  edited staged-epilogue program; every element of the row right, the 7 after it counted).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpu_case import case_main, host_us_per_call, run_case

RAGGED = [(200, 136, 72), (64, 520, 96), (1000, 1000, 1000), (129, 33, 16), (256, 256, 8192)]


def _torch() -> Any:
    import torch  # type: ignore[import-not-found,unused-ignore]

    return torch


def _t(name: str) -> Any:
    torch = _torch()
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def _ints(shape: tuple[int, ...], dtype: Any, g: Any) -> Any:
    return _torch().randint(-3, 4, shape, device="cuda", generator=g).to(dtype)


def _layouts() -> dict[str, Any]:
    import warpy
    from warpy.errors import WarpyError

    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(5)
    report: dict[str, Any] = {"ok": True}
    rows = []
    for (M, N, K) in RAGGED:
        for inp in ("bf16", "fp16"):
            for out in ("fp32", "bf16", "fp16"):
                a = _ints((M, K), _t(inp), g)
                w = _ints((N, K), _t(inp), g)  # nn.Linear's weight: N×K row-major
                want = (a.double() @ w.double().t()).to(_t(out))
                got_mm = warpy.mm(a, w.t(), out_dtype=out)  # B = w.t(): K×N, K contiguous, read in place
                got_gemm = warpy.gemm(a, w, out_dtype=out)
                bad = int((got_mm != want).sum().item()) + int((got_gemm != want).sum().item())
                # slices of wider matrices (rows with a pitch), read and written in place; where N is
                # ragged, C's rows end before the next 16 bytes (129 x 33: a TMA store of C would write
                # the gap columns 33..39, tests/kernels/test_gemm_store_rows.py)
                step = 16 // _t(out).itemsize
                a_wide, w_wide = _ints((M, K + 8), _t(inp), g), _ints((N, K + 16), _t(inp), g)
                c_wide = torch.full((M, (N + step) // step * step), float("nan"), device="cuda", dtype=_t(out))
                warpy.mm(a_wide[:, :K], w_wide[:, :K].t(), out=c_wide[:, :N])
                want_p = (a_wide[:, :K].double() @ w_wide[:, :K].double().t()).to(_t(out))
                bad += int((c_wide[:, :N] != want_p).sum().item()) + int((~c_wide[:, N:].isnan()).sum().item())
                rows.append([M, N, K, inp, out, bad])
                report["ok"] &= bad == 0
    report["cases"] = rows  # [M, N, K, in, out, elements wrong (dense, and pitched slices; gaps untouched)]
    batches = []
    for (B, M, N, K), out in (((4, 200, 136, 72), "bf16"), ((3, 64, 520, 96), "fp32"), ((5, 129, 33, 16), "fp16")):
        a, w = _ints((B, M, K), _t("bf16"), g), _ints((B, N, K), _t("bf16"), g)
        want = torch.bmm(a.double(), w.double().transpose(1, 2)).to(_t(out))
        got = warpy.bmm(a, w.transpose(1, 2), out_dtype=out)  # one launch (matrices 16-byte multiples apart)
        bad = int((got != want).sum().item())
        # C's matrices a slice of a wider batch (pitched rows, one launch), in place, the gaps untouched
        # (a ragged N too: rows of 33 elements 40 apart)
        step = 16 // _t(out).itemsize
        wide = torch.full((B, M, (N + step) // step * step), float("nan"), device="cuda", dtype=_t(out))
        warpy.bmm(a, w.transpose(1, 2), out=wide[:, :, :N])
        bad += int((wide[:, :, :N] != want).sum().item()) + int((~wide[:, :, N:].isnan()).sum().item())
        batches.append([B, M, N, K, out, bad])
        report["ok"] &= bad == 0
    report["bmm"] = batches
    a = _ints((128, 64), _t("bf16"), g)
    b_kn = _ints((64, 96), _t("bf16"), g)  # torch.mm(a, b) with b row-major K×N: N contiguous
    refusals = {}
    for what, call, start in (
            ("b K×N row-major, rows of K 130 bytes apart (MN-major)",
             lambda: warpy.mm(a, torch.empty((64, 65), device="cuda", dtype=torch.bfloat16)[:, :64]),
             "b is N-contiguous (MN-major) with its rows of K 130 bytes apart"),
            ("no contiguous dimension", lambda: warpy.mm(a[:, ::2], b_kn[::2, :].t().contiguous().t()),
             "a is 128x32 with strides (64, 2)"),
            ("rows 136 bytes apart", lambda: warpy.gemm(torch.empty((128, 68), device="cuda", dtype=torch.bfloat16)[:, :64],
                                                       a), "a: rows 136 bytes apart"),
            ("misaligned base", lambda: warpy.gemm(torch.empty(128 * 64 + 1, device="cuda", dtype=torch.bfloat16)[1:]
                                                     .view(128, 64), a), "a: address 0x")):
        try:
            call()
            refusals[what] = "accepted"
        except WarpyError as e:
            refusals[what] = str(e)
        report["ok"] &= refusals[what].startswith(start) and "\n" not in refusals[what]
    report["refusals"] = refusals
    torch.cuda.synchronize()
    return report


def _majors() -> dict[str, Any]:
    import warpy
    from warpy.errors import WarpyError

    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(7)
    report: dict[str, Any] = {"ok": True}
    majors = []  # [M, N, K, in, A's layout, B's layout, epilogue, elements wrong or the refusal]
    for (M, N, K) in RAGGED:
        for inp, out in (("bf16", "fp32"), ("fp16", "fp16")):
            a, w = _ints((M, K), _t(inp), g), _ints((N, K), _t(inp), g)
            bias = _ints((N,), _t(out), g)
            want = (a.double() @ w.double().t()).to(_t(out))
            want_ep = torch.relu(a.double() @ w.double().t() + bias.double()).to(_t(out))
            a_km = a.t().contiguous().t()  # M×K, M contiguous: x.t() of a row-major K×M x
            w_kn = w.t().contiguous()  # K×N row-major: torch.mm(x, w_kn)
            for la, aa in (("mk", a), ("km", a_km)):
                for lb, bb in (("nk", w.t()), ("kn", w_kn)):
                    for ep in (False, True):
                        try:
                            got = (warpy.mm(aa, bb, out_dtype=out, bias=bias, activation="relu") if ep
                                   else warpy.mm(aa, bb, out_dtype=out))
                            res: Any = int((got != (want_ep if ep else want)).sum().item())
                            report["ok"] &= res == 0
                        except WarpyError as e:  # MN-major rows of K not 16-byte multiples apart
                            res = str(e)
                            tma_ok = (la == "mk" or M * 2 % 16 == 0) and (lb == "nk" or N * 2 % 16 == 0)
                            report["ok"] &= not tma_ok and "(MN-major) with its rows of K" in res and "\n" not in res
                        majors.append([M, N, K, inp, la, lb, ep, res])
    report["majors"] = majors
    torch.cuda.synchronize()
    return report


EPILOGUES = [
    {"alpha": 0.5}, {"beta": 1.0, "c_in": True}, {"beta": -2.0, "c_in": True, "alpha": 0.25},
    {"bias": "n"}, {"bias": "m"}, {"activation": "relu"}, {"activation": "silu"},
    {"activation": "gelu_tanh", "bias": "n"}, {"activation": "gelu_erf", "bias": "m"},
    {"residual": True}, {"bias": "n", "activation": "gelu_erf", "residual": True, "beta": 1.0, "c_in": True},
]


def _epilogues() -> dict[str, Any]:
    import numpy as np

    import warpy
    from warpy.kernels.gemm_epilogue import Epilogue, reference
    from warpy.numeric import output_spacing

    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(9)
    report: dict[str, Any] = {"ok": True}
    rows = []
    types = (("bf16", "bf16"), ("fp16", "fp16"), ("bf16", "fp32"), ("fp16", "fp32"))
    for i, spec in enumerate(EPILOGUES):
        # two (shape, types) a spec, rotating, so that every shape and type pairing meets several epilogues
        for (M, N, K), (inp, out) in ((RAGGED[(i + j) % 4], types[(i + 2 * j) % 4]) for j in range(2)):
            a, w = _ints((M, K), _t(inp), g), _ints((N, K), _t(inp), g)
            kw: dict[str, Any] = {}
            c_in = _ints((M, N), _t(out), g) if spec.get("c_in") else None
            bias = None
            if spec.get("bias"):
                bias = _ints((N if spec["bias"] == "n" else M,), _t(out), g)
                kw["bias" if spec["bias"] == "n" else "row_bias"] = bias
            res = _ints((M, N), _t(out), g) if spec.get("residual") else None
            if c_in is not None:
                kw.update(beta=spec["beta"], c_in=c_in)
            if res is not None:
                kw["residual"] = res
            if "alpha" in spec:
                kw["alpha"] = spec["alpha"]
            if "activation" in spec:
                kw["activation"] = spec["activation"]
            c = warpy.mm(a, w.t(), out_dtype=out, **kw)
            ep = Epilogue(alpha=spec.get("alpha", 1.0), beta=spec.get("beta", 0.0) if c_in is not None else 0.0,
                          bias=spec.get("bias", ""), act=spec.get("activation", ""), residual=res is not None)
            acc = (a.double() @ w.double().t()).cpu().numpy()
            npv = (lambda x: None if x is None else x.double().cpu().numpy())
            ref, tol = reference(acc, ep, npv(c_in), npv(bias), npv(res))
            got = c.double().cpu().numpy()
            lim = tol + output_spacing(ref, out) + 2.0 ** -23 * np.abs(ref)
            bad = int((~(np.abs(got - ref) <= lim)).sum())
            rows.append([ep.describe(), M, N, K, inp, out, bad])
            report["ok"] &= bad == 0
    report["cases"] = [r for r in rows if r[-1]] or f"{len(rows)} cases, all within the bound"
    return report


def _graph() -> dict[str, Any]:
    import warpy

    torch = _torch()
    report: dict[str, Any] = {"ok": True}
    g = torch.Generator(device="cuda").manual_seed(13)
    n = 2048
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        # x_{i+1} = x_i · w_iᵀ (w_i N×K, read as w_i.t()); weights ±1/0 keep every value an exact small integer
        ws = [torch.randint(-1, 2, (n, n), device="cuda", generator=g).to(torch.bfloat16) for _ in range(10)]
        for w in ws:
            w.mul_((torch.rand((n, n), device="cuda", generator=g) < 2.0 / n).to(torch.bfloat16))
        xs = [torch.randint(-3, 4, (n, n), device="cuda", generator=g).to(torch.bfloat16)] + \
            [torch.empty((n, n), device="cuda", dtype=torch.bfloat16) for _ in range(10)]

        def chain() -> None:
            for i in range(10):
                warpy.mm(xs[i], ws[i].t(), out=xs[i + 1])

        chain()
        chain()  # the warm-up on the capture stream: plans, loads, scratch, packed parameters
    s.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        chain()
    bad = []
    for rep in range(3):
        with torch.cuda.stream(s):
            xs[0].copy_(torch.randint(-3, 4, (n, n), device="cuda", generator=g).to(torch.bfloat16))
            for x in xs[1:]:
                x.fill_(float("nan"))
            graph.replay()
        s.synchronize()
        wrong = 0
        for i in range(10):  # each step from what the previous one stored, rounded once to bf16
            want = (xs[i].double() @ ws[i].double().t()).to(torch.bfloat16)
            wrong += int((xs[i + 1] != want).sum().item())
        bad.append(wrong)
    report["bad_per_replay"] = bad
    report["ok"] &= bad == [0, 0, 0]

    def gpu_ms(fn: Any, reps: int = 20) -> float:
        with torch.cuda.stream(s):
            for _ in range(3):
                fn()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(s)
            for _ in range(reps):
                fn()
            end.record(s)
        s.synchronize()
        return float(start.elapsed_time(end)) / reps / 10  # per GEMM

    eager = gpu_ms(chain)
    replay = gpu_ms(graph.replay)
    report["us_per_gemm"] = {"uncaptured": round(eager * 1e3, 1), "graph": round(replay * 1e3, 1)}
    report["ok"] &= replay <= eager * 1.05
    return report


def _compile() -> dict[str, Any]:
    import warpy

    torch = _torch()
    report: dict[str, Any] = {"ok": True}
    g = torch.Generator(device="cuda").manual_seed(17)

    class MLP(torch.nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self, d: int, h: int) -> None:
            super().__init__()
            self.w1 = torch.nn.Parameter((torch.randn(h, d, device="cuda", generator=g) / d ** 0.5).bfloat16(),
                                         requires_grad=False)
            self.b1 = torch.nn.Parameter((torch.randn(h, device="cuda", generator=g) / 4).bfloat16(),
                                         requires_grad=False)
            self.w2 = torch.nn.Parameter((torch.randn(d, h, device="cuda", generator=g) / h ** 0.5).bfloat16(),
                                         requires_grad=False)

        def forward(self, x: Any) -> Any:
            h = warpy.mm(x, self.w1.t(), bias=self.b1, activation="gelu")  # F.gelu(F.linear(x, w1, b1))
            return x + warpy.mm(h, self.w2.t())

    model = MLP(512, 2048)
    x = torch.randn(256, 512, device="cuda", generator=g).bfloat16()
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(x)
    report["graph_breaks"] = explained.graph_break_count
    report["ok"] &= explained.graph_break_count == 0
    eager = model(x)
    compiled = torch.compile(model)
    got = compiled(x)
    got2 = compiled(x)
    torch.cuda.synchronize()
    report["equal_to_eager"] = bool(torch.equal(got, eager) and torch.equal(got2, eager))
    ref = x.float() + torch.nn.functional.linear(torch.nn.functional.gelu(torch.nn.functional.linear(
        x.float(), model.w1.float(), model.b1.float())).bfloat16().float(), model.w2.float())
    err = float((got.float() - ref).abs().max().item())
    report["max_err_vs_fp32"] = err
    report["ok"] &= report["equal_to_eager"] and err <= 2.0 ** -7 * float(ref.abs().max().item()) + 1e-2
    return report


def _host() -> dict[str, Any]:
    import warpy

    torch = _torch()
    F = torch.nn.functional
    report: dict[str, Any] = {"ok": True}
    for n in (256, 4096):
        a = torch.randn((n, n), device="cuda", dtype=torch.bfloat16)
        w = torch.randn((n, n), device="cuda", dtype=torch.bfloat16)
        bias = torch.randn((n,), device="cuda", dtype=torch.bfloat16)
        c = torch.empty((n, n), device="cuda", dtype=torch.bfloat16)
        for what, fn in ((f"warpy.mm(a, w.t(), out=c) {n}", lambda: warpy.mm(a, w.t(), out=c)),
                         (f"torch.mm(a, w.t(), out=c) {n}", lambda: torch.mm(a, w.t(), out=c)),
                         (f"warpy.mm(a, w.t(), bias=, activation=gelu) {n}",
                          lambda: warpy.mm(a, w.t(), out=c, bias=bias, activation="gelu")),
                         (f"F.gelu(F.linear(a, w, bias)) {n}", lambda: F.gelu(F.linear(a, w, bias)))):
            report[what] = host_us_per_call(torch, fn)
    return report


def _tma_row_end() -> dict[str, Any]:
    """The hardware fact behind `warpy.layout.tma.store_clips_exactly` (and the checker's
    tma-store-row-end), measured: the sm_90a GEMM's staged epilogue for a 129 x 40 bf16 C, its map of C
    edited to rows of 33 (66 bytes, 80 apart), run over a C of NaN. Columns 0..32 must be A·Bᵀ; the
    columns 33..39 the engine writes anyway are counted (the model says all 129 x 7 of them, with the
    product's values there: the staging tile's)."""
    import numpy as np

    from warpy import runtime as rt
    from warpy.isa.text import parse
    from warpy.kernels import gemm as G
    from warpy.lift.lifter import lift
    from warpy.lift.ptxas import FAILING_KINDS, assemble
    from warpy.numeric import bits16, from_bits
    from warpy.runtime.bind import alloc_scratch, run_header
    from warpy.runtime.driver import enter, leave

    M, N, K = 129, 40, 16
    prob = G.GemmProblem(M, N, K, out_dtype="bf16")
    cfg = G.choose(prob)
    assert cfg.staged_epilogue  # type: ignore[union-attr]
    text = str(G.build(prob, cfg).kernel())
    was = f".tmap c dtype=bf16 dims={N},{M} "
    assert was in text
    kernel = parse(text.replace(was, f".tmap c dtype=bf16 dims=33,{M} "))
    cubin = assemble(lift(kernel, "sm_90a"), "sm_90a", allow=FAILING_KINDS)
    rng = np.random.default_rng(3)
    a = rng.integers(-3, 4, (M, K)).astype(np.float64)
    b = rng.integers(-3, 4, (N, K)).astype(np.float64)
    want = from_bits(bits16(a @ b.T, "bf16"), "bf16").astype(np.float64)
    entered = enter(0)
    try:
        k = rt.load(cubin).kernel(kernel.header.kernel)
        da, db = rt.to_device(bits16(a, "bf16")), rt.to_device(bits16(b, "bf16"))
        dc = rt.to_device(np.full((M, N), 0x7FC0, dtype=np.uint16))  # NaN
        scratch = alloc_scratch(kernel.header)
        run_header(k, kernel.header, G.bind(kernel.header, da, db, dc, M, N, K, scratch=scratch))
        got = from_bits(dc.download(np.uint16, (M, N)), "bf16").astype(np.float64)
    finally:
        leave(entered)
    inside = int((got[:, :33] != want[:, :33]).sum())
    gap_written = int((~np.isnan(got[:, 33:])).sum())
    gap_product = int((got[:, 33:] == want[:, 33:]).sum())
    return {"ok": inside == 0 and gap_written == M * 7, "wrong_in_columns_0_32": inside,
            "gap_elements_written": gap_written, "gap_elements_equal_to_the_product": gap_product,
            "gap_elements": M * 7}


CASES = {"tma_row_end": _tma_row_end, "layouts": _layouts, "majors": _majors, "epilogues": _epilogues, "graph": _graph, "compile": _compile, "host": _host}


def _run_isolated(case: str, timeout: float = 600) -> dict[str, Any]:
    return run_case(__file__, [case], timeout)


@pytest.mark.parametrize("case", list(CASES))
def test_gemm_as_a_users_matmul(case: str) -> None:
    pytest.importorskip("torch")
    r = _run_isolated(case)
    print(case, json.dumps(r))
    assert r.get("ok"), f"{case}: {json.dumps(r)}"


if __name__ == "__main__":  # one case, one JSON line (run by the tests above in a subprocess)
    case_main(lambda case: CASES[case]())
