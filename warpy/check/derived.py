"""Derived operands: every note (`// addr sa[stage, 0, 16]`) is checked against
`warpy.isa.reference` from the `.buffer` line at the coordinates the registers hold, in each lane
that runs the line; the values seen are recorded on the warp for the colouring check."""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

from warpy.errors import WarpyError
from warpy.isa import values as L
from warpy.isa.instr import Note
from warpy.isa.reference import reference
from warpy.isa.text import Header
from warpy.isa.values import Val
from warpy.layout.core import LayoutError
from warpy.check.code import Compiled
from warpy.check.places import DSMEM
from warpy.check.state import Lanes, Problems, Warp


class DerivedOperands:
    def __init__(self, h: Header, params: dict[str, int], problems: Problems) -> None:
        self.h = h
        self.params = params
        self.problems = problems
        self.checked = 0
        self._refs: dict[tuple[str, str, tuple[int, ...], int], int] = {}
        self._vec: dict[tuple[int, bytes, bytes, int], np.ndarray] = {}

    def check(self, w: Warp, c: Compiled, before: dict[str, Val], mask: Lanes, pre: list[Optional[Val]]) -> None:
        """The notes of a line the warp ran: `before` its registers before the line (at least those the
        notes' coordinates read: `Compiled.note_names`), `pre` the noted operands read before it (None
        where the operand is a register the line writes)."""
        for k, note in enumerate(c.notes):
            env = before
            coords: list[Union[int, np.ndarray]] = []
            for a in note.coords:
                v: Union[int, np.ndarray] = a.const
                for coef, name in a.terms:
                    x = env.get(name, 0)
                    if isinstance(x, np.ndarray):
                        x = x.astype(np.int64)
                    v = v + coef * x
                coords.append(v)
            p = pre[k]
            got = p if p is not None else c.get[note.operand](w)
            lanes_vec = any(isinstance(x, np.ndarray) for x in coords) or isinstance(got, np.ndarray)
            self.checked += 1
            if not lanes_vec:
                want = self._ref(w, note, tuple(int(x) for x in coords))
                gv = int(got) & L.M32
                w.trace.append((c.pc, gv))
                if want is not None and gv != want:
                    self.problems.add("wrong", f"line {c.pc + 1} ({c.mnem}): {note} is 0x{want:x}, the operand holds 0x{gv:x}")
                continue
            act = np.ones(32, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
            cols = np.empty((len(coords), 32), dtype=np.int64)
            for j, x in enumerate(coords):
                cols[j] = x
            wants = self._refs_of(w, note, cols, act)  # -1 where the buffer cannot answer (reported)
            if isinstance(got, np.ndarray):
                gl = got.astype(np.int64) & L.M32
            else:
                gl = np.full(32, int(got) & L.M32, dtype=np.int64)
            vals = gl[act]
            bad = act & (wants >= 0) & (gl != wants)
            if bad.any():
                ln = int(np.argmax(bad))
                self.problems.add("wrong", f"line {c.pc + 1} ({c.mnem}): {note} at lane {ln} is 0x{int(wants[ln]):x}, the "
                                           f"operand holds 0x{int(gl[ln]):x}")
            w.trace.append((c.pc, tuple(vals.tolist())))

    def _refs_of(self, w: Warp, note: Note, cols: np.ndarray, act: np.ndarray) -> np.ndarray:
        """The reference value at each lane's coordinates (`cols`: [coordinate, lane]), remembered by
        the coordinates of every lane; -1 where it cannot be computed."""
        key = (id(note), cols.tobytes(), act.tobytes(), w.cta.tmem_base)
        hit = self._vec.get(key)
        if hit is not None:
            return hit
        out = np.full(32, -1, dtype=np.int64)
        for ln in np.nonzero(act)[0]:
            v = self._ref(w, note, tuple(int(x) for x in cols[:, ln]))
            if v is not None:
                out[ln] = v
        self._vec[key] = out
        return out

    def _ref(self, w: Warp, note: Note, coords: tuple[int, ...]) -> Optional[int]:
        key = (note.buffer, note.form, coords, w.cta.tmem_base)
        v = self._refs.get(key)
        if v is None:
            try:
                v = reference(self.h, note, coords, dsmem=DSMEM, tmem_base=w.cta.tmem_base, params=self.params)
            except (LayoutError, WarpyError, IndexError) as e:  # a coordinate outside the layout's shape, a
                self.problems.add("wrong", f"{note} at {coords}: {e}")  # note the buffer cannot answer: a wrong operand
                return None
            self._refs[key] = v
        return v
