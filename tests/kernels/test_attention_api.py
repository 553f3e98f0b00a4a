"""`warpy.attention` without a GPU: torch tensors played by a fake (its module named torch: shape,
strides, data pointer, device, type), the driver by tests/fake_cuda_driver.py. The real plan is
built and assembled; the launch binds the header's tensor maps q, k, v, o to the tensors' memory,
with the header's geometry, on the tensors' current stream; the memory layout is read off the
strides (contiguous: bhsd; a transposed view of contiguous (B, S, H, D): bshd); the output is
allocated in q's layout; what the kernel cannot read is refused in one line before any GPU work.
The GPU runs are tests/gpu/test_attention_gpu.py."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import warpy
import warpy.attention as wa
from warpy.errors import WarpyError
from warpy.kernels import attention as family
from fake_cuda_driver import fake_launches

_addresses = itertools.count(0x7F00_0000_0000, 0x1000_0000)


class Dtype:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"


BF16, F16 = Dtype("bfloat16"), Dtype("float16")


class Tensor:
    """What warpy.attention reads off a torch tensor."""

    def __init__(self, shape: tuple[int, ...], dtype: Dtype = BF16, strides: tuple[int, ...] | None = None,
                 ptr: int | None = None, device: str = "cuda") -> None:
        self.shape = tuple(shape)
        self.dtype = dtype
        self._strides = strides if strides is not None else _contiguous(self.shape)
        self._ptr = next(_addresses) if ptr is None else ptr
        self.device = SimpleNamespace(type=device, index=0 if device == "cuda" else None)
        self.requires_grad = False

    def stride(self) -> tuple[int, ...]:
        return self._strides

    def data_ptr(self) -> int:
        return self._ptr

    def numel(self) -> int:
        return int(np.prod(self.shape))

    def element_size(self) -> int:
        return 2

    def transpose(self, a: int, b: int) -> "Tensor":
        sh, st = list(self.shape), list(self._strides)
        sh[a], sh[b], st[a], st[b] = sh[b], sh[a], st[b], st[a]
        return Tensor(tuple(sh), self.dtype, tuple(st), self._ptr, self.device.type)

    def view(self, *shape: int) -> "Tensor":
        assert all(s == w for s, w, n in zip(self._strides, _contiguous(self.shape), self.shape) if n != 1), "not a view"
        return Tensor(tuple(shape), self.dtype, None, self._ptr, self.device.type)


Tensor.__module__ = "torch"


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SimpleNamespace:
    fake = fake_launches(monkeypatch, tmp_path)  # the kernel's header goes in fake.header, for the launches' arguments
    monkeypatch.setattr(wa, "_launches", wa.Launches())
    torch = SimpleNamespace(bfloat16=BF16, float16=F16, empty=lambda shape, dtype, device: Tensor(shape, dtype),
                            _C=SimpleNamespace(_cuda_getCurrentRawStream=lambda index: 5))
    monkeypatch.setitem(sys.modules, "torch", torch)
    return fake


B, H, S, D = 4, 16, 4096, 128  # the problem test_attention.py assembles (ptxas's cache keeps its cubin)


def test_bshd_views_launch_bound_by_the_header(gpu: SimpleNamespace) -> None:
    q, k, v = (Tensor((B, S, H, D)).transpose(1, 2) for _ in range(3))  # (B, H, S, D) views of (B, S, H, D)
    prob = family.problem(B, H, S, D, causal=True)
    gpu.header.append(wa.launches().plan(prob).header)
    o = warpy.attention(q, k, v, causal=True)
    assert o.shape == (B, H, S, D) and o.stride() == q.stride()  # q's layout, torch's shape
    (first,) = gpu.launches
    h = gpu.header[0]
    assert first["grid"] == h.grid and first["block"] == (h.threads, 1, 1) and first["smem"] == h.dynsmem
    assert first["stream"] == 5  # the tensors' current stream
    assert [first[x] for x in ("q", "k", "v", "o")] == [t.data_ptr() for t in (q, k, v, o)]
    assert [box for box, _ in gpu.encoded] == [h.tmap(x) for x in ("q", "k", "v", "o")]
    # again with out= and the same tensors: nothing re-encoded, the same arguments
    assert warpy.attention(q, k, v, causal=True, out=o) is o
    assert gpu.launches[1] == first and len(gpu.encoded) == 4


def test_contiguous_tensors_are_bhsd_and_flash_attn_tensors_bshd(gpu: SimpleNamespace) -> None:
    for layout, shape in ((None, (2, 4, 100, 64)), ("bshd", (2, 100, 4, 64))):
        q, k, v = Tensor(shape), Tensor(shape), Tensor(shape)
        call = wa.check_call(q, k, v, layout=layout)
        assert call.problem is not None
        assert call.problem.layout == ("bhsd" if layout is None else "bshd")
        assert (call.problem.B, call.problem.H_q, call.problem.S_q, call.problem.D) == (2, 4, 100, 64)
        o = wa._new_output(call)
        assert o.shape == shape and o.stride() == _contiguous(shape)
    gqa = wa.check_call(Tensor((1, 8, 50, 128)), Tensor((1, 2, 70, 128)), Tensor((1, 2, 70, 128)), scale=0.3)
    assert gqa.problem is not None and (gqa.problem.H_kv, gqa.problem.S_kv, gqa.problem.scale) == (2, 70, 0.3)
    empty = wa.check_call(Tensor((0, 8, 50, 128)), Tensor((0, 2, 70, 128)), Tensor((0, 2, 70, 128)))
    assert empty.empty and warpy.attention(Tensor((0, 8, 50, 128)), Tensor((0, 2, 70, 128)),
                                           Tensor((0, 2, 70, 128))).shape == (0, 8, 50, 128)


def test_one_head_or_one_position_is_in_either_layout() -> None:
    """With H = 1 or S = 1, (B, H, S, D) and (B, S, H, D) memory are the same bytes: such an operand
    takes the layout of the others (here k and v have one KV head, q eight heads as bshd views)."""
    q = Tensor((2, 50, 8, 64)).transpose(1, 2)
    k, v = (Tensor((2, 70, 1, 64)).transpose(1, 2) for _ in range(2))  # dense as bhsd too
    call = wa.check_call(q, k, v)
    assert call.problem is not None and call.problem.layout == "bshd" and call.k.layout == call.v.layout == "bshd"
    contiguous = wa.check_call(Tensor((2, 8, 50, 64)), Tensor((2, 1, 70, 64)), Tensor((2, 1, 70, 64)))
    assert contiguous.problem is not None and contiguous.problem.layout == "bhsd"
    one = wa.check_call(*(Tensor((1, 1, 64, 64)) for _ in range(3)))  # every operand either: q's reading
    assert one.problem is not None and {one.q.layout, one.k.layout, one.v.layout} == {one.problem.layout}


@pytest.mark.parametrize("make,match", [
    (lambda: (Tensor((1, 2, 64, 64), F16),) * 3, "bf16"),
    (lambda: (Tensor((1, 2, 64, 64), device="cpu"),) * 3, "not on the GPU"),
    (lambda: (Tensor((1, 2, 64, 96)),) * 3, "head_dim"),
    (lambda: (Tensor((1, 3, 64, 64)), Tensor((1, 2, 64, 64)), Tensor((1, 2, 64, 64))), "divide"),
    (lambda: (Tensor((1, 2, 64, 64), strides=(16384, 64, 256, 2)),) * 3, "strides"),
    (lambda: (Tensor((1, 2, 64, 64)), Tensor((1, 2, 64, 64)).transpose(1, 2).transpose(1, 2),
              Tensor((1, 64, 2, 64)).transpose(1, 2)), "one layout"),
    (lambda: (Tensor((2, 64, 64)),) * 3, "dimensions"),
    (lambda: (Tensor((1, 2, 64, 64)), Tensor((1, 2, 0, 64)), Tensor((1, 2, 0, 64))), "no keys"),
])
def test_what_the_kernel_cannot_read_is_refused_in_one_line(make: Any, match: str) -> None:
    with pytest.raises(WarpyError, match=match) as e:
        wa.check_call(*make())
    assert "\n" not in str(e.value)


def test_an_output_sharing_memory_with_an_input_is_refused() -> None:
    q = Tensor((1, 2, 64, 64))
    with pytest.raises(WarpyError, match="shares memory with q"):
        wa.check_call(q, Tensor((1, 2, 64, 64)), Tensor((1, 2, 64, 64)), out=q)


def test_warpy_attention_is_the_module_and_calls_attention() -> None:
    assert warpy.attention is wa and callable(warpy.attention) and "attention" in dir(warpy)
    with pytest.raises(WarpyError, match="torch GPU tensors"):
        warpy.attention([1], [2], [3])


def test_bench_with_a_configuration_launches_that_plan_on_the_tensors(gpu: SimpleNamespace) -> None:
    """`warpy bench attention --config ...`: warpy's side is the configured plan (here the
    transposers' version, `v_mn=0`), bound to the benchmark's (B, S, H, D) tensors, on its stream."""
    from warpy.kernels.attention_bench import _configured_launcher, plan_for

    config = "v_mn=0,k_stages=2,v_stages=2,t_stages=1"  # (less shared memory than the rule's: told apart below)
    prob = family.problem(B, H, S, D, causal=True)
    q, k, v, o = (Tensor((B, S, H, D)) for _ in range(4))
    run = _configured_launcher(prob, config, q, k, v, o, 9)
    h = plan_for(prob, config).header
    gpu.header.append(h)
    assert "vmn" not in h.kernel and "vmn" in wa.launches().plan(prob).header.kernel  # (not the rule's program)
    for i in range(2):
        run(i)
    assert [(x["q"], x["k"], x["v"], x["o"], x["stream"]) for x in gpu.launches] == \
        [tuple(t.data_ptr() for t in (q, k, v, o)) + (9,)] * 2
    rule = wa.launches().plan(prob).header
    assert gpu.launches[0]["grid"] == h.grid and gpu.launches[0]["smem"] == h.dynsmem != rule.dynsmem
