"""The sm_90a decode-attention bodies (kernels/mega_attention.py) on the host: their one-line
refusals, and the interpreter with them run by the checker on attn-small (every CTA): no protocol,
ordering or coverage problem. Not yet in `bodies()`: the launch's buffers are declared bf16 and
the expectation knows no state tensors (kernels/mega.py, kernels/mega_common.py), so
`warpy check mega attn-small` still refuses the graph; these tests add the bodies to the table
for their own run. With WARPY_SLOW=1: head_dim 128 (graphs/attn_d128.py) and a combine of three
boxes (graphs/attn_combine3.py) likewise, and the interpreter's seeded faults still caught on
attn-small."""

from __future__ import annotations

import os
from typing import Any, Iterator

import pytest

from warpy.kernels import mega, mega_ops
from warpy.kernels.mega_attention import Attention, AttentionCombine, refuse_attention
from warpy.mega import fields as F
from warpy.mega import build, encode
from warpy.mega.encode import decode
from warpy.mega.examples import decode_attention

SLOW = bool(os.environ.get("WARPY_SLOW"))
GRAPHS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "graphs")
#: what the launch still declares wrongly (kernels/mega_common.py declares every buffer bf16; the
#: partials' buffer holds fp32): the only problems the checker reports, until the lead's fix
DTYPE = "declares bf16"


@pytest.fixture
def with_bodies(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    table = mega_ops.bodies()
    monkeypatch.setitem(table, F.ATTENTION, Attention())
    monkeypatch.setitem(table, F.ATTENTION_COMBINE, AttentionCombine())
    mega.plan.cache_clear()
    yield
    mega.plan.cache_clear()


def _fields(**kw: Any) -> dict[str, int]:
    s = build(decode_attention(**kw), "sm_90a")
    fs = decode(encode(s).words)
    return next(f for i, f in zip(s.instrs, fs) if s.program.nodes[i.node].kind == "attention")


def test_the_example_graphs_are_accepted() -> None:
    for kw in ({}, dict(tokens=16, heads=32, kv_heads=8, head_dim=64, length=8192, cache_rows=8192),
               dict(tokens=5, heads=8, kv_heads=2, head_dim=128, length=300, cache_rows=320, causal=False)):
        f = _fields(**kw)
        assert refuse_attention(f) is None, kw
    f = _fields(tokens=16, heads=32, kv_heads=8, head_dim=64, length=8192, cache_rows=8192)
    assert (f["k_stages"], f["k_step"], f["tile_m"]) == (2, 256, 64)


@pytest.mark.parametrize("kw,msg", [
    (dict(head_dim=96), "decode attention of head_dim 96 (the sm_90a body takes 64 or 128)"),
    (dict(tokens=16, heads=32, kv_heads=8, head_dim=128, length=32768, cache_rows=32768), "a decode-attention chunk "
     "of 16 K boxes (the sm_90a body takes at most 2)"),
    (dict(tokens=16, heads=32, kv_heads=2, head_dim=128), "decode attention of 256 query rows whose q box is not "
     "those rows within a page"),
    (dict(tokens=16, heads=16, kv_heads=2, head_dim=128), "decode attention whose partial of 128 rows is more than a "
     "page (one box)"),
])
def test_refusals_in_one_line(kw: dict[str, Any], msg: str) -> None:
    why = refuse_attention(_fields(**kw))
    assert why is not None and msg in why and "\n" not in why


def _problems(rep: Any) -> list[str]:
    return [f"{k}: {m}" for k, d in rep.problems.msgs.items() for m in d if DTYPE not in m]


def test_checker_runs_the_bodies_on_every_cta(with_bodies: None) -> None:
    rep = mega.check_launch(mega.MegaProblem("attn-small"), values=False)
    assert _problems(rep) == [] and rep.stores > 0


@pytest.mark.skipif(not SLOW, reason="head_dim 128 and a combine of three boxes: a minute of the checker (WARPY_SLOW=1)")
@pytest.mark.parametrize("graph", ["attn_d128.py", "attn_combine3.py"])
def test_checker_runs_the_other_paths(with_bodies: None, graph: str) -> None:
    rep = mega.check_launch(mega.MegaProblem(os.path.join(GRAPHS, graph)), values=False)
    assert _problems(rep) == [] and rep.stores > 0


@pytest.mark.skipif(not SLOW, reason="the seeded faults on attn-small take a minute (WARPY_SLOW=1)")
@pytest.mark.parametrize("fault", ["no-release", "early-page-free", "drop-arrive", "wrong-epoch"])
def test_seeded_faults_are_caught(with_bodies: None, fault: str) -> None:
    problem = mega.MegaProblem("attn-small")
    # (wrong-epoch is seen where the waiter overtakes its producer: CTA 1 runs slowly)
    rep = mega.check_launch(problem, mega.configure(problem, f"fault={fault}"), values=False,
                            slow=1 if fault == "wrong-epoch" else None)
    assert _problems(rep), fault
