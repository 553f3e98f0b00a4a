"""warpy's GEMM as a torch operator, so that `torch.compile` keeps a call in its graph.

`torch.ops.warpy.mm(a, b, out_dtype=None, alpha, beta, c_in, bias, row_bias, activation, residual)`
is `warpy.mm` (its fused epilogue included) (C = A·B, torch.mm's operands) registered
with `torch.library.custom_op`: its CUDA implementation calls `warpy.mm` (on the tensors' current
stream, as an eager call does), and its fake implementation gives C's shape, type and device from
a's and b's without running anything, which is what dynamo and inductor trace with (fake and meta
tensors). `warpy.mm` itself turns into this op while torch.compile traces
(`torch.compiler.is_compiling()`), so a model calling `warpy.mm` compiles with no graph break.

torch is optional: this module is imported (and the op registered, once per process) by
`warpy.matmul` when torch has been imported.
"""

from __future__ import annotations

from typing import Any, Optional

import torch  # type: ignore[import-not-found,unused-ignore]

_OUT = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@torch.library.custom_op("warpy::mm", mutates_args=(), device_types="cuda")
def _mm(a: torch.Tensor, b: torch.Tensor, out_dtype: Optional[str] = None, alpha: float = 1.0, beta: float = 0.0,
        c_in: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None,
        row_bias: Optional[torch.Tensor] = None, activation: Optional[str] = None,
        residual: Optional[torch.Tensor] = None) -> torch.Tensor:
    from warpy.matmul import check_call, _run

    # the eager path of warpy.mm (not warpy.mm itself, which would route back here under compile)
    plain = (alpha == 1.0 and beta == 0.0 and c_in is None and bias is None and row_bias is None and activation is None
             and residual is None)
    call = check_call(a, b, None, out_dtype, b_kn=True) if plain else \
        check_call(a, b, None, out_dtype, b_kn=True, alpha=alpha, beta=beta, c_in=c_in, bias=bias,
                   row_bias=row_bias, activation=activation, residual=residual)
    return _run(call, None, None)  # type: ignore[no-any-return]


@_mm.register_fake
def _mm_fake(a: torch.Tensor, b: torch.Tensor, out_dtype: Optional[str] = None, alpha: float = 1.0,
             beta: float = 0.0, c_in: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None,
             row_bias: Optional[torch.Tensor] = None, activation: Optional[str] = None,
             residual: Optional[torch.Tensor] = None) -> torch.Tensor:
    torch._check(a.dim() == 2 and b.dim() == 2,  # type: ignore[no-untyped-call,unused-ignore]
                 lambda: "warpy::mm takes two matrices")
    torch._check(a.shape[1] == b.shape[0],  # type: ignore[no-untyped-call,unused-ignore]
                 lambda: f"a is {a.shape[0]}x{a.shape[1]} and b is {b.shape[0]}x{b.shape[1]}: C = A·B needs b K x N")
    torch._check(a.dtype == b.dtype and a.dtype in (torch.bfloat16, torch.float16),  # type: ignore[no-untyped-call,unused-ignore]
                 lambda: "warpy::mm takes bf16 or fp16 operands of one type")
    dt = a.dtype if out_dtype is None else _OUT[out_dtype]
    return a.new_empty((a.shape[0], b.shape[1]), dtype=dt)


@torch.library.custom_op("warpy::bmm", mutates_args=(), device_types="cuda")
def _bmm(a: torch.Tensor, b: torch.Tensor, out_dtype: Optional[str] = None) -> torch.Tensor:
    from warpy.matmul import _bmm_eager

    return _bmm_eager(a, b, None, out_dtype, None)  # type: ignore[no-any-return]


@_bmm.register_fake
def _bmm_fake(a: torch.Tensor, b: torch.Tensor, out_dtype: Optional[str] = None) -> torch.Tensor:
    torch._check(a.dim() == 3 and b.dim() == 3, lambda: "warpy::bmm takes two batches of matrices")  # type: ignore[no-untyped-call,unused-ignore]
    torch._check(a.shape[0] == b.shape[0] and a.shape[2] == b.shape[1],  # type: ignore[no-untyped-call,unused-ignore]
                 lambda: f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: C = A·B needs b batch x K x N")
    torch._check(a.dtype == b.dtype and a.dtype in (torch.bfloat16, torch.float16),  # type: ignore[no-untyped-call,unused-ignore]
                 lambda: "warpy::bmm takes bf16 or fp16 operands of one type")
    dt = a.dtype if out_dtype is None else _OUT[out_dtype]
    return a.new_empty((a.shape[0], a.shape[1], b.shape[2]), dtype=dt)


def op() -> Any:
    """The registered operator (`torch.ops.warpy.mm.default`)."""
    return torch.ops.warpy.mm.default


def bmm_op() -> Any:
    """`torch.ops.warpy.bmm.default`."""
    return torch.ops.warpy.bmm.default
