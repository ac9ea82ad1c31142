"""The dashboard's state: bounded curves, the epsilon panel, the client band, and that a
finished run shows exactly its record's numbers."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest

from fedxab.dashboard.state import (
    CURVE_POINTS,
    EPSILON_BINS,
    NEAREST,
    Curve,
    DashboardState,
    epsilon_panel,
    outcome_band,
    state_from_results,
)
from fedxab.run.observe import PrivacyView
from fedxab.run.outcome import ClientOutcome


def test_curve_stays_bounded_and_keeps_first_and_newest_points():
    curve = Curve(limit=100)
    for t in range(1, 10_001):
        curve.add(t, t * 0.5)
    points = curve.to_json()
    assert len(points) <= 101
    assert points[0] == [1.0, 0.5]
    assert points[-1] == [10_000.0, 5_000.0]
    xs = [x for x, _ in points]
    assert xs == sorted(xs)
    gaps = np.diff(xs[:-1])
    assert gaps.max() == gaps.min()  # evenly thinned, like a zoomed-out chart


def test_curve_replace_thins_evenly_and_keeps_the_last_point():
    curve = Curve()
    xs = np.arange(1, 5001)
    curve.replace(xs, xs * 2.0)
    points = curve.to_json()
    assert len(points) == CURVE_POINTS
    assert points[0] == [1.0, 2.0] and points[-1] == [5000.0, 10_000.0]


def test_curve_writes_nan_as_null():
    curve = Curve()
    curve.add(1, math.nan)
    assert curve.to_json() == [[1.0, None]]


def test_epsilon_panel_histogram_nearest_and_over_budget():
    rng = np.random.default_rng(0)
    eps = rng.uniform(0, 3.0, size=100_000)
    view = PrivacyView(dict(enumerate(eps)), 2.5, 1e-5, frozenset({7, 9}))
    panel = epsilon_panel(view)
    counts, edges = panel["histogram"]["counts"], panel["histogram"]["edges"]
    assert len(counts) == EPSILON_BINS and sum(counts) == eps.size
    assert edges[0] == 0.0 and edges[-1] == pytest.approx(eps.max())
    assert panel["max"] == eps.max() and panel["mean"] == pytest.approx(eps.mean(), rel=1e-12)
    assert panel["over_budget"] == int((eps > 2.5).sum())
    assert panel["withdrawn"] == 2
    expected = np.argsort(-eps, kind="stable")[:NEAREST]
    assert [row["client"] for row in panel["nearest"]] == expected.tolist()
    assert panel["nearest"][0]["share"] == pytest.approx(eps.max() / 2.5)


def test_epsilon_panel_without_budget_spans_the_largest_epsilon():
    panel = epsilon_panel(PrivacyView({0: 0.0, 1: 0.0}, None, None, frozenset()))
    assert panel["histogram"]["edges"][-1] == 1.0  # all zero: a unit range, not an empty one
    assert panel["budget"] is None and panel["over_budget"] == 0
    assert panel["nearest"][0]["share"] is None


def _outcome(m: int, curve: list[float]) -> ClientOutcome:
    rounds = np.arange(1, len(curve) + 1)
    return ClientOutcome(m, len(curve), max(curve), np.zeros(1), rounds, np.array(curve), None)


def test_outcome_band_is_the_per_round_statistics_over_clients():
    curves = [[np.nan, 1.0, 2.0], [0.5, 0.5, 3.0], [np.nan, 2.0, 2.5]]
    band = outcome_band([_outcome(m, c) for m, c in enumerate(curves)])
    values = np.array(curves)
    assert band["rounds"] == [1, 2, 3] and band["clients"] == 3
    assert band["mean"] == pytest.approx(np.nanmean(values, axis=0).tolist())
    assert band["min"] == [0.5, 0.5, 2.0] and band["max"] == [0.5, 2.0, 3.0]
    assert band["p50"] == pytest.approx(np.nanpercentile(values, 50, axis=0).tolist())
    assert outcome_band([]) is None


def _record(seed: int = 0):
    """A finished private federated run, small enough for a unit test."""
    from fedxab.api import run_job
    from fedxab.config import config_from_dict

    config = config_from_dict(
        {
            "run": {"seed": seed, "repeats": 1, "budget": 600},
            "objective": {"name": "garland"},
            "algorithm": {"name": "dpfedpne", "epsilon": 0.5, "privacy_delta": 1e-3},
            "federation": {"clients": 6, "heterogeneity": "shift"},
            "broker": {"url": "inprocess://"},
            "privacy": {"accountant": "rdp", "budget_epsilon": 0.7},
        }
    )
    state = DashboardState(config.to_dict())
    results = run_job(config, metrics=state)
    return state, results


def test_a_finished_run_shows_its_records_numbers():
    state, results = _record()
    record = results.runs[0]
    run = state.snapshot()["run"]
    assert run["status"] == "finished"
    assert run["final"]["cumulative_regret"] == record.final_cumulative_regret
    assert run["curves"]["cumulative"][-1] == [
        float(record.rounds[-1]),
        record.final_cumulative_regret,
    ]
    assert run["privacy"]["max"] == max(record.privacy["epsilon"])
    assert sum(run["privacy"]["histogram"]["counts"]) == 6
    assert run["clients"]["total"] == 6
    assert run["clients"]["withdrawn"] == len(record.privacy["withdrawn"])
    assert run["phases"]["count"] == len(record.communication["per_phase"])
    assert run["phases"]["messages_up"] == record.communication["messages_up"]
    assert run["band"]["clients"] == 6
    client = state.client(2)
    assert client["epsilon"] == record.privacy["epsilon"][2]
    assert client["outcome"]["best_value"] == record.clients[2].best_value


def test_the_results_file_alone_gives_the_same_figures(tmp_path):
    from fedxab.results import load_results, write_results

    state, results = _record()
    offline = state_from_results(load_results(write_results(results, tmp_path)))
    live_run, file_run = state.snapshot()["run"], offline.snapshot()["run"]
    for key in ("final", "curves", "privacy", "band", "clients"):
        assert file_run[key] == live_run[key], key
    assert {k: v for k, v in file_run["phases"].items() if k != "durations"} == {
        k: v for k, v in live_run["phases"].items() if k != "durations"
    }


def test_unknown_run_or_client_is_a_key_error_naming_the_range():
    state, _ = _record()
    with pytest.raises(KeyError, match="runs 0 to 0"):
        state.snapshot(3)
    with pytest.raises(KeyError, match="clients 0 to 5"):
        state.client(6)


def test_privacy_refreshes_slow_down_to_a_share_of_the_run(monkeypatch):
    clock = types.SimpleNamespace(now=100.0)
    monkeypatch.setattr("fedxab.dashboard.state.time.monotonic", lambda: clock.now)
    state = DashboardState(privacy_interval_s=1.0)
    state.start_run(run_id="r", clients=2, budget=10)
    assert not state.privacy_due()
    clock.now += 1.0
    assert state.privacy_due()
    clock.now += 0.05  # the runner took 50 ms to recompute epsilon
    state.on_privacy({0: 0.1}, budget_epsilon=None, delta=None)
    assert state.privacy_interval_s == pytest.approx(5.0)  # 50 ms is 1% of 5 s
    clock.now += 4.0
    assert not state.privacy_due()
    clock.now += 1.0
    assert state.privacy_due()
