"""Register colouring by liveness: named registers -> physical ones.

Liveness is computed per *cell* (one 32-bit register or predicate; element i of a vector is its
own cell) over the control-flow graph of the text (labels, branches, exits); two named registers
interfere when a cell of one is written while a cell of the other is live. Each named register
(a vector as one block of consecutive registers, aligned to min(width, 4) rounded down to a power
of two) then gets the lowest free physical range, widest and most constrained first.

Limits: `R0..R254` (RZ is R255), `UR0..UR62` (URZ), `P0..P6` (PT), `UP0..UP6` (UPT). When a kind
does not fit, `colour` raises `WarpyError` naming the line of greatest pressure and what is live there.
"""

from __future__ import annotations

import attrs

from warpy.errors import WarpyError
from warpy.isa.families import defs_uses
from warpy.isa.instr import Instr, Label, Line
from warpy.isa.operands import LabelRef, P, R, RVec, UP, UR, URVec, physical_kind, regs_of
from warpy.isa.text import Kernel, RegDecl

LIMITS = {"R": 255, "UR": 63, "P": 7, "UP": 7}

Cell = tuple[str, int]  # (named register, element)


def _cells(r: object, decls: dict[str, RegDecl]) -> list[Cell]:
    name: str = getattr(r, "name")
    if name in ("RZ", "URZ", "PT", "UPT"):
        return []
    base, dot, idx = name.partition(".")
    if physical_kind(base) is not None:
        raise WarpyError(f"register {name} is physical in a named program; name it (Program.r/ur/p/up)")
    d = decls.get(base)
    if d is None:
        raise WarpyError(f"register {name} is not declared")
    if dot:
        if isinstance(r, (RVec, URVec)):
            return [(base, int(idx) + k) for k in range(r.width)]
        return [(base, int(idx))]
    if isinstance(r, (RVec, URVec)) or d.width > 1:
        return [(base, k) for k in range(d.width)]
    return [(base, 0)]


@attrs.frozen
class Liveness:
    instrs: tuple[int, ...]  # indices of instruction lines
    live_in: dict[int, frozenset[Cell]]
    live_out: dict[int, frozenset[Cell]]
    defs: dict[int, frozenset[Cell]]
    #: line -> cells it reads that no path from the entry has written
    undefined: dict[int, frozenset[Cell]] = attrs.field(factory=dict)


def _succ(lines: list[Line]) -> dict[int, list[int]]:
    labels = {x.name: n for n, x in enumerate(lines) if isinstance(x, Label)}
    out: dict[int, list[int]] = {}
    for n, x in enumerate(lines):
        nxt = [n + 1] if n + 1 < len(lines) else []
        if isinstance(x, Instr):
            if x.name == "BRA":
                tgt = [labels[o.name] for o in x.ops if isinstance(o, LabelRef) and o.name in labels]
                cond = x.guard is not None or any(isinstance(o, UP) for o in x.ops)
                out[n] = tgt + (nxt if cond else [])
                continue
            if x.name == "EXIT" and x.guard is None:
                out[n] = []
                continue
        out[n] = nxt
    return out


def liveness(lines: list[Line], decls: dict[str, RegDecl]) -> Liveness:
    succ = _succ(lines)
    uses: dict[int, frozenset[Cell]] = {}
    kills: dict[int, frozenset[Cell]] = {}
    defs: dict[int, frozenset[Cell]] = {}
    for n, x in enumerate(lines):
        if not isinstance(x, Instr):
            uses[n] = kills[n] = defs[n] = frozenset()
            continue
        d, u = defs_uses(x)
        dc = {c for op in d for r in regs_of(op) for c in _cells(r, decls)}
        uc = {c for op in u for r in regs_of(op) for c in _cells(r, decls)}
        for note in x.notes:
            for nm in note.names():
                base = nm.split(".", 1)[0]
                if base in decls:
                    uc.update(_cells(R(nm) if decls[base].kind == "R" else UR(nm), decls))
        uses[n] = frozenset(uc)
        defs[n] = frozenset(dc)
        kills[n] = frozenset(dc) if x.guard is None else frozenset()
    live_in: dict[int, frozenset[Cell]] = {n: frozenset() for n in range(len(lines))}
    live_out: dict[int, frozenset[Cell]] = {n: frozenset() for n in range(len(lines))}
    changed = True
    while changed:
        changed = False
        for n in range(len(lines) - 1, -1, -1):
            out: set[Cell] = set()
            for s in succ[n]:
                out |= live_in[s]
            fo = frozenset(out)
            fi = uses[n] | (fo - kills[n])
            if fo != live_out[n] or fi != live_in[n]:
                live_out[n], live_in[n] = fo, fi
                changed = True
    # a value's range starts where it may have been written: intersect with the cells some path
    # from the entry has defined (a register read before any write, like an accumulator whose
    # first MMA does not add, holds nothing worth a register until then)
    preds: dict[int, list[int]] = {n: [] for n in range(len(lines))}
    for n, ss in succ.items():
        for s_ in ss:
            preds[s_].append(n)
    maydef_in: dict[int, frozenset[Cell]] = {n: frozenset() for n in range(len(lines))}
    maydef_out: dict[int, frozenset[Cell]] = {n: frozenset() for n in range(len(lines))}
    changed = True
    while changed:
        changed = False
        for n in range(len(lines)):
            mi: frozenset[Cell] = frozenset().union(*(maydef_out[q] for q in preds[n])) if preds[n] else frozenset()
            mo = mi | defs[n]
            if mi != maydef_in[n] or mo != maydef_out[n]:
                maydef_in[n], maydef_out[n] = mi, mo
                changed = True
    undefined = {n: uses[n] - maydef_in[n] for n in range(len(lines)) if uses[n] - maydef_in[n]}
    live_in = {n: live_in[n] & maydef_in[n] for n in live_in}
    live_out = {n: live_out[n] & maydef_out[n] for n in live_out}
    instrs = tuple(n for n, x in enumerate(lines) if isinstance(x, Instr))
    return Liveness(instrs, live_in, live_out, defs, undefined)


def check_defined(lines: list[Line], decls: dict[str, RegDecl]) -> None:
    """Raise naming the first line that reads a register no path from the entry has written."""
    lv = liveness(lines, decls)
    for n in sorted(lv.undefined):
        cells = sorted(lv.undefined[n])
        names = sorted({c[0] + (f".{c[1]}" if decls[c[0]].width > 1 else "") for c in cells})
        raise WarpyError(f"line {n + 1} of the body `{str(lines[n]).strip()}` reads {', '.join(names[:8])} before any write")


def _align(width: int) -> int:
    a = 1
    while a * 2 <= min(width, 4):
        a *= 2
    return a


def assign(lines: list[Line], decls: dict[str, RegDecl]) -> dict[str, int]:
    """Physical base index for each named register (raises naming the point of pressure)."""
    lv = liveness(lines, decls)
    names = sorted({c[0] for n in lv.instrs for c in lv.defs[n] | lv.live_in[n]})
    adj: dict[str, set[str]] = {nm: set() for nm in names}
    for n in lv.instrs:
        for d in lv.defs[n]:
            for c in lv.live_out[n] | lv.defs[n]:
                if c[0] != d[0] and decls[c[0]].kind == decls[d[0]].kind:
                    adj[d[0]].add(c[0])
                    adj[c[0]].add(d[0])
    # values live on entry (read before any write) interfere with each other
    entry = lv.live_in[lv.instrs[0]] if lv.instrs else frozenset()
    for a_ in entry:
        for b_ in entry:
            if a_[0] != b_[0] and decls[a_[0]].kind == decls[b_[0]].kind:
                adj[a_[0]].add(b_[0])
    out: dict[str, int] = {}
    for kind in ("R", "UR", "P", "UP"):
        mine = [nm for nm in names if decls[nm].kind == kind]
        mine.sort(key=lambda nm: (-decls[nm].width, -len(adj[nm]), nm))
        for nm in mine:
            w = decls[nm].width
            al = _align(w)
            taken = sorted((out[o], out[o] + decls[o].width) for o in adj[nm] if o in out)
            b = 0
            for lo, hi in taken:
                if b + w <= lo:
                    break
                if hi > b:
                    b = (hi + al - 1) // al * al
            if b + w > LIMITS[kind]:
                raise WarpyError(_pressure_message(kind, lines, lv, decls))
            out[nm] = b
    return out


def _pressure_message(kind: str, lines: list[Line], lv: Liveness, decls: dict[str, RegDecl]) -> str:
    best_n, best_w, best_live = -1, -1, []
    for n in lv.instrs:
        live = {c[0] for c in lv.live_out[n] | lv.defs[n] if decls[c[0]].kind == kind}
        w = sum(decls[nm].width for nm in live)
        if w > best_w:
            best_n, best_w, best_live = n, w, sorted(live)
    what = ", ".join(nm + (f"[{decls[nm].width}]" if decls[nm].width > 1 else "") for nm in best_live)
    return (
        f"the {kind} registers do not fit in {LIMITS[kind]}: the most are live at line {best_n + 1} of the body "
        f"`{str(lines[best_n]).strip()}`: {best_w} {kind} live: {what}"
    )


def phys(kind: str, idx: int) -> str:
    return f"{kind}{idx}"


def colour(k: Kernel) -> Kernel:
    """The coloured form of a named kernel."""
    decls = {d.name: d for d in k.header.regs}
    lines = list(k.lines)
    base = assign(lines, decls)

    def name_of(nm: str) -> str:
        b, dot, idx = nm.partition(".")
        if b not in base:
            if b in decls:  # declared, never live: give it the scratch register 0 of its kind
                return phys(decls[b].kind, int(idx or 0))
            return nm
        return phys(decls[b].kind, base[b] + int(idx or 0))

    def ren(r: object) -> object:
        if isinstance(r, (R, UR, P, UP)):
            if r.name in ("RZ", "URZ", "PT", "UPT"):
                return r
            return attrs.evolve(r, name=name_of(r.name))
        if isinstance(r, (RVec, URVec)):
            return attrs.evolve(r, name=name_of(r.name))
        return r

    new_lines: list[Line] = []
    for x in lines:
        if isinstance(x, Instr):
            new_lines.append(x.rename(ren, name_of))
        else:
            new_lines.append(x)
    header = attrs.evolve(k.header, regs=())
    return Kernel(header, tuple(new_lines))


def pressure(k: Kernel) -> dict[str, int]:
    """The most registers of each kind live at once (named form)."""
    decls = {d.name: d for d in k.header.regs}
    lv = liveness(list(k.lines), decls)
    out = {kind: 0 for kind in LIMITS}
    for n in lv.instrs:
        for kind in LIMITS:
            live = {c[0] for c in lv.live_out[n] | lv.defs[n] if decls[c[0]].kind == kind}
            out[kind] = max(out[kind], sum(decls[nm].width for nm in live))
    return out


