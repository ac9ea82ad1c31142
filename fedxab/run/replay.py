"""The in-process replay of an elastic run's membership record (:mod:`fedxab.run.membership`).

A run of ``[federation] membership = "elastic"`` over a broker depends on who came and went, and
when: which clients were in the run as each phase opened, and whose reports the server took
before the phase closed. The server records both per phase (:class:`~fedxab.run.membership.
PhaseMembers`, in the ``communication`` block's ``membership``). :func:`replay` runs the same
config and seed in process, without a broker and without time: each phase opens with the
recorded members (the participation sample is drawn again from the seed and must give the
recorded ``asked``), every client of the run answers as its agent does (a client asked answers
the broadcast, any other skips it), and the server takes exactly the recorded ``reported``
clients' reports. A client recorded as withdrawing at its own budget in a phase (``withdrew``:
a client agent's ``[agents] client_budget``, which the replay's config does not hold) withdraws
there in the replay too, with the pulls it had made. So "identical on every transport" holds
when clients come and go.

What is identical (:func:`replay_differences` checks it): the recommendation, bit for bit; each
phase's record (members, asked, reported) and its counts (depth, reports accepted, messages and
bytes up: the reports are the same bytes); under DP-Fed-PNE each client's epsilon, for the
clients that reported every phase they were asked in (a client killed between its release and
its report may or may not have charged that release in the distributed run: its ledger says
which). The regret curves are compared where the distributed run's telemetry was complete
(no ``regret_coverage``): a client killed mid-phase may have pulled without its telemetry
reaching the server; the replay counts every pull its clients make.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fedxab.algorithms.registry import decode_broadcast
from fedxab.broker.codec import packb, unpackb
from fedxab.errors import ConfigError, FedxabError
from fedxab.run.assembly import build_run
from fedxab.run.identity import run_id_for
from fedxab.run.membership import PhaseMembers, RecordedMembers, membership_of

if TYPE_CHECKING:
    from fedxab.config import Config
    from fedxab.results import RunRecord, RunResults
    from fedxab.run.assembly import Functions

__all__ = ["ReplayError", "replay", "replay_differences", "replay_results"]


class ReplayError(FedxabError, RuntimeError):
    """A membership record that this config and seed cannot replay (another run's record)."""


def replay(
    config: Config,
    seed: int,
    membership: Sequence[PhaseMembers],
    *,
    functions: Functions | None = None,
) -> RunRecord:
    """Run ``config`` with ``seed`` in process, phase by phase as ``membership`` records it
    (module docstring); the run's record."""
    fed = config.federation
    if fed is None or not fed.elastic:
        raise ConfigError(
            "federation.membership",
            'a replay needs the run\'s config, whose membership is "elastic"; set it',
        )
    run_id = run_id_for(config, seed)
    parts = build_run(
        config, seed, run_id=run_id, server=True, client_ids=range(fed.clients), functions=functions
    )
    session, hosted = parts.server, parts.clients
    assert session is not None and hosted is not None and hosted.asked is not None
    session.members = RecordedMembers(membership, then=lambda phase: [])  # past it: refused below
    recorded = {p.phase: p for p in membership}
    name = config.algorithm.name
    t0 = time.perf_counter()
    msg = session.start()
    while session.finished is None:
        phase = session.phase
        record = recorded.get(phase)
        if record is None:
            raise ReplayError(f"the record has no phase {phase}: a record of another run")
        if tuple(session.asked) != record.asked:
            raise ReplayError(
                f"phase {phase}: the record asks {len(record.asked)} clients, the replay "
                f"{len(session.asked)}: a record of another config or seed"
            )
        hosted.asked[phase] = frozenset(record.asked)
        for m, used in record.withdrew:  # (at its own budget: not in the replay's config)
            hosted.clients[m].limit = used  # it withdraws here, with the pulls it had made
        wire = packb(msg.to_wire())
        active = session.active
        reported = set(record.reported)
        for m in active:
            report, telemetry, _ = hosted.answer(m, decode_broadcast(name, unpackb(wire)))
            if telemetry is not None:
                session.sums.add(telemetry)
            if report is None or m not in reported:
                continue
            verdict = session.classify(m, phase, packb(report.to_wire()))
            if verdict.outcome != "accepted":
                raise ReplayError(f"phase {phase}: client {m}'s report: {verdict.text}")
        if set(session.accepted) != reported:
            missing = sorted(reported - set(session.accepted))
            raise ReplayError(f"phase {phase}: recorded reports of clients {missing[:5]} not made")
        session.close_phase(len(wire), len(active))
        msg = session.msg
    for m in range(fed.clients):
        session.add_outcome(hosted.outcome(m))
    privacy = None
    if parts.run_ledger is not None:
        from fedxab.run.accounting import stopped_phases

        privacy = parts.run_ledger.block(range(fed.clients), stopped_phases(session.server))
        parts.run_ledger.close()
    return session.record(time.perf_counter() - t0, privacy)


def replay_differences(distributed: RunRecord, replayed: RunRecord) -> list[str]:
    """What differs between a distributed elastic run's record and its replay's, of what the
    replay promises to give identically (module docstring); empty: identical."""
    out: list[str] = []
    if not np.array_equal(distributed.recommendation, replayed.recommendation):
        out.append(
            f"recommendation: {distributed.recommendation.tolist()} != "
            f"{replayed.recommendation.tolist()}"
        )
    ours, theirs = membership_of(distributed.communication), membership_of(replayed.communication)
    if ours != theirs:
        out.append("membership: the phases' records differ")
    keys = ("phase", "depth", "asked", "reports_accepted", "messages_up", "bytes_up")
    a = [_pick(p, keys) for p in (distributed.communication or {}).get("per_phase", [])]
    b = [_pick(p, keys) for p in (replayed.communication or {}).get("per_phase", [])]
    if a != b:
        first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        out.append(f"per-phase counts differ (first at index {first}, {len(a)} vs {len(b)} phases)")
    if distributed.privacy is not None and replayed.privacy is not None:
        steady = _steady_clients(ours)
        e1, e2 = distributed.privacy["epsilon"], replayed.privacy["epsilon"]
        bad = [m for m in steady if m < len(e1) and m < len(e2) and e1[m] != e2[m]]
        if bad:
            out.append(f"epsilon of clients {bad[:5]} differs")
    ours_curve, theirs_curve = distributed.cumulative_regret, replayed.cumulative_regret
    if (
        distributed.regret_coverage is None
        and ours_curve is not None
        and (theirs_curve is None or not np.array_equal(ours_curve, theirs_curve))
    ):
        out.append("cumulative regret differs (the distributed run's telemetry is complete)")
    return out


def _pick(phase: Any, keys: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(phase.get(k) for k in keys)


def _steady_clients(membership: Sequence[PhaseMembers]) -> list[int]:
    """The clients that reported in every phase they were asked in."""
    asked: set[int] = set()
    missed: set[int] = set()
    for p in membership:
        asked.update(p.asked)
        missed.update(set(p.asked) - set(p.reported))
    return sorted(asked - missed)


def replay_results(results: RunResults) -> list[tuple[int, list[str]]]:
    """Replay every run of an elastic job's results (its config echo, each run's seed and
    membership record); per run, its seed and what differs (:func:`replay_differences`)."""
    from fedxab.config import config_from_dict

    config = config_from_dict(dict(results.config))
    out = []
    for run in results.runs:
        membership = membership_of(run.communication)
        if not membership:
            raise ReplayError(
                f"run {run.run_id} (seed {run.seed}) has no membership record: only a run of "
                '[federation] membership = "elastic" over a broker records one'
            )
        out.append((run.seed, replay_differences(run, replay(config, run.seed, membership))))
    return out
