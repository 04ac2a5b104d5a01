"""The asyncio Kafka client of Diskless: `Producer`, `Consumer` and `Admin`.

    from diskless.client import Producer, Consumer

    async with Producer(bootstrap_servers="127.0.0.1:9092") as producer:
        await producer.send_and_wait("orders", b"one", key=b"k")

It speaks the Kafka wire protocol (through `diskless.wire`) to any Kafka-compatible broker,
and the record format through `hot_tier.records`. Nothing else of Diskless is imported.
"""

from .admin import Admin
from .consumer import Consumer
from .group import RebalanceListener
from .producer import DeliveryFuture, Producer
from .errors import (
    BrokerResponseError,
    ClientClosedError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
)
from .structs import (
    ConfigEntry,
    ConsumerRecord,
    NewTopic,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicDescription,
    TopicPartition,
)

__all__ = [
    "Admin",
    "DeliveryFuture",
    "Producer",
    "BrokerResponseError",
    "ClientClosedError",
    "ConfigEntry",
    "Consumer",
    "RebalanceListener",
    "ConsumerRecord",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "RecordMetadata",
    "TopicDescription",
    "TopicPartition",
]
