"""What a new user of the `diskless` tools met, without a broker: serve's integer settings are
refused at start below Kafka's minimums, with their source; DescribeTransactions answers with
no transaction started (-1) are read; the broker's default partition count is not asked of a
broker without CreateTopics v4; an ACL principal without its type is refused before sending."""

from __future__ import annotations

import argparse
import asyncio
import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from kio.schema.describe_transactions.v0 import response as describe_v0
from kio.schema.errors import ErrorCode

from diskless.cli import settings
from diskless.cli.main import main
from diskless.cli.setting_values import SettingsError
from diskless.client import Admin, protocol
from diskless.client.errors import UnsupportedVersionError
from diskless.wire import encode_response_bytes, parse_response


def parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    return parser.parse_args(list(flags))


# --- serve's integer settings ------------------------------------------------------------------


def test_num_partitions_below_one_is_refused_from_every_source(tmp_path: Path) -> None:
    toml = tmp_path / "diskless.toml"
    toml.write_text("num_partitions = -3\n")
    with pytest.raises(SettingsError) as flag:
        settings.resolve(parse("--num-partitions", "0"), {})
    with pytest.raises(SettingsError) as env:
        settings.resolve(parse(), {"DISKLESS_NUM_PARTITIONS": "-1"})
    with pytest.raises(SettingsError) as file:
        settings.resolve(parse(), {"DISKLESS_CONFIG": str(toml)})
    assert [str(e.value) for e in (flag, env, file)] == [
        "--num-partitions: expected at least 1, got 0",
        "DISKLESS_NUM_PARTITIONS: expected at least 1, got -1",
        f"num_partitions in {toml}: expected at least 1, got -3",
    ]
    assert settings.resolve(parse("--num-partitions", "1"), {})[0].num_partitions == 1


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--node-id", "-1", "expected at least 0, got -1"),
        ("--socket-request-max-bytes", "0", "expected at least 1, got 0"),
        ("--log-retention-check-interval-ms", "0", "expected at least 1, got 0"),
        ("--group-initial-rebalance-delay-ms", "-1", "expected at least 0, got -1"),
        ("--upload-concurrency", "0", "expected at least 1, got 0"),
        ("--broker-session-timeout-ms", "0", "expected at least 1, got 0"),
        ("--broker-heartbeat-interval-ms", "0", "expected at least 1, got 0"),
        ("--leader-imbalance-check-interval-seconds", "0", "expected at least 1, got 0"),
        ("--leader-imbalance-per-broker-percentage", "-1", "expected at least 0, got -1"),
        ("--wal-commit-interval-ms", "-1", "expected at least 0, got -1"),
        ("--wal-buffer-max-bytes", "0", "expected at least 1, got 0"),
        ("--wal-max-pending-bytes", "0", "expected at least 1, got 0"),
        ("--group-consumer-min-session-timeout-ms", "0", "expected at least 1, got 0"),
        ("--group-consumer-min-session-timeout-ms", "70000",
         "expected at most 60000 (group.consumer.max.session.timeout.ms), got 70000"),
        ("--group-consumer-session-timeout-ms", "30000",
         "expected 45000 (group.consumer.min.session.timeout.ms) to 60000 (group.consumer.max.session.timeout.ms), got 30000"),
        ("--group-consumer-heartbeat-interval-ms", "16000",
         "expected 5000 (group.consumer.min.heartbeat.interval.ms) to 15000 (group.consumer.max.heartbeat.interval.ms), got 16000"),
    ],
)  # fmt: skip
def test_integer_settings_below_their_minimum_are_refused(flag: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError) as refused:
        settings.resolve(parse(flag, value), {})
    assert str(refused.value) == f"{flag}: {message}"


def test_the_consumer_heartbeat_must_be_below_the_session_timeout() -> None:
    flags = ("--group-consumer-min-session-timeout-ms", "10000", "--group-consumer-session-timeout-ms", "10000",
             "--group-consumer-heartbeat-interval-ms", "10000", "--group-consumer-min-heartbeat-interval-ms", "1")  # fmt: skip
    with pytest.raises(SettingsError) as refused:
        settings.resolve(parse(*flags), {})
    assert str(refused.value) == (
        "--group-consumer-heartbeat-interval-ms: group.consumer.heartbeat.interval.ms must be less than "
        "group.consumer.session.timeout.ms (10000), got 10000"
    )


def test_the_lowest_allowed_values_are_taken() -> None:
    config, _ = settings.resolve(parse(
        "--node-id", "0", "--group-initial-rebalance-delay-ms", "0", "--wal-commit-interval-ms", "0",
        "--leader-imbalance-per-broker-percentage", "0", "--group-consumer-min-session-timeout-ms", "2",
        "--group-consumer-session-timeout-ms", "2", "--group-consumer-min-heartbeat-interval-ms", "1",
        "--group-consumer-heartbeat-interval-ms", "1",
    ), {})  # fmt: skip
    assert (config.node_id, config.group_initial_rebalance_delay_ms, config.wal_commit_interval_ms,
            config.leader_imbalance_per_broker_percentage) == (0, 0, 0, 0)  # fmt: skip
    assert (config.group_consumer_min_session_timeout_ms, config.group_consumer_session_timeout_ms,
            config.group_consumer_min_heartbeat_interval_ms, config.group_consumer_heartbeat_interval_ms) == (2, 2, 1, 1)  # fmt: skip


# --- DescribeTransactions ----------------------------------------------------------------------


def describe_response(start_time: datetime.datetime) -> bytes:
    """A DescribeTransactions v0 response frame (without its size prefix), as brokers write it."""
    state = describe_v0.TransactionState(
        error_code=ErrorCode.none, transactional_id="tx", transaction_state="Empty", transaction_timeout=datetime.timedelta(minutes=1),
        transaction_start_time=start_time, producer_id=7, producer_epoch=0, topics=(),
    )  # fmt: skip
    body = describe_v0.DescribeTransactionsResponse(throttle_time=datetime.timedelta(0), transaction_states=(state,))
    return encode_response_bytes(3, body)[4:]


def test_describe_transactions_reads_no_start_time_and_a_start_time() -> None:
    response_class = protocol.response_class(protocol.DESCRIBE_TRANSACTIONS, 0)
    # -1 ms, what Kafka (and kio's writer, from this datetime) sends for a transaction in state Empty.
    _cid, none_started = parse_response(describe_response(datetime.datetime.fromtimestamp(-0.001, datetime.UTC)), response_class)
    _cid, started = parse_response(describe_response(datetime.datetime.fromtimestamp(1_700_000_000.123, datetime.UTC)), response_class)
    assert [r.transaction_states[0].transaction_start_time for r in (none_started, started)] == [-1, 1_700_000_000_123]
    assert (none_started.transaction_states[0].transaction_state, none_started.transaction_states[0].producer_id) == ("Empty", 7)


# --- CreateTopics with the broker's default partition count ------------------------------------


class OneVersionCluster:
    """A Cluster stand-in whose controller speaks one CreateTopics version: it builds the request."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.metadata = SimpleNamespace(controller_id=1, brokers={1: None})
        self.built: list[object] = []

    async def request_node(self, node: int, api_key: int, make, timeout_ms: int | None = None) -> object:
        self.built.append(make(self.version))
        answer = {"name": "t", "error_code": 0, "error_message": None}
        if self.version >= 5:  # CreateTopics v5 answers each topic's partition count
            answer["num_partitions"] = 2
        return SimpleNamespace(topics=(SimpleNamespace(**answer),))


def create_with(version: int, num_partitions: int) -> tuple[dict[str, int], OneVersionCluster]:
    admin = Admin()
    cluster = OneVersionCluster(version)
    admin._cluster, admin._started = cluster, True  # type: ignore[assignment]
    return asyncio.run(admin.create_topics("t", num_partitions)), cluster


def test_the_brokers_default_partition_count_needs_create_topics_v4() -> None:
    with pytest.raises(UnsupportedVersionError) as refused:
        create_with(3, -1)
    assert str(refused.value) == ("UNSUPPORTED_VERSION: the broker's default partition count (num_partitions -1) needs "
                                  "CreateTopics v4 or later; the broker speaks up to v3: give the number of partitions")  # fmt: skip
    created, cluster = create_with(7, -1)
    assert created == {"t": 2}  # the controller's answer (v5+)
    assert [(t.num_partitions, t.replication_factor) for t in cluster.built[0].topics] == [(-1, -1)]
    assert create_with(3, 4)[0] == {"t": 4}  # before v5 the answer has no count: the one asked for


# --- ACL principals ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("add", "--topic", "t", "--allow-principal", "alice"), "Invalid principal 'alice' (expected TYPE:NAME, e.g. User:alice)"),
        (("add", "--topic", "t", "--allow-principal", "User:a", "--deny-principal", "User:"),
         "Invalid principal 'User:' (expected TYPE:NAME, e.g. User:alice)"),
        (("remove", "--topic", "t", "--principal", "bob"), "Invalid principal 'bob' (expected TYPE:NAME, e.g. User:bob)"),
        (("list", "--principal", ":bob"), "Invalid principal ':bob' (expected TYPE:NAME, e.g. User:alice)"),
    ],
)  # fmt: skip
def test_a_principal_without_its_type_is_refused_before_sending(args: tuple[str, ...], message: str, capsys) -> None:
    # 127.0.0.1:1: nothing listens there; the refusal comes before any connection.
    assert main(["acls", *args, "-b", "127.0.0.1:1"]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", f"diskless acls {args[0]}: {message}\n")
