"""The Blackwell tensor core: UMMA (tcgen05.mma) on a CTA's (or a CTA pair's) tensor-core queue,
commits that arrive once the MMAs before them finish, tensor-memory allocation and the state of
each column, and the tcgen05 loads and stores.

The queue is an agent whose clock counts the MMAs issued; a commit's arrival carries that clock,
so whoever waits on the barrier it arrives on is ordered after those MMAs. Tensor memory is a
space of its own (lane x column words): an MMA writes (and, accumulating, reads) its accumulator's
columns, a load reads them. Each (lane, column) remembers whether an MMA wrote it: an MMA that
accumulates must add to what an MMA wrote, and a load must read what one wrote."""

from __future__ import annotations

from typing import Any

import numpy as np

from warpy.isa.values import LANES, first, reg_ids, writer
from warpy.check.state import masks_of
from warpy.isa.operands import R, URVec, elem_name
from warpy.check.families.wgmma import desc_rows, operand_footprint, read_matrix
from warpy.isa.families import tcgen05 as isa
from warpy.check.semantics import semantics

_UMMA_SW = {0: 0, 2: 3, 4: 2, 6: 1}


def umma_rows(desc: int, rows: int, kbytes: int) -> np.ndarray:
    lo, hi = desc & 0xFFFFFFFF, desc >> 32
    start = (lo & 0x3FFF) << 4
    lbo = ((lo >> 16) & 0x3FFF) << 4
    sbo = (hi & 0x3FFF) << 4
    bits = _UMMA_SW.get((hi >> 29) & 7, 0)
    return desc_rows(start, lbo, sbo, bits, rows, kbytes)


def tmem_words(lanes_: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Word index of (lane, column): column-major, so a column block of all lanes is contiguous."""
    return (cols[None, :].astype(np.int64) * 128 + lanes_[:, None].astype(np.int64)).ravel()


def _pair64(w: Any, op: Any) -> int:
    reg = op.reg
    if isinstance(reg, URVec):
        return int(first(w.regs.get(elem_name(reg.name, 0), 0))) | (int(first(w.regs.get(elem_name(reg.name, 1), 0))) << 32)
    return int(first(w.regs.get(elem_name(reg.name, 0), 0))) | (int(first(w.regs.get(elem_name(reg.name, 1), 0))) << 32)


def _tmem_check(m: Any, w: Any, c: Any, cta: Any, col0: int, ncols: int) -> bool:
    for start, n in cta.tmem_cols:
        if start <= col0 and col0 + ncols <= start + n:
            return True
    m.problems.add("memory", f"{m.cta_name(cta)} warp {w.wid}: {c.mnem} touches tensor-memory columns "
                             f"{col0}..{col0 + ncols - 1}, outside what the CTA allocated")
    return False


@semantics(isa.UTCHMMA)
def _utchmma(m: Any, w: Any, c: Any, lanes: Any) -> None:
    i = c.instr
    two = "2CTA" in i.mods
    adesc, bdesc = _pair64(w, i.ops[0]), _pair64(w, i.ops[1])
    dval = int(first(m.read(i.ops[2].reg)(w)))
    idesc = int(first(m.read(i.ops[4].reg)(w)))
    accumulate = bool(m.read(i.ops[5])(w))
    n = ((idesc >> 17) & 0x3F) << 3
    mm = ((idesc >> 24) & 0x1F) << 4
    if n == 0 or mm == 0:
        m.problems.add("protocol", f"{m.cta_name(w.cta)} warp {w.wid}: {c.mnem} has instruction descriptor 0x{idesc:x} (M {mm}, N {n})")
        return
    ctas = [w.cta]
    if two:
        peer = m.cta_of_rank(w.cta, w.cta.rank ^ 1)
        if peer is None:
            m.problems.add("protocol", f"{m.cta_name(w.cta)} warp {w.wid}: {c.mnem} needs a CTA pair, the cluster has one CTA")
            return
        ctas = sorted([w.cta, peer], key=lambda x: x.rank)
    rows_a = mm // len(ctas)  # rows of D (and of A) in each CTA
    rows_b = n // len(ctas)  # rows of B each CTA holds
    kb = 32
    w.cta.tc_clock += 1
    agent, clock = w.cta.tc_agent, w.cta.tc_clock
    vc = dict(w.vc)
    vc[agent] = clock - 1
    fa = operand_footprint(m, ("umma", adesc, rows_a, kb), lambda: umma_rows(adesc, rows_a, kb))
    fb = operand_footprint(m, ("umma", bdesc, rows_b, kb), lambda: umma_rows(bdesc, rows_b, kb))
    from warpy.check.families.tma import operands_meet

    operands_meet(m, w, c, w.cta, (adesc & 0x3FFF) << 4, (bdesc & 0x3FFF) << 4)
    col0 = dval & 0xFFFF
    lane0 = (dval >> 16) & 0xFFFF
    # D's rows x N in tensor memory: 128 rows a lane each; a pair's M = 128 puts each CTA's 64 rows
    # in lanes 0-63 for the first N/2 columns and lanes 64-127 for the rest (N/2 columns)
    folded = rows_a == 64 and len(ctas) == 2
    lanes_used = 128 if folded else rows_a
    ncols = n // 2 if folded else n
    for cta in ctas:
        for addrs, fp in (fa, fb):
            lo, hi = int(addrs.min()), int(addrs.max()) + 1
            if m.check_smem_range(w, c, lo, hi):
                m.access("smem", cta, None, "r", vc, agent, clock, c.mnem, w, proxy="async", footprint=fp)
        if not _tmem_check(m, w, c, cta, col0, ncols):
            continue
        key = ("tmemfp", lane0, lanes_used, col0, ncols)
        fp = m.ref_cache.get(key)
        if fp is None:
            fp = m.ref_cache[key] = masks_of(tmem_words(np.arange(lane0, lane0 + lanes_used), np.arange(col0, col0 + ncols)))
        m.access("tmem", cta, None, "w", vc, agent, clock, c.mnem, w, proxy="async", footprint=fp)
        st = cta.tmem_written[lane0:lane0 + lanes_used, col0:col0 + ncols]
        if accumulate and not st.all():
            m.problems.add("protocol", f"{m.cta_name(cta)}: {c.mnem} (warp {w.wid}) adds to tensor-memory columns "
                                       f"{col0}..{col0 + ncols - 1} that no MMA wrote")
        st[:] = True
    if m.values:
        dt = "bf16" if (idesc >> 7) & 7 == 1 else "fp16"
        b_full = np.concatenate([read_matrix(x.smem, fb[0], dt, 2) for x in ctas], axis=0)
        for x in ctas:
            a = read_matrix(x.smem, fa[0], dt, 2)
            prod = a @ b_full.T  # [rows_a, n]
            if folded:
                prod = np.concatenate([prod[:, : n // 2], prod[:, n // 2:]], axis=0)  # [128, n/2]
            tv = x.tmem_vals[lane0:lane0 + lanes_used, col0:col0 + ncols]
            if accumulate:
                tv += prod
            else:
                tv[:] = prod


@semantics(isa.UTCBAR)
def _utcbar(m: Any, w: Any, c: Any, lanes: Any) -> None:
    i = c.instr
    addr = int(first(c.get[0](w), lanes))
    leader = w.cta
    if "2CTA" in i.mods and w.cta.rank & 1:
        leader = m.cta_of_rank(w.cta, w.cta.rank & ~1) or w.cta
    vc = w.tick()
    vc[leader.tc_agent] = max(vc.get(leader.tc_agent, 0), leader.tc_clock)
    who = f"{m.cta_name(w.cta)} warp {w.wid} ({c.mnem})"
    if "MULTICAST" in i.mods:
        mask = int(first(c.get[2](w), lanes))
        for dest in w.cta.cluster.ctas:
            if mask >> dest.rank & 1:
                local = addr & 0xFFFFFF
                if m.check_barrier_addr(w, c, local):
                    bar = m.mbar(dest, local)
                    m.bar_access(bar, w, "red", vc, leader.tc_agent, leader.tc_clock, c.mnem, "async")
                    m.arrive(bar, 1, 0, vc, who)
        return
    dest, local = (m.resolve_cluster_addr(w.cta, addr) if "2CTA" in i.mods else (w.cta, addr))
    if dest is None or not m.check_barrier_addr(w, c, local):
        return
    bar = m.mbar(dest, local)
    m.bar_access(bar, w, "red", vc, leader.tc_agent, leader.tc_clock, c.mnem, "async")
    m.arrive(bar, 1, 0, vc, who)


def _ldtm_cols(c: Any) -> int:
    for mod in c.instr.mods:
        if mod.startswith("x"):
            return int(mod[1:])
    return 1


def _tmem_access(m: Any, w: Any, c: Any, tval: int, ncols: int, kind: str) -> tuple[int, int]:
    col0 = tval & 0xFFFF
    lane0 = ((tval >> 16) & 0xFFFF)
    base_lane = 32 * (w.wid % 4)
    if lane0 != base_lane and lane0 != 0:
        m.problems.add("memory", f"{m.cta_name(w.cta)} warp {w.wid}: {c.mnem} addresses tensor-memory lane {lane0}; "
                                 f"warp {w.wid} may access lanes {base_lane}..{base_lane + 31}")
    lane0 = base_lane
    if not _tmem_check(m, w, c, w.cta, col0, ncols):
        return lane0, col0
    key = ("tmemfp", lane0, 32, col0, ncols)
    fp = m.ref_cache.get(key)
    if fp is None:
        fp = m.ref_cache[key] = masks_of(tmem_words(np.arange(lane0, lane0 + 32), np.arange(col0, col0 + ncols)))
    m.access("tmem", w.cta, None, kind, w.vc, w.agent, w.vc[w.agent], c.mnem, w, footprint=fp)
    return lane0, col0


@semantics(isa.LDTM)
def _ldtm(m: Any, w: Any, c: Any, lanes: Any) -> None:
    n = _ldtm_cols(c)
    tval = int(first(m.read(c.instr.ops[1].reg)(w)))
    lane0, col0 = _tmem_access(m, w, c, tval, n, "r")
    st = w.cta.tmem_written[lane0:lane0 + 32, col0:col0 + n]
    if not st.all():
        m.problems.add("protocol", f"{m.cta_name(w.cta)} warp {w.wid}: {c.mnem} reads tensor-memory columns "
                                   f"{col0}..{col0 + n - 1} that no MMA wrote")
    span = c.extra.get("dst_span")
    if span is None:
        ids = reg_ids(c.instr.ops[0])
        span = c.extra["dst_span"] = (ids[0][0], ids[0][1], ids[-1][1] + 1) if ids else ()
    if span:  # the registers are the load's until tcgen05.wait::ld
        w.pending.append((span[0], span[1], span[2], -1, c.mnem))
    if m.values:
        vals = w.cta.tmem_vals[lane0:lane0 + 32, col0:col0 + n].astype(np.float32).view(np.uint32).astype(np.uint64)
        d = c.instr.ops[0]
        for j in range(n):
            writer(R(elem_name(d.name, j)))(w, vals[:, j].copy(), lanes)


@semantics(isa.STTM)
def _sttm(m: Any, w: Any, c: Any, lanes: Any) -> None:
    n = _ldtm_cols(c)
    tval = int(first(m.read(c.instr.ops[0].reg)(w)))
    lane0, col0 = _tmem_access(m, w, c, tval, n, "w")
    w.cta.tmem_written[lane0:lane0 + 32, col0:col0 + n] = True
    if m.values:
        v = c.instr.ops[1]
        for j in range(n):
            x = np.broadcast_to(np.asarray(w.regs.get(elem_name(v.name, j), 0), dtype=np.uint64), (LANES,))
            w.cta.tmem_vals[lane0:lane0 + 32, col0 + j] = x.astype(np.uint32).view(np.float32)


@semantics(isa.TCGEN05_FENCE)
def _nothing(m: Any, w: Any, c: Any, lanes: Any) -> None:
    return None


@semantics(isa.TCGEN05_WAIT)
def _wait(m: Any, w: Any, c: Any, lanes: Any) -> None:
    if "LD" in c.instr.mods and w.pending:
        w.pending = [p for p in w.pending if p[3] >= 0]


@semantics(isa.UTCATOMSWS_FIND_AND_SET)
def _alloc(m: Any, w: Any, c: Any, lanes: Any) -> None:
    slot = int(first(c.get[0](w), lanes))
    ncols = int(first(c.get[1](w), lanes))
    cta = w.cta
    if cta.relinquished:
        m.problems.add("protocol", f"{m.cta_name(cta)} warp {w.wid} allocates tensor memory after relinquishing the permit")
    start = 0
    while start + ncols <= 512 and any(s < start + ncols and start < s + n for s, n in cta.tmem_cols):
        start += ncols
    if start + ncols > 512:
        m.problems.add("protocol", f"{m.cta_name(cta)} warp {w.wid} allocates {ncols} tensor-memory columns: none are free (a hang on the GPU)")
        return
    cta.tmem_cols.append((start, ncols))
    if len(cta.tmem_cols) == 1:
        cta.tmem_base = start
    # the columns become this allocation's: whatever uses them must come after it
    m.access("tmem", cta, tmem_words(np.arange(128), np.arange(start, start + ncols)), "w", w.vc, w.agent,
             w.vc[w.agent], c.mnem, w)
    if m.check_smem_range(w, c, slot, slot + 4):
        m.access("smem", cta, np.array([slot >> 2]), "w", w.vc, w.agent, w.vc[w.agent], c.mnem, w)
        if cta.smem is not None:
            cta.smem[slot:slot + 4] = np.frombuffer(np.uint32(start).tobytes(), dtype=np.uint8)
    m.shadow[(cta.index, slot)] = start


@semantics(isa.UTCATOMSWS_AND)
def _dealloc(m: Any, w: Any, c: Any, lanes: Any) -> None:
    tval = int(first(c.get[0](w), lanes))
    ncols = int(first(c.get[1](w), lanes))
    cta = w.cta
    col = tval & 0xFFFF
    for k, (s, n) in enumerate(cta.tmem_cols):
        if s == col and n == ncols:
            m.access("tmem", cta, tmem_words(np.arange(128), np.arange(s, s + n)), "w", w.vc, w.agent, w.vc[w.agent],
                     c.mnem, w)
            cta.tmem_cols.pop(k)
            cta.tmem_written[:, s:s + n] = False
            return
    m.problems.add("protocol", f"{m.cta_name(cta)} warp {w.wid} frees tensor-memory columns {col}..{col + ncols - 1}, "
                               f"which no allocation returned")


@semantics(isa.UVIRTCOUNT_DEALLOC)
def _relinquish(m: Any, w: Any, c: Any, lanes: Any) -> None:
    w.cta.relinquished = True
