"""Helpers of ``test_paper_orderings.py``: seeded federated runs through the public runner with
the papers' hyper-parameters, and the statistics the orderings compare.

Every run goes through ``fedxab.config.config_from_dict`` and
``fedxab.agents.federation.run_federated_config``, exactly as ``fedxab run`` would. A
:class:`Setting` names one job (algorithm, objective, heterogeneity, budget T, clients M, seeds);
:func:`outcomes` runs the jobs not run yet in this process (several at once on a multi-core
machine, in forked worker processes) and caches the small :class:`Outcome` of each, so that
tests sharing a job run it once.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import multiprocessing
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedxab.agents.federation import run_federated_config
from fedxab.config import config_from_dict

# Hyper-parameters of the papers' experiments (spec-fedpne-pfpne §7.1, §8.1). delta of Fed-PNE and
# PF-PNE is the [PROPOSED] 1/M (the practical preset's default); HCT's c = 0.1, delta = 0.01 are
# PyXAB's defaults (the practical preset).
PAPER_PARAMS: dict[str, dict[str, Any]] = {
    "fedpne": {"preset": "practical", "nu": 1.0, "rho": 0.5, "c": 0.1, "c1": 1.0},
    "pfpne": {"preset": "practical", "nu": 1.0, "rho": 0.5, "c": 0.1, "c1": 1.0, "Delta": 0.01},
    # [PF]'s baseline: PyXAB's HCT defaults, run on each client's own objective.
    "local-hct": {"preset": "practical", "nu": 1.0, "rho": 0.5},
    # [FX]'s baseline: HCT on the global objective, "best setting" rho = 0.75.
    "central-hct": {"preset": "practical", "nu": 1.0, "rho": 0.75},
    # [FX]/[PF]: 20 random-offset arms per dimension, kappa = 1.
    "fed1ucb": {"arms_per_dim": 20, "kappa": 1.0},
}

NOISE = {"name": "uniform", "half_width": 0.1}  # spec F14: Uniform(-0.1, 0.1)


@dataclasses.dataclass(frozen=True)
class Setting:
    """One job: ``repeats`` runs with seeds ``seed, seed + 1, ...``."""

    algorithm: str
    objective: str
    heterogeneity: str
    budget: int
    clients: int = 10
    seed: int = 0
    repeats: int = 5

    def config(self) -> dict[str, Any]:
        return {
            "run": {"seed": self.seed, "repeats": self.repeats, "budget": self.budget},
            "objective": {"name": self.objective, "noise": dict(NOISE)},
            "algorithm": {"name": self.algorithm, **PAPER_PARAMS[self.algorithm]},
            # heterogeneity_scale: the spec's defaults (offset sd 1; shift sd 0.05 x range)
            "federation": {"clients": self.clients, "heterogeneity": self.heterogeneity},
        }


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What the orderings need from a job: per seed, the final global and local cumulative
    regret averaged over clients, and the per-phase (messages, evaluations) records."""

    setting: Setting
    global_regret: np.ndarray
    local_regret: np.ndarray
    phases: tuple[tuple[tuple[int, int], ...], ...]
    wall_time_s: float

    def message_curve(self, fractions: Sequence[float]) -> np.ndarray:
        """Cumulative messages (up + down) sent by round ``f T``, per seed (rows) and fraction.

        A phase's messages are counted at the round its broadcast goes out: one plus the rounds
        the clients spent in the phases before it (each phase's evaluations over M). PF-PNE's
        handover phase so counts at the end of stage 1: its reply to the server carries only
        the client's recommendation, sent when the budget is used up (the paper sends nothing).
        """
        m, budget = self.setting.clients, self.setting.budget
        rows = []
        for phases in self.phases:
            evaluations = np.array([e for _, e in phases], dtype=np.float64)
            messages = np.array([n for n, _ in phases], dtype=np.int64)
            start = 1.0 + np.concatenate([[0.0], np.cumsum(evaluations)[:-1]]) / m
            rows.append([int(messages[start <= f * budget].sum()) for f in fractions])
        return np.array(rows, dtype=np.int64)

    def last_phase_start(self) -> np.ndarray:
        """Per seed, the round (as a fraction of T) at which the last phase's broadcast went out."""
        m, budget = self.setting.clients, self.setting.budget
        return np.array(
            [(1.0 + sum(e for _, e in phases[:-1]) / m) / budget for phases in self.phases]
        )


def _run(setting: Setting) -> Outcome:
    t0 = time.perf_counter()
    results = run_federated_config(config_from_dict(setting.config()))
    phases = tuple(
        tuple(
            (int(p["messages_up"]) + int(p["messages_down"]), int(p["evaluations"]))
            for p in run.communication["per_phase"]
        )
        for run in results.runs
    )
    return Outcome(
        setting=setting,
        global_regret=np.array([run.final_cumulative_regret for run in results.runs]),
        local_regret=np.array([run.final_local_cumulative_regret for run in results.runs]),
        phases=phases,
        wall_time_s=time.perf_counter() - t0,
    )


_CACHE: dict[Setting, Outcome] = {}


def _workers() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 2))


def outcomes(*settings: Setting) -> list[Outcome]:
    """The outcome of every setting, running the missing ones (in parallel where it pays)."""
    missing = list(dict.fromkeys(s for s in settings if s not in _CACHE))
    workers = min(_workers(), len(missing))
    # fork only a single-threaded process (a lock held by another thread would stay held)
    can_fork = "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1
    if workers > 1 and can_fork:
        ctx = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
            # the longest jobs first, so that the two workers finish together
            order = sorted(missing, key=lambda s: -_cost(s))
            for setting, outcome in zip(order, pool.map(_run, order), strict=True):
                _CACHE[setting] = outcome
    else:
        for setting in missing:
            _CACHE[setting] = _run(setting)
    return [_CACHE[s] for s in settings]


def _cost(s: Setting) -> float:
    """A rough relative cost, for scheduling only: HCT baselines pay per pull and per message."""
    per_pull = {"local-hct": 30.0, "central-hct": 40.0}.get(s.algorithm, 1.0)
    return per_pull * s.budget * s.clients * s.repeats


def mean_std(values: np.ndarray) -> str:
    """``"mean ± std"`` (population std over seeds) for assertion messages."""
    return f"{values.mean():.1f} ± {values.std():.1f}"
