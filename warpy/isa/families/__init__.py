"""Opcode families, one module per family, and the registry `ALL` (key -> record).

`lookup(name, mods)` finds an instruction's record: the record whose key's first word is the
instruction's name and whose further key words all appear among its modifiers, the most key words
winning (`UTCATOMSWS.2CTA.FIND_AND_SET.ALIGN` -> `UTCATOMSWS.FIND_AND_SET`). The modifiers left
over must match the record's modifier groups.
"""

from __future__ import annotations

from warpy.errors import WarpyError
from warpy.memo import new_cache
from warpy.target import ARCHS
from warpy.isa.families import alu, clc, control, memory, sync, tcgen05, tma, wgmma
from warpy.isa.families.base import SEM_CLASSES, Arg, Opcode, describe, operand_fits
from warpy.isa.instr import Instr
from warpy.isa.operands import Desc, Imm, Operand, P, R, RVec, UP, UR, URVec

MODULES = (alu, control, memory, sync, tma, wgmma, tcgen05, clc)
FAMILIES: dict[str, list[Opcode]] = {m.__name__.rsplit(".", 1)[1]: m.OPCODES for m in MODULES}

ALL: dict[str, Opcode] = {}
for _fam in FAMILIES.values():
    for _op in _fam:
        if _op.key in ALL:
            raise RuntimeError(f"opcode {_op.key} is defined twice")
        ALL[_op.key] = _op

_BY_NAME: dict[str, list[Opcode]] = {}
for _op in ALL.values():
    _BY_NAME.setdefault(_op.key_words[0], []).append(_op)
for _lst in _BY_NAME.values():
    _lst.sort(key=lambda o: -len(o.key_words))


_LOOKED_UP: dict[tuple[str, tuple[str, ...]], tuple[Opcode, tuple[str, ...]]] = new_cache()


def lookup(name: str, mods: tuple[str, ...] = ()) -> tuple[Opcode, tuple[str, ...]]:
    """The record of an instruction, and its modifiers other than the key's words (remembered by
    name and modifiers: the records never change)."""
    hit = _LOOKED_UP.get((name, mods))
    if hit is not None:
        return hit
    found = _lookup(name, mods)
    _LOOKED_UP[(name, mods)] = found
    return found


def _lookup(name: str, mods: tuple[str, ...]) -> tuple[Opcode, tuple[str, ...]]:
    for op in _BY_NAME.get(name, []):
        rest = list(mods)
        ok = True
        for w in op.key_words[1:]:
            if w in rest:
                rest.remove(w)
            else:
                ok = False
                break
        if ok:
            return op, tuple(rest)
    mn = ".".join((name,) + mods)
    raise WarpyError(f"unknown opcode {mn} (warpy.isa.families.ALL lists the {len(ALL)} known)")


def record(i: Instr) -> Opcode:
    return lookup(i.name, i.mods)[0]


def fits(op: Operand, arg: Arg) -> bool:
    return any(operand_fits(op, k) for k in arg.kinds())


#: form_of's answers by what they depend on: the name, the modifiers and each operand's class (and a
#: descriptor's kind: `operand_fits` reads nothing else); a refusal is never kept
_FORMS: dict[tuple[object, ...], tuple[Opcode, tuple[Arg, ...]]] = new_cache()


def form_of(i: Instr) -> tuple[Opcode, tuple[Arg, ...]]:
    """The record and the operand signature an instruction uses (raises naming the bad operand)."""
    key = (i.name, i.mods) + tuple(op.kind if op.__class__ is Desc else op.__class__ for op in i.ops)
    hit = _FORMS.get(key)
    if hit is not None:
        return hit
    found = _form_of(i)
    _FORMS[key] = found
    return found


def _form_of(i: Instr) -> tuple[Opcode, tuple[Arg, ...]]:
    rec, rest = lookup(i.name, i.mods)
    where = i.mnemonic
    rec.check_mods(rest, where)
    cands = [f for f in rec.forms if len(f) == len(i.ops)]
    if not cands:
        rec.form_for(len(i.ops), where)  # raises with the arities
    best: tuple[Arg, ...] = cands[0]
    best_bad = -1
    for f in cands:
        bad = next((k for k, (op, arg) in enumerate(zip(i.ops, f)) if not fits(op, arg)), None)
        if bad is None:
            return rec, f
        if bad > best_bad:
            best, best_bad = f, bad
    op, arg = i.ops[best_bad], best[best_bad]
    raise WarpyError(f"{where}: operand {best_bad} ({arg.name}) must be {arg.kind.replace('|', ' or ')}, not {describe(op)}")


def validate(i: Instr) -> Opcode:
    """Check an instruction against its record; raise WarpyError naming the operand that is wrong."""
    rec, form = form_of(i)
    for k, (op, arg) in enumerate(zip(i.ops, form)):
        if arg.width is not None and isinstance(op, (RVec, URVec)) and op.width:
            want = arg.width(lookup(i.name, i.mods)[1])
            if want != op.width:
                raise WarpyError(f"{i.mnemonic}: operand {k} ({arg.name}) needs {want} registers, {op.name} has {op.width}")
    return rec


def defs_uses(i: Instr) -> tuple[list[Operand], list[Operand]]:
    """The operands whose registers the instruction writes, and those it reads (guard included)."""
    _, form = form_of(i)
    d: list[Operand] = []
    u: list[Operand] = []
    if i.guard is not None:
        u.append(i.guard)
    for op, arg in zip(i.ops, form):
        if isinstance(op, (R, UR, P, UP, RVec, URVec)):
            if "d" in arg.role:
                d.append(op)
            if "u" in arg.role:
                u.append(op)
        else:
            u.append(op)  # registers inside an address or descriptor operand are read
    return d, u


def opcode_table() -> str:
    """The opcode table of docs/sass.md, one row a record, rendered from the records themselves (a
    test keeps the document equal to this)."""
    rows = ["| opcode | family | class | targets | operands | PTX | what it does |", "|---|---|---|---|---|---|---|"]
    for fam, recs in FAMILIES.items():
        for r in recs:
            flags = [f for f, on in (("single-issue", r.single_issue and not r.warp_collective),
                                     ("warp-collective", r.warp_collective), ("no SASS of its own", not r.ptxas_emits))
                     if on]
            what = r.doc + (f" ({', '.join(flags)})" if flags else "")
            targets = " ".join(t for t in ARCHS if t in r.archs)
            cells = [f"`{r.key}`", fam, r.sem, targets, f"`{r.text_form()}`", r.ptx, what]
            rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


__all__ = ["ALL", "FAMILIES", "MODULES", "SEM_CLASSES", "Opcode", "Arg", "lookup", "record", "validate", "defs_uses",
           "opcode_table"]
