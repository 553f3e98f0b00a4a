"""Shared and global loads and stores, and the matrix forms (ldmatrix / stmatrix).

Each access is checked against the declared buffers (shared: a `.buffer ... smem`; global: a
`.buffer ... global` behind the pointer) and recorded for the happens-before check: a generic-proxy
access by the warp, stamped with the warp's clock. With values, the bytes move."""

from __future__ import annotations

from typing import Any

import numpy as np

from warpy.isa.values import M32, first
from warpy.check.state import join
from warpy.isa.operands import GMem, RVec, elem_name
from warpy.isa.families import memory as isa
from warpy.check.semantics import semantics


def _width(mods: tuple[str, ...]) -> int:
    if "128" in mods:
        return 16
    if "64" in mods:
        return 8
    if "U8" in mods or "S8" in mods:
        return 1
    if "U16" in mods or "S16" in mods:
        return 2
    return 4


def _active(v: Any, lanes: Any) -> np.ndarray:
    a = np.broadcast_to(np.asarray(v, dtype=np.int64), (32,))
    return a if lanes is None else a[lanes]


def _regs_of(op: Any, n: int) -> list[str]:
    if isinstance(op, RVec):
        return [elem_name(op.name, i) for i in range(n)]
    return [op.name] + [elem_name(op.name, i) for i in range(1, n)] if n > 1 else [op.name]


def _smem_access(m: Any, w: Any, c: Any, addrs: np.ndarray, nbytes: int, kind: str) -> None:
    if addrs.size == 0:
        return
    lo, hi = int(addrs.min()), int(addrs.max()) + nbytes
    if not m.check_smem_range(w, c, lo, hi):
        return
    words = m.smem_words(addrs, nbytes)
    m.access("smem", w.cta, words, kind, w.vc, w.agent, w.vc[w.agent], c.mnem, w)


@semantics(isa.LDS)
def _lds(m: Any, w: Any, c: Any, lanes: Any) -> None:
    nb = _width(c.instr.mods)
    addrs = _active(c.get[1](w), lanes)
    _smem_access(m, w, c, addrs, nb, "r")
    if m.values and w.cta.smem is not None:
        _load_regs(m, w, c, c.instr.ops[0], lambda a, n: w.cta.smem[a:a + n], c.get[1](w), nb, lanes)
    elif m.shadow and addrs.size:
        # without values, shared memory holds only the words the machine itself wrote (an allocation's
        # address, a cluster-launch-control answer): an LDS of one reads it
        a0 = int(addrs[0])
        if (w.cta.index, a0) in m.shadow:
            from warpy.isa.values import writer
            from warpy.isa.operands import R

            for k, n in enumerate(_regs_of(c.instr.ops[0], max(1, nb // 4))):
                writer(R(n))(w, m.shadow.get((w.cta.index, a0 + 4 * k), 0), lanes)


def _load_regs(m: Any, w: Any, c: Any, dst: Any, fetch: Any, addr: Any, nb: int, lanes: Any) -> None:
    from warpy.isa.values import writer
    from warpy.isa.operands import R

    nregs = max(1, nb // 4)
    names = _regs_of(dst, nregs)
    av = np.broadcast_to(np.asarray(addr, dtype=np.int64), (32,))
    act = np.ones(32, dtype=bool) if lanes is None else lanes
    out = np.zeros((32, nregs), dtype=np.uint64)
    for ln in range(32):
        if not act[ln]:
            continue
        raw = np.asarray(fetch(int(av[ln]), nb), dtype=np.uint8)
        if raw.size < nb:
            continue
        if nb < 4:
            out[ln, 0] = int.from_bytes(raw.tobytes(), "little")
        else:
            out[ln] = raw.view("<u4").astype(np.uint64)
    for k, n in enumerate(names):
        writer(R(n))(w, out[:, k].copy(), lanes)


def _store_bytes(w: Any, src: Any, nb: int, lanes: Any) -> np.ndarray:
    nregs = max(1, nb // 4)
    names = _regs_of(src, nregs)
    vals = [np.broadcast_to(np.asarray(w.regs.get(n, 0), dtype=np.uint64), (32,)) for n in names]
    arr = np.stack(vals, axis=1).astype(np.uint32)
    b = arr.view(np.uint8).reshape(32, nregs * 4)
    return b[:, :nb]


@semantics(isa.STS)
def _sts(m: Any, w: Any, c: Any, lanes: Any) -> None:
    nb = _width(c.instr.mods)
    addrs = _active(c.get[0](w), lanes)
    _smem_access(m, w, c, addrs, nb, "w")
    if m.values and w.cta.smem is not None:
        data = _store_bytes(w, c.instr.ops[1], nb, lanes)
        av = np.broadcast_to(np.asarray(c.get[0](w), dtype=np.int64), (32,))
        act = np.ones(32, dtype=bool) if lanes is None else lanes
        for ln in np.nonzero(act)[0]:
            a = int(av[ln])
            if a + nb <= w.cta.smem.size:
                w.cta.smem[a:a + nb] = data[ln]


def _gaddr(w: Any, op: GMem) -> Any:
    lo = w.regs.get(elem_name(op.addr.name, 0), 0)
    hi = w.regs.get(elem_name(op.addr.name, 1), 0)
    if isinstance(lo, np.ndarray) or isinstance(hi, np.ndarray):
        return (np.asarray(lo, dtype=np.int64) | (np.asarray(hi, dtype=np.int64) << 32)) + op.offset
    return (lo | (hi << 32)) + op.offset


def _global(m: Any, w: Any, c: Any, lanes: Any, gop: GMem, kind: str) -> tuple[Any, np.ndarray, int]:
    nb = _width(c.instr.mods)
    m.pdl_check(w, c)
    addrs = _active(_gaddr(w, gop), lanes)
    src = m.check_global(w, c, addrs, nb)
    # GPU-scope (.STRONG.GPU) accesses and reductions are atomic: flags between CTAs, not data races
    if src is not None and "STRONG" not in c.instr.mods:
        words = m.smem_words(addrs, nb)
        m.access("global", None, words, kind, w.vc, w.agent, w.vc[w.agent], c.mnem, w)
    return src, addrs, nb


def _shadowed(m: Any, src: Any, addrs: np.ndarray) -> bool:
    """Without values, the words of u32/s32 global buffers (flags, counters) are still kept."""
    if src is None or addrs.size == 0:
        return False
    off = int(addrs[0]) - m.src_base[src]
    b = m.global_buffer_of(src, off, off + 4)
    return b is not None and b.elem in ("u32", "s32")


@semantics(isa.LDG)
def _ldg(m: Any, w: Any, c: Any, lanes: Any) -> Any:
    gop = c.instr.ops[1]
    src, addrs, nb = _global(m, w, c, lanes, gop, "r")
    if m.values and src is not None:
        base = m.src_base[src]
        mem = m.gmem[src]
        if src in m.params and src not in m.tmaps and addrs.size and "STRONG" not in c.instr.mods:
            wr = m.gwritten[src]
            offs = (addrs.astype(np.int64) - base)[:, None] + np.arange(nb)[None, :]
            offs = offs[(offs >= 0) & (offs < wr.size)]
            if offs.size and not wr[offs].all():
                w.cta.foreign = True
        _load_regs(m, w, c, c.instr.ops[0], lambda a, n: mem[a - base:a - base + n], _gaddr(w, gop), nb, lanes)
    elif nb == 4 and _shadowed(m, src, addrs):
        av = np.broadcast_to(np.asarray(_gaddr(w, gop), dtype=np.int64), (32,))
        v = np.array([m.gshadow.get(int(a), 0) for a in av], dtype=np.uint64)
        c.put[0](w, int(v[0]) if (v == v[0]).all() else v, lanes)
    if "STRONG" in c.instr.mods and addrs.size:
        addr = int(addrs[0])
        rel = m.flag_vc.get(addr)
        if rel is not None:  # a relaxed load: what the flag releases is acquired by the next fence
            for k, v in rel.items():
                if w.acquired.get(k, 0) < v:
                    w.acquired[k] = v
        spin = c.extra.get("spin")
        if spin is not None:
            return _spin(m, w, c, spin, addr, lanes)
    return None


def _spin(m: Any, w: Any, c: Any, spin: Any, addr: int, lanes: Any) -> Any:
    """A flag loop whose flag does not yet hold what it waits for blocks the warp until a simulated
    warp writes the flag (or, when nothing else can run, the rest of the grid raises it)."""
    s, loop_on_false = spin
    mods = s.instr.mods
    x = first(w.regs.get(c.instr.ops[0].name, 0), lanes)
    y = first(s.get[3](w), lanes)
    t = {"EQ": x == y, "NE": x != y, "LT": x < y, "LE": x <= y, "GT": x > y, "GE": x >= y}[mods[0]]
    leaves = t if loop_on_false else not t
    if leaves:
        return None
    want = {"EQ": y, "GE": y, "GT": y + 1, "NE": y + 1, "LE": y, "LT": y - 1}[mods[0]]
    if not loop_on_false:
        want = {"EQ": y + 1, "NE": y, "LT": y, "LE": y + 1, "GT": y, "GE": y - 1}[mods[0]]
    w.state = 1
    w.block = ("flag", addr, want & M32)
    m.flag_waiters.append(w)
    from warpy.check.machine import BLOCK

    return BLOCK


def flag_value(m: Any, addr: int, value: int) -> None:
    """The rest of the grid writes a flag word."""
    src, off = m.global_source(addr)
    m.gshadow[addr] = value
    if m.values and src is not None and 0 <= off and off + 4 <= m.gmem[src].size:
        m.gmem[src][off:off + 4] = np.frombuffer(np.uint32(value).tobytes(), dtype=np.uint8)


def _release_flag(m: Any, w: Any, c: Any, addrs: np.ndarray) -> None:
    """A relaxed GPU-scope write raises a flag: it releases what the warp did before its last
    `MEMBAR.*.GPU` (a release is the fence, then the relaxed write), not what came after."""
    if "STRONG" in c.instr.mods and addrs.size:
        w.tick()
        vc = dict(w.fenced_vc)
        for a in np.unique(addrs):
            join(m.flag_vc.setdefault(int(a), {}), vc)
            m.wake_flag_waiters(int(a))


@semantics(isa.STG)
def _stg(m: Any, w: Any, c: Any, lanes: Any) -> None:
    gop = c.instr.ops[0]
    src, addrs, nb = _global(m, w, c, lanes, gop, "w")
    m.stores_seen += 1
    if not m.values and nb == 4 and _shadowed(m, src, addrs):
        av = _active(_gaddr(w, gop), lanes)
        v = _active(w.regs.get(c.instr.ops[1].name, 0), lanes)
        for a, x in zip(av, v):
            m.gshadow[int(a)] = int(x) & M32
    _release_flag(m, w, c, addrs)
    if m.values and src is not None:
        base = m.src_base[src]
        data = _store_bytes(w, c.instr.ops[1], nb, lanes)
        act = np.ones(32, dtype=bool) if lanes is None else lanes
        av = np.broadcast_to(np.asarray(_gaddr(w, gop), dtype=np.int64), (32,))
        mem, wr = m.gmem[src], m.gwritten[src]
        for ln in np.nonzero(act)[0]:
            o = int(av[ln]) - base
            if 0 <= o and o + nb <= mem.size:
                mem[o:o + nb] = data[ln]
                wr[o:o + nb] = True
                if w.cta.foreign:
                    m.greduced[src][o:o + nb] = True


def _nmat(mods: tuple[str, ...]) -> int:
    return int(mods[-1]) if mods and mods[-1] in ("1", "2", "4") else 1


def _matrix(m: Any, w: Any, c: Any, lanes: Any, store: bool) -> None:
    n = _nmat(c.instr.mods)
    mem_op = 0 if store else 1
    av = np.broadcast_to(np.asarray(c.get[mem_op](w), dtype=np.int64), (32,))
    rows = av[: 8 * n]
    _smem_access(m, w, c, rows, 16, "w" if store else "r")
    if not (m.values and w.cta.smem is not None):
        return
    trans = "T" in c.instr.mods
    reg_op = c.instr.ops[1] if store else c.instr.ops[0]
    names = _regs_of(reg_op, n)
    smem = w.cta.smem
    lane = np.arange(32)
    for j in range(n):
        # matrix j: rows addressed by lanes 8j..8j+7; lane t holds row t//4, columns 2(t%4), +1
        r, col = lane // 4, 2 * (lane % 4)
        base = rows[8 * j:8 * j + 8]
        if store:
            v = np.broadcast_to(np.asarray(w.regs.get(names[j], 0), dtype=np.uint64), (32,)).astype(np.uint32)
            halves = np.stack([v & 0xFFFF, v >> 16], axis=1).astype(np.uint16)
            for t in range(32):
                for h in range(2):
                    rr, cc = (r[t], col[t] + h) if not trans else (col[t] + h, r[t])
                    a = int(base[rr]) + 2 * cc
                    smem[a:a + 2] = np.frombuffer(halves[t, h].tobytes(), dtype=np.uint8)
        else:
            out = np.zeros(32, dtype=np.uint64)
            for t in range(32):
                hv = []
                for h in range(2):
                    rr, cc = (r[t], col[t] + h) if not trans else (col[t] + h, r[t])
                    a = int(base[rr]) + 2 * cc
                    hv.append(int.from_bytes(smem[a:a + 2].tobytes(), "little"))
                out[t] = hv[0] | (hv[1] << 16)
            from warpy.isa.values import writer
            from warpy.isa.operands import R

            writer(R(names[j]))(w, out, lanes)


@semantics(isa.LDSM)
def _ldsm(m: Any, w: Any, c: Any, lanes: Any) -> None:
    _matrix(m, w, c, lanes, False)


@semantics(isa.STSM)
def _stsm(m: Any, w: Any, c: Any, lanes: Any) -> None:
    _matrix(m, w, c, lanes, True)


@semantics(isa.REDG)
def _redg(m: Any, w: Any, c: Any, lanes: Any) -> None:
    gop = c.instr.ops[0]
    src, addrs, nb = _global(m, w, c, lanes, gop, "red")
    if not m.values:
        av = _active(_gaddr(w, gop), lanes)
        v = _active(w.regs.get(c.instr.ops[1].name, 0), lanes)
        for a, x in zip(av, v):
            m.gshadow[int(a)] = (m.gshadow.get(int(a), 0) + int(x)) & M32
    _release_flag(m, w, c, addrs)
    if m.values and src is not None:
        base = m.src_base[src]
        mem = m.gmem[src]
        act = np.ones(32, dtype=bool) if lanes is None else lanes
        av = np.broadcast_to(np.asarray(_gaddr(w, gop), dtype=np.int64), (32,))
        v = np.broadcast_to(np.asarray(w.regs.get(c.instr.ops[1].name, 0), dtype=np.uint64), (32,))
        for ln in np.nonzero(act)[0]:
            o = int(av[ln]) - base
            if 0 <= o and o + 4 <= mem.size:
                cur = int(mem[o:o + 4].view("<u4")[0])
                mem[o:o + 4] = np.frombuffer(np.uint32((cur + int(v[ln])) & M32).tobytes(), dtype=np.uint8)


_ = M32
