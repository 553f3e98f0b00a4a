"""warpy.gemm in real programs, without a GPU (issue 23; the GPU half is tests/gpu/test_real_programs_gpu.py):

- threads: 8 threads x 50 calls of mixed shapes and types, each on its own stream, against a fake
  driver that answers as a real one does to a launch from a thread with no context current
  (CUDA_ERROR_INVALID_CONTEXT) or for another GPU's kernel (CUDA_ERROR_INVALID_HANDLE): every launch
  carries its own call's operands and its stream's scratch; a plan is built and a cubin loaded
  once however many threads ask at once; the tensor-map cache, the scratch pool and the packed
  parameters stay whole under concurrent use; the caller's context is put back;
- overlap: `out` equal to, inside, containing or partly overlapping an input is refused in one
  line naming both; disjoint slices of one storage are accepted; the byte arithmetic against
  brute force over strides (either sign), offsets, shapes and element sizes;
- empty problems (M = 0, N = 0, K = 0) as numpy and torch give them, with no kernel;
- GPUs: operands on GPU 1 run on GPU 1 (its context, its module, its stream), operands on two
  GPUs, a GPU that does not exist or that warpy.gemm does not run on are refused in one line;
- fork: a child forked after warpy used the GPU is refused in one line, not hung.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, Optional

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import warpy.matmul as mm
import warpy.plan as plan
import warpy.runtime.bind as bind
import warpy.runtime.driver as drv
import warpy.runtime.tensormap as tm
from warpy.errors import NoGPU, WarpyError
from warpy.interop import Matrix, byte_span, families_meet, overlap, segments
from warpy.isa.text import parse
from warpy.kernels import gemm as gemm_family
from warpy.runtime.bind import FastLaunch
from fake_cuda_driver import WARPY_STREAM, CUresult, OnCall, fake_driver, install, launch_args

TYPESTR = {"bf16": "bf16", "fp16": "<f2", "fp32": "<f4"}
ELEM = {"bf16": 2, "fp16": 2, "fp32": 4}


def header_text(M: int, N: int, K: int, dtype: str, scratch: bool = True) -> str:
    """A GEMM-like header whose maps span exactly A (M x K) and B (N x K), parameters a, b, c, K
    (and scratch flags last, where it has scratch), so one header reads any launch's arguments."""
    e = ELEM[dtype]
    return (f".kernel gemm_fake_{M}_{N}_{K}_{dtype}\n.sm sm_90a\n.threads 128\n.dynsmem 1024\n.grid 4 1 1\n"
            ".cluster 1 1 1\n.mbarriers 0\n"
            f".tmap a dtype={dtype} dims={K},{M} strides={K * e} box=64,64 swizzle=128\n"
            f".tmap b dtype={dtype} dims={K},{N} strides={K * e} box=64,64 swizzle=128\n"
            ".param c u64\n.param K u32\n"
            + (".param flags u64 scratch\n.buffer flag_words global base=0x0 size=0x50 elem=u32 source=flags "
               "layout=20:4\n" if scratch else ""))


# Mixed shapes and types; K tells the launches apart (each shape has its own); two of the four
# programs have scratch memory (a first launch on a stream allocates), two have none (a thread's
# first call may be a bare launch: the context must be current already)
SHAPES = [(256, 128, 64, "bf16", "fp32"), (128, 256, 128, "fp16", "fp16"), (64, 64, 192, "bf16", "bf16"),
          (192, 64, 256, "fp16", "fp32")]
SCRATCH_K = {128, 256}
ARGS_HEADER = parse(header_text(64, 64, 64, "bf16", scratch=False)).header
ARGS_HEADER_S = parse(header_text(64, 64, 64, "bf16", scratch=True)).header


def fake_plan(M: int, N: int, K: int, dtype: str, out_dtype: str, arch: str = "sm_90a") -> plan.Plan:
    text = header_text(M, N, K, dtype, scratch=K in SCRATCH_K)
    problem = SimpleNamespace(M=M, N=N, K=K, dtype=dtype, out_dtype=out_dtype, arch=arch)
    return plan.Plan(gemm_family.FAMILY, problem, "fake", parse(text).header, text, "", b"not a cubin", False)  # type: ignore[arg-type]


class CAI:
    """A device operand through __cuda_array_interface__ (no device id: the driver is asked)."""

    def __init__(self, shape: tuple[int, int], dtype: str, ptr: int, strides: Optional[tuple[int, int]] = None) -> None:
        self.__cuda_array_interface__ = {"shape": shape, "typestr": TYPESTR[dtype], "data": (ptr, False),
                                         "strides": strides, "version": 3}


class _Dev:
    def __init__(self, index: int) -> None:
        self.type, self.index = "cuda", index


class TorchLike:
    """What warpy.gemm reads off a torch CUDA tensor (its module is "torch"): no torch needed."""

    def __init__(self, shape: tuple[int, int], dtype: str, ptr: int, device: int = 0) -> None:
        self.shape, self._ptr, self.device, self.requires_grad = shape, ptr, _Dev(device), False
        self.dtype = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32"}[dtype]

    def stride(self) -> tuple[int, int]:
        return (self.shape[1], 1)

    def data_ptr(self) -> int:
        return self._ptr


TorchLike.__module__ = "torch"


def _fake_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = SimpleNamespace(_C=SimpleNamespace(_cuda_getCurrentRawStream=lambda index: 0x500 + index))
    monkeypatch.setitem(sys.modules, "torch", torch)


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[SimpleNamespace]:
    """A fake driver with two GPUs (GPU 1 holds addresses from 0x7F10_0000_0000 on), recording each
    launch (calling thread, stream, its context, the arguments), each module load (its context),
    each allocation and memset; fake plans for SHAPES; a fresh `Launches`."""
    rec = SimpleNamespace(launches=[], loads=[], allocs=[], memsets=[], lock=threading.Lock())
    state: dict[str, Any] = {}

    def on_call(name: str, args: tuple[Any, ...], result: Any) -> None:
        if name == "cuLaunchKernelEx" and result[0] == CUresult.CUDA_SUCCESS:
            cfg, fn, address, _extra = args
            ctx = state["d"].cuCtxGetCurrent()[1]
            args = launch_args(ARGS_HEADER, address)
            if args["K"] in SCRATCH_K:
                args = launch_args(ARGS_HEADER_S, address)
            with rec.lock:
                rec.launches.append(SimpleNamespace(thread=threading.get_ident(), stream=int(cfg.hStream),
                                                    ctx=int(ctx), args=args))
        elif name == "cuModuleLoadData":
            with rec.lock:
                rec.loads.append(int(result[1].context))
        elif name == "cuMemAlloc":
            with rec.lock:
                rec.allocs.append(result[1])
        elif name == "cuMemsetD8Async":
            with rec.lock:
                rec.memsets.append((int(args[0]), args[2], int(args[3])))

    d = state["d"] = fake_driver(on_call, devices=2,
                                 pointer_device=lambda p: 1 if p >= 0x7F10_0000_0000 else 0)
    install(monkeypatch, d)
    monkeypatch.setattr(drv, "_tls", threading.local())
    monkeypatch.setattr(bind, "_TMAP_CACHE", type(bind._TMAP_CACHE)())
    monkeypatch.setattr(tm, "encode_tensor_map",
                        lambda box, address: tm.TensorMap(int(address).to_bytes(8, "little") + bytes(120), box,
                                                          int(address)))
    be = mm.Launches()
    for s in SHAPES:
        be._plans[s + ("sm_90a",)] = fake_plan(*s)
    monkeypatch.setattr(mm, "_launches", be)
    monkeypatch.setattr(mm, "make_plan", lambda family, problem: pytest.fail(f"a plan built for {problem}"))
    rec.driver, rec.backend = d, be
    yield rec
    drv._state.pop("unusable", None)
    for ld in list(be._loaded.values()):
        with drv.using(ld.kernel.module.handle.context.ordinal):
            ld.launcher.scratch.free()


def _operands(i: int, j: int, shape: tuple[int, int, int, str, str], gpu1: bool = False) -> tuple[CAI, CAI, CAI]:
    """Thread i's operands of call j: four distinct sets a thread (so packed blocks hit and miss)."""
    M, N, K, dt, odt = shape
    base = (0x7F10_0000_0000 if gpu1 else 0x7F00_0000_0000) + (i * 8 + j % 4) * 0x0100_0000
    return (CAI((M, K), dt, base), CAI((N, K), dt, base + 0x40_0000), CAI((M, N), odt, base + 0x80_0000))


@pytest.fixture
def switchy() -> Iterator[None]:
    """Threads switch as often as the interpreter allows: races show up."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def _run_threads(n: int, work: Any) -> list[BaseException]:
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def body(i: int) -> None:
        try:
            start.wait()
            work(i)
        except BaseException as e:  # noqa: BLE001 (reported by the test)
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return errors


# ---------------------------------------------------------------------------------------------
# Threads


def test_eight_threads_fifty_calls_each_on_its_own_stream(gpu: SimpleNamespace, switchy: None) -> None:
    calls: dict[int, list[tuple[int, int, int, int, int]]] = {}

    def work(i: int) -> None:
        mine = calls.setdefault(threading.get_ident(), [])
        stream = 0x100 + i
        for j in range(50):
            shape = SHAPES[(i + j) % len(SHAPES)]
            a, b, c = _operands(i, j, shape)
            assert mm.gemm(a, b, out=c, stream=stream) is c
            mine.append((stream, a.__cuda_array_interface__["data"][0], b.__cuda_array_interface__["data"][0],
                         c.__cuda_array_interface__["data"][0], shape[2]))

    assert _run_threads(8, work) == []
    assert len(gpu.launches) == 400
    for thread, mine in calls.items():  # each thread's launches, in its order: its own operands
        got = [(x.stream, x.args["a"], x.args["b"], x.args["c"], x.args["K"]) for x in gpu.launches if x.thread == thread]
        assert got == mine
    assert {x.ctx for x in gpu.launches} == {int(drv.opened(0).context)}
    # one scratch set per (kernel with scratch, stream), never shared by two streams, the same every call
    flags: dict[tuple[int, int], set[int]] = {}
    for x in gpu.launches:
        if "flags" in x.args:
            flags.setdefault((x.args["K"], x.stream), set()).add(x.args["flags"])
    assert all(len(v) == 1 for v in flags.values()) and len(flags) == 16
    assert len({next(iter(v)) for v in flags.values()}) == 16 == len(gpu.allocs)
    assert len(gpu.loads) == len(SHAPES)  # each cubin loaded once


def test_a_plan_is_built_and_loaded_once_however_many_threads_ask(gpu: SimpleNamespace, switchy: None,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[Any] = []

    def slow_build(family: Any, problem: Any) -> plan.Plan:
        built.append(problem)
        time.sleep(0.05)  # long enough for every thread to miss the cache
        return fake_plan(problem.M, problem.N, problem.K, problem.dtype, problem.out_dtype)

    monkeypatch.setattr(mm, "make_plan", slow_build)
    shape = (320, 64, 64, "bf16", "fp32")

    def work(i: int) -> None:
        mm.gemm(*_operands(i, 0, shape), stream=0x200 + i)

    assert _run_threads(8, work) == []
    assert [(p.M, p.N, p.K) for p in built] == [(320, 64, 64)]
    assert len(gpu.loads) == 1 and len(gpu.launches) == 8


def test_a_thread_without_a_context_gets_the_primary_one_and_keeps_it(gpu: SimpleNamespace) -> None:
    """The issue's failure: before, a second thread's launch found no context (INVALID_CONTEXT)."""
    seen: list[int] = []
    operands = _operands(0, 0, SHAPES[0])  # a program without scratch: nothing allocated on the thread
    mm.gemm(*operands, stream=0x300)  # the main thread planned, loaded, launched once on the stream

    def work(i: int) -> None:
        assert int(gpu.driver.cuCtxGetCurrent()[1]) == 0  # a new thread: no context current
        mm.gemm(*operands, stream=0x300)  # the launcher's fast path: one cuLaunchKernelEx
        seen.append(int(gpu.driver.cuCtxGetCurrent()[1]))  # left current, as the runtime API leaves it

    assert _run_threads(1, work) == []
    assert seen == [int(drv.opened(0).context)] == [gpu.launches[1].ctx] and len(gpu.launches) == 2


def test_the_callers_other_context_is_put_back(gpu: SimpleNamespace) -> None:
    ctx1 = drv.opened(1).context
    gpu.driver.cuCtxSetCurrent(ctx1)  # the program works on GPU 1 (torch.cuda.set_device(1))
    mm.gemm(*_operands(0, 0, SHAPES[0]), stream=0x300)  # operands on GPU 0
    assert gpu.launches[-1].ctx == int(drv.opened(0).context)
    assert gpu.driver.cuCtxGetCurrent()[1] is ctx1 and drv.selected() == 0


def test_tensor_map_cache_stays_whole_under_threads(monkeypatch: pytest.MonkeyPatch, switchy: None) -> None:
    """Many threads hitting, inserting and evicting at once (before: KeyError from move_to_end after
    another thread's eviction); every answer is the map of the address asked for."""
    class Yielding(OrderedDict):  # type: ignore[type-arg]
        """Lets another thread run between a lookup and what follows it (where the race was)."""

        def get(self, key: Any, default: Any = None) -> Any:
            hit = super().get(key, default)
            time.sleep(0)
            return hit

    monkeypatch.setattr(bind, "_TMAP_CACHE", Yielding())
    monkeypatch.setattr(bind, "_TMAP_CACHE_SIZE", 4)
    monkeypatch.setattr(tm, "encode_tensor_map", lambda box, address: tm.TensorMap(bytes(128), box, int(address)))
    box = ARGS_HEADER.tmap("a")
    wrong: list[tuple[int, int]] = []

    def work(i: int) -> None:
        for j in range(400):
            address = 0x1000 * ((i * 7 + j) % 12)
            got = bind.encode_cached(box, address)
            if got.address != address:
                wrong.append((address, got.address))

    assert _run_threads(8, work) == [] and wrong == []
    assert len(bind._TMAP_CACHE) <= 4


def test_scratch_pool_one_set_a_stream_and_a_thread_on_the_per_thread_stream(switchy: None) -> None:
    made: list[tuple[int, Any]] = []
    lock = threading.Lock()

    def zeros(n: int, stream: Any) -> Any:
        with lock:
            made.append((threading.get_ident(), stream))
        time.sleep(0.001)
        return bind.DeviceSpan(0x9000 + 0x100 * len(made), n)

    pool = bind.ScratchPool(ARGS_HEADER_S, zeros)
    got: dict[tuple[int, Any], set[int]] = {}

    def work(i: int) -> None:
        for s in (7, 2, 7, 2, None):  # a shared stream, the per-thread default stream, warpy's own
            got.setdefault((threading.get_ident() if s == 2 else 0, s), set()).add(pool.get(s)["flags"].ptr)

    assert _run_threads(8, work) == []
    assert all(len(v) == 1 for v in got.values())
    assert len(got) == 2 + 8 == len(made)  # stream 7 once, warpy's once, stream 2 once a thread
    assert len({next(iter(v)) for v in got.values()}) == 10


def test_packed_blocks_evicted_by_other_threads_are_not_freed_mid_launch(gpu: SimpleNamespace, switchy: None) -> None:
    """A launcher keeping 2 blocks, 8 threads with 6 argument sets each: every launch reads the
    arguments it was asked for (the block it launches with is held by the launching thread)."""
    k = _kernel_on(0)
    fast = FastLaunch(k, ARGS_HEADER, max_params=2)
    bad: list[Any] = []

    def work(i: int) -> None:
        drv.device(0)
        for j in range(60):
            key = (i, j % 6)
            fast(key, lambda scratch, key=key: gemm_family.bind(ARGS_HEADER, 0x1000 + 0x100_0000 * key[0],
                                                                 0x2000, 0x3000 + 0x1000 * key[1], 64, 64, 64,
                                                                 scratch=scratch), 0x400)

    assert _run_threads(8, work) == []
    for x in gpu.launches:
        if (x.args["a"] - 0x1000) % 0x100_0000 or not 0 <= (x.args["c"] - 0x3000) // 0x1000 < 6:
            bad.append(x.args)
    assert bad == [] and len(gpu.launches) == 480
    fast.scratch.free()


def _kernel_on(ordinal: int) -> Any:
    from warpy import runtime as rt

    with drv.using(ordinal):
        return rt.load(b"fake").kernel("gemm_fake")


def test_first_launch_of_a_scratch_kernel_on_a_capturing_stream_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, fake_driver(cuStreamIsCapturing=lambda s: (CUresult.CUDA_SUCCESS, 1)))
    k = _kernel_on(0)
    fast = FastLaunch(k, ARGS_HEADER_S)
    with pytest.raises(WarpyError, match=r"^kernel gemm_fake's first launch on stream 0x7 is being captured into a "
                                         r"CUDA graph, .* make one call of the same shape on that stream before capturing$"):
        fast("k", lambda scratch: gemm_family.bind(ARGS_HEADER_S, 0x1000, 0x2000, 0x3000, 64, 64, 64, scratch=scratch), 7)


# ---------------------------------------------------------------------------------------------
# GPUs


def test_operands_on_gpu1_run_on_gpu1(gpu: SimpleNamespace) -> None:
    a, b, c = _operands(0, 0, SHAPES[0], gpu1=True)
    mm.gemm(a, b, out=c, stream=0x600)
    ctx1 = int(drv.opened(1).context)
    assert gpu.loads == [ctx1] and [x.ctx for x in gpu.launches] == [ctx1]
    assert int(gpu.driver.cuCtxGetCurrent()[1]) == ctx1 and drv.selected() == 0  # nothing was current: left so
    # GPU 0's operands after: loaded there too, launched there
    mm.gemm(*_operands(0, 0, SHAPES[0]), stream=0x601)
    assert gpu.loads == [ctx1, int(drv.opened(0).context)] and gpu.launches[-1].ctx == int(drv.opened(0).context)
    # no stream known: warpy's own stream of GPU 1, synchronised there
    mm.gemm(a, b, out=c)
    assert gpu.launches[-1].ctx == ctx1 and gpu.launches[-1].stream == WARPY_STREAM + 1000


def test_torch_tensors_on_gpu1_use_gpu1s_stream(gpu: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_torch(monkeypatch)
    M, N, K, dt, odt = SHAPES[0]
    a, b, c = (TorchLike((M, K), dt, 0x7F10_0000_0000, 1), TorchLike((N, K), dt, 0x7F10_0100_0000, 1),
               TorchLike((M, N), odt, 0x7F10_0200_0000, 1))
    mm.gemm(a, b, out=c)
    (x,) = gpu.launches
    assert x.ctx == int(drv.opened(1).context) and x.stream == 0x501  # torch's current stream on GPU 1


@pytest.mark.parametrize("where,message", [
    ((0, 1, 0), "^a is on GPU 0 but b is on GPU 1: give every operand on one GPU$"),
    ((1, 1, 0), "^a is on GPU 1 but out is on GPU 0: give every operand on one GPU$"),
])
def test_operands_on_two_gpus_are_refused(gpu: SimpleNamespace, monkeypatch: pytest.MonkeyPatch,
                                          where: tuple[int, int, int], message: str) -> None:
    _fake_torch(monkeypatch)
    M, N, K, dt, odt = SHAPES[0]
    a, b, c = (TorchLike((M, K), dt, 0x7F00_0000_0000, where[0]), TorchLike((N, K), dt, 0x7F00_0100_0000, where[1]),
               TorchLike((M, N), odt, 0x7F00_0200_0000, where[2]))
    with pytest.raises(WarpyError, match=message):
        mm.gemm(a, b, out=c)
    assert not gpu.launches


def test_cai_operands_on_two_gpus_are_refused(gpu: SimpleNamespace) -> None:
    a, b, _ = _operands(0, 0, SHAPES[0])
    _, _, c = _operands(0, 0, SHAPES[0], gpu1=True)
    with pytest.raises(WarpyError, match="^a is on GPU 0 but out is on GPU 1: give every operand on one GPU$"):
        mm.gemm(a, b, out=c, stream=5)
    assert not gpu.launches and not gpu.loads


def test_a_gpu_warpy_does_not_run_on_or_that_is_not_there(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, fake_driver(devices=2, cc1=(8, 0), pointer_device=lambda p: 1))
    be = mm.Launches()
    be._plans[SHAPES[0] + ("sm_90a",)] = fake_plan(*SHAPES[0])
    monkeypatch.setattr(mm, "_launches", be)
    with pytest.raises(NoGPU, match=r"^warpy.gemm runs on sm_90 \(Hopper\) or sm_100 \(Blackwell\) GPUs; "
                                    r"GPU 1 \(Fake H200\) is sm_80$"):
        mm.gemm(*_operands(0, 0, SHAPES[0]), stream=5)
    with pytest.raises(WarpyError, match=r"^there is no GPU 5: the CUDA driver sees 2 \(0\.\.1\)$"):
        drv.device(5)


# ---------------------------------------------------------------------------------------------
# Fork


def test_a_child_forked_after_warpy_used_the_gpu_is_refused_in_one_line(gpu: SimpleNamespace) -> None:
    mm.gemm(*_operands(0, 0, SHAPES[0]), stream=5)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one line back through the pipe, then out without pytest's teardown
        try:
            try:
                mm.gemm(*_operands(0, 0, SHAPES[0]), stream=5)
                msg = "no error"
            except WarpyError as e:
                msg = f"{type(e).__name__}: {e}"
            os.write(w, msg.encode())
        finally:
            os._exit(0)
    os.close(w)
    deadline = time.monotonic() + 30
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        assert time.monotonic() < deadline, "the forked child hung"
        time.sleep(0.01)
    with os.fdopen(r) as f:
        msg = f.read()
    assert "\n" not in msg
    assert msg.startswith(f"WarpyError: warpy used the GPU in process {os.getpid()}, which then forked this one (")
    assert msg.endswith("CUDA cannot be used in a forked child; start worker processes with the 'spawn' method "
                        "(multiprocessing.set_start_method('spawn'))")
    mm.gemm(*_operands(0, 0, SHAPES[0]), stream=5)  # the parent carries on
    assert len(gpu.launches) == 2


def test_a_child_forked_before_any_gpu_use_is_not_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    state = install(monkeypatch, fake_driver())
    drv._after_fork_in_child()  # what os.fork runs in a child, here with no GPU opened yet
    assert "forked" not in state
    drv.device()


# ---------------------------------------------------------------------------------------------
# out overlapping an input


class FakeBackend:
    def __init__(self) -> None:
        self.launches: list[tuple[mm.GemmCall, Matrix, Any]] = []

    def launch(self, call: mm.GemmCall, out: Matrix, stream: Any) -> None:
        self.launches.append((call, out, stream))

    def run_host(self, call: mm.GemmCall) -> np.ndarray:
        a = np.asarray(call.a.obj, dtype=np.float64)
        b = np.asarray(call.b.obj, dtype=np.float64)
        return (a @ b.T).astype(np.float32)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeBackend:
    be = FakeBackend()
    monkeypatch.setattr(mm, "_launches", be)
    return be


BASE = 0x7F00_0000_0000


@pytest.mark.parametrize("K,a_at,out_at,odt,message", [
    # out (64 x 64 fp16) is A's 8 KiB
    (64, 0, 0, "fp16", r"^out is a's memory \(the same 8192 bytes at 0x7f0000000000\): the result cannot be written "
                       r"over an input it reads; give out memory of its own$"),
    # out (64 x 32 fp32, 8 KiB) 1 KiB into A (64 x 128 fp16, 16 KiB)
    (128, 0, 1024, "fp32", r"^out lies inside a \(out: bytes 0x7f0000000400-0x7f0000002400, a: "
                           r"0x7f0000000000-0x7f0000004000\): the result cannot be written over an input it reads; "
                           r"give out memory of its own$"),
    # out's 8 KiB from BASE, A's 8 KiB from BASE + 4 KiB
    (64, 4096, 0, "fp32", r"^out partly overlaps a \(out: bytes 0x7f0000000000-0x7f0000002000, a: "
                          r"0x7f0000001000-0x7f0000003000\): .*$"),
])
def test_out_overlapping_a_is_refused(fake: FakeBackend, K: int, a_at: int, out_at: int, odt: str, message: str) -> None:
    N = 64 if odt == "fp16" else 32
    a = CAI((64, K), "fp16", BASE + a_at)
    b = CAI((N, K), "fp16", BASE + 0x10_0000)
    with pytest.raises(WarpyError, match=message):
        mm.gemm(a, b, out=CAI((64, N), odt, BASE + out_at))
    with pytest.raises(WarpyError, match=message):
        mm.check_call(a, b, out=CAI((64, N), odt, BASE + out_at))  # the other public entry taking out
    assert not fake.launches


def test_an_input_inside_out_and_b_are_refused_too(fake: FakeBackend) -> None:
    a = CAI((64, 64), "fp16", BASE + 0x1000)  # 8 KiB inside out's 64 KiB
    b = CAI((256, 64), "fp16", BASE + 0x10_0000)
    with pytest.raises(WarpyError, match=r"^a lies inside out \(out: bytes 0x7f0000000000-0x7f0000010000, "):
        mm.gemm(a, b, out=CAI((64, 256), "fp32", BASE))
    with pytest.raises(WarpyError, match=r"^out partly overlaps b "):
        mm.gemm(CAI((64, 64), "fp16", BASE + 0x20_0000), b, out=CAI((64, 256), "fp32", BASE + 0x10_0000 + 0x7000))


def test_disjoint_slices_of_one_storage_are_accepted(fake: FakeBackend) -> None:
    # one 256 x 64 fp16 storage: A is rows 0..63, B rows 64..127, C (64 x 64 fp16) rows 128..191, touching
    a = CAI((64, 64), "fp16", BASE)
    b = CAI((64, 64), "fp16", BASE + 64 * 64 * 2)
    out = CAI((64, 64), "fp16", BASE + 2 * 64 * 64 * 2)
    assert mm.gemm(a, b, out=out) is out
    assert mm.gemm(a, a, out=out) is out  # a and b may be one tensor: both are only read
    assert len(fake.launches) == 2


def test_numpy_out_overlapping_an_input_is_refused_and_disjoint_views_work(fake: FakeBackend) -> None:
    store = np.zeros((64, 16), np.float16)
    rng = np.random.default_rng(1)
    store[:] = rng.integers(-3, 4, store.shape)
    with pytest.raises(WarpyError, match=r"^out lies inside a "):
        mm.gemm(store[:32], store[32:40], out=store[:32, :8])
    # a strided out (the odd columns of a wider array) beside inputs of its own: taken, filled
    wide = np.zeros((8, 16), np.float32)
    a = np.ascontiguousarray(store[:8, :])
    out = wide[:, 1::2]
    assert mm.gemm(a, store[8:16], out=out) is out
    assert np.array_equal(out, a.astype(np.float64) @ store[8:16].astype(np.float64).T)
    assert not wide[:, 0::2].any()
    # column slices of one storage (rows contiguous): decided exactly, no byte shared
    left, right = wide[:, :8], wide[:, 8:]
    assert overlap(_m(left.ctypes.data, (8, 8), (16, 1), "fp32"), _m(right.ctypes.data, (8, 8), (16, 1), "fp32")) is None
    # interleaved elements (no contiguous axis): decided by spans, so "may share": refused, the safe side
    even, odd = wide[:, 0::2], wide[:, 1::2]
    assert overlap(_m(even.ctypes.data, (8, 8), (16, 2), "fp32"), _m(odd.ctypes.data, (8, 8), (16, 2), "fp32")) == "partial"


def _m(ptr: int, shape: tuple[int, int], strides: tuple[int, int], dtype: str = "fp16") -> Matrix:
    return Matrix("x", ptr, shape, strides, dtype, "device", "other", None)


def _bytes(m: Matrix) -> set[int]:
    e = m.itemsize
    return {m.ptr + (i * m.strides[0] + j * m.strides[1]) * e + k
            for i in range(m.shape[0]) for j in range(m.shape[1]) for k in range(e)}


operand = st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(-6, 6), st.integers(-6, 6), st.integers(0, 40))


@settings(max_examples=1500, deadline=None)
@given(operand, operand, st.sampled_from(["fp16", "fp32"]), st.sampled_from(["fp16", "fp32"]))
def test_overlap_against_brute_force(x: tuple[int, ...], y: tuple[int, ...], dx: str, dy: str) -> None:
    base = 0x10000  # elements may run below their pointer (negative strides): room for that
    mx = _m(base + x[4] * 2, (x[0], x[1]), (x[2], x[3]), dx)
    my = _m(base + y[4] * 2, (y[0], y[1]), (y[2], y[3]), dy)
    bx, by = _bytes(mx), _bytes(my)
    lo, hi = byte_span(mx)
    assert (lo, hi) == ((min(bx), max(bx) + 1) if bx else (mx.ptr, mx.ptr))
    how = overlap(mx, my)
    if how is None:
        assert not bx & by  # never a shared byte let through
    elif segments(mx) is not None and segments(my) is not None:
        assert bx & by  # exact where both are families of ranges
    if how is not None:
        (xl, xh), (yl, yh) = byte_span(mx), byte_span(my)
        assert how == ("equal" if (xl, xh) == (yl, yh) else "inside" if yl <= xl and xh <= yh
                       else "contains" if xl <= yl and yh <= xh else "partial")


@settings(max_examples=400, deadline=None)
@given(st.tuples(st.integers(0, 60), st.integers(0, 5), st.integers(0, 12), st.integers(1, 6)),
       st.tuples(st.integers(0, 60), st.integers(0, 5), st.integers(0, 12), st.integers(1, 6)))
def test_families_meet_against_brute_force(f: tuple[int, int, int, int], g: tuple[int, int, int, int]) -> None:
    def cover(s: tuple[int, int, int, int]) -> set[int]:
        a, n, step, length = s
        return {a + k * step + i for k in range(n) for i in range(length)}

    assert families_meet(f, g) == bool(cover(f) & cover(g))


def test_row_major_operands_gemm_takes_are_decided_exactly() -> None:
    """Any two dense row-major operands (what the device path accepts) are one range each: the
    quick interval test warpy.gemm makes first is the exact answer."""
    for rows, cols, off in [(3, 8, 48), (3, 8, 47), (1, 8, 8), (4, 1, 4), (4, 1, 3)]:
        x, y = _m(0x1000, (rows, cols), (cols, 1)), _m(0x1000 + off * 2, (rows, cols), (cols, 1))
        assert (overlap(x, y) is None) == (not _bytes(x) & _bytes(y))
        assert segments(x) == (0x1000, 1, 0, rows * cols * 2)


# ---------------------------------------------------------------------------------------------
# Empty problems


@pytest.mark.parametrize("M,N,K", [(0, 5, 16), (4, 0, 16), (4, 5, 0), (0, 0, 0), (0, 5, 3)])
@pytest.mark.parametrize("out_dtype", ["fp32", "fp16"])
def test_numpy_empty_problems_are_numpys(fake: FakeBackend, M: int, N: int, K: int, out_dtype: str) -> None:
    a = np.ones((M, K), np.float16)
    b = np.ones((N, K), np.float16)
    want = (a.astype(np.float32) @ b.astype(np.float32).T).astype(out_dtype.replace("fp", "float"))
    c = mm.gemm(a, b, out_dtype=out_dtype)
    assert c.shape == want.shape == (M, N) and c.dtype == want.dtype and np.array_equal(c, want)
    out = np.full((M, N), 7, np.float32)
    assert mm.gemm(a, b, out=out) is out and np.array_equal(out, np.zeros((M, N)))


def test_device_empty_problems_run_nothing_or_zero_c(fake: FakeBackend) -> None:
    # M = 0, N = 0: nothing to run (K need not meet the kernel's limits either)
    for M, N, K in [(0, 32, 64), (64, 0, 64), (0, 32, 3)]:
        out = CAI((M, N), "fp32", 0)
        assert mm.gemm(CAI((M, K), "fp16", 0), CAI((N, K), "fp16", BASE), out=out, stream=5) is out
    assert fake.launches == []
    # K = 0: C = 0, on the stream (the backend zeroes it; below, with the driver)
    out = CAI((64, 32), "fp32", BASE + 0x10_0000)
    mm.gemm(CAI((64, 0), "fp16", 0), CAI((32, 0), "fp16", 0), out=out, stream=5)
    ((call, o, stream),) = fake.launches
    assert (call.M, call.N, call.K, stream, o.ptr) == (64, 32, 0, 5, BASE + 0x10_0000)
    # what is still refused: a K that does not match, a type that is not taken
    with pytest.raises(WarpyError, match="^a is 0x16 and b is 32x8"):
        mm.gemm(CAI((0, 16), "fp16", 0), CAI((32, 8), "fp16", BASE))
    with pytest.raises(WarpyError, match="^a is fp32; inputs must be bf16 or fp16$"):
        mm.gemm(CAI((0, 16), "fp32", 0), CAI((32, 16), "fp32", BASE))


def test_k_zero_is_a_memset_of_c_on_the_stream_and_no_kernel(gpu: SimpleNamespace) -> None:
    out = CAI((64, 32), "fp32", BASE + 0x10_0000)
    mm.gemm(CAI((64, 0), "bf16", 0), CAI((32, 0), "bf16", 0), out=out, stream=0x700)
    assert gpu.memsets == [(BASE + 0x10_0000, 64 * 32 * 4, 0x700)]
    assert gpu.launches == [] and gpu.loads == []
    mm.gemm(CAI((0, 64), "bf16", 0), CAI((32, 64), "bf16", BASE), out=CAI((0, 32), "fp32", 0), stream=0x700)
    assert len(gpu.memsets) == 1 and gpu.launches == []


def test_torch_empty_outputs_are_allocated_and_not_launched(fake: FakeBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[Any, Any]] = []
    _fake_torch(monkeypatch)
    torch = sys.modules["torch"]
    torch.float32, torch.bfloat16, torch.float16 = "torch.float32", "torch.bfloat16", "torch.float16"  # type: ignore[attr-defined]

    def empty(shape: tuple[int, int], dtype: Any, device: Any) -> TorchLike:
        made.append((shape, dtype))
        return TorchLike(shape, {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}[dtype],
                         BASE + 0x40_0000, device.index)

    torch.empty = empty  # type: ignore[attr-defined]
    monkeypatch.setattr(mm, "_TORCH_OUT", {})
    c = mm.gemm(TorchLike((0, 64), "bf16", BASE), TorchLike((32, 64), "bf16", BASE + 0x10_0000))
    assert c.shape == (0, 32) and made == [((0, 32), "torch.bfloat16")] and fake.launches == []
    c = mm.gemm(TorchLike((16, 0), "bf16", BASE), TorchLike((32, 0), "bf16", BASE + 0x10_0000), out_dtype="fp32")
    assert c.shape == (16, 32) and [x[0].K for x in fake.launches] == [0]  # zeroed by the backend


def test_limits_are_checked_once_a_problem_and_still_refuse(fake: FakeBackend) -> None:
    with pytest.raises(WarpyError, match="^K=12 rows of fp16 are 24 bytes; TMA needs a multiple of 16"):
        mm.gemm(CAI((64, 12), "fp16", BASE), CAI((32, 12), "fp16", BASE + 0x10_0000),
                out=CAI((64, 32), "fp32", BASE + 0x20_0000))
    with pytest.raises(WarpyError, match="^K=12 rows"):  # refused again: a refusal is not remembered
        mm.gemm(CAI((64, 12), "fp16", BASE), CAI((32, 12), "fp16", BASE + 0x10_0000),
                out=CAI((64, 32), "fp32", BASE + 0x20_0000))
    assert (64, 32, 12, "fp16", "fp32") not in mm._within_limits


def test_calls_after_a_hang_are_refused_before_any_launch(gpu: SimpleNamespace) -> None:
    mm.gemm(*_operands(0, 0, SHAPES[0]), stream=5)
    drv.mark_unusable("hang: kernel k did not finish within 1 s")
    with pytest.raises(WarpyError, match=r"^the CUDA context is unusable after: hang: kernel k"):
        mm.gemm(*_operands(0, 0, SHAPES[0]), stream=5)
    assert len(gpu.launches) == 1
    assert Counter(x.stream for x in gpu.launches) == {5: 1}


def test_a_repeated_call_on_torch_tensors_is_two_driver_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host cost guard: once a shape ran on a stream, a call asks the driver for the thread's
    context and launches, nothing else (the GPU is known from the tensors, the stream from torch)."""
    names: list[str] = []
    install(monkeypatch, fake_driver(lambda name, args, result: names.append(name)))
    monkeypatch.setattr(drv, "_tls", threading.local())
    monkeypatch.setattr(bind, "_TMAP_CACHE", type(bind._TMAP_CACHE)())
    monkeypatch.setattr(tm, "encode_tensor_map", lambda box, address: tm.TensorMap(bytes(128), box, int(address)))
    be = mm.Launches()
    be._plans[SHAPES[1] + ("sm_90a",)] = fake_plan(*SHAPES[1])  # a program with scratch memory
    monkeypatch.setattr(mm, "_launches", be)
    _fake_torch(monkeypatch)
    M, N, K, dt, odt = SHAPES[1]
    a, b, c = (TorchLike((M, K), dt, BASE), TorchLike((N, K), dt, BASE + 0x100_0000),
               TorchLike((M, N), odt, BASE + 0x200_0000))
    mm.gemm(a, b, out=c)
    names.clear()
    for _ in range(3):
        mm.gemm(a, b, out=c)
    assert names == ["cuCtxGetCurrent", "cuLaunchKernelEx"] * 3
