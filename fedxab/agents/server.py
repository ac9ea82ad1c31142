"""The server agent: drives a federated server state machine over a broker (asyncio service).

Per phase: publish the broadcast on ``{ns}.{run}.broadcast``; read reports
from ``{ns}.{run}.report`` (consumer group ``server``, committed only once a phase is
checkpointed, so an unfinished phase's reports are delivered again after a restart); feed each
valid report to the state machine; close the phase when every expected client has reported, or,
after ``[agents] phase_deadline_s``, when a ``quorum`` has (:class:`~fedxab.config.AgentsConfig`);
checkpoint; publish the next
broadcast. The final :class:`~fedxab.algorithms.protocol.Finished` is broadcast like a phase.

Every record read is handed to the agent's sans-I/O party (:attr:`ServerAgent.party`, a
:class:`~fedxab.run.server_party.ServerParty`), which admits, classifies and counts it (sessions,
signatures and the reasons of a refusal: :mod:`fedxab.run.server_party`) and builds every record
the agent publishes; a refused record changes no state and never stops the agent.

What the observer (``metrics``, ``progress``) is told and what the server learns under local
DP are the party's too. A server agent whose clients all run in its own process
(``local_clients``: ``fedxab run``, :func:`~fedxab.agents.distributed.run_on_broker`) is
handed their full telemetry and their outcomes in process (:meth:`ServerAgent.take_local`).

The control topic (join, leave, heartbeat, telemetry) is read from its beginning on every start
and never committed: everything on it is idempotent, so a restarted server simply rebuilds its view
of the clients and of the regret telemetry (:mod:`fedxab.run.evaluation`) from it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedxab.agents.checkpoint import ServerCheckpoint
from fedxab.agents.ledger_mirror import rebuild_ledger
from fedxab.agents.lobby import new_session, refuse_strangers
from fedxab.agents.supervise import supervised
from fedxab.agents.waits import keep_alive, wait_set, wait_until
from fedxab.algorithms.protocol import Finished
from fedxab.broker.base import Broker, Record, lobby_topic, run_topics, transport_of
from fedxab.config import Config
from fedxab.errors import ConfigError, FedxabError, RunConflictError
from fedxab.privacy.run_ledger import RunLedger
from fedxab.results import RunRecord
from fedxab.run.accounting import PhaseCommunication
from fedxab.run.assembly import build_run
from fedxab.run.evaluation import Telemetry
from fedxab.run.identity import protocol_of
from fedxab.run.observe import ProgressCallback, observer_of
from fedxab.run.outcome import ClientOutcome
from fedxab.run.server_party import ServerParty
from fedxab.security.agents import signer_for

if TYPE_CHECKING:
    from fedxab.monitoring.metrics import FederationMetrics
    from fedxab.objectives.families import ClientFamily

__all__ = ["ServerAgent"]

log = logging.getLogger(__name__)


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
        parts = build_run(
            config,
            seed,
            run_id=run_id,
            server=True,
            family=family,
            remote_clients=not local_clients,
        )
        assert parts.server is not None
        self.run_session = parts.server
        """The run's server side (:class:`~fedxab.run.session.ServerSession`): this agent
        moves its messages and keeps its time."""
        self.server = self.run_session.server
        self.sums = self.run_session.sums
        self.checkpoint = ServerCheckpoint(checkpoint, run_id)
        self.may_resume = checkpoint is not None if resume is None else resume
        """Whether this server may continue a run that already has broadcasts on the broker
        (by default: when it has a checkpoint to continue from); else it refuses to start."""
        self.party = ServerParty(
            config,
            self.run_session,
            run_id=run_id,
            signer=self.signer,
            max_bytes=broker.max_message_bytes,
            observer=self.observer,
            local_clients=local_clients,
            run_ledger=parts.run_ledger,  # central DP: this (trusted) server releases
            namespace=namespace,
        )
        """The run's side of the wire (:class:`~fedxab.run.server_party.ServerParty`): what each
        record read does and the records to publish; this agent moves them."""
        self.sessions = {} if sessions is None else sessions
        """The sessions of the job's runs this server knows, by run id: its own once drawn, and
        (shared by the server agents of one process, :func:`~fedxab.agents.distributed.serve`)
        those of the job's earlier runs. The lobby welcomes a client agent of any of them: a
        client process restarted while the server serves a later run replays the earlier
        runs first, and needs their sessions to."""
        self._wakeup = asyncio.Event()
        self._history: list[Any] = []
        self._closed: list[Any] = []  # the checkpoint's closed phases (:meth:`_open_session`)

    @property
    def phases(self) -> list[PhaseCommunication]:
        """The closed phases (their evaluations are counted from the telemetry at the end)."""
        return self.run_session.phases

    @property
    def phase(self) -> int:
        """The open phase (the final answer's phase once the run is over; 0 before it starts)."""
        return 0 if self.run_session.msg is None else self.run_session.phase

    @property
    def outcomes(self) -> dict[int, ClientOutcome]:
        """What each client observed (sent after its last telemetry), by client id."""
        return self.run_session.outcomes

    # ----------------------------------------------------------------------------- messages
    def take_local(
        self, telemetry: list[Telemetry], outcomes: Collection[ClientOutcome] = ()
    ) -> None:
        """A client agent of this process (``local_clients``) hands over its clients' full
        telemetry and outcomes (:meth:`ServerParty.take_local
        <fedxab.run.server_party.ServerParty.take_local>`), on this agent's event loop."""
        self.party.take_local(telemetry, outcomes)
        self._wakeup.set()

    # --------------------------------------------------------------------------- the phases
    async def _publish(self, msg: Any) -> int:
        """Publish the broadcast ``msg``; its payload's size."""
        record, size = self.party.broadcast_record(msg)
        await self.broker.publish(self.topics["broadcast"], None, record)
        return size

    def _open_session(self) -> None:
        """Load the checkpoint (if this server may resume) and take its session, or draw a
        new one (:func:`~fedxab.agents.lobby.new_session`) and write it into the checkpoint at
        once; either way it joins :attr:`sessions`."""
        # a server that may not resume starts afresh, and overwrites a stale checkpoint
        self._closed = self.checkpoint.load() if self.may_resume else []
        resumed = self.may_resume and self.checkpoint.session
        session = resumed or new_session()
        self.party.signing_session = self.checkpoint.session = session
        if not resumed:  # written now: a server killed before its first phase closes keeps it
            self.checkpoint.save()
        self.sessions[self.run_id] = session

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
                    return self.party.begins_the_run(record)
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
        quorum = self.settings.quorum
        while not self.party.barrier_met(time.monotonic() - opened, deadline, quorum):
            if self.party.failure is not None:
                await self._abort(msg)
            self._wakeup.clear()
            now = time.monotonic()
            timeout = min(repeat - (now - last_progress), next_status - now)
            if deadline is not None:
                timeout = min(timeout, deadline - (now - opened))
            await wait_set(self._wakeup, max(0.001, timeout))
            now = time.monotonic()
            if now >= next_status:
                log.warning(self.party.waiting_text(int(msg.phase), now - opened))
                next_status = now + self.settings.status_interval_s
            accepted = len(self.run_session.accepted)
            if accepted > reported:
                reported, last_progress = accepted, now
            elif now - last_progress >= repeat:
                log.info("run %s: phase %d stalled; broadcasting it again", self.run_id, msg.phase)
                self.party.count("broadcast_repeated")
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
        party = self.party
        assert party.failure is not None

        async def publish() -> None:
            abort = party.abort_record(int(msg.phase))
            await self.broker.publish(self.topics["broadcast"], None, abort)

        await publish()
        log.info("run %s: stopping; waiting for every client agent to stop", self.run_id)
        await self._linger(
            done=lambda: len(party.stopped) == self.n_clients,
            progress=lambda: len(party.stopped),
            repeat=publish,
        )
        raise FedxabError(party.failure)

    async def _mirror_ledger(self, *, end: bool = False) -> None:
        """Central DP: publish the releases recorded since the last call to the ledger topic
        (and, with ``end``, each client's end marker)."""
        if self.party.run_ledger is not None:
            records = self.party.ledger_records(end=end)
            await self.broker.publish_many(self.topics["ledger"], records)

    async def _drive(self, reports: Any) -> None:
        await wait_until(self.party.may_open, self._wakeup)  # (elastic: min_clients in)
        msg, self._history = self.party.replay(self._closed)
        await self._republish_history()
        if self.party.run_ledger is not None:  # each client's budgets and data owner
            await self.broker.publish_many(self.topics["ledger"], self.party.budget_records())
            await self._mirror_ledger()  # what the replayed phases recorded
        while not isinstance(msg, Finished):
            active = len(self.run_session.active)  # the clients the broadcast is for
            opened = time.perf_counter()
            broadcast_bytes = await self._publish(msg)
            await self._wait_for_barrier(msg)
            self.checkpoint.append(self.run_session.close_phase(broadcast_bytes, active))
            if self.party.last_report is not None:
                await reports.commit(self.party.last_report)
            msg = self.run_session.msg
            await self._mirror_ledger()
            self.party.phase_closed(time.perf_counter() - opened)
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
            done=lambda: self.party.ended(expected),
            progress=lambda: (self.party.fresh_telemetry, len(self.party.left)),
            repeat=lambda: self._publish(self.run_session.finished),
        )
        self.party.warn_incomplete(expected)

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
                self.party.count("broadcast_repeated")
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
        self.party.started(transport_of(self.broker))
        with self.party.watch.failing():
            return await self._run()

    async def _run(self) -> RunRecord:
        await self.broker.create_topics([*self.topics.values(), self.lobby])
        t0 = time.perf_counter()
        await self._check_fresh_or_resuming()
        self._open_session()
        reports = self.broker.subscribe(self.topics["report"], self.group)
        control = self.broker.subscribe(self.topics["control"], None)
        self.party.control_live = dict(await control.end_offsets())

        async def consume(sub: Any, handle: Callable[[Record], bool]) -> None:
            async for record in sub:
                if handle(record):  # (the party's answer: the waits should look again)
                    self._wakeup.set()

        async def drive() -> dict[str, Any] | None:
            await self._drive(reports)
            await self._wait_for_telemetry()
            return await self._privacy_block()

        try:
            privacy = await supervised(
                self.run_id,
                drive(),
                {
                    "report consumer": consume(reports, self.party.on_report),
                    "control consumer": consume(control, self.party.on_control),
                    "lobby": refuse_strangers(
                        self.broker,
                        self.lobby,
                        self.protocol,
                        self.known_runs,
                        self.signer,
                        run_id=self.run_id,
                        sessions=self.sessions,
                        refused=self.party.lobby_refused,
                    ),
                    "liveness": keep_alive(self.broker, self.topics["broadcast"], self.party),
                },
            )
        finally:
            await reports.close()
            await control.close()
        return self.party.finish(time.perf_counter() - t0, privacy)

    async def _privacy_block(self) -> dict[str, Any] | None:
        """A private run's ``privacy`` block. Central DP: from the server's own ledger. Local
        DP: from the ledger rebuilt from the ledger topic, read until every client's end marker
        (published once it saw the final answer) or ``telemetry_timeout_s``; a client whose
        marker never came is counted up to what it published."""
        if self.config.privacy is None or self.party.run_ledger is not None:
            return self.party.privacy_block()  # (central DP: the server's own ledger)
        run_ledger = RunLedger.from_config(self.config, self.run_id, path=":memory:")
        try:
            rebuilt = await rebuild_ledger(
                self.broker,
                self.topics["ledger"],
                self.run_id,
                run_ledger.ledger,
                expect=self.party.clients_in_run(),
                timeout_s=self.settings.telemetry_timeout_s,
                signer=self.signer,
                clients_only=True,  # local DP: the server authors no client's record
                session=self.party.signing_session if self.signer is not None else None,
            )
            self.party.count_ledger(rebuilt.skipped, rebuilt.reasons)
            return self.party.privacy_block(run_ledger)
        finally:
            run_ledger.close()
