"""Tests written to kill the tile rule's surviving mutants (.ci/mutation.py tile; see
docs/testing.md): stream-K's split at literal tile counts (test_tile_rule compares the rule with the
same function, so a changed split passed), the sm_100a branch of `choose` (its table, the fused
epilogue's whole tiles, MN-major operands), whole tiles for batches, 64-column tiles for an MN-major
B, and the emitted magic-number division with a shift, run by the interpreter."""

from __future__ import annotations

from typing import Any

import pytest

from warpy.isa.families import alu
from warpy.isa.interp import Machine, run
from warpy.isa.program import Program
from warpy.errors import WarpyError
from warpy.kernels.gemm import GemmProblem, choose, sm90_cost, sm90_split
from warpy.kernels.gemm_epilogue import Epilogue
from warpy.kernels.gemm_sm100 import Sm100Config
from warpy.kernels.gemm_sm90 import Sm90Config
from warpy.kernels.schedule import Magic, StreamK, TileOrder, divide


@pytest.mark.parametrize("M,N,K,split", [
    (768, 1408, 4096, 2),     # 6 x 11 = 66 tiles of 128 x 128: exactly half the 132 SMs, split 132 // 66
    (8576, 128, 65536, 0),    # 67 tiles: more than half the SMs have one, no split
    (128, 128, 640, 10),      # one tile, but only 10 k blocks of 64
    (128, 128, 65536, 132),   # one tile, 1024 k blocks: every SM
    (256, 128, 65536, 66),    # two tiles
    (640, 1024, 65536, 3),    # 5 x 8 = 40 tiles: 132 // 40 = 3 (not 3.3)
])
def test_stream_k_split_at_literal_tile_counts(M: int, N: int, K: int, split: int) -> None:
    assert sm90_split(GemmProblem(M, N, K), 128, 128) == split


def test_sm100_takes_its_table_and_the_fused_epilogue_whole_tiles() -> None:
    prob = GemmProblem(4096, 4096, 4096, "bf16", "bf16", arch="sm_100a")
    cfg = choose(prob)
    assert cfg == Sm100Config(bm=192, cta_rows=128, stages=7, accs=2, pairs=1, sms=148, persistent=True, group=8,
                              serpentine=False, clc=True, ask_ahead=False, pdl="entry", split=1, stream_k=False,
                              tma_store=True)
    fused = choose(GemmProblem(4096, 4096, 4096, "bf16", "bf16", arch="sm_100a", epilogue=Epilogue(bias="col", act="relu")))
    assert isinstance(fused, Sm100Config)
    assert (fused.bm, fused.split, fused.stream_k, fused.tma_store) == (192, 1, False, False)
    # an MN-major A: A's rows a CTA (bm / 2) whole 64-row boxes: 192 -> 256
    assert choose(GemmProblem(4096, 4096, 4096, "bf16", "bf16", arch="sm_100a", a_major="MN")).bm == 256
    # the table pairs 4 CTAs for 2048 x 256; an MN-major B takes one pair
    paired = choose(GemmProblem(2048, 256, 4096, "bf16", "bf16", arch="sm_100a"))
    one_pair = choose(GemmProblem(2048, 256, 4096, "bf16", "bf16", arch="sm_100a", b_major="MN"))
    assert isinstance(paired, Sm100Config) and isinstance(one_pair, Sm100Config)
    assert (paired.pairs, one_pair.pairs) == (4, 1)
    # the shape reaches the table: a short M gets 128-row tiles without a persistent grid
    small = choose(GemmProblem(256, 256, 8192, "bf16", "bf16", arch="sm_100a"))
    assert isinstance(small, Sm100Config) and (small.bm, small.persistent, small.tma_store) == (128, False, False)


def test_sm90_batches_take_whole_tiles_and_mn_major_b_whole_boxes() -> None:
    one = choose(GemmProblem(128, 128, 65536))
    assert isinstance(one, Sm90Config) and one.stream_k and (one.bn, one.split) == (64, 66)  # 2 tiles of 128 x 64
    batched = choose(GemmProblem(128, 128, 65536, batch=2))
    assert isinstance(batched, Sm90Config) and not batched.stream_k and batched.split == 0
    k_major = choose(GemmProblem(1024, 2064, 4096))
    mn_major = choose(GemmProblem(1024, 2064, 4096, b_major="MN"))
    assert isinstance(k_major, Sm90Config) and isinstance(mn_major, Sm90Config)
    assert k_major.bn == 144 and mn_major.bn == 64
    assert k_major.group == 8 and k_major.bk == 64


@pytest.mark.parametrize("d,x_max,shift", [(3, 1 << 31, 1), (5, (1 << 32) - 1, 2), (7, 1 << 31, 2), (11, (1 << 32) - 1, 3)])
def test_the_emitted_division_with_a_shift_is_exact(d: int, x_max: int, shift: int) -> None:
    """x_max near 2^32: no 32-bit multiplier works unshifted, so divide emits the multiply-high and a
    right shift (the tile schedules' small ranges need no shift)."""
    assert Magic.find(d, x_max).shift == shift
    p = Program("div", "sm_90a", threads=32)
    x = p.r("x")
    p.emit(alu.s2r(x, "SR_CTAID.X"))
    q = divide(p, p.r("q"), x, d, x_max)
    lines = list(p.kernel().lines)
    for v in sorted({0, 1, d - 1, d, d + 1, 5 * d - 1, x_max - x_max % d - 1, x_max - x_max % d, x_max}):
        m = run(lines, Machine(sreg={"SR_CTAID.X": v}))
        assert m.v[q.name] == v // d, (d, v)


@pytest.mark.parametrize("mt,nt,group,serp", [(10, 3, 4, False), (14, 5, 4, True), (23, 3, 8, False), (7, 4, 5, True)])
def test_the_emitted_order_of_a_tail_group_of_several_rows(mt: int, nt: int, group: int, serp: bool) -> None:
    """The last, shorter group (mt % group = 2, 2, 7, 2 M-blocks) walked by the emitted code: its own
    division by the tail's height (test_schedule's shapes have tails of one row, a move)."""
    order = TileOrder(mt, nt, group, serp)
    p = Program("sched", "sm_90a", threads=32)
    t = p.r("t")
    p.emit(alu.s2r(t, "SR_CTAID.X"))
    m_blk, n_blk = order.emit(p, t)
    lines = list(p.kernel().lines)
    got = []
    for tile in range(order.tiles):
        m = run(lines, Machine(sreg={"SR_CTAID.X": tile}))
        got.append((m.v[m_blk.name], m.v[n_blk.name]))
    assert got == [order.tile_of(k) for k in range(order.tiles)]
    # the tail's first tiles, literally: after the full groups, down the tail's rows, then across
    t_full = (mt // group) * group * nt
    tail = mt % group
    assert got[t_full:t_full + tail + 1] == [(mt - tail + k, 0) for k in range(tail)] + [(mt - tail, 1)]


def test_an_8_bit_stage_is_128_elements_of_k() -> None:
    fp8 = choose(GemmProblem(1024, 1024, 1024, "e4m3", "bf16"))
    bf16 = choose(GemmProblem(1024, 1024, 1024, "bf16", "bf16"))
    assert isinstance(fp8, Sm90Config) and isinstance(bf16, Sm90Config)
    assert (fp8.bk, bf16.bk) == (128, 64)


@pytest.mark.parametrize("tiles,kt,workers,firsts", [
    (3, 1, 2, [0, 1, 1]),        # ranges [0, 1), [1, 3): tile 1's first k block is worker 1's first
    (4, 3, 5, [0, 1, 2, 4]),     # ranges [0,2) [2,4) [4,7) [7,9) [9,12)
    (1, 5, 1, [0]),              # one worker
])
def test_the_emitted_first_worker_of_each_tile(tiles: int, kt: int, workers: int, firsts: list[int]) -> None:
    """The worker holding a tile's first k block, from the emitted multiply-add and division: where
    (t kt + 1) G - 1 is a multiple of W the rounding constant decides it (StreamK(3, 1, 2), tile 1)."""
    sk = StreamK(tiles, kt, workers)
    p = Program("first", "sm_90a", threads=32)
    t = p.r("t")
    p.emit(alu.s2r(t, "SR_CTAID.X"))
    q = sk.emit_first_worker(p, p.r("first"), t)
    lines = list(p.kernel().lines)
    got = [run(lines, Machine(sreg={"SR_CTAID.X": k})).v[q.name] for k in range(tiles)]
    assert got == firsts == [sk.first_worker(k) for k in range(tiles)]


# -- the second sample's survivors (docs/testing.md: Magic, StreamK, sm90_cost, _tiles) ---------------

M32 = (1 << 32) - 1


@pytest.mark.parametrize("d,x_max,magic", [
    # the classic multiply-high constants (0xAAAAAAAB >> 1 for 3, 0xBA2E8BA3 >> 3 for 11); 641 divides
    # 2^32 + 1, so its unshifted ceiling is exact
    (3, M32, Magic(3, 0xAAAAAAAB, 1)), (11, M32, Magic(11, 0xBA2E8BA3, 3)), (641, M32, Magic(641, 6700417, 0)),
])
def test_magic_numbers_at_literal_values(d: int, x_max: int, magic: Magic) -> None:
    got = Magic.find(d, x_max)
    assert got == magic
    for x in (0, d - 1, d, M32 - M32 % d - 1, M32 - M32 % d, M32):
        assert got(x) == x // d, (d, x)


def test_magic_refusals_word_for_word() -> None:
    with pytest.raises(WarpyError) as e:
        Magic.find(1, 10)
    assert str(e.value) == "division by 1 needs no magic number (d >= 2)"
    # 7 over the whole 32-bit range needs a 33-bit multiplier: refused, not returned
    with pytest.raises(WarpyError) as e:
        Magic.find(7, M32)
    assert str(e.value) == "no 32-bit multiplier divides every x <= 4294967295 by 7"


@pytest.mark.parametrize("tiles,kt,workers,message", [
    (1, 0, 1, "stream-K over 1 tiles of 0 k blocks and 1 workers"),
    (0, 1, 1, "stream-K over 0 tiles of 1 k blocks and 1 workers"),
    (1, 1, 0, "stream-K over 1 tiles of 1 k blocks and 0 workers"),
    (2, 2, 5, "stream-K: 4 iterations cannot keep 5 workers busy"),
])
def test_stream_k_refusals_word_for_word(tiles: int, kt: int, workers: int, message: str) -> None:
    with pytest.raises(WarpyError) as e:
        StreamK(tiles, kt, workers)
    assert str(e.value) == message


@pytest.mark.parametrize("tiles,kt,workers", [(3, 1, 2), (5, 7, 3), (4, 40, 132), (2, 300, 132), (17, 9, 16)])
def test_max_contributors_counts_the_model_s_workers(tiles: int, kt: int, workers: int) -> None:
    """The most workers that leave partial sums for one tile, counted from the segments each worker
    walks (every worker with a segment of the tile, less its finisher)."""
    sk = StreamK(tiles, kt, workers)
    holders: dict[int, set[int]] = {}
    for g in range(workers):
        for t, _, _ in sk.segments(g):
            holders.setdefault(t, set()).add(g)
    assert sk.max_contributors() == max(len(h) - 1 for h in holders.values())


def test_a_batch_costs_what_its_stacked_rows_cost() -> None:
    """b GEMMs of M rows (M a multiple of the tile) are as many tiles as one GEMM of b M rows."""
    for sk in (False, True):
        assert sm90_cost(GemmProblem(256, 1024, 4096, batch=3), 128, 128, sk) == \
            sm90_cost(GemmProblem(768, 1024, 4096), 128, 128, sk)


def test_stream_k_is_priced_where_stream_k_can_run() -> None:
    """The cost is infinite exactly where StreamK refuses the work (fewer k blocks than the 132 SMs):
    one 128 x 128 tile of 131, 132 and 133 k blocks of 64."""
    for kt in (131, 132, 133):
        try:
            StreamK(1, kt, 132)
            runs = True
        except WarpyError:
            runs = False
        assert (sm90_cost(GemmProblem(128, 128, 64 * kt), 128, 128, True) < float("inf")) == runs == (kt >= 132)


def test_a_split_tile_s_share_does_not_depend_on_the_tile_count() -> None:
    """Where stream-K splits each tile S ways (at most half the SMs have a tile), the busiest CTA
    runs ceil(kt / S) k blocks: 50 and 66 tiles of 5 k blocks both split 2 ways cost the same (an even
    share over the SMs would give 50 tiles 2 k blocks a CTA and 66 tiles 3)."""
    fifty, sixty_six = GemmProblem(640, 1280, 320), GemmProblem(768, 1408, 320)
    assert sm90_split(fifty, 128, 128) == sm90_split(sixty_six, 128, 128) == 2
    assert sm90_cost(fifty, 128, 128, True) == sm90_cost(sixty_six, 128, 128, True)


# -- the whole group (docs/testing.md: tile, the whole group): the emitted schedules' text ------------

def _emitted(build: Any) -> list[str]:
    p = Program("sched", "sm_90a", threads=32)
    t = p.r("t")
    p.emit(alu.s2r(t, "SR_CTAID.X"))
    build(p, t)
    return [str(line).strip() for line in p.kernel().lines][1:]


def test_the_emitted_tile_order_text_literal() -> None:
    """TileOrder(10, 3, 4, serpentine): groups of 4 M-blocks over 3 N-blocks (12 tiles a group), two full
    groups (24 tiles), a tail of 2. Each immediate a 32-bit word worked by hand: ceil(2^32 / 12) =
    0x15555556, -12, 2^32 / 4, -4, 3 - m, 4 g + m; the tail from t - 24 over 2 rows, from row 8."""
    assert _emitted(lambda p, t: TileOrder(10, 3, 4, True).emit(p, t)) == [
        "IMAD.HI.U32 grp, t, 0x15555556, RZ",
        "IMAD in_grp, grp, 0xfffffff4, t",
        "IMAD.HI.U32 n_blk, in_grp, 0x40000000, RZ",
        "IMAD m_blk, n_blk, 0xfffffffc, in_grp",
        "LOP3.LUT odd_column, RZ, n_blk, 0x1, RZ, 0xc0, !PT",
        "IMAD flipped, m_blk, 0xffffffff, 0x3",
        "SEL m_blk, flipped, m_blk, odd_column",
        "IMAD m_blk, grp, 0x4, m_blk",
        "IADD3 tail_w, t, 0xffffffe8, RZ",
        "IMAD.HI.U32 tail_n, tail_w, 0x80000000, RZ",
        "IMAD tail_m, tail_n, 0xfffffffe, tail_w",
        "IADD3 tail_m, tail_m, 0x8, RZ",
        "ISETP.GE.U32.AND in_tail, PT, t, 0x18, PT",
        "SEL m_blk, tail_m, m_blk, in_tail",
        "SEL n_blk, tail_n, n_blk, in_tail",
    ]
    # groups of one block over one column: divisions by 1 are moves
    assert _emitted(lambda p, t: TileOrder(5, 1, 1).emit(p, t)) == [
        "MOV grp, t", "IMAD in_grp, grp, 0xffffffff, t", "MOV n_blk, in_grp", "IMAD m_blk, n_blk, 0xffffffff, in_grp",
        "IMAD m_blk, grp, 0x1, m_blk"]


def test_the_emitted_first_worker_and_shifted_division_text_literal() -> None:
    """StreamK(3, 5, 4): x = 20 t + 3, divided by W = 15 (ceil(2^32 / 15) = 0x11111112); 7 over 2^31 needs
    shift 2: ceil(2^34 / 7) = 0x92492493."""
    assert _emitted(lambda p, t: (StreamK(3, 5, 4).emit_first_worker(p, p.r("q"), t),
                                  divide(p, p.r("d"), t, 7, 1 << 31))) == [
        "IMAD sk_first_x, t, 0x14, 0x3",
        "IMAD.HI.U32 q, sk_first_x, 0x11111112, RZ",
        "IMAD.HI.U32 d, t, 0x92492493, RZ",
        "SHF.R.U32.HI d, RZ, 0x2, d",
    ]


def test_the_tile_order_holds_up_to_the_callers_range() -> None:
    """`emit(p, t, x_max)`: exact for every t up to x_max, not only up to the tile count (a persistent
    grid's counter runs past it): TileOrder(11, 3, 4)'s tail of 3 rows at t near 2^31."""
    order = TileOrder(11, 3, 4)
    p = Program("sched", "sm_90a", threads=32)
    t = p.r("t")
    p.emit(alu.s2r(t, "SR_CTAID.X"))
    m_blk, n_blk = order.emit(p, t, 1 << 31)
    lines = list(p.kernel().lines)
    for v in (0, order.tiles - 1, 1_000_003, (1 << 31) - 1, 1 << 31):
        m = run(lines, Machine(sreg={"SR_CTAID.X": v}))
        assert (m.v[m_blk.name], m.v[n_blk.name]) == order.tile_of(v), v


def test_the_tile_order_s_tail_division_holds_up_to_the_callers_range() -> None:
    """TileOrder(15, 2, 8): one full group (16 tiles) and a tail of 7 rows, divided by 7 for t up to
    2^31. Unshifted, ceil(2^32 / 7) is off for some x near 2^31 with x mod 7 = 6: the tail's
    (m, n) there must be the model's."""
    order = TileOrder(15, 2, 8)
    p = Program("sched", "sm_90a", threads=32)
    t = p.r("t")
    p.emit(alu.s2r(t, "SR_CTAID.X"))
    m_blk, n_blk = order.emit(p, t, 1 << 31)
    lines = list(p.kernel().lines)
    top = (1 << 31) - 16
    tw = top - (top - 6) % 7  # the largest x <= top with x mod 7 = 6
    for v in (15, 16, 16 + 6, 16 + tw, 1 << 31):
        m = run(lines, Machine(sreg={"SR_CTAID.X": v}))
        assert (m.v[m_blk.name], m.v[n_blk.name]) == order.tile_of(v), v


def test_the_emitted_first_worker_at_the_last_tile_of_a_long_stream() -> None:
    """StreamK(22946, 1, 100): x = 100 t + 99 up to 2294599, divided by 22946: the division's range must
    reach the last tile's x (a range G short of it takes a multiplier that is off there)."""
    sk = StreamK(22946, 1, 100)
    p = Program("first", "sm_90a", threads=32)
    t = p.r("t")
    p.emit(alu.s2r(t, "SR_CTAID.X"))
    q = sk.emit_first_worker(p, p.r("first"), t)
    lines = list(p.kernel().lines)
    for tile in (0, 1, 11473, 22944, 22945):
        assert run(lines, Machine(sreg={"SR_CTAID.X": tile})).v[q.name] == sk.first_worker(tile), tile
