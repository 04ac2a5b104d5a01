"""Failure handling through a TCP proxy on 127.0.0.1 that cuts or stalls connections.

The broker advertises the proxy's address, so every connection the client opens (bootstrap and
leaders) goes through it. Cutting a connection right after the broker answered a Produce loses
the answer: the client must retry, and with idempotence the broker drops the duplicate, so
every record lands exactly once and in order.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from diskless.client import Admin, Consumer, KafkaTimeoutError, Producer, TopicPartition

from .test_client_brokers import BROKERS, RunningBroker, new_name, start_broker

DEADLINE_S = 60.0
PADDING = b"x" * 100  # about 8 records per 1 KiB batch: hundreds of Produce requests


class Proxy:
    """Forwards 127.0.0.1:port to the broker. `cut_between` = (low, high): each connection is
    aborted once it has carried a random number of broker-to-client bytes in that range (the
    chunk that crosses it is dropped). `stalled`: broker-to-client bytes are swallowed."""

    def __init__(self, listener: socket.socket, target_port: int, cut_between: tuple[int, int] | None = None) -> None:
        self._listener = listener  # bound before the broker started, so that no one takes its port meanwhile
        self.port = listener.getsockname()[1]
        self.target_port = target_port
        self.cut_between = cut_between
        self.stalled = False
        self.cuts = 0
        self._rng = random.Random(1234)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, sock=self._listener)

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        await self._server.wait_closed()

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_writer.transport.abort()
            return
        self._writers |= {client_writer, upstream_writer}
        limit = self._rng.randint(*self.cut_between) if self.cut_between else None

        def abort() -> None:
            client_writer.transport.abort()
            upstream_writer.transport.abort()

        async def up() -> None:
            while data := await client_reader.read(65536):
                upstream_writer.write(data)
                await upstream_writer.drain()

        async def down() -> None:
            carried = 0
            while data := await upstream_reader.read(65536):
                if self.stalled:
                    continue
                carried += len(data)
                if limit is not None and self.cut_between is not None and carried > limit:
                    self.cuts += 1
                    abort()
                    return
                client_writer.write(data)
                await client_writer.drain()

        try:
            await asyncio.gather(up(), down())
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            abort()
            self._writers -= {client_writer, upstream_writer}


@pytest.fixture(params=BROKERS)
async def proxied_broker(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[RunningBroker, Proxy]]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    broker = await asyncio.to_thread(start_broker, request.param, tmp_path / "data", advertised_port=listener.getsockname()[1])
    proxy = Proxy(listener, broker.port)
    await proxy.start()
    try:
        yield broker, proxy
    finally:
        await proxy.close()
        await asyncio.to_thread(broker.stop)


async def test_idempotent_producer_writes_each_record_once_despite_cut_connections(proxied_broker) -> None:
    broker, proxy = proxied_broker
    bootstrap = f"127.0.0.1:{proxy.port}"
    topic = new_name()
    async with Admin(bootstrap) as admin:
        await admin.create_topics(topic, 2)
    proxy.cut_between = (3000, 6000)  # after the handshake: a few dozen Produce answers per connection
    count = 3000
    async with Producer(
        bootstrap, batch_size=1024, linger_ms=0, retry_backoff_ms=20, retry_backoff_max_ms=100, request_timeout_ms=5000
    ) as producer:
        assert producer.config.enable_idempotence
        deliveries = [await producer.send(topic, b"%d:" % i + PADDING, partition=i % 2) for i in range(count)]
        metadata = [await d for d in deliveries]
    assert proxy.cuts >= 3, f"the proxy cut only {proxy.cuts} connections: the test proved nothing"
    proxy.cut_between = None
    for partition in (0, 1):
        offsets = [m.offset for m in metadata if m.partition == partition]
        if broker.kind == "tansu":
            # Tansu answers a retried batch with DUPLICATE_SEQUENCE_NUMBER and no offset, which
            # Kafka's clients report as success at offset -1.
            offsets = [i if offset == -1 else offset for i, offset in enumerate(offsets)]
        assert offsets == list(range(count // 2)), "acknowledged offsets are not contiguous"
    got: dict[int, list[int]] = {0: [], 1: []}
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        deadline = time.monotonic() + DEADLINE_S
        while sum(map(len, got.values())) < count:
            assert time.monotonic() < deadline
            for tp, records in (await consumer.getmany(timeout_ms=1000)).items():
                got[tp.partition] += [int(r.value.split(b":")[0]) for r in records]
        assert await consumer.getmany(timeout_ms=300) == {}, "duplicates past the expected count"
    assert got[0] == list(range(0, count, 2)), "partition 0 has duplicates, gaps or reordering"
    assert got[1] == list(range(1, count, 2)), "partition 1 has duplicates, gaps or reordering"


async def test_unanswered_requests_fail_after_the_delivery_timeout(proxied_broker) -> None:
    broker, proxy = proxied_broker
    bootstrap = f"127.0.0.1:{proxy.port}"
    topic = new_name()
    async with Admin(bootstrap) as admin:
        await admin.create_topics(topic, 1)
    async with Producer(bootstrap, request_timeout_ms=500, delivery_timeout_ms=4000, linger_ms=0, retry_backoff_ms=50) as producer:
        await producer.partitions_for(topic)
        proxy.stalled = True
        delivery = await producer.send(topic, b"lost")
        with pytest.raises(KafkaTimeoutError):
            await asyncio.wait_for(delivery, DEADLINE_S)
        proxy.stalled = False
        meta = await asyncio.wait_for(producer.send_and_wait(topic, b"after"), DEADLINE_S)
        assert meta.partition == 0


async def test_send_blocks_on_a_full_buffer_and_fails_after_max_block_ms(proxied_broker) -> None:
    broker, proxy = proxied_broker
    bootstrap = f"127.0.0.1:{proxy.port}"
    topic = new_name()
    async with Admin(bootstrap) as admin:
        await admin.create_topics(topic, 1)
    producer = Producer(bootstrap, buffer_memory=4096, batch_size=1024, max_block_ms=300, linger_ms=0,
                        request_timeout_ms=30000, delivery_timeout_ms=60000)  # fmt: skip
    await producer.start()
    try:
        await producer.partitions_for(topic)
        proxy.stalled = True
        with pytest.raises(KafkaTimeoutError) as info:
            for _ in range(100):
                await producer.send(topic, b"x" * 200)
        assert "buffer" in str(info.value) and info.value.timeout_ms == 300
    finally:
        proxy.stalled = False
        await asyncio.wait_for(_close_quietly(producer), DEADLINE_S)


async def _close_quietly(producer: Producer) -> None:
    try:
        await producer.close(timeout_ms=2000)
    except KafkaTimeoutError:
        pass
