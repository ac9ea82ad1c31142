"""The code and the documentation cite nothing outside the repository.

A docstring, comment or page cites the papers (authors, year, algorithm line, equation or
section) and says what fedxab chose, never a file a reader does not have: a design note
(``DESIGN.md``), a specification (``specs/...``, ``spec-<name> §x``) or a seed file
(``seeds/...``). Checked in every file under fedxab/ and docs/, and in README.md.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

OUTSIDE = re.compile(r"DESIGN\.md|specs/|\bspec-[a-z]|seeds/", re.IGNORECASE)
"""A mention of a file outside the repository."""

SUFFIXES = {".py", ".md", ".yml", ".yaml", ".txt", ".toml"}


def _files() -> list[Path]:
    files = [REPO / "README.md"]
    for root in ("fedxab", "docs"):
        files += [
            path
            for path in sorted((REPO / root).rglob("*"))
            if path.is_file() and path.suffix in SUFFIXES
        ]
    return files


def test_no_outside_references():
    hits = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in _files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not hits, "references to files outside the repository:\n" + "\n".join(hits)
