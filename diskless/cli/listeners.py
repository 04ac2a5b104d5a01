"""Kafka listeners past the first, for `diskless serve --listen A,B --advertised-listener A',B'`.

Kafka answers Metadata (and FindCoordinator, DescribeCluster) with the advertised address of
the listener the request came in on, so one broker can be reached both from the host
(127.0.0.1:9092) and from a container network (diskless:19092). The broker binds its first
listener itself; each further one is another `KafkaServer` over the same broker, whose
requests run with that listener's advertised address in a context variable, which the
broker's `advertised_address` returns while it is set. They are bound before the broker starts
(their requests wait for it to be ready), so it registers every listener's address in the
store and the other brokers answer a client with its address on the listener it came in on.

Built and run by the CLI's `serve` only, in the broker's event loop.
"""

from __future__ import annotations

import contextvars
import logging
from typing import Any

from diskless.broker.app import Broker
from diskless.broker.config import BrokerConfig
from diskless.broker.security.tls import server_context
from diskless.broker.server import KafkaServer

log = logging.getLogger("diskless")

# The advertised (host, port) of the listener the current request came in on; None: the first.
ADVERTISED: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar("advertised", default=None)


class MultiListenerBroker(Broker):
    """A Broker that tells each client the address of the listener it connected to."""

    def __init__(self, config: BrokerConfig) -> None:
        super().__init__(config)
        self.extra_endpoints: list[tuple[str, str, int]] = []  # (name, advertised host, port), once bound

    @property
    def advertised_address(self) -> tuple[str, int]:
        current = ADVERTISED.get()
        return current if current is not None else super().advertised_address

    @property
    def listener_endpoints(self) -> tuple[tuple[str, str, int], ...]:
        return (*super().listener_endpoints, *self.extra_endpoints)


class ExtraListeners:
    def __init__(self, broker: MultiListenerBroker, config: BrokerConfig) -> None:
        self.broker = broker
        self.config = config
        self.servers: list[KafkaServer] = []

    async def start(self) -> None:
        for listener in self.config.extra_listeners:
            address: list[tuple[str, int]] = []  # filled once the port is bound (port 0 picks one)
            tls = self.config.security.tls
            server = KafkaServer(
                self._handler(address), listener.host, listener.port, self.config.socket_request_max_bytes, self.config.connection_limits,
                security=listener.security,
                ssl_context=server_context(tls) if listener.security.uses_tls and tls is not None else None,
                creation_rate=self.broker.connection_creation_rate,  # max.connection.creation.rate is broker-wide
                quotas=self.broker.client_quotas,  # client quotas are per broker, not per listener
            )
            await server.start()
            self.servers.append(server)
            self.broker.kafka_servers.append(server)  # bound before the broker starts: dynamic max.connections apply here too
            address.append((listener.advertised_host or listener.host, listener.advertised_port or server.port))
            self.broker.extra_endpoints.append((listener.security.name, *address[0]))
            log.info("also listening on %s:%d (advertised %s:%d), listener %s (%s)", listener.host, server.port, *address[0],
                     listener.security.name, listener.security.protocol)

    def _handler(self, address: list[tuple[str, int]]) -> Any:
        handle = self.broker.handle

        async def handle_here(request: Any) -> Any:
            token = ADVERTISED.set(address[0])
            try:
                return await handle(request)
            finally:
                ADVERTISED.reset(token)

        return handle_here

    async def stop(self) -> None:
        for server in self.servers:
            await server.stop()
        self.servers.clear()

