"""Typed general registers: what a 32-bit register holds, for the builders of float, packed 16-bit,
conversion and warp-communication instructions.

A typed register is an `R` (every builder that takes an `R` takes it, and the text prints its name
alone), subclassed by what it holds:

| class | the register holds |
|---|---|
| `F32` | one fp32 value |
| `F16x2`, `BF16x2` | two 16-bit floats, element 0 in bits 0-15, element 1 in bits 16-31 |
| `F16`, `BF16` | one 16-bit float in bits 0-15 (a conversion writes bits 16-31 zero) |
| `S32`, `U32` | a signed / unsigned 32-bit integer |

The type is the builder's to read: `alu.hadd2(d, a, b)` adds bf16 pairs when its operands are
`BF16x2` (`HADD2.BF16_V2`) and fp16 pairs when they are `F16x2`; `alu.i2f(d, a)` converts from
unsigned when `a` is `U32`. So a builder refuses what does not fit, at build time in one line
(`need`), and mypy refuses it statically: the classes are siblings, an `F32` is no `BF16x2`. The
type lives in the builder's arguments only; a parsed text has plain registers (the modifiers say
what the instruction does).

    x = F32.of(p.r("x"))          # or F32("x") for a name the program declared
    pair = BF16x2.of(frag[0])
"""

from __future__ import annotations

from typing import TypeVar, Union

import attrs

from warpy.errors import WarpyError
from warpy.isa.operands import R, RVec

T = TypeVar("T", bound="Typed")


@attrs.frozen
class Typed(R):
    """A general register whose contents have a type (a subclass says which)."""

    holds = "a typed value"

    def __neg__(self: T) -> T:
        """`-x`: for a float, x with its sign flipped (what the float instructions read)."""
        return attrs.evolve(self, neg=not self.neg)

    @classmethod
    def of(cls: type[T], r: R) -> T:
        """The register `r` (a program's register or a vector's element) read as this type."""
        if isinstance(r, RVec):
            raise WarpyError(f"{cls.__name__}.of takes one register, not the vector {r.name} (take an element: v[0])")
        return cls(r.name, r.neg, r.inv)


@attrs.frozen
class F32(Typed):
    holds = "one fp32 value"


@attrs.frozen
class F16x2(Typed):
    holds = "two fp16 values"


@attrs.frozen
class BF16x2(Typed):
    holds = "two bf16 values"


@attrs.frozen
class F16(Typed):
    holds = "one fp16 value (bits 0-15)"


@attrs.frozen
class BF16(Typed):
    holds = "one bf16 value (bits 0-15)"


@attrs.frozen
class S32(Typed):
    holds = "a signed 32-bit integer"


@attrs.frozen
class U32(Typed):
    holds = "an unsigned 32-bit integer"


Packed = Union[F16x2, BF16x2]
Half = Union[F16, BF16]
Float = Union[F32, F16, BF16]
Int = Union[S32, U32]

#: the text spelling of each type where a modifier names it (conversions, packed arithmetic)
SPELLING: dict[type[Typed], str] = {F32: "F32", F16: "F16", BF16: "BF16", F16x2: "F16", BF16x2: "BF16",
                                    S32: "S32", U32: "U32"}


def what(x: object) -> str:
    """How a message names an operand: `F32 x (one fp32 value)`, `the untyped register x`, `the int 3`."""
    if isinstance(x, Typed):
        return f"{type(x).__name__} {x.name} ({x.holds})"
    if isinstance(x, R):
        return f"the untyped register {x.name}"
    if isinstance(x, bool) or not isinstance(x, int):
        return f"{type(x).__name__} {x}"
    return f"the int {x}"


def need(where: str, name: str, x: object, *types: type[Typed]) -> None:
    """Refuse, in one line, an operand that is not a register of one of `types`."""
    if isinstance(x, types):
        return
    names = " or ".join(t.__name__ for t in types)
    art = "an" if names[0] in "AEFHILMNORSX" else "a"
    hint = f" (say what it holds: {types[0].__name__}.of(r))" if isinstance(x, R) and not isinstance(x, Typed) else ""
    raise WarpyError(f"{where}: operand {name} must be {art} {names} register, not {what(x)}{hint}")


def same_type(where: str, **ops: object) -> type:
    """The one type all of `ops` share (refusing, in one line, operands of two types)."""
    kinds = {type(x) for x in ops.values()}
    if len(kinds) != 1:
        got = ", ".join(f"{n} is {what(x)}" for n, x in ops.items())
        raise WarpyError(f"{where}: the operands must hold one type; {got}")
    return kinds.pop()


__all__ = ["Typed", "F32", "F16x2", "BF16x2", "F16", "BF16", "S32", "U32", "Packed", "Half", "Float", "Int",
           "need", "same_type", "what", "SPELLING"]
