"""Cluster launch control: the hardware tile scheduler.

The model launches `resident` clusters at first (one per SM's worth of CTAs); cluster r's j-th
try-cancel takes cluster r + (j + 1) * resident while the grid has one, and is declined after.
The response (16 bytes) lands in each CTA the request names and completes 16 bytes on the barrier
there: word 0 = cancelled, words 1..3 = the first CTA's x, y, z."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from warpy.isa.values import first
from warpy.isa.operands import elem_name
from warpy.check.families.tma import land
from warpy.check.registers import reg_name
from warpy.isa.families import clc as isa
from warpy.check.semantics import semantics
from warpy.check.state import Lanes, Warp

if TYPE_CHECKING:
    from warpy.check.code import Compiled
    from warpy.check.machine import Machine


@semantics(isa.UGETNEXTWORKID)
def _try_cancel(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    resp = int(first(c.get[0](w), lanes))
    bar = int(first(c.get[1](w), lanes))
    cl = w.cta.cluster
    if cl.clc_declined:
        m.problems.add("protocol", f"{w.cta.name} warp {w.wid} asks cluster launch control again after it declined")
    cl.clc_taken += 1
    launch = m.launch
    nxt = cl.index + cl.clc_taken * launch.resident
    words = np.zeros(4, dtype=np.uint32)
    if nxt < launch.n_clusters:
        g, ccl = m.h.grid, m.h.cluster
        ncl0 = max(1, g[0] // ccl[0])
        ncl1 = max(1, g[1] // ccl[1])
        cx, rest = nxt % ncl0, nxt // ncl0
        cy, cz = rest % ncl1, rest // ncl1
        words[:] = (1, cx * ccl[0], cy * ccl[1], cz * ccl[2])
    else:
        cl.clc_declined = True
    issue_vc = w.tick()
    dests = cl.ctas if "BROADCAST" in c.instr.mods else [w.cta]
    image = words.view(np.uint8).copy()
    for d in dests:
        land(m, w, c, d, d, resp & 0xFFFFFF, bar & 0xFFFFFF, 16, issue_vc, image if d.smem is not None else None)
        for k in range(4):  # what an LDS without values reads there
            d.shadow[(resp & 0xFFFFFF) + 4 * k] = int(words[k])


@semantics(isa.CLCQUERY)
def _query(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    i = c.instr
    src = reg_name(i.ops[1])
    vals = [w.regs.get(elem_name(src, k), 0) for k in range(4)]
    if "CANCELED" in i.mods:
        v = vals[0]
        c.put[0](w, (np.asarray(v) != 0) if isinstance(v, np.ndarray) else v != 0, lanes)
        return
    axis = 1 + "XYZ".index(i.mods[-1]) if i.mods[-1] in "XYZ" else 1
    c.put[0](w, vals[axis], lanes)
