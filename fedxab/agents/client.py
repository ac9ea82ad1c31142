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

Locally private algorithms (``[privacy]``, DP-Fed-PNE): what the hosted clients release, mirror
and keep to themselves is the party's (:mod:`fedxab.run.client_party`); the agent keeps their
results (:meth:`ClientAgent.outcomes`, :meth:`ClientAgent.own_record`). Beside the server agent
in one process (``server``: ``fedxab run``), it hands their full telemetry and outcomes to that
agent directly (:meth:`~fedxab.agents.server.ServerAgent.take_local`), without the broker.

What the clients take and send is decided by the agent's
:class:`~fedxab.run.client_party.ClientParty`, without I/O: the agent hands it the bytes of each
broadcast record and publishes the records it builds. The party learns the execution's session
from the server's welcome in the lobby (:mod:`fedxab.agents.lobby`) before the agent reads any
broadcast, takes only broadcasts of that session in phase order, and counts every other record
(:attr:`ClientAgent.counts`, the party's) with a log line; they never stop the agent, nor do a
few records failing this agent's keys.

With ``metrics`` (role ``client``) the party's observer exports this agent's own view
(:mod:`fedxab.run.client_party`). With ``metrics_privacy_only`` (``fedxab run``, where a server
agent in the same process exports the whole federation into the same metrics) it adds only its
clients' epsilon during the run, which the server learns only at the end.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

from fedxab.agents.lobby import HELLO_INTERVAL_S, announce_and_watch
from fedxab.agents.supervise import supervised
from fedxab.agents.waits import wait_set, within
from fedxab.algorithms.protocol import Finished
from fedxab.broker.base import Broker, lobby_topic, run_topics, transport_of
from fedxab.config import Config
from fedxab.errors import ConfigError, EvaluationError, FedxabError
from fedxab.results import RunRecord
from fedxab.run.assembly import Functions, build_run
from fedxab.run.client_party import ClientParty, Records
from fedxab.run.evaluation import Telemetry
from fedxab.run.failures import Aborted
from fedxab.run.identity import protocol_of
from fedxab.run.observe import PrivacyOnly, observer_of

if TYPE_CHECKING:
    from fedxab.agents.server import ServerAgent
    from fedxab.monitoring.metrics import FederationMetrics
    from fedxab.objectives.families import ClientFamily
    from fedxab.objectives.history import TrialRecord
    from fedxab.run.outcome import ClientOutcome
    from fedxab.security.signing import Opened

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
        self.party = ClientParty(
            config,
            seed,
            parts,
            run_id=run_id,
            max_message_bytes=broker.max_message_bytes,
            namespace=namespace,
            observer=self.observer,
        )
        """The hosted clients' message logic (:class:`~fedxab.run.client_party.ClientParty`):
        what they take, what they send."""
        self.counts = self.party.counts
        self.clients = self.party.clients
        self.server = server
        """The server agent of this process (every party runs here), or None."""

    @property
    def finished(self) -> Finished | None:
        """The server's final answer, once it came."""
        return self.party.finished

    # ----------------------------------------------------------------------------- messages
    async def _publish(self, topic: str, records: Records) -> None:
        """Publish ``records`` (built by :attr:`party`) on this run's ``topic``."""
        await self.broker.publish_many(self.topics[topic], records)

    def _welcomed(self, opened: Opened) -> None:
        """The server's welcome (:mod:`fedxab.agents.lobby`): the party takes its session."""
        self.party.welcomed(opened)
        self._matched.set()

    def _hand_over(self, fresh: list[Telemetry], final: bool = False) -> None:
        """Give the server agent of this process (if any) what the broker does not carry under
        local DP: the new full telemetry ``fresh``, and (``final``) the clients' outcomes. On the
        event loop, which the server agent shares."""
        if self.server is None:
            return
        outcomes = self.outcomes().values() if final else ()
        self.server.take_local(fresh if self.party.local_only else [], outcomes)

    def outcomes(self) -> dict[int, ClientOutcome]:
        """What each hosted client observed (:meth:`ClientParty.outcomes
        <fedxab.run.client_party.ClientParty.outcomes>`), by client id."""
        return self.party.outcomes()

    def own_record(self, wall_s: float) -> RunRecord:
        """The hosted clients' own results of the finished run (:meth:`ClientParty.own_record
        <fedxab.run.client_party.ClientParty.own_record>`)."""
        return self.party.own_record(wall_s)

    async def _heartbeats(self) -> None:
        beat = 0
        while True:
            await asyncio.sleep(self.heartbeat_s)
            beat += 1
            records = self.party.every_client("heartbeat", 0, f"heartbeat:{beat}")
            await self._publish("control", records)

    # ------------------------------------------------------------------------------ service
    async def run(self) -> Finished:
        """Answer broadcasts until the server's :class:`Finished`; returns it."""
        self.party.started(transport_of(self.broker))
        with self.party.watch.failing():
            finished = await self._run()
        self.party.watch.ended()
        return finished

    async def _run(self) -> Finished:
        lobby = lobby_topic(self.namespace)
        await self.broker.create_topics([*self.topics.values(), lobby])
        await self._publish("control", self.party.every_client("join", 0, "join"))
        await self._publish("ledger", self.party.budget_records())
        lobby_watch = announce_and_watch(
            self.broker,
            lobby,
            self.run_id,
            protocol_of(self.config, self.seed),
            list(self.clients),
            self.party.signer,
            self._matched,
            self._welcomed,
            self.party.refused,
        )
        try:
            await supervised(
                self.run_id,
                self._answer_broadcasts(),
                {"heartbeat sender": self._heartbeats(), "lobby": lobby_watch},
                may_finish={"lobby"},  # done once the server's welcome came
            )
        finally:
            if self.finished is None and self.party.elastic:  # (SIGTERM, Ctrl-C): a clean leave
                await self._publish("control", self.party.leave_records())
            self.party.close_ledger()
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
        if self.party.signer is None:
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
        t0, lobby = time.monotonic(), lobby_topic(self.namespace)
        while not await wait_set(self._matched, self.status_interval_s):
            waited = time.monotonic() - t0
            log.warning(self.party.no_welcome_text(waited, HELLO_INTERVAL_S, lobby))

    async def _probe_keys(self, sub: Any) -> None:
        """Check the signatures of the broadcast topic's records (:meth:`_await_session`)."""
        async for record in sub:
            self.party.probe(record.value)

    async def _answer(self, msg: Any) -> list[tuple[int, Any]]:
        """:meth:`answer_all`, on the event loop if the last answer took less than
        ``inline_answer_s``, else in the executor thread (the first answer, and a slow black
        box, whose evaluations must not stop the heartbeats and the broker client)."""
        t0 = time.perf_counter()
        if self._last_answer_s < self.inline_answer_s:
            answers = self.party.answer_all(msg)
        else:
            loop = asyncio.get_running_loop()
            answers = await loop.run_in_executor(self.executor, self.party.answer_all, msg)
        self._last_answer_s = time.perf_counter() - t0
        return answers

    async def _answer_broadcasts(self) -> None:
        """Answer the run's broadcasts until the server's final answer, once the server's
        welcome gave this execution's session (an error if the server falls silent)."""
        await self._await_session()
        party = self.party
        sub = self.broker.subscribe(self.topics["broadcast"], None)
        try:
            replay_until = max((await sub.end_offsets()).values(), default=0) - 1
            async for record in within(sub, party.server_silence_s, party.silence_text):
                msg = party.on_broadcast(record.value)
                if msg is None:
                    continue
                live = record.offset >= replay_until
                if isinstance(msg, Aborted):
                    if not live:
                        continue  # an old record of the topic
                    stopped = party.every_client("stopped", msg.phase, f"stopped:{msg.phase}")
                    await self._publish("control", stopped)  # (the server waits for every one)
                    raise FedxabError(f"the server stopped the run: {msg.text}")
                phase = int(msg.phase)
                if isinstance(msg, Finished):
                    last_words = party.finish(msg)
                    self._hand_over([], final=True)
                    for topic, records in last_words:
                        await self._publish(topic, records)
                    break
                if live and party.repeat_too_soon(phase):
                    continue
                opened = time.perf_counter()
                try:
                    answers = await self._answer(msg)
                except EvaluationError as exc:
                    await self._publish("control", party.failure_records(exc, phase))
                    raise
                self._hand_over(party.take_fresh())
                await self._publish("ledger", party.ledger_records())
                if live:
                    reports, bytes_up = party.report_records(answers, phase)
                    await self._publish("report", reports)
                    if party.telemetry_due():
                        await self._publish("control", party.telemetry_records())
                    party.sent(phase)
                    party.phase_seen(msg, len(answers), bytes_up, time.perf_counter() - opened)
                else:
                    party.replayed()
        finally:
            await sub.close()
