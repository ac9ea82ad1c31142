"""Users' objectives over typed search spaces (issue 35 items 1, 2, 3 and 7): named parameters in
the user's units, Optuna objectives unchanged, one evaluation per point for deterministic
objectives, and one-line errors for bad input."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from cli_procs import FEDXAB

import fedxab
from fedxab.config import config_from_dict
from fedxab.errors import ConfigError, EvaluationError
from fedxab.objectives.trial import SpaceMismatchError
from fedxab.objectives.user import ObjectiveFailedError
from fedxab.results import RunResults

SPACE = {
    "lr": fedxab.Float(1e-4, 1e-1, log=True),
    "depth": fedxab.Int(1, 8),
    "kind": fedxab.Categorical(["a", "b", "c"]),
}


def score(lr: float, depth: int, kind: str, client_id: int = 0) -> float:
    """A smooth made-up validation score, best at lr = 1e-2, depth = 5, kind = "b"."""
    bonus = {"a": 0.0, "b": 0.2, "c": 0.1}[kind]
    return -((math.log10(lr) + 2.0) ** 2) - 0.05 * (depth - 5 - client_id % 2) ** 2 + bonus


def by_params(params: dict) -> float:
    assert set(params) == {"lr", "depth", "kind"}
    assert type(params["depth"]) is int and params["kind"] in ("a", "b", "c")
    assert 1e-4 <= params["lr"] <= 1e-1
    return score(**params)


def optuna_style(trial) -> float:
    lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
    depth = trial.suggest_int("depth", 1, 8)
    kind = trial.suggest_categorical("kind", ["a", "b", "c"])
    return score(lr, depth, kind)


def test_params_and_trial_objectives_give_the_same_named_results():
    a = fedxab.federate(by_params, space=SPACE, clients=2, budget=300, algorithm="fedpne")
    b = fedxab.federate(optuna_style, space=SPACE, clients=2, budget=300, algorithm="fedpne")
    run = a.runs[0]
    assert run.recommendation_params == b.runs[0].recommendation_params
    rec = run.recommendation_params
    assert set(rec) == {"lr", "depth", "kind"} and type(rec["depth"]) is int
    for outcome in run.clients:
        best = run.best_params[outcome.client]
        assert outcome.best_value == pytest.approx(score(**best))
    assert rec["kind"] == "b" and 1e-3 < rec["lr"] < 1e-1  # found the good region
    # results.json keeps the points and adds the parameters by name; reading it decodes again
    data = json.loads(a.to_json())["runs"][0]
    assert data["recommendation_params"] == rec
    assert data["clients"][0]["best_params"] == run.best_params[0]
    assert len(data["recommendation"]) == 3
    assert RunResults.from_dict(json.loads(a.to_json())).runs[0].best_params == run.best_params


def test_a_real_optuna_objective_runs_under_optuna_and_under_fedxab():
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def objective(trial):  # an Optuna objective as users write them: log, step, categorical
        x = trial.suggest_float("x", -3.0, 3.0)
        lr = trial.suggest_float("lr", 1e-3, 1.0, log=True)
        frac = trial.suggest_float("frac", 0.0, 1.0, step=0.25)
        n = trial.suggest_int("n", 2, 64, log=True)
        k = trial.suggest_int("k", 0, 10, step=2)
        kind = trial.suggest_categorical("kind", ["relu", "tanh", None])
        trial.set_user_attr("seen", True)
        return (
            (x - 1.0) ** 2
            + math.log10(lr) ** 2
            + (frac - 0.5) ** 2
            + (math.log2(n) - 3) ** 2
            + (k - 4) ** 2 / 10
            + (0.0 if kind == "tanh" else 1.0)
        )

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(objective, n_trials=30)
    # the space from the finished study's distributions, converted to fedxab's
    results = fedxab.federate(
        objective,
        space=study.best_trial.distributions,
        clients=2,
        budget=200,
        algorithm="fedpne",
        direction="minimize",
    )
    run = results.runs[0]
    for outcome in run.clients:
        params = run.best_params[outcome.client]
        assert set(params) == set(study.best_params)
        assert params["frac"] in (0.0, 0.25, 0.5, 0.75, 1.0) and params["k"] % 2 == 0
        # the value fedxab observed is what Optuna's trial gives at those parameters
        fixed = optuna.trial.FixedTrial(params)
        assert outcome.best_value == pytest.approx(objective(fixed))


@pytest.mark.parametrize("algorithm", ["pfhct", "fedpne", "local-hct", "ftsde", "auto"])
def test_a_deterministic_objective_is_never_evaluated_twice(algorithm):
    """Counts the user's calls: every parameter set is evaluated at most once per client,
    though the algorithms pull the same points again and again."""
    calls: Counter = Counter()

    def objective(params, client_id):
        calls[(client_id, tuple(sorted(params.items())))] += 1
        return score(**params, client_id=client_id)

    # FTS-DE: about 0.1 s of CPU per pull; auto (Fed-TPE) at 60: its 8 consensus candidates
    # include points a site has evaluated before
    budget = {"ftsde": 16, "auto": 60}.get(algorithm, 150)
    results = fedxab.federate(
        objective, space=SPACE, clients=2, budget=budget, algorithm=algorithm, deterministic=True
    )
    assert calls and max(calls.values()) == 1
    pulls = results.runs[0].evaluations
    assert pulls == 2 * budget and sum(calls.values()) <= pulls
    if algorithm in ("pfhct", "auto"):  # re-pulls (consensus repeats): the cache saved calls
        assert sum(calls.values()) < pulls


def test_a_deterministic_box_objective_is_called_once_per_point():
    calls: Counter = Counter()

    def objective(x, client_id):
        calls[(client_id, x.tobytes())] += 1
        return -float(np.sum((x - 0.3) ** 2))

    box = [[0, 1], [0, 1]]
    noisy = fedxab.federate(objective, box, clients=2, budget=200, algorithm="fedpne")
    assert sum(calls.values()) == 400 and max(calls.values()) > 1  # Fed-PNE re-pulls
    calls.clear()
    # the cache alone (Fed-PNE's noise_free mode off): the same run, repeats not called
    cached = fedxab.federate(
        objective,
        box,
        clients=2,
        budget=200,
        algorithm="fedpne",
        deterministic=True,
        params={"noise_free": False},
    )
    assert max(calls.values()) == 1 and sum(calls.values()) < 400
    assert cached.runs[0].to_dict()["clients"] == noisy.runs[0].to_dict()["clients"]
    calls.clear()
    # deterministic turns Fed-PNE's noise_free mode on: every pull is a new point, so the
    # budget counts calls of the function
    once = fedxab.federate(
        objective, box, clients=2, budget=200, algorithm="fedpne", deterministic=True
    )
    assert max(calls.values()) == 1 and sum(calls.values()) == 400
    assert once.runs[0].communication["rounds"] > noisy.runs[0].communication["rounds"]


def test_a_config_with_a_space_table():
    config = config_from_dict(
        {
            "objective": {"function": "m:f", "deterministic": True, "kwargs": {"scale": 2}},
            "space": {
                "lr": {"type": "float", "low": 1e-4, "high": 0.1, "log": True},
                "kind": {"type": "categorical", "choices": ["a", "b"]},
            },
            "algorithm": {"name": "fedpne"},
            "federation": {"clients": 2},
        }
    )
    assert config.search_space.names == ("lr", "kind")
    assert config.domain.tolist() == [[0.0, 1.0], [0.0, 1.0]]
    assert config_from_dict(config.to_dict()).search_space == config.search_space
    assert fedxab.run_id_for(config, 0) != fedxab.run_id_for(
        config_from_dict(
            {**config.to_dict(), "space": {"lr": {"type": "float", "low": 0, "high": 1}}}
        ),
        0,
    )


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("objective", "extra", "field"),
    [
        ({"function": "m:f", "domain": [[0, 1]], "directon": "minimize"}, {}, "objective.directon"),
        ({"function": "m:f", "domain": [[0, 1]], "scale": 2}, {}, "objective.scale"),
        ({"function": "m:f"}, {"space": {"lr": {"type": "float", "low": 1}}}, "space.lr.high"),
        (
            {"function": "m:f", "domain": [[0, 1]]},
            {"space": {"a": {"type": "int", "low": 1, "high": 2}}},
            "objective.domain",
        ),
        ({"name": "garland"}, {"space": {"a": {"type": "int", "low": 1, "high": 2}}}, "space"),
        ({"function": "m:f", "domain": [[0, 1]], "style": "trial"}, {}, "objective.style"),
        ({"function": "m:f", "style": "optuna"}, {}, "objective.style"),
    ],
)
def test_bad_objective_and_space_tables_name_the_field(objective, extra, field):
    data = {"objective": objective, **extra, "algorithm": {"name": "fedpne"}}
    with pytest.raises(ConfigError) as info:
        config_from_dict(data)
    assert info.value.field == field
    assert "\n" not in str(info.value)


def test_a_mistyped_key_says_where_keyword_arguments_go():
    with pytest.raises(ConfigError, match=r"did you mean 'direction'\?.*\[objective\.kwargs\]"):
        config_from_dict(
            {
                "objective": {"function": "m:f", "domain": [[0, 1]], "directon": "minimize"},
                "algorithm": {"name": "fedpne"},
            }
        )


def test_keyword_arguments_reach_the_function():
    seen = []

    def objective(params, scale):
        seen.append(scale)
        return params["x"] * scale

    fedxab.federate(
        objective, space={"x": fedxab.Float(0, 1)}, clients=1, budget=20, kwargs={"scale": 3}
    )
    assert set(seen) == {3}


@pytest.mark.parametrize("broker", ["inprocess://", "memory://"])
def test_an_exception_in_the_users_function_is_one_line(broker, caplog):
    def objective(params, client_id):
        if client_id == 1 and params["depth"] > 0:
            raise ValueError("the training diverged\non this shard")
        return 0.0

    with pytest.raises(ObjectiveFailedError) as info:
        fedxab.federate(objective, space=SPACE, clients=2, budget=30, broker=broker)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("client 1: the objective raised ValueError: the training diverged")
    assert "'lr': " in message and "'depth': " in message and "'kind': " in message
    assert isinstance(info.value.original, ValueError)
    assert "Traceback" in caplog.text and "the training diverged" in caplog.text


@pytest.mark.parametrize(
    ("suggest", "field"),
    [
        (lambda t: t.suggest_int("lr", 1, 10), "space.lr"),
        (lambda t: t.suggest_float("lr", 1e-4, 1e-1), "space.lr"),  # not log
        (lambda t: t.suggest_float("momentum", 0.0, 1.0), "space.momentum"),
        (lambda t: t.suggest_categorical("kind", ["a", "b"]), "space.kind"),
    ],
)
def test_a_space_that_does_not_match_the_objective_stops_before_any_value(suggest, field):
    returned = []

    def objective(trial):
        with contextlib.suppress(Exception):  # a user's broad except must not hide it
            suggest(trial)
        returned.append(1)
        return 0.0

    with pytest.raises(EvaluationError) as info:
        fedxab.federate(objective, space=SPACE, clients=2, budget=30)
    assert str(info.value).startswith(f"client 0: {field}: the objective")
    assert "\n" not in str(info.value)
    assert isinstance(info.value.__cause__, SpaceMismatchError)
    assert info.value.__cause__.field == field
    assert len(returned) == 1  # the first evaluation's value was never used


def test_the_style_is_chosen_by_the_first_parameters_name_or_forced():
    from fedxab.objectives.user import resolve_style

    def a(trial): ...
    def b(params): ...
    def c(t): ...

    assert resolve_style(a, "auto") == "trial"
    assert resolve_style(b, "auto") == "params"
    assert resolve_style(c, "auto") == "params" and resolve_style(c, "trial") == "trial"


# ------------------------------------------------------------------------- the command line

MODULE = """
def objective(params, client_id):
    if client_id == 1:
        raise ValueError("diverged")
    return params["lr"] + (0.1 if params["kind"] == "b" else 0.0)
"""

CONFIG = """
[run]
budget = 40
output = "{out}"
[objective]
function = "tuned:objective"
{extra}
[space]
lr = {{type = "float", low = 1e-4, high = 0.1, log = true}}
kind = {{type = "categorical", choices = ["a", "b"]}}
[algorithm]
name = "fedpne"
[federation]
clients = {clients}
"""


def _fedxab_run(tmp_path, clients: int, extra: str = "") -> subprocess.CompletedProcess:
    (tmp_path / "tuned.py").write_text(MODULE)
    config = tmp_path / "run.toml"
    config.write_text(CONFIG.format(out=tmp_path / "out", extra=extra, clients=clients))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    return subprocess.run(
        [*FEDXAB, "run", str(config)], capture_output=True, text=True, timeout=120, env=env
    )


def test_fedxab_run_shows_named_parameters(tmp_path):
    proc = _fedxab_run(tmp_path, clients=1)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"lr=[\d.e-]+, kind=b", proc.stdout), proc.stdout
    run = json.loads((tmp_path / "out" / "results.json").read_text())["runs"][0]
    assert run["recommendation_params"]["kind"] == "b"
    assert run["clients"][0]["best_params"]["kind"] == "b"


def test_fedxab_run_reports_a_failing_function_in_one_line(tmp_path):
    proc = _fedxab_run(tmp_path, clients=2)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert re.fullmatch(
        r"error: client 1: the objective raised ValueError: diverged at "
        r"\{'lr': [\d.e-]+, 'kind': '[ab]'\}",
        errors[0],
    )
    assert "ExceptionGroup" not in proc.stderr + proc.stdout


def test_fedxab_run_refuses_a_mistyped_objective_key(tmp_path):
    proc = _fedxab_run(tmp_path, clients=2, extra='directon = "minimize"')
    assert proc.returncode == 2
    assert "objective.directon: unknown key" in proc.stderr + proc.stdout
    assert not (tmp_path / "out").exists()


def test_ask_and_tell_give_and_take_named_parameters(dev_broker):
    """An AskTellClient of a job with a space asks for parameters by name; the results are
    those of the same job in process."""
    import threading
    import uuid

    config = fedxab.make_config(
        space=SPACE,
        clients=2,
        budget=40,
        deterministic=True,
        sections={
            "broker": {"namespace": f"ts{uuid.uuid4().hex[:8]}"},
            "security": {"sign": False},
        },
    )
    served: list = []
    server = threading.Thread(
        target=lambda: served.append(fedxab.serve(config, broker=dev_broker.url))
    )
    server.start()
    asked: list[list[dict]] = [[], []]

    def drive(k: int) -> None:
        with fedxab.AskTellClient(config, k, broker=dev_broker.url) as client:
            while (params := client.ask(timeout=60)) is not None:
                asked[k].append(params)
                client.tell(params, score(**params, client_id=k))

    clients = [threading.Thread(target=drive, args=(k,)) for k in range(2)]
    for t in clients:
        t.start()
    for t in (*clients, server):
        t.join(120)
    expected = fedxab.run_job(
        config.with_broker_url("inprocess://"),
        functions=lambda params, client_id: score(**params, client_id=client_id),
    )
    for k in range(2):
        assert asked[k] and all(set(p) == {"lr", "depth", "kind"} for p in asked[k])
        keys = [tuple(sorted(p.items())) for p in asked[k]]
        assert len(keys) == len(set(keys))  # deterministic: never asked twice
    run = served[0].runs[0]
    assert run.recommendation_params == expected.runs[0].recommendation_params
    assert run.to_dict()["clients"] == expected.runs[0].to_dict()["clients"]


@pytest.mark.slow  # three processes and the dev broker: about 20 s
def test_fedxab_client_processes_report_a_failing_function_in_one_line(tmp_path, dev_broker):
    """A server and two ``fedxab client`` processes on the dev broker: client 1's function
    raises; its process, the server and the other client each end with one error line
    naming client 1, the parameters and the exception."""
    import uuid

    from cli_procs import start_cli

    (tmp_path / "tuned.py").write_text(MODULE)
    config = tmp_path / "run.toml"
    config.write_text(
        CONFIG.format(out=tmp_path / "out", extra="", clients=2)
        + f'[broker]\nnamespace = "ts{uuid.uuid4().hex[:8]}"\n[security]\nsign = false\n'
    )
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    common = ["--broker", dev_broker.url]
    procs = {
        "server": start_cli("server", str(config), *common, "-q", log=tmp_path / "server.log"),
        **{
            f"client{k}": start_cli(
                "client",
                str(config),
                *common,
                "--client-id",
                str(k),
                log=tmp_path / f"client{k}.log",
                env=env,
            )
            for k in range(2)
        },
    }
    try:
        codes = {name: proc.wait(120) for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    for name, code in codes.items():
        text = (tmp_path / f"{name}.log").read_text()
        errors = [line for line in text.splitlines() if line.startswith("error:")]
        assert code == 2 and len(errors) == 1, text
        assert re.search(
            r"client 1: the objective raised ValueError: diverged at \{'lr': [\d.e-]+, "
            r"'kind': '[ab]'\}$",
            errors[0],
        ), errors[0]
        assert "ExceptionGroup" not in text
