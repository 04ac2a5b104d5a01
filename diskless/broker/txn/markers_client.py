"""Requests one broker's transaction machinery sends another, over a short connection each:
plaintext, without SASL (inter-broker security is not configured yet).

- WriteTxnMarkers (API 27, v1), sent by the transaction coordinator to the broker leading a
  partition of a transaction that this broker does not lead (Kafka's TransactionMarkerChannel
  Manager). The receiving broker answers once each marker is durable.
- DescribeTransactions (API 65, v0, KIP-664), sent by a partition leader to the transactional
  id's coordinator before the first batch of a transaction it has not seen (KIP-890 part 1:
  was the partition added to the transaction?), when that coordinator is another broker.
- TxnOffsetCommit, which clients send to the group's coordinator: that broker hands it on, as
  the client wrote it, to the transactional id's coordinator, which holds the transaction's
  pending offsets (txn/transactions.py) when the two ids hash to slots of different brokers.

Only the coordinator's completion tasks (txn/transactions.py), the Produce handler's
verification and the TxnOffsetCommit handler call it.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from kio.schema.describe_transactions.v0 import request as describe_transactions_v0
from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1 import request as write_txn_markers_v1

from diskless.wire import encode_request, parse_response, response_type

CLIENT_ID = "diskless-txn-coordinator"
_SIZE = struct.Struct(">i")


async def write_txn_markers(
    host: str, port: int, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
    partitions: list[tuple[str, int]], timeout_s: float,
) -> dict[tuple[str, int], ErrorCode]:  # fmt: skip
    """Each partition's error code as the remote leader answered (NONE: the marker is durable).
    Raises OSError / asyncio.TimeoutError when the broker cannot be reached in time."""
    mod = write_txn_markers_v1
    topics: dict[str, list[int]] = {}
    for topic, index in partitions:
        topics.setdefault(topic, []).append(index)
    body = mod.WriteTxnMarkersRequest(markers=(
        mod.WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit, coordinator_epoch=coordinator_epoch,
            topics=tuple(mod.WritableTxnMarkerTopic(name=t, partition_indexes=tuple(ps)) for t, ps in topics.items()),
        ),
    ))  # fmt: skip
    response = await _exchange(host, port, body, timeout_s)
    answered = {(t.name, p.partition_index): p.error_code for m in response.markers for t in m.topics for p in t.partitions}
    return {key: answered.get(key, ErrorCode.unknown_server_error) for key in partitions}


async def describe_transaction(host: str, port: int, transactional_id: str, timeout_s: float) -> Any:
    """The coordinator's DescribeTransactions answer for one transactional id (its
    TransactionState: error_code, transaction_state, producer_id, producer_epoch, topics).
    Raises OSError / asyncio.TimeoutError when the broker cannot be reached in time."""
    body = describe_transactions_v0.DescribeTransactionsRequest(transactional_ids=(transactional_id,))
    (state,) = (await _exchange(host, port, body, timeout_s)).transaction_states
    return state


async def txn_offset_commit(host: str, port: int, body: Any, timeout_s: float) -> dict[tuple[str, int], ErrorCode]:
    """Each partition's error code as the transactional id's coordinator answered the client's
    TxnOffsetCommit `body` (any version). Raises OSError / asyncio.TimeoutError when the broker
    cannot be reached in time."""
    response = await _exchange(host, port, body, timeout_s)
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


async def _exchange(host: str, port: int, body: Any, timeout_s: float) -> Any:
    async with asyncio.timeout(timeout_s):
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(encode_request(1, CLIENT_ID, body))
            await writer.drain()
            (size,) = _SIZE.unpack(await reader.readexactly(_SIZE.size))
            _, response = parse_response(await reader.readexactly(size), response_type(body.__api_key__, body.__version__))
        finally:
            writer.close()
    return response
