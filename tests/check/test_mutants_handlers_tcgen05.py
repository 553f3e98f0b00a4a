"""The checker's tcgen05 handlers (`warpy/check/families/tcgen05.py`: UMMA, its commit, tensor-memory
allocation and free) on edits of the `umma_1cta` and `umma_2cta` probes that break exactly one rule, beside the clean
probe: the checker's whole verdict pinned, and how many problems of each kind (a message filed under
another kind, or reworded, or a second one, fails). Written against the survivors of a sampled
mutation run of the handlers' bodies (docs/testing.md: "The tcgen05 handlers, a sample"). Each case
runs in about a second."""

from __future__ import annotations

import functools

import pytest

from warpy.check.report import check_kernel
from warpy.isa.text import parse
from warpy.kernels.probes import PROBES


@functools.lru_cache(maxsize=None)
def _umma() -> str:
    return str(PROBES["umma_1cta"].build("sm_100a").kernel())


@functools.lru_cache(maxsize=None)
def _pair() -> str:
    return str(PROBES["umma_2cta"].build("sm_100a").kernel())


def _edit(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def _no_mma(*warps: int) -> list[str]:
    return [f"CTA 0 warp {w}: LDTM.x32 reads tensor-memory columns {c} that no MMA wrote" for w in warps for c in ("0..31", "32..63")]


IDESC = "UMOV zero_idesc.1, 0x8100490"  # kind::f16, bf16 A / B, fp32 D, N = 64, M = 128
A_HI = "+ UMOV umma_a.1, 0x40004040  // udesc.hi sa[0, 0]"  # layout code 2: 128-byte swizzle
B_HI = "+ UMOV umma_b.1, 0x40004040  // udesc.hi sb[0, 0]"
ALLOC = "UTCATOMSWS.FIND_AND_SET.ALIGN [tmem_slot_base], 0x40"
FREE = "UTCATOMSWS.AND tmem_base, 0x40"
DESC_CODE = "CTA 0 warp 0: UTCHMMA's {w} descriptor 0x{d:x} has layout code {c} ({why}), which the checker does not model"
OUTSIDE = "CTA 0 warp {w}: LDTM.x32 touches tensor-memory columns {c}, outside what the CTA allocated"

# name -> (edit, whole verdict, {kind: count})
CASES = {
    "clean": (None, [], {}),
    # N = 0 in the instruction descriptor: each MMA refused, so the loads read columns no MMA wrote
    "idesc-n-0": ((IDESC, "UMOV zero_idesc.1, 0x8000490"),
                  _no_mma(0) + ["CTA 0 warp 0: UTCHMMA has instruction descriptor 0x8000490 (M 128, N 0) (4 times)"]
                  + _no_mma(1, 2, 3), {"protocol": 9}),
    # B's layout code 3 (reserved): each of the four K steps' MMAs refused, with its own descriptor
    "b-layout-code-3": ((B_HI, "  UMOV umma_b.1, 0x60004040"),
                        _no_mma(0) + [DESC_CODE.format(w="B", d=0x6000404000010440 + 2 * k, c=3, why="reserved")
                                      for k in range(4)] + _no_mma(1, 2, 3), {"protocol": 12}),
    # A's layout code 1 (128-byte swizzle with 32-byte atoms)
    "a-layout-code-1": ((A_HI, "  UMOV umma_a.1, 0x20004040"),
                        _no_mma(0) + [DESC_CODE.format(w="A", d=0x2000404000010040 + 2 * k, c=1, why="128B with 32B atoms")
                                      for k in range(4)] + _no_mma(1, 2, 3), {"protocol": 12}),
    # 48 columns: not a power of two, nothing is allocated, so every use is outside the allocation
    "allocates-48-columns": ((ALLOC, ALLOC.replace("0x40", "0x30")),
                             ["CTA 0 warp 0 frees tensor-memory columns 0..63, which no allocation returned"] + _no_mma(0)
                             + ["CTA 0 warp 0: UTCATOMSWS.FIND_AND_SET.ALIGN allocates 48 tensor-memory columns: a power "
                                "of two from 32 to 512"] + _no_mma(1, 2, 3)
                             + [OUTSIDE.format(w=0, c=c) for c in ("0..31", "32..63")]
                             + ["CTA 0 warp 0: UTCHMMA touches tensor-memory columns 0..63, outside what the CTA allocated "
                                "(4 times)"]
                             + [OUTSIDE.format(w=w, c=c) for w in (1, 2, 3) for c in ("0..31", "32..63")],
                             {"protocol": 10, "memory": 9}),
    # the free names 32 of the 64 columns allocated: refused, and the CTA exits holding them
    "frees-32-of-64": ((FREE, FREE.replace("0x40", "0x20")),
                       ["CTA 0 exits with tensor-memory columns 0..63 still allocated (a tcgen05.dealloc must free them: "
                        "the next CTA on the SM cannot allocate them)",
                        "CTA 0 warp 0 frees tensor-memory columns 0..31, which no allocation returned"], {"protocol": 2}),
}


# the pair probe (`umma_2cta`: M = 256, N = 128, one commit multicast to both CTAs' acc_full)
HANG_ACC = "hang: CTA {r} warp {w} waits on acc_full[0] for the phase of parity 0: it is in phase 0, 1 of 1 arrivals to come, 0 bytes"
HANG_CLUSTER = "hang: CTA {r} warp {w} waits on the cluster barrier"
PAIR_CASES = {
    "clean": (None, [], {}),
    # M = 128 over the pair: each CTA's 64 rows fold into lanes 0..127 of the first N / 2 = 64 columns,
    # so each warp's loads of columns 64..127 read what no MMA wrote
    "pair-m-128-folds": (("UMOV zero_idesc.1, 0x10200490", "UMOV zero_idesc.1, 0x8200490"),
                         [f"CTA {r} warp {w}: LDTM.x32 reads tensor-memory columns {c} that no MMA wrote"
                          for r in (0, 1) for w in range(4) for c in ("64..95", "96..127")], {"protocol": 16}),
    # the commit's multicast mask names one CTA: the other's acc_full never completes
    "commit-to-rank-0-only": (("UMOV cta_mask, 0x3", "UMOV cta_mask, 0x1"),
                              [HANG_CLUSTER.format(r=0, w=w) for w in range(4)] + [HANG_ACC.format(r=1, w=w) for w in range(4)],
                              {"protocol": 8}),
    "commit-to-rank-1-only": (("UMOV cta_mask, 0x3", "UMOV cta_mask, 0x2"),
                              [HANG_CLUSTER.format(r=1, w=w) for w in range(4)] + [HANG_ACC.format(r=0, w=w) for w in range(4)],
                              {"protocol": 8}),
}


@pytest.mark.parametrize("name", list(PAIR_CASES))
def test_one_tcgen05_pair_rule_broken(name: str) -> None:
    edit, want, kinds = PAIR_CASES[name]
    text = _pair() if edit is None else _edit(_pair(), *edit)
    rep = check_kernel(parse(text))
    assert rep.messages(40) == want
    assert {k: rep.problems.count(k) for k in rep.problems.KINDS if rep.problems.count(k)} == kinds


@pytest.mark.parametrize("name", list(CASES))
def test_one_tcgen05_handler_rule_broken(name: str) -> None:
    edit, want, kinds = CASES[name]
    text = _umma() if edit is None else _edit(_umma(), *edit)
    rep = check_kernel(parse(text))
    assert rep.messages(40) == want
    assert {k: rep.problems.count(k) for k in rep.problems.KINDS if rep.problems.count(k)} == kinds
