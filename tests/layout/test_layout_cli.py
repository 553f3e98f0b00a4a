"""`warpy layout EXPR`: the expression language and the CLI verb."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from warpy.layout import Layout, LayoutError
from warpy.layout.lang import evaluate, show, table

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("WARPY_TRACEBACK", None)
    from warpy_in_process import run_cli

    return run_cli("layout", *args, cwd=ROOT, env=env)


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("composition((6,2):(8,2), (4,3):(3,1))", "((2,2),3):((24,2),8)"),
        ("coalesce((2,(1,6)):(1,(6,2)))", "12:1"),
        ("complement(4:2, 24)", "(2,3):(1,8)"),
        ("logical_divide((4,2,3):(2,1,8), 4:2)", "((2,2),(2,3)):((4,1),(2,8))"),
        ("zipped_divide((9,(4,8)):(59,(13,1)), <3:3, (2,4):(1,8)>)", "((3,(2,4)),(3,(2,2))):((177,(13,2)),(59,(26,1)))"),
        ("zipped_divide((9,(4,8)):(59,(13,1)), (3:3, (2,4):(1,8)))", "((3,(2,4)),(3,(2,2))):((177,(13,2)),(59,(26,1)))"),
        ("composition((12,(4,8)):(59,(13,1)), (3, 8))", "(3,(4,2)):(59,(13,1))"),
        ("composition((12,(4,8)):(59,(13,1)), <_, 8>)", "(12,(4,2)):(59,(13,1))"),
        ("logical_product((2,2):(4,1), 6)", "((2,2),(2,3)):((4,1),(2,8))"),
        ("size((2,(3,4)))", "24"),
        ("idx2crd(7, (2,(2,2)))", "(1,(1,1))"),
        ("right_inverse(Layout((4,8), (8,1)))", "(8,4):(4,1)"),
        ("20:-2", "20:-2"),
        ("compose(physical((6,2):(8,2)), logical((4,3):(3,1)))", "physical ((2,2),3):((24,2),8)"),
        ("c(composite(physical((6,4):(1,8)), logical((4,6):(1,4))))", "(c0 + c1 * 4) % 6 + (c0 + c1 * 4) / 6 * 8"),
    ],
)
def test_evaluate(expr: str, expected: str) -> None:
    assert show(evaluate(expr)) == expected


@pytest.mark.parametrize(
    "expr, message",
    [
        ("composition(4:1, 8:1)", "runs past the outer layout"),
        ("complement((4,6):(1,2), 24)", "interleave or alias"),
        ("logical_divide(2:1, 32)", "larger than the layout"),
        ("exec(1)", "unknown function 'exec'"),
        ("__import__(os)", "unknown function"),
        ("composition((6,2):(8,2)", "expected '\\)'"),
        ("(4,3):(3,1) junk", "trailing text"),
        ("size(1, 2)", "bad arguments"),
        ("(4,3):((3,1):(1,1))", "only ints"),
        ("4 ; 5", "unexpected"),
        ("", "ends early"),
    ],
)
def test_bad_input_is_a_layout_error(expr: str, message: str) -> None:
    with pytest.raises(LayoutError, match=message):
        evaluate(expr)


def test_table() -> None:
    assert table(Layout((4, 3), (3, 1))).splitlines() == [
        "     0  1  2",
        "  +----------",
        "0 |  0  1  2",
        "1 |  3  4  5",
        "2 |  6  7  8",
        "3 |  9 10 11",
    ]
    # more than two modes: columns run over the other modes colexicographically
    t = table(Layout((2, 2, 2), (1, 2, 4)))
    assert t.splitlines()[2:] == ["0 | 0 2 4 6", "1 | 1 3 5 7"]
    with pytest.raises(LayoutError, match="has no table"):
        table(3)


def test_cli_verb() -> None:
    r = run("composition((6,2):(8,2), (4,3):(3,1))")
    assert r.returncode == 0 and r.stdout == "((2,2),3):((24,2),8)\n"
    r = run("composition((6,2):(8,2), (4,3):(3,1))", "--table")
    assert r.returncode == 0
    assert r.stdout.splitlines()[0] == "((2,2),3):((24,2),8)"
    assert r.stdout.splitlines()[3] == "0 |  0  8 16"
    r = run("logical_divide(2:1, 32)")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: logical_divide(2:1, 32:1): the tile is larger")
    r = run("nonsense((")
    assert r.returncode == 2 and r.stderr.startswith("error: unknown function 'nonsense'")
