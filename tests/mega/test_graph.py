"""The graph API: shapes, broadcasting, views, and every refusal as one line naming the place."""

from __future__ import annotations

import os

import numpy as np
import pytest

from warpy.errors import WarpyError
from warpy.mega import Graph, build, lower
from warpy.mega.graph import View, map_dims


def one_line(e: pytest.ExceptionInfo[WarpyError]) -> str:
    msg = str(e.value)
    assert "\n" not in msg and msg
    return msg


def test_shapes_and_views() -> None:
    g = Graph()
    w = g.input("w", (3, 64, 32))
    x = g.input("x", (10, 64))
    b = g.input("b", (3, 32))
    y = g.matmul(x, w[1]) + b[1]
    assert y.shape == (10, 32) and w[1].shape == (64, 32) and w[:, 8:24].shape == (3, 16, 32)
    assert g.linear(x, g.input("wt", (48, 64))).shape == (10, 48)
    assert (y * g.input("col", (10, 1))).shape == (10, 32)
    assert g.rmsnorm(x, g.input("nw", (64,)), 1e-6).shape == (10, 64)


def test_map_of_a_select_is_the_base_with_a_coordinate() -> None:
    """W[1] of (3, 64, 32): a rank-3 map over the whole stack (index 1 as its coordinate), no offset."""
    dims, off = map_dims(View((3, 64, 32), "bf16", (1, 2), (1, 0, 0), (64, 32)))
    assert [(m.extent, m.stride, m.view) for m in dims] == [(32, 2, 1), (64, 64, 0), (3, 4096, None)]
    assert off == 0
    dims, off = map_dims(View((24, 40), "bf16", (0, 1), (0, 8), (24, 32)))
    assert [(m.extent, m.stride) for m in dims] == [(32, 2), (24, 80)] and off == 16


@pytest.mark.parametrize("make,msg", [
    (lambda g: g.input("x", (4, 8), "fp32"), "input x is fp32; the megakernel's op bodies take bf16"),
    (lambda g: g.input("x", (4, 8), "int7"), "unknown element type 'int7'"),
    (lambda g: g.input("x", (4, 5)), "has a stride of 10 bytes; TMA needs strides that are multiples of 16"),
    (lambda g: g.relu(g.input("x", (4, 64))[:, 3:19]), "starts 6 bytes into its tensor; TMA needs a 16-byte"),
    (lambda g: g.relu(g.input("x", (4, 64))[:, 3]), "innermost dimension is not contiguous"),
    (lambda g: g.input("x", (2, 2, 2, 2, 8)), "rank 5"),
    (lambda g: g.add(g.input("a", (4, 8)), g.input("b", (3, 8))), "the shapes do not broadcast"),
    (lambda g: g.matmul(g.input("a", (4, 8)), g.input("b", (16, 8))), "K 8 != 16"),
    (lambda g: g.rmsnorm(g.input("a", (4, 8)), g.input("w", (8,)), float("nan")), "eps is a finite number"),
    (lambda g: g.input("x", (4, 8))[:, ::2], "a view takes step 1"),
])
def test_bad_input_is_one_line(make, msg: str) -> None:  # type: ignore[no-untyped-def]
    g = Graph()
    with pytest.raises(WarpyError) as e:
        make(g)
    text = one_line(e)
    assert msg in text and "test_graph.py:" in text, text


def test_cyclic_graph_and_no_output() -> None:
    g = Graph("cyc")
    g.input("x", (4, 8))
    g.node("a", "relu", ["b"])
    g.node("b", "add", ["a", "x"])
    g.output("a")
    with pytest.raises(WarpyError) as e:
        g.check()
    assert "the graph is cyclic: a -> b -> a" in one_line(e)
    g2 = Graph("empty")
    g2.relu(g2.input("x", (4, 8)))
    with pytest.raises(WarpyError) as e:
        build(g2)
    assert one_line(e) == "graph 'empty' has no output (mark the results with output(...))"


def test_by_name_form_resolves_forward_references() -> None:
    g = Graph()
    x = g.input("x", (4, 8))
    g.node("y", "add", ["z", x])
    g.node("z", "relu", [x])
    g.output("y")
    ins = g.random_inputs(1)
    (y,) = g.evaluate(ins)
    xv = ins["x"].astype(np.float64)
    assert np.array_equal(y, xv + np.maximum(xv, 0))  # x + relu(x) is exact in bf16 (2x or x)


def test_fusion_golden() -> None:
    """What the lowering fuses: bias + activation + residual into a gemm, silu·mul into silu_mul."""
    g = Graph()
    x = g.input("x", (16, 32))
    w = g.input("w", (32, 32))
    b = g.input("b", (32,))
    y = g.relu(g.matmul(x, w) + b) + x
    z = g.silu(g.add(y, y)) * y
    g.output(z)
    p = lower(g)
    assert [n.describe() for n in p.nodes] == ["gemm x·W + bias, relu + residual", "add", "silu_mul"]


@pytest.mark.parametrize("body,msg", [
    ("g = Graph('nothing')\ng.relu(g.input('x', (4, 8)))\ngraph = g\n", "error: graph 'nothing' has no output"),
    ("g = Graph('bad')\ng.input('x', (4, 8), 'fp32')\ngraph = g\n", "error: bad.py:3: input x is fp32"),
])
def test_cli_bad_graph_is_one_line(tmp_path, body: str, msg: str) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / ("bad.py" if "bad" in body else "nothing.py")
    f.write_text("from warpy.mega import Graph\n" + body)
    from warpy_in_process import run_cli

    r = run_cli("mega", "show", str(f), env=dict(os.environ, WARPY_TRACEBACK=""))
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and r.stderr.startswith(msg), r.stderr
