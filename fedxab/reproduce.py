"""``fedxab reproduce NAME``: the figures of the federated papers, one command each.

Each :class:`Experiment` is one figure: an objective (with its noise and client heterogeneity),
a per-client budget T, a number of clients M and a list of :class:`Entry` (one algorithm each,
with the paper's hyper-parameters). :func:`make_plan` turns it into one validated
:class:`~fedxab.config.Config` per entry (``--seeds``, ``--budget``, ``--clients``,
``--output`` overrides); :func:`pilot` times one short run per entry to estimate the wall time;
:func:`run_plan` runs every entry over the seeds through
:func:`fedxab.agents.federation.run_federated_config` and writes ``OUTPUT/<entry>/results.json``;
:func:`plot_plan` draws all entries in one figure, mean ± 1 std over seeds, as the papers do.

The experiments (spec-fedpne-pfpne §7, §8, §11 and spec-hct-poo-parallel §4.2; the [PROPOSED]
defaults where the papers are silent: M = 10, T = 10^4 on synthetic functions, T = 10^3 on
landmine, uniform noise on [-0.1, 0.1], 10 seeds):

- ``fedpne-*`` (Fed-PNE paper [FX], Fig. 2): Fed-PNE, HCT on the global objective (centralised,
  instant communication, rho = 0.75) and Fed1-UCB (20 arms per dimension, or 1000 random arms
  beyond 2-D, kappa = 1); value offsets ``f_m = f + xi_m``, ``xi_m ~ N(0, 1)`` (landmine: one
  field per client); metric: the average GLOBAL cumulative regret per client.
- ``pfpne-*`` (PF-PNE paper [PF], Fig. 1): PF-PNE (Delta = 0.01), Fed-PNE, HCT run locally on
  each client (no communication) and Fed1-UCB; input shifts ``f_m(x) = f(clip(x - s_m))``
  (landmine: one field per client); metric: the average LOCAL cumulative regret per client.
- ``parallel-*`` (Chen et al. [P2], Fig. 2): the m-player parallel algorithm with m in
  {1, 4, 16} (nu = 1, rho = 1/2, delta = 1/n), every player on the same function with the
  symmetric truncated N(0, 1) noise; metric: the loss (simple regret) ``f* - f(x(t))`` of the
  recommendation against the per-player time step t. The runner's results only hold the final
  simple regret, so the anytime curve is rebuilt from the coordinator's per-level record (the
  recommendation after a completed level is the centre of its best node, the root's centre before
  the first level completes) and written next to ``results.json`` as ``simple_regret.json``.

The landmine experiments read ``LandmineData.mat`` from ``$FEDXAB_LANDMINE`` (or fail before any
run with the message saying where to get it) and need scikit-learn.

:func:`command` is the body of the ``fedxab reproduce`` command: it prints through the rich
console the CLI gives it (the estimate, a progress bar, a summary table); the rest of the module
only logs.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedxab.errors import FedxabError

__all__ = [
    "EXPERIMENTS",
    "SIMPLE_REGRET_FILENAME",
    "Entry",
    "EntryResult",
    "Experiment",
    "Plan",
    "PlannedEntry",
    "ReproduceError",
    "command",
    "get_experiment",
    "load_plan_results",
    "make_plan",
    "pilot",
    "plot_plan",
    "run_plan",
]

log = logging.getLogger(__name__)

DEFAULT_SEEDS = 10
DEFAULT_OUTPUT = Path("results") / "reproduce"
SIMPLE_REGRET_FILENAME = "simple_regret.json"
MANIFEST_FILENAME = "reproduce.json"
_PILOT_MIN, _PILOT_FRACTION = 200, 20
_PILOT_MIN_TIME = 0.02  # seconds: shorter pilot runs are too noisy to fit a growth rate


class ReproduceError(FedxabError, ValueError):
    """An unknown experiment name, a bad override, or missing results to plot."""


# ------------------------------------------------------------------------------ experiments
@dataclasses.dataclass(frozen=True)
class Entry:
    """One algorithm of a figure: its results directory ``key``, legend ``label`` and
    ``[algorithm]`` table; ``clients`` fixes M for this entry (the m of the parallel figures)."""

    key: str
    label: str
    algorithm: Mapping[str, Any]
    color: str
    clients: int | None = None


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One figure of a paper."""

    name: str
    figure: str
    """Where it is in the paper, e.g. "[FX] Fig. 2(a)"."""
    title: str
    """The objective, as the figure's title names it."""
    description: str
    """One line for ``--list``."""
    objective: Mapping[str, Any]
    """The ``[objective]`` table, noise included."""
    heterogeneity: str
    metric: str
    """"cumulative_regret" (global), "local_cumulative_regret" or "simple_regret"."""
    budget: int
    clients: int
    entries: tuple[Entry, ...]
    setting: str
    """What the figure's caption should say about the setting (noise, heterogeneity)."""
    paper_reports: str
    """What the paper reports (spec §11), for the docs."""

    @property
    def needs_landmine(self) -> bool:
        return self.objective.get("name") == "landmine"

    @property
    def fixed_clients(self) -> bool:
        """Whether every entry sets its own M (the parallel figures compare m = 1, 4, 16)."""
        return all(e.clients is not None for e in self.entries)


_UNIFORM = {"name": "uniform", "half_width": 0.1}
_TRUNCATED = {"name": "truncated_gaussian", "sigma": 1.0, "mode": "symmetric"}
_PNE = {"preset": "practical", "nu": 1.0, "rho": 0.5}  # c = 0.1, c1 = 1, delta = 1/M

FEDPNE = Entry("fedpne", "Fed-PNE", {"name": "fedpne", **_PNE}, "C0")
PFPNE = Entry("pfpne", "PF-PNE", {"name": "pfpne", **_PNE, "Delta": 0.01}, "C3")
CENTRAL_HCT = Entry(
    "central-hct",
    "HCT (centralised, global objective)",
    {"name": "central-hct", "preset": "practical", "nu": 1.0, "rho": 0.75},
    "C1",
)
LOCAL_HCT = Entry(
    "local-hct",
    "HCT (local, no communication)",
    {"name": "local-hct", "preset": "practical", "nu": 1.0, "rho": 0.5},
    "C1",
)


def _fed1ucb(dim: int) -> Entry:
    arms = "20 arms per dimension" if dim <= 2 else "1000 random arms"
    params = {"arms_per_dim": 20, "n_arms": 1000, "kappa": 1.0}
    return Entry("fed1ucb", f"Fed1-UCB ({arms})", {"name": "fed1ucb", **params}, "C2")


def _players(*ms: int) -> tuple[Entry, ...]:
    colors = {1: "C0", 4: "C1", 16: "C3"}
    return tuple(
        Entry(
            f"m{m}",
            f"m = {m} player{'s' if m > 1 else ''}",
            {"name": "parallel", "nu": 1.0, "rho": 0.5},
            colors.get(m, f"C{i + 4}"),
            clients=m,
        )
        for i, m in enumerate(ms)
    )


_FX_REPORTS = (
    "Fed-PNE has the lowest average cumulative regret, below HCT even though HCT sees the global "
    "objective with unlimited communication; Fed1-UCB's regret is high (near-linear) because the "
    "best mesh arm is not the optimum."
)
_PF_REPORTS = (
    "PF-PNE has the smallest average local cumulative regret; Fed-PNE's quality depends on how "
    "similar the local objectives are to the global one (on Garland and Rastrigin better than the "
    "other competitors but far from PF-PNE)."
)
_P2_REPORTS = (
    "More players give a smaller loss at the same per-player time step (m = 16 below m = 4 below "
    "m = 1): the speed-up of parallel exploration."
)


def _fx(name: str, figure: str, title: str, objective: Mapping[str, Any], dim: int) -> Experiment:
    landmine = objective["name"] == "landmine"
    return Experiment(
        name=name,
        figure=figure,
        title=title,
        description=f"{title}: Fed-PNE, centralised HCT, Fed1-UCB; global regret",
        objective=objective,
        heterogeneity="fields" if landmine else "offset",
        metric="cumulative_regret",
        budget=1000 if landmine else 10_000,
        clients=10,
        entries=(FEDPNE, CENTRAL_HCT, _fed1ucb(dim)),
        setting=(
            "one landmine field per client, no added noise"
            if landmine
            else r"offsets $\xi_m \sim N(0,1)$, noise U(-0.1, 0.1)"
        ),
        paper_reports=(
            "Fed-PNE has the smallest regret."
            if landmine
            else _FX_REPORTS
            if figure.startswith("[FX] Fig. 2")
            else "Not in [FX] Fig. 2 (this function is in [PF] Fig. 1); same setting as "
            "[FX] Fig. 2(a), so the same ordering is expected: " + _FX_REPORTS
        ),
    )


def _pf(name: str, figure: str, title: str, objective: Mapping[str, Any], dim: int) -> Experiment:
    landmine = objective["name"] == "landmine"
    return Experiment(
        name=name,
        figure=figure,
        title=title,
        description=f"{title}: PF-PNE, Fed-PNE, local HCT, Fed1-UCB; local regret",
        objective=objective,
        heterogeneity="fields" if landmine else "shift",
        metric="local_cumulative_regret",
        budget=1000 if landmine else 10_000,
        clients=10,
        entries=(PFPNE, FEDPNE, LOCAL_HCT, _fed1ucb(dim)),
        setting=(
            "one landmine field per client, no added noise"
            if landmine
            else r"input shifts $s_m \sim N(0, (0.05\,\mathrm{range})^2)$, noise U(-0.1, 0.1)"
        ),
        paper_reports=(
            "PF-PNE has the smallest average local cumulative regret." if landmine else _PF_REPORTS
        ),
    )


def _p2(name: str, figure: str, title: str, objective: Mapping[str, Any], n: int) -> Experiment:
    return Experiment(
        name=name,
        figure=figure,
        title=title,
        description=f"{title} (n = {n:,}): parallel algorithm, m = 1, 4, 16; loss",
        objective=objective,
        heterogeneity="none",
        metric="simple_regret",
        budget=n,
        clients=1,
        entries=_players(1, 4, 16),
        setting="symmetric truncated N(0,1) noise, nu = 1, rho = 1/2, delta = 1/n",
        paper_reports=_P2_REPORTS,
    )


_LANDMINE = {"name": "landmine", "noise": "none"}


def _synthetic(name: str, **params: Any) -> dict[str, Any]:
    return {"name": name, **params, "noise": _UNIFORM}


EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        _fx("fedpne-garland", "[FX] Fig. 2(a)", "Garland", _synthetic("garland"), 1),
        _fx("fedpne-doublesine", "[FX] Fig. 2(b)", "DoubleSine", _synthetic("doublesine"), 1),
        _fx("fedpne-himmelblau", "[FX]-style", "Himmelblau 2-D", _synthetic("himmelblau"), 2),
        _fx(
            "fedpne-rastrigin",
            "[FX]-style",
            "Rastrigin 10-D",
            _synthetic("rastrigin", dim=10),
            10,
        ),
        _fx("fedpne-landmine", "[FX] Fig. 2(c)", "landmine SVM", _LANDMINE, 2),
        _pf("pfpne-garland", "[PF] Fig. 1(a)", "Garland", _synthetic("garland"), 1),
        _pf("pfpne-himmelblau", "[PF] Fig. 1(b)", "Himmelblau 2-D", _synthetic("himmelblau"), 2),
        _pf(
            "pfpne-rastrigin",
            "[PF] Fig. 1(c)",
            "Rastrigin 10-D",
            _synthetic("rastrigin", dim=10),
            10,
        ),
        _pf("pfpne-landmine", "[PF] Fig. 1(d)", "landmine SVM", _LANDMINE, 2),
        _p2(
            "parallel-sineproduct",
            "[P2] Fig. 2 (left)",
            "printed f1 (sine product)",
            {"name": "sineproduct", "printed": True, "noise": _TRUNCATED},
            1600,
        ),
        _p2(
            "parallel-garland",
            "[P2] Fig. 2 (right)",
            "Garland",
            {"name": "garland", "noise": _TRUNCATED},
            10_000,
        ),
    )
}
"""Every figure ``fedxab reproduce`` knows, by name."""


def get_experiment(name: str) -> Experiment:
    """The experiment ``name``; a :class:`ReproduceError` listing the allowed names otherwise."""
    exp = EXPERIMENTS.get(name.strip().lower()) if isinstance(name, str) else None
    if exp is None:
        raise ReproduceError(
            f"unknown experiment {name!r}; allowed: {', '.join(EXPERIMENTS)} "
            "(fedxab reproduce --list describes them)"
        )
    return exp


# ------------------------------------------------------------------------------------- plan
@dataclasses.dataclass(frozen=True)
class PlannedEntry:
    entry: Entry
    config: Any  # fedxab.config.Config
    directory: Path

    @property
    def results_path(self) -> Path:
        from fedxab.results import RESULTS_FILENAME

        return self.directory / RESULTS_FILENAME


@dataclasses.dataclass(frozen=True)
class Plan:
    """An experiment with its overrides applied: one validated config per entry."""

    experiment: Experiment
    seeds: int
    budget: int
    clients: int | None
    output: Path
    figure: Path
    entries: tuple[PlannedEntry, ...]
    overrides: Mapping[str, int]
    """The overrides given (``seeds``, ``budget``, ``clients``), for the command line echo."""

    @property
    def command_line(self) -> str:
        """The ``fedxab reproduce`` command for this plan, without paths."""
        args = ["fedxab", "reproduce", self.experiment.name]
        for key, value in self.overrides.items():
            args += [f"--{key}", str(value)]
        return shlex.join(args)

    @property
    def runs(self) -> int:
        return self.seeds * len(self.entries)


def _positive(option: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ReproduceError(f"{option} must be an integer >= 1, got {value!r}")
    return value


def make_plan(
    name: str,
    *,
    seeds: int = DEFAULT_SEEDS,
    budget: int | None = None,
    clients: int | None = None,
    output: str | os.PathLike[str] | None = None,
    figure: str | os.PathLike[str] | None = None,
    validate: bool = True,
) -> Plan:
    """The configs of experiment ``name`` with the overrides, validated (bad values and missing
    landmine data raise a :class:`FedxabError` here, before anything runs).

    Seeds are ``0 .. seeds-1``; ``budget`` is T per client (n per player for ``parallel-*``);
    ``clients`` is M (not allowed for ``parallel-*``, whose entries fix m). Results go to
    ``output/<entry>/results.json`` (default ``results/reproduce/NAME``), the figure to
    ``figure`` (default ``output/NAME.png``). ``validate=False`` skips building the objectives
    and algorithms (enough to find and plot earlier results, without the landmine data).
    """
    from fedxab.config import config_from_dict

    exp = get_experiment(name)
    seeds = _positive("--seeds", seeds)  # type: ignore[assignment]
    budget = _positive("--budget", budget)
    clients = _positive("--clients", clients)
    if clients is not None and exp.fixed_clients:
        ms = ", ".join(str(e.clients) for e in exp.entries)
        raise ReproduceError(
            f"--clients does not apply to {exp.name}: its curves compare m = {ms} players"
        )
    out = Path(output) if output is not None else DEFAULT_OUTPUT / exp.name
    fig = Path(figure) if figure is not None else out / f"{exp.name}.png"
    if fig.suffix.lower() not in (".png", ".pdf", ".svg"):
        raise ReproduceError(f"--figure must end in .png, .pdf or .svg, got {str(fig)!r}")
    horizon = budget if budget is not None else exp.budget
    planned = []
    for entry in exp.entries:
        m = entry.clients if entry.clients is not None else (clients or exp.clients)
        directory = out / entry.key
        config = config_from_dict(
            {
                "run": {
                    "seed": 0,
                    "repeats": seeds,
                    "budget": horizon,
                    "output": directory.as_posix(),
                },
                "objective": dict(exp.objective),
                "algorithm": dict(entry.algorithm),
                "federation": {"clients": m, "heterogeneity": exp.heterogeneity},
            },
            validate=validate,
        )
        planned.append(PlannedEntry(entry, config, directory))
    overrides = {"seeds": seeds} if seeds != DEFAULT_SEEDS else {}
    if budget is not None:
        overrides["budget"] = budget
    if clients is not None:
        overrides["clients"] = clients
    return Plan(exp, seeds, horizon, clients, out, fig, tuple(planned), overrides)


# ------------------------------------------------------------------------------------ pilot
@dataclasses.dataclass(frozen=True)
class PilotTiming:
    """The timed pilot runs of an entry, and the resulting estimate for one full run."""

    key: str
    budgets: tuple[int, int]
    """The two pilot budgets, T_p / 4 and T_p."""
    setup_s: float
    run_s: tuple[float, float]
    exponent: float
    """The measured growth rate b of the run time, ``time ~ T^b`` (1 when too fast to tell)."""
    estimate_s: float


def pilot_budget(budget: int) -> int:
    """The larger pilot budget T_p: 1/20 of T, at least 200 (or T itself if smaller)."""
    return min(budget, max(_PILOT_MIN, budget // _PILOT_FRACTION))


def _timed(config: Any) -> tuple[float, float]:
    from fedxab.agents.federation import Federation

    t0 = time.perf_counter()
    fed = Federation(config, 0)
    t1 = time.perf_counter()
    fed.run()
    return t1 - t0, time.perf_counter() - t1


def pilot(
    plan: Plan, on_entry: Callable[[PlannedEntry], None] | None = None
) -> dict[str, PilotTiming]:
    """Time two short runs (seed 0) of each entry, at ``T_p / 4`` and ``T_p =``
    :func:`pilot_budget`, and extrapolate to one full run: ``setup + run(T_p) (T / T_p)^b``,
    where setup is the time to build the objectives, server and clients and ``b`` the growth
    rate measured between the two pilots (clipped to [0.5, 1.5]; 1 when the pilot is too fast to
    time). Linear extrapolation (b = 1) overestimated the landmine runs about two-fold (later
    evaluations hit the SVM cache) and local HCT on the synthetic functions.
    """
    out: dict[str, PilotTiming] = {}
    large = pilot_budget(plan.budget)
    small = max(1, large // 4)
    for pe in plan.entries:
        if on_entry is not None:
            on_entry(pe)
        _, run_small = _timed(pe.config.with_run(repeats=1, budget=small))
        setup, run_large = _timed(pe.config.with_run(repeats=1, budget=large))
        exponent = 1.0
        if large > small and min(run_small, run_large) >= _PILOT_MIN_TIME:
            b = math.log(run_large / run_small) / math.log(large / small)
            exponent = min(max(b, 0.5), 1.5)
        estimate = setup + run_large * (plan.budget / large) ** exponent
        out[pe.entry.key] = PilotTiming(
            pe.entry.key, (small, large), setup, (run_small, run_large), exponent, estimate
        )
    return out


# -------------------------------------------------------------------------------------- run
@dataclasses.dataclass(frozen=True, eq=False)
class EntryResult:
    """What one entry produced: its results and, for ``parallel-*``, the loss curves."""

    planned: PlannedEntry
    results: Any  # fedxab.results.RunResults
    simple_regret: np.ndarray | None = None
    """(seeds, len(rounds)) loss of the recommendation at each round of the grid."""

    @property
    def rounds(self) -> np.ndarray:
        return self.results.runs[0].rounds

    def band(self, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rounds, mean, std)`` over seeds of ``metric``."""
        if metric == "simple_regret":
            if self.simple_regret is None:
                raise ReproduceError(f"{self.planned.entry.key}: no simple-regret curves")
            curves = self.simple_regret
            return self.rounds, curves.mean(axis=0), curves.std(axis=0)
        from fedxab.monitoring.plots import regret_band

        return regret_band(self.results, metric)

    def final(self, metric: str) -> tuple[float, float]:
        """Mean and std over seeds of ``metric`` at the last round."""
        _, mean, std = self.band(metric)
        return float(mean[-1]), float(std[-1])


RunProgress = Callable[[PlannedEntry, int, int, int], None]
"""``(entry, seed index, rounds done, T)``; called at the start of every run and as it goes."""


def _loss_curve(fed: Any, rounds: np.ndarray) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """The anytime loss ``f* - f(x(t))`` of a parallel run at ``rounds`` (per-player steps).

    ``x(t)`` is the centre of the best node of the deepest level completed by step t, the root's
    centre before any level completes (spec-hct-poo-parallel §3.7, C-3).
    """
    server = fed.server
    glob = fed.family.global_objective
    f_star = float(glob.optimum_value)
    lower, upper = server.partition.cell(0, 1)
    centres = [(lower + upper) / 2.0]
    ends = []
    for rec in server.history:
        lower, upper = server.partition.cell(rec.depth, rec.best)
        centres.append((lower + upper) / 2.0)
        ends.append(rec.evaluations)
    values = glob(np.vstack(centres))
    losses = np.maximum(f_star - values, 0.0)
    level = np.searchsorted(np.asarray(ends, dtype=np.int64), rounds, side="right")
    levels = [
        {
            "depth": int(rec.depth),
            "evaluations": int(rec.evaluations),
            "best": int(rec.best),
            "loss": float(losses[k + 1]),
        }
        for k, rec in enumerate(server.history)
    ]
    return losses[level], levels


def _run_parallel(
    pe: PlannedEntry, progress: Callable[[int, int, float], None] | None, on_start: Any
) -> EntryResult:
    """Like ``run_federated_config``, keeping each coordinator's level record for the loss."""
    from fedxab.agents.federation import Federation
    from fedxab.agents.local import objective_info
    from fedxab.objectives.registry import make_objective
    from fedxab.results import RunResults, summarize_communication

    config = pe.config
    seeds = config.run.seeds
    runs, curves, traces = [], [], []
    for k, seed in enumerate(seeds):
        if on_start is not None:
            on_start(k, len(seeds), seed)
        fed = Federation(config, seed)
        record = fed.run(progress)
        loss, levels = _loss_curve(fed, record.rounds)
        runs.append(record)
        curves.append(loss)
        traces.append({"seed": seed, "simple_regret": loss.tolist(), "levels": levels})
    objective = make_objective(config.objective.name, **dict(config.objective.params))
    results = RunResults(
        config=config.experiment_dict(),
        algorithm=config.algorithm.name,
        objective=objective_info(objective),
        runs=tuple(runs),
        communication=summarize_communication(runs),
    )
    _write_simple_regret(pe, runs[0].rounds, traces)
    return EntryResult(pe, results, np.vstack(curves))


def _write_simple_regret(pe: PlannedEntry, rounds: np.ndarray, traces: list[dict]) -> Path:
    path = pe.directory / SIMPLE_REGRET_FILENAME
    data = {
        "schema": "fedxab.simple_regret/1",
        "description": "loss f* - f(x(t)) of the coordinator's recommendation after each "
        "per-player step t (rebuilt from its per-level record)",
        "algorithm": pe.config.algorithm.name,
        "players": pe.config.federation.clients,
        "rounds": [int(r) for r in rounds],
        "runs": traces,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def run_plan(
    plan: Plan,
    progress: RunProgress | None = None,
    on_entry_done: Callable[[EntryResult], None] | None = None,
) -> list[EntryResult]:
    """Run every entry over the seeds; write each entry's ``results.json`` as soon as it is done
    (and, for ``parallel-*``, its ``simple_regret.json``)."""
    from fedxab.agents.federation import run_federated_config
    from fedxab.results import write_results

    done: list[EntryResult] = []
    for pe in plan.entries:
        state = {"seed": 0}

        def on_start(k: int, total: int, seed: int, pe: PlannedEntry = pe, state=state) -> None:
            state["seed"] = k
            if progress is not None:
                progress(pe, k, 0, plan.budget)

        def on_progress(rounds: int, total: int, cum: float, pe=pe, state=state) -> None:
            if progress is not None:
                progress(pe, state["seed"], rounds, total)

        if plan.experiment.metric == "simple_regret":
            pe.directory.mkdir(parents=True, exist_ok=True)
            result = _run_parallel(pe, on_progress, on_start)
        else:
            results = run_federated_config(pe.config, on_progress, on_run_start=on_start)
            result = EntryResult(pe, results)
        write_results(result.results, pe.directory)
        done.append(result)
        if on_entry_done is not None:
            on_entry_done(result)
    return done


def load_plan_results(plan: Plan) -> list[EntryResult]:
    """The results an earlier run of ``plan`` wrote (for ``--plot-only``)."""
    from fedxab.results import load_results

    out = []
    for pe in plan.entries:
        if not pe.results_path.is_file():
            raise ReproduceError(
                f"no results for {pe.entry.key} in {pe.directory}: run "
                f"`fedxab reproduce {plan.experiment.name}` first (with the same --output)"
            )
        results = load_results(pe.results_path)
        curves = None
        if plan.experiment.metric == "simple_regret":
            path = pe.directory / SIMPLE_REGRET_FILENAME
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                curves = np.array([r["simple_regret"] for r in data["runs"]], dtype=float)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ReproduceError(
                    f"{path}: cannot read the simple-regret curves ({exc})"
                ) from exc
            if curves.ndim != 2 or curves.shape[1] != len(results.runs[0].rounds):
                raise ReproduceError(f"{path}: curves do not match {pe.results_path}'s rounds")
        out.append(EntryResult(pe, results, curves))
    return out


# ------------------------------------------------------------------------------------- plot
_YLABEL = {
    "cumulative_regret": "average global cumulative regret per client",
    "local_cumulative_regret": "average local cumulative regret per client",
    "simple_regret": "loss f* − f(x(t))",
}


def plot_plan(
    plan: Plan, results: Sequence[EntryResult], out_path: str | Path | None = None, dpi: int = 100
) -> Path:
    """All entries in one axes: mean ± 1 std over seeds of the experiment's metric; returns the
    path written (default ``plan.figure``)."""
    from matplotlib.figure import Figure

    from fedxab.results import ResultsError

    exp = plan.experiment
    metric = exp.metric
    fig = Figure(figsize=(6.4, 4.2), layout="constrained")
    ax = fig.add_subplot()
    bands = [res.band(metric) for res in results]
    floor = None
    if metric == "simple_regret":  # log scale: clip the lower band edge above zero
        positive = np.concatenate([mean[mean > 0] for _, mean, _ in bands])
        floor = float(positive.min()) / 3 if positive.size else 1e-6
    styles = ("-", "--", "-.", ":")
    for i, (res, (rounds, mean, std)) in enumerate(zip(results, bands, strict=True)):
        entry = res.planned.entry
        z = 2 * (len(results) - i)  # the first entry (the paper's method) on top
        ax.plot(
            rounds,
            mean,
            label=entry.label,
            color=entry.color,
            linestyle=styles[i % len(styles)],
            linewidth=1.6,
            zorder=z + 1,
        )
        low = mean - std if floor is None else np.maximum(mean - std, floor)
        ax.fill_between(
            rounds, low, mean + std, color=entry.color, alpha=0.2, linewidth=0, zorder=z
        )
    if metric == "simple_regret":
        ax.set_yscale("log")
        ax.set_xlabel("time step t (evaluations per player)")
    else:
        ax.set_xlabel("round t (evaluations per client)")
    ax.set_ylabel(_YLABEL[metric])
    first = plan.entries[0].config
    who = (
        f"n = {plan.budget:,} per player"
        if exp.fixed_clients
        else f"M = {first.federation.clients} clients, T = {plan.budget:,}"
    )
    seeds = len(results[0].results.runs) if results else plan.seeds
    fig.suptitle(f"{exp.title}: {exp.figure}  ({exp.name})", fontsize=11)
    ax.set_title(f"{who}, mean ± 1 std over {seeds} seeds\n{exp.setting}", fontsize=8, color="0.3")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    out = Path(out_path) if out_path is not None else plan.figure
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix.lower() == ".png":
            _save_small_png(fig, out, dpi)
        else:
            fig.savefig(out, dpi=dpi)
    except (OSError, ValueError) as exc:
        raise ResultsError(f"cannot write figure {out}: {exc}") from exc
    log.info("wrote %s", out)
    return out


def _save_small_png(fig: Any, out: Path, dpi: int) -> None:
    """Save ``fig`` as a PNG with a 128-colour palette (about a third of the size of the RGBA
    file, no visible difference on these line plots: small enough to commit under docs/)."""
    import io

    from PIL import Image  # a dependency of matplotlib

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    buf.seek(0)
    with Image.open(buf) as img:
        rgb = img.convert("RGB")
    palette = rgb.quantize(colors=128, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    tmp = out.with_name(f".{out.name}.tmp")
    palette.save(tmp, format="PNG", optimize=True)
    os.replace(tmp, out)


def _display_path(path: Path) -> str:
    """``path`` as given when relative, else just its name (no outside paths in outputs)."""
    return path.as_posix() if not path.is_absolute() else path.name


def write_manifest(
    plan: Plan,
    results: Sequence[EntryResult],
    *,
    estimate_s: float | None,
    wall_time_s: float | None,
    figure: Path,
) -> Path:
    """``OUTPUT/reproduce.json``: the command, the estimate and wall time, the final values."""
    exp = plan.experiment
    entries = []
    for res in results:
        mean, std = res.final(exp.metric)
        comm = res.results.communication or {}
        entries.append(
            {
                "key": res.planned.entry.key,
                "label": res.planned.entry.label,
                "algorithm": dict(res.planned.entry.algorithm),
                "clients": res.planned.config.federation.clients,
                "results": f"{res.planned.entry.key}/results.json",
                "final": {"metric": exp.metric, "mean": mean, "std": std},
                "communication_rounds": comm.get("rounds"),
                "wall_time_s": float(sum(r.wall_time_s for r in res.results.runs)),
            }
        )
    data = {
        "experiment": exp.name,
        "figure": exp.figure,
        "description": exp.description,
        "command": plan.command_line,
        "seeds": plan.seeds,
        "budget": plan.budget,
        "metric": exp.metric,
        "estimate_s": estimate_s,
        "wall_time_s": wall_time_s,
        "plot": _display_path(figure),
        "entries": entries,
    }
    path = plan.output / MANIFEST_FILENAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------- command
def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def list_lines() -> list[str]:
    """The ``--list`` lines: name, figure, one-line description."""
    width = max(len(n) for n in EXPERIMENTS)
    fig_width = max(len(e.figure) for e in EXPERIMENTS.values())
    return [
        f"{e.name:<{width}}  {e.figure:<{fig_width}}  {e.description}" for e in EXPERIMENTS.values()
    ]


def _summary(plan: Plan, results: Sequence[EntryResult]) -> Any:
    from rich.table import Table

    metric = plan.experiment.metric
    table = Table(
        title=f"{plan.experiment.name}: final {_YLABEL[metric]} (mean ± std over seeds)",
        title_justify="left",
    )
    table.add_column("algorithm")
    table.add_column("M", justify="right")
    table.add_column("runs", justify="right")
    table.add_column("final", justify="right")
    table.add_column("comm. rounds", justify="right")
    table.add_column("time (s)", justify="right")
    for res in results:
        mean, std = res.final(metric)
        comm = res.results.communication or {}
        rounds = comm.get("rounds")
        digits = 4 if metric == "simple_regret" else 1
        table.add_row(
            res.planned.entry.label,
            str(res.planned.config.federation.clients),
            str(len(res.results.runs)),
            f"{mean:.{digits}f} ± {std:.{digits}f}",
            "-" if rounds is None else f"{rounds:,.0f}",
            f"{sum(r.wall_time_s for r in res.results.runs):.1f}",
        )
    return table


def command(
    console: Any,
    name: str | None,
    *,
    list_only: bool = False,
    seeds: int = DEFAULT_SEEDS,
    budget: int | None = None,
    clients: int | None = None,
    output: str | os.PathLike[str] | None = None,
    figure: str | os.PathLike[str] | None = None,
    plot_only: bool = False,
    quiet: bool = False,
) -> Path | None:
    """The ``fedxab reproduce`` command (printing to ``console``); returns the figure's path."""
    from rich.markup import escape
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    if list_only:
        for line in list_lines():
            console.print(line, soft_wrap=True, markup=False, highlight=False)
        return None
    if name is None:
        raise ReproduceError(
            f"give an experiment NAME (or --list); allowed: {', '.join(EXPERIMENTS)}"
        )
    plan = make_plan(
        name,
        seeds=seeds,
        budget=budget,
        clients=clients,
        output=output,
        figure=figure,
        validate=not plot_only,
    )
    exp = plan.experiment
    if plot_only:
        results = load_plan_results(plan)
        path = plot_plan(plan, results)
        console.print(f"figure: {path}", soft_wrap=True, markup=False)
        return path

    m = "m = " + ", ".join(str(pe.config.federation.clients) for pe in plan.entries)
    who = m if exp.fixed_clients else f"M = {plan.entries[0].config.federation.clients} clients"
    console.print(
        f"[bold]fedxab reproduce {escape(exp.name)}[/bold] ({escape(exp.figure)}): "
        f"{len(plan.entries)} {'curves' if exp.fixed_clients else 'algorithms'} x "
        f"{plan.seeds} seeds, {who}, "
        f"T = {plan.budget:,} evaluations per {'player' if exp.fixed_clients else 'client'}",
        soft_wrap=True,
    )
    t_pilot = time.perf_counter()
    if quiet:
        timings = pilot(plan)
    else:
        with console.status("timing a pilot run of each algorithm ...") as status:
            timings = pilot(
                plan, lambda pe: status.update(f"timing a pilot run of {pe.entry.label} ...")
            )
    pilot_s = time.perf_counter() - t_pilot
    per_run = {key: t.estimate_s for key, t in timings.items()}
    estimate = plan.seeds * sum(per_run.values())
    large = pilot_budget(plan.budget)
    if not quiet:
        console.print(
            f"estimated time: about {_duration(estimate)} (from timed pilot runs: 1 seed of each "
            f"algorithm at T = {max(1, large // 4):,} and {large:,}, {_duration(pilot_s)}, "
            f"extrapolated to T = {plan.budget:,} with the measured growth, x {plan.seeds} seeds)",
            soft_wrap=True,
        )
        console.print(
            "  per run: "
            + ", ".join(
                f"{pe.entry.label} ~{_duration(per_run[pe.entry.key])}" for pe in plan.entries
            ),
            soft_wrap=True,
            markup=False,
        )

    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[runs]}"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=console,
        disable=quiet,
    )
    weights = [max(per_run[pe.entry.key], 1e-6) for pe in plan.entries]
    total = plan.seeds * sum(weights)
    index = {pe.entry.key: i for i, pe in enumerate(plan.entries)}
    task = progress.add_task(exp.name, total=total, runs=f"0/{plan.runs} runs")

    def on_progress(pe: PlannedEntry, k: int, done: int, horizon: int) -> None:
        i = index[pe.entry.key]
        before = plan.seeds * sum(weights[:i]) + k * weights[i]
        completed = before + weights[i] * min(done, horizon) / horizon
        finished = i * plan.seeds + k + (1 if done >= horizon else 0)
        progress.update(
            task,
            completed=completed,
            description=f"{pe.entry.label}, seed {k + 1}/{plan.seeds}",
            runs=f"{finished}/{plan.runs} runs",
        )

    t0 = time.perf_counter()
    with progress:
        results = run_plan(plan, on_progress)
        progress.update(task, completed=total, description=exp.name)
    wall = time.perf_counter() - t0
    path = plot_plan(plan, results)
    write_manifest(plan, results, estimate_s=estimate, wall_time_s=wall, figure=path)
    if not quiet:
        console.print(_summary(plan, results))
        console.print(f"took {_duration(wall)} (estimated {_duration(estimate)})", soft_wrap=True)
    for res in results:
        console.print(f"results: {res.planned.results_path}", soft_wrap=True, markup=False)
    console.print(f"figure: {path}", soft_wrap=True, markup=False)
    return path
