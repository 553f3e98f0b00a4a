"""warpy.mm under torch.compile without a GPU (torch is an optional extra: skipped where it is absent):
the custom op `warpy::mm`, its fake implementation (shapes, types, refusals) on fake and meta
tensors, and dynamo tracing a model whose linears call warpy.mm with zero graph breaks, the op in
the graph. Running the compiled model against eager needs the GPU: tests/gpu/test_gemm_layouts_gpu.py."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install -e .[torch])")

import warpy  # noqa: E402
import warpy.matmul as mm  # noqa: E402
from warpy.errors import WarpyError  # noqa: E402


def _meta(*shape: int, dtype: object = None) -> object:
    return torch.zeros(*shape, dtype=dtype or torch.bfloat16, device="meta")


class MLP(torch.nn.Module):
    """Two linears through warpy.mm (x · Wᵀ with W stored N×K, as nn.Linear keeps it): the first with
    its bias and GELU fused, the second followed by a torch GELU and a residual add."""

    def __init__(self, d: int, h: int, device: str, dtype: object) -> None:
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.zeros(h, d, device=device, dtype=dtype), requires_grad=False)
        self.b1 = torch.nn.Parameter(torch.zeros(h, device=device, dtype=dtype), requires_grad=False)
        self.w2 = torch.nn.Parameter(torch.zeros(d, h, device=device, dtype=dtype), requires_grad=False)

    def forward(self, x: object) -> object:
        h = warpy.mm(x, self.w1.t(), bias=self.b1, activation="gelu")
        return x + torch.nn.functional.gelu(warpy.mm(h, self.w2.t()))


def test_op_is_registered_and_its_fake_gives_shape_and_type() -> None:
    op = torch.ops.warpy.mm.default
    assert mm._torch_mm is op
    a, b = _meta(48, 64), _meta(64, 80)
    c = op(a, b, None)
    assert c.shape == (48, 80) and c.dtype == torch.bfloat16 and c.device.type == "meta"
    c = op(a, b, "fp32")
    assert c.dtype == torch.float32
    c = op(a, b, None, 0.5, 1.0, _meta(48, 80), _meta(80), None, "relu", _meta(48, 80))
    assert c.shape == (48, 80)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        f = op(torch.empty(3, 16, dtype=torch.float16), torch.empty(16, 5, dtype=torch.float16), "bf16")
        assert f.shape == (3, 5) and f.dtype == torch.bfloat16


@pytest.mark.parametrize("a,b,message", [
    ((48, 64), (32, 80), "C = A·B needs b K x N"),
    ((48, 64, 2), (64, 80), "two matrices"),
])
def test_fake_refuses_bad_shapes(a: tuple[int, ...], b: tuple[int, ...], message: str) -> None:
    with pytest.raises(Exception, match=message):
        torch.ops.warpy.mm.default(_meta(*a), _meta(*b), None)
    with pytest.raises(Exception, match="bf16 or fp16"):
        torch.ops.warpy.mm.default(_meta(4, 8, dtype=torch.float32), _meta(8, 4, dtype=torch.float32), None)


def test_compiled_mlp_has_no_graph_break_and_calls_the_op() -> None:
    torch._dynamo.reset()
    model = MLP(64, 128, "meta", torch.bfloat16)
    explained = torch._dynamo.explain(model)(_meta(16, 64))
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    code = explained.graphs[0].code
    assert code.count("torch.ops.warpy.mm.default") == 2 and "'gelu'" in code and "torch._C._nn.gelu" in code


def test_eager_calls_do_not_go_through_the_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside a compiled region warpy.mm is the plain call (no dispatcher): a CPU tensor is refused by
    warpy's own operand check, in one line."""
    calls: list[object] = []
    monkeypatch.setattr(mm, "_torch_mm", lambda *a: calls.append(a))
    with pytest.raises(WarpyError, match="^a is in CPU memory, not on the GPU"):
        warpy.mm(torch.zeros(4, 8, dtype=torch.bfloat16), torch.zeros(8, 4, dtype=torch.bfloat16))
    assert calls == []


def test_out_under_compile_is_refused() -> None:
    torch._dynamo.reset()

    def f(x: object, w: object, o: object) -> object:
        return warpy.mm(x, w, out=o)

    with pytest.raises(Exception, match="out= is not supported there"):
        torch.compile(f, backend="eager", fullgraph=True)(_meta(4, 8), _meta(8, 4), _meta(4, 4))


@pytest.mark.skipif(os.environ.get("WARPY_SLOW") != "1", reason="WARPY_SLOW=1 (inductor compiles C++: about 90 s)")
def test_inductor_hands_the_op_w_t_in_place() -> None:
    """Inductor keeps the strides eager gives the op: b = w.t() arrives K-contiguous (the layout the
    kernel reads), not as a contiguous K×N copy it would refuse. Seen through a CPU kernel registered
    for this test only (warpy's own is CUDA's)."""
    seen: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def cpu(a, b, out_dtype=None, alpha=1.0, beta=0.0, c_in=None, bias=None, row_bias=None,  # type: ignore[no-untyped-def]
            activation=None, residual=None):
        seen.append((tuple(a.stride()), tuple(b.stride())))
        return torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype)

    torch.library.register_kernel("warpy::mm", "cpu", cpu)
    try:
        torch._dynamo.reset()
        model = MLP(64, 128, "cpu", torch.bfloat16)
        torch.compile(model)(torch.zeros(32, 64, dtype=torch.bfloat16))
    finally:
        torch.library.register_kernel("warpy::mm", "cpu", None)  # type: ignore[arg-type]
        torch._dynamo.reset()
    assert seen == [((64, 1), (1, 64)), ((128, 1), (1, 128))]


def test_bmm_compiles_to_its_op() -> None:
    torch._dynamo.reset()

    def attn_like(q: object, k: object) -> object:
        return torch.softmax(warpy.bmm(q, k.transpose(1, 2), out_dtype="fp32"), dim=-1)  # type: ignore[attr-defined]

    q = torch.zeros(4, 32, 64, dtype=torch.bfloat16, device="meta")
    explained = torch._dynamo.explain(attn_like)(q, q)
    assert explained.graph_break_count == 0
    code = explained.graphs[0].code
    assert "torch.ops.warpy.bmm.default" in code
    out = torch.ops.warpy.bmm.default(q, q.transpose(1, 2), "fp32")
    assert out.shape == (4, 32, 32) and out.dtype == torch.float32
    with pytest.raises(Exception, match="needs b batch x K x N"):
        torch.ops.warpy.bmm.default(q, q, None)


def test_gemm_compiles_to_the_mm_op_of_b_transposed() -> None:
    torch._dynamo.reset()
    x, w = torch.zeros(8, 64, dtype=torch.bfloat16, device="meta"), torch.zeros(32, 64, dtype=torch.bfloat16, device="meta")
    explained = torch._dynamo.explain(lambda x, w: warpy.gemm(x, w, activation="relu"))(x, w)
    assert explained.graph_break_count == 0 and "torch.ops.warpy.mm.default" in explained.graphs[0].code
