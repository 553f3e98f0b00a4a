"""The state one kernel's lift shares between the family modules: PTX register names for the SASS
registers, temporaries, operand rendering, the elected lane, tensor-map pointers, parameters.

Register mapping: `R`/`UR` are `.b32` (`%r12`/`%ur4` for physical names, `%rn3`/`%urn1` for the
programmer's names), `P`/`UP` are `.pred` (`%p0`/`%up1`, `%pn`/`%upn`). `RZ`/`URZ` read as 0 and
written go to a scratch register; `PT`/`UPT` read as `%pt` (true), `!PT` as `%pf` (false).
Temporaries: `%t` (.b32), `%td` (.b64), `%tp` (.pred), `%tq` (.b128), `%tm` (tensor-map pointers).
"""

from __future__ import annotations

import re
from typing import Callable, Optional, Protocol, Union

from warpy.errors import WarpyError
from warpy.isa.instr import Instr
from warpy.isa.registry import Registry
from warpy.isa.operands import GMem, Imm, Mem, Operand, P, R, RVec, Sym, UP, UR, URVec, elem_name
from warpy.isa.text import Kernel
from warpy.target import Target, dtype_bytes, target as target_of

Reg = Union[R, UR, P, UP]


SPECIAL = {
    "SR_TID.X": "%tid.x", "SR_TID.Y": "%tid.y", "SR_TID.Z": "%tid.z",
    "SR_CTAID.X": "%ctaid.x", "SR_CTAID.Y": "%ctaid.y", "SR_CTAID.Z": "%ctaid.z",
    "SR_NTID.X": "%ntid.x", "SR_NCTAID.X": "%nctaid.x", "SR_NCTAID.Y": "%nctaid.y", "SR_NCTAID.Z": "%nctaid.z",
    "SR_LANEID": "%laneid", "SR_CgaCtaId": "%cluster_ctarank",
    "SR_CLUSTERID.X": "%clusterid.x", "SR_CLUSTERID.Y": "%clusterid.y", "SR_CLUSTERID.Z": "%clusterid.z",
    "SR_CLOCKLO": "%clock", "SR_GLOBALTIMERLO": "%globaltimer_lo",
}

_PHYS = re.compile(r"(UR|UP|R|P)(\d+)$")


def ident(name: str) -> str:
    """A warpy name as a PTX identifier (`@` is not allowed there)."""
    return name.replace("@", "_at_")


def imm(v: int, signed: bool = False) -> str:
    """A 32-bit immediate: hex bit pattern, or signed decimal for signed instructions."""
    v &= 0xFFFFFFFF
    if signed and v >= 1 << 31:
        return str(v - (1 << 32))
    return str(v) if v < 10 else f"0x{v:08X}" if v >= 1 << 31 else hex(v)


class LiftContext:
    def __init__(self, kernel: Kernel, target: str) -> None:
        self.kernel = kernel
        self.header = kernel.header
        self.target = target
        self.arch: Target = target_of(target)
        self.lines: list[str] = []
        self.regs: dict[tuple[str, str], str] = {}
        self.named_count = {"R": 0, "UR": 0, "P": 0, "UP": 0}
        self.phys_max = {"R": -1, "UR": -1, "P": -1, "UP": -1}
        self.temp_count = {"t": 0, "td": 0, "tp": 0, "tq": 0, "th": 0}
        self.label_n = 0
        self.uses_elect = False
        self.tmaps_used: dict[str, str] = {}
        self.cta_group = 1
        self.decl_width = {d.name: d.width for d in kernel.header.regs}
        # the instruction being lifted (for messages) and whether it runs on the elected lane
        self.where = ""
        self.single_issue = False
        self.issuer: Optional[str] = None

    # -- errors ---------------------------------------------------------------------------
    def error(self, msg: str) -> WarpyError:
        return WarpyError(f"{self.where}: {msg}" if self.where else msg)

    # -- output ---------------------------------------------------------------------------
    def emit(self, line: str) -> None:
        self.lines.append("    " + line + ";")

    def issue(self, line: str) -> None:
        """The line that does a single-issue instruction's work: on one lane only (the lane elected
        at entry, `%pe`, unless the driver knows the lane: `issuer` is then its predicate, or "" in a
        region only one lane runs)."""
        if self.issuer is None:
            self.uses_elect = True
            self.emit(f"@%pe {line}")
        elif self.issuer:
            self.emit(f"@{self.issuer} {line}")
        else:
            self.emit(line)

    def label(self, prefix: str = "L") -> str:
        self.label_n += 1
        return f"$W{prefix}_{self.label_n}"

    def place_label(self, name: str) -> None:
        self.lines.append(f"{name}:")

    # -- registers ------------------------------------------------------------------------
    def _canon(self, name: str) -> str:
        # a declared vector named without an element means its element 0
        if "." not in name and self.decl_width.get(name, 1) > 1:
            return name + ".0"
        return name

    def reg(self, r: Reg) -> str:
        """The PTX register of a SASS register (not a zero/true register)."""
        kind = "UR" if isinstance(r, UR) else "UP" if isinstance(r, UP) else "R" if isinstance(r, R) else "P"
        name = self._canon(r.name)
        key = (kind, name)
        got = self.regs.get(key)
        if got is not None:
            return got
        pre = {"R": "%r", "UR": "%ur", "P": "%p", "UP": "%up"}[kind]
        m = _PHYS.fullmatch(name)
        if m and m.group(1) == kind:
            n = int(m.group(2))
            self.phys_max[kind] = max(self.phys_max[kind], n)
            got = f"{pre}{n}"
        else:
            got = f"{pre}n{self.named_count[kind]}"
            self.named_count[kind] += 1
        self.regs[key] = got
        return got

    def tmp(self, kind: str = "t") -> str:
        n = self.temp_count[kind]
        self.temp_count[kind] = n + 1
        return f"%{kind}{n}"

    @staticmethod
    def is_zero(op: object) -> bool:
        return isinstance(op, (R, UR)) and op.name in ("RZ", "URZ")

    @staticmethod
    def is_true(op: object) -> bool:
        return isinstance(op, (P, UP)) and op.name in ("PT", "UPT") and not op.neg

    @staticmethod
    def is_false(op: object) -> bool:
        return isinstance(op, (P, UP)) and op.name in ("PT", "UPT") and op.neg

    def src(self, op: Operand, signed: bool = False) -> str:
        """A 32-bit source operand: an immediate or a register (negated / inverted through a temp)."""
        if isinstance(op, Imm):
            return imm(op.value, signed)
        if isinstance(op, (R, UR)):
            if op.name in ("RZ", "URZ"):
                base = "0"
                if op.inv:
                    return imm(-1 if not op.neg else 1, signed)
                return base
            r = self.reg(R(op.name) if isinstance(op, R) else UR(op.name))
            if op.inv:
                t = self.tmp()
                self.emit(f"not.b32 {t}, {r}")
                r = t
            if op.neg:
                t = self.tmp()
                self.emit(f"neg.s32 {t}, {r}")
                r = t
            return r
        if isinstance(op, (RVec, URVec)):
            return self.reg(R(elem_name(op.name, 0)) if isinstance(op, RVec) else UR(elem_name(op.name, 0)))
        raise self.error(f"operand {op} is not a 32-bit value")

    def dst(self, op: Operand) -> str:
        if isinstance(op, (R, UR)):
            if op.name in ("RZ", "URZ"):
                return "%tz"
            if op.neg or op.inv:
                raise self.error(f"a destination cannot be negated: {op}")
            return self.reg(op)
        if isinstance(op, (RVec, URVec)):
            return self.elems(op, 1)[0]
        raise self.error(f"operand {op} is not a register destination")

    def elems(self, op: Operand, width: int) -> list[str]:
        """The PTX registers of `width` consecutive registers starting at op (a vector or register)."""
        if isinstance(op, (R, UR)) and op.name in ("RZ", "URZ"):
            return ["0"] * width
        if isinstance(op, (RVec, R)):
            return [self.reg(R(self._elem(op.name, i))) for i in range(width)]
        if isinstance(op, (URVec, UR)):
            return [self.reg(UR(self._elem(op.name, i))) for i in range(width)]
        raise self.error(f"operand {op} is not a register vector")

    def _elem(self, name: str, i: int) -> str:
        if _PHYS.fullmatch(name) or "." in name:
            return elem_name(name, i)
        if self.decl_width.get(name, 1) > 1:
            return f"{name}.{i}"
        if i == 0:
            return name
        raise self.error(f"{name} is one register, not a vector of {i + 1}")

    def wide(self, op: Operand) -> str:
        """A 64-bit value from a register pair (lo, hi) as a .b64 temporary."""
        if isinstance(op, Imm):
            return str(op.value & 0xFFFFFFFFFFFFFFFF)
        if self.is_zero(op):
            return "0"
        lo, hi = self.elems(op, 2)
        t = self.tmp("td")
        self.emit(f"mov.b64 {t}, {{{lo}, {hi}}}")
        return t

    def set_wide(self, op: Operand, value64: str) -> None:
        if self.is_zero(op):
            return
        lo, hi = self.elems(op, 2)
        self.emit(f"mov.b64 {{{lo}, {hi}}}, {value64}")

    # -- predicates -----------------------------------------------------------------------
    def pred(self, op: Operand) -> str:
        """A predicate source as a plain register (negation through a temp)."""
        if not isinstance(op, (P, UP)):
            raise self.error(f"operand {op} is not a predicate")
        if op.name in ("PT", "UPT"):
            return "%pf" if op.neg else "%pt"
        r = self.reg(P(op.name) if isinstance(op, P) else UP(op.name))
        if op.neg:
            t = self.tmp("tp")
            self.emit(f"not.pred {t}, {r}")
            return t
        return r

    def pred_neg(self, op: Operand) -> str:
        """A predicate source where PTX accepts `!p` (guards, setp's combining operand)."""
        assert isinstance(op, (P, UP))
        if op.name in ("PT", "UPT"):
            return "%pf" if op.neg else "%pt"
        r = self.reg(P(op.name) if isinstance(op, P) else UP(op.name))
        return ("!" if op.neg else "") + r

    def pred_dst(self, op: Operand) -> str:
        if not isinstance(op, (P, UP)) or op.neg:
            raise self.error(f"operand {op} is not a predicate destination")
        if op.name in ("PT", "UPT"):
            return self.tmp("tp")
        return self.reg(op)

    # -- addresses ------------------------------------------------------------------------
    def smem_addr(self, m: Operand) -> str:
        """`[reg+off]` for a shared (cta or cluster window) address operand."""
        if not isinstance(m, Mem):
            raise self.error(f"operand {m} is not a shared-memory address")
        if isinstance(m.base, (RVec, URVec)) and m.base.width > 1:
            raise self.error(f"address [{m.base}] is a register tuple, not an address")
        parts = []
        if m.base is not None and not self.is_zero(m.base):
            parts.append(self.src(m.base))
        if m.ubase is not None and not self.is_zero(m.ubase):
            parts.append(self.src(m.ubase))
        if len(parts) == 2:
            t = self.tmp()
            self.emit(f"add.u32 {t}, {parts[0]}, {parts[1]}")
            parts = [t]
        if not parts:
            return f"[{m.offset}]"
        if m.offset:
            return f"[{parts[0]}+{m.offset}]"
        return f"[{parts[0]}]"

    def gmem_addr(self, g: Operand) -> str:
        if not isinstance(g, GMem):
            raise self.error(f"operand {g} is not a global address")
        a = self.wide(g.addr)
        return f"[{a}+{g.offset}]" if g.offset else f"[{a}]"

    def args(self, m: Operand, count: int) -> list[str]:
        """The registers of a TMA argument tuple `[args]`."""
        if not isinstance(m, Mem) or m.base is None or m.offset or m.ubase is not None:
            raise self.error(f"the TMA argument tuple must be [vector], not {m}")
        return self.elems(m.base, count)

    def tmap(self, name: str) -> str:
        names = [t.name for t in self.header.tmaps]
        if name not in names:
            raise self.error(f"tmap[{name}] names no .tmap line (tensor maps: {', '.join(names) or 'none'})")
        if name not in self.tmaps_used:
            self.tmaps_used[name] = f"%tm{len(self.tmaps_used)}"
        return self.tmaps_used[name]

    def sym(self, s: Operand) -> str:
        if isinstance(s, Sym) and s.name == "dsmem":
            return "dsmem"
        raise self.error(f"unknown symbol {s}")

    def special(self, sr: str) -> str:
        got = SPECIAL.get(sr)
        if got is None:
            raise self.error(f"special register {sr} has no PTX equivalent known to the lifter")
        return got

    # -- kernel parameters ----------------------------------------------------------------
    def param_layout(self) -> list[tuple[str, str, int]]:
        """(name, type, byte offset) of each kernel parameter, as the CUDA ABI places them."""
        out = []
        off = 0
        for name, typ in self.header.kernel_params():
            size, align = (128, 64) if typ == "tmap" else (dtype_bytes(typ), dtype_bytes(typ))
            off = (off + align - 1) // align * align
            out.append((name, typ, off))
            off += size
        return out

    def param_at(self, offset: Union[int, str]) -> tuple[str, str, int]:
        """(name, type, byte offset into the parameter) of a constant-bank word."""
        layout = self.param_layout()
        if isinstance(offset, str):
            for name, typ, off in layout:
                if name == offset:
                    return name, typ, 0
            raise self.error(f"c[0x0][{offset}] names no kernel parameter ({', '.join(n for n, _, _ in layout) or 'none'})")
        rel = offset - self.arch.param_base
        for name, typ, off in layout:
            size = 128 if typ == "tmap" else dtype_bytes(typ)
            if off <= rel < off + size:
                return name, typ, rel - off
        raise self.error(f"constant-bank word {offset:#x} is not a kernel parameter of this kernel")


class LiftRule(Protocol):
    """A lift rule: append the PTX of instruction `i` (its modifiers other than the record's key
    words: `rest`) to the context."""

    def __call__(self, c: LiftContext, i: Instr, rest: tuple[str, ...], /) -> None: ...


Rule = LiftRule

#: every lift rule, by opcode record (filled by the family modules as they are imported)
LIFT_RULES: Registry[LiftRule] = Registry("lift rule")
rule = LIFT_RULES.register


def width_of(op: Operand, default: int) -> int:
    if isinstance(op, (RVec, URVec)) and op.width:
        return op.width
    return default


_ = Optional
