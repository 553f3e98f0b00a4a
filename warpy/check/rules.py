"""Rules of single instructions, beyond what their handlers model:

- **use before def**: a register an instruction reads that no instruction of the warp has written
  (in any lane) holds whatever the register file had: reported once a line, not read as 0;
- **warp-aligned instructions** (`.sync.aligned` in PTX: ldmatrix/stmatrix, tcgen05.ld/st/wait,
  tcgen05.alloc/dealloc, the non-deferring `bar.sync`/`bar.arrive`) run by every lane of the warp
  together: run by part of it (lanes diverged, or a guard that is not warp-uniform) they are undefined;
- **warpgroup-collective instructions** (wgmma's fence, MMA, commit and wait; setmaxnreg) run by all
  four warps of a warpgroup, in the same order: each warp's sequence of them (its lines) is kept and
  the four compared at the end (`warpgroups`), so a wgmma issued by 3 of 4 warps is found whatever
  the interleaving;
- **wgmma's fence**: registers written by an instruction other than a wgmma MMA (the accumulator's
  zeroing, an A fragment) may be read or written by an MMA only after a `WARPGROUP.ARRIVE`
  (`wgmma.fence`) that follows the write; the first MMA of a warp needs one too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np

from warpy.check.state import Lanes, Problems, Warp

if TYPE_CHECKING:
    from warpy.check.code import Compiled

#: warpgroup-collective records' keys (`.sync.aligned` over the warpgroup)
WARPGROUP_KEYS = frozenset({"HGMMA", "QGMMA", "WARPGROUP.ARRIVE", "WGMMA.COMMIT", "WARPGROUP.DEPBAR", "USETMAXREG"})
#: warp-aligned records' keys (`.sync.aligned` over the warp)
ALIGNED_KEYS = frozenset({"LDSM", "STSM", "LDTM", "STTM", "TCGEN05.WAIT", "UTCATOMSWS.FIND_AND_SET", "UTCATOMSWS.AND",
                          "UVIRTCOUNT.DEALLOC"})


class Rules:
    """What the instruction rules keep: lines already reported as reading an undefined register,
    each warp's warpgroup-collective lines, and the registers written since each warp's last wgmma
    fence."""

    def __init__(self, problems: Problems) -> None:
        self.problems = problems
        self.undef_seen: set[int] = set()
        self.wg_lines: dict[int, list[int]] = {}  # warp gid -> pcs of the warpgroup-collective lines it ran

    def undefined(self, w: Warp, c: Compiled, names: frozenset[str]) -> None:
        """A line reads registers no instruction of the warp wrote."""
        if c.pc in self.undef_seen:
            return
        self.undef_seen.add(c.pc)
        regs = ", ".join(sorted(names))
        self.problems.add("registers", f"line {c.pc + 1} ({c.mnem}): {w.cta.name} warp {w.wid} reads {regs} before any "
                                       f"instruction wrote it (the register holds whatever the register file had)")

    def aligned(self, w: Warp, c: Compiled, lanes: Lanes, live: Optional[np.ndarray]) -> None:
        """A warp-aligned instruction must run on every lane the warp has."""
        if lanes is None:
            return
        want = np.ones(32, dtype=bool) if live is None else live
        if not np.array_equal(lanes, want):
            self.problems.add("protocol", f"line {c.pc + 1} ({c.mnem}): {w.cta.name} warp {w.wid} runs it on "
                                          f"{int(np.count_nonzero(lanes))} of its {int(np.count_nonzero(want))} lanes; "
                                          f"it is warp-aligned (.sync.aligned): every lane must run it together")

    def warpgroup(self, w: Warp, c: Compiled, lanes: Lanes, live: Optional[np.ndarray]) -> None:
        """A warpgroup-collective line: every lane of the warp, and remembered for `warpgroups`."""
        self.aligned(w, c, lanes, live)
        seq = self.wg_lines.setdefault(w.gid, [])
        if seq and seq[-1] == c.pc and "TRY_ALLOC" in c.instr.mods:
            return  # a setmaxnreg.inc retried until the pool grants it: one request
        seq.append(c.pc)

    def warpgroups(self, warps: list[Warp], code: list[Compiled]) -> None:
        """At the end: the four warps of each warpgroup ran the same warpgroup-collective lines."""
        by_cta: dict[int, list[Warp]] = {}
        for w in warps:
            by_cta.setdefault(w.cta.index, []).append(w)
        for ws in by_cta.values():
            groups: dict[int, list[Warp]] = {}
            for w in ws:
                groups.setdefault(w.wid // 4, []).append(w)
            for g, members in groups.items():
                seqs = [self.wg_lines.get(w.gid, []) for w in members]
                if all(s == seqs[0] for s in seqs) and (len(members) == 4 or not seqs[0]):
                    continue
                self._differ(g, members, seqs, code)

    def _differ(self, g: int, members: list[Warp], seqs: list[list[int]], code: list[Compiled]) -> None:
        cta = members[0].cta.name
        if len(members) < 4:
            self.problems.add("protocol", f"{cta} warpgroup {g}: warps {members[0].wid}..{members[-1].wid} run "
                                          f"warpgroup-collective instructions, the CTA has no warps "
                                          f"{members[-1].wid + 1}..{4 * g + 3}")
            return
        n = max(len(s) for s in seqs)
        for k in range(n):
            at = [s[k] if k < len(s) else -1 for s in seqs]
            if all(x == at[0] for x in at):
                continue
            ran: dict[int, list[int]] = {}
            for w, pc in zip(members, at):
                ran.setdefault(pc, []).append(w.wid)
            parts = []
            for pc, wids in sorted(ran.items(), key=lambda kv: -len(kv[1])):
                who = "warp" + ("s " if len(wids) > 1 else " ") + ",".join(map(str, wids))
                parts.append(f"{who} {'run line ' + str(pc + 1) + ' (' + code[pc].mnem + ')' if pc >= 0 else 'run none'}")
            self.problems.add("protocol", f"{cta} warpgroup {g}: its warpgroup-collective instruction {k + 1} differs: "
                                          f"{'; '.join(parts)} (all four warps must run each one together)")
            return
