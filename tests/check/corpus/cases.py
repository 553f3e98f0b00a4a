"""The corpus's cases (`tests.check.corpus`), by the class of checker rule each exercises. Bases:
small GEMMs of both targets (some with a configuration that gives each CTA several tiles), the
examples and the probes. Each bug is a mistake a kernel engineer makes; each clean case a change
that looks suspicious and is not."""

from __future__ import annotations

from tests.check.corpus import (Case, Edit, case, declare, drop, drop_all, header, insert_after, insert_before, move, sub,
                                sub_all)

G90 = "gemm sm_90a 256x256x128 fp32"
G90M = "gemm sm_90a 256x512x128 fp32 sms=2"  # 2 CTAs, 4 tiles each
G90S = "gemm sm_90a 256x512x128 bf16 sms=2,staged_epilogue=true"  # STSM + TMA-store epilogue, named barriers
G90K = "gemm sm_90a 256x128x1024 fp32 sms=3,stream_k=true"  # stream-K over 3 CTAs: flags between CTAs
G100 = "gemm sm_100a 256x256x128 fp32"
G100H = "gemm sm_100a 300x301x512 bf16"  # odd N, 16-bit C from registers
G100M = "gemm sm_100a 512x512x256 fp32 sms=4,persistent=true,accs=2"  # several tiles a CTA, 2 accumulators
G100K = "gemm sm_100a 256x256x1024 fp32 sms=4,stream_k=true"  # stream-K: zeroed tiles, flags, epochs, TMA reduce-adds
G100T = "gemm sm_100a 512x512x256 bf16 sms=4,persistent=true,accs=2,tma_store=true,stages=4"  # STS.U16 + TMA stores
PIPE90 = "example example-pipe sm_90a"
PIPE100 = "example example-pipe sm_100a"
FEAT90 = "example example-features sm_90a"
COUNTERS = "probe counters sm_90a"
UMMA1 = "probe umma_1cta sm_100a"
RS = "probe hgmma_rs sm_90a"
TMA2D = "probe tma_copy_2d sm_90a"



def _halves(step: int) -> tuple[Edit, ...]:
    """Each warp of the counters probe stores a 16-bit word at 0x10 + step * warp of shared memory."""
    return (header(".buffer seen_slot", ".buffer seen_slot smem base=0x0 size=0x4 elem=u32 layout=1:4\n"
                                        ".buffer halves smem base=0x10 size=0x4 elem=u16 layout=2:2"),
            declare("R h16", "R hw"),
            insert_before(r"^\s+EXIT", f"  MOV h16, 0x1\n  SHF.R.U32.HI hw, RZ, 0x5, tid\n  IMAD hw, hw, {step:#x}, RZ\n"
                                      f"  IADD3 hw, hw, 0x10, RZ\n  STS.U16 [hw+smem], h16", nth=-1))


CASES: list[Case] = [
    # -- sub-word tracking ------------------------------------------------------------------------
    case("bf16-odd-n-halves", "subword", G100H, expect="clean",
         why="two warps write the two halves of one 4-byte word of C (N = 301, 16-bit stores)"),
    case("bf16-odd-n-overlap", "subword", G100H, sub(r"LOP3.LUT row_in, warp_lane0", "0x20", "0x0"),
         expect="order", match=r"c_out: STG.E.U16, warp \d writes it and STG.E.U16, warp \d writes it",
         why="the epilogue forgets the warp's 32-row offset: two warps store the same bf16 elements"),
    case("sts-u16-halves", "subword", COUNTERS, *_halves(0x2),
         expect="clean", why="warps 0 and 1 store 16-bit words at bytes 0x10 and 0x12: neighbours in one 4-byte word"),
    case("sts-u16-same-half", "subword", COUNTERS, *_halves(0x0),
         expect="order", match=r"halves: STS.U16, warp \d writes it and STS.U16, warp \d writes it, and nothing orders",
         why="both warps store the same 16-bit word of shared memory, unordered"),
    # -- use before def ---------------------------------------------------------------------------
    case("tx-count-never-set", "usedef", G90, drop_all(r"MOV tx_bytes, 0x6000"),
         expect="registers", match=r"reads tx_bytes before any instruction wrote it",
         why="the expect-tx byte count's register is never set (it would read garbage, not 0)"),
    case("ctaid-not-read", "usedef", G100, drop(r"S2R ctaid, SR_CTAID.X", nth=2),
         expect="registers", match=r"reads ctaid before any instruction wrote it",
         why="the epilogue computes its tile from a CTA id it never read"),
    case("first-mma-accumulates", "usedef", G90, sub(r"UMOV first, 0x0", "0x0", "0x1"),
         expect="registers", match=r"HGMMA.*reads acc\.0.*before any instruction wrote it",
         why="the first k-step accumulates into an accumulator nothing zeroed"),
    case("unused-register-reassigned", "usedef", G90, sub(r"MOV c_pitch8, 0x2000", "MOV c_pitch8", "MOV frag_tmp"),
         insert_after(r"MOV frag_tmp, 0x2000", "  MOV c_pitch8, 0x2000"),
         expect="clean", why="a register set by a different line than before is still set before its read"),
    # -- warpgroup collectives, warp-aligned instructions -----------------------------------------
    case("wgmma-3-of-4-warps", "collective", G90, sub(r"ISETP.LT.U32.AND in_role, PT, warp, 0x8", "0x8", "0x7"),
         expect="protocol", match=r"warpgroup 1: its warpgroup-collective instruction \d+ differs",
         why="consumer 0's role covers warps 4..6: its warpgroup's MMAs are issued by 3 of 4 warps"),
    case("wgmma-under-lane-guard", "collective", G90, sub(r"HGMMA.64x64x16.F32.BF16 acc, gdesc\[gmma_desc\], acc, gsb0",
                                                          r"^\s+", "  @leader ", nth=0),
         expect="protocol", match=r"HGMMA.*runs it on 1 of its 32 lanes",
         why="the last MMA of a k-step is guarded by the elected lane"),
    case("ldtm-by-one-lane", "collective", G100, sub(r"LDTM.x32 v, tmem\[taddr\]", r"^\s+", "  @acc_free_leader ", nth=1),
         expect="protocol", match=r"LDTM.*runs it on 1 of its 32 lanes",
         why="a tcgen05.ld (warp-aligned) run by one lane"),
    case("setmaxnreg-whole-warpgroup", "collective", G90M, expect="clean",
         why="setmaxnreg by all four warps of each warpgroup, before the roles split"),
    # -- wgmma fence ------------------------------------------------------------------------------
    case("no-wgmma-fence", "wgmma", G90, drop_all(r"WARPGROUP.ARRIVE"),
         expect="registers", match=r"runs before any wgmma fence",
         why="wgmma.fence dropped: the first MMA reads its registers unfenced"),
    case("acc-written-after-fence", "wgmma", G90M, insert_after(r"WARPGROUP.ARRIVE", "  MOV acc.3, RZ", nth=0),
         expect="registers", match=r"accesses acc\.3, which line \d+ \(MOV\) touched after the warp's last wgmma fence",
         why="an accumulator register written between the fence and the MMA"),
    case("fence-then-unrelated-move", "wgmma", G90M, insert_after(r"WARPGROUP.ARRIVE", "  MOV frag_tmp, RZ", nth=0),
         expect="clean", why="a line between the fence and the MMA that touches no register the MMA uses"),
    case("acc-read-before-wait", "wgmma", G90M, sub(r"WARPGROUP.DEPBAR.LE gsb0, 0x0", "0x0", "0x1"),
         expect="order", match=r"acc: HGMMA.*writes it and STG.*touches it, and nothing orders the two",
         why="the epilogue stores the accumulator with the last wgmma group still in flight"),
    case("rs-fragment-loaded-after-fence", "wgmma", RS, move(r"LDG.E.128.CONSTANT af.12", r"WARPGROUP.ARRIVE"),
         expect="registers", match=r"accesses af\.12",
         why="the RS form's last A fragment is loaded after the wgmma fence"),
    case("rs-fragment-loaded-early", "wgmma", RS, move(r"LDG.E.128.CONSTANT af.12", r"LDC.64 afrag_ptr", after=False),
         insert_before(r"LDG.E.128.CONSTANT af.12", "  LDC.64 afrag_ptr, c[0x0][afrag]\n  ULDC.64 memdesc, c[0x0][0x208]\n"
                                                       "  IMAD.WIDE.U32 a_at, tid, 0x40, afrag_ptr"),
         expect="clean", why="the A fragments loaded in another order, all before the fence"),
    # -- named barriers ---------------------------------------------------------------------------
    case("named-id-shared-by-warpgroups", "named", G90S, sub_all(r"BAR.SYNC.DEFER_BLOCKING 0x2, 0x80", "0x2, 0x80", "0x1, 0x80"),
         expect="named", match=r"named barrier 1 generation \d+: (256 threads arrive, it counts 128|.*more threads arrive)",
         why="both consumer warpgroups synchronise their epilogue on barrier 1 with 128 threads each"),
    case("named-short-count", "named", G90S, sub_all(r"BAR.SYNC.DEFER_BLOCKING 0x1, 0x80", "0x80", "0x60"),
         expect="named", match=r"named barrier 1 generation \d+: (128 threads arrive, it counts 96|.*more threads arrive)",
         why="the epilogue barrier counts 96 threads for a warpgroup of 128"),
    case("named-ids-renumbered", "named", G90S, sub_all(r"BAR.SYNC.DEFER_BLOCKING 0x1, 0x80", "0x1, 0x80", "0x3, 0x80"),
         expect="clean", why="consumer 0's epilogue barrier renumbered 1 -> 3: still one id a warpgroup"),
    case("named-count-not-whole-warps", "named", FEAT90, sub(r"BAR.ARV 0x2, 0x80", "0x80", "0x50"),
         expect="protocol", match=r"counts 80 threads on barrier 2: a count is a positive multiple of 32",
         why="a named-barrier count that is not a whole number of warps"),
    # -- flags between CTAs -----------------------------------------------------------------------
    case("spin-with-backoff", "flags", COUNTERS, expect="clean",
         why="spin_wait's poll, compare and NANOSLEEP back-off, then the CCTL acquire"),
    case("spin-weak-load", "flags", COUNTERS, sub(r"LDG.E.STRONG.GPU seen", r"LDG.E.STRONG.GPU", "LDG.E"),
         expect="protocol", match=r"a loop waits on the word it loads from global memory, through a weak load",
         why="the flag is polled with a plain (weak) load"),
    case("spin-backoff-streamk", "flags", G90K, declare("R spins"),
         insert_after(r"^FLAG_17:", "  NANOSLEEP 0x40\n  IADD3 spins, spins, 0x1, RZ"),
         insert_before(r"^FLAG_17:", "  MOV spins, RZ"),
         expect="clean", why="stream-K's finisher polls its flag with a back-off and a spin counter in the loop"),
    case("streamk-acquire-dropped", "flags", G90K, drop(r"MEMBAR.ALL.GPU", nth=0),
         expect="order", match=r"partial_sums: .* and nothing orders the two|no GPU-scope fence",
         why="the finisher reads the partial sums without the acquire fence after its flag wait", all_ctas=True),
    case("streamk-release-dropped", "flags", G90K, drop(r"MEMBAR.ALL.GPU", nth=1),
         expect="order", match=r"partial_sums: ",
         why="a contributor raises its flag without the release fence after its partial sums", all_ctas=True),
    case("streamk-flag-never-raised", "flags", G90K, drop(r"REDG.E.ADD.STRONG.GPU desc\[memdesc_sk\]\[flag_addr.64\], one", nth=0),
         expect="protocol", match=r"hang: .* waits on flag_words",
         why="consumer 0's contributors never raise their flag: with every CTA simulated the finisher waits forever",
         all_ctas=True),
    # -- tcgen05 fences ---------------------------------------------------------------------------
    case("tc-fence-after-dropped-epilogue", "tcgen05", G100, drop(r"TCGEN05.FENCE.AFTER", nth=4),
         expect="order", match=r"tensor memory: UTCHMMA.2CTA, warp 1 writes it and LDTM.x32, warp \d reads it",
         why="the epilogue reads the accumulator after its mbarrier wait without tcgen05.fence::after_thread_sync"),
    case("tc-fence-before-dropped-epilogue", "tcgen05", G100M, drop_all(r"TCGEN05.FENCE.BEFORE"),
         insert_before(r"UCGABAR_ARV", "  TCGEN05.FENCE.BEFORE", nth=0),
         expect="order", match=r"tensor memory: LDTM.x32, warp \d reads it and UTCHMMA",
         why="the epilogue frees the accumulator (arrive) without tcgen05.fence::before_thread_sync"),
    case("tc-fence-after-dropped-mma", "tcgen05", G100M, drop(r"TCGEN05.FENCE.AFTER", nth=1, count=1),
         drop(r"TCGEN05.FENCE.AFTER", nth=1),
         expect="order", match=r"tensor memory: LDTM.x32, warp \d reads it and UTCHMMA",
         why="the MMA warp reuses a freed accumulator without tcgen05.fence::after_thread_sync"),
    case("tc-fence-after-redundant", "tcgen05", G100M, drop(r"TCGEN05.FENCE.AFTER", nth=1),
         expect="clean", why="the fence after the accumulator-empty wait dropped: the one after each stage's wait, "
                             "before the MMAs, still orders them"),
    case("tc-fences-kept", "tcgen05", G100M, expect="clean",
         why="two accumulators handed between the MMA warp and the epilogue, fenced on both sides"),
    # -- exit obligations -------------------------------------------------------------------------
    case("tma-store-unwaited-at-exit", "exit", G90S, drop(r"@epi_lead DEPBAR.LE SB0, 0x0", nth=1),
         expect="order", match=r"UTMASTG.2D, warp 4 reads c_stage\[0\] asynchronously, and nothing orders that before",
         why="consumer 0 exits right after its last TMA store, without waiting for the store to read shared memory"),
    case("tma-store-unwaited-sm100", "exit", G100T, drop(r"^\s+DEPBAR.LE SB0, 0x0", nth=-1),
         expect="order", match=r"UTMASTG.2D, warp \d reads c_stage\[\d\] asynchronously",
         why="the epilogue's last TMA store is not waited for before EXIT"),
    case("tma-store-waited-each-tile", "exit", G90S, drop(r"@epi_lead DEPBAR.LE SB0, 0x0", nth=1),
         insert_after(r"UTMACMDFLUSH", "  DEPBAR.LE SB0, 0x0", nth=0),
         expect="clean", why="consumer 0 waits for each tile's store right after issuing it, not before the exit"),
    case("tmem-not-freed", "exit", G100, drop(r"UTCATOMSWS.2CTA.AND"),
         expect="protocol", match=r"exits with tensor-memory columns 0..63 still allocated",
         why="the MMA warp never deallocates the accumulator's tensor memory"),
    case("tmem-not-freed-example", "exit", PIPE100, drop(r"UTCATOMSWS.AND"),
         expect="protocol", match=r"still allocated", why="the example's tensor memory is not freed"),
    case("tmem-freed-after-sync", "exit", PIPE100, expect="clean",
         why="the example frees its tensor memory after the epilogue's loads, through a CTA barrier"),
    # -- where the data came from (tile provenance), layouts the copy engine and the MMAs agree on -----
    case("a-box-m-off-half-tile", "provenance", G90, sub(r"IMAD m0, m_blk, 0x80, RZ", "RZ", "0x40"),
         expect="data", match=r"stores c_out rows \d+\.\.\d+, columns \d+\.\.\d+ from an accumulator of rows",
         why="the producer loads A's box 64 rows below the tile the epilogue stores"),
    case("c-rows-from-wrong-block", "provenance", G90, sub(r"IMAD row0, m_blk, 0x80, frag_row", "m_blk", "n_blk", nth=0),
         expect="data|memory", match=r"stores c_out rows .* from an accumulator of rows|outside every global buffer",
         why="consumer 0's epilogue computes its rows from the N block"),
    case("a-rows-same-in-pair", "provenance", G100, sub(r"UIMAD a_row, cta_rank, 0x40, a_row", "0x40", "0x0"),
         expect="data", match=r"multiplies B rows 0..63, 0..63 of a from the pair's CTAs",
         why="both CTAs of a pair load the same 64 rows of A (the rank's offset is lost)"),
    case("tma-store-row-col-swapped", "provenance", G90S, sub(r"R2UR tmas_c.2, tile_row", "tile_row", "tile_col", nth=0),
         sub(r"R2UR tmas_c.1, tile_col", "tile_col", "tile_row", nth=0),
         expect="data", match=r"stores c rows .* from a staged tile of",
         why="consumer 0's TMA store swaps the tile's row and column coordinates"),
    case("one-k-step-wrong-m", "provenance", G90M, sub(r"R2UR tma_a.3, m0", "m0", "n0", nth=0),
         expect="data", match=r"rows \d+\.\.\d+ of a|from an accumulator of rows",
         why="the producer loads A with the N block's coordinate"),
    case("gmma-swizzle-64-for-128", "provenance", G90, sub_all(r"UMOV gmma_desc.1, 0x40000040", "0x40000040", "0x80000040"),
         expect="data", match=r"reads its A operand with a 64-byte swizzle descriptor",
         why="the A descriptors say 64-byte swizzle; the map lands 128-byte swizzled rows"),
    case("umma-sbo-wrong", "provenance", G100, sub_all(r"UMOV umma_b.1, 0x40004040", "0x40004040", "0x40004020"),
         expect="data", match=r"reads its B operand with a 128-byte swizzle descriptor whose row",
         why="the B descriptor's stride between 8-row groups is 512 bytes, the box's is 1024"),
    case("provenance-correct-persistent", "provenance", G100M, expect="clean",
         why="several tiles a CTA, two accumulators: every stored tile is the product its operands were loaded for"),
    # -- the header against the code ------------------------------------------------------------------
    case("dynsmem-too-small", "header", PIPE90, header(".dynsmem", ".dynsmem 65536"),
         expect="memory", match=r"\.dynsmem 65536 is smaller than the shared buffers: stage_bars ends at byte",
         why="the launch asks for less dynamic shared memory than the buffers take"),
    case("dynsmem-generous", "header", PIPE90, header(".dynsmem", ".dynsmem 131072"),
         expect="clean", why="more dynamic shared memory than the buffers need is allowed"),
    case("tmap-pitch-wrong", "header", G90S, header(".tmap c ", ".tmap c dtype=bf16 dims=512,256 strides=1040 box=64,64 "
                                                                "swizzle=128 elem_strides=1,1"),
         expect="memory", match=r"tensor map c steps 1040 bytes between rows, buffer c_out 1024",
         why="the output map's row pitch is 16 bytes too long: every row lands skewed"),
    case("tmap-dtype-wrong", "header", G90S, header(".tmap c ", ".tmap c dtype=fp32 dims=512,256 strides=1024 box=32,64 "
                                                                "swizzle=128 elem_strides=1,1"),
         expect="memory", match=r"tensor map c moves fp32 \(4 bytes\) where buffer c_out declares bf16",
         why="the output map says fp32 for a bf16 C"),
    case("tmap-dims-too-big", "header", G90S, header(".tmap c ", ".tmap c dtype=bf16 dims=512,288 strides=1024 box=64,64 "
                                                                 "swizzle=128 elem_strides=1,1"),
         expect="memory", match=r"tensor map c is 512x288 elements, buffer c_out 512x256",
         why="the output map has 32 more rows than C: stores past the buffer"),
    # -- alignment ---------------------------------------------------------------------------------------
    case("tma-dst-misaligned", "align", PIPE90, sub(r"UIADD3 tma_a.0, sa@ps, 0x0, URZ", "0x0", "0x40"),
         expect="memory", match=r"UTMALDG.2D lands its box at shared 0x\w+, which is not 1024-byte aligned",
         why="the A box lands 64 bytes into its stage (and 128-byte swizzled data needs 1024-byte alignment)"),
    case("bulk-copy-size", "align", FEAT90, sub(r"UMOV size, 0x100", "0x100", "0xf8"),
         sub(r"MOV nbytes, 0x100", "0x100", "0xf8"),
         expect="memory", match=r"UBLKCP.S.G copies 248 bytes: a bulk copy moves a positive multiple of 16 bytes",
         why="a bulk copy of 248 bytes"),
    case("mbarrier-misaligned", "align", PIPE90, sub(r"SYNCS.EXCH.64 URZ, \[stage_bars_base\+0x8\]", r"0x8\]", "0xc]"),
         expect="memory", match=r"uses shared 0x\w+ as an mbarrier, which is not 8-byte aligned",
         why="an mbarrier initialised at an address 4 bytes off"),
    case("tmem-alloc-not-power-of-two", "align", PIPE100, sub(r"UTCATOMSWS.FIND_AND_SET.ALIGN", "0x80", "0x60"),
         expect="protocol", match=r"allocates 96 tensor-memory columns: a power of two from 32 to 512",
         why="96 tensor-memory columns"),
    case("bulk-copy-larger", "align", FEAT90, sub(r"UMOV size, 0x100", "0x100", "0x200"),
         sub(r"MOV nbytes, 0x100", "0x100", "0x200"),
         expect="clean", why="a bulk copy of 512 bytes: 16-byte aligned, a multiple of 16, inside both buffers"),
    case("tma-dst-other-stage", "align", PIPE90, sub(r"UIADD3 tma_a.0, sa@ps, 0x0, URZ", "0x0", "0x2000"),
         expect="order", match=r"sa\[\d\]: ",
         why="the A box lands one stage further (aligned, but in the next stage's buffer): a race, not an alignment"),
    # -- coverage: every CTA -------------------------------------------------------------------------------
    case("every-tile-once", "coverage", G90, expect="clean", all_ctas=True,
         why="every CTA simulated: each output element stored once"),
    case("tile-index-collides", "coverage", G90, sub_all(r"IMAD t, tile, 0x8, ctaid", "ctaid", "ctaid_hi"),
         declare("R ctaid_hi"), insert_after(r"S2R ctaid, SR_CTAID.X", "  LOP3.LUT ctaid_hi, ctaid, 0x6, RZ, 0xc0, !PT", nth=1),
         insert_after(r"S2R ctaid, SR_CTAID.X", "  LOP3.LUT ctaid_hi, ctaid, 0x6, RZ, 0xc0, !PT", nth=2),
         insert_after(r"S2R ctaid, SR_CTAID.X", "  LOP3.LUT ctaid_hi, ctaid, 0x6, RZ, 0xc0, !PT", nth=0),
         expect="coverage", match=r"c_out: no store or reduce-add writes", all_ctas=True,
         why="the tile index drops the CTA id's low bit: two CTAs compute each even tile, odd tiles nobody"),
    case("remainder-tile-unguarded", "coverage", "gemm sm_90a 200x136x96 fp32",
         sub_all(r"ISETP.LT.U32.AND tile_inside, PT, m_blk, 0x1, PT", "0x1", "0x2"),
         sub_all(r"ISETP.LT.U32.AND tile_inside, PT, n_blk, 0x2, tile_inside", "0x2", "0x3"),
         expect="coverage|memory", match=r"c_out: more than one store writes|outside every global buffer", all_ctas=True,
         why="the ragged edge tiles take the full-tile store path: their columns past N spill into the next rows"),
    case("persistent-stride-short", "coverage", G90M, sub_all(r"MOV tile_count, 0x8", "0x8", "0x7"),
         expect="coverage", match=r"c_out: no store or reduce-add writes 16384 of its 131072 elements", all_ctas=True,
         why="a persistent CTA walks one tile too few: the last tile of each CTA is never computed"),
    case("persistent-stride-ok-sm100", "coverage", G100M, expect="clean", all_ctas=True,
         why="persistent CTAs with two accumulators cover every tile once"),
    # -- scratch memory for the next launch ------------------------------------------------------------
    case("flag-not-reset", "scratch", G90K, drop(r"STG.E.STRONG.GPU desc\[memdesc_sk\]\[flag_addr.64\], RZ"),
         expect="order", match=r"second launch \(from the scratch memory the first left\): partial_sums", all_ctas=True,
         why="the finisher forgets to reset its flag: the next launch's finisher passes at once"),
    case("epochs-carry-over", "scratch", G100K, expect="clean", all_ctas=True,
         why="flags never reset, compared with a per-launch epoch the CTAs advance: the next launch works"),
    case("epoch-not-advanced", "scratch", G100K, drop(r"@epoch_writer STG.E desc\[memdesc\]\[epoch_addr.64\], epoch_next"),
         expect="order|protocol", match=r"second launch", all_ctas=True,
         why="the epoch is not written back: the next launch waits for flags it already passed"),
    # -- more protocol mistakes, caught as hangs and races ---------------------------------------------
    case("expect-tx-short", "protocol", G90, sub_all(r"MOV tx_bytes, 0x6000", "0x6000", "0x4000"),
         expect="order|protocol", match=r"stage_full|sa\[|sb\[",
         why="the expect-tx count leaves out B's box: the phase completes before B lands"),
    case("full-barrier-count-2", "protocol", G90, sub(r"UMOV mbar_init.0, 0x1ffffe", "0x1ffffe", "0x1ffffc", nth=0),
         expect="protocol", match=r"hang: CTA \d+ warp \d+ waits on stage_full\[0\]",
         why="stage 0's full barrier expects two arrivals; the producer makes one"),
    case("empty-wait-skipped", "protocol", PIPE90, drop(r"SYNCS.PHASECHK.TRANS64.TRYWAIT waited, \[stage_bars@ps\+0x8\]", count=2),
         expect="order", match=r"sa\[\d\]|sb\[\d\]",
         why="the producer refills a stage without waiting for it to be freed"),
    case("flags-weak-poll-streamk", "flags", G90K, sub(r"LDG.E.STRONG.GPU flag", r"LDG.E.STRONG.GPU", "LDG.E"),
         expect="protocol", match=r"through a weak load",
         why="stream-K's finisher polls its flag with a plain load"),
    case("alloc-fence-mma-warp-dropped", "tcgen05", G100, drop(r"TCGEN05.FENCE.AFTER", nth=0),
         expect="clean", why="the fence after the cluster barrier dropped: the MMA warp allocated the columns itself, and "
                             "its fences after each wait, and the epilogue's, order the rest"),
]
