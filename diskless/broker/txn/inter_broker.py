"""Requests one broker's transaction machinery sends another, over a short connection each to
the other broker's inter-broker listener (Kafka's inter.broker.listener.name), with that
listener's TLS and SASL, as this broker's own principal (security/config.InterBrokerSecurity).

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
verification and the TxnOffsetCommit handler call it. A broker that cannot be reached or
refuses the login raises ConnectionError (an OSError), one that does not answer in time
TimeoutError.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from typing import Any

from kio.schema.describe_transactions.v0 import request as describe_transactions_v0
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2 import request as sasl_authenticate_v2
from kio.schema.sasl_handshake.v1 import request as sasl_handshake_v1
from kio.schema.write_txn_markers.v1 import request as write_txn_markers_v1

from diskless.wire import encode_request, parse_response, response_type
from diskless.wire.sasl import client_exchange
from diskless.wire.scram import ScramError
from metadata import BrokerRegistration

from ..security.config import InterBrokerSecurity, TlsSettings
from ..security.tls import client_context

CLIENT_ID = "diskless-txn-coordinator"
_SIZE = struct.Struct(">i")


class InterBrokerClient:
    """This broker as a client of the others, on their inter-broker listener."""

    def __init__(self, settings: InterBrokerSecurity, tls: TlsSettings | None) -> None:
        self.listener = settings.listener.name
        self._settings = settings
        self._tls = client_context(tls) if settings.listener.uses_tls else None

    def address(self, registration: BrokerRegistration) -> tuple[str, int] | None:
        """Where this broker reaches `registration`'s broker; None if it has no such listener."""
        return registration.endpoint(self.listener)

    async def write_txn_markers(
        self, address: tuple[str, int], producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
        partitions: list[tuple[str, int]], timeout_s: float,
    ) -> dict[tuple[str, int], ErrorCode]:  # fmt: skip
        """Each partition's error code as the remote leader answered (NONE: the marker is durable).
        Raises ConnectionError / TimeoutError when the broker cannot be reached in time."""
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
        response = await self._exchange(address, body, timeout_s)
        answered = {(t.name, p.partition_index): p.error_code for m in response.markers for t in m.topics for p in t.partitions}
        return {key: answered.get(key, ErrorCode.unknown_server_error) for key in partitions}

    async def describe_transaction(self, address: tuple[str, int], transactional_id: str, timeout_s: float) -> Any:
        """The coordinator's DescribeTransactions answer for one transactional id (its
        TransactionState: error_code, transaction_state, producer_id, producer_epoch, topics).
        Raises ConnectionError / TimeoutError when the broker cannot be reached in time."""
        body = describe_transactions_v0.DescribeTransactionsRequest(transactional_ids=(transactional_id,))
        (state,) = (await self._exchange(address, body, timeout_s)).transaction_states
        return state

    async def txn_offset_commit(self, address: tuple[str, int], body: Any, timeout_s: float) -> dict[tuple[str, int], ErrorCode]:
        """Each partition's error code as the transactional id's coordinator answered the client's
        TxnOffsetCommit `body` (any version). Raises ConnectionError / TimeoutError when the
        broker cannot be reached in time."""
        response = await self._exchange(address, body, timeout_s)
        return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}

    async def _exchange(self, address: tuple[str, int], body: Any, timeout_s: float) -> Any:
        host, port = address
        settings = self._settings
        if settings.listener.uses_sasl and (settings.username is None or settings.password is None):
            raise ConnectionError(f"broker {host}:{port}: the inter-broker listener {self.listener} uses SASL and this broker has "
                                  "no login for it (--sasl-jaas-config)")  # fmt: skip
        async with asyncio.timeout(timeout_s):
            try:
                reader, writer = await asyncio.open_connection(host, port, ssl=self._tls, server_hostname=host if self._tls else None)
            except ssl.SSLError as exc:
                raise ConnectionError(f"broker {host}:{port}: TLS handshake failed: {exc.reason or exc}") from None
            try:
                if self._settings.listener.uses_sasl:
                    await self._login(reader, writer, f"{host}:{port}")
                return await _call(reader, writer, body)
            finally:
                writer.close()

    async def _login(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str) -> None:
        """SaslHandshake v1, then SaslAuthenticate v2 until the login is complete (KIP-152)."""
        settings = self._settings
        assert settings.username is not None and settings.password is not None  # checked by _exchange
        handshake = await _call(reader, writer, sasl_handshake_v1.SaslHandshakeRequest(mechanism=settings.sasl_mechanism))
        _refused(handshake.error_code, None, peer, f"SASL mechanism {settings.sasl_mechanism}")
        exchange = client_exchange(settings.sasl_mechanism, settings.username, settings.password)
        try:
            token = next(exchange)
            while True:
                answer = await _call(reader, writer, sasl_authenticate_v2.SaslAuthenticateRequest(auth_bytes=token))
                _refused(answer.error_code, answer.error_message, peer, f"login as {settings.username}")
                try:
                    token = exchange.send(answer.auth_bytes)
                except StopIteration:
                    return
        except ScramError as exc:
            raise ConnectionError(f"broker {peer}: SCRAM login as {settings.username} failed: {exc.reason}") from None


async def _call(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, body: Any) -> Any:
    writer.write(encode_request(1, CLIENT_ID, body))
    await writer.drain()
    try:
        (size,) = _SIZE.unpack(await reader.readexactly(_SIZE.size))
        _, response = parse_response(await reader.readexactly(size), response_type(body.__api_key__, body.__version__))
    except asyncio.IncompleteReadError:
        raise ConnectionError("the broker closed the connection") from None
    return response


def _refused(code: ErrorCode, message: str | None, peer: str, what: str) -> None:
    if code is not ErrorCode.none:
        raise ConnectionError(f"broker {peer} refused the {what}: {code.name.upper()}{f' ({message})' if message else ''}")
