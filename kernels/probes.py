"""Probe kernels: small programs written with warpy.isa's Program builder, each with the host-side
expectation of what it leaves in global memory. tests/lift assembles them for every target they
name (with the disassembly check); tests/gpu runs the sm_90a ones on an H200 and compares every
element.

| probe | what it proves |
|---|---|
| `tma_copy_2d`, `tma_copy_3d` | TMA load global → 128B-swizzled tile (mbarrier + expect_tx), TMA store back; ragged edges: the zero fill on load (seen in a raw dump of the tile) and clipped stores (a wider destination pitch keeps its padding) |
| `tma_start_*` | an unswizzled box whose innermost start is 1 element (`unaligned`, `unaligned_end`: faults on the H200), 16 bytes (`aligned`) or 0 elements off a box multiple, the last two at a row end that is not whole 16 bytes (`ragged_end`: runs) |
| `tma_split_none`, `tma_split_sw128` | the 3-D TMA boxes `warpy.layout.desc.tma_box` builds for tiles wider than one span (dims out of stride order) land where the tile's layout says |
| `pipe` | a producer warp TMA-loads 64 tiles through a 4-stage ring; two consumer warps read each stage with LDS and copy it out with STG; every byte checked |
| `multicast` | a cluster of 2: each CTA loads half a tile and multicasts it; both CTAs store the whole tile |
| `wgmma_<dtype>_sw<S>` | one warpgroup `HGMMA 64x64x16` (bf16/fp16 → fp32) from descriptors (the isa's derivation for swizzled tiles; `warpy.layout.desc` for the unswizzled one, whose LBO/SBO roles are the open question); `..._flipped` swaps LBO/SBO and must be wrong |
| `umma_1cta`, `umma_2cta` | sm_100a only (assembled and checked, not run): tcgen05.mma with TMEM alloc/relinquish/dealloc, commit, tcgen05.ld |
| `hgmma_rs` | HGMMA with A from registers (the RS form): each thread's A fragment (the layout atom's) by LDG, B by TMA; vs numpy |
| `umma_ts` | sm_100a only: tcgen05.mma with A from tensor memory (the TS form), A stored there with STTM; the checker's values vs numpy |
| `counters` | 8 CTAs: global atomics (ADD, MAX, F32 ADD, CAS, EXCH) with acquire/release, and the spin-wait on a counter |
| `dispatch` | an interpreter loop dispatching on opcode words (`warpy.isa.units.dispatch`; ptxas makes it a `BRX` jump table) |
| `math_table` | every float, packed, conversion, warp and atomic opcode on a table of edge cases (`warpy.isa.examples.math_table`; no host case here: tests/gpu/test_isa_gpu.py compares the GPU's words with the checker's) |

Every probe is `PROBES[name]`: a `Probe` with `build(sm) -> Program`, its targets, and
`host(rng) -> HostCase` (initial contents of every tensor/pointer parameter, scalar parameters,
and the expected final contents). `ProbeExpectation(case)` hands a host case to the checker
(`check_kernel(..., values=True, expect=...)`), which then computes the probe's outputs on the CPU.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Optional

import attrs
import numpy as np

from warpy.isa.families import alu, control, memory, sync, tcgen05, tma, wgmma
from warpy.isa.operands import RZ, URZ, CBank, GMem, Mem, P, R, RVec, URVec
from warpy.isa.buffers import BarrierArray, Param, SmemBuffer, TmemBuffer
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
    faults: str = ""  # what the GPU raises where the probe is a program the hardware refuses (measured)


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
    shift: tuple[int, ...] = ()  # added to each box's start coordinates (dim 0 innermost)


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
    if name in TMA_START_CASES:
        # unswizzled 64 x 16 fp16 boxes (2 KiB) whose innermost start is `shift` elements off a box
        # multiple: off a 16-byte boundary inside the tensor, at a row end that is not whole 16 bytes,
        # both, or (the control) 16 bytes off
        cols, shift = TMA_START_CASES[name]
        pitch = -(-cols * 2 // 16) * 16
        src = TmaBox("fp16", dims=(cols, 16), strides=(pitch,), box=(64, 16), swizzle=0)
        return TmaCase(name, src, None, Layout((16, 64), (128, 2)), "fp16", (2, 1, 1), (shift, 0))
    raise KeyError(name)


#: name -> (columns of the 16-row tensor, the innermost start's shift in elements)
TMA_START_CASES = {"tma_start_unaligned": (200, 1), "tma_start_ragged_end": (70, 0),
                   "tma_start_unaligned_end": (70, 1), "tma_start_aligned": (200, 8)}
#: the start cases the H200 refuses with an illegal instruction (measured 2026-12-02: a start off
#: 16 bytes, inside the tensor or across its end; a ragged row end from an aligned start runs)
TMA_START_FAULTS = ("tma_start_unaligned", "tma_start_unaligned_end")


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
        if case.shift and case.shift[d]:
            p.emit(alu.iadd3(x, x, case.shift[d], RZ))
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
                    start = tuple(c * b + (case.shift[d] if case.shift else 0)
                                  for d, (c, b) in enumerate(zip((x, y, z)[: box.rank], box.box)))
                    img = _box_image(box, g, start)
                    raw = img.reshape(-1).view(np.uint8)
                    if name.startswith("tma_split"):
                        # the box is a 3-D view of a 64 x K matrix: the same memory, read as the matrix
                        k = case.tile.layout.size() // 64  # type: ignore[attr-defined]
                        dumps.append(_split_image(case, g.reshape(64, k)))
                    elif box.swizzle == 128:
                        dumps.append(swizzle_bytes(raw, 3))
                    else:
                        dumps.append(raw)
        dump = np.concatenate(dumps)
        src = g
        if box.rank == 2 and box.strides[0] != box.dims[0] * box.elem_bytes:  # pitched rows: the gap filled
            src = np.full((box.dims[1], box.strides[0] // box.elem_bytes), 0x7777, g.dtype)
            src[:, : box.dims[0]] = g
        arrays: dict[str, np.ndarray] = {"src": src, "dump": np.full(dump.size, 0xAB, np.uint8)}
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
for _n in ("tma_copy_2d", "tma_copy_3d", "tma_split_none", "tma_split_sw128", *TMA_START_CASES):
    PROBES[_n] = Probe(_n, (lambda n: lambda sm: tma_copy(n, sm))(_n), ARCHS, tma_copy_host(_n),
                       faults="CUDA_ERROR_ILLEGAL_INSTRUCTION" if _n in TMA_START_FAULTS else "")
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


# ---------------------------------------------------------------------------------------------
# f. the instruction set beyond GEMM: register-operand MMAs, atomics and flags between CTAs, dispatch

RS_K = 64  # K of the register-operand MMA probes: 4 steps of 16


def wgmma_a_fragments(a: np.ndarray) -> np.ndarray:
    """A (64 x K, any dtype) as each thread of the warpgroup holds it for K/16 register-operand wgmmas:
    out[t, j, v] = A[row, 16 j + col] with row + 64 col = the A atom's (t, v)
    (`warpy.layout.atoms.wgmma(n, a_from_registers=True).a`)."""
    from warpy.layout.atoms import wgmma as wgmma_atom

    frag = wgmma_atom(WGMMA_N, "bf16", a_from_registers=True).a
    steps = a.shape[1] // 16
    out = np.zeros((128, steps, 8), dtype=a.dtype)
    for t in range(128):
        for v in range(8):
            idx = int(frag((t, v)))
            for j in range(steps):
                out[t, j, v] = a[idx % 64, 16 * j + idx // 64]
    return out


def hgmma_rs_probe(sm: str = "sm_90a") -> Program:
    """C (64 x 64, fp32) = A (64 x 64) · Bᵀ with A from registers (the RS form): each thread loads its
    A fragments (`wgmma_a_fragments`, 4 steps x 8 bf16) with LDG.128s, B (64 x 64, K-major, 128B
    swizzle) comes by TMA; 4 HGMMAs, each thread stores its 32 accumulator registers to out[tid]."""
    from warpy.isa.units.wgmma import hgmma_rs
    from warpy.layout.atoms import wgmma as wgmma_atom

    n, k = WGMMA_N, RS_K
    st = smem_tile(n, k, "bf16", "K", 128)
    p = Program("probe_hgmma_rs", sm, threads=128)
    tb = p.tmap("b", D.tma_box(Layout((n, k), (k, 1)), st))
    afr, out = p.param("afrag", "u64"), p.param("out", "u64")
    p.global_buffer("afrag", Layout((128, k // 16, 4), (64, 16, 4)), "u32", source="afrag")
    p.global_buffer("out", Layout((128, n // 2), (4 * (n // 2), 4)), "fp32", source="out")
    sb = p.smem("sb", st.layout, "bf16")
    full = p.barriers("full", 1, count=1)
    init_barriers(p)
    warp = p.warp_index()
    tid = p.r("tid")
    w0 = p.p("is_w0")
    p.emit(alu.isetp("EQ", w0, warp, 0))
    with p.when(w0):
        leader = p.elect()
        tx = p.r("tx")
        p.emit(alu.mov(tx, n * k * 2))
        p.derive.emit_at(full.at(0), lambda mm: sync.arrive_expect_tx(mm, tx), guard=leader)
        tma_load(p, sb.at(0, 0), tb, [0, 0], full.at(0))
    aptr, md = _global(p, afr)
    a_at = p.rvec("a_at", 2)
    p.emit(alu.imad_wide(a_at, tid, 16 * (k // 16), aptr))  # 8 bf16 a step, a thread
    af = p.rvec("af", 4 * (k // 16))
    for j in range(k // 16):
        p.emit(memory.ldg(af.sub(4 * j, 4), GMem(md, a_at, 16 * j), "CONSTANT"))
    wait(p, full.at(0), _phase0(p))
    acc = p.rvec("acc", n // 2)
    frag = wgmma_atom(n, "bf16", a_from_registers=True).a
    p.emit(wgmma.warpgroup_arrive())
    for j in range(k // 16):
        hgmma_rs(p, acc, af.sub(4 * j, 4), frag, sb.at(0, 16 * j), n, accumulate=j > 0, end=j == k // 16 - 1)
    p.emit(wgmma.wgmma_commit())
    p.emit(wgmma.warpgroup_wait(0))
    optr = p.rvec("out_ptr", 2)
    p.emit(alu.ldc(optr, out.cbank()))
    gaddr = p.rvec("gaddr", 2)
    p.emit(alu.imad_wide(gaddr, tid, 4 * (n // 2), optr))
    for j in range(n // 8):
        p.emit(memory.stg(GMem(md, gaddr, 16 * j), acc.sub(4 * j, 4)))
    p.emit(control.exit_())
    return p


def rs_operands(rng: np.random.Generator, m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """A (m x k) and B (n x k) of small integers (exact in bf16 and in fp32 sums)."""
    return (rng.integers(-3, 4, size=(m, k)).astype(np.float32), rng.integers(-3, 4, size=(n, k)).astype(np.float32))


def hgmma_rs_host(rng: np.random.Generator) -> HostCase:
    a, b = rs_operands(rng, 64, WGMMA_N, RS_K)
    frags = _to_16(wgmma_a_fragments(a), "bf16")  # [128, steps, 8] bf16 bits
    want = wgmma_fragment(a @ b.T).astype(np.float32)
    return HostCase({"b": _to_16(b, "bf16"), "afrag": frags.reshape(128, -1).view(np.uint32).copy(),
                     "out": np.full((128, WGMMA_N // 2), np.nan, np.float32)}, {"out": want})


TS_N = 64


def umma_ts_probe(sm: str = "sm_100a") -> Program:
    """tcgen05.mma kind::f16 with A from tensor memory (the TS form), M = 128, N = 64, K = 64: each of
    the 128 threads loads its row of A (64 bf16) with LDG.128s and stores it to its TMEM lane with
    STTM.x32 (column j = elements 2j, 2j+1: `warpy.layout.atoms.umma_ts_a_tmem`); B (64 x 64) by TMA;
    warp 0's elected lane issues 4 UTCHMMAs and commits; every thread reads its accumulator row
    (LDTM.x32 twice) and stores it to out[row]."""
    from warpy.isa.units.tcgen05 import utchmma_ts

    m, n, k = 128, TS_N, RS_K
    cols = 128  # the accumulator's 64 columns and A's 32
    p = Program("probe_umma_ts", sm, threads=128)
    st_b = smem_tile(n, k, "bf16", "K", 128)
    tb = p.tmap("b", D.tma_box(Layout((n, k), (k, 1)), st_b))
    ap, out = p.param("a", "u64"), p.param("out", "u64")
    p.global_buffer("a", Layout((m, k // 2), (2 * k, 4)), "u32", source="a")
    p.global_buffer("out", Layout((m, n), (4 * n, 4)), "fp32", source="out")
    sb = p.smem("sb", st_b.layout, "bf16")
    full = p.barriers("full", 1, count=1)
    acc_full = p.barriers("acc_full", 1, count=1)
    slot = p.smem_words("tmem_slot", 1)
    acc = p.tmem("acc", Layout((m, n), (1 << 16, 1)), n)
    a_t = p.tmem("a_t", Layout((m, k // 2), (1 << 16, 1)), k // 2, elem="bf16", base=n)
    init_barriers(p)
    idesc = D.umma_idesc("bf16", "bf16", "f32", m, n, "K", "K")
    warp = p.warp_index()
    tid = p.r("tid")
    w0 = p.p("is_w0")
    p.emit(alu.isetp("EQ", w0, warp, 0))
    with p.when(w0):
        p.derive.emit_at(slot.at(0), lambda s: tcgen05.tmem_alloc(s, cols))
        p.emit(tcgen05.tmem_relinquish())
        leader = p.elect()
        tx = p.r("tx")
        p.emit(alu.mov(tx, n * k * 2))
        p.derive.emit_at(full.at(0), lambda mm: sync.arrive_expect_tx(mm, tx), guard=leader)
        tma_load(p, sb.at(0, 0), tb, [0, 0], full.at(0))
    p.emit(tcgen05.tc_fence_before())
    p.emit(sync.bar_sync(0))
    p.emit(tcgen05.tc_fence_after())
    tword = p.r("tmem_word")
    p.derive.emit_at(slot.at(0), lambda s: memory.lds(tword, s))
    p.derive.tmem_base = p.ur("tmem_base")
    p.emit(alu.r2ur(p.derive.tmem_base, tword))
    with p.role("all", range(0, 4)):  # (a role: its derived tensor-memory addresses follow the allocation)
        _umma_ts_body(p, ap, out, sb, full, acc_full, acc, a_t, idesc, warp, tid, w0, m, n, k, cols)
    p.emit(control.exit_())
    return p


def _umma_ts_body(p: Program, ap: Param, out: Param, sb: SmemBuffer, full: BarrierArray, acc_full: BarrierArray,
                  acc: TmemBuffer, a_t: TmemBuffer, idesc: int, warp: R, tid: R, w0: P, m: int, n: int, k: int,
                  cols: int) -> None:
    from warpy.isa.units.tcgen05 import utchmma_ts

    # A's row `tid` into TMEM lane `tid`: 64 bf16 = 32 words, STTM.x32 at this warp's lanes
    aptr, md = _global(p, ap)
    a_at = p.rvec("a_at", 2)
    p.emit(alu.imad_wide(a_at, tid, 2 * k, aptr))
    arow = p.rvec("arow", k // 2)
    for j in range(k // 8):
        p.emit(memory.ldg(arow.sub(4 * j, 4), GMem(md, a_at, 16 * j)))
    lanes = p.r("lanes")
    p.emit(alu.shf_l(lanes, warp, 21))  # (32 * warp) << 16
    ulanes = p.ur("ulanes")
    p.emit(alu.r2ur(ulanes, lanes))
    ta = p.ur("ta")
    assert p.derive.tmem_base is not None
    p.emit(alu.uiadd3(ta, p.derive.tmem_base, ulanes, n))
    p.emit(tcgen05.sttm(ta, arow))
    p.emit(tcgen05.tmem_wait_st())
    p.emit(tcgen05.tc_fence_before())
    p.emit(sync.bar_sync(0))
    p.emit(tcgen05.tc_fence_after())
    with p.when(w0):
        wait(p, full.at(0), _phase0(p))
        p.emit(tcgen05.tc_fence_after())
        leader2 = p.elect("mma_leader")
        for j in range(k // 16):
            utchmma_ts(p, a_t.at(0, 8 * j), sb.at(0, 16 * j), acc.at(0, 0), idesc, j > 0, guard=leader2)
        p.derive.emit_at(acc_full.at(0), lambda b: tcgen05.utcbar(b).guarded(leader2))
    wait(p, acc_full.at(0), _phase0(p))
    p.emit(tcgen05.tc_fence_after())
    taddr = p.ur("taddr")
    v = p.rvec("v", 32)
    optr = p.rvec("out_ptr", 2)
    p.emit(alu.ldc(optr, out.cbank()))
    gaddr = p.rvec("gaddr", 2)
    p.emit(alu.imad_wide(gaddr, tid, 4 * n, optr))
    for chunk in range(n // 32):
        p.emit(alu.uiadd3(taddr, p.derive.tmem_base, ulanes, 32 * chunk))
        p.emit(tcgen05.ldtm(v, taddr))
        p.emit(tcgen05.tmem_wait_ld())
        for j in range(8):
            p.emit(memory.stg(GMem(md, gaddr, 128 * chunk + 16 * j), v.sub(4 * j, 4)))
    p.emit(tcgen05.tc_fence_before())
    p.emit(sync.bar_sync(0))
    with p.when(w0):
        p.emit(tcgen05.tmem_dealloc(p.derive.tmem_base, cols))


def umma_ts_host(rng: np.random.Generator) -> HostCase:
    a, b = rs_operands(rng, 128, TS_N, RS_K)
    return HostCase({"a": _to_16(a, "bf16").view(np.uint32).copy(), "b": _to_16(b, "bf16"),
                     "out": np.full((128, TS_N), np.nan, np.float32)}, {"out": (a @ b.T).astype(np.float32)})


COUNTER_CTAS = 8


def counters(sm: str) -> Program:
    """Flags between CTAs through global atomics: 8 CTAs of 64 threads. Thread 0 of each adds 1 to
    ctr[0] (acq_rel); every thread raises ctr[1] to its global index (REDG.MAX) and adds 1.0 to the
    fp32 word ctr[2] (REDG.ADD.F32); every thread waits until ctr[0] is 8 (the spin-wait: poll,
    NANOSLEEP back-off, acquire). Then thread 0 swaps the CTA's word ctr[4 + cta] from 0 to cta + 1
    (CAS; a second CAS from 0 fails) and exchanges ctr[12 + cta] with 7; out[cta] = (the value the
    wait saw, the two CAS's old words, the exchange's)."""
    from warpy.isa.families.typed import F32
    from warpy.isa.units import flags

    g = COUNTER_CTAS
    p = Program("probe_counters", sm, threads=64, grid=(g, 1, 1))
    ctr, out = p.param("ctr", "u64"), p.param("out", "u64")
    p.global_buffer("ctr", Layout(4 + 2 * g, 4), "u32", source="ctr")
    p.global_buffer("out", Layout((g, 4), (16, 4)), "u32", source="out")
    tid, cta = p.r("tid"), p.r("cta")
    p.emit(alu.s2r(tid, "SR_TID.X"))
    p.emit(alu.s2r(cta, "SR_CTAID.X"))
    base, md = _global(p, ctr)
    t0 = p.p("t0")
    p.emit(alu.isetp("EQ", t0, tid, 0))
    one = p.r("one")
    p.emit(alu.mov(one, 1))
    with p.when(t0):
        flags.atomic(p, "ADD", p.r("arrived"), GMem(md, base), one, order="acq_rel")
    gid = p.r("gid")
    p.emit(alu.imad(gid, cta, 64, tid))
    p.emit(memory.red("MAX", GMem(md, base, 4), gid))
    fone = F32.of(p.r("fone"))
    p.emit(alu.mov(fone, 0x3F800000))
    p.emit(memory.red("ADD", GMem(md, base, 8), fone))
    seen = flags.spin_wait(p, GMem(md, base), g)
    # thread 0 tells the CTA what it saw through shared memory
    slot = p.smem_words("seen_slot", 1)
    p.derive.emit_at(slot.at(0), lambda a: memory.sts(a, seen), guard=t0)
    p.emit(sync.bar_sync(0))
    seen = p.r("seen_by_t0")
    p.derive.emit_at(slot.at(0), lambda a: memory.lds(seen, a))
    res = p.rvec("res", 4)
    # (addresses and operands in every lane, before the one-lane region: the colouring check compares
    # whole-warp address values)
    mine = p.rvec("mine", 2)
    p.emit(alu.imad_wide(mine, cta, 4, base))
    new, seven = p.r("new"), p.r("seven")
    p.emit(alu.iadd3(new, cta, 1))
    p.emit(alu.mov(seven, 7))
    optr = p.rvec("out_ptr", 2)
    p.emit(alu.ldc(optr, out.cbank()))
    p.emit(alu.imad_wide(optr, cta, 16, optr))
    with p.when(t0):
        p.emit(alu.mov(res[0], seen))
        flags.atomic_cas(p, res[1], GMem(md, mine, 16), RZ, new)
        flags.atomic_cas(p, res[2], GMem(md, mine, 16), RZ, one, order="relaxed")
        flags.atomic(p, "EXCH", res[3], GMem(md, mine, 16 + 4 * g), seven, order="relaxed")
        p.emit(memory.stg(GMem(md, optr), res))
    p.emit(control.exit_())
    return p


def counters_host(rng: np.random.Generator) -> HostCase:
    g = COUNTER_CTAS
    ctr = np.zeros(4 + 2 * g, np.uint32)
    want = ctr.copy()
    want[0], want[1] = g, 64 * g - 1
    want[2] = np.float32(64 * g).view(np.uint32)
    want[4:4 + g] = np.arange(1, g + 1)
    want[4 + g:] = 7
    out = np.stack([np.full(g, g), np.zeros(g), np.arange(1, g + 1), np.zeros(g)], axis=1).astype(np.uint32)
    return HostCase({"ctr": ctr, "out": np.full((g, 4), 0xAB, np.uint32)}, {"ctr": want, "out": out})


DISPATCH_OPS = 8
DISPATCH_STEPS = 64


def dispatch_probe(sm: str) -> Program:
    """An interpreter loop: 32 threads run 64 steps of a program of opcode words (`prog`, one word a
    step, 0..7 and past the table), dispatching each with `warpy.isa.units.dispatch` (a compare chain
    ptxas makes a jump table, `BRX`) to one of 8 integer operations on the thread's accumulator
    (acc = tid at first); out[tid] = acc."""
    from warpy.isa.units.dispatch import dispatch

    p = Program("probe_dispatch", sm, threads=32)
    prog, out = p.param("prog", "u64"), p.param("out", "u64")
    p.global_buffer("prog", Layout(DISPATCH_STEPS, 4), "u32", source="prog")
    p.global_buffer("out", Layout(32, 4), "u32", source="out")
    tid = p.r("tid")
    p.emit(alu.s2r(tid, "SR_TID.X"))
    pptr, md = _global(p, prog)
    # the program's words into shared memory (two a thread), then every step reads its word there
    sprog = p.smem("sprog", Layout(DISPATCH_STEPS, 4), "u32")
    at = p.rvec("op_at", 2)
    p.emit(alu.imad_wide(at, tid, 4, pptr))
    words = p.rvec("words", 2)
    p.emit(memory.ldg(words[0], GMem(md, at), "CONSTANT"))
    p.emit(memory.ldg(words[1], GMem(md, at, 128), "CONSTANT"))
    sbase, soff = p.derive.value_reg("addr", sprog.at(0))
    toff = p.r("toff")
    p.emit(alu.shf_l(toff, tid, 2))
    p.emit(memory.sts(Mem(toff, sbase, soff), words[0]))
    p.emit(memory.sts(Mem(toff, sbase, soff + 128), words[1]))
    p.emit(sync.bar_sync(0))
    acc = p.r("acc")
    p.emit(alu.mov(acc, tid))
    op = p.r("op")
    cases = [p.fresh_label(f"OP{k}") for k in range(DISPATCH_OPS)]
    with p.loop("step", DISPATCH_STEPS) as step:
        p.derive.emit_at(sprog.at(step), lambda a: memory.lds(op, a))
        nxt = p.fresh_label("NEXT")
        dispatch(p, op, cases)
        bodies: list[Callable[[], object]] = [
            lambda: p.emit(alu.iadd3(acc, acc, 0x9E37)),
            lambda: p.emit(alu.imad(acc, acc, 3, 1)),
            lambda: p.emit(alu.lop3(acc, acc, 0x5A5A5A5A, RZ, 0x3C)),
            lambda: p.emit(alu.shf_r(acc, acc, 1)),
            lambda: p.emit(alu.imin(acc, acc, 0x00FFFFFF, unsigned=True, arch=sm)),
            lambda: p.emit(alu.iadd3(acc, acc, tid)),
            lambda: p.emit(alu.lea(acc, acc, acc, 2)),
            lambda: p.emit(alu.lop3(acc, acc, step.reg, RZ, 0x3C)),
        ]
        for k, body in enumerate(bodies):
            p.label(cases[k])
            body()
            if k < len(bodies) - 1:
                p.emit(control.bra(nxt))
        p.label(nxt)
    optr = p.rvec("out_ptr", 2)
    p.emit(alu.ldc(optr, out.cbank()))
    p.emit(alu.imad_wide(optr, tid, 4, optr))
    p.emit(memory.stg(GMem(md, optr), acc))
    p.emit(control.exit_())
    return p


def dispatch_program(rng: np.random.Generator) -> np.ndarray:
    """The opcode words: 0..7 and a few past the table (which run the last case)."""
    return rng.integers(0, DISPATCH_OPS + 2, size=DISPATCH_STEPS).astype(np.uint32)


def dispatch_host(rng: np.random.Generator) -> HostCase:
    prog = dispatch_program(rng)
    m = 0xFFFFFFFF
    out = np.zeros(32, np.uint32)
    for t in range(32):
        acc = t
        for step, op in enumerate(prog.tolist()):
            k = min(op, DISPATCH_OPS - 1)
            acc = [(acc + 0x9E37) & m, (acc * 3 + 1) & m, acc ^ 0x5A5A5A5A, acc >> 1, min(acc, 0x00FFFFFF),
                   (acc + t) & m, (acc * 4 + acc) & m, acc ^ step][k]
        out[t] = acc
    return HostCase({"prog": prog, "out": np.full(32, 0xAB, np.uint32)}, {"out": out})


def _math_table(sm: str) -> Program:
    from warpy.isa.examples import math_table

    return math_table(sm)


PROBES["hgmma_rs"] = Probe("hgmma_rs", hgmma_rs_probe, ("sm_90a",), hgmma_rs_host,
                           doc="HGMMA with A from registers (the RS form) vs numpy")
PROBES["umma_ts"] = Probe("umma_ts", umma_ts_probe, ("sm_100a",), umma_ts_host,
                          doc="tcgen05.mma with A from tensor memory (the TS form): assembled; the checker's values vs numpy")
PROBES["counters"] = Probe("counters", counters, ARCHS, counters_host, doc="global atomics, acquire/release and the spin-wait across 8 CTAs")
PROBES["dispatch"] = Probe("dispatch", dispatch_probe, ARCHS, dispatch_host, doc="an interpreter loop dispatching on opcode words")
PROBES["math_table"] = Probe("math_table", _math_table, ARCHS, None,
                             doc="every float, packed, conversion, warp and atomic opcode on a table of edge cases "
                                 "(tests/gpu/test_isa_gpu.py compares the GPU's words with the checker's)")
UMMA_OPCODES["umma_ts"] = ["UTCHMMA", "UTCBAR", "STTM.x32", "LDTM.x32", "UTCATOMSWS.FIND_AND_SET.ALIGN", "UTMALDG.2D"]


class ProbeExpectation:
    """A probe's host case as the checker's `Expectation` (`warpy.check.expect`): global memory starts
    as the case's arrays, and `compare` checks the expected arrays bit for bit where the simulated CTAs
    wrote them (`outputs` keeps what they wrote, for callers that want the words themselves)."""

    def __init__(self, case: HostCase) -> None:
        self.case = case
        self.outputs: dict[str, np.ndarray] = {}

    def initial(self, source: str, box: Optional[TmaBox], nbytes: int, rng: np.random.Generator) -> Optional[np.ndarray]:
        arr = self.case.arrays.get(source)
        if arr is None:
            return None
        raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        out = np.zeros(max(nbytes, raw.size), dtype=np.uint8)
        out[: raw.size] = raw
        return out

    def compare(self, run: Any) -> Any:
        from warpy.check.expect import Verdict

        checked = wrong = 0
        msgs: list[str] = []
        for name, want in self.case.expected.items():
            nb = want.nbytes
            got_raw = run.gmem[name][:nb].copy()
            written = run.gwritten[name][:nb].reshape(-1, want.itemsize).all(axis=1)
            got = got_raw.view(want.dtype).reshape(-1)
            self.outputs[name] = got.reshape(want.shape)
            w = want.reshape(-1)
            same = got.view(np.uint8).reshape(-1, want.itemsize) == w.view(np.uint8).reshape(-1, want.itemsize)
            bad = written & ~same.all(axis=1)
            checked += int(written.sum())
            wrong += int(bad.sum())
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                msgs.append(f"values: {int(bad.sum())} of {int(written.sum())} elements of {name} differ, first [{k}] = {got[k]} "
                            f"where the host expects {w[k]}")
        return Verdict(checked, wrong, messages=msgs)
