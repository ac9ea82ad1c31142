"""The client agent: hosts one or more clients of a federated algorithm over a broker.

One agent (one process, or one task in ``fedxab run``) hosts any number of clients; it reads the
broadcast topic once for all of them. For every broadcast it runs each hosted client's state
machine (``client.answer(broadcast, evaluate)``) in an executor thread, so a slow black box never
blocks the event loop (heartbeats go on), or on the loop itself while the last answer took less
than ``[agents] inline_answer_s`` (cheap black boxes: no thread hand-off), then publishes, per
client, the report (report topic, key = client id). The regret telemetry of the pulls (control
topic) goes out in batches: one message per client at most every ``[agents]
telemetry_interval_s``, and at the end.

Restart: the broadcast topic is read from its beginning, without a consumer group. A restarted
agent therefore rebuilds every hosted client by replaying all past broadcasts: the clients pull
again exactly what they pulled before (same points, same noise stream, so the same reports) but
publish nothing for broadcasts that were already superseded when the agent started (their offsets
lie before the last one); from the latest broadcast on it answers as usual. A redelivered
broadcast is answered from the client's reply cache, with the same report and telemetry.

Locally private algorithms (``[privacy]``, DP-Fed-PNE): the agent opens the configured ledger,
sets each hosted client's budget and gives each client its gate (:mod:`fedxab.privacy.gate`).
Every release a client records is published to the run's ``ledger`` topic
(:mod:`fedxab.privacy.mirror`) before the report that carries it; a client that refuses a release
withdraws and answers nothing more. (Under central DP, DP-FTS-DE, the server does all this.)
Under local DP nothing else derived from the clients' rewards leaves the agent
(:func:`~fedxab.run.outcome.stays_local`): no outcome is sent at the end, and the regret
telemetry carries the counts of the pulls only (the server needs them to know every client used
its budget), never their regret terms. The agent keeps both (:meth:`ClientAgent.outcomes`,
:meth:`ClientAgent.own_record`): its own results. Beside the server agent in one process
(``server``: ``fedxab run``), it hands them to that agent directly
(:meth:`~fedxab.agents.server.ServerAgent.take_local`), without the broker.

Every record is bound to one execution of the run: the agent learns the execution's session
from the server's welcome in the lobby (:mod:`fedxab.agents.lobby`) before it reads any
broadcast, writes it into every record it sends, and takes only broadcasts of that session, in
phase order (a broadcast may repeat the phase last taken or open the next one), and a final
answer only for the phase it is in. The run id repeats in every execution of a job (config and
seed), so an earlier execution's broadcasts, abort or final answer, replayed on this run's
topic, are of another session: counted (``replay``) and dropped, never acted on.

Messages that are not a valid broadcast of this run from the server are counted in
:attr:`ClientAgent.counts` and skipped with a log line; they never stop the agent. In a signing
run, records that fail this agent's keys are counted too; they name a key as wrong and stop the
agent only by the rule of :class:`~fedxab.security.agents.KeyWatch` (sustained failures, none
verified), never on a few forged records.

With ``metrics`` (:class:`~fedxab.monitoring.metrics.FederationMetrics`, role ``client``) the
agent exports its own view, its hosted clients only: the phases it answered, the messages and
bytes it sent and received, its clients' evaluations, regret (averaged over its clients) and
epsilon (local DP, from its ledger). With ``metrics_privacy_only`` (``fedxab run``, where a server
agent in the same process exports the whole federation into the same metrics) it adds only its
clients' epsilon during the run, which the server learns only at the end.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

import numpy as np

from fedxab.agents.lobby import HELLO_INTERVAL_S, announce_and_watch
from fedxab.agents.supervise import supervised
from fedxab.agents.waits import wait_set
from fedxab.algorithms.protocol import Finished
from fedxab.algorithms.registry import decode_broadcast
from fedxab.broker.base import Broker, Record, lobby_topic, run_topics, transport_of
from fedxab.broker.codec import SERVER, client_sender, encode_envelope, packb
from fedxab.config import Config
from fedxab.errors import ConfigError, EvaluationError, FedxabError, ProtocolError
from fedxab.privacy.best import BestRelease, release_best
from fedxab.privacy.mirror import Owner, budget_record, end_record, release_record
from fedxab.regret import round_grid
from fedxab.results import RunRecord
from fedxab.run.accounting import phase_communication
from fedxab.run.assembly import Functions, build_run, regret_known
from fedxab.run.evaluation import (
    TELEMETRY_PULLS,
    Telemetry,
    telemetry_batches,
    telemetry_to_wire,
)
from fedxab.run.failures import Aborted, failure_body, failure_text
from fedxab.run.identity import protocol_of
from fedxab.run.observe import PrivacyOnly, observer_of
from fedxab.run.outcome import mean_best, stays_local
from fedxab.run.watch import RunWatch
from fedxab.security.agents import KeyWatch, open_record, signer_for
from fedxab.security.signing import Opened, SignatureError

if TYPE_CHECKING:
    from fedxab.agents.server import ServerAgent
    from fedxab.monitoring.metrics import FederationMetrics
    from fedxab.objectives.families import ClientFamily
    from fedxab.objectives.history import TrialRecord
    from fedxab.run.outcome import ClientOutcome

__all__ = ["ClientAgent"]

log = logging.getLogger(__name__)


class ClientAgent:
    """Clients ``client_ids`` of one run; ``await agent.run()`` returns the final answer."""

    def __init__(
        self,
        config: Config,
        seed: int,
        broker: Broker,
        *,
        run_id: str,
        client_ids: list[int],
        namespace: str = "fedxab",
        executor: Executor | None = None,
        metrics: FederationMetrics | None = None,
        metrics_privacy_only: bool = False,
        functions: Functions | None = None,
        family: ClientFamily | None = None,
        server: ServerAgent | None = None,
        replay_trials: Mapping[int, Sequence[TrialRecord]] | None = None,
    ) -> None:
        fed = config.federation
        if fed is None or config.agents is None:
            raise ConfigError("algorithm.name", f"{config.algorithm.name!r} is not federated")
        if not client_ids:
            raise ConfigError("client_ids", "an agent must host at least one client")
        self.config = config
        self.broker = broker
        self.run_id = run_id
        self.seed = seed
        self.namespace = namespace
        self.topics = run_topics(namespace, run_id)
        self._matched = asyncio.Event()
        observer = observer_of(metrics)
        self.observer = PrivacyOnly(observer) if metrics_privacy_only else observer
        """Who watches this agent's clients (its own metrics; or, ``metrics_privacy_only``,
        only their epsilon, beside a server agent that exports the rest)."""
        self.heartbeat_s = config.agents.heartbeat_s
        self.status_interval_s = config.agents.status_interval_s
        self.executor = executor
        self.inline_answer_s = config.agents.inline_answer_s
        self._last_answer_s = math.inf  # the first answer goes to the thread
        self.algorithm = config.algorithm.name
        parts = build_run(
            config,
            seed,
            run_id=run_id,
            server=False,
            client_ids=client_ids,
            functions=functions,
            family=family,
            replay=replay_trials,  # a continued run's (fedxab.run.continuation)
        )
        assert parts.clients is not None
        self.hosted = parts.clients
        """The hosted clients' session (:class:`~fedxab.run.session.ClientSession`)."""
        self.clients = self.hosted.clients
        self.hosted.watch_trials(self.observer)  # a site's own dashboard: each trial, live
        self.evaluators = self.hosted.evaluators
        self.family = parts.family
        self.run_ledger = parts.run_ledger  # local DP: each client releases
        self.local_only = stays_local(config)
        """Local DP: no outcome and no regret term leaves this agent over the broker."""
        self.server = server
        """The server agent of this process (every party runs here), or None."""
        self._fresh: list[Telemetry] = []  # local DP: telemetry not yet handed to ``server``
        self._privacy_block: dict[str, Any] | None = None
        self.gates = parts.gates
        self.best_release = (
            BestRelease.of(config.privacy, self.run_ledger.delta)
            if self.local_only and self.run_ledger is not None
            else None
        )
        """Local DP with ``[privacy] release_best``: the release of each client's best value."""
        self.signer = signer_for(config, client_ids)  # None unless the run signs
        self.session = ""
        """This execution's session, from the server's welcome (:mod:`fedxab.agents.lobby`):
        every record sent carries it; only broadcasts of it are taken."""
        self.telemetry_interval_s = config.agents.telemetry_interval_s
        self._unsent: dict[int, list[Telemetry]] = {}
        self._last_flush = time.monotonic()
        self.counts: Counter[str] = Counter()
        self.keys = KeyWatch()
        """Records of the server that failed a key (HMAC: a hosted client's; Ed25519: the
        server's), and whether that says the key is wrong."""
        self._phase = 0
        """The phase of the last broadcast taken (0 before the first)."""
        self._sent = (0, 0.0)  # the last phase whose replies were sent live, and when
        self.rebroadcast_s = config.agents.rebroadcast_s
        self.finished: Finished | None = None
        self.watch = RunWatch(
            self.observer,
            config.run.budget,
            self.clients,
            lambda: [m for m in self.clients if self.hosted.withdrawn(m)],
            known=regret_known(self.family, config)
            if self.observer.wants_regret
            else (False, False),
            run_ledger=self.run_ledger,
        )
        """The metrics' view of the hosted clients (:class:`~fedxab.run.watch.RunWatch`)."""
        self._broadcast_bytes = 0
        self._opened = time.perf_counter()

    # ----------------------------------------------------------------------------- messages
    def _seal(self, envelope_bytes: bytes, m: int) -> bytes:
        """A message of client ``m`` as it goes on the wire: signed if signing is on."""
        if self.signer is None:
            return envelope_bytes
        return self.signer.seal(envelope_bytes, m, self.session)

    def _envelope(self, kind: str, m: int, phase: int, msg_id: str, payload: bytes) -> bytes:
        envelope = encode_envelope(
            self.run_id,
            kind,
            phase,
            client_sender(m),
            msg_id,
            payload,
            time.time(),
            session=self.session,
        )
        return self._seal(envelope, m)

    def decode(self, record: Record) -> Any | None:
        """The broadcast (or Finished, or Aborted) in ``record`` if this agent takes it, else
        None (counted): not a valid broadcast of this run (in a signing run: also one without
        a right tag for each hosted client), of another session than :attr:`session`, or out
        of phase order (a broadcast more than one phase ahead of the last one taken, a final
        answer of another phase than it)."""
        try:
            opened = open_record(record.value, self.signer, self.broker.max_message_bytes)
        except ProtocolError as exc:
            self._invalid(exc.reason, str(exc))
            if isinstance(exc, SignatureError) and exc.reason == "bad_signature":
                self._key_failed(exc)
            return None
        env = opened.envelope
        if env.run_id != self.run_id:
            self._invalid("wrong_run", f"for run {env.run_id!r}, this is {self.run_id!r}")
            return None
        if env.sender == SERVER and env.kind in ("abort", "broadcast"):
            self._verified(opened)
        if opened.session != self.session:
            self._invalid("replay", f"{env.kind} of phase {env.phase} of another session")
            return None
        if env.kind == "abort" and env.sender == SERVER:
            return self._abort_of(env)
        if env.kind != "broadcast" or env.sender != SERVER:
            self._invalid("wrong_kind", f"{env.kind!r} from {env.sender!r}")
            return None
        try:
            msg = decode_broadcast(self.algorithm, env.body())
            if int(msg.phase) != env.phase:
                raise ProtocolError(f"payload phase {msg.phase} != envelope phase {env.phase}")
        except (ProtocolError, FedxabError) as exc:
            self._invalid("bad_payload", str(exc))
            return None
        except Exception as exc:  # a payload no check foresaw: reject it, keep running
            self._invalid("bad_payload", f"{type(exc).__name__}: {exc}")
            return None
        final = isinstance(msg, Finished)
        if (final and env.phase != self._phase) or env.phase > self._phase + 1:
            what = "final answer" if final else "broadcast"
            self._invalid("out_of_order", f"a {what} of phase {env.phase} after {self._phase}")
            return None
        self._phase = max(self._phase, env.phase)
        self._broadcast_bytes = len(env.payload)
        return msg

    def _abort_of(self, env: Any) -> Aborted | None:
        """The server's abort in ``env`` (of this session), unless of a phase before the last
        one this agent answered."""
        try:
            text = failure_text(env.body())
        except ProtocolError as exc:
            self._invalid("bad_payload", str(exc))
            return None
        if env.phase < self._sent[0]:
            self._invalid("replay", f"an abort of phase {env.phase}: {text}")
            return None
        return Aborted(env.phase, text)

    def _welcomed(self, opened: Opened) -> None:
        """The server's welcome (:mod:`fedxab.agents.lobby`): its session is this execution's
        (the first welcome's: the server gives every hello the same one)."""
        self._verified(opened)
        if not self._matched.is_set():
            self.session = opened.envelope.session
            self._matched.set()

    def _verified(self, opened: Opened) -> None:
        """A record of the server verified: the keys it was checked with are right."""
        if self.signer is not None:
            checked = self.signer.signers(None, opened.for_client)
            self.keys.verified(*[k for k in checked if k == SERVER or k in self.clients])

    def _key_failed(self, exc: SignatureError) -> None:
        """A record of the server failed ``exc.key`` (HMAC: a hosted client's; Ed25519: the
        server's public key): counted; the agent stops with an error naming the key and its
        fingerprint only once the failures say the key is wrong
        (:class:`~fedxab.security.agents.KeyWatch`)."""
        key = exc.key
        if key is None or self.signer is None or not (key == SERVER or key in self.clients):
            return
        if not self.keys.fail(key):
            return
        failed, fingerprint = self.keys.failed[key], self.signer.fingerprint(key)
        seen = (
            f"run {self.run_id}: {failed} records of the server failed verification over "
            f"{self.keys.after_s:.0f} s or more and none verified"
        )
        if key == SERVER:
            raise FedxabError(
                f"{seen} with the server's public key (fingerprint {fingerprint}): this agent's "
                "public/server.pub is not the server's key. Give it the public/server.pub "
                "written with the server's private key (`fedxab keys generate`)"
            )
        raise FedxabError(
            f"{seen} with client {key}'s key (fingerprint {fingerprint}): "
            f"this agent's key for client {key} is not the server's. Give it the key "
            f"file of client {key} that the server uses (`fedxab keys generate` writes "
            "one per client)"
        )

    def _lobby_refused(self, exc: SignatureError) -> None:
        if exc.reason == "bad_signature":
            self._key_failed(exc)

    def _invalid(self, why: str, text: str) -> None:
        self.counts["broadcast_invalid"] += 1
        self.observer.on_broadcast_invalid()
        self.observer.on_rejected("broadcast", why)
        log.warning("run %s: invalid broadcast (%s): %s", self.run_id, why, text)

    def answer_all(self, broadcast: Any) -> list[tuple[int, Any]]:
        """Every hosted client's report for ``broadcast`` (in a thread or on the loop:
        :meth:`_answer`); the telemetry of the pulls waits in :attr:`_unsent` for the next
        flush."""
        phase = int(broadcast.phase)
        out = []
        for m in self.clients:
            try:
                report, telemetry, fresh = self.hosted.answer(m, broadcast)
            except EvaluationError:
                raise  # the client's objective failed: the run stops (run.failures)
            except (ProtocolError, FedxabError) as exc:
                self.counts["broadcast_rejected"] += 1
                log.warning("run %s: client %d rejects phase %d: %s", self.run_id, m, phase, exc)
                continue
            if report is None or telemetry is None:  # it withdrew earlier (both None): no report
                continue
            if fresh:
                self.watch.pulled(telemetry)
                if self.local_only and self.server is not None:
                    self._fresh.append(telemetry)
            unsent = self._unsent.setdefault(m, [])
            if not unsent or unsent[-1] is not telemetry:  # once per flush, however many copies
                unsent.append(telemetry)
            out.append((m, report))
        return out

    def _observe(self, msg: Any, sent: int, bytes_up: int) -> None:
        """After a live broadcast: the phase as this agent saw it, and its clients' regret."""
        counts = phase_communication(msg, self._broadcast_bytes, sent, sent, bytes_up, sent, 0)
        self.watch.phase_seen(
            counts,
            time.perf_counter() - self._opened,
            [self.evaluators[m].used for m in self.clients],
            mean_best(self.evaluators[m].observed.best for m in self.clients),
        )

    def _owner(self, m: int) -> Owner:
        assert self.run_ledger is not None
        return Owner.of(self.run_ledger, m)

    async def _mirror_ledger(self) -> None:
        """Publish the releases the clients recorded since the last call (ledger topic), each
        naming its data owner; in a signed run the signed record is also kept in the client's
        own ledger as the row's evidence, so that ledger verifies with public keys alone."""
        records = []
        for m, gate in self.gates.items():
            for phase, event in gate.drain():
                record = release_record(
                    self.run_id, m, phase, event, namespace=self.namespace, owner=self._owner(m)
                )
                sealed = self._seal(record, m)
                if self.signer is not None:  # attached to the row, which has none yet
                    gate.ledger.record(self.run_id, m, phase, event, evidence=sealed)
                records.append((str(m), sealed))
        await self.broker.publish_many(self.topics["ledger"], records)

    async def _close_ledger_mirror(self) -> None:
        """Each client's end marker on the ledger topic: its mirror is complete (the marker
        carries the number and digest of the client's releases)."""
        ends = []
        for m, gate in self.gates.items():
            rows = [(p, r, e) for p, r, _, e in gate.ledger.history(self.run_id, m)]
            sealed = self._seal(end_record(self.run_id, m, rows, namespace=self.namespace), m)
            if self.signer is not None:  # kept: the client's rows, as a whole, for an auditor
                gate.ledger.set_end(self.run_id, m, sealed)
            ends.append((str(m), sealed))
        await self.broker.publish_many(self.topics["ledger"], ends)

    async def _send(self, answers: list[tuple[int, Any]], phase: int) -> int:
        """Publish the reports; their payload bytes in all."""
        sent, records = 0, []
        for m, report in answers:
            payload = packb(report.to_wire())
            sent += len(payload)
            records.append((str(m), self._envelope("report", m, phase, f"report:{phase}", payload)))
        await self.broker.publish_many(self.topics["report"], records)
        self.counts["reports_sent"] += len(answers)
        if time.monotonic() - self._last_flush >= self.telemetry_interval_s:
            await self._flush_telemetry()
        return sent

    async def _flush_telemetry(self) -> None:
        """Publish, per client, the telemetry of the phases it answered since the last flush,
        as messages (lists of entries) of at most :data:`TELEMETRY_PULLS` pulls each (512 KiB at
        worst: well under a broker's message size limit, however long a phase), every
        ``telemetry_interval_s`` and at the end. The server drops entries it already has, so a
        resent entry changes nothing."""
        records = []
        encoded: dict[tuple[int, ...], Any] = {}  # terms shared by clients, encoded once
        for m, entries in self._unsent.items():
            if self.local_only:  # the counts only: the regret terms stay here
                entries = [
                    dataclasses.replace(t, global_terms=None, local_terms=None) for t in entries
                ]
            for batch in telemetry_batches(entries, TELEMETRY_PULLS):
                a, b = batch[0], batch[-1]
                msg_id = f"telemetry:{a.phase}:{a.start}-{b.phase}:{b.start}"
                body = packb(telemetry_to_wire(batch, encoded))
                records.append((str(m), self._envelope("telemetry", m, b.phase, msg_id, body)))
        await self.broker.publish_many(self.topics["control"], records)
        self._unsent = {}
        self._last_flush = time.monotonic()

    def _hand_over(self, final: bool = False) -> None:
        """Give the server agent of this process (if any) what the broker does not carry under
        local DP: the new full telemetry, and (``final``) the clients' outcomes. On the event
        loop, which the server agent shares."""
        if self.server is None:
            return
        fresh, self._fresh = self._fresh, []
        outcomes = self.outcomes().values() if final else ()
        self.server.take_local(fresh, outcomes)

    def outcomes(self) -> dict[int, ClientOutcome]:
        """What each hosted client observed (with its trials, where its objective is a user's),
        by client id."""
        return {m: self.hosted.outcome(m) for m in self.clients}

    def own_record(self, wall_s: float) -> RunRecord:
        """The hosted clients' own results of the finished run: the server's final answer,
        their evaluations, what each observed (with its trials) and, under local DP, their
        privacy block from this agent's ledger. No regret (a view of some clients only)."""
        finished = self.finished
        if finished is None:
            raise FedxabError(f"run {self.run_id}: not finished, no results yet")
        outcomes = self.outcomes()
        return RunRecord(
            seed=self.seed,
            run_id=self.run_id,
            rounds=round_grid(self.config.run.budget),
            cumulative_regret=None,
            recommendation=np.asarray(finished.recommendation, dtype=np.float64).reshape(-1),
            simple_regret=None,
            evaluations=sum(o.evaluations for o in outcomes.values()),
            wall_time_s=wall_s,
            privacy=self._privacy_block,
            clients=tuple(outcomes[m] for m in sorted(outcomes)),
        )

    async def _send_outcomes(self, finished: Finished) -> None:
        """Each hosted client's outcome (what it observed of its own objective, and its own
        recommendation where it has one) to the server, for the run's results; nothing under
        local DP (it stays here: :meth:`own_record`). The trials are never sent.

        Under local DP with ``[privacy] release_best``, each client's best value leaves instead
        as a DP release (:mod:`fedxab.privacy.best`), charged in its ledger and mirrored to the
        ledger topic before it is sent; a refused release sends the refusal, no value."""
        if self.local_only:
            if self.best_release is not None:
                releases = {m: self._release_best(m) for m in self.clients}
                await self._mirror_ledger()
                await self._to_every_client(
                    "best_dp", int(finished.phase), "best_dp", lambda m: releases[m]
                )
            return
        await self._to_every_client(
            "outcome", int(finished.phase), "outcome", lambda m: self.hosted.outcome(m).to_dict()
        )

    def _release_best(self, m: int) -> dict[str, Any]:
        """Client ``m``'s best value as a charged DP release (or its refusal)."""
        assert self.best_release is not None
        best = self.hosted.outcome(m).best_value
        release = release_best(self.best_release, best, self.gates[m], self.seed, m)
        return {"client": m, **release}

    async def _leave(self, phase: int) -> None:
        """Tell the server each hosted client saw the final answer (so it stops repeating it)."""
        await self._to_every_client("leave", phase, "leave", lambda m: None)

    async def _stopped(self, phase: int) -> None:
        """Tell the server each hosted client took its abort (:mod:`fedxab.run.failures`)."""
        await self._to_every_client("stopped", phase, f"stopped:{phase}", lambda m: None)

    async def _heartbeats(self) -> None:
        beat = 0
        while True:
            await asyncio.sleep(self.heartbeat_s)
            beat += 1
            await self._to_every_client("heartbeat", 0, f"heartbeat:{beat}", lambda m: None)

    async def _tell_failure(self, exc: EvaluationError, phase: int) -> None:
        """Tell the server that client ``exc.client``'s objective failed, and that this agent's
        other clients stop with it, before this agent stops with the error (the server stops
        the run: :mod:`fedxab.run.failures`)."""
        m = exc.client
        body = packb(failure_body(str(exc)))
        records = [(str(m), self._envelope("failed", m, phase, f"failed:{phase}", body))]
        records += [
            (str(k), self._envelope("stopped", k, phase, f"stopped:{phase}", packb(None)))
            for k in self.clients
            if k != m
        ]
        await self.broker.publish_many(self.topics["control"], records)

    async def _to_every_client(
        self, kind: str, phase: int, msg_id: str, body: Callable[[int], Any]
    ) -> None:
        """One control message from each hosted client, ``body(m)`` its payload."""
        records = [
            (str(m), self._envelope(kind, m, phase, msg_id, packb(body(m)))) for m in self.clients
        ]
        await self.broker.publish_many(self.topics["control"], records)

    # ------------------------------------------------------------------------------ service
    async def run(self) -> Finished:
        """Answer broadcasts until the server's :class:`Finished`; returns it."""
        observer = self.observer
        transport = transport_of(self.broker)
        self.watch.start(
            self.config, self.run_id, transport, regret_known(self.family, self.config)
        )
        self.watch.privacy()
        try:
            finished = await self._run()
        except BaseException:
            observer.fail_run()
            raise
        observer.end_run()
        return finished

    async def _run(self) -> Finished:
        lobby = lobby_topic(self.namespace)
        await self.broker.create_topics([*self.topics.values(), lobby])
        await self._to_every_client("join", 0, "join", lambda m: None)
        if self.run_ledger is not None:  # each client's budgets and data owner
            budget = self.run_ledger.budget
            records = [
                budget_record(
                    self.run_id, m, budget, namespace=self.namespace, owner=self._owner(m)
                )
                for m in self.clients
            ]
            await self.broker.publish_many(
                self.topics["ledger"],
                [(str(m), self._seal(r, m)) for m, r in zip(self.clients, records, strict=True)],
            )
        lobby_watch = announce_and_watch(
            self.broker,
            lobby,
            self.run_id,
            protocol_of(self.config, self.seed),
            list(self.clients),
            self.signer,
            self._matched,
            self._welcomed,
            self._lobby_refused,
        )
        try:
            await supervised(
                self.run_id,
                self._answer_broadcasts(),
                {"heartbeat sender": self._heartbeats(), "lobby": lobby_watch},
                may_finish={"lobby"},  # done once the server's welcome came
            )
        finally:
            if self.run_ledger is not None:
                if self.finished is not None:
                    stopped = {
                        m: int(self.clients[m].withdrawal.phase)
                        for m in self.clients
                        if self.hosted.withdrawn(m)
                    }
                    self._privacy_block = self.run_ledger.block(list(self.clients), stopped)
                self.run_ledger.close()
        if self.finished is None:
            raise FedxabError(
                f"run {self.run_id}: the broadcast subscription ended before the server's final "
                "answer (the broker closed it); restart the client to resume"
            )
        return self.finished

    async def _await_session(self) -> None:
        """Until the server's welcome. Meanwhile a signing agent reads the broadcast topic for
        its keys only (a hosted client whose key is not the server's fails its hello at the
        server, which then never welcomes it: the server's broadcasts are what tell it)."""
        if self.signer is None:
            await self._welcome()
            return
        sub = self.broker.subscribe(self.topics["broadcast"], None)
        probe = asyncio.ensure_future(self._probe_keys(sub))
        welcome = asyncio.ensure_future(self._welcome())
        try:
            await asyncio.wait({probe, welcome}, return_when=asyncio.FIRST_COMPLETED)
            if probe.done():
                probe.result()  # this agent's wrong key, named
        finally:
            for task in (probe, welcome):
                task.cancel()
            await asyncio.gather(probe, welcome, return_exceptions=True)
            await sub.close()
        await self._matched.wait()

    async def _welcome(self) -> None:
        """Until the server's welcome; a warning every ``status_interval_s`` meanwhile."""
        t0 = time.monotonic()
        while not await wait_set(self._matched, self.status_interval_s):
            log.warning(
                "run %s: no welcome from the server after %.0f s (a hello every %.0f s on "
                "%s): is this run's server running? A client agent learns its execution's "
                "session from the server only, so a run whose server has ended cannot be "
                "joined",
                self.run_id,
                time.monotonic() - t0,
                HELLO_INTERVAL_S,
                lobby_topic(self.namespace),
            )

    async def _probe_keys(self, sub: Any) -> None:
        """Check the signatures of the broadcast topic's records (:meth:`_await_session`)."""
        async for record in sub:
            try:
                opened = open_record(record.value, self.signer, self.broker.max_message_bytes)
            except SignatureError as exc:
                if exc.reason == "bad_signature":
                    self._key_failed(exc)
                continue
            except ProtocolError:
                continue
            if opened.envelope.sender == SERVER:
                self._verified(opened)

    def _repeat_too_soon(self, phase: int) -> bool:
        """Whether a live broadcast of ``phase`` repeats one this agent answered less than
        ``rebroadcast_s`` ago. The server repeats a phase after ``rebroadcast_s`` without a
        new report: repeats published while this agent was still computing or sending its
        replies are stale and are skipped, so that the replies of thousands of hosted clients
        are sent again once per repeat the server really needed, not once per copy queued
        meanwhile (a client agent would otherwise resend faster than it can)."""
        last_phase, sent_at = self._sent
        return phase == last_phase and time.monotonic() - sent_at < self.rebroadcast_s

    async def _answer(self, msg: Any) -> list[tuple[int, Any]]:
        """:meth:`answer_all`, on the event loop if the last answer took less than
        ``inline_answer_s``, else in the executor thread (the first answer, and a slow black
        box, whose evaluations must not stop the heartbeats and the broker client)."""
        t0 = time.perf_counter()
        if self._last_answer_s < self.inline_answer_s:
            answers = self.answer_all(msg)
        else:
            loop = asyncio.get_running_loop()
            answers = await loop.run_in_executor(self.executor, self.answer_all, msg)
        self._last_answer_s = time.perf_counter() - t0
        return answers

    async def _answer_broadcasts(self) -> None:
        """Answer the run's broadcasts until the server's final answer, once the server's
        welcome gave this execution's session."""
        await self._await_session()
        sub = self.broker.subscribe(self.topics["broadcast"], None)
        try:
            replay_until = max((await sub.end_offsets()).values(), default=0) - 1
            async for record in sub:
                msg = self.decode(record)
                if msg is None:
                    continue
                if isinstance(msg, Aborted):
                    if record.offset < replay_until:
                        continue  # an old record of the topic
                    await self._stopped(int(msg.phase))  # (the server waits for every client)
                    raise FedxabError(f"the server stopped the run: {msg.text}")
                if isinstance(msg, Finished):
                    self.finished = msg
                    self.observer.on_recommendation(msg.recommendation)
                    self.watch.privacy()  # final: before the end markers
                    self._hand_over(final=True)
                    await self._flush_telemetry()
                    await self._send_outcomes(msg)
                    await self._close_ledger_mirror()
                    await self._leave(int(msg.phase))
                    break
                live = record.offset >= replay_until
                if live and self._repeat_too_soon(int(msg.phase)):
                    self.counts["broadcasts_repeat_skipped"] += 1
                    continue
                self._opened = time.perf_counter()
                try:
                    answers = await self._answer(msg)
                except EvaluationError as exc:
                    await self._tell_failure(exc, int(msg.phase))
                    raise
                self._hand_over()
                await self._mirror_ledger()
                if live:
                    bytes_up = await self._send(answers, int(msg.phase))
                    self._sent = (int(msg.phase), time.monotonic())
                    self._observe(msg, len(answers), bytes_up)
                else:
                    self.counts["broadcasts_replayed"] += 1
                self.watch.privacy_if_stale()
        finally:
            await sub.close()
