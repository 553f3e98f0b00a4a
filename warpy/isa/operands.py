"""Typed operands of SASS instructions, and their text.

Every operand kind is its own class, so that a builder typed `R` rejects a `UR` both at build
time (`expect`) and under mypy (sibling classes, no common base other than `Operand`).

A register is named by a string. In the *named* form of a program that is the programmer's name
(`stage`, `bar@stage`, `acc.3` = element 3 of the vector `acc`); in the *coloured* form it is a
physical register (`R12`, `UR4`, `P0`, `UP1`). The zero/true registers `RZ`, `URZ`, `PT`, `UPT`
are the same in both.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Union

import attrs

from warpy.errors import WarpyError

# ----------------------------------------------------------------------------------------
# names

#: A programmer's register name: letters, digits, `_` and `@` (`bar@stage`: a derived value's name says what it is).
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_@]*")
PHYS_RE = {
    "R": re.compile(r"R(\d+)"),
    "UR": re.compile(r"UR(\d+)"),
    "P": re.compile(r"P(\d)"),
    "UP": re.compile(r"UP(\d)"),
}
ZERO = {"R": "RZ", "UR": "URZ", "P": "PT", "UP": "UPT"}
#: Words that are never register names (they mean something else in operand position).
RESERVED = {"RZ", "URZ", "PT", "UPT", "gsb0", "SB0", "desc", "gdesc", "tmem", "idesc", "tmap", "c"}


def is_physical(kind: str, name: str) -> bool:
    return bool(PHYS_RE[kind].fullmatch(name)) or name == ZERO[kind]


def physical_kind(name: str) -> str | None:
    """The register kind a physical (coloured) name belongs to, or None for a programmer's name."""
    for kind in ("UR", "UP", "R", "P"):  # UR before R: "UR4" also fits nothing else
        if PHYS_RE[kind].fullmatch(name) or name == ZERO[kind]:
            return kind
    return None


def check_name(name: str, what: str = "register") -> str:
    base = name.split(".", 1)[0]
    if not NAME_RE.fullmatch(base) or base in RESERVED or base.startswith("SR_"):
        raise WarpyError(f"{what} name {name!r} is not a name (letters, digits, _ and @; not a reserved word)")
    if physical_kind(base) is not None:
        raise WarpyError(f"{what} name {name!r} looks like a physical register; pick another name")
    return name


def hexs(v: int) -> str:
    """An integer as nvdisasm prints it: 0x1f, -0x3."""
    return f"-0x{-v:x}" if v < 0 else f"0x{v:x}"


# ----------------------------------------------------------------------------------------
# registers


@attrs.frozen
class R:
    """A 32-bit general register (per lane). `neg`: `-R`; `inv`: `~R` (bitwise not)."""

    name: str
    neg: bool = False
    inv: bool = False
    kind = "R"

    def __neg__(self) -> "R":
        return attrs.evolve(self, neg=not self.neg)

    def __invert__(self) -> "R":
        return attrs.evolve(self, inv=not self.inv)

    def __str__(self) -> str:
        return ("-" if self.neg else "") + ("~" if self.inv else "") + self.name


@attrs.frozen
class UR:
    """A 32-bit uniform register (one value for the warp)."""

    name: str
    neg: bool = False
    inv: bool = False
    kind = "UR"

    def __neg__(self) -> "UR":
        return attrs.evolve(self, neg=not self.neg)

    def __invert__(self) -> "UR":
        return attrs.evolve(self, inv=not self.inv)

    def __str__(self) -> str:
        return ("-" if self.neg else "") + ("~" if self.inv else "") + self.name


@attrs.frozen
class P:
    """A predicate register (per lane). `~p` is `!p`."""

    name: str
    neg: bool = False
    kind = "P"

    def __invert__(self) -> "P":
        return attrs.evolve(self, neg=not self.neg)

    def __str__(self) -> str:
        return ("!" if self.neg else "") + self.name


@attrs.frozen
class UP:
    """A uniform predicate register."""

    name: str
    neg: bool = False
    kind = "UP"

    def __invert__(self) -> "UP":
        return attrs.evolve(self, neg=not self.neg)

    def __str__(self) -> str:
        return ("!" if self.neg else "") + self.name


@attrs.frozen
class RVec:
    """`width` consecutive general registers named as one (a pair, an accumulator of 128).

    Printed by its name (named form) or its first register (coloured form); element `i` is `v[i]`.
    `width` 0 means "as many as the opcode implies" (a coloured text read back without declarations).
    """

    name: str
    width: int
    kind = "R"

    def __getitem__(self, i: int) -> R:
        if self.width and not 0 <= i < self.width:
            raise WarpyError(f"element {i} of {self.name} (a vector of {self.width}) is out of range")
        return R(elem_name(self.name, i))

    def sub(self, start: int, width: int) -> "RVec":
        """Elements start..start+width-1 as a vector (e.g. 4 accumulator registers for one STG.128)."""
        if self.width and not (0 <= start and start + width <= self.width):
            raise WarpyError(f"elements {start}..{start + width - 1} of {self.name} (a vector of {self.width}) are out of range")
        return RVec(elem_name(self.name, start), width)

    def __str__(self) -> str:
        return self.name


@attrs.frozen
class URVec:
    """`width` consecutive uniform registers named as one (a descriptor pair, a TMA argument tuple)."""

    name: str
    width: int
    kind = "UR"

    def __getitem__(self, i: int) -> UR:
        if self.width and not 0 <= i < self.width:
            raise WarpyError(f"element {i} of {self.name} (a vector of {self.width}) is out of range")
        return UR(elem_name(self.name, i))

    def __str__(self) -> str:
        return self.name


def elem_name(vec: str, i: int) -> str:
    """Element i of a vector: `acc.3` named; `R27` for `R24`'s element 3 coloured."""
    for kind in ("UR", "R"):
        m = PHYS_RE[kind].fullmatch(vec)
        if m:
            return f"{kind}{int(m.group(1)) + i}"
    base, dot, start = vec.partition(".")
    if dot:
        return f"{base}.{int(start) + i}"
    return f"{vec}.{i}"


RZ = R("RZ")
URZ = UR("URZ")
PT = P("PT")
UPT = UP("UPT")

Reg = Union[R, UR, P, UP, RVec, URVec]

# ----------------------------------------------------------------------------------------
# other operands


@attrs.frozen
class Imm:
    """An integer immediate, printed in hex as nvdisasm does."""

    value: int

    def __str__(self) -> str:
        return hexs(self.value)


@attrs.frozen
class SReg:
    """A special register: `SR_TID.X`, `SR_CTAID.X`, `SR_CgaCtaId`, `SR_LANEID`..."""

    name: str

    def __str__(self) -> str:
        return self.name


SPECIAL_REGS = (
    "SR_TID.X", "SR_TID.Y", "SR_TID.Z", "SR_CTAID.X", "SR_CTAID.Y", "SR_CTAID.Z",
    "SR_NTID.X", "SR_NCTAID.X", "SR_NCTAID.Y", "SR_NCTAID.Z", "SR_LANEID", "SR_CgaCtaId",
    "SR_CLUSTERID.X", "SR_CLUSTERID.Y", "SR_CLUSTERID.Z", "SR_CLOCKLO", "SR_GLOBALTIMERLO",
)


@attrs.frozen
class CBank:
    """A constant-bank word: `c[0x0][0x28]`, or a kernel parameter by name: `c[0x0][out]`."""

    bank: int
    offset: Union[int, str]

    def __str__(self) -> str:
        off = self.offset if isinstance(self.offset, str) else hexs(self.offset)
        return f"c[{hexs(self.bank)}][{off}]"


@attrs.frozen
class Mem:
    """A shared (or generic) address: `[R0+URZ+0x8]`, `[UR17+0x8]`, `[R2.64]`, `[args]`.

    `base` is a general or uniform register (or vector, for the TMA argument tuple); `ubase` a
    uniform register added to it (nvdisasm's `[R0+URZ]`); `wide` marks a 64-bit register pair.
    """

    base: Union[R, UR, RVec, URVec, None] = None
    ubase: Union[UR, None] = None
    offset: int = 0
    wide: bool = False

    def __str__(self) -> str:
        parts: list[str] = []
        if self.base is not None:
            parts.append(str(self.base) + (".64" if self.wide else ""))
        if self.ubase is not None:
            parts.append(str(self.ubase))
        s = "+".join(parts)
        if self.offset or not parts:
            if not parts:
                s = hexs(self.offset)
            else:
                s += ("-" if self.offset < 0 else "+") + hexs(abs(self.offset))
        return f"[{s}]"

    def regs(self) -> list[Reg]:
        return [r for r in (self.base, self.ubase) if r is not None]


@attrs.frozen
class GMem:
    """A global address through a memory descriptor: `desc[UR4][R2.64+0x10]`."""

    desc: Union[URVec, UR]
    addr: Union[RVec, R]
    offset: int = 0

    def __str__(self) -> str:
        off = ""
        if self.offset:
            off = ("-" if self.offset < 0 else "+") + hexs(abs(self.offset))
        return f"desc[{self.desc}][{self.addr}.64{off}]"


DESC_KINDS = ("gdesc", "tmem", "idesc")
#: a gdesc operand's suffixes: HGMMA reads A (B) MN-major (wgmma's imm-trans-a / imm-trans-b = 1)
DESC_FLAGS = ("tnspA", "tnspB")


@attrs.frozen
class Desc:
    """A descriptor operand: `gdesc[UR8]` (smem matrix descriptors), `tmem[UR4]`, `idesc[UR5]`.
    `flags`: nvdisasm's operand suffixes, `gdesc[UR4].tnspA.tnspB` (HGMMA reads A / B MN-major)."""

    kind: str
    reg: Union[UR, URVec]
    flags: tuple[str, ...] = ()

    def __attrs_post_init__(self) -> None:
        bad = [f for f in self.flags if f not in DESC_FLAGS]
        if bad or list(self.flags) != sorted(set(self.flags)) or (self.flags and self.kind != "gdesc"):
            raise WarpyError(f"descriptor flags {'.'.join(self.flags)} on {self.kind}: only gdesc takes "
                             f"{', '.join(DESC_FLAGS)}, each once, in that order")

    def __str__(self) -> str:
        return f"{self.kind}[{self.reg}]" + "".join("." + f for f in self.flags)


@attrs.frozen
class TmapRef:
    """A tensor map: by its `.tmap` name, `tmap[a]`, or by the address of its descriptor in a
    uniform register pair, `tmap[desc]` (`reg`; a slot of a table of maps in global memory, chosen
    at run time: the megakernel's instructions name their maps by index).

    nvdisasm prints the uniform register pair holding the map's address in both cases; for a named
    map warpy names the map itself, so the lifter and the checker know which `.tmap` line it is
    (ptxas materialises the address; see docs/sass.md). For the register form the checker resolves
    the address to the table slot it points at.
    """

    name: str = ""
    reg: Union[URVec, UR, None] = None

    def __attrs_post_init__(self) -> None:
        if (self.reg is None) == (not self.name):
            raise WarpyError("a tensor map operand names a .tmap or holds a register pair, exactly one of them")

    def __str__(self) -> str:
        return f"tmap[{self.reg if self.reg is not None else self.name}]"


@attrs.frozen
class LabelRef:
    """A branch target, printed bare (`BRA LOOP_3`)."""

    name: str

    def __str__(self) -> str:
        return self.name


@attrs.frozen
class Sym:
    """A link-time symbol, printed as nvdisasm prints symbols: `` `(dsmem) `` (the dynamic shared memory)."""

    name: str

    def __str__(self) -> str:
        return f"`({self.name})"


@attrs.frozen
class Kw:
    """A keyword operand: `gsb0` (the wgmma scoreboard), `SB0` (the async-copy scoreboard)."""

    word: str

    def __str__(self) -> str:
        return self.word


KEYWORDS = ("gsb0", "SB0")

Operand = Union[R, UR, P, UP, RVec, URVec, Imm, SReg, CBank, Mem, GMem, Desc, TmapRef, LabelRef, Sym, Kw]


def regs_of(op: Operand) -> list[Reg]:
    """The registers an operand names (memory and descriptor operands name theirs inside)."""
    if isinstance(op, (R, UR, P, UP, RVec, URVec)):
        return [op]
    if isinstance(op, Mem):
        return op.regs()
    if isinstance(op, GMem):
        return [op.desc, op.addr]
    if isinstance(op, Desc):
        return [op.reg]
    if isinstance(op, TmapRef) and op.reg is not None:
        return [op.reg]
    return []


def map_regs(op: Operand, f: Callable[[Any], Any]) -> Operand:
    """The operand with every register replaced by f(register) (f keeps each register's kind)."""
    if isinstance(op, (R, UR, P, UP, RVec, URVec)):
        return f(op)  # type: ignore[no-any-return]
    if isinstance(op, Mem):
        return attrs.evolve(
            op,
            base=None if op.base is None else f(op.base),
            ubase=None if op.ubase is None else f(op.ubase),
        )
    if isinstance(op, GMem):
        return attrs.evolve(op, desc=f(op.desc), addr=f(op.addr))
    if isinstance(op, Desc):
        return attrs.evolve(op, reg=f(op.reg))
    if isinstance(op, TmapRef) and op.reg is not None:
        return attrs.evolve(op, reg=f(op.reg))
    return op


def is_zero(r: Reg) -> bool:
    return r.name in ("RZ", "URZ", "PT", "UPT")
