"""The SASS text of a kernel: header, declarations, one instruction a line (docs/sass.md).

`Kernel` is the parsed text; `str(kernel)` prints it, `parse(text)` reads it, and
`str(parse(text)) == text` for every text warpy prints, in the named and the coloured form.
Errors are `ParseError` with `line:column`.
"""

from __future__ import annotations

import re
from typing import Optional, Union

import attrs

from warpy.errors import WarpyError
from warpy.target import ARCHS
from warpy.isa.families import form_of, lookup
from warpy.isa.instr import Comment, Instr, Label, Line, Note, parse_note
from warpy.isa.operands import (
    KEYWORDS,
    NAME_RE,
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
    elem_name,
    hexs,
    physical_kind,
)
from warpy.layout import Layout, LayoutError, Swizzle, SwizzledLayout
from warpy.layout.tma import TmaBox

SPACES = ("smem", "tmem", "global")
PARAM_TYPES = ("u64", "u32", "s32", "f32", "u16", "s64")
REG_KINDS = ("R", "UR", "P", "UP")


class ParseError(WarpyError):
    """A text that is not warpy SASS; the message starts with `line:column`."""

    def __init__(self, line: int, col: int, msg: str) -> None:
        super().__init__(f"{line}:{col}: {msg}")
        self.line = line
        self.col = col


# ----------------------------------------------------------------------------------------
# layouts in CuTe notation, with a swizzle in front


BufLayout = Union[Layout, SwizzledLayout]


def layout_text(layout: BufLayout) -> str:
    if isinstance(layout, SwizzledLayout):
        if layout.offset:
            raise WarpyError("a buffer's swizzled layout must have offset 0 (the base carries the offset)")
        sw = layout.swizzle
        return f"Sw<{sw.bits},{sw.base},{sw.shift}> o {layout.layout}"
    return str(layout)


_SW_RE = re.compile(r"Sw<(\d+),(\d+),(-?\d+)>\s+o\s+(.+)")


def parse_layout_text(s: str) -> BufLayout:
    m = _SW_RE.fullmatch(s.strip())
    if m:
        return SwizzledLayout(Swizzle(int(m.group(1)), int(m.group(2)), int(m.group(3))), Layout.parse(m.group(4)))
    return Layout.parse(s.strip())


# ----------------------------------------------------------------------------------------
# header


@attrs.frozen
class TmapDecl:
    """A tensor map: its box; `over`: the parameter (pointer or map) whose memory it maps too, when
    it is a second view of another operand's tensor (e.g. `c_tail` over `c`), `offset` bytes into
    it; `table` and `slot`: not a kernel parameter but slot `slot` of a table of encoded maps in
    global memory, whose address is the u64 parameter `table` (the megakernel's maps, too many for
    kernel parameters; slot k at table + 128 k)."""

    name: str
    box: TmaBox
    over: Optional[str] = None
    table: Optional[str] = None
    slot: Optional[int] = None
    offset: int = 0

    def __attrs_post_init__(self) -> None:
        if (self.table is None) != (self.slot is None):
            raise WarpyError(f".tmap {self.name}: table= and slot= go together")
        if self.slot is not None and self.slot < 0:
            raise WarpyError(f".tmap {self.name}: slot {self.slot} is negative")
        if self.offset < 0 or (self.offset and self.over is None):
            raise WarpyError(f".tmap {self.name}: offset= is a non-negative byte offset into the memory of over=")

    def __str__(self) -> str:
        parts = [f".tmap {self.name}"]
        if self.table is not None:
            parts.append(f"table={self.table} slot={self.slot}")
        parts += [f"over={self.over}"] if self.over else []
        parts += [f"offset={self.offset}"] if self.offset else []
        for f in attrs.fields(TmaBox):
            v = getattr(self.box, f.name)
            if f.default is not attrs.NOTHING and v == f.default:
                continue
            if isinstance(v, tuple):
                v = ",".join(str(x) for x in v)
            parts.append(f"{f.name}={v}")
        return " ".join(parts)


@attrs.frozen
class ParamDecl:
    """A raw kernel parameter. `scratch` (u64 only): a pointer to device memory the host owns and
    allocates once per loaded kernel and CUDA stream, zero-filled then and never cleared again; its
    size is the extent of the buffers declared behind it (`Header.scratch_params`, docs/sass.md)."""

    name: str
    type: str
    scratch: bool = False

    def __attrs_post_init__(self) -> None:
        if self.scratch and self.type != "u64":
            raise WarpyError(f".param {self.name}: only a u64 pointer can be scratch, not a {self.type}")

    def __str__(self) -> str:
        return f".param {self.name} {self.type}" + (" scratch" if self.scratch else "")


@attrs.frozen
class BufferDecl:
    """A buffer: space, base (smem: offset from the dynamic shared memory's start; tmem: column offset
    from the allocation's address; global: 0, the address being `source`'s), size in bytes (tmem:
    columns), element (a dtype, `mbarrier`, `u32`, `b128`), source (global: the `.param` pointer or
    `.tmap` it lives behind) and layout (coordinates -> bytes; tmem: -> (lane << 16) | column)."""

    name: str
    space: str
    base: int
    size: int
    layout: BufLayout
    elem: Optional[str] = None
    source: Optional[str] = None

    def __str__(self) -> str:
        s = f".buffer {self.name} {self.space} base={hexs(self.base)} size={hexs(self.size)}"
        if self.elem:
            s += f" elem={self.elem}"
        if self.source:
            s += f" source={self.source}"
        return s + f" layout={layout_text(self.layout)}"

    def offset(self, *coords: int) -> int:
        """The layout at the coordinates (bytes from base; tmem: lane<<16 | column)."""
        return int(self.layout(*coords))


@attrs.frozen
class RegDecl:
    name: str
    kind: str
    width: int = 1

    def __str__(self) -> str:
        w = f"[{self.width}]" if self.width != 1 else ""
        return f".reg {self.kind}{w} {self.name}"


@attrs.frozen
class Header:
    kernel: str
    sm: str
    threads: int
    dynsmem: int = 0
    grid: tuple[int, int, int] = (1, 1, 1)
    cluster: tuple[int, int, int] = (1, 1, 1)
    mbarriers: int = 0
    maxnreg: Optional[int] = None
    tmaps: tuple[TmapDecl, ...] = ()
    params: tuple[ParamDecl, ...] = ()
    buffers: tuple[BufferDecl, ...] = ()
    regs: tuple[RegDecl, ...] = ()

    def lines(self) -> list[str]:
        out = [f".kernel {self.kernel}", f".sm {self.sm}", f".threads {self.threads}"]
        if self.maxnreg is not None:
            out.append(f".maxnreg {self.maxnreg}")
        out += [
            f".dynsmem {self.dynsmem}",
            f".grid {' '.join(map(str, self.grid))}",
            f".cluster {' '.join(map(str, self.cluster))}",
            f".mbarriers {self.mbarriers}",
        ]
        out += [str(t) for t in self.tmaps]
        out += [str(p) for p in self.params]
        out += [str(b) for b in self.buffers]
        out += [str(r) for r in self.regs]
        return out

    def buffer(self, name: str) -> BufferDecl:
        for b in self.buffers:
            if b.name == name:
                return b
        raise WarpyError(f"no buffer named {name!r}")

    def tmap(self, name: str) -> TmaBox:
        for t in self.tmaps:
            if t.name == name:
                return t.box
        raise WarpyError(f"no tensor map named {name!r}")

    def scratch_params(self) -> dict[str, int]:
        """The scratch parameters, in header order, each with the bytes the host allocates for it:
        the extent (max of base + size) of the global buffers declared behind it (`source=NAME`).
        A scratch parameter with no buffer behind it has no size: a WarpyError naming it."""
        out: dict[str, int] = {}
        for p in self.params:
            if not p.scratch:
                continue
            ends = [b.base + b.size for b in self.buffers if b.space == "global" and b.source == p.name]
            if not ends or max(ends) < 1:
                raise WarpyError(f"kernel {self.kernel}: scratch parameter {p.name!r} has no global buffer "
                                 f"declared behind it (`.buffer ... source={p.name}`), so it has no size")
            out[p.name] = max(ends)
        return out

    def kernel_params(self) -> list[tuple[str, str]]:
        """The kernel's parameters in order: each tensor map (`tmap`, 128 bytes) that is not a slot
        of a table, then each `.param`."""
        return [(t.name, "tmap") for t in self.tmaps if t.table is None] + [(p.name, p.type) for p in self.params]

    def tables(self) -> dict[str, list[TmapDecl]]:
        """Each table of tensor maps (its u64 parameter's name) and its slots, by slot number."""
        out: dict[str, list[TmapDecl]] = {}
        for t in self.tmaps:
            if t.table is not None:
                out.setdefault(t.table, []).append(t)
        return {k: sorted(v, key=lambda t: t.slot or 0) for k, v in out.items()}

    def check_tables(self) -> None:
        """Each table names a u64 `.param` that is not scratch, and no two maps share a slot of it."""
        params = {p.name: p for p in self.params}
        for table, slots in self.tables().items():
            p = params.get(table)
            if p is None or p.type != "u64" or p.scratch:
                raise WarpyError(f".tmap {slots[0].name}: table={table} names no `.param {table} u64` "
                                 f"(the table's address)")
            seen: dict[int, str] = {}
            for t in slots:
                assert t.slot is not None
                if t.slot in seen:
                    raise WarpyError(f".tmap {t.name}: slot {t.slot} of table {table} is also {seen[t.slot]}'s")
                seen[t.slot] = t.name

    def check_over(self) -> None:
        """Each map's `over=` names a pointer parameter (u64) or another tensor map: the memory it maps
        too (a name that is neither would make the map silently its own memory)."""
        pointers = {p.name for p in self.params if p.type == "u64"}
        maps = {t.name for t in self.tmaps}
        for t in self.tmaps:
            if t.over is not None and (t.over == t.name or (t.over not in pointers and t.over not in maps)):
                raise WarpyError(f".tmap {t.name}: over={t.over} names no `.param {t.over} u64` and no other "
                                 f"tensor map (the memory this map is a view of)")


@attrs.frozen
class Kernel:
    header: Header
    lines: tuple[Line, ...]

    def __str__(self) -> str:
        return "\n".join(self.header.lines() + [str(x) for x in self.lines]) + "\n"

    def instrs(self) -> list[Instr]:
        return [x for x in self.lines if isinstance(x, Instr)]

    @property
    def named(self) -> bool:
        return bool(self.header.regs)


# ----------------------------------------------------------------------------------------
# parser


_INT = r"-?(?:0x[0-9a-fA-F]+|\d+)"


def _int(s: str) -> int:
    return int(s, 0)


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.regs: dict[str, RegDecl] = {}
        self.tmap_names: set[str] = set()

    # -- header --------------------------------------------------------------------------
    def header_line(self, ln: int, line: str, h: dict[str, object]) -> None:
        word, _, rest = line.partition(" ")
        rest = rest.strip()

        def bad(msg: str, col: int = 1) -> ParseError:
            return ParseError(ln, col, msg)

        def ints(n: int) -> tuple[int, ...]:
            parts = rest.split()
            if len(parts) != n:
                raise bad(f"{word} takes {n} numbers", len(word) + 2)
            try:
                return tuple(_int(p) for p in parts)
            except ValueError:
                raise bad(f"{word} takes {n} numbers, got {rest!r}", len(word) + 2) from None

        key = word[1:]
        if key == "kernel":
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", rest):
                raise bad(f"kernel name {rest!r} is not an identifier", 9)
            h["kernel"] = rest
        elif key == "sm":
            if rest not in ARCHS:
                raise bad(f"target {rest!r} is not one of {', '.join(ARCHS)}", 5)
            h["sm"] = rest
        elif key in ("threads", "dynsmem", "mbarriers", "maxnreg"):
            h[key] = ints(1)[0]
        elif key in ("grid", "cluster"):
            h[key] = ints(3)
        elif key == "tmap":
            name, _, kvs = rest.partition(" ")
            fields = {f.name: f for f in attrs.fields(TmaBox)}
            kw: dict[str, object] = {}
            over: Optional[str] = None
            where: dict[str, object] = {}
            col = len(word) + len(name) + 3
            for item in kvs.split():
                k, eq, v = item.partition("=")
                if k == "over" and eq and v:
                    over = v
                    col += len(item) + 1
                    continue
                if k == "table" and eq and v:
                    where[k] = v
                    col += len(item) + 1
                    continue
                if k in ("slot", "offset") and eq:
                    try:
                        where[k] = _int(v)
                    except ValueError:
                        raise bad(f".tmap {k}={v} is not an integer", col) from None
                    col += len(item) + 1
                    continue
                if not eq or k not in fields:
                    raise bad(f".tmap field {k!r} is not one of {', '.join(fields)}", col)
                if k in ("dtype", "oob_fill"):
                    kw[k] = v
                elif k in ("dims", "strides", "box", "elem_strides"):
                    try:
                        kw[k] = tuple(_int(x) for x in v.split(",") if x)
                    except ValueError:
                        raise bad(f".tmap {k}={v} is not a list of integers", col) from None
                else:
                    try:
                        kw[k] = _int(v)
                    except ValueError:
                        raise bad(f".tmap {k}={v} is not an integer", col) from None
                col += len(item) + 1
            try:
                box = TmaBox(**kw)  # type: ignore[arg-type]
            except (TypeError, LayoutError) as e:
                raise bad(f".tmap {name}: {e}", len(word) + 2) from None
            try:
                decl = TmapDecl(name, box, over, **where)  # type: ignore[arg-type]
            except WarpyError as e:
                raise bad(str(e), len(word) + 2) from None
            self.tmap_names.add(name)
            h.setdefault("tmaps", []).append(decl)  # type: ignore[attr-defined]
        elif key == "param":
            parts = rest.split()
            if len(parts) not in (2, 3) or parts[1] not in PARAM_TYPES or parts[2:] not in ([], ["scratch"]):
                raise bad(f".param takes a name, a type ({', '.join(PARAM_TYPES)}) and optionally `scratch`",
                          len(word) + 2)
            if parts[2:] and parts[1] != "u64":
                raise bad(f".param {parts[0]}: only a u64 pointer can be scratch, not a {parts[1]}",
                          len(word) + len(parts[0]) + len(parts[1]) + 4)
            h.setdefault("params", []).append(  # type: ignore[attr-defined]
                ParamDecl(parts[0], parts[1], bool(parts[2:])))
        elif key == "buffer":
            m = re.fullmatch(
                r"(\S+) (\S+) base=(\S+) size=(\S+)(?: elem=(\S+))?(?: source=(\S+))? layout=(.+)", rest
            )
            if not m:
                raise bad(".buffer NAME SPACE base=B size=S [elem=E] [source=S] layout=L", len(word) + 2)
            if m.group(2) not in SPACES:
                raise bad(f"buffer space {m.group(2)!r} is not one of {', '.join(SPACES)}", len(word) + len(m.group(1)) + 3)
            if m.group(2) == "global" and _int(m.group(3)) != 0:  # (the checker reads a global buffer from 0)
                raise bad(f"global buffer {m.group(1)}: base={m.group(3)}, but a global buffer starts at byte 0 of its "
                          f"source ({m.group(6)}): declare base=0x0", line.index(" base=") + 2)
            try:
                lay = parse_layout_text(m.group(7))
            except LayoutError as e:
                raise bad(str(e), line.index("layout=") + 8) from None
            h.setdefault("buffers", []).append(  # type: ignore[attr-defined]
                BufferDecl(m.group(1), m.group(2), _int(m.group(3)), _int(m.group(4)), lay, m.group(5), m.group(6))
            )
        elif key == "reg":
            m = re.fullmatch(r"(R|UR|P|UP)(?:\[(\d+)\])? (\S+)", rest)
            if not m:
                raise bad(".reg KIND[WIDTH] NAME (KIND: R, UR, P, UP)", len(word) + 2)
            d = RegDecl(m.group(3), m.group(1), int(m.group(2) or 1))
            if not NAME_RE.fullmatch(d.name) or physical_kind(d.name):
                raise bad(f"register name {d.name!r} is not a name", len(line) - len(d.name) + 1)
            self.regs[d.name] = d
            h.setdefault("regs", []).append(d)  # type: ignore[attr-defined]
        else:
            raise bad(f"unknown header line {word}")

    # -- operands ------------------------------------------------------------------------
    def reg(self, tok: str, ln: int, col: int, want_vec: int = 0) -> Union[R, UR, P, UP, RVec, URVec]:
        neg = inv = False
        t = tok
        if t.startswith("!"):
            neg, t = True, t[1:]
        elif t.startswith("-"):
            neg, t = True, t[1:]
        if t.startswith("~"):
            inv, t = True, t[1:]
        base, dot, idx = t.partition(".")
        kind = physical_kind(base)
        width = 1
        if kind is None:
            d = self.regs.get(base)
            if d is None:
                raise ParseError(ln, col, f"{base!r} is not a declared register (add `.reg KIND {base}`)")
            kind, width = d.kind, d.width
            if dot:
                if not idx.isdigit() or int(idx) + max(want_vec, 1) > width:
                    raise ParseError(ln, col, f"{t!r}: {base} has {width} registers")
                width = want_vec if want_vec > 1 else 1
                base = t
        elif dot:
            raise ParseError(ln, col, f"{t!r}: a physical register has no elements")
        if kind in ("P", "UP"):
            if inv or (neg and tok.startswith("-")):
                raise ParseError(ln, col, f"a predicate is negated with '!', not in {tok!r}")
            return P(base, neg) if kind == "P" else UP(base, neg)
        if tok.startswith("!"):
            raise ParseError(ln, col, f"'!' negates predicates only, not {tok!r}")
        if width > 1 or (want_vec > 1 and physical_kind(base) is not None):
            if neg or inv:
                raise ParseError(ln, col, f"a register vector cannot be negated: {tok!r}")
            w = width if width > 1 else want_vec
            return RVec(base, w) if kind == "R" else URVec(base, w)
        return R(base, neg, inv) if kind == "R" else UR(base, neg, inv)

    def mem(self, inner: str, ln: int, col: int) -> Mem:
        s = inner.strip()
        if not s:
            raise ParseError(ln, col, "empty address []")
        parts = re.findall(r"[+-]?[^+-]+", s)
        base = ubase = None
        offset = 0
        wide = False
        for p in parts:
            body = p.lstrip("+")
            if re.fullmatch(_INT, body) or re.fullmatch(_INT, body.replace("-", "-", 1)):
                offset += _int(body)
                continue
            if body.startswith("-"):
                raise ParseError(ln, col, f"an address adds registers, it cannot subtract {body!r}")
            if body.endswith(".64"):
                wide, body = True, body[:-3]
            r = self.reg(body, ln, col)
            if base is None:
                base = r
                continue
            if isinstance(r, UR) and ubase is None and not isinstance(base, (UR, URVec)):
                ubase = r
                continue
            raise ParseError(ln, col, f"cannot read the address [{inner}]")
        if base is not None and not isinstance(base, (R, UR, RVec, URVec)):
            raise ParseError(ln, col, f"an address is made of R or UR registers, not {base}")
        return Mem(base, ubase, offset, wide)

    def operand(self, tok: str, ln: int, col: int) -> Operand:
        t = tok.strip()
        if not t:
            raise ParseError(ln, col, "empty operand")
        if re.fullmatch(_INT, t):
            return Imm(_int(t))
        if t.startswith("SR_"):
            return SReg(t)
        if t in KEYWORDS:
            return Kw(t)
        m = re.fullmatch(r"`\(([^)]+)\)", t)
        if m:
            return Sym(m.group(1))
        m = re.fullmatch(r"c\[(" + _INT + r")\]\[([^\]]+)\]", t)
        if m:
            off = m.group(2)
            return CBank(_int(m.group(1)), _int(off) if re.fullmatch(_INT, off) else off)
        m = re.fullmatch(r"(gdesc|tmem|idesc)\[([^\]]+)\]((?:\.tnsp[AB])*)", t)
        if m:
            r = self.reg(m.group(2), ln, col + len(m.group(1)) + 1)
            if not isinstance(r, (UR, URVec)):
                raise ParseError(ln, col, f"{m.group(1)}[...] holds a uniform register, not {r}")
            try:
                return Desc(m.group(1), r, tuple(f for f in m.group(3).split(".") if f))
            except WarpyError as e:
                raise ParseError(ln, col, str(e)) from None
        m = re.fullmatch(r"tmap\[([A-Za-z_][\w@.]*)\]", t)
        if m:
            inner = m.group(1)
            if inner in self.tmap_names:
                return TmapRef(inner)
            if physical_kind(inner.split(".", 1)[0]) is None and inner.split(".", 1)[0] not in self.regs:
                raise ParseError(ln, col, f"tmap[{inner}]: {inner!r} is no .tmap line and no declared register")
            r = self.reg(inner, ln, col + 5, want_vec=2)
            if not isinstance(r, (UR, URVec)):
                raise ParseError(ln, col, f"tmap[...] holds a tensor map's name or a uniform register pair "
                                          f"(its descriptor's address), not {r}")
            return TmapRef(reg=r)
        m = re.fullmatch(r"desc\[([^\]]+)\]\[([^\]]+)\]", t)
        if m:
            d = self.reg(m.group(1), ln, col + 5)
            inner = self.mem(m.group(2), ln, col + len(m.group(1)) + 7)
            if not isinstance(d, (UR, URVec)) or not isinstance(inner.base, (R, RVec)) or not inner.wide or inner.ubase:
                raise ParseError(ln, col, f"a global address is desc[UR][R.64+offset], not {t}")
            return GMem(d, inner.base, inner.offset)
        if t.startswith("[") and t.endswith("]"):
            return self.mem(t[1:-1], ln, col + 1)
        return self.reg(t, ln, col)

    # -- lines ---------------------------------------------------------------------------
    def instr(self, ln: int, line: str) -> Instr:
        mark = line[0]
        if mark not in " +~" or len(line) < 3 or line[1] != " ":
            raise ParseError(ln, 1, f"an instruction line starts with a mark ('+', '~' or ' ') and a space, not {line[:2]!r}")
        body, sep, note_text = line[2:].partition("  // ")
        notes: tuple[Note, ...] = ()
        if sep:
            try:
                notes = tuple(parse_note(n) for n in note_text.split("; "))
            except WarpyError as e:
                raise ParseError(ln, len(line) - len(note_text) + 1, str(e)) from None
            for note in notes:
                for nm in note.names():
                    base = nm.split(".", 1)[0]
                    if physical_kind(base) is None and base not in self.regs:
                        raise ParseError(ln, len(line) - len(note_text) + 1,
                                         f"note {note}: {nm!r} is not a declared register")
        col = 3
        guard: Union[P, UP, None] = None
        if body.startswith("@"):
            gtok, _, body2 = body.partition(" ")
            g = self.reg(gtok[1:], ln, col + 1)
            if not isinstance(g, (P, UP)):
                raise ParseError(ln, col, f"a guard is a predicate, not {gtok[1:]!r}")
            guard = g
            col += len(gtok) + 1
            body = body2
        mn, _, ops_text = body.partition(" ")
        words = mn.split(".")
        if not re.fullmatch(r"[A-Z][A-Z0-9_]*", words[0]):
            raise ParseError(ln, col, f"{mn!r} is not an opcode")
        try:
            rec, rest = lookup(words[0], tuple(words[1:]))
        except WarpyError as e:
            raise ParseError(ln, col, str(e)) from None
        toks = _split_operands(ops_text) if ops_text.strip() else []
        cands = [f for f in rec.forms if len(f) == len(toks)]
        ocol = col + len(mn) + 1
        ops: list[Operand] = []
        for k, tok in enumerate(toks):
            arg_kinds = {kd for f in cands for kd in f[k].kinds()} if cands else set()
            vec_w = 0
            if arg_kinds & {"Rv", "URv"}:
                for f in cands:
                    if f[k].width is not None:
                        try:
                            vec_w = f[k].width(rest)  # type: ignore[misc]
                        except (ValueError, IndexError):
                            vec_w = 0
            if "label" in arg_kinds and NAME_RE.fullmatch(tok.strip()):
                ops.append(LabelRef(tok.strip()))
            else:
                ops.append(self.operand(tok, ln, ocol, ) if not vec_w else self._vec_operand(tok, ln, ocol, vec_w))
            ocol += len(tok) + 2
        i = Instr(words[0], tuple(words[1:]), tuple(ops), guard, mark, notes)
        try:
            form_of(i)
        except WarpyError as e:
            raise ParseError(ln, col, str(e)) from None
        return i

    def _vec_operand(self, tok: str, ln: int, col: int, width: int) -> Operand:
        t = tok.strip()
        if re.fullmatch(_INT, t) or t in ("RZ", "URZ"):
            return self.operand(tok, ln, col)
        return self.reg(t, ln, col, want_vec=width)


def _split_operands(s: str) -> list[str]:
    out: list[str] = []
    depth = 0
    cur = ""
    for ch in s:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
            continue
        cur += ch
    out.append(cur)
    # operands are separated by ", ": keep each token's own text without the leading space
    return [o[1:] if o.startswith(" ") else o for o in out]


def parse(text: str) -> Kernel:
    """Read a kernel's SASS text (named or coloured form)."""
    rd = _Reader(text)
    h: dict[str, object] = {}
    lines: list[Line] = []
    body_lines: list[int] = []
    in_body = False
    raw = text.split("\n")
    for ln, line in enumerate(raw, 1):
        if not line.strip():
            continue  # warpy prints none; a blank line someone added means nothing
        if line.startswith("//") and not in_body:
            continue  # a comment above or among the header lines (the body keeps its comments)
        if line.startswith("."):
            if in_body:
                raise ParseError(ln, 1, "a header line after the first instruction")
            rd.header_line(ln, line, h)
            continue
        in_body = True
        body_lines.append(ln)
        if line.startswith("//"):
            lines.append(Comment(line[3:] if line.startswith("// ") else ""))
            continue
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*):", line)
        if m:
            lines.append(Label(m.group(1)))
            continue
        lines.append(rd.instr(ln, line))
    labels = {x.name for x in lines if isinstance(x, Label)}
    for ln_i, x in zip(body_lines, lines):
        if isinstance(x, Instr):
            for op in x.ops:
                if isinstance(op, LabelRef) and op.name not in labels:
                    raise ParseError(ln_i, 3, f"{x.mnemonic} branches to {op.name}, which is no label of this text")
    for need in ("kernel", "sm", "threads"):
        if need not in h:
            raise ParseError(1, 1, f"the header has no .{need} line")
    for k in ("tmaps", "params", "buffers", "regs"):
        if k in h:
            h[k] = tuple(h[k])  # type: ignore[arg-type]
    header = Header(**h)  # type: ignore[arg-type]
    try:
        header.check_tables()
        header.check_over()
    except WarpyError as e:
        raise ParseError(1, 1, str(e)) from None
    return Kernel(header, tuple(lines))


__all__ = [
    "BufferDecl", "Header", "Kernel", "ParamDecl", "ParseError", "RegDecl", "TmapDecl",
    "layout_text", "parse", "parse_layout_text", "elem_name",
]
