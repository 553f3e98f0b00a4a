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
from warpy.memo import new_cache, remembered
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


class Liveness:
    """Per line: the cells live into and out of it, those it writes, and those it reads that no path
    from the entry has written. Computed as bit sets over `cells` (bit i is cells[i]); the
    `live_in` / `live_out` / `defs` / `undefined` maps of cell sets are decoded from them on first use."""

    def __init__(self, instrs: tuple[int, ...], cells: list[Cell], live_in: list[int], live_out: list[int],
                 defs: list[int], undefined: dict[int, int]) -> None:
        self.instrs = instrs  # indices of instruction lines
        self.cells = cells
        self.live_in_bits = live_in
        self.live_out_bits = live_out
        self.defs_bits = defs
        self.undefined_bits = undefined
        self._decoded: dict[str, dict[int, frozenset[Cell]]] = {}

    def cells_of(self, m: int) -> frozenset[Cell]:
        out = []
        while m:
            low = m & -m
            out.append(self.cells[low.bit_length() - 1])
            m ^= low
        return frozenset(out)

    def _sets(self, key: str, bits: "list[int] | dict[int, int]") -> dict[int, frozenset[Cell]]:
        got = self._decoded.get(key)
        if got is None:
            items = bits.items() if isinstance(bits, dict) else enumerate(bits)
            got = self._decoded[key] = {n: self.cells_of(m) for n, m in items}
        return got

    @property
    def live_in(self) -> dict[int, frozenset[Cell]]:
        return self._sets("in", self.live_in_bits)

    @property
    def live_out(self) -> dict[int, frozenset[Cell]]:
        return self._sets("out", self.live_out_bits)

    @property
    def defs(self) -> dict[int, frozenset[Cell]]:
        return self._sets("defs", self.defs_bits)

    @property
    def undefined(self) -> dict[int, frozenset[Cell]]:
        """line -> cells it reads that no path from the entry has written"""
        return self._sets("undefined", self.undefined_bits)


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


#: the last few `Liveness` answers, by the lines and the declarations (both frozen values): a
#: program's named form is checked by `Program.kernel()` and coloured by `assign`, and the tests build
#: the same programs again; a Liveness is never changed after it is made (its decoded sets are
#: filled on first use, the same each time)
_LIVENESS: dict[tuple[tuple[Line, ...], tuple[tuple[str, RegDecl], ...]], Liveness] = new_cache()
_LIVENESS_KEPT = 8


def liveness(lines: list[Line], decls: dict[str, RegDecl]) -> Liveness:
    """Each line's live cells, the cells it writes and those it reads unwritten (remembered for the
    last few kernels; an error is raised each time)."""
    return remembered(_LIVENESS, (tuple(lines), tuple(decls.items())), lambda: _liveness(lines, decls), _LIVENESS_KEPT)


def _liveness(lines: list[Line], decls: dict[str, RegDecl]) -> Liveness:
    succ = _succ(lines)
    index: dict[Cell, int] = {}
    cells: list[Cell] = []

    def bits(cs: set[Cell]) -> int:
        m = 0
        for c in cs:
            i = index.get(c)
            if i is None:
                i = index[c] = len(cells)
                cells.append(c)
            m |= 1 << i
        return m

    count = len(lines)
    uses = [0] * count
    keeps = [-1] * count  # the complement of the cells a line surely overwrites (an unguarded write)
    defs = [0] * count
    seen: dict[tuple[object, str, int], list[Cell]] = {}  # a register's cells, by class, name and width

    def cells_of(r: object) -> list[Cell]:
        key = (r.__class__, getattr(r, "name"), getattr(r, "width", 0))
        got = seen.get(key)
        if got is None:
            got = seen[key] = _cells(r, decls)
        return got

    for n, x in enumerate(lines):
        if not isinstance(x, Instr):
            continue
        d, u = defs_uses(x)
        dc = {c for op in d for r in regs_of(op) for c in cells_of(r)}
        uc = {c for op in u for r in regs_of(op) for c in cells_of(r)}
        for note in x.notes:
            for nm in note.names():
                base = nm.split(".", 1)[0]
                if base in decls:
                    uc.update(_cells(R(nm) if decls[base].kind == "R" else UR(nm), decls))
        uses[n] = bits(uc)
        defs[n] = bits(dc)
        if x.guard is None:
            keeps[n] = ~defs[n]
    # backward: live in = uses | (live out - surely written); to the fixed point
    live_in = [0] * count
    live_out = [0] * count
    changed = True
    while changed:
        changed = False
        for n in range(count - 1, -1, -1):
            ss = succ[n]
            if len(ss) == 1:
                out = live_in[ss[0]]
            else:
                out = 0
                for s_ in ss:
                    out |= live_in[s_]
            fi = uses[n] | (out & keeps[n])
            if fi != live_in[n] or out != live_out[n]:
                live_out[n], live_in[n] = out, fi
                changed = True
    # a value's range starts where it may have been written: intersect with the cells some path
    # from the entry has defined (a register read before any write, like an accumulator whose
    # first MMA does not add, holds nothing worth a register until then)
    preds: list[list[int]] = [[] for _ in range(count)]
    for n, ss in succ.items():
        for s_ in ss:
            preds[s_].append(n)
    maydef_in = [0] * count
    maydef_out = [0] * count
    changed = True
    while changed:
        changed = False
        for n in range(count):
            mi = 0
            for q in preds[n]:
                mi |= maydef_out[q]
            mo = mi | defs[n]
            if mi != maydef_in[n] or mo != maydef_out[n]:
                maydef_in[n], maydef_out[n] = mi, mo
                changed = True
    undefined = {n: uses[n] & ~maydef_in[n] for n in range(count) if uses[n] & ~maydef_in[n]}
    live_in = [a & b for a, b in zip(live_in, maydef_in)]
    live_out = [a & b for a, b in zip(live_out, maydef_out)]
    instrs = tuple(n for n, x in enumerate(lines) if isinstance(x, Instr))
    return Liveness(instrs, cells, live_in, live_out, defs, undefined)


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
    cells = lv.cells
    used = 0
    for n in lv.instrs:
        used |= lv.defs_bits[n] | lv.live_in_bits[n]
    names = sorted({c[0] for c in lv.cells_of(used)})
    mask: dict[str, int] = {}  # a name's cells
    for i, c in enumerate(cells):
        mask[c[0]] = mask.get(c[0], 0) | 1 << i
    # a name interferes with every name of its kind that has a cell live out of, or written by, a
    # line that writes it: gather those cells over all its writes, then read the names off once
    near: dict[str, int] = {}
    for n in lv.instrs:
        d = lv.defs_bits[n]
        if d:
            here = lv.live_out_bits[n] | d
            for nm in {c[0] for c in lv.cells_of(d)}:
                near[nm] = near.get(nm, 0) | here
    by_kind: dict[str, list[str]] = {}
    for nm in mask:
        by_kind.setdefault(decls[nm].kind, []).append(nm)
    adj: dict[str, set[str]] = {nm: set() for nm in names}
    for nm, m in near.items():
        for other in by_kind[decls[nm].kind]:
            if other != nm and m & mask[other]:
                adj[nm].add(other)
                adj.setdefault(other, set()).add(nm)
    # values live on entry (read before any write) interfere with each other
    entry = lv.cells_of(lv.live_in_bits[lv.instrs[0]]) if lv.instrs else frozenset()
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


#: the coloured forms of the last few named kernels (frozen values both): the tests colour the same
#: programs again
_COLOURED: dict[Kernel, Kernel] = new_cache()
_COLOURED_KEPT = 8


def colour(k: Kernel) -> Kernel:
    """The coloured form of a named kernel."""
    return remembered(_COLOURED, k, lambda: _colour(k), _COLOURED_KEPT)


def _colour(k: Kernel) -> Kernel:
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


