"""A TMA copy starts its innermost dimension on a 16-byte boundary. Measured on the H200
(kernels/probes.py's `tma_start_*` probes, run by tests/gpu/test_probes.py): an unswizzled load that
starts one element off raises an illegal instruction, inside the tensor or across its end; one that
starts 16 bytes off runs, and so does one whose row end is not a whole 16 bytes. The megakernel met
it as `CUDA_ERROR_ILLEGAL_INSTRUCTION` on ew-small at 6 tokens: one-row tiles of `b = a * c` read the
(T, 1) column `c`, whose map runs its innermost dimension along the rows, from row 1, 2, ...

Here: the checker reports exactly the starts the H200 refuses (`tma-inner-start`), the tiling keeps
every start of every operand aligned over a domain of column-broadcast graphs on both targets, and
encode refuses, in one line, a tiling that would not."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.check.report import check_kernel
from warpy.errors import WarpyError
from warpy.kernels.probes import PROBES, TMA_START_CASES, ProbeExpectation
from warpy.mega import tiling
from warpy.mega.encode import decode, encode
from warpy.mega.examples import elementwise
from warpy.mega.graph import Graph
from warpy.mega.schedule import build


@pytest.mark.parametrize("name", sorted(TMA_START_CASES))
def test_the_checker_reports_exactly_the_starts_the_h200_refuses(name: str) -> None:
    pr = PROBES[name]
    assert pr.host is not None
    rep = check_kernel(pr.build("sm_90a").kernel(), None, values=True,
                       expect=ProbeExpectation(pr.host(np.random.default_rng(20261202))))
    reported = [p for p in rep.text().splitlines() if "innermost dimension" in p and "not a multiple of 16" in p]
    assert bool(reported) == bool(pr.faults), rep.text()
    assert rep.values_checked == 4096 and rep.values_wrong == 0  # the box's contents are modelled either way
    if not pr.faults:
        assert rep.ok, rep.text()
    else:  # both CTAs' boxes start one element past a box multiple
        assert len(reported) == 2 and "element 1 " in reported[0] and "element 65 " in reported[1]


def _column_graph(tokens: int, hidden: int, out_column: bool) -> Graph:
    """x * c with c a (T, 1) column (its map's innermost dimension runs along the tile rows), and
    optionally a (T, 1) output too (a store whose innermost dimension runs along the rows)."""
    g = Graph("colgraph")
    x = g.input("x", (tokens, hidden))
    c = g.input("c", (tokens, 1))
    y = g.mul(x, c, name="y")
    if out_column:
        g.output(y, g.add(c, c, name="z"))
    else:
        g.output(y)
    return g


def _starts(arch: str, g: Graph, units: int) -> list[tuple[int, int, int]]:
    """(operand, innermost start, element bytes) of every copy of every instruction."""
    s = build(g, arch, units=units)
    e = encode(s)
    out = []
    for f in decode(e.words):
        for i in range(f["n_operands"]):
            if f[f"op{i}.rank"]:
                out.append((i, f[f"op{i}.coord0"], e.maps[f[f"op{i}.tmap"]].tma.elem_bytes))
        if arch == "sm_100a" and f["tile_m"] > 1:  # the pair's second CTA starts half a tile down
            half = f["tile_m"] // 2
            out.append((-1, half, 2))
    return out


@settings(max_examples=40, deadline=None)
@given(tokens=st.integers(1, 300), hidden=st.sampled_from([8, 16, 40, 96, 296]), units=st.integers(1, 132),
       out_column=st.booleans(), arch=st.sampled_from(["sm_90a", "sm_100a"]))
def test_every_innermost_start_the_tiling_makes_is_16_byte_aligned(tokens: int, hidden: int, units: int,
                                                                  out_column: bool, arch: str) -> None:
    if out_column:  # (a stored column must be whole 16 bytes: `store_clips_exactly`)
        tokens = -(-tokens // 8) * 8
    starts = _starts(arch, _column_graph(tokens, hidden, out_column), units)
    assert starts
    bad = [s for s in starts if s[1] * s[2] % 16]
    assert not bad, bad


def test_the_column_graph_at_6_tokens_keeps_the_rows_in_one_tile() -> None:
    """The failing launch of the H200 (ew-small: 6 tokens, 2 units): the mul node's tiles were one row
    each (c read from rows 1..5); now the six rows are one tile, c read from row 0."""
    s = build(elementwise(6), "sm_90a", units=2)
    mul = next(n for n in s.program.nodes if n.binop == "mul")
    assert s.tilings[mul.id].extents == (6, 40)
    assert _starts("sm_90a", elementwise(6), 2) and all(s[1] * s[2] % 16 == 0 for s in _starts("sm_90a", elementwise(6), 2))


def test_encode_refuses_an_unaligned_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the tiling's rule (as before the fix) encode refuses the launch in one line, naming the
    instruction and the tensor, instead of building a program the GPU faults on."""
    monkeypatch.setattr(tiling, "inner_axes", lambda *a, **k: {})
    with pytest.raises(WarpyError) as e:
        encode(build(elementwise(6), "sm_90a", units=2))
    msg = str(e.value)
    assert "\n" not in msg and "(c) starts its innermost dimension at element 1," in msg and "instruction" in msg
