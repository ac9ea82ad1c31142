"""The dashboard over HTTP: the page, its assets and two JSON routes, on the loopback interface.

:class:`DashboardServer` serves, from a background thread:

- ``/``: the page (``static/index.html``), and ``/static/NAME`` its script and style sheet, all
  from the installed package, so the page works offline (nothing is fetched from the internet);
- ``/api/state[?run=K]``: :meth:`~fedxab.dashboard.state.DashboardState.snapshot` as JSON;
- ``/api/client?id=M[&run=K]``: one client's epsilon and best-so-far curve.

Every request needs the server's access token, drawn afresh for each server (as Jupyter does):
the URL printed (:attr:`DashboardServer.url`) carries it as ``?token=...``; the page's answer
sets it as a cookie (HttpOnly, SameSite=Strict, its name drawn from the token so that two
dashboards on one host keep theirs apart), which the page's own
requests then carry. A request with neither gets 403: the results it shows are each client's
private observations, written owner-only, and other local users can reach the loopback port.

What it serves comes from a *source*: a live :class:`~fedxab.dashboard.state.DashboardState`
(``fedxab run --dashboard``, ``fedxab server --dashboard``) or a :class:`ResultsSource`, which
reads a results file and the privacy ledger it names, and reads them again when they change
(``fedxab dashboard DIR``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import secrets
import threading
from http.cookies import CookieError, SimpleCookie
from importlib import resources
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs

from fedxab.dashboard.state import DashboardState, state_from_results
from fedxab.errors import FedxabError
from fedxab.monitoring.endpoint import DEFAULT_HOST, HttpEndpoint

__all__ = ["DashboardPortError", "DashboardServer", "ResultsSource", "Source"]

_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}


class DashboardPortError(FedxabError, OSError):
    """The dashboard cannot listen where asked (port in use, not allowed, bad host)."""


class Source(Protocol):
    """What a dashboard shows: a state's snapshot and one client's detail."""

    def snapshot(self, run: int | None = None) -> dict[str, Any]: ...

    def client(self, m: int, run: int | None = None) -> dict[str, Any]: ...


class ResultsSource:
    """A results file (``results.json``, or a directory holding one) as a dashboard source,
    read again whenever its modification time (or the ledger's) changes. ``ledger``: the
    privacy ledger whose data owners' lifetime spend the page shows; by default the one the
    results name (their privacy block's ``ledger``), if that file exists."""

    def __init__(self, path: str | Path, ledger: str | Path | None = None) -> None:
        from fedxab.results import load_results

        path = Path(path)
        self.path = path / "results.json" if path.is_dir() else path
        self._load = load_results
        self.ledger = None if ledger is None else Path(ledger)
        if self.ledger is not None and not self.ledger.is_file():
            raise FedxabError(f"--ledger: {self.ledger}: no such ledger file")
        self._results: Any = None
        self._results_stamp: int | None = None
        self._ledger_stamp: int | None = None
        self._state: DashboardState | None = None
        self._lock = threading.Lock()
        self.state()  # a missing or malformed file is an error now, not on the first page view

    def state(self) -> DashboardState:
        """The dashboard of the file as it is now (built again only if it or the ledger
        changed since the last look)."""
        with self._lock:
            try:
                stamp = self.path.stat().st_mtime_ns
            except FileNotFoundError:
                raise FedxabError(
                    f"dashboard: no results file at {self.path}; give the directory a "
                    "`fedxab run` wrote (its run.output) or its results.json"
                ) from None
            if self._results is None or stamp != self._results_stamp:
                self._results, self._results_stamp, self._state = self._load(self.path), stamp, None
            ledger = self.ledger or _named_ledger(self._results)
            ledger_stamp = None if ledger is None else ledger.stat().st_mtime_ns
            if self._state is None or ledger_stamp != self._ledger_stamp:
                self._state = state_from_results(self._results, ledger)
                self._ledger_stamp = ledger_stamp
            return self._state

    def snapshot(self, run: int | None = None) -> dict[str, Any]:
        return self.state().snapshot(run)

    def client(self, m: int, run: int | None = None) -> dict[str, Any]:
        return self.state().client(m, run)


def _named_ledger(results: Any) -> Path | None:
    """The ledger file the results' runs name, if one exists (an in-memory ledger: None)."""
    for record in results.runs:
        where = (record.privacy or {}).get("ledger")
        if where is not None and Path(where).is_file():
            return Path(where)
    return None


def _json_safe(value: Any) -> Any:
    """``value`` with every non-finite float as None (JSON has no NaN or infinity)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _assets() -> dict[str, tuple[bytes, str]]:
    """Every file of the page (read once): name -> (bytes, content type)."""
    folder = resources.files("fedxab.dashboard") / "static"
    return {
        item.name: (item.read_bytes(), _TYPES.get(Path(item.name).suffix, "text/plain"))
        for item in folder.iterdir()
        if item.is_file()
    }


def _cookie_token(environ: dict[str, Any], name: str) -> str | None:
    """The value of cookie ``name`` in the request, if any (a malformed header: none)."""
    try:
        jar = SimpleCookie(environ.get("HTTP_COOKIE", ""))
    except CookieError:
        return None
    morsel = jar.get(name)
    return None if morsel is None else morsel.value


def _app(source: Source, token: str, cookie: str) -> Any:
    assets = _assets()
    expected = token.encode()

    def allowed(given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), expected)

    def reply(
        start_response: Any, status: str, body: bytes, kind: str, set_cookie: bool = False
    ) -> list[bytes]:
        headers = [
            ("Content-Type", f"{kind}; charset=utf-8"),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
        ]
        if set_cookie:
            headers.append(("Set-Cookie", f"{cookie}={token}; Path=/; HttpOnly; SameSite=Strict"))
        start_response(status, headers)
        return [body]

    def as_json(start_response: Any, status: str, value: Any) -> list[bytes]:
        body = json.dumps(_json_safe(value), allow_nan=False, separators=(",", ":")).encode()
        return reply(start_response, status, body, "application/json")

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        query = {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        by_query = allowed(query.get("token"))
        if not (by_query or allowed(_cookie_token(environ, cookie))):
            body = (
                b"403 forbidden: this fedxab dashboard needs its access token; open the URL "
                b"fedxab printed (it ends with ?token=...)\n"
            )
            return reply(start_response, "403 Forbidden", body, "text/plain")
        if path in ("/", "/index.html"):
            return reply(start_response, "200 OK", *assets["index.html"], set_cookie=by_query)
        if path.startswith("/static/") and path[len("/static/") :] in assets:
            return reply(start_response, "200 OK", *assets[path[len("/static/") :]])
        if path in ("/api/state", "/api/client"):
            try:
                run = int(query["run"]) if "run" in query else None
                if path == "/api/state":
                    return as_json(start_response, "200 OK", source.snapshot(run))
                return as_json(start_response, "200 OK", source.client(int(query["id"]), run))
            except (KeyError, ValueError, IndexError) as exc:
                text = str(exc.args[0]) if exc.args else "bad request"
                return as_json(start_response, "404 Not Found", {"error": text})
            except FedxabError as exc:
                return as_json(start_response, "503 Service Unavailable", {"error": str(exc)})
        body = b"not found: the fedxab dashboard serves /, /api/state and /api/client\n"
        return reply(start_response, "404 Not Found", body, "text/plain")

    return app


class DashboardServer(HttpEndpoint):
    """The dashboard of ``source`` at ``http://host:port/`` (loopback by default; port 0: a
    free one, see :attr:`~fedxab.monitoring.endpoint.HttpEndpoint.port`)."""

    what = "dashboard"
    path = "/"
    port_option = "--dashboard-port"
    host_option = "--dashboard-host"
    example_port = 8080
    error = DashboardPortError

    def __init__(
        self,
        source: Source,
        *,
        host: str = DEFAULT_HOST,
        port: int = 0,
        token: str | None = None,
    ) -> None:
        self.source = source
        self.token = secrets.token_urlsafe(24) if token is None else token
        """The access token every request needs (drawn for this server unless given)."""
        if not self.token or not self.token.replace("-", "").replace("_", "").isalnum():
            raise FedxabError("dashboard token: use letters, digits, '-' and '_' only")
        cookie = "fedxab_dashboard_" + hashlib.sha256(self.token.encode()).hexdigest()[:12]
        super().__init__(_app(source, self.token, cookie), host=host, port=port)

    @property
    def base_url(self) -> str:
        """``http://host:port/`` without the token."""
        return super().url

    @property
    def url(self) -> str:
        """The page's URL with its token: what to open (and what is printed)."""
        return f"{self.base_url}?token={self.token}"
