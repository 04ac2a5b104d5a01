"""Reader options, parsed once into a frozen `ReadOptions`. Names and meanings follow Spark's
Kafka source (Structured Streaming + Kafka Integration Guide) wherever they apply:

    subscribe | subscribePattern | assign    exactly one: "a,b" | a Python regex, matched in
                                             full against topic names | {"a":[0,1]}
    startingOffsets                          "earliest" | "latest" (streaming only) |
                                             {"a":{"0":23,"1":-2}}, -2 earliest, -1 latest
    endingOffsets                            batch only: "latest" | {"a":{"0":50,"1":-1}}
    startingTimestamp, endingTimestamp       ms since the epoch, for every partition
    startingOffsetsByTimestamp,              {"a":{"0":1700000000000}}: per partition
      endingOffsetsByTimestamp
    startingOffsetsByTimestampStrategy       "error" (default) | "latest": when no record is at
                                             or after a starting timestamp
    minPartitions, maxRecordsPerPartition    split the offset ranges into more Spark tasks
    maxOffsetsPerTrigger                     streaming: cap on records per micro-batch
    includeHeaders                           add the headers column (default false)
    pushDownPredicate                        default false: Spark evaluates every filter. true:
                                             the reader prunes by topic, partition, offset and
                                             timestamp filters (needs the session conf
                                             spark.sql.python.filterPushdown.enabled=true), right
                                             only for a DataFrame scanned once: Spark 4.3 reuses
                                             a pushed plan for later scans of the same DataFrame
                                             (source.py)
    failOnDataLoss                           fail (default true) or skip when records are gone
    kafka.bootstrap.servers                  optional: also read the hot tail from a broker
    kafka.isolation.level                    read_uncommitted (default) or read_committed: only
                                             committed transactions' records, up to the last
                                             stable offset, from the bucket alone (committed.py)

Spark's Kafka-source options this source does not implement fail with InvalidOption naming
them (UNSUPPORTED_OPTIONS), rather than being ignored: minOffsetsPerTrigger and maxTriggerDelay
(streaming), and read_committed together with kafka.bootstrap.servers (a read_committed read
takes its last stable offset and aborted transactions from the bucket alone).
Options that only tune a Kafka consumer (kafka.*, groupIdPrefix, fetchOffset.*, ...) have no
meaning without one and are ignored, as they would change nothing.

Precedence as in Spark: a ...Timestamp option wins over ...OffsetsByTimestamp, which wins
over ...Offsets. Offsets named in JSON must cover every partition read (Spark: "you must
specify all TopicPartitions"). Option names are case-insensitive, as Spark's are.

The bucket is the path given to `load()` (option "path"). Credentials and endpoint may also be
given as options named like the AWS variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_SESSION_TOKEN, AWS_ENDPOINT_URL, AWS_REGION, ...); see bucket.py for the precedence.
Pure: no I/O, no environment. Everything here is picklable (it travels to Spark's workers).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import InvalidOption

EARLIEST = -2
LATEST = -1
TopicPartition = tuple[str, int]

AWS_OPTION_NAMES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
)


@dataclass(frozen=True, slots=True)
class Subscribe:
    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SubscribePattern:
    pattern: str

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.pattern, topic) is not None


@dataclass(frozen=True, slots=True)
class Assign:
    partitions: tuple[TopicPartition, ...]

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(sorted({topic for topic, _ in self.partitions}))


TopicSelection = Subscribe | SubscribePattern | Assign


@dataclass(frozen=True, slots=True)
class Earliest:
    pass


@dataclass(frozen=True, slots=True)
class Latest:
    pass


@dataclass(frozen=True, slots=True)
class SpecificOffsets:
    """Offsets per partition: >= 0, or EARLIEST (-2) / LATEST (-1)."""

    offsets: Mapping[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class GlobalTimestamp:
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class PartitionTimestamps:
    timestamps_ms: Mapping[TopicPartition, int]


OffsetSpec = Earliest | Latest | SpecificOffsets | GlobalTimestamp | PartitionTimestamps


@dataclass(frozen=True, slots=True)
class ReadOptions:
    path: str
    topics: TopicSelection
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamp_strategy_latest: bool = False
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    include_headers: bool = False
    fail_on_data_loss: bool = True
    push_down_predicate: bool = False
    bootstrap_servers: tuple[str, ...] = ()
    read_committed: bool = False
    store_env: Mapping[str, str] = field(default_factory=dict, repr=False)


UNSUPPORTED_OPTIONS = {
    "minoffsetspertrigger": ("minOffsetsPerTrigger", "not supported by the diskless source: a trigger reads what is there"),
    "maxtriggerdelay": ("maxTriggerDelay", "not supported by the diskless source: a trigger reads what is there"),
}


def parse_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Check and parse the options of one `load()`; `InvalidOption` says what is wrong."""
    lower = {str(name).lower(): value for name, value in options.items()}
    for name, (option, reason) in UNSUPPORTED_OPTIONS.items():
        if name in lower:
            raise InvalidOption(option, lower[name], reason)
    isolation = str(lower.get("kafka.isolation.level", "read_uncommitted")).strip().lower()
    if isolation not in ("read_uncommitted", "read_committed"):
        raise InvalidOption("kafka.isolation.level", isolation, 'expected "read_uncommitted" or "read_committed"')
    path = lower.get("path")
    if not path:
        raise InvalidOption(
            "path", path, 'give the object-store URL to load(), e.g. load("s3://bucket/prefix") or load("file:///dir")'
        )
    topics = _topic_selection(lower)
    starting = _offset_spec(lower, "starting", streaming=streaming)
    if streaming and any(name in lower for name in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")):
        raise InvalidOption("endingOffsets", None, "ending offsets are not valid in streaming queries")
    ending = Latest() if streaming else _offset_spec(lower, "ending", streaming=False)
    strategy = lower.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise InvalidOption("startingOffsetsByTimestampStrategy", strategy, 'expected "error" or "latest"')
    servers = tuple(s.strip() for s in lower.get("kafka.bootstrap.servers", "").split(",") if s.strip())
    for server in servers:
        _host_port("kafka.bootstrap.servers", server)
    if servers and isolation == "read_committed":
        raise InvalidOption(
            "kafka.isolation.level", isolation,
            "read_committed reads the bucket alone (every acknowledged record is there): leave out kafka.bootstrap.servers",
        )  # fmt: skip
    return ReadOptions(
        path=str(path),
        topics=topics,
        starting=starting,
        ending=ending,
        starting_timestamp_strategy_latest=strategy == "latest",
        min_partitions=_positive_int(lower, "minPartitions"),
        max_records_per_partition=_positive_int(lower, "maxRecordsPerPartition"),
        max_offsets_per_trigger=_positive_int(lower, "maxOffsetsPerTrigger"),
        include_headers=_boolean(lower, "includeHeaders", False),
        fail_on_data_loss=_boolean(lower, "failOnDataLoss", True),
        push_down_predicate=_boolean(lower, "pushDownPredicate", False),
        bootstrap_servers=servers,
        read_committed=isolation == "read_committed",
        store_env={name: str(lower[name.lower()]) for name in AWS_OPTION_NAMES if lower.get(name.lower())},
    )


def _topic_selection(lower: Mapping[str, str]) -> TopicSelection:
    given = [name for name in ("subscribe", "subscribepattern", "assign") if name in lower]
    if len(given) != 1:
        raise InvalidOption(
            "subscribe", None, "exactly one of the options subscribe, subscribePattern and assign must be given"
        )
    name = given[0]
    value = lower[name]
    if name == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in str(value).split(",") if t.strip()))
        if not topics:
            raise InvalidOption("subscribe", value, "no topics to subscribe to")
        return Subscribe(topics)
    if name == "subscribepattern":
        pattern = str(value).strip()
        if not pattern:
            raise InvalidOption("subscribePattern", value, "the pattern is empty")
        try:
            re.compile(pattern)
        except re.error as error:
            raise InvalidOption("subscribePattern", value, f"not a regular expression: {error}") from None
        return SubscribePattern(pattern)
    parsed = _json_object("assign", value)
    partitions: list[TopicPartition] = []
    for topic, indexes in parsed.items():
        if not isinstance(indexes, list) or not all(_is_int(i) and i >= 0 for i in indexes):
            raise InvalidOption("assign", value, f'expected {{"topic":[0,1,...]}}, got {topic!r}: {indexes!r}')
        partitions.extend((topic, i) for i in indexes)
    if not partitions:
        raise InvalidOption("assign", value, "no partitions assigned")
    return Assign(tuple(sorted(set(partitions))))


def _offset_spec(lower: Mapping[str, str], which: str, *, streaming: bool) -> OffsetSpec:
    option = f"{which}Offsets"
    if f"{which}timestamp" in lower:
        return GlobalTimestamp(_timestamp(f"{which}Timestamp", lower[f"{which}timestamp"]))
    if f"{which}offsetsbytimestamp" in lower:
        name = f"{which}OffsetsByTimestamp"
        return PartitionTimestamps({tp: _timestamp(name, ts) for tp, ts in _partition_json(name, lower[name.lower()]).items()})
    raw = lower.get(option.lower())
    if raw is None:
        return Earliest() if which == "starting" and not streaming else Latest()
    text = str(raw).strip()
    if text.lower() == "earliest":
        if which == "ending":
            raise InvalidOption(option, raw, "ending offsets cannot be earliest")
        return Earliest()
    if text.lower() == "latest":
        if which == "starting" and not streaming:
            raise InvalidOption(option, raw, "starting offsets cannot be latest for batch queries")
        return Latest()
    offsets = _partition_json(option, text)
    for (topic, partition), offset in offsets.items():
        if not _is_int(offset) or offset < EARLIEST:
            raise InvalidOption(option, raw, f"offset of {topic}-{partition} must be >= 0, -1 or -2, got {offset!r}")
        if which == "ending" and offset == EARLIEST:
            raise InvalidOption(option, raw, f"ending offset of {topic}-{partition} cannot be earliest (-2)")
        if which == "starting" and offset == LATEST and not streaming:
            raise InvalidOption(option, raw, f"starting offset of {topic}-{partition} cannot be latest (-1) for batch queries")
    return SpecificOffsets(offsets)


def _partition_json(option: str, raw: object) -> dict[TopicPartition, object]:
    parsed = _json_object(option, raw)
    result: dict[TopicPartition, object] = {}
    for topic, per_partition in parsed.items():
        if not isinstance(per_partition, dict):
            raise InvalidOption(option, raw, f'expected {{"topic":{{"0":value}}}}, got {topic!r}: {per_partition!r}')
        for partition, value in per_partition.items():
            if not re.fullmatch(r"0|[1-9][0-9]*", partition):
                raise InvalidOption(option, raw, f"{partition!r} is not a partition number")
            result[(topic, int(partition))] = value
    return result


def _json_object(option: str, raw: object) -> dict:
    try:
        parsed = json.loads(str(raw))
    except json.JSONDecodeError as error:
        raise InvalidOption(option, raw, f"not valid JSON: {error}") from None
    if not isinstance(parsed, dict):
        raise InvalidOption(option, raw, "expected a JSON object")
    return parsed


def _timestamp(option: str, raw: object) -> int:
    if _is_int(raw):
        return int(raw)  # type: ignore[arg-type]
    text = str(raw).strip()
    if not re.fullmatch(r"-?[0-9]+", text):
        raise InvalidOption(option, raw, "expected a timestamp in milliseconds since the epoch")
    return int(text)


def _positive_int(lower: Mapping[str, str], option: str) -> int | None:
    raw = lower.get(option.lower())
    if raw is None:
        return None
    text = str(raw).strip()
    if not re.fullmatch(r"[0-9]+", text) or int(text) <= 0:
        raise InvalidOption(option, raw, "expected a positive integer")
    return int(text)


def _boolean(lower: Mapping[str, str], option: str, default: bool) -> bool:
    raw = lower.get(option.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise InvalidOption(option, raw, 'expected "true" or "false"')
    return text == "true"


def _host_port(option: str, server: str) -> tuple[str, int]:
    host, _, port = server.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidOption(option, server, "expected host:port[,host:port...]")
    return host.strip("[]"), int(port)


def parse_host_port(server: str) -> tuple[str, int]:
    return _host_port("kafka.bootstrap.servers", server)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
