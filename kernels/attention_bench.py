"""The attention family's command-line jobs: `warpy attention B H S D` (build, check, run, time one
problem) and `warpy bench attention` (warpy against torch's scaled_dot_product_attention, interleaved;
or, with --static, each shape's resources without a GPU).

Timing is `warpy.bench`'s (per-call GPU time from CUDA events, median after warm-up, the calls
enqueued behind a spin so they run back to back); both sides run on the same tensors in one process,
interleaved (warpy, torch, torch, warpy, twice). Correctness is judged against an fp32 reference
(`torch` matmuls and softmax in fp32 for a few heads) within `kernels.attention.tolerance`.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, Optional

import attrs
import numpy as np

from warpy import plan
from warpy.bench import (STATIC_HEADERS, CheckFailed, Progress, cell as _num, check_emit_args, cuda_torch, format_table,
                         gpu_reason, interleaved, kernel_of, l2_bytes, report_echo, report_plan, rotation,
                         run_checked_and_timed, static_row_of, static_table, time_sets)
from warpy.errors import NoGPU, WarpyError
from warpy.numeric import bits16, from_bits
from warpy.plan import Plan

from .attention import (FAMILY, AttentionProblem, bind, from_bshd, head_reference, problem, to_bshd,
                        tolerance)


@attrs.frozen
class Shape:
    """A row of the benchmark: batch, query heads, key/value heads, sequence (queries = keys),
    head_dim, causal."""

    B: int
    H: int
    H_kv: int
    S: int
    D: int
    causal: bool

    def problem(self, layout: str = "bshd") -> AttentionProblem:
        return problem(self.B, self.H, self.S, self.D, causal=self.causal, H_kv=self.H_kv, layout=layout)

    def __str__(self) -> str:
        kv = f" kv{self.H_kv}" if self.H_kv != self.H else ""
        return f"{self.B}x{self.H}x{self.S}x{self.D}{kv}{' causal' if self.causal else ''}"


def default_shapes() -> list[Shape]:
    """B·H = 16·16, S 512..8192, D 64 and 128, causal and not; and grouped-query rows (16 query heads
    on 4 key/value heads) at S 4096, D 128."""
    rows = [Shape(16, 16, 16, s, d, c) for d in (128, 64) for s in (512, 1024, 2048, 4096, 8192) for c in (False, True)]
    rows += [Shape(16, 16, 4, 4096, 128, c) for c in (False, True)]
    return rows


def parse_shape(text: str) -> Shape:
    """`BxHxSxD[:causal][:kv=N]` (also with commas); one-line WarpyError otherwise."""
    head, *opts = text.strip().lower().split(":")
    parts = re.split(r"[x×,]", head)
    if len(parts) != 4 or not all(re.fullmatch(r"[0-9]+", p) for p in parts):
        raise WarpyError(f"shape {text!r} is not BxHxSxD[:causal][:kv=N] (e.g. 16x16x4096x128:causal)")
    B, H, S, D = (int(p) for p in parts)
    causal, hkv = False, H
    for o in opts:
        if o == "causal":
            causal = True
        elif re.fullmatch(r"kv=[0-9]+", o):
            hkv = int(o[3:])
        else:
            raise WarpyError(f"shape {text!r}: {o!r} is not 'causal' or 'kv=N'")
    shape = Shape(B, H, hkv, S, D, causal)
    shape.problem()  # refused in one line if the kernel cannot take it
    return shape


def tflops(prob: AttentionProblem, us: float) -> float:
    return prob.flops / (us * 1e-6) / 1e12


def refuse_unless_it_fits(prob: AttentionProblem) -> None:
    """Refuse, in one line naming the bytes, a problem whose tensors cannot fit in the H200's memory."""
    from warpy.target import target

    t = target(prob.arch)
    need = sum(prob.nbytes(x) for x in ("q", "k", "v", "o"))
    if need > t.gpu_memory:
        raise WarpyError(f"{prob}: Q, K, V and O need {need} bytes, more than the {t.gpu}'s {t.gpu_memory}: give "
                         "smaller sizes")


# ---------------------------------------------------------------------------------------------
# warpy attention B H S D


def plan_for(prob: AttentionProblem, config: Optional[str] = None, **kw: Any) -> Plan:
    return plan.plan_for(FAMILY, prob, config, **kw)


def attention_job(prob: AttentionProblem, *, emit: Optional[str] = None, output: Optional[str] = None,
                  run: bool = True, iters: int = 20, echo: Callable[[str], None] = print,
                  config: Optional[str] = None) -> dict[str, Any]:
    """Pick, build, lift, assemble (resources), check the disassembly, optionally emit an artifact;
    on an sm_90 GPU: run on random inputs, compare sampled heads with the float64 softmax within the
    tolerance, time. Returns what it found (`--json`); wrong results raise `CheckFailed`."""
    check_emit_args(emit, output, iters)
    refuse_unless_it_fits(prob)
    if config:
        FAMILY.configure(prob, config)
    result: dict[str, Any] = {"problem": attrs.asdict(prob)}
    artifact, echo = echo, report_echo(emit, output, echo)  # stdout may carry the artifact, the report stderr
    progress = Progress()
    try:
        progress("planning")
        pl = plan_for(prob, config, progress=progress, keep_program=emit == "sass")
        progress.done()
        report_plan(pl, result, echo, artifact, emit, output, progress)
        if not run:
            return result
        return run_checked_and_timed(result, prob.arch, gpu_reason(prob.arch), echo, progress, lambda: run_check(pl),
                                     "the float64 softmax (random normal inputs)", f"attention {prob}",
                                     lambda: time_plan(pl, iters), iters, prob.flops)
    finally:
        progress.done()


def sample_heads(prob: AttentionProblem, n: int = 3) -> list[tuple[int, int]]:
    """The (batch, query head) pairs a check compares: the first, the last and one between."""
    last = (prob.B - 1, prob.H_q - 1)
    mid = (prob.B // 2, prob.H_q // 2)
    out: list[tuple[int, int]] = []
    for x in [(0, 0), last, mid][:n]:
        if x not in out:
            out.append(x)
    return out


def random_inputs(prob: AttentionProblem, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Q, K, V as bf16 bits in the problem's layout (random normal: scores of unit scale at 1/√D)."""
    out = {}
    for x in ("q", "k", "v"):
        b, s, h, d = prob.shape(x)
        out[x] = from_bshd(bits16(rng.standard_normal((b, s, h, d), dtype=np.float32), "bf16"), prob.layout)
    return out


def compare_heads(prob: AttentionProblem, q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray,
                  heads: Sequence[tuple[int, int]]) -> tuple[int, str]:
    """(wrong elements, a line) of O against `head_reference` over the given heads, all rows; q, k, v
    and o as (B, S, H, D) float arrays."""
    bad = total = 0
    worst = 0.0
    rows = np.arange(prob.S_q)
    for b, h in heads:
        hk = h // prob.group
        ref, mag = head_reference(prob, q[b, :, h, :], k[b, :, hk, :], v[b, :, hk, :], rows)
        err = np.abs(o[b, :, h, :].astype(np.float64) - ref)
        tol = tolerance(prob, ref, mag)
        wrong = ~(err <= tol)
        bad += int(wrong.sum())
        total += err.size
        worst = max(worst, float(np.max(err / tol)))
    if bad:
        return bad, f"FAIL: {bad} of {total} elements of {len(heads)} heads beyond the tolerance (worst {worst:.2f}x)"
    return 0, f"ok ({total} elements of {len(heads)} heads within the tolerance, worst at {worst:.2f} of it)"


def run_check(pl: Plan, seed: int = 20261201) -> tuple[int, str]:
    """Run the plan once on random normal inputs; compare sampled heads with the float64 softmax."""
    from warpy import runtime as rt
    from warpy.runtime.bind import run_header

    prob: AttentionProblem = pl.problem
    rng = np.random.default_rng(seed)
    host = random_inputs(prob, rng)
    dev = {x: rt.to_device(a) for x, a in host.items()}
    do = rt.alloc(prob.nbytes("o"))
    do.fill(0xFF)  # NaN everywhere: an element the kernel never writes cannot pass
    try:
        params = bind(pl.header, dev["q"], dev["k"], dev["v"], do)
        run_header(kernel_of(pl), pl.header, params, timeout=60)
        raw = do.download(np.uint16, (prob.nbytes("o") // 2,))
    finally:
        for buf in list(dev.values()) + [do]:
            buf.free()
    q, k, v = (to_bshd(from_bits(host[x], "bf16"), prob.shape(x), prob.layout) for x in ("q", "k", "v"))
    o = to_bshd(from_bits(raw, "bf16"), prob.shape("o"), prob.layout)
    return compare_heads(prob, q, k, v, o, sample_heads(prob))


def time_plan(pl: Plan, iters: int = 20) -> float:
    """Median per-call GPU time (µs) of the plan on random inputs, rotating input sets past the L2."""
    from warpy import runtime as rt

    prob: AttentionProblem = pl.problem
    sets = rotation(sum(prob.nbytes(x) for x in ("q", "k", "v", "o")), l2_bytes())
    rng = np.random.default_rng(1)
    bufs = []
    for _ in range(sets):
        host = random_inputs(prob, rng)
        bufs.append([rt.to_device(host[x]) for x in ("q", "k", "v")] + [rt.alloc(prob.nbytes("o"))])
    return time_sets(pl, bufs, lambda b, _scratch: bind(pl.header, *b), iters)


# ---------------------------------------------------------------------------------------------
# warpy bench attention

BACKENDS = ("flash", "cudnn", "efficient", "math")


def parse_backends(text: str) -> tuple[str, ...]:
    """`flash,cudnn,...` or `all` (flash, cudnn, efficient); one line naming a backend that is not."""
    if text.strip().lower() == "all":
        return BACKENDS[:3]
    out = tuple(x.strip().lower() for x in text.split(",") if x.strip())
    for b in out:
        if b not in BACKENDS:
            raise WarpyError(f"backend {b!r} is not one of {', '.join(BACKENDS)} (or all)")
    if not out:
        raise WarpyError("--backends names no backend")
    return out


@attrs.frozen
class BenchRow:
    """One shape's result: median per-call GPU times (µs; None when that side did not run) of warpy and
    of each torch backend, and the correctness verdict of warpy's output."""

    shape: Shape
    warpy_us: Optional[float]
    torch_us: dict[str, Optional[float]]
    check: str

    def ratio(self, backend: str) -> Optional[float]:
        """The backend's time / warpy's: above 1 means warpy is faster."""
        t = self.torch_us.get(backend)
        if self.warpy_us is None or t is None or self.warpy_us <= 0:
            return None
        return t / self.warpy_us


def bench_table(rows: Sequence[BenchRow], backends: Sequence[str]) -> str:
    """shape | warpy µs | warpy TFLOP/s | per backend: µs, TFLOP/s, its time / warpy's | check."""
    headers = ["shape", "warpy µs", "warpy TFLOP/s"]
    for b in backends:
        headers += [f"{b} µs", f"{b} TFLOP/s", f"{b}/warpy"]
    headers.append("check")
    body = []
    for r in rows:
        prob = r.shape.problem()
        cells = [str(r.shape), _num(r.warpy_us, ".1f"),
                 _num(None if r.warpy_us is None else tflops(prob, r.warpy_us), ".0f")]
        for b in backends:
            t = r.torch_us.get(b)
            cells += [_num(t, ".1f"), _num(None if t is None else tflops(prob, t), ".0f"), _num(r.ratio(b), ".3f")]
        cells.append(r.check)
        body.append(cells)
    return format_table(headers, body, [False] + [True] * (len(headers) - 2) + [False])


def bench_json(rows: Sequence[BenchRow]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        prob = r.shape.problem()
        out.append({"shape": attrs.asdict(r.shape), "warpy_us": r.warpy_us,
                    "warpy_tflops": None if r.warpy_us is None else tflops(prob, r.warpy_us),
                    "torch_us": dict(r.torch_us),
                    "torch_tflops": {b: (None if t is None else tflops(prob, t)) for b, t in r.torch_us.items()},
                    "check": r.check})
    return out


def _torch() -> Any:
    return cuda_torch("warpy bench attention compares with torch's scaled_dot_product_attention")


def torch_call(torch: Any, backend: str, causal: bool, scale: float, gqa: bool) -> Callable[[Any, Any, Any], Any]:
    """scaled_dot_product_attention(q, k, v) restricted to one backend (torch.nn.attention.sdpa_kernel),
    grouped-query through enable_gqa."""
    from torch.nn.attention import SDPBackend, sdpa_kernel  # type: ignore[import-not-found,unused-ignore]

    which = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
             "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[backend]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    kw: dict[str, Any] = {"is_causal": causal, "scale": scale}
    if gqa:
        kw["enable_gqa"] = True

    def call(q: Any, k: Any, v: Any) -> Any:
        with sdpa_kernel([which]):
            return sdpa(q, k, v, **kw)

    return call


def torch_check(torch: Any, prob: AttentionProblem, q: Any, k: Any, v: Any, o: Any, heads: int = 2) -> str:
    """warpy's O (B, H, S, D views) against an fp32 reference for a few heads (matmuls and softmax in
    fp32 on the GPU), within `kernels.attention.tolerance` (A = softmax · |V| in fp32 too)."""
    bad = total = 0
    worst = 0.0
    S, Skv = prob.S_q, prob.S_kv
    for b, h in sample_heads(prob, heads):
        hk = h // prob.group
        qh, kh, vh = q[b, h].float(), k[b, hk].float(), v[b, hk].float()
        s = (qh @ kh.t()) * prob.scale
        if prob.causal:
            mask = torch.arange(Skv, device=s.device)[None, :] > torch.arange(S, device=s.device)[:, None]
            s = s.masked_fill(mask, float("-inf"))
        w = torch.softmax(s, dim=1)
        ref, mag = w @ vh, w @ vh.abs()
        err = (o[b, h].float() - ref).abs()
        u = 2.0 ** -8
        tol = u * ref.abs() + (u + 2.0 ** -14 + Skv * 2.0 ** -24) * mag + 2.0 ** -24
        bad += int((~(err <= tol)).sum().item())
        total += err.numel()
        worst = max(worst, float((err / tol).max().item()))
    return "ok" if bad == 0 else f"FAIL ({bad} of {total}; worst {worst:.2f}x the tolerance)"


def _configured_launcher(prob: AttentionProblem, config: str, q: Any, k: Any, v: Any, o: Any,
                         stream: Any) -> Callable[[int], None]:
    """Launches of `config`'s plan (the rule's configuration with fields set by hand) on the torch
    tensors q, k, v and o ((B, S, H, D) memory), on `stream`."""
    from warpy.runtime.bind import DeviceSpan, FastLaunch

    pl = plan_for(prob, config)
    fast = FastLaunch(kernel_of(pl), pl.header)
    spans = [DeviceSpan(t.data_ptr(), t.numel() * t.element_size()) for t in (q, k, v, o)]
    return lambda _i: fast(0, lambda _scratch: bind(pl.header, *spans), stream)


def bench_attention(shapes: Sequence[Shape], iters: int = 20, backends: Sequence[str] = ("flash",),
                    echo: Callable[[str], None] = print, config: Optional[str] = None) -> list[BenchRow]:
    """warpy.attention against torch's scaled_dot_product_attention per shape and backend, interleaved,
    on the same bf16 tensors ((B, S, H, D) memory seen as (B, H, S, D)); prints each row as it lands.
    With `config` (fields of the rule's configuration set by hand) warpy's side launches that
    configuration's plan instead."""
    import warpy
    from warpy import runtime as rt
    from warpy.runtime.driver import cuda

    why = gpu_reason("sm_90a")
    if why is not None:
        raise NoGPU(f"warpy bench attention needs an sm_90 GPU: {why.rstrip('.')}; without one, `warpy bench attention "
                    "--static` builds, assembles and reports each shape's resources")
    torch = _torch()
    dev = torch.device("cuda", 0)
    stream_handle = int(torch.cuda.current_stream(dev).cuda_stream)
    cu_stream = cuda().CUstream(stream_handle)
    rows: list[BenchRow] = []
    echo(f"{rt.device().name}: bf16 attention, (B, S, H, D) memory; torch {torch.__version__} "
         f"scaled_dot_product_attention backends {', '.join(backends)}; median of {iters} calls x 4 interleaved rounds")
    progress = Progress()
    for shape in shapes:
        prob = shape.problem()
        progress(f"{shape}: planning")
        times: dict[str, Optional[float]] = {b: None for b in backends}
        try:
            g = torch.Generator(device=dev).manual_seed(0)

            def make(h: int) -> Any:
                return torch.randn((shape.B, shape.S, h, shape.D), device=dev, dtype=torch.bfloat16,
                                   generator=g).transpose(1, 2)

            q, k, v = make(shape.H), make(shape.H_kv), make(shape.H_kv)
            o = torch.empty((shape.B, shape.S, shape.H, shape.D), device=dev, dtype=torch.bfloat16).transpose(1, 2)

            def run_rule(_i: int) -> None:
                warpy.attention(q, k, v, causal=shape.causal, out=o)

            run_w = _configured_launcher(prob, config, q, k, v, o, stream_handle) if config else run_rule

            run_w(0)  # plan + load before timing
            torch.cuda.synchronize()
            check = torch_check(torch, prob, q, k, v, o)
            calls: dict[str, Callable[[int], None]] = {}
            for b in backends:
                fn = torch_call(torch, b, shape.causal, prob.scale, shape.H_kv != shape.H)
                try:
                    fn(q, k, v)
                    torch.cuda.synchronize()
                except Exception as e:  # noqa: BLE001 (a backend that does not take this shape: its cell stays empty)
                    print(f"{shape}: torch {b}: {str(e).splitlines()[0][:160]}", file=sys.stderr, flush=True)
                    continue
                calls[b] = (lambda f: (lambda _i: f(q, k, v)))(fn)
            progress(f"{shape}: timing")
            w_us, t_us = interleaved(run_w, calls, cu_stream, iters)
            times.update(t_us)
            row = BenchRow(shape, w_us, times, check)
            del q, k, v, o
            torch.cuda.empty_cache()
        except WarpyError as e:
            row = BenchRow(shape, None, times, f"error: {e}")
        progress.done()
        rows.append(row)
        parts = ", ".join(f"{b} {_num(t, '.1f')} µs" for b, t in row.torch_us.items())
        print(f"{shape}: warpy {_num(row.warpy_us, '.1f')} µs, {parts}, {row.check}", file=sys.stderr, flush=True)
    echo(bench_table(rows, backends).rstrip("\n"))
    return rows


# ---------------------------------------------------------------------------------------------
# warpy bench attention --static (no GPU)


def static_rows(shapes: Sequence[Shape], progress: Optional[Progress] = None,
                config: Optional[str] = None) -> list[list[str]]:
    """Per shape: build + assemble + disassembly check (`warpy.bench.static_row`); a shape that
    cannot be built gets its error as one line in its row."""
    say = progress or (lambda _m: None)
    rows = []
    for shape in shapes:
        name = str(shape)
        say(f"{name}: building")
        rows.append(static_row_of(name, lambda: plan_for(shape.problem(), config,
                                                         progress=lambda msg: say(f"{name}: {msg}"))))
    return rows


def run_cli(what: str, shapes: Sequence[str], *, iters: int, backends: str, static_only: bool,
            config: Optional[str], json: bool, echo: Callable[[str], None]) -> tuple[int, Any]:
    """`warpy bench attention ...` (mounted in warpy/cli.py): (exit status, the JSON record or None)."""
    todo = [parse_shape(s) for s in shapes] if shapes else default_shapes()
    if iters < 1:
        raise WarpyError(f"--iters {iters} must be at least 1")
    if config:
        FAMILY.configure(todo[0].problem(), config)
    if static_only:
        progress = Progress()
        try:
            static = static_rows(todo, progress, config)
        finally:
            progress.done()
        failed = any(r[-1].startswith("not built: ") for r in static)
        if not json:
            echo("sm_90a attention programs: built, assembled, disassembly checked")
            echo(static_table(static).rstrip("\n"))
        return (1 if failed else 0), {"shapes": [dict(zip(["shape"] + STATIC_HEADERS, r)) for r in static],
                                      "ok": not failed}
    if config:
        for shape in todo[1:]:  # (a field or value a shape cannot take: refused before anything runs)
            FAMILY.configure(shape.problem(), config)
    rows = bench_attention(todo, iters, parse_backends(backends), echo=echo, config=config)
    ok = all(r.check == "ok" for r in rows)
    return (0 if ok else 1), {"iters": iters, "shapes": bench_json(rows), "ok": ok}


__all__ = [
    "Shape", "BenchRow", "CheckFailed", "attention_job", "bench_attention", "bench_table", "default_shapes",
    "parse_shape", "parse_backends", "run_check", "static_rows", "static_table", "time_plan", "run_cli",
]
