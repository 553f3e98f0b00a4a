"""The state the host checker keeps: vector clocks, memory regions with their access records,
mbarriers, and the problems found (kept as counts of distinct messages).

Vector clocks are dicts `agent -> clock`. Agents: each warp (`("w", cta, warp)`), each warp's
wgmma queue (`("wg", cta, warp)`, clock = group number), each CTA's tensor-core queue
(`("tc", cta)`, clock = MMAs issued), each warp's bulk-store groups (`("bulk", cta, warp)`), and
each mbarrier (`("bar", cta, addr)`, clock = phases completed): a copy-engine transfer's writes
are stamped with the barrier phase they complete, so whoever has seen that phase complete is
ordered after them.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

Agent = tuple[Any, ...]
VC = dict[Agent, int]  # agent -> clock

CHUNK_WORDS = 4096  # a region is 16 KiB of bytes (4096 4-byte words); masks are ints of 4096 bits


def join(dst: VC, src: VC, via: Optional[dict[Agent, str]] = None, how: str = "") -> None:
    for k, v in src.items():
        if dst.get(k, 0) < v:
            dst[k] = v
            if via is not None:
                via[k] = how


def masks_of(words: np.ndarray) -> list[tuple[int, int]]:
    """(chunk index, bit mask) for each 16 KiB chunk the word indices touch."""
    words = np.asarray(words, dtype=np.int64).ravel()
    if words.size == 0:
        return []
    chunks = words >> 12
    c0 = int(chunks.min())
    if int(chunks.max()) == c0:
        return [(c0, _bits(words & 4095))]
    out = []
    for c in np.unique(chunks):
        out.append((int(c), _bits(words[chunks == c] & 4095)))
    return out


def _bits(idx: np.ndarray) -> int:
    b = np.zeros(CHUNK_WORDS, dtype=bool)
    b[idx] = True
    return int.from_bytes(np.packbits(b, bitorder="little").tobytes(), "little")


class Access:
    """One access record: what touched which words of a region, stamped with an epoch."""

    __slots__ = ("mask", "agent", "clock", "kind", "op", "warp", "cta", "proxy", "fenced", "gpu_fenced")

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
        self.gpu_fenced = False


class Region:
    __slots__ = ("writes", "reads")

    def __init__(self) -> None:
        self.writes: list[Access] = []
        self.reads: list[Access] = []


class MBar:
    """An mbarrier: expected arrivals, pending arrivals and transaction bytes of the current phase,
    and the number of phases completed (`phase`; its parity is the current phase's)."""

    __slots__ = ("cta", "addr", "name", "count", "pending", "tx", "phase", "acc_vc", "release_vc", "waiters",
                 "inited", "agent", "arrived_any", "cta_obj")

    def __init__(self, cta: int, addr: int, name: str) -> None:
        self.cta = cta
        self.addr = addr
        self.name = name
        self.count = 0
        self.pending = 0
        self.tx = 0
        self.phase = 0
        self.acc_vc: VC = {}
        self.release_vc: VC = {}
        self.waiters: list[Any] = []
        self.cta_obj: Any = None
        self.inited = False
        self.agent = ("bar", cta, addr)
        self.arrived_any = False


class Problems:
    """Distinct messages by kind, with how often each was seen."""

    KINDS = ("wrong", "coloured", "named", "protocol", "memory", "order", "pdl", "data", "values")

    def __init__(self) -> None:
        self.msgs: dict[str, dict[str, int]] = {k: {} for k in self.KINDS}

    def add(self, kind: str, msg: str) -> None:
        d = self.msgs[kind]
        d[msg] = d.get(msg, 0) + 1

    def count(self, kind: str) -> int:
        return len(self.msgs[kind])

    def total(self) -> int:
        return sum(len(d) for d in self.msgs.values())
