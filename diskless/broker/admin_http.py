"""The admin HTTP endpoint (aiohttp): health, and what the Kafka protocol cannot say.

    GET /healthz                 200 "ok" once the broker serves
    GET /v1/topics               every topic with its partitions' state
    GET /v1/topics/{topic}       one topic: per partition the log start offset, the local log
                                 start offset, the high watermark, local and bucket segments
                                 and bytes, and the upload lag (segments and bytes waiting)

Read-only; bind it to 127.0.0.1 unless a trusted network needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from .app import Broker
    from .partition import Partition


def partition_state(broker: Broker, partition: Partition) -> dict[str, Any]:
    local = partition.log.segments
    waiting = broker.tiering.pending(partition) if partition.tiered else []
    return {
        "partition": partition.index,
        "log_start_offset": partition.log_start_offset,
        "local_log_start_offset": partition.log.log_start_offset,
        "high_watermark": partition.log.high_watermark,
        "local_segments": len(local),
        "local_bytes": sum(s.size_bytes for s in local),
        "remote_segments": len(partition.remote),
        "remote_bytes": sum(s.size_bytes for s in partition.remote),
        "upload_lag_segments": len(waiting),
        "upload_lag_bytes": sum(s.size_bytes for s in waiting),
    }


def topic_state(broker: Broker, name: str) -> dict[str, Any] | None:
    topic = broker.partitions.topics.get(name)
    if topic is None:
        return None
    partitions = [broker.partitions.get(name, index) for index in range(topic.num_partitions)]
    return {
        "topic": name,
        "topic_id": str(topic.topic_id),
        "configs": dict(topic.configs),
        "partitions": [partition_state(broker, p) for p in partitions if p is not None],
    }


class AdminHttp:
    def __init__(self, broker: Broker, host: str, port: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._health)
        app.router.add_get("/v1/topics", self._topics)
        app.router.add_get("/v1/topics/{topic}", self._topic)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # the bound port when 0 was asked

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _topics(self, request: web.Request) -> web.Response:
        names = sorted(self.broker.partitions.topics)
        return web.json_response({"topics": [topic_state(self.broker, name) for name in names]})

    async def _topic(self, request: web.Request) -> web.Response:
        state = topic_state(self.broker, request.match_info["topic"])
        if state is None:
            return web.json_response({"error": f"unknown topic {request.match_info['topic']}"}, status=404)
        return web.json_response(state)
