"""The topics and partitions this broker leads: their logs on disk and their metadata.

Layout on disk: `<data-dir>/logs/<topic>-<partition>/` holds the partition's segments and a
`partition.metadata` file naming the topic id, as Kafka does, so that a directory left by an
older topic of the same name (a crash between deleting the topic and its files) is recognised
and removed at start-up instead of being served.

Every change goes to the metadata store first and to memory after, so a crash leaves memory
rebuilt from the store. Only the event-loop task calls this class.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from hot_tier import Log
from metadata import MetadataStore, TopicMetadata
from metadata.errors import InvalidPartitions, InvalidTopicName, UnknownTopic

from . import topic_configs
from .config import BrokerConfig

if TYPE_CHECKING:
    from .tiering import Tiering
from .partition import Partition, PartitionRules

log = logging.getLogger(__name__)

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249


def check_topic_name(name: str) -> None:
    if not name or name in (".", "..") or len(name) > MAX_TOPIC_NAME or not _LEGAL_TOPIC.match(name):
        raise InvalidTopicName(name, "topic names are 1 to 249 of [a-zA-Z0-9._-], and not '.' or '..'")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Partitions:
    def __init__(self, config: BrokerConfig, store: MetadataStore, clock: Callable[[], int] = now_ms) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self.topics: dict[str, TopicMetadata] = {}
        self.topics_by_id: dict[uuid.UUID, TopicMetadata] = {}
        self._partitions: dict[tuple[str, int], Partition] = {}
        self.tiering: Tiering | None = None  # set by the broker before load()

    # --- start-up and shut-down ----------------------------------------------------------

    async def load(self) -> None:
        self.config.logs_dir.mkdir(parents=True, exist_ok=True)
        topics = await self.store.list_topics()
        wanted: dict[str, uuid.UUID] = {}
        for topic in topics:
            start_offsets = await self.store.get_log_start_offsets(topic.name)
            await self._add_topic(topic, start_offsets)
            for index in range(topic.num_partitions):
                wanted[self._dir_name(topic.name, index)] = topic.topic_id
        for path in self.config.logs_dir.iterdir():
            if path.is_dir() and path.name not in wanted:
                log.warning("removing %s: it belongs to no current topic", path)
                await asyncio.to_thread(shutil.rmtree, path, True)
        log.info("loaded %d topics, %d partitions", len(self.topics), len(self._partitions))

    def close(self) -> None:
        for partition in self._partitions.values():
            partition.log.close()
        self._partitions.clear()

    # --- lookups -------------------------------------------------------------------------

    def get(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def all(self) -> list[Partition]:
        return list(self._partitions.values())

    def topic_configs(self, topic: TopicMetadata) -> dict[str, str]:
        return topic_configs.effective(topic.configs, self.config.topic_defaults)

    # --- changes -------------------------------------------------------------------------

    async def create_topic(self, name: str, num_partitions: int, configs: Mapping[str, str]) -> TopicMetadata:
        check_topic_name(name)
        if num_partitions < 1:
            raise InvalidPartitions(name, None, num_partitions, "a topic needs at least one partition")
        checked = topic_configs.validate(configs)
        if self.tiering is not None:
            await self.tiering.delete_topic_objects(name)  # whatever an older topic of this name left
        topic = await self.store.create_topic(name, num_partitions, checked, uuid.uuid4())
        await self._add_topic(topic, {})
        log.info("created topic %s with %d partitions, configs %s", name, num_partitions, checked or "{}")
        return topic

    async def delete_topic(self, name: str) -> TopicMetadata:
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopic(name)
        deleted = await self.store.delete_topic(name)
        self.topics.pop(name, None)
        self.topics_by_id.pop(topic.topic_id, None)
        for index in range(topic.num_partitions):
            partition = self._partitions.pop((name, index), None)
            if partition is not None:
                partition.log.close()
                partition.notify()
                await asyncio.to_thread(shutil.rmtree, partition.log.dir, True)
        if self.tiering is not None:
            await self.tiering.delete_topic_objects(name)
        log.info("deleted topic %s", name)
        return deleted

    async def create_partitions(self, name: str, count: int) -> TopicMetadata:
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopic(name)
        if count <= topic.num_partitions:
            raise InvalidPartitions(name, topic.num_partitions, count, "the partition count can only grow")
        updated = await self.store.create_partitions(name, count)
        self._set_topic(updated)
        configs = self.topic_configs(updated)
        for index in range(topic.num_partitions, count):
            await self._open_partition(updated, index, configs, None)
        log.info("topic %s now has %d partitions", name, count)
        return updated

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicMetadata:
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopic(name)
        checked = topic_configs.validate(configs)
        removed = set(topic.configs) - set(checked)
        updated = await self.store.alter_topic_configs(name, checked, removed)
        self._set_topic(updated)
        effective = self.topic_configs(updated)
        rules = PartitionRules.from_configs(effective)
        log_config = rules.log_config(effective)
        for index in range(updated.num_partitions):
            partition = self._partitions[(name, index)]
            partition.log.update_config(log_config)
            partition.rules = rules
        if self.tiering is not None:
            self.tiering.wake()
        log.info("topic %s configs are now %s", name, checked or "{}")
        return updated

    async def delete_records(self, partition: Partition, offset: int) -> int:
        """DeleteRecords: raise the log start offset to `offset`; returns the new low watermark.

        Local segments below it go now; remote ones at the next tiering pass.
        """
        if offset > partition.log.log_start_offset:
            partition.log.advance_log_start_offset(offset)
        partition.deleted_below = max(partition.deleted_below, offset)
        await self.store.set_log_start_offset(partition.topic, partition.index, partition.log_start_offset)
        if self.tiering is not None:
            self.tiering.wake()
        return partition.log_start_offset

    async def enforce_retention(self) -> None:
        """One pass of time- and size-based retention, time-based rolls and flush.ms over every log."""
        now = self.clock()
        for partition in list(self._partitions.values()):
            log_ = partition.log
            before = partition.log_start_offset
            if log_.maybe_roll(now):
                partition.maybe_snapshot_producers()
                if self.tiering is not None:
                    self.tiering.wake()
            log_.maybe_flush(now)
            partition.producers.expire(now)
            deleted = log_.delete_retention_segments(now)
            if deleted:
                log.info(
                    "retention deleted %d segment(s) of %s-%d; log start offset %d -> %d",
                    len(deleted), partition.topic, partition.index, before, partition.log_start_offset,
                )
                await self.store.set_log_start_offset(partition.topic, partition.index, partition.log_start_offset)

    # --- internals -----------------------------------------------------------------------

    def _dir_name(self, topic: str, index: int) -> str:
        return f"{topic}-{index}"

    def _set_topic(self, topic: TopicMetadata) -> None:
        self.topics[topic.name] = topic
        self.topics_by_id[topic.topic_id] = topic

    async def _add_topic(self, topic: TopicMetadata, start_offsets: Mapping[int, int]) -> None:
        self._set_topic(topic)
        configs = self.topic_configs(topic)
        for index in range(topic.num_partitions):
            await self._open_partition(topic, index, configs, start_offsets.get(index))

    async def _open_partition(self, topic: TopicMetadata, index: int, configs: dict[str, str], log_start_offset: int | None) -> None:
        path = self.config.logs_dir / self._dir_name(topic.name, index)
        _claim_dir(path, topic.topic_id)
        rules = PartitionRules.from_configs(configs)
        log_ = Log.open(path, rules.log_config(configs), self.clock(), log_start_offset=log_start_offset)
        partition = Partition(
            topic.name, topic.topic_id, index, log_, rules, self.config.producer_id_expiration_ms,
            leader_epoch=await self.store.get_leader_epoch(topic.name, index),
            deleted_below=log_start_offset or 0,
        )
        if self.tiering is not None:
            await self.tiering.load(partition)
        self._partitions[(topic.name, index)] = partition


def _claim_dir(path: Path, topic_id: uuid.UUID) -> None:
    """Make `path` the directory of `topic_id`, wiping what an older topic of that name left."""
    marker = path / "partition.metadata"
    expected = f"version: 0\ntopic_id: {topic_id}\n"
    if marker.exists() and marker.read_text() != expected:
        log.warning("removing %s: it belongs to an older topic of the same name", path)
        shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)
    if not marker.exists():
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(expected)
        tmp.replace(marker)
