"""Integer/ALU and predicate instructions, general (`R`) and uniform (`UR`) datapaths.

sm_100a prints `IADD3`/`UIADD3` with two carry-out predicates (`IADD3 R4, PT, PT, R2, 0x1, RZ`),
sm_90a without (`IADD3 R4, R2, 0x1, RZ`); both forms are accepted, and `Program` writes the one its
target prints. Likewise the uniform constant load is `ULDC` on sm_90a and `LDCU` on sm_100a.
"""

from __future__ import annotations

from typing import Union, overload

from warpy.errors import WarpyError
from warpy.isa.families._util import ins
from warpy.target import target
from warpy.isa.families.base import Opcode, a
from warpy.isa.families.typed import (BF16, BF16x2, F16, F16x2, F32, S32, SPELLING, U32, Float, Int, Packed, Typed, need,
                                      same_type, what)
from warpy.isa.instr import Instr
from warpy.isa.operands import PT, RZ, UPT, URZ, CBank, Imm, P, R, RVec, SReg, Sym, UP, UR, URVec

F = "alu"
CMP = r"EQ|NE|LT|LE|GT|GE"
W2 = lambda mods: 2 if "64" in mods or "WIDE" in mods else 1  # noqa: E731
RND = r"RZ|RM|RP"
FCMP = r"EQ|NE|LT|LE|GT|GE|EQU|NEU|LTU|LEU|GTU|GEU|NUM|NAN"
FTYPE = r"F32|F16|BF16"

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
F2FP = Opcode("F2FP", F, "alu", ((a("d", "R", "d"), a("a", "R"), a("b", "R")),), mods=(r"!BF16|F16", r"!F32", r"!PACK_AB", r"RZ"),
    ptx="cvt.rn/.rz.bf16x2/.f16x2.f32",
    doc="d = pack(convert(a) << 16 | convert(b)) (nearest even; .RZ toward zero; with a = RZ: one value in bits 0-15)")
FADD = Opcode("FADD", F, "alu", ((a("d", "R", "d"), a("a", "R"), a("b", "R")),), mods=(r"FTZ", RND),
    ptx="add{.rz,.rm,.rp}{.ftz}.f32 (default .rn)",
    doc="d = a + b (fp32, round to nearest even or .RZ/.RM/.RP; .FTZ: subnormal inputs and results are ±0)")
FMUL = Opcode("FMUL", F, "alu", ((a("d", "R", "d"), a("a", "R"), a("b", "R")),), mods=(r"FTZ", RND),
    ptx="mul{.rz,.rm,.rp}{.ftz}.f32 (default .rn)", doc="d = a * b (fp32, rounded as FADD)")
FFMA = Opcode("FFMA", F, "alu", ((a("d", "R", "d"), a("a", "R"), a("b", "R"), a("c", "R")),), mods=(r"FTZ", RND),
    ptx="fma.rn/.rz/.rm/.rp{.ftz}.f32", doc="d = a * b + c (fp32, one rounding, as FADD)")
FMNMX = Opcode("FMNMX", F, "alu", ((a("d", "R", "d"), a("a", "R"), a("b", "R"), a("min", "P")),), mods=(r"FTZ", r"NAN"),
    ptx="min/max{.ftz}{.NaN}.f32 (PT: min, !PT: max)",
    doc="d = min(a, b) where the predicate holds, else max; -0 < +0; a NaN input yields the other (.NAN: NaN)")
FSETP = Opcode("FSETP", F, "compare", (
    (a("p", "P", "d"), a("q", "P", "d"), a("a", "R"), a("b", "R"), a("c", "P")),
), mods=(rf"!{FCMP}", r"FTZ", r"!AND|OR|XOR"), ptx="setp.cmp{.ftz}.f32",
    doc="p = (a cmp b) op c, q = (!(a cmp b)) op c; ordered compares are false on NaN, the U forms true, NUM/NAN test both")
FSEL = Opcode("FSEL", F, "alu", ((a("d", "R", "d"), a("a", "R"), a("b", "R"), a("p", "P")),), ptx="selp.f32",
    doc="d = p ? a : b (fp32 operands; the bits move unchanged)")
MUFU = Opcode("MUFU", F, "alu", ((a("d", "R", "d"), a("a", "R")),), mods=(r"!EX2|RSQ|RCP|LG2",),
    ptx="ex2/rsqrt/rcp/lg2.approx.ftz.f32",
    doc="d ≈ 2^a, 1/√a, 1/a, log2 a (fp32; subnormal inputs and results are ±0; the error bounds are PTX's, docs/sass.md)")
HADD2 = Opcode("HADD2", F, "alu", ((a("d", "R", "d"), a("a", "R"), a("b", "R")),), mods=(r"BF16_V2",),
    ptx="add.rn.f16x2 / .bf16x2", doc="d = a + b in each 16-bit half (fp16, .BF16_V2: bf16; round to nearest even)")
HMUL2 = Opcode("HMUL2", F, "alu", ((a("d", "R", "d"), a("a", "R"), a("b", "R")),), mods=(r"BF16_V2",),
    ptx="mul.rn.f16x2 / .bf16x2", doc="d = a * b in each 16-bit half (as HADD2)")
HFMA2 = Opcode("HFMA2", F, "alu", ((a("d", "R", "d"), a("a", "R"), a("b", "R"), a("c", "R")),), mods=(r"MMA", r"BF16_V2"),
    ptx="fma.rn.f16x2 / .bf16x2", doc="d = a * b + c in each 16-bit half, one rounding (.MMA: ptxas's choice of pipe)")
HMNMX2 = Opcode("HMNMX2", F, "alu", ((a("d", "R", "d"), a("a", "R"), a("b", "R"), a("min", "P")),), mods=(r"BF16_V2", r"NAN"),
    ptx="min/max{.NaN}.f16x2 / .bf16x2 (PT: min, !PT: max)", doc="FMNMX in each 16-bit half")
F2F = Opcode("F2F", F, "alu", ((a("d", "R", "d"), a("a", "R")),), mods=(rf"!{FTYPE}", rf"!{FTYPE}"),
    ptx="cvt{.rn}.dst.src (f32, f16, bf16)",
    doc="d = a converted (F2F.DST.SRC; 16-bit values in bits 0-15, a 16-bit result's bits 16-31 zero; "
        "narrowing rounds to nearest even, widening is exact)")
I2F = Opcode("I2F", F, "alu", ((a("d", "R", "d"), a("a", "R")),), mods=(r"F16|BF16", r"U32|S32", RND),
    ptx="cvt.rn/.rz/.rm/.rp.f32/.f16/.bf16.s32/.u32", doc="d = the 32-bit integer a as a float (f32 unless .F16/.BF16)")
I2FP = Opcode("I2FP", F, "alu", ((a("d", "R", "d"), a("a", "R")),), mods=(r"!F32", r"!S32|U32", RND),
    ptx="cvt.rn/.rz/.rm/.rp.f32.s32/.u32", doc="d = the 32-bit integer a as an fp32 value (what ptxas emits for f32)")
F2I = Opcode("F2I", F, "alu", ((a("d", "R", "d"), a("a", "R")),), mods=(r"U32|S32", r"F16|BF16", r"TRUNC|FLOOR|CEIL", r"!NTZ"),
    ptx="cvt.rni/.rzi/.rmi/.rpi.s32/.u32.f32/.f16/.bf16",
    doc="d = a rounded to an integer (nearest even; .TRUNC/.FLOOR/.CEIL), saturated to the range, NaN to 0")
VIMNMX = Opcode("VIMNMX", F, "alu", (
    (a("d", "R", "d"), a("a", "R"), a("b", "R|I"), a("min", "P")),
    (a("d", "R", "d"), a("p0", "P", "d"), a("p1", "P", "d"), a("a", "R"), a("b", "R|I"), a("min", "P")),
), mods=(r"U32",), ptx="min/max.s32/.u32 (PT: min, !PT: max)",
    doc="d = min(a, b) where the predicate holds, else max (signed; .U32 unsigned); sm_100a prints two PT first")
SHFL = Opcode("SHFL", F, "shuffle", (
    (a("p", "P", "d"), a("d", "R", "d"), a("a", "R"), a("b", "R|I"), a("c", "R|I")),
    (a("p", "P", "d"), a("d", "R", "d"), a("a", "R"), a("b", "R|I"), a("c", "R|I"), a("members", "I")),
), mods=(r"!BFLY|IDX|DOWN|UP",), ptx="shfl.sync.bfly/idx/down/up.b32 d|p, a, b, c, members",
    doc="d = a of the lane the mode names from b within the segment c says (p: it was in range, else d = own a); "
        "members: the lanes taking part (warpy's sixth operand; absent: the whole warp)")
VOTE = Opcode("VOTE", F, "vote", ((a("d", "P", "d"), a("p", "P")), (a("d", "R", "d"), a("q", "P", "d"), a("p", "P"))),
    mods=(r"!ANY|ALL",), ptx="vote.sync.any/all.pred / vote.sync.ballot.b32",
    doc="d = any/all taking-part lanes' p (a P); d = the ballot of p (an R; q = any/all)")
REDUX = Opcode("REDUX", F, "warp-reduce", ((a("d", "UR", "d"), a("a", "R")),), mods=(r"SUM|MIN|MAX|OR|XOR", r"S32"),
    ptx="redux.sync.add/min/max/and/or/xor.u32/.s32",
    doc="d = the reduction of a over the lanes taking part (no modifier: AND; .S32: signed MIN/MAX)")

OPCODES: list[Opcode] = [
    IADD3, UIADD3, IMAD, UIMAD, LEA, ULEA, LOP3, ULOP3, SHF, USHF, MOV, UMOV, SEL, USEL, PRMT,
    UPRMT, ISETP, UISETP, PLOP3, UPLOP3, R2UR, S2R, S2UR, LDC, ULDC, LDCU, VOTEU, F2FP, FADD, FMUL,
    FFMA, FMNMX, FSETP, FSEL, MUFU, HADD2, HMUL2, HFMA2, HMNMX2, F2F, I2F, I2FP, F2I, VIMNMX, SHFL, VOTE, REDUX,
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
    """d = the bf16 pair (hi, lo) of two fp32 values (untyped registers; `f2fp` is the typed builder)."""
    return ins(F2FP, "BF16.F32.PACK_AB", d, hi, lo)


def _rnd(where: str, rnd: str) -> str:
    if rnd not in ("RN", "RZ", "RM", "RP"):
        raise WarpyError(f"{where}: rounding {rnd!r} is not RN, RZ, RM or RP")
    return "" if rnd == "RN" else rnd


def _fmods(ftz: bool, rnd: str, where: str) -> str:
    return ".".join(m for m in ("FTZ" if ftz else "", _rnd(where, rnd)) if m)


def _not_packed(where: str, **ops: R) -> None:
    """An fp32 instruction refuses a register typed as anything but fp32 (an untyped one is fp32)."""
    for name, x in ops.items():
        if isinstance(x, Typed) and not isinstance(x, F32):
            raise WarpyError(f"{where}: operand {name} is {what(x)}; an fp32 instruction takes F32 registers")


def fadd(d: R, a_: R, b: R, *, rnd: str = "RN", ftz: bool = False) -> Instr:
    """d = a + b in fp32 (`-b` subtracts). Untyped registers are read as fp32; a typed one must be F32."""
    _not_packed("FADD", d=d, a=a_, b=b)
    return ins(FADD, _fmods(ftz, rnd, "FADD"), d, a_, b)


def fmul(d: R, a_: R, b: R, *, rnd: str = "RN", ftz: bool = False) -> Instr:
    _not_packed("FMUL", d=d, a=a_, b=b)
    return ins(FMUL, _fmods(ftz, rnd, "FMUL"), d, a_, b)


def _f32(where: str, **ops: object) -> None:
    for name, x in ops.items():
        need(where, name, x, F32)


def ffma(d: F32, a_: F32, b: F32, c: F32, *, rnd: str = "RN", ftz: bool = False) -> Instr:
    """d = a * b + c in fp32 with one rounding."""
    _f32("FFMA", d=d, a=a_, b=b, c=c)
    return ins(FFMA, _fmods(ftz, rnd, "FFMA"), d, a_, b, c)


def fmin(d: F32, a_: F32, b: F32, *, ftz: bool = False, nan: bool = False) -> Instr:
    """d = min(a, b) (-0 < +0; a NaN operand yields the other one, with `nan` a NaN)."""
    _f32("FMNMX", d=d, a=a_, b=b)
    return ins(FMNMX, ".".join(m for m in ("FTZ" if ftz else "", "NAN" if nan else "") if m), d, a_, b, PT)


def fmax(d: F32, a_: F32, b: F32, *, ftz: bool = False, nan: bool = False) -> Instr:
    _f32("FMNMX", d=d, a=a_, b=b)
    return ins(FMNMX, ".".join(m for m in ("FTZ" if ftz else "", "NAN" if nan else "") if m), d, a_, b, ~PT)


FCMPS = ("EQ", "NE", "LT", "LE", "GT", "GE", "EQU", "NEU", "LTU", "LEU", "GTU", "GEU", "NUM", "NAN")


def fsetp(cmp: str, p: P, a_: F32, b: F32, *, c: P = PT, ftz: bool = False) -> Instr:
    """p = (a cmp b) and c; `cmp` one of FCMPS (EQ..GE false on NaN, EQU..GEU true on NaN, NUM/NAN)."""
    if cmp not in FCMPS:
        raise WarpyError(f"FSETP: comparison {cmp!r} is not one of {', '.join(FCMPS)}")
    _f32("FSETP", a=a_, b=b)
    return ins(FSETP, f"{cmp}{'.FTZ' if ftz else ''}.AND", p, PT, a_, b, c)


def fsel(d: F32, a_: F32, b: F32, p: P) -> Instr:
    """d = p ? a : b."""
    _f32("FSEL", d=d, a=a_, b=b)
    return ins(FSEL, "", d, a_, b, p)


MUFU_FUNCS = ("EX2", "RSQ", "RCP", "LG2")


def mufu(func: str, d: F32, a_: F32) -> Instr:
    """d ≈ func(a) on the special-function unit: EX2 (2^a), RSQ (1/√a), RCP (1/a), LG2 (log2 a)."""
    if func not in MUFU_FUNCS:
        raise WarpyError(f"MUFU: function {func!r} is not one of {', '.join(MUFU_FUNCS)}")
    _f32(f"MUFU.{func}", d=d, a=a_)
    return ins(MUFU, func, d, a_)


def ex2(d: F32, a_: F32) -> Instr:
    return mufu("EX2", d, a_)


def rsq(d: F32, a_: F32) -> Instr:
    return mufu("RSQ", d, a_)


def rcp(d: F32, a_: F32) -> Instr:
    return mufu("RCP", d, a_)


def lg2(d: F32, a_: F32) -> Instr:
    return mufu("LG2", d, a_)


def _packed(where: str, **ops: object) -> str:
    for name, x in ops.items():
        need(where, name, x, BF16x2, F16x2)
    kind = same_type(where, **ops)
    return "BF16_V2" if kind is BF16x2 else ""


@overload
def hadd2(d: BF16x2, a_: BF16x2, b: BF16x2) -> Instr: ...
@overload
def hadd2(d: F16x2, a_: F16x2, b: F16x2) -> Instr: ...
def hadd2(d: Packed, a_: Packed, b: Packed) -> Instr:
    """d = a + b in each half (bf16 pairs: HADD2.BF16_V2; fp16 pairs: HADD2)."""
    return ins(HADD2, _packed("HADD2", d=d, a=a_, b=b), d, a_, b)


@overload
def hmul2(d: BF16x2, a_: BF16x2, b: BF16x2) -> Instr: ...
@overload
def hmul2(d: F16x2, a_: F16x2, b: F16x2) -> Instr: ...
def hmul2(d: Packed, a_: Packed, b: Packed) -> Instr:
    return ins(HMUL2, _packed("HMUL2", d=d, a=a_, b=b), d, a_, b)


@overload
def hfma2(d: BF16x2, a_: BF16x2, b: BF16x2, c: BF16x2) -> Instr: ...
@overload
def hfma2(d: F16x2, a_: F16x2, b: F16x2, c: F16x2) -> Instr: ...
def hfma2(d: Packed, a_: Packed, b: Packed, c: Packed) -> Instr:
    return ins(HFMA2, _packed("HFMA2", d=d, a=a_, b=b, c=c), d, a_, b, c)


@overload
def hmin2(d: BF16x2, a_: BF16x2, b: BF16x2, *, nan: bool = False) -> Instr: ...
@overload
def hmin2(d: F16x2, a_: F16x2, b: F16x2, *, nan: bool = False) -> Instr: ...
def hmin2(d: Packed, a_: Packed, b: Packed, *, nan: bool = False) -> Instr:
    mods = ".".join(m for m in (_packed("HMNMX2", d=d, a=a_, b=b), "NAN" if nan else "") if m)
    return ins(HMNMX2, mods, d, a_, b, PT)


@overload
def hmax2(d: BF16x2, a_: BF16x2, b: BF16x2, *, nan: bool = False) -> Instr: ...
@overload
def hmax2(d: F16x2, a_: F16x2, b: F16x2, *, nan: bool = False) -> Instr: ...
def hmax2(d: Packed, a_: Packed, b: Packed, *, nan: bool = False) -> Instr:
    mods = ".".join(m for m in (_packed("HMNMX2", d=d, a=a_, b=b), "NAN" if nan else "") if m)
    return ins(HMNMX2, mods, d, a_, b, ~PT)


def f2f(d: Float, a_: Float) -> Instr:
    """d = a converted between fp32, fp16 and bf16 (F2F.DST.SRC): widening is exact, narrowing rounds
    to nearest even. (ptxas emits fp32 -> 16-bit as F2FP and 16-bit -> fp32 as HADD2.F32 / a shift.)"""
    need("F2F", "d", d, F32, F16, BF16)
    need("F2F", "a", a_, F32, F16, BF16)
    if type(d) is type(a_):
        raise WarpyError(f"F2F: converting {what(a_)} into {what(d)} converts nothing; use MOV")
    return ins(F2F, f"{SPELLING[type(d)]}.{SPELLING[type(a_)]}", d, a_)


def f2fp(d: Union[BF16x2, F16x2, BF16, F16], hi: R, lo: F32, *, rnd: str = "RN") -> Instr:
    """Pack two fp32 values into a bf16/fp16 pair (d's type says which): bits 16-31 from `hi`, 0-15
    from `lo`; `hi` = RZ and d a BF16/F16 give one value in bits 0-15 (nearest even, or RZ)."""
    need("F2FP", "d", d, BF16x2, F16x2, BF16, F16)
    if isinstance(d, (BF16, F16)) and not (isinstance(hi, R) and hi.name == "RZ"):
        raise WarpyError(f"F2FP: d is {what(d)}: one value, so hi must be RZ, not {what(hi)}")
    if not (hi.name == "RZ"):
        need("F2FP", "hi", hi, F32)
    need("F2FP", "lo", lo, F32)
    if rnd not in ("RN", "RZ"):
        raise WarpyError(f"F2FP: rounding {rnd!r} is not RN or RZ")
    kind = "BF16" if isinstance(d, (BF16x2, BF16)) else "F16"
    return ins(F2FP, f"{kind}.F32.PACK_AB{'.RZ' if rnd == 'RZ' else ''}", d, hi, lo)


def i2f(d: Float, a_: Int, *, rnd: str = "RN") -> Instr:
    """d = the integer a as a float (d's type: F32 (I2FP, what ptxas emits), F16 or BF16 (I2F))."""
    need("I2F", "d", d, F32, F16, BF16)
    need("I2F", "a", a_, S32, U32)
    r = _rnd("I2F", rnd)
    src = "U32" if isinstance(a_, U32) else "S32"
    if isinstance(d, F32):
        return ins(I2FP, ".".join(m for m in ("F32", src, r) if m), d, a_)
    return ins(I2F, ".".join(m for m in (SPELLING[type(d)], "U32" if src == "U32" else "", r) if m), d, a_)


F2I_ROUND = {"RN": "", "TRUNC": "TRUNC", "FLOOR": "FLOOR", "CEIL": "CEIL"}


def f2i(d: Int, a_: Float, *, rnd: str = "TRUNC") -> Instr:
    """d = a rounded to an integer (TRUNC toward zero as C does, FLOOR, CEIL, RN nearest even),
    saturated to d's range (d: S32 or U32), NaN to 0."""
    need("F2I", "d", d, S32, U32)
    need("F2I", "a", a_, F32, F16, BF16)
    if rnd not in F2I_ROUND:
        raise WarpyError(f"F2I: rounding {rnd!r} is not one of {', '.join(F2I_ROUND)}")
    src = "" if isinstance(a_, F32) else SPELLING[type(a_)]
    mods = ".".join(m for m in ("U32" if isinstance(d, U32) else "", src, F2I_ROUND[rnd], "NTZ") if m)
    return ins(F2I, mods, d, a_)


def imin(d: R, a_: R, b: Union[R, int], *, unsigned: bool = False, arch: str = "sm_90a") -> Instr:
    """d = min(a, b) (signed unless `unsigned`; sm_100a prints two PT before the sources)."""
    mods, ops = _vimnmx(d, a_, b, PT, unsigned, arch)
    return ins(VIMNMX, mods, *ops)


def imax(d: R, a_: R, b: Union[R, int], *, unsigned: bool = False, arch: str = "sm_90a") -> Instr:
    mods, ops = _vimnmx(d, a_, b, ~PT, unsigned, arch)
    return ins(VIMNMX, mods, *ops)


def _vimnmx(d: R, a_: R, b: Union[R, int], which: P, unsigned: bool, arch: str) -> tuple[str, tuple[Union[R, P, int], ...]]:
    for name, x in (("d", d), ("a", a_), ("b", b)):
        if isinstance(x, Typed) and not isinstance(x, (S32, U32)):
            raise WarpyError(f"VIMNMX: operand {name} is {what(x)}; an integer min/max takes integer registers")
    mods = "U32" if unsigned else ""
    if target(arch).iadd3_carry_outs:
        return mods, (d, PT, PT, a_, b, which)
    return mods, (d, a_, b, which)


FULL_WARP = 0xFFFFFFFF


def shfl_source(mode: str, lane: int, b: int, c: int) -> tuple[int, bool]:
    """(source lane, in range) of `lane` for SHFL.mode with lane operand b and clamp/segment word c
    (PTX shfl.sync: c[4:0] the clamp, c[12:8] the segment mask); out of range a lane reads its own."""
    bval, cval, seg = b & 0x1F, c & 0x1F, (c >> 8) & 0x1F
    max_lane = (lane & seg) | (cval & ~seg)
    min_lane = lane & seg
    if mode == "UP":
        j = lane - bval
        ok = j >= max_lane
    elif mode == "DOWN":
        j = lane + bval
        ok = j <= max_lane
    elif mode == "BFLY":
        j = lane ^ bval
        ok = j <= max_lane
    else:
        j = min_lane | (bval & ~seg)
        ok = j <= max_lane
    return (j if ok else lane), ok


def shfl(mode: str, d: R, a_: R, b: Union[R, int], c: Union[R, int] = 0x1F, *, p: P = PT,
         members: int = FULL_WARP) -> Instr:
    """d = a of another lane (SHFL.BFLY: lane ^ b; IDX: lane b; DOWN: lane + b; UP: lane - b), within
    the segment c says (0x1f: the warp; UP takes c = 0); p: the source was in range. `members` are the
    lanes taking part: every one must execute it, and none may read a lane outside them (checked here
    when b and c are constants, by the checker otherwise)."""
    if mode not in ("BFLY", "IDX", "DOWN", "UP"):
        raise WarpyError(f"SHFL: mode {mode!r} is not BFLY, IDX, DOWN or UP")
    if not 0 < members <= FULL_WARP:
        raise WarpyError(f"SHFL.{mode}: the member mask {members:#x} names no lane of the warp")
    if isinstance(b, int) and isinstance(c, int):
        for lane in range(32):
            if members >> lane & 1:
                src, ok = shfl_source(mode, lane, b, c)
                if ok and not members >> src & 1:
                    raise WarpyError(f"SHFL.{mode}: lane {lane} reads lane {src}, which the member mask {members:#010x} "
                                     f"excludes")
    ops: list[object] = [p, d, a_, b, c]
    if members != FULL_WARP:
        ops.append(members)
    return ins(SHFL, mode, *ops)  # type: ignore[arg-type]


def shfl_bfly(d: R, a_: R, lane_mask: int, *, members: int = FULL_WARP) -> Instr:
    """d = a of lane ^ lane_mask (the butterfly of a reduction)."""
    return shfl("BFLY", d, a_, lane_mask, 0x1F, members=members)


def shfl_idx(d: R, a_: R, lane: Union[R, int], *, members: int = FULL_WARP) -> Instr:
    """d = a of lane `lane` (a broadcast when `lane` is the same in every lane)."""
    return shfl("IDX", d, a_, lane, 0x1F, members=members)


def shfl_down(d: R, a_: R, delta: int, *, p: P = PT, members: int = FULL_WARP) -> Instr:
    """d = a of lane + delta (lanes past 31 keep their own a; p says which did not)."""
    return shfl("DOWN", d, a_, delta, 0x1F, p=p, members=members)


def vote_any(d: P, p: P) -> Instr:
    return ins(VOTE, "ANY", d, p)


def vote_all(d: P, p: P) -> Instr:
    return ins(VOTE, "ALL", d, p)


def ballot(d: R, p: P) -> Instr:
    """d = the bits of the lanes where p holds (lanes not taking part: 0)."""
    return ins(VOTE, "ANY", d, PT, p)


REDUX_OPS = {"AND": "", "SUM": "SUM", "MIN": "MIN", "MAX": "MAX", "OR": "OR", "XOR": "XOR"}


def redux(op: str, d: UR, a_: R, *, signed: bool = False) -> Instr:
    """d = op over the taking-part lanes' a (SUM wraps at 32 bits; MIN/MAX unsigned unless `signed`)."""
    if op not in REDUX_OPS:
        raise WarpyError(f"REDUX: operation {op!r} is not one of {', '.join(REDUX_OPS)}")
    if signed and op not in ("MIN", "MAX"):
        raise WarpyError(f"REDUX.{op}: only MIN and MAX have a signed form")
    if isinstance(a_, Typed) and not isinstance(a_, (S32, U32)):
        raise WarpyError(f"REDUX: operand a is {what(a_)}; the warp reduction adds integers")
    return ins(REDUX, ".".join(m for m in (REDUX_OPS[op], "S32" if signed else "") if m), d, a_)


def uplop3_mov(p: UP, src: UP) -> Instr:
    """p = src (uniform predicates)."""
    return ins(UPLOP3, "LUT", p, UPT, UPT, UPT, src, 0x80, 0x8)


def pset(p: P, value: bool) -> Instr:
    """p = value (`PLOP3.LUT p, PT, PT, PT, PT, 0x80, 0x8` sets, `..., 0x8, 0x80` clears, as ptxas writes)."""
    return ins(PLOP3, "LUT", p, PT, PT, PT, PT, 0x80 if value else 0x8, 0x8 if value else 0x80)
