"""`diskless users` and `diskless acls` against a secured `diskless serve`, reaching its
SASL_SSL listener as an administrator with `--command-config`, and the admin HTTP endpoint's
basic authentication against the same SCRAM users; `diskless topics`, `produce` and `consume`
through the same listener with the same `--command-config`.

The first administrator is created on the PLAINTEXT listener while no ACL names the cluster
(allow.everyone.if.no.acl.found), as one bootstraps a Kafka cluster; `User:admin` is a super user.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import urllib.error
import urllib.request
import uuid

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.broker_process import BrokerProcess, free_port
from tests.integration.security_certs import make_pki

DEADLINE_S = 30.0


def diskless(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "diskless.cli.main", *args], capture_output=True, text=True, timeout=60, input=stdin)


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    work = tmp_path_factory.mktemp("secured-cli")
    pki = make_pki(work / "pki")
    sasl_ssl, http = free_port(), free_port()
    broker = BrokerProcess(
        work / "data", "--listeners", f"SASL_SSL://127.0.0.1:{sasl_ssl}", "--ssl-keystore-location", str(pki.server),
        "--authorizer", "acl", "--super-users", "User:admin", "--http", f"127.0.0.1:{http}",
        "--connection-failed-authentication-delay-ms", "100",
    ).start()  # fmt: skip
    admin_config = work / "admin.properties"
    admin_config.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="admin-pw";\n'
        f"ssl.truststore.location={pki.ca}\n"
    )
    made = diskless("users", "create", "admin", "--password", "admin-pw", "-b", broker.bootstrap)
    assert made.returncode == 0, made.stderr
    yield broker, pki, sasl_ssl, http, admin_config
    broker.close()


def test_users_and_acls_through_the_sasl_ssl_listener(secured, tmp_path) -> None:
    broker, pki, port, _http, admin_config = secured
    as_admin = ["-b", f"127.0.0.1:{port}", "--command-config", str(admin_config)]
    made = diskless("users", "create", "alice", "--password", "alice-pw", "--mechanism", "SCRAM-SHA-512", "--mechanism", "SCRAM-SHA-256", *as_admin)
    assert made.returncode == 0, made.stderr
    assert made.stdout.splitlines() == ["set SCRAM-SHA-512 credential of user alice (4096 iterations)",
                                        "set SCRAM-SHA-256 credential of user alice (4096 iterations)"]  # fmt: skip
    listed = diskless("users", "list", *as_admin)
    assert listed.returncode == 0, listed.stderr
    assert [line.split() for line in listed.stdout.splitlines()] == [
        ["USER", "MECHANISM", "ITERATIONS"], ["admin", "SCRAM-SHA-512", "4096"], ["alice", "SCRAM-SHA-256", "4096"],
        ["alice", "SCRAM-SHA-512", "4096"],
    ]  # fmt: skip

    topic = f"t-{uuid.uuid4().hex[:10]}"
    client = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
              "sasl.username": "alice", "sasl.password": "alice-pw", "ssl.ca.location": str(pki.ca), "message.timeout.ms": 10000}  # fmt: skip
    super_client = {**client, "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin", "sasl.password": "admin-pw"}
    topic_admin = AdminClient(super_client)
    topic_admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=20)
    added = diskless("acls", "add", "--allow-principal", "User:alice", "--operation", "WRITE", "--topic", topic, *as_admin)
    assert added.returncode == 0, added.stderr
    assert [line.split() for line in added.stdout.splitlines()] == [
        ["added", "1", "ACL", "binding(s)"], ["RESOURCE-TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"],
        ["TOPIC", topic, "LITERAL", "User:alice", "*", "WRITE", "ALLOW"],
    ]  # fmt: skip
    listed = diskless("acls", "list", "--topic", topic, *as_admin)
    assert [line.split() for line in listed.stdout.splitlines()][1:] == [["TOPIC", topic, "LITERAL", "User:alice", "*", "WRITE", "ALLOW"]]

    def produce() -> KafkaError | None:
        reports: list = []
        producer = Producer(client)
        producer.produce(topic, b"v", on_delivery=lambda err, _m: reports.append(err))
        assert producer.flush(DEADLINE_S) == 0
        return reports[0]

    assert produce() is None
    removed = diskless("acls", "remove", "--topic", topic, *as_admin)
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.splitlines()[0] == "removed 1 ACL binding(s)"
    assert produce() is None  # no binding names the topic any more: allow.everyone.if.no.acl.found (true)
    denied = diskless("acls", "add", "--deny-principal", "User:alice", "--operation", "WRITE", "--topic", topic, *as_admin)
    assert denied.returncode == 0, denied.stderr
    assert produce().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    deleted = diskless("users", "delete", "alice", *as_admin)
    assert deleted.stdout.splitlines() == ["deleted SCRAM-SHA-256 credential of user alice", "deleted SCRAM-SHA-512 credential of user alice"]
    gone = diskless("users", "list", "alice", *as_admin)
    assert gone.returncode == 1 and "RESOURCE_NOT_FOUND" in gone.stderr

    wrong = tmp_path / "wrong.properties"
    wrong.write_text(admin_config.read_text().replace('password="admin-pw"', 'password="nope"'))
    refused = diskless("users", "list", "-b", f"127.0.0.1:{port}", "--command-config", str(wrong))
    assert refused.returncode == 1
    assert "SASL_AUTHENTICATION_FAILED" in refused.stderr and "Authentication failed during authentication" in refused.stderr


def test_topics_produce_and_consume_through_the_sasl_ssl_listener(secured, tmp_path) -> None:
    _broker, _pki, port, _http, admin_config = secured
    as_admin = ["-b", f"127.0.0.1:{port}", "--command-config", str(admin_config)]
    topic = f"t-{uuid.uuid4().hex[:10]}"
    made = diskless("topics", "create", topic, "--partitions", "2", *as_admin)
    assert (made.returncode, made.stdout, made.stderr) == (0, f"created topic {topic} with 2 partition(s)\n", "")
    listed = diskless("topics", "list", *as_admin)
    assert listed.returncode == 0, listed.stderr
    assert topic in listed.stdout.splitlines()

    count = 200
    lines = "".join(f"k{i}:v{i}\n" for i in range(count))
    produced = diskless("produce", topic, "--partition", "1", "--key-separator", ":", "--progress", "off", *as_admin, stdin=lines)
    assert produced.returncode == 0, produced.stderr
    assert produced.stderr.startswith(f"produced {count} records ") and produced.stderr.count("\n") == 1, produced.stderr
    consumed = diskless("consume", topic, "--from-beginning", "--until-end", "--format", "%p %o %k %s\\n", "--progress", "off", *as_admin)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == [f"1 {i} k{i} v{i}" for i in range(count)]
    assert consumed.stderr.startswith(f"consumed {count} records "), consumed.stderr

    # A refused login: Kafka's error in one line on standard error, exit code 1, no traceback.
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(admin_config.read_text().replace('password="admin-pw"', 'password="nope"'))
    refusal = (f"SASL_AUTHENTICATION_FAILED (host=127.0.0.1, port={port}): Authentication failed during authentication "
               "due to invalid credentials with SASL mechanism SCRAM-SHA-512")  # fmt: skip
    as_wrong = ["-b", f"127.0.0.1:{port}", "--command-config", str(wrong)]
    for command, args in (("topics", ["list"]), ("produce", [topic]), ("consume", [topic, "--from-beginning"])):
        refused = diskless(command, *args, *as_wrong, stdin="never sent\n")
        assert (refused.returncode, refused.stdout, refused.stderr) == (1, "", f"diskless {command}: {refusal}\n")

    # A file that cannot be read, or says what Kafka's clients do not take: one line, exit code 2.
    missing = tmp_path / "missing.properties"
    unread = diskless("produce", topic, "-b", f"127.0.0.1:{port}", "--command-config", str(missing), stdin="x\n")
    assert (unread.returncode, unread.stderr) == (2, f"diskless produce: cannot read --command-config {missing}: No such file or directory\n")
    bad = tmp_path / "bad.properties"
    bad.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n")
    refused = diskless("topics", "list", "-b", f"127.0.0.1:{port}", "--command-config", str(bad))
    assert (refused.returncode, refused.stderr) == (
        2, f"diskless topics: --command-config {bad}: sasl.mechanism must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, not 'GSSAPI'\n"
    )  # fmt: skip
    # The same records are still exactly there: nothing the refused commands did reached the topic.
    again = diskless("consume", topic, "--from-beginning", "--until-end", "--format", "%p %o\\n", "--progress", "off", *as_admin)
    assert again.stdout.splitlines() == [f"1 {i}" for i in range(count)]


def test_a_non_admin_gets_cluster_authorization_failed(secured, tmp_path) -> None:
    broker, pki, port, _http, admin_config = secured
    as_admin = ["-b", f"127.0.0.1:{port}", "--command-config", str(admin_config)]
    assert diskless("users", "create", "bob", "--password", "bob-pw", *as_admin).returncode == 0
    bob = tmp_path / "bob.properties"
    bob.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=bob\nsasl.password=bob-pw\nssl.truststore.location={pki.ca}\n")
    # A cluster binding exists from now on: anonymous and bob may no longer manage users.
    assert diskless("acls", "add", "--allow-principal", "User:ops", "--operation", "ALTER", "--cluster", *as_admin).returncode == 0
    refused = diskless("users", "create", "mallory", "--password", "x", "-b", f"127.0.0.1:{port}", "--command-config", str(bob))
    assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
    refused = diskless("acls", "add", "--allow-principal", "User:bob", "--topic", "*", "-b", f"127.0.0.1:{port}", "--command-config", str(bob))
    assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
    anonymous = diskless("users", "create", "mallory", "--password", "x", "-b", broker.bootstrap)
    assert anonymous.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in anonymous.stderr


def test_admin_http_needs_a_scram_user(secured) -> None:
    _broker, _pki, _port, http, _config = secured

    def get(path: str, user: str | None = None, password: str = "") -> int:
        request = urllib.request.Request(f"http://127.0.0.1:{http}{path}")
        if user is not None:
            request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status
        except urllib.error.HTTPError as error:
            return error.code

    assert get("/healthz") == 200
    assert get("/v1/topics") == 401
    assert get("/v1/topics", "admin", "wrong") == 401
    assert get("/v1/topics", "nobody", "x") == 401
    assert get("/v1/topics", "admin", "admin-pw") == 200
    assert get("/metrics", "admin", "admin-pw") == 200
    # The two refused logins are counted (no credentials at all is a challenge, not a login),
    # and a SASL login through the CLI counts as a successful one.

    def scrape() -> dict[tuple[str, str | None], float]:
        request = urllib.request.Request(f"http://127.0.0.1:{http}/metrics")
        request.add_header("Authorization", "Basic " + base64.b64encode(b"admin:admin-pw").decode())
        with urllib.request.urlopen(request, timeout=10) as answer:
            text = answer.read().decode()
        return {(s.name, s.labels.get("listener")): s.value for f in text_string_to_metric_families(text) for s in f.samples}

    succeeded = ("kafka_server_socket_server_metrics_successful_authentication_total", "SASL_SSL")
    before = scrape()
    assert before[("kafka_server_socket_server_metrics_failed_authentication_total", "http")] == 2
    listed = diskless("users", "list", "-b", f"127.0.0.1:{_port}", "--command-config", str(_config))
    assert listed.returncode == 0, listed.stderr
    assert scrape().get(succeeded, 0) > before.get(succeeded, 0)
