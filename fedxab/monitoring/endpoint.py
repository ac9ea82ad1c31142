"""Serving over HTTP from a background thread: ``/metrics``, and the base of the dashboard's server.

:class:`HttpEndpoint` serves a WSGI app on ``host:port``. It binds at construction (so a port
already in use is reported at once, as an error naming the option that chose the port and the
fix), then serves from a daemon thread until :meth:`~HttpEndpoint.close`. It binds the loopback
interface by default: metrics and the dashboard say how a federation is doing and who is in it,
so exposing them on other interfaces is an explicit choice (``--metrics-host 0.0.0.0``, as in
compose.yaml, where only the compose network reaches them). Port ``0`` asks the system for a free
port; :attr:`~HttpEndpoint.port` is the one bound, and it is logged.

:class:`MetricsEndpoint` serves one registry: ``/metrics`` (the Prometheus text format, gzip if
asked for, from :func:`prometheus_client.make_wsgi_app`), ``/`` (a one-line pointer to
``/metrics``); anything else is 404. Its errors are :class:`MetricsPortError` s naming
``--metrics-port`` and ``--metrics-host``.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
from socketserver import ThreadingMixIn
from typing import Any, Self
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from fedxab.errors import FedxabError

__all__ = [
    "DEFAULT_HOST",
    "IDLE_TIMEOUT_S",
    "MAX_CONNECTIONS",
    "HttpEndpoint",
    "MetricsEndpoint",
    "MetricsPortError",
]

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"


class MetricsPortError(FedxabError, OSError):
    """The metrics endpoint cannot listen where asked (port in use, not allowed, bad host)."""


IDLE_TIMEOUT_S = 10.0
"""A connection that sends nothing for this long is closed (a request is read, and its answer
written, within it)."""

MAX_CONNECTIONS = 32
"""Connections served at once; one more is closed as soon as it is accepted. Together with
:data:`IDLE_TIMEOUT_S` this bounds what idle connections cost the process that serves them
(before, each held a thread forever: 2,000 of them pushed a machine's load average to 320)."""


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr for every scrape; a connection idle for :data:`IDLE_TIMEOUT_S`
    is dropped."""

    timeout = IDLE_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingMixIn, WSGIServer):
    """One thread per connection, at most :data:`MAX_CONNECTIONS` of them at once."""

    daemon_threads = True  # a scrape in progress never keeps the process alive

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # full: refused at once, costing no thread
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def _routes(metrics_app: Any) -> Any:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        if path in ("/metrics", "/metrics/"):
            return metrics_app(environ, start_response)
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"fedxab metrics: see /metrics\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: fedxab serves /metrics\n"]

    return app


class HttpEndpoint:
    """Serves a WSGI ``app`` at ``http://host:port/`` from a background thread.

    Subclasses name themselves for errors and logs: ``what`` (logged), ``path`` (of
    :attr:`url`), ``port_option`` and ``host_option`` (the command-line options an error names),
    ``example_port`` (suggested when a port is not allowed) and ``error`` (the exception raised).
    """

    what = "HTTP"
    path = "/"
    port_option = "--port"
    host_option = "--host"
    example_port = 8080
    error: type[FedxabError] = FedxabError

    def __init__(self, app: Any, *, host: str = DEFAULT_HOST, port: int = 0) -> None:
        if not 0 <= int(port) <= 65535:
            raise self.error(f"{self.port_option}: {port} is not a port number (0 to 65535)")
        try:
            family, address = socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0][::4]
        except (socket.gaierror, UnicodeError) as exc:
            raise self.error(f"{self.host_option}: cannot resolve {host!r} ({exc})") from None

        class Server(_Server):
            address_family = family

        try:
            # an IP address string: the socket address of an AF_INET or AF_INET6 family
            self._httpd = make_server(str(address[0]), int(port), app, Server, _QuietHandler)
        except OSError as exc:
            raise self.error(self._bind_message(host, int(port), exc)) from None
        self.host = host
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"fedxab-{self.what}-{self.port}",
            daemon=True,
        )
        self._thread.start()
        log.info("serving %s on %s", self.what, self.url)

    def _bind_message(self, host: str, port: int, exc: OSError) -> str:
        where = f"{host}:{port}"
        if exc.errno == errno.EADDRINUSE:
            return (
                f"{self.port_option}: port {port} is already in use on {host} (another fedxab "
                f"process or service listens there); choose another {self.port_option}, or 0 "
                "for a free one"
            )
        if exc.errno == errno.EACCES:
            return (
                f"{self.port_option}: not allowed to listen on {where} (ports below 1024 need "
                f"privileges); choose another {self.port_option}, e.g. {self.example_port}"
            )
        if exc.errno == errno.EADDRNOTAVAIL:
            return (
                f"{self.host_option}: {host!r} is not an address of this machine; use "
                "127.0.0.1 (default) or 0.0.0.0 (every interface)"
            )
        return f"{self.port_option}: cannot listen on {where}: {exc.strerror or exc}"

    @property
    def url(self) -> str:
        """``http://host:port`` and :attr:`path` (IPv6 hosts in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{self.path}"

    def close(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join()
        self._httpd.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MetricsEndpoint(HttpEndpoint):
    """Serves ``registry`` at ``http://host:port/metrics`` from a background thread."""

    what = "metrics"
    path = "/metrics"
    port_option = "--metrics-port"
    host_option = "--metrics-host"
    example_port = 9100
    error = MetricsPortError

    def __init__(
        self, registry: CollectorRegistry, *, host: str = DEFAULT_HOST, port: int = 0
    ) -> None:
        super().__init__(_routes(make_wsgi_app(registry)), host=host, port=port)
