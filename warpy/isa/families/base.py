"""The opcode record every family module fills in, and the checks an instruction must pass.

An `Opcode` is keyed by the leading words of a mnemonic that decide what it does: `IADD3`,
`SYNCS.PHASECHK`, `WARPGROUP.DEPBAR`. An instruction's mnemonic finds its record by the longest
key that is a prefix of it (by dot-separated words); the remaining modifiers must match the
record's modifier groups, in order.

Operand kinds (`Arg.kind`), `|` meaning either:

| kind | operand |
|---|---|
| `R`, `UR`, `P`, `UP` | a register of that kind (zero/true registers included; predicates may be negated) |
| `Rv`, `URv` | a vector of consecutive registers (`Arg.width` gives how many, from the modifiers) |
| `I` | an integer immediate |
| `mem` | a shared/generic address `[R0+URZ+0x8]`, `[UR4]`, `[args]` |
| `gmem` | a global address through a memory descriptor `desc[UR4][R2.64+0x10]` |
| `gdesc`, `tmem`, `idesc` | descriptor operands `gdesc[UR8]`, `tmem[UR4]`, `idesc[UR5]` |
| `tmap` | a tensor map by name `tmap[a]` |
| `label` | a branch target |
| `sreg` | a special register `SR_TID.X` |
| `cbank` | a constant-bank word `c[0x0][0x28]` or a parameter `c[0x0][out]` |
| `sym` | a symbol `` `(dsmem) `` |
| `kw:WORD` | that keyword (`gsb0`, `SB0`) |

Roles: `d` the instruction writes the operand's registers, `u` reads them, `du` both.
"""

from __future__ import annotations

import re
from typing import Callable, Optional

import attrs

from warpy.errors import WarpyError
from warpy.isa.operands import (
    CBank,
    Desc,
    GMem,
    Imm,
    Kw,
    LabelRef,
    Mem,
    Operand,
    P,
    R,
    RVec,
    SReg,
    Sym,
    TmapRef,
    UP,
    UR,
    URVec,
)

SEM_CLASSES = (
    "alu",  # integer/logic arithmetic, moves, conversions between register files
    "compare",  # writes predicates from a comparison
    "predicate",  # predicate logic
    "special-reg",  # reads a special register
    "const-load",  # reads a constant-bank word (kernel parameters)
    "branch",
    "exit",
    "elect",  # one lane of the warp
    "vote",
    "shuffle",  # shfl.sync: a lane reads another lane's register
    "warp-reduce",  # redux.sync: a reduction over the warp's lanes into a uniform register
    "barrier-init",  # mbarrier.init
    "barrier-arrive",  # mbarrier arrive (optionally with expect_tx)
    "barrier-expect-tx",  # expect_tx without an arrival
    "barrier-wait",  # mbarrier try_wait.parity
    "barrier-inval",
    "named-barrier-sync",
    "named-barrier-arrive",
    "cluster-barrier-arrive",
    "cluster-barrier-wait",
    "warp-sync",
    "fence",
    "sleep",
    "load-shared",
    "store-shared",
    "load-global",
    "store-global",
    "reduce-global",  # red.global: an atomic update returning nothing
    "atomic-global",  # atom.global: an atomic update returning the old value
    "load-matrix",  # ldmatrix
    "store-matrix",  # stmatrix
    "tma-load",
    "tma-store",
    "tma-reduce",
    "tma-prefetch",
    "bulk-copy",
    "bulk-wait",  # cp.async.bulk.wait_group (DEPBAR.LE SB0)
    "bulk-commit",
    "mma",
    "mma-fence",  # wgmma.fence (WARPGROUP.ARRIVE)
    "mma-commit",  # wgmma.commit_group: no SASS instruction of its own
    "mma-wait",  # wgmma.wait_group (WARPGROUP.DEPBAR.LE)
    "commit",  # tcgen05.commit: arrive on an mbarrier when the MMAs issued so far complete
    "tmem-alloc",
    "tmem-dealloc",
    "tmem-relinquish",
    "tmem-load",
    "tmem-store",
    "tmem-wait",
    "tc-fence",  # tcgen05.fence::before/after_thread_sync: no SASS of its own
    "setmaxnreg",
    "clc-try-cancel",
    "clc-query",  # no SASS of its own
    "dependent-wait",  # griddepcontrol.wait (ACQBULK)
    "dependent-launch",  # griddepcontrol.launch_dependents (PREEXIT)
    "cluster-map",  # mapa: a shared address in another CTA of the cluster
    "nop",
)

Width = Callable[[tuple[str, ...]], int]


@attrs.frozen
class Arg:
    """One operand position: its name (for messages), kind, role and, for vectors, width."""

    name: str
    kind: str
    role: str = "u"
    width: Optional[Width] = attrs.field(default=None, eq=False)

    def kinds(self) -> tuple[str, ...]:
        return tuple(self.kind.split("|"))


#: semantic classes whose SASS ptxas re-selects freely (an IADD3 may become IMAD.IADD or vanish, a
#: MOV an IMAD.MOV, an ISETP may fold into a branch; plain loads and stores are forwarded, dropped
#: when dead and merged into wider accesses; a shuffle or a warp reduction of a warp-uniform value
#: becomes a move, REDUX.MAX may print as CREDUX): the disassembly check does not ask for them
RESELECTED_CLASSES = frozenset({
    "alu", "compare", "predicate", "special-reg", "const-load", "vote", "shuffle", "warp-reduce", "branch", "exit", "nop",
    "warp-sync", "elect", "sleep", "load-shared", "store-shared", "load-global", "store-global",
})

Spelling = Callable[[tuple[str, ...]], tuple[str, ...]]


def _reselected(rec: "Opcode") -> bool:
    return rec.sem in RESELECTED_CLASSES


@attrs.frozen(eq=False, repr=False)
class Opcode:
    """An opcode record: every fact about one opcode. Records are compared and hashed by identity
    (one record a key, `warpy.isa.families.ALL`), which is what the registries key by.

    key: leading mnemonic words (`SYNCS.PHASECHK`); family: the module (`sync`); sem: semantic class
    (one of SEM_CLASSES); forms: operand signatures (one per arity); mods: modifier groups, each a
    regex a modifier may match, in order, `!` in front = required; single_issue: the instruction
    does its work once per warp, not per lane; warp_collective: ... but PTX spells it as an aligned
    instruction every lane executes (`tcgen05.alloc`: ptxas elects inside), so the lifter runs it on
    every lane where other single-issue instructions run on one elected lane; cta_group: a tcgen05
    instruction naming a `.cta_group` (`.2CTA` in the text, 1 without), of which PTX allows one per
    kernel; bulk_group: joins the issuing thread's bulk async-group (its commit and wait must run on
    the same lane); ptxas_emits: ptxas emits an instruction of this name (False: a warpy marker with
    no SASS of its own, e.g. the wgmma commit); reselected: ptxas re-selects or removes it at will
    (default: by semantic class, RESELECTED_CLASSES), so the disassembly check does not ask for it;
    spelling: how nvdisasm spells the mnemonic's words where it differs from the text (words in,
    words out); archs: targets that have it; ptx: the PTX it stands for; doc: what it does.
    """

    key: str
    family: str
    sem: str
    forms: tuple[tuple[Arg, ...], ...]
    mods: tuple[str, ...] = ()
    single_issue: bool = False
    warp_collective: bool = False
    cta_group: bool = False
    bulk_group: bool = False
    ptxas_emits: bool = True
    reselected: bool = attrs.field(default=attrs.Factory(_reselected, takes_self=True))
    spelling: Optional[Spelling] = None
    archs: frozenset[str] = frozenset({"sm_90a", "sm_100a"})
    ptx: str = ""
    doc: str = ""

    def __attrs_post_init__(self) -> None:
        if self.sem not in SEM_CLASSES:
            raise ValueError(f"{self.key}: unknown semantic class {self.sem!r}")
        if self.warp_collective and not self.single_issue:
            raise ValueError(f"{self.key}: warp_collective qualifies a single-issue instruction")

    def __repr__(self) -> str:
        return f"<opcode {self.key}>"

    def disasm_spelling(self, words: tuple[str, ...]) -> str:
        """The mnemonic as nvdisasm prints an instruction of this record whose words are `words`."""
        return ".".join(self.spelling(words) if self.spelling is not None else words)

    @property
    def key_words(self) -> tuple[str, ...]:
        return tuple(self.key.split("."))

    def text_form(self) -> str:
        """A one-line synopsis: `IADD3 d:R, a:R|I, ...` (every form, `|`-separated)."""
        forms = []
        for f in self.forms:
            forms.append(", ".join(f"{a.name}:{a.kind}" for a in f))
        mods = "".join(f"[.{m.lstrip('!')}]" if not m.startswith("!") else f".{m[1:]}" for m in self.mods)
        return f"{self.key}{mods} " + " | ".join(forms)

    def check_mods(self, mods: tuple[str, ...], where: str) -> None:
        i = 0
        for g in self.mods:
            required = g.startswith("!")
            rx = g[1:] if required else g
            if i < len(mods) and re.fullmatch(rx, mods[i]):
                i += 1
            elif required:
                got = mods[i] if i < len(mods) else "nothing"
                raise WarpyError(f"{where}: {self.key} needs a modifier matching {rx}, got {got}")
        if i != len(mods):
            raise WarpyError(f"{where}: {self.key} does not take the modifier .{mods[i]} there")

    def form_for(self, n: int, where: str) -> tuple[Arg, ...]:
        for f in self.forms:
            if len(f) == n:
                return f
        arities = sorted({len(f) for f in self.forms})
        raise WarpyError(f"{where}: {self.key} takes {' or '.join(map(str, arities))} operands, not {n}")


def operand_fits(op: Operand, kind: str) -> bool:
    if kind == "R":
        return isinstance(op, R)
    if kind == "UR":
        return isinstance(op, UR)
    if kind == "P":
        return isinstance(op, P)
    if kind == "UP":
        return isinstance(op, UP)
    if kind == "Rv":
        return isinstance(op, (RVec, R))
    if kind == "URv":
        return isinstance(op, (URVec, UR))
    if kind == "I":
        return isinstance(op, Imm)
    if kind == "mem":
        return isinstance(op, Mem)
    if kind == "gmem":
        return isinstance(op, GMem)
    if kind in ("gdesc", "tmem", "idesc"):
        return isinstance(op, Desc) and op.kind == kind
    if kind == "tmap":
        return isinstance(op, TmapRef)
    if kind == "label":
        return isinstance(op, LabelRef)
    if kind == "sreg":
        return isinstance(op, SReg)
    if kind == "cbank":
        return isinstance(op, CBank)
    if kind == "sym":
        return isinstance(op, Sym)
    if kind.startswith("kw:"):
        return isinstance(op, Kw) and op.word == kind[3:]
    raise ValueError(f"unknown operand kind {kind!r}")


def describe(op: Operand) -> str:
    return f"{type(op).__name__} {op}"


def a(name: str, kind: str, role: str = "u", width: Optional[Width] = None) -> Arg:
    return Arg(name, kind, role, width)
