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

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from fedxab.algorithms.registry import PRIVATE, make_federation
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
from fedxab.privacy.gate import LedgerGate
from fedxab.privacy.run_ledger import RunLedger
from fedxab.run.evaluation import ClientEvaluator, GlobalValues, RegretSums, regret_known
from fedxab.run.outcome import stays_local, withheld_block
from fedxab.run.participation import Participation
from fedxab.run.session import ClientSession, ServerSession

if TYPE_CHECKING:
    from fedxab.config import Config
    from fedxab.objectives.history import TrialRecord

__all__ = [
    "Functions",
    "RunParts",
    "build_run",
    "client_family",
    "make_family",
    "make_noise_model",
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
        kwargs=dict(objective.kwargs),
        name=objective.name if objective.is_user else None,
        space=config.search_space,
        style=objective.style,
        deterministic=objective.deterministic,
    )
    clients = tuple(built.get(m) for m in range(n_clients))
    return ClientFamily(global_objective=None, clients=clients, kind="user")


@dataclasses.dataclass
class RunParts:
    """What one party of a run holds: the server's session (if it is the server), the session
    of the clients it hosts (if any), and the privacy ledger it keeps (if it releases)."""

    server: ServerSession | None
    clients: ClientSession | None
    run_ledger: RunLedger | None
    gates: dict[int, LedgerGate]
    """The release gates bound to the state machines, by client (empty if nothing releases)."""
    family: ClientFamily | None
    """The objectives as this party knows them (None: a server of users' own objectives)."""


def build_run(
    config: Config,
    seed: int,
    *,
    run_id: str,
    server: bool,
    client_ids: Sequence[int] = (),
    functions: Functions | None = None,
    keep_points: bool = False,
    family: ClientFamily | None = None,
    replay: Mapping[int, Sequence[TrialRecord]] | None = None,
    remote_clients: bool = False,
) -> RunParts:
    """The parts of run ``seed`` of a federated ``config`` for a party that is the server
    (``server``) and/or hosts ``client_ids``: the in-process runner is both, a server agent the
    server only, a client agent its clients only.

    The party that releases private statistics keeps the ledger (:data:`PRIVATE`: the server
    under central DP, each client under local DP) and binds a gate per client to the state
    machines. A party that hosts clients evaluates their objectives (``functions``, or the
    config's); the server's view of the family is the simulated one, or None for users' own
    objectives (:func:`server_family`).

    ``family``: the simulated family of ``config`` and ``seed`` (:func:`make_family`) if the
    caller built it already: the server and client agents of one process share it, as the
    in-process runner's server and clients do, instead of each drawing it again.

    ``replay``: by client, the trials of the finished run this one continues
    (:mod:`fedxab.run.continuation`); each hosted client's objective answers its first
    evaluations from them.

    ``remote_clients``: the server's clients run in other processes (a server agent over a
    broker). Under local DP (:func:`~fedxab.run.outcome.stays_local`) it then learns only the
    counts of their pulls: its regret sums hold no regret, and its record says what it withholds
    and why (:func:`~fedxab.run.outcome.withheld_block`)."""
    fed = config.federation
    if fed is None:
        raise ConfigError(
            "algorithm.name",
            f"{config.algorithm.name!r} is not a federated algorithm; use "
            "fedxab.agents.local.run_single",
        )
    name, n_clients, budget = config.algorithm.name, fed.clients, config.run.budget
    ids = list(client_ids)
    params = config.algorithm_params()
    machine, clients = make_federation(
        name,
        config.domain,
        n_clients=n_clients,
        budget=budget,
        seed=seed,
        params=params,
        client_ids=ids,
        edges=None if config.search_space is None else config.search_space.edges,
        categories=None if config.search_space is None else config.search_space.categories,
    )
    own = None if config.agents is None else config.agents.client_budget
    for client in clients if own is not None else ():  # (elastic only: config's check)
        client.limit = own  # its own budget: it withdraws at the first phase past it
    q = fed.participation
    participation = None if q is None or q >= 1 else Participation(seed, n_clients, q)
    releaser = PRIVATE.get(name)
    run_ledger, gates = None, {}
    if config.privacy is not None and (
        (releaser == "server" and server) or (releaser == "client" and ids)
    ):
        run_ledger = RunLedger.from_config(config, run_id)
        if releaser == "server":  # central DP: the trusted server releases
            gates = {m: run_ledger.gate(m) for m in range(n_clients)}
            machine.gates.update(gates)
        else:  # local DP: each client releases
            for m, client in zip(ids, clients, strict=True):
                client.gate = gates[m] = run_ledger.gate(m)
    if family is None:
        family = (
            client_family(config, seed, ids, functions)
            if ids or functions is not None
            else server_family(config, seed)
        )
    client_session = None
    if ids:
        assert family is not None  # a party hosting clients has their family (client_family)
        noise = make_noise_model(config)
        glob = family.global_objective
        shared = None if glob is None else GlobalValues(glob)
        global_regret = regret_known(family, config)[0]  # once: it looks at every client
        evaluators = {
            m: ClientEvaluator(
                m,
                family,
                noise,
                seed=seed,
                budget=budget,
                global_values=shared,
                keep_points=keep_points,
                direction=config.objective.direction,
                global_regret=global_regret,
            )
            for m in ids
        }
        logs = {m: getattr(family.clients[m], "trials", None) for m in ids}  # a user's calls
        for m, recorded in (replay or {}).items():
            log = logs.get(m)
            if log is not None:
                log.replay(recorded)
        trials = {m: log for m, log in logs.items() if log is not None}
        client_session = ClientSession(
            dict(zip(ids, clients, strict=True)), evaluators, trials, participation
        )
        if fed.elastic:  # who is asked: as each broadcast names it (fedxab.run.membership)
            client_session.asked = {}
    server_session = None
    if server:
        global_known, local_known = regret_known(family, config)
        withheld = None
        if remote_clients and stays_local(config):
            withheld = withheld_block(config, global_known or local_known)
            global_known = local_known = False
        sums = RegretSums(n_clients, budget, global_known=global_known, local_known=local_known)
        server_session = ServerSession(
            name,
            machine,
            run_id=run_id,
            seed=seed,
            n_clients=n_clients,
            budget=budget,
            family=family,
            sums=sums,
            participation=participation,
        )
        server_session.withheld = withheld
    return RunParts(server_session, client_session, run_ledger, gates, family)


def make_family(base: Objective, config: Config, seed: int) -> ClientFamily:
    """The M client objectives and the global objective of ``config.federation`` for ``seed``.

    The family, not ``base``, is the source of truth for the objectives of a run. With objective
    ``"gp-grid"`` (Dai, Low & Jaillet 2021, App. B.1.1) the GP function is drawn here from the
    run seed, ``stream(seed, "gp-family")`` (unless the objective's ``sample_seed`` fixes it),
    for every heterogeneity: ``"gp-perturbed"`` and ``"gp-mixture"`` use
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
        family = partial(
            gp_sample_family,
            fed.clients,
            seed,
            lengthscale=base.lengthscale,
            grid_size=base.grid_size,
            sample_seed=base.sample_seed,
        )
        if fed.heterogeneity == "gp-mixture":
            return family(alpha=0.7 if fed.mixture_alpha is None else fed.mixture_alpha)
        return family(magnitude=fed.heterogeneity_scale, per=fed.perturbation)
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
