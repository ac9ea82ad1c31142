"""Planning a reproduction: an experiment with the command's overrides applied
(:func:`make_plan`: one validated :class:`~fedxab.config.Config` per entry, ``--seeds``,
``--budget``, ``--clients``, ``--output``, ``--figure``), and the timed pilot runs that estimate
its wall time before it starts (:func:`pilot`, :func:`estimated_time`) and measures its
progress against it (:class:`PlanProgress`)."""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, overload

from fedxab.reproduce.experiments import Entry, Experiment, ReproduceError, get_experiment

__all__ = [
    "DEFAULT_OUTPUT",
    "PilotTiming",
    "Plan",
    "PlanProgress",
    "PlannedEntry",
    "estimated_time",
    "make_plan",
    "pilot",
    "pilot_budget",
]

DEFAULT_OUTPUT = Path("results") / "reproduce"
_PILOT_MIN, _PILOT_FRACTION = 200, 20
_PILOT_MIN_TIME = 0.02  # seconds: shorter pilot runs are too noisy to fit a growth rate


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
    """The overrides given (``seeds``, ``budget``, ``clients``, ``workers``), for the command
    line echo."""

    @property
    def make_args(self) -> dict[str, Any]:
        """The keyword arguments of :func:`make_plan` that make this plan again (with its
        experiment's name)."""
        return {
            "seeds": self.seeds,
            "budget": self.overrides.get("budget"),
            "clients": self.clients,
            "output": self.output,
            "figure": self.figure,
            "workers": self.overrides.get("workers"),
        }

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

    @property
    def budget_text(self) -> str:
        """T as the figure and the command line say it."""
        n0 = self.experiment.initial_points
        if n0:
            return f"T = {self.budget - n0:,} iterations after {n0} initial points"
        return f"T = {self.budget:,}"


@overload
def _positive(option: str, value: int) -> int: ...
@overload
def _positive(option: str, value: None) -> None: ...
def _positive(option: str, value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ReproduceError(f"{option} must be an integer >= 1, got {value!r}")
    return value


def make_plan(
    name: str,
    *,
    seeds: int | None = None,
    budget: int | None = None,
    clients: int | None = None,
    output: str | os.PathLike[str] | None = None,
    figure: str | os.PathLike[str] | None = None,
    validate: bool = True,
    workers: int | None = None,
) -> Plan:
    """The configs of experiment ``name`` with the overrides, validated (bad values and missing
    landmine data raise a :class:`FedxabError` here, before anything runs).

    Seeds are ``0 .. seeds-1`` (default: the experiment's ``seeds``); ``budget`` is T per client
    (n per player for ``parallel-*``); ``clients`` is M (not allowed for ``parallel-*``, whose
    entries fix m). Results go to
    ``output/<entry>/results.json`` (default ``results/reproduce/NAME``), the figure to
    ``figure`` (default ``output/NAME.png``). ``validate=False`` skips building the objectives
    and algorithms (enough to find and plot earlier results, without the landmine data).
    ``workers`` is ``[run] workers`` of every run: processes hosting its clients (same results).
    """
    from fedxab.config import config_from_dict

    exp = get_experiment(name)
    seeds = exp.seeds if seeds is None else _positive("--seeds", seeds)
    budget = _positive("--budget", budget)
    clients = _positive("--clients", clients)
    workers = _positive("--workers", workers)
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
        table: dict[str, Any] = {
            "run": {
                "seed": 0,
                "repeats": seeds,
                "budget": horizon,
                "output": directory.as_posix(),
                **({} if workers is None else {"workers": workers}),
            },
            "objective": dict(exp.objective),
            "algorithm": dict(entry.algorithm),
            "federation": {"clients": m, "heterogeneity": exp.heterogeneity},
        }
        if not exp.global_regret:
            table["federation"]["global_regret"] = False
        if entry.privacy is not None:
            table["privacy"] = dict(entry.privacy)
        config = config_from_dict(table, validate=validate)
        planned.append(PlannedEntry(entry, config, directory))
    overrides = {"seeds": seeds} if seeds != exp.seeds else {}
    if budget is not None:
        overrides["budget"] = budget
    if clients is not None:
        overrides["clients"] = clients
    if workers is not None:
        overrides["workers"] = workers
    return Plan(exp, seeds, horizon, clients, out, fig, tuple(planned), overrides)


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
    clients: tuple[int, int] | None = None
    """The clients of the two pilot runs at the full budget (``Experiment.pilot_clients``), or
    None when the pilots vary the budget."""


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

    Experiments with ``pilot_clients`` (the Thompson-sampling ones: T of only 50 or 70) instead
    time a run at the full budget with ``C = pilot_clients`` clients and scale it linearly to M
    (every agent does the same work; on landmine only because those runs leave out the global
    regret, whose M SVM fits per evaluation would make it quadratic). The run time hardly
    depends on q and z, so one entry per algorithm is timed and the others share its estimate.
    With M <= C, one run with M clients is timed and is the estimate.
    """
    out: dict[str, PilotTiming] = {}
    if plan.experiment.pilot_clients is not None:
        by_algorithm: dict[str, PilotTiming] = {}
        for pe in plan.entries:
            name = pe.config.algorithm.name
            if name not in by_algorithm:
                if on_entry is not None:
                    on_entry(pe)
                by_algorithm[name] = _pilot_clients(plan, pe)
            out[pe.entry.key] = dataclasses.replace(by_algorithm[name], key=pe.entry.key)
        return out
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


def _with_clients(config: Any, clients: int) -> Any:
    from fedxab.config import config_from_dict

    data = config.to_dict()
    data["run"]["repeats"] = 1
    data["federation"]["clients"] = clients
    return config_from_dict(data, validate=False)  # the plan validated it; the run builds it


def _pilot_clients(plan: Plan, pe: PlannedEntry) -> PilotTiming:
    """Seed 0 of ``pe`` at the full budget with C = ``pilot_clients`` clients, extrapolated
    linearly to M (see :func:`pilot`)."""
    m = pe.config.federation.clients
    large = min(m, plan.experiment.pilot_clients or m)
    setup, run = _timed(_with_clients(pe.config, large))
    estimate = setup + run * m / large
    budgets = (plan.budget, plan.budget)
    return PilotTiming(pe.entry.key, budgets, setup, (run, run), 1.0, estimate, (large, large))


def estimated_time(plan: Plan, timings: Mapping[str, PilotTiming], jobs: int = 1) -> float:
    """The wall time of ``plan`` estimated from its pilots' timings (:func:`pilot`): every seed
    of every entry, ``jobs`` entries at once (each in its own process): at best the total shared
    out, at worst the longest entry."""
    per_run = [timing.estimate_s for timing in timings.values()]
    return plan.seeds * max(sum(per_run) / jobs, max(per_run))


class PlanProgress:
    """How far a reproduction has come, in estimated seconds: each run of an entry weighs the
    entry's estimated run time (:attr:`PilotTiming.estimate_s`, at least 1 microsecond), the
    entries and their seeds run in the plan's order, and a run counts the share of its horizon
    done."""

    def __init__(self, plan: Plan, timings: Mapping[str, PilotTiming]) -> None:
        self.seeds = plan.seeds
        self.weights = [max(timings[pe.entry.key].estimate_s, 1e-6) for pe in plan.entries]
        self.index = {pe.entry.key: i for i, pe in enumerate(plan.entries)}
        self.total = plan.seeds * sum(self.weights)
        """The weight of the whole plan."""

    def at(self, key: str, k: int, done: int, horizon: int) -> tuple[float, int]:
        """``(completed, finished)`` when the run of seed index ``k`` of entry ``key`` has done
        ``done`` of its ``horizon`` rounds: the weight completed (of :attr:`total`) and the
        runs finished."""
        i = self.index[key]
        before = self.seeds * sum(self.weights[:i]) + k * self.weights[i]
        completed = before + self.weights[i] * min(done, horizon) / horizon
        finished = i * self.seeds + k + (1 if done >= horizon else 0)
        return completed, finished
