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
- ``dpftsde-*`` (DP-FTS-DE paper [DP], Fig. 2c, 2d, 3a; spec-dpftsde §6, §7): DP-FTS-DE over a
  grid of sampling rates q and noise multipliers z (the ``[privacy]`` section: the moments
  accountant, delta = 1 / N^1.1), FTS-DE, FTS (one region) and standard TS; N = 200 agents on
  perturbed copies of a GP sample with T = 40, or the 29 landmine fields with T = 60, after 10
  initial points each; metric: the local simple regret (mean over agents of the best-so-far
  regret; on landmine 1 - best validation AUC) against the BO iteration. Besides the figure,
  :func:`write_privacy_utility` writes the privacy-utility table (``privacy_utility.json`` and
  ``.md``): epsilon from each run's ledger next to the final regret, mean ± std over seeds.

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
from fedxab.monitoring.progress import status_line

__all__ = [
    "EXPERIMENTS",
    "PRIVACY_UTILITY_JSON",
    "PRIVACY_UTILITY_MD",
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
    "privacy_utility",
    "run_plan",
    "write_privacy_utility",
]

log = logging.getLogger(__name__)

DEFAULT_SEEDS = 10
LANDMINE_DPFTSDE_SEEDS = 5
"""dpftsde-landmine's default: a seed (12 algorithms, 29 agents) takes about 1 h 40 min on a
2-core machine, most of it in the global regret's M SVM fits per evaluation."""
DEFAULT_OUTPUT = Path("results") / "reproduce"
SIMPLE_REGRET_FILENAME = "simple_regret.json"
MANIFEST_FILENAME = "reproduce.json"
PRIVACY_UTILITY_JSON = "privacy_utility.json"
PRIVACY_UTILITY_MD = "privacy_utility.md"
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
    privacy: Mapping[str, Any] | None = None
    """The ``[privacy]`` table of a private algorithm (its epsilon goes in the privacy-utility
    table); None for the others."""
    paper_epsilon: float | None = None
    """The epsilon the paper reports for this entry at the experiment's N and T (spec-dpftsde
    §4.3), shown next to the measured one; the measured one always comes from the ledger."""


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
    """"cumulative_regret" (global), "local_cumulative_regret", "simple_regret" or
    "local_simple_regret"."""
    budget: int
    clients: int
    entries: tuple[Entry, ...]
    setting: str
    """What the figure's caption should say about the setting (noise, heterogeneity)."""
    paper_reports: str
    """What the paper reports (spec §11), for the docs."""
    ylabel: str | None = None
    """The y axis label when it is not the metric's usual one."""
    initial_points: int = 0
    """Random initial evaluations before the first BO iteration (DP-FTS-DE's 10): the x axis
    counts BO iterations, the initialisation at t <= 0, and T counts the iterations."""
    log_y: bool = False
    """A log-scale y axis (the synthetic simple regret falls by three orders of magnitude)."""
    seeds: int = DEFAULT_SEEDS
    """The default number of seeds (fewer than 10 where a full run takes many hours)."""
    pilot_clients: int | None = None
    """Time the pilot runs with this many clients (at the full budget) and scale the run time to
    M: for the Thompson-sampling experiments, whose agents each cost the same and whose short
    budget makes a pilot at T / 20 meaningless."""
    pilot_quadratic: bool = False
    """Whether the run time grows like M^2 (see :func:`pilot`): the global objective is the mean
    of the M clients' (landmine fields), evaluated at every client's point."""

    @property
    def private(self) -> bool:
        """Whether some entry is private: the experiment has a privacy-utility table."""
        return any(e.privacy is not None for e in self.entries)

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

# DP-FTS-DE ([DP], spec-dpftsde §6, §7): the synthetic functions (App. B.1.1) and landmine (§7.2)
_MOMENTS = {"accountant": "moments"}  # the paper's accountant; delta = 1 / N^1.1 (the default)
_DP_SYNTHETIC_GP = {
    "n_features": 50,
    "lengthscale": 0.03,
    "noise_variance": 0.01,
    "grid_size": 1000,
}
_DP_SYNTHETIC_OWN = {  # the agents' own GP keeps the generating kernel's hyperparameters
    "own_fit_every": 0,
    "own_lengthscale": 0.03,
    "own_signal_variance": 1.0,
    "own_noise_variance": 0.01,
}
_DP_SYNTHETIC_DE = {"regions": 2, "weights": "synthetic", "p_schedule": "1/sqrt(t)"}
_DP_LANDMINE_DE = {
    "n_features": 100,
    "lengthscale": 0.01,
    "noise_variance": 1e-6,
    "regions": 4,
    "weights": "real",
    "p_schedule": "1/t",
}
# spec-dpftsde §4.3: epsilon after T releases at delta = N^-1.1 (moments accountant)
_DP_SYNTHETIC_EPSILON = {
    (0.15, 1.0): 5.93,
    (0.25, 1.0): 9.91,
    (0.5, 1.0): 20.12,
    (0.25, 1.2): 7.39,
    (0.25, 1.5): 5.22,
}
_DP_LANDMINE_EPSILON = {
    (0.35, 1.0): 15.17,
    (0.35, 1.6): 7.12,
    (0.35, 2.0): 5.14,
    (0.35, 3.0): 3.05,
    (0.35, 4.0): 2.16,
    (0.1, 1.0): 3.75,
    (0.15, 1.0): 5.98,
    (0.2, 1.0): 7.69,
    (0.25, 1.0): 9.82,
}


def _dpftsde(
    q: float, z: float, color: str, params: Mapping[str, Any], clip: float, paper: float | None
) -> Entry:
    return Entry(
        f"dpftsde-q{q:g}-z{z:g}",
        f"DP-FTS-DE (q = {q:g}, z = {z:g})",
        {"name": "dpftsde", **params, "q": q, "z": z, "clip": clip},
        color,
        privacy=_MOMENTS,
        paper_epsilon=paper,
    )


def _ts_baselines(de: Mapping[str, Any], own: Mapping[str, Any]) -> tuple[Entry, ...]:
    """FTS-DE (no privacy), FTS (one region: uniform weights, whole-domain initialisation) and
    standard TS (no communication), with the DP entries' features and own-GP settings."""
    shared = {k: v for k, v in de.items() if k not in ("regions", "weights")}
    ts = {k: v for k, v in de.items() if k == "grid_size"}
    return (
        Entry(
            "ftsde",
            f"FTS-DE (P = {de['regions']}, no privacy)",
            {"name": "ftsde", **de, **own},
            "C0",
        ),
        Entry(
            "fts", "FTS (no DE, no privacy)", {"name": "ftsde", **shared, "regions": 1, **own}, "C4"
        ),
        Entry("ts", "TS (no communication)", {"name": "ts", **ts, **own}, "0.45"),
    )


_DP_SYNTHETIC_SETTING = (
    r"GP sample ($\ell$ = 0.03, 1000-point grid), $f^n = f \pm 0.02$, noise N(0, 0.01), "
    "P = 2, S = 11"
)
_DP_SYNTHETIC_BASELINES = (
    "Fig. 2a (no DP): TS is worst, FTS better than TS, FTS-DE considerably better than FTS."
)


def _dp_synthetic(sweep: str) -> Experiment:
    if sweep == "q":
        grid, colors = [(0.15, 1.0), (0.25, 1.0), (0.5, 1.0)], ["C3", "C1", "C2"]
        figure, trend = "[DP] Fig. 2(c)", "Larger q gives better utility"
    else:
        grid, colors = [(0.25, 1.0), (0.25, 1.2), (0.25, 1.5)], ["C1", "C3", "C5"]
        figure, trend = "[DP] Fig. 2(d)", "Smaller z gives better utility"
    params = {**_DP_SYNTHETIC_GP, **_DP_SYNTHETIC_DE, **_DP_SYNTHETIC_OWN}
    dp = tuple(
        _dpftsde(q, z, c, params, 11.0, _DP_SYNTHETIC_EPSILON[(q, z)])
        for (q, z), c in zip(grid, colors, strict=True)
    )
    values = ", ".join(
        f"{_DP_SYNTHETIC_EPSILON[qz]} ({sweep} = {qz[0] if sweep == 'q' else qz[1]:g})"
        for qz in grid
    )
    fixed = "z = 1" if sweep == "q" else "q = 0.25"
    return Experiment(
        name=f"dpftsde-synthetic-{sweep}",
        figure=figure,
        title="GP-sampled synthetic functions",
        description=(
            f"synthetic GP functions, N = 200, T = 40: DP-FTS-DE {sweep}-sweep ({fixed}), "
            "FTS-DE, FTS, TS; simple regret and epsilon"
        ),
        objective={"name": "gp-grid", "noise": {"name": "gaussian", "sigma": 0.1}},
        heterogeneity="gp-perturbed",
        metric="local_simple_regret",
        budget=50,
        clients=200,
        entries=dp + _ts_baselines({**_DP_SYNTHETIC_GP, **_DP_SYNTHETIC_DE}, _DP_SYNTHETIC_OWN),
        setting=_DP_SYNTHETIC_SETTING,
        paper_reports=(
            f"{figure}: {trend}, with epsilon after T = 40 of {values} (moments accountant, "
            f"delta = 200^-1.1). {_DP_SYNTHETIC_BASELINES} The paper gives no absolute regret "
            "values: the checks are the orderings and the epsilons."
        ),
        ylabel="simple regret (mean over agents)",
        initial_points=10,
        log_y=True,
        pilot_clients=20,
    )


def _dp_landmine() -> Experiment:
    z_sweep = [(0.35, z) for z in (1.0, 1.6, 2.0, 3.0, 4.0)]
    q_sweep = [(q, 1.0) for q in (0.1, 0.15, 0.2, 0.25)]
    greens = ["#00441b", "#006d2c", "#31a354", "#74c476", "#a1d99b"]  # the paper's series
    reds = ["#a50f15", "#de2d26", "#fb6a4a", "#fc9272"]
    dp = tuple(
        _dpftsde(q, z, c, _DP_LANDMINE_DE, 22.0, _DP_LANDMINE_EPSILON[(q, z)])
        for (q, z), c in zip(z_sweep + q_sweep, greens + reds, strict=True)
    )
    values = ", ".join(
        f"{eps} (q = {q:g}, z = {z:g})" for (q, z), eps in _DP_LANDMINE_EPSILON.items()
    )
    return Experiment(
        name="dpftsde-landmine",
        figure="[DP] Fig. 3(a)",
        title="landmine SVM",
        description=(
            "landmine SVM tuning, N = 29 fields, T = 60: DP-FTS-DE z- and q-sweeps, FTS-DE, "
            "FTS, TS; 1 - best AUC and epsilon"
        ),
        objective=_LANDMINE,
        heterogeneity="fields",
        metric="local_simple_regret",
        budget=70,
        clients=29,
        entries=dp + _ts_baselines(_DP_LANDMINE_DE, {}),
        setting="one field per agent, validation AUC of an RBF SVM over (C, gamma); P = 4, S = 22",
        paper_reports=(
            "[DP] Fig. 3(a), after 60 iterations: with single-digit epsilon DP-FTS-DE is "
            "competitive and significantly outperforms TS; a clear privacy-utility trade-off "
            "(smaller epsilon, generally worse utility); FTS-DE and some DP-FTS-DE settings beat "
            "FTS without DE. Fig. 3(d): DP-FTS-DE and FTS-DE converge faster than TS, a larger z "
            "or a smaller q generally slows convergence. Epsilon at delta = 29^-1.1, T = 60 "
            f"(the release's analysis notebook, moments accountant): {values}. The paper gives "
            "no absolute AUC values."
        ),
        ylabel="1 − best validation AUC (mean over agents)",
        initial_points=10,
        pilot_clients=6,
        pilot_quadratic=True,
        seeds=LANDMINE_DPFTSDE_SEEDS,
    )


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
        _dp_synthetic("q"),
        _dp_synthetic("z"),
        _dp_landmine(),
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
    seeds: int | None = None,
    budget: int | None = None,
    clients: int | None = None,
    output: str | os.PathLike[str] | None = None,
    figure: str | os.PathLike[str] | None = None,
    validate: bool = True,
) -> Plan:
    """The configs of experiment ``name`` with the overrides, validated (bad values and missing
    landmine data raise a :class:`FedxabError` here, before anything runs).

    Seeds are ``0 .. seeds-1`` (default: the experiment's ``seeds``); ``budget`` is T per client
    (n per player for ``parallel-*``); ``clients`` is M (not allowed for ``parallel-*``, whose
    entries fix m). Results go to
    ``output/<entry>/results.json`` (default ``results/reproduce/NAME``), the figure to
    ``figure`` (default ``output/NAME.png``). ``validate=False`` skips building the objectives
    and algorithms (enough to find and plot earlier results, without the landmine data).
    """
    from fedxab.config import config_from_dict

    exp = get_experiment(name)
    seeds = exp.seeds if seeds is None else _positive("--seeds", seeds)  # type: ignore[assignment]
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
        table: dict[str, Any] = {
            "run": {
                "seed": 0,
                "repeats": seeds,
                "budget": horizon,
                "output": directory.as_posix(),
            },
            "objective": dict(exp.objective),
            "algorithm": dict(entry.algorithm),
            "federation": {"clients": m, "heterogeneity": exp.heterogeneity},
        }
        if entry.privacy is not None:
            table["privacy"] = dict(entry.privacy)
        config = config_from_dict(table, validate=validate)
        planned.append(PlannedEntry(entry, config, directory))
    overrides = {"seeds": seeds} if seeds != exp.seeds else {}
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
    time a run at the full budget with ``C = pilot_clients`` clients and scale it to M: linearly
    (every agent does the same work), or, with ``pilot_quadratic``, by ``a M + c M^2`` (a, c >= 0)
    fitted through a second run with C / 2 clients: the global regret evaluates the global
    objective at every agent's point, and on landmine that is the mean of all M fields (M SVM
    fits per evaluation; a linear extrapolation from 6 agents underestimated the full 29-agent
    run 2.5-fold, the fit from 3 and 6 agents was within 5 %). The run time hardly depends on q
    and z, so one entry per algorithm is timed and the others share its estimate. With M <= C,
    one run with M clients is timed and is the estimate.
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
    """Seed 0 of ``pe`` at the full budget with C = ``pilot_clients`` clients (and C / 2 for a
    quadratic fit), extrapolated to M (see :func:`pilot`)."""
    m = pe.config.federation.clients
    large = min(m, plan.experiment.pilot_clients or m)
    small = max(1, large // 2)
    budgets = (plan.budget, plan.budget)
    if large == m or small == large or not plan.experiment.pilot_quadratic:
        setup, run = _timed(_with_clients(pe.config, large))
        estimate = setup + run * m / large
        return PilotTiming(pe.entry.key, budgets, setup, (run, run), 1.0, estimate, (large, large))
    _, run_small = _timed(_with_clients(pe.config, small))
    setup, run_large = _timed(_with_clients(pe.config, large))
    # run(C) = a C + c C^2 through both points; a, c >= 0
    c = (run_large / large - run_small / small) / (large - small)
    a = run_large / large - c * large
    if c < 0:
        a, c = run_large / large, 0.0
    elif a < 0:
        a, c = 0.0, run_large / large**2
    estimate = setup + a * m + c * m * m
    exponent = math.log(estimate / max(setup + run_large, 1e-9)) / math.log(m / large)
    return PilotTiming(
        pe.entry.key, budgets, setup, (run_small, run_large), exponent, estimate, (small, large)
    )


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
        if metric == "local_simple_regret":
            curves = self.local_simple_regret()
            return self.rounds, curves.mean(axis=0), curves.std(axis=0)
        from fedxab.monitoring.plots import regret_band

        return regret_band(self.results, metric)

    def local_simple_regret(self) -> np.ndarray:
        """(seeds, len(rounds)): each run's mean over clients of the best local regret so far
        (spec-dpftsde §7.1), checked to share the first run's rounds."""
        where = self.results.source or self.planned.results_path
        rounds = self.rounds
        curves = []
        for i, run in enumerate(self.results.runs):
            if run.local_simple_regret is None:
                raise ReproduceError(
                    f"{where}: runs[{i}] has no local_simple_regret (federated runs record it "
                    "when every client's optimum is known)"
                )
            if run.rounds.shape != rounds.shape or np.any(run.rounds != rounds):
                raise ReproduceError(f"{where}: runs[{i}] has a different rounds grid")
            curves.append(run.local_simple_regret)
        return np.vstack(curves)

    def final(self, metric: str) -> tuple[float, float]:
        """Mean and std over seeds of ``metric`` at the last round."""
        _, mean, std = self.band(metric)
        return float(mean[-1]), float(std[-1])


RunProgress = Callable[..., None]
"""``(entry, seed index, rounds done, T)``; called at the start of every run and as it goes.
A callback with a true ``details`` attribute also gets the run's ``regret`` (cumulative, averaged
over clients) and, from the federated runner, the ``phase``, ``evaluations`` and ``epsilon``
keywords."""


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
    results = RunResults(
        config=config.experiment_dict(),
        algorithm=config.algorithm.name,
        objective=objective_info(config),
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

        def on_progress(
            rounds: int, total: int, cum: float, pe=pe, state=state, **details: Any
        ) -> None:
            if progress is None:
                return
            if getattr(progress, "details", False):  # regret, phase, evaluations, epsilon
                progress(pe, state["seed"], rounds, total, regret=cum, **details)
            else:
                progress(pe, state["seed"], rounds, total)

        on_progress.details = True  # type: ignore[attr-defined]

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
    "local_simple_regret": "simple regret (mean over agents)",
}


def _ylabel(exp: Experiment) -> str:
    return exp.ylabel or _YLABEL[exp.metric]


def _iterations(plan: Plan) -> str:
    """T as the figure and the command line say it."""
    n0 = plan.experiment.initial_points
    if n0:
        return f"T = {plan.budget - n0:,} iterations after {n0} initial points"
    return f"T = {plan.budget:,}"


def _epsilon(res: EntryResult) -> tuple[float, float] | None:
    """Mean and std over seeds of each run's largest client epsilon (from its ledger), or None
    for a non-private entry."""
    blocks = [run.privacy for run in res.results.runs]
    if res.planned.entry.privacy is None and all(b is None for b in blocks):
        return None
    if any(b is None for b in blocks):
        raise ReproduceError(
            f"{res.planned.results_path}: a run of the private {res.planned.entry.key} has no "
            "privacy block"
        )
    eps = np.array([float(b["max_epsilon"]) for b in blocks])  # type: ignore[index]
    return float(eps.mean()), float(eps.std())


def plot_plan(
    plan: Plan, results: Sequence[EntryResult], out_path: str | Path | None = None, dpi: int = 100
) -> Path:
    """All entries in one axes: mean ± 1 std over seeds of the experiment's metric; returns the
    path written (default ``plan.figure``)."""
    from matplotlib.figure import Figure

    from fedxab.results import ResultsError

    exp = plan.experiment
    metric = exp.metric
    many = len(results) > 6
    fig = Figure(figsize=(7.2, 4.8) if many else (6.4, 4.2), layout="constrained")
    ax = fig.add_subplot()
    bands = [res.band(metric) for res in results]
    log_y = metric == "simple_regret" or exp.log_y
    floor = 0.0 if metric == "local_simple_regret" else None
    if log_y:  # log scale: clip the lower band edge above zero
        positive = np.concatenate([mean[mean > 0] for _, mean, _ in bands])
        floor = float(positive.min()) / 3 if positive.size else 1e-6
    styles = ("-", "--", "-.", ":")
    for i, (res, (rounds, mean, std)) in enumerate(zip(results, bands, strict=True)):
        entry = res.planned.entry
        z = 2 * (len(results) - i)  # the first entry (the paper's method) on top
        label = entry.label
        eps = _epsilon(res)
        if eps is not None:
            label += f", ε = {eps[0]:.2f}"
        rounds = rounds - exp.initial_points  # BO iterations: the initialisation at t <= 0
        ax.plot(
            rounds,
            mean,
            label=label,
            color=entry.color,
            linestyle=styles[i % len(styles)],
            linewidth=1.6,
            zorder=z + 1,
        )
        low = mean - std if floor is None else np.maximum(mean - std, floor)
        ax.fill_between(
            rounds, low, mean + std, color=entry.color, alpha=0.2, linewidth=0, zorder=z
        )
    if log_y:
        ax.set_yscale("log")
    if metric == "simple_regret":
        ax.set_xlabel("time step t (evaluations per player)")
    elif exp.initial_points:
        ax.axvline(0, color="0.6", linewidth=0.8, linestyle=":", zorder=0)
        ax.set_xlabel(f"iteration t (t ≤ 0: the {exp.initial_points} initial points)")
    else:
        ax.set_xlabel("round t (evaluations per client)")
    ax.set_ylabel(_ylabel(exp))
    first = plan.entries[0].config
    who = (
        f"n = {plan.budget:,} per player"
        if exp.fixed_clients
        else f"N = {first.federation.clients} agents, {_iterations(plan)}"
        if exp.initial_points
        else f"M = {first.federation.clients} clients, T = {plan.budget:,}"
    )
    seeds = len(results[0].results.runs) if results else plan.seeds
    fig.suptitle(f"{exp.title}: {exp.figure}  ({exp.name})", fontsize=11)
    ax.set_title(f"{who}, mean ± 1 std over {seeds} seeds\n{exp.setting}", fontsize=8, color="0.3")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=7 if many else 8, ncol=2 if many else 1)
    out = Path(out_path) if out_path is not None else plan.figure
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.suffix.lower() == ".png":
            _save_small_png(fig, out, dpi, colors=None if many else 128)
        else:
            fig.savefig(out, dpi=dpi)
    except (OSError, ValueError) as exc:
        raise ResultsError(f"cannot write figure {out}: {exc}") from exc
    log.info("wrote %s", out)
    return out


def _save_small_png(fig: Any, out: Path, dpi: int, colors: int | None = 128) -> None:
    """Save ``fig`` as a PNG with a 128-colour palette (about a third of the size of the RGBA
    file, no visible difference on these line plots: small enough to commit under docs/);
    ``colors=None``: RGB, for a dozen curves, whose bands' blends would take over the palette
    and turn a thin line's colour into a neighbour's."""
    import io

    from PIL import Image  # a dependency of matplotlib

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    buf.seek(0)
    with Image.open(buf) as img:
        rgb = img.convert("RGB")
    if colors is not None:
        rgb = rgb.quantize(colors=colors, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    tmp = out.with_name(f".{out.name}.tmp")
    rgb.save(tmp, format="PNG", optimize=True)
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
                "privacy": res.results.privacy,
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


# ------------------------------------------------------------------------ privacy-utility table
def _stats(values: np.ndarray) -> dict[str, Any]:
    return {
        "mean": float(values.mean()),
        "std": float(values.std()),
        "per_seed": [float(v) for v in values],
    }


def privacy_utility(plan: Plan, results: Sequence[EntryResult]) -> dict[str, Any]:
    """The privacy-utility table of a DP-FTS-DE figure, computed from the results: per entry,
    epsilon (each run's largest client epsilon, recomputed from its ledger by the configured
    accountant; mean and std over seeds; None for a non-private entry), delta, and the final
    local simple regret (mean and population std over seeds); for landmine also the best
    validation AUC, 1 - that regret (the objective's optimum is an AUC of 1)."""
    exp = plan.experiment
    rows = []
    for res in results:
        entry = res.planned.entry
        runs = res.results.runs
        final = res.local_simple_regret()[:, -1]
        private = _epsilon(res) is not None
        blocks = [run.privacy for run in runs] if private else []
        params = res.planned.config.algorithm_params()
        row: dict[str, Any] = {
            "key": entry.key,
            "label": entry.label,
            "algorithm": res.results.algorithm,
            "q": params.get("q") if private else None,
            "z": params.get("z") if private else None,
            "seeds": [int(run.seed) for run in runs],
            "private": private,
            "accountant": blocks[0]["accountant"] if private else None,
            "delta": float(blocks[0]["delta"]) if private else None,
            "releases": max(max(b["releases"], default=0) for b in blocks) if private else None,
            "epsilon": (
                _stats(np.array([float(b["max_epsilon"]) for b in blocks])) if private else None
            ),
            "paper_epsilon": entry.paper_epsilon,
            "local_simple_regret": _stats(final),
        }
        if exp.needs_landmine:
            auc = 1.0 - final
            row["best_auc"] = _stats(auc)
        rows.append(row)
    n0 = exp.initial_points
    first = plan.entries[0].config
    return {
        "schema": "fedxab.privacy_utility/1",
        "experiment": exp.name,
        "figure": exp.figure,
        "command": plan.command_line,
        "clients": first.federation.clients,
        "budget": plan.budget,
        "iterations": plan.budget - n0,
        "initial_points": n0,
        "seeds": len(results[0].results.runs) if results else plan.seeds,
        "epsilon": "largest epsilon over agents of each run, recomputed from its privacy ledger; "
        "mean and std over seeds",
        "utility": f"final {_ylabel(exp)}; mean and std over seeds",
        "rows": rows,
    }


def _num(stats: Mapping[str, Any] | None, digits: int, *, constant: bool = False) -> str:
    """``mean ± std``; just the mean when ``constant`` and the std rounds to 0 (epsilon, the
    same at every seed unless agents withdrew)."""
    if stats is None:
        return "-"
    mean, std = stats["mean"], stats["std"]
    if constant and std < 0.5 * 10.0**-digits:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def _decimals(values: Sequence[float], significant: int = 3, least: int = 4) -> int:
    """Decimals giving the column's largest value ``significant`` digits (at least ``least``)."""
    top = max((abs(v) for v in values if math.isfinite(v) and v != 0), default=1.0)
    return max(least, significant - 1 - math.floor(math.log10(top)))


def privacy_utility_rows(table: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The table's header and rows as text (for the markdown file and the console)."""
    auc = any("best_auc" in r for r in table["rows"])
    digits = _decimals([r["local_simple_regret"]["mean"] for r in table["rows"]])
    header = ["algorithm", "epsilon", "epsilon (paper)", "delta", "final regret"]
    if auc:
        header.append("best AUC")
    lines = []
    for r in table["rows"]:
        line = [
            r["label"],
            _num(r["epsilon"], 2, constant=True),
            "-" if r["paper_epsilon"] is None else f"{r['paper_epsilon']:.2f}",
            "-" if r["delta"] is None else f"{r['delta']:.4g}",
            _num(r["local_simple_regret"], digits),
        ]
        if auc:
            line.append(_num(r["best_auc"], digits))
        lines.append(line)
    return header, lines


def _caption(table: Mapping[str, Any], plan: Plan) -> str:
    accountants = sorted({r["accountant"] for r in table["rows"] if r["accountant"]})
    return (
        f"N = {table['clients']} agents, {_iterations(plan)}, {table['seeds']} "
        f"seed{'s' if table['seeds'] != 1 else ''}. "
        "epsilon: the largest over agents, recomputed from each run's privacy ledger "
        f"({', '.join(accountants) or 'no'} accountant), mean over seeds (± std when it "
        "varies); epsilon (paper): spec-dpftsde §4.3, at the paper's N and T. final regret: "
        f"{_ylabel(plan.experiment)} at the last iteration, mean ± std over seeds"
        + ("; best AUC = 1 − final regret." if plan.experiment.needs_landmine else ".")
    )


def write_privacy_utility(
    plan: Plan, results: Sequence[EntryResult]
) -> tuple[dict[str, Any], Path, Path]:
    """Write ``OUTPUT/privacy_utility.json`` and ``OUTPUT/privacy_utility.md``."""
    table = privacy_utility(plan, results)
    plan.output.mkdir(parents=True, exist_ok=True)
    json_path = plan.output / PRIVACY_UTILITY_JSON
    json_path.write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
    header, rows = privacy_utility_rows(table)
    exp = plan.experiment
    md = [
        f"# {exp.name}: privacy-utility table ({exp.figure})",
        "",
        f"`{table['command']}`",
        "",
        _caption(table, plan),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
    ]
    md_path = plan.output / PRIVACY_UTILITY_MD
    md_path.write_text("\n".join(md), encoding="utf-8")
    log.info("wrote %s and %s", json_path, md_path)
    return table, json_path, md_path


def _privacy_utility_table(table: Mapping[str, Any], plan: Plan) -> Any:
    from rich.table import Table

    header, rows = privacy_utility_rows(table)
    out = Table(
        title=f"{plan.experiment.name}: privacy-utility table",
        title_justify="left",
        caption=_caption(table, plan),
        caption_justify="left",
    )
    for i, name in enumerate(header):
        out.add_column(name, justify="left" if i == 0 else "right")
    for row in rows:
        out.add_row(*row)
    return out


def _print_privacy_utility(
    console: Any, plan: Plan, results: Sequence[EntryResult], *, quiet: bool = False
) -> None:
    table, json_path, md_path = write_privacy_utility(plan, results)
    if not quiet:
        console.print(_privacy_utility_table(table, plan))
    console.print(
        f"privacy-utility table: {md_path} ({json_path.name})", soft_wrap=True, markup=False
    )


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
        title=f"{plan.experiment.name}: final {_ylabel(plan.experiment)} (mean ± std over seeds)",
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
        digits = 4 if metric in ("simple_regret", "local_simple_regret") else 1
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
    seeds: int | None = None,
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
        if exp.private:
            _print_privacy_utility(console, plan, results, quiet=quiet)
        console.print(f"figure: {path}", soft_wrap=True, markup=False)
        return path

    m = "m = " + ", ".join(str(pe.config.federation.clients) for pe in plan.entries)
    who = m if exp.fixed_clients else f"M = {plan.entries[0].config.federation.clients} clients"
    console.print(
        f"[bold]fedxab reproduce {escape(exp.name)}[/bold] ({escape(exp.figure)}): "
        f"{len(plan.entries)} {'curves' if exp.fixed_clients else 'algorithms'} x "
        f"{plan.seeds} seeds, {who}, "
        + (
            f"{_iterations(plan)} per client"
            if exp.initial_points
            else f"T = {plan.budget:,} evaluations per "
            f"{'player' if exp.fixed_clients else 'client'}"
        ),
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
        if exp.pilot_clients is not None:
            m = plan.entries[0].config.federation.clients
            small, large = next(iter(timings.values())).clients or (m, m)
            names = sorted({pe.config.algorithm.name for pe in plan.entries})
            pilots = f"{small} and {large}" if small < large else f"{large}"
            how = (
                f"1 seed of each of {', '.join(names)} with {pilots} of the {m} clients at the "
                f"full budget, {_duration(pilot_s)}, extrapolated to {m} clients, "
                f"x {plan.seeds} seeds"
            )
        else:
            how = (
                f"1 seed of each algorithm at T = {max(1, large // 4):,} and {large:,}, "
                f"{_duration(pilot_s)}, extrapolated to T = {plan.budget:,} with the measured "
                f"growth, x {plan.seeds} seeds"
            )
        console.print(
            f"estimated time: about {_duration(estimate)} (from timed pilot runs: {how})",
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
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=console,
        disable=quiet,
    )
    weights = [max(per_run[pe.entry.key], 1e-6) for pe in plan.entries]
    total = plan.seeds * sum(weights)
    index = {pe.entry.key: i for i, pe in enumerate(plan.entries)}
    task = progress.add_task(exp.name, total=total, runs=f"0/{plan.runs} runs", status="")

    def on_progress(pe: PlannedEntry, k: int, done: int, horizon: int, **details: Any) -> None:
        i = index[pe.entry.key]
        before = plan.seeds * sum(weights[:i]) + k * weights[i]
        completed = before + weights[i] * min(done, horizon) / horizon
        finished = i * plan.seeds + k + (1 if done >= horizon else 0)
        progress.update(
            task,
            completed=completed,
            description=f"{pe.entry.label}, seed {k + 1}/{plan.seeds}",
            runs=f"{finished}/{plan.runs} runs",
            status=status_line(**details),
        )

    on_progress.details = True  # type: ignore[attr-defined]

    t0 = time.perf_counter()
    with progress:
        results = run_plan(plan, on_progress)
        progress.update(task, completed=total, description=exp.name)
    wall = time.perf_counter() - t0
    path = plot_plan(plan, results)
    write_manifest(plan, results, estimate_s=estimate, wall_time_s=wall, figure=path)
    if not quiet:
        console.print(_summary(plan, results))
    if exp.private:
        _print_privacy_utility(console, plan, results, quiet=quiet)
    if not quiet:
        console.print(f"took {_duration(wall)} (estimated {_duration(estimate)})", soft_wrap=True)
    for res in results:
        console.print(f"results: {res.planned.results_path}", soft_wrap=True, markup=False)
    console.print(f"figure: {path}", soft_wrap=True, markup=False)
    return path
