"""The disassembly cross-check: disassemble a cubin and compare its opcodes with the program's.

The disassembler is found in this order: `$WARPY_NVDISASM` (nvdisasm), the `nvidia-cuda-nvdisasm`
wheel (`site-packages/nvidia/cu13/bin/nvdisasm`, or `nvidia/cuda_nvdisasm/bin/nvdisasm` for CUDA 12
wheels), `nvdisasm` in `$CUDA_HOME/bin` then on `PATH`, and last `cuobjdump` (`$CUDA_HOME/bin`, `PATH`)
whose `-sass` listing carries the same instructions without labels.

Opcode matching rule (`opcode_matches`): an expected spelling is a base opcode followed by zero or
more dot-separated modifiers (`HGMMA`, `UTCHMMA.2CTA`, `SYNCS.ARRIVE.TRANS64.A1T0`). An emitted
instruction matches when its base is the same (case-sensitive, SASS spelling) and every expected
modifier occurs among the emitted modifiers, in any order (a multiset inclusion). So `UTCBAR` matches
`UTCBAR.2CTA.MULTICAST`, `UTCBAR.MULTICAST.2CTA` matches it too, and `UTCBAR.2CTA` does not match a
plain `UTCBAR`. The guard predicate and the operands never take part.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import zlib
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import attrs

from warpy.cache import atomic_write, cache_root
from warpy.errors import WarpyError
from warpy.memo import forgettable
from warpy.lift.ptxas import Cubin


@attrs.frozen
class SassInstruction:
    """One disassembled instruction: byte offset in its function, opcode with its modifiers
    (`SYNCS.ARRIVE.TRANS64.A1T0`), guard predicate without the `@` (`!P0`, `UP1`, or None) and the
    operand text as the disassembler printed it (without the trailing `;`)."""

    offset: int
    opcode: str
    guard: str | None
    operands: str

    @property
    def base(self) -> str:
        return self.opcode.split(".", 1)[0]

    @property
    def modifiers(self) -> tuple[str, ...]:
        return tuple(self.opcode.split(".")[1:])

    def text(self) -> str:
        g = f"@{self.guard} " if self.guard else ""
        ops = f" {self.operands}" if self.operands else ""
        return f"{g}{self.opcode}{ops}"


@attrs.frozen
class Loop:
    """A backward branch and the instructions from its target up to and including the branch."""

    label: str | None  # the target's label when the disassembler printed one
    start: int  # byte offset of the first instruction of the body (the branch target)
    branch: int  # byte offset of the backward branch
    instructions: tuple[SassInstruction, ...]

    @property
    def count(self) -> int:
        return len(self.instructions)

    def opcode_counts(self) -> Counter[str]:
        return Counter(i.opcode for i in self.instructions)


@attrs.frozen
class KernelSass:
    """The instructions of one function, with its labels (name → byte offset)."""

    name: str
    instructions: tuple[SassInstruction, ...]
    labels: tuple[tuple[str, int], ...] = ()

    def label_offset(self, label: str) -> int:
        for name, off in self.labels:
            if name == label:
                return off
        raise WarpyError(f"no label {label!r} in kernel {self.name!r}")

    def opcodes(self) -> Counter[str]:
        return Counter(i.opcode for i in self.instructions)

    def branch_target(self, ins: SassInstruction) -> int | None:
        """Byte offset a BRA jumps to, from a label operand (nvdisasm) or an address (cuobjdump)."""
        if ins.base != "BRA":
            return None
        m = re.search(r"`\((\.?[\w.$]+)\)", ins.operands)
        if m:
            try:
                return self.label_offset(m.group(1))
            except WarpyError:
                return None
        m = re.search(r"(?:^|[\s,])(0x[0-9a-fA-F]+)\s*$", ins.operands)
        return int(m.group(1), 16) if m else None

    def loops(self) -> tuple[Loop, ...]:
        """Every backward branch with its body, in program order of the branch. An unconditional
        branch to itself (the trap loop ptxas puts after EXIT) is not a loop body and is skipped."""
        by_offset = {i.offset: k for k, i in enumerate(self.instructions)}
        label_at = {off: name for name, off in self.labels}
        out: list[Loop] = []
        for k, ins in enumerate(self.instructions):
            target = self.branch_target(ins)
            if target is None or target > ins.offset or target not in by_offset:
                continue
            if target == ins.offset and ins.guard is None:
                continue
            body = self.instructions[by_offset[target] : k + 1]
            out.append(Loop(label=label_at.get(target), start=target, branch=ins.offset, instructions=body))
        return tuple(out)


MMA_OPCODES = ("HGMMA", "UTCHMMA", "UTCQMMA", "QGMMA")


def loop_instruction_count(kernel: KernelSass, label: str | None = None,
                           holding: tuple[str, ...] | None = None) -> int:
    """Instructions in a loop body: the loop whose head is `label`; or the innermost loop holding
    an instruction of one of the opcodes `holding` (e.g. `MMA_OPCODES`: the main loop); or else the
    largest loop of the kernel. Raises when there is no such loop."""
    loops = kernel.loops()
    if holding is not None:
        loops = tuple(lp for lp in loops if any(i.opcode.split(".")[0] in holding for i in lp.instructions))
        if not loops:
            raise WarpyError(f"no loop of kernel {kernel.name!r} holds {'/'.join(holding)}")
        return min(lp.count for lp in loops)
    if label is not None:
        loops = tuple(lp for lp in loops if lp.label == label)
        if not loops:
            raise WarpyError(f"no backward branch to label {label!r} in kernel {kernel.name!r}")
    if not loops:
        raise WarpyError(f"kernel {kernel.name!r} has no loop")
    return max(lp.count for lp in loops)


@attrs.frozen
class Disassembly:
    tool: str  # the disassembler's path
    kernels: tuple[KernelSass, ...]

    def kernel(self, name: str | None = None) -> KernelSass:
        if name is None:
            if len(self.kernels) != 1:
                names = ", ".join(k.name for k in self.kernels)
                raise WarpyError(f"the cubin has {len(self.kernels)} functions ({names}); name one")
            return self.kernels[0]
        for k in self.kernels:
            if k.name == name:
                return k
        raise WarpyError(f"no function {name!r} in the disassembly (functions: {', '.join(k.name for k in self.kernels)})")

    def opcodes(self) -> Counter[str]:
        c: Counter[str] = Counter()
        for k in self.kernels:
            c.update(k.opcodes())
        return c


# ---------------------------------------------------------------------------------------------
# Parsing

_RE_SECTION = re.compile(r"^\s*\.section\s+\.text\.([^,\s]+)")
_RE_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_RE_LABEL = re.compile(r"^\s*(\.?[A-Za-z_$][\w.$]*):\s*$")
_RE_INSTR = re.compile(
    r"^\s*/\*([0-9a-fA-F]{4,})\*/\s+"  # offset
    r"(?:\{\s*)?"  # a dual-issue brace on some older architectures
    r"(?:@(!?U?P[0-9T]+)\s+)?"  # guard
    r"([A-Z][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)"  # opcode with modifiers
    r"\s*([^;]*?)\s*;"  # operands
)


def parse_disassembly(text: str) -> tuple[KernelSass, ...]:
    """Parse `nvdisasm -c` or `cuobjdump -sass` text into one KernelSass per function."""
    kernels: list[KernelSass] = []
    name: str | None = None
    instrs: list[SassInstruction] = []
    labels: list[tuple[str, int]] = []
    pending: list[str] = []

    def flush() -> None:
        if name is not None:
            kernels.append(KernelSass(name=name, instructions=tuple(instrs), labels=tuple(labels)))

    for line in text.splitlines():
        m = _RE_SECTION.match(line) or _RE_FUNCTION.match(line)
        if m:
            flush()
            name, instrs, labels, pending = m.group(1), [], [], []
            continue
        if name is None:
            continue
        m = _RE_LABEL.match(line)
        if m:
            if m.group(1) != name and not m.group(1).startswith(".text."):
                pending.append(m.group(1))
            continue
        m = _RE_INSTR.match(line)
        if m:
            off = int(m.group(1), 16)
            labels.extend((lb, off) for lb in pending)
            pending = []
            instrs.append(SassInstruction(offset=off, guard=m.group(2), opcode=m.group(3), operands=m.group(4)))
    flush()
    return tuple(kernels)


# ---------------------------------------------------------------------------------------------
# Running the disassembler


@attrs.frozen
class Disassembler:
    path: str
    kind: str  # "nvdisasm" | "cuobjdump"
    found_by: str


def _wheel_nvdisasm() -> Path | None:
    try:
        import nvidia  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        for sub in ("cu13/bin/nvdisasm", "cuda_nvdisasm/bin/nvdisasm"):
            p = Path(root) / sub
            if p.is_file():
                return p
    return None


def find_disassembler() -> Disassembler:
    env = os.environ.get("WARPY_NVDISASM")
    if env:
        if not (Path(env).is_file() and os.access(env, os.X_OK)):
            raise WarpyError(f"WARPY_NVDISASM={env} is not an executable file")
        return Disassembler(env, "nvdisasm", "WARPY_NVDISASM")
    wheel = _wheel_nvdisasm()
    if wheel is not None and os.access(wheel, os.X_OK):
        return Disassembler(str(wheel), "nvdisasm", "wheel")
    home = os.environ.get("CUDA_HOME")
    for tool in ("nvdisasm", "cuobjdump"):
        if home:
            p = Path(home) / "bin" / tool
            if p.is_file() and os.access(p, os.X_OK):
                return Disassembler(str(p), tool, "CUDA_HOME")
        w = shutil.which(tool)
        if w:
            return Disassembler(w, tool, "PATH")
    raise WarpyError(
        "no disassembler found: install nvidia-cuda-nvdisasm, set WARPY_NVDISASM or CUDA_HOME, "
        "or put nvdisasm/cuobjdump on PATH"
    )


def disassemble(cubin: Cubin | bytes, tool: Disassembler | None = None) -> Disassembly:
    """Disassemble a cubin (a `Cubin` or its bytes) into per-function instruction lists. The same
    bytes by the same tool give the same (frozen) `Disassembly`, kept for the recent cubins of this
    process: building a program checks its disassembly, and callers then read it again."""
    data = cubin.data if isinstance(cubin, Cubin) else bytes(cubin)
    return _disassemble(data, tool or find_disassembler())


@functools.lru_cache(maxsize=32)
def _disassemble(data: bytes, tool: Disassembler) -> Disassembly:
    kernels = parse_disassembly(listing(data, tool))
    if not kernels:
        raise WarpyError(f"{tool.kind} printed no functions for the cubin")
    return Disassembly(tool=tool.path, kernels=kernels)


forgettable(_disassemble.cache_clear)


def listing(data: bytes, tool: Disassembler | None = None) -> str:
    """What the disassembler prints for a cubin's bytes (`nvdisasm -c`, `cuobjdump -sass`), read
    from the disk cache where an earlier run kept it."""
    tool = tool or find_disassembler()
    key = _disk_key(data, tool)
    text = _disk_read(key) if key is not None else None
    if text is None:
        text = _run_tool(data, tool)
        if key is not None:
            _disk_write(key, text)
    return text


def _run_tool(data: bytes, tool: Disassembler) -> str:
    with tempfile.TemporaryDirectory(prefix="warpy-disasm-") as d:
        path = Path(d) / "kernel.cubin"
        path.write_bytes(data)
        cmd = [tool.path, "-c", str(path)] if tool.kind == "nvdisasm" else [tool.path, "-sass", str(path)]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except OSError as e:
            raise WarpyError(f"{tool.kind} at {tool.path} cannot run: {e.strerror or e}") from None
    if r.returncode != 0:
        err = next((ln for ln in r.stderr.splitlines() if "error" in ln.lower()), r.stderr.strip()[:200])
        raise WarpyError(f"{tool.kind} failed on the cubin: {err}")
    return r.stdout


# The disk cache of listings (`$WARPY_CACHE/disasm/`): the tool's output for a cubin, keyed by a hash
# of the cubin's bytes, the tool's kind and the tool's own bytes (so a new venv's copy of the same
# nvdisasm hits, and another build of it misses). Only a run that succeeded is kept; an entry is
# its magic line, the listing's length and hash (a damaged entry is a miss), then the listing,
# compressed. Each run of nvdisasm costs ~0.5 s whatever the cubin.

_DISK_MAGIC = b"WARPYSASS1\n"


def disk_cache_dir() -> Path:
    return cache_root() / "disasm"


@functools.lru_cache(maxsize=8)
def _tool_digest(path: str, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _disk_key(data: bytes, tool: Disassembler) -> str | None:
    """The entry's name, or None where the tool cannot be read (then nothing is cached)."""
    try:
        st = os.stat(tool.path)
        digest = _tool_digest(tool.path, st.st_size, st.st_mtime_ns)
    except OSError:
        return None
    h = hashlib.sha256()
    for part in (tool.kind.encode(), digest.encode(), data):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def _disk_read(key: str) -> str | None:
    try:
        raw = (disk_cache_dir() / f"{key}.sass").read_bytes()
    except OSError:
        return None
    if not raw.startswith(_DISK_MAGIC):
        return None
    try:
        head_end = raw.index(b"\n", len(_DISK_MAGIC))
        meta = json.loads(raw[len(_DISK_MAGIC):head_end])
        text = zlib.decompress(raw[head_end + 1:])
        if len(text) != meta["bytes"] or hashlib.sha256(text).hexdigest() != meta["sha256"]:
            return None
        return text.decode()
    except (ValueError, KeyError, TypeError, zlib.error, UnicodeDecodeError):
        return None


def _disk_write(key: str, text: str) -> None:
    b = text.encode()
    meta = json.dumps({"bytes": len(b), "sha256": hashlib.sha256(b).hexdigest()}).encode()
    atomic_write(disk_cache_dir() / f"{key}.sass", _DISK_MAGIC + meta + b"\n" + zlib.compress(b, 6))


# ---------------------------------------------------------------------------------------------
# The opcode check


def _split(spelling: str) -> tuple[str, Counter[str]]:
    parts = spelling.strip().split(".")
    if not parts[0] or any(not p for p in parts):
        raise WarpyError(f"{spelling!r} is not an opcode spelling (BASE or BASE.MOD.MOD...)")
    return parts[0], Counter(parts[1:])


def opcode_matches(expected: str, emitted: str) -> bool:
    """Same base, and the expected modifiers a sub-multiset of the emitted ones (any order)."""
    eb, em = _split(expected)
    gb, gm = _split(emitted)
    return eb == gb and not (em - gm)


@attrs.frozen
class OpcodeCheck:
    """Which expected spellings the disassembly holds. found maps each present spelling to the
    emitted opcodes it matched; missing lists the rest, in the order they were asked for."""

    expected: tuple[str, ...]
    found: tuple[tuple[str, tuple[str, ...]], ...]
    missing: tuple[str, ...]
    kernel: str | None

    @property
    def ok(self) -> bool:
        return not self.missing

    def line(self) -> str:
        where = f" in kernel {self.kernel!r}" if self.kernel else ""
        if self.ok:
            return f"all {len(self.expected)} expected opcodes present{where}"
        return f"missing SASS opcodes{where}: {', '.join(self.missing)}"


def check_opcodes(
    expected: Iterable[str],
    cubin: Cubin | bytes | Disassembly,
    kernel: str | None = None,
    *,
    fail: bool = True,
) -> OpcodeCheck:
    """Check that every expected opcode spelling matches some emitted instruction (see the module
    docstring for the rule), in `kernel` or in any function of the cubin. With `fail` (default), a
    missing spelling raises a one-line WarpyError listing all of them."""
    dis = cubin if isinstance(cubin, Disassembly) else disassemble(cubin)
    emitted = dis.kernel(kernel).opcodes() if kernel is not None else dis.opcodes()
    wanted = tuple(dict.fromkeys(e.strip() for e in expected))
    found: list[tuple[str, tuple[str, ...]]] = []
    missing: list[str] = []
    for e in wanted:
        hits = tuple(sorted(op for op in emitted if opcode_matches(e, op)))
        if hits:
            found.append((e, hits))
        else:
            missing.append(e)
    report = OpcodeCheck(expected=wanted, found=tuple(found), missing=tuple(missing), kernel=kernel)
    if fail and missing:
        raise WarpyError(report.line())
    return report
