"""Waiting with a time limit without ever losing a cancellation; and the server's liveness on
the broadcast topic (:func:`keep_alive`), which bounds a client's wait (:func:`within`).

On Python 3.11, ``asyncio.wait_for`` returns the awaited result instead of raising when the
task is cancelled in the same loop step as that result arrives (CPython issue gh-86296, fixed
by the 3.12 rewrite of ``wait_for`` on ``asyncio.timeout``). A server cancelled as a report
woke it then went on running, and the restarted server beside it waited forever. Every
timed wait in fedxab uses ``asyncio.timeout`` (correct on 3.11), directly or through
:func:`wait_set`; ``asyncio.wait_for`` is banned by the lint configuration.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import TYPE_CHECKING, TypeVar

from fedxab.errors import FedxabError

if TYPE_CHECKING:
    from fedxab.broker.base import Broker
    from fedxab.run.server_party import ServerParty

__all__ = ["keep_alive", "wait_set", "wait_until", "within"]

T = TypeVar("T")


async def wait_set(event: asyncio.Event, timeout: float) -> bool:
    """Whether ``event`` was set within ``timeout`` seconds; a cancellation always propagates."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def wait_until(
    condition: Callable[[], bool], event: asyncio.Event, step_s: float = 0.5
) -> None:
    """Until ``condition()`` holds, looking again whenever ``event`` is set and every
    ``step_s`` seconds (a condition of time, such as a liveness limit, changes without one)."""
    while not condition():
        event.clear()
        await wait_set(event, step_s)


async def keep_alive(broker: Broker, topic: str, party: ServerParty) -> None:
    """Forever: publish the server ``party``'s sign of life on ``topic`` whenever it has
    published nothing there for ``party.alive_interval`` seconds
    (:meth:`~fedxab.run.server_party.ServerParty.alive_record`), so that a client hears from a
    running server at least that often."""
    while True:
        wait = party.last_published + party.alive_interval - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        else:
            await broker.publish(topic, None, party.alive_record())


async def within(
    records: AsyncIterable[T], limit: float, silent: Callable[[float], str]
) -> AsyncIterator[T]:
    """The items of ``records``; waiting more than ``limit`` seconds for the next one raises
    :class:`~fedxab.errors.FedxabError` with the line ``silent(limit)``."""
    iterator = aiter(records)
    while True:
        deadline = asyncio.timeout(limit)
        try:
            async with deadline:
                item = await anext(iterator)
        except StopAsyncIteration:
            return
        except TimeoutError:
            if not deadline.expired():
                raise  # (the reader's own, not this limit's)
            raise FedxabError(silent(limit)) from None
        yield item
