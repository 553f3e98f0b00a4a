"""warpy mega show / check / mutate, the encoding round trip, and the VM's epochs and hang dump."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from warpy.errors import WarpyError
from warpy.mega import build, decode, encode, validate
from warpy.mega.cli import app
from warpy.mega.examples import EXAMPLES, mlp
from warpy.mega.mutate import clone
from warpy.mega.schedule import Wait
from warpy.mega.vm import VM, passes

runner = CliRunner()


def test_show_mlp3() -> None:
    r = runner.invoke(app, ["show", "mlp3"])
    assert r.exit_code == 0, r.output
    out = r.output
    for want in ("mlp3: sm_90a (H200), 132 units of 1 CTA, static mode", "gemm x·Wᵀ + bias, relu",
                 "128 tiles of 64x128", "waves: 3", "counters: 32 (32 from access regions, 0 for reuse)",
                 "buffers: 6 for 6 tensors; reuse: 0", "encoded: 384 instructions x 256 bytes, 8 tensor maps",
                 "validator: cannot hang, cannot race", "... 360 more (--all)"):
        assert want in out, want


def test_show_reuse_and_check_vm() -> None:
    r = runner.invoke(app, ["show", "llama-mlp", "--tokens", "1", "--arch", "sm_100a"])
    assert r.exit_code == 0 and "74 units of 2 CTAs" in r.output and "for reuse" in r.output
    assert "after" in r.output and "instructions behind" in r.output
    r = runner.invoke(app, ["check", "views", "--vm", "--mode", "dynamic"])
    assert r.exit_code == 0 and "equal to numpy on the whole graph" in r.output, r.output


def test_png_without_matplotlib_is_one_line() -> None:
    pytest.importorskip("numpy")
    try:
        import matplotlib  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
        pytest.skip("matplotlib is installed: the picture is drawn instead")
    except ImportError:
        pass
    r = runner.invoke(app, ["show", "mlp-small", "--png", "/tmp/x.png"])
    assert isinstance(r.exception, WarpyError) and str(r.exception) == "--png needs matplotlib (pip install matplotlib)"


def test_encoding_round_trip() -> None:
    s = build(EXAMPLES["views"](None), units=3)
    fields = decode(encode(s).words)
    for ins, f in zip(s.instrs, fields):
        assert f["index"] == ins.index and f["node"] == ins.node
        assert [(f[f"wait{k}.counter"], f[f"wait{k}.target"], bool(f[f"wait{k}.before_store"]))
                for k in range(f["n_waits"])] == [(w.counter, w.target, w.before_store) for w in ins.waits]
        assert [f[f"arrive{k}"] for k in range(f["n_arrives"])] == ins.arrives
        if len(ins.box) == 2 and all(hi - lo > 1 or True for lo, hi in ins.box) and f["op0.rank"] == 2:
            assert (f["op0.coord0"], f["op0.coord1"]) == (ins.box[1][0], ins.box[0][0])  # innermost first
    s2 = clone(s)
    s2.instrs[5].waits = [Wait(0, 1)] * 9
    with pytest.raises(WarpyError) as e:
        encode(s2)
    assert "waits on 9 counters; an instruction holds 8" in str(e.value)


def test_counters_need_no_reset_and_wrap() -> None:
    """Calls 1, 2, 3 on one VM, and calls whose target x epoch wraps 2^32, give the same values."""
    g = EXAMPLES["llama-small"](None)
    s = build(g, units=5)
    inputs = g.random_inputs(4)
    ref = s.program.reference(inputs)
    for epoch in (1, (1 << 32) // 13 - 1):
        machine = VM(s, seed=epoch, epoch=epoch)
        for _ in range(3):
            out = machine.run(inputs)
            assert out.ok and all(np.array_equal(a, b) for a, b in zip(out.outputs, ref))
    assert passes(5, 10, 0) and not passes(9, 10, 1) and passes((10 * 3) & 0xFFFFFFFF, 10, 3)
    assert passes(0x00000004, 0x40000001, 4) and not passes(0xFFFFFFFF, 0x40000001, 4)


def test_dropped_arrive_hangs_with_a_status_per_unit() -> None:
    s = clone(build(mlp(64, hidden=64)))
    c = s.instrs[0].arrives.pop()
    assert "hang" in validate(s).kinds()
    out = VM(s, values=False).run()
    assert out.hang and f"on counter {c}: 3 of 4" in out.hang[0] and all("waits before its" in h for h in out.hang)
