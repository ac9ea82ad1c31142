"""Running a benchmark script of ``benchmarks/`` in a subprocess, for the tests that check it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"


def run_bench(script: str, *args: str, out: Path) -> tuple[dict[str, Any], str]:
    """Run ``benchmarks/<script> ARGS --json OUT`` from the repository root; the JSON it wrote
    and its standard output (the test fails with both outputs if it exits non-zero)."""
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args, "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(out.read_text()), proc.stdout
