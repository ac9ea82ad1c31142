"""A client's withdrawal (DESIGN.md, Privacy: a client refusing a release drops out of the run)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fedxab.algorithms.fedpne import FedPNEClient, FedPNEServer
from fedxab.algorithms.protocol import Finished, Withdrawal
from fedxab.algorithms.registry import decode_report
from fedxab.broker.codec import packb, unpackb
from fedxab.errors import ProtocolError

DOMAIN = [[0.0, 1.0]]


def _server(n_clients: int = 3) -> FedPNEServer:
    return FedPNEServer(DOMAIN, n_clients=n_clients, budget=500, seed=0)


def _report(server, client, broadcast):
    """Client ``client``'s report for ``broadcast``: a fresh client's answer to its nodes,
    numbered with its phase (a client answers phases in order from 1; the server checks what
    a report says, not how it was made)."""
    first = dataclasses.replace(broadcast, phase=1)
    report = FedPNEClient(client, DOMAIN, budget=500, seed=0).answer(
        first, lambda X: np.full(len(X), 0.5)
    )
    return dataclasses.replace(report, phase=broadcast.phase)


def test_a_withdrawal_round_trips_and_bad_fields_are_named():
    w = Withdrawal(phase=2, client=1, used=40, reason="over budget")
    assert Withdrawal.from_wire(unpackb(packb(w.to_wire()))) == w
    assert decode_report("dpfedpne", w.to_wire()) == w
    bad = w.to_wire() | {"used": -1}
    with pytest.raises(ProtocolError, match="'used'"):
        Withdrawal.from_wire(bad)
    with pytest.raises(ProtocolError, match="'reason'"):
        Withdrawal.from_wire(w.to_wire() | {"reason": 3})


def test_algorithms_whose_clients_never_withdraw_refuse_a_withdrawal():
    w = Withdrawal(phase=1, client=0, used=0, reason="x")
    with pytest.raises(ProtocolError, match="does not accept withdrawals"):
        decode_report("pfpne", w.to_wire())


def test_the_barrier_stops_waiting_for_a_withdrawn_client_in_this_and_later_phases():
    server = _server()
    broadcast = server.start()
    w = Withdrawal(broadcast.phase, 2, 0, "over budget")
    assert server.receive(2, w)
    assert not server.receive(2, w)  # redelivered: no change
    for m in (0, 1):
        assert not server.ready()
        server.receive(m, _report(server, m, broadcast))
    assert server.ready()
    nxt = server.close_phase()
    assert server.history[-1].reports == 2
    assert server.withdrawn == {2: w}
    # the next phase waits for clients 0 and 1 only; client 2 may not come back
    with pytest.raises(ProtocolError, match="withdrew"):
        server.receive(2, _report(server, 2, nxt))
    for m in (0, 1):
        server.receive(m, _report(server, m, nxt))
    assert server.ready()


def test_a_client_cannot_withdraw_after_reporting_the_phase():
    server = _server()
    broadcast = server.start()
    server.receive(0, _report(server, 0, broadcast))
    with pytest.raises(ProtocolError, match="after reporting"):
        server.receive(0, Withdrawal(broadcast.phase, 0, 0, "x"))


def test_the_run_finishes_when_every_client_has_withdrawn():
    server = _server(2)
    broadcast = server.start()
    for m in (0, 1):
        server.receive(m, Withdrawal(broadcast.phase, m, 0, "over budget"))
    assert server.ready()
    finished = server.close_phase()
    assert isinstance(finished, Finished)
    assert finished.reason == "withdrawn"
