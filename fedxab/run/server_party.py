"""The server's side of the wire without I/O (sans-I/O, as h11's ``Connection``): what the server
agent (:mod:`fedxab.agents.server`) does with each record it reads and which records it
publishes, with no event loop and no broker.

:class:`ServerParty` owns the run's :class:`~fedxab.run.session.ServerSession` and the message
bookkeeping: every record read is opened (size, decoding, signature), admitted
(:func:`~fedxab.run.envelope.admit`), classified once and counted in :attr:`ServerParty.counts`
(``accepted``; ``duplicate``; ``late``; ``invalid``, by topic and reason in
:attr:`ServerParty.rejected`), with one log line per refusal; a valid report is fed to the state
machine, a valid control message updates who joined, left, failed or stopped, the run's
population (:mod:`fedxab.run.population`) and the regret telemetry.
:meth:`ServerParty.on_report` and :meth:`ServerParty.on_control` return whether the agent's wait
for the phase barrier should look again. The records the server publishes are built here too:
its broadcasts and abort (:meth:`ServerParty.broadcast_record`,
:meth:`ServerParty.abort_record`) and, under central DP, its ledger-topic records
(:meth:`ServerParty.budget_records`, :meth:`ServerParty.ledger_records`), each sealed in the
execution's session (:attr:`ServerParty.signing_session`) if the run signs.

The classification: ``accepted``; ``duplicate`` (same client and phase again); ``late`` (an
earlier phase); ``invalid`` (undecodable, another run, unknown client, wrong kind, a future phase,
or a report the state machine rejects: NaN, wrong length, ...), counted by topic and reason (and
the metric ``fedxab_messages_rejected``). A refused record changes no state.

Every execution has its session (:mod:`fedxab.agents.lobby`): the server draws 128 random bits
at its first start, keeps them in its checkpoint, writes them into every broadcast and gives
them to each client agent in the lobby's welcome. A report, telemetry, leave, outcome or failure
message of another session than this execution's is refused (``replay``): the run id of a job
repeats in every execution, the session does not. A signing run
(:func:`~fedxab.security.agents.signing_on`) also refuses a message whose signature does not
match its claimed sender (``bad_signature``, ``missing_signature``, ``unknown_sender``,
``malformed``); such failures name a client's key as wrong only by the rule of
:class:`~fedxab.security.agents.KeyWatch` (forgeries are counted, never blamed on a client).

With ``metrics`` (:class:`~fedxab.monitoring.metrics.FederationMetrics`) the party's observer
(through its :class:`~fedxab.run.watch.RunWatch`) gets the server's view of the run as it goes:
every message's classification (reports by outcome, control messages by kind, repeated
broadcasts), each closed phase (messages, bytes, duration), the regret from the clients'
telemetry, the clients' epsilon (central DP: from the server's own ledger, during the run; local
DP: from the rebuilt ledger, at the end), and at the end every value of the run's record.

Under local DP (:func:`~fedxab.run.outcome.stays_local`, DP-Fed-PNE) the server learns only the
releases the clients' ledgers charged: the clients' telemetry carries the counts of their pulls
and no regret terms, an outcome message is refused (``local_dp``) and never kept, and the run's
record has no ``clients`` block and no regret curves built from the clients' pulls; its
``withheld`` block names them and says why. Its metrics, progress and dashboard show no regret
and no observed value. A party whose clients all run in its agent's process
(``local_clients``) is handed their full telemetry and their outcomes (with their trials) in
process (:meth:`ServerParty.take_local`), never over the broker, and its record is complete.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections import Counter
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import numpy as np

from fedxab.algorithms.protocol import Finished
from fedxab.broker.codec import SERVER, Envelope, packb
from fedxab.errors import ProtocolError
from fedxab.privacy.best import checked_best_release
from fedxab.run.accounting import regret_coverage, stopped_phases
from fedxab.run.envelope import Refusal, admit
from fedxab.run.evaluation import RegretSums, Telemetry, telemetry_from_wire
from fedxab.run.failures import failure_body, failure_text
from fedxab.run.membership import PhaseMembers, RecordedMembers, Roster, wrap_broadcast
from fedxab.run.outcome import ClientOutcome, stays_local
from fedxab.run.watch import RunWatch
from fedxab.security.agents import KeyWatch
from fedxab.security.signing import KeyId, SignatureError, open_record

if TYPE_CHECKING:
    from fedxab.broker.base import Record
    from fedxab.config import Config
    from fedxab.privacy.run_ledger import RunLedger
    from fedxab.results import RunRecord
    from fedxab.run.observe import RunObserver
    from fedxab.run.session import ServerSession
    from fedxab.security.signing import Signer

__all__ = ["CONTROL_KINDS", "ServerParty"]

log = logging.getLogger(__name__)

CONTROL_KINDS = (
    "join",
    "leave",
    "heartbeat",
    "telemetry",
    "outcome",
    "failed",
    "stopped",
    "best_dp",
)
"""The kinds a client sends the server on the control topic."""

_SESSIONLESS = ("join", "heartbeat")
"""Kinds a client sends before it has the execution's session (:mod:`fedxab.agents.lobby`)."""


def _some(ids: list[int], shown: int = 20) -> str:
    """``ids`` for a log line: the first ``shown``, then how many more."""
    text = ", ".join(str(m) for m in ids[:shown])
    return text if len(ids) <= shown else f"{text} and {len(ids) - shown} more"


class ServerParty:
    """One run's server side of the wire (module docstring): feed it the records read, take
    the records to publish."""

    def __init__(
        self,
        config: Config,
        session: ServerSession,
        *,
        run_id: str,
        signer: Signer | None,
        max_bytes: int,
        observer: RunObserver,
        local_clients: bool = False,
        run_ledger: RunLedger | None = None,
        namespace: str = "fedxab",
    ) -> None:
        assert config.federation is not None and config.agents is not None
        self.config = config
        self.run_session = session
        self.run_id = run_id
        self.n_clients = config.federation.clients
        self.budget = config.run.budget
        self.domain = config.domain
        self.phase_deadline_s = config.agents.phase_deadline_s
        self.signer = signer  # None unless [security] sign = true
        self.max_bytes = max_bytes
        self.observer = observer
        self.local_only = stays_local(config)
        """Local DP: the clients' outcomes and regret terms never come over the broker."""
        self.local_clients = local_clients
        """Every client runs in the agent's process and hands its telemetry over there."""
        self.run_ledger = run_ledger
        self.namespace = namespace  # (written into the ledger-topic records)
        """Central DP: the ledger this (trusted) server's releases are recorded in."""
        self.watch = RunWatch.of_session(observer, session, run_ledger)
        """What the observer is told: progress, running regret, epsilon."""
        self.fresh_telemetry = 0
        """Telemetry messages that added pulls (the agent's end waits for them)."""
        self.last_published = time.monotonic()
        """When the server last built a record for the broadcast topic (monotonic seconds)."""
        self.alive_interval = config.agents.rebroadcast_s
        """The longest the server stays silent on the broadcast topic while it runs."""
        self.signing_session = ""
        """This execution's session (:mod:`fedxab.agents.lobby`): written into every record
        the server publishes; a client's record of another session is refused (``replay``)."""
        self.counts: Counter[str] = Counter()
        self.rejected: Counter[tuple[str, str]] = Counter()
        """Refused messages by (topic, reason)."""
        self.joined: set[int] = set()
        self.left: set[int] = set()
        self.failure: str | None = None
        """Why the run stops: a client's objective failed (its ``failed`` message)."""
        self.stopped: set[int] = set()
        """Clients whose objective failed, or whose agent took the server's abort (``failed``
        and ``stopped`` messages of this execution)."""
        self.control_live: dict[int, int] = {}
        """Per partition of the control topic, the first offset of this execution: a
        ``failed`` or ``stopped`` message before it belongs to an earlier execution."""
        self.resumed = False
        """Whether this execution resumes closed phases from a checkpoint: a join or leave
        before :attr:`control_live` was then already named by an earlier execution."""
        self.last_seen: dict[int, float] = {}
        self.last_report: Record | None = None
        """The last record read from the report topic (committed once its phase closes)."""
        self.keys = KeyWatch(part=0.5)  # a log line: before the client agent stops
        """Messages that claimed to come from a client but failed its key (by client), and
        whether that says the client's key is not the server's."""
        self._decoded_terms: weakref.WeakValueDictionary[bytes, np.ndarray] = (
            weakref.WeakValueDictionary()
        )
        """Regret terms decoded from telemetry, shared by the clients that sent the same
        (:func:`~fedxab.run.evaluation.telemetry_from_wire`)."""
        self.roster: Roster | None = None
        """Elastic membership (:mod:`fedxab.run.membership`): who is in the run, from the
        control topic; None: fixed membership."""
        self.min_clients = config.agents.min_clients or 1
        if config.federation.elastic:
            self.roster = Roster(config.agents.liveness)
            roster = self.roster
            session.members = lambda phase: roster.members(time.time())
        counts_only = RegretSums(self.n_clients, self.budget, global_known=False, local_known=False)
        self._wire_sums = counts_only if self.local_only else session.sums
        """What checks the telemetry that comes over the broker (local DP: counts only)."""

    # ----------------------------------------------------------------------- bookkeeping
    def count(self, name: str) -> None:
        """Count one event in :attr:`counts` and tell the observer."""
        self.counts[name] += 1
        where, _, what = name.partition("_")
        if where == "report":
            self.observer.on_report(what)
        elif where == "control":
            self.observer.on_control(what)
        elif name == "broadcast_repeated":
            self.observer.on_broadcast_repeated()

    def _reject(self, outcome: str, why: str, text: str, where: str = "report") -> None:
        """Count a rejected message (``outcome`` invalid or late, for ``why``) and log one line:
        a warning for an invalid one, info for a late one (normal under at-least-once delivery,
        e.g. after a repeated broadcast)."""
        self.count(f"{where}_{outcome}")
        self.rejected[where, why] += 1
        self.observer.on_rejected(where, why)
        level = logging.WARNING if outcome == "invalid" else logging.INFO
        log.log(level, "run %s: %s %s (%s): %s", self.run_id, outcome, where, why, text)

    def count_ledger(self, skipped: int, reasons: Counter[str]) -> None:
        """Count the ledger-topic records a rebuild refused (``reasons``: by reason)."""
        self.counts["ledger_invalid"] += skipped
        self.rejected.update({("ledger", why): n for why, n in reasons.items()})
        self.observer.on_ledger_invalid(skipped)
        for why, n in reasons.items():
            self.observer.on_rejected("ledger", why, n)

    def _envelope(self, record: Record, kinds: tuple[str, ...], where: str) -> Envelope | None:
        """The record's envelope if it is for this run, of an expected kind, from a known
        client whose id matches the record key (and, if this run signs, signed by that client in
        this session, except a join or heartbeat); else None (counted as invalid). With signing
        on, the record is verified first: one not signed by the claimed client's key is refused
        with the :class:`~fedxab.security.signing.SignatureError`'s reason."""
        try:
            opened = open_record(record.value, self.signer, self.max_bytes)
        except ProtocolError as exc:
            self._reject("invalid", exc.reason, str(exc), where)
            if isinstance(exc, SignatureError) and exc.client is not None:
                self._bad_signature(exc.client)
            return None
        m = opened.envelope.client_id
        if self.signer is not None and m is not None:
            self.keys.verified(m)
        admitted = admit(
            opened,
            run_id=self.run_id,
            kinds=kinds,
            n_clients=self.n_clients,
            key=record.key,
            session=self.signing_session,
            sessionless=_SESSIONLESS,
        )
        if isinstance(admitted, Refusal):
            self._reject("invalid", admitted.reason, admitted.text, where)
            return None
        return admitted

    # ---------------------------------------------------------------------------- keys
    @property
    def bad_signatures(self) -> Counter[KeyId]:
        """Messages that claimed a client but failed its key, by client."""
        return self.keys.failed

    def _bad_signature(self, m: int) -> None:
        """Count a message that claimed client ``m`` but failed its key; once that says the
        key is wrong (:class:`~fedxab.security.agents.KeyWatch`), one error naming the client
        and the fingerprint of the key this server holds for it (the status lines repeat it
        while the client is missing)."""
        if self.signer is None:
            return
        was = self.keys.suspect(m)
        if self.keys.fail(m) and not was:
            log.error(
                "run %s: %s; give the client agent the key file of client %d that the server "
                "uses (or find who else publishes as it)",
                self.run_id,
                self._wrong_key_text(m),
                m,
            )

    def lobby_refused(self, exc: SignatureError) -> None:
        """A hello in the lobby failed a client's key (:meth:`_bad_signature`)."""
        if exc.reason == "bad_signature" and exc.client is not None:
            self._bad_signature(exc.client)

    def _wrong_key_text(self, m: int) -> str:
        assert self.signer is not None
        return (
            f"{self.bad_signatures[m]} message(s) from client {m} failed verification over "
            f"{self.keys.after_s:.0f} s or more and none verified: it signs with another key "
            f"than the server's for it (fingerprint {self.signer.fingerprint(m)})"
        )

    # ------------------------------------------------------------------------ reading
    def on_report(self, record: Record) -> bool:
        """Classify one record of the report topic and feed it to the state machine if valid;
        whether it was accepted (the phase barrier may be met)."""
        self.last_report = record
        env = self._envelope(record, ("report",), "report")
        if env is None:
            return False
        m = env.client_id
        assert m is not None
        verdict = self.run_session.classify(m, env.phase, env.payload)
        if verdict.outcome in ("late", "invalid"):
            self._reject(verdict.outcome, verdict.reason, verdict.text)
            return False
        self.count(f"report_{verdict.outcome}")
        if verdict.outcome == "duplicate":
            log.info("run %s: duplicate report of %s", self.run_id, verdict.text)
            return False
        self.observer.on_phase_reports(len(self.run_session.accepted))
        return True

    def on_control(self, record: Record) -> bool:
        """Join, leave, heartbeat, telemetry, outcome, failed, stopped and best_dp messages
        (idempotent); whether the agent's waits should look again (a leave, telemetry, or a
        client that failed or stopped in this execution)."""
        env = self._envelope(record, CONTROL_KINDS, "control")
        if env is None:
            return False
        m = env.client_id
        assert m is not None
        repeat = False  # a join or leave of a client that had already sent one: a duplicate
        wake = False
        live = record.offset >= self.control_live.get(record.partition, 0)
        now = time.time()
        if env.kind == "join":
            repeat = m in self.joined
            self.joined.add(m)
            if m not in self.run_session.withdrawn:  # (a withdrawn client is out for good)
                self.run_session.population.join(m, news=live or not self.resumed)
            if self.roster is not None:  # a rejoin is no duplicate; it may open a phase
                repeat = not self.roster.join(m, now)
                wake = True
        elif env.kind == "leave":
            repeat = m in self.left
            self.left.add(m)
            if self.run_session.finished is None:  # (after the final answer: it finished)
                self.run_session.population.leave(m, news=live or not self.resumed)
            if self.roster is not None:
                repeat = not self.roster.leave(m, now)
            wake = True
        elif env.kind == "telemetry":
            try:
                entries = self._telemetry_entries(env, m)
            except Exception as exc:  # any defect of an untrusted body: reject it, keep running
                self._reject("invalid", "bad_payload", f"telemetry of client {m}: {exc}", "control")
                return False
            for telemetry in entries:
                if self.local_only and self.local_clients:
                    break  # (the counts of what the clients handed over in full: take_local)
                if self.run_session.add_telemetry(telemetry, checked=True):
                    self._fresh(telemetry)
            wake = True
        elif env.kind == "failed":
            try:
                text = failure_text(env.body())
            except ProtocolError as exc:
                self._reject("invalid", "bad_payload", f"failed of client {m}: {exc}", "control")
                return False
            if not live:
                log.info(
                    "run %s: an earlier execution's failure of client %d: %s", self.run_id, m, text
                )
            else:
                self.stopped.add(m)
                if self.failure is None:
                    self.failure = (
                        f"run {self.run_id}: client {m} failed at phase {env.phase}: {text}"
                    )
                wake = True
        elif env.kind == "stopped":
            if live:  # (not a resumed run's earlier abort)
                self.stopped.add(m)
                wake = True
        elif env.kind == "best_dp":
            withheld = self.run_session.withheld
            try:
                release = checked_best_release(env.body(), m)
            except ProtocolError as exc:
                self._reject("invalid", "bad_payload", f"best_dp of client {m}: {exc}", "control")
                return False
            if withheld is not None:  # under local DP over the broker: the only best it learns
                withheld.setdefault("best_value_dp", {}).setdefault(str(m), release)
        elif env.kind == "outcome" and not self._outcome(env, m):
            return False
        self.last_seen[m] = now  # only a valid message says the client is alive
        if self.roster is not None and env.kind not in ("join", "leave"):
            self.roster.seen(m, now)
        self.count("control_duplicate" if repeat else f"control_{env.kind}")
        return wake

    def _outcome(self, env: Envelope, m: int) -> bool:
        """Keep client ``m``'s outcome message if it is valid and new or the same again;
        whether it was (else it is refused)."""
        if self.local_only:
            text = f"outcome of client {m}: under local DP a client's outcome stays with it"
            self._reject("invalid", "local_dp", text, "control")
            return False
        try:
            outcome = ClientOutcome.from_dict(env.body())
            if outcome.client != m:
                raise ProtocolError(f"outcome of client {outcome.client} sent by client {m}")
            outcome.check(self.budget, self.domain)
        except Exception as exc:  # any defect of an untrusted body: reject it, keep running
            self._reject("invalid", "bad_payload", f"outcome of client {m}: {exc}", "control")
            return False
        if not self.run_session.add_outcome(outcome) and (
            outcome.to_dict() != self.run_session.outcomes[m].to_dict()
        ):
            text = f"client {m} sent a second, different outcome; the first one is kept"
            self._reject("invalid", "conflict", text, "control")
            return False
        return True

    def take_local(
        self, telemetry: list[Telemetry], outcomes: Collection[ClientOutcome] = ()
    ) -> None:
        """A client agent of the same process (``local_clients``) hands over its clients' full
        telemetry and, at the end, their outcomes (with their trials): what the broker does
        not carry under local DP. The copies that come over the broker too (counts only) are
        then duplicates."""
        for t in telemetry:
            if self.run_session.add_telemetry(t):
                self._fresh(t)
        for outcome in outcomes:
            self.run_session.add_outcome(outcome)

    def _fresh(self, telemetry: Telemetry) -> None:
        """Telemetry that added pulls: counted (the end waits for it) and observed."""
        self.fresh_telemetry += 1
        self.watch.telemetry(telemetry)

    def _telemetry_entries(self, env: Envelope, m: int) -> list[Telemetry]:
        """The telemetry entries of a message from client ``m``, all checked before any is used:
        each of client ``m``, of a phase up to the envelope's, accepted by the regret sums."""
        entries = telemetry_from_wire(env.body(), self._decoded_terms, budget=self.budget)
        for t in entries:
            if t.client != m or t.phase > env.phase:
                raise ProtocolError(
                    f"entry of client {t.client}, phase {t.phase} in a message of client {m}, "
                    f"phase {env.phase}"
                )
            self._wire_sums.check(t)
        return entries

    # ------------------------------------------------------------------------ phases
    def barrier_met(self, open_for_s: float, deadline_s: float | None, quorum: float) -> bool:
        """Whether the open phase may close (:meth:`~fedxab.run.session.ServerSession.
        barrier_met`); under elastic membership the asked clients gone from the run (left, or
        silent past ``liveness_s``) are not waited for, and the next phase must be able to
        open (:meth:`may_open`)."""
        session = self.run_session
        if self.roster is None:
            return session.barrier_met(open_for_s, deadline_s, quorum)
        gone = self.roster.gone(session.asked, time.time())
        return self.may_open() and session.barrier_met(open_for_s, deadline_s, quorum, gone)

    def may_open(self) -> bool:
        """Whether the next phase may open: always under fixed membership; under elastic
        membership once ``[agents] min_clients`` clients are in the run."""
        roster = self.roster
        return roster is None or len(roster.members(time.time())) >= self.min_clients

    def ended(self, expected: np.ndarray) -> bool:
        """After the final answer: whether every client is done (fixed membership: all have
        left and their telemetry covers ``expected``; elastic: no client is in the run any
        more, and the telemetry of those that left covers their part of ``expected``)."""
        sums = self.run_session.sums
        if self.roster is None:
            return sums.complete(expected) and len(self.left) == self.n_clients
        if self.roster.members(time.time()):
            return False
        done = np.zeros_like(expected)
        left = sorted(self.left)
        done[left] = expected[left]
        return bool((sums.used[left] >= done[left]).all())

    def clients_in_run(self) -> set[int]:
        """The clients that took part: every client (fixed membership), or those that joined
        (elastic)."""
        return set(range(self.n_clients)) if self.roster is None else set(self.joined)

    def replay(self, closed: list[Any]) -> tuple[Any, list[Any]]:
        """Start the state machine and replay the checkpointed phases ``closed``; the open
        phase's broadcast and the closed phases' broadcasts, in order. Under elastic
        membership the checkpointed phases open with their recorded members."""
        session = self.run_session
        if session.members is not None and closed:
            record = [c.members for c in closed if c.members is not None]
            last = closed[-1]
            if last.opened is not None:  # the open phase, as its broadcast named it
                record.append(PhaseMembers(last.phase + 1, last.opened, (), ()))
            session.members = RecordedMembers(record, then=session.members)
        history = [self.run_session.start()]
        self.resumed = bool(closed)
        for phase in closed:
            self.run_session.restore(phase)
            history.append(self.run_session.msg)
            self.observer.on_phase(self.run_session.phases[-1])  # a new process counts these too
        if closed:
            log.info(
                "run %s: resumed from checkpoint after %d phases",
                self.run_id,
                len(self.run_session.phases),
            )
        return history.pop(), history

    def phase_closed(self, duration: float) -> None:
        """The last phase closed (its releases mirrored) after ``duration`` seconds: tell the
        observer its counts, who joined, left, was asked and reported, the round every active
        client reached, epsilon when due, and the progress; clients that said they leave but
        have not withdrawn are not active."""
        session = self.run_session
        leaving = self.left.difference(session.withdrawn)
        self.watch.phase_closed(
            session.phases[-1],
            duration,
            session.sums.used,
            leaving=len(leaving),
            population=session.population.records[-1],
        )

    def begins_the_run(self, record: Record) -> bool:
        """Whether ``record`` (the broadcast topic's first) is this run's broadcast of phase 1
        (a resumed server whose broker lost the topic publishes its closed phases again)."""
        try:
            env = open_record(record.value, self.signer, self.max_bytes).envelope
        except ProtocolError:
            return False
        return env.run_id == self.run_id and env.phase == 1

    def waiting_text(self, phase: int, waited: float) -> str:
        """Who an open phase still waits for, and why as far as the server can tell."""
        session = self.run_session
        active = session.asked if session.elastic else session.active
        missing = [m for m in active if m not in session.accepted]
        parts = [
            f"run {self.run_id}: phase {phase} has waited {waited:.0f} s for {len(missing)} of "
            f"{len(active)} clients"
        ]
        never = [m for m in missing if m not in self.joined]
        if never:
            parts.append(f"never joined: {_some(never)}")
        silent = [m for m in missing if m in self.joined]
        if silent:
            parts.append(f"joined, no report yet: {_some(silent)}")
        for m in [m for m in missing if self.keys.suspect(m)][:3]:
            parts.append(self._wrong_key_text(m))
        if self.phase_deadline_s is None:
            parts.append("without [agents] phase_deadline_s a phase waits for every client")
        return "; ".join(parts)

    def warn_incomplete(self, expected: np.ndarray) -> None:
        """At the end: one warning naming the clients that did not confirm the final answer
        (no ``leave``), one naming those whose telemetry does not cover the pulls ``expected``
        of them (:func:`~fedxab.run.accounting.regret_coverage`)."""
        came = range(self.n_clients) if self.roster is None else self.joined
        gone = sorted(set(came) - self.left)
        if gone:
            log.warning(
                "run %s: %d client(s) did not confirm the final answer (first: %s)",
                self.run_id,
                len(gone),
                gone[:5],
            )
        coverage = regret_coverage(self.run_session.sums, expected)
        if coverage is not None:
            log.warning(
                "run %s: telemetry incomplete for %d client(s) (first: %s); the regret counts "
                "%d of %d pulls (results: regret_coverage)",
                self.run_id,
                len(coverage["clients"]),
                coverage["clients"][:5],
                coverage["pulls_received"],
                coverage["pulls_expected"],
            )

    # ------------------------------------------------------------------------ the run
    def started(self, transport: str) -> None:
        """Tell the observer the run starts over ``transport`` (with the regret this server can
        compute: none under local DP) and, for a private run, the clients' epsilon so far."""
        sums = self.run_session.sums
        known = (sums.global_sum is not None, sums.local_sum is not None)
        self.watch.start(
            self.config, self.run_id, transport, (False, False) if self.local_only else known
        )
        self.watch.privacy()

    def privacy_block(self, run_ledger: RunLedger | None = None) -> dict[str, Any] | None:
        """A private run's ``privacy`` block from ``run_ledger`` (local DP: the ledger rebuilt
        from the ledger topic), by default this server's own (central DP); None without one."""
        if run_ledger is None:
            run_ledger = self.run_ledger
        if run_ledger is None:
            return None
        return run_ledger.block(range(self.n_clients), stopped_phases(self.run_session.server))

    def finish(self, wall: float, privacy: dict[str, Any] | None) -> RunRecord:
        """The run's record after ``wall`` seconds (its ``privacy`` block: :meth:`privacy_block`),
        once the telemetry and the ledger are in; this server's ledger closed, one last progress
        update (:meth:`RunWatch.finished <fedxab.run.watch.RunWatch.finished>`) and the run's
        end told to the observer."""
        if self.run_ledger is not None:
            self.run_ledger.close()
        session = self.run_session
        record = session.record(wall, privacy)
        phase = session.phases[-1].phase if session.phases else None
        self.watch.finished(record, session.sums.used, phase)
        self.watch.ended(record)
        return record

    # ------------------------------------------------------------------------ writing
    def broadcast_record(self, msg: Any) -> tuple[bytes, int]:
        """The broadcast (or final answer) ``msg`` as it goes on the broadcast topic, and its
        payload's size (what the results count as communication)."""
        wire = msg.to_wire()
        if self.roster is not None:  # the clients asked, named (fedxab.run.membership)
            asked = [] if isinstance(msg, Finished) else self.run_session.asked_in(int(msg.phase))
            wire = wrap_broadcast(wire, asked, self.n_clients)
        payload = packb(wire)
        return self._to_every_client("broadcast", int(msg.phase), payload), len(payload)

    def abort_record(self, phase: int) -> bytes:
        """The server's abort of the run at ``phase`` (:attr:`failure`), for the broadcast
        topic (:mod:`fedxab.run.failures`)."""
        assert self.failure is not None
        return self._to_every_client("abort", phase, packb(failure_body(self.failure)))

    def alive_record(self) -> bytes:
        """The server's sign of life on the broadcast topic, published when it has published
        nothing there for ``[agents] rebroadcast_s`` (:func:`~fedxab.agents.waits.keep_alive`):
        a client agent that hears nothing from the server for ``server_silence_s`` stops
        (:func:`~fedxab.agents.waits.within`), as its server has ended."""
        phase = 0 if self.run_session.msg is None else self.run_session.phase
        return self._to_every_client("alive", phase, packb({}))

    def _to_every_client(self, kind: str, phase: int, payload: bytes) -> bytes:
        """A message of the server to every client, signed if this run signs (built as it is
        published: :attr:`last_published`)."""
        self.last_published = time.monotonic()
        env = Envelope(
            run_id=self.run_id,
            kind=kind,
            phase=phase,
            sender=SERVER,
            msg_id=f"{kind}:{phase}",
            payload=payload,
            sent_at=time.time(),
            session=self.signing_session,
        )
        sealed = env.encode()
        if self.signer is not None:
            sealed = self.signer.seal_for_every_client(sealed, self.signing_session)
        return sealed

    def _seal_about(self, envelope_bytes: bytes, m: int) -> bytes:
        """The server's message about client ``m`` as it goes on the wire, signed if this run
        signs (Ed25519: with the server's key, naming ``m``; HMAC: with ``m``'s key)."""
        if self.signer is None:
            return envelope_bytes
        return self.signer.seal_about(envelope_bytes, m, self.signing_session)

    def budget_records(self) -> list[tuple[str, bytes]]:
        """Central DP: each client's budgets and data owner, for the ledger topic (by key);
        none without this server's ledger."""
        from fedxab.privacy.mirror import Owner, budget_record  # (private runs only)

        run_ledger, namespace = self.run_ledger, self.namespace
        if run_ledger is None:
            return []
        return [
            (
                str(m),
                self._seal_about(
                    budget_record(
                        self.run_id,
                        m,
                        run_ledger.budget,
                        by_server=True,
                        namespace=namespace,
                        owner=Owner.of(run_ledger, m),
                    ),
                    m,
                ),
            )
            for m in range(self.n_clients)
        ]

    def ledger_records(self, *, end: bool = False) -> list[tuple[str, bytes]]:
        """Central DP: the releases recorded since the last call, for the ledger topic (by
        key), for each client (and, with ``end``, each client's end marker); none without this
        server's ledger. In a signing run each record is kept in the ledger as its row's
        evidence, as a client keeps its own."""
        from fedxab.privacy.mirror import Owner, end_record, release_record  # (private only)

        run_ledger, namespace = self.run_ledger, self.namespace
        if run_ledger is None:
            return []
        records = []
        server = self.run_session.server
        for m, gate in server.gates.items():
            owner = Owner.of(run_ledger, m)
            for phase, event in gate.drain():
                record = release_record(
                    self.run_id, m, phase, event, by_server=True, namespace=namespace, owner=owner
                )
                sealed = self._seal_about(record, m)
                if self.signer is not None:
                    gate.ledger.record(self.run_id, m, phase, event, evidence=sealed)
                records.append((str(m), sealed))
            if end:
                rows = [(p, r, e) for p, r, _, e in run_ledger.ledger.history(self.run_id, m)]
                record = end_record(self.run_id, m, rows, by_server=True, namespace=namespace)
                sealed = self._seal_about(record, m)
                if self.signer is not None:
                    gate.ledger.set_end(self.run_id, m, sealed)
                records.append((str(m), sealed))
        return records
