"""warpy.runtime without a GPU: lazy import, one-line errors, tensor-map argument mapping, parameter
packing, launch validation, the watchdog (against a fake driver), timing statistics, and the GPU
test fixture assembling."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from warpy.errors import NoGPU, WarpyError
from warpy.layout.tma import TmaBox
from warpy.runtime import driver as drv
from warpy.runtime import launcher as L
from warpy.runtime.memory import DeviceBuffer
from warpy.runtime.tensormap import TensorMap, tensor_map_args
from fake_cuda_driver import CUresult, fake_driver, install

FIXTURE = Path(__file__).parent / "fixture_kernels.ptx"
REPO = Path(__file__).resolve().parents[2]


# nvdisasm is a dependency (the nvidia-cuda-nvdisasm wheel): without it these tests fail, naming it.


def test_import_does_not_touch_cuda() -> None:
    code = "import sys, warpy.runtime, warpy.lift.ptxas; print(sorted(m for m in sys.modules if m.startswith('cuda')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(REPO)},
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_first_use_without_a_gpu_is_one_line() -> None:
    # Wherever this runs: with no driver or GPU the first call raises NoGPU in one line; with a GPU
    # it succeeds. Either way, never a traceback from inside the bindings.
    code = (
        "from warpy import runtime as rt\n"
        "from warpy.errors import WarpyError\n"
        "try:\n    rt.alloc(16); print('OK')\n"
        "except WarpyError as e:\n    print(type(e).__name__ + ': ' + str(e))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1
    assert lines[0] == "OK" or lines[0].startswith(("NoGPU: no CUDA driver", "NoGPU: no GPU", "NoGPU: no usable GPU"))


# ---------------------------------------------------------------------------------------------
# A fake driver (tests/fake_cuda_driver.py): the error paths and the watchdog.


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Installs an A100 whose stream never finishes (unless overridden) as the driver, warpy's stream
    handle 7."""
    state = install(monkeypatch, None, default_stream={0: 7})

    def install_driver(**overrides: Any) -> SimpleNamespace:
        d = fake_driver(name=b"Fake A100\0\0", cc=(8, 0), sms=108, smem=166912,
                        **{"cuStreamQuery": lambda s: (CUresult.CUDA_ERROR_NOT_READY,), **overrides})
        state.clear()
        state["driver"] = d
        return d

    return install_driver


def test_no_driver(fake: Any) -> None:
    def boom(flags: int) -> Any:
        raise RuntimeError('"cuda" is an NVIDIA driver library and can only be found via system search.\nmore')

    fake(cuInit=boom)
    with pytest.raises(NoGPU) as e:
        drv.device()
    assert str(e.value) == 'no CUDA driver: "cuda" is an NVIDIA driver library and can only be found via system search.'


def test_no_device(fake: Any) -> None:
    fake(cuInit=lambda f: (CUresult.CUDA_ERROR_NO_DEVICE,))
    with pytest.raises(NoGPU, match="^no GPU: the CUDA driver found no device$"):
        drv.device()


def test_wrong_architecture(fake: Any) -> None:
    fake()
    dev = drv.device()
    assert (dev.name, dev.sm, dev.sm_count) == ("Fake A100", "sm_80", 108)
    with pytest.raises(NoGPU, match=r"^wrong architecture: the cubin is for sm_90a, but the GPU \(Fake A100\) is sm_80$"):
        drv.require_arch("sm_90a")
    with pytest.raises(NoGPU, match=r"sm_100a cubins need a B200-class GPU"):
        drv.require_arch("sm_100a")


def test_can_run() -> None:
    d = drv.Device(0, "H200", (9, 0), 132, 232448, None, None)
    assert d.can_run("sm_90a") and d.can_run("sm_90") and not d.can_run("sm_100a") and not d.can_run("sm_80")


def test_check_formats_driver_errors(fake: Any) -> None:
    fake()
    assert drv.check((CUresult.CUDA_SUCCESS, 5), "x") == 5
    assert drv.check((CUresult.CUDA_SUCCESS, 5, 6), "x") == (5, 6)
    assert drv.check((CUresult.CUDA_SUCCESS,), "x") is None
    with pytest.raises(WarpyError, match="^cuMemAlloc failed: CUDA_ERROR_ILLEGAL_ADDRESS: fake description$"):
        drv.check((CUresult.CUDA_ERROR_ILLEGAL_ADDRESS, None), "cuMemAlloc")


def test_watchdog_reports_a_hang_and_poisons_the_runtime(fake: Any) -> None:
    fake()
    L._last_kernel[7] = "gemm_sm90"
    with pytest.raises(L.HangError) as e:
        L.synchronize(timeout=0.05)
    assert str(e.value) == "hang: kernel gemm_sm90 did not finish within 0.05 s"
    with pytest.raises(WarpyError, match=r"^the CUDA context is unusable after: hang: kernel gemm_sm90 .*\(restart the process\)$"):
        drv.device()


def test_watchdog_passes_and_reports_faults(fake: Any) -> None:
    answers = iter([(CUresult.CUDA_ERROR_NOT_READY,), (CUresult.CUDA_ERROR_NOT_READY,), (CUresult.CUDA_SUCCESS,)])
    fake(cuStreamQuery=lambda s: next(answers))
    L.synchronize(timeout=5, kernel="k")  # finishes on the third poll
    fake(cuStreamQuery=lambda s: (CUresult.CUDA_ERROR_ILLEGAL_ADDRESS,))
    with pytest.raises(WarpyError, match=r"^kernel k failed: CUDA_ERROR_ILLEGAL_ADDRESS: fake description \(the CUDA context is now unusable\)$"):
        L.synchronize(timeout=5, kernel="k")


# ---------------------------------------------------------------------------------------------
# Pure parts


def test_tensor_map_args_golden() -> None:
    box = TmaBox("bf16", dims=(4096, 2048), strides=(8192,), box=(64, 128), swizzle=128, l2_promotion=256)
    a = tensor_map_args(box, 0x7F0000000000)
    assert a.data_type == "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16" and a.rank == 2
    assert (a.global_dims, a.global_strides, a.box_dims, a.element_strides) == ((4096, 2048), (8192,), (64, 128), (1, 1))
    assert (a.swizzle, a.interleave, a.l2_promotion, a.oob_fill) == (
        "CU_TENSOR_MAP_SWIZZLE_128B", "CU_TENSOR_MAP_INTERLEAVE_NONE", "CU_TENSOR_MAP_L2_PROMOTION_L2_256B",
        "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE",
    )
    b = TmaBox("fp32", dims=(10, 10, 10), strides=(64, 640), box=(4, 4, 4), elem_strides=(1, 2, 1), oob_fill="nan",
               swizzle=0, interleave=32)
    a = tensor_map_args(b, 64)
    assert (a.element_strides, a.oob_fill, a.interleave, a.swizzle) == (
        (1, 2, 1), "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA", "CU_TENSOR_MAP_INTERLEAVE_32B",
        "CU_TENSOR_MAP_SWIZZLE_NONE",
    )
    with pytest.raises(WarpyError, match="base address 0x30 is not 32-byte aligned"):
        tensor_map_args(b, 48)
    with pytest.raises(WarpyError, match="base address 0x8 is not 16-byte aligned"):
        tensor_map_args(box, 8)


def test_tensor_map_enum_names_exist_in_the_bindings() -> None:
    import cuda.bindings.driver as d  # cuda-python is a dependency
    from warpy.target import DTYPES
    from warpy.runtime import tensormap as T

    for t in DTYPES.values():
        assert hasattr(d.CUtensorMapDataType, t.tma)
    for table, enum_ in ((T.SWIZZLE_ENUMS, d.CUtensorMapSwizzle), (T.INTERLEAVE_ENUMS, d.CUtensorMapInterleave),
                         (T.L2_PROMOTION_ENUMS, d.CUtensorMapL2promotion), (T.OOB_FILL_ENUMS, d.CUtensorMapFloatOOBfill)):
        for name in table.values():
            assert hasattr(enum_, name), name
    for name in ("CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION", "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION"):
        assert hasattr(d.CUlaunchAttributeID, name)
    assert hasattr(d.CUfunction_attribute, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES")


def test_pack_params_layout() -> None:
    box = TmaBox("fp16", dims=(64, 64), strides=(128,), box=(64, 64))
    tmap = TensorMap(bytes(range(128)), box, 0)
    buf = DeviceBuffer(0x7F00DEADBE00, 4096)
    buf._freed = True  # not a real allocation: keep __del__ away from the driver
    params = [tmap, buf, L.u32(0xFFFFFFFF), L.i32(-5), L.u64(1 << 40), L.f32(1.5), np.uint32(9), np.int32(-1)]
    address, keep = L.pack_params(params)
    ptrs = (ctypes.c_void_p * len(params)).from_address(address)
    assert ptrs[0] % 64 == 0 and ctypes.string_at(ptrs[0], 128) == bytes(range(128))
    assert ctypes.c_uint64.from_address(ptrs[1]).value == 0x7F00DEADBE00
    assert ctypes.c_uint32.from_address(ptrs[2]).value == 0xFFFFFFFF
    assert ctypes.c_int32.from_address(ptrs[3]).value == -5
    assert ctypes.c_uint64.from_address(ptrs[4]).value == 1 << 40
    assert ctypes.c_float.from_address(ptrs[5]).value == 1.5
    assert ctypes.c_uint32.from_address(ptrs[6]).value == 9
    assert ctypes.c_int32.from_address(ptrs[7]).value == -1
    assert keep


def test_param_errors() -> None:
    with pytest.raises(WarpyError, match=r"^kernel parameter 1 is a int; give a TensorMap"):
        L.pack_params([L.u32(1), 5])
    with pytest.raises(WarpyError, match="is not a u32"):
        L.u32(-1)
    with pytest.raises(WarpyError, match="is not a i32"):
        L.i32(1 << 31)
    with pytest.raises(WarpyError, match="is not a u64"):
        L.u64(1.5)  # type: ignore[arg-type]
    with pytest.raises(WarpyError, match="a tensor map is 128 bytes, not 64"):
        TensorMap(bytes(64), TmaBox("u8", dims=(16,), strides=(), box=(16,)), 0)


def test_launch_validates_before_touching_the_driver() -> None:
    k: Any = SimpleNamespace(name="k")
    with pytest.raises(WarpyError, match=r"block \(2048, 1, 1\) has 2048 threads, more than 1024"):
        L.launch(k, 4, 2048)
    with pytest.raises(WarpyError, match=r"cluster \(2, 1, 1\) does not divide grid \(3, 1, 1\) along x"):
        L.launch(k, 3, 128, cluster=2)
    with pytest.raises(WarpyError, match="grid"):
        L.launch(k, (0, 1), 128)
    with pytest.raises(WarpyError, match="is not 1 to 3 positive extents"):
        L.launch(k, (1, 1, 1, 1), 128)


def test_timing_statistics() -> None:
    t = L.Timing((3.0, 1.0, 10.0, 2.0))
    assert (t.median_ms, t.min_ms, t.max_ms) == (2.5, 1.0, 10.0)
    assert t.tflops(2.5e9) == pytest.approx(1.0)


def test_fixture_kernels_assemble(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from warpy.lift import ptxas as P
    from warpy.lift.disasm import check_opcodes

    monkeypatch.setenv("WARPY_CACHE", str(tmp_path))
    P.clear_memory_cache()
    cubin = P.assemble(FIXTURE.read_text(), "sm_90a")
    assert set(cubin.kernels) == {"tma_copy_2d", "tma_copy_3d", "hang_forever"}
    assert cubin.warnings == ()
    check_opcodes(["UTMALDG.2D", "UTMASTG.2D", "UTMACMDFLUSH", "SYNCS.ARRIVE.TRANS64"], cubin, "tma_copy_2d")
    check_opcodes(["UTMALDG.3D", "UTMASTG.3D"], cubin, "tma_copy_3d")
    check_opcodes(["SYNCS.EXCH.64", "SYNCS.PHASECHK.TRANS64.TRYWAIT"], cubin, "hang_forever")
