"""The admin HTTP endpoint (aiohttp): health, and what the Kafka protocol cannot say.

    GET /                        the web console (console.py): topics, both tiers of each
                                 partition, consumer groups and their lag; /ui is the same
    GET /healthz                 200 "ok" once the broker serves
    GET /metrics                 Prometheus' text format (metrics.py names them): requests,
                                 bytes and messages per topic, both tiers per partition,
                                 uploads and remote reads, consumer group lag
    GET /v1/topics               every topic with its partitions' state
    GET /v1/topics/{topic}       one topic: per partition the log start offset, the local log
                                 start offset, the high watermark, local and bucket segments
                                 and bytes, and the upload lag (segments and bytes waiting)
    GET /v1/groups               every group with committed offsets: per partition the
                                 committed offset, high watermark, log end offset and lag

Read-only; bind it to 127.0.0.1 unless a trusted network needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from aiohttp import web

from . import console, metrics
from .partition import PartitionLeader
from .registry import Registry
from .tiering.uploader import Uploader


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


def group_states(offsets: list[metrics.GroupOffset], registry: Registry) -> list[dict[str, Any]]:
    """Per group, per partition it committed: committed offset, high watermark and lag (None
    where this broker does not lead the partition)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for committed in offsets:
        leader = registry.leader(committed.topic, committed.partition)
        high_watermark = None if leader is None else leader.high_watermark
        groups.setdefault(committed.group_id, []).append({
            "topic": committed.topic,
            "partition": committed.partition,
            "committed_offset": committed.offset,
            "high_watermark": high_watermark,
            "log_end_offset": None if leader is None else leader.log_end_offset,
            "lag": None if high_watermark is None or committed.offset < 0 else metrics.consumer_lag(committed.offset, high_watermark),
        })  # fmt: skip
    return [
        {"group_id": group_id, "partitions": sorted(partitions, key=lambda p: (p["topic"], p["partition"]))}
        for group_id, partitions in sorted(groups.items())
    ]


class AdminHttp:
    def __init__(self, registry: Registry, uploader: Uploader, host: str, port: int) -> None:
        self.registry = registry
        self.uploader = uploader
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None
        self._loop_lag: asyncio.Task[None] | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/", self._console)
        app.router.add_get("/ui", self._console)
        app.router.add_get("/healthz", self._health)
        app.router.add_get("/v1/groups", self._groups)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/v1/topics", self._topics)
        app.router.add_get("/v1/topics/{topic}", self._topic)
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

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _console(self, request: web.Request) -> web.Response:
        return web.Response(text=console.PAGE, content_type="text/html", headers={"Cache-Control": "no-store"})

    async def _groups(self, request: web.Request) -> web.Response:
        return web.json_response({"groups": group_states(await self._group_offsets(), self.registry)})

    async def _metrics(self, request: web.Request) -> web.Response:
        state = metrics.BrokerStateCollector(self.registry.leaders(), await self._group_offsets(), time.time())
        return web.Response(body=metrics.exposition(state), headers={"Content-Type": metrics.CONTENT_TYPE})

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
        return web.json_response({"topics": [topic_state(self.registry, name) for name in names]})

    async def _topic(self, request: web.Request) -> web.Response:
        state = topic_state(self.registry, request.match_info["topic"])
        if state is None:
            return web.json_response({"error": f"unknown topic {request.match_info['topic']}"}, status=404)
        return web.json_response(state)
