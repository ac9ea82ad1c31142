"""fedxab.monitoring: the metric set (names, labels, values) and the /metrics endpoint.

The values are checked through the Prometheus text format, parsed back with prometheus-client's
own parser, as a scraper sees them.
"""

from __future__ import annotations

import math
import re
import socket
import urllib.error
import urllib.request
from types import SimpleNamespace

import numpy as np
import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fedxab.errors import FedxabError
from fedxab.monitoring.endpoint import MetricsEndpoint, MetricsPortError
from fedxab.monitoring.metrics import (
    EPSILON_BUCKETS,
    METRICS,
    REPORT_OUTCOMES,
    FederationMetrics,
)

NAME = re.compile(r"^fedxab_[a-z][a-z0-9_]*$")
BOUNDED_LABELS = {
    "version",
    "python",
    "algorithm",
    "objective",
    "transport",
    "role",
    "run_id",
    "direction",
    "outcome",
    "kind",
    "le",
    "topic",
    "reason",
}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, from the Prometheus text format."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(text: str, name: str, **labels: str) -> float:
    return samples(text)[(name, tuple(sorted(labels.items())))]


def _start(metrics: FederationMetrics, **kw) -> None:
    args = {
        "run_id": "fedpne-abc-s0",
        "algorithm": "fedpne",
        "objective": "garland",
        "transport": "inprocess",
        "clients": 4,
        "budget": 100,
    }
    metrics.start_run(**(args | kw))


def _phase(phase: int, up: int = 4, down: int = 4, bytes_up: int = 40, bytes_down: int = 80):
    return SimpleNamespace(
        phase=phase, messages_up=up, messages_down=down, bytes_up=bytes_up, bytes_down=bytes_down
    )


def test_names_follow_the_prometheus_conventions_and_labels_are_bounded():
    exported = FederationMetrics.exported_samples()
    families = {}
    for family in FederationMetrics().registry.collect():
        families[family.name] = family.type
    assert exported
    for name, labels in exported.items():
        assert NAME.match(name), name
        assert labels <= BOUNDED_LABELS, f"{name}: unbounded label(s) {labels - BOUNDED_LABELS}"
        assert "client" not in labels and "client_id" not in labels
    for name, kind in families.items():
        if kind == "counter":
            assert f"{name}_total" in exported, name
        if kind in ("histogram", "gaugehistogram"):
            assert f"{name}_bucket" in exported
    # base units in the names that carry one
    assert "fedxab_phase_duration_seconds_bucket" in exported
    assert "fedxab_message_bytes_total" in exported
    # the metric set of DESIGN.md / issue 7
    for name in (
        "fedxab_build_info",
        "fedxab_run_info",
        "fedxab_cumulative_regret",
        "fedxab_local_cumulative_regret",
        "fedxab_simple_regret",
        "fedxab_global_simple_regret",
        "fedxab_observed_best_mean",
        "fedxab_phases_total",
        "fedxab_phase_duration_seconds_count",
        "fedxab_messages_total",
        "fedxab_message_bytes_total",
        "fedxab_reports_total",
        "fedxab_clients_active",
        "fedxab_epsilon_max",
        "fedxab_client_epsilon_bucket",
        "fedxab_clients_over_budget",
    ):
        assert name in exported, name
    assert exported["fedxab_run_info"] == {"algorithm", "objective", "transport", "role", "run_id"}
    assert exported["fedxab_messages_total"] == {"direction"}
    assert exported["fedxab_reports_total"] == {"outcome"}
    # every family has its help text
    for family in FederationMetrics().registry.collect():
        assert family.documentation == METRICS[family.name]


def test_each_instance_has_its_own_registry_never_the_default_one():
    before = {s.name for f in prometheus_client.REGISTRY.collect() for s in f.samples}
    a, b = FederationMetrics(), FederationMetrics()  # no "Duplicated timeseries" error
    _start(a)
    a.on_phase(_phase(0), 0.01)
    assert value(a.exposition(), "fedxab_phases_total") == 1
    assert value(b.exposition(), "fedxab_phases_total") == 0
    after = {s.name for f in prometheus_client.REGISTRY.collect() for s in f.samples}
    assert not any(n.startswith("fedxab_") for n in after - before)


def test_build_and_run_info():
    from fedxab import __version__

    metrics = FederationMetrics(role="server")
    _start(metrics, transport="memory")
    _start(metrics, run_id="fedpne-abc-s1", transport="memory")
    text = metrics.exposition()
    assert value(text, "fedxab_build_info", version=__version__, python=_python()) == 1
    runs = [k for k in samples(text) if k[0] == "fedxab_run_info"]
    assert runs == [
        (
            "fedxab_run_info",
            (
                ("algorithm", "fedpne"),
                ("objective", "garland"),
                ("role", "server"),
                ("run_id", "fedpne-abc-s1"),  # one series: the run in progress
                ("transport", "memory"),
            ),
        )
    ]
    assert value(text, "fedxab_runs_started_total") == 2
    assert value(text, "fedxab_run_running") == 1
    with pytest.raises(ValueError, match="role"):
        FederationMetrics(role="observer")


def _python() -> str:
    import platform

    return platform.python_version()


def test_phases_messages_reports_and_regret_add_up():
    metrics = FederationMetrics()
    _start(metrics)
    metrics.on_phase(_phase(0), 0.002, active=4)
    metrics.on_phase(_phase(1, up=3, bytes_up=30), 0.3, active=3)
    metrics.on_phase(_phase(2))  # replayed from a checkpoint: no duration
    metrics.on_report("accepted", 3)
    metrics.on_report("duplicate")
    metrics.on_report("late", 0)
    metrics.on_control("telemetry")
    metrics.on_control("duplicate")  # the server's count of a second join or leave
    metrics.on_control("unknown-kind")  # ignored, never a new label value
    metrics.on_evaluations(12)
    metrics.on_regret(t=3, cumulative=1.5, local=0.5, global_simple=0.1)
    text = metrics.exposition()
    assert value(text, "fedxab_phases_total") == 3
    assert value(text, "fedxab_phase") == 2
    assert value(text, "fedxab_messages_total", direction="up") == 11
    assert value(text, "fedxab_messages_total", direction="down") == 12
    assert value(text, "fedxab_message_bytes_total", direction="up") == 110
    assert value(text, "fedxab_message_bytes_total", direction="down") == 240
    assert value(text, "fedxab_phase_duration_seconds_count") == 2
    assert value(text, "fedxab_phase_duration_seconds_sum") == pytest.approx(0.302)
    assert value(text, "fedxab_phase_duration_seconds_bucket", le="0.0025") == 1
    assert value(text, "fedxab_clients_active") == 3
    for outcome, n in zip(REPORT_OUTCOMES, (3, 1, 0, 0), strict=True):
        assert value(text, "fedxab_reports_total", outcome=outcome) == n
    assert value(text, "fedxab_control_messages_total", kind="telemetry") == 1
    assert value(text, "fedxab_control_messages_total", kind="duplicate") == 1
    assert value(text, "fedxab_evaluations_total") == 12
    assert value(text, "fedxab_round") == 3
    assert value(text, "fedxab_cumulative_regret") == 1.5
    assert value(text, "fedxab_local_cumulative_regret") == 0.5
    assert value(text, "fedxab_global_simple_regret") == 0.1
    assert math.isnan(value(text, "fedxab_local_simple_regret"))  # never set
    assert math.isnan(value(text, "fedxab_simple_regret"))  # only at the end


def test_unknown_optimum_gives_nan_regret_and_the_observed_values():
    metrics = FederationMetrics()
    _start(metrics, regret_known=False, local_regret_known=False)
    text = metrics.exposition()
    assert math.isnan(value(text, "fedxab_cumulative_regret"))
    assert math.isnan(value(text, "fedxab_local_cumulative_regret"))
    assert math.isnan(value(text, "fedxab_observed_best_mean"))  # no evaluation yet
    metrics.on_observed(-0.25)
    assert value(metrics.exposition(), "fedxab_observed_best_mean") == -0.25
    _start(metrics)  # a new run starts over
    assert math.isnan(value(metrics.exposition(), "fedxab_observed_best_mean"))


def test_privacy_families_exist_only_for_a_private_run_and_describe_the_clients():
    metrics = FederationMetrics()
    _start(metrics)
    assert not any(k[0].startswith("fedxab_epsilon") for k in samples(metrics.exposition()))
    metrics.on_privacy({0: 0.05, 1: 0.5}, budget_epsilon=1.0, delta=1e-5)
    metrics.on_privacy({2: 1.5, 3: 0.0}, budget_epsilon=1.0, delta=1e-5, withdrawn=[2])
    text = metrics.exposition()
    assert value(text, "fedxab_epsilon_max") == 1.5
    assert value(text, "fedxab_epsilon_budget") == 1.0
    assert value(text, "fedxab_privacy_delta") == 1e-5
    assert value(text, "fedxab_client_epsilon_gcount") == 4  # merged: four clients
    assert value(text, "fedxab_client_epsilon_gsum") == math.fsum([0.05, 0.5, 1.5, 0.0])
    counts = [value(text, "fedxab_client_epsilon_bucket", le=_le(b)) for b in EPSILON_BUCKETS]
    assert counts == [sum(e <= b for e in (0.05, 0.5, 1.5, 0.0)) for b in EPSILON_BUCKETS]
    assert value(text, "fedxab_clients_over_budget") == 1
    assert value(text, "fedxab_clients_withdrawn") == 1
    assert metrics.epsilon == {0: 0.05, 1: 0.5, 2: 1.5, 3: 0.0}
    _start(metrics, run_id="next")  # a new run forgets the last one's privacy
    assert metrics.epsilon == {}


def _le(bound: float) -> str:
    return "+Inf" if bound == math.inf else prometheus_client.utils.floatToGoString(bound)


def test_privacy_due_waits_for_the_interval():
    metrics = FederationMetrics(privacy_interval_s=3600)
    _start(metrics)
    assert not metrics.privacy_due()
    assert FederationMetrics(privacy_interval_s=0).privacy_due()


def test_end_run_sets_every_gauge_from_the_record():
    metrics = FederationMetrics()
    _start(metrics)
    metrics.on_regret(t=50, cumulative=1.0, local=0.5)
    metrics.on_privacy({0: 0.1}, budget_epsilon=None, delta=1e-3)
    record = SimpleNamespace(
        final_cumulative_regret=12.345678901234567,
        final_local_cumulative_regret=None,
        final_global_simple_regret=0.0125,
        final_local_simple_regret=None,
        simple_regret=1e-7,
        rounds=np.array([1, 50, 100]),
        privacy={
            "epsilon": [0.1, 0.30000000000000004, 0.2, 0.25],
            "budget_epsilon": None,
            "delta": 1e-3,
            "withdrawn": {"1": 4},
        },
        clients=tuple(SimpleNamespace(best_value=v) for v in (0.5, None, 0.75)),
    )
    metrics.end_run(record)
    text = metrics.exposition()
    assert value(text, "fedxab_cumulative_regret") == 12.345678901234567  # exact round trip
    assert math.isnan(value(text, "fedxab_local_cumulative_regret"))
    assert value(text, "fedxab_global_simple_regret") == 0.0125
    assert value(text, "fedxab_simple_regret") == 1e-7
    assert value(text, "fedxab_observed_best_mean") == 0.625  # over the clients that evaluated
    assert value(text, "fedxab_round") == 100
    assert value(text, "fedxab_epsilon_max") == 0.30000000000000004
    assert math.isnan(value(text, "fedxab_epsilon_budget"))
    assert value(text, "fedxab_client_epsilon_gcount") == 4
    assert value(text, "fedxab_clients_over_budget") == 0  # no budget: nobody over it
    assert value(text, "fedxab_clients_withdrawn") == 1
    assert value(text, "fedxab_run_running") == 0
    assert value(text, "fedxab_runs_total", outcome="finished") == 1
    metrics.fail_run()
    assert value(metrics.exposition(), "fedxab_runs_total", outcome="failed") == 1


# ---------------------------------------------------------------------------------- endpoint
def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_endpoint_serves_metrics_on_a_free_loopback_port():
    metrics = FederationMetrics()
    _start(metrics)
    with MetricsEndpoint(metrics.registry, port=0) as endpoint:
        assert endpoint.host == "127.0.0.1"
        assert endpoint.port > 0
        assert endpoint.url == f"http://127.0.0.1:{endpoint.port}/metrics"
        status, kind, text = _get(endpoint.url)
        assert status == 200 and kind.startswith("text/plain")
        assert value(text, "fedxab_run_running") == 1
        metrics.on_phase(_phase(0), 0.01)  # a scrape sees the registry as it is now
        assert value(_get(endpoint.url)[2], "fedxab_phases_total") == 1
        assert _get(f"http://127.0.0.1:{endpoint.port}/")[0] == 200
        assert _get(f"http://127.0.0.1:{endpoint.port}/other")[0] == 404
        port = endpoint.port
    # closed: the port can be listened on again (as a server does, with SO_REUSEADDR: the
    # scrapes' connections may linger in TIME_WAIT)
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()


def test_a_port_in_use_is_a_clear_error():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(MetricsPortError) as caught:
            MetricsEndpoint(FederationMetrics().registry, port=port)
    message = str(caught.value)
    assert isinstance(caught.value, FedxabError)
    assert f"port {port} is already in use" in message
    assert "another --metrics-port" in message


def test_bad_ports_and_hosts_are_clear_errors():
    registry = FederationMetrics().registry
    with pytest.raises(MetricsPortError, match="not a port number"):
        MetricsEndpoint(registry, port=70000)
    with pytest.raises(MetricsPortError, match="--metrics-host"):
        MetricsEndpoint(registry, host="no-such-host.invalid", port=0)
