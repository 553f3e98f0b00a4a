"""Functions registered against opcode records: lift rules, checker semantics, value semantics.

A family module registers each function next to its definition, naming the records it serves:

    @LIFT_RULES.register(alu.IADD3, alu.UIADD3)
    def _iadd3(c: LiftContext, i: Instr, rest: tuple[str, ...]) -> None: ...

The key is the record itself (`warpy.isa.families.<family>.<NAME>`), never a string, so a typo is a
NameError at import and a rename reaches every registry. A record registered twice in one registry
is refused at import. `missing(records)` lists the records a registry has nothing for (the opcode
walk test asserts it is empty for the lifter and the checker).
"""

from __future__ import annotations

from typing import Callable, Generic, Iterable, Iterator, Optional, TypeVar

from warpy.isa.families.base import Opcode

F = TypeVar("F")


class Registry(Generic[F]):
    """A map from opcode records to functions of one kind (`what` names the kind in messages)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._by: dict[Opcode, F] = {}

    def register(self, *records: Opcode) -> Callable[[F], F]:
        """A decorator registering the function for each of `records`."""
        if not records:
            raise ValueError(f"a {self.what} must name the records it serves")

        def deco(fn: F) -> F:
            for rec in records:
                self.add(rec, fn)
            return fn

        return deco

    def add(self, rec: Opcode, fn: F) -> None:
        if not isinstance(rec, Opcode):
            raise TypeError(f"a {self.what} is registered against an opcode record, not {rec!r}")
        if rec in self._by:
            raise RuntimeError(f"{rec.key} has two {self.what}s")
        self._by[rec] = fn

    def include(self, other: "Registry[F]") -> None:
        """Every entry of `other` (a registry of the same kind defined at a lower layer)."""
        for rec, fn in other.items():
            self.add(rec, fn)

    def __getitem__(self, rec: Opcode) -> F:
        return self._by[rec]

    def get(self, rec: Opcode) -> Optional[F]:
        return self._by.get(rec)

    def __contains__(self, rec: object) -> bool:
        return rec in self._by

    def __len__(self) -> int:
        return len(self._by)

    def __iter__(self) -> Iterator[Opcode]:
        return iter(self._by)

    def items(self) -> Iterator[tuple[Opcode, F]]:
        return iter(self._by.items())

    def missing(self, records: Iterable[Opcode]) -> list[Opcode]:
        """The records among `records` with no entry here."""
        return [r for r in records if r not in self._by]

    def remove(self, rec: Opcode) -> F:
        """Take a record's entry out (tests do this to prove the walk notices)."""
        return self._by.pop(rec)


__all__ = ["Registry"]
