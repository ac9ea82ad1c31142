"""Supervised agent tasks: a background task that dies never leaves its agent hanging.

An agent drives its run in one task (the server's phases, a client agent's answers) while others
work beside it: consumers of the report and control topics, the lobby, heartbeats. Before, a
consumer killed by an exception vanished silently and the driver waited forever for records no
one read. :func:`supervised` runs the driver with its helpers and, the moment a helper raises
(or stops while it should not), cancels the driver and raises :class:`AgentFailure` naming the
helper and its cause; the command line reports it and exits with a non-zero status.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Collection, Mapping
from typing import TypeVar

from fedxab.errors import FedxabError

__all__ = ["AgentFailure", "supervised"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class AgentFailure(FedxabError, RuntimeError):
    """A task an agent depends on died or stopped early; the agent stopped with it."""


async def supervised(
    run_id: str,
    main: Awaitable[T],
    helpers: Mapping[str, Awaitable[object]],
    *,
    may_finish: Collection[str] = (),
) -> T:
    """``main``'s result, with ``helpers`` (by name) running beside it until it returns.

    A helper that raises, or returns although its name is not in ``may_finish``, cancels
    ``main``. Its :class:`~fedxab.errors.FedxabError` (an error fedxab explains, such as a
    protocol mismatch or a broker unreachable after its retries) propagates unchanged; anything
    else (a defect) raises :class:`AgentFailure` naming the helper, with the exception as the
    cause and its traceback logged once. An exception of ``main`` itself propagates unchanged.
    Whatever happens, every task is cancelled and awaited before this returns."""
    driver = asyncio.ensure_future(main)
    tasks = {asyncio.ensure_future(job): name for name, job in helpers.items()}
    try:
        pending = {driver, *tasks}
        while True:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if driver in done:
                return driver.result()
            for task in done:
                _check(run_id, tasks[task], task, may_finish)
    finally:
        for task in (driver, *tasks):
            task.cancel()
        await asyncio.gather(driver, *tasks, return_exceptions=True)


def _check(
    run_id: str, name: str, task: asyncio.Future[object], may_finish: Collection[str]
) -> None:
    """Raise :class:`AgentFailure` unless ``task`` (the helper ``name``) ended as allowed."""
    if task.cancelled():
        cause: BaseException | None = None
        text = "was cancelled"
    else:
        cause = task.exception()
        if isinstance(cause, FedxabError):
            raise cause
        if cause is None:
            if name in may_finish:
                return
            text = "stopped before the run ended"
        else:
            text = f"failed: {type(cause).__name__}: {cause}"
    log.error("run %s: the %s %s; stopping this agent", run_id, name, text, exc_info=cause)
    raise AgentFailure(
        f"run {run_id}: the {name} {text}. The agent stopped; restart it to resume "
        "(a server with its checkpoint directory)"
    ) from cause
