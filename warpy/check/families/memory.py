"""Shared and global loads and stores, and the matrix forms (ldmatrix / stmatrix).

Each access is checked against the declared buffers (shared: a `.buffer ... smem`; global: a
`.buffer ... global` behind the pointer) and recorded for the happens-before check: a generic-proxy
access by the warp, stamped with the warp's clock. With values, the bytes move. GPU-scope
(`.STRONG`) loads and stores are flags between CTAs (`warpy.check.flags`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Union

import numpy as np

from warpy.isa.values import M32, Val, writer
from warpy.isa.operands import GMem, Mem, Operand, R, RVec, elem_name
from warpy.isa.semantics import F32, decode, f_add
from warpy.isa.families import memory as isa
from warpy.check.happens_before import bytes_of
from warpy.check.registers import active, all_lanes, lanes_i64, lanes_u64, reg_name, regs_of
from warpy.check.semantics import semantics
from warpy.check.state import Lanes, Warp

if TYPE_CHECKING:
    from warpy.check.code import Compiled
    from warpy.check.machine import Machine


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


def _gmem_op(op: Operand) -> GMem:
    if not isinstance(op, GMem):
        raise TypeError(f"{op} is not a global address")
    return op


def _atom_op(op: Operand) -> Union[GMem, Mem]:
    if not isinstance(op, (GMem, Mem)):
        raise TypeError(f"{op} is not a global address")
    return op


def _aligned(m: Machine, w: Warp, c: Compiled, addrs: np.ndarray, nbytes: int, space: str) -> None:
    """A vector access (8 or 16 bytes, or a 16-bit one) faults on the GPU unless its address is a
    multiple of its size."""
    if addrs.size and nbytes > 1:
        bad = addrs[(addrs % nbytes) != 0]
        if bad.size:
            m.problems.add("memory", f"{w.cta.name} warp {w.wid}: {c.mnem} at {space} address 0x{int(bad[0]):x}: a "
                                     f"{nbytes}-byte access needs an address that is a multiple of {nbytes}")


def _smem_access(m: Machine, w: Warp, c: Compiled, addrs: np.ndarray, nbytes: int, kind: str) -> None:
    if addrs.size == 0:
        return
    _aligned(m, w, c, addrs, nbytes, "shared")
    lo, hi = int(addrs.min()), int(addrs.max()) + nbytes
    if not m.places.check_smem_range(w, c, lo, hi):
        return
    m.order.access("smem", w.cta, None, kind, w.vc, w.agent, w.vc[w.agent], c.mnem, w, byte_idx=bytes_of(addrs, nbytes))


@semantics(isa.LDS)
def _lds(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    nb = _width(c.instr.mods)
    addrs = active(c.get[1](w), lanes)
    _smem_access(m, w, c, addrs, nb, "r")
    smem = w.cta.smem
    if m.values and smem is not None:
        _load_regs(w, c.instr.ops[0], smem, 0, c.get[1](w), nb, lanes, _signed(c.instr.mods))
    elif w.cta.shadow and addrs.size:
        # without values, shared memory holds only the words the machine itself wrote (an allocation's
        # address, a cluster-launch-control answer): an LDS of one reads it
        a0 = int(addrs[0])
        if a0 in w.cta.shadow:
            for k, n in enumerate(regs_of(c.instr.ops[0], max(1, nb // 4))):
                writer(R(n))(w, w.cta.shadow.get(a0 + 4 * k, 0), lanes)


def _signed(mods: tuple[str, ...]) -> bool:
    """A signed narrow load (.S8, .S16): its value is sign-extended into the 32-bit register."""
    return "S8" in mods or "S16" in mods


def _load_regs(w: Warp, dst: Operand, buf: np.ndarray, base: int, addr: Val, nb: int, lanes: Lanes,
               signed: bool = False) -> None:
    """Each taking lane's nb bytes at its address (`buf` the bytes from address `base` on) into the
    destination registers, little-endian; a narrow load zero- or sign-extended to 32 bits. A lane
    whose bytes are not all inside `buf` reads zeros (the access itself is reported elsewhere)."""
    nregs = max(1, nb // 4)
    names = regs_of(dst, nregs)
    off = lanes_i64(addr) - base
    take = all_lanes(lanes) & (off >= 0) & (off + nb <= buf.size)
    out = np.zeros((32, nregs), dtype=np.uint64)
    if take.any():
        raw = buf[off[take][:, None] + np.arange(nb)]  # [lanes taking part, nb] bytes
        if nb < 4:
            v = np.zeros(raw.shape[0], dtype=np.uint64)
            for i in range(nb):
                v |= raw[:, i].astype(np.uint64) << np.uint64(8 * i)
            if signed:
                top = (v >> np.uint64(8 * nb - 1)) & np.uint64(1)
                v |= top * np.uint64(M32 ^ ((1 << (8 * nb)) - 1))
            out[take, 0] = v
        else:
            out[take] = np.ascontiguousarray(raw).view("<u4").astype(np.uint64)
    cols = out.T.copy()  # a register's 32 lanes contiguous
    for k, n in enumerate(names):
        writer(R(n))(w, cols[k], lanes)


def _store_bytes(w: Warp, src: Operand, nb: int) -> np.ndarray:
    nregs = max(1, nb // 4)
    names = regs_of(src, nregs)
    vals = [lanes_u64(w.regs.get(n, 0)) for n in names]
    arr = np.stack(vals, axis=1).astype(np.uint32)
    b = arr.view(np.uint8).reshape(32, nregs * 4)
    return b[:, :nb]


@semantics(isa.STS)
def _sts(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    nb = _width(c.instr.mods)
    addrs = active(c.get[0](w), lanes)
    _smem_access(m, w, c, addrs, nb, "w")
    if addrs.size and (w.tags or m.prov.smem.get(w.cta.index)):
        m.prov.store_shared(w, regs_of(c.instr.ops[1], max(1, nb // 4)), int(addrs.min()), int(addrs.max()) + nb)
    smem = w.cta.smem
    if m.values and smem is not None:
        data = _store_bytes(w, c.instr.ops[1], nb)
        av = lanes_i64(c.get[0](w))
        act = all_lanes(lanes)
        for ln in np.nonzero(act)[0]:
            a = int(av[ln])
            if a + nb <= smem.size:
                smem[a:a + nb] = data[ln]


def _gaddr(w: Warp, op: Union[GMem, Mem]) -> Val:
    """The 64-bit global address of `desc[..][R.64+off]` (or of `[R+off]`, a pair, as a CAS prints it)."""
    base = op.addr if isinstance(op, GMem) else op.base
    if not isinstance(base, (R, RVec)):
        raise TypeError(f"{op} is not a global address in a register pair")
    lo = w.regs.get(elem_name(base.name, 0), 0)
    hi = w.regs.get(elem_name(base.name, 1), 0)
    if isinstance(lo, np.ndarray) or isinstance(hi, np.ndarray):
        return (np.asarray(lo, dtype=np.int64) | (np.asarray(hi, dtype=np.int64) << 32)) + op.offset
    return (lo | (hi << 32)) + op.offset


def _global(m: Machine, w: Warp, c: Compiled, lanes: Lanes, gop: Union[GMem, Mem], kind: str) -> tuple[Optional[str], np.ndarray, int]:
    nb = _width(c.instr.mods)
    gm = m.global_memory
    gm.pdl_check(w, c)
    addrs = active(_gaddr(w, gop), lanes)
    _aligned(m, w, c, addrs, nb, "global")
    src = gm.check(w, c, addrs, nb)
    # GPU-scope (.STRONG.GPU) accesses and reductions are atomic: flags between CTAs, not data races
    if src is not None and "STRONG" not in c.instr.mods:
        m.order.access("global", None, None, kind, w.vc, w.agent, w.vc[w.agent], c.mnem, w, byte_idx=bytes_of(addrs, nb))
    return src, addrs, nb


def _shadowed(m: Machine, src: Optional[str], addrs: np.ndarray) -> bool:
    """Without values, the words of u32/s32 global buffers (flags, counters) are still kept."""
    if src is None or addrs.size == 0:
        return False
    gm = m.global_memory
    off = int(addrs[0]) - gm.base[src]
    b = gm.buffer_of(src, off, off + 4)
    return b is not None and b.elem in ("u32", "s32")


@semantics(isa.LDG)
def _ldg(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> Optional[int]:
    gop = _gmem_op(c.instr.ops[1])
    src, addrs, nb = _global(m, w, c, lanes, gop, "r")
    gm = m.global_memory
    if "CONSTANT" in c.instr.mods and m.values and src is not None and addrs.size:
        offs = (addrs.astype(np.int64) - gm.base[src])[:, None] + np.arange(nb)[None, :]
        wr = gm.gwritten[src]
        offs = offs[(offs >= 0) & (offs < wr.size)]
        if offs.size and wr[offs].any():
            m.problems.add("memory", f"{w.cta.name} warp {w.wid}: {c.mnem} reads {src}+0x{int(offs.min()):x} through the "
                                     f"read-only path, and this launch wrote there (it may read the old bytes)")
    if m.values and src is not None:
        base = gm.base[src]
        mem = gm.gmem[src]
        if src in gm.params and src not in gm.tmaps and addrs.size and "STRONG" not in c.instr.mods:
            wr = gm.gwritten[src]
            offs = (addrs.astype(np.int64) - base)[:, None] + np.arange(nb)[None, :]
            offs = offs[(offs >= 0) & (offs < wr.size)]
            if offs.size and not wr[offs].all():
                w.cta.foreign = True
        _load_regs(w, c.instr.ops[0], mem, base, _gaddr(w, gop), nb, lanes,
                   _signed(c.instr.mods))
    elif nb == 4 and _shadowed(m, src, addrs):
        av = lanes_i64(_gaddr(w, gop))
        v = np.array([gm.shadow.get(int(a), 0) for a in av], dtype=np.uint64)
        c.put[0](w, int(v[0]) if (v == v[0]).all() else v, lanes)
    if "STRONG" in c.instr.mods and addrs.size and not (c.loop is not None and m.flags.stale_passes(m, w, c, addrs)):
        for a in np.unique(addrs):
            m.flags.acquire(w, int(a))
    if c.loop is not None and addrs.size:
        m.flags.polled_by(w, c, addrs)
    return None


def _release_flag(m: Machine, w: Warp, c: Compiled, addrs: np.ndarray, nb: int = 4) -> None:
    if "STRONG" in c.instr.mods and addrs.size:
        # every 32-bit word the write covers is a flag it may raise (a 64-bit store's upper word too)
        m.flags.release(w, (addrs[:, None] + np.arange(0, max(nb, 4), 4)[None, :]).ravel())
    if addrs.size:
        m.flags.written(addrs, nb)


@semantics(isa.STG)
def _stg(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    gop = _gmem_op(c.instr.ops[0])
    src, addrs, nb = _global(m, w, c, lanes, gop, "w")
    gm = m.global_memory
    gm.stores_seen += 1
    if src is not None and addrs.size and "STRONG" not in c.instr.mods and src in m.prov.cover.outputs:
        m.prov.cover.stg(src, addrs - gm.base[src], nb)
    if w.tags:
        for r in regs_of(c.instr.ops[1], max(1, nb // 4)):
            if r in w.tags:
                m.prov.store_global(w, c, r, src, addrs)
                break
    if not m.values and nb >= 4 and _shadowed(m, src, addrs):  # each 32-bit word of a wider store too
        av = active(_gaddr(w, gop), lanes)
        for k, r in enumerate(regs_of(c.instr.ops[1], nb // 4)):
            v = active(w.regs.get(r, 0), lanes)
            for a, x in zip(av, v):
                gm.shadow[int(a) + 4 * k] = int(x) & M32
    _release_flag(m, w, c, addrs, nb)
    if m.values and src is not None:
        base = gm.base[src]
        data = _store_bytes(w, c.instr.ops[1], nb)
        act = all_lanes(lanes)
        av = lanes_i64(_gaddr(w, gop))
        mem, wr = gm.gmem[src], gm.gwritten[src]
        for ln in np.nonzero(act)[0]:
            o = int(av[ln]) - base
            if 0 <= o and o + nb <= mem.size:
                mem[o:o + nb] = data[ln]
                wr[o:o + nb] = True
                if w.cta.foreign:
                    gm.greduced[src][o:o + nb] = True


def _nmat(mods: tuple[str, ...]) -> int:
    return int(mods[-1]) if mods and mods[-1] in ("1", "2", "4") else 1


def _matrix(m: Machine, w: Warp, c: Compiled, lanes: Lanes, store: bool) -> None:
    n = _nmat(c.instr.mods)
    mem_op = 0 if store else 1
    av = lanes_i64(c.get[mem_op](w))
    rows = av[: 8 * n]
    _smem_access(m, w, c, rows, 16, "w" if store else "r")
    if store and rows.size and (w.tags or m.prov.smem.get(w.cta.index)):
        m.prov.store_shared(w, regs_of(c.instr.ops[1], n), int(rows.min()), int(rows.max()) + 16)
    smem = w.cta.smem
    if not (m.values and smem is not None):
        return
    trans = "T" in c.instr.mods
    reg_op = c.instr.ops[1] if store else c.instr.ops[0]
    names = regs_of(reg_op, n)
    lane = np.arange(32)
    for j in range(n):
        # matrix j: rows addressed by lanes 8j..8j+7; lane t holds row t//4, columns 2(t%4), +1
        r, col = lane // 4, 2 * (lane % 4)
        base = rows[8 * j:8 * j + 8]
        if store:
            v = lanes_u64(w.regs.get(names[j], 0)).astype(np.uint32)
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
            writer(R(names[j]))(w, out, lanes)


@semantics(isa.LDSM)
def _ldsm(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    _matrix(m, w, c, lanes, False)


@semantics(isa.STSM)
def _stsm(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    _matrix(m, w, c, lanes, True)


def atomic_update(op: str, mods: tuple[str, ...], old: int, v: int, cmp: int = 0) -> int:
    """The word an atomic leaves: op (ADD, MIN, MAX, EXCH, CAS) of the old word and v (u32; .S32
    signed; .F32 an fp32 add, flushed and rounded to nearest even)."""
    if op == "ADD" and "F32" in mods:
        a, b = decode(old, F32), decode(v, F32)
        return int(f_add(a, b, F32, "RN", ftz=True)[0])
    if op == "ADD":
        return (old + v) & M32
    if op in ("MIN", "MAX"):
        key = (lambda x: x - (1 << 32) if x >> 31 else x) if "S32" in mods else (lambda x: x)
        return (min if op == "MIN" else max)(old, v, key=key)
    if op == "EXCH":
        return v
    if op == "CAS":
        return v if old == cmp else old
    raise ValueError(f"atomic {op}")


def _atomic(m: Machine, w: Warp, c: Compiled, lanes: Lanes, gop: Union[GMem, Mem], v_op: Operand,
            cmp_op: Optional[Operand]) -> Optional[np.ndarray]:
    """Apply a global atomic lane by lane (lowest lane first, one valid order of the GPU's); the old
    words, per lane (None where neither values nor a u32 buffer's shadow keep them). Only lanes that
    change their word (or whose word nothing keeps) wake the word's waiters: an atomic that leaves it
    as it was (an add of 0, a CAS that fails, a poll through an atomic) is no write a poll could see."""
    src, addrs, nb = _global(m, w, c, lanes, gop, "red")
    gm = m.global_memory
    op = c.instr.mods[1]
    act = all_lanes(lanes)
    av = lanes_i64(_gaddr(w, gop))
    vv = lanes_u64(w.regs.get(reg_name(v_op), 0))
    cv = lanes_u64(w.regs.get(reg_name(cmp_op), 0)) if cmp_op is not None else np.zeros(32, dtype=np.uint64)
    olds = np.zeros(32, dtype=np.uint64)
    changed = np.ones(32, dtype=bool)  # lanes whose word may have changed (all, where nothing keeps it)
    kept = False
    if m.values and src is not None:
        base, mem, wr = gm.base[src], gm.gmem[src], gm.gwritten[src]
        for ln in np.nonzero(act)[0]:
            o = int(av[ln]) - base
            if 0 <= o and o + 4 <= mem.size:
                cur = int(mem[o:o + 4].view("<u4")[0])
                olds[ln] = cur
                new = atomic_update(op, c.instr.mods, cur, int(vv[ln]), int(cv[ln]))
                changed[ln] = new != cur
                mem[o:o + 4] = np.frombuffer(np.uint32(new).tobytes(), dtype=np.uint8)
                if cmp_op is not None or c.sem == "atomic-global":
                    wr[o:o + 4] = True
        kept = True
    elif _shadowed(m, src, addrs):
        for ln in np.nonzero(act)[0]:
            a = int(av[ln])
            cur = gm.shadow.get(a, 0)
            olds[ln] = cur
            gm.shadow[a] = atomic_update(op, c.instr.mods, cur, int(vv[ln]), int(cv[ln]))
            changed[ln] = gm.shadow[a] != cur
        kept = True
    elif not m.values and op == "ADD" and "F32" not in c.instr.mods:
        for ln in np.nonzero(act)[0]:  # (the REDG counters of programs without u32 buffers)
            a = int(av[ln])
            gm.shadow[a] = (gm.shadow.get(a, 0) + int(vv[ln])) & M32
            changed[ln] = (int(vv[ln]) & M32) != 0
    if "STRONG" in c.instr.mods and addrs.size:  # a release even where the word stays (a release sequence)
        m.flags.release(w, addrs)
    moved = av[act & changed]
    if moved.size:
        m.flags.written(moved)
    if addrs.size and c.sem == "atomic-global":  # it reads the word: what its writers released, the next fence acquires
        for a in np.unique(addrs):
            m.flags.acquire(w, int(a))
        if c.loop is not None:
            m.flags.polled_by(w, c, addrs)
    return olds if kept else None


@semantics(isa.REDG)
def _redg(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    _atomic(m, w, c, lanes, _gmem_op(c.instr.ops[0]), c.instr.ops[1], None)
    gm = m.global_memory
    addrs = active(_gaddr(w, _gmem_op(c.instr.ops[0])), lanes)
    src, _ = gm.source(int(addrs[0])) if addrs.size else (None, 0)
    if src is not None and src in m.prov.cover.outputs:
        m.prov.cover.stg(src, addrs - gm.base[src], _width(c.instr.mods), reduce=True)


@semantics(isa.ATOMG)
def _atomg(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    ops = c.instr.ops
    cas = len(ops) == 5
    olds = _atomic(m, w, c, lanes, _atom_op(ops[2]), ops[4] if cas else ops[3], ops[3] if cas else None)
    out = np.zeros(32, dtype=np.uint64) if olds is None else olds
    c.put[1](w, int(out[0]) if bool((out == out[0]).all()) else out.copy(), lanes)
    c.put[0](w, True, lanes)
