"""Supervised agents: a helper task that dies stops its agent with an error naming it, at once,
never a silent hang (:mod:`fedxab.agents.supervise`)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from fedxab.agents.client import ClientAgent
from fedxab.agents.server import ServerAgent
from fedxab.agents.supervise import AgentFailure, supervised
from fedxab.broker.base import BrokerError, Subscription
from fedxab.broker.memory import MemoryBroker
from fedxab.config import config_from_dict
from fedxab.run.identity import run_id_for

CONFIG = config_from_dict(
    {
        "run": {"budget": 300},
        "objective": {"name": "garland"},
        "algorithm": {"name": "fedpne"},
        "federation": {"clients": 2},
    }
)
RUN_ID = run_id_for(CONFIG, 0)


async def _forever() -> None:
    await asyncio.Event().wait()


async def _fail(after: float, exc: BaseException) -> None:
    await asyncio.sleep(after)
    raise exc


def test_a_helper_that_raises_cancels_the_driver_and_is_named(caplog):
    cancelled = asyncio.Event()

    async def driver() -> None:
        try:
            await _forever()
        finally:
            cancelled.set()

    async def main() -> None:
        await supervised(RUN_ID, driver(), {"report consumer": _fail(0.01, KeyError("boom"))})

    with pytest.raises(AgentFailure, match=r"the report consumer failed: KeyError: 'boom'") as err:
        asyncio.run(asyncio.wait_for(main(), 5))
    assert isinstance(err.value.__cause__, KeyError)
    assert cancelled.is_set()
    (line,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "report consumer" in line.getMessage() and line.exc_info is not None


def test_a_helper_that_stops_early_fails_the_agent_unless_it_may():
    async def done() -> None:
        return None

    async def main(may_finish: set[str]) -> str:
        async def driver() -> str:
            await asyncio.sleep(0.05)
            return "result"

        return await supervised(RUN_ID, driver(), {"lobby": done()}, may_finish=may_finish)

    with pytest.raises(AgentFailure, match="the lobby stopped before the run ended"):
        asyncio.run(main(set()))
    assert asyncio.run(main({"lobby"})) == "result"


def test_errors_fedxab_explains_propagate_unchanged_and_every_task_is_stopped():
    helper_stopped = asyncio.Event()

    async def helper() -> None:
        try:
            await _forever()
        finally:
            helper_stopped.set()

    async def main(exc: BaseException) -> None:
        await supervised(RUN_ID, _fail(0.01, exc), {"heartbeat sender": helper()})

    with pytest.raises(ValueError, match="driver"):
        asyncio.run(main(ValueError("driver")))
    assert helper_stopped.is_set()

    async def failing_helper() -> None:
        await supervised(
            RUN_ID, _forever(), {"heartbeat sender": _fail(0.01, BrokerError("unreachable"))}
        )

    with pytest.raises(BrokerError, match="unreachable"):
        asyncio.run(asyncio.wait_for(failing_helper(), 5))


class _Dying(Subscription):
    """A subscription that dies with a defect on its first record."""

    def __init__(self, inner: Subscription) -> None:
        self.inner = inner

    async def _records(self):
        async for _ in self.inner:
            raise RuntimeError("the consumer hit a defect")
            yield  # makes this an async generator

    def __aiter__(self):
        return self._records()

    async def commit(self, record) -> None:
        await self.inner.commit(record)

    async def end_offsets(self) -> dict[int, int]:
        return await self.inner.end_offsets()

    async def close(self) -> None:
        await self.inner.close()


class _BrokenReports(MemoryBroker):
    """The embedded broker, whose report-topic subscriptions die on their first record."""

    def subscribe(self, topic: str, group: str | None) -> Subscription:
        inner = super().subscribe(topic, group)
        return _Dying(inner) if topic.endswith(".report") else inner


def test_a_server_whose_report_consumer_dies_stops_with_an_error_not_a_hang():
    broker = _BrokenReports()

    async def main() -> None:
        server = ServerAgent(CONFIG, 0, broker, run_id=RUN_ID)
        agent = ClientAgent(CONFIG, 0, broker, run_id=RUN_ID, client_ids=[0, 1])
        async with broker, asyncio.TaskGroup() as group:
            group.create_task(server.run())
            group.create_task(agent.run())

    with pytest.raises(ExceptionGroup) as caught:
        asyncio.run(asyncio.wait_for(main(), 30))
    (failure,) = caught.value.exceptions
    assert isinstance(failure, AgentFailure)
    assert "report consumer failed: RuntimeError: the consumer hit a defect" in str(failure)
