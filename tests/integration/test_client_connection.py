"""One connection: version negotiation (KIP-511 fallback), pipelining, timeouts, protocol errors.

A scripted fake broker on 127.0.0.1 plays the odd cases; a real broker checks pipelining.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable

import pytest
from kio.schema.errors import ErrorCode

from diskless.client import Admin, Producer, protocol
from diskless.client.connection import Connection
from diskless.client.errors import KafkaConnectionError, NoBrokersAvailable, RequestTimedOut
from diskless.wire import encode_response_bytes

from .broker_process import free_port
from .test_client_brokers import RunningBroker, kafka_broker, new_name  # noqa: F401

Handler = Callable[[int, int, int, asyncio.StreamWriter], Awaitable[None]]


class FakeBroker:
    """Reads request frames and hands (api_key, api_version, correlation_id) to `handler`."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[tuple[int, int]] = []
        self.port = free_port()
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> FakeBroker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                api_key, api_version, correlation_id = struct.unpack_from(">hhi", frame, 0)
                self.requests.append((api_key, api_version))
                await self.handler(api_key, api_version, correlation_id, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def api_versions_response(version: int, error_code: int = 0, keys=((18, 0, 2), (3, 0, 12))):
    cls = protocol.response_class(protocol.API_VERSIONS, version)
    key_cls = protocol.nested(cls, "ApiVersion")
    return protocol.build(
        cls,
        error_code=ErrorCode(error_code),
        api_keys=tuple(key_cls(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in keys),
        throttle_time=protocol.ms(0),
    )


async def test_an_older_broker_gets_the_api_versions_version_it_knows() -> None:
    async def handler(api_key: int, api_version: int, correlation_id: int, writer: asyncio.StreamWriter) -> None:
        assert api_key == protocol.API_VERSIONS
        if api_version > 2:  # KIP-511: a v0 body with UNSUPPORTED_VERSION and our ranges
            writer.write(encode_response_bytes(correlation_id, api_versions_response(0, error_code=35)))
        else:
            writer.write(encode_response_bytes(correlation_id, api_versions_response(api_version)))

    async with FakeBroker(handler) as fake:
        connection = await Connection.open("127.0.0.1", fake.port, client_id="t", request_timeout_ms=5000)
        assert fake.requests == [(18, 3), (18, 2)]
        assert connection.api_versions == {18: (0, 2), 3: (0, 12)}
        assert connection.version(protocol.METADATA) == 12
        assert not connection.supports(protocol.PRODUCE)
        connection.close()


async def test_an_unanswered_request_times_out_and_closes_the_connection() -> None:
    async def handler(api_key: int, api_version: int, correlation_id: int, writer: asyncio.StreamWriter) -> None:
        if api_key == protocol.API_VERSIONS:
            writer.write(encode_response_bytes(correlation_id, api_versions_response(api_version)))
        # anything else: never answered

    async with FakeBroker(handler) as fake:
        connection = await Connection.open("127.0.0.1", fake.port, client_id="t", request_timeout_ms=5000)
        metadata = protocol.build(protocol.request_class(protocol.METADATA, 12), topics=None,
                                  allow_auto_topic_creation=False, include_topic_authorized_operations=False)  # fmt: skip
        slow = connection.send(metadata, timeout_ms=5000)
        with pytest.raises(RequestTimedOut) as info:
            await connection.request(metadata, timeout_ms=200)
        assert info.value.timeout_ms == 200 and info.value.api_name == "Metadata"
        assert connection.closed
        with pytest.raises(KafkaConnectionError):
            await slow  # in flight on the same connection: failed when it closed
        with pytest.raises(KafkaConnectionError):
            await connection.request(metadata)


async def test_a_response_for_no_request_closes_the_connection() -> None:
    async def handler(api_key: int, api_version: int, correlation_id: int, writer: asyncio.StreamWriter) -> None:
        if api_key == protocol.API_VERSIONS:
            writer.write(encode_response_bytes(correlation_id, api_versions_response(api_version)))
        else:
            writer.write(struct.pack(">ii", 4, correlation_id + 1000))

    async with FakeBroker(handler) as fake:
        connection = await Connection.open("127.0.0.1", fake.port, client_id="t", request_timeout_ms=5000)
        metadata = protocol.build(protocol.request_class(protocol.METADATA, 12), topics=None,
                                  allow_auto_topic_creation=False, include_topic_authorized_operations=False)  # fmt: skip
        with pytest.raises(KafkaConnectionError) as info:
            await connection.request(metadata)
        assert "protocol error" in info.value.reason and connection.closed


async def test_nothing_listening_is_a_connection_error() -> None:
    port = free_port()
    with pytest.raises(KafkaConnectionError):
        await Connection.open("127.0.0.1", port, client_id="t", request_timeout_ms=2000)
    with pytest.raises(NoBrokersAvailable):
        async with Admin(f"127.0.0.1:{port}"):
            pass


async def test_pipelined_requests_are_matched_to_their_answers(kafka_broker: RunningBroker) -> None:
    connection = await Connection.open("127.0.0.1", kafka_broker.port, client_id="t", request_timeout_ms=10000)
    try:
        cls = protocol.request_class(protocol.METADATA, connection.version(protocol.METADATA))
        topic_cls = protocol.nested(cls, "MetadataRequestTopic")
        names = [new_name("missing") for _ in range(200)]
        futures = [
            connection.send(protocol.build(cls, topics=(protocol.build(topic_cls, name=n, topic_id=None),),
                                           allow_auto_topic_creation=False, include_topic_authorized_operations=False))
            for n in names
        ]  # fmt: skip
        assert connection.in_flight > 0
        answers = await asyncio.gather(*futures)
        assert [a.topics[0].name for a in answers] == names
        assert all(a.topics[0].error_code == 3 for a in answers)
        assert connection.in_flight == 0
    finally:
        connection.close()


async def test_a_broker_without_init_producer_id_gets_a_non_idempotent_producer(caplog: pytest.LogCaptureFixture) -> None:
    async def handler(api_key: int, api_version: int, correlation_id: int, writer: asyncio.StreamWriter) -> None:
        if api_key == protocol.API_VERSIONS:  # Produce and Metadata, but no InitProducerId (22)
            body = api_versions_response(api_version, keys=((18, 0, 3), (3, 0, 12), (0, 3, 9)))
        else:
            cls = protocol.response_class(protocol.METADATA, api_version)
            broker_cls = protocol.nested(cls, "MetadataResponseBroker")
            body = protocol.build(cls, throttle_time=protocol.ms(0), cluster_id="fake", controller_id=1, topics=(),
                                  brokers=(broker_cls(node_id=1, host="127.0.0.1", port=fake.port, rack=None),))  # fmt: skip
        writer.write(encode_response_bytes(correlation_id, body))

    async with FakeBroker(handler) as fake:
        producer = Producer(f"127.0.0.1:{fake.port}")
        assert producer.config.enable_idempotence
        with caplog.at_level("WARNING", logger="diskless.client.producer"):
            await producer.start()
        try:
            assert not producer.config.enable_idempotence
            assert "does not support InitProducerId" in caplog.text
        finally:
            await producer.close()
