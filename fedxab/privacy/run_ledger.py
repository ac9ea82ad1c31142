"""The ledger side of one private run: budgets, data owners, the gates and the privacy block.

Every party of a run that releases (the in-process runner, each client agent for its own clients,
or the server under central DP) opens the configured ledger (``[privacy] ledger``; with a
lifetime budget and no ledger, :func:`default_ledger_path`; else an in-memory one), sets each
client's budget ``(budget_epsilon, delta)`` when one is configured, names each client's data
owner (:func:`data_owner`) with its lifetime budget ``(lifetime_epsilon, delta)`` when one is
configured, and hands each private client a :class:`~fedxab.privacy.gate.LedgerGate`. At the end,
:meth:`RunLedger.block` recomputes every client's epsilon from the recorded events with the
configured accountant (never a running total): that is what the results file reports.
"""

from __future__ import annotations

import hashlib
import json
import os
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fedxab.privacy.accountants import FALLBACK, fallback_note
from fedxab.privacy.gate import LedgerGate
from fedxab.privacy.ledger import Budget, PrivacyLedger, canonical
from fedxab.privacy.mechanisms import PrivacyEvent

__all__ = [
    "RunLedger",
    "data_owner",
    "default_ledger_path",
    "ledger_location",
    "objective_digest",
]

LEDGER_HOME_VAR = "FEDXAB_HOME"
"""Environment variable naming the directory of the default lifetime ledger."""


def default_ledger_path() -> Path:
    """The ledger a run with a lifetime budget and no ``[privacy] ledger`` charges, on the
    machine of the party that releases: ``$FEDXAB_HOME/privacy-ledger.sqlite``, else
    ``$XDG_DATA_HOME/fedxab/...``, else ``~/.local/share/fedxab/...`` (the XDG default)."""
    home = os.environ.get(LEDGER_HOME_VAR)
    if not home:
        data = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
        home = str(Path(data) / "fedxab")
    return Path(home) / "privacy-ledger.sqlite"


def ledger_location(settings: Any, output_dir: str | Path | None = None) -> str | None:
    """Where the releasing parties of a run with ``[privacy]`` ``settings`` keep their ledger:
    ``ledger`` (a relative path is taken in ``output_dir``, the run's output directory, so that
    ``--output`` moves it with the results), else with a lifetime budget
    :func:`default_ledger_path`, else None (in memory)."""
    if settings.ledger is None:
        return None if settings.lifetime_epsilon is None else str(default_ledger_path())
    if output_dir is None or Path(settings.ledger).is_absolute():
        return settings.ledger
    return str(Path(output_dir) / settings.ledger)


def objective_digest(objective: Mapping[str, Any]) -> str:
    """``objective-`` and 12 hex digits of the SHA-256 of the ``[objective]`` section (as plain
    data, keys sorted): the default data set name, and the objective setting a ledger binds to
    a run's clients (:meth:`~fedxab.privacy.ledger.PrivacyLedger.set_owner`)."""
    text = json.dumps(objective, sort_keys=True, separators=(",", ":"), default=str)
    return "objective-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def data_owner(client: int, data_set: str) -> str:
    """The data owner client ``client`` is on ``data_set``: ``client-<m>/<data_set>``. A
    client id names the same party in every run of a federation (its key, its data), and the
    data set says which of its data the run reads."""
    return f"client-{int(client)}/{data_set}"


class RunLedger:
    """Run ``run``'s view of ``ledger``, accounting at ``delta``.

    ``objective``: the run's objective setting (:func:`objective_digest`); ``data_set`` (default:
    the same digest) names the clients' data owners; ``lifetime_epsilon`` is each owner's
    lifetime budget at ``delta``. ``location``: where the releasing parties keep the ledger
    (reported in the results; None for an in-memory ledger)."""

    def __init__(
        self,
        ledger: PrivacyLedger,
        run: str,
        *,
        delta: float,
        budget_epsilon: float | None = None,
        objective: str = "objective-unknown",
        data_set: str | None = None,
        lifetime_epsilon: float | None = None,
        location: str | None = None,
    ) -> None:
        self.ledger = ledger
        self.run = run
        self.delta = delta
        self.budget = None if budget_epsilon is None else Budget(budget_epsilon, delta)
        self.objective = objective
        self.data_set = data_set or objective
        self.lifetime = None if lifetime_epsilon is None else Budget(lifetime_epsilon, delta)
        self.location = location

    @classmethod
    def from_config(cls, config: Any, run: str, *, path: str | None = None) -> RunLedger:
        """From a run :class:`~fedxab.config.Config` with a ``[privacy]`` section; ``path``
        overrides its ledger file (``":memory:"``: the server's copy rebuilt from the ledger
        topic; it names no data owner, as only :meth:`gate` does, so it charges no lifetime
        budget; ``location`` stays where the releasing parties keep theirs)."""
        settings = config.privacy
        location = ledger_location(settings, config.output_dir)
        ledger = PrivacyLedger(
            path or location or ":memory:",
            accountant=settings.accountant,
            accountant_timeout_s=settings.accountant_timeout_s,
        )
        n_clients = config.federation.clients if config.federation is not None else 1
        return cls(
            ledger,
            run,
            delta=settings.accounting_delta(config.algorithm_params(), n_clients),
            budget_epsilon=settings.budget_epsilon,
            objective=objective_digest(config.to_dict()["objective"]),
            data_set=settings.data_set,
            lifetime_epsilon=settings.lifetime_epsilon,
            location=location,
        )

    def owner(self, client: int) -> tuple[str, str]:
        """Client ``client``'s data owner (:func:`data_owner`) and the run's objective setting,
        as :meth:`gate` names them in the ledger (and the ledger topic's records carry them)."""
        return data_owner(client, self.data_set), self.objective

    def gate(self, client: int) -> LedgerGate:
        """Client ``client``'s gate, with the run's delta and accountant, its budget (if any),
        its data owner and the owner's lifetime budget (if any) set in the ledger first."""
        self.ledger.set_run(self.run, self.delta, self.ledger.accountant.name)
        if self.budget is not None:
            self.ledger.set_budget(self.run, client, self.budget)
        owner, objective = self.owner(client)
        self.ledger.set_owner(self.run, client, owner, objective)
        if self.lifetime is not None:
            self.ledger.set_lifetime_budget(owner, self.lifetime)
        return LedgerGate(self.ledger, self.run, client)

    def block(self, clients: Iterable[int], withdrawn: Mapping[int, int]) -> dict[str, Any]:
        """A run's ``privacy`` block: per client (in ``clients`` order) the epsilon spent at
        ``delta`` and the releases recorded; ``withdrawn`` maps a client that dropped out to the
        phase it refused. ``accountant_fallbacks``: the accountant's computations so far (the
        run's budget checks and this block) that ran out of time and were answered by
        ``fallback_accountant`` (None if none was: :mod:`fedxab.privacy.accountants`), and
        ``fallback_reason`` says which and why in one line."""
        ids = list(clients)
        epsilon = self.ledger.spent_all(self.run, self.delta)
        releases = self.ledger.releases_all(self.run)
        per_client = [float(epsilon.get(m, 0.0)) for m in ids]
        by_phase = self.epsilon_by_phase(ids)
        fallbacks = self.ledger.accountant.fallbacks
        return {
            "accountant": self.ledger.accountant.name,
            "run_id": self.run,
            "ledger": self.location,
            "data_set": self.data_set,
            "lifetime_epsilon": None if self.lifetime is None else self.lifetime.epsilon,
            "delta": self.delta,
            "budget_epsilon": None if self.budget is None else self.budget.epsilon,
            "max_epsilon": max(per_client, default=0.0),
            "epsilon": per_client,
            "releases": [int(releases.get(m, 0)) for m in ids],
            "withdrawn": {str(m): int(p) for m, p in sorted(withdrawn.items())},
            "epsilon_by_phase": by_phase,
            "accountant_fallbacks": fallbacks,
            "fallback_accountant": FALLBACK if fallbacks else None,
            "fallback_reason": fallback_note(self.ledger.accountant),
        }

    def epsilon_by_phase(self, clients: Iterable[int]) -> list[list[float]]:
        """``[[phase, epsilon], ...]`` for every phase at which one of ``clients`` released: the
        maximum over ``clients`` of the epsilon spent up to and including that phase, recomputed
        from the events by the accountant at ``delta``.

        Clients with the same sequence of ``(phase, event)`` share one computation, and each
        distinct canonical prefix is accounted once."""
        wanted = {int(m) for m in clients}
        groups: set[tuple[tuple[int, PrivacyEvent], ...]] = {
            tuple(rows) for m, rows in self.ledger.history_all(self.run).items() if m in wanted
        }
        cache: dict[tuple[PrivacyEvent, ...], float] = {}
        steps: list[tuple[list[int], list[float]]] = []  # per group: its phases, epsilon after
        for rows in groups:
            phases: list[int] = []
            spent: list[float] = []
            for i, (phase, _) in enumerate(rows):
                if i + 1 < len(rows) and rows[i + 1][0] == phase:
                    continue  # the phase's last release closes it
                prefix = canonical(e for _, e in rows[: i + 1])
                if prefix not in cache:
                    cache[prefix] = float(self.ledger.accountant.epsilon(prefix, self.delta))
                phases.append(int(phase))
                spent.append(cache[prefix])
            steps.append((phases, spent))
        out: list[list[float]] = []
        for phase in sorted({p for phases, _ in steps for p in phases}):
            best = 0.0
            for phases, spent in steps:
                k = bisect_right(phases, phase)
                if k:
                    best = max(best, spent[k - 1])
            out.append([phase, best])
        return out

    def close(self) -> None:
        self.ledger.close()
