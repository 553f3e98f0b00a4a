"""The README and docs/ point only at files that exist, and call the command `warpy`."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))
# a path of the repository in backticks or plain text: a top folder, then a file with a suffix
PATH = re.compile(r"(?<![\w/.-])((?:warpy|kernels|tests|docs|\.ci)/[\w./*-]*\w(?:\.(?:py|md|ptx|sass|toml))?)")


def _targets(text: str) -> set[str]:
    found = set()
    for m in PATH.finditer(text):
        path = m.group(1).split("::")[0].rstrip(".")
        if text[m.end():m.end() + 1] in ("<", "{", "*"):  # a pattern (tests/kernels/test_<family>*.py)
            continue
        found.add(path)
    return found


def test_every_path_the_docs_name_exists() -> None:
    missing = []
    for page in PAGES:
        for path in sorted(_targets(page.read_text())):
            exists = any(REPO.glob(path)) if "*" in path else (REPO / path).exists()
            if not exists:
                missing.append(f"{page.relative_to(REPO)}: {path}")
    assert not missing, "\n".join(missing)


def test_docs_call_the_command_warpy() -> None:
    for page in PAGES:
        assert "-m warpy.cli" not in page.read_text(), page.name
