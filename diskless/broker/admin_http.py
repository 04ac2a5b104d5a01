"""The admin HTTP endpoint (aiohttp): health, and what the Kafka protocol cannot say.

    GET /                        the web console (console.py): topics, both tiers of each
                                 partition, consumer groups and their lag; /ui is the same
    GET /healthz                 200 "ok" once the broker serves
    GET /metrics                 Prometheus' text format (metrics.py names them): requests,
                                 bytes and messages per topic, both tiers per partition,
                                 uploads and remote reads, remote-read cache hits and
                                 misses, connections and request and response sizes,
                                 consumer group lag, the log cleaner, the transaction
                                 coordinator (open transactions, the oldest one's age, ids
                                 by state, transactions completed and timed out)
    GET /v1/topics               every topic with its partitions' state
    GET /v1/topics/{topic}       one topic: per partition the log start offset, the local log
                                 start offset, the high watermark, local and bucket segments
                                 and bytes, the upload lag (segments and bytes waiting), and
                                 the write-ahead objects holding its durable batches not yet
                                 released (offsets, objects, batches; from the metadata store);
                                 for a compacted topic also its cleaning: the dirty ratio now,
                                 the first dirty offset and when it was last cleaned
    GET /v1/brokers              every broker registered in the metadata store (the whole
                                 cluster): node id, address, rack, alive, controller, and the
                                 partitions it leads
    GET /v1/groups               every group this broker coordinates or that has committed
                                 offsets: its state, type and members (member id, client id,
                                 host, assigned partitions), and per partition the committed
                                 offset, high watermark, log end offset, lag and owning member
    GET /v1/transactions         every transactional id this broker coordinates: producer id
                                 and epoch, state, timeout, partitions and groups of its
                                 transaction, when it began and its age (open ones only)

Read-only; bind it to 127.0.0.1 unless a trusted network needs it. When the broker
authenticates Kafka clients (a SASL listener), every path but /healthz also needs HTTP basic
authentication, checked against the same SCRAM credentials (a failed one is logged and
delayed like a failed SASL login).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import struct
from collections.abc import Awaitable, Callable
import time
from typing import Any

from aiohttp import web

from metadata import MetadataStore

from . import console, metrics
from .cluster.membership import CONTROLLER_LEASE
from .groups import Groups
from .partition import PartitionLeader
from .compaction.cleaner import last_cleaned_ms, partition_cleaning
from .registry import Registry
from .tiering.uploader import Uploader
from .txn.transactions import Transactions


def partition_state(leader: PartitionLeader) -> dict[str, Any]:
    local = leader.local_segments
    waiting = leader.segments_to_upload() if leader.tiered else []
    remote = leader.remote.segments
    return {
        "partition": leader.index,
        "log_start_offset": leader.log_start_offset,
        "local_log_start_offset": leader.local_log_start_offset,
        "remote_end_offset": leader.remote.end_offset,
        "active_base_offset": local[-1].base_offset if local else leader.log_end_offset,
        "high_watermark": leader.high_watermark,
        "log_end_offset": leader.log_end_offset,
        "local_segments": len(local),
        "local_bytes": sum(s.size_bytes for s in local),
        "remote_segments": len(remote),
        "remote_bytes": sum(s.size_bytes for s in remote),
        "upload_lag_segments": len(waiting),
        "upload_lag_bytes": sum(s.size_bytes for s in waiting),
        **compaction_state(leader),
    }


def compaction_state(leader: PartitionLeader) -> dict[str, Any]:
    """A compacted partition's cleaning, computed now as the cleaner would (empty for others):
    its dirty ratio, first dirty offset, and when its last complete pass ended (epoch ms, None
    if never cleaned)."""
    planned = partition_cleaning(leader, int(time.time() * 1000))  # type: ignore[arg-type]
    if planned is None:
        return {}
    cleaning = planned[0]
    return {
        "compaction": {
            "dirty_ratio": round(cleaning.dirty_ratio, 4),
            "first_dirty_offset": cleaning.first_dirty_offset,
            "cleanable_bytes": cleaning.dirty_bytes,
            "last_cleaned_ms": last_cleaned_ms(leader.dir),
        }
    }


async def wal_state(store: MetadataStore, topic: str, partition: int) -> dict[str, Any]:
    """The partition's batches the store records in write-ahead objects: durable, and released
    (with their objects) once inside committed segments. Offsets are [start, end)."""
    batches = await store.list_wal_batches(topic, partition)
    if not batches:
        return {"wal_start_offset": None, "wal_end_offset": None, "wal_objects": 0, "wal_batches": 0, "wal_bytes": 0}
    return {
        "wal_start_offset": batches[0].base_offset,
        "wal_end_offset": batches[-1].last_offset + 1,
        "wal_objects": len({batch.object_key for batch in batches}),
        "wal_batches": len(batches),
        "wal_bytes": sum(batch.size_bytes for batch in batches),
    }


async def brokers_state(store: MetadataStore, node_id: int) -> dict[str, Any]:
    """The cluster as the metadata store has it: brokers, the controller, who leads what."""
    brokers = await store.list_brokers()
    controller_id = await store.lease_holder(CONTROLLER_LEASE)
    led: dict[int, list[dict[str, Any]]] = {}
    leaderless = 0
    for leadership in await store.list_partition_leaders():
        if leadership.leader_id is None:
            leaderless += 1
        else:
            led.setdefault(leadership.leader_id, []).append(
                {"topic": leadership.topic, "partition": leadership.partition, "leader_epoch": leadership.leader_epoch}
            )
    return {
        "node_id": node_id,
        "controller_id": controller_id,
        "partitions_without_leader": leaderless,
        "brokers": [
            {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack, "alive": b.alive,
             "controller": b.node_id == controller_id, "leaderships": led.get(b.node_id, [])}
            for b in sorted(brokers, key=lambda b: b.node_id)
        ],  # fmt: skip
    }


def topic_state(registry: Registry, name: str) -> dict[str, Any] | None:
    topic = registry.topics.get(name)
    if topic is None:
        return None
    leaders = [registry.leader(name, index) for index in range(topic.num_partitions)]
    return {
        "topic": name,
        "topic_id": str(topic.topic_id),
        "configs": dict(topic.configs),
        "partitions": [partition_state(leader) for leader in leaders if leader is not None],
    }


def consumer_assignment(assignment: bytes) -> list[tuple[str, int]]:
    """The partitions of a ConsumerProtocolAssignment (KIP-429 layout: int16 version, then an
    int32 count of topics, each an int16-length topic name and an int32 count of int32
    partitions; user data after them is ignored). Empty when the bytes are not that."""
    try:
        (count,) = struct.unpack_from(">i", assignment, 2)
        position, partitions = 6, []
        for _ in range(max(count, 0)):
            (length,) = struct.unpack_from(">h", assignment, position)
            topic = assignment[position + 2 : position + 2 + length].decode()
            position += 2 + length
            (n,) = struct.unpack_from(">i", assignment, position)
            partitions += [(topic, p) for p in struct.unpack_from(f">{max(n, 0)}i", assignment, position + 4)]
            position += 4 + 4 * max(n, 0)
        return partitions
    except (struct.error, UnicodeDecodeError):
        return []


async def group_members(groups: Groups, registry: Registry) -> dict[str, dict[str, Any]]:
    """Per group this broker coordinates: its state, type, and members with their assignments
    (classic groups: decoded from the consumer protocol; KIP-848 groups: by topic id)."""
    listed = await groups.list_groups()
    found: dict[str, dict[str, Any]] = {}
    classic = [g.group_id for g in listed if g.group_type == "classic"]
    for d in await groups.describe_groups(classic, api_version=5):
        members = [
            {"member_id": m.member_id, "instance_id": m.group_instance_id, "client_id": m.client_id, "client_host": m.client_host,
             "assignment": consumer_assignment(m.member_assignment) if d.protocol_type == "consumer" else []}
            for m in d.members
        ]  # fmt: skip
        found[d.group_id] = {"state": d.group_state, "type": "classic", "members": members}
    names = {topic.topic_id: name for name, topic in registry.topics.items()}
    for d in await groups.consumer_group_describe([g.group_id for g in listed if g.group_type != "classic"], strict=False):
        if d.error_code:
            continue
        members = [
            {"member_id": m.member_id, "instance_id": m.instance_id, "client_id": m.client_id, "client_host": m.client_host,
             "assignment": [(names[t], p) for t, ps in m.assignment.items() if t in names for p in ps]}
            for m in d.members
        ]  # fmt: skip
        found[d.group_id] = {"state": d.group_state, "type": "consumer", "members": members}
    for group in found.values():
        for member in group["members"]:
            member["assignment"] = [{"topic": t, "partition": p} for t, p in sorted(member["assignment"])]
    return found


def group_states(
    offsets: list[metrics.GroupOffset], registry: Registry, members: dict[str, dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Per group, per partition it committed or a member is assigned: committed offset, high
    watermark and lag (None where this broker does not lead the partition, or nothing was
    committed), the owning member; and the group's state and members when known."""
    members = members or {}
    groups: dict[str, list[dict[str, Any]]] = {group_id: [] for group_id in members}
    owners = {
        (group_id, a["topic"], a["partition"]): m["member_id"]
        for group_id, group in members.items()
        for m in group["members"]
        for a in m["assignment"]
    }
    committed_at = {(o.group_id, o.topic, o.partition) for o in offsets}
    unstarted = [metrics.GroupOffset(g, t, p, -1) for (g, t, p) in sorted(owners) if (g, t, p) not in committed_at]
    for committed in [*offsets, *unstarted]:
        leader = registry.leader(committed.topic, committed.partition)
        high_watermark = None if leader is None else leader.high_watermark
        groups.setdefault(committed.group_id, []).append({
            "topic": committed.topic,
            "partition": committed.partition,
            "committed_offset": committed.offset if committed.offset >= 0 else None,
            "high_watermark": high_watermark,
            "log_end_offset": None if leader is None else leader.log_end_offset,
            "lag": None if high_watermark is None or committed.offset < 0 else metrics.consumer_lag(committed.offset, high_watermark),
            "member_id": owners.get((committed.group_id, committed.topic, committed.partition)),
        })  # fmt: skip
    return [
        {
            "group_id": group_id,
            "state": members.get(group_id, {}).get("state"),
            "type": members.get(group_id, {}).get("type"),
            "members": members.get(group_id, {}).get("members", []),
            "partitions": sorted(partitions, key=lambda p: (p["topic"], p["partition"])),
        }
        for group_id, partitions in sorted(groups.items())
    ]


def transaction_states(records: list[Any], now_ms: int) -> list[dict[str, Any]]:
    """The coordinator's records (metadata.transactions.TransactionRecord, sorted by id) as
    the admin endpoint shows them; `age_ms` is now minus the start of an open transaction
    (Ongoing, PrepareCommit, PrepareAbort), None otherwise."""
    return [
        {
            "transactional_id": r.transactional_id,
            "producer_id": r.producer_id,
            "producer_epoch": r.producer_epoch,
            "state": r.state,
            "timeout_ms": r.timeout_ms,
            "partitions": [{"topic": t, "partition": p} for t, p in r.partitions],
            "groups": list(r.groups),
            "transaction_start_ms": r.txn_start_ms if r.txn_start_ms >= 0 else None,
            "age_ms": now_ms - r.txn_start_ms if r.state in metrics.OPEN_TRANSACTION_STATES and r.txn_start_ms >= 0 else None,
        }
        for r in records
    ]


class AdminHttp:
    def __init__(
        self, registry: Registry, uploader: Uploader, host: str, port: int, groups: Groups | None = None,
        authenticate: Callable[[str, str, str], Awaitable[bool]] | None = None, transactions: Transactions | None = None,
    ) -> None:  # fmt: skip
        self.registry = registry
        self.transactions = transactions
        # (user, password, client address) -> whether they match; None: no authentication.
        self.authenticate = authenticate
        self.uploader = uploader
        self.groups = groups
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None
        self._loop_lag: asyncio.Task[None] | None = None

    async def start(self) -> None:
        app = web.Application(middlewares=[self._basic_auth] if self.authenticate is not None else [])
        app.router.add_get("/", self._console)
        app.router.add_get("/ui", self._console)
        app.router.add_get("/healthz", self._health)
        app.router.add_get("/v1/groups", self._groups)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/v1/topics", self._topics)
        app.router.add_get("/v1/topics/{topic}", self._topic)
        app.router.add_get("/v1/brokers", self._brokers)
        app.router.add_get("/v1/transactions", self._transactions)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # the bound port when 0 was asked
        self._loop_lag = asyncio.create_task(metrics.watch_event_loop_lag(), name="event-loop-lag")

    async def stop(self) -> None:
        if self._loop_lag is not None:
            self._loop_lag.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_lag
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _basic_auth(self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if request.path == "/healthz":  # for orchestrators' probes, which carry no credentials
            return await handler(request)
        scheme, _, encoded = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "basic" and self.authenticate is not None:
            try:
                user, sep, password = base64.b64decode(encoded, validate=True).decode("utf-8").partition(":")
            except (binascii.Error, UnicodeDecodeError):
                user, sep, password = "", "", ""
            if sep and await self.authenticate(user, password, request.remote or ""):
                return await handler(request)
        raise web.HTTPUnauthorized(headers={"WWW-Authenticate": 'Basic realm="diskless"'})

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _console(self, request: web.Request) -> web.Response:
        return web.Response(text=console.PAGE, content_type="text/html", headers={"Cache-Control": "no-store"})

    async def _groups(self, request: web.Request) -> web.Response:
        members = await group_members(self.groups, self.registry) if self.groups is not None else {}
        return web.json_response({"groups": group_states(await self._group_offsets(), self.registry, members)})

    async def _metrics(self, request: web.Request) -> web.Response:
        state = metrics.BrokerStateCollector(self.registry.leaders(), await self._group_offsets(), time.time())
        reader = metrics.RemoteReaderCollector(self.registry.storage.reader.stats)
        collectors: list[Any] = [state, reader]
        if self.transactions is not None:
            collectors.append(metrics.TransactionCoordinatorCollector(await self._transaction_records(), self.transactions.stats, int(time.time() * 1000)))
        return web.Response(body=metrics.exposition(*collectors), headers={"Content-Type": metrics.CONTENT_TYPE})

    async def _transaction_records(self) -> list[Any]:
        """The records of the transactional ids this broker coordinates now (the coordinator
        reads the store first if the slots it holds changed)."""
        if self.transactions is None or not await self.transactions.ensure_loaded():
            return []
        return self.transactions.core.records()

    async def _transactions(self, request: web.Request) -> web.Response:
        records = await self._transaction_records()
        return web.json_response({"node_id": self.registry.settings.node_id, "transactions": transaction_states(records, int(time.time() * 1000))})

    async def _group_offsets(self) -> list[metrics.GroupOffset]:
        """Every committed offset of every group, from the metadata store (their one home)."""
        store = self.registry.store
        return [
            metrics.GroupOffset(group_id, o.topic, o.partition, o.offset)
            for group_id in sorted(await store.list_groups_with_offsets())
            for o in await store.fetch_offsets(group_id, None)
        ]

    async def _topics(self, request: web.Request) -> web.Response:
        names = sorted(self.registry.topics)
        return web.json_response({"topics": [await self._with_wal(topic_state(self.registry, name)) for name in names]})

    async def _topic(self, request: web.Request) -> web.Response:
        state = topic_state(self.registry, request.match_info["topic"])
        if state is None:
            return web.json_response({"error": f"unknown topic {request.match_info['topic']}"}, status=404)
        return web.json_response(await self._with_wal(state))

    async def _with_wal(self, state: dict[str, Any] | None) -> dict[str, Any] | None:
        """`state` with each partition's write-ahead figures (one store read per partition)."""
        if state is not None:
            for partition in state["partitions"]:
                partition.update(await wal_state(self.registry.store, state["topic"], partition["partition"]))
        return state

    async def _brokers(self, request: web.Request) -> web.Response:
        return web.json_response(await brokers_state(self.registry.store, self.registry.settings.node_id))
