"""warpy's disk caches: where they live and how an entry is written.

Everything cached lies under `$WARPY_CACHE` (default `~/.cache/warpy`): `cubin/` (ptxas's output
by PTX, version and flags: `warpy.lift.ptxas`), `disasm/` (nvdisasm's listings by cubin and tool:
`warpy.lift.disasm`) and one folder a kernel family (plans: `warpy.plan`).
An entry is written to a temporary file in its folder and renamed into place, so a reader sees the
old entry, no entry, or the whole new one; a cache that cannot be written only costs speed.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def cache_root() -> Path:
    root = os.environ.get("WARPY_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "warpy"


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically (temp file + rename); OS errors are ignored."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem[:16]}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError:
        pass


__all__ = ["cache_root", "atomic_write"]
