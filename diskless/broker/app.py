"""The broker: composes the metadata store, the bucket, the partition leaders, the groups and
the TCP server, and is what request handlers talk to (as `api.BrokerApi`).

Composition only: a Kafka decision made here belongs in a leader, a core or a handler. The
parts it wires, each the one owner of its state:

    Registry       topics, and the leader of each partition this broker leads (registry.py)
    Uploader       rolled segments to the bucket, retention passes (tiering/uploader.py)
    RemoteStorage  bucket + catalogue store + the shared remote reader (tiering/remote_log.py)
    Groups         the group coordinator's async shell (groups.py)
    KafkaServer    the TCP shell (server.py); AdminHttp the HTTP shell (admin_http.py)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import logging
from collections.abc import Callable, Mapping
from typing import Any

from cold_tier.local import LocalObjectStore
from cold_tier.remote_log import RemoteLogReader
from cold_tier.url import open_object_store
from diskless.wire import Request
from metadata import MetadataStore, PartitionLeadership, open_metadata_store

from . import dynamic_broker_configs
from .admin_http import AdminHttp
from .api import RequestSettings
from .config import BrokerConfig
from .connection_limits import ConnectionCreationRate, parse_per_ip_overrides
from .cluster.membership import ClusterView, Membership, MembershipSettings
from .cluster.slots import slot_of
from .data_dir import DataDirLock, claim_data_dir
from .group import GroupConfig
from .groups import Groups
from .handlers import HANDLERS
from .refused_batches import RefusedBatches
from .registry import Registry, RegistrySettings
from .replica_reads import BucketReplica
from .fetch_sessions import FetchSessionCache
from .quotas.client_quotas import ClientQuotas
from .quotas.configs import QuotaConfigs
from .tiering.fetch_quota import RemoteFetchQuota
from .security.shell import BrokerSecurity
from .security.tls import server_context
from .server import KafkaServer
from .tiering.remote_log import RemoteStorage
from .tiering.uploader import Uploader
from .txn.coordinator import DEFAULT_TRANSACTION_MAX_TIMEOUT_MS
from .txn.inter_broker import InterBrokerClient
from .txn.transactions import Transactions
from .compaction.cleaner import LogCleaner
from .wal.writer import WalSettings, WalWriter

log = logging.getLogger(__name__)

OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600_000  # offsets.retention.check.interval.ms
WAL_GARBAGE_INTERVAL_S = 10.0  # how often write-ahead objects wholly inside segments are deleted
HAND_OVER_UPLOAD_S = 5.0  # controlled shutdown: how long to wait for the partitions' tails to reach the bucket


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Broker:
    def __init__(self, config: BrokerConfig, clock: Callable[[], int] = now_ms) -> None:
        self.config = config
        self.clock = clock
        self.settings = RequestSettings(
            node_id=config.node_id,
            auto_create_topics_enable=config.auto_create_topics_enable,
            num_partitions=config.num_partitions,
            default_replication_factor=config.default_replication_factor,
            topic_defaults=config.topic_defaults,
            log_dir=str(config.logs_dir.resolve()),
            broker_configs={
                "node.id": str(config.node_id),
                "log.dirs": str(config.logs_dir.resolve()),
                "num.partitions": str(config.num_partitions),
                "default.replication.factor": str(config.default_replication_factor),
                "auto.create.topics.enable": str(config.auto_create_topics_enable).lower(),
                "socket.request.max.bytes": str(config.socket_request_max_bytes),
                "log.retention.check.interval.ms": str(config.log_retention_check_interval_ms),
                "group.initial.rebalance.delay.ms": str(config.group_initial_rebalance_delay_ms),
                "offsets.retention.minutes": str(config.offsets_retention_minutes),
                "max.connections": str(config.connection_limits.max_connections),
                "max.connections.per.ip": str(config.connection_limits.max_connections_per_ip),
                "max.connections.per.ip.overrides": config.max_connections_per_ip_overrides,
                "max.connection.creation.rate": str(config.max_connection_creation_rate),
                **config.cleaner.broker_configs(),
                "remote.log.manager.fetch.max.bytes.per.second": str(config.remote_fetch_max_bytes_per_second),
                "remote.log.manager.fetch.quota.window.num": str(config.remote_fetch_quota_window_num),
                "remote.log.manager.fetch.quota.window.size.seconds": str(config.remote_fetch_quota_window_size_seconds),
                "max.incremental.fetch.session.cache.slots": str(config.max_incremental_fetch_session_cache_slots),
                "quota.window.num": str(config.quota_windows.windows),
                "quota.window.size.seconds": str(config.quota_windows.window_ms // 1000),
                "controller.quota.window.num": str(config.quota_windows.controller_windows),
                "controller.quota.window.size.seconds": str(config.quota_windows.controller_window_ms // 1000),
            },
        )
        self.store: MetadataStore | None = None
        self.registry: Registry
        self.uploader: Uploader
        self.groups: Groups
        self.transactions: Transactions
        self.cluster_id = ""
        self.data_dir_lock: DataDirLock | None = None
        self.security = BrokerSecurity(config.security)
        self.inter_broker = InterBrokerClient(config.security.inter_broker, config.security.tls)
        # max.connection.creation.rate is broker-wide: one rate for every listener (cli/listeners.py).
        self.connection_creation_rate = ConnectionCreationRate(config.max_connection_creation_rate)
        self.client_quotas = ClientQuotas(config.quota_windows)  # every listener's too
        self.quota_configs: QuotaConfigs
        self.server = KafkaServer(
            self.handle, config.listen_host, config.listen_port, config.socket_request_max_bytes, config.connection_limits,
            security=config.listener_security, creation_rate=self.connection_creation_rate, quotas=self.client_quotas,
            ssl_context=server_context(config.security.tls) if config.listener_security.uses_tls and config.security.tls else None,
        )
        self.kafka_servers = [self.server]  # every listener's, for dynamic max.connections(.per.ip)
        self.cleaner: LogCleaner | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.http: AdminHttp | None = None
        self.wal: WalWriter | None = None
        self.membership: Membership | None = None
        self.remote_fetch_quota = RemoteFetchQuota(
            config.remote_fetch_max_bytes_per_second, windows=config.remote_fetch_quota_window_num,
            window_s=config.remote_fetch_quota_window_size_seconds,
        )  # fmt: skip
        self.replica_reads: BucketReplica | None = None  # set at start when replica.selector.class is
        self.refused_batches = RefusedBatches()
        self.fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots)
        # Set once the broker joined the cluster and opened its partitions: the listener is
        # bound before (its port is what the broker registers), requests wait for this.
        self._ready = asyncio.Event()
        self._coordinating_epochs: dict[int, int] = {}  # coordinator slot -> epoch held at the last view applied

    # --- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir_lock = claim_data_dir(self.config.data_dir, self.config.node_id)  # before any other file in it
        self.cluster_id = self.data_dir_lock.cluster_id
        self.store = await open_metadata_store(self.config.resolved_metadata_url)
        self.quota_configs = QuotaConfigs(self.store, self.client_quotas)
        # The cluster id lives in the store: every broker sharing it reports the same one.
        self.data_dir_lock.adopt_cluster_id(await self.store.get_or_create_cluster_id(self.data_dir_lock.cluster_id))
        self.cluster_id = self.data_dir_lock.cluster_id
        await self.security.start(self.store)
        await self.quota_configs.load()
        self.quota_configs.start()
        self.bucket = open_object_store(self.config.resolved_object_store_url, env=self.config.object_store_env)
        c = self.config
        # 8 MiB ranged GETs, 32 MiB read ahead: per-request latency to S3 is tens of ms.
        reader = RemoteLogReader(self.bucket, chunk_bytes=8 * 2**20, prefetch_chunks=4, cache_bytes=256 * 2**20)
        self.storage = RemoteStorage(self.bucket, self.store, reader)
        self.replica_reads = BucketReplica(self.store, self.storage) if c.replica_selector_class else None
        self.uploader = Uploader(
            self.bucket, lambda: self.registry.leaders(), self.clock,
            upload_concurrency=c.upload_concurrency, local_disk_limit_bytes=c.local_disk_limit_bytes,
        )  # fmt: skip
        if c.wal_enable:
            # A directory bucket's PUTs are fsyncs on one disk: side by side they queue in the
            # file system's journal and each takes several times as long (acks=all p50 39 ->
            # 17 ms at 1,000 records/s with one in flight); S3 PUTs are round trips that overlap.
            wal_settings = WalSettings(c.wal_commit_interval_ms, c.wal_buffer_max_bytes, c.wal_max_pending_bytes)
            if isinstance(self.bucket, LocalObjectStore):
                wal_settings = dataclasses.replace(wal_settings, max_in_flight=1)
            self.wal = WalWriter(self.bucket, self.store, c.node_id, self.clock, wal_settings)
            if not self.data_dir_lock.created:  # a restart: the earlier processes on this directory are gone
                self.wal.orphans_final_before_ms = self.clock()
            self.wal.start()  # before the registry: recovery resubmits what the local log holds above the durable end
        registry_settings = RegistrySettings(
            c.node_id, c.logs_dir, c.topic_defaults, c.num_partitions, c.producer_id_expiration_ms,
            max_partitions_per_request=c.max_partitions_per_request, max_partitions=c.max_partitions,
        )  # fmt: skip
        self.registry = Registry(registry_settings, self.store, self.storage, self.uploader, self.wal, self.clock)
        self.registry.static_broker_configs = self.settings.broker_configs
        self.registry.on_broker_configs = self._apply_broker_configs  # dynamic broker configs, at once
        await self.registry.load()
        group_config = GroupConfig(
            group_min_session_timeout_ms=c.group_min_session_timeout_ms,
            group_max_session_timeout_ms=c.group_max_session_timeout_ms,
            group_initial_rebalance_delay_ms=c.group_initial_rebalance_delay_ms,
            group_consumer_session_timeout_ms=c.group_consumer_session_timeout_ms,
            group_consumer_min_session_timeout_ms=c.group_consumer_min_session_timeout_ms,
            group_consumer_heartbeat_interval_ms=c.group_consumer_heartbeat_interval_ms,
            group_consumer_min_heartbeat_interval_ms=c.group_consumer_min_heartbeat_interval_ms,
        )
        # Offset writes are conditional on the group's coordinator slot epoch (groups.py).
        self.groups = Groups(group_config, self.store, self.clock, c.offsets_retention_minutes * 60_000, self._coordinator_of)
        self.groups.start()
        # Transactional ids hash to the same coordinator slots as groups (cluster/slots.py).
        self.transactions = Transactions(
            self.store, self.registry.leader, self.allocate_producer_id, self.clock,
            self._coordinator_of, self._slots_held,
            DEFAULT_TRANSACTION_MAX_TIMEOUT_MS, self._partition_leader_address, self.inter_broker,
            find_topic=self.registry.find_topic,  # a deleted topic's markers are dropped
        )  # fmt: skip
        await self.server.start()
        # Join the cluster once the listener's port is known: register, take the first view,
        # open the partitions this broker leads (rebuilt from the bucket where needed).
        host, port = self.advertised_address
        self.membership = Membership(
            self.store,
            MembershipSettings(
                c.node_id, host, port, c.broker_rack, f"{c.node_id}:{self.data_dir_lock.meta.directory_id}",
                c.broker_session_timeout_ms, c.broker_heartbeat_interval_ms, c.auto_leader_rebalance_enable,
                c.leader_imbalance_check_interval_seconds, c.leader_imbalance_per_broker_percentage, self.listener_endpoints,
                c.offsets_topic_num_partitions,
            ),
            self._apply_view, self._lost_session,
        )  # fmt: skip
        self.registry.may_write = self.membership.may_write
        await self.membership.join()
        self.membership.start()
        self.uploader.start()  # after the partitions opened: its passes go over every one of them
        self._ready.set()
        self.transactions.start()  # finishes transactions found preparing, aborts timed-out ones
        if self.config.http_host is not None:
            self.http = AdminHttp(
                self.registry, self.uploader, self.config.http_host, self.config.http_port or 0, self.groups,
                authenticate=self.security.check_password if self.config.security.http_basic_auth else None,
                transactions=self.transactions,
            )
            await self.http.start()
            log.info("admin HTTP on http://%s:%d", self.config.http_host, self.http.port)
        self._tasks.append(asyncio.create_task(self._retention_loop(), name="retention"))
        self._tasks.append(asyncio.create_task(self._offsets_expiry_loop(), name="offsets-expiry"))
        if c.cleaner.enable and c.cleaner.threads > 0:  # compacted topics (compaction/cleaner.py)
            cleaner_config = dynamic_broker_configs.cleaner_config(c.cleaner, self.registry.broker_config_values())
            self.cleaner = LogCleaner(cleaner_config, lambda: self.registry.leaders(), self.clock)
            self._tasks.append(asyncio.create_task(self.cleaner.run(), name="log-cleaner"))
        if self.wal is not None:
            self._tasks.append(asyncio.create_task(self._wal_garbage_loop(), name="wal-garbage"))
        host, port = self.advertised_address
        log.info(
            "diskless broker %d ready on %s:%d (advertised %s:%d), cluster %s, data in %s, object store %s",
            self.config.node_id, self.config.listen_host, self.server.port, host, port, self.cluster_id, self.config.data_dir,
            self.config.resolved_object_store_url,
        )

    async def stop(self) -> None:
        if self.membership is not None:
            await self._hand_over()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.http is not None:
            await self.http.stop()
        await self.security.stop()
        if self.store is not None:
            await self.quota_configs.stop()
            await self.transactions.stop()
            await self.groups.stop()
        await self.server.stop()
        if self.wal is not None:
            await self.wal.stop()  # what was appended becomes durable before the bucket closes
        if self.store is not None:
            await self.uploader.stop()
            self.registry.close()
            await self.storage.reader.close()
            await self.bucket.close()
            await self.store.close()
        log.info("diskless broker %d stopped", self.config.node_id)
        if self.data_dir_lock is not None:
            self.data_dir_lock.release()

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def cluster(self) -> ClusterView:
        return self.membership.view if self.membership is not None else ClusterView()

    @property
    def advertised_address(self) -> tuple[str, int]:
        return (self.config.advertised_host or self.config.listen_host, self.config.advertised_port or self.server.port)

    @property
    def listener_endpoints(self) -> tuple[tuple[str, str, int], ...]:
        """(listener name, advertised host, port) of each listener, registered in the store: the
        other brokers tell a client this broker's address on the listener it came in on."""
        return ((self.config.listener_security.name, self.config.advertised_host or self.config.listen_host,
                 self.config.advertised_port or self.server.port),)  # fmt: skip

    # --- operations handlers call ----------------------------------------------------------

    async def handle(self, request: Request) -> Any:
        """The response to one request (None when Kafka sends none)."""
        self.security.admit(request.header.api_key, request.header.api_version)  # SASL first, on SASL listeners
        if not self._ready.is_set():
            await self._ready.wait()
        return await HANDLERS[request.header.api_key](self, request)

    def _partition_leader_address(self, topic: str, index: int) -> tuple[str, int] | None:
        """(host, port) of the other broker leading a partition on its inter-broker listener, or
        None (led here, unknown, or without that listener)."""
        node_id, _ = self.registry.leadership(topic, index)
        registration = self.cluster.brokers.get(node_id) if node_id is not None and node_id != self.config.node_id else None
        return None if registration is None else self.inter_broker.address(registration)

    def _apply_broker_configs(self, values: Mapping[str, str]) -> None:
        """The broker's own dynamic settings changed (dynamic_broker_configs.BROKER_DYNAMIC):
        applied to every listener, the cleaner and the remote fetch quota at once."""
        for server in self.kafka_servers:
            server.set_connection_limits(
                int(values["max.connections"]), int(values["max.connections.per.ip"]),
                parse_per_ip_overrides(values["max.connections.per.ip.overrides"]), int(values["max.connection.creation.rate"]),
            )  # fmt: skip
        if self.cleaner is not None:
            self.cleaner.reconfigure(dynamic_broker_configs.cleaner_config(self.config.cleaner, values))
        self.remote_fetch_quota.bytes_per_second = int(values["remote.log.manager.fetch.max.bytes.per.second"])

    def _coordinator_of(self, key: str) -> tuple[int, int] | None:
        """(slot, epoch) of a group's or transactional id's coordinator slot if held here, and
        taken up (`_apply_view`: whatever this broker knew of its groups forgotten first), while
        this broker's session is valid (a broker cut off from the store may have lost the slot
        already: its members look the coordinator up again)."""
        if self.membership is not None and not self.membership.may_write():
            return None
        slots = self.cluster.slots
        held = slots.get(slot_of(key, len(slots))) if slots else None
        if held is None or held.leader_id != self.config.node_id or self._coordinating_epochs.get(held.partition) != held.leader_epoch:
            return None
        return held.partition, held.leader_epoch

    def _slots_held(self) -> frozenset[tuple[int, int]]:
        """The coordinator slots taken up here (`_apply_view`), with their epochs: a slot held
        again at another epoch is a change (its state may have moved on elsewhere)."""
        return frozenset(self._coordinating_epochs.items())

    async def _apply_view(self, view: ClusterView) -> None:
        """Open and close partitions as the view says; forget the groups of every coordinator
        slot that moved away, came here, or came back at another epoch: whatever this broker
        knew of them may be stale (another holder changed them meanwhile); the stored groups of
        the slots that came are read from the store (groups.py). The slots first, before any
        wait: a slot is coordinated here only once in `_coordinating_epochs`."""
        me = self.config.node_id
        epochs = {slot: lead.leader_epoch for slot, lead in view.slots.items() if lead.leader_id == me}
        before = self._coordinating_epochs
        moved = frozenset(slot for slot in before.keys() | epochs.keys() if before.get(slot) != epochs.get(slot))
        count = len(view.slots)
        if moved:
            self.groups.unload(lambda group_id: slot_of(group_id, count) in moved)
            if lost := sorted(slot for slot in moved if slot not in epochs):
                log.info("coordinator slot(s) %s moved to other brokers; their groups unloaded", lost)
        self._coordinating_epochs = epochs
        if taken := frozenset(slot for slot in moved if slot in epochs):
            self.groups.take_up(lambda group_id: slot_of(group_id, count) in taken)
        await self.registry.reconcile(view)

    async def allocate_producer_id(self) -> int:
        assert self.store is not None
        return await self.store.allocate_producer_id()

    async def elect_leaders(self, election_type: int, partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], str]:
        assert self.membership is not None
        return await self.membership.elect_leaders(election_type, partitions)

    async def reassign_partitions(self, asked: dict[tuple[str, int], list[int] | None]) -> dict[tuple[str, int], tuple[str, str | None]]:
        assert self.membership is not None
        return await self.membership.reassign_partitions(asked)

    async def ongoing_reassignments(self) -> list[PartitionLeadership]:
        assert self.membership is not None
        return await self.membership.ongoing_reassignments()

    # --- background work -----------------------------------------------------------------

    async def _retention_loop(self) -> None:
        interval = self.config.log_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.registry.maintain()
            except Exception:
                log.exception("retention pass failed; will retry")

    async def _hand_over(self) -> None:
        """Controlled shutdown: put every partition's tail into the bucket while still serving,
        stop writing, make what was written since durable, then hand every partition and the
        controller lease to the other brokers (which rebuild only that last bit)."""
        assert self.membership is not None
        if self.wal is not None and any(node_id != self.config.node_id for node_id in self.membership.view.brokers):
            await self.registry.hand_over_tails(HAND_OVER_UPLOAD_S)  # only worth it if someone takes over
        leaderships = self.registry.leaderships()
        self.membership.stop_writing()
        if self.wal is not None:
            await self.wal.drain()
        await self.membership.leave(leaderships)

    async def _lost_session(self) -> None:
        """The store gave this broker's session away: it leads nothing any more."""
        self.registry.close()

    async def _wal_garbage_loop(self) -> None:
        assert self.wal is not None
        while True:
            await asyncio.sleep(WAL_GARBAGE_INTERVAL_S)
            try:
                await self.wal.collect_garbage()
            except Exception as exc:
                log.warning("deleting write-ahead objects failed (%s); will retry", exc)

    async def _offsets_expiry_loop(self) -> None:
        """Expire the offsets of the groups this broker coordinates (groups.py): in a cluster,
        the other brokers know nothing of a group's members."""
        while True:
            await asyncio.sleep(OFFSETS_RETENTION_CHECK_INTERVAL_MS / 1000)
            try:
                await self.groups.expire_offsets(lambda group_id: self._coordinator_of(group_id) is not None)
            except Exception:
                log.exception("expiring committed offsets failed; will retry")

