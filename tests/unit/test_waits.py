"""A timed wait never swallows a cancellation (the Python 3.11 ``wait_for`` defect, gh-86296).

The server's phase loop waits on an event with a time limit. Cancelled in the very loop step in
which a report set that event, a server built on ``asyncio.wait_for`` went on running: a killed
server kept answering beside its restarted successor, and the run hung.
"""

from __future__ import annotations

import asyncio

import pytest

from fedxab.agents.waits import wait_set


async def _cancel_as_the_event_is_set(wait) -> asyncio.Task:
    event = asyncio.Event()
    woken_rounds = []

    async def phase_loop():  # a server's loop: wait, then go on with the next phase
        while True:
            event.clear()
            woken_rounds.append(await wait(event))

    task = asyncio.create_task(phase_loop())
    await asyncio.sleep(0)  # the loop is now waiting on the event
    event.set()  # a report arrives ...
    task.cancel()  # ... in the same loop step as the kill
    await asyncio.sleep(0.05)
    stopped = task.done()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return stopped, woken_rounds


def test_a_cancellation_in_the_step_the_event_is_set_stops_the_waiter():
    stopped, woken = asyncio.run(_cancel_as_the_event_is_set(lambda e: wait_set(e, 10.0)))
    assert stopped and woken == []


def test_asyncio_wait_for_is_the_defect_this_guards_against():
    """The same race with ``asyncio.wait_for`` on this Python: the cancellation is lost."""

    async def wait_for(event):
        return await asyncio.wait_for(event.wait(), 10.0)

    stopped, woken = asyncio.run(_cancel_as_the_event_is_set(wait_for))
    if stopped:
        pytest.skip("this Python's asyncio.wait_for keeps the cancellation (3.12+)")
    assert woken == [True]


def test_wait_set_reports_a_timeout_and_a_set_event():
    async def main():
        event = asyncio.Event()
        late = await wait_set(event, 0.01)
        event.set()
        return late, await wait_set(event, 0.01)

    assert asyncio.run(main()) == (False, True)
