"""A broker wrapper that injects transport faults, for fault-tolerance tests and soak runs.

:class:`FaultyBroker` wraps any :class:`~fedxab.broker.base.Broker` and, on the topics it is told
to disturb, can deliver every record twice (``duplicate``), hold records back and release them in
a shuffled order (``reorder_window``), or lose records (``drop``). All choices come from one
seeded generator, so a faulty run is reproducible. Subscriptions and commits pass through.
:attr:`FaultyBroker.injected` counts what was done, and :meth:`FaultyBroker.stop` logs it as a
warning (``faults injected on report topics: 12 duplicated, 3 dropped, 40 reordered``).

Separate processes (``fedxab server``, ``fedxab client``) get these faults from the environment
variable ``FEDXAB_FAULTS``, which :func:`fedxab.broker.factory.make_broker` reads (see there for
its syntax); the soak test (tests/integration/test_soak.py) uses it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

import numpy as np

from fedxab.broker.base import Broker, Subscription
from fedxab.errors import ConfigError

__all__ = ["FaultyBroker"]

log = logging.getLogger(__name__)


class FaultyBroker(Broker):
    """``inner`` with duplicated, reordered or dropped records on the ``topics`` whose names end
    with one of ``kinds`` (e.g. ``("report",)``)."""

    def __init__(
        self,
        inner: Broker,
        *,
        kinds: Iterable[str] = ("broadcast", "report", "control"),
        duplicate: float = 0.0,
        drop: float = 0.0,
        reorder_window: int = 1,
        reorder_delay_s: float = 0.005,
        seed: int = 0,
    ) -> None:
        for name, p in (("duplicate", duplicate), ("drop", drop)):
            if not 0 <= p <= 1:
                raise ConfigError(f"faults.{name}", f"must be a probability in [0, 1], got {p}")
        if reorder_window < 1:
            raise ConfigError("faults.reorder_window", f"must be >= 1, got {reorder_window}")
        self.inner = inner
        self.kinds = tuple(kinds)
        self.duplicate = duplicate
        self.drop = drop
        self.reorder_window = reorder_window
        self.reorder_delay_s = reorder_delay_s
        self.rng = np.random.default_rng(seed)
        self.injected = {"duplicated": 0, "dropped": 0, "reordered": 0}
        self._held: dict[str, list[tuple[str | None, bytes]]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._flushes: set[asyncio.Task[None]] = set()
        self._logged = False

    @property
    def max_message_bytes(self) -> int:  # type: ignore[override]
        return self.inner.max_message_bytes

    def _disturbed(self, topic: str) -> bool:
        return topic.rsplit(".", 1)[-1] in self.kinds

    async def start(self) -> None:
        await self.inner.start()

    async def stop(self) -> None:
        for topic in list(self._held):
            await self._flush(topic)
        if any(self.injected.values()) and not self._logged:
            self._logged = True
            log.warning(
                "faults injected on %s topics: %d duplicated, %d dropped, %d reordered",
                "+".join(self.kinds),
                self.injected["duplicated"],
                self.injected["dropped"],
                self.injected["reordered"],
            )
        await self.inner.stop()

    async def create_topics(self, names: list[str]) -> None:
        await self.inner.create_topics(names)

    async def publish(self, topic: str, key: str | None, value: bytes) -> None:
        if not self._disturbed(topic):
            await self.inner.publish(topic, key, value)
            return
        if self.drop and self.rng.random() < self.drop:
            self.injected["dropped"] += 1
            log.warning("fault: dropped a record on %s", topic)  # (a killed process logs no total)
            return
        copies = 2 if self.duplicate and self.rng.random() < self.duplicate else 1
        self.injected["duplicated"] += copies - 1
        if self.reorder_window <= 1:
            for _ in range(copies):
                await self.inner.publish(topic, key, value)
            return
        held = self._held.setdefault(topic, [])
        held.extend([(key, value)] * copies)
        if len(held) >= self.reorder_window:
            await self._flush(topic)
        elif topic not in self._timers:
            loop = asyncio.get_running_loop()
            self._timers[topic] = loop.call_later(self.reorder_delay_s, self._flush_later, topic)

    def _flush_later(self, topic: str) -> None:
        task = asyncio.ensure_future(self._flush(topic))
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _flush(self, topic: str) -> None:
        timer = self._timers.pop(topic, None)
        if timer is not None:
            timer.cancel()
        held = self._held.pop(topic, [])
        order = self.rng.permutation(len(held))
        self.injected["reordered"] += int(np.sum(order != np.arange(len(held))))
        for i in order:
            await self.inner.publish(topic, *held[i])

    def subscribe(self, topic: str, group: str | None) -> Subscription:
        return self.inner.subscribe(topic, group)
