"""Global memory as the simulated launch sees it: the sources (each tensor map and pointer parameter
at its own address range), the global buffers the kernel declares behind them, and, with values,
their bytes; whether an access stays inside what was declared, and whether it comes after the
dependent-launch wait.

Each source lives at `(i + 1) << 40`. A tensor map declared `over` another parameter (split-K's
`c_add` over `c`, a staged epilogue's `c_tail` over `c`) is that parameter's memory, `offset` bytes
in: same addresses, same bytes.

A table of maps (`.tmap NAME table=T slot=K`, the megakernel's): the u64 parameter `T` holds the
table's address, slot K's descriptor is at T + 128 K, and a copy naming a descriptor by its
address (`tmap[desc]`) is resolved here to the slot's map (`slot_at`); an address that is no slot is
refused. A thread fences the tensor-map proxy on a slot's descriptor (`UTMACCTL.IV`) before its first
copy through it (the host wrote the table): `acquired` keeps which warps did, for which maps.

Without values, the 32-bit words of u32/s32 buffers behind pointer parameters (flags, counters, an
instruction queue) are still kept (`shadow`), starting from what the family's expectation says
they hold at launch, when it says.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional

import numpy as np

from warpy.isa.text import BufferDecl, Header
from warpy.layout.tma import TmaBox
from warpy.check.expect import Expectation
from warpy.check.state import Problems, Warp

if TYPE_CHECKING:
    from warpy.check.code import Compiled
    from warpy.check.happens_before import Access

GLOBAL_SPAN = 1 << 40  # each global source (tensor map or pointer parameter) lives at (i + 1) << 40
MAP_STRIDE = 128  # a table of maps: slot k's descriptor at the table's address + 128 k


def _extent(box: TmaBox) -> int:
    """Bytes from a map's origin to one past its last element."""
    return box.elem_bytes * box.dims[0] + sum((d - 1) * st for d, st in zip(box.dims[1:], box.strides))


class GlobalMemory:
    """`params`: each kernel parameter's value (a pointer: its source's address; others 1);
    with values, `gmem` / `gwritten` / `greduced` hold each source's bytes, which of them a simulated
    CTA wrote, and which hold partial sums (a reduce-add, or a write by a CTA that read memory the
    simulated CTAs never wrote); `shadow` the 32-bit words of u32/s32 buffers (flags, counters),
    kept without values too."""

    def __init__(self, h: Header, problems: Problems, values: bool, expect: Optional[Expectation],
                 rng: np.random.Generator) -> None:
        self.problems = problems
        self.values = values
        self.expect = expect
        self.uses_pdl = False  # set once the code is compiled: the kernel has a dependent-launch wait
        self.stores_seen = 0
        self.base: dict[str, int] = {}
        size: dict[str, int] = {}
        self.tmaps: dict[str, TmaBox] = {t.name: t.box for t in h.tmaps}
        i = 0
        for t in h.tmaps:
            i += 1
            self.base[t.name] = i * GLOBAL_SPAN
            box = t.box
            size[t.name] = (box.strides[-1] * box.dims[-1]) if box.rank > 1 else box.dims[0] * box.elem_bytes
            # a map whose outer dimension is not the widest step (a 3-D box of an operand's 64-element
            # columns: the columns 128 bytes apart, the rows a pitch apart) spans up to its last element
            last = (box.dims[0] - 1) * box.elem_bytes + sum((d - 1) * st for d, st in zip(box.dims[1:], box.strides))
            size[t.name] = max(size[t.name], last + box.elem_bytes)
        self.params: dict[str, int] = {}
        for p in h.params:
            if p.type in ("u64", "s64"):
                i += 1
                self.base[p.name] = i * GLOBAL_SPAN
                self.params[p.name] = i * GLOBAL_SPAN
            else:
                self.params[p.name] = 1
        for b in h.buffers:
            if b.space == "global" and b.source in self.base:
                size[b.source] = max(size.get(b.source, 0), b.size)
        self.buffers = [b for b in h.buffers if b.space == "global"]
        self.alias: dict[str, str] = {}
        self.offset: dict[str, int] = {}  # a map over another parameter: its origin's byte offset in it
        for t in h.tmaps:
            if t.over is not None and t.over in self.base:
                self.alias[t.name] = self.alias.get(t.over, t.over)
                self.offset[t.name] = self.offset.get(t.over, 0) + t.offset
                self.base[t.name] = self.base[t.over] + t.offset
        for tn, pn in self.alias.items():
            box = self.tmaps[tn]
            end = self.offset[tn] + _extent(box)
            if pn in size and end > size[pn]:
                problems.add("memory", f"tensor map {tn} spans {_extent(box)} bytes from byte {self.offset[tn]} of "
                                       f"{pn}, past its {size[pn]} declared bytes")
        # tables of maps: table parameter -> slot -> map name
        self.tables: dict[str, dict[int, str]] = {}
        for t in h.tmaps:
            if t.table is not None and t.slot is not None:
                self.tables.setdefault(t.table, {})[t.slot] = t.name
        self.acquired: set[tuple[int, str]] = set()  # (warp, map): the warp fenced the map's descriptor
        # maps a TMA store names (set once the code is compiled; None: a store through a table slot,
        # so any map may be written): a load's global reads matter only where a store may land
        self.stored_maps: Optional[set[str]] = None
        # TMA stores whose writes no `DEPBAR.LE.WRITES` has waited for yet: warp -> (group, record)
        self.bulk_writes: dict[int, list[tuple[int, Access]]] = {}
        self.declared = {b.source for b in self.buffers} | set(self.tmaps)
        self.gmem: dict[str, np.ndarray] = {}
        self.gwritten: dict[str, np.ndarray] = {}
        self.greduced: dict[str, np.ndarray] = {}
        self.shadow: dict[int, int] = {}
        if values:
            self._fill(size, expect, rng)
        elif expect is not None:
            self._fill_words(size, expect, rng)

    def _fill_words(self, size: dict[str, int], expect: Expectation, rng: np.random.Generator) -> None:
        """Without values: the shadow words of u32/s32 buffers behind pointers, from the expectation."""
        for b in self.buffers:
            if b.elem not in ("u32", "s32") or b.source not in self.params or b.source in self.tmaps:
                continue
            init = expect.initial(b.source, None, size[b.source], rng)
            if init is None:
                continue
            words = np.ascontiguousarray(init).view(np.uint32).ravel()
            lo, n = b.base // 4, b.size // 4
            base = self.base[b.source]
            for k in np.nonzero(words[lo:lo + n])[0]:
                self.shadow[base + 4 * (lo + int(k))] = int(words[lo + int(k)])

    def slot_at(self, addr: int) -> tuple[Optional[str], str]:
        """(the map of the table slot whose descriptor is at `addr`, or None, and where it is in words)."""
        for table, slots in self.tables.items():
            base = self.params.get(table)
            if base is None:
                continue
            off = addr - base
            if 0 <= off < GLOBAL_SPAN:
                k, r = divmod(off, MAP_STRIDE)
                if r == 0 and k in slots:
                    return slots[k], f"{table} slot {k}"
                return None, (f"{table}+0x{off:x}, no slot of its table (slots at {table} + 0x{MAP_STRIDE:x} k, "
                              f"k < {max(slots) + 1})")
        return None, f"0x{addr:x}, which is in no table of tensor maps"

    def may_be_written(self, name: str) -> bool:
        """Whether the launch may write the memory behind tensor map `name`: a map over a parameter
        (stores through the pointer reach it), or one a TMA store names."""
        if name in self.alias or self.stored_maps is None:
            return True
        return name in self.stored_maps

    def table_slot(self, name: str) -> Optional[str]:
        """The table a map is a slot of (None: a kernel parameter)."""
        for table, slots in self.tables.items():
            if name in slots.values():
                return table
        return None

    def _fill(self, size: dict[str, int], expect: Optional[Expectation], rng: np.random.Generator) -> None:
        for name, nbytes in size.items():
            tbox = self.tmaps.get(name)
            # what the family says the memory holds at launch (its inputs), else zeros
            init = expect.initial(name, tbox, nbytes, rng) if expect is not None else None
            if init is not None:
                self.gmem[name] = np.ascontiguousarray(init).view(np.uint8).copy()
            elif tbox is not None:
                self.gmem[name] = np.zeros(nbytes // tbox.elem_bytes * tbox.elem_bytes, dtype=np.uint8)
            else:
                self.gmem[name] = np.zeros(max(nbytes, 1 << 16), dtype=np.uint8)
            self.gwritten[name] = np.zeros(self.gmem[name].size, dtype=bool)
        for name in self.base:
            if name not in self.gmem:
                self.gmem[name] = np.zeros(1 << 16, dtype=np.uint8)
                self.gwritten[name] = np.zeros(1 << 16, dtype=bool)
        for tn, pn in self.alias.items():
            o = self.offset.get(tn, 0)
            self.gmem[tn], self.gwritten[tn] = self.gmem[pn][o:], self.gwritten[pn][o:]
        self.greduced = {name: np.zeros(a.size, dtype=bool) for name, a in self.gwritten.items() if name not in self.alias}
        for tn, pn in self.alias.items():
            self.greduced[tn] = self.greduced[pn][self.offset.get(tn, 0):]

    def source(self, addr: int) -> tuple[Optional[str], int]:
        """(source, offset in it) of a global address; (None, addr) outside every source."""
        idx = addr // GLOBAL_SPAN
        for name, base in self.base.items():
            if name in self.alias:
                continue
            if base // GLOBAL_SPAN == idx:
                return name, addr - base
        return None, addr

    def buffer_of(self, src: str, off_lo: int, off_hi: int) -> Optional[BufferDecl]:
        for b in self.buffers:
            if b.source == src and 0 <= off_lo and off_hi <= b.size:
                return b
        return None

    def check(self, w: Warp, c: Compiled, addrs: np.ndarray, nbytes: int) -> Optional[str]:
        """The source `nbytes` at each address fall in, if that stays inside a declared global
        buffer (else reported, and None)."""
        a = np.asarray(addrs, dtype=np.int64).ravel()
        if a.size == 0:
            return None
        lo, hi = int(a.min()), int(a.max()) + nbytes
        src, off = self.source(lo)
        src2, _ = self.source(hi - 1)
        if src is not None and src2 == src and src not in self.declared:
            return src  # a pointer behind which the kernel declares no buffer: its extent is unknown, unchecked
        if src is None or src2 != src or self.buffer_of(src, off, off + hi - lo) is None:
            where = f"{src}+0x{off:x}" if src else f"0x{lo:x}"
            self.problems.add("memory", f"{w.cta.name} warp {w.wid}: {c.mnem} touches global {where}..+0x{hi - lo:x}, "
                                        f"outside every global buffer the kernel declares")
            return None
        return src

    def pdl_check(self, w: Warp, c: Compiled) -> None:
        if self.uses_pdl and not w.acq_done:
            self.problems.add("pdl", f"{w.cta.name} warp {w.wid}: {c.mnem} reaches global memory before the "
                                     f"dependent-launch wait (ACQBULK)")

    def read_word(self, addr: int) -> int:
        """A 32-bit word as the simulated CTAs left it (the bytes with values, else the flag shadow)."""
        src, off = self.source(addr)
        if self.values and src is not None and 0 <= off and off + 4 <= self.gmem[src].size:
            return int(np.frombuffer(self.gmem[src][off:off + 4].tobytes(), dtype=np.uint32)[0])
        return int(self.shadow.get(addr, 0))

    def outside_share(self, addr: int, want: int, ctas: Sequence[int]) -> Optional[int]:
        """What the CTAs other than `ctas` (linear ids) add to the flag word at `addr` by the time a
        waiter's loop may exit on `want`, where the kernel family knows it (`Expectation`'s optional
        `outside_share`); None: unknown."""
        fn = getattr(self.expect, "outside_share", None)
        if fn is None:
            return None
        src, off = self.source(addr)
        if src is None:
            return None
        share = fn(src, off, want, ctas)
        return None if share is None else int(share)

    def write_word(self, addr: int, value: int) -> None:
        """A 32-bit word written from outside the simulated clusters (a flag the rest of the grid raises)."""
        src, off = self.source(addr)
        self.shadow[addr] = value
        if self.values and src is not None and 0 <= off and off + 4 <= self.gmem[src].size:
            self.gmem[src][off:off + 4] = np.frombuffer(np.uint32(value).tobytes(), dtype=np.uint8)
