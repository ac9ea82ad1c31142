"""The ``fedxab`` command end to end: run, results.json, plot, errors, determinism."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fedxab.agents.local import run_config, run_single
from fedxab.cli import app
from fedxab.config import config_from_dict
from fedxab.results import SCHEMA, load_results

runner = CliRunner()

TINY = """\
# a tiny job: HCT on Garland, 2 runs of 500 evaluations
[run]
seed = {seed}
repeats = 2
budget = 500
output = "{output}"

[objective]
name = "garland"
noise = {{ name = "uniform", half_width = 0.1 }}

[algorithm]
name = "hct"
preset = "practical"
"""


def _tiny_config(tmp_path: Path, seed: int = 0, name: str = "tiny") -> Path:
    out = tmp_path / name
    path = tmp_path / f"{name}.toml"
    path.write_text(TINY.format(seed=seed, output=out.as_posix()), encoding="utf-8")
    return path


def _run(*args: str):
    return runner.invoke(app, list(args))


def _results_json(tmp_path: Path, name: str = "tiny") -> dict:
    return json.loads((tmp_path / name / "results.json").read_text())


def test_run_writes_results_with_all_fields(tmp_path):
    result = _run("run", str(_tiny_config(tmp_path)))
    assert result.exit_code == 0, result.output
    assert "results.json" in result.output
    data = _results_json(tmp_path)

    assert data["schema"] == SCHEMA
    assert data["fedxab_version"]
    assert data["created_at"].endswith("+00:00")
    assert data["config"]["run"] == {
        "seed": 0,
        "repeats": 2,
        "budget": 500,
        "output": (tmp_path / "tiny").as_posix(),
    }
    assert data["config"]["algorithm"] == {"name": "hct", "preset": "practical"}
    assert data["algorithm"] == "hct"
    obj = data["objective"]
    assert obj["name"] == "garland" and obj["dim"] == 1
    # Garland: f* = 4 (pi/6)(1 - pi/6) at x* = pi/6
    assert obj["optimum_value"] == pytest.approx(4 * (np.pi / 6) * (1 - np.pi / 6), abs=1e-9)
    assert obj["maximizer"] == pytest.approx([np.pi / 6], abs=1e-6)
    assert data["communication"] is None and data["privacy"] is None

    assert [r["seed"] for r in data["runs"]] == [0, 1]
    for r in data["runs"]:
        rounds = np.array(r["rounds"])
        cum = np.array(r["cumulative_regret"])
        assert rounds.size <= 500 and rounds[0] == 1 and rounds[-1] == 500
        assert cum.shape == rounds.shape
        assert np.all(np.diff(cum) >= 0)  # noise-free regret is never negative
        np.testing.assert_allclose(r["average_regret"], cum / rounds)
        assert len(r["recommendation"]) == 1 and 0.0 <= r["recommendation"][0] <= 1.0
        assert 0.0 <= r["simple_regret"] <= obj["optimum_value"]
        assert r["evaluations"] == 500
        assert r["wall_time_s"] > 0
    finals = [r["cumulative_regret"][-1] for r in data["runs"]]
    summary = data["summary"]
    assert summary["runs"] == 2
    assert summary["cumulative_regret"]["mean"] == pytest.approx(np.mean(finals))
    assert summary["cumulative_regret"]["std"] == pytest.approx(np.std(finals))
    assert summary["average_regret"]["mean"] == pytest.approx(np.mean(finals) / 500)


def test_plot_writes_a_png(tmp_path):
    assert _run("run", str(_tiny_config(tmp_path, 0, "a"))).exit_code == 0
    assert _run("run", str(_tiny_config(tmp_path, 5, "b"))).exit_code == 0
    png = tmp_path / "plots" / "regret.png"
    result = _run(
        "plot",
        str(tmp_path / "a" / "results.json"),
        str(tmp_path / "b" / "results.json"),
        "-o",
        str(png),
    )
    assert result.exit_code == 0, result.output
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 5_000
    avg = tmp_path / "avg.png"
    result = _run(
        "plot", str(tmp_path / "a" / "results.json"), "-o", str(avg), "--metric", "average_regret"
    )
    assert result.exit_code == 0, result.output
    assert avg.stat().st_size > 5_000


def _assert_clean_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert "error:" in result.output
    for fragment in fragments:
        assert fragment in result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_bad_budget_exits_2_with_field_name(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[run]\nbudget = -5\n")
    _assert_clean_error(_run("run", str(path)), "run.budget", "-5")


def test_unknown_algorithm_exits_2(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[algorithm]\nname = "sgd"\n')
    _assert_clean_error(_run("run", str(path)), "algorithm.name", "sgd")


def test_unknown_objective_exits_2(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[objective]\nname = "nope"\n')
    _assert_clean_error(_run("run", str(path)), "objective.name")


def test_missing_config_and_bad_toml_exit_2(tmp_path):
    _assert_clean_error(_run("run", str(tmp_path / "nope.toml")), "nope.toml", "not found")
    path = tmp_path / "syntax.toml"
    path.write_text("[run]\nbudget 5\n")
    _assert_clean_error(_run("run", str(path)), "syntax.toml", "line 2")


def test_bad_override_exits_2(tmp_path):
    _assert_clean_error(_run("run", str(_tiny_config(tmp_path)), "--budget", "-3"), "run.budget")


def test_plot_of_a_bad_results_file_exits_2(tmp_path):
    bad = tmp_path / "results.json"
    bad.write_text('{"schema": "other"}')
    _assert_clean_error(_run("plot", str(bad), "-o", str(tmp_path / "x.png")), "schema")
    assert not (tmp_path / "x.png").exists()


def test_real_process_prints_one_error_line_and_exits_2(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[run]\nbudget = 0\n")
    proc = subprocess.run(
        [sys.executable, "-c", "from fedxab.cli import main; main()", "run", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error: run.budget")
    assert "Traceback" not in proc.stderr + proc.stdout


def test_same_seed_same_results_different_seed_different(tmp_path):
    for name, seed in (("s1", 3), ("s2", 3), ("s3", 4)):
        assert _run("run", str(_tiny_config(tmp_path, seed, name))).exit_code == 0
    a, b, c = (_results_json(tmp_path, n) for n in ("s1", "s2", "s3"))
    for ra, rb in zip(a["runs"], b["runs"], strict=True):
        assert ra["cumulative_regret"] == rb["cumulative_regret"]
        assert ra["recommendation"] == rb["recommendation"]
        assert ra["simple_regret"] == rb["simple_regret"]
    # seeds 3, 4 vs 4, 5: the second run of one is the first run of the other
    assert a["runs"][1]["cumulative_regret"] == c["runs"][0]["cumulative_regret"]
    assert a["runs"][0]["cumulative_regret"] != c["runs"][0]["cumulative_regret"]
    assert a["runs"][0]["cumulative_regret"] != a["runs"][1]["cumulative_regret"]


def test_overrides_on_the_command_line(tmp_path):
    out = tmp_path / "override"
    result = _run(
        "run",
        str(_tiny_config(tmp_path)),
        "--seed",
        "7",
        "--repeats",
        "1",
        "--budget",
        "300",
        "--output",
        str(out),
    )
    assert result.exit_code == 0, result.output
    data = json.loads((out / "results.json").read_text())
    assert [r["seed"] for r in data["runs"]] == [7]
    assert data["runs"][0]["evaluations"] == 300
    assert data["config"]["run"]["budget"] == 300


def test_default_job_runs_fedpne_on_garland_and_prints_a_summary(tmp_path):
    # the built-in default (issue 3): Fed-PNE, 10 clients with offsets, T = 10,000, 3 seeds
    result = _run("run", "--output", str(tmp_path / "default"))
    assert result.exit_code == 0, result.output
    res = load_results(tmp_path / "default" / "results.json")
    assert res.algorithm == "fedpne" and res.objective["name"] == "garland"
    assert res.config["federation"] == {"clients": 10, "heterogeneity": "offset"}
    assert [r.seed for r in res.runs] == [0, 1, 2]
    assert all(r.evaluations == 10 * 10_000 for r in res.runs)
    assert all(r.communication["clients"] == 10 for r in res.runs)
    assert res.communication["clients"] == 10
    # the summary table (a row per run, then mean and std rows) and the communication table
    assert result.output.count("100,000") >= 3
    assert "mean" in result.output and "std" in result.output
    assert "communication (10 clients)" in result.output and "phases" in result.output


def test_plot_of_local_regret_needs_federated_results(tmp_path):
    assert _run("run", str(_tiny_config(tmp_path))).exit_code == 0
    result = _run(
        "plot",
        str(tmp_path / "tiny" / "results.json"),
        "-o",
        str(tmp_path / "x.png"),
        "--metric",
        "local_cumulative_regret",
    )
    _assert_clean_error(result, "local_cumulative_regret", "federated")
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["plot", "--help"]])
def test_help_everywhere(args):
    result = _run(*args)
    assert result.exit_code == 0
    assert "Usage" in result.output


def test_run_single_progress_and_regret_bookkeeping():
    cfg = config_from_dict({"run": {"budget": 1000}})
    calls: list[tuple[int, int, float]] = []
    rec = run_single(cfg, seed=0, progress=lambda d, t, r: calls.append((d, t, r)))
    assert 1 <= len(calls) <= 201
    assert calls[-1][:2] == (1000, 1000)
    assert [c[0] for c in calls] == sorted({c[0] for c in calls})
    # the progress callback's running regret agrees with the recorded curve
    assert calls[-1][2] == pytest.approx(rec.final_cumulative_regret, rel=1e-9)
    assert rec.rounds[-1] == 1000 and rec.evaluations == 1000
    # and a run of run_config with the same seed reproduces it
    again = run_config(cfg).runs[0]
    np.testing.assert_array_equal(again.cumulative_regret, rec.cumulative_regret)
    np.testing.assert_array_equal(again.recommendation, rec.recommendation)


def _dp_results(tmp_path: Path, seed: int, name: str, progress=None):
    from fedxab.agents.federation import run_federated_config
    from fedxab.results import write_results

    cfg = config_from_dict(
        {
            "run": {"seed": seed, "repeats": 2, "budget": 3000, "output": str(tmp_path / name)},
            "objective": {"name": "garland"},
            "algorithm": {"name": "dpfedpne", "epsilon": 0.5, "privacy_delta": 1e-3},
            "federation": {"clients": 3, "heterogeneity": "shift"},
            "privacy": {"accountant": "rdp"},
        }
    )
    results = run_federated_config(cfg, progress)
    return results, write_results(results, cfg.output_dir)


def test_plot_draws_epsilon_over_phases_and_simple_regret(tmp_path):
    a_res, a = _dp_results(tmp_path, 0, "a")
    _, b = _dp_results(tmp_path, 7, "b")
    for run in a_res.runs:
        by_phase = run.privacy["epsilon_by_phase"]
        assert by_phase and by_phase[-1][1] == run.privacy["max_epsilon"]
        assert [p for p, _ in by_phase] == sorted({p for p, _ in by_phase})
    loaded = load_results(a)
    assert loaded.runs[0].privacy["epsilon_by_phase"] == a_res.runs[0].privacy["epsilon_by_phase"]

    from fedxab.monitoring.plots import epsilon_band

    phases, mean, std = epsilon_band(loaded)
    finals = [r.privacy["max_epsilon"] for r in loaded.runs]
    assert mean[-1] == pytest.approx(np.mean(finals)) and std[-1] == pytest.approx(np.std(finals))
    assert np.all(np.diff(mean) >= 0) and phases.size >= 1

    png = tmp_path / "eps.png"
    result = _run("plot", str(a), str(b), "-o", str(png), "--metric", "epsilon")
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    simple = tmp_path / "simple.png"
    result = _run("plot", str(a), str(b), "-o", str(simple), "--metric", "local_simple_regret")
    assert result.exit_code == 0, result.output
    assert simple.stat().st_size > 5_000

    # a results file without privacy data: a clear error naming the file
    assert _run("run", str(_tiny_config(tmp_path, 0, "np"))).exit_code == 0
    plain = tmp_path / "np" / "results.json"
    result = _run("plot", str(a), str(plain), "-o", str(tmp_path / "x.png"), "--metric", "epsilon")
    _assert_clean_error(result, "epsilon_by_phase")
    assert "results.json" in result.output and "np" in result.output


def test_federated_progress_shows_phase_evaluations_and_epsilon(tmp_path):
    seen: list[tuple] = []

    def progress(done, total, cum, *, phase=None, evaluations=None, epsilon=None):
        seen.append((done, total, phase, evaluations, epsilon))

    progress.details = True
    results, _ = _dp_results(tmp_path, 0, "p", progress)
    assert seen and all(s[2] is not None and s[4] is not None for s in seen)
    last = seen[-1]
    assert last[0] == 3000 and last[3] == 3 * 3000
    assert last[4] == results.runs[-1].privacy["max_epsilon"]
    assert len(seen) <= 2 * 210  # at most about 200 calls per run
    for prev, cur in itertools.pairwise(seen):
        if cur[0] > prev[0]:  # within a run: phases, evaluations and epsilon never go back
            assert cur[2] >= prev[2] and cur[3] >= prev[3] and cur[4] >= prev[4]

    plain: list[tuple] = []
    _dp_results(tmp_path, 0, "q", lambda done, total, cum: plain.append((done, total)))
    assert [s[:2] for s in seen] == plain  # a plain callback: the same calls, no details


def test_run_progress_bar_shows_phase_evaluations_and_epsilon(tmp_path, monkeypatch):
    example = Path(__file__).resolve().parents[2] / "examples" / "dpfedpne_garland.toml"
    monkeypatch.chdir(tmp_path)  # the example's ledger path is relative
    monkeypatch.setenv("COLUMNS", "220")
    out = str(tmp_path / "out")
    result = _run("run", str(example), "--budget", "3000", "-o", out, "--progress", "bar")
    assert result.exit_code == 0, result.output
    eps = load_results(tmp_path / "out" / "results.json").runs[0].privacy["max_epsilon"]
    bar = next(line for line in result.output.splitlines() if "rounds" in line)
    assert "3,000/3,000" in bar and "phase " in bar and " evals" in bar
    assert f"ε {eps:.3f}" in bar


def test_run_progress_off_a_terminal_is_a_plain_line_per_tenth_of_each_run(tmp_path):
    result = _run("run", str(_tiny_config(tmp_path)))  # CliRunner's output is no terminal
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\r" not in result.output
    runs = load_results(tmp_path / "tiny" / "results.json").runs
    for i, run in enumerate(runs):
        lines = [
            line
            for line in result.output.splitlines()
            if line.startswith(f"run {i + 1}/{len(runs)} (seed {run.seed}): ")
        ]
        percents = [int(line.split("(")[2].split("%")[0]) for line in lines]
        assert percents == list(range(0, 101, 10)), lines
        assert f"{run.evaluations:,}/{run.evaluations:,} evals (100%)" in lines[-1]
        assert f"regret {run.final_cumulative_regret:.3f}" in lines[-1]
        assert " elapsed, " in lines[-1]


@pytest.mark.parametrize(
    ("args", "env"),
    [(["--progress", "none"], {}), (["--quiet"], {}), ([], {"FEDXAB_PROGRESS": "none"})],
)
def test_run_progress_can_be_turned_off(tmp_path, args, env):
    result = runner.invoke(app, ["run", str(_tiny_config(tmp_path)), *args], env=env)
    assert result.exit_code == 0, result.output
    assert "results.json" in result.output
    assert not any(line.startswith("run 1/2") for line in result.output.splitlines())
