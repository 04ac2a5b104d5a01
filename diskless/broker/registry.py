"""The topics of the cluster and the leaders of the partitions this broker leads.

Layout on disk: `<data-dir>/logs/<topic>-<partition>/` holds the partition's segments and a
`partition.metadata` file naming the topic id, as Kafka does, so that a directory left by an
older topic of the same name (a crash between deleting the topic and its files) is recognised
and removed at start-up instead of being served.

Every change goes to the metadata store first and to memory after, so a crash leaves memory
rebuilt from the store. The registry creates and drops leaders; a leader's own state is the
leader's (partition/leader.py). Only the event-loop task calls this class.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from hot_tier import Log
from metadata import MetadataStore, TopicMetadata
from metadata.model import validate_topic_name
from metadata.errors import InvalidPartitions, UnknownTopic

from . import topic_configs
from .partition_limits import MAX_PARTITIONS, MAX_PARTITIONS_PER_REQUEST, check_partition_limits
from .partition import PartitionLeader, PartitionRules
from .tiering.remote_log import RemoteLog, RemoteStorage
from .tiering.uploader import Uploader
from .wal.writer import WalWriter

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RegistrySettings:
    logs_dir: Path
    topic_defaults: Mapping[str, str]
    num_partitions: int  # num.partitions, for auto-created topics
    producer_id_expiration_ms: int
    max_partitions_per_request: int = MAX_PARTITIONS_PER_REQUEST  # Kafka's fixed limit of one CreateTopics/CreatePartitions
    max_partitions: int = MAX_PARTITIONS  # partitions on this broker


class Registry:
    def __init__(
        self,
        settings: RegistrySettings,
        store: MetadataStore,
        storage: RemoteStorage,
        uploader: Uploader,
        wal: WalWriter | None,
        clock: Callable[[], int],
    ) -> None:
        self.settings = settings
        self.store = store
        self.storage = storage
        self.uploader = uploader
        self.wal = wal
        self.clock = clock
        self._topics: dict[str, TopicMetadata] = {}
        self._topics_by_id: dict[uuid.UUID, TopicMetadata] = {}
        self._leaders: dict[tuple[str, int], PartitionLeader] = {}

    # --- start-up and shut-down ----------------------------------------------------------

    async def load(self) -> None:
        logs_dir = self.settings.logs_dir
        logs_dir.mkdir(parents=True, exist_ok=True)
        wanted: set[str] = set()
        for topic in await self.store.list_topics():
            start_offsets = await self.store.get_log_start_offsets(topic.name)
            await self._add_topic(topic, start_offsets)
            wanted.update(_dir_name(topic.name, index) for index in range(topic.num_partitions))
        for path in logs_dir.iterdir():
            if path.is_dir() and path.name not in wanted:
                log.warning("removing %s: it belongs to no current topic", path)
                await asyncio.to_thread(shutil.rmtree, path, True)
        log.info("loaded %d topics, %d partitions", len(self._topics), len(self._leaders))

    def close(self) -> None:
        for leader in self._leaders.values():
            leader.close()
        self._leaders.clear()

    # --- lookups (api.TopicRegistry) -----------------------------------------------------

    @property
    def topics(self) -> Mapping[str, TopicMetadata]:
        return self._topics

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self._topics_by_id.get(topic_id)

    def leader(self, topic: str, index: int) -> PartitionLeader | None:
        return self._leaders.get((topic, index))

    def leaders(self) -> list[PartitionLeader]:
        return list(self._leaders.values())

    def topic_configs(self, topic: TopicMetadata) -> dict[str, str]:
        return topic_configs.effective(topic.configs, self.settings.topic_defaults)

    # --- changes -------------------------------------------------------------------------

    async def create_topic(self, name: str, num_partitions: int, configs: Mapping[str, str]) -> TopicMetadata:
        """All or nothing: if opening a partition fails (e.g. out of descriptors), the topic is
        deleted from the store and its directories removed before the error is raised."""
        validate_topic_name(name)
        if num_partitions < 1:
            raise InvalidPartitions(name, None, num_partitions, "a topic needs at least one partition")
        self._check_partition_limits(name, None, num_partitions)
        checked = topic_configs.validate(configs)
        await self.uploader.delete_topic_objects(name, [])  # whatever an older topic of this name left
        topic = await self.store.create_topic(name, num_partitions, checked, uuid.uuid4())
        try:
            await self._add_topic(topic, {})
        except BaseException as exc:
            await self._undo_create_topic(topic, exc)
            raise
        log.info("created topic %s with %d partitions, configs %s", name, num_partitions, checked or "{}")
        return topic

    async def auto_create_topic(self, name: str) -> TopicMetadata | None:
        try:
            return await self.create_topic(name, self.settings.num_partitions, {})
        except Exception as exc:
            log.warning("auto-creating topic %s failed: %s", name, exc)
            return self._topics.get(name)

    async def delete_topic(self, name: str) -> TopicMetadata:
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopic(name)
        deleted = await self.store.delete_topic(name)
        self._topics.pop(name, None)
        self._topics_by_id.pop(topic.topic_id, None)
        leaders = [leader for index in range(topic.num_partitions) if (leader := self._leaders.pop((name, index), None))]
        for leader in leaders:
            leader.close()
            await asyncio.to_thread(shutil.rmtree, leader.dir, True)
        await self.uploader.delete_topic_objects(name, leaders)
        log.info("deleted topic %s", name)
        return deleted

    async def create_partitions(self, name: str, count: int) -> TopicMetadata:
        """All or nothing as far as the disk goes: the new partitions' directories are made
        before the store is told, so a failure there leaves no trace. A failure after the
        store's write closes the new leaders and leaves the store's count, which the next start
        opens."""
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopic(name)
        if count <= topic.num_partitions:
            raise InvalidPartitions(name, topic.num_partitions, count, "the partition count can only grow")
        self._check_partition_limits(name, topic.num_partitions, count)
        configs = self.topic_configs(topic)
        await self._prepare_partition_dirs(topic, range(topic.num_partitions, count), configs)
        updated = await self.store.create_partitions(name, count)
        self._set_topic(updated)
        try:
            for index in range(topic.num_partitions, count):
                await self._open_leader(updated, index, configs, None)
        except BaseException:
            for index in range(topic.num_partitions, count):
                leader = self._leaders.pop((name, index), None)
                if leader is not None:
                    leader.close()
            log.error("topic %s: opening partitions %d..%d failed after the store recorded them; "
                      "they open at the next start", name, topic.num_partitions, count - 1)
            raise
        log.info("topic %s now has %d partitions", name, count)
        return updated

    # --- helpers of create_topic and create_partitions -----------------------------------

    def _check_partition_limits(self, name: str, current: int | None, requested: int) -> None:
        check_partition_limits(
            name, current, requested, len(self._leaders),
            max_partitions_per_request=self.settings.max_partitions_per_request, max_partitions=self.settings.max_partitions,
        )  # fmt: skip

    async def _undo_create_topic(self, topic: TopicMetadata, exc: BaseException) -> None:
        """Roll back a creation that failed half-way: leaders closed, directories removed, the
        topic deleted from the store, so the broker starts again afterwards."""
        log.error("creating topic %s failed (%s: %s); rolling it back", topic.name, type(exc).__name__, exc)
        for index in range(topic.num_partitions):
            leader = self._leaders.pop((topic.name, index), None)
            if leader is not None:
                try:
                    leader.close()
                except Exception:
                    log.exception("closing %s-%d while rolling back failed", topic.name, index)
        if self._topics.get(topic.name) is topic:
            del self._topics[topic.name]
        self._topics_by_id.pop(topic.topic_id, None)
        try:
            await self.store.delete_topic(topic.name)
        except Exception:
            log.exception("deleting topic %s from the store while rolling back failed", topic.name)
        await asyncio.to_thread(_remove_dirs, self.settings.logs_dir, topic.name, range(topic.num_partitions))

    async def _prepare_partition_dirs(self, topic: TopicMetadata, indexes: range, configs: dict[str, str]) -> None:
        """Create the directories of new partitions (and their partition.metadata) before the
        store is told; on failure remove them all. Opening the logs follows the store's write."""
        try:
            for index in indexes:
                _claim_dir(self.settings.logs_dir / _dir_name(topic.name, index), topic.topic_id)
        except BaseException:
            await asyncio.to_thread(_remove_dirs, self.settings.logs_dir, topic.name, indexes)
            raise

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicMetadata:
        topic = self._topics.get(name)
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
            self._leaders[(name, index)].update_rules(rules, log_config)
        self.uploader.wake()
        log.info("topic %s configs are now %s", name, checked or "{}")
        return updated

    async def maintain(self) -> None:
        """One pass of time-based rolls, flush.ms, producer expiry and local retention."""
        now = self.clock()
        for leader in self.leaders():
            if not leader.closed:
                await leader.maintain(now)

    # --- internals -----------------------------------------------------------------------

    def _set_topic(self, topic: TopicMetadata) -> None:
        self._topics[topic.name] = topic
        self._topics_by_id[topic.topic_id] = topic

    async def _add_topic(self, topic: TopicMetadata, start_offsets: Mapping[int, int]) -> None:
        self._set_topic(topic)
        configs = self.topic_configs(topic)
        for index in range(topic.num_partitions):
            await self._open_leader(topic, index, configs, start_offsets.get(index))

    async def _open_leader(self, topic: TopicMetadata, index: int, configs: dict[str, str], log_start_offset: int | None) -> None:
        path = self.settings.logs_dir / _dir_name(topic.name, index)
        _claim_dir(path, topic.topic_id)
        rules = PartitionRules.from_configs(configs)
        log_ = Log.open(path, rules.log_config(configs), self.clock(), log_start_offset=log_start_offset)
        self._leaders[(topic.name, index)] = await PartitionLeader.open(
            topic.name, topic.topic_id, index, log_, rules, RemoteLog(self.storage, topic.name, index), self.store, self.uploader,
            self.wal, log_start_offset=log_start_offset, producer_id_expiration_ms=self.settings.producer_id_expiration_ms,
            now_ms=self.clock(),
        )  # fmt: skip


def _dir_name(topic: str, index: int) -> str:
    return f"{topic}-{index}"


def _remove_dirs(logs_dir: Path, topic: str, indexes: range) -> None:
    for index in indexes:
        shutil.rmtree(logs_dir / _dir_name(topic, index), ignore_errors=True)


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
