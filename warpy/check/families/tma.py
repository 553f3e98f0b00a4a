"""The copy engine: tensor-map loads (multicast, 2-CTA), stores and reduce-add stores, bulk copies,
and bulk-group commit/wait.

A load lands its box in each CTA it names and completes its bytes on the mbarrier there; its write
is stamped with that barrier's phase, so a warp is ordered after it exactly when it has seen the
phase complete. Stores read shared memory and write global memory as the warp's open bulk group.
A box wholly outside its tensor is memory no buffer declares (a box partly outside is how ragged
tiles are loaded: the engine fills with zeros)."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from warpy.target import dtype

from warpy.isa.values import first
from warpy.check.state import masks_of
from warpy.isa.operands import UR, Mem, URVec, elem_name
from warpy.layout.tma import TmaBox
from warpy.isa.families import tma as isa
from warpy.check.semantics import semantics


def _s32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >> 31 else x


def _args(w: Any, op: Any, n: int) -> list[int]:
    assert isinstance(op, Mem) and isinstance(op.base, (URVec, UR))  # a parsed coloured text: its first register
    return [int(first(w.regs.get(elem_name(op.base.name, i), 0))) for i in range(n)]


def _rank(c: Any) -> int:
    for mod in c.instr.mods:
        if mod.endswith("D") and mod[:-1].isdigit():
            return int(mod[:-1])
    return 1


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


def box_image(m: Any, name: str, box: TmaBox, coords: list[int]) -> np.ndarray:
    """The bytes the box lands as in shared memory (zero fill, then the tensor map's swizzle)."""
    eb = box.elem_bytes
    nel = int(np.prod(box.box))
    packed = np.zeros(nel * eb, dtype=np.uint8)
    off, pidx = box_offsets(box, coords)
    mem = m.gmem[name]
    src = (off[:, None] + np.arange(eb)[None, :]).ravel()
    dst = (pidx[:, None] * eb + np.arange(eb)[None, :]).ravel()
    packed[dst] = mem[src]
    out = np.empty_like(packed)
    out[_swz(packed.size, box.swizzle)] = packed
    return out


def _fp(m: Any, lo: int, nbytes: int) -> list[tuple[int, int]]:
    key = ("fp", lo, nbytes)
    hit = m.ref_cache.get(key)
    if hit is None:
        hit = masks_of(np.arange(lo >> 2, (lo + nbytes + 3) >> 2))
        m.ref_cache[key] = hit
    return hit  # type: ignore[no-any-return]


def _land(m: Any, w: Any, c: Any, dest: Any, bar_cta: Any, dst: int, bar_addr: int, nbytes: int, issue_vc: dict[Any, int],
          image: Optional[np.ndarray], prov: Optional[tuple[Any, ...]] = None) -> None:
    if bar_cta is None or dest is None:
        m.problems.add("protocol", f"{m.cta_name(w.cta)} warp {w.wid}: {c.mnem} names a CTA the cluster has not")
        return
    if not m.check_barrier_addr(w, c, bar_addr):
        return
    bar = m.mbar(bar_cta, bar_addr)
    if prov is not None:
        m.landed.setdefault(dest.index, {})[dst] = (prov[0], prov[1], nbytes)
    m.bar_access(bar, w, "red", issue_vc, bar.agent, bar.phase + 1, c.mnem, "async")
    if m.check_smem_range(w, c, dst, dst + nbytes):
        m.access("smem", dest, None, "w", issue_vc, bar.agent, bar.phase + 1, c.mnem, w, proxy="async",
                 footprint=_fp(m, dst, nbytes))
        if image is not None and dest.smem is not None:
            dest.smem[dst:dst + nbytes] = image
    m.complete_tx(bar, nbytes, issue_vc)


@semantics(isa.UTMALDG)
def _tma_load(m: Any, w: Any, c: Any, lanes: Any) -> None:
    n = _rank(c)
    name = c.instr.ops[1].name
    box = m.tmaps[name]
    a = _args(w, c.instr.ops[0], n + 2)
    dst, bar = a[0], a[1]
    coords = [_s32(x) for x in a[2:]]
    m.pdl_check(w, c)
    issue_vc = w.tick()
    image = box_image(m, name, box, coords) if m.values else None
    nbytes = box.box_bytes
    two = "2CTA" in c.instr.mods
    if "MULTICAST" in c.instr.mods:
        mask = first(c.get[2](w))
        for dest in w.cta.cluster.ctas:
            if not mask >> dest.rank & 1:
                continue
            bar_cta = m.cta_of_rank(w.cta, dest.rank & ~1) if two else dest
            _land(m, w, c, dest, bar_cta, dst & 0xFFFFFF, bar & 0xFFFFFF, nbytes, issue_vc, image, (name, coords))
        return
    if two:
        bar_cta, bl = m.resolve_cluster_addr(w.cta, bar)
        _land(m, w, c, w.cta, bar_cta, dst & 0xFFFFFF, bl, nbytes, issue_vc, image, (name, coords))
        return
    _land(m, w, c, w.cta, w.cta, dst, bar, nbytes, issue_vc, image, (name, coords))


def _bulk_agent(w: Any) -> tuple[Any, ...]:
    return ("bulk", w.cta.index, w.wid)


@semantics(isa.UTMASTG, isa.UTMAREDG)
def _tma_store(m: Any, w: Any, c: Any, lanes: Any) -> None:
    n = _rank(c)
    name = c.instr.ops[1].name
    box = m.tmaps[name]
    a = _args(w, c.instr.ops[0], n + 1)
    src = a[0]
    coords = [_s32(x) for x in a[1:]]
    m.pdl_check(w, c)
    agent, clock = _bulk_agent(w), w.bulk_committed + 1
    w.bulk_open = True
    nbytes = box.box_bytes
    if m.check_smem_range(w, c, src, src + nbytes):
        m.access("smem", w.cta, None, "r", w.vc, agent, clock, c.mnem, w, proxy="async", footprint=_fp(m, src, nbytes))
    if outside(box, coords):
        return  # the engine clips the box: nothing is written
    off, pidx = box_offsets(box, coords)
    base = m.src_base[name]
    words = np.unique((base + off) >> 2)
    kind = "red" if c.sem == "tma-reduce" else "w"
    m.access("global", None, words, kind, w.vc, agent, clock, c.mnem, w, proxy="async")
    m.stores_seen += 1
    if m.values and w.cta.smem is not None:
        eb = box.elem_bytes
        raw = w.cta.smem[src:src + nbytes]
        packed = raw[_swz(nbytes, box.swizzle)]
        mem, wr = m.gmem[name], m.gwritten[name]
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
            m.greduced[name][dstb] = True


@semantics(isa.UTMAPF, isa.UTMACCTL)
def _tma_prefetch(m: Any, w: Any, c: Any, lanes: Any) -> None:
    return None


@semantics(isa.UBLKCP)
def _bulk_copy(m: Any, w: Any, c: Any, lanes: Any) -> None:
    ops = c.instr.ops
    size = first(c.get[2](w))
    m.pdl_check(w, c)
    to_shared = c.instr.mods[0] == "S"
    if to_shared:
        dst, bar = _args(w, ops[0], 2)
        g = ops[1]
        assert isinstance(g, Mem)
        base = g.base
        gaddr = int(first(w.regs.get(elem_name(base.name, 0), 0))) | (int(first(w.regs.get(elem_name(base.name, 1), 0))) << 32)  # type: ignore[union-attr]
        src = m.check_global(w, c, np.array([gaddr]), size)
        issue_vc = w.tick()
        image = None
        if m.values and src is not None:
            o = gaddr - m.src_base[src]
            image = m.gmem[src][o:o + size].copy()
        _land(m, w, c, w.cta, w.cta, dst, bar, size, issue_vc, image)
        return
    # .G.S: shared -> global as the open bulk group
    g = ops[0]
    assert isinstance(g, Mem)
    gaddr = int(first(w.regs.get(elem_name(g.base.name, 0), 0))) | (int(first(w.regs.get(elem_name(g.base.name, 1), 0))) << 32)  # type: ignore[union-attr]
    saddr = first(c.get[1](w))
    agent, clock = _bulk_agent(w), w.bulk_committed + 1
    w.bulk_open = True
    if m.check_smem_range(w, c, saddr, saddr + size):
        m.access("smem", w.cta, None, "r", w.vc, agent, clock, c.mnem, w, proxy="async", footprint=_fp(m, saddr, size))
    if m.check_global(w, c, np.array([gaddr]), size) is not None:
        m.access("global", None, np.arange(gaddr >> 2, (gaddr + size + 3) >> 2), "w", w.vc, agent, clock, c.mnem, w,
                 proxy="async")


@semantics(isa.UTMACMDFLUSH)
def _commit(m: Any, w: Any, c: Any, lanes: Any) -> None:
    w.bulk_committed += 1
    w.bulk_open = False


@semantics(isa.DEPBAR)
def _wait(m: Any, w: Any, c: Any, lanes: Any) -> None:
    n = c.instr.ops[1].value
    done = max(w.bulk_retired, w.bulk_committed - n)
    w.bulk_retired = done
    agent = _bulk_agent(w)
    if w.vc.get(agent, 0) < done:
        w.vc[agent] = done
        w.via[agent] = "bulk-group wait"




def operand_k(m: Any, cta: Any, start: int) -> Optional[tuple[str, int]]:
    """(tensor map, K byte offset) of the operand tile starting at `start`: the K coordinate of the box
    that landed there plus the offset inside its 128-byte rows."""
    land = m.landed.get(cta.index)
    if not land:
        return None
    for dst, (name, coords, nbytes) in land.items():
        if dst <= start < dst + nbytes:
            eb = m.tmaps[name].elem_bytes
            return name, coords[0] * eb + (start - dst) % 128
    return None


def operands_meet(m: Any, w: Any, c: Any, cta: Any, a_start: int, b_start: int) -> None:
    """An MMA multiplies A and B at the same K: the boxes its operand tiles came from must agree."""
    ka, kb = operand_k(m, cta, a_start), operand_k(m, cta, b_start)
    if ka is None or kb is None or ka[1] == kb[1]:
        return
    m.problems.add("data", f"{m.cta_name(cta)} warp {w.wid}: {c.mnem} multiplies {ka[0]} at K byte {ka[1]} with "
                           f"{kb[0]} at K byte {kb[1]} (the boxes the copy engine landed there disagree)")
