"""The server agent: drives a federated server state machine over a broker (asyncio service).

Per phase: publish the broadcast on ``{ns}.{run}.broadcast``; read reports
from ``{ns}.{run}.report`` (consumer group ``server``, committed only once a phase is
checkpointed, so an unfinished phase's reports are delivered again after a restart); feed each
valid report to the state machine; close the phase when every expected client has reported, or,
after ``[agents] phase_deadline_s``, when a ``quorum`` has (:class:`~fedxab.config.AgentsConfig`);
checkpoint; publish the next
broadcast. The final :class:`~fedxab.algorithms.protocol.Finished` is broadcast like a phase.

Every received message is classified once and counted in :attr:`ServerAgent.counts`:
``accepted``; ``duplicate`` (same client and phase again); ``late`` (an earlier phase);
``invalid`` (undecodable, another run, unknown client, wrong kind, a future phase, or a report the
state machine rejects: NaN, wrong length, ...). A rejected message changes no state and never stops
the agent; each gets one log line naming the reason, and is counted by topic and reason in
:attr:`ServerAgent.rejected` (and the metric ``fedxab_messages_rejected``).

Every execution has its session (:mod:`fedxab.agents.lobby`): the server draws 128 random bits
at its first start, keeps them in its checkpoint, writes them into every broadcast and gives
them to each client agent in the lobby's welcome. A report, telemetry, leave, outcome or failure
message of another session than this execution's is refused (``replay``): the run id of a job
repeats in every execution, the session does not. A signing run
(:func:`~fedxab.security.agents.signing_on`) also refuses a message whose signature does not
match its claimed sender (``bad_signature``, ``missing_signature``, ``unknown_sender``,
``malformed``); such failures name a client's key as wrong only by the rule of
:class:`~fedxab.security.agents.KeyWatch` (forgeries are counted, never blamed on a client).

With ``metrics`` (:class:`~fedxab.monitoring.metrics.FederationMetrics`) the agent also exports
the server's view of the run as it goes: every message's classification (reports by outcome,
control messages by kind, repeated broadcasts), each closed phase (messages, bytes, duration), the
regret from the clients' telemetry, the clients' epsilon (central DP: from the server's own
ledger, during the run; local DP: from the rebuilt ledger, at the end), and at the end every
value of the run's record.

Under local DP (:func:`~fedxab.run.outcome.stays_local`, DP-Fed-PNE) the server learns only the
releases the clients' ledgers charged: the clients' telemetry carries the counts of their pulls
and no regret terms, an outcome message is refused (``local_dp``) and never kept, and the run's
record has no ``clients`` block and no regret curves built from the clients' pulls; its
``withheld`` block names them and says why. Its metrics, progress and dashboard show no regret
and no observed value. A server agent whose clients all run in its own process
(``local_clients``: ``fedxab run``, :func:`~fedxab.agents.distributed.run_on_broker`) is
handed their full telemetry and their outcomes (with their trials) in process by the client
agents (:meth:`ServerAgent.take_local`), never over the broker, and its record is complete.

The control topic (join, leave, heartbeat, telemetry) is read from its beginning on every start
and never committed: everything on it is idempotent, so a restarted server simply rebuilds its view
of the clients and of the regret telemetry (:mod:`fedxab.run.evaluation`) from it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedxab.agents.checkpoint import ServerCheckpoint
from fedxab.agents.ledger_mirror import rebuild_ledger
from fedxab.agents.lobby import new_session, refuse_strangers
from fedxab.agents.supervise import supervised
from fedxab.agents.waits import wait_set
from fedxab.algorithms.protocol import Finished
from fedxab.broker.base import Broker, Record, lobby_topic, run_topics, transport_of
from fedxab.broker.codec import SERVER, Envelope, packb
from fedxab.config import Config
from fedxab.errors import ConfigError, FedxabError, ProtocolError
from fedxab.privacy.best import checked_best_release
from fedxab.privacy.mirror import Owner, budget_record, end_record, release_record
from fedxab.privacy.run_ledger import RunLedger
from fedxab.results import RunRecord
from fedxab.run.accounting import PhaseCommunication, regret_coverage, stopped_phases
from fedxab.run.assembly import build_run, regret_known
from fedxab.run.envelope import Refusal, admit
from fedxab.run.evaluation import RegretSums, Telemetry, telemetry_from_wire
from fedxab.run.failures import failure_body, failure_text
from fedxab.run.identity import protocol_of
from fedxab.run.observe import (
    EpsilonWatch,
    ProgressCallback,
    observe_privacy,
    observer_of,
    start_run,
)
from fedxab.run.outcome import ClientOutcome, stays_local, withheld_block
from fedxab.security.agents import KeyWatch, open_record, signer_for
from fedxab.security.signing import KeyId, SignatureError

if TYPE_CHECKING:
    from fedxab.monitoring.metrics import FederationMetrics
    from fedxab.objectives.families import ClientFamily

__all__ = ["RunConflictError", "ServerAgent"]

log = logging.getLogger(__name__)


def _some(ids: list[int], shown: int = 20) -> str:
    """``ids`` for a log line: the first ``shown``, then how many more."""
    text = ", ".join(str(m) for m in ids[:shown])
    return text if len(ids) <= shown else f"{text} and {len(ids) - shown} more"


class RunConflictError(FedxabError, RuntimeError):
    """The run's topics already hold another start of the same run."""

    def __init__(self, run_id: str, published: int, topic: str) -> None:
        self.run_id, self.published, self.topic = run_id, published, topic
        super().__init__(
            f"run {run_id} already ran on this broker ({published} broadcast(s) on {topic}): "
            "start a new run under another [broker] namespace (--namespace NAME), or resume "
            "this one from its checkpoint"
        )


class ServerAgent:
    """One run's server over a broker; ``await agent.run()`` returns the run's record."""

    def __init__(
        self,
        config: Config,
        seed: int,
        broker: Broker,
        *,
        run_id: str,
        namespace: str = "fedxab",
        checkpoint: str | Path | None = None,
        progress: ProgressCallback | None = None,
        metrics: FederationMetrics | None = None,
        known_runs: Collection[str] = (),
        resume: bool | None = None,
        family: ClientFamily | None = None,
        local_clients: bool = False,
        sessions: dict[str, str] | None = None,
    ) -> None:
        if config.federation is None or config.agents is None:
            raise ConfigError("algorithm.name", f"{config.algorithm.name!r} is not federated")
        self.config = config
        self.observer = observer_of(metrics, progress)
        """Who watches the run (metrics, progress): :mod:`fedxab.run.observe`."""
        self.seed = seed
        self.broker = broker
        self.run_id = run_id
        self.namespace = namespace
        self.topics = run_topics(namespace, run_id)
        self.lobby = lobby_topic(namespace)
        self.protocol = protocol_of(config, seed)
        self.known_runs = frozenset({run_id, *known_runs})
        """The runs of this server's job: a client's hello for one of them is not refused."""
        self.group = f"{namespace}.{run_id}.server"
        """The server's consumer group on the report topic (one per run)."""
        self.settings = config.agents
        self.n_clients = config.federation.clients
        self.signer = signer_for(config)  # None unless [security] sign = true
        self.budget = config.run.budget
        self.algorithm = config.algorithm.name
        parts = build_run(config, seed, run_id=run_id, server=True, family=family)
        assert parts.server is not None
        self.run_session = parts.server
        """The run's server side (:class:`~fedxab.run.session.ServerSession`): this agent
        moves its messages and keeps its time."""
        self.server = self.run_session.server
        self.family = self.run_session.family  # None: the clients' own objectives
        self.local_only = stays_local(config)
        """Local DP: the clients' outcomes and regret terms never come over the broker."""
        self.local_clients = local_clients
        """Every client runs in this process and hands over its telemetry and outcome here."""
        counts_only = RegretSums(self.n_clients, self.budget, global_known=False, local_known=False)
        if self.local_only and not local_clients:
            regret = any(regret_known(self.family, config))
            self.run_session.withheld = withheld_block(config, regret)
            self.run_session.sums = counts_only
        self.sums = self.run_session.sums
        self._wire_sums = counts_only if self.local_only else self.sums
        """What checks the telemetry that comes over the broker (local DP: counts only)."""
        self.run_ledger = parts.run_ledger  # central DP: this (trusted) server releases
        clients = range(self.n_clients)
        ledger = self.run_ledger
        self._epsilon_watch = None if ledger is None else EpsilonWatch(ledger, clients)
        self.checkpoint = ServerCheckpoint(checkpoint, run_id)
        self.may_resume = checkpoint is not None if resume is None else resume
        """Whether this server may continue a run that already has broadcasts on the broker
        (by default: when it has a checkpoint to continue from); else it refuses to start."""
        self.counts: Counter[str] = Counter()
        self.rejected: Counter[tuple[str, str]] = Counter()
        """Refused messages by (topic, reason)."""
        self.session = ""
        """This execution's session: drawn at the first start, then checkpointed."""
        self.sessions = {} if sessions is None else sessions
        """The sessions of the job's runs this server knows, by run id: its own once drawn, and
        (shared by the server agents of one process, :func:`~fedxab.agents.distributed.serve`)
        those of the job's earlier runs. The lobby welcomes a client agent of any of them: a
        client process restarted while the server serves a later run replays the earlier
        runs first, and needs their sessions to."""
        self.joined: set[int] = set()
        self.left: set[int] = set()
        self.failure: str | None = None
        """Why the run stops: a client's objective failed (its ``failed`` message)."""
        self.stopped: set[int] = set()
        """Clients whose objective failed, or whose agent took the server's abort (``failed``
        and ``stopped`` messages of this execution): once every client is, an aborted run's
        server stops (:meth:`_abort`)."""
        self._control_live: dict[int, int] = {}
        """Per partition of the control topic, the first offset of this execution: a
        ``failed`` message before it belongs to an earlier execution of the run."""
        self.last_seen: dict[int, float] = {}
        self.live_regret = 0.0  # running sum of global regret terms (display only)
        self.live_local_regret = 0.0  # the same of the local terms (metrics only)
        self.fresh_telemetry = 0  # telemetry messages that added pulls (progress at the end)
        self._decoded_terms: weakref.WeakValueDictionary[bytes, np.ndarray] = (
            weakref.WeakValueDictionary()
        )
        """Regret terms decoded from telemetry, shared by the clients that sent the same
        (:func:`~fedxab.run.evaluation.telemetry_from_wire`)."""
        self.keys = KeyWatch(part=0.5)  # a log line: before the client agent stops
        """Messages that claimed to come from a client but failed its key (by client), and
        whether that says the client's key is not the server's."""
        self._last_report: Record | None = None
        self._wakeup = asyncio.Event()
        self._history: list[Any] = []
        self._closed: list[Any] = []  # the checkpoint's closed phases (:meth:`_open_session`)

    @property
    def phases(self) -> list[PhaseCommunication]:
        """The closed phases (their evaluations are counted from the telemetry at the end)."""
        return self.run_session.phases

    @property
    def finished(self) -> Finished | None:
        return self.run_session.finished

    @property
    def phase(self) -> int:
        """The open phase (the final answer's phase once the run is over; 0 before it starts)."""
        return 0 if self.run_session.msg is None else self.run_session.phase

    @property
    def outcomes(self) -> dict[int, ClientOutcome]:
        """What each client observed (sent after its last telemetry), by client id."""
        return self.run_session.outcomes

    # ----------------------------------------------------------------------------- messages
    def _count(self, name: str) -> None:
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
        self._count(f"{where}_{outcome}")
        self.rejected[where, why] += 1
        self.observer.on_rejected(where, why)
        level = logging.WARNING if outcome == "invalid" else logging.INFO
        log.log(level, "run %s: %s %s (%s): %s", self.run_id, outcome, where, why, text)

    def _envelope(self, record: Record, kinds: tuple[str, ...], where: str) -> Envelope | None:
        """The record's envelope if it is for this run, of an expected kind, from a known
        client whose id matches the record key (and, if this run signs, signed by that client in
        this session, except a join or heartbeat); else None (counted as invalid). With signing
        on, the record is verified first: one not signed by the claimed client's key is refused
        with the :class:`~fedxab.security.signing.SignatureError`'s reason."""
        try:
            opened = open_record(record.value, self.signer, self.broker.max_message_bytes)
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
            session=self.session,
            sessionless=("join", "heartbeat"),
        )
        if isinstance(admitted, Refusal):
            self._reject("invalid", admitted.reason, admitted.text, where)
            return None
        return admitted

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

    def _lobby_refused(self, exc: SignatureError) -> None:
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

    def on_report(self, record: Record) -> None:
        """Classify one record of the report topic and feed it to the state machine if valid."""
        self._last_report = record
        env = self._envelope(record, ("report",), "report")
        if env is None:
            return
        m = env.client_id
        assert m is not None
        verdict = self.run_session.classify(m, env.phase, env.payload)
        if verdict.outcome in ("late", "invalid"):
            self._reject(verdict.outcome, verdict.reason, verdict.text)
            return
        self._count(f"report_{verdict.outcome}")
        if verdict.outcome == "duplicate":
            log.info("run %s: duplicate report of %s", self.run_id, verdict.text)
            return
        self.observer.on_phase_reports(len(self.run_session.accepted))
        self._wakeup.set()

    def on_control(self, record: Record) -> None:
        """Join, leave, heartbeat and telemetry messages (idempotent)."""
        env = self._envelope(
            record,
            ("join", "leave", "heartbeat", "telemetry", "outcome", "failed", "stopped", "best_dp"),
            "control",
        )
        if env is None:
            return
        m = env.client_id
        assert m is not None
        repeat = False  # a join or leave of a client that had already sent one: a duplicate
        if env.kind == "join":
            repeat = m in self.joined
            self.joined.add(m)
        elif env.kind == "leave":
            repeat = m in self.left
            self.left.add(m)
            self._wakeup.set()
        elif env.kind == "telemetry":
            try:
                entries = self._telemetry_entries(env, m)
            except Exception as exc:  # any defect of an untrusted body: reject it, keep running
                self._reject("invalid", "bad_payload", f"telemetry of client {m}: {exc}", "control")
                return
            for telemetry in entries:
                if self.local_only and self.local_clients:
                    break  # (the counts of what the clients handed over in full: take_local)
                if self.run_session.add_telemetry(telemetry, checked=True):
                    self._observe_telemetry(telemetry)
            self._wakeup.set()
        elif env.kind == "failed":
            try:
                text = failure_text(env.body())
            except ProtocolError as exc:
                self._reject("invalid", "bad_payload", f"failed of client {m}: {exc}", "control")
                return
            if record.offset < self._control_live.get(record.partition, 0):
                log.info(
                    "run %s: an earlier execution's failure of client %d: %s", self.run_id, m, text
                )
            else:
                self.stopped.add(m)
                if self.failure is None:
                    self.failure = (
                        f"run {self.run_id}: client {m} failed at phase {env.phase}: {text}"
                    )
                self._wakeup.set()
        elif env.kind == "stopped":
            if record.offset >= self._control_live.get(record.partition, 0):  # (not a resumed
                self.stopped.add(m)  # run's earlier abort)
                self._wakeup.set()
        elif env.kind == "best_dp":
            withheld = self.run_session.withheld
            try:
                release = checked_best_release(env.body(), m)
            except ProtocolError as exc:
                self._reject("invalid", "bad_payload", f"best_dp of client {m}: {exc}", "control")
                return
            if withheld is not None:  # under local DP over the broker: the only best it learns
                withheld.setdefault("best_value_dp", {}).setdefault(str(m), release)
        elif env.kind == "outcome" and self.local_only:
            text = f"outcome of client {m}: under local DP a client's outcome stays with it"
            self._reject("invalid", "local_dp", text, "control")
            return
        elif env.kind == "outcome":
            try:
                outcome = ClientOutcome.from_dict(env.body())
                if outcome.client != m:
                    raise ProtocolError(f"outcome of client {outcome.client} sent by client {m}")
                outcome.check(self.budget, self.config.domain)
            except Exception as exc:  # any defect of an untrusted body: reject it, keep running
                self._reject("invalid", "bad_payload", f"outcome of client {m}: {exc}", "control")
                return
            if not self.run_session.add_outcome(outcome) and (
                outcome.to_dict() != self.run_session.outcomes[m].to_dict()
            ):
                text = f"client {m} sent a second, different outcome; the first one is kept"
                self._reject("invalid", "conflict", text, "control")
                return
        self.last_seen[m] = time.time()  # only a valid message says the client is alive
        self._count("control_duplicate" if repeat else f"control_{env.kind}")

    def take_local(
        self, telemetry: list[Telemetry], outcomes: Collection[ClientOutcome] = ()
    ) -> None:
        """A client agent of this process (``local_clients``) hands over its clients' full
        telemetry and, at the end, their outcomes (with their trials), on this agent's event
        loop: what the broker does not carry under local DP. The copies that come over the
        broker too (counts only) are then duplicates."""
        for t in telemetry:
            if self.run_session.add_telemetry(t):
                self._observe_telemetry(t)
        for outcome in outcomes:
            self.run_session.add_outcome(outcome)
        self._wakeup.set()

    def _observe_telemetry(self, telemetry: Telemetry) -> None:
        """Fresh telemetry: the live regret sums (display and metrics), if someone reads them."""
        self.fresh_telemetry += 1
        self.observer.on_evaluations(telemetry.count)
        if not (self.observer.wants_progress or self.observer.wants_regret):
            return
        if telemetry.global_terms is not None:
            self.live_regret += float(telemetry.global_terms.sum())
        if telemetry.local_terms is not None:
            self.live_local_regret += float(telemetry.local_terms.sum())
        sums = self.sums
        self.observer.on_regret(
            cumulative=self.live_regret / self.n_clients if sums.global_sum is not None else None,
            local=self.live_local_regret / self.n_clients if sums.local_sum is not None else None,
        )

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

    # --------------------------------------------------------------------------- the phases
    @property
    def active(self) -> int:
        """Clients still in the run (those that have not withdrawn)."""
        return len(self.run_session.active)

    def _barrier_met(self, opened: float) -> bool:
        settings = self.settings
        return self.run_session.barrier_met(
            time.monotonic() - opened, settings.phase_deadline_s, settings.quorum
        )

    async def _publish(self, msg: Any) -> int:
        """Publish the broadcast ``msg``; its payload's size."""
        payload = packb(msg.to_wire())
        await self._to_every_client("broadcast", int(msg.phase), payload)
        return len(payload)

    async def _to_every_client(self, kind: str, phase: int, payload: bytes) -> None:
        """A message of the server to every client on the broadcast topic (a broadcast, an
        abort), signed if this run signs."""
        env = Envelope(
            run_id=self.run_id,
            kind=kind,
            phase=phase,
            sender=SERVER,
            msg_id=f"{kind}:{phase}",
            payload=payload,
            sent_at=time.time(),
            session=self.session,
        )
        sealed = env.encode()
        if self.signer is not None:
            sealed = self.signer.seal_for_every_client(sealed, self.session)
        await self.broker.publish(self.topics["broadcast"], None, sealed)

    def _seal_about(self, envelope_bytes: bytes, m: int) -> bytes:
        """The server's message about client ``m`` as it goes on the wire, signed if this run
        signs (Ed25519: with the server's key, naming ``m``; HMAC: with ``m``'s key)."""
        if self.signer is None:
            return envelope_bytes
        return self.signer.seal_about(envelope_bytes, m, self.session)

    def _open_session(self) -> None:
        """Load the checkpoint (if this server may resume) and take its session, or draw a
        new one (:func:`~fedxab.agents.lobby.new_session`) and write it into the checkpoint at
        once; either way it joins :attr:`sessions`."""
        # a server that may not resume starts afresh, and overwrites a stale checkpoint
        self._closed = self.checkpoint.load() if self.may_resume else []
        resumed = self.may_resume and self.checkpoint.session
        self.session = resumed or new_session()
        self.checkpoint.session = self.session
        if not resumed:  # written now: a server killed before its first phase closes keeps it
            self.checkpoint.save()
        self.sessions[self.run_id] = self.session

    def _replay(self) -> Any:
        """Start the state machine and replay the checkpointed phases (:meth:`_open_session`);
        the open phase's msg. The closed phases' broadcasts are kept in :attr:`_history`
        (:meth:`_republish_history`)."""
        self._history = [self.run_session.start()]
        for closed in self._closed:
            self.run_session.restore(closed)
            self._history.append(self.run_session.msg)
            self.observer.on_phase(self.phases[-1])  # a new process counts these phases too
        msg = self.run_session.msg
        if self.checkpoint.phases:
            log.info(
                "run %s: resumed from checkpoint after %d phases", self.run_id, len(self.phases)
            )
        self._history.pop()  # the open phase's: published by _drive
        return msg

    async def _republish_history(self) -> None:
        """A resumed run whose broadcast topic does not begin with its first phase's broadcast
        (the broker lost the topic: restarted without its storage) gets its closed phases'
        broadcasts again, in order, so that client agents started afresh rebuild their state
        from them as from the original log (a client refuses a broadcast that skips a phase)."""
        if not self._history or await self._log_begins_with_phase_one():
            return
        log.warning(
            "run %s: the broadcast topic lost its first phases; publishing the %d closed "
            "phases' broadcasts again from the checkpoint",
            self.run_id,
            len(self._history),
        )
        for msg in self._history:
            await self._publish(msg)

    async def _log_begins_with_phase_one(self) -> bool:
        """Whether the broadcast topic's first record is this run's broadcast of phase 1 (a
        first record that cannot be read within ``rebroadcast_s`` counts as not)."""
        sub = self.broker.subscribe(self.topics["broadcast"], None)
        try:
            if not sum((await sub.end_offsets()).values()):
                return False
            async with asyncio.timeout(self.settings.rebroadcast_s):
                async for record in sub:
                    try:
                        opened = open_record(
                            record.value, self.signer, self.broker.max_message_bytes
                        )
                    except ProtocolError:
                        return False
                    return opened.envelope.run_id == self.run_id and opened.envelope.phase == 1
            return False
        except TimeoutError:
            log.warning("run %s: the broadcast topic's first record is unreadable", self.run_id)
            return False
        finally:
            await sub.close()

    async def _wait_for_barrier(self, msg: Any) -> None:
        """Until the phase barrier is met. A phase that makes no progress (no new report) for
        ``rebroadcast_s`` seconds has its broadcast published again: a client that missed it
        answers, one whose report was lost sends the same report again (from its reply cache)."""
        opened = last_progress = time.monotonic()
        reported = len(self.run_session.accepted)
        deadline, repeat = self.settings.phase_deadline_s, self.settings.rebroadcast_s
        next_status = opened + self.settings.status_interval_s
        while not self._barrier_met(opened):
            if self.failure is not None:
                await self._abort(msg)
            self._wakeup.clear()
            now = time.monotonic()
            timeout = min(repeat - (now - last_progress), next_status - now)
            if deadline is not None:
                timeout = min(timeout, deadline - (now - opened))
            await wait_set(self._wakeup, max(0.001, timeout))
            now = time.monotonic()
            if now >= next_status:
                log.warning(self._waiting_text(int(msg.phase), now - opened))
                next_status = now + self.settings.status_interval_s
            accepted = len(self.run_session.accepted)
            if accepted > reported:
                reported, last_progress = accepted, now
            elif now - last_progress >= repeat:
                log.info("run %s: phase %d stalled; broadcasting it again", self.run_id, msg.phase)
                self._count("broadcast_repeated")
                await self._publish(msg)
                last_progress = now

    async def _abort(self, msg: Any) -> None:
        """Stop the run because a client's objective failed: tell every client agent (an
        ``abort`` on the broadcast topic, sealed as a broadcast is) and raise the failure's
        line (:mod:`fedxab.run.failures`). Before it raises, the server goes on answering
        the lobby and publishing the abort again (:meth:`_linger`) until every client has
        stopped (a ``failed`` or ``stopped`` message): a client agent that was not yet welcomed
        when the abort came (started late, or restarted) learns the session from this server
        only, and a lost abort is published again, as a lost final answer is."""
        assert self.failure is not None
        phase, body = int(msg.phase), packb(failure_body(self.failure))
        await self._to_every_client("abort", phase, body)
        log.info("run %s: stopping; waiting for every client agent to stop", self.run_id)
        await self._linger(
            done=lambda: len(self.stopped) == self.n_clients,
            progress=lambda: len(self.stopped),
            repeat=lambda: self._to_every_client("abort", phase, body),
        )
        raise FedxabError(self.failure)

    def _waiting_text(self, phase: int, waited: float) -> str:
        """Who an open phase still waits for, and why as far as the server can tell."""
        session = self.run_session
        active = session.active
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
        if self.settings.phase_deadline_s is None:
            parts.append("without [agents] phase_deadline_s a phase waits for every client")
        return "; ".join(parts)

    async def _close_phase(
        self, msg: Any, broadcast_bytes: int, active: int, commit: Any, opened: float
    ) -> Any:
        self.checkpoint.append(self.run_session.close_phase(broadcast_bytes, active))
        if self._last_report is not None:
            await commit(self._last_report)
        counts = self.phases[-1]
        msg = self.run_session.msg
        await self._mirror_ledger()
        self._observe_phase(counts, time.perf_counter() - opened)
        return msg

    def _observe_phase(self, counts: PhaseCommunication, duration: float) -> None:
        """A phase closed: its counts, the round every active client reached, epsilon when
        due, and the progress."""
        observer = self.observer
        gone = self.left.difference(self.run_session.withdrawn)
        observer.on_phase(counts, duration, active=self.active - len(gone))
        observer.on_phase_reports(0)
        still = np.ones(self.n_clients, dtype=bool)
        still[list(self.run_session.withdrawn)] = False
        observer.on_regret(t=int(self.sums.used.min(initial=self.budget, where=still)))
        if self.run_ledger is not None and observer.privacy_due():
            observe_privacy(observer, self.run_ledger, self.n_clients, self.server)
        watch = self._epsilon_watch if observer.wants_details else None
        known = self.sums.global_sum is not None
        observer.on_progress(
            int(self.sums.used.min()),
            self.budget,
            self.live_regret / self.n_clients if known else float("nan"),
            phase=int(counts.phase),
            evaluations=int(self.sums.used.sum()),
            epsilon=None if watch is None else watch(),
        )

    async def _mirror_ledger(self, *, end: bool = False) -> None:
        """Central DP: publish the releases recorded since the last call to the ledger topic,
        for each client (and, with ``end``, each client's end marker)."""
        if self.run_ledger is None:
            return
        records = []
        ns = self.namespace
        for m, gate in self.server.gates.items():
            owner = Owner.of(self.run_ledger, m)
            for phase, event in gate.drain():
                record = release_record(
                    self.run_id, m, phase, event, by_server=True, namespace=ns, owner=owner
                )
                sealed = self._seal_about(record, m)
                if self.signer is not None:  # the row's evidence, as a client keeps its own
                    gate.ledger.record(self.run_id, m, phase, event, evidence=sealed)
                records.append((str(m), sealed))
            if end:
                rows = [(p, r, e) for p, r, _, e in self.run_ledger.ledger.history(self.run_id, m)]
                record = end_record(self.run_id, m, rows, by_server=True, namespace=ns)
                sealed = self._seal_about(record, m)
                if self.signer is not None:
                    gate.ledger.set_end(self.run_id, m, sealed)
                records.append((str(m), sealed))
        await self.broker.publish_many(self.topics["ledger"], records)

    async def _publish_budgets(self, run_ledger: RunLedger) -> None:
        """Central DP: each client's budgets and data owner, on the ledger topic."""
        records = []
        for m in range(self.n_clients):
            record = budget_record(
                self.run_id,
                m,
                run_ledger.budget,
                by_server=True,
                namespace=self.namespace,
                owner=Owner.of(run_ledger, m),
            )
            records.append((str(m), self._seal_about(record, m)))
        await self.broker.publish_many(self.topics["ledger"], records)

    async def _drive(self, reports: Any) -> None:
        msg = self._replay()
        await self._republish_history()
        if self.run_ledger is not None:
            await self._publish_budgets(self.run_ledger)
            await self._mirror_ledger()  # what the replayed phases recorded
        while not isinstance(msg, Finished):
            active = self.active  # the clients the broadcast is for
            opened = time.perf_counter()
            broadcast_bytes = await self._publish(msg)
            await self._wait_for_barrier(msg)
            msg = await self._close_phase(msg, broadcast_bytes, active, reports.commit, opened)
        await self._mirror_ledger(end=True)
        await self._publish(msg)

    async def _wait_for_telemetry(self) -> None:
        """Until every client's telemetry covers its budget and every client has left (a client
        leaves once it saw the final answer, after its last telemetry and ledger records), or
        until ``telemetry_timeout_s`` pass without fresh telemetry or a new leave: an idle
        limit, so that the final records of 100,000 clients, which take the broker longer
        than that to deliver, are all counted. Meanwhile the final answer is broadcast again
        every ``rebroadcast_s`` without news: a client that lost it would otherwise wait for
        it forever."""
        expected = self.run_session.expected_use()
        await self._linger(
            done=lambda: self.sums.complete(expected) and len(self.left) == self.n_clients,
            progress=lambda: (self.fresh_telemetry, len(self.left)),
            repeat=lambda: self._publish(self.finished),
        )
        gone = sorted(set(range(self.n_clients)) - self.left)
        if gone:
            log.warning(
                "run %s: %d client(s) did not confirm the final answer (first: %s)",
                self.run_id,
                len(gone),
                gone[:5],
            )
        coverage = regret_coverage(self.sums, expected)
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

    async def _linger(
        self,
        done: Callable[[], bool],
        progress: Callable[[], object],
        repeat: Callable[[], Awaitable[object]],
    ) -> None:
        """Until ``done()``, or until ``telemetry_timeout_s`` pass without a change of
        ``progress()`` (an idle limit); meanwhile ``repeat()`` (the server's last word, published
        again) every ``rebroadcast_s`` without news."""
        idle_s = self.settings.telemetry_timeout_s
        seen, stop = progress(), time.monotonic() + idle_s
        while not done() and time.monotonic() < stop:
            self._wakeup.clear()
            wait = min(self.settings.rebroadcast_s, stop - time.monotonic())
            woken = await wait_set(self._wakeup, max(0.001, wait))
            if not woken and time.monotonic() < stop:
                self._count("broadcast_repeated")
                await repeat()
            if progress() != seen:
                seen, stop = progress(), time.monotonic() + idle_s

    async def _check_fresh_or_resuming(self) -> None:
        """Refuse to start a run whose broadcast topic already holds broadcasts, unless this
        server may resume it (:attr:`may_resume`): a second run under the same run id would mix
        with the first one's messages."""
        if self.may_resume:
            return
        sub = self.broker.subscribe(self.topics["broadcast"], None)
        try:
            published = sum((await sub.end_offsets()).values())
        finally:
            await sub.close()
        if published:
            raise RunConflictError(self.run_id, published, self.topics["broadcast"])

    async def run(self) -> RunRecord:
        """Run (or resume) the federation to its end; the record of regret and communication."""
        observer = self.observer
        transport = transport_of(self.broker)
        family = None if self.local_only else self.family  # local DP: no regret known here
        start_run(observer, self.config, self.run_id, transport, self.n_clients, family)
        if self.run_ledger is not None:
            observe_privacy(observer, self.run_ledger, self.n_clients, self.server)
        try:
            record = await self._run()
        except BaseException:
            observer.fail_run()
            raise
        observer.end_run(record)
        return record

    async def _run(self) -> RunRecord:
        await self.broker.create_topics([*self.topics.values(), self.lobby])
        t0 = time.perf_counter()
        await self._check_fresh_or_resuming()
        self._open_session()
        reports = self.broker.subscribe(self.topics["report"], self.group)
        control = self.broker.subscribe(self.topics["control"], None)
        self._control_live = dict(await control.end_offsets())

        async def consume(sub: Any, handle: Callable[[Record], None]) -> None:
            async for record in sub:
                handle(record)

        async def drive() -> dict[str, Any] | None:
            await self._drive(reports)
            await self._wait_for_telemetry()
            return await self._privacy_block()

        try:
            privacy = await supervised(
                self.run_id,
                drive(),
                {
                    "report consumer": consume(reports, self.on_report),
                    "control consumer": consume(control, self.on_control),
                    "lobby": refuse_strangers(
                        self.broker,
                        self.lobby,
                        self.protocol,
                        self.known_runs,
                        self.signer,
                        run_id=self.run_id,
                        sessions=self.sessions,
                        refused=self._lobby_refused,
                    ),
                },
            )
        finally:
            await reports.close()
            await control.close()
        wall = time.perf_counter() - t0
        if self.run_ledger is not None:
            self.run_ledger.close()
        record = self._record(wall, privacy)
        self._final_progress(record)
        return record

    def _final_progress(self, record: RunRecord) -> None:
        """One last update of a detailed progress display, once the telemetry and the ledger
        are in: the clients' reports of their evaluations (and, local DP, their releases)
        arrive after the phases, so only now are the rounds, evaluations and epsilon known."""
        if not self.observer.wants_details:
            return
        still = np.ones(self.n_clients, dtype=bool)
        still[list(self.run_session.withdrawn)] = False
        cum = record.cumulative_regret
        self.observer.on_progress(
            int(self.sums.used.min(initial=self.budget, where=still)),
            self.budget,
            float(cum[-1]) if cum is not None and cum.size else float("nan"),
            phase=self.phases[-1].phase if self.phases else None,
            evaluations=int(self.sums.used.sum()),
            epsilon=None if record.privacy is None else float(record.privacy["max_epsilon"]),
        )

    async def _privacy_block(self) -> dict[str, Any] | None:
        """A private run's ``privacy`` block. Central DP: from the server's own ledger. Local
        DP: from the ledger rebuilt from the ledger topic, read until every client's end marker
        (published once it saw the final answer) or ``telemetry_timeout_s``; a client whose
        marker never came is counted up to what it published."""
        settings = self.config.privacy
        if settings is None:
            return None
        stopped = stopped_phases(self.server)
        if self.run_ledger is not None:  # central DP: the server's own ledger
            return self.run_ledger.block(range(self.n_clients), stopped)
        run_ledger = RunLedger.from_config(self.config, self.run_id, path=":memory:")
        try:
            rebuilt = await rebuild_ledger(
                self.broker,
                self.topics["ledger"],
                self.run_id,
                run_ledger.ledger,
                expect=set(range(self.n_clients)),
                timeout_s=self.settings.telemetry_timeout_s,
                signer=self.signer,
                clients_only=True,  # local DP: the server authors no client's record
                session=self.session if self.signer is not None else None,
            )
            self.counts["ledger_invalid"] += rebuilt.skipped
            self.rejected.update({("ledger", why): n for why, n in rebuilt.reasons.items()})
            self.observer.on_ledger_invalid(rebuilt.skipped)
            for why, n in rebuilt.reasons.items():
                self.observer.on_rejected("ledger", why, n)
            return run_ledger.block(range(self.n_clients), stopped)
        finally:
            run_ledger.close()

    def _record(self, wall: float, privacy: dict[str, Any] | None) -> RunRecord:
        return self.run_session.record(wall, privacy)
