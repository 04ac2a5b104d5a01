"""The topics of the cluster and the leaders of the partitions this broker leads.

Layout on disk: `<data-dir>/logs/<topic>-<partition>/` holds the partition's segments and a
`partition.metadata` file naming the topic id, as Kafka does, so that a directory left by an
older topic of the same name (a crash between deleting the topic and its files) is recognised
and removed at start-up instead of being served.

Every change goes to the metadata store first and to memory after, so a crash leaves memory
rebuilt from the store. The registry creates and drops leaders; a leader's own state is the
leader's (partition/leader.py). Which partitions this broker leads is the cluster's decision
(cluster/): `reconcile` opens the partitions the store says this broker leads, at the epoch
the store gives, and closes those it no longer leads. Only the event-loop task calls this class.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hot_tier import Log, LogConfig
from metadata import MetadataStore, PartitionLeadership, TopicMetadata
from metadata.model import check_topic_collision, validate_topic_name
from metadata.errors import InvalidPartitions, TopicAlreadyExists, UnknownTopic, UnknownTopicId

from . import dynamic_broker_configs, topic_configs
from .partition_limits import MAX_PARTITIONS, MAX_PARTITIONS_PER_REQUEST, check_partition_limits
from .cluster.controller import initial_leaders
from .cluster.membership import ClusterView
from .opening_gate import OpeningGate
from .partition import PartitionLeader, PartitionRules
from .tiering.remote_log import RemoteLog, RemoteStorage
from .tiering.uploader import Uploader
from .topic_configs import ConfigSource
from .wal.writer import WalWriter

log = logging.getLogger(__name__)

OPENING_CONCURRENCY = 8  # partitions opened (their tails rebuilt from the bucket) at once
HAND_OVER_CONCURRENCY = 8  # tails rolled and uploaded at once in a controlled shutdown

DYNAMIC_CONFIGS_REFRESH_S = 5.0  # how soon dynamic broker configs set through another broker apply here


@dataclass(frozen=True, slots=True)
class RegistrySettings:
    node_id: int
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
        self.view = ClusterView()
        # When each topic and leader appeared here: a view read before that does not know them yet.
        self._seen_at: dict[object, float] = {}
        self.may_write: Callable[[], bool] = lambda: True  # the cluster's fencing rule (membership)
        # One change at a time: a reconcile must not open a partition that a CreateTopics is
        # opening, nor re-add a topic a DeleteTopics is removing.
        self._changing = asyncio.Lock()
        self._offline: dict[tuple[str, int], Exception] = {}  # led here, but could not be opened
        self._gate = OpeningGate()  # requests for partitions being opened wait for them
        # Dynamic broker configs (dynamic_broker_configs.py) of the cluster ("") and of this
        # broker (its node id), by broker config name; the topic defaults they make, and the
        # levels they are set at (DescribeConfigs' synonyms: topic_configs.describe).
        self.dynamic_broker_configs: dict[str, dict[str, str]] = {}
        self.topic_defaults: dict[str, str] = dict(settings.topic_defaults)
        self.topic_default_levels: dict[ConfigSource, dict[str, str]] = dynamic_broker_configs.topic_default_levels(
            settings.topic_defaults, {}, {}
        )
        self._dynamic_read_at = float("-inf")
        # The broker's own dynamic settings (dynamic_broker_configs.BROKER_DYNAMIC): the static
        # values it started with, and who applies a change (its listeners and cleaner).
        self.static_broker_configs: Mapping[str, str] = {}
        self.on_broker_configs: Callable[[Mapping[str, str]], None] | None = None

    # --- start-up and shut-down ----------------------------------------------------------

    async def load(self) -> None:
        """Read the topics; remove directories that belong to none. Leaders open in `reconcile`."""
        logs_dir = self.settings.logs_dir
        logs_dir.mkdir(parents=True, exist_ok=True)
        wanted: set[str] = set()
        for topic in await self.store.list_topics():
            self._set_topic(topic)
            wanted.update(_dir_name(topic.name, index) for index in range(topic.num_partitions))
        await self.refresh_dynamic_configs()
        for path in logs_dir.iterdir():
            if path.is_dir() and path.name not in wanted:
                log.warning("removing %s: it belongs to no current topic", path)
                await asyncio.to_thread(shutil.rmtree, path, True)

    async def reconcile(self, view: ClusterView) -> None:
        """Follow the store: topics made or deleted by other brokers, configs changed, and the
        partitions this broker leads (opened at their epoch) or no longer leads (closed)."""
        async with self._changing:
            await self._reconcile(view)
        if time.monotonic() - self._dynamic_read_at >= DYNAMIC_CONFIGS_REFRESH_S:
            try:
                await self.refresh_dynamic_configs()  # set through another broker
            except Exception as exc:  # the store is down: keep the configs, try at the next reconcile
                log.warning("reading dynamic broker configs failed: %s", exc)

    async def _reconcile(self, view: ClusterView) -> None:
        self.view = view
        newer = lambda key: self._seen_at.get(key, 0.0) >= view.read_at  # noqa: E731
        for name in [name for name in self._topics if name not in view.topics and not newer(name)]:
            await self._forget_topic(self._topics[name], remove_dirs=True)
            log.info("topic %s was deleted (by another broker)", name)
        for name, topic in view.topics.items():
            if newer(("deleted", name)):
                continue  # deleted here after the view was read
            known = self._topics.get(name)
            if known is not None and known.topic_id != topic.topic_id:
                await self._forget_topic(known, remove_dirs=True)
                known = None
            if known is not None and known != topic and (newer(("changed", name)) or newer(name)):
                continue  # created, or its configs or partitions changed, here after the view was read
            if known != topic:
                self._set_topic(topic)
                if known is not None and known.configs != topic.configs:
                    self._apply_configs(topic)
        me = self.settings.node_id
        mine = {key: p for key, p in view.leaders.items() if p.leader_id == me and key[0] in self._topics}
        for key, leader in list(self._leaders.items()):
            lead = mine.get(key)
            if newer(key):
                continue
            if lead is None or lead.leader_epoch != leader.leader_epoch:
                self._leaders.pop(key).close()
                log.info("%s-%d: no longer led here (leader %s, epoch %s)", key[0], key[1],
                         view.leaders.get(key) and view.leaders[key].leader_id, lead and lead.leader_epoch)  # fmt: skip
        opening = [key for key in mine if key not in self._leaders]
        self._gate.begin(opening)
        try:
            await self._open_leaders(opening, mine)
        finally:
            self._gate.end(opening)
        if opening:
            log.info("leading %d more partition(s); %d in all", len(opening), len(self._leaders))

    async def _open_leaders(self, opening: list[tuple[str, int]], mine: Mapping[tuple[str, int], PartitionLeadership]) -> None:
        await self.uploader.stop_uploads(opening)  # of leaders closed here before: they settle nothing the new one reads
        # A few side by side: each waits mostly on the metadata store and on the bucket (a
        # long tail to rebuild), so one partition's waits overlap another's work.
        start_offsets = {name: await self.store.get_log_start_offsets(name) for name in dict.fromkeys(t for t, _ in opening)}
        rules = {name: _rules_of(self.topic_configs(self._topics[name])) for name in start_offsets}  # once per topic
        stored = {name: await self.store.partitions_with_state(name) for name in start_offsets}
        slots = asyncio.Semaphore(OPENING_CONCURRENCY)

        async def open_one(topic_name: str, index: int) -> None:
            topic = self._topics[topic_name]
            async with slots:
                try:
                    await self._open_leader(
                        topic, index, self.topic_configs(topic), start_offsets[topic_name].get(index), mine[(topic_name, index)].leader_epoch,
                        rules=rules[topic_name], stored=index in stored[topic_name],
                    )
                except Exception as exc:
                    # One partition that cannot be rebuilt (an unreadable write-ahead object, a bad
                    # disk) stays offline, as Kafka takes a failed log directory's partitions
                    # offline; the others open. Retried at every beat, logged once.
                    if (topic_name, index) not in self._offline:
                        log.error("%s-%d cannot be opened and stays offline: %s", topic_name, index, exc)
                    self._offline[(topic_name, index)] = exc
                else:
                    self._offline.pop((topic_name, index), None)
            self._gate.end([(topic_name, index)])

        await asyncio.gather(*(open_one(topic_name, index) for topic_name, index in opening))

    async def until_open(self, keys: Iterable[tuple[str, int]], timeout_s: float) -> None:
        """Hold a request while any of its partitions is being opened here (opening_gate.py)."""
        await self._gate.until_open(keys, timeout_s)

    async def find_topic(self, name: str) -> TopicMetadata | None:
        """The topic, asking the store if this broker has not heard of it yet (another broker
        created it since the last view)."""
        known = self._topics.get(name)
        if known is not None:
            return known
        try:
            topic = await self.store.get_topic(name)
        except UnknownTopic:
            return None
        async with self._changing:
            if name not in self._topics and not self._seen_at.get(("deleted", name)):
                self._set_topic(topic)
        return self._topics.get(name)

    async def find_topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        """The topic of this id, asking the store if this broker has not heard of it yet."""
        known = self._topics_by_id.get(topic_id)
        if known is not None:
            return known
        try:
            topic = await self.store.get_topic_by_id(topic_id)
        except (UnknownTopic, UnknownTopicId):
            return None
        return await self.find_topic(topic.name)

    def offline(self, topic: str, index: int) -> bool:
        """Whether this broker leads the partition but could not open it (its log is unreadable)."""
        return (topic, index) in self._offline

    def has_partition(self, topic: str, index: int) -> bool:
        """Whether the partition exists in the cluster (led here or not)."""
        known = self._topics.get(topic)
        return known is not None and 0 <= index < known.num_partitions

    def leadership(self, topic: str, index: int) -> tuple[int | None, int]:
        """(leader node id or None, leader epoch) of a partition, as last read from the store."""
        local = self._leaders.get((topic, index))
        if local is not None:
            return self.settings.node_id, local.leader_epoch
        p = self.view.leaders.get((topic, index))
        return (None, -1) if p is None else (p.leader_id, p.leader_epoch)

    async def hand_over_tails(self, timeout_s: float) -> None:
        """Controlled shutdown: led partitions' active segments into the bucket, the longest
        tails first, a few at a time, starting no more after `timeout_s` (the rest are rebuilt
        from write-ahead objects by their next leaders instead)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        leaders = sorted((leader for leader in self._leaders.values() if leader.tiered and leader.unrolled_offsets > 0),
                         key=lambda leader: -leader.unrolled_offsets)  # fmt: skip
        if not leaders:
            return
        slots = asyncio.Semaphore(HAND_OVER_CONCURRENCY)
        uploaded = 0

        async def hand_over(leader: PartitionLeader) -> None:
            nonlocal uploaded
            async with slots:
                if loop.time() < deadline:
                    await leader.hand_over_tail(self.clock())
                    uploaded += 1

        waits = [asyncio.ensure_future(hand_over(leader)) for leader in leaders]
        _, pending = await asyncio.wait(waits, timeout=timeout_s)
        for wait in pending:
            wait.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
        log.info("controlled shutdown: %d of %d partition(s) with a tail uploaded it", uploaded, len(leaders))

    def leaderships(self) -> list[tuple[str, int, int]]:
        """(topic, partition, epoch) of every partition led here."""
        return [(leader.topic, leader.index, leader.leader_epoch) for leader in self._leaders.values()]

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
        return topic_configs.effective(topic.configs, self.topic_defaults)

    # --- dynamic broker configs ------------------------------------------------------------

    async def refresh_dynamic_configs(self) -> None:
        """Read the dynamic broker configs from the store (other brokers may have set them)."""
        self._dynamic_read_at = time.monotonic()
        self._set_dynamic_configs(await self.store.list_resource_configs(dynamic_broker_configs.BROKER_RESOURCE))

    async def alter_broker_configs(
        self, resource_name: str, ops: list[tuple[str, int, str | None]] | None, replace: list[tuple[str, str | None]] | None, validate_only: bool
    ) -> None:
        """IncrementalAlterConfigs (`ops`) or AlterConfigs (`replace`) of the cluster-wide
        default ("") or this broker's configs; applied to every partition at once."""
        stored = await self.store.list_resource_configs(dynamic_broker_configs.BROKER_RESOURCE)
        updated = dynamic_broker_configs.apply(stored.get(resource_name, {}), ops, replace, running=self.broker_config_values())
        if validate_only:
            return
        await self.store.set_resource_configs(dynamic_broker_configs.BROKER_RESOURCE, resource_name, updated)
        stored[resource_name] = updated
        self._set_dynamic_configs(stored)
        log.info("dynamic broker configs of %s are now %s", resource_name or "the cluster", updated or "{}")

    def _set_dynamic_configs(self, stored: Mapping[str, Mapping[str, str]]) -> None:
        mine = {name: dict(stored[name]) for name in (dynamic_broker_configs.CLUSTER_DEFAULT, str(self.settings.node_id)) if stored.get(name)}
        if mine == self.dynamic_broker_configs:
            return
        self.dynamic_broker_configs = mine
        cluster = mine.get(dynamic_broker_configs.CLUSTER_DEFAULT, {})
        broker = mine.get(str(self.settings.node_id), {})
        self.topic_defaults = dynamic_broker_configs.topic_defaults(self.settings.topic_defaults, cluster, broker)
        self.topic_default_levels = dynamic_broker_configs.topic_default_levels(self.settings.topic_defaults, cluster, broker)
        for topic in self._topics.values():
            self._apply_configs(topic)
        if self.on_broker_configs is not None:
            self.on_broker_configs(self.broker_config_values())

    def broker_config_values(self) -> dict[str, str]:
        """The values this broker runs with of the broker's own dynamic settings."""
        cluster = self.dynamic_broker_configs.get(dynamic_broker_configs.CLUSTER_DEFAULT, {})
        broker = self.dynamic_broker_configs.get(str(self.settings.node_id), {})
        return dynamic_broker_configs.broker_values(self.static_broker_configs, cluster, broker)

    # --- changes -------------------------------------------------------------------------

    async def create_topic(self, name: str, num_partitions: int, configs: Mapping[str, str], preferred: Sequence[int] | None = None) -> TopicMetadata:
        async with self._changing:
            return await self._create_topic(name, num_partitions, configs, preferred)

    async def _create_topic(self, name: str, num_partitions: int, configs: Mapping[str, str], preferred: Sequence[int] | None) -> TopicMetadata:
        """All or nothing: if opening a partition fails (e.g. out of descriptors), the topic is
        deleted from the store and its directories removed before the error is raised."""
        validate_topic_name(name)
        if name not in self._topics:  # else the store answers TopicAlreadyExists, as Kafka would
            # This broker's view first, before any work; the store checks every broker's topics.
            check_topic_collision(name, self._topics)
        if num_partitions < 1:
            raise InvalidPartitions(name, None, num_partitions, "a topic needs at least one partition")
        self.check_partition_limits(name, None, num_partitions)
        checked = topic_configs.validate(configs)
        # The store says whether the name is taken (by any broker) before the bucket is swept of
        # what an older topic of this name left: swept first, a CreateTopics of an existing
        # tiered topic deleted its segments, and with them its acknowledged records.
        if name in self._topics or await self._stored(name):
            raise TopicAlreadyExists(name)
        await self.uploader.delete_topic_objects(name, [])
        topic = await self.store.create_topic(name, num_partitions, checked, uuid.uuid4())
        await self.uploader.name_topic(name, topic.topic_id)
        try:
            self._set_topic(topic)
            await self._lead_new_partitions(topic, range(num_partitions), preferred)
        except BaseException as exc:
            await self._undo_create_topic(topic, exc)
            raise
        log.info("created topic %s with %d partitions, configs %s", name, num_partitions, checked or "{}")
        return topic

    async def _stored(self, name: str) -> bool:
        try:
            await self.store.get_topic(name)
        except UnknownTopic:
            return False
        return True

    async def auto_create_topic(self, name: str) -> TopicMetadata | None:
        try:
            return await self.create_topic(name, self.settings.num_partitions, {})
        except Exception as exc:
            log.warning("auto-creating topic %s failed: %s", name, exc)
            return self._topics.get(name)

    async def delete_topic(self, name: str) -> TopicMetadata:
        async with self._changing:
            return await self._delete_topic(name)

    async def _delete_topic(self, name: str) -> TopicMetadata:
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopic(name)
        deleted = await self.store.delete_topic(name)
        leaders = await self._forget_topic(topic, remove_dirs=True)
        if self.wal is not None:
            await self.wal.epoch_marks.drain(name)  # its leaders closed: none lands after the sweep
        await self.uploader.delete_topic_objects(name, leaders)
        log.info("deleted topic %s", name)
        return deleted

    async def _forget_topic(self, topic: TopicMetadata, *, remove_dirs: bool) -> list[PartitionLeader]:
        """Drop a deleted topic: its leaders closed, its directories removed."""
        self._seen_at[("deleted", topic.name)] = time.monotonic()
        if self._topics.get(topic.name) is topic or (topic.name in self._topics and self._topics[topic.name].topic_id == topic.topic_id):
            del self._topics[topic.name]
        self._topics_by_id.pop(topic.topic_id, None)
        leaders = [leader for index in range(topic.num_partitions) if (leader := self._leaders.pop((topic.name, index), None))]
        for leader in leaders:
            leader.close()
        if remove_dirs:
            await asyncio.to_thread(_remove_dirs, self.settings.logs_dir, topic.name, range(topic.num_partitions))
        return leaders

    async def _lead_new_partitions(self, topic: TopicMetadata, indexes: range, preferred: Sequence[int] | None = None) -> None:
        """Give new partitions their leaders (round robin over live brokers, Kafka's way, or
        the brokers `preferred` assigns, kept as reassignments: controller.py) and open the
        ones this broker leads."""
        me = self.settings.node_id
        live = list(self.view.brokers) or [me]
        load: dict[int, int] = {}
        for p in self.view.leaders.values():
            if p.leader_id is not None:
                load[p.leader_id] = load.get(p.leader_id, 0) + 1
        configs = self.topic_configs(topic)
        rules = _rules_of(configs)
        chosen = list(zip(indexes, initial_leaders(len(indexes), live, load)))
        if preferred is not None:  # recorded first: the controller may place them before our write
            await self.store.set_preferred_leaders(topic.name, list(zip(indexes, preferred)))
            chosen = [(index, node if node in live else fallback) for (index, fallback), node in zip(chosen, preferred)]
        # One transaction for them all; a partition the controller gave a leader first (it saw
        # it leaderless between the topic's row and this write) answers None.
        epochs = await self.store.set_partition_leaders(topic.name, [(index, node, 0) for index, node in chosen])
        mine = [(index, epoch, False) for (index, node), epoch in zip(chosen, epochs) if node == me and epoch is not None]
        lost = {index for (index, _), epoch in zip(chosen, epochs) if epoch is None}
        if lost:  # follow the controller's choice now: the creation answers with its partitions open
            mine += [(p.partition, p.leader_epoch, True) for p in await self.store.list_partition_leaders()
                     if p.topic == topic.name and p.partition in lost and p.leader_id == me]  # fmt: skip
        # The directories first, in a worker thread: thousands of mkdirs would hold the event
        # loop (heartbeats, other clients) for seconds on a slow disk.
        await asyncio.to_thread(_claim_dirs, self.settings.logs_dir, topic, [index for index, _, _ in mine])
        for index, epoch, stored in mine:
            await self._open_leader(topic, index, configs, None, epoch, rules=rules, stored=stored)
            await asyncio.sleep(0)  # a new partition opens without a wait: let heartbeats and clients in

    async def create_partitions(self, name: str, count: int, preferred: Sequence[int] | None = None) -> TopicMetadata:
        async with self._changing:
            return await self._create_partitions(name, count, preferred)

    async def _create_partitions(self, name: str, count: int, preferred: Sequence[int] | None) -> TopicMetadata:
        """All or nothing as far as the disk goes: the new partitions' directories are made
        before the store is told, so a failure there leaves no trace. A failure after the
        store's write closes the new leaders and leaves the store's count, which the next start
        opens."""
        topic = self._topics.get(name)
        if topic is None:
            raise UnknownTopic(name)
        if count <= topic.num_partitions:
            raise InvalidPartitions(name, topic.num_partitions, count, "the partition count can only grow")
        self.check_partition_limits(name, topic.num_partitions, count)
        configs = self.topic_configs(topic)
        await self._prepare_partition_dirs(topic, range(topic.num_partitions, count), configs)
        updated = await self.store.create_partitions(name, count)
        self._seen_at[("changed", name)] = time.monotonic()
        self._set_topic(updated)
        try:
            await self._lead_new_partitions(updated, range(topic.num_partitions, count), preferred)
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

    def check_partition_limits(self, name: str, current: int | None, requested: int) -> None:
        """PartitionPolicyViolation past max.partitions.per.request or max.partitions (also
        for validate_only requests, which create nothing)."""
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
        """Create the directories of new partitions before the store is told; on failure remove
        them all. Opening the logs follows the store's write."""
        try:
            await asyncio.to_thread(_claim_dirs, self.settings.logs_dir, topic, indexes)
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
        self._seen_at[("changed", name)] = time.monotonic()
        self._set_topic(updated)
        self._apply_configs(updated)
        log.info("topic %s configs are now %s", name, checked or "{}")
        return updated

    def _apply_configs(self, topic: TopicMetadata) -> None:
        effective = self.topic_configs(topic)
        rules = PartitionRules.from_configs(effective)
        log_config = rules.log_config(effective)
        for index in range(topic.num_partitions):
            leader = self._leaders.get((topic.name, index))
            if leader is not None:
                leader.update_rules(rules, log_config)
        self.uploader.wake()

    async def maintain(self) -> None:
        """One pass of time-based rolls, flush.ms, producer expiry and local retention."""
        now = self.clock()
        for leader in self.leaders():
            if not leader.closed:
                await leader.maintain(now)

    # --- internals -----------------------------------------------------------------------

    def _set_topic(self, topic: TopicMetadata) -> None:
        if topic.name not in self._topics:
            self._seen_at[topic.name] = time.monotonic()
        self._topics[topic.name] = topic
        self._topics_by_id[topic.topic_id] = topic

    async def _open_leader(
        self, topic: TopicMetadata, index: int, configs: dict[str, str], log_start_offset: int | None, leader_epoch: int,
        rules: tuple[PartitionRules, LogConfig] | None = None, stored: bool = True,
    ) -> None:
        path = self.settings.logs_dir / _dir_name(topic.name, index)
        marked = _claim_dir(path, topic.topic_id, mark=False)
        partition_rules, log_config = rules or _rules_of(configs)
        log_ = Log.open(path, log_config, self.clock(), log_start_offset=log_start_offset)
        self._seen_at[(topic.name, index)] = time.monotonic()
        self._leaders[(topic.name, index)] = await PartitionLeader.open(
            topic.name, topic.topic_id, index, log_, partition_rules, RemoteLog(self.storage, topic.name, index), self.store, self.uploader,
            self.wal, self.may_write, leader_epoch=leader_epoch, log_start_offset=log_start_offset,
            producer_id_expiration_ms=self.settings.producer_id_expiration_ms,
            now_ms=self.clock(), stored=stored,
        )  # fmt: skip
        self._leaders[(topic.name, index)].serving_since_ms = self.clock()
        if self.wal is not None:  # bucket readers then leave out what a leader fenced by this one wrote
            leader = self._leaders[(topic.name, index)]
            self.wal.epoch_marks.mark(topic.name, topic.topic_id, index, leader_epoch, leader.high_watermark, lambda: not leader.closed)
        if not marked:  # the directory's topic id: now if it holds batches, else with its first one
            if any(s.size_bytes for s in log_.segments):
                _claim_dir(path, topic.topic_id)
            else:
                self._leaders[(topic.name, index)].before_first_write.append(lambda: _claim_dir(path, topic.topic_id))


def _rules_of(configs: dict[str, str]) -> tuple[PartitionRules, LogConfig]:
    rules = PartitionRules.from_configs(configs)
    return rules, rules.log_config(configs)


def _dir_name(topic: str, index: int) -> str:
    return f"{topic}-{index}"


def _remove_dirs(logs_dir: Path, topic: str, indexes: range) -> None:
    for index in indexes:
        shutil.rmtree(logs_dir / _dir_name(topic, index), ignore_errors=True)


def _claim_dirs(logs_dir: Path, topic: TopicMetadata, indexes: Iterable[int]) -> None:
    """New partitions' directories, their topic id left for their first batch."""
    for index in indexes:
        _claim_dir(logs_dir / _dir_name(topic.name, index), topic.topic_id, mark=False)


def _claim_dir(path: Path, topic_id: uuid.UUID, *, mark: bool = True) -> bool:
    """Make `path` the directory of `topic_id`, wiping what an older topic of that name left.
    Without `mark`, its partition.metadata (the topic id) is not written yet: a directory
    without one holds nothing (a new partition writes it before its first batch) and is
    claimed by whichever topic opens it next. Returns whether it has one now."""
    marker = path / "partition.metadata"
    expected = f"version: 0\ntopic_id: {topic_id}\n"
    try:
        found: str | None = marker.read_text()
    except FileNotFoundError:
        found = None
    if found is not None and found != expected:
        log.warning("removing %s: it belongs to an older topic of the same name", path)
        shutil.rmtree(path, ignore_errors=True)
        found = None
    path.mkdir(parents=True, exist_ok=True)
    if found is None and mark:
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(expected)
        tmp.replace(marker)
        return True
    return found is not None
