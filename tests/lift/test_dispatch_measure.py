"""The dispatch measurement of docs/toolchain.md, kept reproducible: an interpreter loop dispatching
on an opcode word in N cases, as PTX three ways (an explicit `brx.idx` jump table, a chain of
`setp.eq` + `@p bra`, a binary tree of `setp.ge` + `@p bra`), assembled by ptxas for sm_90a; the
instructions from the opcode word's load to the indirect jump (or the first case) are counted.

What it shows (ptxas 12.9): `brx.idx` costs 4 instructions whatever N; the chain, for N >= 4,
becomes the same jump table with case 0 peeled off and the index clamped (8 instructions, still one
BRX), but only when each compare is a plain `setp.eq` (`setp.eq.and ... %pt` is not recognised);
the tree costs two instructions a level. `warpy.isa.units.dispatch` writes the chain."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import pytest


def kernel(n: int, mode: str) -> str:
    out = [".version 8.7", ".target sm_90a", ".address_size 64", ".visible .entry k(.param .u64 p, .param .u64 prog)", "{",
           "  .reg .b64 %a, %g, %o; .reg .b32 %r<8>; .reg .pred %q<80>;",
           "  ld.param.u64 %a, [p]; ld.param.u64 %g, [prog]; mov.u32 %r1, 0; mov.u32 %r3, 0; ld.param.u32 %r5, [p];",
           "LOOP:", '  .pragma "nounroll";',
           "  mov.u32 %r4, %tid.x; add.u32 %r4, %r4, %r3; mul.wide.u32 %o, %r4, 4; add.u64 %o, %g, %o;",
           "  ld.global.b32 %r2, [%o];"]
    if mode == "brx":
        out.append("  ts: .branchtargets " + ", ".join(f"C{i}" for i in range(n)) + ";")
        out.append("  brx.idx %r2, ts;")
    elif mode in ("chain", "chain_and"):
        for i in range(n - 1):
            setp = f"setp.eq.u32 %q{i}, %r2, {i};" if mode == "chain" else f"setp.eq.and.u32 %q{i}, %r2, {i}, %q79;"
            out.append(f"  {setp} @%q{i} bra C{i};")
        out.append(f"  bra.uni C{n - 1};")
    else:
        def tree(lo: int, hi: int, label: str) -> None:
            if hi - lo == 1:
                out.append(f"{label}: bra.uni C{lo};")
                return
            mid = (lo + hi) // 2
            q = f"%q{(lo * 7 + hi) % 78}"
            out.append(f"{label}: setp.ge.u32 {q}, %r2, {mid}; @{q} bra T{mid}_{hi};")
            tree(lo, mid, f"T{lo}_{mid}")
            tree(mid, hi, f"T{mid}_{hi}")
        tree(0, n, f"T0_{n}")
    for i in range(n):
        out.append(f"C{i}: mad.lo.u32 %r1, %r1, {2 * i + 3}, {i + 1}; st.volatile.global.b32 [%a+{4 * i + 64}], %r1; bra.uni NEXT;")
    out += ["NEXT: add.u32 %r3, %r3, 1; setp.lt.u32 %q79, %r3, %r5; @%q79 bra LOOP;", "  st.global.b32 [%a], %r1; ret;", "}"]
    return "\n".join(out) + "\n"


def sass(ptx: str) -> list[str]:
    from warpy.lift.disasm import find_disassembler
    from warpy.lift.disasm import listing as disasm_listing
    from warpy.lift.ptxas import find_ptxas

    ptxas, dis = find_ptxas().path, find_disassembler()  # dependencies: missing, they fail naming themselves
    if dis.kind != "nvdisasm":
        pytest.fail(f"the measurement reads nvdisasm's listing; only {dis.kind} was found (pip install nvidia-cuda-nvdisasm)")
    with tempfile.TemporaryDirectory() as tmp:
        src, cubin = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        src.write_text(ptx)
        subprocess.run([ptxas, "-arch=sm_90a", str(src), "-o", str(cubin)], check=True, capture_output=True, timeout=120)
        listing = disasm_listing(cubin.read_bytes(), dis)  # (`nvdisasm -c`, kept on disk by the cubin's and the tool's bytes)
    lines = [m.group(1) for m in re.finditer(r"/\*[0-9a-f]+\*/\s+(.*?)\s*;", listing)]
    return [ln for ln in lines if ln != "NOP"]


def dispatch_path(lines: list[str]) -> list[str]:
    """The instructions after the opcode word's load, up to the indirect jump, or to the first case
    body (its store) when there is none; loop bookkeeping the scheduler moved in between excluded."""
    start = next(k for k, ln in enumerate(lines) if ln.startswith("LDG"))
    path = []
    for ln in lines[start + 1:]:
        if "STG" in ln:
            break
        if re.search(r"UR\d+|BSSY|c\[0x0\]\[0x210\]|R\d+, R\d+, 0x1, RZ$|VIADD R\d+, R\d+, 0x1$", ln) and "c[0x2]" not in ln:
            continue
        path.append(ln)
        if ln.startswith("BRX"):
            break
    return path


@pytest.mark.parametrize("n", [8, 32])
def test_an_explicit_jump_table_is_four_instructions(n: int) -> None:
    path = dispatch_path(sass(kernel(n, "brx")))
    ops = [ln.split()[0] for ln in path]
    assert ops[0] in ("SHF.L.U32", "IMAD.SHL.U32") and ops[1:] == ["LDC", "SHF.R.S32.HI", "BRX"], path


@pytest.mark.parametrize("n", [8, 32])
def test_ptxas_makes_the_compare_chain_a_jump_table(n: int) -> None:
    path = dispatch_path(sass(kernel(n, "chain")))
    ops = [ln.split()[0] for ln in path]
    assert ops[-1] == "BRX" and "LDC" in ops and ops.count("ISETP.NE.U32.AND") == 1, path  # case 0 peeled off
    assert len(path) <= 9, path


def test_a_chain_of_and_compares_is_not_recognised() -> None:
    lines = sass(kernel(8, "chain_and"))
    assert not any(ln.startswith("BRX") for ln in lines)


def test_a_compare_tree_costs_two_instructions_a_level() -> None:
    path = dispatch_path(sass(kernel(16, "tree")))
    assert not any(ln.startswith("BRX") for ln in path)
    assert sum(ln.startswith("ISETP") for ln in path) >= 4  # log2(16) levels on the way to case 0
