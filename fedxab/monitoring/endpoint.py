"""``/metrics`` over HTTP: a small threaded server for one metrics registry.

:class:`MetricsEndpoint` binds at construction (so a port already in use is reported at once, as
a :class:`MetricsPortError` naming the port and the fix), then serves from a daemon thread until
:meth:`~MetricsEndpoint.close`. It binds the loopback interface by default: metrics say how a
federation is doing and who is in it, so exposing them on other interfaces is an explicit choice
(``--metrics-host 0.0.0.0``, as in compose.yaml, where only the compose network reaches them).
Port ``0`` asks the system for a free port; :attr:`~MetricsEndpoint.port` is the one bound, and it
is logged.

Paths: ``/metrics`` (the Prometheus text format, gzip if asked for, from
:func:`prometheus_client.make_wsgi_app`), ``/`` (a one-line pointer to ``/metrics``); anything
else is 404.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from fedxab.errors import FedxabError

__all__ = ["DEFAULT_HOST", "MetricsEndpoint", "MetricsPortError"]

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"


class MetricsPortError(FedxabError, OSError):
    """The metrics endpoint cannot listen where asked (port in use, not allowed, bad host)."""


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr for every scrape."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in progress never keeps the process alive


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


class MetricsEndpoint:
    """Serves ``registry`` at ``http://host:port/metrics`` from a background thread."""

    def __init__(
        self, registry: CollectorRegistry, *, host: str = DEFAULT_HOST, port: int = 0
    ) -> None:
        if not 0 <= int(port) <= 65535:
            raise MetricsPortError(f"--metrics-port: {port} is not a port number (0 to 65535)")
        try:
            family, address = socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0][::4]
        except (socket.gaierror, UnicodeError) as exc:
            raise MetricsPortError(f"--metrics-host: cannot resolve {host!r} ({exc})") from None

        class Server(_Server):
            address_family = family

        try:
            self._httpd = make_server(
                address[0], int(port), _routes(make_wsgi_app(registry)), Server, _QuietHandler
            )
        except OSError as exc:
            raise MetricsPortError(self._bind_message(host, int(port), exc)) from None
        self.host = host
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"fedxab-metrics-{self.port}",
            daemon=True,
        )
        self._thread.start()
        log.info("serving metrics on %s", self.url)

    @staticmethod
    def _bind_message(host: str, port: int, exc: OSError) -> str:
        where = f"{host}:{port}"
        if exc.errno == errno.EADDRINUSE:
            return (
                f"--metrics-port: port {port} is already in use on {host} (another fedxab "
                f"process or service listens there); choose another --metrics-port, or 0 for a "
                "free one"
            )
        if exc.errno == errno.EACCES:
            return (
                f"--metrics-port: not allowed to listen on {where} (ports below 1024 need "
                "privileges); choose another --metrics-port, e.g. 9100"
            )
        if exc.errno == errno.EADDRNOTAVAIL:
            return (
                f"--metrics-host: {host!r} is not an address of this machine; use 127.0.0.1 "
                "(default) or 0.0.0.0 (every interface)"
            )
        return f"--metrics-port: cannot listen on {where}: {exc.strerror or exc}"

    @property
    def url(self) -> str:
        """``http://host:port/metrics`` (IPv6 hosts in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join()
        self._httpd.server_close()

    def __enter__(self) -> MetricsEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
