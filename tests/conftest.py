"""Fixtures every test shares."""

from __future__ import annotations

import signal

import pytest

from fedxab.privacy.run_ledger import LEDGER_HOME_VAR

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    # A shell starts a background job with SIGINT ignored, and its children inherit that: the
    # tests that stop `fedxab` processes with Ctrl-C (SIGINT) need it to reach them.
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _private_ledger_home(tmp_path_factory, monkeypatch):
    """The default lifetime ledger of each test in a directory of its own (and the processes it
    starts, which inherit the environment): no test writes to the user's home."""
    monkeypatch.setenv(LEDGER_HOME_VAR, str(tmp_path_factory.mktemp("fedxab-home")))
