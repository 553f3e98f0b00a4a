"""Descriptors read off layouts: GMMA/UMMA shared-memory descriptors, the UMMA instruction
descriptor and TMA boxes. Every encoder ends in a **decider** that rebuilds, from the encoded
fields alone, the image the hardware will read (or write) and compares it with the layout at
every coordinate; a layout the instruction cannot express raises `LayoutError` naming why.

Conventions (see docs/descriptors.md):
- Addresses and offsets are bytes. A tile's layout gives `swizzle(addr + linear(row, k))`: the
  swizzle acts on absolute shared-memory address bits, as TMA writes and the MMA reads them.
- The descriptor of a tile describes the *first MMA K-block* of it: rows x (32 bytes of K). The
  other K-blocks are `tile.k_steps(k)`; their descriptors differ only in the start address.
- warpy emits base_offset 0 only: a swizzled descriptor's start address must have zero row-phase
  bits (bits 7.. of the address inside the swizzle repeat), which is where the hardware's pattern
  and the absolute-address swizzle provably agree.
- LBO/SBO roles that the public sources state but that have not been run on hardware here are
  the named constants below; flipping one flips encoder and image together.
"""

from __future__ import annotations

from typing import Callable, Literal

import attrs

from warpy.layout.core import Layout, LayoutError
from warpy.layout.smem import (
    CORE_ROW_BYTES,
    CORE_ROWS,
    SmemTile,
    canonical_dtype,
    element_bytes,
    repeat_bytes,
    smem_tile,
    span_of_swizzle,
    swizzle_for_span,
)
from warpy.layout.tma import TmaBox

# --- roles of LBO and SBO (flip here if the H200/B200 test disagrees) --------------------------
#: K-major, no swizzle: LBO = distance between the two 16-byte K chunks of a core-matrix pair,
#: SBO = distance between 8-row groups along M/N (CUTLASS make_gmma_desc/make_umma_desc; PTX
#: "the stride from the first column to the second column of the 8x2 tile").
K_INTERLEAVE_LBO_IS_K_STRIDE = True
#: MN-major, no swizzle: LBO = distance between 8-row groups along K, SBO = distance between
#: 16-byte chunks along M/N (CUTLASS swaps the two relative to the swizzled MN-major case).
MN_INTERLEAVE_LBO_IS_K_STRIDE = True
#: MN-major, swizzled: LBO = distance between swizzle-span columns along M/N, SBO = distance
#: between 8-row groups along K (PTX: "stride from the first (swizzle-byte-size/16) rows to the next").
#: SBO's role holds on the H200 (the megakernel's decode-attention P·V, 128-byte swizzle, one span
#: column); LBO's is not exercised there.
MN_SWIZZLED_LBO_IS_MN_STRIDE = True
#: Value (bytes) put in a field the layout leaves unused (K-major swizzled LBO; SBO or LBO when the
#: footprint has a single group). CUTLASS writes 1 (16 bytes) for the K-major swizzled LBO.
UNUSED_FIELD_BYTES = 16

#: Bytes of K one MMA reads per row: 16 fp16, 8 tf32, 32 fp8 (wgmma k16/k8/k32, tcgen05 K likewise).
MMA_K_BYTES = 32

Arch = Literal["sm90", "sm100"]

_GMMA_LAYOUT_CODE = {0: 0, 128: 1, 64: 2, 32: 3}
_UMMA_LAYOUT_CODE = {0: 0, 128: 2, 64: 4, 32: 6}
_FIELD_LIMIT = 1 << 18  # 14-bit fields of (bytes >> 4)


@attrs.frozen
class SmemDescFields:
    """The fields of a GMMA (sm90) or UMMA (sm100) shared-memory descriptor, in bytes where they are bytes."""

    arch: Arch
    start: int
    lbo: int
    sbo: int
    swizzle: int  # span in bytes, 0 = none (interleave)
    base_offset: int = 0
    lbo_mode: int = 0  # sm100 only: 0 = relative offset
    version: int = 1  # sm100 only: fixed 0b001


def _field(name: str, value: int) -> int:
    if value % 16:
        raise LayoutError(f"{name} = {value} bytes is not a multiple of 16")
    if not 0 <= value < _FIELD_LIMIT:
        raise LayoutError(f"{name} = {value} bytes does not fit the 14-bit field (0..{_FIELD_LIMIT - 16})")
    return value >> 4


def encode_smem_desc(f: SmemDescFields) -> int:
    """Pack the fields (PTX ISA 'matrix descriptor' / 'shared memory descriptor' bit layout)."""
    word = _field("start address", f.start) | _field("LBO", f.lbo) << 16 | _field("SBO", f.sbo) << 32
    if not 0 <= f.base_offset < 8:
        raise LayoutError(f"base offset {f.base_offset} is outside 0..7")
    word |= f.base_offset << 49
    if f.arch == "sm90":
        word |= _GMMA_LAYOUT_CODE[f.swizzle] << 62
    else:
        word |= (f.version & 7) << 46 | (f.lbo_mode & 1) << 52 | _UMMA_LAYOUT_CODE[f.swizzle] << 61
    return word


def smem_desc_low_word(f: SmemDescFields) -> tuple[int, int]:
    """The low 32 bits of the descriptor as a program computes them from a start address it holds
    in a register: `(shift, rest)` with low word = (start >> shift) + rest. The start address is
    the word's lowest field, in `_field`'s 16-byte units; `rest` is the word's other fields (LBO)
    as `encode_smem_desc` packs them. The high word is `encode_smem_desc(f) >> 32`."""
    return 4, encode_smem_desc(attrs.evolve(f, start=0)) & 0xFFFF_FFFF


def decode_gmma_desc(desc: int) -> SmemDescFields:
    if not 0 <= desc < 1 << 64:
        raise LayoutError(f"descriptor {desc:#x} is not a 64-bit value")
    code = desc >> 62 & 3
    span = {v: k for k, v in _GMMA_LAYOUT_CODE.items()}[code]
    return SmemDescFields(
        "sm90",
        start=(desc & 0x3FFF) << 4,
        lbo=(desc >> 16 & 0x3FFF) << 4,
        sbo=(desc >> 32 & 0x3FFF) << 4,
        swizzle=span,
        base_offset=desc >> 49 & 7,
        lbo_mode=0,
        version=0,
    )


def decode_umma_desc(desc: int) -> SmemDescFields:
    if not 0 <= desc < 1 << 64:
        raise LayoutError(f"descriptor {desc:#x} is not a 64-bit value")
    code = desc >> 61 & 7
    inverse = {v: k for k, v in _UMMA_LAYOUT_CODE.items()}
    if code not in inverse:
        what = "128B-with-32B-atom" if code == 1 else "reserved"
        raise LayoutError(f"UMMA layout code {code} ({what}) is not one warpy describes")
    return SmemDescFields(
        "sm100",
        start=(desc & 0x3FFF) << 4,
        lbo=(desc >> 16 & 0x3FFF) << 4,
        sbo=(desc >> 32 & 0x3FFF) << 4,
        swizzle=inverse[code],
        base_offset=desc >> 49 & 7,
        lbo_mode=desc >> 52 & 1,
        version=desc >> 46 & 7,
    )


# --- the image a descriptor describes -------------------------------------------------------------


def mma_k_elems(dtype: str) -> int:
    """K elements of one MMA: 32 bytes of K (fp16/bf16 16, tf32/fp32 8, fp8 32)."""
    return MMA_K_BYTES // element_bytes(dtype)


def desc_image(f: SmemDescFields, major: str, dtype: str) -> Callable[[int, int], int]:
    """(row, k) -> the shared-memory byte address the MMA reads, from the fields and the canonical rules.

    Canonical layouts in 16-byte units, T = 16 / element bytes, W = swizzle span / 16 (CUTLASS
    notation, mma_traits_sm90_gmma.hpp / mma_sm100_desc.hpp):
      K-major  none : ((8,m),(T,2)):((1T,SBO),(1,LBO))      swizzled: ((8,m),(T,2)):((WT,SBO),(1,T))
      MN-major none : ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO))  swizzled: ((T,W,m),(8,k)):((1,T,LBO),(WT,SBO))
    followed by the swizzle on absolute address bits.
    """
    if f.base_offset:
        raise LayoutError(f"descriptor base offset {f.base_offset}: warpy models base offset 0 only")
    if f.arch == "sm100" and f.lbo_mode:
        raise LayoutError("UMMA descriptor uses the absolute LBO mode (bit 52), which warpy does not model")
    if f.arch == "sm100" and f.version != 1:
        raise LayoutError(f"UMMA descriptor version field is {f.version}, not the fixed 0b001")
    e = element_bytes(dtype)
    t = CORE_ROW_BYTES // e
    sw = swizzle_for_span(f.swizzle)
    w = f.swizzle
    start = f.start
    if major == "K":
        if w:
            sbo = f.sbo

            def k_sw(r: int, k: int) -> int:
                return sw(start + (r % CORE_ROWS) * w + (r // CORE_ROWS) * sbo + k * e)

            return k_sw
        k_stride, mn_stride = (f.lbo, f.sbo) if K_INTERLEAVE_LBO_IS_K_STRIDE else (f.sbo, f.lbo)

        def k_none(r: int, k: int) -> int:
            return start + (r % CORE_ROWS) * CORE_ROW_BYTES + (r // CORE_ROWS) * mn_stride + (k // t) * k_stride + (k % t) * e

        return k_none
    if major != "MN":
        raise LayoutError(f"major {major!r} is not 'K' or 'MN'")
    if w:
        se = w // e
        mn_stride, k_stride = (f.lbo, f.sbo) if MN_SWIZZLED_LBO_IS_MN_STRIDE else (f.sbo, f.lbo)

        def mn_sw(r: int, k: int) -> int:
            return sw(start + (r % se) * e + (r // se) * mn_stride + (k % CORE_ROWS) * w + (k // CORE_ROWS) * k_stride)

        return mn_sw
    k_stride, mn_stride = (f.lbo, f.sbo) if MN_INTERLEAVE_LBO_IS_K_STRIDE else (f.sbo, f.lbo)

    def mn_none(r: int, k: int) -> int:
        return start + (r % t) * e + (r // t) * mn_stride + (k % CORE_ROWS) * CORE_ROW_BYTES + (k // CORE_ROWS) * k_stride

    return mn_none


# --- encoders and their decider -------------------------------------------------------------------


def _tile_address(tile: SmemTile, addr: int) -> Callable[[int, int], int]:
    sw = tile.layout.swizzle
    rows, ks = tile.linear_tables()

    def at(r: int, k: int) -> int:
        return sw(addr + rows[r] + ks[k])

    return at


def _footprint(tile: SmemTile) -> tuple[int, int]:
    kk = mma_k_elems(tile.dtype)
    if tile.cols < kk:
        raise LayoutError(f"tile has K = {tile.cols}, fewer than one MMA's K = {kk} for {tile.dtype}")
    return tile.rows, kk


def _check_start(tile: SmemTile, addr: int, start: int) -> None:
    if addr < 0:
        raise LayoutError(f"shared-memory address {addr} is negative")
    if start % 16:
        raise LayoutError(f"start address {start:#x} is not 16-byte aligned (misaligned base)")
    if tile.swizzle:
        bits = tile.layout.swizzle.bits
        phase = start >> 7 & ((1 << bits) - 1)
        if phase:
            raise LayoutError(
                f"misaligned base: start address {start:#x} is {phase} rows into a {repeat_bytes(tile.swizzle)}-byte "
                f"swizzle repeat; place the tile on a {repeat_bytes(tile.swizzle)}-byte boundary (warpy emits base offset 0 only)"
            )


def _probe(tile: SmemTile, a: tuple[int, int], b: tuple[int, int]) -> int:
    return tile.linear(*b) - tile.linear(*a)


def smem_desc_fields(tile: SmemTile, addr: int, arch: Arch) -> SmemDescFields:
    """Read the descriptor fields off a tile's layout (probing its linear strides); no checking here."""
    span = span_of_swizzle(tile.layout.swizzle)
    if span != tile.swizzle:
        raise LayoutError(f"tile says swizzle {tile.swizzle} bytes but its layout's swizzle is {tile.layout.swizzle}")
    rows, kk = _footprint(tile)
    e = tile.elem_bytes
    t = CORE_ROW_BYTES // e
    start = addr + tile.linear(0, 0)
    unused = UNUSED_FIELD_BYTES
    if tile.major == "K":
        sbo = _probe(tile, (0, 0), (CORE_ROWS, 0)) if rows > CORE_ROWS else unused
        if span:
            lbo = unused
        else:
            k_stride = _probe(tile, (0, 0), (0, t))
            lbo, sbo = (k_stride, sbo) if K_INTERLEAVE_LBO_IS_K_STRIDE else (sbo, k_stride)
    else:
        per = span // e if span else t
        mn_stride = _probe(tile, (0, 0), (per, 0)) if rows > per else unused
        k_stride = _probe(tile, (0, 0), (0, CORE_ROWS)) if kk > CORE_ROWS else unused
        if span:
            lbo, sbo = (mn_stride, k_stride) if MN_SWIZZLED_LBO_IS_MN_STRIDE else (k_stride, mn_stride)
        else:
            lbo, sbo = (k_stride, mn_stride) if MN_INTERLEAVE_LBO_IS_K_STRIDE else (mn_stride, k_stride)
    return SmemDescFields(arch, start=start, lbo=lbo, sbo=sbo, swizzle=span)


def _diagnose(tile: SmemTile) -> str:
    """The structural reason a tile is not canonical, where one of the usual ones applies."""
    e = tile.elem_bytes
    line_step, elem_step = ((1, 0), (0, 1)) if tile.major == "K" else ((0, 1), (1, 0))
    what = "rows" if tile.major == "K" else "K-rows"
    line = _probe(tile, (0, 0), line_step)
    elem = _probe(tile, (0, 0), elem_step)
    if elem != e:
        return f"; consecutive elements along the contiguous extent are {elem} bytes apart, not {e}"
    if line != tile.span_bytes:
        atom = f"the {tile.swizzle}-byte swizzle atom" if tile.swizzle else "an unswizzled core matrix"
        return f"; wrong swizzle atom: {what} are {line} bytes apart but {atom} has {tile.span_bytes}-byte {what}"
    return ""


def check_smem_desc(desc: int, tile: SmemTile, addr: int, arch: Arch) -> None:
    """The decider: the image `desc` describes must equal the tile's layout at every coordinate it reads."""
    f = decode_gmma_desc(desc) if arch == "sm90" else decode_umma_desc(desc)
    if f.swizzle != tile.swizzle:
        raise LayoutError(f"descriptor swizzle {f.swizzle} bytes differs from the tile's {tile.swizzle}-byte swizzle atom")
    _check_start(tile, addr, f.start)
    image = desc_image(f, tile.major, tile.dtype)
    actual = _tile_address(tile, addr)
    rows, kk = _footprint(tile)
    owner: dict[int, tuple[int, int]] = {}
    for r in range(rows):
        for k in range(kk):
            hw, lay = image(r, k), actual(r, k)
            if hw in owner:
                raise LayoutError(
                    f"the tile's layout aliases: (row {r}, k {k}) and {owner[hw]} share byte {hw:#x}"
                    " (a physical operand tile must be alias-free)"
                )
            owner[hw] = (r, k)
            if hw != lay:
                raise LayoutError(
                    f"the {arch} descriptor cannot express this {tile.major}-major {tile.dtype} tile"
                    f" (swizzle {tile.swizzle or 'none'}): at (row {r}, k {k}) the MMA would read {hw:#x}"
                    f" but the layout puts the element at {lay:#x}{_diagnose(tile)}"
                )


def _smem_desc(tile: SmemTile, addr: int, arch: Arch) -> int:
    f = smem_desc_fields(tile, addr, arch)
    _check_start(tile, addr, f.start)
    desc = encode_smem_desc(f)
    check_smem_desc(desc, tile, addr, arch)
    return desc


def gmma_smem_desc(tile: SmemTile, addr: int = 0) -> int:
    """sm_90a wgmma shared-memory descriptor of the tile's first K-block, placed at shared address `addr`."""
    if tile.major == "MN" and tile.elem_bytes != 2:
        raise LayoutError(f"wgmma reads {tile.dtype} operands from shared memory only K-major (transpose is 16-bit only)")
    return _smem_desc(tile, addr, "sm90")


def umma_smem_desc(tile: SmemTile, addr: int = 0) -> int:
    """sm_100a tcgen05.mma shared-memory descriptor of the tile's first K-block, placed at `addr`."""
    return _smem_desc(tile, addr, "sm100")


def smem_descs(tile: SmemTile, addr: int = 0, arch: Arch = "sm100") -> list[int]:
    """One descriptor per MMA K-step of the tile (start addresses from the layout's K-step offsets)."""
    enc = umma_smem_desc if arch == "sm100" else gmma_smem_desc
    return [enc(s, addr) for s in tile.k_steps(mma_k_elems(tile.dtype))]


# --- UMMA instruction descriptor -------------------------------------------------------------------

#: (kind, format code) of each input type.
_UMMA_IN: dict[str, tuple[str, int]] = {
    "fp16": ("f16", 0),
    "bf16": ("f16", 1),
    "tf32": ("tf32", 2),
    "e4m3": ("f8f6f4", 0),
    "e5m2": ("f8f6f4", 1),
}
_UMMA_D: dict[str, int] = {"fp16": 0, "fp32": 1}


@attrs.frozen
class IdescFields:
    a: str
    b: str
    d: str
    m: int
    n: int
    a_major: str
    b_major: str
    negate_a: bool = False
    negate_b: bool = False


def umma_kind(a: str, b: str) -> str:
    """The tcgen05.mma .kind of an input-type pair (f16, tf32 or f8f6f4)."""
    ka, kb = (_UMMA_IN.get(canonical_dtype(x), ("?", 0))[0] for x in (a, b))
    if ka == "?" or kb == "?":
        raise LayoutError(f"tcgen05.mma has no kind for inputs {a} x {b}")
    if ka != kb:
        raise LayoutError(f"inputs {a} x {b} belong to different kinds ({ka}, {kb})")
    if ka == "f16" and canonical_dtype(a) != canonical_dtype(b):
        raise LayoutError(f"kind::f16 multiplies f16 x f16 or bf16 x bf16, not {a} x {b}")
    return ka


def check_umma_shape(m: int, n: int, cta_group: int = 1) -> None:
    """PTX ISA tcgen05.mma shapes (dense, no .ws): cta_group::1 M 64/128, N 8..256 step 8;
    cta_group::2 M 128/256, N 16..256 step 16."""
    if cta_group == 1:
        if m not in (64, 128):
            raise LayoutError(f"M = {m}: tcgen05.mma.cta_group::1 takes M = 64 or 128")
        if not (8 <= n <= 256 and n % 8 == 0):
            raise LayoutError(f"N = {n}: tcgen05.mma.cta_group::1 takes N = 8..256 in steps of 8")
    elif cta_group == 2:
        if m not in (128, 256):
            raise LayoutError(f"M = {m}: tcgen05.mma.cta_group::2 takes M = 128 or 256")
        if not (16 <= n <= 256 and n % 16 == 0):
            raise LayoutError(f"N = {n}: tcgen05.mma.cta_group::2 takes N = 16..256 in steps of 16")
    else:
        raise LayoutError(f"cta_group {cta_group} is not 1 or 2")


def umma_idesc(
    a: str,
    b: str,
    d: str,
    m: int,
    n: int,
    a_major: str = "K",
    b_major: str = "K",
    *,
    cta_group: int = 1,
    a_from_tmem: bool = False,
    negate_a: bool = False,
    negate_b: bool = False,
) -> int:
    """The 32-bit tcgen05.mma instruction descriptor (kind::f16, kind::tf32, kind::f8f6f4; dense).

    Bits (CUTLASS UMMA::InstrDescriptor, PTX 'instruction descriptor'): 4-5 D format, 7-9 A format,
    10-12 B format, 13/14 negate A/B, 15/16 A/B major (1 = MN), 17-22 N>>3, 24-28 M>>4.
    """
    kind = umma_kind(a, b)
    dd = {"f16": "fp16", "f32": "fp32"}.get(d, d)
    if dd not in _UMMA_D:
        raise LayoutError(f"accumulator type {d!r} is not f16 or f32")
    if kind == "tf32" and dd != "fp32":
        raise LayoutError("kind::tf32 accumulates in f32 only")
    if kind == "f16" and canonical_dtype(a) == "bf16" and dd != "fp32":
        raise LayoutError("bf16 inputs accumulate in f32 only")
    for name, mj in (("A", a_major), ("B", b_major)):
        if mj not in ("K", "MN"):
            raise LayoutError(f"{name} major {mj!r} is not 'K' or 'MN'")
    if a_from_tmem and a_major != "K":
        raise LayoutError("A read from tensor memory must be K-major")
    check_umma_shape(m, n, cta_group)
    word = (
        _UMMA_D[dd] << 4
        | _UMMA_IN[canonical_dtype(a)][1] << 7
        | _UMMA_IN[canonical_dtype(b)][1] << 10
        | int(negate_a) << 13
        | int(negate_b) << 14
        | int(a_major == "MN") << 15
        | int(b_major == "MN") << 16
        | (n >> 3) << 17
        | (m >> 4) << 24
    )
    got = decode_umma_idesc(word, kind)
    want = IdescFields(canonical_dtype(a), canonical_dtype(b), dd, m, n, a_major, b_major, negate_a, negate_b)
    if got != want:  # the decider: the fields the hardware will read are the ones asked for
        raise LayoutError(f"instruction descriptor {word:#010x} decodes to {got}, not {want}")
    return word


def decode_umma_idesc(word: int, kind: str = "f16") -> IdescFields:
    """Fields of a dense instruction descriptor, given the kind (the format codes depend on it)."""
    if not 0 <= word < 1 << 32:
        raise LayoutError(f"instruction descriptor {word:#x} is not a 32-bit value")
    if word & 0b1111 or word >> 29 & 1 or word >> 23 & 1 or word >> 30:
        raise LayoutError(f"instruction descriptor {word:#010x} sets sparse/saturate/reserved/shift bits")
    codes = {code: name for name, (k, code) in _UMMA_IN.items() if k == kind}
    dcodes = {v: k for k, v in _UMMA_D.items()}
    fa, fb, fd = word >> 7 & 7, word >> 10 & 7, word >> 4 & 3
    if fa not in codes or fb not in codes or fd not in dcodes:
        raise LayoutError(f"instruction descriptor {word:#010x} has formats A={fa} B={fb} D={fd}, not valid for kind::{kind}")
    return IdescFields(
        codes[fa],
        codes[fb],
        dcodes[fd],
        m=(word >> 24 & 0x1F) << 4,
        n=(word >> 17 & 0x3F) << 3,
        a_major="MN" if word >> 15 & 1 else "K",
        b_major="MN" if word >> 16 & 1 else "K",
        negate_a=bool(word >> 13 & 1),
        negate_b=bool(word >> 14 & 1),
    )


# --- TMA boxes --------------------------------------------------------------------------------------


@attrs.frozen
class TmaSlice:
    """One CTA's part of a multicast box: where it lands (bytes from the tile start) and the
    coordinate offset (per tensor-map dimension, innermost first) to add to the tile's coordinates."""

    cta: int
    smem_offset: int
    coord_offset: tuple[int, ...]


def _global_modes(g: Layout) -> tuple[list[int], list[int]]:
    if g.rank() < 2:
        raise LayoutError(f"global layout {g} needs at least the modes (rows, cols)")
    shape, stride = [], []
    for mode in g.modes():
        if not isinstance(mode.shape, int) or not isinstance(mode.stride, int):
            raise LayoutError(f"global layout {g}: mode {mode} is nested; give one extent per mode")
        shape.append(mode.shape)
        stride.append(mode.stride)
    return shape, stride


def _round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def _over_real_tensor(
    padded: TmaBox, gshape: list[int], gstride: list[int], contig_mode: int, outer_mode: int, tile: SmemTile
) -> TmaBox:
    """The padded plan's box over the real tensor: its dims and strides, in the same dimension order."""
    e = tile.elem_bytes
    contig_ext, outer_ext = gshape[contig_mode], gshape[outer_mode]
    split = padded.rank - (len(gshape) - 2) == 3
    if split:
        span = padded.box[0]
        if contig_ext % span:
            raise LayoutError(
                f"the tile's rows are wider than the {tile.span_bytes}-byte span, so the box is split 3-D; "
                f"that needs the global contiguous extent ({contig_ext}) to be a multiple of {span}"
            )
        dims = [span, outer_ext, contig_ext // span]
        strides = [gstride[outer_mode] * e, span * e]
    else:
        dims = [contig_ext, outer_ext]
        strides = [gstride[outer_mode] * e]
    dims += gshape[2:]
    strides += [s * e for s in gstride[2:]]
    return attrs.evolve(padded, dims=tuple(dims), strides=tuple(strides))


def _tma_plan(
    global_layout: Layout, tile: SmemTile, multicast: int, oob_fill: str, l2_promotion: int
) -> tuple[TmaBox, tuple[TmaSlice, ...]]:
    e = tile.elem_bytes
    gshape, gstride = _global_modes(global_layout)
    contig_mode, outer_mode = (1, 0) if tile.major == "K" else (0, 1)
    if gstride[contig_mode] != 1:
        which = "K (mode 1)" if tile.major == "K" else "MN (mode 0)"
        raise LayoutError(
            f"a {tile.major}-major tile needs the global {which} contiguous (stride 1); {global_layout} has stride {gstride[contig_mode]}"
        )
    contig_ext, outer_ext = gshape[contig_mode], gshape[outer_mode]
    tile_contig, tile_outer = (tile.cols, tile.rows) if tile.major == "K" else (tile.rows, tile.cols)
    if tile_contig > contig_ext or tile_outer > outer_ext:
        # A tile larger than the tensor: the same box reads past the tensor's edge, and TMA fills
        # what lies outside. The box is decided on a tensor padded to hold the tile (same
        # geometry), then given the real extents and strides.
        pshape = list(gshape)
        pshape[contig_mode] = max(contig_ext, tile_contig)
        pshape[outer_mode] = max(outer_ext, tile_outer)
        pstride = [0] * len(pshape)
        pstride[contig_mode] = 1
        pstride[outer_mode] = max(gstride[outer_mode], _round_up(pshape[contig_mode], 16 // e))
        acc = pstride[outer_mode] * pshape[outer_mode]
        for d in range(2, len(pshape)):
            pstride[d] = acc
            acc *= pshape[d]
        padded, slices = _tma_plan(Layout(tuple(pshape), tuple(pstride)), tile, multicast, oob_fill, l2_promotion)
        return _over_real_tensor(padded, gshape, gstride, contig_mode, outer_mode, tile), slices
    batch_ext, batch_stride = gshape[2:], gstride[2:]
    span = tile.span_elems
    split = tile_contig > span
    if split:
        if contig_ext % span:
            raise LayoutError(
                f"the tile's rows are {tile_contig * e} bytes, wider than the {tile.span_bytes}-byte span, so the box"
                f" is split 3-D; that needs the global contiguous extent ({contig_ext}) to be a multiple of {span}"
            )
        dims = [span, outer_ext, contig_ext // span]
        strides = [gstride[outer_mode] * e, span * e]
        tile_box = [span, tile_outer, tile_contig // span]
    else:
        dims = [contig_ext, outer_ext]
        strides = [gstride[outer_mode] * e]
        tile_box = [tile_contig, tile_outer]
    dims += batch_ext
    strides += [s * e for s in batch_stride]
    tile_box += [1] * len(batch_ext)
    if len(dims) > 5:
        raise LayoutError(f"the tensor map would have rank {len(dims)}; TMA allows at most 5")
    # multicast: each of n CTAs loads 1/n of the box along its outermost tile dimension
    if multicast < 1:
        raise LayoutError(f"multicast over {multicast} CTAs")
    slice_dim = 2 if split else 1
    if tile_box[slice_dim] % multicast:
        raise LayoutError(f"the box's outer extent {tile_box[slice_dim]} does not divide among {multicast} CTAs")
    box = list(tile_box)
    box[slice_dim] //= multicast
    slice_bytes = e
    for b in box:
        slice_bytes *= b
    rep = repeat_bytes(tile.swizzle)
    if multicast > 1 and slice_bytes % rep:
        raise LayoutError(f"each CTA's slice is {slice_bytes} bytes, not a multiple of the {rep}-byte swizzle repeat")
    slices = tuple(
        TmaSlice(i, i * slice_bytes, tuple(i * box[d] if d == slice_dim else 0 for d in range(len(box))))
        for i in range(multicast)
    )
    tmap = TmaBox(
        dtype=tile.dtype,
        dims=tuple(dims),
        strides=tuple(strides),
        box=tuple(box),
        swizzle=tile.swizzle,
        elem_strides=(1,) * len(dims),
        interleave=0,
        oob_fill=oob_fill,
        l2_promotion=l2_promotion,
    )
    check_tma_box(tmap, global_layout, tile, multicast)
    return tmap, slices


def _slice_dim(box: TmaBox, global_layout: Layout) -> int:
    """The outermost box dimension that is not a batch mode: the one multicast slices."""
    return box.rank - (global_layout.rank() - 2) - 1


def check_tma_box(box: TmaBox, global_layout: Layout, tile: SmemTile, multicast: int = 1, addr: int = 0) -> None:
    """The decider. It rebuilds what the `multicast` copies of `box` do, from the box alone: CTA i
    copies the box at coordinates shifted by i boxes along the outermost non-batch dimension, into
    shared memory i * box_bytes further on. Traversal is innermost first, packed, and swizzled by the
    box's mode on the absolute address. Every element read must be a tile element, must land where
    the tile's layout puts it, and every tile element must be read exactly once."""
    e = tile.elem_bytes
    rep = max(128, repeat_bytes(box.swizzle))
    if addr % rep:
        raise LayoutError(f"shared address {addr:#x} is not aligned to {rep} bytes (TMA destination / swizzle repeat)")
    if box.elem_bytes != e:
        raise LayoutError(f"the box moves {box.dtype} but the tile holds {tile.dtype}")
    if box.swizzle != tile.swizzle:
        raise LayoutError(f"the box swizzles {box.swizzle} bytes but the tile's swizzle atom is {tile.swizzle} bytes")
    _, gstride = _global_modes(global_layout)
    where: dict[int, tuple[int, int]] = {}
    for r in range(tile.rows):
        for k in range(tile.cols):
            where.setdefault((r * gstride[0] + k * gstride[1]) * e, (r, k))
    lin_rows, lin_ks = tile.linear_tables()
    if len(where) != tile.rows * tile.cols:
        raise LayoutError(f"the global layout {global_layout} aliases elements of the tile")
    sw = swizzle_for_span(box.swizzle)
    sd = _slice_dim(box, global_layout)
    packed_stride = [e]
    for b in box.box[:-1]:
        packed_stride.append(packed_stride[-1] * b)
    seen: set[tuple[int, int]] = set()
    for cta in range(multicast):
        for flat in range(box.box_bytes // e):
            crd, rest = [], flat
            for b in box.box:
                crd.append(rest % b)
                rest //= b
            packed = sum(c * s for c, s in zip(crd, packed_stride))
            crd[sd] += cta * box.box[sd]
            for d, (c, ext) in enumerate(zip(crd, box.dims)):
                if c >= ext:
                    raise LayoutError(f"CTA {cta}'s box runs past global extent {ext} of dimension {d}")
            gbyte = crd[0] * e + sum(c * st for c, st in zip(crd[1:], box.strides))
            if gbyte not in where:
                raise LayoutError(f"CTA {cta}'s box reads global byte {gbyte:#x}, which is not an element of the tile")
            r, k = where[gbyte]
            if (r, k) in seen:
                raise LayoutError(f"tile element (row {r}, k {k}) is copied twice")
            seen.add((r, k))
            got = sw(addr + cta * box.box_bytes + packed)
            want = sw(addr + lin_rows[r] + lin_ks[k] - tile.offset)
            if got != want:
                raise LayoutError(
                    f"the TMA box writes tile element (row {r}, k {k}) to {got:#x} but the tile's layout has it at {want:#x}"
                )
    if len(seen) != tile.rows * tile.cols:
        raise LayoutError(f"the boxes copy {len(seen)} of the tile's {tile.rows * tile.cols} elements")


def tma_box(
    global_layout: Layout,
    smem_tile: SmemTile,
    multicast: int = 1,
    oob_fill: str = "zero",
    l2_promotion: int = 0,
) -> TmaBox:
    """The tensor map that copies one `smem_tile` out of `global_layout` (in elements, modes
    (rows, cols, batch...)) with one box, split 3-D when a row is wider than the swizzle span; with
    `multicast = n`, the box each of n CTAs issues (see `tma_multicast_slices`)."""
    return _tma_plan(global_layout, smem_tile, multicast, oob_fill, l2_promotion)[0]


def tma_multicast_slices(global_layout: Layout, smem_tile: SmemTile, multicast: int) -> tuple[TmaSlice, ...]:
    """Where each CTA's slice of a multicast box lands and which coordinates it starts at."""
    return _tma_plan(global_layout, smem_tile, multicast, "zero", 0)[1]


def multicast_rows(rows: int, ways: int, atom: int = 8) -> tuple[int, int]:
    """(rows of each CTA's slice but the last, rows of the last) of a box of `rows` shared `ways`
    ways in whole swizzle atoms of `atom` rows: ceil(atoms / ways) atoms a slice, the rest to the last
    (equal where the atoms divide evenly); (0, 0) where the last would get none or `rows` is not whole atoms."""
    atoms, part = divmod(rows, atom)
    per = -(-atoms // ways)
    last = atoms - (ways - 1) * per
    return (atom * per, atom * last) if not part and ways >= 1 and last >= 1 else (0, 0)


def tma_uneven_slices(global_layout: Layout, tile: SmemTile, ways: int, oob_fill: str = "zero",
                      l2_promotion: int = 0) -> tuple[TmaBox, TmaBox, tuple[TmaSlice, ...]]:
    """A K-major tile's box shared `ways` ways where its rows do not divide into equal slices of whole
    swizzle atoms (88 rows two ways, 104 four ways): CTA j < ways - 1 loads rows [j s, (j + 1) s) with
    box `main` (s = `multicast_rows`' first), the last CTA the rest with box `last`. Each slice starts
    on a whole atom, so it lands as a tile of its own rows would at that address (the decider proves
    each box against such a tile, swizzled on the absolute address, and that tile against the rows of
    `tile` it stands for). Returns (main, last, the slices)."""
    if tile.major != "K":
        raise LayoutError("uneven multicast slices are cut from a K-major tile's rows")
    atom = max(1, repeat_bytes(tile.swizzle) // (tile.cols * tile.elem_bytes)) if tile.swizzle else 1
    atom = max(atom, 8)
    per, last = multicast_rows(tile.rows, ways, atom)
    if not last:
        raise LayoutError(f"{tile.rows} rows do not cut into {ways} slices of whole {atom}-row swizzle atoms")
    lin_rows, lin_ks = tile.linear_tables()
    boxes: dict[int, TmaBox] = {}
    slices = []
    for j in range(ways):
        start, n = j * per, per if j < ways - 1 else last
        sub = smem_tile(n, tile.cols, tile.dtype, "K", tile.swizzle)
        sub_rows, sub_ks = sub.linear_tables()
        base = lin_rows[start] - sub_rows[0]
        if sub_ks != lin_ks or any(lin_rows[start + r] != base + sub_rows[r] for r in range(n)):
            raise LayoutError(f"rows {start}.. of the tile are not laid out as a tile of their own")
        if n not in boxes:
            boxes[n] = _tma_plan(global_layout, sub, 1, oob_fill, l2_promotion)[0]
        check_tma_box(boxes[n], global_layout, sub, 1, addr=base - tile.offset)
        slices.append(TmaSlice(j, base - tile.offset, (0, start)))
    return boxes[per], boxes[last], tuple(slices)


__all__ = [
    "SmemDescFields",
    "IdescFields",
    "TmaSlice",
    "umma_smem_desc",
    "gmma_smem_desc",
    "smem_descs",
    "smem_desc_fields",
    "encode_smem_desc",
    "decode_gmma_desc",
    "decode_umma_desc",
    "desc_image",
    "check_smem_desc",
    "umma_idesc",
    "decode_umma_idesc",
    "umma_kind",
    "check_umma_shape",
    "tma_box",
    "tma_multicast_slices",
    "multicast_rows",
    "tma_uneven_slices",
    "check_tma_box",
    "mma_k_elems",
    "K_INTERLEAVE_LBO_IS_K_STRIDE",
    "MN_INTERLEAVE_LBO_IS_K_STRIDE",
    "MN_SWIZZLED_LBO_IS_MN_STRIDE",
    "UNUSED_FIELD_BYTES",
]
