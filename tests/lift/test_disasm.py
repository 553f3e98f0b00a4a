"""The disassembly cross-check: parsing nvdisasm/cuobjdump text, the opcode matching rule,
check_opcodes, and loop bodies."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpy.errors import WarpyError
from warpy.lift import disasm as D
from warpy.lift import ptxas as P

# nvdisasm is a dependency (the nvidia-cuda-nvdisasm wheel): without it these tests fail, naming it.


# `nvdisasm -c` (13.5) of LOOP_PTX for sm_90a by ptxas 12.9, the loop unrolled by 4 (trimmed).
NVDISASM_TEXT = textwrap.dedent(
    """\
    	.headerflags	@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
    	.elftype	@"ET_EXEC"


    //--------------------- .text.loop_kernel         --------------------------
    	.section	.text.loop_kernel,"ax",@progbits
    	.align	128
            .global         loop_kernel
            .type           loop_kernel,@function
            .size           loop_kernel,(.L_x_6 - loop_kernel)
            .other          loop_kernel,@"STO_CUDA_ENTRY STV_DEFAULT"
    loop_kernel:
    .text.loop_kernel:
            /*0000*/                   LDC R1, c[0x0][0x28] ;
            /*0010*/                   LDC R13, c[0x0][0x218] ;
            /*0020*/                   ULDC.64 UR4, c[0x0][0x208] ;
            /*0030*/                   ISETP.GT.U32.AND P0, PT, R13, RZ, PT ;
            /*0040*/              @!P0 LDC.64 R4, c[0x0][0x210] ;
            /*00e0*/               @P1 BRA `(.L_x_0) ;
            /*00f0*/                   LDC.64 R4, c[0x0][0x210] ;
            /*0100*/                   PLOP3.LUT P0, PT, PT, PT, PT, 0x8, 0x0 ;
            /*0110*/                   VIADD R11, R13, 0xfffffffd ;
    .L_x_1:
            /*0120*/                   LDG.E.STRONG.SYS R6, desc[UR4][R4.64] ;
            /*0130*/                   LDG.E.STRONG.SYS R8, desc[UR4][R4.64] ;
            /*0140*/                   LDG.E.STRONG.SYS R9, desc[UR4][R4.64] ;
            /*0150*/                   LDG.E.STRONG.SYS R10, desc[UR4][R4.64] ;
            /*0160*/                   VIADD R0, R0, 0x4 ;
            /*0170*/                   ISETP.GE.U32.AND P1, PT, R0, R11, PT ;
            /*0180*/                   IADD3 R6, R8, R7, R6 ;
            /*0190*/                   IADD3 R7, R10, R6, R9 ;
            /*01a0*/              @!P1 BRA `(.L_x_1) ;
    .L_x_0:
            /*01b0*/                   IMAD.IADD R4, R13, 0x1, -R0 ;
            /*02a0*/                   STG.E desc[UR4][R2.64], R7 ;
    .L_x_5:
            /*02b0*/                   EXIT ;
    .L_x_4:
            /*02c0*/                   BRA `(.L_x_4);
            /*02d0*/                   NOP;
    .L_x_6:


    //--------------------- SYMBOLS --------------------------

    	.type		.nv.reservedSmem.offset0,@object
    """
)

# The same instructions as cuobjdump -sass prints them: no labels, branch targets as addresses.
CUOBJDUMP_TEXT = textwrap.dedent(
    """\

    Fatbin elf code:
    ================
    arch = sm_90a
    code version = [1,8]
    host = linux
    compile_size = 64bit

    	code for sm_90a
    		Function : loop_kernel
    	.headerflags	@"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
            /*0000*/                   LDC R1, c[0x0][0x28] ;                  /* 0x00000a00ff017b82 */
                                                                               /* 0x000fe40000000800 */
            /*0110*/                   VIADD R11, R13, 0xfffffffd ;            /* 0x0000000000000000 */
                                                                               /* 0x0000000000000000 */
            /*0120*/                   LDG.E.STRONG.SYS R6, desc[UR4][R4.64] ; /* 0x0000000000000000 */
                                                                               /* 0x0000000000000000 */
            /*0130*/                   VIADD R0, R0, 0x4 ;                     /* 0x0000000000000000 */
                                                                               /* 0x0000000000000000 */
            /*0140*/              @!P1 BRA 0x120 ;                             /* 0x0000000000000000 */
                                                                               /* 0x0000000000000000 */
            /*0150*/                   EXIT ;                                  /* 0x0000000000000000 */
                                                                               /* 0x0000000000000000 */
            /*0160*/                   BRA 0x160;                              /* 0x0000000000000000 */
                                                                               /* 0x0000000000000000 */
    		..........
    """
)

LOOP_PTX = textwrap.dedent(
    """\
    .version 8.7
    .target sm_90a
    .address_size 64
    .visible .entry loop_kernel(.param .u64 out, .param .u32 n)
    {
        .reg .b32 %r<8>;
        .reg .b64 %rd<4>;
        .reg .pred %p<2>;
        ld.param.u64 %rd1, [out];
        ld.param.u32 %r1, [n];
        mov.u32 %r2, 0;
        mov.u32 %r3, 0;
    LOOP:
        ld.volatile.global.u32 %r4, [%rd1];
        add.u32 %r3, %r3, %r4;
        add.u32 %r2, %r2, 1;
        setp.lt.u32 %p1, %r2, %r1;
        @%p1 bra LOOP;
        st.global.u32 [%rd1], %r3;
        ret;
    }
    """
)


def test_parse_nvdisasm_golden() -> None:
    (k,) = D.parse_disassembly(NVDISASM_TEXT)
    assert k.name == "loop_kernel"
    assert len(k.instructions) == 23
    first, guarded = k.instructions[0], k.instructions[4]
    assert first == D.SassInstruction(offset=0, opcode="LDC", guard=None, operands="R1, c[0x0][0x28]")
    assert guarded.guard == "!P0" and guarded.opcode == "LDC.64" and guarded.modifiers == ("64",)
    assert guarded.text() == "@!P0 LDC.64 R4, c[0x0][0x210]"
    ldg = k.instructions[9]
    assert (ldg.base, ldg.modifiers, ldg.operands) == ("LDG", ("E", "STRONG", "SYS"), "R6, desc[UR4][R4.64]")
    assert dict(k.labels) == {".L_x_1": 0x120, ".L_x_0": 0x1B0, ".L_x_5": 0x2B0, ".L_x_4": 0x2C0}
    assert k.instructions[-1] == D.SassInstruction(offset=0x2D0, opcode="NOP", guard=None, operands="")
    assert k.opcodes()["LDG.E.STRONG.SYS"] == 4


def test_loops_nvdisasm() -> None:
    (k,) = D.parse_disassembly(NVDISASM_TEXT)
    (loop,) = k.loops()  # the forward branch and the trap self-loop after EXIT are not loops
    assert (loop.label, loop.start, loop.branch, loop.count) == (".L_x_1", 0x120, 0x1A0, 9)
    assert loop.opcode_counts()["LDG.E.STRONG.SYS"] == 4
    assert loop.instructions[-1].opcode == "BRA"
    assert D.loop_instruction_count(k) == 9
    assert D.loop_instruction_count(k, ".L_x_1") == 9
    with pytest.raises(WarpyError, match=r"no backward branch to label '\.L_x_0'"):
        D.loop_instruction_count(k, ".L_x_0")


def test_parse_cuobjdump_golden() -> None:
    (k,) = D.parse_disassembly(CUOBJDUMP_TEXT)
    assert k.name == "loop_kernel"
    assert [i.opcode for i in k.instructions] == ["LDC", "VIADD", "LDG.E.STRONG.SYS", "VIADD", "BRA", "EXIT", "BRA"]
    assert k.instructions[4].operands == "0x120" and k.instructions[4].guard == "!P1"
    (loop,) = k.loops()
    assert (loop.label, loop.start, loop.count) == (None, 0x120, 3)


def test_no_loop() -> None:
    k = D.KernelSass("k", (D.SassInstruction(0, "EXIT", None, ""),))
    with pytest.raises(WarpyError, match="kernel 'k' has no loop"):
        D.loop_instruction_count(k)


# ---------------------------------------------------------------------------------------------
# The matching rule

GOLDEN_MATCHES = [
    ("HGMMA", "HGMMA.64x256x16.F32.BF16", True),
    ("HGMMA.64x256x16", "HGMMA.64x256x16.F32.BF16", True),
    ("HGMMA.BF16.F32", "HGMMA.64x256x16.F32.BF16", True),
    ("HGMMA.64x128x16", "HGMMA.64x256x16.F32.BF16", False),
    ("UTCHMMA.2CTA", "UTCHMMA", False),
    ("UTCHMMA", "UTCHMMA.2CTA", True),
    ("UTCBAR.MULTICAST.2CTA", "UTCBAR.2CTA.MULTICAST", True),
    ("SYNCS.ARRIVE.TRANS64.A1T0", "SYNCS.ARRIVE.TRANS64.RED.A1T0", True),
    ("SYNCS.ARRIVE.TRANS64.A1T0", "SYNCS.ARRIVE.TRANS64", False),
    ("SYNCS", "SYNCS.EXCH.64", True),
    ("UTMALDG", "UTMALDGX.2D", False),  # bases compare whole, not by prefix
    ("LDG.E.E", "LDG.E", False),  # a modifier expected twice must be emitted twice
    ("utchmma", "UTCHMMA", False),  # SASS spelling is case-sensitive
]


@pytest.mark.parametrize("expected,emitted,result", GOLDEN_MATCHES)
def test_opcode_matches_golden(expected: str, emitted: str, result: bool) -> None:
    assert D.opcode_matches(expected, emitted) is result


NAME = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_", min_size=1, max_size=6)


@settings(deadline=None, max_examples=200)
@given(base=NAME, mods=st.lists(NAME, max_size=5), extra=st.lists(NAME, max_size=3), data=st.data())
def test_opcode_matches_properties(base: str, mods: list[str], extra: list[str], data: st.DataObject) -> None:
    emitted = ".".join([base, *mods, *extra])
    shuffled = data.draw(st.permutations(mods))
    subset = data.draw(st.lists(st.sampled_from(mods), unique=True, max_size=len(mods))) if mods else []
    assert D.opcode_matches(".".join([base, *shuffled]), emitted)  # order-insensitive
    assert D.opcode_matches(".".join([base, *subset]), emitted)  # any subset matches
    assert D.opcode_matches(base, emitted)
    other = data.draw(NAME.filter(lambda n: n != base))
    assert not D.opcode_matches(".".join([other, *mods]), emitted)
    missing = data.draw(NAME.filter(lambda n: n not in mods and n not in extra))
    assert not D.opcode_matches(".".join([base, *mods, missing]), emitted)


@pytest.mark.parametrize("bad", ["", ".X", "A..B", "A."])
def test_bad_spelling(bad: str) -> None:
    with pytest.raises(WarpyError, match="is not an opcode spelling"):
        D.opcode_matches(bad, "A")


# ---------------------------------------------------------------------------------------------
# check_opcodes on a parsed disassembly and on a real cubin


def _dis() -> D.Disassembly:
    return D.Disassembly(tool="nvdisasm", kernels=D.parse_disassembly(NVDISASM_TEXT))


def test_check_opcodes_pass_and_fail() -> None:
    r = D.check_opcodes(["LDG.STRONG", "IADD3", "BRA", "LDG.E"], _dis())
    assert r.ok and r.missing == ()
    assert dict(r.found)["LDG.STRONG"] == ("LDG.E.STRONG.SYS",)
    assert r.line() == "all 4 expected opcodes present"
    with pytest.raises(WarpyError) as e:
        D.check_opcodes(["LDG", "HGMMA", "UTMALDG.2D", "LDG.E.GPU"], _dis(), "loop_kernel")
    assert str(e.value) == "missing SASS opcodes in kernel 'loop_kernel': HGMMA, UTMALDG.2D, LDG.E.GPU"
    r = D.check_opcodes(["HGMMA", "LDC"], _dis(), fail=False)
    assert not r.ok and r.missing == ("HGMMA",)
    with pytest.raises(WarpyError, match="no function 'nope'"):
        D.check_opcodes(["LDC"], _dis(), "nope")


@pytest.fixture
def _cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WARPY_CACHE", str(tmp_path))
    P.clear_memory_cache()


def test_real_cubin_roundtrip(_cache: None) -> None:
    cubin = P.assemble(LOOP_PTX, "sm_90a")
    dis = D.disassemble(cubin)
    k = dis.kernel()
    assert k.name == "loop_kernel" and dis.kernel("loop_kernel") is k
    assert all(i.offset % 16 == 0 for i in k.instructions)
    assert [i.offset for i in k.instructions] == sorted(i.offset for i in k.instructions)
    assert D.loop_instruction_count(k) >= 5  # load, add, increment, compare, branch at least
    assert D.check_opcodes(["LDG.E.STRONG", "EXIT"], cubin).ok
    assert D.disassemble(cubin.data) == dis  # bytes work as well as a Cubin


def test_disassembler_discovery(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WARPY_NVDISASM", str(tmp_path / "missing"))
    with pytest.raises(WarpyError, match="WARPY_NVDISASM=.* is not an executable file"):
        D.find_disassembler()
    monkeypatch.delenv("WARPY_NVDISASM")
    monkeypatch.setattr(D, "_wheel_nvdisasm", lambda: None)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(WarpyError, match="^no disassembler found"):
        D.find_disassembler()
    tool = tmp_path / "cuobjdump"
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    assert D.find_disassembler() == D.Disassembler(str(tool), "cuobjdump", "PATH")


def test_garbage_cubin_is_one_line_error() -> None:
    with pytest.raises(WarpyError) as e:
        D.disassemble(b"not an elf file at all")
    assert "\n" not in str(e.value) and str(e.value).startswith("nvdisasm failed on the cubin")


def test_listings_are_kept_on_disk_by_cubin_and_tool(_cache: None, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A listing nvdisasm printed is read back from `$WARPY_CACHE/disasm/` in a later process (here:
    the memory cache emptied) without running the tool, by another copy of the same tool too; a
    different tool, another cubin and a damaged entry run it again."""
    cubin = P.assemble(LOOP_PTX, "sm_90a")
    tool = D.find_disassembler()
    D._disassemble.cache_clear()  # (an earlier test may have disassembled the same cubin)
    first = D.disassemble(cubin, tool)
    (entry,) = (tmp_path / "disasm").iterdir()
    runs: list[bytes] = []
    real_run = D._run_tool

    def counted(data: bytes, t: D.Disassembler) -> str:
        runs.append(data)
        return real_run(data, t)

    monkeypatch.setattr(D, "_run_tool", counted)
    D._disassemble.cache_clear()
    assert D.disassemble(cubin, tool) == first and runs == []
    copy = tmp_path / "bin" / "nvdisasm"
    copy.parent.mkdir()
    copy.write_bytes(Path(tool.path).read_bytes())
    copy.chmod(0o755)
    other = D.Disassembler(str(copy), tool.kind, "test")
    got = D.disassemble(cubin, other)
    assert got.kernels == first.kernels and got.tool == str(copy) and runs == []  # the same tool's bytes: a hit
    with copy.open("ab") as f:  # another build of the tool: a miss, then its own entry
        f.write(b"\0")
    D._disassemble.cache_clear()
    assert D.disassemble(cubin, other).kernels == first.kernels and len(runs) == 1
    assert len(list((tmp_path / "disasm").iterdir())) == 2
    entry.write_bytes(entry.read_bytes()[:-8])  # damaged: a miss, rewritten
    D._disassemble.cache_clear()
    assert D.disassemble(cubin, tool) == first and len(runs) == 2
    D._disassemble.cache_clear()
    assert D.disassemble(cubin, tool) == first and len(runs) == 2
    two = P.assemble(LOOP_PTX.replace("add.u32", "sub.u32"), "sm_90a")
    assert two.data != cubin.data
    D.disassemble(two, tool)
    assert runs[-1] == two.data and len(runs) == 3
