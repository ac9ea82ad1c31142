"""A run's parts, built from a config: the client objectives, the noise model, the regret
bookkeeping a simulation can afford.

Two kinds of objectives reach a run:

- a **simulation** (a built-in objective, ``[objective] name``): the client family of
  ``[federation] heterogeneity`` is built from the config and the seed by every party that needs
  it (:func:`make_family`); its optima are known, so regret is measured;
- a **user's own objective** (``[objective] function``, or callables passed in code): only the
  clients have it (:func:`client_family` builds just the hosted ones); a server never builds,
  imports or needs it (:func:`server_family` is ``None``), and a run reports what the clients
  observed (:mod:`fedxab.run.outcome`) instead of regret.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from fedxab.errors import ConfigError
from fedxab.objectives.base import Objective
from fedxab.objectives.families import (
    ClientFamily,
    input_shift_family,
    value_offset_family,
)
from fedxab.objectives.noise import NoiseModel, make_noise
from fedxab.objectives.registry import make_objective
from fedxab.objectives.user import load_function, user_objectives

if TYPE_CHECKING:
    from fedxab.config import Config

__all__ = [
    "Functions",
    "client_family",
    "make_family",
    "make_noise_model",
    "regret_known",
    "server_family",
]

Functions = Callable[..., Any] | Sequence[Callable[..., Any]]
"""A user's objectives in code: one callable per client (indexed by client id), or one callable
for all (given ``client_id`` if it has that parameter; :mod:`fedxab.objectives.user`)."""


def make_noise_model(config: Config) -> NoiseModel:
    """The noise model of ``[objective] noise``."""
    return make_noise(config.objective.noise.name, **dict(config.objective.noise.params))


def server_family(config: Config, seed: int) -> ClientFamily | None:
    """The client family as a server may know it: the simulated family of a built-in objective
    (for regret), or None for a user's own objective (the server never sees it)."""
    if config.objective.is_user:
        return None
    return client_family(config, seed)


def client_family(
    config: Config,
    seed: int,
    client_ids: Iterable[int] | None = None,
    functions: Functions | None = None,
) -> ClientFamily:
    """The objectives of clients ``client_ids`` (default: all) in run ``seed``.

    ``functions`` (a user's callables, :data:`Functions`) or a config's ``[objective]
    function``: a user family, built for ``client_ids`` only, without a global objective. Else
    the simulated family of the built-in objective (:func:`make_family`), for every client.
    """
    fed = config.federation
    n_clients = 1 if fed is None else fed.clients
    objective = config.objective
    if functions is None and not objective.is_user:
        return make_family(make_objective(objective.name, **dict(objective.params)), config, seed)
    if functions is None:
        assert objective.function is not None
        functions = load_function(objective.function)
    ids = range(n_clients) if client_ids is None else list(client_ids)
    built = user_objectives(
        functions,
        config.domain,
        ids,
        direction=objective.direction,
        vectorized=objective.vectorized,
        kwargs=dict(objective.params),
        name=objective.name if objective.is_user else None,
    )
    clients = tuple(built.get(m) for m in range(n_clients))
    return ClientFamily(global_objective=None, clients=clients, kind="user")  # type: ignore[arg-type]


def regret_known(family: ClientFamily | None) -> tuple[bool, bool]:
    """Whether the global and the local (per-client) regret can be measured: the optima are
    known (a simulation). Never for a user's objective."""
    if family is None or family.global_objective is None:
        return False, False
    local = all(c is not None and c.optimum_value is not None for c in family.clients)
    return family.global_objective.optimum_value is not None, local


def make_family(base: Objective, config: Config, seed: int) -> ClientFamily:
    """The M client objectives and the global objective of ``config.federation`` for ``seed``.

    The family, not ``base``, is the source of truth for the objectives of a run. With objective
    ``"gp-grid"`` (spec-dpftsde §7.1) the GP function is drawn here from the run seed,
    ``stream(seed, "gp-family")`` (unless the objective's ``sample_seed`` fixes it), for every
    heterogeneity: ``"gp-perturbed"`` and ``"gp-mixture"`` use
    :func:`~fedxab.objectives.families.gp_sample_family` (``heterogeneity_scale`` = the
    magnitude d, ``perturbation`` = "point"/"client", ``mixture_alpha`` = alpha, default 0.7);
    ``"none"``, ``"offset"`` and ``"shift"`` start from that function (``GPGrid.for_seed``).
    ``base`` itself (built without a seed) only fixes the domain and the GP's parameters.
    """
    from fedxab.objectives.families import gp_sample_family
    from fedxab.objectives.gp import GPGrid

    fed = config.federation
    if fed is None:
        raise ConfigError(
            "algorithm.name", f"{config.algorithm.name!r} is not a federated algorithm"
        )
    if fed.heterogeneity in ("gp-perturbed", "gp-mixture"):
        if not isinstance(base, GPGrid):
            raise ConfigError(
                "federation.heterogeneity",
                f"{fed.heterogeneity!r} builds GP-sample clients on a grid and needs objective "
                f"'gp-grid', got {base.name!r}; use 'offset', 'shift' or 'none'",
            )
        common = {
            "lengthscale": base.lengthscale,
            "grid_size": base.grid_size,
            "sample_seed": base.sample_seed,
        }
        if fed.heterogeneity == "gp-mixture":
            alpha = 0.7 if fed.mixture_alpha is None else fed.mixture_alpha
            return gp_sample_family(fed.clients, seed, alpha=alpha, **common)
        return gp_sample_family(
            fed.clients,
            seed,
            magnitude=fed.heterogeneity_scale,
            per=fed.perturbation,
            **common,
        )
    if isinstance(base, GPGrid):
        # the family is the source of truth: the GP function of run ``seed``
        base = base.for_seed(seed)
    if fed.heterogeneity == "offset":
        scale = 1.0 if fed.heterogeneity_scale is None else fed.heterogeneity_scale
        return value_offset_family(base, fed.clients, seed, scale)
    if fed.heterogeneity == "shift":
        return input_shift_family(base, fed.clients, seed, fed.heterogeneity_scale)
    if fed.heterogeneity == "fields":
        from fedxab.objectives.landmine import LandmineSVM, landmine_family

        if not isinstance(base, LandmineSVM):
            raise ConfigError(
                "federation.heterogeneity",
                f"'fields' gives each client its own landmine field and needs objective "
                f"'landmine', got {base.name!r}; use 'offset', 'shift' or 'none'",
            )
        return landmine_family(
            fed.clients,
            fields="random" if fed.field_assignment == "random" else None,
            seed=seed,
            data_path=str(base.data.path),
            log_scale=base.log_scale,
        )
    return ClientFamily(global_objective=base, clients=(base,) * fed.clients, kind="none")
