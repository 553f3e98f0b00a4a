"""Lift rules judged by meaning, not spelling.

- ALU: each line is run by the isa's interpreter on the SASS text and by `ptx_eval` (the PTX ISA's
  definitions, written independently of warpy's value rules) on the lifted PTX, from the same
  registers, at the edge values a spelling test never reaches (multipliers >= 2^31, negative
  operands, shifts of 0 and 32); the magic-number division the tile scheduler emits is checked
  against Python's `//` through the lifted PTX itself.
- Memory, TMA, mbarrier, tcgen05 and wgmma: these move data the interpreter does not model, so the
  test checks what the lifted instruction *means* by its operands: every PTX operand, resolved
  through the lifter's temporaries back to the SASS registers it reads, must play the role the PTX
  ISA gives its position (destination, source, size, mbarrier, descriptor...), as docs/sass.md
  gives the SASS operand's role. A lift with two operands swapped fails here whatever its spelling.
  What only the GPU can judge (the data a copy moves) is in tests/gpu/test_isa_gpu.py.
"""

from __future__ import annotations

import re

import pytest

from warpy.isa import interp
from warpy.isa.text import parse
from warpy.lift.lifter import lift

from ptx_eval import M32, run_ptx

HEADER = """\
.kernel g
.sm {sm}
.threads 128
.dynsmem 1024
.grid 1 1 1
.cluster 1 1 1
.mbarriers 1
.tmap a dtype=bf16 dims=64,64,64 strides=128,8192 box=64,64,1 swizzle=128
.param out u64
"""


def _kernel_text(body: str, sm: str = "sm_90a") -> str:
    return HEADER.format(sm=sm) + "".join(f"  {ln}\n" for ln in body.strip().splitlines()) + "  EXIT\n"


def _ptx_body(text: str, sm: str = "sm_90a") -> list[str]:
    ptx = lift(parse(text), sm)
    return ptx.split("// --- the program ---\n")[1].splitlines()


def _ptx_name(n: str) -> str:
    return "%" + re.sub(r"^([A-Z]+)(\d+)$", lambda x: x.group(1).lower() + x.group(2), n)


def _both(body: str, init: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """(interpreter's registers, lifted PTX's registers) after running `body` from `init`."""
    text = ".kernel s\n.sm sm_90a\n.threads 32\n.dynsmem 0\n.grid 1 1 1\n.cluster 1 1 1\n.mbarriers 0\n"
    text += "".join(f"  {ln}\n" for ln in body.strip().splitlines()) + "  EXIT\n"
    kernel = parse(text)
    m = interp.Machine()
    m.v = dict(init)
    interp.run(kernel, m)
    got = run_ptx(_ptx_body(text), {_ptx_name(n): x for n, x in init.items()})
    return {n: m.v.get(n, 0) for n in init}, {n: got.get(_ptx_name(n), 0) for n in init}


# --- ALU at edge values --------------------------------------------------------------------------------

BIG = [0x80000000, 0xAAAAAAAB, 0xCCCCCCCD, 0xFFFFFFFF, 0x92492493]
SMALL = [0, 1, 7, 0x7FFFFFFF, 0x80000001, 0xFFFFFFF9]

ALU = [
    # (line, what it must compute from R0=a, R1=b, R2=c as a Python function of them)
    ("IMAD.HI.U32 R3, R0, R1, R2", lambda a, b, c: ((a * b >> 32) + c) & M32),
    ("IMAD.HI R3, R0, R1, R2", lambda a, b, c: (((_s(a) * _s(b)) >> 32) + c) & M32),
    ("IMAD R3, R0, R1, R2", lambda a, b, c: (a * b + c) & M32),
    ("LEA.HI R3, R0, R2, 0x5", lambda a, b, c: ((a >> 27) + c) & M32),
    ("LEA R3, R0, R2, 0x5", lambda a, b, c: ((a << 5) + c) & M32),
    ("SHF.R.S32.HI R3, RZ, 0x3, R0", lambda a, b, c: (_s(a) >> 3) & M32),
    ("SHF.R.U32.HI R3, RZ, 0x3, R0", lambda a, b, c: a >> 3),
    ("SHF.L.U32.HI R3, R0, 0x4, R1", lambda a, b, c: ((b << 32 | a) << 4 >> 32) & M32),
    ("SHF.R.U32 R3, R0, 0x4, R1", lambda a, b, c: ((b << 32 | a) >> 4) & M32),
    ("VIMNMX R3, R0, R1, PT", lambda a, b, c: min(_s(a), _s(b)) & M32),
    ("VIMNMX.U32 R3, R0, R1, !PT", lambda a, b, c: max(a, b)),
    ("PRMT R3, R0, 0x3210, R1", lambda a, b, c: a),
    ("PRMT R3, R0, 0x7654, R1", lambda a, b, c: b),
    ("PRMT R3, R0, 0x0123, R1", lambda a, b, c: int.from_bytes(a.to_bytes(4, "little"), "big")),
    ("IADD3 R3, -R0, R1, -R2", lambda a, b, c: (-a + b - c) & M32),
]


def _s(x: int) -> int:
    return x - (1 << 32) if x >> 31 else x


@pytest.mark.parametrize("line,meaning", ALU, ids=[c[0] for c in ALU])
def test_alu_meaning_at_edge_values(line: str, meaning) -> None:  # type: ignore[no-untyped-def]
    for a in BIG + SMALL:
        for b in BIG + SMALL:
            c = (a * 7 + b) & M32
            ref, lifted = _both(line, {"R0": a, "R1": b, "R2": c, "R3": 0x5A5A5A5A})
            want = meaning(a, b, c)
            assert ref["R3"] == want, ("interpreter", line, hex(a), hex(b), hex(c), hex(ref["R3"]), hex(want))
            assert lifted["R3"] == want, ("lifted PTX", line, hex(a), hex(b), hex(c), hex(lifted["R3"]), hex(want))


def test_imad_wide_signed_and_unsigned() -> None:
    for a in BIG + SMALL:
        for b in BIG + SMALL:
            for mods, f in (("", _s), (".U32", lambda x: x)):
                init = {"R0": a, "R1": b, "R4": 1, "R5": 2}
                ref, lifted = _both(f"IMAD.WIDE{mods} R4, R0, R1, RZ", init)
                want = (f(a) * f(b)) & ((1 << 64) - 1)
                for got in (ref, lifted):
                    assert got["R4"] | got["R5"] << 32 == want, (mods, hex(a), hex(b))


@pytest.mark.parametrize("d,x_max", [(3, 1 << 31), (7, 1 << 31), (11, M32), (96, M32), (7919, 1 << 31)])
def test_the_schedulers_magic_division_through_the_lifted_ptx(d: int, x_max: int) -> None:
    """kernels/schedule.py divides by IMAD.HI.U32 with a multiplier >= 2^31 then SHF.R: the lifted
    PTX (and the interpreter) must give x // d for every x up to x_max (the end points and a spread
    between), a signed multiply-high would not."""
    from kernels.schedule import Magic

    mg = Magic.find(d, x_max)
    assert mg.mul >= 1 << 31  # the case a signed multiply-high gets wrong (and x >= 2^31 too)
    body = f"IMAD.HI.U32 R1, R0, {mg.mul:#x}, RZ\n" + (f"SHF.R.U32.HI R1, RZ, {mg.shift:#x}, R1\n" if mg.shift else "")
    xs = sorted({0, 1, d - 1, d, x_max, x_max - 1, x_max - x_max % d, *range(0, x_max, max(1, x_max // 97))})
    for x in xs:
        ref, lifted = _both(body, {"R0": x, "R1": 0})
        assert ref["R1"] == lifted["R1"] == x // d, (d, x, ref["R1"], lifted["R1"])


# --- operand roles of the memory, TMA, mbarrier, tcgen05 and wgmma rules --------------------------------

# (SASS line, target, the PTX instruction's opcode prefix, its operands in the PTX ISA's order, each
# written as the SASS registers it must read). Roles, from the PTX ISA:
#   ld/ldmatrix/tcgen05.ld d, [addr]        st/stmatrix/tcgen05.st [addr], value
#   atom d, [addr], b[, c]                  red [addr], b
#   cp.async.bulk.shared::cluster.global...  [dstMem], [srcMem], size, [mbar]
#   cp.async.bulk.shared::cluster.shared::cta... [dstMem], [srcMem], size, [mbar]
#   cp.async.bulk.global.shared::cta...      [dstMem], [srcMem], size
#   cp.async.bulk.tensor (load)             [dstMem], [tensorMap, coords], [mbar]
#   cp.async.bulk.tensor / cp.reduce (store) [tensorMap, coords], [srcMem]
#   mbarrier.arrive.expect_tx               state, [addr], txCount
#   tcgen05.mma                             [d-tmem], a-desc | [a-tmem], b-desc, idesc, enable-input-d
#   tcgen05.commit                          [mbar]
#   wgmma.mma_async                         d, a-desc, b-desc, scale-d, ...
ROLES = [
    ("LDS R1, [R2+0x10]", "sm_90a", "ld.shared.b32", ["R1", "[R2+16]"]),
    ("LDS.U16 R1, [UR5+0x10]", "sm_90a", "ld.shared.u16", ["R1", "[UR5+16]"]),
    ("STS [R2+0x10], R1", "sm_90a", "st.shared.b32", ["[R2+16]", "R1"]),
    ("STS.64 [R2], R4", "sm_90a", "st.shared.v2.b32", ["[R2]", "{R4,R5}"]),
    ("LDG.E R1, desc[UR4][R2.64]", "sm_90a", "ld.global.b32", ["R1", "[R2:R3]"]),
    ("LDG.E.64 R4, desc[UR4][R6.64+0x10]", "sm_90a", "ld.global.v2.b32", ["{R4,R5}", "[R6:R7+16]"]),
    ("STG.E desc[UR4][R2.64+0x8], R1", "sm_90a", "st.global.b32", ["[R2:R3+8]", "R1"]),
    ("ATOMG.E.ADD.STRONG.GPU PT, R1, desc[UR4][R6.64], R3", "sm_90a", "atom.relaxed.gpu.global.add.u32",
     ["R1", "[R6:R7]", "R3"]),
    ("ATOMG.E.CAS.STRONG.GPU PT, R1, [R6+0x8], R4, R5", "sm_90a", "atom.relaxed.gpu.global.cas.b32",
     ["R1", "[R6:R7+8]", "R4", "R5"]),
    ("REDG.E.ADD.F32.FTZ.RN.STRONG.GPU desc[UR4][R6.64], R1", "sm_90a", "red.relaxed.gpu.global.add.f32",
     ["[R6:R7]", "R1"]),
    ("LDSM.16.M88.4 R4, [R2]", "sm_90a", "ldmatrix.sync.aligned.m8n8.x4.shared.b16", ["{R4,R5,R6,R7}", "[R2]"]),
    ("STSM.16.M88.4 [R2], R4", "sm_90a", "stmatrix.sync.aligned.m8n8.x4.shared.b16", ["[R2]", "{R4,R5,R6,R7}"]),
    ("UBLKCP.S.G [UR4], [UR6], UR8", "sm_90a", "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes",
     ["[UR4]", "[UR6:UR7]", "UR8", "[UR5]"]),
    ("UBLKCP.G.S [UR6], [UR4], UR8", "sm_90a", "cp.async.bulk.global.shared::cta.bulk_group",
     ["[UR6:UR7]", "[UR4]", "UR8"]),
    ("UBLKCP.S.S [UR6], [UR5], UR8", "sm_90a", "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes",
     ["[UR6]", "[UR5]", "UR8", "[UR7]"]),
    ("UTMALDG.3D [UR8], tmap[a]", "sm_90a", "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
     ["[UR8]", "[a,{UR10,UR11,UR12}]", "[UR9]"]),
    ("UTMASTG.2D [UR8], tmap[a]", "sm_90a", "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group",
     ["[a,{UR9,UR10}]", "[UR8]"]),
    ("UTMAREDG.2D.ADD [UR8], tmap[a]", "sm_90a", "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group",
     ["[a,{UR9,UR10}]", "[UR8]"]),
    ("SYNCS.ARRIVE.TRANS64 RZ, [UR4], R5", "sm_90a", "mbarrier.arrive.expect_tx.shared::cta.b64", ["_", "[UR4]", "R5"]),
    ("SYNCS.ARRIVE.TRANS64.RED.A0TR RZ, [UR4], R5", "sm_90a", "mbarrier.expect_tx.relaxed.cluster.shared::cluster.b64",
     ["[UR4]", "R5"]),
    ("UTCHMMA gdesc[UR8], gdesc[UR10], tmem[UR4], tmem[UR6], idesc[UR7], UP1", "sm_100a",
     "tcgen05.mma.cta_group::1.kind::f16", ["[UR4]", "UR8:UR9", "UR10:UR11", "UR7", "UP1"]),
    ("UTCHMMA tmem[UR9], gdesc[UR10], tmem[UR4], tmem[UR6], idesc[UR7], UP1", "sm_100a",
     "tcgen05.mma.cta_group::1.kind::f16", ["[UR4]", "[UR9]", "UR10:UR11", "UR7", "UP1"]),
    ("UTCBAR [UR12], URZ", "sm_100a", "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64", ["[UR12]"]),
    ("LDTM.x4 R8, tmem[UR4]", "sm_100a", "tcgen05.ld.sync.aligned.32x32b.x4.b32", ["{R8,R9,R10,R11}", "[UR4]"]),
    ("STTM.x4 tmem[UR4], R8", "sm_100a", "tcgen05.st.sync.aligned.32x32b.x4.b32", ["[UR4]", "{R8,R9,R10,R11}"]),
    ("HGMMA.64x8x16.F32.BF16 R24, gdesc[UR4], R24, gsb0", "sm_90a", "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16",
     ["{R24,R25,R26,R27}", "UR4:UR5", "UR6:UR7", "1", "1", "1", "0", "0"]),
]


def _split_top(s: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return out


def _sass_reg(ptx: str) -> str:
    m = re.fullmatch(r"%([a-z]+)(\d+)", ptx)
    return f"{m.group(1).upper()}{m.group(2)}" if m else ptx


def _resolve(op: str, pairs: dict[str, str], tmaps: dict[str, str]) -> str:
    """A PTX operand written as the SASS registers it reads: %td (a pair the lifter built) as
    `LO:HI`, a tensor map parameter by its .tmap name, vectors and addresses keep their shape."""
    op = op.strip()
    if op.startswith("[") and op.endswith("]"):
        inner = op[1:-1]
        if "{" in inner:  # [tmap, {coords}]
            parts = _split_top(inner)
            return "[" + ",".join(_resolve(p, pairs, tmaps) for p in parts) + "]"
        base, plus, off = inner.partition("+")
        return f"[{_resolve(base, pairs, tmaps)}{'+' + str(int(off, 0)) if plus else ''}]"
    if op.startswith("{"):
        return "{" + ",".join(_resolve(p, pairs, tmaps) for p in _split_top(op[1:-1])) + "}"
    if op in pairs:
        return pairs[op]
    if op in tmaps:
        return tmaps[op]
    return _sass_reg(op)


@pytest.mark.parametrize("line,sm,opcode,roles", ROLES, ids=[c[0] for c in ROLES])
def test_operand_roles(line: str, sm: str, opcode: str, roles: list[str]) -> None:
    body = [ln.strip().rstrip(";") for ln in _ptx_body(_kernel_text(line, sm), sm)]
    pairs: dict[str, str] = {}
    for ln in body:
        m = re.fullmatch(r"mov\.b64 (%td\d+), \{(%\w+), (%\w+)\}", ln)
        if m:
            pairs[m.group(1)] = f"{_sass_reg(m.group(2))}:{_sass_reg(m.group(3))}"
    ptx = lift(parse(_kernel_text(line, sm)), sm)
    # a tensor map operand is the address of the kernel parameter that holds it
    tmaps = {m.group(1): m.group(2) for m in re.finditer(r"mov\.b64 (%tm\d+), (\w+);", ptx)}
    main = [ln for ln in body if re.sub(r"^@!?%\w+ ", "", ln).startswith(opcode + " ")]
    assert len(main) == 1, (opcode, body)
    operands = re.sub(r"^@!?%\w+ ", "", main[0])[len(opcode) + 1:]
    got = [_resolve(o, pairs, tmaps) for o in _split_top(operands)]
    assert got == roles, (line, main[0])
