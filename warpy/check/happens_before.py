"""Happens-before over memory: every access to shared, global or tensor memory is recorded with the
clock of the agent that made it, and checked against the earlier accesses it overlaps. Any two, one
a write, must be ordered (the earlier one's epoch is in the later one's vector clock); a
generic-proxy shared write read through the async proxy needs a proxy fence; a global write read by
another CTA needs a GPU-scope fence. Registers an asynchronous unit still writes (wgmma
accumulators, tcgen05 loads) are checked the same way, by their pending records on the warp.

Memory is tracked as regions: 16 KiB chunks of a space (per CTA for shared and tensor memory), each
byte a bit of an int mask, so two warps writing the two halves of one 4-byte word (16-bit stores of
an odd-width output) touch different places. A region keeps the writes since the last one that
covered each byte, and the reads since. (Tensor memory is indexed by cells, each four "bytes".)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Hashable, Optional

import numpy as np

from warpy.check.state import EXITED, Agent, Cta, Problems, VC, Warp

if TYPE_CHECKING:
    from warpy.check.places import Places

CHUNK_BYTES = 1 << 14  # a region is 16 KiB; masks are ints of 16384 bits, one a byte
CHUNK_SHIFT = 14

Footprint = list[tuple[int, int]]  # (chunk index, bit mask of its bytes)
# an ordered pair `warpy hb` counts: (buffer, earlier op, its warp, later op, its warp, " of another CTA" or "",
# what ordered them, earlier kind, later kind)
HbKey = tuple[str, str, int, str, int, str, str, str, str]


def masks_of(idx: np.ndarray) -> Footprint:
    """(chunk index, bit mask) for each 16 KiB chunk the byte indices touch."""
    idx = np.asarray(idx, dtype=np.int64).ravel()
    if idx.size == 0:
        return []
    chunks = idx >> CHUNK_SHIFT
    c0 = int(chunks.min())
    if int(chunks.max()) == c0:
        return [(c0, _bits(idx & (CHUNK_BYTES - 1)))]
    out = []
    for c in np.unique(chunks):
        out.append((int(c), _bits(idx[chunks == c] & (CHUNK_BYTES - 1))))
    return out


def _bits(idx: np.ndarray) -> int:
    b = np.zeros(CHUNK_BYTES, dtype=bool)
    b[idx] = True
    return int.from_bytes(np.packbits(b, bitorder="little").tobytes(), "little")


def bytes_of(addr: np.ndarray, nbytes: int) -> np.ndarray:
    """The byte indices `nbytes` at each address cover."""
    a = np.asarray(addr, dtype=np.int64).ravel()
    return (a[:, None] + np.arange(max(1, nbytes))[None, :]).ravel()


def word_bytes(words: np.ndarray) -> np.ndarray:
    """The bytes of 4-byte word indices (what callers that count in words, or in tensor-memory
    cells, give)."""
    w = np.asarray(words, dtype=np.int64).ravel()
    return ((w[:, None] << 2) + np.arange(4)[None, :]).ravel()


def byte_mask(addr: int, nbytes: int) -> Footprint:
    """The footprint of `nbytes` at one address (an mbarrier's 8 bytes), without numpy."""
    out: Footprint = []
    while nbytes > 0:
        chunk, off = addr >> CHUNK_SHIFT, addr & (CHUNK_BYTES - 1)
        n = min(nbytes, CHUNK_BYTES - off)
        out.append((chunk, ((1 << n) - 1) << off))
        addr, nbytes = addr + n, nbytes - n
    return out


class Access:
    """One access record: what touched which words of a region, stamped with an epoch."""

    __slots__ = ("mask", "agent", "clock", "kind", "op", "warp", "cta", "proxy", "fenced", "fence_clock", "gpu_fenced")

    def __init__(self, mask: int, agent: Agent, clock: int, kind: str, op: str, warp: int, cta: int,
                 proxy: str = "generic") -> None:
        self.mask = mask
        self.agent = agent
        self.clock = clock
        self.kind = kind  # "r", "w", "red"
        self.op = op
        self.warp = warp
        self.cta = cta
        self.proxy = proxy  # "generic" or "async"
        self.fenced = proxy != "generic"
        self.fence_clock = 0  # the writer's clock at its proxy fence: an async access must be ordered after it
        self.gpu_fenced = False


class Region:
    __slots__ = ("writes", "reads")

    def __init__(self) -> None:
        self.writes: list[Access] = []
        self.reads: list[Access] = []


class HappensBefore:
    """The access records of every region, and what the check found besides problems: with `hb`,
    the ordered pairs (`table`, printed by `warpy hb`); the refills of shared memory an MMA had read
    (the ring wrapped: an early free can race only then); and, per CTA, the latest clock of each
    agent of another CTA that wrote into its shared memory (ordered before its exit at the end)."""

    def __init__(self, places: Places, problems: Problems, hb: bool) -> None:
        self.places = places
        self.problems = problems
        self.hb = hb
        self.regions: dict[tuple[str, int, int], Region] = {}
        self.table: dict[HbKey, int] = {}
        self.refills = 0
        self.remote_into: dict[int, dict[Agent, tuple[int, str]]] = {}
        self._footprints: dict[Hashable, Footprint] = {}
        self.enabled = True  # False: the tile pass, which records and checks no ordering

    def footprint(self, key: Hashable, words: Callable[[], np.ndarray]) -> Footprint:
        """The footprint of the 4-byte words (or tensor-memory cells) `words()`, remembered under
        `key` (a box, a tensor-memory block)."""
        hit = self._footprints.get(key)
        if hit is None:
            hit = self._footprints[key] = masks_of(word_bytes(words()))
        return hit

    def byte_footprint(self, key: Hashable, idx: Callable[[], np.ndarray]) -> Footprint:
        """The footprint of the byte indices `idx()`, remembered under `key`."""
        hit = self._footprints.get(key)
        if hit is None:
            hit = self._footprints[key] = masks_of(idx())
        return hit

    def access(self, space: str, cta: Optional[Cta], words: Optional[np.ndarray], kind: str, vc: VC, agent: Agent,
               clock: int, op: str, w: Warp, proxy: str = "generic", via: Optional[dict[Agent, str]] = None,
               footprint: Optional[Footprint] = None, byte_idx: Optional[np.ndarray] = None) -> None:
        """Record an access (its byte indices `byte_idx`, its 4-byte word indices `words`, or its
        footprint) and check it against the earlier ones it overlaps: any two, one a write, must be
        ordered (the earlier one's epoch is in `vc`)."""
        if not self.enabled:
            return
        if footprint is not None:
            fp = footprint
        elif byte_idx is not None:
            fp = masks_of(byte_idx)
        else:
            fp = masks_of(word_bytes(np.asarray(words)))
        cidx = cta.index if cta is not None else -1
        if cta is not None and cta is not w.cta and kind != "r":
            into = self.remote_into.setdefault(cidx, {})
            seen = into.get(agent)
            if seen is None or seen[0] < clock:
                into[agent] = (clock, f"{op}, {w.cta.name} warp {w.wid}")
        via = via if via is not None else w.via
        for chunk, mask in fp:
            key = (space, cidx, chunk)
            reg = self.regions.get(key)
            if reg is None:
                reg = self.regions[key] = Region()
            for a in reg.writes:
                if a.mask & mask and not (kind == "red" and a.kind == "red"):
                    self._ordered(a, vc, agent, kind, op, w, space, cta, chunk, mask, via, proxy)
            if kind == "r" and space == "smem" and agent[0] in ("wg", "tc"):
                written = 0  # (the union of the writes only where it is asked: a 16384-bit or per record)
                for a in reg.writes:
                    written |= a.mask
                if mask & ~written:
                    self._unwritten(op, w, cta, chunk, mask & ~written)
            if kind != "r":
                for a in reg.reads:
                    if a.mask & mask:
                        self._ordered(a, vc, agent, kind, op, w, space, cta, chunk, mask, via, proxy)
            rec = Access(mask, agent, clock, kind, op, w.wid, w.cta.index, proxy)
            if kind == "r":
                for a in reg.reads:
                    if a.agent == agent and a.clock == clock and a.op == op:
                        a.mask |= mask
                        break
                    if a.agent == agent and a.mask & ~mask == 0 and a.clock <= clock:
                        a.mask, a.clock, a.op, a.warp = mask, clock, op, w.wid
                        break
                else:
                    reg.reads.append(rec)
            elif kind == "red":
                for a in reg.writes:  # one atomic record per agent and place: the latest
                    if a.kind == "red" and a.agent == agent and a.mask == mask:
                        a.clock, a.op, a.warp, a.cta, a.proxy = clock, op, w.wid, w.cta.index, proxy
                        break
                else:
                    reg.writes.append(rec)
            else:
                inv = ~mask
                reg.writes = [a for a in reg.writes if a.mask & inv]
                if proxy == "async" and any(a.agent[0] in ("wg", "tc") for a in reg.reads):
                    self.refills += 1
                reg.reads = [a for a in reg.reads if a.mask & inv]
                last = reg.writes[-1] if reg.writes else None
                if last is not None and last.agent == agent and last.clock == clock and last.op == op and last.kind == kind \
                        and last.proxy == proxy and not last.fenced and not last.gpu_fenced:
                    # the same agent's next write at the same epoch, no fence since: the record it would
                    # add is this one's twin (checked above against everything it overlaps), so one
                    # record holds both (a warp's epilogue stores to one region, thousands of them)
                    last.mask |= mask
                    continue
                reg.writes.append(rec)
                if proxy == "generic" and space == "smem":
                    w.unfenced.append(rec)
                    if op.startswith("SYNCS.EXCH"):
                        w.unfenced_init.append(rec)
                if space == "global" and kind != "r":
                    w.gunfenced.append(rec)

    def _unwritten(self, op: str, w: Warp, cta: Optional[Cta], chunk: int, mask: int) -> None:
        """The tensor core reads an operand from shared memory nothing has written: a tile that was
        never loaded or stored there (a box narrower than the descriptor's tile, a stage never filled)."""
        place = self.places.name("smem", cta, _chunk_addr(chunk, mask))
        self.problems.add("memory", f"{place}: {op}, warp {w.wid} reads it through the async proxy, and nothing has "
                                    f"written it (an operand tile never loaded or stored there)")

    def _ordered(self, a: Access, vc: VC, agent: Agent, kind: str, op: str, w: Warp, space: str, cta: Optional[Cta],
                 chunk: int, mask: int, via: dict[Agent, str], proxy: str) -> None:
        # one warp, or one in-order queue (wgmma groups, a tensor-core queue): program order; two copies
        # completing on one barrier are two transfers, ordered only through the barrier's phases
        same = a.agent == agent and agent[0] in ("w", "wg", "tc", "t")
        ok = same or vc.get(a.agent, 0) >= a.clock
        proxy_bad = ok and a.kind != "r" and a.proxy == "generic" and proxy == "async" and space == "smem" \
            and (not a.fenced or not (same or vc.get(a.agent, 0) >= a.fence_clock))
        gpu_bad = ok and space == "global" and a.kind != "r" and a.cta != w.cta.index and not a.gpu_fenced
        if ok and not (proxy_bad or gpu_bad or self.hb):
            return
        addr = _chunk_addr(chunk, a.mask & mask)
        place = self.places.name(space, cta, addr)
        if proxy_bad:
            self.problems.add("order", f"{place}: {op}, warp {w.wid} {_verb(kind, op)} it through the async proxy and "
                                       f"{a.op}, warp {a.warp} {_verb(a.kind, a.op)} it through the generic proxy, and no proxy "
                                       f"fence orders the two")
            return
        if gpu_bad:
            self.problems.add("order", f"{place}: {op}, warp {w.wid} of CTA {w.cta.index} {_verb(kind, op)} it and {a.op}, "
                                       f"warp {a.warp} of another CTA {_verb(a.kind, a.op)} it, with no GPU-scope fence "
                                       f"after the write")
            return
        if not ok:
            self.problems.add("order", f"{place}: {a.op}, warp {a.warp} {_verb(a.kind, a.op)} it and {op}, warp {w.wid} "
                                       f"{_verb(kind, op)} it, and nothing orders the two")
            return
        if self.hb:
            how = "program order" if same else via.get(a.agent, "")
            other = "" if a.cta == w.cta.index else " of another CTA"
            key: HbKey = (place.split("[")[0], a.op, a.warp, op, w.wid, other, how, a.kind, kind)
            self.table[key] = self.table.get(key, 0) + 1

    def registers(self, w: Warp, regids: list[tuple[str, int]], mnem: str) -> None:
        """An instruction touching registers an HGMMA or LDTM still writes: nothing orders the two
        until the wgmma group is retired or the load waited for."""
        for base, idx in regids:
            for pb, lo, hi, grp, op in w.pending:
                if pb == base and lo <= idx < hi and (grp < 0 or grp > w.wg_retired):
                    why = "no tcgen05.wait::ld after the load" if grp < 0 else "the wgmma group has not been waited for"
                    self.problems.add("order", f"{_regname(base, lo)}: {op}, warp {w.wid} writes it and {mnem}, warp {w.wid} "
                                               f"touches it, and nothing orders the two ({why})")
                    return

    def exits(self, ctas: list[Cta]) -> None:
        """A CTA's shared memory is gone once its warps have exited: whatever another CTA did to it (a
        remote arrival, a multicast landing) must be ordered before one of those exits, and so must
        what its own asynchronous units still do to it (a TMA store reading a staged tile, a copy
        landing, the tensor core reading an operand or arriving on a barrier)."""
        for cta in ctas:
            if not all(x.state == EXITED for x in cta.warps):
                continue  # a hang, reported as such
            for agent, (clock, who) in self.remote_into.get(cta.index, {}).items():
                if any(x.exit_vc is not None and x.exit_vc.get(agent, 0) >= clock for x in cta.warps):
                    continue
                self.problems.add("order", f"{cta.name}: {who} reaches its shared memory, and nothing orders "
                                           f"that before {cta.name} exits (no wait of its warps sees it)")
            seen: set[Agent] = set()
            for (space, cidx, chunk), reg in self.regions.items():
                if space != "smem" or cidx != cta.index:
                    continue
                for a in reg.writes + reg.reads:
                    if a.agent[0] == "w" or a.agent in seen or a.cta != cta.index:
                        continue
                    if any(x.exit_vc is not None and x.exit_vc.get(a.agent, 0) >= a.clock for x in cta.warps):
                        continue
                    seen.add(a.agent)
                    place = self.places.name(space, cta, _chunk_addr(chunk, a.mask))
                    self.problems.add("order", f"{cta.name}: {a.op}, warp {a.warp} {_verb(a.kind, a.op)} {place} "
                                               f"asynchronously, and nothing orders that before {cta.name} exits (no wait "
                                               f"of its warps sees it done: its shared memory may be gone)")


def _chunk_addr(chunk: int, mask: int) -> int:
    low = (mask & -mask).bit_length() - 1
    return chunk * CHUNK_BYTES + max(low, 0)


def _verb(kind: str, op: str = "") -> str:
    if kind == "red":
        if "PHASECHK" in op:
            return "waits on"
        if op.startswith(("SYNCS.ARRIVE", "UTCBAR")):
            return "arrives on"
        if op.startswith(("UTMALDG", "UBLKCP", "UGETNEXTWORKID")):
            return "completes bytes on"
        return "adds to"
    return {"r": "reads", "w": "writes"}[kind]


def _regname(base: str, lo: int) -> str:
    return f"{base}{lo}" if base in ("R", "UR") else base
