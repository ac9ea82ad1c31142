"""The in-process federation runner: budgets, communication counts, regret, determinism, results."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from config_factory import sim_config
from typer.testing import CliRunner

from fedxab.agents.federation import Federation, run_federated, run_federated_config
from fedxab.algorithms.fedpne import FedPNEBroadcast, FedPNEClient, FedPNEReport
from fedxab.algorithms.protocol import Finished
from fedxab.algorithms.registry import make_federation
from fedxab.broker.codec import packb
from fedxab.cli import app
from fedxab.config import config_from_dict
from fedxab.errors import ConfigError
from fedxab.objectives.families import input_shift_family, value_offset_family
from fedxab.objectives.noise import UniformNoise
from fedxab.objectives.registry import make_objective
from fedxab.results import ResultsError, RunResults, load_results, write_results
from fedxab.run.accounting import FederationError
from fedxab.seeding import stream

EXAMPLE = "examples/fedpne_garland.toml"


def _config(m, t, *, objective="garland", heterogeneity="offset", repeats=1, seed=0, **alg):
    return sim_config(
        clients=m,
        budget=t,
        objective={"name": objective, "noise": {"name": "uniform", "half_width": 0.1}},
        heterogeneity=heterogeneity,
        params=alg,
        run={"seed": seed, "repeats": repeats},
    )


# ------------------------------------------------------------------ budget and communication
def test_every_client_uses_exactly_its_budget_and_one_message_per_phase():
    m, t = 5, 3000
    fed = Federation(_config(m, t), seed=0)
    rec = fed.run()
    assert fed.used.tolist() == [t] * m
    assert [c.used for c in fed.clients] == [t] * m
    assert rec.evaluations == m * t
    comm = rec.communication
    assert comm["clients"] == m
    assert comm["rounds"] == len(fed.phases) == len(comm["per_phase"]) == fed.server.phase
    for k, p in enumerate(comm["per_phase"], start=1):
        assert p["phase"] == k
        assert p["messages_up"] == p["messages_down"] == p["reports_accepted"] == m
    assert comm["messages_up"] == comm["messages_down"] == m * comm["rounds"]
    assert sum(p["evaluations"] for p in comm["per_phase"]) == m * t
    # the phases' depths are the server's (history + the truncated last phase)
    depths = [h.depth for h in fed.server.history]
    if fed.server.phase > len(depths):
        depths.append(fed.server.depth)
    assert [p["depth"] for p in comm["per_phase"]] == depths


def _expected_bytes(fed: Federation) -> tuple[list[int], list[int]]:
    """Per phase (down, up) bytes, rebuilt from the server's history and final state."""
    server, m = fed.server, fed.n_clients
    phases = [(h.phase, h.depth, h.nodes, True) for h in server.history]
    if server.phase > len(server.history):  # the truncated last phase
        phases.append((server.phase, server.depth, server.active, False))
    down, up = [], []
    for phase, depth, nodes, complete in phases:
        t_h = math.ceil(server.constants.tau(depth) / m)
        b = FedPNEBroadcast(phase, depth, np.asarray(nodes, dtype=np.int64), t_h)
        down.append(len(packb(b.to_wire())) * m)
        reports = [
            FedPNEReport(phase, j, True, np.zeros(len(nodes)))
            if complete
            else FedPNEReport(phase, j, False)
            for j in range(m)
        ]
        up.append(sum(len(packb(r.to_wire())) for r in reports))
    return down, up


@pytest.mark.parametrize(("m", "t"), [(5, 3000), (2, 50), (130, 400)])
def test_bytes_up_and_down_equal_the_encoded_sizes(m, t):
    fed = Federation(_config(m, t), seed=1)
    rec = fed.run()
    down, up = _expected_bytes(fed)
    per_phase = rec.communication["per_phase"]
    assert [p["bytes_down"] for p in per_phase] == down
    assert [p["bytes_up"] for p in per_phase] == up
    assert rec.communication["bytes_down"] == sum(down)
    assert rec.communication["bytes_up"] == sum(up)


# ----------------------------------------------------------------------------------- regret
def _drive_independently(m, t, seed, clients_objectives, points_out):
    """A separate plain loop (no codec): same algorithm, same noise streams; collects points."""
    server, clients = make_federation(
        "fedpne", np.array([[0.0, 1.0]]), n_clients=m, budget=t, seed=seed, params={}
    )
    noise = UniformNoise(0.1)
    rngs = [stream(seed, "noise", j) for j in range(m)]

    def evaluator(j):
        def evaluate(X):
            points_out[j].append(X.copy())
            fx = clients_objectives[j](X)
            return fx + noise.sample(fx, rngs[j])

        return evaluate

    msg = server.start()
    while not isinstance(msg, Finished):
        for j, client in enumerate(clients):
            server.receive(j, client.answer(msg, evaluator(j)))
        msg = server.close_phase()
    return server, msg


def test_tiny_run_regret_equals_an_independent_recomputation():
    m, t, seed = 2, 50, 4
    fed = Federation(_config(m, t), seed=seed, keep_points=True)
    rec = fed.run()
    base = make_objective("garland")
    family = value_offset_family(base, m, seed)  # the family the runner must have built
    points = [np.concatenate(p) for p in fed.points]
    assert all(p.shape == (t, 1) for p in points)

    # the runner drove the algorithm exactly as a plain loop with the same streams does
    mine = [[] for _ in range(m)]
    server, finished = _drive_independently(m, t, seed, family.clients, mine)
    for j in range(m):
        np.testing.assert_array_equal(np.concatenate(mine[j]), points[j])
    assert len(server.history) == len(fed.server.history)
    for a, b in zip(server.history, fed.server.history, strict=True):
        np.testing.assert_array_equal(a.means, b.means)  # same noisy rewards reached the server
    np.testing.assert_array_equal(finished.recommendation, rec.recommendation)

    # global regret (1/M) sum_{s<=t} sum_m (f* - f(x_{m,s})), [FX]
    f_star = base.optimum_value
    inst = np.array([f_star - base(points[j]) for j in range(m)])  # (M, T)
    expected = np.cumsum(inst.sum(axis=0)) / m
    np.testing.assert_array_equal(rec.rounds, np.arange(1, t + 1))
    np.testing.assert_allclose(rec.cumulative_regret, expected, rtol=1e-12, atol=1e-12)
    assert np.all(np.diff(rec.cumulative_regret) >= 0)
    # local regret (1/M) sum_{s<=t} sum_m (f_m* - f_m(x_{m,s})), [PF]
    local = np.array([c.optimum_value - c(points[j]) for j, c in enumerate(family.clients)])
    np.testing.assert_allclose(
        rec.local_cumulative_regret, np.cumsum(local.sum(axis=0)) / m, rtol=1e-12, atol=1e-12
    )
    # simple regret of the recommendation, on the global objective
    assert rec.simple_regret == pytest.approx(f_star - base(rec.recommendation[None])[0])


def test_regret_curves_are_non_decreasing_on_the_rounds_grid():
    rec = run_federated(_config(10, 10_000), seed=0)
    assert rec.rounds[0] == 1 and rec.rounds[-1] == 10_000 and rec.rounds.size <= 500
    assert np.all(np.diff(rec.cumulative_regret) >= 0)
    assert np.all(np.diff(rec.local_cumulative_regret) >= 0)
    # offsets do not change regret terms: f_m* - f_m(x) = f* - f(x)
    np.testing.assert_allclose(rec.local_cumulative_regret, rec.cumulative_regret, rtol=1e-9)
    # Fed-PNE concentrates on the optimum: the average regret at T is far below a random
    # pull's (Garland's mean value is about 0.47 below f*)
    assert rec.final_average_regret < 0.15


def test_shift_heterogeneity_measures_local_regret_against_each_client_optimum():
    m, t, seed = 3, 400, 2
    fed = Federation(
        _config(m, t, objective="himmelblau", heterogeneity="shift"), seed, keep_points=True
    )
    rec = fed.run()
    family = input_shift_family(make_objective("himmelblau"), m, seed)
    points = [np.concatenate(p) for p in fed.points]
    local = sum(c.optimum_value - c(points[j]) for j, c in enumerate(family.clients))
    np.testing.assert_allclose(rec.local_cumulative_regret[-1], local.sum() / m, rtol=1e-9)
    glob = family.global_objective
    inst = sum(glob.optimum_value - glob(points[j]) for j in range(m))
    np.testing.assert_allclose(rec.cumulative_regret[-1], inst.sum() / m, rtol=1e-9)
    assert not np.allclose(rec.local_cumulative_regret, rec.cumulative_regret)


@pytest.mark.parametrize(("heterogeneity", "global_calls"), [("shift", 0), ("offset", None)])
def test_without_global_regret_the_run_and_its_local_regret_are_unchanged(
    heterogeneity, global_calls, monkeypatch
):
    """``[federation] global_regret = false``: the same pulls, rewards and local regret, no
    global curves, and the global objective is evaluated only where f_m is computed from it
    (value offsets); with input shifts never."""
    from fedxab.run.evaluation import GlobalValues

    calls = []
    evaluate = GlobalValues.__call__
    monkeypatch.setattr(
        GlobalValues, "__call__", lambda self, X: calls.append(1) or evaluate(self, X)
    )
    base = _config(3, 400, objective="himmelblau", heterogeneity=heterogeneity).to_dict()
    base["federation"]["global_regret"] = False
    off = Federation(config_from_dict(base), 2, keep_points=True)
    rec_off = off.run()
    off_calls = len(calls)
    on = Federation(_config(3, 400, objective="himmelblau", heterogeneity=heterogeneity), 2,
                    keep_points=True)  # fmt: skip
    rec_on = on.run()
    for a, b in zip(off.points, on.points, strict=True):
        np.testing.assert_array_equal(np.concatenate(a), np.concatenate(b))
    np.testing.assert_array_equal(rec_off.local_cumulative_regret, rec_on.local_cumulative_regret)
    np.testing.assert_array_equal(rec_off.local_simple_regret, rec_on.local_simple_regret)
    assert rec_off.global_simple_regret is None and rec_on.global_simple_regret is not None
    assert off_calls == (len(calls) - off_calls if global_calls is None else global_calls)


def test_no_heterogeneity_gives_equal_local_and_global_regret():
    rec = run_federated(_config(3, 500, heterogeneity="none"), seed=0)
    np.testing.assert_array_equal(rec.local_cumulative_regret, rec.cumulative_regret)


def test_progress_reports_rounds_and_running_global_regret():
    calls = []
    rec = run_federated(_config(4, 2000), seed=0, progress=lambda *a: calls.append(a))
    assert calls and calls[-1][:2] == (2000, 2000)
    assert [c[0] for c in calls] == sorted({c[0] for c in calls})
    assert calls[-1][2] == pytest.approx(rec.final_cumulative_regret, rel=1e-9)


# ----------------------------------------------------------------------------- determinism
def _key(rec):
    return (
        rec.cumulative_regret.tolist(),
        rec.local_cumulative_regret.tolist(),
        rec.recommendation.tolist(),
        rec.simple_regret,
        rec.communication,
    )


@pytest.mark.parametrize(
    ("objective", "heterogeneity"), [("garland", "offset"), ("himmelblau", "shift")]
)
def test_same_seed_same_results_different_seed_different(objective, heterogeneity):
    cfg = _config(4, 1500, objective=objective, heterogeneity=heterogeneity)
    a, b = run_federated(cfg, seed=3), run_federated(cfg, seed=3)
    assert _key(a) == _key(b)
    c = run_federated(cfg, seed=11)
    assert a.cumulative_regret.tolist() != c.cumulative_regret.tolist()
    # the noisy rewards differ with the seed even where the pulled points coincide
    fa, fc = Federation(cfg, 3), Federation(cfg, 11)
    fa.run(), fc.run()
    assert not np.array_equal(fa.server.history[0].means, fc.server.history[0].means)


# ------------------------------------------------------------------------ contract checks
class _Greedy(FedPNEClient):
    """A buggy client: pulls one point more than the broadcast asks for."""

    def answer(self, broadcast, evaluate):
        evaluate(self.partition.centres(broadcast.depth, broadcast.nodes[:1]))
        return super().answer(broadcast, evaluate)


def test_a_client_exceeding_its_budget_is_an_error():
    fed = Federation(_config(2, 50), seed=0)
    fed.hosted.clients[1] = _Greedy(1, [[0.0, 1.0]], budget=50)
    with pytest.raises(FederationError, match=r"client 1 asked for .* budget T = 50"):
        fed.run()


def test_a_client_leaving_budget_unused_is_an_error():
    # T = 50 ends in a truncated phase; a client that believes T = 49 reports incomplete there
    # too, so the protocol carries on, but it leaves one evaluation unused
    fed = Federation(_config(2, 50), seed=0)
    fed.hosted.clients[0] = FedPNEClient(0, [[0.0, 1.0]], budget=49)
    with pytest.raises(FederationError, match=r"did not use exactly .*\(client 0: 49 of 50\)"):
        fed.run()


def test_a_single_agent_config_is_refused():
    with pytest.raises(ConfigError, match="not a federated algorithm"):
        Federation(config_from_dict({"run": {"budget": 10}}), seed=0)


# ------------------------------------------------------------------------------- results
def test_results_file_roundtrip_with_communication_and_local_regret(tmp_path):
    res = run_federated_config(_config(3, 500, repeats=2, seed=5))
    assert [r.seed for r in res.runs] == [5, 6]
    top = res.communication
    assert top["clients"] == 3 and top["runs"] == 2
    for key in ("rounds", "messages_up", "messages_down", "bytes_up", "bytes_down"):
        assert top[key] == pytest.approx(np.mean([r.communication[key] for r in res.runs]))
    assert res.summary["local_cumulative_regret"]["mean"] == pytest.approx(
        np.mean([r.local_cumulative_regret[-1] for r in res.runs])
    )
    path = write_results(res, tmp_path)
    data = json.loads(path.read_text())
    run0 = data["runs"][0]
    assert len(run0["local_cumulative_regret"]) == len(run0["rounds"])
    assert set(run0["communication"]) == {
        "clients",
        "rounds",
        "messages_up",
        "messages_down",
        "bytes_up",
        "bytes_down",
        "per_phase",
    }
    assert data["config"]["federation"] == {"clients": 3, "heterogeneity": "offset"}
    back = load_results(path)
    assert back.to_dict() == res.to_dict()
    for a, b in zip(res.runs, back.runs, strict=True):
        np.testing.assert_array_equal(a.local_cumulative_regret, b.local_cumulative_regret)
        assert a.communication == b.communication


def test_files_without_the_new_fields_still_load_and_bad_ones_are_rejected(tmp_path):
    res = run_federated_config(_config(2, 200))
    data = res.to_dict()
    old = json.loads(json.dumps(data))
    for run in old["runs"]:
        del run["local_cumulative_regret"], run["communication"]
    old["communication"] = None
    back = RunResults.from_dict(old)
    assert back.runs[0].local_cumulative_regret is None and back.runs[0].communication is None
    bad = json.loads(json.dumps(data))
    bad["runs"][0]["local_cumulative_regret"] = [1.0]
    with pytest.raises(ResultsError, match="'local_cumulative_regret' has 1 values"):
        RunResults.from_dict(bad)
    bad = json.loads(json.dumps(data))
    bad["runs"][0]["communication"]["bytes_up"] = -1
    with pytest.raises(ResultsError, match="communication.bytes_up"):
        RunResults.from_dict(bad)


# ------------------------------------------------------------------------------------ CLI
def test_cli_runs_the_fedpne_example_and_plots_local_regret(tmp_path):
    runner = CliRunner()
    out = tmp_path / "fed"
    result = runner.invoke(app, ["run", EXAMPLE, "--budget", "2000", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "10 clients" in result.output and "communication" in result.output
    assert "phases" in result.output and "bytes up" in result.output
    res = load_results(out / "results.json")
    assert res.algorithm == "fedpne" and len(res.runs) == 3
    assert all(r.evaluations == 10 * 2000 for r in res.runs)
    assert all(r.communication["messages_up"] == 10 * r.communication["rounds"] for r in res.runs)
    png = tmp_path / "local.png"
    result = runner.invoke(
        app,
        ["plot", str(out / "results.json"), "-o", str(png), "--metric", "local_cumulative_regret"],
    )
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
