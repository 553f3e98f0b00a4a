"""Known bugs, injected into a program's text (named and coloured alike, line for line), to show that
each is caught by the check it should be.

| fault | what changes | caught by |
|---|---|---|
| `drop-arrive` | the producer's arrive.expect_tx on a stage's full barrier is dropped | barrier protocol (a hang) |
| `early-free` | a stage is freed before the MMAs that read it complete (sm_90a: the wgmma wait keeps one more group in flight; sm_100a: the commit that frees it moves ahead of the stage's MMAs) | happens-before |
| `wrong-tx` | the expect_tx byte count is 16 bytes too many | barrier protocol (a hang) |
| `box-off-by-one` | a TMA load's K coordinate is one box further | the MMA operands' K agreement |
| `no-proxy-fence` | the proxy fences before TMA stores are dropped | happens-before (proxy) |
| `global-before-wait` | the dependent-launch wait moves after the first global access (or, absent, is added there) | dependent launch |
| `read-before-commit` | the accumulator is read before its wait (sm_90a: wgmma wait 0 -> 1; sm_100a: the epilogue's wait on the accumulator's full barrier is dropped) | happens-before |
| `tmem-overlap` | the second tensor-memory accumulator overlaps the first (sm_100a) | happens-before on tensor memory |

`inject` returns the changed texts and a note; a fault that does not apply to a program raises
`FaultDoesNotApply` saying why in one line.
"""

from __future__ import annotations

from typing import Callable, Optional

import attrs

from warpy.errors import WarpyError
from warpy.isa.instr import Instr, Line
from warpy.isa.operands import URZ, Imm, Mem, R, TmapRef, URVec, elem_name
from warpy.isa.text import Kernel
from warpy.layout import Layout

FAULTS = ("drop-arrive", "early-free", "wrong-tx", "box-off-by-one", "no-proxy-fence", "global-before-wait",
          "read-before-commit", "tmem-overlap")

#: the check each fault must be reported by (Problems kinds)
CAUGHT_BY = {
    "drop-arrive": "protocol", "early-free": "order", "wrong-tx": "protocol", "box-off-by-one": "data",
    "no-proxy-fence": "order", "global-before-wait": "pdl", "read-before-commit": "order", "tmem-overlap": "order",
}


class FaultDoesNotApply(WarpyError):
    """The fault has nothing to change in this program."""


Edit = Callable[[list[Line], list[Line]], None]


def _instrs(lines: list[Line]) -> list[tuple[int, Instr]]:
    return [(k, x) for k, x in enumerate(lines) if isinstance(x, Instr)]


def _opname(x: Line) -> str:
    """An instruction line's opcode name ("" for a label or comment)."""
    return x.name if isinstance(x, Instr) else ""


def _mark(x: Line) -> str:
    return x.mark if isinstance(x, Instr) else ""


def _note_buf(i: Instr) -> str:
    return i.notes[0].buffer if i.notes else ""


def _drop_arrive(named: list[Line], col: list[Line], arch: str) -> str:
    for k, i in _instrs(named):
        if i.name == "SYNCS" and "ARRIVE" in i.mods and not ({"A1T0", "A0TR", "RED"} & set(i.mods)):
            del named[k], col[k]
            return f"dropped line {k + 1}: {i}".replace("  ", " ")
    raise FaultDoesNotApply("drop-arrive: the program has no arrive.expect_tx (SYNCS.ARRIVE.TRANS64 with a byte count)")


def _wrong_tx(named: list[Line], col: list[Line], arch: str) -> str:
    for k, i in _instrs(named):
        if i.name == "SYNCS" and "ARRIVE" in i.mods and not ({"A1T0", "A0TR", "RED"} & set(i.mods)):
            reg = i.ops[2]
            for j in range(k - 1, -1, -1):
                x = named[j]
                if isinstance(x, Instr) and x.name in ("MOV", "UMOV") and getattr(x.ops[0], "name", None) == getattr(reg, "name", "") \
                        and isinstance(x.ops[1], Imm):
                    v = x.ops[1].value
                    named[j] = attrs.evolve(x, ops=(x.ops[0], Imm(v + 16)))
                    y = col[j]
                    assert isinstance(y, Instr)
                    col[j] = attrs.evolve(y, ops=(y.ops[0], Imm(v + 16)))
                    return f"line {j + 1}: the expect_tx count {v} becomes {v + 16}"
    raise FaultDoesNotApply("wrong-tx: the program sets no expect_tx byte count from an immediate")


def _early_free(named: list[Line], col: list[Line], arch: str) -> str:
    ins = _instrs(named)
    for k, i in ins:  # sm_100a: a commit that frees a stage (an arrival on an empty barrier)
        if i.name == "UTCBAR" and i.notes and i.notes[0].buffer.endswith("_bars") and str(i.notes[0].coords[0]) == "1":
            first = None
            for j in range(k - 1, -1, -1):
                x = named[j]
                if isinstance(x, Instr) and x.name == "UTCHMMA":
                    first = j
                elif first is not None and isinstance(x, Instr) and x.mark == " " and x.name not in ("UTCHMMA", "UIADD3", "UMOV"):
                    break
            if first is None:
                continue
            # move it ahead of the stage's first MMA (and its operand lines)
            start = first
            while start > 0 and _mark(named[start - 1]) == "+":
                start -= 1
            for lst in (named, col):
                x = lst.pop(k)
                lst.insert(start, x)
            return f"line {k + 1} ({i.mnemonic}) moved ahead of the stage's MMAs (line {start + 1})"
    for k, i in ins:  # sm_90a: keep one more wgmma group in flight when the previous stage is freed
        if i.name == "WARPGROUP" and "DEPBAR" in i.mods and isinstance(i.ops[1], Imm) and i.ops[1].value >= 1:
            v = i.ops[1].value
            named[k] = attrs.evolve(i, ops=(i.ops[0], Imm(v + 1)))
            y = col[k]
            assert isinstance(y, Instr)
            col[k] = attrs.evolve(y, ops=(y.ops[0], Imm(v + 1)))
            return f"line {k + 1}: WARPGROUP.DEPBAR.LE gsb0, {v} becomes {v + 1} (the stage freed after it may still be read)"
    raise FaultDoesNotApply("early-free: the program frees no stage after a tensor-core wait or commit")


def _box_off(named: list[Line], col: list[Line], arch: str, kernel: Kernel) -> str:
    """The first TMA load's innermost (K) coordinate moves one box: an add right after the line
    that sets it (the same line in both texts, so each adds to its own register)."""
    for k, i in _instrs(named):
        if i.name != "UTMALDG":
            continue
        dst, tmap = i.ops[0], i.ops[1]
        if not (isinstance(dst, Mem) and dst.base is not None and isinstance(tmap, TmapRef)):
            raise WarpyError(f"{i.mnemonic}: not a tensor-map load's operands")
        args = dst.base
        box = kernel.header.tmap(tmap.name).box[0]
        c0 = elem_name(args.name, 2)
        for j in range(k - 1, -1, -1):
            x = named[j]
            if not (isinstance(x, Instr) and x.ops and getattr(x.ops[0], "name", None) == c0):
                continue
            for lst in (named, col):
                y = lst[j]
                assert isinstance(y, Instr)
                d = y.ops[0]
                lst.insert(j + 1, Instr("UIADD3", (), (d, d, Imm(box), URZ)))
            return f"after line {j + 1}: the TMA load's K coordinate moves one box ({box} elements)"
    raise FaultDoesNotApply("box-off-by-one: the program has no TMA load whose K coordinate it sets")


def _no_fence(named: list[Line], col: list[Line], arch: str) -> str:
    ks = [k for k, i in _instrs(named) if i.name == "FENCE" and "ASYNC" in i.mods and ("S" in i.mods or "G" in i.mods)]
    if not ks:
        raise FaultDoesNotApply("no-proxy-fence: the program has no proxy fence (nothing it writes through the generic "
                                "proxy is read by the copy engine or the tensor core; its epilogue stores C from registers)")
    for k in reversed(ks):
        del named[k], col[k]
    return f"dropped {len(ks)} proxy fence(s) (FENCE.VIEW.ASYNC)"


_GLOBAL = ("UTMALDG", "UTMASTG", "UTMAREDG", "UBLKCP", "LDG", "STG")


def _reaches_global(i: Instr) -> bool:
    """Whether an instruction reads or writes global memory (a bulk copy between CTAs' shared
    memories, UBLKCP.S.S, does not)."""
    return i.name in _GLOBAL and not (i.name == "UBLKCP" and i.mods[:2] == ("S", "S"))


def _global_before_wait(named: list[Line], col: list[Line], arch: str) -> str:
    ins = _instrs(named)
    acq = [k for k, i in ins if i.name == "ACQBULK"]
    firstg = next((k for k, i in ins if _reaches_global(i) and (not acq or k > acq[0])), None)
    if firstg is None:
        raise FaultDoesNotApply("global-before-wait: the program reaches no global memory")
    if acq:
        k = acq[0]
        for lst in (named, col):
            x = lst.pop(k)
            lst.insert(firstg, x)  # after the access (indices shifted by the pop)
        return f"the dependent-launch wait (line {k + 1}) moves after line {firstg + 1} ({named[firstg - 1]})".replace("  ", " ")
    acqi = Instr("ACQBULK")
    for lst in (named, col):
        lst.insert(firstg + 1, acqi)
    return f"a dependent-launch wait (ACQBULK) added after the first global access, line {firstg + 1}"


def _read_before_commit(named: list[Line], col: list[Line], arch: str) -> str:
    ins = _instrs(named)
    for k, i in ins:  # sm_90a: the last wgmma wait before the accumulator is stored
        if i.name == "WARPGROUP" and "DEPBAR" in i.mods and isinstance(i.ops[1], Imm) and i.ops[1].value == 0:
            named[k] = attrs.evolve(i, ops=(i.ops[0], Imm(1)))
            y = col[k]
            assert isinstance(y, Instr)
            col[k] = attrs.evolve(y, ops=(y.ops[0], Imm(1)))
            return f"line {k + 1}: WARPGROUP.DEPBAR.LE gsb0, 0x0 becomes 0x1 (the last group's accumulator is stored unwaited)"
    for k, i in ins:  # sm_100a: the epilogue's wait on the accumulator's full barrier
        if i.name == "SYNCS" and "PHASECHK" in i.mods and i.notes and i.notes[0].buffer.startswith("acc") \
                and str(i.notes[0].coords[0]) == "0":
            nxt = k + 1
            drop = [k]
            while nxt < len(named) and _opname(named[nxt]) in ("NANOSLEEP", "BRA"):
                drop.append(nxt)
                if _opname(named[nxt]) == "BRA":
                    break
                nxt += 1
            for j in reversed(drop):
                del named[j], col[j]
            return f"dropped the wait on the accumulator's full barrier (line {k + 1})"
    raise FaultDoesNotApply("read-before-commit: the program has no wait that orders an accumulator read")


def _tmem_overlap(named_k: Kernel, col_k: Kernel) -> tuple[Kernel, Kernel, str]:
    if named_k.header.sm != "sm_100a":
        raise FaultDoesNotApply("tmem-overlap: sm_90a keeps accumulators in registers, not tensor memory")
    bufs = list(named_k.header.buffers)
    for bi, b in enumerate(bufs):
        if b.space != "tmem":
            continue
        lay = b.layout
        if not isinstance(lay, Layout):
            raise WarpyError(f"{b.name}: a tensor-memory buffer with a swizzled layout")
        shape = lay.shape if isinstance(lay.shape, tuple) else (lay.shape,)
        stride = lay.stride if isinstance(lay.stride, tuple) else (lay.stride,)
        if len(shape) < 3:
            continue
        stages, old = shape[0], stride[0]
        if not isinstance(stages, int) or not isinstance(old, int):
            raise WarpyError(f"{b.name}: a nested stage mode")
        if stages < 2:
            continue
        new = old // 2
        nb = attrs.evolve(b, layout=Layout(shape, (new,) + tuple(stride[1:])))
        bufs[bi] = nb
        hn = attrs.evolve(named_k.header, buffers=tuple(bufs))
        hc = attrs.evolve(col_k.header, buffers=tuple(x if x.name != b.name else nb for x in col_k.header.buffers))
        nl, cl = list(named_k.lines), list(col_k.lines)
        changed = 0
        for k, i in _instrs(nl):
            if _note_buf(i) == b.name and i.name in ("UIMAD", "IMAD") and isinstance(i.ops[2], Imm) and i.ops[2].value == old:
                for lst in (nl, cl):
                    x = lst[k]
                    assert isinstance(x, Instr)
                    ops = list(x.ops)
                    ops[2] = Imm(new)
                    lst[k] = attrs.evolve(x, ops=tuple(ops))
                changed += 1
        if not changed:
            continue
        return (Kernel(hn, tuple(nl)), Kernel(hc, tuple(cl)),
                f"accumulator {b.name}'s stages {old} columns apart become {new}: stage 1 overlaps stage 0")
    raise FaultDoesNotApply("tmem-overlap: the program has one tensor-memory accumulator (nothing to overlap)")


def inject(kind: str, named: Kernel, coloured: Optional[Kernel]) -> tuple[Kernel, Optional[Kernel], str]:
    """The texts with the fault injected, and a one-line note of what changed."""
    if kind not in FAULTS:
        raise WarpyError(f"unknown fault {kind!r} (known: {', '.join(FAULTS)})")
    col = coloured if coloured is not None else named
    if len(named.lines) != len(col.lines):
        raise WarpyError("the named and coloured texts differ in length; inject into one at a time")
    if kind == "tmem-overlap":
        n2, c2, note = _tmem_overlap(named, col)
        return n2, (c2 if coloured is not None else None), note
    nl, cl = list(named.lines), list(col.lines)
    arch = named.header.sm
    if kind == "drop-arrive":
        note = _drop_arrive(nl, cl, arch)
    elif kind == "wrong-tx":
        note = _wrong_tx(nl, cl, arch)
    elif kind == "early-free":
        note = _early_free(nl, cl, arch)
    elif kind == "box-off-by-one":
        note = _box_off(nl, cl, arch, named)
    elif kind == "no-proxy-fence":
        note = _no_fence(nl, cl, arch)
    elif kind == "global-before-wait":
        note = _global_before_wait(nl, cl, arch)
    else:
        note = _read_before_commit(nl, cl, arch)
    n3 = Kernel(named.header, tuple(nl))
    c3 = Kernel(col.header, tuple(cl)) if coloured is not None else None
    return n3, c3, note
