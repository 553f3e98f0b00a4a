"""The ptxas driver: find ptxas, assemble PTX into a cubin, cache it, report resources and warnings.

ptxas is found in this order: `$WARPY_PTXAS` (a path to the binary), the `nvidia-cuda-nvcc-cu12`
wheel (`site-packages/nvidia/cuda_nvcc/bin/ptxas`), `$CUDA_HOME/bin/ptxas`, `ptxas` on `PATH`, and
last `/usr/local/cuda/bin/ptxas`.

Cubins are cached in memory and on disk (`$WARPY_CACHE`, else `~/.cache/warpy`, under `cubin/`),
keyed by a hash of (PTX text, the ptxas `--version` text, the extra flags, the target). A cache entry
is one file written to a temporary name and renamed into place, so concurrent processes never see a
half-written entry; the entry keeps ptxas's `-v` log, so a hit reports the same resources and warnings
as the run that filled it.

Warnings that matter fail the assembly by default (`PtxasWarningError`, one line naming the warning):
  - `wgmma-serialized`: ptxas serialised the wgmma pipeline (C7509..C7520 "Potential Performance Loss:
    wgmma.mma_async instructions are serialized ...") — most of the tensor-core speed is lost;
  - `setmaxnreg-ignored`: ptxas dropped a `setmaxnreg` (C7508 and relatives);
  - `spill`: any kernel spills registers to local memory (from the `-v` resource report).
Opt out per kind (or per ptxas code) with `allow=("spill",)` / `allow=("C7510",)`. All other ptxas
warnings are kept in `Cubin.warnings` as kind `other` and never fail.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

from warpy.cache import atomic_write, cache_root
from warpy.errors import WarpyError
from warpy.target import ARCHS


# Searched after PATH, when nothing else gave a ptxas.
DEFAULT_CUDA_HOMES = ("/usr/local/cuda",)

# The kinds of warning that fail an assembly unless allowed.
FAILING_KINDS = ("wgmma-serialized", "setmaxnreg-ignored", "spill")


class PtxasError(WarpyError):
    """ptxas refused the PTX. `log` holds its whole output."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


class PtxasWarningError(WarpyError):
    """ptxas assembled the PTX but warned about something that matters. `cubin` holds the result."""

    def __init__(self, message: str, cubin: "Cubin") -> None:
        super().__init__(message)
        self.cubin = cubin


@attrs.frozen
class Ptxas:
    """One ptxas binary: where it is, how it was found, and its version."""

    path: str
    found_by: str  # "WARPY_PTXAS" | "wheel" | "CUDA_HOME" | "PATH" | "default"
    version: str  # e.g. "12.9.86"
    version_text: str  # the whole `--version` output: part of the cache key

    @property
    def major_minor(self) -> tuple[int, int]:
        parts = self.version.split(".")
        return int(parts[0]), int(parts[1])


@attrs.frozen
class KernelResources:
    """ptxas's `-v` report for one function. shared_bytes is static shared memory only."""

    name: str
    registers: int = 0
    shared_bytes: int = 0
    stack_frame: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    barriers: int = 0
    const0_bytes: int = 0
    is_entry: bool = True

    @property
    def spills(self) -> bool:
        return self.spill_stores > 0 or self.spill_loads > 0


@attrs.frozen
class PtxasWarning:
    """One ptxas warning. code is like "C7510" when ptxas gave one; kernel when it named one."""

    kind: str  # "wgmma-serialized" | "setmaxnreg-ignored" | "spill" | "wgmma-injected" | "other"
    text: str
    code: str | None = None
    kernel: str | None = None

    def line(self) -> str:
        code = f" {self.code}" if self.code else ""
        return f"ptxas warning{code} ({self.kind}): {self.text}"


@attrs.frozen
class Cubin:
    """An assembled cubin with ptxas's resource report and warnings."""

    data: bytes = attrs.field(repr=lambda d: f"<{len(d)} bytes>")
    arch: str
    resources: tuple[KernelResources, ...]
    warnings: tuple[PtxasWarning, ...]
    ptxas_version: str
    log: str = attrs.field(default="", repr=False)
    cache_hit: bool = attrs.field(default=False, eq=False)

    @property
    def kernels(self) -> tuple[str, ...]:
        """Names of the entry functions (kernels), in ptxas's order."""
        return tuple(r.name for r in self.resources if r.is_entry)

    def resource(self, kernel: str) -> KernelResources:
        for r in self.resources:
            if r.name == kernel:
                return r
        raise WarpyError(f"no kernel {kernel!r} in the cubin (kernels: {', '.join(self.kernels) or 'none'})")


# ---------------------------------------------------------------------------------------------
# Discovery


def _wheel_ptxas() -> Path | None:
    """ptxas from the nvidia-cuda-nvcc-cu12 wheel, if installed (nvidia is a namespace package)."""
    try:
        import nvidia  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        p = Path(root) / "cuda_nvcc" / "bin" / "ptxas"
        if p.is_file():
            return p
    return None


def _candidates() -> list[tuple[str, Path | None]]:
    out: list[tuple[str, Path | None]] = []
    env = os.environ.get("WARPY_PTXAS")
    out.append(("WARPY_PTXAS", Path(env) if env else None))
    out.append(("wheel", _wheel_ptxas()))
    home = os.environ.get("CUDA_HOME")
    out.append(("CUDA_HOME", Path(home) / "bin" / "ptxas" if home else None))
    on_path = shutil.which("ptxas")
    out.append(("PATH", Path(on_path) if on_path else None))
    for home in DEFAULT_CUDA_HOMES:  # last resort: the conventional toolkit location
        p = Path(home) / "bin" / "ptxas"
        out.append(("default", p if p.is_file() else None))
    return out


_version_memo: dict[tuple[str, float], str] = {}


def _version_text(path: Path) -> str:
    key = (str(path), path.stat().st_mtime)
    if key not in _version_memo:
        try:
            r = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60)
        except OSError as e:
            raise WarpyError(f"ptxas at {path} cannot run: {e.strerror or e}") from None
        if r.returncode != 0 or "ptxas" not in r.stdout.lower():
            raise WarpyError(f"{path} is not a working ptxas (`--version` gave status {r.returncode})")
        _version_memo[key] = r.stdout.strip()
    return _version_memo[key]


def find_ptxas() -> Ptxas:
    """The ptxas to use, by the discovery order above. `$WARPY_PTXAS`, when set, must be valid."""
    tried: list[str] = []
    for found_by, path in _candidates():
        if path is None:
            continue
        if found_by == "WARPY_PTXAS" and not (path.is_file() and os.access(path, os.X_OK)):
            raise WarpyError(f"WARPY_PTXAS={path} is not an executable file")
        if not (path.is_file() and os.access(path, os.X_OK)):
            tried.append(str(path))
            continue
        text = _version_text(path)
        m = re.search(r"V(\d+\.\d+\.\d+)", text) or re.search(r"release (\d+\.\d+)", text)
        version = m.group(1) if m else "unknown"
        return Ptxas(path=str(path), found_by=found_by, version=version, version_text=text)
    extra = f" (not executable: {', '.join(tried)})" if tried else ""
    raise WarpyError(
        "no ptxas found: set WARPY_PTXAS, install nvidia-cuda-nvcc-cu12, set CUDA_HOME, or put ptxas on PATH"
        + extra
    )


# ---------------------------------------------------------------------------------------------
# Parsing ptxas output

_RE_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_RE_PROPS = re.compile(r"Function properties for (\S+)")
_RE_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_RE_USED = re.compile(r"Used (\d+) registers")
_RE_BARRIERS = re.compile(r"used (\d+) barriers")
_RE_SMEM = re.compile(r"(\d+) bytes smem")
_RE_CMEM0 = re.compile(r"(\d+) bytes cmem\[0\]")
# ptxas prints its performance diagnostics as "info" lines with a code (12.9 only under -v), and
# other problems as "warning" lines with or without one; both are collected.
_RE_WARNING = re.compile(r"^ptxas\s+warning\s*:\s*(?:\((C\d+)\)\s*)?(.*)$")
_RE_CODED_INFO = re.compile(r"^ptxas\s+info\s*:\s*\((C\d+)\)\s*(.*)$")
_RE_ERROR = re.compile(r"^ptxas\s+(?:fatal|error)\s*:\s*(.*)$")
_RE_QUOTED_FN = re.compile(r"(?:function|entry|kernel)\s+'([^']+)'")


def parse_resources(log: str) -> tuple[KernelResources, ...]:
    """The per-function resource report of `ptxas -v`, in the order ptxas printed it.

    ptxas prints, per function: "Compiling entry function 'k' for 'sm_90a'" (entries only),
    "Function properties for k", "N bytes stack frame, N bytes spill stores, N bytes spill loads",
    and (entries) "Used N registers, used N barriers, N bytes smem, N bytes cmem[0]".
    """
    order: list[str] = []
    fields: dict[str, dict[str, int | bool]] = {}
    entries: set[str] = set()
    current: str | None = None

    def slot(name: str) -> dict[str, int | bool]:
        if name not in fields:
            order.append(name)
            fields[name] = {}
        return fields[name]

    for line in log.splitlines():
        if m := _RE_ENTRY.search(line):
            current = m.group(1)
            entries.add(current)
            slot(current)
            continue
        if m := _RE_PROPS.search(line):
            current = m.group(1)
            slot(current)
            continue
        if current is None:
            continue
        if m := _RE_FRAME.search(line):
            f = slot(current)
            f["stack_frame"], f["spill_stores"], f["spill_loads"] = (int(g) for g in m.groups())
            continue
        if m := _RE_USED.search(line):
            f = slot(current)
            f["registers"] = int(m.group(1))
            if b := _RE_BARRIERS.search(line):
                f["barriers"] = int(b.group(1))
            if s := _RE_SMEM.search(line):
                f["shared_bytes"] = int(s.group(1))
            if c := _RE_CMEM0.search(line):
                f["const0_bytes"] = int(c.group(1))
    return tuple(
        KernelResources(name=n, is_entry=n in entries, **fields[n])
        for n in order
    )


def classify_warning(text: str) -> str:
    """The kind of a ptxas warning text (without the "ptxas warning : (Cxxxx)" prefix)."""
    low = text.lower()
    if "wgmma" in low and "serializ" in low:
        return "wgmma-serialized"
    if "setmaxnreg" in low and "ignored" in low:
        return "setmaxnreg-ignored"
    if re.search(r"warpgroup\.(wait|arrive) is injected", low):
        return "wgmma-injected"
    if "spill" in low:
        return "spill"
    return "other"


def parse_warnings(log: str, resources: Sequence[KernelResources] = ()) -> tuple[PtxasWarning, ...]:
    """Every ptxas warning line, classified, plus one `spill` warning per function that spills."""
    out: list[PtxasWarning] = []
    for line in log.splitlines():
        m = _RE_WARNING.match(line.strip()) or _RE_CODED_INFO.match(line.strip())
        if not m:
            continue
        code, text = m.group(1), m.group(2).strip()
        fn = _RE_QUOTED_FN.search(text)
        out.append(PtxasWarning(kind=classify_warning(text), text=text, code=code, kernel=fn.group(1) if fn else None))
    for r in resources:
        if r.spills and not any(w.kind == "spill" and w.kernel == r.name for w in out):
            out.append(
                PtxasWarning(
                    kind="spill",
                    text=f"function '{r.name}' spills: {r.spill_stores} bytes spill stores, "
                    f"{r.spill_loads} bytes spill loads",
                    kernel=r.name,
                )
            )
    return tuple(out)


_RE_LINE_ERROR = re.compile(r"^ptxas\s+(\S+), line (\d+); (?:error|fatal)\s*:\s*(.*)$")


def _first_error(log: str) -> str:
    """The first error with its line ("kernel.ptx line 6: Unknown modifier '.u33'"), else the fatal one."""
    for line in log.splitlines():
        if m := _RE_LINE_ERROR.match(line.strip()):
            return f"{m.group(1)} line {m.group(2)}: {m.group(3).strip()}"
    for line in log.splitlines():
        if m := _RE_ERROR.match(line.strip()):
            return m.group(1).strip()
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    return lines[0] if lines else "no output"


# ---------------------------------------------------------------------------------------------
# Cache

_MAGIC = b"WARPYCUBIN1\n"
_memory_cache: dict[str, tuple[bytes, str]] = {}


def cache_dir() -> Path:
    return cache_root() / "cubin"


def cache_key(ptx: str, ptxas: Ptxas, flags: Sequence[str], arch: str) -> str:
    h = hashlib.sha256()
    for part in (ptx, ptxas.version_text, "\0".join(flags), arch):
        b = part.encode()
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def _disk_read(key: str) -> tuple[bytes, str] | None:
    path = cache_dir() / f"{key}.wcubin"
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    if not raw.startswith(_MAGIC):
        return None
    try:
        head_end = raw.index(b"\n", len(_MAGIC))
        meta = json.loads(raw[len(_MAGIC) : head_end])
        body = raw[head_end + 1 :]
        log = body[: meta["log_bytes"]].decode()
        data = body[meta["log_bytes"] :]
        if len(data) != meta["cubin_bytes"] or hashlib.sha256(data).hexdigest() != meta["cubin_sha256"]:
            return None  # a damaged entry is a miss; the rewrite replaces it
    except (ValueError, KeyError, UnicodeDecodeError):
        return None
    return data, log


def _disk_write(key: str, data: bytes, log: str) -> None:
    """The entry: a magic line, its sizes and checksum (a damaged entry reads as a miss), the log,
    the cubin; written atomically (`warpy.cache.atomic_write`)."""
    logb = log.encode()
    meta = json.dumps(
        {"log_bytes": len(logb), "cubin_bytes": len(data), "cubin_sha256": hashlib.sha256(data).hexdigest()}
    ).encode()
    atomic_write(cache_dir() / f"{key}.wcubin", _MAGIC + meta + b"\n" + logb + data)


def clear_memory_cache() -> None:
    _memory_cache.clear()


# ---------------------------------------------------------------------------------------------
# Assembly


def _run_ptxas(ptxas: Ptxas, ptx: str, arch: str, flags: Sequence[str]) -> tuple[bytes, str]:
    with tempfile.TemporaryDirectory(prefix="warpy-ptxas-") as d:
        src = Path(d) / "kernel.ptx"
        out = Path(d) / "kernel.cubin"
        src.write_text(ptx)
        cmd = [ptxas.path, f"-arch={arch}", "-v", *flags, str(src), "-o", str(out)]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            raise PtxasError(f"ptxas did not finish within 600 s for {arch}") from None
        # The temporary path and the compile time vary from run to run; drop them so that a cache
        # entry depends on its key alone.
        lines = (r.stdout + "\n" + r.stderr).replace(str(src), "kernel.ptx").splitlines()
        log = "\n".join(ln for ln in lines if ln.strip() and "Compile time =" not in ln) + "\n"
        if r.returncode != 0 or not out.is_file():
            raise PtxasError(f"ptxas failed for {arch}: {_first_error(log)}", log)
        return out.read_bytes(), log


def _check_allow(allow: Iterable[str]) -> frozenset[str]:
    allowed = frozenset(allow)
    for a in allowed:
        if a not in FAILING_KINDS and not re.fullmatch(r"C\d{4}", a):
            raise WarpyError(f"allow={a!r} is neither a warning kind {FAILING_KINDS} nor a ptxas code like 'C7510'")
    return allowed


def failing_warnings(cubin: Cubin, allow: Iterable[str] = ()) -> tuple[PtxasWarning, ...]:
    """The warnings of `cubin` that fail an assembly under `allow`."""
    allowed = _check_allow(allow)
    return tuple(
        w
        for w in cubin.warnings
        if w.kind in FAILING_KINDS and w.kind not in allowed and (w.code is None or w.code not in allowed)
    )


def assemble(
    ptx: str,
    arch: str = "sm_90a",
    flags: Sequence[str] = (),
    allow: Iterable[str] = (),
    *,
    ptxas: Ptxas | None = None,
    use_cache: bool = True,
) -> Cubin:
    """Assemble `ptx` for `arch` ("sm_90a" or "sm_100a") with extra ptxas `flags` (`-v` is always
    passed). Raises PtxasError when ptxas refuses the PTX and PtxasWarningError when a warning of a
    failing kind (see the module docstring) is not in `allow`."""
    if arch not in ARCHS:
        raise WarpyError(f"unknown target {arch!r} (targets: {', '.join(ARCHS)})")
    flags = tuple(flags)
    for f in flags:
        if not f.startswith("-") or f.startswith(("-arch", "--gpu-name", "-o", "--output-file")):
            raise WarpyError(f"ptxas flag {f!r} is not allowed (the target and output are set by warpy)")
    allowed = _check_allow(allow)
    tool = ptxas or find_ptxas()
    key = cache_key(ptx, tool, flags, arch)

    hit = True
    entry = _memory_cache.get(key) if use_cache else None
    if entry is None and use_cache:
        entry = _disk_read(key)
        if entry is not None:
            _memory_cache[key] = entry
    if entry is None:
        hit = False
        entry = _run_ptxas(tool, ptx, arch, flags)
        if use_cache:
            _memory_cache[key] = entry
            _disk_write(key, *entry)
    data, log = entry

    resources = parse_resources(log)
    cubin = Cubin(
        data=data,
        arch=arch,
        resources=resources,
        warnings=parse_warnings(log, resources),
        ptxas_version=tool.version,
        log=log,
        cache_hit=hit,
    )
    bad = failing_warnings(cubin, allowed)
    if bad:
        w = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise PtxasWarningError(f"{w.line()}{more}; pass allow=({w.kind!r},) to accept it", cubin)
    return cubin


def assemble_file(path: str | os.PathLike[str], arch: str = "sm_90a", **kw: object) -> Cubin:
    try:
        ptx = Path(path).read_text()
    except OSError as e:
        raise WarpyError(f"cannot read PTX file {path}: {e.strerror or e}") from None
    return assemble(ptx, arch, **kw)  # type: ignore[arg-type]


if __name__ == "__main__":  # python -m warpy.lift.ptxas FILE.ptx [arch]: print the resource report
    c = assemble_file(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "sm_90a", allow=FAILING_KINDS)
    for r in c.resources:
        print(r)
    for w in c.warnings:
        print(w.line())
