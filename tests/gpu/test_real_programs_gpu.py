"""warpy.gemm in real programs on an sm_90 GPU with torch (issue 23; the CPU half is
tests/host/test_real_programs.py). Each case runs in its own subprocess and prints one JSON line
(`python tests/gpu/test_real_programs_gpu.py CASE`), so a fault in one leaves the others' context
intact; `-s` shows each case's line.

- `threads`: 8 threads x 50 calls of mixed shapes and types (bf16/fp16 in; fp32/bf16/fp16 out; a
  split-K program with scratch memory among them), each thread on its own torch stream, the first
  calls of every shape racing to plan and load: every element of every C exact on small-integer
  inputs against a float64 product rounded to C's type; then 4 bare threads (no torch CUDA call of
  their own, no context current: the issue's CUDA_ERROR_INVALID_CONTEXT) on tensors the main thread
  made;
- `graph`: from a worker thread, calls of mixed shapes (out given and allocated, the split-K one
  too) warmed up on a side stream, captured with torch.cuda.graph on it, replayed three times on
  fresh inputs copied into the captured ones: every element exact each time;
- `overlap`: out equal to, inside, containing or partly overlapping a or b refused in one line
  naming both, by warpy.gemm and check_call (the public entry points that take out); disjoint
  slices of one storage accepted and exact;
- `empty`: M = 0, N = 0, K = 0 (allocated, out_dtype, out given and NaN-filled, numpy) as torch.mm
  and numpy give them: shape, type and values;
- `host`: host µs per call of warpy.gemm(a, b, out=c) and warpy.gemm(a, b), and torch.mm's, measured
  the way `warpy bench gemm --host-overhead` measures its first column (reported, not asserted).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from gpu_case import case_main, host_us_per_call, repo_env, run_case

# (M, N, K, in, out): ragged ones, one per type pairing, and a split-K program (scratch memory)
SHAPES = [(128, 256, 64, "bf16", "fp32"), (200, 136, 72, "fp16", "fp16"), (256, 128, 128, "bf16", "bf16"),
          (1000, 1000, 1000, "fp16", "fp32"), (256, 256, 8192, "bf16", "fp32"), (64, 520, 96, "bf16", "bf16")]


def _torch() -> Any:
    import torch  # type: ignore[import-not-found,unused-ignore]

    return torch


def _types(inp: str, out: str) -> tuple[Any, Any]:
    torch = _torch()
    t = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    return t[inp], t[out]


def _inputs(shape: tuple[int, int, int, str, str], g: Any) -> tuple[Any, Any]:
    torch = _torch()
    M, N, K, inp, _ = shape
    ti, _to = _types(inp, "fp32")
    a = torch.randint(-3, 4, (M, K), device="cuda", generator=g).to(ti)
    b = torch.randint(-3, 4, (N, K), device="cuda", generator=g).to(ti)
    return a, b


def _bad(c: Any, a: Any, b: Any) -> int:
    """Elements of C that differ from the float64 product rounded to C's type (exact: the inputs
    are small integers, every partial sum an integer below 2^24)."""
    want = (a.double() @ b.double().t()).to(c.dtype)
    return int((c != want).sum().item()) + (0 if c.shape == want.shape else 1)


def _threads() -> dict[str, Any]:
    import warpy

    torch = _torch()
    report: dict[str, Any] = {"ok": True}
    errors: list[str] = []
    bad: list[tuple[int, int, int]] = []
    start = threading.Barrier(8)

    def work(i: int) -> None:
        try:
            g = torch.Generator(device="cuda").manual_seed(100 + i)
            s = torch.cuda.Stream()
            results = []
            start.wait()
            with torch.cuda.stream(s):
                for j in range(50):
                    shape = SHAPES[(i + j) % len(SHAPES)]
                    a, b = _inputs(shape, g)
                    _, to = _types(shape[3], shape[4])
                    if j % 2:
                        c = warpy.gemm(a, b, out_dtype=shape[4])
                    else:
                        c = torch.full((shape[0], shape[1]), float("nan"), device="cuda", dtype=to)
                        assert warpy.gemm(a, b, out=c) is c
                    results.append((j, a, b, c))
            s.synchronize()
            for j, a, b, c in results:
                n = _bad(c, a, b)
                if n:
                    bad.append((i, j, n))
        except Exception as e:  # reported, with the thread
            errors.append(f"thread {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report["threads_s"] = round(time.perf_counter() - t0, 2)
    report["errors"], report["bad"] = errors[:5], bad[:5]
    report["ok"] &= not errors and not bad

    # bare threads: nothing but warpy.gemm (out given) on tensors the main thread made, on the
    # main thread's stream (their current stream is the default one): the failing case
    g = torch.Generator(device="cuda").manual_seed(7)
    sets = []
    for k in range(4):
        shape = SHAPES[k]
        a, b = _inputs(shape, g)
        _, to = _types(shape[3], shape[4])
        sets.append((a, b, torch.full((shape[0], shape[1]), float("nan"), device="cuda", dtype=to)))
    torch.cuda.synchronize()
    bare_errors: list[str] = []

    def bare(k: int) -> None:
        try:
            for _ in range(10):
                warpy.gemm(*sets[k][:2], out=sets[k][2])
        except Exception as e:
            bare_errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=bare, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    report["bare_errors"] = bare_errors[:3]
    report["bare_bad"] = sum(_bad(c, a, b) for a, b, c in sets)
    report["ok"] &= not bare_errors and report["bare_bad"] == 0
    return report


def _graph() -> dict[str, Any]:
    import warpy

    torch = _torch()
    report: dict[str, Any] = {"ok": True}

    def work() -> None:
        g = torch.Generator(device="cuda").manual_seed(11)
        s = torch.cuda.Stream()
        picks = [SHAPES[0], SHAPES[2], SHAPES[4], SHAPES[1]]  # the split-K program among them
        with torch.cuda.stream(s):
            ins = [_inputs(shape, g) for shape in picks]
            outs = [torch.empty((sh[0], sh[1]), device="cuda", dtype=_types(sh[3], sh[4])[1]) for sh in picks[:2]]
            for _ in range(2):  # warm-up on the capture stream: plans, loads, scratch, launch configurations
                warpy.gemm(*ins[0], out=outs[0])
                warpy.gemm(*ins[1], out=outs[1])
                warpy.gemm(*ins[2], out_dtype=picks[2][4])
                warpy.gemm(*ins[3], out_dtype=picks[3][4])
        s.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=s):
            warpy.gemm(*ins[0], out=outs[0])
            warpy.gemm(*ins[1], out=outs[1])
            c2 = warpy.gemm(*ins[2], out_dtype=picks[2][4])  # allocated from the graph's pool
            c3 = warpy.gemm(*ins[3], out_dtype=picks[3][4])
        results = outs + [c2, c3]
        bad = []
        for rep in range(3):
            with torch.cuda.stream(s):
                for (a, b), sh in zip(ins, picks):
                    na, nb = _inputs(sh, g)
                    a.copy_(na)
                    b.copy_(nb)
                for c in results:
                    c.fill_(float("nan"))
                graph.replay()
            s.synchronize()
            bad.append(sum(_bad(c, a, b) for c, (a, b) in zip(results, ins)))
        report["bad_per_replay"] = bad
        report["ok"] &= bad == [0, 0, 0]

    errors: list[str] = []

    def guarded() -> None:
        try:
            work()
        except Exception as e:
            errors.append(f"{type(e).__name__}: {e}")

    t = threading.Thread(target=guarded)
    t.start()
    t.join()
    report["errors"] = errors
    report["ok"] &= not errors
    return report


def _overlap() -> dict[str, Any]:
    import warpy
    from warpy.errors import WarpyError
    from warpy.matmul import check_call

    torch = _torch()
    report: dict[str, Any] = {"ok": True}
    g = torch.Generator(device="cuda").manual_seed(3)
    M, N, K = 128, 64, 128
    store = torch.randint(-3, 4, (4096, 128), device="cuda", generator=g).to(torch.bfloat16)
    a = store[:M]  # rows 0..127
    b = store[M:M + N]  # rows 128..191
    flat = store.view(-1)
    cases = {
        # out (M x N bf16 = 16 KiB) over a (M x K bf16 = 32 KiB) at the same address, 1 KiB in, or straddling a's end
        "inside": (flat[512:512 + M * N].view(M, N), "^out lies inside a "),
        "partial": (flat[M * K - 1024:M * K - 1024 + M * N].view(M, N), "^out partly overlaps a "),
        "equal": (None, "^out is a's memory "),
        "contains": (None, "^a lies inside out "),
        "b": (flat[(M + N) * K - 64:(M + N) * K - 64 + M * N].view(M, N), "^out partly overlaps b "),
    }
    got: dict[str, str] = {}
    for name, (out, pattern) in cases.items():
        x, y = a, b
        if name == "equal":  # out is a itself (N = K)
            x, y, out = a, store[M:M + K], a
        if name == "contains":  # a (16 x 128 bf16, 4 KiB from byte 1024) lies inside out (16 x 128 fp32, 8 KiB)
            x = store[4:20]
            y = store[1024:1024 + 128]
            out = flat[:16 * 128 * 2].view(torch.float32).view(16, 128)
        for entry, fn in (("gemm", warpy.gemm), ("check_call", check_call)):
            try:
                fn(x, y, out=out)
                got[f"{name}/{entry}"] = "accepted"
            except WarpyError as e:
                got[f"{name}/{entry}"] = str(e)
        import re

        report["ok"] &= all(re.match(pattern, got[f"{name}/{e}"]) and "\n" not in got[f"{name}/{e}"]
                            for e in ("gemm", "check_call"))
    report["refusals"] = {k: v[:60] for k, v in got.items()}
    torch.cuda.synchronize()
    # disjoint slices of one storage: rows 0..127 and 128..191 in, rows 1024.. out (bf16, touching nothing)
    out = store[1024:1024 + M, :N]  # rows 128 apart (a pitch, issue 19): written in place ...
    try:
        warpy.gemm(a, b, out=out)
        torch.cuda.synchronize()
        report["strided_out"] = "accepted" if _bad(out, a, b) == 0 else "wrong"
    except WarpyError as e:
        report["strided_out"] = str(e)[:40]
    out = flat[1024 * 128:1024 * 128 + M * N].view(M, N)  # ... a dense slice after them: accepted
    keep = store[:M + N].clone()
    c = warpy.gemm(a, b, out=out)
    touching = flat[M * K + N * K:M * K + N * K + M * N].view(M, N)  # starting at b's last byte + 1
    warpy.gemm(a, b, out=touching)
    torch.cuda.synchronize()
    report["disjoint_bad"] = _bad(c, a, b) + _bad(touching, a, b)
    report["inputs_kept"] = bool(torch.equal(store[:M + N], keep))
    report["ok"] &= report["disjoint_bad"] == 0 and report["inputs_kept"] and c is out
    report["ok"] &= report["strided_out"] == "accepted"
    return report


def _empty() -> dict[str, Any]:
    import numpy as np

    import warpy

    torch = _torch()
    report: dict[str, Any] = {"ok": True}
    rows = []
    for M, N, K in [(0, 64, 128), (64, 0, 128), (64, 32, 0), (0, 0, 0), (0, 32, 3)]:
        a = torch.ones((M, K), device="cuda", dtype=torch.bfloat16)
        b = torch.ones((N, K), device="cuda", dtype=torch.bfloat16)
        want = torch.mm(a, b.t())
        c = warpy.gemm(a, b)
        c32 = warpy.gemm(a, b, out_dtype="fp32")
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float32)
        same = warpy.gemm(a, b, out=out)
        torch.cuda.synchronize()
        an, bn = np.ones((M, K), np.float16), np.ones((N, K), np.float16)
        cn = warpy.gemm(an, bn, out_dtype="fp32")
        ok = (c.shape == want.shape and c.dtype == want.dtype and torch.equal(c, want)
              and c32.dtype == torch.float32 and torch.equal(c32, want.float()) and same is out
              and torch.equal(out, want.float()) and cn.shape == (M, N) and np.array_equal(cn, an @ bn.T))
        rows.append({"shape": [M, N, K], "torch": list(want.shape), "warpy": list(c.shape), "ok": bool(ok)})
        report["ok"] &= bool(ok)
    report["cases"] = rows
    return report


def _host() -> dict[str, Any]:
    import warpy

    torch = _torch()
    report: dict[str, Any] = {"ok": True}
    for n in (256, 4096):
        a = torch.randn((n, n), device="cuda", dtype=torch.bfloat16)
        b = torch.randn((n, n), device="cuda", dtype=torch.bfloat16)
        c = torch.empty((n, n), device="cuda", dtype=torch.bfloat16)
        for what, fn in ((f"warpy.gemm(a, b, out=c) {n}", lambda: warpy.gemm(a, b, out=c)),
                         (f"warpy.gemm(a, b) {n}", lambda: warpy.gemm(a, b)),
                         (f"torch.mm(a, b.t(), out=c) {n}", lambda: torch.mm(a, b.t(), out=c))):
            report[what] = host_us_per_call(torch, fn)
    return report


CASES = {"threads": _threads, "graph": _graph, "overlap": _overlap, "empty": _empty, "host": _host}


def _run_isolated(case: str, timeout: float = 600) -> dict[str, Any]:
    return run_case(__file__, [case], timeout)


@pytest.mark.parametrize("case", list(CASES))
def test_real_programs(case: str) -> None:
    pytest.importorskip("torch")
    r = _run_isolated(case)
    print(case, json.dumps(r))
    assert r.get("ok"), f"{case}: {json.dumps(r)}"


def test_a_forked_child_is_refused_in_one_line_on_the_gpu() -> None:
    """After a real call, a forked child's call is refused at once (the driver is not touched)."""
    pytest.importorskip("torch")
    code = (
        "import os, sys, torch, warpy\n"
        "a = torch.ones((128, 64), device='cuda', dtype=torch.bfloat16)\n"
        "c = warpy.gemm(a, a); c2 = torch.empty_like(c); torch.cuda.synchronize()\n"
        "pid = os.fork()\n"
        "if pid == 0:  # out given: torch itself is asked for nothing in the child\n"
        "    try:\n        warpy.gemm(a, a, out=c2); print('child: no error')\n"
        "    except Exception as e:\n        print('child:', type(e).__name__, str(e))\n"
        "    sys.stdout.flush(); os._exit(0)\n"
        "os.waitpid(pid, 0); print('parent:', bool((c == 64).all().item()))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=repo_env())
    lines = p.stdout.splitlines()
    print(lines)
    assert any(ln.startswith("child: WarpyError warpy used the GPU in process ") and "'spawn'" in ln for ln in lines), \
        p.stdout + p.stderr
    assert "parent: True" in lines


if __name__ == "__main__":  # one case, one JSON line (run by the tests above in a subprocess)
    case_main(lambda case: CASES[case]())
