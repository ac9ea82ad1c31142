"""Every measured table in the documentation keeps the command that measured it.

A *measured table* is a Markdown table with at least one cell that starts with a digit (a table
of names and descriptions, such as the tuning tasks, has none). Each one must be preceded, within
its section (after the nearest heading above it), by a fenced code block that runs a benchmark
script (``benchmarks/...``) or ``fedxab``. Checked on ``docs/benchmarks.md`` and on the measured
part of ``docs/algorithms/pfhct.md`` (from its "Measurements" section on).
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PAGES = {
    "docs/benchmarks.md": None,
    "docs/algorithms/pfhct.md": "## Measurements",
}
"""Each checked page and the heading its measured part starts at (None: the whole page)."""

COMMAND = re.compile(r"benchmarks/\S+\.py|^\s*(\S+=\S+\s+)*(\S*/)?fedxab\s", re.MULTILINE)
"""A line that runs a benchmark script or the fedxab command line."""


def _is_measured(row: str) -> bool:
    cells = [cell.strip(" *`") for cell in row.strip().strip("|").split("|")]
    return any(cell[:1].isdigit() for cell in cells)


def tables_without_command(text: str) -> list[tuple[int, str]]:
    """The (line number, header) of every measured table with no command block in its section."""
    missing = []
    commands_in_section = False
    in_fence = False
    fence: list[str] = []
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        line = lines[number]
        if line.startswith("```"):
            if in_fence and COMMAND.search("\n".join(fence)):
                commands_in_section = True
            in_fence, fence = not in_fence, []
        elif in_fence:
            fence.append(line)
        elif line.startswith("#"):
            commands_in_section = False
        elif line.startswith("|"):
            start = number
            while number + 1 < len(lines) and lines[number + 1].startswith("|"):
                number += 1
            body = lines[start + 2 : number + 1]
            if any(_is_measured(row) for row in body) and not commands_in_section:
                missing.append((start + 1, lines[start]))
        number += 1
    return missing


def _measured_part(path: str, start: str | None) -> tuple[str, int]:
    text = (REPO / path).read_text(encoding="utf-8")
    if start is None:
        return text, 0
    offset = text.index(f"\n{start}\n") + 1
    return text[offset:], text[:offset].count("\n")


def test_every_measured_table_follows_its_command():
    missing = []
    for path, start in PAGES.items():
        text, offset = _measured_part(path, start)
        missing += [
            f"{path}:{line + offset}: {header[:80]}"
            for line, header in tables_without_command(text)
        ]
    assert not missing, "measured tables with no command block above them:\n" + "\n".join(missing)


def test_a_table_without_its_command_is_found():
    page = """## Measured

| transport | wall time (s) |
|---|---|
| in-process | 0.107 |

## Measured with its command

```bash
.venv/bin/python benchmarks/bench_transports.py --markdown
```

| transport | wall time (s) |
|---|---|
| in-process | 0.107 |

| task | model |
|---|---|
| `svc-digits` | SVC, digits |

### The next section

| transport | wall time (s) |
|---|---|
| MemoryBroker | 0.126 |
"""
    assert tables_without_command(page) == [
        (3, "| transport | wall time (s) |"),
        (23, "| transport | wall time (s) |"),
    ]
