"""Producer and consumer settings: Kafka's names (dots as underscores) and defaults, checked once.

The constructors of `Producer` and `Consumer` take these as keyword arguments and build the
frozen config; the parts (accumulator, sender, fetcher, group membership) read only the few
fields they need. `security=ClientSecurity(...)` (security.py) is the one setting that is not a
plain value: TLS and SASL, given to the producer, consumer and admin client alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hot_tier.records import Compression

if TYPE_CHECKING:
    from .security import ClientSecurity

_ACKS = {"all": -1, -1: -1, "-1": -1, 0: 0, "0": 0, 1: 1, "1": 1}
_COMPRESSION = {
    "none": Compression.NONE,
    None: Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}
ASSIGNORS = ("range", "roundrobin", "cooperative-sticky")


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    bootstrap_servers: str = "127.0.0.1:9092"
    client_id: str = "diskless-producer"
    acks: int = -1
    compression_type: int = Compression.NONE
    # Java's default is 16384. Ours is larger: a batch here grows as records arrive rather
    # than being preallocated at batch_size, so the limit costs no memory when traffic is
    # light, and under load fewer, larger Produce requests cost the client and broker less.
    batch_size: int = 262144
    linger_ms: int = 5
    buffer_memory: int = 32 * 1024 * 1024
    max_block_ms: int = 60000
    max_request_size: int = 1048576
    request_timeout_ms: int = 30000
    delivery_timeout_ms: int = 120000
    retries: int = 2**31 - 1
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    max_in_flight_requests_per_connection: int = 5
    enable_idempotence: bool = True
    metadata_max_age_ms: int = 300000
    transactional_id: str | None = None  # transactional.id: transactions (transaction.py)
    transaction_timeout_ms: int = 60000  # transaction.timeout.ms
    # security.protocol, sasl.*, ssl.*: TLS and SASL for every connection, as Admin(security=...)
    # takes them (security.py); None is PLAINTEXT.
    security: ClientSecurity | None = None

    @classmethod
    def from_kwargs(
        cls,
        *,
        acks: int | str = "all",
        compression_type: str | None = "none",
        enable_idempotence: bool | None = None,
        **kwargs: object,
    ) -> ProducerConfig:
        if acks not in _ACKS:
            raise ValueError(f"acks must be 0, 1 or 'all' (-1), not {acks!r}")
        if compression_type not in _COMPRESSION:
            raise ValueError(f"compression_type must be one of none, gzip, snappy, lz4, zstd, not {compression_type!r}")
        acks_value = _ACKS[acks]
        if kwargs.get("transactional_id") is not None:
            if enable_idempotence is False or acks_value != -1:
                raise ValueError("a transactional producer is idempotent: transactional_id needs acks='all' and idempotence")
            enable_idempotence = True
        if enable_idempotence is None:
            # As the Java client: on by default, quietly off when other settings rule it out.
            enable_idempotence = acks_value == -1 and int(kwargs.get("max_in_flight_requests_per_connection", 5)) <= 5  # type: ignore[call-overload]
        elif enable_idempotence and acks_value != -1:
            raise ValueError("enable_idempotence=True needs acks='all'")
        config = cls(acks=acks_value, compression_type=_COMPRESSION[compression_type], enable_idempotence=enable_idempotence, **kwargs)  # type: ignore[arg-type]
        config.check()
        return config

    def check(self) -> None:
        if self.batch_size <= 0 or self.buffer_memory < self.batch_size:
            raise ValueError("batch_size must be positive and buffer_memory at least batch_size")
        if self.enable_idempotence and not 1 <= self.max_in_flight_requests_per_connection <= 5:
            raise ValueError("idempotence needs max_in_flight_requests_per_connection between 1 and 5")
        if self.max_in_flight_requests_per_connection < 1:
            raise ValueError("max_in_flight_requests_per_connection must be at least 1")
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            raise ValueError("delivery_timeout_ms must be at least linger_ms + request_timeout_ms")
        for name in ("linger_ms", "max_block_ms", "retries", "retry_backoff_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    bootstrap_servers: str = "127.0.0.1:9092"
    client_id: str = "diskless-consumer"
    group_id: str | None = None
    group_instance_id: str | None = None
    auto_offset_reset: str = "latest"
    allow_auto_create_topics: bool = True  # allow.auto.create.topics
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5000
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 52428800
    fetch_max_wait_ms: int = 500
    max_partition_fetch_bytes: int = 1048576
    max_poll_records: int = 500
    max_poll_interval_ms: int = 300000
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 3000
    partition_assignment_strategy: tuple[str, ...] = ("range", "roundrobin")
    # "classic" (JoinGroup/SyncGroup, the assignor runs in the leader) or "consumer" (KIP-848:
    # ConsumerGroupHeartbeat, the broker assigns with `group_remote_assignor`, None: its default).
    group_protocol: str = "classic"
    group_remote_assignor: str | None = None
    isolation_level: int = 0
    check_crcs: bool = True
    request_timeout_ms: int = 30000
    retry_backoff_ms: int = 100
    metadata_max_age_ms: int = 300000
    exclude_internal_topics: bool = True
    security: ClientSecurity | None = None  # TLS and SASL, as for the producer

    @classmethod
    def from_kwargs(
        cls,
        *,
        partition_assignment_strategy: str | tuple[str, ...] | list[str] = ("range", "roundrobin"),
        isolation_level: str | int = "read_uncommitted",
        **kwargs: object,
    ) -> ConsumerConfig:
        if isinstance(partition_assignment_strategy, str):
            partition_assignment_strategy = tuple(s.strip() for s in partition_assignment_strategy.split(","))
        strategies = tuple(partition_assignment_strategy)
        for strategy in strategies:
            if strategy not in ASSIGNORS:
                raise ValueError(f"unknown partition assignment strategy {strategy!r}; known: {', '.join(ASSIGNORS)}")
        if "cooperative-sticky" in strategies and len(strategies) > 1:
            raise ValueError("cooperative-sticky cannot be mixed with eager strategies in one consumer")
        levels = {"read_uncommitted": 0, "read_committed": 1, 0: 0, 1: 1}
        if isolation_level not in levels:
            raise ValueError(f"isolation_level must be read_uncommitted or read_committed, not {isolation_level!r}")
        config = cls(partition_assignment_strategy=strategies, isolation_level=levels[isolation_level], **kwargs)  # type: ignore[arg-type]
        if config.auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(f"auto_offset_reset must be earliest, latest or none, not {config.auto_offset_reset!r}")
        if config.group_protocol not in ("classic", "consumer"):
            raise ValueError(f"group_protocol must be classic or consumer, not {config.group_protocol!r}")
        if config.max_poll_records < 1 or config.fetch_max_wait_ms < 0:
            raise ValueError("max_poll_records must be positive and fetch_max_wait_ms not negative")
        return config
