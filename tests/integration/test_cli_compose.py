"""Issue O item 9: docker-compose.yml and the Dockerfile agree with the CLI.

There is no Docker engine on our machines, so the compose file is parsed and checked, then the
broker is run as the image runs it (`diskless serve`, configured by the compose file's
environment only), with what only Docker provides replaced: ports by free ones on 127.0.0.1,
MinIO by moto's S3 server, the volume by a temporary directory.
"""

from __future__ import annotations

import asyncio
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
BROKER = SERVICES["diskless"]
KNOWN_VARIABLES = {s.env for s in settings.SETTINGS} | {"DISKLESS_CONFIG"}


def dockerfile(instruction: str) -> list[str]:
    return [line.split(None, 1)[1] for line in (REPO / "Dockerfile").read_text().splitlines() if line.startswith(instruction + " ")]


def no_flags() -> Namespace:
    return Namespace(config=None, topic_default=[], **{s.name: None for s in settings.SETTINGS})


def test_every_image_is_pinned():
    images = {name: service["image"] for name, service in SERVICES.items() if "image" in service}
    assert set(images) == {"minio", "create-bucket", "diskless", "kcat"}
    for name, image in images.items():
        repository, _, tag = image.rpartition(":")
        assert repository and re.search(r"\d", tag) and tag != "latest", f"{name}: {image} is not pinned to a version"
    (base,) = dockerfile("FROM")
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", base)


def test_the_image_runs_diskless_serve_and_the_broker_has_a_health_check():
    assert dockerfile("ENTRYPOINT") == ['["diskless", "serve"]']
    assert "command" not in BROKER  # the configuration is the environment, checked below
    check = BROKER["healthcheck"]["test"]
    assert check[:3] == ["CMD", "python", "-c"] and "/healthz" in check[3]
    assert BROKER["depends_on"] == {"create-bucket": {"condition": "service_completed_successfully"}}
    assert SERVICES["kcat"]["depends_on"] == {"diskless": {"condition": "service_healthy"}}


def test_the_environment_is_settings_the_cli_knows_and_accepts():
    environment = BROKER["environment"]
    unknown = {name for name in environment if name.startswith("DISKLESS_")} - KNOWN_VARIABLES
    assert not unknown, f"docker-compose.yml sets variables the CLI does not read: {unknown}"
    config, _level = settings.resolve(no_flags(), environment)
    assert (config.listen_host, config.listen_port, config.advertised_host, config.advertised_port) == ("0.0.0.0", 9092, "127.0.0.1", 9092)
    assert config.extra_listeners == (Listener("0.0.0.0", 19092, "diskless", 19092),)
    assert (config.http_host, config.http_port) == ("0.0.0.0", 8080)
    assert config.data_dir == Path(BROKER["volumes"][0].split(":")[1])
    assert config.object_store_url == "s3://diskless/cluster-1?endpoint_url=http://minio:9000&region=us-east-1"
    # Every port the broker binds is published or used on the compose network, and the in-network
    # address is the one the kcat service uses.
    assert BROKER["ports"] == ["127.0.0.1:9092:9092", "127.0.0.1:8080:8080"]
    assert SERVICES["kcat"]["entrypoint"] == ["kcat", "-b", "diskless:19092"]
    assert dockerfile("EXPOSE") == ["9092 19092 8080"]


def metadata_brokers(bootstrap: str) -> list[tuple[int, str, int]]:
    async def ask() -> list[tuple[int, str, int]]:
        cluster = Cluster(bootstrap, client_id="compose-test")
        try:
            await cluster.fetch_metadata([])
            return [(b.node_id, b.host, b.port) for b in cluster.metadata.brokers.values()]
        finally:
            await cluster.close()

    return asyncio.run(ask())


def test_the_broker_runs_with_the_compose_environment(tmp_path):
    host_port, network_port, http_port = free_port(), free_port(), free_port()

    def local(text: str) -> str:  # what Docker maps: the published ports, the container's interfaces
        return text.replace("0.0.0.0:9092", f"127.0.0.1:{host_port}").replace("0.0.0.0:19092", f"127.0.0.1:{network_port}") \
                   .replace("127.0.0.1:9092", f"127.0.0.1:{host_port}").replace("diskless:19092", f"diskless:{network_port}") \
                   .replace("0.0.0.0:8080", f"127.0.0.1:{http_port}").replace("127.0.0.1:8080", f"127.0.0.1:{http_port}")

    with moto_s3_server() as s3:
        s3.create_bucket("diskless")
        environment = {name: local(str(value)) for name, value in BROKER["environment"].items()}
        environment["DISKLESS_DATA_DIR"] = str(tmp_path / "var-lib-diskless")
        environment["DISKLESS_OBJECT_STORE"] = environment["DISKLESS_OBJECT_STORE"].replace("http://minio:9000", s3.endpoint_url)
        environment.update(s3.env())  # moto's credentials
        log = open(tmp_path / "broker.log", "wb")
        broker = subprocess.Popen([sys.executable, "-m", "diskless.cli.main", "serve"], stdout=log, stderr=subprocess.STDOUT,
                                  env={**{k: v for k, v in os.environ.items() if not k.startswith(("DISKLESS_", "AWS_"))}, **environment})
        try:
            wait_for_port(host_port, process=broker)
            wait_for_port(network_port, process=broker)
            health = [sys.executable if part == "python" else local(part) for part in BROKER["healthcheck"]["test"][1:]]
            deadline = time.monotonic() + 30
            while subprocess.run(health, capture_output=True, timeout=30).returncode != 0:
                assert time.monotonic() < deadline, "the compose health check never passed"
                time.sleep(0.1)  # the health check's own interval, shortened

            # Each listener advertises the address that works from where its clients are.
            assert metadata_brokers(f"127.0.0.1:{host_port}") == [(1, "127.0.0.1", host_port)]
            assert metadata_brokers(f"127.0.0.1:{network_port}") == [(1, "diskless", network_port)]
        finally:
            broker.terminate()
            code = broker.wait(timeout=30)
            log.close()
    text = (tmp_path / "broker.log").read_text()
    assert code == 0, text
    assert f"also listening on 127.0.0.1:{network_port} (advertised diskless:{network_port})" in text
    assert re.search(rf"ready on 127\.0\.0\.1:{host_port} \(advertised 127\.0\.0\.1:{host_port}\).*object store s3://diskless/cluster-1\?", text)


@pytest.mark.parametrize(("variables", "line"), [
    ({"DISKLESS_LISTEN": "0.0.0.0:9092,0.0.0.0:19092", "DISKLESS_ADVERTISED_LISTENER": "127.0.0.1:9092"},
     "DISKLESS_ADVERTISED_LISTENER: 1 address(es) for 2 --listen address(es); give one advertised address per listener, in the same order"),
    ({"DISKLESS_LISTEN": "0.0.0.0:9092,0.0.0.0:9092"}, "DISKLESS_LISTEN: two listeners on one port"),
])
def test_listener_lists_that_do_not_match_are_refused(variables, line):
    with pytest.raises(settings.SettingsError) as error:
        settings.resolve(no_flags(), variables)
    assert str(error.value) == line
