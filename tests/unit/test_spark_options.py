"""Reader options and filter pushdown: pure parsing, Spark's Kafka source rules."""

from __future__ import annotations

import datetime
import pickle
import subprocess
import sys

import pytest
from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, IsNotNull, LessThan, LessThanOrEqual, Not

from spark_reader.bucket import resolve_location
from spark_reader.decode import RecordBounds
from spark_reader.errors import InvalidOption
from spark_reader.filters import Pushdown, push_filters
from spark_reader.options import (
    Assign,
    Earliest,
    GlobalTimestamp,
    Latest,
    PartitionTimestamps,
    SpecificOffsets,
    Subscribe,
    SubscribePattern,
    parse_options,
)

PATH = {"path": "file:///tmp/bucket"}


def batch(**options: str):
    return parse_options({**PATH, **options}, streaming=False)


def test_defaults_are_spark_kafka_defaults() -> None:
    options = batch(subscribe="a, b,a")
    assert options.topics == Subscribe(("a", "b"))
    assert options.starting == Earliest() and options.ending == Latest()
    assert options.fail_on_data_loss is True and options.include_headers is False
    assert options.min_partitions is None and options.bootstrap_servers == () and options.push_down_predicate is False
    assert batch(subscribe="a", pushDownPredicate="true").push_down_predicate is True
    streaming = parse_options({**PATH, "subscribe": "a"}, streaming=True)
    assert streaming.starting == Latest()


def test_option_names_are_case_insensitive() -> None:
    options = parse_options({"PATH": "file:///x", "SubScribePattern": "orders-.*", "INCLUDEHEADERS": "TRUE"}, streaming=False)
    assert options.topics == SubscribePattern("orders-.*") and options.include_headers is True
    assert options.topics.matches("orders-eu") and not options.topics.matches("xorders-eu")


@pytest.mark.parametrize(
    "options, option",
    [
        ({}, "subscribe"),
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "subscribe"),
        ({"subscribe": " , "}, "subscribe"),
        ({"subscribePattern": "("}, "subscribePattern"),
        ({"assign": '{"a":["x"]}'}, "assign"),
        ({"assign": "[1]"}, "assign"),
        ({"subscribe": "a", "startingOffsets": "latest"}, "startingOffsets"),
        ({"subscribe": "a", "startingOffsets": '{"a":{"0":-1}}'}, "startingOffsets"),
        ({"subscribe": "a", "endingOffsets": "earliest"}, "endingOffsets"),
        ({"subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, "endingOffsets"),
        ({"subscribe": "a", "endingOffsets": '{"a":{"x":5}}'}, "endingOffsets"),
        ({"subscribe": "a", "startingTimestamp": "yesterday"}, "startingTimestamp"),
        ({"subscribe": "a", "minPartitions": "0"}, "minPartitions"),
        ({"subscribe": "a", "failOnDataLoss": "yes"}, "failOnDataLoss"),
        ({"subscribe": "a", "kafka.bootstrap.servers": "localhost"}, "kafka.bootstrap.servers"),
        ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "skip"}, "startingOffsetsByTimestampStrategy"),
        ({"subscribe": "a", "minOffsetsPerTrigger": "10"}, "minOffsetsPerTrigger"),
        ({"subscribe": "a", "maxTriggerDelay": "5s"}, "maxTriggerDelay"),
        ({"subscribe": "a", "kafka.isolation.level": "serializable"}, "kafka.isolation.level"),
    ],
)
def test_invalid_options_name_the_option(options: dict, option: str) -> None:
    with pytest.raises(InvalidOption) as raised:
        batch(**options)
    assert raised.value.option == option


def test_missing_path_and_streaming_ending_offsets_are_refused() -> None:
    with pytest.raises(InvalidOption) as raised:
        parse_options({"subscribe": "a"}, streaming=False)
    assert raised.value.option == "path"
    with pytest.raises(InvalidOption) as raised:
        parse_options({**PATH, "subscribe": "a", "endingOffsets": "latest"}, streaming=True)
    assert raised.value.option == "endingOffsets"


def test_offsets_json_and_timestamp_precedence() -> None:
    options = batch(
        assign='{"a":[1,0],"b":[2]}',
        startingOffsets='{"a":{"0":23,"1":-2},"b":{"2":5}}',
        endingOffsets='{"a":{"0":50,"1":-1},"b":{"2":-1}}',
    )
    assert options.topics == Assign((("a", 0), ("a", 1), ("b", 2)))
    assert options.starting == SpecificOffsets({("a", 0): 23, ("a", 1): -2, ("b", 2): 5})
    assert options.ending == SpecificOffsets({("a", 0): 50, ("a", 1): -1, ("b", 2): -1})
    options = batch(subscribe="a", startingOffsets="earliest", startingOffsetsByTimestamp='{"a":{"0":1000}}')
    assert options.starting == PartitionTimestamps({("a", 0): 1000})
    options = batch(subscribe="a", startingOffsetsByTimestamp='{"a":{"0":1000}}', startingTimestamp="2000", endingTimestamp="3000")
    assert options.starting == GlobalTimestamp(2000) and options.ending == GlobalTimestamp(3000)


def test_aws_options_and_environment_resolve_the_location() -> None:
    options = parse_options(
        {"path": "s3://bucket-a/cluster?region=eu-west-1", "subscribe": "a", "aws_access_key_id": "AK", "AWS_SECRET_ACCESS_KEY": "SK"},
        streaming=False,
    )
    environ = {"AWS_ACCESS_KEY_ID": "env", "AWS_SECRET_ACCESS_KEY": "env", "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "us-east-2"}
    location = resolve_location(options.path, options.store_env, environ)
    store = location.store
    assert (store.bucket, store.prefix, store.region) == ("bucket-a", "cluster/", "eu-west-1")
    assert (store.access_key_id, store.secret_access_key) == ("AK", "SK")
    assert store.endpoint_url == "http://127.0.0.1:9000"
    assert pickle.loads(pickle.dumps(location)) == location
    assert pickle.loads(pickle.dumps(options)) == options


def test_filters_on_the_four_columns_are_pushed_and_the_rest_returned() -> None:
    utc = datetime.timezone.utc
    t0 = datetime.datetime(2024, 1, 1, tzinfo=utc)
    filters = [
        EqualTo(("topic",), "a"),
        In(("partition",), (1, 2, 5)),
        LessThan(("partition",), 5),
        GreaterThanOrEqual(("offset",), 10),
        LessThanOrEqual(("offset",), 99),
        GreaterThan(("timestamp",), t0),
        LessThan(("timestamp",), t0 + datetime.timedelta(microseconds=500)),
        IsNotNull(("offset",)),
        EqualTo(("key",), b"k"),
        Not(EqualTo(("partition",), 2)),
        GreaterThan(("timestamp",), datetime.datetime(2024, 1, 1)),  # naive: left to Spark
        GreaterThan(("offset",), 1.5),
    ]
    pushdown, rejected = push_filters(filters)
    assert rejected == filters[8:]
    assert all(any(r is f for f in filters) for r in rejected)
    micros = 1_704_067_200_000_000
    assert pushdown == Pushdown(
        topics=frozenset({"a"}),
        partitions=frozenset({1, 2, 5}),
        max_partition=4,
        bounds=RecordBounds(10, 100, micros + 1, micros + 499),
    )
    assert [p for p in range(8) if pushdown.allows_partition(p)] == [1, 2]
    assert pushdown.bounds.min_timestamp_ms == 1_704_067_200_001


def test_contradicting_filters_make_an_empty_pushdown() -> None:
    pushdown, _ = push_filters([EqualTo(("topic",), "a"), EqualTo(("topic",), "b")])
    assert pushdown.is_empty
    pushdown, _ = push_filters([GreaterThan(("offset",), 10), LessThan(("offset",), 5)])
    assert pushdown.is_empty
    pushdown, _ = push_filters([EqualTo(("offset",), 7)])
    assert not pushdown.is_empty and (pushdown.bounds.start_offset, pushdown.bounds.end_offset) == (7, 8)


def test_a_few_partitions_named_by_filters_are_listed_one_by_one() -> None:
    def named(*filters: object, most: int = 16) -> frozenset[int] | None:
        return push_filters(list(filters))[0].named_partitions(most)

    assert named() is None
    assert named(EqualTo(("partition",), 1)) == {1}
    assert named(GreaterThanOrEqual(("partition",), 2), LessThanOrEqual(("partition",), 5)) == {2, 3, 4, 5}
    assert named(GreaterThan(("partition",), 3)) is None  # unbounded
    assert named(LessThan(("partition",), 17)) is None and named(LessThan(("partition",), 16)) == set(range(16))
    assert named(In(("partition",), (1, 7, None)), LessThan(("partition",), 5)) == {1}
    assert named(In(("partition",), tuple(range(20)))) is None


def test_importing_the_reader_loads_no_asyncio_nor_broker() -> None:
    code = (
        "import sys, spark_reader, spark_reader.catalogue, spark_reader.read, spark_reader.hot_tail, spark_reader.plan;"
        "from spark_reader import DisklessDataSource; import spark_reader.stream;"
        "bad = [m for m in ('asyncio', 'aiobotocore', 'diskless.broker', 'diskless.wire', 'kio') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_isolation_level_is_read_uncommitted_unless_read_committed_is_asked_for() -> None:
    assert batch(subscribe="a").read_committed is False
    assert batch(subscribe="a", **{"kafka.isolation.level": "read_uncommitted"}).read_committed is False
    assert batch(subscribe="a", **{"kafka.isolation.level": "READ_COMMITTED"}).read_committed is True
    with pytest.raises(InvalidOption, match='expected "read_uncommitted" or "read_committed"'):
        batch(subscribe="a", **{"kafka.isolation.level": "serializable"})
    # The last stable offset and the aborted transactions come from the bucket alone.
    with pytest.raises(InvalidOption) as raised:
        batch(subscribe="a", **{"kafka.isolation.level": "read_committed", "kafka.bootstrap.servers": "127.0.0.1:9092"})
    assert raised.value.reason == "read_committed reads the bucket alone (every acknowledged record is there): leave out kafka.bootstrap.servers"
