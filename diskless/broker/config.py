"""Broker configuration: parsed and validated once by the CLI, then read-only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .compaction.config import CleanerConfig
from .connection_limits import INT32_MAX, ConnectionLimits, parse_per_ip_overrides
from .quotas.client_quotas import QuotaWindows
from .security.config import ListenerSecurity, SecurityConfig


@dataclass(frozen=True, slots=True)
class Listener:
    """One more Kafka listener, as an entry of Kafka's `listeners` / `advertised.listeners`
    past the first (the first is listen_host/listen_port and advertised_host/advertised_port):
    clients that connect here are told `advertised_host:advertised_port` in Metadata."""

    host: str
    port: int
    advertised_host: str | None = None  # defaults to host
    advertised_port: int | None = None  # defaults to the bound port
    security: ListenerSecurity = ListenerSecurity()  # its name and security protocol


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    data_dir: Path = Path("diskless-data")
    listen_host: str = "127.0.0.1"
    listen_port: int = 9092
    advertised_host: str | None = None  # defaults to listen_host
    advertised_port: int | None = None  # defaults to the bound port
    metadata_url: str | None = None  # defaults to sqlite:///<data_dir>/metadata.db
    object_store_url: str | None = None  # defaults to file://<data_dir>/bucket
    listener_security: ListenerSecurity = ListenerSecurity()  # the first listener's name and protocol
    security: SecurityConfig = SecurityConfig()  # TLS, SASL and ACL settings
    # More listeners, e.g. one for the host and one for a container network (docker-compose.yml).
    extra_listeners: tuple[Listener, ...] = ()
    http_host: str | None = None
    http_port: int | None = None
    node_id: int = 1
    # Kafka broker settings, same names with dots as underscores.
    socket_request_max_bytes: int = 104857600
    # Connection and memory limits (connection_limits.py), Kafka's defaults but where noted.
    max_connections: int = INT32_MAX
    max_connections_per_ip: int = INT32_MAX
    max_connections_per_ip_overrides: str = ""  # Kafka's text: "host:count,ip:count"; validated by the CLI
    max_connection_creation_rate: int = INT32_MAX  # connections per second, broker-wide (KIP-612)
    connections_max_idle_ms: int = 600000
    queued_max_request_bytes: int = 256 * 2**20  # Kafka's default is -1 (no bound)
    request_arrival_timeout_ms: int = 30000  # no Kafka name: slow senders are cut after it
    # Partition limits (partition_limits.py): Kafka's MAX_PARTITIONS_PER_BATCH, and a total.
    max_partitions_per_request: int = 10000
    max_partitions: int = INT32_MAX  # no Kafka name; no limit by default
    auto_create_topics_enable: bool = True  # Kafka's default
    num_partitions: int = 1
    default_replication_factor: int = 1
    log_retention_check_interval_ms: int = 300000
    group_initial_rebalance_delay_ms: int = 3000
    offsets_topic_num_partitions: int = 50  # coordinator slots (cluster/slots.py)
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    offsets_retention_minutes: int = 10080
    producer_id_expiration_ms: int = 86400000
    upload_concurrency: int = 4  # segment uploads in flight across partitions
    # remote.log.manager.fetch.max.bytes.per.second (Long.MAX_VALUE: none) and its quota's windows
    remote_fetch_max_bytes_per_second: int = 2**63 - 1
    remote_fetch_quota_window_num: int = 11
    remote_fetch_quota_window_size_seconds: int = 1
    max_incremental_fetch_session_cache_slots: int = 1000  # KIP-227 sessions kept
    quota_windows: QuotaWindows = QuotaWindows()  # quota.window.num/.size.seconds, controller.quota.window.*
    local_disk_limit_bytes: int = 10 * 2**30  # segments waiting for the bucket; past it produce fails (-1: no limit)
    # KIP-848 consumer groups (group.consumer.*), Kafka's defaults.
    group_consumer_session_timeout_ms: int = 45000
    group_consumer_min_session_timeout_ms: int = 45000
    group_consumer_heartbeat_interval_ms: int = 5000
    group_consumer_min_heartbeat_interval_ms: int = 5000
    broker_rack: str | None = None  # broker.rack
    replica_selector_class: str | None = None  # replica.selector.class: rack-aware reads from any broker (KIP-392)
    broker_session_timeout_ms: int = 9000  # broker.session.timeout.ms
    broker_heartbeat_interval_ms: int = 500  # broker.heartbeat.interval.ms (Kafka: 2000; faster hand-over here)
    auto_leader_rebalance_enable: bool = True  # auto.leader.rebalance.enable
    leader_imbalance_check_interval_seconds: int = 300  # leader.imbalance.check.interval.seconds
    leader_imbalance_per_broker_percentage: int = 10  # leader.imbalance.per.broker.percentage
    wal_enable: bool = True  # write-ahead objects: acks=all durable in the bucket
    wal_commit_interval_ms: int = 5  # wal.commit.interval.ms
    wal_buffer_max_bytes: int = 8 * 2**20  # wal.buffer.max.bytes
    wal_max_pending_bytes: int = 64 * 2**20  # wal.max.pending.bytes
    object_store_env: Mapping[str, str] = field(default_factory=dict)  # AWS_* settings the CLI read
    # Broker-wide defaults for topic configs (Kafka names, e.g. {"retention.ms": "3600000"}).
    topic_defaults: Mapping[str, str] = field(default_factory=dict)
    cleaner: CleanerConfig = CleanerConfig()  # log.cleaner.* (compaction/config.py)

    @property
    def connection_limits(self) -> ConnectionLimits:
        return ConnectionLimits(
            max_connections=self.max_connections,
            max_connections_per_ip=self.max_connections_per_ip,
            max_connections_per_ip_overrides=parse_per_ip_overrides(self.max_connections_per_ip_overrides),
            max_connection_creation_rate=self.max_connection_creation_rate,
            connections_max_idle_ms=self.connections_max_idle_ms,
            queued_max_request_bytes=self.queued_max_request_bytes,
            request_arrival_timeout_ms=self.request_arrival_timeout_ms,
        )

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def resolved_metadata_url(self) -> str:
        return self.metadata_url or f"sqlite:///{(self.data_dir / 'metadata.db').resolve()}"

    @property
    def resolved_object_store_url(self) -> str:
        return self.object_store_url or f"file://{(self.data_dir / 'bucket').resolve()}"
