"""benchmarks/bench_metrics.py runs (smoke size) and reports the comparison it promises."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_metrics_quick_reports_off_on_ratio_and_target(tmp_path):
    out = tmp_path / "metrics.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_metrics.py"),
            "--quick",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ratio on/off" in proc.stdout and "<= 1.10" in proc.stdout
    result = json.loads(out.read_text())
    assert result["clients"] == 10 and result["budget"] == 1_000 and result["repeats"] == 2
    for variant in ("off", "on"):
        times = result["times_s"][variant]
        assert len(times["runs"]) == 2 and times["min"] <= times["median"] <= times["max"]
    ratio = result["times_s"]["on"]["median"] / result["times_s"]["off"]["median"]
    assert abs(result["ratio"] - ratio) < 1e-12
    assert result["meets_target"] == (result["ratio"] <= result["target_ratio"] == 1.10)
