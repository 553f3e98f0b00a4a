"""warpy.gemm's 8-bit float calls, checked on the host (no GPU, no torch): fp8 GPU tensors (a stand-in
with torch's attributes: the path warpy reads torch CUDA tensors by), their scales, the plan key and
the problem it stands for, and the one-line refusals."""

from __future__ import annotations

from typing import Any

import pytest

from warpy import matmul as mm
from warpy.errors import WarpyError

BASE = 0x7F0000000000


class _Device:
    type = "cuda"
    index = 0


class FakeTorchCuda:
    """What warpy reads off a torch CUDA tensor: shape, stride(), data_ptr(), dtype, device."""

    __module__ = "torch.fake"

    def __init__(self, shape: tuple[int, ...], dtype: str, ptr: int, strides: tuple[int, ...] | None = None) -> None:
        self.shape = shape
        self.dtype = dtype  # str(torch dtype): "torch.float8_e4m3fn"
        self.ptr = ptr
        self.strides = strides or ((shape[1], 1) if len(shape) == 2 else (1,))
        self.device = _Device()

    def stride(self) -> tuple[int, ...]:
        return self.strides

    def data_ptr(self) -> int:
        return self.ptr

    def reshape(self, *shape: int) -> "FakeTorchCuda":
        n = 1
        for d in self.shape:
            n *= d
        dims = tuple(n if d == -1 else d for d in shape)
        return FakeTorchCuda(dims, self.dtype, self.ptr, (dims[1], 1) if len(dims) == 2 else (1,))


E4M3, E5M2, F32 = "torch.float8_e4m3fn", "torch.float8_e5m2", "torch.float32"


def _operands(M: int = 64, N: int = 96, K: int = 128, b_type: str = E4M3) -> tuple[Any, Any]:
    return FakeTorchCuda((M, K), E4M3, BASE), FakeTorchCuda((N, K), b_type, BASE + 0x100000)


def _problem(key: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch) -> Any:
    """The GEMM problem warpy.gemm plans for a call's key (the plan itself not built)."""
    monkeypatch.setattr(mm, "make_plan", lambda family, problem: problem)
    return mm.Launches().plan(key, "sm_90a")


def test_scales_per_row_and_column_make_the_key_and_the_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _operands(b_type=E5M2)
    sa = FakeTorchCuda((64, 1), F32, BASE + 0x200000)  # (M, 1), as torch._scaled_mm's row-wise scale
    sb = FakeTorchCuda((1, 96), F32, BASE + 0x300000)
    call = mm.check_call(a, b, scales=(sa, sb))
    assert (call.dtype, call.out_dtype) == ("e4m3", "bf16")  # C is bf16 unless asked otherwise
    assert call.fp8 == ("fp8", "e5m2", "row", "col")
    assert [m.ptr for m in call.aux] == [sa.ptr, sb.ptr] and [m.shape for m in call.aux] == [(64, 1), (96, 1)]
    p = _problem(call.key, monkeypatch)
    assert (p.dtype, p.b_type, p.scale_a, p.scale_b, p.out_dtype) == ("e4m3", "e5m2", "row", "col", "bf16")


def test_per_tensor_and_missing_scales(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _operands()
    one = FakeTorchCuda((), F32, BASE + 0x200000, ())
    call = mm.check_call(a, b, None, "fp32", scales=(one, None))
    assert call.fp8 == ("fp8", "e4m3", "tensor", "") and call.out_dtype == "fp32" and len(call.aux) == 1
    plain = mm.check_call(a, b)
    assert plain.fp8 == ("fp8", "e4m3", "", "") and plain.aux == ()
    assert _problem(plain.key, monkeypatch).scale_a == ""
    assert _problem(call.key, monkeypatch).scale_a == "tensor"


@pytest.mark.parametrize("kw,msg", [
    (dict(sa=((63,), F32)), "scale_a holds 63 values; it holds 1 (per tensor) or 64 (one a row of C)"),
    (dict(sb=((64,), F32)), "scale_b holds 64 values; it holds 1 (per tensor) or 96 (one a col of C)"),
    (dict(sa=((64,), "torch.bfloat16")), "scale_a is bf16; a scale is fp32"),
    (dict(sa=((64,), F32, 4)), "scale_a: address 0x7f0000200004 is not 16-byte aligned"),
])
def test_scale_refusals(kw: dict[str, Any], msg: str) -> None:
    a, b = _operands()
    scales: list[Any] = [None, None]
    for i, name in enumerate(("sa", "sb")):
        if name in kw:
            spec = kw[name]
            scales[i] = FakeTorchCuda(spec[0], spec[1], BASE + 0x200000 + (spec[2] if len(spec) > 2 else 0))
    with pytest.raises(WarpyError, match="^" + msg.replace("(", r"\(").replace(")", r"\)")):
        mm.check_call(a, b, scales=(scales[0], scales[1]))


def test_type_refusals() -> None:
    a, _ = _operands()
    with pytest.raises(WarpyError, match=r"^a is e4m3 but b is bf16: both inputs must have the same type$"):
        mm.check_call(a, FakeTorchCuda((96, 128), "torch.bfloat16", BASE + 0x100000))
    a16 = FakeTorchCuda((64, 128), "torch.bfloat16", BASE)
    b16 = FakeTorchCuda((96, 128), "torch.bfloat16", BASE + 0x100000)
    with pytest.raises(WarpyError, match=r"^scale_a / scale_b multiply 8-bit float products; a and b are bf16$"):
        mm.check_call(a16, b16, scales=(FakeTorchCuda((1,), F32, BASE + 0x200000), None))
    with pytest.raises(WarpyError, match=r"K=40 rows of e4m3 are 40 bytes; TMA needs a multiple of 16"):
        mm.check_call(FakeTorchCuda((64, 40), E4M3, BASE), FakeTorchCuda((96, 40), E4M3, BASE + 0x100000))


def test_the_bench_check_is_no_worse_than_cublaslt() -> None:
    """kernels/gemm_fp8_bench.fp8_check (torch on the CPU): C within its rounding plus twice cuBLASLt's
    largest error passes; an element off by more fails, and is counted."""
    torch = pytest.importorskip("torch")
    from warpy.kernels.gemm_fp8_bench import fp8_check

    g = torch.Generator().manual_seed(3)
    a = torch.randn((32, 64), generator=g).to(torch.float8_e4m3fn)
    b = torch.randn((48, 64), generator=g).to(torch.float8_e5m2)
    sa, sb = torch.tensor([0.5]), torch.tensor([2.0])
    exact = (a.float() @ b.float().t()) * 0.5 * 2.0
    c = exact.to(torch.bfloat16)
    assert fp8_check(torch, a, b, sa, sb, c, c) == "ok"
    off = c.clone()
    off[3, 5] += 4.0
    assert fp8_check(torch, a, b, sa, sb, off, c).startswith("FAIL (1 elements; max |Δ| ")
    assert fp8_check(torch, a, b, sa, sb, off, off) == "ok"  # cuBLASLt as far off: the allowance covers it


def test_the_bench_needs_scaled_mm() -> None:
    from warpy.kernels.gemm_fp8_bench import scaled_mm

    class OldTorch:
        __version__ = "2.0.0"

    with pytest.raises(WarpyError, match=r"^torch 2\.0\.0 has no torch\._scaled_mm \(cuBLASLt FP8\)"):
        scaled_mm(OldTorch(), None, False)
