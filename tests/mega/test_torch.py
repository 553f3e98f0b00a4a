"""The torch front-end (torch is an optional extra: skipped where it is absent)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install -e .[torch])")
F = torch.nn.functional

from warpy.errors import WarpyError  # noqa: E402
from warpy.mega import compile  # noqa: E402


def block(x, w, wg, wu, wd, W, b):  # type: ignore[no-untyped-def]
    h = F.rms_norm(x, (x.shape[-1],), w, eps=1e-5)
    y = x + F.linear(F.silu(F.linear(h, wg)) * F.linear(h, wu), wd)
    z = F.gelu(torch.relu(y @ W[1] + b[1]), approximate="tanh")
    return z[:, 8:16], y


def test_llama_block_matches_torch() -> None:
    torch.manual_seed(0)
    bf = torch.bfloat16
    args = [torch.randn(4, 64, dtype=bf), torch.randn(64, dtype=bf), torch.randn(128, 64, dtype=bf) / 8,
            torch.randn(128, 64, dtype=bf) / 8, torch.randn(64, 128, dtype=bf) / 8, torch.randn(3, 64, 64, dtype=bf) / 8,
            torch.randn(3, 64, dtype=bf)]
    c = compile(block)
    for got, want in zip(c(*args), block(*args)):
        assert got.shape == want.shape and got.dtype == bf
        assert (got.float() - want.float()).abs().max() <= 2 ** -5 * max(1.0, want.float().abs().max().item())
    kinds = [n.describe() for n in c.schedule.program.nodes]
    assert kinds[0] == "rmsnorm eps=1e-05" and "gemm x·W + bias, relu" in kinds


def test_unmapped_op_and_graph_break_are_one_line() -> None:
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    with pytest.raises(WarpyError) as e:
        compile(lambda x: torch.sin(x))(x)
    assert "test_torch.py:" in str(e.value) and "aten op sin.default has no megakernel mapping" in str(e.value)

    def breaks(x):  # type: ignore[no-untyped-def]
        print("a graph break")
        return torch.relu(x)

    with pytest.raises(WarpyError) as e:
        compile(breaks)(x)
    assert "graph break" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(WarpyError) as e:
        compile(lambda x: torch.relu(x.float()))(x)
    assert "fp32" in str(e.value) and "\n" not in str(e.value)
