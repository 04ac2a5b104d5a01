"""The broker: composes the metadata store, the partitions and the TCP server.

`Broker` is what handlers talk to. Its methods are the few places where a Kafka operation
touches more than one part (the log, the metadata store, later the bucket), so handlers stay
about the protocol and the parts stay unaware of each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from diskless.wire import Request
from hot_tier import AppendInfo
from cold_tier.url import open_object_store
from hot_tier import OffsetOutOfRange
from metadata import MetadataStore, TopicMetadata, open_metadata_store

from .admin_http import AdminHttp
from .config import BrokerConfig
from .data_dir import claim_data_dir
from .group import GroupConfig
from .groups import Groups
from .handlers import HANDLERS
from .partition import Partition
from .partitions import Partitions, now_ms
from .server import KafkaServer
from .tiering import Tiering

log = logging.getLogger(__name__)

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600_000  # offsets.retention.check.interval.ms


class Broker:
    def __init__(self, config: BrokerConfig, clock: Callable[[], int] = now_ms) -> None:
        self.config = config
        self.clock = clock
        self.store: MetadataStore | None = None
        self.partitions: Partitions
        self.groups: Groups
        self.tiering: Tiering
        self.cluster_id = ""
        self.server = KafkaServer(self, config.listen_host, config.listen_port, config.socket_request_max_bytes)
        self._tasks: list[asyncio.Task[None]] = []
        self.http: AdminHttp | None = None

    # --- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir_lock = claim_data_dir(self.config.data_dir, self.config.node_id)  # before any other file in it
        self.cluster_id = self.data_dir_lock.cluster_id
        self.store = await open_metadata_store(self.config.resolved_metadata_url)
        self.bucket = open_object_store(self.config.resolved_object_store_url, env=self.config.object_store_env)
        self.partitions = Partitions(self.config, self.store, self.clock)
        self.tiering = Tiering(
            self.bucket, self.store, self.partitions.all, self.clock,
            upload_concurrency=self.config.upload_concurrency, local_disk_limit_bytes=self.config.local_disk_limit_bytes,
        )
        self.partitions.tiering = self.tiering
        await self.partitions.load()
        self.tiering.start()
        c = self.config
        group_config = GroupConfig(
            group_min_session_timeout_ms=c.group_min_session_timeout_ms,
            group_max_session_timeout_ms=c.group_max_session_timeout_ms,
            group_initial_rebalance_delay_ms=c.group_initial_rebalance_delay_ms,
        )
        self.groups = Groups(group_config, self.store, self.clock, c.offsets_retention_minutes * 60_000)
        self.groups.start()
        await self.server.start()
        if self.config.http_host is not None:
            self.http = AdminHttp(self, self.config.http_host, self.config.http_port or 0)
            await self.http.start()
            log.info("admin HTTP on http://%s:%d", self.config.http_host, self.http.port)
        self._tasks.append(asyncio.create_task(self._retention_loop(), name="retention"))
        self._tasks.append(asyncio.create_task(self._offsets_expiry_loop(), name="offsets-expiry"))
        host, port = self.advertised_address
        log.info(
            "diskless broker %d ready on %s:%d (advertised %s:%d), cluster %s, data in %s, object store %s",
            self.config.node_id, self.config.listen_host, self.server.port, host, port, self.cluster_id, self.config.data_dir,
            self.config.resolved_object_store_url,
        )

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.http is not None:
            await self.http.stop()
        if self.store is not None:
            await self.groups.stop()
        await self.server.stop()
        if self.store is not None:
            await self.tiering.stop()
            self.partitions.close()
            await self.bucket.close()
            await self.store.close()
        log.info("diskless broker %d stopped", self.config.node_id)
        if getattr(self, "data_dir_lock", None) is not None:
            self.data_dir_lock.release()

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def advertised_address(self) -> tuple[str, int]:
        return (self.config.advertised_host or self.config.listen_host, self.config.advertised_port or self.server.port)

    # --- operations handlers call ----------------------------------------------------------

    async def handle(self, request: Request) -> Any:
        """The response to one request (None when Kafka sends none)."""
        return await HANDLERS[request.header.api_key](self, request)

    async def append(self, partition: Partition, records: bytes, now: int) -> AppendInfo:
        if not partition.tiered:
            return partition.append(records, now)
        self.tiering.check_disk(partition)
        active_before = partition.log.active_base_offset
        info = partition.append(records, now)
        if partition.log.active_base_offset != active_before:
            self.tiering.refresh_lag()
            self.tiering.wake()  # a segment rolled: upload it
        return info

    async def read(self, partition: Partition, offset: int, max_bytes: int, *, min_one_batch: bool) -> Any:
        """Record bytes from `offset`: a FileSlice of the hot tier, bytes from the bucket, or None."""
        log_ = partition.log
        if not partition.log_start_offset <= offset <= log_.high_watermark:
            raise OffsetOutOfRange(offset, partition.log_start_offset, log_.log_end_offset)
        if offset < log_.log_start_offset:
            return await self.tiering.read(partition, offset, max_bytes, min_one_batch=min_one_batch)
        return log_.read(offset, max_bytes, min_one_batch=min_one_batch, max_offset=log_.high_watermark)

    async def list_offset(self, partition: Partition, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, offset) answering ListOffsets for `timestamp`, or None if no record qualifies."""
        log_ = partition.log
        if timestamp == LATEST:
            return (-1, log_.high_watermark)
        if timestamp == EARLIEST:
            return (-1, partition.log_start_offset)
        if timestamp == EARLIEST_LOCAL:
            return (-1, log_.log_start_offset)
        if timestamp == MAX_TIMESTAMP:
            found = log_.max_timestamp_offset()
            remote_max = max(partition.remote, key=lambda s: s.max_timestamp, default=None)
            if remote_max is not None and (found is None or remote_max.max_timestamp > found.timestamp):
                return await self.tiering.offset_for_timestamp(partition, remote_max.max_timestamp)
            return None if found is None else (found.timestamp, found.offset)
        # CreateTime timestamps need not grow with offsets: any segment may hold the target.
        if any(segment.max_timestamp >= timestamp for segment in partition.remote):
            remote = await self.tiering.offset_for_timestamp(partition, timestamp)
            if remote is not None:
                return remote
        found = log_.offset_for_timestamp(timestamp)
        return None if found is None else (found.timestamp, found.offset)

    async def delete_records(self, partition: Partition, offset: int) -> int:
        return await self.partitions.delete_records(partition, offset)

    async def delete_topic(self, name: str) -> TopicMetadata:
        return await self.partitions.delete_topic(name)

    async def auto_create_topic(self, name: str) -> TopicMetadata | None:
        try:
            return await self.partitions.create_topic(name, self.config.num_partitions, {})
        except Exception as exc:
            log.warning("auto-creating topic %s failed: %s", name, exc)
            return self.partitions.topics.get(name)

    # --- background work -----------------------------------------------------------------

    async def _retention_loop(self) -> None:
        interval = self.config.log_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.partitions.enforce_retention()
            except Exception:
                log.exception("retention pass failed; will retry")


    async def _offsets_expiry_loop(self) -> None:
        while True:
            await asyncio.sleep(OFFSETS_RETENTION_CHECK_INTERVAL_MS / 1000)
            try:
                await self.groups.expire_offsets()
            except Exception:
                log.exception("expiring committed offsets failed; will retry")

