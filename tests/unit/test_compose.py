"""compose.yaml, the Dockerfile and deploy/ (Prometheus, Grafana) are consistent with each other.

No Docker engine is needed: the files are parsed and cross-checked (services present, host paths
that exist, ports on 127.0.0.1 only, KRaft Kafka, scrape targets on the ports the fedxab commands
listen on, a Grafana dashboard that uses the provisioned datasource and whose PromQL names only
metrics that fedxab.monitoring.metrics exports).
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD_DIR_IN_CONTAINER = "/var/lib/grafana/dashboards"
FEDXAB_COMMANDS = ("server", "client")


def _load_yaml(path: Path) -> Any:
    assert path.is_file(), f"{path.relative_to(ROOT)} is missing"
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = _load_yaml(ROOT / "compose.yaml")
    assert isinstance(data, dict)
    assert "version" not in data, "the Compose spec has no `version:` key"
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}


def _command(service: dict[str, Any]) -> list[str]:
    command = service.get("command") or []
    return command.split() if isinstance(command, str) else [str(part) for part in command]


def _option(command: list[str], name: str) -> str:
    assert name in command, f"{name} missing from {command}"
    return command[command.index(name) + 1]


def _fedxab_services(services: dict[str, dict[str, Any]], role: str) -> dict[str, list[str]]:
    """The services that run ``fedxab <role>``, with their commands."""
    commands = {name: _command(service) for name, service in services.items()}
    return {name: cmd for name, cmd in commands.items() if cmd and cmd[0] == role}


def _bind_mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(host source, container target) of every bind mount (a source starting with . or /)."""
    mounts = []
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        else:
            source, target = volume.get("source", ""), volume["target"]
        if source.startswith((".", "/")):
            mounts.append((source, target))
    return mounts


def _published_ports(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(host ip, host port) of every published port; host ip is "" when none is given."""
    ports = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            ports.append((str(port.get("host_ip", "")), str(port.get("published", ""))))
            continue
        parts = str(port).split(":")
        if len(parts) == 3:
            ports.append((parts[0], parts[1]))
        else:
            ports.append(("", parts[0]))
    return ports


def test_services_exist(services: dict[str, dict[str, Any]]) -> None:
    assert {"kafka", "server", "client", "prometheus", "grafana"} <= set(services)


def test_bind_mounted_host_paths_exist(services: dict[str, dict[str, Any]]) -> None:
    checked = 0
    for name, service in services.items():
        for source, _target in _bind_mounts(service):
            assert source.startswith("./"), f"{name}: bind mount {source} must be repo-relative"
            assert (ROOT / source).exists(), f"{name}: {source} does not exist in the repository"
            checked += 1
    assert checked >= 5  # config x2, prometheus.yml, grafana provisioning and dashboards


def test_named_volumes_are_declared(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    declared = set(compose.get("volumes") or {})
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0] if isinstance(volume, str) else volume.get("source", "")
            if source and not source.startswith((".", "/")):
                assert source in declared, f"{name}: volume {source} is not declared"


def test_published_ports_bind_localhost_only(services: dict[str, dict[str, Any]]) -> None:
    published = {name: _published_ports(service) for name, service in services.items()}
    assert published["grafana"] and published["prometheus"]
    for name, ports in published.items():
        for host_ip, host_port in ports:
            assert host_ip == "127.0.0.1", f"{name}: port {host_port} binds {host_ip or 'all'}"
    assert ("127.0.0.1", "3000") in published["grafana"]
    assert ("127.0.0.1", "9090") in published["prometheus"]


def test_kafka_is_official_image_in_kraft_mode(services: dict[str, dict[str, Any]]) -> None:
    kafka = services["kafka"]
    image, _, tag = kafka["image"].partition(":")
    assert image == "apache/kafka"
    assert re.fullmatch(r"\d+\.\d+\.\d+", tag), f"pin a release tag, got {tag!r}"
    env = _environment(kafka)
    roles = env["KAFKA_PROCESS_ROLES"].split(",")
    assert "controller" in roles and "broker" in roles
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{env['KAFKA_NODE_ID']}@")
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert "CONTROLLER://" in env["KAFKA_LISTENERS"]
    assert "kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
    # The image refuses to start in KRaft mode without a cluster id (a base64 UUID).
    assert len(base64.urlsafe_b64decode(env["CLUSTER_ID"] + "==")) == 16
    for name, service in services.items():
        assert "zookeeper" not in name.lower()
        assert "zookeeper" not in str(service.get("image", "")).lower()
        assert not any(key.startswith("KAFKA_ZOOKEEPER") for key in _environment(service))


def test_kafka_healthcheck_uses_kafka_tools(services: dict[str, dict[str, Any]]) -> None:
    test = services["kafka"]["healthcheck"]["test"]
    text = test if isinstance(test, str) else " ".join(test)
    assert "kafka-topics.sh" in text or "kafka-broker-api-versions.sh" in text
    assert "localhost:9092" in text


def test_fedxab_services_use_the_compose_broker(services: dict[str, dict[str, Any]]) -> None:
    for role in FEDXAB_COMMANDS:
        found = _fedxab_services(services, role)
        assert role in found, f"the {role} service does not run `fedxab {role}`"
        for name, command in found.items():
            assert command[1] == "/config/run.toml"
            assert _option(command, "--broker") == "kafka://kafka:9092"
            depends = services[name]["depends_on"]
            assert depends["kafka"]["condition"] == "service_healthy"
            assert ("./examples/fedpne_garland.toml", "/config/run.toml") in _bind_mounts(
                services[name]
            )


def test_server_keeps_checkpoints_and_results_in_a_volume(
    services: dict[str, dict[str, Any]],
) -> None:
    server = services["server"]
    command = _command(server)
    assert _option(command, "--checkpoint").startswith("/data/")
    assert _option(command, "--output").startswith("/data/")
    targets = [v.split(":")[1] for v in server["volumes"] if isinstance(v, str)]
    assert "/data" in targets


def test_default_client_ids_match_the_mounted_config(services: dict[str, dict[str, Any]]) -> None:
    from fedxab.config import load_config

    client_ids = _option(_command(services["client"]), "--client-id")
    match = re.fullmatch(r"\$\{FEDXAB_CLIENT_IDS:-(\d+)-(\d+)\}", client_ids)
    assert match, f"--client-id should default through FEDXAB_CLIENT_IDS, got {client_ids}"
    first, last = int(match[1]), int(match[2])
    config = load_config(ROOT / "examples" / "fedpne_garland.toml")
    assert config.federation is not None
    assert (first, last) == (0, config.federation.clients - 1)


def test_every_option_in_a_command_is_an_option_of_that_fedxab_command(
    services: dict[str, dict[str, Any]],
) -> None:
    import typer.main

    from fedxab.cli import app

    cli = typer.main.get_command(app)
    for role in FEDXAB_COMMANDS:
        known = {opt for param in cli.commands[role].params for opt in param.opts}
        for name, command in _fedxab_services(services, role).items():
            used = {word for word in command if word.startswith("--")}
            assert used <= known, f"{name}: `fedxab {role}` has no option {used - known}"


# The metrics endpoints: `--metrics-port` of `fedxab server` and `fedxab client`.
METRICS_PORTS = {"server": "9100", "client": "9101"}


def test_fedxab_services_serve_metrics_on_the_scraped_ports(
    services: dict[str, dict[str, Any]],
) -> None:
    for role in FEDXAB_COMMANDS:
        for name, command in _fedxab_services(services, role).items():
            assert _option(command, "--metrics-port") == METRICS_PORTS[role], name
            # inside a container the loopback default would be unreachable for Prometheus
            assert _option(command, "--metrics-host") == "0.0.0.0", name
            assert float(_option(command, "--serve-after")) > 0, name
            # reachable on the compose network only, never published on the host
            assert not services[name].get("ports"), f"{name} publishes ports"


def test_prometheus_scrapes_every_metrics_port(services: dict[str, dict[str, Any]]) -> None:
    prometheus = _load_yaml(ROOT / "deploy" / "prometheus.yml")
    assert prometheus["global"]["scrape_interval"] == "5s"
    jobs = {
        job["job_name"]: {t for sc in job["static_configs"] for t in sc["targets"]}
        for job in prometheus["scrape_configs"]
    }
    for role, job in (("server", "fedxab-server"), ("client", "fedxab-clients")):
        for name in _fedxab_services(services, role):
            target = f"{name}:{METRICS_PORTS[role]}"
            assert target in jobs[job], f"{job} does not scrape {target}"
    for job in prometheus["scrape_configs"]:
        assert job.get("metrics_path", "/metrics") == "/metrics"
    mounts = _bind_mounts(services["prometheus"])
    assert ("./deploy/prometheus.yml", "/etc/prometheus/prometheus.yml") in mounts


def test_grafana_provisioning_and_dashboard(services: dict[str, dict[str, Any]]) -> None:
    grafana = services["grafana"]
    assert _environment(grafana)["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    mounts = dict(_bind_mounts(grafana))
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"
    assert mounts["./deploy/grafana/dashboards"] == DASHBOARD_DIR_IN_CONTAINER

    datasources = _load_yaml(GRAFANA / "provisioning" / "datasources" / "prometheus.yml")
    (datasource,) = datasources["datasources"]
    assert datasource["type"] == "prometheus"
    assert datasource["url"] == "http://prometheus:9090"

    providers = _load_yaml(GRAFANA / "provisioning" / "dashboards" / "fedxab.yml")
    (provider,) = providers["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == DASHBOARD_DIR_IN_CONTAINER

    dashboard = json.loads((GRAFANA / "dashboards" / "fedxab.json").read_text(encoding="utf-8"))
    assert dashboard["uid"] == "fedxab"
    assert dashboard["title"] == "fedxab federation"
    assert dashboard["schemaVersion"] == 39
    assert dashboard["panels"]
    exprs = []
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": datasource["uid"]}
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"])
        assert panel["targets"]
        for target in panel["targets"]:
            assert target["refId"] and target["expr"]
            exprs.append(target["expr"])
    for metric in (
        "fedxab_cumulative_regret",
        "fedxab_phases_total",
        "rate(fedxab_messages_total[1m])",
        "rate(fedxab_reports_total[1m])",
    ):
        assert any(metric in expr for expr in exprs), f"no panel shows {metric}"


def test_dockerfile_installs_the_project(services: dict[str, dict[str, Any]]) -> None:
    lines = [
        line.strip()
        for line in (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert lines[0] == "FROM python:3.11-slim"
    assert any(re.search(r"\bpip install \.(\s|$)", line) for line in lines)
    assert any(line.startswith("COPY") and "pyproject.toml" in line for line in lines)
    assert any(line.startswith("COPY") and "fedxab" in line for line in lines)
    assert 'ENTRYPOINT ["fedxab"]' in lines
    for role in FEDXAB_COMMANDS:
        assert services[role]["build"] == "."


# --------------------------------------------------------------------------- dashboard PromQL
# PromQL words that are not metric names: functions, aggregations, keywords (the ones a
# dashboard may use; an unknown word fails the test, which also catches a misspelled function).
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "count_values", "group", "rate", "irate", "increase", "delta", "idelta", "deriv",
    "histogram_quantile", "clamp_min", "clamp_max", "abs", "ceil", "floor", "round", "time",
    "vector", "scalar", "label_replace", "absent", "changes", "resets", "max_over_time",
    "min_over_time", "avg_over_time", "last_over_time", "by", "without", "on", "ignoring",
    "group_left", "group_right", "bool", "and", "or", "unless", "offset",
}  # fmt: skip
TARGET_LABELS = {"job", "instance"}  # added by Prometheus to every scraped sample
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")


def _promql_parts(expr: str) -> tuple[list[str], list[tuple[str, set[str]]], set[str]]:
    """``(identifiers, [(metric, matcher label names)], grouping label names)`` of ``expr``."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    selectors = [
        (name, set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", body)))
        for name, body in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}", text)
    ]
    grouping = {
        label.strip() for _, labels in GROUPING.findall(text) for label in labels.split(",")
    } - {""}
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges, subqueries
    text = GROUPING.sub(r"\1", text)  # grouping label lists
    words = re.findall(r"(?<![\w.])[a-zA-Z_:][a-zA-Z0-9_:]*", text)
    return words, selectors, grouping


def test_promql_parts_are_found():
    words, selectors, grouping = _promql_parts(
        'histogram_quantile(0.95, sum by (job, le) (rate(fedxab_x_bucket{a="1",b=~"x|y"}[5m])))'
        " / on (instance) group_left(role) fedxab_info * 1e3"
    )
    assert [w for w in words if w not in PROMQL_WORDS] == ["fedxab_x_bucket", "fedxab_info"]
    assert selectors == [("fedxab_x_bucket", {"a", "b"})]
    assert grouping == {"job", "le", "instance", "role"}


def _dashboard() -> dict[str, Any]:
    return json.loads((GRAFANA / "dashboards" / "fedxab.json").read_text(encoding="utf-8"))


def test_dashboard_promql_uses_only_exported_metrics() -> None:
    from fedxab.monitoring.metrics import FederationMetrics

    exported = FederationMetrics.exported_samples()
    used: set[str] = set()
    for panel in _dashboard()["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            words, selectors, grouping = _promql_parts(expr)
            names = [w for w in words if w not in PROMQL_WORDS]
            assert names, f"panel {panel['title']!r}: no metric in {expr!r}"
            for name in names:
                assert name in exported, (
                    f"panel {panel['title']!r}: {name!r} is not exported by "
                    f"fedxab.monitoring.metrics ({expr!r})"
                )
            for name, labels in selectors:
                unknown = labels - exported[name] - TARGET_LABELS
                assert not unknown, f"{name} has no label {unknown} ({expr!r})"
            labels = set().union(*(exported[n] for n in names)) | TARGET_LABELS
            assert grouping <= labels, f"grouping by {grouping - labels} in {expr!r}"
            used.update(names)
    # the panels: regret, rounds, throughput, epsilon vs budget, over budget, bad reports
    for name in (
        "fedxab_cumulative_regret",
        "fedxab_local_cumulative_regret",
        "fedxab_phases_total",
        "fedxab_round",
        "fedxab_messages_total",
        "fedxab_message_bytes_total",
        "fedxab_evaluations_total",
        "fedxab_phase_duration_seconds_bucket",
        "fedxab_epsilon_max",
        "fedxab_epsilon_budget",
        "fedxab_client_epsilon_bucket",
        "fedxab_clients_over_budget",
        "fedxab_reports_total",
    ):
        assert name in used, f"no panel shows {name}"


GRAFANA_PANEL_TYPES = {"timeseries", "stat", "gauge", "bargauge", "table", "heatmap", "text"}


def test_dashboard_is_grafana_dashboard_json() -> None:
    dashboard = _dashboard()
    assert isinstance(dashboard["uid"], str) and dashboard["uid"]
    assert isinstance(dashboard["title"], str) and dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int)
    assert dashboard["time"]["from"] and dashboard["time"]["to"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(set(ids)) == len(ids), "panel ids must be unique"
    cells: set[tuple[int, int]] = set()
    for panel in dashboard["panels"]:
        assert panel["type"] in GRAFANA_PANEL_TYPES
        assert panel["title"]
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["w"] > 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        area = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                for y in range(pos["y"], pos["y"] + pos["h"])}  # fmt: skip
        assert not area & cells, f"panel {panel['title']!r} overlaps another"
        cells |= area
        refs = [target["refId"] for target in panel["targets"]]
        assert len(set(refs)) == len(refs), panel["title"]
        for target in panel["targets"]:
            assert target.get("datasource", panel["datasource"]) == panel["datasource"]
    titles = " | ".join(panel["title"].lower() for panel in dashboard["panels"])
    for words in ("regret", "phases", "per second", "epsilon against budget", "over budget",
                  "invalid and late"):  # fmt: skip
        assert words in titles, f"no panel about {words!r}"


def test_the_signing_keys_are_written_once_and_read_by_server_and_clients(
    services: dict[str, dict[str, Any]],
) -> None:
    """Kafka runs sign by default: the `keys` service writes the keys for the config's clients
    (and does nothing on a later start), the server and the client containers read them."""
    import typer.main

    from fedxab.cli import app
    from fedxab.config import load_config

    keys = _command(services["keys"])
    assert keys[:2] == ["keys", "generate"]
    generate = typer.main.get_command(app).commands["keys"].commands["generate"]
    known = {opt for param in generate.params for opt in param.opts}
    assert {word for word in keys if word.startswith("--")} <= known
    assert "--if-missing" in keys
    config = load_config(ROOT / "examples" / "fedpne_garland.toml")
    assert int(_option(keys, "--clients")) == config.federation.clients
    volume = _option(keys, "--out")
    for role in FEDXAB_COMMANDS:
        for name, command in _fedxab_services(services, role).items():
            assert _option(command, "--keys-dir") == volume, name
            mounts = [v for v in services[name]["volumes"] if v.split(":")[1] == volume]
            assert mounts and mounts[0].endswith(":ro"), name
            assert services[name]["depends_on"].get("keys", {}).get("condition") in (
                None,  # a client container starts after the server, which waits for the keys
                "service_completed_successfully",
            )
    assert services["server"]["depends_on"]["keys"]["condition"] == (
        "service_completed_successfully"
    )
