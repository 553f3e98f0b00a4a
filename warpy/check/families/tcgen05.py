"""The Blackwell tensor core: UMMA (tcgen05.mma) on a CTA's (or a CTA pair's) tensor-core queue,
commits that arrive once the MMAs before them finish, tensor-memory allocation and the state of
each column, and the tcgen05 loads and stores.

The queue is an agent whose clock counts the MMAs issued; a commit's arrival carries that clock,
so whoever waits on the barrier it arrives on is ordered after those MMAs. Tensor memory is a
space of its own (lane x column words): an MMA writes (and, accumulating, reads) its accumulator's
columns, a load reads them. Each (lane, column) remembers whether an MMA wrote it: an MMA that
accumulates must add to what an MMA wrote, and a load must read what one wrote.

tcgen05 ordering: a warp's tensor-memory work (its loads, stores, allocation and the MMAs it issues)
is ordered only by what the warp's *tcgen05 view* holds, and a thread synchronisation (an mbarrier
wait, a named or cluster barrier) reaches that view only through `tcgen05.fence::after_thread_sync`
(`TCGEN05.FENCE.AFTER`, which joins the warp's clock into its view). On the other side, a warp's
completed tcgen05 loads and stores (an agent of their own, `("t", cta, warp)`) are released by its
synchronisations only after `tcgen05.fence::before_thread_sync` (`TCGEN05.FENCE.BEFORE`); a load is
complete once `tcgen05.wait::ld` follows it, a store once `tcgen05.wait::st` does. A commit
(`UTCBAR`) carries the MMAs before it by itself. So a hand-off of tensor memory through an mbarrier
needs the fence on both sides, as PTX says. (An allocation and a deallocation are ordered by the
warp's synchronisations themselves: what those carry of other warps' loads went through their
before_thread_sync fences.)"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np

from warpy.numeric import from_bits

from warpy.isa.values import first, writer
from warpy.isa.operands import Desc, Operand, R, elem_name
from warpy.check.families.tma import operand_layout, operands_meet
from warpy.check.families.wgmma import desc_mn_rows, desc_rows, operand_footprint, read_matrix, span_of
from warpy.check.happens_before import Footprint
from warpy.check.registers import lanes_u64, pair64, reg_name
from warpy.isa.families import tcgen05 as isa
from warpy.check.semantics import semantics
from warpy.check.state import TMEM_COLUMNS, TMEM_LANES, VC, Agent, Cta, Lanes, Tag, Warp, join

if TYPE_CHECKING:
    from warpy.check.code import Compiled
    from warpy.check.machine import Machine

_UMMA_SW = {0: 0, 2: 3, 4: 2, 6: 1}


def umma_rows(desc: int, rows: int, kbytes: int) -> np.ndarray:
    lo, hi = desc & 0xFFFFFFFF, desc >> 32
    start = (lo & 0x3FFF) << 4
    lbo = ((lo >> 16) & 0x3FFF) << 4
    sbo = (hi & 0x3FFF) << 4
    bits = _UMMA_SW.get((hi >> 29) & 7, 0)
    return desc_rows(start, lbo, sbo, bits, rows, kbytes)


def umma_tile(desc: int, rows: int, kbytes: int, mn: bool, eb: int = 2) -> np.ndarray:
    """The operand tile's byte addresses [rows, kbytes] a UMMA descriptor describes: K-major, or (mn:
    the instruction descriptor's A/B major bit) MN-major, in `warpy.layout.desc`'s canonical layouts
    (the same LBO/SBO roles as wgmma's)."""
    if not mn:
        return umma_rows(desc, rows, kbytes)
    lo, hi = desc & 0xFFFFFFFF, desc >> 32
    start = (lo & 0x3FFF) << 4
    lbo = ((lo >> 16) & 0x3FFF) << 4
    sbo = (hi & 0x3FFF) << 4
    return desc_mn_rows(start, lbo, sbo, _UMMA_SW.get((hi >> 29) & 7, 0), rows, kbytes, eb)


def _umma_swizzle(desc: int) -> int:
    """The swizzle span in bytes a UMMA shared-memory descriptor names (0: none)."""
    bits = _UMMA_SW.get((desc >> 61) & 7, 0)
    return 16 << bits if bits else 0


def tmem_words(lanes_: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Word index of (lane, column): column-major, so a column block of all lanes is contiguous."""
    return (cols[None, :].astype(np.int64) * 128 + lanes_[:, None].astype(np.int64)).ravel()


def _desc(op: Operand) -> Desc:
    if not isinstance(op, Desc):
        raise TypeError(f"{op} is not a descriptor")
    return op


def _tmem_fp(m: Machine, lane0: int, nlanes: int, col0: int, ncols: int) -> Footprint:
    return m.order.footprint(("tmem", lane0, nlanes, col0, ncols),
                             lambda: tmem_words(np.arange(lane0, lane0 + nlanes), np.arange(col0, col0 + ncols)))


def _tmem_check(m: Machine, w: Warp, c: Compiled, cta: Cta, col0: int, ncols: int) -> bool:
    for start, n in cta.tmem_cols:
        if start <= col0 and col0 + ncols <= start + n:
            return True
    m.problems.add("memory", f"{cta.name} warp {w.wid}: {c.mnem} touches tensor-memory columns "
                             f"{col0}..{col0 + ncols - 1}, outside what the CTA allocated")
    return False


#: kind::f8f6f4's A / B format codes of the instruction descriptor warpy models (bits 7-9 / 10-12)
F8_FORMATS = {0: "e4m3", 1: "e5m2"}


@semantics(isa.UTCHMMA, isa.UTCQMMA)
def _utchmma(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    i = c.instr
    two = "2CTA" in i.mods
    a_in_tmem = _desc(i.ops[0]).kind == "tmem"  # the TS form: A from tensor memory
    adesc = 0 if a_in_tmem else pair64(w, _desc(i.ops[0]).reg.name)
    bdesc = pair64(w, _desc(i.ops[1]).reg.name)
    dval = int(first(m.code.read(_desc(i.ops[2]).reg)(w)))
    idesc = int(first(m.code.read(_desc(i.ops[4]).reg)(w)))
    accumulate = bool(m.code.read(i.ops[5])(w))
    n = ((idesc >> 17) & 0x3F) << 3
    mm = ((idesc >> 24) & 0x1F) << 4
    if n == 0 or mm == 0:
        m.problems.add("protocol", f"{w.cta.name} warp {w.wid}: {c.mnem} has instruction descriptor 0x{idesc:x} (M {mm}, N {n})")
        return
    for which, desc in (() if a_in_tmem else (("A", adesc),)) + (("B", bdesc),):
        code = (desc >> 61) & 7
        if code not in _UMMA_SW:  # 1: 128-byte swizzle with 32-byte atoms; 3, 5, 7: reserved
            m.problems.add("protocol", f"{w.cta.name} warp {w.wid}: {c.mnem}'s {which} descriptor 0x{desc:x} has layout "
                                       f"code {code} ({'128B with 32B atoms' if code == 1 else 'reserved'}), which the "
                                       f"checker does not model")
            return
    ctas = [w.cta]
    if two:
        peer = w.cta.peer(w.cta.rank ^ 1)
        if peer is None:
            m.problems.add("protocol", f"{w.cta.name} warp {w.wid}: {c.mnem} needs a CTA pair, the cluster has one CTA")
            return
        ctas = sorted([w.cta, peer], key=lambda x: x.rank)
    rows_a = mm // len(ctas)  # rows of D (and of A) in each CTA
    rows_b = n // len(ctas)  # rows of B each CTA holds
    kb = 32
    a_mn, b_mn = bool(idesc >> 15 & 1), bool(idesc >> 16 & 1)  # A / B MN-major (transposed)
    w.cta.tc_clock += 1
    agent, clock = w.cta.tc_agent, w.cta.tc_clock
    vc = dict(w.vc)
    vc[agent] = clock - 1
    tvc = _view(w)  # tensor memory: what the issuing warp's tcgen05 view orders it after
    tvc[agent] = clock - 1
    kb_key = ("umma", bdesc, rows_b, kb, b_mn)
    fb = operand_footprint(m, kb_key, lambda: umma_tile(bdesc, rows_b, kb, b_mn))
    ta: Optional[tuple[int, int]] = None
    if a_in_tmem:
        ta = _ts_operand(m, w, c, int(first(m.code.read(_desc(i.ops[0]).reg)(w))), mm, len(ctas), tvc, agent, clock)
        if ta is None:
            return
        smem_ops = [fb]
    else:
        fa = operand_footprint(m, ("umma", adesc, rows_a, kb, a_mn), lambda: umma_tile(adesc, rows_a, kb, a_mn))
        operands_meet(m, w, c, w.cta, (adesc & 0x3FFF) << 4, (bdesc & 0x3FFF) << 4, a_mn, b_mn)
        smem_ops = [fa, fb]
    col0 = dval & 0xFFFF
    lane0 = (dval >> 16) & 0xFFFF
    # D's rows x N in tensor memory: 128 rows a lane each; a pair's M = 128 puts each CTA's 64 rows
    # in lanes 0-63 for the first N/2 columns and lanes 64-127 for the rest (N/2 columns)
    folded = rows_a == 64 and len(ctas) == 2
    lanes_used = 128 if folded else rows_a
    ncols = n // 2 if folded else n
    # where the operands came from: each CTA's A rows, and B's rows over the CTAs
    sw_b = _umma_swizzle(bdesc)
    la0 = None if a_in_tmem else operand_layout(m, w, c, w.cta, ("umma", adesc, rows_a, kb, a_mn), fa[0],
                                                _umma_swizzle(adesc), "A", a_mn, 2)
    lbs = [operand_layout(m, w, c, x, kb_key, fb[0], sw_b, "B", b_mn, 2) for x in ctas]
    lb = None
    known = [x for x in lbs if x is not None]
    if len(known) == len(lbs) and len({x[0] for x in known}) == 1:
        lb = known[0]
        if any(x[1] != lb[1] + k * rows_b for k, x in enumerate(known)):  # the pair's halves of B: consecutive rows
            if la0 is not None and m.prov.has_output(la0[0], lb[0]):
                m.problems.add("data", f"{w.cta.name} warp {w.wid}: {c.mnem} multiplies B rows "
                                       f"{', '.join(f'{x[1]}..{x[1] + rows_b - 1}' for x in known)} of {lb[0]} from "
                                       f"the pair's CTAs: not one run of {n} rows")
            lb = None
    for cta in ctas:
        la = None if a_in_tmem else operand_layout(m, w, c, cta, ("umma", adesc, rows_a, kb, a_mn), fa[0],
                                                   _umma_swizzle(adesc), "A", a_mn, 2)
        tag: Optional[Tag] = m.prov.tag(la, rows_a, lb, n, kb)
        for addrs, fp in smem_ops:
            lo, hi = int(addrs.min()), int(addrs.max()) + 1
            if m.places.check_smem_range(w, c, lo, hi):
                m.order.access("smem", cta, None, "r", vc, agent, clock, c.mnem, w, proxy="async", footprint=fp)
        if not _tmem_check(m, w, c, cta, col0, ncols):
            continue
        fp = _tmem_fp(m, lane0, lanes_used, col0, ncols)
        m.order.access("tmem", cta, None, "w", tvc, agent, clock, c.mnem, w, proxy="async", footprint=fp)
        m.prov.mma_tmem(w, c, cta, col0, ncols, tag, accumulate)
        st = cta.tmem_written[lane0:lane0 + lanes_used, col0:col0 + ncols]
        if accumulate and not st.all():
            m.problems.add("protocol", f"{cta.name}: {c.mnem} (warp {w.wid}) adds to tensor-memory columns "
                                       f"{col0}..{col0 + ncols - 1} that no MMA wrote")
        st[:] = True
    if m.values:
        dt = "bf16" if (idesc >> 7) & 7 == 1 else "fp16"
        dtb, eb = dt, 2
        if i.name == "UTCQMMA":  # kind::f8f6f4: A's and B's own formats, one byte an element
            fa_, fb_ = F8_FORMATS.get((idesc >> 7) & 7), F8_FORMATS.get((idesc >> 10) & 7)
            if fa_ is None or fb_ is None:
                m.problems.add("protocol", f"{w.cta.name} warp {w.wid}: {c.mnem} has instruction descriptor "
                                           f"0x{idesc:x}, whose A / B formats ({(idesc >> 7) & 7}, "
                                           f"{(idesc >> 10) & 7}) are not e4m3 (0) or e5m2 (1)")
                return
            dt, dtb, eb = fa_, fb_, 1
        b_full = np.concatenate([read_matrix(_smem(x), fb[0], dtb, eb) for x in ctas], axis=0)
        for x in ctas:
            a = _ts_matrix(x, ta, mm, dt) if ta is not None else read_matrix(_smem(x), fa[0], dt, eb)
            prod = a @ b_full.T  # [rows_a, n]
            if folded:
                prod = np.concatenate([prod[:, : n // 2], prod[:, n // 2:]], axis=0)  # [128, n/2]
            tv = _tmem_vals(x)[lane0:lane0 + lanes_used, col0:col0 + ncols]
            if accumulate:
                tv += prod
            else:
                tv[:] = prod


#: K of one tcgen05.mma kind::f16 step: 16 elements, 8 tensor-memory columns of two 16-bit halves
TS_COLUMNS = 8


def _ts_operand(m: Machine, w: Warp, c: Compiled, aval: int, mm: int, nctas: int, vc: dict[Agent, int], agent: Agent,
                clock: int) -> Optional[tuple[int, int]]:
    """A from tensor memory (the TS form): (lane, column) where it starts, after checking it is the
    layout `warpy.layout.atoms.umma_ts_a_tmem` says (M = 128, one CTA: lane = row), allocated, written
    by a tcgen05 store, and ordered (an async read of those cells); None when it cannot be used."""
    who = f"{w.cta.name} warp {w.wid}: {c.mnem}"
    if nctas != 1 or mm != 128:
        m.problems.add("protocol", f"{who} reads A from tensor memory with M = {mm} over {nctas} CTA(s); warpy models "
                                   f"the TS form for M = 128 on one CTA")
        return None
    lane0, col0 = (aval >> 16) & 0xFFFF, aval & 0xFFFF
    if lane0 != 0:
        m.problems.add("protocol", f"{who} reads A from tensor-memory lane {lane0}; A's rows are lanes 0..127")
        return None
    cta = w.cta
    if not _tmem_check(m, w, c, cta, col0, TS_COLUMNS):
        return None
    if not cta.tmem_written[0:128, col0:col0 + TS_COLUMNS].all():
        m.problems.add("protocol", f"{who} reads A from tensor-memory columns {col0}..{col0 + TS_COLUMNS - 1} that no "
                                   f"tcgen05 store (STTM) wrote")
    fp = _tmem_fp(m, 0, 128, col0, TS_COLUMNS)
    m.order.access("tmem", cta, None, "r", vc, agent, clock, c.mnem, w, proxy="async", footprint=fp)
    return lane0, col0


def _ts_matrix(cta: Cta, at: tuple[int, int], mm: int, dtype: str) -> np.ndarray:
    """A (M x 16) from tensor memory: row r in lane r, element k in column k // 2, half k % 2."""
    lane0, col0 = at
    cells = _tmem_vals(cta)[lane0:lane0 + mm, col0:col0 + TS_COLUMNS].astype(np.float32).view(np.uint32)
    halves = np.stack([cells & 0xFFFF, cells >> 16], axis=2).reshape(mm, 2 * TS_COLUMNS).astype(np.uint16)
    return from_bits(halves, dtype)


def _smem(cta: Cta) -> np.ndarray:
    if cta.smem is None:
        raise TypeError(f"{cta.name} has no shared-memory bytes (a run without values)")
    return cta.smem


def _tmem_vals(cta: Cta) -> np.ndarray:
    if cta.tmem_vals is None:
        raise TypeError(f"{cta.name} has no tensor-memory words (a run without values)")
    return cta.tmem_vals


@semantics(isa.UTCBAR)
def _utcbar(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    i = c.instr
    addr = int(first(c.get[0](w), lanes))
    leader = w.cta
    if "2CTA" in i.mods and w.cta.rank & 1:
        leader = w.cta.peer(w.cta.rank & ~1) or w.cta
    vc = w.tick()
    vc[leader.tc_agent] = max(vc.get(leader.tc_agent, 0), leader.tc_clock)
    who = f"{w.cta.name} warp {w.wid} ({c.mnem})"
    mb = m.mbarriers
    if "MULTICAST" in i.mods:
        mask = int(first(c.get[2](w), lanes))
        for dest in w.cta.cluster.ctas:
            if mask >> dest.rank & 1:
                local = addr & 0xFFFFFF
                if m.places.check_barrier_addr(w, c, local):
                    bar = mb.at(dest, local)
                    mb.bar_access(bar, w, "red", vc, leader.tc_agent, leader.tc_clock, c.mnem, "async")
                    mb.arrive(bar, 1, 0, vc, who)
        return
    to, local = (w.cta.resolve(addr) if "2CTA" in i.mods else (w.cta, addr))
    if to is None or not m.places.check_barrier_addr(w, c, local):
        return
    bar = mb.at(to, local)
    mb.bar_access(bar, w, "red", vc, leader.tc_agent, leader.tc_clock, c.mnem, "async")
    mb.arrive(bar, 1, 0, vc, who)


def _ldtm_cols(c: Compiled) -> int:
    for mod in c.instr.mods:
        if mod.startswith("x"):
            return int(mod[1:])
    return 1


def _tmem_access(m: Machine, w: Warp, c: Compiled, tval: int, ncols: int, kind: str) -> tuple[int, int]:
    col0 = tval & 0xFFFF
    lane0 = ((tval >> 16) & 0xFFFF)
    base_lane = 32 * (w.wid % 4)
    if lane0 != base_lane and lane0 != 0:
        m.problems.add("memory", f"{w.cta.name} warp {w.wid}: {c.mnem} addresses tensor-memory lane {lane0}; "
                                 f"warp {w.wid} may access lanes {base_lane}..{base_lane + 31}")
    lane0 = base_lane
    if not _tmem_check(m, w, c, w.cta, col0, ncols):
        return lane0, col0
    fp = _tmem_fp(m, lane0, 32, col0, ncols)
    clock = _t_op(w, "ld" if kind == "r" else "st")
    m.order.access("tmem", w.cta, None, kind, _view(w), w.t_agent, clock, c.mnem, w, footprint=fp)
    return lane0, col0


@semantics(isa.LDTM)
def _ldtm(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    n = _ldtm_cols(c)
    tval = int(first(m.code.read(_desc(c.instr.ops[1]).reg)(w)))
    lane0, col0 = _tmem_access(m, w, c, tval, n, "r")
    st = w.cta.tmem_written[lane0:lane0 + 32, col0:col0 + n]
    if not st.all():
        m.problems.add("protocol", f"{w.cta.name} warp {w.wid}: {c.mnem} reads tensor-memory columns "
                                   f"{col0}..{col0 + n - 1} that no MMA wrote")
    span = span_of(c, c.instr.ops[0])
    if span:  # the registers are the load's until tcgen05.wait::ld
        w.pending.append((span[0], span[1], span[2], -1, c.mnem))
    m.prov.tmem_load(w, list(c.defs), col0, n)
    if m.values:
        vals = _tmem_vals(w.cta)[lane0:lane0 + 32, col0:col0 + n].astype(np.float32).view(np.uint32).astype(np.uint64)
        d = reg_name(c.instr.ops[0])
        for j in range(n):
            writer(R(elem_name(d, j)))(w, vals[:, j].copy(), lanes)


@semantics(isa.STTM)
def _sttm(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    n = _ldtm_cols(c)
    tval = int(first(m.code.read(_desc(c.instr.ops[0]).reg)(w)))
    lane0, col0 = _tmem_access(m, w, c, tval, n, "w")
    w.cta.tmem_written[lane0:lane0 + 32, col0:col0 + n] = True
    if m.values:
        v = reg_name(c.instr.ops[1])
        for j in range(n):
            x = lanes_u64(w.regs.get(elem_name(v, j), 0))
            _tmem_vals(w.cta)[lane0:lane0 + 32, col0 + j] = x.astype(np.uint32).view(np.float32)


def _view(w: Warp) -> VC:
    """The clocks the warp's next tcgen05 operation is ordered after: its tcgen05 view, and its own
    earlier tcgen05 operations (program order)."""
    v = dict(w.tvc)
    v[w.agent] = w.vc[w.agent]
    v[w.t_agent] = w.t_clock
    return v


def _t_op(w: Warp, kind: str) -> int:
    """A tcgen05 operation of the warp: its clock (a load or store stays open until its wait; an
    allocation completes at once)."""
    w.t_clock += 1
    if kind in ("ld", "st"):
        w.t_open.append((w.t_clock, kind))
    return w.t_clock


@semantics(isa.TCGEN05_FENCE)
def _fence(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    """before_thread_sync: the warp's completed tcgen05 operations go with its next synchronisations;
    after_thread_sync: what its synchronisations brought now orders its next tcgen05 operations."""
    if "BEFORE" in c.instr.mods:
        done = min(k for k, _ in w.t_open) - 1 if w.t_open else w.t_clock
        if w.vc.get(w.t_agent, 0) < done:
            w.vc[w.t_agent] = done
            w.via[w.t_agent] = "tcgen05.fence::before_thread_sync"
    else:
        join(w.tvc, w.vc)


@semantics(isa.TCGEN05_WAIT)
def _wait(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    kind = "ld" if "LD" in c.instr.mods else "st"
    w.t_open = [x for x in w.t_open if x[1] != kind]
    if kind == "ld" and w.pending:
        w.pending = [p for p in w.pending if p[3] >= 0]


@semantics(isa.UTCATOMSWS_FIND_AND_SET)
def _alloc(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    slot = int(first(c.get[0](w), lanes))
    ncols = int(first(c.get[1](w), lanes))
    cta = w.cta
    if ncols < 32 or ncols > TMEM_COLUMNS or ncols & (ncols - 1):
        m.problems.add("protocol", f"{cta.name} warp {w.wid}: {c.mnem} allocates {ncols} tensor-memory columns: a power "
                                   f"of two from 32 to {TMEM_COLUMNS}")
        return
    if slot % 4:
        m.problems.add("memory", f"{cta.name} warp {w.wid}: {c.mnem} writes the allocation's address to shared "
                                 f"0x{slot:x}, which is not 4-byte aligned")
    if cta.relinquished:
        m.problems.add("protocol", f"{cta.name} warp {w.wid} allocates tensor memory after relinquishing the permit")
    start = 0
    while start + ncols <= TMEM_COLUMNS and any(s < start + ncols and start < s + n for s, n in cta.tmem_cols):
        start += ncols
    if start + ncols > TMEM_COLUMNS:
        m.problems.add("protocol", f"{cta.name} warp {w.wid} allocates {ncols} tensor-memory columns: none are free (a hang on the GPU)")
        return
    cta.tmem_cols.append((start, ncols))
    if len(cta.tmem_cols) == 1:
        cta.tmem_base = start
    # the columns become this allocation's: whatever uses them must come after it
    m.order.access("tmem", cta, tmem_words(np.arange(TMEM_LANES), np.arange(start, start + ncols)), "w", w.vc, w.agent,
                   w.vc[w.agent], c.mnem, w)
    if m.places.check_smem_range(w, c, slot, slot + 4):
        m.order.access("smem", cta, np.array([slot >> 2]), "w", w.vc, w.agent, w.vc[w.agent], c.mnem, w)
        if cta.smem is not None:
            cta.smem[slot:slot + 4] = np.frombuffer(np.uint32(start).tobytes(), dtype=np.uint8)
    cta.shadow[slot] = start


@semantics(isa.UTCATOMSWS_AND)
def _dealloc(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    tval = int(first(c.get[0](w), lanes))
    ncols = int(first(c.get[1](w), lanes))
    cta = w.cta
    col = tval & 0xFFFF
    for k, (s, n) in enumerate(cta.tmem_cols):
        if s == col and n == ncols:
            # ordered by the warp's synchronisations themselves (what they carry of other warps' tcgen05
            # work went through those warps' before_thread_sync fences)
            vc = dict(w.vc)
            vc[w.t_agent] = w.t_clock
            m.order.access("tmem", cta, tmem_words(np.arange(TMEM_LANES), np.arange(s, s + n)), "w", vc, w.agent,
                           w.vc[w.agent], c.mnem, w)
            cta.tmem_cols.pop(k)
            cta.tmem_written[:, s:s + n] = False
            return
    m.problems.add("protocol", f"{cta.name} warp {w.wid} frees tensor-memory columns {col}..{col + ncols - 1}, "
                               f"which no allocation returned")


@semantics(isa.UVIRTCOUNT_DEALLOC)
def _relinquish(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    w.cta.relinquished = True
