"""Places in the kernel's declared memory: which shared buffer an address falls in, what a message
calls a place (`stage_full[0]`, `sa[2]`, a global buffer's name), and whether an access stays inside
the shared buffers the kernel declares (an mbarrier's address inside an mbarrier buffer)."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Optional

import numpy as np

from warpy.errors import WarpyError
from warpy.isa.text import BufferDecl, Header, layout_text
from warpy.layout.swizzle import SwizzledLayout
from warpy.check.state import Cta, Problems, Warp

if TYPE_CHECKING:
    from warpy.check.code import Compiled
    from warpy.check.global_memory import GlobalMemory

DSMEM = 0x400  # the shared-window address of the dynamic shared memory (1024-aligned)


def pipe_name(decl: BufferDecl, coords: tuple[int, ...]) -> Optional[str]:
    """`stage_full[0]` for a pipe's barrier buffer `stage_bars[0, 0]` (docs/sass.md: [0, s] full,
    [1, s] empty)."""
    if decl.name.endswith("_bars") and len(coords) == 2:
        return f"{decl.name[:-5]}_{'full' if coords[0] == 0 else 'empty'}[{coords[1]}]"
    return None


class Places:
    def __init__(self, header: Header, gmem: GlobalMemory, problems: Problems) -> None:
        self.gmem = gmem
        self.problems = problems
        self.smem_bufs = sorted((b for b in header.buffers if b.space == "smem"), key=lambda b: b.base)
        self._coords: dict[tuple[str, int], tuple[int, ...]] = {}
        self._stage: dict[str, int] = {}  # a staged buffer (rank 3 or more, not mbarriers): its stage's stride
        for b in self.smem_bufs:
            lay = b.layout.layout if isinstance(b.layout, SwizzledLayout) else b.layout
            if b.elem == "mbarrier" or not isinstance(lay.shape, tuple) or len(lay.shape) < 3:
                continue
            st = lay.stride[0] if isinstance(lay.stride, tuple) else lay.stride
            if not isinstance(st, int):
                raise WarpyError(f"shared buffer {b.name}: its stage mode (mode 0 of {layout_text(b.layout)}) nests, "
                                 f"so no one stride names the stage: declare the stages as one mode")
            if st:  # (a stage stride of 0: every stage is the same bytes, named by the buffer alone)
                self._stage[b.name] = st

    def smem_buffer(self, addr: int) -> Optional[BufferDecl]:
        off = addr - DSMEM
        for b in self.smem_bufs:
            if b.base <= off < b.base + b.size:
                return b
        return None

    def name(self, space: str, cta: Optional[Cta], addr: int) -> str:
        """What a message calls the place at `addr` of `space` ("smem", "global", "tmem")."""
        if space == "smem":
            b = self.smem_buffer(addr)
            if b is None:
                return f"shared 0x{addr:x}"
            off = addr - DSMEM - b.base
            if b.elem == "mbarrier":
                coords = self._barrier_coords(b, off)
                nm = pipe_name(b, coords)
                return nm or f"{b.name}[{', '.join(map(str, coords))}]"
            st = self._stage.get(b.name)
            return b.name if st is None else f"{b.name}[{off // st}]"  # a staged buffer: the stage
        if space == "global":
            src, off = self.gmem.source(addr)
            if src is None:
                return "global memory"
            g = self.gmem.buffer_of(src, off, off + 1)
            return g.name if g is not None else src
        if space == "tmem":
            return "tensor memory"
        return space

    def _barrier_coords(self, b: BufferDecl, off: int) -> tuple[int, ...]:
        key = (b.name, off)
        hit = self._coords.get(key)
        if hit is not None:
            return hit
        lay = b.layout
        shape = lay.shape if isinstance(lay.shape, tuple) else (lay.shape,)
        found: tuple[int, ...] = (off // 8,)
        flat = [s if isinstance(s, int) else int(np.prod(s)) for s in shape]
        for c in itertools.product(*[range(s) for s in flat]):
            if int(lay(c) if len(c) > 1 else lay(c[0])) == off:
                found = c
                break
        self._coords[key] = found
        return found

    def check_smem_range(self, w: Warp, c: Compiled, lo: int, hi: int) -> bool:
        off_lo, off_hi = lo - DSMEM, hi - DSMEM
        for b in self.smem_bufs:
            if b.base <= off_lo and off_hi <= b.base + b.size:
                return True
        self.problems.add("memory", f"{w.cta.name} warp {w.wid}: {c.mnem} touches shared 0x{lo:x}..0x{hi:x}, "
                                    f"outside every shared buffer the kernel declares")
        return False

    def check_barrier_addr(self, w: Warp, c: Compiled, addr: int) -> bool:
        b = self.smem_buffer(addr)
        if b is None or b.elem != "mbarrier":
            self.problems.add("memory", f"{w.cta.name} warp {w.wid}: {c.mnem} uses shared 0x{addr:x} as an mbarrier, "
                                        f"which no mbarrier buffer declares")
            return False
        if addr % 8:
            self.problems.add("memory", f"{w.cta.name} warp {w.wid}: {c.mnem} uses shared 0x{addr:x} as an mbarrier, "
                                        f"which is not 8-byte aligned")
            return False
        return True
