"""The probe kernels of issue 13 on the CPU: each assembles for its targets, ptxas emits what it is
for (HGMMA with A from registers, UTCHMMA with A from tensor memory and STTM, a BRX jump table for
the dispatch chain), and the checker with values computes the host's expectation (numpy's product
for the register-operand MMAs). The GPU test's host side (tests/gpu/test_isa_gpu.py: the edge-case
table, the checker's words, the comparison) runs here too, with the checker's words standing in for
the GPU's and then a perturbed copy that it must refuse."""

from __future__ import annotations

import re
from types import ModuleType

import numpy as np
import pytest

from warpy.check.report import check_kernel
from warpy.kernels.probes import PROBES, ProbeExpectation
from warpy.lift.lifter import build

from gpu_scripts import gpu_script

def _sass(name: str, arch: str) -> list[str]:
    from warpy.lift.disasm import disassemble

    d = disassemble(build(PROBES[name].build(arch).kernel(), arch))  # any error fails (nvdisasm is a dependency)
    return [i.text() for k in d.kernels for i in k.instructions]


def test_the_rs_hgmma_takes_a_from_registers() -> None:
    sass = _sass("hgmma_rs", "sm_90a")
    rs = [s for s in sass if re.match(r"HGMMA\.64x64x16\.F32\.BF16 R\d+, R\d+, gdesc\[UR\d+\]", s)]
    assert len(rs) == 4, sass


def test_the_ts_umma_takes_a_from_tensor_memory() -> None:
    sass = _sass("umma_ts", "sm_100a")
    assert sum(bool(re.search(r"UTCHMMA tmem\[UR\d+\], gdesc\[", s)) for s in sass) == 4, sass
    assert any(s.startswith("STTM.x32 ") for s in sass)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_the_dispatch_chain_becomes_an_indexed_branch(arch: str) -> None:
    sass = _sass("dispatch", arch)
    assert any(s.startswith("BRX ") for s in sass), sass
    assert any("c[0x2][" in s for s in sass)  # the jump table, in constant bank 2


@pytest.mark.parametrize("name,arch", [(n, a) for n in ("hgmma_rs", "umma_ts", "counters", "dispatch") for a in PROBES[n].archs])
def test_the_checker_computes_the_host_expectation(name: str, arch: str) -> None:
    pr = PROBES[name]
    assert pr.host is not None
    expect = ProbeExpectation(pr.host(np.random.default_rng(20261129)))
    rep = check_kernel(pr.build(arch).kernel(), None, values=True, expect=expect)
    assert rep.ok, rep.text()
    assert rep.values_checked > 0 and rep.values_wrong == 0


def test_a_wrong_register_fragment_is_seen_in_the_values() -> None:
    """The RS HGMMA's values depend on the fragment: A handed over in another thread order is wrong."""
    pr = PROBES["hgmma_rs"]
    assert pr.host is not None
    case = pr.host(np.random.default_rng(1))
    shuffled = case.arrays["afrag"][::-1].copy()  # thread t gets thread 127 - t's fragments
    bad = ProbeExpectation(type(case)({**case.arrays, "afrag": shuffled}, case.expected))
    rep = check_kernel(pr.build("sm_90a").kernel(), None, values=True, expect=bad)
    assert rep.values_wrong > 0


def _gpu_test_module() -> ModuleType:
    return gpu_script("test_isa_gpu.py", "isa_gpu")


def test_the_gpu_tests_host_side_runs_and_compares() -> None:
    g = _gpu_test_module()
    inp = g.table()
    assert inp.shape == (64, 8)
    want = g.checker_words(inp)
    assert want.shape == (64, 56) and len(g.SLOTS) == 56
    assert g.compare(inp, want, want) == []
    # every edge class reaches the table: NaN, both infinities, subnormals, both zeros
    f = set(inp[:, :4].reshape(-1).tolist())
    assert {0x7FC00000, 0x7F800000, 0xFF800000, 0x00000001, 0x80000000} <= f
    # a GPU word one ulp off, and a MUFU word past its bound, are both reported, by slot
    got = want.copy()
    got[5, 2] ^= 1
    got[7, 10] = (int(want[7, 10]) + 1000) & 0xFFFFFFFF if int(want[7, 10]) & 0x7FFFFFFF not in (0, 0x7F800000) else 0x3F800000
    bad = g.compare(inp, got, want)
    assert {b["slot"] for b in bad} >= {"FMUL f0*f1"} and any(b["slot"].startswith("MUFU.EX2") for b in bad)
    # the values the checker computes for math_table's words, spot-checked against the references
    import struct

    f0 = [struct.unpack("<f", struct.pack("<I", int(x)))[0] for x in inp[:, 0]]
    for t in range(64):
        if f0[t] == f0[t] and abs(f0[t]) < 2**31:  # F2I.TRUNC: C's conversion
            assert int(np.uint32(want[t, 32]).view(np.int32)) == int(f0[t])
        with np.errstate(all="ignore"):
            total = np.float32(f0[t]) + np.float32(g._f32(inp[t, 1]))  # FADD: numpy's, NaN canonical
        assert int(want[t, 0]) == (0x7FFFFFFF if total != total else int(np.float32(total).view(np.uint32)))
