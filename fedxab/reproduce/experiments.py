"""The catalogue of ``fedxab reproduce``: one :class:`Experiment` per figure of the federated
papers, by name (:data:`EXPERIMENTS`).

Each experiment is an objective (with its noise and client heterogeneity), a per-client budget T,
a number of clients M and a list of :class:`Entry` (one algorithm each, with the paper's
hyper-parameters). The experiments follow the papers' experiment sections, with fedxab's
defaults where the papers are silent: M = 10, T = 10^4 on synthetic
functions, T = 10^3 on landmine, uniform noise on [-0.1, 0.1], 10 seeds):

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
  recommendation against the per-player time step t (rebuilt from the coordinator's per-level
  record: :mod:`fedxab.reproduce.execute`).
- ``dpftsde-*`` (DP-FTS-DE paper [DP], Fig. 2c, 2d, 3a; App. B.1): DP-FTS-DE over a
  grid of sampling rates q and noise multipliers z (the ``[privacy]`` section: the moments
  accountant, delta = 1 / N^1.1), FTS-DE, FTS (one region) and standard TS; N = 200 agents on
  perturbed copies of a GP sample with T = 40, or the 29 landmine fields with T = 60, after 10
  initial points each; metric: the local simple regret (mean over agents of the best-so-far
  regret; on landmine 1 - best validation AUC) against the BO iteration. Besides the figure,
  they have a privacy-utility table (:mod:`fedxab.reproduce.tables`).

The landmine experiments read ``LandmineData.mat`` from ``$FEDXAB_LANDMINE`` (or fail before any
run with the message saying where to get it) and need scikit-learn.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from fedxab.errors import FedxabError

__all__ = [
    "DEFAULT_SEEDS",
    "EXPERIMENTS",
    "LANDMINE_DPFTSDE_SEEDS",
    "Entry",
    "Experiment",
    "ReproduceError",
    "get_experiment",
    "metric_label",
]

DEFAULT_SEEDS = 10
LANDMINE_DPFTSDE_SEEDS = 5
"""dpftsde-landmine's default: a seed (12 algorithms, 29 agents) takes about 15 min in one
process on a 2-core machine, 7 min 19 s with ``--jobs 2``, most of it in the agents' own GP fits
and acquisition (without the global regret, whose M SVM fits per evaluation took 1 h 40 min)."""


class ReproduceError(FedxabError, ValueError):
    """An unknown experiment name, a bad override, or missing results to plot."""


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
    """The epsilon the paper reports for this entry at the experiment's N and T (moments
    accountant, delta = N^-1.1), shown next to the measured one; the measured one always comes
    from the ledger."""


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
    """What the paper reports, for the docs."""
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
    global_regret: bool = True
    """Whether the runs measure the global regret too (``[federation] global_regret``). Off
    where the figure needs only the local regret and the global objective is expensive: on
    landmine it is the mean of the M fields' SVMs, M fits at every client's every point, which
    cost a DP-FTS-DE seed (29 agents) over 95 % of its time."""

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
        global_regret=not landmine,
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

# DP-FTS-DE ([DP], App. B.1): the synthetic functions (App. B.1.1) and landmine
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
# [DP]'s epsilon after T releases at delta = N^-1.1 (moments accountant)
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
        global_regret=False,
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


_YLABEL = {
    "cumulative_regret": "average global cumulative regret per client",
    "local_cumulative_regret": "average local cumulative regret per client",
    "simple_regret": "loss f* − f(x(t))",
    "local_simple_regret": "simple regret (mean over agents)",
}


def metric_label(exp: Experiment) -> str:
    """The experiment's metric in words (the figure's y axis, the tables' captions)."""
    return exp.ylabel or _YLABEL[exp.metric]
