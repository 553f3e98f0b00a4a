"""The issue's workloads: mlp3 and the Llama-style MLP stack schedule, validate, encode and run on the
reference VM equal to numpy on the whole graph. Llama at T = 128 and 2048 runs on the VM under
WARPY_SLOW=1 (minutes of float64 GEMMs), and so do the 16-layer stack at T = 1 (two layers here: the
hand-off between layers is the same at every layer) and the schedule at T = 2048 (T = 1, 16 and 128
schedule, validate and encode here, with their sizes pinned)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from warpy.mega import build, encode, validate, vm
from warpy.mega.examples import llama_mlp, mlp
from warpy.mega.semantics import store

SLOW = bool(os.environ.get("WARPY_SLOW"))


def weights_like(g, seed: int) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    """bf16 inputs: activations and norms ~N(0,1); stacked weights drawn as bf16 bit patterns (random
    sign and mantissa, magnitudes 2^-7..2^-4: a Llama weight's scale), fast for 800M elements."""
    rng = np.random.default_rng(seed)
    out = {}
    for v in g.inputs():
        if v.rank < 3:
            out[v.name] = store(rng.standard_normal(v.shape, dtype=np.float32), v.dtype)
        else:
            bits = (rng.integers(0, 1 << 16, size=v.shape, dtype=np.uint16) & 0x81FF) | 0x3C00
            out[v.name] = (bits.astype(np.uint32) << 16).view(np.float32)
    return out


def close_to_unfused(g, inputs, got) -> None:  # type: ignore[no-untyped-def]
    """The fused program rounds once where the graph rounds per op: within a few bf16 steps of the
    tensor's scale."""
    for a, b in zip(got, g.evaluate(inputs)):
        assert np.max(np.abs(a - b)) <= 2 ** -5 * max(1.0, float(np.max(np.abs(b))))


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_mlp3(mode: str) -> None:
    g = mlp(1024)
    s = build(g, "sm_90a", mode)
    assert (len(s.instrs), len(s.counters), s.waves, len(s.reuses)) == (384, 32, 3, 0)
    assert [t.extents for t in s.tilings] == [(64, 128)] * 3
    assert validate(s).ok
    assert encode(s).words.shape == (384, 64)
    inputs = weights_like(g, 0)
    out = vm.run(s, inputs, seed=1, calls=2)
    assert out.ok
    ref = s.program.reference(inputs)
    assert all(np.array_equal(a, b) for a, b in zip(out.outputs, ref))
    close_to_unfused(g, inputs, out.outputs)


@pytest.mark.parametrize("tokens,golden", [
    (1, (6672, 3063, 65, 72)), (16, (8448, 3064, 80, 73)), (128, (10752, 5159, 96, 73)),
    pytest.param(2048, None, marks=pytest.mark.skipif(not SLOW, reason="WARPY_SLOW=1 (T = 128 covers the same code)"))])
def test_llama_mlp_schedules_and_validates(tokens: int, golden) -> None:  # type: ignore[no-untyped-def]
    s = build(llama_mlp(tokens), "sm_90a")
    if golden is not None:
        assert (len(s.instrs), len(s.counters), s.waves, len(s.reuses)) == golden
    p = validate(s)
    assert p.ok, p.lines()
    enc = encode(s)
    assert enc.words.shape == (len(s.instrs), 64) and len(enc.maps) == 180


@pytest.mark.parametrize("tokens,layers", [(1, 2), (16, 1), (128, 1)] + (
    [(1, 16), (16, 16), (128, 16), (2048, 16)] if SLOW else []))
def test_llama_mlp_on_the_vm(tokens: int, layers: int) -> None:
    """2 layers at T = 1 here (every layer's tiles are the same rule at a given T and every layer
    hands off to the next the same way, so 2 layers cover the stack and one covers T = 16 and 128);
    the whole stack (16 layers) at every T under WARPY_SLOW=1."""
    g = llama_mlp(tokens, layers=layers)
    s = build(g, "sm_90a")
    inputs = weights_like(g, tokens)
    out = vm.run(s, inputs, seed=tokens)
    assert out.ok
    ref = s.program.reference(inputs)
    assert all(np.array_equal(a, b) for a, b in zip(out.outputs, ref))
    if layers == 1:
        close_to_unfused(g, inputs, out.outputs)


def test_sm100_from_the_same_host_side() -> None:
    """sm_100a: 74 units of 2-CTA clusters, each instruction arrives twice (once per CTA)."""
    g = mlp(1024)
    s = build(g, "sm_100a")
    assert (s.units, s.cluster) == (74, 2)
    assert {c.target for c in s.counters} == {2 * len(c.members) for c in s.counters}
    assert validate(s).ok
    inputs = weights_like(g, 3)
    out = vm.run(s, inputs, seed=3)
    assert out.ok and all(np.array_equal(a, b) for a, b in zip(out.outputs, s.program.reference(inputs)))
