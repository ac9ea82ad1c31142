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

__all__ = ["wait_set"]


async def wait_set(event: asyncio.Event, timeout: float) -> bool:
    """Whether ``event`` was set within ``timeout`` seconds; a cancellation always propagates."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True
