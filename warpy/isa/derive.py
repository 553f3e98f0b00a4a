"""Address derivation: the values of buffers at coordinates, computed from the buffers' layouts.

A program never writes the address of a buffer operand (`Tile`, `Barrier`, `TmemRef`); it asks
for `form(ref)` (`addr`, or a descriptor's low word `gdesc.lo` / `udesc.lo`) and the derivation
places the arithmetic where each index changes:

- a value of fixed indices is set once, at the top of the role (or program) that uses it;
- a value affine in a loop counter is an induction: set before the loop, stepped at its end;
- a value of a ring position is one multiply-add at the top of the ring's iteration, ahead of the wait;
- a value affine in a per-CTA (`Uniform`) or per-thread (`Lane`) index is one multiply-add at the
  point of use.

Before any line is placed, the value is checked affine in every index over the index's whole
range (the layout decides; a swizzle may break affinity and is then refused, naming the point).

The places are slots: `Slot`s in the program's line list that the derivation fills later, kept per
scope (`Scope`: the program, a role, a loop, a ring iteration) on a stack the Program's structure
methods push and pop. Derived lines are marked `+` and noted with what they hold
(`// addr sa[stage, 0, 0]`); the Program marks its loop and ring bookkeeping `~`.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Sequence, Union

from warpy.errors import WarpyError
from warpy.isa.buffers import Buffer, Ref
from warpy.isa.descriptors import buffer_low_word, start_field
from warpy.isa.families import alu
from warpy.isa.index import Counter, Index, Ix, Lane, Ring, Uniform
from warpy.isa.instr import Instr, Note
from warpy.isa.operands import RZ, UP, Mem, P, R, Sym, UR
from warpy.layout import SwizzledLayout

if TYPE_CHECKING:
    from warpy.isa.program import Program

DESC_FORMS = ("gdesc", "udesc")


class Slot:
    """A place in the line list where derived lines are inserted later."""

    def __init__(self) -> None:
        self.lines: list[Instr] = []


class Scope:
    """Where an index is visible and its derived values live: `top` (the head of the role, loop
    or ring iteration), and for a loop `pre` (before it) and `step` (at its end)."""

    def __init__(self, kind: str, top: Slot, pre: Optional[Slot] = None, step: Optional[Slot] = None,
                 index: Optional[Index] = None, role: str = "") -> None:
        self.kind = kind
        self.top = top
        self.pre = pre
        self.step = step
        self.index = index
        self.role = role
        self.memo: dict[object, UR] = {}


class Derivation:
    """The derived values of one program: its scopes, the registers holding derived values (memoised
    per scope), the shared-memory base, and the tensor-memory base the program set (`tmem_base`:
    the register holding the allocation's address, before any tensor-memory operand is derived)."""

    def __init__(self, prog: Program, prologue: Slot) -> None:
        self.prog = prog
        self.scopes: list[Scope] = [Scope("program", prologue)]
        self.tmem_base: Optional[UR] = None
        self._smem: Optional[UR] = None
        self._per_role: dict[tuple[object, ...], object] = {}

    # -- scopes ---------------------------------------------------------------------------------
    @property
    def prologue(self) -> Slot:
        """The program's first slot: lines every role needs (the thread and warp index, smem base)."""
        return self.scopes[0].top

    @contextlib.contextmanager
    def scope(self, scope: Scope) -> Iterator[None]:
        self.scopes.append(scope)
        try:
            yield
        finally:
            self.scopes.pop()

    def role_scope(self) -> Scope:
        for s in reversed(self.scopes):
            if s.kind in ("role", "program"):
                return s
        return self.scopes[0]

    def per_role(self, key: tuple[object, ...], value: object, lines: Sequence[Instr]) -> None:
        """Lines setting registers to constants (`value` names what they set) once per role: the
        first time at the top of the role, later at the point of use, only where `value` changed."""
        k = (self.role_scope().role,) + key
        if k in self._per_role and self._per_role[k] == value:
            return
        first = k not in self._per_role
        self._per_role[k] = value
        if first:
            self.role_scope().top.lines.extend(lines)
        else:
            for ln in lines:
                self.prog.emit(ln)

    def _visible(self, index: Index) -> Scope:
        for s in reversed(self.scopes):
            if s.index is index:
                return s
        raise WarpyError(f"index {index.name} is used outside its loop or ring")

    def _find_memo(self, key: object) -> Optional[UR]:
        for s in reversed(self.scopes):
            if key in s.memo:
                return s.memo[key]
        return None

    def _place(self, slot: Slot, line: Instr) -> None:
        slot.lines.append(self.prog.arch_form(line).marked("+"))

    # -- the values ------------------------------------------------------------------------------
    def smem_base(self) -> UR:
        """The shared-memory address of the dynamic shared memory (set in the program's prologue)."""
        if self._smem is None:
            self._smem = self.prog.ur("smem")
            self._place(self.prologue, alu.umov(self._smem, Sym("dsmem")))
        return self._smem

    def _decompose(self, form: str, ref: Ref) -> tuple[int, dict[int, tuple[Index, int]]]:
        """value(ref) - value(origin) = c0 + sum(coef * index), checked for every index value."""
        buf = ref.buffer
        arch = self.prog.sm
        idxs: dict[int, Index] = {}
        for c in ref.coords:
            for i in c.indices():
                idxs[id(i)] = i

        def val(env: dict[int, int]) -> int:
            off = buf.offset([c.eval(env) for c in ref.coords])
            if form.startswith(DESC_FORMS):
                field = start_field(arch, off, buf.name)
                lin = buf.layout.layout(tuple(c.eval(env) for c in ref.coords)) if isinstance(buf.layout, SwizzledLayout) else off
                if lin != off:
                    raise WarpyError(f"{ref.note(form)}: the tile's origin is not a swizzle-atom row; no descriptor can start there")
                return field
            return off

        zero = {k: 0 for k in idxs}
        v0 = val(zero)
        coefs: dict[int, tuple[Index, int]] = {}
        for k, i in idxs.items():
            if i.extent > 1:
                coefs[k] = (i, val({**zero, k: 1}) - v0)
            else:
                coefs[k] = (i, 0)
        keys = list(idxs)
        extents = [idxs[k].extent for k in keys]
        total = 1
        for e in extents:
            total *= e
        if total <= 4096:
            combos: Iterator[tuple[int, ...]] = itertools.product(*[range(e) for e in extents])
        else:
            combos = iter([tuple(v if j == i else 0 for j in range(len(keys))) for i in range(len(keys)) for v in range(extents[i])])
        for combo in combos:
            env = dict(zip(keys, combo))
            want = v0 + sum(coefs[k][1] * env[k] for k in keys)
            if val(env) != want:
                raise WarpyError(
                    f"{ref.note(form)} is not affine in {', '.join(i.name for i in idxs.values())} "
                    f"(at {dict((idxs[k].name, v) for k, v in env.items())}); its address cannot be derived by multiply-adds"
                )
        return v0, coefs

    def _buffer_base(self, form: str, buf: Buffer) -> UR:
        """A register holding form(buffer origin), set once at the top of the role."""
        key = ("base", form, buf.name)
        found = self._find_memo(key)
        if found is not None:
            return found
        scope = self.role_scope()
        origin = buf.origin()
        lines: list[Instr] = []
        if buf.space == "tmem":
            if self.tmem_base is None:
                raise WarpyError(f"{buf.name} is in tensor memory: set the program's derive.tmem_base to the allocation's register first")
            if buf.base == 0:
                reg = self.tmem_base
            else:
                reg = self.prog.ur(f"{buf.name}_base")
                lines.append(alu.uiadd3(reg, self.tmem_base, buf.base).noted(origin.note()))
        elif form == "addr":
            smem = self.smem_base()
            reg = self.prog.ur(f"{buf.name}_base")
            lines.append(alu.uiadd3(reg, smem, buf.base).noted(origin.note()))
        else:
            # a descriptor's low word: the start field read off the address, the other fields added
            addr = self._buffer_base("addr", buf)
            reg = self.prog.ur(f"{buf.name}_{form.split('.')[0]}")
            shift, rest = buffer_low_word(buf, self.prog.sm)
            lines.append(alu.ushf_r(reg, addr, shift))
            lines.append(alu.uiadd3(reg, reg, rest).noted(origin.note(form)))
        for ln in lines:
            self._place(scope.top, ln)
        scope.memo[key] = reg
        return reg

    def _exact_note(self, form: str, ref: Ref, done: list[tuple[Index, int]]) -> Optional[Note]:
        """The note of a partial value (origin + the index terms so far), if it is the buffer at
        coordinates: the ref's coordinates keeping only those indices' terms."""
        ids = {id(i) for i, _ in done}
        coords = tuple(Ix(0, tuple((k, i) for k, i in c.terms if id(i) in ids)) for c in ref.coords)
        part = Ref(ref.buffer, coords)
        try:
            c0, coefs = self._decompose(form, part)
        except WarpyError:
            return None
        want = {k: c for k, (_, c) in coefs.items() if c}
        have = {id(i): c for i, c in done if c}
        if c0 != 0 or want != have:
            return None
        return part.note(form)

    def value_reg(self, form: str, ref: Ref, allow_lanes: bool = False) -> tuple[UR, int]:
        """A uniform register and an immediate whose sum is form(ref), placed as the module says
        (per-thread coordinates excluded: allow_lanes says the caller adds them)."""
        prog = self.prog
        c0, coefs = self._decompose(form, ref)
        if not allow_lanes and any(c and isinstance(i, Lane) for i, c in coefs.values()):
            raise WarpyError(f"{ref.note(form)} depends on a per-thread coordinate; it cannot be a uniform value")
        reg = self._buffer_base(form, ref.buffer)
        active = [(i, c) for i, c in coefs.values() if c]
        counters = [(i, c) for i, c in active if isinstance(i, Counter)]
        rings = [(i, c) for i, c in active if isinstance(i, Ring)]
        buf = ref.buffer
        suffix = "" if form == "addr" else "_" + form.split(".")[0]
        done: list[tuple[Index, int]] = []
        # inductions: set before the loop, stepped at its end
        for i, c in counters:
            done.append((i, c))
            key = ("ind", form, buf.name, tuple((id(j), k) for j, k in done))
            found = self._find_memo(key)
            if found is not None:
                reg = found
                continue
            sc = self._visible(i)
            assert sc.pre is not None and sc.step is not None
            new = prog.ur(f"{buf.name}{suffix}@{i.name}")
            note = self._exact_note(form, ref, done)
            self._place(sc.pre, alu.uiadd3(new, reg, 0))
            self._place(sc.step, alu.uiadd3(new, new, c))
            if note is not None:
                sc.pre.lines[-1] = sc.pre.lines[-1].noted(note)
            sc.memo[key] = new
            reg = new
        # ring positions: one multiply-add at the top of the iteration
        for ri, c in rings:
            done.append((ri, c))
            key = ("ring", form, buf.name, tuple((id(j), k) for j, k in done))
            found = self._find_memo(key)
            if found is not None:
                reg = found
                continue
            sc = self._visible(ri)
            assert isinstance(ri, Ring)
            new = prog.ur(f"{buf.name}{suffix}@{ri.name}")
            ln = alu.uimad(new, ri.stage, c, reg)
            note = self._exact_note(form, ref, done)
            if note is not None:
                ln = ln.noted(note)
            self._place(sc.top, ln)
            sc.memo[key] = new
            reg = new
        # per-CTA uniform indices: one multiply-add here, at the point of use
        for ui, c in [(i, c) for i, c in active if isinstance(i, Uniform)]:
            assert isinstance(ui, Uniform)
            done.append((ui, c))
            new = prog.ur(f"{buf.name}{suffix}@{ui.name}")
            ln = alu.uimad(new, ui.reg, c, reg)
            note = self._exact_note(form, ref, done)
            prog.emit(ln.noted(note) if note is not None else ln, mark="+")
            reg = new
        return reg, c0

    def lane_value(self, form: str, ref: Ref) -> tuple[Union[R, UR], int]:
        """A register (general when ref has per-thread coordinates) and an immediate whose sum is
        form(ref): the uniform part as value_reg places it, then one IMAD per lane index here."""
        c0, coefs = self._decompose(form, ref)
        lanes = [(i, c) for i, c in coefs.values() if c and isinstance(i, Lane)]
        reg, off = self.value_reg(form, ref, allow_lanes=True)
        if not lanes:
            return reg, off
        dst = self.prog.r(f"{ref.buffer.name}@{'_'.join(i.name for i, _ in lanes)}")
        src: Union[R, UR] = reg
        done = [(i, c) for i, c in coefs.values() if c]
        for n, (lane, c) in enumerate(lanes):
            assert isinstance(lane, Lane)
            ln = alu.imad(dst, lane.reg, c, src)
            if n == len(lanes) - 1:
                note = self._exact_note(form, ref, done)
                if note is not None:
                    ln = ln.noted(note)
            self.prog.emit(ln, mark="+")
            src = dst
        return dst, off

    def value_here(self, form: str, ref: Ref) -> tuple[UR, int]:
        """Like value_reg, but every ring term is one multiply-add here, at the point of use (for a
        ring position outside its iteration: the next stage, after the advance)."""
        c0, coefs = self._decompose(form, ref)
        reg = self._buffer_base(form, ref.buffer)
        suffix = "" if form == "addr" else "_" + form.split(".")[0]
        done: list[tuple[Index, int]] = []
        for i, c in coefs.values():
            if not c:
                continue
            if not isinstance(i, Ring):
                raise WarpyError(f"{ref.note(form)}: only ring positions can be derived outside their scope")
            done.append((i, c))
            new = self.prog.ur(f"{ref.buffer.name}{suffix}@{i.name}_here")
            ln = alu.uimad(new, i.stage, c, reg)
            note = self._exact_note(form, ref, done)
            self.prog.emit(ln.noted(note) if note is not None else ln, mark="+")
            reg = new
        return reg, c0

    def into(self, dst: UR, form: str, ref: Ref) -> None:
        """dst = form(ref): one `+` line at the point of use (the rest is hoisted)."""
        reg, off = self.value_reg(form, ref)
        self.prog.emit(alu.uiadd3(dst, reg, off).noted(ref.note(form)), mark="+")

    # -- instructions with a derived memory operand ---------------------------------------------
    def emit_at(self, ref: Ref, make: Callable[[Mem], Instr], guard: Union[P, UP, None] = None) -> Instr:
        """Emit an instruction whose memory operand is ref's address (derived), noted."""
        reg, off = self.lane_value("addr", ref)
        i = make(Mem(reg, offset=off))
        k = next(n for n, o in enumerate(i.ops) if isinstance(o, Mem))
        i = i.noted(ref.note("addr", k)).guarded(guard)
        return self.prog.emit(i)

    def emit_swizzled_at(self, ref: Ref, make: Callable[[Mem], Instr], guard: Union[P, UP, None] = None) -> Instr:
        """Emit an instruction whose memory operand is a swizzled buffer at per-thread coordinates
        (see `swizzled_lane_addr`), noted with the buffer at those coordinates."""
        i = make(self.swizzled_lane_addr(ref))
        k = next(n for n, o in enumerate(i.ops) if isinstance(o, Mem))
        return self.prog.emit(i.noted(ref.note("addr", k)).guarded(guard))

    def swizzled_lane_addr(self, ref: Ref) -> Mem:
        """The address of a swizzled shared-memory buffer at per-thread coordinates (lanes and
        counters), where no multiply-add can express it: the swizzle XORs address bits with other
        address bits of the same thread. The buffer's layout decides both parts: its unswizzled
        layout gives the linear offset (affine in the indices, one IMAD each), its swizzle
        `Sw<B,M,S>` the three ALU lines `t = lin >> S; t &= mask << M; off = lin ^ t`. Exact because
        the buffer's base is a multiple of the swizzle's period (so the swizzle sees the offset's
        bits alone). Marked `+`, noted with the buffer at the coordinates."""
        prog = self.prog
        buf = ref.buffer
        lay = buf.layout
        if not isinstance(lay, SwizzledLayout) or lay.offset:
            raise WarpyError(f"{buf.name}: swizzled_lane_addr needs a swizzled buffer (use lane_value)")
        sw = lay.swizzle
        period = 1 << (sw.bits + sw.base + max(sw.shift, 0))
        if buf.base % period or sw.shift <= 0:
            raise WarpyError(f"{buf.name}: base {buf.base:#x} is not a multiple of the swizzle period {period}")
        inner = lay.layout
        idxs: dict[int, Index] = {}
        for c in ref.coords:
            for i in c.indices():
                if not isinstance(i, (Lane, Counter)):
                    raise WarpyError(f"{buf.name}: per-thread swizzled addresses take lanes and counters, not {i.name}")
                idxs[id(i)] = i

        def lin(env: dict[int, int]) -> int:
            return int(inner(tuple(c.eval(env) for c in ref.coords)))

        zero = {k: 0 for k in idxs}
        c0 = lin(zero)
        coefs = {k: lin({**zero, k: 1}) - c0 for k in idxs}
        for k, i in idxs.items():  # affine in each index over its whole range (the layout is strided)
            for v in range(i.extent):
                if lin({**zero, k: v}) != c0 + coefs[k] * v:
                    raise WarpyError(f"{ref.note()}: the unswizzled offset is not affine in {i.name}")
        off = prog.r(f"{buf.name}@lin")
        tmp = prog.r(f"{buf.name}@swz")
        src: Union[R, int] = c0
        first = True
        for k, i in idxs.items():
            if coefs[k]:
                assert isinstance(i, (Lane, Counter))
                prog.emit(alu.imad(off, i.reg, coefs[k], src if not first else c0), mark="+")
                src, first = off, False
        if first:
            prog.emit(alu.mov(off, c0), mark="+")
        prog.emit(alu.shf_r(tmp, off, sw.shift), mark="+")
        prog.emit(alu.lop3(tmp, tmp, ((1 << sw.bits) - 1) << sw.base, RZ, 0xC0), mark="+")
        prog.emit(alu.lop3(off, off, tmp, RZ, 0x3C), mark="+")
        return Mem(off, self._buffer_base("addr", buf), 0)
