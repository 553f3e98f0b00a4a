"""The copy engine: tensor-map loads (multicast, 2-CTA), stores and reduce-add stores, bulk copies,
and bulk-group commit/wait.

A load lands its box in each CTA it names and completes its bytes on the mbarrier there; its write
is stamped with that barrier's phase, so a warp is ordered after it exactly when it has seen the
phase complete. Stores read shared memory and write global memory as the warp's open bulk group. A
bulk copy to a CTA of the cluster (`UBLKCP.S.S`) reads this CTA's shared memory as part of the
transfer the destination barrier's phase completes (ordered for whoever has seen that phase).
A box wholly outside its tensor is memory no buffer declares (a box partly outside is how ragged
tiles are loaded: the engine fills with zeros).

A load also reads global memory: the box's elements, as a read stamped with the barrier phase it
completes, so a store into them by another CTA must be ordered before the load (through a GPU-scope
flag the store's warp released after waiting for its writes) and a later store after everyone who
waited on that phase. A store's global writes are released only once its warp has waited for them
(`DEPBAR.LE.WRITES`): until then a GPU-scope fence does not cover them.

A map may be a slot of a table in global memory, named by its descriptor's address in a register
pair (`tmap[desc]`): the address must be a slot's (`GlobalMemory.slot_at`), and the warp must have
fenced the tensor-map proxy on that descriptor (`UTMACCTL.IV`) before its first copy through it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np

from warpy.target import dtype

from warpy.isa.values import first
from warpy.check.happens_before import Footprint
from warpy.check.registers import imm, pair64
from warpy.check.state import Agent, Cta, Lanes, VC, Warp
from warpy.isa.operands import UR, Mem, Operand, TmapRef, URVec, elem_name
from warpy.layout.tma import TmaBox
from warpy.isa.families import tma as isa
from warpy.check.semantics import semantics

if TYPE_CHECKING:
    from warpy.check.code import Compiled
    from warpy.check.machine import Machine


def _s32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >> 31 else x


def _args(w: Warp, op: Operand, n: int) -> list[int]:
    assert isinstance(op, Mem) and isinstance(op.base, (URVec, UR))  # a parsed coloured text: its first register
    base = op.base.name
    return [int(first(w.regs.get(elem_name(base, i), 0))) for i in range(n)]


def _rank(c: Compiled) -> int:
    for mod in c.instr.mods:
        if mod.endswith("D") and mod[:-1].isdigit():
            return int(mod[:-1])
    return 1


def _mem_base(op: Operand) -> str:
    """The register a memory operand's address starts at (a pair: its first register)."""
    if not (isinstance(op, Mem) and op.base is not None):
        raise TypeError(f"{op} is not a register address")
    return op.base.name


def outside(box: TmaBox, coords: list[int]) -> bool:
    for d in range(box.rank):
        if coords[d] >= box.dims[d] or coords[d] + box.box[d] <= 0:
            return True
    return False


def box_offsets(box: TmaBox, coords: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(byte offsets in the tensor of the box's in-bounds elements, their index in the packed box)."""
    eb = box.elem_bytes
    idx = [np.arange(box.box[d]) + coords[d] for d in range(box.rank)]
    ok = [(i >= 0) & (i < box.dims[d]) for d, i in enumerate(idx)]
    grids = np.meshgrid(*[i for i in reversed(idx)], indexing="ij")
    oks = np.meshgrid(*[o for o in reversed(ok)], indexing="ij")
    inb = np.ones(grids[0].shape, dtype=bool)
    for o in oks:
        inb &= o
    off = np.zeros(grids[0].shape, dtype=np.int64)
    r = box.rank
    for k, g in enumerate(grids):
        d = r - 1 - k
        off += g.astype(np.int64) * (eb if d == 0 else box.strides[d - 1])
    packed = np.arange(inb.size).reshape(inb.shape)
    return off[inb], packed[inb]


def _swz(n: int, swizzle: int) -> np.ndarray:
    o = np.arange(n)
    bits = {0: 0, 32: 1, 64: 2, 128: 3}[swizzle]
    return o ^ ((o >> 3) & (((1 << bits) - 1) << 4)) if bits else o


def box_image(m: Machine, name: str, box: TmaBox, coords: list[int]) -> np.ndarray:
    """The bytes the box lands as in shared memory (zero fill, then the tensor map's swizzle)."""
    eb = box.elem_bytes
    nel = int(np.prod(box.box))
    packed = np.zeros(nel * eb, dtype=np.uint8)
    off, pidx = box_offsets(box, coords)
    mem = m.global_memory.gmem[name]
    src = (off[:, None] + np.arange(eb)[None, :]).ravel()
    dst = (pidx[:, None] * eb + np.arange(eb)[None, :]).ravel()
    packed[dst] = mem[src]
    out = np.empty_like(packed)
    out[_swz(packed.size, box.swizzle)] = packed
    return out


def _fp(m: Machine, lo: int, nbytes: int) -> Footprint:
    return m.order.footprint(("bytes", lo, nbytes), lambda: np.arange(lo >> 2, (lo + nbytes + 3) >> 2))


def smem_aligned(m: Machine, w: Warp, c: Compiled, addr: int, swizzle: int, what: str) -> None:
    """A copy's shared-memory address: 128-byte aligned for a tensor map (16 for a bulk copy), and
    for a swizzled box aligned to the swizzle's repeat (8 rows of the swizzle span: the engine
    swizzles by address bits, and an MMA descriptor reads the pattern from an aligned start)."""
    need = 16 if c.sem == "bulk-copy" else max(128, 8 * swizzle)
    if addr % need:
        m.problems.add("memory", f"{w.cta.name} warp {w.wid}: {c.mnem} {what} shared 0x{addr:x}, which is not "
                                 f"{need}-byte aligned" + (f" (a {swizzle}-byte swizzle repeats every {8 * swizzle} "
                                                           f"bytes)" if swizzle else ""))


def inner_start(m: Machine, w: Warp, c: Compiled, name: str, box: TmaBox, coords: list[int]) -> None:
    """A tensor copy starts its innermost dimension on a 16-byte boundary: on the H200 an unswizzled
    load from an element off one raises an illegal instruction, inside the tensor or across its end
    (the probes `tma_start_unaligned`, `tma_start_unaligned_end`; `tma_start_aligned` at 16 bytes and
    `tma_start_ragged_end`, a row end off 16 bytes, run). Stores are held to the same rule."""
    if coords and coords[0] * box.elem_bytes % 16:
        m.problems.add("memory", f"{w.cta.name} warp {w.wid}: {c.mnem} copies a box of {name} starting at element "
                                 f"{coords[0]} of its innermost dimension ({coords[0] * box.elem_bytes} bytes, not a "
                                 f"multiple of 16): the engine raises an illegal instruction")


def land(m: Machine, w: Warp, c: Compiled, dest: Optional[Cta], bar_cta: Optional[Cta], dst: int, bar_addr: int,
         nbytes: int, issue_vc: VC, image: Optional[np.ndarray], prov: Optional[tuple[str, list[int]]] = None
         ) -> Optional[tuple[Agent, int]]:
    """`nbytes` the copy engine (or cluster launch control) writes at `dst` in `dest`, completing
    them on the barrier at `bar_addr` in `bar_cta`; `prov`: the tensor map and coordinates they came from.
    Returns the barrier phase the bytes complete (its agent and clock; None where the copy is refused)."""
    if bar_cta is None or dest is None:
        m.problems.add("protocol", f"{w.cta.name} warp {w.wid}: {c.mnem} names a CTA the cluster has not")
        return None
    if not m.places.check_barrier_addr(w, c, bar_addr):
        return None
    mb = m.mbarriers
    bar = mb.at(bar_cta, bar_addr)
    done = (bar.agent, bar.phase + 1)
    if prov is not None:
        smem_aligned(m, w, c, dst, m.global_memory.tmaps[prov[0]].swizzle, "lands its box at")
        stale = [d for d, (_, _, n) in dest.landed.items() if d != dst and d < dst + nbytes and dst < d + n]
        for d in stale:  # boxes this one overwrites (the entries stay disjoint: one box holds each byte)
            del dest.landed[d]
        dest.landed[dst] = (prov[0], prov[1], nbytes)
    mb.bar_access(bar, w, "red", issue_vc, bar.agent, bar.phase + 1, c.mnem, "async")
    if prov is not None and prov[0] in m.global_memory.tmaps and m.global_memory.may_be_written(prov[0]) \
            and not outside(m.global_memory.tmaps[prov[0]], prov[1]):
        _global_read(m, w, c, prov[0], m.global_memory.tmaps[prov[0]], prov[1], issue_vc, bar.agent, bar.phase + 1)
    m.prov.landed(dest, dst, dst + nbytes)
    if m.places.check_smem_range(w, c, dst, dst + nbytes):
        m.order.access("smem", dest, None, "w", issue_vc, bar.agent, bar.phase + 1, c.mnem, w, proxy="async",
                       footprint=_fp(m, dst, nbytes))
        if image is not None and dest.smem is not None:
            dest.smem[dst:dst + nbytes] = image
    mb.complete_tx(bar, nbytes, issue_vc)
    return done


def _tmap(m: Machine, w: Warp, c: Compiled, k: int = 1) -> Optional[str]:
    """The tensor map a copy names (operand k): a `.tmap` by name, or the table slot whose descriptor
    the register pair holds (None, reported, for an address that is no slot, or a slot this warp
    has not fenced)."""
    op = c.instr.ops[k]
    if not isinstance(op, TmapRef):
        raise TypeError(f"{op} is not a tensor map")
    gm = m.global_memory
    if op.reg is None:
        name: Optional[str] = op.name
        where = op.name
    else:
        name, where = gm.slot_at(pair64(w, op.reg.name))
        if name is None:
            m.problems.add("protocol", f"{w.cta.name} warp {w.wid}: {c.mnem} takes its tensor map from {where}")
            return None
    assert name is not None
    table = gm.table_slot(name)
    if table is not None and (w.gid, name) not in gm.acquired and "IV" not in c.instr.mods:
        m.problems.add("protocol", f"{w.cta.name} warp {w.wid}: {c.mnem} uses tensor map {name} ({where}) from the "
                                   f"table {table} the host wrote, without fencing the tensor-map proxy on it first "
                                   f"(UTMACCTL.IV: fence.proxy.tensormap::generic.acquire)")
    return name


def _global_read(m: Machine, w: Warp, c: Compiled, name: str, box: TmaBox, coords: list[int], issue_vc: VC,
                 agent: Agent, clock: int) -> None:
    """The global elements a load's box reads (those inside the tensor), as an async read by `agent`
    at `clock` (the barrier phase the copy completes)."""
    gm = m.global_memory
    base = gm.base[name]
    key = ("gread", base, box, tuple(coords))

    def words() -> np.ndarray:
        off, _ = box_offsets(box, coords)
        return np.unique((base + off) >> 2)

    fp = m.order.footprint(key, words)
    if fp:
        m.order.access("global", None, None, "r", issue_vc, agent, clock, c.mnem, w, proxy="async", footprint=fp)


@semantics(isa.UTMALDG)
def _tma_load(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    n = _rank(c)
    name = _tmap(m, w, c)
    if name is None:
        return
    box = m.global_memory.tmaps[name]
    a = _args(w, c.instr.ops[0], n + 2)
    dst, bar = a[0], a[1]
    coords = [_s32(x) for x in a[2:]]
    inner_start(m, w, c, name, box, coords)
    m.global_memory.pdl_check(w, c)
    issue_vc = w.tick()
    image = box_image(m, name, box, coords) if m.values else None
    nbytes = box.box_bytes
    two = "2CTA" in c.instr.mods
    if "MULTICAST" in c.instr.mods:
        mask = first(c.get[2](w))
        for dest in w.cta.cluster.ctas:
            if not mask >> dest.rank & 1:
                continue
            bar_cta = w.cta.peer(dest.rank & ~1) if two else dest
            land(m, w, c, dest, bar_cta, dst & 0xFFFFFF, bar & 0xFFFFFF, nbytes, issue_vc, image, (name, coords))
        return
    if two:
        bar_cta, bl = w.cta.resolve(bar)
        land(m, w, c, w.cta, bar_cta, dst & 0xFFFFFF, bl, nbytes, issue_vc, image, (name, coords))
        return
    land(m, w, c, w.cta, w.cta, dst, bar, nbytes, issue_vc, image, (name, coords))


def _bulk_agent(w: Warp) -> Agent:
    return ("bulk", w.cta.index, w.wid)


def ragged_row_end(m: Machine, w: Warp, c: Compiled, name: str, box: TmaBox, coords: list[int]) -> None:
    """A store (or reduce-add) clips its box at the tensor's edges, but along the innermost dimension
    only to 16 bytes (`warpy.layout.tma.store_clips_exactly`): where a row's extent is not a whole
    number of 16 bytes, a box reaching its end writes the row's last 16 bytes whole, past the end
    into memory the map does not hold (the gap of a slice of a wider matrix, the next tensor).
    Reported, not simulated."""
    row = box.dims[0] * box.elem_bytes
    if box.stores_exactly or coords[0] + box.box[0] <= box.dims[0]:
        return
    past = 16 - row % 16
    m.problems.add("memory", f"{w.cta.name} warp {w.wid}: {c.mnem} stores a box of {name} at "
                             f"({', '.join(map(str, coords))}) across the end of its rows of {box.dims[0]} {box.dtype} "
                             f"({row} bytes, not a whole number of 16): the engine writes a row's last 16 bytes "
                             f"whole, {past} bytes past its end, memory the tensor map does not hold")


@semantics(isa.UTMASTG, isa.UTMAREDG)
def _tma_store(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    n = _rank(c)
    name = _tmap(m, w, c)
    if name is None:
        return
    gm = m.global_memory
    box = gm.tmaps[name]
    a = _args(w, c.instr.ops[0], n + 1)
    src = a[0]
    coords = [_s32(x) for x in a[1:]]
    inner_start(m, w, c, name, box, coords)
    gm.pdl_check(w, c)
    agent, clock = _bulk_agent(w), w.bulk_committed + 1
    w.bulk_open = True
    nbytes = box.box_bytes
    smem_aligned(m, w, c, src, box.swizzle, "stores a box from")
    if m.places.check_smem_range(w, c, src, src + nbytes):
        m.order.access("smem", w.cta, None, "r", w.vc, agent, clock, c.mnem, w, proxy="async", footprint=_fp(m, src, nbytes))
    m.prov.tma_store(w, c, name, box, coords, src, nbytes, c.sem == "tma-reduce")
    m.prov.cover.tma(name, box, coords, c.sem == "tma-reduce")
    if outside(box, coords):
        return  # the engine clips the box: nothing is written
    ragged_row_end(m, w, c, name, box, coords)
    off, pidx = box_offsets(box, coords)
    base = gm.base[name]
    words = np.unique((base + off) >> 2)
    kind = "red" if c.sem == "tma-reduce" else "w"
    before = len(w.gunfenced)
    m.order.access("global", None, words, kind, w.vc, agent, clock, c.mnem, w, proxy="async")
    new = w.gunfenced[before:]  # one record a 16 KiB chunk the box's words touch
    if new:  # released only after a wait for the group's writes (DEPBAR.LE.WRITES)
        del w.gunfenced[before:]
        gm.bulk_writes.setdefault(w.gid, []).extend((clock, rec) for rec in new)
    gm.stores_seen += 1
    smem = w.cta.smem
    if m.values and smem is not None:
        eb = box.elem_bytes
        raw = smem[src:src + nbytes]
        packed = raw[_swz(nbytes, box.swizzle)]
        mem, wr = gm.gmem[name], gm.gwritten[name]
        srcb = (pidx[:, None] * eb + np.arange(eb)[None, :]).ravel()
        dstb = (off[:, None] + np.arange(eb)[None, :]).ravel()
        if kind == "w":
            mem[dstb] = packed[srcb]
        else:
            npname = dtype(box.dtype).numpy
            dt = np.dtype(npname or "uint32")
            if box.dtype == "bf16":
                cur = (mem[dstb].view(np.uint16).astype(np.uint32) << 16).view(np.float32)
                add = (packed[srcb].view(np.uint16).astype(np.uint32) << 16).view(np.float32)
                mem[dstb] = ((cur + add).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
            else:
                cur = mem[dstb].view(dt)
                add = packed[srcb].view(dt)
                mem[dstb] = (cur + add).astype(dt).view(np.uint8)
        wr[dstb] = True
        if kind == "red" or w.cta.foreign:
            gm.greduced[name][dstb] = True


@semantics(isa.UTMAPF)
def _tma_prefetch(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    """A prefetch into L2 writes nothing the program sees; its tensor map is held to a copy's rules
    (a table slot fenced first) and its start to `inner_start`."""
    name = _tmap(m, w, c)
    if name is None:
        return
    n = _rank(c)
    coords = [_s32(x) for x in _args(w, c.instr.ops[0], n)]
    inner_start(m, w, c, name, m.global_memory.tmaps[name], coords)


@semantics(isa.UTMACCTL)
def _tmap_control(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    """.PF: a prefetch (nothing the checker models); .IV: the tensor-map acquire fence on a table
    slot's descriptor, which the warp's later copies through it need."""
    if "IV" not in c.instr.mods:
        return
    name = _tmap(m, w, c, 0)
    if name is not None:
        m.global_memory.acquired.add((w.gid, name))


@semantics(isa.UBLKCP)
def _bulk_copy(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    ops = c.instr.ops
    size = first(c.get[2](w))
    gm = m.global_memory
    to_shared = c.instr.mods[0] == "S"
    from_shared = c.instr.mods[1] == "S"
    if not (to_shared and from_shared):  # (.S.S reaches no global memory)
        gm.pdl_check(w, c)
    if size % 16 or size <= 0:
        m.problems.add("memory", f"{w.cta.name} warp {w.wid}: {c.mnem} copies {size} bytes: a bulk copy moves a positive "
                                 f"multiple of 16 bytes")
    if to_shared and from_shared:
        _bulk_copy_peer(m, w, c, size)
        return
    if to_shared:
        dst, bar = _args(w, ops[0], 2)
        gaddr = pair64(w, _mem_base(ops[1]))
        smem_aligned(m, w, c, dst, 0, "lands at")
        if gaddr % 16:
            m.problems.add("memory", f"{w.cta.name} warp {w.wid}: {c.mnem} reads global 0x{gaddr:x}, which is not "
                                     f"16-byte aligned")
        src = gm.check(w, c, np.array([gaddr]), size)
        issue_vc = w.tick()
        image = None
        if m.values and src is not None:
            o = gaddr - gm.base[src]
            image = gm.gmem[src][o:o + size].copy()
        elif src is not None and src in gm.params:
            # without values: the 32-bit words kept of a u32 buffer (an instruction queue) land as words
            # the machine's shared memory keeps, for the LDS that reads them back
            for k in range(0, size - size % 4, 4):
                w.cta.shadow[dst + k] = gm.shadow.get(gaddr + k, 0)
        land(m, w, c, w.cta, w.cta, dst, bar, size, issue_vc, image)
        return
    # .G.S: shared -> global as the open bulk group
    gaddr = pair64(w, _mem_base(ops[0]))
    saddr = first(c.get[1](w))
    smem_aligned(m, w, c, saddr, 0, "stores from")
    if gaddr % 16:
        m.problems.add("memory", f"{w.cta.name} warp {w.wid}: {c.mnem} writes global 0x{gaddr:x}, which is not "
                                 f"16-byte aligned")
    agent, clock = _bulk_agent(w), w.bulk_committed + 1
    w.bulk_open = True
    if m.places.check_smem_range(w, c, saddr, saddr + size):
        m.order.access("smem", w.cta, None, "r", w.vc, agent, clock, c.mnem, w, proxy="async", footprint=_fp(m, saddr, size))
    dsrc = gm.check(w, c, np.array([gaddr]), size)
    if dsrc is None:
        return
    before = len(w.gunfenced)
    m.order.access("global", None, np.arange(gaddr >> 2, (gaddr + size + 3) >> 2), "w", w.vc, agent, clock, c.mnem, w,
                   proxy="async")
    new = w.gunfenced[before:]
    if new:  # like a TMA store's: released only after a wait for the group's writes (DEPBAR.LE.WRITES)
        del w.gunfenced[before:]
        gm.bulk_writes.setdefault(w.gid, []).extend((clock, rec) for rec in new)
    smem = w.cta.smem
    if m.values and smem is not None and dsrc in gm.gmem:
        o = gaddr - gm.base[dsrc]
        n = max(0, min(size, gm.gmem[dsrc].size - o, smem.size - saddr))
        if o >= 0 and saddr >= 0 and n:
            gm.gmem[dsrc][o:o + n] = smem[saddr:saddr + n]
            gm.gwritten[dsrc][o:o + n] = True
            if w.cta.foreign:
                gm.greduced[dsrc][o:o + n] = True


def _bulk_copy_peer(m: Machine, w: Warp, c: Compiled, size: int) -> None:
    """.S.S: `size` bytes of this CTA's shared memory at src land at dst in a CTA of the cluster,
    completing on bar there (dst, bar: shared::cluster addresses). The engine reads the source through
    the async proxy (the generic writes before it need a proxy fence) as part of the transfer the
    barrier's phase completes: only whoever has seen that phase (the receiver's wait, then e.g. a
    cluster barrier back) is ordered after the read, this CTA too before it rewrites the source or
    exits (`HappensBefore.exits`)."""
    dst, bar = _args(w, c.instr.ops[0], 2)
    src = first(c.get[1](w))
    dest, dl = w.cta.resolve(dst)
    bar_cta, bl = w.cta.resolve(bar)
    smem_aligned(m, w, c, src, 0, "copies from")
    smem_aligned(m, w, c, dl, 0, "lands at")
    issue_vc = w.tick()
    read = m.places.check_smem_range(w, c, src, src + size)
    smem = w.cta.smem
    image = smem[src:src + size].copy() if read and m.values and smem is not None else None
    if read and dest is not None:
        for k in range(0, size - size % 4, 4):  # without values: the words the machine keeps (a CLC answer)
            if src + k in w.cta.shadow:
                dest.shadow[dl + k] = w.cta.shadow[src + k]
            else:
                dest.shadow.pop(dl + k, None)
    done = land(m, w, c, dest, bar_cta, dl, bl, size, issue_vc, image)
    if read and done is not None:
        m.order.access("smem", w.cta, None, "r", issue_vc, done[0], done[1], c.mnem, w, proxy="async",
                       footprint=_fp(m, src, size))


@semantics(isa.UTMACMDFLUSH)
def _commit(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    w.bulk_committed += 1
    w.bulk_open = False


@semantics(isa.DEPBAR)
def _wait(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    n = imm(c.instr.ops[1])
    done = max(w.bulk_retired, w.bulk_committed - n)
    w.bulk_retired = done
    agent = _bulk_agent(w)
    if w.vc.get(agent, 0) < done:
        w.vc[agent] = done
        w.via[agent] = "bulk-group wait"
    pending = m.global_memory.bulk_writes.get(w.gid)
    if pending and "WRITES" in c.instr.mods:  # the groups' writes are done: a GPU-scope fence now covers them
        w.gunfenced.extend(rec for g, rec in pending if g <= done)
        m.global_memory.bulk_writes[w.gid] = [(g, rec) for g, rec in pending if g > done]


def operand_k(m: Machine, cta: Cta, start: int, mn: bool = False) -> Optional[tuple[str, int]]:
    """(tensor map, K byte offset) of the operand tile starting at `start`: the K coordinate of the box
    that landed there plus the offset inside its 128-byte rows (K-major), or plus the box rows (K
    coordinates) before `start` (`mn`: an MN-major tile, the box's inner dimension along M or N)."""
    land_ = cta.landed
    if not land_:
        return None
    for dst, (name, coords, nbytes) in land_.items():
        if dst <= start < dst + nbytes:
            box = m.global_memory.tmaps[name]
            eb = box.elem_bytes
            if mn:
                if box.rank < 2:
                    return None
                # (a 3-D box of 64-element columns: the rows of K repeat in each column)
                return name, (coords[1] + (start - dst) // (box.box[0] * eb) % box.box[1]) * eb
            return name, coords[0] * eb + (start - dst) % 128
    return None


def operands_meet(m: Machine, w: Warp, c: Compiled, cta: Cta, a_start: int, b_start: int, a_mn: bool = False,
                  b_mn: bool = False) -> None:
    """An MMA multiplies A and B at the same K: the boxes its operand tiles came from must agree (an
    MN-major operand's map has K as its dimension 1)."""
    ka, kb = operand_k(m, cta, a_start, a_mn), operand_k(m, cta, b_start, b_mn)
    if ka is None or kb is None:
        return
    ta, tb = m.global_memory.tmaps[ka[0]], m.global_memory.tmaps[kb[0]]
    ea, eb = ta.dims[int(a_mn)] * ta.elem_bytes, tb.dims[int(b_mn)] * tb.elem_bytes
    if ea != eb and (c.pc, "K extent") not in m.prov.reported:
        m.prov.reported.add((c.pc, "K extent"))
        m.problems.add("data", f"{cta.name} warp {w.wid}: {c.mnem} multiplies {ka[0]}, whose rows are {ea} bytes of K, "
                               f"with {kb[0]}, whose rows are {eb} (the tensor maps disagree on K)")
    if ka[1] == kb[1]:
        return
    m.problems.add("data", f"{cta.name} warp {w.wid}: {c.mnem} multiplies {ka[0]} at K byte {ka[1]} with "
                           f"{kb[0]} at K byte {kb[1]} (the boxes the copy engine landed there disagree)")


#: an operand tile's layout, per (tile key, landed region, map): the rows and K bytes of the box the
#: descriptor's addresses read (relative to the box), or why they are not the descriptor's tile
_Layout = tuple[Optional[np.ndarray], Optional[np.ndarray], str]


def _unswizzle(o: np.ndarray, swizzle: int) -> np.ndarray:
    bits = {0: 0, 32: 1, 64: 2, 128: 3}[swizzle]
    return o ^ ((o >> 3) & (((1 << bits) - 1) << 4)) if bits else o


def operand_layout(m: Machine, w: Warp, c: Compiled, cta: Cta, key: tuple[object, ...], addrs: np.ndarray,
                   desc_swizzle: int, what: str, mn: bool = False, eb: int = 2) -> Optional[tuple[str, int, int]]:
    """The operand tile an MMA's descriptor reads (`addrs`: byte addresses [rows, K bytes]) must be laid
    out as the copy engine wrote it: row r, K byte k of the tile is row r0 + r, byte k0 + k of the box
    that landed there (same swizzle, same row pitch); for an MN-major operand (`mn`, elements of `eb`
    bytes) the box is transposed: the tile's element (r, k) is box row k0 + k, inner element r0 + r.
    Reported otherwise (a swizzle, LBO or SBO, or a transpose bit the map does not match); returns
    (map, the tile's first row and K byte in the tensor) when it holds."""
    land_ = cta.landed
    if not land_ or addrs.size == 0 or not m.prov.on:
        return None
    a0 = int(addrs.flat[0])
    hit = None
    # where the tile's first byte landed last time (the landed boxes are disjoint, so while that box is
    # still there it is the one)
    rkey = (cta.index, a0)
    known = m.prov.region_of.get(rkey)
    if known is not None and known in land_:
        name, coords, nbytes = land_[known]
        if known <= a0 < known + nbytes:
            hit = (known, name, coords, nbytes)
    if hit is None:
        for dst, (name, coords, nbytes) in land_.items():
            if dst <= a0 < dst + nbytes:
                hit = (dst, name, coords, nbytes)
                m.prov.region_of[rkey] = dst
                break
    if hit is None:
        return None
    dst, name, coords, nbytes = hit
    box = m.global_memory.tmaps.get(name)
    if box is None or box.rank != 2:
        return None
    ck = ("layout", key, dst, name)
    cached = m.prov.layouts.get(ck)
    if cached is None:
        cached = _relative_mn(box, dst, nbytes, addrs, desc_swizzle, eb) if mn else _relative(box, dst, nbytes, addrs, desc_swizzle)
        m.prov.layouts[ck] = cached
    rows, kb, why = cached
    if rows is None or kb is None:
        if why and (c.pc, what) not in m.prov.reported:
            m.prov.reported.add((c.pc, what))
            m.problems.add("data", f"{cta.name} warp {w.wid}: {c.mnem} reads its {what} operand with {why}; the copy "
                                   f"engine landed it through tensor map {name} ({box.swizzle or 'no'}-byte swizzle, "
                                   f"{box.box[0] * box.elem_bytes}-byte rows)")
        return None
    if mn:
        m.prov.mn.add(name)  # its rows are dimension 0, its K dimension 1 (the provenance's outputs)
        return name, coords[0] + int(rows[0, 0]), coords[1] * box.elem_bytes + int(kb[0, 0])
    return name, coords[1] + int(rows[0, 0]), coords[0] * box.elem_bytes + int(kb[0, 0])


def _relative(box: TmaBox, dst: int, nbytes: int, addrs: np.ndarray, desc_swizzle: int) -> _Layout:
    """(first row, first K byte) of the tile in its box, or (None, None, why not)."""
    o = addrs.astype(np.int64) - dst
    if (o < 0).any() or (o >= nbytes).any():
        return None, None, ""  # the tile spans more than this box (several boxes, or other data): not compared
    inner = box.box[0] * box.elem_bytes
    p = _unswizzle(o, box.swizzle)
    r, k = p // inner, p % inner
    nrows, nk = addrs.shape
    want_r = r[0, 0] + np.arange(nrows)[:, None]
    want_k = k[0, 0] + np.arange(nk)[None, :]
    if np.array_equal(r, np.broadcast_to(want_r, r.shape)) and np.array_equal(k, np.broadcast_to(want_k, k.shape)):
        return r[:1, :1], k[:1, :1], ""
    bad = np.argwhere((r != want_r) | (k != want_k))[0]
    why = (f"a {desc_swizzle or 'no'}-byte swizzle descriptor whose row {int(bad[0])}, K byte {int(bad[1])} is row "
           f"{int(r[tuple(bad)])}, byte {int(k[tuple(bad)])} of the box (not row {int(want_r[int(bad[0]), 0])}, byte "
           f"{int(want_k[0, int(bad[1])])})")
    return None, None, why


def _relative_mn(box: TmaBox, dst: int, nbytes: int, addrs: np.ndarray, desc_swizzle: int, eb: int) -> _Layout:
    """(first M/N element, first K byte) of an MN-major tile in its box (the box's rows are K, its
    inner dimension M or N), or (None, None, why not)."""
    o = addrs.astype(np.int64) - dst
    if (o < 0).any() or (o >= nbytes).any():
        return None, None, ""
    inner = box.box[0] * box.elem_bytes
    p = _unswizzle(o, box.swizzle)
    krow, ib = p // inner, p % inner  # [rows, kbytes]: the box row (K) and inner byte (M/N) of each byte
    nrows, nk = addrs.shape
    r = np.arange(nrows)[:, None]
    kb = np.arange(nk)[None, :]
    want_k = krow[0, 0] + kb // eb
    want_i = ib[0, 0] + r * eb + kb % eb
    if np.array_equal(krow, np.broadcast_to(want_k, krow.shape)) and np.array_equal(ib, np.broadcast_to(want_i, ib.shape)):
        return ib[:1, :1] // eb, krow[:1, :1] * eb, ""
    bad = np.argwhere((krow != want_k) | (ib != want_i))[0]
    why = (f"a {desc_swizzle or 'no'}-byte swizzle MN-major descriptor whose row {int(bad[0])}, K byte {int(bad[1])} is "
           f"box row {int(krow[tuple(bad)])}, inner byte {int(ib[tuple(bad)])} (not box row "
           f"{int(want_k[0, int(bad[1])])}, inner byte {int(want_i[int(bad[0]), int(bad[1])])})")
    return None, None, why
