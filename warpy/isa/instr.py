"""Instructions, labels and derived-operand notes: the lines of a program's text."""

from __future__ import annotations

import re
from typing import Any, Callable, Union

import attrs

from warpy.errors import WarpyError
from warpy.isa.operands import P, UP, Operand, Reg, map_regs, regs_of

MARKS = (" ", "+", "~")
#: `+`: an address (or descriptor) the program derived from a buffer's layout;
#: `~`: loop and ring bookkeeping; ` `: the program's own instruction.

NOTE_FORMS = ("addr", "gdesc.lo", "gdesc.hi", "udesc.lo", "udesc.hi")


@attrs.frozen
class Affine:
    """An integer affine expression over register names: const + sum(coef * reg)."""

    const: int = 0
    terms: tuple[tuple[int, str], ...] = ()

    def __str__(self) -> str:
        out = ""
        for c, n in self.terms:
            t = n if c == 1 else (f"-{n}" if c == -1 else f"{n}*{c}")
            if out and not t.startswith("-"):
                out += "+"
            out += t
        if self.const or not out:
            if out and self.const > 0:
                out += "+"
            out += str(self.const)
        return out

    def rename(self, f: Callable[[str], str]) -> "Affine":
        return Affine(self.const, tuple((c, f(n)) for c, n in self.terms))

    def eval(self, env: Callable[[str], int]) -> int:
        return self.const + sum(c * env(n) for c, n in self.terms)

    def names(self) -> list[str]:
        return [n for _, n in self.terms]


_AFF_TERM = re.compile(r"\s*([+-]?)\s*(?:(\d+)\s*\*\s*([A-Za-z_][\w@.]*)|([A-Za-z_][\w@.]*)(?:\s*\*\s*(\d+))?|(\d+))\s*")


def parse_affine(s: str) -> Affine:
    pos = 0
    const = 0
    terms: list[tuple[int, str]] = []
    s = s.strip()
    if not s:
        raise WarpyError("empty coordinate expression")
    while pos < len(s):
        m = _AFF_TERM.match(s, pos)
        if not m or m.end() == pos or (pos > 0 and not m.group(1)):
            raise WarpyError(f"cannot read coordinate expression {s!r} at character {pos + 1}")
        sign = -1 if m.group(1) == "-" else 1
        if m.group(6) is not None:
            const += sign * int(m.group(6))
        elif m.group(2) is not None:
            terms.append((sign * int(m.group(2)), m.group(3)))
        else:
            terms.append((sign * int(m.group(5) or 1), m.group(4)))
        pos = m.end()
    return Affine(const, tuple(terms))


@attrs.frozen
class Note:
    """What a derived operand is: operand `operand` of its line holds `form` of `buffer[coords]`.

    For a register operand that the line writes, the value after the line; for a memory operand,
    its address; for a register it reads, the value it reads. Coordinates are affine in registers
    (the program's indices: loop counters, ring stages), read at that line.
    Text: `addr sa[stage, 0, 32]`, with `op2: ` in front when the operand is not operand 0.
    """

    buffer: str
    coords: tuple[Affine, ...]
    form: str = "addr"
    operand: int = 0

    def __str__(self) -> str:
        pre = f"op{self.operand}: " if self.operand else ""
        return f"{pre}{self.form} {self.buffer}[{', '.join(str(c) for c in self.coords)}]"

    def rename(self, f: Callable[[str], str]) -> "Note":
        return attrs.evolve(self, coords=tuple(c.rename(f) for c in self.coords))

    def names(self) -> list[str]:
        return [n for c in self.coords for n in c.names()]


_NOTE_RE = re.compile(r"(?:op(\d+):\s*)?([a-z.]+)\s+([A-Za-z_][\w@]*)\[(.*)\]$")


def parse_note(s: str) -> Note:
    m = _NOTE_RE.fullmatch(s.strip())
    if not m:
        raise WarpyError(f"cannot read derived-operand note {s!r} (expected e.g. 'addr sa[stage, 0, 32]')")
    form = m.group(2)
    if form not in NOTE_FORMS:
        raise WarpyError(f"unknown note form {form!r} (known: {', '.join(NOTE_FORMS)})")
    coords = tuple(parse_affine(c) for c in m.group(4).split(",")) if m.group(4).strip() else ()
    return Note(m.group(3), coords, form, int(m.group(1) or 0))


@attrs.frozen
class Instr:
    """One instruction: `[mark] [@guard] NAME.MODS op, op, ...  // notes`.

    `name` is the first word of the mnemonic (`SYNCS`); `mods` the dot-modifiers after it
    (`PHASECHK`, `TRANS64`, `TRYWAIT`).
    """

    name: str
    mods: tuple[str, ...] = ()
    ops: tuple[Operand, ...] = ()
    guard: Union[P, UP, None] = None
    mark: str = " "
    notes: tuple[Note, ...] = ()

    @property
    def mnemonic(self) -> str:
        return ".".join((self.name,) + self.mods)

    def marked(self, mark: str) -> "Instr":
        return attrs.evolve(self, mark=mark)

    def guarded(self, guard: Union[P, UP, None]) -> "Instr":
        return attrs.evolve(self, guard=guard)

    def noted(self, *notes: Note) -> "Instr":
        return attrs.evolve(self, notes=self.notes + notes)

    def regs(self) -> list[Reg]:
        out: list[Reg] = []
        if self.guard is not None:
            out.append(self.guard)
        for op in self.ops:
            out.extend(regs_of(op))
        return out

    def rename(self, f: Callable[[Any], Any], fname: Callable[[str], str]) -> "Instr":
        return attrs.evolve(
            self,
            guard=None if self.guard is None else f(self.guard),
            ops=tuple(map_regs(op, f) for op in self.ops),
            notes=tuple(n.rename(fname) for n in self.notes),
        )

    def __str__(self) -> str:
        g = f"@{self.guard} " if self.guard is not None else ""
        s = f"{self.mark} {g}{self.mnemonic}"
        if self.ops:
            s += " " + ", ".join(str(o) for o in self.ops)
        if self.notes:
            s += "  // " + "; ".join(str(n) for n in self.notes)
        return s


@attrs.frozen
class Label:
    name: str

    def __str__(self) -> str:
        return f"{self.name}:"


@attrs.frozen
class Comment:
    """A whole-line comment, kept by the parser so that the text round-trips."""

    text: str

    def __str__(self) -> str:
        return f"// {self.text}" if self.text else "//"


Line = Union[Instr, Label, Comment]
