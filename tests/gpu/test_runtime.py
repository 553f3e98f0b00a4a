"""warpy.runtime on an sm_90 GPU: TMA copies through a tensor map (2-D and 3-D, ragged, 128B swizzle),
launch attributes (cluster, PDL, large dynamic shared memory), timing, and the hang watchdog."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from warpy.layout.tma import TmaBox
from warpy.lift.ptxas import assemble
from warpy import runtime as rt

FIXTURE = Path(__file__).resolve().parents[1] / "runtime" / "fixture_kernels.ptx"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def module() -> rt.Module:
    return rt.load(assemble(FIXTURE.read_text(), "sm_90a"))


def _copy(module: rt.Module, src_box: TmaBox, dst_box: TmaBox, src: rt.DeviceBuffer, dst: rt.DeviceBuffer,
          cluster: tuple[int, int, int] = (1, 1, 1), pdl: bool = False, extra_smem: int = 0) -> None:
    rank = src_box.rank
    kernel = module.kernel(f"tma_copy_{rank}d")
    grid = [math.ceil(d / b) for d, b in zip(src_box.dims, src_box.box)]
    smem = src_box.box_bytes + 16 + extra_smem
    params = [rt.encode_tensor_map(src_box, src), rt.encode_tensor_map(dst_box, dst), rt.u32(src_box.box_bytes)]
    params += [rt.u32(b) for b in src_box.box]
    rt.run(kernel, grid, 128, smem, params, cluster=cluster, pdl=pdl, timeout=30)


def test_device_is_sm90() -> None:
    dev = rt.device()
    assert dev.sm == "sm_90" and dev.can_run("sm_90a") and not dev.can_run("sm_100a")
    assert dev.sm_count > 0 and dev.max_shared_per_block_optin >= 227 * 1024


def test_tma_copy_2d_ragged_swizzled(module: rt.Module) -> None:
    rows, cols = 90, 200  # neither a multiple of the 32 x 64 box
    host = (np.arange(rows * cols) % 2039).astype(np.float16).reshape(rows, cols)
    src = rt.to_device(host)
    dst = rt.alloc(host.nbytes)
    dst.fill(0xFF)
    box = TmaBox("fp16", dims=(cols, rows), strides=(cols * 2,), box=(64, 32), swizzle=128)
    _copy(module, box, box, src, dst)
    out = dst.download(np.float16, (rows, cols))
    np.testing.assert_array_equal(out, host)


def test_tma_store_clips_at_the_tensor_edge(module: rt.Module) -> None:
    # The destination rows are wider (pitch 208) than the tensor (200): the padding must stay untouched.
    rows, cols, pitch = 90, 200, 208
    host = (np.arange(rows * cols) % 1000).astype(np.float16).reshape(rows, cols)
    src = rt.to_device(host)
    dst = rt.alloc(rows * pitch * 2)
    dst.fill(0xFF)
    src_box = TmaBox("fp16", dims=(cols, rows), strides=(cols * 2,), box=(64, 32), swizzle=128)
    dst_box = TmaBox("fp16", dims=(cols, rows), strides=(pitch * 2,), box=(64, 32), swizzle=128)
    _copy(module, src_box, dst_box, src, dst)
    out = dst.download(np.uint16, (rows, pitch))
    np.testing.assert_array_equal(out[:, :cols], host.view(np.uint16))
    assert (out[:, cols:] == 0xFFFF).all()


def test_tma_copy_3d(module: rt.Module) -> None:
    depth, rows, cols = 5, 20, 96
    host = np.random.default_rng(1).standard_normal((depth, rows, cols)).astype(np.float32)
    src = rt.to_device(host)
    dst = rt.alloc(host.nbytes)
    dst.fill(0)
    box = TmaBox("fp32", dims=(cols, rows, depth), strides=(cols * 4, cols * rows * 4), box=(32, 8, 2), swizzle=128)
    _copy(module, box, box, src, dst)
    np.testing.assert_array_equal(dst.download(np.float32, host.shape), host)


def test_launch_attributes_cluster_pdl_and_large_smem(module: rt.Module) -> None:
    rows, cols = 64, 256
    host = np.arange(rows * cols, dtype=np.uint16).reshape(rows, cols)
    src = rt.to_device(host)
    dst = rt.alloc(host.nbytes)
    dst.fill(0)
    box = TmaBox("u16", dims=(cols, rows), strides=(cols * 2,), box=(64, 32), swizzle=128)
    _copy(module, box, box, src, dst, cluster=(2, 1, 1), pdl=True, extra_smem=100 * 1024)
    np.testing.assert_array_equal(dst.download(np.uint16, host.shape), host)


def test_timing(module: rt.Module) -> None:
    rows, cols = 256, 256
    host = np.ones((rows, cols), np.float16)
    src, dst = rt.to_device(host), rt.alloc(host.nbytes)
    box = TmaBox("fp16", dims=(cols, rows), strides=(cols * 2,), box=(64, 32), swizzle=128)
    kernel = module.kernel("tma_copy_2d")
    params = [rt.encode_tensor_map(box, src), rt.encode_tensor_map(box, dst), rt.u32(box.box_bytes), rt.u32(64), rt.u32(32)]
    t = rt.time_kernel(kernel, (4, 8), 128, box.box_bytes + 16, params, iters=25, warmup=3)
    assert len(t.samples_ms) == 25
    assert 0 < t.min_ms <= t.median_ms <= t.max_ms < 100
    np.testing.assert_array_equal(dst.download(np.float16, host.shape), host)


_HANG = textwrap.dedent(
    """\
    import os, sys, time
    from warpy import runtime as rt
    from warpy.lift.ptxas import assemble
    m = rt.load(assemble(open(sys.argv[1]).read(), "sm_90a"))
    out = rt.alloc(4)
    t0 = time.monotonic()
    try:
        rt.run(m.kernel("hang_forever"), 1, 32, 0, [out], timeout=2)
        print("NO HANG")
    except rt.HangError as e:
        print(str(e))
        print(f"after {time.monotonic() - t0:.1f} s")
        try:
            rt.alloc(4)
        except Exception as e2:
            print("then:", e2)
    sys.stdout.flush()
    os._exit(0)  # the kernel is still running; skip interpreter teardown
    """
)


def test_watchdog_reports_a_hang_in_a_subprocess() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _HANG, str(FIXTURE)], capture_output=True, text=True, timeout=180,
                       env=env)
    lines = p.stdout.splitlines()
    assert p.returncode == 0, p.stderr
    assert lines[0] == "hang: kernel hang_forever did not finish within 2 s", p.stdout + p.stderr
    assert 2.0 <= float(lines[1].split()[1]) < 10
    assert lines[2].startswith("then: the CUDA context is unusable after: hang: kernel hang_forever")
