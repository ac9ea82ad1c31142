"""``algorithm = "auto"``: the rule that picks a federated algorithm and its settings.

One small pure function, :func:`choose_algorithm`, of what a job declares: the budget per site,
the dimension, the parameters' types, the number of sites and whether a ``[privacy]`` section
asks for differentially private releases. The rule, first match wins (the table of
docs/algorithms/auto.md, backed by ``benchmarks/bench_tuning.py``):

1. privacy asked for -> ``dpftsde`` (DP-FTS-DE, central DP: the server is trusted with the
   sites' vectors and releases noised aggregates); ``fedtpe`` is never chosen, its labelled
   points are not a DP release;
2. budget <= :data:`TUNING_BUDGET`, or any categorical parameter, or dimension > :data:`TREE_DIM`
   -> ``fedtpe`` (Fed-TPE), with ``gamma`` 0.25 from 100 evaluations per site (0.15 below),
   one-dimensional (univariate) Parzen estimators from :data:`UNIVARIATE_DIM` dimensions (the
   joint estimator below), the parameters' kinds and numbers of values, and
   ``consensus`` 8 from 50 evaluations per site (:data:`CONSENSUS_FROM_50`), and
   ``n_init``/``consensus`` fitted to tiny budgets;
3. otherwise (long horizons on a low-dimensional box of numbers) -> ``fedpne`` (Fed-PNE,
   practical preset), whose regret bounds hold over thousands of noisy pulls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AUTO",
    "CONSENSUS_FROM_50",
    "TREE_DIM",
    "TUNING_BUDGET",
    "UNIVARIATE_DIM",
    "Choice",
    "choose_algorithm",
]

AUTO = "auto"
"""The ``[algorithm] name`` that asks for the rule's choice."""

TUNING_BUDGET = 1000
"""Up to this many evaluations per site is a tuning budget: Fed-TPE."""
TREE_DIM = 10
"""Above this dimension the partition trees of Fed-PNE are not chosen."""
UNIVARIATE_DIM = 6
"""From this dimension Fed-TPE models each coordinate on its own (``univariate = true``): on
held-out shifted BBOB functions at 50 evaluations per site it was better on every seed at
d = 6, 8 and 10 and no better at d = 4 and 5 (docs/algorithms/auto.md)."""


CONSENSUS_FROM_50 = 8
"""Fed-TPE's consensus candidates from 50 evaluations per site (3 from 15, 1 from 3): on the
held-out scikit-learn tasks at 50 evaluations per site, 8 candidates instead of 3 raised the
recommendation's score at the sites on average on all four tasks with the per-site best
unchanged (docs/algorithms/auto.md)."""


@dataclass(frozen=True)
class Choice:
    """The chosen algorithm, its settings and why (stored in results.json as
    ``algorithm_choice``)."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "params": dict(self.params), "reason": self.reason}


def choose_algorithm(
    *,
    budget: int,
    dim: int,
    clients: int,
    private: bool,
    kinds: Sequence[str] | None = None,
    levels: Sequence[int | None] | None = None,
) -> Choice:
    """The algorithm ``"auto"`` runs for a job of ``clients`` sites with ``budget`` evaluations
    each on a ``dim``-dimensional space (``kinds``/``levels``: the typed space's, None: all
    continuous); ``private``: the job has a ``[privacy]`` section."""
    sites = f"{clients} site{'s' if clients != 1 else ''}"
    if private:
        return Choice(
            "dpftsde",
            {"n_init": max(1, min(10, budget - 1))},
            "[privacy] asks for differentially private releases: DP-FTS-DE (central DP; "
            "fedtpe's labelled points are not a DP release)",
        )
    kinds = tuple(kinds) if kinds is not None else ("float",) * dim
    categorical = "categorical" in kinds
    if budget <= TUNING_BUDGET or categorical or dim > TREE_DIM:
        why = (
            f"budget {budget} <= {TUNING_BUDGET} per site"
            if budget <= TUNING_BUDGET
            else "categorical parameters"
            if categorical
            else f"dimension {dim} > {TREE_DIM}"
        )
        consensus = (
            CONSENSUS_FROM_50 if budget >= 50 else 3 if budget >= 15 else 1 if budget >= 3 else 0
        )
        params: dict[str, Any] = {
            "gamma": 0.25 if budget >= 100 else 0.15,
            "n_init": max(1, min(5, budget - consensus)),
            "consensus": consensus,
            "univariate": dim >= UNIVARIATE_DIM,
        }
        if kinds != ("float",) * dim or levels is not None:
            params["kinds"] = list(kinds)
            params["levels"] = [0 if n is None else int(n) for n in (levels or [None] * dim)]
        return Choice("fedtpe", params, f"{why}, {sites}: Fed-TPE")
    return Choice(
        "fedpne",
        {"preset": "practical"},
        f"budget {budget} > {TUNING_BUDGET} per site on {dim} numeric dimensions, {sites}: Fed-PNE",
    )
