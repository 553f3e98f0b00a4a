"""Tensor maps from a table in global memory (the megakernel's maps): a copy names its map by the
address of the descriptor (`tmap[desc]`), lifted to the descriptor's generic address and assembled
by ptxas to `UTMALDG`/`UTMASTG` through a uniform register pair; the checker resolves the address to
its slot and refuses one that is no slot, asks for the tensor-map acquire fence before a warp's
first use, and orders a TMA store read by another CTA's TMA load only through a release after the
store's writes were waited for."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pytest

from warpy.check.report import check_kernel
from warpy.check.expect import Verdict
from warpy.errors import WarpyError
from warpy.isa.families import alu, control, memory, sync, tma
from warpy.isa.operands import CBank, GMem
from warpy.isa.pipes import init_barriers, wait
from warpy.isa.program import Program
from warpy.isa.text import parse
from warpy.isa.units.tma import table_entry, tma_load_at, tma_store_at
from warpy.layout import Layout
from warpy.layout.tma import TmaBox

ROWS, COLS = 16, 64
BOX = TmaBox(dtype="bf16", dims=(COLS, ROWS), strides=(COLS * 2,), box=(COLS, ROWS))


def relay(*, release: bool = True, writes: bool = True, acquire_fence: bool = True, slot_skew: int = 0) -> Program:
    """Two CTAs and three maps over one buffer (x, y, z at byte offsets 0, 2 KiB, 4 KiB), all slots of
    the table `maps`: CTA 0 copies x to y (TMA load, TMA store), waits for the store's writes, and
    raises a flag with release; CTA 1 waits for the flag (acquire), copies y to z."""
    p = Program("relay", "sm_90a", threads=32, grid=(2, 1, 1))
    p.param("mem", "u64")
    flag = p.param("flag", "u64")
    table = p.map_table("maps")
    for k, name in enumerate("xyz"):
        table.add(name, BOX, over="mem", offset=k * ROWS * COLS * 2)
    p.global_buffer("mem_words", Layout(3 * ROWS * COLS, 2), "bf16", "mem")
    p.global_buffer("flag_word", Layout(1, 4), "u32", "flag")
    page = p.smem("page", Layout((ROWS, COLS), (COLS * 2, 2)), "bf16")
    full = p.barriers("full", 1)
    init_barriers(p)
    leader = p.elect()
    md = p.urvec("memdesc", 2)
    p.emit(alu.uldc(md, CBank(0, 0x208), p.sm))
    fa = p.rvec("flag_addr", 2)
    p.emit(alu.ldc(fa, flag.cbank()))
    cta = p.r("cta")
    p.emit(alu.s2r(cta, "SR_CTAID.X"))
    first, second = p.p("first"), p.p("second")
    p.emit(alu.isetp("EQ", first, cta, 0))
    p.emit(alu.isetp("NE", second, cta, 0))
    src, dst = p.r("src"), p.r("dst")
    p.emit(alu.iadd3(src, cta, 0))  # CTA 0: x -> y; CTA 1: y -> z
    p.emit(alu.iadd3(dst, cta, 1 + slot_skew))
    with p.when(second):  # wait for CTA 0's flag, acquire, then the async proxy may read what it released
        seen, up = p.r("seen"), p.p("up")
        spin = p.fresh_label("SPIN")
        p.label(spin)
        p.emit(memory.ldg_strong(seen, GMem(md, fa)))
        p.emit(alu.isetp("GE", up, seen, 1))
        p.emit(control.bra(spin).guarded(~up))
        p.emit(sync.cctl_ivall())
        p.emit(sync.fence_proxy_async_global())
    desc = p.urvec("map_desc", 2)
    table_entry(p, table, src, desc)
    if acquire_fence:
        p.emit(tma.tmap_acquire(desc))
    tx = p.r("tx")
    p.emit(alu.mov(tx, BOX.box_bytes))
    p.derive.emit_at(full.at(0), lambda m: sync.arrive_expect_tx(m, tx), guard=leader)
    tma_load_at(p, page.at(0, 0), desc, 2, [0, 0], full.at(0), guard=leader)
    par = p.r("par")
    p.emit(alu.mov(par, 0))
    wait(p, full.at(0), par)
    table_entry(p, table, dst, desc)
    if acquire_fence:
        p.emit(tma.tmap_acquire(desc))
    tma_store_at(p, page.at(0, 0), desc, 2, [0, 0])
    p.emit(tma.bulk_commit())
    p.emit(tma.bulk_wait(0, writes=writes))
    with p.when(first):  # the store's writes, then the flag with release
        p.emit(sync.fence_proxy_async_global())
        if release:
            p.emit(sync.membar("GPU"))
        one = p.r("one")
        p.emit(alu.mov(one, 1))
        p.emit(memory.red_add(GMem(md, fa), one).guarded(leader))
    p.emit(control.exit_())
    return p


class RelayExpectation:
    """x holds small integers; after the run z must equal x."""

    def initial(self, source: str, box: Optional[TmaBox], nbytes: int, rng: np.random.Generator) -> Optional[np.ndarray]:
        if source != "mem":
            return None
        out = np.zeros(nbytes // 2, dtype=np.uint16)
        x = rng.integers(-8, 8, ROWS * COLS).astype(np.float32)
        out[: ROWS * COLS] = (x.view(np.uint32) >> 16).astype(np.uint16)
        return out

    def compare(self, run: Any) -> Verdict:
        mem = run.gmem["mem"].view(np.uint16)
        x, z = mem[: ROWS * COLS], mem[2 * ROWS * COLS: 3 * ROWS * COLS]
        bad = int((x != z).sum())
        return Verdict(ROWS * COLS, bad, 0, [f"values: {bad} elements of z differ from x"] if bad else [])


def check(p: Program, values: bool = True) -> Any:
    return check_kernel(p.kernel(), p.coloured(), values=values, expect=RelayExpectation())


def test_table_maps_print_parse_and_are_no_kernel_parameters() -> None:
    p = relay()
    text = p.text()
    assert ".tmap y table=maps slot=1 over=mem offset=2048 dtype=bf16 dims=64,16 strides=128 box=64,16" in text
    assert "  UTMACCTL.IV tmap[map_desc]" in text
    assert "  @leader UTMALDG.2D [tma_args2], tmap[map_desc]" in text
    assert "  DEPBAR.LE.WRITES SB0, 0x0" in text
    k = parse(text)
    assert str(k) == text and str(parse(str(p.coloured()))) == str(p.coloured())
    assert k.header.kernel_params() == [("mem", "u64"), ("flag", "u64"), ("maps", "u64")]
    assert [t.name for t in k.header.tables()["maps"]] == ["x", "y", "z"]
    assert "tmap[UR" in str(p.coloured())


@pytest.mark.parametrize("text,what", [
    (".tmap a table=maps slot=0 dtype=bf16 dims=64 strides= box=64\n", "names no `.param maps u64`"),
    (".tmap a table=maps slot=0 dtype=bf16 dims=64 strides= box=64\n.tmap b table=maps slot=0 dtype=bf16 dims=64 "
     "strides= box=64\n.param maps u64\n", "slot 0 of table maps is also a's"),
    (".tmap a table=maps dtype=bf16 dims=64 strides= box=64\n.param maps u64\n", "table= and slot= go together"),
    (".tmap a table=maps slot=0 offset=16 dtype=bf16 dims=64 strides= box=64\n.param maps u64\n", "offset= is"),
])
def test_table_declarations_are_refused_in_one_line(text: str, what: str) -> None:
    with pytest.raises(WarpyError, match=what):
        parse(".kernel k\n.sm sm_90a\n.threads 32\n" + text)


def test_a_descriptor_operand_is_a_register_pair() -> None:
    head = ".kernel k\n.sm sm_90a\n.threads 32\n.reg R r\n"
    with pytest.raises(WarpyError, match=r"tmap\[nothing\]: 'nothing' is no .tmap line"):
        parse(head + "  UTMACCTL.IV tmap[nothing]\n")
    with pytest.raises(WarpyError, match="uniform register pair"):
        parse(head + "  UTMACCTL.IV tmap[r]\n")
    with pytest.raises(WarpyError, match="name is taken"):
        q = Program("k", "sm_90a", threads=32)
        q.r("m")
        q.tmap("m", BOX)


def test_lifted_to_the_descriptors_generic_address() -> None:
    from warpy.lift.lifter import lift

    ptx = lift(relay().kernel())
    assert "fence.proxy.tensormap::generic.acquire.sys [" in ptx
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in ptx
    assert "cp.async.bulk.wait_group 0;" in ptx  # .WRITES: not .read
    assert ".param .align 64 .b8" not in ptx  # no map is a kernel parameter
    assert ".param .u64 maps" in ptx


def test_ptxas_assembles_copies_through_a_global_descriptor() -> None:
    """ptxas + nvdisasm (the wheel's): UTMALDG/UTMASTG take the descriptor's address from a uniform
    pair loaded from the table parameter; the acquire fence is UTMACCTL.IV; the wait for writes is
    DEPBAR.LE SB0 followed by CCTL.IVALL. ptxas and nvdisasm are dependencies of warpy (installed with
    it): without them this test fails with the one-line error that names the missing tool."""
    from warpy.lift.disasm import disassemble
    from warpy.lift.lifter import build

    sass = disassemble(build(relay().kernel()))
    texts = [i.text() for i in sass.kernel().instructions]
    assert any(t.startswith("UTMALDG.2D [UR") and ", [UR" in t for t in texts), texts
    assert any(t.startswith("UTMASTG.2D [UR") for t in texts)
    assert any(t.startswith("UTMACCTL.IV [UR") for t in texts)
    k = next(n for n, t in enumerate(texts) if t.startswith("DEPBAR.LE SB0"))
    assert any(t.startswith("CCTL.IVALL") for t in texts[k + 1:k + 3])


def test_the_relay_is_clean_and_copies_x_to_z() -> None:
    rep = check(relay())
    assert rep.ok, rep.text()
    assert rep.values_checked == ROWS * COLS and rep.values_wrong == 0


@pytest.mark.parametrize("fault,kind,what", [
    (dict(release=False), "order", "nothing orders the two"),
    (dict(writes=False), "order", "no GPU-scope fence after the write"),
    (dict(acquire_fence=False), "protocol", "without fencing the tensor-map proxy"),
    (dict(slot_skew=5), "protocol", "maps+0x300, no slot of its table"),
])
def test_what_the_checker_refuses(fault: dict[str, Any], kind: str, what: str) -> None:
    rep = check(relay(**fault))
    msgs = " | ".join(rep.problems.msgs[kind])
    assert what in msgs, rep.text()
