"""Scratch parameters on the host, without a GPU: the checker runs a scratch program clean (and
catches too little declared scratch); the lifter and ptxas take it; binding allocates the header's
sizes zeroed in the launch stream's order, one set per (loaded kernel, stream); every launch path
(warpy.gemm on device and numpy operands, `warpy gemm`'s check, its timing) binds it, and binds
a map declared `over=c` (`c_add`) to C, against a fake CUDA driver."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import warpy.bench as bench
import warpy.kernels.gemm_bench as gemm_bench
import warpy.matmul as mm
import warpy.plan as plan
from warpy.kernels import gemm as gemm_family
import warpy.runtime.bind as bind
import warpy.runtime.tensormap as tm
from warpy.errors import WarpyError
from warpy.isa.text import parse
from warpy.runtime.bind import DeviceSpan, FastLaunch, ScratchPool, alloc_scratch, bind_params
from warpy.runtime.memory import DeviceBuffer
from warpy.runtime.tensormap import TensorMap
from fake_cuda_driver import WARPY_STREAM, OnCall, Stream, fake_driver, install, launch_args
from scratch_counter import WORDS, scratch_counter

REPO = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------------------------------------
# The checker and the lifter


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_checker_runs_a_scratch_program_clean(arch: str) -> None:
    from warpy.check.report import check_kernel

    p = scratch_counter(arch)
    rep = check_kernel(p.kernel(), p.coloured(), values=True, hb=True)
    assert rep.ok, rep.text()


def test_checker_starts_scratch_at_zero() -> None:
    """The checker's model of a launch is the first on its stream: scratch reads zero."""
    from warpy.check.machine import Machine

    m = Machine(scratch_counter().kernel(), values=True)
    m.run()
    assert not m.problems.count("memory")
    assert (m.gmem["out"][: 4 * WORDS].view(np.uint32) == 0).all()
    assert (m.gmem["epochs"][: 4 * WORDS].view(np.uint32) == 1).all()


@pytest.mark.parametrize("values", [False, True])
def test_a_second_launch_starts_from_the_scratch_the_first_left(values: bool) -> None:
    """With values and without, the words the first launch left in its u32 scratch (each thread's
    epoch, now 1) are what the second launch finds: it copies 1 to `out` and leaves 2."""
    from warpy.check.machine import Machine

    first = Machine(scratch_counter().kernel(), values=values)
    first.run()
    left = first.scratch_words()
    base = first.global_memory.base["epochs"]
    assert left == {base + 4 * k: 1 for k in range(WORDS)}
    second = Machine(scratch_counter().kernel(), values=values, scratch=left)
    second.run()
    assert not second.problems.count("memory")
    assert second.scratch_words() == {base + 4 * k: 2 for k in range(WORDS)}
    if values:
        assert (second.gmem["out"][: 4 * WORDS].view(np.uint32) == 1).all()


def test_checker_catches_too_little_scratch() -> None:
    from warpy.check.report import check_kernel

    p = scratch_counter("sm_90a", scratch_words=WORDS // 2)
    rep = check_kernel(p.kernel(), p.coloured())
    assert not rep.ok and "outside every global buffer the kernel declares" in rep.text()


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_lifted_and_assembled(arch: str) -> None:
    from warpy.lift.lifter import lift
    from warpy.lift.ptxas import assemble

    ptx = lift(scratch_counter(arch).kernel(), arch)
    assert ".param .u64 epochs" in ptx
    assert assemble(ptx, arch).kernels == ("scratch_counter",)


# ---------------------------------------------------------------------------------------------
# Allocation and binding (a fake allocator)

HEAD = ".kernel g\n.sm sm_90a\n.threads 32\n.dynsmem 0\n.grid 1 1 1\n.cluster 1 1 1\n.mbarriers 0\n"
SCRATCH = parse(
    HEAD + ".param out u64\n.param flags u64 scratch\n.param M u32\n.param work u64 scratch\n"
    ".buffer out_words global base=0x0 size=0x40 elem=u32 source=out layout=16:4\n"
    ".buffer flag_words global base=0x0 size=0x44 elem=u32 source=flags layout=17:4\n"
    ".buffer partials global base=0x0 size=0x100 elem=fp32 source=work layout=64:4\n"
    ".buffer more_partials global base=0x0 size=0x200 elem=fp32 source=work layout=128:4\n"
).header
PLAIN = parse(HEAD + ".param out u64\n.param M u32\n").header


class FakeZeros:
    """Records each (nbytes, stream) asked for; hands out DeviceSpans at distinct addresses."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, Any]] = []

    def __call__(self, nbytes: int, stream: Any) -> DeviceSpan:
        self.calls.append((nbytes, stream))
        return DeviceSpan(0x10_0000 * len(self.calls), nbytes)


def test_alloc_scratch_asks_for_the_header_sizes() -> None:
    z = FakeZeros()
    got = alloc_scratch(SCRATCH, 7, zeros=z)
    assert z.calls == [(0x44, 7), (0x200, 7)]
    assert {k: v.nbytes for k, v in got.items()} == {"flags": 0x44, "work": 0x200}
    assert alloc_scratch(PLAIN, zeros=z) == {} and len(z.calls) == 2


def test_pool_keeps_one_set_per_stream() -> None:
    z = FakeZeros()
    pool = ScratchPool(SCRATCH, z)
    s5 = pool.get(5)
    assert pool.get(5) is s5 and len(z.calls) == 2  # the same memory every later launch
    s6 = pool.get(6)
    none = pool.get(None)  # warpy's own stream
    assert len(z.calls) == 6 and [c[1] for c in z.calls] == [5, 5, 6, 6, None, None]
    assert len({m.ptr for s in (s5, s6, none) for m in s.values()}) == 6
    empty = ScratchPool(PLAIN, z)
    assert not empty and empty.get(5) == {} and len(z.calls) == 6  # no scratch: no allocation


@given(st.lists(st.sampled_from([None, 0, 5, 6, 7, 2**40]), min_size=1, max_size=20))
def test_pool_allocates_once_per_distinct_stream(streams: list[int | None]) -> None:
    z = FakeZeros()
    pool = ScratchPool(SCRATCH, z)
    sets = [pool.get(s) for s in streams]
    distinct = list(dict.fromkeys(streams))
    assert [c[1] for c in z.calls] == [s for s in distinct for _ in range(2)]
    for s, got in zip(streams, sets):
        assert got is pool.get(s)


def _encode(box: Any, address: int) -> TensorMap:
    return TensorMap(bytes(128), box, address)


def test_bind_takes_scratch_from_scratch_only() -> None:
    sc = {"flags": DeviceSpan(0x5000, 0x44), "work": 0x6000}
    ps = bind_params(SCRATCH, {"out": 0x1000}, {"M": 3}, scratch=sc, encode=_encode)
    assert [(p.kind, p.value) for p in ps] == [("u64", 0x1000), ("u64", 0x5000), ("u32", 3), ("u64", 0x6000)]
    with pytest.raises(WarpyError, match=r"^kernel g: nothing given for scratch memory 'flags' \(68 bytes, "
                                         r"allocated zero-filled once per kernel and stream\): pass scratch="):
        bind_params(SCRATCH, {"out": 0x1000}, {"M": 3}, encode=_encode)
    with pytest.raises(WarpyError, match=r"^kernel g: 'flags' is scratch memory the host owns: give it with scratch="):
        bind_params(SCRATCH, {"out": 0x1000, "flags": 0x5000}, {"M": 3}, scratch=sc, encode=_encode)
    with pytest.raises(WarpyError, match=r"^kernel g: scratch memory 'flags' needs 68 bytes, but the memory given holds 64$"):
        bind_params(SCRATCH, {"out": 0x1000}, {"M": 3}, scratch={**sc, "flags": DeviceSpan(0x5000, 64)}, encode=_encode)
    with pytest.raises(WarpyError, match=r"^kernel g has no scratch parameter 'x' \(scratch parameters: flags, work\)$"):
        bind_params(SCRATCH, {"out": 0x1000}, {"M": 3}, scratch={**sc, "x": 1}, strict=False, encode=_encode)
    with pytest.raises(WarpyError, match=r"^kernel g has no scratch parameter 'flags' \(scratch parameters: none\)$"):
        bind_params(PLAIN, {"out": 0x1000}, {"M": 3}, scratch=sc, encode=_encode)


def test_one_place_binds_gemm_parameters() -> None:
    """warpy.gemm and `warpy gemm` / `warpy bench gemm` bind through the GEMM family's `bind` only
    (where `c_add` and the scratch memory are handled), never with bind_params of their own."""
    for rel in ("warpy/matmul.py", "warpy/bench.py", "kernels/gemm_bench.py", "kernels/gemm.py"):
        tree = ast.parse((REPO / rel).read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef) or (rel == "kernels/gemm.py" and fn.name == "bind"):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Call):
                    f = node.func
                    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                    assert name != "bind_params", f"{rel}: {fn.name} calls bind_params; use warpy.kernels.gemm.bind"


def test_bind_gemm_binds_a_map_declared_over_c_to_c() -> None:
    h = parse(
        HEAD + ".tmap a dtype=fp16 dims=64,256 strides=128 box=64,128 swizzle=128\n"
        ".tmap c_add over=c dtype=fp32 dims=192,256 strides=768 box=32,32\n"
        ".param c u64\n.param flags u64 scratch\n.param K u32\n"
        ".buffer flag_words global base=0x0 size=0x40 elem=u32 source=flags layout=16:4\n"
    ).header
    c = DeviceSpan(0x3000, 256 * 192 * 4)
    ps = gemm_family.bind(h, DeviceSpan(0x1000, 256 * 128), 0x2000, c, 256, 192, 64,
                      scratch={"flags": DeviceSpan(0x9000, 64)}, encode=_encode)
    assert ps[0].address == 0x1000 and ps[1].address == 0x3000 and ps[1].box == h.tmap("c_add")
    assert [(p.kind, p.value) for p in ps[2:]] == [("u64", 0x3000), ("u64", 0x9000), ("u32", 64)]
    with pytest.raises(WarpyError, match="nothing given for scratch memory 'flags'"):
        gemm_family.bind(h, 0x1000, 0x2000, c, 256, 192, 64, encode=_encode)


# ---------------------------------------------------------------------------------------------
# The launch paths against a fake driver


RECORDED = {"cuCtxSynchronize": "ctxsync", "cuMemFree": "free", "cuMemsetD8Async": "memset",
            "cuMemsetD8": "memset_sync"}


def recorder(events: list[tuple[Any, ...]], header: Any) -> OnCall:
    """Records each launch (stream, the arguments by `header`'s names), allocation (address, size),
    free, memset (a stream as its handle) and context synchronisation into `events`, in order."""

    def on_call(name: str, args: tuple[Any, ...], result: Any) -> None:
        if name == "cuLaunchKernelEx":
            cfg, _fn, address, _extra = args
            events.append(("launch", int(cfg.hStream), launch_args(header, address)))
        elif name == "cuMemAlloc":
            events.append(("alloc", result[1], args[0]))
        elif name in RECORDED:
            events.append((RECORDED[name],) + tuple(int(x) if isinstance(x, Stream) else x for x in args))

    return on_call


M, N, K = 256, 192, 64
# a split-K-like GEMM_TEXT: A and B by TMA, C zeroed through a pointer and added to through `c_add`,
# flags in scratch memory
GEMM_TEXT = (
    ".kernel gemm_fake\n.sm sm_90a\n.threads 128\n.dynsmem 1024\n.grid 4 1 1\n.cluster 1 1 1\n.mbarriers 0\n"
    ".tmap a dtype=fp16 dims=64,256 strides=128 box=64,128 swizzle=128\n"
    ".tmap b dtype=fp16 dims=64,192 strides=128 box=64,64 swizzle=128\n"
    ".tmap c_add over=c dtype=fp32 dims=192,256 strides=768 box=32,32\n"
    ".param c u64\n.param flags u64 scratch\n.param K u32\n"
    ".buffer c_out global base=0x0 size=0x30000 elem=fp32 source=c layout=(256,192):(768,4)\n"
    ".buffer flag_words global base=0x0 size=0x50 elem=u32 source=flags layout=20:4\n"
)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[SimpleNamespace]:
    events: list[tuple[Any, ...]] = []
    header = parse(GEMM_TEXT).header
    install(monkeypatch, fake_driver(recorder(events, header)))
    monkeypatch.setattr(bind, "_TMAP_CACHE", type(bind._TMAP_CACHE)())
    monkeypatch.setattr(tm, "encode_tensor_map",
                        lambda box, address: TensorMap(int(address).to_bytes(8, "little") + bytes(120), box, int(address)))
    problem = SimpleNamespace(M=M, N=N, K=K, dtype="fp16", out_dtype="fp32", arch="sm_90a")
    fake_plan = plan.Plan(gemm_family.FAMILY, problem, "fake split-K", header, GEMM_TEXT, "", b"not a cubin", False)
    be = mm.Launches()
    be._archs[0] = "sm_90a"
    be._plans[(M, N, K, "fp16", "fp32", "sm_90a")] = fake_plan
    monkeypatch.setattr(mm, "_launches", be)
    monkeypatch.setattr(bench, "_kernels", {})
    yield SimpleNamespace(events=events, plan=fake_plan, backend=be)
    for ld in be._loaded.values():  # while the fake driver is still the driver
        ld.launcher.scratch.free()


def _of(events: list[tuple[Any, ...]], kind: str) -> list[tuple[Any, ...]]:
    return [e for e in events if e[0] == kind]


class CAI:
    def __init__(self, shape: tuple[int, int], typestr: str, ptr: int) -> None:
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False), "strides": None,
                                         "version": 3}


def _flags_zeroed_before(events: list[tuple[Any, ...]], launch_index: int) -> tuple[int, int]:
    """(flags address, stream) of the launch, after checking an alloc + stream-ordered memset of it
    came first."""
    launches = [i for i, e in enumerate(events) if e[0] == "launch"]
    i = launches[launch_index]
    _, stream, args = events[i]
    flags = args["flags"]
    before = events[:i]
    assert ("alloc", flags, 0x50) in before
    assert ("memset", flags, 0, 0x50, stream) in before, f"flags at 0x{flags:x} not zeroed on stream {stream}"
    return flags, stream


def test_gemm_device_path_binds_scratch_per_stream_and_c_add(fake: SimpleNamespace) -> None:
    a = CAI((M, K), "<f2", 0x7F00_0000_0000)
    b = CAI((N, K), "<f2", 0x7F00_0010_0000)
    c = CAI((M, N), "<f4", 0x7F00_0020_0000)
    mm.gemm(a, b, out=c, stream=5)
    (first,) = _of(fake.events, "launch")
    args = first[2]
    assert (args["a"], args["b"], args["c"], args["c_add"], args["K"]) == \
        (0x7F00_0000_0000, 0x7F00_0010_0000, 0x7F00_0020_0000, 0x7F00_0020_0000, K)
    f5, s = _flags_zeroed_before(fake.events, 0)
    assert s == 5

    # again on stream 5, and with another C: the same scratch, no new allocation or zeroing
    mm.gemm(a, b, out=c, stream=5)
    c2 = CAI((M, N), "<f4", 0x7F00_0030_0000)
    mm.gemm(a, b, out=c2, stream=5)
    launches = _of(fake.events, "launch")
    assert [e[2]["flags"] for e in launches] == [f5] * 3
    assert launches[2][2]["c"] == launches[2][2]["c_add"] == 0x7F00_0030_0000
    assert len(_of(fake.events, "alloc")) == 1 and len(_of(fake.events, "memset")) == 1

    # another stream: its own scratch, zeroed on that stream; then back on 5, 5's again
    mm.gemm(a, b, out=c, stream=6)
    f6, s = _flags_zeroed_before(fake.events, 3)
    assert s == 6 and f6 != f5
    mm.gemm(a, b, out=c, stream=5)
    assert _of(fake.events, "launch")[-1][2]["flags"] == f5
    assert not _of(fake.events, "free")


def test_gemm_numpy_path_uses_warpy_streams_scratch(fake: SimpleNamespace) -> None:
    a = np.zeros((M, K), np.float16)
    b = np.zeros((N, K), np.float16)
    mm.gemm(a, b, out_dtype="fp32")
    flags, stream = _flags_zeroed_before(fake.events, 0)
    assert stream == WARPY_STREAM
    args = _of(fake.events, "launch")[0][2]
    assert args["c"] == args["c_add"]
    # the device path with no stream known runs on warpy's stream too: the same scratch
    mm.gemm(CAI((M, K), "<f2", 0x7F00_0000_0000), CAI((N, K), "<f2", 0x7F00_0010_0000),
            out=CAI((M, N), "<f4", 0x7F00_0020_0000))
    assert _of(fake.events, "launch")[-1][2]["flags"] == flags
    assert len(_of(fake.events, "memset")) == 1
    assert flags not in {e[1] for e in _of(fake.events, "free")}  # kept for the next call


def test_warpy_gemm_check_binds_and_frees_scratch(fake: SimpleNamespace) -> None:
    n_bad, _msg = gemm_bench.run_check(fake.plan, M, N, K, "fp16", "fp32")
    assert n_bad > 0  # the fake driver computes nothing; what matters is the binding
    flags, stream = _flags_zeroed_before(fake.events, 0)
    args = _of(fake.events, "launch")[0][2]
    assert stream == WARPY_STREAM and args["c"] == args["c_add"]
    assert ("free", flags) in fake.events


def test_warpy_gemm_timing_binds_one_scratch_for_the_stream(fake: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    def times(enqueue: Any, stream: Any, iters: int, warmup: int = 3, timeout: float = 120.0) -> list[float]:
        for i in range(8):
            enqueue(i)
        return [1.0] * iters

    monkeypatch.setattr(bench, "gpu_times_us", times)  # warpy.bench.time_sets times the plan
    monkeypatch.setattr(gemm_bench, "l2_bytes", lambda: 50 << 20)
    assert gemm_bench.time_plan(fake.plan, iters=8) == 1.0
    launches = _of(fake.events, "launch")
    flags, stream = _flags_zeroed_before(fake.events, 0)
    assert len(launches) == 8 and {e[2]["flags"] for e in launches} == {flags} and stream == WARPY_STREAM
    assert len({e[2]["c"] for e in launches}) > 1  # input sets rotate; the scratch does not
    assert all(e[2]["c"] == e[2]["c_add"] for e in launches)
    assert ("free", flags) in fake.events


def test_fast_launch_packs_per_stream_only_with_scratch(fake: SimpleNamespace) -> None:
    from warpy import runtime as rt

    k = rt.load(b"fake").kernel("gemm_fake")
    made: list[Any] = []

    def make(scratch: Any) -> list[Any]:
        made.append(dict(scratch))
        return gemm_family.bind(fake.plan.header, 0x1000, 0x2000, 0x3000, M, N, K, scratch=scratch)

    fast = FastLaunch(k, fake.plan.header)
    for s in (5, 5, 6, 6, 5):
        fast("key", make, s)
    assert [next(iter(m.values())).ptr for m in made] == [fast.scratch.get(5)["flags"].ptr, fast.scratch.get(6)["flags"].ptr]
    fast.scratch.free()
    assert len(_of(fake.events, "free")) == 2

    assert len(fast._packed) == 2  # one block a stream: their scratch pointers differ

    plain = parse(GEMM_TEXT.replace(" scratch\n", "\n")).header
    seen: list[Any] = []

    def make_plain(scratch: Any) -> list[Any]:
        seen.append(scratch)
        return bind_params(plain, {"a": 0x1000, "b": 0x2000, "c": 0x3000, "c_add": 0x3000, "flags": 0x4000},
                           {"K": K}, scratch=scratch, encode=_encode)

    fast = FastLaunch(k, plain)
    for s in (5, 6, 5, 6):
        fast("key", make_plain, s)
    assert seen == [{}, {}] and len(fast._packed) == 1  # bound at each stream's first launch; one block
    assert len(_of(fake.events, "alloc")) == 2  # the first launcher's two sets only


def test_zeros_is_stream_ordered(fake: SimpleNamespace) -> None:
    from warpy.runtime.memory import zeros

    buf = zeros(100, 5)
    assert isinstance(buf, DeviceBuffer) and buf.nbytes == 100
    assert fake.events[-1] == ("memset", buf.ptr, 0, 100, 5)
    buf2 = zeros(8)
    assert fake.events[-1] == ("memset", buf2.ptr, 0, 8, WARPY_STREAM)
    assert not _of(fake.events, "ctxsync")  # no host wait
    buf.free()
    buf2.free()
