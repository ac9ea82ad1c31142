"""The estimate and the progress of ``fedxab reproduce`` (fedxab.reproduce.plan): from the pilot
runs' timings, the plan's wall time, and how far a run has brought it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fedxab.reproduce.plan import PilotTiming, PlanProgress, estimated_time


def _plan(seeds: int, keys: list[str]):
    """What the estimate reads of a plan: its seeds and its entries' keys, in order."""
    entries = [SimpleNamespace(entry=SimpleNamespace(key=key)) for key in keys]
    return SimpleNamespace(seeds=seeds, entries=entries)


def _timings(estimates: dict[str, float]) -> dict[str, PilotTiming]:
    return {
        key: PilotTiming(key, (50, 200), 0.1, (0.2, 0.8), 1.0, estimate)
        for key, estimate in estimates.items()
    }


def test_the_estimate_shares_the_total_among_jobs_but_never_below_the_longest_entry():
    plan = _plan(3, ["a", "b", "c"])
    timings = _timings({"a": 1.0, "b": 2.0, "c": 6.0})
    assert estimated_time(plan, timings) == pytest.approx(3 * 9.0)
    assert estimated_time(plan, timings, jobs=2) == pytest.approx(3 * 6.0)  # c alone is 6
    assert estimated_time(plan, _timings({"a": 4.0, "b": 4.0, "c": 4.0}), jobs=2) == (
        pytest.approx(3 * 6.0)
    )


def test_progress_weighs_each_run_by_its_entrys_estimate():
    plan = _plan(2, ["a", "b"])
    share = PlanProgress(plan, _timings({"a": 1.0, "b": 3.0}))
    assert share.total == pytest.approx(8.0)
    assert share.at("a", 0, 0, 100) == (0.0, 0)
    assert share.at("a", 1, 50, 100) == (pytest.approx(1.5), 1)
    assert share.at("b", 0, 100, 100) == (pytest.approx(5.0), 3)
    assert share.at("b", 1, 120, 100) == (pytest.approx(8.0), 4)  # past the horizon: done


def test_an_entry_too_fast_to_time_still_moves_the_bar():
    share = PlanProgress(_plan(1, ["a"]), _timings({"a": 0.0}))
    assert share.total == pytest.approx(1e-6)
    assert share.at("a", 0, 1, 2)[0] == pytest.approx(0.5e-6)
