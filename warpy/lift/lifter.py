"""SASS text → PTX: each instruction becomes the PTX that asks for the same work.

`lift(text_or_kernel, target=None) -> str` and `build(kernel, target=None) -> Cubin` (lift,
assemble with ptxas, then check the disassembly). The rules live in `warpy.lift.families`, one
module per opcode family of `warpy.isa.families`, keyed like the isa's records.

Registers: `R`/`UR` → `.b32` (`%r12`/`%ur4` coloured, `%rn3`/`%urn1` named), `P`/`UP` → `.pred`;
vectors are consecutive registers, 64-bit pairs go through `mov.b64 {lo, hi}`; `RZ`/`URZ` read 0,
`PT`/`UPT` read `%pt`. The header becomes the entry: `.version 8.7`, `.target`, `.extern .shared
.align 1024 .b8 dsmem[]`, one `.param .align 64 .b8 NAME[128]` per `.tmap` then the `.param`s,
`.maxntid`, `.maxnreg` (or `.minnctapersm 1` when `USETMAXREG` is used without one, so ptxas knows
the register count at entry), `.reqnctapercluster` for clusters.

The known differences between the two sides, handled here:

| SASS | PTX |
|---|---|
| single-issue (`UTMALDG/UTMASTG/UTMAREDG/UTMAPF/UBLKCP/UTMACMDFLUSH`, `UTCHMMA`, `UTCBAR`, `UGETNEXTWORKID`) | `@%pe` + the instruction; `%pe` = `elect.sync` over the entry's active mask, once per warp at entry |
| `@UP` on a single-issue instruction | `@!UP bra skip; @%pe ...; skip:` (a branch around it) |
| `@P` on a single-issue instruction, P written by the program's `ELECT` | `@P ...`: the program's elected lane issues it (not for the bulk-group stores/commit, which stay with the wait on `%pe`) |
| a single-issue instruction after `@!P BRA L` (P from `ELECT`), before `L:` | the instruction unpredicated: only that lane runs there |
| `@P` on a single-issue instruction, any other P | the warp issues it when P holds in some lane: `vote.any`, then the same branch |
| `UTCATOMSWS[.2CTA].FIND_AND_SET.ALIGN [slot], n` | one `tcgen05.alloc.cta_group::G.sync.aligned.shared::cta.b32 [slot], n` on every lane (PTX: warp-collective); the program reads [slot] back with its own LDS |
| `UTCATOMSWS.AND`, `UVIRTCOUNT.DEALLOC.SMPOOL` | `tcgen05.dealloc` / `tcgen05.relinquish_alloc_permit` on every lane |
| `TRYWAIT done, ...` then `@!done NANOSLEEP[.SYNCS] ns` | `mbarrier.try_wait.parity ... , ns` (the suspend-time hint); the sleep line is absorbed |
| `PREEXIT` / `ACQBULK` | `griddepcontrol.launch_dependents` / `griddepcontrol.wait` |
| `DEPBAR.LE SB0, n` | `@%pe cp.async.bulk.wait_group.read n` (bulk groups belong to the issuing lane) + `bar.warp.sync` so the warp waits as the SASS scoreboard wait does |
| `SYNCS.EXCH.64 URZ, [bar], init` | `mbarrier.init [bar], 0x100000 - ((init.lo >> 1) & 0xFFFFF)` (the count the packed word holds) |
| `SYNCS.PHASECHK.TRANS64.TRYWAIT p, [bar], par` | `mbarrier.try_wait.parity p, [bar], par >> 31` |
| `SYNCS.ARRIVE.TRANS64.RED.A1T0` | `mbarrier.arrive.shared::cluster` (remote arrive; not `.release.cluster`, for which ptxas adds `MEMBAR.ALL.GPU` and error barriers the text does not have) |
| `LDC/ULDC/LDCU c[0x0][name or offset]` | `ld.param` of that parameter; the memory descriptor word (0x208 / 0x358) reads as 0 |
| `UMOV d, `(dsmem)`` | `mov.u32 d, dsmem` |
| `PRMT d, rank, 0x654, addr` | `prmt.b32` (what ptxas emits for `mapa`: `(rank << 24) | addr`) |
| `UBLKCP.S.S [dst, bar], [src], size` (`dst`, `bar` mapa'd) | `cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [dst], [src], size, [bar]`; the text's `size` is bytes, for every `UBLKCP` (ptxas's SASS holds size / 16) |
| `HGMMA ... RZ, !UPT` | `wgmma ... scale-d 0`; imm-trans-a/b 1 for `gdesc[..].tnspA`/`.tnspB` (MN-major), else 0 |
| kernel naming both `.cta_group`s | refused: `kernel K names both cta_groups (...); PTX allows one .cta_group per kernel` |

Elected at entry means one lane per warp: a single-issue instruction must be reached by that
lane, i.e. by the whole warp, as warpy programs issue them, or from one of the two program-elected
forms above. A region entered by some other lane subset that excludes the entry's lane would
skip the work silently.

The disassembly check (`expected_opcodes`) asks for every instruction whose record says ptxas
emits it and does not re-select it at will (`Opcode.reselected`: ALU, compares, moves, branches,
plain loads and stores), spelled as the record says nvdisasm prints it (`Opcode.spelling`: fp16
`HGMMA` has no `.F16`; the pair's dealloc prints without `.2CTA`). Which records are single-issue,
warp-collective, carry a `.cta_group` or join the bulk async-group is likewise read off the records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional, Union

from warpy.errors import WarpyError
from warpy.isa.families import ALL, defs_uses, lookup, record
from warpy.isa.instr import Comment, Instr, Label
from warpy.isa.operands import Imm, LabelRef, P, UP
from warpy.isa.text import Kernel, parse
from warpy.target import target as target_of
from warpy.lift.families import LIFT_RULES
from warpy.lift.families._ctx import LiftContext, ident
from warpy.lift.families.sync import lift_trywait

if TYPE_CHECKING:
    from warpy.lift.ptxas import Cubin

#: `.version` of the emitted PTX: PTX ISA 8.7 (CUDA 12.8) has every sm_90a and sm_100a feature
#: the rules use, and both ptxas 12.8+/12.9 and CUDA 13.0's ptxas accept it.
PTX_VERSION = "8.7"

Program = object  # anything with .kernel() -> Kernel (warpy.isa.program.Program)


def as_kernel(x: Union[str, Kernel, Program]) -> Kernel:
    if isinstance(x, Kernel):
        return x
    if isinstance(x, str):
        return parse(x)
    k = getattr(x, "kernel", None)
    if callable(k):
        got = k()
        if isinstance(got, Kernel):
            return got
    raise WarpyError(f"lift takes SASS text, a parsed Kernel or a Program, not {type(x).__name__}")


def cta_group(kernel: Kernel) -> int:
    """1 or 2: the `.cta_group` the kernel's tcgen05 instructions name (refusing a kernel naming both)."""
    seen: dict[int, str] = {}
    for ln in kernel.lines:
        if not isinstance(ln, Instr):
            continue
        rec, _ = lookup(ln.name, ln.mods)
        if rec.cta_group:
            g = 2 if "2CTA" in ln.mods else 1
            seen.setdefault(g, ln.mnemonic)
    if len(seen) == 2:
        raise WarpyError(
            f"kernel {kernel.header.kernel} names both cta_groups ({seen[1]} and {seen[2]}); PTX allows one .cta_group per kernel"
        )
    return next(iter(seen), 1)


def _check_target(kernel: Kernel, target: str) -> None:
    target_of(target)
    for ln in kernel.lines:
        if isinstance(ln, Instr):
            rec, _ = lookup(ln.name, ln.mods)
            if target not in rec.archs:
                raise WarpyError(f"{ln.mnemonic} is not an instruction of {target} (only {', '.join(sorted(rec.archs))})")


def _is_sleep_of(nxt: object, done: object) -> bool:
    return (
        isinstance(nxt, Instr) and record(nxt).sem == "sleep" and isinstance(nxt.guard, P) and isinstance(done, P)
        and nxt.guard.neg and nxt.guard.name == done.name and not done.neg
    )


def _lift_one(c: LiftContext, i: Instr, rest: tuple[str, ...], hint: Optional[str] = None) -> None:
    rec, _ = lookup(i.name, i.mods)
    if hint is not None:
        lift_trywait(c, i, rest, hint)
    else:
        LIFT_RULES[rec](c, i, rest)


def _elect_regions(lines: list[Union[Instr, Label, Comment]]) -> tuple[dict[int, str], set[int]]:
    """Where the lane of a single-issue instruction is known from the program's own `ELECT`:
    (line index -> the elected predicate guarding it) and the line indices inside a region that
    only the elected lane runs (`@!p BRA L` ... `L:` with p written by ELECT and not since)."""
    elected: set[str] = set()
    guarded: dict[int, str] = {}
    one_lane: set[int] = set()
    until: list[str] = []
    labels_ahead = {ln.name: n for n, ln in enumerate(lines) if isinstance(ln, Label)}
    for n, ln in enumerate(lines):
        if isinstance(ln, Label):
            while ln.name in until:
                until.remove(ln.name)
            continue
        if not isinstance(ln, Instr):
            continue
        if until:
            one_lane.add(n)
        g = ln.guard
        if isinstance(g, P) and not g.neg and g.name in elected:
            guarded[n] = g.name
        rec = record(ln)
        if (rec.sem == "branch" and isinstance(g, P) and g.neg and g.name in elected and len(ln.ops) == 1
                and isinstance(ln.ops[0], LabelRef) and labels_ahead.get(ln.ops[0].name, -1) > n):
            until.append(ln.ops[0].name)
        defs, _ = defs_uses(ln)
        for d in defs:
            if isinstance(d, P):
                elected.discard(d.name)
        if rec.sem == "elect" and isinstance(ln.ops[0], P):
            elected.add(ln.ops[0].name)
    return guarded, one_lane


def _body(c: LiftContext) -> None:
    lines = list(c.kernel.lines)
    elect_guarded, one_lane = _elect_regions(lines)
    k = 0
    while k < len(lines):
        ln = lines[k]
        k += 1
        if isinstance(ln, Label):
            c.place_label(ident(ln.name))
            continue
        if isinstance(ln, Comment):
            c.lines.append(f"    // {ln.text}")
            continue
        assert isinstance(ln, Instr)
        rec, rest = lookup(ln.name, ln.mods)
        c.where = f"{ln.mnemonic}"
        c.lines.append(f"    // {str(ln).strip()}")
        hint = None
        if rec.sem == "barrier-wait" and "TRYWAIT" in rest and k < len(lines) and _is_sleep_of(lines[k], ln.ops[0]):
            sleep = lines[k]
            assert isinstance(sleep, Instr)
            ns = sleep.ops[0]
            hint = str(ns.value) if isinstance(ns, Imm) else c.src(ns)
            c.lines.append(f"    // {str(sleep).strip()}  (the try-wait's suspend-time hint)")
            k += 1
        single = rec.single_issue and not rec.warp_collective
        g = ln.guard
        if g is not None and c.is_true(g):
            g = None
        if g is not None and c.is_false(g):
            c.lines.append("    // (never: guarded by !PT)")
            continue
        c.issuer = None
        if single and (k - 1) in one_lane:
            c.issuer = ""  # only the program's elected lane runs here: it issues
            single = False
        elif single and (k - 1) in elect_guarded and not rec.bulk_group:
            assert isinstance(g, P)
            c.issuer = c.pred_neg(g)  # guarded by the program's ELECT: that lane issues
            _lift_one(c, ln, rest, hint)
            continue
        if g is None:
            _lift_one(c, ln, rest, hint)
            continue
        if single:
            # a branch around the instruction (for a per-lane guard: taken when no lane holds it)
            skip = c.label("skip")
            if isinstance(g, P):
                m = c.tmp()
                any_ = c.tmp("tp")
                c.emit(f"activemask.b32 {m}")
                c.emit(f"vote.sync.any.pred {any_}, {c.pred_neg(g)}, {m}")
                c.emit(f"@!{any_} bra {skip}")
            else:
                c.emit(f"@{_negate(c.pred_neg(g))} bra {skip}")
            _lift_one(c, ln, rest, hint)
            c.place_label(skip)
            continue
        # per-lane predication: one line takes the guard, several go behind a branch
        start = len(c.lines)
        _lift_one(c, ln, rest, hint)
        produced = [x for x in c.lines[start:] if not x.lstrip().startswith("//")]
        if len(produced) == 1 and not produced[0].lstrip().startswith("@"):
            idx = c.lines.index(produced[0], start)
            c.lines[idx] = f"    @{c.pred_neg(g)} " + produced[0].lstrip()
        else:
            body = c.lines[start:]
            del c.lines[start:]
            skip = c.label("skip")
            c.emit(f"@{_negate(c.pred_neg(g))} bra {skip}")
            c.lines.extend(body)
            c.place_label(skip)
    c.where = ""


def _negate(p: str) -> str:
    if p == "%pt":
        return "%pf"
    if p == "%pf":
        return "%pt"
    return p[1:] if p.startswith("!") else "!" + p


def lift(x: Union[str, Kernel, Program], target: Optional[str] = None) -> str:
    """The PTX of a kernel (SASS text, a parsed Kernel, or a Program), for its `.sm` or `target`."""
    kernel = as_kernel(x)
    h = kernel.header
    target = target or h.sm
    _check_target(kernel, target)
    c = LiftContext(kernel, target)
    c.cta_group = cta_group(kernel)
    _body(c)

    out = [f"// warpy lift: kernel {h.kernel} for {target}", f".version {PTX_VERSION}", f".target {target}",
           ".address_size 64", "", ".extern .shared .align 1024 .b8 dsmem[];", ""]
    params = []
    for name, typ in h.kernel_params():
        if typ == "tmap":
            params.append(f"    .param .align 64 .b8 {ident(name)}[128]")
        else:
            params.append(f"    .param .{typ} {ident(name)}")
    out.append(f".visible .entry {h.kernel}(" + ("\n" + ",\n".join(params) + "\n" if params else "") + ")")
    out.append(f".maxntid {h.threads}, 1, 1")
    if h.maxnreg is not None:
        out.append(f".maxnreg {h.maxnreg}")
    elif any(isinstance(x, Instr) and record(x).sem == "setmaxnreg" for x in kernel.lines):
        # setmaxnreg needs the register count at entry: one CTA per SM fixes it (65536 / threads)
        out.append(".minnctapersm 1")
    if tuple(h.cluster) != (1, 1, 1):
        out.append(f".reqnctapercluster {h.cluster[0]}, {h.cluster[1]}, {h.cluster[2]}")
    out.append("{")
    for kind, pre in (("R", "r"), ("UR", "ur")):
        if c.phys_max[kind] >= 0:
            out.append(f"    .reg .b32 %{pre}<{c.phys_max[kind] + 1}>;")
        if c.named_count[kind]:
            out.append(f"    .reg .b32 %{pre}n<{c.named_count[kind]}>;")
    for kind, pre in (("P", "p"), ("UP", "up")):
        if c.phys_max[kind] >= 0:
            out.append(f"    .reg .pred %{pre}<{c.phys_max[kind] + 1}>;")
        if c.named_count[kind]:
            out.append(f"    .reg .pred %{pre}n<{c.named_count[kind]}>;")
    for pre, ty in (("t", "b32"), ("td", "b64"), ("tp", "pred"), ("tq", "b128"), ("th", "b16")):
        if c.temp_count[pre]:
            out.append(f"    .reg .{ty} %{pre}<{c.temp_count[pre]}>;")
    out.append("    .reg .b32 %tz;")
    out.append("    .reg .pred %pt, %pf, %pe;")
    if c.tmaps_used:
        out.append(f"    .reg .b64 %tm<{len(c.tmaps_used)}>;")
    out.append("    setp.eq.u32 %pt, 0, 0;")
    out.append("    setp.ne.u32 %pf, 0, 0;")
    if c.uses_elect:
        out.append("    // single-issue instructions run on the lane elected here, once per warp")
        out.append("    activemask.b32 %tz;")
        out.append("    elect.sync _|%pe, %tz;")
    for name, reg in c.tmaps_used.items():
        out.append(f"    mov.b64 {reg}, {ident(name)};")
        out.append(f"    cvta.param.u64 {reg}, {reg};")
    out.append("    // --- the program ---")
    out.extend(c.lines)
    out.append("    exit;")
    out.append("}")
    return "\n".join(out) + "\n"


def expected_opcodes(kernel: Kernel, target: Optional[str] = None) -> list[str]:
    """The SASS spellings the disassembly must show: every instruction of the kernel whose record
    says ptxas emits an instruction of that name, outside the freely re-selected ALU/control classes.
    Spellings are the text's mnemonic, except where ptxas prints it differently."""
    out: list[str] = []
    for ln in kernel.lines:
        if not isinstance(ln, Instr):
            continue
        rec = record(ln)
        if not rec.ptxas_emits or rec.reselected:
            continue
        spelling = rec.disasm_spelling((ln.name,) + ln.mods)
        if spelling not in out:
            out.append(spelling)
    return out


def build(x: Union[str, Kernel, Program], target: Optional[str] = None, *, check: bool = True,
          allow: Iterable[str] = (), flags: Iterable[str] = ()) -> "Cubin":
    """Lift, assemble with ptxas (warnings that matter fail unless allowed) and, with `check`, run
    the disassembly check: every opcode of `expected_opcodes` must appear in the cubin."""
    from warpy.lift.disasm import check_opcodes
    from warpy.lift.ptxas import assemble

    kernel = as_kernel(x)
    target = target or kernel.header.sm
    ptx = lift(kernel, target)
    cubin = assemble(ptx, target, tuple(flags), tuple(allow))
    if check:
        want = expected_opcodes(kernel, target)
        if want:
            check_opcodes(want, cubin, kernel.header.kernel)
    return cubin


def read_text_file(path: str) -> str:
    """A SASS text from `path` (`-`: standard input), refusing in one line what cannot be read or
    is not text."""
    import sys
    from pathlib import Path

    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as e:
        raise WarpyError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise WarpyError(f"{'standard input' if path == '-' else path} is not a text file (a SASS text is UTF-8)") from None


class TextError(SyntaxError):
    """A SASS text that does not parse: `FILE:line:col: message`."""


def lift_file(path: str, out: Optional[str] = None, target: Optional[str] = None, check: bool = True) -> Optional[str]:
    """`warpy lift`: the PTX (out None), or write OUT.ptx / assemble OUT.cubin; returns what to print."""
    from pathlib import Path

    from warpy.isa.text import ParseError

    text = read_text_file(path)
    try:
        kernel = parse(text)
    except ParseError as e:
        raise TextError(f"{path}:{e.line}:{e.col}: {str(e).split(': ', 1)[1]}") from None
    if out is None:
        return lift(kernel, target)
    if out.endswith(".ptx"):
        ptx = lift(kernel, target)
        Path(out).write_text(ptx)
        return f"wrote {out} ({len(ptx.splitlines())} lines of PTX for {target or kernel.header.sm})"
    if out.endswith(".cubin"):
        cubin = build(kernel, target, check=check)
        Path(out).write_bytes(cubin.data)
        r = cubin.resource(kernel.header.kernel)
        checked = f", disassembly check passed ({len(expected_opcodes(kernel))} opcodes)" if check else ""
        return (f"wrote {out} for {cubin.arch}: {r.registers} registers, {r.spill_stores + r.spill_loads} spill bytes"
                f"{checked}")
    raise WarpyError(f"output {out} must end in .ptx or .cubin")


__all__ = ["lift", "build", "expected_opcodes", "cta_group", "as_kernel", "PTX_VERSION", "ALL"]
