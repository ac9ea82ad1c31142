"""Algorithm names for configs and the CLI, and construction with checked parameters.

Two registries:

- :data:`ALGORITHMS`: single-agent ask/tell optimizers, built by :func:`make_optimizer`;
- :data:`FEDERATED`: federated algorithms as a ``(server class, client class)`` pair of sans-I/O
  state machines (:mod:`fedxab.algorithms.protocol`), built by :func:`make_federation`.

Adding a federated algorithm is one line in :data:`FEDERATED`. Its ``[algorithm]`` parameters
are the keyword parameters of the server and client constructors (minus the run-level ones the
runner sets: domain, seed, budget, number of clients, client id, a shared partition object), and
each constructor receives only the parameters it accepts, so that the parameters clients share
with the server (partition ``k`` and ``split``; the run seed) reach both sides.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from fedxab.algorithms.base import Optimizer
from fedxab.algorithms.baselines import (
    CentralHCTBroadcast,
    CentralHCTClient,
    CentralHCTReport,
    CentralHCTServer,
    LocalHCTBroadcast,
    LocalHCTClient,
    LocalHCTReport,
    LocalHCTServer,
)
from fedxab.algorithms.dpfedpne import DPFedPNEClient, DPFedPNEServer
from fedxab.algorithms.fed1ucb import Fed1UCBBroadcast, Fed1UCBClient, Fed1UCBReport, Fed1UCBServer
from fedxab.algorithms.fedpne import FedPNEBroadcast, FedPNEClient, FedPNEReport, FedPNEServer
from fedxab.algorithms.fedtpe import FedTPEClient, FedTPEServer, TPEBroadcast, TPEReport
from fedxab.algorithms.ftsde import (
    DPFTSDEServer,
    FTSBroadcast,
    FTSDEClient,
    FTSDEServer,
    FTSReport,
)
from fedxab.algorithms.hct import HCT
from fedxab.algorithms.parallel import (
    ParallelBroadcast,
    ParallelClient,
    ParallelReport,
    ParallelServer,
)
from fedxab.algorithms.pfhct import PFHCTBroadcast, PFHCTClient, PFHCTServer
from fedxab.algorithms.pfpne import PFPNEBroadcast, PFPNEClient, PFPNEReport, PFPNEServer
from fedxab.algorithms.poo import POO
from fedxab.algorithms.protocol import Finished, WireMessage, Withdrawal
from fedxab.algorithms.ts import TSBroadcast, TSClient, TSReport, TSServer
from fedxab.errors import ConfigError, ProtocolError

__all__ = [
    "ALGORITHMS",
    "FEDERATED",
    "NO_PARTICIPATION",
    "PRIVATE",
    "WIRE_TYPES",
    "algorithm_parameters",
    "decode_broadcast",
    "decode_report",
    "federated_parameters",
    "is_federated",
    "make_federation",
    "make_optimizer",
]

ALGORITHMS: dict[str, type] = {"hct": HCT, "poo": POO}

FEDERATED: dict[str, tuple[type, type]] = {
    "fedpne": (FedPNEServer, FedPNEClient),
    "dpfedpne": (DPFedPNEServer, DPFedPNEClient),
    "pfpne": (PFPNEServer, PFPNEClient),
    "pfhct": (PFHCTServer, PFHCTClient),
    "parallel": (ParallelServer, ParallelClient),
    "fed1ucb": (Fed1UCBServer, Fed1UCBClient),
    "local-hct": (LocalHCTServer, LocalHCTClient),
    "central-hct": (CentralHCTServer, CentralHCTClient),
    "ftsde": (FTSDEServer, FTSDEClient),
    "dpftsde": (DPFTSDEServer, FTSDEClient),
    "ts": (TSServer, TSClient),
    "fedtpe": (FedTPEServer, FedTPEClient),
}
"""Federated algorithms: name -> (server class, client class)."""

PRIVATE = {"dpfedpne": "client", "dpftsde": "server"}
"""Federated algorithms that release privacy events (they take a ``[privacy]`` section), and who
releases: each client (local DP: every client gets a :class:`~fedxab.privacy.release.ReleaseGate`)
or the trusted server (central DP: the server gets one gate per client, ``server.gates``)."""

NO_PARTICIPATION: dict[str, str] = {
    "pfpne": "its server fits each client's personalized tree from that client's reports in "
    "every phase",
    "pfhct": "its server fits each client's personalized tree from that client's reports in "
    "every phase",
    "parallel": "its m players pull disjoint parts of one schedule: a player not asked leaves "
    "a hole in it",
    "fed1ucb": "each client's arm statistics are merged every round; a skipped round has no "
    "statistic",
    "local-hct": "a baseline with no server decision to sample for",
    "central-hct": "the central baseline pulls one shared point per round from every client",
    "ftsde": "each agent runs a BO iteration every round; sample the aggregate with dpftsde's "
    "algorithm.q instead",
    "dpftsde": "its secret Poisson subsample algorithm.q is the paper's partial participation, "
    "amplified in the ledger; set algorithm.q instead",
    "ts": "a baseline without communication",
    "fedtpe": "each site's trials are merged every phase; not supported yet",
}
"""Federated algorithms that refuse ``[federation] participation < 1``, and why (one line each).
Every other federated algorithm (Fed-PNE, DP-Fed-PNE) asks a sample of its clients each phase:
its server takes ``ask(clients)`` and ``phase_pulls()``, its clients ``skip(broadcast)``."""

WIRE_TYPES: dict[str, tuple[type[WireMessage], type[WireMessage]]] = {
    "fedpne": (FedPNEBroadcast, FedPNEReport),
    "dpfedpne": (FedPNEBroadcast, FedPNEReport),
    "pfpne": (PFPNEBroadcast, PFPNEReport),
    "pfhct": (PFHCTBroadcast, PFPNEReport),  # PF-PNE's messages, plus eliminated nodes' means
    "parallel": (ParallelBroadcast, ParallelReport),
    "fed1ucb": (Fed1UCBBroadcast, Fed1UCBReport),
    "local-hct": (LocalHCTBroadcast, LocalHCTReport),
    "central-hct": (CentralHCTBroadcast, CentralHCTReport),
    "ftsde": (FTSBroadcast, FTSReport),
    "dpftsde": (FTSBroadcast, FTSReport),
    "ts": (TSBroadcast, TSReport),
    "fedtpe": (TPEBroadcast, TPEReport),
}
"""Federated algorithms: name -> (broadcast class, report class), to decode received payloads."""

# Set by the run (config [run] section), not by [algorithm] parameters; HCT's ``roots`` is set
# by PF-HCT's local stage.
_RUN_LEVEL = ("domain", "seed", "budget", "roots", "edges")
# ... and for federated algorithms also by the runner ([federation] section, client ids).
_FEDERATED_RUN_LEVEL = (
    *_RUN_LEVEL,
    "n_clients",
    "client_id",
    "partition",
    "edges",
    "categories",
)


@functools.cache
def _constructor_parameters(cls: type) -> tuple[inspect.Parameter, ...]:
    """The parameters of ``cls``'s constructor, read once per class: ``inspect.signature``
    costs about 0.1 ms, and a run reads them each time its config is validated, its parameters
    resolved (the run id) or a side built (on a broker: by the server agent and each client
    agent)."""
    return tuple(inspect.signature(cls).parameters.values())


def _keyword_defaults(cls: type, exclude: Iterable[str]) -> dict[str, Any]:
    """The keyword parameters of ``cls``'s constructor, in order, each with its default
    (``inspect.Parameter.empty`` if it has none); a ``**settings`` catch-all passed on to the
    base class adds the base class's parameters (e.g. DP-FTS-DE's server)."""
    skip = set(exclude)
    defaults: dict[str, Any] = {}
    for p in _constructor_parameters(cls):
        if p.kind == p.VAR_KEYWORD:
            inherited = _keyword_defaults(cls.__mro__[1], skip)
            defaults.update({n: d for n, d in inherited.items() if n not in defaults})
        elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in skip:
            defaults[p.name] = p.default
    return defaults


def _keyword_parameters(cls: type, exclude: Iterable[str]) -> list[str]:
    """The names of ``cls``'s keyword parameters (:func:`_keyword_defaults`)."""
    return list(_keyword_defaults(cls, exclude))


def _all_names() -> str:
    return (
        f"single-agent: {', '.join(sorted(ALGORITHMS))}; federated: {', '.join(sorted(FEDERATED))}"
    )


def _unknown(name: str) -> ConfigError:
    return ConfigError("algorithm.name", f"unknown algorithm {name!r}; allowed: {_all_names()}")


def is_federated(name: str) -> bool:
    """Whether ``name`` is a federated algorithm (server + clients) rather than a single agent."""
    return name in FEDERATED


def algorithm_parameters(name: str) -> list[str]:
    """The parameters an ``[algorithm]`` config section may set for single-agent ``name``."""
    return _keyword_parameters(ALGORITHMS[name], _RUN_LEVEL)


def federated_parameters(name: str) -> list[str]:
    """The parameters an ``[algorithm]`` section may set for federated ``name``.

    The server's parameters, then the client's that the server does not take.
    """
    server_cls, client_cls = FEDERATED[name]
    names = _keyword_parameters(server_cls, _FEDERATED_RUN_LEVEL)
    names += [p for p in _keyword_parameters(client_cls, _FEDERATED_RUN_LEVEL) if p not in names]
    return names


def resolved_parameters(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Every parameter an ``[algorithm]`` section may set for ``name``, with its value: ``params``
    over the constructors' defaults (for a federated algorithm the server's, then the client's).
    Two sections that differ only in writing a default out (or in writing ``1`` for a float
    parameter's ``1.0``) resolve to the same dict; unknown names raise :class:`ConfigError` as
    in :func:`make_optimizer`."""
    if name in FEDERATED:
        server_cls, client_cls = FEDERATED[name]
        defaults = _keyword_defaults(client_cls, _FEDERATED_RUN_LEVEL)
        defaults.update(_keyword_defaults(server_cls, _FEDERATED_RUN_LEVEL))
    elif name in ALGORITHMS:
        defaults = _keyword_defaults(ALGORITHMS[name], _RUN_LEVEL)
    else:
        raise _unknown(name)
    _check_params(name, dict(params), list(defaults))
    resolved = {k: d for k, d in defaults.items() if d is not inspect.Parameter.empty}
    for key, value in params.items():
        is_int = isinstance(value, int) and not isinstance(value, bool)
        resolved[key] = float(value) if is_int and isinstance(defaults[key], float) else value
    return resolved


def _check_params(name: str, params: dict[str, Any], allowed: list[str]) -> None:
    for key in params:
        if key not in allowed:
            raise ConfigError(
                f"algorithm.{key}",
                f"not a parameter of {name!r}; allowed: {', '.join(allowed) or 'none'}",
            )


def make_optimizer(
    name: str,
    domain: np.ndarray,
    *,
    seed: int,
    budget: int,
    params: dict[str, Any],
    edges: Sequence[Any] | None = None,
) -> Optimizer:
    """Build the single-agent optimizer ``name`` with ``params`` from a config section;
    ``edges`` (a typed space's cell boundaries) go to an optimizer that takes them."""
    cls = ALGORITHMS.get(name)
    if cls is None:
        if name in FEDERATED:
            raise ConfigError(
                "algorithm.name",
                f"{name!r} is a federated algorithm (server and clients), not a single-agent "
                "optimizer; build it with make_federation",
            )
        raise _unknown(name)
    _check_params(name, params, algorithm_parameters(name))
    if edges is not None and "edges" in _keyword_parameters(cls, ()):
        params = {**params, "edges": edges}
    try:
        return cls(domain, seed=seed, budget=budget, **params)
    except TypeError as exc:  # e.g. a string where a number is expected
        raise ConfigError(f"algorithm ({name})", str(exc)) from exc


def make_federation(
    name: str,
    domain: np.ndarray,
    *,
    n_clients: int,
    budget: int,
    seed: int,
    params: dict[str, Any],
    client_ids: Iterable[int] | None = None,
    edges: Sequence[Any] | None = None,
    categories: Sequence[int | None] | None = None,
) -> tuple[Any, list[Any]]:
    """Build the server and the clients of federated algorithm ``name``.

    ``budget`` is every client's horizon T; ``seed`` the run seed (clients and server derive the
    same partition from it). ``client_ids`` selects which clients to build (default: all
    ``0..n_clients-1``; a deployed client process builds only its own). ``edges``: a typed
    space's cell boundaries per coordinate (:attr:`fedxab.space.SearchSpace.edges`), given to
    each side that takes them (its tree then splits discrete coordinates between values,
    :class:`~fedxab.algorithms.partition.Partition`). ``categories``: the space's categorical
    coordinates (:attr:`fedxab.space.SearchSpace.categories`), given to each side that takes
    them (the FTS family's kernel then sees them one-hot). Unknown names and
    parameters raise :class:`ConfigError` naming ``algorithm.name`` / ``algorithm.<param>`` and
    listing what is allowed; the constructors' own checks name the offending parameter.
    """
    pair = FEDERATED.get(name)
    if pair is None:
        if name in ALGORITHMS:
            raise ConfigError(
                "algorithm.name",
                f"{name!r} is a single-agent optimizer, not a federated algorithm; "
                f"federated: {', '.join(sorted(FEDERATED))}",
            )
        raise _unknown(name)
    if isinstance(n_clients, bool) or not isinstance(n_clients, int) or n_clients < 1:
        raise ConfigError("federation.clients", f"must be an integer >= 1, got {n_clients!r}")
    _check_params(name, params, federated_parameters(name))
    server_cls, client_cls = pair
    run_level: dict[str, Any] = {"n_clients": n_clients, "budget": budget, "seed": seed}
    server_keys = set(_keyword_parameters(server_cls, ()))
    client_keys = set(_keyword_parameters(client_cls, ()))
    if edges is not None:  # to each side that builds a tree (test_partition checks that
        run_level["edges"] = edges  # every tree of an algorithm takes them, or none does)
    if categories is not None:
        run_level["categories"] = categories
    # Each side gets the run-level values and the parameters its constructor accepts.
    server_kw = {k: v for k, v in {**run_level, **params}.items() if k in server_keys}
    client_kw = {k: v for k, v in {**run_level, **params}.items() if k in client_keys}
    ids = range(n_clients) if client_ids is None else list(client_ids)
    for m in ids:
        if isinstance(m, bool) or not isinstance(m, int) or not 0 <= m < n_clients:
            raise ConfigError("client_ids", f"client ids must lie in 0..{n_clients - 1}, got {m!r}")
    try:
        server = server_cls(domain, **server_kw)
        if "partition" in client_keys and hasattr(server, "partition"):
            client_kw["partition"] = server.partition  # in-process: one shared geometry cache
        clients = [client_cls(m, domain, **client_kw) for m in ids]
    except TypeError as exc:  # e.g. a string where a number is expected
        raise ConfigError(f"algorithm ({name})", str(exc)) from exc
    return server, clients


def decode_broadcast(name: str, data: Any) -> Any:
    """The broadcast (or :class:`Finished`) of federated algorithm ``name`` from decoded wire
    data; anything else raises :class:`ProtocolError` naming the field."""
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == Finished.kind:
        return Finished.from_wire(data)
    return WIRE_TYPES[name][0].from_wire(data)


def decode_report(name: str, data: Any) -> Any:
    """The report of federated algorithm ``name`` from decoded wire data (or ProtocolError)."""
    if not isinstance(data, dict):
        raise ProtocolError(f"report must be a map, got {type(data).__name__}")
    if data.get("kind") == Withdrawal.kind:
        if not getattr(FEDERATED[name][0], "accepts_withdrawals", False):
            raise ProtocolError(f"algorithm {name!r} does not accept withdrawals")
        return Withdrawal.from_wire(data)
    return WIRE_TYPES[name][1].from_wire(data)
