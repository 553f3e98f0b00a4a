"""Probe kernels: small programs written with warpy.isa's Program builder, each with the host-side
expectation of what it leaves in global memory. tests/lift assembles them for every target they
name (with the disassembly check); tests/gpu runs the sm_90a ones on an H200 and compares every
element.

| probe | what it proves |
|---|---|
| `tma_copy_2d`, `tma_copy_3d` | TMA load global → 128B-swizzled tile (mbarrier + expect_tx), TMA store back; ragged edges: the zero fill on load (seen in a raw dump of the tile) and clipped stores (a wider destination pitch keeps its padding) |
| `tma_split_none`, `tma_split_sw128` | the 3-D TMA boxes `warpy.layout.desc.tma_box` builds for tiles wider than one span (dims out of stride order) land where the tile's layout says |
| `pipe` | a producer warp TMA-loads 64 tiles through a 4-stage ring; two consumer warps read each stage with LDS and copy it out with STG; every byte checked |
| `multicast` | a cluster of 2: each CTA loads half a tile and multicasts it; both CTAs store the whole tile |
| `wgmma_<dtype>_sw<S>` | one warpgroup `HGMMA 64x64x16` (bf16/fp16 → fp32) from descriptors (the isa's derivation for swizzled tiles; `warpy.layout.desc` for the unswizzled one, whose LBO/SBO roles are the open question); `..._flipped` swaps LBO/SBO and must be wrong |
| `umma_1cta`, `umma_2cta` | sm_100a only (assembled and checked, not run): tcgen05.mma with TMEM alloc/relinquish/dealloc, commit, tcgen05.ld |

Every probe is `PROBES[name]`: a `Probe` with `build(sm) -> Program`, its targets, and
`host(rng) -> HostCase` (initial contents of every tensor/pointer parameter, scalar parameters,
and the expected final contents).
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Optional

import attrs
import numpy as np

from warpy.isa.families import alu, control, memory, sync, tcgen05, tma, wgmma
from warpy.isa.operands import RZ, URZ, CBank, GMem, Mem, R, RVec, URVec
from warpy.isa.buffers import Param
from warpy.isa.pipes import init_barriers, wait
from warpy.isa.program import Program
from warpy.isa.units.tcgen05 import utchmma
from warpy.isa.units.tma import tma_load, tma_store
from warpy.isa.units.wgmma import hgmma
from warpy.layout import Layout, Swizzle, SwizzledLayout
from warpy.layout import desc as D
from warpy.layout.smem import smem_tile
from warpy.layout.tma import TmaBox
from warpy.target import ARCHS

SW128 = Swizzle(3, 4, 3)


@attrs.frozen
class HostCase:
    """arrays: initial contents of each tensor map's tensor and each pointer parameter, by name;
    scalars: u32/s32/f32 parameters; expected: final contents to compare (exactly, as bits)."""

    arrays: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]
    scalars: dict[str, int] = attrs.field(factory=dict)


@attrs.frozen
class Probe:
    name: str
    build: Callable[[str], Program]
    archs: tuple[str, ...]
    host: Optional[Callable[[np.random.Generator], HostCase]] = None  # None: assembled only
    doc: str = ""


# ---------------------------------------------------------------------------------------------
# helpers


def _global(p: Program, prm: Param) -> tuple[RVec, URVec]:
    """The pointer parameter in a register pair, and the global memory descriptor."""
    ptr = p.rvec(f"{prm.name}_ptr", 2)
    md = p.urvec("memdesc", 2)
    p.emit(alu.ldc(ptr, prm.cbank()))
    p.emit(alu.uldc(md, CBank(0, p.target.memdesc), p.sm))
    return ptr, md


def _phase0(p: Program) -> R:
    z = p.r("phase0")
    p.emit(alu.mov(z, 0))
    return z


def swizzle_bytes(raw: np.ndarray, bits: int) -> np.ndarray:
    """The bytes of a tile as a `Sw<bits,4,3>` layout puts them: out[sw(o)] = raw[o] (base 1024-aligned)."""
    o = np.arange(raw.size)
    sw = o ^ ((o >> 3) & (((1 << bits) - 1) << 4)) if bits else o
    out = np.empty_like(raw)
    out[sw] = raw
    return out


def _ints(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Small distinct-ish values exactly representable in the dtype."""
    n = int(np.prod(shape))
    if dtype in ("fp16", "bf16"):
        v = (np.arange(n) % 2039 - 1019).astype(np.float32)
        v = rng.permutation(v)
        return _to_16(v.reshape(shape), dtype)
    return rng.integers(-(1 << 20), 1 << 20, size=shape).astype(np.float32).view(np.uint32)


def _to_16(x: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values (exact in the 16-bit type) as the uint16 bits of fp16 / bf16."""
    if dtype == "fp16":
        return x.astype(np.float16).view(np.uint16)
    return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


@attrs.frozen
class TmaCase:
    name: str
    src: TmaBox
    dst: Optional[TmaBox]  # None: no store back
    tile: object  # the buffer's layout (coordinates -> bytes)
    elem: str
    grid: tuple[int, int, int]


def _tma_case(name: str) -> TmaCase:
    if name == "tma_copy_2d":
        rows, cols = 90, 200  # neither a multiple of the 32 x 64 box
        src = TmaBox("fp16", dims=(cols, rows), strides=(cols * 2,), box=(64, 32), swizzle=128)
        dst = TmaBox("fp16", dims=(cols, rows), strides=(208 * 2,), box=(64, 32), swizzle=128)
        return TmaCase(name, src, dst, SwizzledLayout(SW128, Layout((32, 64), (128, 2))), "fp16", (4, 3, 1))
    if name == "tma_copy_3d":
        depth, rows, cols = 5, 20, 96
        src = TmaBox("fp32", dims=(cols, rows, depth), strides=(cols * 4, cols * rows * 4), box=(32, 8, 2), swizzle=128)
        dst = TmaBox("fp32", dims=(cols, rows, depth), strides=(100 * 4, 100 * rows * 4), box=(32, 8, 2), swizzle=128)
        return TmaCase(name, src, dst, SwizzledLayout(SW128, Layout((2, 8, 32), (1024, 128, 4))), "fp32", (3, 3, 3))
    if name in ("tma_split_none", "tma_split_sw128"):
        sw, k = (0, 16) if name == "tma_split_none" else (128, 128)
        st = smem_tile(64, k, "bf16", "K", sw)
        box = D.tma_box(Layout((64, k), (k, 1)), st)
        return TmaCase(name, box, None, st.layout, "bf16", (1, 1, 1))
    raise KeyError(name)


def tma_copy(name: str, sm: str) -> Program:
    """One CTA per box: warp 0 loads the box into the tile (one arrival + expect_tx), every thread
    waits and dumps the raw tile to `dump` (16 bytes a thread a round), then warp 0 stores the tile."""
    case = _tma_case(name)
    src_box = case.src
    rank = src_box.rank
    p = Program(f"probe_{name}", sm, threads=128, grid=case.grid)
    src = p.tmap("src", src_box)
    dst = p.tmap("dst", case.dst) if case.dst is not None else None
    dump = p.param("dump", "u64")
    tile = p.smem("tile", case.tile, case.elem)  # type: ignore[arg-type]
    full = p.barriers("full", 1, count=1)
    init_barriers(p)
    warp = p.warp_index()
    tid = p.r("tid")
    w0 = p.p("is_w0")
    p.emit(alu.isetp("EQ", w0, warp, 0))

    ctaid = []
    crd = []
    for d in range(rank):
        c = p.r(f"cta{d}")
        p.emit(alu.s2r(c, ("SR_CTAID.X", "SR_CTAID.Y", "SR_CTAID.Z")[d]))
        ctaid.append(c)
        x = p.r(f"crd{d}")
        p.emit(alu.imad(x, c, src_box.box[d], RZ))
        crd.append(x)
    origin = tile.at(*([0] * tile.rank()))
    with p.when(w0):
        leader = p.elect()
        tx = p.r("tx")
        p.emit(alu.mov(tx, src_box.box_bytes))
        p.derive.emit_at(full.at(0), lambda m: sync.arrive_expect_tx(m, tx), guard=leader)
        tma_load(p, origin, src, crd, full.at(0))
    wait(p, full.at(0), _phase0(p))

    # the raw tile, 16 bytes per thread per round, at dump + cta * box_bytes
    lin = p.r("cta_lin")  # (cz * gy + cy) * gx + cx
    p.emit(alu.mov(lin, ctaid[rank - 1]))
    for d in reversed(range(rank - 1)):
        p.emit(alu.imad(lin, lin, case.grid[d], ctaid[d]))
    soff = p.r("soff")
    p.emit(alu.imad(soff, tid, 16, RZ))
    goff = p.r("goff")
    p.emit(alu.imad(goff, lin, src_box.box_bytes, soff))
    ptr, md = _global(p, dump)
    gaddr = p.rvec("gaddr", 2)
    p.emit(alu.imad_wide(gaddr, goff, 1, ptr))
    base, off = p.derive.value_reg("addr", origin)
    v = p.rvec("v", 4)
    for q in range(src_box.box_bytes // 2048):
        p.emit(memory.lds(v, Mem(soff, base, off + 2048 * q)))
        p.emit(memory.stg(GMem(md, gaddr, 2048 * q), v))

    if dst is not None:
        p.emit(sync.fence_proxy_async())
        p.emit(sync.bar_sync(0))
        with p.when(w0):
            tma_store(p, origin, dst, crd)
            p.emit(tma.bulk_commit())
            p.emit(tma.bulk_wait(0))
    p.emit(control.exit_())
    return p


def _box_image(box: TmaBox, g: np.ndarray, start: tuple[int, ...]) -> np.ndarray:
    """The box at `start` (dim 0 innermost) of tensor g (numpy order: last axis = dim 0), zero-filled
    out of bounds, as the packed array TMA writes before swizzling (numpy order)."""
    out = np.zeros(tuple(reversed(box.box)), dtype=g.dtype)
    sl_src = []
    sl_dst = []
    for d in reversed(range(box.rank)):
        lo = start[d]
        hi = min(lo + box.box[d], box.dims[d])
        sl_src.append(slice(lo, hi))
        sl_dst.append(slice(0, max(hi - lo, 0)))
    out[tuple(sl_dst)] = g[tuple(sl_src)]
    return out


def tma_copy_host(name: str) -> Callable[[np.random.Generator], HostCase]:
    case = _tma_case(name)

    def host(rng: np.random.Generator) -> HostCase:
        box = case.src
        shape = tuple(reversed(box.dims))
        itype = np.uint16 if box.elem_bytes == 2 else np.uint32
        if box.elem_bytes == 2:
            g = _ints(rng, shape, "fp16" if case.elem == "fp16" else "bf16")
        else:
            g = _ints(rng, shape, "fp32")
        gx, gy, gz = case.grid
        dumps = []
        for z in range(gz):
            for y in range(gy):
                for x in range(gx):
                    start = tuple(c * b for c, b in zip((x, y, z)[: box.rank], box.box))
                    img = _box_image(box, g, start)
                    raw = img.reshape(-1).view(np.uint8)
                    if name.startswith("tma_split"):
                        # the box is a 3-D view of a 64 x K matrix: the same memory, read as the matrix
                        k = case.tile.layout.size() // 64  # type: ignore[attr-defined]
                        dumps.append(_split_image(case, g.reshape(64, k)))
                    else:
                        dumps.append(swizzle_bytes(raw, 3))
        dump = np.concatenate(dumps)
        arrays: dict[str, np.ndarray] = {"src": g, "dump": np.full(dump.size, 0xAB, np.uint8)}
        expected: dict[str, np.ndarray] = {"dump": dump}
        if case.dst is not None:
            dst = case.dst
            pitch = dst.strides[0] // dst.elem_bytes
            if box.rank == 2:
                full = np.full((dst.dims[1], pitch), np.iinfo(itype).max, itype)
                full[:, : dst.dims[0]] = g
            else:
                plane = dst.strides[1] // dst.elem_bytes
                flat = np.full(dst.dims[2] * plane, np.iinfo(itype).max, itype)
                view = flat.reshape(dst.dims[2], plane)[:, : dst.dims[1] * pitch].reshape(dst.dims[2], dst.dims[1], pitch)
                view[:, :, : dst.dims[0]] = g
                full = flat  # type: ignore[assignment]
            arrays["dst"] = np.full(full.shape, np.iinfo(itype).max, itype)
            expected["dst"] = full
        return HostCase(arrays, expected)

    return host


def _split_image(case: TmaCase, g: np.ndarray) -> np.ndarray:
    """The bytes of the tile as its layout places A[r, k] (g is the rows x k matrix, uint16 bits)."""
    lay = case.tile
    rows, k = g.shape
    out = np.zeros(rows * k * 2, np.uint8)
    b = g.view(np.uint8).reshape(rows, k, 2)
    for r in range(rows):
        for c in range(k):
            a = int(lay((r, c)))  # type: ignore[operator]
            out[a : a + 2] = b[r, c]
    return out


# ---------------------------------------------------------------------------------------------
# b. a producer/consumer pipe over a 4-stage ring

PIPE_TILES = 64
PIPE_DEPTH = 4


def pipe(sm: str, tiles: int = PIPE_TILES, depth: int = PIPE_DEPTH) -> Program:
    """Warp 0 produces: waits for an empty stage, arms its full barrier with the tile's bytes and
    TMA-loads tile k (32 rows x 64 fp16, 128B swizzle). Warps 1-2 consume: wait for the full stage,
    copy its 4096 raw bytes to out[k] (LDS.128 / STG.128, 16 bytes a thread a round), reconverge,
    and free the stage (one arrival per warp: frees = 2)."""
    tile_bytes = 32 * 64 * 2
    p = Program("probe_pipe", sm, threads=96)
    src = p.tmap("src", TmaBox("fp16", dims=(64, 32 * tiles), strides=(128,), box=(64, 32), swizzle=128))
    out = p.param("out", "u64")
    ring = p.smem_ring("ring", depth, SwizzledLayout(SW128, Layout((32, 64), (128, 2))), "fp16")
    stage = p.pipe("stage", depth, fills=1, frees=2)
    init_barriers(p)

    with p.role("producer", range(0, 1)):
        leader = p.elect()
        prod = stage.producer("ps")
        with p.loop("k", tiles) as k:
            with prod.stage():
                prod.wait_empty()
                prod.arrive_full(leader, tx_bytes=tile_bytes)
                tma_load(p, prod.slot(ring), src, [0, k * 32], prod.full)

    with p.role("consumer", range(1, 3)):
        leader = p.elect("cleader")
        tid = p.r("tid")
        soff = p.r("soff")
        p.emit(alu.iadd3(soff, tid, -32))
        p.emit(alu.imad(soff, soff, 16, RZ))  # (tid - 32) * 16: 64 threads cover 1024 bytes a round
        ptr, md = _global(p, out)
        gbase = p.rvec("gbase", 2)
        p.emit(alu.imad_wide(gbase, soff, 1, ptr))
        gaddr = p.rvec("gaddr", 2)
        v = p.rvec("v", 4)
        cons = stage.consumer("cs")
        with p.loop("kc", tiles) as kc:
            with cons.stage():
                cons.wait_full()
                base, off = p.derive.value_reg("addr", cons.slot(ring))
                p.emit(alu.imad_wide(gaddr, kc.reg, tile_bytes, gbase))
                for q in range(tile_bytes // 1024):
                    p.emit(memory.lds(v, Mem(soff, base, off + 1024 * q)))
                    p.emit(memory.stg(GMem(md, gaddr, 1024 * q), v))
                p.emit(control.warpsync_all())
                cons.free(leader)
    p.emit(control.exit_())
    return p


def pipe_host(rng: np.random.Generator) -> HostCase:
    g = _ints(rng, (32 * PIPE_TILES, 64), "fp16")
    tiles = g.reshape(PIPE_TILES, 32 * 64)
    want = np.concatenate([swizzle_bytes(t.view(np.uint8), 3) for t in tiles])
    return HostCase({"src": g, "out": np.full(want.size, 0xAB, np.uint8)}, {"out": want})


# ---------------------------------------------------------------------------------------------
# c. a cluster of 2 with a multicast TMA load


def multicast(sm: str) -> Program:
    """A 2-CTA cluster, one warp a CTA: CTA r loads rows [32r, 32r+32) of a 64 x 64 fp16 tile and
    multicasts them to both CTAs (each CTA's barrier expects the whole 8192 bytes); then each CTA
    stores the whole tile at rows [64r, 64r+64) of the destination, and the cluster synchronises
    before exit (no CTA leaves while a multicast into it may be in flight)."""
    p = Program("probe_multicast", sm, threads=32, grid=(2, 1, 1), cluster=(2, 1, 1))
    p.tmap("src", TmaBox("fp16", dims=(64, 64), strides=(128,), box=(64, 32), swizzle=128))
    dst = p.tmap("dst", TmaBox("fp16", dims=(64, 128), strides=(128,), box=(64, 64), swizzle=128))
    tile = p.smem("tile", SwizzledLayout(SW128, Layout((64, 64), (128, 2))), "fp16")
    full = p.barriers("full", 1, count=1)
    init_barriers(p, cluster_sync=True)
    leader = p.elect()
    rank = p.ur("rank")
    p.emit(alu.s2ur(rank, "SR_CgaCtaId"))
    tx = p.r("tx")
    p.emit(alu.mov(tx, 64 * 64 * 2))
    p.derive.emit_at(full.at(0), lambda m: sync.arrive_expect_tx(m, tx), guard=leader)
    # the slice's shared address and coordinate depend on the CTA's rank (a register, not a
    # program index): derive the origin, then add rank * slice by hand
    args = p.urvec("mc_args", 4)
    p.derive.into(args[0], "addr", tile.at(0, 0))
    p.emit(alu.uimad(args[0], rank, 32 * 128, args[0]))
    p.derive.into(args[1], "addr", full.at(0))
    p.emit(alu.umov(args[2], 0))
    p.emit(alu.uimad(args[3], rank, 32, URZ))
    mask = p.ur("cta_mask")
    p.emit(alu.umov(mask, 0b11))
    p.emit(tma.tma_load(Mem(args), "src", mask))
    wait(p, full.at(0), _phase0(p))
    p.emit(sync.fence_proxy_async())
    row = p.ur("row")
    p.emit(alu.uimad(row, rank, 64, URZ))
    tma_store(p, tile.at(0, 0), dst, [0, row])
    p.emit(tma.bulk_commit())
    p.emit(tma.bulk_wait(0))
    p.emit(sync.cluster_arrive())
    p.emit(sync.cluster_wait())
    p.emit(control.exit_())
    return p


def multicast_host(rng: np.random.Generator) -> HostCase:
    g = _ints(rng, (64, 64), "fp16")
    return HostCase({"src": g, "dst": np.full((128, 64), 0xFFFF, np.uint16)}, {"dst": np.concatenate([g, g])})


# ---------------------------------------------------------------------------------------------
# d. one warpgroup wgmma tile

WGMMA_N = 64


@contextlib.contextmanager
def _k_interleave_flipped(flip: bool) -> Iterator[None]:
    old = D.K_INTERLEAVE_LBO_IS_K_STRIDE
    D.K_INTERLEAVE_LBO_IS_K_STRIDE = (not old) if flip else old
    try:
        yield
    finally:
        D.K_INTERLEAVE_LBO_IS_K_STRIDE = old


def wgmma_k(swizzle: int) -> int:
    """The K extent of the probe's tiles: one swizzle span (two 16-byte core matrices unswizzled)."""
    return {128: 64, 64: 32, 32: 16, 0: 16}[swizzle]


def wgmma_probe(dtype: str, swizzle: int, flipped: bool = False, sm: str = "sm_90a") -> Program:
    """C (64 x 64, fp32) = A (64 x K) · Bᵀ (B: 64 x K), both K-major in shared memory, loaded by TMA
    (unswizzled: two 2-D boxes per operand, one per 16-byte K chunk, so that only the descriptor is
    in question); K/16 HGMMAs; each thread stores its 32 accumulator registers in order to
    out[tid * 32 + i]."""
    n, m = WGMMA_N, 64
    k = wgmma_k(swizzle)
    eb = 2
    st = smem_tile(m, k, dtype, "K", swizzle)
    name = f"probe_wgmma_{dtype}_sw{swizzle}" + ("_flipped" if flipped else "")
    p = Program(name, sm, threads=128)
    if swizzle:
        box = D.tma_box(Layout((m, k), (k, 1)), st)
        ta, tb = p.tmap("a", box), p.tmap("b", box)
    else:
        box = TmaBox(dtype, dims=(k, m), strides=(k * eb,), box=(8, m))
        ta, tb = p.tmap("a", box), p.tmap("b", box)
    out = p.param("out", "u64")
    sa = p.smem("sa", st.layout, dtype)
    sb = p.smem("sb", st.layout, dtype)
    full = p.barriers("full", 1, count=1)
    init_barriers(p)
    warp = p.warp_index()
    tid = p.r("tid")
    w0 = p.p("is_w0")
    p.emit(alu.isetp("EQ", w0, warp, 0))
    with p.when(w0):
        leader = p.elect()
        tx = p.r("tx")
        p.emit(alu.mov(tx, 2 * m * k * eb))
        p.derive.emit_at(full.at(0), lambda mm: sync.arrive_expect_tx(mm, tx), guard=leader)
        if swizzle:
            tma_load(p, sa.at(0, 0), ta, [0, 0], full.at(0))
            tma_load(p, sb.at(0, 0), tb, [0, 0], full.at(0))
        else:
            for chunk in range(k // 8):
                tma_load(p, sa.at(0, 8 * chunk), ta, [8 * chunk, 0], full.at(0))
                tma_load(p, sb.at(0, 8 * chunk), tb, [8 * chunk, 0], full.at(0))
    wait(p, full.at(0), _phase0(p))

    acc = p.rvec("acc", n // 2)
    p.emit(wgmma.warpgroup_arrive())
    steps = k // 16
    if swizzle:
        for j in range(steps):
            hgmma(p, acc, sa.at(0, 16 * j), sb.at(0, 16 * j), n, accumulate=j > 0, end=j == steps - 1)
    else:
        # warpy.layout.desc's descriptor (start 0) plus the tiles' shared addresses >> 4
        with _k_interleave_flipped(flipped):
            dword = D.gmma_smem_desc(st, 0)
        descs = p.urvec("gmma_desc", 4)
        for half, buf in ((0, sa), (2, sb)):
            base, off = p.derive.value_reg("addr", buf.at(0, 0))
            p.emit(alu.ushf_r(descs[half], base, 4))
            p.emit(alu.uiadd3(descs[half], descs[half], (dword & 0xFFFFFFFF) + (off >> 4)))
            p.emit(alu.umov(descs[half + 1], dword >> 32))
        p.emit(wgmma.hgmma(n, acc, descs, False, end=True, ab=AB[dtype]))
    p.emit(wgmma.wgmma_commit())
    p.emit(wgmma.warpgroup_wait(0))

    ptr, md = _global(p, out)
    gaddr = p.rvec("gaddr", 2)
    p.emit(alu.imad_wide(gaddr, tid, 4 * (n // 2), ptr))
    for j in range(n // 8):
        p.emit(memory.stg(GMem(md, gaddr, 16 * j), acc.sub(4 * j, 4)))
    p.emit(control.exit_())
    return p


AB = {"bf16": "BF16", "fp16": "F16"}


def wgmma_fragment(c: np.ndarray) -> np.ndarray:
    """C (64 x N) as the m64nNk16 fp32 accumulator fragments: out[t, i] (PTX wgmma D figure):
    row = 16 * (t // 32) + (t % 32) // 4 + 8 * ((i // 2) % 2), col = 8 * (i // 4) + 2 * (t % 4) + i % 2."""
    n = c.shape[1]
    t = np.arange(128)[:, None]
    i = np.arange(n // 2)[None, :]
    row = 16 * (t // 32) + (t % 32) // 4 + 8 * ((i // 2) % 2)
    col = 8 * (i // 4) + 2 * (t % 4) + i % 2
    return np.asarray(c[row, col])


def wgmma_host(dtype: str, swizzle: int) -> Callable[[np.random.Generator], HostCase]:
    k = wgmma_k(swizzle)

    def host(rng: np.random.Generator) -> HostCase:
        a = rng.integers(-3, 4, size=(64, k)).astype(np.float32)
        b = rng.integers(-3, 4, size=(WGMMA_N, k)).astype(np.float32)
        c = a @ b.T  # exact: small integers
        want = wgmma_fragment(c).astype(np.float32)
        return HostCase(
            {"a": _to_16(a, dtype), "b": _to_16(b, dtype), "out": np.full((128, WGMMA_N // 2), np.nan, np.float32)},
            {"out": want},
        )

    return host


# ---------------------------------------------------------------------------------------------
# e. sm_100a: tcgen05.mma with tensor memory (assembled and checked; no B200 here)


def umma(two_cta: bool) -> Program:
    """tcgen05.mma kind::f16, bf16 → fp32, K = 64 (4 MMAs), A and B by TMA (128B swizzle).

    1 CTA: M = 128, N = 64. 2 CTAs (a cluster pair): M = 256 (128 rows a CTA), N = 128 (64 rows of B
    a CTA); both CTAs load their halves with `.2CTA` TMA completing on the leader's barrier, the
    leader (rank 0) issues `UTCHMMA.2CTA` and commits with `UTCBAR.2CTA.MULTICAST` to both CTAs.
    Warp 0 allocates N TMEM columns (64 for 1 CTA; 128 for the pair, whose each CTA holds its 128
    rows of M = 256 by all N = 128 columns) and relinquishes the permit; after the MMAs every warp
    reads its 32 lanes with `LDTM.x32` N/32 times, waits, and stores; warp 0 frees the columns."""
    m_cta, n_cta, k = 128, 64, 64
    name = "probe_umma_2cta" if two_cta else "probe_umma_1cta"
    p = Program(name, "sm_100a", threads=128, grid=(2 if two_cta else 1, 1, 1), cluster=(2 if two_cta else 1, 1, 1))
    st_a = smem_tile(m_cta, k, "bf16", "K", 128)
    st_b = smem_tile(n_cta, k, "bf16", "K", 128)
    m_total = 2 * m_cta if two_cta else m_cta
    n_total = 2 * n_cta if two_cta else n_cta
    cols = n_total  # fp32 accumulator: one column a value of N
    ta = p.tmap("a", D.tma_box(Layout((m_total, k), (k, 1)), st_a))
    tb = p.tmap("b", D.tma_box(Layout((n_total, k), (k, 1)), st_b))
    out = p.param("out", "u64")
    sa = p.smem("sa", st_a.layout, "bf16")
    sb = p.smem("sb", st_b.layout, "bf16")
    full = p.barriers("full", 1, count=1)
    acc_full = p.barriers("acc_full", 1, count=1)
    slot = p.smem_words("tmem_slot", 1)
    acc = p.tmem("acc", Layout((m_cta, cols), (1 << 16, 1)), cols)
    init_barriers(p, cluster_sync=two_cta)
    idesc = D.umma_idesc("bf16", "bf16", "f32", m_total, n_total, "K", "K", cta_group=2 if two_cta else 1)

    warp = p.warp_index()
    tid = p.r("tid")
    w0 = p.p("is_w0")
    p.emit(alu.isetp("EQ", w0, warp, 0))
    with p.when(w0):
        p.derive.emit_at(slot.at(0), lambda a: tcgen05.tmem_alloc(a, cols, two_cta))
        p.emit(tcgen05.tmem_relinquish())
    p.emit(tcgen05.tc_fence_before())
    p.emit(sync.bar_sync(0))
    p.emit(tcgen05.tc_fence_after())
    tword = p.r("tmem_word")
    p.derive.emit_at(slot.at(0), lambda a: memory.lds(tword, a))
    p.derive.tmem_base = p.ur("tmem_base")
    p.emit(alu.r2ur(p.derive.tmem_base, tword))

    rank = p.ur("rank")
    is_leader = p.up("is_leader_cta")
    if two_cta:
        p.emit(alu.s2ur(rank, "SR_CgaCtaId"))
    else:
        p.emit(alu.umov(rank, 0))
    p.emit(alu.uisetp("EQ", is_leader, rank, 0))
    with p.when(w0):
        leader = p.elect()
        with p.when(is_leader):
            tx = p.r("tx")
            p.emit(alu.mov(tx, (2 if two_cta else 1) * (m_cta + n_cta) * k * 2))
            p.derive.emit_at(full.at(0), lambda mm: sync.arrive_expect_tx(mm, tx), guard=leader)
        # each CTA loads its rows of A and B; with 2 CTAs the loads complete on the leader's barrier
        args = p.urvec("tma_args", 4)
        bar0 = p.ur("bar0")
        p.derive.into(bar0, "addr", full.at(0))
        if two_cta:
            zero = p.ur("zero_rank")
            p.emit(alu.umov(zero, 0))
            p.emit(alu.mapa(bar0, zero, bar0))
        for buf, tm, rows in ((sa, "a", m_cta), (sb, "b", n_cta)):
            p.derive.into(args[0], "addr", buf.at(0, 0))
            p.emit(alu.umov(args[1], bar0))
            p.emit(alu.umov(args[2], 0))
            p.emit(alu.uimad(args[3], rank, rows, URZ))
            p.emit(tma.tma_load(Mem(args), tm, None, two_cta))
        with p.when(is_leader):
            wait(p, full.at(0), _phase0(p))
            p.emit(tcgen05.tc_fence_after())
            for j in range(k // 16):
                utchmma(p, sa.at(0, 16 * j), sb.at(0, 16 * j), acc.at(0, 0), idesc, j > 0, two_cta=two_cta)
            if two_cta:
                mask = p.ur("cta_mask")
                p.emit(alu.umov(mask, 0b11))
                p.derive.emit_at(acc_full.at(0), lambda b: tcgen05.utcbar(b, mask, True))
            else:
                p.derive.emit_at(acc_full.at(0), lambda b: tcgen05.utcbar(b))
    wait(p, acc_full.at(0), _phase0(p))
    p.emit(tcgen05.tc_fence_after())
    lanes = p.r("lanes")
    p.emit(alu.shf_l(lanes, warp, 21))  # (32 * warp) << 16: this warp's TMEM lanes
    ulanes = p.ur("ulanes")
    p.emit(alu.r2ur(ulanes, lanes))
    taddr = p.ur("taddr")
    v = p.rvec("v", 32)
    ptr, md = _global(p, out)
    row = p.r("row")
    p.emit(alu.imad(row, m_cta, rank, tid))  # this CTA's rows of C: rank * 128 + tid
    gaddr = p.rvec("gaddr", 2)
    p.emit(alu.imad_wide(gaddr, row, 4 * cols, ptr))
    for chunk in range(cols // 32):
        p.emit(alu.uiadd3(taddr, p.derive.tmem_base, ulanes, 32 * chunk))
        p.emit(tcgen05.ldtm(v, taddr))
        p.emit(tcgen05.tmem_wait_ld())
        for j in range(8):
            p.emit(memory.stg(GMem(md, gaddr, 128 * chunk + 16 * j), v.sub(4 * j, 4)))
    p.emit(tcgen05.tc_fence_before())
    if two_cta:
        p.emit(sync.cluster_arrive())
        p.emit(sync.cluster_wait())
    else:
        p.emit(sync.bar_sync(0))
    with p.when(w0):
        p.emit(tcgen05.tmem_dealloc(p.derive.tmem_base, cols, two_cta))
    p.emit(control.exit_())
    return p


# ---------------------------------------------------------------------------------------------
# the registry

WGMMA_VARIANTS = [(dt, sw) for dt in ("bf16", "fp16") for sw in (128, 64, 32, 0)]

PROBES: dict[str, Probe] = {}
for _n in ("tma_copy_2d", "tma_copy_3d", "tma_split_none", "tma_split_sw128"):
    PROBES[_n] = Probe(_n, (lambda n: lambda sm: tma_copy(n, sm))(_n), ARCHS, tma_copy_host(_n))
PROBES["pipe"] = Probe("pipe", pipe, ARCHS, pipe_host)
PROBES["multicast"] = Probe("multicast", multicast, ARCHS, multicast_host)
for _dt, _sw in WGMMA_VARIANTS:
    PROBES[f"wgmma_{_dt}_sw{_sw}"] = Probe(
        f"wgmma_{_dt}_sw{_sw}", (lambda d, s: lambda sm: wgmma_probe(d, s, sm=sm))(_dt, _sw), ("sm_90a",), wgmma_host(_dt, _sw)
    )
PROBES["wgmma_bf16_sw0_flipped"] = Probe(
    "wgmma_bf16_sw0_flipped", lambda sm: wgmma_probe("bf16", 0, True, sm), ("sm_90a",), wgmma_host("bf16", 0),
    doc="LBO/SBO swapped: expected to be wrong",
)
PROBES["umma_1cta"] = Probe("umma_1cta", lambda sm: umma(False), ("sm_100a",))
PROBES["umma_2cta"] = Probe("umma_2cta", lambda sm: umma(True), ("sm_100a",))

#: the SASS opcodes each sm_100a tcgen05 probe must show (beyond what expected_opcodes derives)
UMMA_OPCODES = {
    "umma_1cta": ["UTCHMMA", "UTCBAR", "LDTM.x32", "UTCATOMSWS.FIND_AND_SET.ALIGN", "UTCATOMSWS.AND",
                  "UVIRTCOUNT.DEALLOC.SMPOOL", "UTMALDG.2D", "SYNCS.EXCH.64", "SYNCS.ARRIVE.TRANS64",
                  "SYNCS.PHASECHK.TRANS64.TRYWAIT"],
    "umma_2cta": ["UTCHMMA.2CTA", "UTCBAR.2CTA.MULTICAST", "LDTM.x32", "UTCATOMSWS.2CTA.FIND_AND_SET.ALIGN",
                  "UTCATOMSWS.AND", "UVIRTCOUNT.DEALLOC.SMPOOL", "UTMALDG.2D.2CTA", "SYNCS.EXCH.64",
                  "SYNCS.ARRIVE.TRANS64", "SYNCS.PHASECHK.TRANS64.TRYWAIT"],
}
