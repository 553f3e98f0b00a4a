"""The host checker's machine: every warp of the first and last clusters of a launch, lanes of a
warp together (numpy vectors), scheduled round-robin until all have exited or all are blocked.

`Machine` is what an opcode's semantics (`warpy.check.families`) act on. It holds the parts, each
with its own state and logic:

- `code` (`warpy.check.code`): the compiled instructions and operand readers;
- `launch` (`warpy.check.schedule`): the simulated clusters, CTAs and warps, and the run loop;
- `global_memory` (`warpy.check.global_memory`): global sources, declared global buffers, their bytes;
- `places` (`warpy.check.places`): declared shared buffers, names of places for messages;
- `order` (`warpy.check.happens_before`): access records and the happens-before check;
- `mbarriers` (`warpy.check.mbarrier`): the mbarrier model;
- `flags` (`warpy.check.flags`): GPU-scope flags between CTAs;
- `derived` (`warpy.check.derived`): the derived-operand check;

and `problems`, what was found. `warpy.check.obligations` says what must hold when the run ends.
"""

from __future__ import annotations

from typing import Callable, Optional, Union

import numpy as np

from warpy.isa.text import Header, Kernel
from warpy.target import target
from warpy.check import obligations
from warpy.check.code import Code
from warpy.check.derived import DerivedOperands
from warpy.check.expect import Expectation
from warpy.check.flags import Flags
from warpy.check.global_memory import GLOBAL_SPAN, GlobalMemory
from warpy.check.header import check_header
from warpy.check.happens_before import Footprint, HappensBefore
from warpy.check.mbarrier import MBarriers
from warpy.check.places import Places
from warpy.check.provenance import Provenance
from warpy.check.rules import Rules
from warpy.check.schedule import Scheduler
from warpy.check.state import BLOCKED, Problems, Warp


class Machine:
    """One run of a kernel's text. `values`: compute the data too (shared, tensor and global memory
    hold bytes); `resident`: the SMs the launch fills (the target's by default); `hb`: keep the
    ordered pairs for `warpy hb`; `seed`: the generator of the inputs; `expect`: the kernel family's
    expectation (what its inputs hold); `progress` / `label`: progress lines while it runs;
    `all_ctas`: run every CTA of the launch, not only the first and last clusters; `scratch`: the
    32-bit words scratch memory holds at launch (what an earlier launch left, `scratch_words`);
    `schedule`: 0 for round-robin, another number for a random schedule of the warps it seeds;
    `chosen`: run these clusters only; `fast`: no ordering, derived-operand or provenance checks (the
    tile pass: what runs where, and what it stores)."""

    def __init__(self, kernel: Kernel, *, values: bool = False, resident: Optional[int] = None,
                 progress: Optional[Callable[[str], None]] = None, hb: bool = False, seed: int = 0,
                 label: str = "", expect: Optional[Expectation] = None, all_ctas: bool = False,
                 scratch: Optional[dict[int, int]] = None, schedule: int = 0, chosen: Optional[list[int]] = None,
                 fast: bool = False) -> None:
        self.h: Header = kernel.header
        self.values = values  # compute the data too (shared, tensor and global memory hold bytes)
        self.progress = progress
        self.label = label
        self.problems = Problems()
        check_header(self.h, self.problems)
        self.global_memory = GlobalMemory(self.h, self.problems, values, expect, np.random.default_rng(seed))
        if scratch:
            for addr, v in scratch.items():
                self.global_memory.write_word(addr, v)
        self.places = Places(self.h, self.global_memory, self.problems)
        self.code = Code(kernel, self.global_memory.params)
        self.global_memory.uses_pdl = self.code.uses_pdl
        self.global_memory.stored_maps = self.code.stored_maps()
        self.order = HappensBefore(self.places, self.problems, hb)
        self.order.enabled = not fast
        self.mbarriers = MBarriers(self.places, self.order, self.problems)
        self.flags = Flags(self.global_memory)
        self.flags.initial = dict(self.global_memory.shadow)
        self.rules = Rules(self.problems)
        self.prov = Provenance(self.problems, self.global_memory, {p.name for p in self.h.params if p.scratch})
        self.prov.on = not fast
        # MMA operand tiles by descriptor: byte addresses and footprint (`families.wgmma.operand_footprint`)
        self.tiles: dict[tuple[Union[str, int], ...], tuple[np.ndarray, Footprint]] = {}
        self.derived = DerivedOperands(self.h, self.global_memory.params, self.problems)
        sms = resident if resident is not None else target(self.h.sm).sms
        self.launch = Scheduler(self.h, self.problems, sms=sms, values=values, uses_clc=self.code.uses_clc,
                                all_ctas=all_ctas, schedule=schedule, chosen=chosen)
        self.flags.outside = not self.launch.whole

    @property
    def warps(self) -> list[Warp]:
        return self.launch.warps

    @property
    def steps(self) -> int:
        """Warp instructions run."""
        return self.launch.steps

    @property
    def params(self) -> dict[str, int]:
        """The kernel parameters' values (the value rules' environment, `warpy.isa.semantics.Env`)."""
        return self.global_memory.params

    # what a kernel family's `Expectation.compare` reads (`warpy.check.expect.RunData`)
    @property
    def gmem(self) -> dict[str, np.ndarray]:
        return self.global_memory.gmem

    @property
    def gwritten(self) -> dict[str, np.ndarray]:
        return self.global_memory.gwritten

    @property
    def greduced(self) -> dict[str, np.ndarray]:
        return self.global_memory.greduced

    def scratch_words(self) -> dict[int, int]:
        """The 32-bit words of scratch memory (`.param NAME u64 scratch`) the launch left in its
        u32/s32 buffers (flags, counters, epochs), the nonzero ones (scratch starts zeroed): the
        words kept without values, and with values what those buffers hold at the end, however the
        launch wrote them (stores, atomics, reductions). Other scratch (fp32 partials of a split K)
        is a workspace each launch writes before it reads, and is not handed on."""
        gm = self.global_memory
        scratch = {p.name for p in self.h.params if p.scratch and p.name in gm.base}
        bases = [gm.base[n] for n in scratch]
        out = {a: v for a, v in gm.shadow.items() if any(b <= a < b + GLOBAL_SPAN for b in bases)}
        if self.values:
            for b in gm.buffers:
                if b.elem not in ("u32", "s32") or b.source not in scratch or b.source not in gm.gmem:
                    continue
                mem = gm.gmem[b.source]
                lo = -(-b.base // 4) * 4
                hi = min(b.base + b.size, mem.size) // 4 * 4
                if hi <= lo:
                    continue
                words = mem[lo:hi].view(np.uint32)
                base = gm.base[b.source] + lo
                for k in np.nonzero(words)[0]:
                    out[base + 4 * int(k)] = int(words[k])
        return out

    def run(self) -> None:
        self.launch.run(self, self.progress, self.label)
        obligations.at_end(self.launch.ctas, self.order, self.problems)
        self.rules.warpgroups(self.warps, self.code.instrs)
        # every CTA ran: every output element written, none twice; some ran: none of theirs twice (the
        # tile pass checks its batches together)
        if self.launch.whole or self.prov.on:
            self.prov.cover.check(self.problems, whole=self.launch.whole)
        if self.prov.on and not any(w.state == BLOCKED for w in self.warps):  # (a hang leaves tiles unfinished)
            self.prov.check_tiles()

