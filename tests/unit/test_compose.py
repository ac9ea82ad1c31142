"""compose.yaml, the Dockerfile and deploy/ (Prometheus, Grafana) are consistent with each other.

No Docker engine is needed: the files are parsed and cross-checked (services present, host paths
that exist, ports on 127.0.0.1 only, KRaft Kafka, scrape targets on the ports the fedxab commands
listen on, a Grafana dashboard that uses the provisioned datasource).
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


# The metrics endpoints (server 9100, clients 9101) are served by the monitoring work.
METRICS_PORTS = {"server": "9100", "client": "9101"}


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
