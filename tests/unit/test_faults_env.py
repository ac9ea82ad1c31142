"""FEDXAB_FAULTS: transport faults for separate processes, parsed strictly (broker factory)."""

from __future__ import annotations

import asyncio

import pytest

from fedxab.broker.factory import FAULTS_ENV, faults_from_env, make_broker, parse_faults
from fedxab.broker.faults import FaultyBroker
from fedxab.broker.memory import MemoryBroker
from fedxab.errors import ConfigError


def test_a_group_gives_faulty_broker_arguments():
    assert parse_faults("duplicate=0.05, drop=0.02,reorder_window=3,seed=7") == [
        {"duplicate": 0.05, "drop": 0.02, "reorder_window": 3, "seed": 7}
    ]
    assert parse_faults("kinds=report+control,reorder_delay_s=0.01;kinds=ledger,duplicate=1") == [
        {"kinds": ("report", "control"), "reorder_delay_s": 0.01},
        {"kinds": ("ledger",), "duplicate": 1.0},
    ]


@pytest.mark.parametrize("spec", ["", "   "])
def test_an_empty_value_means_no_faults(spec):
    assert parse_faults(spec) == []
    inner = MemoryBroker()
    assert faults_from_env(inner, {FAULTS_ENV: spec}) is inner
    assert faults_from_env(inner, {}) is inner


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("duplicate=1.5", r"duplicate must be a probability in \[0, 1\], got '1.5'"),
        ("drop=-0.1", "drop must be a probability"),
        ("drop=nan", "drop must be a probability"),
        ("drop=lots", "drop must be a probability"),
        ("reorder_window=0", "reorder_window must be an integer >= 1, got '0'"),
        ("reorder_window=2.5", "reorder_window must be an integer >= 1"),
        ("seed=-1", "seed must be an integer >= 0"),
        ("reorder_delay_s=inf", "reorder_delay_s must be a number of seconds >= 0"),
        ("kinds=report+reports", "kinds must be topic kinds joined by '\\+'"),
        ("kinds=report+report", "kinds must be topic kinds"),
        ("kinds=", "kinds must be topic kinds"),
        ("duplicate", "expected key=value, got 'duplicate'"),
        ("=0.1", "expected key=value"),
        ("dup=0.1", r"unknown key 'dup' \(allowed: duplicate, drop, reorder_window"),
        ("seed=1,seed=2", "seed given twice"),
        ("seed=1;", "group 2 .*empty group"),
        ("seed=1;;drop=0.1", "group 2 .*empty group"),
    ],
)
def test_a_bad_value_is_an_error_naming_the_variable(spec, match):
    with pytest.raises(ConfigError, match=match) as info:
        parse_faults(spec)
    assert info.value.field == FAULTS_ENV
    assert str(info.value).startswith(f"{FAULTS_ENV}: group ")
    with pytest.raises(ConfigError, match=FAULTS_ENV):
        faults_from_env(MemoryBroker(), {FAULTS_ENV: spec})


def test_each_group_wraps_the_broker_once_more():
    inner = MemoryBroker()
    spec = "kinds=report,drop=1,seed=3;kinds=ledger+control,duplicate=0.5,reorder_window=4"
    outer = faults_from_env(inner, {FAULTS_ENV: spec})
    assert isinstance(outer, FaultyBroker) and isinstance(outer.inner, FaultyBroker)
    assert outer.inner.inner is inner
    assert (outer.kinds, outer.duplicate, outer.reorder_window) == (("ledger", "control"), 0.5, 4)
    assert (outer.inner.kinds, outer.inner.drop) == (("report",), 1.0)


def test_make_broker_reads_the_variable(monkeypatch):
    monkeypatch.delenv(FAULTS_ENV, raising=False)
    assert type(make_broker("memory://")) is MemoryBroker
    assert make_broker("inprocess://") is None
    monkeypatch.setenv(FAULTS_ENV, "kinds=report,drop=1")
    broker = make_broker("memory://")
    assert isinstance(broker, FaultyBroker) and type(broker.inner) is MemoryBroker
    assert make_broker("inprocess://") is None  # no broker, nothing to disturb
    monkeypatch.setenv(FAULTS_ENV, "drop=2")
    with pytest.raises(ConfigError, match=f"{FAULTS_ENV}: group 1 .*drop"):
        make_broker("memory://")


def test_the_faults_reach_the_records(monkeypatch):
    """Through make_broker: every report dropped, every ledger record doubled, control intact."""
    monkeypatch.setenv(FAULTS_ENV, "kinds=report,drop=1;kinds=ledger,duplicate=1")
    broker = make_broker("memory://")

    async def main():
        async with broker:
            for kind in ("report", "ledger", "control"):
                await broker.publish(f"ns.run.{kind}", "0", kind.encode())
            counts = {}
            for kind in ("report", "ledger", "control"):
                sub = broker.subscribe(f"ns.run.{kind}", None)
                counts[kind] = sum((await sub.end_offsets()).values())
                await sub.close()
            return counts

    assert asyncio.run(main()) == {"report": 0, "ledger": 2, "control": 1}


def test_stop_logs_what_was_injected(caplog):
    broker = FaultyBroker(MemoryBroker(), kinds=("report",), duplicate=1.0, seed=1)

    async def main():
        async with broker:
            await broker.publish("ns.run.report", "0", b"x")
            await broker.publish("ns.run.control", "0", b"y")  # not disturbed

    with caplog.at_level("WARNING", logger="fedxab.broker.faults"):
        asyncio.run(main())
    assert broker.injected == {"duplicated": 1, "dropped": 0, "reordered": 0}
    assert caplog.messages == [
        "faults injected on report topics: 1 duplicated, 0 dropped, 0 reordered"
    ]
