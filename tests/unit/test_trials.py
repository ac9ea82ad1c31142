"""Each site's own trial history (issue 35 item 4) and the ``withheld`` block of a server's
results under local DP (issue 36 item 1)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import stat

import numpy as np
import pytest
from rich.console import Console

import fedxab
from fedxab.objectives.history import TrialLog, write_trials_csv
from fedxab.objectives.user import user_objectives
from fedxab.results import ResultsError, RunRecord, load_results, write_results

DOMAIN = [[0.0, 1.0], [-1.0, 1.0]]


def _loss(x):
    return float((x[0] - 0.3) ** 2 + abs(x[1]))


def test_a_log_records_each_call_in_the_users_units():
    (objective,) = user_objectives(_loss, DOMAIN, [0], direction="minimize").values()
    X = np.array([[0.5, 0.25], [0.1, -0.5]])
    assert objective(X).tolist() == [-_loss(x) for x in X]  # maximised inside fedxab
    trials = objective.trials.trials
    assert [t.number for t in trials] == [0, 1]
    assert [t.value for t in trials] == [_loss(x) for x in X]  # as the user's function said
    assert trials[1].params == {"x0": 0.1, "x1": -0.5}
    assert all(t.wall_s >= 0 for t in trials)


def test_a_vectorised_call_records_each_point_and_a_space_its_named_parameters():
    (batch,) = user_objectives(lambda X: X.sum(axis=1), DOMAIN, [0], vectorized=True).values()
    batch(np.array([[0.5, 0.25], [0.25, -0.5]]))
    assert [(t.params, t.value) for t in batch.trials.trials] == [
        ({"x0": 0.5, "x1": 0.25}, 0.75),
        ({"x0": 0.25, "x1": -0.5}, -0.25),
    ]
    space = {"lr": fedxab.Float(1e-3, 1e-1, log=True), "kind": fedxab.Categorical(["a", "b"])}
    results = fedxab.federate(
        lambda p: float(np.log10(p["lr"]) + (p["kind"] == "b")), space=space, budget=12, clients=1
    )
    (outcome,) = results.runs[0].clients
    assert len(outcome.trials) == 12
    for t in outcome.trials:  # by name, in the user's units, as the function was given them
        assert set(t.params) == {"lr", "kind"} and 1e-3 <= t.params["lr"] <= 1e-1
        assert t.value == np.log10(t.params["lr"]) + (t.params["kind"] == "b")


def test_a_value_that_is_not_a_number_is_no_trial():
    log = TrialLog()
    log.add(np.zeros(2), "not a number", 0.1)
    log.add(np.zeros(2), float("nan"), 0.1)
    log.add_batch([np.zeros(2)] * 2, [1.0], 0.1)  # one value for two points
    assert log.trials == []


def test_federate_returns_each_clients_trials_and_writes_them_as_csv(tmp_path):
    results = fedxab.federate(_loss, DOMAIN, budget=40, clients=2, direction="minimize")
    run = results.runs[0]
    for outcome in run.clients:
        assert len(outcome.trials) == 40
        for t in outcome.trials:
            assert t.value == _loss(np.array([t.params["x0"], t.params["x1"]]))
        assert outcome.best_value == min(t.value for t in outcome.trials)
    rows = run.trials_table()
    assert len(rows) == 80 and set(rows[0]) == {"client", "number", "x0", "x1", "value", "wall_s"}
    write_results(results, tmp_path)
    path = tmp_path / "trials-seed0-client1.csv"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # a site's trials are private to it
    with open(path, newline="") as handle:
        read = list(csv.DictReader(handle))
    assert [float(r["value"]) for r in read] == [t.value for t in run.clients[1].trials]
    # the results file itself holds no trial: no message or file meant for others does
    assert (
        "trials" not in json.loads((tmp_path / "results.json").read_text())["runs"][0]["clients"][0]
    )


def test_the_csv_of_rows_with_other_keys_has_every_column(tmp_path):
    rows = [{"a": 1}, {"a": 2, "b": 3}]  # (rows of other shapes: the union of the keys)
    write_trials_csv(tmp_path / "t.csv", rows)
    assert (tmp_path / "t.csv").read_text().splitlines() == ["a,b", "1,", "2,3"]


WITHHELD = {"reason": "local DP", "detail": "why", "fields": ["clients", "cumulative_regret"]}


def _withheld_results(tmp_path):
    results = fedxab.federate(_loss, DOMAIN, budget=20, clients=2)
    run = dataclasses.replace(results.runs[0], clients=None, withheld=WITHHELD)
    return dataclasses.replace(results, runs=(run,))


def test_a_withheld_block_loads_and_the_tables_say_withheld(tmp_path):
    from fedxab.cli import _clients_table, _summary_table

    path = write_results(_withheld_results(tmp_path), tmp_path)
    loaded = load_results(path)
    run = loaded.runs[0]
    assert run.withheld == WITHHELD and run.clients is None
    assert run.is_withheld("clients") and not run.is_withheld("simple_regret")
    console = Console(file=io.StringIO(), width=200)
    console.print(_clients_table(loaded))
    console.print(_summary_table(loaded))
    text = console.file.getvalue()
    assert text.count("withheld (local DP)") == 3  # the clients, the two regret columns
    from fedxab.monitoring.plots import observed_band

    with pytest.raises(ResultsError, match="withheld \\(local DP\\): plot a client's own"):
        observed_band(loaded)


@pytest.mark.parametrize(
    "bad", [{"fields": ["clients"]}, {"reason": "local DP", "fields": "clients"}, "local DP"]
)
def test_a_malformed_withheld_block_is_refused(bad):
    data = RunRecord.from_dict(_withheld_results_dict()).to_dict()
    data["withheld"] = bad
    with pytest.raises(ResultsError, match="'withheld' must be an object"):
        RunRecord.from_dict(data)


def _withheld_results_dict():
    run = fedxab.federate(_loss, DOMAIN, budget=20, clients=2).runs[0]
    return dataclasses.replace(run, withheld=WITHHELD).to_dict()


def test_the_clients_table_shows_a_best_value_released_under_dp_as_such(tmp_path):
    from fedxab.cli import _clients_table

    about = {"mechanism": "gaussian", "epsilon": 0.5, "delta": 1e-5, "sigma": 0.25}
    released = {
        "0": {"best_value_dp": 0.8125, "range": [0.0, 1.0], **about},
        "1": {"refused": "over its budget", "range": [0.0, 1.0], **about},
    }
    results = _withheld_results(tmp_path)
    run = dataclasses.replace(results.runs[0], withheld={**WITHHELD, "best_value_dp": released})
    loaded = load_results(write_results(dataclasses.replace(results, runs=(run,)), tmp_path))
    assert loaded.runs[0].withheld["best_value_dp"] == released
    console = Console(file=io.StringIO(), width=200)
    console.print(_clients_table(loaded))
    text = console.file.getvalue()
    assert "best value (DP, epsilon 0.5): 0.8125" in text
    assert "best value (DP): refused: over its budget" in text


def test_the_printed_results_give_the_recommendation_whole_by_name_at_80_columns():
    """The summary table's recommendation column is cut to the terminal's width; the line
    after it names every parameter, in the user's units."""
    from fedxab.cli.render import print_results, recommendation_lines

    space = {
        "C": fedxab.Float(1e-2, 1e3, log=True),
        "gamma": fedxab.Float(1e-5, 1e-1, log=True),
        "kernel": fedxab.Categorical(["rbf", "poly"]),
        "degree": fedxab.Int(2, 5),
    }
    results = fedxab.federate(
        lambda p: -abs(np.log10(p["C"])) - (p["kernel"] == "poly"), space=space, clients=1, budget=8
    )
    cfg = fedxab.make_config(space=space, clients=1, budget=8)
    console = Console(file=io.StringIO(), width=80)
    print_results(console, results, cfg, "out/results.json", quiet=False, server=False)
    rec = results.runs[0].recommendation_params
    line = (
        f"recommendation (seed 0): C={rec['C']:.4g}, gamma={rec['gamma']:.4g}, "
        f"kernel={rec['kernel']}, degree={rec['degree']}"
    )
    assert recommendation_lines(results) == [line]
    assert line in console.file.getvalue().splitlines()
    assert recommendation_lines(fedxab.federate(_loss, DOMAIN, clients=1, budget=8)) == []  # a box
