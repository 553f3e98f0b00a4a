"""The sm_90a decode-attention bodies (kernels/mega_attention.py) on the host: their one-line
refusals, and the checker running the interpreter with them on every CTA with values: no protocol,
ordering or coverage problem, every output value within the tolerance. attn-small (T = 3, G = 2: six
rows, two chunks of one key block, the warpgroups' merge) in the default run; with WARPY_SLOW=1 the
other paths: one row at T = 1 and G = 1 over a cache of 77 rows (graphs/attn_g1.py: a block past the
length), T = 16 at G = 4 (graphs/attn_t16.py: all 64 rows of the wgmma), head_dim 128 not causal
(graphs/attn_d128.py: the warpgroups' columns split) and a combine of three boxes
(graphs/attn_combine3.py: G = 8); and the interpreter's seeded faults still caught on attn-small."""

from __future__ import annotations

import os
from typing import Any

import pytest

from warpy.kernels import mega, mega_ops
from warpy.kernels.mega_attention import Attention, AttentionCombine, refuse_attention
from warpy.mega import fields as F
from warpy.mega import build, encode
from warpy.mega.encode import decode
from warpy.mega.examples import decode_attention

SLOW = bool(os.environ.get("WARPY_SLOW"))
GRAPHS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "graphs")


def test_the_bodies_are_in_the_table() -> None:
    table = mega_ops.bodies()
    assert isinstance(table[F.ATTENTION], Attention) and isinstance(table[F.ATTENTION_COMBINE], AttentionCombine)


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
    (dict(tokens=16, heads=32, kv_heads=2, head_dim=128), "decode attention of 256 query rows a KV head (the sm_90a "
     "body's wgmma takes 64: T·G)"),
    (dict(tokens=16, heads=32, kv_heads=8, head_dim=128), "decode attention whose partial of 64 rows is more than a "
     "page (one box)"),
])
def test_refusals_in_one_line(kw: dict[str, Any], msg: str) -> None:
    why = refuse_attention(_fields(**kw))
    assert why is not None and msg in why and "\n" not in why


def test_a_box_of_keys_not_whole_key_blocks_is_refused() -> None:
    f = dict(_fields())
    f["k_step"] = 96  # (the split rule makes boxes of whole blocks of 64 rows: a wgmma's N)
    f["op2.box_16"] = f["op3.box_16"] = 96 * f["tile_n"] * 2 // 16
    why = refuse_attention(f)
    assert why == "decode-attention K boxes of 96 rows (the sm_90a body takes whole blocks of 64 within a page)"


def _problems(rep: Any) -> list[str]:
    return [f"{k}: {m}" for k, d in rep.problems.msgs.items() for m in d]


def test_checker_runs_the_bodies_on_every_cta_with_values() -> None:
    rep = mega.check_launch(mega.MegaProblem("attn-small"), values=True)
    assert _problems(rep) == [] and rep.stores > 0
    assert rep.values_checked == 3 * 4 * 64 and rep.values_wrong == 0


@pytest.mark.skipif(not SLOW, reason="the other paths of the partials body and the combine: 1-6 min each (WARPY_SLOW=1)")
@pytest.mark.parametrize("graph,values", [("attn_g1.py", 1 * 2 * 64), ("attn_t16.py", 16 * 8 * 64),
                                          ("attn_d128.py", 5 * 8 * 128), ("attn_combine3.py", 2 * 8 * 128)])
def test_checker_runs_the_other_paths_with_values(graph: str, values: int) -> None:
    rep = mega.check_launch(mega.MegaProblem(os.path.join(GRAPHS, graph)), values=True)
    assert _problems(rep) == [] and rep.stores > 0
    assert rep.values_checked == values and rep.values_wrong == 0


@pytest.mark.skipif(not SLOW, reason="the seeded faults on attn-small take a minute (WARPY_SLOW=1)")
@pytest.mark.parametrize("fault", ["no-release", "early-page-free", "drop-arrive", "wrong-epoch"])
def test_seeded_faults_are_caught(fault: str) -> None:
    problem = mega.MegaProblem("attn-small")
    # (wrong-epoch is seen where the waiter overtakes its producer: CTA 1 runs slowly)
    rep = mega.check_launch(problem, mega.configure(problem, f"fault={fault}"), values=False,
                            slow=1 if fault == "wrong-epoch" else None)
    assert _problems(rep), fault


@pytest.mark.parametrize("per_box", [40, pytest.param(17, marks=pytest.mark.skipif(not SLOW, reason="WARPY_SLOW=1 (20 s)"))])
def test_the_combine_walks_more_chunks_than_a_warp_has_lanes(monkeypatch: pytest.MonkeyPatch, per_box: int) -> None:
    """The combine's lanes take a group of 32 chunks at once (the maximum, each chunk's weight) and
    its sums walk the group's chunks in order: 40 chunks of 64 rows in one box (a group of 32, then
    one of 8), or in three boxes of 17, 17 and 6; every CTA with values against numpy."""
    from warpy.memo import forget_all
    from warpy.mega import tiling

    def forced(*args: Any) -> tiling.AttentionSplit:
        boxes = -(-40 // per_box)
        return tiling.AttentionSplit(40, 64, 64, 1, per_box if boxes > 1 else 40, 0.0)

    monkeypatch.setattr(tiling, "attention_split", forced)
    forget_all()
    try:
        problem = mega.MegaProblem(os.path.join(GRAPHS, "attn_chunks40.py"))
        cfg = mega.configure(problem, "fresh=0")  # (one partial node: the forced split is all of its chunks)
        node = [n for n in mega.plan(problem, cfg).schedule.program.nodes if n.kind == "attention_combine"][0]
        assert node.splits == 40
        rep = mega.check_launch(problem, cfg, values=True)
        assert _problems(rep) == [] and rep.values_checked == 1 * 2 * 64 and rep.values_wrong == 0
    finally:
        forget_all()


def test_a_chunk_nothing_writes_copies_its_keys_before_the_waits() -> None:
    """attn-small's chunks below the appended rows read K and V that nothing in the launch writes
    (their `early` bits 2 and 3), the last chunk not; the attention body's `load_early` copies the
    early chunks' K and V boxes before the counter waits (and q after them), which the checker's run
    of every CTA with values (the test above) proves ordered."""
    from warpy.mega.encode import decode

    problem = mega.MegaProblem("attn-small")
    pl = mega.plan(problem, mega.choose(problem))
    early = sorted({f["early"] & 0xC for f in decode(pl.encoded.words) if f["opcode"] == F.ATTENTION})
    assert early == [0, 0xC]


@pytest.mark.parametrize("graph,values", [("attn-small", 3 * 4 * 64), pytest.param(
    os.path.join(GRAPHS, "attn_t16.py"), 16 * 8 * 64, marks=pytest.mark.skipif(not SLOW, reason="WARPY_SLOW=1 (25 s)"))])
def test_fresh_rows_are_clean_with_values(graph: str, values: int) -> None:
    """`fresh=1`: the old rows' partial node (every K and V copy early) and the appended rows' node
    writing one partials tensor, the combine over both; every CTA with values."""
    problem = mega.MegaProblem(graph)
    cfg = mega.configure(problem, "fresh=1")
    kinds = [n.kind for n in mega.plan(problem, cfg).schedule.program.nodes]
    assert kinds.count("attention") == 2
    rep = mega.check_launch(problem, cfg, values=True)
    assert _problems(rep) == [] and rep.values_checked == values and rep.values_wrong == 0
