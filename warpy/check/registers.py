"""Operands as the checker's semantics read them: the register an operand names, the registers of a
vector, a 64-bit value from a register pair, an immediate's value, and lane values as 32-lane vectors."""

from __future__ import annotations

import numpy as np

from warpy.isa.operands import Imm, Operand, P, R, RVec, UP, UR, URVec, elem_name
from warpy.isa.values import LANES, Val, first
from warpy.check.state import Lanes, Warp


def reg_name(op: Operand) -> str:
    """The register or register vector an operand names (a vector's first register in a parsed
    coloured text)."""
    if isinstance(op, (R, UR, P, UP, RVec, URVec)):
        return op.name
    raise TypeError(f"{op} is not a register")


def regs_of(op: Operand, n: int) -> list[str]:
    """The names of the `n` registers starting at the operand's."""
    if isinstance(op, RVec):
        return [elem_name(op.name, i) for i in range(n)]
    name = reg_name(op)
    return [name] + [elem_name(name, i) for i in range(1, n)] if n > 1 else [name]


def imm(op: Operand) -> int:
    """An immediate operand's value."""
    if not isinstance(op, Imm):
        raise TypeError(f"{op} is not an immediate")
    return op.value


def pair64(w: Warp, name: str) -> int:
    """The 64-bit value of a register pair (elements 0 and 1 of `name`), from its first lane."""
    return int(first(w.regs.get(elem_name(name, 0), 0))) | (int(first(w.regs.get(elem_name(name, 1), 0))) << 32)


def lanes_u64(v: Val) -> np.ndarray:
    """A lane value as a vector of 32 uint64 lanes."""
    return np.broadcast_to(np.asarray(v, dtype=np.uint64), (LANES,))


def lanes_i64(v: Val) -> np.ndarray:
    """A lane value (an address) as a vector of 32 int64 lanes."""
    if isinstance(v, np.ndarray) and v.shape == (LANES,):
        return v.astype(np.int64)
    return np.broadcast_to(np.asarray(v, dtype=np.int64), (LANES,))


def active(v: Val, lanes: Lanes) -> np.ndarray:
    """The values of the lanes taking part, as int64."""
    a = lanes_i64(v)
    return a if lanes is None else a[lanes]


def all_lanes(lanes: Lanes) -> np.ndarray:
    """The lanes taking part as a bool vector."""
    return np.ones(LANES, dtype=bool) if lanes is None else lanes
