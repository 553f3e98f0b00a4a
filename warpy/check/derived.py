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

    def check(self, w: Warp, c: Compiled, before: dict[str, Val], mask: Lanes, pre: list[Optional[Val]]) -> None:
        """The notes of a line the warp ran: `before` its registers before the line, `pre` the noted
        operands read before it (None where the operand is a register the line writes)."""
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
            idx = list(range(32)) if mask is None else np.nonzero(mask)[0].tolist()
            cols = [x.tolist() if isinstance(x, np.ndarray) else [int(x)] * 32 for x in coords]
            gl = got.tolist() if isinstance(got, np.ndarray) else [int(got)] * 32
            vals = []
            bad = False
            for ln in idx:
                want = self._ref(w, note, tuple(col[ln] for col in cols))
                gv = gl[ln] & L.M32
                vals.append(gv)
                if want is not None and gv != want and not bad:
                    bad = True
                    self.problems.add("wrong", f"line {c.pc + 1} ({c.mnem}): {note} at lane {ln} is 0x{want:x}, the operand "
                                               f"holds 0x{gv:x}")
            w.trace.append((c.pc, tuple(vals)))

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
