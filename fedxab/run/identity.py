"""A run's identity: the protocol all its parties must share, and the run id derived from it.

The protocol of a run is what the server and every client must agree on for the run to mean
anything (the algorithm and its parameters, including the privacy release settings such as
DP-Fed-PNE's ``epsilon`` or DP-FTS-DE's ``z``, ``q``, ``clip``; the domain; the objective's
direction, so that clients maximising and clients minimising never join one run; the budget T;
the number of clients M and, below 1, the participation q that every party draws the asked
clients with; an elastic membership, whose broadcasts name the clients asked; the seed).
Nothing local to one party belongs to it: not the objective itself (a client's private black
box: neither its name, its module nor a hash of its code), not the noise model or the
heterogeneity of a simulation, not the output directory, the ledger path, the accountant, a
budget, the agent timings, the broker, the keys or the metrics. So a server started with its
own ``--output`` or ``[agents]`` timings meets its clients, and a client may bring its own
objective.

The run id is ``{algorithm}-{12 hex digits of the protocol's SHA-256}-s{seed}``: it names the
run's topics, so parties that agree on the protocol meet without talking. Parties that do not
agree cannot meet on those topics; :mod:`fedxab.agents.lobby` tells them so, naming the fields
(:func:`protocol_differences`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fedxab.algorithms.registry import resolved_parameters
from fedxab.errors import FedxabError

if TYPE_CHECKING:
    from fedxab.config import Config

__all__ = [
    "PROTOCOL_VERSION",
    "ProtocolMismatchError",
    "protocol_differences",
    "protocol_of",
    "run_id_for",
    "run_id_of",
]

PROTOCOL_VERSION = 4
"""Version of the protocol dict and of the messages: parties of different versions never share
a run. 2: a telemetry message carries a client's entries of several phases with their regret
terms run-length encoded (:func:`fedxab.run.evaluation.telemetry_to_wire`). 3: the protocol
holds the objective's direction. 4: every record carries the execution's session, which the
server gives each client agent in the lobby's welcome (:mod:`fedxab.agents.lobby`)."""


class ProtocolMismatchError(FedxabError, RuntimeError):
    """A client and the server of one job do not share the run protocol (a different budget,
    seed, algorithm parameter, ...); the message names every differing field."""


def protocol_of(config: Config, seed: int) -> dict[str, Any]:
    """The protocol of run ``seed`` of ``config``: plain data, the same for every party.

    The algorithm's parameters are resolved (:func:`~fedxab.algorithms.registry.
    resolved_parameters`): a party that writes a default out shares the run of one that
    leaves it out."""
    algorithm = config.algorithm
    resolved = resolved_parameters(algorithm.name, algorithm.params)
    protocol: dict[str, Any] = {
        "version": PROTOCOL_VERSION,
        "algorithm": _plain({"name": algorithm.name, **resolved}),
        "domain": [[float(lo), float(hi)] for lo, hi in config.domain],
        "objective": {"direction": config.objective.direction},
        "budget": config.run.budget,
        "seed": seed,
    }
    if config.search_space is not None:  # how the box's points decode (absent: a plain box)
        protocol["space"] = _plain(config.search_space.to_dict())
    fed = config.federation
    if fed is not None:
        protocol["clients"] = fed.clients
        if fed.sampled:  # who is asked each phase: every party draws it (absent: everyone)
            protocol["participation"] = fed.participation
        if fed.elastic:  # broadcasts name the clients asked (absent: fixed membership)
            protocol["membership"] = fed.membership
    return protocol


def run_id_for(config: Config, seed: int) -> str:
    """``{algorithm}-{hash of the protocol}-s{seed}``: the same for every party of a run."""
    return run_id_of(protocol_of(config, seed))


def run_id_of(protocol: Mapping[str, Any]) -> str:
    """The run id of a protocol (:func:`protocol_of`'s plain data): what a party that names its
    protocol must name as its run id (:mod:`fedxab.agents.lobby` ignores hellos where the two
    disagree). Malformed data raises (TypeError, KeyError, ...)."""
    canonical = json.dumps(protocol, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]
    return f"{protocol['algorithm']['name']}-{digest}-s{protocol['seed']}"


def protocol_differences(
    expected: Mapping[str, Any], got: Mapping[str, Any], *, prefix: str = ""
) -> list[str]:
    """Every field where ``got`` differs from ``expected``, as ``"field: expected X, got Y"``
    lines (nested tables by dotted name, e.g. ``algorithm.rho``)."""
    lines = []
    for key in sorted(set(expected) | set(got)):
        name = f"{prefix}{key}"
        a, b = expected.get(key), got.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            lines += protocol_differences(a, b, prefix=f"{name}.")
        elif a != b:
            lines.append(f"{name}: expected {_show(a)}, got {_show(b)}")
    return lines


def _plain(value: Any) -> Any:
    """``value`` as JSON data (tuples and frozen mappings become lists and dicts)."""
    return json.loads(json.dumps(value, default=_unfrozen))


def _unfrozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"not protocol data: {value!r}")


def _show(value: Any) -> str:
    return "(absent)" if value is None else json.dumps(value)
