"""The Hopper tensor core: HGMMA (wgmma) groups with accumulators in registers, fences, commits,
waits, and setmaxnreg.

Each warp's HGMMAs form groups (closed by `WGMMA.COMMIT`, retired in order by
`WARPGROUP.DEPBAR.LE gsb0, n`); the warp's wgmma queue is an agent whose clock is the number of
groups retired, so a stage's reads are ordered before whatever comes after the wait that retired
their group. Accumulator registers an HGMMA writes stay pending until its group is retired: an
instruction that touches one before that is reported. With values, each warp computes its 16 rows
of the 64 x N product from the shared-memory bytes its descriptors point at. QGMMA (8-bit floats,
K-major) is HGMMA with each operand's bytes decoded as its own type (e4m3 / e5m2, exactly: every
value and every product of two is exact in fp32) and the products summed in fp32."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Union

import numpy as np

from warpy.isa.values import LANES, first, reg_ids, writer
from warpy.numeric import from_bits
from warpy.isa.operands import UP, Desc, Operand, R, elem_name
from warpy.isa.families import wgmma as isa
from warpy.check.families.tma import operand_layout, operands_meet
from warpy.check.happens_before import Footprint, masks_of
from warpy.check.registers import imm, lanes_u64, reg_name, regs_of
from warpy.layout.atoms import wgmma_a_register_layout
from warpy.layout.desc import MN_INTERLEAVE_LBO_IS_K_STRIDE, MN_SWIZZLED_LBO_IS_MN_STRIDE
from warpy.check.semantics import semantics
from warpy.check.state import Agent, Lanes, Warp

if TYPE_CHECKING:
    from warpy.check.code import Compiled, Span
    from warpy.check.machine import Machine

_SW_BITS = {0: 0, 1: 3, 2: 2, 3: 1}  # GMMA layout type -> swizzle bits (128B, 64B, 32B)


def gmma_rows(lo: int, hi: int, rows: int, kbytes: int) -> np.ndarray:
    """Byte addresses [rows, kbytes] of a K-major operand tile a GMMA descriptor describes."""
    start = (lo & 0x3FFF) << 4
    lbo = ((lo >> 16) & 0x3FFF) << 4
    sbo = (hi & 0x3FFF) << 4
    bits = _SW_BITS[(hi >> 30) & 3]
    return desc_rows(start, lbo, sbo, bits, rows, kbytes)


def desc_rows(start: int, lbo: int, sbo: int, bits: int, rows: int, kbytes: int) -> np.ndarray:
    r = np.arange(rows)[:, None]
    k = np.arange(kbytes)[None, :]
    if bits == 0:
        logical = start + (r // 8) * sbo + (k // 16) * lbo + (r % 8) * 16 + (k % 16)
        return logical.astype(np.int64)
    pitch = 16 << bits
    logical = start + (r // 8) * sbo + (r % 8) * pitch + k
    return (logical ^ ((logical >> 3) & (((1 << bits) - 1) << 4))).astype(np.int64)


def gmma_mn_rows(lo: int, hi: int, rows: int, kbytes: int, eb: int) -> np.ndarray:
    """Byte addresses [rows, kbytes] of an MN-major (`.tnspA`/`.tnspB`) operand tile a GMMA descriptor
    describes: row r (along M or N), K byte k = element k // eb, its byte k % eb."""
    start = (lo & 0x3FFF) << 4
    lbo = ((lo >> 16) & 0x3FFF) << 4
    sbo = (hi & 0x3FFF) << 4
    return desc_mn_rows(start, lbo, sbo, _SW_BITS[(hi >> 30) & 3], rows, kbytes, eb)


def desc_mn_rows(start: int, lbo: int, sbo: int, bits: int, rows: int, kbytes: int, eb: int) -> np.ndarray:
    """The MN-major canonical layouts of `warpy.layout.desc.desc_image` (the LBO/SBO roles its named
    constants give), vectorised: MN contiguous in 16-byte core rows (no swizzle) or swizzle-span rows,
    8 K-rows a group."""
    r = np.arange(rows)[:, None, None]
    k = np.arange(kbytes // eb)[None, :, None]
    b = np.arange(eb)[None, None, :]
    if bits == 0:
        t = 16 // eb
        k_stride, mn_stride = (lbo, sbo) if MN_INTERLEAVE_LBO_IS_K_STRIDE else (sbo, lbo)
        logical = start + (r % t) * eb + (r // t) * mn_stride + (k % 8) * 16 + (k // 8) * k_stride + b
        return logical.reshape(rows, -1).astype(np.int64)
    span = 16 << bits
    se = span // eb
    mn_stride, k_stride = (lbo, sbo) if MN_SWIZZLED_LBO_IS_MN_STRIDE else (sbo, lbo)
    logical = start + (r % se) * eb + (r // se) * mn_stride + (k % 8) * span + (k // 8) * k_stride + b
    logical = logical.reshape(rows, -1)
    return (logical ^ ((logical >> 3) & (((1 << bits) - 1) << 4))).astype(np.int64)


def gmma_tile(lo: int, hi: int, rows: int, kbytes: int, mn: bool, eb: int) -> np.ndarray:
    """The operand tile's byte addresses [rows, kbytes], K-major or (mn) MN-major."""
    return gmma_mn_rows(lo, hi, rows, kbytes, eb) if mn else gmma_rows(lo, hi, rows, kbytes)


Tile = tuple[np.ndarray, Footprint]  # an MMA operand tile: its byte addresses [rows, kbytes], and their footprint
TileKey = tuple[Union[str, int], ...]  # (unit, its descriptor (words), rows, kbytes)


def operand_footprint(m: Machine, key: TileKey, addrs_fn: Callable[[], np.ndarray]) -> Tile:
    """The operand tile a descriptor describes, remembered by its descriptor."""
    hit = m.tiles.get(key)
    if hit is None:
        addrs = addrs_fn()
        hit = (addrs, masks_of(np.unique(addrs)))
        m.tiles[key] = hit
    return hit


def span_of(c: Compiled, op: Operand) -> Span:
    """The registers an asynchronous unit writes (a vector destination): (base, lo, hi), or ()."""
    span = c.span
    if span is None:
        ids = reg_ids(op)
        span = c.span = (ids[0][0], ids[0][1], ids[-1][1] + 1) if ids else ()
    return span


def _desc(op: Operand) -> str:
    """The register a descriptor operand names (its first, for a pair)."""
    if not isinstance(op, Desc):
        raise TypeError(f"{op} is not a descriptor")
    return op.reg.name


_TYPES = {"TF32": ("tf32", 4), "F16": ("fp16", 2), "BF16": ("bf16", 2), "E4M3": ("e4m3", 1), "E5M2": ("e5m2", 1)}


def _elem(mods: tuple[str, ...]) -> tuple[str, str, int]:
    """(A's type, B's type, bytes an element) of an HGMMA (one type) or a QGMMA (A's, then B's)."""
    a_t, eb = _TYPES[mods[2]]
    b_t = _TYPES[mods[3]][0] if len(mods) > 3 else a_t
    return a_t, b_t, eb


def read_matrix(smem: np.ndarray, addrs: np.ndarray, dtype: str, eb: int) -> np.ndarray:
    raw = smem[addrs]  # [rows, kbytes]
    if eb == 1:  # 8-bit floats, decoded exactly
        return from_bits(raw.reshape(raw.shape[0], -1).copy(), dtype)
    if eb == 2:
        bits = raw.reshape(raw.shape[0], -1).copy().view(np.uint16)
        return from_bits(bits, dtype)
    return np.asarray(raw.copy().view(np.float32))


@semantics(isa.HGMMA, isa.QGMMA)
def _hgmma(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    i = c.instr
    shape = i.mods[0].split("x")
    n, k = int(shape[1]), int(shape[2])
    dtype, b_dtype, eb = _elem(i.mods)
    kb = k * eb
    rs = not isinstance(i.ops[1], Desc)  # the RS form: A from registers, the descriptors' B half only
    di = 2 if rs else 1
    acc = i.ops[0]
    if not m.order.enabled:  # the tile pass: only the groups and their pending registers
        span = span_of(c, acc)
        w.wg_open = True
        if span:
            w.pending = [p for p in w.pending if not (p[0] == span[0] and p[1] == span[1])]
            w.pending.append((span[0], span[1], span[2], w.wg_committed + 1, c.mnem))
        return
    dv = _desc(i.ops[di])  # a vector (named) or its first register (a parsed coloured text)
    dnames = c.extra.get("desc_names")
    if not isinstance(dnames, list):
        dnames = c.extra["desc_names"] = [elem_name(dv, j) for j in range(4)]
    d = [int(first(w.regs.get(nm, 0))) for nm in dnames]
    flags = i.ops[di].flags  # type: ignore[union-attr]
    ta, tb = "tnspA" in flags, "tnspB" in flags  # A / B MN-major
    kb_key = ("gmma", d[2], d[3], n, kb, tb)
    fb = operand_footprint(m, kb_key, lambda: gmma_tile(d[2], d[3], n, kb, tb, eb))
    smem_ops = [fb]
    lb = operand_layout(m, w, c, w.cta, kb_key, fb[0], _swizzle(d[3]), "B", tb, eb)
    la = None
    if not rs:
        ka_key = ("gmma", d[0], d[1], 64, kb, ta)
        fa = operand_footprint(m, ka_key, lambda: gmma_tile(d[0], d[1], 64, kb, ta, eb))
        operands_meet(m, w, c, w.cta, (d[0] & 0x3FFF) << 4, (d[2] & 0x3FFF) << 4, ta, tb)
        la = operand_layout(m, w, c, w.cta, ka_key, fa[0], _swizzle(d[1]), "A", ta, eb)
        smem_ops = [fa, fb]
    accumulate = str(i.ops[di + 1]) != "RZ"
    for op in i.ops[di + 2:]:
        if isinstance(op, UP):
            accumulate = accumulate and bool(m.code.read(op)(w))
    _fence_rule(m, w, c, acc, i.ops[1] if rs else None, accumulate)
    names = c.extra["wg_names"]
    assert isinstance(names, list)
    m.prov.mma_regs(w, c, names[:_acc_regs(c)], m.prov.tag(la, 64, lb, n, kb), accumulate)
    agent: Agent = ("wg", w.cta.index, w.wid)
    clock = w.wg_committed + 1
    w.wg_open = True
    for addrs, fp in smem_ops:
        lo, hi = int(addrs.min()), int(addrs.max()) + 1
        if m.places.check_smem_range(w, c, lo, hi):
            m.order.access("smem", w.cta, None, "r", w.vc, agent, clock, c.mnem, w, proxy="async", footprint=fp)
    span = span_of(c, acc)
    if span:
        base, lo_i, hi_i = span
        w.pending = [p for p in w.pending if not (p[0] == base and p[1] == lo_i)]
        w.pending.append((base, lo_i, hi_i, clock, c.mnem))
    smem = w.cta.smem
    if not (m.values and smem is not None):
        return
    b = read_matrix(smem, fb[0], b_dtype, eb)
    wq = w.wid % 4
    a_rows = register_a(w, i.ops[1], wq, k, dtype) if rs else read_matrix(smem, fa[0], dtype, eb)[16 * wq:16 * wq + 16]
    prod = a_rows @ b.T  # [16, n]
    out = c.extra.get("wg_out")
    if not isinstance(out, tuple):
        out = c.extra["wg_out"] = _accumulator_out(reg_name(acc), n)
    names, writers, rows, cols = out
    vals = prod[rows, cols].astype(np.float32)  # [32 lanes, n / 2 registers]
    if accumulate:
        regs = w.regs
        cur = np.empty((LANES, len(names)), dtype=np.uint64)
        for v, nm in enumerate(names):
            cur[:, v] = regs.get(nm, 0)  # (a lane vector, or one value for every lane)
        vals = vals + cur.astype(np.uint32).view(np.float32)
    bits = vals.view(np.uint32).astype(np.uint64).T.copy()  # a register's 32 lanes contiguous
    for v, put in enumerate(writers):
        put(w, bits[v], lanes)


def _accumulator_out(acc: str, n: int) -> tuple[list[str], list[Any], np.ndarray, np.ndarray]:
    """An m64nNk16 accumulator's registers (N / 2 a thread), their writers, and where each lane's
    register v sits in a warp's 16 x N rows of the product: row lane / 4 + 8 ((v / 2) mod 2), column
    8 (v / 4) + 2 (lane mod 4) + v mod 2 (the PTX ISA's wgmma D fragment), as [32, N / 2] indices."""
    names = [elem_name(acc, j) for j in range(n // 2)]
    lane = np.arange(LANES)[:, None]
    v = np.arange(n // 2)[None, :]
    rows = np.broadcast_to(lane // 4 + 8 * ((v // 2) % 2), (LANES, n // 2))
    cols = 8 * (v // 4) + 2 * (lane % 4) + v % 2
    return names, [writer(R(nm)) for nm in names], rows, cols


def register_a(w: Warp, op: Operand, wq: int, k: int, dtype: str) -> np.ndarray:
    """Rows 16wq..16wq+15 of A (16 x k) as warp wq of the warpgroup holds them in registers: thread
    t's value v (register v // 2, half v % 2) is element `wgmma(..., a_from_registers=True).a(t, v)`
    (row + 64 * k) of the layout atom."""
    names = regs_of(op, isa.A_REGS)
    regs = np.stack([lanes_u64(w.regs.get(nm, 0)) for nm in names], axis=1).astype(np.uint32)  # [32, 4]
    halves = np.stack([regs & 0xFFFF, regs >> 16], axis=2).reshape(32, 2 * isa.A_REGS).astype(np.uint16)
    vals = from_bits(halves, dtype)
    rows, cols = _a_places(wq)
    out = np.zeros((16, k), dtype=np.float32)
    out[rows, cols] = vals
    return out


_A_PLACES: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def _a_places(wq: int) -> tuple[np.ndarray, np.ndarray]:
    """Where warp wq's lanes' A values sit in its 16 rows: [32, 2 A_REGS] row and column indices
    (element idx of the atom: row idx mod 64 - 16 wq, column idx / 64)."""
    got = _A_PLACES.get(wq)
    if got is None:
        frag = wgmma_a_register_layout()
        idx = np.array([[int(frag((32 * wq + lane, v))) for v in range(2 * isa.A_REGS)] for lane in range(32)])
        got = _A_PLACES[wq] = (idx % 64 - 16 * wq, idx // 64)
    return got


def _fence_rule(m: Machine, w: Warp, c: Compiled, acc: Operand, a_regs: Optional[Operand], accumulate: bool) -> None:
    """wgmma's register rules: the accumulator (and A's registers) must not have been touched by
    another line since the warp's last wgmma fence, the first MMA needs a fence, and an MMA that
    accumulates reads an accumulator some instruction wrote."""
    hit = c.extra.get("wg_names")
    if not isinstance(hit, list):
        hit = [elem_name(reg_name(acc), j) for j in range(max(1, _acc_regs(c)))]
        if a_regs is not None:
            hit += regs_of(a_regs, isa.A_REGS)
        c.extra["wg_names"] = hit
    names: list[str] = hit
    accs = c.extra.get("wg_accs")
    if not isinstance(accs, frozenset):
        accs = c.extra["wg_accs"] = frozenset(names[:_acc_regs(c)])
    if not w.wg_fenced:
        m.problems.add("registers", f"line {c.pc + 1} ({c.mnem}): {w.cta.name} warp {w.wid} runs before any wgmma fence "
                                    f"(WARPGROUP.ARRIVE) of the warp")
    if w.wg_dirty:
        for nm in names:
            pc = w.wg_dirty.get(nm)
            if pc is not None:
                line = m.code.instrs[pc]
                m.problems.add("registers", f"line {c.pc + 1} ({c.mnem}): {w.cta.name} warp {w.wid} accesses {nm}, which "
                                            f"line {pc + 1} ({line.mnem}) touched after the warp's last wgmma fence: a "
                                            f"WARPGROUP.ARRIVE (wgmma.fence) must come between")
                break
    if accumulate and not accs <= w.defined:
        m.rules.undefined(w, c, accs - w.defined)


def _swizzle(hi: int) -> int:
    """The swizzle span in bytes a GMMA descriptor's high word names (0: none)."""
    bits = _SW_BITS[(hi >> 30) & 3]
    return 16 << bits if bits else 0


def _acc_regs(c: Compiled) -> int:
    """The accumulator registers of an HGMMA: N / 2 for fp32 (the 64 x N tile over 128 threads)."""
    n = int(c.instr.mods[0].split("x")[1])
    return n // 2 if c.instr.mods[1] == "F32" else n // 4


@semantics(isa.WARPGROUP_ARRIVE)
def _fence(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    """wgmma.fence: the warp's register accesses so far are ordered before its next MMAs."""
    w.wg_fenced = True
    w.wg_dirty.clear()


@semantics(isa.WGMMA_COMMIT)
def _commit(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    w.wg_committed += 1
    w.wg_open = False


@semantics(isa.WARPGROUP_DEPBAR)
def _wait(m: Machine, w: Warp, c: Compiled, lanes: Lanes) -> None:
    n = imm(c.instr.ops[1])
    done = max(w.wg_retired, w.wg_committed - n)
    w.wg_retired = done
    agent: Agent = ("wg", w.cta.index, w.wid)
    if w.vc.get(agent, 0) < done:
        w.vc[agent] = done
        w.via[agent] = "wgmma wait"
    if w.pending:
        w.pending = [p for p in w.pending if p[3] > done]
