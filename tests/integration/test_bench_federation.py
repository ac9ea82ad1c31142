"""The federation benchmarks of issue 3 run end to end (``--quick``) and write their measurements.

``benchmarks/bench_federation.py`` (Fed-PNE speed, many clients with Fed-PNE and PF-PNE,
communication) and
``benchmarks/bench_dp_fedpne.py`` (DP-Fed-PNE's regret as epsilon falls) each run once in a
subprocess. Nothing here asserts on speed or memory: timings depend on the machine, and the
scripts only report them. The tests check that the measurements exist, are well formed and obey
the invariants that do not depend on the machine (every client uses exactly T evaluations, bytes
grow with M, sigma falls as epsilon grows, ...).
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import sys
from types import ModuleType
from typing import Any

import pytest
from bench_scripts import BENCH, run_bench

F_STAR = 4 * (math.pi / 6) * (1 - math.pi / 6)


@pytest.fixture(scope="module")
def federation_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    out = tmp_path_factory.mktemp("bench") / "federation.json"
    return run_bench("bench_federation.py", "--quick", out=out)


@pytest.fixture(scope="module")
def dp_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    out = tmp_path_factory.mktemp("bench") / "dp_fedpne.json"
    return run_bench("bench_dp_fedpne.py", "--quick", out=out)


# ------------------------------------------------------------------------------ bench_federation


def test_speed_entry(federation_run: tuple[dict[str, Any], str]) -> None:
    data, _ = federation_run
    assert data["benchmark"] == "federation"
    assert data["parameters"]["algorithm"] == "fedpne"
    sp = data["speed"]
    m, t = sp["clients"], sp["budget"]
    assert (m, t, sp["repeats"]) == (10, 1000, 2)
    assert sp["evaluations"] == m * t
    assert len(sp["runs"]) == 2
    for run in sp["runs"]:
        assert run["evaluations"] == m * t
        assert run["construct_s"] > 0 and run["run_s"] > 0
        assert run["total_s"] >= run["run_s"]
        assert run["rounds"] > 0
        assert run["bytes_up"] > 0 and run["bytes_down"] > 0
        assert 0 <= run["cumulative_regret"] <= t * F_STAR
        assert 0 <= run["simple_regret"] <= F_STAR
    for key in ("construct_s", "run_s", "total_s"):
        st = sp[key]
        assert 0 < st["min"] <= st["median"] <= st["max"], key
    assert sp["evaluations_per_s"] > 0
    # The same job with the same seed gives the same results every time.
    assert sp["identical_results"] is True


def test_scale_entry(federation_run: tuple[dict[str, Any], str]) -> None:
    data, _ = federation_run
    jobs = data["scale"]
    # By default both jobs run, each in its own process: Fed-PNE with value offsets and PF-PNE
    # with input shifts (global objective: the average of the clients).
    assert [(sc["algorithm"], sc["heterogeneity"]) for sc in jobs] == [
        ("fedpne", "offset"),
        ("pfpne", "shift"),
    ]
    described = data["parameters"]["scale_jobs"]
    assert [j["algorithm"] for j in described] == ["fedpne", "pfpne"]
    for job, sc in zip(described, jobs, strict=True):
        assert job["heterogeneity"].startswith(sc["heterogeneity"])
    for sc in jobs:
        m, t = sc["clients"], sc["budget"]
        assert (m, t) == (200, 200)
        # The run went to its end with every client using exactly T evaluations.
        assert sc["evaluations"] == m * t
        assert sc["client_evaluations_min"] == sc["client_evaluations_max"] == t
        assert sc["rounds"] > 0
        assert sc["messages_up"] > 0 and sc["bytes_up"] > 0 and sc["bytes_down"] > 0
        assert sc["construct_s"] > 0 and sc["run_s"] > 0
        assert sc["total_s"] >= sc["run_s"]
        assert sc["evaluations_per_s"] == pytest.approx(m * t / sc["total_s"])
        assert (
            sc["peak_rss_kib"]
            >= sc["peak_rss_after_construction_kib"]
            >= sc["peak_rss_before_construction_kib"]
            > 0
        )
        assert sc["peak_rss_mb"] > 0
        assert 0 <= sc["cumulative_regret"] <= t * sc["f_star"]
        assert 0 <= sc["simple_regret"] <= sc["f_star"]
    # Offsets keep Garland's maximiser: the global f* is Garland's. The clients' average under
    # input shifts has a lower maximum.
    assert jobs[0]["f_star"] == pytest.approx(F_STAR, abs=1e-12)
    assert 0 < jobs[1]["f_star"] < F_STAR


def _bench_federation(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The script as a module; the path entry it adds for ``_common`` is undone afterwards."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = importlib.util.spec_from_file_location("bench_federation", BENCH / "bench_federation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_scale_algorithms_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    parse_args = _bench_federation(monkeypatch).parse_args
    assert parse_args([]).scale_algorithms == ["fedpne", "pfpne"]
    quick = parse_args(["--quick"])
    assert (quick.scale_clients, quick.scale_budget) == (200, 200)
    assert quick.scale_algorithms == ["fedpne", "pfpne"]
    assert parse_args(["--scale-algorithms", "pfpne", "pfpne"]).scale_algorithms == ["pfpne"]
    with pytest.raises(SystemExit):
        parse_args(["--scale-algorithms", "hct"])


def test_communication_grows_with_clients_and_budget(
    federation_run: tuple[dict[str, Any], str],
) -> None:
    data, _ = federation_run
    comm = data["communication"]
    by_m, by_t = comm["by_clients"], comm["by_budget"]
    assert [r["clients"] for r in by_m] == [5, 10, 20]
    assert [r["budget"] for r in by_t] == [500, 1000, 2000]
    for r in by_m + by_t:
        m, t, rounds = r["clients"], r["budget"], r["rounds"]
        assert r["evaluations"] == m * t
        assert rounds > 0
        assert r["messages_up"] == r["messages_down"] == m * rounds
        assert r["bytes_total"] == r["bytes_up"] + r["bytes_down"]
        assert r["bytes_per_client"] == pytest.approx(r["bytes_total"] / m)
        assert r["bytes_per_client_round"] == pytest.approx(r["bytes_total"] / (m * rounds))
        assert r["rounds_per_ln_budget"] == pytest.approx(rounds / math.log(t))
        assert rounds <= r["rounds_bound"]
        assert len(r["depths"]) == rounds
    # More clients at the same T: strictly more bytes, up and down.
    for a, b in itertools.pairwise(by_m):
        assert b["bytes_up"] > a["bytes_up"]
        assert b["bytes_down"] > a["bytes_down"]
    # A larger budget never means fewer rounds.
    rounds = [r["rounds"] for r in by_t]
    assert rounds == sorted(rounds)
    fits = comm["fits"]
    assert math.isfinite(fits["bytes_vs_clients_exponent"])
    assert fits["bytes_vs_clients_exponent"] > 0


def test_federation_verdicts_are_reported(federation_run: tuple[dict[str, Any], str]) -> None:
    data, stdout = federation_run
    v = data["verdicts"]
    for key in ("speed", "communication"):
        assert isinstance(v[key]["meets_target"], bool), key
    # One scale verdict per job; "every client used exactly T" does not depend on the machine.
    assert [(sc["algorithm"], sc["meets_target"]) for sc in v["scale"]] == [
        ("fedpne", True),
        ("pfpne", True),
    ]
    assert stdout.count("meets target:") == 4
    assert stdout.count("Scale: ") == 2
    env = data["environment"]
    assert env["python"] and env["numpy"] and env["cpu_count"]


# ------------------------------------------------------------------------------ bench_dp_fedpne


def test_dp_runs(dp_run: tuple[dict[str, Any], str]) -> None:
    data, _ = dp_run
    p = data["parameters"]
    m, t = p["clients"], p["budget"]
    assert (m, t) == (5, 1000)
    assert p["privacy_delta"] == 1e-5
    assert data["seeds"] == [0, 1]
    n_settings = 1 + len(p["classic_epsilons"]) + len(p["analytic_epsilons"])
    assert n_settings == 9
    assert len(data["runs"]) == n_settings * 2
    for r in data["runs"]:
        assert r["evaluations"] == m * t
        assert r["rounds"] > 0
        assert 0 <= r["cumulative_regret"] <= t * F_STAR
        assert 0 <= r["simple_regret"] <= F_STAR
        assert r["c_dp"] == pytest.approx(0.1 * math.sqrt(1 + 4 * r["sigma"] ** 2), rel=1e-12)
        if r["calibration"] == "none":
            assert r["sigma"] == 0
        else:
            assert r["sigma"] > 0
        if r["calibration"] == "classic":
            want = math.sqrt(2 * math.log(1.25 / 1e-5)) / r["epsilon"]
            assert r["sigma"] == pytest.approx(want, rel=1e-12)


def test_dp_sigma_decreases_as_epsilon_grows(dp_run: tuple[dict[str, Any], str]) -> None:
    data, _ = dp_run
    summary = data["summary"]
    for cal in ("classic", "analytic"):
        rows = sorted((r for r in summary if r["calibration"] == cal), key=lambda r: r["epsilon"])
        assert len(rows) == 4, cal
        sigmas = [r["sigma"] for r in rows]
        assert all(a > b for a, b in itertools.pairwise(sigmas)), (cal, sigmas)
    # Rows are ordered by sigma, the non-private row (sigma 0) first with ratio 1.
    assert [r["sigma"] for r in summary] == sorted(r["sigma"] for r in summary)
    assert summary[0]["calibration"] == "none"
    assert summary[0]["regret_ratio"] == pytest.approx(1.0)
    for row in summary:
        assert row["seeds"] == 2
        assert math.isfinite(row["cumulative_regret"]["mean"])
        assert row["cumulative_regret"]["std"] >= 0


def test_dp_verdicts_are_reported(dp_run: tuple[dict[str, Any], str]) -> None:
    data, stdout = dp_run
    v = data["verdicts"]
    assert v["sigma"]["meets_target"] is True
    assert isinstance(v["regret"]["meets_target"], bool)
    assert data["random_search_regret"] > 0
    assert stdout.count("meets target:") == 2
