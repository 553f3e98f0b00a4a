"""Integer/ALU and predicate instructions, general (`R`) and uniform (`UR`) datapaths.

sm_100a prints `IADD3`/`UIADD3` with two carry-out predicates (`IADD3 R4, PT, PT, R2, 0x1, RZ`),
sm_90a without (`IADD3 R4, R2, 0x1, RZ`); both forms are accepted, and `Program` writes the one its
target prints. Likewise the uniform constant load is `ULDC` on sm_90a and `LDCU` on sm_100a.
"""

from __future__ import annotations

from typing import Union

from warpy.isa.families._util import ins
from warpy.target import target
from warpy.isa.families.base import Opcode, a
from warpy.isa.instr import Instr
from warpy.isa.operands import PT, RZ, UPT, URZ, CBank, P, R, RVec, SReg, Sym, UP, UR, URVec

F = "alu"
CMP = r"EQ|NE|LT|LE|GT|GE"
W2 = lambda mods: 2 if "64" in mods or "WIDE" in mods else 1  # noqa: E731

IADD3 = Opcode("IADD3", F, "alu", (
    (a("d", "R", "d"), a("a", "R|I"), a("b", "R|I"), a("c", "R|I")),
    (a("d", "R", "d"), a("carry0", "P", "d"), a("carry1", "P", "d"), a("a", "R|I"), a("b", "R|I"), a("c", "R|I")),
), ptx="add.u32 (three-input)", doc="d = a + b + c")
UIADD3 = Opcode("UIADD3", F, "alu", (
    (a("d", "UR", "d"), a("a", "UR|I"), a("b", "UR|I"), a("c", "UR|I")),
    (a("d", "UR", "d"), a("carry0", "UP", "d"), a("carry1", "UP", "d"), a("a", "UR|I"), a("b", "UR|I"), a("c", "UR|I")),
), ptx="add.u32", doc="d = a + b + c (uniform)")
IMAD = Opcode("IMAD", F, "alu", (
    (a("d", "Rv", "d", W2), a("a", "R|I"), a("b", "R|I|UR"), a("c", "R|I|UR|Rv")),
), mods=(r"MOV|SHL|IADD|WIDE|HI", r"U32"), ptx="mad.lo.u32 / mad.wide.u32", doc="d = a * b + c")
UIMAD = Opcode("UIMAD", F, "alu", (
    (a("d", "URv", "d", W2), a("a", "UR|I"), a("b", "UR|I"), a("c", "UR|I|URv")),
), mods=(r"WIDE|HI", r"U32"), ptx="mad.lo.u32", doc="d = a * b + c (uniform)")
LEA = Opcode("LEA", F, "alu", (
    (a("d", "R", "d"), a("a", "R|I"), a("b", "R|I|UR"), a("shift", "I")),
), mods=(r"HI",), ptx="shl + add", doc="d = (a << shift) + b")
ULEA = Opcode("ULEA", F, "alu", (
    (a("d", "UR", "d"), a("a", "UR|I"), a("b", "UR|I"), a("shift", "I")),
), mods=(r"HI",), ptx="shl + add", doc="d = (a << shift) + b (uniform)")
LOP3 = Opcode("LOP3", F, "alu", (
    (a("d", "R", "d"), a("a", "R|I"), a("b", "R|I|UR"), a("c", "R|I"), a("lut", "I"), a("pout", "P")),
    (a("pd", "P", "d"), a("d", "R", "d"), a("a", "R|I"), a("b", "R|I|UR"), a("c", "R|I"), a("lut", "I"), a("pout", "P")),
), mods=(r"!LUT",), ptx="lop3.b32", doc="d = lut(a, b, c); the P form also sets pd = (d != 0)")
ULOP3 = Opcode("ULOP3", F, "alu", (
    (a("d", "UR", "d"), a("a", "UR|I"), a("b", "UR|I"), a("c", "UR|I"), a("lut", "I"), a("pout", "UP")),
), mods=(r"!LUT",), ptx="lop3.b32", doc="d = lut(a, b, c) (uniform)")
SHF = Opcode("SHF", F, "alu", (
    (a("d", "R", "d"), a("a", "R|I"), a("shift", "R|I|UR"), a("b", "R|I")),
), mods=(r"!L|R", r"U32|S32", r"HI"), ptx="shl/shr.u32 (funnel)", doc="funnel shift of (b:a)")
USHF = Opcode("USHF", F, "alu", (
    (a("d", "UR", "d"), a("a", "UR|I"), a("shift", "UR|I"), a("b", "UR|I")),
), mods=(r"!L|R", r"U32|S32", r"HI"), ptx="shl/shr.u32 (funnel)", doc="funnel shift (uniform)")
MOV = Opcode("MOV", F, "alu", ((a("d", "R", "d"), a("a", "R|I|UR")),), ptx="mov.u32", doc="d = a")
UMOV = Opcode("UMOV", F, "alu", ((a("d", "UR", "d"), a("a", "UR|I|sym")),), ptx="mov.u32",
    doc="d = a; `UMOV d, `(dsmem)` is the shared-window address of the dynamic shared memory")
SEL = Opcode("SEL", F, "alu", ((a("d", "R", "d"), a("a", "R|I"), a("b", "R|I|UR"), a("p", "P")),), ptx="selp.b32",
    doc="d = p ? a : b")
USEL = Opcode("USEL", F, "alu", ((a("d", "UR", "d"), a("a", "UR|I"), a("b", "UR|I"), a("p", "UP")),), ptx="selp.b32",
    doc="d = p ? a : b (uniform)")
PRMT = Opcode("PRMT", F, "alu", ((a("d", "R", "d"), a("a", "R"), a("sel", "I"), a("b", "R|UR")),), ptx="prmt.b32 / mapa",
    doc="byte permute; PRMT d, rank, 0x654, addr = (rank << 24) | addr[23:0], the cluster form of a shared address")
UPRMT = Opcode("UPRMT", F, "alu", ((a("d", "UR", "d"), a("a", "UR"), a("sel", "I"), a("b", "UR")),), ptx="prmt.b32 / mapa",
    doc="byte permute (uniform); 0x654 forms a cluster shared address, as mapa does")
ISETP = Opcode("ISETP", F, "compare", (
    (a("p", "P", "d"), a("q", "P", "d"), a("a", "R"), a("b", "R|I|UR"), a("c", "P")),
), mods=(rf"!{CMP}", r"U32", r"!AND|OR|XOR"), ptx="setp.cmp.u32/s32", doc="p = (a cmp b) op c")
UISETP = Opcode("UISETP", F, "compare", (
    (a("p", "UP", "d"), a("q", "UP", "d"), a("a", "UR"), a("b", "UR|I"), a("c", "UP")),
), mods=(rf"!{CMP}", r"U32", r"!AND|OR|XOR"), ptx="setp.cmp.u32/s32", doc="p = (a cmp b) op c (uniform)")
PLOP3 = Opcode("PLOP3", F, "predicate", (
    (a("p", "P|UP", "d"), a("q", "P|UP", "d"), a("a", "P|UP"), a("b", "P|UP"), a("c", "P|UP"),
    a("lut", "I"), a("lut2", "I")),
), mods=(r"!LUT",), ptx="predicate logic", doc="p = lut(a, b, c); moves a uniform predicate into a P")
UPLOP3 = Opcode("UPLOP3", F, "predicate", (
    (a("p", "UP", "d"), a("q", "UP", "d"), a("a", "UP"), a("b", "UP"), a("c", "UP"), a("lut", "I"), a("lut2", "I")),
), mods=(r"!LUT",), ptx="predicate logic", doc="p = lut(a, b, c) (uniform)")
R2UR = Opcode("R2UR", F, "alu", ((a("d", "UR", "d"), a("a", "R")), (a("p", "P", "d"), a("d", "UR", "d"), a("a", "R"))),
    mods=(r"BROADCAST",), ptx="(register file move)",
    doc="d = a (a warp-uniform value moved to the uniform datapath; the P form also reports whether it was uniform)")
S2R = Opcode("S2R", F, "special-reg", ((a("d", "R", "d"), a("sr", "sreg")),), ptx="mov.u32 %r, %tid.x ...",
    doc="d = special register")
S2UR = Opcode("S2UR", F, "special-reg", ((a("d", "UR", "d"), a("sr", "sreg")),), ptx="mov.u32 %r, %ctaid.x ...",
    doc="d = special register (uniform)")
LDC = Opcode("LDC", F, "const-load", ((a("d", "Rv", "d", W2), a("c", "cbank")),), mods=(r"64",),
    ptx="ld.param", doc="d = constant-bank word (a kernel parameter by name)")
ULDC = Opcode("ULDC", F, "const-load", ((a("d", "URv", "d", W2), a("c", "cbank")),), mods=(r"64",),
    archs=frozenset({"sm_90a"}), ptx="ld.param", doc="d = constant-bank word (uniform; sm_90a spelling)")
LDCU = Opcode("LDCU", F, "const-load", ((a("d", "URv", "d", W2), a("c", "cbank")),), mods=(r"64",),
    archs=frozenset({"sm_100a"}), ptx="ld.param", doc="d = constant-bank word (uniform; sm_100a spelling)")
VOTEU = Opcode("VOTEU", F, "vote", ((a("d", "UP|UR", "d"), a("p", "P")), (a("d", "UR", "d"), a("q", "UP"), a("p", "P"))),
    mods=(r"!ANY|ALL",), ptx="vote.sync.any/all", doc="d = any/all lanes' p")
F2FP = Opcode("F2FP", F, "alu", ((a("d", "R", "d"), a("a", "R"), a("b", "R")),), mods=(r"!BF16|F16", r"!F32", r"!PACK_AB"),
    ptx="cvt.rn.bf16x2.f32", doc="d = pack(convert(a) << 16 | convert(b))")
FADD = Opcode("FADD", F, "alu", ((a("d", "R", "d"), a("a", "R"), a("b", "R")),), ptx="add.rn.f32",
    doc="d = a + b (fp32, round to nearest even)")
FMUL = Opcode("FMUL", F, "alu", ((a("d", "R", "d"), a("a", "R"), a("b", "R")),), ptx="mul.rn.f32",
    doc="d = a * b (fp32, round to nearest even)")

OPCODES: list[Opcode] = [
    IADD3, UIADD3, IMAD, UIMAD, LEA, ULEA, LOP3, ULOP3, SHF, USHF, MOV, UMOV, SEL, USEL, PRMT,
    UPRMT, ISETP, UISETP, PLOP3, UPLOP3, R2UR, S2R, S2UR, LDC, ULDC, LDCU, VOTEU, F2FP, FADD, FMUL,
]

RI = Union[R, int]
URI = Union[UR, int]


def iadd3(d: R, a_: RI, b: RI, c: RI = RZ) -> Instr:
    return ins(IADD3, "", d, a_, b, c)


def uiadd3(d: UR, a_: URI, b: URI, c: URI = URZ) -> Instr:
    return ins(UIADD3, "", d, a_, b, c)


def imad(d: R, a_: RI, b: Union[R, UR, int], c: Union[R, UR, int]) -> Instr:
    return ins(IMAD, "", d, a_, b, c)


def imad_wide(d: RVec, a_: RI, b: Union[R, int], c: Union[RVec, R]) -> Instr:
    return ins(IMAD, "WIDE.U32", d, a_, b, c)


def uimad(d: UR, a_: URI, b: URI, c: URI) -> Instr:
    return ins(UIMAD, "", d, a_, b, c)


def lea(d: R, a_: RI, b: Union[R, UR, int], shift: int) -> Instr:
    return ins(LEA, "", d, a_, b, shift)


def ulea(d: UR, a_: URI, b: URI, shift: int) -> Instr:
    return ins(ULEA, "", d, a_, b, shift)


def lop3(d: R, a_: RI, b: Union[R, UR, int], c: RI, lut: int) -> Instr:
    return ins(LOP3, "LUT", d, a_, b, c, lut, ~PT)


def lop3_p(pd: P, a_: RI, b: RI, c: RI, lut: int) -> Instr:
    """pd = (lut(a, b, c) != 0), the result itself dropped."""
    return ins(LOP3, "LUT", pd, RZ, a_, b, c, lut, ~PT)


def ulop3(d: UR, a_: URI, b: URI, c: URI, lut: int) -> Instr:
    return ins(ULOP3, "LUT", d, a_, b, c, lut, ~UPT)


def shf_l(d: R, a_: RI, shift: Union[R, int]) -> Instr:
    return ins(SHF, "L.U32", d, a_, shift, RZ)


def shf_r(d: R, a_: RI, shift: Union[R, int]) -> Instr:
    """d = a >> shift (logical)."""
    return ins(SHF, "R.U32.HI", d, RZ, shift, a_)


def ushf_l(d: UR, a_: URI, shift: URI) -> Instr:
    return ins(USHF, "L.U32", d, a_, shift, URZ)


def ushf_r(d: UR, a_: URI, shift: URI) -> Instr:
    return ins(USHF, "R.U32.HI", d, URZ, shift, a_)


def mov(d: R, a_: Union[R, UR, int]) -> Instr:
    return ins(MOV, "", d, a_)


def umov(d: UR, a_: Union[UR, int, Sym]) -> Instr:
    return ins(UMOV, "", d, a_)


def sel(d: R, a_: RI, b: RI, p: P) -> Instr:
    return ins(SEL, "", d, a_, b, p)


def usel(d: UR, a_: URI, b: URI, p: UP) -> Instr:
    return ins(USEL, "", d, a_, b, p)


def prmt(d: R, a_: R, sel_: int, b: Union[R, UR]) -> Instr:
    return ins(PRMT, "", d, a_, sel_, b)


def uprmt(d: UR, a_: UR, sel_: int, b: UR) -> Instr:
    return ins(UPRMT, "", d, a_, sel_, b)


def mapa(d: UR, rank: UR, addr: UR) -> Instr:
    """d = the shared::cluster address of `addr` in the CTA of rank `rank` (ptxas's mapa)."""
    return uprmt(d, rank, 0x654, addr)


def isetp(cmp: str, p: P, a_: R, b: Union[R, UR, int], unsigned: bool = True, c: P = PT) -> Instr:
    return ins(ISETP, f"{cmp}{'.U32' if unsigned else ''}.AND", p, PT, a_, b, c)


def uisetp(cmp: str, p: UP, a_: UR, b: URI, unsigned: bool = True, c: UP = UPT) -> Instr:
    return ins(UISETP, f"{cmp}{'.U32' if unsigned else ''}.AND", p, UPT, a_, b, c)


def plop3_mov(p: P, src: Union[P, UP]) -> Instr:
    """p = src (`PLOP3.LUT p, PT, PT, PT, src, 0x80, 0x8`, as ptxas writes a predicate move)."""
    return ins(PLOP3, "LUT", p, PT, PT, PT, src, 0x80, 0x8)


def r2ur(d: UR, a_: R) -> Instr:
    return ins(R2UR, "", d, a_)


def s2r(d: R, sr: str) -> Instr:
    return ins(S2R, "", d, SReg(sr))


def s2ur(d: UR, sr: str) -> Instr:
    return ins(S2UR, "", d, SReg(sr))


def ldc(d: Union[R, RVec], c: CBank) -> Instr:
    return ins(LDC, "64" if isinstance(d, RVec) else "", d, c)


def uldc(d: Union[UR, URVec], c: CBank, arch: str = "sm_90a") -> Instr:
    return ins(LDCU if target(arch).const_load == "LDCU" else ULDC, "64" if isinstance(d, URVec) else "", d, c)


def voteu_any(d: UP, p: P) -> Instr:
    return ins(VOTEU, "ANY", d, p)


def f2fp_bf16(d: R, hi: R, lo: R) -> Instr:
    return ins(F2FP, "BF16.F32.PACK_AB", d, hi, lo)


def fadd(d: R, a_: R, b: R) -> Instr:
    return ins(FADD, "", d, a_, b)


def fmul(d: R, a_: R, b: R) -> Instr:
    return ins(FMUL, "", d, a_, b)


def uplop3_mov(p: UP, src: UP) -> Instr:
    """p = src (uniform predicates)."""
    return ins(UPLOP3, "LUT", p, UPT, UPT, UPT, src, 0x80, 0x8)


def pset(p: P, value: bool) -> Instr:
    """p = value (`PLOP3.LUT p, PT, PT, PT, PT, 0x80, 0x8` sets, `..., 0x8, 0x80` clears, as ptxas writes)."""
    return ins(PLOP3, "LUT", p, PT, PT, PT, PT, 0x80 if value else 0x8, 0x8 if value else 0x80)
