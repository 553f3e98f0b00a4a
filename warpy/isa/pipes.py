"""mbarriers: their initialisation, waits on them, and pipes.

A pipe is a ring of `depth` stages, each with a full and an empty mbarrier. Its two ends are
distinct types, so that mypy refuses a role using the wrong one: the producer's end can only wait
for a stage to be empty and fill it, the consumer's only wait for it to be full and free it.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Iterator, Optional

from warpy.errors import WarpyError
from warpy.isa.buffers import Barrier, BarrierArray, Tile, TileRing
from warpy.isa.families import alu, control, sync, tcgen05
from warpy.isa.index import Coord, Ring
from warpy.isa.operands import P, R, UP, UR, Mem
from warpy.layout.inttuple import idx2crd

if TYPE_CHECKING:
    from warpy.isa.program import Program


class PipeBarriers(BarrierArray):
    """A pipe's barriers, one buffer: `[0, s]` stage s's full barrier (a phase completes after
    `fills` arrivals), `[1, s]` its empty barrier (after `frees`)."""

    def __init__(self, name: str, depth: int, fills: int, frees: int) -> None:
        super().__init__(name, 0, (2, depth), count=0)
        self.depth = depth
        self.fills = fills
        self.frees = frees

    def count_at(self, crd: tuple[int, ...]) -> int:
        return self.fills if crd[0] == 0 else self.frees


class Pipe:
    """A ring of `depth` stages, each with a full and an empty mbarrier (`bars`). `fills`: arrivals
    that fill a stage; `frees`: arrivals that free one. Declared by `Program.pipe`."""

    def __init__(self, prog: Program, name: str, bars: PipeBarriers) -> None:
        self.prog = prog
        self.name = name
        self.depth = bars.depth
        self.bars = bars
        self.fills = bars.fills
        self.frees = bars.frees

    def producer(self, name: str = "") -> "ProducerEnd":
        return ProducerEnd(self, self.prog.ring(name or f"{self.name}_p", self.depth, parity=1))

    def consumer(self, name: str = "") -> "ConsumerEnd":
        return ConsumerEnd(self, self.prog.ring(name or f"{self.name}_c", self.depth, parity=0))


class _End:
    def __init__(self, pipe: Pipe, ring: Ring) -> None:
        self.pipe = pipe
        self.ring = ring
        self._probe: Optional[P] = None

    def _waited_bar(self) -> Barrier:
        raise NotImplementedError

    @property
    def full(self) -> Barrier:
        return self.pipe.bars.at(0, self.ring)

    @property
    def empty(self) -> Barrier:
        return self.pipe.bars.at(1, self.ring)

    def slot(self, ring_buffer: TileRing, *coords: Coord) -> Tile:
        """The tile of `ring_buffer` at this end's stage (and the given row, k)."""
        rest = tuple(coords) if coords else (0,) * (ring_buffer.rank() - 1)
        return ring_buffer.at(self.ring, *rest)

    @contextlib.contextmanager
    def stage(self, probe: Optional[P] = None, probe_when: Optional[P] = None) -> Iterator[None]:
        """One stage of the ring: derived values at the top, the ring advanced at the end.

        probe: ask a stage ahead: after the advance, test the next stage's barrier into `probe`
        (where `probe_when` holds), and let this end's next wait skip its loop when the probe saw
        the phase complete. `probe` must start false (`alu.pset(probe, False)` before the loop)."""
        prog = self.pipe.prog
        self._probe = probe
        try:
            with prog.ring_iteration(self.ring):
                yield
        finally:
            self._probe = None
        if probe is not None:
            bar = self._waited_bar()
            reg, off = prog.derive.value_here("addr", bar)
            prog.emit(sync.try_wait(probe, Mem(reg, offset=off), self.ring.parity).noted(bar.note("addr", 1))
                      .guarded(probe_when))


class ProducerEnd(_End):
    """The producer's end: it can only wait for a stage to be empty and fill it."""

    def _waited_bar(self) -> Barrier:
        return self.empty

    def wait_empty(self, sleep: Optional[int] = None) -> None:
        wait(self.pipe.prog, self.empty, self.ring.parity, sleep, ready=self._probe)

    def arrive_full(self, leader: P, tx_bytes: int = 0) -> None:
        """One arrival on the stage's full barrier (by the leader lane), expecting tx_bytes."""
        p = self.pipe.prog
        if tx_bytes:
            txr = p.r("tx_bytes")
            p.emit(alu.mov(txr, tx_bytes))
            p.derive.emit_at(self.full, lambda m: sync.arrive_expect_tx(m, txr), guard=leader)
        else:
            p.derive.emit_at(self.full, lambda m: sync.arrive(m), guard=leader)


class ConsumerEnd(_End):
    """The consumer's end: it can only wait for a stage to be full and free it."""

    def _waited_bar(self) -> Barrier:
        return self.full

    def wait_full(self, sleep: Optional[int] = None) -> None:
        wait(self.pipe.prog, self.full, self.ring.parity, sleep, ready=self._probe)

    def free(self, leader: Optional[P] = None) -> None:
        """One arrival on the stage's empty barrier (this CTA's)."""
        self.pipe.prog.derive.emit_at(self.empty, lambda m: sync.arrive(m), guard=leader)

    def free_remote(self, rank: UR, leader: Optional[P] = None) -> None:
        """One arrival on the empty barrier of the CTA of cluster rank `rank` (mapa + remote arrive)."""
        p = self.pipe.prog
        reg = p.ur("remote_bar")
        base, off = p.derive.value_reg("addr", self.empty)
        p.emit(alu.uiadd3(reg, base, off).noted(self.empty.note()), mark="+")
        p.emit(alu.mapa(reg, rank, reg))
        p.emit(sync.arrive_remote(Mem(reg)).guarded(leader))

    def free_commit(self, mask: Optional[UR] = None, two_cta: bool = False, guard: Optional[UP] = None) -> None:
        """Free the stage when the tensor core has finished the MMAs issued so far (UTCBAR)."""
        self.pipe.prog.derive.emit_at(self.empty, lambda m: tcgen05.utcbar(m, mask, two_cta), guard=guard)


def wait(p: Program, bar: Barrier, parity: R, sleep: Optional[int] = None, ready: Optional[P] = None) -> None:
    """Wait until the phase of `parity` (bit 31) of `bar` has completed (a try-wait loop);
    `ready`: a predicate already saying so (a probe), which skips the loop."""
    if not isinstance(bar, Barrier):
        raise WarpyError(f"wait takes a barrier, not {type(bar).__name__} {bar.buffer.name}")
    if not isinstance(parity, R):
        raise WarpyError(f"wait's parity must be a general register, not {parity}")
    waited = p.p("waited")
    reg, off = p.derive.value_reg("addr", bar)
    landed = p.fresh_label("READY") if ready is not None else None
    if ready is not None and landed is not None:
        p.emit(control.bra(landed).guarded(ready))
    top = p.fresh_label("WAIT")
    p.label(top)
    p.emit(sync.try_wait(waited, Mem(reg, offset=off), parity).noted(bar.note("addr", 1)))
    if sleep:
        p.emit(sync.nanosleep(sleep, syncs=True).guarded(~waited), mark="~")
    p.emit(control.bra(top).guarded(~waited), mark="~")
    if landed is not None:
        p.label(landed)


def init_barriers(p: Program, cluster_sync: bool = False) -> None:
    """One lane of warp 0 initialises every mbarrier the program declared, fences the inits, then
    the CTA (or the cluster) synchronises. Call in the prologue, before any role; no barrier or
    pipe may be declared after it."""
    p.barriers_initialised = True
    warp = p.warp_index()
    w0 = p.p("is_warp0")
    done = p.fresh_label("INIT_DONE")
    p.emit(alu.isetp("EQ", w0, warp, 0))
    p.emit(control.bra(done).guarded(~w0))
    leader = p.elect("init_leader")
    p.emit(control.bra(done).guarded(~leader))
    init = p.urvec("mbar_init", 2)
    last = None
    for b in p.buffers:
        if not isinstance(b, BarrierArray):
            continue
        for n in range(b.n):
            crd = idx2crd(n, b.layout.shape)
            crd_t: tuple[int, ...] = tuple(int(x) for x in crd) if isinstance(crd, tuple) else (crd,)  # type: ignore[arg-type]
            cnt = b.count_at(crd_t)
            if cnt != last:
                t = (1 << 20) - cnt
                p.emit(alu.umov(init[0], (t << 1) & 0xFFFFFFFF))
                p.emit(alu.umov(init[1], (t << 11) & 0xFFFFFFFF))
                last = cnt
            p.derive.emit_at(b.at(*crd_t), lambda m: sync.mbar_init(m, init))
    p.emit(sync.fence_mbarrier_init())
    p.label(done)
    if cluster_sync:
        p.emit(sync.cluster_arrive())
        p.emit(sync.cluster_wait())
    else:
        p.emit(sync.bar_sync(0))
