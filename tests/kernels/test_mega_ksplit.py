"""The gemm tile's K split between its two warpgroups (`kernels.mega_gemm.k_split`), proven on the
host with values on every CTA: the fused gate/up gemm in the Llama MLP's 64x64 decode tile over a
fused rmsnorm, with its warpgroups splitting every K box's k16 steps (`glu_split=1`: two 64 x 64
accumulators added through the output page) and without (the column split), and a missing barrier
between the exchange's two accumulators caught (`exchange-no-barrier`)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import pytest

import warpy.mega.tiling as tiling
from warpy.kernels import mega

WIDE = os.path.join(os.path.dirname(__file__), "graphs", "glu_wide.py")


@pytest.fixture
def tiles_of_64(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The tile rule's column choices capped at 64 (the Llama MLP's 64x64 fused tile; the rule picks
    64x16 for this small graph), and the plans made under the cap forgotten after."""
    monkeypatch.setitem(tiling.GEMM_N_CHOICES, "wgmma", (64,))
    mega.plan.cache_clear()
    yield
    mega.plan.cache_clear()


@pytest.mark.parametrize("config, n", [("glu_split=1", 64), ("", 32)])
def test_the_fused_64x64_tile_is_clean_with_values(tiles_of_64: None, config: str, n: int) -> None:
    p = mega.MegaProblem(WIDE)
    cfg = mega.configure(p, config or None)
    pl = mega.plan(p, cfg)
    assert pl.launch.gemm_tiles == ((64, 64, 8, 1, 1),)  # fused, normed
    # (the gemm's code: from its tile's label to GEMM_DONE; the attention body's wgmmas are its own)
    text = str(mega.build(p, cfg).kernel())
    gemm = text[text.index("GEMM_64x64"):text.index("GEMM_DONE")]
    assert set(re.findall(r"HGMMA\.64x(\d+)x16", gemm)) == {str(n)}
    rep = mega.check_launch(p, cfg, coloured=False)
    assert rep.ok, rep.text()
    assert rep.values_checked == 128 and rep.values_wrong == 0


def test_the_split_is_the_rules_only_where_asked() -> None:
    from warpy.kernels.mega_gemm import k_split

    assert k_split(64, 64, 1, True) is None and k_split(64, 64, 1, True, glu_split=True) == "steps"
    assert k_split(64, 16, 10, False) == "boxes" and k_split(64, 16, 10, False, glu_split=True) == "boxes"
    assert k_split(64, 128, 2, False) is None  # the exchange would not fit the output page
    with pytest.raises(Exception, match="glu_split"):
        mega.configure(mega.MegaProblem("llama-small", 1, arch="sm_100a"), "glu_split=1")


def test_the_exchange_without_its_second_barrier_is_caught(tiles_of_64: None) -> None:
    """`exchange-no-barrier`: the up accumulator's chunks stored over the gate's before the other
    warpgroup has read them."""
    p = mega.MegaProblem(WIDE)
    rep = mega.check_launch(p, mega.configure(p, "glu_split=1,fault=exchange-no-barrier"), coloured=False,
                            values=False)
    assert not rep.ok
    first = rep.text().splitlines()[0]
    assert re.match(r"pages: LDS\.128, warp \d+ reads it and STS\.128, warp \d+ writes it, and nothing orders the two",
                    first), first
