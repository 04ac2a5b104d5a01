"""Request handlers: one async function per Kafka API, registered in `HANDLERS` by api key.

A handler takes the broker and a parsed request and returns the kio response entity, or
None when Kafka sends no response (Produce with acks=0).
"""

from __future__ import annotations

from . import cluster, configs, fetch, offsets, produce, topics

HANDLERS = {
    0: produce.handle_produce,
    1: fetch.handle_fetch,
    2: offsets.handle_list_offsets,
    3: cluster.handle_metadata,
    18: cluster.handle_api_versions,
    19: topics.handle_create_topics,
    20: topics.handle_delete_topics,
    21: offsets.handle_delete_records,
    32: configs.handle_describe_configs,
    37: topics.handle_create_partitions,
    44: configs.handle_incremental_alter_configs,
    60: cluster.handle_describe_cluster,
}
