"""A TCP forwarder that can simulate a broker outage, for fault tests.

The dev broker keeps its data in memory, so restarting it would also wipe every topic, which an
Apache Kafka restart does not. To test what a restart does to the agents (every connection
dropped, the broker unreachable for a while, then back with its data), the agents talk to the
broker through this forwarder, and :meth:`OutageProxy.outage` closes every connection and
refuses new ones for some seconds. It runs its own event loop in a thread, so it keeps working
whatever the test's event loop is doing.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from fedxab.broker.devbroker import free_port

HOST = "127.0.0.1"


class OutageProxy:
    """Forwards ``127.0.0.1:port`` to ``127.0.0.1:target_port``."""

    def __init__(self, target_port: int) -> None:
        self.port = free_port()
        self.target_port = target_port
        self.outages = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def start(self) -> None:
        self._thread.start()
        self._call(self._listen())

    def stop(self) -> None:
        self._call(self._close_all())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def outage(self, seconds: float) -> None:
        """Drop every connection, refuse new ones for ``seconds``, then accept them again."""
        self.outages += 1
        self._call(self._close_all())
        threading.Event().wait(seconds)
        self._call(self._listen())

    def _call(self, coro) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._forward, HOST, self.port)

    async def _close_all(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(HOST, self.target_port)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
