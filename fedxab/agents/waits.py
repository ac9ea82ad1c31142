"""Waiting with a time limit without ever losing a cancellation.

On Python 3.11, ``asyncio.wait_for`` returns the awaited result instead of raising when the
task is cancelled in the same loop step as that result arrives (CPython issue gh-86296, fixed
by the 3.12 rewrite of ``wait_for`` on ``asyncio.timeout``). A server cancelled as a report
woke it then went on running, and the restarted server beside it waited forever. Every
timed wait in fedxab uses ``asyncio.timeout`` (correct on 3.11), directly or through
:func:`wait_set`; ``asyncio.wait_for`` is banned by the lint configuration.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["wait_set", "wait_until"]


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
