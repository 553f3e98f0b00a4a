"""The Hopper tensor core (sm_90a): `HGMMA` (wgmma), warpgroup fences and waits, `USETMAXREG`.

`HGMMA.64xNx16.F32.BF16 d, gdesc[descs], c[, scale][, gsb0]`: d and c are the accumulator vector
(N/2 registers for F32, N/4 for F16), c is `RZ` when the product is not added to d; `descs` is a
vector of 4 uniform registers (A's 64-bit shared-memory descriptor, then B's); scale is the
uniform predicate `scale-d` (`!UPT`: d = A*B); `gsb0` marks the last HGMMA of a group.
`gdesc[descs].tnspA` / `.tnspB` / `.tnspA.tnspB` (nvdisasm's spelling): A / B is read MN-major from
shared memory (wgmma's imm-trans-a / imm-trans-b = 1; 16-bit types only; the RS form takes `.tnspB`).
`wgmma.commit_group` emits no SASS instruction of its own: the text carries it as `WGMMA.COMMIT`.
nvdisasm omits the operand type of fp16 (`HGMMA.64x16x16.F32`); warpy always writes it (`.F16`).
8-bit float operands are a different opcode, `QGMMA.64xNx32.F32.A.B d, gdesc[descs], c[, scale][, gsb0]`
(A and B each `E4M3` or `E5M2`, K = 32 a step, both from shared memory and K-major only: fp8 wgmma has
no imm-trans operands; the RS form is not modelled).
"""

from __future__ import annotations

from typing import Union

from warpy.errors import WarpyError
from warpy.isa.families._util import ins
from warpy.isa.families.base import Opcode, a
from warpy.isa.instr import Instr
from warpy.isa.operands import RZ, Desc, Kw, RVec, UP, URVec

F = "wgmma"
H90 = frozenset({"sm_90a"})
SHAPE = r"!64x(8|16|24|32|40|48|56|64|72|80|88|96|104|112|120|128|136|144|152|160|168|176|184|192|200|208|216|224|232|240|248|256)x(8|16|32)"


def acc_width(mods: tuple[str, ...]) -> int:
    n = int(mods[0].split("x")[1])
    return n // 2 if mods[1] == "F32" else n // 4


_D = a("d", "Rv", "d", acc_width)
#: registers of A a thread holds in the RS form (64 x K: 8 16-bit elements, or 4 tf32, a thread)
A_REGS = 4
_A = a("descs", "gdesc")
_C = a("c", "Rv", "u", acc_width)

# The RS form's A: 4 registers (no width function: where an SS form has its descriptor in that slot, the
# text reader must not read a descriptor as a vector); its descriptor, in the slot where SS forms have
# c, says "not a vector" with width 0 (the reader takes the last form's width), so both forms read back.
_AR = a("a", "Rv", "u")
_AB = a("descs", "gdesc", "u", lambda mods: 0)
_CR = a("c", "Rv", "u")  # (no width either: an SS form has its scale or gsb0 in that slot)

HGMMA = Opcode("HGMMA", F, "mma", (
    (_D, _A, _C), (_D, _A, _C, a("scale", "UP")), (_D, _A, _C, a("end", "kw:gsb0")),
    (_D, _A, _C, a("scale", "UP"), a("end", "kw:gsb0")),
    (_D, _AR, _AB, _CR), (_D, _AR, _AB, _CR, a("scale", "UP")), (_D, _AR, _AB, _CR, a("end", "kw:gsb0")),
    (_D, _AR, _AB, _CR, a("scale", "UP"), a("end", "kw:gsb0")),
), mods=(SHAPE, r"!F32|F16", r"!BF16|F16|TF32"), single_issue=False, archs=H90,
    ptx="wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16 d, adesc, bdesc, scale-d, 1, 1, tA, tB "
        "(RS: d, {a0..a3}, bdesc, scale-d, 1, 1, tB); tA/tB = 1 for gdesc[..].tnspA/.tnspB",
    doc="warpgroup MMA into the register accumulator: both operands from shared memory by descriptor (SS), or "
        "A from registers, 4 a thread in the wgmma A fragment, and B by descriptor (RS: descs.2, descs.3)",
    spelling=lambda w: w[:3] if w[3:4] == ("F16",) else w)
QSHAPE = SHAPE.replace("x(8|16|32)", "x32")
QGMMA = Opcode("QGMMA", F, "mma", (
    (_D, _A, _C), (_D, _A, _C, a("scale", "UP")), (_D, _A, _C, a("end", "kw:gsb0")),
    (_D, _A, _C, a("scale", "UP"), a("end", "kw:gsb0")),
), mods=(QSHAPE, r"!F32|F16", r"!E4M3|E5M2", r"!E4M3|E5M2"), single_issue=False, archs=H90,
    ptx="wgmma.mma_async.sync.aligned.m64nNk32.f32.e4m3.e5m2 d, adesc, bdesc, scale-d, 1, 1 (A's type, then B's)",
    doc="warpgroup MMA of 8-bit floats (e4m3 / e5m2, A's type then B's) into the register accumulator, both "
        "operands K-major from shared memory by descriptor")
WARPGROUP_ARRIVE = Opcode("WARPGROUP.ARRIVE", F, "mma-fence", ((),), archs=H90, ptx="wgmma.fence.sync.aligned",
    doc="order earlier register/shared accesses before the following HGMMAs")
WGMMA_COMMIT = Opcode("WGMMA.COMMIT", F, "mma-commit", ((),), archs=H90, ptxas_emits=False, ptx="wgmma.commit_group.sync.aligned",
    doc="close the group of HGMMAs issued since the last commit; no SASS of its own (ptxas marks gsb0)")
WARPGROUP_DEPBAR = Opcode("WARPGROUP.DEPBAR", F, "mma-wait", ((a("sb", "kw:gsb0"), a("n", "I")),), mods=(r"!LE",), archs=H90,
    ptx="wgmma.wait_group.sync.aligned n", doc="wait until at most n HGMMA groups are pending")

OPCODES: list[Opcode] = [
    HGMMA, QGMMA, WARPGROUP_ARRIVE, WGMMA_COMMIT, WARPGROUP_DEPBAR,
]
#: the keys of the warpgroup MMA records (the checker treats them alike)
WGMMA_KEYS = frozenset({HGMMA.key, QGMMA.key})


#: HGMMA's operand type modifier and K of one step, by element type.
AB_TYPES = {"bf16": ("BF16", 16), "fp16": ("F16", 16), "f16": ("F16", 16), "tf32": ("TF32", 8)}
#: QGMMA's (8-bit floats): the type modifier of each operand and K of one step
Q_TYPES = {"e4m3": ("E4M3", 32), "e5m2": ("E5M2", 32)}
#: operand types HGMMA can read MN-major (transposed) from shared memory
TNSP_TYPES = ("BF16", "F16")


def _gdesc(descs: URVec, ab: str, tnsp_a: bool, tnsp_b: bool) -> Desc:
    if (tnsp_a or tnsp_b) and ab not in TNSP_TYPES:
        raise WarpyError(f"HGMMA reads {ab} operands only K-major: the transpose (MN-major) forms take "
                         f"{' or '.join(TNSP_TYPES)}")
    return Desc("gdesc", descs, (("tnspA",) if tnsp_a else ()) + (("tnspB",) if tnsp_b else ()))


def _accumulate(ops: list[object], d: RVec, accumulate: Union[UP, bool], end: bool) -> None:
    """The accumulator's operands of an MMA step: D = A·B (RZ, !UPT), D += A·B (D), D (+)= A·B as a
    uniform predicate says (D, p); and `gsb0` on the step that ends a group."""
    from warpy.isa.operands import UPT

    if accumulate is False:
        ops += [RZ, ~UPT]
    elif accumulate is True:
        ops += [d]
    else:
        ops += [d, accumulate]
    if end:
        ops.append(Kw("gsb0"))


def hgmma(shape_n: int, d: RVec, descs: URVec, accumulate: Union[UP, bool], end: bool = False, ab: str = "BF16",
          k: int = 16, tnsp_a: bool = False, tnsp_b: bool = False) -> Instr:
    """d (+)= A * B for a 64 x shape_n x k step; accumulate: a uniform predicate, True, or False (d = A*B);
    tnsp_a / tnsp_b: A / B is MN-major in shared memory (16-bit types)."""
    ops: list[object] = [d, _gdesc(descs, ab, tnsp_a, tnsp_b)]
    _accumulate(ops, d, accumulate, end)
    return ins(HGMMA, f"64x{shape_n}x{k}.F32.{ab}", *ops)  # type: ignore[arg-type]


def hgmma_rs(shape_n: int, d: RVec, a_regs: RVec, descs: URVec, accumulate: Union[UP, bool], end: bool = False,
             ab: str = "BF16", k: int = 16, tnsp_b: bool = False) -> Instr:
    """d (+)= A * B for a 64 x shape_n x k step with A from registers (`a_regs`: 4 a thread, in the wgmma
    A fragment, `warpy.layout.atoms.wgmma(n, a_from_registers=True).a`) and B by descriptor (descs.2,
    descs.3; descs.0/1 are not read; tnsp_b: B is MN-major). `warpy.isa.units.wgmma.hgmma_rs` checks the
    fragment."""
    ops: list[object] = [d, a_regs, _gdesc(descs, ab, False, tnsp_b)]
    _accumulate(ops, d, accumulate, end)
    return ins(HGMMA, f"64x{shape_n}x{k}.F32.{ab}", *ops)  # type: ignore[arg-type]


def qgmma(shape_n: int, d: RVec, descs: URVec, accumulate: Union[UP, bool], end: bool = False, a_type: str = "E4M3",
          b_type: str = "E4M3") -> Instr:
    """d (+)= A * B for a 64 x shape_n x 32 step of 8-bit floats (A's type `a_type`, B's `b_type`: E4M3 or
    E5M2), both K-major from shared memory by descriptor; accumulate as `hgmma`."""
    ops: list[object] = [d, Desc("gdesc", descs)]
    _accumulate(ops, d, accumulate, end)
    return ins(QGMMA, f"64x{shape_n}x32.F32.{a_type}.{b_type}", *ops)  # type: ignore[arg-type]


def warpgroup_arrive() -> Instr:
    return ins(WARPGROUP_ARRIVE, "ARRIVE")


def wgmma_commit() -> Instr:
    return ins(WGMMA_COMMIT, "COMMIT")


def warpgroup_wait(n: int) -> Instr:
    return ins(WARPGROUP_DEPBAR, "DEPBAR.LE", Kw("gsb0"), n)
