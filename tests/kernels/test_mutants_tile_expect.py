"""Tests written to kill the tile group's mutants in the GEMM expectation (`kernels/gemm.py`:
`GemmExpectation.initial` / `compare`, `_output_source`, `_rows`, `_elements`): compare is run on a
run made by hand (`warpy.check.expect.RunData`: the header's output buffer, the global memory's bytes,
which were written, which hold partial sums), its operands laid out in memory by the layout the
problem documents (row pitches, MN-major operands, a batch's strides), C written with products summed
here one by one, and its verdict checked literally: the elements compared, the wrong ones, the partial
ones and each message word for word. The whole-kernel tests (checker runs with --values) reach compare
too, but take seconds a mutant."""

from __future__ import annotations

from typing import Optional

import attrs
import numpy as np
import pytest

from warpy.kernels.gemm import FAMILY, GemmExpectation, GemmProblem, _output_source, _rows
from warpy.kernels.gemm_epilogue import Epilogue
from warpy.layout.tma import TmaBox
from warpy.numeric import bits16, from_bits, round_to, to_bits
from warpy.target import dtype_bytes


@attrs.frozen
class _Buf:
    name: str
    space: str
    source: Optional[str]


@attrs.frozen
class _Map:
    name: str


@attrs.frozen
class _Header:
    buffers: tuple[_Buf, ...] = ()
    tmaps: tuple[_Map, ...] = ()


@attrs.define
class _Run:
    h: _Header
    gmem: dict[str, np.ndarray]
    gwritten: dict[str, np.ndarray]
    greduced: dict[str, np.ndarray]


def _ints(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.integers(-3, 4, size=shape).astype(np.int64)


def _product(a: np.ndarray, b: np.ndarray) -> list[list[int]]:
    """a (M x K) times b (N x K) transposed, summed one product at a time in Python integers."""
    return [[sum(int(a[r, k]) * int(b[c, k]) for k in range(a.shape[1])) for c in range(b.shape[0])]
            for r in range(a.shape[0])]


def _raw(values: np.ndarray, dtype: str) -> np.ndarray:
    """values as the bytes of `dtype` (fp32, a 16-bit or an 8-bit type)."""
    if dtype == "fp32":
        return values.astype(np.float32).view(np.uint8)
    return np.asarray(to_bits(values.astype(np.float32), dtype)).view(np.uint8)


def _lay(p: GemmProblem, mats: list[np.ndarray], which: str) -> np.ndarray:
    """The elements of A's or B's memory: each matrix of the batch (rows x K) at its stride, each row of
    K (K-major) or of M / N (MN-major: the matrix stored transposed) at its pitch, zeros between."""
    lda, ldb, _ = p.pitches
    sa, sb, _ = p.batch_strides
    pitch, stride, mn = (lda, sa, p.a_major == "MN") if which == "a" else (ldb, sb, p.b_major == "MN")
    flat = np.zeros(stride * p.batch + pitch * max(p.K, p.M, p.N) + 64, dtype=np.float64)
    for i, m in enumerate(mats):
        stored = m.T if mn else m
        for r in range(stored.shape[0]):
            flat[i * stride + r * pitch: i * stride + r * pitch + stored.shape[1]] = stored[r]
    return flat


def _run(p: GemmProblem, c: np.ndarray, written: np.ndarray, reduced: Optional[np.ndarray] = None, seed: int = 1,
         header: Optional[_Header] = None, extra: Optional[dict[str, np.ndarray]] = None) -> tuple[_Run, list[list[list[int]]]]:
    """A run of `p` whose C holds `c` (batch x M x N values) where `written` (batch x M x N), partial sums
    where `reduced`; the exact products of its A and B alongside."""
    rng = np.random.default_rng(seed)
    a = [_ints(rng, p.M, p.K) for _ in range(p.batch)]
    b = [_ints(rng, p.N, p.K) for _ in range(p.batch)]
    eb = dtype_bytes(p.out_dtype)
    _, _, ldc = p.pitches
    sc = p.batch_strides[2]
    size = sc * p.batch + ldc * p.M + 32
    cmem = np.zeros(size, dtype=np.float64)
    wmem = np.zeros(size, dtype=bool)
    rmem = np.zeros(size, dtype=bool)
    for i in range(p.batch):
        for r in range(p.M):
            at = i * sc + r * ldc
            cmem[at: at + p.N] = c[i, r]
            wmem[at: at + p.N] = written[i, r]
            if reduced is not None:
                rmem[at: at + p.N] = reduced[i, r]
    gmem = {"a": _raw(_lay(p, a, "a"), p.dtype), "b": _raw(_lay(p, b, "b"), p.b_type), "out": _raw(cmem, p.out_dtype),
            **(extra or {})}
    run = _Run(header or _Header(buffers=(_Buf("c", "global", "out"),)), gmem,
               {"out": np.repeat(wmem, eb)}, {"out": np.repeat(rmem, eb)})
    return run, [_product(a[i], b[i]) for i in range(p.batch)]


def _exact(p: GemmProblem, seed: int = 1) -> np.ndarray:
    """C of `p` as the exact products (batch x M x N), rounded once to C's type."""
    _, prods = _run(p, np.zeros((p.batch, p.M, p.N)), np.zeros((p.batch, p.M, p.N), dtype=bool), seed=seed)
    return round_to(np.array(prods, dtype=np.float64), p.out_dtype)


PROBLEMS = [
    GemmProblem(3, 5, 16),
    GemmProblem(3, 5, 16, lda=24, ldb=32, ldc=8),
    GemmProblem(8, 16, 24, a_major="MN", b_major="MN"),
    GemmProblem(8, 16, 24, a_major="MN", lda=16, ldb=32),
    GemmProblem(8, 8, 16, "fp16", "fp16", b_major="MN", ldc=16),
    GemmProblem(2, 5, 16, batch=3),
    GemmProblem(2, 5, 16, "bf16", "bf16", batch=2, stride_a=48, stride_b=96, stride_c=24, ldc=16),
    GemmProblem(8, 8, 16, batch=2, a_major="MN", b_major="MN"),
    GemmProblem(4, 8, 32, "e4m3", "bf16"),
    GemmProblem(4, 8, 32, "e4m3", "fp32", b_dtype="e5m2", ldc=12),
]


@pytest.mark.parametrize("p", PROBLEMS, ids=str)
def test_compare_passes_the_exact_product_wherever_the_layout_puts_it(p: GemmProblem) -> None:
    want = _exact(p)
    written = np.ones(want.shape, dtype=bool)
    run, _ = _run(p, want, written)
    v = GemmExpectation(p).compare(run)
    assert (v.checked, v.wrong, v.partial, v.messages) == (p.batch * p.M * p.N, 0, 0, [])
    assert np.array_equal(v.data["c"], want.reshape(p.batch * p.M, p.N).astype(np.float32))
    assert v.data["c"].dtype == np.float32
    assert v.data["written"].shape == (p.batch * p.M, p.N) and v.data["written"].all()
    assert v.data["a"].shape == (p.batch * p.M, p.K)
    assert v.data["b"].shape == ((p.batch if p.batch > 1 else 1) * p.N, p.K)


@pytest.mark.parametrize("p", PROBLEMS, ids=str)
def test_compare_finds_one_wrong_element_and_names_it(p: GemmProblem) -> None:
    want = _exact(p)
    bad = want.copy()
    i, r, c = p.batch - 1, p.M - 1, 1
    bad[i, r, c] += 8
    run, _ = _run(p, bad, np.ones(want.shape, dtype=bool))
    v = GemmExpectation(p).compare(run)
    n = p.batch * p.M * p.N
    assert (v.checked, v.wrong, v.partial) == (n, 1, 0)
    assert v.messages == [f"values: 1 of {n} elements of C differ from numpy, first C[{i * p.M + r}, {c}] = "
                          f"{bad[i, r, c]} where numpy has {want[i, r, c]}"]


def test_compare_literal_products() -> None:
    """The product itself, pinned: A and B of ones and twos give C = 2 K everywhere (not numpy's word)."""
    p = GemmProblem(2, 3, 8)
    raw_a = bits16(np.ones(16, dtype=np.float32), "bf16").view(np.uint8)
    raw_b = bits16(np.full(24, 2.0, dtype=np.float32), "bf16").view(np.uint8)
    c = np.full(6, 16.0, dtype=np.float32)
    run = _Run(_Header(tmaps=(_Map("a"), _Map("c"))), {"a": raw_a, "b": raw_b, "c": c.view(np.uint8)},
               {"c": np.ones(24, dtype=bool)}, {"c": np.zeros(24, dtype=bool)})
    v = GemmExpectation(p).compare(run)
    assert (v.checked, v.wrong, v.messages) == (6, 0, [])
    c[4] = 15.0
    v = GemmExpectation(p).compare(run)
    assert v.messages == ["values: 1 of 6 elements of C differ from numpy, first C[1, 1] = 15.0 where numpy has 16.0"]
    # B under the name bt (a program that reads B transposed names it so); b first where both are
    run.gmem["bt"] = run.gmem.pop("b")
    assert GemmExpectation(p).compare(run).wrong == 1
    run.gmem["b"] = run.gmem["bt"]
    run.gmem["bt"] = np.zeros_like(run.gmem["b"])
    assert GemmExpectation(p).compare(run).wrong == 1
    c[4] = 16.0
    assert GemmExpectation(p).compare(run).wrong == 0


def test_unwritten_and_partial_elements_are_counted_not_compared() -> None:
    p = GemmProblem(4, 6, 16, ldc=8)
    want = _exact(p)
    got = want.copy()
    written = np.ones(want.shape, dtype=bool)
    written[0, 1, 2] = False           # not written: not compared
    got[0, 1, 2] = 99
    reduced = np.zeros(want.shape, dtype=bool)
    reduced[0, 3, :2] = True           # partial sums: counted apart, not compared
    got[0, 3, :2] = -50
    run, _ = _run(p, got, written, reduced)
    v = GemmExpectation(p).compare(run)
    assert (v.checked, v.wrong, v.partial, v.messages) == (24 - 1 - 2, 0, 2, [])
    assert not v.data["written"][1, 2] and not v.data["written"][3, 0] and v.data["written"][3, 2]
    # a partial sum's bytes that were not written are neither
    written[0, 3, 0] = False
    v = GemmExpectation(p).compare(_run(p, got, written, reduced)[0])
    assert (v.checked, v.partial) == (24 - 2 - 1, 1)


def test_nothing_written_is_said() -> None:
    p = GemmProblem(2, 8, 16)
    none = np.zeros((1, 2, 8), dtype=bool)
    v = GemmExpectation(p).compare(_run(p, _exact(p), none)[0])
    assert (v.checked, v.wrong, v.messages) == (0, 0, ["values: the simulated clusters wrote no element of C"])
    # only partial sums written: no message (the other CTAs finish them)
    v = GemmExpectation(p).compare(_run(p, _exact(p), ~none, ~none)[0])
    assert (v.checked, v.partial, v.messages) == (0, 16, [])


def test_stray_writes_past_a_memory_that_ends_with_the_last_row() -> None:
    """C's memory ending where its last row does (M - 1 pitches and N elements): the bytes written past
    that end are stray; the last row's own are not."""
    from warpy.kernels.gemm import _stray_writes

    p = GemmProblem(3, 6, 16, "bf16", "bf16", ldc=16)
    w = np.zeros(2 * 32 + 12 + 4, dtype=bool)
    for r in range(3):
        w[r * 32: r * 32 + 12] = True
    assert _stray_writes(w, p) == 0
    w[76:] = True
    assert _stray_writes(w, p) == 4
    w[50] = True  # row 1's gap
    assert _stray_writes(w, p) == 5
    q = GemmProblem(2, 6, 16, "bf16", "bf16", ldc=16, batch=2, stride_c=48)
    wb = np.zeros(96 + 32 + 12, dtype=bool)
    for i in range(2):
        for r in range(2):
            wb[i * 96 + r * 32: i * 96 + r * 32 + 12] = True
    assert _stray_writes(wb, q) == 0
    wb[44:96] = True  # the first matrix's last row's gap and the gap to the next matrix
    assert _stray_writes(wb, q) == 52


def test_stray_writes_are_reported_with_the_rows_geometry() -> None:
    p = GemmProblem(3, 6, 16, "bf16", "bf16", ldc=16)
    want = _exact(p)
    run, _ = _run(p, want, np.ones(want.shape, dtype=bool))
    run.gwritten["out"][(16 + 7) * 2: (16 + 9) * 2] = True  # row 1's gap: columns 7 and 8, 4 bytes
    v = GemmExpectation(p).compare(run)
    assert (v.checked, v.wrong) == (18, 0)
    assert v.messages == ["values: 4 bytes of C's memory that hold no element of C were written (C's rows are 6 bf16 "
                          "elements, 16 apart: the bytes between them belong to someone else)"]


def _literal_run(p: GemmProblem, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> _Run:
    n = c.size * dtype_bytes(p.out_dtype)
    return _Run(_Header(tmaps=(_Map("c"),)), {"a": _raw(a, p.dtype), "b": _raw(b, p.dtype), "c": _raw(c, p.out_dtype)},
                {"c": np.ones(n, dtype=bool)}, {"c": np.zeros(n, dtype=bool)})


def test_c_is_rounded_once_to_its_type() -> None:
    """A row of 3s times a row of 3s but one 2, K = 32: 9 x 31 + 6 = 285, which bf16 cannot hold (its
    steps are 2 above 256): rounded once, to the even neighbour 284; an fp32 C holds 285 exactly."""
    a = np.full(32, 3.0)
    b = np.full(32, 3.0)
    b[5] = 2.0
    p = GemmProblem(1, 1, 32, "bf16", "bf16")
    assert GemmExpectation(p).compare(_literal_run(p, a, b, np.array([284.0]))).wrong == 0
    v = GemmExpectation(p).compare(_literal_run(p, a, b, np.array([286.0])))
    assert v.messages == ["values: 1 of 1 elements of C differ from numpy, first C[0, 0] = 286.0 where numpy has 284.0"]
    p32 = GemmProblem(1, 1, 32, "bf16", "fp32")
    assert GemmExpectation(p32).compare(_literal_run(p32, a, b, np.array([285.0]))).wrong == 0
    assert GemmExpectation(p32).compare(_literal_run(p32, a, b, np.array([284.0]))).wrong == 1


def _epilogue_run(p: GemmProblem, ep: Epilogue, out: np.ndarray) -> _Run:
    """A run of `p` with the epilogue's inputs in memory (bias 1..n, c_in and residual small values)."""
    eb = dtype_bytes(p.out_dtype)
    n = p.N if ep.bias == "n" else p.M
    extra = {"bias": _raw(np.arange(1, n + 1, dtype=np.float64), p.out_dtype),
             "c_in": _raw(np.tile(np.arange(p.N, dtype=np.float64) - 2, p.M), p.out_dtype),
             "residual": _raw(np.repeat(np.arange(p.M, dtype=np.float64), p.N) * 0.5, p.out_dtype)}
    assert all(v.size == k * eb for v, k in zip(extra.values(), (n, p.M * p.N, p.M * p.N)))
    run, _ = _run(p, out, np.ones(out.shape, dtype=bool), extra=extra)
    return run


@pytest.mark.parametrize("bias", ["n", "m"])
def test_the_epilogue_s_result_with_its_inputs_from_memory(bias: str) -> None:
    """C = act(2 A·Bᵀ + 0.5 C_in + bias) + residual, the inputs read from their buffers (the bias along
    N or M), each element summed here: exact values pass, one fp32 step off passes (the epilogue's
    roundings), a quarter off fails."""
    p0 = GemmProblem(4, 8, 16)
    _, prods = _run(p0, np.zeros((1, 4, 8)), np.zeros((1, 4, 8), dtype=bool))
    ep = Epilogue(alpha=2.0, beta=0.5, bias=bias, act="relu", residual=True)
    p = attrs.evolve(p0, epilogue=ep)
    want = np.zeros((1, 4, 8))
    for r in range(4):
        for c in range(8):
            t = 2.0 * prods[0][r][c] + 0.5 * (c - 2) + (c + 1 if bias == "n" else r + 1)
            want[0, r, c] = max(t, 0.0) + 0.5 * r
    v = GemmExpectation(p).compare(_epilogue_run(p, ep, want))
    assert (v.checked, v.wrong, v.messages) == (32, 0, [])
    near = want.copy()
    near[0, 2, 3] = np.nextafter(np.float32(near[0, 2, 3]), np.float32(1e9))
    assert GemmExpectation(p).compare(_epilogue_run(p, ep, near)).wrong == 0
    off = want.copy()
    off[0, 2, 3] += 0.25
    assert GemmExpectation(p).compare(_epilogue_run(p, ep, off)).wrong == 1
    # without its inputs in memory the epilogue's terms are missing: refused as an assertion, not read as zeros
    run = _epilogue_run(p, ep, want)
    del run.gmem["bias"]
    with pytest.raises(AssertionError):
        GemmExpectation(p).compare(run)


def test_a_bf16_epilogue_result_may_round_either_way() -> None:
    """A bf16 C near a rounding step: within the tolerance either neighbour passes."""
    ep = Epilogue(alpha=0.5)
    p = GemmProblem(2, 8, 16, "bf16", "bf16", epilogue=ep)
    _, prods = _run(p, np.zeros((1, 2, 8)), np.zeros((1, 2, 8), dtype=bool))
    want = round_to(np.array(prods, dtype=np.float64) * 0.5, "bf16")
    v = GemmExpectation(p).compare(_epilogue_run(p, ep, want))
    assert (v.checked, v.wrong) == (16, 0)
    bad = want.copy()
    bad[0, 1, 1] += 4
    assert GemmExpectation(p).compare(_epilogue_run(p, ep, bad)).wrong == 1


def test_the_output_is_the_first_global_buffer_with_a_source_else_the_map_c() -> None:
    h = _Header(buffers=(_Buf("s", "shared", "x"), _Buf("g", "global", None), _Buf("c", "global", "dst"),
                         _Buf("d", "global", "other")), tmaps=(_Map("c"),))
    assert _output_source(h) == "dst"
    assert _output_source(_Header(buffers=(_Buf("s", "shared", "x"),), tmaps=(_Map("a"), _Map("c")))) == "c"
    with pytest.raises(KeyError) as e:
        _output_source(_Header(tmaps=(_Map("a"),)))
    assert e.value.args == ("no output buffer",)


def test_rows_at_a_pitch_literal() -> None:
    flat = np.arange(10)
    assert _rows(flat, 3, 2, 4).tolist() == [[0, 1], [4, 5], [8, 9]]
    assert _rows(flat, 2, 3, 5).tolist() == [[0, 1, 2], [5, 6, 7]]
    # memory ending before the last row's pitch: zeros past its end
    assert _rows(np.arange(6), 2, 4, 4).tolist() == [[0, 1, 2, 3], [4, 5, 0, 0]]


@pytest.mark.parametrize("out", ["fp32", "bf16"])
def test_initial_memory_literal_kinds(out: str) -> None:
    """The inputs are small integers of their type; the epilogue's inputs small integers of C's type;
    C, flags and workspaces start as zeros (None); 8-bit float scales positive."""
    e = FAMILY.expectation(GemmProblem(64, 64, 64, "bf16", out))
    rng = np.random.default_rng(0)
    box = TmaBox("bf16", dims=(64, 64), strides=(128,), box=(64, 64), swizzle=128)
    a = e.initial("a", box, 256, rng)
    assert a is not None and a.dtype == np.uint16 and a.size == 128
    vals = from_bits(a, "bf16")
    assert set(vals.tolist()) <= set(range(-3, 4)) and len(set(vals.tolist())) > 3
    if out == "fp32":  # C's box: not an input type
        assert e.initial("c", TmaBox(out, dims=(64, 64), strides=(256,), box=(32, 64), swizzle=128), 256, rng) is None
    assert e.initial("flags", None, 64, rng) is None
    bias = e.initial("bias", None, 64, rng)
    assert bias is not None and bias.size == 64 // dtype_bytes(out)
    assert bias.dtype == (np.float32 if out == "fp32" else np.uint16)
    assert set(from_bits(bias, out).tolist()) <= set(range(-3, 4))
    fp8 = FAMILY.expectation(GemmProblem(64, 64, 64, "e4m3", "bf16", scale_a="tensor"))
    s = fp8.initial("scale_a", None, 16, rng)
    assert s is not None and s.size == 4 and (np.asarray(s, dtype=np.float64) > 0).all()
    q = fp8.initial("a", TmaBox("e4m3", dims=(64, 64), strides=(64,), box=(128, 64), swizzle=128), 64, rng)
    assert q is not None and q.size == 64 and set(from_bits(q, "e4m3").tolist()) <= set(range(-3, 4))


def test_8_bit_products_times_their_scales() -> None:
    """e4m3 A and B with per-row scales of A (1/2, 2, 4, 1/4) and one of B (8): C = the scales times
    the products, each summed here."""
    p = GemmProblem(4, 8, 32, "e4m3", "fp32", scale_a="row", scale_b="tensor")
    sa = np.array([0.5, 2.0, 4.0, 0.25], dtype=np.float32)
    sb = np.array([8.0], dtype=np.float32)
    _, prods = _run(p, np.zeros((1, 4, 8)), np.zeros((1, 4, 8), dtype=bool))
    want = np.array([[[prods[0][r][c] * float(sa[r]) * 8.0 for c in range(8)] for r in range(4)]])
    run, _ = _run(p, want, np.ones(want.shape, dtype=bool), extra={"scale_a": sa.view(np.uint8), "scale_b": sb.view(np.uint8)})
    v = GemmExpectation(p).compare(run)
    assert (v.checked, v.wrong, v.messages) == (32, 0, [])
    unscaled, _ = _run(p, np.array(prods, dtype=np.float64), np.ones(want.shape, dtype=bool),
                       extra={"scale_a": sa.view(np.uint8), "scale_b": sb.view(np.uint8)})
    assert GemmExpectation(p).compare(unscaled).wrong == sum(1 for row in prods[0] for x in row if x != 0)


def _one(a: list[float], b: list[float], c: float, p: GemmProblem, **extra: np.ndarray) -> _Run:
    run = _literal_run(p, np.array(a), np.array(b), np.array([c]))
    run.gmem.update(extra)
    return run


def test_the_epilogue_s_fp32_tolerance_literal() -> None:
    """relu(A·Bᵀ) = 3 into fp32 C: the bound is 2⁻²² |t| for the epilogue's rounding and 2⁻²³ |ref| for
    C's, 4.5 · 2⁻²² at 3, where an fp32 step is 2⁻²²: 3 + 4 steps passes, 3 + 5 steps is wrong."""
    p = GemmProblem(1, 1, 8, "bf16", "fp32", epilogue=Epilogue(act="relu"))
    a, b = [1.0, 1.0, 1.0, 0, 0, 0, 0, 0], [1.0] * 8
    step = 2.0 ** -22
    assert GemmExpectation(p).compare(_one(a, b, 3 + 4 * step, p)).wrong == 0
    v = GemmExpectation(p).compare(_one(a, b, 3 + 5 * step, p))
    assert v.messages == [f"values: 1 of 1 elements of C differ from numpy, first C[0, 0] = {3 + 5 * step} "
                          "where numpy has 3.0"]
    # at 4 = 2^2 the bound, 2⁻²² · 4 + 2⁻²³ · 4, is exactly 3 fp32 steps of 2⁻²¹: the bound itself passes
    four, step4 = [1.0, 1.0, 1.0, 1.0, 0, 0, 0, 0], 2.0 ** -21
    assert [GemmExpectation(p).compare(_one(four, b, 4 + k * step4, p)).wrong for k in (3, 4)] == [0, 1]


def test_the_epilogue_s_bf16_result_may_take_either_neighbour() -> None:
    """relu(285) into bf16 C: 284 (rounded to even) or 286 (the other neighbour, within one bf16 step)
    pass; 282 is wrong. Without an epilogue C must be rounded once: 286 is wrong."""
    a, b = [3.0] * 32, [3.0] * 32
    b[5] = 2.0
    p = GemmProblem(1, 1, 32, "bf16", "bf16", epilogue=Epilogue(act="relu"))
    assert [GemmExpectation(p).compare(_one(a, b, c, p)).wrong for c in (284.0, 286.0, 282.0)] == [0, 0, 1]
    plain = GemmProblem(1, 1, 32, "bf16", "bf16")
    assert GemmExpectation(plain).compare(_one(a, b, 286.0, plain)).wrong == 1


def test_a_bf16_bias_of_odd_length_read_from_memory_padded_past_its_end() -> None:
    """C = relu(A·Bᵀ + bias) in bf16, no C_in or residual in memory: the bias's 7 elements (14 bytes)
    along N, or its 3 along M, read from buffers longer than the bias."""
    for along, n in (("n", 7), ("m", 3)):
        ep = Epilogue(bias=along, act="relu")
        p = GemmProblem(3, 7, 16, "bf16", "bf16", epilogue=ep)
        bias = np.arange(1, n + 1, dtype=np.float64) * 4
        _, prods = _run(p, np.zeros((1, 3, 7)), np.zeros((1, 3, 7), dtype=bool))
        want = round_to(np.array([[[max(prods[0][r][c] + bias[c if along == "n" else r], 0.0) for c in range(7)]
                                   for r in range(3)]]), "bf16")
        padded = np.concatenate([_raw(bias, "bf16"), _raw(np.full(9, 100.0), "bf16")])
        run, _ = _run(p, want, np.ones(want.shape, dtype=bool), extra={"bias": padded})
        v = GemmExpectation(p).compare(run)
        assert (v.checked, v.wrong, v.messages) == (21, 0, []), along
