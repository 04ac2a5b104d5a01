"""Issue O item 9 and issue J: docker-compose.yml (three brokers, PostgreSQL, MinIO) and the
Dockerfile agree with the CLI.

There is no Docker engine on our machines, so the compose file is parsed and checked, then the
three brokers are run as the image runs them (`diskless serve`, configured by the compose
file's environment only), with what only Docker provides replaced: published ports by free
ones on 127.0.0.1, PostgreSQL by a test server's database, MinIO by moto's S3 server, the
volumes by temporary directories.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

import pytest
import yaml

from diskless.broker.config import Listener
from diskless.cli import settings
from diskless.client.cluster import Cluster

from .broker_process import free_port, wait_for_port
from .moto_s3 import moto_s3_server

REPO = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
BROKER_NAMES = ("diskless-1", "diskless-2", "diskless-3")
BROKERS = [SERVICES[name] for name in BROKER_NAMES]
BROKER = BROKERS[0]
KNOWN_VARIABLES = {s.env for s in settings.SETTINGS} | {"DISKLESS_CONFIG"}
SECURED_PROFILE = ("secured-pki", "secured-admin", "diskless-secured", "kcat-secured")  # test_compose_secured.py checks them


def dockerfile(instruction: str) -> list[str]:
    return [line.split(None, 1)[1] for line in (REPO / "Dockerfile").read_text().splitlines() if line.startswith(instruction + " ")]


def no_flags() -> Namespace:
    return Namespace(config=None, topic_default=[], **{s.name: None for s in settings.SETTINGS})


def test_every_image_is_pinned():
    images = {name: service["image"] for name, service in SERVICES.items() if "image" in service}
    assert set(images) == {"minio", "create-bucket", "postgres", *BROKER_NAMES, "kcat", "prometheus", "grafana",
                           *SECURED_PROFILE}  # fmt: skip
    for name, image in images.items():
        repository, _, tag = image.rpartition(":")
        assert repository and re.search(r"\d", tag) and tag != "latest", f"{name}: {image} is not pinned to a version"
    (base,) = dockerfile("FROM")
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", base)


def test_the_image_runs_diskless_serve_and_the_brokers_have_health_checks():
    assert dockerfile("ENTRYPOINT") == ['["diskless", "serve"]']
    for broker in BROKERS:
        assert "command" not in broker  # the configuration is the environment, checked below
        check = broker["healthcheck"]["test"]
        assert check[:3] == ["CMD", "python", "-c"] and "/healthz" in check[3]
        assert broker["depends_on"] == {
            "create-bucket": {"condition": "service_completed_successfully"}, "postgres": {"condition": "service_healthy"},
        }  # fmt: skip
    assert SERVICES["postgres"]["healthcheck"]["test"] == ["CMD", "pg_isready", "-U", "diskless", "-d", "diskless"]
    assert SERVICES["kcat"]["depends_on"] == {name: {"condition": "service_healthy"} for name in BROKER_NAMES}


def mounts(service: dict) -> dict[str, Path]:
    """Container path -> repository path of a service's bind mounts of files in this repository."""
    found = {}
    for volume in service["volumes"]:
        source, target = volume.split(":")[:2]
        if source.startswith("./"):
            assert (REPO / source).exists(), f"{source} is mounted but not in the repository"
            found[target] = REPO / source
    return found


def test_prometheus_scrapes_every_broker_and_grafana_shows_the_dashboard():
    prometheus = SERVICES["prometheus"]
    config = yaml.safe_load(mounts(prometheus)["/etc/prometheus/prometheus.yml"].read_text())
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    (targets,) = [c["targets"] for c in job["static_configs"]]
    http_ports = [b["environment"].get("DISKLESS_HTTP", BROKER["environment"]["DISKLESS_HTTP"]).rsplit(":", 1)[1] for b in BROKERS]
    assert targets == [f"{name}:{port}" for name, port in zip(BROKER_NAMES, http_ports)]

    grafana = SERVICES["grafana"]
    grafana_mounts = mounts(grafana)
    provisioning = grafana_mounts["/etc/grafana/provisioning"]
    (datasource,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert datasource["type"] == "prometheus" and datasource["url"] == "http://prometheus:9090"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "diskless.yml").read_text())["providers"]
    dashboard_path = grafana_mounts[f"{provider['options']['path']}/diskless.json"]
    dashboard = json.loads(dashboard_path.read_text())
    assert dashboard_path == REPO / "deploy" / "grafana" / "diskless.json"
    (chooser,) = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert chooser["query"] == "prometheus" and chooser["current"]["value"] == datasource["uid"]
    assert grafana["depends_on"] == ["prometheus"] and set(prometheus["depends_on"]) == set(BROKER_NAMES)


def test_the_environment_is_settings_the_cli_knows_and_accepts():
    postgres = SERVICES["postgres"]["environment"]
    for node_id, (name, broker) in enumerate(zip(BROKER_NAMES, BROKERS), start=1):
        environment = broker["environment"]
        unknown = {variable for variable in environment if variable.startswith("DISKLESS_")} - KNOWN_VARIABLES
        assert not unknown, f"docker-compose.yml sets variables the CLI does not read: {unknown}"
        config, _log = settings.resolve(no_flags(), environment)
        host_port = 9091 + node_id
        assert config.node_id == node_id
        assert (config.listen_host, config.listen_port, config.advertised_host, config.advertised_port) == ("0.0.0.0", 9092, "127.0.0.1", host_port)
        assert config.extra_listeners == (Listener("0.0.0.0", 19092, name, 19092),)
        assert (config.http_host, config.http_port) == ("0.0.0.0", 8080)
        assert config.data_dir == Path(broker["volumes"][0].split(":")[1])
        assert broker["volumes"][0].split(":")[0] == f"{name}-data"
        assert config.object_store_url == "s3://diskless/cluster-1?endpoint_url=http://minio:9000&region=us-east-1"
        assert config.metadata_url == (
            f"postgresql://{postgres['POSTGRES_USER']}:{postgres['POSTGRES_PASSWORD']}@postgres:5432/{postgres['POSTGRES_DB']}"
        )
        assert (config.broker_session_timeout_ms, config.broker_heartbeat_interval_ms) == (9000, 500)
        # Docker publishes the container's 9092 on the port the broker advertises, and its admin HTTP.
        assert broker["ports"] == [f"127.0.0.1:{host_port}:9092", f"127.0.0.1:{8079 + node_id}:8080"]
    assert SERVICES["kcat"]["entrypoint"] == ["kcat", "-b", "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"]
    assert SERVICES["kcat"]["network_mode"] == "host"  # the addresses Metadata gives are the host's
    assert dockerfile("EXPOSE") == ["9092 19092 8080"]
    assert set(COMPOSE["volumes"]) == {
        "minio-data", "postgres-data", "prometheus-data", "grafana-data", *(f"{name}-data" for name in BROKER_NAMES),
        "diskless-secured-data",
    }  # fmt: skip


def metadata_brokers(bootstrap: str) -> list[tuple[int, str, int]]:
    async def ask() -> list[tuple[int, str, int]]:
        cluster = Cluster(bootstrap, client_id="compose-test")
        try:
            await cluster.fetch_metadata([])
            return [(b.node_id, b.host, b.port) for b in cluster.metadata.brokers.values()]
        finally:
            await cluster.close()

    return asyncio.run(ask())


def test_the_cluster_runs_with_the_compose_environment(tmp_path, postgres_database):
    """Docker's part played on 127.0.0.1: each container's 9092 and 8080 published on a free
    port, its in-network 19092 on another (three brokers share one address here), the
    `postgres` and `minio` hosts replaced by the test's servers."""
    ports = {name: {"host": free_port(), "network": free_port(), "http": free_port()} for name in BROKER_NAMES}

    def local(name: str, text: str) -> str:
        p = ports[name]
        text = text.replace("0.0.0.0:9092", f"127.0.0.1:{p['host']}").replace("0.0.0.0:19092", f"127.0.0.1:{p['network']}")
        text = text.replace("0.0.0.0:8080", f"127.0.0.1:{p['http']}").replace("127.0.0.1:8080", f"127.0.0.1:{p['http']}")
        for other, q in ports.items():  # advertised addresses name the host's published ports
            text = text.replace(f"127.0.0.1:{9091 + BROKER_NAMES.index(other) + 1}", f"127.0.0.1:{q['host']}")
            text = text.replace(f"{other}:19092", f"{other}:{q['network']}")
        return text

    processes: dict[str, subprocess.Popen] = {}
    with moto_s3_server() as s3:
        s3.create_bucket("diskless")
        try:
            for name, broker in zip(BROKER_NAMES, BROKERS):
                environment = {variable: local(name, str(value)) for variable, value in broker["environment"].items()}
                environment["DISKLESS_DATA_DIR"] = str(tmp_path / f"{name}-data")
                environment["DISKLESS_OBJECT_STORE"] = environment["DISKLESS_OBJECT_STORE"].replace("http://minio:9000", s3.endpoint_url)
                environment["DISKLESS_METADATA"] = postgres_database
                environment.update(s3.env())  # moto's credentials
                with open(tmp_path / f"{name}.log", "wb") as log:
                    processes[name] = subprocess.Popen(
                        [sys.executable, "-m", "diskless.cli.main", "serve"], stdout=log, stderr=subprocess.STDOUT,
                        env={**{k: v for k, v in os.environ.items() if not k.startswith(("DISKLESS_", "AWS_"))}, **environment},
                    )  # fmt: skip
            for name, broker in zip(BROKER_NAMES, BROKERS):
                wait_for_port(ports[name]["host"], process=processes[name])
                wait_for_port(ports[name]["network"], process=processes[name])
                health = [sys.executable if part == "python" else local(name, part) for part in broker["healthcheck"]["test"][1:]]
                deadline = time.monotonic() + 60
                while subprocess.run(health, capture_output=True, timeout=30).returncode != 0:
                    assert time.monotonic() < deadline, f"{name}: the compose health check never passed"
                    time.sleep(0.1)  # the health check's own interval, shortened

            # Each broker's host listener lists the whole cluster at the host's addresses. Its
            # in-network listener names the broker itself by its in-network address; the others
            # by the one listener each registered in the store (their host address).
            from_host = sorted((n, "127.0.0.1", ports[name]["host"]) for n, name in enumerate(BROKER_NAMES, start=1))
            for name in BROKER_NAMES:
                deadline = time.monotonic() + 60
                while sorted(metadata_brokers(f"127.0.0.1:{ports[name]['host']}")) != from_host:
                    assert time.monotonic() < deadline, f"{name} never listed the three brokers"
                    time.sleep(0.1)  # a heartbeat: the others' sessions reach its view
                node_id = BROKER_NAMES.index(name) + 1
                in_network = [b if b[0] != node_id else (node_id, name, ports[name]["network"]) for b in from_host]
                assert sorted(metadata_brokers(f"127.0.0.1:{ports[name]['network']}")) == in_network
        finally:
            codes = {}
            for name, process in processes.items():
                process.terminate()
            for name, process in processes.items():
                codes[name] = process.wait(timeout=60)
    for name in BROKER_NAMES:
        text = (tmp_path / f"{name}.log").read_text()
        p = ports[name]
        assert codes[name] == 0, text
        assert f"also listening on 127.0.0.1:{p['network']} (advertised {name}:{p['network']})" in text
        node_id = BROKER_NAMES.index(name) + 1
        assert re.search(rf"broker {node_id} ready on 127\.0\.0\.1:{p['host']} \(advertised 127\.0\.0\.1:{p['host']}\).*object store s3://diskless/cluster-1\?", text)


@pytest.mark.parametrize(("variables", "line"), [
    ({"DISKLESS_LISTEN": "0.0.0.0:9092,0.0.0.0:19092", "DISKLESS_ADVERTISED_LISTENER": "127.0.0.1:9092"},
     "DISKLESS_ADVERTISED_LISTENER: 1 address(es) for 2 --listen address(es); give one advertised address per listener, in the same order"),
    ({"DISKLESS_LISTEN": "0.0.0.0:9092,0.0.0.0:9092"}, "DISKLESS_LISTEN: two listeners on one port"),
])
def test_listener_lists_that_do_not_match_are_refused(variables, line):
    with pytest.raises(settings.SettingsError) as error:
        settings.resolve(no_flags(), variables)
    assert str(error.value) == line
