"""Where the data came from, at the grain of tiles, without the data: which rows of which tensor an
accumulator holds the product of, followed to where it is stored.

An MMA's operand tiles are located in their tensors by the boxes the copy engine landed under them
(`warpy.check.families.tma.operand_layout`): the accumulator it writes then holds rows
[a0, a0 + ra) of its A operand's tensor times rows [b0, b0 + rb) of its B operand's (a `Tag`). MMAs
that accumulate into one accumulator must agree on both (a coordinate wrong in one k-step is found
there). The tag goes with the value: to the registers an HGMMA writes, to the tensor-memory columns a
UMMA writes and the registers an LDTM reads from them, through every instruction that computes from a
tagged register (conversions, packing, moves, adds), to the shared memory an STS/STSM writes and the
box a TMA store then writes to global memory, or straight to the addresses an STG writes. There the
output tile's rows and columns (from the output buffer's 2-D layout, or the store's box) must lie in
the tag's rows of A and rows of B, in either order (a kernel may compute Cᵀ = B·Aᵀ). A TMA coordinate
wrong along M or N, in the loads or in the store, is found this way without computing anything.

**Coverage** (`Coverage`): which elements of each output (a 2-D global buffer behind a pointer that
is not scratch, or behind a tensor map) the launch stored (plain stores, counted) or added into
(reduce-adds). When every CTA of the launch ran, every element must have been written, and none
stored twice: a remainder tile nobody computes, a tile two CTAs compute, a store clipped off the
tensor by a wrong coordinate, all show here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np

from warpy.isa.text import BufferDecl
from warpy.layout import Layout
from warpy.layout.tma import TmaBox
from warpy.check.state import Cta, Problems, Tag, Warp

if TYPE_CHECKING:
    from warpy.check.code import Compiled
    from warpy.check.global_memory import GlobalMemory

K_GRANULE = 32  # bytes of K an MMA instruction takes at a time (16 bf16/fp16, 8 tf32, 32 fp8 elements)


def _span(t: Tag) -> str:
    return f"rows {t[1]}..{t[1] + t[2] - 1} of {t[0]} times rows {t[4]}..{t[4] + t[5] - 1} of {t[3]}"


def _k_bits(k0: int, kb: int) -> int:
    """The K granules bytes [k0, k0 + kb) of A's rows cover, as bits."""
    lo, hi = k0 // K_GRANULE, (k0 + kb - 1) // K_GRANULE
    return ((1 << (hi - lo + 1)) - 1) << lo


def _rows(box: TmaBox, name: str, mn: set[str]) -> int:
    """The rows (M or N) of an operand's tensor: its dimension 1, or dimension 0 where the MMAs read it
    MN-major (`mn`: the maps read so; K is then dimension 1)."""
    return box.dims[0] if name in mn else box.dims[1]


def _k_bytes(box: TmaBox, name: str, mn: set[str]) -> int:
    """The bytes of K of an operand's tensor (dimension 0, or 1 where it is read MN-major)."""
    return (box.dims[1] if name in mn else box.dims[0]) * box.elem_bytes


def _k_missing(t: Tag, maps: dict[str, TmaBox], mn: set[str]) -> Optional[str]:
    """Which K an accumulator stored as a finished product has not summed (None: all of it, or not known)."""
    a, b = maps.get(t[0]), maps.get(t[3])
    if t[6] == -1 or a is None or b is None:
        return None
    kbytes = _k_bytes(a, t[0], mn)
    if _k_bytes(b, t[3], mn) != kbytes:
        return None  # reported where the MMA multiplies them
    n = -(-kbytes // K_GRANULE)
    full = (1 << n) - 1
    if t[6] & full == full:
        return None
    miss = [k for k in range(n) if not (t[6] >> k) & 1]
    return (f"K bytes {miss[0] * K_GRANULE}..{min(kbytes, (miss[-1] + 1) * K_GRANULE) - 1} of {kbytes} "
            f"({len(miss)} of its {n} k-steps of {K_GRANULE} bytes) never summed")


def _orientations(t: Tag, maps: dict[str, TmaBox], shape: tuple[int, ...], mn: set[str]) -> tuple[bool, bool]:
    """Whether an output of this shape (rows, columns) is the product the tag speaks of, as A·Bᵀ
    (rows of A down its rows) and as B·Aᵀ: its extents are the rows of A's tensor and of B's in that
    order. A buffer or map laid out otherwise (a dump of registers, a workspace) is neither."""
    a, b = maps.get(t[0]), maps.get(t[3])
    if a is None or b is None or len(shape) != 2 or a.rank != 2 or b.rank != 2:
        return False, False
    ra, rb = _rows(a, t[0], mn), _rows(b, t[3], mn)
    return tuple(shape) == (ra, rb), tuple(shape) == (rb, ra)


def _inside(rows: tuple[int, int], cols: tuple[int, int], t: Tag, ways: tuple[bool, bool]) -> bool:
    """Output rows [r0, r1] and columns [c0, c1] inside the tag's product, in an orientation the
    output's shape allows."""
    a = (t[1], t[1] + t[2] - 1)
    b = (t[4], t[4] + t[5] - 1)

    def within(x: tuple[int, int], y: tuple[int, int]) -> bool:
        return y[0] <= x[0] and x[1] <= y[1]
    return (ways[0] and within(rows, a) and within(cols, b)) or (ways[1] and within(rows, b) and within(cols, a))


class Provenance:
    """Tags of registers (on each warp), tensor-memory columns and shared-memory ranges (per CTA),
    and the operand layouts already compared (`layouts`, `warpy.check.families.tma.operand_layout`)."""

    def __init__(self, problems: Problems, gmem: GlobalMemory, scratch: set[str]) -> None:
        self.problems = problems
        self.gmem = gmem
        self.cover = Coverage(gmem, scratch)
        self.layouts: dict[tuple[object, ...], tuple[Optional[np.ndarray], Optional[np.ndarray], str]] = {}
        self.tmem: dict[int, dict[int, Tag]] = {}
        self.smem: dict[int, list[tuple[int, int, Tag]]] = {}
        self.reported: set[tuple[int, str]] = set()  # (line, operand) whose layout was reported
        self.mn: set[str] = set()  # the tensor maps MMAs read as MN-major operands (`operand_layout`)
        self.on = True  # False: the tile pass (coverage only)
        self.region_of: dict[tuple[int, int], int] = {}
        #: the tiles stores wrote from (output source, first row, end row, first column, end column, where
        #: stored): all of each must be written when the run ends
        self.tiles: dict[tuple[str, int, int, int, int], str] = {}  # (CTA, an operand tile's first byte) -> the box it was in

    def has_output(self, a: str, b: str) -> bool:
        """Whether the kernel declares an output shaped as the product of maps a and b (a 2-D global
        buffer or tensor map whose extents are their tensors' rows, either way round)."""
        ta, tb = self.gmem.tmaps.get(a), self.gmem.tmaps.get(b)
        if ta is None or tb is None or ta.rank != 2 or tb.rank != 2:
            return False
        ra, rb = _rows(ta, a, self.mn), _rows(tb, b, self.mn)
        want = {(ra, rb), (rb, ra)}
        for name, box in self.gmem.tmaps.items():
            if name not in (a, b) and box.rank == 2 and (box.dims[1], box.dims[0]) in want:
                return True
        for buf in self.gmem.buffers:
            lay = buf.layout
            if isinstance(lay, Layout) and isinstance(lay.shape, tuple) and len(lay.shape) == 2 \
                    and tuple(lay.shape) in want:
                return True
        return False

    # -- MMAs ------------------------------------------------------------------------------------
    def tag(self, a: Optional[tuple[str, int, int]], a_rows: int, b: Optional[tuple[str, int, int]],
            b_rows: int, kb: int) -> Optional[Tag]:
        """The product of A's and B's tiles (their maps, first rows and K byte) over `kb` bytes of K."""
        if a is None or b is None:
            return None
        return a[0], a[1], a_rows, b[0], b[1], b_rows, _k_bits(a[2], kb)

    def accumulate(self, who: str, old: Optional[Tag], new: Tag) -> Tag:
        """An MMA adds its product to an accumulator: the same rows of A and of B (reported otherwise);
        the K they have summed together."""
        if old is None:
            return new[:6] + (-1,)  # added to what no tagged MMA wrote: its K is not known
        if old[:6] != new[:6]:
            self.problems.add("data", f"{who} accumulates {_span(new)} into an accumulator that holds {_span(old)} (one "
                                      f"k-step's operands come from other rows)")
            return new
        return new[:6] + (old[6] | new[6],)

    def mma_regs(self, w: Warp, c: Compiled, names: list[str], tag: Optional[Tag], accumulate: bool) -> None:
        if not self.on:
            return
        if tag is None:
            for n in names:
                w.tags.pop(n, None)
            return
        if accumulate:
            tag = self.accumulate(f"line {c.pc + 1} ({c.mnem}): {w.cta.name} warp {w.wid}", w.tags.get(names[0]), tag)
        tags = w.tags
        for n in names:
            tags[n] = tag

    def mma_tmem(self, w: Warp, c: Compiled, cta: Cta, col0: int, ncols: int, tag: Optional[Tag], accumulate: bool) -> None:
        if not self.on:
            return
        cols = self.tmem.setdefault(cta.index, {})
        if tag is None:
            for k in range(col0, col0 + ncols):
                cols.pop(k, None)
            return
        if accumulate:
            tag = self.accumulate(f"line {c.pc + 1} ({c.mnem}): {cta.name}", cols.get(col0), tag)
        for k in range(col0, col0 + ncols):
            cols[k] = tag

    def tmem_load(self, w: Warp, names: list[str], col0: int, ncols: int) -> None:
        if not self.on:
            return
        tag = self.tmem.get(w.cta.index, {}).get(col0)
        for n in names:
            if tag is None:
                w.tags.pop(n, None)
            else:
                w.tags[n] = tag

    # -- stores ----------------------------------------------------------------------------------
    def store_global(self, w: Warp, c: Compiled, reg: str, src: Optional[str], addrs: np.ndarray) -> None:
        """An STG of a tagged register: the output elements its lanes write lie in the tag's product."""
        if not self.on:
            return
        tag = w.tags.get(reg)
        if tag is None or src is None or addrs.size == 0:
            return
        off = addrs.astype(np.int64) - self.gmem.base[src]
        b = self.gmem.buffer_of(src, int(off.min()), int(off.max()) + 1)
        if b is None or not isinstance(b.layout, Layout):
            return
        shape = b.layout.shape if isinstance(b.layout.shape, tuple) else (b.layout.shape,)
        stride = b.layout.stride if isinstance(b.layout.stride, tuple) else (b.layout.stride,)
        if len(shape) != 2 or not all(isinstance(x, int) for x in stride):
            return
        s0, s1 = stride
        if not isinstance(s0, int) or not isinstance(s1, int) or s0 <= 0 or s1 <= 0:
            return
        ways = _orientations(tag, self.gmem.tmaps, tuple(x for x in shape if isinstance(x, int)), self.mn)
        if not any(ways):
            return
        o = off - b.base
        if s0 >= s1:  # row-major: rows s0 bytes apart
            rows, cols = o // s0, (o % s0) // s1
        else:  # column-major
            cols, rows = o // s1, (o % s1) // s0
        r = (int(rows.min()), int(rows.max()))
        k = (int(cols.min()), int(cols.max()))
        if not _inside(r, k, tag, ways):
            self.problems.add("data", f"line {c.pc + 1} ({c.mnem}): {w.cta.name} warp {w.wid} stores {b.name} rows "
                                      f"{r[0]}..{r[1]}, columns {k[0]}..{k[1]} from an accumulator of {_span(tag)}")
            return
        out = self.cover.outputs.get(src)
        if out is not None and out.buf is b:
            self._tile(src, tag, (ways[0] and _inside(r, k, tag, (True, False)), ways[1] and _inside(r, k, tag, (False, True))),
                       at=(0, 0), shape=(out.rows, out.cols), where=f"line {c.pc + 1} ({c.mnem})")
        miss = _k_missing(tag, self.gmem.tmaps, self.mn)
        if miss is not None and (c.pc, "K") not in self.reported:
            self.reported.add((c.pc, "K"))
            self.problems.add("data", f"line {c.pc + 1} ({c.mnem}): {w.cta.name} warp {w.wid} stores {b.name} rows "
                                      f"{r[0]}..{r[1]}, columns {k[0]}..{k[1]} from an accumulator with {miss}")

    def store_shared(self, w: Warp, regs: list[str], lo: int, hi: int) -> None:
        """STS/STSM: the shared range [lo, hi) now holds the first tagged register's tile (or none)."""
        if not self.on:
            return
        tag = next((w.tags[r] for r in regs if r in w.tags), None)
        self._overwrite(w.cta.index, lo, hi, tag)

    def landed(self, cta: Cta, lo: int, hi: int) -> None:
        """A copy overwrote [lo, hi): no tile's data there any more."""
        self._overwrite(cta.index, lo, hi, None)

    def _overwrite(self, cta: int, lo: int, hi: int, tag: Optional[Tag]) -> None:
        """[lo, hi) of the CTA's shared memory now holds `tag`'s tile (None: no tile's): the ranges
        stay disjoint (what an older range still holds outside [lo, hi) is kept), and a range joins
        a neighbour of the same tile (an epilogue staging one tile in many stores keeps one range)."""
        ranges = self.smem.get(cta)
        if not ranges and tag is None:
            return
        out: list[tuple[int, int, Tag]] = []
        for a, b, t in ranges or ():
            if b <= lo or hi <= a:
                if tag is not None and t == tag and (b == lo or a == hi):
                    lo, hi = min(lo, a), max(hi, b)
                else:
                    out.append((a, b, t))
                continue
            if a < lo:
                if t == tag:
                    lo = a
                else:
                    out.append((a, lo, t))
            if hi < b:
                if t == tag:
                    hi = b
                else:
                    out.append((hi, b, t))
        if tag is not None:
            out.append((lo, hi, tag))
        self.smem[cta] = out

    def _tile(self, src: str, t: Tag, fits: tuple[bool, bool], at: tuple[int, int], shape: tuple[int, int],
              where: str) -> None:
        """A store from the product `t`: remember its rows and columns (in the orientation the store
        took, clipped to the stored tensor's `shape`, moved to the output's coordinates by `at`).
        `fits`: whether the store lies in the product as A·Bᵀ, as B·Aᵀ; a store that fits both (a
        square output, a part of the tile where both overlap) says nothing of the orientation."""
        a = (t[1], t[1] + t[2])
        b = (t[4], t[4] + t[5])
        if fits[0] == fits[1] and not (fits[0] and a == b):  # (a tile on the diagonal is the same either way)
            return
        rr, cc = (a, b) if fits[0] else (b, a)
        r0, r1 = max(rr[0], 0), min(rr[1], shape[0])
        c0, c1 = max(cc[0], 0), min(cc[1], shape[1])
        if r0 < r1 and c0 < c1:
            self.tiles.setdefault((src, at[0] + r0, at[0] + r1, at[1] + c0, at[1] + c1), where)

    def check_tiles(self) -> None:
        """Every tile a store wrote from is written whole (stored or reduce-added) when the run ends: an
        epilogue that leaves columns or rows of its tile out (a fragment offset, a loop one short)."""
        for (src, r0, r1, c0, c1), where in self.tiles.items():
            out = self.cover.outputs[src]
            hole = (out.stored[r0:r1, c0:c1] == 0) & ~out.reduced[r0:r1, c0:c1]
            n = int(np.count_nonzero(hole))
            if n:
                rr, cc = np.nonzero(hole)
                self.problems.add("coverage", f"{out.buf.name}: the tile of rows {r0}..{r1 - 1}, columns {c0}..{c1 - 1} "
                                              f"({where} stores from it) has {n} elements no store wrote (the first at "
                                              f"row {r0 + int(rr[0])}, column {c0 + int(cc[0])})")

    def tma_store(self, w: Warp, c: Compiled, name: str, box: TmaBox, coords: list[int], src: int, nbytes: int,
                  reduce: bool = False) -> None:
        """A TMA store of a staged tile: the box it writes lies in the product its data came from (and,
        for a plain store, that product summed all of K)."""
        if not self.on:
            return
        ranges = self.smem.get(w.cta.index)
        if not ranges or box.rank != 2:
            return
        tags = {t for lo, hi, t in ranges if lo < src + nbytes and src < hi}  # every tile staged in the box
        if not tags:
            return
        rows = (max(coords[1], 0), min(coords[1] + box.box[1], box.dims[1]) - 1)
        cols = (max(coords[0], 0), min(coords[0] + box.box[0], box.dims[0]) - 1)
        if rows[1] < rows[0] or cols[1] < cols[0]:
            return
        for t in tags:
            ways = _orientations(t, self.gmem.tmaps, (box.dims[1], box.dims[0]), self.mn)
            if not any(ways):
                continue
            if not _inside(rows, cols, t, ways):
                self.problems.add("data", f"line {c.pc + 1} ({c.mnem}): {w.cta.name} warp {w.wid} stores {name} rows "
                                          f"{rows[0]}..{rows[1]}, columns {cols[0]}..{cols[1]} from a staged tile of "
                                          f"{_span(t)}")
                return
            gsrc = self.gmem.alias.get(name, name)
            out = self.cover.outputs.get(gsrc)
            if out is not None:
                off = self.gmem.offset.get(name, 0)
                o_r, o_c = out.at(np.array([off], dtype=np.int64) + out.buf.base)
                self._tile(gsrc, t, (ways[0] and _inside(rows, cols, t, (True, False)),
                                     ways[1] and _inside(rows, cols, t, (False, True))),
                           at=(int(o_r[0]), int(o_c[0])), shape=(box.dims[1], box.dims[0]), where=f"line {c.pc + 1} ({c.mnem})")
            miss = None if reduce or (c.pc, "K") in self.reported else _k_missing(t, self.gmem.tmaps, self.mn)
            if miss is not None:
                self.reported.add((c.pc, "K"))
                self.problems.add("data", f"line {c.pc + 1} ({c.mnem}): {w.cta.name} warp {w.wid} stores {name} rows "
                                          f"{rows[0]}..{rows[1]}, columns {cols[0]}..{cols[1]} from a staged tile with "
                                          f"{miss}")
                return


def _plain2d(b: BufferDecl) -> Optional[tuple[int, int, int, int]]:
    """(rows, columns, row stride, column stride) in bytes of a 2-D global buffer's plain layout."""
    lay = b.layout
    if not isinstance(lay, Layout) or not isinstance(lay.shape, tuple) or not isinstance(lay.stride, tuple):
        return None
    if len(lay.shape) != 2 or len(lay.stride) != 2:
        return None
    r, c = lay.shape
    s0, s1 = lay.stride
    if not (isinstance(r, int) and isinstance(c, int) and isinstance(s0, int) and isinstance(s1, int)):
        return None
    if s0 <= 0 or s1 <= 0:
        return None
    return r, c, s0, s1


class Output:
    """One output's elements: its buffer, shape, strides (bytes) and base offset in its source, how
    many plain stores wrote each element, and which ones reduce-adds reached."""

    def __init__(self, buf: BufferDecl, rows: int, cols: int, s0: int, s1: int) -> None:
        self.buf = buf
        self.rows, self.cols, self.s0, self.s1 = rows, cols, s0, s1
        self.stored = np.zeros((rows, cols), dtype=np.uint8)
        self.reduced = np.zeros((rows, cols), dtype=bool)

    def at(self, off: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows, columns) of byte offsets in the source."""
        o = off - self.buf.base
        if self.s0 >= self.s1:
            return o // self.s0, (o % self.s0) // self.s1
        return (o % self.s1) // self.s0, o // self.s1


class Coverage:
    """The outputs of a launch and what its stores covered of them (see the module's docstring)."""

    def __init__(self, gmem: GlobalMemory, scratch: set[str]) -> None:
        self.gmem = gmem
        self.outputs: dict[str, Output] = {}
        for b in gmem.buffers:
            if b.source is None or b.source in scratch or b.elem in ("u32", "s32"):
                continue
            got = _plain2d(b)
            if got is not None and b.source not in self.outputs:
                self.outputs[b.source] = Output(b, *got)

    def stg(self, src: Optional[str], offs: np.ndarray, nbytes: int, reduce: bool = False) -> None:
        """A store (reduce-add) of `nbytes` at each of these byte offsets of an output."""
        out = self.outputs.get(src or "")
        if out is None or offs.size == 0:
            return
        eb = min(out.s0, out.s1)
        if nbytes > eb:
            offs = (offs[:, None] + np.arange(0, nbytes, eb)[None, :]).ravel()
        r, c = out.at(offs)
        ok = (r >= 0) & (r < out.rows) & (c >= 0) & (c < out.cols)
        if not ok.all():
            r, c = r[ok], c[ok]
        if r.size == 0:
            return
        cells = np.unique(r * out.cols + c)
        if reduce:
            out.reduced.ravel()[cells] = True
        else:
            flat = out.stored.ravel()
            flat[cells] = np.minimum(flat[cells], 254) + 1

    def tma(self, name: str, box: TmaBox, coords: list[int], reduce: bool) -> None:
        """A TMA store (reduce-add) of a box: the elements of its output it covers (clipped)."""
        src = self.gmem.alias.get(name, name)
        out = self.outputs.get(src)
        if out is None or box.rank != 2:
            return
        r0 = max(coords[1], 0)
        r1 = min(coords[1] + box.box[1], box.dims[1])
        c0 = max(coords[0], 0)
        c1 = min(coords[0] + box.box[0], box.dims[0])
        if r1 <= r0 or c1 <= c0:
            return
        off = self.gmem.offset.get(name, 0)  # a map over a parameter, some bytes in: its origin
        o_r, o_c = out.at(np.array([off], dtype=np.int64) + out.buf.base)
        rr = slice(int(o_r[0]) + r0, int(o_r[0]) + r1)
        cc = slice(int(o_c[0]) + c0, int(o_c[0]) + c1)
        if reduce:
            out.reduced[rr, cc] = True
        else:
            out.stored[rr, cc] = np.minimum(out.stored[rr, cc], 254) + 1

    def merge(self, other: Coverage) -> None:
        for name, out in other.outputs.items():
            mine = self.outputs.get(name)
            if mine is not None:
                mine.stored = np.minimum(mine.stored.astype(np.uint16) + out.stored, 255).astype(np.uint8)
                mine.reduced |= out.reduced

    def check(self, problems: Problems, whole: bool = True) -> None:
        """Every CTA ran (`whole`): each output element written, none stored twice (outputs no store
        reached at all are not the launch's outputs: not checked). Some CTAs ran: none stored twice."""
        for out in self.outputs.values():
            if not out.stored.any() and not out.reduced.any():
                continue
            missing = (out.stored == 0) & ~out.reduced
            twice = out.stored > 1
            checks = (("no store or reduce-add writes", missing), ("more than one store writes", twice))
            for what, mask in checks if whole else checks[1:]:
                n = int(np.count_nonzero(mask))
                if n:
                    rr, cc = np.nonzero(mask)
                    problems.add("coverage", f"{out.buf.name}: {what} {n} of its {out.rows * out.cols} elements (rows "
                                             f"{int(rr.min())}..{int(rr.max())}, columns {int(cc.min())}..{int(cc.max())}; "
                                             f"the first at row {int(rr[0])}, column {int(cc[0])})")
