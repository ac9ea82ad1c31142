"""Benchmark scripts run end to end at a small size and write their measurements.

``bench_hct_vs_pyxab.py`` (issue 2, ``--quick``), ``bench_signing.py`` (issues 8 and 17:
signing's cost on the Kafka Fed-PNE job, unsigned, HMAC and Ed25519, M = 10, T = 1000) and
``bench_dashboard.py`` (issue 19: the dashboard's cost and page load, at 60 clients) and
``bench_personalized.py`` (issue 20: PF-HCT against local HCT, PF-PNE, Fed-PNE). Nothing
here asserts on speed or memory: timings depend on the machine, and the scripts only report them.
The tests check that the measurements exist, are well formed and consistent, and (signing) that
the signed runs really signed, each under its scheme.
"""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys

import pytest
from bench_scripts import BENCH, run_bench

needs_pyxab = pytest.mark.skipif(
    importlib.util.find_spec("PyXAB") is None,
    reason="PyXAB is not installed (pip install pyxab==0.3.0, or the project's `bench` extra); "
    "the benchmark compares fedxab's HCT against it",
)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("bench") / "hct_vs_pyxab.json"
    return run_bench("bench_hct_vs_pyxab.py", "--quick", out=out)


@needs_pyxab
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


@needs_pyxab
def test_same_noise_and_parameters_for_both(quick_run: tuple[dict, str]) -> None:
    data, _ = quick_run
    p = data["parameters"]
    assert (p["nu"], p["rho"], p["c"], p["delta"]) == (1.0, 0.5, 0.1, 0.01)
    assert p["f_star"] == pytest.approx(4 * (math.pi / 6) * (1 - math.pi / 6), abs=1e-15)
    row = data["summary"][0]
    assert row["budget"] == 1000
    assert row["speed_ratio"] > 0
    assert row["driver_alone_s"]["median"] > 0
    assert sorted(r["seed"] for r in data["driver_runs"]) == [0, 1]
    for name in ("fedxab", "pyxab"):
        assert row[name]["seeds"] == 2
        assert row[name]["wall_time_s"]["median"] > 0
        assert math.isfinite(row[name]["cumulative_regret"]["mean"])


@needs_pyxab
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


@needs_pyxab
def test_verdicts_are_reported(quick_run: tuple[dict, str]) -> None:
    data, stdout = quick_run
    v = data["verdicts"]
    for key in ("speed", "regret", "memory"):
        assert isinstance(v[key]["meets_target"], bool), key
    assert stdout.count("meets target:") == 3
    assert "PyXAB" in stdout and "fedxab" in stdout


# ------------------------------------------------------------------------------ bench_signing


@pytest.fixture(scope="module")
def signing_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    from fedxab.broker.devbroker import dev_broker_available

    available, reason = dev_broker_available()
    if not available:
        pytest.skip(f"dev broker unavailable: {reason}")
    small = ["--clients", "10", "--budget", "1000", "--repeats", "1", "--warmups", "0"]
    return run_bench("bench_signing.py", *small, out=tmp_path_factory.mktemp("bench") / "s.json")


def test_signing_bench_signed_runs_really_signed(signing_run: tuple[dict, str]) -> None:
    data, _ = signing_run
    assert (data["clients"], data["budget"], data["repeats"], data["warmups"]) == (10, 1000, 1, 0)
    rounds = data["rounds"]
    assert rounds > 0 and data["messages_up"] == 10 * rounds
    assert data["unsigned_signing_calls"] == 0  # sign = false: no signing call at all
    assert set(data["schemes"]) == {"hmac", "ed25519"}
    for scheme, result in data["schemes"].items():
        assert len(result["signed_runs"]) == 1
        for run in result["signed_runs"]:
            assert run["schemes"] == [scheme]
            for op in ("sign", "verify"):
                calls = run[op]
                # every report of the run signed by its client and verified by the server, once
                assert calls["by_kind"]["report"] == data["messages_up"], (scheme, op)
                assert calls["by_kind"]["broadcast"] >= rounds, (scheme, op)
                assert calls["failed"] == 0
                assert calls["calls"] == sum(calls["by_kind"].values())
                assert calls["bytes"] > 0 and calls["in_run_s"] > 0
        assert result["signing_on"] is True
        assert result["replay"]["same_signatures"] is True
    # a broadcast: one 32-byte tag per client (HMAC), one 64-byte signature (Ed25519)
    assert data["schemes"]["hmac"]["last_signed_run"]["broadcast_sig_bytes"] == 10 * 32
    assert data["schemes"]["ed25519"]["last_signed_run"]["broadcast_sig_bytes"] == 64
    assert data["signing_on"] is True
    assert data["identical"] is True


def test_signing_bench_numbers_are_consistent(signing_run: tuple[dict, str]) -> None:
    data, stdout = signing_run
    wall = data["wall_s"]
    for variant in ("off", "hmac", "ed25519"):
        st = wall[variant]
        assert len(st["times"]) == 1 and 0 < st["min"] <= st["median"] <= st["max"]
    for scheme, result in data["schemes"].items():
        assert result["ratio"] == pytest.approx(wall[scheme]["median"] / wall["off"]["median"])
        replay = result["replay"]
        last = result["last_signed_run"]
        for op in ("sign", "verify"):
            assert replay[op]["calls"] == last[op]["calls"] > 0
            assert 0 < replay[op]["min"] <= replay[op]["median"] <= replay[op]["max"]
        direct = replay["sign"]["median"] + replay["verify"]["median"]
        assert result["direct_s"] == pytest.approx(direct)
        assert result["share"] == pytest.approx(direct / wall["off"]["median"])
        assert result["meets_target"] == (result["share"] < 0.05)
    assert data["target_share"] == 0.05
    for title in ("unsigned, HMAC and Ed25519", "Signing and verifying every message", "by kind"):
        assert title in stdout
    assert stdout.count("meets target:") == 2
    assert "Results identical unsigned, with HMAC and with Ed25519: yes" in stdout


# --------------------------------------------------------------------------- bench_accountants


def test_accountants_bench_reports_every_accountant_in_both_cases(tmp_path):
    from fedxab.privacy.accountants import ACCOUNTANTS

    tiny = ["--clients", "3", "--releases", "10", "--repeats", "2"]
    data, stdout = run_bench("bench_accountants.py", *tiny, out=tmp_path / "accountants.json")
    assert (data["clients"], data["releases"], data["repeats"]) == (3, 10, 2)
    assert data["distinct_histories"] == {"identical": 1, "distinct": 3}
    measured = {r["backend"] for r in data["results"]}
    assert measured | set(data["skipped"]) == set(ACCOUNTANTS)
    assert measured >= {"rdp", "moments", "pld"}
    by = {(r["backend"], r["case"]): r for r in data["results"]}
    assert len(by) == 2 * len(measured)
    for r in by.values():
        assert len(r["times_s"]) == 2 and 0 < r["min_s"] <= r["median_s"] <= r["max_s"]
        assert r["fallbacks"] == 0
    # the landmine figure; pld is below every RDP-based accountant
    pld = by[("pld", "identical")]["epsilon_landmine"]
    assert round(by[("rdp", "identical")]["epsilon_landmine"], 2) == 21.78
    assert round(pld, 2) == 19.93
    for backend in measured - {"pld", "opacus-prv"}:
        assert by[(backend, "identical")]["epsilon_landmine"] > pld
    # the identical case's clients all at one epsilon, the one reported for its history
    for backend in measured:
        identical = by[(backend, "identical")]
        assert identical["max_epsilon"] == identical["epsilon_identical"]
    assert stdout.count(" | identical | ") == stdout.count(" | distinct | ") == len(measured)


# ------------------------------------------------------------------------- bench_reproductions


def test_reproductions_bench_times_every_entry_with_each_worker_count(tmp_path):
    from fedxab.reproduce import make_plan

    small = ["dpftsde-synthetic-q", "--budget", "12", "--clients", "4", "--workers", "2,1"]
    data, stdout = run_bench("bench_reproductions.py", *small, out=tmp_path / "r.json")
    keys = [pe.entry.key for pe in make_plan("dpftsde-synthetic-q", validate=False).entries]
    assert [e["key"] for e in data["entries"]] == keys
    assert data["workers"] == [2, 1]
    for entry in data["entries"]:
        assert entry["same_results"] is True
        assert all(s > 0 for s in entry["seconds"].values())
    assert data["per_seed_s"] == pytest.approx(sum(e["seconds"]["2"] for e in data["entries"]))
    (total,) = [line for line in stdout.splitlines() if line.startswith("all (1 seed) | ")]
    assert total.endswith(" | yes")


def test_dashboard_benchmark_measures_cost_and_page_load(tmp_path) -> None:
    """``bench_dashboard.py`` at 60 clients: both arms timed, the dashboard's own time counted,
    the page loaded in Chromium where there is one (else reported as not measured)."""
    sys.path.insert(0, str(BENCH))
    from _browser import chromium_binary

    data, text = run_bench(
        "bench_dashboard.py",
        *("--clients", "60", "--budget", "300", "--repeats", "1", "--loads", "2"),
        out=tmp_path / "dashboard.json",
    )
    assert data["clients"] == 60 and len(data["plain_s"]) == len(data["dashboard"]) == 1
    run = data["dashboard"][0]
    assert run["hooks"] > 0 and run["snapshots"] >= 0 and run["wall"] > run["hooks"]
    assert data["cost_share"] == pytest.approx((run["hooks"] + run["snapshots"]) / run["wall"])
    assert data["ratio"] == pytest.approx(data["dashboard_median_s"] / data["plain_median_s"])
    assert data["shown"]["clients"]["total"] == 60 and data["shown"]["max_epsilon"] > 0
    if chromium_binary() is None:
        assert data["page"] is None and "not measured" in text
    else:
        assert len(data["page"]["times"]) == 2 and data["page"]["ms"] > 0
        assert data["page"]["bytes"] > 0


def test_personalized_benchmark_prints_the_grid_table(tmp_path) -> None:
    """``bench_personalized.py`` (issue 20) at a tiny size: one row per cell with every
    algorithm's mean and std, the PF-HCT / local HCT ratio with its paired 95% interval and a
    verdict against the target."""
    data, text = run_bench(
        "bench_personalized.py",
        *("--seeds", "2", "--budget", "150", "--clients", "3"),
        *("--functions", "garland,himmelblau", "--levels", "none,5x"),
        out=tmp_path / "personalized.json",
    )
    assert (data["seeds"], data["budget"], data["clients"]) == (2, 150, [3])
    assert len(data["runs"]) == 2 * 2 * 4 * 2 and len(data["rows"]) == 4
    for row in data["rows"]:
        regret = row["regret"]
        assert set(regret) == {"pfhct", "local-hct", "pfpne", "fedpne"}
        assert all(math.isfinite(v["mean"]) and v["std"] >= 0 for v in regret.values())
        assert row["ratio"] == pytest.approx(regret["pfhct"]["mean"] / regret["local-hct"]["mean"])
        low, high = row["ratio_95"]
        assert low <= row["ratio"] <= high
        assert row["target"] == ("< 1" if row["level"] == "none" else "<= 1.2")
        assert isinstance(row["met"], bool)
    rows = [line for line in text.splitlines() if line.startswith(("| garland", "| himmelblau"))]
    assert len(rows) == 4 and all(line.endswith(("| met |", "| not met |")) for line in rows)
    assert "Target met in" in text
    # --from-json prints the same table from the saved runs, without running
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_personalized.py"), "--from-json",
         str(tmp_path / "personalized.json")],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    table_and_note = "\n\n".join(text.split("\n\n")[:2])  # without the run count and time
    assert proc.stdout.strip() == table_and_note
    # --pooled-hct: per seed, HCT alone and an M-th of one HCT fed M clients' pulls; with
    # M = 1 the two are the same run, so every ratio is exactly 1
    for clients in ("1", "3"):
        proc = subprocess.run(
            [sys.executable, str(BENCH / "bench_personalized.py"), "--pooled-hct", "himmelblau",
             "--seeds", "2", "--clients", clients, "--budget", "200"],
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        rows = [line.strip("| ").split(" | ") for line in proc.stdout.splitlines()]
        rows = [r for r in rows if r[0] in ("0", "1")]
        assert len(rows) == 2 and all(
            float(alone) > 0 and float(ratio) > 0 for _, alone, _, ratio in rows
        )
        if clients == "1":
            assert all(alone == pooled for _, alone, pooled, _ in rows)
        assert "mean pooled / mean alone: " in proc.stdout


def test_personalized_benchmark_runs_pf_hct_variants_on_other_seeds(tmp_path) -> None:
    """``--first-seed``, ``--algorithms`` and ``--pfhct KEY=VALUE``: how PF-HCT's defaults are
    compared on seeds the published table does not use. The override reaches the runs: PF-HCT
    with ``h_max = 0`` is local HCT on the run's partition, the same regret to the last digit."""
    data, text = run_bench(
        "bench_personalized.py",
        *("--seeds", "2", "--first-seed", "7", "--budget", "150", "--clients", "3"),
        *("--functions", "himmelblau", "--levels", "none", "--algorithms", "local-hct"),
        *("--pfhct", "h_max=0", "--pfhct", "stage2=cells"),
        out=tmp_path / "variant.json",
    )
    assert data["pfhct"] == {"h_max": 0, "stage2": "cells"} and data["first_seed"] == 7
    assert sorted({r["seed"] for r in data["runs"]}) == [7, 8]
    assert {r["algorithm"] for r in data["runs"]} == {"pfhct", "local-hct"}
    (row,) = data["rows"]
    assert set(row["regret"]) == {"pfhct", "local-hct"} and row["ratio"] == 1.0
    assert "| pfhct | local-hct |" in text and "pfpne" not in text


def test_free_means_reference_starts_hct_from_exact_coarse_means() -> None:
    """``--free-means``: HCT warm-started with exact means of depths 1..h. With identical
    clients the federation's average is each client's own objective (the same run); with
    shifted clients the two differ; a free start changes HCT's run; the CLI prints one row per
    cell and depth with both ratios and their intervals."""
    sys.path.insert(0, str(BENCH))
    from bench_personalized import free_means

    same = free_means(("himmelblau", "none", 3, 0, 1, (2, 3), 300))
    assert same["average"] == same["own"] and same["average"][3] != same["alone"]
    shifted = free_means(("himmelblau", "paper", 3, 0, 1, (3,), 300))
    assert shifted["average"][3] != shifted["own"][3]
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_personalized.py"), "--free-means", "2,3",
         "--functions", "himmelblau", "--levels", "none,paper", "--clients", "3",
         "--seeds", "2", "--budget", "200"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    rows = [line.strip("| ").split(" | ") for line in proc.stdout.splitlines()]
    rows = [r for r in rows if r[0] == "himmelblau"]
    assert [(r[1], r[2]) for r in rows] == [("none", "2"), ("none", "3"), ("paper", "2"),
                                            ("paper", "3")]  # fmt: skip
    assert all(r[3] == r[4] for r in rows if r[1] == "none")
    for r in rows:
        for col in r[3:]:
            ratio, interval = col.split(" (")
            low, high = (float(v) for v in interval.rstrip(")").split("–"))
            assert low <= float(ratio) <= high


@pytest.mark.slow
def test_bench_tuning_runs_tiny_and_reports_every_method(tmp_path) -> None:
    """bench_tuning.py (issue 35) on one scikit-learn and one BBOB task, 2 seeds, budget 20,
    2 sites, fedxab auto only beside the references: a table per task and the paired verdicts."""
    pytest.importorskip("optuna")
    pytest.importorskip("ioh")
    pytest.importorskip("sklearn")
    data, out = run_bench(
        "bench_tuning.py",
        "--quick",
        "--algorithms",
        "auto",
        "--sites",
        "2",
        out=tmp_path / "tuning.json",
    )
    assert data["seeds"] == [0, 1] and data["budgets"] == [20]
    for task in ("logreg-wine", "bbob-f8-d4"):
        cell = data["tasks"][task]["20"]
        assert set(cell) >= {"auto", "tpe", "random", "pooled-tpe", "auto_vs_tpe"}
        assert cell["auto"]["choice"] == "fedtpe"
        assert len(cell["tpe"]["per_seed"]) == 2
        assert 1 <= cell["auto"]["distinct"] <= 20 and cell["tpe"]["distinct"] <= 20
        assert cell["auto_vs_tpe"]["verdict"] in ("better", "worse", "tie")
        assert math.isfinite(cell["auto"]["rec_mean"]) and math.isnan(cell["tpe"]["rec_mean"])
    assert "auto vs per-site TPE" in out
    again = subprocess.run(
        [
            sys.executable,
            str(BENCH / "bench_tuning.py"),
            "--from-json",
            str(tmp_path / "tuning.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert again == out[out.index("\nlogreg-wine") :]  # the same tables, not rerun


def test_exhaustive_reference_is_the_ceiling_of_one_recommendation() -> None:
    """bench_tuning's ``exhaustive`` reference scores every parameter set of a finite space at
    every site: each site's optimum as its best, the set of largest mean score as the
    recommendation; a space with a continuous parameter has none."""
    sys.path.insert(0, str(BENCH))
    from bench_tuning import Task, grid, run_exhaustive

    import fedxab

    space = fedxab.SearchSpace({"n": fedxab.Int(1, 3), "c": fedxab.Categorical(["a", "b"])})
    assert len(grid(space)) == 6
    table = {0: {(1, "a"): 5.0, (2, "b"): 4.0}, 1: {(3, "b"): 6.0, (2, "b"): 4.5}}
    task = Task("toy", space, lambda m, p: table[m].get((p["n"], p["c"]), 0.0), True, "", {})
    out = run_exhaustive(task, 2)
    assert out.best.tolist() == [5.0, 6.0]  # each site's optimum
    assert out.rec.tolist() == [4.0, 4.5]  # (2, "b"): mean 4.25, the largest mean
    assert out.distinct == 6
    assert grid(fedxab.SearchSpace({"x": fedxab.Float(0, 1), "n": fedxab.Int(1, 3)})) is None


def test_select_fedtpe_runs_only_on_held_out_tasks(tmp_path) -> None:
    """select_fedtpe.py (how Fed-TPE's settings were chosen): a held-out BBOB and a held-out
    scikit-learn task, one seed, budget 10, per-site best and recommendation per variant; a
    reported task is refused."""
    pytest.importorskip("ioh")
    data, out = run_bench(
        "select_fedtpe.py",
        "--seeds",
        "100",
        "--budget",
        "10",
        "--tasks",
        "bbob-f23-d4,knn-wine",
        out=tmp_path / "select.json",
    )
    bbob, knn = data["tasks"]["bbob-f23-d4"], data["tasks"]["knn-wine"]
    assert set(bbob) == set(knn) == {"joint", "univariate"}
    for (best, rec), lower_is_better in [(v[0], True) for v in bbob.values()] + [
        (v[0], False) for v in knn.values()
    ]:
        assert math.isfinite(best) and math.isfinite(rec)
        if lower_is_better:  # f - f*: the best is at least 0 and no worse than the rec.
            assert 0 <= best <= rec
        else:  # CV accuracy in [0, 1]
            assert 0 <= rec <= best <= 1
    assert "bbob-f23-d4, f - f*" in out and "knn-wine, CV accuracy" in out
    assert "seeds best better than joint" in out
    refused = subprocess.run(
        [sys.executable, str(BENCH / "select_fedtpe.py"), "--tasks", "bbob-f21-d10"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert refused.returncode == 2 and "not a held-out task" in refused.stderr
