"""The hot tail: records a broker holds but has not tiered yet, read with a small synchronous
Kafka client (blocking socket, `diskless.wire` framing, kio types), so that one query sees
the whole log: segments from the bucket up to its log end offset, then the broker from there
to its high watermark.

Requests, at fixed non-flexible versions every diskless broker speaks (diskless.wire.apis):

    Metadata v4      topics, partitions and each partition's leader (driver, at planning)
    ListOffsets v2   EARLIEST (-2), LATEST (-1, the high watermark) or a timestamp (driver)
    Fetch v4         read_uncommitted, as Spark's Kafka source reads by default (worker)

The high watermark is read once, when the query is planned: a task reads up to it and no
further, so records appended meanwhile are not half-seen. A fetch that finds its offset gone
(OFFSET_OUT_OF_RANGE below the broker's log start) is data loss; failOnDataLoss decides.

`diskless.wire` and kio import asyncio, so this module imports them only inside functions:
importing spark_reader stays free of asyncio (DESIGN.md, package table). A connection is used
by one thread.
"""

from __future__ import annotations

import datetime
import logging
import socket
import struct
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from .decode import RecordBounds, batches_to_arrow, select_batches
from .errors import BrokerError, BrokerUnavailable, DataLoss
from .options import parse_host_port
from .plan import BrokerOffsets, BrokerRange
from .read import ROWS_PER_ARROW_BATCH

log = logging.getLogger(__name__)

METADATA_VERSION = 4
LIST_OFFSETS_VERSION = 2
FETCH_VERSION = 4
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
FETCH_MAX_BYTES = 8 * 1024 * 1024
MAX_FETCH_BYTES = 512 * 1024 * 1024  # a batch larger than this is refused (max.message.bytes is far below)
FETCH_MAX_WAIT_MS = 500
SOCKET_TIMEOUT_S = 30.0
_CLIENT_ID = "diskless-spark-reader"
_NONE = 0
_OFFSET_OUT_OF_RANGE = 1
_UNKNOWN_TOPIC_OR_PARTITION = 3
_SIZE = struct.Struct(">i")


class KafkaConnection:
    """One blocking connection to a broker; `request` sends a kio request, returns the reply."""

    def __init__(self, address: str, timeout_s: float = SOCKET_TIMEOUT_S) -> None:
        host, port = parse_host_port(address)
        self.address = address
        try:
            self._socket = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as error:
            raise BrokerUnavailable(address, str(error)) from None
        self._correlation_id = 0

    def request(self, body: Any) -> Any:
        from diskless.wire import encode_request, parse_response, response_type

        self._correlation_id += 1
        try:
            self._socket.sendall(encode_request(self._correlation_id, _CLIENT_ID, body))
            (size,) = _SIZE.unpack(self._read_exactly(4))
            frame = self._read_exactly(size)
        except OSError as error:
            raise BrokerUnavailable(self.address, str(error)) from None
        correlation_id, response = parse_response(frame, response_type(body.__api_key__, body.__version__))
        if correlation_id != self._correlation_id:
            raise BrokerUnavailable(self.address, f"answer to request {correlation_id}, expected {self._correlation_id}")
        return response

    def _read_exactly(self, size: int) -> bytes:
        chunks = []
        remaining = size
        while remaining:
            chunk = self._socket.recv(min(remaining, 1 << 20))
            if not chunk:
                raise BrokerUnavailable(self.address, "connection closed by the broker")
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self._socket.close()

    def __enter__(self) -> KafkaConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(servers: Iterable[str]) -> KafkaConnection:
    """A connection to the first reachable bootstrap server."""
    failure: BrokerUnavailable | None = None
    for server in servers:
        try:
            return KafkaConnection(server)
        except BrokerUnavailable as error:
            failure = error
    raise failure or BrokerUnavailable("", "no kafka.bootstrap.servers given")


def describe_topics(connection: KafkaConnection, topics: Iterable[str] | None) -> dict[str, dict[int, str]]:
    """topic -> partition -> leader "host:port", from Metadata; `topics` None means every topic.
    Topics the broker does not know are left out, as Spark's Kafka source leaves them out."""
    from diskless.wire import request_type

    cls = request_type(3, METADATA_VERSION)
    topic_cls = _nested(cls, "MetadataRequestTopic")
    listed = None if topics is None else tuple(topic_cls(name=t) for t in topics)
    response = connection.request(cls(topics=listed, allow_auto_topic_creation=False))
    brokers = {b.node_id: f"{b.host}:{b.port}" for b in response.brokers}
    result: dict[str, dict[int, str]] = {}
    for topic in response.topics:
        if _code(topic.error_code) == _UNKNOWN_TOPIC_OR_PARTITION:
            continue
        if _code(topic.error_code) != _NONE:
            raise BrokerError("Metadata", _code(topic.error_code), str(topic.name))
        result[str(topic.name)] = {
            p.partition_index: brokers.get(p.leader_id, connection.address) for p in topic.partitions
        }
    return result


def list_offsets(
    connection: KafkaConnection, partitions: Iterable[tuple[str, int]], timestamp: int
) -> dict[tuple[str, int], int | None]:
    """ListOffsets for one timestamp (or EARLIEST/LATEST): offset per partition, None when no
    record is at or after a timestamp."""
    from diskless.wire import request_type

    cls = request_type(2, LIST_OFFSETS_VERSION)
    topic_cls, partition_cls = _nested(cls, "ListOffsetsTopic"), _nested(cls, "ListOffsetsPartition")
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    request = cls(
        replica_id=-1,
        isolation_level=0,
        topics=tuple(
            topic_cls(name=t, partitions=tuple(partition_cls(partition_index=p, timestamp=timestamp) for p in ps))
            for t, ps in by_topic.items()
        ),
    )
    result: dict[tuple[str, int], int | None] = {}
    for topic in connection.request(request).topics:
        for answer in topic.partitions:
            if _code(answer.error_code) != _NONE:
                raise BrokerError("ListOffsets", _code(answer.error_code), str(topic.name), answer.partition_index)
            result[(str(topic.name), answer.partition_index)] = None if answer.offset < 0 else int(answer.offset)
    return result


def broker_offsets(servers: Iterable[str], topics: Iterable[str] | None) -> dict[tuple[str, int], BrokerOffsets]:
    """Log start offset, high watermark and leader of every partition of `topics`."""
    with connect(servers) as bootstrap:
        described = describe_topics(bootstrap, topics)
    by_leader: dict[str, list[tuple[str, int]]] = {}
    for topic, partitions in described.items():
        for partition, leader in partitions.items():
            by_leader.setdefault(leader, []).append((topic, partition))
    result: dict[tuple[str, int], BrokerOffsets] = {}
    for leader, partitions in by_leader.items():
        with KafkaConnection(leader) as connection:
            starts = list_offsets(connection, partitions, EARLIEST_TIMESTAMP)
            ends = list_offsets(connection, partitions, LATEST_TIMESTAMP)
        for tp in partitions:
            result[tp] = BrokerOffsets(starts[tp] or 0, ends[tp] or 0, leader)
    return result


def broker_offset_for_timestamp(leader: str, topic: str, partition: int, timestamp_ms: int) -> int | None:
    with KafkaConnection(leader) as connection:
        return list_offsets(connection, [(topic, partition)], timestamp_ms)[(topic, partition)]


def read_broker_range(
    task: BrokerRange, bounds: RecordBounds, include_headers: bool, fail_on_data_loss: bool
) -> Iterator[pa.RecordBatch]:
    """The records [task.start_offset, task.end_offset) of the partition, fetched from its
    leader, filtered by `bounds`, as Arrow batches."""
    end = min(task.end_offset, bounds.end_offset)
    cursor = max(task.start_offset, bounds.start_offset)
    max_bytes = FETCH_MAX_BYTES
    empty_fetches = 0
    with KafkaConnection(task.leader) as connection:
        while cursor < end:
            records, error, high_watermark = _fetch(connection, task.topic, task.partition, cursor, max_bytes)
            if error == _OFFSET_OUT_OF_RANGE:
                cursor = _skip_lost(connection, task, cursor, fail_on_data_loss)
                continue
            if error != _NONE:
                raise BrokerError("Fetch", error, task.topic, task.partition)
            if not records:
                if high_watermark <= cursor:  # the log was truncated below the planned end
                    if fail_on_data_loss:
                        reason = f"the broker's high watermark fell to {high_watermark}"
                        raise DataLoss(task.topic, task.partition, cursor, None, reason)
                    return
                empty_fetches += 1
                if empty_fetches * FETCH_MAX_WAIT_MS > SOCKET_TIMEOUT_S * 1000:
                    reason = f"no records at offset {cursor} of {task.topic}-{task.partition}, below its high watermark"
                    raise BrokerUnavailable(task.leader, reason)
                continue
            empty_fetches = 0
            window = RecordBounds(cursor, end, bounds.min_timestamp_us, bounds.max_timestamp_us)
            selection = select_batches(records, window)
            if selection.next_offset is None and not selection.reached_end:
                # Only part of a batch larger than max_bytes came back: ask for more.
                if max_bytes >= MAX_FETCH_BYTES:
                    raise BrokerUnavailable(task.leader, f"a batch at offset {cursor} is larger than {MAX_FETCH_BYTES} bytes")
                max_bytes *= 4
                continue
            batch = batches_to_arrow(records, selection.headers, task.topic, task.partition, window, include_headers)
            if batch is not None:
                for offset in range(0, batch.num_rows, ROWS_PER_ARROW_BATCH):
                    yield batch.slice(offset, ROWS_PER_ARROW_BATCH)
            if selection.reached_end or selection.next_offset is None:
                return
            cursor = selection.next_offset


def _skip_lost(connection: KafkaConnection, task: BrokerRange, cursor: int, fail_on_data_loss: bool) -> int:
    """OFFSET_OUT_OF_RANGE at `cursor`: the records from there are gone if the broker's log
    now starts later (data loss), else the broker is wrong about its own log."""
    tp = (task.topic, task.partition)
    earliest = list_offsets(connection, [tp], EARLIEST_TIMESTAMP)[tp]
    if earliest is None or earliest <= cursor:
        raise BrokerError("Fetch", _OFFSET_OUT_OF_RANGE, task.topic, task.partition)
    if fail_on_data_loss:
        raise DataLoss(task.topic, task.partition, cursor, earliest, "the broker no longer holds these offsets")
    log.warning(
        "%s-%d: skipping offsets [%d, %d): gone from the broker (failOnDataLoss=false)", task.topic, task.partition, cursor, earliest
    )
    return earliest


def _fetch(connection: KafkaConnection, topic: str, partition: int, offset: int, max_bytes: int) -> tuple[bytes, int, int]:
    from diskless.wire import request_type

    cls = request_type(1, FETCH_VERSION)
    topic_cls, partition_cls = _nested(cls, "FetchTopic"), _nested(cls, "FetchPartition")
    request = cls(
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=FETCH_MAX_WAIT_MS),
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=0,
        topics=(
            topic_cls(
                topic=topic,
                partitions=(partition_cls(partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes),),
            ),
        ),
    )
    response = connection.request(request)
    for answer_topic in response.responses:
        for answer in answer_topic.partitions:
            if str(answer_topic.topic) == topic and answer.partition_index == partition:
                return bytes(answer.records or b""), _code(answer.error_code), int(answer.high_watermark)
    raise BrokerError("Fetch", -1, topic, partition)


def _nested(cls: type, name: str) -> type:
    import sys

    return getattr(sys.modules[cls.__module__], name)


def _code(error_code: Any) -> int:
    return int(getattr(error_code, "value", error_code))
