"""DescribeLogDirs: the broker's one log directory and the size of each partition it holds.

`kafka-log-dirs.sh --describe` and UIs built on AdminClient.describeLogDirs (topic sizes per
broker) ask every broker. A broker here has one log directory (`<data dir>/logs`) and holds the
partitions it leads; as Kafka with tiered storage, a partition's size is that of its local
segments (the rest is in the bucket), its offset lag 0 (it is the leader). Partitions asked for
that are not held here are left out, as Kafka leaves out replicas it does not host. DESCRIBE
on the cluster is required (CLUSTER_AUTHORIZATION_FAILED, v3+: in the top-level error).
"""

from __future__ import annotations

import shutil
from typing import Any

from kio.schema.errors import ErrorCode

from diskless.wire import Request

from ..api import BrokerApi
from ..responses import NO_THROTTLE, make, response_module
from ..security.authorizer import DESCRIBE


async def handle_describe_log_dirs(broker: BrokerApi, request: Request) -> Any:
    mod = response_module(35, request.header.api_version)
    if not broker.security.cluster_allowed(DESCRIBE):
        return make(mod.DescribeLogDirsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed, results=())
    wanted = None if request.body.topics is None else {(t.topic, p) for t in request.body.topics for p in t.partitions}
    sizes: dict[str, list[tuple[int, int]]] = {}
    for leader in sorted(broker.registry.leaders(), key=lambda leader: (leader.topic, leader.index)):
        if wanted is None or (leader.topic, leader.index) in wanted:
            sizes.setdefault(leader.topic, []).append((leader.index, sum(s.size_bytes for s in leader.local_segments)))
    log_dir = broker.settings.log_dir
    usage = shutil.disk_usage(log_dir)
    topics = tuple(
        make(mod.DescribeLogDirsTopic, name=topic, partitions=tuple(
            make(mod.DescribeLogDirsPartition, partition_index=index, partition_size=size, offset_lag=0, is_future_key=False)
            for index, size in partitions
        ))  # fmt: skip
        for topic, partitions in sizes.items()
    )
    result = make(mod.DescribeLogDirsResult, error_code=ErrorCode.none, log_dir=log_dir, topics=topics,
                  total_bytes=usage.total, usable_bytes=usage.free)  # fmt: skip
    return make(mod.DescribeLogDirsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results=(result,))
