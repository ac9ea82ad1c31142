"""``fedxab reproduce`` for DP-FTS-DE ([DP] Fig. 2c, 2d, 3a): the plans, a tiny run of the q sweep
with its privacy-utility table, and (with the landmine data) a tiny landmine run.

Landmine runs read ``LandmineData.mat`` from ``$FEDXAB_LANDMINE`` when set, else from
``<repo root>/../shared/data/landmine/``, and are skipped with the reason when it is absent.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedxab.cli import app
from fedxab.privacy.accountants import make_accountant
from fedxab.privacy.mechanisms import PrivacyEvent
from fedxab.reproduce import (
    EXPERIMENTS,
    PRIVACY_UTILITY_JSON,
    PRIVACY_UTILITY_MD,
    get_experiment,
    make_plan,
    plot_plan,
    run_plan,
    write_privacy_utility,
)
from fedxab.results import load_results

runner = CliRunner()

_DEFAULT_LANDMINE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "landmine"
DP_EXPERIMENTS = ("dpftsde-synthetic-q", "dpftsde-synthetic-z", "dpftsde-landmine")


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


def _sweep(name: str) -> list[tuple[float, float]]:
    return [
        (e.algorithm["q"], e.algorithm["z"])
        for e in get_experiment(name).entries
        if e.algorithm["name"] == "dpftsde"
    ]


def test_dpftsde_experiments_are_listed():
    result = _run("--list")
    assert result.exit_code == 0, result.output
    for name in DP_EXPERIMENTS:
        assert name in EXPERIMENTS
        assert name in result.output


def test_dpftsde_experiments_follow_the_paper():
    """spec-dpftsde §6, §7.1, §7.2: N, T, the (q, z) grids, the paper's epsilons (§4.3)."""
    for name in ("dpftsde-synthetic-q", "dpftsde-synthetic-z"):
        exp = get_experiment(name)
        assert (exp.clients, exp.budget, exp.initial_points) == (200, 50, 10)  # T = 40
        assert (exp.heterogeneity, exp.metric) == ("gp-perturbed", "local_simple_regret")
        assert exp.objective == {"name": "gp-grid", "noise": {"name": "gaussian", "sigma": 0.1}}
        dp = exp.entries[0].algorithm
        assert dp["regions"] == 2 and dp["clip"] == 11.0 and dp["n_features"] == 50
        assert (dp["weights"], dp["p_schedule"], dp["grid_size"]) == (
            "synthetic",
            "1/sqrt(t)",
            1000,
        )
        assert dp["own_fit_every"] == 0 and dp["own_lengthscale"] == 0.03
    assert _sweep("dpftsde-synthetic-q") == [(0.15, 1.0), (0.25, 1.0), (0.5, 1.0)]
    assert _sweep("dpftsde-synthetic-z") == [(0.25, 1.0), (0.25, 1.2), (0.25, 1.5)]
    paper = [e.paper_epsilon for e in get_experiment("dpftsde-synthetic-q").entries]
    assert paper == [5.93, 9.91, 20.12, None, None, None]
    paper = [e.paper_epsilon for e in get_experiment("dpftsde-synthetic-z").entries]
    assert paper == [9.91, 7.39, 5.22, None, None, None]

    lm = get_experiment("dpftsde-landmine")
    assert (lm.clients, lm.budget, lm.initial_points) == (29, 70, 10)  # T = 60
    assert (lm.heterogeneity, lm.metric, lm.needs_landmine) == (
        "fields",
        "local_simple_regret",
        True,
    )
    assert lm.ylabel == "1 − best validation AUC (mean over agents)"
    assert _sweep("dpftsde-landmine") == [(0.35, z) for z in (1.0, 1.6, 2.0, 3.0, 4.0)] + [
        (q, 1.0) for q in (0.1, 0.15, 0.2, 0.25)
    ]
    assert [e.paper_epsilon for e in lm.entries[:9]] == [
        15.17,
        7.12,
        5.14,
        3.05,
        2.16,
        3.75,
        5.98,
        7.69,
        9.82,
    ]
    dp = lm.entries[0].algorithm
    assert (dp["regions"], dp["clip"], dp["n_features"], dp["p_schedule"]) == (4, 22.0, 100, "1/t")

    for name in DP_EXPERIMENTS:
        exp = get_experiment(name)
        assert exp.private and exp.paper_reports
        names = [e.algorithm["name"] for e in exp.entries]
        assert names[-3:] == ["ftsde", "ftsde", "ts"]  # FTS-DE, FTS, TS
        assert exp.entries[-2].algorithm["regions"] == 1  # FTS: no distributed exploration
        assert len({e.key for e in exp.entries}) == len(exp.entries)
        for e in exp.entries:
            assert (e.privacy is not None) == (e.algorithm["name"] == "dpftsde")
            assert e.privacy is None or e.privacy["accountant"] == "moments"


@pytest.mark.parametrize("name", DP_EXPERIMENTS)
def test_every_entry_config_validates_with_privacy_only_where_private(name, tmp_path, monkeypatch):
    exp = get_experiment(name)
    validate = True
    if exp.needs_landmine:
        if _landmine_dir() is None or not _has_sklearn():
            validate = False  # the sections are still built and checked
        else:
            monkeypatch.setenv("FEDXAB_LANDMINE", str(_landmine_dir()))
    plan = make_plan(name, output=tmp_path, validate=validate)
    assert plan.budget == exp.budget and plan.seeds == exp.seeds
    assert plan.command_line == f"fedxab reproduce {name}"
    for pe in plan.entries:
        config = pe.config
        assert config.federation.clients == exp.clients
        assert config.run.budget == exp.budget and config.run.repeats == exp.seeds
        assert config.algorithm.name == pe.entry.algorithm["name"]
        if config.algorithm.name == "dpftsde":
            assert config.privacy is not None
            assert config.privacy.accountant == "moments"
            assert config.privacy.delta is None  # 1 / N^1.1
            assert config.privacy.accounting_delta({}, exp.clients) == exp.clients**-1.1
            assert config.to_dict()["privacy"]["accountant"] == "moments"
        else:
            assert config.privacy is None


def test_default_seeds_are_fewer_for_landmine_and_seeds_overrides(tmp_path):
    assert get_experiment("dpftsde-synthetic-q").seeds == 10
    assert get_experiment("dpftsde-synthetic-z").seeds == 10
    assert 1 <= get_experiment("dpftsde-landmine").seeds < 10
    plan = make_plan("dpftsde-landmine", seeds=10, output=tmp_path, validate=False)
    assert plan.seeds == 10 and plan.command_line.endswith("--seeds 10")
    assert all(pe.config.run.repeats == 10 for pe in plan.entries)


def test_overrides_change_n_and_t(tmp_path):
    plan = make_plan("dpftsde-synthetic-z", seeds=2, budget=20, clients=5, output=tmp_path)
    assert plan.command_line == (
        "fedxab reproduce dpftsde-synthetic-z --seeds 2 --budget 20 --clients 5"
    )
    for pe in plan.entries:
        assert pe.config.federation.clients == 5 and pe.config.run.budget == 20


def test_budget_must_exceed_the_initial_points(tmp_path):
    result = _run("dpftsde-synthetic-q", "--budget", "10", "-o", str(tmp_path / "out"))
    assert result.exit_code == 2, result.output
    assert "n_init" in result.output
    assert not (tmp_path / "out").exists()


def _moments_epsilon(q: float, z: float, releases: int, delta: float) -> float:
    event = PrivacyEvent("gaussian", z, q, 1.0, releases, "")
    return make_accountant("moments").epsilon([event], delta)


def test_tiny_synthetic_q_run_writes_curves_png_and_privacy_utility_table(tmp_path):
    out = tmp_path / "dq"
    args = ["dpftsde-synthetic-q", "--seeds", "2", "--budget", "14", "--clients", "4"]
    result = _run(*args, "--output", str(out))
    assert result.exit_code == 0, result.output
    assert "estimated time: about" in result.output
    assert "T = 4 iterations after 10 initial points" in result.output
    assert "privacy-utility table" in result.output

    exp = get_experiment("dpftsde-synthetic-q")
    table = json.loads((out / PRIVACY_UTILITY_JSON).read_text())
    assert table["experiment"] == "dpftsde-synthetic-q"
    assert (table["clients"], table["iterations"], table["seeds"]) == (4, 4, 2)
    assert table["command"] == "fedxab reproduce " + " ".join(args[:1] + args[1:])
    assert [r["key"] for r in table["rows"]] == [e.key for e in exp.entries]
    md = (out / PRIVACY_UTILITY_MD).read_text()
    for entry, row in zip(exp.entries, table["rows"], strict=True):
        res = load_results(out / entry.key / "results.json")
        assert [r.seed for r in res.runs] == [0, 1]
        assert all(r.evaluations == 4 * 14 for r in res.runs)
        # utility: the final local simple regret of each run, mean and std over seeds
        final = np.array([r.local_simple_regret[-1] for r in res.runs])
        assert row["local_simple_regret"]["per_seed"] == pytest.approx(final.tolist())
        assert row["local_simple_regret"]["mean"] == pytest.approx(final.mean())
        assert row["local_simple_regret"]["std"] == pytest.approx(final.std())
        assert "best_auc" not in row
        assert entry.label in md
        if entry.privacy is None:
            assert row["epsilon"] is None and row["delta"] is None
            assert all(r.privacy is None for r in res.runs)
            assert res.config.get("privacy") is None
            continue
        # epsilon: each run's ledger epsilon (largest over agents), mean over seeds
        assert res.config["privacy"]["accountant"] == "moments"
        ledger = [r.privacy["max_epsilon"] for r in res.runs]
        assert row["epsilon"]["per_seed"] == ledger
        assert row["epsilon"]["mean"] == pytest.approx(np.mean(ledger))
        assert row["accountant"] == "moments" and row["releases"] == 4
        assert row["delta"] == pytest.approx(4**-1.1)
        q, z = entry.algorithm["q"], entry.algorithm["z"]
        assert (row["q"], row["z"]) == (q, z)
        assert ledger[0] == pytest.approx(_moments_epsilon(q, z, 4, 4**-1.1), rel=1e-9)
        assert f"| {entry.label} | {row['epsilon']['mean']:.2f} | {entry.paper_epsilon:.2f} |" in md
    # larger q, larger epsilon
    eps = [r["epsilon"]["mean"] for r in table["rows"][:3]]
    assert eps == sorted(eps) and math.isfinite(eps[-1])

    png = out / "dpftsde-synthetic-q.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000
    manifest = json.loads((out / "reproduce.json").read_text())
    assert manifest["metric"] == "local_simple_regret"
    assert manifest["entries"][0]["privacy"]["accountant"] == "moments"
    assert manifest["entries"][-1]["privacy"] is None

    # --plot-only redraws the figure and rewrites the same table from the saved results
    (out / PRIVACY_UTILITY_JSON).unlink()
    (out / PRIVACY_UTILITY_MD).unlink()
    png.unlink()
    result = _run(*args, "--output", str(out), "--plot-only")
    assert result.exit_code == 0, result.output
    assert "privacy-utility table" in result.output
    assert json.loads((out / PRIVACY_UTILITY_JSON).read_text()) == table
    assert (out / PRIVACY_UTILITY_MD).read_text() == md
    assert png.stat().st_size > 5_000


@needs_landmine
def test_tiny_landmine_run_reports_best_auc(tmp_path, monkeypatch):
    """Two of the twelve entries (a full tiny run takes about 20 s): a private one and TS."""
    monkeypatch.setenv("FEDXAB_LANDMINE", str(_landmine_dir()))
    out = tmp_path / "dl"
    plan = make_plan("dpftsde-landmine", seeds=1, budget=12, clients=2, output=out)
    assert (
        plan.command_line == "fedxab reproduce dpftsde-landmine --seeds 1 --budget 12 --clients 2"
    )
    plan = dataclasses.replace(plan, entries=(plan.entries[0], plan.entries[-1]))
    results = run_plan(plan)
    table, json_path, md_path = write_privacy_utility(plan, results)
    assert json.loads(json_path.read_text()) == table
    assert [r["key"] for r in table["rows"]] == ["dpftsde-q0.35-z1", "ts"]
    for pe, row in zip(plan.entries, table["rows"], strict=True):
        res = load_results(pe.results_path)
        assert res.config["federation"] == {
            "clients": 2, "heterogeneity": "fields", "global_regret": False
        }  # fmt: skip
        assert res.runs[0].global_simple_regret is None  # the figure needs the local one only
        assert res.objective["optimum_value"] == 1.0  # an AUC of 1
        final = res.runs[0].local_simple_regret[-1]
        assert 0.0 <= final <= 1.0
        assert row["best_auc"]["mean"] == pytest.approx(1.0 - final)
        assert (row["epsilon"] is None) == (pe.entry.privacy is None)
    private = table["rows"][0]
    res = load_results(plan.entries[0].results_path)
    assert private["epsilon"]["mean"] == res.runs[0].privacy["max_epsilon"]
    assert private["releases"] == 2 and private["delta"] == pytest.approx(2**-1.1)
    assert private["epsilon"]["mean"] == pytest.approx(_moments_epsilon(0.35, 1.0, 2, 2**-1.1))
    md = md_path.read_text()
    assert "| best AUC |" in md and "best AUC = 1 − final regret" in md
    png = plot_plan(plan, results)
    assert png == out / "dpftsde-landmine.png" and png.stat().st_size > 5_000


@pytest.mark.parametrize(
    ("name", "calls", "expected"),
    [
        # linear: one run with C = 20 of the 200 agents per algorithm, scaled by 200 / 20
        ("dpftsde-synthetic-q", [20, 20, 20], 1.0 + (2.0 * 20 + 0.01 * 400) * 10),
        # linear too: without the global regret a landmine agent's work does not grow with M
        ("dpftsde-landmine", [6, 6, 6], 1.0 + (2.0 * 6 + 0.01 * 36) * 29 / 6),
    ],
)
def test_pilot_times_one_entry_per_algorithm_with_fewer_clients(
    name, calls, expected, tmp_path, monkeypatch
):
    import fedxab.reproduce.plan as planning

    seen = []

    def fake_timed(config):
        clients = config.federation.clients
        assert config.run.budget == get_experiment(name).budget and config.run.repeats == 1
        seen.append(clients)
        return 1.0, 2.0 * clients + 0.01 * clients**2  # setup, run

    monkeypatch.setattr(planning, "_timed", fake_timed)
    plan = make_plan(name, output=tmp_path, validate=False)
    timings = planning.pilot(plan)
    assert seen == calls  # dpftsde, ftsde, ts: one timed entry each
    assert set(timings) == {pe.entry.key for pe in plan.entries}
    for timing in timings.values():
        assert timing.estimate_s == pytest.approx(expected)
        assert timing.clients == (min(calls), max(calls))


def test_the_progress_of_a_reproduction_reports_phase_evaluations_and_epsilon(tmp_path):
    from fedxab.reproduce import run_plan

    plan = make_plan("dpftsde-synthetic-q", seeds=1, budget=12, clients=3, output=tmp_path)
    plan = dataclasses.replace(plan, entries=plan.entries[:1])  # DP-FTS-DE, q = 0.15
    seen: list[dict] = []

    def progress(pe, k, done, horizon, **details):
        seen.append(details)

    progress.details = True
    run_plan(plan, progress)
    last = seen[-1]
    assert {"regret", "phase", "evaluations", "epsilon"} <= set(last)
    assert last["evaluations"] == 3 * 12 and last["phase"] == 3  # init round + T = 2
    assert last["epsilon"] > 0
