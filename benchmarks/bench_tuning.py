"""Tuning at small budgets: fedxab against one Optuna TPE study per site (issue 35).

M sites each tune their own black box with B evaluations (B = 20, 50, 100). Compared, on the same
sites and seeds:

- fedxab ``auto`` (the algorithm ``algorithm = "auto"`` picks; Fed-TPE at these budgets) and
  the other federated algorithms (``--algorithms``: fedpne, pfhct, ftsde by default), each
  through ``fedxab.federate`` in process on the typed space's unit box;
- ``tpe``: one Optuna study per site (Optuna's default ``TPESampler``, seeded), the parameters
  declared with ``suggest_float/int/categorical`` as a user would;
- ``random``: uniform points of the typed space per site;
- ``pooled-tpe``: one Optuna study that sees every site's data (trial k evaluated at site
  k mod M; the non-private reference);
- ``exhaustive`` (on a space without a continuous parameter): every parameter set scored at
  every site; its per-site best is each site's optimum and its recommendation the parameter
  set of largest mean score over the sites, the ceiling of any single recommendation.

Tasks: four scikit-learn models on bundled data sets, sharded across the sites with label skew
(each class's samples split among the sites by Dirichlet(1) proportions; diabetes: its target's
quintiles as classes), scored by 3-fold cross-validated accuracy (R^2 for diabetes) on the site's
shard (features standardised once on the whole data set); and four BBOB functions (``ioh``,
instance 1) with a per-site input shift ``s_m ~ U(-0.5, 0.5)^d`` (box [-5, 5]^d), scored by
``f_m(x) - f*`` (lower is better; fedxab maximises its negation). Objectives are deterministic, so
evaluations are cached per site and shared by every method (the cache is outside the timed
overheads).

Per task and budget: each method's per-site best (mean over sites, then mean and 95% t-interval
over seeds), the recommendation's score at the sites (fedxab's server recommendation; pooled TPE's
best trial), the distinct evaluations per site, and the optimizer's own time per evaluation
(the objective excluded). A Wilcoxon signed-rank test (two-sided, over seeds, on the per-seed
mean over sites) compares ``auto`` with ``tpe``: "better"/"worse" at p < 0.05, else "tie".

Run: ``.venv/bin/python benchmarks/bench_tuning.py [--quick] [--seeds 0-9] [--budgets 20,50,100]
[--tasks ...] [--algorithms auto,fedpne,pfhct,ftsde|none]
[--references tpe,random,pooled-tpe,exhaustive|none] [--sites 4] [--json OUT]``; ``--json`` is
rewritten after every task and budget, and ``--from-json A.json B.json ...`` prints the tables
of separate runs merged (of the ``--budgets`` asked), without running.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_federation import env_line, environment, md_table

SITES = 4
BUDGETS = (20, 50, 100)
FEDERATED = ("auto", "fedpne", "pfhct", "ftsde")
REFERENCES = ("tpe", "random", "pooled-tpe", "exhaustive")
ALPHA = 0.05


# ---------------------------------------------------------------------------------- tasks
@dataclass
class Task:
    """M site objectives on one typed space; ``score(m, params)`` is site m's value (higher
    is better for ``maximize``), deterministic and cached."""

    name: str
    space: Any  # fedxab.SearchSpace
    score_fn: Callable[[int, dict[str, Any]], float]
    maximize: bool
    label: str
    cache: dict[tuple[int, tuple[Any, ...]], float]

    def score(self, m: int, params: dict[str, Any]) -> float:
        key = (m, tuple(sorted((k, repr(v)) for k, v in params.items())))
        if key not in self.cache:
            self.cache[key] = float(self.score_fn(m, params))
        return self.cache[key]


def _shards(y: np.ndarray, seed: int, sites: int, per_site: int) -> list[np.ndarray]:
    """Label-skewed shards: each class's samples split among the sites by Dirichlet(1)
    proportions, each shard cut to ``per_site`` samples."""
    rng = np.random.default_rng(seed)
    parts: list[list[int]] = [[] for _ in range(sites)]
    for c in np.unique(y):
        idx = rng.permutation(np.nonzero(y == c)[0])
        cuts = (np.cumsum(rng.dirichlet([1.0] * sites)) * len(idx)).astype(int)[:-1]
        for m, chunk in enumerate(np.split(idx, cuts)):
            parts[m].extend(chunk.tolist())
    return [rng.permutation(np.array(p, dtype=int))[:per_site] for p in parts]


def _cv(model: Any, X: np.ndarray, y: np.ndarray, regression: bool) -> float:
    """3-fold cross-validated accuracy (R^2) of ``model``, folds fixed (seed 0); a fit that
    fails scores 0."""
    folds = np.array_split(np.random.default_rng(0).permutation(len(y)), 3)
    scores = []
    for k in range(3):
        test = folds[k]
        train = np.concatenate([folds[j] for j in range(3) if j != k])
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model.fit(X[train], y[train])
                pred, truth = model.predict(X[test]), y[test]
            if regression:
                scores.append(
                    1.0 - np.sum((truth - pred) ** 2) / np.sum((truth - truth.mean()) ** 2)
                )
            else:
                scores.append(float(np.mean(pred == truth)))
        except ValueError:
            scores.append(0.0)
    return float(np.mean(scores))


def _model(name: str) -> tuple[Any, int, dict[str, Any], Callable[[dict[str, Any]], Any]]:
    """A scikit-learn task's data set, samples per site, typed space and model factory."""
    from sklearn import datasets
    from sklearn.linear_model import LogisticRegression
    from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
    from sklearn.svm import SVC
    from sklearn.tree import DecisionTreeClassifier

    import fedxab

    F, N, C = fedxab.Float, fedxab.Int, fedxab.Categorical
    model, data = name.split("-", 1)
    load = {
        "digits": datasets.load_digits,
        "breast_cancer": datasets.load_breast_cancer,
        "wine": datasets.load_wine,
        "diabetes": datasets.load_diabetes,
    }[data]
    per_site = {"digits": 150, "breast_cancer": 120, "wine": 44, "diabetes": 100}[data]
    if model == "logreg" and data == "digits":
        per_site = 100
    if model == "svc":
        space = {
            "C": F(1e-2, 1e3, log=True),
            "gamma": F(1e-5, 1e-1, log=True),
            "kernel": C(["rbf", "sigmoid", "poly"]),
            "degree": N(2, 5),
        }
        return load(), per_site, space, lambda p: SVC(**p)
    if model == "tree":
        space = {
            "max_depth": N(1, 12),
            "min_samples_leaf": N(1, 40, log=True),
            "criterion": C(["gini", "entropy", "log_loss"]),
            "ccp_alpha": F(1e-4, 1e-1, log=True),
        }
        return load(), per_site, space, lambda p: DecisionTreeClassifier(random_state=0, **p)
    if model == "logreg":
        space = {
            "C": F(1e-3, 1e3, log=True),
            "penalty": C(["l1", "l2"]),
            "class_weight": C([None, "balanced"]),
            "max_iter": N(5, 200, log=True),
        }

        def logreg(p: dict[str, Any]) -> Any:  # saga's sample order seeded: deterministic
            l1 = 1.0 if p["penalty"] == "l1" else 0.0
            rest = {k: v for k, v in p.items() if k != "penalty"}
            return LogisticRegression(solver="saga", l1_ratio=l1, random_state=0, **rest)

        return load(), per_site, space, logreg
    space = {
        "n_neighbors": N(1, 40 if data == "diabetes" else 30, log=True),
        "weights": C(["uniform", "distance"]),
        "p": N(1, 3),
    }
    knn = KNeighborsRegressor if data == "diabetes" else KNeighborsClassifier
    return load(), per_site, space, lambda p: knn(**p)


def sklearn_task(name: str, seed: int, sites: int) -> Task:
    import sklearn
    from sklearn.preprocessing import StandardScaler

    import fedxab

    if name not in (*SKLEARN, *HELD_OUT_SKLEARN):
        raise ValueError(name)
    sklearn.set_config(skip_parameter_validation=True, assume_finite=True)
    data, per_site, space, make = _model(name)
    regression = name.endswith("diabetes")
    X, y = StandardScaler().fit_transform(data.data), data.target  # (scaled once, all folds)
    labels = np.digitize(y, np.quantile(y, [0.2, 0.4, 0.6, 0.8])) if regression else y
    shards = _shards(labels, seed, sites, per_site)
    label = "CV R^2" if regression else "CV accuracy"
    return Task(
        name,
        fedxab.SearchSpace(space),
        lambda m, p: _cv(make(p), X[shards[m]], y[shards[m]], regression),
        True,
        label,
        {},
    )


BBOB = {
    "bbob-f6-d6": (6, 6),
    "bbob-f8-d4": (8, 4),
    "bbob-f15-d3": (15, 3),
    "bbob-f21-d10": (21, 10),
}
"""Reported BBOB tasks: name -> (function id, dimension); instance 1."""

HELD_OUT_BBOB = {
    "bbob-f10-d5": (10, 5),
    "bbob-f23-d4": (23, 4),
    "bbob-f3-d6": (3, 6),
    "bbob-f16-d6": (16, 6),
    "bbob-f18-d6": (18, 6),
    "bbob-f17-d8": (17, 8),
    "bbob-f20-d10": (20, 10),
    "bbob-f22-d10": (22, 10),
}
"""BBOB tasks used only to choose settings (``benchmarks/select_fedtpe.py``), never reported."""


def bbob_task(name: str, seed: int, sites: int, instance: int = 1) -> Task:
    import ioh

    import fedxab

    fid, dim = {**BBOB, **HELD_OUT_BBOB}[name]
    problem = ioh.get_problem(fid, instance=instance, dimension=dim)
    f_star = problem.optimum.y
    shifts = np.random.default_rng(seed).uniform(-0.5, 0.5, size=(sites, dim))
    space = fedxab.SearchSpace({f"x{j}": fedxab.Float(-5.0, 5.0) for j in range(dim)})

    def score(m: int, p: dict[str, Any]) -> float:
        x = np.clip(np.array([p[f"x{j}"] for j in range(dim)]) - shifts[m], -5.0, 5.0)
        return float(problem(x.tolist())) - f_star

    return Task(name, space, score, False, "f - f*", {})


SKLEARN = ("svc-digits", "tree-breast_cancer", "logreg-wine", "knn-diabetes")
HELD_OUT_SKLEARN = ("svc-breast_cancer", "tree-digits", "logreg-digits", "knn-wine")
"""The same four models on other data sets: used only to choose settings, never reported."""
TASKS = (*SKLEARN, *BBOB)


def make_task(name: str, seed: int, sites: int) -> Task:
    if name in (*SKLEARN, *HELD_OUT_SKLEARN):
        return sklearn_task(name, seed, sites)
    return bbob_task(name, seed, sites)


# -------------------------------------------------------------------------------- methods
@dataclass
class Outcome:
    best: np.ndarray  # (sites,) per-site best score
    rec: np.ndarray | None  # (sites,) the recommendation's score at each site
    distinct: float  # distinct evaluations per site
    overhead_s: float  # optimizer time per evaluation, objective excluded
    choice: str = ""


class Meter:
    """Site objectives on the encoded unit box that record what they are asked and the time
    spent in the objective itself."""

    def __init__(self, task: Task, sites: int) -> None:
        self.task, self.sites = task, sites
        self.values: list[list[float]] = [[] for _ in range(sites)]
        self.keys: list[set[tuple[Any, ...]]] = [set() for _ in range(sites)]
        self.inside = 0.0

    def at(self, m: int, params: dict[str, Any]) -> float:
        t0 = time.perf_counter()
        v = self.task.score(m, params)
        self.inside += time.perf_counter() - t0
        self.values[m].append(v)
        self.keys[m].add(tuple(sorted((k, repr(x)) for k, x in params.items())))
        return v

    def site(self, m: int) -> Callable[[np.ndarray], float]:
        sign = 1.0 if self.task.maximize else -1.0
        return lambda x: sign * self.at(m, self.task.space.decode(x))

    def outcome(self, wall: float, rec: np.ndarray | None, choice: str = "") -> Outcome:
        pick = max if self.task.maximize else min
        n = sum(len(v) for v in self.values)
        return Outcome(
            np.array([pick(v) for v in self.values]),
            rec,
            float(np.mean([len(k) for k in self.keys])),
            (wall - self.inside) / max(n, 1),
            choice,
        )


def run_federated(task: Task, algorithm: str, budget: int, seed: int, sites: int) -> Outcome:
    import fedxab

    meter = Meter(task, sites)
    space = task.space
    params: dict[str, Any] = {}
    if algorithm == "auto" and space.kinds != ("float",) * space.dim:
        params = {"kinds": list(space.kinds), "levels": [n or 0 for n in space.levels]}
    t0 = time.perf_counter()
    results = fedxab.federate(
        [meter.site(m) for m in range(sites)],
        space.domain,
        budget=budget,
        algorithm=algorithm,
        params=params,
        seed=seed,
    )
    wall = time.perf_counter() - t0
    rec_params = space.decode(np.asarray(results.runs[0].recommendation))
    rec = np.array([task.score(m, rec_params) for m in range(sites)])
    choice = (results.algorithm_choice or {}).get("name", "")
    return meter.outcome(wall, rec, choice)


def _suggest(trial: Any, space: Any) -> dict[str, Any]:
    """The space's parameters as a user would declare them to Optuna."""
    out = {}
    for name, p in space.params.items():
        kind = type(p).__name__
        if kind == "Categorical":
            out[name] = trial.suggest_categorical(name, list(p.choices))
        elif kind == "Int":
            out[name] = trial.suggest_int(name, p.low, p.high, log=p.log)
        else:
            out[name] = trial.suggest_float(name, p.low, p.high, log=p.log)
    return out


def run_tpe(task: Task, budget: int, seed: int, sites: int, pooled: bool) -> Outcome:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    meter = Meter(task, sites)
    sign = "maximize" if task.maximize else "minimize"
    t0 = time.perf_counter()
    rec = None
    if pooled:
        study = optuna.create_study(direction=sign, sampler=optuna.samplers.TPESampler(seed=seed))
        counter = iter(range(sites * budget))
        study.optimize(
            lambda t: meter.at(next(counter) % sites, _suggest(t, task.space)),
            n_trials=sites * budget,
        )
        wall = time.perf_counter() - t0
        best = study.best_trial.params
        rec = np.array([task.score(m, best) for m in range(sites)])
    else:
        for m in range(sites):
            sampler = optuna.samplers.TPESampler(seed=seed * 1000 + m)
            study = optuna.create_study(direction=sign, sampler=sampler)
            study.optimize(lambda t, m=m: meter.at(m, _suggest(t, task.space)), n_trials=budget)
        wall = time.perf_counter() - t0
    return meter.outcome(wall, rec)


def run_random(task: Task, budget: int, seed: int, sites: int) -> Outcome:
    meter = Meter(task, sites)
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    for m in range(sites):
        for _ in range(budget):
            meter.at(m, task.space.decode(rng.random(task.space.dim)))
    return meter.outcome(time.perf_counter() - t0, None)


def grid(space: Any) -> list[dict[str, Any]] | None:
    """Every parameter set of a space without a continuous parameter, else None."""
    if any(n is None for n in space.levels):
        return None
    params = list(space.params.values())
    return [
        dict(zip(space.params, (p.value(k) for p, k in zip(params, ks, strict=True)), strict=True))
        for ks in itertools.product(*(range(n) for n in space.levels))
    ]


def run_exhaustive(task: Task, sites: int) -> Outcome | None:
    """The ceiling of any single recommendation on a finite space (every parameter set scored
    at every site): per-site best = each site's optimum, recommendation = the parameter set of
    largest mean score over the sites; None on a space with a continuous parameter."""
    points = grid(task.space)
    if points is None:
        return None
    meter = Meter(task, sites)
    t0 = time.perf_counter()
    scores = np.array([[meter.at(m, p) for p in points] for m in range(sites)])
    sign = 1.0 if task.maximize else -1.0
    rec = scores[:, int(np.argmax(sign * scores.mean(axis=0)))]
    return meter.outcome(time.perf_counter() - t0, rec)


def run_method(task: Task, method: str, budget: int, seed: int, sites: int) -> Outcome:
    if method == "tpe":
        return run_tpe(task, budget, seed, sites, pooled=False)
    if method == "pooled-tpe":
        return run_tpe(task, budget, seed, sites, pooled=True)
    if method == "random":
        return run_random(task, budget, seed, sites)
    return run_federated(task, method, budget, seed, sites)


# ------------------------------------------------------------------------------ statistics
def interval(x: np.ndarray) -> tuple[float, float]:
    """Mean and the half-width of its 95% t-interval."""
    from scipy import stats

    if len(x) < 2:
        return float(np.mean(x)), math.nan
    return float(np.mean(x)), float(
        stats.t.ppf(0.975, len(x) - 1) * np.std(x, ddof=1) / math.sqrt(len(x))
    )


def paired(a: np.ndarray, b: np.ndarray, maximize: bool) -> tuple[float, float, str]:
    """Mean of a - b (in the better-is-positive sense), Wilcoxon signed-rank p, verdict."""
    from scipy import stats

    d = (a - b) if maximize else (b - a)
    if len(d) < 2 or np.all(d == 0):
        return float(np.mean(d)), 1.0, "tie"
    p = float(stats.wilcoxon(d, zero_method="wilcox").pvalue)
    verdict = "tie" if p >= ALPHA else "better" if np.mean(d) > 0 else "worse"
    return float(np.mean(d)), p, verdict


# ------------------------------------------------------------------------------------ main
def parse_seeds(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


HEADERS = [
    "method",
    "per-site best ± 95%",
    "rec. at sites",
    "rec./best",
    "distinct/site",
    "overhead ms/eval",
]


def summarise(outs: list[Outcome]) -> dict[str, Any]:
    """One method's cell over the seeds: per-seed mean per-site best, its mean and 95%
    half-width, the recommendation's mean score at the sites and its ratio to the mean per-site
    best (ratio of the means), distinct evaluations and overhead per evaluation."""
    per_seed = np.array([o.best.mean() for o in outs])
    mean, half = interval(per_seed)
    recs = [o.rec.mean() for o in outs if o.rec is not None]
    rec_mean = float(np.mean(recs)) if recs else math.nan
    return {
        "per_seed": per_seed.tolist(),
        "mean": mean,
        "half_width": half,
        "rec_mean": rec_mean,
        "rec_over_best": rec_mean / mean if recs else math.nan,
        "distinct": float(np.mean([o.distinct for o in outs])),
        "overhead_ms": float(np.mean([o.overhead_s for o in outs])) * 1e3,
        "choice": outs[0].choice,
    }


def row(method: str, c: dict[str, Any]) -> list[str]:
    rec, ratio = c["rec_mean"], c["rec_mean"] / c["mean"]  # a ratio of the means
    return [
        method if not c["choice"] else f"{method} ({c['choice']})",
        f"{c['mean']:.4f} ± {c['half_width']:.4f}",
        "" if math.isnan(rec) else f"{rec:.4f}",
        "" if math.isnan(ratio) else f"{ratio:.3f}",
        f"{c['distinct']:.1f}",
        f"{c['overhead_ms']:.2f}",
    ]


def render(record: dict[str, Any]) -> None:
    """Print every task and budget's table and the paired verdicts of ``auto`` against ``tpe``
    (also from the ``--json`` records of separate runs, merged)."""
    verdicts = []
    for name, budgets in record["tasks"].items():
        maximize = name in SKLEARN
        for budget, cell in budgets.items():
            methods = [m for m in cell if m != "auto_vs_tpe"]
            if not methods:  # only references that do not apply (exhaustive, continuous)
                continue
            sense = "higher" if maximize else "lower"
            label = "CV R^2" if name == "knn-diabetes" else "CV accuracy" if maximize else "f - f*"
            print(f"\n{name}, budget {budget} per site ({label}, {sense} is better)")
            print(md_table(HEADERS, [row(m, cell[m]) for m in methods]), flush=True)
            if "auto" in cell and "exhaustive" in cell:
                ceiling = cell["exhaustive"]["rec_mean"] / cell["auto"]["mean"]
                print(
                    "best single parameter set (exhaustive) over auto's per-site best: "
                    f"{ceiling:.3f}"
                )
            if "auto" in cell and "tpe" in cell:
                a, b = np.array(cell["auto"]["per_seed"]), np.array(cell["tpe"]["per_seed"])
                diff, p, verdict = paired(a, b, maximize)
                verdicts.append([name, str(budget), f"{diff:+.4f}", f"{p:.3f}", verdict])
    if verdicts:
        print(
            "\nauto vs per-site TPE (Wilcoxon signed-rank over seeds, two-sided, "
            f"alpha {ALPHA}; diff > 0: auto better)"
        )
        print(md_table(["task", "budget", "mean diff", "p", "verdict"], verdicts))


def merged(paths: list[Path], budgets: set[str]) -> dict[str, Any]:
    """The ``--json`` records of several runs as one (their tasks, budgets and methods), for
    the ``budgets`` asked."""
    record: dict[str, Any] = {"tasks": {}}
    for path in paths:
        part = json.loads(path.read_text())
        for name, cells in part["tasks"].items():
            for budget, cell in cells.items():
                if budget not in budgets:
                    continue
                record["tasks"].setdefault(name, {}).setdefault(budget, {}).update(cell)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds, budget 20, 2 tasks")
    parser.add_argument("--seeds", default="0-9")
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--algorithms", default=",".join(FEDERATED), help="... or none")
    parser.add_argument(
        "--references",
        default=",".join(REFERENCES),
        help="tpe,random,pooled-tpe,exhaustive or none",
    )
    parser.add_argument("--sites", type=int, default=SITES)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--from-json", type=Path, nargs="+", help="print the tables of runs saved by --json"
    )
    args = parser.parse_args()
    if args.from_json:
        render(merged(args.from_json, {b.strip() for b in args.budgets.split(",")}))
        return
    seeds = parse_seeds(args.seeds)
    budgets = [int(b) for b in args.budgets.split(",")]
    tasks = args.tasks.split(",")
    refs = [] if args.references == "none" else args.references.split(",")
    algorithms = [] if args.algorithms == "none" else args.algorithms.split(",")
    methods = [*algorithms, *refs]
    if args.quick:
        seeds, budgets, tasks = seeds[:2], [20], ["logreg-wine", "bbob-f8-d4"]
    for t in tasks:
        if t not in TASKS:
            parser.error(f"unknown task {t!r}; choose from {', '.join(TASKS)}")

    env = environment()
    print(env_line(env))
    print(f"{args.sites} sites, seeds {seeds[0]}-{seeds[-1]}, budgets {budgets} per site")
    record: dict[str, Any] = {
        "environment": env,
        "seeds": seeds,
        "budgets": budgets,
        "sites": args.sites,
        "tasks": {},
    }
    for name in tasks:
        record["tasks"][name] = {}
        ceilings: dict[int, Outcome | None] = {}  # the exhaustive reference, budget-free
        for budget in budgets:
            results: dict[str, list[Outcome]] = {m: [] for m in methods}
            for seed in seeds:
                task = make_task(name, seed, args.sites)
                for method in methods:
                    if method == "exhaustive":
                        if seed not in ceilings:
                            ceilings[seed] = run_exhaustive(task, args.sites)
                        outcome = ceilings[seed]
                    else:
                        outcome = run_method(task, method, budget, seed, args.sites)
                    if outcome is not None:
                        results[method].append(outcome)
                print(f"  {name} budget {budget} seed {seed} done", file=sys.stderr, flush=True)
            cell: dict[str, Any] = {m: summarise(r) for m, r in results.items() if r}
            if "auto" in cell and "tpe" in cell:
                a, b = np.array(cell["auto"]["per_seed"]), np.array(cell["tpe"]["per_seed"])
                diff, p, verdict = paired(a, b, task.maximize)
                cell["auto_vs_tpe"] = {"diff": diff, "p": p, "verdict": verdict}
            record["tasks"][name][str(budget)] = cell
            if args.json is not None:  # after every cell: a long run's finished cells are kept
                args.json.write_text(json.dumps(record, indent=1))
    render(record)


if __name__ == "__main__":
    main()
