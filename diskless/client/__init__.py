"""The asyncio Kafka client of Diskless: `Producer`, `Consumer` and `Admin`.

    from diskless.client import Producer, Consumer

    async with Producer(bootstrap_servers="127.0.0.1:9092") as producer:
        await producer.send_and_wait("orders", b"one", key=b"k")

It speaks the Kafka wire protocol (through `diskless.wire`) to any Kafka-compatible broker,
and the record format through `hot_tier.records`. Nothing else of Diskless is imported.
"""

from typing import TYPE_CHECKING

from .errors import (
    BrokerResponseError,
    ClientClosedError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    SaslAuthenticationFailedError,
)
from .producer import DeliveryFuture, Producer
from .structs import (
    ConfigEntry,
    ConsumerGroupMetadata,
    ConsumerRecord,
    NewTopic,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicDescription,
    TopicPartition,
)

# The admin, consumer and security modules are imported on first use (PEP 562): `diskless produce`
# needs the producer only, and the start of a short command is part of its time.
_WHERE = {"Admin": "admin", "ClientSecurity": "security", "Consumer": "consumer", "RebalanceListener": "group"}

if TYPE_CHECKING:
    from .admin import Admin
    from .security import ClientSecurity
    from .consumer import Consumer
    from .group import RebalanceListener


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_WHERE))


__all__ = [
    "Admin",
    "DeliveryFuture",
    "Producer",
    "BrokerResponseError",
    "ClientClosedError",
    "ClientSecurity",
    "ConfigEntry",
    "Consumer",
    "ConsumerGroupMetadata",
    "RebalanceListener",
    "ConsumerRecord",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "RecordMetadata",
    "SaslAuthenticationFailedError",
    "TopicDescription",
    "TopicPartition",
]
