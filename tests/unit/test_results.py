"""The results file: roundtrip, atomic write, schema validation, summary statistics."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np
import pytest

from fedxab.errors import FedxabError, StorageError
from fedxab.results import (
    RESULTS_FILENAME,
    SCHEMA,
    ResultsError,
    RunRecord,
    RunResults,
    load_results,
    summarize,
    write_results,
)


def _record(seed: int, final_cum: float, simple: float | None, T: int = 10) -> RunRecord:
    rounds = np.array([1, 5, T])
    cum = np.array([1.0, final_cum / 2, final_cum])
    return RunRecord(
        seed=seed,
        rounds=rounds,
        cumulative_regret=cum,
        recommendation=np.array([0.25, 0.5]),
        simple_regret=simple,
        evaluations=T,
        wall_time_s=0.125,
    )


def _results(*records: RunRecord) -> RunResults:
    return RunResults(
        config={"run": {"seed": 0, "repeats": len(records), "budget": 10, "output": "x"}},
        algorithm="hct",
        objective={
            "name": "himmelblau",
            "dim": 2,
            "domain": [[-5.0, 5.0], [-5.0, 5.0]],
            "optimum_value": 0.0,
            "maximizer": [3.0, 2.0],
        },
        runs=tuple(records),
    )


def test_summary_mean_and_std_by_hand():
    # final cumulative regrets 10 and 20 at T = 10  -> mean 15, population std 5
    # average regrets 1.0 and 2.0                   -> mean 1.5, std 0.5
    # simple regrets 0.1 and 0.3                    -> mean 0.2, std 0.1
    s = summarize([_record(0, 10.0, 0.1), _record(1, 20.0, 0.3)])
    assert s["runs"] == 2
    assert s["cumulative_regret"] == pytest.approx({"mean": 15.0, "std": 5.0})
    assert s["average_regret"] == pytest.approx({"mean": 1.5, "std": 0.5})
    assert s["simple_regret"] == pytest.approx({"mean": 0.2, "std": 0.1})


def test_summary_of_three_runs_and_of_one_run():
    # 3, 6, 9: mean 6, population std sqrt(((-3)^2 + 0 + 3^2) / 3) = sqrt(6)
    s = summarize([_record(k, v, 0.0) for k, v in enumerate([3.0, 6.0, 9.0])])
    assert s["cumulative_regret"]["mean"] == pytest.approx(6.0)
    assert s["cumulative_regret"]["std"] == pytest.approx(math.sqrt(6.0))
    one = summarize([_record(0, 4.0, 0.5)])
    assert one["cumulative_regret"] == {"mean": 4.0, "std": 0.0}


def test_summary_with_unknown_optimum_is_null():
    rec = RunRecord(
        seed=0,
        rounds=np.array([1, 2]),
        cumulative_regret=None,
        recommendation=np.array([0.5]),
        simple_regret=None,
        evaluations=2,
        wall_time_s=0.0,
    )
    s = summarize([rec])
    assert s["cumulative_regret"] == {"mean": None, "std": None}
    assert rec.to_dict()["average_regret"] is None


def test_write_load_roundtrip(tmp_path):
    res = _results(_record(7, 10.0, 0.1), _record(8, 20.0, 0.3))
    path = write_results(res, tmp_path / "out" / "nested")
    assert path == tmp_path / "out" / "nested" / RESULTS_FILENAME
    data = json.loads(path.read_text())
    for key in (
        "schema",
        "fedxab_version",
        "created_at",
        "config",
        "algorithm",
        "objective",
        "runs",
        "summary",
        "communication",
        "privacy",
    ):
        assert key in data
    assert data["schema"] == SCHEMA
    assert data["communication"] is None and data["privacy"] is None
    assert data["created_at"].endswith("+00:00")
    run0 = data["runs"][0]
    assert run0["rounds"] == [1, 5, 10]
    assert run0["average_regret"] == pytest.approx([1.0, 1.0, 1.0])  # 1/1, 5/5, 10/10
    assert data["summary"]["cumulative_regret"] == pytest.approx({"mean": 15.0, "std": 5.0})

    back = load_results(path)
    assert back.source == path
    assert back.algorithm == "hct"
    assert back.objective == res.objective
    assert back.config == res.config
    assert back.created_at == res.created_at
    assert len(back.runs) == 2
    for a, b in zip(res.runs, back.runs, strict=True):
        assert a.seed == b.seed
        np.testing.assert_array_equal(a.rounds, b.rounds)
        np.testing.assert_array_equal(a.cumulative_regret, b.cumulative_regret)
        np.testing.assert_array_equal(a.recommendation, b.recommendation)
        assert a.simple_regret == b.simple_regret
        assert a.evaluations == b.evaluations
        assert a.wall_time_s == b.wall_time_s
    assert back.to_dict() == res.to_dict()


def test_atomic_write_leaves_no_temporary_file(tmp_path):
    res = _results(_record(0, 10.0, 0.1))
    write_results(res, tmp_path)
    write_results(res, tmp_path)  # overwrite in place
    assert sorted(os.listdir(tmp_path)) == [RESULTS_FILENAME]


def test_failed_write_keeps_old_file_and_removes_temporary(tmp_path, monkeypatch):
    old = write_results(_results(_record(0, 10.0, 0.1)), tmp_path)
    before = old.read_text()

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(StorageError, match=r"results.json: cannot write it \(disk full\)"):
        write_results(_results(_record(1, 99.0, 0.5)), tmp_path)
    assert old.read_text() == before
    assert sorted(os.listdir(tmp_path)) == [RESULTS_FILENAME]


def _write_json(path, data) -> None:
    path.write_text(json.dumps(data))


def test_bad_schema_is_rejected(tmp_path):
    path = write_results(_results(_record(0, 10.0, 0.1)), tmp_path)
    data = json.loads(path.read_text())
    data["schema"] = "someone.else/2"
    _write_json(path, data)
    with pytest.raises(ResultsError, match=r"schema is 'someone\.else/2'.*fedxab\.results/1"):
        load_results(path)
    _write_json(path, [1, 2, 3])
    with pytest.raises(ResultsError, match="top level"):
        load_results(path)


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda d: d.pop("runs"), "missing field 'runs'"),
        (lambda d: d.__setitem__("runs", []), "non-empty"),
        (lambda d: d["runs"][0].pop("rounds"), r"runs\[0\].*missing field 'rounds'"),
        (lambda d: d["runs"][0].__setitem__("cumulative_regret", [1.0]), "1 values for 3 rounds"),
        (lambda d: d["runs"][0].__setitem__("rounds", [3, 2, 10]), "increasing"),
        (lambda d: d["runs"][0].__setitem__("seed", "abc"), "malformed"),
        (lambda d: d["runs"][0].__setitem__("regret_coverage", {"clients": [1]}), "fields"),
        (
            lambda d: d["runs"][0].__setitem__(
                "regret_coverage", {"pulls_expected": 10, "pulls_received": -1, "clients": [1]}
            ),
            "pull counts >= 0",
        ),
    ],
)
def test_malformed_results_are_rejected_with_a_reason(tmp_path, mutate, match):
    path = write_results(_results(_record(0, 10.0, 0.1)), tmp_path)
    data = json.loads(path.read_text())
    mutate(data)
    _write_json(path, data)
    with pytest.raises(ResultsError, match=match):
        load_results(path)


def test_not_json_and_missing_file(tmp_path):
    bad = tmp_path / "results.json"
    bad.write_text('{\n  "schema": "fedxab.results/1",\n  oops\n}\n')
    with pytest.raises(ResultsError, match="not valid JSON.*line 3"):
        load_results(bad)
    with pytest.raises(ResultsError, match="not found"):
        load_results(tmp_path / "nope.json")
    assert issubclass(ResultsError, FedxabError)


def test_an_incomplete_run_says_so_in_its_file_and_in_the_summary_table(tmp_path):
    from rich.console import Console

    from fedxab.cli import _summary_table

    coverage = {"pulls_expected": 60, "pulls_received": 50, "clients": [4]}
    complete = _record(0, 10.0, 0.1)
    short = dataclasses.replace(_record(1, 12.0, 0.1), regret_coverage=coverage)
    loaded = load_results(write_results(_results(complete, short), tmp_path))
    assert [r.regret_coverage for r in loaded.runs] == [None, coverage]
    assert "regret_coverage" not in complete.to_dict()
    console = Console(record=True, width=200)
    console.print(_summary_table(loaded))
    text = console.export_text()
    assert "incomplete regret: seed 1 counts 50 of 60 pulls" in text
    assert "client(s) 4" in text


def test_rounds_no_client_reported_are_null_in_the_file_and_nan_when_read(tmp_path):
    """Found at 20,000 clients with no telemetry in: the mean over no client is NaN, which
    made writing results.json fail (JSON has no NaN)."""
    coverage = {"pulls_expected": 30, "pulls_received": 0, "clients": [0, 1, 2]}
    empty = dataclasses.replace(
        _record(0, 10.0, 0.1),
        cumulative_regret=np.array([np.nan, np.nan, np.nan]),
        regret_coverage=coverage,
    )
    path = write_results(_results(empty), tmp_path)
    assert json.loads(path.read_text())["runs"][0]["cumulative_regret"] == [None, None, None]
    loaded = load_results(path).runs[0]
    assert np.isnan(loaded.cumulative_regret).all()
    assert loaded.final_cumulative_regret is None or math.isnan(loaded.final_cumulative_regret)
