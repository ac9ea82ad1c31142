"""``fedxab reproduce``: listing, errors, a tiny run per kind of figure, and landmine data checks.

Landmine runs read ``LandmineData.mat`` from ``$FEDXAB_LANDMINE`` when set, else from
``<repo root>/../shared/data/landmine/``, and are skipped with the reason when it is absent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedxab.cli import app
from fedxab.reproduce import (
    EXPERIMENTS,
    SIMPLE_REGRET_FILENAME,
    ReproduceError,
    get_experiment,
    make_plan,
)
from fedxab.results import load_results

runner = CliRunner()

_DEFAULT_LANDMINE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "landmine"


def _landmine_dir() -> Path | None:
    env = os.environ.get("FEDXAB_LANDMINE", "").strip()
    candidate = Path(env) if env else _DEFAULT_LANDMINE
    if candidate.is_file():
        return candidate
    return candidate if (candidate / "LandmineData.mat").is_file() else None


def _has_sklearn() -> bool:
    try:
        import sklearn  # noqa: F401
    except ImportError:
        return False
    return True


needs_landmine = pytest.mark.skipif(
    _landmine_dir() is None or not _has_sklearn(),
    reason="landmine experiments need LandmineData.mat (set FEDXAB_LANDMINE, or place it in "
    "../shared/data/landmine/ next to the repository) and scikit-learn (pip install "
    "'fedxab[landmine]')",
)


def _run(*args: str):
    return runner.invoke(app, ["reproduce", *args])


def test_list_names_every_experiment_with_a_description():
    result = _run("--list")
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == len(EXPERIMENTS)
    for name, line in zip(EXPERIMENTS, lines, strict=True):
        assert line.startswith(name)
        assert EXPERIMENTS[name].description in line
    for required in (
        "fedpne-garland",
        "fedpne-doublesine",
        "fedpne-himmelblau",
        "fedpne-rastrigin",
        "fedpne-landmine",
        "pfpne-garland",
        "pfpne-himmelblau",
        "pfpne-rastrigin",
        "pfpne-landmine",
        "parallel-sineproduct",
        "parallel-garland",
    ):
        assert required in EXPERIMENTS


def test_unknown_name_exits_2_listing_the_allowed_names():
    result = _run("fedpne-nowhere")
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert "unknown experiment 'fedpne-nowhere'" in result.output
    for name in EXPERIMENTS:
        assert name in result.output


def test_no_name_exits_2():
    result = _run()
    assert result.exit_code == 2
    assert "give an experiment NAME" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("fedpne-garland", "--seeds", "0"), "--seeds must be an integer >= 1"),
        (("fedpne-garland", "--budget", "0"), "--budget must be an integer >= 1"),
        (("parallel-garland", "--clients", "3"), "--clients does not apply"),
        (("fedpne-garland", "--figure", "x.txt"), "--figure must end in"),
    ],
)
def test_bad_overrides_exit_2(args, message, tmp_path):
    result = _run(*args, "--output", str(tmp_path / "out"))
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "out").exists()


def test_experiments_follow_the_papers_settings():
    """Spec-fedpne-pfpne §7, §8 ([PROPOSED] M = 10, T = 10^4 / 10^3) and spec-hct-poo-parallel
    §4.2 (m in {1, 4, 16}, n = 1600 / 10000, truncated Gaussian noise)."""
    fx = get_experiment("fedpne-garland")
    assert [e.algorithm["name"] for e in fx.entries] == ["fedpne", "central-hct", "fed1ucb"]
    assert (fx.heterogeneity, fx.metric, fx.clients, fx.budget) == (
        "offset",
        "cumulative_regret",
        10,
        10_000,
    )
    assert fx.entries[1].algorithm["rho"] == 0.75  # [FX]'s HCT setting
    pf = get_experiment("pfpne-rastrigin")
    assert [e.algorithm["name"] for e in pf.entries] == [
        "pfpne",
        "fedpne",
        "local-hct",
        "fed1ucb",
    ]
    assert (pf.heterogeneity, pf.metric) == ("shift", "local_cumulative_regret")
    assert pf.objective["dim"] == 10 and pf.entries[0].algorithm["Delta"] == 0.01
    for name in ("fedpne-landmine", "pfpne-landmine"):
        exp = get_experiment(name)
        assert (exp.heterogeneity, exp.budget, exp.needs_landmine) == ("fields", 1000, True)
    p2 = get_experiment("parallel-sineproduct")
    assert [e.clients for e in p2.entries] == [1, 4, 16]
    assert p2.objective["printed"] is True and p2.budget == 1600
    assert p2.objective["noise"]["name"] == "truncated_gaussian"
    assert get_experiment("parallel-garland").budget == 10_000


def test_plan_applies_overrides_and_echoes_the_command(tmp_path):
    plan = make_plan("pfpne-garland", seeds=3, budget=700, clients=4, output=tmp_path)
    assert plan.command_line == "fedxab reproduce pfpne-garland --seeds 3 --budget 700 --clients 4"
    for pe in plan.entries:
        assert pe.config.run.repeats == 3 and pe.config.run.budget == 700
        assert pe.config.federation.clients == 4
        assert pe.directory == tmp_path / pe.entry.key
    assert plan.figure == tmp_path / "pfpne-garland.png"
    with pytest.raises(ReproduceError, match="allowed: fedpne-garland"):
        make_plan("garland")


def test_tiny_fedpne_garland_writes_results_per_algorithm_and_a_png(tmp_path):
    out = tmp_path / "fg"
    result = _run(
        "fedpne-garland", "--seeds", "2", "--budget", "500", "--clients", "3", "--output", str(out)
    )
    assert result.exit_code == 0, result.output
    assert "estimated time: about" in result.output and "timed pilot" in result.output
    for key, name in (("fedpne", "fedpne"), ("central-hct", "central-hct"), ("fed1ucb", "fed1ucb")):
        res = load_results(out / key / "results.json")
        assert res.algorithm == name
        assert [r.seed for r in res.runs] == [0, 1]
        assert all(r.evaluations == 3 * 500 for r in res.runs)
        assert res.config["federation"] == {"clients": 3, "heterogeneity": "offset"}
        assert res.config["run"]["budget"] == 500
    png = out / "fedpne-garland.png"
    assert png.stat().st_size > 5_000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    manifest = json.loads((out / "reproduce.json").read_text())
    assert manifest["command"] == (
        "fedxab reproduce fedpne-garland --seeds 2 --budget 500 --clients 3"
    )
    assert [e["key"] for e in manifest["entries"]] == ["fedpne", "central-hct", "fed1ucb"]
    assert manifest["plot"] == "fedpne-garland.png"  # no path outside the output

    # --plot-only redraws from the results, into another file
    again = tmp_path / "again.png"
    result = _run(
        "fedpne-garland",
        "--seeds",
        "2",
        "--budget",
        "500",
        "--clients",
        "3",
        "--output",
        str(out),
        "--figure",
        str(again),
        "--plot-only",
    )
    assert result.exit_code == 0, result.output
    assert again.stat().st_size > 5_000


def test_plot_only_without_results_exits_2(tmp_path):
    result = _run("pfpne-garland", "--output", str(tmp_path / "none"), "--plot-only")
    assert result.exit_code == 2
    assert "no results for pfpne" in result.output


def test_tiny_pfpne_run_records_local_regret(tmp_path):
    out = tmp_path / "pg"
    result = _run(
        "pfpne-garland", "--seeds", "1", "--budget", "300", "--clients", "2", "-o", str(out), "-q"
    )
    assert result.exit_code == 0, result.output
    for key in ("pfpne", "fedpne", "local-hct", "fed1ucb"):
        run = load_results(out / key / "results.json").runs[0]
        assert run.local_cumulative_regret is not None
        assert run.local_cumulative_regret[-1] >= 0
    assert (out / "pfpne-garland.png").stat().st_size > 5_000


def test_parallel_run_records_the_loss_curve(tmp_path):
    out = tmp_path / "ps"
    result = _run("parallel-sineproduct", "--seeds", "2", "--budget", "400", "-o", str(out), "-q")
    assert result.exit_code == 0, result.output
    for m in (1, 4, 16):
        res = load_results(out / f"m{m}" / "results.json")
        assert res.config["federation"]["clients"] == m
        data = json.loads((out / f"m{m}" / SIMPLE_REGRET_FILENAME).read_text())
        assert data["rounds"] == [int(r) for r in res.runs[0].rounds]
        for run, trace in zip(res.runs, data["runs"], strict=True):
            loss = np.asarray(trace["simple_regret"])
            assert np.all(loss >= 0)
            # the anytime curve ends at the run's final simple regret
            assert loss[-1] == pytest.approx(run.simple_regret, abs=1e-12)
            for level in trace["levels"]:
                assert 1 <= level["evaluations"] <= 400
    assert (out / "parallel-sineproduct.png").stat().st_size > 5_000


def test_landmine_without_data_exits_2_saying_where_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDXAB_LANDMINE", str(tmp_path / "missing"))
    result = _run("pfpne-landmine", "--seeds", "1", "-o", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    # the data path message, or (without scikit-learn) the install hint
    assert "FEDXAB_LANDMINE" in result.output or "scikit-learn" in result.output
    assert not (tmp_path / "out").exists()


@needs_landmine
def test_tiny_pfpne_landmine_run(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDXAB_LANDMINE", str(_landmine_dir()))
    out = tmp_path / "pl"
    result = _run(
        "pfpne-landmine", "--seeds", "1", "--budget", "40", "--clients", "2", "-o", str(out), "-q"
    )
    assert result.exit_code == 0, result.output
    for key in ("pfpne", "fedpne", "local-hct", "fed1ucb"):
        res = load_results(out / key / "results.json")
        assert res.config["federation"] == {
            "clients": 2, "heterogeneity": "fields", "global_regret": False
        }  # fmt: skip
        assert res.runs[0].local_cumulative_regret is not None
        assert res.runs[0].global_simple_regret is None  # the figure needs the local one only
        assert res.runs[0].evaluations == 2 * 40
        assert "data_path" not in res.config["objective"]  # no path outside the repository
    assert (out / "pfpne-landmine.png").stat().st_size > 5_000


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("fedpne-garland", {"seeds": 2, "budget": 300, "clients": 2}),
        ("parallel-garland", {"seeds": 1, "budget": 256}),  # simple_regret.json read back too
    ],
)
def test_jobs_run_entries_in_worker_processes_with_the_same_results(name, args, tmp_path):
    from fedxab.reproduce import run_plan

    one = run_plan(make_plan(name, output=tmp_path / "one", **args))
    heard = []
    two = run_plan(
        make_plan(name, output=tmp_path / "two", **args),
        lambda pe, k, done, horizon, **_: heard.append((pe.entry.key, k, done, horizon)),
        jobs=2,
    )
    assert [r.planned.entry.key for r in two] == [r.planned.entry.key for r in one]
    for a, b in zip(one, two, strict=True):
        runs_a = [{**r.to_dict(), "wall_time_s": None} for r in a.results.runs]
        runs_b = [{**r.to_dict(), "wall_time_s": None} for r in b.results.runs]
        assert runs_a == runs_b
        assert b.planned.results_path.is_file() and str(tmp_path / "two") in str(
            b.planned.results_path
        )
        if a.simple_regret is not None:
            np.testing.assert_array_equal(a.simple_regret, b.simple_regret)
    seeds = args["seeds"]
    assert sorted(heard) == sorted(
        (r.planned.entry.key, seeds - 1, r.planned.config.run.budget,
         r.planned.config.run.budget) for r in one
    )  # fmt: skip
