"""MMA and copy atoms as layouts: who holds which element.

Conventions (CuTe's): a thread-value (TV) layout maps `(thread, value)` to the column-major index
of an element of the operand, `row + rows * col` for an `rows x cols` operand (A: M x K, B: N x K,
C: M x N). A thread mode of stride 0 is a *broadcast* (every thread names the whole operand, as
for operands read from shared memory through descriptors).

Tensor-memory addresses are `lane << 16 | column` (PTX `taddr`), columns of 32-bit cells.
"""

from __future__ import annotations

from typing import cast

import attrs

from warpy.layout.core import Layout, LayoutError
from warpy.layout.inttuple import IntTuple
from warpy.layout.desc import check_umma_shape
from warpy.layout.smem import canonical_dtype, element_bytes

TMEM_LANES = 128
TMEM_COLUMNS = 512
TMEM_LANE_SHIFT = 16


@attrs.frozen
class MmaAtom:
    """One MMA instruction as layouts: its M x N x K, the CTAs or threads that issue it, and the
    TV layouts of A (M x K), B (N x K) and C (M x N)."""

    name: str
    m: int
    n: int
    k: int
    threads: int
    a: Layout
    b: Layout
    c: Layout
    a_dtype: str
    b_dtype: str
    c_dtype: str


def _k_of(dtype: str) -> int:
    """K of one MMA: 256 bits of K per row."""
    return 32 // element_bytes(dtype)


def umma_ss(m: int, n: int, dtype: str = "bf16", acc: str = "fp32", cta_group: int = 1) -> MmaAtom:
    """tcgen05.mma with A and B from shared memory (CuTe SM100_MMA_F16BF16_SS / _2x1SM_SS for 16-bit
    types; the same layouts for tf32 and fp8). The "thread" is the CTA: one for cta_group::1, and for
    cta_group::2 CTA i holds rows [i*M/2, (i+1)*M/2) of A and C and half of B's N."""
    check_umma_shape(m, n, cta_group)
    d = canonical_dtype(dtype)
    k = _k_of(d)
    if cta_group == 1:
        a = Layout((1, (m, k)), (0, (1, m)))
        b = Layout((1, (n, k)), (0, (1, n)))
        c = Layout((1, (m, n)), (0, (1, m)))
        name = "SM100_MMA_F16BF16_SS" if element_bytes(d) == 2 else f"SM100_MMA_{d.upper()}_SS"
    else:
        a = Layout((2, (m // 2, k)), (m // 2, (1, m)))
        b = Layout((2, (n // 2, k)), (n // 2, (1, n)))
        c = Layout((2, (m // 2, n)), (m // 2, (1, m)))
        name = "SM100_MMA_F16BF16_2x1SM_SS" if element_bytes(d) == 2 else f"SM100_MMA_{d.upper()}_2x1SM_SS"
    return MmaAtom(name, m, n, k, cta_group, a, b, c, d, d, canonical_dtype(acc))


def wgmma_acc_layout(n: int) -> Layout:
    """The wgmma m64nN accumulator fragment (PTX ISA 'wgmma .m64nNk16 register fragment for D'):
    thread t = (t%4, (t//4)%8, t//32), value v = (v%2, (v//2)%2, v//4) ->
    row = 16*(t//32) + 8*((v//2)%2) + (t%32)//4, col = 8*(v//4) + 2*(t%4) + v%2."""
    if not (8 <= n <= 256 and n % 8 == 0):
        raise LayoutError(f"wgmma N = {n} is not 8..256 in steps of 8")
    return Layout(((4, 8, 4), (2, 2, n // 8)), ((128, 1, 16), (64, 8, 512)))


def wgmma_a_register_layout() -> Layout:
    """The wgmma A fragment when A comes from registers (16-bit types, 64 x 16): the same pattern as D."""
    return Layout(((4, 8, 4), (2, 2, 2)), ((128, 1, 16), (64, 8, 512)))


def wgmma(n: int, dtype: str = "bf16", acc: str = "fp32", a_from_registers: bool = False) -> MmaAtom:
    """Hopper wgmma.mma_async m64nNk16 (16-bit inputs) / k8 (tf32) / k32 (fp8): 128 threads."""
    d = canonical_dtype(dtype)
    k = _k_of(d)
    c = wgmma_acc_layout(n)
    if a_from_registers:
        if element_bytes(d) != 2:
            raise LayoutError("warpy models the register A fragment of wgmma for 16-bit types only")
        a = wgmma_a_register_layout()
    else:
        a = Layout((128, (64, k)), (0, (1, 64)))
    b = Layout((128, (n, k)), (0, (1, n)))
    return MmaAtom(f"SM90_64x{n}x{k}_{'RS' if a_from_registers else 'SS'}", 64, n, k, 128, a, b, c, d, d, canonical_dtype(acc))


def wgmma_acc_chunk_as_a(n: int, chunk: int) -> Layout:
    """The TV layout of accumulator columns [16 chunk, 16 chunk + 16) of an m64nN fp32 accumulator,
    as A (64 x 16, index row + 64 k, k relative to the chunk) once each register pair is packed into
    one 16-bit pair: values 8 chunk .. 8 chunk + 7 of each thread, the accumulator layout's last value
    mode restricted to two steps (its offset is the chunk's column base). This is what attention
    feeds a P·V wgmma from registers; `check_fragment` compares it with the A atom."""
    acc = wgmma_acc_layout(n)
    tshape, vshape = cast(tuple[IntTuple, tuple[int, int, int]], acc.shape)
    tstride, vstride = cast(tuple[IntTuple, tuple[int, int, int]], acc.stride)
    if not 0 <= chunk < n // 16:
        raise LayoutError(f"an m64n{n} accumulator has {n // 16} chunks of 16 columns, not chunk {chunk}")
    return Layout((tshape, (vshape[0], vshape[1], 2)), (tstride, (vstride[0], vstride[1], vstride[2])))


def check_fragment(what: str, got: Layout, want: Layout, threads: int, values: int) -> None:
    """Refuse (LayoutError, one line) a fragment whose (thread, value) -> element map is not `want`'s,
    naming the first pair that differs."""
    for t in range(threads):
        for v in range(values):
            try:
                g = int(got((t, v)))
            except Exception:  # noqa: BLE001 (a layout of another shape: no such coordinate)
                raise LayoutError(f"{what}: the fragment {got} has no (thread {t}, value {v}); the atom's is {want}") from None
            if g != int(want((t, v))):
                raise LayoutError(f"{what}: thread {t} value {v} holds element {g}, the atom's fragment {want} puts "
                                  f"element {int(want((t, v)))} there")


# --- tensor memory ----------------------------------------------------------------------------------


def tmem_address(lane: int, column: int) -> int:
    if not (0 <= lane < TMEM_LANES and 0 <= column < TMEM_COLUMNS):
        raise LayoutError(f"tensor memory has {TMEM_LANES} lanes x {TMEM_COLUMNS} columns; ({lane}, {column}) is outside")
    return lane << TMEM_LANE_SHIFT | column


def tmem_lane_col(address: int) -> tuple[int, int]:
    return address >> TMEM_LANE_SHIFT, address & 0xFFFF


def tmem_accumulator(m: int, n: int, cta_group: int = 1) -> Layout:
    """(row, col) of one CTA's share of the M x N f32 accumulator -> tensor-memory address, column 0 based
    (CuTe tmem_frg for UMMA): cta_group::1 M=128: lane = row; M=64: rows 16q..16q+15 in lanes
    32q..32q+15 (half sub-partitions); cta_group::2 M=256: each CTA 128 rows, lane = row;
    M=128: each CTA 64 rows, columns [0,N/2) in lanes 0..63 and [N/2,N) in lanes 64..127."""
    check_umma_shape(m, n, cta_group)
    lane = 1 << TMEM_LANE_SHIFT
    if cta_group == 1 and m == 128 or cta_group == 2 and m == 256:
        return Layout((128, n), (lane, 1))
    if cta_group == 1 and m == 64:
        return Layout(((16, 4), n), ((lane, 32 * lane), 1))
    # cta_group::2, M = 128: 64 rows per CTA, the N columns folded over the two lane halves
    return Layout((64, (n // 2, 2)), (lane, (1, 64 * lane)))


def umma_ts_a_tmem(m: int, k: int, dtype: str = "bf16") -> Layout:
    """A (M x K, 16-bit) in tensor memory for the TS form of tcgen05.mma (cta_group::1, M = 128):
    (row, k) -> the tensor-memory address of the 32-bit cell holding it, as a layout over (row, k
    pair): lane = row, column = k // 2 (element k in half k % 2). Other shapes are refused."""
    d = canonical_dtype(dtype)
    if element_bytes(d) != 2:
        raise LayoutError(f"warpy models A in tensor memory for 16-bit types, not {dtype}")
    if m != 128:
        raise LayoutError(f"warpy models A in tensor memory for M = 128 (one CTA, a row a lane), not M = {m}")
    if k % 16:
        raise LayoutError(f"A's K = {k} is not a whole number of 16-element MMA steps")
    return Layout((m, k // 2), (1 << TMEM_LANE_SHIFT, 1))


def tmem_warp_lanes(warp: int) -> range:
    """The lanes a warp may access with tcgen05.ld/st: sub-partition warp % 4, lanes 32(w%4)..+31."""
    if warp < 0:
        raise LayoutError(f"warp {warp} is negative")
    q = warp % 4
    return range(32 * q, 32 * q + 32)


TCGEN05_LD_NUMS = (1, 2, 4, 8, 16, 32, 64, 128)


def tcgen05_ld_32x32b(num: int, warp: int = 0, column: int = 0) -> tuple[Layout, int]:
    """The tcgen05.ld/st .32x32b.x{num} fragment of a warp: (thread t, register v) -> tensor-memory
    address, returned as (layout, base address): lane 32(w%4) + t, column `column` + v."""
    if num not in TCGEN05_LD_NUMS:
        raise LayoutError(f"tcgen05.ld.32x32b takes .num in {TCGEN05_LD_NUMS}, not x{num}")
    if not 0 <= column or column + num > TMEM_COLUMNS:
        raise LayoutError(f"columns [{column},{column + num}) are outside the {TMEM_COLUMNS} tensor-memory columns")
    base = tmem_address(tmem_warp_lanes(warp).start, column)
    return Layout((32, num), (1 << TMEM_LANE_SHIFT, 1)), base


def tmem_ld_coords(m: int, n: int, num: int, warp: int, column: int = 0, cta_group: int = 1) -> list[list[tuple[int, int] | None]]:
    """For a warp's tcgen05.ld.32x32b.x{num} at `column`: element (row, col) of this CTA's accumulator
    share held by each (thread, register), or None where the cell is not part of the accumulator."""
    acc = tmem_accumulator(m, n, cta_group)
    share_rows = m // cta_group
    where: dict[int, tuple[int, int]] = {}
    for r in range(share_rows):
        for c in range(n):
            where[acc((r, c))] = (r, c)
    frag, base = tcgen05_ld_32x32b(num, warp, column)
    out: list[list[tuple[int, int] | None]] = []
    for t in range(32):
        out.append([where.get(base + frag((t, v))) for v in range(num)])
    return out


# --- ldmatrix / stmatrix ----------------------------------------------------------------------------


def ldmatrix_fragment(num: int, trans: bool = False) -> Layout:
    """ldmatrix/stmatrix .m8n8.x{num}.b16: (thread, value) -> index `row + 8*col + 64*matrix` of
    `num` 8x8 matrices of 16-bit elements. Thread t holds row t//4, columns 2(t%4), 2(t%4)+1 of each
    matrix (values matrix-major); with .trans the row and column swap."""
    if num not in (1, 2, 4):
        raise LayoutError(f"ldmatrix/stmatrix take .x1, .x2 or .x4, not x{num}")
    if trans:
        return Layout(((4, 8), (2, num)), ((2, 8), (1, 64)))
    return Layout(((4, 8), (2, num)), ((16, 1), (8, 64)))


def ldmatrix_row_addresses(num: int) -> list[tuple[int, int] | None]:
    """Which (row, matrix) each thread's address names: thread 8i + r gives row r of matrix i;
    threads from 8*num on are not read."""
    if num not in (1, 2, 4):
        raise LayoutError(f"ldmatrix/stmatrix take .x1, .x2 or .x4, not x{num}")
    return [(t % 8, t // 8) if t < 8 * num else None for t in range(32)]


__all__ = [
    "MmaAtom",
    "umma_ss",
    "wgmma",
    "wgmma_acc_layout",
    "wgmma_a_register_layout",
    "wgmma_acc_chunk_as_a",
    "check_fragment",
    "umma_ts_a_tmem",
    "tmem_address",
    "tmem_lane_col",
    "tmem_accumulator",
    "tmem_warp_lanes",
    "tcgen05_ld_32x32b",
    "tmem_ld_coords",
    "ldmatrix_fragment",
    "ldmatrix_row_addresses",
    "TMEM_LANES",
    "TMEM_COLUMNS",
]
