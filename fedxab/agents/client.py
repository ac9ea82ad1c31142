"""The client agent: hosts one or more clients of a federated algorithm over a broker.

One agent (one process, or one task in ``fedxab run``) hosts any number of clients; it reads the
broadcast topic once for all of them. For every broadcast it runs each hosted client's state
machine (``client.answer(broadcast, evaluate)``) in an executor thread, so a slow black box never
blocks the event loop (heartbeats go on), then publishes, per client, the report (report topic,
key = client id). The regret telemetry of the pulls (control topic) goes out in batches: one
message per client at most every ``[agents] telemetry_interval_s``, and at the end.

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

Messages that are not a valid broadcast of this run from the server are counted in
:attr:`ClientAgent.counts` and skipped with a log line; they never stop the agent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from concurrent.futures import Executor
from typing import Any

from fedxab.agents.evaluation import ClientEvaluator, GlobalValues, Telemetry
from fedxab.agents.federation import make_family
from fedxab.algorithms.protocol import Finished
from fedxab.algorithms.registry import PRIVATE, decode_broadcast, make_federation
from fedxab.broker.base import Broker, Record, run_topics
from fedxab.broker.codec import SERVER, Envelope, client_sender, packb
from fedxab.config import Config
from fedxab.errors import ConfigError, FedxabError, ProtocolError
from fedxab.objectives.noise import make_noise
from fedxab.objectives.registry import make_objective
from fedxab.privacy.gate import LedgerGate
from fedxab.privacy.mirror import budget_record, end_record, release_record
from fedxab.privacy.run_ledger import RunLedger

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
    ) -> None:
        fed = config.federation
        if fed is None or config.agents is None:
            raise ConfigError("algorithm.name", f"{config.algorithm.name!r} is not federated")
        if not client_ids:
            raise ConfigError("client_ids", "an agent must host at least one client")
        self.broker = broker
        self.run_id = run_id
        self.topics = run_topics(namespace, run_id)
        self.heartbeat_s = config.agents.heartbeat_s
        self.executor = executor
        self.algorithm = config.algorithm.name
        objective = make_objective(config.objective.name, **dict(config.objective.params))
        noise = make_noise(config.objective.noise.name, **dict(config.objective.noise.params))
        family = make_family(objective, config, seed)
        _, clients = make_federation(
            self.algorithm,
            objective.domain,
            n_clients=fed.clients,
            budget=config.run.budget,
            seed=seed,
            params=config.algorithm_params(),
            client_ids=client_ids,
        )
        self.clients = dict(zip(client_ids, clients, strict=True))
        self.run_ledger: RunLedger | None = None
        self.gates: dict[int, LedgerGate] = {}
        if config.privacy is not None and PRIVATE[self.algorithm] == "client":
            self.run_ledger = RunLedger.from_config(
                config.privacy, config.algorithm_params(), run_id, fed.clients
            )
            for m, client in self.clients.items():
                client.gate = self.gates[m] = self.run_ledger.gate(m)
        shared = GlobalValues(family.global_objective)
        self.evaluators = {
            m: ClientEvaluator(
                m, family, noise, seed=seed, budget=config.run.budget, global_values=shared
            )
            for m in client_ids
        }
        self.telemetry_interval_s = config.agents.telemetry_interval_s
        self._last_telemetry: dict[int, Telemetry] = {}
        self._unsent: dict[int, list[Telemetry]] = {}
        self._last_flush = time.monotonic()
        self.counts: Counter[str] = Counter()
        self.finished: Finished | None = None

    # ----------------------------------------------------------------------------- messages
    def _envelope(self, kind: str, m: int, phase: int, msg_id: str, payload: bytes) -> bytes:
        return Envelope(
            run_id=self.run_id,
            kind=kind,
            phase=phase,
            sender=client_sender(m),
            msg_id=msg_id,
            payload=payload,
            sent_at=time.time(),
        ).encode()

    def decode(self, record: Record) -> Any | None:
        """The broadcast (or Finished) in ``record``, or None if it is not a valid one."""
        try:
            env = Envelope.decode(record.value)
            if env.run_id != self.run_id:
                raise ProtocolError(f"broadcast for run {env.run_id!r}, this is {self.run_id!r}")
            if env.kind != "broadcast" or env.sender != SERVER:
                raise ProtocolError(f"{env.kind!r} from {env.sender!r} on the broadcast topic")
            msg = decode_broadcast(self.algorithm, env.body())
            if int(msg.phase) != env.phase:
                raise ProtocolError(f"payload phase {msg.phase} != envelope phase {env.phase}")
        except (ProtocolError, FedxabError) as exc:
            return self._invalid(str(exc))
        except Exception as exc:  # a payload no check foresaw: reject it, keep running
            return self._invalid(f"{type(exc).__name__}: {exc}")
        return msg

    def _invalid(self, reason: str) -> None:
        self.counts["broadcast_invalid"] += 1
        log.warning("run %s: invalid broadcast: %s", self.run_id, reason)
        return None

    def answer_all(self, broadcast: Any) -> list[tuple[int, Any]]:
        """Every hosted client's report for ``broadcast`` (runs in a thread); the telemetry of
        the pulls waits in :attr:`_unsent` for the next flush."""
        phase = int(broadcast.phase)
        out = []
        for m, client in self.clients.items():
            try:
                report = client.answer(broadcast, self.evaluators[m])
            except (ProtocolError, FedxabError) as exc:
                self.counts["broadcast_rejected"] += 1
                log.warning("run %s: client %d rejects phase %d: %s", self.run_id, m, phase, exc)
                continue
            if report is None:  # the client withdrew earlier: nothing to send
                continue
            telemetry = self.evaluators[m].take(phase)
            last = self._last_telemetry.get(m)
            if telemetry.count == 0 and last is not None and last.phase == phase:
                telemetry = last  # a redelivered broadcast: send the same telemetry again
            self._last_telemetry[m] = telemetry
            self._unsent.setdefault(m, []).append(telemetry)
            out.append((m, report))
        return out

    async def _mirror_ledger(self) -> None:
        """Publish the releases the clients recorded since the last call (ledger topic)."""
        for m, gate in self.gates.items():
            for phase, event in gate.drain():
                record = release_record(self.run_id, m, phase, event)
                await self.broker.publish(self.topics["ledger"], str(m), record)

    async def _close_ledger_mirror(self) -> None:
        """Each client's end marker on the ledger topic: its mirror is complete."""
        for m, gate in self.gates.items():
            releases = len(gate.ledger.history(self.run_id, m))
            record = end_record(self.run_id, m, releases)
            await self.broker.publish(self.topics["ledger"], str(m), record)

    async def _send(self, answers: list[tuple[int, Any]], phase: int) -> None:
        for m, report in answers:
            await self.broker.publish(
                self.topics["report"],
                str(m),
                self._envelope("report", m, phase, f"report:{phase}", packb(report.to_wire())),
            )
        self.counts["reports_sent"] += len(answers)
        if time.monotonic() - self._last_flush >= self.telemetry_interval_s:
            await self._flush_telemetry()

    async def _flush_telemetry(self) -> None:
        """Publish, per client, the telemetry of the phases it answered since the last flush, as
        one message (a list): at most one per client and ``telemetry_interval_s``, and at the
        end. The server drops entries it already has, so a resent entry changes nothing."""
        for m, entries in self._unsent.items():
            if entries:
                first, last = entries[0].phase, entries[-1].phase
                body = packb([t.to_wire() for t in entries])
                await self.broker.publish(
                    self.topics["control"],
                    str(m),
                    self._envelope("telemetry", m, last, f"telemetry:{first}-{last}", body),
                )
        self._unsent = {}
        self._last_flush = time.monotonic()

    async def _heartbeats(self) -> None:
        beat = 0
        while True:
            await asyncio.sleep(self.heartbeat_s)
            beat += 1
            for m in self.clients:
                await self.broker.publish(
                    self.topics["control"],
                    str(m),
                    self._envelope("heartbeat", m, 0, f"heartbeat:{beat}", packb(None)),
                )

    # ------------------------------------------------------------------------------ service
    async def run(self) -> Finished:
        """Answer broadcasts until the server's :class:`Finished`; returns it."""
        await self.broker.create_topics(list(self.topics.values()))
        for m in self.clients:
            await self.broker.publish(
                self.topics["control"], str(m), self._envelope("join", m, 0, "join", packb(None))
            )
            budget = None if self.run_ledger is None else self.run_ledger.budget
            if budget is not None:
                record = budget_record(self.run_id, m, budget)
                await self.broker.publish(self.topics["ledger"], str(m), record)
        loop = asyncio.get_running_loop()
        heartbeats = asyncio.create_task(self._heartbeats())
        sub = self.broker.subscribe(self.topics["broadcast"], None)
        try:
            replay_until = max((await sub.end_offsets()).values(), default=0) - 1
            async for record in sub:
                msg = self.decode(record)
                if msg is None:
                    continue
                if isinstance(msg, Finished):
                    self.finished = msg
                    await self._flush_telemetry()
                    await self._close_ledger_mirror()
                    break
                answers = await loop.run_in_executor(self.executor, self.answer_all, msg)
                await self._mirror_ledger()
                if record.offset >= replay_until:
                    await self._send(answers, int(msg.phase))
                else:
                    self.counts["broadcasts_replayed"] += 1
        finally:
            heartbeats.cancel()
            await asyncio.gather(heartbeats, return_exceptions=True)
            await sub.close()
            if self.run_ledger is not None:
                self.run_ledger.close()
        if self.finished is None:
            raise FedxabError(
                f"run {self.run_id}: the broadcast subscription ended before the server's final "
                "answer (the broker closed it); restart the client to resume"
            )
        return self.finished
