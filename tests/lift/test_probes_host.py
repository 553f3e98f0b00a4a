"""The host side of the GPU probes, on the CPU: the numpy expectations agree with warpy.layout (the
swizzle, the wgmma accumulator fragment, the tile layouts of the split boxes), and the GPU runner's
plumbing (parameters in the kernel's order, tensor maps over big-enough tensors, launch shape,
downloads) works against a fake runtime that plays the kernel's part by writing the expectation."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.kernels import probes
from warpy.kernels.probes import PROBES, swizzle_bytes, wgmma_fragment
from warpy.layout import Swizzle
from warpy.layout.atoms import wgmma_acc_layout

from gpu_scripts import gpu_script

@settings(deadline=None, max_examples=30)
@given(bits=st.integers(0, 3), n=st.sampled_from([1024, 2048, 4096]), seed=st.integers(0, 2**32 - 1))
def test_swizzle_bytes_is_warpys_swizzle(bits: int, n: int, seed: int) -> None:
    raw = np.random.default_rng(seed).integers(0, 256, n).astype(np.uint8)
    out = swizzle_bytes(raw, bits)
    sw = Swizzle(bits, 4, 3)
    for o in np.random.default_rng(seed).integers(0, n, 64):
        assert out[int(sw(int(o)))] == raw[o]


@pytest.mark.parametrize("n", [8, 64, 256])
def test_wgmma_fragment_matches_the_layout_atom(n: int) -> None:
    c = np.arange(64 * n, dtype=np.float32).reshape(64, n)
    frag = wgmma_fragment(c)
    lay = wgmma_acc_layout(n)  # (thread, value) -> row + 64 * col
    for t in range(0, 128, 7):
        for v in range(n // 2):
            idx = int(lay((t, v)))
            assert frag[t, v] == c[idx % 64, idx // 64]


def test_split_images_follow_the_tile_layout() -> None:
    case = PROBES["tma_split_none"].host(np.random.default_rng(0))  # type: ignore[misc]
    a = case.arrays["src"].reshape(64, 16)
    dump = case.expected["dump"]
    # unswizzled K-major: 8x8 core matrices of 16-byte rows, K chunks 1024 bytes apart
    for r, k in [(0, 0), (1, 0), (0, 7), (0, 8), (9, 3), (63, 15)]:
        off = (r % 8) * 16 + (r // 8) * 128 + (k % 8) * 2 + (k // 8) * 1024
        assert dump[off : off + 2].view(np.uint16)[0] == a[r, k]


def test_ragged_dump_holds_the_zero_fill() -> None:
    case = PROBES["tma_copy_2d"].host(np.random.default_rng(0))  # type: ignore[misc]
    dumps = case.expected["dump"].reshape(12, 4096)
    last = swizzle_bytes(dumps[-1], 3).reshape(32, 64, 2)  # the swizzle is an involution
    g = case.arrays["src"]
    # the last CTA covers rows 64..95 (rows 90.. are outside) and columns 192..255 (200.. outside)
    assert (last[26:] == 0).all() and (last[:, 8:] == 0).all()
    assert (last[:26, :8].copy().view(np.uint16)[..., 0] == g[64:90, 192:200]).all()


# -- the GPU runner against a fake runtime ---------------------------------------------------------


def _runner() -> Any:
    return gpu_script("test_probes.py", "probe_runner")


class FakeRuntime:
    """Plays the driver side of warpy.runtime: device buffers are numpy byte arrays; `run` checks the
    launch against the kernel's header and writes the probe's expectation into its outputs. The
    runner's own path (warpy.runtime.bind: parameters by name, extents checked) runs for real."""

    def __init__(self, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
        import warpy.runtime as rt
        import warpy.runtime.bind as bind
        import warpy.runtime.tensormap as tm
        from warpy.runtime.memory import DeviceBuffer

        self.name = name
        self.header = PROBES[name].build("sm_90a").kernel().header
        self.launched: list[dict[str, Any]] = []
        self.buffers: dict[int, Any] = {}
        fake = self

        class HostBuffer(DeviceBuffer):  # type: ignore[misc]
            def download(self, dtype: Any = np.uint8, shape: Any = None, offset: int = 0) -> np.ndarray:
                data = fake.buffers[self.ptr]
                n = int(np.prod(shape)) * np.dtype(dtype).itemsize
                return data[offset : offset + n].view(dtype).reshape(shape).copy()

            def __del__(self) -> None:
                pass

        def to_device(a: np.ndarray) -> Any:
            ptr = 0x10000 * (len(self.buffers) + 1)
            self.buffers[ptr] = np.ascontiguousarray(a).reshape(-1).view(np.uint8).copy()
            return HostBuffer(ptr, self.buffers[ptr].size)

        monkeypatch.setattr(rt, "to_device", to_device)
        monkeypatch.setattr(rt, "load", lambda cubin: SimpleNamespace(kernel=lambda n: SimpleNamespace(name=n)))
        monkeypatch.setattr(tm, "encode_tensor_map", lambda box, address: SimpleNamespace(box=box, address=int(address)))
        monkeypatch.setattr(bind, "_TMAP_CACHE", type(bind._TMAP_CACHE)())
        monkeypatch.setattr(bind, "run", self.run)

    def run(self, kernel: Any, grid: Any, block: Any, smem: Any, params: Any, cluster: Any, **kw: Any) -> None:
        self.launched.append(dict(kernel=kernel.name, grid=grid, block=block, smem=smem, params=params, cluster=cluster))
        case = PROBES[self.name].host(np.random.default_rng(_runner().SEED))  # type: ignore[misc]
        names = [n for n, _ in self.header.kernel_params()]
        for oname, want in case.expected.items():
            p = params[names.index(oname)]
            ptr = p.address if hasattr(p, "address") else p.ptr
            raw = np.ascontiguousarray(want).reshape(-1).view(np.uint8)
            self.buffers[ptr][: raw.size] = raw


@pytest.mark.parametrize("name", [n for n, p in PROBES.items() if p.host is not None and "sm_90a" in p.archs])
def test_gpu_runner_plumbing(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = _runner()
    fake = FakeRuntime(name, monkeypatch)
    report = runner._run_here(name)
    assert report["ok"], report
    h = fake.header
    (launch,) = fake.launched
    assert launch["grid"] == h.grid and launch["block"] == h.threads and launch["cluster"] == h.cluster
    assert launch["smem"] == h.dynsmem and h.dynsmem % 1024 == 0
    assert len(launch["params"]) == len(h.kernel_params())
    assert all(o["elements"] > 0 for o in report["outputs"].values())


def test_gpu_runner_reports_a_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    runner = _runner()
    fake = FakeRuntime("multicast", monkeypatch)
    orig = fake.run

    def bad_run(*a: Any, **kw: Any) -> None:
        orig(*a, **kw)
        fake.buffers[kw["params"][1].address][10] ^= 1  # one bit of dst

    import warpy.runtime.bind as bind

    monkeypatch.setattr(bind, "run", bad_run)
    report = runner._run_here("multicast")
    assert not report["ok"] and report["outputs"]["dst"]["mismatches"] == 1


def test_probe_registry_is_complete() -> None:
    wgmma = {n for n in PROBES if n.startswith("wgmma_")}
    assert {f"wgmma_{d}_sw{s}" for d, s in probes.WGMMA_VARIANTS} <= wgmma
    for n, p in PROBES.items():
        assert p.archs and set(p.archs) <= {"sm_90a", "sm_100a"}
        assert (p.host is None) == (n in ("umma_1cta", "umma_2cta", "math_table"))  # (math_table: tests/gpu/test_isa_gpu.py)


def _isa_gpu_runner() -> Any:
    return gpu_script("test_isa_gpu.py", "isa_gpu_runner")


@pytest.mark.parametrize("flip", [False, True])
def test_math_table_runner_plumbing(flip: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/gpu/test_isa_gpu.py's math_table case against a fake runtime that plays the GPU by
    writing the checker's words (one of them flipped in the second run, which must be reported by slot)."""
    g = _isa_gpu_runner()
    fake = FakeRuntime("math_table", monkeypatch)
    words = g.checker_words(g.table())
    if flip:
        words[3, 16] ^= 1  # HADD2.BF16_V2 of thread 3

    def run(kernel: Any, grid: Any, block: Any, smem: Any, params: Any, cluster: Any, **kw: Any) -> None:
        fake.launched.append(dict(grid=grid, block=block, params=params))
        names = [n for n, _ in fake.header.kernel_params()]
        out = params[names.index("out")]
        raw = np.ascontiguousarray(words).reshape(-1).view(np.uint8)
        fake.buffers[out.address if hasattr(out, "address") else out.ptr][: raw.size] = raw

    import warpy.runtime.bind as bind

    monkeypatch.setattr(bind, "run", run)
    report = g._run_math_table()
    (launch,) = fake.launched
    assert launch["block"] == 64 and len(launch["params"]) == 3
    if flip:
        assert not report["ok"] and report["mismatches"] == 1 and report["slots_differing"] == ["HADD2.BF16_V2 w0+w1"]
    else:
        assert report["ok"] and report["words"] == 64 * 56, report
