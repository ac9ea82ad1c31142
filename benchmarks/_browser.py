"""Headless Chromium driven over the DevTools protocol: load a page, read it, screenshot it.

Used by the dashboard's browser test and by ``bench_dashboard.py``. :class:`Chromium` starts
the system's ``chromium`` (the Debian package) on a loopback debugging port with a throwaway
profile, talks to its one page over a WebSocket, and stops it on :meth:`Chromium.close`.
:func:`chromium_binary` is None where no Chromium is installed (callers skip, saying so).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from websockets.sync.client import connect


def chromium_binary() -> str | None:
    """The installed Chromium, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    """One headless Chromium with one page of ``width`` x ``height`` CSS pixels."""

    def __init__(self, width: int = 1280, height: int = 800, start_timeout_s: float = 30) -> None:
        binary = chromium_binary()
        if binary is None:
            raise FileNotFoundError("no chromium on PATH (Debian package: chromium)")
        self._profile = tempfile.TemporaryDirectory(
            prefix="fedxab-chromium-", ignore_cleanup_errors=True
        )
        self._proc = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--no-first-run",
                "--disable-extensions",
                "--disable-background-networking",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                f"--user-data-dir={self._profile.name}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its helper processes go with it (_stop)
        )
        self._ids = itertools.count(1)
        self._stack = contextlib.ExitStack()
        try:
            port = self._debugging_port(start_timeout_s)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                targets = json.load(r)
            page = next(t for t in targets if t["type"] == "page")
            self._ws = self._stack.enter_context(
                connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=10)
            )
            self.call(
                "Emulation.setDeviceMetricsOverride",
                width=width,
                height=height,
                deviceScaleFactor=1,
                mobile=False,
            )
        except BaseException:
            self.close()
            raise

    def _debugging_port(self, timeout_s: float) -> int:
        """The port Chromium chose (written to its profile once it listens)."""
        marker = Path(self._profile.name) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self._proc.returncode}")
            if marker.exists() and marker.read_text().strip():
                return int(marker.read_text().split()[0])
            time.sleep(0.05)
        raise TimeoutError(f"chromium did not open its debugging port in {timeout_s} s")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result (events on the way are skipped)."""
        ident = next(self._ids)
        self._ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv(timeout=60))
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str, ready: str, timeout_s: float = 30) -> Any:
        """Navigate to ``url`` and wait until the expression ``ready`` is truthy (one that
        throws, e.g. while the new document has no body yet, counts as false); its value."""
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.evaluate(
                f"(() => {{ try {{ return {ready}; }} catch {{ return null; }} }})()"
            )
            if value:
                return value
            time.sleep(0.02)
        raise TimeoutError(f"{url}: {ready} still false after {timeout_s} s")

    def screenshot(self, path: str | Path) -> Path:
        """A PNG of the page's viewport."""
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path = Path(path)
        path.write_bytes(base64.b64decode(data))
        return path

    def _stop(self) -> None:
        """Stop Chromium and every helper process it started, then remove the profile."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, sig)
            try:
                self._proc.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue
        self._profile.cleanup()

    def close(self) -> None:
        self._stack.close()
        self._stop()

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
