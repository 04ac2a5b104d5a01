"""docker-compose.yml's `secured` profile agrees with the CLI and works as written.

There is no Docker engine on our machines, so the profile's services are played here as the
image would run them: the certificate script of `secured-pki` with this machine's sh and openssl
(in a temporary directory instead of ./secured-pki), the `secured-admin` command (the offline
`diskless users create`) on a temporary data directory, the broker as `diskless serve` configured
by the service's environment only (published ports replaced by free ones on 127.0.0.1, MinIO by a
file:// bucket), its health check, and the `kcat-secured` entrypoint producing and consuming as
admin over SASL_SSL with the CA the script made.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import AdminClient

from diskless.cli import settings

from .broker_process import free_port, wait_for_port

REPO = Path(__file__).resolve().parents[2]
SERVICES = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
SECURED = ("secured-pki", "secured-admin", "diskless-secured", "kcat-secured")
KNOWN_VARIABLES = {s.env for s in settings.SETTINGS} | {"DISKLESS_CONFIG", "DISKLESS_USER_PASSWORD"}
DEADLINE_S = 60.0


def _defaults(text: str) -> str:
    """Compose's ${NAME:-default} with NAME unset."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", text)


def _no_flags() -> Namespace:
    return Namespace(config=None, topic_default=[], **{s.name: None for s in settings.SETTINGS})


def test_the_profile_is_apart_and_pinned() -> None:
    for name in SECURED:
        service = SERVICES[name]
        assert service["profiles"] == ["secured"], name
        repository, _, tag = service["image"].rpartition(":")
        assert repository and re.search(r"\d", tag) and tag != "latest"
    assert not any("secured" in s.get("profiles", ()) for n, s in SERVICES.items() if n not in SECURED)
    assert SERVICES["diskless-secured"]["depends_on"] == {
        "create-bucket": {"condition": "service_completed_successfully"},
        "secured-pki": {"condition": "service_completed_successfully"},
        "secured-admin": {"condition": "service_completed_successfully"},
    }  # fmt: skip
    assert SERVICES["kcat-secured"]["depends_on"] == {"diskless-secured": {"condition": "service_healthy"}}
    # Its own volume and host ports, none shared with the three brokers of the default profile.
    published = [p for n, s in SERVICES.items() if n not in SECURED for p in s.get("ports", ())]
    assert not set(SERVICES["diskless-secured"]["ports"]) & set(published)
    assert SERVICES["diskless-secured"]["volumes"][0] == SERVICES["secured-admin"]["volumes"][0] == "diskless-secured-data:/var/lib/diskless"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """The secured-pki service's script, run here in place of /pki."""
    directory = tmp_path_factory.mktemp("secured-pki")
    (script,) = SERVICES["secured-pki"]["command"]
    assert SERVICES["secured-pki"]["entrypoint"] == ["/bin/sh", "-c"] and "cd /pki;" in script
    assert SERVICES["secured-pki"]["volumes"] == ["./secured-pki:/pki"]
    made = subprocess.run(["/bin/sh", "-c", script.replace("cd /pki;", f"cd {directory};")], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    assert made.stdout.splitlines()[-1] == "made ca.pem and broker.pem in ./secured-pki"
    again = subprocess.run(["/bin/sh", "-c", script.replace("cd /pki;", f"cd {directory};")], capture_output=True, text=True, timeout=60)
    assert again.stdout.splitlines() == ["keeping the certificates in ./secured-pki"]  # a second `up` keeps them
    return directory


def test_the_broker_environment_is_settings_the_cli_accepts(pki) -> None:
    environment = SERVICES["diskless-secured"]["environment"]
    unknown = {v for v in environment if v.startswith("DISKLESS_")} - KNOWN_VARIABLES
    assert not unknown, f"the secured profile sets variables the CLI does not read: {unknown}"
    assert environment["DISKLESS_SSL_KEYSTORE_LOCATION"] == "/pki/broker.pem"
    config, _log = settings.resolve(_no_flags(), {**environment, "DISKLESS_SSL_KEYSTORE_LOCATION": str(pki / "broker.pem")})
    assert (config.listen_host, config.listen_port, config.advertised_host, config.advertised_port) == ("0.0.0.0", 9096, "127.0.0.1", 9096)
    assert (config.listener_security.name, config.listener_security.protocol, config.extra_listeners) == ("SASL_SSL", "SASL_SSL", ())
    security = config.security
    assert security.sasl_enabled_mechanisms == ("SCRAM-SHA-512", "SCRAM-SHA-256")
    assert (security.authorizer, security.super_users, security.allow_everyone_if_no_acl_found) == (True, frozenset({"User:admin"}), False)
    assert (security.connections_max_reauth_ms, security.http_basic_auth) == (3_600_000, True)
    assert config.object_store_url == "s3://diskless/secured?endpoint_url=http://minio:9000&region=us-east-1"
    assert config.data_dir == Path("/var/lib/diskless")


def test_the_profile_runs_as_written(pki, tmp_path) -> None:
    data_dir = tmp_path / "diskless-secured-data"
    # secured-admin: the offline `diskless users create`, into the broker's data directory.
    admin = SERVICES["secured-admin"]
    assert admin["entrypoint"] == ["diskless"]
    command = [str(data_dir) if part == "/var/lib/diskless" else part for part in admin["command"]]
    password = _defaults(admin["environment"]["DISKLESS_USER_PASSWORD"])
    made = subprocess.run([sys.executable, "-m", "diskless.cli.main", *command], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "DISKLESS_USER_PASSWORD": password})  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert made.stdout.splitlines() == ["set SCRAM-SHA-512 credential of user admin (4096 iterations)",
                                        "set SCRAM-SHA-256 credential of user admin (4096 iterations)"]  # fmt: skip

    port, http = free_port(), free_port()

    def local(text: str) -> str:
        text = text.replace("0.0.0.0:9096", f"127.0.0.1:{port}").replace("127.0.0.1:9096", f"127.0.0.1:{port}")
        text = text.replace("0.0.0.0:8080", f"127.0.0.1:{http}").replace("127.0.0.1:8080", f"127.0.0.1:{http}")
        return _defaults(text.replace("/pki/", f"{pki}/"))

    broker = SERVICES["diskless-secured"]
    environment = {variable: local(str(value)) for variable, value in broker["environment"].items()}
    environment["DISKLESS_DATA_DIR"] = str(data_dir)
    environment["DISKLESS_OBJECT_STORE"] = f"file://{tmp_path / 'bucket'}"  # MinIO's part
    log_path = tmp_path / "diskless-secured.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "diskless.cli.main", "serve"], stdout=log, stderr=subprocess.STDOUT,
            env={**{k: v for k, v in os.environ.items() if not k.startswith(("DISKLESS_", "AWS_"))}, **environment},
        )  # fmt: skip
    try:
        wait_for_port(port, process=process)
        health = [sys.executable if part == "python" else local(part) for part in broker["healthcheck"]["test"][1:]]
        deadline = time.monotonic() + DEADLINE_S
        while subprocess.run(health, capture_output=True, timeout=30).returncode != 0:
            assert time.monotonic() < deadline, "the compose health check never passed"
            time.sleep(0.1)  # the health check's own interval, shortened

        kcat = [local(part) for part in SERVICES["kcat-secured"]["entrypoint"]]
        assert kcat[:3] == ["kcat", "-b", f"127.0.0.1:{port}"]
        deadline = time.monotonic() + DEADLINE_S
        while True:  # healthy is not yet ready: the broker names a controller once it joined its cluster
            listed = subprocess.run([*kcat, "-L", "-m", "10"], capture_output=True, text=True, timeout=DEADLINE_S)
            assert listed.returncode == 0, listed.stderr
            if f"broker 1 at 127.0.0.1:{port} (controller)" in listed.stdout:
                break
            assert time.monotonic() < deadline, listed.stdout
        topic = "secured-orders"
        subprocess.run([*kcat, "-t", topic, "-P"], input=b"one\ntwo\nthree\n", check=True, timeout=DEADLINE_S)
        out = subprocess.run([*kcat, "-t", topic, "-C", "-o", "beginning", "-e", "-c", "3"], capture_output=True, check=True, timeout=DEADLINE_S)
        assert out.stdout.split() == [b"one", b"two", b"three"]
        # A wrong password is refused.
        wrong = [part.replace(f"sasl.password={password}", "sasl.password=nope") for part in kcat]
        refused = subprocess.run([*wrong, "-L", "-m", "5"], capture_output=True, text=True, timeout=DEADLINE_S)
        assert refused.returncode != 0 and "Authentication failed" in refused.stderr
        # kcat's librdkafka (2.0) logs in with SaslAuthenticate v0: no session lifetime for it. A
        # newer client (confluent-kafka's librdkafka) is told connections.max.reauth.ms.
        newer = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                             "sasl.username": "admin", "sasl.password": password, "ssl.ca.location": str(pki / "ca.pem")})  # fmt: skip
        assert topic in newer.list_topics(timeout=DEADLINE_S).topics
        text = log_path.read_text()
        assert "authenticated as User:admin with SCRAM-SHA-512 on listener SASL_SSL\n" in text
        assert "authenticated as User:admin with SCRAM-SHA-256 on listener SASL_SSL (session lifetime 3600000 ms)" in text
        assert "user admin, mechanism SCRAM-SHA-512, listener SASL_SSL: wrong password" in text
    finally:
        process.terminate()
        code = process.wait(timeout=60)
    assert code == 0, log_path.read_text()
