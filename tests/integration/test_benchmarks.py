"""The benchmark script of issue 2 runs end to end (``--quick``) and writes its measurements.

Nothing here asserts on speed or memory: timings depend on the machine, and the script itself
only reports them. The test checks that the measurements exist and are well formed.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "bench_hct_vs_pyxab.py"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("PyXAB") is None,
    reason="PyXAB is not installed (pip install pyxab==0.3.0, or the project's `bench` extra); "
    "the benchmark compares fedxab's HCT against it",
)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("bench") / "hct_vs_pyxab.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, f"benchmark failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(out.read_text()), proc.stdout


def test_quick_run_has_both_optimizers(quick_run: tuple[dict, str]) -> None:
    data, _ = quick_run
    assert data["budgets"] == [1000]
    assert data["seeds"] == [0, 1]
    runs = data["runs"]
    for name in ("fedxab", "pyxab"):
        mine = [r for r in runs if r["optimizer"] == name]
        assert sorted(r["seed"] for r in mine) == [0, 1], name
        for r in mine:
            assert r["budget"] == 1000
            assert r["wall_time_s"] > 0
            assert math.isfinite(r["cumulative_regret"])
            # Regret of a noise-free f below its maximum is non-negative, and at most budget * f*.
            assert 0 <= r["cumulative_regret"] <= 1000 * data["parameters"]["f_star"]
            assert r["nodes"] >= 3


def test_same_noise_and_parameters_for_both(quick_run: tuple[dict, str]) -> None:
    data, _ = quick_run
    p = data["parameters"]
    assert (p["nu"], p["rho"], p["c"], p["delta"]) == (1.0, 0.5, 0.1, 0.01)
    assert p["f_star"] == pytest.approx(4 * (math.pi / 6) * (1 - math.pi / 6), abs=1e-15)
    row = data["summary"][0]
    assert row["budget"] == 1000
    assert row["speed_ratio"] > 0
    for name in ("fedxab", "pyxab"):
        assert row[name]["seeds"] == 2
        assert row[name]["wall_time_s"]["median"] > 0
        assert math.isfinite(row[name]["cumulative_regret"]["mean"])


def test_memory_entry(quick_run: tuple[dict, str]) -> None:
    data, _ = quick_run
    mem = data["memory"]
    assert mem is not None
    assert mem["optimizer"] == "fedxab"
    assert mem["budget"] == 20_000
    assert mem["peak_rss_kib"] >= mem["peak_rss_before_run_kib"] > 0
    assert mem["tracemalloc_peak_bytes"] > 0
    assert mem["wall_time_s"] > 0
    assert math.isfinite(mem["cumulative_regret"])


def test_verdicts_are_reported(quick_run: tuple[dict, str]) -> None:
    data, stdout = quick_run
    v = data["verdicts"]
    for key in ("speed", "regret", "memory"):
        assert isinstance(v[key]["meets_target"], bool), key
    assert stdout.count("meets target:") == 3
    assert "PyXAB" in stdout and "fedxab" in stdout
