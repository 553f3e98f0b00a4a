"""Register values as the host checker and the isa's interpreter both hold them: a register holds a
Python int (the same in every lane: most registers are) or a numpy uint64 vector of 32 lanes,
always reduced to 32 bits; a predicate a bool or a bool vector. A warp is anything with a `regs`
dict (name -> value; vector elements are `name.k`).

Operand readers and writers are compiled once per instruction (closures), so an interpreter's
inner loop does no isinstance dispatch. `warpy.isa.semantics` computes the ALU's values on them.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Optional, Union

import numpy as np

from warpy.errors import WarpyError
from warpy.isa.operands import CBank, Imm, Mem, Operand, P, R, RVec, SReg, Sym, UP, UR, URVec, elem_name

M32 = 0xFFFFFFFF
LANES = 32
LANE_IDS = np.arange(LANES, dtype=np.uint64)
ALL = np.ones(LANES, dtype=bool)

Val = Union[int, np.ndarray]
Reader = Callable[[Any], Any]


def is_vec(x: object) -> bool:
    return isinstance(x, np.ndarray)


def m32(x: Val) -> Val:
    return x & M32


def first(x: Val, mask: Optional[np.ndarray] = None) -> int:
    """The value of the first active lane (a uniform read of a per-lane value)."""
    if isinstance(x, np.ndarray):
        if mask is not None and mask.any():
            return int(x[int(np.argmax(mask))])
        return int(x[0])
    return int(x)


def as_bool(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return x.astype(bool)
    return bool(x)


_PHYS = re.compile(r"(UR|R|UP|P)(\d+)$")


def reg_id(name: str) -> tuple[str, int]:
    """(base, element) of a register name: `acc.5` -> (acc, 5); `R29` -> (R, 29); `k` -> (k, 0)."""
    m = _PHYS.match(name)
    if m:
        return m.group(1), int(m.group(2))
    base, dot, idx = name.partition(".")
    if dot and idx.isdigit():
        return base, int(idx)
    return name, 0


def reg_ids(op: Operand) -> list[tuple[str, int]]:
    if isinstance(op, R):
        if op.name == "RZ":
            return []
        return [reg_id(op.name)]
    if isinstance(op, RVec):
        return [reg_id(elem_name(op.name, i)) for i in range(max(op.width, 1))]
    return []


def reader(op: Operand, sreg: Callable[[Any, str], Any], cbank: Callable[[Union[int, str]], int],
           sym: Callable[[str], int]) -> Reader:
    if isinstance(op, Imm):
        v = op.value & M32
        return lambda w: v
    if isinstance(op, (R, UR)):
        if op.name in ("RZ", "URZ"):
            z = (-0 & M32) if op.neg else 0
            z = (~z & M32) if op.inv else z
            return lambda w: z
        n = op.name
        if op.inv and op.neg:
            return lambda w: (-(~w.regs.get(n, 0) & M32)) & M32
        if op.inv:
            return lambda w: ~w.regs.get(n, 0) & M32
        if op.neg:
            return lambda w: (0x100000000 - w.regs.get(n, 0)) & M32
        return lambda w: w.regs.get(n, 0)
    if isinstance(op, (P, UP)):
        if op.name in ("PT", "UPT"):
            v = not op.neg
            return lambda w: v
        n = op.name
        if op.neg:
            return lambda w: ~w.regs.get(n, False) if isinstance(w.regs.get(n, False), np.ndarray) else not w.regs.get(n, False)
        return lambda w: w.regs.get(n, False)
    if isinstance(op, (RVec, URVec)):
        n = elem_name(op.name, 0)
        return lambda w: w.regs.get(n, 0)
    if isinstance(op, SReg):
        s = op.name
        return lambda w: sreg(w, s)
    if isinstance(op, CBank):
        v = cbank(op.offset)
        return lambda w: v & M32
    if isinstance(op, Sym):
        v = sym(op.name)
        return lambda w: v
    raise WarpyError(f"cannot read operand {op} as a register value")


def writer(op: Operand) -> Callable[[Any, Any, Optional[np.ndarray]], None]:
    """A function (warp, value, lane mask or None) storing a value into the operand's register."""
    if isinstance(op, (R, RVec)):
        n = op.name if isinstance(op, R) else elem_name(op.name, 0)
        if n == "RZ":
            return lambda w, v, mask: None

        def put_r(w: Any, v: Any, mask: Optional[np.ndarray]) -> None:
            if mask is None:
                w.regs[n] = v
            else:
                old = w.regs.get(n, 0)
                w.regs[n] = np.where(mask, np.asarray(v, dtype=np.uint64), np.asarray(old, dtype=np.uint64))
        return put_r
    if isinstance(op, (UR, URVec)):
        n = op.name if isinstance(op, UR) else elem_name(op.name, 0)
        if n == "URZ":
            return lambda w, v, mask: None

        def put_ur(w: Any, v: Any, mask: Optional[np.ndarray]) -> None:
            w.regs[n] = first(v, mask)
        return put_ur
    if isinstance(op, P):
        n = op.name
        if n == "PT":
            return lambda w, v, mask: None

        def put_p(w: Any, v: Any, mask: Optional[np.ndarray]) -> None:
            if mask is None:
                w.regs[n] = v
            else:
                old = w.regs.get(n, False)
                w.regs[n] = np.where(mask, v, old)
        return put_p
    if isinstance(op, UP):
        n = op.name
        if n == "UPT":
            return lambda w, v, mask: None

        def put_up(w: Any, v: Any, mask: Optional[np.ndarray]) -> None:
            w.regs[n] = bool(first(v, mask)) if isinstance(v, np.ndarray) else bool(v)
        return put_up
    raise WarpyError(f"cannot write operand {op} as a register value")


def vec_names(op: Operand, width: int) -> list[str]:
    if isinstance(op, (RVec, URVec, R, UR)):
        return [elem_name(op.name, i) if width > 1 or isinstance(op, (RVec, URVec)) else op.name for i in range(width)]
    raise WarpyError(f"{op} is not a register vector")


def mem_addr(m: Mem, rd: Callable[[Operand], Reader]) -> Reader:
    """A reader of a memory operand's address (register + uniform register + offset)."""
    parts = [rd(r) for r in (m.base, m.ubase) if r is not None]
    off = m.offset & M32
    if not parts:
        return lambda w: off & M32
    if len(parts) == 1:
        p0 = parts[0]
        return lambda w: (p0(w) + off) & M32
    p0, p1 = parts
    return lambda w: (p0(w) + p1(w) + off) & M32
